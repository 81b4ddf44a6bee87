//! The live dashboard rank 0 shows while a run goes on: a header, per-channel gauges, peers, the
//! results table and the log, drawn from a [`DashboardState`] (the data) under a [`View`] (focus,
//! selections, overlays), which [`Key`](crate::state::Key)s steer through [`handle_key`]. Drawing keeps
//! no state of its own (scrolling follows the selection and the sweep), so any frame can be redrawn at
//! any size from the data and the view alone.
//!
//! Layout: narrower than 150 columns the panels stack (gauges, peers, results, log); wider, gauges
//! and peers sit side by side above a full-width results table. Below 30 lines of body each panel is
//! framed by a single titled rule instead of a box, and the throughput history is left out.
//!
//! All-to-all runs add the pair heatmap: wide, it sits left of the gauges; narrow, it takes the gauges'
//! place, and the gauges come back while they have the focus.
//!
//! Runs whose ranks report GPU-side figures (the proxy's request queue, NVLink pairs) add the GPU panel:
//! wide, under the gauges; narrow, right after the top panel. It takes no focus; without such figures
//! it is not drawn and the layout is exactly as above.

mod chrome;
pub mod fleet;
mod gauges;
mod gpu;
mod grid;
mod header;
mod heatmap;
mod help;
mod keys;
mod log;
mod peers;
mod results;
/// The tests' fixture dashboards; not part of the product.
#[cfg(test)]
pub(crate) mod sample;
mod selection;
mod sweep;
/// Cells, numbers and durations as every panel writes them (the many-node monitor's fleet overview too).
pub(crate) use crate::text;
mod topology;
#[cfg(test)]
mod tests;

use efatop_proto::Experiment;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;
use ratatui::Frame;

use crate::state::{DashboardState, Panel};
use crate::view::View;
use chrome::Chrome;

pub use keys::handle_key;

/// From this width on, gauges and peers sit side by side.
const SIDE_BY_SIDE_MIN_WIDTH: u16 = 150;
/// From this body height on, panels are boxed; below it they get a single rule.
const BOXED_MIN_HEIGHT: u16 = 30;
/// Share of the width, in percent, of the column for peers and log beside the gauges.
const RIGHT_COLUMN_PERCENT: u16 = 40;
/// Log lines shown before the other panels have what they want; the log gets any lines left over.
const LOG_LINES_WISHED: u16 = 3;
/// Most of the gauges' row, in percent, the pair heatmap takes beside them.
const HEATMAP_MAX_PERCENT: u16 = 50;

/// Draws the whole dashboard of `state` under `view` over the frame.
pub fn draw(frame: &mut Frame, state: &DashboardState, view: &View) {
    frame.render_widget(Dashboard { state, view }, frame.area());
}

/// Draws one panel, boxed, into `area` (for a zoomed view, or to test a panel on its own).
pub fn draw_panel(frame: &mut Frame, area: Rect, state: &DashboardState, view: &View, panel: Panel) {
    let area = area.intersection(frame.area());
    render_panel(state, view, panel, area, frame.buffer_mut(), Chrome::Boxed);
}

/// The whole dashboard as a widget: the data, and the view it is drawn under.
#[derive(Clone, Copy, Debug)]
pub struct Dashboard<'a> {
    pub state: &'a DashboardState,
    pub view: &'a View,
}

impl Widget for Dashboard<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let Self { state, view } = self;
        // The footer goes first when lines are short: once finished it says how to leave.
        let footer_height = area.height.min(1);
        let header_height = (area.height - footer_height).min(header::HEIGHT);
        let header_area = Rect { height: header_height, ..area };
        let body = Rect { y: area.y + header_height, height: area.height - footer_height - header_height, ..area };
        let footer_area = Rect { y: body.bottom(), height: footer_height, ..area };

        header::render(state, view, header_area, buf);
        render_body(state, view, body, buf);
        render_footer(state, view, footer_area, buf);
        if view.show_help {
            help::render(state, view, area, buf);
        }
    }
}

fn render_panel(state: &DashboardState, view: &View, panel: Panel, area: Rect, buf: &mut Buffer, chrome: Chrome) {
    match panel {
        Panel::Gauges => gauges::render(state, view, area, buf, chrome),
        Panel::Peers => peers::render(state, view, area, buf, chrome),
        // A sweep has no size table: its rounds, heatmap and verdict take the results' place.
        Panel::Results if state.sweep.is_some() => sweep::render(state, view, area, buf, chrome),
        Panel::Results => results::render(state, view, area, buf, chrome),
        Panel::Log => log::render(state, view, area, buf, chrome),
        Panel::Pairs => heatmap::render(state, view, area, buf, chrome),
    }
}

/// How many lines a stacked item needs at least, would like, and may take before the others have
/// had their wish.
#[derive(Clone, Copy, Debug)]
struct Demand {
    min: u16,
    desired: u16,
    cap: u16,
}

