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
//! Version 1 also knows [`KIND_NODE_SNAPSHOT`], one node's `efatop monitor` read ([`NodeSample`]); a
//! decoder that predates it rejects it as an unknown kind and goes on:
//!
//! ```text
//! u32 rank, u64 seq, u64 t_ms, f64 interval_ms, u64 drops, str host,
//! u16 topology GPU count, per GPU: u32 index, str pci_bus_id, str model (empty: not known)
//! u16 nic count, per NIC: str name, u8 flags (1: RDMA device, 2: present), f64 link_gbps, f64 tx_gbps,
//!                         f64 rx_gbps, u64 errors, u64 errors_delta, u64 retransmits, u64 retransmits_delta,
//!                         u16 GPU count, u16 per GPU
//! u8 GPU state: 0 then str reason (no GPU figures), or 1 then u16 GPU count,
//!               per GPU: u32 index, str name, str pci_bus_id, f64 pcie_tx_gbps, f64 pcie_rx_gbps,
//!                        f64 nvlink_tx_gbps, f64 nvlink_rx_gbps, str note
//! str: u16 byte length, then UTF-8; f64: a figure not known is NaN
//! ```
//!
//! Version 1 also knows [`KIND_RANK_SAMPLE_GPU`]: a rank sample with GPU-side figures (the proxy's
//! request queue, NVLink pairs), sent instead of [`KIND_RANK_SAMPLE`] only by a rank that has them, so
//! every other rank's frames stay byte for byte as above. Its body is a rank sample's, then:
//!
//! ```text
//! u8 queue state: 0 (no queue), or 1 then u64 depth, u64 capacity, u64 requests, u64 quiet_calls, u64 held
//! u32 NVLink pair count, per pair: u32 peer, u32 gpu, u32 peer_gpu, u64 bytes, f64 peak_gbytes_per_s
//!                                  (NaN: not known; otherwise positive and finite)
//! ```
//!
//! A frame of this kind with neither a queue nor a pair is malformed: that sample travels as kind 1.
//!
//! Version 1 also knows [`KIND_RANK_PHASE`]: a rank's phase change ([`PhaseReport`]), sent by its sampler
//! as soon as it sees one, beside its samples (which stay byte for byte as above). Rank 0 counts it as
//! progress; a decoder that predates it rejects it as an unknown kind and goes on:
//!
//! ```text
//! u32 rank, u64 changes, u8 phase (1 allocating, 2 registering, 3 filling, 4 transferring, 5 verifying,
//! 6 leaving: ending because of a failure elsewhere, bytes 0; 0 with 0 changes: the sampler's hello, which names the connection's rank before its first sample),
//! u64 bytes
//! ```
//!
//! Version 1 also knows [`KIND_RANK_GONE`]: a host's telemetry relay (the lowest rank of a host other than
//! rank 0's, which forwards its host's frames over one connection) says that one of the ranks it carried
//! closed its connection to the relay. It means to rank 0 what that rank's own connection closing means.
//! A rank's own sampler never sends it:
//!
//! ```text
//! u32 rank
//! ```
//!
//! A decoder never panics: a frame of another version, an unknown kind, a short or over-long body, or an
//! out-of-range bucket is a [`WireError`] naming what was wrong. Changing any of this is a new version; the
//! golden test below pins the bytes.

use super::histogram::{BUCKETS, IntervalHistogram};
use super::{
    ChannelSample, NicKind, NodeGpu, NodeGpus, NodeNic, NodeSample, NodeTopologyGpu, NvlinkSample, PeerSample, Phase, PhaseReport,
    QueueSample, RankSample,
};

pub const VERSION: u8 = 1;
pub const KIND_RANK_SAMPLE: u8 = 1;
pub const KIND_NODE_SNAPSHOT: u8 = 2;
pub const KIND_RANK_SAMPLE_GPU: u8 = 3;
pub const KIND_RANK_PHASE: u8 = 4;
pub const KIND_RANK_GONE: u8 = 5;
/// A phase frame's length: version, kind, rank, changes, phase, bytes.
pub const PHASE_FRAME_LEN: usize = 4 + 2 + 4 + 8 + 1 + 8;
/// A whole [`KIND_RANK_GONE`] frame, its length prefix included.
pub const GONE_FRAME_LEN: usize = 4 + 2 + 4;
/// The GPU section's queue state.
const NO_QUEUE: u8 = 0;
const QUEUE: u8 = 1;
/// [`NodeNic`] flags.
const NIC_RDMA: u8 = 1;
const NIC_PRESENT: u8 = 2;
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
    #[error("{0} is not UTF-8")]
    Text(&'static str),
    #[error("unknown NIC flags {0:#04x}")]
    NicFlags(u8),
    #[error("unknown GPU panel state {0}")]
    GpuState(u8),
    #[error("{0} is longer than a frame string can be")]
    TooLongText(&'static str),
    #[error("unknown queue state {0}")]
    QueueState(u8),
    #[error("NVLink peak towards rank {0} is not a positive rate")]
    NvlinkPeak(u32),
    #[error("GPU section with neither a queue nor an NVLink pair")]
    EmptyGpuSection,
    #[error("unknown phase {0}")]
    Phase(u8),
    /// A rejection as another efatop told it (a served or recorded run's rank 0), in its words.
    #[error("{0}")]
    Told(String),
}

/// A decoded frame of any kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Rank(RankSample),
    Node(NodeSample),
    Phase(PhaseReport),
    /// A relay's word that the rank it carried closed its connection.
    Gone(u32),
}

