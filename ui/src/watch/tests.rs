//! The watch view on a fake terminal over scripted watcher lines: a two-host job whose host node-a fell
//! back to sockets and whose rank 1 is behind in allreduce #5, snapshots at two sizes, the hang clearing,
//! scrolling and quitting by key, and a 256-host fleet whose one bad host is on the first screen.

use efatop_proto::nccl::{Func, HangWhy, NicVerdict, NicWindow, Timing, WatchLine};
use insta::assert_snapshot;
use ratatui::backend::TestBackend;
use ratatui::style::Color;
use ratatui::Terminal;

use super::{draw, plain_text, WatchView};
use crate::state::{Action, Key};

const COMM: &str = "05ca1ab1e0ddba11";

fn rank(host: &str, gpu: &str, rank: u32, pid: u32) -> WatchLine {
    WatchLine::Rank { host: host.into(), pid, gpu: Some(gpu.into()), comm: COMM.into(), comm_name: None, rank, nranks: 2, nnodes: 2, nccl_version: Some("2.28.3".into()), abi: 5 }
}

fn coll(func: Func, size: u64, ops: u64, time_us: f64, bus: f64) -> WatchLine {
    let algbw = size as f64 / (time_us * 1e-6) / 1e9;
    WatchLine::Coll {
        comm: COMM.into(),
        func,
        size,
        datatype: "ncclFloat32".into(),
        algo: "RING".into(),
        proto: "SIMPLE".into(),
        ranks: 2,
        nranks: 2,
        ops,
        timing: Timing::Gpu,
        time_us: Some(time_us),
        algbw_gbps: Some(algbw),
        busbw_gbps: Some(algbw * bus),
        user_tag: 0,
        variant: String::new(),
        wait_us: None,
        work_us: None,
    }
}

fn nics(host: &str, verdict: NicVerdict, nccl: u64, carried: u64, behind: &[usize]) -> WatchLine {
    let nics = (0..32).map(|i| NicWindow { name: format!("rdmap{}s0", 79 + i), bytes: carried / 32, behind: behind.contains(&i) }).collect();
    WatchLine::Nics { host: host.into(), window_s: 5.0, nccl_bytes: nccl, nic_bytes: carried, verdict, nics }
}

fn hang() -> WatchLine {
    WatchLine::Hang { comm: COMM.into(), func: Func::AllReduce, seq: 5, rank: 1, host: "node-b".into(), gpu: Some("3".into()), why: HangWhy::NotFinished, waiting_s: 12.0, peers_done: vec![0], peers_waiting: vec![], rails: vec![] }
}

fn job() -> WatchView {
    let mut view = WatchView::new();
    let lines = vec![
        rank("node-a", "0", 0, 4100),
        rank("node-b", "3", 1, 4200),
        coll(Func::AllReduce, 1 << 30, 6, 20_000.0, 1.0),
        coll(Func::AllGather, 128 << 20, 4, 4_000.0, 0.5),
        coll(Func::AlltoAll, 64 << 20, 4, 2_000.0, 0.5),
        WatchLine::Peer { comm: COMM.into(), host: "node-a".into(), rank: 0, peer: 1, sent: 6_912_212_992, received: 6_912_212_992, steps: 112 },
        WatchLine::Peer { comm: COMM.into(), host: "node-b".into(), rank: 1, peer: 0, sent: 5_838_471_168, received: 6_912_212_992, steps: 96 },
        nics("node-a", NicVerdict::Fallback, 6_912_212_992, 0, &[]),
        nics("node-b", NicVerdict::BehindRail, 6_912_212_992, 7_000_000_000, &[5]),
        hang(),
        WatchLine::Health { plugins: 2, refused: 1, dropped: 0, unsent: 0 },
    ];
    for line in lines {
        view.push(line);
    }
    view
}

fn screen(view: &WatchView, width: u16, height: u16) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
    terminal.draw(|frame| draw(frame, view)).expect("draw");
    terminal
}

