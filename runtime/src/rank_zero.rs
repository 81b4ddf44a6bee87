//! Rank 0's loop: one loop on the process's main thread that owns what rank 0 decides. It reads one channel
//! ([`Input`]): the collector's telemetry batches, the experiment's events (from the rank's own thread,
//! through [`Forward`]), the experiment's end and SIGTERM. It keeps the one liveness clock and its verdicts
//! ([`Watchdog`]), the run's results and their file, feeds the outlets (`--prometheus`, `--serve`,
//! `--record`) and hands each event on to the consumer ([`Show`]: the binary's dashboard, JSON lines or
//! plain tables, a bench's timed consumer, a test's recorder), folding each event once. Nothing here prints
//! the run: the consumer is passed in ([`Setup::show`]).
//!
//! Every way a run ends goes through [`Loop::end`]: complete, `q`, a rank killed, a rank hung or lost, a
//! rank dead during the run's setup, rank 0's own error, SIGTERM. The final tables (plain output, and the
//! dashboard, which keeps them until a key), the JSON `error` and `summary`, the served stream, the
//! recording and the results file all carry the end and its reason. The watchdog decides; this loop acts.
//! When rank 0's own thread is stuck where the abort cannot reach it (a wait inside MPI), the loop ends the
//! run without it after [`EXIT_GRACE`]: what was measured is already here.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use efatop_proto::column::Column;
use efatop_proto::results::{Measurement, PairMatrix, RunMetadata, RunResults, RunState, RunStatus};
use efatop_proto::sweep::SweepResults;
use efatop_experiments::world::Abort;
use efatop_experiments::{ExperimentError, Observer};

use crate::collector::Collector;
use efatop_proto::events::CollectorEvent;
use efatop_proto::events::{ConsumerEvent, RunStart};
use crate::results_file::ResultsFile;
use crate::run_metrics::RunMetrics;
use crate::serve::Outlets;
use crate::watchdog::Watchdog;
use efatop_proto::liveness::Liveness;

/// The exit code of a sweep that named suspects (a slow NIC, link or node): the run itself went well.
pub const SUSPECTS_FOUND: i32 = 3;

/// How often the loop asks the watchdog when nothing arrives.
const TICK: Duration = Duration::from_millis(200);

/// How long rank 0's own thread gets to end once the abort is raised. It gives up at once when it waits on
/// the fabric or the launcher's rendezvous; a wait inside MPI cannot be interrupted, and then the loop ends
/// the run without it.
const EXIT_GRACE: Duration = Duration::from_secs(1);
// Rank 0's own word on a lost rendezvous (it names the rank that left) comes before the watchdog's word on
// ranks that only said they were leaving.
const _: () = assert!(EXIT_GRACE.as_millis() < crate::watchdog::SETTLE.as_millis());

/// At most how often the consumer is told the liveness clock ([`ConsumerEvent::Liveness`]) while it moves.
const LIVENESS_EVERY: Duration = Duration::from_millis(100);
/// How often the watchdog judges the silences: it looks at every rank (32,768 at 4096 p5 hosts), and a
/// loop that judged after every batch spent an eighth of rank 0's core on it; a verdict on a silence of
/// seconds loses nothing by coming up to this much later.
const JUDGE_EVERY: Duration = Duration::from_millis(100);

/// How long rank 0 waits, after a run that went well, for every rank's telemetry to close.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// A signal that asks the run to stop: it ends through the ordinary ending, its tables kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM (or SIGHUP): the launcher, mpirun or a batch system ends the job.
    Terminate,
    /// SIGINT: Ctrl-C in the terminal (without the dashboard, which takes it as a key).
    Interrupt,
}

