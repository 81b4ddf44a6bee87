//! Watching a run from elsewhere, with the real binary: a 2-rank shm run serves its events (`--serve`) to
//! two `efatop attach --json` viewers, records them (`--record`) for `efatop replay --json`, and what the
//! viewers and the replay print matches the run's results file. A viewer pointed at something that is not
//! an efatop run is refused in one line.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Stdio;
use std::time::Duration;

use common::{efatop, efatop_in, efatop_path, run_program, serial};
use efatop_testkit::data_of;
use serde_json::Value;

/// JSON lines of one type, their data as values.
fn lines_of(stdout: &str, kind: &str) -> Vec<Value> {
    data_of(stdout, kind)
}

fn measurements(results: &std::path::Path) -> Vec<Value> {
    let file: Value = serde_json::from_slice(&std::fs::read(results).expect("results file")).expect("results JSON");
    file["measurements"].as_array().cloned().expect("measurements")
}

#[test]
fn two_viewers_get_the_run_info_samples_and_every_measurement_of_a_served_run() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let results = dir.path().join("served.json");
    let mut run = efatop_in(dir.path());
    // Long enough (seconds) that both viewers attach while it runs, even on a loaded machine.
    run.args(["run", "--ranks", "2", "write", "--provider", "shm", "--min-size", "4K", "--max-size", "8M", "--iters", "60"])
        .args(["--interval", "50ms", "--no-tui", "--serve", "127.0.0.1:0", "--out"])
        .arg(&results)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut run = run.spawn().expect("start the run");
    let mut stdout = run.stdout.take().expect("stdout");
    let tables = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    // Rank 0 prints where it serves before the world is up.
    let mut stderr = BufReader::new(run.stderr.take().expect("stderr"));
    let mut said = String::new();
    let address = loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).expect("stderr") > 0, "the run ended without saying where it serves:\n{said}");
        said.push_str(&line);
        if let Some(address) = line.trim().strip_prefix("efatop: serving the run on ") {
            break address.to_string();
        }
    };
    let rest = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let efatop = efatop_path();
    let viewers: Vec<_> = (0..2)
        .map(|_| {
            let (efatop, address) = (efatop.clone(), address.clone());
            std::thread::spawn(move || {
                run_program(efatop.to_str().expect("path"), &["attach", &address, "--json"], Duration::from_mins(2))
            })
        })
        .collect();
    let viewed: Vec<_> = viewers.into_iter().map(|viewer| viewer.join().expect("viewer")).collect();
    let status = run.wait().expect("wait");
    let (tables, rest) = (tables.join().expect("stdout"), rest.join().expect("stderr"));
    assert!(status.success(), "the run failed:\n{tables}\n{said}{rest}");

    let measured = measurements(&results);
    assert!(measured.len() >= 3 * 12, "every size of every configuration: {}", measured.len());
    for (index, viewer) in viewed.iter().enumerate() {
        assert_eq!(viewer.code, Some(0), "viewer {index}: {}", viewer.stderr);
        // A viewer that fell behind says how many telemetry batches it lost; nothing else goes wrong.
        assert!(viewer.stderr.lines().all(|line| line.contains("fell behind")), "viewer {index}: {}", viewer.stderr);
        let run_lines = lines_of(&viewer.stdout, "run");
        assert_eq!(run_lines.len(), 1, "viewer {index}: one run line");
        assert_eq!((&run_lines[0]["experiment"], &run_lines[0]["ranks"]), (&Value::from("write"), &Value::from(2)));
        assert_eq!(run_lines[0]["provider"], "shm");
        let samples = lines_of(&viewer.stdout, "sample");
        assert!(samples.iter().any(|s| s["rank"] == 0) && samples.iter().any(|s| s["rank"] == 1), "viewer {index}: samples of both ranks");
        assert_eq!(lines_of(&viewer.stdout, "result"), measured, "viewer {index}: every measurement of the results file");
        let summary = lines_of(&viewer.stdout, "summary");
        assert_eq!(summary.len(), 1, "viewer {index}: the summary line");
        assert_eq!(summary[0]["measurements"], Value::Array(measured.clone()));
        assert_eq!(summary[0]["status"]["state"], "complete");
    }
}

