//! The GPU panel, under the channel gauges while some rank reports GPU-side figures: the proxy's request
//! queue (its depth as a bar against the ring's slots, requests/s the CPU proxy pops, the GPU's Quiet
//! calls/s, requests the proxy holds) and NVLink pairs (GB/s one rank's GPU writes into a peer's, as a bar
//! against the pair's peak; with no known peak the rate stands alone and the bar's place says so), each
//! pair with its recent history at the end of the row when the row has room for it. A pair's history is
//! drawn against its peak; histories of pairs without one share a scale (the highest rate any of them
//! had), so that a slow pair looks slow beside the others. When no row has a bar at all, the history
//! takes the bar's columns.
//!
//! More rows than lines: the rows start at the selected rank's (↑↓ in the gauges), and the title says
//! which are shown.

use std::collections::VecDeque;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::chrome::{self, Chrome};
use super::header::bar;
use super::text::{cell, number, rate, speed, width, Align};
use crate::state::{DashboardState, NvlinkView, PeerState, QueueView, NVLINK_HISTORY_LEN};
use crate::view::View;

const MIN_BAR: usize = 8;
/// Intervals of history drawn at the end of an NVLink row (2.4 s at the default interval).
const HISTORY_WIDTH: usize = 24;
/// The history is drawn only while the bar keeps at least this many columns: the bar says more.
const HISTORY_MIN_BAR: usize = 20;
/// With no bar on any row, a history narrower than this is left out.
const HISTORY_MIN: usize = 8;
/// What stands where a pair without a known peak would have its bar; the short form below 12 columns.
const NO_PEAK: &str = "peak unknown";
const NO_PEAK_SHORT: &str = "no peak";
/// Sparkline levels, lowest first; an idle interval is blank.
const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

enum Row<'a> {
    Queue(&'a QueueView),
    Nvlink(&'a NvlinkView),
}

impl Row<'_> {
    fn rank(&self) -> usize {
        match self {
            Row::Queue(queue) => queue.rank,
            Row::Nvlink(pair) => pair.rank,
        }
    }
}

/// Queues first (a proxy run has one), then NVLink pairs by rank and peer.
fn rows(state: &DashboardState) -> Vec<Row<'_>> {
    state.queues.iter().map(Row::Queue).chain(state.nvlink.iter().map(Row::Nvlink)).collect()
}

