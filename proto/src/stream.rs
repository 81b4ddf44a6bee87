//! How a run's events travel to a viewer (`--serve` → `efatop attach`) and into a recording (`--record`
//! → `efatop replay`).
//!
//! Handshake, both ways, one text line each: the viewer says `efatop-stream <version>`, rank 0 answers the
//! same with its own version and, when they agree, goes on with the messages; when they differ it hangs up
//! after its line, and the viewer names both versions. A peer whose first line is anything else is not
//! an efatop run. Rank 0 reads nothing from a viewer but that line.
//!
//! Messages: a 4-byte little-endian length, then one [`StreamMessage`] as JSON (serde; self-describing, so
//! optional fields the results leave out read back as they were written). A telemetry batch, which at
//! fleet scale is nearly all of a stream (4096 hosts × 8 ranks × 4 channels at 10 Hz: 1.3 million channel
//! samples a second), is the one message that is not JSON since version 3: its body starts with a zero
//! byte (a JSON message starts with `{`), then
//!
//! ```text
//! u8 0, u64 t_us, u32 event count, per event: u8 1 then one telemetry wire frame (length-prefixed, as
//! the ranks send it: a sample, a node's read or a phase; crate::telemetry::wire), or u8 2 then u32 length
//! and the event as JSON (a refusal, a malformed frame, a closed connection)
//! ```
//!
//! so rank 0 writes and a reader decodes the ranks' samples at the wire's cost, not JSON's (about ten
//! times less), within the wire's own checks and the stream's message cap. Older recordings (JSON
//! telemetry) read as before. A recording is the same
//! messages after its own line (`efatop-recording <version>`), compressed in gzip members that each end
//! on a message boundary: a file cut short loses at most its last member, and the reader says so.

use std::io::Read;

use serde::{Deserialize, Serialize};

use crate::events::{CollectorEvent, ConsumerEvent};
use crate::results::{MAX_CHANNELS, MAX_RANKS};
use crate::telemetry::wire;

/// The first word of the handshake line.
pub const MAGIC: &str = "efatop-stream";
/// The first word of a recording.
pub const RECORDING_MAGIC: &str = "efatop-recording";
/// Bumped whenever a message or an event changes shape. 2: a node's read is the monitor's one type
/// ([`crate::telemetry::NodeSample`]: NICs with `kind`, the GPU panel tagged with `state`). 3: a telemetry
/// batch travels as a binary message ([`encode_event`]: the ranks' own wire frames), not as JSON.
pub const VERSION: u32 = 3;
/// The oldest recording this efatop still reads: every change since reads back (a viewer and the run it
/// attaches to still need the same [`VERSION`]).
pub const OLDEST_RECORDING: u32 = 1;
/// The handshake line is never longer.
pub const MAX_HELLO: usize = 64;

// What a stream (a served run's, a recording's) may make its reader hold: the caps, in one place. A
// stream comes from outside this process (a file anyone may have written, a peer on the network), so
// nothing it claims sizes an allocation before it has been checked against these. The largest fleet efatop
// is built for is 4096 p5 nodes × 8 ranks (one per GPU) × 32 NICs per node; each cap leaves headroom over
// what such a run sends, and is far below what would take a reader near a GiB.

