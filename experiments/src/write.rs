//! `write`: rank 0 → rank k one-sided RDMA WRITE with immediate data; the target waits on the immediate.
//!
//! Configurations (seed `write.md`):
//! - `Single`: the whole buffer over channel 0, to one peer at a time;
//! - `Multi`: the buffer split into one chunk per channel, to one peer at a time;
//! - `RoundRobin`: every peer at once, peer k on channel `(k + rank) % channels`.
//!
//! Bandwidth is bytes moved over the timed iterations' wall time (for `RoundRobin`, all peers' bytes);
//! Single and Multi are averaged over the peers. An iteration's latency runs from its first post to its
//! last local completion. `BusBW` divides by the link speed of the channels the configuration can use.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use efatop_fabric::{Channel, Immediate, Op, RemoteRegion};
use efatop_proto::column::{Column, Layout};
use efatop_proto::counters::StepOp;
use efatop_proto::results::{gbps, AbArm, AbTally, LatencyRecorder, Measurement, PairMeasurement};
use efatop_proto::sizes::format_size;
use efatop_proto::telemetry::Phase;

use crate::pattern::PatternSeed;
use crate::payload::{exchange_regions, memory_labels, prepare, Payload, Stage};
use crate::world::World;
use crate::{agree, check_sizes, ExperimentError, Observer, StepOptions};

/// One write of an iteration: which peer, on which channel, which bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub peer: usize,
    pub channel: usize,
    pub offset: u64,
    pub len: u64,
}

/// The writes one iteration makes from `rank` to `peers`. Both sides compute it: the writer to post, the
/// targets to know how many immediates to expect on which channel.
pub fn plan(
    config: Layout,
    rank: usize,
    peers: &[usize],
    size: u64,
    channels: usize,
) -> Vec<Segment> {
    let mut segments = Vec::new();
    for &peer in peers {
        match config {
            Layout::Single => segments.push(Segment {
                peer,
                channel: 0,
                offset: 0,
                len: size,
            }),
            Layout::Multi => {
                let channels = channels as u64;
                for channel in 0..channels {
                    let start = size * channel / channels;
                    let end = size * (channel + 1) / channels;
                    if end > start {
                        segments.push(Segment {
                            peer,
                            channel: channel as usize,
                            offset: start,
                            len: end - start,
                        });
                    }
                }
            }
            Layout::RoundRobin => {
                segments.push(Segment {
                    peer,
                    channel: (peer + rank) % channels,
                    offset: 0,
                    len: size,
                });
            }
        }
    }
    segments
}

/// The peer groups timed together: one peer at a time, or all at once for `RoundRobin`.
fn groups(config: Layout, world_size: usize) -> Vec<Vec<usize>> {
    let peers: Vec<usize> = (1..world_size).collect();
    match config {
        Layout::RoundRobin => vec![peers],
        Layout::Single | Layout::Multi => peers.into_iter().map(|p| vec![p]).collect(),
    }
}

const WRITER: usize = 0;

