//! Rank 0's endings, driven in-process: the loop reads a channel of scripted inputs (the experiment's
//! events and its end, telemetry batches, a signal) as a run's threads would send them; a recording
//! consumer stands in for the dashboard (and plays the user's `q`); the watchdog judges by the real clock
//! with short timeouts. What only processes show (a rank's process killed, the launcher's signals) stays in
//! the multi-process tests (tests/endings.rs).

use std::sync::Mutex;
use std::sync::mpsc;
use std::time::Duration;

use efatop_proto::column::{Column, Layout, Memory};
use efatop_proto::events::RunInfo;
use efatop_proto::liveness::Liveness;
use efatop_proto::telemetry::{Phase, PhaseReport, RankSample};

use super::*;

const HOSTS: [&str; 2] = ["a", "b"];

/// What the consumer was told and how the run was finished for it.
#[derive(Default)]
struct Told {
    events: Vec<ConsumerEvent>,
    /// The final results' status and whether the consumer had quit, once [`Show::finish`] was called.
    finished: Option<(RunStatus, bool)>,
}

/// The stand-in for the dashboard: keeps every event; with `quit_on_step`, the user presses `q` at the
/// first step (the stop flag the experiment polls is raised, the consumer ends as quit).
struct Recorder {
    told: Arc<Mutex<Told>>,
    quit_on_step: bool,
}

impl Show for Recorder {
    fn start(&mut self, run: ShowStart<'_>) -> Option<Consumer> {
        let (events, received) = mpsc::channel::<ConsumerEvent>();
        let (told, quit_on_step, stop) = (self.told.clone(), self.quit_on_step, run.stop);
        let handle = std::thread::spawn(move || {
            let mut outcome = ConsumerOutcome::Done;
            for event in received {
                if quit_on_step && matches!(event, ConsumerEvent::Step { .. }) {
                    stop.store(true, Ordering::Relaxed);
                    outcome = ConsumerOutcome::Quit;
                }
                told.lock().expect("told").events.push(event);
            }
            outcome
        });
        Some((events, handle))
    }

    fn wants_liveness(&self) -> bool {
        true
    }

    fn finish(&mut self, results: &RunResults, _sizes: &[u64], file: &Path, outcome: Option<ConsumerOutcome>) {
        assert!(file.exists(), "the results file is saved before the consumer is finished");
        let status = results.status.clone().expect("a status");
        self.told.lock().expect("told").finished = Some((status, matches!(outcome, Some(ConsumerOutcome::Quit))));
    }
}

/// A run of two ranks on hosts a and b, its results file in a scratch folder.
struct Run {
    setup: Setup,
    told: Arc<Mutex<Told>>,
    inputs: Sender<Input>,
    heard: Receiver<Input>,
    /// What the collector heard before the loop began.
    early: Vec<Vec<CollectorEvent>>,
    _released: Receiver<()>,
    _dir: tempfile::TempDir,
}

impl Run {
    fn new(hang_timeout: Duration, quit_on_step: bool) -> Self {
        let dir = tempfile::tempdir().expect("a scratch folder");
        let mut results = RunResults::default();
        results.metadata.ranks = HOSTS.len();
        let file = ResultsFile::create(&dir.path().join("results.json"), false, &results).expect("the results file");
        let interval = Duration::from_millis(50);
        let liveness = Liveness::new(HOSTS.len(), interval, hang_timeout);
        let hosts: Vec<String> = HOSTS.iter().map(|h| (*h).to_string()).collect();
        let start = RunStart {
            info: RunInfo { ranks: HOSTS.len(), hosts: hosts.clone(), ..RunInfo::default() },
            results: results.clone(),
            ..RunStart::default()
        };
        let told = Arc::new(Mutex::new(Told::default()));
        let (release, released) = mpsc::channel();
        let (inputs, heard) = mpsc::channel();
        let setup = Setup {
            show: Box::new(Recorder { told: told.clone(), quit_on_step }),
            results,
            file,
            sizes: vec![4096],
            start,
            started: Instant::now(),
            stop: Arc::new(AtomicBool::new(false)),
            abort: Arc::new(Abort::default()),
            watchdog: Some(Watchdog::new(liveness.clone(), hosts)),
            liveness,
            interval,
            outlets: None,
            metrics: None,
            pushgateway: None,
            collector: None,
            release,
        };
        Self { setup, told, inputs, heard, early: Vec::new(), _released: released, _dir: dir }
    }

