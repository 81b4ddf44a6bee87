//! `efatop monitor` as a user runs it, on a fake p5 sysfs tree (`--sysfs-root`): rates from counters
//! this test moves between two reads, a wrapped counter and a vanished device, the p5 topology's
//! grouping, the GPU panel's state, and bad input.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use common::{efatop, efatop_in};
use efatop_testkit::snapshot_of;
use efatop_node::FakeSysfs;
use serde_json::Value;

fn p5_fixture() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("topology/fixtures/p5.48xlarge.xml").display().to_string()
}

fn nic<'a>(snapshot: &'a Value, name: &str) -> &'a Value {
    snapshot["nics"]
        .as_array()
        .expect("nics")
        .iter()
        .find(|nic| nic["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {snapshot}"))
}

/// Starts a streaming `--json` monitor on `root` and hands each line to `between` before reading the
/// next, so the test can move counters between two reads it knows have happened.
fn stream(root: &Path, lines: usize, interval: &str, mut between: impl FnMut(usize)) -> Vec<Value> {
    let count = lines.to_string();
    let fixture = p5_fixture();
    let args = ["monitor", "--json", "--interval", interval, "--count", &count, "--sysfs-root", root.to_str().expect("utf-8 path"), "--topology-xml", &fixture];
    let cwd = common::scratch();
    let mut child = efatop_in(cwd.path()).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("efatop starts");
    let mut reader = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut parsed = Vec::new();
    for index in 0..lines {
        let mut line = String::new();
        reader.read_line(&mut line).expect("a line");
        assert!(!line.is_empty(), "line {index}: the monitor ended early");
        parsed.push(snapshot_of(&line).1);
        between(index);
    }
    let status = child.wait().expect("efatop ends");
    assert!(status.success(), "{status}");
    parsed
}

#[test]
fn rates_are_the_bytes_moved_between_two_reads_over_the_time_between_them() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeSysfs::p5(dir.path()).unwrap();
    let snapshots = stream(fake.root(), 2, "1s", |index| {
        if index == 0 {
            // 6.25 GB out and 1.25 GB in on GPU 5's first EFA; RDMA writes; a retransmit; lo both ways.
            fake.advance("rdmap164s0", "tx_bytes", 6_250_000_000).unwrap();
            fake.advance("rdmap164s0", "rdma_write_bytes", 6_000_000_000).unwrap();
            fake.advance("rdmap164s0", "rx_bytes", 1_250_000_000).unwrap();
            fake.advance("rdmap164s0", "retrans_pkts", 7).unwrap();
            fake.advance("lo", "rx_bytes", 500_000_000).unwrap();
            fake.advance("lo", "tx_bytes", 500_000_000).unwrap();
        }
    });
    let [first, second] = [&snapshots[0], &snapshots[1]];
    assert!(first["interval_ms"].is_null());
    assert!(nic(first, "rdmap164s0")["tx_gbps"].is_null(), "no rate from one read");
    let seconds = second["interval_ms"].as_f64().unwrap() / 1e3;
    assert!((0.9..1.5).contains(&seconds), "{seconds}");
    let busy = nic(second, "rdmap164s0");
    let expect = |bytes: f64| bytes * 8.0 / seconds / 1e9;
    for (field, bytes) in [("tx_gbps", 6_250_000_000.0), ("rx_gbps", 1_250_000_000.0)] {
        let got = busy[field].as_f64().unwrap();
        assert!((got - expect(bytes)).abs() < 1e-6, "{field}: {got} vs {}", expect(bytes));
    }
    let write_rate = busy["counters"]["rdma_write_bytes"]["per_s"].as_f64().unwrap();
    assert!((write_rate - 6e9 / seconds).abs() < 1.0, "{write_rate}");
    assert_eq!(busy["retransmits_delta"], 7);
    assert_eq!(busy["gpus"], serde_json::json!([5]));
    assert_eq!(busy["link_gbps"], 100.0);
    assert_eq!(nic(second, "rdmap165s0")["tx_gbps"], 0.0, "its neighbour stayed idle");
    let lo = nic(second, "lo");
    assert!((lo["rx_gbps"].as_f64().unwrap() - expect(5e8)).abs() < 1e-6);
    assert_eq!(second["topology_gpus"].as_array().unwrap().len(), 8);
    assert_eq!(second["gpus"]["state"], "unavailable");
}

