//! Painting the many-node monitor's fleet overview, top to bottom: a header (nodes, EFA NICs reporting,
//! how many are behind, nodes not heard from yet); per rail the live median and spread (p10, median,
//! p90, a percentile bar and a histogram against the median: the dashboard fleet view's rail lines, side
//! by side where the screen is wide); the worst EFA NICs now (node, GPU, NIC, rail, rate, share of the
//! rail's median, how long it has been low, `BEHIND` once flagged); one line per node, worst first, with
//! a cell per EFA NIC in rail order (grouped by GPU where the topology says); the keys, or the `/`
//! prompt. On a short screen the rails shrink to one line and the worst NICs come first, so the worst
//! NIC stays on screen down to 80×24.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::NodeFleet;
use crate::fleet::{low_flag, nic_cell, percent, rail_line, rails_compact, rails_heading, spread_scale, strip};
use crate::text::{ago, cell, number, width, Align};
use crate::monitor::NodesView;
use crate::state::fleet::{HostStrip, WorstNic};

/// Worst NICs listed when the screen has lines to spare, and on a short one.
const WORST_SHOWN: usize = 8;
const WORST_SHORT: usize = 5;
/// Widest node name column, and NIC name column.
const NODE_MAX: usize = 24;
const NIC_MAX: usize = 16;
/// Narrowest column of rail lines side by side (a rail line with its percentile bar and histogram).
const RAIL_COLUMN: u16 = 96;

fn dim() -> Style {
    Style::new().fg(Color::DarkGray)
}

fn bold() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

/// The overview over `area` of `buf`.
pub(in crate::monitor) fn render_fleet(view: &NodesView, area: Rect, buf: &mut Buffer) {
    if area.is_empty() {
        return;
    }
    let footer = u16::from(area.height > 1);
    header(view, Rect { height: 1, ..area }, buf);
    if footer > 0 {
        footer_line(&view.fleet, Rect { y: area.bottom() - 1, height: 1, ..area }, buf);
    }
    let body = Rect { y: area.y + 1, height: area.height.saturating_sub(1 + footer), ..area };
    if !body.is_empty() {
        render_body(view, body, buf);
    }
}

fn header(view: &NodesView, area: Rect, buf: &mut Buffer) {
    let model = &view.fleet.model;
    let reporting: usize = model.rails().iter().map(|rail| rail.nics).sum();
    let behind: usize = model.rails().iter().map(|rail| rail.behind).sum();
    let rule = model.rule();
    let mut spans = vec![
        Span::styled(" efatop monitor ", Style::new().fg(Color::Black).bg(Color::Cyan).add_modifier(Modifier::BOLD)),
        Span::styled(format!(" {} nodes", view.nodes.len()), bold()),
        Span::raw(format!("  {reporting} EFA NICs reporting")),
    ];
    let behind_style = if behind > 0 { Style::new().fg(Color::Red).add_modifier(Modifier::BOLD) } else { Style::new() };
    spans.push(Span::styled(format!("  {behind} behind"), behind_style));
    let missing = view.expected.saturating_sub(view.nodes.len());
    let mut waiting: Vec<Span> = (missing > 0).then(|| Span::styled(format!("  waiting for {missing} of {}", view.expected), Style::new().fg(Color::Yellow))).into_iter().collect();
    if view.refused > 0 {
        waiting.push(Span::styled(format!("  refused {}", view.refused), Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)));
    }
    // The rule where there is room for it after the rest.
    let rule = Span::styled(format!(" (< {:.0}% of rail median for {})", rule.threshold * 100.0, ago(rule.hold)), dim());
    let used: usize = spans.iter().chain(&waiting).map(|span| width(&span.content)).sum();
    if used + width(&rule.content) <= usize::from(area.width) {
        spans.push(rule);
    }
    spans.extend(waiting);
    Line::from(spans).render(area, buf);
}

