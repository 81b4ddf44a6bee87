//! Folding what arrives — telemetry samples from every rank, rank 0's steps and measurements — into the
//! render-ready [`DashboardState`]. Pure state changes: times are passed in, nothing is read from a clock.

use std::time::Duration;

use efatop_proto::telemetry::{IntervalHistogram, RankSample, WorldBounds};
use efatop_proto::{Column, Experiment, Measurement, RunResults};

use crate::state::fleet::Fleet;
use efatop_proto::liveness::Liveness;
use crate::state::gauges::GaugeIndex;
use efatop_proto::events::RunInfo;
use crate::state::{history_len, ChannelView, DashboardState, LogLevel, NvlinkView, NVLINK_HISTORY_LEN, PairMatrixView, PeerState, PeerView, QueueView};

/// Keeps what the state does not show but ingestion needs. When each rank was last heard from is not
/// kept here: that is rank 0's one liveness clock ([`Liveness`]), which [`Ingest::tick`] reads.
pub struct Ingest {
    ranks: usize,
    /// The run's world (its ranks, and the most channels a rank has): a sample naming a rank, channel or
    /// peer outside it is refused whole and counted in `DashboardState::refused_total`.
    world: WorldBounds,
    /// Index in `state.channels` of each rank's channel 0 (views are ordered by rank, then channel), so a
    /// sample finds its views without a search: rank 0 may hear from thousands of ranks per interval.
    first_view: Vec<usize>,
    channels_of: Vec<usize>,
    /// Points each channel's history keeps ([`history_len`]).
    history_len: usize,
    /// Ranks already named in the log as slow, silent or hung, so each is logged once per spell.
    reported: Vec<PeerState>,
    /// When the peers were last judged by the liveness clock (a fleet's, at most every
    /// [`PEERS_EVERY`]).
    peers_at: Option<Duration>,
}

/// A run of more ranks than this judges its peers' liveness at most every [`PEERS_EVERY`], not every
/// frame: that pass is O(ranks) (32768 for 4096 hosts), and the clock it shows moves in tenths of a second.
const PEERS_EVERY_ABOVE: usize = 1024;
const PEERS_EVERY: Duration = Duration::from_millis(100);


/// How the dashboard shows `rank` by the liveness clock at `at`: its silence, and slow, then silent, then
/// lost past the hang timeout (shown, not judged, until then). Lost is the rank the watchdog names
/// (`efatop_runtime::watchdog::hung`), by the same comparison on the same clock; `tests/liveness.rs` holds
/// the two together. `None` once its telemetry connection closed.
pub fn shown(liveness: &Liveness, rank: usize, at: Duration) -> Option<(Duration, PeerState)> {
    let seen = liveness.silence(rank, at)?;
    let state = if seen > liveness.hang_timeout {
        PeerState::Lost
    } else if seen > liveness.silent_after {
        PeerState::Silent
    } else if seen > liveness.slow_after {
        PeerState::Slow
    } else {
        PeerState::Alive
    };
    Some((seen, state))
}

impl Ingest {
    /// Sets `state` up for a run: one channel view per (rank, channel) with the NIC names each rank
    /// reported (`nics[rank][channel]`), one peer view per rank, an empty results table; for an all-to-all
    /// run also the pair matrix (whose heatmap [`View::of`](crate::view::View::of) focuses).
    pub fn begin(state: &mut DashboardState, run: RunInfo, nics: &[Vec<String>], results: RunResults) -> Self {
        state.channels = nics
            .iter()
            .enumerate()
            .flat_map(|(rank, names)| {
                names.iter().enumerate().map(move |(channel, nic)| ChannelView {
                    rank,
                    channel,
                    nic: nic.clone(),
                    ..ChannelView::default()
                })
            })
            .collect();
        state.peers = (0..run.ranks)
            .map(|rank| PeerView { rank, host: run.hosts.get(rank).cloned().unwrap_or_default(), ..PeerView::default() })
            .collect();
        state.peers_host_width = Some(state.measure_peers_host_width());
        state.progress.total = run.configs.len() * run.sizes.len();
        state.results = Some(results);
        // GPU figures come with the samples: a new run starts without them (and without the GPU panel).
        state.queues.clear();
        state.nvlink.clear();
        // Only all-to-all runs pay for the matrix: it grows with the square of the ranks (up to a cap).
        state.pairs = (run.experiment == Experiment::Alltoall).then(|| PairMatrixView::new(run.ranks));
        let ranks = run.ranks;
        state.run = run;
        // What the gauges read every frame, kept up to date by `sample` from here on.
        state.gauges = GaugeIndex::build(state);
        state.fleet = Fleet::build(state, Duration::ZERO);
        let channels_of: Vec<usize> = (0..ranks).map(|rank| nics.get(rank).map_or(0, Vec::len)).collect();
        let first_view = channels_of
            .iter()
            .scan(0, |next, count| {
                let first = *next;
                *next += count;
                Some(first)
            })
            .collect();
        let history_len = history_len(state.channels.len());
        let world = WorldBounds { ranks, channels: channels_of.iter().copied().max().unwrap_or(0).max(state.run.channels) };
        Self { ranks, world, first_view, channels_of, history_len, reported: vec![PeerState::Alive; ranks], peers_at: None }
    }

