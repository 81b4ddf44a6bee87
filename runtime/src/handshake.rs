//! What every listener of a run does with a connection before it has proved anything, and what every party
//! that connects does when it is turned away. One rule for the rendezvous (local and Slurm), rank 0's
//! collector (and the many-node monitor's, the same), a host's relay and `--serve`:
//!
//! - **One deadline for the whole handshake** ([`deadline`], [`HANDSHAKE_WAIT`]): every read and write of
//!   the exchange times out at the time left until it, so a party that trickles a byte now and then is
//!   dropped at the deadline, not kept for as long as it keeps trickling. The rule's home is
//!   `efatop_auth::deadline` (the NCCL plugin's relay and the node's Prometheus endpoint use it too); the
//!   async listeners get it from one `tokio::time::timeout` around the whole exchange.
//! - **A budget of their own for connections that have proved nothing** ([`Lobby`]): at most a few at once,
//!   and at most a few from any one remote address; when it is full, the *oldest* unproven connection is
//!   dropped to make room for the new one, never the new one refused. A party that holds the secret proves
//!   it within milliseconds, so a flood of silent or trickling strangers costs it at most a retry, and never
//!   takes the place of a connection that proved itself (those are counted apart, by each listener).
//! - **Turned away, try again** ([`retry`], [`retryable`]): a party that holds the secret and was dropped
//!   before it could prove it (no greeting, a reset, its own deadline) tries again, backing off, within its
//!   listener's window; one whose proof was refused does not.
//!
//! A dropped connection is reset (`SO_LINGER` 0), not closed: the party that connected can tell "dropped to
//! make room" (a reset: try again) from "your proof was refused" (an orderly close after its answer: the
//! listener does not hold its secret, no use trying again).

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub use efatop_auth::deadline::Deadline;
use efatop_auth::deadline::Bounded;
use efatop_auth::AuthError;

/// How long a connection has, from its accept, to prove itself (and, where a listener asks more of its
/// handshake, to say it: a rank's number, a viewer's hello line).
pub const HANDSHAKE_WAIT: Duration = Duration::from_secs(5);
/// Unproven connections from one remote address, at most (loopback is one place, whatever its address:
/// any local user can connect from any of 127.0.0.0/8, so only the listener's whole budget bounds it).
pub const PER_PEER: usize = 16;

/// [`HANDSHAKE_WAIT`] from now: the one deadline of a whole handshake ([`Deadline::on`] bounds a stream's
/// reads and writes by it).
pub fn deadline() -> Deadline {
    Deadline::after(HANDSHAKE_WAIT)
}

/// A listener's side of [`Deadline::on`], holding the connection's `seat` in its lobby: the listener's
/// first write after it has heard from the peer (the message that tells the peer it is believed: a proof, a
/// credential) first takes the connection out of the lobby ([`Seat::proven`]), and is not sent when the
/// lobby dropped the connection meanwhile. So a party is either believed and kept, or dropped and reset (it
/// tries again), never told it is in and then cut off.
pub fn admitting(deadline: Deadline, stream: &TcpStream, seat: Seat) -> Admitting<'_> {
    Admitting { bounded: deadline.on(stream), seat: Some(seat), heard: false }
}

/// A listener's stream in its handshake ([`admitting`]): bounded by the deadline, its connection still in
/// the lobby until it proves itself.
pub struct Admitting<'a> {
    bounded: Bounded<&'a TcpStream>,
    /// A listener's connection still in its lobby.
    seat: Option<Seat>,
    /// Something was read.
    heard: bool,
}

impl Admitting<'_> {
    /// The handshake is over: reads and writes block again without a limit.
    pub fn done(self) -> std::io::Result<()> {
        self.bounded.done().map(drop)
    }

    /// A listener's connection whose handshake holds: out of the lobby now, if it was not yet; false when
    /// the lobby dropped it.
    pub fn proven(&mut self) -> bool {
        self.seat.take().is_none_or(Seat::proven)
    }

    /// Why a listener's handshake failed, as [`Seat::why`] tells it.
    pub fn why(&self, failed: impl std::fmt::Display) -> String {
        match &self.seat {
            Some(seat) => seat.why(failed),
            None => failed.to_string(),
        }
    }
}

/// What a connection dropped from a lobby is told, and counted as.
const DROPPED: &str = "dropped before it proved anything, to make room";

impl Read for Admitting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.bounded.read(buf);
        self.heard |= read.as_ref().is_ok_and(|n| *n > 0);
        read
    }
}

impl Write for Admitting<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.heard && self.seat.is_some() {
            let at_once = self.seat.as_ref().map_or(0, |seat| seat.inner.at_once);
            if !self.proven() {
                return Err(std::io::Error::new(ErrorKind::ConnectionReset, format!("{DROPPED} ({at_once} connections at most may be unproven at once)")));
            }
        }
        self.bounded.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.bounded.flush()
    }
}

