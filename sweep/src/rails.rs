//! Rail symmetry: on a p5 each GPU has its NICs in the same order behind its PCIe switch, and NIC k of
//! every GPU (and of every node) is rail k. A collective spreads its bytes evenly over a rail, so the NICs
//! of one rail should carry similar load; one far from its rail's median is worth a look (a NIC left out
//! of the job, a flapping link, traffic not on EFA at all).
//!
//! A NIC's rail is its position among the NICs of its first GPU, by PCI address (the topology places
//! NICs next to GPUs; without a topology no NIC has a rail, and none is guessed). Load is tx + rx Gbps
//! over the last interval. Pure functions of [`NodeSample`]s: the monitor's view, its plain lines and a
//! many-node view judge the same way.
//!
//! Behind its rail is one rule ([`RailRule`]: below a share of the rail's bar, held for a while), which
//! `sweep`'s verdict (a channel's best figure against its rail's median), the dashboard's fleet view (a
//! channel's live rate against its rail's live median, for as long as it stays there; the many-node
//! monitor's fleet overview likewise, NIC k of every node being rail k, [`fleet_rails`]) and the monitor's
//! check below (a NIC's load, at `1 - OFF_SHARE`) all ask; none writes the comparison again. Above its
//! rail is the monitor's own half of "off".

use std::time::Duration;

use serde::{Deserialize, Serialize};

use efatop_proto::telemetry::{NicKind, NodeNic, NodeSample};

/// Bars below this many Gbps are idle: nothing is judged against them (a rail that carries nothing has
/// no NIC behind it).
pub const IDLE_GBPS: f64 = 0.01;

/// The share of its rail's median a NIC must reach, unless told otherwise (`sweep --threshold`).
pub const DEFAULT_THRESHOLD: f64 = 0.9;

/// A NIC is *low* when its rate is below `threshold` × its rail's bar, and *behind* once it has stayed low
/// for `hold`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RailRule {
    /// Share of the bar below which a NIC is low, between 0 and 1.
    pub threshold: f64,
    /// How long a NIC must stay low to be behind; zero where one figure is the whole story (a sweep's
    /// best figure, a monitor's read).
    pub hold: Duration,
}

impl RailRule {
    /// A rule judging single figures (no hold).
    pub const fn at(threshold: f64) -> Self {
        Self { threshold, hold: Duration::ZERO }
    }

    /// The bar a rail's NICs are held to: its median, or the link speed where one is known and higher
    /// (a whole rail running slow is still slow against the link).
    pub fn bar(median: Option<f64>, link_gbps: Option<f64>) -> Option<f64> {
        match (median, link_gbps) {
            (Some(median), Some(link)) => Some(median.max(link)),
            (median, link) => median.or(link),
        }
    }

    /// Whether `gbps` is below the rule's share of `bar`. An idle bar (under [`IDLE_GBPS`]) judges
    /// nothing, and a rate that is not a number is never low.
    pub fn is_low(&self, gbps: f64, bar: f64) -> bool {
        bar >= IDLE_GBPS && gbps < self.threshold * bar
    }

    /// One figure of a NIC, at `now`: whether it is behind its rail — low now, and low without a break
    /// for at least `hold`. `low_since` is the NIC's own clock (when its current spell of being low
    /// began), kept by the caller and moved on here.
    pub fn judge(&self, gbps: f64, bar: f64, now: Duration, low_since: &mut Option<Duration>) -> bool {
        if !self.is_low(gbps, bar) {
            *low_since = None;
            return false;
        }
        let since = *low_since.get_or_insert(now);
        now.saturating_sub(since) >= self.hold
    }
}

impl Default for RailRule {
    fn default() -> Self {
        Self::at(DEFAULT_THRESHOLD)
    }
}

/// The median of `values` (sorted in place); `None` when empty.
pub fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 { values[mid] } else { f64::midpoint(values[mid - 1], values[mid]) })
}

/// A NIC this far from its rail's median (as a share of the median, either way) is off.
pub const OFF_SHARE: f64 = 0.5;

/// Where a NIC sits and what it carries, against its rail.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RailLoad {
    pub host: String,
    pub nic: String,
    pub gpu: usize,
    pub rail: usize,
    pub gbps: f64,
    /// The median load of the NICs of this rail (across the snapshots given).
    pub rail_median_gbps: f64,
    /// `gbps / rail_median_gbps`; `None` on an idle rail.
    pub ratio: Option<f64>,
    /// Far off its rail (see [`OFF_SHARE`]).
    pub off: bool,
}

/// Where a NIC stands in the rail check's order: under its first GPU (NICs next to none after every
/// GPU's), then by PCI address, or by name where the address stayed on the node (a many-node view).
fn rail_key(nic: &NodeNic) -> (usize, &str) {
    (nic.gpus.first().copied().unwrap_or(usize::MAX), nic.pci_bus_id.as_deref().unwrap_or(&nic.name))
}

/// The rail of every NIC that has one: NIC name → (first GPU, rail).
pub fn rails_of(snapshot: &NodeSample) -> Vec<(String, usize, usize)> {
    let mut by_gpu: std::collections::BTreeMap<usize, Vec<(&str, &str)>> = std::collections::BTreeMap::new();
    for nic in snapshot.nics.iter().filter(|nic| nic.present) {
        let (gpu, key) = rail_key(nic);
        if gpu != usize::MAX {
            by_gpu.entry(gpu).or_default().push((key, &nic.name));
        }
    }
    let mut rails = Vec::new();
    for (gpu, mut nics) in by_gpu {
        nics.sort_unstable();
        rails.extend(nics.into_iter().enumerate().map(|(rail, (_, name))| (name.to_string(), gpu, rail)));
    }
    rails
}

