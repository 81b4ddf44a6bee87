//! `--json`: a second printer over the same events, one JSON object per line on stdout:
//! `{"type": "run" | "sample" | "pair" | "step" | "result" | "pair_matrix" | "warning" | "summary", "data": {...}}`.
//! README.md documents the fields; `tests/json.rs` parses them back.

use std::io::Write;
use std::sync::mpsc::Receiver;
use std::time::Instant;

use efatop_experiments::results::{RunMetadata, RunResults};
use serde_json::{Value, json};

use crate::output::ConsumerEvent;
use crate::telemetry::CollectorEvent;

fn line(kind: &str, data: &Value) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", json!({ "type": kind, "data": data }));
    let _ = stdout.flush();
}

pub fn print_run(metadata: &RunMetadata) {
    line("run", &serde_json::to_value(metadata).unwrap_or(Value::Null));
}

pub fn print_summary(results: &RunResults) {
    line("summary", &serde_json::to_value(results).unwrap_or(Value::Null));
}

/// What a sample turns into: one line per (rank, channel), and for all-to-all runs one per (sender,
/// receiver) too.
#[derive(Clone, Copy)]
pub struct SampleLines {
    pub pairs: bool,
}

/// Prints every event until the run is over.
pub fn print_events(events: &Receiver<ConsumerEvent>, started: Instant, lines: SampleLines) {
    while let Ok(event) = events.recv() {
        if let ConsumerEvent::Finished { error } = &event {
            if let Some(text) = error {
                line("error", &json!({ "text": text }));
            }
            return;
        }
        print_event(event, started, lines);
    }
}

fn print_event(event: ConsumerEvent, started: Instant, lines: SampleLines) {
    match event {
        ConsumerEvent::Telemetry(events) => {
            for event in events {
                print_telemetry(event, started, lines);
            }
        }
        ConsumerEvent::Begin { columns, memory } => line("begin", &json!({ "configs": columns, "memory": memory })),
        ConsumerEvent::Step { config, size } => line("step", &json!({ "config": config, "size": size })),
        ConsumerEvent::Measured(measurement) => line("result", &serde_json::to_value(&*measurement).unwrap_or(Value::Null)),
        ConsumerEvent::PairMatrix(matrix) => line("pair_matrix", &serde_json::to_value(&*matrix).unwrap_or(Value::Null)),
        ConsumerEvent::Note(text) => line("note", &json!({ "text": text })),
        ConsumerEvent::Finished { .. } => {}
    }
}

fn print_telemetry(event: CollectorEvent, started: Instant, lines: SampleLines) {
    match event {
        CollectorEvent::Sample(sample) => {
            if lines.pairs {
                let t_ms = started.elapsed().as_secs_f64() * 1000.0;
                // All-to-all ranks count each peer where its data lands: the sample's rank is the receiver.
                for peer in sample.peers.iter().filter(|p| p.peer != sample.rank) {
                    let Some(gbps) = peer.landing_gbps() else { continue };
                    line(
                        "pair",
                        &json!({
                            "t_ms": t_ms,
                            "sender": peer.peer,
                            "receiver": sample.rank,
                            "landings": peer.ops,
                            "bytes": peer.bytes,
                            "gbps": gbps,
                            "lat_p50_us": peer.latency.quantile_us(0.50),
                            "lat_p99_us": peer.latency.quantile_us(0.99),
                        }),
                    );
                }
            }
            let t_ms = started.elapsed().as_secs_f64() * 1000.0;
            for channel in &sample.channels {
                line(
                    "sample",
                    &json!({
                        "t_ms": t_ms,
                        "rank": sample.rank,
                        "seq": sample.seq,
                        "channel": channel.channel,
                        "interval_ms": sample.interval_ns as f64 / 1e6,
                        "bytes": channel.bytes,
                        "gbps": efatop_experiments::telemetry::RankSample::gbps(channel.bytes, sample.interval_ns),
                        "ops": channel.ops,
                        "in_flight": channel.in_flight,
                        "lat_p50_us": channel.latency.quantile_us(0.50),
                        "lat_p99_us": channel.latency.quantile_us(0.99),
                        "lat_max_us": channel.latency.max_us(),
                        "drops": sample.drops,
                    }),
                );
            }
        }
        CollectorEvent::Malformed { from, reason } => {
            line("warning", &json!({ "text": format!("telemetry frame from {from} rejected: {reason}") }));
        }
        CollectorEvent::Closed { .. } | CollectorEvent::Node(_) => {}
    }
}
