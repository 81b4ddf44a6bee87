//! Where the bytes went: every write step holds the application's bytes per channel against the channel's
//! NIC counters. Over the emulated cluster's shaped veth NICs the two must agree (TCP/IP headers are the
//! only excess); a shm run's bytes cross no NIC and must say so; and on a fake p5 tree whose EFA device
//! counts sends while the run writes (its `send_bytes` is loopback's `tx_bytes`), the run must be labelled
//! emulated.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{efatop, run_program, serial};
use efatop_node::FakeSysfs;
use serde_json::Value;

/// The lock every user of scripts/cluster/emulate-cluster takes (another engineer's runs, other test binaries).
const CLUSTER_LOCK: &str = "/tmp/efatop-cluster.lock";
const SKIP_MARK: &str = "efatop-test: cluster unavailable";

fn results(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("results file")).expect("results JSON")
}

fn measurements(results: &Value) -> &Vec<Value> {
    results["measurements"].as_array().expect("measurements")
}

/// `efatop run --ranks 4 --netns <the 4 nodes> <experiment> --provider tcp --channels all --link-gbps 1
/// --min-size 4M --max-size 8M --iters 4 --warmup 1 --no-tui --out <out>` on the emulated cluster (4 nodes × 4
/// NICs at 1 Gbit/s): up, run and down under the cluster lock in one shell, so that no other user's cluster
/// comes or goes in between; the trap takes the cluster down whatever happens. Where `up` fails, the test
/// fails if the cluster must work here (`common::cluster_must_work`), else this is `None` (SKIPPED, with why).
fn run_on_cluster(experiment: &str, out: &Path) -> Option<common::Run> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cluster/emulate-cluster");
    let body = format!(
        "trap '{script} down >/dev/null 2>&1' EXIT; \
         if ! {script} up --nodes 4 --nics 4 --rate 1gbit >/dev/null 2>/tmp/efatop-counters-up.err; then \
           echo \"{SKIP_MARK}: $(cat /tmp/efatop-counters-up.err)\"; exit 0; fi; \
         {efatop} run --ranks 4 --netns efatop-node0,efatop-node1,efatop-node2,efatop-node3 {experiment} --provider tcp \
           --channels all --link-gbps 1 --min-size 4M --max-size 8M --iters 4 --warmup 1 --no-tui --out {out}",
        script = script.display(),
        efatop = common::efatop_path().display(),
        out = out.display()
    );
    let run = run_program("flock", &[CLUSTER_LOCK, "bash", "-c", &body], Duration::from_mins(8));
    if let Some(failure) = run.stdout.trim().strip_prefix(SKIP_MARK) {
        // Fails the test where the cluster must work (root with ip and tc, or CI); skips, saying why, elsewhere.
        common::cluster_up_failed(failure.trim_start_matches(':').trim());
        return None;
    }
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    Some(run)
}

/// Every step of `results` holds its 16 channels' counters; every channel that moved bytes is within 0.95..1.3
/// of its veth's `tx_bytes+rx_bytes`, and no step warns of bytes that crossed no NIC or another NIC. Returns
/// the ratios, one line per channel.
fn check_ratios(results: &Value) -> Vec<String> {
    let mut ratios = Vec::new();
    for measurement in measurements(results) {
        let counters = &measurement["counters"];
        let step = format!("{} {}", measurement["config"], measurement["size"]);
        let channels = counters["channels"].as_array().unwrap_or_else(|| panic!("{step}: no counters"));
        assert_eq!(channels.len(), 16, "{step}: 4 ranks × 4 channels");
        for channel in channels.iter().filter(|c| c["app_bytes"].as_u64() > Some(0)) {
            let ratio = channel["ratio"].as_f64().unwrap_or_else(|| panic!("{step}: a channel that moved bytes has no ratio: {channel}"));
            assert_eq!(channel["counter"], "tx_bytes+rx_bytes", "{channel}");
            assert!(channel["nic"].as_str().is_some_and(|nic| nic.starts_with("efa")), "{channel}");
            assert!((0.95..=1.3).contains(&ratio), "{step}: rank {} channel {} NIC/app {ratio}", channel["rank"], channel["channel"]);
            ratios.push(format!("{step} r{}c{} {ratio:.4}", channel["rank"], channel["channel"]));
        }
        let warnings = counters["warnings"].as_array().expect("warnings");
        assert!(warnings.iter().all(|w| w["kind"] != "no_nic" && w["kind"] != "other_nic"), "{step}: {warnings:?}");
    }
    ratios
}

