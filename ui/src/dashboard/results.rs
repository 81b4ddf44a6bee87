//! The seed-format results table, filling in as sizes complete: `Size | Count` and, per
//! configuration, Gbps, BusBW (%) and mean latency, plus p50 and p99 when the panel is wide enough.
//! Rows cover the planned sweep from the start, so a cell without a measurement behind it shows `-`.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::Widget;

use efatop_proto::sizes::format_size;
use efatop_proto::expected::Expected;
use efatop_proto::{Column as ResultColumn, Experiment, Measurement};

use super::chrome::{self, Chrome};
use super::grid::{self, Column};
use super::text::{number, Align, MISSING};
use crate::state::{DashboardState, Panel};
use crate::view::View;

/// Configurations in column order: the planned ones, then any others that were measured.
fn configs(state: &DashboardState) -> Vec<&ResultColumn> {
    let measured = state.results.iter().flat_map(|results| results.configs.iter());
    let mut configs: Vec<&ResultColumn> = Vec::new();
    for config in state.run.configs.iter().chain(measured) {
        if !configs.contains(&config) {
            configs.push(config);
        }
    }
    configs
}

/// The planned sizes and every measured one, ascending.
fn sizes(state: &DashboardState) -> Vec<u64> {
    let mut sizes = state.run.sizes.clone();
    if let Some(results) = &state.results {
        sizes.extend(results.sizes());
    }
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

fn find<'a>(state: &'a DashboardState, config: &ResultColumn, size: u64) -> Option<&'a Measurement> {
    state.results.as_ref().and_then(|results| results.find(config, size))
}

/// Lines the panel would like inside its frame.
pub(super) fn content_height(state: &DashboardState) -> u16 {
    let sizes = sizes(state).len();
    let lines = if sizes == 0 || configs(state).is_empty() { 1 } else { sizes + 1 };
    u16::try_from(lines).unwrap_or(u16::MAX)
}

/// How column titles are written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Titles {
    /// `SinglePin Gbps`, `BusBW %`.
    WithUnits,
    /// `SinglePin`, `BusBW%`: units are in the panel's legend.
    Bare,
    /// The names without what all of them share (`ProxySingleNBIDMA(staged)` → `SingleNBI`); the legend
    /// says what was taken off.
    Short,
    /// Configuration names cut to the width of their numbers.
    Cut,
}

/// How much of the table fits, widest first.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Shape {
    count: bool,
    percentiles: bool,
    titles: Titles,
    /// `% of expected` beside each rate, when the run has reference figures: the last thing to go.
    expected: bool,
}

const SHAPES: [Shape; 7] = [
    Shape { count: true, percentiles: true, titles: Titles::WithUnits, expected: true },
    Shape { count: true, percentiles: false, titles: Titles::WithUnits, expected: true },
    Shape { count: true, percentiles: false, titles: Titles::Bare, expected: true },
    Shape { count: false, percentiles: false, titles: Titles::Bare, expected: true },
    Shape { count: false, percentiles: false, titles: Titles::Short, expected: true },
    Shape { count: false, percentiles: false, titles: Titles::Cut, expected: true },
    Shape { count: false, percentiles: false, titles: Titles::Cut, expected: false },
];

/// The run holds reference figures for its instance type (some step has its share, or why it has none).
fn has_expected(state: &DashboardState) -> bool {
    state.results.as_ref().is_some_and(|results| results.measurements.iter().any(|m| m.expected.is_some()))
}

/// Whether every column shares its experiment's prefix (`Proxy`) and its memory suffix (`Pin`, `DMA`,
/// `DMA(staged)`), from the columns' own parts ([`ResultColumn::parts`]); `None` when they share neither or
/// there is one column. Only these come off: the rest of a name (`NBI`, `RoundRobin`) is what tells the
/// columns apart, and it is never empty.
fn shared_affixes(configs: &[&ResultColumn]) -> Option<(bool, bool)> {
    let parts: Vec<(&str, String, String)> = configs.iter().map(|c| c.parts()).collect();
    let (first_prefix, _, first_suffix) = parts.first()?;
    let prefix = !first_prefix.is_empty() && parts.iter().all(|p| p.0 == *first_prefix);
    let suffix = !first_suffix.is_empty() && parts.iter().all(|p| p.2 == *first_suffix);
    let fits = parts.iter().all(|p| !p.1.is_empty());
    (configs.len() > 1 && fits && (prefix || suffix)).then_some((prefix, suffix))
}

