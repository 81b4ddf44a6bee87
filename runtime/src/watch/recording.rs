//! The watcher's files: `--record`'s recording (what the plugins sent, with its times and the watcher's
//! settings), the plugins' own files (written where no watcher was named), and folding either again as
//! the live watcher folds (`efatop watch --from`, `efatop replay`).
//!
//! A recording is a member of the recordings' family ([`efatop_proto::recording`]), as a run's is: the
//! line `efatop-nccl-watch 2`, then gzip members of proto's frames of [`Recorded`] (a 4-byte length,
//! JSON), one sealed every tick (and at least once a second): a watcher killed mid-way leaves a file
//! that reads up to its last tick, and a file cut inside a member keeps the members before it. Readers
//! hold the family's caps; version 1 (the frames without gzip) still reads.

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::fold::{Config, Watch};
use efatop_proto::nccl::{self, PluginMessage, Recorded, WatchLine};
use efatop_proto::stream::{Hello, StreamError, MAX_RECORDING_MESSAGES};

use super::TICK;

/// `--record`'s file, written by the fold loop.
pub struct Recorder {
    recorder: efatop_proto::recording::Recorder,
    frame: Vec<u8>,
}

impl Recorder {
    /// Creates `path` (a fresh file renamed into place) with its first line and the watcher's settings.
    pub fn create(path: &Path, config: &Config) -> Result<Self, String> {
        let file = efatop_files::create_for_appending(path).map_err(|err| format!("--record: {err}"))?;
        let recorder = efatop_proto::recording::Recorder::start_as(path, file, nccl::RECORDING_MAGIC, nccl::RECORDING_VERSION)
            .map_err(|err| format!("--record: {err}"))?;
        let mut recorder = Self { recorder, frame: Vec::new() };
        let settings = Recorded::Settings {
            hang_after_s: config.hang_after.as_secs(),
            window_s: config.window.as_secs(),
            fallback_min_bytes: config.fallback_min_bytes,
        };
        recorder.add(&settings);
        recorder.flush();
        Ok(recorder)
    }

    pub fn add(&mut self, record: &Recorded) {
        self.frame.clear();
        if nccl::encode_recorded(record, &mut self.frame).is_ok() {
            self.recorder.add(&self.frame, false);
        }
    }

    /// Seals what the tick added into one member, written in one write.
    pub fn flush(&mut self) {
        self.recorder.seal();
    }
}

/// Whether `path` starts as `efatop watch --record` starts its file.
pub fn is_recording(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 64];
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    let n = file.read(&mut head).unwrap_or(0);
    head[..n].starts_with(format!("{} ", nccl::RECORDING_MAGIC).as_bytes())
}

/// `path` opened and read past its first line, the hello `MAGIC VERSION` (at most 64 bytes): `what` names
/// the kind of file in the error for a foreign one, `of_version` starts the error for another version.
fn open_past_hello(
    path: &Path,
    magic: &str,
    expected: u32,
    what: &str,
    of_version: &str,
) -> Result<BufReader<std::fs::File>, String> {
    use std::io::{BufRead, Read};
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(file);
    let mut first = Vec::new();
    Read::by_ref(&mut reader)
        .take(64)
        .read_until(b'\n', &mut first)
        .map_err(|e| e.to_string())?;
    match efatop_proto::stream::parse_hello(&first, magic) {
        Hello::Efatop { version } if version == expected => Ok(reader),
        Hello::Efatop { version } => Err(format!(
            "{of_version} {version}; this efatop reads {expected}"
        )),
        Hello::Foreign(text) => Err(format!("not an efatop {what} (it starts with '{text}')")),
    }
}

/// A `--record`ing: its settings (the watcher's defaults before its first record) and its records.
pub fn read_recording(path: &Path) -> Result<(Config, Vec<Recorded>), String> {
    let read = efatop_proto::recording::read_members(
        path,
        nccl::RECORDING_MAGIC,
        nccl::OLDEST_RECORDING..=nccl::RECORDING_VERSION,
        nccl::RECORDING_GZIP_SINCE,
        "watch recording",
        |mut reader| nccl::read_recorded(&mut reader),
    )?;
    // A watcher killed mid-way keeps what came before: the cut is not an error.
    let mut config = Config::default();
    let mut out = Vec::with_capacity(read.messages.len());
    for record in read.messages {
        match record {
            Recorded::Settings { hang_after_s, window_s, fallback_min_bytes, .. } => {
                config.hang_after = Duration::from_secs(hang_after_s);
                config.window = Duration::from_secs(window_s);
                config.fallback_min_bytes = fallback_min_bytes;
            }
            record => out.push(record),
        }
    }
    Ok((config, out))
}

