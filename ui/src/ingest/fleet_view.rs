//! The fleet view of a 1024-host run, folded through the real ingestion and drawn: its first screens at
//! 200×60 and 80×24 (snapshots) and its keys. Here, under `ingest` as the gauges' index test is, so that
//! `dashboard` never imports `ingest`, even in tests.

use std::time::Duration;

use efatop_proto::column::{Column, Layout, Memory};
use efatop_proto::results::RankPlacement;
use efatop_proto::telemetry::{ChannelSample, RankSample};
use efatop_proto::{Experiment, RunResults};

use super::Ingest;
use crate::dashboard::sample::fleet_host;
use efatop_proto::liveness::Liveness;
use efatop_proto::events::RunInfo;
use crate::state::DashboardState;

/// Link speed of the synthetic NICs.
const LINK_GBPS: f64 = 100.0;

/// One NIC made slow in [`fleet_sample_state`]: `host`'s rank `rank` (counted within the host), its
/// channel `channel`, at `fraction` of its rate from `from` on.
#[derive(Clone, Copy, Debug)]
struct SlowNic {
    host: usize,
    rank: usize,
    channel: usize,
    from: Duration,
    fraction: f64,
}

/// A synthetic fleet, folded through the real ingestion: `hosts` × `ranks_per_host` ranks × `channels`
/// channels, a `write` run over EFA at 100 Gbps a NIC, every NIC near 95 Gbps (a few Gbps of
/// deterministic jitter), `seconds` of 10 Hz samples, and `slow` slowed from its time on.
fn fleet_sample_state(hosts: usize, ranks_per_host: usize, channels: usize, seconds: u64, slow: Option<SlowNic>) -> DashboardState {
    let ranks = hosts * ranks_per_host;
    let host_of: Vec<String> = (0..ranks).map(|rank| fleet_host(rank / ranks_per_host)).collect();
    let nics: Vec<Vec<String>> = vec![(0..channels).map(|c| format!("rdmap{}s0-rdm", 79 + c)).collect(); ranks];
    let run = RunInfo {
        experiment: Experiment::Write,
        provider_stack: "efa".into(),
        ranks,
        hosts: host_of.clone(),
        channels,
        link_gbps: Some(LINK_GBPS),
        memory: "cuda".into(),
        configs: vec![Column::write(Layout::Single, Memory::Host)],
        sizes: vec![8 << 20],
        placements: (0..ranks)
            .map(|rank| RankPlacement {
                rank,
                host: host_of[rank].clone(),
                gpu: Some(rank % ranks_per_host),
                nics: nics[rank].clone(),
                ..RankPlacement::default()
            })
            .collect(),
    };
    let mut state = DashboardState::default();
    let mut ingest = Ingest::begin(&mut state, run, &nics, RunResults::default());
    let mut liveness = Liveness::new(ranks, Duration::from_millis(100), Duration::from_mins(1));
    let interval_ns = 100_000_000_u64;
    for seq in 0..seconds * 10 {
        let at = Duration::from_millis(seq * 100 + 100);
        for rank in 0..ranks {
            let sample = RankSample {
                rank: rank as u32,
                seq,
                interval_ns,
                channels: (0..channels)
                    .map(|channel| {
                        let jitter = ((rank * 7 + channel * 13 + seq as usize * 3) % 41) as f64 / 10.0;
                        let mut gbps = 93.0 + jitter;
                        if let Some(slow) = slow {
                            if rank == slow.host * ranks_per_host + slow.rank && channel == slow.channel && at >= slow.from {
                                gbps *= slow.fraction;
                            }
                        }
                        let bytes = (gbps * 1e9 / 8.0 * 0.1) as u64;
                        ChannelSample { channel: channel as u16, bytes, ops: bytes >> 23, in_flight: 8, ..ChannelSample::default() }
                    })
                    .collect(),
                ..RankSample::default()
            };
            ingest.sample(&mut state, &sample, at);
            liveness.heard(rank, at);
        }
        ingest.tick(&mut state, at, &liveness);
    }
    state
}

mod tests {
    use std::sync::OnceLock;
    use std::time::Duration;

    use insta::assert_snapshot;
    use ratatui::backend::TestBackend;
    use ratatui::buffer::Buffer;
    use ratatui::Terminal;

    use crate::dashboard::fleet::applies;
    use crate::dashboard::sample::{fleet_host, sample_state};
    use crate::dashboard::{draw, handle_key};
    use crate::state::{DashboardState, Key};
    use crate::view::View;

    use super::{fleet_sample_state, SlowNic};

    /// 1024 hosts × 8 ranks × 4 channels, 5 s at 10 Hz; host 700's rank 3 (rank 5603), channel 2, at
    /// 60 % of its rate (40 % below its rail) from 3 s on.
    fn fleet_1024() -> DashboardState {
        static STATE: OnceLock<DashboardState> = OnceLock::new();
        STATE
            .get_or_init(|| {
                let slow = SlowNic { host: 700, rank: 3, channel: 2, from: Duration::from_secs(3), fraction: 0.6 };
                fleet_sample_state(1024, 8, 4, 5, Some(slow))
            })
            .clone()
    }

    fn terminal(state: &DashboardState, view: &View, width: u16, height: u16) -> Terminal<TestBackend> {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal.draw(|frame| draw(frame, state, view)).unwrap();
        terminal
    }

