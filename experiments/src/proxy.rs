//! `proxy`: GPU-initiated RDMA WRITEs through a CPU proxy (seed `proxy.md`).
//!
//! Rank 0's GPU runs the schedule: one kernel thread pushes a write request (target, channel, offset,
//! length, immediate) per write into the request ring (mapped host memory, see `efatop_cuda::ring`);
//! rank 0's CPU, on its progress loop, pops each request, posts exactly that RDMA WRITE, and publishes
//! how many writes completed (in ticket order) back to GPU-visible memory, where the kernel's `Quiet`
//! waits for it. The CPU never posts a write the GPU did not ask for, and refuses a request outside the
//! plan (unknown peer or channel, bytes outside the buffer).
//!
//! Configurations: `ProxySingle` (channel 0, Quiet after each write), `ProxyMulti` (the buffer split
//! over every channel, Quiet after each write), `ProxySingleNBI` and `ProxyMultiNBI` (the same writes,
//! Quiet once at the end). Rank 1 waits for every write's immediate and verifies its buffer.
//!
//! Timing is the GPU's (`%globaltimer`): Gbps = bytes of the timed iterations / (end of the last one −
//! start); Lat = time per iteration as the kernel sees it (for blocking configurations, push to Quiet's
//! return; for NBI, the push interval, with the final Quiet in the last iteration).
//!
//! Where the provider cannot register GPU memory (shm and tcp here), the proxy copies each requested
//! range device → host memory page-locked for CUDA before posting its write, and the columns say
//! `DMA(staged)`. The copies are asynchronous (a stream and an event per request) into a staging area of
//! twice the largest size, handed out in request order: a write is posted only once its own copy has
//! finished, and while it is in flight the next request's copy runs on the copy engine. Only NBI can
//! use that overlap; a blocking configuration has one request outstanding at a time.

use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};

use efatop_cuda::ring::Request;
use efatop_cuda::ring_gpu::{RingKernels, WriterPlan};
use efatop_cuda::stager::AsyncStager;
use efatop_cuda::DeviceBuffer;
use efatop_fabric::{HostBuffer, Immediate, MemoryRegion, Op, RemoteRegion};

use crate::pattern::PatternSeed;
use crate::payload::{cuda_error, exchange_regions, memory_labels, prepare, register_all, MemoryChoice, Payload};
use crate::results::{gbps, LatencyRecorder, Measurement, PairMeasurement};
use crate::sizes::format_size;
use crate::telemetry::Probe;
use crate::world::World;
use crate::write::{plan, WriteConfig};
use crate::{agree_on, check_sizes, ExperimentError, Observer, SweepOptions};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyConfig {
    Single,
    Multi,
    SingleNbi,
    MultiNbi,
}

impl ProxyConfig {
    pub const ALL: [ProxyConfig; 4] = [Self::Single, Self::Multi, Self::SingleNbi, Self::MultiNbi];

    /// `ProxySingle`, `ProxyMulti`, `ProxySingleNBI`, `ProxyMultiNBI`, then the memory suffix.
    pub fn column(self, memory_suffix: &str) -> String {
        let base = match self {
            Self::Single => "ProxySingle",
            Self::Multi => "ProxyMulti",
            Self::SingleNbi => "ProxySingleNBI",
            Self::MultiNbi => "ProxyMultiNBI",
        };
        format!("{base}{memory_suffix}")
    }

    fn layout(self) -> WriteConfig {
        match self {
            Self::Single | Self::SingleNbi => WriteConfig::Single,
            Self::Multi | Self::MultiNbi => WriteConfig::Multi,
        }
    }

    /// Quiet after every write (blocking) or once at the end (NBI).
    fn quiet_each(self) -> bool {
        matches!(self, Self::Single | Self::Multi)
    }
}

