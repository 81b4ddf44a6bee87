//! The live dashboard on rank 0: [`App`] on the one TUI loop ([`crate::tui`]), fed by the run's one
//! channel, its clock the time since the run started. On a terminal ([`run`]) the terminal is taken
//! through [`crate::term`] and restored on every way out (normal return, error, and panic); tests run the
//! same loop on `TestBackend` ([`Dashboard`] with [`crate::tui::run`] and [`crate::tui::frame`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use efatop_ui::state::Key;
use ratatui::Frame;

use efatop_ui::app::{App, Effect, Ended, Event};
use efatop_runtime::event::ConsumerEvent;
use crate::tui::{self, Tui};

/// Runs the dashboard on this process's terminal until the run has finished and a key was pressed (or
/// the user quit and the run has stopped). `stop` is raised when the user asks to quit.
pub fn run(events: &Receiver<ConsumerEvent>, mut app: App, stop: &AtomicBool, started: Instant) -> std::io::Result<Ended> {
    tui::on_terminal(&mut Dashboard { app: &mut app, stop }, &mut { events }, || started.elapsed())
}

/// The dashboard as the TUI loop drives it: the fold, and the flag that stops the run's ranks.
pub struct Dashboard<'a> {
    pub app: &'a mut App,
    pub stop: &'a AtomicBool,
}

impl Dashboard<'_> {
    fn perform(&self, effects: &[Effect]) -> Option<Ended> {
        perform(effects, self.stop)
    }
}

impl Tui for Dashboard<'_> {
    type Event = ConsumerEvent;
    type Ended = Ended;

    fn event(&mut self, event: ConsumerEvent, now: Duration) -> Option<Ended> {
        let effects = self.app.update(Event::Run(event), now);
        self.perform(&effects)
    }

    fn gone(&mut self, now: Duration) -> Option<Ended> {
        // The tick that follows says whether to leave.
        self.app.update(Event::RunGone, now);
        None
    }

    fn tick(&mut self, now: Duration) -> Option<Ended> {
        let effects = self.app.update(Event::Tick, now);
        self.perform(&effects)
    }

    fn key(&mut self, key: Key, now: Duration) -> Option<Ended> {
        let effects = self.app.update(Event::Key(key), now);
        self.perform(&effects)
    }

    fn interrupt(&mut self, now: Duration) -> Option<Ended> {
        let effects = self.app.update(Event::Interrupt, now);
        self.perform(&effects)
    }

    fn draw(&self, frame: &mut Frame) {
        self.app.draw(frame);
    }
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
