//! All-to-all: a heatmap of live pair bandwidth, one row per sender and one column per receiver, so a
//! slow link (one dark cell) or a congested peer (a dark row or column) stands out. Below it, the
//! selected pair: its rate now, p50/p99 latency and, where there is room, its history.
//!
//! Colour is relative to the fastest pair on screen, not to the link speed: in an all-to-all every
//! sender splits its links among all the others, so against the link every cell would look idle. The
//! legend says which rate full colour stands for. When one cell per rank does not fit, ranks are grouped
//! by host (a cell is the mean rate of the pairs between two hosts), and when hosts do not fit either,
//! into equal blocks of ranks; the title says which.

use std::collections::HashMap;
use std::fmt::Write as _;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Sparkline, Widget};

use super::chrome::{self, Chrome};
use super::text::{cell, number, speed, truncate, width, Align};
use crate::state::{DashboardState, PairMatrixView, Panel};
use crate::view::View;

/// Host names are cut to this in row labels.
const HOST_LABEL_MAX: usize = 14;
/// A side column for the selected pair's history is drawn when at least this wide.
const SIDE_MIN_WIDTH: u16 = 20;
/// Width the side column would like (caption and graph).
const SIDE_WIDTH: u16 = 28;
/// Most lines a history below the grid takes (caption included).
const BELOW_HISTORY_MAX: u16 = 9;
/// An inline history after the detail line is drawn when at least this wide.
const INLINE_SPARKLINE_MIN: usize = 8;
/// Below this share of the peak a pair counts as slow (drawn in red).
pub(super) const SLOW_RATIO: f64 = 0.5;
/// Rows the panel would like at most when every rank would get its own.
const ROWS_WISHED_MAX: usize = 32;

/// Colour levels by share of the peak, fastest first: (lowest share, glyph, colour).
const LEVELS: [(f64, char, Color); 4] =
    [(0.75, '█', Color::Green), (SLOW_RATIO, '▓', Color::Yellow), (0.25, '▒', Color::LightRed), (0.0, '░', Color::Red)];
const NO_DATA: char = '·';

/// How ranks are grouped into rows and columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grouping {
    Ranks,
    Hosts,
    /// Consecutive ranks, this many per block.
    Blocks(usize),
}

/// The groups a grouping makes: which group each rank is in, and how each is labelled.
struct Groups {
    grouping: Grouping,
    group_of_rank: Vec<usize>,
    /// Row labels: `r12`, `h3 p5-node-d`, `r16-23`.
    labels: Vec<String>,
    /// Column labels, short: `12`, `3`, `16`.
    axis: Vec<String>,
    /// Ranks in each group.
    sizes: Vec<usize>,
}

impl Groups {
    fn count(&self) -> usize {
        self.labels.len()
    }

    /// Widest row label.
    fn label_width(&self) -> usize {
        self.labels.iter().map(|label| width(label)).max().unwrap_or(0)
    }

    fn ranks(ranks: usize) -> Groups {
        Groups {
            grouping: Grouping::Ranks,
            group_of_rank: (0..ranks).collect(),
            labels: (0..ranks).map(|rank| format!("r{rank}")).collect(),
            axis: (0..ranks).map(|rank| rank.to_string()).collect(),
            sizes: vec![1; ranks],
        }
    }

    /// Hosts in order of first appearance; ranks beyond the host list share one unknown host.
    fn hosts(state: &DashboardState, ranks: usize) -> Groups {
        let mut names: Vec<&str> = Vec::new();
        let mut group_of_host: HashMap<&str, usize> = HashMap::new();
        let mut group_of_rank = Vec::with_capacity(ranks);
        for rank in 0..ranks {
            let host = state.run.hosts.get(rank).map_or("unknown host", String::as_str);
            let group = *group_of_host.entry(host).or_insert_with(|| {
                names.push(host);
                names.len() - 1
            });
            group_of_rank.push(group);
        }
        let mut sizes = vec![0; names.len()];
        for &group in &group_of_rank {
            sizes[group] += 1;
        }
        Groups {
            grouping: Grouping::Hosts,
            group_of_rank,
            labels: names.iter().enumerate().map(|(index, name)| format!("h{index} {}", truncate(name, HOST_LABEL_MAX))).collect(),
            axis: (0..names.len()).map(|index| index.to_string()).collect(),
            sizes,
        }
    }

