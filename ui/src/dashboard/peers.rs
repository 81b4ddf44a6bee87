//! One row per rank: host, throughput, latency percentiles, telemetry drops, when it was last heard
//! from and whether it is alive, lost or done.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::Widget;

use super::chrome::{self, Chrome};
use super::grid::{self, Column};
use super::text::{ago, number, Align};
use crate::state::{DashboardState, Panel, PeerState, PeerView};
use crate::view::View;

const HOST_MIN: usize = 6;

/// Lines the panel would like inside its frame.
pub(super) fn content_height(state: &DashboardState) -> u16 {
    u16::try_from(state.peers.len() + 1).unwrap_or(u16::MAX)
}

/// Peers whose cells size the panel's width (a 4096-host run has 32768 ranks: formatting every row every
/// frame would cost tens of milliseconds). The rank and host columns are sized over every peer without
/// formatting; the others over these and the rows on screen.
const WIDTH_SAMPLE: usize = 256;

/// Widest the panel needs to be, frame included.
pub(super) fn natural_width(state: &DashboardState) -> u16 {
    let sample = rows(state, 0..state.peers.len().min(WIDTH_SAMPLE));
    u16::try_from(grid::total_width(&columns(state, &sample)) + 2).unwrap_or(u16::MAX)
}

fn host(state: &DashboardState, peer: &PeerView) -> String {
    if !peer.host.is_empty() {
        return peer.host.clone();
    }
    state.run.hosts.get(peer.rank).cloned().unwrap_or_else(|| "?".into())
}

/// The rows of the peers in `range` (by position).
fn rows(state: &DashboardState, range: std::ops::Range<usize>) -> Vec<Vec<(String, Style)>> {
    let plain = Style::new();
    let red = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
    state
        .peers
        .get(range)
        .unwrap_or_default()
        .iter()
        .map(|peer| {
            let doing = peer.phase.as_deref().map_or(String::new(), |phase| format!(" ({phase})"));
            let (status, status_style) = match peer.state {
                PeerState::Alive => ("alive".to_string(), Style::new().fg(Color::Green)),
                // Not judged yet: rank 0 names it hung only after --hang-timeout.
                PeerState::Slow => (format!("slow{doing}"), Style::new().fg(Color::Yellow)),
                PeerState::Silent => (
                    format!("silent {} s{doing}", peer.last_seen.as_secs()),
                    Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
                ),
                PeerState::Lost => ("LOST".to_string(), red),
                PeerState::Done => ("done".to_string(), Style::new().add_modifier(Modifier::DIM)),
            };
            let row_style = if peer.state == PeerState::Done { Style::new().add_modifier(Modifier::DIM) } else { plain };
            vec![
                (peer.rank.to_string(), row_style),
                (host(state, peer), row_style),
                (number(Some(peer.gbps), 1), row_style),
                (number(peer.lat_p50_us, 1), row_style),
                (number(peer.lat_p99_us, 1), row_style),
                (peer.drops.to_string(), if peer.drops > 0 { red } else { row_style }),
                (ago(peer.last_seen), row_style),
                (status, status_style),
            ]
        })
        .collect()
}

const TITLES: [(&str, Align); 8] = [
    ("rank", Align::Right),
    ("host", Align::Left),
    ("Gbps", Align::Right),
    ("p50 us", Align::Right),
    ("p99 us", Align::Right),
    ("drops", Align::Right),
    ("seen", Align::Right),
    ("state", Align::Left),
];

/// Columns as wide as `rows` need, the rank and host columns as wide as every peer's.
fn columns(state: &DashboardState, rows: &[Vec<(String, Style)>]) -> Vec<Column> {
    let mut columns: Vec<Column> = TITLES
        .iter()
        .enumerate()
        .map(|(index, (title, align))| Column::fitted(title, *align, rows.iter().map(|row| row[index].0.as_str())))
        .collect();
    let rank_width = state.peers.iter().map(|peer| peer.rank).max().map_or(1, |rank| rank.checked_ilog10().map_or(1, |log| log as usize + 1));
    // Kept since the peers were set up: measuring 32768 ranks' names twice a frame cost more than the rest of it.
    let host_width = state.peers_host_width.unwrap_or_else(|| state.measure_peers_host_width());
    columns[0].width = columns[0].width.max(rank_width);
    columns[1].width = columns[1].width.max(host_width);
    columns
}

pub(super) fn render(state: &DashboardState, view: &View, area: Rect, buf: &mut Buffer, chrome: Chrome) {
    if area.is_empty() {
        return;
    }
    let block = chrome::block("Peers", view.focus == Panel::Peers, chrome);
    let inner = block.inner(area);
    block.render(area, buf);
    if inner.is_empty() {
        return;
    }
    if state.peers.is_empty() {
        Line::styled("no peers yet", Style::new().fg(Color::DarkGray)).render(inner, buf);
        return;
    }
    // Only the rows on screen are built.
    let selected = state.peers.iter().position(|peer| peer.rank == view.selected_rank);
    let visible = usize::from(inner.height.saturating_sub(1));
    let offset = grid::scroll_offset(selected, visible);
    let mut rows = rows(state, offset..(offset + visible).min(state.peers.len()));
    let mut columns = columns(state, &rows);
    // Too narrow: first squeeze the host names, then give up the last-seen column, then p50.
    let available = usize::from(inner.width);
    let overflow = grid::total_width(&columns).saturating_sub(available);
    columns[1].width = columns[1].width.saturating_sub(overflow).max(HOST_MIN.min(columns[1].width));
    for dropped in [6, 3] {
        if grid::total_width(&columns) > available {
            columns.remove(dropped);
            for row in &mut rows {
                row.remove(dropped);
            }
        }
    }

    let mut lines = inner.rows();
    if let Some(header_row) = lines.next() {
        grid::header(&columns).render(header_row, buf);
    }
    for ((index, row), line_area) in rows.into_iter().enumerate().map(|(at, row)| (at + offset, row)).zip(lines) {
        grid::row(Some(index) == selected, &columns, row).render(line_area, buf);
    }
}
