//! The fleet view: a run of hundreds of hosts on one screen, drawn from the fleet model
//! ([`crate::state::fleet::Fleet`]) under the dashboard's [`View`] (its [`FleetView`](crate::view::FleetView):
//! the selected host, a `/` search, the host drilled into), in the channel gauges' place whenever the run
//! has more channels than a screen holds (more than [`FLEET_MIN_CHANNELS`], on more than one host). Top to
//! bottom:
//!
//! - per rail, the live median and spread: p10, median and p90 in Gbps, a percentile bar (whiskers from
//!   the slowest NIC to the fastest, the box from p10 to p90, the median marked) and a histogram of the
//!   rail's NICs by tenths of its median;
//! - the worst NICs now: host, rank, GPU, NIC, rail, rate, share of the rail's median, and how long it has
//!   been low (`BEHIND` once flagged by the rule `sweep` and the monitor use);
//! - one line per host, worst first: its worst NIC's share and a strip of its NICs, one cell per NIC (by
//!   rank, then channel), coloured — and shaped, for text captures — by its rate against its rail's median.
//!
//! Up and Down select a host, Enter shows its channel gauges (today's per-channel view, only that host;
//! Esc comes back), `/` jumps to a host by name. On a short panel the rails shrink to one line and the
//! worst NICs come before the hosts, so the worst NIC stays on screen down to 80×24.
//!
//! The pieces drawn from the model alone (a NIC's cell, a host's strip, the rail lines, their heading and
//! scale, the compact rail line, how long a NIC has been low) are the fleet widget's ([`crate::fleet`]),
//! which the many-node monitor's fleet overview (`crate::monitor::fleet`) draws with too.

use std::collections::HashSet;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::chrome::{self, Chrome};
use super::grid;
use super::text::{ago, cell, number, width, Align};
use crate::fleet::{low_flag, nic_cell, percent, rail_line, rails_compact, rails_heading, strip};
use crate::state::fleet::{Fleet, HostStrip, WorstNic};
use crate::state::{DashboardState, Key, Panel, PeerState};
use crate::view::View;

/// More channels than this, on more than one host, and the fleet view takes the gauges' place: a
/// 200×60 screen holds fewer gauge rows than that.
pub const FLEET_MIN_CHANNELS: usize = 64;
/// Worst NICs listed when the panel has lines to spare.
const WORST_SHOWN: usize = 8;
/// Widest host name column.
const HOST_MAX: usize = 24;

/// Whether this run is drawn as a fleet: more than [`FLEET_MIN_CHANNELS`] channels on two hosts or more.
pub fn applies(state: &DashboardState) -> bool {
    state.channels.len() > FLEET_MIN_CHANNELS && host_count(state) >= 2
}

fn host_count(state: &DashboardState) -> usize {
    if state.fleet.is_current(state) {
        state.fleet.hosts().len()
    } else {
        state.run.hosts.iter().collect::<HashSet<_>>().len()
    }
}

/// Whether the fleet view takes the gauges' place now: it applies, and no host is drilled into.
pub(super) fn shows(state: &DashboardState, view: &View) -> bool {
    applies(state) && view.fleet.drilled.is_none()
}

/// The state's own model when it matches its views (kept by ingestion), else one built for this frame.
fn with_fleet<T>(state: &DashboardState, read: impl FnOnce(&Fleet) -> T) -> T {
    if state.fleet.is_current(state) {
        read(&state.fleet)
    } else {
        read(&Fleet::build(state, state.progress.elapsed))
    }
}

/// The host drilled into, by name, while the fleet applies.
pub(super) fn drilled_host(state: &DashboardState, view: &View) -> Option<String> {
    let host = view.fleet.drilled?;
    if !applies(state) {
        return None;
    }
    with_fleet(state, |fleet| fleet.hosts().get(host).map(|host| host.name.clone()))
}

/// Lines the fleet would like inside its frame: every rail, the worst NICs, every host, and headings.
pub(super) fn content_height(state: &DashboardState) -> u16 {
    let lines = with_fleet(state, |fleet| 3 + fleet.rails().len() + fleet.worst().len().clamp(1, WORST_SHOWN) + fleet.hosts().len());
    u16::try_from(lines).unwrap_or(u16::MAX)
}