const WRITER: usize = 0;
const TARGET: usize = 1;
/// Slots of the request ring; the GPU waits when the CPU falls this far behind.
const RING_SLOTS: u64 = 1024;
/// Writes the proxy keeps posted at once before it completes the oldest.
const MAX_OUTSTANDING: usize = 48;
/// The staging area holds this many of the largest write: one being sent while the next is copied.
const STAGING_COPIES: usize = 2;
/// Progress calls per pass of the proxy's loop. shm moves a large write a bounded piece per progress call,
/// so the rest of a pass (ring polls, copy events) should not dilute them. On one H100 run, 4 rounds put
/// every NBI column ahead of blocking where 1 had not; shm's spread between machines is as large (README).
const PROGRESS_ROUNDS: usize = 4;
/// How often rank 0's proxy tells the log its queue's depth, requests/s and Quiet calls.
const REPORT_EVERY: Duration = Duration::from_secs(1);
/// How often the proxy reads its ring's depth for the dashboard: counting waiting slots reads up to
/// `RING_SLOTS` of them, too many for every pass of a loop that is being measured; a tenth of the
/// default telemetry interval keeps the gauge current.
const DEPTH_EVERY: Duration = Duration::from_millis(10);

pub fn run(
    world: &World<'_>,
    sweep: &SweepOptions,
    configs: &[ProxyConfig],
    observer: &mut dyn Observer,
) -> Result<Vec<Measurement>, ExperimentError> {
    if world.size < 2 {
        return Err(ExperimentError::InvalidInput {
            flag: "--ranks",
            message: "proxy needs 2 ranks (rank 0's GPU writes to rank 1)".into(),
        });
    }
    check_sizes(world, sweep)?;
    let Some(gpu) = world.gpu.as_ref() else {
        return Err(ExperimentError::Unsupported("proxy: no GPU is open on this rank".into()));
    };
    let largest = sweep.sizes.iter().copied().max().unwrap_or(4) as usize;
    let memory = [MemoryChoice::Device { gpu: gpu.ordinal() }];
    let payloads = prepare(world, &memory, largest, &world.channels, observer)?;
    let payload = &payloads[0];
    let kernels = agree_on(
        world,
        if world.rank == WRITER { RingKernels::new(gpu).map(Some).map_err(cuda_error) } else { Ok(None) },
        observer,
    )?;
    let columns: Vec<String> = configs.iter().map(|c| c.column(payload.suffix(true))).collect();
    observer.begin(&columns, &memory_labels(&payloads));

    let remotes: Vec<Vec<RemoteRegion>> = exchange_regions(world, payload)?;

    // Every rank agrees, so a writer that cannot set its staging up ends the run everywhere.
    let staging = if let (WRITER, Some((gpu, device))) = (world.rank, payload.staged_device()) {
        Some(agree_on(world, Staging::new(world, gpu, device, largest), observer)?)
    } else {
        agree_on(world, Ok(()), observer)?;
        None
    };

    let mut measurements = Vec::new();
    let mut expected_immediates = vec![0u64; world.channels.len()];
    for (config_index, (config, column)) in configs.iter().zip(&columns).enumerate() {
        for &size in &sweep.sizes {
            let seed = PatternSeed { sender: WRITER, size, iteration: config_index as u64 };
            observer.step(column, size);
            let outcome = match (world.rank, &kernels) {
                (WRITER, Some(kernels)) => payload.fill(seed, sweep.corrupt_byte).and_then(|()| {
                    let proxy = Proxy { world, sweep, remotes: &remotes, kernels, payload, staging: staging.as_ref() };
                    proxy.run(*config, column, size, observer).map(|(pair, latency)| {
                        Some(summarise(world, *config, column, size, sweep.iters, pair, &latency))
                    })
                }),
                (TARGET, _) => receive(world, sweep, *config, size, &mut expected_immediates)
                    .and_then(|()| verify(world, payload, column, seed))
                    .map(|()| None),
                _ => Ok(None),
            };
            // Told only once rank 1 has verified every byte (a failure anywhere ends the run here).
            if let Some(measurement) = agree_on(world, outcome, observer)? {
                observer.measured(&measurement);
                measurements.push(measurement);
            }
        }
    }
    Ok(measurements)
}

