//! The synthetic feed of the `bench_collector` example: a fleet of `hosts` × `ranks_per_host` ranks ×
//! `channels` channels, each rank a sender of real telemetry frames over TCP to rank 0's real collector,
//! every channel near 95 Gbps (a deterministic jitter of a few Gbps), and optionally one NIC slowed from
//! a time on (`--slow`). No fabric: only the wire.

use efatop_auth::seal::SealedWriter;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use efatop_proto::column::{Column, Layout, Memory};
use efatop_proto::results::{LinkSource, RankPlacement, RunMetadata};
use efatop_proto::telemetry::{wire, ChannelSample, IntervalHistogram, PeerSample, RankSample};
use efatop_proto::{Experiment, RunResults};

pub use crate::args::Slow;
use efatop_proto::events::{RunInfo, RunStart};

/// Link speed of the synthetic NICs.
const LINK_GBPS: f64 = 100.0;

/// The fleet's shape.
#[derive(Clone, Debug)]
pub struct Shape {
    /// `None`: every rank on one host named `bench` (the bench as it was before `--hosts`).
    pub hosts: Option<usize>,
    /// Each host's ranks over one connection, as its relay sends them (with `hosts`).
    pub relay: bool,
    /// Intervals between a relay's writes.
    pub relay_every: u32,
    pub ranks_per_host: usize,
    pub ranks: usize,
    pub channels: usize,
    pub hz: u32,
}

impl Shape {
    pub fn host_of(&self, rank: usize) -> String {
        match self.hosts {
            // `p5-node-0042`, as the UI's fleet tests name their synthetic hosts.
            Some(_) => format!("p5-node-{:04}", rank / self.ranks_per_host),
            None => "bench".to_string(),
        }
    }

    pub fn host_count(&self) -> usize {
        self.hosts.unwrap_or(1)
    }

    /// What the run's dashboard, recording and JSON printer are told first: a `write` run over EFA.
    pub fn run_start(&self) -> RunStart {
        let hosts: Vec<String> = (0..self.ranks).map(|rank| self.host_of(rank)).collect();
        let nics: Vec<Vec<String>> = vec![(0..self.channels).map(|c| format!("rdmap{}s0-rdm", 79 + c)).collect(); self.ranks];
        let placements: Vec<RankPlacement> = (0..self.ranks)
            .map(|rank| RankPlacement {
                rank,
                host: hosts[rank].clone(),
                gpu: Some(rank % self.ranks_per_host.max(1)),
                nics: nics[rank].clone(),
                ..RankPlacement::default()
            })
            .collect();
        let configs = vec![Column::write(Layout::Single, Memory::Host)];
        let sizes = vec![8 << 20];
        let metadata = RunMetadata {
            efatop_version: env!("CARGO_PKG_VERSION").into(),
            experiment: Experiment::Write,
            provider: "efa".into(),
            provider_stack: "efa (synthetic: bench_collector)".into(),
            ranks: self.ranks,
            hosts: hosts.clone(),
            channels: self.channels,
            distinct_nics: self.channels,
            link_gbps: Some(LINK_GBPS),
            link_source: LinkSource::Other("bench".into()),
            memory: "cuda".into(),
            placements: placements.clone(),
            hang_timeout_s: 60,
            ..RunMetadata::default()
        };
        RunStart {
            info: RunInfo {
                experiment: Experiment::Write,
                provider_stack: metadata.provider_stack.clone(),
                ranks: self.ranks,
                hosts,
                channels: self.channels,
                link_gbps: Some(LINK_GBPS),
                memory: "cuda".into(),
                configs: configs.clone(),
                sizes,
                placements,
            },
            nics,
            results: RunResults { metadata, configs, ..RunResults::default() },
            pairs: false,
            serving: None,
            interval_ms: u64::from(1000 / self.hz.max(1)),
        }
    }
}

/// What `--slow` means in a fleet of `shape`.
pub trait SlowIn {
    /// The rank it slows.
    fn global_rank(&self, shape: &Shape) -> usize;
    fn describe(&self, shape: &Shape) -> String;
}

