//! A host's telemetry relay: on every host but rank 0's that runs more than one rank, the host's lowest rank
//! (its leader) takes the telemetry of the host's ranks, its own included, over loopback and forwards it to
//! rank 0's collector over one connection, once an interval (once every few beyond 2048 relays:
//! [`Plan::forward_every`]). Rank 0 then reads one connection a host
//! instead of one a rank: at 4096 p5 hosts, 4,096 connections and about 41,000 reads a second instead of
//! 32,768 and 328,000, which cost rank 0's one core about half of itself in the kernel.
//!
//! What stays as it was:
//! - **Who may talk.** A local connection proves the run's secret as a connection to rank 0 does; one that
//!   does not, one beyond the host's ranks, or one that speaks for a rank not on this host or already
//!   spoken for is dropped and counted ([`Relay::refused`]), never ends the run.
//! - **Frames.** Forwarded byte for byte once checked (their kind, length and rank): rank 0 decodes and
//!   bounds them as it does a rank's own.
//! - **A rank that ends.** When a rank's connection to the relay closes, the relay tells rank 0 at once
//!   with a [`wire::KIND_RANK_GONE`] frame, which rank 0 takes as that rank's connection closing. When the
//!   relay itself goes (its rank died), rank 0 sees its connection close and names the leader, whose hello
//!   the relay sends first.
//! - **Rank 0 gone.** The relay watches rank 0 as a rank's sampler does (`TCP_USER_TIMEOUT` of
//!   `--hang-timeout`); once rank 0 is gone it tells its own rank why and closes every local connection, so
//!   every rank of the host learns it too.
//! - **Never blocking on rank 0.** Its connection to rank 0 is non-blocking with a bounded queue of
//!   batches; when that is full the oldest batch is dropped and counted.
//!
//! What changes: a sample reaches rank 0 up to one forwarding period later (it waits in the relay for the
//! host's batch); a rank's end is told at once.

use std::cell::{Cell, RefCell};
use std::net::{SocketAddr, TcpListener};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use efatop_auth::Secret;
use efatop_proto::telemetry::wire;
use efatop_proto::telemetry::{PhaseReport, WorldBounds};
use tokio::io::AsyncReadExt;

use crate::collector::{Link, RankZeroWatch, READ_ROOM, Unsealing, admit, dial, next_tick, why_lost};
use crate::handshake::{Lobby, PER_PEER, Seat};

/// How long a relay that was asked to finish waits for its host's ranks to close (their last samples).
pub const FINISH_WITHIN: Duration = Duration::from_secs(3);
/// Connections that have proved nothing, at once, beyond the host's ranks: a newer one takes the oldest
/// one's place.
const SPARE_HANDSHAKES: usize = 8;
/// While batches wait for rank 0, the relay tries again this often.
const RETRY_EVERY: Duration = Duration::from_millis(10);

/// Which relay carries a rank's telemetry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The host's lowest rank, which runs the relay.
    pub leader: usize,
    /// Every rank of the host, the leader first.
    pub ranks: Vec<u32>,
}

impl Plan {
    /// The relay of `rank`'s host: for a host other than rank 0's that runs more than one rank of the run
    /// (hosts as the run names them: an emulated node is a host of its own). None: the rank talks to rank
    /// 0's collector itself.
    pub fn of(hosts: &[String], rank: usize) -> Option<Self> {
        let host = hosts.get(rank)?;
        let ranks: Vec<u32> = hosts.iter().enumerate().filter(|(_, other)| *other == host).map(|(r, _)| r as u32).collect();
        Self::relayed(hosts, host, ranks.len()).then(|| Self { leader: ranks[0] as usize, ranks })
    }

    /// The rule, for both [`Plan::of`] and [`Plan::leaders`]: a host other than rank 0's with more than one
    /// rank of the run has a relay.
    fn relayed(hosts: &[String], host: &str, ranks_on_host: usize) -> bool {
        hosts.first().is_some_and(|rank0| rank0 != host) && ranks_on_host > 1
    }

