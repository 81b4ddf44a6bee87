//! Can `efatop watch` keep up with a fleet's NCCL job? A synthetic job ([`synthetic`]: `--hosts` ×
//! `--ranks-per-host` plugins, each its own TCP connection, its frames sealed as the plugin seals them, at
//! the plugin's interval) streams to the real watch server ([`efatop_runtime::watch::server`]) and fold
//! loop ([`efatop_runtime::watch::folder`]),
//! and the live view (`efatop_ui::watch`, the real one) folds every tick's lines and is drawn on a
//! TestBackend every 100 ms. The server, the fold and the view are confined to the last CPU (the claim
//! is that the watcher takes one core; there its server and fold give way to the view, as under
//! `taskset -c N efatop watch`); the plugins run on the others.
//!
//! From `--straggle-at`, one rank starts each allreduce `--straggle-lag-ms` late (its call samples' starts
//! say so, as the plugin's would): the bench measures how soon the straggler line names it (and that it
//! names no other rank). From `--stall-at`, another rank, on another host, stops before its next
//! allreduce (its peers start it and wait): the bench measures how soon the hang line names it. The stall
//! comes after the straggler's goal (10 s) has passed: once it stalls, no call of the world's communicator
//! ends, so none is matched, and a straggler not named by then never would be. Each second it prints what
//! was sent and folded; at the end, a verdict and one `# summary:` line that `scripts/bench/bench-watch`
//! judges.
//!
//! `cargo run --release -p efatop-runtime --example bench_watch -- --hosts 4096`

#[path = "../bench_common/mod.rs"]
mod bench_common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench_common::{rss_mib, thread_cpu_seconds, thread_id};
use clap::Parser;
use efatop_runtime::watch::fold::Config;
use efatop_proto::nccl::WatchLine;
use efatop_runtime::affinity::{allowed_cpus, pin_thread};
use efatop_runtime::watch::synthetic::{self, Job, Watcher};
use efatop_runtime::watch::{folder, Settings};
use efatop_ui::watch::WatchView;
use ratatui::backend::TestBackend;
use ratatui::Terminal;

/// The allocator the binary runs with: the watcher is measured as it runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The view's frame interval.
const FRAME: Duration = Duration::from_millis(100);

/// The goal: a straggler named within this long of it starting to lag.
const STRAGGLER_GOAL: Duration = Duration::from_secs(10);

/// Can `efatop watch` keep up with a fleet's NCCL job?
#[derive(Debug, Parser)]
#[command(name = "bench_watch")]
struct Args {
    /// Synthetic hosts
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=8192))]
    hosts: u32,
    /// Ranks (plugins, connections) per host
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=16))]
    ranks_per_host: u32,
    /// Ranks per process (one plugin, one connection each): 1 as PyTorch runs a job, the host's ranks as
    /// JAX does (fewer connections: where the open-file limit cannot hold two ends of every rank's)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    ranks_per_process: u32,
    /// Each host's plugins through its relay (as the plugin runs by default): one connection a host, the
    /// host's other processes' messages relayed, their NICs cut to their rails
    #[arg(long)]
    relay: bool,
    /// The plugins' interval, ms (the plugin's default: 1000)
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=10_000))]
    interval_ms: u64,
    /// How long the job runs, s
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(5..=600))]
    seconds: u64,
    /// The watcher's --hang-after, s
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=60))]
    hang_after: u64,
    /// When the stalled rank stops, s into the job (0: no stall)
    #[arg(long, default_value_t = 18, value_parser = clap::value_parser!(u64).range(0..=600))]
    stall_at: u64,
    /// When the straggler starts each allreduce late, s into the job (0: no straggler)
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=600))]
    straggle_at: u64,
    /// How late the straggler starts each allreduce, ms (under the calls' spacing, 250 ms; the watcher
    /// names a rank its peers waited for 1 ms on average)
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=200))]
    straggle_lag_ms: u64,
    /// Connections that never prove the token, opened alongside from one address
    #[arg(long, default_value_t = 2000)]
    strangers: usize,
    /// The view's size, COLSxROWS
    #[arg(long, default_value = "200x60")]
    screen: String,
    /// The synthetic plugins in a process of their own (this binary again, on the other CPUs), so that the
    /// RSS reported is the watcher's alone: its server, fold and view
    #[arg(long)]
    plugins_apart: bool,
    /// (the plugins' process of --plugins-apart) Only the synthetic plugins, to the watcher at this address;
    /// the run's secret in EFATOP_BENCH_SECRET; they stop when standard input ends
    #[arg(long, hide = true)]
    plugins_of: Option<std::net::SocketAddr>,
    /// (the plugins' process) The job's start, ns since the Unix epoch
    #[arg(long, hide = true, default_value_t = 0)]
    started_epoch_ns: u64,
    /// (the plugins' process) The CPUs its threads run on, comma-separated
    #[arg(long, hide = true, value_delimiter = ',')]
    cpus: Vec<usize>,
}

