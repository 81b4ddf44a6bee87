//! The plugins' server: one thread, one tokio event loop (current-thread runtime, a task per connection:
//! a few hundred bytes each, no thread and no stack of its own), so 32,768 plugins cost one core's
//! share of their messages and not 32,768 threads.
//!
//! A connection goes through three stages:
//! 1. **unproven**: the handshake (proto's, purpose `Nccl`), within [`Settings::handshake`] from the
//!    accept. Unproven connections live in their own budget ([`Settings::unproven`], and
//!    [`Settings::unproven_per_peer`] from one address): a newcomer that finds it full drops the oldest
//!    unproven connection (of its address first), counted as refused, once that one had its [`GRACE`]
//!    to prove itself (until then accepts wait in the kernel's queue). A flood of strangers thus costs a
//!    bounded amount and cannot crowd a plugin out: every connection taken has its grace, a plugin's
//!    handshake needs far less. Unproven connections never count against `max_plugins`.
//! 2. **proven**: counted against [`Settings::max_plugins`] (a plugin that finds no room is refused and
//!    counted).
//! 3. **reading**: the connection's bytes pass through its [`Opener`] (the decode stage: after the
//!    handshake, before frames are parsed): [`SealedFrames`] opens the records proto's seal made of them
//!    (AES-256-GCM under the keys of this connection's handshake), so a byte a relay changed, dropped,
//!    reordered or replayed fails its record; the connection is then dropped, counted
//!    ([`Counts::forged`]) and named ([`Counts::take_named`]), and nothing of that record or after it is
//!    folded. Then frames are cut and decoded within proto's caps. Reads go into one scratch buffer of the thread; a connection
//!    keeps only the part of a frame that has not arrived whole (most hold nothing between reads), all
//!    of them within [`Settings::buffered`].
//!
//! Decoded messages leave in batches ([`BATCH_EVERY`], [`BATCH_MAX`]) over a bounded channel: a fold
//! that falls behind stops the reads (the plugins' own queues then fill and count what they could not
//! send), it never makes the server hold more.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use efatop_auth::seal;
use efatop_auth::{Challenge, Secret, Session};
use efatop_proto::handshake::{Purpose, ANSWER_LEN, HEADER_LEN};
use efatop_proto::nccl::{self, PluginMessage};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::AbortHandle;

use super::{Inbound, Settings};

/// How long a decoded message may wait for others to join its batch.
pub const BATCH_EVERY: Duration = Duration::from_millis(10);
/// The most messages a batch holds; a full one leaves at once.
pub const BATCH_MAX: usize = 4096;
/// Batches in flight to the fold at most: past them the server's thread waits, and reads stop.
pub const BATCHES_IN_FLIGHT: usize = 16;
/// Communicators one plugin may announce on a connection (a process's communicators: its world, its
/// tensor-, pipeline- and data-parallel groups...); one that announces more is dropped.
pub const MAX_COMMS: usize = 1024;
/// Processes one relay may carry at once (a host's: a process per GPU, or per core on a CPU job); a
/// connection that relays more is dropped.
pub const MAX_LOCALS: usize = 256;
/// How long an unproven connection has to prove itself before a newcomer may take its place in a full
/// budget: a plugin's handshake is one round trip and a hash (well under a second even at a job's start,
/// when all its plugins connect at once), so it is never crowded out by a flood of strangers, and a
/// stranger holds its place no longer than this once the budget is full.
pub const GRACE: Duration = Duration::from_secs(1);
/// The thread's scratch buffer for reads.
const SCRATCH: usize = 256 << 10;
/// Refusals named and not yet taken ([`Counts::take_named`]) at most: past them they are counted alone.
pub const NAMED_MAX: usize = 64;

/// The server's counts, read from any thread.
#[derive(Debug, Default)]
pub struct Counts {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections that proved the token.
    pub proven: AtomicU64,
    /// Proven connections open now.
    pub live: AtomicU64,
    /// Connections that failed the handshake or its deadline (strangers).
    pub strangers: AtomicU64,
    /// Unproven connections dropped to make room for newer ones.
    pub evicted: AtomicU64,
    /// Proven connections refused for want of room (`max_plugins`).
    pub full: AtomicU64,
    /// Proven connections dropped for a frame past proto's caps, one that did not decode, too many
    /// communicators, or the buffers' budget.
    pub broken: AtomicU64,
    /// Proven connections dropped for a record that failed authentication (a byte changed, dropped,
    /// reordered or replayed on the way, or sealed under other keys).
    pub forged: AtomicU64,
    /// Messages decoded and handed to the fold.
    pub messages: AtomicU64,
    /// Why proven connections were dropped, one line each, naming the peer: [`NAMED_MAX`] waiting at most.
    named: Mutex<Vec<String>>,
}

