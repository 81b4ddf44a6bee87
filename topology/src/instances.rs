//! The layouts efatop knows by instance type: the fixtures of `topology/fixtures/`, compiled in, so that a
//! node can be compared with what its type should have (`efatop check`) without any file beside the binary.

use crate::{NodeTopology, TopologyError};

/// Instance types with a fixture, and the fixture's hwloc XML.
const FIXTURES: &[(&str, &str)] = &[
    ("p5.48xlarge", include_str!("../fixtures/p5.48xlarge.xml")),
    // 8 H200 with the p5 NIC layout (32 EFA v2 at 100 Gbps, 4 per GPU): aws/aws-ofi-nccl
    // src/platform-aws.cpp (commit 01666ece) has one "p5/p5e" platform entry for both types, and AWS's EC2
    // User Guide (efa-acc-inst-types.html, "EFA configuration for a P5 and P5e instances") one 32-card
    // layout; the bus numbers are assumed to be p5's (scripts/fixtures/make-topology-fixtures, [ofi-p5e]).
    ("p5e.48xlarge", include_str!("../fixtures/p5e.48xlarge.xml")),
    ("p5en.48xlarge", include_str!("../fixtures/p5en.48xlarge.xml")),
    ("p4d.24xlarge", include_str!("../fixtures/p4d.24xlarge.xml")),
    // p4d's layout with 80 GB A100s: aws/aws-ofi-nccl topology/p4de-24xl-topo.xml is p4d's file with GPU
    // device 10de:20b2 (scripts/fixtures/make-topology-fixtures, [ofi-p4de]).
    ("p4de.24xlarge", include_str!("../fixtures/p4de.24xlarge.xml")),
    // 8 EFA v4 at 400 Gbps, one per GPU ([nf-p6], [ofi-p5en]).
    ("p6-b200.48xlarge", include_str!("../fixtures/p6-b200.48xlarge.xml")),
    // 16 EFA v4, two per GPU, and network card 0 ENA-only (a NIC, never an EFA channel).
    ("p6-b300.48xlarge", include_str!("../fixtures/p6-b300.48xlarge.xml")),
    // 4 GPUs on 2 Grace CPUs; 16 EFA on 8 physical NICs, one channel per physical NIC per GPU.
    ("p6e-gb200.36xlarge", include_str!("../fixtures/p6e-gb200.36xlarge.xml")),
];

/// The instance types [`instance_layout`] knows, in the order above.
pub fn known_instance_types() -> impl Iterator<Item = &'static str> {
    FIXTURES.iter().map(|(name, _)| *name)
}

/// The layout a node of `instance_type` should have (`p5.48xlarge`, as the DMI product name and EC2's
/// metadata spell it; surrounding blanks are ignored); `None` for a type without a fixture.
pub fn instance_layout(instance_type: &str) -> Option<Result<NodeTopology, TopologyError>> {
    let wanted = instance_type.trim();
    let (name, xml) = FIXTURES.iter().find(|(name, _)| name.eq_ignore_ascii_case(wanted))?;
    Some(NodeTopology::from_xml_str(xml, &format!("{name} (built-in)")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_type_loads_with_its_gpus_and_efa() {
        for (name, gpus, efa) in [
            ("p5.48xlarge", 8, 32),
            ("p5e.48xlarge", 8, 32),
            ("p5en.48xlarge", 8, 16),
            ("p4d.24xlarge", 8, 4),
            ("p4de.24xlarge", 8, 4),
            ("p6-b200.48xlarge", 8, 8),
            ("p6-b300.48xlarge", 8, 16),
            ("p6e-gb200.36xlarge", 4, 16),
        ] {
            let layout = instance_layout(name).expect("known").expect("loads");
            assert_eq!(layout.gpus.len(), gpus, "{name}");
            assert_eq!(layout.nics.iter().filter(|nic| nic.kind == crate::NicKind::Efa).count(), efa, "{name}");
            assert_eq!(layout.instance_type.as_deref(), Some(name), "the fixture names its type");
        }
        assert!(instance_layout(" P5.48xlarge\n").is_some(), "case and blanks");
        assert!(instance_layout("m7i.large").is_none());
    }
}
