//! Rank 0's watchdog: telemetry doubles as a heartbeat. A rank whose telemetry connection closes before the
//! run is over has died; a rank silent for longer than the heartbeat has hung (or been stopped). Either way
//! the watchdog raises the world's abort with the rank and its host, so rank 0's hot path gives up its wait
//! at once instead of after `--timeout`, reports the rank, and keeps every size measured so far.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use efatop_experiments::world::Abort;

use crate::output::ConsumerEvent;
use crate::telemetry::CollectorEvent;

/// How often the watchdog looks at the clock when no telemetry arrives.
const TICK: Duration = Duration::from_millis(200);

/// How long rank 0 gets to end on its own once the abort is raised. Its hot path gives up at once when
/// it is waiting on the fabric; but a wait inside the bootstrap (an MPI collective, the local rendezvous)
/// cannot be interrupted, and then the watchdog ends the process itself: the results file already holds
/// every size finished, and under mpirun rank 0's exit ends the job.
const EXIT_GRACE: Duration = Duration::from_secs(1);

/// A rank silent for this long is reported: long enough that a rank briefly starved of CPU by its
/// neighbours is not, short enough that rank 0 names a hung rank within 5 s.
pub fn heartbeat_for(interval: Duration) -> Duration {
    (interval * 3).max(Duration::from_millis(2500))
}

pub struct Watchdog {
    /// Where the collector sends its batches.
    pub events: Sender<ConsumerEvent>,
    /// Set when rank 0's experiment has ended: ranks then close their telemetry as they finish.
    pub run_over: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Watches what the collector sends, then passes it on to `consumer` (the dashboard or JSON printer),
    /// if there is one.
    /// `dashboard`: the terminal is in raw mode and must be restored if the watchdog ends the process.
    pub fn start(
        consumer: Option<Sender<ConsumerEvent>>,
        hosts: Vec<String>,
        abort: Arc<Abort>,
        heartbeat: Duration,
        dashboard: bool,
    ) -> std::io::Result<Self> {
        let (events, incoming) = mpsc::channel::<ConsumerEvent>();
        let run_over = Arc::new(AtomicBool::new(false));
        let over = run_over.clone();
        let handle = std::thread::Builder::new().name("efatop-watchdog".into()).spawn(move || {
            watch(&incoming, consumer.as_ref(), &hosts, &abort, heartbeat, &over);
            if abort.is_raised() && !over.load(Ordering::Relaxed) {
                // Still running EXIT_GRACE after the abort: rank 0 is stuck outside the fabric.
                if dashboard {
                    crate::dashboard::restore();
                }
                eprintln!("efatop: error: {} (rank 0 stopped waiting; sizes finished so far are in the results file)", abort.reason());
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

fn watch(
    incoming: &Receiver<ConsumerEvent>,
    consumer: Option<&Sender<ConsumerEvent>>,
    hosts: &[String],
    abort: &Abort,
    heartbeat: Duration,
    run_over: &AtomicBool,
) {
    let started = Instant::now();
    // Every rank but rank 0 (whose own hot path is what we would be stopping), from the start: a rank
    // that never sends anything is as silent as one that stopped.
    let mut last_heard: Vec<Option<Instant>> = (0..hosts.len()).map(|rank| (rank != 0).then_some(started)).collect();
    let host = |rank: usize| hosts.get(rank).map_or("?", String::as_str);
    let mut raised_at: Option<Instant> = None;
    loop {
        match incoming.recv_timeout(TICK) {
            Ok(event) => {
                if let ConsumerEvent::Telemetry(batch) = &event {
                    for telemetry in batch {
                        match telemetry {
                            CollectorEvent::Sample(sample) => {
                                if let Some(heard) = last_heard.get_mut(sample.rank as usize).and_then(Option::as_mut) {
                                    *heard = Instant::now();
                                }
                            }
                            CollectorEvent::Closed { rank: Some(rank), .. } => {
                                let rank = *rank as usize;
                                if let Some(heard) = last_heard.get_mut(rank) {
                                    *heard = None;
                                }
                                if rank != 0 && !run_over.load(Ordering::Relaxed) {
                                    abort.raise(format!(
                                        "rank {rank} ({}) exited mid-run: its telemetry connection closed",
                                        host(rank)
                                    ));
                                }
                            }
                            CollectorEvent::Closed { rank: None, .. } | CollectorEvent::Malformed { .. } | CollectorEvent::Node(_) => {}
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
        let now = Instant::now();
        if let Some((rank, silent)) = last_heard
            .iter()
            .enumerate()
            .filter_map(|(rank, heard)| heard.map(|at| (rank, now - at)))
            .find(|(_, silent)| *silent > heartbeat)
        {
            abort.raise(format!(
                "rank {rank} ({}) stopped responding: no telemetry for {:.1} s (hung, stopped or starved)",
                host(rank),
                silent.as_secs_f64()
            ));
        }
    }
}

/// On a dashboard, SIGTERM (mpirun ending the job, the launcher stopping a rank that outlived a failure)
/// must not leave the user's terminal in raw mode: restore it, say so, and exit as SIGTERM would.
pub fn restore_terminal_on_sigterm() {
    let spawned = std::thread::Builder::new().name("efatop-sigterm".into()).spawn(|| {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_io().build() else { return };
        runtime.block_on(async {
            let Ok(mut terminate) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else { return };
            if terminate.recv().await.is_some() {
                crate::dashboard::restore();
                eprintln!("efatop: error: stopped by SIGTERM; sizes finished so far are in the results file");
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
    use efatop_experiments::telemetry::RankSample;

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

    #[test]
    fn a_closed_connection_mid_run_names_the_rank_and_host() {
        let abort = Arc::new(Abort::default());
        let (out, forwarded) = mpsc::channel();
        let dog = Watchdog::start(Some(out), vec!["a".into(), "b".into(), "c".into()], abort.clone(), Duration::from_mins(1), false)
            .expect("watchdog");
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
    fn a_silent_rank_is_named_after_the_heartbeat_and_not_before() {
        let abort = Arc::new(Abort::default());
        let dog = Watchdog::start(None, vec!["a".into(), "b".into()], abort.clone(), Duration::from_millis(600), false).expect("watchdog");
        for _ in 0..5 {
            dog.events.send(sample(1)).expect("send");
            std::thread::sleep(Duration::from_millis(150));
        }
        assert!(!abort.is_raised(), "rank 1 spoke every 150 ms: {}", abort.reason());
        let reason = wait_for(&abort, Duration::from_secs(3)).expect("raised");
        assert!(reason.starts_with("rank 1 (b) stopped responding: no telemetry for 0."), "{reason}");
        dog.run_over.store(true, Ordering::Relaxed);
    }

    #[test]
    fn after_the_run_ranks_may_close_and_fall_silent() {
        let abort = Arc::new(Abort::default());
        let dog = Watchdog::start(None, vec!["a".into(), "b".into()], abort.clone(), Duration::from_millis(300), false).expect("watchdog");
        dog.run_over.store(true, Ordering::Relaxed);
        let from = "127.0.0.1:1".parse().expect("address");
        dog.events.send(ConsumerEvent::Telemetry(vec![CollectorEvent::Closed { from, rank: Some(1) }])).expect("send");
        assert_eq!(wait_for(&abort, Duration::from_secs(1)), None);
    }
}
