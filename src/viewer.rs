//! What `efatop attach` and `efatop replay` share: a run's events told from elsewhere (a served run's
//! stream, a recording), folded by the same [`App`] rank 0's dashboard uses, or printed by the same JSON
//! printer as the run's own `--json`; and what the run measured, gathered from those events for the
//! final tables and the JSON summary.

use std::time::Duration;

use efatop_proto::results::{RunResults, RunState, RunStatus};
use efatop_proto::liveness::Liveness;
use efatop_ui::monitor::NodesView;
use efatop_ui::state::{Key, SourceLine};
use ratatui::Frame;

use efatop_ui::app::{App, Effect, Event};
use efatop_proto::events::CollectorEvent;
use efatop_proto::events::{ConsumerEvent, RunStart};
use crate::printer::jsonl::{self, SampleLines};
use crate::printer::{Mode, plain};
use efatop_ui::tui::{Source, Tui};

/// What the run measured, as its events tell it: its start's results, then the columns, every
/// measurement and pair matrix, and how it ended.
#[derive(Default)]
pub struct Tally {
    pub results: RunResults,
    pub sizes: Vec<u64>,
    /// The run's end, once told.
    pub ended: Option<RunEnd>,
}

/// How a watched run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEnd {
    Complete,
    Failed(String),
}

impl Tally {
    pub fn add(&mut self, event: &ConsumerEvent) {
        match event {
            ConsumerEvent::Run(start) => {
                self.results = start.results.clone();
                self.sizes.clone_from(&start.info.sizes);
            }
            ConsumerEvent::Begin { columns, memory } => {
                self.results.configs.clone_from(columns);
                self.results.metadata.memory.clone_from(memory);
            }
            ConsumerEvent::Measured(measurement) => self.results.measurements.push((**measurement).clone()),
            ConsumerEvent::PairMatrix(matrix) => self.results.pair_matrices.push((**matrix).clone()),
            ConsumerEvent::Finished { error } => {
                self.results.status = Some(match error {
                    None => RunStatus { state: RunState::Complete, reason: None },
                    Some(reason) => RunStatus { state: RunState::Failed, reason: Some(reason.clone()) },
                });
                self.ended = Some(error.clone().map_or(RunEnd::Complete, RunEnd::Failed));
            }
            ConsumerEvent::SweepBegin(setup) => self.results.sweep = Some((**setup).clone()),
            ConsumerEvent::SweepRound(round) => {
                if let Some(sweep) = self.results.sweep.as_mut() {
                    sweep.rounds.push((**round).clone());
                }
            }
            ConsumerEvent::SweepVerdict(verdict) => {
                if let Some(sweep) = self.results.sweep.as_mut() {
                    sweep.verdict = Some((**verdict).clone());
                }
            }
            ConsumerEvent::Telemetry(_) | ConsumerEvent::Step { .. } | ConsumerEvent::Note(_) | ConsumerEvent::Liveness(_) => {}
        }
    }

    /// Exit code of a viewer, as the run it watched ended: 1 when it failed, 3 when it was a sweep that
    /// found suspects, else 0.
    pub fn exit_code(&self) -> i32 {
        let suspects = self.results.sweep.as_ref().and_then(|s| s.verdict.as_ref()).is_some_and(|v| !v.suspects.is_empty());
        match self.ended {
            Some(RunEnd::Failed(_)) => 1,
            Some(RunEnd::Complete) if suspects => efatop_runtime::rank_zero::SUSPECTS_FOUND,
            _ => 0,
        }
    }

    /// The tables a dashboard leaves on the terminal when it closes, as the run's own does.
    pub fn print_tables(&self) {
        if self.results.metadata.experiment == efatop_proto::Experiment::Unknown {
            return;
        }
        plain::print_final(Mode::Dashboard, &self.results, &self.sizes, None);
    }
}

/// `--json` of a viewer: every event as the run's own `--json` prints it, then its summary line.
#[derive(Default)]
pub struct JsonViewer {
    lines: SampleLines,
    pub tally: Tally,
}

impl JsonViewer {
    pub fn event(&mut self, event: ConsumerEvent, at: Duration) {
        self.tally.add(&event);
        if jsonl::print_event(event, at, &mut self.lines) {
            jsonl::print_summary(&self.tally.results);
        }
    }
}

/// A dashboard over events told from elsewhere.
pub struct Watched {
    pub app: App,
    /// A served or recorded `efatop monitor`: its nodes' view, drawn instead of the benchmark's.
    nodes: Option<NodesView>,
    pub tally: Tally,
}

impl Watched {
    /// The dashboard of the run `start` describes, told `at` in the run: its liveness clock counts a rank's
    /// silence from then, as rank 0's counts from its telemetry round just before (not from rank 0's start).
    pub fn new(start: &RunStart, at: Duration) -> Self {
        let interval = Duration::from_millis(start.interval_ms.max(10));
        let hang_timeout = Duration::from_secs(start.results.metadata.hang_timeout_s.max(1));
        let app = App::for_run(start.clone(), Liveness::new(start.info.ranks, interval, hang_timeout).counting_from(at));
        let mut tally = Tally::default();
        tally.add(&ConsumerEvent::Run(Box::new(start.clone())));
        let nodes = (start.info.experiment == efatop_runtime::serve::MONITOR).then(|| NodesView::new("", start.info.ranks.max(1)));
        Self { app, nodes, tally }
    }

