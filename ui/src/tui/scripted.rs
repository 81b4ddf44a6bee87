//! A TUI and its source on the loop's own steps ([`super::frame`], [`super::key`]) over a `TestBackend`,
//! for tests that script events, times and keys and read the screen between them. Compiled into this
//! crate's tests, and into other crates' tests through the `scripted` feature (the binary's
//! dev-dependency): never into the product.

use std::time::Duration;

use ratatui::Terminal;
use ratatui::backend::TestBackend;

use super::{KeyPoll, Source, Tui};
use crate::screen::screen;
use crate::state::Key;

/// A TUI, its source and a test terminal.
pub struct Scripted<T, S> {
    pub terminal: Terminal<TestBackend>,
    pub tui: T,
    pub source: S,
}

impl<T: Tui, S: Source<Event = T::Event>> Scripted<T, S> {
    pub fn new(tui: T, source: S, width: u16, height: u16) -> Self {
        let terminal = Terminal::new(TestBackend::new(width, height)).expect("a test terminal");
        Self { terminal, tui, source }
    }

    /// One frame at `now`.
    pub fn frame(&mut self, now: Duration) -> Option<T::Ended> {
        super::frame(&mut self.terminal, &mut self.tui, &mut self.source, now).expect("drawn")
    }

    /// `key` pressed at `now`, then a frame, as the loop goes on after a key.
    pub fn key(&mut self, key: Key, now: Duration) -> Option<T::Ended> {
        super::key(&mut self.tui, &mut self.source, KeyPoll::Key(key), now).or_else(|| self.frame(now))
    }

    pub fn screen(&self) -> String {
        screen(&self.terminal)
    }

    /// The screen row holding `needle` (panics, showing the screen, when none does).
    pub fn row(&self, needle: &str) -> String {
        let screen = self.screen();
        match screen.lines().find(|line| line.contains(needle)) {
            Some(line) => line.to_string(),
            None => panic!("`{needle}` not on screen:\n{screen}"),
        }
    }
}
