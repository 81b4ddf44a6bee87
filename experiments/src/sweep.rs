//! `sweep`: find the one slow NIC, link or node of a fleet. Ranks meet in rounds of a round-robin
//! tournament ([`efatop_sweep::plan`]): in a round every rank is paired, and both ranks of a pair
//! write each other at once on every channel, channel k to channel k (rail-aligned), one-sided RDMA WRITE
//! with immediate data of one size, the receiver verifying every byte as every efatop benchmark does.
//! After the tournament a cross-rail round pairs the first round's ranks again, channel k of the smaller
//! with channel k + 1 of the larger, so that each NIC meets a second NIC of the same peer node. Rank 0
//! collects each round's figures, judges them as they come ([`efatop_sweep::verdict::Judge`]), runs retest
//! rounds for suspects (against a healthy peer; slow pairs again), and ends with the verdict.
//!
//! Memory: one registered buffer per rank, slot 0 what it sends (the same bytes on every channel), slot
//! 1 + k what its partner writes into channel k; slots are 4 KiB aligned.

use std::time::Instant;

use efatop_fabric::{Immediate, Op, RemoteRegion};
use efatop_proto::column::Column;
use efatop_proto::results::LatencyRecorder;
use efatop_proto::sizes::format_size;
use efatop_proto::sweep::{Figure, NicFacts, NodeFacts, Round, SweepResults, SweepRound};
use efatop_sweep::plan::{cross_rail_round, pairing_rounds, retest_round_shifted};
use efatop_sweep::verdict::Judge;
use efatop_proto::telemetry::Phase;

use crate::alltoall::slot_stride;
use crate::pattern::PatternSeed;
use crate::payload::{exchange_regions, memory_labels, prepare, Payload, Stage};
use crate::world::{CrossRail, World};
use crate::{agree, agree_on, ExperimentError, Observer, StepOptions};

/// What the sweep's flags ask for.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepConfig {
    /// Bytes each channel writes per iteration.
    pub size: u64,
    /// The first ⌈n/2⌉ rounds only.
    pub quick: bool,
    /// A channel below this fraction of its rail's median is suspect.
    pub threshold: f64,
    /// A link speed the user gave, judged against as well.
    pub link_gbps: Option<f64>,
    /// Run the cross-rail round (where a rank has two channels or more).
    pub cross_rail: bool,
}

/// At most this many retest rounds follow the tournament (a suspect per round per healthy rank can wait).
const RETEST_ROUNDS: usize = 4;

/// Runs the sweep on every rank; rank 0 returns every round and the verdict (other ranks an empty record),
/// telling `observer` after each round.
pub fn run(
    world: &World<'_>,
    sweep: &StepOptions,
    config: &SweepConfig,
    observer: &mut dyn Observer,
) -> Result<SweepResults, ExperimentError> {
    if world.size < 2 {
        return Err(ExperimentError::InvalidInput { flag: "--ranks", message: "sweep needs at least 2 ranks".into() });
    }
    let limit = world.max_msg_size();
    if config.size > limit {
        return Err(ExperimentError::InvalidInput {
            flag: "--size",
            message: format!(
                "{} exceeds the {} provider's max_msg_size of {limit} bytes",
                format_size(config.size),
                world.provider_stack
            ),
        });
    }
    let channels = world.channels.len();
    let stride = slot_stride(config.size);
    let memories = &sweep.memories[..sweep.memories.len().min(1)];
    let payloads = prepare(world, memories, (stride * (channels as u64 + 1)) as usize, &world.channels, observer)?;
    let payload = payloads
        .first()
        .ok_or_else(|| ExperimentError::InvalidInput { flag: "--memory", message: "sweep needs one memory kind".into() })?;
    let column = Column::Sweep { memory: payload.memory(), emulated: world.write_emulated() };
    observer.begin(std::slice::from_ref(&column), &memory_labels(&payloads));
    let remotes = exchange_regions(world, payload)?;
    let nodes = gather_facts(world)?;
    let crowded = crowded_machines(world)?;

    let mut sweep_notes: Vec<String> = crowded.iter().cloned().collect();
    let cross = if config.cross_rail && channels >= 2 {
        Some(world.connect_cross_rail(1)?)
    } else {
        if config.cross_rail {
            sweep_notes.push("sweep: one channel a rank, so no cross-rail round ran (it needs two NICs a node)".into());
        }
        None
    };
    let mut plan = pairing_rounds(world.size, config.quick);
    if let (Some(_), Some(first)) = (&cross, plan.first()) {
        plan.push(cross_rail_round(plan.len(), first));
    }
    let results = SweepResults {
        size: config.size,
        threshold: config.threshold,
        link_gbps: config.link_gbps,
        quick: config.quick,
        cross_rail: cross.is_some(),
        nodes,
        rounds: Vec::new(),
        verdict: None,
        notes: sweep_notes,
    };
    let mut exchange = Exchange {
        world,
        sweep,
        size: config.size,
        stride,
        payload,
        remotes: &remotes,
        column: &column,
        expected: vec![vec![0; world.size]; channels],
        rails_at_once: crowded.is_none(),
        cross: cross.unwrap_or_default(),
    };
    let judge = Judge::new(&results.nodes, channels, config.threshold, config.link_gbps);
    let mut record = Record { planned: plan.len(), judge, results };
    for round in &plan {
        record.play(&mut exchange, round, observer)?;
    }
    // Rank 0 judges the tournament and decides the retest rounds; every rank runs them.
    let retests = if world.rank == 0 {
        let judged = record.judge.judgement();
        let mut rounds = Vec::new();
        // Rail-aligned retests first, then cross-rail pairs again as they ran (shift 1).
        for (mut wanted, shift) in [(judged.retest, 0), (judged.retest_cross, 1)] {
            while !wanted.is_empty() && rounds.len() < RETEST_ROUNDS {
                let (round, left) = retest_round_shifted(plan.len() + rounds.len(), &wanted, shift);
                if round.pairs.is_empty() {
                    break;
                }
                rounds.push(round);
                wanted = left;
            }
        }
        rounds
    } else {
        Vec::new()
    };
    let retests: Vec<Round> = world.gather(&retests, "retest plan")?.into_iter().next().unwrap_or_default();
    for round in &retests {
        record.play(&mut exchange, round, observer)?;
    }
    let Record { judge, mut results, .. } = record;
    if world.rank == 0 {
        results.verdict = Some(judge.judgement().verdict);
        observer.sweep(&results);
    }
    Ok(results)
}

