//! Snapshots of the monitor view on a fake terminal over a scripted p5 node, and checks of what text
//! cannot carry: red counters while they move, sort and filter keys, a vanished NIC, tiny terminals.

use std::collections::BTreeMap;

use efatop_node::{p5_efa_devices, NO_DRIVER};
use efatop_proto::telemetry::{CounterStats, NicKind, NodeGpu, NodeGpus, NodeNic, NodeSample, NodeTopologyGpu};
use insta::assert_snapshot;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::style::Color;
use ratatui::Terminal;

use super::{draw, plain_text, MonitorView, SortKey};
use crate::state::{Action, Key};

const P5_GPU_BUSES: [&str; 8] = ["53", "64", "75", "86", "97", "a8", "b9", "ca"];

fn nic(name: &str, bus: Option<&str>, gpu: Option<usize>, link: Option<f64>, tx: f64, rx: f64) -> NodeNic {
    let counters: BTreeMap<String, CounterStats> = [("rx_bytes", rx), ("tx_bytes", tx)]
        .into_iter()
        .map(|(n, gbps)| (n.to_string(), CounterStats { value: 1_000_000_000, per_s: Some(gbps * 1e9 / 8.0) }))
        .collect();
    NodeNic {
        name: name.to_string(),
        kind: if bus.is_some() && name.starts_with("rdmap") { NicKind::Rdma } else { NicKind::Net },
        pci_bus_id: bus.map(str::to_string),
        gpus: gpu.into_iter().collect(),
        link_gbps: link,
        present: true,
        tx_gbps: Some(tx),
        rx_gbps: Some(rx),
        errors: 0,
        errors_delta: 0,
        retransmits: 0,
        retransmits_delta: 0,
        went_backwards: Vec::new(),
        counters,
    }
}

/// A p5 in the middle of a job: GPU k's NICs carry 5·(k+1) + step Gbps tx (the first one of each GPU twice
/// that), rx half of tx; `rdmap131s0` retransmits at `step` 2, `rdmap80s0` has old errors, `rdmap200s0`
/// has gone; lo carries 3.2 Gbps.
fn p5_snapshot(step: u64, gpus: NodeGpus) -> NodeSample {
    let mut nics: Vec<NodeNic> = p5_efa_devices()
        .into_iter()
        .enumerate()
        .map(|(i, (name, bus))| {
            let gpu = i / 4;
            let tx = 5.0 * (gpu + 1) as f64 * if i % 4 == 0 { 2.0 } else { 1.0 } + step as f64;
            nic(&name, Some(&bus), Some(gpu), Some(100.0), tx, tx / 2.0)
        })
        .collect();
    for stats in &mut nics {
        match stats.name.as_str() {
            "rdmap131s0" => {
                stats.retransmits = 40 + step;
                stats.retransmits_delta = u64::from(step == 2);
            }
            "rdmap80s0" => stats.errors = 12_345,
            "rdmap200s0" => {
                stats.present = false;
                stats.tx_gbps = None;
                stats.rx_gbps = None;
            }
            _ => {}
        }
    }
    nics.push(nic("eth0", Some("0000:00:05.0"), None, Some(100.0), 0.5, 0.25));
    nics.push(nic("lo", None, None, None, 3.2, 3.2));
    let topology_gpus = P5_GPU_BUSES
        .iter()
        .enumerate()
        .map(|(index, bus)| NodeTopologyGpu { index, pci_bus_id: format!("0000:{bus}:00.0"), model: Some("NVIDIA H100 80GB HBM3".into()) })
        .collect();
    NodeSample { host: "p5-fake".into(), t_ms: 1000 * step, interval_ms: Some(1000.0), topology_gpus, nics, gpus, ..NodeSample::default() }
}

fn no_driver() -> NodeGpus {
    NodeGpus::Unavailable(NO_DRIVER.into())
}

fn with_nvml() -> NodeGpus {
    NodeGpus::Gpus(
        P5_GPU_BUSES
            .iter()
            .enumerate()
            .map(|(index, bus)| NodeGpu {
                index,
                name: "NVIDIA H100 80GB HBM3".into(),
                pci_bus_id: format!("0000:{bus}:00.0"),
                pcie_tx_gbps: Some(1.5 * index as f64),
                pcie_rx_gbps: Some(0.5),
                nvlink_tx_gbps: Some(900.0 + index as f64),
                nvlink_rx_gbps: Some(880.0),
                note: None,
            })
            .collect(),
    )
}

