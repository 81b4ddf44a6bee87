//! What a node is, beyond its counters: the instance type (DMI), every RDMA device's PCI function and
//! ports (state, physical state, rate), the NVIDIA GPUs on the PCI bus, loaded kernel modules, the NVIDIA
//! driver and kernel release, and the memlock limit, all read under the same root as the counters
//! ([`Sysfs`]): `/` on a node, a directory of plain files in tests (`proc/self/limits` there stands for the
//! process's limits). Nothing here fails: what cannot be read is `None` or absent, and the health check
//! says so.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::sysfs::{entries, is_pci_address, parse_rdma_rate, Sysfs};

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
/// the `max_link_*` the device and its slot can do.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PcieLink {
    pub width: Option<u32>,
    pub max_width: Option<u32>,
    /// GT/s per lane.
    pub speed_gts: Option<f64>,
    pub max_speed_gts: Option<f64>,
}

impl Eq for PcieLink {}

impl PcieLink {
    /// Reads the four files under a function's directory; `None` when none of them is there.
    fn read(dir: &Path) -> Option<Self> {
        let text = |name: &str| fs::read_to_string(dir.join(name)).ok();
        let width = |name: &str| text(name).and_then(|t| t.trim().parse::<u32>().ok()).filter(|w| *w > 0);
        let speed = |name: &str| text(name).as_deref().and_then(parse_link_speed);
        let link = Self {
            width: width("current_link_width"),
            max_width: width("max_link_width"),
            speed_gts: speed("current_link_speed"),
            max_speed_gts: speed("max_link_speed"),
        };
        (link != Self::default()).then_some(link)
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

    /// `x8 16 GT/s`.
    pub fn describe(width: Option<u32>, gts: Option<f64>) -> String {
        let width = width.map_or_else(|| "x?".to_string(), |w| format!("x{w}"));
        let gts = gts.map_or_else(|| "? GT/s".to_string(), |g| format!("{g} GT/s"));
        format!("{width} {gts}")
    }
}

/// `32.0 GT/s PCIe` (or `8 GT/s`, `2.5 GT/s`) → 32.0; `Unknown` → `None`.
pub fn parse_link_speed(text: &str) -> Option<f64> {
    let number = text.split_whitespace().next()?;
    number.parse::<f64>().ok().filter(|gts| *gts > 0.0)
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
        let text = |name: &str| fs::read_to_string(canonical.join(name)).ok().map(|t| t.trim().to_ascii_lowercase());
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

impl Sysfs {
    fn file_text(&self, relative: &str) -> Option<String> {
        fs::read_to_string(self.root().join(relative)).ok().map(|text| text.trim().to_string()).filter(|text| !text.is_empty())
    }

    /// The DMI product name: the EC2 instance type on AWS (`p5.48xlarge`), read as the topology reads it.
    pub fn product_name(&self) -> Option<String> {
        efatop_topology::dmi_product_name(self.root())
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
        fs::read_to_string(dir.join(file))
            .ok()
            .map(|text| text.trim().rsplit_once(':').map_or(text.trim(), |(_, name)| name.trim()).to_string())
            .filter(|name| !name.is_empty())
    };
    let rate_gbps = fs::read_to_string(dir.join("rate")).ok().as_deref().and_then(parse_rdma_rate);
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
