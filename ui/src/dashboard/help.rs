//! The help overlay: every key and what it does, over the middle of the dashboard.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Clear, Widget};

use crate::state::DashboardState;
use crate::view::View;

const KEYS: [(&str, &str); 8] = [
    ("q  Esc", "quit: stops the run on every rank"),
    ("Tab", "focus the next panel"),
    ("BackTab", "focus the previous panel"),
    ("↑ ↓", "select a rank"),
    ("← →", "select a channel of that rank"),
    ("p", "freeze / unfreeze the view"),
    ("t", "show / hide the topology (GPUs, NICs in use, CPUs)"),
    ("?", "show / hide this help (Esc closes it)"),
];
/// Only all-to-all runs have the heatmap, so only their help lists its keys (after the arrows').
const PAIR_KEYS: [(&str, &str); 2] = [
    ("↑ ↓", "heatmap focused: select the sender (row)"),
    ("← →", "heatmap focused: select the receiver (column)"),
];
const PAIR_KEYS_AFTER: usize = 5;
const KEY_WIDTH: usize = 9;

pub(super) fn render(state: &DashboardState, view: &View, area: Rect, buf: &mut Buffer) {
    let mut keys = KEYS.to_vec();
    if state.pairs.is_some() {
        keys.splice(PAIR_KEYS_AFTER..PAIR_KEYS_AFTER, PAIR_KEYS);
    }
    if super::fleet::applies(state) {
        keys.extend_from_slice(&super::fleet::HELP);
    }
    keys.extend_from_slice(view.extra_keys);
    let text_width = keys.iter().map(|(_, what)| what.chars().count()).max().unwrap_or(0) + KEY_WIDTH;
    let width = u16::try_from(text_width + 4).unwrap_or(u16::MAX).min(area.width);
    let height = u16::try_from(keys.len() + 2).unwrap_or(u16::MAX).min(area.height);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    if popup.is_empty() {
        return;
    }
    Clear.render(popup, buf);
    let block = Block::bordered()
        .border_type(BorderType::Double)
        .border_style(Style::new().fg(Color::Cyan))
        .title(Line::styled(" Keys ", Style::new().add_modifier(Modifier::BOLD)))
        .title_bottom(Line::styled(" Esc or ? to close ", Style::new().fg(Color::DarkGray)).right_aligned());
    let inner = block.inner(popup);
    block.render(popup, buf);
    for ((key, what), row) in keys.iter().zip(inner.rows()) {
        Line::from(vec![
            Span::styled(format!(" {key:<KEY_WIDTH$}"), Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)),
            Span::raw(*what),
        ])
        .render(row, buf);
    }
}
