//! Judging a sweep's figures. A pair's rate is limited by both ends, so a channel (one NIC of one rank) is
//! judged by the best it did with any peer NIC: a NIC that is slow with every peer NIC it met (two or more,
//! the cross-rail round's included) is the culprit, and the peers it dragged down are not; a pair that is
//! slow only with each other is a link. The bar is `threshold` × the fleet median of the same rail's best
//! figures, and `threshold` × the link speed where one was given (`--link-gbps`). Every NIC of a host found
//! slow is named once, as the node. A link must also be behind the rest of its round (every pair of it)
//! each time it ran: when a whole round is slow (a loaded host), no link in it is to blame.
//!
//! [`Judge`] takes the rounds one at a time and keeps what the verdict needs (each pair's best, each
//! channel's best and how many peer NICs it met, the pairs that were behind their round every time), so
//! that judging after every round costs the round's figures plus one pass over the channels, not a pass
//! over every figure so far: a 1024-node × 32-NIC sweep is judged live.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use efatop_proto::sweep::{Checked, NodeFacts, Scope, Suspect, SweepResults, SweepRound, Verdict};
use crate::rails::{median, RailRule};

/// What the judge looks at.
pub struct JudgeInput<'a> {
    /// Every rank's host, GPU and NICs; index = rank.
    pub nodes: &'a [NodeFacts],
    /// Channels per rank.
    pub rails: usize,
    pub rounds: &'a [SweepRound],
    pub threshold: f64,
    /// A link speed given by the user, judged against as well as the median.
    pub link_gbps: Option<f64>,
}

/// The verdict on the figures so far, and what a retest round should run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Judgement {
    pub verdict: Verdict,
    /// Pairs worth running again: each suspect rank against a healthy peer (one it has not met where there
    /// is one), and each rail-aligned pair that was slow only with each other, again.
    pub retest: Vec<(usize, usize)>,
    /// Cross-rail pairs that were slow only with each other, to run again as they ran (the smaller rank's
    /// channel k with the larger's k + 1).
    pub retest_cross: Vec<(usize, usize)>,
    /// Per rail: the fleet median of the channels' best figures (`None`: nothing measured on it).
    pub medians: Vec<Option<f64>>,
    /// Per rail: what a channel is held to (the median, or the link speed where given and higher); a
    /// channel below the rule's share of it is slow ([`RailRule`]).
    pub bars: Vec<Option<f64>>,
    /// The rule: `threshold` × the bar.
    pub rule: RailRule,
    /// `[rank][rail]`: the channel's best figure with any peer so far.
    pub best: Vec<Vec<Option<f64>>>,
}

impl Judgement {
    /// Whether a figure on `rail` is below the bar.
    pub fn is_low(&self, rail: usize, gbps: f64) -> bool {
        self.bars.get(rail).copied().flatten().is_some_and(|bar| self.rule.is_low(gbps, bar))
    }
}

/// Every round of a sweep's record judged at once, with `rails` channels a rank.
pub fn judge_record(record: &SweepResults, rails: usize) -> Judgement {
    judge(&JudgeInput { nodes: &record.nodes, rails, rounds: &record.rounds, threshold: record.threshold, link_gbps: record.link_gbps })
}

/// Judges every figure of `input.rounds` at once.
pub fn judge(input: &JudgeInput<'_>) -> Judgement {
    let mut judge = Judge::new(input.nodes, input.rails, input.threshold, input.link_gbps);
    for round in input.rounds {
        judge.add(round);
    }
    judge.judgement()
}

/// One NIC of one rank: (rank, rail).
type End = (usize, usize);
/// Two ends, the smaller first.
type PairKey = (End, End);

#[derive(Clone, Copy, Debug, PartialEq)]
struct PairState {
    /// The best over the rounds it ran in of the slower direction.
    best: f64,
    /// Behind the rest of its round (below `threshold` × the round's median) every time it ran.
    behind: bool,
}

