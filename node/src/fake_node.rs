//! A whole fake node for the health check (`efatop check --sysfs-root DIR`): the tree of [`crate::FakeSysfs`]
//! for any instance type efatop has a layout of (p5.48xlarge, p5e.48xlarge, p5en.48xlarge, p4d.24xlarge,
//! p4de.24xlarge, p6-b200.48xlarge, p6-b300.48xlarge, p6e-gb200.36xlarge), built from
//! that layout (`efatop_topology::instance_layout`), plus what the check reads beyond counters:
//!
//! - `sys/class/dmi/id/product_name`: the instance type;
//! - each EFA as a PCI function (vendor, device id, class, `numa_node`) under a PCIe switch shared with the
//!   GPUs the layout puts next to it (`sys/devices/pci0000:00/<root port>/<switch>/<function>`; the root
//!   port and switch addresses are placeholders, `0000:00:0N.0` and `0000:eN:00.0`, which no layout
//!   uses), linked from `sys/class/infiniband/<dev>/device` and `sys/bus/pci/devices`;
//! - each port's `state` (`4: ACTIVE`), `phys_state` (`5: LinkUp`) and `rate`, and the EFA counters (on EFA
//!   v3 and v4 types also the newer driver's device counters, [`crate::fake::efa_device_counters`]);
//! - the GPUs as NVIDIA PCI functions (class `0x030200`) at the layout's addresses and NUMA nodes;
//! - `sys/module/{nvidia,nvidia_peermem,efa}`, `proc/driver/nvidia/version` (an open kernel module),
//!   `proc/sys/kernel/osrelease` and `proc/self/limits` with memlock unlimited;
//! - `lo` and `eth0`.
//!
//! [`FakeNode::plant`] then breaks one thing, as a node breaks ([`Fault`]).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use efatop_topology::{instance_layout, NicKind as LayoutNicKind, NodeTopology};

use crate::fake::{efa_device_counters, initial_value, EFA_PORT_COUNTERS};
use crate::FakeSysfs;

/// One thing wrong with a node, as the health check should name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// An EFA device is gone (its driver did not bind, or the device did not enumerate).
    MissingNic,
    /// An EFA port is `DOWN` (`phys_state` `Disabled`).
    PortDown,
    /// `impaired_remote_conn_events` grows while the check watches (planted by [`FakeNode::bump`] during
    /// the window; [`FakeNode::plant`] alone does nothing for it).
    ImpairedRising,
    /// An EFA reports a NUMA node other than its type's.
    WrongNuma,
    /// The memlock limit is 64 KiB.
    LowMemlock,
    /// A GPU's PCIe link trained at x8 of its x16 ([`FakeNode::victim_gpu`]).
    GpuLinkX8,
    /// An EFA's PCIe link trained at x8 of its x16.
    EfaLinkX8,
    /// A GPU's PCIe link is down: `current_link_width` 0, `current_link_speed` `Unknown`.
    GpuLinkDown,
    /// An EFA's PCIe link is down, as [`Fault::GpuLinkDown`].
    EfaLinkDown,
    /// The kernel log holds this Xid for [`FakeNode::victim_gpu`] (`xid-79`).
    Xid(u32),
}

impl Fault {
    pub const ALL: [Fault; 10] = [
        Fault::MissingNic,
        Fault::PortDown,
        Fault::ImpairedRising,
        Fault::WrongNuma,
        Fault::LowMemlock,
        Fault::GpuLinkX8,
        Fault::EfaLinkX8,
        Fault::GpuLinkDown,
        Fault::EfaLinkDown,
        Fault::Xid(79),
    ];

    /// Xids of each action of NVIDIA's catalog as efatop maps it ([`crate::xid::catalog`]): an application's
    /// fault (`watch`); a double-bit ECC error, a GSP RPC timeout, an `NVLink5` error and Xid 154 naming a GPU
    /// reset (`reset`); a GPU off the bus (`reboot`); auxiliary power not connected (`replace`).
    pub const XID_CLASSES: [u32; 7] = [13, 48, 119, 145, 154, 79, 54];

