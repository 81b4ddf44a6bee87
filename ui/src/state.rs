//! Everything the dashboard draws, ready to render. The binary's collector fills it from telemetry and
//! from rank 0's experiment; the widgets only read it. No I/O, no clocks: times arrive as values.

use std::collections::VecDeque;
use std::time::Duration;

use efatop_experiments::RunResults;
use efatop_experiments::results::RankPlacement;

/// How many throughput points a sparkline keeps (one per telemetry interval).
pub const HISTORY_LEN: usize = 240;
/// How many log lines are kept.
pub const LOG_LEN: usize = 500;

/// What is running: fixed once the world is established.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunInfo {
    pub experiment: String,
    /// e.g. `tcp;ofi_rxm`.
    pub provider_stack: String,
    pub ranks: usize,
    /// Host name of each rank, indexed by rank.
    pub hosts: Vec<String>,
    pub channels: usize,
    /// Link speed per channel in Gbps, if known (gauges are drawn against it; without it they scale to the
    /// highest rate seen and say so).
    pub link_gbps: Option<f64>,
    pub memory: String,
    /// Configuration columns in order, e.g. `SinglePin`, `MultiPin`.
    pub configs: Vec<String>,
    pub sizes: Vec<u64>,
    /// Where each rank runs: GPU, NICs its channels use, pinned CPUs (from the node topology).
    pub placements: Vec<RankPlacement>,
}

/// Where the sweep is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Progress {
    pub config: Option<String>,
    pub size: Option<u64>,
    /// (configuration, size) steps finished and in all.
    pub done: usize,
    pub total: usize,
    pub elapsed: Duration,
    /// Estimated time left; `None` until a step has finished.
    pub eta: Option<Duration>,
}

impl Progress {
    pub fn ratio(&self) -> f64 {
        if self.total == 0 { 0.0 } else { (self.done as f64 / self.total as f64).clamp(0.0, 1.0) }
    }
}

/// One channel (one NIC endpoint) of one rank, as of the last telemetry interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChannelView {
    pub rank: usize,
    pub channel: usize,
    /// NIC / libfabric domain name, e.g. `rdmap79s0-rdm`, `lo`, `shm`.
    pub nic: String,
    /// Throughput over the last interval; sent plus received bytes the channel completed.
    pub gbps: f64,
    pub ops_per_s: f64,
    pub in_flight: u64,
    /// Latency of operations completed in the last interval; `None` when none completed.
    pub lat_p50_us: Option<f64>,
    pub lat_p99_us: Option<f64>,
    pub lat_max_us: Option<f64>,
    /// Recent throughput, oldest first, at most `HISTORY_LEN` points.
    pub history: VecDeque<f64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PeerState {
    #[default]
    Alive,
    /// No telemetry for longer than the heartbeat allows, or the rank exited in error.
    Lost,
    /// The rank finished its part.
    Done,
}

/// One rank as rank 0 sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PeerView {
    pub rank: usize,
    pub host: String,
    /// Latency of operations with this peer over the last interval.
    pub lat_p50_us: Option<f64>,
    pub lat_p99_us: Option<f64>,
    pub gbps: f64,
    /// Telemetry samples the rank dropped because rank 0 was slow (counted, never hidden).
    pub drops: u64,
    /// Time since its last telemetry frame.
    pub last_seen: Duration,
    pub state: PeerState,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    Info,
    Warn,
    Error,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LogLine {
    /// Time since the run started.
    pub at: Duration,
    pub level: LogLevel,
    pub text: String,
}

/// The panels Tab cycles through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Panel {
    #[default]
    Gauges,
    Peers,
    Results,
    Log,
}

impl Panel {
    pub const ORDER: [Panel; 4] = [Panel::Gauges, Panel::Peers, Panel::Results, Panel::Log];
}

/// A key press, as the dashboard understands it (the binary maps terminal events onto these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Esc,
    Tab,
    BackTab,
    Up,
    Down,
    Left,
    Right,
    Enter,
}

/// What a key asks of the binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    None,
    /// Stop the run on every rank (or, once finished, leave the dashboard).
    Quit,
}

#[derive(Clone, Debug, Default, PartialEq)]
#[allow(clippy::struct_excessive_bools)] // independent view toggles, each flipped by its own key
pub struct DashboardState {
    pub run: RunInfo,
    pub progress: Progress,
    /// One entry per (rank, channel), ordered by rank then channel.
    pub channels: Vec<ChannelView>,
    /// One entry per rank.
    pub peers: Vec<PeerView>,
    /// Measurements so far; rows fill in as sizes complete.
    pub results: Option<RunResults>,
    pub log: VecDeque<LogLine>,
    /// Telemetry samples dropped across all ranks.
    pub drops_total: u64,
    /// The run has ended (successfully or not); the final tables are on screen.
    pub finished: bool,
    /// `p`: the view is frozen while the run goes on.
    pub frozen: bool,
    pub show_help: bool,
    /// `t`: the topology view (hosts, ranks, GPUs, NICs in use) replaces the panels.
    pub show_topology: bool,
    pub focus: Panel,
    /// Selection in the gauges and peers panels.
    pub selected_rank: usize,
    pub selected_channel: usize,
}

impl DashboardState {
    pub fn push_log(&mut self, at: Duration, level: LogLevel, text: impl Into<String>) {
        if self.log.len() == LOG_LEN {
            self.log.pop_front();
        }
        self.log.push_back(LogLine { at, level, text: text.into() });
    }
}
