//! `alltoall`: every rank writes its buffer to every other rank at once (RDMA WRITE with immediate data).
//!
//! A rank's iteration ends when its own writes have completed and the immediates of all N-1 peers for that
//! iteration have arrived. Configurations (seed `all2all.md`):
//! - `Single`: every peer over channel 0;
//! - `Multi`: each peer's buffer split over all channels;
//! - `RoundRobin`: peer p over channel `(p + rank) % channels`.
//!
//! Memory layout: every rank holds one registered buffer of N slots, slot s being where rank s's data
//! lives on every rank. A rank sends from its own slot into its slot at each peer, so no two writers ever
//! touch the same bytes, and each receiver checks every peer's slot against that peer's pattern.
//!
//! What is reported (docs/experiments.md, "All-to-all"): `Gbps` as in the seed table, one rank's buffer
//! (`size`) over the time of one iteration, averaged over ranks; `BusBW (%)` that over the link speed of the
//! channels the configuration uses. nccl-tests' alltoall busbw counts what each rank really puts on the wire,
//! (N-1) × size per iteration, which is (N-1) times the seed's figure; both are in the results, and the table
//! prints the second under its own heading.

use std::time::{Duration, Instant};

use efatop_fabric::{Immediate, Op, RemoteRegion};
use efatop_proto::column::{Column, Layout};
use efatop_proto::counters::StepOp;
use efatop_proto::results::{
    gbps, AbArm, AbTally, LatencyRecorder, Measurement, PairMatrix, PairMeasurement, TelemetryAb,
};
use efatop_proto::sizes::format_size;
use serde::{Deserialize, Serialize};

use crate::pattern::PatternSeed;
use crate::payload::{exchange_regions, prepare, Payload, Stage};
use crate::world::World;
use crate::write::{begin_columns, plan, Segment};
use crate::{agree, agree_on, check_sizes, ExperimentError, Observer, StepOptions};

/// The all-to-all configurations, in the seed's order of columns (`Single`, `Multi`, `RoundRobin`).
pub const CONFIGS: [Layout; 3] = Layout::ALL;

/// Slots start on this boundary: device kernels and NICs like aligned buffers, and a slot's pattern
/// starts over at its first byte.
const SLOT_ALIGN: u64 = 4096;

/// The distance between two ranks' slots for a largest size of `size`.
pub fn slot_stride(size: u64) -> u64 {
    size.div_ceil(SLOT_ALIGN) * SLOT_ALIGN
}

/// The writes rank `rank` makes in one iteration: to every other rank, from its own slot into its slot.
pub fn segments(config: Layout, rank: usize, world_size: usize, size: u64, channels: usize) -> Vec<Segment> {
    let peers: Vec<usize> = (0..world_size).filter(|p| *p != rank).collect();
    plan(config, rank, &peers, size, channels)
}

/// The bytes rank `rank` moved on each channel over `iterations` iterations (warmup included) that the
/// probe's per-channel count leaves out: every other rank's writes that land here (the probe counts what a
/// rank sent, see [`Exchange::iteration`]), and the start-together writes on channel 0, sent and received
/// (`min(size, 8)` bytes to and from every peer per iteration). Added to the probe's count, this is what
/// the channel's NIC is held against (`counters`). Worked out from the plan between steps: the timed loop
/// counts nothing more.
pub fn unprobed_bytes(config: Layout, rank: usize, world_size: usize, size: u64, channels: usize, iterations: u64) -> Vec<u64> {
    let mut bytes = vec![0u64; channels];
    for source in (0..world_size).filter(|s| *s != rank) {
        for segment in segments(config, source, world_size, size, channels) {
            if let (true, Some(total)) = (segment.peer == rank, bytes.get_mut(segment.channel)) {
                *total += segment.len * iterations;
            }
        }
    }
    if let Some(total) = bytes.first_mut() {
        *total += 2 * (world_size.saturating_sub(1) as u64) * size.min(8) * iterations;
    }
    bytes
}

