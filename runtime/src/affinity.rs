//! Which CPUs a thread may run on: what the process was allowed, and confining a thread to some of them
//! (a rank's hot thread and its helpers, the bench_collector example's load and consumer sides).

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

/// The CPUs the calling thread may run on (taskset, a cpuset); empty when the kernel does not say.
pub fn allowed_cpus() -> Vec<usize> {
    let Ok(set) = sched_getaffinity(Pid::from_raw(0)) else { return Vec::new() };
    (0..CpuSet::count()).filter(|&cpu| set.is_set(cpu).unwrap_or(false)).collect()
}

/// Confines a thread (`tid`, or the calling thread when `None`) to `cpus`; false when the kernel refused.
pub fn pin_thread(tid: Option<i32>, cpus: impl IntoIterator<Item = usize>) -> bool {
    let mut set = CpuSet::new();
    for cpu in cpus {
        if set.set(cpu).is_err() {
            return false;
        }
    }
    sched_setaffinity(Pid::from_raw(tid.unwrap_or(0)), &set).is_ok()
}
