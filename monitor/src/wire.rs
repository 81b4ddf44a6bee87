//! A node's [`Snapshot`] as it travels to rank 0 in a many-node `efatop monitor`: the figures the view
//! draws ([`NodeSample`], framed by `efatop_proto::telemetry::wire`), without the per-counter detail and the
//! NICs' PCI addresses, which stay on the node.

use std::collections::BTreeMap;

use efatop_proto::telemetry::{NodeGpu, NodeGpus, NodeNic, NodeSample, NodeTopologyGpu};

use crate::{GpuPanel, GpuStats, NicKind, NicStats, Snapshot, TopologyGpu};

/// What a node sends: the view's figures, not every counter.
pub fn to_wire(snapshot: &Snapshot, rank: u32, seq: u64, drops: u64) -> NodeSample {
    NodeSample {
        rank,
        seq,
        t_ms: snapshot.t_ms,
        interval_ms: snapshot.interval_ms,
        drops,
        host: snapshot.host.clone(),
        topology_gpus: snapshot
            .topology_gpus
            .iter()
            .map(|gpu| NodeTopologyGpu {
                index: u32::try_from(gpu.index).unwrap_or(u32::MAX),
                pci_bus_id: gpu.pci_bus_id.clone(),
                model: gpu.model.clone().unwrap_or_default(),
            })
            .collect(),
        nics: snapshot
            .nics
            .iter()
            .map(|nic| NodeNic {
                name: nic.name.clone(),
                rdma: nic.kind == NicKind::Rdma,
                present: nic.present,
                gpus: nic.gpus.iter().filter_map(|gpu| u16::try_from(*gpu).ok()).collect(),
                link_gbps: nic.link_gbps,
                tx_gbps: nic.tx_gbps,
                rx_gbps: nic.rx_gbps,
                errors: nic.errors,
                errors_delta: nic.errors_delta,
                retransmits: nic.retransmits,
                retransmits_delta: nic.retransmits_delta,
            })
            .collect(),
        gpus: match &snapshot.gpus {
            GpuPanel::Unavailable { reason } => NodeGpus::Unavailable(reason.clone()),
            GpuPanel::Gpus { gpus } => NodeGpus::Gpus(
                gpus.iter()
                    .map(|gpu| NodeGpu {
                        index: u32::try_from(gpu.index).unwrap_or(u32::MAX),
                        name: gpu.name.clone(),
                        pci_bus_id: gpu.pci_bus_id.clone(),
                        pcie_tx_gbps: gpu.pcie_tx_gbps,
                        pcie_rx_gbps: gpu.pcie_rx_gbps,
                        nvlink_tx_gbps: gpu.nvlink_tx_gbps,
                        nvlink_rx_gbps: gpu.nvlink_rx_gbps,
                        note: gpu.note.clone().unwrap_or_default(),
                    })
                    .collect(),
            ),
        },
    }
}

/// A node's snapshot as rank 0 shows it; per-counter detail and PCI addresses of NICs stay on the node.
pub fn from_wire(sample: NodeSample) -> Snapshot {
    Snapshot {
        host: sample.host,
        t_ms: sample.t_ms,
        interval_ms: sample.interval_ms,
        topology_gpus: sample
            .topology_gpus
            .into_iter()
            .map(|gpu| TopologyGpu {
                index: gpu.index as usize,
                pci_bus_id: gpu.pci_bus_id,
                model: (!gpu.model.is_empty()).then_some(gpu.model),
            })
            .collect(),
        nics: sample
            .nics
            .into_iter()
            .map(|nic| NicStats {
                name: nic.name,
                kind: if nic.rdma { NicKind::Rdma } else { NicKind::Net },
                pci_bus_id: None,
                gpus: nic.gpus.into_iter().map(usize::from).collect(),
                link_gbps: nic.link_gbps,
                present: nic.present,
                tx_gbps: nic.tx_gbps,
                rx_gbps: nic.rx_gbps,
                errors: nic.errors,
                errors_delta: nic.errors_delta,
                retransmits: nic.retransmits,
                retransmits_delta: nic.retransmits_delta,
                went_backwards: Vec::new(),
                counters: BTreeMap::new(),
            })
            .collect(),
        gpus: match sample.gpus {
            NodeGpus::Unavailable(reason) => GpuPanel::Unavailable { reason },
            NodeGpus::Gpus(gpus) => GpuPanel::Gpus {
                gpus: gpus
                    .into_iter()
                    .map(|gpu| GpuStats {
                        index: gpu.index as usize,
                        name: gpu.name,
                        pci_bus_id: gpu.pci_bus_id,
                        pcie_tx_gbps: gpu.pcie_tx_gbps,
                        pcie_rx_gbps: gpu.pcie_rx_gbps,
                        nvlink_tx_gbps: gpu.nvlink_tx_gbps,
                        nvlink_rx_gbps: gpu.nvlink_rx_gbps,
                        note: (!gpu.note.is_empty()).then_some(gpu.note),
                    })
                    .collect(),
            },
        },
    }
}
