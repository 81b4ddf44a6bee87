//! Telemetry transport: every rank's sampler thread streams [`RankSample`] frames to a collector that
//! rank 0 runs (tokio). The benchmark's hot path never takes part: it only bumps the probe's atomics.
//!
//! Back-pressure: a sampler never blocks on rank 0. Its socket is non-blocking; frames that cannot be sent
//! wait in a bounded queue, and when that is full the oldest is dropped and counted. The count travels in
//! every sample and is shown in red on the dashboard.

use std::collections::VecDeque;
use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use efatop_proto::telemetry::wire;
use efatop_proto::telemetry::{NodeSample, Probe, RankSample, Sampler};
use tokio::io::AsyncReadExt;

/// Frames a sampler keeps while rank 0 is not reading: a few seconds at the default interval.
const QUEUE_FRAMES: usize = 64;

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
}

impl SamplerThread {
    #[cfg(test)]
    pub fn start(rank: usize, probe: Arc<Probe>, collector: SocketAddr, interval: Duration) -> std::io::Result<Self> {
        Self::start_watching(rank, probe, collector, interval, None)
    }

    /// [`SamplerThread::start`], telling `watch` when rank 0's collector is gone.
    pub fn start_watching(
        rank: usize,
        probe: Arc<Probe>,
        collector: SocketAddr,
        interval: Duration,
        watch: Option<RankZeroWatch>,
    ) -> std::io::Result<Self> {
        let stream = TcpStream::connect_timeout(&collector, Duration::from_secs(10))?;
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        let (timeout, mut on_lost) = match watch {
            Some(RankZeroWatch { timeout, lost }) => {
                let millis = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
                nix::sys::socket::setsockopt(&stream, nix::sys::socket::sockopt::TcpUserTimeout, &millis).map_err(std::io::Error::from)?;
                (timeout, Some(lost))
            }
            None => (Duration::ZERO, None),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let (ready_tx, ready) = std::sync::mpsc::sync_channel::<()>(1);
        let probe_for_gate = probe.clone();
        let handle = std::thread::Builder::new().name(format!("efatop-sampler-{rank}")).spawn(move || {
            // Everything this thread will touch is allocated and faulted in now, before the hot path
            // starts: from here on it never calls the allocator and never faults a fresh page, so it
            // never waits on the process's memory map, which a large mlock or registration on the hot
            // path holds for seconds on a loaded node (issue 18: a healthy 1 GiB run was once named hung this way).
            prefault_stack();
            let mut link = Link::new(stream, frame_room(&probe));
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
            let mut next = last + interval;
            loop {
                if !probe.sampling() && !stopping.load(Ordering::Relaxed) {
                    // Paused (`--telemetry-ab`'s off blocks): no sampling, no sending, no wake-ups, as with
                    // telemetry off. The schedule waits with it, so running time keeps the usual sample rate;
                    // the next sample's interval covers the pause, so its rates stay bytes over wall time.
                    let paused = Instant::now();
                    while !probe.sampling() && !stopping.load(Ordering::Relaxed) {
                        std::thread::park_timeout(Duration::from_secs(1));
                    }
                    next += paused.elapsed();
                    continue;
                }
                let stopping_now = stopping.load(Ordering::Relaxed);
                let now = Instant::now();
                // A phase change goes out at once: it is the rank's progress report.
                if let Some(report) = probe.phase(rank).filter(|report| report.changes != last_phase) {
                    last_phase = report.changes;
                    link.push_bytes(&wire::encode_phase(&report));
                }
                if now >= next || stopping_now {
                    sampler.sample_into(&probe, now - last, link.drops, &mut sample);
                    last = now;
                    next += interval;
                    if next < now {
                        next = now + interval;
                    }
                    link.push(&sample);
                }
                link.flush();
                if link.broken && !stopping_now {
                    if let Some(lost) = on_lost.take() {
                        lost(match &link.error {
                            Some(e) if e.raw_os_error() == Some(libc::ETIMEDOUT) => format!(
                                "nothing it sent rank 0's collector was acknowledged for {:.0} s (--hang-timeout): rank 0's node is unreachable",
                                timeout.as_secs_f64()
                            ),
                            Some(e) => format!("its telemetry connection to rank 0's collector broke ({e}): rank 0 has ended"),
                            None => "rank 0's collector closed its telemetry connection: rank 0 has ended".to_string(),
                        });
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

struct Link {
    stream: TcpStream,
    queue: VecDeque<Vec<u8>>,
    /// Frame buffers not in the queue, kept for reuse: a sampler that recycles them never allocates.
    spare: Vec<Vec<u8>>,
    /// Bytes of the front frame already written.
    written: usize,
    drops: u64,
    broken: bool,
    /// Why the connection broke, when a write said.
    error: Option<std::io::Error>,
}

/// Room set aside per frame buffer: a whole frame of a small run; a frame of thousands of peers grows its
/// buffer once, and the buffer keeps that room.
fn frame_room(probe: &Probe) -> usize {
    let histogram = 2 + 6 * efatop_proto::telemetry::histogram::BUCKETS;
    let bound = 64 + probe.channel_count() * (24 + histogram) + probe.rank_count() * (48 + histogram);
    bound.min(64 << 10)
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
    fn new(stream: TcpStream, room: usize) -> Self {
        Self {
            stream,
            queue: VecDeque::with_capacity(QUEUE_FRAMES),
            // Every queue slot, plus the frame being built.
            spare: (0..=QUEUE_FRAMES).map(|_| Vec::with_capacity(room)).collect(),
            written: 0,
            drops: 0,
            broken: false,
            error: None,
        }
    }

    fn buffer(&mut self) -> Vec<u8> {
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

    fn push_bytes(&mut self, bytes: &[u8]) {
        let mut frame = self.buffer();
        frame.extend_from_slice(bytes);
        self.push_frame(frame);
    }

    fn push_frame(&mut self, frame: Vec<u8>) {
        if self.queue.len() == QUEUE_FRAMES {
            // Drop the oldest frame not yet started; a half-written one must be finished to keep framing.
            let victim = usize::from(self.written > 0);
            if let Some(dropped) = self.queue.remove(victim) {
                self.drops += 1;
                self.recycle(dropped);
            }
        }
        self.queue.push_back(frame);
    }

    fn flush(&mut self) {
        while let Some(front) = self.queue.front() {
            match self.stream.write(&front[self.written..]) {
                Ok(0) => {
                    self.broken = true;
                    return;
                }
                Ok(n) => {
                    self.written += n;
                    if self.written == front.len() {
                        if let Some(sent) = self.queue.pop_front() {
                            self.recycle(sent);
                        }
                        self.written = 0;
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
    pub fn connect(collector: SocketAddr) -> std::io::Result<Self> {
        let stream = TcpStream::connect_timeout(&collector, Duration::from_secs(10))?;
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        Ok(Self { link: Link::new(stream, 1024) })
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

pub use efatop_proto::events::CollectorEvent;

/// Rank 0's collector: a tokio runtime on its own thread, one task per rank connection.
///
/// Events reach the consumer in batches, not one by one: at 4096 ranks × 10 Hz, waking the consumer
/// thread for every sample would cost more than decoding it. Each connection's events keep their order
/// (a rank's last sample comes before its `Closed`), and a batch leaves at most [`BATCH_EVERY`] after its
/// first event arrived.
pub struct Collector {
    pub address: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

/// How long an event may wait in the collector for others to join its batch: far below what a person
/// can see on a dashboard redrawn every 100 ms.
pub const BATCH_EVERY: Duration = Duration::from_millis(10);

/// Events decoded since the last batch left; shared by the connection tasks of the collector's one thread.
type Pending = std::rc::Rc<std::cell::RefCell<Vec<CollectorEvent>>>;

impl Collector {
    /// Listens on all interfaces (ranks on other hosts connect too) and forwards events to `events`.
    pub fn start<E: From<Vec<CollectorEvent>> + Send + 'static>(events: Sender<E>) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build()?;
        // A large accept backlog: thousands of ranks connect at once when a big job starts.
        let listener = runtime.block_on(async {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.set_reuseaddr(true)?;
            socket.bind(SocketAddr::from(([0, 0, 0, 0], 0)))?;
            socket.listen(8192)
        })?;
        let address = listener.local_addr()?;
        let (shutdown, mut shutdown_rx) = tokio::sync::oneshot::channel::<()>();
        let handle = std::thread::Builder::new().name("efatop-collector".into()).spawn(move || {
            let local = tokio::task::LocalSet::new();
            let pending: Pending = Pending::default();
            local.spawn_local(forward_batches(pending.clone(), events));
            local.block_on(&runtime, async move {
                loop {
                    tokio::select! {
                        _ = &mut shutdown_rx => return,
                        accepted = listener.accept() => {
                            let Ok((stream, from)) = accepted else { continue };
                            let _ = stream.set_nodelay(true);
                            tokio::task::spawn_local(serve_connection(stream, from, pending.clone()));
                        }
                    }
                }
            });
        })?;
        Ok(Self { address, shutdown: Some(shutdown), handle: Some(handle) })
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

/// Hands what the connections decoded to the consumer, one batch every [`BATCH_EVERY`] at most.
async fn forward_batches<E: From<Vec<CollectorEvent>>>(pending: Pending, events: Sender<E>) {
    let mut tick = tokio::time::interval(BATCH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let batch = std::mem::take(&mut *pending.borrow_mut());
        if !batch.is_empty() && events.send(batch.into()).is_err() {
            return;
        }
    }
}

/// Room a connection keeps for reading: several frames of a 32-channel rank, so a rank that fell behind
/// catches up in few reads, while 4096 connections still hold only tens of MiB.
const READ_ROOM: usize = 8 * 1024;

/// Reads frames from one rank until it closes or sends a frame whose length cannot be trusted.
async fn serve_connection(mut stream: tokio::net::TcpStream, from: SocketAddr, pending: Pending) {
    let mut rank = None;
    let mut buffer: Vec<u8> = Vec::with_capacity(READ_ROOM);
    // Bytes at the front of `buffer` already decoded.
    let mut consumed = 0;
    'reading: loop {
        if consumed > 0 {
            buffer.drain(..consumed);
            consumed = 0;
        }
        // Reads go into spare capacity: nothing is zeroed first, which at 40K frames/s would cost more
        // than decoding them.
        if buffer.capacity() - buffer.len() < READ_ROOM / 2 {
            buffer.reserve(READ_ROOM);
        }
        match stream.read_buf(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        // Every complete frame in what has arrived; a partial one waits for the next read.
        while let Some(prefix) = buffer.get(consumed..consumed + 4) {
            let announced = u32::from_le_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
            let len = match wire::check_length(announced) {
                Ok(len) => len,
                Err(reason) => {
                    // The stream cannot be resynchronised after a bad length: drop the connection.
                    pending.borrow_mut().push(CollectorEvent::Malformed { from, reason });
                    break 'reading;
                }
            };
            let Some(body) = buffer.get(consumed + 4..consumed + 4 + len) else { break };
            let event = match wire::decode_frame(body) {
                Ok(wire::Frame::Rank(sample)) => {
                    rank = Some(sample.rank);
                    CollectorEvent::Sample(Box::new(sample))
                }
                Ok(wire::Frame::Node(sample)) => {
                    rank = Some(sample.rank);
                    CollectorEvent::Node(Box::new(sample))
                }
                Ok(wire::Frame::Phase(report)) => {
                    rank = Some(report.rank);
                    CollectorEvent::Phase(report)
                }
                Err(reason) => CollectorEvent::Malformed { from, reason },
            };
            pending.borrow_mut().push(event);
            consumed += 4 + len;
        }
    }
    pending.borrow_mut().push(CollectorEvent::Closed { from, rank });
}

/// Where rank `rank` should connect to reach rank 0's collector published as `host:port`.
pub fn resolve(published: &str, rank0_host: &str, my_host: &str) -> std::io::Result<SocketAddr> {
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
mod tests {
    use super::*;
    use efatop_proto::telemetry::wire::WireError;
    use std::sync::mpsc;

    /// The collector, and its events one by one (they arrive in batches).
    fn collector() -> (Collector, impl FnMut(Duration) -> Option<CollectorEvent>) {
        let (tx, rx) = mpsc::channel::<Vec<CollectorEvent>>();
        let mut queued = std::collections::VecDeque::new();
        let next = move |wait: Duration| {
            if queued.is_empty() {
                queued.extend(rx.recv_timeout(wait).ok()?);
            }
            queued.pop_front()
        };
        (Collector::start(tx).expect("collector"), next)
    }

    fn local(address: SocketAddr) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], address.port()))
    }

    #[test]
    fn malformed_frames_are_rejected_with_a_reason_and_good_ones_still_arrive() {
        let (collector, mut next_event) = collector();
        let mut stream = TcpStream::connect(local(collector.address)).expect("connect");
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
        let (collector, mut next_event) = collector();
        let mut sender = NodeSender::connect(local(collector.address)).expect("connect");
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
        let (collector, mut next_event) = collector();
        let probe = Arc::new(Probe::new(2, 2));
        let sampler = SamplerThread::start(1, probe.clone(), local(collector.address), Duration::from_millis(10))
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
        let (collector, mut next_event) = collector();
        let probe = Arc::new(Probe::new(1, 2));
        let sampler = SamplerThread::start(1, probe.clone(), local(collector.address), Duration::from_millis(10))
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
