//! The fleet overview's model as nodes' reads feed it (rails, the slow NIC flagged after the hold, gone
//! NICs, netdevs left out, nodes on one machine), when it replaces the tabs, its keys, and tiny screens.
//! The 64-node session with its snapshots runs the many-node TUI on the session loop (`tui/nodes.rs`).

use std::time::Duration;

use efatop_node::{p5_efa_devices, NO_DRIVER};
use efatop_proto::telemetry::{NicKind, NodeGpus, NodeNic, NodeSample};

use super::FLEET_MIN_NODES;
use crate::monitor::{render_nodes, NodesView};
use crate::state::{Action, Key};

/// Node `host`'s read at `step` as it reaches rank 0 (no PCI addresses): its 32 EFA NICs under GPU
/// i / 4, each near 95 Gbps tx + rx (60 % tx), NIC `slow.0` at `slow.1` of that; lo beside them. Step 0
/// is a first read, with no rates.
fn read(host: &str, step: u64, slow: Option<(usize, f64)>) -> NodeSample {
    let rate = |i: usize| {
        let jitter = ((host.bytes().map(usize::from).sum::<usize>() * 7 + i * 13 + step as usize * 3) % 41) as f64 / 10.0;
        let gbps = 93.0 + jitter;
        slow.filter(|(nic, _)| *nic == i).map_or(gbps, |(_, share)| gbps * share)
    };
    let mut nics: Vec<NodeNic> = p5_efa_devices()
        .into_iter()
        .enumerate()
        .map(|(i, (name, _))| NodeNic {
            name,
            kind: NicKind::Rdma,
            gpus: vec![i / 4],
            link_gbps: Some(100.0),
            present: true,
            tx_gbps: (step > 0).then(|| rate(i) * 0.6),
            rx_gbps: (step > 0).then(|| rate(i) * 0.4),
            ..NodeNic::default()
        })
        .collect();
    nics.push(NodeNic { name: "lo".into(), present: true, tx_gbps: Some(3.0), rx_gbps: Some(3.0), ..NodeNic::default() });
    NodeSample {
        host: host.into(),
        t_ms: step * 1000,
        interval_ms: (step > 0).then_some(1000.0),
        nics,
        gpus: NodeGpus::Unavailable(NO_DRIVER.into()),
        ..NodeSample::default()
    }
}

fn host(node: u32) -> String {
    format!("node-{node:02}")
}

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

/// `nodes` nodes' reads at steps 0..=`steps`, the model refreshed after each, `slow` from step 2 on.
fn fed(nodes: u32, steps: u64, slow: Option<(u32, usize, f64)>) -> NodesView {
    let mut view = NodesView::new("", nodes as usize);
    for step in 0..=steps {
        for rank in 0..nodes {
            let slowed = slow.filter(|(node, _, _)| *node == rank && step >= 2).map(|(_, nic, share)| (nic, share));
            view.push(rank, read(&host(rank), step, slowed));
        }
        view.refresh(s(step));
    }
    view
}

fn screen(view: &NodesView, width: u16, height: u16) -> String {
    crate::screen::rendered(width, height, |area, buf| render_nodes(view, area, buf))
}

#[test]
fn every_nodes_efa_nics_feed_the_fleet_on_their_rails_and_the_slow_one_is_flagged_after_the_hold() {
    // Node 5's NIC 14 (GPU 3's third) at 60 % from step 2 (2 s) on.
    let view = fed(8, 2, Some((5, 14, 0.6)));
    let model = &view.fleet.model;
    assert_eq!(model.hosts().len(), 8);
    assert_eq!(model.rails().len(), 32, "a rail per EFA NIC of a node; lo is not one");
    assert!(model.rails().iter().all(|rail| rail.nics == 8), "{:?}", model.rails()[0]);
    let worst = model.worst()[0];
    let nic = view.fleet.nic(worst.view).expect("a NIC of the overview");
    assert_eq!((nic.rank, nic.name.as_str(), nic.gpu, worst.rail), (5, p5_efa_devices()[14].0.as_str(), Some(3), 14));
    assert!((worst.ratio - 0.6).abs() < 0.05, "{worst:?}");
    assert!(!worst.behind, "low for 0 s: not yet behind");
    assert_eq!(worst.low_for, Some(Duration::ZERO));
    assert_eq!(model.order()[0], 5, "its node first");
    // A second on, still low: flagged, on its rail and its node; the clock moves without a new read.
    let mut view = view;
    view.refresh(s(3));
    let worst = view.fleet.model.worst()[0];
    assert!(worst.behind && worst.low_for == Some(s(1)), "{worst:?}");
    assert_eq!((view.fleet.model.rails()[14].behind, view.fleet.model.hosts()[5].behind), (1, 1));
}

