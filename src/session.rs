//! Rank 0's session: the consumer of the run's events for the chosen printer (dashboard, JSON lines or
//! plain), and the observer through which the experiment tells it (and the results file) what it measured.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::thread::JoinHandle;
use std::time::Instant;

use efatop_experiments::results::{Measurement, PairMatrix, RunMetadata, RunResults};
use efatop_experiments::{ExperimentError, Observer};
use efatop_experiments::sweep::SweepResults;

use crate::app::{App, Ended};
use crate::event::{ConsumerEvent, RunStart};
use crate::printer::{Mode, dashboard, jsonl, plain};
use crate::results_file::ResultsFile;
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
    /// The dashboard's run, every rank's NIC names and the results so far (the dashboard only).
    pub dashboard: Option<RunStart>,
    /// JSON lines per (sender, receiver) pair too: all-to-all runs.
    pub pairs: bool,
    pub events: Receiver<ConsumerEvent>,
    pub started: Instant,
    /// Raised when the user asks to quit.
    pub stop: Arc<AtomicBool>,
    pub liveness: SharedLiveness,
}

/// Starts the consumer for `setup.mode`: plain output prints its header here and needs no thread.
pub fn start_consumer(setup: ConsumerSetup<'_>) -> Option<JoinHandle<ConsumerOutcome>> {
    let ConsumerSetup { mode, metadata, sizes, dashboard, pairs, events, started, stop, liveness } = setup;
    match (mode, dashboard) {
        (Mode::Json, _) => {
            jsonl::print_run(metadata);
            let mut lines = jsonl::SampleLines { pairs };
            Some(std::thread::spawn(move || {
                jsonl::print_events(&events, || started.elapsed(), &mut lines);
                ConsumerOutcome::Done
            }))
        }
        (Mode::Dashboard, Some(start)) => {
            let app = App::for_run(start, liveness);
            Some(std::thread::spawn(move || match dashboard::run(&events, app, &stop, started) {
                Ok(Ended::Quit) => ConsumerOutcome::Quit,
                Ok(Ended::Dismissed) => ConsumerOutcome::Done,
                Err(e) => ConsumerOutcome::Failed(e.to_string()),
            }))
        }
        (Mode::Plain | Mode::Dashboard, _) => {
            plain::print_header(metadata, sizes);
            None
        }
    }
}

/// Rank 0's observer: keeps the results (and their file) current and tells the consumer.
pub struct RankZero {
    pub events: Option<Sender<ConsumerEvent>>,
    /// Plain tables on stdout (the events, if any, go only to viewers and the recording).
    pub plain: bool,
    pub results: RunResults,
    pub file: Option<ResultsFile>,
    pub save_error: Option<ExperimentError>,
    pub stop: Arc<AtomicBool>,
}

impl Observer for RankZero {
    fn begin(&mut self, columns: &[String], memory: &str) {
        // Plain output printed its header before the memory was registered: say how it was (native
        // dma-buf or virtual address, or staged), which the results file records per configuration.
        if self.plain && memory != self.results.metadata.memory {
            println!("# memory as registered: {memory}");
        }
        self.results.configs = columns.to_vec();
        self.results.metadata.memory = memory.to_string();
        if let Some(events) = &self.events {
            let _ = events.send(ConsumerEvent::Begin { columns: columns.to_vec(), memory: memory.to_string() });
        }
    }

    fn step(&mut self, config: &str, size: u64) {
        if let Some(events) = &self.events {
            let _ = events.send(ConsumerEvent::Step { config: config.into(), size });
        }
    }

    fn measured(&mut self, measurement: &Measurement) {
        // Each NIC-counter warning once in the run's notes (the results file's header); every step's
        // figures and warnings stay in its measurement.
        for warning in measurement.counters.iter().flat_map(|c| &c.warnings) {
            let note = format!("NIC counters: {}", warning.headline);
            if !self.results.metadata.notes.contains(&note) {
                self.results.metadata.notes.push(note);
                if self.events.is_none() {
                    println!("# warning: {}", warning.message);
                }
            }
        }
        if let (None, Some(line)) = (&self.events, efatop_ui::counters::step_line(measurement)) {
            println!("# {line}");
        }
        self.results.measurements.push(measurement.clone());
        if let Some(file) = &self.file {
            if let Err(err) = file.save(&self.results) {
                self.save_error.get_or_insert(err);
            }
        }
        if let Some(events) = &self.events {
            let _ = events.send(ConsumerEvent::Measured(Box::new(measurement.clone())));
        }
    }

    fn pair_matrix(&mut self, matrix: &PairMatrix) {
        // Saved with the step's measurement, which follows at once.
        self.results.pair_matrices.push(matrix.clone());
        if let Some(events) = &self.events {
            let _ = events.send(ConsumerEvent::PairMatrix(Box::new(matrix.clone())));
        }
    }

    fn sweep(&mut self, sweep: &SweepResults) {
        let told = self.results.sweep.as_ref().map(|s| (s.rounds.len(), s.verdict.is_some()));
        self.results.sweep = Some(sweep.clone());
        if let Some(file) = &self.file {
            if let Err(err) = file.save(&self.results) {
                self.save_error.get_or_insert(err);
            }
        }
        let (rounds_told, verdict_told) = told.unwrap_or((0, false));
        let new_rounds = sweep.rounds.get(rounds_told..).unwrap_or_default();
        let Some(events) = &self.events else {
            // Plain output: a line per round as it finishes; the tables come at the end.
            for round in new_rounds {
                println!("{}", plain::sweep_round_line(round, sweep.nodes.len()));
            }
            return;
        };
        if told.is_none() {
            let setup = SweepResults { rounds: Vec::new(), verdict: None, ..sweep.clone() };
            let _ = events.send(ConsumerEvent::SweepBegin(Box::new(setup)));
        }
        for round in new_rounds {
            let _ = events.send(ConsumerEvent::SweepRound(Box::new(round.clone())));
        }
        if let (false, Some(verdict)) = (verdict_told, &sweep.verdict) {
            let _ = events.send(ConsumerEvent::SweepVerdict(Box::new(verdict.clone())));
        }
    }

    fn note(&mut self, line: &str) {
        if let Some(events) = &self.events {
            let _ = events.send(ConsumerEvent::Note(line.to_string()));
        }
    }

    fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}
