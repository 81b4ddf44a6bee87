//! The rounds of a sweep: a round-robin tournament by the circle method, so that every rank meets every
//! other once in n−1 rounds (n rounds with a bye when n is odd), every rank busy in every round; `--quick`
//! keeps the first ⌈n/2⌉ rounds. Retest rounds pack the pairs a judgement asks for, each rank at most
//! once per round.

use efatop_proto::sweep::{Round, RoundKind};

/// The tournament's rounds for `ranks` ranks (all of them, or the first ⌈n/2⌉ when `quick`). O(n) rounds of
/// n/2 pairs each.
pub fn pairing_rounds(ranks: usize, quick: bool) -> Vec<Round> {
    if ranks < 2 {
        return Vec::new();
    }
    // An odd count gets a phantom rank: whoever meets it sits the round out.
    let slots = ranks + ranks % 2;
    let total = slots - 1;
    let count = if quick { ranks.div_ceil(2).min(total) } else { total };
    // Slot 0 stays put; the others turn one place each round.
    let mut circle: Vec<usize> = (0..slots).collect();
    let mut rounds = Vec::with_capacity(count);
    for index in 0..count {
        let pairs = (0..slots / 2)
            .map(|i| (circle[i], circle[slots - 1 - i]))
            .filter(|&(a, b)| a < ranks && b < ranks)
            .map(|(a, b)| (a.min(b), a.max(b)))
            .collect();
        rounds.push(Round { index, kind: RoundKind::Pairing, pairs, shift: 0 });
        circle[1..].rotate_right(1);
    }
    rounds
}

/// The cross-rail round: the pairs of `first` (the tournament's first round) again, channel k of the
/// smaller rank with channel k + 1 of the larger. Every NIC of both nodes meets a second NIC of the same
/// peer: with the rail-aligned figures of that pair, a slow NIC (slow with both NICs of the peer) is told
/// from a slow link (slow only with the one across from it), even between two nodes.
pub fn cross_rail_round(index: usize, first: &Round) -> Round {
    Round { index, kind: RoundKind::CrossRail, pairs: first.pairs.clone(), shift: 1 }
}

/// One retest round from `wanted` pairs, taken in order where neither rank is already busy in it; returns
/// the round and the pairs left for a later one. Pairs of a rank with itself are dropped.
pub fn retest_round(index: usize, wanted: &[(usize, usize)]) -> (Round, Vec<(usize, usize)>) {
    retest_round_shifted(index, wanted, 0)
}

