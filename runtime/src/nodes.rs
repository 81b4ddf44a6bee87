//! `efatop monitor` on many nodes, without its command line: started once per node by mpirun or srun (or
//! several times on one machine by `--ranks N`), every rank reads its node and sends each read, as a node
//! frame of the benchmarks' telemetry wire format, to a collector that rank 0 runs. [`wire`] joins the
//! ranks (every node's host, rank 0's collector and its address); [`Wired::start_reads`] starts this
//! node's reader. What rank 0 does with the reads (draw or print them) is the caller's.

use std::net::SocketAddr;
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use efatop_experiments::Bootstrap;
use efatop_node::Monitor;

use crate::collector::{self, Collector, Gate, NodeSender};
use efatop_proto::events::CollectorEvent;
use efatop_auth::secret::Keyed;

/// The ranks joined: rank 0's collector (on rank 0) and where every rank sends its reads.
pub struct Wired {
    pub rank: usize,
    pub size: usize,
    /// Rank 0: every node's reads, in batches, as its collector hands them over.
    pub received: Receiver<Vec<CollectorEvent>>,
    collector: Option<Collector>,
    target: SocketAddr,
}

/// A node's reader, sending its reads to rank 0.
pub struct Reading {
    /// Rank 0's collector; dropping it ends the reads.
    pub collector: Option<Collector>,
    reader: JoinHandle<()>,
}

impl Reading {
    /// Waits for this node's reader to have sent its reads (a rank other than 0).
    pub fn wait(self) {
        let _ = self.reader.join();
    }
}

/// Joins this rank to the others: every node's host (so that rank 0's collector listens no wider than
/// the nodes need), rank 0's collector and its address. Errors name this rank.
pub fn wire(bootstrap: &dyn Bootstrap, secret: &Keyed) -> Result<Wired, String> {
    let (rank, size) = (bootstrap.rank(), bootstrap.size());
    let lost = |err: &dyn std::fmt::Display| format!("rank {rank}: {err}");
    let (events, received) = mpsc::channel::<Vec<CollectorEvent>>();
    let host = efatop_experiments::world::hostname();
    let hosts: Vec<String> = bootstrap
        .allgather(host.as_bytes())
        .map_err(|e| lost(&e))?
        .iter()
        .map(|h| String::from_utf8_lossy(h).into_owned())
        .collect();
    let collector = if rank == 0 {
        let gate = Gate {
            secret: secret.secret.clone(),
            bounds: efatop_proto::telemetry::WorldBounds { ranks: size, channels: 1 },
            bind: collector::bind_address(&hosts),
        };
        Some(Collector::start(events, gate).map_err(|e| lost(&e))?)
    } else {
        None
    };
    let published = collector.as_ref().map_or(String::new(), |c| collector::published(c, &host));
    let gathered = bootstrap.allgather(published.as_bytes()).map_err(|e| lost(&e))?;
    let address = String::from_utf8_lossy(gathered.first().map_or(&[][..], Vec::as_slice)).to_string();
    let rank0_host = address.rsplit_once(':').map_or("", |(host, _)| host);
    let target = collector::resolve(&address, rank0_host, &host).map_err(|e| lost(&e))?;
    Ok(Wired { rank, size, received, collector, target })
}

impl Wired {
    /// Starts this node's reader: `monitor`'s reads every `interval`, `reads` of them, to rank 0.
    pub fn start_reads(self, monitor: Monitor, secret: &Keyed, interval: Duration, reads: Reads) -> Result<(Reading, Receiver<Vec<CollectorEvent>>), String> {
        let rank = self.rank;
        let lost = |err: &dyn std::fmt::Display| format!("rank {rank}: {err}");
        let sender = NodeSender::connect(self.target, &secret.secret).map_err(|e| lost(&format!("cannot reach rank 0's collector: {e}")))?;
        let rank_on_wire = u32::try_from(rank).map_err(|e| lost(&e))?;
        let reader = std::thread::Builder::new()
            .name("efatop-monitor-node".into())
            .spawn(move || send_reads(monitor, sender, rank_on_wire, interval, reads))
            .map_err(|e| lost(&e))?;
        Ok((Reading { collector: self.collector, reader }, self.received))
    }
}

/// How many reads a node sends, and which.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    /// Two reads `--interval` apart; only the second (with rates) is sent.
    Once,
    Count(u64),
    Forever,
}

fn send_reads(mut monitor: Monitor, mut sender: NodeSender, rank: u32, interval: Duration, reads: Reads) {
    let started = Instant::now();
    let mut next = Instant::now();
    let mut seq = 0_u64;
    loop {
        let snapshot = monitor.sample(started.elapsed());
        let skip_first = matches!(reads, Reads::Once) && snapshot.interval_ms.is_none();
        if !skip_first {
            seq += 1;
            let sample = snapshot.sent_as(rank, seq, sender.drops());
            if sender.send(&sample).is_err() {
                // Rank 0 has gone: nothing is left to show this node's reads.
                return;
            }
            let done = match reads {
                Reads::Once => true,
                Reads::Count(count) => seq >= count,
                Reads::Forever => false,
            };
            if done {
                sender.finish(Duration::from_secs(2));
                return;
            }
        }
        next += interval;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}
