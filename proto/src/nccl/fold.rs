//! `efatop watch`'s fold: the messages of a job's plugins in, [`WatchLine`]s out. No I/O and no clock of
//! its own (the caller passes `now`), so a recording, a live watch and the tests fold alike.
//!
//! - Ranks: each plugin's [`Origin`] with each communicator it joined.
//! - Figures per communicator, collective and size: the ranks' cumulative rows, their mean times
//!   averaged over the ranks that timed them (as nccl-tests averages its ranks), then algbw and busbw.
//! - The NIC join, per host over a sliding window: the bytes NCCL's proxy moved with its peers (the network
//!   transport's, the only one that touches a NIC) against the bytes the host's EFA devices carried.
//!   [`NicVerdict::Fallback`] when NCCL moved at least `fallback_min_bytes` and the NICs carried less than a
//!   tenth of it; [`NicVerdict::BehindRail`] when a NIC carried less than [`OFF_SHARE`] of the host's median
//!   NIC (the rail rule's share).
//! - The hang locator, per communicator and function: ranks behind the furthest one's finished calls for
//!   `hang_after` are named (not started, or not finished); where every rank waits in the same call, a
//!   rank whose plugin went silent (stopped, or gone without its `bye`) is named.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use super::{algbw_gbps, comm_hex, CollRow, CommInfo, Func, HangWhy, NicVerdict, NicWindow, Origin, PeerRow, PluginMessage, Progress, WatchLine};
use crate::telemetry::rails::{median, OFF_SHARE};

/// What the fold judges by.
#[derive(Clone, Debug)]
pub struct Config {
    /// How long a rank may stay behind its peers (or silent while they wait) before it is named.
    pub hang_after: Duration,
    /// The NIC join's window.
    pub window: Duration,
    /// Below this many bytes on NCCL's network path in a window, a host is [`NicVerdict::Quiet`].
    pub fallback_min_bytes: u64,
    /// Plugins held at once (the job's processes); more are refused.
    pub max_plugins: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self { hang_after: Duration::from_secs(10), window: Duration::from_secs(5), fallback_min_bytes: 16 << 20, max_plugins: 65_536 }
    }
}

/// Ranks newly named in one tick at most (a rack gone slow at once is named over a few ticks, each line
/// listing the call's peers: at 32,768 ranks a line lists up to 32,767).
const NAMED_PER_TICK: usize = 64;

type RowKey = (Func, u64, String, String, String);

#[derive(Default)]
struct Plugin {
    origin: Option<Origin>,
    ranks: Vec<(u64, u32)>,
    closed: bool,
    dropped: u64,
    unsent: u64,
}

struct RankState {
    conn: u64,
    info: CommInfo,
    colls: BTreeMap<RowKey, CollRow>,
    peers: BTreeMap<u32, PeerRow>,
    progress: BTreeMap<Func, Progress>,
    heard: Duration,
    bye: bool,
    dirty_colls: BTreeSet<RowKey>,
    dirty_peers: BTreeSet<u32>,
}

#[derive(Default)]
struct HostState {
    nics: BTreeMap<String, u64>,
    fresh: bool,
    samples: VecDeque<(Duration, u64, BTreeMap<String, u64>)>,
}

/// The fold.
pub struct Watch {
    config: Config,
    plugins: HashMap<u64, Plugin>,
    ranks: BTreeMap<(u64, u32), RankState>,
    hosts: BTreeMap<String, HostState>,
    /// What NCCL's ranks on each host have sent and received so far (their peer rows' sum).
    nccl_moved: HashMap<String, u64>,
    /// When each (communicator, function, call) was first seen stuck, and the ranks named for it.
    stuck: BTreeMap<(u64, Func, u64), (Duration, BTreeSet<u32>)>,
    refused: u64,
    health: (u32, u64, u64, u64),
    pending: Vec<WatchLine>,
}

impl Watch {
    pub fn new(config: Config) -> Self {
        Self { config, plugins: HashMap::new(), ranks: BTreeMap::new(), hosts: BTreeMap::new(), nccl_moved: HashMap::new(), stuck: BTreeMap::new(), refused: 0, health: (0, 0, 0, 0), pending: Vec::new() }
    }

