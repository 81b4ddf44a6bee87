//! The topology view (`t`): for every host of the run, its ranks with the GPU each took, the CPUs it is
//! pinned to, and the host's NICs with the ones that rank's channels use highlighted; then how the run's
//! GPUs on that host reach each other (NVLink with its peak each way, or the PCIe level).

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use efatop_proto::results::GpuPairRecord;
use efatop_proto::topology::{GpuLinkSource, Link, format_cpu_list, format_gbytes};
use efatop_proto::words::plural;

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
            text::truncate(&format!("{host}: {}, {} in use", plural(ranks.len(), "rank"), plural(nics.len(), "NIC")), width),
            Style::new().add_modifier(Modifier::BOLD),
        ));
        for placement in ranks {
            let gpu = match (placement.gpu, &placement.gpu_pci_bus_id) {
                (Some(gpu), Some(bus)) => format!("GPU {gpu} ({bus})"),
                (Some(gpu), None) => format!("GPU {gpu}"),
                (None, _) => "no GPU".to_string(),
            };
            let numa = placement.numa_node.map_or_else(String::new, |n| format!(" NUMA {n}"));
            let cpus = match (placement.pinned_cpus.as_deref(), placement.hot_cpu) {
                (Some(set), Some(hot)) => format!("CPUs {set} (hot {hot})"),
                (Some(set), None) => format!("CPUs {set}"),
                (None, _) => "not pinned".to_string(),
            };
            let mut spans = vec![Span::raw(format!("  rank {:<4} {gpu}{numa}, {cpus}  NICs ", placement.rank))];
            for nic in &nics {
                let used = placement.nics.iter().any(|n| n == nic);
                spans.push(Span::styled(format!("{nic} "), if used { in_use } else { idle }));
            }
            let line = Line::from(spans);
            out.push(if line.width() > width { Line::raw(text::truncate(&line.to_string(), width)) } else { line });
        }
        let gpu_pairs = state.results.as_ref().map_or(&[][..], |r| r.metadata.gpu_pairs.as_slice());
        let host_pairs: Vec<&GpuPairRecord> = gpu_pairs.iter().filter(|p| p.host == host).collect();
        out.extend(gpu_pair_lines(&host_pairs, width));
    }
    out
}

