//! `--json`: a second printer over the same events, one JSON object per line on stdout, each an
//! [`efatop_proto::output::Line`] (`run`, `sample`, `pair`, `step`, `result`, `pair_matrix`, `warning`,
//! `summary`, ...); a sweep adds `sweep` (its settings), `sweep_round` (each round's figures) and, last,
//! `verdict`. docs/output.md documents the fields; `tests/json.rs` parses them back.

use std::io::Write;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use efatop_proto::output::{Begin, ChannelFigures, Dropped, Line, NvlinkFigures, Pair, QueueFigures, RAIL_LINES_ABOVE, RailLines, Sample, Step, Warning};
use efatop_proto::results::{RunMetadata, RunResults};
use efatop_proto::telemetry::RankSample;

use efatop_proto::events::ConsumerEvent;
use efatop_proto::events::CollectorEvent;

thread_local! {
    /// Lines not yet written: an event's lines leave in one write (stdout alone would write each line as
    /// it ends, a system call per line, which at 1024 hosts × 32 channels is what falls behind the run).
    static PENDING: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Lines kept for one write at most: an event of a large run (a telemetry batch after a stall) goes out
/// in several writes rather than holding hundreds of MiB.
const PENDING_MAX: usize = 4 << 20;

/// One line, kept until [`flush`].
fn line(line: &Line) {
    let full = PENDING.with_borrow_mut(|pending| {
        let _ = line.write_to(pending);
        pending.len() >= PENDING_MAX
    });
    if full {
        flush();
    }
}

/// Writes the lines kept so far, in one write.
pub fn flush() {
    PENDING.with_borrow_mut(|pending| {
        if pending.is_empty() {
            return;
        }
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(pending);
        let _ = stdout.flush();
        pending.clear();
        pending.shrink_to(PENDING_MAX);
    });
}

pub fn print_run(metadata: &RunMetadata) {
    line(&Line::Run(Box::new(metadata.clone())));
    flush();
}

pub fn print_summary(results: &RunResults) {
    line(&Line::Summary(Box::new(results.clone())));
    flush();
}

/// A sweep's last line: its verdict (`type` first and the fields in the order docs/sweep.md gives).
pub fn print_verdict(verdict: &efatop_proto::sweep::Verdict) {
    line(&Line::Verdict(Box::new(verdict.clone())));
    flush();
}

/// What a sample turns into: one line per (rank, channel), and for all-to-all runs one per (sender,
/// receiver) too; a sample outside `world` (a rank, channel or peer the run does not have), a `warning`
/// line instead. A run of more channels than [`RAIL_LINES_ABOVE`] gets `rail` lines instead (per host
/// and rail, every interval: [`RailLines`]), unless `--json-samples every` asks for every sample.
#[derive(Clone, Default)]
pub struct SampleLines {
    pub pairs: bool,
    /// The run's world, once known (its start); `None` takes every sample.
    pub world: Option<efatop_proto::telemetry::WorldBounds>,
    /// `--json-samples`.
    pub samples: Samples,
    /// Folding samples into `rail` lines, not printing a line per channel.
    pub rails: Option<Box<RailLines>>,
}

/// `--json-samples`: what a telemetry sample turns into.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Samples {
    /// `sample` lines up to [`RAIL_LINES_ABOVE`] channels, `rail` lines beyond.
    #[default]
    Auto,
    /// A `sample` line per channel whatever the run's size (which a large run's printer may not keep up
    /// with: it then drops, and says so in `dropped` lines).
    Every,
    /// `rail` lines whatever the run's size.
    Rails,
}

impl SampleLines {
    /// The lines of the run `start` describes, as `samples` asks.
    pub fn for_run(start: &efatop_proto::events::RunStart, samples: Samples) -> Self {
        let world = start.world();
        let channels = world.ranks.saturating_mul(world.channels);
        let rails = match samples {
            Samples::Auto => channels > RAIL_LINES_ABOVE,
            Samples::Every => false,
            Samples::Rails => true,
        };
        let interval = Duration::from_millis(start.interval_ms.max(1));
        Self {
            pairs: start.pairs,
            world: Some(world),
            samples,
            rails: rails.then(|| Box::new(RailLines::new(&start.info.hosts, world.channels, interval))),
        }
    }