/// A plugin file's messages with their times (ms): the line `efatop-nccl 1`, then frames.
pub fn read_plugin_file(path: &Path) -> Result<Vec<(u64, PluginMessage)>, String> {
    let mut reader = open_past_hello(
        path,
        nccl::MAGIC,
        nccl::VERSION,
        "NCCL plugin file",
        "version",
    )?;
    let mut out = Vec::new();
    let mut t = 0;
    loop {
        match nccl::read(&mut reader) {
            Ok(Some(message)) => {
                if let PluginMessage::Interval { t_ms, .. }
                | PluginMessage::Nics { t_ms, .. }
                | PluginMessage::Rails { t_ms, .. }
                | PluginMessage::Health { t_ms, .. } = &message
                {
                    t = *t_ms;
                }
                out.push((t, message));
                if out.len() > MAX_RECORDING_MESSAGES {
                    return Err("more messages than a reader holds".into());
                }
            }
            Ok(None) => return Ok(out),
            // A file cut short (the job was killed mid-write) keeps what came before.
            Err(StreamError::Truncated) => return Ok(out),
            Err(err) => return Err(err.to_string()),
        }
    }
}

/// What a file holds, in the order it is to be folded.
enum Taken {
    Message(PluginMessage),
    Closed,
    Refused,
}

/// A record as an event to fold, its connection apart from other files' (`base`).
fn recorded(base: u64, record: Recorded) -> Option<(u64, u64, Taken)> {
    match record {
        Recorded::Message {
            t_ms,
            conn,
            message,
        } => Some((t_ms, base + conn, Taken::Message(message))),
        Recorded::Closed { t_ms, conn } => Some((t_ms, base + conn, Taken::Closed)),
        Recorded::Refused { t_ms } => Some((t_ms, base, Taken::Refused)),
        Recorded::Settings { .. } => None,
    }
}

/// Each tick's lines, with its time (ms).
pub type Batches = Vec<(u64, Vec<WatchLine>)>;

/// Folds timed events as the live watcher does (a tick every [`TICK`] of their clock).
fn fold(events: Vec<(u64, u64, Taken)>, config: Config) -> Batches {
    let tick = TICK.as_millis() as u64;
    let mut watch = Watch::new(config);
    let mut batches = Vec::new();
    let mut last_tick = 0u64;
    let mut end = 0;
    for (t_ms, conn, event) in events {
        while t_ms >= last_tick + tick {
            last_tick += tick;
            batches.push((last_tick, watch.tick(Duration::from_millis(last_tick))));
        }
        match event {
            Taken::Message(message) => watch.ingest(conn, message, Duration::from_millis(t_ms)),
            Taken::Closed => watch.closed(conn),
            Taken::Refused => watch.refused(),
        }
        end = t_ms;
    }
    batches.push((end + tick, watch.tick(Duration::from_millis(end + tick))));
    batches.retain(|(_, lines)| !lines.is_empty());
    batches
}

/// Folds plugin files (each one connection) and recordings (their connections as they were), on their own
/// clocks, judged by `config` (`--from`). An error names the file.
pub fn fold_files(paths: &[PathBuf], config: Config) -> Result<Batches, String> {
    let mut events: Vec<(u64, u64, Taken)> = Vec::new();
    for (index, path) in paths.iter().enumerate() {
        // Each file's connections apart from every other file's.
        let base = (index as u64 + 1) << 32;
        let read = if is_recording(path) {
            read_recording(path).map(|(_, records)| {
                events.extend(records.into_iter().filter_map(|r| recorded(base, r)));
            })
        } else {
            read_plugin_file(path).map(|file| {
                let end = file.last().map_or(0, |(t, _)| *t);
                events.extend(file.into_iter().map(|(t, m)| (t, base, Taken::Message(m))));
                events.push((end, base, Taken::Closed));
            })
        };
        read.map_err(|err| format!("{}: {err}", path.display()))?;
    }
    // Stable: a file's own order stands where times tie.
    events.sort_by_key(|(t, _, _)| *t);
    Ok(fold(events, config))
}

/// A recording folded again with the settings it was recorded with (`efatop replay`).
pub fn replay(path: &Path) -> Result<Batches, String> {
    let (config, records) = read_recording(path)?;
    Ok(fold(
        records.into_iter().filter_map(|r| recorded(0, r)).collect(),
        config,
    ))
}
