//! The watch view's own cost at a fleet's scale, apart from the watcher's server and fold: a view that holds
//! HOSTS × 8 ranks, then TICKS ticks of what the fold sends a second at that scale (every host's NICs, every
//! rank's two peers, a few collectives), each folded in and drawn once on a test terminal: per tick the time
//! to push its lines, to make the view's lines and to draw them (ms, p50 and max).
//!
//! `cargo run --release -p efatop-ui --example bench_view [HOSTS] [TICKS]` (default 4096 and 10).

use std::time::Instant;

use efatop_proto::nccl::{Func, NicVerdict, NicWindow, Timing, WatchLine};
use ratatui::{backend::TestBackend, Terminal};

fn main() {
    let mut args = std::env::args().skip(1);
    let hosts: u32 = args.next().map_or(4096, |a| a.parse().expect("HOSTS: a number"));
    let ticks: usize = args.next().map_or(10, |a| a.parse().expect("TICKS: a number"));
    let world = hosts * 8;
    let comm = "9ecb155039b21ec3".to_string();
    let host = |h: u32| format!("p5-{h:04}");
    let mut view = efatop_ui::watch::WatchView::new();
    let started = Instant::now();
    for rank in 0..world {
        view.push(WatchLine::Rank {
            host: host(rank / 8),
            pid: 1000 + rank % 8,
            gpu: Some(format!("0000:{:02x}:00.0", rank % 8)),
            comm: comm.clone(),
            comm_name: None,
            rank,
            nranks: world,
            nnodes: hosts,
            nccl_version: Some("2.28.9".into()),
            abi: 5,
        });
    }
    println!("bench_view: {world} ranks on {hosts} hosts joined in {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
    let mut terminal = Terminal::new(TestBackend::new(200, 60)).expect("terminal");
    let (mut push, mut make, mut draw) = (Vec::new(), Vec::new(), Vec::new());
    for tick in 0..ticks as u64 {
        let mut lines = Vec::new();
        for h in 0..hosts {
            let nics = (0..32).map(|n| NicWindow { name: format!("rdmap{n}s0"), bytes: tick << 30, behind: false }).collect();
            lines.push(WatchLine::Nics { host: host(h), window_s: 5.0, nccl_bytes: tick << 35, nic_bytes: tick << 35, verdict: NicVerdict::Ok, nics });
        }
        for rank in 0..world {
            for peer in [(rank + 1) % world, (rank + world - 1) % world] {
                lines.push(WatchLine::Peer { comm: comm.clone(), host: host(rank / 8), rank, peer, sent: tick << 30, received: tick << 30, steps: tick * 100 });
            }
        }
        for size in [1u64 << 24, 1 << 26] {
            lines.push(WatchLine::Coll {
                comm: comm.clone(),
                func: Func::AllReduce,
                size,
                datatype: "ncclFloat32".into(),
                algo: "RING".into(),
                proto: "SIMPLE".into(),
                ranks: world,
                nranks: world,
                ops: tick * 10,
                timing: Timing::Proxy,
                time_us: Some(9000.0),
                algbw_gbps: Some(1.8),
                busbw_gbps: Some(3.6),
                user_tag: 0,
                variant: String::new(),
                wait_us: None,
                work_us: None,
            });
        }
        let n = lines.len();
        let t = Instant::now();
        for line in lines {
            view.push(line);
        }
        push.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let made = efatop_ui::watch::lines(&view);
        make.push(t.elapsed().as_secs_f64() * 1e3);
        drop(made);
        let t = Instant::now();
        terminal.draw(|frame| efatop_ui::watch::draw(frame, &view)).expect("draw");
        draw.push(t.elapsed().as_secs_f64() * 1e3);
        if tick == 0 {
            println!("bench_view: a tick is {n} lines");
        }
    }
    let stat = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        format!("p50 {:.1} max {:.1}", v[v.len() / 2], v[v.len() - 1])
    };
    println!("bench_view: push {} ms · lines {} ms · draw (lines again, then the frame) {} ms", stat(&mut push), stat(&mut make), stat(&mut draw));
}
