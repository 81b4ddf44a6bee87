//! Runs rendered for people: the plain text a run prints at its end ([`text`], which the binary's plain
//! printer uses too), tables, plots, and comparisons between two runs.
//!
//! Everything here works on an [`efatop_proto::RunResults`] read back from the file a run wrote (`--out`); nothing is
//! measured again. The binary's `efatop report` and `efatop compare` are thin layers over these functions.
#![forbid(unsafe_code)]

pub mod compare;
pub mod expected;
pub mod figures;
pub mod formats;
pub mod load;
pub mod plot;
pub mod reference;
pub mod text;

pub use compare::{compare, parse_threshold, Comparison};
pub use formats::{render, Format};
pub use load::{load, load_results, Loaded, ReportError};
pub use plot::{plot, sidecar_path, PlotSpec};