impl Stop {
    /// The run's reason begins with this; [`Stop::from_reason`] reads it back for the exit code.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Terminate => "stopped by SIGTERM (the launcher, mpirun or the batch system ended the job)",
            Self::Interrupt => "stopped by SIGINT (interrupted from the terminal)",
        }
    }

    /// The exit code a process stopped by this signal ends with, as the signal's default would.
    pub fn exit_code(self) -> i32 {
        match self {
            Self::Terminate => 143,
            Self::Interrupt => 130,
        }
    }

    pub fn from_reason(reason: &str) -> Option<Self> {
        [Self::Terminate, Self::Interrupt].into_iter().find(|stop| reason == stop.reason())
    }

    /// Watches SIGTERM and SIGHUP (as [`Stop::Terminate`]) and SIGINT (as [`Stop::Interrupt`]) on a thread
    /// named `name`, handing each to `on` until it returns false. The one watcher of the launcher and the
    /// ranks.
    pub fn watch(name: &str, mut on: impl FnMut(Self) -> bool + Send + 'static) -> std::io::Result<()> {
        std::thread::Builder::new().name(name.into()).spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_io().build() else { return };
            runtime.block_on(async {
                use tokio::signal::unix::{SignalKind, signal};
                let (Ok(mut terminate), Ok(mut hangup), Ok(mut interrupt)) =
                    (signal(SignalKind::terminate()), signal(SignalKind::hangup()), signal(SignalKind::interrupt()))
                else {
                    return;
                };
                loop {
                    let stop = tokio::select! {
                        _ = terminate.recv() => Self::Terminate,
                        _ = hangup.recv() => Self::Terminate,
                        _ = interrupt.recv() => Self::Interrupt,
                    };
                    if !on(stop) {
                        return;
                    }
                }
            });
        })?;
        Ok(())
    }
}

/// What the process's main thread hears.
pub enum Input {
    /// Rank 0's setup is done and the experiment starts: the loop takes over.
    Ready(Box<Setup>),
    /// The rank's thread has returned (before the loop, or any rank but 0): its exit code, or its error
    /// with the rank that met it.
    Done(Result<i32, (usize, ExperimentError)>),
    /// A batch from the collector.
    Telemetry(Vec<CollectorEvent>),
    /// One of the experiment's events (begin, step, measured, pair matrix, note).
    Experiment(ConsumerEvent),
    /// The sweep's results as they stand (the loop tells the consumer only what is new).
    Sweep(Box<SweepResults>),
    /// Rank 0's experiment returned.
    Ended(Result<(), ExperimentError>),
    /// SIGTERM, SIGHUP or SIGINT: the run is asked to stop.
    Terminated(Stop),
    /// A rank other than 0 lost rank 0 (its collector closed or became unreachable): why, as one line.
    Orphaned(String),
}

impl From<Vec<CollectorEvent>> for Input {
    fn from(batch: Vec<CollectorEvent>) -> Self {
        Self::Telemetry(batch)
    }
}

/// How rank 0's consumer ended.
pub enum ConsumerOutcome {
    Done,
    Quit,
    Failed(String),
}

/// Where the loop sends the consumer the run's events, and the consumer's thread.
pub type Consumer = (Sender<ConsumerEvent>, JoinHandle<ConsumerOutcome>);

/// What a consumer starts from.
pub struct ShowStart<'a> {
    pub metadata: &'a RunMetadata,
    pub sizes: &'a [u64],
    /// The run, every rank's NIC names and the results so far.
    pub start: RunStart,
    pub started: Instant,
    /// Raised when the user asks to quit.
    pub stop: Arc<AtomicBool>,
    /// The liveness clock at the start; its changes follow as [`ConsumerEvent::Liveness`] events.
    pub liveness: Liveness,
}

