//! The live dashboard on rank 0: the session loop over [`App`], generic over the ratatui backend. It
//! drains the run's one channel into the fold, moves the clock on, redraws on a fixed tick and feeds the
//! keys; on a terminal ([`run`]) the terminal is taken through [`crate::term`] and restored on every way
//! out (normal return, error, and panic); tests run the same loop on `TestBackend` ([`run_on`], [`frame`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use ratatui::Terminal;
use ratatui::backend::Backend;

use crate::app::{App, Effect, Ended, Event};
use crate::event::ConsumerEvent;
use crate::term::{KeyPoll, TerminalGuard, next_key};

/// Frames per second of the redraw tick.
pub const TICK: Duration = Duration::from_millis(50);

/// Runs the dashboard on this process's terminal until the run has finished and a key was pressed (or
/// the user quit and the run has stopped). `stop` is raised when the user asks to quit.
pub fn run(events: &Receiver<ConsumerEvent>, mut app: App, stop: &AtomicBool, started: Instant) -> std::io::Result<Ended> {
    let (_guard, mut terminal) = TerminalGuard::enter()?;
    run_on(&mut terminal, &mut app, events, stop, || started.elapsed(), || next_key(TICK))
}

/// The session loop on any backend: a frame, then whatever `keys` says within a tick, until the fold says
/// to leave. `clock` is the time since the run started.
pub fn run_on<B: Backend>(
    terminal: &mut Terminal<B>,
    app: &mut App,
    events: &Receiver<ConsumerEvent>,
    stop: &AtomicBool,
    mut clock: impl FnMut() -> Duration,
    mut keys: impl FnMut() -> std::io::Result<KeyPoll>,
) -> std::io::Result<Ended>
where
    B::Error: Send + Sync + 'static,
{
    loop {
        if let Some(ended) = frame(terminal, app, events, stop, clock())? {
            return Ok(ended);
        }
        let event = match keys()? {
            KeyPoll::Nothing => continue,
            KeyPoll::Interrupt => Event::Interrupt,
            KeyPoll::Key(key) => Event::Key(key),
        };
        if let Some(ended) = perform(&app.update(event, clock()), stop) {
            return Ok(ended);
        }
    }
}

/// One frame at `now`: everything the run sent since the last one, the clock's tick, and a redraw.
/// Returns how the dashboard ended, if it did.
pub fn frame<B: Backend>(
    terminal: &mut Terminal<B>,
    app: &mut App,
    events: &Receiver<ConsumerEvent>,
    stop: &AtomicBool,
    now: Duration,
) -> std::io::Result<Option<Ended>>
where
    B::Error: Send + Sync + 'static,
{
    loop {
        match events.try_recv() {
            Ok(event) => {
                let effects = app.update(Event::Run(event), now);
                if let Some(ended) = perform(&effects, stop) {
                    return Ok(Some(ended));
                }
            }
            Err(TryRecvError::Empty) => break,
            Err(TryRecvError::Disconnected) => {
                app.update(Event::RunGone, now);
                break;
            }
        }
    }
    if let Some(ended) = perform(&app.update(Event::Tick, now), stop) {
        return Ok(Some(ended));
    }
    terminal.draw(|frame| efatop_ui::dashboard::draw(frame, app.shown())).map_err(std::io::Error::other)?;
    Ok(None)
}

/// Carries out the fold's effects; says how the dashboard ended when one of them ends it.
pub fn perform(effects: &[Effect], stop: &AtomicBool) -> Option<Ended> {
    let mut ended = None;
    for effect in effects {
        match effect {
            Effect::StopRun => stop.store(true, Ordering::Relaxed),
            Effect::Exit(how) => ended = Some(*how),
        }
    }
    ended
}

#[cfg(test)]
mod tests;
