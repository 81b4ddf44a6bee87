//! Can rank 0 keep up with a large job? A synthetic fleet ([`feed`]: `--hosts` × `--ranks-per-host`
//! ranks, or `--ranks` on one host, × `--channels`, at `--hz`) sends real telemetry frames over TCP to
//! rank 0's real collector, and rank 0's own loop ([`efatop_runtime::rank_zero::run`]: the liveness
//! clock and its watchdog, the results file, `--record`'s recording through the real outlets, the ending)
//! runs behind it as in a run, on a thread of its own, fed the run's steps by this bench as an experiment
//! would feed it. Its consumer is the dashboard (the real [`App`] of `efatop-ui`, folding every event and
//! drawn on a 200×60 `TestBackend` every 50 ms, the dashboard's frame rate) or, with `--json`, every
//! channel sample serialized as a JSON line on stdout. `--slow` makes one NIC slow from a time on; the
//! dashboard then says how soon the fleet view had it at the top of its worst NICs, and flagged.
//!
//! Each second it prints what was offered, what was consumed, the backlog and the CPU of each of rank
//! 0's threads; at the end, a verdict and one `# summary` line (frame time median and p99, RSS, JSON
//! lines per second) that `scripts/bench/bench-fleet` gathers into its table.
//!
//! The claim under test is that rank 0's side keeps up on one core, so the collector, loop and consumer
//! threads are confined to the last CPU and the synthetic senders to the others (on a machine with one
//! CPU everything shares it, and the verdict says so).
//!
//! `cargo run --release -p efatop-runtime --example bench_collector -- --hosts 1024 --channels 4`
//! (`--help` for the rest).

mod args;
#[path = "../bench_common/mod.rs"]
mod bench_common;
mod feed;
mod viewer;

use bench_common::{rss_mib, thread_cpu_seconds, thread_id, threads_cpu_seconds};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use efatop_experiments::world::Abort;
use efatop_proto::column::{Column, Layout, Memory};
use efatop_proto::liveness::Liveness;
use efatop_proto::output::RailLines;
use clap::Parser;
use efatop_runtime::affinity::pin_thread;
use efatop_runtime::collector::Collector;
use efatop_proto::events::CollectorEvent;
use efatop_proto::events::ConsumerEvent;
use efatop_runtime::rank_zero::{Consumer, ConsumerOutcome, Input, Setup, Show, ShowStart};
use efatop_runtime::results_file::ResultsFile;
use efatop_runtime::serve::Outlets;
use efatop_runtime::watchdog::Watchdog;
use efatop_ui::app::{App, Ended, Event};
use efatop_ui::tui::{self, dashboard::Dashboard};
use efatop_ui::state::DashboardState;
use ratatui::backend::TestBackend;
use ratatui::Terminal;

use args::BenchCollectorArgs;
use feed::{Shape, Slow, SlowIn};

/// The allocator the binary runs with: rank 0's side is measured as it runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The dashboard's frame interval.
const TICK: Duration = Duration::from_millis(50);

/// The bench's own table: on stderr when stdout carries the JSON lines under test.
macro_rules! say {
    ($json:expr, $($arg:tt)*) => {
        if $json { eprintln!($($arg)*) } else { println!($($arg)*) }
    };
}

