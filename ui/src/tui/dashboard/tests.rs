//! Scripted sessions: the dashboard on the TUI loop on `TestBackend`, driven by scripted samples, run
//! events, keys and times, asserted on the rendered screen. (tmux, in `tests/tmux.rs`, stays the
//! end-to-end test on a real terminal.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Duration;

use efatop_proto::events::{CollectorEvent, ConsumerEvent};
use efatop_proto::liveness::Liveness;
use efatop_proto::results::{LatencySummary, Measurement, RunResults};
use efatop_proto::telemetry::{ChannelSample, IntervalHistogram, RankSample};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

use super::Dashboard;
use crate::app::{App, Ended};
use crate::ingest::Ingest;
use efatop_proto::events::RunInfo;
use crate::state::{DashboardState, Key};
use crate::tui::{self, KeyPoll};

const INTERVAL: Duration = Duration::from_millis(100);
const HANG_TIMEOUT: Duration = Duration::from_secs(3);

/// A two-rank `write` run on one host, as rank 0's session starts it, with its channel and clock.
struct Session {
    terminal: Terminal<TestBackend>,
    app: App,
    events: Receiver<ConsumerEvent>,
    send: Option<Sender<ConsumerEvent>>,
    /// The watchdog's part: it keeps the liveness clock, and tells the dashboard a copy after each batch
    /// (as rank 0's loop does, [`ConsumerEvent::Liveness`]).
    liveness: std::cell::RefCell<Liveness>,
    stop: AtomicBool,
}

fn single_pin() -> efatop_proto::Column {
    efatop_proto::Column::write(efatop_proto::column::Layout::Single, efatop_proto::column::Memory::Host)
}

fn run_info() -> RunInfo {
    RunInfo {
        experiment: efatop_proto::Experiment::Write,
        provider_stack: "shm".into(),
        ranks: 2,
        hosts: vec!["hosta".into(), "hosta".into()],
        channels: 1,
        link_gbps: Some(100.0),
        memory: "host".into(),
        configs: vec![single_pin()],
        sizes: vec![4096, 8192],
        placements: Vec::new(),
    }
}

impl Session {
    fn start() -> Self {
        let results = RunResults { configs: vec![single_pin()], ..RunResults::default() };
        Self::of(run_info(), &[vec!["shm0".to_string()], vec!["shm1".to_string()]], results)
    }

    /// The session of a run as rank 0 starts it: `info`'s ranks, each with its `nics`.
    fn of(info: RunInfo, nics: &[Vec<String>], results: RunResults) -> Self {
        let mut state = DashboardState::default();
        let ranks = info.ranks;
        let ingest = Ingest::begin(&mut state, info, nics, results);
        let liveness = Liveness::new(ranks, INTERVAL, HANG_TIMEOUT);
        let (send, events) = mpsc::channel();
        Self {
            terminal: Terminal::new(TestBackend::new(120, 40)).expect("terminal"),
            app: App::new(state, ingest, liveness.clone()),
            events,
            send: Some(send),
            liveness: std::cell::RefCell::new(liveness),
            stop: AtomicBool::new(false),
        }
    }

    fn send(&self, event: ConsumerEvent) {
        self.send.as_ref().expect("the run is going on").send(event).expect("the session listens");
    }

    /// Rank `rank` says it moved `gbps` over its channel in the last interval, heard at `at`.
    fn sample(&self, rank: u32, seq: u64, gbps: f64, at: Duration) {
        let interval_ns = INTERVAL.as_nanos() as u64;
        let bytes = (gbps * 1e9 / 8.0 * INTERVAL.as_secs_f64()) as u64;
        let latency = IntervalHistogram { buckets: vec![(12, 40)].into() };
        let channel = ChannelSample { channel: 0, bytes, ops: 40, in_flight: 4, latency };
        let sample = RankSample { rank, seq, interval_ns, channels: vec![channel], ..RankSample::default() };
        self.liveness.borrow_mut().heard(rank as usize, at);
        self.send(ConsumerEvent::Telemetry(vec![CollectorEvent::Sample(Box::new(sample))]));
        self.tell_liveness();
    }

