//! Live gauges: one row per (rank, channel), grouped under the host the rank runs on, each a bar of
//! its throughput against the link speed (or, when that is unknown, against the highest rate seen),
//! with NIC, operations per second and operations in flight; below them, when there is room, the
//! selected channel's throughput history.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Sparkline, Widget};

use super::chrome::{self, Chrome};
use super::fleet;
use super::grid;
use super::header::bar;
use super::text::{cell, number, rate, speed, Align};
use crate::state::gauges::{id_text, GaugeIndex, GaugeRow};
use crate::state::{ChannelView, DashboardState, Panel, PeerState};
use crate::view::View;

/// Lines the history would like below the gauges: a caption and the graph.
pub(super) const SPARKLINE_HEIGHT: u16 = 8;
const SPARKLINE_MIN: u16 = 4;
/// A panel this tall shows the history even when its gauges have to scroll.
const SPARKLINE_MIN_PANEL: u16 = 16;
const MIN_BAR: usize = 8;
const NIC_MAX: usize = 16;
const NIC_SHORT: usize = 10;

/// What the bars are drawn against.
struct Scale {
    gbps: f64,
    /// False when the link speed is unknown and the scale is the highest rate seen.
    is_link: bool,
}

impl Scale {
    fn of(state: &DashboardState, index: &GaugeIndex) -> Scale {
        if let Some(link) = state.run.link_gbps.filter(|link| link.is_finite() && *link > 0.0) {
            return Scale { gbps: link, is_link: true };
        }
        let peak = index.peak_gbps();
        Scale { gbps: if peak > 0.0 { peak } else { 1.0 }, is_link: false }
    }

    fn label(&self) -> String {
        if self.is_link {
            format!("bars: {} Gbps link", speed(self.gbps))
        } else {
            format!("bars: peak {} Gbps (link speed unknown)", number(Some(self.gbps), 1))
        }
    }
}

/// The state's own index when it matches its views (kept by ingestion), else one built for this frame.
fn with_index<T>(state: &DashboardState, read: impl FnOnce(&GaugeIndex) -> T) -> T {
    if state.gauges.is_current(state) {
        read(&state.gauges)
    } else {
        read(&GaugeIndex::build(state))
    }
}

/// Lines the panel would like inside its frame.
pub(super) fn content_height(state: &DashboardState, view: &View) -> u16 {
    if fleet::shows(state, view) {
        return fleet::content_height(state);
    }
    let rows = with_index(state, |index| host_rows(state, view, index).len());
    u16::try_from(rows).unwrap_or(u16::MAX).max(1)
}

