//! What the plugin's hot path costs NCCL's threads, from a real job's trace: the built plugin loaded
//! (dlopen) and the trace played into it at its recorded pace, each hook call (NCCL's `startEvent`,
//! `recordEventState`, `stopEvent`) timed alone, while the plugin's own thread folds as it does under NCCL.
//!
//! Per stretch of the trace where the job called one collective at one size (its calls in a row), the
//! hooks' time against the stretch's span as recorded: were every hook call on the collective's critical
//! path, the job would slow by at most that share. It bounds the plugin's cost where a job's own A/B
//! cannot (two processes time-sharing one GPU swing by 10-20 % from one job to the next).
//!
//!   bench_hooks PLUGIN.so TRACE [ABI]     (ABI: 4 to 7, default the trace's; gaps over 20 ms are cut)
//!
//! The plugin is not told of a watcher (no EFATOP_WATCH): its thread folds and drops. With
//! EFATOP_PROFILER_FILE set it writes its figures there, as the GPU check's jobs did.
//!
//! EFATOP_BENCH_CLOCK: `live` (the default: the plugin reads its own clock at each hook, as under NCCL, so a
//! hook's time includes it) or `played` (each record stamped with its recorded time, as the CI harness plays:
//! the hooks read no clock; the bench's runs before the twenty-first session). EFATOP_BENCH_ARM: `on` (the
//! default), `idle`, `nopush`, `noclock` or `neither`: the cost A/B's arms (torch-alltoall-check.py's
//! COST_AB_VS), each hook's own time in that arm.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use nccl_profiler_efatop::ffi::player::Plugin;
use nccl_profiler_efatop::record::{Event, Record};
use nccl_profiler_efatop::trace::{self, Line};

/// A stretch of one key (a collective or a point-to-point call, its count and datatype).
struct Stretch {
    key: String,
    calls: u64,
    records: u64,
    hook_ns: u64,
    first_ns: u64,
    last_ns: u64,
}