/// The footer's keys while the fleet (or a host drilled into from it) has the focus.
pub(super) fn footer_keys(state: &DashboardState, view: &View) -> Option<&'static [(&'static str, &'static str)]> {
    if !applies(state) || view.focus != Panel::Gauges {
        return None;
    }
    Some(if view.fleet.drilled.is_some() {
        &[("q", "quit"), ("Esc", "fleet"), ("↑↓", "rank"), ("←→", "channel"), ("/", "find host"), ("?", "help")]
    } else {
        &[("q", "quit"), ("Tab", "panel"), ("↑↓", "host"), ("Enter", "its gauges"), ("/", "find host"), ("?", "help")]
    })
}

/// The help overlay's lines for the fleet view.
pub(super) const HELP: [(&str, &str); 4] = [
    ("↑ ↓", "fleet: select a host (worst first)"),
    ("Enter", "fleet: the selected host's channel gauges"),
    ("Esc", "fleet: back from a host's gauges"),
    ("/", "fleet: find a host by name (Enter keeps it, Esc cancels)"),
];

/// Applies a fleet key to `view` (drawn over `state`, which no key changes); false when the key is not
/// the fleet's (the dashboard's own keys then apply).
pub(super) fn handle_key(view: &mut View, state: &DashboardState, key: Key) -> bool {
    if !applies(state) {
        return false;
    }
    if let Some(query) = &mut view.fleet.search {
        match key {
            Key::Esc | Key::Enter => {
                view.fleet.search = None;
                return true;
            }
            Key::Char('\u{8}') => {
                query.pop();
            }
            Key::Char(c) => query.push(c),
            // Any other key ends the search and does what it does.
            _ => {
                view.fleet.search = None;
                return handle_key(view, state, key);
            }
        }
        let query = query.clone();
        if let Some(host) = with_fleet(state, |fleet| fleet.find_host(&query)) {
            view.fleet.selected = Some(host);
        }
        return true;
    }
    if let Some(host) = view.fleet.drilled {
        match key {
            Key::Esc => view.fleet.drilled = None,
            Key::Char('/') => {
                view.fleet.drilled = None;
                view.fleet.search = Some(String::new());
            }
            Key::Up | Key::Down if view.focus == Panel::Gauges => move_within_host(view, state, host, key == Key::Down),
            _ => return false,
        }
        return true;
    }
    match key {
        Key::Char('/') => view.fleet.search = Some(String::new()),
        Key::Up | Key::Down if view.focus == Panel::Gauges => {
            let selected = view.fleet.selected;
            let next = with_fleet(state, |fleet| {
                let order = fleet.order();
                let at = selected.and_then(|host| fleet.position_of(host)).unwrap_or(0);
                let to = if key == Key::Down { (at + 1).min(order.len().saturating_sub(1)) } else { at.saturating_sub(1) };
                order.get(to).map(|&host| host as usize)
            });
            if next.is_some() {
                view.fleet.selected = next;
            }
        }
        Key::Enter => {
            // The selected host (the worst one when none is), with its worst NIC selected.
            let selected = view.fleet.selected;
            let chosen = with_fleet(state, |fleet| {
                let host = selected.or_else(|| fleet.order().first().map(|&host| host as usize))?;
                let strip = fleet.hosts().get(host)?;
                let at = strip.worst_view.or_else(|| strip.views.first().copied())?;
                Some((host, at as usize))
            });
            let Some((host, at)) = chosen else { return true };
            view.fleet.selected = Some(host);
            view.fleet.drilled = Some(host);
            if let Some(channel) = state.channels.get(at) {
                view.selected_rank = channel.rank;
                view.selected_channel = channel.channel;
            }
        }
        _ => return false,
    }
    true
}

/// Up and Down within a drilled-into host: its ranks only, keeping the channel where the rank has it.
fn move_within_host(view: &mut View, state: &DashboardState, host: usize, forward: bool) {
    let ranks: Vec<usize> = with_fleet(state, |fleet| {
        let mut ranks: Vec<usize> = fleet
            .hosts()
            .get(host)
            .map(|strip| strip.views.iter().filter_map(|&at| state.channels.get(at as usize)).map(|view| view.rank).collect())
            .unwrap_or_default();
        ranks.dedup();
        ranks
    });
    let Some(at) = ranks.iter().position(|&rank| rank == view.selected_rank).or(if ranks.is_empty() { None } else { Some(0) }) else {
        return;
    };
    let to = if forward { (at + 1).min(ranks.len() - 1) } else { at.saturating_sub(1) };
    view.selected_rank = ranks[to];
}