/// Runs the sweep; rank 0 returns one measurement per configuration and size, in order, and tells
/// `observer` of each step as it starts and ends.
pub fn run(
    world: &World<'_>,
    sweep: &StepOptions,
    configs: &[Layout],
    observer: &mut dyn Observer,
) -> Result<Vec<Measurement>, ExperimentError> {
    if world.size < 2 {
        return Err(ExperimentError::InvalidInput {
            flag: "--ranks",
            message: "write needs at least 2 ranks (rank 0 writes to ranks 1..N-1)".into(),
        });
    }
    check_sizes(world, sweep)?;
    let largest = sweep.sizes.iter().copied().max().unwrap_or(4) as usize;
    let payloads = prepare(world, &sweep.memories, largest, &world.channels, observer)?;
    let plans = begin_columns(world, &payloads, configs, observer);

    // Targets publish one region record per channel and payload; the writer learns every target's.
    let remotes_by_payload: Vec<Vec<Vec<RemoteRegion>>> =
        payloads.iter().map(|payload| exchange_regions(world, payload)).collect::<Result<_, _>>()?;

    let mut measurements = Vec::new();
    let mut expected_immediates = vec![0u64; world.channels.len()];
    for (plan_index, (payload_index, config, column)) in plans.iter().enumerate() {
        let (config, payload, remotes) = (
            *config,
            &payloads[*payload_index],
            &remotes_by_payload[*payload_index],
        );
        for &size in &sweep.sizes {
            let seed = PatternSeed {
                sender: WRITER,
                size,
                iteration: plan_index as u64,
            };
            observer.step(column, size);
            let filled = if world.rank == WRITER {
                world.probe.set_phase(Phase::Filling, size);
                payload.fill(seed, sweep.corrupt_byte)
            } else {
                Ok(())
            };
            world.probe.set_phase(Phase::Transferring, size);
            world.counters_before_step();
            // Every rank has read its NIC counters before the writer's first write of the step can land: a
            // target that read them late missed part of the warm-up (NIC/app 0.946 on a loaded CI machine).
            agree(world, filled, observer)?;
            let mut pairs = Vec::new();
            let mut latency = LatencyRecorder::new();
            let mut tally = AbTally::default();
            for group in groups(config, world.size) {
                let outcome = if world.rank == WRITER {
                    time_group(world, sweep, config, size, &group, payload, remotes).map(
                        |(pair, recorder, group_tally)| {
                            latency.merge(&recorder);
                            tally.merge(&group_tally);
                            pairs.push(pair);
                        },
                    )
                } else if group.contains(&world.rank) {
                    receive_group(world, sweep, config, size, &mut expected_immediates)
                        .and_then(|()| verify_received(world, payload, column, seed))
                } else {
                    Ok(())
                };
                agree(world, outcome, observer)?;
            }
            let counters = world.counters_after_step(StepOp::Write)?;
            if world.rank == WRITER {
                let links = world.link_gbps_of(config.channels_used(world.channels.len()));
                let mut measurement = Measurement::verified(column.clone(), size, sweep.iters, pairs, &latency, links);
                measurement.registration = Some(payload.registration().into());
                measurement.counters = counters;
                measurement.telemetry_ab = sweep.telemetry_ab.map(|block| tally.result(block, sweep.iters / block));
                observer.measured(&measurement);
                measurements.push(measurement);
            }
        }
    }
    Ok(measurements)
}

/// The columns of `write` and `alltoall`, each with the index of the payload it moves and its layout:
/// every layout over every memory kind (`SinglePin` … beside `SingleDMA` …, as in the seed table), told to
/// `observer` as the run begins.
pub(crate) fn begin_columns(
    world: &World<'_>,
    payloads: &[Payload],
    configs: &[Layout],
    observer: &mut dyn Observer,
) -> Vec<(usize, Layout, Column)> {
    let emulated = world.write_emulated();
    let plans: Vec<(usize, Layout, Column)> = payloads
        .iter()
        .enumerate()
        .flat_map(|(index, payload)| {
            configs.iter().map(move |&layout| (index, layout, Column::Write { layout, memory: payload.memory(), emulated }))
        })
        .collect();
    let columns: Vec<Column> = plans.iter().map(|(_, _, column)| column.clone()).collect();
    observer.begin(&columns, &memory_labels(payloads));
    plans
}

