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
//! Where the provider registers GPU memory (efa with dma-buf or nvidia-peermem, shm of a libfabric built
//! with CUDA), each write goes straight from the GPU's buffer: no copy, columns `ProxySingleDMA` ….
//! Where it cannot (tcp; shm of libfabric 1.17), or with `--staged`, the proxy copies each requested
//! range device → host memory page-locked for CUDA before posting its write, and the columns say
//! `DMA(staged)`. The copies are asynchronous (a stream and an event per request) into a staging area of
//! twice the largest size, cut for each step into fixed slots per channel: a blocking configuration holds
//! one request at a time and reuses one slot; NBI double-buffers (small requests: up to 16 MiB ahead), so
//! while request k's write is in flight request k+1's copy runs on the copy engine. A write is posted only
//! once its own copy has finished, without waiting inside the provider (EAGAIN leaves it queued), and a
//! slot is reused only once its write completed. After each step rank 0 logs where its requests spent
//! their time (`proxy stages`). Where a provider offers `FI_HMEM` but cannot register GPU memory (shm in
//! libfabric 1.17), the world opens its endpoints without it, which keeps shm's single-copy CMA path.

use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};

use efatop_cuda::ring::Request;
use efatop_cuda::ring_gpu::{RingKernels, WriterPlan};
use efatop_cuda::stager::AsyncStager;
use efatop_cuda::DeviceBuffer;
use efatop_fabric::{HostBuffer, Immediate, MemoryRegion, Op, RemoteRegion};
use efatop_proto::column::{Column, ProxyLayout};
use efatop_proto::counters::StepOp;
use efatop_proto::results::{gbps, LatencyRecorder, Measurement, PairMeasurement};
use efatop_proto::sizes::format_size;

use crate::pattern::PatternSeed;
use crate::payload::{exchange_regions, memory_labels, prepare, register_all, MemoryChoice, Payload};
use crate::probe::Probe;
use crate::world::World;
use crate::write::verify_received;
use crate::{agree_on, check_sizes, cuda_error, ExperimentError, Observer, StepOptions};

/// Quiet after every write (blocking) or once at the end (NBI).
fn quiet_each(config: ProxyLayout) -> bool {
    !config.nbi()
}

const WRITER: usize = 0;
const TARGET: usize = 1;
/// Slots of the request ring; the GPU waits when the CPU falls this far behind.
const RING_SLOTS: u64 = 1024;
/// Writes the proxy keeps posted at once before it completes the oldest.
const MAX_OUTSTANDING: usize = 48;
/// The staging area holds this many of the largest write (rounded up to whole channels): one being sent
/// while the next is copied.
const STAGING_COPIES: usize = 2;
/// NBI keeps each channel's pipeline at least this many staged bytes ahead (one request being written,
/// the next ones copied), so the peer always finds the next write queued even when a request is small
/// and the proxy's pass (completion, copy launch, event poll, post) takes about as long as the write.
const AHEAD_BYTES: u64 = 16 << 20;
/// At most this many requests per channel in an NBI pipeline (and at least 2: one sent, one copied).
const MAX_DEPTH: usize = 16;
/// Progress calls per pass of the proxy's loop. shm moves a large write a bounded piece per progress call,
/// so the rest of a pass (ring polls, copy events) should not dilute them. On one H100 run, 4 rounds put
/// every NBI column ahead of blocking where 1 had not; shm's spread between machines is as large (docs/archive/measurements-2026.md).
const PROGRESS_ROUNDS: usize = 4;
/// How often rank 0's proxy tells the log its queue's depth, requests/s and Quiet calls.
const REPORT_EVERY: Duration = Duration::from_secs(1);
/// How often the proxy reads its ring's depth for the dashboard: counting waiting slots reads up to
/// `RING_SLOTS` of them, too many for every pass of a loop that is being measured; a tenth of the
/// default telemetry interval keeps the gauge current.
const DEPTH_EVERY: Duration = Duration::from_millis(10);

