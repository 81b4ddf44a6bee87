//! Shared-memory regions that libfabric's `shm` provider leaves behind when a process is killed.
//!
//! shm names each endpoint's region `/dev/shm/<pid>:<uid>:<endpoint index>` (`smr_endpoint_name` in
//! `prov/shm/src/smr_ep.c`, the same in 1.17 and 2.x: `fi_shm://<pid>` plus `:<getuid()>:<global ep index>`,
//! the `fi_shm://` prefix dropped for `shm_open`). A rank killed by a signal never unlinks its regions, and
//! pids come round again (`pid_max` is often 32768), so a later process that gets the dead one's pid finds
//! its first endpoint's name taken:
//! - 1.17 fails `fi_enable` with EBUSY. Seen in CI after the reliability tests had `SIGKILL`ed ranks:
//!   `fi_enable failed: Device or resource busy (error 16)`.
//! - 2.x (`smr_create`/`smr_retry_map` in `smr_util.c`) maps the old region to read its owner's pid: a region
//!   of a dead pid is overwritten, one whose pid is alive (ours, reused) is unlinked and the endpoint retried
//!   under `<pid>:<uid>:<index>:<random seed>`, so killed 2.x ranks can also leave 4-part names. A region
//!   shorter than its header (a rank killed between `shm_open` and `ftruncate`, or any empty file) raises
//!   SIGBUS there, and any `smr_create` error other than EBUSY (a name that cannot be opened: EISDIR,
//!   EACCES, ...) leaves the endpoint without a region, which 2.2.0–2.6.0 then dereference in `smr_ep_ctrl`:
//!   a segfault instead of an error from `fi_enable`.
//!
//! Removing every region named for this pid before the first endpoint opens (no region with our pid can
//! be ours yet), and the regions of each rank the launcher reaps, keeps stale files from reaching either.

use std::path::Path;
use std::sync::Once;

const SHM_DIR: &str = "/dev/shm";

/// Whether `name` is one of shm's region names for `pid`: `<pid>:<uid>:<index>`, or 2.x's retry name
/// `<pid>:<uid>:<index>:<seed>`.
fn is_region_of(name: &str, pid: u32) -> bool {
    let mut parts = name.split(':');
    let numeric = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    if parts.next() != Some(pid.to_string().as_str()) {
        return false;
    }
    let rest: Vec<&str> = parts.collect();
    matches!(rest.len(), 2 | 3) && rest.iter().all(|p| numeric(p))
}

/// Removes the regions named for `pid` from `dir`; returns how many.
fn remove_in(dir: &Path, pid: u32) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .filter(|entry| entry.file_name().to_str().is_some_and(|name| is_region_of(name, pid)))
        .filter(|entry| std::fs::remove_file(entry.path()).is_ok())
        .count()
}

/// Removes the regions of a process that has ended (the launcher calls it for each rank it reaped: a rank
/// that exited normally has none left, one killed by a signal may).
pub fn remove_regions_of_ended_process(pid: u32) -> usize {
    remove_in(Path::new(SHM_DIR), pid)
}

/// Removes this process's own regions: its shm endpoints were abandoned, not closed (see [`crate::ending`]),
/// and the process is about to exit.
pub(crate) fn remove_regions_of_this_process() -> usize {
    remove_in(Path::new(SHM_DIR), std::process::id())
}

/// Before this process opens its first shm endpoint, no region with its pid can be its own: any that
/// exists is a dead predecessor's and would make `fi_enable` fail. Removed once per process.
pub(crate) fn remove_stale_regions_of_this_pid() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        remove_in(Path::new(SHM_DIR), std::process::id());
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_shm_region_names_of_that_pid_are_matched() {
        assert!(is_region_of("1234:0:0", 1234));
        assert!(is_region_of("1234:1:17", 1234));
        assert!(!is_region_of("12345:0:0", 1234));
        assert!(!is_region_of("1234:0", 1234));
        assert!(is_region_of("1234:1000:3", 1234), "1.17 and 2.x: <pid>:<uid>:<endpoint index>");
        assert!(is_region_of("1234:0:0:2857301", 1234), "2.x's name for a retry after EBUSY");
        assert!(!is_region_of("1234:0:0:0:0", 1234));
        assert!(!is_region_of("1234:0:0:", 1234));
        assert!(!is_region_of("1234:0:0:x", 1234));
        assert!(!is_region_of("1234:a:0", 1234));
        assert!(!is_region_of("fi_shm_1234", 1234));
        assert!(!is_region_of("1234::0", 1234));
    }

    #[test]
    fn removes_that_pids_regions_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("efatop-shm-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        for name in ["777:0:0", "777:0:1", "777:0:0:99", "7777:0:0", "other", "777:x:0"] {
            std::fs::write(dir.join(name), b"").expect("file");
        }
        assert_eq!(remove_in(&dir, 777), 3);
        let mut left: Vec<String> =
            std::fs::read_dir(&dir).expect("read").flatten().filter_map(|e| e.file_name().into_string().ok()).collect();
        left.sort();
        assert_eq!(left, ["7777:0:0", "777:x:0", "other"]);
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