    /// One rank's interval arrived at `at` (time since the run started). (When a rank was heard is the
    /// liveness clock's business.) A sample naming a rank, channel or peer outside the run's world changes
    /// nothing but `state.refused_total`; the first is logged.
    pub fn sample(&mut self, state: &mut DashboardState, sample: &RankSample, at: Duration) {
        if let Some(outside) = sample.outside(self.world) {
            if state.refused_total == 0 {
                state.push_log(at, LogLevel::Warn, format!("telemetry sample refused: {outside} (each one refused is counted in the header)"));
            }
            state.refused_total = state.refused_total.saturating_add(1);
            return;
        }
        let rank = sample.rank as usize;
        let mut rank_bytes: u64 = 0;
        let mut rank_latency = IntervalHistogram::default();
        for channel_sample in &sample.channels {
            rank_bytes = rank_bytes.saturating_add(channel_sample.bytes);
            if rank == 0 {
                // Only rank 0's own latency is shown over all its channels (see below).
                rank_latency.merge(&channel_sample.latency);
            }
            let channel = usize::from(channel_sample.channel);
            if channel >= self.channels_of.get(rank).copied().unwrap_or(0) {
                continue;
            }
            let at = self.first_view[rank] + channel;
            let Some(view) = state.channels.get_mut(at) else { continue };
            let in_flight_was = view.in_flight;
            let rates = channel_sample.rates(sample.interval_ns);
            view.gbps = rates.gbps;
            view.ops_per_s = rates.ops_per_s;
            view.in_flight = u64::from(channel_sample.in_flight);
            view.lat_p50_us = rates.lat_p50_us;
            view.lat_p99_us = rates.lat_p99_us;
            view.lat_max_us = rates.lat_max_us;
            let popped = view.history.len() >= self.history_len;
            if popped {
                view.history.pop_front();
            }
            view.history.push_back(view.gbps);
            state.gauges.record(at, view.gbps, popped, in_flight_was, view.in_flight);
            state.fleet.record(at, view.gbps);
        }
        if let Some(peer) = state.peers.get_mut(rank) {
            peer.gbps = RankSample::gbps(rank_bytes, sample.interval_ns);
            if peer.drops < sample.drops {
                // Kept as a running total: summing every rank's drops per sample is quadratic in ranks.
                state.drops_total = state.drops_total.saturating_add(sample.drops - peer.drops);
                peer.drops = sample.drops;
            }
            peer.last_seen = Duration::ZERO;
            if matches!(peer.state, PeerState::Slow | PeerState::Silent) {
                peer.state = PeerState::Alive;
            }
            // Rank 0's own latency is over all its operations; every other rank's, as rank 0 sees it below.
            if rank == 0 {
                peer.lat_p50_us = rank_latency.quantile_us(0.50);
                peer.lat_p99_us = rank_latency.quantile_us(0.99);
            }
        }
        if let Some(pairs) = &mut state.pairs {
            // All-to-all ranks count their peers where the data lands: the sample is a receiver's column.
            pairs.record_received(rank, &sample.peers);
        }
        if rank == 0 {
            for peer_sample in &sample.peers {
                if let Some(peer) = state.peers.get_mut(peer_sample.peer as usize).filter(|p| p.rank != 0) {
                    if peer_sample.latency.count() > 0 {
                        peer.lat_p50_us = peer_sample.latency.quantile_us(0.50);
                        peer.lat_p99_us = peer_sample.latency.quantile_us(0.99);
                    }
                }
            }
        }
        if rank < self.ranks {
            Self::gpu_figures(state, sample);
        }
    }

    /// The sample's proxy queue and NVLink pairs, into views kept sorted (a binary search finds them:
    /// a rank may write to every GPU of its node, and rank 0 hears from thousands of ranks). A rank that
    /// stops reporting a pair keeps its last figures. Only ranks of the run come here; a pair towards a
    /// rank outside it is dropped, like a channel the rank does not have.
    fn gpu_figures(state: &mut DashboardState, sample: &RankSample) {
        let rank = sample.rank as usize;
        let ranks = state.peers.len();
        if let Some(queue) = &sample.queue {
            let view = QueueView {
                rank,
                depth: queue.depth,
                capacity: queue.capacity,
                requests_per_s: queue.requests_per_s(sample.interval_ns),
                quiet_calls_per_s: queue.quiet_calls_per_s(sample.interval_ns),
                held: queue.held,
            };
            match state.queues.binary_search_by_key(&rank, |view| view.rank) {
                Ok(at) => state.queues[at] = view,
                Err(at) => state.queues.insert(at, view),
            }
        }
        for pair in sample.nvlink.iter().filter(|pair| (pair.peer as usize) < ranks) {
            let key = (rank, pair.peer as usize);
            let at = match state.nvlink.binary_search_by_key(&key, |view| (view.rank, view.peer)) {
                Ok(at) => at,
                Err(at) => {
                    state.nvlink.insert(at, NvlinkView { rank, peer: key.1, ..NvlinkView::default() });
                    at
                }
            };
            let view = &mut state.nvlink[at];
            view.gpu = pair.gpu;
            view.peer_gpu = pair.peer_gpu;
            view.gbytes_per_s = pair.gbytes_per_s(sample.interval_ns);
            view.peak_gbytes_per_s = pair.peak_gbytes_per_s;
            if view.history.len() == NVLINK_HISTORY_LEN {
                view.history.pop_front();
            }
            view.history.push_back(view.gbytes_per_s);
        }
    }

