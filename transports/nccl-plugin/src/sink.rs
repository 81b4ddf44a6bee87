//! Where the fold's messages go: to the watcher `EFATOP_WATCH=host:port` names, or, without one, to a
//! file `efatop replay` reads.
//!
//! The watcher's connection lives on a thread of its own, fed by a bounded queue the fold never waits on:
//! a full queue (a slow or stopped watcher) or a missing one loses the message and counts it (`unsent`;
//! figures are cumulative, so the next message carries what was lost). The thread connects with a
//! timeout, proves the user's token (proto's handshake, purpose `Nccl`), sends the hello and the open
//! communicators again on every connection, and retries with backoff (0.25 s doubling to 10 s). Every frame
//! after the handshake travels sealed (proto's `seal`: a record per frame, AES-256-GCM under the keys that
//! connection's handshake derived), so a party on the way to the watcher can neither read nor change a
//! figure unseen. Unless `EFATOP_WATCH_RELAY=0`, the thread first looks for the host's relay
//! ([`crate::relay`]): its frames then go through it, or, as the relay, it carries the host's others too.
//! Nothing of this ever runs on NCCL's threads: they only push fixed-size records onto the ring; the fold,
//! the framing and the sealing are this thread's and the worker's.

use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use efatop_auth::{self as auth, Secret};
use efatop_proto::handshake::Purpose;
use efatop_auth::seal::Sealer;
use efatop_proto::nccl::{encode, file_hello, CommInfo, Origin, PluginMessage};

use crate::say;

/// Messages queued for the watcher's thread at most.
const QUEUE: usize = 1024;

/// What the watcher's thread sends: this process's frames, and, where it is the host's relay, those of
/// the host's other processes (already wrapped as [`PluginMessage::Relayed`]).
pub enum Out {
    Own(Vec<u8>),
    Relayed(Vec<u8>),
}

type Frames = Arc<Mutex<Vec<(u64, u32, Vec<u8>)>>>;

pub enum Sink {
    /// `queued`: frames put on the queue; `handled`: those the thread took off it (written or lost).
    Watcher { queue: SyncSender<Out>, preamble: Frames, unsent: Arc<AtomicU64>, queued: u64, handled: Arc<AtomicU64> },
    File { file: std::io::BufWriter<std::fs::File>, unsent: u64 },
    Off { unsent: u64 },
}

fn frame(message: &PluginMessage) -> Vec<u8> {
    let mut out = Vec::new();
    // A message of plain fields always serializes.
    let _ = encode(message, &mut out);
    out
}

impl Sink {
    /// The sink the environment names, after `origin`'s hello.
    pub fn from_env(origin: &Origin) -> Self {
        let hello = frame(&PluginMessage::Hello { origin: origin.clone() });
        if let Ok(address) = std::env::var("EFATOP_WATCH") {
            let secret = match crate::identity::token() {
                Ok(secret) => secret,
                Err(err) => {
                    say(&format!("EFATOP_WATCH={address}: {err}; nothing is sent"));
                    return Self::Off { unsent: 0 };
                }
            };
            let (queue, rx) = sync_channel(QUEUE);
            let preamble: Frames = Arc::new(Mutex::new(vec![(u64::MAX, u32::MAX, hello)]));
            let unsent = Arc::new(AtomicU64::new(0));
            let handled = Arc::new(AtomicU64::new(0));
            let (p, u, h) = (Arc::clone(&preamble), Arc::clone(&unsent), Arc::clone(&handled));
            let (host, relayed) = (origin.host.clone(), queue.clone());
            let spawned = std::thread::Builder::new().name("efatop-nccl-send".into()).spawn(move || send_loop(&address, &secret, &host, &rx, &relayed, &p, &u, &h));
            if spawned.is_err() {
                return Self::Off { unsent: 0 };
            }
            return Self::Watcher { queue, preamble, unsent, queued: 0, handled };
        }
        let path = match std::env::var("EFATOP_PROFILER_FILE") {
            Ok(p) if p == "none" => return Self::Off { unsent: 0 },
            Ok(p) => PathBuf::from(p),
            Err(_) => {
                let dir = std::env::var_os("EFATOP_PROFILER_DIR").map_or_else(|| PathBuf::from("."), PathBuf::from);
                dir.join(format!("efatop-nccl-{}-{}.efanccl", origin.host, origin.pid))
            }
        };
        match efatop_files::create_for_appending(&path) {
            Ok(file) => {
                let mut file = std::io::BufWriter::new(file);
                let _ = file.write_all(file_hello().as_bytes());
                let _ = file.write_all(&hello);
                Self::File { file, unsent: 0 }
            }
            Err(err) => {
                say(&format!("{err}; nothing is written"));
                Self::Off { unsent: 0 }
            }
        }
    }

