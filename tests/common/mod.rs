//! Running the real efatop binary: one multi-rank run at a time (the CI machine has two cores, and ranks
//! busy-poll), with a wall-clock limit so a hang fails the test instead of stalling it.
//!
//! Every program a test starts that is, or may start, efatop goes through [`command_in`] (or [`efatop_in`],
//! [`run_program`], [`efatop`], [`mpirun`], which use it): it runs in a temporary working directory, so
//! nothing a rank writes relative to its working directory lands in the checkout, where `cargo test` starts
//! the tests: a results file under `efatop-results/`, or the `<exe>.<host>-<pid>,<host>.btr` backtrace that
//! libpsm2 writes when a process segfaults (Debian's libfabric loads libpsm2, which installs that handler).

#![allow(dead_code)]

pub mod prometheus;
pub mod player;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

static ONE_RUN_AT_A_TIME: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    ONE_RUN_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub fn efatop_path() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_efatop"))
}

/// The library directory of the libfabric these tests were built against when `LIBFABRIC_DIR` named one
/// (`None`: pkg-config's, e.g. Debian's 1.17, which the loader finds by default).
pub fn built_libfabric_lib_dir() -> Option<PathBuf> {
    let prefix = PathBuf::from(option_env!("LIBFABRIC_DIR")?);
    ["lib64", "lib"].into_iter().map(|lib| prefix.join(lib)).find(|dir| dir.join("libfabric.so.1").exists())
}

/// `LD_LIBRARY_PATH` for the programs the tests start: the built-against libfabric first. efatop carries
/// that directory as RUNPATH, but `LD_LIBRARY_PATH` outranks RUNPATH, so an inherited one naming another
/// libfabric would win; and ranks started through `sh -c` or mpirun must load the same library.
pub fn library_path() -> Option<String> {
    let dir = built_libfabric_lib_dir()?;
    let dir = dir.to_str().expect("utf-8 path").to_string();
    Some(match std::env::var("LD_LIBRARY_PATH") {
        Ok(old) if !old.is_empty() => format!("{dir}:{old}"),
        _ => dir,
    })
}

pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

/// A fresh temporary directory to start a program in (see [`command_in`]); removed, with whatever the
/// program left there, when dropped. Keep it until the program has ended.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("efatop-test-cwd-").tempdir().expect("a temporary working directory")
}

/// `program` as the tests start anything that is, or may start, efatop: in `dir` (a [`scratch`] directory,
/// or the test's own temporary directory, that outlives the process; never the checkout) and with
/// [`library_path`]. Paths handed to it must be absolute.
pub fn command_in(program: impl AsRef<OsStr>, dir: &Path) -> Command {
    let mut command = Command::new(program);
    command.current_dir(dir);
    // The viewers' token (--serve, attach): one for every process a test starts, so that they agree and no
    // test writes the user's own token file.
    command.env("EFATOP_TOKEN", TEST_TOKEN);
    // Debian's libfabric links the old PSM libraries (libpsm_infinipath, libpsm2), whose constructors take
    // the process's fatal signals for their own report unless told not to: a crash then shows no frames
    // (CI's flake under --mpi=pmix, docs/testing.md). Open MPI sets these itself, but after the libraries
    // were loaded. And Open MPI is kept from probing PSM's MTLs for hardware no test machine has: MPI is
    // only efatop's bootstrap, and its ob1 layer is what runs on such a machine anyway.
    command.env("IPATH_NO_BACKTRACE", "1").env("HFI_NO_BACKTRACE", "1").env("OMPI_MCA_pml", "ob1");
    if let Some(path) = library_path() {
        command.env("LD_LIBRARY_PATH", path);
    }
    command
}

/// The token every process the tests start proves to `--serve` (`EFATOP_TOKEN`).
pub const TEST_TOKEN: &str = "efatop-tests-viewer-token";

/// The efatop under test, started in `dir` (see [`command_in`]).
pub fn efatop_in(dir: &Path) -> Command {
    command_in(efatop_path(), dir)
}

