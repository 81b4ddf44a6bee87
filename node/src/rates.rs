//! From successive reads to rates: per counter the change since the previous read over the time between
//! them, per NIC its tx/rx Gbps and its error and retransmit counts.
//!
//! Counters are u64 and only grow. One that went backwards was reset (driver reload, device re-created)
//! or wrapped; the two cannot be told apart, so that interval has no rate for it (`null`), never a
//! bogus one, and the next interval starts from the new value. A device that is not found stays in the
//! snapshot as `present: false` until it comes back; its first interval back has no rates.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use efatop_proto::telemetry::{CounterStats, NicKind, NodeNic};

use crate::affinity::Affinity;
use crate::sysfs::NicReading;

/// A counter that counts something going wrong: errors, drops, remotes that stopped answering.
/// Sub-kinds of `rx_errors` (`rx_crc_errors`, ...) are left out so that nothing is counted twice.
pub fn is_error_counter(kind: NicKind, name: &str) -> bool {
    match kind {
        NicKind::Net => matches!(name, "rx_errors" | "tx_errors" | "rx_dropped" | "tx_dropped"),
        NicKind::Rdma => {
            !is_retransmit_counter(kind, name)
                && (name.contains("err")
                    || name.contains("drop")
                    || matches!(name, "unresponsive_remote_events" | "impaired_remote_conn_events" | "no_completion_cmds"))
        }
    }
}

/// A counter of retransmissions (EFA's `retrans_pkts`, `retrans_timeout_events`; bytes are left out, they
/// are not a count of events).
pub fn is_retransmit_counter(kind: NicKind, name: &str) -> bool {
    kind == NicKind::Rdma && name.starts_with("retrans") && !name.ends_with("_bytes")
}

/// What the previous read of a NIC left.
struct Previous {
    reading: NicReading,
    at: Duration,
}

/// Turns reads into snapshots, remembering the previous read of every NIC it has seen.
pub struct RateTracker {
    affinity: Affinity,
    previous: BTreeMap<String, Previous>,
    /// NICs seen before and missing now, with their last stats.
    gone: BTreeMap<String, NodeNic>,
    last_read_at: Option<Duration>,
}

/// The NICs of one read, with rates against the previous one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NicSnapshot {
    /// When this read was taken, from the monitor's start.
    pub t_ms: u64,
    /// Time since the previous read; `None` for the first.
    pub interval_ms: Option<f64>,
    pub nics: Vec<NodeNic>,
}

impl RateTracker {
    pub fn new(affinity: Affinity) -> Self {
        Self { affinity, previous: BTreeMap::new(), gone: BTreeMap::new(), last_read_at: None }
    }

    pub fn affinity(&self) -> &Affinity {
        &self.affinity
    }

    /// Folds in one read taken at `at` (time since start; it must not go back).
    pub fn update(&mut self, readings: Vec<NicReading>, at: Duration) -> NicSnapshot {
        let interval = self.last_read_at.map(|last| at.saturating_sub(last));
        self.last_read_at = Some(at);
        let mut nics = Vec::with_capacity(readings.len());
        for reading in readings {
            let previous = self.previous.get(&reading.name);
            let stats = self.stats(&reading, previous, at);
            self.gone.remove(&reading.name);
            self.previous.insert(reading.name.clone(), Previous { reading, at });
            nics.push(stats);
        }
        let present: Vec<&str> = nics.iter().map(|nic| nic.name.as_str()).collect();
        let vanished: Vec<String> = self.previous.keys().filter(|name| !present.contains(&name.as_str())).cloned().collect();
        for name in vanished {
            if let Some(previous) = self.previous.remove(&name) {
                let mut last = self.stats(&previous.reading, None, previous.at);
                last.present = false;
                self.gone.insert(name, last);
            }
        }
        nics.extend(self.gone.values().cloned());
        NicSnapshot { t_ms: at.as_millis() as u64, interval_ms: interval.map(|i| i.as_secs_f64() * 1e3), nics }
    }

