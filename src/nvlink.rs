//! The NVLink between the two GPUs of an `ipc` run: its peak (for BusBW and the gauges) and NVML's count
//! of its traffic (for the log).

use efatop_experiments::ipc::PairPeak;
use efatop_proto::results::{NvlinkPeakOrigin, RankPlacement};
use efatop_topology::NodeTopology;

/// Rank 0's and rank 1's GPUs, as their placements name them: NVML's active links × per-link rate, else the
/// hwloc topology's inference; `None` when neither knows of an NVLink between them (PCIe is not guessed).
pub fn peak_between_ranks(placements: &[RankPlacement]) -> Option<PairPeak> {
    let bus = |rank: usize| placements.iter().find(|p| p.rank == rank).and_then(|p| p.gpu_pci_bus_id.clone());
    let (from, to) = (bus(0)?, bus(1)?);
    let pair = efatop_node::pair_link_or_inferred(NodeTopology::discover().ok().as_ref(), &from, &to).ok()?;
    let peak = pair.peak_gbytes_per_s?;
    let origin = NvlinkPeakOrigin { source: pair.source, links: pair.active_links.zip(pair.per_link_gbytes_per_s) };
    Some(PairPeak { gbytes_per_s: peak, origin })
}

/// NVML's count of this rank's GPU's NVLink traffic (GPM, Hopper and newer), as a log line beside what the
/// experiment measures; nothing where NVML or GPM is missing.
pub fn writer_link_counters(world: &efatop_experiments::World<'_>) -> efatop_experiments::ipc::LinkCounters {
    use efatop_node::GpuReader;
    use efatop_proto::telemetry::NodeGpus;
    let bus = world.gpu.as_ref().and_then(|gpu| efatop_topology::normalize_bus_id(gpu.pci_bus_id()));
    let mut reader = GpuReader::open();
    Box::new(move || {
        let NodeGpus::Gpus(gpus) = reader.read() else { return None };
        let gpu = gpus.iter().find(|g| efatop_topology::normalize_bus_id(&g.pci_bus_id) == bus)?;
        let (tx, rx) = (gpu.nvlink_tx_gbps?, gpu.nvlink_rx_gbps?);
        Some(format!("NVML: GPU {} NVLink tx {:.1} GB/s, rx {:.1} GB/s since the last such line", gpu.index, tx / 8.0, rx / 8.0))
    })
}
