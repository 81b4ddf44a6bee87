//! `--record FILE`: the run's events with their times, as `efatop replay` reads them back.
//!
//! The file is the line `efatop-recording <version>`, then gzip members, each holding whole stream
//! messages ([`efatop_proto::stream`]). A member is sealed (compressed and written in one write) after
//! every measurement and at least once a second, so the file on disk always ends on a whole member: a run
//! killed mid-way leaves every measurement it had made readable. A file cut inside a member (a full disk,
//! a copy cut short) reads up to the cut, and the reader says where the recording stops.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use efatop_proto::stream::{self, Hello, OLDEST_RECORDING, RECORDING_MAGIC, StreamError, StreamMessage, VERSION};
use flate2::Compression;
use flate2::bufread::GzDecoder;
use flate2::write::GzEncoder;

use crate::event::ConsumerEvent;

/// A member is sealed at least this often while events arrive.
const SEAL_EVERY: Duration = Duration::from_secs(1);

/// Rank 0's recording, written by the thread that serializes the run's events.
pub struct Recorder {
    path: PathBuf,
    file: File,
    member: GzEncoder<Vec<u8>>,
    /// Messages in the member not yet sealed.
    pending: usize,
    sealed_at: Instant,
    /// The first write error; nothing more is written after it.
    failed: bool,
}

impl Recorder {
    /// Creates `path` and writes its first line, so that it is a valid (empty) recording at once.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        let mut file = File::create(path)?;
        file.write_all(format!("{RECORDING_MAGIC} {VERSION}\n").as_bytes())?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            member: GzEncoder::new(Vec::new(), Compression::fast()),
            pending: 0,
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
        if durable || self.sealed_at.elapsed() >= SEAL_EVERY {
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
        let member = std::mem::replace(&mut self.member, GzEncoder::new(Vec::new(), Compression::fast()));
        let written = member.finish().and_then(|bytes| self.file.write_all(&bytes));
        if let Err(err) = written {
            self.fail(&err);
        }
    }

    fn fail(&mut self, err: &std::io::Error) {
        self.failed = true;
        eprintln!("efatop: warning: --record {}: {err}; the recording stops here (the results file is unaffected)", self.path.display());
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.seal();
    }
}

/// A recording read back: its events with their times, and, when the file was cut short, where.
pub struct Recording {
    pub events: Vec<(Duration, ConsumerEvent)>,
    /// Why the events stop before the run's end: a cut or damaged tail (the events before it are whole), or
    /// a whole file with no end (the run was cut off while it recorded).
    pub cut: Option<String>,
}

/// Why a file cannot be replayed at all (exit 2: it is the argument that is wrong).
#[derive(Debug)]
pub struct NotARecording(pub String);

/// Reads the whole recording at `path`.
pub fn read(path: &Path) -> Result<Recording, NotARecording> {
    let shown = path.display();
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
    let mut events = Vec::new();
    // Member by member: a member's messages count only once its checksum has been read and matched.
    let cut = loop {
        match reader.fill_buf() {
            Ok([]) => break None,
            Ok(_) => {}
            Err(err) => break Some(err.to_string()),
        }
        let mut decoder = GzDecoder::new(reader);
        let mut member = Vec::new();
        if let Err(err) = decoder.read_to_end(&mut member) {
            break Some(if err.kind() == std::io::ErrorKind::UnexpectedEof {
                "the file ends inside a compressed block".to_string()
            } else {
                format!("a compressed block is damaged ({err})")
            });
        }
        reader = decoder.into_inner();
        let mut messages = member.as_slice();
        let damaged = loop {
            match stream::read_message(&mut messages) {
                Ok(Some(StreamMessage::Event { t_us, event })) => events.push((Duration::from_micros(t_us), event)),
                Ok(Some(StreamMessage::Dropped { .. })) => {}
                Ok(None) => break None,
                Err(StreamError::Truncated) => break Some("a block ends inside a message".to_string()),
                Err(err) => break Some(err.to_string()),
            }
        };
        if damaged.is_some() {
            break damaged;
        }
    };
    let at = events.last().map_or(0.0, |(t, _)| t.as_secs_f64());
    let so_far = format!("{} ({at:.1} s into the run)", efatop_proto::words::plural(events.len(), "event"));
    let cut = match cut {
        Some(why) => Some(format!("{shown} is cut short after {so_far}: {why}")),
        // Whole, but the run never said it ended: its rank 0 was killed or stopped while recording.
        None if !events.iter().any(|(_, event)| matches!(event, ConsumerEvent::Finished { .. })) => Some(format!(
            "{shown} has no end: the run was cut off after {so_far}, before it finished (its rank 0 was killed or stopped)"
        )),
        None => None,
    };
    Ok(Recording { events, cut })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_cut_anywhere_reads_back_its_whole_members_and_says_where_it_stops() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("run.efarec");
        let mut recorder = Recorder::create(&path).expect("create");
        let mut frame = Vec::new();
        for i in 0..5u64 {
            frame.clear();
            let event = ConsumerEvent::Step { config: efatop_proto::Column::write(efatop_proto::column::Layout::Single, efatop_proto::column::Memory::Host), size: 4096 << i };
            stream::encode_event(i * 1000, &event, &mut frame).expect("encode");
            recorder.add(&frame, true);
        }
        frame.clear();
        stream::encode_event(5000, &ConsumerEvent::Finished { error: None }, &mut frame).expect("encode");
        recorder.add(&frame, true);
        drop(recorder);
        let whole = read(&path).expect("read");
        assert_eq!(whole.events.len(), 6);
        assert!(whole.cut.is_none());
        assert_eq!(whole.events[4], (Duration::from_millis(4), ConsumerEvent::Step { config: efatop_proto::Column::write(efatop_proto::column::Layout::Single, efatop_proto::column::Memory::Host), size: 4096 << 4 }));

        let bytes = std::fs::read(&path).expect("bytes");
        std::fs::write(&path, &bytes[..bytes.len() - 5]).expect("cut");
        let cut = read(&path).expect("read");
        assert_eq!(cut.events.len(), 5, "every member before the cut is whole");
        assert!(cut.cut.as_deref().is_some_and(|why| why.contains("cut short after 5 events (0.0 s into the run)")), "{:?}", cut.cut);

        // Whole members but no end (rank 0 killed while it recorded), and a header alone: each says so.
        let mut recorder = Recorder::create(&path).expect("create");
        frame.clear();
        stream::encode_event(0, &ConsumerEvent::Step { config: efatop_proto::column::Column::write(efatop_proto::column::Layout::Single, efatop_proto::column::Memory::Host), size: 4096 }, &mut frame).expect("encode");
        recorder.add(&frame, true);
        drop(recorder);
        let no_end = read(&path).expect("read");
        assert_eq!(no_end.events.len(), 1);
        assert!(no_end.cut.as_deref().is_some_and(|why| why.ends_with("has no end: the run was cut off after 1 event (0.0 s into the run), before it finished (its rank 0 was killed or stopped)")), "{:?}", no_end.cut);
        drop(Recorder::create(&path).expect("create"));
        let header_only = read(&path).expect("read");
        assert!(header_only.events.is_empty());
        assert!(header_only.cut.as_deref().is_some_and(|why| why.contains("has no end: the run was cut off after 0 events")), "{:?}", header_only.cut);

        std::fs::write(&path, b"{\"not\": \"a recording\"}").expect("write");
        assert!(read(&path).is_err());
    }
}