pub(super) fn render(state: &DashboardState, view: &View, area: Rect, buf: &mut Buffer, chrome: Chrome) {
    if area.is_empty() {
        return;
    }
    with_fleet(state, |fleet| render_with(state, view, fleet, area, buf, chrome));
}

fn dim() -> Style {
    Style::new().fg(Color::DarkGray)
}

fn heading(text: String) -> Line<'static> {
    Line::styled(text, Style::new().add_modifier(Modifier::BOLD))
}

fn render_with(state: &DashboardState, view: &View, fleet: &Fleet, area: Rect, buf: &mut Buffer, chrome: Chrome) {
    let focused = view.focus == Panel::Gauges;
    let nics: usize = fleet.rails().iter().map(|rail| rail.nics).sum();
    let behind: usize = fleet.rails().iter().map(|rail| rail.behind).sum();
    let title = format!(
        " {} hosts · {} ranks · {} NICs reporting · {behind} behind (< {:.0}% of rail median for {}) ",
        fleet.hosts().len(),
        state.peers.len().max(state.run.ranks),
        nics,
        fleet.rule().threshold * 100.0,
        ago(fleet.rule().hold),
    );
    // The left title ("Fleet") stays: a long right one gives way to a short one.
    let title = if width(&title) + 12 <= usize::from(area.width) { title } else { format!(" {} hosts · {behind} behind ", fleet.hosts().len()) };
    let style = if behind > 0 { Style::new().fg(Color::Red).add_modifier(Modifier::BOLD) } else { dim() };
    let block = chrome::block("Fleet", focused, chrome).title_top(Line::styled(title, style).right_aligned());
    let inner = block.inner(area);
    block.render(area, buf);
    if inner.is_empty() {
        return;
    }
    let host_width = fleet.hosts().iter().map(|host| width(&host.name)).max().unwrap_or(4).clamp(4, HOST_MAX);
    let columns = usize::from(inner.width);
    let rails = fleet.rails();
    let worst = fleet.worst();
    let worst_wished = worst.len().clamp(1, WORST_SHOWN);
    let height = usize::from(inner.height);
    let mut rows = inner.rows();
    let mut put = |line: Line<'static>| {
        if let Some(row) = rows.next() {
            line.render(row, buf);
            true
        } else {
            false
        }
    };
    let searching = view.fleet.search.as_deref();
    let full = height >= (1 + rails.len()) + (1 + worst_wished) + 2;
    if full {
        put(heading(rails_heading(fleet, columns)));
        for rail in rails {
            put(rail_line(rail, fleet, columns));
        }
        put(heading(format!("Worst NICs now, against their rail's median ({behind} behind)")));
        if worst.is_empty() {
            put(Line::styled("no NIC has reported a rate yet", dim()));
        }
        for nic in worst.iter().take(WORST_SHOWN) {
            put(worst_line(state, fleet, nic, host_width, columns));
        }
        put(hosts_heading(searching));
        let left = height.saturating_sub(1 + rails.len() + 1 + worst_wished + 1);
        host_lines(state, view, fleet, left, host_width, columns, &mut put);
    } else {
        // Short: one line of rail medians (or the search prompt), the worst NICs, then hosts if lines remain.
        if height >= 2 {
            put(match searching {
                Some(query) => search_line(query),
                None => rails_compact(rails, columns),
            });
        }
        let listed = worst.len().min(height.saturating_sub(usize::from(height >= 2)));
        if worst.is_empty() {
            put(Line::styled("no NIC has reported a rate yet", dim()));
        }
        for nic in worst.iter().take(listed) {
            put(worst_line(state, fleet, nic, host_width, columns));
        }
        let left = height.saturating_sub(usize::from(height >= 2) + listed.max(1));
        host_lines(state, view, fleet, left, host_width, columns, &mut put);
    }
}

