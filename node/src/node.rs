//! What a node is, beyond its counters: the instance type (DMI), every RDMA device's PCI function and
//! ports (state, physical state, rate), the NVIDIA GPUs on the PCI bus, loaded kernel modules, the NVIDIA
//! driver and kernel release, and the memlock limit, all read under the same root as the counters
//! ([`Sysfs`]): `/` on a node, a directory of plain files in tests (`proc/self/limits` there stands for the
//! process's limits). Every file goes through the bounded reader (`efatop_files::attribute::read`).
//! Nothing here fails: what cannot be read is `None` or absent, or named where the health check must
//! say so ([`PcieLink::unreadable`]).

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use efatop_files::attribute::{read as read_attribute, ReadError};

use crate::sysfs::{attribute_text, entries, is_pci_address, parse_rdma_rate, Sysfs, Unreadable};

/// A PCI function as sysfs shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PciFunction {
    /// `dddd:bb:dd.f`.
    pub address: String,
    /// `0x1d0f`.
    pub vendor: Option<String>,
    /// `0xefa1`.
    pub device: Option<String>,
    /// `0x030200`.
    pub class: Option<String>,
    /// `None` when sysfs has no `numa_node` or says `-1` (the kernel does not know).
    pub numa_node: Option<u32>,
    /// The PCI functions above it, from the root port down (its bridges and switch ports), as the
    /// canonical sysfs path lists them; empty when the path shows none.
    pub upstream: Vec<String>,
    /// How its PCIe link trained (`current_link_*` against `max_link_*`); `None` when sysfs has no such
    /// files (a virtual function, an old kernel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<PcieLink>,
}

/// A PCIe link as sysfs shows it: `current_link_width` `16`, `current_link_speed` `32.0 GT/s PCIe`, and
/// the `max_link_*` the device and its slot can do. A link that is down reads width `0` and speed
/// `Unknown` (the kernel's words when the link status register says no speed), kept here as 0.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PcieLink {
    /// Lanes it trained at; 0 when the link is down.
    pub width: Option<u32>,
    pub max_width: Option<u32>,
    /// GT/s per lane it trained at; 0 when sysfs says `Unknown` (the link is down).
    pub speed_gts: Option<f64>,
    pub max_speed_gts: Option<f64>,
    /// The link files that are there but do not read as a width or speed, and those missing beside the
    /// others (the kernel shows all four or none): the link cannot be judged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<Unreadable>,
}

impl Eq for PcieLink {}

/// The most lanes a PCIe link has.
const WIDTH_MAX: u32 = 32;

impl PcieLink {
    /// Reads the four files under a function's directory; `None` when none of them is there.
    fn read(dir: &Path) -> Option<Self> {
        let mut link = Self::default();
        let mut present = false;
        let mut missing = Vec::new();
        let texts: Vec<Option<(PathBuf, String)>> = ["current_link_width", "max_link_width", "current_link_speed", "max_link_speed"]
            .into_iter()
            .map(|name| {
                let path = dir.join(name);
                match read_attribute(&path) {
                    Ok(text) => {
                        present = true;
                        Some((path, text.trim().to_string()))
                    }
                    Err(ReadError::Missing) => {
                        missing.push(path);
                        None
                    }
                    Err(ReadError::Bad(why)) => {
                        present = true;
                        link.unreadable.push(Unreadable { path, why });
                        None
                    }
                }
            })
            .collect();
        if !present {
            return None;
        }
        let shown = |text: &str| efatop_proto::words::printable(text, 24);
        let mut width = |read: &Option<(PathBuf, String)>| {
            let (path, text) = read.as_ref()?;
            match text.parse::<u32>() {
                Ok(width) if width <= WIDTH_MAX => Some(width),
                _ => {
                    let why = format!("`{}` is not a PCIe link width (0 to {WIDTH_MAX})", shown(text));
                    link.unreadable.push(Unreadable { path: path.clone(), why });
                    None
                }
            }
        };
        let (now_width, max_width) = (width(&texts[0]), width(&texts[1]));
        let mut speed = |read: &Option<(PathBuf, String)>| {
            let (path, text) = read.as_ref()?;
            let gts = parse_link_speed(text);
            if gts.is_none() {
                link.unreadable.push(Unreadable { path: path.clone(), why: format!("`{}` is not a PCIe link speed", shown(text)) });
            }
            gts
        };
        let (now_speed, max_speed) = (speed(&texts[2]), speed(&texts[3]));
        (link.width, link.max_width, link.speed_gts, link.max_speed_gts) = (now_width, max_width, now_speed, max_speed);
        for path in missing {
            link.unreadable.push(Unreadable { path, why: "missing, beside the other link files".into() });
        }
        if link.max_width == Some(0) {
            link.unreadable.push(Unreadable { path: dir.join("max_link_width"), why: "says 0: what the link can do is not known".into() });
        }
        if link.max_speed_gts == Some(0.0) {
            link.unreadable.push(Unreadable { path: dir.join("max_link_speed"), why: "says Unknown: what the link can do is not known".into() });
        }
        Some(link)
    }

