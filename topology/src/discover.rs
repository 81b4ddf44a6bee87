//! From hwloc's tree to a [`NodeTopology`]: which PCI devices are GPUs and NICs, where they hang, and how
//! each pair is connected.

use std::collections::BTreeMap;
use std::path::Path;

use hwlocality::Topology;
use hwlocality::object::TopologyObject;
use hwlocality::object::attributes::{ObjectAttributes, PCIDeviceAttributes};
use hwlocality::object::types::{BridgeType, OSDeviceType, ObjectType};
use hwlocality::topology::builder::{TopologyBuilder, TypeFilter};

use efatop_proto::topology::{GpuLinkSource, Link, format_cpu_list};

use crate::TopologyError;
use crate::link::{Hop, pcie_link};
use crate::model::{Gpu, Nic, NicKind, NodeTopology, NumaNode, PhysicalNic};

const NVIDIA: u16 = 0x10de;
const AMAZON: u16 = 0x1d0f;
/// PCI class codes (base class << 8 | subclass).
const CLASS_VGA: u16 = 0x0300;
const CLASS_3D: u16 = 0x0302;
const CLASS_BRIDGE_OTHER: u16 = 0x0680;
const BASE_CLASS_NETWORK: u16 = 0x02;

impl NodeTopology {
    /// This machine's topology, with every PCI device (hwloc's default keeps only "important" ones and
    /// would drop the bridges that tell PIX from PXB). Honours `HWLOC_XMLFILE` like any hwloc program.
    pub fn discover() -> Result<Self, TopologyError> {
        let builder = keep_all_io(Topology::builder())?;
        let topology = builder.build().map_err(|e| TopologyError::Discovery(e.to_string()))?;
        let live = topology.is_this_system();
        let mut found = build(&topology, "this machine".into(), live);
        if live {
            found.instance_type = dmi_product_name(Path::new("/"));
        }
        Ok(found)
    }

    /// The topology described by an hwloc XML file (`lstopo --of xml`, or scripts/fixtures/make-topology-fixtures).
    pub fn from_xml_file(path: &Path) -> Result<Self, TopologyError> {
        // Read it here rather than hand hwloc the path: hwlocality panics on a missing file (it expects
        // only EINVAL from hwloc_topology_set_xml), and std's error says what is wrong with the path.
        // hwloc silences libxml2's parser messages on the first thread that loads XML (libxml2's error
        // handler is per thread): efatop loads once, on its main thread, so a bad file stays one line.
        let xml =
            std::fs::read_to_string(path).map_err(|source| TopologyError::Read { path: path.to_owned(), source })?;
        let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        Self::from_xml_str(&xml, &name)
    }

    /// The topology described by hwloc XML text; `source` names it in the output.
    pub fn from_xml_str(xml: &str, source: &str) -> Result<Self, TopologyError> {
        let invalid = |detail: &str| TopologyError::InvalidXml { name: source.to_string(), detail: detail.to_string() };
        if let Some(set) = set_without_its_complete_set(xml) {
            return Err(invalid(&format!("an <object> has a {set} but no complete_{set}")));
        }
        // hwloc says no more than EINVAL either way; what failed is the most we can add. hwlocality treats
        // any other errno from hwloc's XML loader as impossible and panics; hwloc gives EILSEQ for a file
        // declaring an encoding it cannot convert (`encoding="UTF-7"`, found by fuzzing). Such a file is one
        // we cannot read, not a crash: the panic is caught, its message kept off the terminal.
        let quiet = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let loaded = std::panic::catch_unwind(|| -> Result<_, TopologyError> {
            let builder = Topology::builder().from_xml(xml).map_err(|_| invalid("hwloc cannot parse it"))?;
            keep_all_io(builder)?.build().map_err(|_| invalid("hwloc finds no machine in it"))
        });
        std::panic::set_hook(quiet);
        let topology = loaded.map_err(|_| invalid("hwloc cannot read its encoding or text"))??;
        Ok(build(&topology, source.to_string(), false))
    }
}

