//! Rank 0's dashboard as one fold: [`App::update`] takes one [`Event`] at a time (the run's events on
//! their one channel, keys, the redraw tick) with the time it happened, and says what the session must do
//! ([`Effect`]). Pure state changes: nothing here reads a clock, a terminal or a socket, so a test drives
//! it with scripted samples and keys.
//!
//! The data (what the run measured, folded by [`Ingest`]) is kept apart from the view (focus, selection,
//! overlays, freezing): `p` freezes a copy of the data only, and keys keep acting on the view drawn over it.

use std::time::Duration;

use efatop_proto::sizes::format_size;
use efatop_proto::events::{CollectorEvent, ConsumerEvent, RunStart};

use crate::ingest::Ingest;
use crate::state::{Action, DashboardState, Key, LogLevel};
use crate::view::View;
use efatop_proto::liveness::Liveness;

/// Everything the fold hears.
#[derive(Debug)]
pub enum Event {
    /// From the run's one channel: telemetry frames (through the collector) and the experiment's events.
    Run(ConsumerEvent),
    /// Every sender of the run's channel is gone: the run is over.
    RunGone,
    Key(Key),
    /// Ctrl-C on the dashboard (raw mode delivers it as a key): quit, as `q` does.
    Interrupt,
    /// The redraw tick: the liveness clock moves on.
    Tick,
}

/// What the session must do after an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Ask every rank to stop after the round in progress (the user quit mid-run).
    StopRun,
    /// Leave the dashboard.
    Exit(Ended),
}

/// How the dashboard ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The run finished and the user dismissed the final view.
    Dismissed,
    /// The user quit while the run was going on.
    Quit,
}

pub struct App {
    /// The run's data as it stands; only the run's events change it.
    data: DashboardState,
    /// `p`: a copy of the data as it stood when frozen (bottom's `FrozenState`), drawn instead of the
    /// live data while the view says frozen.
    frozen: Option<Box<DashboardState>>,
    /// What the user looks at; only keys change it.
    view: View,
    ingest: Ingest,
    /// The liveness clock: this dashboard's copy of rank 0's, replaced by each copy the run tells
    /// ([`ConsumerEvent::Liveness`]); a viewer moves it on itself ([`App::liveness_mut`]). Read on every tick.
    liveness: Liveness,
    quit_requested: bool,
}

impl App {
    /// `state` as [`Ingest::begin`] set it up for the run.
    pub fn new(state: DashboardState, ingest: Ingest, liveness: Liveness) -> Self {
        let view = View::of(&state);
        Self { data: state, frozen: None, view, ingest, liveness, quit_requested: false }
    }

    /// The dashboard of the run `start` describes, as it stands before the run's first event (a viewer
    /// starts from the run's first event this way; rank 0 from what it is about to send).
    pub fn for_run(start: RunStart, liveness: Liveness) -> Self {
        let mut state = DashboardState::default();
        let ingest = begin(&mut state, start);
        Self::new(state, ingest, liveness)
    }

    /// The liveness clock, for a session that keeps it from the telemetry itself (a viewer).
    pub fn liveness_mut(&mut self) -> &mut Liveness {
        &mut self.liveness
    }

    /// Shows `line` on the progress line (who else watches the run, or where this view's events come
    /// from); `alert` draws it in colour.
    pub fn set_source(&mut self, line: Option<crate::state::SourceLine>) {
        self.data.source.clone_from(&line);
        if let Some(frozen) = &mut self.frozen {
            frozen.source = line;
        }
    }

    /// Keys the session adds to the help overlay (a replay's playback keys).
    pub fn add_help(&mut self, keys: &'static [(&'static str, &'static str)]) {
        self.view.extra_keys = keys;
    }

    /// Folds one event that happened at `now` (time since the run started).
    pub fn update(&mut self, event: Event, now: Duration) -> Vec<Effect> {
        let effects = match event {
            Event::Run(ConsumerEvent::Liveness(clock)) => {
                self.liveness = *clock;
                Vec::new()
            }
            Event::Run(event) => {
                self.apply(event, now);
                Vec::new()
            }
            Event::RunGone => {
                self.data.finished = true;
                self.after_run_event()
            }
            Event::Tick => {
                if !self.data.finished {
                    self.ingest.tick(&mut self.data, now, &self.liveness);
                }
                self.after_run_event()
            }
            Event::Interrupt => self.quit(now),
            Event::Key(key) => self.key(key, now),
        };
        // A run that ends while frozen says so.
        if let Some(frozen) = &mut self.frozen {
            frozen.finished = self.data.finished;
        }
        effects
    }

