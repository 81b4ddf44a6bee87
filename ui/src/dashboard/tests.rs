//! Snapshots of the dashboard on a fake terminal, and checks that styles carry what the text cannot
//! (red drops, a lost peer, log levels) and that no size or state makes drawing panic.

use std::time::Duration;

use insta::assert_snapshot;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier};
use ratatui::Terminal;

use super::sample::{sample_state, sample_view};
use super::{draw, draw_panel, header};
use efatop_proto::events::RunInfo;
use crate::state::{ChannelView, DashboardState, LogLevel, Panel, PeerState, PeerView};
use crate::view::View;

fn terminal(width: u16, height: u16) -> Terminal<TestBackend> {
    Terminal::new(TestBackend::new(width, height)).unwrap()
}

fn dashboard(state: &DashboardState, view: &View, width: u16, height: u16) -> Terminal<TestBackend> {
    let mut terminal = terminal(width, height);
    terminal.draw(|frame| draw(frame, state, view)).unwrap();
    terminal
}

fn panel(state: &DashboardState, view: &View, panel: Panel, width: u16, height: u16) -> Terminal<TestBackend> {
    let mut terminal = terminal(width, height);
    terminal.draw(|frame| draw_panel(frame, frame.area(), state, view, panel)).unwrap();
    terminal
}

fn finished_state() -> DashboardState {
    let mut state = sample_state();
    state.finished = true;
    state.progress.config = None;
    state.progress.size = None;
    state.progress.eta = Some(Duration::ZERO);
    state.push_log(Duration::from_secs(90), LogLevel::Error, "run failed: rank 3 lost during MultiPin 2M");
    state
}

/// Where `needle` first appears on screen, as (column, row).
fn find(buffer: &Buffer, needle: &str) -> Option<(u16, u16)> {
    let area = buffer.area;
    (area.top()..area.bottom()).find_map(|y| {
        let row: Vec<&str> = (area.left()..area.right()).map(|x| buffer[(x, y)].symbol()).collect();
        let line = row.concat();
        let byte = line.find(needle)?;
        let column = line[..byte].chars().count();
        Some((area.left() + u16::try_from(column).unwrap(), y))
    })
}

fn fg_at(buffer: &Buffer, needle: &str) -> Color {
    let (x, y) = find(buffer, needle).unwrap_or_else(|| panic!("{needle:?} not on screen:\n{buffer:?}"));
    buffer[(x, y)].fg
}

#[test]
fn whole_dashboard_80x24() {
    assert_snapshot!("dashboard_80x24", dashboard(&sample_state(), &sample_view(), 80, 24).backend());
}

#[test]
fn whole_dashboard_200x60() {
    assert_snapshot!("dashboard_200x60", dashboard(&sample_state(), &sample_view(), 200, 60).backend());
}

#[test]
fn whole_dashboard_120x40() {
    assert_snapshot!("dashboard_120x40", dashboard(&sample_state(), &sample_view(), 120, 40).backend());
}

#[test]
fn each_panel_alone() {
    let state = sample_state();
    for (name, which) in [("gauges", Panel::Gauges), ("peers", Panel::Peers), ("results", Panel::Results), ("log", Panel::Log)] {
        for (width, height) in [(80, 24), (200, 60)] {
            assert_snapshot!(format!("panel_{name}_{width}x{height}"), panel(&state, &sample_view(), which, width, height).backend());
        }
    }
}

#[test]
fn header_alone() {
    let state = sample_state();
    let view = View { frozen: true, ..sample_view() };
    for width in [40, 80, 200] {
        let mut terminal = terminal(width, header::HEIGHT);
        terminal.draw(|frame| header::render(&state, &view, frame.area(), frame.buffer_mut())).unwrap();
        assert_snapshot!(format!("header_frozen_{width}"), terminal.backend());
    }
}

#[test]
fn help_overlay() {
    let view = View { show_help: true, ..sample_view() };
    assert_snapshot!("help_80x24", dashboard(&sample_state(), &view, 80, 24).backend());
}

#[test]
fn finished_run() {
    let state = finished_state();
    assert_snapshot!("finished_80x24", dashboard(&state, &sample_view(), 80, 24).backend());
    assert_snapshot!("finished_200x60", dashboard(&state, &sample_view(), 200, 60).backend());
}

