//! The NVLink peak between two GPUs of this host, for `ipc`'s BusBW and gauges.

use efatop_experiments::ipc::PairPeak;
use efatop_experiments::results::RankPlacement;

/// Rank 0 and rank 1's GPUs, as their placements name them; `None` until NVML is asked (filled in when
/// the NVML pair-link lookup lands).
pub fn peak_between_ranks(placements: &[RankPlacement]) -> Option<PairPeak> {
    let bus = |rank: usize| placements.iter().find(|p| p.rank == rank).and_then(|p| p.gpu_pci_bus_id.clone());
    let (_from, _to) = (bus(0)?, bus(1)?);
    None
}

/// NVML's count of this rank's GPU's NVLink traffic (GPM, Hopper and newer), as a log line beside what the
/// experiment measures; nothing where NVML or GPM is missing.
pub fn writer_link_counters(world: &efatop_experiments::World<'_>) -> efatop_experiments::ipc::LinkCounters {
    use efatop_monitor::{GpuPanel, GpuReader};
    let bus = world.gpu.as_ref().and_then(|gpu| efatop_topology::normalize_bus_id(gpu.pci_bus_id()));
    let mut reader = GpuReader::open();
    Box::new(move || {
        let GpuPanel::Gpus { gpus } = reader.read() else { return None };
        let gpu = gpus.iter().find(|g| efatop_topology::normalize_bus_id(&g.pci_bus_id) == bus)?;
        let (tx, rx) = (gpu.nvlink_tx_gbps?, gpu.nvlink_rx_gbps?);
        Some(format!("NVML: GPU {} NVLink tx {:.1} GB/s, rx {:.1} GB/s over the last second", gpu.index, tx / 8.0, rx / 8.0))
    })
}