/// Where the proxy stages GPU bytes when the provider cannot register GPU memory: host memory registered
/// with CUDA (asynchronous copies) and with every channel (the NIC reads it).
struct Staging<'p> {
    device: &'p DeviceBuffer,
    stager: AsyncStager,
    regions: Vec<MemoryRegion>,
    capacity: u64,
}

impl<'p> Staging<'p> {
    fn new(world: &World<'_>, gpu: &efatop_cuda::Gpu, device: &'p DeviceBuffer, largest: usize) -> Result<Self, ExperimentError> {
        let host = Rc::new(HostBuffer::new(largest * STAGING_COPIES)?);
        let stager = AsyncStager::new(gpu, host.clone(), MAX_OUTSTANDING).map_err(cuda_error)?;
        let regions = register_all(&world.channels, &(host as Rc<dyn efatop_fabric::RegistrableMemory>))?;
        Ok(Self { device, stager, regions, capacity: (largest * STAGING_COPIES) as u64 })
    }

    /// Where a copy of `len` bytes can go, given the area's oldest and newest live copies (handed out and
    /// given back in request order, so the live bytes are one arc of a circle); `None` when it is full.
    fn place(&self, len: u64, oldest_start: Option<u64>, newest_end: Option<u64>) -> Option<u64> {
        place(self.capacity, len, oldest_start, newest_end)
    }
}

/// [`Staging::place`] in an area of `capacity` bytes.
fn place(capacity: u64, len: u64, oldest_start: Option<u64>, newest_end: Option<u64>) -> Option<u64> {
    let (Some(oldest), Some(newest)) = (oldest_start, newest_end) else {
        return (len <= capacity).then_some(0);
    };
    if newest > oldest {
        // Live bytes are oldest..newest: room after them, or else from the start up to the oldest.
        if newest + len <= capacity {
            Some(newest)
        } else {
            (len <= oldest).then_some(0)
        }
    } else {
        // Wrapped: live bytes are oldest..capacity and 0..newest.
        (newest + len <= oldest).then_some(newest)
    }
}

/// Rank 0's CPU proxy for one (configuration, size).
struct Proxy<'a, 'w> {
    world: &'a World<'w>,
    sweep: &'a SweepOptions,
    payload: &'a Payload,
    staging: Option<&'a Staging<'a>>,
    remotes: &'a [Vec<RemoteRegion>],
    kernels: &'a RingKernels,
}

/// A request the proxy accepted: being staged (no `op` yet), then posted.
struct Posted<'c> {
    request: Request,
    /// Its bytes' place in the staging area, when staged.
    staged_at: Option<u64>,
    /// Its staging event (the request's sequence number, modulo the pool).
    slot: usize,
    op: Option<Op<'c>>,
    started: Instant,
}

