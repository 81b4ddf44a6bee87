//! `sweep`: the rounds progressing, a rank × rail heatmap of each channel's latest figure (the slower
//! direction of its pair in the latest round it ran), and the verdict once judged. A channel slow with
//! every peer it met so far is a suspect and shows in red as soon as it is one; a latest figure below the
//! bar that the channel beat with another peer shows in yellow. The verdict goes first, so a short
//! terminal still shows it.

use std::fmt::Write as _;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use efatop_proto::sizes::format_size;
use efatop_proto::sweep::{RoundKind, Scope, Suspect};
use efatop_proto::words::plural;

use super::chrome::{self, Chrome};
use super::text::{cell, number, Align};
use crate::state::sweep::SweepView;
use crate::state::{DashboardState, Panel};
use crate::view::View;

/// Columns per rail cell.
const CELL: usize = 8;
/// Columns of the host label.
const HOST: usize = 20;
const NO_DATA: &str = "·";

/// Lines the panel would like inside its frame.
pub(super) fn content_height(state: &DashboardState) -> u16 {
    let Some(view) = &state.sweep else { return 1 };
    let verdict = view.record.verdict.as_ref().map_or(0, |v| 1 + v.suspects.len());
    u16::try_from(2 + verdict + view.latest.len()).unwrap_or(u16::MAX)
}

pub(super) fn render(state: &DashboardState, view: &View, area: Rect, buf: &mut Buffer, chrome: Chrome) {
    let block = chrome::block("Sweep", view.focus == Panel::Results, chrome);
    let inner = block.inner(area);
    block.render(area, buf);
    let Some(view) = &state.sweep else {
        Line::styled("waiting for the first round", Style::new().fg(Color::DarkGray)).render(inner, buf);
        return;
    };
    let lines = lines(view);
    for (line, y) in lines.into_iter().zip(inner.y..inner.bottom()) {
        line.render(Rect { y, height: 1, ..inner }, buf);
    }
}

/// Every line of the panel, top to bottom.
pub(crate) fn lines(view: &SweepView) -> Vec<Line<'static>> {
    let mut lines = vec![progress(view)];
    if let Some(verdict) = &view.record.verdict {
        let checked = verdict.checked.describe();
        if verdict.suspects.is_empty() {
            lines.push(Line::styled(format!("verdict: no suspects ({checked})"), Style::new().fg(Color::Green).add_modifier(Modifier::BOLD)));
        } else {
            let n = verdict.suspects.len();
            lines.push(Line::styled(
                format!("verdict: {n} suspect{} ({checked})", if n == 1 { "" } else { "s" }),
                Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            ));
            lines.extend(verdict.suspects.iter().map(|s| Line::styled(suspect_line(s), Style::new().fg(Color::Red))));
        }
    }
    let rail_names: Vec<String> = (0..view.rails)
        .map(|rail| view.record.nodes.first().and_then(|n| n.nics.get(rail)).map_or_else(|| format!("ch{rail}"), |n| n.name.clone()))
        .collect();
    let mut header = format!("{} {}", cell("rank", 5, Align::Left), cell("host", HOST, Align::Left));
    for name in &rail_names {
        header.push_str(&cell(name, CELL, Align::Right));
    }
    lines.push(Line::styled(header, Style::new().add_modifier(Modifier::BOLD)));
    for (rank, row) in view.latest.iter().enumerate() {
        let host = view.record.nodes.get(rank).map_or("", |n| n.host.as_str());
        let mut spans = vec![Span::raw(format!("{} {}", cell(&rank.to_string(), 5, Align::Left), cell(host, HOST, Align::Left)))];
        for (rail, value) in row.iter().enumerate() {
            let suspect = view.suspect.get(rank).and_then(|r| r.get(rail)).copied().unwrap_or(false);
            let low = view.latest_low.get(rank).and_then(|r| r.get(rail)).copied().unwrap_or(false);
            let (text, style) = match value {
                None => (NO_DATA.to_string(), Style::new().fg(Color::DarkGray)),
                Some(_) if suspect => (number(*value, 2), Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)),
                Some(_) if low => (number(*value, 2), Style::new().fg(Color::Yellow)),
                Some(_) => (number(*value, 2), Style::new().fg(Color::Green)),
            };
            spans.push(Span::styled(cell(&text, CELL, Align::Right), style));
        }
        lines.push(Line::from(spans));
    }
    lines
}

