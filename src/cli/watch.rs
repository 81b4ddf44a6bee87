//! `efatop watch`'s flags (docs/watch.md): where it listens or what it folds, its judges' thresholds, the
//! straggler line's and the Prometheus endpoint.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use crate::parse::{parse_serve, whole_number};

#[derive(Debug, Args)]
pub struct WatchFindings {
    /// Serve busbw per communicator, collective and size, bytes per NIC, rails, stragglers and hangs for
    /// Prometheus at /metrics on ADDR, e.g. 127.0.0.1:9401 or 0.0.0.0:9401 (NCCL Inspector's names where they
    /// overlap; docs/watch.md)
    #[arg(long, value_name = "ADDR", value_parser = crate::parse::parse_listen_address, conflicts_with = "from")]
    pub prometheus: Option<std::net::SocketAddr>,
    /// Microseconds a rank's peers must wait for it, on average in the calls it was last, before it is named
    /// a straggler (1 to 60000000)
    #[arg(long, value_name = "US", default_value_t = 1000, value_parser = whole_number::<u64>(1..=60_000_000))]
    pub straggler_us: u64,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Where to listen for the job's plugins (their EFATOP_WATCH): IP:PORT, or a port on 127.0.0.1
    #[arg(long, value_name = "ADDR", value_parser = parse_serve, required_unless_present = "from")]
    pub listen: Option<SocketAddr>,
    /// Fold plugin files (written where no watcher was named) or `--record`ings instead of listening
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with = "listen")]
    pub from: Vec<PathBuf>,
    /// Also write what the plugins send, with its times, to FILE (`efatop replay FILE` plays it back)
    #[arg(long, value_name = "FILE", conflicts_with = "from")]
    pub record: Option<PathBuf>,
    /// Print typed JSON lines instead of plain ones
    #[arg(long)]
    pub json: bool,
    /// Seconds a rank may stay behind its peers (or silent while they wait) before it is named (1 to 3600)
    #[arg(long, default_value_t = 10, value_parser = crate::parse::seconds(1..=3600))]
    pub hang_after: u64,
    /// Seconds of the NIC join's window (1 to 600)
    #[arg(long, default_value_t = 5, value_parser = crate::parse::seconds(1..=600))]
    pub window: u64,
    /// MiB NCCL's network path must move in a window before its NICs are judged (0 to 1048576)
    #[arg(long, default_value_t = 16, value_parser = whole_number::<u64>(0..=1_048_576))]
    pub fallback_min_mib: u64,
    /// Plugins that proved the token, connected at once (1 to 65536; a job of 32768 ranks and as many
    /// reconnections); more are refused and counted
    #[arg(long, default_value_t = 65_536, value_parser = whole_number::<usize>(1..=65_536))]
    pub max_plugins: usize,
    /// Stop after this many seconds (0: run until interrupted)
    #[arg(long, default_value_t = 0, value_parser = crate::parse::seconds(0..=31_536_000))]
    pub duration: u64,
    #[command(flatten)]
    pub metrics: WatchFindings,
}
