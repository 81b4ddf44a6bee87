//! A synthetic NCCL job for `efatop watch` at a fleet's scale, and the watcher it streams to: the one home
//! of the `bench_watch` example's and the fleet test's setup.
//!
//! [`start`]: `hosts` × `per_host` ranks of one world communicator, a plugin per process of `per_process`
//! ranks (its own TCP connection to the watcher, or, with `relayed`, its host's relay's: one a host) (from an address of its host's own, 127.10.x.y, as a
//! fleet's hosts come from theirs), proving the token with proto's handshake and sending, sealed as the
//! real plugin seals them (a record per write, under the keys of its handshake), what the real plugin
//! sends each interval: the communicator's figures (an allreduce's row, the ring's two peers, the call progress), the
//! node's 32 EFA NICs' counters and the plugin's health. The job runs `rate` allreduces a second; host
//! `skewed_host`'s NIC 5 carries 30 % of its share (a rail behind); from `stall_at` (or when the caller
//! says, [`Sent::stall`]), rank `stall_rank` stops before its next allreduce (its progress stays; its
//! peers start that call and wait in it).
//!
//! Each rank samples its calls as the plugin does (every call finished since its last interval, each with
//! its start on the GPU's timer, the world's ranks within [`JITTER`] of one another; past
//! [`MAX_CALL_SAMPLES`] a function an interval, the multiples of a doubling stride). From `straggle_at`
//! (or when the caller says, [`Sent::straggle`]), rank `straggle_rank` starts each allreduce
//! `straggle_lag` late: its samples' starts are that much later, and every rank finishes the call that
//! much later (a ring's peers wait in it for the rank), their kernels' times that much longer (ABI v6:
//! no kernel phases). Its progress is one call behind its peers' for `straggle_lag` at a time, no more:
//! a slow rank, not a hung one.
//!
//! One task per host (its ranks' connections), on a tokio runtime of its own threads: the senders'
//! cost is not the watcher's.
//!
//! [`Watcher::start`]: the real watch server ([`super::server`]) and fold loop ([`super::folder`]), with the
//! open-file limit raised for both ends of every connection (both live in the caller's process).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use std::sync::mpsc::{channel, sync_channel, Receiver};
use std::thread::JoinHandle;

use efatop_auth::{Answer, Secret};
use efatop_proto::handshake::{Purpose, HELLO_LEN, PROOF_LEN};
use crate::watch::fold::Config;
use efatop_proto::nccl::{
    self, CallSample, CollRow, CommInfo, Func, NicCount, Origin, PeerRow, PluginMessage, Progress,
    Timing, WatchLine, MAX_CALL_SAMPLES,
};
use efatop_auth::seal::Sealer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::folder::{self, Folded};
use super::server::{Server, BATCHES_IN_FLIGHT};
use super::{open_files, OpenFiles, Settings};

/// The watcher a synthetic job streams to: the real server and fold loop, in this process.
pub struct Watcher {
    pub server: Server,
    /// The token its plugins prove.
    pub secret: Secret,
    /// When it started (the fold's clock).
    pub started: Instant,
    /// What the fold loop did.
    pub folded: Arc<Folded>,
    /// Each tick's lines.
    pub lines: Receiver<Vec<WatchLine>>,
    /// The open-file limit, raised for `connections` connections with both ends here.
    pub files: OpenFiles,
    fold: JoinHandle<()>,
}

impl Watcher {
    /// Starts the server on 127.0.0.1 and the fold loop (`config`), for a job of `connections` plugins.
    pub fn start(settings: Settings, config: Config, connections: usize) -> std::io::Result<Self> {
        // Both ends of every connection, the strangers' and some to spare.
        let files = open_files(2 * connections as u64 + 4096);
        let secret = Secret::generate().map_err(std::io::Error::other)?;
        let (tx, rx) = sync_channel(BATCHES_IN_FLIGHT);
        let server = Server::start("127.0.0.1:0".parse().expect("an address"), secret.clone(), settings, tx)?;
        let started = Instant::now();
        let (lines_tx, lines) = channel();
        let (fold, folded) = folder::spawn(rx, config, started, Duration::ZERO, None, None, lines_tx)?;
        Ok(Self { server, secret, started, folded, lines, files, fold })
    }

