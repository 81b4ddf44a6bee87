//! `--serve ADDR` and `--record FILE` on rank 0: the run's events, as its own consumer folds them, go to
//! any number of viewers (`efatop attach`) and into a recording (`efatop replay`).
//!
//! Rank 0's loop (`rank_zero.rs`) hands each event to [`Outlets::publish`], which serializes it once,
//! appends it to the recording and offers it to every viewer's queue. Nothing here is on the hot path or in
//! the collector.
//!
//! Viewers never slow the run: each has a bounded queue that its own thread writes out. When a viewer
//! does not keep up, telemetry batches meant for it are dropped and counted, and the count is sent to it
//! before its next message; the run's other events (steps, measurements, notes, the end: a few per size)
//! are always queued, so a slow viewer still ends with every measurement. Nothing is read from a viewer
//! but its handshake line. A viewer that joins late first gets the run's start, a recent sample of
//! every rank (at most a second older than its latest; a served monitor's latest read of every node) and
//! every other event so far, then the live stream.
//!
//! Who may watch: a viewer first proves the user's token ([`efatop_auth::secret::user_token`], purpose
//! `Viewer`) and says its hello line, all within one deadline ([`crate::handshake`]); connections that have
//! proved nothing wait in a budget of their own ([`MAX_VIEWERS`] at once, the oldest dropped to make room for
//! a new one), apart from the viewers, of which at most [`MAX_VIEWERS`] are served at once, each write
//! bounded by [`WRITE_WAIT`]. Anyone else is dropped and counted.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicUsize, Ordering};

use efatop_experiments::ExperimentError;
use efatop_auth::{self as auth, Secret, Session};
use efatop_proto::handshake::Purpose;
use efatop_proto::stream::{self, Hello, StreamMessage};

use crate::handshake::{self, Deadline, Lobby, PER_PEER};
use efatop_proto::events::CollectorEvent;
use efatop_proto::events::{ConsumerEvent, RunStart};
use efatop_proto::recording::Recorder;
use efatop_files::OutputError;

/// Telemetry batches a viewer may have waiting (a batch leaves the collector at most every 10 ms): a few
/// seconds of a small run.
const QUEUE_BATCHES: usize = 512;
/// Bytes of telemetry a viewer may have waiting, whatever the batches' size.
const QUEUE_BYTES: usize = 32 << 20;
/// Viewers served at once (each has a thread and a queue); more are refused.
pub const MAX_VIEWERS: usize = 16;
/// A write to a viewer that has not completed in this long ends that viewer: it has stopped reading.
const WRITE_WAIT: Duration = Duration::from_secs(10);
/// At the run's end, viewers get this long to take the last events, as long as they keep taking them...
const DRAIN_LIMIT: Duration = Duration::from_secs(2);
/// ... and a viewer that took nothing for this long is left behind; one whose write has been stuck this
/// long already (it stopped reading) is left behind at once.
const DRAIN_STALL: Duration = Duration::from_millis(100);

type Frame = Arc<Vec<u8>>;

/// How old a rank's sample a late joiner may get first (then the live stream): a copy of every sample
/// kept for late joiners cost rank 0's one core a tenth of itself at 4096 hosts × 8 ranks at 10 Hz; one a
/// second per rank costs a tenth of that.
const LATEST_EVERY_US: u64 = 1_000_000;

/// Rank 0's outlets for the run's events: the server and the recording. Rank 0's loop hands them each
/// event ([`Outlets::publish`]): serialized once, appended to the recording, offered to every viewer's queue.
pub struct Outlets {
    pub serving: Option<SocketAddr>,
    /// Where the token viewers must prove came from (the header says).
    pub viewers_token: Option<efatop_auth::Source>,
    hub: Arc<Hub>,
    /// Where the recording goes; it is created when the run starts ([`Outlets::begin`]), so a run refused
    /// during its setup leaves no file.
    record: Option<PathBuf>,
    recorder: Option<Recorder>,
    started: Instant,
    frame: Vec<u8>,
}

