//! `efatop replay FILE`: a recording (`--record`) played in the same dashboard as the run, at its own
//! pace or faster (`--speed`), with playback keys (pause, step by step back and forth); or its JSON
//! lines, as the run's own `--json` printed them, at once (`--json`).

use std::time::{Duration, Instant};

use efatop_ui::state::{Key, SourceLine};

use crate::cli::ReplayArgs;
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
    let code = if args.json || !term::stdout_is_terminal() {
        let mut viewer = JsonViewer::default();
        for (at, event) in recording.cursor() {
            viewer.event(event, at);
        }
        viewer.tally.exit_code()
    } else {
        dashboard(&recording, args.speed)
    };
    match recording.cut {
        Some(why) => {
            eprintln!("efatop: error: replay: {why}; what came before is shown");
            1
        }
        None => code,
    }
}

fn dashboard(recording: &Recording, speed: f64) -> i32 {
    let mut playback = Playback::new(recording, speed);
    crate::viewer::show(&mut playback, "replay", 0)
}

/// A recording played back: the events folded so far (decoded from the file as the playback reaches
/// them, so that a long run of thousands of ranks is never held decoded), the playback clock and its speed.
pub struct Playback<'a> {
    recording: &'a Recording,
    /// The events from the next one to fold.
    cursor: record::Cursor<'a>,
    /// The next event to fold.
    next: usize,
    /// The run's time the playback has reached.
    clock: Duration,
    speed: f64,
    paused: bool,
    /// When the clock last moved on.
    wall: Instant,
}

impl<'a> Playback<'a> {
    pub fn new(recording: &'a Recording, speed: f64) -> Self {
        Self { recording, cursor: recording.cursor(), next: 0, clock: Duration::ZERO, speed, paused: false, wall: Instant::now() }
    }

    fn len(&self) -> usize {
        self.recording.len()
    }

    fn fold_until(&mut self, watched: &mut Option<Watched>, last: usize) {
        while self.next <= last && self.next < self.len() {
            let Some((at, event)) = self.cursor.next() else {
                // The file can no longer be read as it was: the playback ends where it is.
                self.next = self.len();
                return;
            };
            crate::viewer::take(watched, event, at, &KEYS);
            self.next += 1;
        }
    }

    fn is_step(&self, index: usize) -> bool {
        self.recording.is_step(index)
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
            self.cursor = self.recording.cursor();
        }
        self.fold_until(watched, index);
        self.clock = self.recording.time(index).unwrap_or(self.clock);
        self.wall = Instant::now();
    }

    fn steps(&self) -> (usize, usize) {
        let total = (0..self.len()).filter(|&index| self.is_step(index)).count();
        let shown = (0..self.next).filter(|&index| self.is_step(index)).count();
        (shown, total)
    }
}

impl Feed for Playback<'_> {
    fn advance(&mut self, watched: &mut Option<Watched>) -> Duration {
        let now = Instant::now();
        if !self.paused {
            self.clock += (now - self.wall).mul_f64(self.speed);
        }
        self.wall = now;
        while self.recording.time(self.next).is_some_and(|at| at <= self.clock) {
            self.fold_until(watched, self.next);
        }
        if self.next >= self.len() {
            // The recording is over: the clock stops at its last event.
            self.clock = self.len().checked_sub(1).and_then(|last| self.recording.time(last)).unwrap_or_default();
        }
        self.clock
    }

    fn key(&mut self, key: Key, watched: &mut Option<Watched>) -> bool {
        match key {
            Key::Char(' ') => self.paused = !self.paused,
            Key::Char('+' | '=') => self.speed = (self.speed * 2.0).min(64.0),
            Key::Char('-') => self.speed = (self.speed / 2.0).max(0.25),
            Key::Char(']') => {
                if let Some(next) = (self.next..self.len()).find(|&index| self.is_step(index)) {
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
        let state = if self.paused { "PAUSED" } else if self.next >= self.len() { "end" } else { "playing" };
        SourceLine { text: format!("replay {}x {state}, step {shown}/{total}", self.speed), alert: self.paused }
    }
}
