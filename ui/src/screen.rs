//! Test screens, one shape for every view's tests (and the binary's, through the `scripted` feature): a
//! `TestBackend`'s text ([`screen`]), a terminal with one frame drawn ([`drawn`]), what a widget renders
//! into a buffer ([`rendered`]). Never in the product.

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;

/// The screen of a `TestBackend` as text, one line per row.
pub fn screen(terminal: &Terminal<TestBackend>) -> String {
    let buffer = terminal.backend().buffer();
    let width = usize::from(buffer.area.width).max(1);
    buffer.content().chunks(width).map(|row| row.iter().map(ratatui::buffer::Cell::symbol).collect::<String>() + "\n").collect()
}

/// A `width` × `height` test terminal with one frame drawn by `draw`.
pub fn drawn(width: u16, height: u16, draw: impl FnOnce(&mut ratatui::Frame)) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("a test terminal");
    terminal.draw(draw).expect("draw");
    terminal
}

/// What `render` puts in a `width` × `height` buffer, as text, one line per row.
pub fn rendered(width: u16, height: u16, render: impl FnOnce(Rect, &mut Buffer)) -> String {
    let area = Rect::new(0, 0, width, height);
    let mut buf = Buffer::empty(area);
    render(area, &mut buf);
    (0..height).map(|y| (0..width).map(|x| buf[(x, y)].symbol()).collect::<String>() + "\n").collect()
}
