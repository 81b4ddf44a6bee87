//! A synthetic fleet of p5 nodes, for the many-node monitor's bench and tests: one real read of a fake p5
//! tree ([`p5_read`]), and from it node `n`'s read number `step` ([`fleet_read`]), each EFA NIC near
//! 95 Gbps tx + rx with a few Gbps of deterministic jitter, one slow NIC at 60 % where asked.

use std::path::Path;
use std::time::Duration;

use efatop_proto::telemetry::{NicKind, NodeSample};

use crate::{Affinity, FakeSysfs, GpuReader, Monitor, Sysfs};

/// One real read of a fake p5 tree written under `dir`, its NICs placed under their GPUs by
/// `topology_xml` (the p5 fixture): 32 EFA NICs, lo and eth0. The first read has no rates; `with_rates`
/// takes the second, a second later.
pub fn p5_read(dir: &Path, topology_xml: &Path, with_rates: bool) -> std::io::Result<NodeSample> {
    FakeSysfs::p5(dir)?;
    let topology = efatop_topology::NodeTopology::from_xml_file(topology_xml)
        .map_err(|err| std::io::Error::other(format!("{}: {err}", topology_xml.display())))?;
    let mut monitor = Monitor::new("p5", Sysfs::new(dir), Affinity::from_topology(&topology), GpuReader::unavailable("no driver"));
    let first = monitor.sample(Duration::ZERO);
    Ok(if with_rates { monitor.sample(Duration::from_secs(1)) } else { first })
}

/// Node `node`'s read number `step` (as rank `node`, sequence `step + 1`), a second apart, shaped like
/// `shape`: `p5-node-NNNN`, every EFA NIC near 95 Gbps tx + rx, `slow_nic` (when given) at 60 % of that.
/// Step 0 of a shape without rates (a first read) has none either.
#[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
pub fn fleet_read(shape: &NodeSample, node: u32, step: u64, slow_nic: Option<&str>) -> NodeSample {
    let first = step == 0 && shape.interval_ms.is_none();
    let mut read =
        NodeSample { host: format!("p5-node-{node:04}"), t_ms: step * 1000, interval_ms: (!first).then_some(1000.0), ..shape.clone() };
    for (index, nic) in read.nics.iter_mut().enumerate() {
        let jitter = ((node as usize * 7 + index * 13 + step as usize * 3) % 41) as f64 / 10.0;
        let gbps = match nic.kind {
            NicKind::Rdma if slow_nic == Some(nic.name.as_str()) => (93.0 + jitter) * 0.6,
            NicKind::Rdma => 93.0 + jitter,
            NicKind::Net => 0.1,
        };
        (nic.tx_gbps, nic.rx_gbps) = if first { (None, None) } else { (Some(gbps * 0.6), Some(gbps * 0.4)) };
    }
    read.sent_as(node, step + 1, 0)
}