#[test]
fn empty_state() {
    let state = DashboardState::default();
    let view = View::of(&state);
    assert_snapshot!("empty_80x24", dashboard(&state, &view, 80, 24).backend());
    assert_snapshot!("empty_200x60", dashboard(&state, &view, 200, 60).backend());
}

#[test]
fn unknown_link_speed_scales_to_the_peak_and_says_so() {
    let mut state = sample_state();
    state.run.link_gbps = None;
    if let Some(results) = &mut state.results {
        for measurement in &mut results.measurements {
            measurement.busbw_percent = None;
        }
    }
    let terminal = dashboard(&state, &sample_view(), 120, 40);
    assert_snapshot!("unknown_link_120x40", terminal.backend());
    let buffer = terminal.backend().buffer();
    assert!(find(buffer, "link speed unknown").is_some());
    assert!(find(buffer, "peak 93.0 Gbps").is_some(), "{buffer:?}");
}

#[test]
fn many_channels_scroll_to_keep_the_selection_visible() {
    let view = View { selected_rank: 3, selected_channel: 3, ..sample_view() };
    let terminal = dashboard(&sample_state(), &view, 80, 24);
    let buffer = terminal.backend().buffer();
    let (_, row) = find(buffer, "▶ r3 c3").expect("selected channel on screen");
    assert!(find(buffer, "r0 c0").is_none(), "scrolled past the first rank");
    assert!(row < 24);
}

#[test]
fn telemetry_drops_lost_peers_and_log_levels_are_coloured() {
    let mut state = sample_state();
    let view = View { focus: Panel::Peers, ..sample_view() };
    let terminal = dashboard(&state, &view, 200, 60);
    let buffer = terminal.backend().buffer();
    assert_eq!(fg_at(buffer, "drops 17"), Color::Red);
    assert_eq!(fg_at(buffer, "LOST"), Color::Red);
    assert_eq!(fg_at(buffer, "WARN"), Color::Yellow);
    assert_eq!(fg_at(buffer, "ERROR"), Color::Red);
    assert_eq!(fg_at(buffer, "info"), Color::Reset);

    state.drops_total = 0;
    let terminal = dashboard(&state, &view, 200, 60);
    assert_eq!(fg_at(terminal.backend().buffer(), "drops 0"), Color::Reset);
}

#[test]
fn done_peers_are_dim() {
    let mut state = sample_state();
    state.peers[2].state = PeerState::Done;
    let terminal = panel(&state, &sample_view(), Panel::Peers, 80, 10);
    let buffer = terminal.backend().buffer();
    let (x, y) = find(buffer, "done").unwrap();
    assert!(buffer[(x, y)].modifier.contains(Modifier::DIM));
}

#[test]
fn the_focused_panel_has_a_thick_cyan_border() {
    for focus in Panel::ORDER {
        let view = View { focus, ..sample_view() };
        let terminal = dashboard(&sample_state(), &view, 200, 60);
        let buffer = terminal.backend().buffer();
        let title = match focus {
            Panel::Gauges => " Live channels ",
            Panel::Peers => " Peers ",
            Panel::Results => " Results ",
            Panel::Log => " Log ",
            Panel::Pairs => " Pairs ",
        };
        let (x, y) = find(buffer, title).unwrap();
        assert_eq!(buffer[(x - 1, y)].symbol(), "┏", "{focus:?}");
        assert_eq!(buffer[(x - 1, y)].fg, Color::Cyan, "{focus:?}");
        assert_eq!(buffer.content.iter().filter(|cell| cell.symbol() == "┏").count(), 1, "{focus:?}");
    }
}

#[test]
fn frozen_shows_in_the_header() {
    let (state, view) = (sample_state(), View { frozen: true, ..sample_view() });
    for (width, height) in [(80, 24), (200, 60)] {
        assert!(find(dashboard(&state, &view, width, height).backend().buffer(), "FROZEN").is_some(), "{width}x{height}");
    }
}

#[test]
fn the_finished_line_asks_for_any_key_at_every_width() {
    for width in [30, 80, 200] {
        let terminal = dashboard(&finished_state(), &sample_view(), width, 24);
        let buffer = terminal.backend().buffer();
        assert!(find(buffer, "ress any key").is_some(), "{width}:\n{buffer:?}");
    }
}