impl Counts {
    /// Every connection refused: strangers, evicted, no room, broken, forged.
    pub fn refused(&self) -> u64 {
        [&self.strangers, &self.evicted, &self.full, &self.broken, &self.forged]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// The refusals named since the last call, oldest first (the watcher prints them).
    pub fn take_named(&self) -> Vec<String> {
        std::mem::take(&mut *self.named.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn name(&self, refusal: String) {
        let mut named = self.named.lock().unwrap_or_else(PoisonError::into_inner);
        if named.len() < NAMED_MAX {
            named.push(refusal);
        }
    }
}

/// The decode stage of a proven connection: its bytes as they arrive (`sealed`, opened in place) in, the
/// plain stream of frames out (appended to `plain`); a record that does not open refuses the connection
/// (the error: why).
pub trait Opener {
    fn open(&mut self, sealed: &mut [u8], plain: &mut Vec<u8>) -> Result<(), seal::SealError>;
    /// Bytes held between reads (a record not yet whole), charged to [`Settings::buffered`].
    fn holding(&self) -> usize;
}

/// The records of proto's seal ([`efatop_auth::seal`]), opened with the keys of the connection's
/// handshake: whole records are opened where they lie in the read buffer; only a record cut by the end of
/// a read is kept (one record's most, [`efatop_proto::handshake::MAX_RECORD`]) until the rest of it comes.
pub struct SealedFrames {
    opener: seal::Opener,
    /// The front of a record not yet whole.
    partial: Vec<u8>,
}

impl SealedFrames {
    pub fn new(session: Session) -> Self {
        Self { opener: session.opener, partial: Vec::new() }
    }
}

impl Opener for SealedFrames {
    fn open(&mut self, sealed: &mut [u8], plain: &mut Vec<u8>) -> Result<(), seal::SealError> {
        let mut rest = sealed;
        loop {
            if !self.partial.is_empty() {
                // The record cut by the last read: its length once its prefix is in.
                let want = seal::Opener::record_len(&self.partial)?.unwrap_or(HEADER_LEN);
                let take = (want - self.partial.len()).min(rest.len());
                self.partial.extend_from_slice(&rest[..take]);
                rest = &mut std::mem::take(&mut rest)[take..];
                if self.partial.len() < want {
                    if rest.is_empty() {
                        return Ok(());
                    }
                    continue;
                }
                if self.partial.len() == HEADER_LEN {
                    // Its prefix only: the length is known now.
                    continue;
                }
                plain.extend_from_slice(self.opener.open(&mut self.partial)?);
                // Most connections hold nothing between reads.
                self.partial = Vec::new();
                continue;
            }
            if rest.is_empty() {
                return Ok(());
            }
            let Some((took, range)) = self.opener.open_front(rest)? else {
                self.partial.extend_from_slice(rest);
                return Ok(());
            };
            plain.extend_from_slice(&rest[range]);
            rest = &mut std::mem::take(&mut rest)[took..];
        }
    }

    fn holding(&self) -> usize {
        self.partial.capacity()
    }
}

/// The watch server: listening, on a thread of its own, until dropped.
pub struct Server {
    pub address: SocketAddr,
    counts: Arc<Counts>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

/// The thread's name (benches pin it).
pub const THREAD: &str = "efatop-watchd";

impl Server {
    /// Binds `address` and serves the plugins that prove `secret`, handing what they send to `out` in
    /// batches. Fails only where the address cannot be bound.
    pub fn start(
        address: SocketAddr,
        secret: Secret,
        settings: Settings,
        out: SyncSender<Vec<Inbound>>,
    ) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        // A deep accept queue: a whole job's plugins connect within the same second when it starts.
        let listener = runtime.block_on(async {
            let socket = if address.is_ipv4() {
                tokio::net::TcpSocket::new_v4()?
            } else {
                tokio::net::TcpSocket::new_v6()?
            };
            socket.set_reuseaddr(true)?;
            socket.bind(address)?;
            socket.listen(8192)
        })?;
        let address = listener.local_addr()?;
        let (shutdown, mut stop) = tokio::sync::oneshot::channel::<()>();
        let counts = Arc::new(Counts::default());
        let shared = Arc::clone(&counts);
        let handle = std::thread::Builder::new()
            .name(THREAD.into())
            .spawn(move || {
                // The view first where the watcher has one core: a frame waits on nothing of this thread's
                // (sockets queue what it has not read yet), and this thread still gets every cycle left.
                crate::affinity::give_way_on_one_core();
                let local = tokio::task::LocalSet::new();
                let pending = Rc::new(Pending {
                    batch: RefCell::default(),
                    arrived: tokio::sync::Notify::new(),
                    out,
                    counts: Arc::clone(&shared),
                });
                let door = Rc::new(RefCell::new(Door::new(settings, secret, shared)));
                local.spawn_local(forward(Rc::clone(&pending)));
                local.block_on(&runtime, async move {
                    loop {
                        // A full budget whose oldest is still within its grace: accepts wait (the newcomers in
                        // the kernel's queue) until one proves itself, fails, or outlives its grace.
                        let full = door.borrow().full_for();
                        if let Some(wait) = full {
                            let freed = Rc::clone(&door.borrow().freed);
                            tokio::select! {
                                _ = &mut stop => return,
                                () = tokio::time::sleep(wait) => {}
                                () = freed.notified() => {}
                            }
                            continue;
                        }
                        tokio::select! {
                            _ = &mut stop => return,
                            accepted = listener.accept() => match accepted {
                                Ok((stream, from)) => Door::admit(&door, &pending, stream, from),
                                // Out of file descriptors (or memory): the connection waits in the queue.
                                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                            },
                        }
                    }
                });
            })?;
        Ok(Self {
            address,
            counts,
            shutdown: Some(shutdown),
            handle: Some(handle),
        })
    }

    pub fn counts(&self) -> &Arc<Counts> {
        &self.counts
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// The batch being gathered.
struct Pending {
    batch: RefCell<Vec<Inbound>>,
    arrived: tokio::sync::Notify,
    out: SyncSender<Vec<Inbound>>,
    counts: Arc<Counts>,
}

impl Pending {
    fn push(&self, inbound: Inbound) {
        if matches!(inbound, Inbound::Message(..)) {
            self.counts.messages.fetch_add(1, Ordering::Relaxed);
        }
        let full = {
            let mut batch = self.batch.borrow_mut();
            batch.push(inbound);
            (batch.len() >= BATCH_MAX)
                .then(|| std::mem::replace(&mut *batch, Vec::with_capacity(BATCH_MAX)))
        };
        match full {
            // Waits while the fold has BATCHES_IN_FLIGHT to take: the reads stop with it. A fold gone
            // (the watcher ending) is `forward`'s to notice.
            Some(batch) => {
                let _ = self.out.send(batch);
            }
            None => self.arrived.notify_one(),
        }
    }
}

/// A batch leaves [`BATCH_EVERY`] after its first message arrived; nothing pending, nothing wakes.
async fn forward(pending: Rc<Pending>) {
    loop {
        pending.arrived.notified().await;
        if pending.batch.borrow().is_empty() {
            continue;
        }
        tokio::time::sleep(BATCH_EVERY).await;
        let batch = std::mem::take(&mut *pending.batch.borrow_mut());
        if !batch.is_empty() && pending.out.send(batch).is_err() {
            return;
        }
    }
}

/// What the connections share (the server's one thread).
struct Door {
    settings: Settings,
    secret: Secret,
    counts: Arc<Counts>,
    next_conn: u64,
    /// Connections in their handshake, oldest first, with their address, when they came and the means to
    /// drop them.
    unproven: BTreeMap<u64, (IpAddr, Instant, AbortHandle)>,
    /// Told when a connection leaves the unproven budget.
    freed: Rc<tokio::sync::Notify>,
    /// The same, by address.
    by_peer: HashMap<IpAddr, VecDeque<u64>>,
    /// Proven connections open.
    proven: usize,
    /// Bytes the proven connections hold between reads.
    buffered: usize,
    /// The thread's read buffer.
    scratch: Rc<RefCell<Vec<u8>>>,
}

impl Door {
    fn new(settings: Settings, secret: Secret, counts: Arc<Counts>) -> Self {
        Self {
            settings,
            secret,
            counts,
            next_conn: 0,
            unproven: BTreeMap::new(),
            freed: Rc::new(tokio::sync::Notify::new()),
            by_peer: HashMap::new(),
            proven: 0,
            buffered: 0,
            scratch: Rc::new(RefCell::new(vec![0; SCRATCH])),
        }
    }

    /// How long accepts wait: the budget is full and its oldest connection still has this long of its
    /// grace; `None` where a newcomer can be taken now.
    fn full_for(&self) -> Option<Duration> {
        if self.unproven.len() < self.settings.unproven {
            return None;
        }
        let (_, (_, came, _)) = self.unproven.first_key_value()?;
        GRACE
            .checked_sub(came.elapsed())
            .filter(|left| !left.is_zero())
    }

    /// A new connection: room made in the unproven budget (the oldest of its address, else the oldest of
    /// all, dropped: past its grace, [`Door::full_for`] made sure), then its handshake started. A
    /// newcomer whose address has its whole share in handshakes younger than their grace is dropped
    /// itself.
    fn admit(
        door: &Rc<RefCell<Self>>,
        pending: &Rc<Pending>,
        stream: tokio::net::TcpStream,
        from: SocketAddr,
    ) {
        let mut this = door.borrow_mut();
        this.counts.accepted.fetch_add(1, Ordering::Relaxed);
        let peer = from.ip();
        let oldest_of_peer = this
            .by_peer
            .get(&peer)
            .filter(|ids| ids.len() >= this.settings.unproven_per_peer)
            .and_then(|ids| ids.front().copied());
        if let Some(id) = oldest_of_peer {
            if this
                .unproven
                .get(&id)
                .is_some_and(|(_, came, _)| came.elapsed() < GRACE)
            {
                this.counts.evicted.fetch_add(1, Ordering::Relaxed);
                pending.push(Inbound::Refused);
                return;
            }
            this.evict(id, pending);
        }
        if this.unproven.len() >= this.settings.unproven {
            if let Some(id) = this.unproven.keys().next().copied() {
                this.evict(id, pending);
            }
        }
        this.next_conn += 1;
        let id = this.next_conn;
        let _ = stream.set_nodelay(true);
        let task =
            tokio::task::spawn_local(connection(stream, id, Rc::clone(door), Rc::clone(pending)));
        this.unproven
            .insert(id, (peer, Instant::now(), task.abort_handle()));
        this.by_peer.entry(peer).or_default().push_back(id);
    }

    /// Takes `id` out of the unproven budget; false when it is not there (it was dropped).
    fn forget(&mut self, id: u64) -> Option<AbortHandle> {
        let (peer, _, task) = self.unproven.remove(&id)?;
        self.freed.notify_one();
        if let Some(ids) = self.by_peer.get_mut(&peer) {
            ids.retain(|&other| other != id);
            if ids.is_empty() {
                self.by_peer.remove(&peer);
            }
        }
        Some(task)
    }

    fn evict(&mut self, id: u64, pending: &Pending) {
        if let Some(task) = self.forget(id) {
            task.abort();
            self.counts.evicted.fetch_add(1, Ordering::Relaxed);
            pending.push(Inbound::Refused);
        }
    }
}

/// The listener's side of proto's handshake (purpose `Nccl`): the plugin proves the token, and learns
/// that the watcher holds it too; the keys that open what it sends next.
async fn handshake(
    stream: &mut tokio::net::TcpStream,
    secret: &Secret,
) -> Result<Session, String> {
    let (challenge, hello) = Challenge::new(Purpose::Nccl).map_err(|e| e.to_string())?;
    stream.write_all(&hello).await.map_err(|e| e.to_string())?;
    let mut answer = [0u8; ANSWER_LEN];
    stream
        .read_exact(&mut answer)
        .await
        .map_err(|e| e.to_string())?;
    let proof = challenge
        .check(secret, &answer)
        .map_err(|e| e.to_string())?;
    stream.write_all(&proof).await.map_err(|e| e.to_string())?;
    Ok(challenge.session(secret, &answer))
}

/// One connection, from its accept to its end.
async fn connection(
    mut stream: tokio::net::TcpStream,
    id: u64,
    door: Rc<RefCell<Door>>,
    pending: Rc<Pending>,
) {
    let (secret, deadline) = {
        let door = door.borrow();
        (door.secret.clone(), door.settings.handshake)
    };
    // One deadline for the whole handshake: a peer that trickles a byte now and then is cut at it.
    let session = match tokio::time::timeout(deadline, handshake(&mut stream, &secret)).await {
        Ok(Ok(session)) => Some(session),
        _ => None,
    };
    let session = {
        let mut this = door.borrow_mut();
        // Not in the budget any more: dropped to make room (and counted) while this poll was queued.
        if this.forget(id).is_none() {
            return;
        }
        let Some(session) = session else {
            this.counts.strangers.fetch_add(1, Ordering::Relaxed);
            pending.push(Inbound::Refused);
            return;
        };
        if this.proven >= this.settings.max_plugins {
            this.counts.full.fetch_add(1, Ordering::Relaxed);
            pending.push(Inbound::Refused);
            return;
        }
        this.proven += 1;
        this.counts.proven.fetch_add(1, Ordering::Relaxed);
        this.counts.live.fetch_add(1, Ordering::Relaxed);
        session
    };
    let mut opener = SealedFrames::new(session);
    let mut relayed = Relayed::default();
    let ended = read_frames(&stream, id, &door, &pending, &mut opener, &mut relayed).await;
    let mut this = door.borrow_mut();
    this.proven -= 1;
    this.counts.live.fetch_sub(1, Ordering::Relaxed);
    let peer = stream.peer_addr().map_or_else(|_| "a plugin".to_string(), |peer| peer.to_string());
    // The processes a relay carried end with its connection.
    for (_, conn) in relayed.locals.drain() {
        pending.push(Inbound::Closed(conn));
    }
    match ended {
        Ended::Closed => pending.push(Inbound::Closed(id)),
        Ended::Broken(why) => {
            this.counts.broken.fetch_add(1, Ordering::Relaxed);
            this.counts.name(format!("dropped {peer}: {why}"));
            pending.push(Inbound::Closed(id));
        }
        Ended::Forged(err) => {
            // A refusal: counted among the refused, and nothing of the record or after it folded.
            this.counts.forged.fetch_add(1, Ordering::Relaxed);
            this.counts.name(format!("refused {peer}: {err}; its connection was dropped"));
            pending.push(Inbound::Closed(id));
            pending.push(Inbound::Refused);
        }
    }
}

/// The processes a host's relay carries on one connection: each is a connection of its own to the fold
/// (a number from the same count as the connections'), from its first relayed message to its `Left` or
/// the relay's end; its communicators are bounded as a connection's are.
#[derive(Default)]
struct Relayed {
    locals: HashMap<u32, u64>,
    comms: HashMap<u64, Vec<(u64, u32)>>,
}

impl Relayed {
    /// Where `message`, read on connection `id`, goes: the connection (or relayed process) it is from and
    /// the message itself; `Ok(None)` for a message that only ends a relayed process (pushed here).
    fn route(&mut self, id: u64, message: PluginMessage, door: &RefCell<Door>, pending: &Pending) -> Result<Option<(u64, PluginMessage)>, String> {
        let (conn, message) = match message {
            PluginMessage::Relayed { local, message } => {
                if matches!(*message, PluginMessage::Relayed { .. } | PluginMessage::Left { .. }) {
                    return Err("a relayed message inside another".into());
                }
                let conn = match self.locals.get(&local) {
                    Some(conn) => *conn,
                    None if self.locals.len() >= MAX_LOCALS => return Err(format!("a relay of more than {MAX_LOCALS} processes")),
                    None => {
                        let mut door = door.borrow_mut();
                        door.next_conn += 1;
                        self.locals.insert(local, door.next_conn);
                        door.next_conn
                    }
                };
                (conn, *message)
            }
            PluginMessage::Left { local } => {
                if let Some(conn) = self.locals.remove(&local) {
                    self.comms.remove(&conn);
                    pending.push(Inbound::Closed(conn));
                }
                return Ok(None);
            }
            message => (id, message),
        };
        if let PluginMessage::Comm { info } = &message {
            let key = (info.comm, info.rank);
            let comms = self.comms.entry(conn).or_default();
            if !comms.contains(&key) {
                if comms.len() >= MAX_COMMS {
                    return Err(format!("more than {MAX_COMMS} communicators"));
                }
                comms.push(key);
            }
        }
        Ok(Some((conn, message)))
    }
}

/// How a proven connection ended.
enum Ended {
    /// The plugin closed it (or the socket failed).
    Closed,
    /// It broke a rule: why.
    Broken(String),
    /// A record failed authentication.
    Forged(seal::SealError),
}

/// Reads a proven connection until it closes, breaks a rule or sends a record that does not open.
async fn read_frames(
    stream: &tokio::net::TcpStream,
    id: u64,
    door: &Rc<RefCell<Door>>,
    pending: &Pending,
    opener: &mut impl Opener,
    relayed: &mut Relayed,
) -> Ended {
    let scratch = Rc::clone(&door.borrow().scratch);
    let mut plain: Vec<u8> = Vec::new();
    // Bytes of the buffers' budget this connection holds.
    let mut charged = 0;
    let outcome = 'reading: loop {
        if stream.readable().await.is_err() {
            break Ended::Closed;
        }
        {
            let mut scratch = scratch.borrow_mut();
            match stream.try_read(&mut scratch) {
                Ok(0) => break Ended::Closed,
                Ok(n) => {
                    if let Err(err) = opener.open(&mut scratch[..n], &mut plain) {
                        break Ended::Forged(err);
                    }
                }
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => break Ended::Closed,
            }
        }
        let mut at = 0;
        while plain.len() - at >= 4 {
            let len = u32::from_le_bytes([plain[at], plain[at + 1], plain[at + 2], plain[at + 3]]);
            if len > nccl::MAX_MESSAGE {
                break 'reading Ended::Broken(format!(
                    "a frame of {len} bytes; a plugin's are at most {}",
                    nccl::MAX_MESSAGE
                ));
            }
            let end = at + 4 + len as usize;
            if plain.len() < end {
                break;
            }
            let message = match nccl::decode(&plain[at + 4..end]) {
                Ok(message) => message,
                Err(err) => break 'reading Ended::Broken(err.to_string()),
            };
            match relayed.route(id, message, door, pending) {
                Ok(Some((conn, message))) => pending.push(Inbound::Message(conn, message)),
                Ok(None) => {}
                Err(why) => break 'reading Ended::Broken(why),
            }
            at = end;
        }
        if at == plain.len() {
            // Most reads end on a whole frame: nothing held until the next.
            plain = Vec::new();
        } else if at > 0 {
            plain.drain(..at);
        }
        let mut this = door.borrow_mut();
        let holds = plain.capacity() + opener.holding();
        this.buffered = this.buffered - charged + holds;
        charged = holds;
        if this.buffered > this.settings.buffered {
            break Ended::Broken(format!(
                "the connections' buffers are at their budget of {} MiB",
                this.settings.buffered >> 20
            ));
        }
    };
    door.borrow_mut().buffered -= charged;
    outcome
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    use efatop_auth as auth;
    use efatop_proto::nccl::Origin;
    use efatop_auth::seal::Sealer;

    use super::*;

    fn hello_frame(host: &str) -> Vec<u8> {
        let origin = Origin { host: host.into(), pid: 7, gpu: None, nccl_version: None, abi: 6, plugin_version: "t".into() };
        let mut out = Vec::new();
        nccl::encode(&PluginMessage::Hello { origin }, &mut out).expect("encode");
        out
    }

    fn sealed(sealer: &mut Sealer, frame: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        sealer.seal(frame, &mut out).expect("seal");
        out
    }

    /// A plugin's side of a connection: the handshake, then the keys it seals its frames with.
    fn plugin(address: SocketAddr, secret: &Secret) -> Result<(TcpStream, Sealer), auth::AuthError> {
        let mut stream = TcpStream::connect(address)?;
        stream.set_read_timeout(Some(Duration::from_secs(20)))?;
        let session = auth::connect_session(&mut stream, secret, Purpose::Nccl)?;
        Ok((stream, session.sealer))
    }

    fn start(settings: Settings) -> (Server, Secret, std::sync::mpsc::Receiver<Vec<Inbound>>) {
        let secret = Secret::generate().expect("secret");
        let (tx, rx) = std::sync::mpsc::sync_channel(BATCHES_IN_FLIGHT);
        let server = Server::start("127.0.0.1:0".parse().expect("address"), secret.clone(), settings, tx).expect("server");
        (server, secret, rx)
    }

    /// Batches until `done` holds over all of them (20 s at most).
    fn until(rx: &std::sync::mpsc::Receiver<Vec<Inbound>>, got: &mut Vec<Inbound>, done: impl Fn(&[Inbound]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done(got) {
            let left = deadline.checked_duration_since(Instant::now()).unwrap_or_else(|| panic!("not within 20 s: {got:?}"));
            if let Ok(batch) = rx.recv_timeout(left) {
                got.extend(batch);
            }
        }
    }

    fn hello_from(got: &[Inbound], host: &str) -> bool {
        got.iter().any(|i| matches!(i, Inbound::Message(_, PluginMessage::Hello { origin }) if origin.host == host))
    }

    fn wait_for(what: &str, counts: &Counts, done: impl Fn(&Counts) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done(counts) {
            assert!(Instant::now() < deadline, "{what}: {counts:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Strangers filling the unproven budget from one address are dropped and counted, and a plugin from
    /// another address that proves the token gets in and is read; one with the wrong token is refused.
    #[test]
    fn strangers_are_dropped_and_counted_and_never_keep_a_plugin_out() {
        let (server, secret, rx) = start(Settings { unproven: 4, unproven_per_peer: 2, ..Settings::default() });
        let strangers: Vec<TcpStream> = (0..10).map(|_| TcpStream::connect(server.address).expect("connect")).collect();
        // Each stranger past the address's two waits, then is dropped: counted as it goes.
        wait_for("the strangers past the address's share are dropped", server.counts(), |c| c.evicted.load(Ordering::Relaxed) >= 8);
        // The plugin comes from the strangers' address: it may find their share full and within its grace,
        // and then tries again, as the plugin does.
        let deadline = Instant::now() + Duration::from_secs(30);
        let (mut stream, mut sealer) = loop {
            if let Ok(plugin) = plugin(server.address, &secret) {
                break plugin;
            }
            assert!(Instant::now() < deadline, "the plugin never got in: {:?}", server.counts());
            std::thread::sleep(Duration::from_millis(100));
        };
        stream.write_all(&sealed(&mut sealer, &hello_frame("node-a"))).expect("write");
        let mut impostor = TcpStream::connect(server.address).expect("connect");
        impostor.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
        assert!(auth::connect(&mut impostor, &Secret::generate().expect("secret"), Purpose::Nccl).is_err());
        let mut got = Vec::new();
        until(&rx, &mut got, |got| hello_from(got, "node-a"));
        let counts = server.counts();
        assert_eq!(counts.proven.load(Ordering::Relaxed), 1, "{counts:?}");
        assert_eq!(counts.live.load(Ordering::Relaxed), 1, "{counts:?}");
        // The two strangers the budget held fail their deadline, and the impostor its proof: all counted.
        wait_for("the strangers held and the impostor are counted", counts, |c| c.strangers.load(Ordering::Relaxed) >= 2 && c.refused() >= 11);
        drop(strangers);
    }

    /// Started on one core (`taskset -c N efatop watch`), the server's thread gives way to the view: the
    /// kernel shows it [`crate::affinity::GIVE_WAY_NICE`] nicer than the thread that started it.
    #[test]
    fn on_one_core_the_servers_thread_runs_nicer_than_the_view() {
        let field19 = crate::affinity::proc_nice;
        let view = field19("/proc/thread-self/stat");
        let one = crate::affinity::allowed_cpus()[0];
        let (_server, _secret, _rx) = std::thread::spawn(move || {
            assert!(crate::affinity::pin_thread(None, [one]));
            start(Settings::default())
        })
        .join()
        .expect("the starting thread");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let found = std::fs::read_dir("/proc/self/task").expect("/proc/self/task").flatten().find_map(|task| {
                let name = std::fs::read_to_string(task.path().join("comm")).ok()?;
                (name.trim_end() == THREAD).then(|| field19(&format!("{}/stat", task.path().display())))
            });
            // Tests run in parallel: another test's server thread has the same name and the same nice.
            match found {
                Some(nice) if nice == (view + crate::affinity::GIVE_WAY_NICE).min(19) => return,
                Some(nice) if nice != view => panic!("the server's thread runs at nice {nice}, the view at {view}"),
                _ => {}
            }
            assert!(Instant::now() < deadline, "the server's thread never gave way (the view at nice {view})");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Records cut anywhere by the reads (a byte at a time, two and a half records at once) open to the same
    /// frames; a changed byte anywhere in a record refuses it.
    #[test]
    fn sealed_frames_open_across_any_cut_and_refuse_a_changed_byte() {
        let session = || auth::Session::derive(&Secret::from_bytes([3; 32]), Purpose::Nccl, &[1; 32], &[2; 32], auth::Side::Listener);
        let mut sealer = auth::Session::derive(&Secret::from_bytes([3; 32]), Purpose::Nccl, &[1; 32], &[2; 32], auth::Side::Caller).sealer;
        let frames: Vec<Vec<u8>> = ["node-a", "node-b", "node-c"].iter().map(|h| hello_frame(h)).collect();
        let wire: Vec<u8> = frames.iter().flat_map(|f| sealed(&mut sealer, f)).collect();
        let whole: Vec<u8> = frames.concat();
        for cut in [1, 2, 3, 4, 5, 7, 19, 64, wire.len() * 5 / 2 / 3, wire.len()] {
            let mut opener = SealedFrames::new(session());
            let mut plain = Vec::new();
            for piece in wire.chunks(cut) {
                opener.open(&mut piece.to_vec(), &mut plain).expect("opens");
            }
            assert_eq!(plain, whole, "cut every {cut} bytes");
            assert_eq!(opener.holding(), 0, "nothing held after the last record");
        }
        for at in [0, 3, 4, 20, wire.len() / 3 - 1] {
            let mut forged = wire.clone();
            forged[at] ^= 1;
            let mut plain = Vec::new();
            assert!(SealedFrames::new(session()).open(&mut forged, &mut plain).is_err(), "byte {at} changed went unseen");
            assert!(plain.is_empty(), "nothing of a forged first record comes out");
        }
    }

    /// A plugin's sealed frames, however the network cuts them, are folded; a relay's changed byte after the
    /// handshake is a refusal: counted, named with the peer, the connection dropped, nothing of it folded.
    #[test]
    fn sealed_frames_are_folded_and_a_changed_byte_is_refused_named_and_never_folded() {
        let (server, secret, rx) = start(Settings::default());
        let (mut stream, mut sealer) = plugin(server.address, &secret).expect("the plugin proves the token");
        stream.set_nodelay(true).expect("nodelay");
        // The hello a byte at a time: the watcher opens it once whole.
        for byte in sealed(&mut sealer, &hello_frame("node-a")) {
            stream.write_all(&[byte]).expect("write");
        }
        let mut got = Vec::new();
        until(&rx, &mut got, |got| hello_from(got, "node-a"));
        let mut forged = sealed(&mut sealer, &hello_frame("forged"));
        forged[HEADER_LEN + 10] ^= 0x20;
        stream.write_all(&forged).expect("write");
        let counts = server.counts();
        wait_for("the forged record is refused", counts, |c| c.forged.load(Ordering::Relaxed) == 1);
        let named = counts.take_named();
        let local = stream.local_addr().expect("address").to_string();
        assert!(named.iter().any(|n| n.contains(&local) && n.contains("frame failed authentication")), "{named:?}");
        // The watcher dropped it: the stream ends.
        assert!(matches!(stream.read(&mut [0u8; 16]), Ok(0) | Err(_)));
        until(&rx, &mut got, |got| got.iter().any(|i| matches!(i, Inbound::Refused)));
        assert!(!hello_from(&got, "forged"), "a forged frame was folded: {got:?}");
        assert_eq!((counts.live.load(Ordering::Relaxed), counts.broken.load(Ordering::Relaxed)), (0, 0), "{counts:?}");
        // Frames sent in the clear after a good handshake are no records: refused the same.
        let (mut clear, _) = plugin(server.address, &secret).expect("the plugin proves the token");
        clear.write_all(&hello_frame("in-the-clear")).expect("write");
        wait_for("the frame in the clear is refused", counts, |c| c.forged.load(Ordering::Relaxed) == 2);
        assert!(!hello_from(&got, "in-the-clear"));
    }

    fn relayed_frame(local: u32, message: PluginMessage) -> Vec<u8> {
        let mut out = Vec::new();
        nccl::encode(&PluginMessage::Relayed { local, message: Box::new(message) }, &mut out).expect("encode");
        out
    }

    fn hello_message(host: &str) -> PluginMessage {
        PluginMessage::Hello { origin: Origin { host: host.into(), pid: 8, gpu: None, nccl_version: None, abi: 6, plugin_version: "t".into() } }
    }

    /// A host's relay: each process it carries reaches the fold as a connection of its own, ends with its
    /// `Left` or with the relay's connection; a relay nesting relayed messages, or carrying more processes
    /// than a host has, is dropped and counted.
    #[test]
    fn a_relays_processes_are_connections_of_their_own_and_end_with_it() {
        let (server, secret, rx) = start(Settings::default());
        let (mut stream, mut sealer) = plugin(server.address, &secret).expect("the relay proves the token");
        let mut wire = hello_frame("node-a");
        wire.extend(relayed_frame(1, hello_message("node-a-1")));
        wire.extend(relayed_frame(2, hello_message("node-a-2")));
        wire.extend(relayed_frame(2, PluginMessage::Health { t_ms: 5, events: 1, dropped: 0, unsent: 0, unmatched: 0 }));
        stream.write_all(&sealed(&mut sealer, &wire)).expect("write");
        let mut got = Vec::new();
        until(&rx, &mut got, |got| hello_from(got, "node-a-2") && got.iter().any(|i| matches!(i, Inbound::Message(_, PluginMessage::Health { .. }))));
        let conn_of = |got: &[Inbound], host: &str| got.iter().find_map(|i| match i { Inbound::Message(c, PluginMessage::Hello { origin }) if origin.host == host => Some(*c), _ => None }).expect("hello");
        let (relay, one, two) = (conn_of(&got, "node-a"), conn_of(&got, "node-a-1"), conn_of(&got, "node-a-2"));
        assert!(relay != one && one != two && relay != two, "{got:?}");
        assert!(got.iter().any(|i| matches!(i, Inbound::Message(c, PluginMessage::Health { .. }) if *c == two)), "the health is process 2's: {got:?}");
        let mut left = Vec::new();
        nccl::encode(&PluginMessage::Left { local: 1 }, &mut left).expect("encode");
        stream.write_all(&sealed(&mut sealer, &left)).expect("write");
        until(&rx, &mut got, |got| got.iter().any(|i| matches!(i, Inbound::Closed(c) if *c == one)));
        assert!(!got.iter().any(|i| matches!(i, Inbound::Closed(c) if *c == two || *c == relay)), "{got:?}");
        drop(stream);
        until(&rx, &mut got, |got| [two, relay].iter().all(|c| got.iter().any(|i| matches!(i, Inbound::Closed(d) if d == c))));
        let counts = server.counts();
        assert_eq!((counts.proven.load(Ordering::Relaxed), counts.broken.load(Ordering::Relaxed)), (1, 0), "{counts:?}");

        // Nested: dropped, counted and named; nothing inside folded.
        let (mut stream, mut sealer) = plugin(server.address, &secret).expect("proves");
        let nested = relayed_frame(1, PluginMessage::Relayed { local: 2, message: Box::new(hello_message("nested")) });
        stream.write_all(&sealed(&mut sealer, &nested)).expect("write");
        wait_for("a nested relay is dropped", counts, |c| c.broken.load(Ordering::Relaxed) == 1);
        assert!(counts.take_named().iter().any(|n| n.contains("inside another")));
        // More processes than a host has: dropped at the one past the cap.
        let (mut stream, mut sealer) = plugin(server.address, &secret).expect("proves");
        let many: Vec<u8> = (0..=MAX_LOCALS as u32).flat_map(|l| relayed_frame(l, PluginMessage::Health { t_ms: 1, events: 0, dropped: 0, unsent: 0, unmatched: 0 })).collect();
        for chunk in many.chunks(60_000) {
            if stream.write_all(&sealed(&mut sealer, chunk)).is_err() {
                break;
            }
        }
        wait_for("a relay of too many processes is dropped", counts, |c| c.broken.load(Ordering::Relaxed) == 2);
        assert!(counts.take_named().iter().any(|n| n.contains(&format!("more than {MAX_LOCALS} processes"))));
        until(&rx, &mut got, |got| got.iter().filter(|i| matches!(i, Inbound::Message(_, PluginMessage::Health { t_ms: 1, .. }))).count() == MAX_LOCALS);
        assert!(!hello_from(&got, "nested"));
    }

    /// Tricklers (a byte every 300 ms) fill the unproven budget and are cut at the handshake's one deadline,
    /// not kept by their bytes, and never take a place among the plugins: with room for one plugin, the
    /// plugin gets in past them.
    #[test]
    fn tricklers_are_cut_at_the_deadline_and_never_count_against_max_plugins() {
        let settings = Settings { max_plugins: 1, unproven: 8, handshake: Duration::from_secs(1), ..Settings::default() };
        let (server, secret, rx) = start(settings);
        let tricklers: Vec<_> = (0..4)
            .map(|_| {
                let address = server.address;
                std::thread::spawn(move || {
                    let started = Instant::now();
                    let mut stream = TcpStream::connect(address).expect("connect");
                    stream.set_read_timeout(Some(Duration::from_millis(300))).expect("timeout");
                    let mut hello = [0u8; efatop_proto::handshake::HELLO_LEN];
                    let mut sink = [0u8; 256];
                    let _ = stream.read(&mut hello);
                    while started.elapsed() < Duration::from_secs(20) {
                        if stream.write_all(&[0]).is_err() {
                            return started.elapsed();
                        }
                        match stream.read(&mut sink) {
                            Ok(0) => return started.elapsed(),
                            Err(err) if !matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => return started.elapsed(),
                            _ => {}
                        }
                    }
                    panic!("a trickler was kept for 20 s");
                })
            })
            .collect();
        let (mut stream, mut sealer) = plugin(server.address, &secret).expect("the plugin gets in past the tricklers");
        stream.write_all(&sealed(&mut sealer, &hello_frame("node-a"))).expect("write");
        let mut got = Vec::new();
        until(&rx, &mut got, |got| hello_from(got, "node-a"));
        for trickler in tricklers {
            let cut = trickler.join().expect("trickler");
            assert!(cut >= Duration::from_millis(900) && cut < Duration::from_secs(10), "cut after {cut:?}");
        }
        let counts = server.counts();
        wait_for("the tricklers are counted as strangers", counts, |c| c.strangers.load(Ordering::Relaxed) == 4);
        assert_eq!((counts.proven.load(Ordering::Relaxed), counts.full.load(Ordering::Relaxed)), (1, 0), "{counts:?}");
    }
}
