//! Judging a sweep's figures. A pair's rate on a rail is limited by both ends, so a channel is judged by
//! the best it did with any peer: a NIC that is slow with every peer it met (two or more) is the culprit,
//! and the peers it dragged down are not; a pair that is slow only with each other is a link. The bar is
//! `threshold` × the fleet median of the same rail's best figures, and `threshold` × the link speed where
//! one was given (`--link-gbps`). Every NIC of a host found slow is named once, as the node. A link must
//! also be behind the rest of its round (every pair and rail of it) each time it ran: when a whole round is
//! slow (a loaded host), no link in it is to blame.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::{Checked, NodeFacts, Scope, Suspect, SweepRound, Verdict};

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
    /// is one), and each pair that was slow only with each other, again.
    pub retest: Vec<(usize, usize)>,
    /// Per rail: the fleet median of the channels' best figures (`None`: nothing measured on it).
    pub medians: Vec<Option<f64>>,
    /// Per rail: the figure below which a channel is slow.
    pub limits: Vec<Option<f64>>,
    /// `[rank][rail]`: the channel's best figure with any peer so far.
    pub best: Vec<Vec<Option<f64>>>,
}

impl Judgement {
    /// Whether a figure on `rail` is below the bar.
    pub fn is_low(&self, rail: usize, gbps: f64) -> bool {
        self.limits.get(rail).copied().flatten().is_some_and(|limit| gbps < limit)
    }
}

fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 { values[mid] } else { f64::midpoint(values[mid - 1], values[mid]) })
}

fn list(ranks: impl IntoIterator<Item = usize>) -> String {
    ranks.into_iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")
}