/// The default largest write the GPU asks for (`--chunk`): a kernel that sends per tile or per expert
/// issues many writes of a bounded size, and a blocking configuration waits on every one of them.
pub const DEFAULT_CHUNK: u64 = 1 << 20;

/// `chunk` is the largest write the GPU asks for (each channel's share of a size goes out in writes of at
/// most that many bytes; 0 = one write per channel per iteration).
pub fn run(
    world: &World<'_>,
    sweep: &StepOptions,
    configs: &[ProxyLayout],
    chunk: u64,
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
    // Native (the GPU's memory registered with the NIC, written with no copy) unless the provider cannot
    // register it or `--staged` asked for the staging pipeline.
    let staged = sweep.memories.iter().any(|m| matches!(m, MemoryChoice::Staged { .. }));
    let memory = [if staged { MemoryChoice::Staged { gpu: gpu.ordinal() } } else { MemoryChoice::Device { gpu: gpu.ordinal() } }];
    let payloads = prepare(world, &memory, largest, &world.channels, observer)?;
    let payload = &payloads[0];
    let kernels = agree_on(
        world,
        if world.rank == WRITER { RingKernels::new(gpu).map(Some).map_err(cuda_error) } else { Ok(None) },
        observer,
    )?;
    let columns: Vec<Column> =
        configs.iter().map(|c| Column::Proxy { layout: *c, memory: payload.memory(), emulated: world.write_emulated() }).collect();
    observer.begin(&columns, &memory_labels(&payloads));
    if let Some(kernels) = &kernels {
        let design = kernels.design();
        observer.note(&format!("GPU request ring: push design `{}` ({})", design.name(), design.describe()));
    }

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
    // Size by size, every configuration back to back: the columns a reader compares (blocking against
    // NBI) are measured seconds apart, not a whole sweep apart, so drift on the host (shm's placement,
    // other tenants) moves them together.
    for &size in &sweep.sizes {
        for (config_index, (config, column)) in configs.iter().zip(&columns).enumerate() {
            let seed = PatternSeed { sender: WRITER, size, iteration: config_index as u64 };
            observer.step(column, size);
            world.counters_before_step();
            let outcome = match (world.rank, &kernels) {
                (WRITER, Some(kernels)) => payload.fill(seed, sweep.corrupt_byte).and_then(|()| {
                    let proxy = Proxy { world, sweep, remotes: &remotes, kernels, payload, staging: staging.as_ref(), chunk };
                    proxy.run(*config, column, size, observer).map(|(pair, latency)| {
                        // Told to the observer only after rank 1 verified and every rank agreed.
                        let links = world.link_gbps_of(config.layout().channels_used(world.channels.len()));
                        let mut measurement = Measurement::verified(column.clone(), size, sweep.iters, vec![pair], &latency, links);
                        measurement.registration = Some(payload.registration().into());
                        Some(measurement)
                    })
                }),
                (TARGET, _) => receive(world, sweep, *config, size, chunk, &mut expected_immediates)
                    .and_then(|()| verify_received(world, payload, column, seed))
                    .map(|()| None),
                _ => Ok(None),
            };
            // Told only once rank 1 has verified every byte (a failure anywhere ends the run here).
            let outcome = agree_on(world, outcome, observer)?;
            let unprobed = if world.rank == TARGET { arrivals_per_channel(*config, size, world.channels.len(), sweep.warmup + sweep.iters) } else { Vec::new() };
            let counters = world.counters_after_step_adding(StepOp::Write, &unprobed)?;
            if let Some(mut measurement) = outcome {
                measurement.counters = counters;
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
        let capacity = staging_capacity(largest as u64, world.channels.len());
        let host = Rc::new(HostBuffer::new(capacity as usize)?);
        let events = event_pool(world.channels.len());
        let stager = AsyncStager::new(gpu, host.clone(), events).map_err(cuda_error)?;
        let regions = register_all(&world.channels, &(host as Rc<dyn efatop_fabric::RegistrableMemory>))?;
        Ok(Self { device, stager, regions, capacity })
    }
}

/// Room for [`STAGING_COPIES`] of the largest write, each split over up to `channels` channels.
fn staging_capacity(largest: u64, channels: usize) -> u64 {
    STAGING_COPIES as u64 * largest.max(1).next_multiple_of(channels.max(1) as u64)
}

/// Copy events in flight at most: every channel's whole pipeline.
fn event_pool(channels: usize) -> usize {
    MAX_OUTSTANDING.max(channels * MAX_DEPTH)
}

/// How one step cuts the staging area: per channel, `depth` fixed slots of `slot_len` bytes, reused from
/// request to request. Blocking holds one request at a time and so always reuses slot 0 (its bytes stay
/// in the CPU's cache and TLB between the copy and shm's read of them); NBI alternates between its
/// slots, double (or, for small requests, multiple) buffering, instead of walking the whole area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SlotPlan {
    slot_len: u64,
    /// Requests a channel may hold at once (its pipeline).
    depth: usize,
    /// Slots each channel's range of the area is cut into (= `depth`).
    per_channel: usize,
}

impl SlotPlan {
    /// `largest` is the largest single write of the step (see [`largest_write`]).
    fn new(capacity: u64, largest: u64, channels_used: usize, nbi: bool) -> Self {
        let channels_used = channels_used.max(1);
        let slot_len = largest.max(1);
        let fit = usize::try_from(capacity / (slot_len * channels_used as u64)).unwrap_or(usize::MAX).max(1);
        let wanted = if nbi { usize::try_from(AHEAD_BYTES / slot_len).unwrap_or(MAX_DEPTH).clamp(2, MAX_DEPTH) } else { 1 };
        let depth = wanted.min(fit);
        Self { slot_len, depth, per_channel: depth }
    }

    /// Where slot `slot` of `channel` starts.
    fn offset(&self, channel: usize, slot: usize) -> u64 {
        (channel * self.per_channel + slot) as u64 * self.slot_len
    }
}

/// Which of a channel's slots are in use (bit i: slot i).
#[derive(Clone, Copy, Debug, Default)]
struct SlotsInUse(u64);

impl SlotsInUse {
    /// The lowest free slot, if the channel holds fewer than `plan.depth` requests.
    fn take(&mut self, plan: &SlotPlan) -> Option<usize> {
        let slot = (0..plan.depth.min(64)).find(|i| self.0 & (1 << i) == 0)?;
        self.0 |= 1 << slot;
        Some(slot)
    }

    fn give_back(&mut self, slot: usize) {
        self.0 &= !(1 << slot);
    }
}

/// Rank 0's CPU proxy for one (configuration, size).
struct Proxy<'a, 'w> {
    world: &'a World<'w>,
    sweep: &'a StepOptions,
    payload: &'a Payload,
    staging: Option<&'a Staging<'a>>,
    remotes: &'a [Vec<RemoteRegion>],
    kernels: &'a RingKernels,
    /// The largest write the GPU asks for (0: whole shares).
    chunk: u64,
}

/// A request the proxy accepted: being staged (no `op` yet), then posted.
struct Posted<'c> {
    request: Request,
    /// Its staging slot (of its channel) and where that starts in the staging area, when staged.
    staged_at: Option<(usize, u64)>,
    /// Its staging event (the request's sequence number, modulo the pool).
    event: usize,
    op: Option<Op<'c>>,
    /// When the proxy popped it, saw its copy finish, and posted its write.
    started: Instant,
    copied_at: Option<Instant>,
    sent_at: Option<Instant>,
}