fn progress(view: &SweepView) -> Line<'static> {
    let (done, planned) = view.progress();
    let retests = view.record.rounds.iter().filter(|r| r.round.kind == RoundKind::Retest).count();
    let pairing = done - retests;
    let mut text = format!("round {pairing} of {planned}");
    if view.record.rounds.last().is_some_and(|r| r.round.kind == RoundKind::CrossRail) {
        text.push_str(" (cross-rail)");
    }
    if retests > 0 {
        let _ = write!(text, " + {}", plural(retests, "retest"));
    }
    let bar = (view.record.threshold * 100.0).round();
    let _ = write!(
        text,
        " · {} × {} · {} writes · bar {bar:.0}% of each rail's median (Gbps)",
        plural(view.latest.len(), "rank"),
        plural(view.rails, "rail"),
        format_size(view.record.size)
    );
    if let Some(link) = view.record.link_gbps {
        let _ = write!(text, " and of {link} Gbps");
    }
    Line::raw(text)
}

/// One suspect in a line: what, where, how slow, against whom.
pub fn suspect_line(s: &Suspect) -> String {
    let what = match s.scope {
        Scope::Nic => format!("NIC  rank {} {} {}", s.rank, s.host, s.nic.as_deref().unwrap_or("?")),
        Scope::Node => format!("NODE {} (rank {}, every NIC: {})", s.host, s.rank, s.nics.join(" ")),
        Scope::Link => format!(
            "LINK rank {} {} ↔ rank {} {}",
            s.rank,
            s.nic.as_deref().unwrap_or("?"),
            s.peer.map_or_else(|| "?".into(), |p| p.to_string()),
            s.peer_nic.as_deref().or(s.nic.as_deref()).unwrap_or("?")
        ),
    };
    let peers: Vec<String> = s.peers_tried.iter().map(ToString::to_string).collect();
    format!("  {what}: {:.2} Gbps vs median {:.2}, peers {}", s.measured_gbps, s.median_gbps, peers.join(","))
}

#[cfg(test)]
mod tests {
    use insta::assert_snapshot;
    use ratatui::backend::TestBackend;
    use ratatui::style::Color;
    use ratatui::Terminal;

    use efatop_proto::sweep::{Figure, NicFacts, NodeFacts, SweepResults, SweepRound};
    use efatop_sweep::plan::pairing_rounds;

    use super::super::draw;
    use crate::state::sweep::SweepView;
    use efatop_proto::events::RunInfo;
    use crate::state::DashboardState;
    use crate::view::View;

    const RAILS: usize = 4;