/// hwloc's XML writer gives every object with a `cpuset` its `complete_cpuset` too, and one with a `nodeset`
/// its `complete_nodeset`, and hwloc 2.9's loader relies on both without checking: it orders sibling objects
/// by their complete cpusets, and adds each NUMA node to the machine's complete nodeset, dereferencing NULL
/// when there is none (`lstopo --input` crashes the same way; both found by `scripts/bench/fuzz`). Such files
/// are refused before hwloc sees them: the first set missing its complete one, `cpuset` or `nodeset`.
fn set_without_its_complete_set(xml: &str) -> Option<&'static str> {
    object_attribute_names(xml).find_map(|names| {
        [("cpuset", "complete_cpuset"), ("nodeset", "complete_nodeset")]
            .into_iter()
            .find(|(set, complete)| names.contains(set) && !names.contains(complete))
            .map(|(set, _)| set)
    })
}

/// The attribute names of each `<object>` tag, read as XML writes them (`name="value"` or `name='value'`);
/// a tag is read up to anything else.
fn object_attribute_names(xml: &str) -> impl Iterator<Item = Vec<&str>> {
    let mut rest = xml;
    std::iter::from_fn(move || loop {
        let at = rest.find("<object")?;
        rest = &rest[at + "<object".len()..];
        // `<objects ...>` or `<object_x>` is another element.
        if !rest.starts_with(|c: char| c.is_ascii_whitespace() || c == '/' || c == '>') {
            continue;
        }
        let mut names = Vec::new();
        loop {
            rest = rest.trim_start();
            let Some((name, after_name)) = rest.split_once('=') else { break };
            let after_equals = after_name.trim_start();
            let Some(quote) = after_equals.chars().next().filter(|c| *c == '"' || *c == '\'') else { break };
            let Some(end) = after_equals[1..].find(quote) else { break };
            if name.contains(['<', '>']) {
                break;
            }
            names.push(name.trim_end());
            rest = &after_equals[1 + end + 1..];
        }
        return Some(names);
    })
}

/// The instance type as DMI names it (`/sys/class/dmi/id/product_name` under `root`: `p5.48xlarge` on
/// EC2); `None` when the file is missing or blank.
pub fn dmi_product_name(root: &Path) -> Option<String> {
    let text = attribute(&root.join("sys/class/dmi/id/product_name"))?;
    let name = text.trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// A sysfs attribute's text through the one bounded reader (`efatop_files::attribute`: no link followed, no
/// blocking, a regular file of at most a page); `None` otherwise.
fn attribute(path: &Path) -> Option<String> {
    efatop_files::attribute::read(path).ok()
}

fn keep_all_io(builder: TopologyBuilder) -> Result<TopologyBuilder, TopologyError> {
    builder.with_io_type_filter(TypeFilter::KeepAll).map_err(|e| TopologyError::Discovery(e.to_string()))
}

/// A GPU or NIC as found, before links are computed.
struct Found<'t> {
    object: &'t TopologyObject,
    pci: &'t PCIDeviceAttributes,
    path: Vec<Hop>,
}