/// The writer's side of one group: warmup, then the timed iterations with up to `window` in flight.
fn time_group(
    world: &World<'_>,
    sweep: &StepOptions,
    config: Layout,
    size: u64,
    group: &[usize],
    payload: &Payload,
    remotes: &[Vec<RemoteRegion>],
) -> Result<(PairMeasurement, LatencyRecorder, AbTally), ExperimentError> {
    let segments = plan(config, world.rank, group, size, world.channels.len());
    let window = sweep.window.max(1);
    let mut pipeline = Pipeline {
        world,
        payload,
        size,
        remotes,
        segments: &segments,
        used: used_channels(&world.channels, &segments),
        in_flight: VecDeque::with_capacity(window * segments.len() + 1),
    };
    let depth = window * segments.len();
    let mut recorder = LatencyRecorder::new();

    for iteration in 0..sweep.warmup {
        pipeline.post_iteration(iteration)?;
        while pipeline.in_flight.len() >= depth {
            pipeline.complete_oldest()?;
        }
    }
    while !pipeline.in_flight.is_empty() {
        pipeline.complete_oldest()?;
    }

    let mut tally = AbTally::default();
    let started = Instant::now();
    match sweep.telemetry_ab {
        None => {
            for iteration in sweep.warmup..sweep.warmup + sweep.iters {
                pipeline.post_iteration(iteration)?;
                while pipeline.in_flight.len() >= depth {
                    recorder.record(pipeline.complete_oldest()?);
                }
            }
            while !pipeline.in_flight.is_empty() {
                recorder.record(pipeline.complete_oldest()?);
            }
        }
        // Blocks, each drained before the next, so that a block's time holds its own iterations alone; the
        // sampler is switched between blocks, outside their time.
        Some(block) => {
            let block_bytes = (size * block * group.len() as u64) as f64;
            for (index, first) in (sweep.warmup..sweep.warmup + sweep.iters).step_by(block as usize).enumerate() {
                let arm = AbArm::of_block(index as u64);
                world.probe.set_sampling(arm.on);
                let block_started = Instant::now();
                for iteration in first..first + block {
                    pipeline.post_iteration(iteration)?;
                    while pipeline.in_flight.len() >= depth {
                        recorder.record(pipeline.complete_oldest()?);
                    }
                }
                while !pipeline.in_flight.is_empty() {
                    recorder.record(pipeline.complete_oldest()?);
                }
                tally.add(arm, block_bytes, block_started.elapsed().as_secs_f64());
            }
            world.probe.set_sampling(true);
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let bytes = (size * sweep.iters * group.len() as u64) as f64;
    let pair = PairMeasurement {
        peers: group.to_vec(),
        gbps: gbps(bytes, elapsed),
        mean_us: recorder.summary().mean_us,
    };
    Ok((pair, recorder, tally))
}

/// The writer's operations in flight, oldest first, each with its iteration and post time. Its capacity
/// is reserved before timing starts, so the timed loop does not allocate.
struct Pipeline<'w> {
    world: &'w World<'w>,
    payload: &'w Payload,
    size: u64,
    remotes: &'w [Vec<RemoteRegion>],
    segments: &'w [Segment],
    /// The channels this group writes on: the only ones a wait polls (SinglePin on one channel of many
    /// would otherwise read every channel's completion queue, each its own domain's progress, per spin).
    used: &'w [Channel],
    in_flight: VecDeque<InFlight<'w>>,
}

/// The leading channels up to the highest one `segments` use: what waiting for them must progress.
fn used_channels<'c>(channels: &'c [Channel], segments: &[Segment]) -> &'c [Channel] {
    let end = segments.iter().map(|s| s.channel + 1).max().unwrap_or(channels.len()).min(channels.len());
    &channels[..end]
}

struct InFlight<'w> {
    iteration: u64,
    posted: Instant,
    segment: Segment,
    op: Op<'w>,
}

impl<'w> Pipeline<'w> {
    fn post_iteration(&mut self, iteration: u64) -> Result<(), ExperimentError> {
        let posted = Instant::now();
        // Staged device memory is copied to the registered host buffer for every write: its real cost.
        self.payload.stage(Stage::Out, 0, self.size)?;
        let immediate = Immediate::encode(self.world.rank, iteration as u32);
        for segment in self.segments {
            let channel: &'w Channel = &self.world.channels[segment.channel];
            let op = channel.write(
                segment.peer,
                &self.payload.regions[segment.channel],
                segment.offset as usize,
                segment.len as usize,
                self.remotes[segment.peer][segment.channel],
                segment.offset,
                Some(immediate),
            )
            .map_err(|err| crate::towards(self.world, segment.peer, err))?;
            self.in_flight.push_back(InFlight {
                iteration,
                posted,
                segment: *segment,
                op,
            });
            self.world
                .probe
                .set_in_flight(segment.channel, channel.in_flight());
        }
        Ok(())
    }

    /// Completes the oldest iteration in flight; returns its post-to-last-completion time.
    fn complete_oldest(&mut self) -> Result<Duration, ExperimentError> {
        let Some(oldest) = self.in_flight.front() else {
            return Ok(Duration::ZERO);
        };
        let (iteration, posted) = (oldest.iteration, oldest.posted);
        while self
            .in_flight
            .front()
            .is_some_and(|f| f.iteration == iteration)
        {
            if let Some(InFlight {
                segment,
                op,
                posted,
                ..
            }) = self.in_flight.pop_front()
            {
                let world = self.world;
                // A write that never completes names the rank it went to.
                let stalled = |err| crate::towards(world, segment.peer, err);
                world.progress_until(self.used, "RDMA write completion", || op.is_complete()).map_err(stalled)?;
                op.wait().map_err(stalled)?;
                let probe = &self.world.probe;
                probe.completed(
                    segment.channel,
                    segment.peer,
                    segment.len,
                    Some(posted.elapsed()),
                );
                probe.set_in_flight(
                    segment.channel,
                    self.world.channels[segment.channel].in_flight(),
                );
            }
        }
        Ok(posted.elapsed())
    }
}

