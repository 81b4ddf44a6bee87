//! The live dashboard on rank 0: owns the terminal (raw mode, alternate screen), folds events into the
//! dashboard state, redraws on a fixed tick and maps keys. The terminal is restored on every way out:
//! normal return, error, and panic.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use efatop_ui::ingest::Ingest;
use efatop_ui::state::{Action, DashboardState, LogLevel};

use crate::event::ConsumerEvent;
use crate::term::{KeyPoll, TerminalGuard, next_key};
use crate::collector::CollectorEvent;

/// Frames per second of the redraw tick.
const TICK: Duration = Duration::from_millis(50);

/// How the dashboard ended.
pub enum Ended {
    /// The run finished and the user dismissed the final view.
    Dismissed,
    /// The user quit while the run was going on.
    Quit,
}

/// Runs the dashboard until the run has finished and a key was pressed (or the user quit and the run has
/// stopped). `stop` is raised when the user asks to quit.
pub fn run(
    events: &Receiver<ConsumerEvent>,
    mut state: DashboardState,
    mut ingest: Ingest,
    stop: &Arc<AtomicBool>,
    started: Instant,
    liveness: &crate::watchdog::SharedLiveness,
) -> std::io::Result<Ended> {
    let (_guard, mut terminal) = TerminalGuard::enter()?;
    let mut frozen_view: Option<DashboardState> = None;
    let mut quit_requested = false;
    loop {
        let now = started.elapsed();
        loop {
            match events.try_recv() {
                Ok(event) => apply(&mut state, &mut ingest, event, now),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    state.finished = true;
                    break;
                }
            }
        }
        if !state.finished {
            ingest.tick(&mut state, now, &liveness.lock());
        }
        if state.finished && quit_requested {
            return Ok(Ended::Quit);
        }
        let view = match (&mut frozen_view, state.frozen) {
            (Some(view), true) => {
                // Keys still act on what is drawn; only the data stays still.
                view.frozen = true;
                view.focus = state.focus;
                view.show_help = state.show_help;
                view.selected_rank = state.selected_rank;
                view.selected_channel = state.selected_channel;
                view.finished = state.finished;
                &*view
            }
            (slot, true) => &*slot.insert(state.clone()),
            (slot, false) => {
                *slot = None;
                &state
            }
        };
        terminal.draw(|frame| efatop_ui::dashboard::draw(frame, view))?;
        let action = match next_key(TICK)? {
            KeyPoll::Nothing => Action::None,
            KeyPoll::Interrupt => Action::Quit,
            KeyPoll::Key(key) => efatop_ui::dashboard::handle_key(&mut state, key),
        };
        if action == Action::Quit {
            if state.finished {
                return Ok(Ended::Dismissed);
            }
            if !quit_requested {
                quit_requested = true;
                stop.store(true, Ordering::Relaxed);
                state.push_log(now, LogLevel::Warn, "stopping: every rank ends after the round in progress");
            }
        }
    }
}

fn apply_telemetry(state: &mut DashboardState, ingest: &mut Ingest, event: CollectorEvent, now: Duration) {
    match event {
        CollectorEvent::Sample(sample) => ingest.sample(state, &sample, now),
        // Only `efatop monitor` sends node snapshots; a benchmark's ranks never do. Phases reach the rank
        // table through the liveness clock, which the watchdog keeps.
        CollectorEvent::Node(_) | CollectorEvent::Phase(_) => {}
        CollectorEvent::Malformed { from, reason } => {
            state.push_log(now, LogLevel::Warn, format!("telemetry frame from {from} rejected: {reason}"));
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

fn apply(state: &mut DashboardState, ingest: &mut Ingest, event: ConsumerEvent, now: Duration) {
    match event {
        ConsumerEvent::Telemetry(events) => {
            for event in events {
                apply_telemetry(state, ingest, event, now);
            }
        }
        ConsumerEvent::Begin { columns, memory } => {
            if let Some(results) = &mut state.results {
                results.configs.clone_from(&columns);
            }
            state.run.configs = columns;
            state.run.memory.clone_from(&memory);
            if memory.contains("staged") {
                state.push_log(now, LogLevel::Warn, "GPU memory staged through pinned host memory (the provider cannot register it, or --staged)");
            }
        }
        ConsumerEvent::Step { config, size } => Ingest::step(state, &config, size),
        // The heatmap follows the live samples; the final matrices go to the results file and JSON.
        ConsumerEvent::PairMatrix(_) => {}
        ConsumerEvent::Note(line) => state.push_log(now, LogLevel::Info, line),
        ConsumerEvent::Measured(measurement) => {
            let line = format!(
                "{} {}: {:.2} Gbps, data verified",
                measurement.config,
                efatop_experiments::sizes::format_size(measurement.size),
                measurement.gbps
            );
            Ingest::measured(state, &measurement, now);
            state.push_log(now, LogLevel::Info, line);
        }
        ConsumerEvent::Finished { error } => {
            state.finished = true;
            match error {
                Some(text) => state.push_log(now, LogLevel::Error, text),
                None => state.push_log(now, LogLevel::Info, "run complete: press any key"),
            }
        }
    }
}
