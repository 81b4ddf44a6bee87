//! The Prometheus side of `efatop monitor`'s live Xid counts ([`crate::xid_watch`]): the counter
//! `efatop_gpu_xid_total{host, gpu, pci, xid, action}`.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};

use crate::xid_watch::XidWatch;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct XidLabels {
    host: String,
    gpu: String,
    pci: String,
    xid: String,
    action: String,
}

/// The Prometheus collector of the counts.
#[derive(Debug)]
pub(crate) struct XidCollector(pub(crate) XidWatch);

impl Collector for XidCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let host = self.0.host();
        let series: Vec<(XidLabels, u64)> = self
            .0
            .counts()
            .into_iter()
            .map(|count| {
                let labels = XidLabels {
                    host: host.clone(),
                    gpu: count.gpu.map(|gpu| gpu.to_string()).unwrap_or_default(),
                    pci: count.pci,
                    xid: count.xid.to_string(),
                    action: crate::xid::action(count.xid).0.name().to_string(),
                };
                (labels, count.count)
            })
            .collect();
        super::counters(
            &mut encoder,
            "efatop_gpu_xid",
            "Xid errors the GPU logged in the kernel log, by Xid, with the action NVIDIA's Xid catalog calls for",
            series.iter().map(|(labels, count)| (labels, *count)),
        )
    }
}