/// The target's side: progress every channel until all immediates of this group have arrived. A target
/// is only declared hung when no immediate arrives for the operation timeout.
fn receive_group(
    world: &World<'_>,
    sweep: &StepOptions,
    config: Layout,
    size: u64,
    expected: &mut [u64],
) -> Result<(), ExperimentError> {
    let mut segment_len = vec![0u64; world.channels.len()];
    // What telemetry has been told per channel: every immediate promised before this group. An immediate of
    // this group that a progress call elsewhere (a barrier between groups) already reaped is this group's.
    let mut seen: Vec<u64> = expected.to_vec();
    let incoming = plan(config, WRITER, &[world.rank], size, world.channels.len());
    for segment in &incoming {
        expected[segment.channel] += sweep.warmup + sweep.iters;
        segment_len[segment.channel] = segment.len;
    }
    let used = used_channels(&world.channels, &incoming);
    let timeout = world.op_timeout;
    let mut stall = crate::Stall::new();
    // `--telemetry-ab`: this rank's sampler follows the writer's blocks, by the iterations that have landed
    // on the first channel this group writes on (one write per iteration there).
    let blocks = sweep.telemetry_ab.and_then(|block| {
        let channel = incoming.first()?.channel;
        Some((block, channel, seen[channel]))
    });
    loop {
        // Count what has landed before asking whether all of it has: the whole group may have been reaped
        // before this call.
        let mut advanced = false;
        for ((channel, seen), len) in world.channels.iter().zip(seen.iter_mut()).zip(&segment_len) {
            let now = channel.immediates_from(WRITER);
            if now > *seen {
                world
                    .probe
                    .received(channel.index(), WRITER, (now - *seen) * len, now - *seen);
                *seen = now;
                advanced = true;
            }
        }
        let complete = world
            .channels
            .iter()
            .zip(expected.iter())
            .all(|(channel, want)| channel.immediates_from(WRITER) >= *want);
        if complete {
            world.probe.set_sampling(true);
            return Ok(());
        }
        if let Some((block, channel, start)) = blocks {
            let landed = world.channels[channel].immediates_from(WRITER) - start;
            let on = landed < sweep.warmup || AbArm::of_block((landed - sweep.warmup) / block).on;
            if on != world.probe.sampling() {
                world.probe.set_sampling(on);
            }
        }
        if advanced {
            stall.advanced();
        } else if stall.idle_longer_than(timeout) {
            return Err(crate::stalled(
                format!("rank {} waited for write immediates from rank {WRITER} ({})", world.rank, world.hosts[WRITER]),
                timeout,
            ));
        }
        world.progress(used)?;
    }
}

/// The receiver's check of one step: stage the bytes in (device memory) and compare them with the
/// sender's pattern, naming receiver, sender, column and size on a mismatch (proxy's receiver too).
pub(crate) fn verify_received(
    world: &World<'_>,
    payload: &Payload,
    column: &Column,
    seed: PatternSeed,
) -> Result<(), ExperimentError> {
    world.probe.set_phase(Phase::Verifying, seed.size);
    payload.stage(Stage::In, 0, seed.size)?;
    payload
        .verify(seed)?
        .map_err(|mismatch| ExperimentError::Verification {
            receiver: world.rank,
            sender: seed.sender,
            config: column.to_string(),
            size: format_size(seed.size),
            detail: mismatch.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_splits_the_buffer_over_every_channel() {
        let segments = plan(Layout::Multi, 0, &[1], 1 << 20, 4);
        assert_eq!(segments.len(), 4);
        assert_eq!(segments.iter().map(|s| s.len).sum::<u64>(), 1 << 20);
        assert_eq!(
            segments[3],
            Segment {
                peer: 1,
                channel: 3,
                offset: 3 << 18,
                len: 1 << 18
            }
        );
    }

    #[test]
    fn multi_skips_empty_chunks_when_channels_outnumber_bytes() {
        let segments = plan(Layout::Multi, 0, &[1], 4, 8);
        assert_eq!(segments.len(), 4);
        assert_eq!(segments.iter().map(|s| s.len).sum::<u64>(), 4);
    }

    #[test]
    fn round_robin_follows_peer_plus_rank() {
        let channels: Vec<usize> = plan(Layout::RoundRobin, 0, &[1, 2, 3], 4096, 4)
            .iter()
            .map(|s| s.channel)
            .collect();
        assert_eq!(channels, vec![1, 2, 3]);
        let channels: Vec<usize> = plan(Layout::RoundRobin, 2, &[1, 3], 4096, 2)
            .iter()
            .map(|s| s.channel)
            .collect();
        assert_eq!(channels, vec![1, 1]);
    }
}