impl Outlets {
    /// Binds `serve` (printing where, on stderr); `None` when neither it nor `record` is asked for.
    pub fn open(serve: Option<SocketAddr>, record: Option<&Path>, started: Instant) -> Result<Option<Self>, ExperimentError> {
        if serve.is_none() && record.is_none() {
            return Ok(None);
        }
        let hub = Arc::new(Hub::default());
        let mut viewers_token = None;
        let serving = match serve {
            Some(address) => {
                let token = efatop_auth::secret::user_token(true)
                    .map_err(|message| ExperimentError::InvalidInput { flag: "--serve", message: format!("the viewers' token: {message}") })?;
                let listener = TcpListener::bind(address).map_err(|err| ExperimentError::InvalidInput {
                    flag: "--serve",
                    message: format!("cannot listen on {address}: {err}"),
                })?;
                let bound = listener.local_addr().map_err(|err| ExperimentError::Bootstrap(format!("--serve: {err}")))?;
                let hub = hub.clone();
                std::thread::Builder::new()
                    .name("efatop-serve".into())
                    .spawn({
                        let secret = token.secret.clone();
                        move || accept(&listener, &hub, &secret)
                    })
                    .map_err(|err| ExperimentError::Bootstrap(format!("--serve: {err}")))?;
                if bound.ip().is_loopback() {
                    eprintln!("efatop: serving the run on {bound}");
                } else {
                    eprintln!("efatop: serving the run on {bound} (beyond this host: to whoever reaches it and holds the token)");
                }
                viewers_token = Some(token.source);
                Some(bound)
            }
            None => None,
        };
        Ok(Some(Self { serving, viewers_token, hub, record: record.map(Path::to_path_buf), recorder: None, started, frame: Vec::new() }))
    }

    /// The run has started: the recording is created and the run's start goes out first.
    pub fn begin(&mut self, start: RunStart) -> Result<(), ExperimentError> {
        if let Some(path) = self.record.take() {
            self.recorder =
                Some(create_recording(&path).map_err(|err| ExperimentError::InvalidInput { flag: "--record", message: err.to_string() })?);
        }
        self.publish(&ConsumerEvent::Run(Box::new(start)));
        Ok(())
    }

    /// One event, serialized once for the viewers and the recording. Times are since the run started.
    pub fn publish(&mut self, event: &ConsumerEvent) {
        let t_us = self.started.elapsed().as_micros() as u64;
        self.frame.clear();
        if stream::encode_event(t_us, event, &mut self.frame).is_err() {
            return;
        }
        let durable = !matches!(event, ConsumerEvent::Telemetry(_));
        if let Some(recorder) = &mut self.recorder {
            recorder.add(&self.frame, durable);
        }
        // Only a server has viewers to queue for and late joiners to keep every rank's latest sample for
        // (a copy of every sample: at 4096 hosts a third of a million a second that `--record` alone needs not).
        if self.serving.is_some() {
            self.hub.publish(event, t_us, &self.frame);
        }
    }