    /// The watchdog's clock to the dashboard, as an event on the run's channel.
    fn tell_liveness(&self) {
        self.send(ConsumerEvent::Liveness(Box::new(self.liveness.borrow().clone())));
    }

    fn frame(&mut self, at: Duration) -> Option<Ended> {
        let mut dashboard = Dashboard { app: &mut self.app, stop: &self.stop };
        tui::frame(&mut self.terminal, &mut dashboard, &mut &self.events, at).expect("drawn")
    }

    fn key(&mut self, key: Key, at: Duration) -> Option<Ended> {
        let effects = self.app.update(crate::app::Event::Key(key), at);
        super::perform(&effects, &self.stop)
    }

    fn screen(&self) -> String {
        crate::screen::screen(&self.terminal)
    }
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn measurement(size: u64, gbps: f64) -> Measurement {
    let latency = LatencySummary { mean_us: 3.0, p50_us: 2.5, p99_us: 7.5, max_us: 9.0 };
    Measurement { busbw_percent: Some(gbps), registration: Some("host".into()), ..Measurement::plain(single_pin(), size, gbps, latency, 10) }
}

/// The screen row that holds `needle`.
fn row<'a>(screen: &'a str, needle: &str) -> &'a str {
    screen.lines().find(|line| line.contains(needle)).unwrap_or_else(|| panic!("`{needle}` not on screen:\n{screen}"))
}

/// Both ranks speak every interval from `from` (in intervals) for `count` intervals, a frame each.
fn speak(session: &mut Session, ranks: &[u32], from: u64, count: u64, gbps: f64) {
    for seq in from..from + count {
        for rank in ranks {
            session.sample(*rank, seq, gbps, ms(seq * 100));
        }
        assert_eq!(session.frame(ms(seq * 100)), None);
    }
}

#[test]
fn a_runs_samples_fill_the_gauges() {
    let mut session = Session::start();
    session.send(ConsumerEvent::Step { config: single_pin(), size: 4096 });
    session.frame(ms(0));
    let before = session.screen();
    assert!(row(&before, "r1 c0 shm1").contains("0.0 Gbps"), "{before}");
    assert!(row(&before, "SinglePin 4K").contains("0/2"), "{before}");
    speak(&mut session, &[0, 1], 0, 10, 40.0);
    let screen = session.screen();
    for gauge in ["r0 c0 shm0", "r1 c0 shm1"] {
        let line = row(&screen, gauge);
        assert!(line.contains("40.0 Gbps") && line.contains("400 op/s") && line.contains("4 in flight"), "{line}");
        // 40 of 100 Gbps: a bar, partly filled.
        assert!(line.contains("━━━━━━━━━━") && line.contains("──────────"), "{line}");
    }
    assert!(screen.contains("history: 10 samples"), "{screen}");
    assert!(row(&screen, "alive").contains("40.0"), "{screen}");
}

#[test]
fn a_rank_going_silent_is_shown_slow_then_lost() {
    let mut session = Session::start();
    speak(&mut session, &[0, 1], 0, 10, 40.0);
    assert!(row(&session.screen(), "     1  hosta").contains("alive"));
    // From 1 s on only rank 0 speaks; rank 1's last word was at 0.9 s.
    speak(&mut session, &[0], 10, 20, 40.0);
    assert!(row(&session.screen(), "     1  hosta").contains("alive"), "silent 2 s is not yet slow");
    speak(&mut session, &[0], 30, 6, 40.0);
    let screen = session.screen();
    assert!(row(&screen, "     1  hosta").contains("slow"), "{screen}");
    assert!(row(&screen, "rank 1 (hosta) slow: silent for").contains("info"), "{screen}");
    // Past --hang-timeout (3 s): lost, and said once in red.
    speak(&mut session, &[0], 36, 10, 40.0);
    let screen = session.screen();
    assert!(row(&screen, "     1  hosta").contains("LOST"), "{screen}");
    assert!(row(&screen, "rank 1 (hosta) hung: silent for").contains("ERROR"), "{screen}");
    assert!(row(&screen, "    0  hosta").contains("alive"), "{screen}");
    assert_eq!(screen.matches("hung: silent for").count(), 1, "{screen}");
}

