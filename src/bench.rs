//! `efatop bench-collector` (hidden): can rank 0's collector keep up with a large job? A synthetic sender
//! feeds it `--ranks` × `--channels` samples at `--hz` over one connection per rank, and the real
//! consumer path (decode, then fold into the dashboard state) runs behind it. Each second it prints what
//! was offered, what was consumed, the backlog, and the CPU the collector and ingest threads used.
//!
//! The claim under test is that rank 0's consumer side keeps up on one core, so the collector and the
//! ingest thread are confined to the last CPU and the synthetic senders to the others (on a machine with
//! one CPU everything shares it, and the verdict says so).

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use efatop_proto::RunResults;
use efatop_proto::telemetry::{ChannelSample, IntervalHistogram, PeerSample, RankSample, wire};
use efatop_ui::ingest::Ingest;
use efatop_ui::state::{DashboardState, RunInfo};

use crate::cli::BenchCollectorArgs;
use crate::event::ConsumerEvent;
use crate::collector::{Collector, CollectorEvent};

/// The bench's own table: on stderr when stdout carries the JSON lines under test.
macro_rules! say {
    ($json:expr, $($arg:tt)*) => {
        if $json { eprintln!($($arg)*) } else { println!($($arg)*) }
    };
}

pub fn bench_collector(args: &BenchCollectorArgs) -> i32 {
    match run(args) {
        Ok(kept_up) => i32::from(!kept_up),
        Err(err) => {
            eprintln!("efatop: error: bench-collector: {err}");
            1
        }
    }
}