    /// Whether one more plugin may connect.
    pub fn has_room(&self) -> bool {
        self.plugins.values().filter(|p| !p.closed).count() < self.config.max_plugins
    }

    /// A connection that did not prove the token, or came when there was no room.
    pub fn refused(&mut self) {
        self.refused += 1;
    }

    /// One message from connection `conn`.
    pub fn ingest(&mut self, conn: u64, message: PluginMessage, now: Duration) {
        let plugin = self.plugins.entry(conn).or_default();
        match message {
            PluginMessage::Hello { origin } => plugin.origin = Some(origin),
            PluginMessage::Comm { info } => {
                let key = (info.comm, info.rank);
                if !plugin.ranks.contains(&key) {
                    plugin.ranks.push(key);
                }
                let origin = plugin.origin.clone().unwrap_or_else(|| unknown_origin(conn));
                self.pending.push(WatchLine::Rank {
                    host: origin.host,
                    pid: origin.pid,
                    gpu: origin.gpu,
                    comm: comm_hex(info.comm),
                    comm_name: info.name.clone(),
                    rank: info.rank,
                    nranks: info.nranks,
                    nnodes: info.nnodes,
                    nccl_version: origin.nccl_version,
                    abi: origin.abi,
                });
                let state = self.ranks.entry(key).or_insert_with(|| RankState {
                    conn,
                    info: info.clone(),
                    colls: BTreeMap::new(),
                    peers: BTreeMap::new(),
                    progress: BTreeMap::new(),
                    heard: now,
                    bye: false,
                    dirty_colls: BTreeSet::new(),
                    dirty_peers: BTreeSet::new(),
                });
                state.conn = conn;
                state.info = info;
                state.heard = now;
                state.bye = false;
            }
            PluginMessage::Interval { comm, rank, colls, peers, progress, .. } => {
                let Some(state) = self.ranks.get_mut(&(comm, rank)).filter(|s| s.conn == conn) else { return };
                state.heard = now;
                // The host's running total of what NCCL's network path moved (the NIC join's side), kept as
                // rows come: summing every rank at each NIC reading costs the world's ranks per reading.
                let (mut added, mut taken) = (0u64, 0u64);
                for row in &peers {
                    added = added.saturating_add(row.sent.saturating_add(row.received));
                    taken = taken.saturating_add(state.peers.get(&row.peer).map_or(0, |old| old.sent.saturating_add(old.received)));
                }
                if added != taken {
                    if let Some(origin) = &plugin.origin {
                        let moved = self.nccl_moved.entry(origin.host.clone()).or_default();
                        *moved = moved.saturating_add(added).saturating_sub(taken);
                    }
                }
                for row in colls {
                    let key = (row.func, row.size, row.datatype.clone(), row.algo.clone(), row.proto.clone());
                    state.dirty_colls.insert(key.clone());
                    state.colls.insert(key, row);
                }
                for row in peers {
                    state.dirty_peers.insert(row.peer);
                    state.peers.insert(row.peer, row);
                }
                for row in progress {
                    state.progress.insert(row.func, row);
                }
                // A rank reports every function it ever started; one missing from this interval has no
                // open call.
            }
            PluginMessage::Nics { nics, .. } => {
                let host = plugin.origin.as_ref().map_or_else(|| format!("conn-{conn}"), |o| o.host.clone());
                let keys = plugin.ranks.clone();
                for key in &keys {
                    if let Some(rank) = self.ranks.get_mut(key) {
                        rank.heard = now;
                    }
                }
                // The NICs' reading is paired with what NCCL had moved on this host when it was taken (the
                // plugin sends its intervals before its reading), not at the next tick: a reading taken
                // before the job's traffic is the window's baseline however soon the traffic follows.
                let nccl = self.nccl_of(&host);
                let state = self.hosts.entry(host).or_default();
                state.nics = nics.into_iter().map(|n| (n.name, n.tx_bytes.saturating_add(n.rx_bytes))).collect();
                state.fresh = true;
                state.samples.push_back((now, nccl, state.nics.clone()));
            }
            PluginMessage::Health { dropped, unsent, .. } => {
                plugin.dropped = dropped;
                plugin.unsent = unsent;
                for key in &plugin.ranks {
                    if let Some(rank) = self.ranks.get_mut(key) {
                        rank.heard = now;
                    }
                }
            }
            PluginMessage::Bye { comm, rank } => {
                if let Some(state) = self.ranks.get_mut(&(comm, rank)).filter(|s| s.conn == conn) {
                    state.bye = true;
                    state.heard = now;
                }
            }
        }
    }

