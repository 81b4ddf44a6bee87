//! Reading a node's sysfs: every file of `/sys` and `/proc` goes through the one bounded attribute reader
//! (`efatop_files::attribute`) and counts through [`parse_counter`], and with it the NIC counters: every RDMA
//! device under `sys/class/infiniband` (its ports' `hw_counters` and its own) and every network interface
//! under `sys/class/net` (`statistics`), below a root that is `/` on a real node and a directory of plain
//! files in tests.
//!
//! A sysfs attribute is a regular file of at most one page: the reader opens it non-blocking and without
//! following a final symbolic link, refuses anything else (a FIFO, a character device, a socket, a link, a
//! directory), and reads at most a page and a byte, so that no file planted where an attribute should be
//! can stall or flood a reader. What it refuses is said, with the path.
//!
//! A counters read never fails as a whole: a device that vanishes while it is read is left out of that
//! read, and the rate layer sees the device go; a counter file that cannot be read or does not hold a
//! count is left out of the counters and named in [`NicReading::unreadable`].

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

use efatop_files::attribute::{read as read_attribute, ReadError};

use serde::{Deserialize, Serialize};

use efatop_proto::telemetry::NicKind;
use efatop_proto::words::{printable, NAME_MAX};

/// The most entries a directory of a node's tree is listed with (a p5 has 32 RDMA devices, a few hundred
/// PCI functions, some 40 counters a device): a crafted tree of millions costs no more.
pub const ENTRIES_MAX: usize = 16_384;

/// A file that could not be read, and why: `/sys/.../hw_counters/rx_drops: `abc` is not a count`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unreadable {
    pub path: PathBuf,
    pub why: String,
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", printable(&self.path.to_string_lossy(), NAME_MAX), self.why)
    }
}

/// [`read_attribute`], trimmed; `None` when missing, blank or unreadable (for what a node may lack).
pub(crate) fn attribute_text(path: &Path) -> Option<String> {
    read_attribute(path).ok().map(|text| text.trim().to_string()).filter(|text| !text.is_empty())
}

/// The largest count a counter holds: below 2^63 ([`parse_counter`]).
pub const COUNT_MAX: u64 = (1 << 63) - 1;

/// The bytes a counter file is read into by [`read_counter_at`]: a u64 is at most 20 digits and a newline,
/// so a read that fills it is not a count.
pub const COUNTER_READ: usize = 32;

/// A counter's value from its text (`12345\n`, as the kernel writes a u64). Not a count, and said why:
/// empty, negative (`-1`), not digits (`abc`), more than a u64 holds, or 2^63 and above, which is what a
/// negative number printed unsigned looks like (an error code, `-1` as `18446744073709551615`); no
/// counter of a node reaches it (2^63 bytes is 5.8 years at 400 Gbps).
pub fn parse_counter(text: &str) -> Result<u64, String> {
    let digits = text.trim_matches(|c: char| c.is_ascii_whitespace());
    let quoted = || format!("`{}`", printable(digits, 24));
    if digits.is_empty() {
        return Err("empty, not a count".into());
    }
    if digits.starts_with('-') {
        return Err(format!("{} is negative, not a count", quoted()));
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{} is not a count", quoted()));
    }
    let value: u64 = digits.parse().map_err(|_| format!("{} is more than a 64-bit counter holds", quoted()))?;
    if value > COUNT_MAX {
        return Err(format!("{} is 2^63 or more: a negative number printed unsigned, not a count", quoted()));
    }
    Ok(value)
}

/// The counter at `path`: [`read_attribute`] then [`parse_counter`].
pub fn read_counter(path: &Path) -> Result<u64, String> {
    parse_counter(&read_attribute(path).map_err(|err| err.to_string())?)
}

/// The counter of an attribute opened once ([`open_attribute`]) and read again at offset 0 into
/// `scratch` (no allocation): [`parse_counter`] of what it holds, a file that fills `scratch` is not one.
pub fn read_counter_at(file: &File, scratch: &mut [u8; COUNTER_READ]) -> Result<u64, String> {
    use std::os::unix::fs::FileExt;
    let len = file.read_at(scratch, 0).map_err(|err| err.to_string())?;
    if len == scratch.len() {
        return Err(format!("longer than {} bytes, not a count", COUNTER_READ - 1));
    }
    parse_counter(std::str::from_utf8(&scratch[..len]).map_err(|_| "not text".to_string())?)
}