/// The rows shown: every row, or only the drilled-into host's (its heading and channels) when a large
/// run's fleet view has one drilled into.
fn host_rows(state: &DashboardState, view: &View, index: &GaugeIndex) -> std::ops::Range<usize> {
    let all = 0..index.rows.len();
    let Some(name) = fleet::drilled_host(state, view) else { return all };
    let Some(host) = index.hosts.iter().position(|host| host.name == name) else { return all };
    let Some(start) = index.rows.iter().position(|row| *row == GaugeRow::Host(host)) else { return all };
    let end = index.rows[start + 1..].iter().position(|row| matches!(row, GaugeRow::Host(_))).map_or(index.rows.len(), |n| start + 1 + n);
    start..end
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Detail {
    /// `87.3 Gbps  12.3k op/s  3 in flight`
    Full,
    /// `87.3G 12.3k/s 3 inf`
    Short,
    /// Only the rate.
    Rate,
}

struct RowLayout {
    id: usize,
    nic: usize,
    bar: usize,
    detail: Detail,
    in_flight: usize,
}

impl RowLayout {
    fn fit(index: &GaugeIndex, columns: usize) -> RowLayout {
        let id = index.id_width;
        let nic = index.nic_width.min(NIC_MAX);
        let in_flight = index.in_flight_width();
        let candidates = [
            RowLayout { id, nic, bar: 0, detail: Detail::Full, in_flight },
            RowLayout { id, nic: nic.min(NIC_SHORT), bar: 0, detail: Detail::Short, in_flight },
            RowLayout { id, nic: 0, bar: 0, detail: Detail::Short, in_flight },
        ];
        let mut layout = candidates
            .into_iter()
            .find(|layout| columns >= layout.fixed_width() + MIN_BAR)
            .unwrap_or(RowLayout { id, nic: 0, bar: 0, detail: Detail::Rate, in_flight });
        layout.bar = columns.saturating_sub(layout.fixed_width());
        if layout.bar < MIN_BAR {
            layout.bar = 0;
        }
        layout
    }

    /// Everything on a row but the bar.
    fn fixed_width(&self) -> usize {
        let marker = 2;
        let nic = if self.nic > 0 { self.nic + 1 } else { 0 };
        let numbers = match self.detail {
            Detail::Full => 1 + 10 + 2 + 11 + 2 + self.in_flight + 10,
            Detail::Short => 1 + 6 + 1 + 8 + 1 + self.in_flight + 4,
            Detail::Rate => 1 + 6,
        };
        marker + self.id + 1 + nic + numbers
    }
}

fn channel_line(view: &ChannelView, selected: bool, state: &DashboardState, layout: &RowLayout, scale: &Scale) -> Line<'static> {
    // Peers are indexed by rank (`Ingest::begin`); a search would cost a scan per row.
    let peer = state.peers.get(view.rank).filter(|peer| peer.rank == view.rank);
    let peer_state = peer.or_else(|| state.peers.iter().find(|peer| peer.rank == view.rank)).map(|peer| peer.state);
    let id_style = match peer_state {
        Some(PeerState::Lost) => Style::new().fg(Color::Red),
        Some(PeerState::Done) => Style::new().add_modifier(Modifier::DIM),
        _ if selected => Style::new().add_modifier(Modifier::BOLD),
        _ => Style::new(),
    };
    let marker = if selected { "▶ " } else { "  " };
    let mut spans = vec![
        Span::styled(marker, Style::new().fg(Color::Cyan)),
        Span::styled(cell(&id_text(view), layout.id, Align::Left), id_style),
        Span::raw(" "),
    ];
    if layout.nic > 0 {
        spans.push(Span::styled(cell(&view.nic, layout.nic, Align::Left), Style::new().fg(Color::Blue)));
        spans.push(Span::raw(" "));
    }
    if layout.bar > 0 {
        spans.extend(bar(view.gbps / scale.gbps, layout.bar));
    }
    let gbps = number(Some(view.gbps), 1);
    let in_flight = view.in_flight.to_string();
    let numbers = match layout.detail {
        Detail::Full => format!(
            " {} Gbps  {} op/s  {} in flight",
            cell(&gbps, 5, Align::Right),
            cell(&rate(view.ops_per_s), 6, Align::Right),
            cell(&in_flight, layout.in_flight, Align::Right),
        ),
        Detail::Short => format!(
            " {}G {}/s {} inf",
            cell(&gbps, 5, Align::Right),
            cell(&rate(view.ops_per_s), 6, Align::Right),
            cell(&in_flight, layout.in_flight, Align::Right),
        ),
        Detail::Rate => format!(" {}G", cell(&gbps, 5, Align::Right)),
    };
    spans.push(Span::raw(numbers));
    Line::from(spans)
}

fn host_line(name: &str, ranks: &[usize]) -> Line<'static> {
    let ranks: Vec<String> = ranks.iter().map(ToString::to_string).collect();
    let label = if ranks.len() == 1 { "rank" } else { "ranks" };
    Line::from(vec![
        Span::styled(name.to_string(), Style::new().add_modifier(Modifier::BOLD)),
        Span::styled(format!("  {label} {}", ranks.join(", ")), Style::new().fg(Color::DarkGray)),
    ])
}

pub(super) fn render(state: &DashboardState, view: &View, area: Rect, buf: &mut Buffer, chrome: Chrome) {
    if area.is_empty() {
        return;
    }
    // A large run: the fleet view in the gauges' place (the one place that chooses it).
    if fleet::shows(state, view) {
        fleet::render(state, view, area, buf, chrome);
        return;
    }
    with_index(state, |index| render_with(state, view, index, area, buf, chrome));
}

