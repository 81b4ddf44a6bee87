//! `--record FILE`: the run's events with their times, as `efatop replay` reads them back; and the format
//! family every efatop recording shares (`efatop watch --record`'s too, [`Recorder::start_as`],
//! [`read_members`]).
//!
//! The file is the line `efatop-recording <version>` (a watch recording's: `efatop-nccl-watch <version>`),
//! then gzip members, each holding whole framed messages ([`efatop_proto::stream`]'s frames). A member is sealed (compressed and written in one write) after
//! every measurement and at least once a second, so the file on disk always ends on a whole member: a run
//! killed mid-way leaves every measurement it had made readable. A file cut inside a member (a full disk,
//! a copy cut short) reads up to the cut, and the reader says where the recording stops.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use flate2::Compression;
use flate2::bufread::GzDecoder;
use flate2::write::GzEncoder;

use crate::events::ConsumerEvent;
use crate::stream::{self, Cap, Hello, OLDEST_RECORDING, OverCap, RECORDING_MAGIC, StreamError, StreamMessage, VERSION};

/// A member is sealed at least this often while events arrive...
const SEAL_EVERY: Duration = Duration::from_secs(1);
/// ... and once it holds this many bytes of messages (a burst of a large run's telemetry), so that a cut
/// loses little and a reader never needs much at once.
const SEAL_BYTES: usize = 8 << 20;

/// Rank 0's recording, written by the thread that serializes the run's events.
pub struct Recorder {
    path: PathBuf,
    file: File,
    member: GzEncoder<Vec<u8>>,
    /// Messages in the member not yet sealed, and their bytes.
    pending: usize,
    pending_bytes: usize,
    sealed_at: Instant,
    /// The first write error; nothing more is written after it.
    failed: bool,
}

impl Recorder {
    /// Writes the recording's first line into `file`, just created at `path`, so that it is a valid (empty)
    /// recording at once. Who writes it creates the file (`--record`'s, the runtime's `serve`: a fresh one
    /// renamed into place, `efatop_files::create_for_appending`, so a link at `path` is refused).
    pub fn start(path: &Path, file: File) -> std::io::Result<Self> {
        Self::start_as(path, file, RECORDING_MAGIC, VERSION)
    }

    /// [`Recorder::start`] for another member of the family (a watch recording): its first line is
    /// `magic version`.
    pub fn start_as(path: &Path, mut file: File, magic: &str, version: u32) -> std::io::Result<Self> {
        file.write_all(format!("{magic} {version}\n").as_bytes())?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            member: GzEncoder::new(Vec::new(), Compression::fast()),
            pending: 0,
            pending_bytes: 0,
            sealed_at: Instant::now(),
            failed: false,
        })
    }

    /// Adds one framed message (as [`stream::encode_event`] made it); `durable` events (everything but
    /// telemetry) seal the member at once.
    pub fn add(&mut self, frame: &[u8], durable: bool) {
        if self.failed {
            return;
        }
        if let Err(err) = self.member.write_all(frame) {
            self.fail(&err);
            return;
        }
        self.pending += 1;
        self.pending_bytes += frame.len();
        if durable || self.pending_bytes >= SEAL_BYTES || self.sealed_at.elapsed() >= SEAL_EVERY {
            self.seal();
        }
    }

    /// Compresses what is pending into one gzip member and writes it in one write.
    pub fn seal(&mut self) {
        self.sealed_at = Instant::now();
        if self.failed || self.pending == 0 {
            return;
        }
        self.pending = 0;
        self.pending_bytes = 0;
        let member = std::mem::replace(&mut self.member, GzEncoder::new(Vec::new(), Compression::fast()));
        let written = member.finish().and_then(|bytes| self.file.write_all(&bytes));
        if let Err(err) = written {
            self.fail(&err);
        }
    }

    fn fail(&mut self, err: &std::io::Error) {
        self.failed = true;
        eprintln!("efatop: warning: --record {}: {err}; the recording stops here (what was measured is unaffected)", self.path.display());
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.seal();
    }
}

