//! What travels between efatop's parts, as plain types with no fabric, CUDA or async runtime behind them:
//! - [`telemetry`]: a rank's interval sample (and a node's monitor read), the probe and sampler that make
//!   them, and [`telemetry::wire`], the binary frames they travel in to rank 0 (golden-tested);
//! - [`results`]: what a run measured ([`RunResults`]), as the results file, the tables, the dashboard and
//!   the reports read it;
//! - [`sizes`]: message sizes as flags and tables write them;
//! - [`ipc`]: the ipc experiment's column names;
//! - [`events`]: the run's events as rank 0's fold takes them, and [`stream`], how they travel to viewers
//!   and into recordings.
//! - [`counters`]: a step's application bytes against its NICs' counters, and the warnings they give.
//! - [`sweep`]: the sweep's plan of rounds, its figures and its verdict.
//! - [`rails`]: the one rule by which a NIC is judged behind its rail (sweep, monitor, fleet view).
//! - [`words`]: counts and articles in messages (`1 segment`, `an alltoall run`).
//!
//! `efatop-ui`, `efatop-report` and the fuzz targets build on this crate alone; `efatop-experiments`
//! re-exports it at its old paths.

#![forbid(unsafe_code)]

pub mod events;
pub mod counters;
pub mod ipc;
pub mod rails;
pub mod results;
pub mod sizes;
pub mod stream;
pub mod sweep;
pub mod telemetry;
pub mod words;

pub use results::{Measurement, RunMetadata, RunResults};