impl Proxy<'_, '_> {
    /// Launches the GPU's schedule and serves its requests until every write completed; returns the
    /// bandwidth measured on the GPU's clock and each timed iteration's duration.
    fn run(
        &self,
        config: ProxyConfig,
        column: &str,
        size: u64,
        observer: &mut dyn Observer,
    ) -> Result<(PairMeasurement, LatencyRecorder), ExperimentError> {
        let world = self.world;
        let channels_used = if config.layout() == WriteConfig::Single { 1 } else { world.channels.len() };
        let writes_per_iteration = plan(config.layout(), WRITER, &[TARGET], size, world.channels.len()).len() as u64;
        let (warmup, iters) = (self.sweep.warmup, self.sweep.iters);
        let expected = (warmup + iters) * writes_per_iteration;
        let ring = self.kernels.ring(RING_SLOTS).map_err(cuda_error)?;
        let mut ends = self.kernels.alloc::<u64>(iters as usize + 1).map_err(cuda_error)?;
        let writer = WriterPlan {
            peer: TARGET as u64,
            immediate_base: u64::from(Immediate::encode(world.rank, 0)),
            tag_mask: (1 << Immediate::TAG_BITS) - 1,
            size,
            channels: channels_used as u64,
            warmup,
            iters,
            quiet_each: config.quiet_each(),
        };
        let running = self.kernels.launch_writer(&ring, &writer, &mut ends).map_err(cuda_error)?;
        let view = ring.view();
        let mut consumer = view.consumer();
        let mut in_flight: VecDeque<Posted<'_>> = VecDeque::with_capacity(MAX_OUTSTANDING);
        let mut completed = 0u64;
        let mut accepted = 0usize;
        // A request popped while the staging area was full waits here (the ring keeps the rest).
        let mut waiting: Option<Request> = None;
        let mut report = QueueReport::new(column, size, &world.probe);
        let mut last_change = Instant::now();
        while completed < expected {
            let mut advanced = false;
            while in_flight.len() < MAX_OUTSTANDING {
                let Some(request) = waiting.take().or_else(|| consumer.try_pop().map(|(_, r)| r)) else { break };
                let (channel, len) = (request.channel as usize, request.len);
                if request.target as usize != TARGET
                    || channel >= channels_used
                    || request.offset.checked_add(len).is_none_or(|end| end > size)
                {
                    return Err(ExperimentError::Unsupported(format!(
                        "proxy: the GPU asked for a write outside its plan: {request:?} (size {size}, {channels_used} channels)"
                    )));
                }
                let slot = accepted % MAX_OUTSTANDING;
                let staged_at = match self.staging {
                    Some(staging) => {
                        let oldest = in_flight.iter().find_map(|p| p.staged_at);
                        let newest = in_flight.iter().rev().find_map(|p| p.staged_at.map(|at| at + p.request.len.max(1)));
                        let Some(at) = staging.place(len.max(1), oldest, newest) else {
                            waiting = Some(request);
                            break;
                        };
                        staging
                            .stager
                            .copy_out(staging.device, request.offset as usize, at as usize, len as usize, slot)
                            .map_err(cuda_error)?;
                        Some(at)
                    }
                    None => None,
                };
                accepted += 1;
                in_flight.push_back(Posted { request, staged_at, slot, op: None, started: Instant::now() });
                advanced = true;
            }
            advanced |= self.post_ready(&mut in_flight)?;
            for _ in 0..PROGRESS_ROUNDS {
                world.progress_all()?;
            }
            // Completions are published in ticket order: Quiet's "everything so far" is a prefix.
            while in_flight.front().is_some_and(|p| p.op.as_ref().is_some_and(Op::is_complete)) {
                let Some(Posted { op: Some(op), request, started, .. }) = in_flight.pop_front() else { break };
                op.wait()?;
                completed += 1;
                consumer.set_completed(completed);
                let channel = request.channel as usize;
                world.probe.completed(channel, TARGET, request.len, Some(started.elapsed()));
                world.probe.set_in_flight(channel, world.channels[channel].in_flight());
                advanced = true;
            }
            report.tick(observer, &consumer, view.quiet_calls(), in_flight.len());
            if advanced {
                last_change = Instant::now();
            } else if last_change.elapsed() > world.op_timeout {
                return Err(ExperimentError::Stalled {
                    waiting: format!(
                        "proxy: {completed} of {expected} GPU-requested writes completed, {} consumed",
                        consumer.consumed()
                    ),
                    timeout: world.op_timeout,
                });
            }
        }
        running.finish().map_err(cuda_error)?;
        if let Some((_, extra)) = consumer.try_pop() {
            return Err(ExperimentError::Unsupported(format!("proxy: the GPU pushed more requests than planned: {extra:?}")));
        }
        let ends = self.kernels.copy_back(&ends).map_err(cuda_error)?;
        let mut latency = LatencyRecorder::new();
        for pair in ends.windows(2) {
            latency.record(Duration::from_nanos(pair[1].saturating_sub(pair[0])));
        }
        let elapsed_ns = ends[iters as usize].saturating_sub(ends[0]).max(1);
        let measured = PairMeasurement {
            peers: vec![TARGET],
            gbps: gbps((size * iters) as f64, elapsed_ns as f64 / 1e9),
            mean_us: latency.summary().mean_us,
        };
        Ok((measured, latency))
    }

