//! A node's layout as results and the dashboard carry it, with no hwloc or NVML behind it: how two devices
//! are connected in the terms of `nvidia-smi topo -m` ([`Link`]), what NVLink carries between two GPUs
//! ([`PairLink`], and where that came from, [`GpuLinkSource`]), and CPU lists in the kernel's format.
//! `efatop-topology` finds these facts with hwloc, `efatop-node` with NVML.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The connection between two devices, as `nvidia-smi topo -m` names it. The variants run from nearest to
/// farthest, and `Ord` follows that order, so the nearest of several links is their minimum.
///
/// The PCIe levels are NVML's (`nvmlGpuTopologyLevel_t`): `Pix` = through at most one PCIe switch,
/// `Pxb` = through several switches but not a host bridge, `Phb` = through a host bridge, `Node` = between
/// host bridges of one NUMA node, `Sys` = between NUMA nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Link {
    /// The device itself (`X`).
    Same,
    /// NVLink, with the number of bonded links when known (`NV18`; `NV?` when the GPU model is unknown).
    NvLink(Option<u8>),
    /// At most one PCIe switch (`PIX`).
    Pix,
    /// Several PCIe switches, no host bridge (`PXB`).
    Pxb,
    /// Through a PCIe host bridge (`PHB`).
    Phb,
    /// Between PCIe host bridges within one NUMA node (`NODE`).
    Node,
    /// Across the interconnect between NUMA nodes (`SYS`).
    Sys,
}

impl Link {
    /// Every PCIe level, nearest first, with what it means: the legend under the matrix.
    pub const LEGEND: [(&'static str, &'static str); 7] = [
        ("X", "the device itself"),
        ("SYS", "PCIe plus the interconnect between NUMA nodes (e.g. AMD Infinity Fabric, Intel UPI)"),
        ("NODE", "PCIe plus the interconnect between PCIe host bridges within one NUMA node"),
        ("PHB", "PCIe through a PCIe host bridge (the CPU)"),
        ("PXB", "PCIe through several PCIe switches, no host bridge"),
        ("PIX", "PCIe through at most one PCIe switch"),
        ("NV#", "a bonded set of # NVLinks, direct or through NVSwitches"),
    ];

    /// Whether the two devices share a PCIe switch (or a tree of them) without going through the CPU:
    /// what GPUDirect RDMA needs to run at full speed.
    pub fn is_pcie_local(self) -> bool {
        matches!(self, Link::Pix | Link::Pxb)
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Link::Same => "X",
            Link::NvLink(Some(n)) => return f.pad(&format!("NV{n}")),
            Link::NvLink(None) => "NV?",
            Link::Pix => "PIX",
            Link::Pxb => "PXB",
            Link::Phb => "PHB",
            Link::Node => "NODE",
            Link::Sys => "SYS",
        };
        f.pad(text)
    }
}

impl FromStr for Link {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(match text {
            "X" => Link::Same,
            "NV?" => Link::NvLink(None),
            "PIX" => Link::Pix,
            "PXB" => Link::Pxb,
            "PHB" => Link::Phb,
            "NODE" => Link::Node,
            "SYS" => Link::Sys,
            other => match other.strip_prefix("NV").map(str::parse::<u8>) {
                Some(Ok(n)) => Link::NvLink(Some(n)),
                _ => return Err(format!("`{other}` is not a link (X, NV#, PIX, PXB, PHB, NODE or SYS)")),
            },
        })
    }
}

// JSON carries links as nvidia-smi's words, so a reader of the JSON sees the same cells as the matrix.
impl Serialize for Link {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Link {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Where a GPU pair's link (and its NVLink peak) came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuLinkSource {
    /// hwloc's PCI tree: NVLink inferred from NVSwitch PCI devices, the link count and per-link rate from
    /// the GPU model (an XML file of another machine, or a machine without the NVIDIA driver).
    #[default]
    Hwloc,
    /// NVML counted each GPU's active NVLinks and where each one leads.
    Nvml,
}

impl GpuLinkSource {
    /// How the matrix's legend and the dashboard name the source.
    pub fn label(self) -> &'static str {
        match self {
            GpuLinkSource::Hwloc => "inferred from hwloc and the GPU model",
            GpuLinkSource::Nvml => "NVML",
        }
    }
}

/// How one GPU reaches another. Rates are GB/s (10^9 bytes) in one direction: what one GPU can write
/// into the other, the figure a datasheet's "bidirectional" total is twice of.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairLink {
    /// `NV#` with the NVLinks that carry the pair's traffic, else the PCIe level (`PIX` ... `SYS`).
    pub link: Link,
    /// The NVLinks counted in `NV#`: links between the two, plus, through NVSwitches, the fewer of the two
    /// GPUs' switch links. `None` when the pair has no NVLink or the count is unknown.
    pub active_links: Option<u8>,
    /// One NVLink's rate, when known: queried from NVML, else from the NVLink generation.
    pub per_link_gbytes_per_s: Option<f64>,
    /// `active_links × per_link_gbytes_per_s`; `None` without NVLink (PCIe peaks are not guessed).
    pub peak_gbytes_per_s: Option<f64>,
    pub source: GpuLinkSource,
}

