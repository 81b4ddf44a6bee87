//! A realistic mid-run dashboard for the tests (compiled only into them): `write` over EFA on two hosts, two ranks
//! each, four channels per rank, SinglePin finished and MultiPin half-way, rank 3 lost after dropping
//! telemetry. Deterministic: no clocks, no randomness.

use std::collections::VecDeque;
use std::time::Duration;

use efatop_proto::results::{LatencySummary, Measurement, NicRecord, RunMetadata};
use efatop_proto::telemetry::histogram::bucket_of;
use efatop_proto::telemetry::{IntervalHistogram, PeerSample};
use efatop_proto::column::{Column, Layout, Memory, ProxyLayout};
use efatop_proto::results::LinkSource;
use efatop_proto::{Experiment, RunResults};

use efatop_proto::events::RunInfo;
use crate::state::{
    ChannelView, DashboardState, LogLevel, NvlinkView, PairMatrixView, Panel, PeerState, PeerView, Progress, QueueView,
    HISTORY_LEN, NVLINK_HISTORY_LEN,
};
use crate::view::View;

const HOSTS: [&str; 2] = ["p5-node-a", "p5-node-b"];
const NICS: [&str; 4] = ["rdmap79s0-rdm", "rdmap80s0-rdm", "rdmap81s0-rdm", "rdmap82s0-rdm"];
const LINK_GBPS: f64 = 100.0;
const SIZES: [u64; 6] = [256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20];

pub fn sample_state() -> DashboardState {
    let hosts: Vec<String> = [HOSTS[0], HOSTS[0], HOSTS[1], HOSTS[1]].map(String::from).to_vec();
    let (single, multi) = (Column::write(Layout::Single, Memory::Host), Column::write(Layout::Multi, Memory::Host));
    let configs = vec![single.clone(), multi.clone()];
    let run = RunInfo {
        experiment: Experiment::Write,
        provider_stack: "efa".into(),
        ranks: 4,
        hosts: hosts.clone(),
        channels: 4,
        link_gbps: Some(LINK_GBPS),
        memory: "host".into(),
        configs: configs.clone(),
        sizes: SIZES.to_vec(),
        placements: Vec::new(),
    };
    let progress = Progress {
        config: Some("MultiPin".into()),
        size: Some(SIZES[3]),
        done: 9,
        total: 12,
        elapsed: Duration::from_secs(83),
        eta: Some(Duration::from_secs(27)),
    };

    let mut state = DashboardState {
        run,
        progress,
        channels: (0..4).flat_map(|rank| (0..4).map(move |channel| channel_view(rank, channel))).collect(),
        peers: (0..4).map(|rank| peer_view(rank, &hosts)).collect(),
        results: Some(RunResults {
            metadata: metadata(hosts),
            configs,
            measurements: measurements(&single, &multi),
            ..RunResults::default()
        }),
        drops_total: 17,
        ..DashboardState::default()
    };
    let at = Duration::from_millis;
    state.push_log(at(120), LogLevel::Info, "world established: 4 ranks on 2 hosts, provider efa");
    state.push_log(at(180), LogLevel::Info, "4 channels per rank over 4 NICs at 100 Gbps (provider)");
    state.push_log(at(2_400), LogLevel::Info, "SinglePin 256K: 31.58 Gbps, verified");
    state.push_log(at(41_000), LogLevel::Info, "SinglePin done (6 sizes)");
    state.push_log(at(64_200), LogLevel::Warn, "rank 3: telemetry queue full, 17 samples dropped");
    state.push_log(at(71_900), LogLevel::Error, "rank 3: no telemetry for 5.0s, marked lost");
    state.push_log(at(82_500), LogLevel::Info, "MultiPin 2M started");
    state
}

/// The view [`sample_state`] is drawn under: rank 1's channel 2 selected, the gauges focused.
pub fn sample_view() -> View {
    View { selected_rank: 1, selected_channel: 2, ..View::default() }
}

