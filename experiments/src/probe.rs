//! Live telemetry, measured without disturbing the measurement: the rank's [`Probe`] and its [`Sampler`].
//!
//! The hot path (posting, polling) only adds into a [`Probe`]'s atomics, as their one writer (relaxed loads
//! and stores, no locked instruction): no lock, no allocation, nothing it could wait on. A sampler thread
//! (the runtime's) reads the probe every interval with a [`Sampler`], which turns the counters into one
//! [`RankSample`] (per channel and per peer: bytes, operations, in-flight, a latency histogram of the
//! interval); proto's [`efatop_proto::telemetry::wire`] is how samples travel to rank 0.
//!
//! GPU-side figures travel the same way when an experiment has them: the proxy's request queue
//! ([`Probe::set_queue`]) and the bytes a rank's GPU writes into its peers' GPUs over NVLink
//! ([`Probe::set_nvlink_pair`], [`Probe::nvlink_moved`]). A rank that never sets them sends none.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use efatop_proto::telemetry::histogram::{self, bucket_of, BUCKETS};
use efatop_proto::telemetry::{ChannelSample, IntervalHistogram, NvlinkSample, PeerSample, Phase, PhaseReport, QueueSample, RankSample};

/// Adds `by` to one of a probe's counters. A probe's counters and histograms have one writer, the rank's
/// experiment thread (the sampler only reads them): a load and a store, not a locked read-modify-write,
/// whose fence would make every completion wait for the stores the hot path has pending (the bytes a
/// provider just copied on its thread). A second writer would lose counts: there is none.
#[inline]
pub fn bump(counter: &AtomicU64, by: u64) {
    counter.store(counter.load(Ordering::Relaxed).wrapping_add(by), Ordering::Relaxed);
}

/// A latency histogram of the wire's buckets ([`histogram`]) the hot path records into with one relaxed
/// atomic add: fixed size, so recording never allocates. Recorded into by one thread (see [`bump`]), read by any.
pub struct AtomicHistogram {
    buckets: Box<[AtomicU64]>,
}

impl Default for AtomicHistogram {
    fn default() -> Self {
        Self { buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect() }
    }
}

impl AtomicHistogram {
    #[inline]
    pub fn record(&self, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        bump(&self.buckets[bucket_of(ns)], 1);
    }

    /// The counts recorded since `last` (the previous snapshot, updated in place), as sparse buckets.
    pub fn interval_since(&self, last: &mut [u64]) -> IntervalHistogram {
        let mut interval = IntervalHistogram::default();
        self.interval_into(last, &mut interval);
        interval
    }

    /// As [`Self::interval_since`], into `out` (cleared first): with `out` holding room for [`BUCKETS`]
    /// buckets, nothing is allocated.
    pub fn interval_into(&self, last: &mut [u64], out: &mut IntervalHistogram) {
        out.buckets.clear();
        for (index, (bucket, previous)) in self.buckets.iter().zip(last.iter_mut()).enumerate() {
            let now = bucket.load(Ordering::Relaxed);
            let count = now.wrapping_sub(*previous);
            *previous = now;
            if count > 0 {
                out.buckets.push((index as u16, count.min(u64::from(u32::MAX)) as u32));
            }
        }
    }
}

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

/// The proxy's request queue as its CPU side last saw it (see [`Probe::set_queue`]).
#[derive(Default)]
struct QueueProbe {
    /// False until the first [`Probe::set_queue`]: a rank without a proxy sends no queue.
    reported: AtomicBool,
    depth: AtomicU64,
    capacity: AtomicU64,
    consumed_total: AtomicU64,
    quiet_calls_total: AtomicU64,
    held: AtomicU64,
}

/// What this rank's GPU wrote into one peer rank's GPU over NVLink.
#[derive(Default)]
struct NvlinkProbe {
    /// False until [`Probe::set_nvlink_pair`]: only described pairs are sent.
    described: AtomicBool,
    local_gpu: AtomicU32,
    peer_gpu: AtomicU32,
    /// `f64` bits of the pair's peak in GB/s; NaN when not known.
    peak_bits: AtomicU64,
    bytes: AtomicU64,
}

/// The phase the hot path last set: three relaxed stores, nothing to wait on.
#[derive(Default)]
struct PhaseProbe {
    changes: AtomicU64,
    code: AtomicU8,
    bytes: AtomicU64,
}

