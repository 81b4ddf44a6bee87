//! A short run as a viewer gets it (for the tests of `attach` and `replay`): a two-rank `write` of
//! SinglePin at 4K and 8K on one host, its telemetry every 100 ms, then its end.

use std::time::Duration;

use efatop_proto::results::{LatencySummary, Measurement, RunMetadata, RunResults};
use efatop_proto::telemetry::{ChannelSample, IntervalHistogram, RankSample};

use efatop_proto::events::CollectorEvent;
use efatop_proto::events::{ConsumerEvent, RunInfo, RunStart};

const INTERVAL: Duration = Duration::from_millis(100);

pub fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// The run's start, as rank 0 tells it.
pub fn start() -> ConsumerEvent {
    let info = RunInfo {
        experiment: efatop_proto::Experiment::Write,
        provider_stack: "shm".into(),
        ranks: 2,
        hosts: vec!["hosta".into(), "hosta".into()],
        channels: 1,
        link_gbps: Some(100.0),
        memory: "host".into(),
        configs: vec![efatop_proto::column::Column::write(efatop_proto::column::Layout::Single, efatop_proto::column::Memory::Host)],
        sizes: vec![4096, 8192],
        placements: Vec::new(),
    };
    let metadata = RunMetadata { experiment: efatop_proto::Experiment::Write, ranks: 2, hang_timeout_s: 60, ..RunMetadata::default() };
    let results = RunResults { configs: vec![efatop_proto::column::Column::write(efatop_proto::column::Layout::Single, efatop_proto::column::Memory::Host)], metadata, ..RunResults::default() };
    let nics = vec![vec!["shm0".to_string()], vec!["shm1".to_string()]];
    ConsumerEvent::Run(Box::new(RunStart { info, nics, results, interval_ms: 100, ..RunStart::default() }))
}

/// Both ranks' intervals `seq`, each moving `gbps`.
pub fn telemetry(seq: u64, gbps: f64) -> ConsumerEvent {
    let interval_ns = INTERVAL.as_nanos() as u64;
    let bytes = (gbps * 1e9 / 8.0 * INTERVAL.as_secs_f64()) as u64;
    let samples = (0..2)
        .map(|rank| {
            let latency = IntervalHistogram { buckets: vec![(12, 40)].into() };
            let channel = ChannelSample { channel: 0, bytes, ops: 40, in_flight: 4, latency };
            CollectorEvent::Sample(Box::new(RankSample { rank, seq, interval_ns, channels: vec![channel], ..RankSample::default() }))
        })
        .collect();
    ConsumerEvent::Telemetry(samples)
}

pub fn step(size: u64) -> ConsumerEvent {
    ConsumerEvent::Step { config: efatop_proto::column::Column::write(efatop_proto::column::Layout::Single, efatop_proto::column::Memory::Host), size }
}

pub fn measured(size: u64, gbps: f64) -> ConsumerEvent {
    let config = efatop_proto::column::Column::write(efatop_proto::column::Layout::Single, efatop_proto::column::Memory::Host);
    let latency = LatencySummary { mean_us: 3.0, p50_us: 2.5, p99_us: 7.5, max_us: 9.0 };
    ConsumerEvent::Measured(Box::new(Measurement {
        busbw_percent: Some(gbps),
        registration: Some("host".into()),
        ..Measurement::plain(config, size, gbps, latency, 10)
    }))
}

/// The whole run, as a recording holds it: its start; 4K at 40 Gbps, measured 38.5; 8K at 90 Gbps,
/// measured 89.5; the end.
pub fn recording() -> Vec<(Duration, ConsumerEvent)> {
    let mut events = vec![(ms(0), start()), (ms(100), step(4096))];
    events.extend((1..=4).map(|seq| (ms(100 * seq + 50), telemetry(seq, 40.0))));
    events.push((ms(500), measured(4096, 38.5)));
    events.push((ms(600), step(8192)));
    events.extend((6..=9).map(|seq| (ms(100 * seq + 50), telemetry(seq, 90.0))));
    events.push((ms(1000), measured(8192, 89.5)));
    events.push((ms(1100), ConsumerEvent::Finished { error: None }));
    events
}