fn worst_line(state: &DashboardState, fleet: &Fleet, nic: &WorstNic, host_width: usize, columns: usize) -> Line<'static> {
    let host = fleet.hosts().get(nic.host).map_or("?", |host| host.name.as_str());
    let Some(view) = state.channels.get(nic.view) else { return Line::default() };
    let gpu = state.run.placements.get(view.rank).filter(|p| p.rank == view.rank).and_then(|p| p.gpu).map_or("-".to_string(), |gpu| gpu.to_string());
    let (glyph, style) = nic_cell(Some(nic.ratio), fleet.rule().threshold, nic.behind);
    let flag = low_flag(nic.behind, nic.low_for);
    let lost = matches!(state.peers.get(view.rank).map(|peer| peer.state), Some(PeerState::Lost | PeerState::Silent));
    let numbers = format!(
        " rail {:<2} {} Gbps {:>4} of {} ",
        nic.rail,
        cell(&number(Some(nic.gbps), 1), 6, Align::Right),
        percent(nic.ratio),
        number(Some(nic.rail_median), 1)
    );
    let rank = format!("r{}", view.rank);
    let fixed = 2 + host_width + 1 + 6 + width(&numbers) + 12;
    let mut spans = vec![
        Span::styled(format!("{glyph} "), style),
        Span::styled(cell(host, host_width, Align::Left), Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(" {rank:<6}")),
    ];
    // GPU and NIC name where there is room.
    if columns >= fixed + 7 + 14 {
        let nic_width = (columns - fixed - 7).min(16);
        spans.push(Span::raw(format!("GPU {gpu:<2} ")));
        spans.push(Span::styled(cell(&view.nic, nic_width, Align::Left), Style::new().fg(Color::Blue)));
    } else if columns >= fixed + 7 {
        spans.push(Span::raw(format!("GPU {gpu:<2}")));
    }
    spans.push(Span::styled(numbers, style));
    spans.push(flag);
    if lost {
        spans.push(Span::styled(" (rank silent)", dim()));
    }
    Line::from(spans)
}

fn hosts_heading(searching: Option<&str>) -> Line<'static> {
    match searching {
        Some(query) => search_line(query),
        None => heading("Hosts, worst NIC first (each cell a NIC, by rank then channel: █ ≥ bar ▆ ≥ 75% ▄ ≥ 50% ▂ below, · no rate)".to_string()),
    }
}

fn search_line(query: &str) -> Line<'static> {
    Line::from(vec![
        Span::styled("find host: ", Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)),
        Span::raw(query.to_string()),
        Span::styled("▏", Style::new().fg(Color::Cyan)),
        Span::styled("  (Enter keeps it, Esc cancels)", dim()),
    ])
}

/// Up to `lines` hosts, worst first, scrolled so that the selected host is on screen.
fn host_lines(
    state: &DashboardState,
    view: &View,
    fleet: &Fleet,
    lines: usize,
    host_width: usize,
    columns: usize,
    put: &mut impl FnMut(Line<'static>) -> bool,
) {
    if lines == 0 {
        return;
    }
    let order = fleet.order();
    let selected = view.fleet.selected.and_then(|host| fleet.position_of(host)).unwrap_or(0);
    let offset = grid::scroll_offset(Some(selected), lines);
    for (position, &host) in order.iter().enumerate().skip(offset).take(lines) {
        let Some(strip) = fleet.hosts().get(host as usize) else { continue };
        if !put(host_line(state, fleet, strip, position == selected, host_width, columns)) {
            return;
        }
    }
}

fn host_line(state: &DashboardState, fleet: &Fleet, host: &HostStrip, selected: bool, host_width: usize, columns: usize) -> Line<'static> {
    let threshold = fleet.rule().threshold;
    let marker = if selected { "▶ " } else { "  " };
    let name_style = if selected { Style::new().add_modifier(Modifier::BOLD) } else { Style::new() };
    let mut spans = vec![
        Span::styled(marker, Style::new().fg(Color::Cyan)),
        Span::styled(cell(&host.name, host_width, Align::Left), name_style),
        Span::raw(format!(" {:>4} ", percent(f64::from(host.worst_ratio)))),
    ];
    let tail = if host.behind > 0 { format!(" {} behind", host.behind) } else { String::new() };
    let room = columns.saturating_sub(2 + host_width + 6 + width(&tail));
    // One group per rank.
    let cells = host.views.iter().map(|&at| at as usize).filter_map(|at| {
        let view = state.channels.get(at)?;
        Some((view.rank, nic_cell(fleet.ratio(at), threshold, fleet.is_behind(at))))
    });
    spans.extend(strip(cells, room));
    if !tail.is_empty() {
        spans.push(Span::styled(tail, Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)));
    }
    Line::from(spans)
}
