//! How two GPUs of this machine are connected and what NVLink carries between them, from NVML: each GPU's
//! active NVLinks, where each one leads (the other GPU, or an NVSwitch), and one link's rate.
//!
//! The NVML part only reads ([`GpuNvlinks`] per GPU); what a pair gets is decided by pure functions
//! ([`nvlink_between`], [`per_link_gbytes_per_s`]) that the tests drive with made-up GPUs, since the build
//! machines have no NVLink. Without the driver every call returns the reason, never panics.
//!
//! - Direct links: the pair's peak is the links between the two × one link's rate.
//! - Through NVSwitches: every GPU reaches every other with all of its switch links, so the pair gets the
//!   fewer of the two GPUs' switch links.
//! - No NVLink: the PCIe level NVML reports (`PIX` ... `SYS`), and no peak: PCIe is not guessed.

use efatop_proto::topology::{GpuLinkSource, Link, PairLink};
use efatop_topology::{NodeTopology, normalize_bus_id};
use nvml_wrapper::enum_wrappers::device::TopologyLevel;
use nvml_wrapper::enums::device::{DeviceArchitecture, SampleValue};
use nvml_wrapper::struct_wrappers::device::PciInfo;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON;
use nvml_wrapper::{Device, Nvml};

use crate::gpu::nvml;

/// nvml.h's `NVML_NVLINK_MAX_LINKS` (18 from Hopper on). NVML answers an error for an index past a GPU's
/// own links, which reads as no link there.
const MAX_LINKS: u32 = 18;
const NVIDIA: u32 = 0x10de;

/// Where one active NVLink leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkEnd {
    /// A GPU, by normalized PCI bus id.
    Gpu(String),
    /// An NVIDIA device that is not a GPU NVML lists: an NVSwitch.
    Switch,
    /// NVML could not say (or an IBM NPU on POWER): counted for no GPU pair.
    Unknown,
}

/// One GPU's NVLinks as NVML reports them: the input of [`nvlink_between`].
#[derive(Clone, Debug, PartialEq)]
pub struct GpuNvlinks {
    /// Normalized (`0000:53:00.0`).
    pub bus_id: String,
    /// Per link index NVML answered for: `Some(end)` when active, `None` when down.
    pub links: Vec<Option<LinkEnd>>,
    /// NVML's `NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON`: the active links' common rate, MB/s each way.
    pub speed_mbytes_per_s: Option<u64>,
    /// The NVLink generation of the GPU's architecture (Pascal 1 ... Blackwell 5).
    pub generation: Option<u8>,
    /// `nvmlDeviceGetNvLinkVersion` of the first active link, as NVML gives it.
    pub version: Option<u32>,
}

impl GpuNvlinks {
    fn active(&self) -> impl Iterator<Item = &LinkEnd> {
        self.links.iter().flatten()
    }

    fn links_to(&self, end: &LinkEnd) -> usize {
        self.active().filter(|e| *e == end).count()
    }
}

/// Where a remote end leads, from NVML's remote PCI info: a GPU NVML lists, else an NVIDIA device (an
/// NVSwitch), else unknown. Read from the PCI info rather than `nvmlDeviceGetNvLinkRemoteDeviceType`:
/// nvml-wrapper 0.13 hands that call a temporary and always returns `Unknown`.
pub fn classify_link_end(remote: Option<&PciInfo>, gpu_bus_ids: &[String]) -> LinkEnd {
    let Some(remote) = remote else { return LinkEnd::Unknown };
    match normalize_bus_id(&remote.bus_id) {
        Some(bus) if gpu_bus_ids.contains(&bus) => LinkEnd::Gpu(bus),
        _ if remote.pci_device_id & 0xffff == NVIDIA => LinkEnd::Switch,
        _ => LinkEnd::Unknown,
    }
}

