//! Every way a run ends carries its end: a rank that hangs (SIGSTOP) after the first results, and a rank
//! killed (SIGKILL) while the ranks allocate their buffers, in write, sendrecv, alltoall and sweep, each
//! with `--serve`, `--record` and `--json` together. Each must exit 1 naming the rank; its `--json` ends
//! with `error` then `summary` (holding what was measured); a viewer attached during the run prints the
//! same two lines and exits 1; `replay --json` of the recording does too and exits 1; the results file
//! parses, says the run failed and why, and holds what was measured.
//!
//! These tests signal only processes they started: the launcher they spawn and the ranks found below it.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Tracked, efatop_path, library_path, lines_of, rank_pid, serial};
use efatop_testkit::{JsonLine, json_lines_among};
use serde_json::Value;

/// The `--hang-timeout` these runs use.
const HANG_TIMEOUT_S: u64 = 3;

fn command(args: &[&str], dir: &Path) -> Command {
    let mut command = Command::new(efatop_path());
    command.args(args).current_dir(dir).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(path) = library_path() {
        command.env("LD_LIBRARY_PATH", path);
    }
    command
}

/// Every line left on `lines` once its writer has gone.
fn rest(lines: &mpsc::Receiver<String>, limit: Duration) -> Vec<String> {
    let until = Instant::now() + limit;
    let mut all = Vec::new();
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) => all.push(line),
            Err(mpsc::RecvTimeoutError::Disconnected) => return all,
            Err(mpsc::RecvTimeoutError::Timeout) => break,
        }
    }
    panic!("output still open after {limit:?}: {} lines so far", all.len());
}

