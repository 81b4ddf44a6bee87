//! Fixed-width text tables for the peers and results panels: a header line, then rows whose cells
//! each carry their own style (a red drop count, a dim finished rank).

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

use super::text::{cell, width, Align};

/// Blank columns between cells.
pub(super) const GAP: &str = "  ";
/// What a row starts with: a selection marker, or blanks of the same width.
pub(super) const MARKER: &str = "▶ ";
pub(super) const NO_MARKER: &str = "  ";

#[derive(Clone, Debug)]
pub(super) struct Column {
    pub title: String,
    pub width: usize,
    pub align: Align,
}

impl Column {
    /// A column as wide as its title or its widest value.
    pub(super) fn fitted<'a>(title: &str, align: Align, values: impl IntoIterator<Item = &'a str>) -> Column {
        let width = values.into_iter().map(width).chain([width(title)]).max().unwrap_or(0);
        Column { title: title.to_string(), width, align }
    }
}

/// Columns and gaps plus the marker.
pub(super) fn total_width(columns: &[Column]) -> usize {
    let cells: usize = columns.iter().map(|column| column.width).sum();
    width(NO_MARKER) + cells + width(GAP) * columns.len().saturating_sub(1)
}

pub(super) fn header(columns: &[Column]) -> Line<'static> {
    let style = Style::new().fg(Color::DarkGray).add_modifier(Modifier::BOLD);
    let mut spans = vec![Span::raw(NO_MARKER)];
    for (index, column) in columns.iter().enumerate() {
        if index > 0 {
            spans.push(Span::raw(GAP));
        }
        spans.push(Span::styled(cell(&column.title, column.width, column.align), style));
    }
    Line::from(spans)
}

/// One row; `cells` pairs each column with its text and style.
pub(super) fn row(marked: bool, columns: &[Column], cells: Vec<(String, Style)>) -> Line<'static> {
    let lead = if marked { MARKER } else { NO_MARKER };
    let mut spans = vec![Span::styled(lead, Style::new().fg(Color::Cyan))];
    for (index, (column, (text, style))) in columns.iter().zip(cells).enumerate() {
        if index > 0 {
            spans.push(Span::raw(GAP));
        }
        spans.push(Span::styled(cell(&text, column.width, column.align), style));
    }
    Line::from(spans)
}

/// The first row to show so that `anchor` (if any) is on screen among `visible` rows.
pub(super) fn scroll_offset(anchor: Option<usize>, visible: usize) -> usize {
    match anchor {
        Some(index) if visible > 0 && index >= visible => index + 1 - visible,
        _ => 0,
    }
}
