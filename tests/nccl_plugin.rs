//! The NCCL profiler plugin, without a GPU: the built cdylib is loaded (dlopen) into player processes that
//! play NCCL event sequences (tests/fixtures/nccl/) through each ABI (v4 to v7), two ranks on two
//! "hosts", with `efatop watch --json` listening; the test reads the watcher's typed lines and checks the
//! figures (busbw by nccl-tests' formulas), bytes per peer, the fallback flag (a fake node whose EFA
//! counters stay flat), the hang locator (a rank behind its peer; a rank stopped with SIGSTOP while its
//! peer waits), the straggler line of a v7 trace (the lagging rank, its host and GPU, from the kernel
//! phases; from the kernels' starts through v4–v6) and its `userTag`, `--prometheus` scraped by a real
//! Prometheus, and that a missing, refusing or stalled watcher never holds up the hot path. And the GPU
//! machine's cost step (`scripts/gpu/fleet-goals cost`) with stand-in ranks: a job its limit cuts keeps every
//! block it printed, and its table; and `torch-alltoall-check.py --cost-ab`'s own ranks over a stand-in `torch`.
//!
//! A player is this test binary again (`player_child`, which does nothing unless `EFATOP_TEST_PLAY` is
//! set; tests/common/player.rs), so that each rank is a process with its own plugin, as under NCCL.

mod common;

use std::path::Path;
use std::time::Duration;

use common::player::{fixture, watch_line, Player, Watcher};
use common::prometheus::{query, value, wait_for};
use common::{efatop_in, scratch, TEST_TOKEN};
use nccl_profiler_efatop::trace::{self, Line};
use efatop_proto::nccl::{Func, HangWhy, LagSource, NicVerdict, Timing, WatchLine};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// Not a test of its own: a player process (see the module's doc).
#[test]
fn player_child() {
    common::player::play_if_asked();
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

fn coll<'a>(lines: &'a [WatchLine], func: Func, size: u64) -> Option<&'a WatchLine> {
    lines.iter().rev().find(|l| matches!(l, WatchLine::Coll { func: f, size: s, .. } if *f == func && *s == size))
}

fn fake_node() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("dir");
    let out = efatop_in(dir.path()).args(["monitor", "--write-fake-p5"]).arg(dir.path()).output().expect("efatop monitor --write-fake-p5");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(dir.path().join("sys/class/infiniband/rdmap79s0/ports/1/hw_counters/tx_bytes").exists());
    dir
}

#[test]
fn every_abi_shows_the_figures_the_peers_and_a_fallback_to_sockets() {
    let node = fake_node();
    let sysfs = node.path().to_str().expect("utf-8").to_string();
    for abi in [4, 5, 6, 7] {
        let mut watch = Watcher::start(&["--window", "2", "--hang-after", "30"], TEST_TOKEN);
        let env = [("EFATOP_WATCH", watch.address.as_str()), ("EFATOP_SYSFS_ROOT", sysfs.as_str())];
        let players = [Player::start("synthetic-full-r0.trace", abi, "node-a", "0", &env), Player::start("synthetic-full-r1.trace", abi, "node-b", "1", &env)];
        let want_allreduce = GIB as f64 / 0.020 / 1e9;
        let want_small = (64 * MIB) as f64 / 0.002 / 1e9;
        watch.until(Duration::from_secs(60), "figures", |lines| {
            let done = |func, size, ops| {
                matches!(coll(lines, func, size), Some(WatchLine::Coll { ops: o, ranks: 2, .. }) if *o == ops)
            };
            done(Func::AllReduce, GIB, 6) && done(Func::AllGather, 128 * MIB, 4) && done(Func::AlltoAll, 64 * MIB, 4)
        });
        let lines = &watch.seen;
        let ranks: Vec<_> = lines.iter().filter_map(|l| if let WatchLine::Rank { host, gpu, rank, nranks: 2, abi: a, .. } = l { Some((host.clone(), gpu.clone(), *rank, *a)) } else { None }).collect();
        assert!(ranks.contains(&("node-a".into(), Some("0".into()), 0, abi)) && ranks.contains(&("node-b".into(), Some("1".into()), 1, abi)), "v{abi}: {ranks:?}");
        let Some(WatchLine::Coll { algbw_gbps: Some(algbw), busbw_gbps: Some(busbw), timing: Timing::Proxy, algo, proto, .. }) = coll(lines, Func::AllReduce, GIB) else { panic!("v{abi}: {lines:#?}") };
        assert!(close(*algbw, want_allreduce) && close(*busbw, want_allreduce), "v{abi}: allreduce 1 GiB in 20 ms on 2 ranks: algbw = busbw = {want_allreduce}, got {algbw} {busbw}");
        assert_eq!((algo.as_str(), proto.as_str()), ("RING", "SIMPLE"));
        let Some(WatchLine::Coll { algbw_gbps: Some(algbw), busbw_gbps: Some(busbw), .. }) = coll(lines, Func::AllGather, 128 * MIB) else { panic!() };
        assert!(close(*algbw, want_small) && close(*busbw, want_small / 2.0), "v{abi}: allgather: busbw = algbw (n-1)/n: {algbw} {busbw}");
        // A group of sends and receives through the proxy is timed by the proxy (one source for every size):
        // its first step to its last operation's end, 2 ms in the trace, on the playback's host clock here.
        let Some(WatchLine::Coll { algbw_gbps: Some(algbw), busbw_gbps: Some(busbw), timing: Timing::Proxy, .. }) = coll(lines, Func::AlltoAll, 64 * MIB) else { panic!("v{abi}: {:?}", coll(lines, Func::AlltoAll, 64 * MIB)) };
        assert!(*algbw > want_small / 4.0 && *algbw < want_small * 4.0 && close(*busbw, algbw / 2.0), "v{abi}: alltoall (grouped sends), about {want_small}: {algbw} {busbw}");
        // Each rank sent its peer 6 × 1 GiB (ring allreduce on 2 ranks), 4 × 64 MiB (allgather), 4 × 32 MiB.
        let sent = 6 * GIB + 4 * 64 * MIB + 4 * 32 * MIB;
        watch.until(Duration::from_secs(20), "bytes per peer", |lines| {
            [(0, 1), (1, 0)].iter().all(|(r, p)| lines.iter().any(|l| matches!(l, WatchLine::Peer { rank, peer, sent: s, received, .. } if rank == r && peer == p && *s == sent && *received == sent)))
        });
        // The fake nodes' EFA counters never move while NCCL's network path moves GiBs: a fallback.
        watch.until(Duration::from_secs(20), "the fallback flag on both hosts", |lines| {
            ["node-a", "node-b"].iter().all(|h| lines.iter().any(|l| matches!(l, WatchLine::Nics { host, verdict: NicVerdict::Fallback, nic_bytes: 0, nics, .. } if host == h && nics.len() == 32)))
        });
        for player in players {
            let (longest, _) = player.finish(Duration::from_secs(60));
            assert!(longest < 50_000, "v{abi}: a hot-path call took {longest} µs");
        }
        watch.until(Duration::from_secs(20), "both plugins leaving after finalize", |lines| lines.iter().filter(|l| matches!(l, WatchLine::Gone { bye: true, .. })).count() == 2);
        assert!(!watch.seen.iter().any(|l| matches!(l, WatchLine::Hang { .. })), "v{abi}: no hang in a finished run: {:#?}", watch.seen);
    }
}