/// A recording read back: where each of its events lies and when it happened, and, when the file was cut
/// short, where. The events stay in the file (a 1024-host run's telemetry would take gigabytes decoded):
/// [`Recording::cursor`] decodes them member by member as playback reaches them.
pub struct Recording {
    path: PathBuf,
    /// Each event's time in microseconds, shifted left by one, with the low bit set for a step (playback's
    /// `[` and `]` go from step to step): 8 bytes an event, at most [`stream::MAX_RECORDING_MESSAGES`].
    events: Vec<u64>,
    members: Vec<Member>,
    /// Why the events stop before the run's end: a cut or damaged tail (the events before it are whole), or
    /// a whole file with no end (the run was cut off while it recorded).
    pub cut: Option<String>,
}

/// Why a compressed block could not be read: the file ends inside it, or its bytes are damaged.
fn block_damage(err: &std::io::Error) -> String {
    if err.kind() == std::io::ErrorKind::UnexpectedEof {
        "the file ends inside a compressed block".to_string()
    } else {
        format!("a compressed block is damaged ({err})")
    }
}

/// One gzip member: where it lies in the file and how many events it holds (a damaged member keeps the
/// events before the damage).
#[derive(Clone, Copy, Debug)]
struct Member {
    offset: u64,
    len: u64,
    events: usize,
}

/// Why a file cannot be replayed at all (exit 2: it is the argument that is wrong): it is not a recording
/// this efatop reads, or it goes over one of the caps of [`crate::stream`] (one line naming the cap).
#[derive(Debug)]
pub struct NotARecording(pub String);

/// An event's entry in the index.
fn index_entry(t_us: u64, step: bool) -> u64 {
    (t_us.min(u64::MAX >> 1) << 1) | u64::from(step)
}

/// The caps of [`crate::stream`] a read holds a recording to (tests use smaller ones to reach them).
#[derive(Clone, Copy, Debug)]
struct Limits {
    member_bytes: u64,
    recording_bytes: u64,
    messages: usize,
}

const LIMITS: Limits = Limits {
    member_bytes: stream::MAX_MEMBER_BYTES,
    recording_bytes: stream::MAX_RECORDING_BYTES,
    messages: stream::MAX_RECORDING_MESSAGES,
};

/// Reads through the whole recording at `path` (checking every member, keeping none decoded), within the
/// caps of [`crate::stream`]: what a crafted file can make this cost is bounded by them, whatever it holds.
pub fn read(path: &Path) -> Result<Recording, NotARecording> {
    read_within(path, LIMITS)
}

fn read_within(path: &Path, limits: Limits) -> Result<Recording, NotARecording> {
    let shown = path.display();
    let over = |over: &OverCap| NotARecording(format!("{shown}: {}", over.sentence("recording", "replay")));
    let file = File::open(path).map_err(|err| NotARecording(format!("{shown}: {err}")))?;
    let mut reader = BufReader::new(file);
    let mut first = Vec::new();
    let _ = reader.by_ref().take(stream::MAX_HELLO as u64).read_until(b'\n', &mut first);
    match stream::parse_hello(&first, RECORDING_MAGIC) {
        Hello::Efatop { version } if (OLDEST_RECORDING..=VERSION).contains(&version) => {}
        Hello::Efatop { version } => {
            return Err(NotARecording(format!(
                "{shown} is a recording of version {version}; this efatop reads versions {OLDEST_RECORDING} to {VERSION}"
            )));
        }
        Hello::Foreign(_) => return Err(NotARecording(format!("{shown} is not an efatop recording (made with --record FILE)"))),
    }
    let mut events: Vec<u64> = Vec::new();
    let mut members = Vec::new();
    let mut finished = false;
    // An event's index entry and whether it ends the run; `None` for a dropped-events marker (counted
    // against the caps, not indexed). A member's messages count once its checksum has been read and
    // matched; one whose bytes hold a bad message keeps the events before it.
    let decode = |mut from: &mut dyn Read| {
        stream::read_message(&mut from).map(|message| {
            message.map(|message| match message {
                StreamMessage::Event { t_us, event } => {
                    Some((index_entry(t_us, matches!(event, ConsumerEvent::Step { .. })), matches!(event, ConsumerEvent::Finished { .. })))
                }
                StreamMessage::Dropped { .. } => None,
            })
        })
    };
    let policy = Policy { keep_before_bad: true, over_cap_fatal: true };
    let cut = walk_members(&mut reader, limits, policy, decode, |offset, end, messages| {
        let first_event = events.len();
        for (entry, ends) in messages.into_iter().flatten() {
            finished |= ends;
            events.push(entry);
        }
        if events.len() > first_event {
            members.push(Member { offset, len: end - offset, events: events.len() - first_event });
        }
    })
    .map_err(|cap| over(&cap))?;
    let at = events.last().map_or(0.0, |&entry| Duration::from_micros(entry >> 1).as_secs_f64());
    let so_far = format!("{} ({at:.1} s into the run)", crate::words::plural(events.len(), "event"));
    let cut = match cut {
        Some(why) => Some(format!("{shown} is cut short after {so_far}: {why}")),
        // Whole, but the run never said it ended: its rank 0 was killed or stopped while recording.
        None if !finished => Some(format!(
            "{shown} has no end: the run was cut off after {so_far}, before it finished (its rank 0 was killed or stopped)"
        )),
        None => None,
    };
    Ok(Recording { path: path.to_path_buf(), events, members, cut })
}