    /// Down: it trained at no width or no speed.
    pub fn down(&self) -> bool {
        self.width == Some(0) || self.speed_gts == Some(0.0)
    }

    /// It claims to run wider or faster than it can: sysfs contradicts itself.
    pub fn above_max(&self) -> bool {
        let wider = matches!((self.width, self.max_width), (Some(now), Some(max)) if now > max);
        let faster = matches!((self.speed_gts, self.max_speed_gts), (Some(now), Some(max)) if now > max + 1e-6);
        wider || faster
    }

    /// One direction's usable bandwidth in Gbps at `width` lanes of `gts` GT/s: 8b/10b coding below
    /// 8 GT/s (PCIe 1 and 2), 128b/130b from PCIe 3 to 5 (PCIe 6's FLIT mode is near 242/256; counted
    /// as 128b/130b here, within 2%).
    pub fn gbps(width: u32, gts: f64) -> f64 {
        let coding = if gts < 8.0 { 8.0 / 10.0 } else { 128.0 / 130.0 };
        f64::from(width) * gts * coding
    }

    /// The bandwidth it trained at and the most it could, in Gbps; `None` unless all four are known.
    pub fn bandwidths(&self) -> Option<(f64, f64)> {
        Some((Self::gbps(self.width?, self.speed_gts?), Self::gbps(self.max_width?, self.max_speed_gts?)))
    }

    /// Trained below its width or speed.
    pub fn downgraded(&self) -> bool {
        let narrower = matches!((self.width, self.max_width), (Some(now), Some(max)) if now < max);
        let slower = matches!((self.speed_gts, self.max_speed_gts), (Some(now), Some(max)) if now + 1e-6 < max);
        narrower || slower
    }

    /// `x8 16 GT/s`; a link down `x0 Unknown`.
    pub fn describe(width: Option<u32>, gts: Option<f64>) -> String {
        let width = width.map_or_else(|| "x?".to_string(), |w| format!("x{w}"));
        let gts = match gts {
            Some(0.0) => "Unknown".to_string(),
            Some(g) => format!("{g} GT/s"),
            None => "? GT/s".to_string(),
        };
        format!("{width} {gts}")
    }
}

/// `32.0 GT/s PCIe` (or `8 GT/s`, `8.0 GT/s`, `2.5 GT/s`, as kernels have written it) → 32.0; `Unknown`
/// and older kernels' `Unknown speed` (no speed: the link is down) → 0; anything else → `None`.
pub fn parse_link_speed(text: &str) -> Option<f64> {
    let mut words = text.split_whitespace();
    let number = words.next()?;
    if number == "Unknown" {
        return Some(0.0);
    }
    let gts = number.parse::<f64>().ok().filter(|gts| gts.is_finite() && *gts > 0.0 && *gts <= 1024.0)?;
    (words.next() == Some("GT/s")).then_some(gts)
}

