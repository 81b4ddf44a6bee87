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
//!   rank whose plugin went silent (stopped, or gone without its `bye`) is named, with its GPU's rails
//!   whose error counters grew.
//! - The straggler finder, per communicator: the ranks' samples of the same call (communicator, function,
//!   sequence number) are matched as they come; once every live rank of the communicator sent its sample
//!   of a call, the rank the others waited for is the one whose initial sync was shortest (v7's kernel
//!   phases: the others' sync was their wait for it), else the last to start the call's kernel (the GPU's
//!   timer), else the last to start it on the host. Over each window, a rank the others waited for at least
//!   [`Config::straggler_min`] in at least half the calls matched is named ([`WatchLine::Straggler`]). State:
//!   per communicator and function at most [`MAX_PENDING_CALLS`] calls being matched (each a few numbers,
//!   whatever the ranks), per communicator a count per rank that lagged: O(ranks), not O(calls).
//! - Rails, per host and GPU over the window: NCCL's bytes by the GPU's ranks against each of its NICs
//!   (those the plugin found nearest its GPU on PCIe) and their error counters: a rail that carried less
//!   than the rail rule's share of the GPU's median rail, or whose errors grew, is named
//!   ([`WatchLine::Rails`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use efatop_proto::nccl::{
    algbw_gbps, comm_hex, CallSample, CollRow, CommInfo, Func, HangWhy, LagSource, NicCount, NicVerdict, NicWindow, Origin, PeerRow, PluginMessage, Progress, RailNic,
    RailVerdict, WatchLine,
};
use efatop_sweep::rails::{median, OFF_SHARE};

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
    /// The least a rank's peers must wait for it, on average in the calls it was last, to be named a
    /// straggler.
    pub straggler_min: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self { hang_after: Duration::from_secs(10), window: Duration::from_secs(5), fallback_min_bytes: 16 << 20, max_plugins: 65_536, straggler_min: Duration::from_millis(1) }
    }
}

/// How much earlier than the watcher heard of it a wait may have begun: a plugin reports once an interval
/// (1 s by default), so the age of a rank's open call in its report is trusted this far back at most.
pub const WAIT_REPORTED_WITHIN: Duration = Duration::from_secs(1);

/// Ranks newly named in one tick at most (a rack gone slow at once is named over a few ticks, each line
/// listing the call's peers: at 32,768 ranks a line lists up to 32,767).
const NAMED_PER_TICK: usize = 64;

/// Calls being matched at once per communicator and function; the oldest goes first (its samples never
/// all came: a rank that samples more sparsely, or a plugin that left).
pub const MAX_PENDING_CALLS: usize = 512;

type RowKey = (Func, u64, String, String, String, u64);

/// A matched call: the rank the others waited for, how long (ns), how it is known, with phases its wait and
/// the others' mean wait (ns).
type Judged = (u32, u64, LagSource, Option<(u64, u64)>);

/// One call's samples so far: the two latest starts, the two shortest initial syncs, how many of each kind.
struct CallMatch {
    samples: u32,
    gpu: u32,
    phased: u32,
    latest: (u64, u32),
    second_latest: u64,
    shortest_sync: (u64, u32),
    second_sync: u64,
    sync_sum: u64,
}

impl CallMatch {
    fn new() -> Self {
        Self { samples: 0, gpu: 0, phased: 0, latest: (0, 0), second_latest: 0, shortest_sync: (u64::MAX, 0), second_sync: u64::MAX, sync_sum: 0 }
    }

    fn add(&mut self, rank: u32, sample: &CallSample) {
        self.samples += 1;
        self.gpu += u32::from(sample.gpu);
        if sample.start_ns >= self.latest.0 {
            self.second_latest = self.latest.0;
            self.latest = (sample.start_ns, rank);
        } else {
            self.second_latest = self.second_latest.max(sample.start_ns);
        }
        if let Some(sync) = sample.initial_sync_ns {
            self.phased += 1;
            self.sync_sum += sync;
            if sync <= self.shortest_sync.0 {
                self.second_sync = self.shortest_sync.0;
                self.shortest_sync = (sync, rank);
            } else {
                self.second_sync = self.second_sync.min(sync);
            }
        }
    }

    /// The rank the others waited for, how long (ns), how it is known, and with phases its wait and the
    /// others' mean wait.
    fn judge(&self) -> Option<Judged> {
        if self.samples < 2 {
            return None;
        }
        if self.phased == self.samples {
            let (its, rank) = self.shortest_sync;
            let others = (self.sync_sum - its) / u64::from(self.samples - 1);
            return Some((rank, self.second_sync.saturating_sub(its), LagSource::KernelPhase, Some((its, others))));
        }
        let source = if self.gpu == self.samples {
            LagSource::GpuStart
        } else if self.gpu == 0 {
            LagSource::HostStart
        } else {
            // Starts on different clocks do not compare.
            return None;
        };
        Some((self.latest.1, self.latest.0.saturating_sub(self.second_latest), source, None))
    }
}