/// A listener's budget for connections that have proved nothing yet: see the module's rules. Shared by
/// the threads or tasks that run the handshakes (cheap to clone: one budget).
#[derive(Clone)]
pub struct Lobby {
    inner: Arc<Inner>,
}

struct Inner {
    at_once: usize,
    per_peer: usize,
    waiting: Mutex<Waiting>,
    /// Connections dropped to make room (or at [`Lobby::clear`]), so far.
    dropped: AtomicU64,
}

#[derive(Default)]
struct Waiting {
    numbered: u64,
    /// In the order they arrived: the oldest first.
    held: VecDeque<Held>,
}

struct Held {
    number: u64,
    /// `None`: loopback.
    peer: Option<IpAddr>,
    /// The same socket, to drop it by.
    socket: TcpStream,
    dropped: Arc<AtomicBool>,
}

/// A connection's place in a [`Lobby`]: held until it proves itself ([`Seat::proven`]) or ends (dropped).
pub struct Seat {
    inner: Arc<Inner>,
    number: u64,
    dropped: Arc<AtomicBool>,
}

impl Seat {
    /// The connection proved itself: it leaves the unproven budget (for whatever its listener allows the
    /// proven). False when it was dropped to make room meanwhile (its socket is shut, it cannot go on).
    pub fn proven(self) -> bool {
        // Under the lobby's lock: a connection is either dropped or out of the lobby, never both.
        let mut waiting = self.inner.lock();
        if self.dropped.load(Ordering::SeqCst) {
            return false;
        }
        if let Some(at) = waiting.held.iter().position(|held| held.number == self.number) {
            waiting.held.remove(at);
        }
        true
    }

    /// Whether the lobby dropped this connection to make room for a newer one (or at its close): its
    /// handshake then failed for that reason, not the peer's.
    pub fn was_dropped(&self) -> bool {
        self.dropped.load(Ordering::SeqCst)
    }

    /// Why this connection's handshake failed, told with `failed`'s own reason unless the lobby dropped it.
    pub fn why(&self, failed: impl std::fmt::Display) -> String {
        if self.was_dropped() {
            format!("{DROPPED} ({} connections at most may be unproven at once)", self.inner.at_once)
        } else {
            failed.to_string()
        }
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut waiting = self.inner.lock();
        if let Some(at) = waiting.held.iter().position(|held| held.number == self.number) {
            waiting.held.remove(at);
        }
    }
}

/// Where a connection comes from, as the budget counts it.
fn place(from: &SocketAddr) -> Option<IpAddr> {
    let ip = match from.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    };
    (!ip.is_loopback()).then_some(ip)
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Drops a held connection: its handshake's reads end at once (the socket is shut for reading, which wakes a
/// blocked read or an async one), and the peer is reset when its handler closes the socket.
fn drop_held(held: &Held) {
    held.dropped.store(true, Ordering::SeqCst);
    let _ = nix::sys::socket::setsockopt(&held.socket, nix::sys::socket::sockopt::Linger, &libc::linger { l_onoff: 1, l_linger: 0 });
    let _ = held.socket.shutdown(std::net::Shutdown::Read);
}

impl Lobby {
    /// At most `at_once` unproven connections, and at most `per_peer` from one remote address.
    pub fn new(at_once: usize, per_peer: usize) -> Self {
        let inner = Inner { at_once: at_once.max(1), per_peer: per_peer.max(1), waiting: Mutex::default(), dropped: AtomicU64::new(0) };
        Self { inner: Arc::new(inner) }
    }

    /// Takes in a connection that has just been accepted (`socket`, from `from`): a place for it, made by
    /// dropping the oldest unproven connection of its address when that address has its share, else the
    /// oldest of all when the budget is full. Never refuses it: an error only when the socket cannot be
    /// duplicated (out of file descriptors), and then the caller drops it.
    pub fn enter(&self, socket: &impl AsFd, from: SocketAddr) -> std::io::Result<Seat> {
        let socket = TcpStream::from(socket.as_fd().try_clone_to_owned()?);
        let peer = place(&from);
        let dropped = Arc::new(AtomicBool::new(false));
        let mut waiting = self.inner.lock();
        let same_peer = |held: &Held| peer.is_some() && held.peer == peer;
        let victim = if waiting.held.iter().filter(|held| same_peer(held)).count() >= self.inner.per_peer {
            waiting.held.iter().position(same_peer)
        } else if waiting.held.len() >= self.inner.at_once {
            Some(0)
        } else {
            None
        };
        if let Some(held) = victim.and_then(|at| waiting.held.remove(at)) {
            drop_held(&held);
            self.inner.dropped.fetch_add(1, Ordering::Relaxed);
        }
        waiting.numbered += 1;
        let number = waiting.numbered;
        waiting.held.push_back(Held { number, peer, socket, dropped: dropped.clone() });
        Ok(Seat { inner: self.inner.clone(), number, dropped })
    }