    /// A key changes the view (over the data drawn, live or frozen), never the data; `p` freezes a copy
    /// of the data or lets it go.
    fn key(&mut self, key: Key, now: Duration) -> Vec<Effect> {
        let shown = self.frozen.as_deref().unwrap_or(&self.data);
        if crate::dashboard::handle_key(&mut self.view, shown, key) == Action::Quit {
            return self.quit(now);
        }
        match (self.view.frozen, self.frozen.is_some()) {
            // Frozen: a copy of the data stays on screen while the live data goes on.
            (true, false) => self.frozen = Some(Box::new(self.data.clone())),
            (false, true) => self.frozen = None,
            _ => {}
        }
        Vec::new()
    }

    /// The data to draw (live, or the copy frozen by `p`) and the view to draw it under.
    pub fn shown(&self) -> (&DashboardState, &View) {
        (self.frozen.as_deref().unwrap_or(&self.data), &self.view)
    }

    /// What the user looks at.
    pub fn view(&self) -> &View {
        &self.view
    }

    /// Opens the dashboard on `view` (a run told again from its start keeps what the user looked at);
    /// unfrozen, since there is no copy of this data yet.
    pub fn keep_view(&mut self, view: View) {
        self.view = View { frozen: false, ..view };
        self.frozen = None;
    }

    /// Draws the dashboard over the frame.
    pub fn draw(&self, frame: &mut ratatui::Frame) {
        let (data, view) = self.shown();
        crate::dashboard::draw(frame, data, view);
    }

    /// Once the run has ended, a quit asked for earlier leaves.
    fn after_run_event(&self) -> Vec<Effect> {
        if self.data.finished && self.quit_requested {
            vec![Effect::Exit(Ended::Quit)]
        } else {
            Vec::new()
        }
    }

    fn quit(&mut self, now: Duration) -> Vec<Effect> {
        if self.data.finished {
            return vec![Effect::Exit(Ended::Dismissed)];
        }
        if self.quit_requested {
            return Vec::new();
        }
        self.quit_requested = true;
        self.data.push_log(now, LogLevel::Warn, "stopping: every rank ends after the round in progress");
        vec![Effect::StopRun]
    }

    fn apply_telemetry(&mut self, event: CollectorEvent, now: Duration) {
        let state = &mut self.data;
        match event {
            CollectorEvent::Sample(sample) => self.ingest.sample(state, &sample, now),
            // Only `efatop monitor` sends node snapshots; a benchmark's ranks never do. Phases reach the rank
            // table through the liveness clock, which the watchdog keeps.
            CollectorEvent::Node(_) | CollectorEvent::Phase(_) => {}
            CollectorEvent::Malformed { from, reason } => {
                state.push_log(now, LogLevel::Warn, format!("telemetry frame from {from} rejected: {reason}"));
            }
            CollectorEvent::Refused { from, reason, total } => {
                state.push_log(now, LogLevel::Warn, format!("telemetry connection from {from} refused: {reason} ({total} refused so far)"));
            }
            CollectorEvent::Closed { rank: Some(rank), .. } => {
                let finished = state.progress.done >= state.progress.total;
                Ingest::closed(state, rank as usize, finished);
                if !finished {
                    state.push_log(now, LogLevel::Error, format!("rank {rank}: telemetry connection closed mid-run"));
                }
            }
            CollectorEvent::Closed { rank: None, from } => {
                state.push_log(now, LogLevel::Warn, format!("telemetry connection from {from} closed before its first sample"));
            }
        }
    }

    /// A sweep round finished: the heatmap takes its figures, progress moves on, and channels that have
    /// just become suspects are logged in red.
    fn sweep_round(&mut self, round: efatop_proto::sweep::SweepRound, now: Duration) {
        let Some(view) = &mut self.data.sweep else { return };
        let before = view.suspect.clone();
        let line = match round.round.kind {
            efatop_proto::sweep::RoundKind::Pairing => format!("sweep round {}: {}", round.round.index + 1, efatop_proto::words::plural(round.round.pairs.len(), "pair")),
            efatop_proto::sweep::RoundKind::CrossRail => format!(
                "sweep round {} (cross-rail: NIC k with NIC k+1 of the same peer): {}",
                round.round.index + 1,
                efatop_proto::words::plural(round.round.pairs.len(), "pair")
            ),
            efatop_proto::sweep::RoundKind::Retest => format!(
                "sweep retest round {}{}: {}",
                round.round.index + 1,
                if round.round.shift > 0 { " (cross-rail)" } else { "" },
                efatop_proto::words::plural(round.round.pairs.len(), "pair")
            ),
        };
        view.round(round);
        let (done, planned) = view.progress();
        let mut fresh = Vec::new();
        for (rank, (now_row, before_row)) in view.suspect.iter().zip(&before).enumerate() {
            for (rail, (&is, &was)) in now_row.iter().zip(before_row).enumerate() {
                if is && !was {
                    let host = view.record.nodes.get(rank).map_or("", |n| n.host.as_str());
                    let nic = view.record.nodes.get(rank).and_then(|n| n.nics.get(rail)).map_or("?", |n| n.name.as_str());
                    fresh.push(format!("suspect: rank {rank} ({host}) {nic}, slow with every peer so far"));
                }
            }
        }
        self.data.progress.done = done.min(planned);
        self.data.progress.total = planned;
        self.data.push_log(now, LogLevel::Info, line);
        for text in fresh {
            self.data.push_log(now, LogLevel::Error, text);
        }
    }

