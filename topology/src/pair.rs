//! How one GPU reaches another and what NVLink can carry between them: the figure a GPU-to-GPU benchmark
//! is measured against. [`NodeTopology::pair_link`] answers from hwloc and the GPU model; the monitor
//! crate answers from NVML with the same [`PairLink`].

use serde::{Deserialize, Serialize};

use crate::link::Link;
use crate::model::NodeTopology;

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

impl NodeTopology {
    /// How GPU `a` reaches GPU `b` (indices into [`NodeTopology::gpus`]), with the NVLink peak when the
    /// topology knows it; `None` when either GPU does not exist.
    pub fn pair_link(&self, a: usize, b: usize) -> Option<PairLink> {
        let link = *self.gpu_links.get(a)?.get(b)?;
        let peak = self.gpu_peak_gbytes_per_s.get(a).and_then(|row| row.get(b)).copied().flatten();
        Some(match link {
            Link::NvLink(count) => PairLink {
                link,
                active_links: count,
                per_link_gbytes_per_s: count.filter(|&n| n > 0).zip(peak).map(|(n, peak)| peak / f64::from(n)),
                peak_gbytes_per_s: peak,
                source: self.gpu_link_source,
            },
            other => PairLink::pcie(other, self.gpu_link_source),
        })
    }

    /// Replaces every GPU–GPU cell with what `pair` says (from NVML), all or nothing: the first GPU pair it
    /// cannot answer leaves the topology as it was and returns that error, so a matrix never mixes sources.
    pub fn replace_gpu_links<E>(
        &mut self,
        mut pair: impl FnMut(&str, &str) -> Result<PairLink, E>,
        source: GpuLinkSource,
    ) -> Result<(), E> {
        let count = self.gpus.len();
        let mut links = vec![vec![Link::Same; count]; count];
        let mut peaks = vec![vec![None; count]; count];
        for (i, a) in self.gpus.iter().enumerate() {
            for (j, b) in self.gpus.iter().enumerate() {
                if i != j {
                    let answer = pair(&a.pci_bus_id, &b.pci_bus_id)?;
                    links[i][j] = answer.link;
                    peaks[i][j] = answer.peak_gbytes_per_s;
                }
            }
        }
        self.gpu_links = links;
        self.gpu_peak_gbytes_per_s = peaks;
        self.gpu_link_source = source;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
