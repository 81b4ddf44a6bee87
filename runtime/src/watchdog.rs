//! Rank 0's watchdog rule: telemetry doubles as a heartbeat. A rank whose telemetry connection closes before
//! the run is over has died, and is named at once. A rank silent (no sample, no phase change) for longer
//! than `--hang-timeout` has hung or been stopped; one never heard from since the telemetry round (the
//! clock's start, [`Liveness::counting_from`]) never reached rank 0's collector. The rule only decides: rank 0's loop
//! (`rank_zero.rs`) keeps the one liveness clock, asks the rule after every batch and every tick,
//! raises the world's abort with the verdict, and ends the run through its ordinary ending (tables, the
//! JSON `error` and `summary`, the stream's and the recording's end, the results file's status).
//!
//! A rank that fails because another did (an agreement round told it, the launcher's rendezvous closed)
//! says so before it closes (its last phase is [`Phase::Leaving`]): its closing is a consequence, and the
//! watchdog waits up to [`SETTLE`] for the rank whose connection closed without that word, which it names.
//! Many ranks end within milliseconds of one death, and whichever connection rank 0 reads first is
//! chance (a relayed rank's word comes one hop later than a direct one's): only a rank that said nothing
//! is named as the one that died. When no such rank closes within [`SETTLE`], the first leaver is named,
//! saying that it left.
//!
//! The clock ([`Liveness`]) is the watchdog's own. Rank 0's loop tells the consumer (the dashboard) a
//! snapshot of it as it changes ([`Watchdog::snapshot`], sent as [`ConsumerEvent::Liveness`]): a rank
//! shown slow or silent there is the same rank, by the same clock, that may later be named here.
//!
//! [`ConsumerEvent::Liveness`]: efatop_proto::events::ConsumerEvent::Liveness

use std::time::Duration;

use efatop_proto::telemetry::Phase;
use efatop_proto::liveness::Liveness;

use efatop_proto::events::CollectorEvent;

/// The rule, over the clock it judges by.
pub struct Watchdog {
    liveness: Liveness,
    /// The clock moved since the last [`Watchdog::snapshot`].
    moved: bool,
    hosts: Vec<String>,
    /// Set once rank 0's experiment has ended: ranks then close their telemetry as they finish, and
    /// silence means nothing.
    pub run_over: bool,
    /// The first rank whose connection closed after it said it was leaving, and when.
    left: Option<(usize, Duration)>,
}

/// How long, after a rank closed its telemetry saying it was leaving, the watchdog waits for the rank
/// whose failure it followed: that rank's closing reaches rank 0 within milliseconds (a relayed rank's, one
/// relay's urgent forward later). Longer than rank 0's own wait on a lost rendezvous (rank_zero.rs's
/// `EXIT_GRACE`), whose own word (the launcher names the rank that left) then comes first.
pub const SETTLE: Duration = Duration::from_millis(1500);

impl Watchdog {
    pub fn new(liveness: Liveness, hosts: Vec<String>) -> Self {
        Self { liveness, moved: false, hosts, run_over: false, left: None }
    }

    /// The clock as it stands.
    pub fn liveness(&self) -> &Liveness {
        &self.liveness
    }

    /// A copy of the clock when it moved since the last copy taken, for the consumer.
    pub fn snapshot(&mut self) -> Option<Liveness> {
        std::mem::take(&mut self.moved).then(|| self.liveness.clone())
    }

    /// Every rank's telemetry connection has closed (after a run, every rank closes its own).
    pub fn every_rank_closed(&self) -> bool {
        (0..self.liveness.ranks()).all(|rank| self.liveness.silence(rank, Duration::ZERO).is_none())
    }

    fn host(&self, rank: usize) -> &str {
        self.hosts.get(rank).map_or("?", String::as_str)
    }

    /// Moves the clock on with a batch heard `at` after the run started; returns the verdict when a rank's
    /// telemetry connection closed mid-run.
    pub fn heard(&mut self, batch: &[CollectorEvent], at: Duration) -> Option<String> {
        let mut verdict = None;
        self.moved |= !batch.is_empty();
        for telemetry in batch {
            if let Some(rank) = note_telemetry(&mut self.liveness, telemetry, at) {
                if rank == 0 || self.run_over || verdict.is_some() {
                    continue;
                }
                match self.liveness.last_phase(rank) {
                    Some((Phase::Leaving, _)) => {
                        self.left.get_or_insert((rank, at));
                    }
                    // Its part done: the run's end reached it before rank 0's loop heard of its own.
                    Some((Phase::Done, _)) => {}
                    _ => {
                    verdict = Some(format!("rank {rank} ({}) exited mid-run: its telemetry connection closed", self.host(rank)));
                    }
                }
            }
        }
        verdict
    }

