//! How one GPU reaches another and what NVLink can carry between them, from hwloc and the GPU model:
//! [`NodeTopology::pair_link`] answers with `efatop_proto`'s [`PairLink`], as the monitor crate does from
//! NVML.

use efatop_proto::topology::{GpuLinkSource, Link, PairLink};

use crate::model::NodeTopology;

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
