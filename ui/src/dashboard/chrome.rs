//! The frame around a panel. The focused panel gets a thick cyan border, so focus shows even without
//! colour (and in text snapshots).

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, BorderType, Borders};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Chrome {
    /// A full box: for terminals with lines to spare.
    Boxed,
    /// Only a rule with the title above the panel: one line per panel instead of two.
    Rule,
}

impl Chrome {
    /// Lines the frame takes from a panel's height.
    pub(super) fn overhead(self) -> u16 {
        match self {
            Chrome::Boxed => 2,
            Chrome::Rule => 1,
        }
    }
}

pub(super) fn block(title: &str, focused: bool, chrome: Chrome) -> Block<'static> {
    let borders = match chrome {
        Chrome::Boxed => Borders::ALL,
        Chrome::Rule => Borders::TOP,
    };
    let (border_type, border_style, title_style) = if focused {
        (
            BorderType::Thick,
            Style::new().fg(Color::Cyan),
            Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
        )
    } else {
        (BorderType::Plain, Style::new().fg(Color::DarkGray), Style::new().add_modifier(Modifier::BOLD))
    };
    Block::new()
        .borders(borders)
        .border_type(border_type)
        .border_style(border_style)
        .title(Line::styled(format!(" {title} "), title_style))
}