impl SlowIn for Slow {
    fn global_rank(&self, shape: &Shape) -> usize {
        self.host * shape.ranks_per_host + self.rank
    }

    fn describe(&self, shape: &Shape) -> String {
        format!(
            "{} rank {} (rank {} of {}) channel {} at {:.0}% from {:.1} s",
            shape.host_of(self.global_rank(shape)),
            self.rank,
            self.global_rank(shape),
            shape.ranks,
            self.channel,
            self.fraction * 100.0,
            self.at.as_secs_f64()
        )
    }
}

/// A busy rank's sample: every channel moved data near 95 Gbps (a few Gbps of jitter by rank and
/// channel), a few latency buckets filled; `slow` scales one channel.
pub fn synthetic_sample(rank: usize, channels: usize, hz: u32, slow: Option<(usize, f64)>) -> RankSample {
    let latency = IntervalHistogram { buckets: vec![(200, 40), (210, 9), (250, 1)].into() };
    let interval_ns = 1_000_000_000 / u64::from(hz.max(1));
    RankSample {
        rank: rank as u32,
        seq: 0,
        interval_ns,
        drops: 0,
        channels: (0..channels)
            .map(|channel| {
                let jitter = ((rank * 7 + channel * 13) % 41) as f64 / 10.0;
                let scale = slow.filter(|&(slowed, _)| slowed == channel).map_or(1.0, |(_, fraction)| fraction);
                let gbps = (93.0 + jitter) * scale;
                let bytes = (gbps * 1e9 / 8.0 * interval_ns as f64 / 1e9) as u64;
                ChannelSample { channel: channel as u16, bytes, ops: (bytes >> 23).max(1), in_flight: 4, latency: latency.clone() }
            })
            .collect(),
        peers: vec![PeerSample { peer: 0, bytes: 1_250_000_000, ops: 50, latency }],
        ..RankSample::default()
    }
}

/// A sender's connection and the frames of the ranks it carries, by rank.
type Link = (SealedWriter<TcpStream>, Vec<(usize, Vec<u8>)>);

/// What the senders share with the bench.
pub struct Load {
    pub offered: Arc<AtomicU64>,
    pub stop: Arc<AtomicBool>,
    pub senders: Vec<std::thread::JoinHandle<std::io::Result<()>>>,
    /// Connections opened: one a host (its relay's) or one a rank; ranks share more where the process may
    /// not open that many.
    pub connections: usize,
}

