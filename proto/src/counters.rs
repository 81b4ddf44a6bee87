//! Where a step's bytes went: every rank's channels, the bytes the application moved on each (sent plus
//! received) beside what the channel's NIC counted over the same step, their ratio, and the warnings a
//! reader must not miss (bytes that crossed no NIC, writes that moved as sends, traffic on a NIC other than
//! the channel's, retransmits). Ranks read their counters between measured steps; rank 0 gathers them into
//! one [`StepCounters`] per configuration and size, which the results file, the JSON lines, the header and
//! the dashboard's log show. The shapes are here; the rules that turn counter changes into ratios and
//! warnings are rank 0's (`efatop_experiments::reconcile`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// What kind of operation a step moved, which decides the NIC counter it is held against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepOp {
    /// One-sided RDMA WRITE: EFA's `rdma_write_bytes` (sender) and `rdma_write_recv_bytes` (target).
    Write,
    /// Two-sided SEND/RECV: EFA's `send_bytes` and `recv_bytes`.
    Send,
}

/// Where a channel's NIC counters were read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum CounterSource {
    /// An RDMA device's port counters (`sys/class/infiniband/<dev>/ports/*/hw_counters`).
    Rdma { device: String },
    /// A network interface's statistics (`sys/class/net/<if>/statistics`, or the rank's network
    /// namespace's `/proc/thread-self/net/dev`, which holds the same counters).
    Net { interface: String },
    /// The loopback interface: the bytes went through the kernel, not a NIC.
    Loopback { interface: String },
    /// No NIC at all (shm, or a domain efatop cannot place); `why` says which.
    None { why: String },
}

impl CounterSource {
    /// The device or interface, when there is one.
    pub fn nic(&self) -> Option<&str> {
        match self {
            Self::Rdma { device } => Some(device),
            Self::Net { interface } | Self::Loopback { interface } => Some(interface),
            Self::None { .. } => None,
        }
    }
}

/// One rank's channel over one step, as the rank read it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChannelReading {
    pub channel: usize,
    pub source: CounterSource,
    /// Bytes the application moved on this channel during the step (warmup included), sent plus received.
    pub app_bytes: u64,
    /// How much each counter of the channel's NIC grew during the step; empty without a NIC. A counter
    /// that went backwards (reset, wrap) is left out rather than given a bogus change.
    pub deltas: BTreeMap<String, u64>,
}

/// A NIC of the rank's node that is no channel's, or a channel's that the application did not use this
/// step, with what it moved during the step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OtherNicReading {
    pub nic: String,
    /// tx + rx bytes during the step.
    pub bytes: u64,
}

/// Everything one rank read over one step: what it sends to rank 0.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RankReading {
    pub rank: usize,
    pub channels: Vec<ChannelReading>,
    pub others: Vec<OtherNicReading>,
    /// TCP segments retransmitted in the rank's network namespace during the step (`/proc/net/snmp`),
    /// when the channels are TCP and the count could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_retransmits: Option<u64>,
}

/// One channel of one rank in a step's reconciliation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChannelCounters {
    pub rank: usize,
    pub channel: usize,
    /// The device or interface whose counters were read; absent when the channel has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic: Option<String>,
    pub source: CounterSource,
    pub app_bytes: u64,
    /// What the NIC counted over the step, from `counter`; absent without NIC counters.
    pub nic_bytes: Option<u64>,
    /// Which counters `nic_bytes` sums, e.g. `rdma_write_bytes` (sender and target sides) or
    /// `tx_bytes+rx_bytes`.
    pub counter: Option<String>,
    /// `nic_bytes / app_bytes`; absent when either is zero or unknown (never invented).
    pub ratio: Option<f64>,
    /// Every counter's change over the step.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub deltas: BTreeMap<String, u64>,
}

/// What a warning is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WarningKind {
    /// The channel's bytes crossed no NIC: shm, loopback, or a NIC that counted nothing.
    NoNic,
    /// RDMA WRITE moved as sends: `send_bytes` grew and `rdma_write_bytes` did not (emulated RDMA).
    EmulatedWrite,
    /// A NIC other than the channel's moved bytes during the step.
    OtherNic,
    /// The NIC (or the rank's TCP stack) retransmitted during the step.
    Retransmits,
}

/// One warning of a step, with its sentence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CounterWarning {
    pub kind: WarningKind,
    pub rank: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic: Option<String>,
    /// The warning with this step's amounts: `rank 0 channel 0: 5.0 MB crossed no NIC (...)`.
    pub message: String,
    /// The same without amounts, alike for every step it recurs in (the run's notes keep one of each).
    pub headline: String,
}

/// Rank 0's reconciliation of one configuration at one size.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepCounters {
    /// Every rank's channels that moved bytes or have a NIC, rank by rank.
    pub channels: Vec<ChannelCounters>,
    /// Sum of NIC bytes over sum of application bytes, over the channels that have both; absent when no
    /// channel has.
    pub ratio: Option<f64>,
    /// The counter the ratio was taken from, when every channel in it used the same one.
    pub counter: Option<String>,
    pub warnings: Vec<CounterWarning>,
}

/// A readable byte count: `1.5 MB`, `320 kB`, `12 B` (decimal, as link rates are).
pub fn human_bytes(bytes: u64) -> String {
    let value = bytes as f64;
    if value >= 1e9 {
        format!("{:.2} GB", value / 1e9)
    } else if value >= 1e6 {
        format!("{:.1} MB", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.0} kB", value / 1e3)
    } else {
        format!("{bytes} B")
    }
}

impl StepCounters {
    /// Channels with a ratio, lowest and highest.
    pub fn ratio_range(&self) -> Option<(f64, f64)> {
        self.channels.iter().filter_map(|c| c.ratio).fold(None, |range, r| match range {
            None => Some((r, r)),
            Some((low, high)) => Some((f64::min(low, r), f64::max(high, r))),
        })
    }

    /// Whether any warning is of `kind`.
    pub fn warns(&self, kind: WarningKind) -> bool {
        self.warnings.iter().any(|w| w.kind == kind)
    }

    /// The line a header or table shows: `NIC/app 1.03 (rdma_write_bytes)`, with the per-channel range
    /// when channels differ, `(emulated RDMA)` when writes moved as sends, `NIC/app - (...)` when no
    /// channel had both figures.
    pub fn summary(&self) -> String {
        let mut line = match (self.ratio, &self.counter) {
            (Some(ratio), Some(counter)) => format!("NIC/app {ratio:.3} ({counter})"),
            (Some(ratio), None) => format!("NIC/app {ratio:.3}"),
            (None, _) if self.warns(WarningKind::NoNic) => "NIC/app - (bytes crossed no NIC)".to_string(),
            (None, _) => "NIC/app - (no NIC counters)".to_string(),
        };
        let with_ratio = self.channels.iter().filter(|c| c.ratio.is_some()).count();
        if let (Some((low, high)), true) = (self.ratio_range(), with_ratio > 1) {
            let _ = write!(line, ", channels {low:.3}-{high:.3} over {with_ratio}");
        }
        if self.warns(WarningKind::EmulatedWrite) {
            line.push_str(", emulated RDMA");
        }
        if !self.warnings.is_empty() {
            let _ = write!(line, ", {} warning{}", self.warnings.len(), if self.warnings.len() == 1 { "" } else { "s" });
        }
        line
    }
}
