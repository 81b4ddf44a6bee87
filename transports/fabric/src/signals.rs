//! Stop signals back in the process's hands.
//!
//! Some libraries a libfabric build links install signal handlers from their constructors, before `main`
//! runs: Debian's libfabric 1.17 pulls in `libinfinipath.so.4` (through its psm provider), whose constructor
//! catches SIGINT and SIGTERM (and SIGILL, SIGABRT, SIGBUS, SIGSEGV) and calls `exit(1)`. Handlers
//! registered later through tokio chain to it, so a SIGTERM would end a rank with exit 1 and no tables, and
//! a launcher with its ranks left running. [`reclaim_stop_signals`] puts SIGINT, SIGTERM and SIGHUP back to
//! their default before efatop registers its own.

use std::io;

/// The signals efatop handles itself, by name.
const STOP_SIGNALS: [(libc::c_int, &str); 3] = [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM"), (libc::SIGHUP, "SIGHUP")];

/// Sets SIGINT, SIGTERM and SIGHUP to their default disposition where a library's constructor installed a
/// handler (an ignored signal stays ignored: `nohup` asked for it). Returns the signals it took back, for
/// the diagnostics. Call at the start of `main`, before any thread registers a handler.
pub fn reclaim_stop_signals() -> io::Result<Vec<&'static str>> {
    let mut reclaimed = Vec::new();
    for (signal, name) in STOP_SIGNALS {
        // SAFETY: an all-zero `sigaction` is a valid value of the C struct (no handler, empty mask, no flags).
        let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a null new action only reads the current one into `current`, a valid, writable struct.
        if unsafe { libc::sigaction(signal, std::ptr::null(), &raw mut current) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if current.sa_sigaction == libc::SIG_DFL || current.sa_sigaction == libc::SIG_IGN {
            continue;
        }
        // SAFETY: as above, a valid zeroed struct; SIG_DFL with an empty mask and no flags is the default
        // disposition. Called before this process's own handlers exist, so none is removed.
        let mut default: libc::sigaction = unsafe { std::mem::zeroed() };
        default.sa_sigaction = libc::SIG_DFL;
        // SAFETY: `default` is a fully initialised action; the old action is not asked for.
        if unsafe { libc::sigaction(signal, &raw const default, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        reclaimed.push(name);
    }
    Ok(reclaimed)
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" fn noop(_: libc::c_int) {}

    #[test]
    fn a_handler_installed_before_is_taken_back_and_an_ignored_signal_stays_ignored() {
        // SAFETY: test-only; installs a no-op handler for SIGHUP and ignores SIGINT in this test process.
        unsafe {
            libc::signal(libc::SIGHUP, noop as extern "C" fn(libc::c_int) as libc::sighandler_t);
            libc::signal(libc::SIGINT, libc::SIG_IGN);
        }
        let reclaimed = reclaim_stop_signals().expect("sigaction");
        assert!(reclaimed.contains(&"SIGHUP"), "{reclaimed:?}");
        assert!(!reclaimed.contains(&"SIGINT"), "{reclaimed:?}");
        // SAFETY: reads the current SIGINT/SIGHUP actions into zeroed structs.
        let (hup, int) = unsafe {
            let mut hup: libc::sigaction = std::mem::zeroed();
            let mut int: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGHUP, std::ptr::null(), &raw mut hup);
            libc::sigaction(libc::SIGINT, std::ptr::null(), &raw mut int);
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            (hup.sa_sigaction, int.sa_sigaction)
        };
        assert_eq!(hup, libc::SIG_DFL);
        assert_eq!(int, libc::SIG_IGN);
    }
}
