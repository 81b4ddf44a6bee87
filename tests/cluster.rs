//! The multi-NIC logic on a network that behaves like one: scripts/cluster/emulate-cluster builds 4 nodes × 4
//! NICs shaped to R = 1 Gbit/s (half the script's default, so that four busy-polling ranks on a two-core CI machine leave the links, not the CPUs, as the limit), and `efatop run --netns` puts one rank in each. The seed's write table must
//! keep its shape at rate R: Single ≈ R, Multi (split over 4 NICs) ≈ 4R, RoundRobin to 3 peers ≈ 3R (judged
//! as Single ≥ 0.7 R, Multi ≥ 3 × Single, RoundRobin ≥ 2 × Single, and nothing above the links).
//! Needs root, ip and tc for namespaces and shaping: where they are missing (and not on CI) each test says so
//! and skips; where they are there, or with CI=true, a failure of `scripts/cluster/emulate-cluster up` fails the test.

mod common;

use std::process::Command;

use common::{Cluster, cluster_script, efatop, serial};
use efatop_testkit::{json_lines, JsonLine};

const RATE_GBPS: f64 = 1.0;
const NODES: [&str; 4] = ["efatop-node0", "efatop-node1", "efatop-node2", "efatop-node3"];

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
    // The shape, judged with margins a loaded two-core machine holds: a lone stream near the shaped rate, and
    // the others its multiples (ideal 4 and 3; at load 10 the VM measured Single 0.89 R, Multi/Single 3.40,
    // RoundRobin/Single 2.38, where the absolute 0.9 R bars failed it).
    assert!(single >= 0.7 * RATE_GBPS, "Single {single:.2} < 0.7 R");
    assert!(multi >= 3.0 * single, "Multi {multi:.2} < 3 × Single {single:.2}");
    assert!(round_robin >= 2.0 * single, "RoundRobin {round_robin:.2} < 2 × Single {single:.2}");
    // Nothing is faster than the links allow: the shaping, not loopback, carried the traffic.
    assert!(single <= 1.05 * RATE_GBPS && multi <= 1.05 * 4.0 * RATE_GBPS, "faster than the shaped links");
}

/// All-to-all moves 4 × 3 streams at once through the emulated links, and each rank polls its own: at
/// 1 Gbit/s that is more TCP than two cores carry, so these tests shape to 250 Mbit/s.
const ALLTOALL_RATE: &str = "250mbit";
const ALLTOALL_RATE_GBPS: &str = "0.25";

fn alltoall(configs: &str, extra: &[&str]) -> common::Run {
    let netns = NODES.join(",");
    let mut args = vec![
        "run", "--ranks", "4", "--netns", &netns, "alltoall", "--provider", "tcp", "--channels", "all", "--link-gbps",
        ALLTOALL_RATE_GBPS, "--min-size", "8M", "--max-size", "8M", "--iters", "3", "--warmup", "1", "--configs", configs,
    ];
    args.extend_from_slice(extra);
    efatop(&args)
}

#[test]
fn alltoall_multi_is_the_channel_count_times_single() {
    let _one = serial();
    let Some(_cluster) = Cluster::up_at(ALLTOALL_RATE) else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("alltoall.json");
    let run = alltoall("single,multi", &["--out", out.to_str().expect("utf-8")]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let results: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).expect("results")).expect("json");
    let gbps = |config: &str| -> f64 {
        results["measurements"].as_array().expect("measurements").iter().find(|m| m["config"] == config).and_then(|m| m["gbps"].as_f64()).expect(config)
    };
    let (single, multi) = (gbps("SinglePin"), gbps("MultiPin"));
    println!(
        "emulated 4×4 at R = {ALLTOALL_RATE}, alltoall 8M: Single {single:.3} Gbps, Multi {multi:.3} Gbps, Multi/Single = {:.2} \
         (ideal: Single R/3, Multi 4R/3)",
        multi / single
    );
    // The channels are the NICs: the run says so, and Multi carries what more than three of them can. Ideal is 4×;
    // on a loaded two-core CI machine Multi's four TCP streams lose more to the CPUs than Single's one (CI once
    // measured 3.49×: Single at 89 % of R/3, Multi at 78 % of 4R/3). A Multi that lost a NIC would be near 3×.
    assert!(run.stdout.contains("channels: 4 over 4 NICs (efa0, efa1, efa2, efa3)"), "{}", run.stdout);
    assert!(multi > 3.0 * single, "Multi {multi:.3} ≤ 3 × Single {single:.3}");
}

