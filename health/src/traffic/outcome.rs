//! What `check --traffic`'s write left behind, read back into its facts: the channels its results file
//! names (each rank's NICs and the best each did with a peer NIC), and how it ended: verified (with the
//! sweep's suspects as NICs far below their peers), corrupt (the receiver's NIC and the sender's that wrote
//! it, from the experiment's verification error), failed, stopped for outlasting its limit, or not run.
//! The binary runs the write; the judging of these facts is [`super::traffic`]'s.

use std::time::Duration;

use efatop_proto::results::{RunResults, RunState};
use efatop_proto::sweep::{Scope, Verdict};
use efatop_sweep::plan::{cross_rail_round, pairing_rounds};

use super::{Carrier, SlowNic, Traffic, TrafficChannel, TrafficOutcome};

/// How the write's ranks ended: their exit code (`None` when killed for outlasting the limit), whether
/// they were stopped for it, and their last error line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteEnded {
    pub code: Option<i32>,
    pub timed_out: bool,
    pub last_error: Option<String>,
}

impl Traffic {
    /// Fills in what the write left: the provider stack and channels of its results file (`None` when it
    /// left none that reads), and how it ended. `limit` is how long the write was allowed.
    pub fn read_back(&mut self, ended: &WriteEnded, results: Option<&RunResults>, limit: Duration) {
        if let Some(results) = results {
            self.stack = Some(results.metadata.provider_stack.clone()).filter(|s| !s.is_empty());
            self.carrier = Carrier::of(self.stack.as_deref().unwrap_or(&self.provider));
            self.channels = channels(results);
        }
        self.outcome = outcome(ended, results, &self.channels, limit);
    }
}

/// Every channel of every rank with its NIC and the best it did with any peer NIC.
fn channels(results: &RunResults) -> Vec<TrafficChannel> {
    let sweep = results.sweep.as_ref();
    let rails = results.metadata.channels;
    let best = sweep.map(|sweep| efatop_sweep::verdict::judge_record(sweep, rails).best).unwrap_or_default();
    let mut channels = Vec::new();
    for placement in &results.metadata.placements {
        for (channel, nic) in placement.nics.iter().enumerate() {
            let best_gbps = best.get(placement.rank).and_then(|rank| rank.get(channel)).copied().flatten();
            channels.push(TrafficChannel { rank: placement.rank, gpu: placement.gpu, channel, nic: nic.clone(), best_gbps });
        }
    }
    channels
}

fn nic_of(channels: &[TrafficChannel], rank: usize, channel: usize) -> Option<String> {
    channels.iter().find(|c| c.rank == rank && c.channel == channel).map(|c| c.nic.clone())
}

fn outcome(ended: &WriteEnded, results: Option<&RunResults>, channels: &[TrafficChannel], limit: Duration) -> TrafficOutcome {
    let why = || ended.last_error.clone().unwrap_or_else(|| format!("the ranks ended with exit code {}", ended.code.unwrap_or(1)));
    if ended.timed_out {
        return TrafficOutcome::TimedOut { after_s: limit.as_secs_f64() };
    }
    // Exit code 2: the run could not be set up here as asked (the provider is not offered, no NIC).
    if ended.code == Some(2) {
        return TrafficOutcome::NotRun { why: why() };
    }
    let Some(results) = results else { return TrafficOutcome::Failed { why: why() } };
    let status = results.status.clone().unwrap_or_default();
    match status.state {
        RunState::Complete if ended.code == Some(0) => {
            let verdict = results.sweep.as_ref().and_then(|sweep| sweep.verdict.clone()).unwrap_or_default();
            TrafficOutcome::Verified { slow: slow_nics(&verdict) }
        }
        RunState::Running => TrafficOutcome::Failed { why: why() },
        RunState::Complete | RunState::Failed => {
            let reason = status.reason.unwrap_or_else(why);
            match Corruption::parse(&reason) {
                Some(bad) => {
                    let ranks = results.metadata.ranks;
                    let rails = results.metadata.channels;
                    let from_nic = bad.sender_channel(ranks, rails).and_then(|channel| nic_of(channels, bad.sender, channel));
                    TrafficOutcome::Corrupt {
                        receiver: bad.receiver,
                        sender: bad.sender,
                        nic: nic_of(channels, bad.receiver, bad.channel).unwrap_or_else(|| format!("channel {}", bad.channel)),
                        from_nic,
                        detail: bad.detail,
                    }
                }
                None => TrafficOutcome::Failed { why: reason },
            }
        }
    }
}