/// Who shows the run: the binary's dashboard, JSON lines or plain tables, a bench's timed consumer, a
/// test's recorder. The loop starts it once, before the first event, sends its thread every event (the
/// loop never waits on it), joins that thread at the end and hands it the final results.
pub trait Show: Send {
    /// Starts the consumer; `None`: it takes no events (only the final results).
    fn start(&mut self, run: ShowStart<'_>) -> Option<Consumer>;
    /// It shows ranks' liveness (a dashboard): the loop tells it the watchdog's clock as it moves
    /// ([`ConsumerEvent::Liveness`]).
    fn wants_liveness(&self) -> bool {
        false
    }
    /// The run is over: its final results (their status set, saved at `file`), and how the consumer's
    /// thread ended (`None`: there was none).
    fn finish(&mut self, results: &RunResults, sizes: &[u64], file: &Path, outcome: Option<ConsumerOutcome>);
}

/// What rank 0's loop starts from, handed over by the rank's thread once the world is up.
pub struct Setup {
    /// Who shows the run.
    pub show: Box<dyn Show>,
    pub results: RunResults,
    pub file: ResultsFile,
    pub sizes: Vec<u64>,
    pub start: RunStart,
    pub started: Instant,
    /// Raised when the user asks to quit.
    pub stop: Arc<AtomicBool>,
    pub abort: Arc<Abort>,
    /// The watchdog, when telemetry runs (it is rank 0's heartbeat of every rank).
    pub watchdog: Option<Watchdog>,
    /// The liveness clock the consumer starts from (the watchdog keeps it from there).
    pub liveness: Liveness,
    pub interval: Duration,
    pub outlets: Option<Outlets>,
    pub metrics: Option<RunMetrics>,
    pub pushgateway: Option<crate::run_metrics::PushTarget>,
    pub collector: Option<Collector>,
    /// Dropped once the ending is done: only then does rank 0's own thread close its fabric objects. A
    /// provider that crashes while closing an endpoint a failed run left mid-transfer (libfabric 1.17's
    /// `tcp;ofi_rxm`: docs/measurements.md, "Investigations") then cannot take the run's ending with it.
    pub release: Sender<()>,
}

/// How the loop ended the run.
pub struct Ending {
    pub code: Result<i32, ExperimentError>,
    /// Rank 0's own thread did not return: the process must end without waiting for it.
    pub abandoned: bool,
}

/// Rank 0's observer, on the rank's own thread: each event goes to the loop, nothing is kept here.
pub struct Forward {
    pub inputs: Sender<Input>,
    pub stop: Arc<AtomicBool>,
}

impl Forward {
    fn send(&self, event: ConsumerEvent) {
        let _ = self.inputs.send(Input::Experiment(event));
    }
}

impl Observer for Forward {
    fn begin(&mut self, columns: &[Column], memory: &str) {
        self.send(ConsumerEvent::Begin { columns: columns.to_vec(), memory: memory.to_string() });
    }

    fn step(&mut self, config: &Column, size: u64) {
        self.send(ConsumerEvent::Step { config: config.clone(), size });
    }

    fn measured(&mut self, measurement: &Measurement) {
        self.send(ConsumerEvent::Measured(Box::new(measurement.clone())));
    }

    fn pair_matrix(&mut self, matrix: &PairMatrix) {
        self.send(ConsumerEvent::PairMatrix(Box::new(matrix.clone())));
    }

    fn sweep(&mut self, sweep: &SweepResults) {
        let _ = self.inputs.send(Input::Sweep(Box::new(sweep.clone())));
    }

    fn note(&mut self, line: &str) {
        self.send(ConsumerEvent::Note(line.to_string()));
    }

    fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

struct Loop {
    setup: Setup,
    consumer: Option<Consumer>,
    save_error: Option<ExperimentError>,
    /// When the watchdog raised the abort because a rank's telemetry connection closed.
    closed_verdict_at: Option<Instant>,
    /// When the consumer was last told the liveness clock.
    liveness_told_at: Instant,
    judged_at: Instant,
}

/// Runs rank 0's loop until the run has ended, and ends it; `early`: the telemetry its collector heard before the
/// loop began.
pub fn run(setup: Setup, inputs: &Receiver<Input>, early: Vec<Vec<CollectorEvent>>) -> Ending {
    let mut this = Loop { setup, consumer: None, save_error: None, closed_verdict_at: None, liveness_told_at: Instant::now(), judged_at: Instant::now() };
    this.start();
    // What the collector heard before this loop began (the ranks' hellos, a connection that closed), first.
    for batch in early {
        this.fold(Input::Telemetry(batch));
    }
    let (outcome, abandoned) = this.follow(inputs);
    this.end(outcome, abandoned, inputs)
}

impl Loop {
    fn start(&mut self) {
        let setup = &mut self.setup;
        if let Some(outlets) = &mut setup.outlets {
            if let Err(err) = outlets.begin(setup.start.clone()) {
                eprintln!("efatop: warning: {err}; the run goes on without its recording");
            }
        }
        let consumer = setup.show.start(ShowStart {
            metadata: &setup.results.metadata,
            sizes: &setup.sizes,
            start: setup.start.clone(),
            started: setup.started,
            stop: setup.stop.clone(),
            liveness: setup.liveness.clone(),
        });
        self.consumer = consumer;
    }