/// Whether the sampler samples (`--telemetry-ab` pauses every rank's sampler in every other block of timed
/// iterations, to measure what telemetry costs), and the sampler thread, which a phase change wakes.
#[derive(Default)]
struct SamplingGate {
    paused: AtomicBool,
    sampler: std::sync::OnceLock<std::thread::Thread>,
}

/// A rank's probe: one set of counters per channel and per peer rank. Shared (`Arc`) with the sampler.
/// Counts come from one thread, the rank's experiment (see [`bump`]); any thread may read.
pub struct Probe {
    channels: Box<[ChannelProbe]>,
    peers: Box<[Counters]>,
    queue: QueueProbe,
    /// Indexed by peer rank, allocated up front so that the hot path never allocates.
    nvlink: Box<[NvlinkProbe]>,
    phase: PhaseProbe,
    gate: SamplingGate,
}

impl Probe {
    pub fn new(channels: usize, ranks: usize) -> Self {
        Self {
            channels: (0..channels).map(|_| ChannelProbe::default()).collect(),
            peers: (0..ranks).map(|_| Counters::default()).collect(),
            queue: QueueProbe::default(),
            nvlink: (0..ranks).map(|_| NvlinkProbe::default()).collect(),
            phase: PhaseProbe::default(),
            gate: SamplingGate::default(),
        }
    }

    /// The thread that samples this probe: [`Probe::set_phase`] wakes it.
    pub fn attach_sampler(&self, thread: std::thread::Thread) {
        let _ = self.gate.sampler.set(thread);
    }

    /// Pauses (`false`) or resumes (`true`) the sampler: while paused it takes no sample and sends nothing,
    /// as if telemetry were off; counting goes on, and the first sample after a pause covers it. One store,
    /// and never a wake-up: the sampler keeps its own schedule in both arms, waking when a sample is due
    /// and, paused, going back to sleep. (A wake-up made from the hot thread at each switch, as this once
    /// did, cost the block after it 4–9 % at all-to-all's one-iteration blocks: docs/measurements.md.)
    pub fn set_sampling(&self, on: bool) {
        self.gate.paused.store(!on, Ordering::Release);
    }

    /// False while [`Probe::set_sampling`] has the sampler paused.
    pub fn sampling(&self) -> bool {
        !self.gate.paused.load(Ordering::Acquire)
    }

    /// This rank starts `phase` over `bytes`; the sampler, woken, tells rank 0 at once, which counts as the
    /// rank being alive. Called between steps, never inside a timed loop (the wake is a futex call when the
    /// sampler sleeps).
    #[inline]
    pub fn set_phase(&self, phase: Phase, bytes: u64) {
        self.phase.code.store(phase.code(), Ordering::Relaxed);
        self.phase.bytes.store(bytes, Ordering::Relaxed);
        // Release: a sampler that sees the new count sees the phase and bytes stored before it.
        self.phase.changes.fetch_add(1, Ordering::Release);
        if let Some(sampler) = self.gate.sampler.get() {
            sampler.unpark();
        }
    }

    /// The phase last set, as a report from `rank`; `None` before the first.
    pub fn phase(&self, rank: usize) -> Option<PhaseReport> {
        let changes = self.phase.changes.load(Ordering::Acquire);
        (changes > 0).then(|| PhaseReport {
            rank: rank as u32,
            changes,
            phase: self.phase.code.load(Ordering::Relaxed),
            bytes: self.phase.bytes.load(Ordering::Relaxed),
        })
    }