    /// Every relay's rank of a run on `hosts`, ascending: [`Plan::of`] for the whole run at once.
    pub fn leaders(hosts: &[String]) -> Vec<usize> {
        let mut ranks_on: std::collections::HashMap<&str, (usize, usize)> = std::collections::HashMap::new();
        for (rank, host) in hosts.iter().enumerate() {
            ranks_on.entry(host.as_str()).or_insert((rank, 0)).1 += 1;
        }
        let mut leaders: Vec<usize> =
            ranks_on.into_iter().filter(|(host, (_, count))| Self::relayed(hosts, host, *count)).map(|(_, (first, _))| first).collect();
        leaders.sort_unstable();
        leaders
    }

    /// How often a relay forwards, with `relays` of them in the run: every sampling interval, and every
    /// further interval per 2048 relays (at most 1 s), so that rank 0 reads at most about 2048 relays'
    /// writes an interval. A read costs rank 0 about as much as the frames it holds (measured on an H200
    /// host at 4096 relays: rank 0's collector took 43 % of its core with a write an interval, 31 % with
    /// one every two; docs/measurements.md).
    pub fn forward_every(interval: Duration, relays: usize) -> Duration {
        let intervals = relays.div_ceil(2048).max(1) as u32;
        (interval * intervals).min(Duration::from_secs(1).max(interval))
    }

    /// How the relay is named to its host's ranks, in what they say when it goes.
    pub fn describe(&self) -> String {
        format!("rank {}'s telemetry relay", self.leader)
    }
}

/// A relay's listener, bound before the run's ranks learn where it is.
pub struct RelayListener {
    listener: TcpListener,
    pub address: SocketAddr,
}

impl RelayListener {
    /// Listens on loopback: only the host's own ranks connect.
    pub fn bind() -> std::io::Result<Self> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        Ok(Self { listener, address })
    }

    /// Connects to rank 0's collector at `upstream` (proving the run's secret) and starts relaying for
    /// `plan`'s ranks, bounded by the run's `bounds`, forwarding once every `interval` (see
    /// [`Plan::forward_every`]). `watch`: told once,
    /// with why, if rank 0 is gone while the relay runs.
    pub fn start(
        self,
        plan: Plan,
        upstream: SocketAddr,
        secret: &Secret,
        bounds: WorldBounds,
        interval: Duration,
        watch: Option<RankZeroWatch>,
    ) -> std::io::Result<Relay> {
        let (stream, sealer) = dial(upstream, secret)?;
        let (timeout, lost) = match watch {
            Some(RankZeroWatch { timeout, lost, .. }) => {
                let millis = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
                nix::sys::socket::setsockopt(&stream, nix::sys::socket::sockopt::TcpUserTimeout, &millis).map_err(std::io::Error::from)?;
                (timeout, Some(lost))
            }
            None => (Duration::ZERO, None),
        };
        let max_frame = bounds.max_frame() as usize;
        let mut link = Link::new(stream, sealer, 64);
        // The leader's hello first: if the relay goes, rank 0 names the leader.
        link.push_bytes(&wire::encode_phase(&PhaseReport { rank: plan.leader as u32, changes: 0, phase: 0, bytes: 0 }));
        link.flush();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build()?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(self.listener)?
        };
        let refused = Arc::new(AtomicU64::new(0));
        let dropped = Arc::new(AtomicU64::new(0));
        let (finish, finish_rx) = tokio::sync::oneshot::channel::<Instant>();
        let state = Shared { plan, bounds, max_frame, secret: secret.clone(), refused: refused.clone() };
        let counted = dropped.clone();
        let handle = std::thread::Builder::new().name(format!("efatop-relay-{}", state.plan.leader)).spawn(move || {
            let local = tokio::task::LocalSet::new();
            local.block_on(&runtime, relay(listener, link, Rc::new(State::new(state)), interval, finish_rx, counted, timeout, lost));
        })?;
        Ok(Relay { address: self.address, refused, dropped, finish: Some(finish), handle: Some(handle) })
    }
}

/// A running relay. Dropping it finishes it ([`Relay::finish`]).
pub struct Relay {
    pub address: SocketAddr,
    refused: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
    finish: Option<tokio::sync::oneshot::Sender<Instant>>,
    handle: Option<JoinHandle<()>>,
}

impl Relay {
    /// Connections refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Batches dropped because rank 0 did not take them in time.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Waits, at most `within`, for the host's ranks to close and for what they sent to reach rank 0; then
    /// closes the connection to rank 0.
    pub fn finish(mut self, within: Duration) {
        self.stop(within);
    }