    /// Said once, after the run's first line, when the samples are folded: what the lines are instead.
    fn note(&self) -> Option<String> {
        let world = self.world?;
        self.rails.as_ref()?;
        let why = match self.samples {
            Samples::Rails => "as asked (--json-samples rails)".to_string(),
            _ => format!(
                "{} ranks × {} channels is more than {RAIL_LINES_ABOVE} channels, a `sample` line each",
                world.ranks, world.channels
            ),
        };
        Some(format!(
            "telemetry is printed as `rail` lines, one per host and rail every interval, not a `sample` line per channel{}: {why}; --json-samples every prints every sample",
            if self.pairs { " nor a `pair` line per sender and receiver" } else { "" }
        ))
    }
}

/// Telemetry batches that may wait for the printer: beyond, it is behind the run, and the oldest go.
/// The collector sends a batch every 10 ms at most, so a large run's printer is at most a few seconds
/// behind (a small run's batches come once per interval: it is never held to less than minutes).
pub const WAITING_BATCHES: usize = 256;
/// Samples that may wait for the printer, whatever the batches (about 90 MiB decoded): 1.6 s of a
/// 1024-host × 8 × 4 run, 0.4 s of a 4096-host one.
pub const WAITING_SAMPLES: u64 = 1 << 17;

/// What the printer did with the telemetry it was given: printed, or dropped because it fell behind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Printed {
    pub samples: u64,
    pub dropped: u64,
}

/// Prints every event until the run is over; `clock` is the time since the run started.
pub fn print_events(events: &Receiver<ConsumerEvent>, clock: impl Fn() -> Duration, lines: &mut SampleLines) {
    print_events_counted(events, clock, lines, |_| {});
}

/// [`print_events`], telling `counted` after each event what was printed and dropped so far.
///
/// The printer never lags behind the run: when more telemetry waits for it than [`WAITING_BATCHES`]
/// batches or [`WAITING_SAMPLES`] samples (stdout cannot take a large run's lines as fast as they come),
/// the oldest waiting telemetry batches are dropped — every other event (steps, results, notes, the end)
/// is kept, in order — and a `dropped` line says how many samples went, and how many in all.
pub fn print_events_counted(events: &Receiver<ConsumerEvent>, clock: impl Fn() -> Duration, lines: &mut SampleLines, mut counted: impl FnMut(Printed)) {
    let mut waiting: std::collections::VecDeque<ConsumerEvent> = std::collections::VecDeque::new();
    let mut printed = Printed::default();
    loop {
        if waiting.is_empty() {
            match events.recv() {
                Ok(event) => waiting.push_back(event),
                Err(_) => return,
            }
        }
        waiting.extend(events.try_iter());
        let (batches, samples) = waiting.iter().filter_map(telemetry_samples).fold((0, 0), |(b, s), n| (b + 1, s + n));
        if batches > WAITING_BATCHES || samples > WAITING_SAMPLES {
            // Keep the newest quarter of what the bounds allow; the rest of the telemetry goes.
            let (mut drop_batches, mut drop_samples) = (batches.saturating_sub(WAITING_BATCHES / 4), samples.saturating_sub(WAITING_SAMPLES / 4));
            let mut dropped = 0;
            waiting.retain(|event| match telemetry_samples(event) {
                Some(n) if drop_batches > 0 || drop_samples > 0 => {
                    drop_batches = drop_batches.saturating_sub(1);
                    drop_samples = drop_samples.saturating_sub(n);
                    dropped += n;
                    false
                }
                _ => true,
            });
            printed.dropped += dropped;
            let t_ms = clock().as_secs_f64() * 1000.0;
            line(&Line::Dropped(Dropped { reason: "the printer fell behind the run".into(), samples: dropped, t_ms, total: printed.dropped }));
            flush();
            counted(printed);
        }
        let Some(event) = waiting.pop_front() else { continue };
        printed.samples += telemetry_samples(&event).unwrap_or(0);
        let ended = print_event(event, clock(), lines);
        counted(printed);
        if ended {
            return;
        }
    }
}

/// The samples in a telemetry batch; `None` for every other event.
fn telemetry_samples(event: &ConsumerEvent) -> Option<u64> {
    match event {
        ConsumerEvent::Telemetry(events) => Some(events.iter().filter(|e| matches!(e, CollectorEvent::Sample(_))).count() as u64),
        _ => None,
    }
}

/// Prints one event that happened `at` after the run started (its lines in one write); says whether it
/// was the run's end.
pub fn print_event(event: ConsumerEvent, at: Duration, lines: &mut SampleLines) -> bool {
    let ended = keep_event(event, at, lines);
    flush();
    ended
}