/// Runs `program args` with a limit, in a [`scratch`] directory of its own; kills it (and fails) if the limit
/// passes. Its output is read while it runs: a program that writes more than a pipe holds (`--json` samples)
/// must not block on a full pipe.
pub fn run_program(program: &str, args: &[&str], limit: Duration) -> Run {
    use std::io::Read;
    let started = Instant::now();
    let cwd = scratch();
    let mut command = command_in(program, cwd.path());
    command.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr")));
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{program} {args:?} did not finish within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                stdout.join().unwrap_or_default(),
                stderr.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.code(),
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
        elapsed: started.elapsed(),
    }
}

pub fn efatop(args: &[&str]) -> Run {
    let path = efatop_path();
    run_program(path.to_str().expect("utf-8 path"), args, Duration::from_mins(2))
}

/// mpirun as CI runs it: as root, more ranks than cores.
pub fn mpirun(ranks: usize, args: &[&str]) -> Run {
    let path = efatop_path();
    let ranks = ranks.to_string();
    let mut full = vec!["--allow-run-as-root", "--oversubscribe", "-np", &ranks, path.to_str().expect("utf-8 path")];
    full.extend_from_slice(args);
    run_program("mpirun", &full, Duration::from_mins(3))
}

/// The table rows (lines starting with `|` after the rule), split into trimmed cells.
pub fn table_rows(stdout: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|-") && !l.contains("Count"))
        .map(|l| l.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect())
        .collect()
}

/// Every descendant of `root` (itself included), from /proc's children lists.
pub fn descendants(root: u32) -> Vec<u32> {
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        for task in std::fs::read_dir(format!("/proc/{parent}/task")).into_iter().flatten().flatten() {
            if let Ok(children) = std::fs::read_to_string(task.path().join("children")) {
                for child in children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
                    if !found.contains(&child) {
                        found.push(child);
                    }
                }
            }
        }
        i += 1;
    }
    found
}

/// A process's start time (clock ticks after boot): with the pid, it names one process even after the
/// pid is reused.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name, which may hold spaces, in parentheses.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // state is field 3, starttime field 22 of stat(5).
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// Processes a test started (a launcher and what it started), by pid and start time: the only ones it
/// may signal. Tests never signal processes by name.
#[derive(Default)]
pub struct Tracked {
    processes: Vec<(u32, u64)>,
}

/// A rank these tests killed leaves its shm regions in /dev/shm (a signal it cannot catch gives libfabric no
/// chance to unlink them): once the test is done with its processes, those of ours that have ended lose theirs.
/// A pid some other process has taken since is left alone.
impl Drop for Tracked {
    fn drop(&mut self) {
        for (pid, _) in &self.processes {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                efatop_fabric::shm_regions::remove_regions_of_ended_process(*pid);
            }
        }
    }
}

impl Tracked {
    pub fn add(&mut self, pid: u32) {
        if let Some(started) = start_time(pid) {
            if !self.processes.contains(&(pid, started)) {
                self.processes.push((pid, started));
            }
        }
    }

    pub fn add_descendants(&mut self, root: u32) {
        for pid in descendants(root) {
            self.add(pid);
        }
    }

    /// Those still running (not exited, not zombies), by pid.
    pub fn alive(&self) -> Vec<u32> {
        self.processes.iter().filter(|(pid, started)| start_time(*pid) == Some(*started)).map(|(pid, _)| *pid).collect()
    }

    /// SIGCONT then SIGKILL to each of ours still running.
    pub fn kill_all(&self) {
        for pid in self.alive() {
            let _ = Command::new("kill").args(["-CONT", &pid.to_string()]).status();
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
    }
}

/// scripts/cluster/emulate-cluster, from the repository.
pub fn cluster_script() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cluster/emulate-cluster").display().to_string()
}

/// Whether scripts/cluster/emulate-cluster must work here: as root with `ip` and `tc` on the `PATH`, or on CI
/// (`CI=true`), where a cluster suite must never pass without running. `Err` says why it cannot.
pub fn cluster_must_work() -> Result<(), String> {
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        return Ok(());
    }
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    let mut lacking: Vec<&str> = Vec::new();
    if !root {
        lacking.push("root");
    }
    lacking.extend(["ip", "tc"].into_iter().filter(|tool| !on_path(tool)));
    if lacking.is_empty() {
        Ok(())
    } else {
        Err(format!("the emulated cluster needs root, ip and tc; this test runs without {}", lacking.join(", ")))
    }
}