/// The sweep's suspects as NICs far below their peers.
fn slow_nics(verdict: &Verdict) -> Vec<SlowNic> {
    let mut slow = Vec::new();
    for suspect in &verdict.suspects {
        let one = |nic: String, with: Option<(String, usize)>| SlowNic {
            rank: suspect.rank,
            nic,
            with,
            gbps: suspect.measured_gbps,
            median_gbps: suspect.median_gbps,
        };
        match suspect.scope {
            Scope::Nic => slow.push(one(suspect.nic.clone().unwrap_or_default(), None)),
            Scope::Link => {
                let with = suspect.peer_nic.clone().zip(suspect.peer);
                slow.push(one(suspect.nic.clone().unwrap_or_default(), with));
            }
            Scope::Node => slow.extend(suspect.nics.iter().map(|nic| one(nic.clone(), None))),
        }
    }
    slow
}

/// A verification failure as the run reports it (`ExperimentError::Verification`, passed on as text by
/// the rank that found it): `data verification failed: rank R received from rank S (SweepPin round N
/// channel K, size 4M): offset ...`.
#[derive(Debug, PartialEq, Eq)]
struct Corruption {
    receiver: usize,
    sender: usize,
    round: Option<usize>,
    channel: usize,
    detail: String,
}

impl Corruption {
    fn parse(text: &str) -> Option<Self> {
        const MARK: &str = "data verification failed: rank ";
        let rest = &text[text.find(MARK)? + MARK.len()..];
        let (receiver, rest) = rest.split_once(" received from rank ")?;
        let (sender, rest) = rest.split_once(" (")?;
        let (config, rest) = rest.split_once(", size ")?;
        let (_, detail) = rest.split_once("): ")?;
        let (config, channel) = config.rsplit_once(" channel ")?;
        let round = config.rsplit_once(" round ").and_then(|(_, round)| round.parse().ok());
        Some(Self { receiver: receiver.parse().ok()?, sender: sender.parse().ok()?, round, channel: channel.parse().ok()?, detail: detail.to_string() })
    }