fn keep_event(event: ConsumerEvent, at: Duration, lines: &mut SampleLines) -> bool {
    let t_ms = at.as_secs_f64() * 1000.0;
    match event {
        ConsumerEvent::Finished { error } => {
            if let Some(rails) = &mut lines.rails {
                rails.flush(&mut |data| line(&Line::Rail(data)));
            }
            if let Some(text) = error {
                line(&Line::error(text));
            }
            return true;
        }
        // A viewer's first event: the line the run's own `--json` starts with.
        ConsumerEvent::Run(start) => {
            *lines = SampleLines::for_run(&start, lines.samples);
            print_run(&start.results.metadata);
            print_note(lines);
        }
        ConsumerEvent::Telemetry(events) => {
            for event in events {
                print_telemetry(event, t_ms, lines);
            }
        }
        ConsumerEvent::Begin { columns, memory } => line(&Line::Begin(Begin { configs: columns, memory })),
        ConsumerEvent::Step { config, size } => line(&Line::Step(Step { config, size })),
        ConsumerEvent::Measured(measurement) => {
            let warnings: Vec<Line> = measurement
                .counters
                .iter()
                .flat_map(|c| &c.warnings)
                .map(|warning| Line::Warning(Warning { counters: Some(warning.clone()), text: warning.message.clone() }))
                .collect();
            line(&Line::Result(measurement));
            for warning in &warnings {
                line(warning);
            }
        }
        ConsumerEvent::PairMatrix(matrix) => line(&Line::PairMatrix(matrix)),
        ConsumerEvent::Note(text) => line(&Line::note(text)),
        ConsumerEvent::SweepBegin(setup) => line(&Line::Sweep(setup)),
        ConsumerEvent::SweepRound(round) => line(&Line::SweepRound(round)),
        // The verdict is the run's last line, after the summary (`print_verdict`).
        // Only a dashboard shows liveness; JSON lines carry the samples it is kept from.
        ConsumerEvent::SweepVerdict(_) | ConsumerEvent::Liveness(_) => {}
    }
    false
}

/// The note that says the samples are folded into `rail` lines, when they are (after the run's first line).
pub fn print_note(lines: &SampleLines) {
    if let Some(note) = lines.note() {
        line(&Line::note(note));
        flush();
    }
}

fn print_telemetry(event: CollectorEvent, t_ms: f64, lines: &mut SampleLines) {
    match event {
        CollectorEvent::Sample(sample) => {
            if let Some(outside) = lines.world.and_then(|world| sample.outside(world)) {
                line(&Line::warning(format!("telemetry sample refused: {outside}")));
                return;
            }
            if let Some(rails) = &mut lines.rails {
                rails.add(t_ms, &sample, |data| line(&Line::Rail(data)));
                return;
            }
            if lines.pairs {
                // All-to-all ranks count each peer where its data lands: the sample's rank is the receiver.
                for peer in sample.peers.iter().filter(|p| p.peer != sample.rank) {
                    let Some(gbps) = peer.landing_gbps() else { continue };
                    line(&Line::Pair(Pair {
                        t_ms,
                        sender: peer.peer,
                        receiver: sample.rank,
                        landings: peer.ops,
                        bytes: peer.bytes,
                        gbps,
                        lat_p50_us: peer.latency.quantile_us(0.50),
                        lat_p99_us: peer.latency.quantile_us(0.99),
                    }));
                }
            }
            for data in sample_lines(&sample, t_ms) {
                line(&Line::Sample(data));
            }
        }
        CollectorEvent::Malformed { from, reason } => {
            line(&Line::warning(format!("telemetry frame from {from} rejected: {reason}")));
        }
        CollectorEvent::Refused { from, reason, total } => {
            line(&Line::warning(format!("telemetry connection from {from} refused: {reason} ({total} refused so far)")));
        }
        // Only a served or recorded `efatop monitor` has node reads; a benchmark's ranks never send them.
        CollectorEvent::Node(sample) => line(&Line::Node(sample)),
        CollectorEvent::Closed { .. } | CollectorEvent::Phase(_) => {}
    }
}