#[test]
fn freezing_keeps_the_data_still_while_the_run_goes_on() {
    let mut session = Session::start();
    speak(&mut session, &[0, 1], 0, 10, 40.0);
    assert_eq!(session.key(Key::Char('p'), ms(1000)), None);
    speak(&mut session, &[0, 1], 10, 10, 90.0);
    let frozen = session.screen();
    assert!(row(&frozen, "SinglePin").contains("FROZEN") || frozen.contains("FROZEN"), "{frozen}");
    assert!(row(&frozen, "r0 c0 shm0").contains("40.0 Gbps"), "the data moved while frozen:\n{frozen}");
    assert!(frozen.contains("history: 10 samples"), "{frozen}");
    // Keys still act on what is drawn: the selection moves over the frozen data.
    session.key(Key::Down, ms(2000));
    session.frame(ms(2000));
    let moved = session.screen();
    assert!(row(&moved, "r1 c0 shm1").contains('▶'), "{moved}");
    assert!(row(&moved, "r1 c0 shm1").contains("40.0 Gbps"), "{moved}");
    // Unfrozen: the live data, which went on meanwhile, with the selection kept.
    session.key(Key::Char('p'), ms(2000));
    session.frame(ms(2000));
    let live = session.screen();
    assert!(!live.contains("FROZEN"), "{live}");
    assert!(row(&live, "r1 c0 shm1").contains("90.0 Gbps") && row(&live, "r1 c0 shm1").contains('▶'), "{live}");
    assert!(live.contains("history: 20 samples"), "{live}");
}

#[test]
fn the_final_tables_fill_in_when_the_run_ends_and_any_key_leaves() {
    let mut session = Session::start();
    session.send(ConsumerEvent::Step { config: single_pin(), size: 4096 });
    speak(&mut session, &[0, 1], 0, 5, 40.0);
    session.send(ConsumerEvent::Measured(Box::new(measurement(4096, 38.5))));
    session.frame(ms(600));
    let half = session.screen();
    assert!(row(&half, "   4K   1024").contains("38.50"), "{half}");
    assert!(row(&half, "   8K   2048").contains('-'), "{half}");
    assert!(row(&half, "1/2").contains("50%"), "{half}");
    session.send(ConsumerEvent::Measured(Box::new(measurement(8192, 39.5))));
    session.send(ConsumerEvent::Finished { error: None });
    session.send = None;
    assert_eq!(session.frame(ms(700)), None);
    let done = session.screen();
    assert!(row(&done, "   8K   2048").contains("39.50") && row(&done, "   8K   2048").contains("7.50"), "{done}");
    assert!(row(&done, "finished").contains("2/2 100%"), "{done}");
    assert!(done.contains("run complete: press any key"), "{done}");
    assert!(done.contains("SinglePin 8K: 39.50 Gbps, data verified"), "{done}");
    assert!(!session.stop.load(Ordering::Relaxed));
    assert_eq!(session.key(Key::Char('x'), ms(800)), Some(Ended::Dismissed));
}