#[test]
fn tcp_writes_over_the_emulated_cluster_match_their_nics_counters_channel_by_channel() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("cluster.json");
    let Some(run) = run_on_cluster("write", &out) else { return };
    let results = results(&out);
    let ratios = check_ratios(&results);
    // Multi splits every size over the 4 channels: each of rank 0's and its target's channels is held.
    let multi = measurements(&results).iter().find(|m| m["config"] == "MultiPin").expect("MultiPin");
    let held = multi["counters"]["channels"].as_array().expect("channels").iter().filter(|c| c["ratio"].is_number()).count();
    assert_eq!(held, 16, "every rank's 4 channels (rank 0 sends to each rank in turn)");
    assert!(run.stdout.contains("NIC/app 1.0"), "{}", run.stdout);
    println!("NIC/app per channel over the emulated cluster:\n{}", ratios.join("\n"));
}

#[test]
fn tcp_alltoall_over_the_emulated_cluster_matches_its_nics_counters_channel_by_channel() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("alltoall.json");
    // Single and Multi: every channel they use carries whole buffers both ways (RoundRobin leaves ranks 0 and 2
    // a channel 0 with only the 8-byte start-together writes, whose headers outweigh them; docs/counters.md).
    let Some(run) = run_on_cluster("alltoall --configs single,multi", &out) else { return };
    let results = results(&out);
    let ratios = check_ratios(&results);
    // Every rank sends to and receives from every other: in Multi each rank's 4 channels carry both ways,
    // and in Single channel 0 of every rank does.
    for (config, held) in [("SinglePin", 4), ("MultiPin", 16)] {
        for measurement in measurements(&results).iter().filter(|m| m["config"] == config) {
            let channels = measurement["counters"]["channels"].as_array().expect("channels");
            assert_eq!(channels.iter().filter(|c| c["ratio"].is_number()).count(), held, "{config}: {channels:?}");
        }
    }
    assert!(run.stdout.contains("NIC/app 1.0"), "{}", run.stdout);
    println!("NIC/app per channel of alltoall over the emulated cluster:\n{}", ratios.join("\n"));
}

#[test]
fn a_shm_alltoall_warns_that_its_bytes_crossed_no_nic() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("shm-alltoall.json");
    let run = efatop(&[
        "run", "--ranks", "2", "alltoall", "--provider", "shm", "--configs", "single", "--min-size", "64K", "--max-size", "64K",
        "--iters", "2", "--warmup", "1", "--no-tui", "--out", out.to_str().expect("utf-8"),
    ]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    // Each rank sent 64K and received 64K in each of 3 iterations, plus 8 bytes each way to start together.
    assert!(run.stdout.contains("# warning: rank 0 channel 0: 393 kB crossed no NIC (shm moves bytes through shared memory)"), "{}", run.stdout);
    assert!(run.stdout.contains("SinglePin 64K: NIC/app - (bytes crossed no NIC)"), "{}", run.stdout);
    let results = results(&out);
    let counters = &measurements(&results)[0]["counters"];
    assert!(counters["ratio"].is_null(), "no ratio is invented: {counters}");
    let channels = counters["channels"].as_array().expect("channels");
    assert!(channels.iter().all(|c| c["app_bytes"] == 3 * (2 * 65536 + 16)), "sent plus received, both ranks: {counters}");
    let no_nic: Vec<u64> =
        counters["warnings"].as_array().expect("warnings").iter().filter(|w| w["kind"] == "no_nic").filter_map(|w| w["rank"].as_u64()).collect();
    assert_eq!(no_nic, [0, 1], "{counters}");
}