    /// The verdict on a rank silent past `--hang-timeout` at `at`, if there is one.
    pub fn judge(&self, at: Duration) -> Option<String> {
        if self.run_over {
            return None;
        }
        if let Some((rank, since)) = self.left.filter(|(_, since)| at.saturating_sub(*since) >= SETTLE) {
            return Some(format!(
                "rank {rank} ({}) left the run: a failure elsewhere reached it, and no rank's telemetry connection closed \
                 without saying it was leaving within {:.1} s",
                self.host(rank),
                at.saturating_sub(since).as_secs_f64()
            ));
        }
        let live = &self.liveness;
        let (rank, silent) = hung(live, at)?;
        if !live.spoke(rank) {
            return Some(format!(
                "rank {rank} ({}) never reached rank 0's collector: no telemetry in the {:.1} s since every rank was told where \
                 it listens, past --hang-timeout {:.0} s (it died, hung or cannot connect)",
                self.host(rank),
                silent.as_secs_f64(),
                live.hang_timeout.as_secs_f64()
            ));
        }
        let doing = live.last_phase(rank).map_or(String::new(), |(phase, bytes)| format!("; it last said: {}", phase.describe(bytes)));
        Some(format!(
            "rank {rank} ({}) stopped responding: no telemetry for {:.1} s, past --hang-timeout {:.0} s (hung or stopped{doing})",
            self.host(rank),
            silent.as_secs_f64(),
            live.hang_timeout.as_secs_f64()
        ))
    }
}

/// The first rank other than rank 0 (whose own hot path is what a verdict would stop) silent for longer than
/// the hang timeout at `at`, with its silence: the rank the watchdog names. A closed rank has no silence.
pub fn hung(live: &Liveness, at: Duration) -> Option<(usize, Duration)> {
    (1..live.ranks()).find_map(|rank| live.silence(rank, at).filter(|silent| *silent > live.hang_timeout).map(|silent| (rank, silent)))
}

