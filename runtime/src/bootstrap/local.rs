//! The launcher's rendezvous: ranks started by `efatop run` connect to a loopback socket the launcher
//! listens on; each allgather round, every rank sends one frame and receives everyone's.
//!
//! Every connection first proves it belongs to the run ([`Admission`]): the run secret's challenge and
//! response (`efatop run`), or a MUNGE exchange that hands the joining rank the secret (the Slurm
//! bootstrap), and names its rank, all within one deadline ([`crate::handshake`]). One that fails, or has
//! not done so by the deadline, is dropped and counted; connections that have proved nothing are held in a
//! budget of their own, whose oldest is dropped to make room for a new one; a rank claimed twice keeps its
//! first owner; the run goes on. A rank dropped before it proved itself tries again ([`JOIN_WITHIN`]).
//!
//! Everything after the handshake is sealed ([`efatop_auth::seal`]) under keys bound to it: a party that
//! relays the handshake can read none of it, and a byte it changes is a refusal naming the connection
//! ("frame failed authentication"), never data.
//!
//! Wire format (little-endian, inside the records), after the handshake: a rank opens with `u32 rank`; a round is
//! `u32 len, bytes` from each rank, answered with `u32 count` then `count` × (`u32 len, bytes`) in rank order.
//! A rank that leaves ends the rendezvous: the others are sent `u32 0xFFFFFFFF, u32 rank` (which rank left)
//! before their sockets close, so that each can name it.

use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use efatop_experiments::{Bootstrap, ExperimentError};
use efatop_auth::{self as auth, Secret, Session};
use efatop_proto::handshake::Purpose;
use efatop_auth::seal::{SealedReader, SealedWriter};

use crate::handshake::{self, Attempt, Lobby, PER_PEER, retry, retryable};

use super::munge::Munge;

/// A frame larger than this is refused: nothing efatop exchanges comes close.
const MAX_FRAME: u32 = 64 << 20;
/// How long a connection may take to prove itself and name its rank, in all.
pub use crate::handshake::HANDSHAKE_WAIT;
/// How long the launcher's rendezvous gathers its ranks, and so how long a rank keeps trying to join it.
pub const JOIN_WITHIN: Duration = Duration::from_mins(1);
/// The count that, in place of a round's answer, says a rank left: the rank's number follows.
const LEFT: u32 = u32::MAX;
/// How long the launcher tries to tell a rank which rank left.
const NOTICE_WAIT: Duration = Duration::from_millis(200);
/// Connections that have proved nothing, at once (each on a thread of its own, for [`HANDSHAKE_WAIT`] at
/// most): a newer one takes the oldest one's place ([`Lobby`]).
const HANDSHAKES_AT_ONCE: usize = 32;

/// How a connection into the rendezvous proves it belongs to the run.
#[derive(Clone)]
pub enum Admission {
    /// The run secret's challenge and response.
    Secret(Secret),
    /// A MUNGE exchange of the job's user, which hands the joining rank `secret`.
    Munge(Munge, Secret),
}

/// A rank's connection, sealed both ways, as the rendezvous reads and writes it.
type Reader = BufReader<SealedReader<TcpStream>>;
type Writer = BufWriter<SealedWriter<TcpStream>>;

/// The sealed halves of a connection that passed its handshake.
fn sealed(stream: TcpStream, session: Session, peer: &str) -> std::io::Result<(Reader, Writer)> {
    let (reader, writer) = session.wrap(stream.try_clone()?, stream, peer);
    Ok((BufReader::new(reader), BufWriter::new(writer)))
}

/// Whether an I/O error is a record that failed its check (a refusal), not a connection that ended.
fn forged(err: &std::io::Error) -> bool {
    err.kind() == std::io::ErrorKind::InvalidData
}

impl Admission {
    fn admit(&self, stream: &mut (impl Read + Write)) -> Result<Session, String> {
        match self {
            Self::Secret(secret) => auth::accept_session(stream, secret, Purpose::Rendezvous).map_err(|e| e.to_string()),
            Self::Munge(munge, secret) => munge.admit(stream, secret),
        }
    }
}

