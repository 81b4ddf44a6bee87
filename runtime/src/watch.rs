//! `efatop watch`'s service: the server an NCCL job's profiler plugins (transports/nccl-plugin/) stream to,
//! the fold loop behind it, and its recordings (docs/watch.md).
//!
//! - [`server`]: one thread, one tokio event loop (no thread per connection) that accepts the plugins,
//!   holds each to the user's token within one deadline, and decodes their frames. Connections that have
//!   proved nothing live in a small budget of their own ([`Settings::unproven`], and per peer address
//!   [`Settings::unproven_per_peer`]): when it is full the oldest unproven connection is dropped and
//!   counted; they never count against [`Settings::max_plugins`], which bounds only plugins that proved
//!   the token.
//! - [`fold`]: the fold itself (plugins' messages in, [`efatop_proto::nccl::WatchLine`]s out; no I/O, no
//!   clock of its own).
//! - [`folder`]: the fold ([`fold::Watch`]) on a thread of its own, fed the server's
//!   batches, ticking every half second; it records what it folds when asked ([`recording`]) and hands
//!   each tick's lines to the caller (the CLI's terminal view, its printer, a bench, a test).
//! - [`recording`]: `--record`'s file, and the readers of recordings and of plugin files (`--from`,
//!   `efatop replay`).

pub mod fold;
pub mod folder;
pub mod recording;
pub mod server;

use std::time::Duration;

use efatop_proto::nccl::PluginMessage;

/// How often the fold's lines are due (the live fold loop's and a recording's replay alike).
pub const TICK: Duration = Duration::from_millis(500);

/// What the server hands the fold, in the order each connection's bytes came.
#[derive(Clone, Debug, PartialEq)]
pub enum Inbound {
    /// Connection `conn` (numbered from 1 as they came) sent a message.
    Message(u64, PluginMessage),
    /// Connection `conn` closed (or was dropped for breaking a rule after it proved the token).
    Closed(u64),
    /// A connection was refused: it proved nothing within the deadline, was the oldest unproven one when
    /// the budget was full, or came with no room among the plugins.
    Refused,
}

/// How `efatop watch` bounds what it holds. The defaults take a job of [`WORLD`] ranks.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Plugins that proved the token, held at once; more are refused and counted.
    pub max_plugins: usize,
    /// Connections still in their handshake, held at once; a newer one drops the oldest.
    pub unproven: usize,
    /// Of those, from one peer address.
    pub unproven_per_peer: usize,
    /// The whole handshake's deadline.
    pub handshake: std::time::Duration,
    /// Bytes the connections may hold between reads (partial frames) in all; a connection that would pass
    /// it is dropped.
    pub buffered: usize,
}

/// The largest job the defaults are sized for: 4096 hosts of 8 GPUs.
pub const WORLD: usize = 32_768;

impl Default for Settings {
    fn default() -> Self {
        Self {
            // Room for the whole world and as many reconnections in flight (a plugin's new connection can
            // prove the token before the watcher has seen its old one close).
            max_plugins: 2 * WORLD,
            unproven: 1024,
            unproven_per_peer: 64,
            handshake: std::time::Duration::from_secs(5),
            buffered: 256 << 20,
        }
    }
}

/// Raises this process's open-file limit to `wanted` (the soft limit, and the hard one where it may: a
/// privileged watcher), as servers that hold tens of thousands of connections do; what it is after.
pub fn raise_open_files(wanted: u64) -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 0;
    };
    if soft >= wanted {
        return soft;
    }
    if setrlimit(Resource::RLIMIT_NOFILE, wanted, hard.max(wanted)).is_ok() {
        return wanted;
    }
    if setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}
