//! How rank 0 shows the run: the live dashboard on a terminal, JSON lines (`--json`), or plain tables. Each
//! is a printer over the same events ([`efatop_proto::events::ConsumerEvent`]).

pub mod dashboard;
pub mod jsonl;
pub mod plain;

/// How rank 0 shows the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Dashboard,
    Json,
    Plain,
}