fn short_name(config: &ResultColumn, affixes: Option<(bool, bool)>) -> String {
    match affixes {
        Some((prefix, suffix)) => {
            let (head, core, tail) = config.parts();
            format!("{}{core}{}", if prefix { "" } else { head }, if suffix { "" } else { tail.as_str() })
        }
        None => config.to_string(),
    }
}

type Cells = Vec<(String, Style)>;

fn table(state: &DashboardState, shape: Shape) -> (Vec<Column>, Vec<Cells>) {
    let configs = configs(state);
    let sizes = sizes(state);
    let plain = Style::new();
    let rate = Style::new().add_modifier(Modifier::BOLD);
    let missing = Style::new().fg(Color::DarkGray);
    let mut titles: Vec<(String, Align)> = vec![("Size".into(), Align::Right)];
    if shape.count {
        titles.push(("Count".into(), Align::Right));
    }
    let expected = shape.expected && has_expected(state);
    let per_config = if shape.percentiles { 5 } else { 3 } + usize::from(expected);
    let below = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
    let affixes = if shape.titles == Titles::Short { shared_affixes(&configs) } else { None };
    for config in &configs {
        let with_units = shape.titles == Titles::WithUnits;
        let rate_title = if with_units { format!("{config} Gbps") } else { short_name(config, affixes) };
        titles.push((rate_title, Align::Right));
        if expected {
            titles.push((if with_units { "% of exp" } else { "%exp" }.into(), Align::Right));
        }
        titles.push((if with_units { "BusBW %" } else { "BusBW%" }.into(), Align::Right));
        titles.push(("Lat us".into(), Align::Right));
        if shape.percentiles {
            titles.push(("p50 us".into(), Align::Right));
            titles.push(("p99 us".into(), Align::Right));
        }
    }

    let rows: Vec<Cells> = sizes
        .iter()
        .map(|&size| {
            let mut cells = vec![(format_size(size), plain)];
            if shape.count {
                cells.push(((size / 4).to_string(), plain));
            }
            for config in &configs {
                let Some(measurement) = find(state, config, size) else {
                    cells.extend(std::iter::repeat_n((MISSING.to_string(), missing), per_config));
                    continue;
                };
                let latency = &measurement.latency;
                cells.push((number(Some(measurement.gbps), 2), rate));
                if expected {
                    let against = measurement.expected.as_ref();
                    let style = match against {
                        Some(figure) if figure.below() => below,
                        Some(figure) if figure.percent().is_some() => plain,
                        _ => missing,
                    };
                    let mark = if against.is_some_and(Expected::below) { "*" } else { "" };
                    let text = against.and_then(Expected::percent).map_or_else(|| MISSING.to_string(), |p| format!("{}{mark}", number(Some(p), 1)));
                    cells.push((text, style));
                }
                let busbw = number(measurement.busbw_percent, 1);
                let busbw_style = if measurement.busbw_percent.is_some() { plain } else { missing };
                cells.push((busbw, busbw_style));
                cells.push((number(Some(latency.mean_us), 2), plain));
                if shape.percentiles {
                    cells.push((number(Some(latency.p50_us), 2), plain));
                    cells.push((number(Some(latency.p99_us), 2), plain));
                }
            }
            cells
        })
        .collect();

    let columns = titles
        .into_iter()
        .enumerate()
        .map(|(index, (title, align))| {
            let values = rows.iter().map(|row| row[index].0.as_str());
            if shape.titles == Titles::Cut {
                let mut column = Column::fitted("", align, values);
                column.width = column.width.max(4);
                column.title = title;
                column
            } else {
                Column::fitted(&title, align, values)
            }
        })
        .collect();
    (columns, rows)
}

/// What `% of exp` is against, in the panel's legend: the instance type and the mark for figures under
/// [`efatop_proto::expected::BELOW_PERCENT`]; when no step has a figure, that the type has none.
fn expected_legend(state: &DashboardState, shape: Shape) -> String {
    let Some(results) = state.results.as_ref().filter(|_| shape.expected && has_expected(state)) else { return String::new() };
    let instance_type = results.metadata.instance_type.as_deref().unwrap_or("?");
    let below = efatop_proto::expected::BELOW_PERCENT;
    let any_figure = results.measurements.iter().any(|m| m.expected.as_ref().and_then(Expected::percent).is_some());
    match (any_figure, shape.titles == Titles::WithUnits) {
        (true, true) => format!("% of {instance_type} expected (* under {below}%), "),
        (true, false) => format!("%exp of {instance_type} (*<{below}%), "),
        (false, _) => format!("%exp -: {instance_type} has no published figure, "),
    }
}

