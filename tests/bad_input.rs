//! Every bad input ends in one line on stderr naming the flag (and the allowed values where there is a
//! list), exit code 2, and no hang.

mod common;

use common::{efatop, serial};

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
        (&["monitor", "--sysfs-root", "/nonexistent/sysfs", "--once"], &["--sysfs-root"]),
        (&["topo", "--from-xml", "/nonexistent/topo.xml"], &["--from-xml /nonexistent/topo.xml", "cannot read"]),
        (&["queue", "--blocks", "0"], &["--blocks", "1..=65536"]),
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
        (&["bench-collector", "--hz", "0"], &["--hz"]),
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