/// A node's RDMA NICs (EFA on AWS) across a fleet: each NIC's index into `snapshot.nics` and its fleet
/// rail, its position among the node's RDMA NICs in the rail check's order ([`rails_of`]'s: by first
/// GPU, then PCI address or name), gone ones included so that a NIC keeps its place. NIC k of every node
/// is fleet rail k; without a topology the order is by name alone.
pub fn fleet_rails(snapshot: &NodeSample) -> Vec<(usize, usize)> {
    let mut rdma: Vec<(usize, &NodeNic)> = snapshot.nics.iter().enumerate().filter(|(_, nic)| nic.kind == NicKind::Rdma).collect();
    rdma.sort_by(|(_, a), (_, b)| rail_key(a).cmp(&rail_key(b)));
    rdma.into_iter().enumerate().map(|(rail, (at, _))| (at, rail)).collect()
}

/// Every NIC with a rail and a rate, in the snapshots given (one node, or every node of a many-node view).
pub fn balance(snapshots: &[&NodeSample]) -> Vec<RailLoad> {
    let mut loads = Vec::new();
    for snapshot in snapshots {
        let rails = rails_of(snapshot);
        for nic in &snapshot.nics {
            let Some((_, gpu, rail)) = rails.iter().find(|(name, _, _)| *name == nic.name) else { continue };
            let Some(gbps) = nic.total_gbps() else { continue };
            loads.push(RailLoad {
                host: snapshot.host.clone(),
                nic: nic.name.clone(),
                gpu: *gpu,
                rail: *rail,
                gbps,
                rail_median_gbps: 0.0,
                ratio: None,
                off: false,
            });
        }
    }
    let rails: std::collections::BTreeSet<usize> = loads.iter().map(|l| l.rail).collect();
    for rail in rails {
        let mut values: Vec<f64> = loads.iter().filter(|l| l.rail == rail).map(|l| l.gbps).collect();
        if values.len() < 2 {
            continue;
        }
        let Some(rail_median) = median(&mut values) else { continue };
        let below = RailRule::at(1.0 - OFF_SHARE);
        for load in loads.iter_mut().filter(|l| l.rail == rail) {
            load.rail_median_gbps = rail_median;
            if rail_median >= IDLE_GBPS {
                let ratio = load.gbps / rail_median;
                load.ratio = Some(ratio);
                load.off = below.is_low(load.gbps, rail_median) || ratio > 1.0 + OFF_SHARE;
            }
        }
    }
    loads
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_is_below_the_share_of_the_bar_and_an_idle_bar_judges_nothing() {
        let rule = RailRule::at(0.9);
        assert!(rule.is_low(89.0, 100.0));
        assert!(!rule.is_low(90.0, 100.0));
        assert!(!rule.is_low(f64::NAN, 100.0), "no figure, no verdict");
        assert!(!rule.is_low(0.0, 0.001), "an idle rail");
        assert_eq!(RailRule::bar(Some(80.0), Some(100.0)), Some(100.0));
        assert_eq!(RailRule::bar(Some(120.0), Some(100.0)), Some(120.0));
        assert_eq!(RailRule::bar(None, Some(100.0)), Some(100.0));
        assert_eq!(RailRule::bar(Some(7.0), None), Some(7.0));
        assert_eq!(RailRule::bar(None, None), None);
    }

    #[test]
    fn behind_once_low_for_the_hold_and_a_good_figure_starts_the_clock_over() {
        let rule = RailRule { threshold: 0.8, hold: Duration::from_secs(1) };
        let at = Duration::from_millis;
        let mut since = None;
        assert!(!rule.judge(50.0, 100.0, at(0), &mut since));
        assert_eq!(since, Some(at(0)));
        assert!(!rule.judge(50.0, 100.0, at(900), &mut since));
        assert!(rule.judge(50.0, 100.0, at(1000), &mut since));
        assert!(!rule.judge(95.0, 100.0, at(1100), &mut since), "back up");
        assert_eq!(since, None);
        assert!(!rule.judge(50.0, 100.0, at(1200), &mut since), "a new spell");
        assert!(RailRule::at(0.8).judge(50.0, 100.0, at(0), &mut None), "no hold: one figure judges");
    }

    #[test]
    fn fleet_rails_number_a_nodes_rdma_nics_in_the_rail_checks_order() {
        let nic = |name: &str, kind: NicKind, gpu: Option<usize>, present: bool| NodeNic {
            name: name.into(),
            kind,
            gpus: gpu.into_iter().collect(),
            present,
            ..NodeNic::default()
        };
        let snapshot = NodeSample {
            nics: vec![
                nic("lo", NicKind::Net, None, true),
                nic("rdmap97s0", NicKind::Rdma, Some(1), true),
                nic("rdmap80s0", NicKind::Rdma, Some(0), true),
                nic("rdmap79s0", NicKind::Rdma, Some(0), false),
                nic("eth0", NicKind::Net, Some(0), true),
                nic("rdmap5s0", NicKind::Rdma, None, true),
            ],
            ..NodeSample::default()
        };
        // GPU 0's NICs (the gone one kept), then GPU 1's, then the NIC next to no GPU; no netdev.
        assert_eq!(fleet_rails(&snapshot), [(3, 0), (2, 1), (1, 2), (5, 3)]);
        // The rail check itself numbers within a GPU, present NICs only, in the same order.
        let names: Vec<(String, usize, usize)> = rails_of(&snapshot);
        assert_eq!(names[0], ("eth0".to_string(), 0, 0));
        assert!(names.contains(&("rdmap80s0".to_string(), 0, 1)) && names.contains(&("rdmap97s0".to_string(), 1, 0)), "{names:?}");
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