/// One framed [`KIND_RANK_GONE`], into a fixed array.
pub fn encode_gone(rank: u32) -> [u8; GONE_FRAME_LEN] {
    let mut frame = [0; GONE_FRAME_LEN];
    frame[..4].copy_from_slice(&((GONE_FRAME_LEN - 4) as u32).to_le_bytes());
    frame[4] = VERSION;
    frame[5] = KIND_RANK_GONE;
    frame[6..10].copy_from_slice(&rank.to_le_bytes());
    frame
}

fn decode_gone(body: &[u8]) -> Result<u32, WireError> {
    let mut reader = Reader { bytes: body };
    let rank = reader.u32("rank")?;
    if !reader.bytes.is_empty() {
        return Err(WireError::Trailing(reader.bytes.len()));
    }
    Ok(rank)
}

/// One framed phase change, into a fixed array: the sampler sends it without allocating.
pub fn encode_phase(report: &PhaseReport) -> [u8; PHASE_FRAME_LEN] {
    let mut frame = [0; PHASE_FRAME_LEN];
    frame[..4].copy_from_slice(&((PHASE_FRAME_LEN - 4) as u32).to_le_bytes());
    frame[4] = VERSION;
    frame[5] = KIND_RANK_PHASE;
    frame[6..10].copy_from_slice(&report.rank.to_le_bytes());
    frame[10..18].copy_from_slice(&report.changes.to_le_bytes());
    frame[18] = report.phase;
    frame[19..27].copy_from_slice(&report.bytes.to_le_bytes());
    frame
}

fn decode_phase(body: &[u8]) -> Result<PhaseReport, WireError> {
    let mut reader = Reader { bytes: body };
    let report = PhaseReport {
        rank: reader.u32("rank")?,
        changes: reader.u64("phase changes")?,
        phase: reader.u8("phase")?,
        bytes: reader.u64("phase bytes")?,
    };
    // Phase 0 with no changes is the sampler's hello: it names the connection's rank before the first sample.
    let hello = report.phase == 0 && report.changes == 0;
    if Phase::from_code(report.phase).is_none() && !hello {
        return Err(WireError::Phase(report.phase));
    }
    if !reader.bytes.is_empty() {
        return Err(WireError::Trailing(reader.bytes.len()));
    }
    Ok(report)
}