#[test]
fn results_show_dashes_where_nothing_was_measured() {
    let terminal = panel(&sample_state(), &sample_view(), Panel::Results, 200, 12);
    let buffer = terminal.backend().buffer();
    let (_, row) = find(buffer, "  8M").unwrap();
    let line: String = (0..200).map(|x| buffer[(x, row)].symbol()).collect();
    let cells: Vec<&str> = line.split_whitespace().collect();
    // 8M, its count, five SinglePin numbers, then five MultiPin cells never measured.
    assert_eq!(&cells[cells.len() - 6..cells.len() - 1], ["-", "-", "-", "-", "-"], "{line}");
}

/// Ranks beyond the host list, NaN rates and huge numbers (and, in [`odd_view`], a selection that
/// matches nothing).
fn odd_state() -> DashboardState {
    let channel = |rank, channel| ChannelView {
        rank,
        channel,
        nic: "a-very-long-nic-name-that-keeps-going".into(),
        gbps: if channel == 1 { f64::NAN } else { 1e9 },
        ops_per_s: f64::INFINITY,
        in_flight: u64::MAX,
        history: [f64::NAN, -1.0, 1e300].into_iter().collect(),
        ..ChannelView::default()
    };
    let mut state = DashboardState {
        run: RunInfo { ranks: 9, hosts: vec!["only-host".into()], channels: 2, ..RunInfo::default() },
        channels: vec![channel(0, 0), channel(7, 0), channel(7, 1), channel(8, 0)],
        peers: vec![PeerView { rank: 8, host: String::new(), drops: u64::MAX, ..PeerView::default() }],
        drops_total: u64::MAX,
        ..DashboardState::default()
    };
    state.progress.done = 5;
    state.progress.total = 2;
    state.push_log(Duration::MAX, LogLevel::Error, "x".repeat(1000));
    state
}

/// A selection that matches nothing, frozen, with the help open.
fn odd_view() -> View {
    View { selected_rank: 42, selected_channel: 9, frozen: true, show_help: true, ..View::default() }
}

#[test]
fn ranks_beyond_the_host_list_are_grouped_as_unknown() {
    let view = View { show_help: false, ..odd_view() };
    let terminal = dashboard(&odd_state(), &view, 120, 40);
    assert_snapshot!("odd_state_120x40", terminal.backend());
    assert!(find(terminal.backend().buffer(), "unknown host").is_some());
}

#[test]
fn drawing_does_not_panic_at_any_size_in_any_state() {
    let mut states = vec![
        (DashboardState::default(), View::default()),
        (sample_state(), sample_view()),
        (finished_state(), sample_view()),
        (odd_state(), odd_view()),
    ];
    states.push((sample_state(), View { show_help: true, ..sample_view() }));
    for (state, view) in &states {
        for width in 0..20 {
            for height in 0..10 {
                dashboard(state, view, width, height);
                for which in Panel::ORDER {
                    panel(state, view, which, width, height);
                }
            }
        }
        let sizes = [(1, 1), (10, 3), (80, 0), (0, 24), (80, 24), (149, 29), (150, 30), (200, 60), (400, 120)];
        for (width, height) in sizes.into_iter().chain([(u16::MAX, 4), (4, 2000)]) {
            dashboard(state, view, width, height);
        }
    }
}

#[test]
fn a_panel_drawn_partly_off_screen_is_clipped() {
    let mut terminal = terminal(20, 5);
    terminal.draw(|frame| draw_panel(frame, Rect::new(10, 2, 50, 50), &sample_state(), &sample_view(), Panel::Results)).unwrap();
}

#[test]
fn a_resized_terminal_redraws_like_a_fresh_one() {
    let (state, view) = (sample_state(), sample_view());
    let mut terminal = dashboard(&state, &view, 200, 60);
    terminal.backend_mut().resize(80, 24);
    terminal.resize(Rect::new(0, 0, 80, 24)).unwrap();
    terminal.draw(|frame| draw(frame, &state, &view)).unwrap();
    assert_eq!(terminal.backend().buffer(), dashboard(&state, &view, 80, 24).backend().buffer());
}

// ---- All-to-all: the pair heatmap ----

use super::sample::{alltoall_sample_state, alltoall_sample_view};

/// Four hosts of one rank each, host 2 slow.
fn alltoall_4() -> (DashboardState, View) {
    (alltoall_sample_state(4, 1, 2), alltoall_sample_view(1, 2))
}