    /// The name `efatop check --plant` and the tests use.
    pub fn name(self) -> String {
        match self {
            Fault::MissingNic => "missing-nic".into(),
            Fault::PortDown => "port-down".into(),
            Fault::ImpairedRising => "impaired-rising".into(),
            Fault::WrongNuma => "wrong-numa".into(),
            Fault::LowMemlock => "low-memlock".into(),
            Fault::GpuLinkX8 => "gpu-link-x8".into(),
            Fault::EfaLinkX8 => "efa-link-x8".into(),
            Fault::GpuLinkDown => "gpu-link-down".into(),
            Fault::EfaLinkDown => "efa-link-down".into(),
            Fault::Xid(xid) => format!("xid-{xid}"),
        }
    }

    /// A name of [`Fault::name`]'s; `xid-N` for any Xid number.
    pub fn parse(name: &str) -> Option<Fault> {
        if let Some(number) = name.strip_prefix("xid-") {
            return number.parse().ok().filter(|n| (1..10_000).contains(n)).map(Fault::Xid);
        }
        Fault::ALL.into_iter().find(|fault| fault.name() == name)
    }
}

/// What a fake node's PCIe links train at: x16 at the generation of the type's parts (ASSUMED: Gen5 for
/// Hopper and Blackwell GPUs and EFA v3/v4, Gen4 for A100 and EFA v1/v2; no source gives EFA's).
fn link_speed(pci_id: &str, gpu: bool, efa_generation: Option<u8>) -> &'static str {
    let gen5 = if gpu { !pci_id.ends_with("20b0") && !pci_id.ends_with("20b2") } else { efa_generation.is_some_and(|g| g >= 3) };
    if gen5 { "32.0 GT/s PCIe" } else { "16.0 GT/s PCIe" }
}

/// The text the NVIDIA driver logs with an Xid, roughly (the number is read, and 154's recovery action).
fn xid_text(xid: u32) -> String {
    match xid {
        79 => "pid=0, GPU has fallen off the bus.".into(),
        154 => "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)".into(),
        _ => format!("pid=4242, name=python3, {}", crate::xid::action(xid).1),
    }
}

/// A fake node on disk, written by [`FakeNode::write`].
#[derive(Clone, Debug)]
pub struct FakeNode {
    counters: FakeSysfs,
    layout: NodeTopology,
    instance_type: String,
}

/// The PCI directory under `root` of a function at `address` behind switch `switch` (0-based).
fn function_dir(root: &Path, switch: usize, address: &str) -> PathBuf {
    root.join("sys/devices/pci0000:00")
        .join(format!("0000:00:{:02x}.0", switch + 1))
        .join(format!("0000:{:02x}:00.0", 0xe0 + switch))
        .join(address)
}

/// `target` relative to the directory that holds `link`, both under `root`.
fn relative_to(link_dir: &Path, target: &Path, root: &Path) -> PathBuf {
    let depth = link_dir.strip_prefix(root).map_or(0, |inside| inside.components().count());
    let mut relative = PathBuf::new();
    for _ in 0..depth {
        relative.push("..");
    }
    relative.join(target.strip_prefix(root).unwrap_or(target))
}

fn symlink_replacing(target: &Path, link: &Path) -> io::Result<()> {
    if fs::symlink_metadata(link).is_ok() {
        fs::remove_file(link)?;
    }
    std::os::unix::fs::symlink(target, link)
}

fn write_lines(path: &Path, text: &str) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::write(path, format!("{text}\n"))
}

const LIMITS_HEADER: &str = "Limit                     Soft Limit           Hard Limit           Units     ";

fn limits_text(memlock: &str) -> String {
    format!(
        "{LIMITS_HEADER}\nMax open files            1048576              1048576              files     \n\
         Max locked memory         {memlock:<20} {memlock:<20} bytes     \n"
    )
}