/// One read of one NIC: its identity and every counter it had.
#[derive(Clone, Debug, PartialEq)]
pub struct NicReading {
    /// `rdmap79s0`, `eth0`, `lo`.
    pub name: String,
    pub kind: NicKind,
    /// `dddd:bb:dd.f`, from the `device` link; `None` for virtual interfaces.
    pub pci_bus_id: Option<String>,
    /// From `ports/N/rate` (summed over ports) or `speed`; `None` when sysfs does not say.
    pub link_gbps: Option<f64>,
    /// Counter name → value. An RDMA device's port counters are summed over its ports; its device-wide
    /// counters keep their names unless a port counter has the same one, then they are `device_<name>`.
    pub counters: BTreeMap<String, u64>,
    /// The counter files that are there but could not be read as a count, with why ([`read_counter`]):
    /// left out of `counters`, never read as 0.
    pub unreadable: Vec<Unreadable>,
}

/// A sysfs tree to read NICs from.
#[derive(Clone, Debug)]
pub struct Sysfs {
    root: PathBuf,
}

/// Files in a counters directory that are settings, not counters.
const NOT_COUNTERS: &[&str] = &["lifespan"];

impl Sysfs {
    /// The tree under `root` (`/` for this machine).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn infiniband(&self) -> PathBuf {
        self.root.join("sys/class/infiniband")
    }

    fn net(&self) -> PathBuf {
        self.root.join("sys/class/net")
    }

    /// Every RDMA device, then every network interface, each in name order.
    pub fn read_all(&self) -> Vec<NicReading> {
        let rdma = entries(&self.infiniband()).into_iter().filter_map(|(name, dir)| read_rdma(name, &dir));
        let net = entries(&self.net()).into_iter().filter_map(|(name, dir)| read_net(name, &dir));
        rdma.chain(net).collect()
    }
}

/// The entries of a directory in name order, at most [`ENTRIES_MAX`]; none when it cannot be read (no
/// RDMA devices at all is normal).
pub(crate) fn entries(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(read) = fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<(String, PathBuf)> = read
        .filter_map(Result::ok)
        .take(ENTRIES_MAX)
        .map(|entry| (entry.file_name().to_string_lossy().into_owned(), entry.path()))
        .collect();
    found.sort();
    found
}

/// The counters of one directory: every count by file name, and the files that hold none.
#[derive(Default)]
struct Counters {
    values: BTreeMap<String, u64>,
    unreadable: Vec<Unreadable>,
}

/// Every file in `dir` but the settings ([`NOT_COUNTERS`]), each through [`read_counter`]; `None` when
/// the directory cannot be listed (the device went away).
fn read_counters(dir: &Path) -> Option<Counters> {
    fs::read_dir(dir).ok()?;
    let mut counters = Counters::default();
    for (name, path) in entries(dir) {
        if NOT_COUNTERS.contains(&name.as_str()) {
            continue;
        }
        let value = match read_attribute(&path) {
            // Gone since the listing (a device going away, a file replaced): not there.
            Err(ReadError::Missing) => continue,
            Err(ReadError::Bad(why)) => Err(why),
            Ok(text) => parse_counter(&text),
        };
        match value {
            Ok(value) => {
                counters.values.insert(name, value);
            }
            Err(why) => counters.unreadable.push(Unreadable { path, why }),
        }
    }
    Some(counters)
}