/// [`retest_round`] with channel k of the smaller rank of each pair meeting channel k + `shift` of the
/// larger: 1 runs cross-rail pairs again.
pub fn retest_round_shifted(index: usize, wanted: &[(usize, usize)], shift: usize) -> (Round, Vec<(usize, usize)>) {
    let mut busy = std::collections::HashSet::new();
    let mut pairs = Vec::new();
    let mut left = Vec::new();
    for &(a, b) in wanted {
        if a == b {
            continue;
        }
        let pair = (a.min(b), a.max(b));
        if pairs.contains(&pair) {
            continue;
        }
        if busy.contains(&a) || busy.contains(&b) {
            left.push(pair);
        } else {
            busy.insert(a);
            busy.insert(b);
            pairs.push(pair);
        }
    }
    (Round { index, kind: RoundKind::Retest, pairs, shift }, left)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn check_tournament(ranks: usize) -> Vec<Round> {
        let rounds = pairing_rounds(ranks, false);
        assert_eq!(rounds.len(), if ranks.is_multiple_of(2) { ranks - 1 } else { ranks }, "O(n) rounds for {ranks}");
        let mut met = HashSet::new();
        for round in &rounds {
            let mut busy = HashSet::new();
            for &(a, b) in &round.pairs {
                assert!(a < b && b < ranks);
                assert!(busy.insert(a) && busy.insert(b), "a rank twice in round {}", round.index);
                assert!(met.insert((a, b)), "{a}-{b} met twice");
            }
            // Every rank is busy in every round (but one, when the count is odd).
            assert_eq!(busy.len(), ranks - ranks % 2);
        }
        assert_eq!(met.len(), ranks * (ranks - 1) / 2, "every pair meets");
        rounds
    }

    #[test]
    fn every_pair_meets_once_and_every_rank_plays_every_round() {
        for ranks in 2..=17 {
            check_tournament(ranks);
        }
        assert!(pairing_rounds(1, false).is_empty());
        let four = pairing_rounds(4, false);
        assert_eq!(four[0].pairs, vec![(0, 3), (1, 2)]);
        assert_eq!(four.len(), 3);
    }

    #[test]
    fn quick_keeps_half_the_rounds() {
        assert_eq!(pairing_rounds(4, true).len(), 2);
        assert_eq!(pairing_rounds(5, true).len(), 3);
        assert_eq!(pairing_rounds(2, true).len(), 1);
        assert_eq!(pairing_rounds(1024, true).len(), 512);
    }

    #[test]
    fn retest_rounds_use_each_rank_once() {
        let (round, left) = retest_round(3, &[(2, 0), (2, 1), (3, 1), (3, 3), (0, 2)]);
        assert_eq!(round.kind, RoundKind::Retest);
        assert_eq!(round.index, 3);
        assert_eq!(round.pairs, vec![(0, 2), (1, 3)]);
        assert_eq!(left, vec![(1, 2)]);
        assert_eq!(round.partner(3), Some(1));
        assert_eq!(round.partner(5), None);
        let (cross, _) = retest_round_shifted(4, &[(3, 0)], 1);
        assert_eq!((cross.kind, cross.pairs.clone(), cross.shift), (RoundKind::Retest, vec![(0, 3)], 1));
        assert_eq!(cross.remote_rail(0, 3, 2, 4), 3);
    }

    #[test]
    fn the_cross_rail_round_pairs_every_nic_with_the_next_one_of_the_same_peer() {
        let first = &pairing_rounds(4, false)[0];
        let cross = cross_rail_round(3, first);
        assert_eq!((cross.index, cross.kind, cross.shift), (3, RoundKind::CrossRail, 1));
        assert_eq!(cross.pairs, first.pairs);
        // Rank 0 (the smaller of 0-3) channel k meets rank 3's channel k+1, and rank 3's channel k+1 meets
        // rank 0's channel k: one matching of the two nodes' NICs.
        for k in 0..4 {
            let j = cross.remote_rail(0, 3, k, 4);
            assert_eq!(j, (k + 1) % 4);
            assert_eq!(cross.remote_rail(3, 0, j, 4), k);
        }
        assert_eq!(first.remote_rail(0, 3, 2, 4), 2);
        // Two NICs: 0↔1 and 1↔0.
        assert_eq!((cross.remote_rail(0, 3, 0, 2), cross.remote_rail(0, 3, 1, 2)), (1, 0));
    }

    /// The scale: 1024 nodes × 32 NICs. Rail-aligned rounds make every node pair a pair on every
    /// rail, so covering every node pair covers every rail pair (32 × 1024 × 1023 / 2 of them).
    #[test]
    fn plans_1024_nodes_by_32_nics_covering_every_rail_pair() {
        const NODES: usize = 1024;
        const NICS: usize = 32;
        let started = std::time::Instant::now();
        let rounds = pairing_rounds(NODES, false);
        let mut covered = vec![0u32; NODES * NODES];
        let mut rail_pairs = 0usize;
        for round in &rounds {
            for &(a, b) in &round.pairs {
                covered[a * NODES + b] += 1;
                rail_pairs += NICS;
            }
        }
        let planned = started.elapsed();
        assert_eq!(rounds.len(), NODES - 1);
        assert!(rounds.iter().all(|r| r.pairs.len() == NODES / 2));
        assert!((0..NODES).all(|a| (a + 1..NODES).all(|b| covered[a * NODES + b] == 1)));
        assert_eq!(rail_pairs, NICS * NODES * (NODES - 1) / 2);
        // A figure for the notes, never an assertion.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("planned {NODES} nodes × {NICS} NICs: {} rounds, {rail_pairs} rail pairs, in {planned:?}\n", rounds.len()).as_bytes(),
        );
    }
}
