//! The fleet widget: the pieces both fleet views draw from the fleet model ([`Fleet`]) alone, the run
//! dashboard's (`dashboard/fleet.rs`, hosts of a run) and the many-node monitor's (`monitor/fleet/`,
//! nodes of `efatop monitor`):
//!
//! - a NIC's cell ([`nic_cell`]): a glyph whose height and colour both say its share of its rail's median;
//! - a host's strip of cells ([`strip`]), grouped (by rank, or by GPU) with a space between groups;
//! - per rail, the live median and spread ([`rails_heading`], [`rail_line`] on the common scale
//!   [`spread_scale`]): p10, median and p90 in Gbps, a percentile bar and a histogram of the rail's NICs
//!   by tenths of its median; on a short panel one line of medians ([`rails_compact`]);
//! - how long a NIC has been low ([`low_flag`]), and a share as a percentage ([`percent`]).
//!
//! Each view keeps its own layout, keys and the columns only it has (a run's ranks, a node's GPUs).

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

use crate::text::{ago, cell, number, width, Align};
use crate::state::fleet::{Fleet, RailSummary, HISTOGRAM_BINS};

/// Narrowest percentile bar worth drawing.
const SPREAD_MIN: usize = 12;
const SPREAD_MAX: usize = 40;
/// Columns of a rail line before its percentile bar.
const RAIL_FIXED: usize = 42;
/// Histogram glyphs, fewest to most NICs (log scale, so that one NIC still shows).
const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

fn dim() -> Style {
    Style::new().fg(Color::DarkGray)
}

/// How a NIC's share of its rail's median is drawn: a glyph whose height and colour both say it.
pub fn nic_cell(ratio: Option<f64>, threshold: f64, behind: bool) -> (char, Style) {
    let Some(ratio) = ratio else { return ('·', Style::new().fg(Color::DarkGray)) };
    let (glyph, colour) = if ratio >= threshold {
        ('█', Color::Green)
    } else if ratio >= 0.75 {
        ('▆', Color::Yellow)
    } else if ratio >= 0.5 {
        ('▄', Color::LightRed)
    } else {
        ('▂', Color::Red)
    };
    let style = Style::new().fg(colour);
    (glyph, if behind { style.add_modifier(Modifier::BOLD) } else { style })
}

/// A share as a whole percentage (`87%`); `-` when it is not a number.
pub fn percent(ratio: f64) -> String {
    if ratio.is_finite() { format!("{:.0}%", ratio * 100.0) } else { "-".to_string() }
}


pub fn rails_heading(fleet: &Fleet, columns: usize) -> String {
    let spread = spread_width(columns);
    let mut text = format!("{:<7} {:>5} {:>7} {:>7} {:>7} Gbps", "Rails", "NICs", "p10", "median", "p90");
    if spread > 0 {
        let (low, high) = spread_scale(fleet);
        let label = format!("{} ─ p10 ━┃━ p90 ─ {} ({low:.0}…{high:.0} Gbps)", "min", "max");
        text.push_str("  ");
        text.push_str(&cell(&label, spread, Align::Left));
    }
    if columns >= histogram_from(spread) + HISTOGRAM_BINS + 2 {
        text.push_str("  NICs by tenths of median 0…1.5+");
    }
    text
}

/// The percentile bars' common scale: from half the lowest rail median (slower NICs sit at its left
/// end) to the fastest NIC of any rail, so that rails compare at a glance and a slow NIC stands out.
pub fn spread_scale(fleet: &Fleet) -> (f64, f64) {
    let reporting = fleet.rails().iter().filter(|rail| rail.nics > 0);
    let low = reporting.clone().map(|rail| rail.p50).fold(f64::INFINITY, f64::min) * 0.5;
    let high = reporting.map(|rail| rail.max).fold(0.0, f64::max);
    if low.is_finite() && high > low { (low, high) } else { (0.0, high.max(1.0)) }
}

/// Columns of the percentile bar on a line `columns` wide (0: none).
fn spread_width(columns: usize) -> usize {
    let room = columns.saturating_sub(RAIL_FIXED + 2 + HISTOGRAM_BINS + 12);
    if room >= SPREAD_MIN { room.min(SPREAD_MAX) } else { 0 }
}

/// Where the histogram starts on a rail line.
fn histogram_from(spread: usize) -> usize {
    RAIL_FIXED + if spread > 0 { spread + 2 } else { 0 } + 2
}