/// A rank's interval as `sample` lines' data: one per channel. The rank's GPU figures, when it has any
/// (`queue`: the proxy's request queue; `nvlink`: what its GPU wrote into peers' GPUs), ride on its first
/// line only, so that summing lines never counts them twice; a rank with GPU figures and no channel gets
/// one line with a null `channel` to carry them.
fn sample_lines(sample: &RankSample, t_ms: f64) -> impl Iterator<Item = Sample> + '_ {
    let interval_ns = sample.interval_ns;
    let line = move |channel: Option<ChannelFigures>| Sample {
        t_ms,
        rank: sample.rank,
        seq: sample.seq,
        interval_ms: interval_ns as f64 / 1e6,
        drops: sample.drops,
        channel,
        queue: None,
        nvlink: None,
    };
    let channels = sample.channels.iter().map(move |channel| {
        let rates = channel.rates(interval_ns);
        Some(ChannelFigures {
            channel: channel.channel,
            bytes: channel.bytes,
            gbps: rates.gbps,
            ops: channel.ops,
            in_flight: channel.in_flight,
            lat_p50_us: rates.lat_p50_us,
            lat_p99_us: rates.lat_p99_us,
            lat_max_us: rates.lat_max_us,
        })
    });
    let gpu_figures = sample.queue.is_some() || !sample.nvlink.is_empty();
    // No channel to carry the GPU figures: one line of their own.
    let carrier = (gpu_figures && sample.channels.is_empty()).then_some(None);
    channels.chain(carrier).enumerate().map(move |(at, channel)| {
        let mut data = line(channel);
        if at == 0 {
            data.queue = sample.queue.as_ref().map(|queue| QueueFigures {
                capacity: queue.capacity,
                depth: queue.depth,
                held: queue.held,
                quiet_calls: queue.quiet_calls,
                quiet_calls_per_s: queue.quiet_calls_per_s(interval_ns),
                requests: queue.requests,
                requests_per_s: queue.requests_per_s(interval_ns),
            });
            data.nvlink = (!sample.nvlink.is_empty()).then(|| {
                sample
                    .nvlink
                    .iter()
                    .map(|pair| NvlinkFigures {
                        bytes: pair.bytes,
                        gbytes_per_s: pair.gbytes_per_s(interval_ns),
                        gpu: pair.gpu,
                        peak_gbytes_per_s: pair.peak_gbytes_per_s,
                        peer: pair.peer,
                        peer_gpu: pair.peer_gpu,
                    })
                    .collect()
            });
        }
        data
    })
}

#[cfg(test)]
mod tests {
    use efatop_proto::telemetry::{ChannelSample, NvlinkSample, QueueSample, RankSample};
    use serde_json::json;

    /// A printer that falls behind drops the oldest telemetry, counted, and keeps every other event.
    #[test]
    fn a_printer_behind_the_run_drops_old_telemetry_and_keeps_the_rest() {
        use super::{print_events_counted, Printed, SampleLines, WAITING_BATCHES};
        use efatop_proto::events::CollectorEvent;
        use efatop_proto::events::ConsumerEvent;
        let (tx, rx) = std::sync::mpsc::channel();
        let batch = || ConsumerEvent::Telemetry(vec![CollectorEvent::Sample(Box::new(RankSample { rank: 1, ..RankSample::default() }))]);
        for _ in 0..WAITING_BATCHES {
            tx.send(batch()).expect("send");
        }
        tx.send(ConsumerEvent::Note("kept".into())).expect("send");
        for _ in 0..WAITING_BATCHES {
            tx.send(batch()).expect("send");
        }
        tx.send(ConsumerEvent::Finished { error: None }).expect("send");
        let mut last = Printed::default();
        print_events_counted(&rx, std::time::Duration::default, &mut SampleLines::default(), |printed| last = printed);
        let offered = 2 * WAITING_BATCHES as u64;
        assert_eq!(last.samples + last.dropped, offered, "{last:?}");
        assert!(last.dropped >= offered - WAITING_BATCHES as u64 / 4 - 1, "{last:?}");
        assert!(last.samples > 0, "the newest are printed");

        // Keeping up: nothing dropped.
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..8 {
            tx.send(batch()).expect("send");
        }
        drop(tx);
        print_events_counted(&rx, std::time::Duration::default, &mut SampleLines::default(), |printed| last = printed);
        assert_eq!(last, Printed { samples: 8, dropped: 0 });
    }

    /// The `sample` lines' data of `sample`, as their JSON has it.
    fn sample_lines(sample: &RankSample, t_ms: f64) -> Vec<serde_json::Value> {
        super::sample_lines(sample, t_ms).map(|data| serde_json::to_value(data).expect("a sample line")).collect()
    }

    fn plain() -> RankSample {
        RankSample {
            rank: 2,
            seq: 7,
            interval_ns: 100_000_000,
            drops: 1,
            channels: vec![
                ChannelSample { channel: 0, bytes: 1_250_000_000, ops: 10, in_flight: 2, ..ChannelSample::default() },
                ChannelSample { channel: 1, ..ChannelSample::default() },
            ],
            ..RankSample::default()
        }
    }

