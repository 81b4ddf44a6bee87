//! The live dashboard on rank 0 on this process's terminal: [`efatop_ui::tui::dashboard::Dashboard`] (the
//! run's [`App`] and the flag that stops its ranks) on the one TUI loop ([`crate::tui`]), fed by the run's
//! one channel, its clock the time since the run started. The terminal is taken through [`crate::term`]
//! and restored on every way out (normal return, error, and panic).

use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Receiver;
use std::time::Instant;

use efatop_proto::events::ConsumerEvent;
use efatop_ui::app::{App, Ended};
use efatop_ui::tui::dashboard::Dashboard;

use crate::tui;

/// Runs the dashboard on this process's terminal until the run has finished and a key was pressed (or
/// the user quit and the run has stopped). `stop` is raised when the user asks to quit.
pub fn run(events: &Receiver<ConsumerEvent>, mut app: App, stop: &AtomicBool, started: Instant) -> std::io::Result<Ended> {
    tui::on_terminal(&mut Dashboard { app: &mut app, stop }, &mut { events }, || started.elapsed())
}