    /// A (configuration, size) step started.
    pub fn step(state: &mut DashboardState, config: &Column, size: u64) {
        state.progress.config = Some(config.to_string());
        state.progress.size = Some(size);
    }

    /// A step finished; its row fills in and the ETA follows from the pace so far.
    pub fn measured(state: &mut DashboardState, measurement: &Measurement, at: Duration) {
        if let Some(results) = &mut state.results {
            results.measurements.push(measurement.clone());
        }
        state.progress.done += 1;
        state.progress.elapsed = at;
        // A step's time grows with its size, so the pace is bytes per second, not steps per second: the
        // ETA is the time left if the remaining bytes go as fast as those done.
        let sizes_total: u64 = state.run.sizes.iter().sum();
        let total = sizes_total as f64 * state.run.configs.len().max(1) as f64;
        let done: f64 = state.results.as_ref().map_or(0.0, |r| r.measurements.iter().map(|m| m.size as f64).sum());
        if done > 0.0 && total >= done {
            state.progress.eta = Some(Duration::from_secs_f64(at.as_secs_f64() * (total - done) / done));
        }
    }

    /// Advances the clock: every rank's last-seen time and state as rank 0's liveness clock has them.
    /// A rank is shown slow, then silent, before the watchdog ever names it hung (lost); each change for
    /// the worse is logged once.
    pub fn tick(&mut self, state: &mut DashboardState, at: Duration, liveness: &Liveness) {
        state.progress.elapsed = at;
        state.fleet.refresh(at);
        if state.peers.len() > PEERS_EVERY_ABOVE && self.peers_at.is_some_and(|last| at.saturating_sub(last) < PEERS_EVERY) {
            return;
        }
        self.peers_at = Some(at);
        let mut news = Vec::new();
        for (rank, peer) in state.peers.iter_mut().enumerate() {
            if peer.state == PeerState::Done {
                continue;
            }
            peer.phase = liveness.last_phase(rank).map(|(phase, bytes)| phase.describe(bytes));
            // A closed connection is `closed`'s to show; here only the clock is.
            let Some((seen, next)) = shown(liveness, rank, at) else { continue };
            peer.last_seen = seen;
            // A rank named lost stays lost; rank 0 itself is never judged by its silence.
            if peer.state == PeerState::Lost || (rank == 0 && next != PeerState::Alive) {
                continue;
            }
            peer.state = next;
            let before = self.reported.get(rank).copied().unwrap_or_default();
            if severity(next) > severity(before) {
                news.push((rank, peer.host.clone(), seen, next, peer.phase.clone()));
            }
            if let Some(slot) = self.reported.get_mut(rank) {
                *slot = next;
            }
        }
        for (rank, host, silent, now, phase) in news {
            let doing = phase.map_or(String::new(), |phase| format!("; last said: {phase}"));
            let (level, what) = match now {
                PeerState::Lost => (LogLevel::Error, format!("hung: silent for {:.1} s", silent.as_secs_f64())),
                PeerState::Silent => (LogLevel::Warn, format!("silent for {:.0} s (named hung after {:.0} s)", silent.as_secs_f64(), liveness.hang_timeout.as_secs_f64())),
                _ => (LogLevel::Info, format!("slow: silent for {:.1} s", silent.as_secs_f64())),
            };
            state.push_log(at, level, format!("rank {rank} ({host}) {what}{doing}"));
        }
    }

    /// A rank's telemetry connection closed.
    pub fn closed(state: &mut DashboardState, rank: usize, finished: bool) {
        if let Some(peer) = state.peers.get_mut(rank) {
            peer.state = if finished { PeerState::Done } else { PeerState::Lost };
        }
    }
}

