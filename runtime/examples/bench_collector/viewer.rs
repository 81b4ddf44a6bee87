//! `--serve VIEWERS`: viewers of the bench's own, each as `efatop attach` reads a served run: it proves the
//! user's token, says the stream's handshake line, reads the served run's hello, then takes every message
//! until the stream ends, counting the samples it got and the batches rank 0 dropped for it. Each runs on
//! the senders' CPUs, as a remote viewer would run on its own machine; what is measured is whether rank 0's
//! server got every event to every viewer without taking from rank 0's core.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use efatop_auth::{self as auth, Secret};
use efatop_proto::handshake::Purpose;
use efatop_proto::stream::{self, Hello, StreamMessage};
use efatop_proto::events::CollectorEvent;
use efatop_proto::events::ConsumerEvent;

/// What a viewer got.
#[derive(Clone, Copy, Debug, Default)]
pub struct Viewed {
    /// Samples in the telemetry batches it received.
    pub samples: u64,
    /// Batches rank 0 dropped for it (the stream's last `dropped` total).
    pub dropped: u64,
    /// Whether it read the stream to its end (the run's end, then the close).
    pub ended: bool,
    /// Its reading thread's CPU over its life, in % of one core.
    pub cpu_percent: f64,
}

pub struct Viewer(JoinHandle<std::io::Result<Viewed>>);

/// Connects viewer `n` to the served run at `address` and starts reading on a thread of its own.
pub fn start(n: u32, address: SocketAddr, token: &Secret, cpus: Vec<usize>) -> std::io::Result<Viewer> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(10))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let session = auth::connect_session(&mut stream, token, Purpose::Viewer).map_err(|err| std::io::Error::other(format!("viewer {n}: {err}")))?;
    // Sealed both ways from here, as `efatop attach` is.
    let (reader, mut writer) = session.wrap(stream.try_clone()?, stream, "the served run");
    writer.write_all(stream::hello().as_bytes())?;
    let mut reader = BufReader::with_capacity(1 << 20, reader);
    let mut line = Vec::new();
    (&mut reader).take(stream::MAX_HELLO as u64).read_until(b'\n', &mut line)?;
    match stream::parse_hello(&line, stream::MAGIC) {
        Hello::Efatop { version } if version == stream::VERSION => {}
        other => return Err(std::io::Error::other(format!("viewer {n}: the served run said {other:?}"))),
    }
    reader.get_ref().get_ref().set_read_timeout(None)?;
    let handle = std::thread::Builder::new().name(format!("bench-viewer-{n}")).spawn(move || {
        efatop_runtime::affinity::pin_thread(None, cpus);
        let (started, cpu_start) = (Instant::now(), crate::bench_common::this_thread_cpu_seconds());
        let mut viewed = Viewed::default();
        loop {
            match stream::read_message(&mut reader) {
                Ok(Some(StreamMessage::Event { event: ConsumerEvent::Telemetry(batch), .. })) => {
                    viewed.samples += batch.iter().filter(|event| matches!(event, CollectorEvent::Sample(_))).count() as u64;
                }
                Ok(Some(StreamMessage::Dropped { total })) => viewed.dropped = total,
                Ok(Some(StreamMessage::Event { .. })) => {}
                Ok(None) => {
                    viewed.ended = true;
                    break;
                }
                Err(err) => {
                    eprintln!("bench_collector: viewer {n}: the stream broke: {err}");
                    break;
                }
            }
        }
        viewed.cpu_percent = (crate::bench_common::this_thread_cpu_seconds() - cpu_start) * 100.0 / started.elapsed().as_secs_f64().max(1e-9);
        Ok(viewed)
    })?;
    Ok(Viewer(handle))
}

impl Viewer {
    /// Waits for the viewer to read the stream to its end.
    pub fn finish(self) -> Viewed {
        match self.0.join() {
            Ok(Ok(viewed)) => viewed,
            Ok(Err(err)) => {
                eprintln!("bench_collector: a viewer failed: {err}");
                Viewed::default()
            }
            Err(_) => Viewed::default(),
        }
    }
}

