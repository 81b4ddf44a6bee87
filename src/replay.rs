//! `efatop replay FILE`: a recording (`--record`) played in the same dashboard as the run, at its own
//! pace or faster (`--speed`), with playback keys (pause, step by step back and forth); or its JSON
//! lines, as the run's own `--json` printed them, at once (`--json`). An `efatop watch --record`ing plays
//! in the watcher's view instead (`crate::watch::replay`).

use std::time::Duration;

use efatop_ui::state::{Key, SourceLine};

use crate::cli::ReplayArgs;
use efatop_proto::recording::{self, Recording};
use crate::term;
use efatop_ui::tui::{Polled, Source};
use crate::viewer::{Fed, JsonViewer};

/// Playback keys, in the help overlay.
pub const KEYS: [(&str, &str); 4] = [
    ("space", "replay: pause / play"),
    ("[ ]", "replay: back to the previous step / on to the next"),
    ("+ -", "replay: twice / half as fast"),
    ("g", "replay: from the start"),
];

pub fn replay(args: &ReplayArgs) -> i32 {
    // `efatop watch --record`'s file: the watcher's view, not a run's dashboard.
    if crate::watch::is_recording(&args.file) {
        return crate::watch::replay(&args.file, args.json, args.speed);
    }
    let recording = match recording::read(&args.file) {
        Ok(recording) => recording,
        Err(recording::NotARecording(line)) => {
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
    crate::viewer::show(&mut playback, &KEYS, "replay", 0)
}

/// A recording played back: where the playback is, its clock and its speed. The events are handed out
/// as the clock reaches them, decoded from the file only then (a long run of thousands of ranks is never
/// held decoded); a step back tells the run again from its start.
pub struct Playback<'a> {
    recording: &'a Recording,
    /// The events from the next one to hand out.
    cursor: recording::Cursor<'a>,
    /// The next event to hand out.
    next: usize,
    /// The run's time the playback has reached.
    clock: Duration,
    speed: f64,
    paused: bool,
    /// The session's time when the clock last moved on.
    wall: Duration,
    /// A step's last event: every event up to it is due, whatever the clock says.
    through: Option<usize>,
    /// The run is to be told again from its start.
    restart: bool,
    /// The clock and the source line as last told.
    told: (Option<Duration>, Option<SourceLine>),
}

impl<'a> Playback<'a> {
    pub fn new(recording: &'a Recording, speed: f64) -> Self {
        Self {
            recording,
            cursor: recording.cursor(),
            next: 0,
            clock: Duration::ZERO,
            speed,
            paused: false,
            wall: Duration::ZERO,
            through: None,
            restart: false,
            told: (None, None),
        }
    }

    fn len(&self) -> usize {
        self.recording.len()
    }

    /// Every event of the recording has been handed out.
    pub fn is_over(&self) -> bool {
        self.next >= self.len()
    }

    fn is_step(&self, index: usize) -> bool {
        self.recording.is_step(index)
    }

    /// The step being shown: the last step event handed out.
    fn current_step(&self) -> Option<usize> {
        (0..self.next).rev().find(|&index| self.is_step(index))
    }

    /// Shows the run as it stood right after event `index`: on from here, or told again from the start.
    fn seek(&mut self, index: usize, now: Duration) {
        if index < self.next {
            self.restart = true;
            self.next = 0;
            self.cursor = self.recording.cursor();
        }
        self.through = Some(index);
        self.clock = self.recording.time(index).unwrap_or(self.clock);
        self.wall = now;
    }

    fn steps(&self) -> (usize, usize) {
        let total = (0..self.len()).filter(|&index| self.is_step(index)).count();
        let shown = (0..self.next).filter(|&index| self.is_step(index)).count();
        (shown, total)
    }

    /// Moves the playback clock on to the session's `now`.
    fn advance(&mut self, now: Duration) {
        if !self.paused {
            self.clock += now.saturating_sub(self.wall).mul_f64(self.speed);
        }
        self.wall = now;
        if self.is_over() {
            // The recording is over: the clock stops at its last event.
            self.clock = self.len().checked_sub(1).and_then(|last| self.recording.time(last)).unwrap_or_default();
        }
    }

    fn source(&self) -> SourceLine {
        let (shown, total) = self.steps();
        let state = if self.paused { "PAUSED" } else if self.is_over() { "end" } else { "playing" };
        SourceLine { text: format!("replay {}x {state}, step {shown}/{total}", self.speed), alert: self.paused }
    }
}

impl Source for Playback<'_> {
    type Event = Fed;

    fn poll(&mut self, now: Duration) -> Polled<Fed> {
        if std::mem::take(&mut self.restart) {
            return Polled::Ready(Fed::Restart);
        }
        self.advance(now);
        if let Some(at) = self.recording.time(self.next) {
            if self.through.is_some_and(|through| self.next <= through) || at <= self.clock {
                match self.cursor.next() {
                    Some((at, event)) => {
                        self.next += 1;
                        return Polled::Ready(Fed::Event(at, event));
                    }
                    // The file can no longer be read as it was (the cursor said why): the playback ends
                    // where it is.
                    None => self.next = self.len(),
                }
            }
        }
        self.through = None;
        if self.told.0 != Some(self.clock) {
            self.told.0 = Some(self.clock);
            return Polled::Ready(Fed::Clock(self.clock));
        }
        let source = self.source();
        if self.told.1.as_ref() != Some(&source) {
            self.told.1 = Some(source.clone());
            return Polled::Ready(Fed::Source(source));
        }
        Polled::Pending
    }

    fn key(&mut self, key: Key, now: Duration) -> bool {
        match key {
            Key::Char(' ') => self.paused = !self.paused,
            Key::Char('+' | '=') => self.speed = (self.speed * 2.0).min(64.0),
            Key::Char('-') => self.speed = (self.speed / 2.0).max(0.25),
            Key::Char(']') => {
                if let Some(next) = (self.next..self.len()).find(|&index| self.is_step(index)) {
                    self.seek(next, now);
                }
            }
            Key::Char('[') => {
                let current = self.current_step();
                let previous = current.and_then(|current| (0..current).rev().find(|&index| self.is_step(index)));
                // Before the first step: the run's start.
                self.seek(previous.unwrap_or(0), now);
            }
            Key::Char('g') => self.seek(0, now),
            _ => return false,
        }
        true
    }
}

#[cfg(test)]
mod tests;