impl Recording {
    /// How many events it holds.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// When event `index` happened (time since the run started).
    pub fn time(&self, index: usize) -> Option<Duration> {
        self.events.get(index).map(|&entry| Duration::from_micros(entry >> 1))
    }

    /// Whether event `index` is a step.
    pub fn is_step(&self, index: usize) -> bool {
        self.events.get(index).is_some_and(|&entry| entry & 1 == 1)
    }

    /// Whether it holds no events.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The events from the first, decoded one message at a time.
    pub fn cursor(&self) -> Cursor<'_> {
        Cursor { recording: self, member: 0, open: None }
    }

    /// Member `member`, opened for decoding.
    fn open(&self, member: &Member) -> std::io::Result<MemberReader> {
        let mut file = File::open(&self.path)?;
        file.seek(SeekFrom::Start(member.offset))?;
        // The member may have changed since it was read through: it is read within the same caps again.
        Ok(GzDecoder::new(BufReader::new(file.take(member.len))).take(stream::MAX_MEMBER_BYTES))
    }
}

type MemberReader = std::io::Take<GzDecoder<BufReader<std::io::Take<File>>>>;

/// The events of a recording in order, decoded one message at a time from the file (what is in memory
/// is the event being folded, whatever the recording's size).
pub struct Cursor<'a> {
    recording: &'a Recording,
    /// The next member to open.
    member: usize,
    /// The member being read, and how many of its events are still to come.
    open: Option<(MemberReader, usize)>,
}

impl Iterator for Cursor<'_> {
    type Item = (Duration, ConsumerEvent);

    /// The next event; `None` at the end, or when the file can no longer be read as it was (it changed
    /// under the replay: what came before stays shown).
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((reader, left)) = &mut self.open {
                if *left > 0 {
                    match stream::read_message(reader) {
                        Ok(Some(StreamMessage::Event { t_us, event })) => {
                            *left -= 1;
                            return Some((Duration::from_micros(t_us), event));
                        }
                        Ok(Some(StreamMessage::Dropped { .. })) => continue,
                        Ok(None) => {}
                        Err(err) => {
                            eprintln!("efatop: warning: replay: {}: {err}", self.recording.path.display());
                            self.member = self.recording.members.len();
                        }
                    }
                }
                self.open = None;
            }
            let member = *self.recording.members.get(self.member)?;
            self.member += 1;
            match self.recording.open(&member) {
                Ok(reader) => self.open = Some((reader, member.events)),
                Err(err) => {
                    eprintln!("efatop: warning: replay: {}: {err}", self.recording.path.display());
                    self.member = self.recording.members.len();
                    return None;
                }
            }
        }
    }
}

/// A file of the family read whole into memory (a watch recording's records: what it holds is folded at
/// once, not played member by member as [`Recording`] does): its version, its messages, and why they stop
/// early (a cut or damaged member: the whole members before it stand, none of its messages count).
#[derive(Debug)]
pub struct Members<T> {
    pub version: u32,
    pub messages: Vec<T>,
    pub cut: Option<String>,
}

