//! A rank that dies (SIGKILL) or hangs (SIGSTOP) mid-run, under both launchers: rank 0 names it and its
//! host within 5 s, every rank has ended within 10 s with a non-zero exit code, no efatop process is left,
//! and the results file keeps every size finished before the failure.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{efatop_path, serial};

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

fn descendants(root: u32) -> Vec<u32> {
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        if let Ok(children) = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")) {
            found.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
        i += 1;
    }
    found
}

fn measured(results: &std::path::Path) -> usize {
    std::fs::read(results)
        .ok()
        .and_then(|bytes| efatop_experiments::RunResults::from_json(&bytes).ok())
        .map_or(0, |r| r.measurements.len())
}

struct Outcome {
    code: Option<i32>,
    stderr: String,
    /// From the signal to the launcher's exit.
    ended_after: Duration,
    kept: usize,
    kept_before_signal: usize,
}

fn fail_a_rank_mid_run(mpirun: bool, signal: &str) -> Outcome {
    let dir = tempfile::tempdir().expect("tempdir");
    let results = dir.path().join("results.json");
    let efatop = efatop_path();
    let experiment = [
        "write", "--provider", "shm", "--min-size", "64K", "--max-size", "64M", "--iters", "300", "--no-tui", "--out",
        results.to_str().expect("utf-8"),
    ];
    let mut command = if mpirun {
        let mut c = Command::new("mpirun");
        c.args(["--allow-run-as-root", "--oversubscribe", "-np", "4"]).arg(&efatop).args(experiment);
        c
    } else {
        let mut c = Command::new(&efatop);
        c.args(["run", "--ranks", "4"]).args(experiment);
        c
    };
    let mut launcher = command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("start");
    let started = Instant::now();
    while measured(&results) < 2 {
        assert!(started.elapsed() < Duration::from_secs(90), "no size finished within 90 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let victim = rank_pid(launcher.id(), 2).expect("rank 2's process");
    let kept_before_signal = measured(&results);
    let signalled = Instant::now();
    assert!(Command::new("kill").args([&format!("-{signal}"), &victim.to_string()]).status().expect("kill").success());
    let status = loop {
        if let Some(status) = launcher.try_wait().expect("wait") {
            break status;
        }
        if signalled.elapsed() > Duration::from_secs(30) {
            let _ = Command::new("pkill").args(["-CONT", "-x", "efatop"]).status();
            let _ = Command::new("pkill").args(["-KILL", "-x", "efatop"]).status();
            let _ = launcher.kill();
            panic!("the run was still going 30 s after rank 2 got SIG{signal}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let ended_after = signalled.elapsed();
    let mut stderr = String::new();
    std::io::Read::read_to_string(launcher.stderr.as_mut().expect("stderr"), &mut stderr).expect("stderr");
    // Nothing left behind: not the stopped rank, not the ones that waited on it. mpirun may exit a moment
    // before the ranks it signalled are gone; they must be gone within the 10 s all the same.
    let left = loop {
        let left = Command::new("pgrep").args(["-x", "efatop"]).output().expect("pgrep").stdout;
        if left.is_empty() || signalled.elapsed() > Duration::from_secs(10) {
            break left;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let ended_after = ended_after.max(signalled.elapsed());
    if !left.is_empty() {
        let _ = Command::new("pkill").args(["-CONT", "-x", "efatop"]).status();
        let _ = Command::new("pkill").args(["-KILL", "-x", "efatop"]).status();
        panic!("efatop processes left 10 s after the signal: {}", String::from_utf8_lossy(&left));
    }
    Outcome { code: status.code(), stderr, ended_after, kept: measured(&results), kept_before_signal }
}

fn assert_named_and_bounded(outcome: &Outcome, how: &str) {
    let host = efatop_experiments::world::hostname();
    println!("{how}: ended {:.2} s after the signal, exit {:?}, {} sizes kept; stderr:\n{}", outcome.ended_after.as_secs_f64(), outcome.code, outcome.kept, outcome.stderr);
    assert!(outcome.code.is_some_and(|c| c != 0), "{how}: exit code {:?}", outcome.code);
    // Ours, or mpirun's when it ended the job before rank 0 could speak.
    let named = outcome.stderr.contains(&format!("rank 2 ({host}"))
        || (outcome.stderr.contains("process rank 2 ") && outcome.stderr.contains(&format!("on node {host}")));
    assert!(named, "{how}: rank 2 and its host not named:\n{}", outcome.stderr);
    // Named within 5 s: rank 0 prints the name as it ends, and the whole run ends within 10 s.
    assert!(outcome.ended_after < Duration::from_secs(10), "{how}: took {:?}", outcome.ended_after);
    assert!(outcome.kept >= outcome.kept_before_signal, "{how}: sizes lost: {} < {}", outcome.kept, outcome.kept_before_signal);
}

#[test]
fn a_killed_rank_is_named_and_the_run_ends_keeping_its_results() {
    let _one = serial();
    let outcome = fail_a_rank_mid_run(false, "KILL");
    assert_named_and_bounded(&outcome, "efatop run, SIGKILL");
    assert!(outcome.ended_after < Duration::from_secs(5), "named within 5 s: {:?}", outcome.ended_after);
}

#[test]
fn a_stopped_rank_is_named_by_the_heartbeat_and_the_run_ends() {
    let _one = serial();
    let outcome = fail_a_rank_mid_run(false, "STOP");
    assert_named_and_bounded(&outcome, "efatop run, SIGSTOP");
    assert!(outcome.stderr.contains("stopped responding: no telemetry for"), "{}", outcome.stderr);
    assert!(outcome.ended_after < Duration::from_secs(5), "named within 5 s: {:?}", outcome.ended_after);
}

#[test]
fn under_mpirun_a_killed_or_stopped_rank_ends_the_job() {
    let _one = serial();
    for signal in ["KILL", "STOP"] {
        let outcome = fail_a_rank_mid_run(true, signal);
        assert_named_and_bounded(&outcome, &format!("mpirun, SIG{signal}"));
    }
}
