//! The relay between real samplers and rank 0's real collector, over loopback.

use super::*;
use crate::collector::{Collector, SamplerThread};
use efatop_proto::events::CollectorEvent;
use efatop_experiments::probe::Probe;
use efatop_proto::telemetry::RankSample;
use std::io::Write;
use std::net::TcpStream;
use std::sync::mpsc;

/// A run of 8 ranks (the collector's tests' world); the host under test runs ranks 4 to 7.
use crate::collector::tests::{WORLD, collector};
const INTERVAL: Duration = Duration::from_millis(20);

fn plan() -> Plan {
    let hosts: Vec<String> = (0..8).map(|rank| format!("node{}", rank / 4)).collect();
    Plan::of(&hosts, 6).expect("ranks 4..8 share a host that is not rank 0's")
}

fn start_relay(collector: &Collector, secret: &Secret, watch: Option<RankZeroWatch>) -> Relay {
    RelayListener::bind().expect("bind").start(plan(), collector.address, secret, WORLD, INTERVAL, watch).expect("relay")
}

fn sampler(rank: usize, relay: &Relay, secret: &Secret) -> SamplerThread {
    SamplerThread::start(rank, Arc::new(Probe::new(4, 8)), relay.address, secret, INTERVAL).expect("sampler")
}

/// A watch that hands what it is told to the returned receiver.
fn watch(relay: Option<String>) -> (RankZeroWatch, mpsc::Receiver<String>) {
    let (tx, rx) = mpsc::channel();
    (RankZeroWatch { timeout: Duration::from_secs(5), lost: Box::new(move |why| drop(tx.send(why))), relay }, rx)
}

/// Events until `until` says stop (or 10 s pass): what was seen, the last one included.
fn events_until(next: &mut impl FnMut(Duration) -> Option<CollectorEvent>, mut until: impl FnMut(&CollectorEvent) -> bool) -> Vec<CollectorEvent> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let Some(event) = next(Duration::from_millis(200)) else { continue };
        let stop = until(&event);
        seen.push(event);
        if stop {
            return seen;
        }
    }
    panic!("not seen within 10 s; saw {} events, the last: {:?}", seen.len(), seen.last());
}

fn sampled(events: &[CollectorEvent], rank: u32) -> usize {
    events.iter().filter(|e| matches!(e, CollectorEvent::Sample(s) if s.rank == rank)).count()
}

#[test]
fn the_plan_is_a_relay_for_every_host_but_rank_0s_that_runs_more_than_one_rank() {
    let hosts: Vec<String> = ["a", "a", "b", "b", "b", "c", "d", "d"].iter().map(ToString::to_string).collect();
    assert_eq!(Plan::of(&hosts, 0), None, "rank 0's host talks to rank 0's collector itself");
    assert_eq!(Plan::of(&hosts, 1), None);
    let b = Plan { leader: 2, ranks: vec![2, 3, 4] };
    assert_eq!(Plan::of(&hosts, 2), Some(b.clone()));
    assert_eq!(Plan::of(&hosts, 4), Some(b));
    assert_eq!(Plan::of(&hosts, 5), None, "a host of one rank has nothing to gather");
    assert_eq!(Plan::of(&hosts, 7), Some(Plan { leader: 6, ranks: vec![6, 7] }));
    assert_eq!(Plan::of(&hosts, 8), None);
    assert_eq!(Plan::leaders(&hosts), vec![2, 6], "every relay at once, as each rank plans its own");
    // Emulated nodes are hosts of their own.
    let emulated: Vec<String> = ["m:node0", "m:node0", "m:node1", "m:node1"].iter().map(ToString::to_string).collect();
    assert_eq!(Plan::of(&emulated, 3), Some(Plan { leader: 2, ranks: vec![2, 3] }));
}