    /// Folds inputs until rank 0's experiment has returned, or the abort was raised and it did not return
    /// within [`EXIT_GRACE`]. Returns the experiment's outcome (or the abort's reason) and whether rank 0's
    /// thread was left behind.
    fn follow(&mut self, inputs: &Receiver<Input>) -> (Result<(), ExperimentError>, bool) {
        let mut raised_at: Option<Instant> = None;
        let mut ended: Option<Result<(), ExperimentError>> = None;
        loop {
            match inputs.recv_timeout(TICK) {
                Ok(Input::Ended(outcome)) => {
                    // A lost rendezvous follows a rank's death, which its telemetry names: give the watchdog
                    // a moment to say which rank it was.
                    let lost = matches!(outcome, Err(ExperimentError::Bootstrap(_))) && self.setup.watchdog.is_some();
                    if lost && !self.setup.abort.is_raised() {
                        ended = Some(outcome);
                        raised_at.get_or_insert_with(Instant::now);
                    } else {
                        return (self.blame(outcome), false);
                    }
                }
                Ok(Input::Terminated(stop)) => {
                    self.setup.abort.raise(stop.reason().to_string());
                    raised_at.get_or_insert_with(Instant::now);
                }
                Ok(input) => self.fold(input),
                Err(RecvTimeoutError::Timeout) => {}
                // The rank's thread is gone without a word: it panicked.
                Err(RecvTimeoutError::Disconnected) => {
                    return (Err(ExperimentError::Bootstrap("rank 0's thread ended without a result (it panicked)".into())), false);
                }
            }
            if self.liveness_told_at.elapsed() >= LIVENESS_EVERY {
                self.tell_liveness();
            }
            let at = self.setup.started.elapsed();
            if !self.setup.abort.is_raised() && self.judged_at.elapsed() >= JUDGE_EVERY {
                self.judged_at = Instant::now();
                if let Some(verdict) = self.setup.watchdog.as_ref().and_then(|w| w.judge(at)) {
                    self.setup.abort.raise(verdict);
                }
            }
            if self.setup.abort.is_raised() {
                let raised = *raised_at.get_or_insert_with(Instant::now);
                if let Some(outcome) = ended.take() {
                    return (self.blame(outcome), false);
                }
                if raised.elapsed() > EXIT_GRACE {
                    return (Err(self.abandoned()), true);
                }
            } else if let Some(started) = raised_at.filter(|_| ended.is_some()) {
                if started.elapsed() > EXIT_GRACE {
                    let outcome = ended.take().unwrap_or(Ok(()));
                    return (outcome, false);
                }
            }
        }
    }

    /// The experiment's error, or, when the watchdog saw why first (a rank died or hung), that reason: a
    /// wait on the fabric or the rendezvous that broke followed from it. An error the ranks agreed on (a
    /// verification failure, a peer's own failure) is the run's reason, whatever the watchdog saw after
    /// (the failing ranks exit once they have told rank 0).
    fn blame(&self, outcome: Result<(), ExperimentError>) -> Result<(), ExperimentError> {
        match outcome {
            // Rank 0's own wait had made no progress since before that rank's connection closed: the rank
            // ended because of the stall (it had shared its own, which ended every rank), not the other way
            // round; the stall names the rank it waited for.
            Err(ExperimentError::Stalled { timeout, .. }) if self.closed_verdict_at.is_some_and(|at| at.elapsed() < timeout) => outcome,
            Err(ExperimentError::Fabric(_) | ExperimentError::Bootstrap(_) | ExperimentError::Stalled { .. })
                if self.setup.abort.is_raised() =>
            {
                Err(self.abandoned())
            }
            outcome => outcome,
        }
    }