    fn blocks(ranks: usize, per_block: usize) -> Groups {
        let per_block = per_block.max(1);
        let count = ranks.div_ceil(per_block);
        let first = |block: usize| block * per_block;
        let last = |block: usize| (first(block) + per_block).min(ranks) - 1;
        Groups {
            grouping: Grouping::Blocks(per_block),
            group_of_rank: (0..ranks).map(|rank| rank / per_block).collect(),
            labels: (0..count).map(|block| format!("r{}-{}", first(block), last(block))).collect(),
            axis: (0..count).map(|block| first(block).to_string()).collect(),
            sizes: (0..count).map(|block| last(block) + 1 - first(block)).collect(),
        }
    }
}

/// Ranks per host when every host holds the same number of consecutive ranks; blocks of whole hosts
/// then line up with the host boundaries.
fn uniform_host_size(state: &DashboardState, ranks: usize) -> Option<usize> {
    let hosts = &state.run.hosts;
    if hosts.len() < ranks || ranks == 0 {
        return None;
    }
    let per_host = hosts.iter().take(ranks).take_while(|host| **host == hosts[0]).count();
    let uniform = (0..ranks).all(|rank| hosts[rank] == hosts[rank / per_host * per_host]) && ranks.is_multiple_of(per_host);
    let distinct = (0..ranks / per_host).all(|host| (0..host).all(|other| hosts[other * per_host] != hosts[host * per_host]));
    (uniform && distinct).then_some(per_host)
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The finest grouping whose rows fit in `rows` and whose columns (one cell each) fit in `columns`
/// beside their labels; `None` when not even one block fits.
fn fit(state: &DashboardState, pairs: &PairMatrixView, rows: usize, columns: usize) -> Option<Groups> {
    let ranks = pairs.ranks();
    let fits = |groups: &Groups| groups.count() <= rows && label_columns(groups) + groups.count() <= columns;
    let exact = pairs.receivers_per_column() == 1;
    if exact {
        let groups = Groups::ranks(ranks);
        if fits(&groups) {
            return Some(groups);
        }
        let hosts = Groups::hosts(state, ranks);
        if hosts.count() > 1 && hosts.count() < ranks && fits(&hosts) {
            return Some(hosts);
        }
    }
    // Blocks are whole stored columns, and whole hosts when hosts are uniform.
    let stored = pairs.receivers_per_column();
    let unit = uniform_host_size(state, ranks).map_or(stored, |host| host / gcd(host, stored) * stored);
    let digits = ranks.saturating_sub(1).to_string().len();
    let label = 2 * digits + 2;
    let room = rows.min(columns.saturating_sub(label + MARKER_WIDTH + 1));
    if room == 0 || ranks == 0 {
        return None;
    }
    let per_block = ranks.div_ceil(room).div_ceil(unit) * unit;
    let groups = Groups::blocks(ranks, per_block);
    fits(&groups).then_some(groups)
}

const MARKER_WIDTH: usize = 2;

/// Columns before the first cell: a selection marker, the label and a blank.
fn label_columns(groups: &Groups) -> usize {
    MARKER_WIDTH + groups.label_width() + 1
}

/// One cell of the displayed grid.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Shown {
    /// A rank with itself, or a one-rank host with itself: no pair exists.
    SelfPair,
    /// No sender of the row has reported yet.
    NoData,
    Gbps(f64),
}

