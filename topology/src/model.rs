//! What efatop knows about a node's layout: plain data, built once from hwloc and then only read, printed
//! and serialized. `efatop topo --json` prints a [`NodeTopology`] as it is here.

use serde::{Deserialize, Serialize};

use efatop_proto::topology::{GpuLinkSource, Link};

/// GPUs, NICs and NUMA nodes of one host, and how every GPU reaches every GPU and NIC.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeTopology {
    /// Where the topology came from: `this machine`, or the XML file's name.
    pub source: String,
    /// The host name hwloc recorded, when it did.
    pub host: Option<String>,
    /// The EC2 instance type: DMI's `product_name` on this machine, the `efatop.InstanceType` info of a
    /// fixture; `None` when neither says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    pub numa_nodes: Vec<NumaNode>,
    /// In PCI bus order, which is nvidia-smi's order (and CUDA's with `CUDA_DEVICE_ORDER=PCI_BUS_ID`).
    pub gpus: Vec<Gpu>,
    /// In PCI bus order.
    pub nics: Vec<Nic>,
    /// NVIDIA NVSwitch PCI devices seen; when there are any, GPU pairs are NVLink peers through them.
    pub nvswitches: usize,
    /// `gpu_links[i][j]`: how GPU i reaches GPU j.
    pub gpu_links: Vec<Vec<Link>>,
    /// `gpu_peak_gbytes_per_s[i][j]`: what NVLink carries from GPU i to GPU j, GB/s in one direction;
    /// `None` without NVLink or when the rate is unknown.
    #[serde(default)]
    pub gpu_peak_gbytes_per_s: Vec<Vec<Option<f64>>>,
    /// Where the GPU–GPU cells came from: NVML on a machine with the NVIDIA driver, else hwloc.
    #[serde(default)]
    pub gpu_link_source: GpuLinkSource,
    /// Why NVML did not give the GPU–GPU cells on this machine (`no NVIDIA driver ...`), when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_link_note: Option<String>,
    /// `nic_links[i][k]`: how GPU i reaches NIC k.
    pub nic_links: Vec<Vec<Link>>,
    /// NICs libfabric offers that hwloc does not show under any PCI device (loopback, virtual
    /// interfaces); only when the topology is this machine's and libfabric was asked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_fabric_nics: Vec<FabricNic>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaNode {
    pub os_index: u32,
    /// CPU list in the kernel's format, e.g. `0-47,96-143`.
    pub cpus: String,
    pub memory_bytes: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    pub index: usize,
    /// `dddd:bb:dd.f`, lower case, as `nvidia-smi --query-gpu=pci.bus_id` prints it (less its upper case
    /// and 8-digit domain).
    pub pci_bus_id: String,
    /// `vendor:device`, e.g. `10de:2330`.
    pub pci_id: String,
    pub model: Option<String>,
    /// The NUMA node the GPU is attached to; `None` when hwloc places it above several.
    pub numa_node: Option<u32>,
    /// CPUs local to the GPU, in the kernel's list format.
    pub cpus: String,
    /// The NICs nearest this GPU (all at [`Gpu::nearest_link`]); RDMA NICs (EFA, verbs) are preferred over
    /// plain Ethernet when the node has any.
    pub nearest_nics: Vec<usize>,
    pub nearest_link: Option<Link>,
    /// The NICs a rank on this GPU should use: [`Gpu::nearest_nics`], split evenly between the GPUs that
    /// have the same nearest NICs when they divide evenly (p5en: 4 EFA behind a switch, 2 per GPU); shared
    /// when they do not (p4d: 1 EFA for 2 GPUs).
    pub preferred_nics: Vec<usize>,
    /// hwloc's OS devices of the GPU, e.g. `cuda0`, `nvml0`.
    pub os_devices: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NicKind {
    /// AWS Elastic Fabric Adapter (PCI 1d0f:efa*).
    Efa,
    /// Another RDMA device (an OpenFabrics OS device: mlx5, ...).
    Rdma,
    /// A network interface without RDMA.
    Ethernet,
    /// A network controller with no OS device (no driver bound).
    Other,
}

impl NicKind {
    pub fn is_rdma(self) -> bool {
        matches!(self, NicKind::Efa | NicKind::Rdma)
    }