#[allow(clippy::too_many_lines)] // one bench, read top to bottom: setup, load, per-second table, verdict
fn run(args: &BenchCollectorArgs) -> std::io::Result<bool> {
    let ranks = args.ranks as usize;
    let channels = args.channels as usize;
    let (tx, rx) = mpsc::channel::<ConsumerEvent>();
    let collector = Collector::start(tx)?;
    let address = SocketAddr::from(([127, 0, 0, 1], collector.address.port()));
    let collector_tid = thread_id("efatop-collecto");
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let consumer_cpu = cpus - 1;
    let sender_cpus: Vec<usize> = if cpus > 1 { (0..consumer_cpu).collect() } else { vec![0] };
    let confined = cpus > 1 && collector_tid.as_deref().is_some_and(|tid| pin_thread(tid.parse().ok(), &[consumer_cpu]));

    // The consumer: the dashboard's real ingestion.
    let consumed = Arc::new(AtomicU64::new(0));
    let json = args.json;
    let ingest_thread = {
        let consumed = consumed.clone();
        std::thread::Builder::new().name("efatop-ingest".into()).spawn(move || {
            if cpus > 1 {
                pin_thread(None, &[consumer_cpu]);
            }
            let mut state = DashboardState::default();
            let run = RunInfo { ranks, hosts: vec!["bench".into(); ranks], channels, ..RunInfo::default() };
            let nics = vec![(0..channels).map(|c| format!("nic{c}")).collect::<Vec<_>>(); ranks];
            let results = RunResults::default();
            let mut ingest = Ingest::begin(&mut state, run, &nics, results);
            let started = Instant::now();
            let mut lines = crate::printer::jsonl::SampleLines::default();
            while let Ok(event) = rx.recv() {
                let ConsumerEvent::Telemetry(events) = event else { continue };
                let now = started.elapsed();
                if json {
                    // `--json`'s printer instead of the dashboard's ingest: one line per rank and channel.
                    let samples = events.iter().filter(|e| matches!(e, CollectorEvent::Sample(_))).count() as u64;
                    crate::printer::jsonl::print_event(ConsumerEvent::Telemetry(events), now, &mut lines);
                    consumed.fetch_add(samples, Ordering::Relaxed);
                    continue;
                }
                let mut samples = 0;
                for event in events {
                    if let CollectorEvent::Sample(sample) = event {
                        ingest.sample(&mut state, &sample, now);
                        samples += 1;
                    }
                }
                consumed.fetch_add(samples, Ordering::Relaxed);
            }
        })?
    };

    // The senders: one connection per rank, split over two threads. They all connect before the clock
    // starts: a burst of thousands of connects is a start-up cost, not the load under test.
    let offered = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let interval = Duration::from_secs_f64(1.0 / f64::from(args.hz));
    let mut senders = Vec::new();
    let threads = 2.min(ranks).max(1);
    let connected = Arc::new(std::sync::Barrier::new(threads + 1));
    for thread in 0..threads {
        let my_ranks: Vec<usize> = (thread..ranks).step_by(threads).collect();
        let (offered, stop, connected, sender_cpus) = (offered.clone(), stop.clone(), connected.clone(), sender_cpus.clone());
        senders.push(std::thread::spawn(move || -> std::io::Result<()> {
            pin_thread(None, &sender_cpus);
            let mut links = Vec::with_capacity(my_ranks.len());
            let connecting = (|| {
            for &rank in &my_ranks {
                let stream = TcpStream::connect(address)?;
                stream.set_nodelay(true)?;
                let mut frame = Vec::new();
                wire::encode(&synthetic_sample(rank, channels), &mut frame);
                links.push((stream, frame));
            }
            Ok::<(), std::io::Error>(())
            })();
            // Reach the barrier even when connecting failed, so the bench reports instead of hanging.
            connected.wait();
            connecting?;
            let mut next = Instant::now();
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for (stream, frame) in &mut links {
                    // seq sits after length, version, kind and rank.
                    frame[10..18].copy_from_slice(&seq.to_le_bytes());
                    stream.write_all(frame)?;
                    offered.fetch_add(1, Ordering::Relaxed);
                }
                seq += 1;
                next += interval;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            Ok(())
        }));
    }

    connected.wait();
    say!(json, 
        "# collector load: {ranks} ranks × {channels} channels at {} Hz = {} samples/s offered, one connection per rank; consumer: {}",
        args.hz,
        ranks as u64 * u64::from(args.hz),
        if json { format!("--json lines on stdout ({} lines/s)", ranks as u64 * channels as u64 * u64::from(args.hz)) } else { "the dashboard's ingest".into() }
    );
    if confined {
        say!(json, "# collector and ingest threads confined to CPU {consumer_cpu}; senders on CPUs {}", sender_cpus.iter().map(ToString::to_string).collect::<Vec<_>>().join(","));
    } else {
        say!(json, "# warning: collector and ingest could not be given a CPU of their own; they share with the senders");
    }
    say!(json, "| second | offered/s | consumed/s | backlog | collector CPU (% of one core) | ingest CPU (% of one core) | consumer side (% of one core) |");
    say!(json, "|-------:|----------:|-----------:|--------:|------------------------------:|---------------------------:|------------------------------:|");
    let ingest_tid = thread_id("efatop-ingest");
    let started = Instant::now();
    let (mut last_offered, mut last_consumed, mut last_cpu) = (0, 0, thread_cpu_seconds(collector_tid.as_deref()));
    let mut last_ingest_cpu = thread_cpu_seconds(ingest_tid.as_deref());
    let mut backlogs = Vec::new();
    let mut offered_rates = Vec::new();
    let mut consumer_cpu_percent = Vec::new();
    for second in 1..=args.seconds {
        std::thread::sleep((started + Duration::from_secs(u64::from(second))).saturating_duration_since(Instant::now()));
        let (now_offered, now_consumed, now_cpu) =
            (offered.load(Ordering::Relaxed), consumed.load(Ordering::Relaxed), thread_cpu_seconds(collector_tid.as_deref()));
        let backlog = now_offered.saturating_sub(now_consumed);
        backlogs.push(backlog);
        let ingest_cpu = thread_cpu_seconds(ingest_tid.as_deref());
        let (collector_percent, ingest_percent) = ((now_cpu - last_cpu) * 100.0, (ingest_cpu - last_ingest_cpu) * 100.0);
        offered_rates.push(now_offered - last_offered);
        consumer_cpu_percent.push(collector_percent + ingest_percent);
        say!(json, 
            "| {second:>6} | {:>9} | {:>10} | {backlog:>7} | {collector_percent:>29.1} | {ingest_percent:>26.1} | {:>29.1} |",
            now_offered - last_offered,
            now_consumed - last_consumed,
            collector_percent + ingest_percent
        );
        last_ingest_cpu = ingest_cpu;
        (last_offered, last_consumed, last_cpu) = (now_offered, now_consumed, now_cpu);
    }
    stop.store(true, Ordering::Relaxed);
    for sender in senders {
        if let Ok(Err(err)) = sender.join() {
            eprintln!("efatop: warning: a sender stopped early: {err}");
        }
    }
    // Judged on the second half (start-up is over): the senders really offered the load (a bench whose
    // senders stalled proves nothing), and the backlog stayed within two intervals' samples without growing.
    let half = backlogs.len() / 2;
    let (backlog_half, offered_half) = (&backlogs[half..], &offered_rates[half..]);
    let target = ranks as u64 * u64::from(args.hz);
    let one_interval = ranks as u64;
    let offered_enough = offered_half.iter().all(|rate| *rate * 100 >= target * 95);
    let bounded = backlog_half.iter().all(|b| *b <= 2 * one_interval);
    let not_growing = backlog_half.last() <= backlog_half.first().map(|f| f + one_interval).as_ref();
    let mut busiest: Vec<f64> = consumer_cpu_percent[half..].to_vec();
    busiest.sort_by(f64::total_cmp);
    let median_cpu = busiest.get(busiest.len() / 2).copied().unwrap_or(0.0);
    let kept_up = offered_enough && bounded && not_growing;
    let verdict = match (offered_enough, bounded && not_growing) {
        (false, _) => format!("inconclusive: the senders offered less than 95% of {target} samples/s"),
        (true, true) => format!(
            "kept up: the backlog stayed within two intervals' samples; consumer side {median_cpu:.0}% of one core (median)"
        ),
        (true, false) => "fell behind: the backlog grew".to_string(),
    };
    say!(json, "# {verdict}{}", if confined { "" } else { " (not confined to one core)" });
    drop(collector);
    drop(ingest_thread);
    Ok(kept_up)
}