fn build(topology: &Topology, source: String, live: bool) -> NodeTopology {
    let host = topology.root_object().info("HostName").map(|h| h.to_string_lossy().into_owned());
    let instance_type = topology.root_object().info("efatop.InstanceType").map(|h| h.to_string_lossy().into_owned());
    let numa_nodes = topology
        .objects_with_type(ObjectType::NUMANode)
        .map(|node| NumaNode {
            os_index: node.os_index().map_or(0, |i| i as u32),
            cpus: cpu_list(node),
            memory_bytes: match node.attributes() {
                Some(ObjectAttributes::NUMANode(attrs)) => attrs.local_memory().map(std::num::NonZeroU64::get),
                _ => None,
            },
        })
        .collect();

    let mut gpus_found = Vec::new();
    let mut nics_found = Vec::new();
    let mut nvswitches = 0;
    for object in topology.pci_devices() {
        let Some(ObjectAttributes::PCIDevice(pci)) = object.attributes() else { continue };
        let found = Found { object, pci, path: path_of(object) };
        if pci.vendor_id() == NVIDIA && matches!(pci.class_id(), CLASS_VGA | CLASS_3D) {
            gpus_found.push(found);
        } else if pci.vendor_id() == NVIDIA && pci.class_id() == CLASS_BRIDGE_OTHER {
            nvswitches += 1;
        } else if pci.class_id() >> 8 == BASE_CLASS_NETWORK || has_network_osdev(object) {
            nics_found.push(found);
        }
    }
    // hwloc lists PCI devices depth-first, which is not bus order when host bridges are out of order.
    gpus_found.sort_by_key(|f| bus_key(f.pci));
    nics_found.sort_by_key(|f| bus_key(f.pci));

    let nics: Vec<Nic> = nics_found.iter().enumerate().map(|(index, found)| nic_of(index, found, live)).collect();
    let nic_links: Vec<Vec<Link>> =
        gpus_found.iter().map(|gpu| nics_found.iter().map(|nic| pcie_link(&gpu.path, &nic.path)).collect()).collect();
    let gpu_links: Vec<Vec<Link>> = gpus_found
        .iter()
        .enumerate()
        .map(|(i, a)| {
            gpus_found
                .iter()
                .enumerate()
                .map(|(j, b)| {
                    if i == j {
                        Link::Same
                    } else if nvswitches > 0 {
                        // Every GPU of an NVSwitch system (HGX/DGX baseboard) reaches every other through
                        // the switches with all of its links; the count depends only on the GPU model.
                        Link::NvLink(nvlinks_per_gpu(a.pci.device_id()).min(nvlinks_per_gpu(b.pci.device_id())))
                    } else {
                        pcie_link(&a.path, &b.path)
                    }
                })
                .collect()
        })
        .collect();

    // Through NVSwitches a pair's peak is its link count at the slower GPU's per-link rate.
    let gpu_peak_gbytes_per_s: Vec<Vec<Option<f64>>> = gpu_links
        .iter()
        .enumerate()
        .map(|(i, row)| {
            row.iter()
                .enumerate()
                .map(|(j, link)| match link {
                    Link::NvLink(Some(count)) => {
                        let rate = |found: &Found<'_>| nvlink_gbytes_per_s_per_link(found.pci.device_id());
                        rate(&gpus_found[i]).zip(rate(&gpus_found[j])).map(|(a, b)| f64::from(*count) * a.min(b))
                    }
                    _ => None,
                })
                .collect()
        })
        .collect();

    let mut gpus: Vec<Gpu> = gpus_found.iter().enumerate().map(|(index, found)| gpu_of(index, found)).collect();
    choose_nics(&mut gpus, &nics, &nic_links);

    NodeTopology {
        source,
        host,
        instance_type,
        numa_nodes,
        gpus,
        nics,
        nvswitches,
        gpu_links,
        gpu_peak_gbytes_per_s,
        gpu_link_source: GpuLinkSource::Hwloc,
        gpu_link_note: None,
        nic_links,
        other_fabric_nics: Vec::new(),
    }
}

fn bus_key(pci: &PCIDeviceAttributes) -> (u32, u8, u8, u8) {
    (u32::from(pci.domain()), pci.bus_id(), pci.bus_device(), pci.function())
}

fn bus_id(pci: &PCIDeviceAttributes) -> String {
    format!("{:04x}:{:02x}:{:02x}.{:x}", pci.domain(), pci.bus_id(), pci.bus_device(), pci.function())
}

fn pci_id(pci: &PCIDeviceAttributes) -> String {
    format!("{:04x}:{:04x}", pci.vendor_id(), pci.device_id())
}

/// The bridges above a device, then the CPU-side object its I/O tree hangs from.
fn path_of(object: &TopologyObject) -> Vec<Hop> {
    let mut path = Vec::new();
    for ancestor in object.ancestors() {
        let id = ancestor.global_persistent_index();
        match ancestor.attributes() {
            Some(ObjectAttributes::Bridge(bridge)) => path.push(if bridge.upstream_type() == BridgeType::Host {
                Hop::HostBridge(id)
            } else {
                Hop::PciBridge(id)
            }),
            // A PCI device above a PCI device (a multi-function card's parent) is not a bridge we cross.
            Some(ObjectAttributes::PCIDevice(_)) => {}
            _ if ancestor.object_type().is_io() => {}
            _ => {
                path.push(Hop::Cpu { id, numa_nodes: numa_nodes_of(ancestor) });
                break;
            }
        }
    }
    path
}

