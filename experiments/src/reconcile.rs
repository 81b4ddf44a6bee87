//! The rules that turn a step's counter changes into ratios and warnings, rank 0's side of the NIC
//! counters (the reading is `counters.rs`'s, the shapes `efatop_proto::counters`): each channel's
//! application bytes held against the counter its operation moves on ([`reconcile_channel`]), and the
//! step's ratio and warnings over every rank's channels ([`gather`]): bytes that crossed no NIC, writes
//! that moved as sends, traffic on a NIC other than the channel's, retransmits. Pure functions.

use std::collections::BTreeMap;

use efatop_proto::counters::{human_bytes, ChannelCounters, ChannelReading, CounterSource, CounterWarning, RankReading, StepCounters, StepOp, WarningKind};

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

/// Rank 0's view of a step from every rank's reading.
pub fn gather(op: StepOp, ranks: &[RankReading]) -> StepCounters {
let mut step = StepCounters::default();
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
                message: format!("rank {rank}: TCP retransmitted {} during the step", efatop_proto::words::plural(segments, "segment")),
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use efatop_proto::counters::{ChannelReading, CounterSource, OtherNicReading, RankReading, StepCounters, StepOp, WarningKind};

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
        let step = gather(StepOp::Write, &[RankReading { rank: 1, channels: vec![rdma(0, 1000, &[("rdma_write_bytes", 0), ("send_bytes", 1100), ("rdma_write_recv_bytes", 0), ("recv_bytes", 0)])], ..RankReading::default() }]);
        assert_eq!(step.summary(), "NIC/app 1.100 (send_bytes), emulated RDMA, 1 warning");
    }

    #[test]
    fn shm_and_loopback_cross_no_nic_and_have_no_ratio() {
        let shm = ChannelReading { channel: 0, source: CounterSource::None { why: "shm moves bytes through shared memory".into() }, app_bytes: 5_000_000, deltas: BTreeMap::new() };
        let lo = ChannelReading { channel: 1, source: CounterSource::Loopback { interface: "lo".into() }, app_bytes: 10, deltas: deltas(&[("tx_bytes", 99)]) };
        let step = gather(StepOp::Write, &[RankReading { rank: 0, channels: vec![shm, lo], ..RankReading::default() }]);
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
        let step = gather(StepOp::Write, &[reading]);
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
        let step = gather(
            StepOp::Write,
            &[RankReading { rank: 0, channels: vec![net(0, 1000, 1040, 20), net(1, 1000, 1080, 20), net(2, 0, 0, 0)], ..RankReading::default() }],
        );
        assert!((step.ratio.unwrap() - 1.08).abs() < 1e-9);
        assert_eq!(step.summary(), "NIC/app 1.080 (tx_bytes+rx_bytes), channels 1.060-1.100 over 2");
        let json = serde_json::to_string(&step).unwrap();
        assert_eq!(serde_json::from_str::<StepCounters>(&json).unwrap(), step);
    }
}
