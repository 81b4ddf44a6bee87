//! What rank 0's session hears from the run, on one channel: the collector's telemetry batches and the
//! experiment's own events (steps, measurements, notes, the end).

use efatop_experiments::results::{Measurement, PairMatrix};
use efatop_experiments::sweep::{SweepResults, SweepRound, Verdict};

use crate::collector::CollectorEvent;

/// Everything rank 0's consumer (dashboard or JSON printer) is told, in arrival order.
#[derive(Debug)]
pub enum ConsumerEvent {
    /// What the collector decoded since its last batch, in arrival order per rank.
    Telemetry(Vec<CollectorEvent>),
    Begin { columns: Vec<String>, memory: String },
    Step { config: String, size: u64 },
    Measured(Box<Measurement>),
    PairMatrix(Box<PairMatrix>),
    /// A line for the log, told by the experiment while a step runs.
    Note(String),
    /// Sweep: its settings and every rank's host and NICs, before the first round (no rounds in it).
    SweepBegin(Box<SweepResults>),
    /// Sweep: a round finished, with every figure it measured.
    SweepRound(Box<SweepRound>),
    /// Sweep: the verdict, once every round (retests included) is judged.
    SweepVerdict(Box<Verdict>),
    Finished { error: Option<String> },
}

impl From<Vec<CollectorEvent>> for ConsumerEvent {
    fn from(events: Vec<CollectorEvent>) -> Self {
        Self::Telemetry(events)
    }
}