    /// Connection `conn` closed.
    pub fn closed(&mut self, conn: u64) {
        let Some(plugin) = self.plugins.get_mut(&conn) else { return };
        plugin.closed = true;
        let bye = plugin.ranks.iter().all(|key| self.ranks.get(key).is_none_or(|r| r.bye || r.conn != conn));
        let origin = plugin.origin.clone().unwrap_or_else(|| unknown_origin(conn));
        self.pending.push(WatchLine::Gone { host: origin.host, pid: origin.pid, bye });
    }

    /// The lines due at `now` (call it about once a second).
    pub fn tick(&mut self, now: Duration) -> Vec<WatchLine> {
        let mut lines = std::mem::take(&mut self.pending);
        self.figures(&mut lines);
        self.join(now, &mut lines);
        self.hangs(now, &mut lines);
        let plugins = self.plugins.values().filter(|p| !p.closed).count() as u32;
        let dropped = self.plugins.values().map(|p| p.dropped).sum();
        let unsent = self.plugins.values().map(|p| p.unsent).sum();
        let health = (plugins, self.refused, dropped, unsent);
        if health != self.health {
            self.health = health;
            lines.push(WatchLine::Health { plugins, refused: self.refused, dropped, unsent });
        }
        lines
    }

    fn figures(&mut self, lines: &mut Vec<WatchLine>) {
        let mut dirty: BTreeSet<(u64, RowKey)> = BTreeSet::new();
        for ((comm, _), rank) in &mut self.ranks {
            for key in std::mem::take(&mut rank.dirty_colls) {
                dirty.insert((*comm, key));
            }
        }
        for (comm, key) in dirty {
            let rows: Vec<(&CommInfo, &CollRow)> =
                self.ranks.range((comm, 0)..=(comm, u32::MAX)).filter_map(|(_, r)| r.colls.get(&key).map(|row| (&r.info, row))).collect();
            let Some((info, first)) = rows.first() else { continue };
            let nranks = info.nranks;
            let means: Vec<f64> = rows.iter().filter_map(|(_, row)| row.mean_seconds()).collect();
            let mean = (!means.is_empty()).then(|| means.iter().sum::<f64>() / means.len() as f64);
            let algbw = mean.map(|t| algbw_gbps(first.size, t));
            lines.push(WatchLine::Coll {
                comm: comm_hex(comm),
                func: first.func,
                size: first.size,
                datatype: first.datatype.clone(),
                algo: first.algo.clone(),
                proto: first.proto.clone(),
                ranks: rows.len() as u32,
                nranks,
                ops: rows.iter().map(|(_, row)| row.ops).max().unwrap_or(0),
                timing: first.timing,
                time_us: mean.map(|t| t * 1e6),
                algbw_gbps: algbw,
                busbw_gbps: algbw.map(|a| a * first.func.bus_factor(nranks)),
            });
        }
        let hosts: HashMap<u64, String> = self.plugins.iter().map(|(c, p)| (*c, p.origin.as_ref().map_or_else(|| format!("conn-{c}"), |o| o.host.clone()))).collect();
        for ((comm, rank), state) in &mut self.ranks {
            for peer in std::mem::take(&mut state.dirty_peers) {
                let Some(row) = state.peers.get(&peer) else { continue };
                lines.push(WatchLine::Peer {
                    comm: comm_hex(*comm),
                    host: hosts.get(&state.conn).cloned().unwrap_or_default(),
                    rank: *rank,
                    peer,
                    sent: row.sent,
                    received: row.received,
                    steps: row.steps,
                });
            }
        }
    }

