//! Live telemetry, measured without disturbing the measurement.
//!
//! The hot path (posting, polling) only does relaxed atomic adds into a [`Probe`]: no lock, no allocation,
//! nothing it could wait on. A sampler thread reads the probe every interval, turns the counters into one
//! [`RankSample`] (per channel and per peer: bytes, operations, in-flight, a latency histogram of the
//! interval) and hands it on; [`wire`] is how samples travel to rank 0.

pub mod histogram;
pub mod node;
pub mod wire;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use histogram::{AtomicHistogram, IntervalHistogram};
pub use node::{NodeGpu, NodeGpus, NodeNic, NodeSample, NodeTopologyGpu};

/// Counters for one channel or one peer, written by the hot path.
#[derive(Default)]
pub struct Counters {
    pub bytes: AtomicU64,
    pub ops: AtomicU64,
    pub latency: AtomicHistogram,
}

/// Per-channel counters plus the channel's operations in flight.
#[derive(Default)]
pub struct ChannelProbe {
    pub counters: Counters,
    pub in_flight: AtomicU64,
}

/// A rank's probe: one set of counters per channel and per peer rank. Shared (`Arc`) with the sampler.
pub struct Probe {
    channels: Box<[ChannelProbe]>,
    peers: Box<[Counters]>,
}

impl Probe {
    pub fn new(channels: usize, ranks: usize) -> Self {
        Self {
            channels: (0..channels).map(|_| ChannelProbe::default()).collect(),
            peers: (0..ranks).map(|_| Counters::default()).collect(),
        }
    }

    pub fn channel_count(&self) -> usize {
        self.channels.len()
    }

    pub fn rank_count(&self) -> usize {
        self.peers.len()
    }

    /// An operation of `bytes` with `peer` completed on `channel`; `latency` is its post-to-completion time
    /// when the caller timed it.
    #[inline]
    pub fn completed(&self, channel: usize, peer: usize, bytes: u64, latency: Option<Duration>) {
        if let Some(probe) = self.channels.get(channel) {
            probe.counters.bytes.fetch_add(bytes, Ordering::Relaxed);
            probe.counters.ops.fetch_add(1, Ordering::Relaxed);
            if let Some(latency) = latency {
                probe.counters.latency.record(latency);
            }
        }
        if let Some(counters) = self.peers.get(peer) {
            counters.bytes.fetch_add(bytes, Ordering::Relaxed);
            counters.ops.fetch_add(1, Ordering::Relaxed);
            if let Some(latency) = latency {
                counters.latency.record(latency);
            }
        }
    }

    /// An operation of `bytes` completed on `channel`, counted for the channel alone (all-to-all counts its
    /// peers where data lands, with [`Probe::landed_from`]).
    #[inline]
    pub fn channel_completed(&self, channel: usize, bytes: u64, latency: Duration) {
        if let Some(probe) = self.channels.get(channel) {
            probe.counters.bytes.fetch_add(bytes, Ordering::Relaxed);
            probe.counters.ops.fetch_add(1, Ordering::Relaxed);
            probe.counters.latency.record(latency);
        }
    }

    /// All of `bytes` that `peer` sent in one round has landed here, `latency` after the round started;
    /// counted for the peer alone.
    #[inline]
    pub fn landed_from(&self, peer: usize, bytes: u64, latency: Duration) {
        if let Some(counters) = self.peers.get(peer) {
            counters.bytes.fetch_add(bytes, Ordering::Relaxed);
            counters.ops.fetch_add(1, Ordering::Relaxed);
            counters.latency.record(latency);
        }
    }

    /// Bytes that arrived on `channel` from `peer` without a local operation (RDMA writes into our memory).
    #[inline]
    pub fn received(&self, channel: usize, peer: usize, bytes: u64, ops: u64) {
        if let Some(probe) = self.channels.get(channel) {
            probe.counters.bytes.fetch_add(bytes, Ordering::Relaxed);
            probe.counters.ops.fetch_add(ops, Ordering::Relaxed);
        }
        if let Some(counters) = self.peers.get(peer) {
            counters.bytes.fetch_add(bytes, Ordering::Relaxed);
            counters.ops.fetch_add(ops, Ordering::Relaxed);
        }
    }

    #[inline]
    pub fn set_in_flight(&self, channel: usize, in_flight: usize) {
        if let Some(probe) = self.channels.get(channel) {
            probe.in_flight.store(in_flight as u64, Ordering::Relaxed);
        }
    }
}