#[test]
fn a_hosts_ranks_reach_rank_0_over_one_connection_and_each_end_is_told_at_once() {
    let (collector, secret, mut next) = collector();
    let relay = start_relay(&collector, &secret, None);
    let mut samplers: Vec<Option<SamplerThread>> = (4..8).map(|rank| Some(sampler(rank, &relay, &secret))).collect();
    // Every rank of the host is heard.
    let mut heard = [false; 4];
    let seen = events_until(&mut next, |event| {
        if let CollectorEvent::Sample(sample) = event {
            heard[sample.rank as usize - 4] = true;
        }
        heard.iter().all(|h| *h)
    });
    assert!(!seen.iter().any(|e| matches!(e, CollectorEvent::Closed { .. } | CollectorEvent::Refused { .. } | CollectorEvent::Malformed { .. })), "{seen:?}");
    // Rank 6 ends: rank 0 hears it at once, named, while its neighbours go on.
    samplers[2].take().expect("rank 6").finish();
    let seen = events_until(&mut next, |event| matches!(event, CollectorEvent::Closed { .. }));
    let Some(CollectorEvent::Closed { from: relay_from, rank: Some(6) }) = seen.last().cloned() else { panic!("{seen:?}") };
    assert!(sampled(&seen, 6) >= 1, "rank 6's last sample comes before its end: {seen:?}");
    let after = events_until(&mut next, |event| matches!(event, CollectorEvent::Sample(s) if s.rank == 7));
    assert!(!after.iter().any(|e| matches!(e, CollectorEvent::Closed { .. }) || matches!(e, CollectorEvent::Sample(s) if s.rank == 6)), "{after:?}");
    // The others end, then the relay: every end is told, every one from the relay's one connection, and
    // the connection's own close names no rank (each was told already).
    for sampler in samplers.iter_mut().filter_map(Option::take) {
        sampler.finish();
    }
    relay.finish(FINISH_WITHIN);
    let mut ended = Vec::new();
    let seen = events_until(&mut next, |event| {
        if let CollectorEvent::Closed { from, rank } = event {
            assert_eq!(*from, relay_from, "every rank of the host spoke through one connection: {event:?}");
            ended.push(*rank);
        }
        ended.contains(&None)
    });
    ended.sort_unstable();
    assert_eq!(ended, vec![None, Some(4), Some(5), Some(7)], "{seen:?}");
    assert_eq!(collector.refused(), 0);
}

