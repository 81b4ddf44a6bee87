//! Live telemetry as it travels: a rank's interval sample ([`RankSample`]: per channel and per peer bytes,
//! operations, in-flight and a latency histogram of the interval, and the GPU-side figures where an
//! experiment has them), its phase changes ([`PhaseReport`]), and [`wire`], how they travel to rank 0. The
//! hot path's probe and the sampler that makes these samples are `efatop_experiments::probe`'s.
//!
//! A node's read by `efatop monitor` is a [`NodeSample`] ([`node`]), judged rail by rail by `efatop_sweep::rails`.

pub mod histogram;
pub mod node;
pub mod wire;

pub use histogram::IntervalHistogram;
pub use node::{CounterStats, NicKind, NodeGpu, NodeGpus, NodeNic, NodeSample, NodeTopologyGpu};

/// What a rank is doing between transfers, told to rank 0 as progress: a rank busy locking, registering
/// or verifying a large buffer moves no bytes for a while, and is not hung.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Phase {
    /// Mapping, faulting in and locking a buffer.
    Allocating = 1,
    /// Registering a buffer with the provider.
    Registering = 2,
    /// Writing the pattern into the send buffer.
    Filling = 3,
    /// Moving bytes.
    Transferring = 4,
    /// Checking received bytes against the sender's pattern.
    Verifying = 5,
    /// Ending because the run failed elsewhere: a peer's failure reached this rank (an agreement round, the
    /// launcher's rendezvous, rank 0's stop). Its telemetry closing next is that failure's consequence, not
    /// its death: rank 0 names the rank whose connection closed without it.
    Leaving = 6,
    /// Its part of the run is done (its experiment returned): its telemetry closing next is the run's end
    /// reaching it before rank 0's own, never a death (rank 0 may still be saving its last step).
    Done = 7,
}

impl Phase {
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => Self::Allocating,
            2 => Self::Registering,
            3 => Self::Filling,
            4 => Self::Transferring,
            5 => Self::Verifying,
            6 => Self::Leaving,
            7 => Self::Done,
            _ => return None,
        })
    }

    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Allocating => "allocating",
            Self::Registering => "registering",
            Self::Filling => "filling",
            Self::Transferring => "transferring",
            Self::Verifying => "verifying",
            Self::Leaving => "leaving",
            Self::Done => "done",
        }
    }

    /// The phase as a rank's progress reads: its label and the size of the step it works on, when it has one.
    pub fn describe(self, bytes: u64) -> String {
        match self {
            Self::Leaving | Self::Done => self.label().to_string(),
            _ => format!("{} {}", self.label(), crate::sizes::format_size(bytes)),
        }
    }
}

/// A phase change as it travels to rank 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PhaseReport {
    pub rank: u32,
    /// Phase changes this rank has made so far (it only grows: the same phase twice is two changes).
    pub changes: u64,
    /// [`Phase::code`].
    pub phase: u8,
    /// The bytes the phase is about (the buffer being registered, the size being verified).
    pub bytes: u64,
}

/// One channel's interval.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ChannelSample {
    pub channel: u16,
    pub bytes: u64,
    pub ops: u64,
    pub in_flight: u32,
    pub latency: IntervalHistogram,
}

/// What this rank did with one peer during the interval.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PeerSample {
    pub peer: u32,
    pub bytes: u64,
    pub ops: u64,
    pub latency: IntervalHistogram,
}

impl PeerSample {
    /// For peers counted where their data lands (all-to-all): the transfer rate of a landing, its bytes
    /// over the time it took (the median of the interval's landings); `None` when nothing landed.
    pub fn landing_gbps(&self) -> Option<f64> {
        let p50_us = self.latency.quantile_us(0.50).filter(|us| *us > 0.0)?;
        (self.ops > 0).then(|| (self.bytes as f64 / self.ops as f64) * 8.0 / (p50_us * 1e3))
    }
}

/// The proxy's request queue at the end of an interval, and what went through it during the interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueueSample {
    /// Requests waiting in the ring.
    pub depth: u64,
    /// Slots of the ring.
    pub capacity: u64,
    /// Requests the proxy popped during the interval.
    pub requests: u64,
    /// Quiet calls the GPU made during the interval.
    pub quiet_calls: u64,
    /// Requests popped and not yet completed (staging or posted).
    pub held: u64,
}

impl QueueSample {
    pub fn requests_per_s(&self, interval_ns: u64) -> f64 {
        per_second(self.requests, interval_ns)
    }

