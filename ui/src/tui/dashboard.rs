//! The live dashboard on rank 0 as the TUI loop drives it: [`App`] fed by the run's one channel, its clock
//! the time since the run started, and the flag that stops the run's ranks. The binary runs it on its
//! terminal (`src/printer/dashboard.rs`); the tests here run the same loop on `TestBackend`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use efatop_proto::events::ConsumerEvent;
use ratatui::Frame;

use super::Tui;
use crate::app::{App, Effect, Ended, Event};
use crate::state::Key;

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
