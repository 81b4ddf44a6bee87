//! A benchmark run as rank 0 sees it (`efatop run ... --prometheus ADDR`), for the same endpoint as the
//! monitor's: every rank's telemetry samples folded into per-channel byte totals, the last interval's
//! rates and latency percentiles, and per-rank figures over the rank's channels; once the run is over
//! ([`RunView::end`]), its final figures and how it ended, which the endpoint keeps serving for a while and
//! a Pushgateway is given ([`RunView::final_text`]).
//!
//! Metrics: `efatop_run_channel_bytes_total` (counter), `efatop_run_channel_bytes_per_second`,
//! `efatop_run_channel_latency_p50_seconds` / `_p99_seconds` (gauges, where the interval timed any
//! operation), and the same per rank as `efatop_run_rank_*`; labels `experiment`, `host`, `rank`, and
//! `channel`, `nic` for channels. `efatop_run_state{state="running"|"complete"|"failed"}` is 1 for the
//! run's state and 0 for the others, and `efatop_run_end_timestamp_seconds` says when it ended. An ended
//! run has no last-interval gauges (no interval is going on): its channel totals, its ranks' telemetry
//! drops and its state remain.
//!
//! The view is sized by the run's world (its ranks, and the channels each has: [`RunView::set_world`]),
//! never by a sample: a sample naming a rank, channel or peer outside it is refused whole and counted in
//! `efatop_run_telemetry_refused_samples_total` (before the world is known, every sample is refused).

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use efatop_proto::results::{RunResults, RunState};
use efatop_proto::telemetry::{IntervalHistogram, RankSample, WorldBounds};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::prometheus::{to_text_format, Exposition};

#[derive(Clone, Debug, Default)]
struct ChannelState {
    bytes_total: u64,
    bytes_per_second: f64,
    p50_s: Option<f64>,
    p99_s: Option<f64>,
}

#[derive(Clone, Debug, Default)]
struct RankState {
    channels: Vec<ChannelState>,
    bytes_per_second: f64,
    p50_s: Option<f64>,
    p99_s: Option<f64>,
    drops: u64,
}

/// How the run ended, once it has.
#[derive(Clone, Copy, Debug)]
struct Ended {
    state: RunState,
    unix_s: f64,
}