    /// Every byte counted on `channel` so far (sent and received); 0 for a channel it does not have. Read
    /// between steps, to hold a step's bytes against the NIC's counters.
    pub fn channel_bytes(&self, channel: usize) -> u64 {
        self.channels.get(channel).map_or(0, |probe| probe.counters.bytes.load(Ordering::Relaxed))
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
            bump(&probe.counters.bytes, bytes);
            bump(&probe.counters.ops, 1);
            if let Some(latency) = latency {
                probe.counters.latency.record(latency);
            }
        }
        if let Some(counters) = self.peers.get(peer) {
            bump(&counters.bytes, bytes);
            bump(&counters.ops, 1);
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
            bump(&probe.counters.bytes, bytes);
            bump(&probe.counters.ops, 1);
            probe.counters.latency.record(latency);
        }
    }

    /// All of `bytes` that `peer` sent in one round has landed here, `latency` after the round started;
    /// counted for the peer alone.
    #[inline]
    pub fn landed_from(&self, peer: usize, bytes: u64, latency: Duration) {
        if let Some(counters) = self.peers.get(peer) {
            bump(&counters.bytes, bytes);
            bump(&counters.ops, 1);
            counters.latency.record(latency);
        }
    }

    /// Bytes that arrived on `channel` from `peer` without a local operation (RDMA writes into our memory).
    #[inline]
    pub fn received(&self, channel: usize, peer: usize, bytes: u64, ops: u64) {
        if let Some(probe) = self.channels.get(channel) {
            bump(&probe.counters.bytes, bytes);
            bump(&probe.counters.ops, ops);
        }
        if let Some(counters) = self.peers.get(peer) {
            bump(&counters.bytes, bytes);
            bump(&counters.ops, ops);
        }
    }

    #[inline]
    pub fn set_in_flight(&self, channel: usize, in_flight: usize) {
        if let Some(probe) = self.channels.get(channel) {
            probe.in_flight.store(in_flight as u64, Ordering::Relaxed);
        }
    }

    /// The proxy's request queue now: `depth` requests waiting in a ring of `capacity` slots,
    /// `held_by_proxy` popped but not yet completed (staging or posted). `consumed_total` (requests popped)
    /// and `quiet_calls_total` (the GPU's Quiet calls) count over the probe's life and never go back: the
    /// sampler turns them into per-interval rates. Only the proxy's own thread calls this.
    #[inline]
    pub fn set_queue(&self, depth: u64, capacity: u64, consumed_total: u64, quiet_calls_total: u64, held_by_proxy: u64) {
        let queue = &self.queue;
        queue.depth.store(depth, Ordering::Relaxed);
        queue.capacity.store(capacity, Ordering::Relaxed);
        queue.consumed_total.store(consumed_total, Ordering::Relaxed);
        queue.quiet_calls_total.store(quiet_calls_total, Ordering::Relaxed);
        queue.held.store(held_by_proxy, Ordering::Relaxed);
        queue.reported.store(true, Ordering::Relaxed);
    }

    /// The `(consumed_total, quiet_calls_total)` last given to [`Probe::set_queue`]: where a proxy whose
    /// ring (and so its counters) starts afresh each step continues from.
    pub fn queue_totals(&self) -> (u64, u64) {
        (self.queue.consumed_total.load(Ordering::Relaxed), self.queue.quiet_calls_total.load(Ordering::Relaxed))
    }

    /// Describes the NVLink pair from this rank's GPU `local_gpu` to `peer_rank`'s GPU `peer_gpu` (GPU
    /// indices as the node numbers them), with the pair's peak in GB/s when known; a peak that is not a
    /// positive number counts as unknown. Call it once before the step that writes: from then on the
    /// pair is in every sample, idle or not. A peer rank out of range is ignored.
    pub fn set_nvlink_pair(&self, peer_rank: usize, local_gpu: u32, peer_gpu: u32, peak_gbytes_per_s: Option<f64>) {
        let Some(pair) = self.nvlink.get(peer_rank) else { return };
        let peak = peak_gbytes_per_s.filter(|peak| peak.is_finite() && *peak > 0.0).unwrap_or(f64::NAN);
        pair.local_gpu.store(local_gpu, Ordering::Relaxed);
        pair.peer_gpu.store(peer_gpu, Ordering::Relaxed);
        pair.peak_bits.store(peak.to_bits(), Ordering::Relaxed);
        // Release: a sampler that sees the pair described sees its GPUs and peak too (this is no hot path).
        pair.described.store(true, Ordering::Release);
    }

    /// This rank's GPU wrote `bytes` more into `peer_rank`'s GPU. Counted even before the pair is
    /// described, but sent only once it is.
    #[inline]
    pub fn nvlink_moved(&self, peer_rank: usize, bytes: u64) {
        if let Some(pair) = self.nvlink.get(peer_rank) {
            bump(&pair.bytes, bytes);
        }
    }
}

