//! What both fleet benches (`bench_collector`, `bench_nodes`) read of their own process: a thread's id by
//! name, its CPU time, the process's RSS, and how many connections it may open. Not an example of its own
//! (a folder without `main.rs`): each bench takes it in with `#[path]`.
#![allow(dead_code)] // each bench uses what it reads

use std::time::Duration;

/// File descriptors this process may open for the bench's connections: the soft limit raised to the
/// hard one, less some to spare.
pub fn fd_budget() -> usize {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else { return 1024 };
    let limit = if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() { hard } else { soft };
    usize::try_from(limit).unwrap_or(usize::MAX).saturating_sub(256)
}

/// The id of this process's thread whose name (as the kernel keeps it, 15 characters) is `name`.
pub fn thread_id(name: &str) -> Option<String> {
    std::thread::sleep(Duration::from_millis(50));
    std::fs::read_dir("/proc/self/task").ok()?.flatten().find_map(|task| {
        let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
        (comm.trim() == name).then(|| task.file_name().to_string_lossy().into_owned())
    })
}

/// The nice value of this process's thread `tid`; None when it is gone.
pub fn thread_nice(tid: Option<&str>) -> Option<i32> {
    efatop_runtime::affinity::thread_nice(tid?.parse().ok()?)
}

/// CPU seconds of every thread of this process whose name is one of `names`.
pub fn threads_cpu_seconds(names: &[&str]) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0.0 };
    tasks
        .flatten()
        .filter(|task| std::fs::read_to_string(task.path().join("comm")).is_ok_and(|comm| names.contains(&comm.trim())))
        .map(|task| thread_cpu_seconds(Some(&task.file_name().to_string_lossy())))
        .sum()
}

/// CPU seconds of this process's thread `tid`; 0 when it is gone.
pub fn thread_cpu_seconds(tid: Option<&str>) -> f64 {
    tid.map_or(0.0, |tid| cpu_seconds(&format!("/proc/self/task/{tid}/stat")))
}

/// CPU seconds of the calling thread.
pub fn this_thread_cpu_seconds() -> f64 {
    cpu_seconds("/proc/thread-self/stat")
}

/// User and system time of a `stat` file, in seconds.
fn cpu_seconds(path: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(path) else { return 0.0 };
    // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
    let after_name = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// A memory figure of this process from /proc/self/status (`VmRSS`, `VmHWM`), in MiB.
pub fn rss_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with(field) && line[field.len()..].starts_with(':'))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
