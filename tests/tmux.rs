//! The real binary on a real terminal: efatop runs inside tmux, the test reads the screen like a user.
//! The gauges must move while the run goes on, the final table must appear when it ends, a key must
//! leave the dashboard with the plain table in the scrollback, and `q` must stop every rank.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{efatop_path, serial};

struct Tmux {
    socket: String,
    /// The session's working directory, where its command starts (not the checkout: common's module doc).
    cwd: tempfile::TempDir,
}

impl Tmux {
    fn start(command: &str, width: u16, height: u16) -> Self {
        // A server of its own per session: one that was just killed may still be going away under the same
        // name (CI once saw "server exited unexpectedly" when the q and Ctrl-C sessions reused one name).
        static SESSIONS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let socket = format!("efatop-test-{}-{n}", std::process::id());
        let tmux = Self { socket, cwd: common::scratch() };
        let status = common::command_in("tmux", tmux.cwd.path())
            .args(["-L", &tmux.socket, "new-session", "-d", "-s", "efatop", "-x", &width.to_string(), "-y", &height.to_string()])
            .arg("-c")
            .arg(tmux.cwd.path())
            .arg(format!("{command}; echo EFATOP-EXIT=$?; sleep 600"))
            .status()
            .expect("tmux is installed (scripts/build/setup-debian installs it)");
        assert!(status.success(), "tmux new-session failed");
        tmux
    }

    /// The visible screen, or with `history` lines of scrollback.
    fn screen(&self, history: u32) -> String {
        let start = format!("-{history}");
        let output = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-t", "efatop", "-S", &start])
            .output()
            .expect("capture-pane");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn wait_for(&self, needle: &str, limit: Duration) -> String {
        let started = Instant::now();
        loop {
            let screen = self.screen(300);
            if screen.contains(needle) {
                return screen;
            }
            assert!(started.elapsed() < limit, "`{needle}` did not appear within {limit:?}; screen:\n{screen}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn keys(&self, keys: &str) {
        let status = Command::new("tmux").args(["-L", &self.socket, "send-keys", "-t", "efatop", keys]).status().expect("send-keys");
        assert!(status.success());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.socket, "kill-server"]).status();
    }
}

/// The gauge lines of the live channels panel (`r<rank> c<channel> <nic> ... Gbps`).
fn gauges(screen: &str) -> Vec<String> {
    screen.lines().filter(|l| l.contains(" c0 ") && l.contains("Gbps") && l.contains("op/s")).map(str::to_string).collect()
}

fn gbps_values(lines: &[String]) -> Vec<f64> {
    lines
        .iter()
        .filter_map(|l| {
            let before = l.split(" Gbps").next()?;
            before.split_whitespace().last()?.parse().ok()
        })
        .collect()
}

#[test]
fn dashboard_moves_then_shows_the_final_table() {
    let _one = serial();
    let command = format!(
        "{} run --ranks 4 write --provider shm --min-size 64K --max-size 32M --iters 40 --interval 50ms",
        efatop_path().display()
    );
    let tmux = Tmux::start(&command, 120, 40);
    tmux.wait_for("Live channels", Duration::from_secs(30));
    // Two readings a moment apart: the gauges are live.
    let mut moved = false;
    let mut first = gauges(&tmux.screen(0));
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(250));
        let second = gauges(&tmux.screen(0));
        if !second.is_empty() && second != first && gbps_values(&second).iter().any(|g| *g > 0.0) {
            moved = true;
            break;
        }
        first = second;
    }
    assert!(moved, "the gauges never moved:\n{}", tmux.screen(0));
    assert_eq!(gauges(&tmux.screen(0)).len(), 4, "one gauge per rank and channel:\n{}", tmux.screen(0));

    let finished = tmux.wait_for("The run has ended", Duration::from_mins(2));
    assert!(finished.contains("32M"), "the results panel shows the last size:\n{finished}");
    assert!(finished.contains("RoundRobinPin"), "{finished}");
    tmux.keys("x");
    let after = tmux.wait_for("EFATOP-EXIT=", Duration::from_secs(10));
    assert!(after.contains("EFATOP-EXIT=0"), "{after}");
    assert!(after.contains("| Size |"), "the plain table is left in the scrollback:\n{after}");
    assert!(after.lines().any(|l| l.starts_with("|  32M |")), "{after}");
    assert!(after.contains("every size verified"), "{after}");
    assert!(!after.contains("Live channels"), "the dashboard left the alternate screen:\n{after}");
}

