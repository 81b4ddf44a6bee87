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

/// The most wall time one frame of [`run`] spends taking in events before it draws. A source that has
/// more (a fleet's telemetry after rank 0's core was taken by its collector for a while) keeps the rest
/// for the next frame, which comes at once rather than a tick later ([`KeyPoll`] is then asked with no
/// wait): what is drawn never waits hundreds of milliseconds behind a backlog, and the backlog drains as
/// fast as the events fold. Looked at before every event but the first, so a frame always makes
/// progress; a source's events must each be small (rank 0's collector hands telemetry over in batches of at
/// most `efatop_runtime::collector::BATCH_MAX` samples).
pub const FOLD_BUDGET: Duration = Duration::from_millis(35);

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

/// The session loop on any backend: a frame, then whatever `keys` says within its wait (a tick; nothing
/// when the frame left events behind, [`FOLD_BUDGET`]), until the TUI says how it ended. `clock` is the
/// session's time (since the run started, for the run's own dashboard).
pub fn run<B, T, S>(
    terminal: &mut Terminal<B>,
    tui: &mut T,
    source: &mut S,
    mut clock: impl FnMut() -> Duration,
    mut keys: impl FnMut(Duration) -> std::io::Result<KeyPoll>,
) -> std::io::Result<T::Ended>
where
    B: Backend,
    B::Error: Send + Sync + 'static,
    T: Tui,
    S: Source<Event = T::Event>,
{
    loop {
        let drawn = frame_within(terminal, tui, source, clock(), Some(FOLD_BUDGET))?;
        if let Some(ended) = drawn.ended {
            return Ok(ended);
        }
        let poll = keys(if drawn.behind { Duration::ZERO } else { TICK })?;
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
    frame_within(terminal, tui, source, now, None).map(|drawn| drawn.ended)
}

/// What one frame did.
#[derive(Debug, PartialEq, Eq)]
pub struct Drawn<E> {
    /// How the session ended, if it did.
    pub ended: Option<E>,
    /// The frame stopped taking in events at its budget: the source has more due.
    pub behind: bool,
}

/// One frame at `now`: what the source has due (within `budget` of wall time, when given, looked at before
/// every event but the first), the tick, and a redraw.
pub fn frame_within<B, T, S>(terminal: &mut Terminal<B>, tui: &mut T, source: &mut S, now: Duration, budget: Option<Duration>) -> std::io::Result<Drawn<T::Ended>>
where
    B: Backend,
    B::Error: Send + Sync + 'static,
    T: Tui,
    S: Source<Event = T::Event>,
{
    let started = std::time::Instant::now();
    let mut first = true;
    let mut behind = false;
    loop {
        if !std::mem::take(&mut first) && budget.is_some_and(|budget| started.elapsed() >= budget) {
            behind = true;
            break;
        }
        let ended = match source.poll(now) {
            Polled::Ready(event) => tui.event(event, now),
            Polled::Pending => break,
            Polled::Gone => match tui.gone(now) {
                Some(ended) => Some(ended),
                None => break,
            },
        };
        if ended.is_some() {
            return Ok(Drawn { ended, behind: false });
        }
    }
    if let Some(ended) = tui.tick(now) {
        return Ok(Drawn { ended: Some(ended), behind });
    }
    terminal.draw(|frame| tui.draw(frame)).map_err(std::io::Error::other)?;
    Ok(Drawn { ended: None, behind })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;

    /// Takes in numbers, slowly; draws nothing.
    struct Slow {
        taken: Vec<u32>,
        each: Duration,
    }

    impl Tui for Slow {
        type Event = u32;
        type Ended = ();
        fn event(&mut self, event: u32, _now: Duration) -> Option<()> {
            std::thread::sleep(self.each);
            self.taken.push(event);
            None
        }
        fn key(&mut self, _key: Key, _now: Duration) -> Option<()> {
            None
        }
        fn interrupt(&mut self, _now: Duration) -> Option<()> {
            Some(())
        }
        fn draw(&self, _frame: &mut Frame) {}
    }

    /// A backlog larger than a frame's budget is taken in over several frames, each stopping near the
    /// budget and saying it is behind, in order and with nothing lost; without a budget one frame takes
    /// everything.
    #[test]
    fn a_frame_stops_taking_in_events_at_its_budget_and_the_next_goes_on() {
        let mut terminal = Terminal::new(TestBackend::new(10, 2)).expect("terminal");
        let (send, events) = std::sync::mpsc::channel();
        for n in 0..300 {
            send.send(n).expect("queued");
        }
        let mut tui = Slow { taken: Vec::new(), each: Duration::from_micros(500) };
        let budget = Duration::from_millis(20);
        let mut frames = Vec::new();
        loop {
            let started = std::time::Instant::now();
            let drawn = frame_within(&mut terminal, &mut tui, &mut &events, Duration::ZERO, Some(budget)).expect("drawn");
            frames.push((tui.taken.len(), drawn.behind, started.elapsed()));
            if !drawn.behind {
                break;
            }
        }
        assert!(frames.len() >= 3, "300 events of 0.5 ms each over frames of 20 ms: {frames:?}");
        let first = frames[0].0;
        assert!((1..300).contains(&first), "{frames:?}");
        assert!(frames[..frames.len() - 1].iter().all(|&(_, behind, _)| behind), "{frames:?}");
        assert_eq!(tui.taken, (0..300).collect::<Vec<_>>(), "every event, in order");

        for n in 0..300 {
            send.send(n).expect("queued");
        }
        let drawn = frame(&mut terminal, &mut tui, &mut &events, Duration::ZERO).expect("drawn");
        assert_eq!((drawn, tui.taken.len()), (None, 600), "no budget: one frame takes everything due");
    }
}