/// Sixteen hosts of four ranks each, host 5 (ranks 20-23) slow.
fn alltoall_64() -> (DashboardState, View) {
    (alltoall_sample_state(16, 4, 5), alltoall_sample_view(4, 5))
}

#[test]
fn alltoall_dashboard_snapshots() {
    for (name, (state, view)) in [("alltoall4", alltoall_4()), ("alltoall64", alltoall_64())] {
        for (width, height) in [(80, 24), (200, 60)] {
            assert_snapshot!(format!("{name}_{width}x{height}"), dashboard(&state, &view, width, height).backend());
        }
    }
}

#[test]
fn alltoall_heatmap_panel_snapshots() {
    for (name, (state, view)) in [("alltoall4", alltoall_4()), ("alltoall64", alltoall_64())] {
        for (width, height) in [(80, 24), (200, 60)] {
            assert_snapshot!(format!("panel_pairs_{name}_{width}x{height}"), panel(&state, &view, Panel::Pairs, width, height).backend());
        }
    }
}

/// Symbol, colour and modifiers of each heatmap cell on the row labelled `label`: `groups` cells of
/// `cell_width` columns, starting where the axis line's `to r `/`to h ` prefix ends.
fn heat_row(buffer: &Buffer, label: &str, groups: usize, cell_width: usize) -> Vec<(String, Color, Modifier)> {
    let (axis_x, _) = find(buffer, "to r ").or_else(|| find(buffer, "to h ")).expect("axis line on screen");
    let (_, y) = find(buffer, label).unwrap_or_else(|| panic!("{label:?} not on screen:\n{buffer:?}"));
    (0..groups)
        .map(|group| {
            let cell = &buffer[(axis_x + 5 + u16::try_from(group * cell_width).unwrap(), y)];
            (cell.symbol().to_string(), cell.fg, cell.modifier)
        })
        .collect()
}

fn is_slow(colour: Color) -> bool {
    matches!(colour, Color::Red | Color::LightRed)
}

#[test]
fn the_slow_hosts_row_and_column_are_drawn_slow_and_the_rest_fast() {
    let (state, view) = alltoall_64();
    for (width, height) in [(200, 60), (120, 40)] {
        let terminal = panel(&state, &view, Panel::Pairs, width, height);
        let buffer = terminal.backend().buffer();
        assert!(find(buffer, "Pairs by host").is_some(), "{buffer:?}");
        for host in 0..16 {
            let label = format!("h{host} p5-node-{host:02}");
            let row = heat_row(buffer, &label, 16, 2);
            for (column, (symbol, colour, _)) in row.iter().enumerate() {
                let slow_pair = host == 5 || column == 5;
                assert_eq!(is_slow(*colour), slow_pair, "{width}x{height} h{host}→h{column}: {symbol} {colour:?}");
                if !slow_pair {
                    assert_eq!(*colour, Color::Green, "h{host}→h{column}");
                }
            }
        }
        // The selected pair (r20 → r0) lies in cell h5 → h0, which is highlighted.
        assert!(heat_row(buffer, "h5 p5-node-05", 16, 2)[0].2.contains(Modifier::REVERSED));
        assert!(!heat_row(buffer, "h5 p5-node-05", 16, 2)[1].2.contains(Modifier::REVERSED));
        assert!(find(buffer, "r20→r0 0.29 Gbps  p50 79.9  p99 79.9 us · h5→h0 mean 0.29").is_some(), "{buffer:?}");
    }
}

#[test]
fn four_ranks_get_a_cell_each_with_a_blank_diagonal() {
    let (state, view) = alltoall_4();
    let terminal = panel(&state, &view, Panel::Pairs, 80, 24);
    let buffer = terminal.backend().buffer();
    assert!(find(buffer, "Pairs by").is_none(), "not aggregated:\n{buffer:?}");
    for rank in 0..4 {
        let marker = if rank == 2 { "▶" } else { " " };
        let row = heat_row(buffer, &format!("{marker} r{rank} "), 4, 2);
        for (column, (symbol, colour, _)) in row.iter().enumerate() {
            if column == rank {
                assert_eq!(symbol, " ", "r{rank} with itself");
            } else {
                assert_eq!(is_slow(*colour), rank == 2 || column == 2, "r{rank}→r{column}: {symbol} {colour:?}");
            }
        }
    }
}

