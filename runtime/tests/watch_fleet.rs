//! `efatop watch` at a fleet's scale, in process: a synthetic job of 4096 hosts × 8 ranks (32,768 ranks,
//! a process per host driving its 8 GPUs as JAX runs, so 4096 plugins, each its own TCP connection
//! proving the token and sealing its frames, every 2 s; the runtime's `watch::synthetic`, which the
//! bench_watch example runs too) streams to the real watch server and fold loop, with 2000 strangers that never prove the
//! token opened alongside from one address. Asserts: every plugin gets in despite the strangers (which
//! are dropped and counted), every message the plugins wrote is folded, the stalled rank is named by
//! the hang locator, and the live view's first screen (200×60, the real `efatop_ui::watch` on a
//! TestBackend) shows the worst first: the hang and the host whose rail is behind, the job's size in
//! its header.
//!
//! Both ends of every connection live in this process: a connection per rank (32,768, as PyTorch runs)
//! needs 70k open files, past the hard limit of the CI machine (20,000, and no CAP_SYS_RESOURCE to raise
//! it); `bench_watch --ranks-per-process 1` measures that shape where the limit allows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use efatop_runtime::watch::fold::Config;
use efatop_proto::nccl::{HangWhy, LagSource, NicVerdict, WatchLine};
use efatop_runtime::watch::synthetic::{self as plugins, Watcher};
use efatop_runtime::watch::Settings;
use efatop_ui::watch::WatchView;
use ratatui::backend::TestBackend;
use ratatui::Terminal;

#[test]
fn a_32768_rank_job_is_folded_whole_and_its_stalled_rank_named_on_the_first_screen() {
    let job = plugins::Job {
        hosts: 4096,
        per_host: 8,
        per_process: 8,
        // Twice the plugin's default: the synthetic plugins share the test's two cores with the watcher.
        interval: Duration::from_secs(2),
        // A call a second, so two call samples a rank an interval (the plugin sends one for every call, up
        // to 64 a function an interval): at 4 a second their cost on the test's two cores kept 644 of the
        // 4096 plugins out for 150 s in a run on the loaded dev VM (a late host then also sent every call
        // since the start in its first interval; not tried again at 4 since).
        rate: 1.0,
        stall_rank: Some(20_003),
        stall_at: Duration::ZERO,
        skewed_host: Some(1365),
        straggle_rank: None,
        straggle_at: Duration::ZERO,
        straggle_lag: Duration::ZERO,
        strangers: 2000,
        relayed: false,
    };
    let world = job.world();
    // Well past a loaded machine's late reports: only the stalled rank is behind that long.
    let hang_after = Duration::from_secs(8);
    let watcher = Watcher::start(Settings::default(), Config { hang_after, ..Config::default() }, job.hosts).expect("the watcher");
    let files = watcher.files;
    assert!(files.enough(), "this test holds both ends of {} connections: it needs {} open files and may open {}", job.hosts, files.wanted, files.limit);
    let (server, started, folded, lines_rx) = (&watcher.server, watcher.started, &watcher.folded, &watcher.lines);
    let stop = Arc::new(AtomicBool::new(false));
    let (senders, sent) = plugins::start(
        job.clone(),
        server.address,
        watcher.secret.clone(),
        started,
        Arc::clone(&stop),
        2,
        Vec::new(),
    );

    let mut view = WatchView::new();
    let mut stalled_at = None;
    let mut named = None;
    let deadline = started + Duration::from_secs(150);
    while named.is_none() && Instant::now() < deadline {
        if let Ok(lines) = lines_rx.recv_timeout(Duration::from_millis(100)) {
            for line in lines {
                if matches!(&line, WatchLine::Hang { rank: 20_003, .. }) && named.is_none() {
                    named = Some(started.elapsed());
                }
                view.push(line);
            }
        }
        // Every plugin in and a few intervals folded: the rank stops.
        // Every plugin in, every host judged, the skewed one behind its rail: the first screen of a
        // healthy job has it on top of the hosts; then the rank stops.
        if stalled_at.is_none()
            && server.counts().live.load(Ordering::Relaxed) == job.hosts as u64
            && view.ranks.len() == world
            && view.hosts.len() == job.hosts
            && matches!(view.hosts.get("p5-1365"), Some(WatchLine::Nics { verdict: NicVerdict::BehindRail, .. }))
        {
            let screen = first_screen(&view);
            let text = screen.join("\n");
            assert!(screen[0].contains("32768 ranks on 4096 hosts"), "{text}");
            assert!(screen[1].contains("hang locator: no rank is behind its peers"), "{text}");
            let behind_row = screen.iter().position(|row| row.contains("p5-1365")).unwrap_or_else(|| panic!("the skewed host on the first screen: {text}"));
            assert!(screen[behind_row].contains("NIC BEHIND") && screen[behind_row].contains("rdmap84s0"), "{text}");
            let first_ok = screen.iter().position(|row| row.contains("  ok ")).unwrap_or(usize::MAX);
            assert!(behind_row < first_ok, "the host behind its rail before the hosts that are ok: {text}");
            let at = started.elapsed();
            sent.stall(at);
            stalled_at = Some(at);
        }
    }
    let counts = server.counts();
    assert_eq!(
        sent.connected.load(Ordering::Relaxed),
        job.hosts as u64,
        "every plugin connected (retries: {})",
        sent.retries.load(Ordering::Relaxed)
    );
    let stalled_at = stalled_at.expect("every plugin connected and reported");
    let named = named.unwrap_or_else(|| {
        panic!(
            "the stalled rank was not named within {:?} of its stall",
            deadline - started - stalled_at
        )
    });
    eprintln!(
        "the stalled rank was named {:.1} s after it stopped (--hang-after {} s)",
        (named - stalled_at).as_secs_f64(),
        hang_after.as_secs()
    );

    // The first screen once the hang is named: the hang line under the header.
    let screen = first_screen(&view);
    let text = screen.join("\n");
    assert!(screen[0].contains("32768 ranks on 4096 hosts"), "{text}");
    assert!(screen[1].contains("HANG rank 20003 on p5-2500 GPU ? has not started allreduce"), "{text}");
    assert!(screen[1].contains("32767 ranks [") && screen[1].contains("wait in it"), "{text}");

    // Every message written is folded.
    stop.store(true, Ordering::Relaxed);
    senders.join().expect("the plugins");
    let written = sent.messages.load(Ordering::Relaxed);
    let drain = Instant::now();
    while folded.messages.load(Ordering::Relaxed) < written
        && drain.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        folded.messages.load(Ordering::Relaxed),
        written,
        "every message the plugins wrote is folded"
    );
    assert_eq!(counts.messages.load(Ordering::Relaxed), written);
    // The strangers were dropped and counted, and cost no plugin its place.
    assert!(
        sent.strangers.load(Ordering::Relaxed) >= 1000,
        "strangers opened: {}",
        sent.strangers.load(Ordering::Relaxed)
    );
    assert!(
        counts.evicted.load(Ordering::Relaxed) + counts.strangers.load(Ordering::Relaxed) >= 1000,
        "{counts:?}"
    );
    assert_eq!(
        counts.proven.load(Ordering::Relaxed),
        job.hosts as u64,
        "{counts:?}"
    );
    assert_eq!(counts.broken.load(Ordering::Relaxed), 0, "{counts:?}");
    assert_eq!(counts.forged.load(Ordering::Relaxed), 0, "every sealed record opened: {counts:?}");
}