fn footer_line(fleet: &NodeFleet, area: Rect, buf: &mut Buffer) {
    let key = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
    if let Some(query) = &fleet.view.search {
        Line::from(vec![
            Span::styled(" find node: ", key),
            Span::raw(format!("{query}█")),
            Span::styled("  Enter keeps it  Esc closes", dim()),
        ])
        .render(area, buf);
        return;
    }
    let mut spans = Vec::new();
    for (k, what) in [("q", "quit"), ("↑↓", "node"), ("Enter", "its NICs"), ("/", "find node")] {
        spans.push(Span::styled(format!(" {k}"), key));
        spans.push(Span::styled(format!(" {what} "), dim()));
    }
    Line::from(spans).render(area, buf);
}

/// Rails, worst NICs and nodes, in as many lines as `area` has.
fn render_body(view: &NodesView, area: Rect, buf: &mut Buffer) {
    let fleet = &view.fleet;
    let model = &fleet.model;
    let columns = usize::from(area.width);
    let height = usize::from(area.height);
    let node_width = model.hosts().iter().map(|host| width(&host.name)).max().unwrap_or(4).clamp(4, NODE_MAX);
    let rails = model.rails();
    let worst = model.worst();
    let behind: usize = rails.iter().map(|rail| rail.behind).sum();
    let side_by_side = usize::from((area.width / RAIL_COLUMN).max(1));
    let rail_rows = rails.len().div_ceil(side_by_side);
    let worst_wished = worst.len().clamp(1, WORST_SHOWN);
    let mut y = area.y;
    let line = |text: Line<'static>, y: &mut u16, buf: &mut Buffer| {
        if *y < area.bottom() {
            text.render(Rect { y: *y, height: 1, ..area }, buf);
            *y += 1;
        }
    };
    let full = rails.is_empty() || height >= (1 + rail_rows) + (1 + worst_wished) + 3;
    if full && !rails.is_empty() {
        // Side by side, two columns apart; the rails run down the first column, then the next.
        let column_width = area.width / side_by_side as u16;
        let content = usize::from(column_width.saturating_sub(if side_by_side > 1 { 2 } else { 0 }));
        let at = |index: usize, y: u16| Rect { x: area.x + (index as u16) * column_width, y, width: content as u16, height: 1 };
        let heading = if side_by_side > 1 {
            let (low, high) = spread_scale(model);
            format!("Rails: NICs, p10, median, p90 Gbps; min ─ p10 ━┃━ p90 ─ max on {low:.0}…{high:.0} Gbps; NICs by tenths of the median 0…1.5+")
        } else {
            rails_heading(model, content)
        };
        line(Line::styled(heading, bold()), &mut y, buf);
        for (index, rail) in rails.iter().enumerate() {
            let (row, column) = (index % rail_rows, index / rail_rows);
            rail_line(rail, model, content).render(at(column, y + row as u16), buf);
        }
        y += rail_rows as u16;
        line(Line::styled(format!("Worst EFA NICs now, against their rail's median ({behind} behind)"), bold()), &mut y, buf);
    } else if !rails.is_empty() {
        line(rails_compact(rails, columns), &mut y, buf);
    }
    let listed = if full { WORST_SHOWN } else { WORST_SHORT };
    if worst.is_empty() {
        let text = if view.nodes.is_empty() { "no node has reported yet" } else { "no EFA NIC has reported a rate yet" };
        line(Line::styled(text, dim()), &mut y, buf);
    }
    let nic_width = worst.iter().take(listed).filter_map(|nic| fleet.nic(nic.view)).map(|nic| width(&nic.name)).max().unwrap_or(4).clamp(4, NIC_MAX);
    for nic in worst.iter().take(listed) {
        line(worst_line(view, nic, (node_width, nic_width), columns), &mut y, buf);
    }
    let left = usize::from(area.bottom().saturating_sub(y));
    if left >= 2 {
        let threshold = model.rule().threshold * 100.0;
        let long = format!("Nodes, worst NIC first (each cell an EFA NIC in rail order: █ ≥ {threshold:.0}% of its rail ▆ ≥ 75% ▄ ≥ 50% ▂ below, · no rate)");
        let heading = if width(&long) <= columns { long } else { format!("Nodes, worst NIC first (█ ≥ {threshold:.0}% of rail ▆ ≥ 75% ▄ ≥ 50% ▂ below · none)") };
        line(Line::styled(heading, bold()), &mut y, buf);
    }
    let left = usize::from(area.bottom().saturating_sub(y));
    node_lines(fleet, left, node_width, columns, &mut |text| line(text, &mut y, buf));
}