/// A `proxy` run mid-sweep on one host: rank 0's GPU pushes write requests into the ring faster than its
/// CPU proxy drains them (`ProxyMultiNBI`, 2M), so the queue is 40% full; rank 1 receives. Two channels.
pub fn proxy_sample_state() -> DashboardState {
    let hosts = vec![HOSTS[0].to_string(); 2];
    let proxy = |layout| Column::Proxy { layout, memory: Memory::Staged, emulated: false };
    let configs = vec![proxy(ProxyLayout::SingleNbi), proxy(ProxyLayout::MultiNbi)];
    let run = RunInfo {
        experiment: Experiment::Proxy,
        provider_stack: "efa".into(),
        ranks: 2,
        hosts: hosts.clone(),
        channels: 2,
        link_gbps: Some(LINK_GBPS),
        memory: "device".into(),
        configs: configs.clone(),
        sizes: SIZES.to_vec(),
        placements: Vec::new(),
    };
    let mut state = DashboardState {
        run,
        progress: Progress {
            config: Some(configs[1].to_string()),
            size: Some(SIZES[3]),
            done: 9,
            total: 12,
            elapsed: Duration::from_secs(47),
            eta: Some(Duration::from_secs(16)),
        },
        channels: (0..2).flat_map(|rank| (0..2).map(move |channel| channel_view(rank, channel))).collect(),
        peers: (0..2).map(|rank| peer_view(rank, &hosts)).collect(),
        results: Some(RunResults {
            metadata: RunMetadata { experiment: Experiment::Proxy, ranks: 2, ..metadata(hosts.clone()) },
            configs: configs.clone(),
            measurements: measurements(&configs[0], &configs[1]),
            ..RunResults::default()
        }),
        queues: vec![QueueView {
            rank: 0,
            depth: 412,
            capacity: 1024,
            requests_per_s: 5_380.0,
            quiet_calls_per_s: 0.0,
            held: 48,
        }],
        ..DashboardState::default()
    };
    state.push_log(Duration::from_millis(150), LogLevel::Info, "world established: 2 ranks on 1 host, provider efa");
    state.push_log(Duration::from_secs(46), LogLevel::Info, "ProxyMultiNBIDMA(staged) 2M started");
    state.push_log(
        Duration::from_secs(47),
        LogLevel::Info,
        "proxy queue (ProxyMultiNBIDMA(staged) 2M): 412 waiting in the ring, 48 held by the proxy, 5380 requests/s, 0 Quiet calls",
    );
    state
}

/// Four ranks on one host, one GPU each, each GPU writing into the next one's over NVLink (a ring),
/// with `peak` as every pair's peak; rank 2's pair runs at a third of the others. Rank 3 is lost.
pub fn nvlink_sample_state(peak: Option<f64>) -> DashboardState {
    let mut state = DashboardState { nvlink: nvlink_ring(4, peak), ..sample_state() };
    state.run.experiment = Experiment::Ipc;
    state.run.hosts = vec![HOSTS[0].to_string(); 4];
    state.run.memory = "device".into();
    // ipc's header reads the pair's NVLink peak (GB/s) from the run's link speed (Gbps).
    state.run.link_gbps = peak.map(|p| p * 8.0);
    for peer in &mut state.peers {
        peer.host = HOSTS[0].into();
    }
    state
}

/// `ranks` ranks, rank r on GPU r writing into rank r+1's GPU (the last into the first's), each pair with
/// a full history around its rate (idle for its first six intervals).
pub fn nvlink_ring(ranks: usize, peak: Option<f64>) -> Vec<NvlinkView> {
    (0..ranks)
        .map(|rank| {
            let peer = (rank + 1) % ranks;
            let rate = if rank == 2 { 122.4 } else { 371.2 - rank as f64 * 3.1 };
            let history = (0..NVLINK_HISTORY_LEN - 1)
                .map(|step| {
                    let phase = (step * 5 + rank * 11) % 24;
                    let ramp = if phase < 12 { phase } else { 24 - phase };
                    if step < 6 { 0.0 } else { rate * (0.7 + ramp as f64 * 0.025) }
                })
                .chain([rate])
                .collect();
            NvlinkView {
                rank,
                peer,
                gpu: rank as u32,
                peer_gpu: peer as u32,
                gbytes_per_s: rate,
                peak_gbytes_per_s: peak,
                history,
            }
        })
        .collect()
}

/// Rank 3 is lost, so its channels went quiet a while ago; the others carry traffic that rises and
/// falls with the sweep.
fn channel_view(rank: usize, channel: usize) -> ChannelView {
    let lost = rank == 3;
    let wave = |step: usize| -> f64 {
        let phase = (step * 7 + rank * 13 + channel * 5) % 40;
        let ramp = if phase < 20 { phase } else { 40 - phase };
        20.0 + ramp as f64 * 3.5 + channel as f64
    };
    let history: VecDeque<f64> = (0..HISTORY_LEN)
        .map(|step| if lost && step > HISTORY_LEN - 30 { 0.0 } else { wave(step) })
        .collect();
    let gbps = history.back().copied().unwrap_or_default();
    ChannelView {
        rank,
        channel,
        nic: NICS[channel].into(),
        gbps,
        ops_per_s: if lost { 0.0 } else { gbps * 1e9 / 8.0 / f64::from(2_u32 << 20) },
        in_flight: if lost { 0 } else { 1 + (rank + channel) as u64 % 3 },
        lat_p50_us: (!lost).then_some(160.0 + channel as f64 * 4.0),
        lat_p99_us: (!lost).then_some(210.0 + channel as f64 * 6.5),
        lat_max_us: (!lost).then_some(260.0),
        history,
    }
}

