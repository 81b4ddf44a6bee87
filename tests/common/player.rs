//! The NCCL profiler plugin without a GPU: the built cdylib loaded (dlopen) into a player process that plays
//! a recorded NCCL event sequence (tests/fixtures/nccl/) through one ABI, as NCCL would call it. A player is
//! the test binary again, running its `player_child` test (which does nothing unless `EFATOP_TEST_PLAY` is
//! set: see [`play_if_asked`]), so that each rank is a process with its own plugin, as under NCCL. Every
//! test binary that starts players has a `#[test] fn player_child() { common::player::play_if_asked() }`.
//! The players stream to a [`Watcher`], the real `efatop watch --json`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use efatop_proto::nccl::WatchLine;
use efatop_proto::output::Line as OutputLine;
use nccl_profiler_efatop::ffi::player::Plugin;
use nccl_profiler_efatop::trace::{self, Line};

use super::{efatop_in, lines_of, scratch, TEST_TOKEN};

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nccl").join(name)
}

/// The built plugin: cargo builds the dev-dependency's cdylib beside the test's dependencies.
pub fn plugin_path() -> PathBuf {
    let debug = super::efatop_path().parent().expect("target dir").to_path_buf();
    let candidates = [debug.join("deps/libnccl_profiler_efatop.so"), debug.join("libnccl_profiler_efatop.so")];
    candidates.iter().find(|p| p.exists()).cloned().unwrap_or_else(|| panic!("the plugin is not built: none of {candidates:?}"))
}