/// Turns a probe's running counters into interval samples; owned by the sampler thread.
pub struct Sampler {
    rank: u32,
    seq: u64,
    last_channels: Vec<(u64, u64, Vec<u64>)>,
    last_peers: Vec<(u64, u64, Vec<u64>)>,
    /// The queue's `(consumed_total, quiet_calls_total)` at the previous sample.
    last_queue: (u64, u64),
    /// Each peer's NVLink bytes at the previous sample.
    last_nvlink: Vec<u64>,
    /// Peer samples with room for a full histogram, not in use by the last sample.
    spare_peers: Vec<PeerSample>,
}

impl Sampler {
    pub fn new(rank: usize, probe: &Probe) -> Self {
        let zero = || (0, 0, vec![0; histogram::BUCKETS]);
        Self {
            rank: rank as u32,
            seq: 0,
            last_channels: (0..probe.channel_count()).map(|_| zero()).collect(),
            last_peers: (0..probe.rank_count()).map(|_| zero()).collect(),
            last_queue: (0, 0),
            last_nvlink: vec![0; probe.nvlink.len()],
            spare_peers: (0..probe.peers.len())
                .map(|_| PeerSample { latency: IntervalHistogram { buckets: histogram::Buckets::with_capacity(histogram::BUCKETS) }, ..PeerSample::default() })
                .collect(),
        }
    }

    /// Reads the probe and returns what changed since the previous call.
    pub fn sample(&mut self, probe: &Probe, interval: Duration, drops: u64) -> RankSample {
        let mut sample = Self::room(probe);
        self.sample_into(probe, interval, drops, &mut sample);
        sample
    }

    /// A sample with room for everything `probe` can report: given to [`Self::sample_into`] again and
    /// again, sampling allocates nothing.
    pub fn room(probe: &Probe) -> RankSample {
        let histogram = || IntervalHistogram { buckets: histogram::Buckets::with_capacity(histogram::BUCKETS) };
        RankSample {
            channels: (0..probe.channels.len())
                .map(|_| ChannelSample { latency: histogram(), ..ChannelSample::default() })
                .collect(),
            peers: Vec::with_capacity(probe.peers.len()),
            nvlink: Vec::with_capacity(probe.nvlink.len()),
            ..RankSample::default()
        }
    }

    /// Reads the probe into `sample`, reusing its vectors (see [`Self::room`]): the sampler thread must
    /// not allocate, since an allocation can wait on the process's memory map while the hot path locks or
    /// registers a large buffer.
    pub fn sample_into(&mut self, probe: &Probe, interval: Duration, drops: u64, sample: &mut RankSample) {
        sample.rank = self.rank;
        sample.seq = self.seq;
        sample.interval_ns = interval.as_nanos() as u64;
        sample.drops = drops;
        sample.queue = None;
        sample.nvlink.clear();
        self.seq += 1;
        sample.channels.truncate(probe.channels.len());
        for (index, (channel, last)) in probe.channels.iter().zip(&mut self.last_channels).enumerate() {
            if sample.channels.len() == index {
                sample.channels.push(ChannelSample::default());
            }
            let out = &mut sample.channels[index];
            let (bytes, ops) = delta(&channel.counters, last, &mut out.latency);
            out.channel = index as u16;
            out.bytes = bytes;
            out.ops = ops;
            out.in_flight = channel.in_flight.load(Ordering::Relaxed).min(u64::from(u32::MAX)) as u32;
        }
        // Only peers with activity are sent; the others' samples wait in `spare_peers`, room kept.
        self.spare_peers.append(&mut sample.peers);
        for (peer, (counters, last)) in probe.peers.iter().zip(&mut self.last_peers).enumerate() {
            let mut out = self.spare_peers.pop().unwrap_or_default();
            let (bytes, ops) = delta(counters, last, &mut out.latency);
            if ops > 0 || bytes > 0 {
                out.peer = peer as u32;
                out.bytes = bytes;
                out.ops = ops;
                sample.peers.push(out);
            } else {
                self.spare_peers.push(out);
            }
        }
        let queue = &probe.queue;
        if queue.reported.load(Ordering::Relaxed) {
            let totals = probe.queue_totals();
            // The caller promises totals that never go back; one that did would otherwise read as ~2^64.
            sample.queue = Some(QueueSample {
                depth: queue.depth.load(Ordering::Relaxed),
                capacity: queue.capacity.load(Ordering::Relaxed),
                requests: totals.0.saturating_sub(self.last_queue.0),
                quiet_calls: totals.1.saturating_sub(self.last_queue.1),
                held: queue.held.load(Ordering::Relaxed),
            });
            self.last_queue = totals;
        }
        for (peer, (pair, last)) in probe.nvlink.iter().zip(&mut self.last_nvlink).enumerate() {
            // Bytes moved before the pair was described are left for the first interval that sends it.
            if !pair.described.load(Ordering::Acquire) {
                continue;
            }
            let bytes = pair.bytes.load(Ordering::Relaxed);
            let peak = f64::from_bits(pair.peak_bits.load(Ordering::Relaxed));
            sample.nvlink.push(NvlinkSample {
                peer: peer as u32,
                gpu: pair.local_gpu.load(Ordering::Relaxed),
                peer_gpu: pair.peer_gpu.load(Ordering::Relaxed),
                bytes: bytes.wrapping_sub(*last),
                peak_gbytes_per_s: (!peak.is_nan()).then_some(peak),
            });
            *last = bytes;
        }
    }
}

