//! What travels between efatop's parts, as plain types with no hwloc, NVML, fabric, CUDA or async runtime
//! behind them (serde, thiserror, histograms and gzip only): the leaf crate every other one
//! builds on.
//! - [`telemetry`]: a rank's interval sample (with its live latency histograms, log-linear, which the hot
//!   path records with one atomic add) and a node's monitor read ([`telemetry::NodeSample`], the one type
//!   the monitor makes and the views draw; its rail check is `efatop_sweep::rails`'), and
//!   [`telemetry::wire`], the binary frames they travel in to rank 0 (golden-tested);
//! - [`results`]: what a run measured ([`RunResults`]), as the results file, the tables, the dashboard and
//!   the reports read it; the one way a step becomes a [`Measurement`] (`Measurement::verified`, with its
//!   BusBW) and the histogram every final latency figure comes from (`LatencyRecorder`, merged across
//!   pairs and ranks);
//! - [`sizes`]: message sizes as flags and tables write them;
//! - [`column`]: what each column of the results is ([`Column`]), matched on by every crate and named in
//!   one place; [`experiment`]: which experiment ran ([`Experiment`]); [`ipc`]: the ipc experiment's
//!   movers;
//! - [`events`]: the run's events as rank 0's fold takes them, and [`stream`], how they travel to viewers
//!   and into recordings, within the caps a reader holds a stream to; [`recording`]: `--record`'s file and
//!   `efatop replay`'s reader.
//! - [`counters`]: a step's application bytes against its NICs' counters, and the warnings they give.
//! - [`sweep`]: the sweep's records: its rounds, their figures and its verdict (the plan and the rule are
//!   `efatop-sweep`'s).
//! - [`expected`]: a measurement against its published reference figure, as results carry it (the figures
//!   and the rule are `efatop-report`'s).
//! - [`action`]: what a finding or a suspect calls for (`none` to `replace`), the word check, sweep and
//!   the exporter's Xid counts share.
//! - [`nccl`]: NCCL's own traffic as efatop's profiler plugin reports it, and `efatop watch`'s lines (the fold
//!   that makes them is the runtime's).
//! - [`handshake`]: the bytes of the handshake every connection into a run opens with, and of the sealed
//!   records after it (what proves the secret and seals the records is `efatop-auth`'s).
//! - [`liveness`]: rank 0's one liveness clock (when each rank was last heard from), which the watchdog
//!   judges hangs by and the dashboard shows.
//! - [`output`]: every `--json` line of every command, as one tagged type ([`output::Line`]), golden-tested.
//! - [`words`]: counts and articles in messages (`1 segment`, `an alltoall run`).
//! - [`topology`]: a node's layout as results carry it (links, GPU pairs, CPU lists); `efatop-topology`
//!   finds it with hwloc, `efatop-node` with NVML.
//!
//! `efatop-ui`, `efatop-report` and the fuzz targets build on this crate alone; every crate names these
//! types by their paths here.

#![forbid(unsafe_code)]

pub mod action;
pub mod handshake;
pub mod column;
pub mod counters;
pub mod events;
pub mod expected;
pub mod experiment;
pub mod liveness;
pub mod ipc;
pub mod nccl;
pub mod recording;
pub mod results;
pub mod sizes;
pub mod stream;
pub mod sweep;
pub mod telemetry;
pub mod words;
pub mod output;
pub mod topology;

pub use column::Column;
pub use experiment::Experiment;
pub use results::{Measurement, RunMetadata, RunResults};