/// Message sizes and result columns a run may claim: a sweep of sizes from 1 B to 16 GiB in powers of two
/// is 35, an explicit `--sizes` list a few dozen, the columns fewer than twenty.
pub const MAX_SIZES: usize = 4096;
/// No message is longer. The largest a real run sends is its start (about 530 bytes a rank with p5's host
/// and NIC names, its placements told twice: 8.7 MiB for 16384 ranks, 17 MiB for 32768) or a late viewer's
/// snapshot of every rank's latest sample (a 4096-rank run's, about 4 MiB). What a reader makes of one
/// message is bounded by its size, not by it: a crafted 16 MiB start of 5.6 million empty notes peaks at
/// 490 MB in `replay --json` (parsed, then kept by the tally), 350 MB in the dashboard; at 32 MiB that
/// would near a GiB. So 16 MiB, and a start of more than about 31000 p5 ranks does not fit (it would, with
/// its placements told once).
pub const MAX_MESSAGE: u32 = 16 << 20;
/// Decompressed bytes of one gzip member of a recording. The recorder seals a member at 8 MiB (older
/// ones once a second: a 1024-host run's second was about 50 MiB); a member is never held whole, but this
/// stops a classic gzip bomb (a few hundred KiB that inflate to gigabytes) at once.
pub const MAX_MEMBER_BYTES: u64 = 256 << 20;
/// Decompressed bytes of a whole recording read once through. A 4096-rank run's telemetry is about
/// 12 MiB a second of JSON: this is about 90 minutes of it (most runs' recordings are far smaller), and
/// bounds how long `efatop replay` reads before it says so (a minute or two).
pub const MAX_RECORDING_BYTES: u64 = 64 << 30;
/// Messages of a recording (each event is one entry of replay's index, 8 bytes): the collector sends at
/// most a telemetry batch every 10 ms, so this is over 11 hours of the busiest run, in 32 MiB of index.
pub const MAX_RECORDING_MESSAGES: usize = 1 << 22;

/// A cap a stream went over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cap {
    Ranks,
    Channels,
    Sizes,
    MessageBytes,
    MemberBytes,
    RecordingBytes,
    RecordingMessages,
}

impl Cap {
    /// The cap's value.
    pub fn limit(self) -> u64 {
        match self {
            Self::Ranks => MAX_RANKS as u64,
            Self::Channels => MAX_CHANNELS as u64,
            Self::Sizes => MAX_SIZES as u64,
            Self::MessageBytes => u64::from(MAX_MESSAGE),
            Self::MemberBytes => MAX_MEMBER_BYTES,
            Self::RecordingBytes => MAX_RECORDING_BYTES,
            Self::RecordingMessages => MAX_RECORDING_MESSAGES as u64,
        }
    }
}

/// A stream went over one of the caps: `found` is what it claimed or held (for the byte and message
/// counts, the cap itself: the reader stops there), `limit` the cap's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverCap {
    pub cap: Cap,
    pub found: u64,
    pub limit: u64,
}

impl OverCap {
    /// One sentence: what `subject` claims or holds, and what `reader` holds at most, e.g. `recording
    /// claims 200000000 ranks; replay holds at most 65536`.
    pub fn sentence(&self, subject: &str, reader: &str) -> String {
        let (found, limit) = (self.found, self.limit);
        match self.cap {
            Cap::Ranks => format!("{subject} claims {found} ranks; {reader} holds at most {limit}"),
            Cap::Channels => format!("{subject} claims {found} channels a rank; {reader} holds at most {limit}"),
            Cap::Sizes => format!("{subject} claims {found} sizes or columns; {reader} holds at most {limit}"),
            Cap::MessageBytes => format!("{subject} holds a message of {found} bytes; {reader} reads at most {limit} bytes a message"),
            Cap::MemberBytes => {
                format!("{subject} holds a compressed block of more than {limit} bytes decompressed; {reader} inflates at most {limit} bytes a block")
            }
            Cap::RecordingBytes => format!("{subject} decompresses to more than {limit} bytes; {reader} reads at most {limit}"),
            Cap::RecordingMessages => format!("{subject} holds more than {limit} messages; {reader} indexes at most {limit}"),
        }
    }

    /// Refuses `found` over `cap`.
    pub fn check(cap: Cap, found: usize) -> Result<(), Self> {
        if found as u64 > cap.limit() { Err(Self::reached(cap, found as u64)) } else { Ok(()) }
    }

    /// `cap` was passed by `found`.
    pub fn reached(cap: Cap, found: u64) -> Self {
        Self { cap, found, limit: cap.limit() }
    }
}