/// The executable file `name` in one of the `PATH`'s directories.
pub fn program(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|path| std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

fn on_path(name: &str) -> bool {
    program(name).is_some()
}

/// `name` from the `PATH`, or `None` after a SKIPPED line; under `CI=true` a missing program fails the test
/// instead (scripts/build/setup-debian installs Debian's `package`, which has it).
pub fn required(name: &str, package: &str) -> Option<PathBuf> {
    if let Some(path) = program(name) {
        return Some(path);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "no `{name}` on PATH under CI=true: scripts/build/setup-debian installs Debian's `{package}`"
    );
    eprintln!("SKIPPED: no `{name}` on PATH (Debian package `{package}`; scripts/build/setup-debian installs it)");
    None
}

/// A port nobody listens on now (for a server that takes its listen address from the command line).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port()
}

/// `GET path` over HTTP/1.0 as `curl` asks (no `Accept`): the status and the body.
pub fn http_get(address: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    let status = reply.split_whitespace().nth(1)?.parse().ok()?;
    let body = reply.split_once("\r\n\r\n").map(|(_, body)| body.to_string())?;
    Some((status, body))
}

/// What to do when `scripts/cluster/emulate-cluster up` failed (`failure`: how, with the script's stderr): panic where
/// the cluster must work ([`cluster_must_work`]), so that a broken script fails the suite; else say why the
/// test skips. Returns only to skip.
pub fn cluster_up_failed(failure: &str) {
    match cluster_must_work() {
        Ok(()) => panic!("scripts/cluster/emulate-cluster up failed where it must work (root with ip and tc, or CI=true): {failure}"),
        Err(why) => eprintln!("SKIPPED: {why}: {failure}"),
    }
}

/// An emulated cluster (4 nodes × 4 NICs unless built otherwise), up while this lives; it holds the cluster lock,
/// released after `down`. Where `up` fails, the test fails if the cluster must work ([`cluster_must_work`]);
/// elsewhere this is `None`, with a SKIPPED line saying why.
pub struct Cluster {
    _lock: std::fs::File,
}

impl Cluster {
    /// At 1 Gbit/s per NIC.
    pub fn up() -> Option<Self> {
        Self::up_at("1gbit")
    }

    pub fn up_at(rate: &str) -> Option<Self> {
        Self::build(4, 4, rate)
    }

    /// `nodes` × `nics` at `rate`.
    pub fn build(nodes: usize, nics: usize, rate: &str) -> Option<Self> {
        let lock = cluster_lock();
        let (nodes, nics) = (nodes.to_string(), nics.to_string());
        let failure = match Command::new(cluster_script()).args(["up", "--nodes", &nodes, "--nics", &nics, "--rate", rate]).output() {
            Ok(output) if output.status.success() => return Some(Cluster { _lock: lock }),
            Ok(output) => format!("{}: {}", output.status, String::from_utf8_lossy(&output.stderr).trim()),
            Err(err) => format!("cannot start {}: {err}", cluster_script()),
        };
        let _ = Command::new(cluster_script()).arg("down").output();
        drop(lock);
        cluster_up_failed(&failure);
        None
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(cluster_script()).arg("down").output();
    }
}

/// The lock every user of scripts/cluster/emulate-cluster takes (`flock /tmp/efatop-cluster.lock …` by hand): one
/// emulated cluster on the machine at a time, across test binaries and people. Held until dropped.
pub fn cluster_lock() -> std::fs::File {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/tmp/efatop-cluster.lock")
        .expect("open /tmp/efatop-cluster.lock");
    file.lock().expect("flock /tmp/efatop-cluster.lock");
    file
}

/// Where scripts/cluster/slurm-cluster keeps its files (its default).
pub const SLURM_DIR: &str = "/tmp/efatop-slurm";

fn slurm_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cluster/slurm-cluster")
}

/// A real Slurm cluster (scripts/cluster/slurm-cluster: munged, slurmctld, one slurmd per emulated node), up while
/// this lives, on an emulated cluster that holds the cluster lock. Where Slurm's programs are missing (and
/// not on CI) it is `None`, with a SKIPPED line.
pub struct SlurmCluster {
    _cluster: Cluster,
}