/// Where one step's requests spent their time on rank 0's CPU, summed over the step; told to the log
/// (and the JSON `note` lines) once the step ends, so a slow column can be explained, not guessed at.
#[derive(Debug, Default, Clone, Copy)]
struct Stages {
    requests: u64,
    /// Popped → its copy seen finished (staged only).
    copy: Duration,
    /// Copy finished (or popped) → posted, including time waiting for an earlier write on its channel.
    queued: Duration,
    /// Time inside the provider's write call (shm retries EAGAIN there while a transfer to that peer runs).
    post_call: Duration,
    /// Posted → its completion seen.
    write: Duration,
    /// Time the proxy held nothing and waited for the GPU's next request (for blocking configurations,
    /// the round trip: completion published → Quiet returns → next push seen).
    idle: Duration,
    passes: u64,
}

impl Stages {
    fn line(&self, column: &Column, size: u64, pinned: Option<bool>, wall: Duration) -> String {
        let per = |d: Duration| d.as_secs_f64() * 1e6 / self.requests.max(1) as f64;
        format!(
            "proxy stages ({column} {}): {} requests in {:.1} ms, per request: copy {:.1} us, queued {:.1} us, \
             post call {:.1} us, write {:.1} us, idle {:.1} us, {:.1} passes{}",
            format_size(size),
            self.requests,
            wall.as_secs_f64() * 1e3,
            per(self.copy),
            per(self.queued),
            per(self.post_call),
            per(self.write),
            per(self.idle),
            self.passes as f64 / self.requests.max(1) as f64,
            match pinned {
                Some(true) => ", staging pinned",
                Some(false) => ", staging NOT pinned (synchronous copies)",
                None => "",
            }
        )
    }
}