#[test]
fn strangers_and_ranks_of_other_hosts_are_refused_and_counted_and_the_relay_goes_on() {
    let (collector, secret, mut next) = collector();
    let relay = start_relay(&collector, &secret, None);
    let refused = |count: u64| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while relay.refused() < count {
            assert!(Instant::now() < deadline, "refused {} of {count}", relay.refused());
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    // The 27-byte attack on the relay: rank 5's hello without the handshake, then close.
    let mut stranger = TcpStream::connect(relay.address).expect("connect");
    let _ = stranger.write_all(&wire::encode_phase(&PhaseReport { rank: 5, changes: 0, phase: 0, bytes: 0 }));
    drop(stranger);
    refused(1);
    // Another run's secret.
    assert!(dial(relay.address, &Secret::generate().expect("secret")).is_err());
    refused(2);
    // The run's secret, but a rank that runs elsewhere; and a frame only rank 0 takes.
    for (count, frame) in [3, 4].into_iter().zip([
        { let mut f = Vec::new(); wire::encode(&RankSample { rank: 1, ..RankSample::default() }, &mut f); f },
        wire::encode_gone(5).to_vec(),
    ]) {
        let mut liar = crate::collector::tests::admitted(relay.address, &secret);
        liar.write_all(&frame).expect("write");
        refused(count);
    }
    assert_eq!(relay.refused(), 4);
    // The host's own rank still gets through, and rank 0 never heard of the others.
    let rank5 = sampler(5, &relay, &secret);
    let seen = events_until(&mut next, |event| matches!(event, CollectorEvent::Sample(s) if s.rank == 5));
    assert!(!seen.iter().any(|e| matches!(e, CollectorEvent::Sample(s) if s.rank != 5) || matches!(e, CollectorEvent::Closed { rank: Some(_), .. })), "{seen:?}");
    drop(rank5);
    drop(relay);
    assert_eq!(collector.refused(), 0, "the relay's refusals are its own: rank 0's collector refused nothing");
}

#[test]
fn a_gone_word_for_a_rank_the_connection_does_not_speak_for_is_refused_by_rank_0() {
    let (collector, secret, mut next) = collector();
    let mut stream = crate::collector::tests::admitted(collector.address, &secret);
    let mut frames = Vec::new();
    wire::encode(&RankSample { rank: 4, ..RankSample::default() }, &mut frames);
    frames.extend_from_slice(&wire::encode_gone(3));
    stream.write_all(&frames).expect("write");
    let seen = events_until(&mut next, |event| matches!(event, CollectorEvent::Refused { .. } | CollectorEvent::Closed { .. }));
    let Some(CollectorEvent::Refused { reason, .. }) = seen.last() else { panic!("{seen:?}") };
    assert!(reason.contains("rank 3") && reason.contains("does not speak for it"), "{reason}");
}

#[test]
fn when_the_relay_goes_rank_0_names_its_leader_and_the_hosts_ranks_learn_it() {
    let (collector, secret, mut next) = collector();
    let relay = start_relay(&collector, &secret, None);
    let (watch5, told5) = watch(Some(plan().describe()));
    let rank5 = SamplerThread::start_watching(5, Arc::new(Probe::new(4, 8)), relay.address, &secret, INTERVAL, Some(watch5)).expect("sampler");
    events_until(&mut next, |event| matches!(event, CollectorEvent::Sample(s) if s.rank == 5));
    // The leader dies: its relay ends at once, without a word for its ranks.
    relay.finish(Duration::ZERO);
    let seen = events_until(&mut next, |event| matches!(event, CollectorEvent::Closed { .. }));
    assert!(matches!(seen.last(), Some(CollectorEvent::Closed { rank: Some(4), .. })), "rank 0 names the leader: {seen:?}");
    let why = told5.recv_timeout(Duration::from_secs(10)).expect("rank 5 learns its relay is gone");
    assert!(why.contains("rank 4's telemetry relay") && why.contains("the relay's rank died"), "{why}");
    drop(rank5);
}

#[test]
fn when_rank_0_goes_the_relay_tells_its_rank_and_closes_the_hosts_connections() {
    let (collector, secret, mut next) = collector();
    let (leader_watch, told_leader) = watch(None);
    let relay = start_relay(&collector, &secret, Some(leader_watch));
    let (watch5, told5) = watch(Some(plan().describe()));
    let rank5 = SamplerThread::start_watching(5, Arc::new(Probe::new(4, 8)), relay.address, &secret, INTERVAL, Some(watch5)).expect("sampler");
    events_until(&mut next, |event| matches!(event, CollectorEvent::Sample(s) if s.rank == 5));
    drop(collector);
    let why = told_leader.recv_timeout(Duration::from_secs(10)).expect("the relay's rank learns rank 0 is gone");
    assert!(why.contains("rank 0 has ended"), "{why}");
    let why = told5.recv_timeout(Duration::from_secs(10)).expect("rank 5 learns it through its relay");
    assert!(why.contains("rank 4's telemetry relay"), "{why}");
    drop(rank5);
    drop(relay);
}

#[test]
fn relays_forward_every_interval_and_every_other_beyond_2048_of_them() {
    let interval = Duration::from_millis(100);
    assert_eq!(Plan::forward_every(interval, 1), interval);
    assert_eq!(Plan::forward_every(interval, 2048), interval);
    assert_eq!(Plan::forward_every(interval, 4095), interval * 2, "4096 p5 hosts");
    assert_eq!(Plan::forward_every(interval, 16383), interval * 8);
    assert_eq!(Plan::forward_every(interval, 65535), Duration::from_secs(1), "never more than a second");
    assert_eq!(Plan::forward_every(Duration::from_secs(5), 4095), Duration::from_secs(5), "never less than the interval");
}