    /// Rank 0's experiment on a thread of its own, as the rank's thread runs it: `play` gets its observer
    /// and the run's abort, and returns the experiment's outcome.
    fn experiment(&self, play: impl FnOnce(&mut Forward, &Abort) -> Option<Result<(), ExperimentError>> + Send + 'static) {
        let mut forward = Forward { inputs: self.inputs.clone(), stop: self.setup.stop.clone() };
        let abort = self.setup.abort.clone();
        std::thread::spawn(move || {
            if let Some(outcome) = play(&mut forward, &abort) {
                let _ = forward.inputs.send(Input::Ended(outcome));
            }
        });
    }

    fn send(&self, input: Input) {
        self.inputs.send(input).expect("the loop's channel");
    }

    /// Runs the loop to its ending; what the consumer was told, and the results file as saved.
    fn end(self) -> (Ending, Told, RunResults) {
        let path = self.setup.file.path.clone();
        let ending = run(self.setup, &self.heard, self.early);
        let told = std::mem::take(&mut *self.told.lock().expect("told"));
        let saved = serde_json::from_slice(&std::fs::read(&path).expect("the results file")).expect("results");
        (ending, told, saved)
    }
}

fn sample(rank: u32) -> CollectorEvent {
    CollectorEvent::Sample(Box::new(RankSample { rank, ..RankSample::default() }))
}

fn closed(rank: u32) -> CollectorEvent {
    CollectorEvent::Closed { from: "127.0.0.1:1".parse().expect("address"), rank: Some(rank) }
}

/// The first step of every scripted experiment.
fn begin(forward: &mut Forward) {
    let step = Column::write(Layout::Single, Memory::Host);
    forward.begin(std::slice::from_ref(&step), "host");
    forward.step(&step, 4096);
}

/// Waits (at most 10 s) for the run's abort, as an experiment's wait on the fabric gives up when it is
/// raised, and returns what such a wait returns.
fn abandoned_wait(abort: &Abort) -> Result<(), ExperimentError> {
    let until = Instant::now() + Duration::from_secs(10);
    while !abort.is_raised() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    Err(ExperimentError::Fabric(efatop_fabric::FabricError::Abandoned("the run has failed; nothing more is posted".into())))
}

/// The error the consumer was told the run finished with (`None`: it finished well).
fn finished_error(told: &Told) -> Option<String> {
    told.events
        .iter()
        .rev()
        .find_map(|e| match e {
            ConsumerEvent::Finished { error } => Some(error.clone()),
            _ => None,
        })
        .expect("the consumer was told the run finished")
}

#[test]
fn a_run_that_completes_ends_complete_with_its_exit_code_0() {
    let run = Run::new(Duration::from_mins(1), false);
    run.send(Input::Telemetry(vec![sample(0), sample(1)]));
    run.experiment(|forward, _| {
        begin(forward);
        forward.note("a note");
        Some(Ok(()))
    });
    // Each rank closes its telemetry after its last sample: the drain ends at once.
    let inputs = run.inputs.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        let _ = inputs.send(Input::Telemetry(vec![closed(0), closed(1)]));
    });
    let (ending, told, saved) = run.end();
    assert_eq!(ending.code.expect("no error"), 0);
    assert!(!ending.abandoned);
    assert_eq!(saved.status.as_ref().map(|s| s.state), Some(RunState::Complete));
    assert_eq!(saved.configs.len(), 1, "the experiment's columns are kept");
    assert_eq!(finished_error(&told), None, "the consumer is told the run finished well");
    assert!(told.events.iter().any(|e| matches!(e, ConsumerEvent::Note(n) if n == "a note")));
    assert!(told.events.iter().any(|e| matches!(e, ConsumerEvent::Telemetry(_))), "telemetry reaches the consumer");
    let (status, quit) = told.finished.expect("finished");
    assert_eq!((status.state, quit), (RunState::Complete, false));
}

