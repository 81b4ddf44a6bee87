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