    fn apply(&mut self, event: ConsumerEvent, now: Duration) {
        match event {
            ConsumerEvent::Run(start) => {
                // A run told again from its start (a viewer's stream): the data starts over, the view stays.
                let mut state = DashboardState { source: self.data.source.take(), ..DashboardState::default() };
                self.ingest = begin(&mut state, *start);
                self.data = state;
            }
            ConsumerEvent::Telemetry(events) => {
                for event in events {
                    self.apply_telemetry(event, now);
                }
            }
            ConsumerEvent::Begin { columns, memory } => {
                let state = &mut self.data;
                if let Some(results) = &mut state.results {
                    results.configs.clone_from(&columns);
                }
                state.run.configs = columns;
                state.run.memory.clone_from(&memory);
                if state.run.configs.iter().any(efatop_proto::Column::is_staged) {
                    state.push_log(now, LogLevel::Warn, "GPU memory staged through pinned host memory (the provider cannot register it, or --staged)");
                }
            }
            ConsumerEvent::Step { config, size } => Ingest::step(&mut self.data, &config, size),
            // The heatmap follows the live samples; the final matrices go to the results file and JSON.
            ConsumerEvent::PairMatrix(_) => {}
            ConsumerEvent::Note(line) => self.data.push_log(now, LogLevel::Info, line),
            ConsumerEvent::SweepBegin(setup) => {
                for note in &setup.notes {
                    self.data.push_log(now, LogLevel::Warn, note.clone());
                }
                self.data.sweep = Some(crate::state::sweep::SweepView::begin(*setup, self.data.run.channels));
            }
            ConsumerEvent::SweepRound(round) => self.sweep_round(*round, now),
            ConsumerEvent::SweepVerdict(verdict) => {
                let line = match verdict.suspects.len() {
                    0 => format!("verdict: no suspects ({})", verdict.checked.describe()),
                    n => format!("verdict: {n} suspect{} ({})", if n == 1 { "" } else { "s" }, verdict.checked.describe()),
                };
                let level = if verdict.suspects.is_empty() { LogLevel::Info } else { LogLevel::Error };
                self.data.push_log(now, level, line);
                if let Some(view) = &mut self.data.sweep {
                    view.verdict(*verdict);
                }
            }
            ConsumerEvent::Measured(measurement) => {
                let mut line = format!("{} {}: {:.2} Gbps, data verified", measurement.config, format_size(measurement.size), measurement.gbps);
                // The step's NIC/app figure on the same line; each NIC-counter warning once while it is in
                // the log (every step's own are in the results file and JSON).
                if let Some(counters) = &measurement.counters {
                    line.push_str("; ");
                    line.push_str(&counters.summary());
                }
                Ingest::measured(&mut self.data, &measurement, now);
                self.data.push_log(now, LogLevel::Info, line);
                for warning in measurement.counters.iter().flat_map(|c| &c.warnings) {
                    if !self.data.log.iter().any(|logged| logged.text == warning.headline) {
                        self.data.push_log(now, LogLevel::Warn, warning.headline.clone());
                    }
                }
            }
            ConsumerEvent::Finished { error } => {
                self.data.finished = true;
                match error {
                    Some(text) => self.data.push_log(now, LogLevel::Error, text),
                    None => self.data.push_log(now, LogLevel::Info, "run complete: press any key"),
                }
            }
            ConsumerEvent::Liveness(clock) => self.liveness = *clock,
        }
    }
}

/// Sets `state` up for the run `start` describes: what [`Ingest::begin`] sets, the run's notes in the log,
/// and, when rank 0 serves the run, where (in colour when beyond this host).
fn begin(state: &mut DashboardState, start: RunStart) -> Ingest {
    let RunStart { info, nics, results, serving, .. } = start;
    let notes = results.metadata.notes.clone();
    let ingest = Ingest::begin(state, info, &nics, results);
    for note in notes {
        state.push_log(Duration::ZERO, LogLevel::Warn, note);
    }
    if let Some(address) = serving {
        let everywhere = !address.ip().is_loopback();
        let text = if everywhere { format!("serving on {address} (beyond this host)") } else { format!("serving on {address}") };
        state.source = Some(crate::state::SourceLine { text, alert: everywhere });
    }
    ingest
}