fn main() -> std::process::ExitCode {
    let args = BenchCollectorArgs::parse();
    let outcome = match &args.fold {
        Some(path) => fold(path, args.screen),
        None => run(&args),
    };
    match outcome {
        Ok(kept_up) => std::process::ExitCode::from(u8::from(!kept_up)),
        Err(err) => {
            eprintln!("bench_collector: error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// What the dashboard consumer measured.
#[derive(Default)]
struct Frames {
    /// Wall time of each frame after the first second: fold what arrived, tick, draw.
    times: Vec<Duration>,
    /// When the slow NIC first headed the fleet's worst NICs, and when it was first flagged behind, after
    /// its slowdown.
    slow_on_top: Option<Duration>,
    slow_flagged: Option<Duration>,
    /// The fleet view's rails and worst NIC at the end, as text.
    last_worst: Option<String>,
    slowest: Slowest,
}

/// Intervals between a relay's writes in a run of `hosts` hosts (every host but rank 0's relays).
fn relays_every(hosts: usize, hz: u32) -> u32 {
    let interval = Duration::from_secs(1) / hz.max(1);
    let every = efatop_runtime::relay::Plan::forward_every(interval, hosts.saturating_sub(1));
    (every.as_nanos() / interval.as_nanos().max(1)).max(1) as u32
}

fn shape_of(args: &BenchCollectorArgs) -> Shape {
    let channels = args.channels as usize;
    match args.hosts {
        Some(hosts) => {
            let ranks_per_host = args.ranks_per_host as usize;
            Shape { hosts: Some(hosts as usize), relay: !args.no_relay, relay_every: args.relay_every.unwrap_or_else(|| relays_every(hosts as usize, args.hz)), ranks_per_host, ranks: hosts as usize * ranks_per_host, channels, hz: args.hz }
        }
        None => Shape { hosts: None, relay: false, relay_every: 1, ranks_per_host: args.ranks as usize, ranks: args.ranks as usize, channels, hz: args.hz },
    }
}

#[allow(clippy::too_many_lines)] // one bench, read top to bottom: setup, load, per-second table, verdict
fn run(args: &BenchCollectorArgs) -> std::io::Result<bool> {
    let shape = shape_of(args);
    let (ranks, channels, json) = (shape.ranks, shape.channels, args.json);
    let slow = args.slow.filter(|slow| slow.global_rank(&shape) < ranks && slow.channel < channels);
    if args.slow.is_some() && slow.is_none() {
        eprintln!("bench_collector: warning: --slow names a NIC outside the fleet; nothing is slowed");
    }
    let start = shape.run_start();
    let clock = Instant::now();
    let (inputs, from_run) = mpsc::channel::<Input>();
    let secret = efatop_auth::Secret::generate().map_err(std::io::Error::other)?;
    let gate = efatop_runtime::collector::Gate {
        secret: secret.clone(),
        bounds: efatop_proto::telemetry::WorldBounds { ranks, channels },
        bind: std::net::IpAddr::from([127, 0, 0, 1]),
    };
    let collector = Collector::start(inputs.clone(), gate)?;
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], collector.address.port()));
    let collector_tid = thread_id("efatop-collecto");
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let consumer_cpu = cpus - 1;
    let sender_cpus: Vec<usize> = if cpus > 1 { (0..consumer_cpu).collect() } else { vec![0] };
    let confined = cpus > 1 && collector_tid.as_deref().is_some_and(|tid| pin_thread(tid.parse().ok(), [consumer_cpu]));
    let pin_consumer_side = move || {
        if cpus > 1 {
            pin_thread(None, [consumer_cpu]);
        }
    };

    // The consumer: the dashboard, or the JSON printer, on a thread of its own as in a run.
    let consumed = Arc::new(AtomicU64::new(0));
    // --json: samples dropped (this bench's JSON lines never drop: the column stays, at 0).
    let dropped = Arc::new(AtomicU64::new(0));
    let started: Arc<OnceLock<Instant>> = Arc::new(OnceLock::new());
    let interval = Duration::from_secs_f64(1.0 / f64::from(shape.hz));
    let liveness = Liveness::new(ranks, interval, Duration::from_secs(start.results.metadata.hang_timeout_s));
    let (to_consumer, from_loop) = mpsc::channel::<ConsumerEvent>();
    // --json beyond efatop's threshold (or asked): `rail` lines, as efatop's own --json prints them.
    let rails = match args.json_samples.as_str() {
        "rails" => true,
        "every" => false,
        _ => ranks * channels > efatop_proto::output::RAIL_LINES_ABOVE,
    };
    let (frames_out, frames_in) = mpsc::channel::<Frames>();
    let consumer_thread = {
        let (consumed, started, liveness) = (consumed.clone(), started.clone(), liveness.clone());
        let start = start.clone();
        let shape = shape.clone();
        let screen = args.screen;
        std::thread::Builder::new().name("efatop-ingest".into()).spawn(move || {
            pin_consumer_side();
            let frames = if json {
                print_json(&from_loop, &consumed, rails.then(|| RailLines::new(&start.info.hosts, shape.channels, interval)), clock);
                Frames::default()
            } else {
                dashboard(App::for_run(start, liveness), &from_loop, &consumed, &shape, slow, &started, screen, clock)
            };
            let _ = frames_out.send(frames);
            ConsumerOutcome::Done
        })?
    };

    // Rank 0's loop, as a run's main thread runs it: its results file is a scratch file of the bench's.
    // In a private folder (0700, a random name, removed with its file when dropped): no name another user
    // can guess and plant a link at.
    let scratch_dir = tempfile::Builder::new().prefix("efatop-bench-collector-").tempdir()?;
    let scratch = scratch_dir.path().join("results.json");
    let file = ResultsFile::create(&scratch, false, &start.results).map_err(|err| std::io::Error::other(err.to_string()))?;
    // --serve: the viewers' token is the bench's own, through the environment as a user's would be.
    let token = args.serve.map(|_| efatop_auth::Secret::generate().map(|secret| secret.to_hex())).transpose().map_err(std::io::Error::other)?;
    if let Some(token) = &token {
        std::env::set_var(efatop_auth::secret::ENV_TOKEN, token);
    }
    let serve_at = args.serve.map(|_| std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    // Opened on a thread confined to rank 0's CPU: the server's threads (its door, a writer per viewer)
    // inherit that CPU, as rank 0's side is measured on one core.
    let outlets = if serve_at.is_some() || args.record.is_some() {
        let record = args.record.clone();
        std::thread::spawn(move || {
            pin_consumer_side();
            Outlets::open(serve_at, record.as_deref(), clock)
        })
        .join()
        .map_err(|_| std::io::Error::other("opening the outlets panicked"))?
        .map_err(|err| std::io::Error::other(err.to_string()))?
    } else {
        None
    };
    let viewers = match (args.serve, outlets.as_ref().and_then(|outlets| outlets.serving), &token) {
        (Some(count), Some(address), Some(token)) => {
            let secret = efatop_auth::Secret::from_token(token).map_err(std::io::Error::other)?;
            (0..count).map(|n| viewer::start(n, address, &secret, sender_cpus.clone())).collect::<std::io::Result<Vec<_>>>()?
        }
        _ => Vec::new(),
    };
    let (release, _released) = mpsc::channel::<()>();
    let setup = Setup {
        // The dashboard is drawn on a `TestBackend`: what rank 0 prints itself is the plain output's end.
        show: Box::new(Started { consumer: Some((to_consumer, consumer_thread)), dashboard: !json }),
        results: start.results.clone(),
        file,
        sizes: start.info.sizes.clone(),
        start: start.clone(),
        started: clock,
        stop: Arc::new(AtomicBool::new(false)),
        abort: Arc::new(Abort::default()),
        watchdog: Some(Watchdog::new(liveness.clone(), start.info.hosts.clone())),
        liveness,
        interval,
        outlets,
        metrics: None,
        pushgateway: None,
        collector: Some(collector),
        release,
    };
    let loop_thread = std::thread::Builder::new().name("efatop-loop".into()).spawn(move || {
        pin_consumer_side();
        efatop_runtime::rank_zero::run(setup, &from_run, Vec::new())
    })?;
    // The experiment's first events, as rank 0's thread tells them once the world is up.
    let step = Column::write(Layout::Single, Memory::Host);
    let _ = inputs.send(Input::Experiment(ConsumerEvent::Begin { columns: vec![step.clone()], memory: start.info.memory.clone() }));
    let _ = inputs.send(Input::Experiment(ConsumerEvent::Step { config: step, size: 8 << 20 }));

    // The senders connect first: a burst of thousands of connects is a start-up cost, not the load under test.
    let threads = (cpus - 1).clamp(2, 8);
    let load = feed::start(&shape, address, &secret, threads, &sender_cpus, slow, &started);
    let began = *started.get_or_init(Instant::now);
    let hosts = shape.hosts.map_or(String::new(), |hosts| format!("{hosts} hosts × {} ranks = ", shape.ranks_per_host));
    say!(json,
        "# collector load: {hosts}{ranks} ranks × {channels} channels at {} Hz = {} samples/s offered over {} connections{}; consumer: {}",
        shape.hz,
        ranks as u64 * u64::from(shape.hz),
        load.connections,
        if shape.relay && shape.hosts.is_some() { format!(" (a host's ranks over its relay's one connection, a write every {} interval(s))", shape.relay_every) } else { String::new() },
        if json && rails { format!("`rail` JSON lines on stdout, per host and rail every interval ({} lines/s), as efatop --json prints a run of more than {} channels", shape.host_count() as u64 * channels as u64 * u64::from(shape.hz), efatop_proto::output::RAIL_LINES_ABOVE) } else if json { format!("a JSON line per channel sample on stdout ({} lines/s)", (ranks * channels) as u64 * u64::from(shape.hz)) } else { format!("the dashboard (fold + draw on a {}×{} TestBackend every {} ms)", args.screen.0, args.screen.1, TICK.as_millis()) }
    );
    if let Some(slow) = slow {
        say!(json, "# slow NIC: {}", slow.describe(&shape));
    }
    if let Some(path) = &args.record {
        say!(json, "# recording to {}", path.display());
    }
    say!(json, "# rank 0's results file: {} (scratch: removed at the end)", scratch.display());
    if confined {
        say!(json, "# collector, loop and consumer threads confined to CPU {consumer_cpu}; senders on CPUs {}", sender_cpus.iter().map(ToString::to_string).collect::<Vec<_>>().join(","));
    } else {
        say!(json, "# warning: collector, loop and consumer could not be given a CPU of their own; they share with the senders");
    }
    say!(json, "| second | offered/s | consumed/s | dropped/s | backlog | collector CPU % | loop CPU % | consumer CPU % | rank 0 side CPU % | RSS MiB |");
    say!(json, "|-------:|----------:|-----------:|----------:|--------:|----------------:|-----------:|---------------:|------------------:|--------:|");
    let (loop_tid, consumer_tid) = (thread_id("efatop-loop"), thread_id("efatop-ingest"));
    let tids = [collector_tid.as_deref(), loop_tid.as_deref(), consumer_tid.as_deref()];
    let cpu_now = || tids.map(thread_cpu_seconds);
    let serve_cpu_now = || threads_cpu_seconds(&["efatop-serve", "efatop-viewer"]);
    let mut last_serve_cpu = serve_cpu_now();
    let mut serve_cpu = Vec::new();
    let (mut last_offered, mut last_consumed, mut last_dropped, mut last_cpu) = (0, 0, 0, cpu_now());
    let mut seconds = Vec::new();
    for second in 1..=args.seconds {
        std::thread::sleep((began + Duration::from_secs(u64::from(second))).saturating_duration_since(Instant::now()));
        let (offered, consumed_now, dropped_now, cpu) =
            (load.offered.load(Ordering::Relaxed), consumed.load(Ordering::Relaxed), dropped.load(Ordering::Relaxed), cpu_now());
        let percent: [f64; 3] = std::array::from_fn(|i| (cpu[i] - last_cpu[i]) * 100.0);
        let figures = Second {
            offered: offered - last_offered,
            consumed: consumed_now - last_consumed,
            dropped: dropped_now - last_dropped,
            backlog: offered.saturating_sub(consumed_now),
            cpu: percent,
            rss_mib: rss_mib("VmRSS").unwrap_or(0.0),
        };
        say!(json,
            "| {second:>6} | {:>9} | {:>10} | {:>9} | {:>7} | {:>15.1} | {:>10.1} | {:>14.1} | {:>17.1} | {:>7.0} |",
            figures.offered, figures.consumed, figures.dropped, figures.backlog, percent[0], percent[1], percent[2], percent.iter().sum::<f64>(), figures.rss_mib
        );
        seconds.push(figures);
        let serve_now = serve_cpu_now();
        serve_cpu.push((serve_now - last_serve_cpu) * 100.0);
        last_serve_cpu = serve_now;
        (last_offered, last_consumed, last_dropped, last_cpu) = (offered, consumed_now, dropped_now, cpu);
    }
    // The step is measured and rank 0's experiment returns, as in a run that ends well; then the ranks
    // stop and close their telemetry, which rank 0's ending drains.
    let _ = inputs.send(Input::Experiment(ConsumerEvent::Measured(Box::new(step_measured(&shape)))));
    let _ = inputs.send(Input::Ended(Ok(())));
    std::thread::sleep(Duration::from_millis(100));
    load.stop.store(true, Ordering::Relaxed);
    for sender in load.senders {
        if let Ok(Err(err)) = sender.join() {
            eprintln!("efatop: warning: a sender stopped early: {err}");
        }
    }
    let peak_rss = rss_mib("VmHWM");
    let ending = loop_thread.join().map_err(|_| std::io::Error::other("rank 0's loop panicked"))?;
    // The viewers take what is left and see the stream's end.
    let viewed: Vec<viewer::Viewed> = viewers.into_iter().map(viewer::Viewer::finish).collect();
    drop(scratch_dir);
    if let Err(err) = ending.code {
        say!(json, "# rank 0's loop ended the run: {err}");
    }
    let frames = frames_in.recv().unwrap_or_default();

    // Judged on the second half (start-up is over): the senders really offered the load (a bench whose
    // senders stalled proves nothing), and the backlog stayed within two intervals' samples without growing.
    let half = &seconds[seconds.len() / 2..];
    let target = ranks as u64 * u64::from(shape.hz);
    let one_interval = ranks as u64;
    // Over the half, not second by second: a relay's write carries a host's whole interval (or two), and
    // one that lands just past a second's mark moves all of it into the next second.
    let offered_enough = half.iter().map(|s| s.offered).sum::<u64>() * 100 >= target * half.len() as u64 * 95;
    // A sender caught mid-write at a second's mark leaves a backlog of up to an interval or two: the
    // median second is judged, and the last must not have run away.
    let mut backlogs: Vec<u64> = half.iter().map(|s| s.backlog).collect();
    backlogs.sort_unstable();
    let bounded = backlogs.get(backlogs.len() / 2).is_none_or(|&median| median <= 2 * one_interval);
    let not_growing = half.last().is_none_or(|s| s.backlog <= 4 * one_interval);
    let dropped_total = dropped.load(Ordering::Relaxed);
    let offered_total: u64 = load.offered.load(Ordering::Relaxed);
    // Each viewer got every sample rank 0 took in, and nothing was dropped for it.
    let viewers_kept_up = viewed.iter().all(|v| v.dropped == 0 && v.ended && v.samples >= consumed.load(Ordering::Relaxed));
    for (n, v) in viewed.iter().enumerate() {
        say!(json, "# viewer {n}: {} samples of the {} rank 0 took in ({offered_total} offered), {} batches dropped for it, {}; its reading thread {:.0}% of a core",
            v.samples, consumed.load(Ordering::Relaxed), v.dropped, if v.ended { "saw the stream's end" } else { "did not see the stream's end" }, v.cpu_percent);
    }
    let kept_up = offered_enough && bounded && not_growing && dropped_total == 0 && viewers_kept_up;
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(0.0)
    };
    let cpu: [f64; 3] = std::array::from_fn(|i| median(half.iter().map(|s| s.cpu[i]).collect()));
    let side: f64 = median(half.iter().map(|s| s.cpu.iter().sum()).collect());
    let serve_cpu = median(serve_cpu[serve_cpu.len() / 2..].to_vec());
    let verdict = match (offered_enough, bounded && not_growing, dropped_total) {
        (false, ..) => format!("inconclusive: the senders offered less than 95% of {target} samples/s"),
        (true, true, 0) if !viewers_kept_up => "fell behind: a viewer was dropped batches or missed samples".to_string(),
        (true, true, 0) => format!("kept up: the backlog stayed within two intervals' samples (median second); rank 0's side {side:.0}% of one core (median)"),
        (true, true, dropped) => format!(
            "fell back by design: the JSON printer dropped {dropped} samples ({:.1}% of those offered, each counted in a `dropped` line) and never lagged more than its bound",
            dropped as f64 * 100.0 / seconds.iter().map(|s| s.offered).sum::<u64>().max(1) as f64
        ),
        (true, false, _) => "fell behind: the backlog grew".to_string(),
    };
    say!(json, "# {verdict}{}", if confined { "" } else { " (not confined to one core)" });
    let mut times = frames.times.clone();
    times.sort_unstable();
    let quantile = |q: f64| times.get(((times.len().max(1) - 1) as f64 * q).round() as usize).map(|t| t.as_secs_f64() * 1e3);
    let lines_per_s = json.then(|| median(half.iter().map(|s| (s.consumed.saturating_sub(s.dropped) * channels as u64) as f64).collect()));
    // `rail` lines: one per host and rail every interval, whatever the samples folded into them.
    let lines_per_s = if rails { lines_per_s.map(|_| (shape.host_count() * channels) as f64 * f64::from(shape.hz)) } else { lines_per_s };
    if !json {
        say!(json, "# dashboard frames (fold + draw, after the first second): {} frames, median {} ms, p99 {} ms",
            times.len(), fmt(quantile(0.5), 2), fmt(quantile(0.99), 2));
        if let Some(slow) = slow {
            let after = |at: Option<Duration>| at.map_or("never".to_string(), |d| format!("{:.1} s", d.as_secs_f64()));
            say!(json, "# slow NIC ({}): top of the worst NICs {} after its slowdown, flagged behind after {}",
                slow.describe(&shape), after(frames.slow_on_top), after(frames.slow_flagged));
        }
        if let Some(worst) = &frames.last_worst {
            say!(json, "# worst NIC at the end: {worst}");
        }
        frames.slowest.print(json);
    }
    say!(json,
        "# summary: mode={} hosts={} ranks={ranks} channels={channels} hz={} offered_per_s={target} collector_cpu={:.1} loop_cpu={:.1} consumer_cpu={:.1} frame_p50_ms={} frame_p99_ms={} rss_mib={} peak_rss_mib={} json_lines_per_s={} json_lines={} json_dropped={} slow_top_s={} slow_flagged_s={} viewers={} viewer_dropped={} serve_cpu={} kept_up={} confined={}",
        if json { "json" } else { "dashboard" },
        shape.host_count(),
        shape.hz,
        cpu[0], cpu[1], cpu[2],
        fmt(quantile(0.5), 2),
        fmt(quantile(0.99), 2),
        fmt(seconds.last().map(|s| s.rss_mib), 0),
        fmt(peak_rss, 0),
        fmt(lines_per_s, 0),
        if !json { "-" } else if rails { "rails" } else { "samples" },
        if json { dropped_total.to_string() } else { "-".to_string() },
        fmt(frames.slow_on_top.map(|d| d.as_secs_f64()), 1),
        fmt(frames.slow_flagged.map(|d| d.as_secs_f64()), 1),
        viewed.len(),
        if viewed.is_empty() { "-".to_string() } else if viewers_kept_up { viewed.iter().map(|v| v.dropped).sum::<u64>().to_string() } else { format!("{}(missed)", viewed.iter().map(|v| v.dropped).sum::<u64>()) },
        if viewed.is_empty() { "-".to_string() } else { format!("{serve_cpu:.1}") },
        if kept_up { "yes" } else if !offered_enough { "inconclusive" } else if dropped_total > 0 && bounded && not_growing { "dropped" } else { "no" },
        if confined { "yes" } else { "no" },
    );
    Ok(kept_up)
}

/// `--fold FILE`: the recording played as a replay plays it at 1× (the same [`App`], its liveness clock
/// kept from the telemetry as a viewer keeps it), a frame for every 50 ms of the run's time, as fast as it
/// goes. A frame's time is what it costs to fold that 50 ms of the run, tick and draw: a replay at 1× has
/// that long for it.
fn fold(path: &std::path::Path, (width, height): (u16, u16)) -> std::io::Result<bool> {
    let recording = efatop_proto::recording::read(path).map_err(|efatop_proto::recording::NotARecording(why)| std::io::Error::other(why))?;
    if let Some(why) = &recording.cut {
        eprintln!("bench_collector: warning: {why}");
    }
    let Ok(mut terminal) = Terminal::new(TestBackend::new(width, height));
    let mut events = recording.cursor().peekable();
    let mut app: Option<App> = None;
    let mut results_metadata = None;
    let mut samples = 0;
    let mut times = Vec::new();
    let mut slowest = Slowest::default();
    let mut frame_at = Duration::ZERO;
    let started = Instant::now();
    loop {
        frame_at += TICK;
        let frame_start = Instant::now();
        let mut folded = 0u64;
        // As the replay's TUI loop takes them in (efatop_ui::tui::frame_within): what is due, within the
        // frame's budget (decoding included); the rest next frame.
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) && frame_start.elapsed() >= efatop_ui::tui::FOLD_BUDGET {
                break;
            }
            let Some((at, event)) = events.next_if(|(at, _)| *at <= frame_at) else { break };
            folded += samples_in(&event);
            samples += samples_in(&event);
            match (&mut app, event) {
                (None, ConsumerEvent::Run(start)) => {
                    let interval = Duration::from_millis(start.interval_ms.max(10));
                    let hang_timeout = Duration::from_secs(start.results.metadata.hang_timeout_s.max(1));
                    let clock = Liveness::new(start.info.ranks, interval, hang_timeout);
                    results_metadata = Some(start.results.metadata.clone());
                    app = Some(App::for_run(*start, clock));
                }
                (Some(app), event) => {
                    if let ConsumerEvent::Telemetry(batch) = &event {
                        for telemetry in batch {
                            efatop_runtime::watchdog::note_telemetry(app.liveness_mut(), telemetry, at);
                        }
                    }
                    app.update(Event::Run(event), at);
                }
                (None, _) => {}
            }
        }
        let fold_took = frame_start.elapsed();
        let over = events.peek().is_none();
        let tick_start = Instant::now();
        if let Some(app) = &mut app {
            app.update(Event::Tick, frame_at);
        }
        let tick_took = tick_start.elapsed();
        if let Some(app) = &app {
            terminal.draw(|frame| app.draw(frame)).map_err(std::io::Error::other)?;
        }
        let took = frame_start.elapsed();
        times.push(took);
        slowest.note(SlowFrame { at: frame_at, took, folded, fold: fold_took, tick: tick_took });
        if over {
            break;
        }
    }
    let wall = started.elapsed();
    let (rss, peak) = (rss_mib("VmRSS"), rss_mib("VmHWM"));
    let shape = results_metadata.map(|metadata| {
        (metadata.hosts.iter().collect::<std::collections::HashSet<_>>().len(), metadata.ranks, metadata.channels)
    });
    let behind = app.as_ref().map_or(0, |app| app.shown().0.fleet.rails().iter().map(|rail| rail.behind).sum::<usize>());
    times.sort_unstable();
    let quantile = |q: f64| times.get(((times.len().max(1) - 1) as f64 * q).round() as usize).map(|t| t.as_secs_f64() * 1e3);
    let run_s = recording.len().checked_sub(1).and_then(|last| recording.time(last)).unwrap_or_default().as_secs_f64();
    let (hosts, ranks, channels) = shape.unwrap_or_default();
    slowest.print(false);
    println!(
        "# folded {}: {hosts} hosts, {ranks} ranks × {channels} channels, {samples} samples over {run_s:.1} s of the run in {:.1} s ({:.1}× the run's pace); {} frames of {width}×{height}: median {} ms, p99 {} ms; {} flagged behind at the end",
        path.display(),
        wall.as_secs_f64(),
        run_s / wall.as_secs_f64().max(1e-9),
        times.len(),
        fmt(quantile(0.5), 2),
        fmt(quantile(0.99), 2),
        efatop_proto::words::plural(behind, "NIC"),
    );
    println!(
        "# summary: mode=fold hosts={hosts} ranks={ranks} channels={channels} samples={samples} run_s={run_s:.1} wall_s={:.1} frame_p50_ms={} frame_p99_ms={} rss_mib={} peak_rss_mib={} behind={behind}",
        wall.as_secs_f64(),
        fmt(quantile(0.5), 2),
        fmt(quantile(0.99), 2),
        fmt(rss, 0),
        fmt(peak, 0),
    );
    Ok(true)
}

