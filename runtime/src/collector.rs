//! Telemetry transport: every rank's sampler thread streams [`RankSample`] frames to a collector that
//! rank 0 runs (tokio). The benchmark's hot path never takes part: it only bumps the probe's atomics.
//!
//! Who may send: every connection first proves the run's secret ([`efatop_auth`], purpose
//! `Telemetry`) within one deadline ([`HANDSHAKE_WAIT`] for the whole exchange); one that does not is
//! dropped and counted ([`CollectorEvent::Refused`]), as is one beyond the run's world ([`Gate`]): a rank
//! outside the world or already connected, a frame longer than a rank of this world can send, an index
//! beyond it. Connections that have proved nothing wait in a budget of their own ([`crate::handshake`]'s
//! lobby: a new one takes the oldest one's place), so strangers never keep a rank out. No refusal ends the
//! run.
//!
//! What follows the handshake is sealed ([`efatop_auth::seal`]): every frame travels in records encrypted
//! and authenticated under keys bound to that handshake, so a relay that passed it through can neither read
//! a sample nor change one; a record that fails its check ends its connection as a refusal ("frame failed
//! authentication"), never as data.
//!
//! Back-pressure: a sampler never blocks on rank 0. Its socket is non-blocking; frames that cannot be sent
//! wait in a bounded queue, and when that is full the oldest is dropped and counted. The count travels in
//! every sample and is shown in red on the dashboard.