#[test]
fn a_slow_node_is_the_slowest_row_and_column_of_the_pair_heatmap() {
    let _one = serial();
    let Some(_cluster) = Cluster::up_at(ALLTOALL_RATE) else { return };
    let slow_node = 2;
    let slowed = Command::new(cluster_script()).args(["slow", "--node", "2", "--rate", "60mbit"]).output().expect("script");
    assert!(slowed.status.success(), "{}", String::from_utf8_lossy(&slowed.stderr));
    let run = alltoall("multi", &["--json", "--interval", "200ms"]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let lines = json_lines(&run.stdout);

    // What the dashboard's heatmap is fed: live landings per (sender, receiver), averaged over the run.
    let mut live = [[(0.0_f64, 0_u32); 4]; 4];
    for pair in lines.iter().filter_map(|l| if let JsonLine::Pair(pair) = l { Some(pair) } else { None }) {
        let cell = &mut live[pair.sender as usize][pair.receiver as usize];
        *cell = (cell.0 + pair.gbps, cell.1 + 1);
    }
    let live: Vec<Vec<Option<f64>>> = live
        .iter()
        .enumerate()
        .map(|(s, row)| row.iter().enumerate().map(|(r, (sum, n))| (s != r && *n > 0).then(|| sum / f64::from(*n))).collect())
        .collect();
    // And the final matrix of the results.
    let matrix: Vec<Vec<Option<f64>>> = lines
        .iter()
        .find_map(|l| if let JsonLine::PairMatrix(matrix) = l { Some(matrix.gbps.clone()) } else { None })
        .expect("a pair matrix");
    for (name, cells) in [("live", &live), ("final", &matrix)] {
        println!("{name} pair Gbps (row sender, column receiver), node {slow_node} at 60 Mbit/s per NIC:");
        for row in cells {
            println!("  {}", row.iter().map(|c| c.map_or("   -  ".into(), |g| format!("{g:6.3}"))).collect::<Vec<_>>().join(" "));
        }
        let touches_slow = |s: usize, r: usize| s == slow_node || r == slow_node;
        let mut slow_cells = Vec::new();
        let mut other_cells = Vec::new();
        for (s, row) in cells.iter().enumerate() {
            for (r, cell) in row.iter().enumerate().filter(|(r, _)| *r != s) {
                let gbps = cell.unwrap_or_else(|| panic!("{name}: pair {s}→{r} never measured"));
                if touches_slow(s, r) { slow_cells.push(gbps) } else { other_cells.push(gbps) }
            }
        }
        let slowest_other = other_cells.iter().copied().fold(f64::INFINITY, f64::min);
        let fastest_slow = slow_cells.iter().copied().fold(0.0, f64::max);
        assert!(
            fastest_slow < slowest_other,
            "{name}: node {slow_node}'s row and column should be the slowest: its fastest pair {fastest_slow:.3} ≥ another pair's {slowest_other:.3}"
        );
    }
}

/// The cluster's wiring itself, with real TCP streams (scripts/cluster/test-emulate-cluster-routing, which takes the
/// cluster lock): same rail straight over the bridge, cross-rail through the spine and in and out of the
/// NICs that own the addresses, `shape` slowing a NIC for every peer and `link` one pair only. Skips where
/// the cluster cannot be made (not root, or no ip or tc, and not CI), saying so; fails wherever it can.
#[test]
fn the_emulated_cluster_routes_each_nic_through_itself_and_shapes_what_it_says() {
    let _one = serial();
    if let Err(why) = common::cluster_must_work() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cluster/test-emulate-cluster-routing");
    let output = Command::new(&script).output().expect("scripts/cluster/test-emulate-cluster-routing");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("all checks passed"), "{stdout}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
}

/// Hosts' telemetry relays (runtime/src/relay.rs) in a real run: 8 ranks on the 4 emulated nodes, two a
/// node (round-robin: node k runs ranks k and k + 4), so each node but rank 0's sends its ranks' telemetry
/// to rank 0 through its lowest rank. Every rank is heard. A rank killed on a relayed node is named at once,
/// well before `--hang-timeout` (60 s): one its relay carries (rank 5 on node 1: the relay tells rank 0 its
/// connection closed), and a relay's own rank (rank 2, node 2's: its relay goes with it). The ranks its
/// death ends say they are leaving, and none of them is named for it.
#[test]
fn a_relayed_nodes_ranks_are_all_heard_and_a_killed_one_is_named_at_once() {
    use std::time::{Duration, Instant};
    let _one = serial();
    let Some(_cluster) = Cluster::up() else { return };
    for victim in [5usize, 2] {
        let dir = tempfile::tempdir().expect("tempdir");
        let netns = NODES.join(",");
        let mut launcher = Command::new(common::efatop_path())
            .args(["run", "--ranks", "8", "--netns", &netns, "write", "--provider", "tcp", "--channels", "1", "--json"])
            .args(["--configs", "single", "--min-size", "64K", "--max-size", "64K", "--iters", "1000000", "--hang-timeout", "60"])
            .current_dir(dir.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start");
        let mut ours = common::Tracked::default();
        ours.add(launcher.id());
        let stdout = common::lines_of(launcher.stdout.take().expect("stdout"));
        let stderr = common::lines_of(launcher.stderr.take().expect("stderr"));
        // Every rank's telemetry, relayed or not, reaches rank 0; the run says which ranks relay.
        let mut heard = [false; 8];
        let mut relays = None;
        let started = Instant::now();
        while !heard.iter().all(|h| *h) {
            assert!(started.elapsed() < Duration::from_mins(2), "ranks heard: {heard:?}");
            if let Ok(line) = stdout.recv_timeout(Duration::from_millis(100)) {
                match efatop_testkit::parse_line(&line) {
                    Ok(JsonLine::Sample(sample)) => heard[sample.rank as usize] = true,
                    Ok(JsonLine::Run(run)) => relays = Some(run.telemetry_relays.clone()),
                    _ => {}
                }
            }
        }
        assert_eq!(relays, Some(vec![1, 2, 3]), "nodes 1 to 3 relay through their lowest ranks");
        ours.add_descendants(launcher.id());
        let pid = common::rank_pid(launcher.id(), victim).expect("the victim's process");
        let killed = Instant::now();
        assert!(Command::new("kill").args(["-KILL", &pid.to_string()]).status().expect("kill").success());
        let code = loop {
            if let Some(status) = launcher.try_wait().expect("wait") {
                break status.code();
            }
            assert!(killed.elapsed() < Duration::from_secs(50), "rank {victim} killed: the run still goes after 50 s");
            std::thread::sleep(Duration::from_millis(20));
        };
        let ended_after = killed.elapsed();
        let said: Vec<String> = std::iter::from_fn(|| stderr.recv_timeout(Duration::from_secs(2)).ok()).collect();
        println!("rank {victim} killed: the run ended after {:.2} s, exit {code:?}; stderr:\n{}", ended_after.as_secs_f64(), said.join("\n"));
        assert_eq!(code, Some(1), "{said:?}");
        // Rank 0's own word (the launcher also says how its child ended): the rank's telemetry closed, which
        // for rank 5 only its relay could tell.
        let named = format!("efatop: error: rank {victim} (");
        let closed = said.iter().any(|l| l.starts_with(&named) && l.contains(NODES[victim % 4]) && l.contains("its telemetry connection closed"));
        assert!(closed, "rank 0 does not name rank {victim} on {}: {said:?}", NODES[victim % 4]);
        // The ranks its death ended (their rendezvous closed) said they were leaving: none is named for it,
        // whichever connection rank 0 read first (CI once named rank 4, on rank 0's own node).
        assert!(!said.iter().any(|l| l.contains("exited mid-run") && !l.starts_with(&named)), "another rank named: {said:?}");
        // The launcher names the rank's node as rank 0 does.
        let launcher = format!(":{}) was killed by signal 9", NODES[victim % 4]);
        assert!(said.iter().any(|l| l.starts_with(&named) && l.ends_with(&launcher)), "{said:?}");
        assert!(!said.iter().any(|l| l.contains("stopped responding")), "named by the hang timeout, not at once: {said:?}");
        assert!(ended_after < Duration::from_secs(20), "rank {victim}'s death took {ended_after:?} to end the run");
        let until = Instant::now() + Duration::from_secs(10);
        while !ours.alive().is_empty() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        let left = ours.alive();
        ours.kill_all();
        assert!(left.is_empty(), "processes left: {left:?}");
    }
}
