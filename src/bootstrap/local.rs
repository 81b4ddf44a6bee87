//! The launcher's rendezvous: ranks started by `efatop run` connect to a loopback socket the launcher
//! listens on; each allgather round, every rank sends one frame and receives everyone's.
//!
//! Wire format (little-endian): a rank opens with `u32 rank`; a round is `u32 len, bytes` from each rank,
//! answered with `u32 count` then `count` × (`u32 len, bytes`) in rank order.

use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use efatop_experiments::{Bootstrap, ExperimentError};

/// A frame larger than this is refused: nothing efatop exchanges comes close.
const MAX_FRAME: u32 = 64 << 20;

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

/// A rank's side.
pub struct LocalBootstrap {
    rank: usize,
    size: usize,
    stream: Mutex<(BufReader<TcpStream>, BufWriter<TcpStream>)>,
}

impl LocalBootstrap {
    pub fn connect(address: &str, rank: usize, size: usize) -> Result<Self, ExperimentError> {
        let lost = |e: std::io::Error| ExperimentError::Bootstrap(format!("cannot reach the launcher at {address}: {e}"));
        let stream = TcpStream::connect(address).map_err(lost)?;
        stream.set_nodelay(true).map_err(lost)?;
        let mut writer = BufWriter::new(stream.try_clone().map_err(lost)?);
        writer.write_all(&(rank as u32).to_le_bytes()).and_then(|()| writer.flush()).map_err(lost)?;
        Ok(Self { rank, size, stream: Mutex::new((BufReader::new(stream), writer)) })
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
}

impl LocalBootstrap {
    /// One allgather round: this rank's frame out, everyone's back. With `idle`, the wait for the answer
    /// polls the socket and calls it between polls; without, it blocks in the read (sleeping, not spinning).
    fn round(&self, data: &[u8], idle: Option<&mut dyn FnMut()>) -> Result<Vec<Vec<u8>>, ExperimentError> {
        let lost = |e: std::io::Error| {
            ExperimentError::Bootstrap(format!("lost the launcher's rendezvous ({e}): another rank has failed"))
        };
        let mut guard = self.stream.lock().map_err(|_| ExperimentError::Bootstrap("poisoned".into()))?;
        let (reader, writer) = &mut *guard;
        write_frame(writer, data).and_then(|()| writer.flush()).map_err(lost)?;
        if let Some(idle) = idle {
            if reader.buffer().is_empty() {
                wait_readable(reader.get_ref(), idle).map_err(lost)?;
            }
        }
        let count = read_u32(reader).map_err(lost)? as usize;
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
}

impl Rendezvous {
    pub fn bind(size: usize) -> std::io::Result<Self> {
        Ok(Self { listener: TcpListener::bind("127.0.0.1:0")?, size })
    }

    /// Listens on `address` (the Slurm bootstrap's rank 0: every address of its node, a known port).
    pub fn bind_on(address: std::net::SocketAddr, size: usize) -> std::io::Result<Self> {
        Ok(Self { listener: TcpListener::bind(address)?, size })
    }

    pub fn address(&self) -> std::io::Result<String> {
        Ok(self.listener.local_addr()?.to_string())
    }

    /// Accepts every rank (within `accept_timeout`), then relays allgather rounds. Returns when a rank
    /// disconnects (normally: at exit); closing every socket then tells the others.
    pub fn serve(self, accept_timeout: Duration) -> std::io::Result<()> {
        let mut ranks: Vec<Option<(BufReader<TcpStream>, BufWriter<TcpStream>)>> = (0..self.size).map(|_| None).collect();
        self.listener.set_nonblocking(true)?;
        let deadline = Instant::now() + accept_timeout;
        let mut joined = 0;
        while joined < self.size {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false)?;
                    stream.set_nodelay(true)?;
                    let mut reader = BufReader::new(stream.try_clone()?);
                    let rank = read_u32(&mut reader)? as usize;
                    if rank >= self.size || ranks[rank].is_some() {
                        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("bad rank {rank}")));
                    }
                    ranks[rank] = Some((reader, BufWriter::new(stream)));
                    joined += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "ranks did not all connect"));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e),
            }
        }
        let ranks: Vec<_> = ranks.into_iter().flatten().collect();
        // One reader per rank, so a rank that dies is noticed at once, not only when its turn to be read
        // comes: the others may be waiting on a round that can no longer complete.
        let (arrivals, arrived) = std::sync::mpsc::channel::<(usize, Option<Vec<u8>>)>();
        let mut writers = Vec::with_capacity(ranks.len());
        let mut sockets = Vec::with_capacity(ranks.len());
        for (rank, (mut reader, writer)) in ranks.into_iter().enumerate() {
            sockets.push(writer.get_ref().try_clone()?);
            writers.push(writer);
            let arrivals = arrivals.clone();
            std::thread::spawn(move || {
                loop {
                    let frame = read_frame(&mut reader).ok();
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
        let rendezvous = Rendezvous::bind(3).expect("bind");
        let address = rendezvous.address().expect("address");
        let server = std::thread::spawn(move || rendezvous.serve(Duration::from_secs(10)));
        let workers: Vec<_> = (0..3)
            .map(|rank| {
                let address = address.clone();
                std::thread::spawn(move || {
                    let bootstrap = LocalBootstrap::connect(&address, rank, 3).expect("connect");
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
        let rendezvous = Rendezvous::bind(2).expect("bind");
        let address = rendezvous.address().expect("address");
        let server = std::thread::spawn(move || rendezvous.serve(Duration::from_secs(10)));
        let quitter = LocalBootstrap::connect(&address, 1, 2).expect("connect");
        let stayer = LocalBootstrap::connect(&address, 0, 2).expect("connect");
        drop(quitter);
        let err = stayer.allgather(b"x").expect_err("the round cannot complete");
        assert!(err.to_string().contains("another rank has failed"), "{err}");
        server.join().expect("server").expect("serve");
    }
}