#[test]
fn a_real_nccl_2_28_3_one_rank_run_shows_its_alltoalls_counted_and_untimed_through_every_abi() {
    // Recorded on an H200 (tests/fixtures/nccl/README.md): NCCL 2.28.3 gives a one-rank communicator's
    // allreduce and allgather no profiler event at all; its alltoall (a self send and receive per call) comes
    // as P2p groups without kernel or proxy events: counted, sized as nccl-tests sizes it, never timed.
    let trace = "nccl-2.28.3-one-rank-sweep-r0.trace";
    let want: Vec<(u64, u64)> = (20..=30).map(|p| (1u64 << p, if p == 30 { 5 } else { 25 })).collect();
    for abi in [4, 5, 6, 7] {
        let mut watch = Watcher::start(&[], TEST_TOKEN);
        let player = Player::start(trace, abi, "node-a", "0", &[("EFATOP_WATCH", watch.address.as_str())]);
        watch.until(Duration::from_secs(60), "every size of the alltoall sweep", |lines| {
            want.iter().all(|(size, ops)| matches!(coll(lines, Func::AlltoAll, *size), Some(WatchLine::Coll { ops: o, .. }) if o == ops))
        });
        player.finish(Duration::from_secs(30));
        let lines = &watch.seen;
        assert!(lines.iter().any(|l| matches!(l, WatchLine::Rank { nranks: 1, rank: 0, abi: a, .. } if *a == abi)), "v{abi}: {lines:#?}");
        for (size, _) in &want {
            let Some(WatchLine::Coll { ranks, nranks, timing, time_us, algbw_gbps, busbw_gbps, datatype, .. }) = coll(lines, Func::AlltoAll, *size) else { unreachable!() };
            assert_eq!((*ranks, *nranks, *timing, datatype.as_str()), (1, 1, Timing::None, "ncclFloat32"), "v{abi} {size}");
            assert_eq!((*time_us, *algbw_gbps, *busbw_gbps), (None, None, None), "v{abi} {size}: nothing was timed, nothing is shown");
        }
        assert!(!lines.iter().any(|l| matches!(l, WatchLine::Coll { func, .. } if *func != Func::AlltoAll)), "v{abi}: only the alltoalls: {lines:#?}");
        assert!(!lines.iter().any(|l| matches!(l, WatchLine::Peer { .. })), "v{abi}: no proxy step, no bytes per peer");
    }
}

#[test]
fn a_real_two_rank_nccl_2_28_3_run_shows_the_figures_the_live_watcher_showed_and_replays_from_its_recording() {
    // Two ranks on one H200 over NCCL's socket transport (tests/fixtures/nccl/README.md). Every call went
    // through NCCL's proxy, which times it (transports/nccl-plugin/src/fold.rs); the player stamps each record
    // with its recorded time, so any ABI plays them back to the same figures however busy the machine. The
    // driver's own timing of 3 calls after a warm-up on rank 0 (the watcher's means hold the warm-up and both
    // ranks too: 4711.9 µs for the 1 MiB allreduce, +1.3 %):
    let timed = [(Func::AllReduce, MIB, 4652.0), (Func::AllReduce, 2 * MIB, 4680.0), (Func::AllGather, MIB, 2495.0), (Func::AllGather, 2 * MIB, 2545.0), (Func::AlltoAll, MIB, 2373.0), (Func::AlltoAll, 2 * MIB, 2415.0)];
    for abi in [4, 5, 6, 7] {
        let dir = tempfile::tempdir().expect("dir");
        let recording = dir.path().join("watch.efawatch");
        let mut watch = Watcher::start(&["--record", recording.to_str().expect("utf-8")], TEST_TOKEN);
        let env = [("EFATOP_WATCH", watch.address.as_str())];
        let players = [Player::start("nccl-2.28.3-two-rank-sweep-r0.trace", abi, "vm", "0", &env), Player::start("nccl-2.28.3-two-rank-sweep-r1.trace", abi, "vm", "0", &env)];
        watch.until(Duration::from_secs(60), "every collective of both ranks", |lines| {
            timed.iter().all(|(func, size, _)| matches!(coll(lines, *func, *size), Some(WatchLine::Coll { ops: 4, ranks: 2, .. })))
        });
        for player in players {
            player.finish(Duration::from_secs(60));
        }
        watch.until(Duration::from_secs(20), "both plugins leaving after finalize", |lines| lines.iter().filter(|l| matches!(l, WatchLine::Gone { bye: true, .. })).count() == 2);
        let lines = watch.seen.clone();
        for (func, size, want) in &timed {
            let Some(WatchLine::Coll { timing: Timing::Proxy, time_us: Some(t), busbw_gbps: Some(busbw), algbw_gbps: Some(algbw), nranks: 2, .. }) = coll(&lines, *func, *size) else { panic!("v{abi} {func:?} {size}: {lines:#?}") };
            assert!((t / want - 1.0).abs() < 0.05, "v{abi} {func:?} {size}: {t} µs, the driver {want} µs");
            assert!(close(*busbw, algbw * func.bus_factor(2)), "v{abi}: busbw by nccl-tests' factor");
        }
        // The two ranks moved their bytes with each other; the machine's (none) EFA NICs carried nothing.
        assert!([(0, 1), (1, 0)].iter().all(|(r, p)| lines.iter().any(|l| matches!(l, WatchLine::Peer { rank, peer, sent, .. } if rank == r && peer == p && *sent > 0))), "v{abi}: {lines:#?}");
        drop(watch);
        // The recording plays back (`efatop replay`) to the very lines the watcher printed, figures and all.
        let out = efatop_in(dir.path()).args(["replay", "--json"]).arg(&recording).output().expect("efatop replay");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let replayed: Vec<WatchLine> = String::from_utf8_lossy(&out.stdout).lines().map(watch_line).collect();
        for (func, size, _) in timed.iter() {
            assert_eq!(coll(&replayed, *func, *size), coll(&lines, *func, *size), "v{abi} {func:?} {size}: replayed as shown live");
        }
        let out = efatop_in(dir.path()).args(["watch", "--json", "--from"]).arg(&recording).output().expect("efatop watch --from");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let folded: Vec<WatchLine> = String::from_utf8_lossy(&out.stdout).lines().map(watch_line).collect();
        assert_eq!(coll(&folded, Func::AllReduce, MIB), coll(&lines, Func::AllReduce, MIB), "v{abi}: --from folds a recording too");
    }
}

#[test]
fn a_real_stall_is_located_at_the_rank_that_has_not_started_the_call() {
    // The same two ranks: rank 1 slept 8 s before its 10th allreduce (#9); rank 0 waited in it.
    let mut watch = Watcher::start(&["--hang-after", "2"], TEST_TOKEN);
    // The 8 s gap is played as it was.
    let env = [("EFATOP_WATCH", watch.address.as_str()), ("EFATOP_TEST_MAX_GAP_MS", "10000")];
    let players = [Player::start("nccl-2.28.3-two-rank-stall-r0.trace", 5, "vm", "0", &env), Player::start("nccl-2.28.3-two-rank-stall-r1.trace", 5, "vm", "0", &env)];
    watch.until(Duration::from_secs(60), "the stalled rank named", |lines| lines.iter().any(|l| matches!(l, WatchLine::Hang { .. })));
    let hang = watch.seen.iter().find(|l| matches!(l, WatchLine::Hang { .. })).expect("hang").clone();
    let WatchLine::Hang { func, seq, rank, why, peers_done, peers_waiting, .. } = hang else { unreachable!() };
    assert_eq!((func, seq, rank, why, peers_done, peers_waiting), (Func::AllReduce, 9, 1, HangWhy::NotStarted, vec![], vec![0]));
    watch.until(Duration::from_secs(60), "the hang over once rank 1 ran #9", |lines| lines.iter().any(|l| matches!(l, WatchLine::HangOver { seq: 9, .. })));
    assert_eq!(watch.seen.iter().filter(|l| matches!(l, WatchLine::Hang { .. })).count(), 1, "rank 1 alone, once: {:#?}", watch.seen);
    for player in players {
        player.finish(Duration::from_secs(60));
    }
}