    /// 4 nodes × 4 NICs at about 0.95 Gbps, node 2's efa1 at 0.24; `rounds` of the 3 played, the verdict
    /// once all are.
    fn state(rounds: usize) -> DashboardState {
        let nodes: Vec<NodeFacts> = (0..4)
            .map(|rank| NodeFacts {
                rank,
                host: format!("p5-{rank}:efatop-node{rank}"),
                gpu: None,
                gpu_pci: None,
                nics: (0..RAILS).map(|k| NicFacts { name: format!("efa{k}"), pci: None }).collect(),
            })
            .collect();
        let plan = pairing_rounds(4, false);
        let rate = |rank: usize, rail: usize| -> f64 { if (rank, rail) == (2, 1) { 0.24 } else { 0.95 - 0.01 * rail as f64 } };
        let record = SweepResults { size: 64 << 20, threshold: 0.9, nodes, ..SweepResults::default() };
        let mut view = SweepView::begin(record, RAILS);
        for round in plan.iter().take(rounds) {
            let figures = round
                .pairs
                .iter()
                .flat_map(|&(a, b)| {
                    (0..RAILS).flat_map(move |rail| {
                        let gbps = rate(a, rail).min(rate(b, rail));
                        [(a, b), (b, a)].map(|(from, to)| Figure { from, to, rail, gbps, steady_gbps: gbps, p50_us: 500.0, p99_us: 600.0, ..Figure::default() })
                    })
                })
                .collect();
            view.round(SweepRound { round: round.clone(), planned: plan.len(), figures });
        }
        if rounds == plan.len() {
            let verdict = efatop_sweep::verdict::judge_record(&view.record, RAILS).verdict;
            view.verdict(verdict);
        }
        let hosts: Vec<String> = view.record.nodes.iter().map(|n| n.host.clone()).collect();
        DashboardState {
            run: RunInfo {
                experiment: efatop_proto::Experiment::Sweep,
                provider_stack: "tcp;ofi_rxm".into(),
                ranks: 4,
                hosts,
                channels: RAILS,
                memory: "host".into(),
                configs: vec![efatop_proto::Column::Sweep { memory: efatop_proto::column::Memory::Host, emulated: false }],
                sizes: vec![64 << 20],
                ..RunInfo::default()
            },
            finished: rounds == plan.len(),
            sweep: Some(view),
            ..DashboardState::default()
        }
    }

    fn dashboard(state: &DashboardState, width: u16, height: u16) -> Terminal<TestBackend> {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
        terminal.draw(|frame| draw(frame, state, &View::of(state))).expect("draw");
        terminal
    }

    /// The colour of `needle` in the first line on screen that starts with `row` (after spaces).
    fn fg_of(terminal: &Terminal<TestBackend>, row: &str, needle: &str) -> Color {
        let buffer = terminal.backend().buffer();
        let area = buffer.area;
        for y in area.top()..area.bottom() {
            let line: String = (area.left()..area.right()).map(|x| buffer[(x, y)].symbol()).collect();
            if !line.trim_start().starts_with(row) {
                continue;
            }
            if let Some(byte) = line.find(needle) {
                let x = area.left() + u16::try_from(line[..byte].chars().count()).expect("column");
                return buffer[(x, y)].fg;
            }
        }
        panic!("{row:?} … {needle:?} not on screen:\n{buffer:?}");
    }

    #[test]
    fn rounds_progress_and_the_slow_nic_turns_red_once_slow_with_two_peers() {
        // One round: node 2's efa1 has met one peer, so it is not yet a suspect (it could be the link).
        let one = dashboard(&state(1), 120, 30);
        assert_snapshot!("sweep_round1_120x30", one.backend());
        assert_eq!(fg_of(&one, "2     p5-2", "0.24"), Color::Yellow);
        assert_eq!(fg_of(&one, "1     p5-1", "0.24"), Color::Yellow);
        assert_eq!(fg_of(&one, "0     p5-0", "0.95"), Color::Green);
        // Two rounds: slow with both peers it met, a suspect.
        let two = dashboard(&state(2), 120, 30);
        assert_snapshot!("sweep_round2_120x30", two.backend());
        assert_eq!(fg_of(&two, "2     p5-2", "0.24"), Color::Red);
        // Its peer in the latest round was slow with it only: yellow, not a suspect.
        assert_eq!(fg_of(&two, "0     p5-0", "0.24"), Color::Yellow);
    }

    #[test]
    fn the_final_view_has_the_verdict_first() {
        let done = dashboard(&state(3), 120, 30);
        assert_snapshot!("sweep_verdict_120x30", done.backend());
        assert_eq!(fg_of(&done, "verdict", "verdict: 1 suspect"), Color::Red);
        assert_eq!(fg_of(&done, "NIC  rank 2", "NIC"), Color::Red);
        assert_snapshot!("sweep_verdict_80x24", dashboard(&state(3), 80, 24).backend());
        // Tiny areas draw without panicking.
        for (w, h) in [(1, 1), (10, 3), (40, 5)] {
            dashboard(&state(3), w, h);
        }
    }
}