fn text(terminal: &Terminal<TestBackend>) -> String {
    let buffer = terminal.backend().buffer();
    let width = buffer.area.width as usize;
    buffer.content.chunks(width).map(|row| row.iter().map(|c| c.symbol()).collect::<String>().trim_end().to_string() + "\n").collect()
}

fn row_of(terminal: &Terminal<TestBackend>, needle: &str) -> u16 {
    text(terminal).lines().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("no row with {needle:?} in\n{}", text(terminal))) as u16
}

#[test]
fn a_job_with_a_fallback_a_lagging_nic_and_a_hang() {
    let view = job();
    let terminal = screen(&view, 120, 32);
    assert_snapshot!("watch_job_120x32", text(&terminal));
    // What text cannot carry: the hang and the fallback are red, the lagging NIC yellow.
    let buffer = terminal.backend().buffer();
    let hang_row = row_of(&terminal, "HANG rank 1 on node-b GPU 3 has not finished allreduce #5");
    assert_eq!(buffer[(3, hang_row)].fg, Color::Red);
    let fallback = row_of(&terminal, "FALLBACK");
    let x = text(&terminal).lines().nth(fallback as usize).and_then(|l| l.find("FALLBACK")).expect("column") as u16;
    assert_eq!(buffer[(x, fallback)].fg, Color::Red);
    let behind = row_of(&terminal, "NIC BEHIND");
    assert!(fallback < behind, "fallback before a lagging NIC");
    // The rank the locator names is listed first among the ranks, marked.
    assert!(text(&terminal).contains("node-b           3                1/2 e0ddba11  2.28.3 v5 BEHIND (hang locator)"));
}

#[test]
fn a_small_terminal_keeps_the_header_and_the_hang_and_scrolls_the_rest() {
    let mut view = job();
    let terminal = screen(&view, 80, 12);
    assert_snapshot!("watch_job_80x12", text(&terminal));
    for _ in 0..15 {
        assert_eq!(view.handle_key(Key::Down), Action::None);
    }
    let terminal = screen(&view, 80, 12);
    let shown = text(&terminal);
    assert!(shown.contains("HANG rank 1"), "the hang line stays: {shown}");
    assert!(shown.contains("COLLECTIVE") || shown.contains("AllGather"), "scrolled to the collectives: {shown}");
    assert!(!shown.contains("FALLBACK"), "the hosts scrolled away: {shown}");
    view.handle_key(Key::Char('g'));
    assert!(text(&screen(&view, 80, 12)).contains("FALLBACK"));
    assert_eq!(view.handle_key(Key::Char('q')), Action::Quit);
}

#[test]
fn the_hang_clears_when_the_call_finishes_and_a_rank_that_left_is_shown() {
    let mut view = job();
    view.push(WatchLine::HangOver { comm: COMM.into(), func: Func::AllReduce, seq: 5 });
    view.push(WatchLine::Gone { host: "node-a".into(), pid: 4100, bye: true });
    view.push(WatchLine::Gone { host: "node-b".into(), pid: 4200, bye: false });
    let text = plain_text(&view);
    assert!(text.contains("hang locator: no rank is behind its peers"), "{text}");
    assert!(!text.contains("HANG"), "{text}");
    assert!(text.contains("0/2 e0ddba11  2.28.3 v5 finished"), "{text}");
    assert!(text.contains("1/2 e0ddba11  2.28.3 v5 left without finalizing"), "{text}");
}

#[test]
fn a_frame_drawn_after_a_line_shows_it_and_frames_between_lines_are_the_same() {
    // The view keeps what it made of its state between lines (a frame redrawn between two ticks walks no
    // rank): a line that comes in must show in the next frame all the same.
    let mut view = job();
    let mut terminal = Terminal::new(TestBackend::new(120, 30)).expect("terminal");
    terminal.draw(|frame| draw(frame, &view)).expect("draw");
    let before = text(&terminal);
    assert!(before.contains("HANG"), "{before}");
    terminal.draw(|frame| draw(frame, &view)).expect("draw");
    assert_eq!(text(&terminal), before, "a frame with no line between is the same");
    view.push(WatchLine::HangOver { comm: COMM.into(), func: Func::AllReduce, seq: 5 });
    terminal.draw(|frame| draw(frame, &view)).expect("draw");
    let after = text(&terminal);
    assert!(after.contains("hang locator: no rank is behind its peers") && !after.contains("HANG"), "{after}");
    // A clone starts with nothing kept, and draws the same.
    let copy = view.clone();
    assert_eq!(copy, view);
    assert_eq!(text(&screen(&copy, 120, 30)), after);
}