#[test]
fn the_hang_locator_names_the_rank_behind_and_the_rank_that_went_silent() {
    // Rank 1 never finishes allreduce #5; rank 0 has.
    let mut watch = Watcher::start(&["--hang-after", "2"], TEST_TOKEN);
    let env = [("EFATOP_WATCH", watch.address.as_str()), ("EFATOP_TEST_HOLD_MS", "6000")];
    let players = [Player::start("synthetic-hang-r0.trace", 6, "node-a", "0", &env), Player::start("synthetic-hang-r1.trace", 6, "node-b", "3", &env)];
    watch.until(Duration::from_secs(60), "a hang named", |lines| lines.iter().any(|l| matches!(l, WatchLine::Hang { .. })));
    let hang = watch.seen.iter().find(|l| matches!(l, WatchLine::Hang { .. })).expect("hang").clone();
    let WatchLine::Hang { func, seq, rank, host, gpu, why, peers_done, waiting_s, .. } = hang else { unreachable!() };
    assert_eq!((func, seq, rank, host.as_str(), gpu.as_deref(), why, peers_done), (Func::AllReduce, 5, 1, "node-b", Some("3"), HangWhy::NotFinished, vec![0]));
    assert!(waiting_s >= 2.0, "{waiting_s}");
    for player in players {
        player.finish(Duration::from_secs(60));
    }
    drop(watch);

    // Both ranks wait in allreduce #5; then rank 1's process stops (SIGSTOP): its plugin goes silent.
    let mut watch = Watcher::start(&["--hang-after", "2"], TEST_TOKEN);
    let env = [("EFATOP_WATCH", watch.address.as_str()), ("EFATOP_TEST_HOLD_MS", "30000")];
    let waiting = Player::start("synthetic-wait-r0.trace", 5, "node-a", "0", &env);
    let mut stopped = Player::start("synthetic-hang-r1.trace", 5, "node-b", "3", &env);
    watch.until(Duration::from_secs(60), "both ranks in allreduce #5", |lines| lines.iter().filter(|l| matches!(l, WatchLine::Coll { func: Func::AllReduce, ops: 5, ranks: 2, .. })).count() >= 1);
    std::thread::sleep(Duration::from_secs(3));
    assert!(!watch.seen.iter().any(|l| matches!(l, WatchLine::Hang { .. })), "both report, both wait: nobody to name yet: {:#?}", watch.seen);
    let pid = nix::unistd::Pid::from_raw(stopped.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP our player");
    watch.until(Duration::from_secs(30), "the silent rank named", |lines| lines.iter().any(|l| matches!(l, WatchLine::Hang { why: HangWhy::Silent, .. })));
    let hang = watch.seen.iter().find(|l| matches!(l, WatchLine::Hang { why: HangWhy::Silent, .. })).expect("hang").clone();
    assert!(matches!(&hang, WatchLine::Hang { rank: 1, seq: 5, host, peers_waiting, .. } if host == "node-b" && *peers_waiting == vec![0]), "{hang:?}");
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).expect("SIGCONT");
    // Heard again, it is no longer silent; still behind nobody, so the hang is over.
    watch.until(Duration::from_secs(30), "the hang over once it reports again", |lines| lines.iter().any(|l| matches!(l, WatchLine::HangOver { seq: 5, .. })));
    let _ = stopped.child.kill();
    let _ = stopped.child.wait();
    let mut waiting = waiting;
    let _ = waiting.child.kill();
    let _ = waiting.child.wait();
}

/// Two processes of one host reach the watcher through the host's relay: the first to start carries the
/// second. A relay whose process stops (SIGSTOP) is named silent itself, and the process it carried gives it
/// up (no heartbeat), goes to the watcher itself and is never named; a relay that dies (SIGKILL) ends the
/// connection of the process it carried, which says who it is again (it relays for itself now).
/// The `rank` lines of process `pid` seen so far.
fn rank_lines_of(lines: &[WatchLine], pid: u32) -> usize {
    lines.iter().filter(|l| matches!(l, WatchLine::Rank { pid: p, .. } if *p == pid)).count()
}

/// A watcher (`--hang-after SECONDS`) and two processes of host `node-r`: the host's relay (rank 1, started
/// first, so it binds the relay's name; the watcher has its rank before the second starts) and the process
/// it carries (rank 0). Both wait in allreduce #5 once played.
fn relay_and_carried(hang_after: &str) -> (Watcher, Player, Player) {
    let mut watch = Watcher::start(&["--hang-after", hang_after], TEST_TOKEN);
    let address = watch.address.clone();
    let env = [("EFATOP_WATCH", address.as_str()), ("EFATOP_TEST_HOLD_MS", "60000")];
    let relay = Player::start("synthetic-hang-r1.trace", 5, "node-r", "3", &env);
    let relay_pid = relay.child.id();
    watch.until(Duration::from_secs(60), "the relay's rank", |lines| rank_lines_of(lines, relay_pid) > 0);
    let carried = Player::start("synthetic-wait-r0.trace", 5, "node-r", "0", &env);
    (watch, relay, carried)
}

#[test]
fn a_hosts_processes_share_its_relay_and_a_stopped_or_dead_relay_costs_only_itself() {
    // Both ranks wait in allreduce #5. The relay (rank 1, started first) stops.
    let (mut watch, mut relay, mut carried) = relay_and_carried("10");
    let (relay_pid, carried_pid) = (relay.child.id(), carried.child.id());
    watch.until(Duration::from_secs(60), "both ranks in allreduce #5", |lines| lines.iter().any(|l| matches!(l, WatchLine::Coll { func: Func::AllReduce, ops: 5, ranks: 2, .. })));
    let joined = rank_lines_of(&watch.seen, carried_pid);
    let pid = nix::unistd::Pid::from_raw(relay_pid as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP our player");
    watch.until(Duration::from_secs(40), "the stopped relay named silent", |lines| lines.iter().any(|l| matches!(l, WatchLine::Hang { why: HangWhy::Silent, .. })));
    let hang = watch.seen.iter().find(|l| matches!(l, WatchLine::Hang { .. })).expect("hang").clone();
    assert!(matches!(&hang, WatchLine::Hang { rank: 1, host, peers_waiting, .. } if host == "node-r" && *peers_waiting == vec![0]), "{hang:?}");
    assert!(rank_lines_of(&watch.seen, carried_pid) > joined, "the carried process said who it is again, to the watcher itself, before the relay was named: {:#?}", watch.seen);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).expect("SIGCONT");
    watch.until(Duration::from_secs(30), "the hang over once the relay reports again", |lines| lines.iter().any(|l| matches!(l, WatchLine::HangOver { seq: 5, .. })));
    assert_eq!(watch.seen.iter().filter(|l| matches!(l, WatchLine::Hang { .. })).count(), 1, "the stopped relay alone, never the process it carried: {:#?}", watch.seen);
    for player in [&mut relay, &mut carried] {
        let _ = player.child.kill();
        let _ = player.child.wait();
    }
    drop(watch);

    // The relay dies: the process it carried is gone with its connection, then back on its own.
    let (mut watch, mut relay, mut carried) = relay_and_carried("30");
    let (relay_pid, carried_pid) = (relay.child.id(), carried.child.id());
    watch.until(Duration::from_secs(60), "the carried rank", |lines| rank_lines_of(lines, carried_pid) > 0);
    let joined = rank_lines_of(&watch.seen, carried_pid);
    relay.child.kill().expect("SIGKILL our player");
    let _ = relay.child.wait();
    watch.until(Duration::from_secs(30), "both gone with the relay's connection, the carried one back", |lines| {
        let gone = |pid: u32| lines.iter().any(|l| matches!(l, WatchLine::Gone { pid: p, bye: false, .. } if *p == pid));
        gone(relay_pid) && gone(carried_pid) && rank_lines_of(lines, carried_pid) > joined
    });
    let _ = carried.child.kill();
    let _ = carried.child.wait();
}