impl std::fmt::Display for OverCap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.sentence("the stream", "efatop"))
    }
}

impl std::error::Error for OverCap {}

/// Refuses an event whose claims are over the caps: what a reader sizes tables by (a run's ranks, hosts,
/// NIC rows and channels, sizes and columns; a sweep's nodes).
pub fn check_claims(event: &ConsumerEvent) -> Result<(), OverCap> {
    match event {
        ConsumerEvent::Run(start) => {
            let info = &start.info;
            for ranks in [info.ranks, info.hosts.len(), info.placements.len(), start.nics.len()] {
                OverCap::check(Cap::Ranks, ranks)?;
            }
            OverCap::check(Cap::Channels, info.channels)?;
            for row in &start.nics {
                OverCap::check(Cap::Channels, row.len())?;
            }
            for placement in &info.placements {
                OverCap::check(Cap::Channels, placement.nics.len())?;
            }
            for sizes in [info.sizes.len(), info.configs.len(), start.results.configs.len()] {
                OverCap::check(Cap::Sizes, sizes)?;
            }
            if let Some(sweep) = &start.results.sweep {
                OverCap::check(Cap::Ranks, sweep.nodes.len())?;
            }
        }
        ConsumerEvent::SweepBegin(sweep) => OverCap::check(Cap::Ranks, sweep.nodes.len())?,
        ConsumerEvent::Begin { columns, .. } => OverCap::check(Cap::Sizes, columns.len())?,
        _ => {}
    }
    Ok(())
}

/// One message of the stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum StreamMessage {
    /// One of the run's events, `t_us` after the run started (rank 0's clock).
    Event { t_us: u64, event: ConsumerEvent },
    /// This viewer fell behind: `total` events were dropped for it so far (rank 0's run never waits).
    Dropped { total: u64 },
}

/// The handshake line this efatop sends.
pub fn hello() -> String {
    format!("{MAGIC} {VERSION}\n")
}

/// What a peer's first line says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hello {
    Efatop { version: u32 },
    /// Not an efatop stream; what it sent, printable and short.
    Foreign(String),
}

/// Reads a handshake line (`magic` and a version); anything else is [`Hello::Foreign`].
pub fn parse_hello(line: &[u8], magic: &str) -> Hello {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end_matches(['\n', '\r']);
    let version = text.strip_prefix(magic).and_then(|rest| rest.strip_prefix(' ')).and_then(|v| v.parse::<u32>().ok());
    if let Some(version) = version {
        return Hello::Efatop { version };
    }
    let shown: String = text.chars().take(40).map(|c| if c.is_control() { '.' } else { c }).collect();
    Hello::Foreign(shown)
}

/// Appends `message` framed: length, then JSON.
pub fn encode(message: &StreamMessage, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    frame(out, |out| serde_json::to_writer(out, message))
}

