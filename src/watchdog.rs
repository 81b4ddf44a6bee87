//! Rank 0's watchdog: telemetry doubles as a heartbeat. A rank whose telemetry connection closes before the
//! run is over has died, and is named at once. A rank silent (no sample, no phase change) for longer than
//! `--hang-timeout` has hung or been stopped. Either way the watchdog raises the world's abort with the rank
//! and its host, so rank 0's hot path gives up its wait at once instead of after `--timeout`, reports the
//! rank, and keeps every size measured so far.
//!
//! Silence is read from rank 0's one liveness clock ([`Liveness`]), which the watchdog keeps and the
//! dashboard reads: a rank shown slow or silent there is the same rank, by the same clock, that may later
//! be named here.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use efatop_experiments::telemetry::Phase;
use efatop_experiments::world::Abort;
use efatop_ui::liveness::Liveness;

use crate::event::ConsumerEvent;
use crate::collector::CollectorEvent;

/// How often the watchdog looks at the clock when no telemetry arrives.
const TICK: Duration = Duration::from_millis(200);

/// How long rank 0 gets to end on its own once the abort is raised. Its hot path gives up at once when
/// it is waiting on the fabric; but a wait inside the bootstrap (an MPI collective, the local rendezvous)
/// cannot be interrupted, and then the watchdog ends the process itself: the results file already holds
/// every size finished, and the watchdog records why the run ended in it first.
const EXIT_GRACE: Duration = Duration::from_secs(1);

/// Rank 0's liveness clock, shared by the watchdog (which writes it) and the dashboard (which reads it).
/// Neither is the hot path.
#[derive(Clone)]
pub struct SharedLiveness(Arc<Mutex<Liveness>>);

impl SharedLiveness {
    pub fn new(liveness: Liveness) -> Self {
        Self(Arc::new(Mutex::new(liveness)))
    }

