//! A healthy run is never killed as hung, even on a loaded node.
//!
//! The load is the one that made the old heartbeat (2.5 s of silence) kill healthy 1 GiB runs:
//! threads of this test process that map, fault in, lock and unmap 1 GiB over and over,
//! as a rank's buffer set-up does. It keeps the kernel busy zeroing, compacting and freeing memory, so
//! that a rank's own 1 GiB mlock holds its process's memory map lock for seconds; a sampler thread that
//! allocated then (it used to) waited as long, and rank 0 saw a silent rank. A cargo build beside the run
//! did the same, less reliably.
//!
//! `EFATOP_UNDER_TEST=/path/to/efatop` runs these against another build (e.g. one from before the fix,
//! which fails them with "stopped responding").

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{run_program, serial};

/// Threads of this process locking and unlocking 1 GiB each, until dropped.
struct MemoryLoad {
    stop: Arc<AtomicBool>,
    cycles: Arc<AtomicU64>,
    slowest_ms: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl MemoryLoad {
    fn start(threads: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let cycles = Arc::new(AtomicU64::new(0));
        let slowest_ms = Arc::new(AtomicU64::new(0));
        let threads = (0..threads)
            .map(|_| {
                let (stop, cycles, slowest_ms) = (stop.clone(), cycles.clone(), slowest_ms.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let began = Instant::now();
                        // Mapped, huge-page advised, locked (every page faulted in), then unmapped on drop:
                        // exactly a rank's buffer set-up and tear-down.
                        match efatop_fabric::HostBuffer::new(1 << 30) {
                            Ok(buffer) => drop(buffer),
                            Err(err) => panic!("memory load: {err}"),
                        }
                        cycles.fetch_add(1, Ordering::Relaxed);
                        slowest_ms.fetch_max(began.elapsed().as_millis() as u64, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        Self { stop, cycles, slowest_ms, threads }
    }

    fn describe(&self) -> String {
        format!(
            "{} cycles of map+lock+unmap 1 GiB, slowest {:.1} s",
            self.cycles.load(Ordering::Relaxed),
            self.slowest_ms.load(Ordering::Relaxed) as f64 / 1000.0
        )
    }
}

impl Drop for MemoryLoad {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

fn efatop_under_test() -> String {
    std::env::var("EFATOP_UNDER_TEST").unwrap_or_else(|_| common::efatop_path().to_string_lossy().into_owned())
}

/// Runs `efatop run --ranks N write ...` under the memory load; asserts exit 0, every size verified, and
/// a results file that parses and says the run completed, with every size in it.
fn healthy_under_load(ranks: &str, args: &[&str], sizes: usize, limit: Duration) {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let out: PathBuf = dir.path().join("results.json");
    let load = MemoryLoad::start(2);
    // Let the load get going before the ranks set up their buffers.
    std::thread::sleep(Duration::from_millis(500));
    let mut full = vec!["run", "--ranks", ranks, "write", "--no-tui", "--configs", "single", "--out", out.to_str().expect("utf-8")];
    full.extend_from_slice(args);
    let run = run_program(&efatop_under_test(), &full, limit);
    let load_seen = load.describe();
    drop(load);
    println!("{full:?}: exit {:?} after {:.1} s under {load_seen}\nstdout:\n{}\nstderr:\n{}", run.code, run.elapsed.as_secs_f64(), run.stdout, run.stderr);
    assert!(!run.stderr.contains("stopped responding"), "a healthy run was named hung under load ({load_seen}):\n{}", run.stderr);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stdout.contains("# every size verified"), "{}", run.stdout);
    let bytes = std::fs::read(&out).expect("results file");
    let results = efatop_proto::RunResults::from_json(&bytes).expect("results parse");
    assert_eq!(results.measurements.len(), sizes, "every size in the file");
    let status = results.status.expect("status");
    assert_eq!(status.state, efatop_proto::results::RunState::Complete, "{status:?}");
}

#[test]
fn a_2_rank_1g_shm_write_under_memory_load_finishes_verified() {
    healthy_under_load("2", &["--provider", "shm", "--min-size", "1G", "--max-size", "1G", "--iters", "3"], 1, Duration::from_mins(5));
}

#[test]
fn a_4_rank_tcp_sweep_to_256m_under_memory_load_finishes_verified() {
    healthy_under_load("4", &["--provider", "tcp", "--min-size", "1M", "--max-size", "256M", "--iters", "20"], 9, Duration::from_mins(8));
}

/// The results file is valid JSON from the moment it exists: a run that fails before its first size
/// (here a rank killed while the 1 GiB buffers are being set up, or earlier, in the launcher's
/// rendezvous, where rank 0 waits until the launcher stops it) leaves a readable file that says why.
#[test]
fn a_run_killed_before_its_first_size_leaves_a_readable_results_file_that_says_why() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("results.json");
    let mut launcher = common::command_in(efatop_under_test(), dir.path())
        .args(["run", "--ranks", "2", "write", "--no-tui", "--provider", "shm", "--min-size", "1G", "--max-size", "1G"])
        .args(["--iters", "3", "--out", out.to_str().expect("utf-8")])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start");
    let mut ours = common::Tracked::default();
    ours.add(launcher.id());
    // As soon as the file exists it parses (it is written whole, then renamed into place).
    let started = Instant::now();
    let victim = loop {
        ours.add_descendants(launcher.id());
        if let Ok(bytes) = std::fs::read(&out) {
            efatop_proto::RunResults::from_json(&bytes)
                .unwrap_or_else(|e| panic!("the results file does not parse as soon as it exists: {e}: {:?}", String::from_utf8_lossy(&bytes)));
            let rank1 = common::descendants(launcher.id()).into_iter().find(|pid| {
                std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == b"EFATOP_RANK=1"))
            });
            if let Some(pid) = rank1 {
                break pid;
            }
        }
        if started.elapsed() > Duration::from_secs(30) {
            ours.kill_all();
            panic!("no results file and rank 1 within 30 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(std::process::Command::new("kill").args(["-KILL", &victim.to_string()]).status().expect("kill").success());
    let status = loop {
        if let Some(status) = launcher.try_wait().expect("wait") {
            break status;
        }
        // A rank 0 stuck in the rendezvous is stopped by the launcher a minute after the failure.
        if started.elapsed() > Duration::from_secs(90) {
            ours.kill_all();
            panic!("the run did not end after its rank 1 was killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(launcher.stderr.as_mut().expect("stderr"), &mut stderr).expect("stderr");
    assert_ne!(status.code(), Some(0), "{stderr}");
    let bytes = std::fs::read(&out).expect("results file");
    assert!(!bytes.is_empty(), "a 0-byte results file");
    let results = efatop_proto::RunResults::from_json(&bytes).expect("results parse");
    let run_status = results.status.expect("status");
    println!("stderr:\n{stderr}\nstatus: {run_status:?}, {} sizes", results.measurements.len());
    assert_eq!(run_status.state, efatop_proto::results::RunState::Failed, "{run_status:?}\n{stderr}");
    // The reason is what rank 0 said as it ended (a lost rank, or the rendezvous it shared with it).
    let reason = run_status.reason.as_deref().unwrap_or_default();
    assert!(!reason.is_empty() && stderr.contains(reason), "{run_status:?}\n{stderr}");
    assert_eq!((results.metadata.experiment.name(), results.metadata.hang_timeout_s), ("write", 60));
}

/// The dashboard shows a rank lost exactly when the watchdog would name it hung: they read one clock, each by
/// its own comparison (ui's `ingest::shown`, the runtime's `watchdog::hung`), and must not drift apart.
#[test]
fn the_dashboard_shows_lost_exactly_the_rank_the_watchdog_names() {
    use efatop_proto::liveness::Liveness;
    use efatop_ui::state::PeerState;
    let ms = Duration::from_millis;
    let mut live = Liveness::new(3, ms(100), ms(5_000));
    let mut named_at = None;
    for step in 0..60u64 {
        let at = ms(step * 250);
        // Rank 0 and rank 2 keep speaking; rank 1 falls silent after 1 s.
        live.heard(0, at);
        live.heard(2, at);
        if at <= ms(1_000) {
            live.heard(1, at);
        }
        let named: Vec<usize> = efatop_runtime::watchdog::hung(&live, at).map(|(rank, _)| rank).into_iter().collect();
        let lost: Vec<usize> = (1..3).filter(|rank| matches!(efatop_ui::ingest::shown(&live, *rank, at), Some((_, PeerState::Lost)))).collect();
        assert_eq!(named, lost, "at {at:?}");
        if !named.is_empty() && named_at.is_none() {
            named_at = Some(at);
        }
    }
    // Silent from 1 s, past the 5 s hang timeout at the first step after 6 s.
    assert_eq!(named_at, Some(ms(6_250)));
}