/// One NVLink's rate in GB/s each way. NVML's queried speed first; else the generation's datasheet rate:
/// P100 160 GB/s over 4 links (NVLink 1, 20 GB/s a link each way); V100 300 GB/s over 6, A100 600 GB/s
/// over 12, H100/H200 900 GB/s over 18 (NVLink 2 to 4, 25 GB/s); B200 1.8 TB/s over 18 (NVLink 5, 50 GB/s).
///
/// The version NVML reports is the last resort and read only where it cannot mislead: drivers have
/// returned both the bare generation (1-5) and `nvmlNvlinkVersion_t` (1 = 1.0, 2 = 2.0, 3 = 2.2, 4 = 3.0,
/// 5 = 3.1, 6 = 4.0, 7 = 5.0, which some drivers report for H100). 1 is 20 GB/s either way and 2, 3, 4, 6
/// are 25 GB/s either way; 5 and 7 could be 25 or 50, so they give no rate.
pub fn per_link_gbytes_per_s(speed_mbytes_per_s: Option<u64>, generation: Option<u8>, version: Option<u32>) -> Option<f64> {
    if let Some(speed) = speed_mbytes_per_s.filter(|&s| s > 0) {
        return Some(speed as f64 / 1000.0);
    }
    match generation {
        Some(1) => return Some(20.0),
        Some(2..=4) => return Some(25.0),
        Some(5) => return Some(50.0),
        _ => {}
    }
    match version {
        Some(1) => Some(20.0),
        Some(2 | 3 | 4 | 6) => Some(25.0),
        _ => None,
    }
}

/// The NVLink connection between two GPUs, or `None` when no active link serves the pair.
///
/// Links between the two count from either end (the larger count, in case one end's remote info was
/// unreadable); switch links count as the fewer of the two GPUs' (a pair cannot use more than its
/// narrower side). A pair with both adds them. The rate is the slower GPU's.
pub fn nvlink_between(a: &GpuNvlinks, b: &GpuNvlinks) -> Option<PairLink> {
    let direct = a.links_to(&LinkEnd::Gpu(b.bus_id.clone())).max(b.links_to(&LinkEnd::Gpu(a.bus_id.clone())));
    let through_switches = a.links_to(&LinkEnd::Switch).min(b.links_to(&LinkEnd::Switch));
    let links = direct + through_switches;
    if links == 0 {
        return None;
    }
    let rate = |gpu: &GpuNvlinks| per_link_gbytes_per_s(gpu.speed_mbytes_per_s, gpu.generation, gpu.version);
    let per_link = match (rate(a), rate(b)) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    };
    Some(PairLink::nvlink(u8::try_from(links).ok(), per_link, GpuLinkSource::Nvml))
}

/// NVML's PCIe level between two GPUs, in `nvidia-smi topo -m`'s words.
pub fn pcie_link(level: TopologyLevel) -> Link {
    match level {
        // One board with two GPUs (K80) or one PCIe switch.
        TopologyLevel::Internal | TopologyLevel::Single => Link::Pix,
        TopologyLevel::Multiple => Link::Pxb,
        TopologyLevel::HostBridge => Link::Phb,
        TopologyLevel::Node => Link::Node,
        TopologyLevel::System => Link::Sys,
    }
}

/// The NVLink generation of an architecture: NVML's version numbers are not to be trusted (see
/// [`per_link_gbytes_per_s`]), the architecture is.
fn nvlink_generation(architecture: &DeviceArchitecture) -> Option<u8> {
    match architecture {
        DeviceArchitecture::Pascal => Some(1),
        DeviceArchitecture::Volta => Some(2),
        DeviceArchitecture::Ampere => Some(3),
        DeviceArchitecture::Hopper => Some(4),
        DeviceArchitecture::Blackwell => Some(5),
        _ => None,
    }
}

/// Every GPU's NVLinks on this machine, read once; [`NvlinkSurvey::pair`] answers any pair of them.
pub struct NvlinkSurvey {
    nvml: &'static Nvml,
    /// NVML's index of each GPU, alongside its links.
    gpus: Vec<(u32, GpuNvlinks)>,
}