impl PciFunction {
    /// Reads the function whose sysfs directory `dir` is (or links to).
    fn read(dir: &Path) -> Option<Self> {
        let canonical = fs::canonicalize(dir).ok()?;
        let mut chain: Vec<String> = canonical
            .components()
            .map(|part| part.as_os_str().to_string_lossy().into_owned())
            .filter(|name| is_pci_address(name))
            .collect();
        let address = chain.pop()?;
        let text = |name: &str| attribute_text(&canonical.join(name)).map(|t| t.to_ascii_lowercase());
        let numa_node = text("numa_node").and_then(|t| t.parse::<i64>().ok()).and_then(|n| u32::try_from(n).ok());
        let link = PcieLink::read(&canonical);
        Some(Self { address, vendor: text("vendor"), device: text("device"), class: text("class"), numa_node, upstream: chain, link })
    }

    /// Whether `other` hangs below one of the same PCIe switches: the two share a bridge under the root
    /// port (`nvidia-smi topo`'s PIX or PXB), not only the root complex or the CPU.
    pub fn shares_switch_with(&self, other: &PciFunction) -> bool {
        let common = self.upstream.iter().zip(&other.upstream).take_while(|(a, b)| a == b).count();
        // The first shared function is the root port; a switch is a second one.
        common >= 2
    }
}

/// One port of an RDMA device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RdmaPort {
    /// `1`.
    pub port: String,
    /// `ACTIVE` (from `4: ACTIVE`); `None` when sysfs has no `state`.
    pub state: Option<String>,
    /// `LinkUp` (from `5: LinkUp`).
    pub phys_state: Option<String>,
    /// From `rate` (`100 Gb/sec (4X EDR)` → 100).
    pub rate_gbps: Option<f64>,
}

impl RdmaPort {
    pub fn is_active(&self) -> bool {
        self.state.as_deref() == Some("ACTIVE")
    }
}

/// An RDMA device (`/sys/class/infiniband/<name>`), its PCI function and ports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RdmaDevice {
    pub name: String,
    pub pci: Option<PciFunction>,
    pub ports: Vec<RdmaPort>,
}

impl RdmaDevice {
    /// An Elastic Fabric Adapter: Amazon's PCI vendor with an `efa*` device id, or, where sysfs does not
    /// say, the name the EFA driver gives its devices before rdma-core renames them (`efa_0`).
    pub fn is_efa(&self) -> bool {
        match self.pci.as_ref().map(|pci| (pci.vendor.as_deref(), pci.device.as_deref())) {
            Some((Some(vendor), Some(device))) => vendor == "0x1d0f" && device.starts_with("0xefa"),
            _ => self.name.starts_with("efa"),
        }
    }

    pub fn pci_address(&self) -> Option<&str> {
        self.pci.as_ref().map(|pci| pci.address.as_str())
    }
}

/// The memlock limit (`Max locked memory` in `/proc/self/limits`), in bytes; `None` is unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemlockLimit {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// Parses `/proc/<pid>/limits` text for `Max locked memory`.
pub fn parse_memlock(limits: &str) -> Option<MemlockLimit> {
    let line = limits.lines().find(|line| line.starts_with("Max locked memory"))?;
    let mut fields = line["Max locked memory".len()..].split_whitespace();
    let value = |text: Option<&str>| -> Option<Option<u64>> {
        match text? {
            "unlimited" => Some(None),
            number => number.parse().ok().map(Some),
        }
    };
    Some(MemlockLimit { soft: value(fields.next())?, hard: value(fields.next())? })
}

/// Where the DMI product name is, under the root.
pub const PRODUCT_NAME: &str = "sys/class/dmi/id/product_name";

impl Sysfs {
    fn file_text(&self, relative: &str) -> Option<String> {
        attribute_text(&self.root().join(relative))
    }

    /// The DMI product name: the EC2 instance type on AWS (`p5.48xlarge`); `None` when missing or blank.
    pub fn product_name(&self) -> Option<String> {
        self.read_product_name().ok().flatten()
    }