/// One rank's share of a step, as it tells rank 0 (through [`World::gather`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct RankReport {
    /// Per source rank, the summed time (ns) from this rank's start of each iteration until the last write
    /// of that source for the iteration had landed here (its immediates arrived); 0 for the rank itself.
    /// Measured where the data lands: a sender's local completion can come early, from buffers on the way.
    arrival_ns: Vec<u64>,
    /// The timed iterations and their summed time (ns): this rank's Gbps and mean latency.
    iterations: u64,
    iterations_ns: u64,
    /// Every timed iteration's latency: rank 0 merges every rank's, so the step's percentiles are over all
    /// ranks' iterations.
    latency: LatencyRecorder,
    /// `--telemetry-ab` only: each timed iteration's time (ns), for rank 0 to tally by block.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    iteration_ns: Vec<u64>,
}

/// Runs the sweep on every rank; rank 0 returns one measurement per configuration and size, and the pair
/// matrices, telling `observer` of each step as it starts and ends.
pub fn run(
    world: &World<'_>,
    sweep: &StepOptions,
    configs: &[Layout],
    observer: &mut dyn Observer,
) -> Result<(Vec<Measurement>, Vec<PairMatrix>), ExperimentError> {
    if world.size < 2 {
        return Err(ExperimentError::InvalidInput {
            flag: "--ranks",
            message: "alltoall needs at least 2 ranks".into(),
        });
    }
    if sweep.window > 1 {
        return Err(ExperimentError::InvalidInput {
            flag: "--window",
            message: format!(
                "alltoall times each iteration as a whole (every rank's writes and immediates), so it takes 1, not {}",
                sweep.window
            ),
        });
    }
    check_sizes(world, sweep)?;
    let largest = sweep.sizes.iter().copied().max().unwrap_or(4);
    let stride = slot_stride(largest);
    let payloads = prepare(world, &sweep.memories, (stride * world.size as u64) as usize, &world.channels, observer)?;
    let plans = begin_columns(world, &payloads, configs, observer);

    // Every rank learns every rank's regions, per payload and channel.
    let remotes_by_payload: Vec<Vec<Vec<RemoteRegion>>> =
        payloads.iter().map(|payload| exchange_regions(world, payload)).collect::<Result<_, _>>()?;

    let mut measurements = Vec::new();
    let mut matrices = Vec::new();
    // Immediates counted so far per channel and source: the targets of later steps add to them.
    let mut expected = vec![vec![0u64; world.size]; world.channels.len()];
    for (plan_index, (payload_index, config, column)) in plans.iter().enumerate() {
        let (config, payload, remotes) = (*config, &payloads[*payload_index], &remotes_by_payload[*payload_index]);
        for &size in &sweep.sizes {
            observer.step(column, size);
            let seed_of = |sender: usize| PatternSeed { sender, size, iteration: plan_index as u64 };
            let corrupt = sweep.corrupt_byte.filter(|_| world.rank == 0);
            let filled = payload
                .fill_at(world.rank as u64 * stride, seed_of(world.rank), corrupt)
                .and_then(|()| payload.stage(Stage::Out, world.rank as u64 * stride, size));
            agree(world, filled, observer)?;
            world.counters_before_step();
            let exchange = Exchange { world, config, size, stride, payload, remotes };
            let timed = exchange.time(sweep, &mut expected);
            let report = agree_on(world, timed, observer)?;
            let checked = (0..world.size).filter(|s| *s != world.rank).try_for_each(|sender| {
                payload.stage(Stage::In, sender as u64 * stride, size)?;
                payload.verify_at(sender as u64 * stride, seed_of(sender))?.map_err(|mismatch| {
                    ExperimentError::Verification {
                        receiver: world.rank,
                        sender,
                        config: column.to_string(),
                        size: format_size(size),
                        detail: mismatch.to_string(),
                    }
                })
            });
            agree(world, checked, observer)?;
            let unprobed = unprobed_bytes(config, world.rank, world.size, size, world.channels.len(), sweep.warmup + sweep.iters);
            let counters = world.counters_after_step_adding(StepOp::Write, &unprobed)?;
            let reports = world.gather(&report, "all-to-all reports")?;
            if world.rank == 0 {
                let (mut measurement, matrix) = summarise(world, config, column, size, sweep.iters, &reports);
                measurement.telemetry_ab = sweep.telemetry_ab.map(|block| telemetry_ab(&reports, size, block));
                measurement.registration = Some(payload.registration().into());
                measurement.counters = counters;
                observer.pair_matrix(&matrix);
                observer.measured(&measurement);
                measurements.push(measurement);
                matrices.push(matrix);
            }
        }
    }
    Ok((measurements, matrices))
}