#[test]
fn when_hosts_do_not_fit_ranks_are_grouped_in_blocks_of_whole_hosts() {
    let (state, view) = alltoall_64();
    let terminal = panel(&state, &view, Panel::Pairs, 80, 12);
    let buffer = terminal.backend().buffer();
    // 10 lines inside the box: the axis, the detail line and 8 rows, so 8 blocks of 2 hosts.
    assert!(find(buffer, "Pairs by block of 8 ranks, 2 hosts").is_some(), "{buffer:?}");
    // Block r16-23 holds the slow host and a fast one: half its pairs are slow, so its mean is below
    // the others' but not below half of the peak.
    let row = heat_row(buffer, "r0-7 ", 8, 2);
    assert_eq!(row.iter().map(|cell| cell.1).collect::<Vec<_>>()[..4], [Color::Green, Color::Green, Color::Yellow, Color::Green]);
    assert!(is_slow(heat_row(buffer, "r16-23", 8, 2)[2].1), "the slow host's pairs with itself and its neighbour");
    assert!(find(buffer, "r56-63").is_some());
}

#[test]
fn narrow_the_heatmap_gives_way_to_the_gauges_while_they_have_the_focus() {
    let (state, mut view) = alltoall_4();
    let buffer_has = |view: &View, text: &str| find(dashboard(&state, view, 80, 24).backend().buffer(), text).is_some();
    assert!(buffer_has(&view, " Pairs "));
    assert!(!buffer_has(&view, " Live channels "));
    view.focus = Panel::Gauges;
    assert!(!buffer_has(&view, " Pairs "));
    assert!(buffer_has(&view, " Live channels "));
    // Wide, both are on screen whatever has the focus.
    let wide = dashboard(&state, &view, 200, 60);
    assert!(find(wide.backend().buffer(), " Pairs ").is_some() && find(wide.backend().buffer(), " Live channels ").is_some());
}

#[test]
fn help_lists_the_heatmap_keys_only_for_alltoall_runs() {
    let (state, view) = alltoall_4();
    let terminal = dashboard(&state, &View { show_help: true, ..view }, 80, 24);
    assert!(find(terminal.backend().buffer(), "select the sender (row)").is_some());
    assert!(find(terminal.backend().buffer(), "select the receiver (column)").is_some());
    let write = View { show_help: true, ..sample_view() };
    assert!(find(dashboard(&sample_state(), &write, 80, 24).backend().buffer(), "select the sender").is_none());
}

#[test]
fn the_pairs_panel_of_a_run_without_a_matrix_says_so() {
    let terminal = panel(&sample_state(), &sample_view(), Panel::Pairs, 40, 5);
    assert!(find(terminal.backend().buffer(), "not an all-to-all run").is_some());
}

/// 4096 ranks: the matrix keeps blocks of 64 receivers; the heatmap groups further to fit.
fn alltoall_4096() -> (DashboardState, View) {
    use crate::state::PairMatrixView;
    use efatop_proto::telemetry::PeerSample;
    let ranks = 4096;
    let mut pairs = PairMatrixView::new(ranks);
    let peers: Vec<PeerSample> = (0..ranks as u32).map(|peer| PeerSample { peer, bytes: 1_000_000, ..PeerSample::default() }).collect();
    for sender in (0..ranks).step_by(97) {
        pairs.record(sender, 100_000_000, &peers);
    }
    let hosts = (0..ranks).map(|rank| format!("node{}", rank / 8)).collect();
    let state = DashboardState {
        run: RunInfo { experiment: efatop_proto::Experiment::Alltoall, ranks, hosts, ..RunInfo::default() },
        pairs: Some(pairs),
        ..DashboardState::default()
    };
    (state, View { focus: Panel::Pairs, selected_sender: 97 * 41, selected_receiver: 17, ..View::default() })
}

#[test]
fn a_4096_rank_run_draws_in_blocks() {
    let (state, view) = alltoall_4096();
    let terminal = panel(&state, &view, Panel::Pairs, 200, 60);
    let buffer = terminal.backend().buffer();
    assert!(find(buffer, "Pairs by block of").is_some(), "{buffer:?}");
    assert!(find(buffer, "r3977→r0-63 mean 0.08 Gbps").is_some(), "{buffer:?}");
}