/// Appends one framed sample to `out`: a [`KIND_RANK_SAMPLE`] frame, or a [`KIND_RANK_SAMPLE_GPU`] one
/// when the sample has a queue or NVLink pairs.
pub fn encode(sample: &RankSample, out: &mut Vec<u8>) {
    let start = out.len();
    let gpu = sample.queue.is_some() || !sample.nvlink.is_empty();
    out.extend_from_slice(&[0; 4]);
    out.push(VERSION);
    out.push(if gpu { KIND_RANK_SAMPLE_GPU } else { KIND_RANK_SAMPLE });
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
    if gpu {
        encode_gpu_section(sample, out);
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

fn encode_gpu_section(sample: &RankSample, out: &mut Vec<u8>) {
    match &sample.queue {
        None => out.push(NO_QUEUE),
        Some(queue) => {
            out.push(QUEUE);
            for figure in [queue.depth, queue.capacity, queue.requests, queue.quiet_calls, queue.held] {
                out.extend_from_slice(&figure.to_le_bytes());
            }
        }
    }
    out.extend_from_slice(&(sample.nvlink.len() as u32).to_le_bytes());
    for pair in &sample.nvlink {
        out.extend_from_slice(&pair.peer.to_le_bytes());
        out.extend_from_slice(&pair.gpu.to_le_bytes());
        out.extend_from_slice(&pair.peer_gpu.to_le_bytes());
        out.extend_from_slice(&pair.bytes.to_le_bytes());
        // A peak the decoder would refuse goes as unknown: one bad figure must not cost the whole sample.
        put_figure(pair.peak_gbytes_per_s.filter(|peak| is_rate(*peak)), out);
    }
}

fn is_rate(figure: f64) -> bool {
    figure.is_finite() && figure > 0.0
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

/// Why a stream's next frame cannot be taken: either way the stream cannot be followed past it (nothing says
/// where the next frame would start), so its connection is dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// A length no frame has ([`check_length`]).
    #[error("a malformed frame ({0})")]
    Malformed(WireError),
    /// A frame longer than any the run's ranks send (`max_frame`, from the run's world).
    #[error("a frame of {len} bytes; a rank of this run sends at most {max}")]
    TooLong { len: usize, max: usize },
}

/// The next whole frame at the front of `received` (bytes of a stream, from a frame's start): its length
/// with the 4-byte prefix and its body, or `None` until more bytes arrive. Both of rank 0's readers (the
/// collector, a host's relay) split a stream with it.
pub fn split_frame(received: &[u8], max_frame: usize) -> Result<Option<(usize, &[u8])>, SplitError> {
    let Some(prefix) = received.first_chunk::<4>() else { return Ok(None) };
    let len = check_length(u32::from_le_bytes(*prefix)).map_err(SplitError::Malformed)?;
    if len > max_frame {
        return Err(SplitError::TooLong { len, max: max_frame });
    }
    Ok(received.get(4..4 + len).map(|body| (4 + len, body)))
}

/// Appends one framed node snapshot to `out`. A string longer than 65535 bytes cannot be framed; host,
/// device and GPU names never come close, and the node would rather say so than send a cut name.
pub fn encode_node(sample: &NodeSample, out: &mut Vec<u8>) -> Result<(), WireError> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.push(VERSION);
    out.push(KIND_NODE_SNAPSHOT);
    out.extend_from_slice(&sample.rank.to_le_bytes());
    out.extend_from_slice(&sample.seq.to_le_bytes());
    out.extend_from_slice(&sample.t_ms.to_le_bytes());
    put_figure(sample.interval_ms, out);
    out.extend_from_slice(&sample.drops.to_le_bytes());
    put_text(&sample.host, "host", out)?;
    put_count(sample.topology_gpus.len(), "topology GPU count", out)?;
    for gpu in &sample.topology_gpus {
        out.extend_from_slice(&index_u32(gpu.index).to_le_bytes());
        put_text(&gpu.pci_bus_id, "topology GPU bus id", out)?;
        put_text(gpu.model.as_deref().unwrap_or_default(), "topology GPU model", out)?;
    }
    put_count(sample.nics.len(), "NIC count", out)?;
    for nic in &sample.nics {
        put_text(&nic.name, "NIC name", out)?;
        out.push(if nic.kind == NicKind::Rdma { NIC_RDMA } else { 0 } | if nic.present { NIC_PRESENT } else { 0 });
        for figure in [nic.link_gbps, nic.tx_gbps, nic.rx_gbps] {
            put_figure(figure, out);
        }
        for count in [nic.errors, nic.errors_delta, nic.retransmits, nic.retransmits_delta] {
            out.extend_from_slice(&count.to_le_bytes());
        }
        // GPU indices past u16 do not exist; one that did would be left out rather than sent wrong.
        let gpus: Vec<u16> = nic.gpus.iter().filter_map(|gpu| u16::try_from(*gpu).ok()).collect();
        put_count(gpus.len(), "NIC GPU count", out)?;
        for gpu in gpus {
            out.extend_from_slice(&gpu.to_le_bytes());
        }
    }
    match &sample.gpus {
        NodeGpus::Unavailable(reason) => {
            out.push(0);
            put_text(reason, "GPU reason", out)?;
        }
        NodeGpus::Gpus(gpus) => {
            out.push(1);
            put_count(gpus.len(), "GPU count", out)?;
            for gpu in gpus {
                out.extend_from_slice(&index_u32(gpu.index).to_le_bytes());
                put_text(&gpu.name, "GPU name", out)?;
                put_text(&gpu.pci_bus_id, "GPU bus id", out)?;
                for figure in [gpu.pcie_tx_gbps, gpu.pcie_rx_gbps, gpu.nvlink_tx_gbps, gpu.nvlink_rx_gbps] {
                    put_figure(figure, out);
                }
                put_text(gpu.note.as_deref().unwrap_or_default(), "GPU note", out)?;
            }
        }
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// A GPU index as the frame carries it.
fn index_u32(index: usize) -> u32 {
    u32::try_from(index).unwrap_or(u32::MAX)
}

fn put_figure(figure: Option<f64>, out: &mut Vec<u8>) {
    out.extend_from_slice(&figure.unwrap_or(f64::NAN).to_le_bytes());
}

fn put_count(count: usize, what: &'static str, out: &mut Vec<u8>) -> Result<(), WireError> {
    let count = u16::try_from(count).map_err(|_| WireError::TooLongText(what))?;
    out.extend_from_slice(&count.to_le_bytes());
    Ok(())
}

fn put_text(text: &str, what: &'static str, out: &mut Vec<u8>) -> Result<(), WireError> {
    put_count(text.len(), what, out)?;
    out.extend_from_slice(text.as_bytes());
    Ok(())
}

/// Decodes one frame body of either kind.
pub fn decode_frame(body: &[u8]) -> Result<Frame, WireError> {
    match body.get(..2) {
        Some(&[VERSION, KIND_NODE_SNAPSHOT]) => decode_node(&body[2..]).map(Frame::Node),
        Some(&[VERSION, KIND_RANK_PHASE]) => decode_phase(&body[2..]).map(Frame::Phase),
        Some(&[VERSION, KIND_RANK_GONE]) => decode_gone(&body[2..]).map(Frame::Gone),
        _ => decode(body).map(Frame::Rank),
    }
}

fn decode_node(body: &[u8]) -> Result<NodeSample, WireError> {
    let mut reader = Reader { bytes: body };
    let mut sample = NodeSample {
        rank: reader.u32("rank")?,
        seq: reader.u64("seq")?,
        t_ms: reader.u64("t_ms")?,
        interval_ms: reader.figure("interval")?,
        drops: reader.u64("drops")?,
        host: reader.text("host")?,
        ..NodeSample::default()
    };
    let topology_gpus = reader.u16("topology GPU count")?;
    sample.topology_gpus.reserve(usize::from(topology_gpus).min(reader.bytes.len() / 8));
    for _ in 0..topology_gpus {
        sample.topology_gpus.push(NodeTopologyGpu {
            index: reader.u32("topology GPU index")? as usize,
            pci_bus_id: reader.text("topology GPU bus id")?,
            model: Some(reader.text("topology GPU model")?).filter(|model| !model.is_empty()),
        });
    }
    let nics = reader.u16("NIC count")?;
    // A NIC takes at least 61 bytes: capacity never follows a count the body cannot hold.
    sample.nics.reserve(usize::from(nics).min(reader.bytes.len() / 61));
    for _ in 0..nics {
        let name = reader.text("NIC name")?;
        let flags = reader.u8("NIC flags")?;
        if flags & !(NIC_RDMA | NIC_PRESENT) != 0 {
            return Err(WireError::NicFlags(flags));
        }
        let mut nic = NodeNic {
            name,
            kind: if flags & NIC_RDMA != 0 { NicKind::Rdma } else { NicKind::Net },
            present: flags & NIC_PRESENT != 0,
            link_gbps: reader.figure("link rate")?,
            tx_gbps: reader.figure("tx rate")?,
            rx_gbps: reader.figure("rx rate")?,
            errors: reader.u64("errors")?,
            errors_delta: reader.u64("errors delta")?,
            retransmits: reader.u64("retransmits")?,
            retransmits_delta: reader.u64("retransmits delta")?,
            ..NodeNic::default()
        };
        let gpus = reader.u16("NIC GPU count")?;
        nic.gpus.reserve(usize::from(gpus).min(reader.bytes.len() / 2));
        for _ in 0..gpus {
            nic.gpus.push(usize::from(reader.u16("NIC GPU")?));
        }
        sample.nics.push(nic);
    }
    sample.gpus = match reader.u8("GPU state")? {
        0 => NodeGpus::Unavailable(reader.text("GPU reason")?),
        1 => {
            let count = reader.u16("GPU count")?;
            let mut gpus = Vec::with_capacity(usize::from(count).min(reader.bytes.len() / 42));
            for _ in 0..count {
                gpus.push(NodeGpu {
                    index: reader.u32("GPU index")? as usize,
                    name: reader.text("GPU name")?,
                    pci_bus_id: reader.text("GPU bus id")?,
                    pcie_tx_gbps: reader.figure("PCIe tx")?,
                    pcie_rx_gbps: reader.figure("PCIe rx")?,
                    nvlink_tx_gbps: reader.figure("NVLink tx")?,
                    nvlink_rx_gbps: reader.figure("NVLink rx")?,
                    note: Some(reader.text("GPU note")?).filter(|note| !note.is_empty()),
                });
            }
            NodeGpus::Gpus(gpus)
        }
        other => return Err(WireError::GpuState(other)),
    };
    if !reader.bytes.is_empty() {
        return Err(WireError::Trailing(reader.bytes.len()));
    }
    Ok(sample)
}

/// Decodes one frame body (everything after the length prefix).
pub fn decode(body: &[u8]) -> Result<RankSample, WireError> {
    let mut reader = Reader { bytes: body };
    let version = reader.u8("version")?;
    if version != VERSION {
        return Err(WireError::Version(version));
    }
    let kind = reader.u8("kind")?;
    if kind != KIND_RANK_SAMPLE && kind != KIND_RANK_SAMPLE_GPU {
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
    if kind == KIND_RANK_SAMPLE_GPU {
        decode_gpu_section(&mut reader, &mut sample)?;
    }
    if !reader.bytes.is_empty() {
        return Err(WireError::Trailing(reader.bytes.len()));
    }
    Ok(sample)
}

fn decode_gpu_section(reader: &mut Reader<'_>, sample: &mut RankSample) -> Result<(), WireError> {
    sample.queue = match reader.u8("queue state")? {
        NO_QUEUE => None,
        QUEUE => Some(QueueSample {
            depth: reader.u64("queue depth")?,
            capacity: reader.u64("queue capacity")?,
            requests: reader.u64("queue requests")?,
            quiet_calls: reader.u64("Quiet calls")?,
            held: reader.u64("requests held")?,
        }),
        other => return Err(WireError::QueueState(other)),
    };
    let pairs = reader.u32("NVLink pair count")?;
    // A pair takes 28 bytes: capacity never follows a count the body cannot hold.
    sample.nvlink.reserve((pairs as usize).min(reader.bytes.len() / 28));
    for _ in 0..pairs {
        let peer = reader.u32("NVLink peer")?;
        let gpu = reader.u32("NVLink GPU")?;
        let peer_gpu = reader.u32("NVLink peer GPU")?;
        let bytes = reader.u64("NVLink bytes")?;
        let peak_gbytes_per_s = reader.figure("NVLink peak")?;
        if peak_gbytes_per_s.is_some_and(|peak| !is_rate(peak)) {
            return Err(WireError::NvlinkPeak(peer));
        }
        sample.nvlink.push(NvlinkSample { peer, gpu, peer_gpu, bytes, peak_gbytes_per_s });
    }
    if sample.queue.is_none() && sample.nvlink.is_empty() {
        return Err(WireError::EmptyGpuSection);
    }
    Ok(())
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

    fn figure(&mut self, what: &'static str) -> Result<Option<f64>, WireError> {
        let value = f64::from_le_bytes(self.take(what)?);
        Ok((!value.is_nan()).then_some(value))
    }

    fn text(&mut self, what: &'static str) -> Result<String, WireError> {
        let len = usize::from(self.u16(what)?);
        let Some((head, rest)) = self.bytes.split_at_checked(len) else { return Err(WireError::Truncated(what)) };
        self.bytes = rest;
        String::from_utf8(head.to_vec()).map_err(|_| WireError::Text(what))
    }

    fn histogram(&mut self) -> Result<IntervalHistogram, WireError> {
        let count = self.u16("bucket count")?;
        let mut buckets = super::histogram::Buckets::with_capacity(usize::from(count).min(self.bytes.len() / 6));
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
                latency: IntervalHistogram { buckets: smallvec::smallvec![(40, 1)] },
            }],
            peers: vec![PeerSample { peer: 0, bytes: 4096, ops: 1, latency: IntervalHistogram::default() }],
            ..RankSample::default()
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

    fn node() -> NodeSample {
        NodeSample {
            rank: 2,
            seq: 4,
            t_ms: 1000,
            interval_ms: Some(500.0),
            drops: 0,
            host: "n1".into(),
            topology_gpus: vec![NodeTopologyGpu { index: 5, pci_bus_id: "97:00".into(), model: None }],
            nics: vec![NodeNic {
                name: "efa0".into(),
                kind: NicKind::Rdma,
                present: true,
                gpus: vec![5],
                link_gbps: Some(100.0),
                tx_gbps: Some(12.5),
                rx_gbps: None,
                errors: 3,
                errors_delta: 1,
                retransmits: 7,
                retransmits_delta: 2,
                ..NodeNic::default()
            }],
            gpus: NodeGpus::Gpus(vec![NodeGpu {
                index: 0,
                name: "H100".into(),
                pci_bus_id: "53:00".into(),
                pcie_tx_gbps: Some(1.5),
                pcie_rx_gbps: Some(2.0),
                nvlink_tx_gbps: None,
                nvlink_rx_gbps: None,
                note: None,
            }]),
        }
    }

    fn node_frame(sample: &NodeSample) -> Vec<u8> {
        let mut frame = Vec::new();
        encode_node(sample, &mut frame).expect("short names frame");
        frame
    }

    /// The bytes of a version 1 node snapshot. If this fails, the format changed: bump VERSION.
    #[test]
    fn golden_node_frame() {
        let frame = node_frame(&node());
        let hex: String = frame.iter().fold(String::new(), |hex, b| hex + &format!("{b:02x}"));
        assert_eq!(
            hex,
            concat!(
                "b4000000", "01", "02", "02000000", "0400000000000000", "e803000000000000", "0000000000407f40",
                "0000000000000000", "0200", "6e31", "0100", "05000000", "0500", "39373a3030", "0000", "0100", "0400",
                "65666130", "03", "0000000000005940", "0000000000002940", "000000000000f87f", "0300000000000000",
                "0100000000000000", "0700000000000000", "0200000000000000", "0100", "0500", "01", "0100", "00000000",
                "0400", "48313030", "0500", "35333a3030", "000000000000f83f", "0000000000000040", "000000000000f87f",
                "000000000000f87f", "0000",
            )
        );
        assert_eq!(decode_frame(&frame[4..]), Ok(Frame::Node(node())));
        let unavailable = NodeSample { gpus: NodeGpus::Unavailable("no NVIDIA driver".into()), ..node() };
        assert_eq!(decode_frame(&node_frame(&unavailable)[4..]), Ok(Frame::Node(unavailable)));
    }

    /// `sample()` on the rank that runs the proxy and writes to two peers' GPUs over NVLink.
    fn gpu_sample() -> RankSample {
        RankSample {
            queue: Some(QueueSample { depth: 18, capacity: 1024, requests: 500, quiet_calls: 40, held: 3 }),
            nvlink: vec![
                NvlinkSample { peer: 1, gpu: 3, peer_gpu: 1, bytes: 37_120_000_000, peak_gbytes_per_s: Some(450.0) },
                NvlinkSample { peer: 2, gpu: 3, peer_gpu: 2, bytes: 0, peak_gbytes_per_s: None },
            ],
            ..sample()
        }
    }

    fn gpu_frame(sample: &RankSample) -> Vec<u8> {
        let mut frame = Vec::new();
        encode(sample, &mut frame);
        frame
    }

    /// The bytes of a version 1 rank sample with its GPU section: the rank sample's bytes exactly as in
    /// `golden_frame` (bar the length and kind), then the section. If this fails, the format changed.
    #[test]
    fn golden_gpu_frame() {
        let frame = gpu_frame(&gpu_sample());
        let hex: String = frame.iter().fold(String::new(), |hex, b| hex + &format!("{b:02x}"));
        assert_eq!(
            hex,
            concat!(
                "bd000000", "01", "03", "03000000", "0700000000000000", "00e1f50500000000", "0200000000000000",
                "0100", "0100", "0010000000000000", "0100000000000000", "05000000", "0100", "2800", "01000000",
                "01000000", "00000000", "0010000000000000", "0100000000000000", "0000",
                // queue: depth, capacity, requests, Quiet calls, held
                "01", "1200000000000000", "0004000000000000", "f401000000000000", "2800000000000000", "0300000000000000",
                // two pairs: peer, GPU, peer GPU, bytes, peak (450 GB/s; NaN: unknown)
                "02000000",
                "01000000", "03000000", "01000000", "004086a408000000", "0000000000207c40",
                "02000000", "03000000", "02000000", "0000000000000000", "000000000000f87f",
            )
        );
        assert_eq!(decode_frame(&frame[4..]), Ok(Frame::Rank(gpu_sample())));
        // Either half alone is a GPU section too.
        for half in [RankSample { nvlink: Vec::new(), ..gpu_sample() }, RankSample { queue: None, ..gpu_sample() }] {
            let frame = gpu_frame(&half);
            assert_eq!(frame[5], KIND_RANK_SAMPLE_GPU);
            assert_eq!(decode(&frame[4..]), Ok(half));
        }
    }

    #[test]
    fn a_peak_the_decoder_would_refuse_is_sent_as_unknown() {
        let mut odd = gpu_sample();
        odd.nvlink[0].peak_gbytes_per_s = Some(-1.0);
        odd.nvlink[1].peak_gbytes_per_s = Some(f64::INFINITY);
        let decoded = decode(&gpu_frame(&odd)[4..]).expect("decodes");
        assert_eq!(decoded.nvlink.iter().map(|pair| pair.peak_gbytes_per_s).collect::<Vec<_>>(), [None, None]);
    }

    #[test]
    fn malformed_gpu_sections_are_named_not_panicked_on() {
        let frame = gpu_frame(&gpu_sample());
        let body = &frame[4..];
        for cut in 0..body.len() {
            assert!(decode_frame(&body[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = body.to_vec();
        longer.push(0);
        assert_eq!(decode(&longer), Err(WireError::Trailing(1)));
        // The section starts where the plain rank sample ends.
        let section_at = gpu_frame(&sample()).len() - 4;
        let mut bad_state = body.to_vec();
        bad_state[section_at] = 2;
        assert_eq!(decode(&bad_state), Err(WireError::QueueState(2)));
        // The first pair's peak: after the state, the queue's five figures, the count and four fields.
        let peak_at = section_at + 1 + 5 * 8 + 4 + 4 + 4 + 4 + 8;
        assert_eq!(&body[peak_at..peak_at + 8], 450.0_f64.to_le_bytes());
        for bad_peak in [0.0, -450.0, f64::INFINITY] {
            let mut bad = body.to_vec();
            bad[peak_at..peak_at + 8].copy_from_slice(&f64::to_le_bytes(bad_peak));
            assert_eq!(decode(&bad), Err(WireError::NvlinkPeak(1)), "{bad_peak}");
        }
        // A GPU kind over a plain body, or with an empty section: neither is what an encoder sends.
        let mut plain = gpu_frame(&sample());
        plain[5] = KIND_RANK_SAMPLE_GPU;
        assert_eq!(decode(&plain[4..]), Err(WireError::Truncated("queue state")));
        plain.extend_from_slice(&[NO_QUEUE, 0, 0, 0, 0]);
        assert_eq!(decode(&plain[4..]), Err(WireError::EmptyGpuSection));
        // A huge pair count with no bytes behind it fails without allocating for it.
        let mut lying = body[..section_at + 1 + 40].to_vec();
        lying.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&lying), Err(WireError::Truncated("NVLink peer")));
    }

    #[test]
    fn rank_frames_still_decode_through_decode_frame_and_old_decoders_skip_node_frames() {
        let mut frame = Vec::new();
        encode(&sample(), &mut frame);
        assert_eq!(decode_frame(&frame[4..]), Ok(Frame::Rank(sample())));
        assert_eq!(frame[5], KIND_RANK_SAMPLE, "a rank without GPU figures sends the frame it always did");
        assert_eq!(decode(&node_frame(&node())[4..]), Err(WireError::Kind(KIND_NODE_SNAPSHOT)));
    }

    #[test]
    fn malformed_node_frames_are_named_not_panicked_on() {
        let frame = node_frame(&node());
        let body = &frame[4..];
        for cut in 0..body.len() {
            assert!(decode_frame(&body[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = body.to_vec();
        longer.push(0);
        assert_eq!(decode_frame(&longer), Err(WireError::Trailing(1)));
        // version, kind, rank, seq, t_ms, interval, drops, host (2 + 2), topology GPUs (2 + 4 + 2 + 5 + 2),
        // NIC count, NIC name (2 + 4): flags.
        let flags_at = 2 + 4 + 8 + 8 + 8 + 8 + 4 + 15 + 2 + 6;
        assert_eq!(body[flags_at], NIC_RDMA | NIC_PRESENT);
        let mut bad_flags = body.to_vec();
        bad_flags[flags_at] = 0x80;
        assert_eq!(decode_frame(&bad_flags), Err(WireError::NicFlags(0x80)));
        let mut bad_text = body.to_vec();
        bad_text[flags_at - 4] = 0xff;
        assert_eq!(decode_frame(&bad_text), Err(WireError::Text("NIC name")));
        let state_at = flags_at + 1 + 3 * 8 + 4 * 8 + 2 + 2;
        let mut bad_state = body.to_vec();
        bad_state[state_at] = 7;
        assert_eq!(decode_frame(&bad_state), Err(WireError::GpuState(7)));
        let mut huge_count = body[..flags_at - 8].to_vec();
        huge_count.extend_from_slice(&u16::MAX.to_le_bytes());
        assert!(matches!(decode_frame(&huge_count), Err(WireError::Truncated(_))));
        let long_name = NodeSample { host: "h".repeat(70_000), ..node() };
        assert_eq!(encode_node(&long_name, &mut Vec::new()), Err(WireError::TooLongText("host")));
    }

    /// The bytes of a version 1 phase frame. If this fails, the format changed: bump VERSION.
    #[test]
    fn golden_phase_frame() {
        let report = PhaseReport { rank: 3, changes: 9, phase: Phase::Registering.code(), bytes: 1 << 30 };
        let frame = encode_phase(&report);
        let hex: String = frame.iter().fold(String::new(), |hex, b| hex + &format!("{b:02x}"));
        assert_eq!(hex, concat!("17000000", "01", "04", "03000000", "0900000000000000", "02", "0000004000000000"));
        assert_eq!(decode_frame(&frame[4..]), Ok(Frame::Phase(report)));
        // Old decoders (rank samples only) reject it by kind, as they do node frames, and go on.
        assert_eq!(decode(&frame[4..]), Err(WireError::Kind(KIND_RANK_PHASE)));
        // And rank frames are unchanged by it.
        let mut rank = Vec::new();
        encode(&sample(), &mut rank);
        assert_eq!(decode_frame(&rank[4..]), Ok(Frame::Rank(sample())));
    }

    /// The bytes of a version 1 gone frame. If this fails, the format changed: bump VERSION.
    #[test]
    fn golden_gone_frame() {
        let frame = encode_gone(517);
        let hex: String = frame.iter().fold(String::new(), |hex, b| hex + &format!("{b:02x}"));
        assert_eq!(hex, concat!("06000000", "01", "05", "05020000"));
        assert_eq!(decode_frame(&frame[4..]), Ok(Frame::Gone(517)));
        assert_eq!(decode(&frame[4..]), Err(WireError::Kind(KIND_RANK_GONE)));
        for cut in 0..frame.len() - 4 {
            assert!(decode_frame(&frame[4..4 + cut]).is_err(), "cut at {cut}");
        }
        let mut longer = frame[4..].to_vec();
        longer.push(0);
        assert_eq!(decode_frame(&longer), Err(WireError::Trailing(1)));
    }

    #[test]
    fn malformed_phase_frames_are_named_not_panicked_on() {
        let frame = encode_phase(&PhaseReport { rank: 1, changes: 1, phase: Phase::Verifying.code(), bytes: 4096 });
        let body = &frame[4..];
        for cut in 0..body.len() {
            assert!(decode_frame(&body[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = body.to_vec();
        longer.push(0);
        assert_eq!(decode_frame(&longer), Err(WireError::Trailing(1)));
        let mut unknown = body.to_vec();
        unknown[2 + 4 + 8] = 0;
        assert_eq!(decode_frame(&unknown), Err(WireError::Phase(0)));
        // A hello (phase 0, no changes yet) is the one report of no phase a decoder takes.
        let hello = encode_phase(&PhaseReport { rank: 3, changes: 0, phase: 0, bytes: 0 });
        assert_eq!(decode_frame(&hello[4..]), Ok(Frame::Phase(PhaseReport { rank: 3, changes: 0, phase: 0, bytes: 0 })));
        unknown[2 + 4 + 8] = 8;
        assert_eq!(decode_frame(&unknown), Err(WireError::Phase(8)));
    }

    #[test]
    fn a_stream_splits_into_whole_frames_and_waits_for_a_partial_one() {
        let mut stream = encode_gone(3).to_vec();
        stream.extend_from_slice(&encode_gone(5));
        let one = GONE_FRAME_LEN;
        let (len, body) = split_frame(&stream, 64).expect("valid").expect("whole");
        assert_eq!(len, one);
        assert_eq!(decode_frame(body), Ok(Frame::Gone(3)));
        let (_, body) = split_frame(&stream[one..], 64).expect("valid").expect("whole");
        assert_eq!(decode_frame(body), Ok(Frame::Gone(5)));
        // A prefix alone, or a body cut short: wait for more.
        for cut in [0, 3, 4, one - 1] {
            assert_eq!(split_frame(&stream[..cut], 64), Ok(None), "cut at {cut}");
        }
        // Longer than the run allows, or than any frame may be: refused, whatever follows.
        assert_eq!(split_frame(&stream, one - 5), Err(SplitError::TooLong { len: one - 4, max: one - 5 }));
        let huge = (MAX_FRAME + 1).to_le_bytes();
        assert_eq!(split_frame(&huge, usize::MAX), Err(SplitError::Malformed(WireError::TooLong(MAX_FRAME + 1))));
        assert_eq!(
            SplitError::TooLong { len: 9, max: 8 }.to_string(),
            "a frame of 9 bytes; a rank of this run sends at most 8"
        );
    }

}