    pub fn quiet_calls_per_s(&self, interval_ns: u64) -> f64 {
        per_second(self.quiet_calls, interval_ns)
    }
}

/// What this rank's GPU wrote into one peer's GPU over NVLink during the interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NvlinkSample {
    pub peer: u32,
    /// This rank's GPU and the peer's, as their node numbers them.
    pub gpu: u32,
    pub peer_gpu: u32,
    pub bytes: u64,
    /// The pair's peak in GB/s; `None` when not known. Never NaN, zero or negative.
    pub peak_gbytes_per_s: Option<f64>,
}

impl NvlinkSample {
    /// GB/s (10^9 bytes per second, as NVLink peaks are quoted) over an interval of `interval_ns`.
    pub fn gbytes_per_s(&self, interval_ns: u64) -> f64 {
        if interval_ns == 0 { 0.0 } else { self.bytes as f64 / interval_ns as f64 }
    }
}

fn per_second(count: u64, interval_ns: u64) -> f64 {
    if interval_ns == 0 { 0.0 } else { count as f64 * 1e9 / interval_ns as f64 }
}

/// One rank's telemetry for one interval; also its heartbeat (sent even when idle).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RankSample {
    pub rank: u32,
    /// Sequence number; gaps are samples dropped on the way.
    pub seq: u64,
    /// Length of the interval the counts cover.
    pub interval_ns: u64,
    /// Samples this rank has dropped so far because rank 0 did not keep up.
    pub drops: u64,
    pub channels: Vec<ChannelSample>,
    /// Only the peers with activity in the interval.
    pub peers: Vec<PeerSample>,
    /// The proxy's request queue, on the rank that runs one.
    pub queue: Option<QueueSample>,
    /// Every NVLink pair this rank described, idle ones too, in peer order.
    pub nvlink: Vec<NvlinkSample>,
}

impl RankSample {
    pub fn gbps(bytes: u64, interval_ns: u64) -> f64 {
        if interval_ns == 0 { 0.0 } else { bytes as f64 * 8.0 / interval_ns as f64 }
    }

    /// Bytes per second over an interval of `interval_ns` (0 for an empty interval).
    pub fn bytes_per_s(bytes: u64, interval_ns: u64) -> f64 {
        per_second(bytes, interval_ns)
    }

    /// The first index this sample carries that falls outside `world`: its rank, a channel's number, a
    /// peer's or an NVLink pair's peer rank. Every consumer refuses (and counts) a sample that has one,
    /// whole: an index outside the run's world must never size a table, and a sample naming one is not a
    /// rank of this run speaking.
    pub fn outside(&self, world: WorldBounds) -> Option<OutOfWorld> {
        let rank_in = |rank: u32| usize::try_from(rank).is_ok_and(|rank| rank < world.ranks);
        if !rank_in(self.rank) {
            return Some(OutOfWorld::Rank { rank: self.rank, ranks: world.ranks });
        }
        if let Some(channel) = self.channels.iter().find(|c| usize::from(c.channel) >= world.channels) {
            return Some(OutOfWorld::Channel { rank: self.rank, channel: channel.channel, channels: world.channels });
        }
        let mut peers = self.peers.iter().map(|p| p.peer).chain(self.nvlink.iter().map(|p| p.peer));
        peers.find(|peer| !rank_in(*peer)).map(|peer| OutOfWorld::Peer { rank: self.rank, peer, ranks: world.ranks })
    }
}

/// The run's world as a consumer of its telemetry knows it from the run's start (`RunInfo`, the world's
/// Hello): how many ranks, and how many channels each has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorldBounds {
    pub ranks: usize,
    pub channels: usize,
}

impl WorldBounds {
    /// A rank of this world, or why not (a node's read or a phase report names only its rank).
    pub fn rank(&self, rank: u32) -> Result<(), OutOfWorld> {
        if usize::try_from(rank).is_ok_and(|r| r < self.ranks) { Ok(()) } else { Err(OutOfWorld::Rank { rank, ranks: self.ranks }) }
    }

    /// The largest frame a rank of this world can send: every channel and every peer with every histogram
    /// bucket filled, and a node read's room; never above [`wire::MAX_FRAME`]. Rank 0's collector refuses
    /// a longer one before reading it.
    pub fn max_frame(&self) -> u32 {
        let histogram = 2 + 6 * histogram::BUCKETS;
        let bound = (256 << 10) + self.channels.saturating_mul(32 + histogram) + self.ranks.saturating_mul(64 + histogram);
        bound.min(wire::MAX_FRAME as usize) as u32
    }
}

