//! Rank 0's one liveness clock: when each rank was last heard from (a telemetry sample, a phase change),
//! and what that makes it. The watchdog judges hangs by it and the dashboard shows it; neither keeps a
//! clock of its own. Pure: times are passed in (time since the run started), nothing is read from a clock.
//!
//! Silence is measured up to the last moment rank 0 heard from *any* rank (its own sampler included), not
//! up to now: when rank 0's own collector is held up (a stalled process, a starved thread), every rank
//! falls quiet at once and none of them is to blame.

use std::time::Duration;

use crate::telemetry::Phase;

/// What rank 0 makes of a rank's silence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Heard from within `slow_after`.
    Alive,
    /// Silent for longer than `slow_after`: shown, not judged.
    Slow(Duration),
    /// Silent for longer than `silent_after`: shown prominently, still not judged.
    Silent(Duration),
    /// Silent for longer than the hang timeout: the watchdog names it.
    Hung(Duration),
    /// Its telemetry connection closed (or it is not watched).
    Closed,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Liveness {
    /// When each rank was last heard from; `None` once its connection closed.
    heard: Vec<Option<Duration>>,
    /// The last phase each rank reported, with its byte count.
    phases: Vec<Option<(Phase, u64)>>,
    /// The last time anything arrived from any rank: silence is measured up to here.
    latest: Duration,
    /// Shown as slow after this long.
    pub slow_after: Duration,
    /// Shown as silent after this long.
    pub silent_after: Duration,
    /// Named as hung after this long (`--hang-timeout`).
    pub hang_timeout: Duration,
}

impl Liveness {
    /// Every rank counts as heard at the start of the run: one that never speaks is as silent as one that
    /// stopped. `interval` is the telemetry interval.
    pub fn new(ranks: usize, interval: Duration, hang_timeout: Duration) -> Self {
        let slow_after = (interval * 3).max(Duration::from_millis(2500)).min(hang_timeout);
        let silent_after = (slow_after * 4).min(hang_timeout);
        Self {
            heard: vec![Some(Duration::ZERO); ranks],
            phases: vec![None; ranks],
            latest: Duration::ZERO,
            slow_after,
            silent_after,
            hang_timeout,
        }
    }

    pub fn ranks(&self) -> usize {
        self.heard.len()
    }

    /// A frame (sample or phase change) from `rank` arrived at `at`.
    pub fn heard(&mut self, rank: usize, at: Duration) {
        if let Some(Some(heard)) = self.heard.get_mut(rank) {
            *heard = (*heard).max(at);
        }
        self.latest = self.latest.max(at);
    }

    /// `rank` reported a phase change (progress): it is alive, and this is what it is doing.
    pub fn phase(&mut self, rank: usize, phase: Phase, bytes: u64, at: Duration) {
        if let Some(slot) = self.phases.get_mut(rank) {
            *slot = Some((phase, bytes));
        }
        self.heard(rank, at);
    }

    /// The last phase `rank` reported.
    pub fn last_phase(&self, rank: usize) -> Option<(Phase, u64)> {
        self.phases.get(rank).copied().flatten()
    }

    /// `rank`'s telemetry connection closed: it is no longer judged by its silence.
    pub fn closed(&mut self, rank: usize) {
        if let Some(heard) = self.heard.get_mut(rank) {
            *heard = None;
        }
    }

    /// How long `rank` has been silent, as of `at`; `None` once closed.
    pub fn silence(&self, rank: usize, at: Duration) -> Option<Duration> {
        let heard = (*self.heard.get(rank)?)?;
        // Up to the last moment rank 0 heard from anyone, but never past `at`.
        Some(self.latest.min(at).saturating_sub(heard))
    }

    pub fn health(&self, rank: usize, at: Duration) -> Health {
        match self.silence(rank, at) {
            None => Health::Closed,
            Some(silent) if silent > self.hang_timeout => Health::Hung(silent),
            Some(silent) if silent > self.silent_after => Health::Silent(silent),
            Some(silent) if silent > self.slow_after => Health::Slow(silent),
            Some(_) => Health::Alive,
        }
    }

    /// The first rank other than rank 0 (whose own hot path is what a verdict would stop) silent for
    /// longer than the hang timeout, with its silence.
    pub fn hung(&self, at: Duration) -> Option<(usize, Duration)> {
        (1..self.heard.len()).find_map(|rank| match self.health(rank, at) {
            Health::Hung(silent) => Some((rank, silent)),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn a_rank_goes_slow_then_silent_then_hung_and_a_frame_brings_it_back() {
        let mut live = Liveness::new(2, Duration::from_millis(100), S(60));
        assert_eq!((live.slow_after, live.silent_after), (Duration::from_millis(2500), S(10)));
        for second in 1..=70 {
            // Rank 0's own sampler keeps speaking; rank 1 fell silent at 0.
            live.heard(0, S(second));
        }
        assert_eq!(live.health(1, S(2)), Health::Alive);
        assert_eq!(live.health(1, S(3)), Health::Slow(S(3)));
        assert_eq!(live.health(1, S(11)), Health::Silent(S(11)));
        assert_eq!(live.hung(S(60)), None, "not before the hang timeout");
        assert_eq!(live.hung(S(61)), Some((1, S(61))));
        live.phase(1, Phase::Verifying, 1 << 30, S(61));
        assert_eq!(live.health(1, S(61)), Health::Alive, "progress counts as alive");
        assert_eq!(live.last_phase(1), Some((Phase::Verifying, 1 << 30)));
    }

    #[test]
    fn when_rank_0_hears_nobody_nobody_is_blamed() {
        let mut live = Liveness::new(3, Duration::from_millis(100), S(5));
        live.heard(0, S(1));
        live.heard(1, S(1));
        live.heard(2, S(1));
        // Rank 0's collector was held up for 30 s: nothing arrived from anyone.
        assert_eq!(live.hung(S(31)), None);
        assert_eq!(live.silence(2, S(31)), Some(Duration::ZERO));
        // Then rank 0 and rank 1 are heard again, rank 2 is not: its silence counts from there on.
        live.heard(0, S(37));
        live.heard(1, S(37));
        assert_eq!(live.hung(S(37)), Some((2, S(36))));
    }

    #[test]
    fn closed_ranks_and_rank_0_are_never_judged_by_silence() {
        let mut live = Liveness::new(2, Duration::from_millis(100), S(5));
        live.heard(1, S(100));
        assert_eq!(live.hung(S(100)), None, "rank 0 silent for 100 s is not judged");
        live.closed(1);
        live.heard(0, S(200));
        assert_eq!(live.health(1, S(200)), Health::Closed);
        assert_eq!(live.hung(S(200)), None);
    }
}