/// The object's CPUs in the kernel's list format (`0-47,96-143`); hwlocality's `Display` wraps it in
/// `CpuSet(...)`.
fn cpu_list(object: &TopologyObject) -> String {
    let cpus: Vec<u32> =
        object.cpuset().map(|set| set.iter_set().map(|i| usize::from(i) as u32).collect()).unwrap_or_default();
    format_cpu_list(&cpus)
}

fn numa_nodes_of(object: &TopologyObject) -> Vec<u32> {
    object.nodeset().map(|set| set.iter_set().map(|i| usize::from(i) as u32).collect()).unwrap_or_default()
}

/// CPU list and single NUMA node of the CPU-side object an I/O device hangs from.
fn locality(object: &TopologyObject) -> (String, Option<u32>) {
    let Some(anchor) = object.first_non_io_ancestor() else { return (String::new(), None) };
    let cpus = cpu_list(anchor);
    let nodes = numa_nodes_of(anchor);
    (cpus, if nodes.len() == 1 { Some(nodes[0]) } else { None })
}

fn os_devices(object: &TopologyObject) -> Vec<(String, Option<OSDeviceType>)> {
    object
        .io_children()
        .filter(|child| child.object_type() == ObjectType::OSDevice)
        .map(|child| {
            let name = child.name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let kind = match child.attributes() {
                Some(ObjectAttributes::OSDevice(attrs)) => Some(attrs.device_type()),
                _ => None,
            };
            (name, kind)
        })
        .collect()
}

fn has_network_osdev(object: &TopologyObject) -> bool {
    os_devices(object).iter().any(|(_, kind)| matches!(kind, Some(OSDeviceType::Network | OSDeviceType::OpenFabrics)))
}

fn gpu_of(index: usize, found: &Found<'_>) -> Gpu {
    let (cpus, numa_node) = locality(found.object);
    // The name the NVIDIA driver gives (through hwloc's CUDA/NVML OS devices) beats our table, which beats
    // the PCI ID database's (hwloc's "PCIDevice" info, when built with libpciaccess).
    let from_osdev = found
        .object
        .io_children()
        .find_map(|child| child.info("GPUModel"))
        .map(|m| m.to_string_lossy().into_owned());
    let from_pci_ids = found.object.info("PCIDevice").map(|m| m.to_string_lossy().into_owned());
    Gpu {
        index,
        pci_bus_id: bus_id(found.pci),
        pci_id: pci_id(found.pci),
        model: from_osdev.or_else(|| gpu_model(found.pci.device_id()).map(str::to_string)).or(from_pci_ids),
        numa_node,
        cpus,
        nearest_nics: Vec::new(),
        nearest_link: None,
        preferred_nics: Vec::new(),
        os_devices: os_devices(found.object).into_iter().map(|(name, _)| name).collect(),
    }
}

