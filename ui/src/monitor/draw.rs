//! Painting a [`MonitorView`]: a header line, the GPU panel's state when NVML has nothing, a column
//! caption, one row per NIC under its GPU's heading, the selected NIC's counters beside them on wide
//! screens, and a footer of keys (or the filter prompt).

use std::fmt::Write;

use efatop_sweep::rails::balance;
use efatop_proto::telemetry::{NodeGpu, NodeGpus, NodeNic, NodeSample, NodeTopologyGpu};
use efatop_proto::words::plural;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Widget};
use ratatui::Frame;

use super::{load, MonitorView, SortKey};

/// From this width on, the selected NIC's counters get a column on the right.
const DETAIL_MIN_WIDTH: u16 = 150;
const DETAIL_WIDTH: u16 = 54;
/// From this width on, rows carry a sparkline of their history.
const SPARKLINE_MIN_WIDTH: u16 = 110;
const MIN_BAR: usize = 6;
const SPARK_LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
const BAR_EIGHTHS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];

/// Draws the whole view over the frame.
pub fn draw(frame: &mut Frame, view: &MonitorView) {
    let area = frame.area();
    render(view, area, frame.buffer_mut());
}

/// Draws the whole view into `area` of `buf`.
pub fn render(view: &MonitorView, area: Rect, buf: &mut Buffer) {
    if area.is_empty() {
        return;
    }
    let gpu_line = match view.snapshot().map(|s| &s.gpus) {
        Some(NodeGpus::Unavailable(reason)) => Some(format!("GPUs: {reason}")),
        Some(NodeGpus::Gpus(gpus)) if gpus.is_empty() => Some("GPUs: NVML found no GPU".to_string()),
        _ => None,
    };
    let footer_height = u16::from(area.height > 1);
    let gpu_height = u16::from(gpu_line.is_some() && area.height > 4);
    let header_area = Rect { height: 1, ..area };
    let gpu_area = Rect { y: area.y + 1, height: gpu_height, ..area };
    let body_top = area.y + 1 + gpu_height;
    let body = Rect { y: body_top, height: area.bottom().saturating_sub(body_top + footer_height), ..area };
    let footer_area = Rect { y: area.bottom() - footer_height, height: footer_height, ..area };

    render_header(view, header_area, buf);
    if let Some(line) = gpu_line {
        Line::styled(format!(" {line}"), Style::new().fg(Color::Yellow)).render(gpu_area, buf);
    }
    let (table_area, detail_area) = if body.width >= DETAIL_MIN_WIDTH {
        let table = Rect { width: body.width - DETAIL_WIDTH, ..body };
        (table, Some(Rect { x: table.right(), width: DETAIL_WIDTH, ..body }))
    } else {
        (body, None)
    };
    render_table(view, Some(view.selected()), table_area, buf);
    if let Some(detail) = detail_area {
        render_detail(view, detail, buf);
    }
    render_footer(view, footer_area, buf);
    if view.view.show_help {
        render_help(area, buf);
    }
}

fn width(text: &str) -> usize {
    text.chars().count()
}

fn fit(text: &str, columns: usize) -> String {
    if width(text) <= columns {
        return format!("{text:<columns$}");
    }
    if columns == 0 {
        return String::new();
    }
    let mut cut: String = text.chars().take(columns - 1).collect();
    cut.push('…');
    cut
}

/// `87.30`, `0.16`, `1234.5`; `-` when unknown.
fn gbps(value: Option<f64>) -> String {
    match value {
        Some(v) if v.is_finite() && v < 10_000.0 => format!("{v:.2}"),
        Some(v) if v.is_finite() => format!("{v:.2e}"),
        _ => "-".to_string(),
    }
}

/// A count in at most six columns: `0`, `950`, `12.3k`, `4.10M`.
fn count(value: u64) -> String {
    let v = value as f64;
    if value < 10_000 {
        value.to_string()
    } else if v < 1e6 {
        format!("{:.1}k", v / 1e3)
    } else if v < 1e9 {
        format!("{:.2}M", v / 1e6)
    } else {
        format!("{:.2}G", v / 1e9)
    }
}