/// `--json`: every channel sample of every batch as one JSON line (`[rank, seq, channel sample]`) on
/// stdout, or with `rails` folded into efatop's `rail` lines (per host and rail, every interval), each
/// batch in one write; counts the samples it printed (or folded).
fn print_json(events: &Receiver<ConsumerEvent>, consumed: &AtomicU64, mut rails: Option<RailLines>, clock: Instant) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let mut lines = Vec::new();
    for event in events {
        let ConsumerEvent::Telemetry(batch) = event else { continue };
        lines.clear();
        let t_ms = clock.elapsed().as_secs_f64() * 1000.0;
        for telemetry in &batch {
            let CollectorEvent::Sample(sample) = telemetry else { continue };
            if let Some(rails) = &mut rails {
                rails.add(t_ms, sample, |rail| {
                    let _ = efatop_proto::output::Line::<serde_json::Value>::Rail(rail).write_to(&mut lines);
                });
                continue;
            }
            for channel in &sample.channels {
                if serde_json::to_writer(&mut lines, &(sample.rank, sample.seq, channel)).is_ok() {
                    lines.push(b'\n');
                }
            }
        }
        if stdout.write_all(&lines).is_err() {
            return;
        }
        consumed.fetch_add(samples_in(&ConsumerEvent::Telemetry(batch)), Ordering::Relaxed);
    }
    let _ = stdout.flush();
}

