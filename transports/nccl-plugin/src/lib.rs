//! efatop's NCCL profiler plugin: NCCL loads it through `NCCL_PROFILER_PLUGIN` (docs/watch.md) and calls it
//! on every group, collective, point-to-point call, kernel channel and proxy operation and step.
//!
//! - [`ffi`]: the ABI tables NCCL looks up (`ncclProfiler_v7`, `_v6`, `_v5`, `_v4`) over [`abi`]'s layouts; the
//!   hot path pushes fixed-size [`record::Record`]s into a lock-free ring ([`runtime`]) and returns: it
//!   never blocks, locks or allocates, and a full ring drops and counts. A proxy operation's steps are
//!   summed in a slot of their own ([`opsteps`]) and pushed once, at the operation's end.
//! - [`worker`]: the plugin's own thread folds the records ([`fold`]: per communicator and collective,
//!   per peer, per channel, progress by sequence number), reads the node's EFA counters ([`identity`], with
//!   what [`host`] looks up in the process) and
//!   sends the figures ([`sink`]) to `efatop watch` (through the host's [`relay`]: one connection a host) or
//!   a file; with `EFATOP_PROFILER_TRACE` it also writes
//!   every record ([`trace`]) for fixtures.
//!
//! It depends on `efatop-proto` alone among efatop's crates (no tokio, ratatui or hwloc).

#![deny(unsafe_code)]

pub mod abi;
#[allow(unsafe_code)]
pub mod ffi;
pub mod fold;
#[allow(unsafe_code)]
pub mod host;
pub mod identity;
pub mod opsteps;
pub mod record;
pub mod relay;
pub mod runtime;
pub mod sink;
pub mod trace;
pub mod worker;

/// One line on stderr from this process's plugin (`efatop-nccl[PID]: ...`), unless `EFATOP_PROFILER_QUIET`
/// is set.
pub(crate) fn say(text: &str) {
    if std::env::var_os("EFATOP_PROFILER_QUIET").is_none() {
        eprintln!("efatop-nccl[{}]: {text}", std::process::id());
    }
}