fn view_after(steps: u64, gpus: fn() -> NodeGpus) -> MonitorView {
    let mut view = MonitorView::new("");
    for step in 1..=steps {
        view.push(p5_snapshot(step, gpus()));
    }
    view
}

fn screen(view: &MonitorView, width: u16, height: u16) -> Terminal<TestBackend> {
    crate::screen::drawn(width, height, |frame| draw(frame, view))
}

fn find(buffer: &Buffer, needle: &str) -> Option<(u16, u16)> {
    let area = buffer.area;
    (area.top()..area.bottom()).find_map(|y| {
        let line: String = (area.left()..area.right()).map(|x| buffer[(x, y)].symbol()).collect();
        let byte = line.find(needle)?;
        Some((u16::try_from(line[..byte].chars().count()).unwrap(), y))
    })
}

fn row_text(buffer: &Buffer, y: u16) -> String {
    (0..buffer.area.width).map(|x| buffer[(x, y)].symbol()).collect()
}

#[test]
fn monitor_80x24() {
    assert_snapshot!("monitor_80x24", screen(&view_after(2, no_driver), 80, 24).backend());
}

#[test]
fn monitor_200x60() {
    assert_snapshot!("monitor_200x60", screen(&view_after(2, with_nvml), 200, 60).backend());
}

#[test]
fn monitor_200x60_sorted_by_rate_and_filtered() {
    let mut view = view_after(2, no_driver);
    view.handle_key(Key::Char('s'));
    assert_eq!(view.view.sort, SortKey::Rate);
    for key in [Key::Char('/'), Key::Char('g'), Key::Char('p'), Key::Char('u'), Key::Char('7'), Key::Char(','), Key::Char('l'), Key::Char('o'), Key::Enter] {
        view.handle_key(key);
    }
    assert_eq!(view.view.filter, "gpu7,lo");
    let terminal = screen(&view, 200, 60);
    assert_snapshot!("monitor_200x60_rate_filtered", terminal.backend());
    let names: Vec<&str> = view.shown().iter().map(|nic| nic.name.as_str()).collect();
    // GPU 7's first NIC carries twice the others; the gone one has no rate and goes last.
    assert_eq!(names, ["rdmap198s0", "rdmap199s0", "rdmap201s0", "lo", "rdmap200s0"]);
}

#[test]
fn rates_and_groups_are_on_screen() {
    let terminal = screen(&view_after(2, with_nvml), 200, 60);
    let buffer = terminal.backend().buffer();
    let (_, heading) = find(buffer, "GPU3 0000:86:00.0").expect("GPU3 heading");
    assert!(row_text(buffer, heading).contains("NVLink tx 903.00 rx 880.00 Gbps"), "{}", row_text(buffer, heading));
    // GPU 3's NICs follow its heading: 40+2 tx, 21 rx for the first.
    let first = row_text(buffer, heading + 1);
    assert!(first.contains("rdmap130s0") && first.contains("42.00") && first.contains("21.00"), "{first}");
    let (_, lo) = find(buffer, "lo ").expect("lo row");
    assert!(row_text(buffer, lo).contains("3.20"));
    assert!(find(buffer, "not next to a GPU").is_some());
}

#[test]
fn moving_counters_are_red_and_fade() {
    let view = view_after(2, no_driver);
    let terminal = screen(&view, 200, 60);
    let buffer = terminal.backend().buffer();
    let (_, y) = find(buffer, "rdmap131s0").unwrap();
    let (x, _) = find(buffer, "     42").map(|(x, _)| (x + 5, 0)).unwrap();
    assert_eq!(buffer[(x, y)].bg, Color::Red, "retransmits moved this interval");
    let (_, old) = find(buffer, "rdmap80s0").unwrap();
    let (x, _) = find(buffer, "12.3k").unwrap();
    assert_ne!(buffer[(x, old)].bg, Color::Red, "errors that do not move stay plain");
    // Three quiet samples later the red is gone.
    let mut later = view;
    for step in 3..=5 {
        let mut snapshot = p5_snapshot(step, no_driver());
        for nic in &mut snapshot.nics {
            nic.retransmits_delta = 0;
        }
        later.push(snapshot);
    }
    let terminal = screen(&later, 200, 60);
    let buffer = terminal.backend().buffer();
    let (_, y) = find(buffer, "rdmap131s0").unwrap();
    let (x, _) = find(buffer, "     45").map(|(x, _)| (x + 5, 0)).unwrap();
    assert_ne!(buffer[(x, y)].bg, Color::Red);
}