    pub fn lock(&self) -> MutexGuard<'_, Liveness> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pub struct Watchdog {
    /// Where the collector sends its batches.
    pub events: Sender<ConsumerEvent>,
    /// Set when rank 0's experiment has ended: ranks then close their telemetry as they finish.
    pub run_over: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

/// What the watchdog needs besides the events.
pub struct WatchdogOptions {
    pub hosts: Vec<String>,
    pub abort: Arc<Abort>,
    pub liveness: SharedLiveness,
    /// The run's start: the liveness clock's zero.
    pub started: Instant,
    /// The terminal is in raw mode and must be restored if the watchdog ends the process.
    pub dashboard: bool,
    /// The results file, told why the run ended if the watchdog ends the process.
    pub results: Option<PathBuf>,
}

impl Watchdog {
    /// Watches what the collector sends, then passes it on to `consumer` (the dashboard or JSON printer),
    /// if there is one.
    pub fn start(consumer: Option<Sender<ConsumerEvent>>, options: WatchdogOptions) -> std::io::Result<Self> {
        let (events, incoming) = mpsc::channel::<ConsumerEvent>();
        let run_over = Arc::new(AtomicBool::new(false));
        let over = run_over.clone();
        let handle = std::thread::Builder::new().name("efatop-watchdog".into()).spawn(move || {
            watch(&incoming, consumer.as_ref(), &options, &over);
            if options.abort.is_raised() && !over.load(Ordering::Relaxed) {
                // Still running EXIT_GRACE after the abort: rank 0 is stuck outside the fabric.
                let reason = options.abort.reason();
                let kept = options.results.as_ref().map_or_else(String::new, |path| {
                    match crate::results_file::record_end(path, Err(&reason)) {
                        Ok(()) => format!("; sizes finished so far are in {}", path.display()),
                        Err(err) => format!("; the results file could not be updated: {err}"),
                    }
                });
                if options.dashboard {
                    crate::term::restore();
                }
                eprintln!("efatop: error: {reason} (rank 0 stopped waiting{kept})");
                std::process::exit(1);
            }
        })?;
        Ok(Self { events, run_over, handle: Some(handle) })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.run_over.store(true, Ordering::Relaxed);
        // The thread ends when every sender (ours and the collector's) is gone; do not wait for the
        // collector here, it is dropped after us.
        drop(self.handle.take());
    }
}

fn watch(incoming: &Receiver<ConsumerEvent>, consumer: Option<&Sender<ConsumerEvent>>, options: &WatchdogOptions, run_over: &AtomicBool) {
    let WatchdogOptions { hosts, abort, liveness, started, .. } = options;
    let host = |rank: usize| hosts.get(rank).map_or("?", String::as_str);
    let mut raised_at: Option<Instant> = None;
    loop {
        match incoming.recv_timeout(TICK) {
            Ok(event) => {
                if let ConsumerEvent::Telemetry(batch) = &event {
                    let at = started.elapsed();
                    let mut live = liveness.lock();
                    for telemetry in batch {
                        if let Some(rank) = note_telemetry(&mut live, telemetry, at) {
                            if rank != 0 && !run_over.load(Ordering::Relaxed) {
                                abort.raise(format!("rank {rank} ({}) exited mid-run: its telemetry connection closed", host(rank)));
                            }
                        }
                    }
                }
                if let Some(consumer) = consumer {
                    // A consumer that has gone (the dashboard was dismissed) needs nothing more.
                    let _ = consumer.send(event);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if run_over.load(Ordering::Relaxed) {
            continue;
        }
        if abort.is_raised() {
            let raised = *raised_at.get_or_insert_with(Instant::now);
            if raised.elapsed() > EXIT_GRACE {
                return;
            }
            continue;
        }
        let live = liveness.lock();
        if let Some((rank, silent)) = live.hung(started.elapsed()) {
            let doing = live
                .last_phase(rank)
                .map_or(String::new(), |(phase, bytes)| format!("; it last said: {} {}", phase.label(), efatop_experiments::sizes::format_size(bytes)));
            abort.raise(format!(
                "rank {rank} ({}) stopped responding: no telemetry for {:.1} s, past --hang-timeout {:.0} s (hung or stopped{doing})",
                host(rank),
                silent.as_secs_f64(),
                live.hang_timeout.as_secs_f64()
            ));
        }
    }
}

/// Moves the liveness clock on with one telemetry event heard `at` after the run started (a sample or a
/// phase change is a sign of life); returns the rank whose telemetry connection closed, if it did. The
/// watchdog and every viewer of a served or recorded run keep their clock this one way.
pub fn note_telemetry(live: &mut Liveness, telemetry: &CollectorEvent, at: Duration) -> Option<usize> {
    match telemetry {
        CollectorEvent::Sample(sample) => live.heard(sample.rank as usize, at),
        CollectorEvent::Phase(report) => {
            if let Some(phase) = Phase::from_code(report.phase) {
                live.phase(report.rank as usize, phase, report.bytes, at);
            }
        }
        CollectorEvent::Closed { rank: Some(rank), .. } => {
            let rank = *rank as usize;
            live.closed(rank);
            return Some(rank);
        }
        CollectorEvent::Closed { rank: None, .. } | CollectorEvent::Malformed { .. } | CollectorEvent::Node(_) => {}
    }
    None
}

/// SIGTERM (mpirun ending the job, the launcher stopping a rank 0 that outlived a failure) ends rank 0
/// with its results file saying so, and on a dashboard without leaving the user's terminal in raw mode.
/// Installed as soon as the results file exists, so even a rank 0 stuck in the bootstrap leaves a file
/// that says why the run ended.
pub fn end_on_sigterm(dashboard: bool, results: Option<PathBuf>) {
    let spawned = std::thread::Builder::new().name("efatop-sigterm".into()).spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_io().build() else { return };
        runtime.block_on(async {
            let Ok(mut terminate) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else { return };
            if terminate.recv().await.is_some() {
                let reason = "stopped by SIGTERM (the launcher or mpirun ended the job)";
                let kept = results.as_ref().map_or_else(String::new, |path| match crate::results_file::record_end(path, Err(reason)) {
                    Ok(()) => format!("; sizes finished so far are in {}", path.display()),
                    Err(err) => format!("; {err}"),
                });
                if dashboard {
                    crate::term::restore();
                }
                eprintln!("efatop: error: {reason}{kept}");
                std::process::exit(143);
            }
        });
    });
    if let Err(err) = spawned {
        eprintln!("efatop: warning: no SIGTERM handler ({err}): a SIGTERM would leave the terminal in raw mode");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use efatop_experiments::telemetry::{PhaseReport, RankSample};

    fn sample(rank: u32) -> ConsumerEvent {
        ConsumerEvent::Telemetry(vec![CollectorEvent::Sample(Box::new(RankSample { rank, ..RankSample::default() }))])
    }

    fn wait_for(abort: &Abort, within: Duration) -> Option<String> {
        let until = Instant::now() + within;
        while Instant::now() < until {
            if abort.is_raised() {
                return Some(abort.reason());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    fn start(consumer: Option<Sender<ConsumerEvent>>, hosts: &[&str], hang_timeout: Duration) -> (Watchdog, Arc<Abort>, SharedLiveness) {
        let abort = Arc::new(Abort::default());
        let liveness = SharedLiveness::new(Liveness::new(hosts.len(), Duration::from_millis(100), hang_timeout));
        let options = WatchdogOptions {
            hosts: hosts.iter().map(|h| (*h).to_string()).collect(),
            abort: abort.clone(),
            liveness: liveness.clone(),
            started: Instant::now(),
            dashboard: false,
            results: None,
        };
        (Watchdog::start(consumer, options).expect("watchdog"), abort, liveness)
    }

    #[test]
    fn a_closed_connection_mid_run_names_the_rank_and_host() {
        let (out, forwarded) = mpsc::channel();
        let (dog, abort, _) = start(Some(out), &["a", "b", "c"], Duration::from_mins(1));
        dog.events.send(sample(2)).expect("send");
        let from = "127.0.0.1:1".parse().expect("address");
        dog.events.send(ConsumerEvent::Telemetry(vec![CollectorEvent::Closed { from, rank: Some(2) }])).expect("send");
        let reason = wait_for(&abort, Duration::from_secs(2)).expect("raised");
        assert_eq!(reason, "rank 2 (c) exited mid-run: its telemetry connection closed");
        // The run ends here: the watchdog must not end this test process.
        dog.run_over.store(true, Ordering::Relaxed);
        assert!(matches!(forwarded.recv_timeout(Duration::from_secs(1)), Ok(ConsumerEvent::Telemetry(_))), "passed on");
    }

    #[test]
    fn a_silent_rank_is_named_after_the_hang_timeout_and_not_before() {
        let (dog, abort, liveness) = start(None, &["a", "b"], Duration::from_millis(900));
        // Both speak for a while; then only rank 0 (its own sampler) does.
        for _ in 0..5 {
            dog.events.send(sample(1)).expect("send");
            dog.events.send(sample(0)).expect("send");
            std::thread::sleep(Duration::from_millis(150));
        }
        assert!(!abort.is_raised(), "rank 1 spoke every 150 ms: {}", abort.reason());
        let silent_from = Instant::now();
        let reason = loop {
            dog.events.send(sample(0)).expect("send");
            if let Some(reason) = wait_for(&abort, Duration::from_millis(100)) {
                break reason;
            }
            assert!(silent_from.elapsed() < Duration::from_secs(5), "never named");
        };
        assert!(silent_from.elapsed() >= Duration::from_millis(700), "named too early: {:?}", silent_from.elapsed());
        let silent: f64 = reason
            .strip_prefix("rank 1 (b) stopped responding: no telemetry for ")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|figure| figure.parse().ok())
            .unwrap_or_else(|| panic!("{reason}"));
        assert!((0.9..2.0).contains(&silent), "{reason}");
        assert!(reason.contains("--hang-timeout 1 s"), "{reason}");
        assert!(liveness.lock().silence(1, Duration::from_hours(1)).is_some());
        dog.run_over.store(true, Ordering::Relaxed);
    }

    #[test]
    fn progress_reports_keep_a_rank_alive() {
        let (dog, abort, _) = start(None, &["a", "b"], Duration::from_millis(600));
        for changes in 1..=10 {
            // Rank 1 sends no samples at all (its sampler's interval is long), only phase changes.
            let report = PhaseReport { rank: 1, changes, phase: Phase::Verifying.code(), bytes: 1 << 30 };
            dog.events.send(ConsumerEvent::Telemetry(vec![CollectorEvent::Phase(report)])).expect("send");
            dog.events.send(sample(0)).expect("send");
            std::thread::sleep(Duration::from_millis(150));
        }
        assert!(!abort.is_raised(), "{}", abort.reason());
        let reason = loop {
            dog.events.send(sample(0)).expect("send");
            if let Some(reason) = wait_for(&abort, Duration::from_millis(100)) {
                break reason;
            }
        };
        assert!(reason.ends_with("(hung or stopped; it last said: verifying 1G)"), "{reason}");
        dog.run_over.store(true, Ordering::Relaxed);
    }

    #[test]
    fn when_rank_0_hears_nobody_no_rank_is_blamed() {
        // Rank 0's collector is held up (nothing arrives from anyone): nobody is named however long.
        let (dog, abort, _) = start(None, &["a", "b"], Duration::from_millis(300));
        dog.events.send(sample(0)).expect("send");
        dog.events.send(sample(1)).expect("send");
        assert_eq!(wait_for(&abort, Duration::from_secs(1)), None);
        dog.run_over.store(true, Ordering::Relaxed);
    }

    #[test]
    fn after_the_run_ranks_may_close_and_fall_silent() {
        let (dog, abort, _) = start(None, &["a", "b"], Duration::from_millis(300));
        dog.run_over.store(true, Ordering::Relaxed);
        let from = "127.0.0.1:1".parse().expect("address");
        dog.events.send(ConsumerEvent::Telemetry(vec![CollectorEvent::Closed { from, rank: Some(1) }])).expect("send");
        assert_eq!(wait_for(&abort, Duration::from_secs(1)), None);
    }
}
