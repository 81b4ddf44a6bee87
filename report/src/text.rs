//! A run as plain text, the way it ends on a terminal without the dashboard and the way `efatop report`
//! prints it again: the header (what ran, where, over what), the seed-format table with its percentiles,
//! the NIC-counter lines, and a sweep's tables and verdict. Strings only; the caller prints them.

pub mod counters;
pub mod header;
pub mod table;
pub mod verdict;

pub use header::render_header;
pub use table::render_table;
pub use verdict::{render_figures_csv, render_rounds, render_verdict};