    /// After the run's last event (its end): the recording is sealed, and viewers get a moment to take the
    /// last events (bounded; a stalled viewer is left behind at once).
    pub fn finish(mut self) {
        drop(self.recorder.take());
        self.hub.end();
        let now = Instant::now();
        let deadline = now + DRAIN_LIMIT;
        let viewers = self.hub.state().viewers.clone();
        for viewer in viewers {
            loop {
                let (pending, stuck, taken_at) = {
                    let queue = viewer.queue();
                    // A write that has not returned for a while: the viewer has stopped reading.
                    let stuck = queue.writing && queue.taken_at.elapsed() >= DRAIN_STALL;
                    (!queue.frames.is_empty() || queue.writing, stuck, queue.taken_at)
                };
                if !pending || stuck || Instant::now() >= deadline || taken_at.max(now).elapsed() >= DRAIN_STALL {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

/// What the publisher and the viewers share: what a late joiner is sent first, and the viewers' queues.
#[derive(Default)]
struct Hub {
    state: Mutex<HubState>,
}

#[derive(Default)]
struct HubState {
    /// The run's start, as sent.
    run: Option<Frame>,
    /// Every event but telemetry, as sent, in order.
    history: Vec<Frame>,
    /// Every rank's latest sample (and a served monitor's every node's latest read), each with when it was
    /// kept: a rank's sample is kept again at most every [`LATEST_EVERY_US`].
    latest: BTreeMap<(bool, u32), (u64, CollectorEvent)>,
    latest_t_us: u64,
    viewers: Vec<Arc<Viewer>>,
    ended: bool,
}

impl Hub {
    fn state(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn publish(&self, event: &ConsumerEvent, t_us: u64, frame: &[u8]) {
        let frame: Frame = Arc::new(frame.to_vec());
        let mut state = self.state();
        let durable = match event {
            ConsumerEvent::Run(_) => {
                state.run = Some(frame.clone());
                true
            }
            ConsumerEvent::Telemetry(batch) => {
                for telemetry in batch {
                    let key = match telemetry {
                        CollectorEvent::Sample(sample) => (false, sample.rank),
                        CollectorEvent::Node(sample) => (true, sample.rank),
                        _ => continue,
                    };
                    match state.latest.get_mut(&key) {
                        // A node's read (a served monitor's, a second apart) is always kept.
                        Some((kept_at, _)) if !key.0 && t_us.saturating_sub(*kept_at) < LATEST_EVERY_US => {}
                        Some(kept) => *kept = (t_us, telemetry.clone()),
                        None => {
                            state.latest.insert(key, (t_us, telemetry.clone()));
                        }
                    }
                }
                state.latest_t_us = t_us;
                false
            }
            _ => {
                state.history.push(frame.clone());
                true
            }
        };
        state.viewers.retain(|viewer| viewer.offer(&frame, durable));
    }

    /// A viewer that has shaken hands: what the run has said so far, then everything from now on.
    fn join(&self, viewer: &Arc<Viewer>) {
        let mut state = self.state();
        if let Some(run) = &state.run {
            viewer.offer(run, true);
            if !state.latest.is_empty() {
                let samples = state.latest.values().map(|(_, telemetry)| telemetry.clone()).collect();
                let mut frame = Vec::new();
                if stream::encode_event(state.latest_t_us, &ConsumerEvent::Telemetry(samples), &mut frame).is_ok() {
                    viewer.offer(&Arc::new(frame), true);
                }
            }
        }
        for frame in &state.history {
            viewer.offer(frame, true);
        }
        if state.ended {
            viewer.end();
        } else {
            state.viewers.push(viewer.clone());
        }
    }

    fn end(&self) {
        let mut state = self.state();
        state.ended = true;
        for viewer in &state.viewers {
            viewer.end();
        }
    }
}

/// One viewer's queue, filled by the publisher and emptied by the viewer's own thread.
struct Viewer {
    queue: Mutex<Queue>,
    ready: Condvar,
}

struct Queue {
    /// Frames and whether each may be dropped (telemetry).
    frames: VecDeque<(Frame, bool)>,
    droppable: usize,
    droppable_bytes: usize,
    /// Telemetry batches dropped for this viewer so far.
    dropped: u64,
    /// The viewer's thread is writing what it took.
    writing: bool,
    /// When the viewer's thread last took frames.
    taken_at: Instant,
    /// The run has no more events.
    ended: bool,
    /// The viewer has gone.
    closed: bool,
}

impl Viewer {
    fn new() -> Self {
        let queue = Queue {
            frames: VecDeque::new(),
            droppable: 0,
            droppable_bytes: 0,
            dropped: 0,
            writing: false,
            taken_at: Instant::now(),
            ended: false,
            closed: false,
        };
        Self { queue: Mutex::new(queue), ready: Condvar::new() }
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `frame` unless it is telemetry and the queue is full (then it is counted); false once the
    /// viewer has gone.
    fn offer(&self, frame: &Frame, durable: bool) -> bool {
        let mut queue = self.queue();
        if queue.closed {
            return false;
        }
        if !durable {
            if queue.droppable >= QUEUE_BATCHES || queue.droppable_bytes + frame.len() > QUEUE_BYTES {
                queue.dropped += 1;
                return true;
            }
            queue.droppable += 1;
            queue.droppable_bytes += frame.len();
        }
        queue.frames.push_back((frame.clone(), !durable));
        drop(queue);
        self.ready.notify_one();
        true
    }

    fn end(&self) {
        self.queue().ended = true;
        self.ready.notify_one();
    }

    /// Writes the queue out until the run has ended and everything is sent, or the viewer goes.
    fn write_out(&self, stream: &mut impl Write) {
        let mut dropped_told = 0;
        let mut message = Vec::new();
        loop {
            let (frames, dropped) = {
                let mut queue = self.queue();
                while queue.frames.is_empty() && !queue.ended {
                    queue = self.ready.wait(queue).unwrap_or_else(PoisonError::into_inner);
                }
                if queue.frames.is_empty() {
                    return;
                }
                queue.droppable = 0;
                queue.droppable_bytes = 0;
                queue.writing = true;
                queue.taken_at = Instant::now();
                (std::mem::take(&mut queue.frames), queue.dropped)
            };
            let mut written = Ok(());
            if dropped > dropped_told {
                dropped_told = dropped;
                message.clear();
                if stream::encode(&StreamMessage::Dropped { total: dropped }, &mut message).is_ok() {
                    written = stream.write_all(&message);
                }
            }
            for (frame, _) in &frames {
                if written.is_err() {
                    break;
                }
                written = stream.write_all(frame);
            }
            let mut queue = self.queue();
            queue.writing = false;
            queue.taken_at = Instant::now();
            if written.is_err() {
                queue.closed = true;
                queue.frames.clear();
                return;
            }
        }
    }
}

/// Viewers being served, and connections still in their handshake ([`Lobby`]): each bounded on its own, so
/// that strangers who say nothing never take a viewer's place, nor keep a viewer from proving itself (a
/// full lobby drops its oldest for the newcomer).
struct Door {
    viewers: AtomicUsize,
    handshakes: Lobby,
    refused: AtomicUsize,
}

/// Takes one of `count`'s `cap` places; false when all are taken.
/// `--record`'s file: a fresh one renamed into place ([`efatop_files::create_for_appending`]: a link at
/// `path` is refused), then the recording's first line.
fn create_recording(path: &Path) -> Result<Recorder, OutputError> {
    let file = efatop_files::create_for_appending(path)?;
    Recorder::start(path, file).map_err(|source| OutputError::Io { path: path.to_path_buf(), source })
}

fn take_place(count: &AtomicUsize, cap: usize) -> bool {
    count.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < cap).then_some(n + 1)).is_ok()
}

fn accept(listener: &TcpListener, hub: &Arc<Hub>, secret: &Secret) {
    let door = Arc::new(Door { viewers: AtomicUsize::new(0), handshakes: Lobby::new(MAX_VIEWERS, PER_PEER), refused: AtomicUsize::new(0) });
    loop {
        let Ok((stream, from)) = listener.accept() else { continue };
        let seat = match door.handshakes.enter(&stream, from) {
            Ok(seat) => seat,
            Err(err) => {
                refuse(&door.refused, &stream, &err.to_string());
                continue;
            }
        };
        let (hub, secret, door) = (hub.clone(), secret.clone(), door.clone());
        let _ = std::thread::Builder::new().name("efatop-viewer".into()).spawn(move || serve_viewer(stream, seat, &hub, &secret, &door));
    }
}

/// Counts a refused viewer; the first few are told on stderr (a flood is only counted).
fn refuse(refused: &AtomicUsize, stream: &TcpStream, why: &str) {
    let count = refused.fetch_add(1, Ordering::SeqCst) + 1;
    if count <= 5 || count.is_power_of_two() {
        let from = stream.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
        eprintln!("efatop: warning: --serve: refused a viewer from {from} ({why}); {count} refused so far");
    }
}

/// One viewer: its proof of the token and its handshake line (one deadline for both), ours, then the run's
/// events until they end or the viewer goes.
fn serve_viewer(stream: TcpStream, seat: crate::handshake::Seat, hub: &Hub, secret: &Secret, door: &Door) {
    let _ = stream.set_nodelay(true);
    let deadline = handshake::deadline();
    let mut within = handshake::admitting(deadline, &stream, seat);
    let proven = auth::accept_session(&mut within, secret, Purpose::Viewer).map_err(|err| within.why(err));
    drop(within);
    let session = match proven {
        Ok(session) => session,
        Err(why) => {
            refuse(&door.refused, &stream, &why);
            return;
        }
    };
    if !take_place(&door.viewers, MAX_VIEWERS) {
        refuse(&door.refused, &stream, &format!("{MAX_VIEWERS} viewers are served already"));
        return;
    }
    serve_admitted(stream, deadline, session, hub, door);
    door.viewers.fetch_sub(1, Ordering::SeqCst);
}

/// A viewer that proved the token: its handshake line (by `deadline`), ours, then the run's events, every
/// byte both ways sealed under the keys of its handshake. A record of the viewer's that fails its check is
/// a refusal.
fn serve_admitted(stream: TcpStream, deadline: Deadline, session: Session, hub: &Hub, door: &Door) {
    let from = stream.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
    let Ok(socket) = stream.try_clone() else { return };
    let (reader, mut writer) = session.wrap(deadline.on(&socket), stream, &format!("the viewer at {from}"));
    let mut line = Vec::new();
    {
        let mut reader = BufReader::new(reader.take(stream::MAX_HELLO as u64));
        if let Err(err) = reader.read_until(b'\n', &mut line) {
            if err.kind() == std::io::ErrorKind::InvalidData {
                refuse(&door.refused, &socket, &err.to_string());
            }
            return;
        }
    }
    if socket.set_read_timeout(None).is_err() {
        return;
    }
    let Hello::Efatop { version } = stream::parse_hello(&line, stream::MAGIC) else { return };
    // Both sides say their version; on a mismatch the viewer names both and leaves.
    if writer.write_all(stream::hello().as_bytes()).is_err() || version != stream::VERSION {
        return;
    }
    if socket.set_write_timeout(Some(WRITE_WAIT)).is_err() {
        return;
    }
    let viewer = Arc::new(Viewer::new());
    hub.join(&viewer);
    viewer.write_out(&mut writer);
    let _ = socket.shutdown(std::net::Shutdown::Both);
}

/// `efatop monitor --serve/--record` on one node: each read goes out as the node frame a many-node
/// monitor sends rank 0 ([`efatop_proto::telemetry::NodeSample`]), in a telemetry batch of its own.
pub struct MonitorStream {
    outlets: Outlets,
    seq: u64,
}

impl MonitorStream {
    /// The outlets `serve` and `record` ask for, fed from here; `None` when neither is asked for.
    pub fn open(serve: Option<SocketAddr>, record: Option<&Path>, host: &str, interval: Duration) -> Result<Option<Self>, (i32, String)> {
        let failed = |err: ExperimentError| (err.exit_code(), err.to_string());
        let opened = Outlets::open(serve, record, Instant::now()).map_err(failed)?;
        let Some(mut outlets) = opened else { return Ok(None) };
        let start = RunStart {
            info: efatop_proto::events::RunInfo { experiment: MONITOR, ranks: 1, hosts: vec![host.to_string()], ..Default::default() },
            results: efatop_proto::RunResults {
                metadata: efatop_proto::RunMetadata {
                    efatop_version: env!("CARGO_PKG_VERSION").into(),
                    experiment: MONITOR,
                    ranks: 1,
                    hosts: vec![host.to_string()],
                    ..Default::default()
                },
                ..Default::default()
            },
            serving: outlets.serving,
            interval_ms: interval.as_millis() as u64,
            ..RunStart::default()
        };
        outlets.begin(start).map_err(failed)?;
        Ok(Some(Self { outlets, seq: 0 }))
    }

    pub fn send(&mut self, snapshot: &efatop_proto::telemetry::NodeSample) {
        self.seq += 1;
        let sample = snapshot.clone().sent_as(0, self.seq, 0);
        self.outlets.publish(&ConsumerEvent::Telemetry(vec![CollectorEvent::Node(Box::new(sample))]));
    }

    /// The monitor's end, told to viewers and the recording.
    pub fn finish(mut self) {
        self.outlets.publish(&ConsumerEvent::Finished { error: None });
        self.outlets.finish();
    }
}

/// `RunInfo::experiment` of a served or recorded `efatop monitor`.
pub const MONITOR: efatop_proto::Experiment = efatop_proto::Experiment::Monitor;

#[cfg(test)]
mod tests {
    use super::*;
    use efatop_proto::telemetry::{NodeSample, RankSample};

    /// What a viewer joining now is sent first of the ranks' and nodes' telemetry: (rank or node, seq).
    fn first_telemetry(hub: &Hub) -> Vec<(bool, u32, u64)> {
        let viewer = Arc::new(Viewer::new());
        hub.join(&viewer);
        let queue = viewer.queue();
        let (frame, _) = queue.frames.get(1).expect("the run's start, then the telemetry kept");
        let Ok(Some(StreamMessage::Event { event: ConsumerEvent::Telemetry(batch), .. })) = stream::read_message(&mut frame.as_slice()) else {
            panic!("not a telemetry batch")
        };
        batch
            .iter()
            .map(|event| match event {
                CollectorEvent::Sample(sample) => (false, sample.rank, sample.seq),
                CollectorEvent::Node(read) => (true, read.rank, read.seq),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// A late joiner first gets every rank's sample kept at most a second apart (a copy of every sample of
    /// a fleet's was a tenth of rank 0's core), and every node's latest read.
    #[test]
    fn late_joiners_get_a_sample_of_every_rank_at_most_a_second_old_and_every_nodes_latest_read() {
        let hub = Hub::default();
        hub.state().run = Some(Arc::new(Vec::new()));
        let publish = |t_ms: u64, seq: u64| {
            let batch = vec![
                CollectorEvent::Sample(Box::new(RankSample { rank: 3, seq, ..RankSample::default() })),
                CollectorEvent::Node(Box::new(NodeSample { host: "n".into(), ..NodeSample::default() }.sent_as(5, seq, 0))),
            ];
            hub.publish(&ConsumerEvent::Telemetry(batch), t_ms * 1000, &[]);
        };
        publish(0, 1);
        publish(400, 2);
        assert_eq!(first_telemetry(&hub), [(false, 3, 1), (true, 5, 2)]);
        publish(900, 3);
        publish(1000, 4);
        assert_eq!(first_telemetry(&hub), [(false, 3, 4), (true, 5, 4)]);
        publish(1500, 5);
        assert_eq!(first_telemetry(&hub), [(false, 3, 4), (true, 5, 5)]);
    }
}
