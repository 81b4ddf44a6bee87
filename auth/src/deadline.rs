//! One deadline for a whole exchange on a blocking socket ([`Deadline`], [`Bounded`]): every read and write
//! waits at most for what is left until it, so a peer that trickles a byte now and then is cut at the
//! deadline, not kept for as long as it keeps trickling (a limit per read let a byte every 4 s hold a
//! connection for minutes). The one home of that rule for every blocking party: the runtime's handshakes over
//! TCP (with its lobby: `efatop_runtime::handshake`), the NCCL plugin's host relay over a Unix socket, and
//! the node's Prometheus endpoint reading a request's head. The async listeners get the same rule from one
//! `tokio::time::timeout` around the whole exchange.

use std::io::{self, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The moment an exchange must be over by, and the wait it was set with (to say which deadline passed).
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    at: Instant,
    wait: Duration,
}

impl Deadline {
    pub fn after(wait: Duration) -> Self {
        Self { at: Instant::now() + wait, wait }
    }

    /// The time left; `None` once it has passed.
    pub fn left(&self) -> Option<Duration> {
        Some(self.at.saturating_duration_since(Instant::now())).filter(|left| !left.is_zero())
    }

    /// What a read or write at or past the deadline fails with ([`ErrorKind::TimedOut`]).
    pub fn passed(&self) -> io::Error {
        io::Error::new(ErrorKind::TimedOut, format!("the handshake's deadline ({} s) passed", self.wait.as_secs_f32()))
    }

    /// `stream` with every read and write bounded by what is left until this deadline.
    pub fn on<S: Timed>(self, stream: S) -> Bounded<S> {
        Bounded { stream, deadline: self }
    }
}

/// A blocking stream whose reads and writes can be given a time limit: a socket (`&TcpStream` here; the
/// plugin's Unix socket, written without SIGPIPE, in the plugin), or a test's script of reads.
pub trait Timed {
    fn set_read_timeout(&self, limit: Option<Duration>) -> io::Result<()>;
    fn set_write_timeout(&self, limit: Option<Duration>) -> io::Result<()>;
    fn read_some(&mut self, buffer: &mut [u8]) -> io::Result<usize>;
    fn write_some(&mut self, buffer: &[u8]) -> io::Result<usize>;
}

impl Timed for &TcpStream {
    fn set_read_timeout(&self, limit: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, limit)
    }

    fn set_write_timeout(&self, limit: Option<Duration>) -> io::Result<()> {
        TcpStream::set_write_timeout(self, limit)
    }

    fn read_some(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        self.read(buffer)
    }

    // std writes TCP sockets with send(2) and MSG_NOSIGNAL: a peer that went away is an error, not SIGPIPE.
    fn write_some(&mut self, buffer: &[u8]) -> io::Result<usize> {
        self.write(buffer)
    }
}

/// A [`Timed`] stream whose every read and write ends at one [`Deadline`] (then [`ErrorKind::TimedOut`]).
/// The stream keeps the last limit set: [`Bounded::done`] clears them before the stream is used past the
/// exchange.
pub struct Bounded<S> {
    stream: S,
    deadline: Deadline,
}

impl<S: Timed> Bounded<S> {
    pub fn deadline(&self) -> Deadline {
        self.deadline
    }

    /// The exchange is over: the stream, its reads and writes blocking again without a limit.
    pub fn done(self) -> io::Result<S> {
        self.stream.set_read_timeout(None)?;
        self.stream.set_write_timeout(None)?;
        Ok(self.stream)
    }

    /// A timed-out blocking read or write says `WouldBlock` on Linux: told as the deadline passing.
    fn at_deadline<T>(&self, result: io::Result<T>) -> io::Result<T> {
        result.map_err(|err| if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) { self.deadline.passed() } else { err })
    }
}

impl<S: Timed> Read for Bounded<S> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.left().ok_or_else(|| self.deadline.passed())?;
        self.stream.set_read_timeout(Some(left))?;
        let read = self.stream.read_some(buffer);
        self.at_deadline(read)
    }
}

impl<S: Timed> Write for Bounded<S> {
    fn write(&mut self, buffer: &[u8]) -> io::Result<usize> {
        let left = self.deadline.left().ok_or_else(|| self.deadline.passed())?;
        self.stream.set_write_timeout(Some(left))?;
        let written = self.stream.write_some(buffer);
        self.at_deadline(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_trickle_is_cut_at_the_one_deadline_not_kept_by_its_bytes() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let peer = TcpStream::connect(listener.local_addr().expect("address")).expect("connect");
        let (stream, _) = listener.accept().expect("accept");
        let trickle = std::thread::spawn(move || {
            // A byte every 100 ms for 3 s: each read is answered well within any limit per read.
            for _ in 0..30 {
                if (&peer).write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let started = Instant::now();
        let mut bounded = Deadline::after(Duration::from_millis(600)).on(&stream);
        let mut buffer = [0_u8; 64];
        let err = loop {
            match bounded.read(&mut buffer) {
                Ok(0) => panic!("the peer closed before the deadline"),
                Ok(_) => {}
                Err(err) => break err,
            }
        };
        let took = started.elapsed();
        assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
        assert!(err.to_string().contains("deadline (0.6 s)"), "{err}");
        assert!(took >= Duration::from_millis(550) && took < Duration::from_millis(2500), "cut after {took:?}");
        let after = bounded.done().expect("done");
        assert_eq!(after.read_timeout().expect("timeout"), None, "no limit left behind");
        drop(stream);
        trickle.join().expect("trickle");
    }
}