#[test]
fn a_shm_run_warns_that_its_bytes_crossed_no_nic() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("shm.json");
    let run = efatop(&[
        "run", "--ranks", "2", "write", "--provider", "shm", "--configs", "single", "--min-size", "64K", "--max-size", "64K",
        "--iters", "2", "--warmup", "1", "--no-tui", "--out", out.to_str().expect("utf-8"),
    ]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("# warning: rank 0 channel 0: 197 kB crossed no NIC (shm moves bytes through shared memory)"), "{}", run.stdout);
    assert!(run.stdout.contains("SinglePin 64K: NIC/app - (bytes crossed no NIC)"), "{}", run.stdout);
    let results = results(&out);
    let counters = &measurements(&results)[0]["counters"];
    assert!(counters["ratio"].is_null(), "no ratio is invented: {counters}");
    let no_nic: Vec<u64> =
        counters["warnings"].as_array().expect("warnings").iter().filter(|w| w["kind"] == "no_nic").filter_map(|w| w["rank"].as_u64()).collect();
    assert_eq!(no_nic, [0, 1], "{counters}");
    let notes = results["metadata"]["notes"].as_array().expect("notes");
    assert!(notes.iter().any(|n| n.as_str().is_some_and(|n| n.contains("crossed no NIC"))), "{notes:?}");
}

#[test]
fn writes_counted_as_sends_on_a_fake_efa_device_label_the_run_emulated() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("p5");
    let fake = FakeSysfs::p5(&root).expect("fake p5 tree");
    // The fake device's send counter is the loopback interface's transmit counter, so it grows with the
    // run's own tcp traffic between two local ranks (which the kernel carries over lo), step by step,
    // while its rdma_write_bytes stays as written: an EFA device that moved the writes as sends.
    // A regular file that follows lo's counter while the run goes (common::LiveCounter).
    let send_bytes = common::LiveCounter::follow("/sys/class/net/lo/statistics/tx_bytes", fake.counter_path("rdmap79s0", "send_bytes"));
    let rdma_write_before = fake.get("rdmap79s0", "rdma_write_bytes").expect("counter");
    let out = dir.path().join("fake.json");
    let run = efatop(&[
        "run", "--ranks", "2", "write", "--provider", "tcp", "--configs", "single", "--min-size", "256K", "--max-size", "512K",
        // Enough iterations that each size's step lasts well beyond the copier's millisecond, also where a
        // loaded machine keeps the copier waiting for a CPU (4 iterations once saw no copy in a step: CI).
        "--iters", "40", "--warmup", "1", "--no-tui", "--sysfs-root", root.to_str().expect("utf-8"), "--nic-map", "0=rdmap79s0",
        "--out", out.to_str().expect("utf-8"),
    ]);
    send_bytes.stop();
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(fake.get("rdmap79s0", "rdma_write_bytes").expect("counter"), rdma_write_before, "only sends grew");
    let results = results(&out);
    let notes: Vec<&str> = results["metadata"]["notes"].as_array().expect("notes").iter().filter_map(Value::as_str).collect();
    assert!(notes.iter().any(|n| n.contains(&format!("NIC counters are read from {}", root.display())) && n.contains("channel 0 on rdmap79s0")), "{notes:?}");
    assert!(notes.iter().any(|n| n.contains("writes moved as sends (emulated RDMA)")), "{notes:?}");
    for measurement in measurements(&results) {
        let counters = &measurement["counters"];
        let emulated: Vec<u64> =
            counters["warnings"].as_array().expect("warnings").iter().filter(|w| w["kind"] == "emulated_write").filter_map(|w| w["rank"].as_u64()).collect();
        assert_eq!(emulated, [0, 1], "both ends of the write saw sends: {counters}");
        let channel = &counters["channels"][0];
        assert_eq!(channel["nic"], "rdmap79s0");
        assert_eq!(channel["counter"], "send_bytes");
        assert_eq!(channel["deltas"]["rdma_write_bytes"], 0, "{channel}");
        assert!(channel["deltas"]["send_bytes"].as_u64() > Some(0), "{channel}");
    }
    assert!(run.stdout.contains("SinglePin 256K: NIC/app ") && run.stdout.contains("(send_bytes), channels") && run.stdout.contains(", emulated RDMA, 2 warnings"), "{}", run.stdout);
}
