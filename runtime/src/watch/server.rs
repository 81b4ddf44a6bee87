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
//!    handshake, before frames are parsed; where records sealed per frame are opened), then frames are
//!    cut and decoded within proto's caps. Reads go into one scratch buffer of the thread; a connection
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
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use efatop_proto::auth::{Challenge, Purpose, Secret, ANSWER_LEN, PROOF_LEN};
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
/// How long an unproven connection has to prove itself before a newcomer may take its place in a full
/// budget: a plugin's handshake is one round trip and a hash (well under a second even at a job's start,
/// when all its plugins connect at once), so it is never crowded out by a flood of strangers, and a
/// stranger holds its place no longer than this once the budget is full.
pub const GRACE: Duration = Duration::from_secs(1);
/// The thread's scratch buffer for reads.
const SCRATCH: usize = 256 << 10;

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
    /// Messages decoded and handed to the fold.
    pub messages: AtomicU64,
}

impl Counts {
    /// Every connection refused: strangers, evicted, no room, broken.
    pub fn refused(&self) -> u64 {
        [&self.strangers, &self.evicted, &self.full, &self.broken]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }
}

/// The decode stage of a proven connection: its bytes as they arrive (`sealed`) in, the plain stream of
/// frames out (appended to `plain`). Without per-frame protection the bytes are the frames
/// ([`PlainFrames`]); a sealing stage opens each record here, keyed by the handshake, and refuses the
/// connection (an error) on a record that does not open.
pub trait Opener {
    fn open(&mut self, sealed: &[u8], plain: &mut Vec<u8>) -> Result<(), String>;
}

/// Frames as they came.
pub struct PlainFrames;