#[test]
fn a_gone_nic_keeps_its_place_without_a_rate_and_a_first_read_has_none() {
    let mut view = fed(5, 0, None);
    assert!(view.fleet.model.worst().is_empty(), "first reads carry no rates");
    assert!(view.fleet.model.rails().iter().all(|rail| rail.nics == 0));
    assert!(screen(&view, 120, 30).contains("no EFA NIC has reported a rate yet"), "{}", screen(&view, 120, 30));
    for rank in 0..5 {
        let mut snapshot = read(&host(rank), 1, None);
        if rank == 2 {
            let gone = &mut snapshot.nics[7];
            (gone.present, gone.tx_gbps, gone.rx_gbps) = (false, None, None);
        }
        view.push(rank, snapshot);
    }
    view.refresh(s(1));
    let model = &view.fleet.model;
    assert_eq!(model.rails()[7].nics, 4, "the gone NIC is left out of its rail");
    assert_eq!(model.hosts()[2].views.len(), 32, "and keeps its cell");
    assert_eq!(model.ratio(model.hosts()[2].views[7] as usize), None);
}

#[test]
fn from_a_handful_of_nodes_the_fleet_replaces_the_tabs() {
    let few = fed(FLEET_MIN_NODES as u32 - 1, 1, None);
    assert!(!few.shows_fleet());
    assert!(screen(&few, 120, 20).contains("Tab/[ ] switch node"));
    let mut expected = NodesView::new("", FLEET_MIN_NODES);
    assert!(expected.shows_fleet(), "the job's size decides, before any node reports");
    let waiting = screen(&expected, 120, 20);
    assert!(waiting.contains("waiting for 5 of 5") && waiting.contains("no node has reported yet"), "{waiting}");
    assert_eq!(expected.handle_key(Key::Enter), Action::None, "nothing to drill into");
    assert_eq!(expected.fleet.view.drilled, None);
    assert_eq!(expected.handle_key(Key::Char('q')), Action::Quit);
}

#[test]
fn nodes_on_one_machine_are_told_apart_by_rank() {
    let mut view = NodesView::new("", 6);
    for rank in 0..6 {
        view.push(rank, read("h", 1, None));
    }
    let names: Vec<&str> = view.fleet.model.hosts().iter().map(|host| host.name.as_str()).collect();
    assert_eq!(names, ["h#0", "h#1", "h#2", "h#3", "h#4", "h#5"]);
    assert_eq!(view.fleet.model.find_host("h#4"), Some(4));
}

#[test]
fn enter_tab_and_esc_move_between_the_fleet_and_its_nodes_and_slash_finds_one() {
    let mut view = fed(8, 3, Some((5, 14, 0.6)));
    // ↓ and ↑ walk the nodes worst first; Enter shows the selected one.
    view.handle_key(Key::Down);
    view.handle_key(Key::Char('k'));
    assert_eq!(view.handle_key(Key::Enter), Action::None);
    assert_eq!(view.fleet.view.drilled, Some(5));
    let node = screen(&view, 160, 50);
    assert!(node.contains(" node  node-05  (rank 5)  1 of 8 worst first"), "{node}");
    assert!(node.contains("efatop monitor  node-05"), "{node}");
    // The node's keys are the one-node monitor's: its filter prompt takes Esc.
    view.handle_key(Key::Char('/'));
    assert!(screen(&view, 160, 50).contains("filter: "));
    view.handle_key(Key::Esc);
    assert_eq!(view.fleet.view.drilled, Some(5), "Esc closed the prompt, not the node");
    // Tab and brackets: the next node by rank, wrapping around.
    view.handle_key(Key::Tab);
    assert!(screen(&view, 160, 50).contains("efatop monitor  node-06"));
    view.handle_key(Key::Char(']'));
    view.handle_key(Key::Char(']'));
    assert!(screen(&view, 160, 50).contains("efatop monitor  node-00"), "wraps");
    view.handle_key(Key::BackTab);
    assert!(screen(&view, 160, 50).contains("efatop monitor  node-07"));
    // Esc: the fleet, with the node just shown selected.
    assert_eq!(view.handle_key(Key::Esc), Action::None);
    assert_eq!((view.fleet.view.drilled, view.fleet.view.selected), (None, Some(7)));
    assert!(screen(&view, 160, 50).contains("▶ node-07"), "{}", screen(&view, 160, 50));
    // `/` jumps as the name is typed; backspace; Enter keeps it.
    for key in [Key::Char('/'), Key::Char('0'), Key::Char('9'), Key::Char('\u{8}'), Key::Char('3')] {
        view.handle_key(key);
    }
    assert!(screen(&view, 160, 50).contains(" find node: 03█"));
    assert_eq!(view.fleet.view.selected, Some(3));
    view.handle_key(Key::Enter);
    assert_eq!(view.fleet.view.search, None);
    view.handle_key(Key::Enter);
    assert_eq!(view.fleet.view.drilled, Some(3));
    view.handle_key(Key::Esc);
    assert_eq!(view.handle_key(Key::Esc), Action::None, "Esc on the fleet does not quit");
    assert_eq!(view.handle_key(Key::Char('q')), Action::Quit);
}

#[test]
fn no_size_panics_on_the_fleet_or_a_node_drilled_into() {
    let mut view = fed(8, 3, Some((5, 14, 0.6)));
    for drilled in [false, true] {
        if drilled {
            view.handle_key(Key::Enter);
        }
        for (width, height) in [(0, 0), (1, 1), (5, 2), (30, 3), (40, 8), (80, 24), (120, 30), (300, 100)] {
            screen(&view, width, height);
        }
    }
}

