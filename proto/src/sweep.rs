//! `efatop sweep`: which rank meets which in each round, what each round measured, and the verdict.
//!
//! These are the sweep's records; its plan of rounds and its verdict's rule are `efatop_sweep`'s. Rank 0
//! records [`SweepRound`]s in the results file as they finish, the JSON printer writes them as
//! `sweep_round` lines ([`crate::output::Line::SweepRound`]), the dashboard draws them, and the run ends with one [`Verdict`].
//!
//! Units: a rank is a node of the plan (one rank per node is how a sweep is meant to run; ranks that share a
//! host are still planned apart, and node-level findings group by host). A rank's channel k uses its k-th
//! NIC. In pairing and retest rounds channel k of a rank meets channel k of another (rail-aligned); in the
//! cross-rail round channel k of the smaller rank of a pair meets channel k + 1 of the larger, so that each
//! NIC meets a second NIC of the same peer node and a NIC can be told from the link between two.

use serde::{Deserialize, Serialize};

/// Why a round ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RoundKind {
    /// One of the tournament's rounds: every rank meets a new peer.
    Pairing,
    /// A suspect meets a different peer (or a suspect pair meets again) to tell a NIC from a link.
    Retest,
    /// The pairs of the first round again, NIC k of the smaller rank with NIC k + 1 of the larger.
    #[serde(rename = "cross_rail")]
    CrossRail,
}

/// One round's plan: the pairs that exchange at once (every rank in at most one pair).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Round {
    /// 0-based, over pairing and retest rounds alike.
    pub index: usize,
    pub kind: RoundKind,
    /// Pairs of ranks, the smaller first.
    pub pairs: Vec<(usize, usize)>,
    /// Channel k of the smaller rank of a pair meets channel (k + shift) mod channels of the larger: 0 in
    /// rail-aligned rounds, 1 in the cross-rail round.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shift: usize,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(value: &usize) -> bool {
    *value == 0
}

impl Round {
    /// The rank `rank` meets in this round, if any.
    pub fn partner(&self, rank: usize) -> Option<usize> {
        self.pairs.iter().find_map(|&(a, b)| {
            if a == rank {
                Some(b)
            } else if b == rank {
                Some(a)
            } else {
                None
            }
        })
    }

    /// The channel of `partner` that `rank`'s channel `rail` meets in this round, with `rails` channels a
    /// rank.
    pub fn remote_rail(&self, rank: usize, partner: usize, rail: usize, rails: usize) -> usize {
        if rails == 0 || self.shift == 0 {
            return rail;
        }
        let shift = self.shift % rails;
        if rank < partner { (rail + shift) % rails } else { (rail + rails - shift) % rails }
    }
}

/// What one direction of one rail of one pair delivered in a round: `from`'s channel `rail` writing
/// `to`'s channel `to_rail` (the same channel unless the round is cross-rail), timed by the writer: `gbps`
/// from its first timed post to its last completion, `steady_gbps` one write's bytes over the median
/// write's time (`p50_us`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    pub from: usize,
    pub to: usize,
    pub rail: usize,
    /// The receiving channel where it is not `rail` (cross-rail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_rail: Option<usize>,
    pub gbps: f64,
    /// The rate of the median write: what the judge uses, so that one stalled write (a TCP retransmission
    /// timeout, a preempted rank) does not make a slow link. Absent (0) in figures that lack it.
    #[serde(default)]
    pub steady_gbps: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// What the writer retransmitted while this figure was measured, where that can be told per channel:
    /// its NIC's retransmitted packets and retransmit timeouts (EFA `retrans_pkts` +
    /// `retrans_timeout_events`), or, on TCP, the segments its rank retransmitted while this rail ran alone
    /// (rails one after another). Absent where no counter says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
}

impl Figure {
    /// The channel written to.
    pub fn target_rail(&self) -> usize {
        self.to_rail.unwrap_or(self.rail)
    }

    /// The figure the verdict judges: the median write's rate where known, else the whole run's.
    pub fn judged_gbps(&self) -> f64 {
        if self.steady_gbps > 0.0 { self.steady_gbps } else { self.gbps }
    }
}

/// A finished round: its plan and every figure it measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepRound {
    pub round: Round,
    /// How many pairing rounds the plan has (retest rounds come after them).
    pub planned: usize,
    pub figures: Vec<Figure>,
}

/// What a suspect is: one NIC of one rank, every NIC of a node, or the path between two ranks on a rail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Nic,
    Node,
    Link,
}

/// One finding of the verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Suspect {
    pub rank: usize,
    pub host: String,
    pub gpu: Option<usize>,
    /// The NIC (libfabric domain); for a node, `None` and every NIC is in `nics`.
    pub nic: Option<String>,
    /// The NIC's PCI address where known (for a node, its GPU's).
    pub pci: Option<String>,
    /// The best this NIC (node: the best of its NICs; link: the pair) did with any peer, in Gbps.
    pub measured_gbps: f64,
    /// The fleet median of the same rail (node: of its rails' medians), in Gbps.
    pub median_gbps: f64,
    pub peers_tried: Vec<usize>,
    pub why: String,
    pub scope: Scope,
    /// The rail (channel index); `None` for a node.
    pub rail: Option<usize>,
    /// For a link, the rank at its other end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<usize>,
    /// For a link, the NIC at its other end (another rail's where the link is cross-rail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_nic: Option<String>,
    /// For a node, every NIC found low.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nics: Vec<String>,
}

/// How much the sweep looked at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checked {
    pub nodes: usize,
    pub nics: usize,
}

impl Checked {
    /// `4 nodes, 16 NICs checked`.
    pub fn describe(&self) -> String {
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        format!("{} node{}, {} NIC{} checked", self.nodes, plural(self.nodes), self.nics, plural(self.nics))
    }
}

/// The sweep's conclusion: empty `suspects` means every NIC and link passed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub suspects: Vec<Suspect>,
    pub checked: Checked,
}

/// The results file's record of a sweep: its settings, every round, and the verdict once judged.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepResults {
    pub size: u64,
    pub threshold: f64,
    /// Only a speed given with `--link-gbps` is judged against.
    pub link_gbps: Option<f64>,
    pub quick: bool,
    /// Whether the cross-rail round was asked for (`--no-cross-rail` says no).
    #[serde(default)]
    pub cross_rail: bool,
    /// Every rank's host, GPU and NICs.
    pub nodes: Vec<NodeFacts>,
    pub rounds: Vec<SweepRound>,
    pub verdict: Option<Verdict>,
    /// How the sweep ran where that bears on its figures (e.g. rails one after another).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// What the verdict names a rank by: its host, GPU and NICs (in channel order), as the rank found them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeFacts {
    pub rank: usize,
    pub host: String,
    pub gpu: Option<usize>,
    pub gpu_pci: Option<String>,
    pub nics: Vec<NicFacts>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicFacts {
    pub name: String,
    pub pci: Option<String>,
}
