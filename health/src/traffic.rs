//! `efatop check --traffic`: what a short verified write between ranks of this node found, and the rule
//! that judges it. The binary runs the write (the sweep experiment between same-node ranks, every NIC a
//! channel, efa's shared-memory shortcut off) while the check's window runs, and hands over its facts as a
//! [`Traffic`]; [`traffic`] turns them, with the bytes each RDMA NIC's counters moved during the window,
//! into findings: a NIC that received corrupt data, one far below its peers, one that moved no bytes, a
//! write that failed or hung, or one `ok` that says which provider carried it and what that proves. How
//! the write's results file and its ranks' ending become those facts is `traffic/outcome.rs`'s.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Finding, Observed, Rule, Status};

mod outcome;
pub use outcome::WriteEnded;

/// How the bytes of a write between two ranks of one node travel with a provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Carrier {
    /// Out through the NIC and back (efa with its shared-memory shortcut off, verbs): each byte crosses a NIC.
    Nic,
    /// Through the kernel's loopback (tcp, udp, sockets): the run proves efatop's path, not the NICs.
    Loopback,
    /// Through shared memory (shm): the run proves efatop's path, not the NICs.
    SharedMemory,
}

impl Carrier {
    /// The carrier of a same-node write with `provider` (`efa`, `tcp`, `tcp;ofi_rxm`, `shm`).
    pub fn of(provider: &str) -> Self {
        let core = provider.split(';').next().unwrap_or(provider).trim();
        match core {
            "efa" | "efa-direct" | "verbs" => Carrier::Nic,
            "shm" | "sm2" => Carrier::SharedMemory,
            _ => Carrier::Loopback,
        }
    }

    /// What a run over this carrier proves, for an `ok` finding; empty for a NIC.
    fn proves(self, provider: &str) -> String {
        match self {
            Carrier::Nic => String::new(),
            Carrier::Loopback => format!(
                "; {provider} between ranks of one node goes through the kernel's loopback: this proves efatop's path, \
                 not the NICs (--provider efa sends every byte through a NIC)"
            ),
            Carrier::SharedMemory => format!(
                "; {provider} moves the bytes through shared memory: this proves efatop's path, not the NICs \
                 (--provider efa sends every byte through a NIC)"
            ),
        }
    }
}

/// One channel of one rank in the write: a NIC, and the best it did with any peer NIC.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrafficChannel {
    pub rank: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<usize>,
    pub channel: usize,
    /// The libfabric domain (`rdmap79s0-rdm`, `eth0`, `shm`).
    pub nic: String,
    /// The rate of its median write with the best peer NIC it met, in Gbps; `None` when it measured none.
    pub best_gbps: Option<f64>,
}

/// A NIC (or a pair of NICs) far below its peers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlowNic {
    pub rank: usize,
    pub nic: String,
    /// For a slow pair (a link): the NIC at the other end, and its rank; `None` for a NIC slow with every
    /// peer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with: Option<(String, usize)>,
    pub gbps: f64,
    pub median_gbps: f64,
}

/// How the write ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum TrafficOutcome {
    /// Every byte arrived as written; the NICs far below their peers, if any.
    Verified { slow: Vec<SlowNic> },
    /// A receiver found bytes other than those written, on the channel of `nic`.
    Corrupt { receiver: usize, sender: usize, nic: String, from_nic: Option<String>, detail: String },
    /// The write failed for another reason (a rank failed, nothing moved within `--timeout`).
    Failed { why: String },
    /// It had not ended when its time was up, and was stopped.
    TimedOut { after_s: f64 },
    /// It could not be started, or could not run here at all (the provider is not offered).
    NotRun { why: String },
}

/// What `--traffic` ran and what came of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Traffic {
    /// The provider asked for (`efa`, `tcp`, `shm`).
    pub provider: String,
    /// The provider stack libfabric reported, which carried the bytes (`efa`, `tcp;ofi_rxm`); `None` when
    /// the write never got that far.
    pub stack: Option<String>,
    pub carrier: Carrier,
    pub ranks: usize,
    /// Bytes each channel wrote per iteration, and the timed iterations (one warmup before them).
    pub size: u64,
    pub iters: u64,
    /// A NIC below this share of its peers' median is slow.
    pub threshold: f64,
    /// Wall time of the whole write, launch included.
    pub seconds: f64,
    pub channels: Vec<TrafficChannel>,
    pub outcome: TrafficOutcome,
}

