//! `--json` is a stream a program can rely on: every line parses, every sample names its rank and
//! channel with bandwidth and latency fields, and the per-size results are exactly the final summary's.

mod common;

use common::{efatop, serial};
use serde_json::Value;

#[test]
fn json_lines_carry_samples_results_and_a_matching_summary() {
    let _one = serial();
    let run = efatop(&[
        "run", "--ranks", "3", "write", "--provider", "shm", "--json", "--interval", "20ms", "--min-size", "64K",
        "--max-size", "4M", "--iters", "30", "--configs", "single,roundrobin",
    ]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let lines: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let of_type = |kind: &'static str| lines.iter().filter(move |l| l["type"] == kind).map(|l| &l["data"]);
    assert_eq!(lines.first().map(|l| &l["type"]), Some(&Value::from("run")), "the stream opens with the run");
    assert_eq!(lines.last().map(|l| &l["type"]), Some(&Value::from("summary")), "and closes with the summary");

    let samples: Vec<&Value> = of_type("sample").collect();
    assert!(!samples.is_empty(), "no samples in {} lines", lines.len());
    let mut ranks_seen = std::collections::BTreeSet::new();
    for sample in &samples {
        for field in ["rank", "channel", "gbps", "ops", "in_flight", "bytes", "drops"] {
            assert!(sample[field].is_number(), "{field} missing from {sample}");
        }
        for field in ["lat_p50_us", "lat_p99_us", "lat_max_us"] {
            assert!(sample[field].is_number() || sample[field].is_null(), "{field} missing from {sample}");
        }
        // Only ranks with GPU-side figures (proxy, ipc) add `queue`/`nvlink`; the unit tests in jsonl.rs cover them.
        assert!(sample.get("queue").is_none() && sample.get("nvlink").is_none(), "a write run has no GPU figures: {sample}");
        ranks_seen.insert(sample["rank"].as_u64().expect("rank"));
    }
    assert_eq!(ranks_seen.into_iter().collect::<Vec<_>>(), vec![0, 1, 2], "every rank streams telemetry");
    assert!(
        samples.iter().any(|s| s["gbps"].as_f64().unwrap_or(0.0) > 0.0 && s["lat_p50_us"].is_number()),
        "some interval saw traffic with latency"
    );

    let results: Vec<&Value> = of_type("result").collect();
    let summary = of_type("summary").next().expect("summary");
    let measurements = summary["measurements"].as_array().expect("measurements");
    assert_eq!(results.len(), 2 * 7, "2 configurations × 7 sizes");
    assert_eq!(results.len(), measurements.len());
    for (line, final_row) in results.iter().zip(measurements) {
        assert_eq!(*line, final_row, "a per-size result differs from the final table");
        assert_eq!(line["verified"], true);
    }
    assert_eq!(of_type("step").count(), results.len());
    assert!(!run.stdout.contains("| Size |"), "no table in JSON mode");
}

#[test]
fn without_telemetry_json_still_reports_results() {
    let _one = serial();
    let run = efatop(&["run", "--ranks", "2", "sendrecv", "--provider", "tcp", "--json", "--no-telemetry", "--max-size", "16K"]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert!(!run.stdout.contains("\"sample\""), "no samples when telemetry is off");
    assert_eq!(run.stdout.lines().filter(|l| l.contains("\"type\":\"result\"")).count(), 3);
}