/// Why a sample was refused: the index it carries outside the run's world ([`RankSample::outside`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutOfWorld {
    Rank { rank: u32, ranks: usize },
    Channel { rank: u32, channel: u16, channels: usize },
    Peer { rank: u32, peer: u32, ranks: usize },
}

impl std::fmt::Display for OutOfWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Rank { rank, ranks } => write!(f, "rank {rank} is outside the run's {ranks} ranks"),
            Self::Channel { rank, channel, channels } => write!(f, "rank {rank}'s channel {channel} is outside the run's {channels} channels"),
            Self::Peer { rank, peer, ranks } => write!(f, "rank {rank}'s peer {peer} is outside the run's {ranks} ranks"),
        }
    }
}

/// What one channel's interval comes to: the rate and latency figures the dashboard and `--json` show,
/// derived here once for both.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ChannelRates {
    pub gbps: f64,
    /// The same rate in bytes, for whoever counts bytes (Prometheus): never turned back from `gbps`.
    pub bytes_per_s: f64,
    pub ops_per_s: f64,
    pub lat_p50_us: Option<f64>,
    pub lat_p99_us: Option<f64>,
    pub lat_max_us: Option<f64>,
}

impl ChannelSample {
    /// This channel's figures over an interval of `interval_ns` (zero rates for an empty interval).
    pub fn rates(&self, interval_ns: u64) -> ChannelRates {
        let seconds = interval_ns as f64 / 1e9;
        ChannelRates {
            gbps: RankSample::gbps(self.bytes, interval_ns),
            bytes_per_s: RankSample::bytes_per_s(self.bytes, interval_ns),
            ops_per_s: if seconds > 0.0 { self.ops as f64 / seconds } else { 0.0 },
            lat_p50_us: self.latency.quantile_us(0.50),
            lat_p99_us: self.latency.quantile_us(0.99),
            lat_max_us: self.latency.max_us(),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_sample_outside_the_world_names_the_index() {
        let world = WorldBounds { ranks: 2, channels: 2 };
        let sample = |rank, channel, peer| RankSample {
            rank,
            channels: vec![ChannelSample { channel, ..ChannelSample::default() }],
            peers: vec![PeerSample { peer, ..PeerSample::default() }],
            ..RankSample::default()
        };
        assert_eq!(sample(1, 1, 0).outside(world), None);
        assert_eq!(sample(u32::MAX, 0, 0).outside(world), Some(OutOfWorld::Rank { rank: u32::MAX, ranks: 2 }));
        assert_eq!(sample(1, 2, 0).outside(world), Some(OutOfWorld::Channel { rank: 1, channel: 2, channels: 2 }));
        assert_eq!(sample(0, 0, 2).outside(world), Some(OutOfWorld::Peer { rank: 0, peer: 2, ranks: 2 }));
        let nvlink = RankSample { nvlink: vec![NvlinkSample { peer: 9, ..NvlinkSample::default() }], ..RankSample::default() };
        assert_eq!(nvlink.outside(world), Some(OutOfWorld::Peer { rank: 0, peer: 9, ranks: 2 }));
        assert_eq!(sample(0, 0, 0).outside(WorldBounds::default()).map(|o| o.to_string()).as_deref(), Some("rank 0 is outside the run's 0 ranks"));
    }

    use super::*;

    #[test]
    fn a_channels_rates_are_derived_once() {
        let channel = ChannelSample { channel: 0, bytes: 125_000_000, ops: 50, in_flight: 1, latency: IntervalHistogram::default() };
        let rates = channel.rates(100_000_000);
        assert!((rates.gbps - 10.0).abs() < 1e-9, "{rates:?}");
        assert!((rates.bytes_per_s - 1.25e9).abs() < 1e-3, "{rates:?}");
        assert!((rates.ops_per_s - 500.0).abs() < 1e-9, "{rates:?}");
        assert_eq!((rates.lat_p50_us, rates.lat_p99_us, rates.lat_max_us), (None, None, None));
        assert_eq!(channel.rates(0), ChannelRates { lat_p50_us: None, ..ChannelRates::default() });
    }

    #[test]
    fn gbps_of_an_interval() {
        assert!((RankSample::gbps(1_250_000_000, 1_000_000_000) - 10.0).abs() < 1e-9);
        assert!(RankSample::gbps(1, 0).abs() < f64::EPSILON);
    }
}