    /// The DMI product name, or why the file that should hold it cannot be read (`Ok(None)`: there is
    /// none, or it is blank, as on a machine outside EC2).
    pub fn read_product_name(&self) -> Result<Option<String>, Unreadable> {
        let path = self.root().join(PRODUCT_NAME);
        match read_attribute(&path) {
            Ok(text) => Ok(Some(text.trim().to_string()).filter(|name| !name.is_empty())),
            Err(ReadError::Missing) => Ok(None),
            Err(ReadError::Bad(why)) => Err(Unreadable { path, why }),
        }
    }

    /// Every RDMA device in name order, with its PCI function and ports.
    pub fn rdma_devices(&self) -> Vec<RdmaDevice> {
        entries(&self.root().join("sys/class/infiniband"))
            .into_iter()
            .map(|(name, dir)| {
                let pci = PciFunction::read(&dir.join("device"));
                let ports = entries(&dir.join("ports")).into_iter().map(|(port, path)| read_port(port, &path)).collect();
                RdmaDevice { name, pci, ports }
            })
            .collect()
    }

    /// Every PCI function under `sys/bus/pci/devices`, in address order.
    pub fn pci_functions(&self) -> Vec<PciFunction> {
        entries(&self.root().join("sys/bus/pci/devices")).into_iter().filter_map(|(_, dir)| PciFunction::read(&dir)).collect()
    }

    /// NVIDIA GPUs: vendor `0x10de`, a display or 3D controller (class `0x0300xx` or `0x0302xx`).
    pub fn nvidia_gpus(&self) -> Vec<PciFunction> {
        self.pci_functions()
            .into_iter()
            .filter(|pci| {
                pci.vendor.as_deref() == Some("0x10de")
                    && pci.class.as_deref().is_some_and(|class| class.starts_with("0x0300") || class.starts_with("0x0302"))
            })
            .collect()
    }

    /// Whether a kernel module is loaded (`sys/module/<name>`; a built-in one shows there too).
    pub fn module_loaded(&self, name: &str) -> bool {
        self.root().join("sys/module").join(name).is_dir()
    }

    /// The first line of `/proc/driver/nvidia/version`: `NVRM version: NVIDIA UNIX Open Kernel Module for
    /// x86_64  550.90.07 ...` (the open modules) or `... Kernel Module  535.x ...` (the proprietary ones).
    pub fn nvidia_driver(&self) -> Option<String> {
        self.file_text("proc/driver/nvidia/version").and_then(|text| text.lines().next().map(str::to_string))
    }

    /// `uname -r`, from `/proc/sys/kernel/osrelease`.
    pub fn kernel_release(&self) -> Option<String> {
        self.file_text("proc/sys/kernel/osrelease")
    }

    /// The memlock limit of this process (`proc/self/limits` under the root).
    pub fn memlock(&self) -> Option<MemlockLimit> {
        parse_memlock(&self.file_text("proc/self/limits")?)
    }

    /// Where sysfs is read from, for messages: `/sys/class/infiniband`, or the fake tree's path.
    pub fn shown(&self, relative: &str) -> PathBuf {
        self.root().join(relative)
    }
}