impl Proxy<'_, '_> {
    /// Launches the GPU's schedule and serves its requests until every write completed; returns the
    /// bandwidth measured on the GPU's clock and each timed iteration's duration.
    #[allow(clippy::too_many_lines)] // one loop: accept and stage, post, progress, complete, in that order
    fn run(
        &self,
        config: ProxyLayout,
        column: &Column,
        size: u64,
        observer: &mut dyn Observer,
    ) -> Result<(PairMeasurement, LatencyRecorder), ExperimentError> {
        let world = self.world;
        let channels_used = config.layout().channels_used(world.channels.len());
        let writes_per_iteration: u64 = writes_per_channel(size, channels_used, self.chunk).iter().sum();
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
            chunk: self.chunk,
            warmup,
            iters,
            quiet_each: quiet_each(config),
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
        let mut stages = Stages::default();
        let step_started = Instant::now();
        let mut idle_since: Option<Instant> = Some(step_started);
        let plan = self.staging.map(|staging| SlotPlan::new(staging.capacity, largest_write(size, channels_used, self.chunk), channels_used, !quiet_each(config)));
        let mut slots = vec![SlotsInUse::default(); world.channels.len()];
        let events = event_pool(world.channels.len());
        while completed < expected {
            stages.passes += 1;
            let mut advanced = false;
            while in_flight.len() < MAX_OUTSTANDING {
                let Some(request) = waiting.take().or_else(|| consumer.try_pop().map(|(_, r)| r)) else { break };
                if let Some(since) = idle_since.take() {
                    stages.idle += since.elapsed();
                }
                let (channel, len) = (request.channel as usize, request.len);
                if request.target as usize != TARGET
                    || channel >= channels_used
                    || request.offset.checked_add(len).is_none_or(|end| end > size)
                {
                    return Err(ExperimentError::Unsupported(format!(
                        "proxy: the GPU asked for a write outside its plan: {request} (size {size}, {channels_used} channels)"
                    )));
                }
                let staged_at = match (self.staging, plan.as_ref()) {
                    (Some(staging), Some(plan)) => {
                        let Some(slot) = slots[channel].take(plan) else {
                            // This channel's pipeline is full: the request waits for its oldest write.
                            waiting = Some(request);
                            break;
                        };
                        let at = plan.offset(channel, slot);
                        staging
                            .stager
                            .copy_out(staging.device, request.offset as usize, at as usize, len as usize, accepted % events)
                            .map_err(cuda_error)?;
                        Some((slot, at))
                    }
                    _ => None,
                };
                in_flight.push_back(Posted {
                    request,
                    staged_at,
                    event: accepted % events,
                    op: None,
                    started: Instant::now(),
                    copied_at: None,
                    sent_at: None,
                });
                accepted += 1;
                advanced = true;
            }
            advanced |= self.post_ready(&mut in_flight, &mut stages)?;
            for _ in 0..PROGRESS_ROUNDS {
                world.progress_all()?;
            }
            // Completions are published in ticket order: Quiet's "everything so far" is a prefix.
            while in_flight.front().is_some_and(|p| p.op.as_ref().is_some_and(Op::is_complete)) {
                let Some(Posted { op: Some(op), request, started, sent_at, staged_at, .. }) = in_flight.pop_front() else { break };
                op.wait()?;
                completed += 1;
                consumer.set_completed(completed);
                let now = Instant::now();
                stages.requests += 1;
                stages.write += sent_at.map_or(Duration::ZERO, |at| now - at);
                let channel = request.channel as usize;
                if let Some((slot, _)) = staged_at {
                    slots[channel].give_back(slot);
                }
                world.probe.completed(channel, TARGET, request.len, Some(started.elapsed()));
                world.probe.set_in_flight(channel, world.channels[channel].in_flight());
                advanced = true;
            }
            if in_flight.is_empty() && waiting.is_none() && idle_since.is_none() {
                idle_since = Some(Instant::now());
            }
            report.tick(observer, &consumer, view.quiet_calls(), in_flight.len());
            if advanced {
                last_change = Instant::now();
            } else if last_change.elapsed() > world.op_timeout {
                return Err(crate::stalled(
                    format!("proxy: {completed} of {expected} GPU-requested writes completed, {} consumed", consumer.consumed()),
                    world.op_timeout,
                ));
            }
        }
        observer.note(&stages.line(column, size, self.staging.map(|s| s.stager.is_pinned()), step_started.elapsed()));
        running.finish().map_err(cuda_error)?;
        if let Some((_, extra)) = consumer.try_pop() {
            return Err(ExperimentError::Unsupported(format!("proxy: the GPU pushed more requests than planned: {extra}")));
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
    /// fired) and that the provider takes now; says whether it posted any. A write the provider cannot
    /// take yet (EAGAIN: shm's bounce-buffer protocol moves one transfer per peer at a time) stays queued
    /// for the next pass, so the loop keeps serving the ring, the copies and the completions meanwhile.
    fn post_ready<'c>(&'c self, in_flight: &mut VecDeque<Posted<'c>>, stages: &mut Stages) -> Result<bool, ExperimentError> {
        let world = self.world;
        let mut posted_any = false;
        for posted in in_flight.iter_mut().filter(|p| p.op.is_none()) {
            if let Some(staging) = self.staging {
                if posted.copied_at.is_none() {
                    if !staging.stager.is_done(posted.event).map_err(cuda_error)? {
                        break;
                    }
                    let now = Instant::now();
                    stages.copy += now - posted.started;
                    posted.copied_at = Some(now);
                }
            }
            let request = &posted.request;
            let channel = request.channel as usize;
            let (local, local_offset) = match (self.staging, posted.staged_at) {
                (Some(staging), Some((_, at))) => (&staging.regions[channel], at),
                _ => (&self.payload.regions[channel], request.offset),
            };
            let before = Instant::now();
            let op = world.channels[channel].try_write(
                TARGET,
                local,
                local_offset as usize,
                request.len as usize,
                self.remotes[TARGET][channel],
                request.offset,
                request.immediate,
            )?;
            let after = Instant::now();
            stages.post_call += after - before;
            let Some(op) = op else { break };
            stages.queued += before - posted.copied_at.unwrap_or(posted.started);
            posted.op = Some(op);
            posted.sent_at = Some(after);
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
    column: &'c Column,
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
    fn new(column: &'c Column, size: u64, probe: &'c Probe) -> Self {
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
            "proxy queue ({} {}): {} waiting in the ring, {held} held by the proxy, {:.0} requests/s, {}",
            self.column,
            format_size(self.size),
            consumer.waiting(),
            rate,
            efatop_proto::words::plural(quiet_calls, "Quiet call")
        ));
        self.since = Instant::now();
        self.consumed_then = popped;
    }
}

/// Writes per iteration on each of `channels` channels: the GPU's kernel gives channel c the bytes
/// `size·c/channels .. size·(c+1)/channels` and sends them in writes of at most `chunk` (0: one write).
fn writes_per_channel(size: u64, channels: usize, chunk: u64) -> Vec<u64> {
    let channels = channels.max(1) as u64;
    (0..channels)
        .map(|c| {
            let share = size * (c + 1) / channels - size * c / channels;
            if chunk == 0 { u64::from(share > 0) } else { share.div_ceil(chunk) }
        })
        .collect()
}

/// The bytes that land at rank 1 on each of `channels` channels over `iterations` iterations (warmup
/// included): the target's application bytes for the NIC reconciliation, which its probe does not count
/// (it waits on immediates and counts nothing; the writer's probe counts what it sent). Each channel the
/// configuration uses gets its share of `size` per iteration, however the GPU chunks it.
fn arrivals_per_channel(config: ProxyLayout, size: u64, channels: usize, iterations: u64) -> Vec<u64> {
    let used = config.layout().channels_used(channels.max(1)) as u64;
    (0..channels as u64).map(|c| if c < used { (size * (c + 1) / used - size * c / used) * iterations } else { 0 }).collect()
}

/// The largest single write of a step.
fn largest_write(size: u64, channels: usize, chunk: u64) -> u64 {
    let share = size.div_ceil(channels.max(1) as u64);
    if chunk == 0 { share } else { share.min(chunk) }
}

/// Rank 1: waits for every write's immediate on each channel the configuration uses.
fn receive(
    world: &World<'_>,
    sweep: &StepOptions,
    config: ProxyLayout,
    size: u64,
    chunk: u64,
    expected: &mut [u64],
) -> Result<(), ExperimentError> {
    let channels_used = config.layout().channels_used(world.channels.len());
    for (channel, writes) in writes_per_channel(size, channels_used, chunk).into_iter().enumerate() {
        expected[channel] += (sweep.warmup + sweep.iters) * writes;
    }
    world.progress_until(&world.channels, "proxy write immediates from rank 0", || {
        world.channels.iter().zip(expected.iter()).all(|(channel, want)| channel.immediates_from(WRITER) >= *want)
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocking_reuses_one_slot_and_nbi_double_buffers_large_requests() {
        let capacity = staging_capacity(1 << 30, 1);
        // Blocking: one request at a time, always slot 0 (its bytes stay warm between copy and send).
        let blocking = SlotPlan::new(capacity, 64 << 20, 1, false);
        assert_eq!((blocking.depth, blocking.per_channel, blocking.slot_len), (1, 1, 64 << 20));
        let mut slots = SlotsInUse::default();
        for _ in 0..3 {
            assert_eq!(slots.take(&blocking), Some(0));
            assert_eq!(slots.take(&blocking), None, "a second request waits");
            slots.give_back(0);
        }
        // NBI, large: two slots, alternating as writes complete in order; never a third.
        let nbi = SlotPlan::new(capacity, 64 << 20, 1, true);
        assert_eq!(nbi.depth, 2);
        let mut slots = SlotsInUse::default();
        assert_eq!(slots.take(&nbi), Some(0));
        assert_eq!(slots.take(&nbi), Some(1));
        assert_eq!(slots.take(&nbi), None);
        slots.give_back(0);
        assert_eq!(slots.take(&nbi), Some(0));
        assert_eq!((nbi.offset(0, 0), nbi.offset(0, 1)), (0, 64 << 20));
        // The largest size itself: exactly two copies fit.
        assert_eq!(SlotPlan::new(capacity, 1 << 30, 1, true).depth, 2);
    }

    #[test]
    fn nbi_keeps_small_requests_deeper_but_within_the_area_and_the_cap() {
        let capacity = staging_capacity(1 << 30, 2);
        assert_eq!(SlotPlan::new(capacity, 1 << 20, 1, true).depth, 16, "16 MiB ahead of 1 MiB requests");
        assert_eq!(SlotPlan::new(capacity, 4 << 20, 1, true).depth, 4);
        assert_eq!(SlotPlan::new(capacity, largest_write(8 << 20, 2, 0), 2, true).depth, 4, "4 MiB per channel");
        assert_eq!(SlotPlan::new(capacity, largest_write(1 << 30, 2, 1 << 20), 2, true).depth, 16, "1 MiB chunks");
        assert_eq!(SlotPlan::new(capacity, 64 << 10, 1, true).depth, MAX_DEPTH);
        // A sweep whose largest size is small: the area limits the depth, never below one.
        let small = staging_capacity(1 << 20, 1);
        assert_eq!(SlotPlan::new(small, 1 << 20, 1, true).depth, 2);
        // Channels' slots never overlap, and the last one ends inside the area.
        for (size, channels) in [(1u64 << 30, 2usize), ((1 << 30) - 1, 3), (12345, 2), (1 << 20, 2)] {
            let capacity = staging_capacity(1 << 30, channels);
            let plan = SlotPlan::new(capacity, largest_write(size, channels, 0), channels, true);
            let end = plan.offset(channels - 1, plan.per_channel - 1) + plan.slot_len;
            assert!(end <= capacity, "{size} over {channels}: {end} > {capacity}");
            assert!(plan.offset(1, 0) >= plan.offset(0, plan.per_channel - 1) + plan.slot_len);
            assert!(plan.slot_len * channels as u64 >= size, "every channel's share fits its slot");
        }
    }

    #[test]
    fn chunks_cover_each_channels_share_exactly_as_the_kernel_cuts_it() {
        // One channel: 8M in 1M writes; a share that is not a multiple ends in a short write.
        assert_eq!(writes_per_channel(8 << 20, 1, 1 << 20), [8]);
        assert_eq!(writes_per_channel((8 << 20) + 1, 1, 1 << 20), [9]);
        // Whole shares: one write per channel, none for a channel with no bytes.
        assert_eq!(writes_per_channel(3, 4, 0), [0, 1, 1, 1]);
        // Two channels of a 3M size in 1M chunks: 1.5M each, two writes each.
        assert_eq!(writes_per_channel(3 << 20, 2, 1 << 20), [2, 2]);
        // Chunks larger than the share change nothing.
        assert_eq!(writes_per_channel(64 << 10, 2, 1 << 20), [1, 1]);
        assert_eq!(largest_write(1 << 30, 2, 1 << 20), 1 << 20);
        assert_eq!(largest_write(64 << 10, 2, 1 << 20), 32 << 10);
        assert_eq!(largest_write(1 << 30, 4, 0), 256 << 20);
    }

    #[test]
    fn the_targets_arrivals_are_each_used_channels_share_of_every_iteration() {
        assert_eq!(arrivals_per_channel(ProxyLayout::Single, 1000, 4, 3), vec![3000, 0, 0, 0]);
        assert_eq!(arrivals_per_channel(ProxyLayout::MultiNbi, 1000, 4, 3), vec![750, 750, 750, 750]);
        // Shares as the kernel cuts them: they sum to the size.
        let uneven = arrivals_per_channel(ProxyLayout::Multi, 1001, 3, 1);
        assert_eq!(uneven.iter().sum::<u64>(), 1001);
        assert_eq!(uneven, vec![333, 334, 334]);
    }

    #[test]
    fn columns_follow_the_seed_with_the_memory_suffix() {
        let column = |layout| Column::Proxy { layout, memory: efatop_proto::column::Memory::Staged, emulated: false }.to_string();
        let columns: Vec<String> = ProxyLayout::ALL.into_iter().map(column).collect();
        assert_eq!(columns, ["ProxySingleDMA(staged)", "ProxyMultiDMA(staged)", "ProxySingleNBIDMA(staged)", "ProxyMultiNBIDMA(staged)"]);
        assert!(quiet_each(ProxyLayout::Single) && !quiet_each(ProxyLayout::MultiNbi));
    }
}
