//! Which CPUs a thread may run on: what the process was allowed, and confining a thread to some of them
//! (a rank's hot thread and its helpers, the bench_collector example's load and consumer sides); and a
//! thread giving way to the others of its process on a shared core (the watcher's fold and server to its view).

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

/// How much nicer than the rest of the process a thread that gives way runs: at nice +10 the kernel's
/// scheduler weights it about a tenth of a nice-0 thread (CFS: 110 against 1024), so on a shared core the
/// other thread gets about nine tenths of it while both want it, and the nicer one all that is left.
pub const GIVE_WAY_NICE: i32 = 10;

/// Where the calling thread may run on one CPU only (`taskset -c N`, a one-CPU cpuset, or a thread that
/// confined itself before starting it), lowers its priority by [`GIVE_WAY_NICE`] (Linux keeps a nice value
/// per thread), so that the process's other threads on that core run first; it still gets every cycle they
/// leave. With more CPUs the threads run side by side and nothing changes: a nicer thread would only lose
/// to other processes. True when it gave way.
pub fn give_way_on_one_core() -> bool {
    allowed_cpus().len() == 1 && give_way()
}

/// Lowers the calling thread's priority by [`GIVE_WAY_NICE`]; false when the kernel refused (a thread may
/// always lower its own).
pub fn give_way() -> bool {
    let me = rustix::thread::gettid();
    let Ok(now) = rustix::process::getpriority_process(Some(me)) else { return false };
    rustix::process::setpriority_process(Some(me), (now + GIVE_WAY_NICE).min(19)).is_ok()
}

/// The calling thread's nice value (None when the kernel does not say).
pub fn nice() -> Option<i32> {
    rustix::process::getpriority_process(Some(rustix::thread::gettid())).ok()
}

/// The nice value of thread `tid` (None when it is gone or the kernel does not say).
pub fn thread_nice(tid: i32) -> Option<i32> {
    rustix::process::getpriority_process(Some(rustix::process::Pid::from_raw(tid)?)).ok()
}

/// The nice value the kernel shows in a task's `stat` (`/proc/thread-self/stat`, `/proc/self/task/TID/stat`,
/// field 19): the tests' reading apart from the calls that set it.
#[cfg(test)]
pub(crate) fn proc_nice(stat: &str) -> i32 {
    let text = std::fs::read_to_string(stat).unwrap_or_else(|e| panic!("{stat}: {e}"));
    // The name (field 2) is in parentheses and may hold spaces: count from after its closing one.
    let rest = &text[text.rfind(')').expect("a name in parentheses") + 2..];
    rest.split(' ').nth(16).expect("field 19").parse().expect("a number")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's nice value as the kernel shows it.
    fn own_nice() -> i32 {
        proc_nice("/proc/thread-self/stat")
    }

    #[test]
    fn a_thread_on_one_core_gives_way_and_the_others_do_not() {
        let before = own_nice();
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty(), "the kernel says no CPU this thread may run on");
        let one = cpus[0];
        let (given, after) = std::thread::spawn(move || (pin_thread(None, [one]) && give_way_on_one_core(), own_nice())).join().unwrap();
        assert!(given, "a thread confined to CPU {one} did not give way");
        assert_eq!(after, (before + GIVE_WAY_NICE).min(19));
        assert_eq!(own_nice(), before, "only the thread that gave way is nicer");
        assert_eq!(nice(), Some(before));
        assert_eq!(thread_nice(rustix::thread::gettid().as_raw_nonzero().get()), Some(before));
        // With two CPUs (where the machine has them) it runs beside the others and keeps its priority.
        if cpus.len() >= 2 {
            let two = [cpus[0], cpus[1]];
            let (given, after) = std::thread::spawn(move || (pin_thread(None, two) && give_way_on_one_core(), own_nice())).join().unwrap();
            assert!(!given);
            assert_eq!(after, before);
        }
    }
}
