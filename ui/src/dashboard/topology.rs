//! The topology view (`t`): for every host of the run, its ranks with the GPU each took, the CPUs it is
//! pinned to, and the host's NICs with the ones that rank's channels use highlighted.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::chrome::{self, Chrome};
use super::text;
use crate::state::DashboardState;

pub(super) fn render(state: &DashboardState, area: Rect, buf: &mut Buffer, chrome: Chrome) {
    if area.is_empty() {
        return;
    }
    let block = chrome::block("Topology: where each rank runs (t closes)", true, chrome);
    let inner = block.inner(area);
    block.render(area, buf);
    if inner.is_empty() {
        return;
    }
    let lines = lines(state, usize::from(inner.width));
    for (line, row) in lines.into_iter().zip(inner.rows()) {
        line.render(row, buf);
    }
}

fn lines(state: &DashboardState, width: usize) -> Vec<Line<'static>> {
    let placements = &state.run.placements;
    if placements.is_empty() {
        return vec![Line::styled("no placement reported (no topology was readable)", Style::new().fg(Color::DarkGray))];
    }
    let mut hosts: Vec<&str> = Vec::new();
    for placement in placements {
        if !hosts.contains(&placement.host.as_str()) {
            hosts.push(&placement.host);
        }
    }
    let in_use = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
    let idle = Style::new().fg(Color::DarkGray);
    let mut out = Vec::new();
    for host in hosts {
        let ranks: Vec<_> = placements.iter().filter(|p| p.host == host).collect();
        // The host's NICs as the run knows them: every NIC any of its ranks uses, in first-use order.
        let mut nics: Vec<&str> = Vec::new();
        for placement in &ranks {
            for nic in &placement.nics {
                if !nics.contains(&nic.as_str()) {
                    nics.push(nic);
                }
            }
        }
        out.push(Line::styled(
            text::truncate(&format!("{host}: {} ranks, {} NICs in use", ranks.len(), nics.len()), width),
            Style::new().add_modifier(Modifier::BOLD),
        ));
        for placement in ranks {
            let gpu = match (placement.gpu, &placement.gpu_pci_bus_id) {
                (Some(gpu), Some(bus)) => format!("GPU {gpu} ({bus})"),
                (Some(gpu), None) => format!("GPU {gpu}"),
                (None, _) => "no GPU".to_string(),
            };
            let numa = placement.numa_node.map_or_else(String::new, |n| format!(" NUMA {n}"));
            let cpus = placement.pinned_cpus.as_deref().map_or_else(|| "not pinned".to_string(), |c| format!("CPUs {c}"));
            let mut spans = vec![Span::raw(format!("  rank {:<4} {gpu}{numa}, {cpus}  NICs ", placement.rank))];
            for nic in &nics {
                let used = placement.nics.iter().any(|n| n == nic);
                spans.push(Span::styled(format!("{nic} "), if used { in_use } else { idle }));
            }
            let line = Line::from(spans);
            out.push(if line.width() > width { Line::raw(text::truncate(&line.to_string(), width)) } else { line });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use efatop_experiments::results::RankPlacement;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    fn placement(rank: usize, host: &str, gpu: usize, nics: &[&str]) -> RankPlacement {
        RankPlacement {
            rank,
            host: host.into(),
            gpu: Some(gpu),
            gpu_pci_bus_id: Some(format!("0000:{:02x}:00.0", 0x53 + 0x11 * gpu)),
            numa_node: Some(0),
            nics: nics.iter().map(|n| (*n).to_string()).collect(),
            pinned_cpus: Some("0-47,96-143".into()),
        }
    }

    fn state() -> DashboardState {
        let mut state = DashboardState { show_topology: true, ..DashboardState::default() };
        state.run.placements = vec![
            placement(0, "p5-a", 0, &["rdmap79s0", "rdmap80s0"]),
            placement(1, "p5-a", 1, &["rdmap96s0", "rdmap97s0"]),
            placement(2, "p5-b", 0, &["rdmap79s0", "rdmap80s0"]),
        ];
        state
    }

    #[test]
    fn each_rank_shows_its_gpu_cpus_and_the_nics_it_uses() {
        let mut terminal = Terminal::new(TestBackend::new(120, 12)).expect("terminal");
        terminal.draw(|frame| render(&state(), frame.area(), frame.buffer_mut(), Chrome::Boxed)).expect("draw");
        let buffer = terminal.backend().buffer().clone();
        let text: Vec<String> = (0..12)
            .map(|y| (0..120).map(|x| buffer[(x, y)].symbol().to_string()).collect::<String>())
            .collect();
        let screen = text.join("\n");
        assert!(screen.contains("p5-a: 2 ranks, 4 NICs in use"), "{screen}");
        assert!(screen.contains("rank 1    GPU 1 (0000:64:00.0) NUMA 0, CPUs 0-47,96-143"), "{screen}");
        // Rank 1's own NICs are highlighted, its neighbour's are not.
        let row = text.iter().position(|l| l.contains("rank 1")).expect("rank 1 row");
        let column = text[row].find("rdmap96s0").expect("its NIC") as u16;
        assert_eq!(buffer[(column, row as u16)].fg, Color::Cyan);
        let other = text[row].find("rdmap79s0").expect("the other NIC") as u16;
        assert_eq!(buffer[(other, row as u16)].fg, Color::DarkGray);
    }

    #[test]
    fn tiny_areas_and_no_placements_do_not_panic() {
        for (w, h) in [(0, 0), (1, 1), (10, 3), (80, 24)] {
            let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("terminal");
            terminal.draw(|frame| render(&state(), frame.area(), frame.buffer_mut(), Chrome::Rule)).expect("draw");
            terminal
                .draw(|frame| render(&DashboardState::default(), frame.area(), frame.buffer_mut(), Chrome::Boxed))
                .expect("draw");
        }
    }
}