/// A busy rank's sample: every channel moved data with a few latency buckets filled.
fn synthetic_sample(rank: usize, channels: usize) -> RankSample {
    let latency = IntervalHistogram { buckets: vec![(200, 40), (210, 9), (250, 1)] };
    RankSample {
        rank: rank as u32,
        seq: 0,
        interval_ns: 100_000_000,
        drops: 0,
        channels: (0..channels)
            .map(|channel| ChannelSample {
                channel: channel as u16,
                bytes: 1_250_000_000,
                ops: 50,
                in_flight: 4,
                latency: latency.clone(),
            })
            .collect(),
        peers: vec![PeerSample { peer: 0, bytes: 1_250_000_000, ops: 50, latency }],
        ..RankSample::default()
    }
}

/// Confines a thread (`tid`, or the calling thread when `None`) to `cpus`; false when the kernel refused.
fn pin_thread(tid: Option<i32>, cpus: &[usize]) -> bool {
    use nix::sched::{CpuSet, sched_setaffinity};
    let mut set = CpuSet::new();
    for &cpu in cpus {
        if set.set(cpu).is_err() {
            return false;
        }
    }
    sched_setaffinity(nix::unistd::Pid::from_raw(tid.unwrap_or(0)), &set).is_ok()
}

/// The id of this process's thread whose name (as the kernel keeps it, 15 characters) is `name`.
fn thread_id(name: &str) -> Option<String> {
    std::thread::sleep(Duration::from_millis(50));
    std::fs::read_dir("/proc/self/task").ok()?.flatten().find_map(|task| {
        let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
        (comm.trim() == name).then(|| task.file_name().to_string_lossy().into_owned())
    })
}

fn thread_cpu_seconds(tid: Option<&str>) -> f64 {
    let Some(tid) = tid else { return 0.0 };
    let Ok(stat) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) else { return 0.0 };
    // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
    let after_name = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}