/// Not a test of its own: a process that binds the abstract socket `EFATOP_TEST_SQUAT` names and never
/// answers (run as another user by the test below).
#[test]
fn squatter_child() {
    use std::os::linux::net::SocketAddrExt;
    let Ok(name) = std::env::var("EFATOP_TEST_SQUAT") else { return };
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("name");
    let _held = std::os::unix::net::UnixListener::bind_addr(&address).expect("the squatter binds");
    println!("SQUATTING");
    std::thread::sleep(Duration::from_secs(60));
}

/// Another user's process holds the host's relay name first (and never answers): the plugins ask the
/// kernel who holds it, refuse it at once without a handshake, and connect to the watcher themselves.
/// Needs root (the squatter runs as `nobody` through setpriv); says so and skips without it.
#[test]
fn another_users_socket_on_the_relay_name_is_refused_at_once_and_costs_only_the_relay() {
    let setpriv = Path::new("/usr/bin/setpriv");
    if !nix::unistd::geteuid().is_root() || !setpriv.exists() {
        eprintln!("SKIPPED another_users_socket_on_the_relay_name: needs root and /usr/bin/setpriv to run a process as another user (nobody)");
        return;
    }
    let mut watch = Watcher::start(&[], TEST_TOKEN);
    let address = watch.address.clone();
    let uid = nix::unistd::geteuid().as_raw();
    let name = nccl_profiler_efatop::relay::name(uid, "node-s", &address);
    let mut squatter = std::process::Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(std::env::current_exe().expect("test binary"))
        .args(["--exact", "squatter_child", "--nocapture", "--test-threads=1"])
        .env("EFATOP_TEST_SQUAT", &name)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the squatter");
    let out = common::lines_of(squatter.stdout.take().expect("stdout"));
    assert!(std::iter::from_fn(|| out.recv_timeout(Duration::from_secs(30)).ok()).any(|l| l.contains("SQUATTING")), "the squatter never bound the name");
    let env = [("EFATOP_WATCH", address.as_str()), ("EFATOP_TEST_HOLD_MS", "5000")];
    let players = [Player::start_telling("synthetic-full-r0.trace", 6, "node-s", "0", &env), Player::start_telling("synthetic-full-r1.trace", 6, "node-s", "1", &env)];
    watch.until(Duration::from_secs(60), "both ranks at the watcher", |lines| lines.iter().any(|l| matches!(l, WatchLine::Coll { ranks: 2, .. })));
    for player in players {
        let said = player.said.as_ref().expect("telling");
        let lines: Vec<String> = std::iter::from_fn(|| said.recv_timeout(Duration::from_secs(5)).ok()).take_while(|l| !l.contains("streaming to efatop watch")).collect();
        assert!(lines.iter().any(|l| l.contains("held by user 65534")), "refused by who holds it: {lines:?}");
        assert!(!lines.iter().any(|l| l.contains("did not prove the token")), "no handshake with another user's socket: {lines:?}");
        player.finish(Duration::from_secs(60));
    }
    let _ = squatter.kill();
    let _ = squatter.wait();
}

#[test]
fn a_missing_refusing_or_stalled_watcher_never_holds_up_the_job() {
    let trace = "synthetic-full-r0.trace";
    // No one listens.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = closed.local_addr().expect("addr").to_string();
    drop(closed);
    // A listener that accepts and never says a word.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent_address = silent.local_addr().expect("addr").to_string();
    // A watcher with another token refuses the plugin's proof.
    let mut refusing = Watcher::start(&[], "another-token-entirely-0123456789");
    let cases = [("missing", address), ("stalled", silent_address), ("refusing", refusing.address.clone())];
    for (what, address) in cases {
        let player = Player::start(trace, 6, "node-a", "0", &[("EFATOP_WATCH", address.as_str())]);
        let (longest, ran) = player.finish(Duration::from_secs(30));
        assert!(longest < 50_000, "{what} watcher: a hot-path call took {longest} µs");
        // The trace plays in about 1 s, then the player lingers 0.8 s: the watcher adds nothing.
        assert!(ran < Duration::from_secs(8), "{what} watcher: the job took {ran:?}");
    }
    refusing.until(Duration::from_secs(10), "the refusal counted", |lines| lines.iter().any(|l| matches!(l, WatchLine::Health { refused, .. } if *refused >= 1)));
    assert!(!refusing.seen.iter().any(|l| matches!(l, WatchLine::Rank { .. })), "a refused plugin is never shown");
    drop(silent);
}

/// The plugin's threads (its fold, its sender to the watcher) run at the lowest priority and the job's at
/// its own: on a CPU NCCL's threads want, a drain of the plugin's never takes their turn.
#[test]
fn the_plugins_threads_run_at_the_lowest_priority_and_the_jobs_at_its_own() {
    let watcher = Watcher::start(&[], TEST_TOKEN);
    let player = Player::start("synthetic-full-r0.trace", 6, "node-a", "0", &[("EFATOP_WATCH", watcher.address.as_str())]);
    let (_, _, threads) = player.finish_with_threads(Duration::from_secs(30));
    let nice = |name: &str| threads.iter().find(|(n, _)| n == name).map(|(_, nice)| *nice);
    // The test's own nice value, which the player took: what the job's threads run at.
    let ours = efatop_runtime::affinity::nice().expect("this thread's nice value");
    assert_eq!(nice("self"), Some(Some(ours)), "the job's thread keeps its priority: {threads:?}");
    // The kernel keeps 15 bytes of a thread's name: efatop-nccl-send is efatop-nccl-sen.
    for name in ["efatop-nccl", "efatop-nccl-sen"] {
        assert_eq!(nice(name), Some(Some(19)), "{name} at the lowest priority: {threads:?}");
    }
    assert!(threads.iter().filter(|(n, _)| n.starts_with("efatop-nccl")).all(|(_, nice)| *nice == Some(19)), "{threads:?}");
}