#[test]
fn q_stops_the_run_and_the_dashboard_leaves_once_it_has_stopped() {
    let mut session = Session::start();
    session.send(ConsumerEvent::Step { config: single_pin(), size: 4096 });
    speak(&mut session, &[0, 1], 0, 3, 40.0);
    // The session loop itself, with scripted keys: `q`, then nothing while the ranks finish their round;
    // the run then ends (the experiment returns `Stopped`) and the channel closes.
    let send = session.send.take().expect("sender");
    let mut script = vec![KeyPoll::Key(Key::Char('q')), KeyPoll::Nothing, KeyPoll::Key(Key::Char('q')), KeyPoll::Nothing].into_iter();
    let mut tick = 300;
    let mut calls = 0;
    let stop = &session.stop;
    let mut after_q = Vec::new();
    let ended = tui::run(
        &mut session.terminal,
        &mut Dashboard { app: &mut session.app, stop },
        &mut &session.events,
        || {
            tick += 50;
            ms(tick)
        },
        |_wait| {
            calls += 1;
            after_q.push(stop.load(Ordering::Relaxed));
            if let Some(key) = script.next() {
                Ok(key)
            } else {
                // Every rank has stopped: rank 0's experiment ends with `Stopped` (exit code 130).
                let _ = send.send(ConsumerEvent::Finished { error: Some("stopped: q pressed".into()) });
                Ok(KeyPoll::Nothing)
            }
        },
    )
    .expect("session");
    assert_eq!(ended, Ended::Quit);
    assert!(!after_q[0], "nothing stopped before q");
    assert!(after_q[1..].iter().all(|s| *s), "q raised the stop: {after_q:?}");
    assert!(calls > 4);
    assert!(session.stop.load(Ordering::Relaxed));
    let screen = session.screen();
    assert_eq!(screen.matches("stopping: every rank ends after the round in progress").count(), 1, "{screen}");
}

/// A 4-rank sweep over 2 rails, as rank 0's session starts it.
fn sweep_session() -> Session {
    use efatop_proto::sweep::{NicFacts, NodeFacts, SweepResults};
    let info = RunInfo {
        experiment: efatop_proto::Experiment::Sweep,
        provider_stack: "tcp".into(),
        ranks: 4,
        hosts: (0..4).map(|n| format!("node{n}")).collect(),
        channels: 2,
        link_gbps: None,
        memory: "host".into(),
        configs: Vec::new(),
        sizes: vec![32 << 20],
        placements: Vec::new(),
    };
    let nics: Vec<Vec<String>> = (0..4).map(|_| vec!["efa0".to_string(), "efa1".to_string()]).collect();
    let session = Session::of(info, &nics, RunResults::default());
    let nodes = (0..4)
        .map(|rank| NodeFacts {
            rank,
            host: format!("node{rank}"),
            gpu: None,
            gpu_pci: None,
            nics: ["efa0", "efa1"].iter().map(|name| NicFacts { name: (*name).into(), pci: None }).collect(),
        })
        .collect();
    let setup = SweepResults { size: 32 << 20, threshold: 0.9, link_gbps: None, quick: false, nodes, ..SweepResults::default() };
    session.send(ConsumerEvent::SweepBegin(Box::new(setup)));
    session
}

/// Round `index` of the tournament: both ends of each pair write each other on both rails; rank 2's rail 1
/// runs at a quarter of the rest.
fn sweep_round(index: usize, pairs: &[(usize, usize)]) -> ConsumerEvent {
    sweep_round_of(index, efatop_proto::sweep::RoundKind::Pairing, pairs)
}

/// A round of `kind`: the cross-rail round pairs the smaller rank's rail k with the larger's rail k+1.
fn sweep_round_of(index: usize, kind: efatop_proto::sweep::RoundKind, pairs: &[(usize, usize)]) -> ConsumerEvent {
    use efatop_proto::sweep::{Figure, Round, RoundKind, SweepRound};
    let shift = usize::from(kind == RoundKind::CrossRail);
    let round = Round { index, kind, pairs: pairs.to_vec(), shift };
    let mut figures = Vec::new();
    for &(a, b) in pairs {
        for (from, to) in [(a, b), (b, a)] {
            for rail in 0..2 {
                let theirs = round.remote_rail(from, to, rail, 2);
                let slow = (rail == 1 && from == 2) || (theirs == 1 && to == 2);
                let gbps = if slow { 0.24 } else { 0.96 };
                let to_rail = (theirs != rail).then_some(theirs);
                figures.push(Figure { from, to, rail, to_rail, gbps, steady_gbps: gbps, p50_us: 280.0, p99_us: 300.0, ..Figure::default() });
            }
        }
    }
    ConsumerEvent::SweepRound(Box::new(SweepRound { round, planned: 4, figures }))
}