fn severity(state: PeerState) -> u8 {
    match state {
        PeerState::Alive | PeerState::Done => 0,
        PeerState::Slow => 1,
        PeerState::Silent => 2,
        PeerState::Lost => 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Panel, PAIR_MATRIX_MAX_CELLS};
    use crate::view::View;
    use efatop_proto::telemetry::{ChannelSample, PeerSample};

    fn run_info() -> RunInfo {
        RunInfo {
            experiment: Experiment::Write,
            provider_stack: "shm".into(),
            ranks: 2,
            hosts: vec!["a".into(), "a".into()],
            channels: 2,
            link_gbps: Some(100.0),
            memory: "host".into(),
            configs: vec![efatop_proto::Column::write(efatop_proto::column::Layout::Single, efatop_proto::column::Memory::Host)],
            sizes: vec![4096, 8192],
            placements: Vec::new(),
        }
    }

    fn results() -> RunResults {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "efatop_version": "0", "libfabric_version": "1.17", "experiment": "write", "provider": "shm",
                "provider_stack": "shm", "ranks": 2, "hosts": ["a", "a"], "channels": 2, "distinct_nics": 1,
                "nics": [], "link_gbps": 100.0, "link_source": "flag", "memory": "host", "window": 1,
                "warmup": 1, "iters": 1, "notes": [], "started_unix_s": 0
            },
            "configs": ["SinglePin"],
            "measurements": []
        }))
        .expect("results")
    }

    #[test]
    fn samples_become_gauges_histories_and_peer_latency() {
        let mut state = DashboardState::default();
        let nics = vec![vec!["shm".to_string(), "shm".to_string()]; 2];
        let mut ingest = Ingest::begin(&mut state, run_info(), &nics, results());
        assert_eq!(state.channels.len(), 4);
        assert_eq!(state.progress.total, 2);
        let latency = IntervalHistogram { buckets: vec![(100, 3)].into() };
        let sample = RankSample {
            rank: 0,
            seq: 0,
            interval_ns: 100_000_000,
            drops: 0,
            channels: vec![
                ChannelSample { channel: 0, bytes: 1_250_000_000 / 10, ops: 10, in_flight: 2, latency: latency.clone() },
                ChannelSample { channel: 1, ..ChannelSample::default() },
            ],
            peers: vec![PeerSample { peer: 1, bytes: 1, ops: 1, latency }],
            ..RankSample::default()
        };
        ingest.sample(&mut state, &sample, Duration::from_millis(100));
        let gauge = &state.channels[0];
        assert!((gauge.gbps - 10.0).abs() < 1e-9, "{gauge:?}");
        assert!((gauge.ops_per_s - 100.0).abs() < 1e-9);
        assert_eq!(gauge.in_flight, 2);
        assert_eq!(gauge.history.len(), 1);
        assert!(state.peers[1].lat_p50_us.is_some(), "rank 0's view of rank 1");
        assert_eq!(state.channels[1].lat_p50_us, None, "nothing measured, nothing shown");

        ingest.sample(&mut state, &RankSample { rank: 1, drops: 3, ..RankSample::default() }, Duration::from_millis(150));
        assert_eq!(state.drops_total, 3);
    }

    /// A sample naming a rank, channel or peer outside the run's world (a forged one: rank `u32::MAX`)
    /// changes no view, grows no table and is counted, in the header's `refused` and once in the log.
    #[test]
    fn samples_outside_the_world_are_refused_counted_and_grow_nothing() {
        use efatop_proto::telemetry::{NvlinkSample, QueueSample};
        let mut state = DashboardState::default();
        let nics = vec![vec!["shm".to_string(), "shm".to_string()]; 2];
        let mut ingest = Ingest::begin(&mut state, alltoall_run(2), &nics, results());
        let before = state.clone();
        let busy = |rank: u32, channel: u16, peer: u32| RankSample {
            rank,
            interval_ns: 100_000_000,
            drops: 9,
            channels: vec![ChannelSample { channel, bytes: 1 << 30, ops: 1, ..ChannelSample::default() }],
            peers: vec![PeerSample { peer, bytes: 1 << 20, ops: 1, latency: IntervalHistogram { buckets: vec![(100, 1)].into() } }],
            queue: Some(QueueSample { depth: 1, capacity: 2, ..QueueSample::default() }),
            nvlink: vec![NvlinkSample { peer: 0, bytes: 1, ..NvlinkSample::default() }],
            ..RankSample::default()
        };
        let forged = [busy(u32::MAX, 0, 0), busy(2, 0, 0), busy(1, 2, 0), busy(1, u16::MAX, 0), busy(1, 0, 2), busy(0, 0, u32::MAX)];
        for (n, sample) in forged.iter().enumerate() {
            ingest.sample(&mut state, sample, Duration::from_millis(100));
            assert_eq!(state.refused_total, n as u64 + 1, "{sample:?}");
        }
        assert_eq!(state.log.len(), before.log.len() + 1, "one line for the first: {:?}", state.log);
        assert!(state.log.back().is_some_and(|l| l.text.contains("rank 4294967295 is outside the run's 2 ranks")), "{:?}", state.log);
        let (mut after, mut expected) = (state.clone(), before.clone());
        after.log.clear();
        after.refused_total = 0;
        expected.log.clear();
        // Compared as printed: the fleet model holds NaN (no rate yet), which equals nothing.
        assert_eq!(format!("{after:?}"), format!("{expected:?}"), "no view changed, nothing grew");
        assert!(state.queues.is_empty() && state.nvlink.is_empty());
        // A sample inside the world still counts.
        ingest.sample(&mut state, &busy(1, 1, 0), Duration::from_millis(200));
        assert!(state.channels[3].gbps > 0.0 && state.drops_total == 9);
        assert_eq!(state.refused_total, 6);
        let shown = {
            let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(160, 30)).unwrap();
            terminal.draw(|frame| crate::dashboard::draw(frame, &state, &View::of(&state))).unwrap();
            terminal.backend().buffer().content().iter().map(ratatui::buffer::Cell::symbol).collect::<String>()
        };
        assert!(shown.contains("refused 6"), "{shown}");
    }

    /// The rank table follows rank 0's one liveness clock: slow, then silent, then lost only once the
    /// hang timeout has passed; a phase change brings a rank back and says what it is doing.
    #[test]
    fn a_silent_rank_is_shown_slow_then_silent_then_lost_by_the_liveness_clock() {
        use efatop_proto::telemetry::Phase;
        let mut state = DashboardState::default();
        let mut ingest = Ingest::begin(&mut state, run_info(), &[], results());
        let mut live = Liveness::new(2, Duration::from_millis(100), Duration::from_secs(30));
        let at = Duration::from_secs;
        let tick = |ingest: &mut Ingest, state: &mut DashboardState, live: &mut Liveness, second: u64| {
            // Rank 0 keeps speaking; rank 1 does not.
            live.heard(0, at(second));
            ingest.tick(state, at(second), live);
        };
        tick(&mut ingest, &mut state, &mut live, 2);
        assert_eq!(state.peers[1].state, PeerState::Alive);
        tick(&mut ingest, &mut state, &mut live, 4);
        assert_eq!((state.peers[1].state, state.peers[1].last_seen), (PeerState::Slow, at(4)));
        tick(&mut ingest, &mut state, &mut live, 12);
        assert_eq!(state.peers[1].state, PeerState::Silent);
        assert!(state.log.iter().any(|l| l.level == LogLevel::Warn && l.text.contains("rank 1 (a) silent for 12 s")), "{:?}", state.log);
        tick(&mut ingest, &mut state, &mut live, 29);
        assert_eq!(state.peers[1].state, PeerState::Silent, "not lost before the hang timeout");
        assert!(!state.log.iter().any(|l| l.level == LogLevel::Error));
        live.phase(1, Phase::Verifying, 1 << 30, at(29));
        tick(&mut ingest, &mut state, &mut live, 30);
        assert_eq!((state.peers[1].state, state.peers[1].phase.as_deref()), (PeerState::Alive, Some("verifying 1G")));
        tick(&mut ingest, &mut state, &mut live, 61);
        assert_eq!(state.peers[1].state, PeerState::Lost);
        assert!(state.log.iter().any(|l| l.level == LogLevel::Error && l.text.contains("rank 1 (a) hung: silent for 32.0 s; last said: verifying 1G")), "{:?}", state.log);
        assert_eq!(state.peers[0].state, PeerState::Alive);
    }

    #[test]
    fn queues_and_nvlink_pairs_become_sorted_views_with_rates_and_histories() {
        use efatop_proto::telemetry::{NvlinkSample, QueueSample};
        let mut state = DashboardState::default();
        let four = RunInfo { ranks: 4, hosts: vec!["a".into(); 4], ..run_info() };
        let mut ingest = Ingest::begin(&mut state, four.clone(), &[], results());
        ingest.sample(&mut state, &RankSample { rank: 1, interval_ns: 100_000_000, ..RankSample::default() }, Duration::ZERO);
        assert!(!state.has_gpu_figures(), "a rank without GPU figures adds no panel");

        let pair = |peer, bytes, peak| NvlinkSample { peer, gpu: 1, peer_gpu: peer, bytes, peak_gbytes_per_s: peak };
        let from_1 = RankSample {
            rank: 1,
            interval_ns: 100_000_000,
            nvlink: vec![pair(3, 37_120_000_000, Some(450.0)), pair(0, 1_000_000_000, None)],
            ..RankSample::default()
        };
        ingest.sample(&mut state, &from_1, Duration::from_millis(100));
        let queue = QueueSample { depth: 18, capacity: 1024, requests: 1234, quiet_calls: 41, held: 3 };
        let from_0 = RankSample {
            rank: 0,
            interval_ns: 100_000_000,
            queue: Some(queue),
            nvlink: vec![pair(1, 0, Some(450.0))],
            ..RankSample::default()
        };
        ingest.sample(&mut state, &from_0, Duration::from_millis(100));
        assert!(state.has_gpu_figures());
        assert_eq!(state.queues.len(), 1);
        let view = &state.queues[0];
        assert_eq!((view.rank, view.depth, view.capacity, view.held), (0, 18, 1024, 3));
        assert!((view.requests_per_s - 12_340.0).abs() < 1e-6 && (view.quiet_calls_per_s - 410.0).abs() < 1e-6, "{view:?}");
        let order: Vec<(usize, usize)> = state.nvlink.iter().map(|view| (view.rank, view.peer)).collect();
        assert_eq!(order, [(0, 1), (1, 0), (1, 3)]);
        let fast = &state.nvlink[2];
        assert!((fast.gbytes_per_s - 371.2).abs() < 1e-9, "{fast:?}");
        assert_eq!((fast.gpu, fast.peer_gpu, fast.peak_gbytes_per_s), (1, 3, Some(450.0)));
        assert_eq!(state.nvlink[1].peak_gbytes_per_s, None);

        // The next interval updates the same views; histories grow, and are bounded.
        for step in 0..NVLINK_HISTORY_LEN {
            let idle = RankSample { queue: Some(QueueSample { requests: 0, ..queue }), ..from_0.clone() };
            ingest.sample(&mut state, &idle, Duration::from_millis(200 + step as u64 * 100));
        }
        ingest.sample(&mut state, &from_1, Duration::from_secs(20));
        assert_eq!((state.queues.len(), state.nvlink.len()), (1, 3));
        assert!(state.queues[0].requests_per_s.abs() < f64::EPSILON);
        assert_eq!(state.nvlink[0].history.len(), NVLINK_HISTORY_LEN);
        assert_eq!(state.nvlink[2].history.len(), 2, "rank 1 sent twice");

        // A rank outside the run, or a pair towards one, is no view.
        let stray = RankSample { rank: 4, queue: Some(queue), ..from_1.clone() };
        ingest.sample(&mut state, &stray, Duration::from_secs(21));
        let beyond = RankSample { nvlink: vec![pair(4, 1, None), pair(u32::MAX, 1, None)], ..from_1.clone() };
        ingest.sample(&mut state, &beyond, Duration::from_secs(21));
        assert_eq!((state.queues.len(), state.nvlink.len()), (1, 3));
        // The next run starts without them.
        Ingest::begin(&mut state, four, &[], results());
        assert!(!state.has_gpu_figures());
    }

    /// The whole path of the GPU figures: the proxy's queue and an NVLink writer's bytes as a rank's sample
    /// carries them (what `efatop_experiments::probe`'s sampler makes of them, tested there), framed and
    /// decoded as rank 0's collector does, then ingested, is what the GPU panel draws.
    #[test]
    fn gpu_figures_travel_from_the_sample_to_the_dashboard_state() {
        use efatop_proto::telemetry::{wire, ChannelSample, NvlinkSample, QueueSample, RankSample};
        let mut state = DashboardState::default();
        let run = RunInfo { ranks: 4, hosts: vec!["a".into(); 4], ..run_info() };
        let mut ingest = Ingest::begin(&mut state, run, &[], results());
        let interval = Duration::from_millis(100);
        let sample = |seq: u64, queue: QueueSample, nvlink: [(u32, u32, u64, Option<f64>); 2]| RankSample {
            rank: 2,
            seq,
            interval_ns: interval.as_nanos() as u64,
            channels: (0..2).map(|channel| ChannelSample { channel, ..ChannelSample::default() }).collect(),
            queue: Some(queue),
            nvlink: nvlink.iter().map(|&(peer, peer_gpu, bytes, peak_gbytes_per_s)| NvlinkSample { peer, gpu: 2, peer_gpu, bytes, peak_gbytes_per_s }).collect(),
            ..RankSample::default()
        };
        let through_the_wire = |sample| {
            let mut frame = Vec::new();
            wire::encode(&sample, &mut frame);
            assert_eq!(frame[5], wire::KIND_RANK_SAMPLE_GPU);
            match wire::decode_frame(&frame[4..]) {
                Ok(wire::Frame::Rank(decoded)) => decoded,
                other => panic!("{other:?}"),
            }
        };

        let queue = QueueSample { depth: 412, capacity: 1024, requests: 538, quiet_calls: 20, held: 48 };
        let first = through_the_wire(sample(0, queue, [(0, 0, 12_240_000_000, None), (3, 3, 37_120_000_000, Some(450.0))]));
        ingest.sample(&mut state, &first, Duration::from_millis(100));

        let queue = &state.queues[..];
        assert_eq!(queue.len(), 1);
        assert_eq!((queue[0].rank, queue[0].depth, queue[0].capacity, queue[0].held), (2, 412, 1024, 48));
        assert!((queue[0].requests_per_s - 5380.0).abs() < 1e-6, "{:?}", queue[0]);
        assert!((queue[0].quiet_calls_per_s - 200.0).abs() < 1e-6, "{:?}", queue[0]);
        let pairs: Vec<(usize, usize, u32, u32, Option<f64>)> =
            state.nvlink.iter().map(|view| (view.rank, view.peer, view.gpu, view.peer_gpu, view.peak_gbytes_per_s)).collect();
        assert_eq!(pairs, [(2, 0, 2, 0, None), (2, 3, 2, 3, Some(450.0))]);
        assert!((state.nvlink[0].gbytes_per_s - 122.4).abs() < 1e-9, "{:?}", state.nvlink[0]);
        assert!((state.nvlink[1].gbytes_per_s - 371.2).abs() < 1e-9, "{:?}", state.nvlink[1]);

        // The next interval's counts are its own: rates, not totals; idle pairs stay, at zero.
        let queue = QueueSample { depth: 0, capacity: 1024, requests: 100, quiet_calls: 0, held: 0 };
        let second = through_the_wire(sample(1, queue, [(0, 0, 0, None), (3, 3, 1_000_000_000, Some(450.0))]));
        ingest.sample(&mut state, &second, Duration::from_millis(200));
        assert_eq!((state.queues[0].depth, state.queues[0].held), (0, 0));
        assert!((state.queues[0].requests_per_s - 1000.0).abs() < 1e-6 && state.queues[0].quiet_calls_per_s.abs() < 1e-9);
        assert!(state.nvlink[0].gbytes_per_s.abs() < 1e-9);
        assert!((state.nvlink[1].gbytes_per_s - 10.0).abs() < 1e-9);
        assert_eq!(state.nvlink[1].history.iter().copied().collect::<Vec<_>>(), [371.2, 10.0]);
    }

    fn alltoall_run(ranks: usize) -> RunInfo {
        RunInfo { experiment: Experiment::Alltoall, ranks, hosts: vec!["a".into(); ranks], ..run_info() }
    }

    /// `bytes` in a 100 ms interval, with latency samples at `latency_ns` when given.
    fn peer(peer: u32, bytes: u64, latency_ns: Option<u64>) -> PeerSample {
        let buckets = latency_ns
            .map(|ns| vec![(u16::try_from(efatop_proto::telemetry::histogram::bucket_of(ns)).unwrap(), 4)])
            .unwrap_or_default();
        PeerSample { peer, bytes, ops: 4, latency: IntervalHistogram { buckets: buckets.into() } }
    }

    #[test]
    fn only_alltoall_runs_get_a_pair_matrix() {
        let mut state = DashboardState::default();
        Ingest::begin(&mut state, run_info(), &[], results());
        assert!(state.pairs.is_none());
        assert_eq!(View::of(&state).focus, Panel::Gauges);
        Ingest::begin(&mut state, alltoall_run(3), &[], results());
        let pairs = state.pairs.as_ref().expect("all-to-all has a matrix");
        assert_eq!((pairs.ranks(), pairs.columns(), pairs.receivers_per_column()), (3, 3, 1));
        assert_eq!(View::of(&state).focus, Panel::Pairs);
    }

    #[test]
    fn landings_fill_their_receivers_column_at_their_transfer_rate() {
        let mut state = DashboardState::default();
        let mut ingest = Ingest::begin(&mut state, alltoall_run(3), &[], results());
        // Rank 1 received one 1.25 MB round from rank 0 that took 1 ms (10 Gbps), and two 125 KB rounds
        // from rank 2 of 1 ms each (1 Gbps); rank 1 itself is ignored. (A peer outside the run's ranks
        // refuses the whole sample: `samples_outside_the_world_are_refused_counted_and_grow_nothing`.)
        let sample = RankSample {
            rank: 1,
            interval_ns: 100_000_000,
            peers: vec![
                PeerSample { ops: 1, ..peer(0, 1_250_000, Some(1_000_000)) },
                PeerSample { ops: 2, ..peer(2, 250_000, Some(1_000_000)) },
                peer(1, 9, Some(1000)),
            ],
            ..RankSample::default()
        };
        ingest.sample(&mut state, &sample, Duration::from_millis(100));
        let pairs = state.pairs.as_ref().expect("matrix");
        let from_0 = pairs.latest(0, 1).expect("rank 0 → rank 1 landed");
        assert!((from_0.gbps - 10.0).abs() < 0.5, "{from_0:?}");
        let p50 = from_0.lat_p50_us.expect("measured");
        assert!((900.0..1100.0).contains(&p50), "{p50}");
        let from_2 = pairs.latest(2, 1).expect("rank 2 → rank 1 landed");
        assert!((from_2.gbps - 1.0).abs() < 0.05, "{from_2:?}");
        assert_eq!(pairs.latest(1, 0), None, "nothing from rank 1 has landed anywhere yet");
        assert_eq!(pairs.history(0, 1).map(std::collections::VecDeque::len), Some(1));

        // An interval without a landing from rank 2 keeps the pair's last rate: a lock-stepped exchange
        // lands once per round, whatever the sampling interval.
        let sample = RankSample { rank: 1, interval_ns: 100_000_000, peers: vec![PeerSample { ops: 1, ..peer(0, 1_250_000, Some(2_000_000)) }], ..RankSample::default() };
        ingest.sample(&mut state, &sample, Duration::from_millis(200));
        let pairs = state.pairs.as_ref().expect("matrix");
        assert!((pairs.latest(0, 1).expect("landed").gbps - 5.0).abs() < 0.25);
        assert!((pairs.latest(2, 1).expect("kept").gbps - 1.0).abs() < 0.05);
        assert_eq!(pairs.history(1, 1).map(std::collections::VecDeque::len), Some(0), "no pair with itself");
    }

    #[test]
    fn large_runs_keep_blocks_of_receivers_and_no_histories() {
        let ranks = 4096;
        let mut pairs = PairMatrixView::new(ranks);
        assert!(pairs.ranks() * pairs.columns() <= PAIR_MATRIX_MAX_CELLS);
        let block = pairs.receivers_per_column();
        assert_eq!(block, 64);
        // Sender 0 writes 8 Gbps to every receiver of block 1 but the first, which gets nothing.
        let peers: Vec<PeerSample> =
            (block + 1..2 * block).map(|receiver| peer(u32::try_from(receiver).unwrap(), 100_000_000, Some(5_000))).collect();
        pairs.record(0, 100_000_000, &peers);
        let mean = pairs.latest(0, 1).expect("reported").gbps;
        assert!((mean - 8.0 * 63.0 / 64.0).abs() < 1e-3, "{mean}");
        // Block 0 holds the sender itself: its mean is over the 63 others, all idle.
        assert_eq!(pairs.latest(0, 0).map(|p| p.gbps), Some(0.0));
        assert_eq!(pairs.history(0, 1), None);
    }
}

