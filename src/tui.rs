//! The session loop of efatop's TUIs ([`efatop_ui::tui`]) on this process's terminal: taken through
//! [`crate::term`], the only place that touches it, and restored on every way out.

use std::time::Duration;

use efatop_ui::tui::{Source, Tui, run};

use crate::term::{TerminalGuard, next_key};

/// The session loop on this process's terminal, taken through [`TerminalGuard`] and restored on every
/// way out (return, error, panic). `clock` is the session's time.
pub fn on_terminal<T, S>(tui: &mut T, source: &mut S, clock: impl FnMut() -> Duration) -> std::io::Result<T::Ended>
where
    T: Tui,
    S: Source<Event = T::Event>,
{
    let (_guard, mut terminal) = TerminalGuard::enter()?;
    run(&mut terminal, tui, source, clock, next_key)
}