fn render_header(view: &MonitorView, area: Rect, buf: &mut Buffer) {
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let dim = Style::new().fg(Color::DarkGray);
    let mut spans = vec![Span::styled(" efatop monitor ", Style::new().fg(Color::Black).bg(Color::Cyan).add_modifier(Modifier::BOLD))];
    match view.snapshot() {
        None => spans.push(Span::raw(" waiting for the first read…")),
        Some(snapshot) => {
            let present: Vec<&NodeNic> = snapshot.nics.iter().filter(|nic| nic.present).collect();
            let gone = snapshot.nics.len() - present.len();
            let sum = |pick: fn(&NodeNic) -> Option<f64>| present.iter().filter_map(|nic| pick(nic)).sum::<f64>();
            spans.push(Span::styled(format!(" {}", snapshot.host), bold));
            let every = snapshot.interval_ms.map_or_else(|| "first read".to_string(), |ms| format!("every {:.1}s", ms / 1e3));
            spans.push(Span::styled(format!("  {every}"), dim));
            let gone_text = if gone > 0 { format!(" ({gone} gone)") } else { String::new() };
            spans.push(Span::raw(format!("  {}{gone_text}", plural(present.len(), "NIC"))));
            spans.push(Span::raw("  tx "));
            spans.push(Span::styled(gbps(Some(sum(|nic| nic.tx_gbps))), bold));
            spans.push(Span::raw(" rx "));
            spans.push(Span::styled(gbps(Some(sum(|nic| nic.rx_gbps))), bold));
            spans.push(Span::raw(" Gbps"));
        }
    }
    spans.push(Span::styled(format!("  sort {}", view.view.sort.label()), dim));
    if !view.view.filter.is_empty() {
        spans.push(Span::styled(format!("  filter {}", view.view.filter), Style::new().fg(Color::Magenta)));
    }
    if view.view.paused {
        spans.push(Span::styled("  PAUSED", Style::new().fg(Color::Black).bg(Color::Yellow)));
    }
    Line::from(spans).render(area, buf);
}

/// Column widths of a NIC row for a table `columns` wide.
struct Columns {
    name: usize,
    bar: usize,
    spark: usize,
}

/// `  name  link     tx     rx  bar  spark    err   retx`
const LINK_W: usize = 5;
const RATE_W: usize = 8;
const COUNT_W: usize = 6;

impl Columns {
    fn fit(view: &MonitorView, columns: usize, wide: bool) -> Columns {
        let name = view.shown().iter().map(|nic| width(&nic.name)).max().unwrap_or(4).clamp(4, 16);
        let fixed = 2 + name + 1 + LINK_W + 1 + RATE_W + 1 + RATE_W + 2 + 1 + COUNT_W + 1 + COUNT_W;
        let free = columns.saturating_sub(fixed);
        let spark = if wide { (free / 3).min(super::HISTORY_LEN) } else { 0 };
        let bar = free.saturating_sub(spark + usize::from(spark > 0));
        if bar < MIN_BAR {
            return Columns { name, bar: 0, spark: 0 };
        }
        Columns { name, bar, spark }
    }
}

/// One line of the table: a GPU heading, or a NIC.
enum Row<'a> {
    Gpu { index: Option<usize>, topology: Option<&'a NodeTopologyGpu>, stats: Option<&'a NodeGpu> },
    Nic { nic: &'a NodeNic, shown_index: usize },
}

