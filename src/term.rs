//! The one owner of the terminal, for the benchmark dashboard and `efatop monitor` alike: raw mode and
//! the alternate screen on entry, restored on every way out (drop, error, panic, and the signal and
//! watchdog paths that end the process, through [`restore`]); and the keys both views understand.

use std::io::{IsTerminal, Stdout};
use std::sync::Once;
use std::time::Duration;

use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::terminal::{EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode};
use efatop_ui::state::Key;
use efatop_ui::tui::KeyPoll;
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;

pub fn stdout_is_terminal() -> bool {
    std::io::stdout().is_terminal()
}

/// Restores the terminal when dropped, so an early return or error cannot leave it raw.
pub struct TerminalGuard;

impl TerminalGuard {
    pub fn enter() -> std::io::Result<(Self, Terminal<CrosstermBackend<Stdout>>)> {
        // One hook for the process, however many times a view takes the terminal.
        static HOOK: Once = Once::new();
        enable_raw_mode()?;
        let guard = Self;
        crossterm::execute!(std::io::stdout(), EnterAlternateScreen, crossterm::cursor::Hide)?;
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                previous(info);
            }));
        });
        Ok((guard, Terminal::new(CrosstermBackend::new(std::io::stdout()))?))
    }
}

/// Leaves raw mode and the alternate screen; harmless when the terminal was never taken.
pub fn restore() {
    let _ = disable_raw_mode();
    let _ = crossterm::execute!(std::io::stdout(), LeaveAlternateScreen, crossterm::cursor::Show);
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}

/// Waits up to `tick` for a key press the views understand.
pub fn next_key(tick: Duration) -> std::io::Result<KeyPoll> {
    if !event::poll(tick)? {
        return Ok(KeyPoll::Nothing);
    }
    let Event::Key(key) = event::read()? else { return Ok(KeyPoll::Nothing) };
    if key.kind == KeyEventKind::Release {
        return Ok(KeyPoll::Nothing);
    }
    if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
        return Ok(KeyPoll::Interrupt);
    }
    Ok(map_key(key.code).map_or(KeyPoll::Nothing, KeyPoll::Key))
}

fn map_key(code: KeyCode) -> Option<Key> {
    Some(match code {
        KeyCode::Char(c) => Key::Char(c),
        // The monitor's filter prompt takes backspace as the control character.
        KeyCode::Backspace => Key::Char('\u{8}'),
        KeyCode::Esc => Key::Esc,
        KeyCode::Tab => Key::Tab,
        KeyCode::BackTab => Key::BackTab,
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::Left => Key::Left,
        KeyCode::Right => Key::Right,
        KeyCode::Enter => Key::Enter,
        _ => return None,
    })
}
