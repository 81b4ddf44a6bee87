//! Every bad input ends in one line on stderr naming the flag (and the allowed values where there is a
//! list), exit code 2, and no hang; conflicting or repeated flags name both, and nothing is written.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{efatop, efatop_path, library_path, serial};

#[test]
fn bad_input_table() {
    let _one = serial();
    let cases: &[(&[&str], &[&str])] = &[
        (&["write", "--provider", "a b"], &["--provider", "auto, efa, efa-direct, shm, tcp, udp, sockets"]),
        (&["write", "--min-size", "3K"], &["--min-size", "not a power of two"]),
        (&["write", "--max-size", "8G"], &["--max-size", "sizes run from 4 to 4G"]),
        (&["write", "--max-size", "12"], &["--max-size", "not a power of two"]),
        (&["sendrecv", "--min-size", "1M", "--max-size", "64K"], &["--min-size 1M is larger than --max-size 64K"]),
        (&["write", "--channels", "0"], &["--channels", "or `all`"]),
        (&["write", "--channels", "many"], &["--channels", "or `all`"]),
        (&["write", "--configs", "single,bogus"], &["--configs", "possible values: single, multi, roundrobin"]),
        (&["write", "--iters", "0"], &["--iters"]),
        (&["write", "--window", "0"], &["--window"]),
        (&["write", "--completion", "soon"], &["--completion", "possible values: auto, transmit, delivery"]),
        (&["write", "--link-gbps", "-3"], &["--link-gbps", "above 0"]),
        (&["write", "--timeout", "0"], &["--timeout"]),
        (&["write", "--hang-timeout", "0"], &["--hang-timeout", "1..=86400"]),
        (&["write", "--hang-timeout", "soon"], &["--hang-timeout"]),
        (&["run", "--ranks", "1", "write"], &["--ranks 1", "at least 2 ranks"]),
        (&["run", "--ranks", "1", "sendrecv"], &["--ranks 1", "at least 2 ranks"]),
        (&["run", "--ranks", "0", "write"], &["--ranks"]),
        (&["write", "--provider", "shm"], &["--ranks", "efatop run --ranks N write"]),
        (&["run", "--ranks", "2", "write", "--provider", "efa"], &["no efa interface", "fi_info -l"]),
        (&["run", "--ranks", "2", "write", "--provider", "efa-direct"], &["no efa-direct interface", "fi_info -l"]),
        (&["run", "--ranks", "2", "sendrecv", "--provider", "efa-direct"], &["no efa-direct interface", "fi_info -l"]),
        // Any provider name is accepted and looked up; one this libfabric lacks ends in the same one line.
        (&["run", "--ranks", "2", "write", "--provider", "verbs"], &["no verbs interface", "fi_info -l"]),
        (&["write", "--memory", "gpu"], &["--memory", "possible values: host, device"]),
        (&["write", "--gpu", "first"], &["--gpu", "or `auto`"]),
        (&["write", "--interval", "5ms"], &["--interval", "10ms to 10s"]),
        (&["run", "--ranks", "2", "--netns", "no-such-node", "write"], &["--netns", "ip netns list"]),
        (
            &["run", "--ranks", "2", "write", "--provider", "shm", "--max-size", "4K", "--out", "/nonexistent/dir/r.json"],
            &["--out", "/nonexistent/dir/r.json"],
        ),
        (&["run", "--ranks", "2", "alltoall", "--provider", "shm", "--window", "4"], &["--window 4", "takes 1"]),
        (&["alltoall", "--configs", "pairwise"], &["--configs", "possible values: single, multi, roundrobin"]),
        (&["write", "--telemetry-ab", "2", "--iters", "24"], &["--telemetry-ab 2", "--iters 24", "multiple of 32"]),
        (&["sendrecv", "--telemetry-ab", "1", "--iters", "8"], &["--telemetry-ab", "sendrecv", "write or alltoall"]),
        (&["write", "--warmup", "many"], &["--warmup"]),
        (&["write", "--iters", "x"], &["--iters"]),
        (&["write", "--timeout", "99999"], &["--timeout", "1..=3600"]),
        (&["write", "--interval", "1h"], &["--interval", "10ms to 10s"]),
        (&["write", "--min-size", "0"], &["--min-size"]),
        (&["run", "--ranks", "99999", "write"], &["--ranks"]),
        (&["report", "/nonexistent/run.json"], &["/nonexistent/run.json", "cannot read"]),
        (&["report", "--format", "xml", "/dev/null"], &["--format", "possible values: table, csv, md, json"]),
        (&["compare", "a.json", "b.json", "--threshold", "abc"], &["--threshold", "percentage"]),
        (&["monitor", "--interval", "0s"], &["--interval", "10ms to 60s"]),
        (&["write", "--interval", "100"], &["--interval", "10ms to 10s", "a bare number is seconds"]),
        (&["check", "--window", "fast"], &["--window", "10ms to 20s"]),
        (&["watch", "--listen", "0", "--window", "11m"], &["--window", "1..=600 seconds"]),
        (&["watch", "--listen", "0", "--hang-after", "1500ms"], &["--hang-after", "whole seconds"]),
        (&["monitor", "--sysfs-root", "/nonexistent/sysfs", "--once"], &["--sysfs-root"]),
        (&["topo", "--from-xml", "/nonexistent/topo.xml"], &["--from-xml /nonexistent/topo.xml", "cannot read"]),
        (&["queue", "--blocks", "0"], &["--blocks", "1..=65536"]),
        (&["write", "--json", "--json-samples", "most"], &["--json-samples", "possible values: auto, every, rails"]),
        (&["write", "--json-samples", "rails"], &["--json-samples", "auto, every or rails", "needs --json"]),
        (&["queue", "--ring", "fast"], &["--ring", "possible values: warp, seed"]),
        (&["proxy", "--chunk", "3K"], &["--chunk", "not a power of two", "`whole`"]),
        (&["ipc", "--block", "48"], &["--block", "a multiple of 32 from 32 to 1024"]),
        (&["ipc", "--block", "2048"], &["--block", "a multiple of 32 from 32 to 1024"]),
        (&["ipc", "--grid", "0"], &["--grid", "1..=65535"]),
        (&["ipc", "--sweep", "--grid", "4"], &["--sweep", "--grid"]),
        (&["run", "--ranks", "2", "ipc", "--memory", "device"], &["--memory", "ipc always moves GPU memory"]),
        (&["run", "--ranks", "2", "ipc", "--min-size", "2M", "--max-size", "1M"], &["--min-size 2M is larger than --max-size 1M"]),
        // No GPU 64 anywhere: refused with the experiment named, on CI (no driver) and on GPU machines alike.
        (&["run", "--ranks", "2", "ipc", "--gpu", "64"], &["ipc: no CUDA device"]),
    ];
    for (args, needles) in cases {
        let run = efatop(args);
        assert_eq!(run.code, Some(2), "{args:?}: stdout {} stderr {}", run.stdout, run.stderr);
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?} should print one line: {lines:?}");
        assert!(lines[0].starts_with("efatop: error: "), "{args:?}: {lines:?}");
        for needle in *needles {
            assert!(lines[0].contains(needle), "{args:?}: `{needle}` missing from {lines:?}");
        }
        assert!(!run.stderr.contains("panicked"), "{args:?}");
    }
}

