//! `efatop sweep` on the emulated cluster (scripts/emulate-cluster: 4 nodes × 4 NICs at 1 Gbit/s): one NIC of
//! one node re-shaped to 250 Mbit/s (both ends of its veth) is named, by rank and NIC, with exit code 3;
//! every NIC of a node slowed names the node once; nothing re-shaped passes with exit code 0. Each run's wall
//! time and verdict are printed (`cargo test --test sweep -- --nocapture`), never asserted.
//! Needs root for namespaces and tc; where they cannot be made the test says so and skips. Every test holds
//! the cluster lock (/tmp/efatop-cluster.lock) while its cluster is up.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Cluster, cluster_script, efatop_path, run_program, serial};
use serde_json::Value;

const NODES: [&str; 4] = ["efatop-node0", "efatop-node1", "efatop-node2", "efatop-node3"];

/// Re-shapes `_cluster` (which must be up): `shape --node N --nic K --rate R`, `slow --node N --rate R`.
fn reshape(_cluster: &Cluster, args: &[&str]) {
    let output = Command::new(cluster_script()).args(args).output().expect("emulate-cluster");
    assert!(output.status.success(), "emulate-cluster {args:?}: {}", String::from_utf8_lossy(&output.stderr));
}

/// The judged command, with a smaller size and fewer iterations than the defaults (64M, 20) so that a
/// round with the 250 Mbit/s NIC takes seconds, not a minute. Not much smaller: a TCP retransmission stalls
/// a write by a few hundred ms, which 4 writes of 16M could not absorb (a healthy pair then read as a link
/// at 0.65 Gbps, twice); 6 of 32M do.
fn sweep(label: &str) -> (common::Run, Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("sweep.json");
    let netns = NODES.join(",");
    // A round waits for its slowest rail: with a whole node at 250 Mbit/s every round does; 2 minutes, the
    // other tests' limit, is not enough for 4 rounds of it.
    let efatop = |args: &[&str]| run_program(efatop_path().to_str().expect("utf-8"), args, Duration::from_mins(6));
    let run = efatop(&[
        "run", "--ranks", "4", "--netns", &netns, "sweep", "--provider", "tcp", "--channels", "all", "--json", "--size",
        "32M", "--iters", "6", "--warmup", "1", "--out", out.to_str().expect("utf-8"),
    ]);
    let last = run.stdout.lines().last().unwrap_or_default();
    let line: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {last}\n{}", run.stderr));
    assert_eq!(line["type"], "verdict", "the last line is the verdict: {last}");
    let verdict = line["data"].clone();
    println!("sweep, {label}: exit {:?} after {:.1} s\n{last}", run.code, run.elapsed.as_secs_f64());
    // The results file keeps every round (3 of the tournament, then any retests) and the same verdict.
    let results: Value = serde_json::from_str(&std::fs::read_to_string(&out).expect("results")).expect("json");
    let rounds = results["sweep"]["rounds"].as_array().expect("rounds");
    assert!(rounds.len() >= 3, "{}", results["sweep"]);
    // 2 pairs × 4 rails × both directions in every round of the tournament.
    assert!(rounds.iter().take(3).all(|r| r["figures"].as_array().map(Vec::len) == Some(2 * 4 * 2)), "{}", results["sweep"]);
    assert_eq!(results["sweep"]["verdict"], verdict);
    assert_eq!(results["status"]["state"], "complete");
    // Every stdout line before the verdict is JSON too, and every round was told as it finished.
    let told = run.stdout.lines().filter(|l| l.contains(r#""type":"sweep_round""#)).count();
    assert_eq!(told, rounds.len());
    (run, verdict)
}

fn suspects(verdict: &Value) -> &Vec<Value> {
    verdict["suspects"].as_array().expect("suspects")
}

#[test]
fn a_healthy_cluster_passes_with_no_suspects() {
    let _one = serial();
    let Some(_cluster) = Cluster::up() else { return };
    let (run, verdict) = sweep("nothing re-shaped");
    assert_eq!(run.code, Some(0), "{verdict}\n{}", run.stderr);
    assert!(suspects(&verdict).is_empty(), "{verdict}");
    assert_eq!(verdict["checked"], serde_json::json!({ "nodes": 4, "nics": 16 }));
}

#[test]
fn one_nic_shaped_down_is_named_by_rank_and_nic() {
    let _one = serial();
    let Some(cluster) = Cluster::up() else { return };
    reshape(&cluster, &["shape", "--node", "2", "--nic", "1", "--rate", "250mbit"]);
    let (run, verdict) = sweep("efatop-node2 efa1 at 250 Mbit/s");
    assert_eq!(run.code, Some(3), "{verdict}\n{}", run.stderr);
    let found = suspects(&verdict);
    assert_eq!(found.len(), 1, "exactly the shaped NIC: {verdict}");
    let s = &found[0];
    assert_eq!((&s["scope"], &s["rank"], &s["nic"], &s["rail"]), (&"nic".into(), &2.into(), &"efa1".into(), &1.into()), "{s}");
    assert!(s["host"].as_str().is_some_and(|h| h.ends_with(":efatop-node2")), "{s}");
    // Slow with every peer it met (all three), at about the shaped rate, against the healthy median.
    assert_eq!(s["peers_tried"], serde_json::json!([0, 1, 3]), "{s}");
    let (measured, median) = (s["measured_gbps"].as_f64().expect("measured"), s["median_gbps"].as_f64().expect("median"));
    assert!(measured < 0.27 && median > 2.0 * measured, "{s}");
    for key in ["gpu", "pci", "why"] {
        assert!(s.get(key).is_some(), "{key} missing: {s}");
    }
    assert_eq!(verdict["checked"], serde_json::json!({ "nodes": 4, "nics": 16 }));
}

#[test]
fn a_slow_node_is_named_once_not_as_four_nics() {
    let _one = serial();
    let Some(cluster) = Cluster::up() else { return };
    reshape(&cluster, &["slow", "--node", "1", "--rate", "250mbit"]);
    let (run, verdict) = sweep("efatop-node1 at 250 Mbit/s on every NIC");
    assert_eq!(run.code, Some(3), "{verdict}\n{}", run.stderr);
    let found = suspects(&verdict);
    assert_eq!(found.len(), 1, "the node once: {verdict}");
    let s = &found[0];
    assert_eq!((&s["scope"], &s["rank"], &s["nic"]), (&"node".into(), &1.into(), &Value::Null), "{s}");
    assert!(s["host"].as_str().is_some_and(|h| h.ends_with(":efatop-node1")), "{s}");
    assert_eq!(s["nics"], serde_json::json!(["efa0", "efa1", "efa2", "efa3"]), "{s}");
}