    #[test]
    fn samples_without_gpu_figures_have_exactly_the_channel_fields() {
        let lines = sample_lines(&plain(), 12.5);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["gbps"], json!(100.0));
        for line in &lines {
            let mut keys: Vec<&str> = line.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
            keys.sort_unstable();
            assert_eq!(
                keys,
                [
                    "bytes", "channel", "drops", "gbps", "in_flight", "interval_ms", "lat_max_us", "lat_p50_us", "lat_p99_us",
                    "ops", "rank", "seq", "t_ms"
                ]
            );
        }
    }

    #[test]
    fn gpu_figures_ride_on_the_first_line_of_the_rank() {
        let sample = RankSample {
            queue: Some(QueueSample { depth: 412, capacity: 1024, requests: 538, quiet_calls: 20, held: 48 }),
            nvlink: vec![
                NvlinkSample { peer: 3, gpu: 2, peer_gpu: 3, bytes: 37_120_000_000, peak_gbytes_per_s: Some(450.0) },
                NvlinkSample { peer: 0, gpu: 2, peer_gpu: 0, bytes: 0, peak_gbytes_per_s: None },
            ],
            ..plain()
        };
        let lines = sample_lines(&sample, 12.5);
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0]["queue"],
            json!({
                "depth": 412, "capacity": 1024, "requests": 538, "requests_per_s": 5380.0, "quiet_calls": 20,
                "quiet_calls_per_s": 200.0, "held": 48
            })
        );
        assert_eq!(
            lines[0]["nvlink"],
            json!([
                {"peer": 3, "gpu": 2, "peer_gpu": 3, "bytes": 37_120_000_000_u64, "gbytes_per_s": 371.2, "peak_gbytes_per_s": 450.0},
                {"peer": 0, "gpu": 2, "peer_gpu": 0, "bytes": 0, "gbytes_per_s": 0.0, "peak_gbytes_per_s": null},
            ])
        );
        assert_eq!(lines[0]["channel"], json!(0));
        assert!(lines[1].get("queue").is_none() && lines[1].get("nvlink").is_none(), "only once per interval: {}", lines[1]);

        // Only NVLink, and no channel to carry it: a line of its own.
        let alone = RankSample { channels: Vec::new(), queue: None, ..sample };
        let lines = sample_lines(&alone, 12.5);
        assert_eq!(lines.len(), 1);
        assert_eq!((&lines[0]["rank"], &lines[0]["channel"]), (&json!(2), &json!(null)));
        assert!(lines[0].get("queue").is_none());
        assert_eq!(lines[0]["nvlink"].as_array().map(Vec::len), Some(2));
        assert!(sample_lines(&RankSample { channels: Vec::new(), ..plain() }, 0.0).is_empty());
    }

    /// With the run's world known, a sample naming a rank, channel or peer outside it is one `warning`
    /// line, not a forged `sample` line.
    #[test]
    fn a_sample_outside_the_world_is_a_warning_not_a_sample() {
        use super::{print_telemetry, SampleLines, PENDING};
        use efatop_proto::output::Line;
        use efatop_proto::events::CollectorEvent;
        let lines = SampleLines { pairs: true, world: Some(efatop_proto::telemetry::WorldBounds { ranks: 3, channels: 2 }), ..SampleLines::default() };
        let printed = |sample: RankSample| {
            PENDING.with_borrow_mut(Vec::clear);
            print_telemetry(CollectorEvent::Sample(Box::new(sample)), 1.0, &mut lines.clone());
            String::from_utf8(PENDING.with_borrow_mut(std::mem::take)).expect("UTF-8")
        };
        for (forged, why) in [
            (RankSample { rank: u32::MAX, ..plain() }, "rank 4294967295 is outside the run's 3 ranks"),
            (RankSample { channels: vec![ChannelSample { channel: 2, ..ChannelSample::default() }], ..plain() }, "channel 2 is outside"),
        ] {
            let text = printed(forged);
            assert_eq!(text.lines().count(), 1, "{text}");
            assert!(matches!(<Line>::parse(text.trim_end()), Ok(Line::Warning(warning)) if warning.text.contains(why)), "{text}");
        }
        assert!(printed(plain()).lines().all(|line| matches!(<Line>::parse(line), Ok(Line::Sample(_)))));
    }
}