impl SlurmCluster {
    /// On 4 nodes × 4 NICs at 1 Gbit/s.
    pub fn up() -> Option<Self> {
        Self::up_with(&[])
    }

    /// With more `scripts/cluster/slurm-cluster up` flags.
    pub fn up_with(flags: &[&str]) -> Option<Self> {
        Self::on(Cluster::up, flags)
    }

    /// On the emulated cluster `cluster` brings up, with more `scripts/cluster/slurm-cluster up` flags.
    pub fn on(cluster: impl FnOnce() -> Option<Cluster>, flags: &[&str]) -> Option<Self> {
        let missing: Vec<&str> =
            ["slurmctld", "slurmd", "srun", "sinfo", "scontrol", "munged"].into_iter().filter(|p| program(p).is_none()).collect();
        if !missing.is_empty() {
            assert!(std::env::var("CI").ok().as_deref() != Some("true"), "CI=true and {missing:?} are not on PATH");
            eprintln!("SKIPPED: {missing:?} not on PATH (Debian packages slurmctld, slurmd, slurm-client, munge; scripts/build/setup-debian)");
            return None;
        }
        let cluster = cluster()?;
        let efatop = efatop_path();
        let output = Command::new(slurm_script()).args(["up", "--efatop"]).arg(&efatop).args(flags).output().expect("slurm-cluster");
        if !output.status.success() {
            let logs = std::fs::read_dir(format!("{SLURM_DIR}/log"))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| format!("== {}\n{}", e.path().display(), std::fs::read_to_string(e.path()).unwrap_or_default()))
                .collect::<Vec<_>>()
                .join("\n");
            let _ = Command::new(slurm_script()).arg("down").output();
            panic!("slurm-cluster up failed: {}\n{logs}", String::from_utf8_lossy(&output.stderr));
        }
        // srun, sinfo and scontrol of the test find the cluster through SLURM_CONF (the same value for every
        // test; one cluster test runs at a time).
        std::env::set_var("SLURM_CONF", format!("{SLURM_DIR}/slurm.conf"));
        Some(Self { _cluster: cluster })
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        let _ = Command::new(slurm_script()).arg("down").output();
    }
}

/// Lines of `pipe` as they come, on a channel (read on a thread of their own, so a chatty child never blocks
/// on a full pipe).
pub fn lines_of(pipe: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// The efatop process of rank `rank` below `root` (a launcher the test started), by its environment.
pub fn rank_pid(root: u32, rank: usize) -> Option<u32> {
    let wanted = format!("EFATOP_RANK={rank}");
    descendants(root).into_iter().find(|pid| {
        std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == wanted.as_bytes()))
            && std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "efatop")
    })
}

/// A counter of a fake sysfs tree that follows a live one of this machine (lo's `tx_bytes`, say), so that
/// it grows with a run's own traffic: a thread copies `source` into `counter` every millisecond until
/// [`LiveCounter::stop`] (or drop). A counter is a regular file, as sysfs's are (the bounded reader refuses a
/// link), so each copy is written beside it and renamed into place: a reader sees the old value or the new,
/// never half a number. The first copy is made before `follow` returns.
pub struct LiveCounter {
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    copier: Option<std::thread::JoinHandle<()>>,
}

impl LiveCounter {
    pub fn follow(source: impl Into<PathBuf>, counter: impl Into<PathBuf>) -> Self {
        let (source, counter) = (source.into(), counter.into());
        let staged = counter.with_extension("staged");
        let copy = move || {
            let now = std::fs::read_to_string(&source).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
            std::fs::write(&staged, now).expect("stage the counter");
            std::fs::rename(&staged, &counter).expect("rename the counter into place");
        };
        copy();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let copier = {
            let done = std::sync::Arc::clone(&done);
            std::thread::spawn(move || {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                    copy();
                }
            })
        };
        Self { done, copier: Some(copier) }
    }

    /// Stops copying; fails the test if a copy failed.
    pub fn stop(mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(copier) = self.copier.take() {
            copier.join().expect("the counter's copier");
        }
    }
}

impl Drop for LiveCounter {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(copier) = self.copier.take() {
            let _ = copier.join();
        }
    }
}