impl NvlinkSurvey {
    /// Loads NVML (once per process) and reads every GPU's links. Fails only when NVML cannot start or
    /// count the GPUs; a GPU it cannot open is left out.
    pub fn read() -> Result<Self, String> {
        let nvml = nvml()?;
        let count = nvml.device_count().map_err(|err| format!("NVML cannot count GPUs: {err}"))?;
        let devices: Vec<(u32, Device<'static>, String)> = (0..count)
            .filter_map(|index| {
                let device = nvml.device_by_index(index).ok()?;
                let bus = normalize_bus_id(&device.pci_info().ok()?.bus_id)?;
                Some((index, device, bus))
            })
            .collect();
        let bus_ids: Vec<String> = devices.iter().map(|(_, _, bus)| bus.clone()).collect();
        let gpus = devices.iter().map(|(index, device, bus)| (*index, read_links(device, bus, &bus_ids))).collect();
        Ok(Self { nvml, gpus })
    }

    /// Bus ids of the GPUs NVML lists, normalized.
    pub fn bus_ids(&self) -> impl Iterator<Item = &str> {
        self.gpus.iter().map(|(_, gpu)| gpu.bus_id.as_str())
    }

    /// How the GPU at `bus_a` reaches the one at `bus_b`. Bus ids as CUDA, NVML or sysfs write them
    /// (`00000000:53:00.0`, `0000:53:00.0`, `53:00.0`, any case).
    pub fn pair(&self, bus_a: &str, bus_b: &str) -> Result<PairLink, String> {
        let (index_a, a) = self.find(bus_a)?;
        let (index_b, b) = self.find(bus_b)?;
        if a.bus_id == b.bus_id {
            return Ok(PairLink::pcie(Link::Same, GpuLinkSource::Nvml));
        }
        if let Some(pair) = nvlink_between(a, b) {
            return Ok(pair);
        }
        let device = |index: u32| self.nvml.device_by_index(index).map_err(|err| format!("NVML GPU {index}: {err}"));
        let level = device(index_a)?
            .topology_common_ancestor(device(index_b)?)
            .map_err(|err| format!("NVML cannot say how {} and {} are connected: {err}", a.bus_id, b.bus_id))?;
        Ok(PairLink::pcie(pcie_link(level), GpuLinkSource::Nvml))
    }

    fn find(&self, bus: &str) -> Result<(u32, &GpuNvlinks), String> {
        let wanted = normalize_bus_id(bus).ok_or_else(|| format!("`{bus}` is not a PCI bus id"))?;
        self.gpus
            .iter()
            .find(|(_, gpu)| gpu.bus_id == wanted)
            .map(|(index, gpu)| (*index, gpu))
            .ok_or_else(|| format!("NVML lists no GPU at {wanted}"))
    }
}

fn read_links(device: &Device<'static>, bus_id: &str, gpu_bus_ids: &[String]) -> GpuNvlinks {
    let mut links = Vec::new();
    let mut version = None;
    for index in 0..MAX_LINKS {
        let link = device.link_wrapper_for(index);
        // NotSupported (a GPU without NVLink) or InvalidArg (past its links): nothing at this index.
        let Ok(active) = link.is_active() else { continue };
        if !active {
            links.push(None);
            continue;
        }
        if version.is_none() {
            version = link.version().ok();
        }
        links.push(Some(classify_link_end(link.remote_pci_info().ok().as_ref(), gpu_bus_ids)));
    }
    let speed_mbytes_per_s = device
        .field_values_for(&[FieldId(NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON)])
        .ok()
        .and_then(|samples| samples.into_iter().next())
        .and_then(|sample| sample.ok()?.value.ok())
        .and_then(|value| match value {
            SampleValue::U32(v) => Some(u64::from(v)),
            SampleValue::U64(v) => Some(v),
            SampleValue::I64(v) => u64::try_from(v).ok(),
            SampleValue::F64(v) => (v.is_finite() && v >= 0.0).then_some(v as u64),
        });
    GpuNvlinks {
        bus_id: bus_id.to_string(),
        links,
        speed_mbytes_per_s,
        generation: device.architecture().ok().as_ref().and_then(nvlink_generation),
        version,
    }
}

/// How the GPU at `bus_a` reaches the one at `bus_b` on this machine, from NVML: what a GPU-to-GPU
/// experiment measures its bandwidth against. Reads every GPU's links each call; for many pairs, read an
/// [`NvlinkSurvey`] once. `Err` says why NVML could not answer (`no NVIDIA driver ...`).
pub fn pair_link(bus_a: &str, bus_b: &str) -> Result<PairLink, String> {
    NvlinkSurvey::read()?.pair(bus_a, bus_b)
}

/// [`pair_link`], else what `topology` infers for the two GPUs (hwloc and the GPU model), else why neither
/// could tell. `topology` is this machine's (`NodeTopology::discover`).
pub fn pair_link_or_inferred(topology: Option<&NodeTopology>, bus_a: &str, bus_b: &str) -> Result<PairLink, String> {
    let nvml_error = match pair_link(bus_a, bus_b) {
        Ok(pair) => return Ok(pair),
        Err(err) => err,
    };
    let index = |bus: &str| topology?.gpu_by_pci_bus_id(bus).map(|gpu| gpu.index);
    match (topology, index(bus_a), index(bus_b)) {
        (Some(topology), Some(a), Some(b)) => topology.pair_link(a, b).ok_or(nvml_error),
        (None, _, _) => Err(format!("{nvml_error}; no topology to infer the link from")),
        _ => Err(format!("{nvml_error}; the topology lists no GPU at {bus_a} or {bus_b}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0000:53:00.0";
    const B: &str = "0000:64:00.0";
    const C: &str = "0000:75:00.0";

    /// A GPU with these active link ends (and `down` links that are not active), Hopper, no queried speed.
    fn gpu(bus: &str, ends: &[LinkEnd], down: usize) -> GpuNvlinks {
        let links = ends.iter().cloned().map(Some).chain(std::iter::repeat_n(None, down)).collect();
        GpuNvlinks { bus_id: bus.into(), links, speed_mbytes_per_s: None, generation: Some(4), version: Some(4) }
    }

    fn to(bus: &str, n: usize) -> Vec<LinkEnd> {
        vec![LinkEnd::Gpu(bus.into()); n]
    }

    #[test]
    fn direct_links_count_only_those_between_the_two() {
        // Hybrid cube mesh: A has 2 links to B and 4 to C.
        let a = gpu(A, &[to(B, 2), to(C, 4)].concat(), 0);
        let b = gpu(B, &to(A, 2), 4);
        let pair = nvlink_between(&a, &b).expect("NVLink");
        assert_eq!(pair.link, Link::NvLink(Some(2)));
        assert_eq!((pair.active_links, pair.per_link_gbytes_per_s, pair.peak_gbytes_per_s), (Some(2), Some(25.0), Some(50.0)));
        assert_eq!(pair.source, GpuLinkSource::Nvml);
        // Either end's view is enough when the other cannot read its remote ends.
        let blind_b = gpu(B, &[LinkEnd::Unknown, LinkEnd::Unknown], 0);
        assert_eq!(nvlink_between(&a, &blind_b).and_then(|p| p.active_links), Some(2));
        assert_eq!(nvlink_between(&blind_b, &a).and_then(|p| p.active_links), Some(2));
    }

    #[test]
    fn through_nvswitches_a_pair_gets_the_narrower_gpus_links() {
        // p5: 18 switch links each, 450 GB/s each way.
        let a = gpu(A, &vec![LinkEnd::Switch; 18], 0);
        let b = gpu(B, &vec![LinkEnd::Switch; 18], 0);
        let pair = nvlink_between(&a, &b).expect("NVLink");
        assert_eq!((pair.link, pair.peak_gbytes_per_s), (Link::NvLink(Some(18)), Some(450.0)));
        // Two links of B down: the pair has 16.
        let degraded = gpu(B, &vec![LinkEnd::Switch; 16], 2);
        assert_eq!(nvlink_between(&a, &degraded).map(|p| (p.link, p.peak_gbytes_per_s)), Some((Link::NvLink(Some(16)), Some(400.0))));
    }

    #[test]
    fn direct_and_switch_links_add_up() {
        let a = gpu(A, &[to(B, 4), vec![LinkEnd::Switch; 8]].concat(), 0);
        let b = gpu(B, &[to(A, 4), vec![LinkEnd::Switch; 6]].concat(), 0);
        assert_eq!(nvlink_between(&a, &b).and_then(|p| p.active_links), Some(10));
    }

    #[test]
    fn inactive_unknown_and_other_gpus_links_give_no_nvlink() {
        let a = gpu(A, &[to(C, 6), vec![LinkEnd::Unknown; 2]].concat(), 10);
        let b = gpu(B, &[LinkEnd::Switch], 17);
        assert_eq!(nvlink_between(&a, &b), None);
        // A GPU without NVLink at all (PCIe card): NVML answered for no index.
        let pcie_card = GpuNvlinks { links: Vec::new(), ..gpu(B, &[], 0) };
        assert_eq!(nvlink_between(&a, &pcie_card), None);
    }

    #[test]
    fn the_rate_prefers_nvmls_speed_then_the_architecture_then_an_unambiguous_version() {
        // H100 reports 26562 MB/s a link: its signalling rate, above the datasheet's 25.
        assert_eq!(per_link_gbytes_per_s(Some(26_562), Some(4), Some(4)), Some(26.562));
        assert_eq!(per_link_gbytes_per_s(Some(0), Some(5), None), Some(50.0));
        assert_eq!(per_link_gbytes_per_s(None, Some(1), None), Some(20.0));
        assert_eq!(per_link_gbytes_per_s(None, None, Some(6)), Some(25.0));
        // 5 and 7 are 3.1/5.0 or the bare generation 5: no guess.
        assert_eq!(per_link_gbytes_per_s(None, None, Some(7)), None);
        assert_eq!(per_link_gbytes_per_s(None, None, Some(5)), None);
        assert_eq!(per_link_gbytes_per_s(None, None, None), None);
    }

    #[test]
    fn an_unknown_rate_keeps_the_link_count_and_drops_the_peak() {
        let unknown = |bus: &str| GpuNvlinks { generation: None, version: Some(7), ..gpu(bus, &vec![LinkEnd::Switch; 18], 0) };
        let pair = nvlink_between(&unknown(A), &unknown(B)).expect("NVLink");
        assert_eq!((pair.link, pair.per_link_gbytes_per_s, pair.peak_gbytes_per_s), (Link::NvLink(Some(18)), None, None));
        // One GPU knowing its rate is enough; two different rates give the slower.
        let fast = GpuNvlinks { generation: Some(5), ..gpu(A, &vec![LinkEnd::Switch; 18], 0) };
        assert_eq!(nvlink_between(&fast, &unknown(B)).and_then(|p| p.peak_gbytes_per_s), Some(900.0));
        assert_eq!(nvlink_between(&fast, &gpu(B, &vec![LinkEnd::Switch; 18], 0)).and_then(|p| p.peak_gbytes_per_s), Some(450.0));
    }

    #[test]
    fn remote_ends_are_gpus_nvidia_switches_or_unknown() {
        let gpus = vec![A.to_string(), B.to_string()];
        let remote = |bus: &str, vendor_device: u32| PciInfo {
            bus: 0,
            bus_id: bus.into(),
            device: 0,
            domain: 0,
            pci_device_id: vendor_device,
            pci_sub_system_id: None,
        };
        // NVML writes 8-digit domains and upper case.
        assert_eq!(classify_link_end(Some(&remote("00000000:64:00.0", 0x2330_10de)), &gpus), LinkEnd::Gpu(B.into()));
        assert_eq!(classify_link_end(Some(&remote("00000000:C4:00.0", 0x22a3_10de)), &gpus), LinkEnd::Switch);
        assert_eq!(classify_link_end(Some(&remote("00000000:04:00.0", 0x04ea_1014)), &gpus), LinkEnd::Unknown);
        assert_eq!(classify_link_end(None, &gpus), LinkEnd::Unknown);
    }

    #[test]
    fn pcie_levels_are_nvidia_smis() {
        assert_eq!(pcie_link(TopologyLevel::Single), Link::Pix);
        assert_eq!(pcie_link(TopologyLevel::Multiple), Link::Pxb);
        assert_eq!(pcie_link(TopologyLevel::HostBridge), Link::Phb);
        assert_eq!(pcie_link(TopologyLevel::Node), Link::Node);
        assert_eq!(pcie_link(TopologyLevel::System), Link::Sys);
    }

    #[test]
    fn without_the_driver_pairs_are_an_error_not_a_panic() {
        // This build machine has no NVIDIA driver; a GPU machine answers or names the bad bus id.
        match pair_link("00000000:53:00.0", "0000:64:00.0") {
            Err(reason) => assert!(!reason.is_empty()),
            Ok(pair) => assert_ne!(pair.link, Link::Same),
        }
        // The topology's inference stands in: the p5 fixture's GPU0 and GPU1.
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../topology/fixtures/p5.48xlarge.xml");
        let p5 = NodeTopology::from_xml_file(&path).expect("p5 fixture");
        if NvlinkSurvey::read().is_err() {
            let pair = pair_link_or_inferred(Some(&p5), "00000000:53:00.0", "0000:64:00.0").expect("inferred");
            assert_eq!((pair.link, pair.peak_gbytes_per_s, pair.source), (Link::NvLink(Some(18)), Some(450.0), GpuLinkSource::Hwloc));
            let err = pair_link_or_inferred(Some(&p5), A, "0000:01:00.0").expect_err("no such GPU");
            assert!(err.contains("lists no GPU at"), "{err}");
            assert!(pair_link_or_inferred(None, A, B).is_err());
        }
    }
}
