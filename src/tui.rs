//! The one session loop of every TUI efatop draws (the run's dashboard, `efatop monitor` on one node and
//! on many, `efatop attach` and `efatop replay`), generic over the ratatui backend as gitui's and
//! bandwhich's are: each frame takes in whatever its [`Source`] has for it, moves the clock on, redraws,
//! then waits up to a tick for a key. On a terminal ([`on_terminal`]) the terminal is taken through
//! [`crate::term`], the only place that touches it, and restored on every way out; tests run the same
//! loop ([`run`], [`frame`]) on `TestBackend` with scripted events, clocks and keys.

use std::time::Duration;

use efatop_ui::state::Key;
use ratatui::backend::Backend;
use ratatui::{Frame, Terminal};

use crate::term::{KeyPoll, TerminalGuard, next_key};

/// Frames per second of the redraw tick.
pub const TICK: Duration = Duration::from_millis(50);

/// What a source has when asked.
#[derive(Debug, PartialEq, Eq)]
pub enum Polled<E> {
    Ready(E),
    /// Nothing more is due yet.
    Pending,
    /// Nothing more will come (every sender of a channel is gone).
    Gone,
}

/// Where a TUI's events come from: the run's channel, a monitor's reads, a served run's stream, a
/// recording played back.
pub trait Source {
    type Event;
    /// The next event due by `now` (the session's clock).
    fn poll(&mut self, now: Duration) -> Polled<Self::Event>;
    /// Offers the source a key before the TUI sees it (a replay's playback keys); true when it took it.
    fn key(&mut self, _key: Key, _now: Duration) -> bool {
        false
    }
}

impl<E> Source for std::sync::mpsc::Receiver<E> {
    type Event = E;
    fn poll(&mut self, _now: Duration) -> Polled<E> {
        try_receive(self)
    }
}

impl<E> Source for &std::sync::mpsc::Receiver<E> {
    type Event = E;
    fn poll(&mut self, _now: Duration) -> Polled<E> {
        try_receive(self)
    }
}

fn try_receive<E>(receiver: &std::sync::mpsc::Receiver<E>) -> Polled<E> {
    match receiver.try_recv() {
        Ok(event) => Polled::Ready(event),
        Err(std::sync::mpsc::TryRecvError::Empty) => Polled::Pending,
        Err(std::sync::mpsc::TryRecvError::Disconnected) => Polled::Gone,
    }
}

/// What the loop drives: a fold of events and keys into render-ready state, and its drawing. Each
/// method returns how the session ended, when it did.
pub trait Tui {
    type Event;
    type Ended;
    /// One event from the source, taken at `now`.
    fn event(&mut self, event: Self::Event, now: Duration) -> Option<Self::Ended>;
    /// The source has nothing more to say (asked again on every frame after).
    fn gone(&mut self, _now: Duration) -> Option<Self::Ended> {
        None
    }
    /// Once a frame, after the events and before the drawing.
    fn tick(&mut self, _now: Duration) -> Option<Self::Ended> {
        None
    }
    fn key(&mut self, key: Key, now: Duration) -> Option<Self::Ended>;
    /// Ctrl-C (raw mode delivers it as a key).
    fn interrupt(&mut self, now: Duration) -> Option<Self::Ended>;
    fn draw(&self, frame: &mut Frame);
}

/// The session loop on any backend: a frame, then whatever `keys` says within a tick, until the TUI says
/// how it ended. `clock` is the session's time (since the run started, for the run's own dashboard).
pub fn run<B, T, S>(
    terminal: &mut Terminal<B>,
    tui: &mut T,
    source: &mut S,
    mut clock: impl FnMut() -> Duration,
    mut keys: impl FnMut() -> std::io::Result<KeyPoll>,
) -> std::io::Result<T::Ended>
where
    B: Backend,
    B::Error: Send + Sync + 'static,
    T: Tui,
    S: Source<Event = T::Event>,
{
    loop {
        if let Some(ended) = frame(terminal, tui, source, clock())? {
            return Ok(ended);
        }
        let poll = keys()?;
        if let Some(ended) = key(tui, source, poll, clock()) {
            return Ok(ended);
        }
    }
}

