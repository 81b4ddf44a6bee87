//! Rail symmetry: on a p5 each GPU has its NICs in the same order behind its PCIe switch, and NIC k of
//! every GPU (and of every node) is rail k. A collective spreads its bytes evenly over a rail, so the NICs
//! of one rail should carry similar load; one far from its rail's median is worth a look (a NIC left out
//! of the job, a flapping link, traffic not on EFA at all).
//!
//! A NIC's rail is its position among the NICs of its first GPU, by PCI address (the topology places
//! NICs next to GPUs; without a topology no NIC has a rail, and none is guessed). Load is tx + rx Gbps
//! over the last interval.
//!
//! Below its rail is judged by the rule `sweep` and the dashboard's fleet view use too
//! ([`efatop_proto::rails::RailRule`], at `1 - OFF_SHARE`); above it is the monitor's own half of "off".

use efatop_proto::rails::{median, RailRule};
pub use efatop_proto::rails::IDLE_GBPS;
use serde::{Deserialize, Serialize};

use crate::Snapshot;

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

/// The rail of every NIC that has one: NIC name → (first GPU, rail).
pub fn rails_of(snapshot: &Snapshot) -> Vec<(String, usize, usize)> {
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

/// Every NIC with a rail and a rate, in the snapshots given (one node, or every node of a many-node view).
pub fn balance(snapshots: &[&Snapshot]) -> Vec<RailLoad> {
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
    use crate::{Affinity, GpuReader, Monitor, Sysfs};
    use std::time::Duration;

    #[test]
    fn one_nic_far_below_its_rail_is_off_and_its_rail_mates_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let fake = crate::FakeSysfs::p5(dir.path()).unwrap();
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../topology/fixtures/p5.48xlarge.xml");
        let topology = efatop_topology::NodeTopology::from_xml_file(&fixture).unwrap();
        let mut monitor = Monitor::new("p5", Sysfs::new(fake.root()), Affinity::from_topology(&topology), GpuReader::unavailable("test"));
        monitor.sample(Duration::ZERO);
        // Rail 1 (each GPU's second NIC) carries 10 GB/s each way on every GPU but GPU 5's.
        for (device, _) in crate::p5_efa_devices().iter().skip(1).step_by(4) {
            let by = if device == "rdmap165s0" { 1_000_000_000 } else { 10_000_000_000 };
            fake.advance(device, "tx_bytes", by).unwrap();
            fake.advance(device, "rx_bytes", by).unwrap();
        }
        let snapshot = monitor.sample(Duration::from_secs(1));
        let loads = balance(&[&snapshot]);
        let rail1: Vec<&RailLoad> = loads.iter().filter(|l| l.rail == 1).collect();
        assert_eq!(rail1.len(), 8, "{rail1:?}");
        let off: Vec<&str> = loads.iter().filter(|l| l.off).map(|l| l.nic.as_str()).collect();
        assert_eq!(off, ["rdmap165s0"]);
        let slow = rail1.iter().find(|l| l.nic == "rdmap165s0").unwrap();
        assert_eq!((slow.gpu, slow.rail), (5, 1));
        assert!((slow.ratio.unwrap() - 0.1).abs() < 1e-9, "{slow:?}");
        assert!((slow.rail_median_gbps - 160.0).abs() < 1e-6);
        assert!(loads.iter().filter(|l| l.rail == 0).all(|l| l.ratio.is_none() && !l.off), "an idle rail is not judged");
    }
}