impl FakeNode {
    /// Writes a healthy node of `instance_type` under `root` (created if missing). Errors when the type has
    /// no layout.
    pub fn write(root: impl Into<PathBuf>, instance_type: &str) -> io::Result<Self> {
        let root = root.into();
        let layout = instance_layout(instance_type)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("no built-in layout for {instance_type}")))?
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err.to_string()))?;
        let node = Self { counters: FakeSysfs::open(&root), layout, instance_type: instance_type.to_string() };
        write_lines(&root.join("sys/class/dmi/id/product_name"), instance_type)?;
        node.write_pci()?;
        for module in ["nvidia", "nvidia_peermem", "efa"] {
            fs::create_dir_all(root.join("sys/module").join(module))?;
        }
        write_lines(
            &root.join("proc/driver/nvidia/version"),
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build  (dvs-builder@U16-I3-B03-4-3)",
        )?;
        write_lines(&root.join("proc/sys/kernel/osrelease"), "6.8.0-1015-aws")?;
        fs::create_dir_all(root.join("proc/self"))?;
        fs::write(root.join("proc/self/limits"), limits_text("unlimited"))?;
        node.counters.add_net("lo", None, None)?;
        node.counters.add_net("eth0", Some("0000:00:05.0"), Some(100_000))?;
        // The kernel log as /dev/kmsg gives it, with no Xid.
        write_lines(&root.join("dev/kmsg"), "6,1,0,-;Linux version 6.8.0-1015-aws\n6,2,1200,-;nvidia: loading out-of-tree module taints kernel.")?;
        Ok(node)
    }

    /// A node already on disk.
    pub fn open(root: impl Into<PathBuf>, instance_type: &str) -> io::Result<Self> {
        let layout = instance_layout(instance_type)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("no built-in layout for {instance_type}")))?
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err.to_string()))?;
        Ok(Self { counters: FakeSysfs::open(root.into()), layout, instance_type: instance_type.to_string() })
    }

    pub fn root(&self) -> &Path {
        self.counters.root()
    }

    pub fn instance_type(&self) -> &str {
        &self.instance_type
    }

    /// The counters of the tree, to move them.
    pub fn counters(&self) -> &FakeSysfs {
        &self.counters
    }

    /// The EFA devices of the layout, in PCI order: (name, PCI address).
    pub fn efa(&self) -> Vec<(String, String)> {
        self.layout.nics.iter().filter(|nic| nic.kind == LayoutNicKind::Efa).map(|nic| (nic.name.clone(), nic.pci_bus_id.clone())).collect()
    }

    /// The EFA a planted fault hits: the second one (GPU 0's second on a p5, its first GPU's on a p4d's
    /// second switch).
    pub fn victim(&self) -> String {
        let efa = self.efa();
        efa.get(1).or(efa.first()).map(|(name, _)| name.clone()).unwrap_or_default()
    }

    /// The GPU a planted GPU fault hits: GPU 3 (the last where there are fewer), as (name, PCI address).
    pub fn victim_gpu(&self) -> (String, String) {
        let gpu = self.layout.gpus.get(3).or(self.layout.gpus.last());
        gpu.map(|gpu| (format!("GPU {}", gpu.index), gpu.pci_bus_id.clone())).unwrap_or_default()
    }

    /// Writes an Xid for the GPU at `address` (`0000:86:00.0`) into the fake kernel log, as the driver
    /// logs it.
    pub fn log_xid(&self, address: &str, xid: u32) -> io::Result<()> {
        self.log_xids(address, xid, 1)
    }

    /// Writes `times` records of an Xid for the GPU at `address` (a storm), one millisecond apart.
    pub fn log_xids(&self, address: &str, xid: u32, times: usize) -> io::Result<()> {
        let logged = address.rsplit_once('.').map_or(address, |(device, _)| device);
        let text = format!("NVRM: Xid (PCI:{logged}): {xid}, {}", xid_text(xid));
        self.log(3, &vec![text.as_str(); times])
    }

    /// Writes the record the NVIDIA driver logs when it loads (after a reset of its GPUs by a driver
    /// reload, or at boot): only Xids after it count.
    pub fn log_driver_load(&self) -> io::Result<()> {
        self.log(6, &["NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build  (dvs-builder@U16-I3-B03-4-3)"])
    }

    /// Appends records of level `level` to the fake kernel log, as `/dev/kmsg` gives them: sequence numbers
    /// and times (µs since boot, a millisecond per record) going on from the last.
    fn log(&self, level: u8, messages: &[&str]) -> io::Result<()> {
        use std::fmt::Write as _;
        use std::io::Write as _;
        let path = self.root().join("dev/kmsg");
        let last = fs::read_to_string(&path).map_or(0, |text| text.lines().count());
        let mut text = String::new();
        for (at, message) in messages.iter().enumerate() {
            let sequence = last + at + 1;
            let _ = writeln!(text, "{level},{sequence},{},-;{message}", sequence * 1000);
        }
        fs::OpenOptions::new().append(true).create(true).open(path)?.write_all(text.as_bytes())
    }

    /// Sets the PCIe link width the function at `address` trained at.
    pub fn set_link_width(&self, address: &str, width: u32) -> io::Result<()> {
        write_lines(&self.link_file(address, "current_link_width")?, &width.to_string())
    }

    /// The path of one of the PCIe link files (`current_link_width`, `max_link_speed`, ...) of the
    /// function at `address`, to plant what a node shows.
    pub fn link_file(&self, address: &str, file: &str) -> io::Result<PathBuf> {
        Ok(fs::canonicalize(self.root().join("sys/bus/pci/devices").join(address))?.join(file))
    }

    /// The path of `device`'s counter `counter` (a port counter of port 1, else a device counter), to
    /// plant what a node shows.
    pub fn counter_file(&self, device: &str, counter: &str) -> PathBuf {
        self.counters.counter_path(device, counter)
    }

    /// The address of the EFA named `device`.
    fn efa_address(&self, device: &str) -> String {
        self.efa().into_iter().find(|(name, _)| name == device).map(|(_, address)| address).unwrap_or_default()
    }

    /// Takes the link of the function at `address` down, as the kernel then shows it.
    fn link_down(&self, address: &str) -> io::Result<()> {
        write_lines(&self.link_file(address, "current_link_width")?, "0")?;
        write_lines(&self.link_file(address, "current_link_speed")?, "Unknown")
    }

    /// Which switch each GPU and NIC sits behind: GPUs with the same nearest NICs share one.
    fn switches(&self) -> (Vec<usize>, Vec<Option<usize>>) {
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut gpu_switch = Vec::new();
        for gpu in &self.layout.gpus {
            let mut nics = gpu.nearest_nics.clone();
            nics.sort_unstable();
            let index = groups.iter().position(|group| *group == nics).unwrap_or_else(|| {
                groups.push(nics);
                groups.len() - 1
            });
            gpu_switch.push(index);
        }
        let nic_switch = (0..self.layout.nics.len()).map(|nic| groups.iter().position(|group| group.contains(&nic))).collect();
        (gpu_switch, nic_switch)
    }

    fn write_pci(&self) -> io::Result<()> {
        let root = self.root().to_path_buf();
        let (gpu_switch, nic_switch) = self.switches();
        let spare_switch = gpu_switch.iter().max().map_or(0, |max| max + 1);
        let bus_dir = root.join("sys/bus/pci/devices");
        fs::create_dir_all(&bus_dir)?;
        let function = |switch: usize, address: &str, pci_id: &str, class: &str, numa: Option<u32>, speed: &str| -> io::Result<PathBuf> {
            let dir = function_dir(&root, switch, address);
            fs::create_dir_all(&dir)?;
            for (file, value) in [("current_link_width", "16"), ("max_link_width", "16"), ("current_link_speed", speed), ("max_link_speed", speed)] {
                write_lines(&dir.join(file), value)?;
            }
            let (vendor, device) = pci_id.split_once(':').unwrap_or((pci_id, ""));
            write_lines(&dir.join("vendor"), &format!("0x{vendor}"))?;
            write_lines(&dir.join("device"), &format!("0x{device}"))?;
            write_lines(&dir.join("class"), class)?;
            write_lines(&dir.join("numa_node"), &numa.map_or_else(|| "-1".to_string(), |n| n.to_string()))?;
            symlink_replacing(&relative_to(&bus_dir, &dir, &root), &bus_dir.join(address))?;
            Ok(dir)
        };
        for (gpu, switch) in self.layout.gpus.iter().zip(&gpu_switch) {
            function(*switch, &gpu.pci_bus_id, &gpu.pci_id, "0x030200", gpu.numa_node, link_speed(&gpu.pci_id, true, None))?;
        }
        let rate = |gbps: Option<f64>| match gbps.map(|g| g.round() as u64) {
            Some(400) => "400 Gb/sec (8X HDR)".to_string(),
            Some(200) => "200 Gb/sec (4X HDR)".to_string(),
            Some(gbps) => format!("{gbps} Gb/sec (4X EDR)"),
            None => "100 Gb/sec (4X EDR)".to_string(),
        };
        for (device_index, nic) in self.layout.nics.iter().enumerate().filter(|(_, nic)| nic.kind == LayoutNicKind::Efa) {
            let switch = nic_switch[device_index].unwrap_or(spare_switch);
            let pci = function(switch, &nic.pci_bus_id, &nic.pci_id, "0x020000", nic.numa_node, link_speed(&nic.pci_id, false, nic.efa_generation()))?;
            let dir = root.join("sys/class/infiniband").join(&nic.name);
            let port = dir.join("ports/1");
            fs::create_dir_all(port.join("hw_counters"))?;
            fs::create_dir_all(dir.join("hw_counters"))?;
            write_lines(&port.join("rate"), &rate(nic.link_gbps))?;
            write_lines(&port.join("state"), "4: ACTIVE")?;
            write_lines(&port.join("phys_state"), "5: LinkUp")?;
            write_lines(&port.join("hw_counters/lifespan"), "10")?;
            write_lines(&dir.join("hw_counters/lifespan"), "10")?;
            for (counter_index, counter) in EFA_PORT_COUNTERS.iter().enumerate() {
                write_lines(&port.join("hw_counters").join(counter), &initial_value(device_index, counter_index, counter).to_string())?;
            }
            for (counter_index, counter) in efa_device_counters(nic.efa_generation()).iter().enumerate() {
                write_lines(&dir.join("hw_counters").join(counter), &initial_value(device_index, counter_index, counter).to_string())?;
            }
            symlink_replacing(&relative_to(&dir, &pci, &root), &dir.join("device"))?;
        }
        Ok(())
    }

    /// Breaks one thing and returns what it broke (the EFA's name, or `memlock`). For
    /// [`Fault::ImpairedRising`] nothing changes on disk: call [`FakeNode::bump`] while the check reads.
    pub fn plant(&self, fault: Fault) -> io::Result<String> {
        let victim = self.victim();
        let device = self.root().join("sys/class/infiniband").join(&victim);
        match fault {
            Fault::MissingNic => {
                let pci = fs::canonicalize(device.join("device"))?;
                let address = pci.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
                fs::remove_dir_all(&device)?;
                fs::remove_file(self.root().join("sys/bus/pci/devices").join(address))?;
                fs::remove_dir_all(pci)?;
            }
            Fault::PortDown => {
                write_lines(&device.join("ports/1/state"), "1: DOWN")?;
                write_lines(&device.join("ports/1/phys_state"), "3: Disabled")?;
            }
            Fault::ImpairedRising => {}
            Fault::WrongNuma => {
                let numa = fs::canonicalize(device.join("device"))?.join("numa_node");
                let now: u32 = fs::read_to_string(&numa)?.trim().parse().unwrap_or(0);
                write_lines(&numa, &(1 - now.min(1)).to_string())?;
            }
            Fault::LowMemlock => {
                fs::write(self.root().join("proc/self/limits"), limits_text("65536"))?;
                return Ok("memlock".into());
            }
            Fault::EfaLinkX8 => self.set_link_width(&self.efa_address(&victim), 8)?,
            Fault::EfaLinkDown => self.link_down(&self.efa_address(&victim))?,
            Fault::GpuLinkDown => {
                let (name, address) = self.victim_gpu();
                self.link_down(&address)?;
                return Ok(name);
            }
            Fault::GpuLinkX8 => {
                let (name, address) = self.victim_gpu();
                self.set_link_width(&address, 8)?;
                return Ok(name);
            }
            Fault::Xid(xid) => {
                let (name, address) = self.victim_gpu();
                self.log_xid(&address, xid)?;
                return Ok(name);
            }
        }
        Ok(victim)
    }

    /// One step of [`Fault::ImpairedRising`]: the victim's `impaired_remote_conn_events` grows by one.
    pub fn bump(&self) -> io::Result<u64> {
        self.counters.advance(&self.victim(), "impaired_remote_conn_events", 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Sysfs;
    use efatop_proto::telemetry::NicKind;

    #[test]
    fn every_type_reads_back_with_its_efa_gpus_and_numa_nodes() {
        for (instance_type, efa, rate, gpus) in [
            ("p5.48xlarge", 32, 100.0, 8),
            ("p5e.48xlarge", 32, 100.0, 8),
            ("p5en.48xlarge", 16, 200.0, 8),
            ("p4d.24xlarge", 4, 100.0, 8),
            ("p4de.24xlarge", 4, 100.0, 8),
            ("p6-b200.48xlarge", 8, 400.0, 8),
            ("p6-b300.48xlarge", 16, 400.0, 8),
            ("p6e-gb200.36xlarge", 16, 200.0, 4),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let node = FakeNode::write(dir.path(), instance_type).unwrap();
            let sysfs = Sysfs::new(node.root());
            assert_eq!(sysfs.product_name().as_deref(), Some(instance_type));
            let devices = sysfs.rdma_devices();
            assert_eq!(devices.len(), efa, "{instance_type}");
            assert!(devices.iter().all(|d| d.is_efa() && d.ports.len() == 1 && d.ports[0].is_active()), "{devices:?}");
            assert!(devices.iter().all(|d| d.ports[0].rate_gbps == Some(rate)));
            assert_eq!(sysfs.nvidia_gpus().len(), gpus, "{instance_type}");
            assert_eq!(sysfs.memlock().map(|m| m.soft), Some(None));
            assert!(sysfs.module_loaded("nvidia_peermem"));
            // The counters reader sees the same devices at the same addresses.
            let read = sysfs.read_all();
            let rdma: Vec<_> = read.iter().filter(|nic| nic.kind == NicKind::Rdma).collect();
            assert_eq!(rdma.len(), efa);
            for device in &devices {
                let reading = rdma.iter().find(|nic| nic.name == device.name).unwrap();
                assert_eq!(reading.pci_bus_id.as_deref(), device.pci_address());
                // The newer driver's device counters exist on EFA v3/v4 nodes only.
                let newer = ["p5en.48xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge", "p6e-gb200.36xlarge"].contains(&instance_type);
                for counter in crate::fake::EFA_KVERBS_DEVICE_COUNTERS {
                    assert_eq!(reading.counters.contains_key(*counter), newer, "{instance_type} {counter}");
                }
                assert!(reading.counters.contains_key("rdma_write_bytes") && reading.counters.contains_key("impaired_remote_conn_events"));
            }
        }
    }

    #[test]
    fn a_gpu_shares_a_switch_with_its_nearest_nics_only() {
        let dir = tempfile::tempdir().unwrap();
        let node = FakeNode::write(dir.path(), "p5.48xlarge").unwrap();
        let sysfs = Sysfs::new(node.root());
        let gpus = sysfs.nvidia_gpus();
        let devices = sysfs.rdma_devices();
        let nic = |name: &str| devices.iter().find(|d| d.name == name).unwrap().pci.clone().unwrap();
        let first_gpu = gpus.iter().find(|g| g.address == "0000:53:00.0").unwrap();
        assert!(first_gpu.shares_switch_with(&nic("rdmap79s0")));
        assert!(first_gpu.shares_switch_with(&nic("rdmap82s0")));
        assert!(!first_gpu.shares_switch_with(&nic("rdmap96s0")));
        assert_eq!(nic("rdmap79s0").numa_node, Some(0));
        assert_eq!(nic("rdmap201s0").numa_node, Some(1));
    }

    #[test]
    fn planted_faults_change_what_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let node = FakeNode::write(dir.path(), "p5.48xlarge").unwrap();
        assert_eq!(node.victim(), "rdmap80s0");
        let sysfs = Sysfs::new(node.root());
        assert_eq!(node.plant(Fault::PortDown).unwrap(), "rdmap80s0");
        assert_eq!(sysfs.rdma_devices()[..].iter().find(|d| d.name == "rdmap80s0").unwrap().ports[0].state.as_deref(), Some("DOWN"));
        node.plant(Fault::WrongNuma).unwrap();
        let numa = |sysfs: &Sysfs| sysfs.rdma_devices().into_iter().find(|d| d.name == "rdmap80s0").and_then(|d| d.pci?.numa_node);
        assert_eq!(numa(&sysfs), Some(1));
        node.plant(Fault::LowMemlock).unwrap();
        assert_eq!(sysfs.memlock().unwrap().soft, Some(65536));
        let before = node.counters().get("rdmap80s0", "impaired_remote_conn_events").unwrap();
        assert_eq!(node.bump().unwrap(), before + 1);
        node.plant(Fault::MissingNic).unwrap();
        assert_eq!(sysfs.rdma_devices().len(), 31);
        assert_eq!(sysfs.pci_functions().iter().filter(|f| f.vendor.as_deref() == Some("0x1d0f")).count(), 31);
        assert_eq!(Fault::parse("port-down"), Some(Fault::PortDown));
    }
}