    fn screen(state: &DashboardState, view: &View, width: u16, height: u16) -> Buffer {
        terminal(state, view, width, height).backend().buffer().clone()
    }

    fn lines(buffer: &Buffer) -> Vec<String> {
        let area = buffer.area;
        (area.top()..area.bottom()).map(|y| (area.left()..area.right()).map(|x| buffer[(x, y)].symbol()).collect()).collect()
    }

    fn first_row_with(buffer: &Buffer, needle: &str) -> Option<usize> {
        lines(buffer).iter().position(|line| line.contains(needle))
    }

    #[test]
    fn a_1024_host_run_shows_every_rail_the_worst_nic_and_hosts_worst_first_at_200x60() {
        let state = fleet_1024();
        let shown = terminal(&state, &View::of(&state), 200, 60);
        let buffer = shown.backend().buffer().clone();
        let text = lines(&buffer);
        for rail in 0..4 {
            assert!(text.iter().any(|line| line.contains(&format!("rail {rail}  "))), "rail {rail}:\n{}", text.join("\n"));
        }
        // The slow NIC: in the worst list within the first dozen lines, flagged, with its host, rank, GPU
        // and rail; its host heads the host list.
        let worst = first_row_with(&buffer, "p5-node-0700").expect("the slow host on screen");
        assert!(worst < 12, "row {worst}:\n{}", text.join("\n"));
        let line = &text[worst];
        assert!(line.contains("r5603") && line.contains("GPU 3") && line.contains("rail 2") && line.contains("BEHIND"), "{line}");
        let hosts = first_row_with(&buffer, "Hosts, worst NIC first").expect("hosts heading");
        assert!(text[hosts + 1].contains("▶ p5-node-0700"), "{}", text[hosts + 1]);
        assert!(!text.iter().any(|line| line.contains("of 33792")), "no scroll list of every gauge");
        assert_snapshot!("fleet_1024_200x60", shown.backend());
    }

    #[test]
    fn at_80x24_the_worst_nic_is_still_on_screen() {
        let state = fleet_1024();
        let shown = terminal(&state, &View::of(&state), 80, 24);
        let buffer = shown.backend().buffer().clone();
        let text = lines(&buffer);
        let row = first_row_with(&buffer, "p5-node-0700").unwrap_or_else(|| panic!("slow host missing:\n{}", text.join("\n")));
        assert!(text[row].contains("rail 2"), "{}", text[row]);
        assert_snapshot!("fleet_1024_80x24", shown.backend());
    }

    #[test]
    fn enter_drills_into_a_host_esc_comes_back_and_slash_finds_a_host() {
        let state = fleet_1024();
        let mut view = View::of(&state);
        // Enter on the worst host: its gauges, with its worst NIC selected.
        handle_key(&mut view, &state, Key::Enter);
        assert_eq!(view.fleet.drilled, Some(700));
        assert_eq!((view.selected_rank, view.selected_channel), (5603, 2));
        let buffer = screen(&state, &view, 200, 60);
        let text = lines(&buffer);
        assert!(first_row_with(&buffer, "Live channels of one host").is_some(), "{}", text.join("\n"));
        assert!(first_row_with(&buffer, "▶ r5603 c2").is_some(), "{}", text.join("\n"));
        assert!(!text.iter().any(|line| line.contains("r5608 ")), "only host 700's ranks");
        // Up and Down stay within the host.
        for _ in 0..10 {
            handle_key(&mut view, &state, Key::Down);
        }
        assert_eq!(view.selected_rank, 5607);
        assert_eq!(handle_key(&mut view, &state, Key::Esc), crate::state::Action::None, "Esc leaves the host, not the run");
        assert_eq!(view.fleet.drilled, None);

        // `/` and a name: the host is selected, and Enter keeps it.
        for key in [Key::Char('/'), Key::Char('0'), Key::Char('0'), Key::Char('4'), Key::Char('3')] {
            handle_key(&mut view, &state, key);
        }
        let found = state.fleet.find_host("0043");
        assert_eq!(found.map(|host| state.fleet.hosts()[host].name.clone()), Some(fleet_host(43)));
        assert_eq!(view.fleet.selected, found);
        let buffer = screen(&state, &view, 200, 60);
        assert!(first_row_with(&buffer, "find host: 0043").is_some());
        assert!(first_row_with(&buffer, &format!("▶ {}", fleet_host(43))).is_some(), "{}", lines(&buffer).join("\n"));
        handle_key(&mut view, &state, Key::Enter);
        assert_eq!(view.fleet.search, None);
        handle_key(&mut view, &state, Key::Down);
        let next = view.fleet.selected.and_then(|host| state.fleet.position_of(host));
        assert_eq!(next, found.and_then(|host| state.fleet.position_of(host)).map(|at| at + 1));
    }

    #[test]
    fn small_runs_keep_the_channel_gauges_and_no_size_panics() {
        let small = sample_state();
        assert!(!applies(&small));
        let state = fleet_1024();
        assert!(applies(&state));
        let view = View::of(&state);
        for (width, height) in [(1, 1), (20, 5), (40, 8), (80, 10), (120, 30), (300, 100)] {
            screen(&state, &view, width, height);
        }
    }
}
