//! A run of efatop as a library: how the ranks are started and find each other (bootstrap, launch), one
//! rank's run, rank 0's loop, where every ending of a run is decided, and its outlets (the collector of
//! every rank's telemetry, the watchdog, the results file, `--serve`/`--record`, the run's metrics
//! endpoint). No command line, terminal or drawing: the binary (`src/`) parses the flags, builds the
//! plan and passes in the consumer that shows the run; nothing here prints a run's output.

#![forbid(unsafe_code)]

pub mod affinity;
pub mod bootstrap;
pub mod collector;
pub mod handshake;
pub mod launch;
pub mod netns;
pub mod nodes;
pub mod rank;
pub mod rank_zero;
pub mod relay;
pub mod results_file;
pub mod run_metrics;
pub mod serve;
pub mod watch;
pub mod watchdog;
