//! A rank that dies (SIGKILL) or hangs (SIGSTOP) mid-run, under both launchers: rank 0 names it and its
//! host (a killed rank within 5 s, a stopped one within `--hang-timeout` + 5 s), every rank has ended soon
//! after with a non-zero exit code, none of the processes this test started is left, and the results file
//! parses, keeps every size finished before the failure and says why the run ended.
//!
//! These tests signal only processes they started: the launcher they spawn and the ranks found below it
//! (by parent pid), never every efatop on the machine.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{descendants, efatop_path, serial, Tracked};

/// The `--hang-timeout` these tests run with: a stopped rank is named this long after it fell silent.
const HANG_TIMEOUT_S: u64 = 5;

/// The pid of the efatop process whose environment says it is `rank` (`EFATOP_RANK` from our launcher,
/// `OMPI_COMM_WORLD_RANK` from mpirun), among the descendants of `root`.
fn rank_pid(root: u32, rank: usize) -> Option<u32> {
    let wanted = [format!("EFATOP_RANK={rank}"), format!("OMPI_COMM_WORLD_RANK={rank}")];
    descendants(root).into_iter().find(|pid| {
        std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|var| wanted.iter().any(|w| var == w.as_bytes())))
            && std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "efatop")
    })
}

fn measured(results: &std::path::Path) -> usize {
    std::fs::read(results)
        .ok()
        .and_then(|bytes| efatop_proto::RunResults::from_json(&bytes).ok())
        .map_or(0, |r| r.measurements.len())
}

struct Outcome {
    code: Option<i32>,
    stderr: String,
    /// From the signal to the launcher's exit.
    ended_after: Duration,
    kept: usize,
    kept_before_signal: usize,
    /// The results file as it was left: it must parse.
    results: Result<efatop_proto::RunResults, String>,
}