/// Shares `total` lines among `demands`: minimums first, then wishes up to each cap, then whole
/// wishes, each round in `priority` order; what is left goes to `fill`.
fn allocate(total: u16, demands: &[Demand], priority: &[usize], fill: usize) -> Vec<u16> {
    let mut heights = vec![0_u16; demands.len()];
    let mut left = total;
    let rounds: [fn(&Demand) -> u16; 3] = [
        |demand| demand.min,
        |demand| demand.desired.min(demand.cap).max(demand.min),
        |demand| demand.desired,
    ];
    for target in rounds {
        for &index in priority {
            let extra = target(&demands[index]).saturating_sub(heights[index]).min(left);
            heights[index] += extra;
            left -= extra;
        }
    }
    heights[fill] += left;
    heights
}

/// `heights` stacked from the top of `area`.
fn stack(area: Rect, heights: &[u16]) -> Vec<Rect> {
    let mut y = area.y;
    heights
        .iter()
        .map(|&height| {
            let rect = Rect { y, height: height.min(area.bottom().saturating_sub(y)), ..area };
            y += rect.height;
            rect
        })
        .collect()
}

fn render_body(state: &DashboardState, view: &View, area: Rect, buf: &mut Buffer) {
    if area.is_empty() {
        return;
    }
    let chrome = if area.height >= BOXED_MIN_HEIGHT { Chrome::Boxed } else { Chrome::Rule };
    if view.show_topology {
        topology::render(state, area, buf, chrome);
        return;
    }
    let overhead = chrome.overhead();
    let sparkline = if chrome == Chrome::Boxed { gauges::SPARKLINE_HEIGHT } else { 0 };
    let demand = |content: u16, cap: u16| Demand {
        min: overhead + 1,
        desired: overhead.saturating_add(content),
        cap,
    };
    let third = area.height / 3;
    let half = area.height / 2;
    let results_cap = if state.finished { half } else { third };
    let gauges_lines = gauges::content_height(state, view).saturating_add(sparkline);
    let heatmap_lines = if state.pairs.is_some() { heatmap::content_height(state) } else { 0 };
    let gpu_lines = gpu::content_height(state);
    let log_wish = overhead + LOG_LINES_WISHED;
    // ipc moves nothing over libfabric: its NVLink gauges take the channel gauges' place.
    let gpu_instead_of_gauges = state.run.experiment == Experiment::Ipc && gpu_lines > 0;
    let gauges_lines = if gpu_instead_of_gauges { gpu_lines } else { gauges_lines };

    if area.width >= SIDE_BY_SIDE_MIN_WIDTH {
        // Gauges on the left; peers and the log share the right; results take the full width below.
        let right_lines = peers::content_height(state).saturating_add(log_wish);
        let gpu_block = if gpu_lines > 0 && !gpu_instead_of_gauges { gpu_lines.saturating_add(overhead) } else { 0 };
        let demands = [
            demand(gauges_lines.saturating_add(gpu_block).max(right_lines).max(heatmap_lines), half),
            demand(results_height(state), results_cap),
        ];
        let priority: [usize; 2] = if state.finished { [1, 0] } else { [0, 1] };
        // Lines nobody wished for go to the top: a longer log and a taller history.
        let areas = stack(area, &allocate(area.height, &demands, &priority, 0));
        let share = |percent: u16| u16::try_from(u32::from(area.width) * u32::from(percent) / 100).unwrap_or(u16::MAX);
        let right_width = peers::natural_width(state).max(share(RIGHT_COLUMN_PERCENT)).min(share(50));
        let [gauges_area, right_area] =
            Layout::horizontal([Constraint::Fill(1), Constraint::Length(right_width)]).areas(areas[0]);
        let right_demands = [
            demand(peers::content_height(state), u16::MAX),
            demand(log::content_height(state), u16::MAX),
        ];
        let right = stack(right_area, &allocate(right_area.height, &right_demands, &[0, 1], 1));
        let gauges_area = if state.pairs.is_some() {
            let most = u16::try_from(u32::from(gauges_area.width) * u32::from(HEATMAP_MAX_PERCENT) / 100).unwrap_or(u16::MAX);
            let [heatmap_area, rest] = Layout::horizontal([
                Constraint::Length(heatmap::natural_width(state).min(most)),
                Constraint::Fill(1),
            ])
            .areas(gauges_area);
            heatmap::render(state, view, heatmap_area, buf, chrome);
            rest
        } else {
            gauges_area
        };
        if gpu_instead_of_gauges {
            gpu::render(state, view, gauges_area, buf, chrome);
        } else if gpu_lines > 0 {
            // The GPU panel under the gauges gets its rows first, up to half the column; the gauges
            // (and their history) take the rest.
            let column = [demand(gauges_lines, u16::MAX), demand(gpu_lines, gauges_area.height / 2)];
            let areas = stack(gauges_area, &allocate(gauges_area.height, &column, &[1, 0], 0));
            gauges::render(state, view, areas[0], buf, chrome);
            gpu::render(state, view, areas[1], buf, chrome);
        } else {
            gauges::render(state, view, gauges_area, buf, chrome);
        }
        peers::render(state, view, right[0], buf, chrome);
        log::render(state, view, right[1], buf, chrome);
        render_panel(state, view, Panel::Results, areas[1], buf, chrome);
    } else {
        // The heatmap takes the gauges' place, unless the gauges have the focus.
        let heatmap_first = state.pairs.is_some() && view.focus != Panel::Gauges;
        let top = if heatmap_first { demand(heatmap_lines, half) } else { demand(gauges_lines, third) };
        let mut demands = vec![
            top,
            demand(peers::content_height(state), third),
            demand(results_height(state), results_cap),
            demand(log::content_height(state), log_wish),
        ];
        // Peers and results are short and say the most; the gauges scroll to the selection; the log
        // shows its last few lines and takes whatever is left. The heatmap is the point of an
        // all-to-all run: it comes right after the peers.
        let mut priority = match (state.finished, heatmap_first) {
            (true, _) => vec![2, 1, 0, 3],
            (false, true) => vec![1, 0, 2, 3],
            (false, false) => vec![1, 2, 0, 3],
        };
        // Top to bottom, as indices into `demands` (4: the GPU panel).
        let mut order = vec![0, 1, 2, 3];
        if gpu_lines > 0 && !gpu_instead_of_gauges {
            // A few lines that are the point of the runs that have them: served right after the peers,
            // drawn right under the top panel.
            demands.push(demand(gpu_lines, third));
            let after_peers = priority.iter().position(|&index| index == 1).map_or(0, |at| at + 1);
            priority.insert(after_peers, 4);
            order.insert(1, 4);
        }
        let heights = allocate(area.height, &demands, &priority, 3);
        let areas = stack(area, &order.iter().map(|&index| heights[index]).collect::<Vec<_>>());
        let top_panel = if heatmap_first { Panel::Pairs } else { Panel::Gauges };
        let panels = [top_panel, Panel::Peers, Panel::Results, Panel::Log];
        for (&index, panel_area) in order.iter().zip(areas) {
            match panels.get(index) {
                Some(Panel::Gauges) if gpu_instead_of_gauges => gpu::render(state, view, panel_area, buf, chrome),
                Some(&panel) => render_panel(state, view, panel, panel_area, buf, chrome),
                None => gpu::render(state, view, panel_area, buf, chrome),
            }
        }
    }
}