    /// A communicator opened: told now and on every reconnection.
    pub fn comm(&mut self, info: &CommInfo) {
        let message = frame(&PluginMessage::Comm { info: info.clone() });
        if let Self::Watcher { preamble, .. } = self {
            preamble.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((info.comm, info.rank, message.clone()));
        }
        self.send_frame(message);
    }

    pub fn send(&mut self, message: &PluginMessage) {
        if let (Self::Watcher { preamble, .. }, PluginMessage::Bye { comm, rank }) = (&*self, message) {
            preamble.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|(c, r, _)| (*c, *r) != (*comm, *rank));
        }
        self.send_frame(frame(message));
    }

    fn send_frame(&mut self, bytes: Vec<u8>) {
        match self {
            Self::Watcher { queue, unsent, queued, .. } => match queue.try_send(Out::Own(bytes)) {
                Ok(()) => *queued += 1,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                    unsent.fetch_add(1, Ordering::Relaxed);
                }
            },
            Self::File { file, unsent } => {
                if file.write_all(&bytes).is_err() {
                    *unsent += 1;
                }
            }
            Self::Off { unsent } => *unsent += 1,
        }
    }

    pub fn flush(&mut self) {
        if let Self::File { file, .. } = self {
            let _ = file.flush();
        }
    }

    /// Waits up to `limit` for the watcher's thread to have taken every queued frame (a communicator's
    /// last figures, before the process exits).
    pub fn drain(&self, limit: Duration) {
        if let Self::Watcher { queued, handled, .. } = self {
            let started = std::time::Instant::now();
            while handled.load(Ordering::Acquire) < *queued && started.elapsed() < limit {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    pub fn unsent(&self) -> u64 {
        match self {
            Self::Watcher { unsent, .. } => unsent.load(Ordering::Relaxed),
            Self::File { unsent, .. } | Self::Off { unsent } => *unsent,
        }
    }
}

/// A connection to the watcher that proved the token both ways, and the keys this side seals with.
fn connect(address: &str, secret: &Secret) -> Result<(TcpStream, Sealer), String> {
    let addrs: Vec<_> = address.to_socket_addrs().map_err(|e| e.to_string())?.collect();
    let mut last = String::from("no address");
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(mut stream) => {
                let timeout = Some(Duration::from_secs(5));
                let _ = stream.set_read_timeout(timeout);
                let _ = stream.set_write_timeout(timeout);
                let _ = stream.set_nodelay(true);
                match auth::connect_session(&mut stream, secret, Purpose::Nccl) {
                    Ok(session) => return Ok((stream, session.sealer)),
                    Err(err) => last = err.to_string(),
                }
            }
            Err(err) => last = err.to_string(),
        }
    }
    Err(last)
}

/// Seals `frame` (a record of its own, or several past a record's most) and writes it whole.
fn write_sealed(stream: &mut impl Write, sealer: &mut Sealer, frame: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    sealer.seal(frame, out).is_ok() && stream.write_all(out).is_ok()
}

/// Where frames are written: the watcher (alive while writes succeed) or the host's relay.
pub trait Peer: Write {
    /// Whether the other end is still there, beyond what a write would tell.
    fn alive(&mut self) -> bool {
        true
    }
}

impl Peer for TcpStream {}

impl Peer for crate::relay::Link {
    fn alive(&mut self) -> bool {
        crate::relay::Link::alive(self)
    }
}

/// Whether the queue's sender is gone (the process is ending): the thread ends too.
struct Gone;