    pub fn label(self) -> &'static str {
        match self {
            NicKind::Efa => "efa",
            NicKind::Rdma => "rdma",
            NicKind::Ethernet => "ethernet",
            NicKind::Other => "other",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Nic {
    pub index: usize,
    /// The RDMA device name when there is one (`rdmap79s0`, what libfabric's efa domains are named
    /// after), else the network interface (`eth0`), else `pci:<bus id>`.
    pub name: String,
    pub kind: NicKind,
    pub pci_bus_id: String,
    pub pci_id: String,
    /// Link speed: from libfabric when it was asked, else sysfs on this machine, else the fixture.
    pub link_gbps: Option<f64>,
    pub numa_node: Option<u32>,
    pub cpus: String,
    /// hwloc's OS devices of the NIC, e.g. `rdmap79s0` or `mlx5_0` and `ib0`.
    pub os_devices: Vec<String>,
    /// The libfabric domains on this NIC, when libfabric was asked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub libfabric: Vec<FabricNic>,
    /// The physical NIC this device is one of several devices on (p6e-gb200: network cards 1 and 2
    /// share one 400G NIC); `None` when the device is a NIC of its own. Devices on one physical NIC
    /// share its link: [`NodeTopology::aggregate_gbps`] never counts it twice, and a GPU's preferred NICs
    /// take one device per physical NIC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical_nic: Option<PhysicalNic>,
}

/// A physical NIC that carries several devices.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhysicalNic {
    /// The same on every device of the NIC (a fixture's `efatop.PhysicalNic`, e.g. `cards 1+2`).
    pub label: String,
    /// The physical link, shared by its devices.
    pub link_gbps: Option<f64>,
}

impl Nic {
    /// The EFA generation from the PCI device ID: 1d0f:efa0 is v1 (p4d), efa1 v2 (p5), efa2 v3 (p5en),
    /// efa3 v4 (p6; the amzn-drivers efa driver binds it, the v4 name is by sequence). `None` for other NICs.
    pub fn efa_generation(&self) -> Option<u8> {
        if self.kind != NicKind::Efa {
            return None;
        }
        let device = self.pci_id.strip_prefix("1d0f:efa")?;
        device.parse::<u8>().ok().filter(|d| *d <= 9).map(|d| d + 1)
    }

    /// Whether the NIC does RDMA write in hardware: EFA v1 (p4d) reads only, and libfabric's efa
    /// provider emulates writes over sends (`FI_OPT_EFA_EMULATED_WRITE`). `None` when not an EFA.
    pub fn native_rdma_write(&self) -> Option<bool> {
        self.efa_generation().map(|generation| generation >= 2)
    }
}

/// A NIC as libfabric reports it (`fi_info`): what [`NodeTopology::attach_fabric_nics`] matches to hwloc's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FabricNic {
    pub provider: String,
    pub domain: String,
    /// `dddd:bb:dd.f`, from the provider's bus attributes.
    pub pci_bus_id: Option<String>,
    pub link_gbps: Option<f64>,
}

impl NodeTopology {
    /// Every NIC's rail: the first GPU (in index order) whose preferred NICs hold it, and its position
    /// there; `None` for a NIC no GPU uses (an ENA-only card, the second device of a physical NIC, any NIC
    /// of a node without GPUs). This is the one rule `--channels all`'s order, the sweep's rails and the
    /// monitor's rail check follow: a rank's channel k is its GPU's rail k.
    pub fn rails(&self) -> Vec<Option<(usize, usize)>> {
        self.nics
            .iter()
            .map(|nic| {
                self.gpus.iter().find_map(|gpu| {
                    gpu.preferred_nics.iter().position(|&k| k == nic.index).map(|rail| (gpu.index, rail))
                })
            })
            .collect()
    }

    /// What the NICs `indices` can carry together, Gbps: each device's link, except that devices on one
    /// physical NIC together get no more than its link (two halves of a 400G NIC are 400G, not 800G).
    /// `None` when a NIC's speed is unknown.
    pub fn aggregate_gbps(&self, indices: &[usize]) -> Option<f64> {
        let mut total = 0.0;
        let mut physical: Vec<(&str, Option<f64>, f64)> = Vec::new();
        let mut seen = Vec::new();
        for &k in indices {
            if seen.contains(&k) {
                continue;
            }
            seen.push(k);
            let nic = self.nics.get(k)?;
            let gbps = nic.link_gbps?;
            match &nic.physical_nic {
                Some(shared) => match physical.iter_mut().find(|(label, _, _)| *label == shared.label) {
                    Some(entry) => entry.2 += gbps,
                    None => physical.push((&shared.label, shared.link_gbps, gbps)),
                },
                None => total += gbps,
            }
        }
        for (_, link, sum) in physical {
            total += link.map_or(sum, |link| sum.min(link));
        }
        Some(total)
    }