/// One channel's interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChannelSample {
    pub channel: u16,
    pub bytes: u64,
    pub ops: u64,
    pub in_flight: u32,
    pub latency: IntervalHistogram,
}

/// What this rank did with one peer during the interval.
#[derive(Clone, Debug, Default, PartialEq)]
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

/// One rank's telemetry for one interval; also its heartbeat (sent even when idle).
#[derive(Clone, Debug, Default, PartialEq)]
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
}

impl RankSample {
    pub fn gbps(bytes: u64, interval_ns: u64) -> f64 {
        if interval_ns == 0 { 0.0 } else { bytes as f64 * 8.0 / interval_ns as f64 }
    }
}

/// Turns a probe's running counters into interval samples; owned by the sampler thread.
pub struct Sampler {
    rank: u32,
    seq: u64,
    last_channels: Vec<(u64, u64, Vec<u64>)>,
    last_peers: Vec<(u64, u64, Vec<u64>)>,
}

impl Sampler {
    pub fn new(rank: usize, probe: &Probe) -> Self {
        let zero = || (0, 0, vec![0; histogram::BUCKETS]);
        Self {
            rank: rank as u32,
            seq: 0,
            last_channels: (0..probe.channel_count()).map(|_| zero()).collect(),
            last_peers: (0..probe.rank_count()).map(|_| zero()).collect(),
        }
    }

    /// Reads the probe and returns what changed since the previous call.
    pub fn sample(&mut self, probe: &Probe, interval: Duration, drops: u64) -> RankSample {
        let mut sample = RankSample {
            rank: self.rank,
            seq: self.seq,
            interval_ns: interval.as_nanos() as u64,
            drops,
            channels: Vec::with_capacity(probe.channels.len()),
            peers: Vec::new(),
        };
        self.seq += 1;
        for (index, (channel, last)) in probe.channels.iter().zip(&mut self.last_channels).enumerate() {
            let (bytes, ops, latency) = delta(&channel.counters, last);
            sample.channels.push(ChannelSample {
                channel: index as u16,
                bytes,
                ops,
                in_flight: channel.in_flight.load(Ordering::Relaxed).min(u64::from(u32::MAX)) as u32,
                latency,
            });
        }
        for (peer, (counters, last)) in probe.peers.iter().zip(&mut self.last_peers).enumerate() {
            let (bytes, ops, latency) = delta(counters, last);
            if ops > 0 || bytes > 0 {
                sample.peers.push(PeerSample { peer: peer as u32, bytes, ops, latency });
            }
        }
        sample
    }
}

fn delta(counters: &Counters, last: &mut (u64, u64, Vec<u64>)) -> (u64, u64, IntervalHistogram) {
    let bytes = counters.bytes.load(Ordering::Relaxed);
    let ops = counters.ops.load(Ordering::Relaxed);
    let latency = counters.latency.interval_since(&mut last.2);
    let result = (bytes.wrapping_sub(last.0), ops.wrapping_sub(last.1), latency);
    last.0 = bytes;
    last.1 = ops;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_hold_what_happened_in_their_interval() {
        let probe = Probe::new(2, 3);
        let mut sampler = Sampler::new(0, &probe);
        probe.completed(1, 2, 4096, Some(Duration::from_micros(10)));
        probe.completed(1, 2, 4096, Some(Duration::from_micros(20)));
        probe.received(0, 1, 1 << 20, 4);
        probe.set_in_flight(1, 3);
        let first = sampler.sample(&probe, Duration::from_millis(100), 0);
        assert_eq!(first.seq, 0);
        assert_eq!(first.channels[1].bytes, 8192);
        assert_eq!(first.channels[1].ops, 2);
        assert_eq!(first.channels[1].in_flight, 3);
        assert_eq!(first.channels[1].latency.count(), 2);
        assert_eq!(first.channels[0].bytes, 1 << 20);
        assert_eq!(first.peers.iter().map(|p| p.peer).collect::<Vec<_>>(), vec![1, 2]);
        let second = sampler.sample(&probe, Duration::from_millis(100), 5);
        assert_eq!(second.seq, 1);
        assert_eq!(second.drops, 5);
        assert!(second.channels.iter().all(|c| c.bytes == 0 && c.latency.count() == 0));
        assert!(second.peers.is_empty(), "idle peers are left out");
    }

    #[test]
    fn gbps_of_an_interval() {
        assert!((RankSample::gbps(1_250_000_000, 1_000_000_000) - 10.0).abs() < 1e-9);
        assert!(RankSample::gbps(1, 0).abs() < f64::EPSILON);
    }
}
