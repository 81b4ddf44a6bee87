//! What `efatop attach` and `efatop replay` share: a run's events told from elsewhere (a served run's
//! stream, a recording), folded by the same [`App`] rank 0's dashboard uses, or printed by the same JSON
//! printer as the run's own `--json`; and what the run measured, gathered from those events for the
//! final tables and the JSON summary.

use std::time::Duration;

use efatop_proto::results::{RunResults, RunState, RunStatus};
use efatop_ui::liveness::Liveness;
use efatop_ui::state::{Key, SourceLine};
use ratatui::Terminal;
use ratatui::backend::Backend;

use efatop_ui::monitor::NodesView;

use crate::app::{App, Effect, Event};
use crate::collector::CollectorEvent;
use crate::event::{ConsumerEvent, RunStart};
use crate::printer::jsonl::{self, SampleLines};
use crate::printer::{Mode, plain};
use crate::term::KeyPoll;
use crate::watchdog::SharedLiveness;

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
            ConsumerEvent::Telemetry(_) | ConsumerEvent::Step { .. } | ConsumerEvent::Note(_) => {}
        }
    }

    /// Exit code of a viewer, as the run it watched ended: 1 when it failed, 3 when it was a sweep that
    /// found suspects, else 0.
    pub fn exit_code(&self) -> i32 {
        let suspects = self.results.sweep.as_ref().and_then(|s| s.verdict.as_ref()).is_some_and(|v| !v.suspects.is_empty());
        match self.ended {
            Some(RunEnd::Failed(_)) => 1,
            Some(RunEnd::Complete) if suspects => crate::experiment::SUSPECTS_FOUND,
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
    liveness: SharedLiveness,
    pub tally: Tally,
}

impl Watched {
    /// The dashboard of the run `start` describes.
    pub fn new(start: &RunStart) -> Self {
        let interval = Duration::from_millis(start.interval_ms.max(10));
        let hang_timeout = Duration::from_secs(start.results.metadata.hang_timeout_s.max(1));
        let liveness = SharedLiveness::new(Liveness::new(start.info.ranks, interval, hang_timeout));
        let app = App::for_run(start.clone(), liveness.clone());
        let mut tally = Tally::default();
        tally.add(&ConsumerEvent::Run(Box::new(start.clone())));
        let nodes = (start.info.experiment == crate::serve::MONITOR).then(|| NodesView::new("", start.info.ranks.max(1)));
        Self { app, nodes, liveness, tally }
    }

    /// Folds one event that happened `at` after the run started, as rank 0's session does (the liveness
    /// clock moves on with its telemetry first, as the watchdog moves it).
    pub fn fold(&mut self, event: ConsumerEvent, at: Duration) {
        if let ConsumerEvent::Telemetry(batch) = &event {
            let mut live = self.liveness.lock();
            for telemetry in batch {
                crate::watchdog::note_telemetry(&mut live, telemetry, at);
                if let (Some(nodes), CollectorEvent::Node(sample)) = (&mut self.nodes, telemetry) {
                    nodes.push(sample.rank, (**sample).clone());
                }
            }
        }
        self.tally.add(&event);
        self.app.update(Event::Run(event), at);
    }
}

/// Where a viewer's dashboard gets its events.
pub trait Feed {
    /// Folds whatever is due into `watched` (made at the run's start); returns the run's time now.
    fn advance(&mut self, watched: &mut Option<Watched>) -> Duration;
    /// Takes a key for itself (playback keys); false leaves it to the dashboard.
    fn key(&mut self, key: Key, watched: &mut Option<Watched>) -> bool;
    /// What the progress line says about the feed.
    fn source(&self) -> SourceLine;
}

/// Folds `event` into `watched`, starting the dashboard at the run's start.
pub fn take(watched: &mut Option<Watched>, event: ConsumerEvent, at: Duration, keys: &[(&'static str, &'static str)]) {
    match (watched.as_mut(), event) {
        (None, ConsumerEvent::Run(start)) => {
            let mut fresh = Watched::new(&start);
            fresh.app.add_help(keys);
            *watched = Some(fresh);
        }
        (Some(watched), event) => watched.fold(event, at),
        // Nothing before the run's start can be shown.
        (None, _) => {}
    }
}

/// The viewer's session loop on any backend, until the user leaves (a viewer never stops the run: `q`
/// leaves it) or dismisses the finished run's tables. Returns what was watched.
/// A viewer's dashboard on this terminal (`efatop attach`, `efatop replay`): drawn from `feed` until the run
/// ends and a key is pressed, or the user leaves; then the final tables stay on the terminal, as a run's own
/// do. Returns the viewer's exit code: the watched run's, or `nothing_seen` when the user left before the run
/// said anything.
pub fn show(feed: &mut impl Feed, command: &str, nothing_seen: i32) -> i32 {
    let watched = match crate::term::TerminalGuard::enter() {
        Ok((guard, mut terminal)) => {
            let watched = dashboard(&mut terminal, feed, || crate::term::next_key(crate::printer::dashboard::TICK));
            drop(guard);
            watched
        }
        Err(err) => Err(err),
    };
    match watched {
        Ok(Some(watched)) => {
            watched.tally.print_tables();
            watched.tally.exit_code()
        }
        Ok(None) => nothing_seen,
        Err(err) => {
            eprintln!("efatop: error: {command}: the dashboard failed: {err}");
            1
        }
    }
}

pub fn dashboard<B: Backend>(
    terminal: &mut Terminal<B>,
    feed: &mut impl Feed,
    mut keys: impl FnMut() -> std::io::Result<KeyPoll>,
) -> std::io::Result<Option<Watched>>
where
    B::Error: Send + Sync + 'static,
{
    let mut watched: Option<Watched> = None;
    let waiting = efatop_ui::state::DashboardState::default();
    loop {
        let now = feed.advance(&mut watched);
        let source = feed.source();
        if let Some(nodes) = watched.as_ref().and_then(|watched| watched.nodes.as_ref()) {
            terminal.draw(|frame| efatop_ui::monitor::draw_nodes(frame, nodes)).map_err(std::io::Error::other)?;
        } else if let Some(watched) = &mut watched {
            watched.app.update(Event::Tick, now);
            watched.app.set_source(Some(source));
            terminal.draw(|frame| efatop_ui::dashboard::draw(frame, watched.app.shown())).map_err(std::io::Error::other)?;
        } else {
            let shown = efatop_ui::state::DashboardState { source: Some(source), ..waiting.clone() };
            terminal.draw(|frame| efatop_ui::dashboard::draw(frame, &shown)).map_err(std::io::Error::other)?;
        }
        let key = match keys()? {
            KeyPoll::Nothing => continue,
            KeyPoll::Interrupt => return Ok(watched),
            KeyPoll::Key(key) => key,
        };
        if feed.key(key, &mut watched) {
            continue;
        }
        let Some(shown) = &mut watched else {
            if matches!(key, Key::Char('q') | Key::Esc) {
                return Ok(None);
            }
            continue;
        };
        if let Some(nodes) = &mut shown.nodes {
            if nodes.handle_key(key) == efatop_ui::state::Action::Quit {
                return Ok(watched);
            }
            continue;
        }
        let help_open = shown.app.shown().show_help;
        if matches!(key, Key::Char('q')) || (key == Key::Esc && !help_open) {
            return Ok(watched);
        }
        if shown.app.update(Event::Key(key), now).iter().any(|effect| matches!(effect, Effect::Exit(_))) {
            return Ok(watched);
        }
    }
}