    fn stats(&self, reading: &NicReading, previous: Option<&Previous>, at: Duration) -> NodeNic {
        let seconds = previous.map(|p| at.saturating_sub(p.at).as_secs_f64()).filter(|s| *s > 0.0);
        let mut counters = BTreeMap::new();
        let mut went_backwards = Vec::new();
        let (mut errors, mut errors_delta, mut retransmits, mut retransmits_delta) = (0_u64, 0_u64, 0_u64, 0_u64);
        for (name, &value) in &reading.counters {
            let before = previous.and_then(|p| p.reading.counters.get(name).copied());
            let delta = match before {
                Some(before) if value < before => {
                    went_backwards.push(name.clone());
                    None
                }
                Some(before) => Some(value - before),
                None => None,
            };
            if is_error_counter(reading.kind, name) {
                errors = errors.saturating_add(value);
                errors_delta = errors_delta.saturating_add(delta.unwrap_or(0));
            }
            if is_retransmit_counter(reading.kind, name) {
                retransmits = retransmits.saturating_add(value);
                retransmits_delta = retransmits_delta.saturating_add(delta.unwrap_or(0));
            }
            let per_s = delta.zip(seconds).map(|(delta, seconds)| delta as f64 / seconds);
            counters.insert(name.clone(), CounterStats { value, per_s });
        }
        let gbps = |name: &str| counters.get(name).and_then(|c: &CounterStats| c.per_s).map(|bytes| bytes * 8.0 / 1e9);
        NodeNic {
            name: reading.name.clone(),
            kind: reading.kind,
            pci_bus_id: reading.pci_bus_id.clone(),
            gpus: self.affinity.gpus_of(&reading.name, reading.pci_bus_id.as_deref()),
            link_gbps: reading.link_gbps,
            present: true,
            tx_gbps: gbps("tx_bytes"),
            rx_gbps: gbps("rx_bytes"),
            errors,
            errors_delta,
            retransmits,
            retransmits_delta,
            went_backwards,
            counters,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(name: &str, counters: &[(&str, u64)]) -> NicReading {
        NicReading {
            name: name.to_string(),
            kind: NicKind::Rdma,
            pci_bus_id: None,
            link_gbps: Some(100.0),
            counters: counters.iter().map(|(n, v)| ((*n).to_string(), *v)).collect(),
            unreadable: Vec::new(),
        }
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn first_read_has_no_rates_second_has_exact_ones() {
        let mut tracker = RateTracker::new(Affinity::none());
        let first = tracker.update(vec![reading("rdmap79s0", &[("tx_bytes", 1_000), ("rx_bytes", 0)])], secs(0.0));
        assert_eq!(first.interval_ms, None);
        assert_eq!(first.nics[0].tx_gbps, None);
        // 12.5 GB in 2 s each way is 50 Gbps.
        let second = tracker
            .update(vec![reading("rdmap79s0", &[("tx_bytes", 1_000 + 25_000_000_000), ("rx_bytes", 5_000_000_000)])], secs(2.0));
        assert_eq!(second.interval_ms, Some(2000.0));
        let nic = &second.nics[0];
        assert!((nic.tx_gbps.unwrap() - 100.0).abs() < 1e-9, "{nic:?}");
        assert!((nic.rx_gbps.unwrap() - 20.0).abs() < 1e-9);
        assert_eq!(nic.counters["tx_bytes"].per_s, Some(12_500_000_000.0));
    }

    #[test]
    fn a_counter_that_went_backwards_has_no_rate_then_resumes() {
        let mut tracker = RateTracker::new(Affinity::none());
        tracker.update(vec![reading("nic", &[("tx_bytes", u64::MAX - 10), ("rdma_write_wr_err", 7)])], secs(0.0));
        let wrapped = tracker.update(vec![reading("nic", &[("tx_bytes", 5), ("rdma_write_wr_err", 2)])], secs(1.0));
        let nic = &wrapped.nics[0];
        assert_eq!(nic.tx_gbps, None, "no bogus rate after a wrap: {nic:?}");
        assert_eq!(nic.went_backwards, ["rdma_write_wr_err", "tx_bytes"]);
        assert_eq!((nic.errors, nic.errors_delta), (2, 0), "a reset is not new errors");
        let resumed = tracker.update(vec![reading("nic", &[("tx_bytes", 125_000_005), ("rdma_write_wr_err", 3)])], secs(2.0));
        let nic = &resumed.nics[0];
        assert!((nic.tx_gbps.unwrap() - 1.0).abs() < 1e-9, "{nic:?}");
        assert!(nic.went_backwards.is_empty());
        assert_eq!((nic.errors, nic.errors_delta), (3, 1));
    }

    #[test]
    fn a_device_that_disappears_stays_as_gone_and_comes_back_without_rates() {
        let mut tracker = RateTracker::new(Affinity::none());
        tracker.update(vec![reading("a", &[("tx_bytes", 1)]), reading("b", &[("tx_bytes", 2)])], secs(0.0));
        let without_b = tracker.update(vec![reading("a", &[("tx_bytes", 1)])], secs(1.0));
        let names: Vec<(&str, bool)> = without_b.nics.iter().map(|n| (n.name.as_str(), n.present)).collect();
        assert_eq!(names, [("a", true), ("b", false)]);
        assert_eq!(without_b.nics[1].tx_gbps, None);
        assert_eq!(without_b.nics[1].counters["tx_bytes"].value, 2);
        let back = tracker.update(vec![reading("a", &[("tx_bytes", 1)]), reading("b", &[("tx_bytes", 9)])], secs(2.0));
        assert!(back.nics.iter().all(|n| n.present));
        assert_eq!(back.nics.len(), 2);
        assert_eq!(back.nics[1].tx_gbps, None, "first read back has nothing to compare with");
    }

    #[test]
    fn errors_and_retransmits_are_told_apart() {
        let rdma = |name| (is_error_counter(NicKind::Rdma, name), is_retransmit_counter(NicKind::Rdma, name));
        assert_eq!(rdma("rdma_read_wr_err"), (true, false));
        assert_eq!(rdma("rx_drops"), (true, false));
        assert_eq!(rdma("cmds_err"), (true, false));
        assert_eq!(rdma("retrans_pkts"), (false, true));
        assert_eq!(rdma("retrans_timeout_events"), (false, true));
        assert_eq!(rdma("retrans_bytes"), (false, false));
        assert_eq!(rdma("tx_bytes"), (false, false));
        assert!(is_error_counter(NicKind::Net, "rx_errors"));
        assert!(!is_error_counter(NicKind::Net, "rx_crc_errors"), "part of rx_errors already");
    }
}