    /// Drops every connection still unproven (the listener closes); how many.
    pub fn clear(&self) -> usize {
        let held: Vec<Held> = self.inner.lock().held.drain(..).collect();
        for one in &held {
            drop_held(one);
        }
        self.inner.dropped.fetch_add(held.len() as u64, Ordering::Relaxed);
        held.len()
    }

    /// Connections unproven now.
    pub fn waiting(&self) -> usize {
        self.inner.lock().held.len()
    }

    /// Connections dropped to make room, or at [`Lobby::clear`], so far.
    pub fn dropped(&self) -> u64 {
        self.inner.dropped.load(Ordering::Relaxed)
    }
}

/// One attempt's outcome for [`retry`]: try again (within the window), or give up now.
pub enum Attempt<E> {
    Again(E),
    Final(E),
}

/// Runs `attempt` until it succeeds, fails for good, or `window` (from now) has passed, backing off
/// between attempts (50 ms, doubling, at most 1 s); the last error when it gives up.
pub fn retry<T, E>(window: Duration, mut attempt: impl FnMut() -> Result<T, Attempt<E>>) -> Result<T, E> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(50);
    loop {
        match attempt() {
            Ok(done) => return Ok(done),
            Err(Attempt::Final(err)) => return Err(err),
            Err(Attempt::Again(err)) if started.elapsed() + pause >= window => return Err(err),
            Err(Attempt::Again(_)) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// Whether a connecting side's failed handshake is worth another try: the listener dropped it before it
/// could prove anything (no greeting, a reset, a deadline), as a listener whose unproven budget is full
/// does. Not a peer that is no efatop, speaks for another purpose, or heard our proof and closed (it
/// refused it), nor one whose own proof failed.
pub fn retryable(err: &AuthError) -> bool {
    match err {
        AuthError::NoHello(_) | AuthError::Io(_) => true,
        AuthError::Refused(io) => io.kind() == ErrorKind::ConnectionReset,
        AuthError::NotEfatop | AuthError::WrongPurpose(_) | AuthError::BadProof | AuthError::Token(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use efatop_auth::{self as auth, Secret};
    use efatop_proto::handshake::Purpose;
    use std::net::TcpListener;

    fn pair(listener: &TcpListener) -> (TcpStream, TcpStream, SocketAddr) {
        let client = TcpStream::connect(listener.local_addr().expect("address")).expect("connect");
        let (server, from) = listener.accept().expect("accept");
        (client, server, from)
    }

    /// A byte every 200 ms never ends a read's limit of 300 ms, but the whole exchange ends at its one
    /// deadline.
    #[test]
    fn a_trickle_is_cut_at_the_deadline_not_kept_by_each_byte() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let (mut client, server, _) = pair(&listener);
        let trickle = std::thread::spawn(move || {
            for _ in 0..15 {
                if client.write_all(&[0]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let started = Instant::now();
        let mut answer = [0u8; efatop_proto::handshake::ANSWER_LEN];
        let read = Deadline::after(Duration::from_millis(700)).on(&server).read_exact(&mut answer);
        let took = started.elapsed();
        assert_eq!(read.expect_err("cut").kind(), ErrorKind::TimedOut);
        assert!(took >= Duration::from_millis(650) && took < Duration::from_secs(2), "{took:?}");
        drop(server);
        trickle.join().expect("trickle");
    }

    /// A full budget drops its oldest connection for a new one; one address has its share at most; the
    /// dropped connection's peer is reset, and a proof in time still gets through.
    #[test]
    fn a_full_lobby_drops_its_oldest_and_never_refuses_the_newest() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let lobby = Lobby::new(3, 2);
        let mut held = Vec::new();
        for _ in 0..3 {
            let (client, server, from) = pair(&listener);
            let seat = lobby.enter(&server, from).expect("seat");
            held.push((client, server, seat));
        }
        assert_eq!(lobby.waiting(), 3);
        // A fourth, proving the secret: the first is dropped for it.
        let secret = Secret::generate().expect("secret");
        let (mut client, server, from) = pair(&listener);
        let seat = lobby.enter(&server, from).expect("seat");
        assert!(held[0].2.was_dropped() && !held[1].2.was_dropped());
        assert_eq!(lobby.dropped(), 1);
        let mut first_reader = held[0].1.try_clone().expect("clone");
        assert_eq!(first_reader.read(&mut [0u8; 1]).expect("the dropped one's read ends"), 0);
        let (first_client, first_server, first_seat) = held.remove(0);
        drop((first_server, first_reader));
        assert!(!first_seat.proven());
        let mut first_client = first_client;
        first_client.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        assert_eq!(first_client.read(&mut [0u8; 1]).expect_err("reset").kind(), ErrorKind::ConnectionReset);
        let proving = std::thread::spawn({
            let secret = secret.clone();
            move || auth::connect(&mut client, &secret, Purpose::Viewer)
        });
        let deadline = deadline();
        auth::accept(&mut deadline.on(&server), &secret, Purpose::Viewer).expect("the newest proves itself");
        assert!(seat.proven());
        proving.join().expect("client").expect("proven");
        assert_eq!(lobby.waiting(), 2);
        assert_eq!(lobby.clear(), 2);
        assert_eq!(lobby.waiting(), 0);
        // Per address: remote peers of one address share `per_peer` (loopback is exempt: tested above).
        assert_eq!(place(&"127.0.0.9:1".parse().expect("addr")), None);
        assert_eq!(place(&"[::ffff:10.0.0.1]:1".parse().expect("addr")), Some(IpAddr::from([10, 0, 0, 1])));
    }

    /// One remote address has its share of the budget at most: its own oldest makes room for it, and other
    /// addresses' connections are left alone.
    #[test]
    fn one_address_drops_its_own_oldest_not_anothers() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let lobby = Lobby::new(8, 2);
        let other: SocketAddr = "10.0.0.2:40000".parse().expect("addr");
        let flooder: SocketAddr = "10.0.0.1:40000".parse().expect("addr");
        let mut seats = Vec::new();
        let (client, server, _) = pair(&listener);
        let theirs = lobby.enter(&server, other).expect("seat");
        seats.push((client, server));
        let mut flood = Vec::new();
        for _ in 0..5 {
            let (c, s, _) = pair(&listener);
            flood.push((lobby.enter(&s, flooder).expect("seat"), c, s));
        }
        assert!(!theirs.was_dropped(), "another address's connection keeps its place");
        assert_eq!(flood.iter().filter(|(seat, ..)| seat.was_dropped()).count(), 3, "the flooder keeps its newest 2");
        assert!(flood[3..].iter().all(|(seat, ..)| !seat.was_dropped()));
        assert_eq!((lobby.waiting(), lobby.dropped()), (3, 3));
    }

    /// A connection the lobby dropped during its handshake is never sent the listener's proof (it would take
    /// itself for admitted, then be cut off): it is reset, which the connecting side takes as "try again".
    #[test]
    fn a_connection_dropped_mid_handshake_is_reset_never_proven() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let lobby = Lobby::new(1, 1);
        let secret = Secret::generate().expect("secret");
        let (mut client, server, from) = pair(&listener);
        let seat = lobby.enter(&server, from).expect("seat");
        let proving = std::thread::spawn({
            let secret = secret.clone();
            move || auth::connect(&mut deadline().on(&client.try_clone().expect("clone")), &secret, Purpose::Telemetry).map(|()| drop(client.flush()))
        });
        let (_newer_client, newer, newer_from) = pair(&listener);
        let _newer = lobby.enter(&newer, newer_from).expect("seat");
        let mut within = admitting(deadline(), &server, seat);
        let refused = auth::accept(&mut within, &secret, Purpose::Telemetry).map_err(|err| within.why(err));
        assert!(refused.as_ref().is_err_and(|why| why.contains("to make room")), "{refused:?}");
        drop(within);
        drop(server);
        let told = proving.join().expect("client").expect_err("never admitted");
        assert!(retryable(&told), "{told:?}");
    }

    #[test]
    fn retries_back_off_until_the_window_and_stop_at_a_final_error() {
        let mut tries = 0;
        let started = Instant::now();
        let outcome: Result<(), u32> = retry(Duration::from_millis(400), || {
            tries += 1;
            Err(Attempt::Again(tries))
        });
        assert!(matches!(outcome, Err(n) if (3..=5).contains(&n)), "{outcome:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
        let mut tries = 0;
        let outcome: Result<(), &str> = retry(Duration::from_secs(10), || {
            tries += 1;
            if tries < 3 { Err(Attempt::Again("again")) } else { Err(Attempt::Final("final")) }
        });
        assert_eq!((outcome, tries), (Err("final"), 3));
        assert!(retryable(&AuthError::Refused(ErrorKind::ConnectionReset.into())));
        assert!(!retryable(&AuthError::Refused(ErrorKind::UnexpectedEof.into())));
        assert!(!retryable(&AuthError::BadProof));
    }
}
