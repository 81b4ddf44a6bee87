//! Where a step's bytes went: every rank's channels, the bytes the application moved on each (sent plus
//! received) beside what the channel's NIC counted over the same step, their ratio, and the warnings a
//! reader must not miss (bytes that crossed no NIC, writes that moved as sends, traffic on a NIC other than
//! the channel's, retransmits). Ranks read their counters between measured steps; rank 0 gathers them into
//! one [`StepCounters`] per configuration and size, which the results file, the JSON lines, the header and
//! the dashboard's log show. The rules that turn counter changes into ratios and warnings are here, as
//! pure functions ([`reconcile_channel`], [`StepCounters::gather`]).

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

/// A NIC other than the channel's is worth a warning when it moved at least this share of the rank's
/// application bytes in the step, and at least [`OTHER_NIC_MIN_BYTES`].
pub const OTHER_NIC_SHARE: f64 = 0.1;
pub const OTHER_NIC_MIN_BYTES: u64 = 64 * 1024;

fn delta(deltas: &BTreeMap<String, u64>, name: &str) -> Option<u64> {
    deltas.get(name).copied()
}

fn sum(deltas: &BTreeMap<String, u64>, names: &[&str]) -> Option<u64> {
    names.iter().map(|name| delta(deltas, name)).try_fold(0_u64, |total, d| d.map(|d| total.saturating_add(d)))
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

/// One channel's ratio and warnings from what its rank read.
pub fn reconcile_channel(rank: usize, op: StepOp, reading: &ChannelReading) -> (ChannelCounters, Vec<CounterWarning>) {
    let mut warnings = Vec::new();
    let channel = reading.channel;
    let nic = reading.source.nic().map(str::to_string);
    let warn = |kind, headline: String, message: String| CounterWarning { kind, rank, channel: Some(channel), nic: nic.clone(), message, headline };
    let deltas = &reading.deltas;
    let (nic_bytes, counter) = match &reading.source {
        CounterSource::Rdma { device } => {
            let (own, own_name, other, other_name) = match op {
                StepOp::Write => (["rdma_write_bytes", "rdma_write_recv_bytes"], "rdma_write_bytes", ["send_bytes", "recv_bytes"], "send_bytes"),
                StepOp::Send => (["send_bytes", "recv_bytes"], "send_bytes", ["rdma_write_bytes", "rdma_write_recv_bytes"], "rdma_write_bytes"),
            };
            let own_bytes = sum(deltas, &own);
            let other_bytes = sum(deltas, &other).unwrap_or(0);
            if op == StepOp::Write && own_bytes.unwrap_or(0) == 0 && other_bytes > 0 && reading.app_bytes > 0 {
                warnings.push(warn(
                    WarningKind::EmulatedWrite,
                    format!("rank {rank} channel {channel} ({device}): writes moved as sends (emulated RDMA): send_bytes grew, rdma_write_bytes did not"),
                    format!(
                        "rank {rank} channel {channel} ({device}): writes moved as sends (emulated RDMA): send_bytes/recv_bytes grew by {}, rdma_write_bytes did not",
                        human_bytes(other_bytes)
                    ),
                ));
                (Some(other_bytes), Some(other_name.to_string()))
            } else {
                match own_bytes {
                    Some(bytes) => (Some(bytes), Some(own_name.to_string())),
                    // An older driver without the operation counters: the port's wire bytes.
                    None => (sum(deltas, &["tx_bytes", "rx_bytes"]), Some("tx_bytes+rx_bytes".to_string())),
                }
            }
        }
        CounterSource::Net { .. } => (sum(deltas, &["tx_bytes", "rx_bytes"]), Some("tx_bytes+rx_bytes".to_string())),
        CounterSource::Loopback { interface } => {
            if reading.app_bytes > 0 {
                warnings.push(warn(
                    WarningKind::NoNic,
                    format!("rank {rank} channel {channel}: bytes went over the loopback interface {interface} and crossed no NIC"),
                    format!(
                        "rank {rank} channel {channel}: {} went over the loopback interface {interface}: these bytes crossed no NIC",
                        human_bytes(reading.app_bytes)
                    ),
                ));
            }
            (None, None)
        }
        CounterSource::None { why } => {
            if reading.app_bytes > 0 {
                warnings.push(warn(
                    WarningKind::NoNic,
                    format!("rank {rank} channel {channel}: bytes crossed no NIC ({why})"),
                    format!("rank {rank} channel {channel}: {} crossed no NIC ({why})", human_bytes(reading.app_bytes)),
                ));
            }
            (None, None)
        }
    };
    if let (Some(0), Some(name), true) = (nic_bytes, nic.as_deref(), reading.app_bytes > 0) {
        warnings.push(warn(
            WarningKind::NoNic,
            format!("rank {rank} channel {channel}: {name} counted none of the application's bytes: they crossed no NIC"),
            format!(
                "rank {rank} channel {channel}: the application moved {} but {name} counted nothing: the bytes crossed no NIC",
                human_bytes(reading.app_bytes)
            ),
        ));
    }
    let retransmits = sum(deltas, &["retrans_pkts"]).unwrap_or(0) + sum(deltas, &["retrans_timeout_events"]).unwrap_or(0);
    if retransmits > 0 {
        warnings.push(warn(
            WarningKind::Retransmits,
            format!("rank {rank} channel {channel} ({}): the NIC retransmitted during a step", nic.as_deref().unwrap_or("-")),
            format!(
                "rank {rank} channel {channel} ({}): {} retransmitted packets and {} retransmit timeouts during the step",
                nic.as_deref().unwrap_or("-"),
                delta(deltas, "retrans_pkts").unwrap_or(0),
                delta(deltas, "retrans_timeout_events").unwrap_or(0)
            ),
        ));
    }
    let ratio = match nic_bytes {
        Some(bytes) if bytes > 0 && reading.app_bytes > 0 => Some(bytes as f64 / reading.app_bytes as f64),
        _ => None,
    };
    let counters = ChannelCounters {
        rank,
        channel,
        nic,
        source: reading.source.clone(),
        app_bytes: reading.app_bytes,
        nic_bytes,
        counter,
        ratio,
        deltas: reading.deltas.clone(),
    };
    (counters, warnings)
}

impl StepCounters {
    /// Rank 0's view of a step from every rank's reading.
    pub fn gather(op: StepOp, ranks: &[RankReading]) -> Self {
        let mut step = Self::default();
        let (mut nic_total, mut app_total) = (0_u64, 0_u64);
        let mut counters: Vec<String> = Vec::new();
        for reading in ranks {
            let rank = reading.rank;
            let mut rank_app = 0_u64;
            for channel in &reading.channels {
                let (counted, warnings) = reconcile_channel(rank, op, channel);
                rank_app = rank_app.saturating_add(channel.app_bytes);
                if let (Some(bytes), Some(_)) = (counted.nic_bytes, counted.ratio) {
                    nic_total = nic_total.saturating_add(bytes);
                    app_total = app_total.saturating_add(counted.app_bytes);
                    if let Some(counter) = &counted.counter {
                        if !counters.contains(counter) {
                            counters.push(counter.clone());
                        }
                    }
                }
                step.warnings.extend(warnings);
                step.channels.push(counted);
            }
            let threshold = ((rank_app as f64 * OTHER_NIC_SHARE) as u64).max(OTHER_NIC_MIN_BYTES);
            for other in &reading.others {
                if rank_app > 0 && other.bytes >= threshold {
                    step.warnings.push(CounterWarning {
                        kind: WarningKind::OtherNic,
                        rank,
                        channel: None,
                        nic: Some(other.nic.clone()),
                        headline: format!("rank {rank}: {} carried traffic during a step, and it is no channel's NIC", other.nic),
                        message: format!(
                            "rank {rank}: {} moved {} during the step, which is no channel's NIC here (the channels moved {})",
                            other.nic,
                            human_bytes(other.bytes),
                            human_bytes(rank_app)
                        ),
                    });
                }
            }
            if let Some(segments) = reading.tcp_retransmits.filter(|s| *s > 0) {
                step.warnings.push(CounterWarning {
                    kind: WarningKind::Retransmits,
                    rank,
                    channel: None,
                    nic: None,
                    message: format!("rank {rank}: TCP retransmitted {} during the step", crate::words::plural(segments, "segment")),
                    headline: format!("rank {rank}: TCP retransmitted segments during a step"),
                });
            }
        }
        step.ratio = (app_total > 0 && nic_total > 0).then(|| nic_total as f64 / app_total as f64);
        step.counter = match counters.as_slice() {
            [one] => Some(one.clone()),
            [] => None,
            many => Some(many.join(", ")),
        };
        step
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    fn deltas(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(name, value)| ((*name).to_string(), *value)).collect()
    }

    fn rdma(channel: usize, app_bytes: u64, pairs: &[(&str, u64)]) -> ChannelReading {
        ChannelReading { channel, source: CounterSource::Rdma { device: "rdmap79s0".into() }, app_bytes, deltas: deltas(pairs) }
    }

    #[test]
    fn device_writes_are_held_against_rdma_write_bytes() {
        let (counted, warnings) = reconcile_channel(0, StepOp::Write, &rdma(0, 1000, &[("rdma_write_bytes", 1030), ("rdma_write_recv_bytes", 0), ("send_bytes", 12), ("recv_bytes", 0)]));
        assert_eq!(counted.counter.as_deref(), Some("rdma_write_bytes"));
        assert_eq!(counted.nic_bytes, Some(1030));
        assert!((counted.ratio.unwrap() - 1.03).abs() < 1e-9);
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn writes_that_moved_as_sends_are_emulated() {
        let (counted, warnings) =
            reconcile_channel(1, StepOp::Write, &rdma(0, 1000, &[("rdma_write_bytes", 0), ("rdma_write_recv_bytes", 0), ("send_bytes", 1100), ("recv_bytes", 0)]));
        assert_eq!(counted.counter.as_deref(), Some("send_bytes"));
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].kind, WarningKind::EmulatedWrite);
        assert!(warnings[0].message.contains("emulated RDMA"), "{}", warnings[0].message);
        let step = StepCounters::gather(StepOp::Write, &[RankReading { rank: 1, channels: vec![rdma(0, 1000, &[("rdma_write_bytes", 0), ("send_bytes", 1100), ("rdma_write_recv_bytes", 0), ("recv_bytes", 0)])], ..RankReading::default() }]);
        assert_eq!(step.summary(), "NIC/app 1.100 (send_bytes), emulated RDMA, 1 warning");
    }

    #[test]
    fn shm_and_loopback_cross_no_nic_and_have_no_ratio() {
        let shm = ChannelReading { channel: 0, source: CounterSource::None { why: "shm moves bytes through shared memory".into() }, app_bytes: 5_000_000, deltas: BTreeMap::new() };
        let lo = ChannelReading { channel: 1, source: CounterSource::Loopback { interface: "lo".into() }, app_bytes: 10, deltas: deltas(&[("tx_bytes", 99)]) };
        let step = StepCounters::gather(StepOp::Write, &[RankReading { rank: 0, channels: vec![shm, lo], ..RankReading::default() }]);
        assert_eq!(step.ratio, None);
        assert!(step.channels.iter().all(|c| c.ratio.is_none()));
        assert_eq!(step.warnings.len(), 2);
        assert!(step.warnings[0].message.contains("5.0 MB crossed no NIC (shm"), "{}", step.warnings[0].message);
        assert!(step.summary().starts_with("NIC/app - (bytes crossed no NIC)"), "{}", step.summary());
    }

    #[test]
    fn a_nic_that_counted_nothing_other_nics_and_retransmits_warn() {
        let quiet = ChannelReading { channel: 0, source: CounterSource::Net { interface: "efa0".into() }, app_bytes: 1_000_000, deltas: deltas(&[("tx_bytes", 0), ("rx_bytes", 0)]) };
        let reading = RankReading {
            rank: 2,
            channels: vec![quiet, rdma(1, 0, &[("retrans_pkts", 3), ("retrans_timeout_events", 0)])],
            others: vec![OtherNicReading { nic: "eth0".into(), bytes: 900_000 }, OtherNicReading { nic: "efa3".into(), bytes: 1_000 }],
            tcp_retransmits: Some(4),
        };
        let step = StepCounters::gather(StepOp::Write, &[reading]);
        let kinds: Vec<WarningKind> = step.warnings.iter().map(|w| w.kind).collect();
        assert_eq!(kinds, [WarningKind::NoNic, WarningKind::Retransmits, WarningKind::OtherNic, WarningKind::Retransmits]);
        assert!(step.warnings[2].message.contains("eth0 moved 900 kB"), "{}", step.warnings[2].message);
        assert_eq!(step.ratio, None, "a NIC that counted nothing gives no ratio");
    }

    #[test]
    fn the_step_ratio_sums_channels_and_the_summary_gives_their_range() {
        let net = |channel, app, tx, rx| ChannelReading {
            channel,
            source: CounterSource::Net { interface: format!("efa{channel}") },
            app_bytes: app,
            deltas: deltas(&[("tx_bytes", tx), ("rx_bytes", rx), ("tx_packets", 1), ("rx_packets", 1)]),
        };
        let step = StepCounters::gather(
            StepOp::Write,
            &[RankReading { rank: 0, channels: vec![net(0, 1000, 1040, 20), net(1, 1000, 1080, 20), net(2, 0, 0, 0)], ..RankReading::default() }],
        );
        assert!((step.ratio.unwrap() - 1.08).abs() < 1e-9);
        assert_eq!(step.summary(), "NIC/app 1.080 (tx_bytes+rx_bytes), channels 1.060-1.100 over 2");
        let json = serde_json::to_string(&step).unwrap();
        assert_eq!(serde_json::from_str::<StepCounters>(&json).unwrap(), step);
    }
}