/// One step's exchange from this rank's side.
struct Exchange<'a> {
    world: &'a World<'a>,
    config: Layout,
    size: u64,
    stride: u64,
    payload: &'a Payload,
    remotes: &'a [Vec<RemoteRegion>],
}

/// A write of the current iteration, until its local completion is seen.
struct Posted<'w> {
    segment: Segment,
    op: Option<Op<'w>>,
}

/// What one rank tracks across its iterations, sized before the timed loop so that loop never allocates.
struct Tracking<'w> {
    /// This rank's writes of one iteration.
    mine: Vec<Segment>,
    /// `incoming_writes[channel][source]`: writes (and so immediates) that source sends this rank on that
    /// channel per iteration.
    incoming_writes: Vec<Vec<u64>>,
    /// `expected[channel][source]`: immediates promised so far, over every step of the run.
    expected: &'w mut [Vec<u64>],
    /// Immediates counted into telemetry so far, per channel and source.
    seen: Vec<Vec<u64>>,
    posted: Vec<Posted<'w>>,
    /// When the last write of this iteration from each source had landed (zero until then).
    arrived: Vec<Duration>,
}

impl<'a> Exchange<'a> {
    /// Warmup, then the timed iterations; `expected[channel][source]` counts the immediates this rank has
    /// been promised so far.
    fn time(&'a self, sweep: &StepOptions, expected: &'a mut [Vec<u64>]) -> Result<RankReport, ExperimentError> {
        let world = self.world;
        let channels = world.channels.len();
        let mine = segments(self.config, world.rank, world.size, self.size, channels);
        let mut incoming_writes = vec![vec![0u64; world.size]; channels];
        for source in (0..world.size).filter(|s| *s != world.rank) {
            for segment in segments(self.config, source, world.size, self.size, channels) {
                if segment.peer == world.rank {
                    incoming_writes[segment.channel][source] += 1;
                }
            }
        }
        let seen = world.channels.iter().map(|c| (0..world.size).map(|s| c.immediates_from(s)).collect()).collect();
        let mut tracking = Tracking {
            posted: Vec::with_capacity(mine.len()),
            mine,
            incoming_writes,
            expected,
            seen,
            arrived: vec![Duration::ZERO; world.size],
        };
        let mut report = RankReport {
            arrival_ns: vec![0; world.size],
            iteration_ns: Vec::with_capacity(if sweep.telemetry_ab.is_some() { sweep.iters as usize } else { 0 }),
            ..RankReport::default()
        };
        for iteration in 0..sweep.warmup {
            self.iteration(iteration, &mut tracking)?;
        }
        for iteration in sweep.warmup..sweep.warmup + sweep.iters {
            // `--telemetry-ab`: every rank switches its sampler at the same iterations, before timing one.
            if let Some(block) = sweep.telemetry_ab {
                let on = AbArm::of_block((iteration - sweep.warmup) / block).on;
                if on != world.probe.sampling() {
                    world.probe.set_sampling(on);
                }
            }
            let took = self.iteration(iteration, &mut tracking)?;
            report.iterations += 1;
            report.iterations_ns += took.as_nanos() as u64;
            report.latency.record(took);
            if sweep.telemetry_ab.is_some() {
                report.iteration_ns.push(took.as_nanos() as u64);
            }
            for (total, arrived) in report.arrival_ns.iter_mut().zip(&tracking.arrived) {
                *total += arrived.as_nanos() as u64;
            }
        }
        world.probe.set_sampling(true);
        Ok(report)
    }