#[test]
fn without_a_watcher_the_plugin_writes_a_file_watch_reads_and_a_trace_that_plays_back() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("rank0.efanccl");
    let traced = dir.path().join("rank0.trace");
    let player = Player::start(
        "synthetic-full-r0.trace",
        5,
        "node-a",
        "0",
        &[("EFATOP_PROFILER_FILE", file.to_str().expect("utf-8")), ("EFATOP_PROFILER_TRACE", traced.to_str().expect("utf-8")), ("EFATOP_NCCL_VERSION", "2.28.3")],
    );
    player.finish(Duration::from_secs(30));
    let cwd = scratch();
    let out = efatop_in(cwd.path()).args(["watch", "--json", "--from"]).arg(&file).output().expect("watch --from");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<WatchLine> = String::from_utf8_lossy(&out.stdout).lines().map(watch_line).collect();
    assert!(matches!(coll(&lines, Func::AllReduce, GIB), Some(WatchLine::Coll { ops: 6, busbw_gbps: Some(_), .. })), "{lines:#?}");
    assert!(lines.iter().any(|l| matches!(l, WatchLine::Rank { nccl_version: Some(v), abi: 5, .. } if v == "2.28.3")));
    // The trace the plugin wrote: its header names NCCL and the ABI; it holds every record it took.
    let text = std::fs::read_to_string(&traced).expect("trace written");
    let written = trace::parse(&text).expect("a trace");
    assert_eq!((written.nccl_version.as_deref(), written.abi), (Some("2.28.3"), Some(5)));
    let source = trace::parse(&std::fs::read_to_string(fixture("synthetic-full-r0.trace")).expect("fixture")).expect("fixture");
    let count = |t: &trace::Trace| t.lines.iter().filter(|l| matches!(l, Line::Record(_))).count();
    assert_eq!(count(&written), count(&source));
    // A crafted file is refused by name, not trusted.
    let bad = dir.path().join("bad.efanccl");
    std::fs::write(&bad, b"efatop-nccl 1\n\xff\xff\xff\x7f").expect("write");
    let out = efatop_in(cwd.path()).args(["watch", "--json", "--from"]).arg(&bad).output().expect("watch --from");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn watch_record_refuses_a_file_it_cannot_write_before_it_listens() {
    let dir = tempfile::tempdir().expect("dir");
    let missing = dir.path().join("no-such-dir/watch.efawatch");
    for (target, what) in [(missing.as_path(), "there is no directory"), (dir.path(), "is a directory")] {
        let out = efatop_in(dir.path()).args(["watch", "--listen", "127.0.0.1:0", "--record"]).arg(target).env("EFATOP_TOKEN", TEST_TOKEN).output().expect("efatop watch");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(err.contains("--record") && err.contains(what), "{err}");
        assert!(!err.contains("listening"), "refused before listening: {err}");
    }
    assert!(!missing.exists());
}

/// `efatop watch`'s view (`efatop_ui::watch`) drawn on ratatui's TestBackend, as text.
fn render(lines: &[WatchLine], width: u16, height: u16) -> String {
    let mut view = efatop_ui::watch::WatchView::new();
    for line in lines {
        view.push(line.clone());
    }
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(width, height)).expect("terminal");
    terminal.draw(|frame| efatop_ui::watch::draw(frame, &view)).expect("draw");
    let buffer = terminal.backend().buffer();
    buffer.content.chunks(usize::from(width)).map(|row| row.iter().map(|c| c.symbol()).collect::<String>().trim_end().to_string() + "\n").collect()
}

#[test]
fn the_watch_view_of_a_real_run_with_a_stall_and_no_efa_nic() {
    // Both real two-rank NCCL 2.28.3 recordings at once (two communicators on the H200's host "vm"): the
    // sweep's figures, rank 1's 8 s stall, and a host whose EFA counters (none: an empty node tree, as on
    // the GPU machine) stay flat while NCCL moves its bytes. scripts/fixtures/screenshots-watch sets
    // EFATOP_SCREENSHOT_DIR to write the screen as screenshots/watch-120x30.txt.
    let node = tempfile::tempdir().expect("an empty node tree");
    let root = node.path().to_str().expect("utf-8").to_string();
    let mut watch = Watcher::start(&["--hang-after", "2"], TEST_TOKEN);
    // The players' NCCL is this test: the version is the recording's.
    let env = [("EFATOP_WATCH", watch.address.as_str()), ("EFATOP_SYSFS_ROOT", root.as_str()), ("EFATOP_TEST_MAX_GAP_MS", "10000"), ("EFATOP_NCCL_VERSION", "2.28.3")];
    let players = [
        Player::start("nccl-2.28.3-two-rank-sweep-r0.trace", 5, "vm", "0", &env),
        Player::start("nccl-2.28.3-two-rank-sweep-r1.trace", 5, "vm", "0", &env),
        Player::start("nccl-2.28.3-two-rank-stall-r0.trace", 5, "vm", "0", &env),
        Player::start("nccl-2.28.3-two-rank-stall-r1.trace", 5, "vm", "0", &env),
    ];
    watch.until(Duration::from_secs(60), "the sweep's figures, the stall named and the fallback", |lines| {
        matches!(coll(lines, Func::AlltoAll, 2 * MIB), Some(WatchLine::Coll { ops: 4, ranks: 2, .. }))
            && lines.iter().any(|l| matches!(l, WatchLine::Hang { rank: 1, seq: 9, .. }))
            && lines.iter().any(|l| matches!(l, WatchLine::Nics { verdict: NicVerdict::Fallback, .. }))
    });
    let screen = render(&watch.seen, 120, 30);
    if let Some(dir) = std::env::var_os("EFATOP_SCREENSHOT_DIR") {
        std::fs::write(Path::new(&dir).join("watch-120x30.txt"), &screen).expect("write the screenshot");
    }
    for want in ["HANG rank 1 on vm", "FALLBACK", "alltoall", "allreduce", "2.28.3"] {
        assert!(screen.to_lowercase().contains(&want.to_lowercase()), "{want:?} on screen:\n{screen}");
    }
    for player in players {
        player.finish(Duration::from_secs(60));
    }
}

/// The v7 trace (scripts/gpu/make-synthetic-nccl-traces, variant v7-straggler, written from `profiler_v7.h`):
/// two ranks on one node, 12 symmetric-kernel allreduces of 64 MiB tagged 42, each kernel channel's three
/// phases; rank 1's kernels start 3 ms late, rank 0's initial sync waits those 3 ms for it.
const V7_COMM: &str = "07a9ed5ca1ab1e07";