/// Reads the family's file at `path`: its first line `magic version` with `version` within `versions`,
/// then gzip members (from `first_gzip` on; an older version's frames follow the line as they are), each
/// decoded by `decode` (one message from the member's bytes, `None` where they end between messages).
/// Within [`crate::stream`]'s caps on a member's and the whole file's decompressed bytes and its messages
/// ([`stream::MAX_RECORDING_MESSAGES`]). `what` names the kind of file in the one line an error is.
pub fn read_members<T>(
    path: &Path,
    magic: &str,
    versions: std::ops::RangeInclusive<u32>,
    first_gzip: u32,
    what: &str,
    decode: impl FnMut(&mut dyn Read) -> Result<Option<T>, StreamError>,
) -> Result<Members<T>, String> {
    read_members_within(path, magic, versions, first_gzip, what, LIMITS, decode)
}

fn read_members_within<T>(
    path: &Path,
    magic: &str,
    versions: std::ops::RangeInclusive<u32>,
    first_gzip: u32,
    what: &str,
    limits: Limits,
    mut decode: impl FnMut(&mut dyn Read) -> Result<Option<T>, StreamError>,
) -> Result<Members<T>, String> {
    let file = File::open(path).map_err(|err| err.to_string())?;
    let mut reader = BufReader::new(file);
    let mut first = Vec::new();
    reader.by_ref().take(stream::MAX_HELLO as u64).read_until(b'\n', &mut first).map_err(|err| err.to_string())?;
    let version = match stream::parse_hello(&first, magic) {
        Hello::Efatop { version } if versions.contains(&version) => version,
        Hello::Efatop { version } => {
            return Err(format!("a {what} of version {version}; this efatop reads versions {} to {}", versions.start(), versions.end()));
        }
        Hello::Foreign(text) => return Err(format!("not an efatop {what} (it starts with '{text}')")),
    };
    let over = |cap: Cap, limit: u64| OverCap { cap, found: limit, limit }.sentence(what, "a read");
    let mut messages = Vec::new();
    if version < first_gzip {
        // The frames as they are, the whole file within the recording's cap.
        let mut plain = reader.take(limits.recording_bytes + 1);
        let cut = loop {
            match decode(&mut plain) {
                Ok(Some(message)) => messages.push(message),
                Ok(None) => break None,
                Err(StreamError::Truncated) => break Some("the file ends inside a message".to_string()),
                Err(err) => break Some(err.to_string()),
            }
            if messages.len() > limits.messages {
                return Err(over(Cap::RecordingMessages, limits.messages as u64));
            }
            if plain.limit() == 0 {
                return Err(over(Cap::RecordingBytes, limits.recording_bytes));
            }
        };
        return Ok(Members { version, messages, cut });
    }
    // A member whose bytes hold a bad message is dropped whole, and the read stops there.
    let policy = Policy { keep_before_bad: false, over_cap_fatal: false };
    let cut = walk_members(&mut reader, limits, policy, decode, |_, _, mut member| messages.append(&mut member))
        .map_err(|cap| cap.sentence(what, "a read"))?;
    Ok(Members { version, messages, cut })
}

/// How [`walk_members`] treats a member that is whole (its checksum matched) but whose bytes hold a bad
/// message or end inside one, and a message over a cap of the stream's.
#[derive(Clone, Copy)]
struct Policy {
    /// The member's messages before the bad one count (a replay shows what it can); else none of them.
    keep_before_bad: bool,
    /// A message over a stream cap fails the whole read; else it is a bad message.
    over_cap_fatal: bool,
}