/// Mean pair rate between every two groups.
fn aggregate(pairs: &PairMatrixView, groups: &Groups) -> Vec<Shown> {
    let count = groups.count();
    let mut sums = vec![0.0; count * count];
    let mut measured = vec![0_usize; count * count];
    let per_column = pairs.receivers_per_column();
    for sender in 0..pairs.ranks() {
        if pairs.latest(sender, 0).is_none() {
            continue;
        }
        let row = groups.group_of_rank[sender];
        for column in 0..pairs.columns() {
            if per_column == 1 && column == sender {
                continue;
            }
            let Some(latest) = pairs.latest(sender, column) else { continue };
            let index = row * count + groups.group_of_rank[column * per_column];
            sums[index] += latest.gbps;
            measured[index] += 1;
        }
    }
    (0..count * count)
        .map(|index| {
            let (row, column) = (index / count, index % count);
            if measured[index] > 0 {
                Shown::Gbps(sums[index] / measured[index] as f64)
            } else if row == column && groups.sizes[row] <= 1 {
                Shown::SelfPair
            } else {
                Shown::NoData
            }
        })
        .collect()
}

/// The rate full colour stands for: the fastest pair between different groups (a host's pairs with
/// itself may run over shared memory and would make every link look slow), else the fastest of all.
fn peak(shown: &[Shown], count: usize) -> f64 {
    let fastest = |between_groups_only: bool| {
        shown
            .iter()
            .enumerate()
            .filter(|(index, _)| !between_groups_only || index / count != index % count)
            .filter_map(|(_, cell)| match cell {
                Shown::Gbps(gbps) if gbps.is_finite() => Some(*gbps),
                _ => None,
            })
            .fold(0.0, f64::max)
    };
    let between = fastest(true);
    if between > 0.0 { between } else { fastest(false) }
}

/// Glyph and colour of a measured rate; `None` when nothing has moved at all yet.
pub(super) fn level(gbps: f64, peak: f64) -> (char, Color) {
    if peak.is_nan() || peak <= 0.0 || !gbps.is_finite() {
        return (LEVELS[LEVELS.len() - 1].1, Color::DarkGray);
    }
    let ratio = gbps / peak;
    LEVELS
        .iter()
        .find(|(lowest, _, _)| ratio >= *lowest)
        .map_or((LEVELS[LEVELS.len() - 1].1, LEVELS[LEVELS.len() - 1].2), |&(_, glyph, colour)| (glyph, colour))
}

/// Lines the panel would like inside its frame: the axis, a row per rank (or host) and the detail line.
pub(super) fn content_height(state: &DashboardState) -> u16 {
    let Some(pairs) = &state.pairs else { return 1 };
    let ranks = pairs.ranks();
    let rows = if ranks <= ROWS_WISHED_MAX { ranks } else { Groups::hosts(state, ranks).count().min(ROWS_WISHED_MAX) };
    u16::try_from(rows + 2).unwrap_or(u16::MAX)
}

/// Widest the panel needs to be, frame and history column included.
pub(super) fn natural_width(state: &DashboardState) -> u16 {
    let Some(pairs) = &state.pairs else { return 0 };
    let rows = usize::from(content_height(state)).saturating_sub(2);
    let groups = fit(state, pairs, rows, usize::MAX / 4);
    let grid = groups.map_or(0, |groups| label_columns(&groups) + 2 * groups.count());
    u16::try_from(grid + 2).unwrap_or(u16::MAX).saturating_add(SIDE_WIDTH)
}

fn title(groups: Option<&Groups>, state: &DashboardState) -> String {
    let hosts = |ranks: usize| {
        uniform_host_size(state, state.pairs.as_ref().map_or(0, PairMatrixView::ranks))
            .filter(|per_host| ranks.is_multiple_of(*per_host) && ranks > *per_host)
            .map(|per_host| format!(", {} hosts", ranks / per_host))
            .unwrap_or_default()
    };
    match groups.map(|groups| groups.grouping) {
        Some(Grouping::Hosts) => "Pairs by host".into(),
        Some(Grouping::Blocks(ranks)) => format!("Pairs by block of {ranks} ranks{}", hosts(ranks)),
        Some(Grouping::Ranks) | None => "Pairs".into(),
    }
}