    fn stop(&mut self, within: Duration) {
        if let Some(finish) = self.finish.take() {
            let _ = finish.send(Instant::now() + within);
        }
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop(FINISH_WITHIN);
    }
}

/// What the relay's tasks know of the run.
struct Shared {
    plan: Plan,
    bounds: WorldBounds,
    max_frame: usize,
    secret: Secret,
    refused: Arc<AtomicU64>,
}

/// What the relay's tasks share (its one thread).
struct State {
    run: Shared,
    /// Frames gathered since the last forward, byte for byte.
    batch: RefCell<Vec<u8>>,
    /// A rank closed: forward at once.
    urgent: tokio::sync::Notify,
    /// The connection speaking for each of the host's ranks, by its place in the plan.
    owners: RefCell<Vec<Option<u64>>>,
    /// Connections open (handshaking or admitted), those admitted, and the last one's number.
    open: Cell<usize>,
    admitted: Cell<usize>,
    numbered: Cell<u64>,
    /// Connections that have proved nothing yet.
    lobby: Lobby,
}

impl State {
    fn new(run: Shared) -> Self {
        let ranks = run.plan.ranks.len();
        Self {
            run,
            batch: RefCell::new(Vec::with_capacity(ranks * READ_ROOM)),
            urgent: tokio::sync::Notify::new(),
            owners: RefCell::new(vec![None; ranks]),
            open: Cell::new(0),
            admitted: Cell::new(0),
            numbered: Cell::new(0),
            lobby: Lobby::new(ranks + SPARE_HANDSHAKES, PER_PEER),
        }
    }

    fn refuse(&self, from: SocketAddr, why: &str) {
        let total = self.run.refused.fetch_add(1, Ordering::Relaxed) + 1;
        // The first few, then every hundredth: a flood does not flood stderr.
        if total <= 3 || total % 100 == 0 {
            eprintln!("efatop: {}: refused a connection from {from} ({why}); {total} refused so far", self.run.plan.describe());
        }
    }
}

/// The relay's one thread: accepts the host's ranks, forwards their frames every `interval` (and at once
/// when a rank closed), until rank 0 is gone or it is asked to finish.
#[allow(clippy::too_many_arguments)]
async fn relay(
    listener: tokio::net::TcpListener,
    mut link: Link,
    state: Rc<State>,
    interval: Duration,
    mut finish: tokio::sync::oneshot::Receiver<Instant>,
    dropped: Arc<AtomicU64>,
    timeout: Duration,
    mut lost: Option<Box<dyn FnOnce(String) + Send>>,
) {
    // The host's samplers sample on the ticks of the interval (`first_tick`); the relay forwards a little
    // after a tick, once their samples are in, so that a sample waits here milliseconds, not up to a period.
    let lag = (interval / 10).clamp(Duration::from_millis(1), Duration::from_millis(20));
    let after_tick = || tokio::time::Instant::from_std(next_tick(interval) + lag);
    let mut next = after_tick();
    let mut deadline: Option<Instant> = None;
    let mut accepting = true;
    loop {
        tokio::select! {
            accepted = listener.accept(), if accepting => {
                if let Ok((stream, from)) = accepted {
                    if state.admitted.get() >= state.run.plan.ranks.len() {
                        state.refuse(from, "every rank of the host is connected already");
                    } else {
                        match state.lobby.enter(&stream, from) {
                            Ok(seat) => {
                                state.open.set(state.open.get() + 1);
                                tokio::task::spawn_local(serve_local(stream, from, seat, state.clone()));
                            }
                            Err(err) => state.refuse(from, &err.to_string()),
                        }
                    }
                }
                continue;
            }
            () = tokio::time::sleep_until(next) => {}
            () = state.urgent.notified() => {}
            when = &mut finish, if deadline.is_none() => {
                deadline = Some(when.unwrap_or_else(|_| Instant::now()));
                accepting = false;
            }
        }
        let batch = std::mem::take(&mut *state.batch.borrow_mut());
        if !batch.is_empty() {
            let before = link.drops;
            link.push_frame(batch);
            dropped.fetch_add(link.drops - before, Ordering::Relaxed);
        }
        link.flush();
        if link.broken {
            // Rank 0 is gone. Its own rank hears why; the host's ranks see their connections close.
            if deadline.is_none() {
                if let Some(lost) = lost.take() {
                    lost(why_lost(link.error.as_ref(), timeout, None));
                }
            }
            return;
        }
        if let Some(deadline) = deadline {
            let closed = state.open.get() == 0 && state.batch.borrow().is_empty();
            if (closed && link.queue.is_empty()) || Instant::now() >= deadline {
                return;
            }
            next = tokio::time::Instant::now() + RETRY_EVERY;
            continue;
        }
        let now = tokio::time::Instant::now();
        next = if link.queue.is_empty() { after_tick() } else { now + RETRY_EVERY };
    }
}

