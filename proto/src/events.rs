//! The run's events: everything rank 0's fold (the dashboard, the JSON printer) is told, in one type,
//! [`ConsumerEvent`], which serializes. The same events travel to viewers of a served run (`--serve`,
//! `efatop attach`) and into recordings (`--record`, `efatop replay`) through [`crate::stream`], so a
//! viewer folds exactly what rank 0 folds.
//!
//! Every payload derives serde's traits: a variant added here serializes with no more work.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::column::Column;
use crate::experiment::Experiment;
use crate::results::{Measurement, PairMatrix, RankPlacement, RunResults};
use crate::sweep::{SweepResults, SweepRound, Verdict};
use crate::telemetry::wire::WireError;
use crate::telemetry::{NodeSample, PhaseReport, RankSample};

/// What is running: fixed once the world is established (the dashboard's header).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub experiment: Experiment,
    /// e.g. `tcp;ofi_rxm`.
    pub provider_stack: String,
    pub ranks: usize,
    /// Host name of each rank, indexed by rank.
    pub hosts: Vec<String>,
    pub channels: usize,
    /// Link speed per channel in Gbps, if known (gauges are drawn against it; without it they scale to the
    /// highest rate seen and say so).
    pub link_gbps: Option<f64>,
    pub memory: String,
    /// Configuration columns in order, e.g. `SinglePin`, `MultiPin`.
    pub configs: Vec<Column>,
    pub sizes: Vec<u64>,
    /// Where each rank runs: GPU, NICs its channels use, pinned CPUs (from the node topology).
    pub placements: Vec<RankPlacement>,
}

/// Everything a viewer needs before the run's first event: what the header shows, every rank's NIC
/// names, the results as they stood (metadata and notes, the columns), and what the JSON printer prints.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunStart {
    pub info: RunInfo,
    /// Every rank's NIC names, by rank then channel.
    pub nics: Vec<Vec<String>>,
    pub results: RunResults,
    /// JSON lines per (sender, receiver) pair too: all-to-all runs.
    pub pairs: bool,
    /// Where rank 0 serves the run (`--serve`), as bound; `None` when it does not.
    #[serde(default)]
    pub serving: Option<SocketAddr>,
    /// The telemetry interval in milliseconds (a viewer's liveness clock expects a sample this often).
    #[serde(default)]
    pub interval_ms: u64,
}

impl RunStart {
    /// The run's world, which every consumer holds its telemetry to: its ranks, and the most channels a
    /// rank has (the run's, or the NIC names a rank reported, whichever is more).
    pub fn world(&self) -> crate::telemetry::WorldBounds {
        let channels = self.nics.iter().map(Vec::len).max().unwrap_or(0).max(self.info.channels);
        crate::telemetry::WorldBounds { ranks: self.info.ranks, channels }
    }
}

/// What the collector tells rank 0's consumer (dashboard or JSON printer).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CollectorEvent {
    Sample(Box<RankSample>),
    /// A node's `efatop monitor` snapshot.
    Node(Box<NodeSample>),
    /// A frame was rejected; the connection goes on when its length was sane.
    Malformed {
        from: SocketAddr,
        #[serde(with = "told")]
        reason: WireError,
    },
    /// A connection was refused: it did not prove the run's secret, or went beyond the run's world (a
    /// rank outside it or already connected, too many connections, a frame too long). `total` counts every
    /// refusal so far; the collector tells the first few and then at most one a second.
    Refused { from: SocketAddr, reason: String, total: u64 },
    /// A rank's telemetry connection closed (`rank` is known once it sent a sample).
    Closed { from: SocketAddr, rank: Option<u32> },
    /// A rank started a phase (allocating, registering, verifying ...): progress, counted as alive.
    Phase(PhaseReport),
}

/// Everything rank 0's consumer (dashboard or JSON printer) is told, in arrival order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ConsumerEvent {
    /// The run as the world set it up: the first event a viewer or a recording gets. Rank 0's own
    /// consumer starts from it without being sent it.
    Run(Box<RunStart>),
    /// What the collector decoded since its last batch, in arrival order per rank.
    Telemetry(Vec<CollectorEvent>),
    Begin { columns: Vec<Column>, memory: String },
    Step { config: Column, size: u64 },
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
    /// Rank 0's liveness clock as its watchdog keeps it, told to rank 0's own consumer (the dashboard)
    /// while it moves. Never served nor recorded: a viewer keeps its own clock from the telemetry.
    #[serde(skip)]
    Liveness(Box<crate::liveness::Liveness>),
}

impl From<Vec<CollectorEvent>> for ConsumerEvent {
    fn from(events: Vec<CollectorEvent>) -> Self {
        Self::Telemetry(events)
    }
}

/// A rejected frame's reason travels as its text and comes back as [`WireError::Told`].
mod told {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::telemetry::wire::WireError;

    pub fn serialize<S: Serializer>(reason: &WireError, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(reason)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<WireError, D::Error> {
        String::deserialize(deserializer).map(WireError::Told)
    }
}