#[test]
fn alltoall_states_draw_at_any_size_without_panicking() {
    for (state, view) in [alltoall_4(), alltoall_64(), alltoall_4096()] {
        for width in 0..24 {
            for height in 0..12 {
                dashboard(&state, &view, width, height);
                for &which in state.panel_order() {
                    panel(&state, &view, which, width, height);
                }
            }
        }
        for (width, height) in [(1, 1), (10, 3), (80, 24), (149, 29), (150, 30), (200, 60), (400, 120)] {
            dashboard(&state, &view, width, height);
            panel(&state, &view, Panel::Pairs, width, height);
        }
    }
    // Tiny areas draw what fits and nothing outside them.
    let (state, view) = alltoall_64();
    let terminal = panel(&state, &view, Panel::Pairs, 10, 3);
    assert!(find(terminal.backend().buffer(), "Pairs").is_some());
}

// ---- The GPU panel: the proxy's request queue and NVLink pairs ----

use super::sample::{nvlink_sample_state, proxy_sample_state};

/// The whole dashboard of each GPU state at the two sizes the dashboard promises.
#[test]
fn gpu_panel_snapshots() {
    let states = [
        ("proxy_queue", proxy_sample_state(), View::default()),
        ("nvlink_peak", nvlink_sample_state(Some(450.0)), sample_view()),
        ("nvlink_unknown_peak", nvlink_sample_state(None), sample_view()),
    ];
    for (name, state, view) in states {
        for (width, height) in [(80, 24), (200, 60)] {
            assert_snapshot!(format!("gpu_{name}_{width}x{height}"), dashboard(&state, &view, width, height).backend());
        }
    }
}

/// What the panel's title and rows say of each state, at the two sizes: never a bar against a peak
/// nobody knows, and a slow pair without a peak looks slow beside the fast ones.
#[test]
fn gpu_panel_says_what_its_bars_and_histories_are_drawn_against() {
    let title_row = |state: &DashboardState, view: &View, width| {
        let terminal = dashboard(state, view, width, 60);
        let buffer = terminal.backend().buffer().clone();
        let (_, y) = find(&buffer, " GPU ").unwrap_or_else(|| panic!("no GPU panel:\n{buffer:?}"));
        row_text(&buffer, y)
    };
    for width in [80, 200] {
        let known = title_row(&nvlink_sample_state(Some(450.0)), &sample_view(), width);
        assert!(known.contains("bars: NVLink peak ") && !known.contains("unknown"), "{known}");
        let unknown = title_row(&nvlink_sample_state(None), &sample_view(), width);
        assert!(!unknown.contains("bars:") && unknown.contains("NVLink peak unknown"), "{unknown}");
        assert!(unknown.contains("history top 371.2 GB/s"), "{unknown}");
        let queue = title_row(&proxy_sample_state(), &View::default(), width);
        assert!(queue.contains("bars: ring slots"), "{queue}");
    }
    let mut mixed = nvlink_sample_state(Some(450.0));
    mixed.nvlink[2].peak_gbytes_per_s = None;
    let title = title_row(&mixed, &sample_view(), 200);
    assert!(title.contains("bars: NVLink peak where known · no peak: history top 122.4 GB/s"), "{title}");

    // Rank 2's pair runs at a third of the others: its history sits low, theirs high.
    let terminal = dashboard(&nvlink_sample_state(None), &sample_view(), 200, 60);
    let buffer = terminal.backend().buffer();
    let history = |needle: &str| {
        let (_, y) = find(buffer, needle).unwrap_or_else(|| panic!("{needle:?} not on screen:\n{buffer:?}"));
        let row = row_text(buffer, y);
        let levels: Vec<usize> = row.chars().filter_map(|c| "▁▂▃▄▅▆▇█".chars().position(|level| level == c)).collect();
        assert!(!levels.is_empty(), "no history in {row}");
        levels.iter().max().copied().unwrap_or(0)
    };
    assert!(history("GPU2→GPU3") <= 3, "the slow pair reaches high");
    assert!(history("GPU0→GPU1") == 7, "the fastest pair does not reach the top");
}

