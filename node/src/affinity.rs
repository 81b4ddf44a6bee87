//! Which GPU each NIC serves, from the topology (`efatop-topology`: hwloc on this machine, or an hwloc XML
//! such as the p5 fixture): a NIC belongs to every GPU that has it among its preferred NICs (the NICs a
//! rank on that GPU uses: p5en's GPU 1 gets the last two of its switch's four, p4d's two GPUs share their
//! one; p6-b300's ENA-only card and the second device of a p6e-gb200 physical NIC belong to none). The
//! rail check ([`efatop_sweep::rails`]) numbers a NIC within its first GPU, so NIC k of a GPU
//! here is the sweep's channel k. NICs are matched by PCI address first and by name second.

use std::collections::BTreeMap;

use efatop_proto::telemetry::NodeTopologyGpu;
use efatop_topology::{normalize_bus_id, NodeTopology};

/// NIC → nearby GPUs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Affinity {
    gpus: Vec<NodeTopologyGpu>,
    by_bus_id: BTreeMap<String, Vec<usize>>,
    by_name: BTreeMap<String, Vec<usize>>,
}

impl Affinity {
    /// No GPUs known: every NIC is ungrouped.
    pub fn none() -> Self {
        Self::default()
    }

    pub fn from_topology(topology: &NodeTopology) -> Self {
        let mut affinity = Self {
            gpus: topology
                .gpus
                .iter()
                .map(|gpu| NodeTopologyGpu { index: gpu.index, pci_bus_id: gpu.pci_bus_id.clone(), model: gpu.model.clone() })
                .collect(),
            ..Self::default()
        };
        for gpu in &topology.gpus {
            for &nic_index in &gpu.preferred_nics {
                let Some(nic) = topology.nics.get(nic_index) else { continue };
                affinity.by_bus_id.entry(nic.pci_bus_id.clone()).or_default().push(gpu.index);
                for name in nic.os_devices.iter().chain([&nic.name]) {
                    let gpus = affinity.by_name.entry(name.clone()).or_default();
                    if !gpus.contains(&gpu.index) {
                        gpus.push(gpu.index);
                    }
                }
            }
        }
        affinity
    }

    /// The GPUs the topology names, in its (PCI bus) order.
    pub fn gpus(&self) -> &[NodeTopologyGpu] {
        &self.gpus
    }

    /// The GPUs next to the NIC with this name and PCI address; empty when the topology does not place it.
    pub fn gpus_of(&self, name: &str, pci_bus_id: Option<&str>) -> Vec<usize> {
        let by_bus = pci_bus_id.and_then(normalize_bus_id).and_then(|bus| self.by_bus_id.get(&bus));
        by_bus.or_else(|| self.by_name.get(name)).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn fixture(name: &str) -> NodeTopology {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../topology/fixtures").join(name);
        NodeTopology::from_xml_file(&path).expect("fixture loads")
    }

    #[test]
    fn p5_gpus_each_have_their_four_efa() {
        let affinity = Affinity::from_topology(&fixture("p5.48xlarge.xml"));
        assert_eq!(affinity.gpus().len(), 8);
        assert_eq!(affinity.gpus()[0].pci_bus_id, "0000:53:00.0");
        // By address (rdmap79s0 is 4f:00.0) and by name.
        assert_eq!(affinity.gpus_of("whatever", Some("0000:4f:00.0")), [0]);
        assert_eq!(affinity.gpus_of("rdmap82s0", None), [0]);
        assert_eq!(affinity.gpus_of("rdmap201s0", None), [7]);
        assert_eq!(affinity.gpus_of("eth0", None), Vec::<usize>::new());
    }

    #[test]
    fn rails_are_the_topologys_for_every_type() {
        use efatop_proto::telemetry::{NicKind, NodeNic, NodeSample};
        use efatop_sweep::rails::rails_of;
        for name in ["p4d.24xlarge.xml", "p5en.48xlarge.xml", "p6-b200.48xlarge.xml", "p6-b300.48xlarge.xml", "p6e-gb200.36xlarge.xml"] {
            let topology = fixture(name);
            let affinity = Affinity::from_topology(&topology);
            let sample = NodeSample {
                nics: topology
                    .nics
                    .iter()
                    .map(|nic| NodeNic {
                        name: nic.name.clone(),
                        kind: if nic.kind.is_rdma() { NicKind::Rdma } else { NicKind::Net },
                        pci_bus_id: Some(nic.pci_bus_id.clone()),
                        gpus: affinity.gpus_of(&nic.name, Some(&nic.pci_bus_id)),
                        present: true,
                        ..NodeNic::default()
                    })
                    .collect(),
                ..NodeSample::default()
            };
            let mut from_monitor: Vec<(String, usize, usize)> = rails_of(&sample);
            from_monitor.sort();
            let mut from_topology: Vec<(String, usize, usize)> = topology
                .rails()
                .into_iter()
                .zip(&topology.nics)
                .filter_map(|(rail, nic)| rail.map(|(gpu, rail)| (nic.name.clone(), gpu, rail)))
                .collect();
            from_topology.sort();
            assert_eq!(from_monitor, from_topology, "{name}");
        }
        // p5en: GPU 1's two EFA are its rails 0 and 1, not rails 2 and 3 of GPU 0's switch.
        let p5en = Affinity::from_topology(&fixture("p5en.48xlarge.xml"));
        assert_eq!(p5en.gpus_of("rdmap87s0", None), [1]);
        // p6-b300's ENA-only card 0 and p6e-gb200's second card of a physical NIC serve no GPU.
        assert!(Affinity::from_topology(&fixture("p6-b300.48xlarge.xml")).gpus_of("ens5", None).is_empty());
        let gb200 = Affinity::from_topology(&fixture("p6e-gb200.36xlarge.xml"));
        assert_eq!((gb200.gpus_of("rdmap10s0", None), gb200.gpus_of("rdmap11s0", None)), (vec![0], vec![]));
    }

    #[test]
    fn p4d_nics_are_shared_by_two_gpus() {
        let affinity = Affinity::from_topology(&fixture("p4d.24xlarge.xml"));
        assert_eq!(affinity.gpus_of("rdmap16s27", None), [0, 1]);
    }
}
