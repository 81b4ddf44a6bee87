//! The newest log lines, newest at the bottom; warnings in yellow, errors in red.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::chrome::{self, Chrome};
use super::text::{self, clock};
use crate::state::{DashboardState, LogLevel, Panel};
use crate::view::View;

/// Lines the panel would like inside its frame.
pub(super) fn content_height(state: &DashboardState) -> u16 {
    u16::try_from(state.log.len()).unwrap_or(u16::MAX).max(1)
}

pub(super) fn render(state: &DashboardState, view: &View, area: Rect, buf: &mut Buffer, chrome: Chrome) {
    if area.is_empty() {
        return;
    }
    let block = chrome::block("Log", view.focus == Panel::Log, chrome);
    let inner = block.inner(area);
    block.render(area, buf);
    if inner.is_empty() {
        return;
    }
    if state.log.is_empty() {
        Line::styled("nothing logged yet", Style::new().fg(Color::DarkGray)).render(inner, buf);
        return;
    }
    let newest = state.log.len().saturating_sub(usize::from(inner.height));
    for (entry, row) in state.log.iter().skip(newest).zip(inner.rows()) {
        let (level, style) = match entry.level {
            LogLevel::Info => ("info ", Style::new()),
            LogLevel::Warn => ("WARN ", Style::new().fg(Color::Yellow)),
            LogLevel::Error => ("ERROR", Style::new().fg(Color::Red)),
        };
        let room = usize::from(row.width).saturating_sub(8);
        Line::from(vec![
            Span::styled(format!("{:>7} ", clock(entry.at)), Style::new().fg(Color::DarkGray)),
            Span::styled(text::truncate(&format!("{level} {}", entry.text), room), style),
        ])
        .render(row, buf);
    }
}