impl Opener for PlainFrames {
    fn open(&mut self, sealed: &[u8], plain: &mut Vec<u8>) -> Result<(), String> {
        plain.extend_from_slice(sealed);
        Ok(())
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
/// that the watcher holds it too. The listener's proof is what a sealing stage would key on.
async fn handshake(
    stream: &mut tokio::net::TcpStream,
    secret: &Secret,
) -> Result<[u8; PROOF_LEN], String> {
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
    Ok(proof)
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
    let proved = matches!(
        tokio::time::timeout(deadline, handshake(&mut stream, &secret)).await,
        Ok(Ok(_))
    );
    {
        let mut this = door.borrow_mut();
        // Not in the budget any more: dropped to make room (and counted) while this poll was queued.
        if this.forget(id).is_none() {
            return;
        }
        if !proved {
            this.counts.strangers.fetch_add(1, Ordering::Relaxed);
            pending.push(Inbound::Refused);
            return;
        }
        if this.proven >= this.settings.max_plugins {
            this.counts.full.fetch_add(1, Ordering::Relaxed);
            pending.push(Inbound::Refused);
            return;
        }
        this.proven += 1;
        this.counts.proven.fetch_add(1, Ordering::Relaxed);
        this.counts.live.fetch_add(1, Ordering::Relaxed);
    }
    // Where per-frame protection keys its opener on the handshake.
    let mut opener = PlainFrames;
    let broken = read_frames(&stream, id, &door, &pending, &mut opener).await;
    let mut this = door.borrow_mut();
    this.proven -= 1;
    this.counts.live.fetch_sub(1, Ordering::Relaxed);
    if broken.is_some() {
        this.counts.broken.fetch_add(1, Ordering::Relaxed);
    }
    pending.push(Inbound::Closed(id));
}

/// Reads a proven connection until it closes (`None`) or breaks a rule (why).
async fn read_frames(
    stream: &tokio::net::TcpStream,
    id: u64,
    door: &Rc<RefCell<Door>>,
    pending: &Pending,
    opener: &mut impl Opener,
) -> Option<String> {
    let scratch = Rc::clone(&door.borrow().scratch);
    let mut plain: Vec<u8> = Vec::new();
    let mut comms: Vec<(u64, u32)> = Vec::new();
    // Bytes of the buffers' budget this connection holds.
    let mut charged = 0;
    let outcome = 'reading: loop {
        if stream.readable().await.is_err() {
            break None;
        }
        {
            let mut scratch = scratch.borrow_mut();
            match stream.try_read(&mut scratch) {
                Ok(0) => break None,
                Ok(n) => {
                    if let Err(why) = opener.open(&scratch[..n], &mut plain) {
                        break Some(why);
                    }
                }
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => break None,
            }
        }
        let mut at = 0;
        while plain.len() - at >= 4 {
            let len = u32::from_le_bytes([plain[at], plain[at + 1], plain[at + 2], plain[at + 3]]);
            if len > nccl::MAX_MESSAGE {
                break 'reading Some(format!(
                    "a frame of {len} bytes; a plugin's are at most {}",
                    nccl::MAX_MESSAGE
                ));
            }
            let end = at + 4 + len as usize;
            if plain.len() < end {
                break;
            }
            let message = match nccl::read(&mut &plain[at..end]) {
                Ok(Some(message)) => message,
                Ok(None) => break,
                Err(err) => break 'reading Some(err.to_string()),
            };
            if let PluginMessage::Comm { info } = &message {
                let key = (info.comm, info.rank);
                if !comms.contains(&key) {
                    if comms.len() >= MAX_COMMS {
                        break 'reading Some(format!("more than {MAX_COMMS} communicators"));
                    }
                    comms.push(key);
                }
            }
            pending.push(Inbound::Message(id, message));
            at = end;
        }
        if at == plain.len() {
            // Most reads end on a whole frame: nothing held until the next.
            plain = Vec::new();
        } else if at > 0 {
            plain.drain(..at);
        }
        let mut this = door.borrow_mut();
        this.buffered = this.buffered - charged + plain.capacity();
        charged = plain.capacity();
        if this.buffered > this.settings.buffered {
            break Some(format!(
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
    use std::io::Write;
    use std::net::TcpStream;

    use efatop_proto::auth;
    use efatop_proto::nccl::Origin;

    use super::*;

    fn hello_frame() -> Vec<u8> {
        let origin = Origin { host: "node-a".into(), pid: 7, gpu: None, nccl_version: None, abi: 6, plugin_version: "t".into() };
        let mut out = Vec::new();
        nccl::encode(&PluginMessage::Hello { origin }, &mut out).expect("encode");
        out
    }

    /// Strangers filling the unproven budget from one address are dropped and counted, and a plugin from
    /// another address that proves the token gets in and is read; one with the wrong token is refused.
    #[test]
    fn strangers_are_dropped_and_counted_and_never_keep_a_plugin_out() {
        let secret = Secret::generate().expect("secret");
        let (tx, rx) = std::sync::mpsc::sync_channel(BATCHES_IN_FLIGHT);
        let settings = Settings { unproven: 4, unproven_per_peer: 2, ..Settings::default() };
        let server = Server::start("127.0.0.1:0".parse().expect("address"), secret.clone(), settings, tx).expect("server");
        let strangers: Vec<TcpStream> = (0..10).map(|_| TcpStream::connect(server.address).expect("connect")).collect();
        // Each stranger past the address's two waits, then is dropped: counted as it goes.
        let deadline = Instant::now() + Duration::from_secs(30);
        while server.counts().evicted.load(Ordering::Relaxed) < 8 {
            assert!(Instant::now() < deadline, "{:?}", server.counts());
            std::thread::sleep(Duration::from_millis(10));
        }
        // The plugin comes from the strangers' address: it may find their share full and within its grace,
        // and then tries again, as the plugin does.
        let mut plugin = loop {
            let mut stream = TcpStream::connect(server.address).expect("the plugin connects");
            stream.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
            if auth::connect(&mut stream, &secret, Purpose::Nccl).is_ok() {
                break stream;
            }
            assert!(Instant::now() < deadline, "the plugin never got in: {:?}", server.counts());
            std::thread::sleep(Duration::from_millis(100));
        };
        plugin.write_all(&hello_frame()).expect("write");
        let mut impostor = TcpStream::connect(server.address).expect("connect");
        impostor.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
        assert!(auth::connect(&mut impostor, &Secret::generate().expect("secret"), Purpose::Nccl).is_err());
        let mut got = Vec::new();
        while !got.iter().any(|i| matches!(i, Inbound::Message(_, PluginMessage::Hello { origin }) if origin.host == "node-a")) {
            got.extend(rx.recv_timeout(Duration::from_secs(20)).expect("a batch"));
        }
        let counts = server.counts();
        assert_eq!(counts.proven.load(Ordering::Relaxed), 1, "{counts:?}");
        assert_eq!(counts.live.load(Ordering::Relaxed), 1, "{counts:?}");
        // The two strangers the budget held fail their deadline, and the impostor its proof: all counted.
        while counts.strangers.load(Ordering::Relaxed) < 2 || counts.refused() < 11 {
            assert!(Instant::now() < deadline, "the strangers held and the impostor are counted: {counts:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(strangers);
    }
}