fn delta(counters: &Counters, last: &mut (u64, u64, Vec<u64>), latency: &mut IntervalHistogram) -> (u64, u64) {
    let bytes = counters.bytes.load(Ordering::Relaxed);
    let ops = counters.ops.load(Ordering::Relaxed);
    counters.latency.interval_into(&mut last.2, latency);
    let result = (bytes.wrapping_sub(last.0), ops.wrapping_sub(last.1));
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
    fn gpu_figures_are_sent_once_set_as_interval_counts() {
        let probe = Probe::new(1, 4);
        let mut sampler = Sampler::new(0, &probe);
        probe.nvlink_moved(2, 1000);
        let quiet = sampler.sample(&probe, Duration::from_millis(100), 0);
        assert_eq!((quiet.queue, quiet.nvlink.len()), (None, 0), "nothing set, nothing extra sent");

        probe.set_queue(18, 1024, 500, 40, 3);
        probe.set_nvlink_pair(2, 0, 1, Some(450.0));
        probe.set_nvlink_pair(3, 0, 2, Some(f64::INFINITY));
        probe.set_nvlink_pair(9, 0, 3, None);
        probe.nvlink_moved(2, 37_120_000_000);
        let first = sampler.sample(&probe, Duration::from_millis(100), 0);
        assert_eq!(first.queue, Some(QueueSample { depth: 18, capacity: 1024, requests: 500, quiet_calls: 40, held: 3 }));
        let interval_ns = first.interval_ns;
        assert!((first.queue.map_or(0.0, |q| q.requests_per_s(interval_ns)) - 5000.0).abs() < 1e-6);
        assert!((first.queue.map_or(0.0, |q| q.quiet_calls_per_s(interval_ns)) - 400.0).abs() < 1e-6);
        // Rank 9 is out of range; an infinite peak is no peak; the 1000 bytes counted before the pair
        // was described arrive with its first interval.
        assert_eq!(
            first.nvlink,
            vec![
                NvlinkSample { peer: 2, gpu: 0, peer_gpu: 1, bytes: 37_120_001_000, peak_gbytes_per_s: Some(450.0) },
                NvlinkSample { peer: 3, gpu: 0, peer_gpu: 2, bytes: 0, peak_gbytes_per_s: None },
            ]
        );
        assert!((first.nvlink[0].gbytes_per_s(interval_ns) - 371.2).abs() < 1e-3);

        probe.set_queue(0, 1024, 700, 40, 0);
        probe.nvlink_moved(3, 5);
        let second = sampler.sample(&probe, Duration::from_millis(100), 0);
        assert_eq!(second.queue, Some(QueueSample { depth: 0, capacity: 1024, requests: 200, quiet_calls: 0, held: 0 }));
        assert_eq!(second.nvlink.iter().map(|pair| pair.bytes).collect::<Vec<_>>(), [0, 5], "idle pairs stay");
        // A caller whose totals went back gets no wrapped count.
        probe.set_queue(0, 1024, 10, 0, 0);
        assert_eq!(sampler.sample(&probe, Duration::from_millis(100), 0).queue.map(|q| (q.requests, q.quiet_calls)), Some((0, 0)));
        assert_eq!(probe.queue_totals(), (10, 0));
    }

    /// The sampler thread must not allocate (an allocation can wait seconds on the memory map lock while
    /// the hot path locks a large buffer): sampling into a sample from `room` reuses its memory, whatever
    /// the interval held.
    #[test]
    fn sampling_into_room_reuses_its_memory() {
        let probe = Probe::new(2, 4);
        let mut sampler = Sampler::new(0, &probe);
        let mut sample = Sampler::room(&probe);
        let addresses = |sample: &RankSample| {
            let mut all: Vec<(usize, usize)> = vec![(sample.channels.as_ptr() as usize, sample.channels.capacity())];
            all.push((sample.peers.as_ptr() as usize, sample.peers.capacity()));
            all.extend(sample.channels.iter().map(|c| (c.latency.buckets.as_ptr() as usize, c.latency.buckets.capacity())));
            all
        };
        sampler.sample_into(&probe, Duration::from_millis(100), 0, &mut sample);
        let before = addresses(&sample);
        let mut peer_buffers = std::collections::BTreeSet::new();
        for round in 0..50u64 {
            // Every bucket of every channel, and a changing set of peers.
            for bucket in 0..histogram::BUCKETS as u64 {
                probe.completed((round % 2) as usize, (round % 4) as usize, 1, Some(Duration::from_nanos(bucket_ns(bucket))));
            }
            probe.completed(1, ((round + 1) % 4) as usize, 1, Some(Duration::from_micros(3)));
            sampler.sample_into(&probe, Duration::from_millis(100), 0, &mut sample);
            assert_eq!(addresses(&sample), before, "round {round}");
            assert!(sample.peers.len() <= 2 && !sample.peers.is_empty());
            peer_buffers.extend(sample.peers.iter().map(|p| (p.latency.buckets.as_ptr() as usize, p.latency.buckets.capacity())));
        }
        // Only the peer samples made up front ever carry a histogram: one per rank, none made since.
        assert!(peer_buffers.len() <= 4, "{peer_buffers:?}");
        assert!(peer_buffers.iter().all(|(_, capacity)| *capacity >= histogram::BUCKETS));
    }

    /// `--telemetry-ab` pauses the sampler as a flag it reads: switching wakes nobody (a parked thread stays
    /// parked), and counting goes on whatever the flag says.
    #[test]
    fn pausing_and_resuming_the_sampler_is_a_flag_that_wakes_nobody() {
        let probe = std::sync::Arc::new(Probe::new(1, 2));
        assert!(probe.sampling());
        let (tx, rx) = std::sync::mpsc::channel();
        let sampler = std::thread::spawn(move || {
            // Parked until unparked: a wake-up from set_sampling would end the park early.
            std::thread::park_timeout(Duration::from_secs(3));
            tx.send(()).expect("sent");
        });
        probe.attach_sampler(sampler.thread().clone());
        for on in [false, true, false, true] {
            probe.set_sampling(on);
            assert_eq!(probe.sampling(), on);
        }
        assert!(rx.recv_timeout(Duration::from_millis(500)).is_err(), "switching arms woke the sampler");
        // A phase change does wake it.
        probe.set_phase(Phase::Transferring, 1);
        assert!(rx.recv_timeout(Duration::from_secs(30)).is_ok(), "a phase change did not wake the sampler");
        sampler.join().expect("joined");
        // Counting goes on whatever the sampler does.
        probe.set_sampling(false);
        probe.completed(0, 1, 10, None);
        assert_eq!(probe.channel_bytes(0), 10);
    }

    fn bucket_ns(bucket: u64) -> u64 {
        histogram::bucket_floor(bucket as usize)
    }

    #[test]
    fn a_histograms_interval_is_what_was_recorded_since_the_last() {
        let histogram = AtomicHistogram::default();
        let mut last = vec![0; BUCKETS];
        for us in 1..=100 {
            histogram.record(Duration::from_micros(us));
        }
        let interval = histogram.interval_since(&mut last);
        assert_eq!(interval.count(), 100);
        let p50 = interval.quantile_us(0.5).expect("p50");
        assert!((p50 - 50.0).abs() < 50.0 / 16.0 + 0.01, "{p50}");
        assert_eq!(histogram.interval_since(&mut last).count(), 0, "the next interval starts empty");
    }
}