fn read_rdma(name: String, dir: &Path) -> Option<NicReading> {
    let mut counters: BTreeMap<String, u64> = BTreeMap::new();
    let mut unreadable = Vec::new();
    let mut link_gbps: Option<f64> = None;
    let mut any_port = false;
    let ports_dir = dir.join("ports");
    for (_, port) in entries(&ports_dir) {
        let Some(port_counters) = read_counters(&port.join("hw_counters")) else { continue };
        any_port = true;
        unreadable.extend(port_counters.unreadable);
        for (counter, value) in port_counters.values {
            // Summed over ports; a sum beyond what a counter holds is not a count either.
            let total = counters.get(&counter).copied().unwrap_or(0);
            if let Some(sum) = total.checked_add(value).filter(|sum| *sum <= COUNT_MAX) {
                counters.insert(counter, sum);
            } else {
                counters.remove(&counter);
                let path = ports_dir.join("*/hw_counters").join(&counter);
                unreadable.push(Unreadable { path, why: "the ports' sum is 2^63 or more, not a count".into() });
            }
        }
        if let Some(rate) = attribute_text(&port.join("rate")).as_deref().and_then(parse_rdma_rate) {
            *link_gbps.get_or_insert(0.0) += rate;
        }
    }
    let device_counters = read_counters(&dir.join("hw_counters"));
    if !any_port && device_counters.is_none() {
        // No counters at all: the device is gone, or it is not one we can watch.
        return None;
    }
    let device_counters = device_counters.unwrap_or_default();
    unreadable.extend(device_counters.unreadable);
    for (counter, value) in device_counters.values {
        let key = if counters.contains_key(&counter) { format!("device_{counter}") } else { counter };
        counters.insert(key, value);
    }
    Some(NicReading { name, kind: NicKind::Rdma, pci_bus_id: pci_bus_id(dir), link_gbps, counters, unreadable })
}

fn read_net(name: String, dir: &Path) -> Option<NicReading> {
    let Counters { values: counters, unreadable } = read_counters(&dir.join("statistics"))?;
    let link_gbps = attribute_text(&dir.join("speed")).as_deref().and_then(parse_net_speed);
    Some(NicReading { name, kind: NicKind::Net, pci_bus_id: pci_bus_id(dir), link_gbps, counters, unreadable })
}

/// `100 Gb/sec (4X EDR)` → 100. Rates in other units (`2.5 Gb/sec`, `25 Gb/sec`) are all Gb/sec in the
/// kernel's `rate` file; anything else is not a rate.
pub fn parse_rdma_rate(text: &str) -> Option<f64> {
    let before_detail = text.split('(').next().unwrap_or_default().trim();
    let value: f64 = before_detail.strip_suffix("Gb/sec")?.trim().parse().ok()?;
    (value.is_finite() && value > 0.0).then_some(value)
}

/// A net interface's `speed` in Mb/s → Gbps; `-1`, `0`, empty or unreadable (a down link, loopback) →
/// unknown.
pub fn parse_net_speed(text: &str) -> Option<f64> {
    let mbps: i64 = text.trim().parse().ok()?;
    (mbps > 0).then(|| mbps as f64 / 1000.0)
}

/// The PCI address of the device behind `dir/device`: the last component of the link's target that is
/// a PCI address (a virtio net device sits one level below its PCI function).
fn pci_bus_id(dir: &Path) -> Option<String> {
    let link = dir.join("device");
    let target = fs::canonicalize(&link).or_else(|_| fs::read_link(&link)).ok()?;
    target
        .components()
        .rev()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .find(|name| is_pci_address(name))
        .and_then(|name| efatop_topology::normalize_bus_id(&name))
}

