//! `efatop monitor` on one node: the reader thread over a fake sysfs tree, and the monitor on the TUI
//! loop on `TestBackend`, driven by the fake node's reads and scripted keys.

use super::*;

#[test]
fn the_reader_thread_sends_snapshots_of_a_fake_tree() {
    let dir = tempfile::tempdir().unwrap();
    FakeSysfs::p5(dir.path()).unwrap();
    let monitor = Monitor::new("t", Sysfs::new(dir.path()), Affinity::none(), GpuReader::unavailable("test"));
    let receiver = spawn_reader(monitor, Duration::from_millis(20), Instant::now());
    let first = receiver.recv_timeout(Duration::from_secs(5)).unwrap();
    let second = receiver.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(first.nics.len(), 34);
    assert!(second.interval_ms.is_some_and(|ms| ms > 10.0));
}

/// A fake p5 node's reads, as the reader thread sends them, into the monitor on the TUI loop.
fn fake_node() -> (tempfile::TempDir, FakeSysfs, Monitor) {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeSysfs::p5(dir.path()).unwrap();
    let monitor = Monitor::new("node-a", Sysfs::new(dir.path()), Affinity::none(), GpuReader::unavailable("no driver in this test"));
    (dir, fake, monitor)
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

#[test]
fn the_monitor_tui_draws_a_fake_nodes_reads_and_its_keys_sort_filter_and_pause() {
    let (_dir, fake, mut monitor) = fake_node();
    let (reads, snapshots) = mpsc::channel();
    let node = Node::new("", None, Sinks { served: None, exporter: None });
    let mut tui = efatop_ui::tui::scripted::Scripted::new(node, snapshots, 120, 40);
    assert_eq!(tui.frame(ms(0)), None);
    assert!(tui.screen().contains("waiting for the first read"), "{}", tui.screen());
    reads.send(monitor.sample(ms(0))).unwrap();
    assert_eq!(tui.frame(ms(50)), None);
    assert!(tui.row("efatop monitor").contains("node-a  first read  34 NICs"), "{}", tui.screen());
    // A second read a second later: 10 Gbps out of one NIC, 20 Gbps into another, 4 retransmits.
    fake.advance("rdmap79s0", "tx_bytes", 1_250_000_000).unwrap();
    fake.advance("rdmap113s0", "rx_bytes", 2_500_000_000).unwrap();
    fake.advance("rdmap113s0", "retrans_pkts", 4).unwrap();
    reads.send(monitor.sample(ms(1000))).unwrap();
    assert_eq!(tui.frame(ms(1000)), None);
    insta::assert_snapshot!("monitor_tui_two_reads_120x40", tui.screen());
    assert!(tui.row("efatop monitor").contains("every 1.0s"), "{}", tui.screen());
    // `s`: by rate, the busiest first, under the selection marker.
    assert_eq!(tui.key(Key::Char('s'), ms(1100)), None);
    assert!(tui.row("efatop monitor").contains("sort rate"), "{}", tui.screen());
    assert!(tui.row("▶").contains("rdmap113s0"), "{}", tui.screen());
    // `/`: a filter typed at the prompt, kept with Enter.
    for key in "/rdmap79".chars().map(Key::Char).chain([Key::Enter]) {
        assert_eq!(tui.key(key, ms(1200)), None);
    }
    let filtered = tui.screen();
    assert!(tui.row("efatop monitor").contains("filter rdmap79"), "{filtered}");
    assert!(filtered.contains("rdmap79s0") && !filtered.contains("rdmap113s0"), "{filtered}");
    // `p`: reads are kept out until `p` again.
    assert_eq!(tui.key(Key::Char('p'), ms(1300)), None);
    reads.send(monitor.sample(ms(2000))).unwrap();
    assert_eq!(tui.frame(ms(2000)), None);
    assert!(tui.row("efatop monitor").contains("PAUSED"), "{}", tui.screen());
    assert_eq!(tui.tui.view.drawn().samples, 2, "paused: the third read is not drawn");
    assert_eq!(tui.tui.view.reads.samples, 3, "while the reads go on");
    assert_eq!(tui.key(Key::Char('q'), ms(2100)), Some(()));
}

#[test]
fn the_monitor_tui_leaves_after_count_reads_when_the_reader_stops_and_on_ctrl_c() {
    let (_dir, _fake, mut monitor) = fake_node();
    // --count 2: the second read ends the view.
    let (reads, snapshots) = mpsc::channel();
    let mut tui = efatop_ui::tui::scripted::Scripted::new(Node::new("", Some(2), Sinks { served: None, exporter: None }), snapshots, 80, 24);
    reads.send(monitor.sample(ms(0))).unwrap();
    assert_eq!(tui.frame(ms(0)), None);
    reads.send(monitor.sample(ms(1000))).unwrap();
    assert_eq!(tui.frame(ms(1000)), Some(()));
    // The reader gone: the view ends.
    let (reads, snapshots) = mpsc::channel();
    let mut tui = efatop_ui::tui::scripted::Scripted::new(Node::new("", None, Sinks { served: None, exporter: None }), snapshots, 80, 24);
    reads.send(monitor.sample(ms(2000))).unwrap();
    assert_eq!(tui.frame(ms(2000)), None);
    drop(reads);
    assert_eq!(tui.frame(ms(2050)), Some(()));
    // Ctrl-C, through the loop with a scripted key source.
    let (_reads, mut snapshots) = mpsc::channel::<NodeSample>();
    let mut node = Node::new("", None, Sinks { served: None, exporter: None });
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(80, 24)).unwrap();
    let mut script = [efatop_ui::tui::KeyPoll::Nothing, efatop_ui::tui::KeyPoll::Key(Key::Down), efatop_ui::tui::KeyPoll::Interrupt].into_iter();
    let ended = efatop_ui::tui::run(&mut terminal, &mut node, &mut snapshots, || Duration::ZERO, |_wait| Ok(script.next().expect("ended at Ctrl-C")));
    assert_eq!(ended.unwrap(), ());
}
