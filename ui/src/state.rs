//! Everything the dashboard draws, ready to render. The binary's collector fills it from telemetry and
//! from rank 0's experiment; the widgets only read it. No I/O, no clocks: times arrive as values.

pub mod fleet;
pub mod gauges;
pub mod sweep;

use std::collections::VecDeque;
use std::time::Duration;

use efatop_proto::RunResults;
use efatop_proto::telemetry::PeerSample;

/// How many throughput points a sparkline keeps (one per telemetry interval).
pub const HISTORY_LEN: usize = 240;
/// Throughput points kept over all channels: a run with more than `HISTORY_BUDGET / HISTORY_LEN`
/// channels keeps fewer points per channel (never fewer than [`HISTORY_MIN`]), so that the histories of
/// a 4096-host run take no more than those of a 1024-host one (64 MiB).
pub const HISTORY_BUDGET: usize = 1024 * 8 * 4 * HISTORY_LEN;
/// Points a channel keeps however many channels there are: a minute at 10 Hz.
pub const HISTORY_MIN: usize = 60;

/// Points each channel's history keeps in a run of `channels` channels.
pub fn history_len(channels: usize) -> usize {
    (HISTORY_BUDGET / channels.max(1)).clamp(HISTORY_MIN, HISTORY_LEN)
}
/// How many log lines are kept.
pub const LOG_LEN: usize = 500;
/// Most (sender, column) cells the pair matrix keeps: every pair exactly up to 512 ranks; beyond, each
/// sender's row is kept per block of receivers so that memory stays near 4 MiB even at 4096 ranks.
pub const PAIR_MATRIX_MAX_CELLS: usize = 512 * 512;
/// Up to this many ranks every pair also keeps a throughput history for its sparkline.
pub const PAIR_HISTORY_MAX_RANKS: usize = 64;
/// Points in a pair's history (one per telemetry interval of its sender).
pub const PAIR_HISTORY_LEN: usize = 120;
/// Points in an NVLink pair's history (one per telemetry interval of its rank).
pub const NVLINK_HISTORY_LEN: usize = 120;

use efatop_proto::events::RunInfo;

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
    /// Recent throughput, oldest first, at most [`history_len`] of the run's channel count.
    pub history: VecDeque<f64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PeerState {
    #[default]
    Alive,
    /// Not heard from for a few intervals: shown, not judged (a 1 GiB registration, a starved thread).
    Slow,
    /// Not heard from for longer still, but not yet for `--hang-timeout`.
    Silent,
    /// Named as hung (silent for `--hang-timeout`), or its telemetry connection closed mid-run.
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
    /// What it last said it was doing (a phase such as "verifying 1G"), when it said so.
    pub phase: Option<String>,
    pub state: PeerState,
}

/// A rank's proxy request queue (GPU kernel → CPU proxy), as of the rank's last interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueView {
    pub rank: usize,
    /// Requests waiting in the ring, of `capacity` slots.
    pub depth: u64,
    pub capacity: u64,
    /// Requests the proxy popped per second over the interval.
    pub requests_per_s: f64,
    /// The GPU's Quiet calls per second over the interval.
    pub quiet_calls_per_s: f64,
    /// Requests popped and not yet completed.
    pub held: u64,
}

/// What one rank's GPU wrote into a peer rank's GPU over NVLink, as of the rank's last interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NvlinkView {
    pub rank: usize,
    pub peer: usize,
    /// The two GPUs as their node numbers them.
    pub gpu: u32,
    pub peer_gpu: u32,
    pub gbytes_per_s: f64,
    /// The pair's peak; `None` when not known (the gauge then shows the rate without a bar).
    pub peak_gbytes_per_s: Option<f64>,
    /// Recent GB/s, oldest first, at most `NVLINK_HISTORY_LEN` points.
    pub history: VecDeque<f64>,
}

/// What one sender moved to one receiver (or, in a blocked matrix, to one block of receivers) in the
/// sender's latest interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PairLatest {
    /// For a block of receivers, the mean over its pairs.
    pub gbps: f64,
    /// Latency of the writes completed in the interval; `None` when none completed. For a block of
    /// receivers, the worst pair's.
    pub lat_p50_us: Option<f64>,
    pub lat_p99_us: Option<f64>,
}