/// The one walk over the family's gzip members, after the hello line: each member decoded message by
/// message by `decode`, within `limits` (a member's and the file's decompressed bytes, the messages), and
/// handed to `member` with where it lies in the file once its checksum has been read and matched. Stops
/// at the end of the file (`Ok(None)`) or at the first cut or damaged member, saying why (`Ok(Some)`); a
/// cap passed is `Err`.
fn walk_members<T>(
    reader: &mut BufReader<File>,
    limits: Limits,
    policy: Policy,
    mut decode: impl FnMut(&mut dyn Read) -> Result<Option<T>, StreamError>,
    mut member: impl FnMut(u64, u64, Vec<T>),
) -> Result<Option<String>, OverCap> {
    let mut bytes_left = limits.recording_bytes;
    let mut messages = 0_usize;
    loop {
        match reader.fill_buf() {
            Ok([]) => return Ok(None),
            Ok(_) => {}
            Err(err) => return Ok(Some(err.to_string())),
        }
        let offset = match reader.stream_position() {
            Ok(offset) => offset,
            Err(err) => return Ok(Some(err.to_string())),
        };
        // One byte over the member's (or the file's remaining) cap: reaching it means the cap was passed.
        let (member_cap, cap, limit) = if limits.member_bytes <= bytes_left {
            (limits.member_bytes, Cap::MemberBytes, limits.member_bytes)
        } else {
            (bytes_left, Cap::RecordingBytes, limits.recording_bytes)
        };
        let passed = OverCap { cap, found: limit, limit };
        let mut decoder = GzDecoder::new(&mut *reader).take(member_cap + 1);
        let mut items = Vec::new();
        let damaged = loop {
            let message = decode(&mut decoder);
            if decoder.limit() == 0 {
                return Err(passed);
            }
            if message.as_ref().is_ok_and(Option::is_some) {
                messages += 1;
                if messages > limits.messages {
                    let limit = limits.messages as u64;
                    return Err(OverCap { cap: Cap::RecordingMessages, found: limit, limit });
                }
            }
            match message {
                Ok(Some(item)) => items.push(item),
                Ok(None) => break None,
                Err(StreamError::OverCap(cap)) if policy.over_cap_fatal => return Err(cap),
                Err(StreamError::Io(err)) => {
                    items.clear();
                    break Some(block_damage(&err));
                }
                // The member's bytes end inside a message, or hold one that is not valid: said so when the
                // member itself is whole, else what is wrong with the member (it is cut or damaged).
                Err(err) => {
                    let why = if matches!(err, StreamError::Truncated) { "a block ends inside a message".to_string() } else { err.to_string() };
                    if let Err(err) = std::io::copy(&mut decoder, &mut std::io::sink()) {
                        items.clear();
                        break Some(block_damage(&err));
                    }
                    if decoder.limit() == 0 {
                        return Err(passed);
                    }
                    if !policy.keep_before_bad {
                        items.clear();
                    }
                    break Some(why);
                }
            }
        };
        bytes_left -= member_cap + 1 - decoder.limit();
        let end = match reader.stream_position() {
            Ok(end) => end,
            Err(err) => return Ok(Some(err.to_string())),
        };
        if !items.is_empty() {
            member(offset, end, items);
        }
        if damaged.is_some() {
            return Ok(damaged);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::column::{Column, Layout, Memory};

    fn single_pin() -> Column {
        Column::write(Layout::Single, Memory::Host)
    }

    #[test]
    fn a_recording_cut_anywhere_reads_back_its_whole_members_and_says_where_it_stops() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("run.efarec");
        let mut recorder = Recorder::start(&path, File::create(&path).expect("create")).expect("start");
        let mut frame = Vec::new();
        for i in 0..5u64 {
            frame.clear();
            let event = ConsumerEvent::Step { config: single_pin(), size: 4096 << i };
            stream::encode_event(i * 1000, &event, &mut frame).expect("encode");
            recorder.add(&frame, true);
        }
        frame.clear();
        stream::encode_event(5000, &ConsumerEvent::Finished { error: None }, &mut frame).expect("encode");
        recorder.add(&frame, true);
        drop(recorder);
        let whole = read(&path).expect("read");
        assert_eq!(whole.len(), 6);
        assert!(whole.cut.is_none());
        let events: Vec<(Duration, ConsumerEvent)> = whole.cursor().collect();
        assert_eq!(events.len(), 6);
        assert_eq!(events[4], (Duration::from_millis(4), ConsumerEvent::Step { config: single_pin(), size: 4096 << 4 }));
        assert_eq!((whole.time(4), whole.is_step(4), whole.is_step(5)), (Some(Duration::from_millis(4)), true, false));

        let bytes = std::fs::read(&path).expect("bytes");
        std::fs::write(&path, &bytes[..bytes.len() - 5]).expect("cut");
        let cut = read(&path).expect("read");
        assert_eq!((cut.len(), cut.cursor().count()), (5, 5), "every member before the cut is whole");
        assert!(cut.cut.as_deref().is_some_and(|why| why.contains("cut short after 5 events (0.0 s into the run)")), "{:?}", cut.cut);

        // Whole members but no end (rank 0 killed while it recorded), and a header alone: each says so.
        let mut recorder = Recorder::start(&path, File::create(&path).expect("create")).expect("start");
        frame.clear();
        stream::encode_event(0, &ConsumerEvent::Step { config: single_pin(), size: 4096 }, &mut frame).expect("encode");
        recorder.add(&frame, true);
        drop(recorder);
        let no_end = read(&path).expect("read");
        assert_eq!(no_end.len(), 1);
        assert!(no_end.cut.as_deref().is_some_and(|why| why.ends_with("has no end: the run was cut off after 1 event (0.0 s into the run), before it finished (its rank 0 was killed or stopped)")), "{:?}", no_end.cut);
        drop(Recorder::start(&path, File::create(&path).expect("create")).expect("start"));
        let header_only = read(&path).expect("read");
        assert!(header_only.is_empty() && header_only.cursor().next().is_none());
        assert!(header_only.cut.as_deref().is_some_and(|why| why.contains("has no end: the run was cut off after 0 events")), "{:?}", header_only.cut);

        std::fs::write(&path, b"{\"not\": \"a recording\"}").expect("write");
        assert!(read(&path).is_err());
    }

    /// A file of the recording's line and one gzip member per item of `members`.
    fn crafted(path: &Path, members: &[Vec<u8>]) {
        let mut bytes = format!("{RECORDING_MAGIC} {VERSION}\n").into_bytes();
        for member in members {
            let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
            encoder.write_all(member).expect("gzip");
            bytes.extend_from_slice(&encoder.finish().expect("gzip"));
        }
        std::fs::write(path, bytes).expect("write");
    }

    fn notes(count: usize, len: usize) -> Vec<u8> {
        let mut frames = Vec::new();
        for i in 0..count {
            stream::encode_event(i as u64, &ConsumerEvent::Note("n".repeat(len)), &mut frames).expect("encode");
        }
        frames
    }

    /// The family's whole-file reader, on frames of text (what a watch recording's records are, framed).
    #[test]
    fn a_family_file_reads_its_whole_members_and_stops_at_a_cut_or_damaged_one() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("watch.rec");
        let text = |reader: &mut dyn Read| -> Result<Option<String>, StreamError> {
            let mut reader = reader;
            Ok(stream::read_frame(&mut reader, 1 << 20)?.map(|body| String::from_utf8(body).expect("text")))
        };
        let framed = |text: &str| {
            let mut out = Vec::new();
            stream::frame(&mut out, |out: &mut Vec<u8>| {
                out.extend_from_slice(text.as_bytes());
                Ok::<(), std::io::Error>(())
            })
            .expect("frame");
            out
        };
        let read = |limits: Limits| read_members_within(&path, "efatop-test", 1..=2, 2, "test recording", limits, text);
        let mut recorder = Recorder::start_as(&path, File::create(&path).expect("create"), "efatop-test", 2).expect("start");
        for tick in 0..3 {
            for i in 0..4 {
                recorder.add(&framed(&format!("{tick}.{i}")), false);
            }
            recorder.seal();
        }
        drop(recorder);
        let whole = read(LIMITS).expect("read");
        assert_eq!((whole.version, whole.messages.len(), whole.cut.as_deref()), (2, 12, None));
        assert_eq!(whole.messages[5], "1.1");

        // Cut inside the last member: the two before it stand, none of the third's messages count.
        let bytes = std::fs::read(&path).expect("bytes");
        std::fs::write(&path, &bytes[..bytes.len() - 3]).expect("cut");
        let cut = read(LIMITS).expect("read");
        assert_eq!(cut.messages.len(), 8);
        assert!(cut.cut.as_deref().is_some_and(|why| why.contains("ends inside a compressed block")), "{:?}", cut.cut);
        // A byte changed in the last member's compressed bytes (its checksum no longer matches).
        let mut damaged = bytes.clone();
        let at = damaged.len() - 12;
        damaged[at] ^= 0x40;
        std::fs::write(&path, &damaged).expect("damage");
        let read_back = read(LIMITS).expect("read");
        assert_eq!(read_back.messages.len(), 8, "{:?}", read_back.cut);
        assert!(read_back.cut.is_some());

        // Version 1: the frames after the line as they are, cut inside the last.
        let mut plain = b"efatop-test 1\n".to_vec();
        for i in 0..3 {
            plain.extend(framed(&format!("p{i}")));
        }
        plain.truncate(plain.len() - 1);
        std::fs::write(&path, &plain).expect("write");
        let old = read(LIMITS).expect("read");
        assert_eq!((old.version, old.messages.as_slice()), (1, ["p0".to_string(), "p1".to_string()].as_slice()));
        assert!(old.cut.is_some());

        // Another version, another kind of file, and each cap: one line, no messages.
        std::fs::write(&path, b"efatop-test 3\n").expect("write");
        assert_eq!(read(LIMITS).expect_err("version 3"), "a test recording of version 3; this efatop reads versions 1 to 2");
        std::fs::write(&path, b"efatop-recording 3\n").expect("write");
        assert!(read(LIMITS).expect_err("foreign").starts_with("not an efatop test recording"));
        let mut recorder = Recorder::start_as(&path, File::create(&path).expect("create"), "efatop-test", 2).expect("start");
        for i in 0..50 {
            recorder.add(&framed(&format!("{i:0>1000}")), false);
        }
        drop(recorder);
        let small = Limits { member_bytes: 1 << 20, recording_bytes: 4 << 20, messages: 40 };
        assert_eq!(read(small).expect_err("messages"), "test recording holds more than 40 messages; a read indexes at most 40");
        let small = Limits { member_bytes: 10_000, ..small };
        assert!(read(small).expect_err("member").contains("compressed block of more than 10000 bytes"));
    }

    #[test]
    fn each_cap_of_a_read_is_named_when_a_file_goes_over_it() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("crafted.efarec");
        let refused = |limits: Limits| match read_within(&path, limits) {
            Ok(recording) => panic!("read {} events", recording.len()),
            Err(NotARecording(line)) => line,
        };
        let small = Limits { member_bytes: 1 << 20, recording_bytes: 4 << 20, messages: 1000 };
        // Within every cap: read.
        crafted(&path, &[notes(100, 1000), notes(100, 1000)]);
        assert_eq!(read_within(&path, small).expect("read").len(), 200);
        // A member inflating past its cap (messages, or bytes that are no message at all).
        crafted(&path, &[notes(900, 2000)]);
        let line = refused(small);
        assert!(line.ends_with("recording holds a compressed block of more than 1048576 bytes decompressed; replay inflates at most 1048576 bytes a block"), "{line}");
        crafted(&path, &[vec![0; 8 << 20]]);
        assert!(refused(small).contains("compressed block of more than 1048576 bytes"));
        // Members each within theirs, the file past its total.
        crafted(&path, &[notes(900, 1000), notes(900, 1000), notes(900, 1000), notes(900, 1000), notes(900, 1000)]);
        let line = refused(Limits { messages: 10_000, ..small });
        assert!(line.ends_with("recording decompresses to more than 4194304 bytes; replay reads at most 4194304"), "{line}");
        // More messages than the index holds.
        crafted(&path, &[notes(600, 10), notes(600, 10)]);
        let line = refused(small);
        assert!(line.ends_with("recording holds more than 1000 messages; replay indexes at most 1000"), "{line}");
        // The real caps: a run claiming more ranks than any fleet, before anything is sized by it.
        let mut frame = Vec::new();
        let start = crate::events::RunStart { info: crate::events::RunInfo { ranks: 200_000_000, ..Default::default() }, ..Default::default() };
        stream::encode_event(0, &ConsumerEvent::Run(Box::new(start)), &mut frame).expect("encode");
        crafted(&path, &[frame]);
        let line = refused(LIMITS);
        assert_eq!(line, format!("{}: recording claims 200000000 ranks; replay holds at most 65536", path.display()));
    }

}