fn wait(child: &mut Child, limit: Duration, what: &str) -> Option<i32> {
    let until = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code();
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("{what} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kind(line: &str) -> Option<&'static str> {
    efatop_testkit::kind_of(line)
}

/// What was measured, as a `summary` line's data or a results file holds it: sizes, or sweep rounds.
fn measured(results: &Value) -> usize {
    let sizes = results["measurements"].as_array().map_or(0, Vec::len);
    let rounds = results["sweep"]["rounds"].as_array().map_or(0, Vec::len);
    sizes + rounds
}

/// Checks that `lines` (a `--json` stream) end with `error` naming rank 2, then `summary`; returns the
/// summary's data.
fn ends_with_error_then_summary(lines: &[String], who: &str) -> Value {
    let lines = json_lines_among(&lines.join("\n"));
    let kinds: Vec<&str> = lines.iter().map(JsonLine::kind).collect();
    let at = kinds.iter().rposition(|k| *k == "error").unwrap_or_else(|| panic!("{who}: no error line; last kinds {:?}", &kinds[kinds.len().saturating_sub(5)..]));
    assert_eq!(kinds.get(at + 1).copied(), Some("summary"), "{who}: error is not followed by summary: {:?}", &kinds[at..]);
    let JsonLine::Error(error) = &lines[at] else { unreachable!("the error line") };
    assert!(error.text.contains("rank 2 ("), "{who}: the error does not name rank 2: {}", error.text);
    let JsonLine::Summary(summary) = &lines[at + 1] else { unreachable!("the summary line") };
    let summary = serde_json::to_value(&**summary).expect("results serialize");
    assert_eq!(summary["status"]["state"], "failed", "{who}: {}", summary["status"]);
    summary
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// SIGSTOP once the first size (or sweep round) is in.
    HungAfterFirstResult,
    /// SIGKILL as soon as the run has started: the ranks are allocating their buffers.
    KilledWhileAllocating,
}

fn end_a_run(experiment: &str, extra: &[&str], fault: Fault) {
    end_a_run_printing(experiment, extra, fault, true);
}

/// `json`: the run prints JSON lines, else plain tables (which the test reads as they come).
fn end_a_run_printing(experiment: &str, extra: &[&str], fault: Fault, json: bool) {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let hang = HANG_TIMEOUT_S.to_string();
    let mut args = vec!["run", "--ranks", "4", experiment, "--provider", "shm", if json { "--json" } else { "--no-tui" }, "--serve", "127.0.0.1:0"];
    args.extend(["--record", "run.efarec", "--out", "results.json", "--hang-timeout", &hang]);
    args.extend(extra);
    let mut launcher = command(&args, dir.path()).spawn().expect("start");
    let mut ours = Tracked::default();
    ours.add(launcher.id());
    let stdout = lines_of(launcher.stdout.take().expect("stdout"));
    let stderr = lines_of(launcher.stderr.take().expect("stderr"));
    let mut said = Vec::new();
    let mut printed = Vec::new();
    // The served address, then a viewer for the whole run.
    let started = Instant::now();
    let address = loop {
        if let Ok(line) = stderr.recv_timeout(Duration::from_millis(50)) {
            let found = line.strip_prefix("efatop: serving the run on ").map(String::from);
            said.push(line);
            if let Some(address) = found {
                break address;
            }
        }
        assert!(started.elapsed() < Duration::from_mins(1), "{experiment}: never served; stderr {said:?}");
    };
    let mut viewer = command(&["attach", &address, "--json"], dir.path()).spawn().expect("attach");
    ours.add(viewer.id());
    let viewer_stream = lines_of(viewer.stdout.take().expect("stdout"));
    let mut viewer_err = viewer.stderr.take().expect("stderr");
    // The moment to strike.
    let wanted: &[&str] = match fault {
        Fault::HungAfterFirstResult => &["result", "sweep_round"],
        Fault::KilledWhileAllocating => &["run"],
    };
    loop {
        let line = stdout.recv_timeout(Duration::from_mins(2)).unwrap_or_else(|_| panic!("{experiment}: no {wanted:?} line in 120 s"));
        // Plain output: the header's first line, and each size's row as it comes (4 ranks: after the header).
        let plain_hit = match fault {
            Fault::KilledWhileAllocating => line.starts_with("# efatop "),
            Fault::HungAfterFirstResult => line.contains(": NIC/app"),
        };
        let hit = if json { kind(&line).is_some_and(|k| wanted.contains(&k)) } else { plain_hit };
        printed.push(line);
        if hit {
            break;
        }
    }
    ours.add_descendants(launcher.id());
    let victim = rank_pid(launcher.id(), 2).expect("rank 2's process");
    let signal = match fault {
        Fault::HungAfterFirstResult => "-STOP",
        Fault::KilledWhileAllocating => "-KILL",
    };
    assert!(Command::new("kill").args([signal, &victim.to_string()]).status().expect("kill").success());
    let code = wait(&mut launcher, Duration::from_secs(HANG_TIMEOUT_S + 30), experiment);
    ours.add_descendants(launcher.id());
    printed.extend(rest(&stdout, Duration::from_secs(5)));
    said.extend(rest(&stderr, Duration::from_secs(5)));
    let who = format!("{experiment} {fault:?}");
    println!("{who}: exit {code:?}; stderr:\n{}", said.join("\n"));
    assert_eq!(code, Some(1), "{who}: exit code; stderr {said:?}");
    assert!(said.iter().any(|l| l.starts_with("efatop: error: rank 2 (")), "{who}: rank 2 not named on stderr: {said:?}");
    if matches!(fault, Fault::HungAfterFirstResult) {
        assert!(said.iter().any(|l| l.contains("stopped responding")), "{who}: {said:?}");
    }
    // The run's own JSON: error, then the summary of what was measured; or its plain tables and ending.
    let summary = if json {
        ends_with_error_then_summary(&printed, &format!("{who}: run --json"))
    } else {
        let text = printed.join("\n");
        assert!(text.contains("# the run failed: rank 2 ("), "{who}: the plain ending does not say how the run ended:\n{text}");
        serde_json::from_slice(&std::fs::read(dir.path().join("results.json")).expect("results file")).expect("results parse")
    };
    // The results file: parses, failed with the reason, and the same sizes as the summary.
    let file: Value = serde_json::from_slice(&std::fs::read(dir.path().join("results.json")).expect("results file")).expect("results parse");
    assert_eq!(file["status"]["state"], "failed", "{who}: {}", file["status"]);
    assert!(file["status"]["reason"].as_str().is_some_and(|r| r.contains("rank 2 (")), "{who}: {}", file["status"]);
    assert_eq!(measured(&file), measured(&summary), "{who}: results file and summary disagree");
    if matches!(fault, Fault::HungAfterFirstResult) {
        assert!(measured(&file) >= 1, "{who}: the sizes measured before the hang are lost");
    }
    // The viewer: the same ending, exit 1.
    let viewer_code = wait(&mut viewer, Duration::from_secs(15), "attach");
    let viewer_lines = rest(&viewer_stream, Duration::from_secs(5));
    let mut viewer_said = String::new();
    let _ = viewer_err.read_to_string(&mut viewer_said);
    let viewer_summary = ends_with_error_then_summary(&viewer_lines, &format!("{who}: attach --json"));
    assert_eq!(viewer_code, Some(1), "{who}: attach exit code; stderr {viewer_said}");
    assert_eq!(measured(&viewer_summary), measured(&file), "{who}: attach's summary");
    // The recording: the same ending, exit 1.
    let replay = command(&["replay", "run.efarec", "--json"], dir.path()).output().expect("replay");
    let replay_lines: Vec<String> = String::from_utf8_lossy(&replay.stdout).lines().map(String::from).collect();
    let replay_summary = ends_with_error_then_summary(&replay_lines, &format!("{who}: replay --json"));
    assert_eq!(replay.status.code(), Some(1), "{who}: replay exit code; stderr {}", String::from_utf8_lossy(&replay.stderr));
    assert_eq!(measured(&replay_summary), measured(&file), "{who}: replay's summary");
    // Nothing of ours left.
    let until = Instant::now() + Duration::from_secs(10);
    while !ours.alive().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = ours.alive();
    ours.kill_all();
    assert!(left.is_empty(), "{who}: processes left: {left:?}");
}

const SMALL: &[&str] = &["--min-size", "64K", "--max-size", "16M", "--iters", "200"];
const BIG: &[&str] = &["--min-size", "1G", "--max-size", "1G", "--iters", "5"];

#[test]
fn write_hung_rank() {
    end_a_run("write", SMALL, Fault::HungAfterFirstResult);
}

#[test]
fn write_rank_killed_while_allocating() {
    end_a_run("write", BIG, Fault::KilledWhileAllocating);
}

#[test]
fn sendrecv_hung_rank() {
    end_a_run("sendrecv", SMALL, Fault::HungAfterFirstResult);
}

#[test]
fn sendrecv_rank_killed_while_allocating() {
    end_a_run("sendrecv", BIG, Fault::KilledWhileAllocating);
}

#[test]
fn alltoall_hung_rank() {
    end_a_run("alltoall", SMALL, Fault::HungAfterFirstResult);
}

#[test]
fn alltoall_rank_killed_while_allocating() {
    end_a_run("alltoall", &["--min-size", "256M", "--max-size", "256M", "--iters", "5"], Fault::KilledWhileAllocating);
}

#[test]
fn sweep_hung_rank() {
    end_a_run("sweep", &["--size", "4M"], Fault::HungAfterFirstResult);
}

#[test]
fn sweep_rank_killed_while_allocating() {
    end_a_run("sweep", &["--size", "256M"], Fault::KilledWhileAllocating);
}

#[test]
fn write_hung_rank_plain_tables() {
    end_a_run_printing("write", SMALL, Fault::HungAfterFirstResult, false);
}

/// The launcher itself is asked to stop (a batch system's SIGTERM, Ctrl-C's SIGINT to it alone): it passes
/// the signal on to rank 0, which ends the run through its ending (tables, results file with the reason,
/// the signal's exit code); no rank outlives the launcher.
fn stop_the_launcher(signal: &str, code: i32, reason: &str) {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let args = ["run", "--ranks", "3", "write", "--provider", "shm", "--no-tui", "--min-size", "64K", "--max-size", "256M"];
    let mut launcher = command(&[&args[..], &["--iters", "1000", "--out", "results.json"]].concat(), dir.path()).spawn().expect("start");
    let mut ours = Tracked::default();
    ours.add(launcher.id());
    let stdout = lines_of(launcher.stdout.take().expect("stdout"));
    let stderr = lines_of(launcher.stderr.take().expect("stderr"));
    let mut printed = Vec::new();
    // Once the first size is in (minutes remain: 256M × 1000 at the end).
    loop {
        let line = stdout.recv_timeout(Duration::from_mins(2)).expect("a first size within 120 s");
        let hit = line.contains(": NIC/app");
        printed.push(line);
        if hit {
            break;
        }
    }
    ours.add_descendants(launcher.id());
    assert!(Command::new("kill").args([signal, &launcher.id().to_string()]).status().expect("kill").success());
    let exit = wait(&mut launcher, Duration::from_secs(30), signal);
    printed.extend(rest(&stdout, Duration::from_secs(5)));
    let said = rest(&stderr, Duration::from_secs(5));
    assert_eq!(exit, Some(code), "{signal}: stderr {said:?}");
    assert!(said.iter().any(|l| l.starts_with(&format!("efatop: error: {reason}"))), "{signal}: {said:?}");
    let text = printed.join("\n");
    assert!(text.contains(&format!("# the run failed: {reason}")) && text.contains("| Size |"), "{signal}: no tables:\n{text}");
    let file: Value = serde_json::from_slice(&std::fs::read(dir.path().join("results.json")).expect("results file")).expect("results parse");
    assert_eq!(file["status"]["state"], "failed", "{signal}: {}", file["status"]);
    assert!(file["status"]["reason"].as_str().is_some_and(|r| r.starts_with(reason)), "{signal}: {}", file["status"]);
    assert!(measured(&file) >= 1, "{signal}: the sizes measured are lost");
    let until = Instant::now() + Duration::from_secs(10);
    while !ours.alive().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = ours.alive();
    ours.kill_all();
    assert!(left.is_empty(), "{signal}: ranks outlived the launcher: {left:?}");
}

#[test]
fn a_sigterm_to_the_launcher_ends_the_run_with_its_tables_and_no_rank_left() {
    stop_the_launcher("-TERM", 143, "stopped by SIGTERM");
}

#[test]
fn a_sigint_to_the_launcher_ends_the_run_with_its_tables_and_no_rank_left() {
    stop_the_launcher("-INT", 130, "stopped by SIGINT");
}

/// A run that ended well: each rank's process closes its world, writes what it writes, and ends through
/// `_exit`, so libfabric's exit handler (`fi_fini`, which frees the providers and destroys the memory
/// monitor's locks while the process's other threads still run) never runs in it (docs/endings.md). With
/// `FI_LOG_LEVEL=info` libfabric logs its providers' teardown there (`psmx_fini()` in 1.17): `fi_info -l`,
/// a program that ends through it, shows such lines (the control that the log would show it); the ranks of
/// a 2-rank run that ended well (exit 0, results written) show libfabric's lines and none of those.
#[test]
fn a_rank_that_ended_well_ends_without_libfabrics_exit_handler() {
    let _one = serial();
    let teardown = |stderr: &str| -> Vec<String> {
        stderr.lines().filter(|l| l.starts_with("libfabric:") && l.contains("_fini()")).map(str::to_string).collect()
    };
    let dir = tempfile::tempdir().expect("dir");
    let mut control = Command::new("fi_info");
    control.arg("-l").env("FI_LOG_LEVEL", "info").current_dir(dir.path()).stdout(Stdio::null()).stderr(Stdio::piped());
    if let Some(path) = library_path() {
        control.env("LD_LIBRARY_PATH", path);
    }
    let control = control.output().expect("fi_info (libfabric-bin, which scripts/build/setup-debian installs)");
    let control = String::from_utf8_lossy(&control.stderr);
    assert!(!teardown(&control).is_empty(), "fi_info -l logged no provider teardown at its exit, so this check could not tell:\n{control}");
    let out = dir.path().join("results.json");
    let mut run = command(
        &["run", "--ranks", "2", "write", "--provider", "shm", "--max-size", "4K", "--no-tui", "--out", out.to_str().expect("utf-8")],
        dir.path(),
    );
    let run = run.env("FI_LOG_LEVEL", "info").output().expect("efatop run");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr}");
    assert!(out.exists(), "the results file is written before the rank ends");
    assert!(stderr.lines().any(|l| l.starts_with("libfabric:")), "the ranks logged nothing of libfabric's: {stderr}");
    let lines = teardown(&stderr);
    assert!(lines.is_empty(), "a rank ran libfabric's exit handler: {lines:?}");
}