/// What the endpoint of a run serves; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct RunView {
    experiment: String,
    hosts: Vec<String>,
    /// Every rank's channels' NIC names, once known.
    nics: Vec<Vec<String>>,
    /// One per rank of the world, each with room for the world's channels.
    ranks: Vec<RankState>,
    /// Channels per rank in the world.
    channels: usize,
    /// Samples refused for an index outside the world.
    refused: u64,
    ended: Option<Ended>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    experiment: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    experiment: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RankLabels {
    experiment: String,
    host: String,
    rank: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelLabels {
    experiment: String,
    host: String,
    rank: String,
    channel: String,
    nic: String,
}

impl RunView {
    /// A view of a run of `hosts.len()` ranks (`hosts` by rank) with `channels` channels each; a view that
    /// starts before the world is up has none, until [`RunView::set_world`].
    pub fn new(experiment: &str, hosts: Vec<String>, channels: usize) -> Self {
        let mut view = Self { experiment: experiment.to_string(), ..Self::default() };
        view.set_world(hosts, channels);
        view
    }

    pub fn set_nics(&mut self, nics: Vec<Vec<String>>) {
        self.nics = nics;
    }

    /// The world, once it is up (a view may start before it): every rank's host, by rank, and the channels
    /// each rank has. Samples outside it are refused from then on.
    pub fn set_world(&mut self, hosts: Vec<String>, channels: usize) {
        self.ranks.resize(hosts.len(), RankState::default());
        for rank in &mut self.ranks {
            rank.channels.resize(channels, ChannelState::default());
        }
        self.hosts = hosts;
        self.channels = channels;
    }

    /// The world the view holds: its ranks and channels per rank.
    pub fn world(&self) -> WorldBounds {
        WorldBounds { ranks: self.ranks.len(), channels: self.channels }
    }

    /// Samples refused so far for an index outside the world.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    pub fn experiment(&self) -> &str {
        &self.experiment
    }

    /// Every rank's host, by rank.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// Every channel's bytes so far, by `(rank, channel)`.
    pub fn channel_totals(&self) -> BTreeMap<(usize, usize), u64> {
        self.ranks
            .iter()
            .enumerate()
            .flat_map(|(rank, state)| state.channels.iter().enumerate().map(move |(channel, c)| ((rank, channel), c.bytes_total)))
            .collect()
    }

    /// The run is over, at `at`, as `results` says (its status: complete, else failed; a missing or still
    /// `running` status is taken as failed, since the run is over). Each channel's total is settled from the
    /// results file: the bytes its measured steps record for the channel ([`recorded_channel_bytes`]), which
    /// the ranks agreed on and no dropped telemetry sample can shorten; where that is less than the
    /// telemetry counted (a failed run's unfinished last step moved bytes no measurement holds) or the
    /// results record nothing for the channel, the telemetry's total stays, so the counter never goes back.
    /// NIC labels not known from telemetry come from the results' placements.
    /// Only the world's ranks and channels are settled (a view with no world yet takes the results'); a
    /// figure the results hold for another is left out.
    pub fn end(&mut self, results: &RunResults, at: SystemTime) {
        if self.ranks.is_empty() {
            self.set_world(results.metadata.hosts.clone(), results.metadata.channels);
        }
        for ((rank, channel), bytes) in recorded_channel_bytes(results) {
            let Some(counted) = self.ranks.get_mut(rank).and_then(|state| state.channels.get_mut(channel)) else { continue };
            counted.bytes_total = counted.bytes_total.max(bytes);
        }
        if self.nics.iter().all(Vec::is_empty) {
            self.nics = results.metadata.placements.iter().map(|p| p.nics.clone()).collect();
        }
        if self.hosts.is_empty() {
            self.hosts.clone_from(&results.metadata.hosts);
        }
        let state = match results.status.as_ref().map(|s| s.state) {
            Some(RunState::Complete) => RunState::Complete,
            _ => RunState::Failed,
        };
        let unix_s = at.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        self.ended = Some(Ended { state, unix_s });
    }

    /// What a Pushgateway keeps of an ended run, in the classic text format: each channel's total bytes,
    /// each rank's telemetry drops, the run's state and when it ended (the endpoint's final figures).
    pub fn final_text(&self) -> Result<String, std::fmt::Error> {
        Ok(to_text_format(&self.render()?))
    }

    /// Folds in one interval sample of a rank; false (and counted) when it names a rank, channel or peer
    /// outside the world, which leaves the view as it was.
    pub fn ingest(&mut self, sample: &RankSample) -> bool {
        let world = self.world();
        let Some(state) = self.ranks.get_mut(sample.rank as usize).filter(|_| sample.outside(world).is_none()) else {
            self.refused = self.refused.saturating_add(1);
            return false;
        };
        let mut merged = IntervalHistogram::default();
        let mut bytes = 0_u64;
        for channel in &sample.channels {
            let rates = channel.rates(sample.interval_ns);
            let Some(counted) = state.channels.get_mut(usize::from(channel.channel)) else { continue };
            counted.bytes_total = counted.bytes_total.saturating_add(channel.bytes);
            counted.bytes_per_second = rates.bytes_per_s;
            counted.p50_s = rates.lat_p50_us.map(|us| us / 1e6);
            counted.p99_s = rates.lat_p99_us.map(|us| us / 1e6);
            merged.merge(&channel.latency);
            bytes = bytes.saturating_add(channel.bytes);
        }
        state.bytes_per_second = RankSample::bytes_per_s(bytes, sample.interval_ns);
        state.p50_s = merged.quantile_us(0.50).map(|us| us / 1e6);
        state.p99_s = merged.quantile_us(0.99).map(|us| us / 1e6);
        state.drops = sample.drops;
        true
    }

    fn rank_labels(&self, rank: usize) -> RankLabels {
        RankLabels { experiment: self.experiment.clone(), host: self.hosts.get(rank).cloned().unwrap_or_default(), rank: rank.to_string() }
    }

    fn channel_labels(&self, rank: usize, channel: usize) -> ChannelLabels {
        let RankLabels { experiment, host, rank: rank_text } = self.rank_labels(rank);
        let nic = self.nics.get(rank).and_then(|nics| nics.get(channel)).cloned().unwrap_or_default();
        ChannelLabels { experiment, host, rank: rank_text, channel: channel.to_string(), nic }
    }

    fn channels(&self) -> impl Iterator<Item = (ChannelLabels, &ChannelState)> {
        self.ranks
            .iter()
            .enumerate()
            .flat_map(move |(rank, state)| state.channels.iter().enumerate().map(move |(channel, c)| (self.channel_labels(rank, channel), c)))
    }
}