impl Traffic {
    /// The provider that carried it, as libfabric named it (else as asked).
    pub fn via(&self) -> &str {
        self.stack.as_deref().unwrap_or(&self.provider)
    }
}

/// The bytes an RDMA NIC's counters moved (tx + rx) over the check's window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicBytes {
    pub nic: String,
    pub bytes: u64,
}

/// `rdmap79s0-rdm` → `rdmap79s0`: the RDMA device of an efa domain.
fn device_of(domain: &str) -> &str {
    domain.strip_suffix("-rdm").or_else(|| domain.strip_suffix("-dgrm")).unwrap_or(domain)
}

fn finding(status: Status, subject: Option<&str>, message: String, short: String) -> Finding {
    Finding::new(Rule::Traffic, status, subject, message, short)
}

/// Cuts `text` to `max` characters at a character boundary, with `...` when cut.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let kept: String = text.chars().take(max.saturating_sub(3)).collect();
    format!("{kept}...")
}

/// The `traffic` rule: nothing when `--traffic` was not given.
pub fn traffic(observed: &Observed) -> Vec<Finding> {
    let Some(traffic) = &observed.traffic else { return Vec::new() };
    // Sentences name the stack that carried the bytes (`tcp;ofi_rxm`); the short forms, read in one-line
    // contracts where `; ` parts problems, the provider as asked (`tcp`).
    let via = traffic.via();
    let by = traffic.provider.as_str();
    let slow_nics = match &traffic.outcome {
        TrafficOutcome::NotRun { why } => {
            return vec![finding(
                Status::Unknown,
                None,
                format!("the verified write via {via} could not run here: {why}"),
                format!("write via {by} not run: {}", clip(why, 48)),
            )];
        }
        TrafficOutcome::TimedOut { after_s } => {
            return vec![finding(
                Status::Problem,
                None,
                format!(
                    "the verified write via {via} between {} ranks of this node had not ended after {after_s:.0} s and was \
                     stopped: a NIC or a rank hangs",
                    traffic.ranks
                ),
                format!("write via {by} hung ({after_s:.0} s)"),
            )];
        }
        TrafficOutcome::Failed { why } => {
            return vec![finding(
                Status::Problem,
                None,
                format!("the verified write via {via} between {} ranks of this node failed: {why}", traffic.ranks),
                format!("write via {by} failed: {}", clip(why, 48)),
            )];
        }
        TrafficOutcome::Corrupt { receiver, sender, nic, from_nic, detail } => {
            let nic = device_of(nic);
            let from_nic = from_nic.as_deref().map(device_of);
            let from = from_nic.map_or_else(|| format!("rank {sender}"), |n| format!("{n} (rank {sender})"));
            let from_short = from_nic.map_or_else(|| format!("rank {sender}"), str::to_string);
            return vec![finding(
                Status::Problem,
                Some(nic),
                format!("{nic} (rank {receiver}) received corrupt data from {from} via {via}: {detail}"),
                format!("{nic} corrupt write from {from_short} ({by})"),
            )];
        }
        TrafficOutcome::Verified { slow } => slow,
    };
    let mut findings: Vec<Finding> = slow_nics
        .iter()
        .map(|s| {
            let nic = device_of(&s.nic);
            let ratio = if s.median_gbps > 0.0 { s.gbps / s.median_gbps } else { 0.0 };
            let (message, short) = match &s.with {
                None => (
                    format!(
                        "{nic} (rank {}) wrote at best {:.2} Gbps with every peer NIC it met, {ratio:.2}x its peers' median of \
                         {:.2} Gbps, via {via}",
                        s.rank, s.gbps, s.median_gbps
                    ),
                    format!("{nic} slow {:.1} of {:.1} Gbps ({by})", s.gbps, s.median_gbps),
                ),
                Some((other, other_rank)) => (
                    format!(
                        "{nic} (rank {}) and {} (rank {other_rank}) wrote each other at best {:.2} Gbps, {ratio:.2}x their peers' median of \
                         {:.2} Gbps, and their other peers at full rate, via {via}: the path between them is slow",
                        s.rank,
                        device_of(other),
                        s.gbps,
                        s.median_gbps
                    ),
                    format!("{nic} to {} slow {:.1} of {:.1} Gbps ({by})", device_of(other), s.gbps, s.median_gbps),
                ),
            };
            finding(Status::Problem, Some(nic), message, short)
        })
        .collect();
    let counted_here = traffic.carrier == Carrier::Nic && observed.root == Path::new("/");
    if counted_here {
        findings.extend(without_bytes(observed, traffic));
    }
    if findings.is_empty() {
        findings.push(verified(observed, traffic, counted_here));
    }
    findings
}

