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
pub mod synthetic;

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
    /// the budget was full, came with no room among the plugins, or (after its `Closed`) sent a record
    /// that failed authentication.
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

/// This process's open-file limit, as [`open_files`] left it, and what was wanted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFiles {
    /// The soft limit now.
    pub limit: u64,
    pub wanted: u64,
}

impl OpenFiles {
    pub fn enough(&self) -> bool {
        self.limit >= self.wanted
    }
}

/// Raises this process's open-file limit (`RLIMIT_NOFILE`), as servers that hold tens of thousands of
/// connections do: the soft limit to the hard one, and both to `wanted` where the hard limit is lower and
/// the process may raise it (`CAP_SYS_RESOURCE`). Never lowers it; what it is after, for the caller to say
/// once when it is short of `wanted`.
pub fn open_files(wanted: u64) -> OpenFiles {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let now = || getrlimit(Resource::RLIMIT_NOFILE).unwrap_or((0, 0));
    let (soft, hard) = now();
    if hard < wanted {
        // Refused without the capability: the hard limit stays.
        let _ = setrlimit(Resource::RLIMIT_NOFILE, wanted, wanted);
    }
    let (soft_now, hard) = now();
    if soft_now < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_err() {
        // An unlimited hard limit is past what the kernel takes as a soft one (fs.nr_open): `wanted` then.
        let _ = setrlimit(Resource::RLIMIT_NOFILE, wanted.max(soft_now), hard);
    }
    OpenFiles { limit: now().0.max(soft), wanted }
}