fn rows(view: &MonitorView) -> Vec<Row<'_>> {
    let Some(snapshot) = view.snapshot() else { return Vec::new() };
    let shown = view.shown();
    if view.view.sort != SortKey::Gpu {
        return shown.into_iter().enumerate().map(|(shown_index, nic)| Row::Nic { nic, shown_index }).collect();
    }
    let nvml: &[NodeGpu] = match &snapshot.gpus {
        NodeGpus::Gpus(gpus) => gpus,
        NodeGpus::Unavailable(_) => &[],
    };
    let mut rows = Vec::new();
    let mut current: Option<Option<usize>> = None;
    for (shown_index, nic) in shown.into_iter().enumerate() {
        let group = nic.gpus.first().copied();
        if current != Some(group) && !(current.is_none() && group.is_none() && snapshot.topology_gpus.is_empty()) {
            let topology = group.and_then(|g| snapshot.topology_gpus.iter().find(|gpu| gpu.index == g));
            let stats = topology.and_then(|t| nvml.iter().find(|gpu| gpu.pci_bus_id == t.pci_bus_id));
            rows.push(Row::Gpu { index: group, topology, stats });
        }
        current = Some(group);
        rows.push(Row::Nic { nic, shown_index });
    }
    // GPUs NVML sees that no shown NIC is next to still get their line.
    if view.view.filter.is_empty() {
        for stats in nvml {
            let listed = rows.iter().any(|row| matches!(row, Row::Gpu { stats: Some(s), .. } if s.pci_bus_id == stats.pci_bus_id));
            if !listed {
                rows.push(Row::Gpu { index: Some(stats.index), topology: None, stats: Some(stats) });
            }
        }
    }
    rows
}

/// The table of NICs, with the `selected`th shown NIC marked (none in a printed table).
fn render_table(view: &MonitorView, selected: Option<usize>, area: Rect, buf: &mut Buffer) {
    if area.is_empty() {
        return;
    }
    let columns = Columns::fit(view, usize::from(area.width), area.width >= SPARKLINE_MIN_WIDTH);
    let caption = caption_line(&columns);
    Line::styled(fit(&caption, usize::from(area.width)), Style::new().fg(Color::DarkGray).add_modifier(Modifier::UNDERLINED))
        .render(Rect { height: 1, ..area }, buf);
    let list = Rect { y: area.y + 1, height: area.height.saturating_sub(1), ..area };
    let rows = rows(view);
    if view.snapshot().is_some() && rows.is_empty() {
        let text = if view.view.filter.is_empty() { " no NICs found" } else { " no NIC matches the filter (c clears it)" };
        Line::styled(text, Style::new().fg(Color::DarkGray)).render(list, buf);
        return;
    }
    // Scroll so the selected NIC, and the heading above it when there is room, stay on screen.
    let selected_line = rows.iter().position(|row| matches!(row, Row::Nic { shown_index, .. } if Some(*shown_index) == selected));
    let height = usize::from(list.height);
    let offset = selected_line.map_or(0, |line| (line + 1).saturating_sub(height));
    let scale = unknown_link_scale(view);
    for (line, row) in rows.iter().skip(offset).take(height).enumerate() {
        let row_area = Rect { y: list.y + line as u16, height: 1, ..list };
        let rendered = match row {
            Row::Gpu { index, topology, stats } => gpu_line(*index, *topology, *stats),
            Row::Nic { nic, shown_index } => nic_line(view, nic, Some(*shown_index) == selected, &columns, scale),
        };
        rendered.render(row_area, buf);
    }
}

fn caption_line(columns: &Columns) -> String {
    let mut text = format!(
        "  {:<name$} {:>LINK_W$} {:>RATE_W$} {:>RATE_W$}",
        "NIC",
        "link",
        "tx Gbps",
        "rx Gbps",
        name = columns.name
    );
    if columns.bar > 0 {
        let _ = write!(text, "  {:<bar$}", "load / link", bar = columns.bar);
    }
    if columns.spark > 0 {
        let _ = write!(text, " {:<spark$}", "history", spark = columns.spark);
    }
    let _ = write!(text, " {:>COUNT_W$} {:>COUNT_W$}", "errors", "retx");
    text
}