/// Without queue or NVLink figures there is no GPU panel (the other snapshots pin that the layout is
/// as before); with more rows than lines, the rows start at the selected rank's.
#[test]
fn gpu_panel_only_when_figures_and_scrolled_to_the_selected_rank() {
    for (width, height) in [(80, 24), (200, 60)] {
        let terminal = dashboard(&sample_state(), &sample_view(), width, height);
        assert!(find(terminal.backend().buffer(), " GPU ").is_none());
    }
    let mut state = nvlink_sample_state(Some(450.0));
    state.nvlink = super::sample::nvlink_ring(16, Some(450.0));
    let mut view = View { selected_rank: 9, ..sample_view() };
    let terminal = dashboard(&state, &view, 80, 24);
    let buffer = terminal.backend().buffer();
    let (_, y) = find(buffer, " GPU ").unwrap_or_else(|| panic!("no GPU panel:\n{buffer:?}"));
    let title = row_text(buffer, y);
    assert!(title.contains("10-14 of 16 · bars: NVLink peak"), "{title}");
    assert!(row_text(buffer, y + 1).contains("r9 GPU9→GPU10"), "{buffer:?}");
    // Near the end the rows stop at the last one.
    view.selected_rank = 15;
    let terminal = dashboard(&state, &view, 80, 24);
    let buffer = terminal.backend().buffer();
    assert!(find(buffer, "12-16 of 16").is_some() && find(buffer, "r11 GPU11→GPU12").is_some(), "{buffer:?}");
    assert!(find(buffer, "r15 GPU15→GPU0").is_some(), "{buffer:?}");
}

#[test]
fn gpu_states_draw_at_any_size_without_panicking() {
    let mut many = nvlink_sample_state(None);
    many.nvlink = super::sample::nvlink_ring(64, None);
    many.queues = proxy_sample_state().queues;
    let mut odd = proxy_sample_state();
    odd.queues[0].capacity = 0;
    odd.queues[0].requests_per_s = f64::NAN;
    odd.nvlink = super::sample::nvlink_ring(2, Some(f64::INFINITY));
    odd.nvlink[0].gbytes_per_s = f64::INFINITY;
    odd.nvlink[1].history.clear();
    let states = [
        (proxy_sample_state(), View::default()),
        (nvlink_sample_state(Some(450.0)), sample_view()),
        (nvlink_sample_state(None), sample_view()),
        (many, sample_view()),
        (odd, View::default()),
    ];
    for (state, view) in states {
        for width in 0..40 {
            for height in 0..16 {
                dashboard(&state, &view, width, height);
            }
        }
        for (width, height) in [(1, 1), (10, 3), (80, 24), (149, 29), (150, 30), (200, 60), (400, 120)] {
            dashboard(&state, &view, width, height);
        }
    }
}

fn row_text(buffer: &Buffer, y: u16) -> String {
    (buffer.area.left()..buffer.area.right()).map(|x| buffer[(x, y)].symbol()).collect()
}

/// A finished p5.48xlarge run against its published figures: `% of exp` beside each rate, red with `*`
/// under 90%, `-` where no figure applies (MultiPin), and the type in the panel's legend.
#[test]
fn finished_run_against_the_expected_figures() {
    let mut state = finished_state();
    let results = state.results.as_mut().expect("results");
    results.metadata.instance_type = Some("p5.48xlarge".into());
    let slow = results.measurements.iter_mut().find(|m| m.config.to_string() == "SinglePin" && m.size == 8 << 20).expect("SinglePin 8M");
    slow.gbps = 60.0;
    let metadata = results.metadata.clone();
    for measurement in &mut results.measurements {
        efatop_report::reference::annotate(measurement, &metadata);
    }
    let wide = dashboard(&state, &sample_view(), 200, 60);
    assert_snapshot!("finished_expected_200x60", wide.backend());
    assert_snapshot!("finished_expected_80x24", dashboard(&state, &sample_view(), 80, 24).backend());
    let buffer = wide.backend().buffer();
    assert!(find(buffer, "% of p5.48xlarge expected (* under 90%)").is_some(), "{buffer:?}");
    assert_eq!(fg_at(buffer, "65.7*"), Color::Red);
    assert_eq!(fg_at(buffer, "100.0"), Color::Reset);
    // Runs without reference figures keep their table as it was.
    let plain = finished_state();
    assert!(find(dashboard(&plain, &sample_view(), 200, 60).backend().buffer(), "% of exp").is_none());
}
