//! What efatop draws: the dashboard's ratatui widgets, its state and how events fold into it (the run's
//! events, keys and ticks folded by [`app::App`]), the liveness clock it shows, the monitor's views, and
//! the one session loop every TUI runs on ([`tui`]; its keys come from the binary, the one owner of the
//! terminal).
//! This crate does no I/O and depends on `efatop-proto` and ratatui alone; the plain-text tables a run prints are `efatop-report`'s (`efatop_report::text`).

#![forbid(unsafe_code)]

pub mod app;
pub mod dashboard;
pub mod fleet;
pub mod ingest;
pub mod monitor;
pub mod state;
#[cfg(any(test, feature = "scripted"))]
pub mod screen;
pub(crate) mod text;
pub mod tui;
pub mod view;
pub mod watch;