/// What a NIC with no known link speed is drawn against: the highest load any of those has shown, but
/// at least 1 Gbps, so that a near-idle interface (loopback's housekeeping) does not fill its own bar.
fn unknown_link_scale(view: &MonitorView) -> f64 {
    let Some(snapshot) = view.snapshot() else { return 1.0 };
    let peak = snapshot
        .nics
        .iter()
        .filter(|nic| nic.link_gbps.is_none())
        .filter_map(|nic| view.history(&nic.name))
        .flat_map(|history| history.load.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    peak.max(1.0)
}

fn gpu_line(index: Option<usize>, topology: Option<&NodeTopologyGpu>, stats: Option<&NodeGpu>) -> Line<'static> {
    let heading = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
    let Some(index) = index else {
        return Line::styled("not next to a GPU", heading);
    };
    let bus = topology.map(|t| t.pci_bus_id.as_str()).or(stats.map(|s| s.pci_bus_id.as_str())).unwrap_or("");
    let model = stats.map(|s| s.name.as_str()).or(topology.and_then(|t| t.model.as_deref())).unwrap_or("");
    let mut spans = vec![Span::styled(format!("GPU{index}"), heading), Span::styled(format!(" {bus} {model}"), Style::new().fg(Color::Cyan))];
    if let Some(stats) = stats {
        let dim = Style::new().fg(Color::DarkGray);
        spans.push(Span::styled("  PCIe tx ", dim));
        spans.push(Span::raw(gbps(stats.pcie_tx_gbps)));
        spans.push(Span::styled(" rx ", dim));
        spans.push(Span::raw(gbps(stats.pcie_rx_gbps)));
        spans.push(Span::styled("  NVLink tx ", dim));
        spans.push(Span::raw(gbps(stats.nvlink_tx_gbps)));
        spans.push(Span::styled(" rx ", dim));
        spans.push(Span::raw(gbps(stats.nvlink_rx_gbps)));
        spans.push(Span::styled(" Gbps", dim));
        if let Some(note) = &stats.note {
            spans.push(Span::styled(format!("  ({note})"), dim));
        }
    }
    Line::from(spans)
}

fn nic_line(view: &MonitorView, nic: &NodeNic, selected: bool, columns: &Columns, unknown_scale: f64) -> Line<'static> {
    let history = view.history(&nic.name);
    // Far off its rail (efatop_sweep::rails): the name in red, the figures stay as they are.
    let off_rail = view.snapshot().is_some_and(|s| balance(&[s]).iter().any(|l| l.off && l.nic == nic.name));
    let name_style = match (nic.present, selected) {
        (false, _) => Style::new().fg(Color::DarkGray).add_modifier(Modifier::CROSSED_OUT),
        (true, true) => Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED),
        (true, false) => Style::new().add_modifier(Modifier::BOLD),
    };
    let name_style = if off_rail && nic.present { name_style.fg(Color::Red).add_modifier(Modifier::UNDERLINED) } else { name_style };
    let mut spans = vec![
        Span::styled(if selected { "▶ " } else { "  " }, Style::new().fg(Color::Cyan)),
        Span::styled(fit(&nic.name, columns.name), name_style),
        Span::raw(" "),
    ];
    let link = nic.link_gbps.map_or_else(|| "-".to_string(), |l| if l.fract() == 0.0 { format!("{l:.0}G") } else { format!("{l:.1}G") });
    spans.push(Span::styled(format!("{link:>LINK_W$}"), Style::new().fg(Color::DarkGray)));
    if nic.present {
        spans.push(Span::styled(format!(" {:>RATE_W$}", gbps(nic.tx_gbps)), Style::new().fg(Color::Green)));
        spans.push(Span::styled(format!(" {:>RATE_W$}", gbps(nic.rx_gbps)), Style::new().fg(Color::Blue)));
    } else {
        spans.push(Span::styled(format!(" {:>w$}", "gone", w = RATE_W * 2 + 1), Style::new().fg(Color::Red)));
    }
    if columns.bar > 0 {
        spans.push(Span::raw("  "));
        let scale = nic.link_gbps.filter(|l| *l > 0.0).unwrap_or(unknown_scale);
        let fraction = if nic.present { load(nic).map_or(0.0, |l| l / scale) } else { 0.0 };
        let colour = if fraction >= 0.8 { Color::Red } else if fraction >= 0.5 { Color::Yellow } else { Color::Green };
        spans.push(Span::styled(bar(fraction, columns.bar), Style::new().fg(colour).bg(Color::Black)));
    }
    if columns.spark > 0 {
        let scale = nic.link_gbps.filter(|l| *l > 0.0).unwrap_or(unknown_scale);
        let spark = history.map_or_else(String::new, |h| sparkline(h.load.iter().copied(), scale, columns.spark));
        spans.push(Span::styled(format!(" {spark:<w$}", w = columns.spark), Style::new().fg(Color::Magenta)));
    }
    let counter_style = |fresh: bool| if fresh { Style::new().fg(Color::White).bg(Color::Red).add_modifier(Modifier::BOLD) } else { Style::new() };
    spans.push(Span::raw(" "));
    spans.push(Span::styled(format!("{:>COUNT_W$}", count(nic.errors)), counter_style(view.is_fresh(history.and_then(|h| h.errors_moved_at)))));
    spans.push(Span::raw(" "));
    spans.push(Span::styled(
        format!("{:>COUNT_W$}", count(nic.retransmits)),
        counter_style(view.is_fresh(history.and_then(|h| h.retransmits_moved_at))),
    ));
    Line::from(spans)
}