    /// How many distinct physical NICs the NICs `indices` are on (a device without a physical NIC is one).
    pub fn physical_nic_count(&self, indices: &[usize]) -> usize {
        let mut labels: Vec<String> = indices
            .iter()
            .filter_map(|&k| self.nics.get(k))
            .map(|nic| nic.physical_nic.as_ref().map_or_else(|| format!("nic {}", nic.index), |p| p.label.clone()))
            .collect();
        labels.sort();
        labels.dedup();
        labels.len()
    }

    pub fn gpu_by_pci_bus_id(&self, bus_id: &str) -> Option<&Gpu> {
        let wanted = normalize_bus_id(bus_id)?;
        self.gpus.iter().find(|gpu| gpu.pci_bus_id == wanted)
    }

    pub fn nic_by_pci_bus_id(&self, bus_id: &str) -> Option<&Nic> {
        let wanted = normalize_bus_id(bus_id)?;
        self.nics.iter().find(|nic| nic.pci_bus_id == wanted)
    }

    /// The NIC with this name or OS device (`rdmap79s0`, `eth0`), or whose name a libfabric domain is
    /// built on (`rdmap79s0-rdm`).
    pub fn nic_by_name(&self, name: &str) -> Option<&Nic> {
        self.nics.iter().find(|nic| nic.os_devices.iter().chain([&nic.name]).any(|dev| domain_is_on(name, dev)))
    }

    /// Records which libfabric domains sit on which NIC, matching by PCI address first and by name
    /// second (tcp's domains are interface names and carry no bus attributes). A NIC without a link
    /// speed takes libfabric's. Domains that match no NIC are kept in
    /// [`NodeTopology::other_fabric_nics`].
    pub fn attach_fabric_nics(&mut self, fabric_nics: impl IntoIterator<Item = FabricNic>) {
        for fabric in fabric_nics {
            let by_bus = fabric.pci_bus_id.as_deref().and_then(|id| self.nic_by_pci_bus_id(id));
            let found = by_bus.or_else(|| self.nic_by_name(&fabric.domain)).map(|nic| nic.index);
            match found {
                Some(index) => {
                    let nic = &mut self.nics[index];
                    if nic.link_gbps.is_none() {
                        nic.link_gbps = fabric.link_gbps;
                    }
                    if !nic.libfabric.contains(&fabric) {
                        nic.libfabric.push(fabric);
                    }
                }
                None if !self.other_fabric_nics.contains(&fabric) => self.other_fabric_nics.push(fabric),
                None => {}
            }
        }
    }
}

/// `domain` names the device `device`: equal, or the device name and a libfabric suffix (`-rdm`, `-dgrm`).
fn domain_is_on(domain: &str, device: &str) -> bool {
    domain == device || domain.strip_prefix(device).is_some_and(|rest| rest.starts_with('-'))
}

/// `0000:4F:00.0`, `4f:00.0` and `00000000:4F:00.0` (nvidia-smi's form) all become `0000:4f:00.0`.
pub fn normalize_bus_id(text: &str) -> Option<String> {
    let text = text.trim().to_ascii_lowercase();
    let (domain, rest) = match text.matches(':').count() {
        1 => (0, text.as_str()),
        2 => {
            let (domain, rest) = text.split_once(':')?;
            (u32::from_str_radix(domain, 16).ok()?, rest)
        }
        _ => return None,
    };
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let bus = u8::from_str_radix(bus, 16).ok()?;
    let device = u8::from_str_radix(device, 16).ok()?;
    let function = u8::from_str_radix(function, 16).ok()?;
    Some(format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_normalize() {
        assert_eq!(normalize_bus_id("00000000:53:00.0").as_deref(), Some("0000:53:00.0"));
        assert_eq!(normalize_bus_id("0000:4F:00.0").as_deref(), Some("0000:4f:00.0"));
        assert_eq!(normalize_bus_id("4f:00.0").as_deref(), Some("0000:4f:00.0"));
        assert_eq!(normalize_bus_id("10:1b.0").as_deref(), Some("0000:10:1b.0"));
        assert_eq!(normalize_bus_id("eth0"), None);
        assert_eq!(normalize_bus_id("zz:00.0"), None);
    }

    #[test]
    fn domains_match_devices() {
        assert!(domain_is_on("rdmap79s0-rdm", "rdmap79s0"));
        assert!(domain_is_on("eth0", "eth0"));
        assert!(!domain_is_on("rdmap79s01-rdm", "rdmap79s0"));
        assert!(!domain_is_on("eth01", "eth0"));
    }
}
