//! `efatop replay FILE`: a recording (`--record`) played in the same dashboard as the run, at its own
//! pace or faster (`--speed`), with playback keys (pause, step by step back and forth); or its JSON
//! lines, as the run's own `--json` printed them, at once (`--json`).

use std::time::{Duration, Instant};

use efatop_ui::state::{Key, SourceLine};

use crate::cli::ReplayArgs;
use crate::event::ConsumerEvent;
use crate::record::{self, Recording};
use crate::term;
use crate::viewer::{Feed, JsonViewer, Watched};

/// Playback keys, in the help overlay.
pub const KEYS: [(&str, &str); 4] = [
    ("space", "replay: pause / play"),
    ("[ ]", "replay: back to the previous step / on to the next"),
    ("+ -", "replay: twice / half as fast"),
    ("g", "replay: from the start"),
];

pub fn replay(args: &ReplayArgs) -> i32 {
    let recording = match record::read(&args.file) {
        Ok(recording) => recording,
        Err(record::NotARecording(line)) => {
            eprintln!("efatop: error: replay: {line}");
            return 2;
        }
    };
    let Recording { events, cut } = recording;
    let code = if args.json || !term::stdout_is_terminal() {
        let mut viewer = JsonViewer::default();
        for (at, event) in events {
            viewer.event(event, at);
        }
        viewer.tally.exit_code()
    } else {
        dashboard(events, args.speed)
    };
    match cut {
        Some(why) => {
            eprintln!("efatop: error: replay: {why}; what came before is shown");
            1
        }
        None => code,
    }
}

fn dashboard(events: Vec<(Duration, ConsumerEvent)>, speed: f64) -> i32 {
    let mut playback = Playback::new(events, speed);
    crate::viewer::show(&mut playback, "replay", 0)
}

/// A recording played back: the events folded so far, the playback clock and its speed.
pub struct Playback {
    events: Vec<(Duration, ConsumerEvent)>,
    /// The next event to fold.
    next: usize,
    /// The run's time the playback has reached.
    clock: Duration,
    speed: f64,
    paused: bool,
    /// When the clock last moved on.
    wall: Instant,
}

impl Playback {
    pub fn new(events: Vec<(Duration, ConsumerEvent)>, speed: f64) -> Self {
        Self { events, next: 0, clock: Duration::ZERO, speed, paused: false, wall: Instant::now() }
    }

    fn fold_until(&mut self, watched: &mut Option<Watched>, last: usize) {
        while self.next <= last && self.next < self.events.len() {
            let (at, event) = self.events[self.next].clone();
            crate::viewer::take(watched, event, at, &KEYS);
            self.next += 1;
        }
    }

    fn is_step(&self, index: usize) -> bool {
        matches!(self.events.get(index), Some((_, ConsumerEvent::Step { .. })))
    }

    /// The step being shown: the last step event folded.
    fn current_step(&self) -> Option<usize> {
        (0..self.next).rev().find(|&index| self.is_step(index))
    }

    /// Shows the run as it stood right after event `index`: on from here, or folded again from the start.
    fn seek(&mut self, watched: &mut Option<Watched>, index: usize) {
        if index < self.next {
            *watched = None;
            self.next = 0;
        }
        self.fold_until(watched, index);
        self.clock = self.events.get(index).map_or(self.clock, |(at, _)| *at);
        self.wall = Instant::now();
    }

    fn steps(&self) -> (usize, usize) {
        let total = (0..self.events.len()).filter(|&index| self.is_step(index)).count();
        let shown = (0..self.next).filter(|&index| self.is_step(index)).count();
        (shown, total)
    }
}

impl Feed for Playback {
    fn advance(&mut self, watched: &mut Option<Watched>) -> Duration {
        let now = Instant::now();
        if !self.paused {
            self.clock += (now - self.wall).mul_f64(self.speed);
        }
        self.wall = now;
        while self.next < self.events.len() && self.events[self.next].0 <= self.clock {
            self.fold_until(watched, self.next);
        }
        if self.next == self.events.len() {
            // The recording is over: the clock stops at its last event.
            self.clock = self.events.last().map_or(Duration::ZERO, |(at, _)| *at);
        }
        self.clock
    }

    fn key(&mut self, key: Key, watched: &mut Option<Watched>) -> bool {
        match key {
            Key::Char(' ') => self.paused = !self.paused,
            Key::Char('+' | '=') => self.speed = (self.speed * 2.0).min(64.0),
            Key::Char('-') => self.speed = (self.speed / 2.0).max(0.25),
            Key::Char(']') => {
                if let Some(next) = (self.next..self.events.len()).find(|&index| self.is_step(index)) {
                    self.seek(watched, next);
                }
            }
            Key::Char('[') => {
                let current = self.current_step();
                let previous = current.and_then(|current| (0..current).rev().find(|&index| self.is_step(index)));
                // Before the first step: the run's start.
                self.seek(watched, previous.unwrap_or(0));
            }
            Key::Char('g') => self.seek(watched, 0),
            _ => return false,
        }
        true
    }

    fn source(&self) -> SourceLine {
        let (shown, total) = self.steps();
        let state = if self.paused { "PAUSED" } else if self.next == self.events.len() { "end" } else { "playing" };
        SourceLine { text: format!("replay {}x {state}, step {shown}/{total}", self.speed), alert: self.paused }
    }
}