#[test]
fn q_stops_the_experiment_and_the_run_ends_complete_with_what_it_measured() {
    let run = Run::new(Duration::from_mins(1), true);
    run.experiment(|forward, _| {
        begin(forward);
        // The experiment polls the stop flag between steps, as every experiment does.
        let until = Instant::now() + Duration::from_secs(10);
        while !forward.stop_requested() {
            if Instant::now() > until {
                return Some(Err(ExperimentError::Bootstrap("q never reached the experiment".into())));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Some(Ok(()))
    });
    let (ending, told, saved) = run.end();
    assert_eq!(ending.code.expect("a quit run ends well"), 0);
    assert!(!ending.abandoned);
    assert_eq!(saved.status.as_ref().map(|s| s.state), Some(RunState::Complete));
    let (status, quit) = told.finished.expect("finished");
    assert_eq!(status.state, RunState::Complete);
    assert!(quit, "the consumer ended as quit");
}

#[test]
fn a_rank_killed_mid_run_ends_the_run_naming_the_rank_and_its_host() {
    let run = Run::new(Duration::from_mins(1), false);
    run.send(Input::Telemetry(vec![sample(0), sample(1)]));
    run.experiment(|forward, abort| {
        begin(forward);
        Some(abandoned_wait(abort))
    });
    run.send(Input::Telemetry(vec![closed(1)]));
    let (ending, told, saved) = run.end();
    let error = ending.code.expect_err("the run failed").to_string();
    assert!(error.contains("rank 1 (b) exited mid-run: its telemetry connection closed"), "{error}");
    assert!(!ending.abandoned, "rank 0's thread returned");
    let status = saved.status.expect("a status");
    assert_eq!(status.state, RunState::Failed);
    assert!(status.reason.as_deref().is_some_and(|r| r.contains("rank 1 (b) exited mid-run")), "{status:?}");
    assert_eq!(finished_error(&told), Some(error), "the consumer is told the same reason");
}

/// One death ends the other ranks too (their rendezvous closed), and rank 0 may read their connections
/// closing before the dead rank's: a rank that said it was leaving is not named for it, and rank 0's own
/// lost rendezvous, which names the rank that left it, is the run's reason.
#[test]
fn a_rank_that_said_it_was_leaving_is_not_named_for_a_death_elsewhere() {
    let run = Run::new(Duration::from_mins(1), false);
    run.send(Input::Telemetry(vec![sample(0), sample(1)]));
    let leaving = PhaseReport { rank: 1, changes: 4, phase: Phase::Leaving.code(), bytes: 0 };
    run.send(Input::Telemetry(vec![CollectorEvent::Phase(leaving), closed(1)]));
    run.experiment(|forward, _| {
        begin(forward);
        std::thread::sleep(Duration::from_millis(100));
        Some(Err(ExperimentError::Bootstrap("lost the launcher's rendezvous: rank 7 (h) left it mid-run (it failed or was killed)".into())))
    });
    let (ending, told, saved) = run.end();
    let error = ending.code.expect_err("the run failed").to_string();
    assert!(error.contains("rank 7 (h) left it mid-run"), "rank 0's own word is the reason: {error}");
    assert!(!error.contains("rank 1 (b)"), "{error}");
    let status = saved.status.expect("a status");
    assert_eq!(status.state, RunState::Failed);
    assert_eq!(finished_error(&told), Some(error));
}

#[test]
fn a_hung_rank_is_named_and_a_stuck_rank_0_is_left_behind() {
    let run = Run::new(Duration::from_millis(400), false);
    run.send(Input::Telemetry(vec![sample(0), sample(1)]));
    // Rank 1 falls silent; rank 0's own sampler keeps speaking (so the silence is rank 1's, not the
    // collector's). Rank 0's experiment is stuck where the abort cannot reach it: it never returns.
    let inputs = run.inputs.clone();
    std::thread::spawn(move || {
        for _ in 0..400 {
            std::thread::sleep(Duration::from_millis(25));
            if inputs.send(Input::Telemetry(vec![sample(0)])).is_err() {
                return;
            }
        }
    });
    run.experiment(|forward, _| {
        begin(forward);
        None
    });
    let started = Instant::now();
    let (ending, told, saved) = run.end();
    let error = ending.code.expect_err("the run failed").to_string();
    assert!(error.contains("rank 1 (b) stopped responding: no telemetry for "), "{error}");
    assert!(ending.abandoned, "rank 0's stuck thread is left behind");
    assert!(started.elapsed() >= Duration::from_millis(400) + EXIT_GRACE, "named before the hang timeout and the grace");
    // The consumer hears the clock as an event, not through a lock: its last copy shows rank 1 hung.
    let clock = told.events.iter().rev().find_map(|e| match e {
        ConsumerEvent::Liveness(clock) => Some(clock),
        _ => None,
    });
    let clock = clock.expect("the consumer is told the liveness clock");
    assert!(crate::watchdog::hung(&clock, Duration::MAX).is_some_and(|(rank, _)| rank == 1), "{clock:?}");
    assert!(clock.silence(0, Duration::MAX).is_some_and(|silent| silent <= clock.slow_after), "{clock:?}");
    assert_eq!(saved.status.map(|s| s.state), Some(RunState::Failed));
    assert_eq!(finished_error(&told), Some(error));
}

#[test]
fn a_signal_ends_the_run_with_its_reason_and_the_signals_exit_code() {
    for stop in [Stop::Terminate, Stop::Interrupt] {
        let run = Run::new(Duration::from_mins(1), false);
        run.send(Input::Telemetry(vec![sample(0), sample(1)]));
        run.experiment(|forward, abort| {
            begin(forward);
            Some(abandoned_wait(abort))
        });
        run.send(Input::Terminated(stop));
        let (ending, told, saved) = run.end();
        let Err(ExperimentError::Fabric(efatop_fabric::FabricError::Abandoned(reason))) = &ending.code else {
            panic!("a stopped run ends abandoned with the signal's reason: {:?}", ending.code.map_err(|e| e.to_string()));
        };
        assert_eq!(Stop::from_reason(reason), Some(stop), "{reason}");
        assert_eq!(Stop::from_reason(reason).map(Stop::exit_code), Some(if stop == Stop::Terminate { 143 } else { 130 }));
        assert!(!ending.abandoned);
        let status = saved.status.expect("a status");
        assert_eq!((status.state, status.reason.as_deref()), (RunState::Failed, Some(stop.reason())));
        assert_eq!(finished_error(&told), Some(stop.reason().to_string()));
    }
}

#[test]
fn rank_0s_thread_ending_without_a_word_ends_the_run() {
    let run = Run::new(Duration::from_mins(1), false);
    let Run { setup, told, inputs, heard, early, _released, _dir } = run;
    drop(inputs);
    let ending = super::run(setup, &heard, early);
    let error = ending.code.expect_err("the run failed").to_string();
    assert!(error.contains("rank 0's thread ended without a result"), "{error}");
    assert_eq!(told.lock().expect("told").finished.as_ref().map(|(s, _)| s.state), Some(RunState::Failed));
}

#[test]
fn what_the_collector_heard_before_the_loop_began_is_folded_first() {
    // Rank 1 connected (its hello) and closed before rank 0's loop began, without saying it was leaving:
    // named at once as a rank that exited, not later as one that never reached the collector.
    let mut run = Run::new(Duration::from_mins(1), false);
    let hello = CollectorEvent::Phase(PhaseReport { rank: 1, changes: 0, phase: 0, bytes: 0 });
    let closed = CollectorEvent::Closed { from: "127.0.0.1:1".parse().expect("address"), rank: Some(1) };
    run.early = vec![vec![sample(0), hello], vec![closed]];
    run.experiment(|forward, abort| {
        begin(forward);
        Some(abandoned_wait(abort))
    });
    let started = Instant::now();
    let (ending, _told, saved) = run.end();
    let error = ending.code.expect_err("the run failed").to_string();
    assert!(error.contains("rank 1 (b) exited mid-run: its telemetry connection closed"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(30), "named at once, not after a timeout");
    assert_eq!(saved.status.map(|s| s.state), Some(RunState::Failed));
}
