//! Rank 0's consumer of the run's events for the chosen printer ([`Session`], the runtime's
//! [`Show`]): the dashboard, JSON lines or plain lines on a thread of their own, fed by rank 0's loop
//! (`efatop_runtime::rank_zero`), and the final tables once the run is over.

use std::path::Path;
use std::sync::mpsc;

use efatop_proto::results::RunResults;

use efatop_ui::app::{App, Ended};
use efatop_proto::events::ConsumerEvent;
use crate::printer::{Mode, dashboard, jsonl, plain};

use efatop_runtime::rank_zero::{Consumer, ConsumerOutcome, Show, ShowStart};

/// The printer `mode` names, as rank 0's consumer.
pub struct Session {
    pub mode: Mode,
    /// `--json-samples`.
    pub samples: jsonl::Samples,
}

impl Show for Session {
    /// Starts the consumer for the mode and returns where to send it the run's events; JSON lines and
    /// plain output print their header here.
    fn start(&mut self, run: ShowStart<'_>) -> Option<Consumer> {
        let ShowStart { metadata, sizes, start, started, stop, liveness } = run;
        let (events, received) = mpsc::channel::<ConsumerEvent>();
        let spawned = match self.mode {
            Mode::Json => {
                jsonl::print_run(metadata);
                let mut lines = jsonl::SampleLines::for_run(&start, self.samples);
                jsonl::print_note(&lines);
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
                let memory = metadata.memory.clone();
                std::thread::Builder::new().name("efatop-plain".into()).spawn(move || {
                    plain::print_events(&received, memory);
                    ConsumerOutcome::Done
                })
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

    fn wants_liveness(&self) -> bool {
        self.mode == Mode::Dashboard
    }

    fn finish(&mut self, results: &RunResults, sizes: &[u64], file: &Path, outcome: Option<ConsumerOutcome>) {
        plain::print_final(self.mode, results, sizes, Some(file));
        if let Some(ConsumerOutcome::Failed(reason)) = outcome {
            eprintln!("efatop: warning: the dashboard failed ({reason}); results above are complete");
        }
    }
}