#[test]
fn help_lists_every_experiment_and_flag() {
    let run = efatop(&["write", "--help"]);
    assert_eq!(run.code, Some(0));
    for flag in ["--provider", "--channels", "--min-size", "--max-size", "--warmup", "--iters", "--window", "--link-gbps", "--out", "--timeout", "--hang-timeout", "--configs"] {
        assert!(run.stdout.contains(flag), "{flag} missing from help:\n{}", run.stdout);
    }
    assert!(!run.stdout.contains("debug-corrupt"), "testing aids stay hidden");
    let run = efatop(&["--help"]);
    for command in ["write", "sendrecv", "run", "ipc"] {
        assert!(run.stdout.contains(command), "{}", run.stdout);
    }
}

/// Device memory on a machine without a GPU (CI) is refused up front, once, with exit code 2; on a GPU
/// machine a GPU index past the last one is.
#[test]
fn device_memory_without_the_device_is_refused() {
    let _one = serial();
    let run = efatop(&["run", "--ranks", "2", "write", "--provider", "shm", "--memory", "device", "--gpu", "64", "--max-size", "4K"]);
    assert_eq!(run.code, Some(2), "{}\n{}", run.stdout, run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("efatop: error: --memory device: no CUDA device"), "{lines:?}");
}

/// Runs efatop in `dir` (its working directory), killing it if it takes more than two minutes.
fn efatop_in(dir: &Path, args: &[&str]) -> common::Run {
    let started = Instant::now();
    let mut command = Command::new(efatop_path());
    command.args(args).current_dir(dir).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(path) = library_path() {
        command.env("LD_LIBRARY_PATH", path);
    }
    let child = command.spawn().expect("efatop starts");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || send.send(child.wait_with_output()));
    let Ok(output) = receive.recv_timeout(Duration::from_mins(2)) else {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        panic!("efatop {args:?} did not finish within 2 minutes");
    };
    let output = output.expect("efatop's output");
    common::Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        elapsed: started.elapsed(),
    }
}