/// The environment variable that hands the plugins' process the run's secret (not its command line, which
/// every local user can read).
const SECRET_VAR: &str = "EFATOP_BENCH_SECRET";

/// The plugins' process of `--plugins-apart`: the synthetic job against the watcher at `address`, its counts
/// told on standard output every 100 ms (`counts MESSAGES CONNECTED RETRIES LATE STRANGERS`), then its peak
/// RSS (`peak MIB`) once its plugins have stopped (at the end of standard input).
fn plugins_only(job: Job, address: std::net::SocketAddr, args: &Args) -> std::process::ExitCode {
    let secret = match std::env::var(SECRET_VAR).map_err(|e| e.to_string()).and_then(|hex| efatop_auth::Secret::from_hex(&hex).map_err(|e| e.to_string())) {
        Ok(secret) => secret,
        Err(err) => {
            eprintln!("bench_watch: --plugins-of: no secret in {SECRET_VAR}: {err}");
            return std::process::ExitCode::from(2);
        }
    };
    pin_thread(None, args.cpus.iter().copied());
    // The watcher's start on this process's clock (both on one machine).
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_sub(Duration::from_nanos(args.started_epoch_ns));
    let started = Instant::now().checked_sub(since).unwrap_or_else(Instant::now);
    let stop = Arc::new(AtomicBool::new(false));
    let (senders, sent) = synthetic::start(job, address, secret, started, Arc::clone(&stop), args.cpus.len().max(1), args.cpus.clone());
    let stopper = Arc::clone(&stop);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        stopper.store(true, Ordering::Relaxed);
    });
    let tell = || {
        let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
        println!("counts {} {} {} {} {}", load(&sent.messages), load(&sent.connected), load(&sent.retries), load(&sent.late), load(&sent.strangers));
    };
    while !senders.is_finished() {
        tell();
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = senders.join();
    tell();
    println!("peak {:.1}", rss_mib("VmHWM").unwrap_or(0.0));
    std::process::ExitCode::SUCCESS
}

/// The plugins' side of `--plugins-apart`: this binary again, its counts copied into `sent` as it tells
/// them; the handle ends when it has, after its standard input (dropped by the caller) ended.
struct Apart {
    child: std::process::Child,
    reader: std::thread::JoinHandle<()>,
    peak_mib: Arc<std::sync::Mutex<Option<f64>>>,
}