/// A job of 64 hosts × 8 ranks, a plugin per rank (512, as `PyTorch` runs; each host's through its relay, one
/// connection a host) at the plugin's 1 s interval, each sampling its calls as the plugin does: once every plugin reports, rank 301 (on p5-0037, GPU 5) starts
/// each allreduce 20 ms late. The straggler finder names it, on its host and GPU, within the 10 s
/// of it starting to lag, and names no other rank before or after, and the hang locator never names it nor
/// any rank behind its peers but the stalled one; then rank 35 on p5-0004 stalls, and the hang locator
/// names it (the straggler is named first: a stall ends the calls the finder matches).
#[test]
fn a_straggler_is_named_on_its_host_within_10_s_and_a_later_stall_still_is() {
    let job = plugins::Job {
        hosts: 64,
        per_host: 8,
        per_process: 1,
        interval: Duration::from_secs(1),
        rate: 4.0,
        stall_rank: Some(35),
        stall_at: Duration::ZERO,
        skewed_host: None,
        straggle_rank: Some(301),
        straggle_at: Duration::ZERO,
        straggle_lag: Duration::from_millis(20),
        strangers: 0,
        relayed: true,
    };
    let plugins_n = job.world();
    // Through each host's relay, as the plugin runs by default: 64 connections carry the 512 plugins.
    let connections = job.hosts;
    // As in the fleet test: well past a loaded machine's late reports (with 5 s, a run on the loaded dev VM
    // had every rank unheard that long once, and named silent).
    let hang_after = Duration::from_secs(8);
    let goal = Duration::from_secs(10);
    let watcher = Watcher::start(Settings::default(), Config { hang_after, ..Config::default() }, connections).expect("the watcher");
    let files = watcher.files;
    assert!(files.enough(), "this test holds both ends of {connections} connections: it needs {} open files and may open {}", files.wanted, files.limit);
    let (server, started, lines_rx) = (&watcher.server, watcher.started, &watcher.lines);
    let stop = Arc::new(AtomicBool::new(false));
    let (senders, sent) = plugins::start(job.clone(), server.address, watcher.secret.clone(), started, Arc::clone(&stop), 1, Vec::new());

    let mut view = WatchView::new();
    // Every rank's interval folded since every plugin got in: then the straggler starts to lag.
    let mut reported = std::collections::BTreeSet::new();
    let mut straggle_at = None;
    let mut straggler: Option<(Duration, WatchLine)> = None;
    // Straggler lines naming another rank; hang lines naming the straggler, or another rank that did not
    // stall as behind its peers (not silent: a machine this loaded may leave a plugin unheard for long).
    let mut others = Vec::new();
    let mut silent = 0;
    let mut stalled_at = None;
    let mut hang = None;
    let deadline = started + Duration::from_secs(90);
    while hang.is_none() && Instant::now() < deadline {
        let Ok(lines) = lines_rx.recv_timeout(Duration::from_millis(100)) else { continue };
        for line in lines {
            match &line {
                WatchLine::Straggler { rank: 301, .. } if straggler.is_none() => straggler = Some((started.elapsed(), line.clone())),
                WatchLine::Straggler { rank: 301, .. } => {}
                WatchLine::Straggler { .. } | WatchLine::Hang { rank: 301, .. } => others.push(line.clone()),
                WatchLine::Hang { rank, why: HangWhy::Silent, .. } if *rank != 35 => silent += 1,
                WatchLine::Hang { rank, .. } if *rank != 35 => others.push(line.clone()),
                WatchLine::Coll { ranks, .. } if straggle_at.is_none() && server.counts().live.load(Ordering::Relaxed) == connections as u64 => {
                    // A coll line counts the ranks whose rows it averaged: all of them, once each reported.
                    reported.insert(*ranks);
                }
                WatchLine::Hang { rank: 35, .. } if stalled_at.is_some() => hang = Some((started.elapsed(), line.clone())),
                _ => {}
            }
            view.push(line);
        }
        if straggle_at.is_none() && reported.contains(&(plugins_n as u32)) {
            let at = started.elapsed();
            sent.straggle(at);
            straggle_at = Some(at);
        }
        if straggler.is_some() && stalled_at.is_none() {
            let at = started.elapsed();
            sent.stall(at);
            stalled_at = Some(at);
        }
        if let Some(at) = straggle_at {
            if straggler.is_none() && started.elapsed() > at + goal + Duration::from_secs(20) {
                break;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    senders.join().expect("the plugins");
    let straggle_at = straggle_at.expect("every plugin connected and reported");
    let (named, line) = straggler.unwrap_or_else(|| panic!("the straggler was not named within {:?} of it starting to lag (other straggler lines: {others:?})", goal + Duration::from_secs(20)));
    let took = named.saturating_sub(straggle_at);
    eprintln!("the straggler was named {:.1} s after it began to lag: {line:?}", took.as_secs_f64());
    let WatchLine::Straggler { host, gpu, source, lag_us, last, of, .. } = &line else { unreachable!() };
    assert_eq!((host.as_str(), gpu.as_deref(), *source), ("p5-0037", Some("5"), LagSource::GpuStart), "{line:?}");
    assert!(*lag_us >= 19_000.0 && *lag_us <= 20_200.0, "its peers waited about its 20 ms lag: {line:?}");
    assert!(*last * 2 >= *of && *last >= 3, "{line:?}");
    assert!(others.is_empty(), "no other rank is named a straggler, nor the straggler or another rank but the stalled one hung (a slow rank is not a dead one): {others:?}");
    if silent > 0 {
        eprintln!("{silent} hang lines named ranks silent (their plugins unheard for {hang_after:?} on this machine)");
    }
    assert!(took <= goal, "the straggler was named {:.1} s after it began to lag, past the goal of {goal:?}", took.as_secs_f64());
    let stalled_at = stalled_at.expect("stalled once the straggler was named");
    let (hang_named, line) = hang.unwrap_or_else(|| panic!("the stalled rank was not named within {:?} of the start", deadline - started));
    assert!(matches!(&line, WatchLine::Hang { rank: 35, host, .. } if host == "p5-0004"), "{line:?}");
    eprintln!("the stalled rank was named {:.1} s after it stopped (--hang-after {} s)", hang_named.saturating_sub(stalled_at).as_secs_f64(), hang_after.as_secs());
    watcher.stop();
}

/// The view as a 200×60 terminal shows it, row by row.
fn first_screen(view: &WatchView) -> Vec<String> {
    let mut terminal = Terminal::new(TestBackend::new(200, 60)).expect("terminal");
    terminal.draw(|frame| efatop_ui::watch::draw(frame, view)).expect("draw");
    terminal.backend().buffer().content().chunks(200).map(|row| row.iter().map(ratatui::buffer::Cell::symbol).collect()).collect()
}