    /// The bytes NCCL's ranks on `host` have sent and received so far (proxy ops and steps).
    fn nccl_of(&self, host: &str) -> u64 {
        self.nccl_moved.get(host).copied().unwrap_or(0)
    }

    fn join(&mut self, now: Duration, lines: &mut Vec<WatchLine>) {
        let window = self.config.window;
        for (host, state) in &mut self.hosts {
            if !std::mem::take(&mut state.fresh) {
                continue;
            }
            while state.samples.len() > 2 && state.samples.get(1).is_some_and(|s| now.saturating_sub(s.0) >= window) {
                state.samples.pop_front();
            }
            let (Some(first), Some(last)) = (state.samples.front(), state.samples.back()) else { continue };
            if state.samples.len() < 2 {
                continue;
            }
            let nccl_bytes = last.1.saturating_sub(first.1);
            let mut nics: Vec<NicWindow> = last
                .2
                .iter()
                .map(|(name, bytes)| NicWindow { name: name.clone(), bytes: bytes.saturating_sub(first.2.get(name).copied().unwrap_or(*bytes)), behind: false })
                .collect();
            let nic_bytes: u64 = nics.iter().map(|n| n.bytes).sum();
            let mut loads: Vec<f64> = nics.iter().map(|n| n.bytes as f64).collect();
            let rail = median(&mut loads).unwrap_or(0.0);
            let mut verdict = if nccl_bytes < self.config.fallback_min_bytes {
                NicVerdict::Quiet
            } else if nic_bytes < nccl_bytes / 10 {
                NicVerdict::Fallback
            } else {
                NicVerdict::Ok
            };
            if rail > 0.0 && verdict != NicVerdict::Fallback {
                for nic in &mut nics {
                    nic.behind = (nic.bytes as f64) < OFF_SHARE * rail;
                }
                if nics.iter().any(|n| n.behind) && verdict == NicVerdict::Ok {
                    verdict = NicVerdict::BehindRail;
                }
            }
            lines.push(WatchLine::Nics { host: host.clone(), window_s: last.0.saturating_sub(first.0).as_secs_f64(), nccl_bytes, nic_bytes, verdict, nics });
        }
    }

    fn silent(&self, state: &RankState, now: Duration) -> bool {
        let closed = self.plugins.get(&state.conn).is_none_or(|p| p.closed);
        !state.bye && (closed || now.saturating_sub(state.heard) >= self.config.hang_after)
    }

    /// Whether `rank` behind in call `key` is named at `now` (stuck long enough, and not named yet).
    fn due(&self, key: (u64, Func, u64), rank: u32, now: Duration) -> bool {
        self.stuck.get(&key).is_some_and(|(since, named)| now.saturating_sub(*since) >= self.config.hang_after && !named.contains(&rank))
    }