/// Sends the preamble, then what the queue holds, over `stream`, until a write fails or `alive` says the
/// other end is gone (`Ok`: connect again), or the queue's sender is gone. A relay's frames come only to
/// the host's relay, on its way to the watcher.
fn stream_frames(stream: &mut impl Peer, sealer: &mut Sealer, rx: &Receiver<Out>, preamble: &Frames, unsent: &AtomicU64, handled: &AtomicU64) -> Result<(), Gone> {
    // The sealed bytes of one frame: kept across frames, so a frame costs no allocation once it has grown.
    let mut out = Vec::new();
    let frames: Vec<Vec<u8>> = preamble.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter().map(|(_, _, f)| f.clone()).collect();
    if frames.iter().any(|f| !write_sealed(stream, sealer, f, &mut out)) {
        return Ok(());
    }
    loop {
        if !stream.alive() {
            return Ok(());
        }
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(Out::Own(bytes)) => {
                let written = write_sealed(stream, sealer, &bytes, &mut out);
                if !written {
                    unsent.fetch_add(1, Ordering::Relaxed);
                }
                handled.fetch_add(1, Ordering::Release);
                if !written {
                    return Ok(());
                }
            }
            Ok(Out::Relayed(bytes)) => {
                if !write_sealed(stream, sealer, &bytes, &mut out) {
                    return Ok(());
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Err(Gone),
        }
    }
}

/// Waits `backoff`, taking what the queue gets meanwhile off it: this process's frames are counted
/// unsent; a relay's are lost with its connection (their processes send their figures again, cumulative).
fn wait_out(rx: &Receiver<Out>, backoff: Duration, unsent: &AtomicU64, handled: &AtomicU64) -> Result<(), Gone> {
    let deadline = std::time::Instant::now() + backoff;
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(Out::Own(_)) => {
                unsent.fetch_add(1, Ordering::Relaxed);
                handled.fetch_add(1, Ordering::Release);
            }
            Ok(Out::Relayed(_)) => {}
            Err(RecvTimeoutError::Timeout) => break,
            Err(RecvTimeoutError::Disconnected) => return Err(Gone),
        }
    }
    Ok(())
}

/// The watcher's thread. Unless `EFATOP_WATCH_RELAY=0`, it first looks for the host's relay
/// ([`crate::relay`]): joined, its frames go there; none there, this process becomes the relay and its
/// connection to the watcher carries the host's other processes too; a relay it cannot trust, it connects
/// to the watcher itself from then on.
#[allow(clippy::too_many_arguments)]
fn send_loop(address: &str, secret: &Secret, host: &str, rx: &Receiver<Out>, relayed: &SyncSender<Out>, preamble: &Frames, unsent: &AtomicU64, handled: &AtomicU64) {
    let mut backoff = Duration::from_millis(250);
    let mut told = false;
    let uid = crate::host::euid();
    let name = crate::relay::name(uid, host, address);
    let mut looks = std::env::var("EFATOP_WATCH_RELAY").map_or(true, |v| v != "0");
    let mut leading: Option<crate::relay::Relay> = None;
    loop {
        if looks && leading.is_none() {
            match crate::relay::find(&name, secret, uid) {
                crate::relay::Found::Joined(stream, mut sealer, pid) => {
                    say(&format!("streaming to efatop watch at {address} through this host's relay (pid {pid})"));
                    told = false;
                    let mut link = crate::relay::Link::new(stream);
                    if stream_frames(&mut link, &mut sealer, rx, preamble, unsent, handled).is_err() {
                        return;
                    }
                    // The relay went (or stalled): look again, soon (the first to look takes its place).
                    if wait_out(rx, Duration::from_millis(50), unsent, handled).is_err() {
                        return;
                    }
                    continue;
                }
                crate::relay::Found::Leading(listener) => {
                    let queue = relayed.clone();
                    leading = Some(crate::relay::serve(listener, secret.clone(), uid, move |frame| queue.send(Out::Relayed(frame)).is_ok()));
                }
                crate::relay::Found::Direct(why) => {
                    say(&format!("{why}; connecting to efatop watch at {address} itself"));
                    looks = false;
                }
            }
        }
        match connect(address, secret) {
            Ok((mut stream, mut sealer)) => {
                backoff = Duration::from_millis(250);
                let relaying = if leading.is_some() { " (and this host's other processes: it is their relay)" } else { "" };
                say(&format!("streaming to efatop watch at {address}{relaying}"));
                told = false;
                // The host's processes on a new connection: each comes back and says who it is again.
                if let Some(relay) = &leading {
                    relay.reset();
                }
                if stream_frames(&mut stream, &mut sealer, rx, preamble, unsent, handled).is_err() {
                    return;
                }
            }
            Err(err) => {
                if !told {
                    say(&format!("efatop watch at {address}: {err}; retrying (the job goes on)"));
                    told = true;
                }
                if wait_out(rx, backoff, unsent, handled).is_err() {
                    return;
                }
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
    }
}
