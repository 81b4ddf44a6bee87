//! The host's relay: the plugins of one host's processes (a process per GPU, as PyTorch and Megatron run)
//! reach the watcher over one connection, not one each, so a 4096-node p5 job is 4096 connections to the
//! watcher and not 32,768, and the host's NIC counters travel once an interval, not once per process.
//!
//! - **Who relays.** The first plugin of the host to look binds the relay's socket, a Unix socket in the
//!   abstract namespace named by the user, the host and the watcher's address ([`name`]): its own
//!   connection to the watcher then carries the others'. The others connect to it. When it ends (its process
//!   ended or died) the kernel frees the name, its processes' connections end, and the first of them to look
//!   again takes its place; the watcher sees the old relay's processes end and the new one's arrive.
//! - **Who may talk.** Both ends check who holds the other: the kernel's word on the peer's user
//!   (`SO_PEERCRED`) first, then the token (proto's handshake, purpose `Nccl`, within one
//!   [`HANDSHAKE`] deadline for the whole exchange), then every frame sealed, as on the way to the watcher.
//!   A stranger's connection is dropped and counted. A process that finds the name held by another user, or
//!   by a process that does not prove the token, connects to the watcher itself: a squatter costs a
//!   connection, never the figures, and never a wait past the deadline.
//! - **What it holds.** At most [`MAX_LOCALS`] processes, a thread each (blocked on its socket; none on
//!   NCCL's threads). What they send goes on the relay process's own queue to the watcher ([`Up`]),
//!   waiting for room there: a slow watcher backs each process up into its own queue, which counts what it could not send.
//!   Each message is checked within proto's caps and sent on as [`PluginMessage::Relayed`], a process's
//!   `Nics` cut to its own GPU's NICs ([`PluginMessage::Rails`]). A process gone is told
//!   ([`PluginMessage::Left`]).
//! - **A new connection to the watcher** ([`Relay::reset`]) ends every process's connection to the relay:
//!   each comes back and sends its hello and communicators again, as it does to a watcher it reconnects to.

use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use efatop_auth::deadline::Deadline;
use efatop_auth::seal::{SealedReader, Sealer};
use efatop_auth::{self as auth, Secret};
use efatop_proto::handshake::Purpose;
use efatop_proto::nccl::{self, PluginMessage};

use crate::host::NoSigpipe;
use crate::say;

/// Processes one relay carries at most (the watcher's cap on a relay is the same).
pub const MAX_LOCALS: usize = 256;
/// The whole handshake, either way, within this: on one host it takes well under a millisecond, so a
/// relay that does not answer within it is stopped or not ours, and the process goes to the watcher itself.
pub const HANDSHAKE: Duration = Duration::from_secs(2);
/// The relay tells each of its processes it is alive this often (a byte)...
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// ...and a process that has heard nothing from it for this long looks for the host's relay again (a
/// stopped relay process would otherwise hold its processes' figures in its socket's buffer unseen).
pub const SILENT: Duration = Duration::from_secs(3);

/// The relay's name for `host`'s processes of this user streaming to `address`: an abstract socket's (no
/// file to leave behind or to race on), unique per user, host (as the plugin names it: `EFATOP_HOST`
/// fakes one) and watcher.
pub fn name(uid: u32, host: &str, address: &str) -> String {
    // FNV-1a: a name, not a secret (who may talk is the token's to prove).
    let hash = host.bytes().chain([0]).chain(address.bytes()).fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("efatop-nccl-relay.{uid}.{hash:016x}")
}

/// Where a process's frames go.
pub enum Found {
    /// To the host's relay, over this connection, sealed with these keys; the relay's pid.
    Joined(UnixStream, Sealer, u32),
    /// No relay was there: this process is the host's relay now.
    Leading(UnixListener),
    /// No relay can be used (why): the process connects to the watcher itself.
    Direct(String),
}

/// A process's link to its relay: frames written without SIGPIPE; alive while the relay's heartbeat comes.
pub struct Link {
    pub stream: UnixStream,
    heard: Instant,
}

impl Link {
    pub fn new(stream: UnixStream) -> Self {
        Self { stream, heard: Instant::now() }
    }

