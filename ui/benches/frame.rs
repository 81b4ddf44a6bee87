//! What one dashboard frame costs at scale (a benchmark, not a test): 1024 hosts × 8 ranks × 4 channels,
//! every channel's history full, drawn on ratatui's `TestBackend`. Beside the runtime's `bench_collector` example (can
//! rank 0 take in the samples?), this asks whether it can draw them: the goal is ≤ 20 ms a frame in a
//! release build, with and without a known link speed (without one, the gauges scale to the peak seen).
//!
//! Run: `cargo bench -p efatop-ui --bench frame` (options after `--`: `--hosts N --ranks-per-host N
//! --channels N --frames N --width N --height N`).

use std::time::{Duration, Instant};

use efatop_proto::telemetry::histogram::bucket_of;
use efatop_proto::telemetry::{ChannelSample, IntervalHistogram, PeerSample, RankSample};
use efatop_proto::RunResults;
use efatop_ui::dashboard;
use efatop_ui::ingest::Ingest;
use efatop_proto::liveness::Liveness;
use efatop_proto::events::RunInfo;
use efatop_ui::state::{DashboardState, HISTORY_LEN};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

struct Options {
    hosts: usize,
    ranks_per_host: usize,
    channels: usize,
    frames: usize,
    width: u16,
    height: u16,
}

fn options() -> Options {
    let mut options = Options { hosts: 1024, ranks_per_host: 8, channels: 4, frames: 100, width: 200, height: 60 };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for (at, flag) in args.iter().enumerate() {
        // `cargo bench` passes `--bench`; anything else unknown is ignored as well.
        let value = || args.get(at + 1).and_then(|v| v.parse::<usize>().ok());
        match flag.as_str() {
            "--hosts" => options.hosts = value().unwrap_or(options.hosts),
            "--ranks-per-host" => options.ranks_per_host = value().unwrap_or(options.ranks_per_host),
            "--channels" => options.channels = value().unwrap_or(options.channels),
            "--frames" => options.frames = value().unwrap_or(options.frames),
            "--width" => options.width = value().and_then(|v| u16::try_from(v).ok()).unwrap_or(options.width),
            "--height" => options.height = value().and_then(|v| u16::try_from(v).ok()).unwrap_or(options.height),
            _ => {}
        }
    }
    options
}

/// A sample whose rates vary by rank, channel and time, so bars, peaks and histories all move.
fn sample(rank: usize, seq: u64, channels: usize) -> RankSample {
    let interval_ns = 100_000_000;
    let bucket = bucket_of(8_000 + (rank as u64 % 7) * 1_000);
    let latency = IntervalHistogram { buckets: vec![(u16::try_from(bucket).unwrap_or(u16::MAX), 1)].into() };
    RankSample {
        rank: rank as u32,
        seq,
        interval_ns,
        drops: 0,
        channels: (0..channels)
            .map(|channel| {
                let wave = (seq as usize + rank * 3 + channel * 5) % 17;
                let bytes = 1_000_000_000 + wave as u64 * 50_000_000;
                ChannelSample { channel: channel as u16, bytes, ops: bytes >> 20, in_flight: (wave % 12) as u32, latency: latency.clone() }
            })
            .collect(),
        peers: vec![PeerSample { peer: ((rank + 1) % 8) as u32, bytes: 1 << 30, ops: 1024, latency: latency.clone() }],
        queue: None,
        nvlink: Vec::new(),
    }
}

struct Figures {
    ingest_per_sample: Duration,
    /// The process's resident memory once every history is full (`VmRSS`), in MiB.
    rss_mib: Option<f64>,
    /// Wall time of each frame.
    frames: Vec<Duration>,
    /// CPU time of each frame, when the kernel says (`/proc/thread-self/schedstat`): on a shared machine
    /// wall time counts the other tenants too.
    frames_cpu: Vec<Duration>,
}

/// CPU time this thread has run, from the scheduler's own count (nanoseconds); `None` off Linux.
fn thread_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(Duration::from_nanos(stat.split_whitespace().next()?.parse().ok()?))
}

