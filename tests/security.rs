//! The attacks a security-minded operator would try against a run on a shared node, each from another
//! process on loopback (this test's), and where the user matters from another uid (`nobody`, through
//! `setpriv`, when the tests run as root). Each must be refused: the run completes, no forged figure
//! reaches any output, rank 0 stays small, and no listener of the run is on a wildcard address.
//!
//! These tests signal only processes they started: the launcher they spawn and the ranks found below it.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{TEST_TOKEN, Tracked, descendants, efatop_path, library_path, lines_of, rank_pid, serial};
use efatop_testkit::{JsonLine, data_value};
use efatop_proto::output::Sample;
use efatop_proto::telemetry::wire;
use efatop_proto::telemetry::{ChannelSample, PhaseReport, RankSample};
use serde_json::Value;

/// The bytes every forged sample claims: a figure no real interval of these runs comes near.
const FORGED_BYTES: u64 = 100_000_000_000_000;
/// Rank 0's peak resident memory must stay below this, whatever the attack.
const RSS_LIMIT_KIB: u64 = 1 << 20;

/// One run under attack: the launcher, its ranks, and what they print.
struct Target {
    launcher: Child,
    tracked: Tracked,
    stdout: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
    dir: tempfile::TempDir,
    peak_rss_kib: u64,
}

/// TCP listeners of `pid`, from `ss` (iproute2).
fn listeners(pid: u32) -> Vec<SocketAddr> {
    let Ok(output) = Command::new("ss").args(["-ltnpH"]).output() else { return Vec::new() };
    let owner = format!("pid={pid},");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| line.contains(&owner))
        .filter_map(|line| line.split_whitespace().nth(3)?.replace(['[', ']'], "").parse().ok().or_else(|| {
            // `*:PORT` is how ss writes a wildcard of either family.
            let port = line.split_whitespace().nth(3)?.rsplit(':').next()?.parse().ok()?;
            Some(SocketAddr::from(([0, 0, 0, 0], port)))
        }))
        .collect()
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim().parse().ok()
}

impl Target {
    /// A 4-rank shm write of `iters` iterations a size (50: a few seconds) with every outlet on: JSON lines,
    /// --prometheus, --serve.
    fn start(iters: &str) -> Self {
        let dir = common::scratch();
        let prometheus = format!("127.0.0.1:{}", common::free_port());
        let command = common::efatop_in(dir.path());
        Self::spawn(command, dir, iters, &["--prometheus", &prometheus, "--serve", "127.0.0.1:0"])
    }

    /// The same run with JSON lines alone, started by `ip netns exec NAMESPACE`: its listeners are the only
    /// ones in that namespace.
    fn start_in(namespace: &Namespace, iters: &str) -> Self {
        let dir = common::scratch();
        let mut command = common::command_in("ip", dir.path());
        command.args(["netns", "exec", &namespace.name]).arg(efatop_path());
        Self::spawn(command, dir, iters, &[])
    }

