//! The many-node monitor on rank 0 as the TUI loop drives it: each node's reads as rank 0's collector
//! hands them over ([`NodesView`] draws them), until every node has sent its `--count` reads and closed,
//! or the user quits. The binary runs it on its terminal (`src/monitor/nodes.rs`, which also collects
//! the reads); the tests here run the same loop on `TestBackend`.

use std::time::Duration;

use efatop_proto::events::CollectorEvent;

use super::Tui;
use crate::monitor::NodesView;
use crate::state::{Action, Key};

/// Rank 0's view of every node: the view, and when it is done.
pub struct Nodes {
    view: NodesView,
    expected: usize,
    /// Nodes whose connection closed.
    closed: usize,
    /// `--count`: the nodes stop after their reads, and so does the view once all have.
    counted: bool,
}

impl Nodes {
    pub fn new(filter: &str, expected: usize, counted: bool) -> Self {
        Self { view: NodesView::new(filter, expected), expected, closed: 0, counted }
    }
}

impl Tui for Nodes {
    type Event = Vec<CollectorEvent>;
    type Ended = ();

    fn event(&mut self, batch: Vec<CollectorEvent>, _now: Duration) -> Option<()> {
        for event in batch {
            match event {
                CollectorEvent::Node(sample) => {
                    self.view.push(sample.rank, *sample);
                }
                CollectorEvent::Closed { .. } => self.closed += 1,
                CollectorEvent::Malformed { .. } | CollectorEvent::Refused { .. } | CollectorEvent::Sample(_) | CollectorEvent::Phase(_) => {}
            }
        }
        None
    }

    fn tick(&mut self, now: Duration) -> Option<()> {
        self.view.refresh(now);
        (self.counted && self.closed >= self.expected).then_some(())
    }

    fn key(&mut self, key: Key, _now: Duration) -> Option<()> {
        (self.view.handle_key(key) == Action::Quit).then_some(())
    }

    fn interrupt(&mut self, _now: Duration) -> Option<()> {
        Some(())
    }