fn render_with(state: &DashboardState, view: &View, index: &GaugeIndex, area: Rect, buf: &mut Buffer, chrome: Chrome) {
    let focused = view.focus == Panel::Gauges;
    let scale = Scale::of(state, index);
    let inner = chrome::block("Live channels", focused, chrome).inner(area);
    let shown = host_rows(state, view, index);
    let first_row = shown.start;
    let drilled = first_row > 0 || shown.end < index.rows.len();
    let entries = &index.rows[shown];

    let sparkline_height = if chrome == Chrome::Boxed && !entries.is_empty() {
        let spare = inner.height.saturating_sub(u16::try_from(entries.len()).unwrap_or(u16::MAX));
        if spare >= SPARKLINE_MIN {
            // Lines the gauges do not need make the history taller (finer) rather than staying blank.
            spare
        } else if inner.height >= SPARKLINE_MIN_PANEL {
            // The gauges scroll anyway (a p5 has 32 channels a rank); the history still earns its lines.
            SPARKLINE_MIN
        } else {
            0
        }
    } else {
        0
    };
    let [list_area, sparkline_area] =
        Layout::vertical([Constraint::Fill(1), Constraint::Length(sparkline_height)]).areas(inner);

    // The selected channel stays on screen: scroll just far enough that it is the last visible row.
    let visible = usize::from(list_area.height);
    let selected_entry = index
        .view(state, view.selected_rank, view.selected_channel)
        .and_then(|at| index.row_of(at))
        .and_then(|row| row.checked_sub(first_row))
        .filter(|&row| row < entries.len());
    let offset = grid::scroll_offset(selected_entry, visible);

    let mut block = chrome::block(if drilled { "Live channels of one host (Esc: the fleet)" } else { "Live channels" }, focused, chrome);
    if !entries.is_empty() {
        // One right-aligned title: two titles on one border overwrite each other on narrow terminals.
        let position = if entries.len() > visible && visible > 0 {
            let last = (offset + visible).min(entries.len());
            format!("{}-{} of {} · ", offset + 1, last, entries.len())
        } else {
            String::new()
        };
        let label = Line::styled(format!(" {position}{} ", scale.label()), Style::new().fg(Color::DarkGray));
        block = block.title_top(label.right_aligned());
    }
    block.render(area, buf);

    if entries.is_empty() {
        Line::styled("no channel telemetry yet", Style::new().fg(Color::DarkGray)).render(list_area, buf);
        return;
    }
    let layout = RowLayout::fit(index, usize::from(list_area.width));
    for (entry, row) in entries.iter().skip(offset).zip(list_area.rows()) {
        let line = match *entry {
            GaugeRow::Host(host) => {
                let host = &index.hosts[host];
                host_line(&host.name, &host.ranks)
            }
            GaugeRow::Channel(at) => {
                let channel = &state.channels[at];
                let selected = channel.rank == view.selected_rank && channel.channel == view.selected_channel;
                channel_line(channel, selected, state, &layout, &scale)
            }
        };
        line.render(row, buf);
    }
    render_history(state, view, index, sparkline_area, buf, &scale);
}

/// The channel the selection points at; failing an exact match, the selected rank's first channel
/// (without a scan over the channels).
fn selected_view<'a>(state: &'a DashboardState, view: &View, index: &GaugeIndex) -> Option<&'a ChannelView> {
    let at = index
        .view(state, view.selected_rank, view.selected_channel)
        .or_else(|| index.first_view_of(state, view.selected_rank))?;
    state.channels.get(at)
}

fn render_history(state: &DashboardState, shown: &View, index: &GaugeIndex, area: Rect, buf: &mut Buffer, scale: &Scale) {
    let Some(view) = selected_view(state, shown, index) else { return };
    let mut rows = area.rows();
    let Some(caption_row) = rows.next() else { return };
    let caption = format!(
        "r{} c{} {} history: {} samples, top {} Gbps",
        view.rank,
        view.channel,
        view.nic,
        view.history.len(),
        speed(scale.gbps)
    );
    Line::styled(caption, Style::new().fg(Color::DarkGray)).render(caption_row, buf);
    let graph = Rect { y: caption_row.y + 1, height: area.height.saturating_sub(1), ..area };
    if graph.is_empty() {
        return;
    }
    // Sparkline bars are integers: hundredths of a Gbps keep the shape of small rates.
    let hundredths = |gbps: f64| if gbps.is_finite() { (gbps.max(0.0) * 100.0).round() as u64 } else { 0 };
    let shown = view.history.len().saturating_sub(usize::from(graph.width));
    let data: Vec<u64> = view.history.iter().skip(shown).map(|&gbps| hundredths(gbps)).collect();
    Sparkline::default()
        .data(data)
        .max(hundredths(scale.gbps).max(1))
        .style(Style::new().fg(Color::Green))
        .render(graph, buf);
}