/// Rank 0's record of the rounds as they finish, judged one at a time.
struct Record {
    planned: usize,
    judge: Judge,
    results: SweepResults,
}

impl Record {
    /// Runs `round` on this rank; on rank 0 its figures are judged, kept and told to `observer`.
    fn play(&mut self, exchange: &mut Exchange<'_>, round: &Round, observer: &mut dyn Observer) -> Result<(), ExperimentError> {
        let figures = exchange.round(round, observer)?;
        if exchange.world.rank == 0 {
            let finished = SweepRound { round: round.clone(), planned: self.planned, figures };
            self.judge.add(&finished);
            self.results.rounds.push(finished);
            observer.sweep(&self.results);
        }
        Ok(())
    }
}

/// Every rank's host, GPU and NICs, for the verdict to name.
fn gather_facts(world: &World<'_>) -> Result<Vec<NodeFacts>, ExperimentError> {
    let mine = NodeFacts {
        rank: world.rank,
        host: world.hosts[world.rank].clone(),
        gpu: world.gpu_ordinal(),
        gpu_pci: world.gpu_pci_bus_id(),
        nics: world
            .channels
            .iter()
            .map(|c| NicFacts { name: c.nic().domain.clone(), pci: c.nic().pci_address.clone() })
            .collect(),
    };
    world.gather(&mine, "sweep node facts")
}

/// Where more ranks' channels than cores share a machine (emulated nodes in network namespaces, or
/// oversubscribed ranks), every rail of every pair at once measures the CPUs, not the links: the rails then
/// run one after another. Every rank decides alike (rank 0's hosts, each machine's core count shared);
/// returns the note that says so.
fn crowded_machines(world: &World<'_>) -> Result<Option<String>, ExperimentError> {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let machine = crate::world::machine(&world.hosts[world.rank]);
    let here = world.hosts.iter().filter(|h| crate::world::machine(h) == machine).count();
    let streams = here * world.channels.len() * 2;
    let mine = world.channels.len() > 1 && streams > cores;
    let votes = world.gather(&mine, "crowded machine")?;
    if !votes.iter().any(|&crowded| crowded) {
        return Ok(None);
    }
    Ok(Some(format!(
        "sweep: {} × {} both ways on {machine}'s {}: rails run one after another so that the \
         links, not the CPUs, are measured",
        efatop_proto::words::plural(here, "rank"),
        efatop_proto::words::plural(world.channels.len(), "channel"),
        efatop_proto::words::plural(cores, "core")
    )))
}

/// One rank's side of the rounds.
struct Exchange<'a> {
    world: &'a World<'a>,
    sweep: &'a StepOptions,
    size: u64,
    stride: u64,
    payload: &'a Payload,
    remotes: &'a [Vec<RemoteRegion>],
    column: &'a Column,
    /// `expected[channel][source]`: immediates promised so far over the whole run.
    expected: Vec<Vec<u64>>,
    /// Every rail of a pair at once; else one rail after another (ranks crowd a machine's cores).
    rails_at_once: bool,
    /// Where each channel reaches the peers' other channels, for the cross-rail round.
    cross: CrossRail,
}

