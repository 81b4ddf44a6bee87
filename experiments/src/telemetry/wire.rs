//! The telemetry wire format, from every rank to rank 0's collector. Binary and little-endian, because
//! rank 0 must decode 4096 ranks × 32 channels ten times a second on one core.
//!
//! A frame is `u32 length` (of what follows) then `u8 version`, `u8 kind`, and the body. Version
//! [`VERSION`] knows one kind, [`KIND_RANK_SAMPLE`]:
//!
//! ```text
//! u32 rank, u64 seq, u64 interval_ns, u64 drops,
//! u16 channel count, per channel: u16 channel, u64 bytes, u64 ops, u32 in_flight, histogram
//! u32 peer count,    per peer:    u32 peer,    u64 bytes, u64 ops, histogram
//! histogram: u16 bucket count, per bucket: u16 bucket, u32 count (buckets ascending)
//! ```
//!
//! A decoder never panics: a frame of another version, an unknown kind, a short or over-long body, or an
//! out-of-range bucket is a [`WireError`] naming what was wrong. Changing any of this is a new version; the
//! golden test below pins the bytes.

use super::histogram::{BUCKETS, IntervalHistogram};
use super::{ChannelSample, PeerSample, RankSample};

pub const VERSION: u8 = 1;
pub const KIND_RANK_SAMPLE: u8 = 1;
/// No frame is larger: 4096 peers with every bucket filled would not reach it.
pub const MAX_FRAME: u32 = 16 << 20;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("frame version {0} (this efatop speaks version {VERSION})")]
    Version(u8),
    #[error("unknown frame kind {0}")]
    Kind(u8),
    #[error("frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    TooLong(u32),
    #[error("frame ends early: {0}")]
    Truncated(&'static str),
    #[error("{0} trailing bytes after the sample")]
    Trailing(usize),
    #[error("bucket {0} out of range")]
    Bucket(u16),
}

