//! `--json` is a stream a program can rely on: every line parses, every sample names its rank and
//! channel with bandwidth and latency fields, and the per-size results are exactly the final summary's.

mod common;

use common::{efatop, json_lines, serial, JsonLine};
use efatop_proto::output::Sample;
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
fn without_telemetry_json_still_reports_results() {
    let _one = serial();
    let run = efatop(&["run", "--ranks", "2", "sendrecv", "--provider", "tcp", "--json", "--no-telemetry", "--max-size", "16K"]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let lines = json_lines(&run.stdout);
    assert!(!lines.iter().any(|l| matches!(l, JsonLine::Sample(_))), "no samples when telemetry is off");
    assert_eq!(lines.iter().filter(|l| matches!(l, JsonLine::Result(_))).count(), 3);
}