/// The judge, fed one round at a time ([`Judge::add`]), judging whenever asked ([`Judge::judgement`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Judge {
    nodes: Vec<NodeFacts>,
    rails: usize,
    threshold: f64,
    link_gbps: Option<f64>,
    pairs: HashMap<PairKey, PairState>,
    /// The pairs whose `behind` still holds: the only links there can be.
    behind: BTreeSet<PairKey>,
    /// `[rank][rail]`: the best with any peer.
    best: Vec<Vec<Option<f64>>>,
    /// `[rank][rail]`: how many peer NICs it met.
    met_count: Vec<Vec<usize>>,
    /// `[rank]`: each peer met and the offset of the NIC it met there: channel k met the peer's channel
    /// (k + offset) mod rails.
    met: Vec<Vec<(usize, usize)>>,
    rounds: usize,
}


fn list(ranks: impl IntoIterator<Item = usize>) -> String {
    ranks.into_iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")
}

impl Judge {
    pub fn new(nodes: &[NodeFacts], rails: usize, threshold: f64, link_gbps: Option<f64>) -> Self {
        let ranks = nodes.len();
        Self {
            nodes: nodes.to_vec(),
            rails,
            threshold,
            link_gbps,
            pairs: HashMap::new(),
            behind: BTreeSet::new(),
            best: vec![vec![None; rails]; ranks],
            met_count: vec![vec![0; rails]; ranks],
            met: vec![Vec::new(); ranks],
            rounds: 0,
        }
    }

    /// Rounds taken so far.
    pub fn rounds(&self) -> usize {
        self.rounds
    }

    /// Takes one finished round: O(its figures).
    pub fn add(&mut self, round: &SweepRound) {
        let (ranks, rails) = (self.nodes.len(), self.rails);
        self.rounds += 1;
        // A pair's figure in a round: the slower direction.
        let mut this_round: BTreeMap<PairKey, f64> = BTreeMap::new();
        for figure in &round.figures {
            let (from, to) = ((figure.from, figure.rail), (figure.to, figure.target_rail()));
            if from.0 >= ranks || to.0 >= ranks || from.1 >= rails || to.1 >= rails || from.0 == to.0 {
                continue;
            }
            let slot = this_round.entry((from.min(to), from.max(to))).or_insert(f64::INFINITY);
            *slot = slot.min(figure.judged_gbps());
        }
        let round_median = median(&mut this_round.values().copied().collect::<Vec<_>>());
        for (key, gbps) in this_round {
            let behind = round_median.is_some_and(|m| RailRule::at(self.threshold).is_low(gbps, m));
            match self.pairs.entry(key) {
                std::collections::hash_map::Entry::Occupied(mut entry) => {
                    let state = entry.get_mut();
                    state.best = state.best.max(gbps);
                    state.behind &= behind;
                    if !state.behind {
                        self.behind.remove(&key);
                    }
                }
                std::collections::hash_map::Entry::Vacant(entry) => {
                    entry.insert(PairState { best: gbps, behind });
                    if behind {
                        self.behind.insert(key);
                    }
                    let ((a, ka), (b, kb)) = key;
                    self.met_count[a][ka] += 1;
                    self.met_count[b][kb] += 1;
                    for (me, mine, peer, theirs) in [(a, ka, b, kb), (b, kb, a, ka)] {
                        let offset = (theirs + rails - mine) % rails;
                        if !self.met[me].contains(&(peer, offset)) {
                            self.met[me].push((peer, offset));
                        }
                    }
                }
            }
            for (rank, rail) in [key.0, key.1] {
                let slot = &mut self.best[rank][rail];
                *slot = Some(slot.map_or(gbps, |old: f64| old.max(gbps)));
            }
        }
    }

    /// The peer NICs channel `rail` of `rank` met, with the pair's best.
    fn peers_of(&self, rank: usize, rail: usize) -> Vec<(End, f64)> {
        let me = (rank, rail);
        self.met[rank]
            .iter()
            .filter_map(|&(peer, offset)| {
                let other = (peer, (rail + offset) % self.rails);
                let state = self.pairs.get(&(me.min(other), me.max(other)))?;
                Some((other, state.best))
            })
            .collect()
    }

    fn nic_name(&self, rank: usize, rail: usize) -> String {
        self.nodes.get(rank).and_then(|n| n.nics.get(rail)).map_or_else(|| format!("channel {rail}"), |n| n.name.clone())
    }

