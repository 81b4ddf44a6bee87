//! The seed-format results table, filling in as sizes complete: `Size | Count` and, per
//! configuration, Gbps, BusBW (%) and mean latency, plus p50 and p99 when the panel is wide enough.
//! Rows cover the planned sweep from the start, so a cell without a measurement behind it shows `-`.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::Widget;

use efatop_experiments::sizes::format_size;
use efatop_experiments::Measurement;

use super::chrome::{self, Chrome};
use super::grid::{self, Column};
use super::text::{number, Align, MISSING};
use crate::state::{DashboardState, Panel};

/// Configurations in column order: the planned ones, then any others that were measured.
fn configs(state: &DashboardState) -> Vec<&str> {
    let measured = state.results.iter().flat_map(|results| results.configs.iter());
    let mut configs: Vec<&str> = Vec::new();
    for config in state.run.configs.iter().chain(measured) {
        if !configs.contains(&config.as_str()) {
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

fn find<'a>(state: &'a DashboardState, config: &str, size: u64) -> Option<&'a Measurement> {
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
    /// Configuration names cut to the width of their numbers.
    Cut,
}

/// How much of the table fits, widest first.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Shape {
    count: bool,
    percentiles: bool,
    titles: Titles,
}

const SHAPES: [Shape; 5] = [
    Shape { count: true, percentiles: true, titles: Titles::WithUnits },
    Shape { count: true, percentiles: false, titles: Titles::WithUnits },
    Shape { count: true, percentiles: false, titles: Titles::Bare },
    Shape { count: false, percentiles: false, titles: Titles::Bare },
    Shape { count: false, percentiles: false, titles: Titles::Cut },
];

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
    let per_config = if shape.percentiles { 5 } else { 3 };
    for config in &configs {
        let with_units = shape.titles == Titles::WithUnits;
        let rate_title = if with_units { format!("{config} Gbps") } else { (*config).to_string() };
        titles.push((rate_title, Align::Right));
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

/// The row to keep on screen: the size being measured, or once finished the last one measured.
fn anchor(state: &DashboardState, sizes: &[u64]) -> Option<usize> {
    let running = state.progress.size.filter(|_| !state.finished).and_then(|size| sizes.iter().position(|&s| s == size));
    running.or_else(|| {
        let results = state.results.as_ref()?;
        sizes.iter().rposition(|&size| results.measurements.iter().any(|m| m.size == size))
    })
}

pub(super) fn render(state: &DashboardState, area: Rect, buf: &mut Buffer, chrome: Chrome) {
    if area.is_empty() {
        return;
    }
    let experiment = if state.run.experiment.is_empty() { String::new() } else { format!("{}: ", state.run.experiment) };
    let legend = format!(" {experiment}Gbps, BusBW % of link, latency in us ");
    let block = chrome::block("Results", state.focus == Panel::Results, chrome)
        .title_top(Line::styled(legend, Style::new().fg(Color::DarkGray)).right_aligned());
    let inner = block.inner(area);
    block.render(area, buf);
    if inner.is_empty() {
        return;
    }
    if configs(state).is_empty() || sizes(state).is_empty() {
        Line::styled("no measurements yet", Style::new().fg(Color::DarkGray)).render(inner, buf);
        return;
    }

    let available = usize::from(inner.width);
    let (columns, rows) = SHAPES
        .iter()
        .map(|&shape| table(state, shape))
        .find(|(columns, _)| grid::total_width(columns) <= available)
        .unwrap_or_else(|| table(state, SHAPES[SHAPES.len() - 1]));

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