/// Lines the results panel (or, in a sweep, the sweep panel in its place) would like.
fn results_height(state: &DashboardState) -> u16 {
    if state.sweep.is_some() { sweep::content_height(state) } else { results::content_height(state) }
}

fn render_footer(state: &DashboardState, view: &View, area: Rect, buf: &mut Buffer) {
    if area.is_empty() {
        return;
    }
    if state.finished {
        let style = Style::new().fg(Color::Black).bg(Color::Green).add_modifier(Modifier::BOLD);
        let long = " The run has ended; the final tables stay on screen. Press any key to exit. ";
        let short = " Run ended: press any key ";
        let message = if text::width(long) <= usize::from(area.width) { long } else { short };
        buf.set_style(area, Style::new().bg(Color::Green));
        Line::styled(message, style).render(area, buf);
        return;
    }
    let keys: &[(&str, &str)] = if let Some(keys) = fleet::footer_keys(state, view) {
        keys
    } else if view.focus == Panel::Pairs {
        &[("q", "quit"), ("Tab", "panel"), ("↑↓", "sender"), ("←→", "receiver"), ("p", "freeze"), ("?", "help")]
    } else {
        &[("q", "quit"), ("Tab", "panel"), ("↑↓", "rank"), ("←→", "channel"), ("p", "freeze"), ("?", "help")]
    };
    let mut spans = Vec::new();
    for &(key, what) in keys {
        spans.push(Span::styled(format!(" {key}"), Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)));
        spans.push(Span::styled(format!(" {what} "), Style::new().fg(Color::DarkGray)));
    }
    Line::from(spans).render(area, buf);
}

#[cfg(test)]
mod layout_tests {
    use super::{allocate, Demand};

    const fn demand(min: u16, desired: u16, cap: u16) -> Demand {
        Demand { min, desired, cap }
    }

    #[test]
    fn minimums_come_first_in_priority_order() {
        let demands = [demand(3, 10, 10), demand(3, 10, 10)];
        assert_eq!(allocate(4, &demands, &[1, 0], 0), [1, 3]);
    }

    #[test]
    fn caps_hold_until_everyone_has_had_a_share_then_the_rest_fills() {
        let demands = [demand(2, 20, 5), demand(2, 6, 6), demand(2, 3, 3)];
        assert_eq!(allocate(14, &demands, &[0, 1, 2], 2), [5, 6, 3]);
        assert_eq!(allocate(20, &demands, &[0, 1, 2], 2), [11, 6, 3]);
        assert_eq!(allocate(40, &demands, &[0, 1, 2], 2), [20, 6, 14]);
    }
}