#[test]
fn a_sweeps_rounds_fill_the_heatmap_and_the_verdict_names_the_slow_nic() {
    use efatop_proto::sweep::{Checked, Scope, Suspect, Verdict};
    let mut session = sweep_session();
    session.send(sweep_round(0, &[(0, 3), (1, 2)]));
    assert_eq!(session.frame(ms(100)), None);
    let screen = session.screen();
    assert!(screen.contains("sweep round 1: 2 pairs"), "the log follows the rounds:\n{screen}");
    assert!(screen.contains("0.24"), "the heatmap shows rank 2's slow rail:\n{screen}");
    // Slow with its first peer only: not yet a suspect (that needs every peer tried so far).
    session.send(sweep_round(1, &[(0, 2), (1, 3)]));
    session.send(sweep_round(2, &[(0, 1), (2, 3)]));
    session.send(sweep_round_of(3, efatop_proto::sweep::RoundKind::CrossRail, &[(0, 3), (1, 2)]));
    assert_eq!(session.frame(ms(200)), None);
    let screen = session.screen();
    assert!(screen.contains("round 4 of 4 (cross-rail)"), "progress names the cross-rail round:\n{screen}");
    assert!(screen.contains("sweep round 4 (cross-rail"), "and so does the log:\n{screen}");
    assert_eq!(screen.matches("suspect: rank 2 (node2) efa1, slow with every peer so far").count(), 1, "logged once:\n{screen}");
    assert!(!screen.contains("suspect: rank 2 (node2) efa0"), "rank 2's healthy rail is no suspect:\n{screen}");
    let suspect = Suspect {
        rank: 2,
        host: "node2".into(),
        gpu: None,
        nic: Some("efa1".into()),
        pci: None,
        measured_gbps: 0.24,
        median_gbps: 0.96,
        peers_tried: vec![0, 1, 3],
        why: "below 90% of rail 1's median with every peer tried".into(),
        scope: Scope::Nic,
        rail: Some(1),
        peer: None,
        peer_nic: None,
        nics: Vec::new(),
    };
    session.send(ConsumerEvent::SweepVerdict(Box::new(Verdict { suspects: vec![suspect], checked: Checked { nodes: 4, nics: 8 } })));
    session.send(ConsumerEvent::Finished { error: None });
    assert_eq!(session.frame(ms(300)), None, "the final view stays until a key");
    let screen = session.screen();
    assert!(screen.contains("verdict: 1 suspect (4 nodes, 8 NICs checked)"), "{screen}");
    assert!(row(&screen, "NIC  rank 2 node2 efa1").contains("0.24 Gbps vs median 0.96, peers 0,1,3"), "{screen}");
    let heat = row(&screen, "2     node2");
    assert!(heat.contains("0.96") && heat.contains("0.24"), "rank 2's rails in the heatmap: {heat}");
    assert_eq!(session.key(Key::Char('x'), ms(400)), Some(Ended::Dismissed));
}