    /// Posts one iteration's writes to every peer and waits for them and for every peer's immediates.
    /// Returns the iteration's time.
    fn iteration(&'a self, iteration: u64, tracking: &mut Tracking<'a>) -> Result<Duration, ExperimentError> {
        let world = self.world;
        let base = world.rank as u64 * self.stride;
        for (want, writes) in tracking.expected.iter_mut().zip(&tracking.incoming_writes) {
            for (want, writes) in want.iter_mut().zip(writes) {
                *want += writes;
            }
        }
        let started = Instant::now();
        let immediate = Immediate::encode(world.rank, iteration as u32);
        tracking.posted.clear();
        for segment in &tracking.mine {
            let channel = &world.channels[segment.channel];
            let op = channel.write(
                segment.peer,
                &self.payload.regions[segment.channel],
                (base + segment.offset) as usize,
                segment.len as usize,
                self.remotes[segment.peer][segment.channel],
                base + segment.offset,
                Some(immediate),
            )
            .map_err(|err| crate::towards(world, segment.peer, err))?;
            world.probe.set_in_flight(segment.channel, channel.in_flight());
            tracking.posted.push(Posted { segment: *segment, op: Some(op) });
        }
        tracking.arrived.fill(Duration::ZERO);
        let mut sources_pending = world.size - 1;
        let mut outstanding = tracking.posted.len();
        let mut stall = crate::Stall::new();
        loop {
            let arrived_all = world.channels.iter().zip(tracking.expected.iter()).all(|(channel, want)| {
                want.iter().enumerate().all(|(source, want)| channel.immediates_from(source) >= *want)
            });
            if outstanding == 0 && arrived_all && sources_pending == 0 {
                let took = started.elapsed();
                self.start_together(iteration, tracking)?;
                return Ok(took);
            }
            world.progress_all()?;
            let mut advanced = false;
            for entry in &mut tracking.posted {
                if entry.op.as_ref().is_some_and(Op::is_complete) {
                    if let Some(op) = entry.op.take() {
                        op.wait()?;
                    }
                    let segment = entry.segment;
                    let now = started.elapsed();
                    world.probe.channel_completed(segment.channel, segment.len, now);
                    world.probe.set_in_flight(segment.channel, world.channels[segment.channel].in_flight());
                    outstanding -= 1;
                    advanced = true;
                }
            }
            // Arrivals count as progress. They are not added to telemetry: a rank's per-peer counters are
            // what it sent, so the dashboard's heatmap row is the sender's and its column the receiver's.
            for (channel, seen) in world.channels.iter().zip(tracking.seen.iter_mut()) {
                for (source, seen) in seen.iter_mut().enumerate() {
                    let now = channel.immediates_from(source);
                    if now > *seen {
                        *seen = now;
                        advanced = true;
                    }
                }
            }
            if advanced {
                stall.advanced();
                let now = started.elapsed();
                for (source, arrived) in tracking.arrived.iter_mut().enumerate() {
                    if source != world.rank
                        && arrived.is_zero()
                        && world.channels.iter().zip(tracking.expected.iter()).all(|(c, want)| c.immediates_from(source) >= want[source])
                    {
                        // Never zero once set: an arrival in the same nanosecond as the start still counts.
                        *arrived = now.max(Duration::from_nanos(1));
                        sources_pending -= 1;
                        // Peers are counted where their data lands: the dashboard's pair matrix is
                        // filled column by column from the receivers' samples.
                        world.probe.landed_from(source, self.size, *arrived);
                    }
                }
            } else if stall.idle_longer_than(world.op_timeout) {
                return Err(self.stalled(tracking, outstanding));
            }
        }
    }