    fn hangs(&mut self, now: Duration, lines: &mut Vec<WatchLine>) {
        let comms: BTreeSet<u64> = self.ranks.keys().map(|(c, _)| *c).collect();
        let mut still: BTreeSet<(u64, Func, u64)> = BTreeSet::new();
        let mut found: Vec<(u64, Func, u64, u32, HangWhy, Vec<u32>, Vec<u32>)> = Vec::new();
        let mut listed: HashMap<(u64, Func, u64), Vec<u32>> = HashMap::new();
        let mut named_now = 0;
        for comm in comms {
            let members: Vec<(&u32, &RankState)> =
                self.ranks.range((comm, 0)..=(comm, u32::MAX)).map(|((_, r), s)| (r, s)).filter(|(_, s)| !s.bye).collect();
            if members.len() < 2 {
                continue;
            }
            let funcs: BTreeSet<Func> = members.iter().flat_map(|(_, s)| s.progress.keys().copied()).collect();
            for func in funcs {
                let at = |s: &RankState| s.progress.get(&func).map_or((0, 0), |p| (p.started, p.finished));
                let top = members.iter().map(|(_, s)| at(s).1).max().unwrap_or(0);
                let bottom = members.iter().map(|(_, s)| at(s).1).min().unwrap_or(0);
                if top > bottom {
                    for (rank, state) in &members {
                        let (started, finished) = at(state);
                        if finished >= top {
                            continue;
                        }
                        let seq = finished;
                        let why = if self.silent(state, now) {
                            HangWhy::Silent
                        } else if started <= seq {
                            HangWhy::NotStarted
                        } else {
                            HangWhy::NotFinished
                        };
                        still.insert((comm, func, seq));
                        // Listed only for a rank about to be named, once per call, and for at most
                        // NAMED_PER_TICK ranks a tick (the rest on the next ticks): at a fleet's scale most
                        // ranks behind are a report or two behind, and listing the world for each would
                        // cost its square.
                        let done = if self.due((comm, func, seq), **rank, now) {
                            if named_now >= NAMED_PER_TICK {
                                continue;
                            }
                            named_now += 1;
                            listed.entry((comm, func, seq)).or_insert_with(|| members.iter().filter(|(_, s)| at(s).1 > seq).map(|(r, _)| **r).collect()).clone()
                        } else {
                            Vec::new()
                        };
                        found.push((comm, func, seq, **rank, why, done, Vec::new()));
                    }
                } else {
                    let waiting: Vec<u32> = members.iter().filter(|(_, s)| at(s).0 > bottom).map(|(r, _)| **r).collect();
                    if waiting.is_empty() {
                        continue;
                    }
                    for (rank, state) in &members {
                        let (started, _) = at(state);
                        let why = if self.silent(state, now) {
                            HangWhy::Silent
                        } else if started <= bottom {
                            HangWhy::NotStarted
                        } else {
                            continue;
                        };
                        still.insert((comm, func, bottom));
                        let peers = if self.due((comm, func, bottom), **rank, now) {
                            if named_now >= NAMED_PER_TICK {
                                continue;
                            }
                            named_now += 1;
                            waiting.iter().copied().filter(|r| r != *rank).collect()
                        } else {
                            Vec::new()
                        };
                        found.push((comm, func, bottom, **rank, why, Vec::new(), peers));
                    }
                }
            }
        }
        for (comm, func, seq, rank, why, done, waiting) in found {
            let hang_after = self.config.hang_after;
            let entry = self.stuck.entry((comm, func, seq)).or_insert_with(|| (now, BTreeSet::new()));
            let waited = now.saturating_sub(entry.0);
            if waited < hang_after || entry.1.contains(&rank) {
                continue;
            }
            entry.1.insert(rank);
            let state = &self.ranks[&(comm, rank)];
            let origin = self.plugins.get(&state.conn).and_then(|p| p.origin.clone()).unwrap_or_else(|| unknown_origin(state.conn));
            lines.push(WatchLine::Hang { comm: comm_hex(comm), func, seq, rank, host: origin.host, gpu: origin.gpu, why, waiting_s: waited.as_secs_f64(), peers_done: done, peers_waiting: waiting });
        }
        let over: Vec<(u64, Func, u64)> = self.stuck.keys().filter(|k| !still.contains(k)).copied().collect();
        for key in over {
            if let Some((_, named)) = self.stuck.remove(&key) {
                if !named.is_empty() {
                    lines.push(WatchLine::HangOver { comm: comm_hex(key.0), func: key.1, seq: key.2 });
                }
            }
        }
    }
}