/// `0000:4f:00.0`: a domain, bus, device and function (sysfs always writes the domain). Keeps names such as
/// `virtio2` or `pci0000:00` out.
pub(crate) fn is_pci_address(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 12
        && bytes[4] == b':'
        && bytes[7] == b':'
        && bytes[10] == b'.'
        && text.chars().enumerate().all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use efatop_files::attribute::open as open_attribute;

    #[test]
    fn rdma_rates_parse() {
        assert_eq!(parse_rdma_rate("100 Gb/sec (4X EDR)\n"), Some(100.0));
        assert_eq!(parse_rdma_rate("200 Gb/sec (4X HDR)"), Some(200.0));
        assert_eq!(parse_rdma_rate("2.5 Gb/sec (1X SDR)"), Some(2.5));
        assert_eq!(parse_rdma_rate("400 Gb/sec"), Some(400.0));
        assert_eq!(parse_rdma_rate("0 Gb/sec (unknown)"), None);
        assert_eq!(parse_rdma_rate("fast"), None);
    }

    #[test]
    fn net_speeds_parse() {
        assert_eq!(parse_net_speed("25000\n"), Some(25.0));
        assert_eq!(parse_net_speed("100"), Some(0.1));
        assert_eq!(parse_net_speed("-1"), None);
        assert_eq!(parse_net_speed(""), None);
    }

    #[test]
    fn pci_addresses_are_told_from_other_names() {
        assert!(is_pci_address("0000:4f:00.0"));
        assert!(!is_pci_address("pci0000:00"));
        assert!(!is_pci_address("virtio2"));
        assert!(!is_pci_address("0000:4f:00.0x"));
    }

    #[test]
    fn counters_are_counts_and_nothing_else() {
        assert_eq!(parse_counter("12345\n"), Ok(12345));
        assert_eq!(parse_counter("0"), Ok(0));
        assert_eq!(parse_counter(&(i64::MAX as u64).to_string()), Ok(i64::MAX as u64));
        for (text, says) in [
            ("", "empty"),
            ("\n", "empty"),
            ("abc", "`abc` is not a count"),
            ("-1", "negative"),
            ("12 34", "not a count"),
            ("+5", "not a count"),
            ("18446744073709551616", "more than a 64-bit counter holds"),
            ("18446744073709551615", "2^63 or more"),
            ("9223372036854775808", "2^63 or more"),
        ] {
            let why = parse_counter(text).expect_err(text);
            assert!(why.contains(says), "{text:?}: {why}");
        }
        // A long text is quoted cut, not whole.
        let why = parse_counter(&"x".repeat(5000)).expect_err("long");
        assert!(why.len() < 100, "{why}");
    }

    #[test]
    fn a_counter_is_read_through_the_attribute_reader() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rx_drops");
        std::fs::write(&file, "7\n").unwrap();
        assert_eq!(read_counter(&file), Ok(7));
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        assert_eq!(read_counter(&fifo), Err("a FIFO, not a sysfs attribute (a regular file)".into()));
    }

    #[test]
    fn a_counter_read_again_into_a_fixed_buffer_is_judged_as_one_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tx_bytes");
        std::fs::write(&path, "42\n").unwrap();
        let file = open_attribute(&path).unwrap();
        let mut scratch = [0_u8; COUNTER_READ];
        assert_eq!(read_counter_at(&file, &mut scratch), Ok(42));
        std::fs::write(&path, "9".repeat(10 << 20)).unwrap();
        assert!(read_counter_at(&file, &mut scratch).unwrap_err().starts_with("longer than"));
        std::fs::write(&path, "-1\n").unwrap();
        assert!(read_counter_at(&file, &mut scratch).unwrap_err().contains("negative"));
    }

    #[test]
    fn unreadable_counters_are_named_not_read_as_zero_and_a_sum_over_ports_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let device = dir.path().join("sys/class/infiniband/rdmap79s0");
        for port in ["1", "2"] {
            let counters = device.join("ports").join(port).join("hw_counters");
            std::fs::create_dir_all(&counters).unwrap();
            std::fs::write(counters.join("tx_bytes"), "5\n").unwrap();
            std::fs::write(counters.join("rx_drops"), format!("{}\n", i64::MAX)).unwrap();
        }
        std::fs::write(device.join("ports/1/hw_counters/retrans_pkts"), "abc\n").unwrap();
        let nics = Sysfs::new(dir.path()).read_all();
        let nic = &nics[0];
        assert_eq!(nic.counters.get("tx_bytes"), Some(&10));
        assert_eq!(nic.counters.get("retrans_pkts"), None);
        assert_eq!(nic.counters.get("rx_drops"), None, "a sum beyond a count is not one");
        let named: Vec<String> = nic.unreadable.iter().map(ToString::to_string).collect();
        assert_eq!(named.len(), 2, "{named:?}");
        assert!(named.iter().any(|n| n.ends_with("ports/1/hw_counters/retrans_pkts: `abc` is not a count")), "{named:?}");
        assert!(named.iter().any(|n| n.contains("rx_drops: the ports' sum is 2^63 or more")), "{named:?}");
    }

    #[test]
    fn this_machine_has_a_loopback_with_counters() {
        // Every Linux machine has `lo`; its counters must be read without RDMA devices present.
        let nics = Sysfs::new("/").read_all();
        let lo = nics.iter().find(|nic| nic.name == "lo").expect("lo is read");
        assert_eq!(lo.kind, NicKind::Net);
        assert!(lo.counters.contains_key("rx_bytes") && lo.counters.contains_key("tx_bytes"), "{lo:?}");
        assert_eq!(lo.pci_bus_id, None);
    }
}