    /// Stops the server; the fold loop ends with it.
    pub fn stop(self) {
        drop(self.server);
        let _ = self.fold.join();
    }
}

/// The world communicator's id.
pub const COMM: u64 = 0x5eed_c0ff_ee00_0001;
/// Bytes an allreduce moves (nccl-tests' size).
pub const SIZE: u64 = 256 << 20;
pub const NICS: usize = 32;
/// How far apart the world's ranks start a call on time (their GPUs' timers, as a fleet's clocks agree):
/// well under the fold's least straggler (`Config::straggler_min`, 1 ms by default).
pub const JITTER: Duration = Duration::from_micros(200);

#[derive(Clone, Debug)]
pub struct Job {
    pub hosts: usize,
    pub per_host: usize,
    /// Ranks one process drives (one plugin, one connection): 1 as `PyTorch` runs (a process per GPU), or
    /// the host's 8 as JAX runs (a process per host).
    pub per_process: usize,
    pub interval: Duration,
    /// Allreduces a second.
    pub rate: f64,
    pub stall_rank: Option<u32>,
    pub stall_at: Duration,
    pub skewed_host: Option<usize>,
    /// The rank that starts each allreduce late from `straggle_at` (zero: when the caller says,
    /// [`Sent::straggle`]), by `straggle_lag` (less than the calls' spacing, `1 / rate`).
    pub straggle_rank: Option<u32>,
    pub straggle_at: Duration,
    pub straggle_lag: Duration,
    /// Connections that never answer the handshake, opened alongside (from one address).
    pub strangers: usize,
    /// Each host's processes through its relay, as the plugin sends them by default: one connection a host,
    /// its first process's messages as its own, the others' as `Relayed` (their `Nics` cut to their rails,
    /// as the relay cuts them). Otherwise a connection per process.
    pub relayed: bool,
}

impl Job {
    pub fn world(&self) -> usize {
        self.hosts * self.per_host
    }

    pub fn host_name(h: usize) -> String {
        format!("p5-{h:04}")
    }

    /// The host rank `rank` runs on.
    pub fn host_of(&self, rank: u32) -> usize {
        rank as usize / self.per_host.max(1)
    }

    /// When the job's call `seq` (0, 1, ...) is due: its ranks start it then, or `straggle_lag` later.
    fn call_time(&self, seq: u64) -> Duration {
        Duration::from_secs_f64((seq + 1) as f64 / self.rate)
    }

    /// Calls due by `t`.
    fn calls_by(&self, t: Duration) -> u64 {
        (t.as_secs_f64() * self.rate) as u64
    }
}

/// What the synthetic plugins did, read from any thread.
#[derive(Debug, Default)]
pub struct Sent {
    /// Messages written whole to the watcher.
    pub messages: AtomicU64,
    /// Plugins connected (that proved the token).
    pub connected: AtomicU64,
    /// Connection attempts that failed or were refused (each retried after a backoff, as the plugin does).
    pub retries: AtomicU64,
    /// Intervals a host's task started late by more than one interval (the senders could not keep up).
    pub late: AtomicU64,
    /// Stranger connections opened.
    pub strangers: AtomicU64,
    /// When the stalled rank stops (ns after the start; 0: not yet decided): `stall_at`, or set by the
    /// caller ([`Sent::stall`]).
    pub stall_ns: AtomicU64,
    /// When the straggler starts to lag (ns after the start; 0: not yet decided): `straggle_at`, or set by
    /// the caller ([`Sent::straggle`]).
    pub straggle_ns: AtomicU64,
}

impl Sent {
    /// The stalled rank stops now (`t` after the start).
    pub fn stall(&self, t: Duration) {
        self.stall_ns.store(t.as_nanos() as u64, Ordering::Relaxed);
    }

    fn stall_at(&self) -> Option<Duration> {
        let ns = self.stall_ns.load(Ordering::Relaxed);
        (ns > 0).then(|| Duration::from_nanos(ns))
    }

    /// The straggler starts each call from now on late (`t` after the start).
    pub fn straggle(&self, t: Duration) {
        self.straggle_ns.store(t.as_nanos() as u64, Ordering::Relaxed);
    }

