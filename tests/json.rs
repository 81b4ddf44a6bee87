//! `--json` is a stream a program can rely on: every line parses, every sample names its rank and
//! channel with bandwidth and latency fields, and the per-size results are exactly the final summary's.

mod common;

use common::{efatop, serial};
use efatop_testkit::{json_lines, JsonLine};
use efatop_proto::output::{Rail, Sample};
use efatop_proto::results::Measurement;

#[test]
fn json_lines_carry_samples_results_and_a_matching_summary() {
    let _one = serial();
    let run = efatop(&[
        "run", "--ranks", "3", "write", "--provider", "shm", "--json", "--interval", "20ms", "--min-size", "64K",
        "--max-size", "4M", "--iters", "30", "--configs", "single,roundrobin",
    ]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let lines = json_lines(&run.stdout);
    assert!(matches!(lines.first(), Some(JsonLine::Run(_))), "the stream opens with the run");
    assert!(matches!(lines.last(), Some(JsonLine::Summary(_))), "and closes with the summary");

    let samples: Vec<&Sample> = lines.iter().filter_map(|l| if let JsonLine::Sample(s) = l { Some(s) } else { None }).collect();
    assert!(!samples.is_empty(), "no samples in {} lines", lines.len());
    let mut ranks_seen = std::collections::BTreeSet::new();
    for sample in &samples {
        // Every sample names its channel, with its bandwidth, operations, bytes and latencies (null when none).
        assert!(sample.channel.is_some(), "a channel missing from {sample:?}");
        // Only ranks with GPU-side figures (proxy, ipc) add `queue`/`nvlink`; the unit tests in jsonl.rs cover them.
        assert!(sample.queue.is_none() && sample.nvlink.is_none(), "a write run has no GPU figures: {sample:?}");
        ranks_seen.insert(sample.rank);
    }
    assert_eq!(ranks_seen.into_iter().collect::<Vec<_>>(), vec![0, 1, 2], "every rank streams telemetry");
    assert!(
        samples.iter().filter_map(|s| s.channel).any(|c| c.gbps > 0.0 && c.lat_p50_us.is_some()),
        "some interval saw traffic with latency"
    );

    let results: Vec<&Measurement> = lines.iter().filter_map(|l| if let JsonLine::Result(m) = l { Some(&**m) } else { None }).collect();
    let summary = lines.iter().find_map(|l| if let JsonLine::Summary(s) = l { Some(s) } else { None }).expect("summary");
    let measurements = &summary.measurements;
    assert_eq!(results.len(), 2 * 7, "2 configurations × 7 sizes");
    assert_eq!(results.len(), measurements.len());
    for (line, final_row) in results.iter().zip(measurements) {
        assert_eq!(*line, final_row, "a per-size result differs from the final table");
        assert!(line.verified);
    }
    let steps = lines.iter().filter(|l| matches!(l, JsonLine::Step(_))).count();
    assert_eq!(steps, results.len());
    assert!(!run.stdout.contains("| Size |"), "no table in JSON mode");
}

#[test]
fn rails_fold_the_samples_per_host_and_rail_and_the_stream_says_so() {
    let _one = serial();
    let run = efatop(&[
        "run", "--ranks", "2", "write", "--provider", "shm", "--json", "--json-samples", "rails", "--channels", "2", "--configs",
        "multi", "--interval", "20ms", "--min-size", "1M", "--max-size", "4M", "--iters", "200",
    ]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let lines = json_lines(&run.stdout);
    assert!(matches!(lines.first(), Some(JsonLine::Run(_))), "the stream opens with the run");
    // Said at once, right after the run's line: what comes instead of `sample` lines, and why.
    let Some(JsonLine::Note(note)) = lines.get(1) else { panic!("no note after the run line: {:?}", lines.get(1)) };
    assert!(note.text.contains("`rail` lines") && note.text.contains("--json-samples rails"), "{}", note.text);
    assert!(!lines.iter().any(|l| matches!(l, JsonLine::Sample(_))), "no `sample` line when folded into rails");
    let rails: Vec<&Rail> = lines.iter().filter_map(|l| if let JsonLine::Rail(r) = l { Some(r) } else { None }).collect();
    assert!(!rails.is_empty(), "no rail lines in {} lines", lines.len());
    let Some(JsonLine::Run(metadata)) = lines.first() else { unreachable!("checked above") };
    let host = metadata.hosts[0].clone();
    assert!(metadata.hosts.iter().all(|h| *h == host), "both ranks on one host: {:?}", metadata.hosts);
    for rail in &rails {
        // Both ranks on this machine: one host, rails 0 and 1, an interval of 20 ms on rank 0's clock.
        assert_eq!(rail.host, host, "{rail:?}");
        assert!(rail.rail < 2, "{rail:?}");
        assert!((rail.interval_ms - 20.0).abs() < 1e-9, "{rail:?}");
        assert!(rail.channels >= 1, "{rail:?}");
        assert!((rail.t_ms / 20.0 - (rail.t_ms / 20.0).round()).abs() < 1e-9, "an interval's end on the grid: {rail:?}");
        assert!((rail.gbps - rail.bytes as f64 * 8.0 / 20e6).abs() < 1e-6, "{rail:?}");
        if let (Some(min), Some(max)) = (rail.gbps_min, rail.gbps_max) {
            assert!(min <= max && rail.slowest_rank < 2, "{rail:?}");
        }
    }
    assert!(rails.iter().any(|r| r.rail == 0) && rails.iter().any(|r| r.rail == 1), "both rails reported");
    assert!(rails.iter().any(|r| r.gbps > 0.0), "some interval carried traffic");
    // Each (rail, interval) once.
    let mut seen = std::collections::BTreeSet::new();
    for rail in &rails {
        assert!(seen.insert((rail.rail, (rail.t_ms * 1000.0) as u64)), "twice: {rail:?}");
    }
    assert!(matches!(lines.last(), Some(JsonLine::Summary(_))), "and closes with the summary");
}

#[test]
fn without_telemetry_json_still_reports_results() {
    let _one = serial();
    let run = efatop(&["run", "--ranks", "2", "sendrecv", "--provider", "tcp", "--json", "--no-telemetry", "--max-size", "16K"]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let lines = json_lines(&run.stdout);
    assert!(!lines.iter().any(|l| matches!(l, JsonLine::Sample(_))), "no samples when telemetry is off");
    assert_eq!(lines.iter().filter(|l| matches!(l, JsonLine::Result(_))).count(), 3);
}