/// Appends one frame: the 4-byte little-endian length of what `body` writes, then it (the stream's framing,
/// which the NCCL plugin's messages share: [`crate::nccl`]).
pub fn frame<E>(out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>) -> Result<(), E>) -> Result<(), E> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    if let Err(err) = body(out) {
        out.truncate(start);
        return Err(err);
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// The first byte of a binary telemetry message (see the module).
const BINARY_TELEMETRY: u8 = 0;
/// A binary telemetry message's event: a wire frame...
const ITEM_WIRE: u8 = 1;
/// ... or JSON.
const ITEM_JSON: u8 = 2;

/// A binary telemetry message is closed once its body passes this many bytes, and the batch goes on in
/// another message of the same time: a batch of a 4096-host run that waited (the collector starved of its
/// CPU) once came to 17.7 MB, over [`MAX_MESSAGE`], and its recording could not be replayed.
pub const TELEMETRY_MESSAGE_BYTES: usize = 1 << 20;

/// Appends the message `StreamMessage::Event { t_us, event }` framed, without taking the event: rank 0
/// serializes each event once, for every viewer and the recording, and hands it on to its own consumer. A
/// telemetry batch is the binary message of the module's description, split into several messages of the
/// same time when it would pass [`TELEMETRY_MESSAGE_BYTES`] (a reader takes each as a batch of its own).
pub fn encode_event(t_us: u64, event: &ConsumerEvent, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    if let ConsumerEvent::Telemetry(batch) = event {
        let mut rest = batch.as_slice();
        loop {
            frame(out, |out| encode_telemetry(t_us, &mut rest, out))?;
            if rest.is_empty() {
                return Ok(());
            }
        }
    }
    encode_json_event(t_us, event, out)
}

/// A telemetry message's binary body: the events of `batch` it takes (at least one, and none once the body
/// passed [`TELEMETRY_MESSAGE_BYTES`]), taken off it.
fn encode_telemetry(t_us: u64, batch: &mut &[CollectorEvent], out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    let start = out.len();
    out.push(BINARY_TELEMETRY);
    out.extend_from_slice(&t_us.to_le_bytes());
    let count_at = out.len();
    out.extend_from_slice(&0u32.to_le_bytes());
    let mut count: u32 = 0;
    while let Some((event, rest)) = batch.split_first() {
        if count > 0 && out.len() - start >= TELEMETRY_MESSAGE_BYTES {
            break;
        }
        *batch = rest;
        count += 1;
        let at = out.len();
        out.push(ITEM_WIRE);
        let wired = match event {
            CollectorEvent::Sample(sample) => {
                wire::encode(sample, out);
                true
            }
            CollectorEvent::Phase(report) => {
                out.extend_from_slice(&wire::encode_phase(report));
                true
            }
            // A name too long for the wire's strings goes as JSON, whole.
            CollectorEvent::Node(sample) => wire::encode_node(sample, out).is_ok(),
            _ => false,
        };
        if !wired {
            out.truncate(at);
            out.push(ITEM_JSON);
            frame(out, |out| serde_json::to_writer(out, event))?;
        }
    }
    out[count_at..count_at + 4].copy_from_slice(&count.to_le_bytes());
    Ok(())
}

/// A binary telemetry message's body back into its event; every length is checked against what the body
/// holds, every frame by the wire's own decoder.
fn decode_telemetry(body: &[u8]) -> Result<StreamMessage, StreamError> {
    let mut rest = body.get(1..).unwrap_or_default();
    let t_us = u64::from_le_bytes(split(&mut rest, "its time")?);
    let count = u32::from_le_bytes(split(&mut rest, "its event count")?) as usize;
    // Capacity never follows a count the body cannot hold (an event takes at least 5 bytes).
    let mut batch = Vec::with_capacity(count.min(rest.len() / 5));
    for _ in 0..count {
        let [kind] = split(&mut rest, "an event")?;
        let len = u32::from_le_bytes(split(&mut rest, "an event's length")?) as usize;
        if rest.len() < len {
            return Err(StreamError::Telemetry("the message ends inside an event".to_string()));
        }
        let (item, after) = rest.split_at(len);
        rest = after;
        batch.push(match kind {
            ITEM_WIRE => match wire::decode_frame(item).map_err(|err| StreamError::Telemetry(format!("a telemetry frame is not valid: {err}")))? {
                wire::Frame::Rank(sample) => CollectorEvent::Sample(Box::new(sample)),
                wire::Frame::Node(sample) => CollectorEvent::Node(Box::new(sample)),
                wire::Frame::Phase(report) => CollectorEvent::Phase(report),
                // A relay's word to rank 0's collector, which tells it on as a rank's `Closed`.
                wire::Frame::Gone(rank) => return Err(StreamError::Telemetry(format!("a relay's word that rank {rank} closed is not an event of a stream"))),
            },
            ITEM_JSON => serde_json::from_slice(item)?,
            other => return Err(StreamError::Telemetry(format!("unknown event kind {other}"))),
        });
    }
    if !rest.is_empty() {
        return Err(StreamError::Telemetry(format!("{} bytes after its last event", rest.len())));
    }
    Ok(StreamMessage::Event { t_us, event: ConsumerEvent::Telemetry(batch) })
}

/// The next `N` bytes of `body`, taken off it.
fn split<const N: usize>(body: &mut &[u8], what: &str) -> Result<[u8; N], StreamError> {
    let Some((head, rest)) = body.split_first_chunk::<N>() else {
        return Err(StreamError::Telemetry(format!("the message ends inside {what}")));
    };
    *body = rest;
    Ok(*head)
}

/// [`encode_event`] as JSON, whatever the event.
fn encode_json_event(t_us: u64, event: &ConsumerEvent, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    /// [`StreamMessage`]'s shape, borrowing.
    #[derive(Serialize)]
    enum Borrowed<'a> {
        Event { t_us: u64, event: &'a ConsumerEvent },
    }
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    serde_json::to_writer(&mut *out, &Borrowed::Event { t_us, event })?;
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// Why a stream could not be read on.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the stream ends inside a message")]
    Truncated,
    #[error("{0}")]
    OverCap(#[from] OverCap),
    #[error("a message is not valid: {0}")]
    Invalid(#[from] serde_json::Error),
    #[error("a telemetry message is not valid: {0}")]
    Telemetry(String),
}

/// The next message; `None` where the stream ends between messages.
pub fn read_message(reader: &mut impl Read) -> Result<Option<StreamMessage>, StreamError> {
    let Some(body) = read_frame(reader, MAX_MESSAGE)? else { return Ok(None) };
    if body.first() == Some(&BINARY_TELEMETRY) {
        return decode_telemetry(&body).map(Some);
    }
    let message: StreamMessage = serde_json::from_slice(&body)?;
    drop(body);
    if let StreamMessage::Event { event, .. } = &message {
        check_claims(event)?;
    }
    Ok(Some(message))
}

/// The next frame's body, at most `max` bytes; `None` where the stream ends between frames.
pub fn read_frame(reader: &mut impl Read, max: u32) -> Result<Option<Vec<u8>>, StreamError> {
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match reader.read(&mut prefix[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(StreamError::Truncated),
            Ok(n) => got += n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => return Err(StreamError::Truncated),
            Err(err) => return Err(err.into()),
        }
    }
    let len = u32::from_le_bytes(prefix);
    if len > max {
        return Err(StreamError::OverCap(OverCap::reached(Cap::MessageBytes, u64::from(len))));
    }
    // The buffer grows with the bytes that arrive, never to a length a few bytes announced.
    let mut body = Vec::with_capacity((len as usize).min(READ_ROOM));
    let read = Read::take(&mut *reader, u64::from(len)).read_to_end(&mut body);
    match read {
        Ok(got) if got < len as usize => return Err(StreamError::Truncated),
        Ok(_) => {}
        Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => return Err(StreamError::Truncated),
        Err(err) => return Err(err.into()),
    }
    Ok(Some(body))
}

/// What a message's buffer starts with.
const READ_ROOM: usize = 64 << 10;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{CollectorEvent, RunStart};
    use crate::telemetry::wire::WireError;
    use crate::telemetry::{ChannelSample, RankSample};
    use crate::{Measurement, RunResults};

    #[test]
    fn handshakes_name_efatop_and_its_version_or_show_what_came_instead() {
        assert_eq!(parse_hello(hello().as_bytes(), MAGIC), Hello::Efatop { version: VERSION });
        assert_eq!(parse_hello(b"efatop-stream 7\n", MAGIC), Hello::Efatop { version: 7 });
        assert_eq!(parse_hello(b"SSH-2.0-OpenSSH_9.2\r\n", MAGIC), Hello::Foreign("SSH-2.0-OpenSSH_9.2".into()));
        assert_eq!(parse_hello(b"efatop-streamer 1\n", MAGIC), Hello::Foreign("efatop-streamer 1".into()));
        assert_eq!(parse_hello(&[0xff, 0, 7], MAGIC), Hello::Foreign("\u{fffd}..".into()));
    }

    #[test]
    fn every_event_comes_back_as_it_went_and_a_cut_stream_says_so() {
        let sample = RankSample {
            rank: 1,
            seq: 3,
            interval_ns: 100_000_000,
            channels: vec![ChannelSample { channel: 0, bytes: 1 << 20, ops: 4, ..ChannelSample::default() }],
            ..RankSample::default()
        };
        let from = "127.0.0.1:9".parse().expect("address");
        let measurement: Measurement = serde_json::from_value(serde_json::json!({
            "config": "SinglePin", "size": 4096, "count": 1024, "gbps": 12.5, "busbw_percent": null,
            "latency": {"mean_us": 1.0, "p50_us": 1.0, "p99_us": 2.0, "max_us": 3.0}, "iterations": 20,
            "pairs": [], "verified": true
        }))
        .expect("measurement");
        let single = measurement.config.clone();
        let events = vec![
            ConsumerEvent::Run(Box::new(RunStart { results: RunResults::default(), pairs: true, ..RunStart::default() })),
            ConsumerEvent::Telemetry(vec![
                CollectorEvent::Sample(Box::new(sample)),
                CollectorEvent::Malformed { from, reason: WireError::Told("frame version 9".into()) },
                CollectorEvent::Closed { from, rank: Some(1) },
            ]),
            ConsumerEvent::Begin { columns: vec![single.clone()], memory: "host".into() },
            ConsumerEvent::Step { config: single, size: 4096 },
            ConsumerEvent::Measured(Box::new(measurement)),
            ConsumerEvent::Note("hello".into()),
            ConsumerEvent::Finished { error: None },
        ];
        let mut bytes = Vec::new();
        for (t_us, event) in events.iter().enumerate() {
            if t_us % 2 == 0 {
                encode(&StreamMessage::Event { t_us: t_us as u64, event: event.clone() }, &mut bytes).expect("encode");
            } else {
                encode_event(t_us as u64, event, &mut bytes).expect("encode");
            }
        }
        encode(&StreamMessage::Dropped { total: 2 }, &mut bytes).expect("encode");
        let mut reader = bytes.as_slice();
        for (t, event) in events.into_iter().enumerate() {
            let read = read_message(&mut reader).expect("read");
            assert_eq!(read, Some(StreamMessage::Event { t_us: t as u64, event }));
        }
        assert_eq!(read_message(&mut reader).expect("read"), Some(StreamMessage::Dropped { total: 2 }));
        assert!(read_message(&mut reader).expect("end").is_none());
        // Cut inside the last message: an error that says so, never a made-up message.
        let mut cut = &bytes[..bytes.len() - 3];
        let mut last = None;
        loop {
            match read_message(&mut cut) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(err) => {
                    last = Some(err);
                    break;
                }
            }
        }
        assert!(matches!(last, Some(StreamError::Truncated)), "{last:?}");
    }

    #[test]
    fn a_telemetry_batch_travels_binary_and_a_damaged_one_is_refused_not_guessed() {
        use crate::telemetry::{NodeSample, PhaseReport};
        let from = "127.0.0.1:9".parse().expect("address");
        let sample = RankSample {
            rank: 7,
            seq: 12,
            interval_ns: 100_000_000,
            drops: 1,
            channels: (0..4).map(|c| ChannelSample { channel: c, bytes: 1 << 30, ops: 64, in_flight: 3, ..ChannelSample::default() }).collect(),
            ..RankSample::default()
        };
        let batch = vec![
            CollectorEvent::Phase(PhaseReport { rank: 7, changes: 0, phase: 0, bytes: 0 }),
            CollectorEvent::Sample(Box::new(sample.clone())),
            CollectorEvent::Node(Box::new(NodeSample { rank: 2, host: "p5-node-0002".into(), interval_ms: Some(1000.0), ..NodeSample::default() })),
            // A name the wire cannot carry goes as JSON, whole.
            CollectorEvent::Node(Box::new(NodeSample { rank: 3, host: "h".repeat(70_000), interval_ms: Some(1000.0), ..NodeSample::default() })),
            CollectorEvent::Refused { from, reason: "no secret".into(), total: 1 },
            CollectorEvent::Closed { from, rank: Some(7) },
        ];
        let event = ConsumerEvent::Telemetry(batch);
        let mut binary = Vec::new();
        encode_event(42, &event, &mut binary).expect("encode");
        assert_eq!(binary[4], BINARY_TELEMETRY, "not JSON");
        let mut json = Vec::new();
        encode(&StreamMessage::Event { t_us: 42, event: event.clone() }, &mut json).expect("encode");
        let expected = Some(StreamMessage::Event { t_us: 42, event: event.clone() });
        // Both read back the same (a recording of version 2 holds the JSON form).
        assert_eq!(read_message(&mut binary.as_slice()).expect("binary"), expected);
        assert_eq!(read_message(&mut json.as_slice()).expect("json"), expected);
        // A batch of samples alone is a third of its JSON (8785 bytes against 28080 for this one).
        let samples = ConsumerEvent::Telemetry(vec![CollectorEvent::Sample(Box::new(sample)); 64]);
        let (mut small, mut large) = (Vec::new(), Vec::new());
        encode_event(1, &samples, &mut small).expect("encode");
        encode(&StreamMessage::Event { t_us: 1, event: samples }, &mut large).expect("encode");
        assert!(small.len() * 3 < large.len(), "{} bytes binary, {} JSON", small.len(), large.len());

        // Damaged: every cut of the body, a count beyond what it holds, an unknown kind, a bad frame,
        // bytes left over. Each is an error that says so, never a batch made up.
        let reframe = |body: &[u8]| {
            let mut framed = (body.len() as u32).to_le_bytes().to_vec();
            framed.extend_from_slice(body);
            framed
        };
        let body = &binary[4..];
        for cut in 1..body.len() {
            let read = read_message(&mut reframe(&body[..cut]).as_slice());
            assert!(matches!(read, Err(StreamError::Telemetry(_) | StreamError::Invalid(_))), "cut at {cut}: {read:?}");
        }
        let mut more = body.to_vec();
        more[9..13].copy_from_slice(&u32::MAX.to_le_bytes());
        let err = read_message(&mut reframe(&more).as_slice()).expect_err("count beyond the body");
        assert_eq!(err.to_string(), "a telemetry message is not valid: the message ends inside an event");
        let mut kind = body.to_vec();
        kind[13] = 9;
        let err = read_message(&mut reframe(&kind).as_slice()).expect_err("unknown kind");
        assert_eq!(err.to_string(), "a telemetry message is not valid: unknown event kind 9");
        let mut frame = body.to_vec();
        frame[18] = 77; // the first frame's version
        let err = read_message(&mut reframe(&frame).as_slice()).expect_err("bad frame");
        assert!(err.to_string().starts_with("a telemetry message is not valid: a telemetry frame is not valid: frame version 77"), "{err}");
        // A batch too large for one message goes as several of the same time, each within the bound.
        let big = vec![CollectorEvent::Sample(Box::new(RankSample { channels: vec![ChannelSample::default(); 64], ..RankSample::default() })); 2000];
        let mut framed = Vec::new();
        encode_event(9, &ConsumerEvent::Telemetry(big.clone()), &mut framed).expect("encode");
        let mut reader = framed.as_slice();
        let mut back = Vec::new();
        let mut messages = 0;
        while let Some(message) = read_message(&mut reader).expect("read") {
            let StreamMessage::Event { t_us: 9, event: ConsumerEvent::Telemetry(part) } = message else { panic!("{message:?}") };
            assert!(!part.is_empty());
            back.extend(part);
            messages += 1;
        }
        assert!(framed.len() > 2 * TELEMETRY_MESSAGE_BYTES && messages >= 3, "{} bytes in {messages} messages", framed.len());
        assert_eq!(back, big, "every event, in order");
        let mut empty = Vec::new();
        encode_event(9, &ConsumerEvent::Telemetry(Vec::new()), &mut empty).expect("encode");
        assert_eq!(read_message(&mut empty.as_slice()).expect("read"), Some(StreamMessage::Event { t_us: 9, event: ConsumerEvent::Telemetry(Vec::new()) }));

        let mut trailing = body.to_vec();
        trailing.push(0);
        let err = read_message(&mut reframe(&trailing).as_slice()).expect_err("trailing");
        assert_eq!(err.to_string(), "a telemetry message is not valid: 1 bytes after its last event");
    }

    #[test]
    fn a_message_over_the_cap_or_claiming_more_than_a_fleet_is_refused_before_anything_is_sized_by_it() {
        // 4 GiB announced by four bytes: refused at the prefix, nothing allocated for it.
        let mut bytes: &[u8] = &[0xff, 0xff, 0xff, 0xff, b'{'];
        let err = read_message(&mut bytes).expect_err("too long");
        assert_eq!(err.to_string(), "the stream holds a message of 4294967295 bytes; efatop reads at most 16777216 bytes a message");
        // Announced within the cap, but the stream ends first: cut, not a buffer of the announced size.
        let mut bytes: &[u8] = &[0x00, 0x00, 0x00, 0x01, b'{'];
        assert!(matches!(read_message(&mut bytes), Err(StreamError::Truncated)));

        let over = |start: RunStart| {
            let mut frame = Vec::new();
            encode_event(0, &ConsumerEvent::Run(Box::new(start)), &mut frame).expect("encode");
            match read_message(&mut frame.as_slice()) {
                Err(StreamError::OverCap(over)) => over,
                other => panic!("{other:?}"),
            }
        };
        let info = |info: crate::events::RunInfo| RunStart { info, ..RunStart::default() };
        assert_eq!(over(info(crate::events::RunInfo { ranks: 200_000_000, ..Default::default() })).cap, Cap::Ranks);
        assert_eq!(over(info(crate::events::RunInfo { hosts: vec![String::new(); MAX_RANKS + 1], ..Default::default() })).cap, Cap::Ranks);
        assert_eq!(over(info(crate::events::RunInfo { channels: 1 << 20, ..Default::default() })).cap, Cap::Channels);
        assert_eq!(over(info(crate::events::RunInfo { sizes: vec![1; MAX_SIZES + 1], ..Default::default() })).cap, Cap::Sizes);
        assert_eq!(over(RunStart { nics: vec![vec![String::new(); MAX_CHANNELS + 1]], ..RunStart::default() }).cap, Cap::Channels);
        // The largest fleet efatop is built for reads.
        let fleet = crate::events::RunInfo { ranks: 4096 * 8, hosts: vec!["h".into(); 4096 * 8], channels: 32, ..Default::default() };
        let mut frame = Vec::new();
        let start = RunStart { info: fleet, nics: vec![vec!["rdmap79s0-rdm".into(); 4]; 4096 * 8], ..RunStart::default() };
        encode_event(0, &ConsumerEvent::Run(Box::new(start)), &mut frame).expect("encode");
        assert!(frame.len() < (MAX_MESSAGE as usize) / 4, "{} bytes", frame.len());
        assert!(matches!(read_message(&mut frame.as_slice()), Ok(Some(_))));
    }

}