/// The bytes `results` records per `(rank, channel)`: over its measurements, the application bytes each
/// channel moved in the step (`counters.channels[].app_bytes`: sent plus received, warmup included), which
/// the ranks count with the same probe as their telemetry. Empty for experiments that record no counters.
pub fn recorded_channel_bytes(results: &RunResults) -> BTreeMap<(usize, usize), u64> {
    let mut bytes = BTreeMap::new();
    for channel in results.measurements.iter().filter_map(|m| m.counters.as_ref()).flat_map(|c| &c.channels) {
        let total: &mut u64 = bytes.entry((channel.rank, channel.channel)).or_default();
        *total = total.saturating_add(channel.app_bytes);
    }
    bytes
}

fn gauges<L: EncodeLabelSet>(encoder: &mut DescriptorEncoder, name: &str, help: &str, series: &[(L, f64)]) -> Result<(), std::fmt::Error> {
    if series.is_empty() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, None, ConstGauge::new(0.0_f64).metric_type())?;
    for (labels, value) in series {
        ConstGauge::new(*value).encode(metric.encode_family(labels)?)?;
    }
    Ok(())
}

impl Collector for RunView {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let channels: Vec<(ChannelLabels, &ChannelState)> = self.channels().collect();
        if !channels.is_empty() {
            let mut metric = encoder.encode_descriptor(
                "efatop_run_channel_bytes",
                "bytes the benchmark moved on the channel, sent plus received (the rank's telemetry; at the run's end, the results file's figure)",
                None,
                ConstCounter::new(0_u64).metric_type(),
            )?;
            for (labels, channel) in &channels {
                ConstCounter::new(channel.bytes_total).encode(metric.encode_family(labels)?)?;
            }
        }
        // An ended run has no last interval: its gauges of one are left out.
        let live = self.ended.is_none();
        let series = |pick: &dyn Fn(&ChannelState) -> Option<f64>| -> Vec<(ChannelLabels, f64)> {
            channels.iter().filter(|_| live).filter_map(|(labels, c)| Some((labels.clone(), pick(c)?))).collect()
        };
        gauges(&mut encoder, "efatop_run_channel_bytes_per_second", "the channel's bytes per second over the last telemetry interval", &series(&|c| Some(c.bytes_per_second)))?;
        gauges(&mut encoder, "efatop_run_channel_latency_p50_seconds", "median operation latency on the channel over the last interval", &series(&|c| c.p50_s))?;
        gauges(&mut encoder, "efatop_run_channel_latency_p99_seconds", "99th percentile operation latency on the channel over the last interval", &series(&|c| c.p99_s))?;
        let ranks = |pick: &dyn Fn(&RankState) -> Option<f64>| -> Vec<(RankLabels, f64)> {
            self.ranks.iter().enumerate().filter_map(|(rank, state)| Some((self.rank_labels(rank), pick(state)?))).collect()
        };
        let live_ranks = |pick: &dyn Fn(&RankState) -> Option<f64>| if live { ranks(pick) } else { Vec::new() };
        gauges(&mut encoder, "efatop_run_rank_bytes_per_second", "the rank's bytes per second over its channels, last interval", &live_ranks(&|r| Some(r.bytes_per_second)))?;
        gauges(&mut encoder, "efatop_run_rank_latency_p50_seconds", "median operation latency over the rank's channels, last interval", &live_ranks(&|r| r.p50_s))?;
        gauges(&mut encoder, "efatop_run_rank_latency_p99_seconds", "99th percentile latency over the rank's channels, last interval", &live_ranks(&|r| r.p99_s))?;
        gauges(&mut encoder, "efatop_run_rank_telemetry_drops", "samples the rank dropped because rank 0 did not keep up (so far)", &ranks(&|r| Some(r.drops as f64)))?;
        let mut refused = encoder.encode_descriptor(
            "efatop_run_telemetry_refused_samples",
            "telemetry samples refused because they named a rank, channel or peer outside the run's world",
            None,
            ConstCounter::new(0_u64).metric_type(),
        )?;
        ConstCounter::new(self.refused).encode(refused.encode_family(&RunLabels { experiment: self.experiment.clone() })?)?;
        let current = self.ended.map_or(RunState::Running, |ended| ended.state);
        let states: Vec<(StateLabels, f64)> = [RunState::Running, RunState::Complete, RunState::Failed]
            .into_iter()
            .map(|state| {
                let labels = StateLabels { experiment: self.experiment.clone(), state: state_name(state).into() };
                (labels, if state == current { 1.0 } else { 0.0 })
            })
            .collect();
        gauges(&mut encoder, "efatop_run_state", "1 for the run's state (running, complete: every size measured, failed: ended early), 0 for the others", &states)?;
        let ended: Vec<(RunLabels, f64)> =
            self.ended.iter().map(|ended| (RunLabels { experiment: self.experiment.clone() }, ended.unix_s)).collect();
        gauges(&mut encoder, "efatop_run_end_timestamp_seconds", "when the run ended, in seconds since the Unix epoch", &ended)?;
        Ok(())
    }
}