pub(super) fn render(state: &DashboardState, view: &View, area: Rect, buf: &mut Buffer, chrome: Chrome) {
    if area.is_empty() {
        return;
    }
    let focused = view.focus == Panel::Pairs;
    let pair = (view.selected_sender, view.selected_receiver);
    let inner = chrome::block("Pairs", focused, chrome).inner(area);
    let Some(pairs) = &state.pairs else {
        chrome::block("Pairs", focused, chrome).render(area, buf);
        Line::styled("not an all-to-all run", Style::new().fg(Color::DarkGray)).render(inner, buf);
        return;
    };
    // The axis line above the rows and the detail line below them.
    let rows = usize::from(inner.height).saturating_sub(2);
    let full_width = usize::from(inner.width);
    // The history goes beside the grid only when the grid keeps its square (two-column) cells there.
    let side_room = full_width.saturating_sub(usize::from(SIDE_MIN_WIDTH));
    let side = fit(state, pairs, rows, side_room)
        .filter(|groups| rows >= 3 && label_columns(groups) + 2 * groups.count() <= side_room)
        .map(|groups| (groups, true));
    let fitted = side.or_else(|| fit(state, pairs, rows, full_width).map(|groups| (groups, false)));
    let groups = fitted.as_ref().map(|(groups, _)| groups);
    let shown = groups.map(|groups| aggregate(pairs, groups)).unwrap_or_default();
    let count = groups.map_or(0, Groups::count);
    let peak = peak(&shown, count);

    let mut block = chrome::block(&title(groups, state), focused, chrome);
    let left = width(&title(groups, state)) + 4;
    let legend = legend(peak, state.run.link_gbps, usize::from(area.width).saturating_sub(left));
    if !legend.is_empty() {
        block = block.title_top(Line::styled(legend, Style::new().fg(Color::DarkGray)).right_aligned());
    }
    block.render(area, buf);
    if inner.is_empty() {
        return;
    }
    let Some((groups, with_side)) = &fitted else {
        Line::styled("too small for the pair heatmap", Style::new().fg(Color::DarkGray)).render(inner, buf);
        return;
    };
    let grid_room = if *with_side { full_width - usize::from(SIDE_MIN_WIDTH) } else { full_width };
    let cell_width = if label_columns(groups) + 2 * count <= grid_room { 2 } else { 1 };
    let grid_width = label_columns(groups) + cell_width * count;
    let selected = (
        groups.group_of_rank.get(pair.0).copied(),
        groups.group_of_rank.get(pair.1).copied(),
    );

    let mut lines = inner.rows();
    if let Some(row) = lines.next() {
        axis_line(groups, cell_width, selected.1).render(row, buf);
    }
    for (group, row) in (0..count).zip(lines.by_ref()) {
        let cells = &shown[group * count..(group + 1) * count];
        grid_line(groups, group, cells, peak, cell_width, selected).render(row, buf);
    }
    let detail_row = Rect { y: inner.y + 1 + u16::try_from(count).unwrap_or(u16::MAX), height: 1, ..inner };
    if detail_row.bottom() <= inner.bottom() {
        let text = detail(pairs, pair, groups, &shown, selected);
        let used = width(&text);
        Line::styled(text, Style::new().add_modifier(Modifier::BOLD)).render(detail_row, buf);
        let spare = usize::from(detail_row.width).saturating_sub(used + 2);
        let below = Rect { y: detail_row.bottom(), height: inner.bottom().saturating_sub(detail_row.bottom()), ..inner };
        if !*with_side && below.height >= 2 {
            // Lines below the grid: a caption and a history graph as tall as they allow, within reason.
            side_history(pairs, pair, Rect { height: below.height.min(BELOW_HISTORY_MAX), ..below }, buf);
        } else if !*with_side && spare >= INLINE_SPARKLINE_MIN {
            let graph = Rect {
                x: detail_row.x + u16::try_from(used + 2).unwrap_or(u16::MAX),
                width: u16::try_from(spare).unwrap_or(u16::MAX),
                ..detail_row
            };
            history(pairs, pair, graph, buf);
        }
    }
    if *with_side {
        let x = inner.x + u16::try_from(grid_width + 2).unwrap_or(u16::MAX);
        // Beside the axis and the rows only: the detail line below them may need the whole width.
        let height = u16::try_from(count + 1).unwrap_or(u16::MAX).min(inner.height);
        let side_area = Rect { x, y: inner.y, width: inner.right().saturating_sub(x), height };
        side_history(pairs, pair, side_area, buf);
    }
}

