//! The monitor over a fake p5 tree: rates from counters the test moves between reads, GPU grouping from
//! the p5 topology fixture, wraps and a vanishing device.

use std::path::Path;
use std::time::Duration;

use efatop_node::{Affinity, FakeSysfs, GpuReader, Monitor, Sysfs};
use efatop_sweep::rails::{balance, RailLoad};
use efatop_proto::telemetry::{NodeGpus, NodeNic, NodeSample};
use efatop_topology::NodeTopology;

fn p5_monitor(fake: &FakeSysfs) -> Monitor {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../topology/fixtures/p5.48xlarge.xml");
    let topology = NodeTopology::from_xml_file(&fixture).expect("the p5 fixture loads");
    Monitor::new("p5-fake", Sysfs::new(fake.root()), Affinity::from_topology(&topology), GpuReader::unavailable("fake tree"))
}

fn nic<'a>(snapshot: &'a NodeSample, name: &str) -> &'a NodeNic {
    snapshot.nics.iter().find(|nic| nic.name == name).unwrap_or_else(|| panic!("{name} missing"))
}

#[test]
fn rates_follow_the_counters_the_test_moves() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeSysfs::p5(dir.path()).unwrap();
    let mut monitor = p5_monitor(&fake);
    let first = monitor.sample(Duration::ZERO);
    assert_eq!(first.nics.len(), 34);
    assert!(first.nics.iter().all(|nic| nic.tx_gbps.is_none()));
    assert_eq!(first.gpus, NodeGpus::Unavailable("fake tree".into()));
    assert_eq!(first.topology_gpus.len(), 8);

    // GPU 3's second EFA sends 37.5 GB in 0.5 s (600 Gbps is more than the link: the rate is what the
    // counters say, not clamped) and receives 1.25 GB; lo gets 10 MB both ways.
    fake.advance("rdmap131s0", "tx_bytes", 37_500_000_000).unwrap();
    fake.advance("rdmap131s0", "rx_bytes", 1_250_000_000).unwrap();
    fake.advance("rdmap131s0", "retrans_pkts", 3).unwrap();
    fake.advance("rdmap131s0", "rdma_write_wr_err", 2).unwrap();
    fake.advance("lo", "tx_bytes", 10_000_000).unwrap();
    fake.advance("lo", "rx_bytes", 10_000_000).unwrap();
    let second = monitor.sample(Duration::from_millis(500));
    assert_eq!(second.interval_ms, Some(500.0));
    let busy = nic(&second, "rdmap131s0");
    assert_eq!(busy.gpus, [3]);
    assert_eq!(busy.link_gbps, Some(100.0));
    assert!((busy.tx_gbps.unwrap() - 600.0).abs() < 1e-9, "{busy:?}");
    assert!((busy.rx_gbps.unwrap() - 20.0).abs() < 1e-9);
    assert_eq!((busy.retransmits_delta, busy.errors_delta), (3, 2));
    assert_eq!(busy.counters["rdma_write_wr_err"].per_s, Some(4.0));
    let idle = nic(&second, "rdmap79s0");
    assert_eq!((idle.tx_gbps, idle.rx_gbps, idle.gpus.as_slice()), (Some(0.0), Some(0.0), &[0][..]));
    let lo = nic(&second, "lo");
    assert!((lo.tx_gbps.unwrap() - 0.16).abs() < 1e-9 && lo.gpus.is_empty(), "{lo:?}");
}

#[test]
fn a_counter_gone_back_and_a_vanished_device_do_not_break_the_next_reads() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeSysfs::p5(dir.path()).unwrap();
    let mut monitor = p5_monitor(&fake);
    fake.set("rdmap150s0", "tx_bytes", 5_000_000_000_000).unwrap();
    monitor.sample(Duration::ZERO);
    // The counter starts again from 0 (the driver reloaded: a value of 2^63 or more is no counter's, but an
    // error code printed unsigned, so a wrap past 2^64 is read as unknown, not as this); another device is
    // unbound.
    fake.set("rdmap150s0", "tx_bytes", 1_000).unwrap();
    fake.remove("rdmap96s0").unwrap();
    let second = monitor.sample(Duration::from_secs(1));
    let wrapped = nic(&second, "rdmap150s0");
    assert_eq!(wrapped.tx_gbps, None);
    assert_eq!(wrapped.went_backwards, ["tx_bytes"]);
    let gone = nic(&second, "rdmap96s0");
    assert!(!gone.present && gone.tx_gbps.is_none());
    assert_eq!(gone.gpus, [1], "a gone NIC keeps its place");
    fake.advance("rdmap150s0", "tx_bytes", 250_000_000).unwrap();
    let third = monitor.sample(Duration::from_secs(2));
    assert!((nic(&third, "rdmap150s0").tx_gbps.unwrap() - 2.0).abs() < 1e-9);
    assert!(!nic(&third, "rdmap96s0").present);
    // The JSON form of a snapshot with a gone device is still one parseable object.
    let line = serde_json::to_string(&third).unwrap();
    let back: NodeSample = serde_json::from_str(&line).unwrap();
    assert_eq!(back, third);
}

/// Rail symmetry (`efatop_sweep::rails`) over what the monitor reads.
#[test]
fn one_nic_far_below_its_rail_is_off_and_its_rail_mates_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeSysfs::p5(dir.path()).unwrap();
    let mut monitor = p5_monitor(&fake);
    monitor.sample(Duration::ZERO);
    // Rail 1 (each GPU's second NIC) carries 10 GB/s each way on every GPU but GPU 5's.
    for (device, _) in efatop_node::p5_efa_devices().iter().skip(1).step_by(4) {
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