impl Apart {
    fn start(args: &Args, address: std::net::SocketAddr, secret: &efatop_auth::Secret, started: Instant, cpus: &[usize], sent: Arc<synthetic::Sent>) -> std::io::Result<Self> {
        let epoch_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_sub(started.elapsed())
            .as_nanos();
        let cpus_list = cpus.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
        let mut command = std::process::Command::new(std::env::current_exe()?);
        command
            .args(["--plugins-of", &address.to_string(), "--started-epoch-ns", &epoch_ns.to_string(), "--cpus", &cpus_list])
            .args(["--hosts", &args.hosts.to_string(), "--ranks-per-host", &args.ranks_per_host.to_string()])
            .args(["--ranks-per-process", &args.ranks_per_process.to_string(), "--interval-ms", &args.interval_ms.to_string()])
            .args(["--stall-at", &args.stall_at.to_string(), "--straggle-at", &args.straggle_at.to_string()])
            .args(["--straggle-lag-ms", &args.straggle_lag_ms.to_string(), "--strangers", &args.strangers.to_string()])
            .args(if args.relay { &["--relay"][..] } else { &[][..] })
            .env(SECRET_VAR, secret.to_hex())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        let mut child = command.spawn()?;
        let stdout = child.stdout.take().ok_or_else(|| std::io::Error::other("no standard output"))?;
        let peak_mib = Arc::new(std::sync::Mutex::new(None));
        let peak = Arc::clone(&peak_mib);
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let fields: Vec<&str> = line.split_whitespace().collect();
                match fields.as_slice() {
                    ["counts", values @ ..] if values.len() == 5 => {
                        let counters = [&sent.messages, &sent.connected, &sent.retries, &sent.late, &sent.strangers];
                        for (counter, value) in counters.into_iter().zip(values) {
                            counter.store(value.parse().unwrap_or(0), Ordering::Relaxed);
                        }
                    }
                    ["peak", mib] => *peak.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = mib.parse().ok(),
                    _ => {}
                }
            }
        });
        Ok(Self { child, reader, peak_mib })
    }

    /// Stops the plugins (their standard input ends) and waits for their last counts and their peak RSS.
    fn stop(mut self) -> Option<f64> {
        drop(self.child.stdin.take());
        let _ = self.reader.join();
        let _ = self.child.wait();
        *self.peak_mib.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Where the synthetic plugins run: in this process (their threads), or in their own.
enum Plugins {
    Here(std::thread::JoinHandle<()>),
    Apart(Apart),
}

fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    (!sorted.is_empty()).then(|| sorted[((sorted.len() - 1) as f64 * p).round() as usize])
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let Some((cols, rows)) = args
        .screen
        .split_once('x')
        .and_then(|(c, r)| Some((c.parse::<u16>().ok()?, r.parse::<u16>().ok()?)))
    else {
        eprintln!("bench_watch: --screen: COLSxROWS, e.g. 200x60");
        return std::process::ExitCode::from(2);
    };
    let ranks = args.hosts * args.ranks_per_host;
    let stall_rank = (args.stall_at > 0).then_some(ranks / 2 + 3);
    // A quarter of the way into the world (the stalled rank is half way), on another host than the stalled
    // rank's where there are two: each line is then checked for its own rank and host.
    let straggle_rank = (args.straggle_at > 0).then(|| {
        let stalled_host = (ranks / 2 + 3) / args.ranks_per_host;
        let mut host = args.hosts / 4;
        if host == stalled_host {
            host = (host + 1) % args.hosts;
        }
        host * args.ranks_per_host + 5 % args.ranks_per_host
    });
    let job = Job {
        hosts: args.hosts as usize,
        per_host: args.ranks_per_host as usize,
        per_process: args.ranks_per_process.min(args.ranks_per_host) as usize,
        interval: Duration::from_millis(args.interval_ms),
        rate: 4.0,
        stall_rank,
        stall_at: Duration::from_secs(args.stall_at),
        skewed_host: Some(args.hosts as usize / 3),
        straggle_rank,
        straggle_at: Duration::from_secs(args.straggle_at),
        straggle_lag: Duration::from_millis(args.straggle_lag_ms),
        strangers: args.strangers,
        relayed: args.relay,
    };
    if let Some(address) = args.plugins_of {
        return plugins_only(job, address, &args);
    }
    let world = job.world();
    let processes = args.hosts as usize * (job.per_host / job.per_process);
    let connections = if job.relayed { args.hosts as usize } else { processes };
    let settings = Settings {
        max_plugins: 2 * world,
        ..Settings::default()
    };
    let config = Config {
        hang_after: Duration::from_secs(args.hang_after),
        ..Config::default()
    };
    // The watcher's one core, before its threads start (they inherit it, and its server and fold give way
    // to the view there, as under `taskset -c N efatop watch`).
    let cpus = allowed_cpus();
    let watcher_cpu = cpus.last().copied().unwrap_or(0);
    pin_thread(None, [watcher_cpu]);
    let watcher = match Watcher::start(settings, config, connections) {
        Ok(watcher) => watcher,
        Err(err) => {
            eprintln!("bench_watch: the watcher: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let files = watcher.files;
    if !files.enough() {
        // Both ends of every connection live in this process: those past the limit fail and are retried.
        eprintln!("bench_watch: {connections} connections need {} open files here and this process may open {} (its hard limit): fewer --hosts, more --ranks-per-process, or a higher hard limit", files.wanted, files.limit);
    }
    let others: Vec<usize> = cpus.iter().copied().filter(|&c| c != watcher_cpu).collect();
    let confined = !others.is_empty();
    println!(
        "# bench_watch: {} hosts × {} ranks = {world} ranks, {processes} plugins ({connections} connections{}) at {} ms; hang-after {} s, stall at {} s; {} CPUs (the watcher on CPU {watcher_cpu}, the plugins on {:?}); open files {files}",
        args.hosts, args.ranks_per_host, if job.relayed { ", a relay a host" } else { "" }, args.interval_ms, args.hang_after, args.stall_at, cpus.len(), others,
        files = files.limit
    );
    let host_of = |rank: u32| Job::host_name(job.host_of(rank));
    if let Some(rank) = straggle_rank {
        println!("# straggler: rank {rank} on {}, each allreduce {} ms late from {} s", host_of(rank), args.straggle_lag_ms, args.straggle_at);
    }
    if let Some(rank) = stall_rank {
        println!("# stall: rank {rank} on {}, stops before its next allreduce at {} s", host_of(rank), args.stall_at);
    }
    let (started, folded, lines_rx) = (watcher.started, Arc::clone(&watcher.folded), &watcher.lines);
    // The view's thread is this one; the server's and the fold's are on its core since they started.
    let server_tid = thread_id(efatop_runtime::watch::server::THREAD);
    let fold_tid = thread_id(folder::THREAD);
    let nice = |tid: &Option<String>| bench_common::thread_nice(tid.as_deref()).map_or("-".to_string(), |n| n.to_string());
    println!(
        "# nice: the view {}, the server {}, the fold {}",
        efatop_runtime::affinity::nice().map_or("-".to_string(), |n| n.to_string()),
        nice(&server_tid),
        nice(&fold_tid)
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (senders, sent) = if args.plugins_apart {
        let sent = Arc::new(synthetic::Sent::default());
        match Apart::start(&args, watcher.server.address, &watcher.secret, started, &others, Arc::clone(&sent)) {
            Ok(apart) => (Plugins::Apart(apart), sent),
            Err(err) => {
                eprintln!("bench_watch: --plugins-apart: the plugins' process: {err}");
                return std::process::ExitCode::FAILURE;
            }
        }
    } else {
        let (senders, sent) = synthetic::start(
            job.clone(),
            watcher.server.address,
            watcher.secret.clone(),
            started,
            Arc::clone(&stop),
            others.len().max(1),
            others.clone(),
        );
        (Plugins::Here(senders), sent)
    };

    let mut view = WatchView::new();
    let mut terminal = Terminal::new(TestBackend::new(cols, rows)).expect("a test terminal");
    let mut frames: Vec<f64> = Vec::new();
    let mut named_at: Option<Duration> = None;
    let mut on_first_screen: Option<bool> = None;
    // The first straggler line naming the straggler on its host; lines naming any other rank (or it on
    // another host).
    let mut straggler_at: Option<Duration> = None;
    let mut straggler_wrong = 0u64;
    let straggler_host = straggle_rank.map(host_of);
    let end = started + Duration::from_secs(args.seconds);
    let mut next_second = started + Duration::from_secs(1);
    let mut next_frame = started + FRAME;
    let mut last_folded = 0;
    let mut last_sent = 0;
    let cpu_at_start = [&server_tid, &fold_tid]
        .map(|t| thread_cpu_seconds(t.as_deref()))
        .iter()
        .sum::<f64>()
        + bench_common::this_thread_cpu_seconds();
    println!(
        "{:>4} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7} {:>8}",
        "s", "connected", "sent/s", "folded/s", "backlog", "refused", "rss MiB", "frame ms"
    );
    let mut max_frame_second = 0.0f64;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        let wait = next_frame.min(next_second).saturating_duration_since(now);
        let began;
        match lines_rx.recv_timeout(wait) {
            Ok(lines) => {
                began = Instant::now();
                for line in lines {
                    if let (Some(stalled), WatchLine::Hang { rank, .. }) = (stall_rank, &line) {
                        if *rank == stalled && named_at.is_none() {
                            named_at = Some(started.elapsed());
                        }
                    }
                    if let WatchLine::Straggler { rank, host, lag_us, last, of, .. } = &line {
                        if Some(*rank) == straggle_rank && Some(host) == straggler_host.as_ref() {
                            if straggler_at.is_none() {
                                let at = started.elapsed();
                                straggler_at = Some(at);
                                println!("# straggler named at {:.1} s: rank {rank} on {host}, its peers waited {:.2} ms for it in {last} of {of} calls", at.as_secs_f64(), lag_us / 1e3);
                            }
                        } else {
                            straggler_wrong += 1;
                            if straggler_wrong <= 3 {
                                println!("# a straggler line names rank {rank} on {host}, not the straggler: {line:?}");
                            }
                        }
                    }
                    view.push(line);
                }
            }
            Err(_) => began = Instant::now(),
        }
        // The view's frame: what the tick folded in (above) and the draw.
        if Instant::now() >= next_frame {
            terminal
                .draw(|frame| efatop_ui::watch::draw(frame, &view))
                .expect("draw");
            let took = began.elapsed().as_secs_f64() * 1e3;
            frames.push(took);
            max_frame_second = max_frame_second.max(took);
            next_frame += FRAME;
            if named_at.is_some() && on_first_screen.is_none() {
                let screen: String = terminal
                    .backend()
                    .buffer()
                    .content()
                    .iter()
                    .map(ratatui::buffer::Cell::symbol)
                    .collect();
                on_first_screen =
                    Some(screen.contains(&format!("HANG rank {}", stall_rank.unwrap_or(0))));
            }
        }
        if Instant::now() >= next_second {
            let s = next_second.duration_since(started).as_secs();
            next_second += Duration::from_secs(1);
            let counts = watcher.server.counts();
            let sent_now = sent.messages.load(Ordering::Relaxed);
            let folded_now = folded.messages.load(Ordering::Relaxed);
            println!(
                "{s:>4} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7.0} {:>8.1}",
                counts.live.load(Ordering::Relaxed),
                sent_now - last_sent,
                folded_now - last_folded,
                sent_now.saturating_sub(folded_now),
                counts.refused(),
                rss_mib("VmRSS").unwrap_or(0.0),
                max_frame_second
            );
            last_folded = folded_now;
            last_sent = sent_now;
            max_frame_second = 0.0;
        }
    }
    let run_s = started.elapsed().as_secs_f64();
    let cpu = [&server_tid, &fold_tid]
        .map(|t| thread_cpu_seconds(t.as_deref()))
        .iter()
        .sum::<f64>()
        + bench_common::this_thread_cpu_seconds()
        - cpu_at_start;
    stop.store(true, Ordering::Relaxed);
    // The plugins stop at their next interval: only then is what they wrote counted whole (read before,
    // the writes still under way were folded and not counted, and more was folded than sent).
    let plugins_peak = match senders {
        Plugins::Here(senders) => {
            let _ = senders.join();
            None
        }
        Plugins::Apart(apart) => apart.stop(),
    };
    let sent_s = started.elapsed().as_secs_f64();
    // Everything written is folded within a few seconds, or it was not kept up with.
    let sent_total = sent.messages.load(Ordering::Relaxed);
    let drained = Instant::now();
    while folded.messages.load(Ordering::Relaxed) < sent_total
        && drained.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let folded_total = folded.messages.load(Ordering::Relaxed);
    let counts = watcher.server.counts();
    frames.sort_by(f64::total_cmp);
    let p50 = percentile(&frames, 0.5);
    let p99 = percentile(&frames, 0.99);
    let rss = rss_mib("VmRSS");
    let peak = rss_mib("VmHWM");
    let connected = sent.connected.load(Ordering::Relaxed);
    // The load offered: each rank's interval, each plugin's NICs and health, every interval (the senders on few
    // CPUs may offer less, and then the verdict is inconclusive).
    let per_s = (world + 2 * processes) as f64 * 1000.0 / args.interval_ms as f64;
    let offered = sent_total as f64 / sent_s;
    let enough = offered >= 0.9 * per_s * (run_s - 2.0) / run_s && connected as usize >= connections;
    let kept_up = if !enough {
        "inconclusive"
    } else if folded_total == sent_total {
        "yes"
    } else {
        "no"
    };
    let named_s = named_at.map(|at| at.as_secs_f64() - args.stall_at as f64);
    let straggler_s = straggler_at.map(|at| at.as_secs_f64() - args.straggle_at as f64);
    let fmt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
    let straggler_told = if straggle_rank.is_some() {
        format!("{} s after it began to lag (goal: {} s; {straggler_wrong} lines named another rank)", fmt(straggler_s), STRAGGLER_GOAL.as_secs())
    } else {
        "not planted".to_string()
    };
    println!(
        "# verdict: {} of {connections} connections ({processes} plugins) made, {folded_total} of {sent_total} messages folded ({kept_up}); the stalled rank named {} s after it stopped (goal: {} s); the straggler named {straggler_told}; frame p99 {} ms; RSS {} MiB{}",
        connected,
        fmt(named_s),
        args.hang_after + 2,
        fmt(p99),
        fmt(rss),
        if args.plugins_apart { " (the watcher's alone: the plugins in their own process)" } else { " (the plugins' side included)" }
    );
    println!(
        "# summary: mode=watch hosts={} ranks={world} plugins={processes} connections={connections} relayed={} interval_ms={} seconds={} offered_per_s={:.0} target_per_s={per_s:.0} sent={sent_total} folded={folded_total} connected={connected} retries={} late={} strangers={} refused={} evicted={} forged={} watcher_cpu={:.1} frame_p50_ms={} frame_p99_ms={} rss_mib={} peak_rss_mib={} hang_after_s={} hang_named_s={} hang_on_first_screen={} straggle_at_s={} straggle_lag_ms={} straggler_named_s={} straggler_goal_s={} straggler_wrong={straggler_wrong} kept_up={kept_up} confined={confined} plugins_apart={} plugins_peak_rss_mib={}",
        args.hosts,
        job.relayed,
        args.interval_ms,
        args.seconds,
        offered,
        sent.retries.load(Ordering::Relaxed),
        sent.late.load(Ordering::Relaxed),
        sent.strangers.load(Ordering::Relaxed),
        counts.refused(),
        counts.evicted.load(Ordering::Relaxed),
        counts.forged.load(Ordering::Relaxed),
        cpu / run_s * 100.0,
        fmt(p50),
        fmt(p99),
        fmt(rss),
        fmt(peak),
        args.hang_after,
        fmt(named_s),
        on_first_screen.map_or("-", |yes| if yes { "yes" } else { "no" }),
        args.straggle_at,
        args.straggle_lag_ms,
        fmt(straggler_s),
        STRAGGLER_GOAL.as_secs(),
        args.plugins_apart,
        fmt(plugins_peak),
    );
    watcher.stop();
    std::process::ExitCode::SUCCESS
}