/// A communicator's stragglers over the current window.
#[derive(Default)]
struct Lags {
    since: Duration,
    /// Calls matched in the window, per function.
    judged: BTreeMap<Func, u64>,
    /// Per rank and function: calls it was last by at least `straggler_min`, their lag, its and the
    /// others' initial sync (phased calls), and how they were known.
    ranks: HashMap<(u32, Func), RankLag>,
    named: Option<u32>,
}

#[derive(Default, Clone, Copy)]
struct RankLag {
    last: u64,
    lag_ns: u64,
    phased: u64,
    its_ns: u64,
    others_ns: u64,
    source: Option<LagSource>,
}

/// One reading: when, NCCL's bytes then, the NICs' counters then.
type Reading<T> = (Duration, u64, T);

/// Readings over the sliding window: a host's NICs for the join, a GPU's rails for the rail check, both
/// judged alike at a tick.
struct Readings<T> {
    samples: VecDeque<Reading<T>>,
    /// A reading came since the last tick.
    fresh: bool,
}

impl<T> Default for Readings<T> {
    fn default() -> Self {
        Self { samples: VecDeque::new(), fresh: false }
    }
}

impl<T> Readings<T> {
    fn push(&mut self, now: Duration, nccl: u64, nics: T) {
        self.samples.push_back((now, nccl, nics));
        self.fresh = true;
    }

    /// At a tick: the first and the last reading of the window ending at `now`, where a reading came since
    /// the last tick and the window holds two (readings before the window's first are dropped).
    fn window(&mut self, now: Duration, window: Duration) -> Option<(&Reading<T>, &Reading<T>)> {
        if !std::mem::take(&mut self.fresh) {
            return None;
        }
        while self.samples.len() > 2 && self.samples.get(1).is_some_and(|s| now.saturating_sub(s.0) >= window) {
            self.samples.pop_front();
        }
        if self.samples.len() < 2 {
            return None;
        }
        Some((self.samples.front()?, self.samples.back()?))
    }
}

/// The median of NICs' loads over a window: the rail each is judged against.
fn rail_of(bytes: impl Iterator<Item = u64>) -> f64 {
    let mut loads: Vec<f64> = bytes.map(|b| b as f64).collect();
    median(&mut loads).unwrap_or(0.0)
}

/// A GPU's rails: readings of (NCCL's bytes by its ranks, per rail: bytes and error counters).
#[derive(Default)]
struct GpuRails {
    readings: Readings<BTreeMap<String, NicCount>>,
    verdict: Option<RailVerdict>,
    /// Its rails whose errors grew over the last window.
    erring: Vec<String>,
}

#[derive(Default)]
struct Plugin {
    origin: Option<Origin>,
    ranks: Vec<(u64, u32)>,
    closed: bool,
    dropped: u64,
    unsent: u64,
}

impl Plugin {
    /// The host its hello named; `conn-N` before one came.
    fn host(&self, conn: u64) -> String {
        self.origin.as_ref().map_or_else(|| format!("conn-{conn}"), |o| o.host.clone())
    }

    /// Its ranks heard at `now`: a message of its plugin says it is alive.
    fn heard(&self, ranks: &mut BTreeMap<(u64, u32), RankState>, now: Duration) {
        for key in &self.ranks {
            if let Some(rank) = ranks.get_mut(key) {
                rank.heard = now;
            }
        }
    }
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
    readings: Readings<BTreeMap<String, u64>>,
}

/// The fold.
pub struct Watch {
    config: Config,
    plugins: HashMap<u64, Plugin>,
    ranks: BTreeMap<(u64, u32), RankState>,
    /// Per communicator, its ranks that have not said `bye` (kept as they join and leave: counting them at
    /// each message of call samples costs the communicator's ranks per message, the world's square a
    /// second at a fleet's scale).
    live: HashMap<u64, u32>,
    hosts: BTreeMap<String, HostState>,
    /// What NCCL's ranks on each host have sent and received so far (their peer rows' sum).
    nccl_moved: HashMap<String, u64>,
    /// The same per host and GPU (the rails' join), kept as rows come: summing the ranks of one GPU at each
    /// NIC reading walked the world's ranks per reading, the world's square a second (a 6144-rank job's
    /// NIC readings took the watcher's whole core).
    nccl_moved_gpu: HashMap<(String, String), u64>,
    /// When each (communicator, function, call) was first seen stuck, and the ranks named for it.
    stuck: BTreeMap<(u64, Func, u64), (Duration, BTreeSet<u32>)>,
    /// Calls being matched, per communicator and function (at most [`MAX_PENDING_CALLS`] each).
    matching: HashMap<(u64, Func), BTreeMap<u64, CallMatch>>,
    lags: BTreeMap<u64, Lags>,
    rails: BTreeMap<(String, String), GpuRails>,
    refused: u64,
    health: (u32, u64, u64, u64),
    pending: Vec<WatchLine>,
}