fn read_u32(reader: &mut impl Read) -> std::io::Result<u32> {
    let mut bytes = [0u8; 4];
    reader.read_exact(&mut bytes)?;
    Ok(u32::from_le_bytes(bytes))
}

fn read_frame(reader: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let len = read_u32(reader)?;
    if len > MAX_FRAME {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("frame of {len} bytes")));
    }
    let mut frame = vec![0u8; len as usize];
    reader.read_exact(&mut frame)?;
    Ok(frame)
}

fn write_frame(writer: &mut impl Write, frame: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(frame.len()).map_err(|_| std::io::Error::other("frame too large"))?;
    writer.write_all(&len.to_le_bytes())?;
    writer.write_all(frame)
}

/// Returns once `stream` has a byte to read (or is closed), calling `idle` between non-blocking polls.
fn wait_readable(stream: &TcpStream, idle: &mut dyn FnMut()) -> std::io::Result<()> {
    stream.set_nonblocking(true)?;
    let mut byte = [0u8; 1];
    let outcome = loop {
        match stream.peek(&mut byte) {
            Ok(_) => break Ok(()),
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => idle(),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => break Err(err),
        }
    };
    stream.set_nonblocking(false)?;
    outcome
}

/// Drops the connections still in their handshake once every rank has joined, and hears how each ended
/// (bounded: each thread ends once its socket is shut).
fn last_handshakes(lobby: &Lobby, busy: &std::sync::atomic::AtomicUsize, joined: &Receiver<Result<Joined, String>>) -> Vec<String> {
    lobby.clear();
    let mut refused = Vec::new();
    let heard_until = Instant::now() + Duration::from_secs(1);
    while busy.load(std::sync::atomic::Ordering::SeqCst) > 0 && Instant::now() < heard_until {
        match joined.recv_timeout(Duration::from_millis(5)) {
            Ok(Err(why)) => refused.push(why),
            Ok(Ok((rank, ..))) => refused.push(format!("rank {rank} joined already; it keeps its first connection")),
            Err(_) => {}
        }
    }
    refused.extend(joined.try_iter().map(|outcome| match outcome {
        Err(why) => why,
        Ok((rank, ..)) => format!("rank {rank} joined already; it keeps its first connection"),
    }));
    refused
}

/// A rank's side.
pub struct LocalBootstrap {
    rank: usize,
    size: usize,
    stream: Mutex<(Reader, Writer)>,
    /// Every rank's host, once the world knows them ([`Bootstrap::know_hosts`]).
    hosts: std::sync::OnceLock<Vec<String>>,
}

impl LocalBootstrap {
    /// Connects to the launcher at `address` and proves the run's secret, within one deadline; tried again,
    /// backing off, for as long as the launcher gathers ranks ([`JOIN_WITHIN`]) while the launcher drops the
    /// connection before it could prove anything (strangers holding its door).
    pub fn connect(address: &str, rank: usize, size: usize, secret: &Secret) -> Result<Self, ExperimentError> {
        Self::connect_within(address, rank, size, secret, JOIN_WITHIN)
    }

    fn connect_within(address: &str, rank: usize, size: usize, secret: &Secret, window: Duration) -> Result<Self, ExperimentError> {
        let lost = |e: String| ExperimentError::Bootstrap(format!("cannot join the launcher at {address}: {e}"));
        let (stream, session) = retry(window, || {
            let stream = TcpStream::connect(address).map_err(|e| Attempt::Again(e.to_string()))?;
            let deadline = handshake::deadline();
            let mut within = deadline.on(&stream);
            match auth::connect_session(&mut within, secret, Purpose::Rendezvous) {
                Ok(session) => within.done().map(drop).map(|()| (stream, session)).map_err(|e| Attempt::Final(e.to_string())),
                Err(err) if retryable(&err) => Err(Attempt::Again(err.to_string())),
                Err(err) => Err(Attempt::Final(err.to_string())),
            }
        })
        .map_err(lost)?;
        Self::join(stream, session, rank, size, &format!("the launcher's rendezvous at {address}")).map_err(|e| lost(e.to_string()))
    }