    fn draw(&self, frame: &mut ratatui::Frame) {
        crate::monitor::draw_nodes(frame, &self.view);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;
    use crate::tui::scripted::Scripted;
    use efatop_proto::telemetry::wire;
    use efatop_node::{Affinity, FakeSysfs, GpuReader, Monitor, Sysfs};
    use efatop_proto::telemetry::{NicKind, NodeSample};

    /// Node `rank`'s read as rank 0's collector hands it over: a batch of one node frame.
    fn read(snapshot: &NodeSample, rank: u32, seq: u64) -> Vec<CollectorEvent> {
        vec![CollectorEvent::Node(Box::new(snapshot.clone().sent_as(rank, seq, 0)))]
    }

    fn closed(rank: u32) -> Vec<CollectorEvent> {
        vec![CollectorEvent::Closed { rank: Some(rank), from: "127.0.0.1:9".parse().unwrap() }]
    }

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn the_many_node_tui_shows_each_nodes_reads_and_switches_nodes_with_tab_and_brackets() {
        let dir = tempfile::tempdir().unwrap();
        let fake = FakeSysfs::p5(dir.path()).unwrap();
        let node = |host: &str| Monitor::new(host, Sysfs::new(dir.path()), Affinity::none(), GpuReader::unavailable("no driver"));
        let (mut a, mut b) = (node("node-a"), node("node-b"));
        let (batches, received) = mpsc::channel();
        let mut tui = Scripted::new(Nodes::new("", 3, true), received, 120, 40);
        assert_eq!(tui.frame(ms(0)), None);
        assert!(tui.row(" nodes ").contains("waiting for 3 of 3"), "{}", tui.screen());
        // Node b speaks first; the tab line still lists the nodes by rank.
        batches.send(read(&b.sample(ms(0)), 1, 1)).unwrap();
        batches.send(read(&a.sample(ms(0)), 0, 1)).unwrap();
        fake.advance("rdmap79s0", "tx_bytes", 1_250_000_000).unwrap();
        batches.send(read(&a.sample(ms(1000)), 0, 2)).unwrap();
        batches.send(read(&b.sample(ms(1000)), 1, 2)).unwrap();
        assert_eq!(tui.frame(ms(1000)), None);
        insta::assert_snapshot!("monitor_nodes_tui_120x40", tui.screen());
        let tabs = tui.row(" nodes ");
        assert!(tabs.contains(" node-a  node-b ") && tabs.contains("waiting for 1 of 3"), "{tabs}");
        assert!(tui.row("efatop monitor").contains("node-a  every 1.0s"), "{}", tui.screen());
        assert_eq!(tui.key(Key::Tab, ms(1100)), None);
        assert!(tui.row("efatop monitor").contains("node-b"), "{}", tui.screen());
        assert_eq!(tui.key(Key::Char(']'), ms(1200)), None);
        assert!(tui.row("efatop monitor").contains("node-a"), "wraps around:\n{}", tui.screen());
        assert_eq!(tui.key(Key::Char('['), ms(1300)), None);
        assert!(tui.row("efatop monitor").contains("node-b"), "{}", tui.screen());
        // Keys other than the node switches go to the node shown.
        assert_eq!(tui.key(Key::Char('s'), ms(1400)), None);
        assert!(tui.row("efatop monitor").contains("sort rate"), "{}", tui.screen());
        // --count: once every node has sent its reads and closed, the view ends.
        batches.send(closed(0)).unwrap();
        batches.send(closed(1)).unwrap();
        assert_eq!(tui.frame(ms(1500)), None, "rank 2 has not closed");
        batches.send(closed(2)).unwrap();
        assert_eq!(tui.frame(ms(1600)), Some(()));
    }

    /// The node the fleet session slows, and its NIC.
    const SLOW_NODE: u32 = 41;
    const SLOW_NIC: &str = "rdmap132s0";

    /// One real read of a fake p5 tree (`efatop_node::fake_fleet`), its NICs placed by the p5 topology
    /// fixture: 32 EFA NICs under their GPUs, lo and eth0.
    fn p5_shape() -> NodeSample {
        let dir = tempfile::tempdir().unwrap();
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../topology/fixtures/p5.48xlarge.xml");
        efatop_node::fake_fleet::p5_read(dir.path(), &fixture, false).unwrap()
    }

    /// Node `node`'s read at `step` (step 0: its first, without rates), across the wire as rank 0's
    /// collector hands it over: the fleet's read ([`efatop_node::fake_fleet::fleet_read`]), [`SLOW_NIC`]
    /// at 60 % when `slow`.
    fn fleet_read(shape: &NodeSample, node: u32, step: u64, slow: bool) -> Vec<CollectorEvent> {
        let read = efatop_node::fake_fleet::fleet_read(shape, node, step, slow.then_some(SLOW_NIC));
        let mut frame = Vec::new();
        wire::encode_node(&read, &mut frame).unwrap();
        let Ok(wire::Frame::Node(arrived)) = wire::decode_frame(&frame[4..]) else { panic!("not a node frame") };
        vec![CollectorEvent::Node(Box::new(arrived))]
    }

    fn rows_with(screen: &str, needle: &str) -> Vec<usize> {
        screen.lines().enumerate().filter(|(_, line)| line.contains(needle)).map(|(at, _)| at).collect()
    }

    #[test]
    fn the_many_node_tui_shows_64_nodes_as_a_fleet_the_slow_nic_first_and_drills_into_a_node() {
        let shape = p5_shape();
        assert_eq!(shape.nics.iter().filter(|nic| nic.kind == NicKind::Rdma).count(), 32);
        let (batches, received) = mpsc::channel();
        let mut tui = Scripted::new(Nodes::new("", 64, false), received, 200, 60);
        assert_eq!(tui.frame(ms(0)), None);
        assert!(tui.row("efatop monitor").contains("0 nodes  0 EFA NICs reporting  0 behind"), "{}", tui.screen());
        assert!(tui.row("efatop monitor").contains("waiting for 64 of 64"), "{}", tui.screen());
        // A read a second from every node; node 41's NIC slows from the third (2 s) on.
        for step in 0..=4 {
            for node in 0..64 {
                batches.send(fleet_read(&shape, node, step, node == SLOW_NODE && step >= 2)).unwrap();
            }
            assert_eq!(tui.frame(ms(step * 1000)), None);
        }
        let screen = tui.screen();
        insta::assert_snapshot!("monitor_fleet_64_nodes_200x60", screen);
        assert!(tui.row("efatop monitor").contains("64 nodes  2048 EFA NICs reporting  1 behind"), "{screen}");
        // The slow NIC heads the worst NICs, flagged, with its node, GPU and rail; its node heads the nodes.
        let slow = rows_with(&screen, "p5-node-0041");
        let line = screen.lines().nth(slow[0]).unwrap();
        assert!(slow[0] < 21, "row {}:\n{screen}", slow[0]);
        assert!(line.contains(SLOW_NIC) && line.contains("GPU 3") && line.contains("rail 14") && line.contains("BEHIND 2.0s"), "{line}");
        let nodes = rows_with(&screen, "Nodes, worst NIC first")[0];
        assert!(screen.lines().nth(nodes + 1).unwrap().starts_with("▶ p5-node-0041"), "{screen}");
        for rail in [0, 14, 31] {
            assert!(!rows_with(&screen, &format!("rail {rail:<2} {:>5}", 64)).is_empty(), "rail {rail}:\n{screen}");
        }

        // At 80×24 the worst NIC is still there, and flagged.
        tui.terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(80, 24)).unwrap();
        assert_eq!(tui.frame(ms(4000)), None);
        insta::assert_snapshot!("monitor_fleet_64_nodes_80x24", tui.screen());
        assert!(tui.row("p5-node-0041").contains("BEHIND 2.0s"), "{}", tui.screen());

        // Enter: the worst node's own view under a line naming it; Tab the next node by rank; Esc back,
        // on the node last shown.
        tui.terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(120, 40)).unwrap();
        assert_eq!(tui.key(Key::Enter, ms(4100)), None);
        assert!(tui.row(" node ").contains("p5-node-0041  (rank 41)  1 of 64 worst first"), "{}", tui.screen());
        assert!(tui.row("efatop monitor").contains("p5-node-0041  every 1.0s  34 NICs"), "{}", tui.screen());
        assert!(tui.row(SLOW_NIC).contains("100G"), "its NICs, as on one node:\n{}", tui.screen());
        // The node's keys are the one-node monitor's; Esc closes its prompt first.
        for key in [Key::Char('/'), Key::Char('x'), Key::Esc] {
            assert_eq!(tui.key(key, ms(4200)), None);
        }
        assert!(tui.row("efatop monitor").contains("p5-node-0041"), "{}", tui.screen());
        assert_eq!(tui.key(Key::Tab, ms(4300)), None);
        assert!(tui.row("efatop monitor").contains("p5-node-0042"), "{}", tui.screen());
        assert_eq!(tui.key(Key::Esc, ms(4400)), None);
        assert!(tui.row("Nodes, worst NIC first").starts_with("Nodes"), "{}", tui.screen());
        assert!(tui.screen().contains("▶ p5-node-0042"), "{}", tui.screen());

        // `/` finds a node as its name is typed; Enter keeps it, Enter again shows it.
        for key in "/0007".chars().map(Key::Char).chain([Key::Enter]) {
            assert_eq!(tui.key(key, ms(4500)), None);
        }
        assert!(tui.screen().contains("▶ p5-node-0007"), "{}", tui.screen());
        assert_eq!(tui.key(Key::Enter, ms(4600)), None);
        assert!(tui.row("efatop monitor").contains("p5-node-0007"), "{}", tui.screen());
        assert_eq!(tui.key(Key::Esc, ms(4700)), None);
        assert_eq!(tui.key(Key::Char('q'), ms(4800)), Some(()));
    }

    #[test]
    fn the_many_node_tui_leaves_on_q_and_stays_without_count() {
        let (batches, received) = mpsc::channel();
        let mut tui = Scripted::new(Nodes::new("", 1, false), received, 80, 24);
        batches.send(closed(0)).unwrap();
        assert_eq!(tui.frame(ms(0)), None, "without --count, closed nodes leave the view up");
        assert_eq!(tui.key(Key::Char('q'), ms(100)), Some(()));
    }
}