    /// Posts, in request order, every accepted write whose bytes are ready (staged: its copy's event has
    /// fired); says whether it posted any.
    fn post_ready<'c>(&'c self, in_flight: &mut VecDeque<Posted<'c>>) -> Result<bool, ExperimentError> {
        let world = self.world;
        let mut posted_any = false;
        for posted in in_flight.iter_mut().filter(|p| p.op.is_none()) {
            if let Some(staging) = self.staging {
                if !staging.stager.is_done(posted.slot).map_err(cuda_error)? {
                    break;
                }
            }
            let request = &posted.request;
            let channel = request.channel as usize;
            let (local, local_offset) = match (self.staging, posted.staged_at) {
                (Some(staging), Some(at)) => (&staging.regions[channel], at),
                _ => (&self.payload.regions[channel], request.offset),
            };
            posted.op = Some(world.channels[channel].write(
                TARGET,
                local,
                local_offset as usize,
                request.len as usize,
                self.remotes[TARGET][channel],
                request.offset,
                Some(request.immediate),
            )?);
            world.probe.set_in_flight(channel, world.channels[channel].in_flight());
            posted_any = true;
        }
        Ok(posted_any)
    }
}

/// Rank 0's line for the dashboard's log, once a second while a step runs: requests waiting in the ring,
/// those the proxy holds (staging or posted), requests/s popped since the last line, and Quiet calls.
/// Only the clock is read on other passes; the line is made and sent once a second.
///
/// Every pass also gives the telemetry probe the queue's figures (relaxed stores; the depth is re-read
/// every [`DEPTH_EVERY`]), which the dashboard's GPU panel draws live.
struct QueueReport<'c> {
    column: &'c str,
    size: u64,
    since: Instant,
    consumed_then: u64,
    probe: &'c Probe,
    /// What earlier steps' rings counted: each step's ring counts from zero, the probe's totals never go back.
    consumed_before: u64,
    quiet_calls_before: u64,
    depth: u64,
    depth_read: Option<Instant>,
}

impl<'c> QueueReport<'c> {
    fn new(column: &'c str, size: u64, probe: &'c Probe) -> Self {
        let (consumed_before, quiet_calls_before) = probe.queue_totals();
        Self {
            column,
            size,
            since: Instant::now(),
            consumed_then: 0,
            probe,
            consumed_before,
            quiet_calls_before,
            depth: 0,
            depth_read: None,
        }
    }

    fn tick(&mut self, observer: &mut dyn Observer, consumer: &efatop_cuda::ring::Consumer<'_>, quiet_calls: u64, held: usize) {
        let now = Instant::now();
        if self.depth_read.is_none_or(|read| now.duration_since(read) >= DEPTH_EVERY) {
            self.depth = consumer.waiting();
            self.depth_read = Some(now);
        }
        self.probe.set_queue(
            self.depth,
            RING_SLOTS,
            self.consumed_before + consumer.consumed(),
            self.quiet_calls_before + quiet_calls,
            held as u64,
        );
        let elapsed = now.duration_since(self.since);
        if elapsed < REPORT_EVERY {
            return;
        }
        let popped = consumer.consumed();
        let rate = (popped - self.consumed_then) as f64 / elapsed.as_secs_f64();
        observer.note(&format!(
            "proxy queue ({} {}): {} waiting in the ring, {held} held by the proxy, {:.0} requests/s, {quiet_calls} Quiet calls",
            self.column,
            format_size(self.size),
            consumer.waiting(),
            rate
        ));
        self.since = Instant::now();
        self.consumed_then = popped;
    }
}