/// A channel's writes of one round.
struct Lane<'w> {
    op: Option<(Op<'w>, Instant)>,
    /// When the next write was first tried, while the provider says EAGAIN: its time counts from there.
    trying_since: Option<Instant>,
    posted: u64,
    timed_from: Option<Instant>,
    timed_until: Option<Instant>,
    latency: LatencyRecorder,
}

impl Exchange<'_> {
    /// Runs one round from this rank's side; rank 0 returns every rank's figures (others, their own).
    fn round(&mut self, round: &Round, observer: &dyn Observer) -> Result<Vec<Figure>, ExperimentError> {
        let world = self.world;
        let partner = round.partner(world.rank);
        let size = self.size;
        let seed = |sender: usize| PatternSeed { sender, size, iteration: round.index as u64 };
        if partner.is_some() {
            world.probe.set_phase(Phase::Filling, self.size);
        }
        let filled = match partner {
            Some(_) => self
                .payload
                .fill_at(0, seed(world.rank), self.sweep.corrupt_byte.filter(|_| world.rank == 0))
                .and_then(|()| self.payload.stage(Stage::Out, 0, self.size)),
            None => Ok(()),
        };
        agree(world, filled, observer)?;
        let measured = match partner {
            Some(peer) => {
                world.probe.set_phase(Phase::Transferring, self.size);
                let rails: Vec<usize> = (0..world.channels.len()).collect();
                if self.rails_at_once {
                    self.exchange(round, peer, &rails)
                } else {
                    // Step s runs the smaller rank's channel s and the channel of the larger it meets, so
                    // both sides take the same pair of NICs at each step.
                    let count = world.channels.len();
                    rails.iter().try_fold(Vec::new(), |mut figures, &step| {
                        let mine = if world.rank < peer { step } else { round.remote_rail(peer, world.rank, step, count) };
                        figures.extend(self.exchange(round, peer, &[mine])?);
                        Ok(figures)
                    })
                }
            }
            None => Ok(Vec::new()),
        };
        let figures = agree_on(world, measured, observer)?;
        let checked = match partner {
            Some(peer) => {
                world.probe.set_phase(Phase::Verifying, self.size);
                (0..world.channels.len()).try_for_each(|rail| {
                    let at = (rail as u64 + 1) * self.stride;
                    self.payload.stage(Stage::In, at, self.size)?;
                    self.payload.verify_at(at, seed(peer))?.map_err(|mismatch| ExperimentError::Verification {
                        receiver: world.rank,
                        sender: peer,
                        config: format!("{} round {} channel {rail}", self.column, round.index),
                        size: format_size(self.size),
                        detail: mismatch.to_string(),
                    })
                })
            }
            None => Ok(()),
        };
        agree(world, checked, observer)?;
        let gathered = world.gather(&figures, "sweep figures")?;
        if world.rank != 0 {
            return Ok(figures);
        }
        let mut all: Vec<Figure> = gathered.into_iter().flatten().collect();
        all.sort_by_key(|f| (f.from, f.rail));
        Ok(all)
    }

    /// Writes `peer` from this rank's channels `rails` (each to the channel of `peer` the round pairs it
    /// with; warmup, then the timed iterations, one write in flight per channel) while `peer` writes the same
    /// channels of this rank, until both sides' writes have landed. Returns this rank's figures, with what
    /// its channels retransmitted meanwhile where counters tell.
    fn exchange(&mut self, round: &Round, peer: usize, rails: &[usize]) -> Result<Vec<Figure>, ExperimentError> {
        let world = self.world;
        let total = self.sweep.warmup + self.sweep.iters;
        let count = world.channels.len();
        // Per local channel: the peer's channel it writes, and the endpoint index that reaches it.
        let targets: Vec<(usize, usize)> = (0..count)
            .map(|rail| {
                let theirs = round.remote_rail(world.rank, peer, rail, count);
                let endpoint = self.cross.endpoint(rail, theirs, peer).ok_or_else(|| ExperimentError::Bootstrap(format!(
                    "channel {rail} of rank {} is not connected to channel {theirs} of rank {peer}",
                    world.rank
                )))?;
                Ok((theirs, endpoint))
            })
            .collect::<Result<_, ExperimentError>>()?;
        world.counters_before_step();
        // What telemetry has been told per rail: every immediate promised before this round. Immediates
        // of this round that a progress call elsewhere (a barrier) already reaped count as this round's.
        let mut seen: Vec<u64> = self.expected.iter().map(|promised| promised[peer]).collect();
        for &rail in rails {
            self.expected[rail][peer] += total;
        }
        // Rails left out of this exchange start with nothing to post.
        let mut lanes: Vec<Lane<'_>> = (0..world.channels.len())
            .map(|rail| Lane {
                op: None,
                trying_since: None,
                posted: if rails.contains(&rail) { 0 } else { total },
                timed_from: None,
                timed_until: None,
                latency: LatencyRecorder::new(),
            })
            .collect();
        let mut last_change = Instant::now();
        loop {
            let mut advanced = false;
            for (rail, lane) in lanes.iter_mut().enumerate() {
                if let Some((op, posted)) = lane.op.take_if(|(op, _)| op.is_complete()) {
                    op.wait()?;
                    let now = Instant::now();
                    let took = now.duration_since(posted);
                    let timed = lane.posted > self.sweep.warmup;
                    if timed {
                        lane.latency.record(took);
                        lane.timed_until = Some(now);
                    }
                    world.probe.completed(rail, peer, self.size, timed.then_some(took));
                    advanced = true;
                }
                if lane.op.is_none() && lane.posted < total {
                    let channel = &world.channels[rail];
                    let tried = *lane.trying_since.get_or_insert_with(Instant::now);
                    let (theirs, endpoint) = targets[rail];
                    // Never wait inside the provider: a write the provider cannot take yet (shm's EAGAIN
                    // while an earlier transfer is still in its bounce buffers) is tried again after
                    // every channel has progressed. In the cross-rail round channel k's write waits on the
                    // peer progressing its channel k+1, which waits on this rank's channel k+1: progressing
                    // one channel alone would deadlock the two ranks.
                    let posted = channel.try_write(
                        endpoint,
                        &self.payload.regions[rail],
                        0,
                        self.size as usize,
                        self.remotes[peer][theirs],
                        (theirs as u64 + 1) * self.stride,
                        Immediate::encode(world.rank, lane.posted as u32),
                    )?;
                    if let Some(op) = posted {
                        if lane.posted == self.sweep.warmup {
                            lane.timed_from = Some(tried);
                        }
                        lane.op = Some((op, tried));
                        lane.trying_since = None;
                        lane.posted += 1;
                        world.probe.set_in_flight(rail, channel.in_flight());
                        advanced = true;
                    }
                }
            }
            for ((rail, channel), seen) in world.channels.iter().enumerate().zip(seen.iter_mut()) {
                let now = channel.immediates_from(peer);
                if now > *seen {
                    world.probe.received(rail, peer, (now - *seen) * self.size, now - *seen);
                    *seen = now;
                    advanced = true;
                }
            }
            let written = lanes.iter().all(|lane| lane.op.is_none() && lane.posted == total);
            let landed = world.channels.iter().zip(&self.expected).all(|(c, want)| c.immediates_from(peer) >= want[peer]);
            if written && landed {
                break;
            }
            world.progress_all()?;
            if advanced {
                last_change = Instant::now();
            } else {
                // Nothing to do until the NIC says so: leave the core to whoever shares it (a rank of
                // another emulated node, the kernel's TCP) rather than spin.
                std::thread::yield_now();
            }
            if !advanced && last_change.elapsed() > world.op_timeout {
                let waiting = if written {
                    format!("rank {} waited for sweep writes from rank {peer} ({})", world.rank, world.hosts[peer])
                } else {
                    format!("rank {}'s sweep writes to rank {peer} ({}) never completed", world.rank, world.hosts[peer])
                };
                return Err(crate::stalled(waiting, world.op_timeout));
            }
        }
        let (nic_retransmits, tcp_retransmits) = world.retransmits_since_before_step();
        Ok(lanes
            .iter()
            .enumerate()
            .filter(|(rail, _)| rails.contains(rail))
            .filter_map(|(rail, lane)| {
                let seconds = lane.timed_until?.duration_since(lane.timed_from?).as_secs_f64();
                let summary = lane.latency.summary();
                let theirs = targets[rail].0;
                // TCP's count is the rank's: it is this channel's only while this rail runs alone.
                let retransmits = nic_retransmits[rail].or(tcp_retransmits.filter(|_| rails.len() == 1));
                (seconds > 0.0).then(|| Figure {
                    from: world.rank,
                    to: peer,
                    rail,
                    to_rail: (theirs != rail).then_some(theirs),
                    retransmits,
                    gbps: efatop_proto::results::gbps((self.size * self.sweep.iters) as f64, seconds),
                    steady_gbps: if summary.p50_us > 0.0 { efatop_proto::results::gbps(self.size as f64, summary.p50_us / 1e6) } else { 0.0 },
                    p50_us: summary.p50_us,
                    p99_us: summary.p99_us,
                })
            })
            .collect())
    }
}