    /// Whether the relay was heard within [`SILENT`] (its heartbeats taken off the socket now); false once it
    /// closed.
    pub fn alive(&mut self) -> bool {
        let mut beats = [0u8; 64];
        let _ = self.stream.set_read_timeout(Some(Duration::from_millis(1)));
        loop {
            match self.stream.read(&mut beats) {
                Ok(0) => return false,
                Ok(_) => self.heard = Instant::now(),
                Err(err) if matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => break,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        self.heard.elapsed() < SILENT
    }
}

impl Write for Link {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        NoSigpipe(&self.stream).write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn address_of(name: &str) -> std::io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(name.as_bytes())
}

/// The host's relay for `name`: joined, taken, or why neither.
pub fn find(name: &str, secret: &Secret, uid: u32) -> Found {
    let address = match address_of(name) {
        Ok(address) => address,
        Err(err) => return Found::Direct(format!("the relay's name: {err}")),
    };
    // A name just freed may be taken by another process of the host between our look and our bind: look
    // again, a few times.
    for _ in 0..5 {
        match UnixStream::connect_addr(&address) {
            Ok(stream) => {
                let Some((pid, holder)) = crate::host::peer(&stream) else {
                    return Found::Direct("the relay's socket does not say who holds it".into());
                };
                if holder != uid {
                    return Found::Direct(format!("the relay's socket is held by user {holder}, not this process's {uid}"));
                }
                let mut timed = Deadline::after(HANDSHAKE).on(NoSigpipe(&stream));
                return match auth::connect_session(&mut timed, secret, Purpose::Nccl) {
                    Ok(session) => {
                        let _ = stream.set_read_timeout(None);
                        let _ = stream.set_write_timeout(Some(HANDSHAKE));
                        Found::Joined(stream, session.sealer, pid)
                    }
                    Err(err) => Found::Direct(format!("the relay's socket (pid {pid}) did not prove the token: {err}")),
                };
            }
            Err(err) if matches!(err.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound) => {
                match UnixListener::bind_addr(&address) {
                    Ok(listener) => return Found::Leading(listener),
                    Err(err) if err.kind() == std::io::ErrorKind::AddrInUse => std::thread::sleep(Duration::from_millis(20)),
                    Err(err) => return Found::Direct(format!("the relay's socket: {err}")),
                }
            }
            Err(err) => return Found::Direct(format!("the relay's socket: {err}")),
        }
    }
    Found::Direct("the relay's socket changed hands five times in a row".into())
}

/// The relay this process leads: its processes' connections, to end them all at once.
pub struct Relay {
    locals: Arc<Mutex<Vec<(u32, UnixStream)>>>,
    /// Connections dropped: another user's, a failed handshake, past [`MAX_LOCALS`], a message that broke
    /// proto's rules.
    pub refused: Arc<AtomicU64>,
}

impl Relay {
    /// Ends every process's connection: each comes back and sends its hello and communicators again (on a
    /// new connection to the watcher, which knows none of them).
    pub fn reset(&self) {
        for (_, stream) in self.locals.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Where the relay puts each relayed frame: this process's queue to the watcher (waiting for room there);
/// false once that queue is gone.
pub trait Up: Fn(Vec<u8>) -> bool + Clone + Send + 'static {}
impl<F: Fn(Vec<u8>) -> bool + Clone + Send + 'static> Up for F {}

/// Serves `listener` (the host's relay, this process): every process that proves `secret` has its messages
/// sent on through `up` (this process's queue to the watcher).
pub fn serve(listener: UnixListener, secret: Secret, uid: u32, up: impl Up) -> Relay {
    let relay = Relay { locals: Arc::new(Mutex::new(Vec::new())), refused: Arc::new(AtomicU64::new(0)) };
    let (locals, refused) = (Arc::clone(&relay.locals), Arc::clone(&relay.refused));
    let beating = Arc::downgrade(&relay.locals);
    let _ = std::thread::Builder::new().name("efatop-nccl-beat".into()).spawn(move || {
        // Ends with the relay (its processes' list dropped).
        while let Some(locals) = beating.upgrade() {
            for (_, stream) in locals.lock().unwrap_or_else(PoisonError::into_inner).iter() {
                let _ = NoSigpipe(stream).write(&[0]);
            }
            drop(locals);
            std::thread::sleep(HEARTBEAT);
        }
    });
    let spawned = std::thread::Builder::new().name("efatop-nccl-relay".into()).spawn(move || {
        let live = Arc::new(AtomicUsize::new(0));
        let next = AtomicU32::new(1);
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            match crate::host::peer(&stream) {
                Some((_, holder)) if holder == uid => {}
                Some((pid, holder)) => {
                    refuse(&refused, &format!("a connection from pid {pid} of user {holder}"));
                    continue;
                }
                None => {
                    refuse(&refused, "a connection whose user the kernel does not say");
                    continue;
                }
            }
            if live.load(Ordering::Acquire) >= MAX_LOCALS {
                refuse(&refused, &format!("a process past the relay's {MAX_LOCALS}"));
                continue;
            }
            live.fetch_add(1, Ordering::AcqRel);
            let local = next.fetch_add(1, Ordering::Relaxed);
            let (secret, up, locals, refused, held) = (secret.clone(), up.clone(), Arc::clone(&locals), Arc::clone(&refused), Arc::clone(&live));
            let spawned = std::thread::Builder::new().name("efatop-nccl-local".into()).stack_size(256 << 10).spawn(move || {
                if let Err(why) = carry(stream, local, &secret, &up, &locals) {
                    refuse(&refused, &why);
                }
                locals.lock().unwrap_or_else(PoisonError::into_inner).retain(|(l, _)| *l != local);
                held.fetch_sub(1, Ordering::AcqRel);
            });
            if spawned.is_err() {
                live.fetch_sub(1, Ordering::AcqRel);
            }
        }
    });
    if spawned.is_err() {
        say("relay: no thread for it; the host's processes connect to the watcher themselves");
    }
    relay
}

/// A connection the relay dropped: counted, and the first told.
fn refuse(refused: &AtomicU64, why: &str) {
    if refused.fetch_add(1, Ordering::Relaxed) == 0 {
        say(&format!("relay: {why}; dropped (the first told, every one counted)"));
    }
}

/// One process of the host, from its handshake to its end: `Err` (why) where it was a stranger or broke
/// proto's rules.
fn carry(stream: UnixStream, local: u32, secret: &Secret, up: &impl Up, locals: &Mutex<Vec<(u32, UnixStream)>>) -> Result<(), String> {
    let session = {
        let mut timed = Deadline::after(HANDSHAKE).on(NoSigpipe(&stream));
        auth::accept_session(&mut timed, secret, Purpose::Nccl).map_err(|err| format!("a process that did not prove the token: {err}"))?
    };
    let _ = stream.set_read_timeout(None);
    // The heartbeat's write never waits long on a process that stopped reading.
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    if let Ok(clone) = stream.try_clone() {
        locals.lock().unwrap_or_else(PoisonError::into_inner).push((local, clone));
    }
    let mut reader = SealedReader::new(stream, session.opener, format!("local process {local}"));
    let mut ended = Ok(());
    loop {
        let message = match nccl::read(&mut reader) {
            Ok(Some(message)) => message,
            Ok(None) => break,
            Err(err) => {
                ended = Err(format!("process {local}: {err}"));
                break;
            }
        };
        let message = match message {
            PluginMessage::Relayed { .. } | PluginMessage::Left { .. } => {
                ended = Err(format!("process {local} sent a relay's message"));
                break;
            }
            PluginMessage::Nics { t_ms, nics } => PluginMessage::Rails { t_ms, nics: nics.into_iter().filter(|n| n.rail).collect() },
            message => message,
        };
        let mut frame = Vec::new();
        if nccl::encode(&PluginMessage::Relayed { local, message: Box::new(message) }, &mut frame).is_err() || !up(frame) {
            break;
        }
    }
    let mut frame = Vec::new();
    if nccl::encode(&PluginMessage::Left { local }, &mut frame).is_ok() {
        let _ = up(frame);
    }
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relays_name_is_the_users_the_hosts_and_the_watchers() {
        let a = name(1000, "node-a", "10.0.0.1:9400");
        assert_eq!(a, name(1000, "node-a", "10.0.0.1:9400"));
        assert_ne!(a, name(1001, "node-a", "10.0.0.1:9400"));
        assert_ne!(a, name(1000, "node-b", "10.0.0.1:9400"));
        assert_ne!(a, name(1000, "node-a", "10.0.0.1:9401"));
        assert!(a.len() < 100, "an abstract name fits sun_path: {a}");
    }

    /// A process's link lives on the relay's heartbeat: a relay that stops beating (a stopped process) is
    /// given up after SILENT, one that closed at once; writes to a closed relay fail, never raise SIGPIPE.
    #[test]
    fn a_link_is_alive_while_the_relay_beats_and_not_once_it_stops_or_closes() {
        let (ours, relay) = UnixStream::pair().expect("pair");
        let mut link = Link::new(ours);
        assert!(link.alive());
        std::thread::sleep(SILENT / 2);
        NoSigpipe(&relay).write_all(&[0]).expect("beat");
        std::thread::sleep(SILENT / 2 + Duration::from_millis(200));
        assert!(link.alive(), "a beat within SILENT keeps it");
        std::thread::sleep(SILENT);
        assert!(!link.alive(), "no beat for SILENT: given up");
        let (ours, relay) = UnixStream::pair().expect("pair");
        let mut link = Link::new(ours);
        drop(relay);
        assert!(!link.alive(), "a closed relay at once");
        assert!(link.write_all(&[1; 4096]).is_err(), "and a write fails (EPIPE), the process goes on");
    }

    /// The first to look leads; the next joins over the token; a process with another token goes to the
    /// watcher itself at once (the relay drops it and counts it); one that finds the name held by a
    /// listener that never answers goes to the watcher itself within the deadline.
    #[test]
    fn the_first_leads_the_next_joins_and_a_stranger_or_squatter_costs_a_direct_connection() {
        let uid = crate::host::euid();
        let secret = Secret::from_bytes([7; 32]);
        let relay_name = name(uid, &format!("test-{}", std::process::id()), "127.0.0.1:1");
        let Found::Leading(listener) = find(&relay_name, &secret, uid) else { panic!("the first leads") };
        let (up, from) = std::sync::mpsc::sync_channel::<Vec<u8>>(16);
        let relay = serve(listener, secret.clone(), uid, move |frame| up.send(frame).is_ok());
        let Found::Joined(mut stream, mut sealer, pid) = find(&relay_name, &secret, uid) else { panic!("the next joins") };
        assert_eq!(pid, std::process::id());
        let mut frame = Vec::new();
        let nic = |name: &str, rail| efatop_proto::nccl::NicCount { name: name.into(), tx_bytes: 1, rx_bytes: 2, retrans: None, unresponsive: None, impaired: None, rail };
        nccl::encode(&PluginMessage::Nics { t_ms: 9, nics: vec![nic("rdmap79s0", true), nic("rdmap80s0", false)] }, &mut frame).expect("encode");
        let mut sealed = Vec::new();
        sealer.seal(&frame, &mut sealed).expect("seal");
        stream.write_all(&sealed).expect("write");
        let bytes = from.recv_timeout(Duration::from_secs(10)).expect("relayed");
        let message = nccl::read(&mut bytes.as_slice()).expect("decodes").expect("one");
        let PluginMessage::Relayed { local, message } = message else { panic!("{message:?}") };
        assert!(matches!(*message, PluginMessage::Rails { t_ms: 9, ref nics } if nics.len() == 1 && nics[0].name == "rdmap79s0"), "{message:?}");
        relay.reset();
        let bytes = from.recv_timeout(Duration::from_secs(10)).expect("left");
        assert_eq!(nccl::read(&mut bytes.as_slice()).expect("decodes"), Some(PluginMessage::Left { local }));
        assert!(matches!(find(&relay_name, &Secret::from_bytes([8; 32]), uid), Found::Direct(why) if why.contains("did not prove the token")));
        let deadline = Instant::now() + Duration::from_secs(10);
        while relay.refused.load(Ordering::Relaxed) == 0 {
            assert!(Instant::now() < deadline, "the stranger was not counted");
            std::thread::sleep(Duration::from_millis(10));
        }

        // A squatter: the name bound by a listener that never accepts nor answers.
        let squatted = name(uid, &format!("squat-{}", std::process::id()), "127.0.0.1:1");
        let _squatter = UnixListener::bind_addr(&address_of(&squatted).expect("name")).expect("bind");
        let started = Instant::now();
        assert!(matches!(find(&squatted, &secret, uid), Found::Direct(why) if why.contains("did not prove the token")));
        assert!(started.elapsed() < HANDSHAKE + Duration::from_secs(2), "{:?}", started.elapsed());
    }
}
