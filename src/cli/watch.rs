//! `efatop watch`'s flags for what it finds beyond the figures (docs/watch.md): the straggler line's
//! threshold and the Prometheus endpoint.

use clap::Args;

use crate::parse::whole_number;

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