fn peer_view(rank: usize, hosts: &[String]) -> PeerView {
    let lost = rank == 3;
    PeerView {
        rank,
        host: hosts[rank].clone(),
        lat_p50_us: (!lost).then_some(168.5 + rank as f64 * 2.0),
        lat_p99_us: (!lost).then_some(231.25 + rank as f64 * 3.0),
        gbps: if lost { 0.0 } else { 310.4 - rank as f64 * 12.5 },
        drops: if lost { 17 } else { 0 },
        last_seen: if lost { Duration::from_millis(11_600) } else { Duration::from_millis(200 + rank as u64 * 100) },
        state: if lost { PeerState::Lost } else { PeerState::Alive },
        phase: None,
    }
}

fn metadata(hosts: Vec<String>) -> RunMetadata {
    RunMetadata {
        efatop_version: "0.1.0".into(),
        libfabric_version: "1.22.0amzn4.0".into(),
        experiment: Experiment::Write,
        provider: "efa".into(),
        provider_stack: "efa".into(),
        fabric: String::new(),
        libfabric_api: String::new(),
        emulated_write: None,
        shm_shortcut: None,
        completion: None,
        ranks: 4,
        hosts,
        channels: 4,
        distinct_nics: 4,
        nics: NICS
            .iter()
            .enumerate()
            .map(|(channel, domain)| NicRecord {
                channel,
                domain: (*domain).into(),
                fabric: "efa".into(),
                link_gbps: Some(LINK_GBPS),
                pci_address: None,
                mr_mode: vec![],
            })
            .collect(),
        link_gbps: Some(LINK_GBPS),
        link_source: LinkSource::Provider,
        memory: "host".into(),
        window: 1,
        warmup: 3,
        hang_timeout_s: 0,
        telemetry_relays: Vec::new(),
        iters: 20,
        notes: vec![],
        started_unix_s: 0,
        placements: Vec::new(),
        gpu_pairs: Vec::new(),
        instance_type: None,
    }
}

/// `single` (SinglePin) over all six sizes, `multi` (MultiPin) over the first three: the table is half
/// filled in.
fn measurements(single_config: &Column, multi_config: &Column) -> Vec<Measurement> {
    let single = [31.58, 52.14, 71.93, 84.27, 91.06, 94.88];
    let multi = [45.12, 98.75, 171.40];
    let measurement = |config: &Column, size: u64, gbps: f64, channels: f64| {
        let mean_us = size as f64 * 8.0 / gbps / 1e3;
        let latency = LatencySummary { mean_us, p50_us: mean_us * 0.97, p99_us: mean_us * 1.31, max_us: mean_us * 1.6 };
        Measurement { busbw_percent: Some(gbps / (LINK_GBPS * channels) * 100.0), ..Measurement::plain(config.clone(), size, gbps, latency, 20) }
    };
    let single = SIZES.iter().zip(single).map(|(&size, gbps)| measurement(single_config, size, gbps, 1.0));
    let multi = SIZES.iter().zip(multi).map(|(&size, gbps)| measurement(multi_config, size, gbps, 4.0));
    single.chain(multi).collect()
}

/// Telemetry intervals the all-to-all sample has recorded (its histories' length).
const ALLTOALL_INTERVALS: u64 = 40;
const INTERVAL_NS: u64 = 100_000_000;
/// A pair touching the slow host moves this share of what the others move.
pub const SLOW_SHARE: f64 = 0.2;