/// A fleet: 20 hosts of 2 ranks with 2 channels each (80 channels, more than a screen of gauges), every
/// NIC near 90 Gbps but host 13's second rank's second channel, at half that from `slow_from` on.
fn fleet_session() -> Session {
    let (hosts, ranks_per_host) = (20, 2);
    let ranks = hosts * ranks_per_host;
    let info = RunInfo {
        ranks,
        hosts: (0..ranks).map(|rank| format!("node-{:02}", rank / ranks_per_host)).collect(),
        channels: 2,
        ..run_info()
    };
    let nics: Vec<Vec<String>> = vec![vec!["efa0".to_string(), "efa1".to_string()]; ranks];
    let results = RunResults { configs: vec![single_pin()], ..RunResults::default() };
    let mut session = Session::of(info, &nics, results);
    session.terminal = Terminal::new(TestBackend::new(160, 50)).expect("terminal");
    session
}

/// Every rank of the fleet reports an interval at `at`; rank 27 (node-13's second) channel 1 at `slow`.
fn fleet_interval(session: &Session, seq: u64, slow: f64, at: Duration) {
    let interval_ns = INTERVAL.as_nanos() as u64;
    let bytes = |gbps: f64| (gbps * 1e9 / 8.0 * INTERVAL.as_secs_f64()) as u64;
    let batch = (0..40u32)
        .map(|rank| {
            let channels = (0..2u16)
                .map(|channel| {
                    let gbps = if rank == 27 && channel == 1 { slow } else { 90.0 + f64::from(rank % 3) };
                    ChannelSample { channel, bytes: bytes(gbps), ops: 40, in_flight: 4, latency: IntervalHistogram::default() }
                })
                .collect();
            session.liveness.borrow_mut().heard(rank as usize, at);
            CollectorEvent::Sample(Box::new(RankSample { rank, seq, interval_ns, channels, ..RankSample::default() }))
        })
        .collect();
    session.send(ConsumerEvent::Telemetry(batch));
    session.tell_liveness();
}

#[test]
fn a_fleet_is_drawn_as_the_fleet_view_on_the_tui_loop_and_keys_drill_into_a_host_and_back() {
    let mut session = fleet_session();
    for seq in 0..25 {
        let at = ms(100 * seq);
        fleet_interval(&session, seq, if seq >= 5 { 45.0 } else { 90.0 }, at);
        assert_eq!(session.frame(at), None);
    }
    let screen = session.screen();
    assert!(screen.contains("Fleet") && screen.contains("20 hosts"), "the fleet view in the gauges' place:\n{screen}");
    assert!(!screen.contains("Live channels"), "{screen}");
    let worst = row(&screen, "node-13 r27");
    assert!(worst.contains("rail 1") && worst.contains("BEHIND"), "the slow NIC heads the worst, flagged: {worst}");
    let hosts = screen.lines().position(|line| line.contains("Hosts, worst NIC first")).expect("the host list");
    assert!(screen.lines().nth(hosts + 1).is_some_and(|line| line.contains("▶ node-13")), "its host first, selected:\n{screen}");

    // Enter: the worst host's gauges, its slow NIC selected; the keys change the view, not the run.
    assert_eq!(session.key(Key::Enter, ms(2500)), None);
    fleet_interval(&session, 25, 45.0, ms(2500));
    assert_eq!(session.frame(ms(2500)), None);
    let screen = session.screen();
    assert!(screen.contains("Live channels of one host"), "{screen}");
    assert!(row(&screen, "r27 c1").contains('▶'), "{screen}");
    assert!(!screen.contains("r28 "), "only node-13's ranks:\n{screen}");
    // Esc goes back to the fleet (it does not quit the run); `/` and a name select a host.
    assert_eq!(session.key(Key::Esc, ms(2600)), None);
    assert!(!session.stop.load(Ordering::Relaxed), "Esc out of a host leaves the run going");
    for key in [Key::Char('/'), Key::Char('0'), Key::Char('4'), Key::Enter] {
        assert_eq!(session.key(key, ms(2700)), None);
    }
    assert_eq!(session.frame(ms(2700)), None);
    let screen = session.screen();
    assert!(screen.contains("Fleet"), "{screen}");
    assert!(screen.contains("▶ node-04"), "the host found by name is selected:\n{screen}");
}