/// Rank 1: waits for every write's immediate on each channel the configuration uses.
fn receive(world: &World<'_>, sweep: &SweepOptions, config: ProxyConfig, size: u64, expected: &mut [u64]) -> Result<(), ExperimentError> {
    for segment in plan(config.layout(), WRITER, &[world.rank], size, world.channels.len()) {
        expected[segment.channel] += sweep.warmup + sweep.iters;
    }
    world.progress_until(&world.channels, "proxy write immediates from rank 0", || {
        world.channels.iter().zip(expected.iter()).all(|(channel, want)| channel.immediates_from(WRITER) >= *want)
    })?;
    Ok(())
}

fn verify(world: &World<'_>, payload: &Payload, column: &str, seed: PatternSeed) -> Result<(), ExperimentError> {
    payload.stage_in(seed.size)?;
    payload.verify(seed)?.map_err(|mismatch| ExperimentError::Verification {
        receiver: world.rank,
        sender: seed.sender,
        config: column.to_string(),
        size: format_size(seed.size),
        detail: mismatch.to_string(),
    })
}

fn summarise(
    world: &World<'_>,
    config: ProxyConfig,
    column: &str,
    size: u64,
    iters: u64,
    pair: PairMeasurement,
    latency: &LatencyRecorder,
) -> Measurement {
    let channels_used = if config.layout() == WriteConfig::Single { 1 } else { world.channels.len() };
    Measurement {
        config: column.to_string(),
        size,
        count: size / 4,
        gbps: pair.gbps,
        busbw_percent: world.link_gbps.map(|link| 100.0 * pair.gbps / (link * channels_used as f64)),
        nccl_busbw_gbps: None,
        latency: latency.summary(),
        iterations: iters,
        pairs: vec![pair],
        // Told to the observer only after rank 1 verified and every rank agreed.
        verified: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_is_handed_out_in_request_order_and_never_overlaps_live_copies() {
        // Empty: from the start, if it fits at all.
        assert_eq!(place(100, 60, None, None), Some(0));
        assert_eq!(place(100, 101, None, None), None);
        // Live 0..60: the next 40 fit after it; 50 do not, nor before it (the oldest starts at 0).
        assert_eq!(place(100, 40, Some(0), Some(60)), Some(60));
        assert_eq!(place(100, 50, Some(0), Some(60)), None);
        // Live 30..90: 20 wrap to the start (room up to 30), 40 do not.
        assert_eq!(place(100, 20, Some(30), Some(90)), Some(0));
        assert_eq!(place(100, 40, Some(30), Some(90)), None);
        // Wrapped, live 30..100 and 0..20: room only between 20 and 30.
        assert_eq!(place(100, 10, Some(30), Some(20)), Some(20));
        assert_eq!(place(100, 11, Some(30), Some(20)), None);
        // Two of the largest write fill it exactly: the third waits for the first to complete.
        assert_eq!(place(200, 100, Some(0), Some(100)), Some(100));
        assert_eq!(place(200, 100, Some(0), Some(200)), None);
    }

    #[test]
    fn columns_follow_the_seed_with_the_memory_suffix() {
        let columns: Vec<String> = ProxyConfig::ALL.iter().map(|c| c.column("DMA(staged)")).collect();
        assert_eq!(columns, ["ProxySingleDMA(staged)", "ProxyMultiDMA(staged)", "ProxySingleNBIDMA(staged)", "ProxyMultiNBIDMA(staged)"]);
        assert!(ProxyConfig::Single.quiet_each() && !ProxyConfig::MultiNbi.quiet_each());
    }
}