/// Moves the liveness clock on with one telemetry event heard `at` after the run started (a sample or a
/// phase change is a sign of life); returns the rank whose telemetry connection closed, if it did. Rank 0
/// and every viewer of a served or recorded run keep their clock this one way.
pub fn note_telemetry(live: &mut Liveness, telemetry: &CollectorEvent, at: Duration) -> Option<usize> {
    match telemetry {
        CollectorEvent::Sample(sample) => live.heard(sample.rank as usize, at),
        // A report of no phase (the hello a sampler sends as it connects, or a phase this build does not
        // know) is a frame all the same.
        CollectorEvent::Phase(report) => match Phase::from_code(report.phase) {
            Some(phase) => live.phase(report.rank as usize, phase, report.bytes, at),
            None => live.heard(report.rank as usize, at),
        },
        CollectorEvent::Closed { rank: Some(rank), .. } => {
            let rank = *rank as usize;
            live.closed(rank);
            return Some(rank);
        }
        CollectorEvent::Closed { rank: None, .. } | CollectorEvent::Malformed { .. } | CollectorEvent::Refused { .. } | CollectorEvent::Node(_) => {}
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use efatop_proto::telemetry::{PhaseReport, RankSample};

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn sample(rank: u32) -> CollectorEvent {
        CollectorEvent::Sample(Box::new(RankSample { rank, ..RankSample::default() }))
    }

    fn closed(rank: u32) -> CollectorEvent {
        CollectorEvent::Closed { from: "127.0.0.1:1".parse().expect("address"), rank: Some(rank) }
    }

    fn dog(hosts: &[&str], hang_timeout: Duration) -> Watchdog {
        let liveness = Liveness::new(hosts.len(), Duration::from_millis(100), hang_timeout);
        Watchdog::new(liveness, hosts.iter().map(|h| (*h).to_string()).collect())
    }

    const fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn a_closed_connection_mid_run_names_the_rank_and_host() {
        let mut dog = dog(&["a", "b", "c"], Duration::from_mins(1));
        assert_eq!(dog.heard(&[sample(2)], ms(10)), None);
        let verdict = dog.heard(&[closed(2)], ms(20));
        assert_eq!(verdict.as_deref(), Some("rank 2 (c) exited mid-run: its telemetry connection closed"));
    }

    fn leaving(rank: u32, changes: u64) -> CollectorEvent {
        CollectorEvent::Phase(PhaseReport { rank, changes, phase: Phase::Leaving.code(), bytes: 0 })
    }

    /// One death ends several ranks within milliseconds, and rank 0 may read a consequence's closing first
    /// (CI once named rank 4, which had lost the rendezvous, for rank 5, killed on a relayed node): a rank that
    /// said it was leaving is not named while the one that said nothing closes within SETTLE, whatever the order.
    #[test]
    fn a_rank_that_said_it_was_leaving_is_not_named_for_the_one_that_died() {
        let mut dog = dog(&["a", "a", "b", "b"], Duration::from_mins(1));
        dog.heard(&[sample(1), sample(2), sample(3)], ms(10));
        assert_eq!(dog.heard(&[leaving(1, 3), closed(1), leaving(2, 5)], ms(100)), None, "rank 1 only left");
        assert_eq!(dog.judge(ms(300)), None, "within SETTLE the watchdog waits for the rank that died");
        assert_eq!(dog.heard(&[closed(2)], ms(350)), None);
        let verdict = dog.heard(&[closed(3)], ms(400));
        assert_eq!(verdict.as_deref(), Some("rank 3 (b) exited mid-run: its telemetry connection closed"));
    }

    /// A rank whose part is done may close before rank 0's loop hears its own hot thread end the run (a
    /// loaded machine): that is the run's end, never a death, now or later.
    #[test]
    fn a_rank_that_said_it_was_done_is_never_named_for_closing() {
        let mut dog = dog(&["a", "b", "c"], Duration::from_mins(1));
        dog.heard(&[sample(1), sample(2)], ms(10));
        let done = CollectorEvent::Phase(PhaseReport { rank: 1, changes: 9, phase: Phase::Done.code(), bytes: 0 });
        assert_eq!(dog.heard(&[done, closed(1)], ms(100)), None);
        assert_eq!(dog.judge(ms(100) + SETTLE * 2), None);
        let verdict = dog.heard(&[closed(2)], ms(200));
        assert_eq!(verdict.as_deref(), Some("rank 2 (c) exited mid-run: its telemetry connection closed"), "one that said nothing still is");
    }

    #[test]
    fn when_only_leavers_close_the_first_is_named_after_settle() {
        let mut dog = dog(&["a", "b", "c"], Duration::from_mins(1));
        dog.heard(&[sample(1), sample(2)], ms(10));
        assert_eq!(dog.heard(&[leaving(2, 1), closed(2)], ms(100)), None);
        assert_eq!(dog.heard(&[leaving(1, 1), closed(1)], ms(120)), None);
        assert_eq!(dog.judge(ms(100) + SETTLE - ms(1)), None);
        let verdict = dog.judge(ms(100) + SETTLE).expect("named once SETTLE has passed");
        assert!(verdict.starts_with("rank 2 (c) left the run: a failure elsewhere reached it"), "{verdict}");
        dog.run_over = true;
        assert_eq!(dog.judge(ms(5_000)), None, "a run that ended names nobody");
    }

    #[test]
    fn a_silent_rank_is_named_after_the_hang_timeout_and_not_before() {
        let mut dog = dog(&["a", "b"], ms(900));
        // Both speak for a while; then only rank 0 (its own sampler) does.
        let mut at = 0;
        for _ in 0..5 {
            at += 150;
            dog.heard(&[sample(1), sample(0)], ms(at));
            assert_eq!(dog.judge(ms(at)), None, "rank 1 spoke every 150 ms");
        }
        let last_heard = at;
        let named = loop {
            at += 100;
            dog.heard(&[sample(0)], ms(at));
            if let Some(verdict) = dog.judge(ms(at)) {
                break verdict;
            }
            assert!(at < 10_000, "never named");
        };
        assert!(at - last_heard >= 900, "named too early: {} ms of silence", at - last_heard);
        assert!(named.starts_with("rank 1 (b) stopped responding: no telemetry for "), "{named}");
        assert!(named.contains("--hang-timeout 1 s"), "{named}");
        assert!(dog.liveness().silence(1, Duration::from_hours(1)).is_some());
    }

    #[test]
    fn progress_reports_keep_a_rank_alive() {
        let mut dog = dog(&["a", "b"], ms(600));
        let mut at = 0;
        for changes in 1..=10 {
            at += 150;
            // Rank 1 sends no samples at all (its sampler's interval is long), only phase changes.
            let report = PhaseReport { rank: 1, changes, phase: Phase::Verifying.code(), bytes: 1 << 30 };
            dog.heard(&[CollectorEvent::Phase(report), sample(0)], ms(at));
            assert_eq!(dog.judge(ms(at)), None);
        }
        let named = loop {
            at += 100;
            dog.heard(&[sample(0)], ms(at));
            if let Some(verdict) = dog.judge(ms(at)) {
                break verdict;
            }
        };
        assert!(named.ends_with("(hung or stopped; it last said: verifying 1G)"), "{named}");
    }

    #[test]
    fn a_snapshot_is_taken_once_per_move_of_the_clock() {
        let mut dog = dog(&["a", "b"], ms(900));
        assert!(dog.snapshot().is_none(), "nothing heard yet");
        dog.heard(&[sample(1)], ms(100));
        dog.heard(&[sample(0)], ms(400));
        let snapshot = dog.snapshot().expect("the clock moved");
        assert_eq!(snapshot.silence(1, ms(1000)), Some(ms(300)), "silent since it was last heard, up to the latest word");
        assert!(dog.snapshot().is_none(), "no move since the last snapshot");
        dog.heard(&[closed(1)], ms(500));
        assert_eq!(dog.snapshot().expect("a rank closed").silence(1, ms(1000)), None);
    }

    #[test]
    fn when_rank_0_hears_nobody_no_rank_is_blamed() {
        // Rank 0's collector is held up (nothing arrives from anyone): nobody is named however long.
        let mut dog = dog(&["a", "b"], ms(300));
        dog.heard(&[sample(0), sample(1)], ms(10));
        assert_eq!(dog.judge(ms(5_000)), None);
    }

    #[test]
    fn after_the_run_ranks_may_close_and_fall_silent() {
        let mut dog = dog(&["a", "b"], ms(300));
        dog.heard(&[sample(0), sample(1)], ms(10));
        dog.run_over = true;
        assert_eq!(dog.heard(&[closed(1)], ms(20)), None);
        assert_eq!(dog.judge(ms(5_000)), None);
    }

    #[test]
    fn a_rank_is_hung_past_the_hang_timeout_and_a_frame_brings_it_back() {
        let mut live = Liveness::new(2, Duration::from_millis(100), S(60));
        for second in 1..=70 {
            // Rank 0's own sampler keeps speaking; rank 1 fell silent at 0.
            live.heard(0, S(second));
        }
        assert_eq!(hung(&live, S(60)), None, "not before the hang timeout");
        assert_eq!(hung(&live, S(61)), Some((1, S(61))));
        live.phase(1, Phase::Verifying, 1 << 30, S(61));
        assert_eq!(hung(&live, S(62)), None, "progress counts as alive");
    }

    #[test]
    fn when_rank_0_hears_nobody_nobody_is_blamed() {
        let mut live = Liveness::new(3, Duration::from_millis(100), S(5));
        for rank in 0..3 {
            live.heard(rank, S(1));
        }
        // Rank 0's collector was held up for 30 s: nothing arrived from anyone.
        assert_eq!(hung(&live, S(31)), None);
        live.heard(0, S(37));
        live.heard(1, S(37));
        assert_eq!(hung(&live, S(37)), Some((2, S(36))));
    }

    #[test]
    fn the_hello_is_a_frame_and_a_rank_never_heard_is_named_as_never_reaching_rank_0() {
        // The world's setup took 5 s: the clock begins when the telemetry round ended.
        let liveness = Liveness::new(3, Duration::from_millis(100), S(1)).counting_from(S(5));
        let mut dog = Watchdog::new(liveness, vec!["a".into(), "b".into(), "c".into()]);
        let hello = |rank| CollectorEvent::Phase(PhaseReport { rank, changes: 0, phase: 0, bytes: 0 });
        // Ranks 0 and 1 connect (their hellos) at once; rank 2 never does.
        dog.heard(&[hello(0), hello(1)], S(5));
        assert_eq!(dog.judge(S(5)), None);
        let mut at = S(5);
        let named = loop {
            at += ms(100);
            dog.heard(&[sample(0), sample(1)], at);
            if let Some(verdict) = dog.judge(at) {
                break verdict;
            }
            assert!(at < S(20), "never named");
        };
        assert!(at > S(6), "named before --hang-timeout had passed since the round: {at:?}");
        assert!(named.starts_with("rank 2 (c) never reached rank 0's collector: no telemetry in the 1."), "{named}");
        assert!(named.contains("--hang-timeout 1 s"), "{named}");
    }

    #[test]
    fn closed_ranks_and_rank_0_are_never_judged_by_silence() {
        let mut live = Liveness::new(2, Duration::from_millis(100), S(5));
        live.heard(1, S(100));
        assert_eq!(hung(&live, S(100)), None, "rank 0 silent for 100 s is not judged");
        live.closed(1);
        live.heard(0, S(200));
        assert_eq!(hung(&live, S(200)), None);
    }
}
