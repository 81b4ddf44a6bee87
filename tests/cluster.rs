//! The multi-NIC logic on a network that behaves like one: scripts/emulate-cluster builds 4 nodes × 4
//! NICs shaped to R = 1 Gbit/s (half the script's default, so that four busy-polling ranks on a two-core CI machine leave the links, not the CPUs, as the limit), and `efatop run --netns` puts one rank in each. The seed's write table must
//! keep its shape at rate R: Single ≈ R, Multi (split over 4 NICs) ≈ 4R, RoundRobin to 3 peers ≈ 3R.
//! Needs root for namespaces and tc; where they cannot be made the test says so and skips.

mod common;

use std::path::Path;
use std::process::Command;

use common::{efatop, serial};

const RATE_GBPS: f64 = 1.0;
const NODES: [&str; 4] = ["efatop-node0", "efatop-node1", "efatop-node2", "efatop-node3"];

fn script() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/emulate-cluster").display().to_string()
}

struct Cluster;

impl Cluster {
    fn up() -> Option<Self> {
        let output = Command::new(script()).args(["up", "--nodes", "4", "--nics", "4", "--rate", "1gbit"]).output().ok()?;
        if output.status.success() {
            Some(Cluster)
        } else {
            eprintln!(
                "SKIPPED: cannot build the emulated cluster here (needs root, ip netns, tc): {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
            let _ = Command::new(script()).arg("down").output();
            None
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("down").output();
    }
}

#[test]
fn write_table_keeps_the_seed_shape_at_the_shaped_rate() {
    let _one = serial();
    let Some(_cluster) = Cluster::up() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("cluster.json");
    let netns = NODES.join(",");
    let run = efatop(&[
        "run", "--ranks", "4", "--netns", &netns, "write", "--provider", "tcp", "--channels", "all", "--link-gbps", "1",
        "--min-size", "16M", "--max-size", "32M", "--iters", "8", "--warmup", "2", "--out", out.to_str().expect("utf-8"),
    ]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("channels: 4 over 4 NICs (efa0, efa1, efa2, efa3)"), "{}", run.stdout);
    assert!(run.stdout.contains("4 hosts"), "{}", run.stdout);
    assert!(run.stdout.contains("link speed 1 Gbps per channel (from --link-gbps)"), "{}", run.stdout);
    let results: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).expect("results")).expect("json");
    let at_largest = |config: &str| -> f64 {
        results["measurements"]
            .as_array()
            .expect("measurements")
            .iter()
            .find(|m| m["config"] == config && m["size"] == 32u64 << 20)
            .and_then(|m| m["gbps"].as_f64())
            .unwrap_or_else(|| panic!("no {config} at 32M"))
    };
    let single = at_largest("SinglePin");
    let multi = at_largest("MultiPin");
    let round_robin = at_largest("RoundRobinPin");
    println!(
        "emulated 4×4 at R = {RATE_GBPS} Gbit/s, 32M: Single {single:.2} Gbps = {:.2} R; Multi {multi:.2} Gbps = {:.2} R; \
         RoundRobin {round_robin:.2} Gbps = {:.2} R; Multi/Single = {:.2}",
        single / RATE_GBPS,
        multi / RATE_GBPS,
        round_robin / RATE_GBPS,
        multi / single
    );
    assert!(single >= 0.9 * RATE_GBPS, "Single {single:.2} < 0.9 R");
    assert!(multi >= 0.9 * 4.0 * RATE_GBPS, "Multi {multi:.2} < 0.9 × 4R");
    assert!(round_robin >= 0.9 * 3.0 * RATE_GBPS, "RoundRobin {round_robin:.2} < 0.9 × 3R");
    // Nothing is faster than the links allow: the shaping, not loopback, carried the traffic.
    assert!(single <= 1.05 * RATE_GBPS && multi <= 1.05 * 4.0 * RATE_GBPS, "faster than the shaped links");
}