fn key_of(event: &Event) -> Option<String> {
    match event {
        Event::Coll { func, count, datatype, .. } => Some(format!("{} {} {}", func.as_str(), count, datatype.as_str())),
        // A group's sends and receives are one stretch.
        Event::P2p { count, datatype, .. } => Some(format!("p2p {} {}", count, datatype.as_str())),
        _ => None,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(plugin), Some(path)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: bench_hooks PLUGIN.so TRACE [ABI]");
        std::process::exit(2);
    };
    let clock = std::env::var("EFATOP_BENCH_CLOCK").unwrap_or_else(|_| "live".into());
    let live = match clock.as_str() {
        "live" => true,
        "played" => false,
        other => {
            eprintln!("bench_hooks: EFATOP_BENCH_CLOCK must be live or played, not '{other}'");
            std::process::exit(2)
        }
    };
    let arm = std::env::var("EFATOP_BENCH_ARM").unwrap_or_else(|_| "on".into());
    let (idle, skip) = match arm.as_str() {
        "on" => (false, 0),
        "idle" => (true, 0),
        "nopush" => (false, 1),
        "noclock" => (false, 2),
        "neither" => (false, 3),
        other => {
            eprintln!("bench_hooks: EFATOP_BENCH_ARM must be on, idle, nopush, noclock or neither, not '{other}'");
            std::process::exit(2)
        }
    };
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        eprintln!("bench_hooks: {path}: {e}");
        std::process::exit(2)
    });
    let trace = trace::parse(&text).unwrap_or_else(|e| {
        eprintln!("bench_hooks: {path}: {e}");
        std::process::exit(2)
    });
    let abi: u32 = match args.get(3) {
        Some(v) => match v.parse() {
            Ok(n @ 4..=7) => n,
            _ => {
                eprintln!("bench_hooks: ABI must be 4, 5, 6 or 7, not '{v}'");
                std::process::exit(2)
            }
        },
        None => trace.abi.unwrap_or(5).clamp(4, 7),
    };
    let loaded = Plugin::load(Path::new(plugin), abi).unwrap_or_else(|e| {
        eprintln!("bench_hooks: {e}");
        std::process::exit(1)
    });
    let loaded = if live { loaded.live_clock() } else { loaded };
    if let Err(e) = loaded.switch(idle, skip) {
        eprintln!("bench_hooks: {e}");
        std::process::exit(1)
    }
    let cpu_before = plugin_thread_cpu();
    let began = std::time::Instant::now();
    let played = loaded.play(&trace, 1.0, Duration::from_millis(20)).unwrap_or_else(|e| {
        eprintln!("bench_hooks: playing {path}: {e}");
        std::process::exit(1)
    });
    let wall = began.elapsed();
    // The thread starts with the first communicator's init, during the play: none before is none used.
    let cpu = plugin_thread_cpu().map(|after| after.saturating_sub(cpu_before.unwrap_or_default()));
    let hook_of: BTreeMap<usize, u64> = played.hooks.iter().map(|(i, d)| (*i, d.as_nanos() as u64)).collect();

    // Stretches: a run of top-level calls of one key; a record belongs to the stretch open when it comes.
    let mut stretches: Vec<Stretch> = Vec::new();
    for (index, line) in trace.lines.iter().enumerate() {
        let Line::Record(record) = line else { continue };
        let t = record.t_ns();
        if let Record::Start { event, .. } = record {
            if let Some(key) = key_of(event) {
                if stretches.last().map(|s| s.key != key).unwrap_or(true) {
                    stretches.push(Stretch { key, calls: 0, records: 0, hook_ns: 0, first_ns: t, last_ns: t });
                }
                if let Some(s) = stretches.last_mut() {
                    s.calls += 1;
                }
            }
        }
        if let Some(s) = stretches.last_mut() {
            s.records += 1;
            s.hook_ns += hook_of.get(&index).copied().unwrap_or(0);
            s.last_ns = s.last_ns.max(t);
        }
    }

    // A hook call's mean time by what it was: the start of each event type, a state change, a stop.
    let mut by_kind: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    for (index, line) in trace.lines.iter().enumerate() {
        let (Line::Record(record), Some(ns)) = (line, hook_of.get(&index)) else { continue };
        let kind = match record {
            Record::Start { event, .. } => match event {
                Event::ProxyStep { .. } => "start proxystep",
                Event::ProxyOp { .. } => "start proxyop",
                Event::KernelCh { .. } | Event::KernelPhase { .. } => "start kernel",
                _ => "start other",
            },
            Record::State { .. } | Record::OpSteps { .. } => "state",
            Record::Stop { .. } => "stop",
        };
        let entry = by_kind.entry(kind).or_default();
        entry.0 += 1;
        entry.1 += ns;
    }
    let mut all: Vec<u64> = hook_of.values().copied().collect();
    all.sort_unstable();
    let pct = |q: f64| all.get(((all.len().saturating_sub(1)) as f64 * q).round() as usize).copied().unwrap_or(0);
    let total: u64 = all.iter().sum();
    println!("# bench_hooks: {} ({} records, NCCL {}, ABI {abi}), plugin {plugin}, clock {clock}, arm {arm}", path, all.len(), trace.nccl_version.as_deref().unwrap_or("?"));
    println!("# a hook call: p50 {} ns, p99 {} ns, max {} ns, mean {:.0} ns", pct(0.5), pct(0.99), all.last().copied().unwrap_or(0), total as f64 / all.len().max(1) as f64);
    println!(
        "# by kind (calls, mean ns): {}",
        by_kind.iter().map(|(kind, (n, ns))| format!("{kind} {n} {:.0}", *ns as f64 / (*n).max(1) as f64)).collect::<Vec<_>>().join(", ")
    );
    println!("{:<32} {:>6} {:>8} {:>10} {:>10} {:>12} {:>9}", "stretch (call, count, type)", "calls", "records", "hooks µs", "span ms", "hooks/call µs", "share");
    let mut worst: f64 = 0.0;
    for s in stretches.iter().filter(|s| s.calls >= 5) {
        let span = s.last_ns.saturating_sub(s.first_ns).max(1);
        let share = s.hook_ns as f64 / span as f64 * 100.0;
        worst = worst.max(share);
        println!(
            "{:<32} {:>6} {:>8} {:>10.1} {:>10.2} {:>12.2} {:>8.3}%",
            s.key,
            s.calls,
            s.records,
            s.hook_ns as f64 / 1e3,
            span as f64 / 1e6,
            s.hook_ns as f64 / 1e3 / s.calls as f64,
            share
        );
    }
    match cpu {
        Some(cpu) => println!(
            "# the plugin's thread: {:.1} ms of CPU over the {:.1} ms played ({:.1} % of a CPU)",
            cpu.as_secs_f64() * 1e3,
            wall.as_secs_f64() * 1e3,
            cpu.as_secs_f64() / wall.as_secs_f64().max(1e-9) * 100.0
        ),
        None => println!("# the plugin's thread: its CPU time could not be read (/proc/self/task)"),
    }
    println!("# the worst stretch's hooks: {worst:.3}% of its span (a bound on the plugin's cost there, were every hook call on the critical path)");
    // The plugin's thread keeps running to the end of the process: the library stays loaded.
    std::mem::forget(loaded);
}

/// The time the plugin's thread (named `efatop-nccl`) has run on a CPU, in ns (its task's schedstat).
fn plugin_thread_cpu() -> Option<Duration> {
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != "efatop-nccl" {
            continue;
        }
        let schedstat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
        return Some(Duration::from_nanos(schedstat.split_whitespace().next()?.parse().ok()?));
    }
    None
}