impl PairLink {
    /// A pair that has NVLink, from a link count and a per-link rate (either may be unknown).
    pub fn nvlink(active_links: Option<u8>, per_link_gbytes_per_s: Option<f64>, source: GpuLinkSource) -> Self {
        let peak = active_links.zip(per_link_gbytes_per_s).map(|(links, rate)| f64::from(links) * rate);
        Self { link: Link::NvLink(active_links), active_links, per_link_gbytes_per_s, peak_gbytes_per_s: peak, source }
    }

    /// A pair without NVLink: PCIe at this level, and no peak.
    pub fn pcie(link: Link, source: GpuLinkSource) -> Self {
        Self { link, active_links: None, per_link_gbytes_per_s: None, peak_gbytes_per_s: None, source }
    }

    /// `NV18 450 GB/s`, `NV? (rate unknown)`, `SYS`: a cell of the dashboard's list.
    pub fn summary(&self) -> String {
        match (self.link, self.peak_gbytes_per_s) {
            (Link::NvLink(_), Some(peak)) => format!("{} {} GB/s", self.link, format_gbytes(peak)),
            (Link::NvLink(_), None) => format!("{} (rate unknown)", self.link),
            (link, _) => link.to_string(),
        }
    }
}

/// 450.0 → "450", 478.125 → "478.1": peaks are read, not computed with.
pub fn format_gbytes(value: f64) -> String {
    let text = format!("{value:.1}");
    text.strip_suffix(".0").map_or_else(|| text.clone(), str::to_string)
}

/// `0-3,8,10-11` → `[0, 1, 2, 3, 8, 10, 11]`; what cannot be read is skipped.
pub fn parse_cpu_list(text: &str) -> Vec<u32> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((lo, hi)) => {
                if let (Ok(lo), Ok(hi)) = (lo.parse::<u32>(), hi.parse::<u32>()) {
                    cpus.extend(lo..=hi);
                }
            }
            None => cpus.extend(part.parse::<u32>().ok()),
        }
    }
    cpus
}

/// Sorted CPUs → `0-3,8,10-11`.
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut iter = cpus.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        parts.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips() {
        let all = [Link::Same, Link::NvLink(Some(18)), Link::NvLink(None), Link::Pix, Link::Pxb, Link::Phb, Link::Node];
        for link in all.into_iter().chain([Link::Sys]) {
            assert_eq!(link.to_string().parse::<Link>(), Ok(link));
            assert_eq!(serde_json::to_string(&link).unwrap(), format!("\"{link}\""));
        }
        assert!("NVX".parse::<Link>().is_err());
        assert!("pix".parse::<Link>().is_err());
    }

    #[test]
    fn order_is_nearest_first() {
        assert!(Link::Same < Link::NvLink(Some(4)));
        assert!(Link::NvLink(None) < Link::Pix);
        assert!(Link::Pix < Link::Pxb && Link::Pxb < Link::Phb && Link::Phb < Link::Node && Link::Node < Link::Sys);
    }

    #[test]
    fn nvlink_peaks_multiply_and_unknowns_stay_unknown() {
        let known = PairLink::nvlink(Some(18), Some(25.0), GpuLinkSource::Nvml);
        assert_eq!(known.link, Link::NvLink(Some(18)));
        assert_eq!(known.peak_gbytes_per_s, Some(450.0));
        assert_eq!(known.summary(), "NV18 450 GB/s");
        let no_rate = PairLink::nvlink(Some(12), None, GpuLinkSource::Hwloc);
        assert_eq!(no_rate.peak_gbytes_per_s, None);
        assert_eq!(no_rate.summary(), "NV12 (rate unknown)");
        assert_eq!(PairLink::pcie(Link::Sys, GpuLinkSource::Nvml).summary(), "SYS");
    }

    #[test]
    fn gbytes_lose_a_zero_decimal() {
        assert_eq!(format_gbytes(450.0), "450");
        assert_eq!(format_gbytes(478.125), "478.1");
    }

    #[test]
    fn cpu_lists_round_trip() {
        for text in ["0-47,96-143", "0", "0-1", "1,3,5-7", ""] {
            assert_eq!(format_cpu_list(&parse_cpu_list(text)), text);
        }
        assert_eq!(parse_cpu_list("0-2,x,4"), vec![0, 1, 2, 4]);
    }
}