use std::collections::VecDeque;
use std::io::{ErrorKind, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use efatop_auth::{self as auth, Challenge, Secret};
use efatop_proto::handshake::{ANSWER_LEN, Purpose};
use efatop_auth::seal::{Opener, SealError, Sealer};

use crate::handshake::{self, Attempt, Lobby, PER_PEER, Seat, retry, retryable};
use efatop_proto::telemetry::wire;
use efatop_experiments::probe::{Probe, Sampler};
use efatop_proto::telemetry::{NodeSample, RankSample, WorldBounds};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Frames a sampler keeps while rank 0 is not reading: a few seconds at the default interval.
pub(crate) const QUEUE_FRAMES: usize = 64;
/// How long a connection may take to prove itself, in all.
pub use crate::handshake::HANDSHAKE_WAIT;
/// Connections that have proved nothing, at once: a newer one takes the oldest one's place (whose sender,
/// if it holds the secret, tries again).
const HANDSHAKES_AT_ONCE: usize = 64;
/// How long a sender keeps trying to get through (rank 0 busy with a flood of strangers' handshakes).
const DIAL_FOR: Duration = Duration::from_secs(15);

/// Connects to rank 0's collector and proves the run's secret, within one deadline; retried, backing off,
/// for [`DIAL_FOR`] while the collector drops the connection before we could prove anything (strangers
/// filling its budget of unproven connections, or every rank connected meanwhile: [`retryable`]). A
/// collector that refused our proof, or proved nothing itself, is not retried. Returns the stream,
/// non-blocking, and the keys that seal what this side sends on it.
pub fn dial(collector: SocketAddr, secret: &Secret) -> std::io::Result<(TcpStream, Sealer)> {
    let denied = |why: String| std::io::Error::new(ErrorKind::PermissionDenied, why);
    retry(DIAL_FOR, || {
        let stream = TcpStream::connect_timeout(&collector, Duration::from_secs(10)).map_err(Attempt::Again)?;
        let deadline = handshake::deadline();
        let mut within = deadline.on(&stream);
        let session = match auth::connect_session(&mut within, secret, Purpose::Telemetry) {
            Ok(session) => session,
            Err(auth::AuthError::NoHello(io) | auth::AuthError::Io(io)) => return Err(Attempt::Again(io)),
            Err(err) if retryable(&err) => return Err(Attempt::Again(std::io::Error::other(format!("rank 0's collector: {err}")))),
            // A collector that does not hold our secret will not start to: no retry.
            Err(other) => return Err(Attempt::Final(denied(format!("rank 0's collector: {other}")))),
        };
        let ready = || -> std::io::Result<()> {
            within.done()?;
            stream.set_nodelay(true)?;
            stream.set_nonblocking(true)
        };
        ready().map_err(Attempt::Final)?;
        Ok((stream, session.sealer))
    })
}

/// A rank's sampler: reads the probe every interval and sends the sample to rank 0's collector.
pub struct SamplerThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

/// A rank's watch on rank 0 through its telemetry connection: rank 0's collector is gone when the connection
/// breaks (it closed: rank 0 ended or died) or when nothing sent on it was acknowledged for `timeout` (the
/// kernel's `TCP_USER_TIMEOUT`: rank 0's node is unreachable). A rank 0 that is alive but slow to read still
/// acknowledges (window probes too), so it is never taken for gone. `lost` is told why, once, while the
/// sampler runs (never after it was asked to stop).
pub struct RankZeroWatch {
    pub timeout: Duration,
    pub lost: Box<dyn FnOnce(String) + Send>,
    /// The host's relay the connection goes to instead of rank 0's collector (as "rank 8's telemetry
    /// relay"): the relay watches rank 0 and closes its connections once rank 0 is gone.
    pub relay: Option<String>,
}

/// Why a sampler's link to rank 0 (or to its host's relay, `relay`) broke, in one line.
pub(crate) fn why_lost(error: Option<&std::io::Error>, timeout: Duration, relay: Option<&str>) -> String {
    match (error, relay) {
        (Some(e), _) if e.raw_os_error() == Some(libc::ETIMEDOUT) => format!(
            "nothing it sent rank 0's collector was acknowledged for {:.0} s (--hang-timeout): rank 0's node is unreachable",
            timeout.as_secs_f64()
        ),
        (Some(e), None) => format!("its telemetry connection to rank 0's collector broke ({e}): rank 0 has ended"),
        (None, None) => "rank 0's collector closed its telemetry connection: rank 0 has ended".to_string(),
        (Some(e), Some(relay)) => format!("its connection to {relay} broke ({e}): rank 0 has ended or is unreachable, or the relay's rank died"),
        (None, Some(relay)) => format!("{relay} closed its connection: rank 0 has ended or is unreachable, or the relay's rank died"),
    }
}

impl SamplerThread {
    #[cfg(test)]
    pub fn start(rank: usize, probe: Arc<Probe>, collector: SocketAddr, secret: &Secret, interval: Duration) -> std::io::Result<Self> {
        Self::start_watching(rank, probe, collector, secret, interval, None)
    }

    /// [`SamplerThread::start`], telling `watch` when rank 0's collector is gone.
    pub fn start_watching(
        rank: usize,
        probe: Arc<Probe>,
        collector: SocketAddr,
        secret: &Secret,
        interval: Duration,
        watch: Option<RankZeroWatch>,
    ) -> std::io::Result<Self> {
        let (stream, sealer) = dial(collector, secret)?;
        // The schedule below steps by whole intervals: never by none.
        let interval = interval.max(Duration::from_micros(100));
        let (timeout, mut on_lost, relay) = match watch {
            Some(RankZeroWatch { timeout, lost, relay }) => {
                let millis = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
                nix::sys::socket::setsockopt(&stream, nix::sys::socket::sockopt::TcpUserTimeout, &millis).map_err(std::io::Error::from)?;
                (timeout, Some(lost), relay)
            }
            None => (Duration::ZERO, None, None),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let (ready_tx, ready) = std::sync::mpsc::sync_channel::<()>(1);
        let probe_for_gate = probe.clone();
        let handle = std::thread::Builder::new().name(format!("efatop-sampler-{rank}")).spawn(move || {
            // Everything this thread will touch is allocated and faulted in now, before the hot path
            // starts: from here on it never calls the allocator and never faults a fresh page, so it
            // never waits on the process's memory map, which a large mlock or registration on the hot
            // path holds for seconds on a loaded node (a healthy 1 GiB run was once named hung this way; tests/liveness.rs).
            prefault_stack();
            let mut link = Link::new(stream, sealer, frame_room(&probe));
            let mut sampler = Sampler::new(rank, &probe);
            let mut sample = Sampler::room(&probe);
            let mut last_phase = 0;
            // The connection names its rank at once (a phase report of no phase): a rank that dies before
            // its first sample is then still named by rank 0, not left as an unknown connection.
            link.push_bytes(&wire::encode_phase(&efatop_proto::telemetry::PhaseReport {
                rank: rank as u32,
                changes: 0,
                phase: 0,
                bytes: 0,
            }));
            link.flush();
            // The hot path starts only once all of this is in place (`start` waits for it).
            let _ = ready_tx.send(());
            let mut last = Instant::now();
            let mut next = first_tick(interval);
            loop {
                let stopping_now = stopping.load(Ordering::Relaxed);
                let now = Instant::now();
                // A phase change goes out at once: it is the rank's progress report.
                if let Some(report) = probe.phase(rank).filter(|report| report.changes != last_phase) {
                    last_phase = report.changes;
                    link.push_bytes(&wire::encode_phase(&report));
                }
                if now >= next || stopping_now {
                    // Paused (`--telemetry-ab`'s off blocks): the sample due is not taken and nothing is sent,
                    // as with telemetry off; the schedule goes on as usual (no one wakes this thread to switch
                    // arms), and the next sample's interval covers the pause, so its rates stay bytes over
                    // wall time.
                    if stopping_now || probe.sampling() {
                        sampler.sample_into(&probe, now - last, link.drops, &mut sample);
                        last = now;
                        link.push(&sample);
                    }
                    // Late (a busy CPU, a pause): the next tick of the same grid, so the machine's samplers stay together.
                    next += interval;
                    while next <= now {
                        next += interval;
                    }
                }
                link.flush();
                if link.broken && !stopping_now {
                    if let Some(lost) = on_lost.take() {
                        lost(why_lost(link.error.as_ref(), timeout, relay.as_deref()));
                    }
                }
                if stopping_now || link.broken {
                    // One last try to deliver what is queued, bounded so exit is never held up.
                    let deadline = Instant::now() + Duration::from_millis(200);
                    while !link.queue.is_empty() && !link.broken && Instant::now() < deadline {
                        link.flush();
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    return;
                }
                // Parked until the next sample is due: a phase change (Probe::set_phase) or the stop wakes it
                // sooner. One wake-up per interval, not a poll: its CPU is shared with busy-polling ranks.
                std::thread::park_timeout(next.saturating_duration_since(Instant::now()));
            }
        })?;
        probe_for_gate.attach_sampler(handle.thread().clone());
        // Whatever the thread allocates, it allocates before the hot path maps and locks its buffers.
        let _ = ready.recv_timeout(Duration::from_secs(10));
        Ok(Self { stop, handle: Some(handle) })
    }

    /// Sends a final sample and stops.
    pub fn finish(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.handle.take() {
            // A paused sampler waits parked: wake it to send its last sample.
            handle.thread().unpark();
            let _ = handle.join();
        }
    }
}

impl Drop for SamplerThread {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

pub(crate) struct Link {
    stream: TcpStream,
    sealer: Sealer,
    /// Frames not yet sent, in the clear: a frame is sealed only once its sending starts, so that dropping
    /// one that waits leaves no gap in the records' numbering.
    pub(crate) queue: VecDeque<Vec<u8>>,
    /// Frame buffers not in the queue, kept for reuse: a sampler that recycles them never allocates.
    spare: Vec<Vec<u8>>,
    /// The front frame, sealed, once its sending started (empty before): its room is kept from frame to
    /// frame, so sealing allocates nothing either.
    sealed: Vec<u8>,
    /// Bytes of `sealed` already written.
    written: usize,
    pub(crate) drops: u64,
    pub(crate) broken: bool,
    /// Why the connection broke, when a write said.
    pub(crate) error: Option<std::io::Error>,
}

/// Room set aside per frame buffer: a whole frame of a small run; a frame of thousands of peers grows its
/// buffer once, and the buffer keeps that room.
fn frame_room(probe: &Probe) -> usize {
    let histogram = 2 + 6 * efatop_proto::telemetry::histogram::BUCKETS;
    let bound = 64 + probe.channel_count() * (24 + histogram) + probe.rank_count() * (48 + histogram);
    bound.min(64 << 10)
}

/// The next moment after now that is a multiple of `period` on the machine's monotonic clock, which every
/// process of the machine reads alike (and `Instant` is read from).
pub(crate) fn next_tick(period: Duration) -> Instant {
    let now = Instant::now();
    let Ok(clock) = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) else { return now + period };
    let period_ns = period.as_nanos().max(1);
    let since_boot = u128::from(clock.tv_sec().unsigned_abs()) * 1_000_000_000 + u128::from(clock.tv_nsec().unsigned_abs());
    now + Duration::from_nanos(u64::try_from(period_ns - since_boot % period_ns).unwrap_or(u64::MAX))
}

/// When a sampler that starts now takes its first sample: the next tick of `interval` ([`next_tick`]), at
/// least half an interval away so that no sample covers a sliver. Every sampler of a machine then samples at
/// the same moments: the rates of its ranks cover the same windows, and their samples reach rank 0's
/// collector (or the host's relay) together, one wake-up of it an interval rather than one a rank.
pub(crate) fn first_tick(interval: Duration) -> Instant {
    let now = Instant::now();
    let tick = next_tick(interval);
    if tick - now < interval / 2 { tick + interval } else { tick }
}

/// Touches the first 64 KiB of this thread's stack, so that sampling never faults a stack page in.
#[allow(clippy::large_stack_arrays)] // the point: stack pages, touched now
fn prefault_stack() {
    let mut room = [0u8; 64 << 10];
    for page in room.chunks_mut(4096) {
        page[0] = 1;
    }
    std::hint::black_box(&room);
}

impl Link {
    pub(crate) fn new(stream: TcpStream, sealer: Sealer, room: usize) -> Self {
        Self {
            stream,
            sealer,
            queue: VecDeque::with_capacity(QUEUE_FRAMES),
            // Every queue slot, plus the frame being built.
            spare: (0..=QUEUE_FRAMES).map(|_| Vec::with_capacity(room)).collect(),
            sealed: Vec::with_capacity(Sealer::sealed_len(room)),
            written: 0,
            drops: 0,
            broken: false,
            error: None,
        }
    }

    pub(crate) fn buffer(&mut self) -> Vec<u8> {
        let mut buffer = self.spare.pop().unwrap_or_default();
        buffer.clear();
        buffer
    }

    fn recycle(&mut self, buffer: Vec<u8>) {
        if self.spare.len() <= QUEUE_FRAMES {
            self.spare.push(buffer);
        }
    }

    fn push(&mut self, sample: &RankSample) {
        let mut frame = self.buffer();
        wire::encode(sample, &mut frame);
        self.push_frame(frame);
    }

    pub(crate) fn push_bytes(&mut self, bytes: &[u8]) {
        let mut frame = self.buffer();
        frame.extend_from_slice(bytes);
        self.push_frame(frame);
    }

    pub(crate) fn push_frame(&mut self, frame: Vec<u8>) {
        if self.queue.len() == QUEUE_FRAMES {
            // Drop the oldest frame not yet started; one being sent is sealed (its record numbered) and
            // must go out whole.
            let victim = usize::from(!self.sealed.is_empty());
            if let Some(dropped) = self.queue.remove(victim) {
                self.drops += 1;
                self.recycle(dropped);
            }
        }
        self.queue.push_back(frame);
    }

    pub(crate) fn flush(&mut self) {
        while let Some(front) = self.queue.front() {
            if self.sealed.is_empty() {
                if let Err(err) = self.sealer.seal(front, &mut self.sealed) {
                    self.broken = true;
                    self.error = Some(std::io::Error::other(err.to_string()));
                    return;
                }
                self.written = 0;
                if self.sealed.is_empty() {
                    // An empty frame seals to nothing.
                    if let Some(sent) = self.queue.pop_front() {
                        self.recycle(sent);
                    }
                    continue;
                }
            }
            match self.stream.write(&self.sealed[self.written..]) {
                Ok(0) => {
                    self.broken = true;
                    return;
                }
                Ok(n) => {
                    self.written += n;
                    if self.written == self.sealed.len() {
                        self.sealed.clear();
                        self.written = 0;
                        if let Some(sent) = self.queue.pop_front() {
                            self.recycle(sent);
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.broken = true;
                    self.error = Some(e);
                    return;
                }
            }
        }
    }
}

/// A node's `efatop monitor` sending its snapshots to rank 0's collector, with a sampler's rules: it never
/// blocks (a bounded queue that drops its oldest frame and counts it) and gives up on a broken connection.
pub struct NodeSender {
    link: Link,
}

impl NodeSender {
    pub fn connect(collector: SocketAddr, secret: &Secret) -> std::io::Result<Self> {
        let (stream, sealer) = dial(collector, secret)?;
        Ok(Self { link: Link::new(stream, sealer, 1024) })
    }

    /// Snapshots dropped so far; the next one sent should carry it.
    pub fn drops(&self) -> u64 {
        self.link.drops
    }

    /// Queues one snapshot and sends what the socket takes now; an error once rank 0 has gone.
    pub fn send(&mut self, sample: &NodeSample) -> std::io::Result<()> {
        let mut frame = self.link.buffer();
        wire::encode_node(sample, &mut frame).map_err(|err| std::io::Error::new(ErrorKind::InvalidData, err))?;
        self.link.push_frame(frame);
        self.link.flush();
        if self.link.broken { Err(std::io::Error::new(ErrorKind::BrokenPipe, "rank 0's collector hung up")) } else { Ok(()) }
    }

    /// Delivers what is queued, waiting at most `within`.
    pub fn finish(mut self, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.link.queue.is_empty() && !self.link.broken && Instant::now() < deadline {
            self.link.flush();
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

use efatop_proto::events::CollectorEvent;

/// Who may connect to a collector, where it listens, and the world it bounds them by.
#[derive(Clone, Debug)]
pub struct Gate {
    pub secret: Secret,
    pub bounds: WorldBounds,
    /// The address it listens on: loopback when every rank shares rank 0's machine ([`bind_address`]).
    pub bind: IpAddr,
}

/// Where rank 0's listeners bind for a run on `hosts` (rank 0's first): loopback when every rank runs on
/// rank 0's machine (emulated nodes are namespaces of it); else rank 0's own address as its name resolves
/// (the address the other ranks will resolve and connect to); every address only when that name resolves
/// to none of this machine's.
pub fn bind_address(hosts: &[String]) -> IpAddr {
    let machine = |host: &str| efatop_experiments::world::machine(host).to_string();
    let Some(rank0) = hosts.first().map(|h| machine(h)) else { return IpAddr::from([127, 0, 0, 1]) };
    if hosts.iter().all(|host| machine(host) == rank0) {
        return IpAddr::from([127, 0, 0, 1]);
    }
    let local = |ip: &IpAddr| !ip.is_loopback() && std::net::TcpListener::bind(SocketAddr::new(*ip, 0)).is_ok();
    (rank0.as_str(), 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut found| found.find(|a| a.is_ipv4() && local(&a.ip())))
        .map_or(IpAddr::from([0, 0, 0, 0]), |a| a.ip())
}

/// Rank 0's collector: a tokio runtime on its own thread, one task per rank connection.
///
/// Events reach the consumer in batches, not one by one: at 4096 ranks × 10 Hz, waking the consumer
/// thread for every sample would cost more than decoding it. Each connection's events keep their order
/// (a rank's last sample comes before its `Closed`), and a batch leaves at most [`BATCH_EVERY`] after its
/// first event arrived.
pub struct Collector {
    pub address: SocketAddr,
    /// Connections refused so far (told as [`CollectorEvent::Refused`], but counted here too: those refused
    /// before rank 0's loop started reach no consumer).
    refused: Arc<std::sync::atomic::AtomicU64>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

/// How long an event may wait in the collector for others to join its batch: far below what a person
/// can see on a dashboard redrawn every 100 ms.
pub const BATCH_EVERY: Duration = Duration::from_millis(10);

/// The most events a batch holds: one that fills leaves at once. A fleet's batch otherwise grows with
/// however long the collector's thread went without running its timer (hundreds of milliseconds on a
/// core it shares, hundreds of thousands of samples), and a consumer takes a batch whole: the dashboard's
/// frame budget ([`efatop_ui`]'s `tui::FOLD_BUDGET`) can only stop between batches.
pub const BATCH_MAX: usize = 2048;

/// Events decoded since the last batch left; shared by the connection tasks of the collector's one thread.
type Pending = std::rc::Rc<PendingBatch>;

/// The batch being gathered, the wake-up of [`forward_batches`] when its first event arrives, and where a
/// full batch goes at once.
struct PendingBatch {
    events: std::cell::RefCell<Vec<CollectorEvent>>,
    arrived: tokio::sync::Notify,
    /// Hands a batch to the consumer; false once the consumer is gone.
    hand_over: Box<dyn Fn(Vec<CollectorEvent>) -> bool>,
}

impl PendingBatch {
    fn new(hand_over: Box<dyn Fn(Vec<CollectorEvent>) -> bool>) -> Self {
        Self { events: std::cell::RefCell::default(), arrived: tokio::sync::Notify::new(), hand_over }
    }

    fn push(&self, event: CollectorEvent) {
        let full = {
            let mut events = self.events.borrow_mut();
            events.push(event);
            (events.len() >= BATCH_MAX).then(|| std::mem::replace(&mut *events, Vec::with_capacity(BATCH_MAX)))
        };
        match full {
            // A consumer gone is [`forward_batches`]'s to notice.
            Some(batch) => {
                let _ = (self.hand_over)(batch);
            }
            None => self.arrived.notify_one(),
        }
    }
}

/// What the connection tasks share about the world's connections (the collector's one thread).
struct Door {
    gate: Gate,
    max_frame: usize,
    /// Connections that have proved nothing yet, and those that passed their handshake.
    handshakes: Lobby,
    admitted: usize,
    /// The connection each rank speaks through: a rank's first keeps it until it closes.
    owners: Vec<Option<SocketAddr>>,
    /// Bytes held in the connections' read buffers, against [`Door::budget`].
    buffered: usize,
    budget: usize,
    refused: u64,
    counted: Arc<std::sync::atomic::AtomicU64>,
    told_at: Option<Instant>,
}

type Shared = std::rc::Rc<std::cell::RefCell<Door>>;

impl Door {
    fn new(gate: Gate, counted: Arc<std::sync::atomic::AtomicU64>) -> Self {
        let ranks = gate.bounds.ranks;
        Self {
            max_frame: gate.bounds.max_frame() as usize,
            // A few frames' room per rank, and room for a few of the largest frames a rank can send.
            budget: (64 << 20) + ranks * 4 * READ_ROOM,
            owners: vec![None; ranks],
            gate,
            handshakes: Lobby::new(HANDSHAKES_AT_ONCE, PER_PEER),
            admitted: 0,
            buffered: 0,
            refused: 0,
            counted,
            told_at: None,
        }
    }

    /// Counts a refusal; tells the consumer of the first ones, then at most once a second (with the count).
    fn refuse(&mut self, pending: &Pending, from: SocketAddr, reason: String) {
        self.refused += 1;
        self.counted.store(self.refused, Ordering::Relaxed);
        let now = Instant::now();
        if self.refused <= 10 || self.told_at.is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1)) {
            self.told_at = Some(now);
            pending.push(CollectorEvent::Refused { from, reason, total: self.refused });
        }
    }

    /// Whether another connection may start its handshake: not once every rank of the run is connected
    /// (unproven ones wait in the lobby, which makes room for each newcomer).
    fn room(&self) -> Result<(), String> {
        if self.admitted >= self.owners.len() {
            return Err(format!("every one of the run's {} ranks is connected already", self.owners.len()));
        }
        Ok(())
    }
}

impl Collector {
    /// Listens on `gate.bind` and forwards what the run's ranks send to `events`.
    pub fn start<E: From<Vec<CollectorEvent>> + Send + 'static>(events: Sender<E>, gate: Gate) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build()?;
        // A large accept backlog: thousands of ranks connect at once when a big job starts.
        let listener = runtime.block_on(async {
            let socket = if gate.bind.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
            socket.set_reuseaddr(true)?;
            socket.bind(SocketAddr::new(gate.bind, 0))?;
            socket.listen(8192)
        })?;
        let address = listener.local_addr()?;
        let (shutdown, mut shutdown_rx) = tokio::sync::oneshot::channel::<()>();
        let refused = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = refused.clone();
        let handle = std::thread::Builder::new().name("efatop-collector".into()).spawn(move || {
            let local = tokio::task::LocalSet::new();
            let full = events.clone();
            let pending: Pending = Pending::new(PendingBatch::new(Box::new(move |batch| full.send(batch.into()).is_ok())));
            let door: Shared = std::rc::Rc::new(std::cell::RefCell::new(Door::new(gate, counted)));
            local.spawn_local(forward_batches(pending.clone(), events));
            local.block_on(&runtime, async move {
                loop {
                    tokio::select! {
                        _ = &mut shutdown_rx => return,
                        accepted = listener.accept() => {
                            let Ok((stream, from)) = accepted else { continue };
                            let room = door.borrow().room();
                            if let Err(why) = room {
                                door.borrow_mut().refuse(&pending, from, why);
                                continue;
                            }
                            let seat = door.borrow().handshakes.enter(&stream, from);
                            let seat = match seat {
                                Ok(seat) => seat,
                                Err(err) => {
                                    door.borrow_mut().refuse(&pending, from, err.to_string());
                                    continue;
                                }
                            };
                            let _ = stream.set_nodelay(true);
                            tokio::task::spawn_local(serve_connection(stream, from, seat, pending.clone(), door.clone()));
                        }
                    }
                }
            });
        })?;
        Ok(Self { address, refused, shutdown: Some(shutdown), handle: Some(handle) })
    }

    /// Connections refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// Hands what the connections decoded to the consumer: a batch leaves [`BATCH_EVERY`] after its first
/// event arrived. Nothing pending, nothing wakes (it used to tick every 10 ms whatever came: a hundred
/// wake-ups a second of rank 0's collector next to the run's busy ranks, for a run whose samples come ten
/// times a second).
async fn forward_batches<E: From<Vec<CollectorEvent>>>(pending: Pending, events: Sender<E>) {
    loop {
        pending.arrived.notified().await;
        // A wake-up left over from events that the last batch already took.
        if pending.events.borrow().is_empty() {
            continue;
        }
        tokio::time::sleep(BATCH_EVERY).await;
        let batch = std::mem::take(&mut *pending.events.borrow_mut());
        if !batch.is_empty() && events.send(batch.into()).is_err() {
            return;
        }
    }
}

/// Room a connection keeps for reading: several frames of a 32-channel rank, so a rank that fell behind
/// catches up in few reads, while 4096 connections still hold only tens of MiB.
pub(crate) const READ_ROOM: usize = 8 * 1024;

/// A connection's whole handshake (the connecting side proves the run's secret, and learns that we hold it
/// too), within one deadline ([`HANDSHAKE_WAIT`]), holding its `seat` among the
/// unproven: the keys that open what it sends next, or why it failed (the lobby's reason when it dropped
/// the connection to make room).
pub(crate) async fn admit(stream: &mut tokio::net::TcpStream, seat: Seat, secret: &Secret) -> Result<Opener, String> {
    let exchange = async move {
        let (challenge, hello) = Challenge::new(Purpose::Telemetry).map_err(|e| e.to_string())?;
        stream.write_all(&hello).await.map_err(|e| seat.why(e))?;
        let mut answer = [0u8; ANSWER_LEN];
        stream.read_exact(&mut answer).await.map_err(|e| seat.why(format!("no answer to the handshake ({e})")))?;
        let proof = challenge.check(secret, &answer).map_err(|e| e.to_string())?;
        // Out of the lobby before it is told it is believed: one the lobby dropped meanwhile is not told.
        let why_dropped = seat.why("");
        if !seat.proven() {
            return Err(why_dropped);
        }
        stream.write_all(&proof).await.map_err(|e| e.to_string())?;
        Ok(challenge.session(secret, &answer).opener)
    };
    match tokio::time::timeout(HANDSHAKE_WAIT, exchange).await {
        Ok(outcome) => outcome,
        Err(_) => Err(format!("no handshake within {} s", HANDSHAKE_WAIT.as_secs())),
    }
}

/// An admitted connection's records as they arrive (`raw`), opened into plaintext.
pub(crate) struct Unsealing {
    opener: Opener,
    pub(crate) raw: Vec<u8>,
}

impl Unsealing {
    pub(crate) fn new(opener: Opener) -> Self {
        Self { opener, raw: Vec::new() }
    }

    /// Opens every whole record that has arrived, appending its plaintext to `plain`; the partial record
    /// left stays for the next read. A record that fails ends the connection: why.
    pub(crate) fn open_into(&mut self, plain: &mut Vec<u8>) -> Result<(), SealError> {
        let mut at = 0;
        let outcome = loop {
            match self.opener.open_front(&mut self.raw[at..]) {
                Ok(Some((took, range))) => {
                    plain.extend_from_slice(&self.raw[at + range.start..at + range.end]);
                    at += took;
                }
                Ok(None) => break Ok(()),
                Err(err) => break Err(err),
            }
        };
        self.raw.drain(..at);
        outcome
    }
}

/// One connection: its handshake, then its frames until it closes or breaks a rule of the [`Door`].
async fn serve_connection(mut stream: tokio::net::TcpStream, from: SocketAddr, seat: Seat, pending: Pending, door: Shared) {
    let secret = door.borrow().gate.secret.clone();
    let admitted = admit(&mut stream, seat, &secret).await;
    let opener = {
        let mut door = door.borrow_mut();
        match admitted {
            Ok(opener) => {
                door.admitted += 1;
                opener
            }
            Err(why) => {
                door.refuse(&pending, from, why);
                return;
            }
        }
    };
    let mut claimed = Vec::new();
    let refused = read_frames(&mut stream, Unsealing::new(opener), from, &pending, &door, &mut claimed).await;
    let mut door = door.borrow_mut();
    door.admitted -= 1;
    for rank in &claimed {
        door.owners[*rank as usize] = None;
    }
    match refused {
        Some(why) => door.refuse(&pending, from, why),
        None => pending.push(CollectorEvent::Closed { from, rank: claimed.first().copied() }),
    }
}

/// Reads an admitted connection's frames until it closes or breaks a rule (why: then it is refused, not
/// closed). `claimed`: the ranks it speaks for, the first first (a rank's sampler speaks for its own rank
/// alone; a host's relay ([`crate::relay`]) for its host's ranks, its own first, each until it says the rank
/// is gone; the collector bench's senders carry several).
async fn read_frames(
    stream: &mut tokio::net::TcpStream,
    mut sealed: Unsealing,
    from: SocketAddr,
    pending: &Pending,
    door: &Shared,
    claimed: &mut Vec<u32>,
) -> Option<String> {
    let (bounds, max_frame) = {
        let door = door.borrow();
        (door.gate.bounds, door.max_frame)
    };
    let mut buffer: Vec<u8> = Vec::new();
    // Bytes at the front of `buffer` already decoded.
    let mut consumed = 0;
    let held = std::cell::Cell::new(0usize);
    // Whatever this connection held goes back to the budget however it ends.
    let release = |door: &Shared, held: &std::cell::Cell<usize>| door.borrow_mut().buffered -= held.replace(0);
    let outcome = 'reading: loop {
        if consumed > 0 {
            buffer.drain(..consumed);
            consumed = 0;
        }
        // Reads go into spare capacity: nothing is zeroed first, which at 40K frames/s would cost more
        // than decoding them. Growth is charged to the collector's budget.
        if sealed.raw.capacity() - sealed.raw.len() < READ_ROOM / 2 {
            let before = sealed.raw.capacity();
            sealed.raw.reserve(READ_ROOM);
            if let Err(why) = charge(door, &held, sealed.raw.capacity() - before) {
                break 'reading Some(why);
            }
        }
        match stream.read_buf(&mut sealed.raw).await {
            Ok(0) | Err(_) => break None,
            Ok(_) => {}
        }
        // The records that arrived whole, opened: a record that fails ends the connection, refused.
        let before = buffer.capacity();
        let opened = sealed.open_into(&mut buffer);
        if let Err(why) = charge(door, &held, buffer.capacity() - before) {
            break 'reading Some(why);
        }
        if let Err(err) = opened {
            break 'reading Some(err.to_string());
        }
        // Every complete frame in what has arrived; a partial one waits for the next read.
        loop {
            let (len, body) = match wire::split_frame(&buffer[consumed..], max_frame) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(wire::SplitError::Malformed(reason)) => {
                    // The stream cannot be resynchronised after a bad length: drop the connection.
                    pending.push(CollectorEvent::Malformed { from, reason });
                    break 'reading None;
                }
                Err(too_long) => break 'reading Some(too_long.to_string()),
            };
            let (event, claimed_now) = match wire::decode_frame(body) {
                Ok(wire::Frame::Rank(sample)) => {
                    if let Some(outside) = sample.outside(bounds) {
                        break 'reading Some(outside.to_string());
                    }
                    let claimed = sample.rank;
                    (CollectorEvent::Sample(Box::new(sample)), Some(claimed))
                }
                Ok(wire::Frame::Node(sample)) => {
                    let claimed = sample.rank;
                    (CollectorEvent::Node(Box::new(sample)), Some(claimed))
                }
                Ok(wire::Frame::Phase(report)) => (CollectorEvent::Phase(report), Some(report.rank)),
                // A host's relay: a rank it carried closed its connection to the relay. The rank must be one
                // this connection spoke for; it is then free, as if its own connection had closed.
                Ok(wire::Frame::Gone(rank)) => {
                    let Some(at) = claimed.iter().position(|&mine| mine == rank) else {
                        break 'reading Some(format!("word that rank {rank} closed, from a connection that does not speak for it"));
                    };
                    claimed.remove(at);
                    door.borrow_mut().owners[rank as usize] = None;
                    (CollectorEvent::Closed { from, rank: Some(rank) }, None)
                }
                Err(reason) => (CollectorEvent::Malformed { from, reason }, None),
            };
            if let Some(rank) = claimed_now {
                if let Err(why) = claim(door, claimed, rank, from, bounds) {
                    break 'reading Some(why);
                }
            }
            pending.push(event);
            consumed += len;
        }
    };
    release(door, &held);
    outcome
}

/// A rank of the world belongs to the first connection that speaks for it, until that one closes.
/// Charges a connection's buffer growth to the collector's budget; why not, when it is spent.
fn charge(door: &Shared, held: &std::cell::Cell<usize>, grown: usize) -> Result<(), String> {
    if grown == 0 {
        return Ok(());
    }
    let mut door = door.borrow_mut();
    if door.buffered + grown > door.budget {
        return Err(format!(
            "the collector's buffers are at their budget of {} MiB",
            door.budget >> 20
        ));
    }
    door.buffered += grown;
    held.set(held.get() + grown);
    Ok(())
}
fn claim(door: &Shared, claimed: &mut Vec<u32>, rank: u32, from: SocketAddr, bounds: WorldBounds) -> Result<(), String> {
    bounds.rank(rank).map_err(|outside| outside.to_string())?;
    if claimed.contains(&rank) {
        return Ok(());
    }
    let mut door = door.borrow_mut();
    let owner = &mut door.owners[rank as usize];
    if let Some(first) = owner {
        return Err(format!("rank {rank} is connected already (from {first}); it keeps its first connection"));
    }
    *owner = Some(from);
    claimed.push(rank);
    Ok(())
}

/// What rank 0 publishes of where its collector listens ([`resolve`] reads it): the address it bound, or
/// `host:port` when it listens on every address.
pub fn published(collector: &Collector, rank0_host: &str) -> String {
    if collector.address.ip().is_unspecified() { format!("{rank0_host}:{}", collector.address.port()) } else { collector.address.to_string() }
}

/// Where rank `rank` should connect to reach rank 0's collector published as [`published`] made it: the
/// address rank 0 bound; or, for a collector on every address, loopback on rank 0's machine and rank 0's
/// host name elsewhere.
pub fn resolve(published: &str, rank0_host: &str, my_host: &str) -> std::io::Result<SocketAddr> {
    if let Ok(bound) = published.parse::<SocketAddr>() {
        if !bound.ip().is_unspecified() {
            return Ok(bound);
        }
    }
    let port = published.rsplit(':').next().and_then(|p| p.parse::<u16>().ok()).ok_or_else(|| {
        std::io::Error::new(ErrorKind::InvalidInput, format!("bad collector address {published}"))
    })?;
    let (rank0_machine, my_machine) = (efatop_experiments::world::machine(rank0_host), efatop_experiments::world::machine(my_host));
    if rank0_machine == my_machine {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    (rank0_machine, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::new(ErrorKind::NotFound, format!("cannot resolve {rank0_host}")))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use efatop_auth::seal::SealedWriter;
    use efatop_proto::telemetry::wire::WireError;
    use std::sync::mpsc;

    pub(crate) const WORLD: WorldBounds = WorldBounds { ranks: 8, channels: 4 };

    #[test]
    fn samplers_started_apart_sample_at_the_same_moments() {
        let interval = Duration::from_millis(100);
        let early = Instant::now();
        let first = first_tick(interval);
        std::thread::sleep(Duration::from_millis(37));
        let late = Instant::now();
        let second = first_tick(interval);
        for (started, tick) in [(early, first), (late, second)] {
            let away = tick - started;
            assert!(away >= interval / 2 && away <= interval * 3 / 2, "first sample {away:?} after the start");
        }
        // On one grid: the two ticks are whole intervals apart (to the microseconds between two clock reads).
        let apart = second.saturating_duration_since(first).max(first.saturating_duration_since(second));
        let off_grid = (apart.as_micros() % interval.as_micros()).min(interval.as_micros() - apart.as_micros() % interval.as_micros());
        assert!(off_grid < 1_000, "ticks {apart:?} apart: {off_grid} µs off the interval's grid");
    }

    /// The collector of a run of [`WORLD`] on loopback, its secret, and its events one by one (they arrive
    /// in batches). The relay's tests use it too.
    pub(crate) fn collector() -> (Collector, Secret, impl FnMut(Duration) -> Option<CollectorEvent>) {
        let (tx, rx) = mpsc::channel::<Vec<CollectorEvent>>();
        let mut queued = std::collections::VecDeque::new();
        let next = move |wait: Duration| {
            if queued.is_empty() {
                queued.extend(rx.recv_timeout(wait).ok()?);
            }
            queued.pop_front()
        };
        let secret = Secret::generate().expect("secret");
        let gate = Gate { secret: secret.clone(), bounds: WORLD, bind: IpAddr::from([127, 0, 0, 1]) };
        (Collector::start(tx, gate).expect("collector"), secret, next)
    }

    fn local(address: SocketAddr) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], address.port()))
    }

    /// A blocking connection that passed the handshake; what is written to it is sealed.
    pub(crate) fn admitted(address: SocketAddr, secret: &Secret) -> SealedWriter<TcpStream> {
        let (stream, sealer) = dial(address, secret).expect("admitted");
        stream.set_nonblocking(false).expect("blocking");
        SealedWriter::new(stream, sealer, "the collector")
    }

    fn sample_frame(rank: u32, seq: u64) -> Vec<u8> {
        let mut frame = Vec::new();
        wire::encode(&RankSample { rank, seq, ..RankSample::default() }, &mut frame);
        frame
    }

    /// The next event that is not a batch of samples.
    fn refusal(next_event: &mut impl FnMut(Duration) -> Option<CollectorEvent>) -> (String, u64) {
        loop {
            match next_event(Duration::from_secs(10)).expect("an event") {
                CollectorEvent::Refused { reason, total, .. } => return (reason, total),
                CollectorEvent::Closed { rank: Some(rank), .. } => panic!("rank {rank} closed: a refused connection must not look like a rank leaving"),
                _ => {}
            }
        }
    }

    #[test]
    fn strangers_are_refused_counted_and_never_speak_for_a_rank() {
        let (collector, secret, mut next_event) = collector();
        let address = local(collector.address);
        // The 27-byte attack: a sampler's greeting as rank 1, then close, without the handshake.
        let mut stranger = TcpStream::connect(address).expect("connect");
        let _ = stranger.write_all(&wire::encode_phase(&efatop_proto::telemetry::PhaseReport { rank: 1, changes: 0, phase: 0, bytes: 0 }));
        drop(stranger);
        let (reason, total) = refusal(&mut next_event);
        assert!(reason.contains("handshake") || reason.contains("prove"), "{reason}");
        assert_eq!(total, 1);
        // Another run's secret.
        let other = Secret::generate().expect("secret");
        assert!(dial(address, &other).is_err(), "a collector refuses another run's secret");
        let (reason, total) = refusal(&mut next_event);
        assert!(reason.contains("prove"), "{reason}");
        assert_eq!(total, 2);
        // The run's own rank still gets through, and its close is told as its own.
        let mut rank = admitted(address, &secret);
        rank.write_all(&sample_frame(1, 1)).expect("write");
        drop(rank);
        let mut seen = Vec::new();
        while let Some(event) = next_event(Duration::from_secs(5)) {
            let closed = matches!(event, CollectorEvent::Closed { rank: Some(1), .. });
            seen.push(event);
            if closed {
                break;
            }
        }
        assert!(matches!(&seen[0], CollectorEvent::Sample(s) if s.rank == 1), "{seen:?}");
        assert!(matches!(seen.last(), Some(CollectorEvent::Closed { rank: Some(1), .. })), "{seen:?}");
    }

    /// A burst of samples larger than a batch leaves in batches of at most [`BATCH_MAX`], in order, with
    /// nothing lost: a consumer's frame budget can stop between them.
    #[test]
    fn a_burst_leaves_in_batches_of_at_most_batch_max_in_order() {
        let (tx, rx) = mpsc::channel::<Vec<CollectorEvent>>();
        let secret = Secret::generate().expect("secret");
        let gate = Gate { secret: secret.clone(), bounds: WORLD, bind: IpAddr::from([127, 0, 0, 1]) };
        let collector = Collector::start(tx, gate).expect("collector");
        let mut rank = admitted(local(collector.address), &secret);
        let sent = 3 * BATCH_MAX as u64 + 7;
        let burst: Vec<u8> = (0..sent).flat_map(|seq| sample_frame(3, seq)).collect();
        rank.write_all(&burst).expect("write");
        let (mut seqs, mut largest) = (Vec::new(), 0);
        while (seqs.len() as u64) < sent {
            let batch = rx.recv_timeout(Duration::from_secs(10)).expect("a batch");
            largest = largest.max(batch.len());
            seqs.extend(batch.iter().filter_map(|event| match event {
                CollectorEvent::Sample(sample) => Some(sample.seq),
                _ => None,
            }));
        }
        assert!(largest <= BATCH_MAX, "a batch of {largest} events");
        assert_eq!(seqs, (0..sent).collect::<Vec<_>>());
    }

    #[test]
    fn ranks_beyond_the_world_second_claims_and_long_frames_are_refused() {
        let (collector, secret, mut next_event) = collector();
        let address = local(collector.address);
        // Rank 0xFFFFFFFF: refused before any consumer sees it.
        let mut beyond = admitted(address, &secret);
        beyond.write_all(&sample_frame(u32::MAX, 1)).expect("write");
        let (reason, _) = refusal(&mut next_event);
        assert!(reason.contains("rank 4294967295 is outside the run's 8 ranks"), "{reason}");
        // Rank 2's first connection keeps it; a second one claiming rank 2 is refused.
        let mut first = admitted(address, &secret);
        first.write_all(&sample_frame(2, 1)).expect("write");
        assert!(matches!(next_event(Duration::from_secs(5)), Some(CollectorEvent::Sample(s)) if s.rank == 2));
        let mut second = admitted(address, &secret);
        second.write_all(&sample_frame(2, 9)).expect("write");
        let (reason, _) = refusal(&mut next_event);
        assert!(reason.contains("keeps its first connection"), "{reason}");
        first.write_all(&sample_frame(2, 2)).expect("the first owner goes on");
        assert!(matches!(next_event(Duration::from_secs(5)), Some(CollectorEvent::Sample(s)) if s.rank == 2 && s.seq == 2));
        // A length no rank of 8 ranks × 4 channels can send, though below the wire's own limit.
        let mut long = admitted(address, &secret);
        long.write_all(&(WORLD.max_frame() + 1).to_le_bytes()).expect("write");
        let (reason, _) = refusal(&mut next_event);
        assert!(reason.contains("sends at most"), "{reason}");
    }

    /// A relay that passed the handshake through untouched and then changes one byte of what follows: the
    /// record fails, the connection is refused as "frame failed authentication", and the frame it carried
    /// (and everything after) never reaches a consumer. Bytes sent in the clear after the handshake are
    /// refused the same way.
    #[test]
    fn a_changed_byte_after_the_handshake_is_a_refusal_never_data() {
        let (collector, secret, mut next_event) = collector();
        let address = local(collector.address);
        for flip in [0usize, 2, 4, 30] {
            let (mut stream, mut sealer) = dial(address, &secret).expect("admitted");
            stream.set_nonblocking(false).expect("blocking");
            let mut record = Vec::new();
            sealer.seal(&sample_frame(4, 7), &mut record).expect("seal");
            record[flip] ^= 0x01;
            // Records after it: a length made longer is then filled (a reader never takes a record before
            // all its announced bytes are in), and the sum fails as a whole.
            for seq in 8..40 {
                sealer.seal(&sample_frame(4, seq), &mut record).expect("seal");
            }
            stream.write_all(&record).expect("write");
            let (reason, _) = refusal(&mut next_event);
            assert!(
                reason.contains("frame failed authentication"),
                "byte {flip}: {reason}"
            );
        }
        let (mut clear, _) = dial(address, &secret).expect("admitted");
        clear.set_nonblocking(false).expect("blocking");
        clear.write_all(&sample_frame(4, 8)).expect("write");
        let (reason, _) = refusal(&mut next_event);
        assert!(
            reason.contains("frame failed authentication"),
            "in the clear: {reason}"
        );
        // Nothing of rank 4 was ever taken; the rank's own connection is still welcome.
        let mut rank = admitted(address, &secret);
        rank.write_all(&sample_frame(4, 9)).expect("write");
        loop {
            match next_event(Duration::from_secs(10)).expect("an event") {
                CollectorEvent::Sample(sample) => {
                    assert_eq!(
                        sample.seq, 9,
                        "a forged or clear sample reached the consumer"
                    );
                    break;
                }
                CollectorEvent::Refused { .. } => {}
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn connections_are_capped_by_the_world() {
        let (collector, secret, mut next_event) = collector();
        let address = local(collector.address);
        let ranks: Vec<_> = (0..WORLD.ranks).map(|_| admitted(address, &secret)).collect();
        // One more than the world, though it holds the secret.
        let extra = TcpStream::connect(address).expect("connect");
        let (reason, _) = refusal(&mut next_event);
        assert!(reason.contains("connected already"), "{reason}");
        drop((ranks, extra));
    }

    /// More silent strangers than the collector takes unproven at once, connected before any rank: a rank
    /// takes the oldest one's place and is in at once, not after the strangers' deadline; those dropped for
    /// room are counted.
    #[test]
    fn a_flood_of_silent_strangers_beyond_the_budget_keeps_no_rank_out() {
        let (collector, secret, mut next_event) = collector();
        let address = local(collector.address);
        let strangers: Vec<TcpStream> = (0..HANDSHAKES_AT_ONCE + 8).map(|_| TcpStream::connect(address).expect("stranger")).collect();
        let started = Instant::now();
        let rank = admitted(address, &secret);
        assert!(started.elapsed() < HANDSHAKE_WAIT, "the rank waited {:?} on the strangers", started.elapsed());
        let (reason, _) = refusal(&mut next_event);
        assert!(reason.contains("to make room"), "{reason}");
        let until = Instant::now() + Duration::from_secs(4);
        while collector.refused() < 9 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(collector.refused() >= 9, "8 beyond the budget and 1 for the rank: {}", collector.refused());
        drop((rank, strangers));
    }

    #[test]
    fn malformed_frames_are_rejected_with_a_reason_and_good_ones_still_arrive() {
        let (collector, secret, mut next_event) = collector();
        let mut stream = admitted(local(collector.address), &secret);
        // Version 9, then a truncated body, then a good sample: the connection survives both bad frames.
        stream.write_all(&[2, 0, 0, 0, 9, 1]).expect("write");
        stream.write_all(&[3, 0, 0, 0, 1, 1, 0]).expect("write");
        let mut good = Vec::new();
        wire::encode(&RankSample { rank: 5, seq: 1, ..RankSample::default() }, &mut good);
        stream.write_all(&good).expect("write");
        // Then a length no frame can have: the collector hangs up.
        stream.write_all(&u32::MAX.to_le_bytes()).expect("write");
        let wait = Duration::from_secs(5);
        let first = next_event(wait).expect("event");
        assert!(matches!(first, CollectorEvent::Malformed { reason: WireError::Version(9), .. }), "{first:?}");
        let second = next_event(wait).expect("event");
        assert!(matches!(second, CollectorEvent::Malformed { reason: WireError::Truncated(_), .. }), "{second:?}");
        let third = next_event(wait).expect("event");
        assert!(matches!(&third, CollectorEvent::Sample(s) if s.rank == 5), "{third:?}");
        let fourth = next_event(wait).expect("event");
        assert!(matches!(fourth, CollectorEvent::Malformed { reason: WireError::TooLong(_), .. }), "{fourth:?}");
        let fifth = next_event(wait).expect("event");
        assert!(matches!(fifth, CollectorEvent::Closed { rank: Some(5), .. }), "{fifth:?}");
    }

    #[test]
    fn a_node_sender_reaches_the_collector_as_node_events_then_closes() {
        let (collector, secret, mut next_event) = collector();
        let mut sender = NodeSender::connect(local(collector.address), &secret).expect("connect");
        for seq in 1..=2 {
            sender.send(&NodeSample { rank: 3, seq, host: "n3".into(), ..NodeSample::default() }).expect("send");
        }
        sender.finish(Duration::from_secs(2));
        let wait = Duration::from_secs(5);
        for seq in 1..=2 {
            let event = next_event(wait).expect("event");
            assert!(matches!(&event, CollectorEvent::Node(s) if s.rank == 3 && s.seq == seq && s.host == "n3"), "{event:?}");
        }
        let closed = next_event(wait).expect("event");
        assert!(matches!(closed, CollectorEvent::Closed { rank: Some(3), .. }), "{closed:?}");
    }

    #[test]
    fn a_sampler_streams_what_the_probe_counts() {
        let (collector, secret, mut next_event) = collector();
        let probe = Arc::new(Probe::new(2, 2));
        let sampler = SamplerThread::start(1, probe.clone(), local(collector.address), &secret, Duration::from_millis(10))
            .expect("sampler");
        probe.completed(1, 0, 1 << 20, Some(Duration::from_micros(50)));
        std::thread::sleep(Duration::from_millis(60));
        sampler.finish();
        let mut bytes = 0;
        let mut ops = 0;
        while let Some(event) = next_event(Duration::from_millis(500)) {
            if let CollectorEvent::Sample(sample) = event {
                assert_eq!(sample.rank, 1);
                bytes += sample.channels[1].bytes;
                ops += sample.channels[1].latency.count();
            }
        }
        assert_eq!((bytes, ops), (1 << 20, 1));
    }

    /// `--telemetry-ab`'s off blocks: a paused sampler sends nothing (so rank 0 has nothing to do either);
    /// resumed, its next sample carries what was counted meanwhile, over an interval that covers the pause.
    #[test]
    fn a_paused_sampler_sends_nothing_until_resumed() {
        let (collector, secret, mut next_event) = collector();
        let probe = Arc::new(Probe::new(1, 2));
        let sampler = SamplerThread::start(1, probe.clone(), local(collector.address), &secret, Duration::from_millis(10))
            .expect("sampler");
        // Its greeting and its first samples, then silence once paused.
        std::thread::sleep(Duration::from_millis(50));
        probe.set_sampling(false);
        std::thread::sleep(Duration::from_millis(30));
        while next_event(Duration::from_millis(200)).is_some() {}
        probe.completed(0, 1, 4096, Some(Duration::from_micros(5)));
        let paused = Instant::now();
        let during = next_event(Duration::from_millis(300));
        assert!(during.is_none(), "a paused sampler sent {during:?}");
        probe.set_sampling(true);
        let resumed = loop {
            match next_event(Duration::from_secs(5)) {
                Some(CollectorEvent::Sample(sample)) => break sample,
                Some(_) => {}
                None => panic!("no sample after resuming"),
            }
        };
        assert_eq!((resumed.channels[0].bytes, resumed.channels[0].ops), (4096, 1));
        assert!(Duration::from_nanos(resumed.interval_ns) >= paused.elapsed().min(Duration::from_millis(300)), "{resumed:?}");
        sampler.finish();
    }
}