/// One of the worst NICs, in columns `node_width` and `nic_width` wide for its node and NIC names.
fn worst_line(view: &NodesView, worst: &WorstNic, (node_width, nic_width): (usize, usize), columns: usize) -> Line<'static> {
    let fleet = &view.fleet;
    let model = &fleet.model;
    let node = model.hosts().get(worst.host).map_or("?", |host| host.name.as_str());
    let (name, gpu) = fleet.nic(worst.view).map_or(("?", None), |nic| (nic.name.as_str(), nic.gpu));
    let gpu = gpu.map_or("-".to_string(), |gpu| gpu.to_string());
    let (glyph, style) = nic_cell(Some(worst.ratio), model.rule().threshold, worst.behind);
    let numbers = format!(
        " rail {:<2} {} Gbps {:>4} of {} ",
        worst.rail,
        cell(&number(Some(worst.gbps), 1), 6, Align::Right),
        percent(worst.ratio),
        number(Some(worst.rail_median), 1)
    );
    let flag = low_flag(worst.behind, worst.low_for);
    let fixed = 2 + node_width + width(&numbers) + 12;
    let mut spans = vec![Span::styled(format!("{glyph} "), style), Span::styled(cell(node, node_width, Align::Left), bold())];
    // NIC name and GPU where there is room, the name first.
    if columns >= fixed + 1 + nic_width + 7 {
        spans.push(Span::raw(format!(" GPU {gpu:<2}")));
    }
    if columns >= fixed + 1 + nic_width {
        spans.push(Span::styled(format!(" {}", cell(name, nic_width, Align::Left)), Style::new().fg(Color::Blue)));
    }
    spans.push(Span::styled(numbers, style));
    spans.push(flag);
    Line::from(spans)
}

/// Up to `lines` nodes, worst first, scrolled so that the selected node is on screen.
fn node_lines(fleet: &NodeFleet, lines: usize, node_width: usize, columns: usize, put: &mut impl FnMut(Line<'static>)) {
    if lines == 0 {
        return;
    }
    let model = &fleet.model;
    let selected = fleet.selected().and_then(|host| model.position_of(host)).unwrap_or(0);
    let offset = if selected >= lines { selected + 1 - lines } else { 0 };
    for (position, &host) in model.order().iter().enumerate().skip(offset).take(lines) {
        if let Some(strip) = model.hosts().get(host as usize) {
            put(node_line(fleet, strip, position == selected, node_width, columns));
        }
    }
}

fn node_line(fleet: &NodeFleet, node: &HostStrip, selected: bool, node_width: usize, columns: usize) -> Line<'static> {
    let model = &fleet.model;
    let threshold = model.rule().threshold;
    let marker = if selected { "▶ " } else { "  " };
    let name_style = if selected { Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED) } else { bold() };
    let mut spans = vec![
        Span::styled(marker, Style::new().fg(Color::Cyan)),
        Span::styled(cell(&node.name, node_width, Align::Left), name_style),
        Span::raw(format!(" {:>4} ", percent(f64::from(node.worst_ratio)))),
    ];
    if node.views.is_empty() {
        spans.push(Span::styled("no EFA NIC", dim()));
        return Line::from(spans);
    }
    let tail = if node.behind > 0 { format!(" {} behind", node.behind) } else { String::new() };
    let room = columns.saturating_sub(2 + node_width + 6 + width(&tail));
    // One group per GPU (the topology's), in rail order.
    let cells = node.views.iter().map(|&at| at as usize).map(|at| (fleet.nic(at).and_then(|nic| nic.gpu), nic_cell(model.ratio(at), threshold, model.is_behind(at))));
    spans.extend(strip(cells, room));
    if !tail.is_empty() {
        spans.push(Span::styled(tail, Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)));
    }
    Line::from(spans)
}