/// One stored (sender, column) cell. `f32` and a generation instead of options keep it at 16 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct PairCell {
    gbps: f32,
    /// NaN when nothing completed.
    lat_p50_us: f32,
    lat_p99_us: f32,
    /// The sender's sample that last wrote the cell; older than the row's means the sender moved
    /// nothing to these receivers in its latest interval (peers without activity are left out of a
    /// sample, and zeroing the whole row per sample would be quadratic in ranks).
    generation: u32,
}

/// All-to-all: live bandwidth of every sender→receiver pair, row = sender, column = receiver.
///
/// Up to `sqrt(PAIR_MATRIX_MAX_CELLS)` ranks a column is one receiver; beyond, a column is a block of
/// [`Self::receivers_per_column`] consecutive receivers holding their mean. Recording a sample costs
/// O(peers in the sample) (plus O(ranks) for histories, kept only up to [`PAIR_HISTORY_MAX_RANKS`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PairMatrixView {
    ranks: usize,
    receivers_per_column: usize,
    /// `ranks × columns`, row-major.
    cells: Vec<PairCell>,
    /// Samples recorded per sender; 0 = never heard from.
    row_generation: Vec<u32>,
    /// `ranks × ranks` throughput histories, oldest first; empty beyond `PAIR_HISTORY_MAX_RANKS`.
    histories: Vec<VecDeque<f32>>,
}

impl PairMatrixView {
    pub fn new(ranks: usize) -> Self {
        let columns_max = (PAIR_MATRIX_MAX_CELLS / ranks.max(1)).max(1);
        let receivers_per_column = ranks.div_ceil(columns_max).max(1);
        let columns = ranks.div_ceil(receivers_per_column);
        let history_pairs = if ranks <= PAIR_HISTORY_MAX_RANKS { ranks * ranks } else { 0 };
        Self {
            ranks,
            receivers_per_column,
            cells: vec![PairCell::default(); ranks * columns],
            row_generation: vec![0; ranks],
            histories: vec![VecDeque::new(); history_pairs],
        }
    }

    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// 1 when every pair is kept on its own; more at large rank counts (see the type's documentation).
    pub fn receivers_per_column(&self) -> usize {
        self.receivers_per_column
    }

    pub fn columns(&self) -> usize {
        self.ranks.div_ceil(self.receivers_per_column)
    }

    /// The column holding `receiver`.
    pub fn column_of(&self, receiver: usize) -> usize {
        receiver / self.receivers_per_column
    }

    /// `sender`'s latest interval towards `column`; `None` until the sender has reported (or when out of
    /// range). A reported sender that moved nothing to the column reads 0 Gbps with no latency.
    pub fn latest(&self, sender: usize, column: usize) -> Option<PairLatest> {
        let generation = *self.row_generation.get(sender).filter(|&&generation| generation > 0)?;
        if column >= self.columns() {
            return None;
        }
        let cell = self.cells[sender * self.columns() + column];
        if cell.generation != generation {
            return Some(PairLatest::default());
        }
        let measured = |us: f32| (!us.is_nan()).then_some(f64::from(us));
        Some(PairLatest {
            gbps: f64::from(cell.gbps),
            lat_p50_us: measured(cell.lat_p50_us),
            lat_p99_us: measured(cell.lat_p99_us),
        })
    }

    /// The pair's recent throughput, oldest first; `None` beyond `PAIR_HISTORY_MAX_RANKS` ranks.
    pub fn history(&self, sender: usize, receiver: usize) -> Option<&VecDeque<f32>> {
        if sender >= self.ranks || receiver >= self.ranks {
            return None;
        }
        self.histories.get(sender * self.ranks + receiver)
    }

    /// Receivers in `column` other than `sender`: what a block's mean divides by.
    fn receivers_in(&self, column: usize, sender: usize) -> usize {
        let first = column * self.receivers_per_column;
        let end = (first + self.receivers_per_column).min(self.ranks);
        (end - first) - usize::from((first..end).contains(&sender))
    }