    /// When the straggler started to lag, if it did.
    pub fn straggle_at(&self) -> Option<Duration> {
        let ns = self.straggle_ns.load(Ordering::Relaxed);
        (ns > 0).then(|| Duration::from_nanos(ns))
    }
}

/// Starts the job on `threads` threads of its own (each pinned to `cpus` when given); it runs until `stop`.
pub fn start(
    job: Job,
    address: SocketAddr,
    secret: Secret,
    started: Instant,
    stop: Arc<AtomicBool>,
    threads: usize,
    cpus: Vec<usize>,
) -> (std::thread::JoinHandle<()>, Arc<Sent>) {
    let sent = Arc::new(Sent::default());
    // The job's start on the clock the GPUs' timers keep (the host's), for the call samples' starts.
    let epoch_ns = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().saturating_sub(started.elapsed()).as_nanos() as u64;
    if !job.stall_at.is_zero() {
        sent.stall(job.stall_at);
    }
    if !job.straggle_at.is_zero() {
        sent.straggle(job.straggle_at);
    }
    let counts = Arc::clone(&sent);
    let handle = std::thread::Builder::new()
        .name("bench-plugins".into())
        .spawn(move || {
            let pin = cpus.clone();
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads.max(1))
                .thread_name("bench-plugin")
                .on_thread_start(move || {
                    if !pin.is_empty() {
                        crate::affinity::pin_thread(None, pin.iter().copied());
                    }
                })
                .enable_all()
                .build()
                .expect("the plugins' runtime");
            runtime.block_on(async move {
                let job = Arc::new(job);
                let mut tasks = Vec::new();
                for h in 0..job.hosts {
                    tasks.push(tokio::spawn(host(
                        Arc::clone(&job),
                        h,
                        address,
                        secret.clone(),
                        (started, epoch_ns),
                        Arc::clone(&stop),
                        Arc::clone(&counts),
                    )));
                }
                if job.strangers > 0 {
                    tasks.push(tokio::spawn(strangers(
                        job.strangers,
                        address,
                        Arc::clone(&stop),
                        Arc::clone(&counts),
                    )));
                }
                for task in tasks {
                    let _ = task.await;
                }
            });
        })
        .expect("the plugins' thread");
    (handle, sent)
}

/// Host `h`'s own address.
fn source(h: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 10, (h / 200) as u8, (h % 200 + 1) as u8))
}

async fn connect(
    address: SocketAddr,
    from: IpAddr,
    secret: &Secret,
) -> std::io::Result<(tokio::net::TcpStream, Sealer)> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    let mut stream = socket.connect(address).await?;
    stream.set_nodelay(true)?;
    let mut hello = [0u8; HELLO_LEN];
    stream.read_exact(&mut hello).await?;
    let (pending, answer) =
        Answer::new(secret, Purpose::Nccl, &hello).map_err(std::io::Error::other)?;
    stream.write_all(&answer).await?;
    let mut proof = [0u8; PROOF_LEN];
    stream.read_exact(&mut proof).await?;
    pending
        .verify(secret, &proof)
        .map_err(std::io::Error::other)?;
    Ok((stream, pending.session(secret).sealer))
}

/// Writes `plain` sealed (`buffer`: what it is sealed into, kept across writes).
async fn write_sealed(
    stream: &mut tokio::net::TcpStream,
    sealer: &mut Sealer,
    plain: &[u8],
    buffer: &mut Vec<u8>,
) -> std::io::Result<()> {
    buffer.clear();
    sealer.seal(plain, buffer).map_err(std::io::Error::other)?;
    stream.write_all(buffer).await
}