fn state_name(state: RunState) -> &'static str {
    match state {
        RunState::Running => "running",
        RunState::Complete => "complete",
        RunState::Failed => "failed",
    }
}

impl Exposition for RunView {
    fn render(&self) -> Result<String, std::fmt::Error> {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self.clone()));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry)?;
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use efatop_proto::telemetry::{ChannelSample, Probe, Sampler};
    use std::time::Duration;

    #[test]
    fn samples_become_channel_totals_rates_and_percentiles() {
        let probe = Probe::new(2, 2);
        let mut sampler = Sampler::new(1, &probe);
        probe.completed(0, 0, 1_000_000, Some(Duration::from_micros(100)));
        probe.completed(1, 0, 3_000_000, Some(Duration::from_micros(100)));
        let sample = sampler.sample(&probe, Duration::from_millis(100), 2);
        let mut view = RunView::new("write", vec!["a".into(), "b".into()], 2);
        view.set_nics(vec![vec![], vec!["efa0".into(), "efa1".into()]]);
        view.ingest(&sample);
        view.ingest(&RankSample { rank: 1, interval_ns: 100_000_000, channels: vec![ChannelSample { channel: 0, bytes: 500, ..ChannelSample::default() }], ..RankSample::default() });
        let text = view.render().unwrap();
        let labels = r#"experiment="write",host="b",rank="1",channel="0",nic="efa0""#;
        assert!(text.contains(&format!("efatop_run_channel_bytes_total{{{labels}}} 1000500\n")), "{text}");
        assert!(text.contains(&format!("efatop_run_channel_bytes_per_second{{{labels}}} 5000.0\n")), "{text}");
        assert!(text.contains(r#"efatop_run_channel_bytes_total{experiment="write",host="b",rank="1",channel="1",nic="efa1"} 3000000"#), "{text}");
        assert!(text.contains(r#"efatop_run_channel_latency_p50_seconds{experiment="write",host="b",rank="1",channel="1",nic="efa1"}"#), "{text}");
        assert!(!text.contains(&format!("efatop_run_channel_latency_p50_seconds{{{labels}}}")), "an interval that timed nothing has no percentile: {text}");
        assert!(text.contains(r#"efatop_run_rank_telemetry_drops{experiment="write",host="b",rank="1"} 0.0"#), "{text}");
    }

    fn measured(channels: &[(usize, usize, u64)]) -> efatop_proto::results::Measurement {
        use efatop_proto::counters::{ChannelCounters, CounterSource, StepCounters};
        use efatop_proto::results::{LatencySummary, Measurement};
        let channels = channels
            .iter()
            .map(|&(rank, channel, app_bytes)| ChannelCounters {
                rank,
                channel,
                nic: None,
                source: CounterSource::None { why: "shm".into() },
                app_bytes,
                nic_bytes: None,
                counter: None,
                ratio: None,
                deltas: BTreeMap::new(),
            })
            .collect();
        Measurement {
            config: efatop_proto::column::Column::write(efatop_proto::column::Layout::Single, efatop_proto::column::Memory::Host),
            size: 4096,
            count: 1024,
            gbps: 1.0,
            busbw_percent: None,
            nccl_busbw_gbps: None,
            latency: LatencySummary { mean_us: 1.0, p50_us: 1.0, p99_us: 1.0, max_us: 1.0 },
            iterations: 1,
            pairs: Vec::new(),
            verified: true,
            registration: None,
            counters: Some(StepCounters { channels, ..StepCounters::default() }),
            telemetry_ab: None,
            expected: None,
        }
    }

    #[test]
    fn an_ended_run_settles_its_totals_from_the_results_and_says_how_it_ended() {
        use efatop_proto::results::{RankPlacement, RunStatus};
        let mut view = RunView::new("write", vec!["a".into(), "b".into()], 2);
        // Telemetry saw 700 bytes of rank 0's channel 0 (a sample was dropped) and 900 of rank 1's (its
        // unfinished last step counts too); nothing yet of rank 1's channel 1.
        for (rank, bytes) in [(0, 700), (1, 900)] {
            assert!(view.ingest(&RankSample { rank, interval_ns: 1, channels: vec![ChannelSample { channel: 0, bytes, ..ChannelSample::default() }], ..RankSample::default() }));
        }
        let mut results = RunResults {
            measurements: vec![measured(&[(0, 0, 500), (1, 0, 500)]), measured(&[(0, 0, 300), (1, 0, 300), (1, 1, 40)])],
            status: Some(RunStatus { state: RunState::Failed, reason: Some("rank 1 stopped responding".into()) }),
            ..RunResults::default()
        };
        results.metadata.placements = ["a", "b"].iter().enumerate().map(|(rank, host)| RankPlacement { rank, host: (*host).into(), nics: vec!["shm".into(), "shm".into()], ..RankPlacement::default() }).collect();
        assert_eq!(recorded_channel_bytes(&results), BTreeMap::from([((0, 0), 800), ((1, 0), 800), ((1, 1), 40)]));
        let live = view.render().unwrap();
        assert!(live.contains(r#"efatop_run_state{experiment="write",state="running"} 1.0"#), "{live}");
        assert!(live.contains("efatop_run_channel_bytes_per_second{"), "{live}");
        assert!(!live.contains("efatop_run_end_timestamp_seconds{"), "{live}");

        view.end(&results, UNIX_EPOCH + std::time::Duration::from_hours(500_000));
        // Every channel of the world has its series, rank 0's channel 1 that moved nothing too.
        assert_eq!(view.channel_totals(), BTreeMap::from([((0, 0), 800), ((0, 1), 0), ((1, 0), 900), ((1, 1), 40)]), "the larger of the two, per channel");
        let text = view.final_text().unwrap();
        for line in [
            "# TYPE efatop_run_channel_bytes_total counter",
            r#"efatop_run_channel_bytes_total{experiment="write",host="a",rank="0",channel="0",nic="shm"} 800"#,
            r#"efatop_run_channel_bytes_total{experiment="write",host="b",rank="1",channel="1",nic="shm"} 40"#,
            r#"efatop_run_state{experiment="write",state="running"} 0.0"#,
            r#"efatop_run_state{experiment="write",state="failed"} 1.0"#,
            r#"efatop_run_end_timestamp_seconds{experiment="write"} 1800000000.0"#,
            r#"efatop_run_rank_telemetry_drops{experiment="write",host="b",rank="1"} 0.0"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from\n{text}");
        }
        assert!(!text.contains("per_second") && !text.contains("latency"), "no last interval once ended: {text}");
        assert!(!text.contains("# EOF"), "{text}");
        // A run that ended with no status, or still `running`, is over all the same: failed.
        results.status = None;
        view.end(&results, UNIX_EPOCH);
        assert!(view.final_text().unwrap().contains(r#"efatop_run_state{experiment="write",state="failed"} 1.0"#));
        results.status = Some(RunStatus { state: RunState::Complete, reason: None });
        view.end(&results, UNIX_EPOCH);
        assert!(view.final_text().unwrap().contains(r#"efatop_run_state{experiment="write",state="complete"} 1.0"#));
    }

    /// One sample claiming rank `u32::MAX` once made rank 0 size its table by it (hundreds of GB): a
    /// sample naming a rank, channel or peer outside the world is refused whole, counted, and the view
    /// holds what it held.
    #[test]
    fn samples_outside_the_world_are_refused_and_counted_and_grow_nothing() {
        use efatop_proto::telemetry::PeerSample;
        let mut view = RunView::new("write", Vec::new(), 0);
        let one = |rank: u32, channel: u16, peer: u32| RankSample {
            rank,
            interval_ns: 1,
            channels: vec![ChannelSample { channel, bytes: 7, ..ChannelSample::default() }],
            peers: vec![PeerSample { peer, bytes: 1, ..PeerSample::default() }],
            ..RankSample::default()
        };
        assert!(!view.ingest(&one(0, 0, 0)), "no world yet: nothing can be placed");
        view.set_world(vec!["a".into(), "b".into()], 2);
        let before = view.channel_totals();
        assert_eq!(before.len(), 4, "the world's 2 ranks x 2 channels: {before:?}");
        for forged in [one(u32::MAX, 0, 0), one(2, 0, 0), one(1, 2, 0), one(1, u16::MAX, 0), one(0, 0, 2), one(0, 0, u32::MAX)] {
            assert!(!view.ingest(&forged), "{forged:?}");
        }
        assert_eq!(view.refused(), 7);
        assert_eq!(view.channel_totals(), before, "nothing grew, nothing was counted");
        assert_eq!(view.world(), WorldBounds { ranks: 2, channels: 2 });
        assert!(view.ingest(&one(1, 1, 0)));
        assert_eq!(view.channel_totals()[&(1, 1)], 7);
        let text = view.render().unwrap();
        assert!(text.contains(r#"efatop_run_telemetry_refused_samples_total{experiment="write"} 7"#), "{text}");
        assert!(!text.contains("rank=\"2\"") && !text.contains("channel=\"2\""), "{text}");
        // The results cannot grow it either.
        let results = RunResults { measurements: vec![measured(&[(5, 0, 1), (0, 9, 1), (0, 1, 3)])], ..RunResults::default() };
        view.end(&results, UNIX_EPOCH);
        assert_eq!(view.channel_totals().len(), 4);
        assert_eq!(view.channel_totals()[&(0, 1)], 3);
    }
}