impl Watch {
    pub fn new(config: Config) -> Self {
        Self {
            config,
            plugins: HashMap::new(),
            ranks: BTreeMap::new(),
            live: HashMap::new(),
            hosts: BTreeMap::new(),
            nccl_moved: HashMap::new(),
            nccl_moved_gpu: HashMap::new(),
            stuck: BTreeMap::new(),
            matching: HashMap::new(),
            lags: BTreeMap::new(),
            rails: BTreeMap::new(),
            refused: 0,
            health: (0, 0, 0, 0),
            pending: Vec::new(),
        }
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
                let joined = !self.ranks.contains_key(&key);
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
                if joined || state.bye {
                    *self.live.entry(key.0).or_default() += 1;
                }
                let moved_from = (state.conn != conn).then_some(state.conn);
                state.conn = conn;
                state.info = info;
                state.heard = now;
                state.bye = false;
                // The rank came back on another connection (its plugin reconnected, or its host's relay
                // changed): the one it left is forgotten once closed and no rank's.
                if let Some(old) = moved_from {
                    self.forget_if_done(old);
                }
            }
            PluginMessage::Interval { comm, rank, colls, peers, progress, calls, .. } => {
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
                        if let Some(gpu) = &origin.gpu {
                            let moved = self.nccl_moved_gpu.entry((origin.host.clone(), gpu.clone())).or_default();
                            *moved = moved.saturating_add(added).saturating_sub(taken);
                        }
                    }
                }
                for row in colls {
                    let key = (row.func, row.size, row.datatype.clone(), row.algo.clone(), row.proto.clone(), row.tag);
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
                self.match_calls(comm, rank, &calls, now);
            }
            PluginMessage::Nics { nics, .. } => {
                plugin.heard(&mut self.ranks, now);
                let host = plugin.host(conn);
                let gpu = plugin.origin.as_ref().and_then(|o| o.gpu.clone());
                // The NICs' reading is paired with what NCCL had moved on this host when it was taken (the
                // plugin sends its intervals before its reading), not at the next tick: a reading taken
                // before the job's traffic is the window's baseline however soon the traffic follows.
                let nccl = self.nccl_of(&host);
                self.rails_reading(&host, gpu, nics.iter().cloned(), now);
                let state = self.hosts.entry(host).or_default();
                state.nics = nics.into_iter().map(|n| (n.name, n.tx_bytes.saturating_add(n.rx_bytes))).collect();
                state.readings.push(now, nccl, state.nics.clone());
            }
            PluginMessage::Rails { nics, .. } => {
                // A relayed process's own GPU's NICs: its rails' window; the host's every NIC comes in its
                // relay's own `Nics`.
                plugin.heard(&mut self.ranks, now);
                let host = plugin.host(conn);
                let gpu = plugin.origin.as_ref().and_then(|o| o.gpu.clone());
                self.rails_reading(&host, gpu, nics, now);
            }
            // A relay's wrapping is the server's to take off; in a file it means nothing.
            PluginMessage::Relayed { .. } | PluginMessage::Left { .. } => {}
            PluginMessage::Health { dropped, unsent, .. } => {
                plugin.dropped = dropped;
                plugin.unsent = unsent;
                plugin.heard(&mut self.ranks, now);
            }
            PluginMessage::Bye { comm, rank } => {
                if let Some(state) = self.ranks.get_mut(&(comm, rank)).filter(|s| s.conn == conn) {
                    if !state.bye {
                        if let Some(live) = self.live.get_mut(&comm) {
                            *live = live.saturating_sub(1);
                        }
                    }
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
        self.forget_if_done(conn);
    }

    /// Forgets closed connection `conn` once no rank is its (each said bye on it or moved to another):
    /// reconnections (a watcher restarted, a host's relay that changed) never grow what the fold holds. One
    /// that ranks still name stays, for their host and GPU.
    fn forget_if_done(&mut self, conn: u64) {
        let Some(plugin) = self.plugins.get(&conn) else { return };
        if plugin.closed && plugin.ranks.iter().all(|key| self.ranks.get(key).is_none_or(|r| r.conn != conn)) {
            self.plugins.remove(&conn);
        }
    }

    /// The lines due at `now` (call it about once a second).
    pub fn tick(&mut self, now: Duration) -> Vec<WatchLine> {
        let mut lines = std::mem::take(&mut self.pending);
        self.figures(&mut lines);
        self.join(now, &mut lines);
        self.rails(now, &mut lines);
        self.hangs(now, &mut lines);
        self.stragglers(now, &mut lines);
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
            // The ranks' mean of their mean phase times (v7), µs.
            let phase = |ns: fn(&CollRow) -> u64| {
                let per: Vec<f64> = rows.iter().filter(|(_, r)| r.phased > 0).map(|(_, r)| ns(r) as f64 / r.phased as f64 / 1e3).collect();
                (!per.is_empty()).then(|| per.iter().sum::<f64>() / per.len() as f64)
            };
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
                user_tag: first.tag,
                variant: first.variant.clone(),
                wait_us: phase(|r| r.wait_ns),
                work_us: phase(|r| r.work_ns),
            });
        }
        // Only the ranks whose rows changed are looked up (a map of every plugin's host, made each tick, cost
        // a string per plugin a second at a fleet's scale).
        let plugins = &self.plugins;
        for ((comm, rank), state) in &mut self.ranks {
            if state.dirty_peers.is_empty() {
                continue;
            }
            let host = plugins.get(&state.conn).map(|p| p.host(state.conn)).unwrap_or_default();
            let comm_text = comm_hex(*comm);
            for peer in std::mem::take(&mut state.dirty_peers) {
                let Some(row) = state.peers.get(&peer) else { continue };
                lines.push(WatchLine::Peer {
                    comm: comm_text.clone(),
                    host: host.clone(),
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

    /// A reading of `host`'s GPU `gpu`'s rails (the `nics` marked `rail`), paired with what NCCL's ranks on
    /// that GPU had moved when it was taken; none where the process names no GPU or no rail.
    fn rails_reading(&mut self, host: &str, gpu: Option<String>, nics: impl IntoIterator<Item = NicCount>, now: Duration) {
        let rails: BTreeMap<String, NicCount> = nics.into_iter().filter(|n| n.rail).map(|n| (n.name.clone(), n)).collect();
        if let (Some(gpu), false) = (gpu, rails.is_empty()) {
            let nccl_gpu = self.nccl_of_gpu(host, &gpu);
            self.rails.entry((host.to_string(), gpu)).or_default().readings.push(now, nccl_gpu, rails);
        }
    }

    /// The bytes NCCL's ranks on `host`'s GPU `gpu` have sent and received so far.
    fn nccl_of_gpu(&self, host: &str, gpu: &str) -> u64 {
        self.nccl_moved_gpu.get(&(host.to_string(), gpu.to_string())).copied().unwrap_or(0)
    }

    /// Matches `rank`'s call samples with its peers' on `comm`; a call every live rank sent is judged.
    fn match_calls(&mut self, comm: u64, rank: u32, calls: &[CallSample], now: Duration) {
        if calls.is_empty() {
            return;
        }
        let members = self.live.get(&comm).copied().unwrap_or(0);
        let lags = self.lags.entry(comm).or_insert_with(|| Lags { since: now, ..Lags::default() });
        for sample in calls {
            let pending = self.matching.entry((comm, sample.func)).or_default();
            let entry = pending.entry(sample.seq).or_insert_with(CallMatch::new);
            entry.add(rank, sample);
            if entry.samples < members.max(2) {
                while pending.len() > MAX_PENDING_CALLS {
                    pending.pop_first();
                }
                continue;
            }
            let Some(done) = pending.remove(&sample.seq) else { continue };
            let Some((last, lag, source, waits)) = done.judge() else { continue };
            *lags.judged.entry(sample.func).or_default() += 1;
            if lag < self.config.straggler_min.as_nanos() as u64 {
                continue;
            }
            let r = lags.ranks.entry((last, sample.func)).or_default();
            r.last += 1;
            r.lag_ns += lag;
            r.source = Some(source);
            if let Some((its, others)) = waits {
                r.phased += 1;
                r.its_ns += its;
                r.others_ns += others;
            }
        }
    }

    /// Each window, per communicator: the rank its peers waited for in at least half the calls matched
    /// (three at least) is named; one named before that no longer is, is cleared.
    fn stragglers(&mut self, now: Duration, lines: &mut Vec<WatchLine>) {
        let window = self.config.window;
        let comms: Vec<u64> = self.lags.iter().filter(|(_, l)| now.saturating_sub(l.since) >= window).map(|(c, _)| *c).collect();
        for comm in comms {
            let Some(lags) = self.lags.get_mut(&comm) else { continue };
            let worst = lags
                .ranks
                .iter()
                .filter(|((_, func), r)| r.last * 2 >= lags.judged.get(func).copied().unwrap_or(0) && r.last >= 3)
                .max_by_key(|(k, r)| (r.last, std::cmp::Reverse(k.0)))
                .map(|(k, r)| (*k, *r));
            let judged = std::mem::take(&mut lags.judged);
            lags.ranks.clear();
            lags.since = now;
            let was = lags.named;
            lags.named = worst.map(|((rank, _), _)| rank);
            if let Some(previous) = was.filter(|p| Some(*p) != lags.named) {
                lines.push(WatchLine::StragglerOver { comm: comm_hex(comm), rank: previous });
            }
            let Some(((rank, func), r)) = worst else { continue };
            let origin = self.ranks.get(&(comm, rank)).and_then(|s| self.plugins.get(&s.conn)).and_then(|p| p.origin.clone()).unwrap_or_else(|| unknown_origin(0));
            let us = |ns: u64, n: u64| (n > 0).then(|| ns as f64 / n as f64 / 1e3);
            lines.push(WatchLine::Straggler {
                comm: comm_hex(comm),
                func,
                rank,
                host: origin.host,
                gpu: origin.gpu,
                source: r.source.unwrap_or(LagSource::GpuStart),
                lag_us: r.lag_ns as f64 / r.last as f64 / 1e3,
                last: r.last,
                of: judged.get(&func).copied().unwrap_or(0),
                its_wait_us: us(r.its_ns, r.phased),
                others_wait_us: us(r.others_ns, r.phased),
            });
        }
    }

    /// Per GPU over the window: its rails' bytes against NCCL's through its ranks, and their errors.
    fn rails(&mut self, now: Duration, lines: &mut Vec<WatchLine>) {
        let window = self.config.window;
        for ((host, gpu), state) in &mut self.rails {
            let Some((first, last)) = state.readings.window(now, window) else { continue };
            let grew = |a: Option<u64>, b: Option<u64>| match (a, b) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a)),
                _ => None,
            };
            let total = |n: &NicCount| n.tx_bytes.saturating_add(n.rx_bytes);
            let mut nics: Vec<RailNic> = last
                .2
                .values()
                .map(|n| {
                    let before = first.2.get(&n.name);
                    RailNic {
                        name: n.name.clone(),
                        bytes: total(n).saturating_sub(before.map_or(total(n), total)),
                        retrans: grew(before.and_then(|b| b.retrans), n.retrans),
                        unresponsive: grew(before.and_then(|b| b.unresponsive), n.unresponsive),
                        impaired: grew(before.and_then(|b| b.impaired), n.impaired),
                        behind: false,
                    }
                })
                .collect();
            let nccl_bytes = last.1.saturating_sub(first.1);
            let rail = rail_of(nics.iter().map(|n| n.bytes));
            let quiet = nccl_bytes < self.config.fallback_min_bytes;
            if !quiet && nics.len() > 1 {
                for nic in &mut nics {
                    nic.behind = (nic.bytes as f64) < OFF_SHARE * rail || rail == 0.0;
                }
            }
            state.erring = nics.iter().filter(|n| n.errors()).map(|n| n.name.clone()).collect();
            let verdict = if !state.erring.is_empty() {
                RailVerdict::Errors
            } else if quiet {
                RailVerdict::Quiet
            } else if nics.iter().any(|n| n.behind) {
                RailVerdict::Skewed
            } else {
                RailVerdict::Ok
            };
            let changed = state.verdict.replace(verdict) != Some(verdict);
            if changed || matches!(verdict, RailVerdict::Errors | RailVerdict::Skewed) {
                lines.push(WatchLine::Rails { host: host.clone(), gpu: gpu.clone(), window_s: last.0.saturating_sub(first.0).as_secs_f64(), nccl_bytes, verdict, nics });
            }
        }
    }

    fn join(&mut self, now: Duration, lines: &mut Vec<WatchLine>) {
        let window = self.config.window;
        for (host, state) in &mut self.hosts {
            let Some((first, last)) = state.readings.window(now, window) else { continue };
            let nccl_bytes = last.1.saturating_sub(first.1);
            let mut nics: Vec<NicWindow> = last
                .2
                .iter()
                .map(|(name, bytes)| NicWindow { name: name.clone(), bytes: bytes.saturating_sub(first.2.get(name).copied().unwrap_or(*bytes)), behind: false })
                .collect();
            let nic_bytes: u64 = nics.iter().map(|n| n.bytes).sum();
            let rail = rail_of(nics.iter().map(|n| n.bytes));
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

    /// When a call's waiting began, as the ranks waiting in it tell: the age of their open call when they
    /// reported it (`open_ms`), taken back from when each was heard, the earliest of them; never more than
    /// [`WAIT_REPORTED_WITHIN`] before `now` (what a report's delay can hide: a rank reports once an
    /// interval), and `now` where no rank says. A stall is then named `hang_after` after the peers began to
    /// wait, not after the watcher first heard of it.
    fn waiting_since(&self, comm: u64, func: Func, seq: u64, now: Duration) -> Duration {
        self.ranks
            .range((comm, 0)..=(comm, u32::MAX))
            .filter_map(|(_, s)| s.progress.get(&func).filter(|p| p.open_seq == Some(seq)).map(|p| s.heard.saturating_sub(Duration::from_millis(p.open_ms))))
            .min()
            .map_or(now, |since| since.clamp(now.saturating_sub(WAIT_REPORTED_WITHIN), now))
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
            if !self.stuck.contains_key(&(comm, func, seq)) {
                let since = self.waiting_since(comm, func, seq, now);
                self.stuck.insert((comm, func, seq), (since, BTreeSet::new()));
            }
            let Some(entry) = self.stuck.get_mut(&(comm, func, seq)) else { continue };
            let waited = now.saturating_sub(entry.0);
            if waited < hang_after || entry.1.contains(&rank) {
                continue;
            }
            entry.1.insert(rank);
            let state = &self.ranks[&(comm, rank)];
            let origin = self.plugins.get(&state.conn).and_then(|p| p.origin.clone()).unwrap_or_else(|| unknown_origin(state.conn));
            let rails = origin.gpu.as_ref().and_then(|g| self.rails.get(&(origin.host.clone(), g.clone()))).map(|r| r.erring.clone()).unwrap_or_default();
            lines.push(WatchLine::Hang { comm: comm_hex(comm), func, seq, rank, host: origin.host, gpu: origin.gpu, why, waiting_s: waited.as_secs_f64(), peers_done: done, peers_waiting: waiting, rails });
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
    use efatop_proto::nccl::{NicCount, Timing};

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
            colls: vec![CollRow {
                func: Func::AllReduce,
                size: 1 << 30,
                datatype: "ncclFloat32".into(),
                algo: "RING".into(),
                proto: "SIMPLE".into(),
                ops: finished,
                timing: Timing::Gpu,
                timed: finished,
                time_ns: finished * 10_000_000,
                min_ns: 1,
                max_ns: 1,
                tag: 0,
                variant: String::new(),
                sym: false,
                phased: 0,
                wait_ns: 0,
                work_ns: 0,
            }],
            peers: vec![PeerRow { peer: 1 - rank, sent, received: sent, steps: 1 }],
            channels: vec![],
            progress: vec![Progress { func: Func::AllReduce, started, finished, open_seq: (started > finished).then_some(finished), open_ms: 0 }],
            calls: vec![],
        }
    }

    /// A plugin that reconnects again and again (a host's relay that keeps changing, say) leaves nothing
    /// behind: each connection it left is forgotten once closed and no rank's; one a rank still names (a
    /// dead process's) stays, for that rank's host and GPU.
    #[test]
    fn connections_a_rank_left_are_forgotten_and_a_dead_ranks_kept() {
        let mut watch = Watch::new(Config::default());
        for conn in 1..=100u64 {
            watch.ingest(conn, hello("a", 1), Duration::ZERO);
            watch.ingest(conn, comm(0), Duration::ZERO);
            watch.closed(conn - 1);
        }
        assert_eq!(watch.plugins.len(), 1, "only the live connection is held");
        watch.ingest(200, hello("b", 2), Duration::ZERO);
        watch.ingest(200, comm(1), Duration::ZERO);
        watch.closed(200);
        assert!(watch.plugins.contains_key(&200), "rank 1 died on it: its origin stays");
        assert_eq!(watch.plugins.values().filter(|p| !p.closed).count(), 1);
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

    fn samples(rank: u32, seqs: std::ops::Range<u64>, late_ns: u64, phased: bool) -> PluginMessage {
        // Rank 1 starts each call `late_ns` after rank 0 (GPU clock); with phases, rank 0 waits that long in
        // its initial sync and rank 1 hardly at all.
        let calls = seqs
            .map(|seq| CallSample {
                func: Func::AllReduce,
                seq,
                start_ns: 1_796_000_000_000_000_000 + seq * 50_000_000 + if rank == 1 { late_ns } else { 0 },
                gpu: true,
                initial_sync_ns: phased.then_some(if rank == 1 { 2_000 } else { late_ns }),
                final_sync_ns: phased.then_some(1_000),
                compute_ns: phased.then_some(9_000_000),
                tag: 0,
            })
            .collect();
        PluginMessage::Interval { t_ms: 0, comm: 7, rank, colls: vec![], peers: vec![], channels: vec![], progress: vec![], calls }
    }

    #[test]
    fn the_rank_the_others_wait_for_is_named_from_its_kernel_starts_or_its_sync_phases() {
        for phased in [false, true] {
            let mut watch = Watch::new(Config { window: Duration::from_secs(2), ..Config::default() });
            for (conn, host) in [(1, "a"), (2, "b")] {
                watch.ingest(conn, hello(host, conn as u32), Duration::ZERO);
                watch.ingest(conn, comm(conn as u32 - 1), Duration::ZERO);
            }
            let _ = watch.tick(Duration::ZERO);
            // 20 calls, rank 1 late by 5 ms in each; samples come in either order.
            watch.ingest(2, samples(1, 0..10, 5_000_000, phased), Duration::from_secs(1));
            watch.ingest(1, samples(0, 0..20, 5_000_000, phased), Duration::from_secs(1));
            watch.ingest(2, samples(1, 10..20, 5_000_000, phased), Duration::from_secs(1));
            // The window began with the first samples (1 s): judged at its end.
            assert!(!watch.tick(Duration::from_secs(2)).iter().any(|l| matches!(l, WatchLine::Straggler { .. })), "not before the window's end");
            let lines = watch.tick(Duration::from_secs(3));
            let named = lines.iter().find(|l| matches!(l, WatchLine::Straggler { .. })).unwrap_or_else(|| panic!("phased {phased}: {lines:?}"));
            let WatchLine::Straggler { rank, host, source, lag_us, last, of, its_wait_us, others_wait_us, .. } = named else { unreachable!() };
            assert_eq!((*rank, host.as_str(), *last, *of), (1, "b", 20, 20), "phased {phased}");
            if phased {
                assert_eq!(*source, LagSource::KernelPhase);
                assert!((lag_us - 4_998.0).abs() < 1e-6, "the others' sync less its own: {lag_us}");
                assert_eq!((*its_wait_us, *others_wait_us), (Some(2.0), Some(5_000.0)));
            } else {
                assert_eq!((*source, *its_wait_us), (LagSource::GpuStart, None));
                assert!((lag_us - 5_000.0).abs() < 1e-6, "{lag_us}");
            }
            // Then both on time: the straggler is cleared at the next window's end.
            watch.ingest(1, samples(0, 20..30, 0, phased), Duration::from_secs(4));
            watch.ingest(2, samples(1, 20..30, 0, phased), Duration::from_secs(4));
            let lines = watch.tick(Duration::from_secs(5));
            assert!(lines.iter().any(|l| matches!(l, WatchLine::StragglerOver { rank: 1, .. })), "phased {phased}: {lines:?}");
            assert!(watch.matching.values().all(BTreeMap::is_empty), "every matched call was let go");
        }
    }

    #[test]
    fn a_call_is_matched_once_every_rank_that_has_not_said_bye_sent_it() {
        let mut watch = Watch::new(Config { window: Duration::from_secs(2), ..Config::default() });
        for (conn, host) in [(1, "a"), (2, "b"), (3, "c")] {
            watch.ingest(conn, hello(host, conn as u32), Duration::ZERO);
            watch.ingest(conn, comm(conn as u32 - 1), Duration::ZERO);
        }
        // Rank 2 leaves (its bye told twice, and its Comm again from its old connection: counted once).
        watch.ingest(3, PluginMessage::Bye { comm: 7, rank: 2 }, Duration::ZERO);
        watch.ingest(3, PluginMessage::Bye { comm: 7, rank: 2 }, Duration::ZERO);
        watch.ingest(1, comm(0), Duration::ZERO);
        let _ = watch.tick(Duration::ZERO);
        watch.ingest(1, samples(0, 0..10, 5_000_000, false), Duration::from_secs(1));
        watch.ingest(2, samples(1, 0..10, 5_000_000, false), Duration::from_secs(1));
        let lines = watch.tick(Duration::from_secs(3));
        assert!(lines.iter().any(|l| matches!(l, WatchLine::Straggler { rank: 1, last: 10, of: 10, .. })), "the two ranks left matched every call: {lines:?}");
        // Rank 2 is back: a call is matched only with its sample too.
        watch.ingest(3, comm(2), Duration::from_secs(3));
        watch.ingest(1, samples(0, 10..20, 5_000_000, false), Duration::from_secs(4));
        watch.ingest(2, samples(1, 10..20, 5_000_000, false), Duration::from_secs(4));
        assert_eq!(watch.matching.values().map(BTreeMap::len).sum::<usize>(), 10, "waiting for rank 2's samples");
        watch.ingest(3, samples(2, 10..20, 0, false), Duration::from_secs(4));
        assert!(watch.matching.values().all(BTreeMap::is_empty), "every call matched");
    }

    #[test]
    fn a_rail_with_growing_errors_is_named_and_the_hang_names_it() {
        let mut watch = Watch::new(Config { hang_after: Duration::from_secs(2), ..Config::default() });
        for (conn, host) in [(1, "a"), (2, "b")] {
            watch.ingest(conn, hello(host, conn as u32), Duration::ZERO);
            watch.ingest(conn, comm(conn as u32 - 1), Duration::ZERO);
        }
        let rails = |bytes: u64, retrans: u64| PluginMessage::Nics {
            t_ms: 0,
            nics: vec![
                NicCount { name: "rdmap79s0".into(), tx_bytes: bytes, rx_bytes: 0, retrans: Some(0), unresponsive: Some(0), impaired: Some(0), rail: true },
                NicCount { name: "rdmap80s0".into(), tx_bytes: bytes / 100, rx_bytes: 0, retrans: Some(retrans), unresponsive: Some(0), impaired: Some(0), rail: true },
                NicCount { name: "rdmap96s0".into(), tx_bytes: 0, rx_bytes: 0, retrans: Some(0), unresponsive: Some(0), impaired: Some(0), rail: false },
            ],
        };
        watch.ingest(2, interval(1, 1, 1, 0), Duration::ZERO);
        watch.ingest(2, rails(0, 0), Duration::ZERO);
        let _ = watch.tick(Duration::ZERO);
        watch.ingest(1, interval(0, 5, 5, 1 << 30), Duration::from_secs(1));
        watch.ingest(2, interval(1, 4, 5, 1 << 30), Duration::from_secs(1));
        watch.ingest(2, rails(1 << 30, 40), Duration::from_secs(1));
        let lines = watch.tick(Duration::from_secs(1));
        let Some(WatchLine::Rails { host, gpu, verdict, nics, .. }) = lines.iter().find(|l| matches!(l, WatchLine::Rails { .. })) else { panic!("{lines:?}") };
        assert_eq!((host.as_str(), gpu.as_str(), *verdict), ("b", "2", RailVerdict::Errors));
        assert_eq!(nics.len(), 2, "the GPU's rails only: {nics:?}");
        let slow = nics.iter().find(|n| n.name == "rdmap80s0").expect("rail");
        assert!(slow.behind && slow.retrans == Some(40) && slow.errors(), "{slow:?}");
        watch.ingest(1, interval(0, 5, 5, 1 << 30), Duration::from_secs(3));
        watch.ingest(2, interval(1, 4, 5, 1 << 30), Duration::from_secs(3));
        let lines = watch.tick(Duration::from_secs(3));
        let hang = lines.iter().find(|l| matches!(l, WatchLine::Hang { .. })).unwrap_or_else(|| panic!("{lines:?}"));
        assert!(matches!(hang, WatchLine::Hang { rank: 1, rails, .. } if *rails == vec!["rdmap80s0".to_string()]), "{hang:?}");
    }

    #[test]
    fn flat_nics_under_nccl_traffic_are_a_fallback() {
        let mut watch = Watch::new(Config::default());
        watch.ingest(1, hello("a", 1), Duration::ZERO);
        watch.ingest(1, comm(0), Duration::ZERO);
        let nics = |n: u64| PluginMessage::Nics { t_ms: 0, nics: vec![NicCount { name: "rdmap79s0".into(), tx_bytes: n, rx_bytes: n, retrans: None, unresponsive: None, impaired: None, rail: false }] };
        watch.ingest(1, interval(0, 1, 1, 0), Duration::ZERO);
        watch.ingest(1, nics(100), Duration::ZERO);
        let _ = watch.tick(Duration::ZERO);
        watch.ingest(1, interval(0, 2, 2, 1 << 30), Duration::from_secs(1));
        watch.ingest(1, nics(100), Duration::from_secs(1));
        let lines = watch.tick(Duration::from_secs(1));
        assert!(lines.iter().any(|l| matches!(l, WatchLine::Nics { verdict: NicVerdict::Fallback, nccl_bytes, nic_bytes: 0, .. } if *nccl_bytes == 2 << 30)), "{lines:?}");
    }
}
