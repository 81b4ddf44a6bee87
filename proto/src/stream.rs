//! How a run's events travel to a viewer (`--serve` → `efatop attach`) and into a recording (`--record`
//! → `efatop replay`).
//!
//! Handshake, both ways, one text line each: the viewer says `efatop-stream <version>`, rank 0 answers the
//! same with its own version and, when they agree, goes on with the messages; when they differ it hangs up
//! after its line, and the viewer names both versions. A peer whose first line is anything else is not
//! an efatop run. Rank 0 reads nothing from a viewer but that line.
//!
//! Messages: a 4-byte little-endian length, then one [`StreamMessage`] as JSON (serde; self-describing, so
//! optional fields the results leave out read back as they were written). A recording is the same
//! messages after its own line (`efatop-recording <version>`), compressed in gzip members that each end
//! on a message boundary: a file cut short loses at most its last member, and the reader says so.

use std::io::Read;

use serde::{Deserialize, Serialize};

use crate::events::ConsumerEvent;

/// The first word of the handshake line.
pub const MAGIC: &str = "efatop-stream";
/// The first word of a recording.
pub const RECORDING_MAGIC: &str = "efatop-recording";
/// Bumped whenever a message or an event changes shape. 2: a node's read is the monitor's one type
/// ([`crate::telemetry::NodeSample`]: NICs with `kind`, the GPU panel tagged with `state`).
pub const VERSION: u32 = 2;
/// The oldest recording this efatop still reads: every change since reads back (a viewer and the run it
/// attaches to still need the same [`VERSION`]).
pub const OLDEST_RECORDING: u32 = 1;
/// The handshake line is never longer.
pub const MAX_HELLO: usize = 64;
/// No message is longer (a telemetry batch of thousands of ranks stays far below).
pub const MAX_MESSAGE: u32 = 256 << 20;

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
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    serde_json::to_writer(&mut *out, message)?;
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// Appends the message `StreamMessage::Event { t_us, event }` framed, without taking the event: rank 0
/// serializes each event once, for every viewer and the recording, and hands it on to its own consumer.
pub fn encode_event(t_us: u64, event: &ConsumerEvent, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
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
    #[error("a message announces {0} bytes, more than any message has")]
    TooLong(u32),
    #[error("a message is not valid: {0}")]
    Invalid(#[from] serde_json::Error),
}

/// The next message; `None` where the stream ends between messages.
pub fn read_message(reader: &mut impl Read) -> Result<Option<StreamMessage>, StreamError> {
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
    if len > MAX_MESSAGE {
        return Err(StreamError::TooLong(len));
    }
    let mut body = vec![0; len as usize];
    reader.read_exact(&mut body).map_err(|err| match err.kind() {
        std::io::ErrorKind::UnexpectedEof => StreamError::Truncated,
        _ => StreamError::Io(err),
    })?;
    Ok(Some(serde_json::from_slice(&body)?))
}

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
}