#[cfg(test)]
mod fleet_view;

/// The gauges' index ([`GaugeIndex`]) kept while ingesting, against one built for the frame. Here, not in
/// `state::gauges`, so that `state` imports neither `ingest` nor `dashboard`, even in tests.
#[cfg(test)]
mod gauge_index {
    use std::time::Duration;

    use efatop_proto::telemetry::{ChannelSample, RankSample};
    use efatop_proto::RunResults;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    use super::Ingest;
    use crate::dashboard::draw_panel;
    use crate::state::gauges::GaugeIndex;
    use efatop_proto::events::RunInfo;
    use crate::state::{DashboardState, Panel, HISTORY_LEN};

    fn gauges_panel(state: &DashboardState, view: &crate::view::View) -> ratatui::buffer::Buffer {
        let mut terminal = Terminal::new(TestBackend::new(90, 30)).unwrap();
        terminal.draw(|frame| draw_panel(frame, frame.area(), state, view, Panel::Gauges)).unwrap();
        terminal.backend().buffer().clone()
    }

    #[test]
    fn the_index_kept_while_ingesting_matches_the_views() {
        // Hosts interleaved across ranks; the link speed unknown, so the bars scale to the peak.
        let hosts: Vec<String> = ["b", "a", "b", "c", "a"].map(String::from).to_vec();
        let run = RunInfo { ranks: 5, hosts, channels: 2, ..RunInfo::default() };
        let nics = vec![vec!["nic0".to_string(), "a-longer-nic1".to_string()]; 5];
        let mut state = DashboardState::default();
        let mut ingest = Ingest::begin(&mut state, run, &nics, RunResults::default());
        for seq in 0..HISTORY_LEN as u64 * 2 + 7 {
            for rank in 0..5_u32 {
                // One spike early on, which must age out of the peak once it leaves the history.
                let spike = seq == 3 && rank == 2;
                let sample = RankSample {
                    rank,
                    seq,
                    interval_ns: 100_000_000,
                    channels: (0..2_u16)
                        .map(|channel| ChannelSample {
                            channel,
                            bytes: if spike { 50_000_000_000 } else { (seq * 7 + u64::from(rank) * 13 + u64::from(channel)) % 97 * 1_000_000 },
                            ops: 1,
                            in_flight: 10_u32.pow(((seq + u64::from(rank)) % 5) as u32),
                            ..ChannelSample::default()
                        })
                        .collect(),
                    ..RankSample::default()
                };
                ingest.sample(&mut state, &sample, Duration::from_millis(seq * 100));
            }
            let peak = state
                .channels
                .iter()
                .flat_map(|view| view.history.iter().chain([&view.gbps]))
                .copied()
                .filter(|gbps| gbps.is_finite())
                .fold(0.0, f64::max);
            let in_flight = state.channels.iter().map(|view| view.in_flight.to_string().len()).max().unwrap();
            assert_eq!(state.gauges.peak_gbps().to_bits(), peak.to_bits(), "peak after interval {seq}");
            assert_eq!(state.gauges.in_flight_width(), in_flight, "in flight after interval {seq}");
        }
        assert!(state.gauges.peak_gbps() < 100.0, "the spike has aged out");
        let fresh = GaugeIndex::build(&state);
        assert_eq!((&state.gauges.rows, &state.gauges.hosts), (&fresh.rows, &fresh.hosts));
        assert_eq!(state.gauges.hosts.iter().map(|host| host.name.as_str()).collect::<Vec<_>>(), ["b", "a", "c"]);
        // The panel reads the same from the kept index as from one built for the frame.
        let view = crate::view::View { selected_rank: 4, selected_channel: 1, ..crate::view::View::of(&state) };
        let kept = gauges_panel(&state, &view);
        state.gauges = GaugeIndex::default();
        assert_eq!(kept, gauges_panel(&state, &view));
    }
}