/// `fraction` of `columns` filled, in eighths of a cell; clamped to the width (a rate above the link
/// fills it).
fn bar(fraction: f64, columns: usize) -> String {
    let eighths = (fraction.clamp(0.0, 1.0) * columns as f64 * 8.0).round() as usize;
    let full = eighths / 8;
    let mut text: String = "█".repeat(full);
    if full < columns {
        text.push(BAR_EIGHTHS[eighths % 8]);
        text.push_str(&" ".repeat(columns - full - 1));
    }
    text
}

/// The last `columns` values, each as one of eight block heights of `scale`.
fn sparkline(values: impl DoubleEndedIterator<Item = f64>, scale: f64, columns: usize) -> String {
    let mut recent: Vec<f64> = values.rev().take(columns).collect();
    recent.reverse();
    recent
        .into_iter()
        .map(|v| {
            let level = ((v / scale).clamp(0.0, 1.0) * 7.0).round() as usize;
            SPARK_LEVELS[level]
        })
        .collect()
}

fn render_detail(view: &MonitorView, area: Rect, buf: &mut Buffer) {
    let title = view.selected_nic().map_or_else(|| " counters ".to_string(), |nic| format!(" {} counters ", nic.name));
    let block = Block::new().borders(Borders::LEFT).border_style(Style::new().fg(Color::DarkGray)).title(Line::styled(title, Style::new().add_modifier(Modifier::BOLD)));
    let inner = block.inner(area);
    block.render(area, buf);
    let Some(nic) = view.selected_nic() else { return };
    let mut lines = vec![Line::styled(
        format!(
            "{:<28} {:>10} {:>12}",
            "counter",
            "value",
            "per second"
        ),
        Style::new().fg(Color::DarkGray).add_modifier(Modifier::UNDERLINED),
    )];
    if let Some(bus) = &nic.pci_bus_id {
        let gpus: Vec<String> = nic.gpus.iter().map(|g| format!("GPU{g}")).collect();
        let near = if gpus.is_empty() { String::new() } else { format!(", next to {}", gpus.join(" ")) };
        lines.insert(0, Line::styled(format!("PCI {bus}{near}"), Style::new().fg(Color::DarkGray)));
    }
    for (name, stats) in &nic.counters {
        let per_s = stats.per_s.map_or_else(|| "-".to_string(), rate_text);
        let moved = stats.per_s.is_some_and(|r| r > 0.0);
        let style = if nic.went_backwards.contains(name) {
            Style::new().fg(Color::Yellow)
        } else if moved {
            Style::new()
        } else {
            Style::new().fg(Color::DarkGray)
        };
        lines.push(Line::styled(format!("{:<28} {:>10} {:>12}", fit(name, 28).trim_end(), count(stats.value), per_s), style));
    }
    Paragraph::new(lines).render(inner, buf);
}

