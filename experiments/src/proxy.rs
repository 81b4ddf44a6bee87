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
//! range device → pinned host before posting its write, and the columns say `DMA(staged)`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use efatop_cuda::ring_gpu::{RingKernels, WriterPlan};
use efatop_fabric::{Channel, Immediate, Op, RemoteRegion};

use crate::pattern::PatternSeed;
use crate::payload::{cuda_error, memory_labels, prepare, MemoryChoice, Payload};
use crate::results::{gbps, LatencyRecorder, Measurement, PairMeasurement};
use crate::sizes::format_size;
use crate::world::{push_record, split_records, World};
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

    let mut mine = Vec::new();
    for region in &payload.regions {
        push_record(&mut mine, &Channel::remote_region(region).to_bytes());
    }
    let mut remotes: Vec<Vec<RemoteRegion>> = Vec::with_capacity(world.size);
    for blob in &world.bootstrap.allgather(&mine)? {
        remotes.push(split_records(blob)?.into_iter().map(RemoteRegion::from_bytes).collect::<Result<_, _>>()?);
    }

    let mut measurements = Vec::new();
    let mut expected_immediates = vec![0u64; world.channels.len()];
    for (config_index, (config, column)) in configs.iter().zip(&columns).enumerate() {
        for &size in &sweep.sizes {
            let seed = PatternSeed { sender: WRITER, size, iteration: config_index as u64 };
            observer.step(column, size);
            let outcome = match (world.rank, &kernels) {
                (WRITER, Some(kernels)) => payload.fill(seed, sweep.corrupt_byte).and_then(|()| {
                    let proxy = Proxy { world, sweep, payload, remotes: &remotes, kernels };
                    proxy.run(*config, size).map(|(pair, latency)| {
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

/// Rank 0's CPU proxy for one (configuration, size).
struct Proxy<'a, 'w> {
    world: &'a World<'w>,
    sweep: &'a SweepOptions,
    payload: &'a Payload,
    remotes: &'a [Vec<RemoteRegion>],
    kernels: &'a RingKernels,
}

struct Posted<'c> {
    op: Op<'c>,
    channel: usize,
    len: u64,
    started: Instant,
}

impl Proxy<'_, '_> {
    /// Launches the GPU's schedule and serves its requests until every write completed; returns the
    /// bandwidth measured on the GPU's clock and each timed iteration's duration.
    fn run(&self, config: ProxyConfig, size: u64) -> Result<(PairMeasurement, LatencyRecorder), ExperimentError> {
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
        let mut last_change = Instant::now();
        while completed < expected {
            let mut advanced = false;
            while in_flight.len() < MAX_OUTSTANDING {
                let Some((_ticket, request)) = consumer.try_pop() else { break };
                let (channel, len) = (request.channel as usize, request.len);
                if request.target as usize != TARGET
                    || channel >= channels_used
                    || request.offset.checked_add(len).is_none_or(|end| end > size)
                {
                    return Err(ExperimentError::Unsupported(format!(
                        "proxy: the GPU asked for a write outside its plan: {request:?} (size {size}, {channels_used} channels)"
                    )));
                }
                // Staged memory: the requested bytes go device → pinned host first, as part of the write.
                self.payload.stage_out_range(request.offset, len)?;
                let op = world.channels[channel].write(
                    TARGET,
                    &self.payload.regions[channel],
                    request.offset as usize,
                    len as usize,
                    self.remotes[TARGET][channel],
                    request.offset,
                    Some(request.immediate),
                )?;
                in_flight.push_back(Posted { op, channel, len, started: Instant::now() });
                world.probe.set_in_flight(channel, world.channels[channel].in_flight());
                advanced = true;
            }
            world.progress_all()?;
            // Completions are published in ticket order: Quiet's "everything so far" is a prefix.
            while in_flight.front().is_some_and(|p| p.op.is_complete()) {
                let Some(Posted { op, channel, len, started }) = in_flight.pop_front() else { break };
                op.wait()?;
                completed += 1;
                consumer.set_completed(completed);
                world.probe.completed(channel, TARGET, len, Some(started.elapsed()));
                world.probe.set_in_flight(channel, world.channels[channel].in_flight());
                advanced = true;
            }
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
    fn columns_follow_the_seed_with_the_memory_suffix() {
        let columns: Vec<String> = ProxyConfig::ALL.iter().map(|c| c.column("DMA(staged)")).collect();
        assert_eq!(columns, ["ProxySingleDMA(staged)", "ProxyMultiDMA(staged)", "ProxySingleNBIDMA(staged)", "ProxyMultiNBIDMA(staged)"]);
        assert!(ProxyConfig::Single.quiet_each() && !ProxyConfig::MultiNbi.quiet_each());
    }
}