    /// `rank 0 efa1, rank 3 efa2 (cross-rail)`.
    fn describe_peers(&self, rail: usize, peers: &[(End, f64)]) -> String {
        peers
            .iter()
            .map(|&((peer, peer_rail), _)| {
                let cross = if peer_rail == rail { "" } else { " (cross-rail)" };
                format!("rank {peer} {}{cross}", self.nic_name(peer, peer_rail))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The verdict on every round taken so far: O(channels log channels + the pairs still behind).
    #[allow(clippy::too_many_lines)] // one pass from figures to findings, in order
    pub fn judgement(&self) -> Judgement {
        let (ranks, rails, threshold) = (self.nodes.len(), self.rails, self.threshold);
        let best = &self.best;
        let medians: Vec<Option<f64>> =
            (0..rails).map(|rail| median(&mut best.iter().filter_map(|b| b[rail]).collect::<Vec<_>>())).collect();
        let rule = RailRule::at(threshold);
        let bars: Vec<Option<f64>> = medians.iter().map(|&m| RailRule::bar(m, self.link_gbps)).collect();
        let low = |gbps: f64, rail: usize| bars[rail].is_some_and(|bar| rule.is_low(gbps, bar));
        let bar = |rail: usize| -> String {
            let pct = (threshold * 100.0).round();
            match (medians[rail], self.link_gbps) {
                (Some(m), Some(link)) if link > m => format!("{pct:.0}% of the link speed ({link} Gbps, --link-gbps)"),
                (Some(m), _) => format!("{pct:.0}% of rail {rail}'s median ({m:.2} Gbps)"),
                (None, _) => format!("{pct:.0}% of the bar"),
            }
        };
        // A NIC is the culprit when it met two or more peer NICs and was slow with every one of them.
        let nic_low = |rank: usize, rail: usize| self.met_count[rank][rail] >= 2 && best[rank][rail].is_some_and(|b| low(b, rail));
        let fact = |rank: usize| self.nodes.get(rank).cloned().unwrap_or_default();

        let mut suspects = Vec::new();
        // Node-level first: a host whose every measured NIC is slow.
        let mut hosts: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (rank, node) in self.nodes.iter().enumerate() {
            hosts.entry(node.host.clone()).or_default().push(rank);
        }
        let mut named_node: BTreeSet<usize> = BTreeSet::new();
        for (host, on_host) in &hosts {
            let channels: Vec<End> =
                on_host.iter().flat_map(|&r| (0..rails).map(move |k| (r, k))).filter(|&(r, k)| best[r][k].is_some()).collect();
            if channels.len() < 2 || !channels.iter().all(|&(r, k)| nic_low(r, k)) {
                continue;
            }
            let first = on_host[0];
            let node = fact(first);
            let measured = channels.iter().filter_map(|&(r, k)| best[r][k]).fold(f64::NEG_INFINITY, f64::max);
            let median_gbps = median(&mut channels.iter().filter_map(|&(_, k)| medians[k]).collect::<Vec<_>>()).unwrap_or(0.0);
            let tried: BTreeSet<usize> =
                channels.iter().flat_map(|&(r, k)| self.peers_of(r, k).into_iter().map(|((p, _), _)| p)).collect();
            let nics: Vec<String> = channels.iter().map(|&(r, k)| self.nic_name(r, k)).collect();
            let why = format!(
                "every NIC of {host} ({} of {}) is below the bar with every peer tried (ranks {}); the best any of them \
                 did is {measured:.2} Gbps (bar: {})",
                channels.len(),
                channels.len(),
                list(tried.iter().copied()),
                bar(channels[0].1)
            );
            suspects.push(Suspect {
                scope: Scope::Node,
                rank: first,
                host: host.clone(),
                gpu: node.gpu,
                nic: None,
                pci: node.gpu_pci.clone(),
                rail: None,
                peer: None,
                peer_nic: None,
                nics,
                measured_gbps: measured,
                median_gbps,
                peers_tried: tried.into_iter().collect(),
                why,
            });
            named_node.extend(on_host.iter().copied());
        }
        // NICs slow with every peer NIC.
        for rank in (0..ranks).filter(|r| !named_node.contains(r)) {
            for rail in (0..rails).filter(|&k| nic_low(rank, k)) {
                let node = fact(rank);
                let measured = best[rank][rail].unwrap_or(0.0);
                let peers = self.peers_of(rank, rail);
                let tried: BTreeSet<usize> = peers.iter().map(|((p, _), _)| *p).collect();
                suspects.push(Suspect {
                    scope: Scope::Nic,
                    rank,
                    host: node.host.clone(),
                    gpu: node.gpu,
                    nic: Some(self.nic_name(rank, rail)),
                    pci: node.nics.get(rail).and_then(|n| n.pci.clone()),
                    rail: Some(rail),
                    peer: None,
                    peer_nic: None,
                    nics: Vec::new(),
                    measured_gbps: measured,
                    median_gbps: medians[rail].unwrap_or(0.0),
                    why: format!(
                        "below {} with every peer tried ({}): at best {measured:.2} Gbps",
                        bar(rail),
                        self.describe_peers(rail, &peers)
                    ),
                    peers_tried: tried.into_iter().collect(),
                });
            }
        }
        // Pairs slow with each other, and behind the rest of their round every time they met, where neither
        // end is slow with everyone: links.
        let mut link_pairs = Vec::new();
        let mut cross_pairs = Vec::new();
        for &key in &self.behind {
            let ((a, ka), (b, kb)) = key;
            let Some(state) = self.pairs.get(&key) else { continue };
            let gbps = state.best;
            if !low(gbps, ka) || !low(gbps, kb) || nic_low(a, ka) || nic_low(b, kb) || named_node.contains(&a) || named_node.contains(&b) {
                continue;
            }
            let node = fact(a);
            let (nic_a, nic_b) = (self.nic_name(a, ka), self.nic_name(b, kb));
            let cross = if ka == kb { format!("on rail {ka}") } else { "cross-rail".to_string() };
            // An end is cleared when it reached the bar with another NIC; one that met only this peer could
            // still be the slow one.
            let cleared = |rank: usize, rail: usize| best[rank][rail].is_some_and(|b| !low(b, rail));
            let others = |rank: usize, rail: usize, other: End| {
                self.describe_peers(rail, &self.peers_of(rank, rail).into_iter().filter(|(e, _)| *e != other).collect::<Vec<_>>())
            };
            let head = format!("rank {a} {nic_a} ↔ rank {b} {nic_b} {cross}: {gbps:.2} Gbps, below {}", bar(ka));
            let why = match (cleared(a, ka), cleared(b, kb)) {
                (true, true) => format!(
                    "{head} and behind the rest of its round each time, while rank {a} {nic_a} reaches the bar with {} and \
                     rank {b} {nic_b} with {}",
                    others(a, ka, (b, kb)),
                    others(b, kb, (a, ka))
                ),
                (false, false) => format!("{head}; each met only the other, so a NIC and the link cannot be told apart"),
                (true, false) => format!("{head}; rank {b} {nic_b} met no other NIC, so it may be the slow end"),
                (false, true) => format!("{head}; rank {a} {nic_a} met no other NIC, so it may be the slow end"),
            };
            suspects.push(Suspect {
                scope: Scope::Link,
                rank: a,
                host: node.host.clone(),
                gpu: node.gpu,
                nic: Some(nic_a),
                pci: node.nics.get(ka).and_then(|n| n.pci.clone()),
                rail: Some(ka),
                peer: Some(b),
                peer_nic: Some(nic_b),
                nics: Vec::new(),
                measured_gbps: gbps,
                median_gbps: medians[ka].unwrap_or(0.0),
                peers_tried: vec![b],
                why,
            });
            // A retest round runs the pair again as it ran: rail-aligned, or with the cross-rail shift.
            if ka == kb {
                link_pairs.push((a, b));
            } else if kb == (ka + 1) % rails {
                cross_pairs.push((a, b));
            }
        }

        // What a retest should run: every suspect rank against a healthy peer, unmet if possible; every
        // rail-aligned link pair again.
        let suspect_ranks: BTreeSet<usize> = suspects
            .iter()
            .flat_map(|s| match s.scope {
                Scope::Node => hosts.get(&s.host).cloned().unwrap_or_default(),
                Scope::Nic => vec![s.rank],
                Scope::Link => vec![s.rank, s.peer.unwrap_or(s.rank)],
            })
            .collect();
        let healthy: Vec<usize> = (0..ranks).filter(|r| !suspect_ranks.contains(r)).collect();
        let mut used: BTreeMap<usize, usize> = BTreeMap::new();
        let mut retest = Vec::new();
        for &s in &suspect_ranks {
            let met: BTreeSet<usize> = self.met[s].iter().map(|&(p, _)| p).collect();
            let pick = |candidates: &mut dyn Iterator<Item = usize>, used: &BTreeMap<usize, usize>| {
                candidates.filter(|&q| q != s).min_by_key(|q| (used.get(q).copied().unwrap_or(0), *q))
            };
            let chosen = pick(&mut healthy.iter().copied().filter(|q| !met.contains(q)), &used)
                .or_else(|| pick(&mut healthy.iter().copied(), &used))
                .or_else(|| pick(&mut (0..ranks).filter(|q| !met.contains(q)), &used));
            if let Some(q) = chosen {
                *used.entry(q).or_default() += 1;
                retest.push((s, q));
            }
        }
        retest.extend(link_pairs);

        let measured_channels = best.iter().flatten().filter(|b| b.is_some()).count();
        let measured_nodes = hosts.values().filter(|on_host| on_host.iter().any(|&r| best[r].iter().any(Option::is_some))).count();
        Judgement {
            verdict: Verdict { suspects, checked: Checked { nodes: measured_nodes, nics: measured_channels } },
            retest,
            retest_cross: cross_pairs,
            medians,
            bars,
            rule,
            best: best.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{cross_rail_round, pairing_rounds, retest_round};
    use efatop_proto::sweep::{Figure, NicFacts, Round};

    fn nodes(n: usize, rails: usize) -> Vec<NodeFacts> {
        (0..n)
            .map(|rank| NodeFacts {
                rank,
                host: format!("node{rank}"),
                gpu: Some(0),
                gpu_pci: None,
                nics: (0..rails).map(|k| NicFacts { name: format!("efa{k}"), pci: Some(format!("0000:{k:02x}:00.0")) }).collect(),
            })
            .collect()
    }

    /// Figures of `round` where each direction runs at the slower of the two ends' rates.
    fn measure(round: &Round, rails: usize, rate: &dyn Fn(usize, usize) -> f64, planned: usize) -> SweepRound {
        measure_pairs(round, rails, &|a, ka, b, kb| rate(a, ka).min(rate(b, kb)), planned)
    }

    /// Figures of `round` from a rate per pair of NICs.
    fn measure_pairs(round: &Round, rails: usize, rate: &dyn Fn(usize, usize, usize, usize) -> f64, planned: usize) -> SweepRound {
        let mut figures = Vec::new();
        for &(a, b) in &round.pairs {
            for rail in 0..rails {
                let theirs = round.remote_rail(a, b, rail, rails);
                let gbps = rate(a, rail, b, theirs);
                let to_rail = (theirs != rail).then_some(theirs);
                let back = (theirs != rail).then_some(rail);
                let figure = Figure { gbps, steady_gbps: gbps, p50_us: 1.0, p99_us: 2.0, ..Figure::default() };
                figures.push(Figure { from: a, to: b, rail, to_rail, ..figure });
                figures.push(Figure { from: b, to: a, rail: theirs, to_rail: back, ..figure });
            }
        }
        SweepRound { round: round.clone(), planned, figures }
    }

    fn sweep(n: usize, rails: usize, rate: &dyn Fn(usize, usize) -> f64, quick: bool) -> (Vec<NodeFacts>, Judgement) {
        let facts = nodes(n, rails);
        let mut plan = pairing_rounds(n, quick);
        plan.push(cross_rail_round(plan.len(), &plan[0]));
        let mut rounds: Vec<SweepRound> = plan.iter().map(|r| measure(r, rails, rate, plan.len())).collect();
        let input = |rounds: &[SweepRound]| judge(&JudgeInput { nodes: &facts, rails, rounds, threshold: 0.9, link_gbps: None });
        let first = input(&rounds);
        let (retest, _) = retest_round(rounds.len(), &first.retest);
        rounds.push(measure(&retest, rails, rate, plan.len()));
        let judged = input(&rounds);
        (facts, judged)
    }

    #[test]
    fn a_healthy_fleet_has_no_suspects() {
        let (_, judged) = sweep(4, 4, &|_, _| 0.96, false);
        assert!(judged.verdict.suspects.is_empty(), "{:?}", judged.verdict);
        assert_eq!(judged.verdict.checked, Checked { nodes: 4, nics: 16 });
        assert_eq!(judged.medians, vec![Some(0.96); 4]);
    }

    #[test]
    fn one_slow_nic_is_named_and_its_peers_are_not() {
        for quick in [false, true] {
            let (_, judged) = sweep(4, 4, &|rank, rail| if (rank, rail) == (2, 1) { 0.24 } else { 0.95 }, quick);
            let suspects = &judged.verdict.suspects;
            assert_eq!(suspects.len(), 1, "{suspects:?}");
            let s = &suspects[0];
            assert_eq!((s.scope, s.rank, s.nic.as_deref(), s.rail), (Scope::Nic, 2, Some("efa1"), Some(1)));
            assert_eq!(s.pci.as_deref(), Some("0000:01:00.0"));
            assert!((s.measured_gbps - 0.24).abs() < 1e-9 && (s.median_gbps - 0.95).abs() < 1e-9);
            assert!(s.peers_tried.len() >= 2, "{s:?}");
            assert!(s.why.contains("with every peer tried"), "{}", s.why);
        }
    }

    #[test]
    fn a_slow_node_is_named_once() {
        let (_, judged) = sweep(4, 4, &|rank, _| if rank == 3 { 0.25 } else { 0.95 }, false);
        let suspects = &judged.verdict.suspects;
        assert_eq!(suspects.len(), 1, "{suspects:?}");
        assert_eq!((suspects[0].scope, suspects[0].rank, suspects[0].host.as_str()), (Scope::Node, 3, "node3"));
        assert_eq!(suspects[0].nics, vec!["efa0", "efa1", "efa2", "efa3"]);
        assert_eq!(suspects[0].nic, None);
    }

    #[test]
    fn a_pair_slow_only_with_each_other_is_a_link() {
        let facts = nodes(4, 2);
        let plan = pairing_rounds(4, false);
        let rounds: Vec<SweepRound> = plan
            .iter()
            .map(|round| {
                let mut measured = measure(round, 2, &|_, _| 0.95, plan.len());
                for f in &mut measured.figures {
                    if (f.from.min(f.to), f.from.max(f.to), f.rail) == (1, 3, 0) {
                        f.gbps = 0.3;
                        f.steady_gbps = 0.3;
                    }
                }
                measured
            })
            .collect();
        let judged = judge(&JudgeInput { nodes: &facts, rails: 2, rounds: &rounds, threshold: 0.9, link_gbps: None });
        let suspects = &judged.verdict.suspects;
        assert_eq!(suspects.len(), 1, "{suspects:?}");
        assert_eq!((suspects[0].scope, suspects[0].rank, suspects[0].peer, suspects[0].rail), (Scope::Link, 1, Some(3), Some(0)));
        // The retest runs the pair again (and each end against a healthy peer).
        assert!(judged.retest.contains(&(1, 3)), "{:?}", judged.retest);
    }

    #[test]
    fn one_stalled_write_makes_no_link() {
        let facts = nodes(4, 2);
        let plan = pairing_rounds(4, false);
        let mut rounds: Vec<SweepRound> = plan.iter().map(|r| measure(r, 2, &|_, _| 0.95, plan.len())).collect();
        // Rank 1 ↔ rank 3 on rail 0: a retransmission timeout in one write cut the whole run's figure, not
        // the median write's.
        for f in rounds.iter_mut().flat_map(|r| r.figures.iter_mut()) {
            if (f.from.min(f.to), f.from.max(f.to), f.rail) == (1, 3, 0) {
                f.gbps = 0.6;
            }
        }
        let judged = judge(&JudgeInput { nodes: &facts, rails: 2, rounds: &rounds, threshold: 0.9, link_gbps: None });
        assert!(judged.verdict.suspects.is_empty(), "{:?}", judged.verdict);
    }

    #[test]
    fn a_round_slow_as_a_whole_blames_no_link() {
        let facts = nodes(4, 2);
        let plan = pairing_rounds(4, false);
        let mut rounds: Vec<SweepRound> = plan.iter().map(|r| measure(r, 2, &|_, _| 0.95, plan.len())).collect();
        // The last round ran on a loaded host: every figure in it at 0.6.
        for f in &mut rounds[2].figures {
            f.gbps = 0.6;
            f.steady_gbps = 0.6;
        }
        let judged = judge(&JudgeInput { nodes: &facts, rails: 2, rounds: &rounds, threshold: 0.9, link_gbps: None });
        assert!(judged.verdict.suspects.is_empty(), "{:?}", judged.verdict);
    }

    #[test]
    fn a_link_speed_given_is_a_bar_too() {
        let facts = nodes(4, 1);
        let plan = pairing_rounds(4, false);
        let rounds: Vec<SweepRound> = plan.iter().map(|r| measure(r, 1, &|_, _| 0.5, plan.len())).collect();
        let judged = judge(&JudgeInput { nodes: &facts, rails: 1, rounds: &rounds, threshold: 0.9, link_gbps: Some(1.0) });
        // Every one of them is slow against 1 Gbps; each host has one NIC, so each NIC is named.
        assert_eq!(judged.verdict.suspects.len(), 4);
        assert!(judged.verdict.suspects[0].why.contains("link speed (1 Gbps, --link-gbps)"), "{:?}", judged.verdict.suspects[0]);
        assert!(judged.is_low(0, 0.8) && !judged.is_low(0, 0.95));
    }

    /// Two nodes: each NIC meets one peer NIC on its rail. The cross-rail round gives it a second one of the
    /// same peer, which is what tells a slow NIC from a slow link.
    fn two_nodes(rate: &dyn Fn(usize, usize, usize, usize) -> f64, cross: bool, link_gbps: Option<f64>) -> Judgement {
        let facts = nodes(2, 4);
        let mut plan = pairing_rounds(2, false);
        if cross {
            plan.push(cross_rail_round(1, &plan[0]));
        }
        let rounds: Vec<SweepRound> = plan.iter().map(|r| measure_pairs(r, 4, rate, 1)).collect();
        judge(&JudgeInput { nodes: &facts, rails: 4, rounds: &rounds, threshold: 0.9, link_gbps })
    }

    #[test]
    fn between_two_nodes_the_cross_rail_round_tells_a_slow_nic_from_a_slow_link() {
        // Rank 1's efa1 is slow: slow with rank 0's efa1 and, cross-rail, with rank 0's efa0.
        let slow_nic = |a: usize, ka: usize, b: usize, kb: usize| if (a, ka) == (1, 1) || (b, kb) == (1, 1) { 0.25 } else { 0.95 };
        let judged = two_nodes(&slow_nic, true, None);
        let suspects = &judged.verdict.suspects;
        assert_eq!(suspects.len(), 1, "{suspects:?}");
        assert_eq!((suspects[0].scope, suspects[0].rank, suspects[0].nic.as_deref()), (Scope::Nic, 1, Some("efa1")));
        assert!(suspects[0].why.contains("rank 0 efa1, rank 0 efa0 (cross-rail)"), "{}", suspects[0].why);
        assert_eq!(suspects[0].peers_tried, vec![0]);

        // The path between rank 0's efa1 and rank 1's efa1 is slow, both NICs are fine with another NIC.
        let slow_link = |a: usize, ka: usize, b: usize, kb: usize| if (ka, kb) == (1, 1) && a != b { 0.25 } else { 0.95 };
        let judged = two_nodes(&slow_link, true, None);
        let suspects = &judged.verdict.suspects;
        assert_eq!(suspects.len(), 1, "{suspects:?}");
        let s = &suspects[0];
        assert_eq!((s.scope, s.rank, s.nic.as_deref(), s.peer, s.peer_nic.as_deref()), (Scope::Link, 0, Some("efa1"), Some(1), Some("efa1")));
        assert!(s.why.contains("rank 0 efa1 reaches the bar with rank 1 efa2 (cross-rail)"), "{}", s.why);
        assert!(s.why.contains("rank 1 efa1 with rank 0 efa0 (cross-rail)"), "{}", s.why);
        assert!(judged.retest.contains(&(0, 1)));

        // Without the cross-rail round a rail's median between two nodes is that pair itself: nothing is
        // found. Against a link speed given, the slow pair is, but NIC and link cannot be told apart.
        for rate in [&slow_nic as &dyn Fn(usize, usize, usize, usize) -> f64, &slow_link] {
            assert!(two_nodes(rate, false, None).verdict.suspects.is_empty());
            let judged = two_nodes(rate, false, Some(1.0));
            let suspects = &judged.verdict.suspects;
            assert_eq!(suspects.len(), 1, "{suspects:?}");
            assert_eq!(suspects[0].scope, Scope::Link);
            assert!(suspects[0].why.contains("cannot be told apart"), "{}", suspects[0].why);
        }
    }

    #[test]
    fn a_slow_cross_rail_path_is_a_link_between_two_rails() {
        // Only rank 0's efa2 ↔ rank 3's efa3 is slow: 0-3 is a pair of round 0, so the cross-rail round runs it.
        let facts = nodes(4, 4);
        let mut plan = pairing_rounds(4, false);
        plan.push(cross_rail_round(plan.len(), &plan[0]));
        let rate = |a: usize, ka: usize, b: usize, kb: usize| {
            if [(a, ka, b, kb), (b, kb, a, ka)].contains(&(0, 2, 3, 3)) { 0.3 } else { 0.95 }
        };
        let rounds: Vec<SweepRound> = plan.iter().map(|r| measure_pairs(r, 4, &rate, 3)).collect();
        let judged = judge(&JudgeInput { nodes: &facts, rails: 4, rounds: &rounds, threshold: 0.9, link_gbps: None });
        let suspects = &judged.verdict.suspects;
        assert_eq!(suspects.len(), 1, "{suspects:?}");
        let s = &suspects[0];
        assert_eq!((s.scope, s.rank, s.nic.as_deref(), s.peer, s.peer_nic.as_deref()), (Scope::Link, 0, Some("efa2"), Some(3), Some("efa3")));
        assert!(s.why.contains("cross-rail"), "{}", s.why);
        // It is run again as it ran, cross-rail; a rail-aligned retest would not measure it.
        assert_eq!(judged.retest_cross, vec![(0, 3)]);
        assert!(!judged.retest.contains(&(0, 3)), "{:?}", judged.retest);
    }

    #[test]
    fn judging_round_by_round_gives_the_batch_verdict() {
        let facts = nodes(6, 3);
        let mut plan = pairing_rounds(6, false);
        plan.push(cross_rail_round(plan.len(), &plan[0]));
        let rate = |rank: usize, rail: usize| if (rank, rail) == (4, 2) { 0.2 } else { 0.9 + 0.01 * rank as f64 };
        let rounds: Vec<SweepRound> = plan.iter().map(|r| measure(r, 3, &rate, plan.len())).collect();
        let mut live = Judge::new(&facts, 3, 0.9, None);
        for (taken, round) in rounds.iter().enumerate() {
            live.add(round);
            let batch = judge(&JudgeInput { nodes: &facts, rails: 3, rounds: &rounds[..=taken], threshold: 0.9, link_gbps: None });
            assert_eq!(live.judgement(), batch, "after round {taken}");
        }
        assert_eq!(live.rounds(), rounds.len());
        let verdict = live.judgement().verdict;
        assert_eq!(verdict.suspects.len(), 1, "{verdict:?}");
        assert_eq!((verdict.suspects[0].rank, verdict.suspects[0].rail), (4, Some(2)));
    }

    /// The scale, judged live: 1024 nodes × 32 NICs, a judgement after each of the first rounds
    /// (and the cross-rail round), one slow NIC found. Prints the time a round takes to take and judge: the
    /// dashboard does that once per round.
    #[test]
    fn judges_1024_nodes_by_32_nics_round_by_round() {
        const NODES: usize = 1024;
        const NICS: usize = 32;
        let facts = nodes(NODES, NICS);
        let mut plan: Vec<Round> = pairing_rounds(NODES, false).into_iter().take(4).collect();
        plan.push(cross_rail_round(plan.len(), &plan[0]));
        let rate = |rank: usize, rail: usize| if (rank, rail) == (700, 17) { 40.0 } else { 97.0 };
        let mut judge = Judge::new(&facts, NICS, 0.9, None);
        let mut slowest = std::time::Duration::ZERO;
        let mut last = Judgement::default();
        for round in &plan {
            let measured = measure(round, NICS, &rate, 1023);
            let started = std::time::Instant::now();
            judge.add(&measured);
            last = judge.judgement();
            slowest = slowest.max(started.elapsed());
        }
        let suspects = &last.verdict.suspects;
        assert_eq!(suspects.len(), 1, "{suspects:?}");
        assert_eq!((suspects[0].scope, suspects[0].rank, suspects[0].rail), (Scope::Nic, 700, Some(17)));
        assert_eq!(last.verdict.checked, Checked { nodes: NODES, nics: NODES * NICS });
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("judged {NODES} nodes × {NICS} NICs round by round: at most {slowest:?} a round (take + judge)\n").as_bytes(),
        );
    }
}
