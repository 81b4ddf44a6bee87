//! Can rank 0 of `efatop monitor` on many nodes keep up with a fleet? A synthetic fleet of `--nodes` p5
//! nodes (32 EFA NICs each, read once from a fake p5 sysfs tree placed by the p5 topology fixture, then
//! given each node's own rates) sends a read every `1/--hz` s, as node frames over TCP, to rank 0's real
//! collector; rank 0's many-node TUI (the real [`Nodes`] of `efatop-ui`, the binary's) takes them in and
//! is drawn on a `TestBackend` by the real session loop's frame ([`tui::frame_within`], its budget
//! included) every 50 ms. One NIC of one node slows to 60 % from 3 s: the bench says when that node headed
//! the nodes, worst NIC first.
//!
//! The collector and the TUI are confined to the last CPU, the senders to the others, as the claim under
//! test is that rank 0's side keeps up on one core. Each second: reads offered and taken in, CPU of both
//! threads, RSS; at the end a verdict and one `# summary` line (`scripts/bench/bench-fleet --nodes` reads it).
//!
//! `cargo run --release -p efatop-runtime --example bench_nodes -- --nodes 4096` (`--help` for the rest).

use efatop_auth::seal::SealedWriter;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use clap::Parser;

#[path = "bench_common/mod.rs"]
mod bench_common;
use bench_common::{fd_budget, rss_mib, thread_cpu_seconds, thread_id};
use efatop_node::fake_fleet;
use efatop_proto::events::CollectorEvent;
use efatop_proto::telemetry::{wire, NicKind, WorldBounds};
use efatop_runtime::affinity::pin_thread;
use efatop_runtime::collector::{Collector, Gate};
use efatop_ui::tui::nodes::Nodes;
use efatop_ui::tui::{self, Polled, Source};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The NIC that slows, on node `--nodes` × 7 / 10, from 3 s on.
const SLOW_NIC: &str = "rdmap132s0";
const SLOW_AT: Duration = Duration::from_secs(3);