#[test]
fn a_v7_trace_names_the_lagging_rank_on_its_host_and_gpu_and_keeps_its_user_tag_and_older_abis_still_find_it() {
    for abi in [7, 6, 5, 4] {
        let mut watch = Watcher::start(&["--window", "2", "--hang-after", "30"], TEST_TOKEN);
        let env = [("EFATOP_WATCH", watch.address.as_str())];
        let players = [Player::start("synthetic-v7-straggler-r0.trace", abi, "node-c", "0", &env), Player::start("synthetic-v7-straggler-r1.trace", abi, "node-c", "3", &env)];
        watch.until(Duration::from_mins(1), "the straggler named and both ranks' allreduces", |lines| {
            lines.iter().any(|l| matches!(l, WatchLine::Straggler { .. })) && matches!(coll(lines, Func::AllReduce, 64 * MIB), Some(WatchLine::Coll { ops: 12, ranks: 2, .. }))
        });
        let lines = watch.seen.clone();
        let straggler = lines.iter().find(|l| matches!(l, WatchLine::Straggler { .. })).expect("straggler");
        let WatchLine::Straggler { comm, func, rank, host, gpu, source, lag_us, last, of, its_wait_us, others_wait_us } = straggler else { unreachable!() };
        assert_eq!((comm.as_str(), *func, *rank, host.as_str(), gpu.as_deref()), (V7_COMM, Func::AllReduce, 1, "node-c", Some("3")), "v{abi}: {straggler:?}");
        assert!(*last >= 3 && last * 2 >= *of, "v{abi}: last in most calls matched: {straggler:?}");
        // Both sources give the trace's 3 ms: the GPU's timers, not the playback's pace.
        assert!((lag_us - 3000.0).abs() < 1e-6, "v{abi}: {straggler:?}");
        if abi == 7 {
            // Its own initial sync 20 µs, the others' 3.02 ms: their wait for it.
            assert_eq!((*source, *its_wait_us, *others_wait_us), (LagSource::KernelPhase, Some(20.0), Some(3020.0)), "v{abi}: {straggler:?}");
        } else {
            // NCCL's adapters drop v7's phases: the same rank from its kernels' starts, said as such.
            assert_eq!((*source, *its_wait_us, *others_wait_us), (LagSource::GpuStart, None, None), "v{abi}: {straggler:?}");
        }
        let Some(WatchLine::Coll { comm, user_tag, variant, time_us: Some(t), busbw_gbps: Some(busbw), wait_us, work_us, timing: Timing::Gpu, .. }) = coll(&lines, Func::AllReduce, 64 * MIB) else { panic!("v{abi}: {lines:#?}") };
        assert_eq!(comm, V7_COMM);
        // Rank 0's kernels took 5.03 ms, rank 1's 2.03 ms: the ranks' mean 3.53 ms.
        assert!((t - 3530.0).abs() < 1e-6 && close(*busbw, (64 * MIB) as f64 / 3.53e-3 / 1e9), "v{abi}: {t} µs, {busbw} GB/s");
        if abi == 7 {
            assert_eq!((*user_tag, variant.as_str()), (42, "AGxLLMC_R"), "v{abi}: the tag and the kernel variant kept in --json");
            // Waiting: rank 0's 3.02 + 0.01 ms, rank 1's 0.02 + 0.01 ms, their mean; working: 2 ms each.
            assert!(wait_us.is_some_and(|w| (w - 1530.0).abs() < 1e-6) && work_us.is_some_and(|w| (w - 2000.0).abs() < 1e-6), "v{abi}: {wait_us:?} {work_us:?}");
        } else {
            assert_eq!((*user_tag, variant.as_str(), *wait_us, *work_us), (0, "", None, None), "v{abi}: nothing v7's before v7");
        }
        for player in players {
            player.finish(Duration::from_mins(1));
        }
        assert!(!watch.seen.iter().any(|l| matches!(l, WatchLine::Hang { .. })), "v{abi}: a straggler is not a hang: {:#?}", watch.seen);
    }
}