fn nic_of(index: usize, found: &Found<'_>, live: bool) -> Nic {
    let (cpus, numa_node) = locality(found.object);
    let devices = os_devices(found.object);
    let named = |wanted: OSDeviceType| devices.iter().find(|(_, kind)| *kind == Some(wanted)).map(|(n, _)| n.clone());
    let rdma = named(OSDeviceType::OpenFabrics);
    let netdev = named(OSDeviceType::Network);
    let is_efa = found.pci.vendor_id() == AMAZON && found.pci.device_id() & 0xfff0 == 0xefa0;
    let kind = match (is_efa, &rdma, &netdev) {
        (true, _, _) => NicKind::Efa,
        (false, Some(_), _) => NicKind::Rdma,
        (false, None, Some(_)) => NicKind::Ethernet,
        (false, None, None) => NicKind::Other,
    };
    let name = rdma.clone().or(netdev.clone()).unwrap_or_else(|| format!("pci:{}", bus_id(found.pci)));
    // Fixtures carry the speed as an info (hwloc has no attribute for it); on this machine sysfs knows.
    let from_info = found
        .object
        .io_children()
        .find_map(|child| child.info("LinkSpeedGbps"))
        .and_then(|v| v.to_str().ok()?.parse::<f64>().ok());
    let link_gbps = from_info.or_else(|| if live { sysfs_link_gbps(rdma.as_deref(), netdev.as_deref()) } else { None });
    let info = |key: &str| found.object.io_children().find_map(|child| child.info(key)).map(|v| v.to_string_lossy().into_owned());
    let physical_nic = info("efatop.PhysicalNic")
        .map(|label| PhysicalNic { label, link_gbps: info("efatop.PhysicalNicGbps").and_then(|v| v.parse().ok()) });
    Nic {
        index,
        name,
        kind,
        pci_bus_id: bus_id(found.pci),
        pci_id: pci_id(found.pci),
        link_gbps,
        numa_node,
        cpus,
        os_devices: devices.into_iter().map(|(name, _)| name).collect(),
        libfabric: Vec::new(),
        physical_nic,
    }
}

/// `ports/1/rate` of an RDMA device ("100 Gb/sec (4X EDR)"), else a netdev's `speed` in Mb/s (-1 when the
/// driver does not say, as virtio does).
fn sysfs_link_gbps(rdma: Option<&str>, netdev: Option<&str>) -> Option<f64> {
    let read = |path: String| attribute(Path::new(&path));
    if let Some(dev) = rdma {
        let rate = read(format!("/sys/class/infiniband/{dev}/ports/1/rate"));
        if let Some(gbps) = rate.as_deref().and_then(|r| r.split_whitespace().next()?.parse::<f64>().ok()) {
            return Some(gbps);
        }
    }
    let mbps = read(format!("/sys/class/net/{}/speed", netdev?))?.trim().parse::<i64>().ok()?;
    (mbps > 0).then(|| mbps as f64 / 1000.0)
}

/// Nearest NICs per GPU, then the even split between GPUs that share them. Devices that are halves of one
/// physical NIC count once: only the first of them (in bus order) is split out, so a GPU gets one channel
/// per physical NIC (p6e-gb200: cards 1 and 3, not 1 to 4).
fn choose_nics(gpus: &mut [Gpu], nics: &[Nic], nic_links: &[Vec<Link>]) {
    // A GPU's traffic goes over RDMA when the node has it; an ENA or a management port at PIX must not
    // win over an EFA at NODE.
    let any_rdma = nics.iter().any(|nic| nic.kind.is_rdma());
    let candidate = |k: usize| !any_rdma || nics[k].kind.is_rdma();
    for gpu in gpus.iter_mut() {
        let links = &nic_links[gpu.index];
        let nearest = (0..nics.len()).filter(|&k| candidate(k)).map(|k| links[k]).min();
        gpu.nearest_link = nearest;
        gpu.nearest_nics = (0..nics.len()).filter(|&k| candidate(k) && Some(links[k]) == nearest).collect();
    }
    let mut sharing: BTreeMap<Vec<usize>, Vec<usize>> = BTreeMap::new();
    for gpu in gpus.iter() {
        sharing.entry(gpu.nearest_nics.clone()).or_default().push(gpu.index);
    }
    for (nearest, sharers) in sharing {
        let mut physical_seen: Vec<&str> = Vec::new();
        let nearest: Vec<usize> = nearest
            .into_iter()
            .filter(|&k| match &nics[k].physical_nic {
                Some(shared) if physical_seen.contains(&shared.label.as_str()) => false,
                Some(shared) => {
                    physical_seen.push(&shared.label);
                    true
                }
                None => true,
            })
            .collect();
        let (n, g) = (nearest.len(), sharers.len());
        for (position, &gpu) in sharers.iter().enumerate() {
            gpus[gpu].preferred_nics = if n >= g && n % g == 0 {
                let share = n / g;
                nearest[position * share..(position + 1) * share].to_vec()
            } else {
                nearest.clone()
            };
        }
    }
}