    fn abandoned(&self) -> ExperimentError {
        ExperimentError::Fabric(efatop_fabric::FabricError::Abandoned(self.setup.abort.reason()))
    }

    /// Folds one input: the clock, the results and their file, the outlets, the consumer.
    fn fold(&mut self, input: Input) {
        match input {
            Input::Telemetry(batch) => {
                let at = self.setup.started.elapsed();
                if let Some(watchdog) = &mut self.setup.watchdog {
                    if let Some(verdict) = watchdog.heard(&batch, at) {
                        if !self.setup.abort.is_raised() {
                            self.setup.abort.raise(verdict);
                            self.closed_verdict_at = Some(Instant::now());
                        }
                    }
                }
                if let Some(metrics) = &mut self.setup.metrics {
                    metrics.observe(&batch);
                }
                if self.setup.outlets.is_some() || self.consumer.is_some() {
                    self.forward(ConsumerEvent::Telemetry(batch));
                }
            }
            Input::Experiment(mut event) => {
                // Each step against its instance type's published figure, for the file, tables and views alike.
                if let ConsumerEvent::Measured(measurement) = &mut event {
                    efatop_report::reference::annotate(measurement, &self.setup.results.metadata);
                }
                self.keep(&event);
                self.forward(event);
            }
            Input::Sweep(sweep) => self.sweep(*sweep),
            Input::Ready(_) | Input::Done(_) | Input::Ended(_) | Input::Terminated(_) | Input::Orphaned(_) => {}
        }
    }

    /// The results (and their file) take an experiment's event.
    fn keep(&mut self, event: &ConsumerEvent) {
        let results = &mut self.setup.results;
        match event {
            ConsumerEvent::Begin { columns, memory } => {
                results.configs.clone_from(columns);
                results.metadata.memory.clone_from(memory);
            }
            ConsumerEvent::Measured(measurement) => {
                // Each NIC-counter warning once in the run's notes; every step's own stay in its measurement.
                for warning in measurement.counters.iter().flat_map(|c| &c.warnings) {
                    let note = format!("NIC counters: {}", warning.headline);
                    if !results.metadata.notes.contains(&note) {
                        results.metadata.notes.push(note);
                    }
                }
                results.measurements.push((**measurement).clone());
                self.save();
            }
            // Saved with the step's measurement, which follows at once.
            ConsumerEvent::PairMatrix(matrix) => results.pair_matrices.push((**matrix).clone()),
            _ => {}
        }
    }

    fn sweep(&mut self, sweep: SweepResults) {
        let told = self.setup.results.sweep.as_ref().map(|s| (s.rounds.len(), s.verdict.is_some()));
        let (rounds_told, verdict_told) = told.unwrap_or((0, false));
        let new_rounds: Vec<_> = sweep.rounds.get(rounds_told..).unwrap_or_default().to_vec();
        let verdict = sweep.verdict.clone().filter(|_| !verdict_told);
        let setup = told.is_none().then(|| SweepResults { rounds: Vec::new(), verdict: None, ..sweep.clone() });
        self.setup.results.sweep = Some(sweep);
        self.save();
        if let Some(setup) = setup {
            self.forward(ConsumerEvent::SweepBegin(Box::new(setup)));
        }
        for round in new_rounds {
            self.forward(ConsumerEvent::SweepRound(Box::new(round)));
        }
        if let Some(verdict) = verdict {
            self.forward(ConsumerEvent::SweepVerdict(Box::new(verdict)));
        }
    }

    fn save(&mut self) {
        if let Err(err) = self.setup.file.save(&self.setup.results) {
            self.save_error.get_or_insert(err);
        }
    }

    /// The watchdog's clock to the consumer alone (outlets' viewers keep their own from the telemetry),
    /// when it moved since it was last told.
    fn tell_liveness(&mut self) {
        self.liveness_told_at = Instant::now();
        if !self.setup.show.wants_liveness() {
            return;
        }
        let (Some((consumer, _)), Some(watchdog)) = (&self.consumer, &mut self.setup.watchdog) else { return };
        if let Some(snapshot) = watchdog.snapshot() {
            let _ = consumer.send(ConsumerEvent::Liveness(Box::new(snapshot)));
        }
    }