/// The first of `visible` rows to draw: the selected rank's first row, as far down as the rows allow.
fn first_shown(view: &View, rows: &[Row<'_>], visible: usize) -> usize {
    if rows.len() <= visible {
        return 0;
    }
    let selected = rows.iter().position(|row| row.rank() == view.selected_rank);
    selected.unwrap_or(0).min(rows.len() - visible)
}

/// Lines the panel would like inside its frame; 0 when there is nothing to show (no panel).
pub(super) fn content_height(state: &DashboardState) -> u16 {
    u16::try_from(state.queues.len() + state.nvlink.len()).unwrap_or(u16::MAX)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Detail {
    /// `18/1024 waiting   12.3k req/s    410 Quiet/s  3 held`, `371.2 GB/s   82% of 450`
    Full,
    /// `18/1024 12.3k req/s 410 Quiet/s 3 held`, `371.2 GB/s 82%`
    Short,
    /// Only the depth or the rate.
    Rate,
}

/// Cell widths shared by the queue rows, so that their numbers line up.
struct Widths {
    slots: usize,
    held: usize,
}

impl Widths {
    fn of(state: &DashboardState) -> Widths {
        Widths {
            slots: state.queues.iter().map(|queue| width(&slots(queue))).max().unwrap_or(0),
            held: state.queues.iter().map(|queue| queue.held.to_string().len()).max().unwrap_or(0),
        }
    }
}

fn slots(queue: &QueueView) -> String {
    format!("{}/{}", queue.depth, queue.capacity)
}

fn label(row: &Row<'_>) -> String {
    match row {
        Row::Queue(queue) => format!("r{} queue", queue.rank),
        Row::Nvlink(pair) => format!("r{} GPU{}→GPU{}", pair.rank, pair.gpu, pair.peer_gpu),
    }
}

/// The pair's peak when it can scale a bar.
fn peak(pair: &NvlinkView) -> Option<f64> {
    pair.peak_gbytes_per_s.filter(|peak| peak.is_finite() && *peak > 0.0)
}

fn numbers(row: &Row<'_>, detail: Detail, widths: &Widths) -> String {
    match row {
        Row::Queue(queue) => {
            let slots = cell(&slots(queue), widths.slots, Align::Right);
            let requests = cell(&rate(queue.requests_per_s), 6, Align::Right);
            let quiet = cell(&rate(queue.quiet_calls_per_s), 6, Align::Right);
            let held = cell(&queue.held.to_string(), widths.held, Align::Right);
            match detail {
                Detail::Full => format!(" {slots} waiting  {requests} req/s  {quiet} Quiet/s  {held} held"),
                Detail::Short => format!(" {slots} {} req/s {} Quiet/s {} held", rate(queue.requests_per_s), rate(queue.quiet_calls_per_s), queue.held),
                Detail::Rate => format!(" {slots}"),
            }
        }
        Row::Nvlink(pair) => {
            let rate = format!(" {} GB/s", cell(&number(Some(pair.gbytes_per_s), 1), 6, Align::Right));
            let Some(peak) = peak(pair) else { return rate };
            let percent = number(Some(100.0 * pair.gbytes_per_s / peak), 0);
            match detail {
                Detail::Full => format!("{rate}  {}% of {}", cell(&percent, 3, Align::Right), speed(peak)),
                Detail::Short => format!("{rate} {percent}%"),
                Detail::Rate => rate,
            }
        }
    }
}

struct RowLayout {
    label: usize,
    /// What histories without a known peak are scaled to.
    unknown_peak_scale: f64,
    detail: Detail,
    /// Every row's numbers are padded to this, so that the histories line up.
    numbers: usize,
    bar: usize,
    history: usize,
}

impl RowLayout {
    fn fit(state: &DashboardState, rows: &[Row<'_>], columns: usize) -> RowLayout {
        let widths = Widths::of(state);
        let label = rows.iter().map(|row| width(&label(row))).max().unwrap_or(0);
        let numbers_width = |detail| rows.iter().map(|row| width(&numbers(row, detail, &widths))).max().unwrap_or(0);
        let has_history = !state.nvlink.is_empty();
        // Without a queue or a known peak every row's bar is "peak unknown": the history gets the room.
        let any_bar = !state.queues.is_empty() || state.nvlink.iter().any(|pair| peak(pair).is_some());
        let unknown_peak_scale = unknown_peak_scale(state);
        for detail in [Detail::Full, Detail::Short] {
            let numbers = numbers_width(detail);
            let fixed = 2 + label + 1 + numbers;
            if columns < fixed + MIN_BAR {
                continue;
            }
            let (bar, history) = if detail != Detail::Full || !has_history {
                (columns - fixed, 0)
            } else if !any_bar {
                let bar = width(NO_PEAK);
                let history = columns.saturating_sub(fixed + bar + 1).min(NVLINK_HISTORY_LEN);
                if history >= HISTORY_MIN { (bar, history) } else { (columns - fixed, 0) }
            } else if columns >= fixed + HISTORY_MIN_BAR + 1 + HISTORY_WIDTH {
                (columns - fixed - 1 - HISTORY_WIDTH, HISTORY_WIDTH)
            } else {
                (columns - fixed, 0)
            };
            return RowLayout { label, unknown_peak_scale, detail, numbers, bar, history };
        }
        RowLayout { label, unknown_peak_scale, detail: Detail::Rate, numbers: numbers_width(Detail::Rate), bar: 0, history: 0 }
    }
}

/// The last `columns` points of `history` as sparkline characters, scaled to `top`.
fn sparkline(history: &VecDeque<f64>, top: f64, columns: usize) -> String {
    let shown = history.len().saturating_sub(columns);
    let points: String = history
        .iter()
        .skip(shown)
        .map(|&value| {
            if !value.is_finite() || value <= 0.0 || top <= 0.0 {
                return ' ';
            }
            let level = ((value / top).min(1.0) * LEVELS.len() as f64).ceil() as usize;
            LEVELS[level.clamp(1, LEVELS.len()) - 1]
        })
        .collect();
    cell(&points, columns, Align::Right)
}

fn row_line(row: &Row<'_>, state: &DashboardState, layout: &RowLayout, widths: &Widths) -> Line<'static> {
    let rank = row.rank();
    // Peer views are indexed by rank (`Ingest::begin`); a search would cost a scan per row.
    let peer = state.peers.get(rank).filter(|peer| peer.rank == rank);
    let label_style = match peer.map(|peer| peer.state) {
        Some(PeerState::Lost) => Style::new().fg(Color::Red),
        Some(PeerState::Done) => Style::new().add_modifier(Modifier::DIM),
        _ => Style::new(),
    };
    let mut spans = vec![Span::raw("  "), Span::styled(cell(&label(row), layout.label, Align::Left), label_style), Span::raw(" ")];
    if layout.bar > 0 {
        match row {
            Row::Queue(queue) => {
                let ratio = if queue.capacity == 0 { 0.0 } else { queue.depth as f64 / queue.capacity as f64 };
                spans.extend(bar(ratio, layout.bar));
            }
            Row::Nvlink(pair) => {
                if let Some(peak) = peak(pair) {
                    spans.extend(bar(pair.gbytes_per_s / peak, layout.bar));
                } else {
                    let text = if layout.bar >= width(NO_PEAK) { NO_PEAK } else { NO_PEAK_SHORT };
                    spans.push(Span::styled(cell(text, layout.bar, Align::Left), Style::new().fg(Color::DarkGray)));
                }
            }
        }
    }
    spans.push(Span::raw(cell(&numbers(row, layout.detail, widths), layout.numbers, Align::Left)));
    if layout.history > 0 {
        if let Row::Nvlink(pair) = row {
            let top = peak(pair).unwrap_or(layout.unknown_peak_scale);
            spans.push(Span::raw(" "));
            spans.push(Span::styled(sparkline(&pair.history, top, layout.history), Style::new().fg(Color::Green)));
        }
    }
    Line::from(spans)
}

/// What the bars and histories are drawn against, for the panel's title: bars only where the layout
/// draws any, and never a claim of a peak nobody knows.
fn scale_label(state: &DashboardState, layout: &RowLayout) -> String {
    let unknown = state.nvlink.iter().filter(|pair| peak(pair).is_none()).count();
    let known = state.nvlink.len() - unknown;
    let mut bars = Vec::new();
    if !state.queues.is_empty() {
        bars.push("ring slots");
    }
    match (known, unknown) {
        (0, _) => {}
        (_, 0) => bars.push("NVLink peak"),
        _ => bars.push("NVLink peak where known"),
    }
    let mut parts = Vec::new();
    if layout.bar > 0 && !bars.is_empty() {
        parts.push(format!("bars: {}", bars.join(", ")));
    }
    if unknown > 0 {
        if known == 0 {
            parts.push("NVLink peak unknown".to_string());
        }
        if layout.history > 0 && layout.unknown_peak_scale > 0.0 {
            let top = number(Some(layout.unknown_peak_scale), 1);
            parts.push(if known == 0 { format!("history top {top} GB/s") } else { format!("no peak: history top {top} GB/s") });
        }
    }
    parts.join(" · ")
}

/// What the histories of pairs without a known peak are drawn against: the highest rate any of them had,
/// so that a slow pair looks slow beside the others (the channel gauges do the same without a link speed).
fn unknown_peak_scale(state: &DashboardState) -> f64 {
    state
        .nvlink
        .iter()
        .filter(|pair| peak(pair).is_none())
        .flat_map(|pair| pair.history.iter().chain([&pair.gbytes_per_s]))
        .copied()
        .filter(|rate| rate.is_finite())
        .fold(0.0, f64::max)
}

pub(super) fn render(state: &DashboardState, view: &View, area: Rect, buf: &mut Buffer, chrome: Chrome) {
    if area.is_empty() {
        return;
    }
    let rows = rows(state);
    let mut block = chrome::block("GPU", false, chrome);
    let inner = block.inner(area);
    if rows.is_empty() {
        block.render(area, buf);
        Line::styled("no GPU figures", Style::new().fg(Color::DarkGray)).render(inner, buf);
        return;
    }
    let visible = usize::from(inner.height);
    let first = first_shown(view, &rows, visible);
    let layout = RowLayout::fit(state, &rows, usize::from(inner.width));
    let scale = scale_label(state, &layout);
    let title = match (rows.len() > visible && visible > 0, scale.is_empty()) {
        (false, _) => scale,
        (true, true) => format!("{}-{} of {}", first + 1, first + visible, rows.len()),
        (true, false) => format!("{}-{} of {} · {scale}", first + 1, first + visible, rows.len()),
    };
    if !title.is_empty() {
        let title = Line::styled(format!(" {title} "), Style::new().fg(Color::DarkGray));
        block = block.title_top(title.right_aligned());
    }
    block.render(area, buf);
    let widths = Widths::of(state);
    for (row, line_area) in rows[first..].iter().zip(inner.rows()) {
        row_line(row, state, &layout, &widths).render(line_area, buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histories_scale_to_the_top_and_keep_only_the_latest_points() {
        let history = [0.0, 50.0, 100.0, 450.0, 900.0, f64::NAN].into_iter().collect();
        assert_eq!(sparkline(&history, 450.0, 6), " ▁▂██ ");
        assert_eq!(sparkline(&history, 450.0, 3), "██ ");
        assert_eq!(sparkline(&history, 0.0, 4), "    ", "no scale, nothing to draw");
        assert_eq!(sparkline(&[1.0].into_iter().collect(), 1.0, 3), "  █", "short histories end at the right");
    }
}