/// A per-second rate in at most twelve columns.
fn rate_text(per_s: f64) -> String {
    if per_s < 1e4 {
        format!("{per_s:.0}")
    } else if per_s < 1e6 {
        format!("{:.1}k", per_s / 1e3)
    } else if per_s < 1e9 {
        format!("{:.1}M", per_s / 1e6)
    } else {
        format!("{:.1}G", per_s / 1e9)
    }
}

fn render_footer(view: &MonitorView, area: Rect, buf: &mut Buffer) {
    if area.is_empty() {
        return;
    }
    let key = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
    let dim = Style::new().fg(Color::DarkGray);
    if let Some(input) = &view.view.filter_input {
        let line = Line::from(vec![
            Span::styled(" filter: ", key),
            Span::raw(format!("{input}█")),
            Span::styled("  Enter apply  Esc cancel  (comma-separated: rdmap13,gpu2,lo)", dim),
        ]);
        line.render(area, buf);
        return;
    }
    let mut spans = Vec::new();
    for (k, what) in [("q", "quit"), ("s", "sort"), ("/", "filter"), ("c", "clear filter"), ("↑↓", "select"), ("p", "pause"), ("?", "help")] {
        spans.push(Span::styled(format!(" {k}"), key));
        spans.push(Span::styled(format!(" {what} "), dim));
    }
    Line::from(spans).render(area, buf);
}

fn render_help(area: Rect, buf: &mut Buffer) {
    let text = [
        "Every NIC of this node: tx and rx Gbps from its byte counters,",
        "a bar of the busier direction against its link speed (or, when",
        "sysfs gives none, against the highest rate such NICs showed),",
        "its history, and its error and retransmit counts: white on red",
        "while they move. NICs sit under the GPU they are next to.",
        "",
        "s   sort: GPU, rate, errors, name      /   filter (Enter)",
        "c   clear the filter                   ↑↓  select a NIC",
        "p   pause the view                     q   quit",
        "",
        "Any key closes this help.",
    ];
    let width = (text.iter().map(|l| width(l)).max().unwrap_or(0) as u16 + 4).min(area.width);
    let height = (text.len() as u16 + 2).min(area.height);
    let popup = Rect { x: area.x + (area.width - width) / 2, y: area.y + (area.height - height) / 2, width, height };
    Clear.render(popup, buf);
    let block = Block::bordered().title(" help ").border_style(Style::new().fg(Color::Cyan));
    let inner = block.inner(popup);
    block.render(popup, buf);
    Paragraph::new(text.iter().map(|l| Line::raw(format!(" {l}"))).collect::<Vec<_>>()).render(inner, buf);
}

/// What [`render`] would paint, as a plain-text table (for `--once` without `--json`, and for stdout that is
/// not a terminal): the header line, then a caption and one line per NIC under its GPU heading.
pub fn plain_text(view: &MonitorView, columns: u16) -> String {
    let rows = rows(view);
    let height = rows.len() as u16 + 3;
    let area = Rect { x: 0, y: 0, width: columns, height };
    let mut buf = Buffer::empty(area);
    // A printed table has no selection, no footer and no side column.
    render_header(view, Rect { height: 1, ..area }, &mut buf);
    if let Some(NodeGpus::Unavailable(reason)) = view.snapshot().map(|s: &NodeSample| &s.gpus) {
        Line::raw(format!(" GPUs: {reason}")).render(Rect { y: 1, height: 1, ..area }, &mut buf);
    }
    render_table(view, None, Rect { y: 2, height: height - 2, ..area }, &mut buf);
    let mut out = String::new();
    for y in 0..height {
        let line: String = (0..columns).map(|x| buf[(x, y)].symbol()).collect();
        let line = line.trim_end();
        out.push_str(line);
        out.push('\n');
    }
    // The GPU line is empty when NVML had GPUs; drop blank lines so the table stays compact.
    let mut compact = String::new();
    for line in out.lines().filter(|line| !line.is_empty()) {
        compact.push_str(line);
        compact.push('\n');
    }
    compact
}
