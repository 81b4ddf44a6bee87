//! A benchmark run as rank 0 sees it (`efatop run ... --prometheus ADDR`), for the same endpoint as the
//! monitor's: every rank's telemetry samples folded into per-channel byte totals, the last interval's
//! rates and latency percentiles, and per-rank figures over the rank's channels.
//!
//! Metrics: `efatop_run_channel_bytes_total` (counter), `efatop_run_channel_bytes_per_second`,
//! `efatop_run_channel_latency_p50_seconds` / `_p99_seconds` (gauges, where the interval timed any
//! operation), and the same per rank as `efatop_run_rank_*`; labels `experiment`, `host`, `rank`, and
//! `channel`, `nic` for channels.

use efatop_proto::telemetry::{IntervalHistogram, RankSample};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::prometheus::Exposition;

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

/// What the endpoint of a run serves; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct RunView {
    experiment: String,
    hosts: Vec<String>,
    /// Every rank's channels' NIC names, once known.
    nics: Vec<Vec<String>>,
    ranks: Vec<RankState>,
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
    pub fn new(experiment: &str, hosts: Vec<String>) -> Self {
        Self { experiment: experiment.to_string(), ranks: vec![RankState::default(); hosts.len()], hosts, nics: Vec::new() }
    }

    pub fn set_nics(&mut self, nics: Vec<Vec<String>>) {
        self.nics = nics;
    }

    /// Folds in one interval sample of a rank.
    pub fn ingest(&mut self, sample: &RankSample) {
        let rank = sample.rank as usize;
        if rank >= self.ranks.len() {
            self.ranks.resize(rank + 1, RankState::default());
        }
        let state = &mut self.ranks[rank];
        let seconds = sample.interval_ns as f64 / 1e9;
        let mut merged = IntervalHistogram::default();
        let mut bytes = 0_u64;
        for channel in &sample.channels {
            let index = usize::from(channel.channel);
            if index >= state.channels.len() {
                state.channels.resize(index + 1, ChannelState::default());
            }
            let rates = channel.rates(sample.interval_ns);
            let counted = &mut state.channels[index];
            counted.bytes_total = counted.bytes_total.saturating_add(channel.bytes);
            counted.bytes_per_second = rates.gbps * 1e9 / 8.0;
            counted.p50_s = rates.lat_p50_us.map(|us| us / 1e6);
            counted.p99_s = rates.lat_p99_us.map(|us| us / 1e6);
            merged.merge(&channel.latency);
            bytes = bytes.saturating_add(channel.bytes);
        }
        state.bytes_per_second = if seconds > 0.0 { bytes as f64 / seconds } else { 0.0 };
        state.p50_s = merged.quantile_us(0.50).map(|us| us / 1e6);
        state.p99_s = merged.quantile_us(0.99).map(|us| us / 1e6);
        state.drops = sample.drops;
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
                "bytes the benchmark moved on the channel (sent or received), from the rank's telemetry",
                None,
                ConstCounter::new(0_u64).metric_type(),
            )?;
            for (labels, channel) in &channels {
                ConstCounter::new(channel.bytes_total).encode(metric.encode_family(labels)?)?;
            }
        }
        let series = |pick: &dyn Fn(&ChannelState) -> Option<f64>| -> Vec<(ChannelLabels, f64)> {
            channels.iter().filter_map(|(labels, c)| Some((labels.clone(), pick(c)?))).collect()
        };
        gauges(&mut encoder, "efatop_run_channel_bytes_per_second", "the channel's bytes per second over the last telemetry interval", &series(&|c| Some(c.bytes_per_second)))?;
        gauges(&mut encoder, "efatop_run_channel_latency_p50_seconds", "median operation latency on the channel over the last interval", &series(&|c| c.p50_s))?;
        gauges(&mut encoder, "efatop_run_channel_latency_p99_seconds", "99th percentile operation latency on the channel over the last interval", &series(&|c| c.p99_s))?;
        let ranks = |pick: &dyn Fn(&RankState) -> Option<f64>| -> Vec<(RankLabels, f64)> {
            self.ranks.iter().enumerate().filter_map(|(rank, state)| Some((self.rank_labels(rank), pick(state)?))).collect()
        };
        gauges(&mut encoder, "efatop_run_rank_bytes_per_second", "the rank's bytes per second over its channels, last interval", &ranks(&|r| Some(r.bytes_per_second)))?;
        gauges(&mut encoder, "efatop_run_rank_latency_p50_seconds", "median operation latency over the rank's channels, last interval", &ranks(&|r| r.p50_s))?;
        gauges(&mut encoder, "efatop_run_rank_latency_p99_seconds", "99th percentile latency over the rank's channels, last interval", &ranks(&|r| r.p99_s))?;
        gauges(&mut encoder, "efatop_run_rank_telemetry_drops", "samples the rank dropped because rank 0 did not keep up (so far)", &ranks(&|r| Some(r.drops as f64)))?;
        Ok(())
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
        let mut view = RunView::new("write", vec!["a".into(), "b".into()]);
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
}