/// A player process's body: plays `EFATOP_TEST_PLAY`'s trace through the plugin; nothing when it is unset.
pub fn play_if_asked() {
    let Ok(path) = std::env::var("EFATOP_TEST_PLAY") else { return };
    let abi: u32 = std::env::var("EFATOP_TEST_ABI").expect("abi").parse().expect("abi");
    let hold = Duration::from_millis(std::env::var("EFATOP_TEST_HOLD_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(0));
    let mut trace = trace::parse(&std::fs::read_to_string(&path).expect("trace")).expect("a trace");
    if !hold.is_zero() {
        trace.lines.retain(|l| !matches!(l, Line::Finalize { .. }));
    }
    let plugin = Plugin::load(&plugin_path(), abi).expect("the plugin loads");
    // Gaps between records are cut to 20 ms unless the test keeps them (a real stall).
    let max_gap = Duration::from_millis(std::env::var("EFATOP_TEST_MAX_GAP_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(20));
    let played = plugin.play(&trace, 1.0, max_gap).expect("plays");
    println!("PLAYED calls={} longest_us={}", played.calls, played.longest.as_micros());
    // The plugin's thread sends its last interval (and its bye) in the next 200 ms.
    std::thread::sleep(hold.max(Duration::from_millis(800)));
    // Each thread's nice value: the player's own (as NCCL's) first.
    let shown = |nice: Option<i32>| nice.map_or("?".into(), |n| n.to_string());
    let mut threads = vec![format!("self={}", shown(efatop_runtime::affinity::nice()))];
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task").flatten() {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let nice = task.file_name().to_str().and_then(|tid| tid.parse().ok()).and_then(efatop_runtime::affinity::thread_nice);
        threads.push(format!("{}={}", name.trim(), shown(nice)));
    }
    println!("THREADS {}", threads.join(" "));
    // Its threads run to the end of the process: the library stays loaded.
    std::mem::forget(plugin);
}

pub struct Player {
    pub child: Child,
    pub out: Receiver<String>,
    /// What its plugin said on stderr, where it was started telling ([`Player::start_telling`]).
    pub said: Option<Receiver<String>>,
}

impl Player {
    /// A player of fixture `trace` through ABI `abi`, as rank `gpu` on `host`, with `env` on top.
    pub fn start(trace: &str, abi: u32, host: &str, gpu: &str, env: &[(&str, &str)]) -> Self {
        Self::start_via(&[], trace, abi, host, gpu, env)
    }

    /// The same, its plugin saying on stderr what it does (where it streams, what it refused), kept in
    /// [`Player::said`].
    pub fn start_telling(trace: &str, abi: u32, host: &str, gpu: &str, env: &[(&str, &str)]) -> Self {
        Self::spawn(&[], trace, abi, host, gpu, env, true)
    }

    /// The same, run by `via` (a program and its arguments, `ip netns exec NAME`, say) when given.
    pub fn start_via(via: &[&str], trace: &str, abi: u32, host: &str, gpu: &str, env: &[(&str, &str)]) -> Self {
        Self::spawn(via, trace, abi, host, gpu, env, false)
    }

    fn spawn(via: &[&str], trace: &str, abi: u32, host: &str, gpu: &str, env: &[(&str, &str)], telling: bool) -> Self {
        let player = std::env::current_exe().expect("test binary");
        let mut command = match via.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(player);
                command
            }
            None => Command::new(player),
        };
        command
            .args(["--exact", "player_child", "--nocapture", "--test-threads=1"])
            .env("EFATOP_TEST_PLAY", fixture(trace))
            .env("EFATOP_TEST_ABI", abi.to_string())
            .env("EFATOP_TOKEN", TEST_TOKEN)
            .env("EFATOP_HOST", host)
            .env("EFATOP_GPU", gpu)
            .env("EFATOP_PROFILER_INTERVAL_MS", "200")
            .env_remove("EFATOP_WATCH")
            .stdout(Stdio::piped());
        if telling {
            command.env_remove("EFATOP_PROFILER_QUIET").stderr(Stdio::piped());
        } else {
            command.env("EFATOP_PROFILER_QUIET", "1").stderr(Stdio::null());
        }
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("player");
        let out = lines_of(child.stdout.take().expect("stdout"));
        let said = child.stderr.take().map(lines_of);
        Self { child, out, said }
    }

    /// Waits for the end; the longest hot-path call (µs) and how long the process ran.
    pub fn finish(self, limit: Duration) -> (u128, Duration) {
        let (longest, ran, _) = self.finish_with_threads(limit);
        (longest, ran)
    }

    /// The same, with every thread's name and nice value at the end, the player's own first (named `self`).
    pub fn finish_with_threads(mut self, limit: Duration) -> (u128, Duration, Vec<(String, Option<i32>)>) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(status.success(), "player failed: {status}");
                break;
            }
            if started.elapsed() > limit {
                let _ = self.child.kill();
                panic!("the player did not end within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let ran = started.elapsed();
        let line = std::iter::from_fn(|| self.out.recv_timeout(Duration::from_secs(10)).ok()).find(|l| l.contains("PLAYED")).expect("the player's summary");
        let longest = line.split("longest_us=").nth(1).and_then(|v| v.trim().parse().ok()).expect("longest");
        let line = std::iter::from_fn(|| self.out.recv_timeout(Duration::from_secs(10)).ok()).find(|l| l.starts_with("THREADS ")).expect("the player's threads");
        let threads = line
            .split_whitespace()
            .skip(1)
            .filter_map(|pair| pair.rsplit_once('='))
            .map(|(name, nice)| (name.to_string(), nice.parse().ok()))
            .collect();
        (longest, ran, threads)
    }
}

/// `efatop watch --json --listen 127.0.0.1:0`: where it listens, the typed lines it printed and what it
/// said on stderr after its first line.
pub struct Watcher {
    pub child: Child,
    lines: Receiver<String>,
    stderr: Receiver<String>,
    pub address: String,
    pub seen: Vec<WatchLine>,
    pub said: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Watcher {
    /// Holding `token`, with `extra` flags.
    pub fn start(extra: &[&str], token: &str) -> Self {
        Self::start_via(&[], extra, token)
    }

    /// The same, run by `via` (a program and its arguments, `ip netns exec NAME`, say) when given.
    pub fn start_via(via: &[&str], extra: &[&str], token: &str) -> Self {
        let dir = scratch();
        let mut command = match via.split_first() {
            Some((program, args)) => {
                let mut command = super::command_in(program, dir.path());
                command.args(args).arg(super::efatop_path());
                command
            }
            None => efatop_in(dir.path()),
        };
        command.args(["watch", "--listen", "127.0.0.1:0", "--json"]).args(extra).env("EFATOP_TOKEN", token).env("HOME", dir.path());
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("efatop watch");
        let lines = lines_of(child.stdout.take().expect("stdout"));
        let stderr = lines_of(child.stderr.take().expect("stderr"));
        // With --prometheus it first says where it serves.
        let mut first = stderr.recv_timeout(Duration::from_secs(30)).expect("efatop watch says where it listens");
        if first.contains("serving http://") {
            first = stderr.recv_timeout(Duration::from_secs(30)).expect("efatop watch says where it listens");
        }
        let address = first.split("listening on ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or_else(|| panic!("{first}")).to_string();
        Self { child, lines, stderr, address, seen: Vec::new(), said: Vec::new(), _dir: dir }
    }

    /// Reads lines until `done` holds over all seen so far, or `limit` passes (then fails with them).
    pub fn until(&mut self, limit: Duration, what: &str, done: impl Fn(&[WatchLine]) -> bool) {
        self.until_said(limit, what, |lines, _| done(lines));
    }

    /// The same, over the lines and what it said on stderr.
    pub fn until_said(&mut self, limit: Duration, what: &str, done: impl Fn(&[WatchLine], &[String]) -> bool) {
        let deadline = Instant::now() + limit;
        loop {
            self.said.extend(self.stderr.try_iter());
            if done(&self.seen, &self.said) {
                return;
            }
            let left = deadline.checked_duration_since(Instant::now()).unwrap_or_else(|| panic!("no {what} within {limit:?}; lines: {:#?}\nsaid: {:#?}", self.seen, self.said));
            if let Ok(line) = self.lines.recv_timeout(left.min(Duration::from_millis(200))) {
                self.seen.push(watch_line(&line));
            }
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One `efatop watch --json` line: a typed line of proto's output (`{"type":…,"data":…}`), of watch's kinds.
pub fn watch_line(line: &str) -> WatchLine {
    match efatop_testkit::parse_untyped(line) {
        Ok(OutputLine::Watch(watch)) => *watch,
        other => panic!("not a watch line: {other:?}: {line}"),
    }
}
