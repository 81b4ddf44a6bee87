//! Reading a node's NIC counters from sysfs: every RDMA device under `sys/class/infiniband` (its ports'
//! `hw_counters` and its own) and every network interface under `sys/class/net` (`statistics`), below a
//! root that is `/` on a real node and a directory of plain files in tests.
//!
//! A read never fails as a whole: a device that vanishes while it is read, a counter file that cannot
//! be read or does not hold a number, are left out of that read, and the rate layer sees the device go.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use efatop_proto::telemetry::NicKind;

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

/// The entries of a directory in name order; none when it cannot be read (no RDMA devices at all is
/// normal).
pub(crate) fn entries(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(read) = fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<(String, PathBuf)> =
        read.filter_map(Result::ok).map(|entry| (entry.file_name().to_string_lossy().into_owned(), entry.path())).collect();
    found.sort();
    found
}

/// Every file in `dir` that holds an unsigned number, by file name; `None` when the directory cannot be
/// listed (the device went away).
fn read_counters(dir: &Path) -> Option<BTreeMap<String, u64>> {
    let read = fs::read_dir(dir).ok()?;
    let mut counters = BTreeMap::new();
    for entry in read.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if NOT_COUNTERS.contains(&name.as_str()) {
            continue;
        }
        if let Some(value) = fs::read_to_string(entry.path()).ok().and_then(|text| text.trim().parse::<u64>().ok()) {
            counters.insert(name, value);
        }
    }
    Some(counters)
}

fn read_rdma(name: String, dir: &Path) -> Option<NicReading> {
    let mut counters: BTreeMap<String, u64> = BTreeMap::new();
    let mut link_gbps: Option<f64> = None;
    let mut any_port = false;
    for (_, port) in entries(&dir.join("ports")) {
        let Some(port_counters) = read_counters(&port.join("hw_counters")) else { continue };
        any_port = true;
        for (counter, value) in port_counters {
            let total = counters.entry(counter).or_insert(0);
            *total = total.wrapping_add(value);
        }
        if let Some(rate) = fs::read_to_string(port.join("rate")).ok().as_deref().and_then(parse_rdma_rate) {
            *link_gbps.get_or_insert(0.0) += rate;
        }
    }
    let device_counters = read_counters(&dir.join("hw_counters"));
    if !any_port && device_counters.is_none() {
        // No counters at all: the device is gone, or it is not one we can watch.
        return None;
    }
    for (counter, value) in device_counters.unwrap_or_default() {
        let key = if counters.contains_key(&counter) { format!("device_{counter}") } else { counter };
        counters.insert(key, value);
    }
    Some(NicReading { name, kind: NicKind::Rdma, pci_bus_id: pci_bus_id(dir), link_gbps, counters })
}

fn read_net(name: String, dir: &Path) -> Option<NicReading> {
    let counters = read_counters(&dir.join("statistics"))?;
    let link_gbps = fs::read_to_string(dir.join("speed")).ok().as_deref().and_then(parse_net_speed);
    Some(NicReading { name, kind: NicKind::Net, pci_bus_id: pci_bus_id(dir), link_gbps, counters })
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
    fn this_machine_has_a_loopback_with_counters() {
        // Every Linux machine has `lo`; its counters must be read without RDMA devices present.
        let nics = Sysfs::new("/").read_all();
        let lo = nics.iter().find(|nic| nic.name == "lo").expect("lo is read");
        assert_eq!(lo.kind, NicKind::Net);
        assert!(lo.counters.contains_key("rx_bytes") && lo.counters.contains_key("tx_bytes"), "{lo:?}");
        assert_eq!(lo.pci_bus_id, None);
    }
}