fn run(options: &Options, link_gbps: Option<f64>) -> Figures {
    let ranks = options.hosts * options.ranks_per_host;
    let hosts: Vec<String> = (0..ranks).map(|rank| format!("p5-node-{:04}", rank / options.ranks_per_host)).collect();
    let nics: Vec<Vec<String>> =
        vec![(0..options.channels).map(|c| format!("rdmap{}s0-rdm", 79 + c)).collect(); ranks];
    let run = RunInfo {
        experiment: efatop_proto::Experiment::Write,
        provider_stack: "efa".into(),
        ranks,
        hosts,
        channels: options.channels,
        link_gbps,
        memory: "host".into(),
        configs: vec![
            efatop_proto::Column::write(efatop_proto::column::Layout::Single, efatop_proto::column::Memory::Host),
            efatop_proto::Column::write(efatop_proto::column::Layout::Multi, efatop_proto::column::Memory::Host),
        ],
        sizes: vec![1 << 20, 2 << 20],
        placements: Vec::new(),
    };
    let mut state = DashboardState::default();
    let mut ingest = Ingest::begin(&mut state, run, &nics, RunResults::default());
    let view = efatop_ui::view::View::of(&state);
    // Rank 0's one liveness clock, as the watchdog keeps it: every rank heard as its samples arrive.
    let mut liveness = Liveness::new(ranks, Duration::from_millis(100), Duration::from_mins(1));

    // Fill every channel's history, as after a long run.
    let started = Instant::now();
    let mut samples = 0u64;
    for seq in 0..HISTORY_LEN as u64 {
        for rank in 0..ranks {
            ingest.sample(&mut state, &sample(rank, seq, options.channels), Duration::from_millis(seq * 100));
            samples += 1;
        }
    }
    let ingest_per_sample = started.elapsed() / u32::try_from(samples).unwrap_or(u32::MAX);
    ingest.tick(&mut state, Duration::from_millis(HISTORY_LEN as u64 * 100), &liveness);
    let rss_mib = rss_mib();

    let mut terminal = match Terminal::new(TestBackend::new(options.width, options.height)) {
        Ok(terminal) => terminal,
        Err(err) => panic!("TestBackend: {err}"),
    };
    let mut frames = Vec::with_capacity(options.frames);
    let mut frames_cpu = Vec::with_capacity(options.frames);
    for frame in 0..options.frames {
        // Between frames, one interval of a slice of the ranks arrives (a frame every 100 ms at 10 Hz
        // would see all of them; a slice keeps the bench about drawing).
        let seq = HISTORY_LEN as u64 + frame as u64;
        for rank in (frame % 16..ranks).step_by(16) {
            ingest.sample(&mut state, &sample(rank, seq, options.channels), Duration::from_millis(seq * 100));
            liveness.heard(rank, Duration::from_millis(seq * 100));
        }
        ingest.tick(&mut state, Duration::from_millis(seq * 100), &liveness);
        let cpu = thread_cpu();
        let started = Instant::now();
        if let Err(err) = terminal.draw(|f| dashboard::draw(f, &state, &view)) {
            panic!("draw: {err}");
        }
        frames.push(started.elapsed());
        if let (Some(before), Some(after)) = (cpu, thread_cpu()) {
            frames_cpu.push(after.saturating_sub(before));
        }
    }
    Figures { ingest_per_sample, rss_mib, frames, frames_cpu }
}

/// This process's resident memory (`VmRSS` of /proc/self/status), in MiB; `None` off Linux.
fn rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn main() {
    let options = options();
    let ranks = options.hosts * options.ranks_per_host;
    println!(
        "# dashboard frame: {} hosts × {} ranks × {} channels = {} gauges, history {HISTORY_LEN} points each, {}×{} TestBackend, {} frames",
        options.hosts,
        options.ranks_per_host,
        options.channels,
        ranks * options.channels,
        options.width,
        options.height,
        options.frames
    );
    println!("| link speed | frame median (ms) | frame p90 (ms) | frame max (ms) | CPU per frame, median (ms) | ingest (µs/sample) | RSS (MiB) |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut worst: f64 = 0.0;
    for (label, link) in [("known (100 Gbps)", Some(100.0)), ("unknown (peak)", None)] {
        let mut figures = run(&options, link);
        figures.frames.sort_unstable();
        figures.frames_cpu.sort_unstable();
        let at = |q: f64| figures.frames[((figures.frames.len() - 1) as f64 * q).round() as usize];
        let cpu = figures.frames_cpu.get(figures.frames_cpu.len() / 2).map_or_else(|| "-".to_string(), |cpu| format!("{:.2}", ms(*cpu)));
        worst = worst.max(ms(at(0.5)));
        println!(
            "| {label} | {:.2} | {:.2} | {:.2} | {cpu} | {:.2} | {} |",
            ms(at(0.5)),
            ms(at(0.9)),
            ms(at(1.0)),
            figures.ingest_per_sample.as_secs_f64() * 1e6,
            figures.rss_mib.map_or_else(|| "-".to_string(), |mib| format!("{mib:.0}"))
        );
    }
    println!("\nworst median: {worst:.2} ms per frame, wall time (goal: <= 20 ms)");
}
