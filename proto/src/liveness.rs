//! Rank 0's one liveness clock, as it travels to the dashboard and to viewers: when each rank was last heard
//! from (a telemetry sample, a phase change), how long its silence is, and the thresholds the run was
//! started with. What a silence makes a rank is its readers': the watchdog names a rank hung
//! (`efatop_runtime::watchdog::hung`), the dashboard shows it slow, silent or lost (`efatop_ui::ingest`),
//! both by these thresholds; neither keeps a clock of its own. Pure: times are passed in (time since the run
//! started), nothing is read from a clock.
//!
//! Silence is measured up to the last moment rank 0 heard from *any* rank (its own sampler included), not
//! up to now: when rank 0's own collector is held up (a stalled process, a starved thread), every rank
//! falls quiet at once and none of them is to blame.

use std::time::Duration;

use crate::telemetry::Phase;

#[derive(Clone, Debug, PartialEq)]
pub struct Liveness {
    /// When each rank was last heard from (until its first frame, when the clock began: [`Liveness::counting_from`]);
    /// `None` once its connection closed.
    heard: Vec<Option<Duration>>,
    /// Whether each rank has been heard from at all (its telemetry's first frame, the hello, counts).
    spoke: Vec<bool>,
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
    /// Rank 0's loop moves that start to the moment its collector and every rank's address were ready
    /// ([`Liveness::counting_from`]).
    pub fn new(ranks: usize, interval: Duration, hang_timeout: Duration) -> Self {
        let slow_after = (interval * 3).max(Duration::from_millis(2500)).min(hang_timeout);
        let silent_after = (slow_after * 4).min(hang_timeout);
        Self {
            heard: vec![Some(Duration::ZERO); ranks],
            spoke: vec![false; ranks],
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

    /// Silence counts from `at` for a rank not yet heard from: the moment rank 0's collector listened and
    /// every rank had been told where (the telemetry round). Before it no rank could speak: the world's
    /// setup (fabric, rendezvous, buffers) takes seconds on a loaded machine, and a rank still dialling
    /// right after it was once named hung by the clock of rank 0's own start.
    #[must_use]
    pub fn counting_from(mut self, at: Duration) -> Self {
        for (heard, spoke) in self.heard.iter_mut().zip(&self.spoke) {
            if let (Some(heard), false) = (heard.as_mut(), spoke) {
                *heard = (*heard).max(at);
            }
        }
        self.latest = self.latest.max(at);
        self
    }

    /// Whether `rank` was ever heard from: a rank silent since the clock began never reached rank 0.
    pub fn spoke(&self, rank: usize) -> bool {
        self.spoke.get(rank).copied().unwrap_or(false)
    }

    /// A frame (sample or phase change) from `rank` arrived at `at`.
    pub fn heard(&mut self, rank: usize, at: Duration) {
        if let Some(Some(heard)) = self.heard.get_mut(rank) {
            *heard = (*heard).max(at);
        }
        if let Some(spoke) = self.spoke.get_mut(rank) {
            *spoke = true;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn silence_counts_from_the_last_frame_and_a_phase_is_a_frame() {
        let mut live = Liveness::new(2, Duration::from_millis(100), S(60));
        assert_eq!((live.slow_after, live.silent_after), (Duration::from_millis(2500), S(10)));
        for second in 1..=70 {
            // Rank 0's own sampler keeps speaking; rank 1 fell silent at 0.
            live.heard(0, S(second));
        }
        assert_eq!(live.silence(1, S(11)), Some(S(11)));
        assert_eq!(live.silence(1, S(100)), Some(S(70)), "up to the last frame from anyone, never past it");
        live.phase(1, Phase::Verifying, 1 << 30, S(61));
        assert_eq!(live.silence(1, S(61)), Some(Duration::ZERO), "progress counts as heard");
        assert_eq!(live.last_phase(1), Some((Phase::Verifying, 1 << 30)));
        live.closed(1);
        assert_eq!(live.silence(1, S(70)), None, "a closed rank has no silence");
    }

    #[test]
    fn when_rank_0_hears_nobody_nobody_falls_silent() {
        let mut live = Liveness::new(3, Duration::from_millis(100), S(5));
        for rank in 0..3 {
            live.heard(rank, S(1));
        }
        // Rank 0's collector was held up for 30 s: nothing arrived from anyone.
        assert_eq!(live.silence(2, S(31)), Some(Duration::ZERO));
        // Then rank 0 and rank 1 are heard again, rank 2 is not: its silence counts from there on.
        live.heard(0, S(37));
        live.heard(1, S(37));
        assert_eq!(live.silence(2, S(37)), Some(S(36)));
    }

    #[test]
    fn a_rank_not_yet_heard_is_silent_from_when_the_clock_began_not_before() {
        // The world's setup took 8 s; the telemetry round ended then.
        let mut live = Liveness::new(3, Duration::from_millis(100), S(3)).counting_from(S(8));
        assert!((0..3).all(|rank| !live.spoke(rank)));
        live.heard(0, S(9));
        assert_eq!(live.silence(1, S(9)), Some(S(1)), "silent since the round, not since rank 0's start");
        live.heard(1, S(10));
        assert!(live.spoke(1) && !live.spoke(2));
        live.heard(0, S(12));
        assert_eq!(live.silence(2, S(12)), Some(S(4)));
        assert_eq!(live.silence(1, S(12)), Some(S(2)));
        // A rank heard before the round keeps its own time.
        let mut early = Liveness::new(2, Duration::from_millis(100), S(3));
        early.heard(1, S(2));
        let early = early.counting_from(S(5));
        assert_eq!(early.silence(1, S(5)), Some(S(3)));
    }
}