fn unknown_origin(conn: u64) -> Origin {
    Origin { host: format!("conn-{conn}"), pid: 0, gpu: None, nccl_version: None, abi: 0, plugin_version: String::new() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::{NicCount, Timing};

    fn hello(host: &str, pid: u32) -> PluginMessage {
        PluginMessage::Hello { origin: Origin { host: host.into(), pid, gpu: Some(pid.to_string()), nccl_version: Some("2.28.3".into()), abi: 6, plugin_version: "t".into() } }
    }

    fn comm(rank: u32) -> PluginMessage {
        PluginMessage::Comm { info: CommInfo { comm: 7, name: None, rank, nranks: 2, nnodes: 2 } }
    }

    fn interval(rank: u32, finished: u64, started: u64, sent: u64) -> PluginMessage {
        PluginMessage::Interval {
            t_ms: 0,
            comm: 7,
            rank,
            colls: vec![CollRow { func: Func::AllReduce, size: 1 << 30, datatype: "ncclFloat32".into(), algo: "RING".into(), proto: "SIMPLE".into(), ops: finished, timing: Timing::Gpu, timed: finished, time_ns: finished * 10_000_000, min_ns: 1, max_ns: 1 }],
            peers: vec![PeerRow { peer: 1 - rank, sent, received: sent, steps: 1 }],
            channels: vec![],
            progress: vec![Progress { func: Func::AllReduce, started, finished, open_seq: (started > finished).then_some(finished), open_ms: 0 }],
        }
    }

    #[test]
    fn busbw_follows_nccl_tests_and_the_laggard_is_named() {
        let mut watch = Watch::new(Config { hang_after: Duration::from_secs(2), ..Config::default() });
        for (conn, host) in [(1, "a"), (2, "b")] {
            watch.ingest(conn, hello(host, conn as u32), Duration::ZERO);
            watch.ingest(conn, comm(conn as u32 - 1), Duration::ZERO);
        }
        watch.ingest(1, interval(0, 5, 5, 0), Duration::from_secs(1));
        watch.ingest(2, interval(1, 4, 5, 0), Duration::from_secs(1));
        let lines = watch.tick(Duration::from_secs(1));
        let coll = lines.iter().find_map(|l| match l {
            WatchLine::Coll { busbw_gbps, algbw_gbps, .. } => Some((algbw_gbps.expect("timed"), busbw_gbps.expect("timed"))),
            _ => None,
        });
        let (algbw, busbw) = coll.expect("a coll line");
        assert!((algbw - (1u64 << 30) as f64 / 0.01 / 1e9).abs() < 1e-6, "{algbw}");
        assert!((busbw - algbw).abs() < 1e-9, "two ranks: 2(n-1)/n = 1");
        assert!(!lines.iter().any(|l| matches!(l, WatchLine::Hang { .. })), "not yet: {lines:?}");
        watch.ingest(1, interval(0, 5, 5, 0), Duration::from_secs(3));
        watch.ingest(2, interval(1, 4, 5, 0), Duration::from_secs(3));
        let lines = watch.tick(Duration::from_secs(3));
        let hang = lines.iter().find(|l| matches!(l, WatchLine::Hang { .. })).expect("named");
        assert!(matches!(hang, WatchLine::Hang { rank: 1, seq: 4, why: HangWhy::NotFinished, host, .. } if host == "b"), "{hang:?}");
        watch.ingest(2, interval(1, 5, 5, 0), Duration::from_secs(4));
        let lines = watch.tick(Duration::from_secs(4));
        assert!(lines.iter().any(|l| matches!(l, WatchLine::HangOver { seq: 4, .. })), "{lines:?}");
    }

    #[test]
    fn flat_nics_under_nccl_traffic_are_a_fallback() {
        let mut watch = Watch::new(Config::default());
        watch.ingest(1, hello("a", 1), Duration::ZERO);
        watch.ingest(1, comm(0), Duration::ZERO);
        let nics = |n: u64| PluginMessage::Nics { t_ms: 0, nics: vec![NicCount { name: "rdmap79s0".into(), tx_bytes: n, rx_bytes: n }] };
        watch.ingest(1, interval(0, 1, 1, 0), Duration::ZERO);
        watch.ingest(1, nics(100), Duration::ZERO);
        let _ = watch.tick(Duration::ZERO);
        watch.ingest(1, interval(0, 2, 2, 1 << 30), Duration::from_secs(1));
        watch.ingest(1, nics(100), Duration::from_secs(1));
        let lines = watch.tick(Duration::from_secs(1));
        assert!(lines.iter().any(|l| matches!(l, WatchLine::Nics { verdict: NicVerdict::Fallback, nccl_bytes, nic_bytes: 0, .. } if *nccl_bytes == 2 << 30)), "{lines:?}");
    }
}