/// Appends one framed sample to `out`.
pub fn encode(sample: &RankSample, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.push(VERSION);
    out.push(KIND_RANK_SAMPLE);
    out.extend_from_slice(&sample.rank.to_le_bytes());
    out.extend_from_slice(&sample.seq.to_le_bytes());
    out.extend_from_slice(&sample.interval_ns.to_le_bytes());
    out.extend_from_slice(&sample.drops.to_le_bytes());
    out.extend_from_slice(&(sample.channels.len() as u16).to_le_bytes());
    for channel in &sample.channels {
        out.extend_from_slice(&channel.channel.to_le_bytes());
        out.extend_from_slice(&channel.bytes.to_le_bytes());
        out.extend_from_slice(&channel.ops.to_le_bytes());
        out.extend_from_slice(&channel.in_flight.to_le_bytes());
        encode_histogram(&channel.latency, out);
    }
    out.extend_from_slice(&(sample.peers.len() as u32).to_le_bytes());
    for peer in &sample.peers {
        out.extend_from_slice(&peer.peer.to_le_bytes());
        out.extend_from_slice(&peer.bytes.to_le_bytes());
        out.extend_from_slice(&peer.ops.to_le_bytes());
        encode_histogram(&peer.latency, out);
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

fn encode_histogram(histogram: &IntervalHistogram, out: &mut Vec<u8>) {
    out.extend_from_slice(&(histogram.buckets.len() as u16).to_le_bytes());
    for (bucket, count) in &histogram.buckets {
        out.extend_from_slice(&bucket.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
    }
}

/// Checks a frame's length prefix before its body is read.
pub fn check_length(len: u32) -> Result<usize, WireError> {
    if len > MAX_FRAME { Err(WireError::TooLong(len)) } else { Ok(len as usize) }
}

/// Decodes one frame body (everything after the length prefix).
pub fn decode(body: &[u8]) -> Result<RankSample, WireError> {
    let mut reader = Reader { bytes: body };
    let version = reader.u8("version")?;
    if version != VERSION {
        return Err(WireError::Version(version));
    }
    let kind = reader.u8("kind")?;
    if kind != KIND_RANK_SAMPLE {
        return Err(WireError::Kind(kind));
    }
    let mut sample = RankSample {
        rank: reader.u32("rank")?,
        seq: reader.u64("seq")?,
        interval_ns: reader.u64("interval")?,
        drops: reader.u64("drops")?,
        ..RankSample::default()
    };
    let channels = reader.u16("channel count")?;
    // Capacity is bounded by what the body can hold, never by a count read off the wire.
    sample.channels.reserve(usize::from(channels).min(reader.bytes.len() / 24));
    for _ in 0..channels {
        sample.channels.push(ChannelSample {
            channel: reader.u16("channel")?,
            bytes: reader.u64("channel bytes")?,
            ops: reader.u64("channel ops")?,
            in_flight: reader.u32("in flight")?,
            latency: reader.histogram()?,
        });
    }
    let peers = reader.u32("peer count")?;
    sample.peers.reserve((peers as usize).min(reader.bytes.len() / 22));
    for _ in 0..peers {
        sample.peers.push(PeerSample {
            peer: reader.u32("peer")?,
            bytes: reader.u64("peer bytes")?,
            ops: reader.u64("peer ops")?,
            latency: reader.histogram()?,
        });
    }
    if !reader.bytes.is_empty() {
        return Err(WireError::Trailing(reader.bytes.len()));
    }
    Ok(sample)
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], WireError> {
        let (head, rest) = self.bytes.split_first_chunk::<N>().ok_or(WireError::Truncated(what))?;
        self.bytes = rest;
        Ok(*head)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.take::<1>(what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.take(what)?))
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.take(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.take(what)?))
    }

    fn histogram(&mut self) -> Result<IntervalHistogram, WireError> {
        let count = self.u16("bucket count")?;
        let mut buckets = Vec::with_capacity(usize::from(count).min(self.bytes.len() / 6));
        for _ in 0..count {
            let bucket = self.u16("bucket")?;
            if usize::from(bucket) >= BUCKETS {
                return Err(WireError::Bucket(bucket));
            }
            buckets.push((bucket, self.u32("bucket count")?));
        }
        Ok(IntervalHistogram { buckets })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RankSample {
        RankSample {
            rank: 3,
            seq: 7,
            interval_ns: 100_000_000,
            drops: 2,
            channels: vec![ChannelSample {
                channel: 1,
                bytes: 4096,
                ops: 1,
                in_flight: 5,
                latency: IntervalHistogram { buckets: vec![(40, 1)] },
            }],
            peers: vec![PeerSample { peer: 0, bytes: 4096, ops: 1, latency: IntervalHistogram::default() }],
        }
    }

    /// The bytes of version 1. If this fails, the format changed: bump VERSION.
    #[test]
    fn golden_frame() {
        let mut frame = Vec::new();
        encode(&sample(), &mut frame);
        let hex: String = frame.iter().fold(String::new(), |hex, b| hex + &format!("{b:02x}"));
        assert_eq!(
            hex,
            concat!(
                "58000000", "01", "01", "03000000", "0700000000000000", "00e1f50500000000", "0200000000000000",
                "0100", "0100", "0010000000000000", "0100000000000000", "05000000", "0100", "2800", "01000000",
                "01000000", "00000000", "0010000000000000", "0100000000000000", "0000",
            )
        );
        assert_eq!(decode(&frame[4..]), Ok(sample()));
    }

    #[test]
    fn malformed_frames_are_named_not_panicked_on() {
        let mut frame = Vec::new();
        encode(&sample(), &mut frame);
        let body = &frame[4..];
        let mut other_version = body.to_vec();
        other_version[0] = 9;
        assert_eq!(decode(&other_version), Err(WireError::Version(9)));
        let mut other_kind = body.to_vec();
        other_kind[1] = 4;
        assert_eq!(decode(&other_kind), Err(WireError::Kind(4)));
        for cut in 0..body.len() {
            assert!(decode(&body[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = body.to_vec();
        longer.push(0);
        assert_eq!(decode(&longer), Err(WireError::Trailing(1)));
        let mut bad_bucket = body.to_vec();
        let at = body.len() - 26 - 6; // the channel's one bucket index
        bad_bucket[at..at + 2].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(decode(&bad_bucket), Err(WireError::Bucket(u16::MAX)));
        assert_eq!(check_length(MAX_FRAME + 1), Err(WireError::TooLong(MAX_FRAME + 1)));
        // A huge count with no bytes behind it fails without allocating for it.
        let mut lying = body[..34].to_vec();
        lying.extend_from_slice(&u16::MAX.to_le_bytes());
        assert!(matches!(decode(&lying), Err(WireError::Truncated(_))));
    }
}