#[test]
fn q_or_ctrl_c_stops_every_rank_restores_the_terminal_and_keeps_the_results() {
    let _one = serial();
    for key in ["q", "C-c"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let results = dir.path().join("stopped.json");
        let command = format!(
            "{} run --ranks 3 write --provider tcp --min-size 1M --max-size 64M --iters 200 --configs single --out {}",
            efatop_path().display(),
            results.display()
        );
        let tmux = Tmux::start(&command, 100, 30);
        // Stop once at least one size is done, so there is something to keep.
        tmux.wait_for("data verified", Duration::from_mins(1));
        let started = Instant::now();
        tmux.keys(key);
        let after = tmux.wait_for("EFATOP-EXIT=", Duration::from_mins(1));
        assert!(after.contains("EFATOP-EXIT=130"), "{key}: {after}");
        assert!(after.contains("stopped at the user's request"), "{key}: {after}");
        assert!(started.elapsed() < Duration::from_mins(1));
        assert!(!after.contains("Live channels"), "{key}: the terminal is back from the alternate screen:\n{after}");
        let kept = efatop_proto::RunResults::from_json(&std::fs::read(&results).expect("results file")).expect("results");
        assert!(!kept.measurements.is_empty(), "{key}: the sizes finished before the stop are kept");
        // No rank is left behind.
        let leftover = Command::new("pgrep").args(["-f", &format!("{} write --provider tcp --min-size 1M", efatop_path().display())]).output();
        if let Ok(output) = leftover {
            assert!(output.stdout.is_empty(), "{key}: ranks still running: {}", String::from_utf8_lossy(&output.stdout));
        }
    }
}

#[test]
fn a_recorded_run_replays_in_the_dashboard_to_its_final_table() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let recording = dir.path().join("run.efarec");
    let record = common::efatop_in(dir.path())
        .args(["run", "--ranks", "2", "write", "--provider", "shm", "--max-size", "1M", "--interval", "50ms", "--no-tui", "--record"])
        .arg(&recording)
        .arg("--out")
        .arg(dir.path().join("recorded.json"))
        .output()
        .expect("record a run");
    assert!(record.status.success(), "{}", String::from_utf8_lossy(&record.stderr));

    let command = format!("{} replay {} --speed 8", efatop_path().display(), recording.display());
    let tmux = Tmux::start(&command, 120, 40);
    let finished = tmux.wait_for("The run has ended", Duration::from_mins(1));
    assert!(finished.contains("replay 8x"), "the progress line says what plays:\n{finished}");
    assert!(finished.contains("1M"), "the results panel shows the last size:\n{finished}");
    assert!(finished.contains("RoundRobinPin"), "{finished}");
    // Paused, back one step: the run is shown as it stood then, not finished.
    tmux.keys("Space");
    tmux.wait_for("PAUSED", Duration::from_secs(10));
    tmux.keys("[");
    let started = Instant::now();
    while tmux.screen(0).contains("The run has ended") {
        assert!(started.elapsed() < Duration::from_secs(10), "`[` did not step back:\n{}", tmux.screen(0));
        std::thread::sleep(Duration::from_millis(100));
    }
    // The playback keys are in the help.
    tmux.keys("?");
    tmux.wait_for("replay: pause / play", Duration::from_secs(10));
    tmux.keys("Escape");
    // Played on, it ends again.
    tmux.keys("Space");
    tmux.wait_for("The run has ended", Duration::from_mins(1));
    tmux.keys("x");
    let after = tmux.wait_for("EFATOP-EXIT=", Duration::from_secs(10));
    assert!(after.contains("EFATOP-EXIT=0"), "{after}");
    assert!(after.lines().any(|l| l.starts_with("|   1M |")), "the plain table is left in the scrollback:\n{after}");
}

/// A rank that hangs mid-run: the dashboard names it, keeps the tables of the sizes measured on screen
/// until a key, and leaves them (and how the run ended) in the scrollback; exit 1.
#[test]
fn a_hung_rank_ends_the_dashboard_with_its_tables_kept_until_a_key() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let results = dir.path().join("hung.json");
    let command = format!(
        "cd {} && {} run --ranks 3 write --provider shm --min-size 64K --max-size 64M --iters 300 --configs single --hang-timeout 3 --out {}",
        dir.path().display(),
        efatop_path().display(),
        results.display()
    );
    let tmux = Tmux::start(&command, 120, 40);
    tmux.wait_for("data verified", Duration::from_mins(1));
    // Rank 2 of this session's launcher: the only efatop with EFATOP_RANK=2 whose results go to our file.
    let victim = std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            env.split(|b| *b == 0).any(|v| v == b"EFATOP_RANK=2")
                && String::from_utf8_lossy(&cmdline).contains(&*results.to_string_lossy())
        })
        .expect("rank 2");
    assert!(Command::new("kill").args(["-STOP", &victim.to_string()]).status().expect("kill").success());
    let ended = tmux.wait_for("stopped responding", Duration::from_secs(30));
    assert!(ended.contains("The run has ended"), "the dashboard shows the end:\n{ended}");
    assert!(ended.contains("SinglePin"), "the results panel keeps the sizes measured:\n{ended}");
    // It stays until a key.
    std::thread::sleep(Duration::from_secs(3));
    let still = tmux.screen(0);
    assert!(still.contains("stopped responding") && !still.contains("EFATOP-EXIT="), "the dashboard did not wait for a key:\n{still}");
    tmux.keys("x");
    let after = tmux.wait_for("EFATOP-EXIT=", Duration::from_secs(15));
    let _ = Command::new("kill").args(["-KILL", &victim.to_string()]).status();
    assert!(after.contains("EFATOP-EXIT=1"), "{after}");
    assert!(after.contains("| Size |"), "the plain table is left in the scrollback:\n{after}");
    assert!(after.contains("# the run failed: rank 2 ("), "{after}");
    let kept = efatop_proto::RunResults::from_json(&std::fs::read(&results).expect("results file")).expect("results");
    assert!(!kept.measurements.is_empty(), "the sizes measured are kept");
}