/// Opens the connections and starts the senders (`threads` of them, on `cpus`); returns once every
/// connection is up, so that a burst of connects is not part of the load measured. `started` is set by
/// the caller when the load begins (the `--slow` clock).
pub fn start(shape: &Shape, address: SocketAddr, secret: &efatop_auth::Secret, threads: usize, cpus: &[usize], slow: Option<Slow>, started: &Arc<std::sync::OnceLock<Instant>>) -> Load {
    let offered = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let interval = Duration::from_secs_f64(1.0 / f64::from(shape.hz));
    // A connection carries `per` consecutive ranks: a host's, as its relay forwards them, or one rank, as a
    // rank's own sampler sends; more where the process may not open that many (two file descriptors per
    // connection: both ends live in this process).
    let wanted = if shape.relay && shape.hosts.is_some() { shape.ranks_per_host.max(1) } else { 1 };
    let most = (crate::bench_common::fd_budget() / 2).max(1);
    let per = wanted.max(shape.ranks.div_ceil(most));
    let connections = shape.ranks.div_ceil(per).max(1);
    let threads = threads.clamp(1, connections);
    let connected = Arc::new(Barrier::new(threads + 1));
    let slow_rank = slow.map(|slow| (slow.global_rank(shape), slow));
    let mut senders = Vec::new();
    for thread in 0..threads {
        let my_connections: Vec<usize> = (thread..connections).step_by(threads).collect();
        let (offered, stop, connected, cpus, started, secret) = (offered.clone(), stop.clone(), connected.clone(), cpus.to_vec(), started.clone(), secret.clone());
        let (ranks, channels, hz, every) = (shape.ranks, shape.channels, shape.hz, u64::from(shape.relay_every.max(1)));
        senders.push(std::thread::spawn(move || -> std::io::Result<()> {
            efatop_runtime::affinity::pin_thread(None, cpus.iter().copied());
            // Per connection: its stream and the frames of the ranks it carries (rank r on r % connections).
            let mut links: Vec<Link> = Vec::with_capacity(my_connections.len());
            let connecting = (|| {
                for &connection in &my_connections {
                    // Each connection proves the run's secret, as a rank's sampler does.
                    // What it sends is sealed, as a rank's sampler's is.
                    let (stream, sealer) = efatop_runtime::collector::dial(address, &secret)?;
                    stream.set_nonblocking(false)?;
                    let stream = SealedWriter::new(stream, sealer, "rank 0's collector");
                    let frames = (connection * per..((connection + 1) * per).min(ranks))
                        .map(|rank| {
                            let mut frame = Vec::new();
                            wire::encode(&synthetic_sample(rank, channels, hz, None), &mut frame);
                            (rank, frame)
                        })
                        .collect();
                    links.push((stream, frames));
                }
                Ok::<(), std::io::Error>(())
            })();
            // Reach the barrier even when connecting failed, so the bench reports instead of hanging.
            connected.wait();
            connecting?;
            let began = *started.get_or_init(Instant::now);
            let mut slowed = false;
            let mut next = Instant::now();
            let mut seq = 0u64;
            // What each connection has gathered and not yet written.
            let mut batches: Vec<Vec<u8>> = vec![Vec::new(); links.len()];
            while !stop.load(Ordering::Relaxed) {
                if let Some((rank, slow)) = slow_rank.filter(|(_, slow)| !slowed && began.elapsed() >= slow.at) {
                    slowed = true;
                    for (_, frames) in &mut links {
                        for (at, frame) in frames.iter_mut().filter(|(at, _)| *at == rank) {
                            frame.clear();
                            wire::encode(&synthetic_sample(*at, channels, hz, Some((slow.channel, slow.fraction))), frame);
                        }
                    }
                }
                for ((stream, frames), batch) in links.iter_mut().zip(&mut batches) {
                    for (_, frame) in frames.iter_mut() {
                        // seq sits after length, version, kind and rank.
                        frame[10..18].copy_from_slice(&seq.to_le_bytes());
                        batch.extend_from_slice(frame);
                    }
                    if (seq + 1) % every == 0 {
                        stream.write_all(batch)?;
                        batch.clear();
                    }
                    offered.fetch_add(frames.len() as u64, Ordering::Relaxed);
                }
                seq += 1;
                next += interval;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            Ok(())
        }));
    }
    connected.wait();
    Load { offered, stop, senders, connections }
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_nic_is_one_channel_of_one_rank_of_one_host() {
        let shape = Shape { hosts: Some(1024), relay: true, relay_every: 1, ranks_per_host: 8, ranks: 8192, channels: 4, hz: 10 };
        let slow = Slow { host: 700, rank: 3, channel: 2, at: Duration::from_secs(3), fraction: 0.6 };
        assert_eq!(slow.global_rank(&shape), 5603);
        assert_eq!(slow.describe(&shape), "p5-node-0700 rank 3 (rank 5603 of 8192) channel 2 at 60% from 3.0 s");
        let gbps = |sample: &RankSample, channel: usize| sample.channels[channel].rates(sample.interval_ns).gbps;
        let (slowed, healthy) = (synthetic_sample(5603, 4, 10, Some((2, 0.6))), synthetic_sample(5603, 4, 10, None));
        assert!((gbps(&slowed, 2) / gbps(&healthy, 2) - 0.6).abs() < 1e-6);
        assert!((gbps(&slowed, 1) - gbps(&healthy, 1)).abs() < 1e-9);
        assert!((93.0..97.1).contains(&gbps(&healthy, 0)));
    }
}