pub fn rail_line(rail: &RailSummary, fleet: &Fleet, columns: usize) -> Line<'static> {
    let gbps = |value: f64| cell(&number(Some(value), 1), 7, Align::Right);
    let mut spans = vec![Span::raw(format!(
        "rail {:<2} {:>5} {} {} {}     ",
        rail.rail,
        rail.nics,
        gbps(rail.p10),
        gbps(rail.p50),
        gbps(rail.p90)
    ))];
    if rail.nics == 0 {
        return Line::from(vec![Span::raw(format!("rail {:<2} {:>5}", rail.rail, 0)), Span::styled("  no rate yet", dim())]);
    }
    let spread = spread_width(columns);
    if spread > 0 {
        spans.push(Span::raw("  "));
        spans.extend(spread_bar(rail, spread_scale(fleet), spread));
    }
    if columns >= histogram_from(spread) + HISTOGRAM_BINS + 2 {
        spans.push(Span::raw("  "));
        spans.extend(histogram(rail, fleet.rule().threshold));
    }
    if rail.behind > 0 {
        spans.push(Span::styled(format!("  {} behind", rail.behind), Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)));
    }
    Line::from(spans)
}

/// Whiskers from the slowest NIC to the fastest, the box from p10 to p90, the median marked, on the
/// common scale `(low, high)` ([`spread_scale`]; anything below `low` sits at the left end).
fn spread_bar(rail: &RailSummary, (low, high): (f64, f64), columns: usize) -> Vec<Span<'static>> {
    let at = |value: f64| ((((value - low) / (high - low)) * (columns - 1) as f64).round().max(0.0) as usize).min(columns - 1);
    let (min, p10, p50, p90, max) = (at(rail.min), at(rail.p10), at(rail.p50), at(rail.p90), at(rail.max));
    (0..columns)
        .map(|x| {
            if x == p50 {
                Span::styled("┃", Style::new().fg(Color::White).add_modifier(Modifier::BOLD))
            } else if (p10..=p90).contains(&x) {
                Span::styled("━", Style::new().fg(Color::Cyan))
            } else if (min..=max).contains(&x) {
                Span::styled("─", dim())
            } else {
                Span::raw(" ")
            }
        })
        .collect()
}

fn histogram(rail: &RailSummary, threshold: f64) -> Vec<Span<'static>> {
    let most = rail.histogram.iter().copied().max().unwrap_or(0);
    rail.histogram
        .iter()
        .enumerate()
        .map(|(bin, &count)| {
            if count == 0 {
                return Span::styled(" ", dim());
            }
            let level = if most <= 1 { LEVELS.len() - 1 } else { ((f64::from(count).ln() / f64::from(most).ln()) * (LEVELS.len() - 1) as f64).round() as usize };
            let low = ((bin + 1) as f64) / 10.0 <= threshold;
            let colour = if low { Color::Red } else { Color::Green };
            Span::styled(LEVELS[level.min(LEVELS.len() - 1)].to_string(), Style::new().fg(colour))
        })
        .collect()
}

pub fn rails_compact(rails: &[RailSummary], columns: usize) -> Line<'static> {
    let mut text = "rail p50 (p10-p90):".to_string();
    for rail in rails {
        let piece = format!(" {}:{}({}-{})", rail.rail, number(Some(rail.p50), 1), number(Some(rail.p10), 0), number(Some(rail.p90), 0));
        if width(&text) + width(&piece) > columns {
            break;
        }
        text.push_str(&piece);
    }
    Line::styled(text, Style::new().add_modifier(Modifier::BOLD))
}

/// `BEHIND 12s` once a NIC is flagged, `low 3s` while it is low and not yet flagged, else nothing.
pub fn low_flag(behind: bool, low_for: Option<std::time::Duration>) -> Span<'static> {
    match (behind, low_for) {
        (true, Some(low_for)) => Span::styled(format!("BEHIND {}", ago(low_for)), Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)),
        (false, Some(low_for)) => Span::styled(format!("low {}", ago(low_for)), Style::new().fg(Color::Yellow)),
        _ => Span::raw(""),
    }
}

/// A host's NICs as cells ([`nic_cell`]) in at most `room` columns: a space where the group (a rank, a
/// GPU) changes, `…` when the rest does not fit.
pub fn strip<G: PartialEq>(cells: impl IntoIterator<Item = (G, (char, Style))>, room: usize) -> Vec<Span<'static>> {
    let mut spans = Vec::new();
    let mut used = 0;
    let mut last: Option<G> = None;
    for (group, (glyph, style)) in cells {
        let gap = usize::from(last.as_ref().is_some_and(|last| *last != group));
        if used + gap + 1 > room {
            spans.push(Span::styled("…", dim()));
            break;
        }
        if gap > 0 {
            spans.push(Span::raw(" "));
        }
        last = Some(group);
        spans.push(Span::styled(glyph.to_string(), style));
        used += gap + 1;
    }
    spans
}
