//! Rail symmetry: on a p5 each GPU has its NICs in the same order behind its PCIe switch, and NIC k of
//! every GPU (and of every node) is rail k. A collective spreads its bytes evenly over a rail, so the NICs
//! of one rail should carry similar load; one far from its rail's median is worth a look (a NIC left out
//! of the job, a flapping link, traffic not on EFA at all).
//!
//! A NIC's rail is its position among the NICs of its first GPU, by PCI address (the topology places
//! NICs next to GPUs; without a topology no NIC has a rail, and none is guessed). Load is tx + rx Gbps
//! over the last interval. Pure functions of [`NodeSample`]s: the monitor's view, its plain lines and a
//! many-node view judge the same way.

use serde::{Deserialize, Serialize};

use super::NodeSample;

/// A NIC this far from its rail's median (as a share of the median, either way) is off.
pub const OFF_SHARE: f64 = 0.5;
/// Rails whose median is below this many Gbps are idle: nothing is judged on them.
pub const IDLE_GBPS: f64 = 0.01;

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

/// The rail of every NIC that has one: NIC name → (first GPU, rail).
pub fn rails_of(snapshot: &NodeSample) -> Vec<(String, usize, usize)> {
    let mut by_gpu: std::collections::BTreeMap<usize, Vec<(&str, &str)>> = std::collections::BTreeMap::new();
    for nic in snapshot.nics.iter().filter(|nic| nic.present) {
        if let Some(&gpu) = nic.gpus.first() {
            by_gpu.entry(gpu).or_default().push((nic.pci_bus_id.as_deref().unwrap_or(&nic.name), &nic.name));
        }
    }
    let mut rails = Vec::new();
    for (gpu, mut nics) in by_gpu {
        nics.sort_unstable();
        rails.extend(nics.into_iter().enumerate().map(|(rail, (_, name))| (name.to_string(), gpu, rail)));
    }
    rails
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        f64::midpoint(values[n / 2 - 1], values[n / 2])
    }
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
        let rail_median = median(&mut values);
        for load in loads.iter_mut().filter(|l| l.rail == rail) {
            load.rail_median_gbps = rail_median;
            if rail_median >= IDLE_GBPS {
                let ratio = load.gbps / rail_median;
                load.ratio = Some(ratio);
                load.off = (ratio - 1.0).abs() > OFF_SHARE;
            }
        }
    }
    loads
}
