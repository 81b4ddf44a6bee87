//! `sweep`: the record so far (settings, every round, the verdict once judged) and what the panel draws
//! from it, judged once per round rather than once per frame, by a [`Judge`] that takes each round's
//! figures once (a round costs its figures and a pass over the channels, however many rounds came before).

use efatop_proto::sweep::{SweepResults, SweepRound, Verdict};
use efatop_sweep::verdict::Judge;

/// What the dashboard knows of a sweep.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SweepView {
    pub record: SweepResults,
    /// Channels per rank.
    pub rails: usize,
    /// `[rank][rail]`: the channel's figure in the latest round it ran (the slower direction of its pair).
    pub latest: Vec<Vec<Option<f64>>>,
    /// `[rank][rail]`: the latest figure is below the bar.
    pub latest_low: Vec<Vec<bool>>,
    /// `[rank][rail]`: the channel is slow with every peer it met so far (a suspect NIC).
    pub suspect: Vec<Vec<bool>>,
    /// Per rail: the fleet median so far.
    pub medians: Vec<Option<f64>>,
    judge: Judge,
}

impl SweepView {
    /// A sweep's settings and ranks, before its first round.
    pub fn begin(record: SweepResults, rails: usize) -> Self {
        let ranks = record.nodes.len();
        let judge = Judge::new(&record.nodes, rails, record.threshold, record.link_gbps);
        let mut view = Self {
            judge,
            record,
            rails,
            latest: vec![vec![None; rails]; ranks],
            latest_low: vec![vec![false; rails]; ranks],
            suspect: vec![vec![false; rails]; ranks],
            medians: vec![None; rails],
        };
        let rounds = std::mem::take(&mut view.record.rounds);
        for round in rounds {
            view.round(round);
        }
        view
    }

    /// A round finished: its figures become the latest, and everything is judged again.
    pub fn round(&mut self, round: SweepRound) {
        let ranks = self.latest.len();
        // A pair's figure is its slower direction, on both of its NICs (another rail's, cross-rail).
        let mut this_round: Vec<Vec<Option<f64>>> = vec![vec![None; self.rails]; ranks];
        for figure in &round.figures {
            if figure.from >= ranks || figure.to >= ranks || figure.rail >= self.rails || figure.target_rail() >= self.rails {
                continue;
            }
            for (rank, rail) in [(figure.from, figure.rail), (figure.to, figure.target_rail())] {
                let slot = &mut this_round[rank][rail];
                let gbps = figure.judged_gbps();
                *slot = Some(slot.map_or(gbps, |old| old.min(gbps)));
            }
        }
        for (latest, measured) in self.latest.iter_mut().flatten().zip(this_round.into_iter().flatten()) {
            if measured.is_some() {
                *latest = measured;
            }
        }
        self.judge.add(&round);
        self.record.rounds.push(round);
        self.rejudge();
    }

    pub fn verdict(&mut self, verdict: Verdict) {
        self.record.verdict = Some(verdict);
    }

    fn rejudge(&mut self) {
        let judged = self.judge.judgement();
        for (rank, row) in self.latest.iter().enumerate() {
            for (rail, value) in row.iter().enumerate() {
                self.latest_low[rank][rail] = value.is_some_and(|v| judged.is_low(rail, v));
            }
        }
        for suspect in &mut self.suspect {
            suspect.fill(false);
        }
        for found in &judged.verdict.suspects {
            match (found.scope, found.rail) {
                (efatop_proto::sweep::Scope::Nic, Some(rail)) => self.suspect[found.rank][rail] = true,
                (efatop_proto::sweep::Scope::Node, _) => {
                    for (rank, node) in self.record.nodes.iter().enumerate() {
                        if node.host == found.host {
                            self.suspect[rank].fill(true);
                        }
                    }
                }
                _ => {}
            }
        }
        self.medians = judged.medians;
    }

    /// Rounds run so far and planned (pairing and cross-rail rounds; retests come on top).
    pub fn progress(&self) -> (usize, usize) {
        let planned = self.record.rounds.first().map_or(0, |r| r.planned);
        (self.record.rounds.len(), planned)
    }
}
