//! Rank 0's consumer of the run's events for the chosen printer: the dashboard or JSON lines on a thread
//! of their own, fed by rank 0's loop (`rank_zero.rs`); plain output needs none (the loop prints).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;
use std::time::Instant;

use efatop_proto::results::RunMetadata;

use crate::app::{App, Ended};
use crate::event::{ConsumerEvent, RunStart};
use crate::printer::{Mode, dashboard, jsonl, plain};
use crate::watchdog::SharedLiveness;

/// How rank 0's consumer ended.
pub enum ConsumerOutcome {
    Done,
    Quit,
    Failed(String),
}

/// What rank 0's consumer starts from.
pub struct ConsumerSetup<'a> {
    pub mode: Mode,
    pub metadata: &'a RunMetadata,
    pub sizes: &'a [u64],
    /// The run, every rank's NIC names and the results so far.
    pub start: RunStart,
    pub started: Instant,
    /// Raised when the user asks to quit.
    pub stop: Arc<AtomicBool>,
    pub liveness: SharedLiveness,
}

/// Starts the consumer for `setup.mode` and returns where to send it the run's events; plain output
/// prints its header here and needs no thread.
pub fn start_consumer(setup: ConsumerSetup<'_>) -> Option<(Sender<ConsumerEvent>, JoinHandle<ConsumerOutcome>)> {
    let ConsumerSetup { mode, metadata, sizes, start, started, stop, liveness } = setup;
    let (events, received) = mpsc::channel::<ConsumerEvent>();
    let spawned = match mode {
        Mode::Json => {
            jsonl::print_run(metadata);
            let mut lines = jsonl::SampleLines { pairs: start.pairs, world: Some(start.world()) };
            std::thread::Builder::new().name("efatop-json".into()).spawn(move || {
                jsonl::print_events(&received, || started.elapsed(), &mut lines);
                ConsumerOutcome::Done
            })
        }
        Mode::Dashboard => {
            let app = App::for_run(start, liveness);
            std::thread::Builder::new().name("efatop-dashboard".into()).spawn(move || match dashboard::run(&received, app, &stop, started) {
                Ok(Ended::Quit) => ConsumerOutcome::Quit,
                Ok(Ended::Dismissed) => ConsumerOutcome::Done,
                Err(e) => ConsumerOutcome::Failed(e.to_string()),
            })
        }
        Mode::Plain => {
            plain::print_header(metadata, sizes);
            return None;
        }
    };
    match spawned {
        Ok(handle) => Some((events, handle)),
        Err(err) => {
            eprintln!("efatop: warning: cannot start the display thread ({err}); plain tables at the end");
            None
        }
    }
}