/// What the terminal said within a tick, at `now`: a key goes to the source first (a replay's playback
/// keys), then to the TUI. Returns how the session ended, if it did.
pub fn key<T, S>(tui: &mut T, source: &mut S, poll: KeyPoll, now: Duration) -> Option<T::Ended>
where
    T: Tui,
    S: Source<Event = T::Event>,
{
    match poll {
        KeyPoll::Nothing => None,
        KeyPoll::Interrupt => tui.interrupt(now),
        KeyPoll::Key(key) if source.key(key, now) => None,
        KeyPoll::Key(key) => tui.key(key, now),
    }
}

/// One frame at `now`: everything the source has due, the tick, and a redraw. Returns how the session
/// ended, if it did.
pub fn frame<B, T, S>(terminal: &mut Terminal<B>, tui: &mut T, source: &mut S, now: Duration) -> std::io::Result<Option<T::Ended>>
where
    B: Backend,
    B::Error: Send + Sync + 'static,
    T: Tui,
    S: Source<Event = T::Event>,
{
    loop {
        let ended = match source.poll(now) {
            Polled::Ready(event) => tui.event(event, now),
            Polled::Pending => break,
            Polled::Gone => match tui.gone(now) {
                Some(ended) => Some(ended),
                None => break,
            },
        };
        if ended.is_some() {
            return Ok(ended);
        }
    }
    if let Some(ended) = tui.tick(now) {
        return Ok(Some(ended));
    }
    terminal.draw(|frame| tui.draw(frame)).map_err(std::io::Error::other)?;
    Ok(None)
}

/// The session loop on this process's terminal, taken through [`TerminalGuard`] and restored on every
/// way out (return, error, panic).
pub fn on_terminal<T, S>(tui: &mut T, source: &mut S, clock: impl FnMut() -> Duration) -> std::io::Result<T::Ended>
where
    T: Tui,
    S: Source<Event = T::Event>,
{
    let (_guard, mut terminal) = TerminalGuard::enter()?;
    run(&mut terminal, tui, source, clock, || next_key(TICK))
}

/// The screen of a `TestBackend` as text, one line per row (for tests of the TUIs).
#[cfg(test)]
pub fn screen(terminal: &Terminal<ratatui::backend::TestBackend>) -> String {
    let buffer = terminal.backend().buffer();
    let width = usize::from(buffer.area.width).max(1);
    buffer.content().chunks(width).map(|row| row.iter().map(ratatui::buffer::Cell::symbol).collect::<String>() + "\n").collect()
}

/// A TUI and its source on the loop's own steps ([`frame`], [`key`]) over a `TestBackend`, for tests
/// that script events, times and keys and read the screen between them.
#[cfg(test)]
pub struct Scripted<T, S> {
    pub terminal: Terminal<ratatui::backend::TestBackend>,
    pub tui: T,
    pub source: S,
}

#[cfg(test)]
impl<T: Tui, S: Source<Event = T::Event>> Scripted<T, S> {
    pub fn new(tui: T, source: S, width: u16, height: u16) -> Self {
        let terminal = Terminal::new(ratatui::backend::TestBackend::new(width, height)).expect("a test terminal");
        Self { terminal, tui, source }
    }

    /// One frame at `now`.
    pub fn frame(&mut self, now: Duration) -> Option<T::Ended> {
        frame(&mut self.terminal, &mut self.tui, &mut self.source, now).expect("drawn")
    }

    /// `key` pressed at `now`, then a frame, as the loop goes on after a key.
    pub fn key(&mut self, key: Key, now: Duration) -> Option<T::Ended> {
        self::key(&mut self.tui, &mut self.source, KeyPoll::Key(key), now).or_else(|| self.frame(now))
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