    /// Every rank starts the next iteration within one message latency of the others: each tells every
    /// peer it is done (a small write with immediate into its own slot there, the bytes it already wrote)
    /// and waits for all peers to say the same. Without it a rank that finished early would start its
    /// next writes while a slow peer still waited, and data would seem to land before it was sent.
    fn start_together(&'a self, iteration: u64, tracking: &mut Tracking<'a>) -> Result<(), ExperimentError> {
        let world = self.world;
        let base = world.rank as u64 * self.stride;
        let len = self.size.min(8);
        let immediate = Immediate::encode(world.rank, iteration as u32);
        tracking.posted.clear();
        for peer in (0..world.size).filter(|p| *p != world.rank) {
            tracking.expected[0][peer] += 1;
            let op = world.channels[0].write(
                peer,
                &self.payload.regions[0],
                base as usize,
                len as usize,
                self.remotes[peer][0],
                base,
                Some(immediate),
            )?;
            tracking.posted.push(Posted { segment: Segment { peer, channel: 0, offset: 0, len }, op: Some(op) });
        }
        let (posted, expected) = (&mut tracking.posted, &*tracking.expected);
        let channel = &world.channels[0];
        let started = world.progress_until(&world.channels, "all-to-all start of the next iteration", || {
            for entry in posted.iter_mut() {
                if entry.op.as_ref().is_some_and(Op::is_complete) {
                    entry.op = None;
                }
            }
            posted.iter().all(|entry| entry.op.is_none())
                && expected[0].iter().enumerate().all(|(source, want)| channel.immediates_from(source) >= *want)
        });
        match started {
            Ok(()) => Ok(()),
            // Name the peers that never said they were done, as a stall mid-iteration does: a peer cut off
            // between iterations is met here first.
            Err(efatop_fabric::FabricError::Timeout { .. }) => {
                let outstanding = tracking.posted.iter().filter(|entry| entry.op.is_some()).count();
                Err(self.stalled(tracking, outstanding))
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Names what never came: the peers whose immediates are missing, or this rank's own writes.
    fn stalled(&self, tracking: &Tracking<'_>, outstanding: usize) -> ExperimentError {
        let world = self.world;
        let mut silent: Vec<usize> = (0..world.size)
            .filter(|&source| {
                world.channels.iter().zip(tracking.expected.iter()).any(|(c, want)| c.immediates_from(source) < want[source])
            })
            .collect();
        silent.dedup();
        let waiting = if silent.is_empty() {
            // Every peer's data is here: what is missing is the completion of this rank's own writes, which
            // (with delivery completion) the peers they went to never acknowledged. Name those peers.
            let mut unacknowledged: Vec<usize> =
                tracking.posted.iter().filter(|entry| entry.op.is_some()).map(|entry| entry.segment.peer).collect();
            unacknowledged.sort_unstable();
            unacknowledged.dedup();
            if unacknowledged.is_empty() {
                format!("{outstanding} all-to-all writes of rank {} never completed", world.rank)
            } else {
                let names: Vec<String> = unacknowledged.iter().map(|r| format!("rank {r} ({})", world.hosts[*r])).collect();
                format!(
                    "{outstanding} all-to-all writes of rank {} never completed: none acknowledged by {}",
                    world.rank,
                    names.join(", ")
                )
            }
        } else {
            let names: Vec<String> = silent.iter().map(|r| format!("rank {r} ({})", world.hosts[*r])).collect();
            format!("rank {} waited for all-to-all data from {}", world.rank, names.join(", "))
        };
        crate::stalled(waiting, world.op_timeout)
    }
}

/// `--telemetry-ab`: every rank's iterations by the block they fell in, each arm's bytes over its time.
fn telemetry_ab(reports: &[RankReport], size: u64, block: u64) -> TelemetryAb {
    let mut tally = AbTally::default();
    for report in reports {
        for (index, ns) in report.iteration_ns.iter().enumerate() {
            tally.add(AbArm::of_block(index as u64 / block), size as f64, *ns as f64 / 1e9);
        }
    }
    let iterations = reports.first().map_or(0, |r| r.iteration_ns.len() as u64);
    tally.result(block, iterations / block)
}

/// Rank 0's view of a step from every rank's report.
fn summarise(
    world: &World<'_>,
    config: Layout,
    column: &Column,
    size: u64,
    iters: u64,
    reports: &[RankReport],
) -> (Measurement, PairMatrix) {
    let ranks = reports.len();
    let mut latency = LatencyRecorder::new();
    for report in reports {
        latency.merge(&report.latency);
    }
    // As the seed: a rank's buffer over its mean iteration time (the start-together round in between is
    // not part of an iteration).
    let pairs = reports
        .iter()
        .enumerate()
        .map(|(rank, report)| PairMeasurement {
            peers: vec![rank],
            gbps: gbps((size * report.iterations) as f64, report.iterations_ns as f64 / 1e9),
            mean_us: report.iterations_ns as f64 / 1e3 / report.iterations.max(1) as f64,
        })
        .collect();
    let matrix = PairMatrix {
        config: column.clone(),
        size,
        // Row = sender, column = receiver; each receiver timed its senders' data landing.
        gbps: (0..ranks)
            .map(|sender| {
                reports
                    .iter()
                    .enumerate()
                    .map(|(receiver, report)| {
                        let took = report.arrival_ns.get(sender).copied().unwrap_or(0);
                        (receiver != sender && took > 0).then(|| gbps((size * iters) as f64, took as f64 / 1e9))
                    })
                    .collect()
            })
            .collect(),
        // Only where the efa fabric was allowed its shm shortcut (--allow-shm) do same-host pairs bypass the
        // NIC; elsewhere every pair crossed it and nothing is marked.
        same_host: if world.shm_shortcut == Some(true) { PairMatrix::same_host_pairs(&world.hosts) } else { Vec::new() },
    };
    let links = world.link_gbps_of(config.channels_used(world.channels.len()));
    let mut measurement = Measurement::verified(column.clone(), size, iters, pairs, &latency, links);
    measurement.nccl_busbw_gbps = Some(measurement.gbps * (ranks.saturating_sub(1)) as f64);
    (measurement, matrix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_writes_every_other_rank_once_per_channel_share() {
        let writes = segments(Layout::Multi, 1, 4, 1 << 20, 4);
        assert_eq!(writes.len(), 3 * 4);
        assert!(writes.iter().all(|s| s.peer != 1));
        for peer in [0, 2, 3] {
            assert_eq!(writes.iter().filter(|s| s.peer == peer).map(|s| s.len).sum::<u64>(), 1 << 20);
        }
    }

    #[test]
    fn round_robin_spreads_peers_over_channels_by_peer_plus_rank() {
        let channels: Vec<(usize, usize)> =
            segments(Layout::RoundRobin, 2, 4, 4096, 4).iter().map(|s| (s.peer, s.channel)).collect();
        assert_eq!(channels, vec![(0, 2), (1, 3), (3, 1)]);
    }

    #[test]
    fn unprobed_bytes_are_the_arrivals_and_the_start_together_writes() {
        // Multi, 4 ranks, 4 channels: each of 3 peers lands a quarter of 1 MiB per channel per iteration;
        // channel 0 also carries 3 × 8 bytes out and 3 × 8 in per iteration.
        let bytes = unprobed_bytes(Layout::Multi, 1, 4, 1 << 20, 4, 5);
        assert_eq!(bytes, vec![5 * (3 * (1 << 18) + 48), 5 * 3 * (1 << 18), 5 * 3 * (1 << 18), 5 * 3 * (1 << 18)]);
        // RoundRobin: source s lands on channel (rank + s) % 4; rank 0 hears from 1, 2, 3 on channels 1, 2, 3.
        let bytes = unprobed_bytes(Layout::RoundRobin, 0, 4, 4096, 4, 2);
        assert_eq!(bytes, vec![2 * 48, 2 * 4096, 2 * 4096, 2 * 4096]);
        // Sizes under 8 bytes send their whole buffer to start together.
        assert_eq!(unprobed_bytes(Layout::Single, 0, 2, 4, 1, 1), vec![4 + 2 * 4]);
    }

    #[test]
    fn slots_are_aligned_and_hold_the_largest_size() {
        assert_eq!(slot_stride(4), 4096);
        assert_eq!(slot_stride(4096), 4096);
        assert_eq!(slot_stride(4097), 8192);
        assert_eq!(slot_stride(1 << 26), 1 << 26);
    }

    #[test]
    fn reports_survive_the_trip_to_rank_zero() {
        let mut latency = LatencyRecorder::new();
        latency.record(Duration::from_nanos(1));
        latency.record(Duration::from_nanos(2));
        let report = RankReport { arrival_ns: vec![0, 5, 6], iterations: 2, iterations_ns: 3, latency, iteration_ns: vec![1, 2] };
        let trip = |bytes: Vec<u8>| crate::gather_with::<RankReport>(|_| Ok(vec![bytes]), &RankReport::default(), "all-to-all reports");
        let mine = serde_json::to_vec(&report).expect("serializes");
        assert_eq!(trip(mine.clone()).expect("decodes"), vec![report]);
        assert!(trip(vec![1, 2, 3]).is_err());
        assert!(trip(mine[..mine.len() - 1].to_vec()).is_err(), "cut short");
    }
}