#[test]
fn a_counter_gone_back_and_a_vanished_device_leave_the_monitor_running() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeSysfs::p5(dir.path()).unwrap();
    fake.set("rdmap150s0", "tx_bytes", 5_000_000_000_000).unwrap();
    // The counter starts again from 0 (a driver reload; a value of 2^63 or more is read as unknown, not as a
    // wrap); another device is unbound.
    let snapshots = stream(fake.root(), 3, "300ms", |index| match index {
        0 => {
            fake.set("rdmap150s0", "tx_bytes", 1_000).unwrap();
            fake.remove("rdmap96s0").unwrap();
        }
        1 => {
            fake.advance("rdmap150s0", "tx_bytes", 37_500_000).unwrap();
        }
        _ => {}
    });
    let wrapped = nic(&snapshots[1], "rdmap150s0");
    assert!(wrapped["tx_gbps"].is_null(), "no bogus rate after a counter went back: {wrapped}");
    assert_eq!(wrapped["went_backwards"], serde_json::json!(["tx_bytes"]));
    let gone = nic(&snapshots[1], "rdmap96s0");
    assert_eq!((gone["present"].as_bool(), gone["tx_gbps"].is_null()), (Some(false), true));
    let seconds = snapshots[2]["interval_ms"].as_f64().unwrap() / 1e3;
    let resumed = nic(&snapshots[2], "rdmap150s0")["tx_gbps"].as_f64().unwrap();
    assert!((resumed - 0.3 / seconds).abs() < 1e-6, "{resumed}");
    assert_eq!(nic(&snapshots[2], "rdmap96s0")["present"], false);
}

#[test]
fn once_prints_one_snapshot_grouped_under_the_p5_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeSysfs::p5(dir.path()).unwrap();
    let root = fake.root().to_str().unwrap();
    let fixture = p5_fixture();
    let run = efatop(&["monitor", "--once", "--interval", "100ms", "--sysfs-root", root, "--topology-xml", &fixture]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(lines[0].contains("34 NICs") && lines[0].contains("tx 0.00 rx 0.00 Gbps"), "{}", run.stdout);
    assert!(lines[1].contains("GPUs: not read: --sysfs-root"), "{}", run.stdout);
    let gpu3 = lines.iter().position(|l| l.starts_with("GPU3 0000:86:00.0")).expect("GPU3 heading");
    let under: Vec<&str> = lines[gpu3 + 1..gpu3 + 5].iter().map(|l| l.split_whitespace().next().unwrap()).collect();
    assert_eq!(under, ["rdmap130s0", "rdmap131s0", "rdmap132s0", "rdmap133s0"]);
    assert!(lines.iter().any(|l| l.starts_with("not next to a GPU")));

    let run = efatop(&["monitor", "--once", "--json", "--interval", "100ms", "--sysfs-root", root, "--filter", "rdmap79"]);
    let snapshot = snapshot_of(run.stdout.trim()).1;
    assert_eq!(run.stdout.lines().count(), 1);
    let first = nic(&snapshot, "rdmap79s0");
    assert_eq!(first["pci_bus_id"], "0000:4f:00.0");
    assert_eq!(first["tx_gbps"], 0.0);
    assert_eq!(first["counters"].as_object().unwrap().len(), 34, "every counter the device has");
}