/// Where each byte crossed a NIC of this machine, that NIC's counters must have grown: the channels' NICs
/// whose did not. A NIC the rail check already names (off its rail during the window) is not named twice.
fn without_bytes(observed: &Observed, traffic: &Traffic) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for channel in &traffic.channels {
        let device = device_of(&channel.nic);
        if !seen.insert(device) || observed.rails.iter().any(|load| load.nic == device && load.off) {
            continue;
        }
        if observed.moved.iter().any(|moved| moved.nic == device && moved.bytes == 0) {
            findings.push(finding(
                Status::Problem,
                Some(device),
                format!(
                    "{device} (rank {}) moved no bytes during the verified write via {}: its counters did not grow, so its \
                     channel's bytes went another way",
                    channel.rank,
                    traffic.via()
                ),
                format!("{device} moved no bytes ({})", traffic.provider),
            ));
        }
    }
    findings
}

/// The `ok` of a write that found nothing wrong: who wrote what through which NICs, how far apart they
/// were, and what the provider's bytes prove.
fn verified(observed: &Observed, traffic: &Traffic, counted_here: bool) -> Finding {
    let via = traffic.via();
    // Each NIC's best over the channels on it (two ranks without GPUs share every NIC).
    let mut best: std::collections::BTreeMap<&str, Option<f64>> = std::collections::BTreeMap::new();
    for channel in &traffic.channels {
        let nic_best = best.entry(device_of(&channel.nic)).or_default();
        *nic_best = match (*nic_best, channel.best_gbps) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
    let through = if best.len() <= 4 {
        best.keys().copied().collect::<Vec<_>>().join(", ")
    } else {
        format!("{} NICs", best.len())
    };
    let rates: Vec<f64> = best.values().filter_map(|rate| *rate).collect();
    let spread = match (rates.iter().copied().reduce(f64::min), median(&rates)) {
        (Some(least), Some(median)) if median > 0.0 && rates.len() > 1 => {
            format!("; slowest NIC {:.2}x its peers' median ({least:.2} of {median:.2} Gbps)", least / median)
        }
        (Some(least), _) => format!(" at {least:.2} Gbps"),
        _ => String::new(),
    };
    let grew = |channel: &TrafficChannel| observed.moved.iter().any(|m| m.nic == device_of(&channel.nic) && m.bytes > 0);
    let counters = if counted_here && traffic.channels.iter().all(grew) { "; every NIC's counters grew" } else { "" };
    finding(
        Status::Ok,
        None,
        format!(
            "via {via}: {} ranks wrote {} x {} each way through {through}, every byte verified{spread}{counters}{}",
            traffic.ranks,
            size_text(traffic.size),
            traffic.iters,
            traffic.carrier.proves(via)
        ),
        format!("traffic via {} ok", traffic.provider),
    )
}

fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some(f64::midpoint(sorted[n / 2 - 1], sorted[n / 2])),
    }
}

fn size_text(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carriers_follow_the_provider() {
        assert_eq!(Carrier::of("efa"), Carrier::Nic);
        assert_eq!(Carrier::of("efa-direct"), Carrier::Nic);
        assert_eq!(Carrier::of("tcp;ofi_rxm"), Carrier::Loopback);
        assert_eq!(Carrier::of("sockets"), Carrier::Loopback);
        assert_eq!(Carrier::of("shm"), Carrier::SharedMemory);
        assert_eq!(device_of("rdmap79s0-rdm"), "rdmap79s0");
        assert_eq!(device_of("eth0"), "eth0");
    }

    #[test]
    fn clipping_keeps_characters_whole() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("GPU \u{2192} NIC and more", 8), "GPU \u{2192}...");
    }
}