    /// `receiver`'s interval: what landed from each sender (`peers[i].peer` is the sender; `bytes` over
    /// `ops` landings, each `latency` after its round started). All-to-all measures pairs where the data
    /// lands, so its matrix fills column by column, and a cell is the pair's transfer rate at its latest
    /// landing — one round's bytes over the time they took — not bytes per sampling interval, which in a
    /// lock-stepped exchange would read zero between landings. A cell in a block of receivers (beyond
    /// `PAIR_MATRIX_MAX_CELLS`) is a running mean over the block's receivers.
    pub fn record_received(&mut self, receiver: usize, peers: &[PeerSample]) {
        if receiver >= self.ranks {
            return;
        }
        let columns = self.columns();
        let column = self.column_of(receiver);
        for peer in peers {
            let sender = peer.peer as usize;
            let (Some(gbps), Some(p50)) = (peer.landing_gbps(), peer.latency.quantile_us(0.50)) else { continue };
            if sender >= self.ranks || sender == receiver {
                continue;
            }
            let gbps = gbps as f32;
            // Received cells are never stale by generation: each keeps its receiver's latest landing.
            self.row_generation[sender] = 1;
            let share = self.receivers_in(column, sender).max(1) as f32;
            let cell = &mut self.cells[sender * columns + column];
            if cell.generation == 1 {
                cell.gbps += (gbps - cell.gbps) / share;
            } else {
                *cell = PairCell { gbps, lat_p50_us: f32::NAN, lat_p99_us: f32::NAN, generation: 1 };
            }
            cell.lat_p50_us = p50 as f32;
            cell.lat_p99_us = peer.latency.quantile_us(0.99).map_or(f32::NAN, |p99| p99 as f32);
            if let Some(history) = self.histories.get_mut(sender * self.ranks + receiver) {
                if history.len() == PAIR_HISTORY_LEN {
                    history.pop_front();
                }
                history.push_back(gbps);
            }
        }
    }

    /// `sender`'s interval of `interval_ns`: what it moved to each peer. Peers out of range and the
    /// sender itself are ignored.
    pub fn record(&mut self, sender: usize, interval_ns: u64, peers: &[PeerSample]) {
        let Some(generation) = self.row_generation.get_mut(sender) else { return };
        *generation = generation.wrapping_add(1).max(1);
        let generation = *generation;
        let columns = self.columns();
        let row_start = sender * columns;
        let track_history = !self.histories.is_empty();
        let mut now = vec![0.0_f32; if track_history { self.ranks } else { 0 }];
        for peer in peers {
            let receiver = peer.peer as usize;
            if receiver >= self.ranks || receiver == sender {
                continue;
            }
            let column = self.column_of(receiver);
            let share = self.receivers_in(column, sender).max(1) as f64;
            let gbps = efatop_proto::telemetry::RankSample::gbps(peer.bytes, interval_ns);
            let cell = &mut self.cells[row_start + column];
            if cell.generation != generation {
                *cell = PairCell { gbps: 0.0, lat_p50_us: f32::NAN, lat_p99_us: f32::NAN, generation };
            }
            cell.gbps += (gbps / share) as f32;
            // A block's latency is its worst pair's: percentiles of different pairs cannot be averaged.
            let worst = |kept: f32, new: Option<f64>| match new {
                Some(new) if kept.is_nan() || new as f32 > kept => new as f32,
                _ => kept,
            };
            cell.lat_p50_us = worst(cell.lat_p50_us, peer.latency.quantile_us(0.50));
            cell.lat_p99_us = worst(cell.lat_p99_us, peer.latency.quantile_us(0.99));
            if let Some(point) = now.get_mut(receiver) {
                *point += gbps as f32;
            }
        }
        if track_history {
            let row = &mut self.histories[sender * self.ranks..(sender + 1) * self.ranks];
            for (receiver, (history, gbps)) in row.iter_mut().zip(now).enumerate() {
                if receiver == sender {
                    continue;
                }
                if history.len() == PAIR_HISTORY_LEN {
                    history.pop_front();
                }
                history.push_back(gbps);
            }
        }
    }
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
    /// The all-to-all pair heatmap; only in all-to-all runs.
    Pairs,
}