fn fmt(value: Option<f64>, decimals: usize) -> String {
    value.map_or("-".to_string(), |value| format!("{value:.decimals$}"))
}

/// One frame's cost, split: for the slowest frames' line (where a p99 comes from).
#[derive(Clone, Copy)]
struct SlowFrame {
    /// The frame's time on the run's clock.
    at: Duration,
    took: Duration,
    /// Samples folded in it, and the time the events took (decoding a replay's included).
    folded: u64,
    fold: Duration,
    tick: Duration,
}

/// The slowest few frames of a run.
#[derive(Default)]
struct Slowest(Vec<SlowFrame>);

impl Slowest {
    const KEEP: usize = 5;

    fn note(&mut self, frame: SlowFrame) {
        self.0.push(frame);
        self.0.sort_by(|a, b| b.took.cmp(&a.took));
        self.0.truncate(Self::KEEP);
    }

    fn print(&self, json: bool) {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let frames: Vec<String> = self
            .0
            .iter()
            .map(|f| format!("{:.1} ms at {:.2} s ({} samples folded in {:.1} ms, tick {:.1} ms, draw {:.1} ms)", ms(f.took), f.at.as_secs_f64(), f.folded, ms(f.fold), ms(f.tick), ms(f.took.saturating_sub(f.fold + f.tick))))
            .collect();
        say!(json, "# slowest frames: {}", frames.join("; "));
    }
}