/// `--filter` keeps in a JSON line the NICs the table would show: by name, or by the GPU they sit next to.
#[test]
fn json_keeps_only_the_nics_the_filter_names() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeSysfs::p5(dir.path()).unwrap();
    let root = fake.root().to_str().unwrap();
    let fixture = p5_fixture();
    let names = |filter: &str| -> Vec<String> {
        let run = efatop(&["monitor", "--once", "--json", "--interval", "100ms", "--sysfs-root", root, "--topology-xml", &fixture, "--filter", filter]);
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        let snapshot = snapshot_of(run.stdout.trim()).1;
        snapshot["nics"].as_array().unwrap().iter().map(|nic| nic["name"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(names("lo"), ["lo"]);
    let mut near_gpu3 = names("LO, gpu3");
    near_gpu3.sort();
    assert_eq!(near_gpu3, ["lo", "rdmap130s0", "rdmap131s0", "rdmap132s0", "rdmap133s0"]);
    assert!(names("nothing-by-this-name").is_empty());
    assert_eq!(names("").len(), 34, "no filter: every NIC");
}

#[test]
fn this_machine_has_lo_and_a_gpu_panel_that_says_what_it_found() {
    let run = efatop(&["monitor", "--once", "--json", "--interval", "100ms"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let snapshot = snapshot_of(run.stdout.trim()).1;
    assert_eq!(nic(&snapshot, "lo")["kind"], "net");
    let gpus = &snapshot["gpus"];
    match gpus["state"].as_str() {
        Some("unavailable") => assert_eq!(gpus["reason"], efatop_node::NO_DRIVER),
        Some("gpus") => assert!(!gpus["gpus"].as_array().unwrap().is_empty()),
        other => panic!("{other:?}: {snapshot}"),
    }
}

#[test]
fn bad_input_is_one_line_naming_the_flag_and_exit_code_2() {
    for (args, wanted) in [
        (vec!["monitor", "--interval", "soon"], "--interval"),
        (vec!["monitor", "--interval", "0ms"], "--interval"),
        (vec!["monitor", "--sysfs-root", "/no/such/dir", "--once"], "--sysfs-root /no/such/dir: not a directory"),
        (vec!["monitor", "--topology-xml", "/no/such.xml", "--once"], "--topology-xml /no/such.xml"),
        (vec!["monitor", "--serve", "9400", "--prometheus", "127.0.0.1:9400", "--once"], "--serve 127.0.0.1:9400 and --prometheus 127.0.0.1:9400"),
        (vec!["monitor", "--record", "/no/such/dir/m.efarec", "--once"], "--record /no/such/dir/m.efarec: there is no directory /no/such/dir"),
        (vec!["monitor", "--count", "-3"], "--count"),
    ] {
        let run = efatop(&args);
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.stderr);
        assert_eq!(run.stderr.lines().count(), 1, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(wanted), "{args:?}: {}", run.stderr);
    }
}

/// Two monitors, each on its own fake node (`{rank}` in `--sysfs-root`), started as two ranks: rank 0's
/// collector receives both nodes' snapshots over the telemetry wire and prints each with its own rates.
#[test]
fn two_nodes_stream_their_own_rates_to_rank_0() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = [FakeSysfs::p5(dir.path().join("node0")).unwrap(), FakeSysfs::p5(dir.path().join("node1")).unwrap()];
    let root = dir.path().join("node{rank}");
    let fixture = p5_fixture();
    let args =
        ["monitor", "--ranks", "2", "--json", "--interval", "1s", "--count", "2", "--sysfs-root", root.to_str().unwrap(), "--topology-xml", &fixture];
    let mut child = efatop_in(dir.path()).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("efatop starts");
    let mut reader = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut read_line = || {
        let mut line = String::new();
        reader.read_line(&mut line).expect("a line");
        snapshot_of(&line)
    };
    let firsts = [read_line(), read_line()];
    let mut first_ranks: Vec<u32> = firsts.iter().map(|(rank, _)| rank.expect("rank")).collect();
    first_ranks.sort_unstable();
    assert_eq!(first_ranks, [0, 1], "{firsts:?}");
    assert!(firsts.iter().all(|(_, line)| line["interval_ms"].is_null()));
    // Between the two reads: node 0 sends 2.5 GB on one EFA, node 1 receives 5 GB on another and retransmits.
    nodes[0].advance("rdmap164s0", "tx_bytes", 2_500_000_000).unwrap();
    nodes[1].advance("rdmap79s0", "rx_bytes", 5_000_000_000).unwrap();
    nodes[1].advance("rdmap79s0", "retrans_pkts", 3).unwrap();
    let mut seconds = [read_line(), read_line()];
    seconds.sort_by_key(|(rank, _)| *rank);
    let status = child.wait().expect("efatop ends");
    assert!(status.success(), "{status}");
    for (rank, (told, line)) in seconds.iter().enumerate() {
        assert_eq!(*told, Some(rank as u32), "{line}");
        let interval = line["interval_ms"].as_f64().expect("a rated snapshot") / 1e3;
        assert!((0.9..1.5).contains(&interval), "{interval}");
        let gbps = |bytes: f64| bytes * 8.0 / interval / 1e9;
        let (busy, field, bytes, idle) =
            if rank == 0 { ("rdmap164s0", "tx_gbps", 2.5e9, "rdmap79s0") } else { ("rdmap79s0", "rx_gbps", 5e9, "rdmap164s0") };
        let got = nic(line, busy)[field].as_f64().unwrap();
        assert!((got - gbps(bytes)).abs() < 1e-6, "rank {rank} {busy} {field}: {got} vs {}", gbps(bytes));
        assert_eq!(nic(line, idle)["tx_gbps"], 0.0, "rank {rank}: {idle} stayed idle");
        assert_eq!(nic(line, idle)["rx_gbps"], 0.0, "rank {rank}: {idle} stayed idle");
        assert_eq!(nic(line, busy)["retransmits_delta"], if rank == 1 { 3 } else { 0 });
        assert_eq!(nic(line, busy)["link_gbps"], 100.0);
        assert_eq!(nic(line, busy)["present"], true);
        // The topology's grouping travels too: rank 0 draws each node's NICs under its GPUs.
        assert_eq!(line["topology_gpus"].as_array().map(Vec::len), Some(8), "{line}");
        assert_eq!(nic(line, "rdmap164s0")["gpus"], serde_json::json!([5]));
    }
}

#[test]
fn hosts_is_refused_with_how_to_watch_many_nodes() {
    let run = efatop(&["monitor", "--hosts", "a,b"]);
    assert_eq!(run.code, Some(2));
    assert!(run.stderr.contains("--hosts a,b: efatop does not start monitors on other hosts"), "{}", run.stderr);
    assert!(run.stderr.contains("mpirun"), "{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
}

#[test]
fn a_missing_tree_for_one_of_the_local_ranks_is_one_line_before_any_rank_starts() {
    let dir = tempfile::tempdir().unwrap();
    FakeSysfs::p5(dir.path().join("node0")).unwrap();
    let root = dir.path().join("node{rank}");
    let run = efatop(&["monitor", "--ranks", "2", "--once", "--sysfs-root", root.to_str().unwrap()]);
    assert_eq!(run.code, Some(2));
    assert!(run.stderr.trim_end().ends_with("node1: not a directory"), "{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
}
