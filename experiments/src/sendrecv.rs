//! `sendrecv`: two-sided ping-pong between rank 0 and each rank k (seed `sendrecv.md`). One operation is a
//! SEND followed by the RECV of the reply; its latency is that round trip and its bandwidth the message
//! size over it, averaged over the pairs. Both sides pre-post their receive before the message can
//! arrive, so no provider has to buffer an unexpected message.

use std::time::Instant;

use efatop_proto::column::Column;
use efatop_proto::results::{LatencyRecorder, Measurement, PairMeasurement, gbps};
use efatop_proto::sizes::format_size;

use crate::pattern::PatternSeed;
use crate::payload::{Payload, Stage, memory_labels, prepare};
use crate::world::World;
use crate::{ExperimentError, Observer, StepOptions, agree, check_sizes};

const INITIATOR: usize = 0;
const CHANNEL: usize = 0;

pub fn run(
    world: &World<'_>,
    sweep: &StepOptions,
    observer: &mut dyn Observer,
) -> Result<Vec<Measurement>, ExperimentError> {
    if world.size < 2 {
        return Err(ExperimentError::InvalidInput {
            flag: "--ranks",
            message: "sendrecv needs at least 2 ranks (rank 0 ping-pongs with ranks 1..N-1)".into(),
        });
    }
    check_sizes(world, sweep)?;
    let largest = sweep.sizes.iter().copied().max().unwrap_or(4) as usize;
    let channels = std::slice::from_ref(&world.channels[CHANNEL]);
    let sends = prepare(world, &sweep.memories, largest, channels, observer)?;
    let receives = prepare(world, &sweep.memories, largest, channels, observer)?;
    let columns: Vec<Column> = sends.iter().map(|send| Column::SendRecv { memory: send.memory() }).collect();
    observer.begin(&columns, &memory_labels(&sends));

    let mut measurements = Vec::new();
    for ((send, recv), column) in sends.iter().zip(&receives).zip(&columns) {
        measure_memory(world, sweep, send, recv, column, observer, &mut measurements)?;
    }
    Ok(measurements)
}

/// The sweep for one memory kind: every size, every pair.
fn measure_memory(
    world: &World<'_>,
    sweep: &StepOptions,
    send: &Payload,
    recv: &Payload,
    column: &Column,
    observer: &mut dyn Observer,
    measurements: &mut Vec<Measurement>,
) -> Result<(), ExperimentError> {
    for &size in &sweep.sizes {
        observer.step(column, size);
        let corrupt = if world.rank == INITIATOR { sweep.corrupt_byte } else { None };
        send.fill(PatternSeed { sender: world.rank, size, iteration: 0 }, corrupt)?;
        world.barrier()?;
        world.counters_before_step();
        let mut pairs = Vec::new();
        let mut latency = LatencyRecorder::new();
        for peer in 1..world.size {
            let outcome = if world.rank == INITIATOR {
                ping(world, sweep, size, peer, send, recv, column).and_then(|(pair, recorder)| {
                    latency.merge(&recorder);
                    pairs.push(pair);
                    verify(world, recv, peer, size, column)
                })
            } else if world.rank == peer {
                pong(world, sweep, size, send, recv).and_then(|()| verify(world, recv, INITIATOR, size, column))
            } else {
                Ok(())
            };
            agree(world, outcome, observer)?;
        }
        let counters = world.counters_after_step(efatop_proto::counters::StepOp::Send)?;
        if world.rank == INITIATOR {
            let mut measurement = Measurement::verified(column.clone(), size, sweep.iters, pairs, &latency, world.link_gbps_of(1));
            measurement.registration = Some(send.registration().into());
            measurement.counters = counters;
            observer.measured(&measurement);
            measurements.push(measurement);
        }
    }
    Ok(())
}

fn ping(
    world: &World<'_>,
    sweep: &StepOptions,
    size: u64,
    peer: usize,
    send: &Payload,
    recv: &Payload,
    column: &Column,
) -> Result<(PairMeasurement, LatencyRecorder), ExperimentError> {
    let (send_region, recv_region) = (&send.regions[0], &recv.regions[0]);
    let channel = &world.channels[CHANNEL];
    let channels = std::slice::from_ref(channel);
    let len = size as usize;
    let mut recorder = LatencyRecorder::new();
    let mut timed = 0.0f64;
    for iteration in 0..sweep.warmup + sweep.iters {
        let reply = channel.recv(recv_region, 0, len)?;
        let started = Instant::now();
        send.stage(Stage::Out, 0, size)?;
        let ping = channel.send(peer, send_region, 0, len)?;
        world.progress_until(channels, "SEND completion", || ping.is_complete())?;
        ping.wait()?;
        world.probe.completed(CHANNEL, peer, size, None);
        world.progress_until(channels, "RECV of the reply", || reply.is_complete())?;
        let received = reply.wait()?;
        recv.stage(Stage::In, 0, size)?;
        let round_trip = started.elapsed();
        world.probe.completed(CHANNEL, peer, received.len as u64, Some(round_trip));
        if received.len != len {
            return Err(ExperimentError::Verification {
                receiver: world.rank,
                sender: peer,
                config: column.to_string(),
                size: format_size(size),
                detail: format!("received {} bytes, expected {len}", received.len),
            });
        }
        if iteration >= sweep.warmup {
            recorder.record(round_trip);
            timed += round_trip.as_secs_f64();
        }
    }
    let pair = PairMeasurement {
        peers: vec![peer],
        gbps: gbps((size * sweep.iters) as f64, timed),
        mean_us: recorder.summary().mean_us,
    };
    Ok((pair, recorder))
}

fn pong(
    world: &World<'_>,
    sweep: &StepOptions,
    size: u64,
    send: &Payload,
    recv: &Payload,
) -> Result<(), ExperimentError> {
    let (send_region, recv_region) = (&send.regions[0], &recv.regions[0]);
    let channel = &world.channels[CHANNEL];
    let channels = std::slice::from_ref(channel);
    let len = size as usize;
    let total = sweep.warmup + sweep.iters;
    let mut next = Some(channel.recv(recv_region, 0, len)?);
    for iteration in 0..total {
        let Some(incoming) = next.take() else { break };
        // Rank 0 may still be timing another pair: the first message is not bounded by the op timeout.
        let timeout = if iteration == 0 { world.op_timeout * 16 } else { world.op_timeout };
        world.progress_until_within(channels, timeout, "RECV of the ping", || incoming.is_complete())?;
        let received = incoming.wait()?;
        world.probe.completed(CHANNEL, INITIATOR, received.len as u64, None);
        recv.stage(Stage::In, 0, size)?;
        if iteration + 1 < total {
            next = Some(channel.recv(recv_region, 0, len)?);
        }
        send.stage(Stage::Out, 0, size)?;
        let pong = channel.send(INITIATOR, send_region, 0, len)?;
        world.progress_until(channels, "SEND of the reply", || pong.is_complete())?;
        pong.wait()?;
        world.probe.completed(CHANNEL, INITIATOR, size, None);
    }
    Ok(())
}

fn verify(world: &World<'_>, payload: &Payload, sender: usize, size: u64, column: &Column) -> Result<(), ExperimentError> {
    let seed = PatternSeed { sender, size, iteration: 0 };
    payload.verify(seed)?.map_err(|mismatch| ExperimentError::Verification {
        receiver: world.rank,
        sender,
        config: column.to_string(),
        size: format_size(size),
        detail: mismatch.to_string(),
    })
}
