//! The one session loop of every TUI efatop draws (the run's dashboard, `efatop monitor` on one node and
//! on many, `efatop attach` and `efatop replay`), generic over the ratatui backend as gitui's and
//! bandwhich's are: each frame takes in whatever its [`Source`] has for it, moves the clock on, redraws,
//! then waits up to a tick for a key. The keys come from a function the caller passes in: the binary's
//! terminal (`src/term.rs`, the only place that touches it) or a test's script; tests run the same loop
//! ([`run`], [`frame`]) on `TestBackend` with scripted events, clocks and keys ([`scripted`]).
//!
//! The TUIs it drives that are more than a view: [`dashboard`] (the run's, on rank 0) and [`nodes`] (the
//! many-node monitor's, on rank 0).

use std::time::Duration;

use ratatui::backend::Backend;
use ratatui::{Frame, Terminal};

use crate::state::Key;

pub mod dashboard;
pub mod nodes;
#[cfg(any(test, feature = "scripted"))]
pub mod scripted;

/// Frames per second of the redraw tick.
pub const TICK: Duration = Duration::from_millis(50);

/// What the terminal said within one tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyPoll {
    Nothing,
    /// Ctrl-C (raw mode delivers it as a key).
    Interrupt,
    Key(Key),
}

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