#[test]
fn a_recorded_run_replays_as_the_measurements_of_its_results_file_and_a_cut_recording_says_so() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let (results, recording) = (dir.path().join("recorded.json"), dir.path().join("run.efarec"));
    let (results_arg, recording_arg) = (results.to_str().expect("path"), recording.to_str().expect("path"));
    let run = efatop(&[
        "run", "--ranks", "2", "write", "--provider", "shm", "--max-size", "1M", "--interval", "50ms", "--no-tui", "--out", results_arg,
        "--record", recording_arg,
    ]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);

    let replayed = efatop(&["replay", recording_arg, "--json"]);
    assert_eq!(replayed.code, Some(0), "{}", replayed.stderr);
    let measured = measurements(&results);
    assert!(!measured.is_empty());
    assert_eq!(lines_of(&replayed.stdout, "result"), measured);
    assert_eq!(lines_of(&replayed.stdout, "run").len(), 1);
    assert!(!lines_of(&replayed.stdout, "sample").is_empty(), "the recording holds the run's samples");

    // Cut inside its last block: what came before plays, and one line says where the recording stops.
    let bytes = std::fs::read(&recording).expect("recording");
    let cut = dir.path().join("cut.efarec");
    std::fs::write(&cut, &bytes[..bytes.len() - 6]).expect("write");
    let replayed = efatop(&["replay", cut.to_str().expect("path"), "--json"]);
    assert_eq!(replayed.code, Some(1), "{}", replayed.stderr);
    assert_eq!(replayed.stderr.lines().count(), 1, "{}", replayed.stderr);
    assert!(replayed.stderr.contains("is cut short after"), "{}", replayed.stderr);
    let shown = lines_of(&replayed.stdout, "result");
    assert!(!shown.is_empty() && measured.starts_with(&shown), "the measurements before the cut are whole");

    // Not a recording at all: one line, exit 2.
    let replayed = efatop(&["replay", results_arg, "--json"]);
    assert_eq!(replayed.code, Some(2));
    assert!(replayed.stderr.starts_with("efatop: error: replay:") && replayed.stderr.lines().count() == 1, "{}", replayed.stderr);

    // Its first line alone (a run killed before its first event was sealed): no end, so not a success.
    let header = dir.path().join("header.efarec");
    let first_line = bytes.iter().position(|b| *b == b'\n').expect("a first line") + 1;
    std::fs::write(&header, &bytes[..first_line]).expect("write");
    let header_arg = header.to_str().expect("path");
    for args in [&["replay", header_arg, "--json"][..], &["replay", header_arg]] {
        let replayed = efatop(args);
        assert_eq!(replayed.code, Some(1), "{}", replayed.stderr);
        assert_eq!(replayed.stderr.lines().count(), 1, "{}", replayed.stderr);
        assert!(replayed.stderr.contains("has no end: the run was cut off after 0 events"), "{}", replayed.stderr);
    }
}

#[test]
fn attach_to_something_that_is_not_an_efatop_run_ends_in_one_line() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
    let address = listener.local_addr().expect("address").to_string();
    let garbage = std::thread::spawn(move || {
        let (mut peer, _) = listener.accept().expect("accept");
        let _ = peer.write_all(b"\x16\x03\x01\x02\x00 not an efatop run \xff\xfe\n");
        // Hold the connection open for a while: the viewer must not wait for more.
        std::thread::sleep(Duration::from_millis(500));
    });
    let attached = efatop(&["attach", &address, "--json"]);
    assert_eq!(attached.code, Some(2), "{}", attached.stderr);
    assert_eq!(attached.stderr.lines().count(), 1, "{}", attached.stderr);
    assert!(attached.stderr.starts_with(&format!("efatop: error: attach: {address} is not an efatop run")), "{}", attached.stderr);
    assert!(attached.stdout.is_empty());
    garbage.join().expect("listener");

    // Nothing listening there any more: refused, one line, exit 2, pointing at the recording of a run that
    // may have ended rather than at --serve.
    let refused = efatop(&["attach", &address, "--json"]);
    assert_eq!(refused.code, Some(2));
    assert!(refused.stderr.contains(&format!("nothing listens at {address}: the run may have ended")), "{}", refused.stderr);
    assert!(refused.stderr.contains("efatop replay") && !refused.stderr.contains("start the run"), "{}", refused.stderr);
    assert_eq!(refused.stderr.lines().count(), 1, "{}", refused.stderr);
}

#[test]
fn a_served_monitor_reaches_a_viewer_read_by_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fake = dir.path().join("p5");
    let fake_arg = fake.to_str().expect("path");
    assert_eq!(efatop(&["monitor", "--write-fake-p5", fake_arg]).code, Some(0));
    let mut monitor = efatop_in(dir.path());
    monitor
        .args(["monitor", "--sysfs-root", fake_arg, "--json", "--count", "40", "--interval", "100ms", "--serve", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut monitor = monitor.spawn().expect("start the monitor");
    let mut stderr = BufReader::new(monitor.stderr.take().expect("stderr"));
    let mut line = String::new();
    stderr.read_line(&mut line).expect("stderr");
    let address = line.trim().strip_prefix("efatop: serving the run on ").expect("where it serves").to_string();
    let viewer = efatop(&["attach", &address, "--json"]);
    assert!(monitor.wait().expect("wait").success());
    assert_eq!(viewer.code, Some(0), "{}", viewer.stderr);
    assert_eq!(lines_of(&viewer.stdout, "run")[0]["experiment"], "monitor");
    let nodes = lines_of(&viewer.stdout, "node");
    assert!(!nodes.is_empty(), "{}", viewer.stdout);
    // The latest read first, then every read after it, in order, each with the fake tree's 34 NICs.
    let seqs: Vec<u64> = nodes.iter().map(|node| node["seq"].as_u64().expect("seq")).collect();
    assert!(seqs.windows(2).all(|pair| pair[1] == pair[0] + 1) && seqs.last() == Some(&40), "{seqs:?}");
    assert!(nodes.iter().all(|node| node["nics"].as_array().map(Vec::len) == Some(34)));
    assert_eq!(lines_of(&viewer.stdout, "summary").len(), 1);
}