/// Judges every figure of `input.rounds`.
#[allow(clippy::too_many_lines)] // one pass from figures to findings, in order
pub fn judge(input: &JudgeInput<'_>) -> Judgement {
    let ranks = input.nodes.len();
    let rails = input.rails;
    // A pair's figure on a rail in a round: the slower direction. Over rounds, the best of them.
    let mut pair_best: BTreeMap<(usize, usize, usize), f64> = BTreeMap::new();
    // Whether a pair was slower than the rest of its round (all its pairs and rails) every time it met:
    // a round slowed as a whole (a loaded host, a busy switch) says nothing about one link.
    let mut pair_behind: BTreeMap<(usize, usize, usize), bool> = BTreeMap::new();
    for round in input.rounds {
        let mut this_round: BTreeMap<(usize, usize, usize), f64> = BTreeMap::new();
        for figure in &round.figures {
            if figure.from >= ranks || figure.to >= ranks || figure.rail >= rails || figure.from == figure.to {
                continue;
            }
            let key = (figure.from.min(figure.to), figure.from.max(figure.to), figure.rail);
            let slot = this_round.entry(key).or_insert(f64::INFINITY);
            *slot = slot.min(figure.judged_gbps());
        }
        let round_median = median(&mut this_round.values().copied().collect::<Vec<_>>());
        for (key, gbps) in this_round {
            let slot = pair_best.entry(key).or_insert(f64::NEG_INFINITY);
            *slot = slot.max(gbps);
            let behind = round_median.is_some_and(|m| gbps < input.threshold * m);
            let slot = pair_behind.entry(key).or_insert(true);
            *slot = *slot && behind;
        }
    }
    // `peers[rank][rail]`: each peer met and the pair's best.
    let mut peers: Vec<Vec<BTreeMap<usize, f64>>> = vec![vec![BTreeMap::new(); rails]; ranks];
    for (&(a, b, rail), &gbps) in &pair_best {
        peers[a][rail].insert(b, gbps);
        peers[b][rail].insert(a, gbps);
    }
    let best: Vec<Vec<Option<f64>>> =
        peers.iter().map(|by_rail| by_rail.iter().map(|met| met.values().copied().reduce(f64::max)).collect()).collect();
    let medians: Vec<Option<f64>> =
        (0..rails).map(|rail| median(&mut best.iter().filter_map(|b| b[rail]).collect::<Vec<_>>())).collect();
    let limits: Vec<Option<f64>> = medians
        .iter()
        .map(|m| {
            let by_median = m.map(|m| input.threshold * m);
            let by_link = input.link_gbps.map(|l| input.threshold * l);
            match (by_median, by_link) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            }
        })
        .collect();
    let low = |gbps: f64, rail: usize| limits[rail].is_some_and(|limit| gbps < limit);
    let bar = |rail: usize| -> String {
        let pct = (input.threshold * 100.0).round();
        match (medians[rail], input.link_gbps) {
            (Some(m), Some(link)) if input.threshold * link > input.threshold * m => {
                format!("{pct:.0}% of the link speed ({link} Gbps, --link-gbps)")
            }
            (Some(m), _) => format!("{pct:.0}% of rail {rail}'s median ({m:.2} Gbps)"),
            (None, _) => format!("{pct:.0}% of the bar"),
        }
    };
    // A NIC is the culprit when it met two or more peers and was slow with every one of them.
    let nic_low = |rank: usize, rail: usize| peers[rank][rail].len() >= 2 && best[rank][rail].is_some_and(|b| low(b, rail));
    let fact = |rank: usize| input.nodes.get(rank).cloned().unwrap_or_default();
    let nic_name = |rank: usize, rail: usize| fact(rank).nics.get(rail).map_or_else(|| format!("channel {rail}"), |n| n.name.clone());

    let mut suspects = Vec::new();
    // Node-level first: a host whose every measured NIC is slow.
    let mut hosts: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (rank, node) in input.nodes.iter().enumerate() {
        hosts.entry(node.host.clone()).or_default().push(rank);
    }
    let mut named_node: BTreeSet<usize> = BTreeSet::new();
    for (host, on_host) in &hosts {
        let channels: Vec<(usize, usize)> =
            on_host.iter().flat_map(|&r| (0..rails).map(move |k| (r, k))).filter(|&(r, k)| best[r][k].is_some()).collect();
        if channels.len() < 2 || !channels.iter().all(|&(r, k)| nic_low(r, k)) {
            continue;
        }
        let first = on_host[0];
        let node = fact(first);
        let measured = channels.iter().filter_map(|&(r, k)| best[r][k]).fold(f64::NEG_INFINITY, f64::max);
        let median_gbps = median(&mut channels.iter().filter_map(|&(_, k)| medians[k]).collect::<Vec<_>>()).unwrap_or(0.0);
        let tried: BTreeSet<usize> = channels.iter().flat_map(|&(r, k)| peers[r][k].keys().copied()).collect();
        let nics: Vec<String> = channels.iter().map(|&(r, k)| nic_name(r, k)).collect();
        let mut why = format!(
            "every NIC of {host} ({} of {}) is below the bar with every peer tried; the best any of them did is {measured:.2} Gbps",
            channels.len(),
            channels.len()
        );
        let _ = write!(why, " (bar: {})", bar(channels[0].1));
        suspects.push(Suspect {
            scope: Scope::Node,
            rank: first,
            host: host.clone(),
            gpu: node.gpu,
            nic: None,
            pci: node.gpu_pci.clone(),
            rail: None,
            peer: None,
            nics,
            measured_gbps: measured,
            median_gbps,
            peers_tried: tried.into_iter().collect(),
            why,
        });
        named_node.extend(on_host.iter().copied());
    }
    // NICs slow with every peer.
    for rank in 0..ranks {
        if named_node.contains(&rank) {
            continue;
        }
        for rail in 0..rails {
            if !nic_low(rank, rail) {
                continue;
            }
            let node = fact(rank);
            let measured = best[rank][rail].unwrap_or(0.0);
            let tried: Vec<usize> = peers[rank][rail].keys().copied().collect();
            suspects.push(Suspect {
                scope: Scope::Nic,
                rank,
                host: node.host.clone(),
                gpu: node.gpu,
                nic: Some(nic_name(rank, rail)),
                pci: node.nics.get(rail).and_then(|n| n.pci.clone()),
                rail: Some(rail),
                peer: None,
                nics: Vec::new(),
                measured_gbps: measured,
                median_gbps: medians[rail].unwrap_or(0.0),
                why: format!(
                    "below {} with every peer tried (ranks {}): at best {measured:.2} Gbps",
                    bar(rail),
                    list(tried.iter().copied())
                ),
                peers_tried: tried,
            });
        }
    }
    // Pairs slow with each other, and behind the rest of their round every time they met, where neither
    // end is slow with everyone: links.
    let mut link_pairs = Vec::new();
    for (&(a, b, rail), &gbps) in &pair_best {
        let behind = pair_behind.get(&(a, b, rail)).copied().unwrap_or(false);
        if !low(gbps, rail) || !behind || nic_low(a, rail) || nic_low(b, rail) || named_node.contains(&a) || named_node.contains(&b)
        {
            continue;
        }
        let node = fact(a);
        let others = |r: usize, other: usize| peers[r][rail].keys().filter(|&&p| p != other).count();
        let why = if others(a, b) == 0 && others(b, a) == 0 {
            format!("rank {a} ↔ rank {b} on rail {rail}: {gbps:.2} Gbps, below {}; each met only the other, so a NIC and the link cannot be told apart", bar(rail))
        } else {
            format!(
                "rank {a} ↔ rank {b} on rail {rail}: {gbps:.2} Gbps, below {} and behind the rest of its round each time, while both \
                 ends reach it with other peers",
                bar(rail)
            )
        };
        suspects.push(Suspect {
            scope: Scope::Link,
            rank: a,
            host: node.host.clone(),
            gpu: node.gpu,
            nic: Some(nic_name(a, rail)),
            pci: node.nics.get(rail).and_then(|n| n.pci.clone()),
            rail: Some(rail),
            peer: Some(b),
            nics: Vec::new(),
            measured_gbps: gbps,
            median_gbps: medians[rail].unwrap_or(0.0),
            peers_tried: vec![b],
            why,
        });
        link_pairs.push((a, b));
    }

    // What a retest should run: every suspect rank against a healthy peer, unmet if possible; every
    // link pair again.
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
        let met: BTreeSet<usize> = peers[s].iter().flat_map(|m| m.keys().copied()).collect();
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
        medians,
        limits,
        best,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{pairing_rounds, Figure, NicFacts, Round, SweepRound};
    use super::*;

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
        let mut figures = Vec::new();
        for &(a, b) in &round.pairs {
            for rail in 0..rails {
                let gbps = rate(a, rail).min(rate(b, rail));
                figures.push(Figure { from: a, to: b, rail, gbps, steady_gbps: gbps, p50_us: 1.0, p99_us: 2.0 });
                figures.push(Figure { from: b, to: a, rail, gbps, steady_gbps: gbps, p50_us: 1.0, p99_us: 2.0 });
            }
        }
        SweepRound { round: round.clone(), planned, figures }
    }

    fn sweep(n: usize, rails: usize, rate: &dyn Fn(usize, usize) -> f64, quick: bool) -> (Vec<NodeFacts>, Judgement) {
        let facts = nodes(n, rails);
        let plan = pairing_rounds(n, quick);
        let mut rounds: Vec<SweepRound> = plan.iter().map(|r| measure(r, rails, rate, plan.len())).collect();
        let input = |rounds: &[SweepRound]| judge(&JudgeInput { nodes: &facts, rails, rounds, threshold: 0.9, link_gbps: None });
        let first = input(&rounds);
        let (retest, _) = super::super::retest_round(rounds.len(), &first.retest);
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
}