    /// Names this rank on a connection that has passed its handshake; all it says from here is sealed with
    /// `session` (`peer` names the other side in a refusal).
    pub fn join(stream: TcpStream, session: Session, rank: usize, size: usize, peer: &str) -> std::io::Result<Self> {
        stream.set_read_timeout(None)?;
        stream.set_nodelay(true)?;
        let (reader, mut writer) = sealed(stream, session, peer)?;
        writer.write_all(&(rank as u32).to_le_bytes())?;
        writer.flush()?;
        Ok(Self { rank, size, stream: Mutex::new((reader, writer)), hosts: std::sync::OnceLock::new() })
    }
}

impl Bootstrap for LocalBootstrap {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>, ExperimentError> {
        self.round(data, None)
    }

    /// Sends this rank's frame, then calls `idle` until the launcher's answer starts to arrive (the socket
    /// polled without blocking), and reads the answer whole: a rank on a manual-progress provider keeps
    /// reading its completion queues while the others catch up.
    fn allgather_while(&self, data: &[u8], idle: &mut dyn FnMut()) -> Result<Vec<Vec<u8>>, ExperimentError> {
        self.round(data, Some(idle))
    }

    fn know_hosts(&self, hosts: &[String]) {
        let _ = self.hosts.set(hosts.to_vec());
    }
}

impl LocalBootstrap {
    /// One allgather round: this rank's frame out, everyone's back. With `idle`, the wait for the answer
    /// polls the socket and calls it between polls; without, it blocks in the read (sleeping, not spinning).
    fn round(&self, data: &[u8], idle: Option<&mut dyn FnMut()>) -> Result<Vec<Vec<u8>>, ExperimentError> {
        let lost = |e: std::io::Error| {
            if forged(&e) {
                // Said by this rank whichever it is: only it saw the forgery (rank 0 speaks for the run's
                // other failures).
                let refused = format!("refused the rendezvous's answer: {e}");
                eprintln!("efatop: error: rank {}: {refused}", self.rank);
                return ExperimentError::Bootstrap(refused);
            }
            ExperimentError::Bootstrap(format!("lost the launcher's rendezvous ({e}): another rank has failed"))
        };
        let mut guard = self.stream.lock().map_err(|_| ExperimentError::Bootstrap("poisoned".into()))?;
        let (reader, writer) = &mut *guard;
        write_frame(writer, data).and_then(|()| writer.flush()).map_err(lost)?;
        if let Some(idle) = idle {
            if reader.buffer().is_empty() && !reader.get_ref().holds_bytes() {
                wait_readable(reader.get_ref().get_ref(), idle).map_err(lost)?;
            }
        }
        let count = read_u32(reader).map_err(lost)?;
        if count == LEFT {
            // The launcher's word on which rank left before the round could complete.
            let rank = read_u32(reader).map_err(lost)?;
            let host = self.hosts.get().and_then(|hosts| hosts.get(rank as usize)).map_or(String::new(), |host| format!(" ({host})"));
            return Err(ExperimentError::Bootstrap(format!(
                "lost the launcher's rendezvous: rank {rank}{host} left it mid-run (it failed or was killed)"
            )));
        }
        let count = count as usize;
        if count != self.size {
            return Err(ExperimentError::Bootstrap(format!("the launcher answered for {count} ranks, not {}", self.size)));
        }
        (0..count).map(|_| read_frame(reader).map_err(lost)).collect()
    }
}

/// The launcher's side: accepts `size` ranks, then serves rounds until a rank leaves.
pub struct Rendezvous {
    listener: TcpListener,
    size: usize,
    admission: Admission,
    /// Set by whoever supervises the ranks once the run is ending (a rank failed or was stopped) before
    /// every rank joined: the rendezvous then closes its door quietly, since a connection cut short now is
    /// one of the run's own ranks being stopped mid-handshake, not news.
    ending: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// A connection that proved itself and named its rank, sealed.
type Joined = (usize, Reader, Writer);

impl Rendezvous {
    /// Listens on loopback: `efatop run`'s ranks all run on this host.
    pub fn bind(size: usize, secret: Secret) -> std::io::Result<Self> {
        Ok(Self { listener: TcpListener::bind("127.0.0.1:0")?, size, admission: Admission::Secret(secret), ending: None })
    }