/// One second of the load.
struct Second {
    offered: u64,
    /// Folded or printed, or (--json) dropped by the printer.
    consumed: u64,
    dropped: u64,
    backlog: u64,
    /// CPU of the collector, the loop and the consumer, in % of one core.
    cpu: [f64; 3],
    rss_mib: f64,
}

fn samples_in(event: &ConsumerEvent) -> u64 {
    match event {
        ConsumerEvent::Telemetry(events) => events.iter().filter(|e| matches!(e, CollectorEvent::Sample(_))).count() as u64,
        _ => 0,
    }
}

/// The run's dashboard as rank 0 runs it (the [`App`] on the TUI loop's frames), on a `TestBackend`: every
/// tick, what arrived folded, the clock moved on, a redraw; each frame timed.
#[allow(clippy::too_many_arguments)] // the consumer thread's whole world, handed over once
fn dashboard(
    mut app: App,
    events: &Receiver<ConsumerEvent>,
    consumed: &AtomicU64,
    shape: &Shape,
    slow: Option<Slow>,
    started: &OnceLock<Instant>,
    (width, height): (u16, u16),
    clock: Instant,
) -> Frames {
    let mut frames = Frames::default();
    let Ok(mut terminal) = Terminal::new(TestBackend::new(width, height));
    let slow_view = slow.map(|slow| slow.global_rank(shape) * shape.channels + slow.channel);
    // The ranks' stop flag the dashboard would raise on `q`: nobody presses it here.
    let stop = AtomicBool::new(false);
    let mut source = Counted { events, consumed, gone: false };
    let mut next = Instant::now();
    loop {
        let frame_start = Instant::now();
        let now = clock.elapsed();
        // One frame of the TUI loop, as the binary runs it: what arrived (within the frame's budget), the
        // tick, the draw.
        let mut timed = Timed { dashboard: Dashboard { app: &mut app, stop: &stop }, folded: 0, fold: Duration::ZERO, tick: Duration::ZERO };
        let Ok(drawn) = tui::frame_within(&mut terminal, &mut timed, &mut source, now, Some(tui::FOLD_BUDGET)) else { return frames };
        let Timed { folded, fold, tick, .. } = timed;
        let took = frame_start.elapsed();
        let gone = source.gone || drawn.ended.is_some();
        let since_load = started.get().map(Instant::elapsed);
        if since_load.is_some_and(|t| t >= Duration::from_secs(1)) && !gone {
            frames.times.push(took);
            frames.slowest.note(SlowFrame { at: now, took, folded, fold, tick });
        }
        if let (Some(slow), Some(view), Some(load)) = (slow, slow_view, started.get()) {
            let (state, _) = app.shown();
            let after = (load.elapsed()).checked_sub(slow.at);
            if let Some(after) = after {
                if frames.slow_on_top.is_none() && state.fleet.worst().first().is_some_and(|worst| worst.view == view) {
                    frames.slow_on_top = Some(after);
                }
                if frames.slow_flagged.is_none() && state.fleet.is_behind(view) {
                    frames.slow_flagged = Some(after);
                }
            }
        }
        if gone {
            frames.last_worst = describe_worst(app.shown().0);
            return frames;
        }
        // A frame that left events behind is followed at once, as the TUI loop does.
        next = if drawn.behind { Instant::now() } else { next + TICK };
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}

/// The run's channel as the dashboard's source, counting the samples taken in and noting when the run
/// has gone.
struct Counted<'a> {
    events: &'a Receiver<ConsumerEvent>,
    consumed: &'a AtomicU64,
    gone: bool,
}