/// One local connection: its handshake, then its frames, checked and added to the batch, until it closes.
/// The ranks it spoke for are then told gone.
async fn serve_local(mut stream: tokio::net::TcpStream, from: SocketAddr, seat: Seat, state: Rc<State>) {
    let number = state.numbered.get() + 1;
    state.numbered.set(number);
    let opener = match admit(&mut stream, seat, &state.run.secret).await {
        Ok(opener) => opener,
        Err(why) => {
            state.open.set(state.open.get() - 1);
            state.refuse(from, &why);
            return;
        }
    };
    state.admitted.set(state.admitted.get() + 1);
    let mut claimed: Vec<usize> = Vec::new();
    let refused = read_local(&mut stream, Unsealing::new(opener), number, &state, &mut claimed).await;
    drop(stream);
    state.admitted.set(state.admitted.get() - 1);
    {
        let mut owners = state.owners.borrow_mut();
        let mut batch = state.batch.borrow_mut();
        for &at in &claimed {
            owners[at] = None;
            batch.extend_from_slice(&wire::encode_gone(state.run.plan.ranks[at]));
        }
    }
    state.open.set(state.open.get() - 1);
    if let Some(why) = refused {
        state.refuse(from, &why);
    }
    state.urgent.notify_one();
}

/// Reads a local connection's frames into the batch; why it broke a rule, if it did.
async fn read_local(stream: &mut tokio::net::TcpStream, mut sealed: Unsealing, number: u64, state: &State, claimed: &mut Vec<usize>) -> Option<String> {
    let mut buffer: Vec<u8> = Vec::with_capacity(READ_ROOM);
    sealed.raw.reserve(READ_ROOM);
    loop {
        if sealed.raw.capacity() - sealed.raw.len() < READ_ROOM / 2 {
            sealed.raw.reserve(READ_ROOM);
        }
        match stream.read_buf(&mut sealed.raw).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
        // A record that fails its check ends the connection, refused: nothing of it is forwarded.
        if let Err(err) = sealed.open_into(&mut buffer) {
            return Some(err.to_string());
        }
        let mut consumed = 0;
        loop {
            let (len, body) = match wire::split_frame(&buffer[consumed..], state.run.max_frame) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(why) => return Some(why.to_string()),
            };
            let rank = match wire::decode_frame(body) {
                Ok(wire::Frame::Rank(sample)) => match sample.outside(state.run.bounds) {
                    Some(outside) => return Some(outside.to_string()),
                    None => sample.rank,
                },
                Ok(wire::Frame::Phase(report)) => report.rank,
                Ok(wire::Frame::Node(_) | wire::Frame::Gone(_)) => return Some("a frame only rank 0 takes, not a rank's".to_string()),
                Err(reason) => return Some(format!("a malformed frame ({reason})")),
            };
            let Some(at) = state.run.plan.ranks.iter().position(|&mine| mine == rank) else {
                return Some(format!("a frame of rank {rank}, which does not run on this host"));
            };
            if !claimed.contains(&at) {
                let mut owners = state.owners.borrow_mut();
                if owners[at].is_some() {
                    return Some(format!("rank {rank} is connected already; it keeps its first connection"));
                }
                owners[at] = Some(number);
                claimed.push(at);
            }
            state.batch.borrow_mut().extend_from_slice(&buffer[consumed..consumed + len]);
            consumed += len;
        }
        buffer.drain(..consumed);
    }
}

#[cfg(test)]
mod tests;