    /// Listens on `address` (the Slurm bootstrap's rank 0: its node's address, a port of the step's).
    pub fn bind_on(address: std::net::SocketAddr, size: usize, admission: Admission) -> std::io::Result<Self> {
        Ok(Self { listener: TcpListener::bind(address)?, size, admission, ending: None })
    }

    /// Once `ending` is set, a rendezvous still gathering ranks stops: no more refusals are told, and
    /// [`Self::serve`] returns `Ok` (the supervisor speaks for the run's end).
    #[must_use]
    pub fn ending_with(mut self, ending: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Self {
        self.ending = Some(ending);
        self
    }

    fn is_ending(&self) -> bool {
        self.ending.as_ref().is_some_and(|ending| ending.load(std::sync::atomic::Ordering::SeqCst))
    }

    pub fn address(&self) -> std::io::Result<String> {
        Ok(self.listener.local_addr()?.to_string())
    }

    /// Admits one connection on a thread of its own, so a silent one holds up no other: its handshake, then
    /// its rank, within one deadline. It waits in `lobby` until it has proved itself; a full lobby drops its
    /// oldest for it, never refuses it.
    fn admit(&self, stream: TcpStream, from: std::net::SocketAddr, lobby: &Lobby, joined: &Sender<Result<Joined, String>>, busy: &std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::Ordering;
        let seat = match lobby.enter(&stream, from) {
            Ok(seat) => seat,
            Err(err) => {
                let _ = joined.send(Err(format!("{from}: {err}")));
                return;
            }
        };
        busy.fetch_add(1, Ordering::SeqCst);
        let (admission, joined, on_thread) = (self.admission.clone(), joined.clone(), busy.clone());
        let spawned = std::thread::Builder::new().name("efatop-admit".into()).spawn(move || {
            let outcome = (|| {
                stream.set_nonblocking(false).map_err(|e| e.to_string())?;
                let deadline = handshake::deadline();
                let mut within = handshake::admitting(deadline, &stream, seat);
                let session = admission.admit(&mut within).map_err(|why| within.why(why))?;
                if !within.proven() {
                    return Err(within.why("dropped"));
                }
                within.done().map_err(|e| e.to_string())?;
                // The rank, sealed, still within the handshake's deadline.
                let left = deadline.left().ok_or_else(|| "no rank after the handshake: the handshake's deadline passed".to_string())?;
                stream.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
                stream.set_nodelay(true).map_err(|e| e.to_string())?;
                let (mut reader, writer) = sealed(stream, session, &from.to_string()).map_err(|e| e.to_string())?;
                let rank = read_u32(&mut reader).map_err(|e| format!("no rank after the handshake: {e}"))? as usize;
                reader.get_ref().get_ref().set_read_timeout(None).map_err(|e| e.to_string())?;
                Ok((rank, reader, writer))
            })();
            // Told before it stops counting as busy: the last handshakes' count waits on `busy`.
            let _ = joined.send(outcome.map_err(|why: String| format!("{from}: {why}")));
            on_thread.fetch_sub(1, Ordering::SeqCst);
        });
        if spawned.is_err() {
            busy.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Admits every connection waiting to be accepted; whether there was one.
    fn accept_waiting(&self, lobby: &Lobby, joined: &Sender<Result<Joined, String>>, busy: &std::sync::Arc<std::sync::atomic::AtomicUsize>) -> bool {
        let mut any = false;
        loop {
            match self.listener.accept() {
                Ok((stream, from)) => {
                    any = true;
                    self.admit(stream, from, lobby, joined, busy);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // None waiting; or out of file descriptors and the like: the next round tries again.
                Err(_) => return any,
            }
        }
    }

    /// Accepts every rank (within `accept_timeout`), then relays allgather rounds. Returns when a rank
    /// disconnects (normally: at exit); closing every socket then tells the others. Connections that fail
    /// their handshake, name no rank of the run or a rank already joined are dropped, counted and told on
    /// stderr; they never end the run.
    pub fn serve(self, accept_timeout: Duration) -> std::io::Result<()> {
        let mut ranks: Vec<Option<(Reader, Writer)>> = (0..self.size).map(|_| None).collect();
        self.listener.set_nonblocking(true)?;
        let deadline = Instant::now() + accept_timeout;
        let (joined_tx, joined_rx): (Sender<Result<Joined, String>>, Receiver<_>) = std::sync::mpsc::channel();
        let busy = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let lobby = Lobby::new(HANDSHAKES_AT_ONCE, PER_PEER);
        let mut joined = 0;
        let mut refused = 0usize;
        let mut refuse = |why: String| {
            refused += 1;
            // The first few are told; a flood is only counted.
            if refused <= 5 {
                eprintln!("efatop: warning: rendezvous: refused a connection ({why})");
            }
        };
        while joined < self.size {
            if self.is_ending() {
                return Ok(());
            }
            // Every connection waiting, then every handshake that ended; a short wait when neither was.
            let busy_now = self.accept_waiting(&lobby, &joined_tx, &busy);
            let outcome = match joined_rx.try_recv() {
                Ok(outcome) => Ok(outcome),
                Err(_) if busy_now => Err(RecvTimeoutError::Timeout),
                Err(_) => joined_rx.recv_timeout(Duration::from_millis(5)),
            };
            match outcome {
                Ok(Ok((rank, reader, writer))) if rank < self.size && ranks[rank].is_none() => {
                    ranks[rank] = Some((reader, writer));
                    joined += 1;
                }
                Ok(Ok((rank, ..))) if rank < self.size => refuse(format!("rank {rank} joined already; it keeps its first connection")),
                Ok(Ok((rank, ..))) => refuse(format!("rank {rank} is not a rank of this run of {}", self.size)),
                Ok(Err(_)) if self.is_ending() => return Ok(()),
                Ok(Err(why)) => refuse(why),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "ranks did not all connect"));
            }
        }
        // Every rank has joined: the listener closes, and with it the door for strangers; those still in
        // their handshake are dropped, and heard from (bounded: each thread ends once its socket is shut).
        drop(self.listener);
        for why in last_handshakes(&lobby, &busy, &joined_rx) {
            refuse(why);
        }
        if refused > 0 {
            eprintln!("efatop: warning: rendezvous: {refused} connection(s) refused in all");
        }
        let ranks: Vec<_> = ranks.into_iter().flatten().collect();
        // One reader per rank, so a rank that dies is noticed at once, not only when its turn to be read
        // comes: the others may be waiting on a round that can no longer complete.
        let (arrivals, arrived) = std::sync::mpsc::channel::<(usize, Option<Vec<u8>>)>();
        let mut writers = Vec::with_capacity(ranks.len());
        let mut sockets = Vec::with_capacity(ranks.len());
        for (rank, (mut reader, writer)) in ranks.into_iter().enumerate() {
            sockets.push(writer.get_ref().get_ref().try_clone()?);
            writers.push(writer);
            let arrivals = arrivals.clone();
            std::thread::spawn(move || {
                loop {
                    let frame = match read_frame(&mut reader) {
                        Ok(frame) => Some(frame),
                        Err(err) => {
                            // A record that failed its check: the connection is refused, and the rank it
                            // spoke for has left the rendezvous (the others are told so).
                            if forged(&err) {
                                eprintln!("efatop: error: rendezvous: refused rank {rank}'s connection ({err})");
                            }
                            None
                        }
                    };
                    let gone = frame.is_none();
                    if arrivals.send((rank, frame)).is_err() || gone {
                        return;
                    }
                }
            });
        }
        drop(arrivals);
        // A rank left (normally: at exit): shutting every socket down tells the rest at once.
        let close_all = |sockets: &[TcpStream]| {
            for socket in sockets {
                let _ = socket.shutdown(std::net::Shutdown::Both);
            }
        };
        loop {
            let mut frames: Vec<Option<Vec<u8>>> = vec![None; self.size];
            let mut missing = self.size;
            while missing > 0 {
                match arrived.recv() {
                    Ok((rank, Some(frame))) if frames[rank].is_none() => {
                        frames[rank] = Some(frame);
                        missing -= 1;
                    }
                    // A rank left: the others are told which before the sockets close, so that each can say
                    // whose failure ended it (at a run's end every rank leaves, and the word reaches ranks that
                    // no longer read).
                    Ok((gone, None)) => {
                        let mut notice = LEFT.to_le_bytes().to_vec();
                        notice.extend_from_slice(&(gone as u32).to_le_bytes());
                        for (_, writer) in writers.iter_mut().enumerate().filter(|(rank, _)| *rank != gone) {
                            // Bounded: a rank that stopped reading never holds the launcher up.
                            let _ = writer.get_ref().get_ref().set_write_timeout(Some(NOTICE_WAIT));
                            let _ = writer.write_all(&notice).and_then(|()| writer.flush());
                        }
                        close_all(&sockets);
                        return Ok(());
                    }
                    _ => {
                        close_all(&sockets);
                        return Ok(());
                    }
                }
            }
            let frames: Vec<Vec<u8>> = frames.into_iter().flatten().collect();
            for writer in &mut writers {
                let mut reply = || -> std::io::Result<()> {
                    writer.write_all(&(frames.len() as u32).to_le_bytes())?;
                    for frame in &frames {
                        write_frame(writer, frame)?;
                    }
                    writer.flush()
                };
                if reply().is_err() {
                    close_all(&sockets);
                    return Ok(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_ranks_gather_in_rank_order() {
        let secret = Secret::generate().expect("secret");
        let rendezvous = Rendezvous::bind(3, secret.clone()).expect("bind");
        let address = rendezvous.address().expect("address");
        let server = std::thread::spawn(move || rendezvous.serve(Duration::from_secs(10)));
        let workers: Vec<_> = (0..3)
            .map(|rank| {
                let (address, secret) = (address.clone(), secret.clone());
                std::thread::spawn(move || {
                    let bootstrap = LocalBootstrap::connect(&address, rank, 3, &secret).expect("connect");
                    let first = bootstrap.allgather(format!("rank{rank}").as_bytes()).expect("round 1");
                    let second = bootstrap.allgather(&[]).expect("round 2");
                    (first, second)
                })
            })
            .collect();
        for worker in workers {
            let (first, second) = worker.join().expect("worker");
            assert_eq!(first, vec![b"rank0".to_vec(), b"rank1".to_vec(), b"rank2".to_vec()]);
            assert!(second.iter().all(Vec::is_empty));
        }
        server.join().expect("server").expect("serve");
    }

    #[test]
    fn a_rank_that_leaves_fails_the_others_round() {
        let secret = Secret::generate().expect("secret");
        let rendezvous = Rendezvous::bind(2, secret.clone()).expect("bind");
        let address = rendezvous.address().expect("address");
        let server = std::thread::spawn(move || rendezvous.serve(Duration::from_secs(10)));
        let quitter = LocalBootstrap::connect(&address, 1, 2, &secret).expect("connect");
        let stayer = LocalBootstrap::connect(&address, 0, 2, &secret).expect("connect");
        // The world has gathered the hosts: the rank that left is named with its host, as every line names a rank.
        stayer.know_hosts(&["vm".into(), "vm:efatop-node1".into()]);
        drop(quitter);
        let err = stayer.allgather(b"x").expect_err("the round cannot complete");
        assert!(err.to_string().contains("rank 1 (vm:efatop-node1) left it mid-run"), "the launcher names the rank that left: {err}");
        server.join().expect("server").expect("serve");
    }

    /// Strangers first: one that connects and says nothing, one without the secret, one with the secret of
    /// another run claiming rank 0, and a rank claimed twice. None of them holds up or ends the run: the
    /// real ranks join and gather, and the first owner of rank 1 keeps it.
    #[test]
    fn strangers_and_a_second_claim_are_refused_and_the_run_goes_on() {
        let secret = Secret::generate().expect("secret");
        let rendezvous = Rendezvous::bind(2, secret.clone()).expect("bind");
        let address = rendezvous.address().expect("address");
        let server = std::thread::spawn(move || rendezvous.serve(Duration::from_secs(20)));
        let _silent = TcpStream::connect(&address).expect("silent stranger");
        let mut garbage = TcpStream::connect(&address).expect("stranger");
        garbage.write_all(&[1, 0, 0, 0]).expect("write");
        let other = Secret::generate().expect("other");
        assert!(LocalBootstrap::connect(&address, 0, 2, &other).is_err(), "another run's secret is refused");
        let started = Instant::now();
        let first = std::thread::spawn({
            let (address, secret) = (address.clone(), secret.clone());
            move || {
                let owner = LocalBootstrap::connect(&address, 1, 2, &secret).expect("rank 1");
                owner.allgather(b"one").expect("round")
            }
        });
        std::thread::sleep(Duration::from_millis(200));
        // Rank 1 again, from a party that holds the secret: it is told nothing more and the round is the first owner's.
        let _second = LocalBootstrap::connect(&address, 1, 2, &secret).expect("connects, then is dropped");
        let zero = LocalBootstrap::connect(&address, 0, 2, &secret).expect("rank 0");
        let gathered = zero.allgather(b"zero").expect("round");
        assert_eq!(gathered, vec![b"zero".to_vec(), b"one".to_vec()]);
        assert_eq!(first.join().expect("rank 1"), gathered);
        assert!(started.elapsed() < HANDSHAKE_WAIT, "a silent stranger held the run up for {:?}", started.elapsed());
        drop(zero);
        server.join().expect("server").expect("serve");
    }

    /// More silent strangers than the rendezvous takes unproven at once, connected before any rank: each
    /// rank takes the oldest one's place and joins at once, not after the strangers' deadline.
    #[test]
    fn a_flood_of_silent_strangers_beyond_the_budget_keeps_no_rank_out() {
        let secret = Secret::generate().expect("secret");
        let rendezvous = Rendezvous::bind(2, secret.clone()).expect("bind");
        let address = rendezvous.address().expect("address");
        let server = std::thread::spawn(move || rendezvous.serve(Duration::from_secs(20)));
        let strangers: Vec<TcpStream> = (0..HANDSHAKES_AT_ONCE + 8).map(|_| TcpStream::connect(&address).expect("stranger")).collect();
        let started = Instant::now();
        let ranks: Vec<_> = (0..2)
            .map(|rank| {
                let (address, secret) = (address.clone(), secret.clone());
                std::thread::spawn(move || LocalBootstrap::connect(&address, rank, 2, &secret).expect("joins").allgather(&[rank as u8]).expect("round"))
            })
            .collect();
        for rank in ranks {
            assert_eq!(rank.join().expect("rank"), vec![vec![0], vec![1]]);
        }
        assert!(started.elapsed() < HANDSHAKE_WAIT, "the ranks waited {:?} on the strangers", started.elapsed());
        drop(strangers);
        server.join().expect("server").expect("serve");
    }

    /// A run that ends before every rank joined (rank 0 refused its input, and the launcher is stopping
    /// the rest, one of them perhaps mid-handshake): the rendezvous stops gathering at once and returns.
    #[test]
    fn a_rendezvous_whose_run_is_ending_stops_gathering() {
        let secret = Secret::generate().expect("secret");
        let ending = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let rendezvous = Rendezvous::bind(2, secret.clone()).expect("bind").ending_with(ending.clone());
        let address = rendezvous.address().expect("address");
        let server = std::thread::spawn(move || rendezvous.serve(Duration::from_secs(20)));
        let _joined = LocalBootstrap::connect(&address, 1, 2, &secret).expect("rank 1");
        // A rank stopped mid-handshake: it said the first bytes, then went.
        let mut cut = TcpStream::connect(&address).expect("connects");
        cut.write_all(&[1]).expect("write");
        drop(cut);
        let started = Instant::now();
        ending.store(true, std::sync::atomic::Ordering::SeqCst);
        server.join().expect("server").expect("an ending run is no rendezvous error");
        assert!(started.elapsed() < Duration::from_secs(2), "it took {:?} to stop", started.elapsed());
    }
}
