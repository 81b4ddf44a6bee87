//! `efatop monitor` on many nodes: the ranks joined and each node's reads sent to rank 0's collector by
//! the runtime ([`efatop_runtime::nodes`]); rank 0 draws or prints every node.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use efatop_experiments::Bootstrap;
use efatop_proto::telemetry::NodeSample;
use efatop_ui::monitor::NodesView;
use efatop_ui::tui::TICK;
use efatop_ui::tui::nodes::Nodes;

use super::{Failure, MonitorArgs, build_monitor, print_line};
use efatop_proto::events::CollectorEvent;
use efatop_runtime::nodes::{self, Reads};

/// How long rank 0 waits, past the reads themselves, for every node before `--once` prints what it has.
const ONCE_GRACE: Duration = Duration::from_secs(30);

/// This rank's part of a many-node monitor; returns once this rank is done (rank 0: once every node is).
pub fn run(args: &MonitorArgs, bootstrap: &dyn Bootstrap, secret: &efatop_auth::secret::Keyed, sysfs_root: &Path) -> Result<(), Failure> {
    let wired = nodes::wire(bootstrap, secret).map_err(|e| (1, e))?;
    let (rank, size) = (wired.rank, wired.size);
    let monitor = build_monitor(args, sysfs_root)?;
    let (reading, received) = wired.start_reads(monitor, secret, args.interval, reads(args)).map_err(|e| (1, e))?;
    if rank != 0 {
        reading.wait();
        return Ok(());
    }
    // Rank 0's own reader ends when its next send finds the collector gone.
    let outcome = show(args, size, &received);
    drop(reading);
    outcome
}

/// How many reads a node sends, and which: `--once`, `--count N`, or on and on.
fn reads(args: &MonitorArgs) -> Reads {
    match (args.once, args.count) {
        (true, _) => Reads::Once,
        (false, Some(count)) => Reads::Count(count),
        (false, None) => Reads::Forever,
    }
}

/// Rank 0: takes every node's snapshots off the collector and draws or prints them.
fn show(args: &MonitorArgs, size: usize, received: &Receiver<Vec<CollectorEvent>>) -> Result<(), Failure> {
    use std::io::IsTerminal;
    if !args.once && !args.json && std::io::stdout().is_terminal() {
        return show_terminal(args, size, received).map_err(|err| (1, format!("terminal: {err}")));
    }
    let deadline = args.once.then(|| Instant::now() + args.interval * 2 + ONCE_GRACE);
    let mut view = NodesView::new(&args.filter, size);
    let mut closed = BTreeSet::new();
    let mut latest: BTreeMap<u32, NodeSample> = BTreeMap::new();
    while closed.len() < size {
        let batch = match received.recv_timeout(TICK) {
            Ok(batch) => batch,
            Err(RecvTimeoutError::Timeout) if deadline.is_some_and(|d| Instant::now() > d) => break,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        for event in batch {
            match event {
                CollectorEvent::Node(sample) => {
                    let (rank, snapshot) = (sample.rank, *sample);
                    // A read from a rank outside the job is refused (and counted) by the view: not kept.
                    if !view.push(rank, snapshot.clone()) {
                        eprintln!("efatop: warning: a read from rank {rank} refused: outside the job's {size} ranks, or naming more than {} NICs", efatop_ui::monitor::MAX_NODE_NICS);
                        continue;
                    }
                    if args.once {
                        latest.insert(rank, snapshot);
                    } else if let Some(node) = view.nodes.get(&rank) {
                        print_line(&snapshot, Some(rank), node, args.json)?;
                    }
                }
                CollectorEvent::Closed { rank, from } => {
                    closed.insert(rank.map_or_else(|| from.to_string(), |r| r.to_string()));
                }
                CollectorEvent::Malformed { from, reason } => eprintln!("efatop: warning: frame from {from} rejected: {reason}"),
                CollectorEvent::Refused { from, reason, total } => {
                    eprintln!("efatop: warning: connection from {from} refused ({reason}); {total} refused so far");
                }
                CollectorEvent::Sample(_) | CollectorEvent::Phase(_) => {}
            }
        }
    }
    for (rank, snapshot) in &latest {
        if let Some(node) = view.nodes.get(rank) {
            print_line(snapshot, Some(*rank), node, args.json)?;
        }
    }
    if args.once && latest.len() < size {
        let missing: Vec<String> = (0..size).filter(|r| !latest.keys().any(|got| *got as usize == *r)).map(|r| r.to_string()).collect();
        return Err((1, format!("no snapshot from rank {} of {size}", missing.join(", "))));
    }
    Ok(())
}

fn show_terminal(args: &MonitorArgs, size: usize, received: &Receiver<Vec<CollectorEvent>>) -> std::io::Result<()> {
    let started = Instant::now();
    let mut nodes = Nodes::new(&args.filter, size, args.count.is_some());
    crate::tui::on_terminal(&mut nodes, &mut { received }, || started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use efatop_proto::telemetry::wire;
    use efatop_node::{Affinity, FakeSysfs, GpuReader, Monitor, Sysfs};
    use efatop_proto::telemetry::{NodeGpu, NodeGpus};

    #[test]
    fn a_snapshot_crosses_the_wire_with_what_the_view_draws() {
        let dir = tempfile::tempdir().unwrap();
        let fake = FakeSysfs::p5(dir.path()).unwrap();
        let mut monitor = Monitor::new("n", Sysfs::new(dir.path()), Affinity::none(), GpuReader::unavailable("no driver"));
        monitor.sample(Duration::ZERO);
        fake.advance("rdmap79s0", "tx_bytes", 1_250_000_000).unwrap();
        fake.advance("rdmap79s0", "retrans_pkts", 4).unwrap();
        let mut snapshot = monitor.sample(Duration::from_secs(1));
        snapshot.gpus = NodeGpus::Gpus(vec![NodeGpu {
                index: 0,
                name: "H100".into(),
                pci_bus_id: "0000:53:00.0".into(),
                pcie_tx_gbps: Some(1.5),
                pcie_rx_gbps: None,
                nvlink_tx_gbps: Some(0.0),
                nvlink_rx_gbps: Some(0.0),
                note: Some("PCIe only".into()),
            }]);
        let sent = snapshot.sent_as(1, 9, 0);
        let mut frame = Vec::new();
        wire::encode_node(&sent, &mut frame).unwrap();
        let Ok(wire::Frame::Node(arrived)) = wire::decode_frame(&frame[4..]) else { panic!("not a node frame") };
        // What stays on the node: every counter's own figures and the NICs' PCI addresses.
        let mut expected = sent.clone();
        for nic in &mut expected.nics {
            nic.counters.clear();
            nic.pci_bus_id = None;
            nic.went_backwards.clear();
        }
        assert_eq!(arrived, expected);
        let busy = arrived.nics.iter().find(|nic| nic.name == "rdmap79s0").unwrap();
        assert_eq!((busy.tx_gbps, busy.retransmits_delta), (Some(10.0), 4));
    }
}
