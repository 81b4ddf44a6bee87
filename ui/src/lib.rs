//! What efatop draws. This crate does no I/O: it turns results into text (and, with the dashboard,
//! into ratatui widgets) for the binary to put on screen.

#![forbid(unsafe_code)]

pub mod counters;
pub mod dashboard;
pub mod fleet;
pub mod header;
pub mod ingest;
pub mod liveness;
pub mod monitor;
pub mod state;
pub mod table;
pub mod verdict;

pub use header::render_header;
pub use table::render_table;
pub use verdict::render_verdict;