#[derive(Parser)]
#[command(about = "Rank 0 of the many-node monitor under a synthetic fleet of p5 nodes")]
struct Args {
    /// Synthetic nodes, each a p5 (32 EFA NICs, lo, eth0)
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=16384))]
    nodes: u32,
    /// Reads per second per node
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10))]
    hz: u32,
    /// How long to run
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(4..=600))]
    seconds: u32,
    /// The p5 topology fixture that places the NICs under their GPUs
    #[arg(long, default_value = "topology/fixtures/p5.48xlarge.xml")]
    topology: std::path::PathBuf,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(err) => {
            eprintln!("bench_nodes: error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The collector's batches, counted as the TUI takes them in.
struct Counted {
    batches: std::sync::mpsc::Receiver<Vec<CollectorEvent>>,
    reads: Arc<AtomicU64>,
}

impl Source for Counted {
    type Event = Vec<CollectorEvent>;
    fn poll(&mut self, _now: Duration) -> Polled<Self::Event> {
        match self.batches.try_recv() {
            Ok(batch) => {
                let reads = batch.iter().filter(|event| matches!(event, CollectorEvent::Node(_))).count();
                self.reads.fetch_add(reads as u64, Ordering::Relaxed);
                Polled::Ready(batch)
            }
            Err(std::sync::mpsc::TryRecvError::Empty) => Polled::Pending,
            Err(std::sync::mpsc::TryRecvError::Disconnected) => Polled::Gone,
        }
    }
}

#[allow(clippy::too_many_lines)] // one bench, read top to bottom: setup, load, per-second table, verdict
fn run(args: &Args) -> std::io::Result<bool> {
    let nodes = args.nodes as usize;
    let tree = tempfile::tempdir()?;
    let shape = fake_fleet::p5_read(tree.path(), &args.topology, true)?;
    let efa_nics = shape.nics.iter().filter(|nic| nic.kind == NicKind::Rdma).count();
    let slow_node = args.nodes * 7 / 10;
    let secret = efatop_auth::Secret::generate().map_err(std::io::Error::other)?;
    let (events, batches) = std::sync::mpsc::channel::<Vec<CollectorEvent>>();
    // As `efatop monitor` on many nodes gates its collector: one rank per node, a node frame each.
    let gate = Gate { secret: secret.clone(), bounds: WorldBounds { ranks: nodes, channels: 1 }, bind: std::net::IpAddr::from([127, 0, 0, 1]) };
    let collector = Collector::start(events, gate)?;
    let address = SocketAddr::from(([127, 0, 0, 1], collector.address.port()));
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let rank0_cpu = cpus - 1;
    let sender_cpus: Vec<usize> = if cpus > 1 { (0..rank0_cpu).collect() } else { vec![0] };
    let collector_tid = thread_id("efatop-collecto");
    let confined = cpus > 1 && collector_tid.as_deref().is_some_and(|tid| pin_thread(tid.parse().ok(), [rank0_cpu]));

    // The senders: connections carrying several nodes each where the process may not open one per node.
    let connections = nodes.min(fd_budget() / 2).max(1);
    let threads = (cpus - 1).clamp(1, 4).min(connections);
    let offered = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let connected = Arc::new(Barrier::new(threads + 1));
    let began: Arc<std::sync::OnceLock<Instant>> = Arc::default();
    let interval = Duration::from_secs_f64(1.0 / f64::from(args.hz));
    let mut senders = Vec::new();
    for thread in 0..threads {
        let (offered, stop, connected, began, secret, shape, cpus) =
            (offered.clone(), stop.clone(), connected.clone(), began.clone(), secret.clone(), shape.clone(), sender_cpus.clone());
        senders.push(std::thread::spawn(move || -> std::io::Result<()> {
            pin_thread(None, cpus);
            let mut links: Vec<(SealedWriter<TcpStream>, Vec<u32>)> = Vec::new();
            let connecting = (|| {
                for connection in (thread..connections).step_by(threads) {
                    // What it sends is sealed, as a rank's sampler's is.
                    let (stream, sealer) = efatop_runtime::collector::dial(address, &secret)?;
                    stream.set_nonblocking(false)?;
                    let stream = SealedWriter::new(stream, sealer, "rank 0's collector");
                    links.push((stream, (connection..nodes).step_by(connections).map(|node| node as u32).collect()));
                }
                Ok::<(), std::io::Error>(())
            })();
            connected.wait();
            connecting?;
            let began = *began.get_or_init(Instant::now);
            let (mut step, mut next, mut frames) = (0u64, Instant::now(), Vec::new());
            while !stop.load(Ordering::Relaxed) {
                let slow = began.elapsed() >= SLOW_AT;
                for (stream, carried) in &mut links {
                    frames.clear();
                    for &node in carried.iter() {
                        wire::encode_node(&fake_fleet::fleet_read(&shape, node, step, (slow && node == slow_node).then_some(SLOW_NIC)), &mut frames).map_err(std::io::Error::other)?;
                    }
                    stream.write_all(&frames)?;
                    offered.fetch_add(carried.len() as u64, Ordering::Relaxed);
                }
                step += 1;
                next += interval;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            Ok(())
        }));
    }

    // Rank 0's TUI: the binary's many-node view and session loop, on a TestBackend.
    let taken = Arc::new(AtomicU64::new(0));
    let (frames_out, frames_in) = std::sync::mpsc::channel();
    let tui_thread = {
        let (taken, stop, began) = (taken.clone(), stop.clone(), began.clone());
        std::thread::Builder::new().name("efatop-nodes-tui".into()).spawn(move || {
            if cpus > 1 {
                pin_thread(None, [rank0_cpu]);
            }
            let mut source = Counted { batches, reads: taken };
            let mut view = Nodes::new("", nodes, false);
            let Ok(mut terminal) = Terminal::new(TestBackend::new(200, 60));
            let clock = Instant::now();
            let (mut times, mut slow_on_top, mut next) = (Vec::new(), None, Instant::now());
            while !stop.load(Ordering::Relaxed) {
                let frame_start = Instant::now();
                let Ok(drawn) = tui::frame_within(&mut terminal, &mut view, &mut source, clock.elapsed(), Some(tui::FOLD_BUDGET)) else { break };
                let took = frame_start.elapsed();
                let since = began.get().map(Instant::elapsed);
                // After the first two reads (the first of each node comes in while the others connect).
                if since.is_some_and(|since| since >= Duration::from_secs(2)) {
                    times.push(took);
                }
                if slow_on_top.is_none() && since.is_some_and(|since| since >= SLOW_AT) {
                    let screen: String = terminal.backend().buffer().content().chunks(200).map(|row| row.iter().map(ratatui::buffer::Cell::symbol).collect::<String>() + "\n").collect();
                    let mut lines = screen.lines().skip_while(|line| !line.starts_with("Nodes, worst NIC first"));
                    if lines.nth(1).is_some_and(|line| line.starts_with(&format!("▶ p5-node-{slow_node:04}"))) {
                        slow_on_top = since.and_then(|since| since.checked_sub(SLOW_AT));
                    }
                }
                next = if drawn.behind { Instant::now() } else { next + tui::TICK };
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            let _ = frames_out.send((times, slow_on_top));
        })?
    };
    connected.wait();
    let began_at = *began.get_or_init(Instant::now);
    let tui_tid = thread_id("efatop-nodes-tu");
    let cpu_now = || [collector_tid.as_deref(), tui_tid.as_deref()].map(thread_cpu_seconds);
    println!(
        "# many-node monitor load: {nodes} p5 nodes × {efa_nics} EFA NICs at {} Hz = {} reads/s ({} NIC figures/s) over {connections} connections; rank 0: the many-node TUI on a 200×60 TestBackend every 50 ms",
        args.hz,
        nodes as u64 * u64::from(args.hz),
        (nodes * shape.nics.len()) as u64 * u64::from(args.hz)
    );
    println!("# slow NIC: p5-node-{slow_node:04} {SLOW_NIC} at 60% from {} s", SLOW_AT.as_secs());
    if confined {
        println!("# collector and TUI confined to CPU {rank0_cpu}; senders on CPUs {}", sender_cpus.iter().map(ToString::to_string).collect::<Vec<_>>().join(","));
    } else {
        println!("# warning: the collector and the TUI could not be given a CPU of their own");
    }
    println!("| second | offered/s | taken in/s | backlog | collector CPU % | TUI CPU % | rank 0 side CPU % | RSS MiB |");
    println!("|-------:|----------:|-----------:|--------:|----------------:|----------:|------------------:|--------:|");
    let (mut last_offered, mut last_taken, mut last_cpu) = (0, 0, cpu_now());
    let mut seconds = Vec::new();
    for second in 1..=args.seconds {
        std::thread::sleep((began_at + Duration::from_secs(u64::from(second))).saturating_duration_since(Instant::now()));
        let (offered_now, taken_now, cpu) = (offered.load(Ordering::Relaxed), taken.load(Ordering::Relaxed), cpu_now());
        let percent = [(cpu[0] - last_cpu[0]) * 100.0, (cpu[1] - last_cpu[1]) * 100.0];
        let rss = rss_mib("VmRSS").unwrap_or(0.0);
        let backlog = offered_now.saturating_sub(taken_now);
        println!(
            "| {second:>6} | {:>9} | {:>10} | {backlog:>7} | {:>15.1} | {:>9.1} | {:>17.1} | {rss:>7.0} |",
            offered_now - last_offered,
            taken_now - last_taken,
            percent[0],
            percent[1],
            percent[0] + percent[1]
        );
        seconds.push((offered_now - last_offered, backlog, percent, rss));
        (last_offered, last_taken, last_cpu) = (offered_now, taken_now, cpu);
    }
    stop.store(true, Ordering::Relaxed);
    for sender in senders {
        if let Ok(Err(err)) = sender.join() {
            eprintln!("bench_nodes: warning: a sender stopped early: {err}");
        }
    }
    let _ = tui_thread.join();
    drop(collector);
    let (mut times, slow_on_top) = frames_in.recv().unwrap_or_default();
    let peak = rss_mib("VmHWM");

    // Judged on the second half: the load was offered, the backlog stayed within one round of reads.
    let half = &seconds[seconds.len() / 2..];
    let target = nodes as u64 * u64::from(args.hz);
    let offered_enough = half.iter().all(|(offered, ..)| offered * 100 >= target * 95);
    let bounded = half.iter().all(|&(_, backlog, ..)| backlog <= target);
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(0.0)
    };
    let cpu = [median(half.iter().map(|s| s.2[0]).collect()), median(half.iter().map(|s| s.2[1]).collect())];
    times.sort_unstable();
    let quantile = |q: f64| times.get(((times.len().max(1) - 1) as f64 * q).round() as usize).map_or(f64::NAN, |t| t.as_secs_f64() * 1e3);
    let rss = seconds.last().map_or(0.0, |s| s.3);
    let kept_up = offered_enough && bounded;
    println!(
        "# {}; frames (take in + tick + draw, after 2 s): {} frames, median {:.2} ms, p99 {:.2} ms; slow node on top {}",
        if !offered_enough { "inconclusive: the senders offered less than 95% of the reads".to_string() } else if bounded { format!("kept up: the backlog stayed within one round of reads; rank 0's side {:.0}% of one core (median)", cpu[0] + cpu[1]) } else { "fell behind: the backlog grew past one round of reads".to_string() },
        times.len(),
        quantile(0.5),
        quantile(0.99),
        slow_on_top.map_or("never".to_string(), |after| format!("{:.1} s after its slowdown", after.as_secs_f64()))
    );
    println!(
        "# summary: mode=nodes nodes={nodes} nics={} hz={} reads_per_s={target} collector_cpu={:.1} tui_cpu={:.1} frame_p50_ms={:.2} frame_p99_ms={:.2} rss_mib={rss:.0} peak_rss_mib={} slow_top_s={} kept_up={} confined={}",
        shape.nics.len(),
        args.hz,
        cpu[0],
        cpu[1],
        quantile(0.5),
        quantile(0.99),
        peak.map_or("-".to_string(), |peak| format!("{peak:.0}")),
        slow_on_top.map_or("-".to_string(), |after| format!("{:.1}", after.as_secs_f64())),
        if kept_up { "yes" } else if !offered_enough { "inconclusive" } else { "no" },
        if confined { "yes" } else { "no" }
    );
    Ok(kept_up)
}




