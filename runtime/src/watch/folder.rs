//! The watcher's fold loop: the server's batches in, folded ([`Watch`]) and recorded, and every half second
//! the tick's lines out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use efatop_node::prometheus::{Exporter, WatchMetrics};
use super::fold::{Config, Watch};
use efatop_proto::nccl::{Recorded, WatchLine};

use super::recording::Recorder;
use super::TICK;
use super::Inbound;

/// The thread's name (benches pin it).
pub const THREAD: &str = "efatop-watchf";

/// What the fold loop did, read from any thread.
#[derive(Debug, Default)]
pub struct Folded {
    /// Plugin messages folded.
    pub messages: AtomicU64,
    /// Ticks made, and the longest one (ns).
    pub ticks: AtomicU64,
    pub longest_tick_ns: AtomicU64,
}

/// Starts the fold loop on its own thread: it takes the server's batches from `rx` (records them where
/// `recorder` is given), and every [`TICK`] sends its lines to `out` (and offers their figures to `exporter`, `--prometheus`'s); it ends after `duration` (zero:
/// never), when the server is gone, or when no one takes its lines.
pub fn spawn(
    rx: Receiver<Vec<Inbound>>,
    config: Config,
    started: Instant,
    duration: Duration,
    recorder: Option<Recorder>,
    exporter: Option<Exporter<WatchMetrics>>,
    out: Sender<Vec<WatchLine>>,
) -> std::io::Result<(JoinHandle<()>, Arc<Folded>)> {
    let folded = Arc::new(Folded::default());
    let counts = Arc::clone(&folded);
    let handle = std::thread::Builder::new()
        .name(THREAD.into())
        .spawn(move || {
            // As the server's thread: where the watcher has one core, the view's frames before the
            // fold's next batch (frame p99 with and without: docs/measurements.md).
            crate::affinity::give_way_on_one_core();
            run(&rx, config, started, duration, recorder, exporter.as_ref(), &out, &counts)
        })?;
    Ok((handle, folded))
}

fn run(
    rx: &Receiver<Vec<Inbound>>,
    config: Config,
    started: Instant,
    duration: Duration,
    mut recorder: Option<Recorder>,
    exporter: Option<&Exporter<WatchMetrics>>,
    out: &Sender<Vec<WatchLine>>,
    folded: &Folded,
) {
    let mut watch = Watch::new(config);
    let mut metrics = WatchMetrics::new();
    let mut next = started + TICK;
    loop {
        let received = rx.recv_timeout(next.saturating_duration_since(Instant::now()));
        let now = started.elapsed();
        match received {
            Ok(batch) => {
                let mut messages = 0;
                for inbound in batch {
                    if let Some(recorder) = recorder.as_mut() {
                        recorder.add(&recorded(&inbound, now));
                    }
                    match inbound {
                        Inbound::Message(conn, message) => {
                            messages += 1;
                            watch.ingest(conn, message, now);
                        }
                        Inbound::Closed(conn) => watch.closed(conn),
                        Inbound::Refused => watch.refused(),
                    }
                }
                folded.messages.fetch_add(messages, Ordering::Relaxed);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if Instant::now() >= next {
            next += TICK;
            if let Some(recorder) = recorder.as_mut() {
                recorder.flush();
            }
            let began = Instant::now();
            let lines = watch.tick(started.elapsed());
            let took = began.elapsed().as_nanos() as u64;
            folded.ticks.fetch_add(1, Ordering::Relaxed);
            folded.longest_tick_ns.fetch_max(took, Ordering::Relaxed);
            if let Some(exporter) = exporter {
                // `--prometheus`: the endpoint's copy of the latest figures, offered when they changed (a
                // scrape never waits on the fold, nor the fold on a scrape).
                if !lines.is_empty() {
                    metrics.add(&lines);
                    exporter.offer(metrics.clone());
                }
            }
            if out.send(lines).is_err() {
                return;
            }
            if !duration.is_zero() && started.elapsed() >= duration {
                return;
            }
            // A tick that ran long: the next is due a tick after this one, not at once again.
            next = next.max(Instant::now());
        }
    }
}

/// What `--record` writes of one thing the fold took in at `now`.
fn recorded(inbound: &Inbound, now: Duration) -> Recorded {
    let t_ms = now.as_millis() as u64;
    match inbound {
        Inbound::Message(conn, message) => Recorded::Message {
            t_ms,
            conn: *conn,
            message: message.clone(),
        },
        Inbound::Closed(conn) => Recorded::Closed { t_ms, conn: *conn },
        Inbound::Refused => Recorded::Refused { t_ms },
    }
}