impl Panel {
    /// Tab order of a run without a pair matrix.
    pub const ORDER: [Panel; 4] = [Panel::Gauges, Panel::Peers, Panel::Results, Panel::Log];
    /// Tab order of an all-to-all run: the heatmap first.
    pub const ALLTOALL_ORDER: [Panel; 5] = [Panel::Pairs, Panel::Gauges, Panel::Peers, Panel::Results, Panel::Log];
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

/// What the run's events say, ready to draw: the data only. What the user looks at (focus, selections,
/// overlays, freezing) is a [`View`](crate::view::View) beside it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DashboardState {
    pub run: RunInfo,
    pub progress: Progress,
    /// One entry per (rank, channel), ordered by rank then channel.
    pub channels: Vec<ChannelView>,
    /// One entry per rank.
    pub peers: Vec<PeerView>,
    /// The widest host name among `peers` (in characters), as set up with them ([`crate::ingest::Ingest`]):
    /// the peers panel sizes its host column by it every frame, which over 32768 ranks' names would cost
    /// more than the rest of the frame. `None`: measured when drawn.
    pub peers_host_width: Option<usize>,
    /// Measurements so far; rows fill in as sizes complete.
    pub results: Option<RunResults>,
    pub log: VecDeque<LogLine>,
    /// Telemetry samples dropped across all ranks.
    pub drops_total: u64,
    /// Telemetry samples refused because they named a rank, channel or peer outside the run's world.
    pub refused_total: u64,
    /// The run has ended (successfully or not); the final tables are on screen.
    pub finished: bool,
    /// All-to-all runs only: every sender→receiver pair's live bandwidth.
    pub pairs: Option<PairMatrixView>,
    /// Proxy request queues of the ranks that report one, ordered by rank.
    pub queues: Vec<QueueView>,
    /// NVLink pairs the ranks report, ordered by rank then peer.
    pub nvlink: Vec<NvlinkView>,
    /// The gauges' rows, widths and scale, kept by [`Ingest`](crate::ingest::Ingest) as samples arrive
    /// (views changed any other way are not seen in it: a state built by hand leaves it empty, and the
    /// gauges then build their own per frame).
    pub gauges: gauges::GaugeIndex,
    /// The fleet model (per host its NICs, per rail median and spread, the worst NICs), kept by
    /// [`Ingest`](crate::ingest::Ingest) like the gauges' index; what the fleet view draws.
    pub fleet: fleet::Fleet,
    /// Where these events come from, or who else watches them (`serving on ...`, `attached to ...`,
    /// `replay 4x`): on the progress line when set.
    pub source: Option<SourceLine>,
    /// `sweep` runs only: the rounds so far, judged, and the verdict at the end.
    pub sweep: Option<sweep::SweepView>,
}

/// A short status on the progress line; `alert` draws it in colour (serving beyond this host, events
/// this viewer lost).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceLine {
    pub text: String,
    pub alert: bool,
}

impl DashboardState {
    /// The widest host name among the peers, in characters (a peer without one of its own shows its
    /// rank's host in the run, or `?`): what [`Self::peers_host_width`] keeps.
    pub fn measure_peers_host_width(&self) -> usize {
        self.peers
            .iter()
            .map(|peer| if peer.host.is_empty() { self.run.hosts.get(peer.rank).map_or(1, |host| host.chars().count()) } else { peer.host.chars().count() })
            .max()
            .unwrap_or(0)
    }

    /// The panels Tab cycles through in this run.
    pub fn panel_order(&self) -> &'static [Panel] {
        if self.pairs.is_some() { &Panel::ALLTOALL_ORDER } else { &Panel::ORDER }
    }

    /// Some rank reports GPU-side figures, so the dashboard draws its GPU panel.
    pub fn has_gpu_figures(&self) -> bool {
        !self.queues.is_empty() || !self.nvlink.is_empty()
    }

    pub fn push_log(&mut self, at: Duration, level: LogLevel, text: impl Into<String>) {
        if self.log.len() == LOG_LEN {
            self.log.pop_front();
        }
        self.log.push_back(LogLine { at, level, text: text.into() });
    }
}