    fn spawn(mut command: Command, dir: tempfile::TempDir, iters: &str, outlets: &[&str]) -> Self {
        let out = dir.path().join("results.json");
        let mut args = vec!["run", "--ranks", "4", "write", "--provider", "shm", "--max-size", "4M", "--iters", iters, "--json"];
        args.extend(outlets);
        args.extend(["--out", out.to_str().expect("path")]);
        command.args(&args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut launcher = command.spawn().expect("efatop run");
        let stdout = lines_of(launcher.stdout.take().expect("stdout"));
        let stderr = lines_of(launcher.stderr.take().expect("stderr"));
        let mut tracked = Tracked::default();
        tracked.add(launcher.id());
        Self { launcher, tracked, stdout, stderr, dir, peak_rss_kib: 0 }
    }

    /// Rank 0's pid, once it has started.
    fn rank0_pid(&mut self) -> u32 {
        let until = Instant::now() + Duration::from_mins(1);
        while Instant::now() < until {
            self.tracked.add_descendants(self.launcher.id());
            if let Some(pid) = rank_pid(self.launcher.id(), 0) {
                return pid;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.tracked.kill_all();
        panic!("rank 0 never started");
    }

    /// Rank 0's pid and its listeners, once it has its collector up (the run's `run` line is out then).
    fn rank0(&mut self) -> (u32, Vec<SocketAddr>) {
        let until = Instant::now() + Duration::from_mins(1);
        while Instant::now() < until {
            self.tracked.add_descendants(self.launcher.id());
            if let Some(pid) = rank_pid(self.launcher.id(), 0) {
                let found = listeners(pid);
                // --prometheus, --serve and the collector.
                if found.len() >= 3 {
                    return (pid, found);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.tracked.kill_all();
        panic!("rank 0 never listened on its three ports");
    }

    /// Waits for the run's end, watching rank 0's memory; its exit code, stdout, stderr and results file.
    fn finish(mut self, rank0: u32) -> (Option<i32>, Vec<String>, Vec<String>, Value) {
        let until = Instant::now() + Duration::from_mins(2);
        let code = loop {
            if let Some(rss) = peak_rss_kib(rank0) {
                self.peak_rss_kib = self.peak_rss_kib.max(rss);
            }
            if let Some(status) = self.launcher.try_wait().expect("wait") {
                break status.code();
            }
            if Instant::now() > until {
                self.tracked.kill_all();
                panic!("the run under attack did not end within 120 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let drain = |lines: &mpsc::Receiver<String>| {
            let mut all = Vec::new();
            while let Ok(line) = lines.recv_timeout(Duration::from_secs(2)) {
                all.push(line);
            }
            all
        };
        let (stdout, stderr) = (drain(&self.stdout), drain(&self.stderr));
        let results: Value = serde_json::from_str(&std::fs::read_to_string(self.dir.path().join("results.json")).expect("results")).expect("json");
        assert!(self.peak_rss_kib < RSS_LIMIT_KIB, "rank 0 peaked at {} KiB", self.peak_rss_kib);
        assert!(self.tracked.alive().is_empty(), "processes left: {:?}", self.tracked.alive());
        (code, stdout, stderr, results)
    }
}

/// The run ended as if nothing had happened, and nothing forged reached its outputs.
fn unharmed(code: Option<i32>, stdout: &[String], stderr: &[String], results: &Value) {
    assert_eq!(code, Some(0), "stderr: {}", stderr.join("\n"));
    assert_eq!(results["status"]["state"], "complete", "{}", results["status"]);
    let measured = results["measurements"].as_array().map_or(0, Vec::len);
    assert_eq!(measured, 33, "every size of the three configs was measured");
    let forged = FORGED_BYTES.to_string();
    for line in stdout {
        let parsed = efatop_testkit::parse_line(line).unwrap_or_else(|err| panic!("not a --json line ({err}): {line}"));
        assert_ne!(data_value(&parsed)["bytes"].to_string(), forged, "a forged sample reached --json: {line}");
        if let JsonLine::Sample(Sample { channel: Some(channel), .. }) = parsed {
            assert!(channel.gbps.is_nan() || channel.gbps < 1000.0, "an impossible rate reached --json: {line}");
        }
    }
}

/// A forged sample of rank `rank`, as a rank's sampler would frame it.
fn forged_sample(rank: u32) -> Vec<u8> {
    let mut frame = Vec::new();
    let channel = ChannelSample { channel: 0, bytes: FORGED_BYTES, ops: 1, ..ChannelSample::default() };
    wire::encode(&RankSample { rank, seq: 1, interval_ns: 100_000_000, channels: vec![channel], ..RankSample::default() }, &mut frame);
    frame
}

#[test]
fn strangers_at_the_collector_neither_end_forge_nor_bloat_a_run() {
    let _serial = serial();
    let mut target = Target::start("50");
    let (rank0, ports) = target.rank0();
    // Every port rank 0 listens on gets each attack: only the collector speaks this wire, but a stranger
    // does not know which port is which either.
    for port in &ports {
        // 27 bytes: the sampler's greeting as rank 1, then close (this ended a healthy run before).
        let phase = wire::encode_phase(&PhaseReport { rank: 1, changes: 0, phase: 0, bytes: 0 });
        if let Ok(mut stream) = TcpStream::connect(port) {
            let _ = stream.write_all(&phase);
        }
        // Forged samples of rank 1 at an impossible rate, and one claiming rank 0xFFFFFFFF.
        if let Ok(mut stream) = TcpStream::connect(port) {
            for _ in 0..20 {
                let _ = stream.write_all(&forged_sample(1));
            }
            let _ = stream.write_all(&forged_sample(u32::MAX));
        }
        // Ten frames announcing 16 MiB each, each one byte short.
        for _ in 0..10 {
            if let Ok(mut stream) = TcpStream::connect(port) {
                let _ = stream.write_all(&(16u32 << 20).to_le_bytes());
                let _ = stream.write_all(&vec![0u8; (16 << 20) - 1]);
            }
        }
    }
    // 200 idle connections to the collector, held while the run goes on.
    let idle: Vec<TcpStream> = ports.iter().cycle().take(200).filter_map(|port| TcpStream::connect(port).ok()).collect();
    let (code, stdout, stderr, results) = target.finish(rank0);
    drop(idle);
    unharmed(code, &stdout, &stderr, &results);
    let noted = results["metadata"]["notes"].as_array().expect("notes").iter().filter_map(Value::as_str).find(|n| n.contains("collector refused"));
    let counted: u64 = noted.and_then(|n| n.split_whitespace().nth(4)?.parse().ok()).unwrap_or(0);
    // Per port: the greeting, the forgeries, ten long frames; plus the idle connections beyond the world.
    assert!(counted >= 12, "the refused connections were counted: {noted:?}");
}

#[test]
fn no_listener_of_a_local_run_is_on_a_wildcard_address() {
    let _serial = serial();
    let mut target = Target::start("50");
    let (rank0, _) = target.rank0();
    let mut every = Vec::new();
    for pid in descendants(target.launcher.id()) {
        every.extend(listeners(pid).into_iter().map(|address| (pid, address)));
    }
    let wide: Vec<_> = every.iter().filter(|(_, address)| address.ip().is_unspecified()).collect();
    let (code, stdout, stderr, results) = target.finish(rank0);
    assert!(wide.is_empty(), "listeners on a wildcard address: {wide:?} (all: {every:?})");
    assert!(every.iter().all(|(_, address)| address.ip().is_loopback()), "{every:?}");
    unharmed(code, &stdout, &stderr, &results);
}

#[test]
fn a_viewer_without_the_token_is_refused_and_the_run_goes_on() {
    let _serial = serial();
    // Long enough for silent strangers' handshakes to time out (5 s) with the run still going.
    let mut target = Target::start("400");
    let (rank0, _) = target.rank0();
    let served = loop {
        let line = target.stderr.recv_timeout(Duration::from_secs(30)).expect("the --serve line");
        if let Some(address) = line.trim().strip_prefix("efatop: serving the run on ") {
            break address.to_string();
        }
    };
    // Another token: one line, exit 2, nothing on stdout.
    let wrong = common::efatop_in(target.dir.path())
        .args(["attach", &served, "--json"])
        .env("EFATOP_TOKEN", "another-users-token-of-some-length")
        .output()
        .expect("attach");
    assert_eq!(wrong.status.code(), Some(2));
    let said = String::from_utf8_lossy(&wrong.stderr);
    assert!(said.contains("did not accept this viewer's token"), "{said}");
    assert!(wrong.stdout.is_empty());
    // Another uid, with no token of its own to read: refused as well (only where the tests run as root).
    if let (Some(setpriv), true) = (common::program("setpriv"), nix::unistd::geteuid().is_root()) {
        let mut command = Command::new(setpriv);
        command.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).arg(efatop_path()).args(["attach", &served, "--json"]);
        command.env_remove("EFATOP_TOKEN").env("HOME", "/nonexistent").current_dir("/");
        if let Some(path) = library_path() {
            command.env("LD_LIBRARY_PATH", path);
        }
        let other = command.output().expect("attach as nobody");
        assert_eq!(other.status.code(), Some(2), "{}", String::from_utf8_lossy(&other.stderr));
        assert!(other.stdout.is_empty());
    } else {
        eprintln!("security: SKIPPED the other-uid viewer: not root, or no setpriv");
    }
    // Silent connections beyond the viewers' cap: none of them holds the run up.
    let address: SocketAddr = served.parse().expect("address");
    let silent: Vec<TcpStream> = (0..40).filter_map(|_| TcpStream::connect(address).ok()).collect();
    // The run's own viewer, with the token, still gets the whole run.
    let viewer = common::efatop_in(target.dir.path()).args(["attach", &served, "--json"]).env("EFATOP_TOKEN", TEST_TOKEN).output();
    let (code, stdout, stderr, results) = target.finish(rank0);
    drop(silent);
    unharmed(code, &stdout, &stderr, &results);
    let viewer = viewer.expect("attach");
    assert_eq!(viewer.status.code(), Some(0), "{}", String::from_utf8_lossy(&viewer.stderr));
    let summary = efatop_testkit::json_lines_among(&String::from_utf8_lossy(&viewer.stdout)).iter().filter(|l| matches!(l, efatop_testkit::JsonLine::Summary(_))).count();
    assert_eq!(summary, 1, "the token's viewer got the run's summary");
}

/// A network namespace of the test's own, with loopback up: a run started in it ([`Target::start_in`]) has
/// the only listeners there, so the stranger attacks this run's alone. Deleted when dropped.
struct Namespace {
    name: String,
}

impl Namespace {
    /// `None`, with a SKIPPED line, where the test cannot make one (not root, no `ip`): CI runs as root.
    fn make() -> Option<Self> {
        if !nix::unistd::geteuid().is_root() {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "CI runs the attack suite as root");
            eprintln!("security: SKIPPED: a stranger of another uid in a namespace of the test's needs root");
            return None;
        }
        common::required("ip", "iproute2")?;
        let name = format!("efatop-sec-{}", std::process::id());
        let ip = |args: &[&str]| Command::new("ip").args(args).status().is_ok_and(|s| s.success());
        assert!(ip(&["netns", "add", &name]), "ip netns add {name}");
        let namespace = Self { name };
        assert!(ip(&["-n", &namespace.name, "link", "set", "lo", "up"]), "loopback up in {}", namespace.name);
        Some(namespace)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// `tests/fixtures/security/squatter.py` as `nobody`, in `namespace`: it opens `count` idle connections to
/// every listener that appears on 127.0.0.1 there, and tells what it did, line by line (`ready` first).
struct Squatter {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Squatter {
    fn start(namespace: &Namespace, count: usize) -> Option<Self> {
        let setpriv = common::required("setpriv", "util-linux")?;
        // The system's python, which another user can run (a python of root's own, pyenv's say, it cannot).
        let python = ["/usr/bin/python3", "/bin/python3"].into_iter().map(std::path::PathBuf::from).find(|p| p.exists());
        let python = python.or_else(|| common::required("python3", "python3"))?;
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/security/squatter.py");
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &namespace.name]).arg(setpriv).args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        command.arg(python).arg(script).arg(count.to_string()).current_dir("/");
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = command.spawn().expect("the squatter");
        let lines = lines_of(child.stdout.take().expect("stdout"));
        let ready = lines.recv_timeout(Duration::from_secs(30)).expect("the squatter is watching");
        assert_eq!(ready, "ready");
        Some(Self { child, lines })
    }

    /// Lets go of its connections; what it said: connections greeted by purpose byte, and connections
    /// established in all.
    fn finish(mut self) -> (std::collections::BTreeMap<u8, usize>, usize) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
        let mut greeted = std::collections::BTreeMap::new();
        let mut opened = 0;
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["greeted", _, purpose] => *greeted.entry(purpose.parse().expect("purpose")).or_default() += 1,
                ["listener", _, "opened", n] => opened += n.parse::<usize>().expect("count"),
                _ => {}
            }
        }
        (greeted, opened)
    }
}

/// The first row, and the collector's: another user watches `/proc/net/tcp` for the run's
/// listeners and opens 80 idle connections to each as soon as it appears (more than the rendezvous' 32 and
/// the collector's 64 unproven at once), before the ranks connect. The run must complete with its figures,
/// and both must have counted the strangers: each dropped its oldest unproven connection to make room.
#[test]
fn a_stranger_holding_every_listener_of_a_run_neither_keeps_the_ranks_out_nor_ends_it() {
    let _serial = serial();
    let Some(namespace) = Namespace::make() else { return };
    // The squatter races the ranks to each listener; a race it loses (ranks already in) shows nothing, so
    // the run is tried again, up to three times, until the squatter was first at both.
    for attempt in 1..=3 {
        let Some(squatter) = Squatter::start(&namespace, 80) else { return };
        let mut target = Target::start_in(&namespace, "50");
        let rank0 = target.rank0_pid();
        let (code, stdout, stderr, results) = target.finish(rank0);
        let (greeted, opened) = squatter.finish();
        unharmed(code, &stdout, &stderr, &results);
        // A listener greets a stranger only while it still waits for ranks (then it closes, or refuses at
        // once): more greeted than its budget of unproven connections means the squatter filled it first.
        let (at_rendezvous, at_collector) = (greeted.get(&1).copied().unwrap_or(0), greeted.get(&2).copied().unwrap_or(0));
        if at_rendezvous <= 32 {
            eprintln!("security: attempt {attempt}: the ranks were in first (greeted {greeted:?} of {opened}); again");
            continue;
        }
        // Every stranger the rendezvous greeted was dropped and counted by the time its door closed.
        let counted: usize = stderr
            .iter()
            .find_map(|l| l.strip_prefix("efatop: warning: rendezvous: ")?.strip_suffix(" connection(s) refused in all")?.parse().ok())
            .unwrap_or(0);
        assert!(at_rendezvous > 32 && counted >= at_rendezvous, "greeted {greeted:?} of {opened}; the rendezvous counted {counted}");
        // The collector: its ranks dial it within milliseconds of learning where it is, and mostly win that
        // race (then it refuses the squatter at once, counted). When the squatter won it, the collector
        // counted at least those beyond its 64 unproven at once (the rest too, if the run outlived their
        // deadline), and the ranks still got in.
        let noted = results["metadata"]["notes"].as_array().expect("notes").iter().filter_map(Value::as_str).find(|n| n.contains("collector refused"));
        let refused: usize = noted.and_then(|n| n.split_whitespace().nth(4)?.parse().ok()).unwrap_or(0);
        if at_collector > 64 {
            assert!(refused >= at_collector - 64, "greeted {greeted:?}; collector: {noted:?}");
        } else {
            assert!(refused >= 1, "the squatter's connections to the collector were counted: {noted:?}");
            eprintln!("security: the ranks reached the collector before the squatter (greeted {greeted:?}; {noted:?})");
        }
        return;
    }
    panic!("in three runs the squatter never held the rendezvous before the ranks connected");
}

/// One connection that sends a byte every `every`, from the moment it connects, and reads whatever comes
/// back; how long after connecting the listener cut it (`None`: not within `limit`), and how many bytes it
/// had sent by then.
fn trickle(address: SocketAddr, every: Duration, limit: Duration) -> std::thread::JoinHandle<(Option<Duration>, usize)> {
    std::thread::spawn(move || {
        use std::io::Read;
        let started = Instant::now();
        let Ok(mut stream) = TcpStream::connect(address) else { return (Some(Duration::ZERO), 0) };
        let mut sent = 0;
        let mut next = started;
        let mut sink = [0u8; 256];
        while started.elapsed() < limit {
            if Instant::now() >= next {
                if stream.write_all(&[0]).is_err() {
                    return (Some(started.elapsed()), sent);
                }
                sent += 1;
                next += every;
            }
            let wait = next.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            let _ = stream.set_read_timeout(Some(wait));
            match stream.read(&mut sink) {
                Ok(0) => return (Some(started.elapsed()), sent),
                Ok(_) => {}
                Err(err) if matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => return (Some(started.elapsed()), sent),
            }
        }
        (None, sent)
    })
}

/// The second row: 16 connections to `--serve` (its whole budget of unproven connections), each
/// sending a byte every 4 s, which kept a per-read limit of 5 s from ever ending them. `efatop attach`
/// with the token must get in at once (the oldest trickle makes room) and see the whole stream; every
/// trickle must be cut at the handshake's one deadline (5 s), not kept by its bytes. Served by a one-node
/// `efatop monitor --serve` (the same server as a run's), which serves for as long as the test needs.
#[test]
fn trickling_strangers_at_serve_are_cut_at_the_deadline_and_a_viewer_gets_in() {
    let _serial = serial();
    let dir = common::scratch();
    let mut monitor = common::efatop_in(dir.path())
        .args(["monitor", "--serve", "127.0.0.1:0", "--json", "--interval", "250ms", "--count", "60"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("efatop monitor");
    let stderr = lines_of(monitor.stderr.take().expect("stderr"));
    let served = loop {
        let line = stderr.recv_timeout(Duration::from_secs(30)).expect("the --serve line");
        if let Some(address) = line.trim().strip_prefix("efatop: serving the run on ") {
            break address.to_string();
        }
    };
    let address: SocketAddr = served.parse().expect("address");
    let limit = Duration::from_secs(15);
    let tricklers: Vec<_> = (0..16).map(|_| trickle(address, Duration::from_secs(4), limit)).collect();
    // Every trickle connected (and so holds a place among the unproven) before the viewer comes.
    let until = Instant::now() + Duration::from_secs(10);
    while connections_to(address.port()) < 16 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    let attached = Instant::now();
    let viewer = common::efatop_in(dir.path()).args(["attach", &served, "--json"]).output().expect("attach");
    let viewed_for = attached.elapsed();
    let cut: Vec<(Option<Duration>, usize)> = tricklers.into_iter().map(|t| t.join().expect("trickle")).collect();
    let _ = monitor.kill();
    let _ = monitor.wait();
    assert_eq!(viewer.status.code(), Some(0), "{}", String::from_utf8_lossy(&viewer.stderr));
    let reads = String::from_utf8_lossy(&viewer.stdout).lines().filter(|l| l.contains("\"type\":\"node\"")).count();
    assert!(reads >= 10, "the viewer saw {reads} reads in {viewed_for:?}");
    // Each trickle was cut (the oldest perhaps at once, to make room for the viewer), none kept past the
    // deadline plus a loaded machine's margin, and each had sent a byte after the first (so a limit per
    // read would have kept it).
    for (at, _) in &cut {
        let at = at.unwrap_or_else(|| panic!("a trickle was kept past {limit:?}: {cut:?}"));
        assert!(at < Duration::from_secs(12), "a trickle was cut only after {at:?}: {cut:?}");
    }
    let at_deadline = cut.iter().filter(|(at, sent)| at.is_some_and(|at| at >= Duration::from_millis(4500)) && *sent >= 2).count();
    assert!(at_deadline >= 12, "most trickles were cut at the deadline, after their second byte: {cut:?}");
}

/// Established TCP connections to local port `port` (both ends count: the test's and the server's).
fn connections_to(port: u16) -> usize {
    let Ok(output) = Command::new("ss").args(["-tnH", "state", "established", &format!("( dport = :{port} )")]).output() else { return 0 };
    String::from_utf8_lossy(&output.stdout).lines().count()
}

/// The last row: another user's link or folder at `./efatop-results` (a shared directory) is
/// refused before anything runs, one line, exit 2, nothing written through it or into it; with nothing
/// there, the run makes the folder readable by its user alone.
#[test]
fn a_strangers_link_or_folder_at_the_default_results_folder_is_refused() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let _serial = serial();
    let dir = common::scratch();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).expect("a shared directory");
    let folder = dir.path().join("efatop-results");
    let run = || {
        common::efatop_in(dir.path())
            .args(["run", "--ranks", "2", "write", "--provider", "shm", "--max-size", "4K", "--iters", "5"])
            .stdin(Stdio::null())
            .output()
            .expect("efatop run")
    };
    let refused_in_one_line = |output: &std::process::Output, why: &str| {
        let said = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{said}");
        assert_eq!(said.lines().count(), 1, "one line: {said}");
        assert!(said.contains("./efatop-results") && said.contains(why), "{said}");
        assert!(output.stdout.is_empty());
    };
    // A link to a folder the stranger reads.
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).expect("dir");
    std::os::unix::fs::symlink(&theirs, &folder).expect("link");
    refused_in_one_line(&run(), "symbolic link");
    assert_eq!(std::fs::read_dir(&theirs).expect("dir").count(), 0, "nothing written through the link");
    std::fs::remove_file(&folder).expect("unlink");
    // A folder of another user's (root can make one for `nobody`).
    if nix::unistd::geteuid().is_root() {
        std::fs::create_dir(&folder).expect("dir");
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o777)).expect("mode");
        std::os::unix::fs::chown(&folder, Some(65534), Some(65534)).expect("chown");
        refused_in_one_line(&run(), "belongs to uid 65534");
        assert_eq!(std::fs::read_dir(&folder).expect("dir").count(), 0, "nothing written into it");
        std::fs::remove_dir(&folder).expect("rmdir");
    } else {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI runs the attack suite as root");
        eprintln!("security: SKIPPED another user's results folder: not root");
    }
    // Nothing there: made for this user alone, and the results go in it.
    let made = run();
    assert_eq!(made.status.code(), Some(0), "{}", String::from_utf8_lossy(&made.stderr));
    let meta = std::fs::symlink_metadata(&folder).expect("made");
    assert!(meta.is_dir() && meta.mode() & 0o777 == 0o700 && meta.uid() == nix::unistd::geteuid().as_raw(), "{meta:?}");
    assert_eq!(std::fs::read_dir(&folder).expect("dir").count(), 1, "the results file");
}

/// The two ranks of a job step as `srun` without MPI starts them (Slurm's environment; the tests'
/// `EFATOP_TOKEN` proves them, as a user's token does under srun), on this machine with rank 0's node named
/// `127.0.0.1`: a 2-rank tcp write whose rendezvous is the Slurm bootstrap's, on the step's candidate ports.
struct SlurmStep {
    dir: tempfile::TempDir,
    out: std::path::PathBuf,
    ranks: Vec<Child>,
}

impl SlurmStep {
    fn start(job: u64) -> Self {
        let dir = common::scratch();
        let out = dir.path().join("results.json");
        let ranks = (0..2)
            .map(|rank| {
                let mut command = common::efatop_in(dir.path());
                command.args([
                    "write",
                    "--provider",
                    "tcp",
                    "--max-size",
                    "64K",
                    "--iters",
                    "5",
                    "--out",
                    out.to_str().expect("path"),
                ]);
                command
                    .env("SLURM_JOB_ID", job.to_string())
                    .env("SLURM_STEP_ID", "0")
                    .env("SLURM_PROCID", rank.to_string())
                    .env("SLURM_NTASKS", "2")
                    .env("SLURM_STEP_NODELIST", "127.0.0.1")
                    .env_remove("SLURMD_NODENAME")
                    .env_remove("EFATOP_SLURM_PORT");
                command
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                command.spawn().expect("a rank")
            })
            .collect();
        Self { dir, out, ranks }
    }