/// `█≥75 ▓≥50 ▒≥25 ░<25 % of peak 9.8 Gbps`, shortened to fit `room` columns, or empty.
fn legend(peak: f64, link_gbps: Option<f64>, room: usize) -> String {
    let peak_text = if peak > 0.0 { format!("peak {} Gbps", number(Some(peak), 1)) } else { "no traffic yet".into() };
    let link = link_gbps.map(|link| format!(" (link {})", speed(link))).unwrap_or_default();
    let forms = [
        format!(" █≥75 ▓≥50 ▒≥25 ░<25 % of {peak_text}{link} "),
        format!(" █≥75 ▓≥50 ▒≥25 ░<25 % of {peak_text} "),
        format!(" colour: % of {peak_text} "),
        format!(" {peak_text} "),
    ];
    forms.into_iter().find(|form| width(form) <= room).unwrap_or_default()
}

fn axis_line(groups: &Groups, cell_width: usize, selected: Option<usize>) -> Line<'static> {
    let prefix = match groups.grouping {
        Grouping::Hosts => "to h",
        Grouping::Ranks | Grouping::Blocks(_) => "to r",
    };
    let lead = label_columns(groups);
    let axis_width = groups.count() * cell_width;
    // Labels go where they fit with a blank between them: the selected column's first, so the eye
    // always finds it, then the others left to right.
    let mut axis = vec![' '; axis_width];
    let mut taken = vec![false; axis_width + 1];
    let order = selected.into_iter().chain((0..groups.count()).filter(|group| Some(*group) != selected));
    for group in order {
        let label: Vec<char> = groups.axis[group].chars().collect();
        let x = group * cell_width;
        let end = x + label.len();
        if end > axis_width || taken[x.saturating_sub(1)..=end].iter().any(|&used| used) {
            continue;
        }
        axis[x..end].copy_from_slice(&label);
        taken[x..end].iter_mut().for_each(|used| *used = true);
    }
    let dim = Style::new().fg(Color::DarkGray);
    let mut spans = vec![Span::styled(format!("{:>width$} ", prefix, width = lead.saturating_sub(1)), dim)];
    let label_at = |group: usize| {
        let x = group * cell_width;
        let label = &groups.axis[group];
        (axis.get(x..x + width(label)).map(|placed| placed.iter().collect::<String>()) == Some(label.clone())).then_some(x)
    };
    match selected.and_then(|group| label_at(group).map(|x| (x, width(&groups.axis[group])))) {
        Some((x, length)) => {
            spans.push(Span::styled(axis[..x].iter().collect::<String>(), dim));
            let highlight = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
            spans.push(Span::styled(axis[x..x + length].iter().collect::<String>(), highlight));
            spans.push(Span::styled(axis[x + length..].iter().collect::<String>(), dim));
        }
        None => spans.push(Span::styled(axis.iter().collect::<String>(), dim)),
    }
    Line::from(spans)
}

fn grid_line(
    groups: &Groups,
    group: usize,
    cells: &[Shown],
    peak: f64,
    cell_width: usize,
    selected: (Option<usize>, Option<usize>),
) -> Line<'static> {
    let is_selected_row = selected.0 == Some(group);
    let marker = if is_selected_row { "▶ " } else { "  " };
    let label_style = if is_selected_row { Style::new().add_modifier(Modifier::BOLD) } else { Style::new() };
    let mut spans = vec![
        Span::styled(marker, Style::new().fg(Color::Cyan)),
        Span::styled(cell(&groups.labels[group], groups.label_width(), Align::Left), label_style),
        Span::raw(" "),
    ];
    for (column, shown) in cells.iter().enumerate() {
        let (glyph, style) = match shown {
            Shown::SelfPair => (' ', Style::new()),
            Shown::NoData => (NO_DATA, Style::new().fg(Color::DarkGray)),
            Shown::Gbps(gbps) => {
                let (glyph, colour) = level(*gbps, peak);
                (glyph, Style::new().fg(colour))
            }
        };
        let style = if is_selected_row && selected.1 == Some(column) { style.add_modifier(Modifier::REVERSED) } else { style };
        let text: String = std::iter::repeat_n(glyph, cell_width).collect();
        spans.push(Span::styled(text, style));
    }
    Line::from(spans)
}