/// A host's GPU pairs: one line for a single pair or when every pair is alike (an NVSwitch baseboard), a
/// line per pair up to three, else a matrix of link words (as `efatop topo`) under a line giving each NV#'s peak.
fn gpu_pair_lines(pairs: &[&GpuPairRecord], width: usize) -> Vec<Line<'static>> {
    let Some(first) = pairs.first() else { return Vec::new() };
    let nvlink = Style::new().fg(Color::Cyan);
    let dim = Style::new().fg(Color::DarkGray);
    // A source per host: pairs of one host all come from one place (NVML or the topology).
    let source = match first.pair.source {
        GpuLinkSource::Nvml => "NVML",
        GpuLinkSource::Hwloc => "inferred",
    };
    let label = Span::raw(format!("  GPU links ({source}): "));
    let describe = |record: &GpuPairRecord| {
        let pair = &record.pair;
        match (pair.link, pair.peak_gbytes_per_s) {
            (Link::NvLink(_), Some(peak)) => format!("{} {} GB/s each way", pair.link, format_gbytes(peak)),
            (Link::NvLink(_), None) => format!("{} (rate unknown)", pair.link),
            (link, _) => format!("{link} (PCIe, no NVLink)"),
        }
    };
    let fit = |line: Line<'static>| if line.width() > width { Line::raw(text::truncate(&line.to_string(), width)) } else { line };
    let style_of = |record: &GpuPairRecord| if matches!(record.pair.link, Link::NvLink(_)) { nvlink } else { dim };

    let mut gpus: Vec<usize> = pairs.iter().flat_map(|p| [p.gpu_a, p.gpu_b]).collect();
    gpus.sort_unstable();
    gpus.dedup();
    if pairs.len() > 1 && pairs.iter().all(|p| p.pair.link == first.pair.link && p.pair.peak_gbytes_per_s == first.pair.peak_gbytes_per_s) {
        let indices: Vec<u32> = gpus.iter().map(|&g| g as u32).collect();
        let every = format!("every pair of GPU {}: ", format_cpu_list(&indices));
        return vec![fit(Line::from(vec![label, Span::raw(every), Span::styled(describe(first), style_of(first))]))];
    }
    if let [only] = pairs {
        let name = Span::raw(format!("GPU{}\u{2194}GPU{} ", only.gpu_a, only.gpu_b));
        return vec![fit(Line::from(vec![label, name, Span::styled(describe(only), style_of(only))]))];
    }
    if pairs.len() <= 3 {
        let mut out = vec![fit(Line::from(label))];
        for record in pairs {
            let name = Span::raw(format!("    GPU{}\u{2194}GPU{} ", record.gpu_a, record.gpu_b));
            out.push(fit(Line::from(vec![name, Span::styled(describe(record), style_of(record))])));
        }
        return out;
    }
    // Each distinct NV# with its peak, then the matrix.
    let mut peaks: Vec<String> = Vec::new();
    for record in pairs.iter().filter(|p| matches!(p.pair.link, Link::NvLink(_))) {
        let text = describe(record);
        if !peaks.contains(&text) {
            peaks.push(text);
        }
    }
    let summary = if peaks.is_empty() { "no NVLink".to_string() } else { peaks.join(", ") };
    let mut out = vec![fit(Line::from(vec![label, Span::raw(summary)]))];
    let column = gpus.iter().map(|g| format!("GPU{g}").len()).max().unwrap_or(4).max(4) + 2;
    let header: Vec<String> = gpus.iter().map(|g| format!("{:<column$}", format!("GPU{g}"))).collect();
    out.push(fit(Line::raw(format!("    {:<column$}{}", "", header.concat().trim_end()))));
    for &a in &gpus {
        let mut spans = vec![Span::raw(format!("    {:<column$}", format!("GPU{a}")))];
        for &b in &gpus {
            let found = pairs.iter().find(|p| (p.gpu_a, p.gpu_b) == (a.min(b), a.max(b)));
            let (word, style) = match found {
                _ if a == b => (Link::Same.to_string(), Style::new()),
                Some(record) => (record.pair.link.to_string(), style_of(record)),
                None => (text::MISSING.to_string(), dim),
            };
            spans.push(Span::styled(format!("{word:<column$}"), style));
        }
        out.push(fit(Line::from(spans)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use efatop_proto::RunResults;
    use efatop_proto::results::{RankPlacement, RunMetadata};
    use efatop_proto::topology::PairLink;
    use efatop_topology::NodeTopology;
    use insta::assert_snapshot;
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
            hot_cpu: Some(rank as u32),
        }
    }

    fn state() -> DashboardState {
        let mut state = DashboardState::default();
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

    fn draw(state: &DashboardState, width: u16, height: u16) -> Terminal<TestBackend> {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
        terminal.draw(|frame| render(state, frame.area(), frame.buffer_mut(), Chrome::Boxed)).expect("draw");
        terminal
    }

    fn with_pairs(placements: Vec<RankPlacement>, gpu_pairs: Vec<GpuPairRecord>) -> DashboardState {
        let mut state = DashboardState::default();
        state.run.placements = placements;
        let metadata = RunMetadata { gpu_pairs, ..RunMetadata::default() };
        state.results = Some(RunResults { metadata, ..RunResults::default() });
        state
    }

    fn record(gpu_a: usize, gpu_b: usize, pair: PairLink) -> GpuPairRecord {
        GpuPairRecord { host: "p5-a".into(), gpu_a, gpu_b, pair }
    }

    /// A p5 running a rank per GPU, the GPU pairs as the p5 fixture's topology infers them (no NVML).
    fn p5_state() -> DashboardState {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../topology/fixtures/p5.48xlarge.xml");
        let p5 = NodeTopology::from_xml_file(&path).expect("p5 fixture");
        let placements = p5
            .gpus
            .iter()
            .map(|gpu| RankPlacement {
                rank: gpu.index,
                host: "p5-a".into(),
                gpu: Some(gpu.index),
                gpu_pci_bus_id: Some(gpu.pci_bus_id.clone()),
                numa_node: gpu.numa_node,
                nics: gpu.preferred_nics.iter().map(|&k| format!("{}-rdm", p5.nics[k].name)).collect(),
                pinned_cpus: Some(gpu.cpus.clone()),
                hot_cpu: None,
            })
            .collect();
        let pairs = (0..8)
            .flat_map(|a| (a + 1..8).map(move |b| (a, b)))
            .map(|(a, b)| record(a, b, p5.pair_link(a, b).expect("GPU pair")))
            .collect();
        with_pairs(placements, pairs)
    }

    #[test]
    fn a_p5s_eight_gpus_are_one_line_every_pair_alike() {
        let state = p5_state();
        assert_snapshot!("gpu_links_p5_80x24", draw(&state, 80, 24).backend());
        assert_snapshot!("gpu_links_p5_120x30", draw(&state, 120, 30).backend());
        let screen = draw(&state, 120, 30).backend().to_string();
        assert!(screen.contains("GPU links (inferred): every pair of GPU 0-7: NV18 450 GB/s each way"), "{screen}");
    }

    #[test]
    fn two_gpus_are_a_line_for_their_pair() {
        let placements = vec![placement(0, "p5-a", 0, &["rdmap79s0"]), placement(1, "p5-a", 1, &["rdmap96s0"])];
        let pairs = vec![record(0, 1, PairLink::nvlink(Some(18), Some(25.0), GpuLinkSource::Nvml))];
        let terminal = draw(&with_pairs(placements, pairs), 80, 24);
        assert_snapshot!("gpu_links_2gpus_80x24", terminal.backend());
        let buffer = terminal.backend().buffer();
        let screen = terminal.backend().to_string();
        assert!(screen.contains("GPU0\u{2194}GPU1 NV18 450 GB/s each way"), "{screen}");
        let row = (0..24).find(|&y| (0..80).map(|x| buffer[(x, y)].symbol()).collect::<String>().contains("NV18")).expect("row");
        let column = (0..76).find(|&x| (x..x + 4).map(|c| buffer[(c, row)].symbol()).collect::<String>() == "NV18").expect("NV18 cell");
        assert_eq!(buffer[(column, row)].fg, Color::Cyan);
    }

    #[test]
    fn mixed_links_are_a_matrix_under_each_nvlinks_peak() {
        // Four PCIe cards, bridged in pairs with 4 NVLinks each, as NVML would report them.
        let placements = (0..4).map(|r| placement(r, "p5-a", r, &["eth0"])).collect();
        let bridged = || PairLink::nvlink(Some(4), Some(25.0), GpuLinkSource::Nvml);
        let pcie = |link| PairLink::pcie(link, GpuLinkSource::Nvml);
        let pairs = vec![
            record(0, 1, bridged()),
            record(0, 2, pcie(Link::Node)),
            record(0, 3, pcie(Link::Sys)),
            record(1, 2, pcie(Link::Sys)),
            record(1, 3, pcie(Link::Node)),
            record(2, 3, bridged()),
        ];
        let state = with_pairs(placements, pairs);
        assert_snapshot!("gpu_links_mixed_80x24", draw(&state, 80, 24).backend());
        let screen = draw(&state, 80, 24).backend().to_string();
        assert!(screen.contains("GPU links (NVML): NV4 100 GB/s each way"), "{screen}");
        assert!(screen.contains("GPU2  NODE  SYS   X     NV4"), "{screen}");
    }

    #[test]
    fn tiny_areas_and_no_placements_do_not_panic() {
        for (w, h) in [(0, 0), (1, 1), (10, 3), (80, 24)] {
            let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("terminal");
            terminal.draw(|frame| render(&state(), frame.area(), frame.buffer_mut(), Chrome::Rule)).expect("draw");
            terminal.draw(|frame| render(&p5_state(), frame.area(), frame.buffer_mut(), Chrome::Rule)).expect("draw");
            terminal
                .draw(|frame| render(&DashboardState::default(), frame.area(), frame.buffer_mut(), Chrome::Boxed))
                .expect("draw");
        }
    }
}