/// The row to keep on screen: the size being measured, or once finished the last one measured.
fn anchor(state: &DashboardState, sizes: &[u64]) -> Option<usize> {
    let running = state.progress.size.filter(|_| !state.finished).and_then(|size| sizes.iter().position(|&s| s == size));
    running.or_else(|| {
        let results = state.results.as_ref()?;
        sizes.iter().rposition(|&size| results.measurements.iter().any(|m| m.size == size))
    })
}

pub(super) fn render(state: &DashboardState, view: &View, area: Rect, buf: &mut Buffer, chrome: Chrome) {
    if area.is_empty() {
        return;
    }
    let experiment = if state.run.experiment == Experiment::Unknown { String::new() } else { format!("{}: ", state.run.experiment) };
    // The shape is chosen first: a shortened table says in its legend what its names lost.
    let inner_width = usize::from(chrome::block("Results", false, chrome).inner(area).width);
    let (shape, (columns, rows)) = SHAPES
        .iter()
        .map(|&shape| (shape, table(state, shape)))
        .find(|(_, (columns, _))| grid::total_width(columns) <= inner_width)
        .unwrap_or_else(|| (SHAPES[SHAPES.len() - 1], table(state, SHAPES[SHAPES.len() - 1])));
    let configs_now = configs(state);
    let shortened = match (shape.titles, shared_affixes(&configs_now), configs_now.first()) {
        (Titles::Short, Some((prefix, suffix)), Some(first)) => {
            let (head, _, tail) = first.parts();
            format!("without {}…{}: ", if prefix { head } else { "" }, if suffix { tail.as_str() } else { "" })
        }
        _ => String::new(),
    };
    let expected = expected_legend(state, shape);
    let legend = if shortened.is_empty() && (expected.is_empty() || shape.titles == Titles::WithUnits) {
        format!(" {experiment}Gbps, {expected}BusBW % of link, latency in us ")
    } else {
        format!(" {experiment}{shortened}Gbps, {expected}BusBW %, us ")
    };
    let block = chrome::block("Results", view.focus == Panel::Results, chrome)
        .title_top(Line::styled(legend, Style::new().fg(Color::DarkGray)).right_aligned());
    let inner = block.inner(area);
    block.render(area, buf);
    if inner.is_empty() {
        return;
    }
    if configs_now.is_empty() || sizes(state).is_empty() {
        Line::styled("no measurements yet", Style::new().fg(Color::DarkGray)).render(inner, buf);
        return;
    }

    let mut lines = inner.rows();
    if let Some(header_row) = lines.next() {
        grid::header(&columns).render(header_row, buf);
    }
    let sizes = sizes(state);
    let anchor = anchor(state, &sizes);
    let in_progress = state.progress.size.filter(|_| !state.finished);
    let offset = grid::scroll_offset(anchor, usize::from(inner.height.saturating_sub(1)));
    for ((size, row), line_area) in sizes.iter().zip(rows).skip(offset).zip(lines) {
        grid::row(Some(*size) == in_progress, &columns, row).render(line_area, buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The columns a results file's labels stand for, read as a file is.
    fn columns(labels: &[&str]) -> Vec<ResultColumn> {
        labels.iter().map(|label| serde_json::from_value((*label).into()).expect("a label")).collect()
    }

    fn shared(labels: &[&str]) -> Option<(bool, bool)> {
        let columns = columns(labels);
        shared_affixes(&columns.iter().collect::<Vec<_>>())
    }

    fn short(labels: &[&str]) -> Vec<String> {
        let columns = columns(labels);
        let affixes = shared(labels);
        columns.iter().map(|c| short_name(c, affixes)).collect()
    }

    #[test]
    fn shared_affixes_come_off_only_when_every_name_keeps_something() {
        let proxy = ["ProxySingleDMA(staged)", "ProxyMultiDMA(staged)", "ProxySingleNBIDMA(staged)", "ProxyMultiNBIDMA(staged)"];
        assert_eq!(short(&proxy), ["Single", "Multi", "SingleNBI", "MultiNBI"]);
        let write = ["SinglePin", "MultiPin", "RoundRobinPin"];
        assert_eq!(short(&write), ["Single", "Multi", "RoundRobin"]);
        // One name, nothing shared, or a name that would be left empty: names stay whole.
        assert_eq!(shared(&["SinglePin"]), None);
        assert_eq!(shared(&["IPC 1x256", "CE"]), None);
        assert_eq!(shared(&["Pin", "SinglePin"]), None);
        // What tells two columns apart stays, even when both share it.
        let nbi = ["ProxySingleNBIDMA(staged)", "ProxyMultiNBIDMA(staged)"];
        assert_eq!(short(&nbi), ["SingleNBI", "MultiNBI"]);
    }
}