    /// The sender's channel that wrote the receiver's `channel`: the same one in a rail-aligned round,
    /// its neighbour in the cross-rail round (the sweep's plan for `ranks` ranks, as the run made it);
    /// `None` for a retest round, whose pairing the results file does not keep.
    fn sender_channel(&self, ranks: usize, rails: usize) -> Option<usize> {
        let mut plan = pairing_rounds(ranks, false);
        if rails >= 2 {
            if let Some(first) = plan.first().cloned() {
                plan.push(cross_rail_round(plan.len(), &first));
            }
        }
        let round = plan.get(self.round?)?;
        Some(round.remote_rail(self.receiver, self.sender, self.channel, rails))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use efatop_experiments::ExperimentError;

    /// The binary's limit on the write.
    const LIMIT: Duration = Duration::from_secs(20);

    /// The text the run reports is the experiment's own error, passed on by a peer: the parser reads it.
    #[test]
    fn a_verification_failure_names_receiver_sender_round_and_channel() {
        let found = ExperimentError::Verification {
            receiver: 3,
            sender: 2,
            config: "SweepPin round 7 channel 1".into(),
            size: "4M".into(),
            detail: "offset 1000: expected 0xf9, found 0x06".into(),
        };
        let passed_on = ExperimentError::PeerFailed { rank: 3, host: "node (a)".into(), message: found.to_string(), exit_code: 1 };
        let bad = Corruption::parse(&passed_on.to_string()).expect("parsed");
        assert_eq!(
            bad,
            Corruption { receiver: 3, sender: 2, round: Some(7), channel: 1, detail: "offset 1000: expected 0xf9, found 0x06".into() }
        );
        // 4 ranks: rounds 0-2 pair them, round 3 is the cross-rail round (rank 2's channel 1 meets rank 3's
        // channel 2), later rounds are retests.
        let cross = Corruption { round: Some(3), ..bad };
        assert_eq!(cross.sender_channel(4, 4), Some(0));
        assert_eq!(Corruption { round: Some(0), ..cross }.sender_channel(4, 4), Some(1));
        assert_eq!(Corruption { round: Some(9), channel: 1, receiver: 3, sender: 2, detail: String::new() }.sender_channel(4, 4), None);
        assert_eq!(Corruption::parse("rank 1 (vm) failed: no progress for 5 s (--timeout): rank 1 waited"), None);
    }

    /// A failed run's results file as the check reads it: 2 ranks on GPUs 0 and 1, 4 EFA each, rank 1's
    /// channel 2 found corrupt bytes in the cross-rail round.
    #[test]
    fn a_corrupt_channel_is_named_by_its_rank_s_nic_and_the_nic_that_wrote_it() {
        use efatop_proto::results::{RankPlacement, RunMetadata, RunStatus};
        let placement = |rank: usize, first: u32| RankPlacement {
            rank,
            host: "node".into(),
            gpu: Some(rank),
            gpu_pci_bus_id: None,
            numa_node: Some(0),
            nics: (first..first + 4).map(|bus| format!("rdmap{bus}s0-rdm")).collect(),
            pinned_cpus: None,
            hot_cpu: None,
        };
        let reason = ExperimentError::PeerFailed {
            rank: 1,
            host: "node".into(),
            message: ExperimentError::Verification {
                receiver: 1,
                sender: 0,
                config: "SweepPin round 1 channel 2".into(),
                size: "4M".into(),
                detail: "offset 8: expected 0x01, found 0x00".into(),
            }
            .to_string(),
            exit_code: 1,
        }
        .to_string();
        let results = RunResults {
            metadata: RunMetadata {
                ranks: 2,
                channels: 4,
                provider_stack: "efa".into(),
                placements: vec![placement(0, 79), placement(1, 96)],
                ..RunMetadata::default()
            },
            status: Some(RunStatus { state: RunState::Failed, reason: Some(reason) }),
            ..RunResults::default()
        };
        let channels = channels(&results);
        assert_eq!(channels.len(), 8);
        let ended = WriteEnded { code: Some(1), timed_out: false, last_error: None };
        // 2 ranks: round 0 pairs them, round 1 is the cross-rail round, where rank 0's channel 1 writes
        // rank 1's channel 2.
        assert_eq!(
            outcome(&ended, Some(&results), &channels, LIMIT),
            TrafficOutcome::Corrupt {
                receiver: 1,
                sender: 0,
                nic: "rdmap98s0-rdm".into(),
                from_nic: Some("rdmap80s0-rdm".into()),
                detail: "offset 8: expected 0x01, found 0x00".into(),
            }
        );
        let stopped = WriteEnded { code: None, timed_out: true, last_error: None };
        assert_eq!(outcome(&stopped, Some(&results), &channels, LIMIT), TrafficOutcome::TimedOut { after_s: 20.0 });
        let refused = WriteEnded { code: Some(2), timed_out: false, last_error: Some("--provider efa: no efa here".into()) };
        assert_eq!(outcome(&refused, None, &[], LIMIT), TrafficOutcome::NotRun { why: "--provider efa: no efa here".into() });
    }

    #[test]
    fn suspects_become_slow_nics() {
        let suspect = |scope: Scope, nic: &str| efatop_proto::sweep::Suspect {
            rank: 1,
            host: "vm".into(),
            gpu: Some(1),
            nic: Some(nic.into()),
            pci: None,
            measured_gbps: 12.0,
            median_gbps: 96.0,
            peers_tried: vec![0],
            why: String::new(),
            scope,
            rail: Some(0),
            peer: Some(0),
            peer_nic: Some("rdmap79s0-rdm".into()),
            nics: Vec::new(),
        };
        let verdict = Verdict {
            suspects: vec![suspect(Scope::Nic, "rdmap96s0-rdm"), suspect(Scope::Link, "rdmap97s0-rdm")],
            checked: efatop_proto::sweep::Checked { nodes: 1, nics: 8 },
        };
        let slow = slow_nics(&verdict);
        assert_eq!(slow.len(), 2);
        assert_eq!((slow[0].nic.as_str(), slow[0].with.as_ref()), ("rdmap96s0-rdm", None));
        assert_eq!(slow[1].with, Some(("rdmap79s0-rdm".to_string(), 0)));
    }
}