impl tui::Source for Counted<'_> {
    type Event = ConsumerEvent;
    fn poll(&mut self, now: Duration) -> tui::Polled<ConsumerEvent> {
        let polled = self.events.poll(now);
        match &polled {
            tui::Polled::Ready(event) => {
                self.consumed.fetch_add(samples_in(event), Ordering::Relaxed);
            }
            tui::Polled::Gone => self.gone = true,
            tui::Polled::Pending => {}
        }
        polled
    }
}

/// The binary's dashboard, its taking in and its tick timed for the slowest frames' line.
struct Timed<'a> {
    dashboard: Dashboard<'a>,
    folded: u64,
    fold: Duration,
    tick: Duration,
}

impl tui::Tui for Timed<'_> {
    type Event = ConsumerEvent;
    type Ended = Ended;
    fn event(&mut self, event: ConsumerEvent, now: Duration) -> Option<Ended> {
        let started = Instant::now();
        self.folded += samples_in(&event);
        let ended = self.dashboard.event(event, now);
        self.fold += started.elapsed();
        ended
    }
    fn gone(&mut self, now: Duration) -> Option<Ended> {
        self.dashboard.gone(now)
    }
    fn tick(&mut self, now: Duration) -> Option<Ended> {
        let started = Instant::now();
        let ended = self.dashboard.tick(now);
        self.tick = started.elapsed();
        ended
    }
    fn key(&mut self, key: efatop_ui::state::Key, now: Duration) -> Option<Ended> {
        self.dashboard.key(key, now)
    }
    fn interrupt(&mut self, now: Duration) -> Option<Ended> {
        self.dashboard.interrupt(now)
    }
    fn draw(&self, frame: &mut ratatui::Frame) {
        self.dashboard.draw(frame);
    }
}