/// Runs `args` in a fresh, empty working directory and checks the verdict: exit code 2, one line on stderr
/// that names every needle, nothing on stdout, and the directory still empty (no results file, no
/// `efatop-results/`, no recording). Relative paths in `args` land in that directory.
fn refused_and_nothing_written(args: &[&str], needles: &[&str]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = efatop_in(dir.path(), args);
    assert_eq!(run.code, Some(2), "{args:?}: stdout {} stderr {}", run.stdout, run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?} should print one line: {lines:?}");
    assert!(lines[0].starts_with("efatop: error: "), "{args:?}: {lines:?}");
    for needle in needles {
        assert!(lines[0].contains(needle), "{args:?}: `{needle}` missing from {lines:?}");
    }
    assert!(run.stdout.is_empty(), "{args:?}: {}", run.stdout);
    let left: Vec<String> =
        std::fs::read_dir(dir.path()).expect("read dir").map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned()).collect();
    assert!(left.is_empty(), "{args:?} wrote {left:?}");
}

/// Two outputs on one file, two listeners on one port, a configuration or memory given twice, a folder that
/// does not exist: refused before any rank starts, one line naming the flag(s), exit 2, nothing written.
#[test]
fn conflicting_or_repeated_flags_are_refused_before_anything_is_written() {
    let _one = serial();
    let with = |more: &[&'static str]| [&["run", "--ranks", "2", "write", "--provider", "shm", "--max-size", "4K"][..], more].concat();
    let cases: Vec<(Vec<&str>, &[&str])> = vec![
        (with(&["--out", "x", "--record", "x"]), &["--out and --record both name x"]),
        (with(&["--out", "./x", "--record", "x"]), &["--out and --record both name"]),
        (with(&["--out", "/tmp/efatop-one-file", "--record", "/tmp/../tmp/efatop-one-file"]), &["--out and --record both name"]),
        (with(&["--out", "sub/../x", "--record", "x"]), &["--out sub/../x", "there is no directory sub/.."]),
        (with(&["--serve", "127.0.0.1:7421", "--prometheus", "127.0.0.1:7421"]), &["--serve 127.0.0.1:7421", "--prometheus 127.0.0.1:7421"]),
        (with(&["--serve", "7421", "--prometheus", "0.0.0.0:7421"]), &["--serve 127.0.0.1:7421", "--prometheus 0.0.0.0:7421"]),
        (with(&["--configs", "single,single"]), &["--configs", "single is given twice"]),
        (with(&["--configs", "multi,roundrobin,multi"]), &["--configs", "multi is given twice"]),
        (with(&["--memory", "host,host"]), &["--memory", "host is given twice"]),
        (with(&["--memory", "device,staged", "--staged"]), &["--memory device,staged", "--staged"]),
        (with(&["--record", "missing/r.efarec"]), &["--record missing/r.efarec", "no directory missing"]),
        (with(&["--out", "missing/r.json"]), &["--out missing/r.json", "no directory missing"]),
        (with(&["--out", "."]), &["--out .", "is a directory"]),
        (vec!["run", "--ranks", "2", "alltoall", "--configs", "multi,multi"], &["--configs", "multi is given twice"]),
        (vec!["run", "--ranks", "2", "proxy", "--configs", "single,single"], &["--configs", "single is given twice"]),
        (vec!["run", "--ranks", "2", "ipc", "--grid", "1,16,1"], &["--grid", "1 is given twice"]),
        (vec!["write", "--configs", "single,single"], &["--configs", "single is given twice"]),
        (vec!["monitor", "--once", "--serve", "7421", "--prometheus", "127.0.0.1:7421"], &["--serve", "--prometheus"]),
        (vec!["monitor", "--once", "--record", "missing/m.efarec"], &["--record missing/m.efarec"]),
    ];
    for (args, needles) in &cases {
        refused_and_nothing_written(args, needles);
    }
}

/// A bad number names its flag and the range (clap would read `-5` as a flag of its own); an unknown
/// experiment lists the known ones.
#[test]
fn a_bad_number_names_its_flag_and_an_unknown_experiment_lists_the_known_ones() {
    let experiments = "write, sendrecv, alltoall, proxy, ipc, sweep";
    let cases: &[(&[&str], &[&str])] = &[
        (&["write", "--iters", "-5"], &["--iters", "-5 is not in 1..=1000000"]),
        (&["write", "--warmup", "-1"], &["--warmup", "0..=1000000"]),
        (&["write", "--window", "-2"], &["--window", "1..=1024"]),
        (&["write", "--hang-timeout", "-60"], &["--hang-timeout", "1..=86400"]),
        (&["write", "--channels", "-1"], &["--channels", "from 1 to 256"]),
        (&["write", "--min-size", "-4096"], &["--min-size", "not a size"]),
        (&["run", "--ranks", "-2", "write"], &["--ranks", "1..=4096"]),
        (&["ipc", "--grid", "-1"], &["--grid", "1..=65535"]),
        (&["monitor", "--count", "-1"], &["--count", "1..=1000000000"]),
        (&["writ"], &["writ", experiments]),
        (&["run", "--ranks", "2", "bogus"], &["bogus", experiments]),
    ];
    for (args, needles) in cases {
        refused_and_nothing_written(args, needles);
    }
}

/// Bad input the world decides (the provider, the GPU, the port): refused, and no results file either.
/// Today rank 0 creates its results file before the world is set up, so these wait for rank 0's loop
/// that makes it once the world is established.
#[test]
fn bad_input_found_while_the_world_is_set_up_writes_no_results_file() {
    let _one = serial();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = taken.local_addr().expect("address").port().to_string();
    let with = |more: &[&'static str]| [&["run", "--ranks", "2", "write", "--max-size", "4K"][..], more].concat();
    let mut in_use = with(&["--provider", "shm", "--serve"]);
    in_use.push(&port);
    let cases: Vec<(Vec<&str>, &[&str])> = vec![
        (with(&["--provider", "nosuchprov"]), &["no nosuchprov interface", "fi_info -l"]),
        (with(&["--provider", "efa"]), &["no efa interface", "fi_info -l"]),
        (with(&["--provider", "shm", "--memory", "device", "--gpu", "64"]), &["--memory device: no CUDA device"]),
        (in_use, &["--serve", "cannot listen"]),
    ];
    for (args, needles) in &cases {
        refused_and_nothing_written(args, needles);
    }
    drop(taken);
}