    /// Folds one event that happened `at` after the run started, as rank 0's session does (the liveness
    /// clock, the dashboard's own here, moves on with its telemetry first, as the watchdog moves rank 0's).
    pub fn fold(&mut self, event: ConsumerEvent, at: Duration) {
        if let ConsumerEvent::Telemetry(batch) = &event {
            for telemetry in batch {
                efatop_runtime::watchdog::note_telemetry(self.app.liveness_mut(), telemetry, at);
                if let (Some(nodes), CollectorEvent::Node(sample)) = (&mut self.nodes, telemetry) {
                    nodes.push(sample.rank, (**sample).clone());
                }
            }
        }
        self.tally.add(&event);
        self.app.update(Event::Run(event), at);
    }
}

/// What a viewer's feed says: the run's events as they are due, and of itself.
#[derive(Debug)]
pub enum Fed {
    /// One of the run's events; `at` is its time in the run.
    Event(Duration, ConsumerEvent),
    /// The run's time now, as the feed tells it (a live stream's clock runs on from its last event; a
    /// replay's is the playback's).
    Clock(Duration),
    /// What the progress line says about the feed (`attached to ...`, `replay 4x PAUSED, step 3/9`).
    Source(SourceLine),
    /// The run is told again from its start (a replay stepping back).
    Restart,
}

/// A viewer's dashboard (`efatop attach`, `efatop replay`) as the TUI loop drives it: the run's dashboard
/// once its start has arrived, or a served `efatop monitor`'s nodes. A viewer never stops the run: `q`
/// leaves it.
pub struct Viewer {
    /// `None` until the run's start.
    pub watched: Option<Watched>,
    /// The run's time, as the feed last told it.
    at: Duration,
    source: SourceLine,
    /// Keys the feed adds to the help overlay.
    keys: &'static [(&'static str, &'static str)],
    /// What the user looked at when the run was told again from its start: kept for the run told anew.
    kept: Option<efatop_ui::view::View>,
}

impl Viewer {
    pub fn new(keys: &'static [(&'static str, &'static str)]) -> Self {
        Self { watched: None, at: Duration::ZERO, source: SourceLine::default(), keys, kept: None }
    }

    /// Folds `event` that happened `at` in the run, starting the dashboard at the run's start.
    fn take(&mut self, event: ConsumerEvent, at: Duration) {
        match (self.watched.as_mut(), event) {
            (None, ConsumerEvent::Run(start)) => {
                let mut fresh = Watched::new(&start, at);
                fresh.app.add_help(self.keys);
                if let Some(view) = self.kept.take() {
                    fresh.app.keep_view(view);
                }
                self.watched = Some(fresh);
            }
            (Some(watched), event) => watched.fold(event, at),
            // Nothing before the run's start can be shown.
            (None, _) => {}
        }
    }
}

impl Tui for Viewer {
    type Event = Fed;
    type Ended = ();

    fn event(&mut self, fed: Fed, _now: Duration) -> Option<()> {
        match fed {
            Fed::Event(at, event) => self.take(event, at),
            Fed::Clock(at) => self.at = at,
            Fed::Source(line) => self.source = line,
            Fed::Restart => {
                if let Some(watched) = self.watched.take() {
                    self.kept = Some(watched.app.view().clone());
                }
            }
        }
        None
    }

    fn tick(&mut self, _now: Duration) -> Option<()> {
        if let Some(watched) = self.watched.as_mut().filter(|watched| watched.nodes.is_none()) {
            watched.app.update(Event::Tick, self.at);
            watched.app.set_source(Some(self.source.clone()));
        }
        None
    }

    fn key(&mut self, key: Key, _now: Duration) -> Option<()> {
        let Some(shown) = &mut self.watched else {
            return matches!(key, Key::Char('q') | Key::Esc).then_some(());
        };
        if let Some(nodes) = &mut shown.nodes {
            return (nodes.handle_key(key) == efatop_ui::state::Action::Quit).then_some(());
        }
        if matches!(key, Key::Char('q')) || (key == Key::Esc && !shown.app.view().show_help) {
            return Some(());
        }
        shown.app.update(Event::Key(key), self.at).iter().any(|effect| matches!(effect, Effect::Exit(_))).then_some(())
    }

    fn interrupt(&mut self, _now: Duration) -> Option<()> {
        Some(())
    }

    fn draw(&self, frame: &mut Frame) {
        match &self.watched {
            Some(Watched { nodes: Some(nodes), .. }) => efatop_ui::monitor::draw_nodes(frame, nodes),
            Some(watched) => watched.app.draw(frame),
            None => {
                let waiting = efatop_ui::state::DashboardState { source: Some(self.source.clone()), ..Default::default() };
                efatop_ui::dashboard::draw(frame, &waiting, &efatop_ui::view::View::of(&waiting));
            }
        }
    }
}

/// A viewer's dashboard on this terminal (`efatop attach`, `efatop replay`): drawn from `feed` until the run
/// ends and a key is pressed, or the user leaves; then the final tables stay on the terminal, as a run's own
/// do. `keys` are the feed's, for the help overlay. Returns the viewer's exit code: the watched run's, or
/// `nothing_seen` when the user left before the run said anything.
pub fn show(feed: &mut impl Source<Event = Fed>, keys: &'static [(&'static str, &'static str)], command: &str, nothing_seen: i32) -> i32 {
    let mut viewer = Viewer::new(keys);
    let started = std::time::Instant::now();
    match crate::tui::on_terminal(&mut viewer, feed, || started.elapsed()) {
        Ok(()) => match viewer.watched {
            Some(watched) => {
                watched.tally.print_tables();
                watched.tally.exit_code()
            }
            None => nothing_seen,
        },
        Err(err) => {
            eprintln!("efatop: error: {command}: the dashboard failed: {err}");
            1
        }
    }
}

#[cfg(test)]
pub mod script;