/// The selected pair (`pair`, sender and receiver): `r3→r5 12.4 Gbps p50 14.2 p99 20.1 us`, and the mean of
/// its cell when grouped.
fn detail(
    pairs: &PairMatrixView,
    pair: (usize, usize),
    groups: &Groups,
    shown: &[Shown],
    selected: (Option<usize>, Option<usize>),
) -> String {
    let (sender, receiver) = pair;
    let block = pairs.receivers_per_column();
    let receiver_name = if block == 1 {
        format!("r{receiver}")
    } else {
        let first = pairs.column_of(receiver) * block;
        format!("r{first}-{} mean", (first + block).min(pairs.ranks()) - 1)
    };
    let mut text = format!("r{sender}→{receiver_name} ");
    if sender == receiver {
        text.push_str("a rank does not write to itself");
    } else {
        match pairs.latest(sender, pairs.column_of(receiver)) {
            None => text.push_str("(no telemetry yet)"),
            Some(latest) => {
                let worst = if block == 1 { "" } else { "worst " };
                let (gbps, p50, p99) =
                    (number(Some(latest.gbps), 2), number(latest.lat_p50_us, 1), number(latest.lat_p99_us, 1));
                let _ = write!(text, "{gbps} Gbps  {worst}p50 {p50}  p99 {p99} us");
            }
        }
    }
    if groups.grouping != Grouping::Ranks {
        if let (Some(row), Some(column)) = selected {
            let mean = match shown.get(row * groups.count() + column) {
                Some(Shown::Gbps(gbps)) => number(Some(*gbps), 2),
                _ => number(None, 2),
            };
            let (from, to) = (short_label(groups, row), short_label(groups, column));
            let _ = write!(text, " · {from}→{to} mean {mean}");
        }
    }
    text
}

/// `h3` for a host, `r16-23` for a block.
fn short_label(groups: &Groups, group: usize) -> String {
    match groups.grouping {
        Grouping::Hosts => format!("h{group}"),
        Grouping::Ranks | Grouping::Blocks(_) => groups.labels[group].clone(),
    }
}

/// The selected pair's history as a sparkline over `area`, scaled to its own highest point.
fn history(pairs: &PairMatrixView, (sender, receiver): (usize, usize), area: Rect, buf: &mut Buffer) {
    let Some(points) = pairs.history(sender, receiver) else { return };
    // Sparkline bars are integers: hundredths of a Gbps keep the shape of small rates.
    let hundredths = |gbps: f32| if gbps.is_finite() { (f64::from(gbps.max(0.0)) * 100.0).round() as u64 } else { 0 };
    let shown = points.len().saturating_sub(usize::from(area.width));
    let data: Vec<u64> = points.iter().skip(shown).map(|&gbps| hundredths(gbps)).collect();
    let top = data.iter().copied().max().unwrap_or(0).max(1);
    Sparkline::default().data(data).max(top).style(Style::new().fg(Color::Green)).render(area, buf);
}

/// A caption and the selected pair's history, beside the grid.
fn side_history(pairs: &PairMatrixView, pair: (usize, usize), area: Rect, buf: &mut Buffer) {
    let mut rows = area.rows();
    let Some(caption_row) = rows.next() else { return };
    let caption = match pairs.history(pair.0, pair.1) {
        Some(points) => {
            let top = points.iter().copied().filter(|gbps| gbps.is_finite()).fold(0.0_f32, f32::max);
            format!("r{}→r{} history, top {} Gbps", pair.0, pair.1, number(Some(f64::from(top)), 1))
        }
        None => format!("no histories beyond {} ranks", crate::state::PAIR_HISTORY_MAX_RANKS),
    };
    Line::styled(truncate(&caption, usize::from(area.width)), Style::new().fg(Color::DarkGray)).render(caption_row, buf);
    let graph = Rect { y: caption_row.y + 1, height: area.height.saturating_sub(1), ..area };
    if !graph.is_empty() {
        history(pairs, pair, graph, buf);
    }
}