#[test]
fn a_fleet_shows_its_one_bad_host_first() {
    let mut view = WatchView::new();
    for h in 0..256u32 {
        let host = format!("p5-{h:03}");
        for g in 0..8u32 {
            view.push(WatchLine::Rank { host: host.clone(), pid: 1000 + g, gpu: Some(g.to_string()), comm: COMM.into(), comm_name: None, rank: h * 8 + g, nranks: 2048, nnodes: 256, nccl_version: Some("2.28.3".into()), abi: 5 });
        }
        let verdict = if h == 173 { NicVerdict::Fallback } else { NicVerdict::Ok };
        let carried = if h == 173 { 0 } else { 40_000_000_000 };
        view.push(nics(&host, verdict, 40_000_000_000, carried, &[]));
    }
    view.push(coll(Func::AllReduce, 1 << 30, 100, 9_000.0, 2.0 * 2047.0 / 2048.0));
    let terminal = screen(&view, 120, 30);
    let shown = text(&terminal);
    assert!(shown.contains("2048 ranks on 256 hosts"), "{shown}");
    let first_host = shown.lines().skip_while(|l| !l.contains("NCCL moved")).nth(1).expect("a host row");
    assert!(first_host.starts_with(" p5-173") && first_host.contains("FALLBACK"), "{shown}");
}

/// The header's counts and the ranks' "live" figure are kept as lines come, not walked from every rank at each
/// frame: ranks joining on hosts and in communicators, a process leaving (its ranks gone), one of its ranks
/// rejoining (live again), and a rank's line told twice (counted once).
#[test]
fn the_counts_follow_joins_leavings_and_rejoins() {
    let mut view = WatchView::new();
    let join = |host: &str, pid: u32, comm: &str, rank: u32| WatchLine::Rank {
        host: host.into(),
        pid,
        gpu: Some("0".into()),
        comm: comm.into(),
        comm_name: None,
        rank,
        nranks: 100,
        nnodes: 10,
        nccl_version: Some("2.28.9".into()),
        abi: 5,
    };
    // 100 ranks of COMM on 10 hosts (a process each), and their hosts' first ten in a second communicator.
    for rank in 0..100 {
        view.push(join(&format!("h{:02}", rank / 10), 1000 + rank / 10, COMM, rank));
    }
    for rank in 0..10 {
        view.push(join(&format!("h{:02}", rank), 1000 + rank, "0000000000000bee", rank));
    }
    // Told again: no new rank.
    view.push(join("h00", 1000, COMM, 0));
    let header = |view: &WatchView| text(&screen(view, 160, 200)).lines().next().unwrap_or_default().to_string();
    assert!(header(&view).contains("110 ranks on 10 hosts · 2 communicators"), "{}", header(&view));
    let more = |view: &WatchView| text(&screen(view, 160, 200)).lines().find(|l| l.contains("more ranks")).unwrap_or_default().to_string();
    assert!(more(&view).contains("46 more ranks (110 of all 110 live)"), "{}", more(&view));
    // Host h03's process leaves: its 11 ranks (10 of COMM, 1 of the other) are gone; told twice, counted once.
    view.push(WatchLine::Gone { host: "h03".into(), pid: 1003, bye: true });
    view.push(WatchLine::Gone { host: "h03".into(), pid: 1003, bye: true });
    assert!(more(&view).contains("(99 of all 110 live)"), "{}", more(&view));
    // One of them rejoins.
    view.push(join("h03", 1003, COMM, 30));
    assert!(more(&view).contains("(100 of all 110 live)"), "{}", more(&view));
    assert!(header(&view).contains("110 ranks on 10 hosts · 2 communicators"), "{}", header(&view));
}