    /// Each rank's exit code and stderr, within `limit` (a rank still running then is killed: a failure).
    fn finish(
        self,
        limit: Duration,
    ) -> (
        Vec<(Option<i32>, String)>,
        std::path::PathBuf,
        tempfile::TempDir,
    ) {
        let until = Instant::now() + limit;
        let mut ended = Vec::new();
        for mut rank in self.ranks {
            while rank.try_wait().expect("wait").is_none() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
            if rank.try_wait().expect("wait").is_none() {
                let _ = rank.kill();
            }
            let output = rank.wait_with_output().expect("output");
            ended.push((
                output.status.code(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            ));
        }
        (ended, self.out, self.dir)
    }
}

/// A job id whose first `free` candidate ports are free on 127.0.0.1 now, and those ports.
fn job_with_free_ports(free: usize) -> (u64, Vec<u16>) {
    let start = u64::from(std::process::id()) * 1000;
    (start..start + 1000)
        .map(|job| (job, efatop_runtime::bootstrap::slurm::ports_for(job, 0)))
        .find(|(_, ports)| {
            ports[..free]
                .iter()
                .all(|&port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok())
        })
        .expect("a job whose candidate ports are free")
}

/// Which way a relay changes a byte.
#[derive(Clone, Copy, PartialEq)]
enum Way {
    /// In what rank 0's rendezvous sends the rank.
    Down,
    /// In what the rank sends rank 0's rendezvous.
    Up,
}

/// A stranger's relay, listening on `listener` and passing every connection to 127.0.0.1:`to` byte for
/// byte both ways, keeping a copy of all it saw. With `flip`, it changes the byte at that offset of what
/// passes that way: past the handshake, which it passes through untouched.
fn relay(
    listener: std::net::TcpListener,
    to: u16,
    flip: Option<(Way, usize)>,
) -> std::sync::Arc<std::sync::Mutex<Vec<u8>>> {
    use std::io::Read;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = seen.clone();
    std::thread::spawn(move || {
        for near in listener.incoming() {
            let Ok(near) = near else { continue };
            // Rank 0 not listening yet: the relay holds the rank's connection until it is, as a patient
            // stranger would. Dropping it instead let the rank try the next candidate port, rank 0's own,
            // and go round the relay, so that a changed byte never reached either rank (CI, stop 59).
            let until = Instant::now() + Duration::from_secs(60);
            let far = loop {
                match TcpStream::connect(("127.0.0.1", to)) {
                    Ok(far) => break Some(far),
                    Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
                    Err(_) => break None,
                }
            };
            let Some(far) = far else { continue };
            let at = |way: Way| {
                flip.filter(|(flipped, _)| *flipped == way)
                    .map(|(_, at)| at)
            };
            for (mut from, mut into, flip) in [
                (
                    near.try_clone().expect("clone"),
                    far.try_clone().expect("clone"),
                    at(Way::Up),
                ),
                (
                    far.try_clone().expect("clone"),
                    near.try_clone().expect("clone"),
                    at(Way::Down),
                ),
            ] {
                let kept = kept.clone();
                std::thread::spawn(move || {
                    let (mut buffer, mut offset) = ([0u8; 4096], 0usize);
                    while let Ok(n) = from.read(&mut buffer) {
                        if n == 0 {
                            break;
                        }
                        if let Some(at) = flip.filter(|at| (offset..offset + n).contains(at)) {
                            buffer[at - offset] ^= 0x01;
                        }
                        offset += n;
                        kept.lock().expect("kept").extend_from_slice(&buffer[..n]);
                        if into.write_all(&buffer[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = into.shutdown(std::net::Shutdown::Both);
                });
            }
        }
    });
    seen
}

/// Bytes of the token handshake that rank 0's side sends: its hello (magic, purpose, nonce) and its proof.
const LISTENER_HANDSHAKE: usize = efatop_proto::handshake::HELLO_LEN + efatop_proto::handshake::PROOF_LEN;
/// Bytes the rank sends before its first round: its answer in the handshake, then its rank in one record.
const CALLER_JOIN: usize = efatop_proto::handshake::ANSWER_LEN + 4 + efatop_proto::handshake::OVERHEAD;

/// A stranger binds the step's first candidate port first and relays it to the second, where rank 0 then
/// listens: rank 1 reaches rank 0 through it. Passed through untouched, the run completes, and the relay saw
/// nothing of what the ranks exchanged in the clear (no host name, no collector address). Changing one byte
/// after the handshake ends the run with a named refusal, whichever way: rank 1 says "frame failed
/// authentication" of rank 0's answer, or rank 0's rendezvous of rank 1's round; both ranks exit non-zero,
/// and no results file is written.
#[test]
fn a_relay_on_a_slurm_candidate_port_reads_nothing_and_a_byte_it_changes_ends_the_run_named() {
    let _one = serial();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("hostname")
        .trim()
        .to_string();

    let (job, ports) = job_with_free_ports(2);
    let seen = relay(
        std::net::TcpListener::bind(("127.0.0.1", ports[0])).expect("the relay's port"),
        ports[1],
        None,
    );
    let (ended, out, _dir) = SlurmStep::start(job).finish(Duration::from_mins(2));
    for (rank, (code, stderr)) in ended.iter().enumerate() {
        assert_eq!(
            *code,
            Some(0),
            "rank {rank} through an untouched relay:\n{stderr}"
        );
    }
    assert!(
        ended[0].1.contains(&format!("port {}", ports[0])),
        "rank 0 says the first candidate was taken:\n{}",
        ended[0].1
    );
    assert!(out.exists(), "the run's results file");
    let seen = seen.lock().expect("seen").clone();
    assert!(
        seen.len() > 2 * LISTENER_HANDSHAKE,
        "the relay carried only {} bytes: rank 1 did not go through it",
        seen.len()
    );
    // A host name under 6 bytes (this machine's may be `vm`) is not a test: random ciphertext holds any 2
    // given bytes every 64 KiB; 6 bytes or more, about once in 2^48.
    let markers: Vec<&[u8]> = [host.as_bytes(), b"127.0.0.1".as_slice()].into_iter().filter(|m| m.len() >= 6).collect();
    for clear in markers {
        assert!(
            !seen.windows(clear.len()).any(|w| w == clear),
            "the relay read `{}` in the clear",
            String::from_utf8_lossy(clear)
        );
    }
    println!(
        "untouched relay: {} bytes carried, none readable",
        seen.len()
    );

    // A byte inside the first record of rank 0's answer, then inside rank 1's first round (its second record).
    for (way, at) in [
        (Way::Down, LISTENER_HANDSHAKE + 6),
        (Way::Up, CALLER_JOIN + 6),
    ] {
        let (job, ports) = job_with_free_ports(2);
        let _ = relay(
            std::net::TcpListener::bind(("127.0.0.1", ports[0])).expect("the relay's port"),
            ports[1],
            Some((way, at)),
        );
        let (ended, out, _dir) = SlurmStep::start(job).finish(Duration::from_mins(2));
        println!(
            "a byte changed: rank 0 {:?}, rank 1 {:?}\nrank 0:\n{}\nrank 1:\n{}",
            ended[0].0, ended[1].0, ended[0].1, ended[1].1
        );
        assert!(
            ended.iter().all(|(code, _)| *code != Some(0)),
            "both ranks end non-zero: {ended:?}"
        );
        let (says, peer) = match way {
            Way::Down => (
                &ended[1].1,
                format!(
                    "rank 0's rendezvous at 127.0.0.1:{}: frame failed authentication",
                    ports[0]
                ),
            ),
            Way::Up => (
                &ended[0].1,
                "refused rank 1's connection (127.0.0.1:".to_string(),
            ),
        };
        assert!(
            says.contains("frame failed authentication") && says.contains(&peer),
            "the refusal and the peer named (`{peer}`):\n{says}"
        );
        assert!(!out.exists(), "a results file after a forged rendezvous");
    }
}

/// A stranger holds every candidate port of the step, speaking efatop's handshake without the secret: rank 0
/// cannot listen and says which ports and who holds them (uid, from /proc/net/tcp), rank 1 finds a party on
/// each that proves nothing, says so once a port, and gives up naming them all. Both exit 1, at once rather
/// than after the join timeout.
#[test]
fn a_stranger_on_every_slurm_candidate_port_is_named_and_ends_the_step() {
    use std::io::Read;
    let _one = serial();
    let (job, ports) = job_with_free_ports(efatop_runtime::bootstrap::slurm::CANDIDATES);
    for &port in &ports {
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("squat");
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                // A hello of efatop's, then whatever the rank answers, then nothing: it cannot prove.
                let (_, hello) =
                    efatop_auth::Challenge::new(efatop_proto::handshake::Purpose::Rendezvous)
                        .expect("hello");
                let _ = stream.write_all(&hello);
                let _ = stream.read(&mut [0u8; efatop_proto::handshake::ANSWER_LEN]);
            }
        });
    }
    let started = Instant::now();
    let (ended, out, _dir) = SlurmStep::start(job).finish(Duration::from_mins(2));
    println!(
        "every candidate squatted, {:.1} s:\nrank 0:\n{}\nrank 1:\n{}",
        started.elapsed().as_secs_f64(),
        ended[0].1,
        ended[1].1
    );
    let uid = nix::unistd::geteuid().as_raw();
    for (rank, (code, stderr)) in ended.iter().enumerate() {
        assert_eq!(*code, Some(1), "rank {rank}:\n{stderr}");
        for port in &ports {
            assert!(
                stderr.contains(&format!("port {port}")),
                "rank {rank} names port {port}:\n{stderr}"
            );
        }
    }
    assert!(
        ended[0].1.contains("every candidate port is in use")
            && ended[0].1.contains(&format!("held by uid {uid}")),
        "{}",
        ended[0].1
    );
    assert!(
        ended[1].1.contains("cannot prove the run's secret")
            && ended[1].1.contains(&format!("held by uid {uid}")),
        "{}",
        ended[1].1
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the step took {:?} to give up",
        started.elapsed()
    );
    assert!(!out.exists());
}

/// Not a test of its own: a player process of the NCCL plugin (tests/common/player.rs).
#[test]
fn player_child() {
    common::player::play_if_asked();
}

/// `efatop watch`'s row of the issue: another user opens 100 connections to the watcher (more than the 64
/// unproven it holds from one address) and sends a byte on each every 4 s, which a limit per read would
/// never end. Every one must be cut: those past the budget at once, the rest at the handshake's one
/// deadline (5 s), none kept by its bytes; all counted as refused; and a plugin holding the token (the
/// real plugin, in a player) still gets in and has its figures folded. The watcher, the player and the
/// stranger share a network namespace of their own.
#[test]
fn trickling_strangers_at_watch_are_cut_at_the_deadline_and_a_plugin_is_folded() {
    use common::player::{Player, Watcher};
    use efatop_proto::nccl::WatchLine;
    let _serial = serial();
    let Some(namespace) = Namespace::make() else { return };
    let Some(setpriv) = common::required("setpriv", "util-linux") else { return };
    let python = ["/usr/bin/python3", "/bin/python3"].into_iter().map(std::path::PathBuf::from).find(|p| p.exists());
    let Some(python) = python.or_else(|| common::required("python3", "python3")) else { return };
    let via = ["ip", "netns", "exec", namespace.name.as_str()];
    let mut watch = Watcher::start_via(&via, &[], TEST_TOKEN);
    let port = watch.address.rsplit(':').next().expect("a port").to_string();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/security/trickler.py");
    let mut trickler = Command::new("ip")
        .args(["netns", "exec", &namespace.name])
        .arg(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(python)
        .arg(script)
        .args(["100", &port, "4", "15"])
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the trickler");
    let said = lines_of(trickler.stdout.take().expect("stdout"));
    assert_eq!(said.recv_timeout(Duration::from_secs(30)).expect("the trickler's connections are open"), "ready");
    // The plugin lives on after its trace (no finalize) while it tries again past the tricklers, backing off.
    let mut player = Player::start_via(&via, "synthetic-full-r0.trace", 6, "node-a", "0", &[("EFATOP_WATCH", watch.address.as_str()), ("EFATOP_TEST_HOLD_MS", "40000")]);
    watch.until(Duration::from_secs(60), "the plugin's rank folded past the tricklers", |lines| {
        lines.iter().any(|l| matches!(l, WatchLine::Rank { host, .. } if host == "node-a"))
    });
    let mut cut = Vec::new();
    let mut kept = 0;
    loop {
        let line = said.recv_timeout(Duration::from_secs(30)).expect("the trickler ends within its 15 s");
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["cut", seconds, sent] => cut.push((seconds.parse::<f64>().expect("seconds"), sent.parse::<u32>().expect("sent"))),
            ["kept", _] => kept += 1,
            ["done"] => break,
            _ => panic!("the trickler said {line}"),
        }
    }
    let _ = trickler.wait();
    let _ = player.child.kill();
    let _ = player.child.wait();
    assert_eq!((cut.len(), kept), (100, 0), "every trickle cut, none kept for 15 s: {cut:?}");
    assert!(cut.iter().all(|(at, _)| *at < 12.0), "a trickle was cut only after the deadline and a loaded machine's margin: {cut:?}");
    // The budget's 64 from one address held until the deadline (bar those the plugin's tries made room
    // for), each after its second byte: a limit per read would have kept them.
    let at_deadline = cut.iter().filter(|(at, sent)| *at >= 4.5 && *sent >= 2).count();
    assert!(at_deadline >= 48, "most held trickles were cut at the deadline, after their second byte: {cut:?}");
    watch.until(Duration::from_secs(30), "every trickle counted as refused", |lines| {
        lines.iter().any(|l| matches!(l, WatchLine::Health { refused, .. } if *refused >= 100))
    });
}

/// Offsets a relay between the plugin and the watcher sees: the plugin's answer in the handshake, then its
/// sealed records.
const PLUGIN_ANSWER: usize = efatop_proto::handshake::ANSWER_LEN;

/// A stranger's relay between the real plugin and `efatop watch` (the plugin's EFATOP_WATCH names the relay),
/// passing the handshake through. Untouched, the plugin's figures are folded, and the relay read no host name
/// in the clear. Changing one byte of what the plugin sends after the handshake: the watcher refuses the
/// connection, naming the peer and "frame failed authentication", counts it, and folds nothing of that
/// plugin (which tries again, through the relay, and is refused again).
#[test]
fn a_relay_between_a_plugin_and_watch_reads_nothing_and_a_byte_it_changes_is_refused_named() {
    use common::player::{Player, Watcher};
    use efatop_proto::nccl::WatchLine;
    let _serial = serial();
    let rank_of = |lines: &[WatchLine]| lines.iter().any(|l| matches!(l, WatchLine::Rank { host, .. } if host == "relayed-host"));

    let mut watch = Watcher::start(&[], TEST_TOKEN);
    let port: u16 = watch.address.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("the relay's port");
    let relayed = listener.local_addr().expect("address").to_string();
    let seen = relay(listener, port, None);
    let player = Player::start("synthetic-full-r0.trace", 6, "relayed-host", "0", &[("EFATOP_WATCH", relayed.as_str())]);
    watch.until(Duration::from_secs(60), "the plugin's rank folded through an untouched relay", rank_of);
    let _ = player.finish(Duration::from_secs(60));
    let seen = seen.lock().expect("seen").clone();
    assert!(seen.len() > LISTENER_HANDSHAKE + PLUGIN_ANSWER + 100, "the relay carried only {} bytes", seen.len());
    assert!(!seen.windows(b"relayed-host".len()).any(|w| w == b"relayed-host"), "the relay read the plugin's host name in the clear");
    drop(watch);

    let mut watch = Watcher::start(&[], TEST_TOKEN);
    let port: u16 = watch.address.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("the relay's port");
    let relayed = listener.local_addr().expect("address").to_string();
    // A byte inside the first record (the plugin's hello), past its length prefix.
    let _ = relay(listener, port, Some((Way::Up, PLUGIN_ANSWER + efatop_proto::handshake::HEADER_LEN + 6)));
    let player = Player::start("synthetic-full-r0.trace", 6, "relayed-host", "0", &[("EFATOP_WATCH", relayed.as_str())]);
    // Refused, and refused again when the plugin comes back through the relay.
    watch.until_said(Duration::from_secs(60), "the forged connections refused and named twice", |_, said| {
        said.iter().filter(|l| l.contains("efatop watch: refused 127.0.0.1:") && l.contains("frame failed authentication")).count() >= 2
    });
    watch.until(Duration::from_secs(30), "the refusals counted", |lines| lines.iter().any(|l| matches!(l, WatchLine::Health { refused, .. } if *refused >= 2)));
    let _ = player.finish(Duration::from_secs(60));
    assert!(!rank_of(&watch.seen), "a forged connection's figures were folded: {:#?}", watch.seen);
    assert!(!watch.seen.iter().any(|l| matches!(l, WatchLine::Coll { .. } | WatchLine::Peer { .. } | WatchLine::Nics { .. })), "{:#?}", watch.seen);
}