/// `efatop watch --prometheus` scraped by a real Prometheus server while the plugin plays a hang (the
/// synthetic two-host allreduces, rank 1 never finishing #5, on fake p5 nodes whose NICs stay idle), the
/// v7 straggler and the real NCCL 2.28.3 two-rank sweep: busbw per communicator, collective and size under NCCL Inspector's names, bytes per host
/// and NIC, the straggler and the hang, read back through Prometheus's query API; and one scrape passes
/// `promtool check metrics` but for the base unit of Inspector's own name.
#[test]
fn a_real_prometheus_scrapes_watch_busbw_bytes_the_straggler_and_the_hang() {
    let Some(prometheus) = common::required("prometheus", "prometheus") else { return };
    let Some(promtool) = common::required("promtool", "prometheus") else { return };
    let node = fake_node();
    let sysfs = node.path().to_str().expect("utf-8").to_string();
    let endpoint = std::net::SocketAddr::from(([127, 0, 0, 1], common::free_port()));
    let mut watch = Watcher::start(&["--window", "2", "--hang-after", "2", "--prometheus", &endpoint.to_string()], TEST_TOKEN);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 250ms\n  scrape_timeout: 200ms\n  evaluation_interval: 250ms\n\
             scrape_configs:\n  - job_name: efatop-watch\n    static_configs:\n      - targets: ['{endpoint}']\n"
        ),
    )
    .expect("config");
    let (_server, web, logs) = common::prometheus::start(&prometheus, &config, dir.path());
    // Scraped before the job starts: every figure the job makes is seen by some scrape.
    wait_for("a scrape of the watcher", Duration::from_mins(1), &logs, || query(web, r#"up{job="efatop-watch"} == 1"#).first().cloned());

    let hold = [("EFATOP_WATCH", watch.address.as_str()), ("EFATOP_SYSFS_ROOT", sysfs.as_str()), ("EFATOP_TEST_HOLD_MS", "60000")];
    let env = [("EFATOP_WATCH", watch.address.as_str()), ("EFATOP_SYSFS_ROOT", sysfs.as_str())];
    let hung = [Player::start("synthetic-hang-r0.trace", 6, "node-a", "0", &hold), Player::start("synthetic-hang-r1.trace", 6, "node-b", "3", &hold)];
    let lagging = [Player::start("synthetic-v7-straggler-r0.trace", 7, "node-c", "0", &env), Player::start("synthetic-v7-straggler-r1.trace", 7, "node-c", "3", &env)];
    let real = [Player::start("nccl-2.28.3-two-rank-sweep-r0.trace", 5, "vm", "0", &env), Player::start("nccl-2.28.3-two-rank-sweep-r1.trace", 5, "vm", "0", &env)];
    watch.until(Duration::from_mins(1), "the hang and the straggler named", |lines| {
        lines.iter().any(|l| matches!(l, WatchLine::Hang { rank: 1, .. })) && lines.iter().any(|l| matches!(l, WatchLine::Straggler { .. }))
    });

    let one = |expression: &str| -> Option<f64> {
        let result = query(web, expression);
        (result.len() == 1).then(|| value(&result[0])).flatten()
    };
    let limit = Duration::from_mins(1);
    // busbw under Inspector's name and labels: the hung communicator's 1 GiB allreduce (20 ms on each rank's
    // GPU: 53.687 GB/s) and the v7 one's 64 MiB, tagged 42 (3.53 ms: 19.011 GB/s).
    let allreduce = r#"nccl_bus_bandwidth_gbs{comm="05ca1ab1e0ddba11",comm_name="synthetic",nranks="2",collective="AllReduce",message_size="1073741824",algo_proto="RING_SIMPLE",timing="proxy",user_tag="0"}"#;
    let busbw = wait_for("the 1 GiB allreduce's busbw", limit, &logs, || one(allreduce));
    assert!(close(busbw, GIB as f64 / 0.020 / 1e9), "{busbw}");
    // The real NCCL 2.28.3 two-rank run's 1 MiB allreduce, timed by the proxy as the two-rank test above
    // shows it: within 5 % of the driver's own 4652 µs, busbw = algbw on two ranks.
    let real_allreduce = r#"nccl_bus_bandwidth_gbs{comm="a1eb7e70c470be67",nranks="2",collective="AllReduce",message_size="1048576",timing="proxy"}"#;
    let busbw = wait_for("the real run's 1 MiB allreduce", limit, &logs, || one(real_allreduce));
    assert!((busbw / (MIB as f64 / 4652e-6 / 1e9) - 1.0).abs() < 0.05, "{busbw}");
    let tagged = format!(r#"nccl_bus_bandwidth_gbs{{comm="{V7_COMM}",collective="AllReduce",message_size="67108864",user_tag="42"}}"#);
    let busbw = wait_for("the tagged allreduce's busbw", limit, &logs, || one(&tagged));
    assert!(close(busbw, (64 * MIB) as f64 / 3.53e-3 / 1e9), "{busbw}");
    let time = wait_for("its time", limit, &logs, || one(&format!(r#"nccl_collective_exec_time_microseconds{{comm="{V7_COMM}",user_tag="42"}}"#)));
    assert!((time - 3530.0).abs() < 1e-6, "{time}");
    let calls = wait_for("its 12 calls", limit, &logs, || one(&format!(r#"efatop_nccl_calls_total{{comm="{V7_COMM}",user_tag="42"}} == 12"#)));
    assert!((calls - 12.0).abs() < f64::EPSILON);
    let wait = wait_for("its wait for peers", limit, &logs, || one(&format!(r#"efatop_nccl_wait_for_peers_seconds{{comm="{V7_COMM}",user_tag="42"}}"#)));
    assert!((wait - 1530e-6).abs() < 1e-9, "{wait}");
    // Bytes: each fake p5's 32 NICs, idle, against what NCCL moved on the host (1 GiB each way per call).
    let nics = wait_for("node-a's NICs", limit, &logs, || one(r#"count(efatop_nccl_nic_window_bytes{host="node-a"} == 0) == 32"#));
    assert!((nics - 32.0).abs() < f64::EPSILON);
    let moved = wait_for("NCCL's bytes on node-b", limit, &logs, || one(&format!(r#"max(max_over_time(efatop_nccl_host_window_bytes{{host="node-b"}}[10m])) >= {}"#, 2 * GIB)));
    assert!(moved >= (2 * GIB) as f64 && moved <= (12 * GIB) as f64, "{moved}: at most 6 allreduces' 2 GiB");
    // The straggler, named for one window: every sample Prometheus took of it.
    let lag = wait_for("the straggler", limit, &logs, || {
        one(&format!(r#"max_over_time(efatop_nccl_straggler_lag_seconds{{comm="{V7_COMM}",collective="AllReduce",rank="1",host="node-c",gpu="3",source="KernelPhase"}}[10m])"#))
    });
    assert!((lag - 3e-3).abs() < 1e-9, "{lag}");
    // The hang, open while the players hold: rank 1 on node-b's GPU 3 never finished allreduce #5.
    let waiting = wait_for("the hang", limit, &logs, || {
        one(r#"efatop_nccl_hang_waiting_seconds{comm="05ca1ab1e0ddba11",collective="AllReduce",seq="5",rank="1",host="node-b",gpu="3",why="NotFinished"}"#)
    });
    assert!((2.0..60.0).contains(&waiting), "{waiting}");
    assert!(wait_for("hangs open", limit, &logs, || one("efatop_nccl_hangs >= 1")) >= 1.0);

    // One scrape as a client that does not ask for OpenMetrics gets it (the classic text format), linted.
    let (status, text) = common::http_get(endpoint, "/metrics").expect("a scrape");
    assert_eq!(status, 200, "{text}");
    let (code, said) = common::prometheus::check_metrics(&promtool, &text);
    // Inspector's name keeps Inspector's unit (dashboards built on Inspector read it); promtool's lint says
    // so, and nothing else.
    println!("promtool check metrics ({code:?}): {said}");
    let problems: Vec<&str> = said.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(problems.iter().all(|l| l.starts_with("nccl_collective_exec_time_microseconds use base unit")), "promtool check metrics: {said}\n{text}");
    assert_eq!(code == Some(0), problems.is_empty(), "promtool check metrics: {said}");
    for family in ["nccl_bus_bandwidth_gbs", "efatop_nccl_calls_total", "efatop_nccl_nic_window_bytes", "efatop_nccl_hang_waiting_seconds", "efatop_nccl_hangs"] {
        assert!(text.lines().any(|l| l.starts_with(&format!("{family}{{")) || l.starts_with(&format!("{family} "))), "{family} in the scrape promtool read:\n{text}");
    }
    for mut player in hung.into_iter().chain(lagging).chain(real) {
        let _ = player.child.kill();
        let _ = player.child.wait();
    }
}

/// The GPU machine's cost step (`scripts/gpu/fleet-goals cost`, `torch-alltoall-check.py --cost-ab`) with two
/// stand-in ranks in place of the PyTorch job (`TORCH_CHECK_CHILD`; no GPU): each prints its blocks' `AB`
/// lines and then never ends, as a job that outlasts its limit. The step's limit ends it, and its log must
/// still hold every block printed (a device run of 360 s once kept none: the ranks' output was read only at
/// their end) and a table made from them, a block that only one rank finished left out.
#[test]
fn the_cost_step_keeps_every_block_a_time_limit_cuts_and_tables_them() {
    let dir = scratch();
    let bin = dir.path().join("bin");
    let out = dir.path().join("out");
    std::fs::create_dir_all(&bin).expect("bin");
    let rank = dir.path().join("stand-in-rank");
    // Blocks 0..6 of one collective from both ranks, the plugin on 1 % slower than off; block 6 from rank 1
    // only; then the job hangs.
    std::fs::write(
        &rank,
        "#!/bin/sh\nfor b in 0 1 2 3 4 5; do\n  if [ $(( (b + b / 2) % 2 )) = 0 ]; then arm=on us=4545.0; else arm=off us=4500.0; fi\n  \
         echo \"AB $TORCH_CHECK_RANK alltoall 16777216 $b $arm $us\"\ndone\n\
         [ \"$TORCH_CHECK_RANK\" = 1 ] && echo \"AB 1 alltoall 16777216 6 on 4545.0\"\nexec sleep 120\n",
    )
    .expect("stand-in");
    std::fs::set_permissions(&rank, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let started = std::time::Instant::now();
    let step = std::process::Command::new("scripts/gpu/fleet-goals")
        .arg("cost")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("BIN", &bin)
        .env("OUT", &out)
        .env("TORCH_CHECK_CHILD", &rank)
        .env("OPS", "alltoall")
        .env("SIZES_MIB", "16")
        .env("COST_BLOCKS", "100")
        // The stand-ins print within milliseconds of their start; 8 s leaves a loaded machine's Python room.
        .env("COST_TIMEOUT", "8")
        .output()
        .expect("fleet-goals");
    let said = String::from_utf8_lossy(&step.stdout);
    println!("fleet-goals cost, {:.1} s:\n{said}{}", started.elapsed().as_secs_f64(), String::from_utf8_lossy(&step.stderr));
    assert!(said.contains("cost: exit 124"), "the step's limit ended the job: {said}");
    let log = std::fs::read_to_string(out.join("cost.log")).expect("the step's log");
    let blocks = log.lines().filter(|l| l.starts_with("AB ")).count();
    assert_eq!(blocks, 13, "every block printed is in the log:\n{log}");
    assert!(log.contains("# cut short (exit 124)"), "{log}");
    let row = log.lines().find(|l| l.starts_with("alltoall ")).unwrap_or_else(|| panic!("no table row:\n{log}"));
    let fields: Vec<&str> = row.split_whitespace().collect();
    // coll, size, off us, on us, cost, band, width, pairs, median, its band, width
    assert_eq!((fields[1], fields[2], fields[3], fields[4]), ("16777216", "4500.0", "4545.0", "+1.00%"), "{row}");
    assert_eq!(fields[7], "3", "three whole pairs; block 6, which one rank alone finished, is left out: {row}");
    // The table is printed where the step's summary shows it, with its verdict on the goal (+1.00 %, a band
    // of no width: met, judged on the figures as printed).
    assert!(said.contains(row), "{said}");
    assert!(said.contains("# the goal (a cost of at most 1 %, its 95 % band under 1 % wide): alltoall 16777216 met"), "{said}");
    // A log whose send/recv costs +1.50 % and whose allreduce swings ±3 % from pair to pair: neither is met,
    // each for its own reason.
    let planted = dir.path().join("planted.log");
    let mut text = String::new();
    for b in 0..8u32 {
        let arm = ["on", "off"][((b + b / 2) % 2) as usize];
        for rank in 0..2 {
            let sendrecv = if arm == "on" { 8120.0 } else { 8000.0 };
            let swing = if (b / 2) % 2 == 0 { 1.03 } else { 0.97 };
            let allreduce = if arm == "on" { 9000.0 * swing } else { 9000.0 };
            text += &format!("AB {rank} sendrecv 16777216 {b} {arm} {sendrecv:.1}\nAB {rank} allreduce 16777216 {b} {arm} {allreduce:.1}\n");
        }
    }
    std::fs::write(&planted, text).expect("planted log");
    let table = ab_table(&planted);
    let goal = table.lines().find(|l| l.starts_with("# the goal")).unwrap_or_else(|| panic!("no verdict:\n{table}"));
    assert!(goal.contains("sendrecv 16777216 not met (cost +1.50 %)"), "{goal}");
    assert!(goal.contains("allreduce 16777216 not met (band ") && !goal.contains("allreduce 16777216 not met (cost"), "{goal}");
}

/// `torch-alltoall-check.py --ab-table LOG`'s output (the cost table and its verdict), the script having
/// succeeded.
fn ab_table(log: &Path) -> String {
    let out = std::process::Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gpu/torch-alltoall-check.py"))
        .arg("--ab-table")
        .arg(log)
        .output()
        .expect("--ab-table");
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "--ab-table {}: {}\n{table}", log.display(), String::from_utf8_lossy(&out.stderr));
    table
}

/// A real log of the GPU machine's cost step (tests/fixtures/torch-cost: an H100 under MPS, 2,000 pairs of
/// point-to-point blocks at 16 MiB, cut by its limit) tables again to the figures docs/watch.md gives, with the
/// verdict that the goal was not met.
#[test]
fn the_h100_runs_cost_log_tables_to_the_figures_the_docs_give() {
    let table = ab_table(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torch-cost/h100-mps-p2p-16mib-d9c9f4e.log.gz"));
    let row = |op: &str| -> Vec<String> {
        let line = table.lines().find(|l| l.starts_with(&format!("{op} "))).unwrap_or_else(|| panic!("no {op} row:\n{table}"));
        line.split_whitespace().map(str::to_string).collect()
    };
    // coll, size, off us, on us, cost, band, width, pairs, median, its band, width
    assert_eq!(row("alltoall")[2..], ["4326.8", "4372.6", "+1.16%", "+0.97..+1.34%", "0.37%", "2001", "+1.14%", "+1.01..+1.26%", "0.25%"], "{table}");
    assert_eq!(row("sendrecv")[2..], ["8603.6", "8701.3", "+1.16%", "+1.01..+1.31%", "0.30%", "2000", "+1.11%", "+1.00..+1.23%", "0.23%"], "{table}");
    assert!(table.contains("alltoall 16777216 not met (cost +1.16 %); sendrecv 16777216 not met (cost +1.16 %)"), "{table}");
}

/// `torch-alltoall-check.py --cost-ab`'s ranks themselves (a stand-in `torch` package and the plugin's switches
/// doing nothing: tests/fixtures/torch-stand-in): the job goes round every collective a pair of blocks at a
/// time, the arms alternating on-off, off-on, so that a job cut short holds as many pairs of each; and the table
/// counts each collective's pairs.
#[test]
fn the_cost_ab_goes_round_every_collective_a_pair_at_a_time() {
    let dir = scratch();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torch-stand-in");
    let switches = dir.path().join("switches.so");
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&switches)
        .arg(fixture.join("profiler_switches.c"))
        .status()
        .expect("cc");
    assert!(built.success(), "cc: {built}");
    // Bounded: a job that hung would otherwise hold the suite up.
    let calls = dir.path().join("calls");
    let job = std::process::Command::new("timeout")
        .args(["-k", "5", "120", "python3"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gpu/torch-alltoall-check.py"))
        .args(["--cost-ab", "8"])
        .arg(&switches)
        .arg(dir.path().join("out"))
        .current_dir(dir.path())
        .env("PYTHONPATH", &fixture)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("OPS", "alltoall,sendrecv,allreduce")
        .env("SIZES_MIB", "16")
        .env("ITERS", "2")
        .env("TORCH_STAND_IN_CALLS", &calls)
        .output()
        .expect("python3");
    let said = String::from_utf8_lossy(&job.stdout);
    assert!(job.status.success(), "{}\n{said}{}", job.status, String::from_utf8_lossy(&job.stderr));
    // Rank 0's blocks in the order it ran them: (collective, block, arm).
    let ran: Vec<(String, u32, String)> = said
        .lines()
        .filter_map(|l| l.strip_prefix("AB 0 "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_string(), f[2].parse().expect("block"), f[3].to_string())
        })
        .collect();
    let expected: Vec<(String, u32, String)> = (0..8u32)
        .step_by(2)
        .flat_map(|pair| {
            ["alltoall", "sendrecv", "allreduce"].into_iter().flat_map(move |op| {
                [pair, pair + 1].map(|b| (op.to_string(), b, ["on", "off"][((b + b / 2) % 2) as usize].to_string()))
            })
        })
        .collect();
    assert_eq!(ran, expected, "{said}");
    assert_eq!(said.lines().filter(|l| l.starts_with("AB 1 ")).count(), 24, "{said}");
    // Each rank's versions, printed once, as it began (a job its limit cuts still names what it ran on).
    for rank in ["0", "1"] {
        let named: Vec<usize> = said.lines().enumerate().filter(|(_, l)| l.starts_with(&format!("NCCL {rank} torch=stand-in nccl=(0, 0, 0)"))).map(|(i, _)| i).collect();
        let first_block = said.lines().position(|l| l.starts_with(&format!("AB {rank} "))).expect("a block");
        assert!(named.len() == 1 && named[0] < first_block, "rank {rank}: {named:?}, its first block at line {first_block}:\n{said}");
    }
    for op in ["alltoall", "sendrecv", "allreduce"] {
        let row = said.lines().find(|l| l.starts_with(&format!("{op} "))).unwrap_or_else(|| panic!("no {op} row:\n{said}"));
        assert_eq!(row.split_whitespace().nth(7), Some("4"), "four pairs of {op}: {row}");
    }
    // Each block called its own collective: per collective one call to connect, two warm-ups, 8 blocks of 2.
    for rank in ["0", "1"] {
        let log = std::fs::read_to_string(format!("{}.{rank}", calls.display())).expect("the stand-in's calls");
        for function in ["all_to_all_single", "batch_isend_irecv", "all_reduce"] {
            assert_eq!(log.lines().filter(|l| *l == function).count(), 19, "rank {rank}'s {function} calls:\n{log}");
        }
        assert_eq!(log.lines().count(), 57, "no other collective: {log}");
    }
}