/// An all-to-all run mid-sweep on `hosts` hosts of `ranks_per_host` ranks, one channel per rank, where
/// every pair with a rank on host `slow_host` (as sender or receiver) runs at [`SLOW_SHARE`] of the
/// others' rate with four times their latency. The matrix is filled through the ingest path
/// ([`PairMatrixView::record`]) from `ALLTOALL_INTERVALS` intervals of peer samples. Deterministic.
pub fn alltoall_sample_state(hosts: usize, ranks_per_host: usize, slow_host: usize) -> DashboardState {
    let ranks = hosts * ranks_per_host;
    let host_names: Vec<String> = (0..ranks).map(|rank| format!("p5-node-{:02}", rank / ranks_per_host)).collect();
    // A label of its own, as a results file from elsewhere may have: shown as it is.
    let configs = vec![Column::Other("AllToAllPin".into())];
    let run = RunInfo {
        experiment: Experiment::Alltoall,
        provider_stack: "efa".into(),
        ranks,
        hosts: host_names.clone(),
        channels: 1,
        link_gbps: Some(LINK_GBPS),
        memory: "host".into(),
        configs: configs.clone(),
        sizes: SIZES.to_vec(),
        placements: Vec::new(),
    };
    let slow = |rank: usize| rank / ranks_per_host == slow_host;
    // Each sender splits its link among the others.
    let fair_share = LINK_GBPS * 0.9 / ranks.saturating_sub(1).max(1) as f64;
    let mut pairs = PairMatrixView::new(ranks);
    for interval in 0..ALLTOALL_INTERVALS {
        for sender in 0..ranks {
            let peers: Vec<PeerSample> = (0..ranks)
                .filter(|&receiver| receiver != sender)
                .map(|receiver| {
                    let jitter = ((sender * 7 + receiver * 13 + interval as usize * 5) % 11) as f64 / 100.0;
                    let share = if slow(sender) || slow(receiver) { SLOW_SHARE } else { 1.0 };
                    let gbps = fair_share * share * (0.95 + jitter);
                    let latency_ns = if share < 1.0 { 80_000 } else { 20_000 } + (receiver as u64 % 4) * 1_000;
                    PeerSample {
                        peer: u32::try_from(receiver).unwrap_or(u32::MAX),
                        bytes: (gbps * INTERVAL_NS as f64 / 8.0) as u64,
                        ops: 8,
                        latency: IntervalHistogram {
                            buckets: vec![(u16::try_from(bucket_of(latency_ns)).unwrap_or(u16::MAX), 8)].into(),
                        },
                    }
                })
                .collect();
            pairs.record(sender, INTERVAL_NS, &peers);
        }
    }
    let per_rank = fair_share * (ranks.saturating_sub(1)) as f64;
    let mut state = DashboardState {
        run,
        progress: Progress {
            config: Some("AllToAllPin".into()),
            size: Some(SIZES[2]),
            done: 2,
            total: SIZES.len(),
            elapsed: Duration::from_secs(21),
            eta: Some(Duration::from_secs(40)),
        },
        channels: (0..ranks)
            .map(|rank| {
                let gbps = if slow(rank) { per_rank * SLOW_SHARE } else { per_rank };
                ChannelView {
                    rank,
                    channel: 0,
                    nic: NICS[0].into(),
                    gbps,
                    ops_per_s: gbps * 1e9 / 8.0 / f64::from(1_u32 << 20),
                    in_flight: ranks.saturating_sub(1) as u64,
                    lat_p50_us: Some(if slow(rank) { 80.0 } else { 20.0 }),
                    lat_p99_us: Some(if slow(rank) { 96.0 } else { 24.0 }),
                    lat_max_us: Some(120.0),
                    history: std::iter::repeat_n(gbps, 60).collect(),
                }
            })
            .collect(),
        peers: (0..ranks)
            .map(|rank| PeerView {
                rank,
                host: host_names[rank].clone(),
                lat_p50_us: Some(if slow(rank) { 80.0 } else { 20.0 }),
                lat_p99_us: Some(if slow(rank) { 96.0 } else { 24.0 }),
                gbps: if slow(rank) { per_rank * SLOW_SHARE } else { per_rank },
                last_seen: Duration::from_millis(100),
                ..PeerView::default()
            })
            .collect(),
        results: Some(RunResults {
            metadata: RunMetadata { experiment: Experiment::Alltoall, ranks, hosts: host_names, ..metadata(Vec::new()) },
            configs,
            measurements: Vec::new(),
            ..RunResults::default()
        }),
        pairs: Some(pairs),
        ..DashboardState::default()
    };
    state.push_log(Duration::from_millis(150), LogLevel::Info, format!("world established: {ranks} ranks on {hosts} hosts, provider efa"));
    state.push_log(Duration::from_secs(20), LogLevel::Info, "AllToAllPin 1M started");
    state
}

/// The view [`alltoall_sample_state`] is drawn under: the heatmap focused, the pair from the slow host's
/// first rank to the first rank of another host selected.
pub fn alltoall_sample_view(ranks_per_host: usize, slow_host: usize) -> View {
    View {
        focus: Panel::Pairs,
        selected_sender: slow_host * ranks_per_host,
        selected_receiver: usize::from(slow_host == 0) * ranks_per_host,
        ..View::default()
    }
}

/// Host names of the synthetic fleets (`p5-node-0042`), as the fleet bench's feed names them too.
pub fn fleet_host(host: usize) -> String {
    format!("p5-node-{host:04}")
}