/// NVLinks per GPU on an NVSwitch baseboard, by PCI device ID. Sources: NVIDIA's A100 (12 third-generation
/// links), H100 SXM5 and H200 SXM (18 fourth-generation) and B200 (18 fifth-generation) datasheets; PCI IDs
/// from the PCI ID Repository. B300 (10de:3182, from aws/sagemaker-hyperpod-cli's MIG device filter): NVLink
/// 5 at 1.8 TB/s per GPU as B200 (NODE-FACTS.md), so 18 links of 50 GB/s.
fn nvlinks_per_gpu(device_id: u16) -> Option<u8> {
    match device_id {
        0x20b0 | 0x20b2 => Some(12),
        0x2330 | 0x2335 | 0x2901 | 0x3182 => Some(18),
        _ => None,
    }
}

/// One NVLink's rate in GB/s per direction, by PCI device ID: each datasheet's bidirectional NVLink total
/// over its link count, halved. A100: 600 GB/s over 12 links; H100 SXM5 and H200 SXM: 900 GB/s over 18
/// (NVLink 3 and 4 both run 25 GB/s a link each way); B200: 1.8 TB/s over 18 (NVLink 5, 50 GB/s).
fn nvlink_gbytes_per_s_per_link(device_id: u16) -> Option<f64> {
    match device_id {
        0x20b0 | 0x20b2 | 0x2330 | 0x2335 => Some(25.0),
        0x2901 | 0x3182 => Some(50.0),
        _ => None,
    }
}