/// The synthetic step's measurement: every rank's channels near 95 Gbps.
fn step_measured(shape: &Shape) -> efatop_proto::results::Measurement {
    use efatop_proto::results::{LatencySummary, Measurement};
    let latency = LatencySummary { mean_us: 60.0, p50_us: 50.2, p99_us: 434.2, max_us: 612.0 };
    let gbps = 95.0 * shape.channels as f64;
    Measurement {
        busbw_percent: Some(95.0),
        registration: Some("dmabuf".into()),
        ..Measurement::plain(Column::write(Layout::Single, Memory::Host), 8 << 20, gbps, latency, 100)
    }
}

fn describe_worst(state: &DashboardState) -> Option<String> {
    let worst = state.fleet.worst().first()?;
    let view = state.channels.get(worst.view)?;
    let host = state.fleet.hosts().get(worst.host).map_or("?", |host| host.name.as_str());
    Some(format!(
        "{host} rank {} channel {} (rail {}) at {:.1} Gbps, {:.0}% of its rail's median {:.1}{}",
        view.rank,
        view.channel,
        worst.rail,
        worst.gbps,
        worst.ratio * 100.0,
        worst.rail_median,
        if worst.behind { ", flagged behind" } else { "" }
    ))
}





/// The bench's consumer, started by the bench itself (its timed dashboard on a `TestBackend`, or its counted
/// JSON lines); it prints nothing at the end.
struct Started {
    consumer: Option<Consumer>,
    dashboard: bool,
}

impl Show for Started {
    fn start(&mut self, _run: ShowStart<'_>) -> Option<Consumer> {
        self.consumer.take()
    }

    fn wants_liveness(&self) -> bool {
        self.dashboard
    }

    fn finish(&mut self, _results: &efatop_proto::results::RunResults, _sizes: &[u64], _file: &std::path::Path, outcome: Option<ConsumerOutcome>) {
        if let Some(ConsumerOutcome::Failed(reason)) = outcome {
            eprintln!("bench_collector: warning: the consumer failed ({reason})");
        }
    }
}