fn fail_a_rank_mid_run(mpirun: bool, signal: &str) -> Outcome {
    let dir = tempfile::tempdir().expect("tempdir");
    let results = dir.path().join("results.json");
    let efatop = efatop_path();
    let hang_timeout = HANG_TIMEOUT_S.to_string();
    let experiment = [
        "write", "--provider", "shm", "--min-size", "64K", "--max-size", "64M", "--iters", "300", "--no-tui",
        "--hang-timeout", &hang_timeout, "--out", results.to_str().expect("utf-8"),
    ];
    let mut command = if mpirun {
        let mut c = common::command_in("mpirun", dir.path());
        c.args(["--allow-run-as-root", "--oversubscribe", "-np", "4"]).arg(&efatop).args(experiment);
        c
    } else {
        let mut c = common::efatop_in(dir.path());
        c.args(["run", "--ranks", "4"]).args(experiment);
        c
    };
    let mut launcher = command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("start");
    // Every process this run is made of, as they appear: only these are ever signalled or waited for.
    let mut ours = Tracked::default();
    ours.add(launcher.id());
    let started = Instant::now();
    while measured(&results) < 2 {
        ours.add_descendants(launcher.id());
        if started.elapsed() > Duration::from_secs(90) {
            ours.kill_all();
            let _ = launcher.kill();
            panic!("no size finished within 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    ours.add_descendants(launcher.id());
    let victim = rank_pid(launcher.id(), 2).expect("rank 2's process");
    let kept_before_signal = measured(&results);
    let signalled = Instant::now();
    assert!(Command::new("kill").args([&format!("-{signal}"), &victim.to_string()]).status().expect("kill").success());
    let limit = Duration::from_secs(HANG_TIMEOUT_S + 30);
    let status = loop {
        if let Some(status) = launcher.try_wait().expect("wait") {
            break status;
        }
        if signalled.elapsed() > limit {
            ours.kill_all();
            let _ = launcher.kill();
            panic!("the run was still going {limit:?} after rank 2 got SIG{signal}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let ended_after = signalled.elapsed();
    let mut stderr = String::new();
    std::io::Read::read_to_string(launcher.stderr.as_mut().expect("stderr"), &mut stderr).expect("stderr");
    // Nothing of ours left behind: not the stopped rank, not the ones that waited on it. mpirun may exit a
    // moment before the ranks it signalled are gone; they must be gone within 10 s of the launcher all the same.
    let left = loop {
        let left = ours.alive();
        if left.is_empty() || signalled.elapsed() > ended_after + Duration::from_secs(10) {
            break left;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if !left.is_empty() {
        ours.kill_all();
        panic!("processes of this run left 10 s after it ended: {left:?}");
    }
    let results = std::fs::read(&results)
        .map_err(|e| e.to_string())
        .and_then(|bytes| efatop_proto::RunResults::from_json(&bytes).map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&bytes))));
    Outcome { code: status.code(), stderr, ended_after, kept: results.as_ref().map_or(0, |r| r.measurements.len()), kept_before_signal, results }
}

fn assert_named_and_bounded(outcome: &Outcome, how: &str, within: Duration) {
    let host = efatop_experiments::world::hostname();
    println!("{how}: ended {:.2} s after the signal, exit {:?}, {} sizes kept; stderr:\n{}", outcome.ended_after.as_secs_f64(), outcome.code, outcome.kept, outcome.stderr);
    assert!(outcome.code.is_some_and(|c| c != 0), "{how}: exit code {:?}", outcome.code);
    // Ours, or mpirun's when it ended the job before rank 0 could speak.
    let named = outcome.stderr.contains(&format!("rank 2 ({host}"))
        || (outcome.stderr.contains("process rank 2 ") && outcome.stderr.contains(&format!("on node {host}")));
    assert!(named, "{how}: rank 2 and its host not named:\n{}", outcome.stderr);
    // Rank 0 prints the name as it ends: the launcher's exit bounds when it was named.
    assert!(outcome.ended_after < within, "{how}: took {:?} (limit {within:?})", outcome.ended_after);
    let results = outcome.results.as_ref().unwrap_or_else(|e| panic!("{how}: the results file does not parse: {e}"));
    assert!(outcome.kept >= outcome.kept_before_signal, "{how}: sizes lost: {} < {}", outcome.kept, outcome.kept_before_signal);
    // Why it ended is in the file, unless mpirun ended rank 0 before it could say.
    let status = results.status.as_ref().expect("a status");
    if named && outcome.stderr.contains(&format!("rank 2 ({host}")) && !outcome.stderr.contains("process rank 2 ") {
        assert_eq!(status.state, efatop_proto::results::RunState::Failed, "{how}: {status:?}");
        assert!(status.reason.as_deref().is_some_and(|r| r.contains("rank 2")), "{how}: {status:?}");
    }
}

#[test]
fn a_killed_rank_is_named_and_the_run_ends_keeping_its_results() {
    let _one = serial();
    let outcome = fail_a_rank_mid_run(false, "KILL");
    assert_named_and_bounded(&outcome, "efatop run, SIGKILL", Duration::from_secs(5));
}

#[test]
fn a_stopped_rank_is_named_after_the_hang_timeout_and_the_run_ends() {
    let _one = serial();
    let outcome = fail_a_rank_mid_run(false, "STOP");
    assert_named_and_bounded(&outcome, "efatop run, SIGSTOP", Duration::from_secs(HANG_TIMEOUT_S + 5));
    assert!(outcome.stderr.contains("stopped responding: no telemetry for"), "{}", outcome.stderr);
    assert!(outcome.stderr.contains(&format!("past --hang-timeout {HANG_TIMEOUT_S} s")), "{}", outcome.stderr);
    // Not before the hang timeout: a rank silent for less is slow, not hung.
    assert!(outcome.ended_after >= Duration::from_secs(HANG_TIMEOUT_S - 1), "named too early: {:?}", outcome.ended_after);
}

#[test]
fn under_mpirun_a_killed_or_stopped_rank_ends_the_job() {
    let _one = serial();
    for (signal, within) in [("KILL", 10), ("STOP", HANG_TIMEOUT_S + 10)] {
        let outcome = fail_a_rank_mid_run(true, signal);
        assert_named_and_bounded(&outcome, &format!("mpirun, SIG{signal}"), Duration::from_secs(within));
    }
}