/// Model names as `nvidia-smi` prints them, for when hwloc has no NVIDIA OS device to ask.
fn gpu_model(device_id: u16) -> Option<&'static str> {
    match device_id {
        0x20b0 => Some("NVIDIA A100-SXM4-40GB"),
        0x20b2 => Some("NVIDIA A100-SXM4-80GB"),
        0x2330 => Some("NVIDIA H100 80GB HBM3"),
        0x2335 => Some("NVIDIA H200"),
        0x2901 => Some("NVIDIA B200"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by `scripts/bench/fuzz` (`topology_xml`), reduced: hwloc 2.9 crashed with SIGSEGV loading this (a
    /// fixture with one `complete_cpuset` left out did too), and efatop with it.
    const CPUSET_WITHOUT_COMPLETE_CPUSET: &str = concat!(
        r#"<?xml version="1.0"?><topology version="2.0">"#,
        r#"<object type="Machine" os_index="0" cpuset="0xff" nodeset="0x1"><object cpuset="0xf">"#,
        r#"<object type="NUMANode" os_index="0" cpuset="0xff" nodeset="0x1"/></object></object></topology>"#,
    );

    #[test]
    fn the_instance_type_is_dmis_product_name_when_there_is_one() {
        let root = std::env::temp_dir().join(format!("efatop-dmi-{}", std::process::id()));
        let dmi = root.join("sys/class/dmi/id");
        std::fs::create_dir_all(&dmi).expect("dmi dir");
        assert_eq!(dmi_product_name(&root), None, "no file");
        std::fs::write(dmi.join("product_name"), "  \n").expect("write");
        assert_eq!(dmi_product_name(&root), None, "blank");
        std::fs::write(dmi.join("product_name"), "p6-b300.48xlarge\n").expect("write");
        assert_eq!(dmi_product_name(&root).as_deref(), Some("p6-b300.48xlarge"));
        // What a crafted tree holds instead: more than a page, a link, a FIFO (which a plain read would wait
        // on for ever). Each is no name, at once.
        std::fs::write(dmi.join("product_name"), "p".repeat(10 << 20)).expect("write");
        assert_eq!(dmi_product_name(&root), None, "10 MiB");
        std::fs::remove_file(dmi.join("product_name")).expect("remove");
        std::fs::write(root.join("elsewhere"), "p5.48xlarge\n").expect("write");
        std::os::unix::fs::symlink(root.join("elsewhere"), dmi.join("product_name")).expect("symlink");
        assert_eq!(dmi_product_name(&root), None, "a link");
        std::fs::remove_file(dmi.join("product_name")).expect("remove");
        assert!(std::process::Command::new("mkfifo").arg(dmi.join("product_name")).status().expect("mkfifo").success());
        assert_eq!(dmi_product_name(&root), None, "a FIFO");
        std::fs::remove_dir_all(&root).expect("clean up");
    }

    #[test]
    fn an_encoding_hwloc_cannot_convert_is_refused_not_a_panic() {
        // Found by `scripts/bench/fuzz` (`topology_xml`): hwlocality panicked on hwloc's EILSEQ.
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fuzzed/utf7-declaration.xml");
        let err = NodeTopology::from_xml_file(&path).expect_err("refused");
        assert!(err.to_string().contains("is not an hwloc XML topology"), "{err}");
    }

    #[test]
    fn a_cpuset_without_its_complete_cpuset_is_refused_before_hwloc_crashes_on_it() {
        let err = NodeTopology::from_xml_str(CPUSET_WITHOUT_COMPLETE_CPUSET, "fuzzed.xml").expect_err("refused");
        assert_eq!(
            err.to_string(),
            "fuzzed.xml is not an hwloc XML topology (an <object> has a cpuset but no complete_cpuset)"
        );
        let fixture = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/p5.48xlarge.xml"))
            .expect("the p5 fixture");
        let (head, tail) = fixture.split_at(fixture.find(r#"type="PU""#).expect("a PU"));
        let pu_without_complete_cpuset = format!("{head}{}", tail.replacen("complete_cpuset=", "complete_cpusets=", 1));
        assert!(NodeTopology::from_xml_str(&pu_without_complete_cpuset, "p5.xml").is_err());
        assert!(NodeTopology::from_xml_str(&fixture, "p5.xml").is_ok());
    }

    /// Found by `scripts/bench/fuzz` (`topology_xml`, 2026-12-02): the p5en fixture with its machine's
    /// `complete_nodeset` renamed made hwloc's loader dereference NULL (SIGSEGV inside libhwloc).
    #[test]
    fn a_nodeset_without_its_complete_nodeset_is_refused_before_hwloc_crashes_on_it() {
        let fixture = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/p5en.48xlarge.xml"))
            .expect("the p5en fixture");
        let machine_without_complete_nodeset = fixture.replacen("complete_nodeset=", "complet2_nodeset=", 1);
        let err = NodeTopology::from_xml_str(&machine_without_complete_nodeset, "fuzzed.xml").expect_err("refused");
        assert_eq!(
            err.to_string(),
            "fuzzed.xml is not an hwloc XML topology (an <object> has a nodeset but no complete_nodeset)"
        );
        assert!(NodeTopology::from_xml_str(&fixture, "p5en.xml").is_ok());
    }

    #[test]
    fn object_attributes_are_read_whatever_their_order_or_quotes() {
        let names = |xml| object_attribute_names(xml).collect::<Vec<_>>();
        assert_eq!(
            names("<object os_index=\"0\" type='Core'><object\n  cpuset = \"0x1\"/></object>"),
            vec![vec!["os_index", "type"], vec!["cpuset"]]
        );
        assert_eq!(names(r#"<objects a="1"/><object_x b="2"/><info name="cpuset"/>"#), Vec::<Vec<&str>>::new());
        assert_eq!(names(r#"<object name="a>b" cpuset="0x1"/>"#), vec![vec!["name", "cpuset"]]);
        assert_eq!(names("<object>text<x a=\"1\"/><object cpuset=0x1 type=\"PU\">"), vec![Vec::<&str>::new(), Vec::new()]);
        assert_eq!(set_without_its_complete_set(r#"<object cpuset="0x1"/>"#), Some("cpuset"));
        assert_eq!(set_without_its_complete_set(r#"<object complete_cpuset="0x1" cpuset="0x1"/>"#), None);
        assert_eq!(set_without_its_complete_set(r#"<object cpuset="0x1" complete_cpuset="0x1" nodeset="0x1"/>"#), Some("nodeset"));
        assert_eq!(set_without_its_complete_set(r#"<object complete_nodeset="0x1" nodeset="0x1"/>"#), None);
        assert_eq!(set_without_its_complete_set(r#"<object type="OSDev" name="eth0"/>"#), None);
    }
}