fn read_port(port: String, dir: &Path) -> RdmaPort {
    // `4: ACTIVE`, `5: LinkUp`: the name after the number.
    let named = |file: &str| {
        attribute_text(&dir.join(file))
            .map(|text| text.rsplit_once(':').map_or(text.as_str(), |(_, name)| name.trim()).to_string())
            .filter(|name| !name.is_empty())
    };
    let rate_gbps = attribute_text(&dir.join("rate")).as_deref().and_then(parse_rdma_rate);
    RdmaPort { port, state: named("state"), phys_state: named("phys_state"), rate_gbps }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memlock_limits_parse() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max locked memory         8388608              unlimited            bytes     \n";
        assert_eq!(parse_memlock(limits), Some(MemlockLimit { soft: Some(8_388_608), hard: None }));
        assert_eq!(
            parse_memlock("Max locked memory         unlimited            unlimited            bytes"),
            Some(MemlockLimit { soft: None, hard: None })
        );
        assert_eq!(parse_memlock("Max open files 1024 1024 files"), None);
    }

    #[test]
    fn link_speeds_parse_as_kernels_write_them() {
        assert_eq!(parse_link_speed("32.0 GT/s PCIe"), Some(32.0));
        assert_eq!(parse_link_speed("8 GT/s"), Some(8.0));
        assert_eq!(parse_link_speed("2.5 GT/s PCIe\n"), Some(2.5));
        assert_eq!(parse_link_speed("Unknown"), Some(0.0), "no speed: the link is down");
        assert_eq!(parse_link_speed("Unknown speed"), Some(0.0), "older kernels' words");
        for garbage in ["", "fast", "32.0", "NaN GT/s", "-8 GT/s", "0 GT/s", "1e300 GT/s"] {
            assert_eq!(parse_link_speed(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn a_link_reads_down_unreadable_or_contradicting_itself() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        assert_eq!(PcieLink::read(dir.path()), None, "no link files: not a PCIe function");
        for (name, text) in [("current_link_width", "16\n"), ("max_link_width", "16\n"), ("current_link_speed", "32.0 GT/s PCIe\n"), ("max_link_speed", "32.0 GT/s PCIe\n")] {
            write(name, text);
        }
        let healthy = PcieLink::read(dir.path()).unwrap();
        assert!(!healthy.down() && !healthy.above_max() && !healthy.downgraded() && healthy.unreadable.is_empty(), "{healthy:?}");
        write("current_link_width", "0\n");
        let down = PcieLink::read(dir.path()).unwrap();
        assert!(down.down() && down.unreadable.is_empty(), "{down:?}");
        write("current_link_width", "16\n");
        write("current_link_speed", "Unknown\n");
        assert!(PcieLink::read(dir.path()).unwrap().down());
        write("current_link_speed", "64.0 GT/s PCIe\n");
        assert!(PcieLink::read(dir.path()).unwrap().above_max());
        write("current_link_speed", "x16\n");
        let garbled = PcieLink::read(dir.path()).unwrap();
        assert_eq!(garbled.unreadable.len(), 1, "{garbled:?}");
        assert!(garbled.unreadable[0].to_string().ends_with("current_link_speed: `x16` is not a PCIe link speed"), "{garbled:?}");
        std::fs::remove_file(dir.path().join("current_link_speed")).unwrap();
        std::fs::remove_file(dir.path().join("current_link_width")).unwrap();
        let missing = PcieLink::read(dir.path()).unwrap();
        let named: Vec<String> = missing.unreadable.iter().map(ToString::to_string).collect();
        assert_eq!(named.len(), 2, "{named:?}");
        assert!(named.iter().all(|n| n.contains("current_link_") && n.ends_with("missing, beside the other link files")), "{named:?}");
        write("current_link_width", "4294967296\n");
        write("current_link_speed", "32.0 GT/s PCIe\n");
        assert!(PcieLink::read(dir.path()).unwrap().unreadable[0].why.contains("is not a PCIe link width"));
    }

    #[test]
    fn this_machine_has_its_own_memlock_limit() {
        assert!(Sysfs::new("/").memlock().is_some());
    }

    #[test]
    fn switches_are_shared_below_the_root_port_only() {
        let function = |upstream: &[&str]| PciFunction { upstream: upstream.iter().map(ToString::to_string).collect(), ..PciFunction::default() };
        let gpu = function(&["0000:44:01.0", "0000:45:00.0", "0000:46:01.0"]);
        let nic = function(&["0000:44:01.0", "0000:45:00.0", "0000:46:02.0"]);
        let same_root_port = function(&["0000:44:01.0", "0000:4a:00.0"]);
        let elsewhere = function(&["0000:aa:01.0", "0000:ab:00.0"]);
        assert!(gpu.shares_switch_with(&nic));
        assert!(!gpu.shares_switch_with(&same_root_port));
        assert!(!gpu.shares_switch_with(&elsewhere));
        assert!(!gpu.shares_switch_with(&function(&[])), "a flat tree shows no switch");
    }
}