/// A plugin's connection, made again with the plugin's backoff (0.25 s doubling to 10 s) until it holds.
async fn connected(
    address: SocketAddr,
    from: IpAddr,
    secret: &Secret,
    sent: &Sent,
    stop: &AtomicBool,
) -> Option<(tokio::net::TcpStream, Sealer)> {
    let mut backoff = Duration::from_millis(250);
    while !stop.load(Ordering::Relaxed) {
        match tokio::time::timeout(Duration::from_secs(10), connect(address, from, secret)).await {
            Ok(Ok(connection)) => {
                sent.connected.fetch_add(1, Ordering::Relaxed);
                return Some(connection);
            }
            failed => {
                let before = sent.retries.fetch_add(1, Ordering::Relaxed);
                if before < 3 {
                    let why = match failed {
                        Ok(Err(err)) => err.to_string(),
                        _ => "no handshake within 10 s".to_string(),
                    };
                    eprintln!("bench plugin: connecting to the watcher: {why} (retried with backoff; the first 3 are told)");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
    }
    None
}

fn frame(message: &PluginMessage, out: &mut Vec<u8>) {
    nccl::encode(message, out).expect("a plugin message encodes");
}

/// `message` framed as process `local` of the host's relay sends it on (`None`: the connection's own).
fn framed(local: Option<u32>, message: PluginMessage, out: &mut Vec<u8>) {
    match local {
        Some(local) => frame(&PluginMessage::Relayed { local, message: Box::new(message) }, out),
        None => frame(&message, out),
    }
}

/// The first call the straggler starts late, where it lags.
fn first_straggled(job: &Job, straggle_at: Option<Duration>) -> Option<u64> {
    let at = straggle_at.filter(|_| job.straggle_rank.is_some())?;
    let mut seq = job.calls_by(at).saturating_sub(1);
    while seq > 0 && job.call_time(seq - 1) >= at {
        seq -= 1;
    }
    while job.call_time(seq) < at {
        seq += 1;
    }
    Some(seq)
}

/// Whether call `seq` is one the straggler starts late.
fn straggled(job: &Job, straggle_at: Option<Duration>, seq: u64) -> bool {
    job.straggle_rank.is_some() && straggle_at.is_some_and(|at| job.call_time(seq) >= at)
}

/// Calls started and finished by rank `rank` at `t`.
fn progress(job: &Job, stall_at: Option<Duration>, straggle_at: Option<Duration>, rank: u32, t: Duration) -> (u64, u64) {
    let calls = job.calls_by(t);
    // The latest call, where the straggler starts it late: it has not started it yet, and no rank has
    // finished it (its peers wait in it).
    let (mut started, mut finished) = (calls, calls);
    if calls > 0 && straggled(job, straggle_at, calls - 1) && t < job.call_time(calls - 1) + job.straggle_lag {
        finished -= 1;
        if job.straggle_rank == Some(rank) {
            started -= 1;
        }
    }
    match (job.stall_rank, stall_at) {
        (Some(stalled), Some(stall_at)) if t >= stall_at => {
            let frozen = job.calls_by(stall_at);
            if rank == stalled {
                (frozen, frozen)
            } else {
                (started.min(frozen + 1), finished.min(frozen))
            }
        }
        _ => (started, finished),
    }
}

/// A rank's start of a call on time, its offset from the call's due time (within [`JITTER`]): a hash of
/// the two, the same in every run.
fn jitter(rank: u32, seq: u64) -> u64 {
    let mut x = (u64::from(rank) << 40) ^ seq ^ 0x9e37_79b9_7f4a_7c15;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) % JITTER.as_nanos() as u64
}

/// Rank `rank`'s samples of its calls `from..to` (the calls finished since its last interval), as the
/// plugin keeps them: every call whose number is a multiple of a stride that doubles past
/// [`MAX_CALL_SAMPLES`]; each starts `epoch_ns` (the job's start, ns since the Unix epoch) + its due time
/// + the rank's jitter, + `straggle_lag` for the straggler's late calls.
fn samples(job: &Job, straggle_at: Option<Duration>, epoch_ns: u64, rank: u32, from: u64, to: u64) -> Vec<CallSample> {
    let mut stride = 1;
    while to.saturating_sub(from).div_ceil(stride) > MAX_CALL_SAMPLES as u64 {
        stride *= 2;
    }
    (from..to)
        .filter(|seq| seq % stride == 0)
        .map(|seq| {
            let late = if job.straggle_rank == Some(rank) && straggled(job, straggle_at, seq) { job.straggle_lag.as_nanos() as u64 } else { 0 };
            CallSample {
                func: Func::AllReduce,
                seq,
                start_ns: epoch_ns + job.call_time(seq).as_nanos() as u64 + jitter(rank, seq) + late,
                gpu: true,
                initial_sync_ns: None,
                final_sync_ns: None,
                compute_ns: None,
                tag: 0,
            }
        })
        .collect()
}

// One host's whole life, connections, preamble and intervals, read top to bottom.
#[allow(clippy::too_many_lines)]
async fn host(
    job: Arc<Job>,
    h: usize,
    address: SocketAddr,
    secret: Secret,
    (started, epoch_ns): (Instant, u64),
    stop: Arc<AtomicBool>,
    sent: Arc<Sent>,
) {
    let world = job.world() as u32;
    let from = source(h);
    let name = Job::host_name(h);
    let mut streams = Vec::new();
    let mut out = Vec::new();
    let mut buffer = Vec::new();
    let per_process = job.per_process.clamp(1, job.per_host);
    // Through the host's relay: one connection, which the first process's loop opens and the others share.
    let relay = |process: usize| (job.relayed && process > 0).then_some(process as u32);
    for process in 0..job.per_host / per_process {
        let (mut processes, mut stream, mut sealer) = if relay(process).is_some() {
            streams.pop().expect("the relay's connection")
        } else {
            let Some((stream, sealer)) = connected(address, from, &secret, &sent, &stop).await else {
                return;
            };
            (Vec::new(), stream, sealer)
        };
        out.clear();
        let first = process * per_process;
        // A process of one GPU names it; one of several names none (the plugin reads the current device).
        let gpu = (per_process == 1).then(|| first.to_string());
        let origin = Origin {
            host: name.clone(),
            pid: 1000 + process as u32,
            gpu,
            nccl_version: Some("2.28.3".into()),
            abi: 6,
            plugin_version: "bench".into(),
        };
        framed(relay(process), PluginMessage::Hello { origin }, &mut out);
        for local in first..first + per_process {
            let rank = (h * job.per_host + local) as u32;
            framed(
                relay(process),
                PluginMessage::Comm {
                    info: CommInfo {
                        comm: COMM,
                        name: None,
                        rank,
                        nranks: world,
                        nnodes: job.hosts as u32,
                    },
                },
                &mut out,
            );
        }
        if write_sealed(&mut stream, &mut sealer, &out, &mut buffer).await.is_err() {
            return;
        }
        sent.messages
            .fetch_add(1 + per_process as u64, Ordering::Relaxed);
        processes.push((first, relay(process)));
        streams.push((processes, stream, sealer));
    }
    // Hosts spread over the interval, as a fleet's plugins (started with their processes) are.
    let offset = job.interval.mul_f64(h as f64 / job.hosts as f64);
    let first = tokio::time::Instant::from_std(started) + offset;
    // Per rank of the host, the calls it has sampled: those finished before its plugin got in were in
    // intervals the plugin could not send (it drops and counts them), so its first interval has only the
    // calls since. (Sampling every call since the start made a late host's first message hold a minute of
    // calls, and every late host's buffers kept that size.)
    let mut sampled = vec![job.calls_by(started.elapsed()); job.per_host];
    let mut ticks = tokio::time::interval_at(first, job.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Relaxed) {
        let due = ticks.tick().await;
        if due.elapsed() > job.interval {
            sent.late.fetch_add(1, Ordering::Relaxed);
        }
        let t = started.elapsed();
        let t_ms = t.as_millis() as u64;
        let calls = (t.as_secs_f64() * job.rate) as u64;
        // The NICs carry what the host's ranks moved with their peers (the NIC join's other side).
        let per_nic = calls * SIZE * 4 * job.per_host as u64 / NICS as u64;
        // A process of one GPU marks that GPU's NICs (NICS / per_host of them) as its rails, as the plugin
        // does; one of several GPUs marks none.
        let rails_per_gpu = NICS / job.per_host.max(1);
        let nics_of = |gpu: Option<usize>| -> Vec<NicCount> {
            (0..NICS)
                .map(|i| {
                    let bytes = if Some(h) == job.skewed_host && i == 5 {
                        per_nic * 3 / 10
                    } else {
                        per_nic
                    };
                    NicCount {
                        name: format!("rdmap{}s0", 79 + i),
                        tx_bytes: bytes / 2,
                        rx_bytes: bytes / 2,
                        retrans: None,
                        unresponsive: None,
                        impaired: None,
                        rail: gpu.is_some_and(|g| rails_per_gpu > 0 && i / rails_per_gpu == g),
                    }
                })
                .collect()
        };
        let straggle_at = sent.straggle_at();
        let lag_ns = job.straggle_lag.as_nanos() as u64;
        for (processes, stream, sealer) in &mut streams {
            out.clear();
            let mut messages = 0;
            for &(first, local) in processes.iter() {
                for (offset, sampled) in sampled.iter_mut().enumerate().skip(first).take(per_process) {
                    let rank = (h * job.per_host + offset) as u32;
                    let (started_calls, finished) = progress(&job, sent.stall_at(), straggle_at, rank, t);
                    let calls = samples(&job, straggle_at, epoch_ns, rank, (*sampled).min(finished), finished);
                    *sampled = finished;
                    // The straggler's late calls its peers finished: each took them `straggle_lag` longer.
                    let waited = if job.straggle_rank == Some(rank) { 0 } else { first_straggled(&job, straggle_at).map_or(0, |k| finished.saturating_sub(k)) };
                    let moved = finished * SIZE;
                    let interval = PluginMessage::Interval {
                        t_ms,
                        comm: COMM,
                        rank,
                        colls: vec![CollRow {
                            func: Func::AllReduce,
                            size: SIZE,
                            datatype: "ncclFloat32".into(),
                            algo: "RING".into(),
                            proto: "SIMPLE".into(),
                            ops: finished,
                            timing: Timing::Gpu,
                            timed: finished,
                            time_ns: finished * 4_000_000 + waited * lag_ns,
                            min_ns: 3_900_000,
                            max_ns: 4_100_000 + if waited > 0 { lag_ns } else { 0 },
                            tag: 0,
                            variant: String::new(),
                            sym: false,
                            phased: 0,
                            wait_ns: 0,
                            work_ns: 0,
                        }],
                        peers: vec![
                            PeerRow {
                                peer: (rank + 1) % world,
                                sent: moved,
                                received: moved,
                                steps: finished * 64,
                            },
                            PeerRow {
                                peer: (rank + world - 1) % world,
                                sent: moved,
                                received: moved,
                                steps: finished * 64,
                            },
                        ],
                        channels: vec![],
                        progress: vec![Progress {
                            func: Func::AllReduce,
                            started: started_calls,
                            finished,
                            open_seq: (started_calls > finished).then_some(finished),
                            open_ms: 0,
                        }],
                        calls,
                    };
                    framed(local, interval, &mut out);
                    messages += 1;
                }
                let nics = nics_of((per_process == 1).then_some(first));
                // The relay cuts a process's NICs to its rails; the relay's own process sends them all.
                let nics = match local {
                    Some(_) => PluginMessage::Rails { t_ms, nics: nics.into_iter().filter(|n| n.rail).collect() },
                    None => PluginMessage::Nics { t_ms, nics },
                };
                framed(local, nics, &mut out);
                framed(
                    local,
                    PluginMessage::Health {
                        t_ms,
                        events: t_ms * 100,
                        dropped: 0,
                        unsent: 0,
                        unmatched: 0,
                    },
                    &mut out,
                );
                messages += 2;
            }
            if write_sealed(stream, sealer, &out, &mut buffer).await.is_err() {
                return;
            }
            sent.messages.fetch_add(messages, Ordering::Relaxed);
        }
    }
}

/// Connections from one address that never answer the handshake, opened one after another for as long as
/// the job runs (each kept until the watcher drops it).
async fn strangers(count: usize, address: SocketAddr, stop: Arc<AtomicBool>, sent: Arc<Sent>) {
    let mut held = Vec::new();
    for _ in 0..count {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(socket) = tokio::net::TcpSocket::new_v4() else {
            return;
        };
        if socket
            .bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 66, 6, 6)), 0))
            .is_err()
        {
            return;
        }
        if let Ok(stream) = socket.connect(address).await {
            sent.strangers.fetch_add(1, Ordering::Relaxed);
            held.push(stream);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        // Those the watcher dropped are let go.
        if held.len() >= 256 {
            held.drain(..128);
        }
    }
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