    /// To the outlets, then the consumer.
    fn forward(&mut self, event: ConsumerEvent) {
        if let Some(outlets) = &mut self.setup.outlets {
            outlets.publish(&event);
        }
        if let Some((consumer, _)) = &self.consumer {
            // A consumer that has gone (the dashboard was dismissed) needs nothing more.
            let _ = consumer.send(event);
        }
    }

    /// The one ending: the last samples, the end to every outlet and the consumer, the results file's
    /// status, the final tables, Prometheus's last figures.
    fn end(mut self, outcome: Result<(), ExperimentError>, abandoned: bool, inputs: &Receiver<Input>) -> Ending {
        if let Some(watchdog) = &mut self.setup.watchdog {
            watchdog.run_over = true;
        }
        // The last samples drain through the collector before the end is told: each rank closes its
        // telemetry after its last sample, so once every rank has closed nothing is left in flight. A rank
        // that never closes (hung, or its host gone) is waited for only so long.
        if self.setup.watchdog.is_some() {
            let limit = if outcome.is_ok() { DRAIN_LIMIT } else { self.setup.interval.min(Duration::from_millis(200)) };
            let until = Instant::now() + limit;
            while !self.setup.watchdog.as_ref().is_some_and(Watchdog::every_rank_closed) {
                let Some(left) = until.checked_duration_since(Instant::now()) else { break };
                match inputs.recv_timeout(left.min(Duration::from_millis(20))) {
                    Ok(input @ (Input::Telemetry(_) | Input::Experiment(_) | Input::Sweep(_))) => self.fold(input),
                    Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
        }
        let refused = self.setup.collector.as_ref().map_or(0, Collector::refused);
        if refused > 0 {
            let note = format!(
                "rank 0's collector refused {refused} connection(s): no proof of the run's secret, or beyond the run's world"
            );
            self.setup.results.metadata.notes.push(note.clone());
            self.forward(ConsumerEvent::Note(note));
        }
        self.tell_liveness();
        let error = outcome.as_ref().err().map(ToString::to_string);
        self.forward(ConsumerEvent::Finished { error: error.clone() });
        let consumer_outcome = self.consumer.take().map(|(sender, handle)| {
            drop(sender);
            handle.join().unwrap_or_else(|_| ConsumerOutcome::Failed("the display thread panicked".into()))
        });
        drop(self.setup.collector.take());
        if let Some(outlets) = self.setup.outlets.take() {
            outlets.finish();
        }
        let results = &mut self.setup.results;
        results.status = Some(match &error {
            None => RunStatus { state: RunState::Complete, reason: None },
            Some(reason) => RunStatus { state: RunState::Failed, reason: Some(reason.clone()) },
        });
        if let Err(err) = self.setup.file.save(results) {
            eprintln!("efatop: warning: cannot record the run's end: {err}");
        }
        let path: &Path = &self.setup.file.path;
        self.setup.show.finish(results, &self.setup.sizes, path, consumer_outcome);
        if let Some(url) = &self.setup.pushgateway {
            if let Err(err) = crate::run_metrics::push(url, results, self.setup.metrics.as_ref()) {
                eprintln!("efatop: warning: --pushgateway {url}: {err}");
            }
        }
        if let Some(metrics) = self.setup.metrics.take() {
            metrics.finish(results, crate::run_metrics::LINGER);
        }
        let code = match (outcome, self.save_error) {
            (Err(err), _) | (Ok(()), Some(err)) => Err(err),
            (Ok(()), None) => {
                let suspects = results.sweep.as_ref().and_then(|s| s.verdict.as_ref()).is_some_and(|v| !v.suspects.is_empty());
                Ok(if suspects { SUSPECTS_FOUND } else { 0 })
            }
        };
        drop(self.setup.release);
        Ending { code, abandoned }
    }
}

#[cfg(test)]
mod tests;