#[test]
fn the_no_driver_state_and_a_gone_nic_are_said_in_words() {
    let terminal = screen(&view_after(1, no_driver), 120, 60);
    let buffer = terminal.backend().buffer();
    assert!(find(buffer, "GPUs: no NVIDIA driver (libnvidia-ml.so not found)").is_some());
    let (_, y) = find(buffer, "rdmap200s0").unwrap();
    assert!(row_text(buffer, y).contains("gone"));
    assert!(find(buffer, "33 NICs (1 gone)").is_some(), "{buffer:?}");
}

#[test]
fn selection_scrolls_and_keys_act() {
    let mut view = view_after(1, no_driver);
    for _ in 0..29 {
        view.handle_key(Key::Down);
    }
    assert_eq!(view.selected_nic().map(|nic| nic.name.as_str()), Some("rdmap199s0"));
    let terminal = screen(&view, 80, 24);
    let buffer = terminal.backend().buffer();
    assert!(find(buffer, "▶ rdmap199s0").is_some(), "{buffer:?}");
    assert!(find(buffer, "rdmap79s0").is_none(), "scrolled past the first GPU");
    view.handle_key(Key::Char('p'));
    view.push(p5_snapshot(9, no_driver()));
    assert_eq!(view.drawn().samples, 1, "paused views take no snapshots");
    assert_eq!(view.reads.samples, 2, "while the reads go on");
    assert!(find(screen(&view, 80, 24).backend().buffer(), "▶ rdmap199s0").is_some(), "the selection stays");
    view.handle_key(Key::Char('p'));
    assert_eq!(view.drawn().samples, 2, "unpaused: the live reads");
    assert_eq!(view.handle_key(Key::Char('q')), Action::Quit);
}

#[test]
fn help_overlay_80x24() {
    let mut view = view_after(1, no_driver);
    view.handle_key(Key::Char('?'));
    assert_snapshot!("monitor_help_80x24", screen(&view, 80, 24).backend());
    assert_eq!(view.handle_key(Key::Char('x')), Action::None);
    assert!(!view.view.show_help);
}

#[test]
fn plain_text_lists_every_nic_under_its_gpu() {
    let text = plain_text(&view_after(2, no_driver), 100);
    assert_snapshot!("monitor_plain_100", text);
    assert_eq!(text.lines().filter(|l| l.contains("rdmap")).count(), 32);
}

#[test]
fn tiny_and_empty_terminals_do_not_panic() {
    let view = view_after(2, with_nvml);
    for (width, height) in [(1, 1), (10, 2), (30, 5), (80, 3), (200, 1)] {
        screen(&view, width, height);
    }
    let empty = MonitorView::new("");
    let terminal = screen(&empty, 80, 24);
    assert!(find(terminal.backend().buffer(), "waiting for the first read").is_some());
}

#[test]
fn a_nic_far_off_its_rail_is_drawn_red() {
    use efatop_sweep::rails::balance;
    let snapshot = p5_snapshot(2, NodeGpus::Unavailable("test".into()));
    let off: Vec<String> = balance(&[&snapshot]).into_iter().filter(|l| l.off).map(|l| l.nic).collect();
    assert!(!off.is_empty(), "the sample's loads leave some NIC off its rail");
    let mut view = MonitorView::new("");
    view.push(snapshot);
    let area = ratatui::layout::Rect::new(0, 0, 200, 60);
    let mut buf = Buffer::empty(area);
    crate::monitor::render(&view, area, &mut buf);
    // The table's cell of a NIC's name: the first row where the name starts within the table's columns.
    let name_cell = |name: &str| {
        (0..area.height).find_map(|y| {
            let row: Vec<String> = (0..area.width).map(|x| buf[(x, y)].symbol().to_string()).collect();
            let text: String = row.concat();
            let at = text.find(&format!(" {name} "))?;
            let x = text[..at].chars().count() + 1;
            (x < 40).then_some((x as u16, y))
        })
    };
    let cell = name_cell(&off[0]).expect("the off NIC is on screen");
    assert_eq!(buf[cell].fg, Color::Red, "{}", off[0]);
    let even = balance(&[view.snapshot().unwrap()]).into_iter().find(|l| !l.off && l.ratio.is_some()).expect("an even NIC");
    let cell = name_cell(&even.nic).expect("on screen");
    assert_ne!(buf[cell].fg, Color::Red, "{}", even.nic);
}
