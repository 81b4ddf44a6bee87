//! Every `--json` line of every command, as one type: [`Line`], a message tagged by its `type` with its
//! `data` beside it (`{"type":"verdict","data":{...}}`). The printers build a [`Line`] and write it; the
//! readers (`check --traffic`, `sweep --format`, the tests) parse one back. Nothing else in the workspace
//! spells the envelope.
//!
//! The lines keep the exact bytes they had before they were typed (golden tests below pin each kind),
//! and those came in three layouts:
//! - a run's lines (`run`, `sample`, `pair`, `step`, `result`, `warning`, `pair_matrix`, `note`, `error`,
//!   `dropped`, `node`, `sweep`, `sweep_round`, `summary`) and `efatop queue`'s: `{"data":…,"type":…}`,
//!   every object's keys in sorted order (they were built as `serde_json::Value`s, which sort);
//! - a sweep's `verdict`, `efatop check`'s `check` and `efatop topo`'s `topology`: `{"type":…,"data":…}`,
//!   the data's fields in the order its type declares them;
//! - the monitor's `snapshot`: `{"type":"snapshot","rank":…,"data":…}`, `rank` only when several nodes
//!   are shown;
//! - `efatop watch`'s lines ([`WatchLine`]: `rank`, `coll`, `peer`, `nics`, `hang`, `hang_over`, `gone`,
//!   `health`): `{"type":…,"data":…}`, the data's fields in the order its variant declares them. (Until
//!   they were typed here they were `{"line":"coll",…}`, flat; docs/output.md says so.)
//!
//! A reader takes the keys in any order. `check`'s data is the health crate's report and `topology`'s the
//! topology crate's, which this leaf crate cannot name: they are the type parameters `C` and `T` (each a
//! `serde_json::Value` unless the reader names it).
//!
//! `topology` is the one line whose shape changed when it was typed: `efatop topo --json` printed its
//! document indented over many lines, with no envelope; its data now starts with `schema_version`
//! ([`TOPOLOGY_SCHEMA`]), and a document without one is that first shape (docs/output.md).

use serde::de::{self, DeserializeOwned};
use serde::ser::{self, SerializeMap};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::column::Column;
use crate::counters::CounterWarning;
use crate::nccl::{WatchLine, WATCH_KINDS};
use crate::results::{Measurement, PairMatrix, QueueRow, RunMetadata, RunResults};
use crate::sweep::{SweepResults, SweepRound, Verdict};
use crate::telemetry::NodeSample;

/// One `--json` line; see the module docs for its layouts.
#[derive(Clone, Debug, PartialEq)]
pub enum Line<C = Value, T = Value> {
    /// A run's first line: its metadata.
    Run(Box<RunMetadata>),
    /// The columns a run measures, and its memory.
    Begin(Begin),
    /// A step started.
    Step(Step),
    /// One rank's channel over one telemetry interval.
    Sample(Sample),
    /// All-to-all: what one sender landed on one receiver over one interval.
    Pair(Pair),
    /// A step's measurement.
    Result(Box<Measurement>),
    Warning(Warning),
    PairMatrix(Box<PairMatrix>),
    Note(Text),
    /// What ended the run, when it did not end well.
    Error(Text),
    /// Telemetry the printer dropped because it fell behind the run.
    Dropped(Dropped),
    /// A run too large for a `sample` line per channel: one host's rail over one interval ([`RailLines`]).
    Rail(Rail),
    /// A node's read, in a served or recorded `efatop monitor`.
    Node(Box<NodeSample>),
    /// Sweep: its settings and every rank's host and NICs.
    Sweep(Box<SweepResults>),
    SweepRound(Box<SweepRound>),
    /// A run's last line (before a sweep's verdict): its results.
    Summary(Box<RunResults>),
    /// A sweep's last line.
    Verdict(Box<Verdict>),
    /// `efatop monitor --json`: one node's read; `rank` when several nodes are shown.
    Snapshot { rank: Option<u32>, data: Box<NodeSample> },
    /// `efatop check --json`: the node's report.
    Check(Box<C>),
    /// `efatop queue --json`: one shape's row.
    Queue(QueueRow),
    /// `efatop watch --json`: one of its lines; its `type` is the [`WatchLine`]'s.
    Watch(Box<WatchLine>),
    /// `efatop topo --json`: the node's topology, and the placements asked for.
    Topology(Box<T>),
}

/// The `schema_version` a `topology` line's data starts with: 2, the first with the line's envelope (the
/// indented document before it had none, and reads as version 1).
pub const TOPOLOGY_SCHEMA: u32 = 2;

/// Every `type` a line may have, but `efatop watch`'s ([`WATCH_KINDS`]).
pub const KINDS: &[&str] = &[
    "run", "begin", "step", "sample", "pair", "result", "warning", "pair_matrix", "note", "error", "dropped", "rail", "node", "sweep", "sweep_round", "summary",
    "verdict", "snapshot", "check", "queue", "topology",
];

/// `begin`'s data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Begin {
    pub configs: Vec<Column>,
    pub memory: String,
}

/// `step`'s data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub config: Column,
    pub size: u64,
}

/// `note`'s and `error`'s data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Text {
    pub text: String,
}

/// `warning`'s data: the sentence, and the counters' warning it came from when it came from one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Warning {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<CounterWarning>,
    pub text: String,
}

/// `dropped`'s data (fields in sorted order, as the line has them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dropped {
    pub reason: String,
    pub samples: u64,
    pub t_ms: f64,
    pub total: u64,
}

/// `rail`'s data: the channels of one rail (channel `rail` of every rank) on one host, over one interval of
/// rank 0's clock ending at `t_ms` (fields in sorted order, as the line has them). A run with more
/// channels than [`RAIL_LINES_ABOVE`] prints these instead of a `sample` line per channel (unless asked for
/// every sample): a 4096-host run's 1.3 million channel samples a second become 164 thousand lines.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rail {
    /// Bytes the rail's channels on this host completed in the interval (as the `sample` lines' `bytes`).
    pub bytes: u64,
    /// Channel samples folded in: a rank sends one a channel an interval (two when its interval straddles
    /// two of rank 0's, then none in the next).
    pub channels: u32,
    /// What the host's rail carried over the interval: `bytes` over `interval_ms` (Gbps).
    pub gbps: f64,
    /// The fastest and the slowest channel sample's own rate (Gbps; null when none had one), and the rank
    /// that sent the slowest.
    pub gbps_max: Option<f64>,
    pub gbps_min: Option<f64>,
    pub host: String,
    pub interval_ms: f64,
    pub ops: u64,
    pub rail: u16,
    pub slowest_rank: u32,
    pub t_ms: f64,
}

/// More channels (ranks × channels a rank) than this and `--json` prints `rail` lines, not a `sample`
/// line per channel: 1024 p5 hosts × 8 ranks × 4 channels at 10 Hz (327,680 lines a second) is what a
/// `sample` line per channel keeps up with on one core.
pub const RAIL_LINES_ABOVE: usize = 1024 * 8 * 4;

/// Folds channel samples into [`Rail`] lines: per host and rail, per interval of rank 0's clock. O(1) a
/// channel sample; O(hosts × rails) an interval, for the hosts heard from.
#[derive(Clone, Debug)]
pub struct RailLines {
    /// Each rank's host (an index into `hosts`).
    host_of: Vec<u32>,
    hosts: Vec<String>,
    rails: usize,
    interval_ms: f64,
    /// The interval being folded: it ends at this time (ms of rank 0's clock).
    ends_ms: f64,
    /// Per host and rail (host × rails + rail).
    open: Vec<RailFold>,
    /// What was folded in the interval, in the order first heard.
    touched: Vec<u32>,
}

#[derive(Clone, Copy, Debug, Default)]
struct RailFold {
    bytes: u64,
    ops: u64,
    channels: u32,
    gbps_min: f64,
    gbps_max: f64,
    slowest_rank: u32,
}

impl RailLines {
    /// For a run whose rank `r` runs on `hosts[r]`, with `channels` channels a rank, at `interval`.
    pub fn new(hosts: &[String], channels: usize, interval: std::time::Duration) -> Self {
        let mut names: Vec<String> = Vec::new();
        let mut index: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
        let host_of = hosts
            .iter()
            .map(|host| {
                *index.entry(host.as_str()).or_insert_with(|| {
                    names.push(host.clone());
                    (names.len() - 1) as u32
                })
            })
            .collect();
        let rails = channels.max(1);
        let interval_ms = (interval.as_secs_f64() * 1000.0).max(1.0);
        Self { host_of, open: vec![RailFold::default(); names.len() * rails], hosts: names, rails, interval_ms, ends_ms: 0.0, touched: Vec::new() }
    }

    /// Folds one rank's sample, at rank 0's `t_ms`; the interval that ended before it comes out first,
    /// through `done`. A rank or channel beyond the run's is left out.
    pub fn add(&mut self, t_ms: f64, sample: &crate::telemetry::RankSample, mut done: impl FnMut(Rail)) {
        self.close_before(t_ms, &mut done);
        let Some(&host) = self.host_of.get(sample.rank as usize) else { return };
        for channel in &sample.channels {
            let gbps = crate::telemetry::RankSample::gbps(channel.bytes, sample.interval_ns);
            self.fold(host, sample.rank, usize::from(channel.channel), channel.bytes, channel.ops, gbps);
        }
    }

    fn fold(&mut self, host: u32, rank: u32, rail: usize, bytes: u64, ops: u64, gbps: f64) {
        if rail >= self.rails {
            return;
        }
        let at = host as usize * self.rails + rail;
        let fold = &mut self.open[at];
        if fold.channels == 0 {
            self.touched.push(at as u32);
            *fold = RailFold { gbps_min: f64::INFINITY, gbps_max: f64::NEG_INFINITY, ..RailFold::default() };
        }
        fold.bytes += bytes;
        fold.ops += ops;
        fold.channels += 1;
        if gbps.is_finite() {
            if gbps < fold.gbps_min {
                fold.gbps_min = gbps;
                fold.slowest_rank = rank;
            }
            fold.gbps_max = fold.gbps_max.max(gbps);
        }
    }

    /// The interval open at `t_ms` closes if it ended before: its lines, through `done`.
    pub fn close_before(&mut self, t_ms: f64, done: &mut impl FnMut(Rail)) {
        if t_ms < self.ends_ms {
            return;
        }
        if !self.touched.is_empty() {
            self.flush(done);
        }
        // The next interval: the one `t_ms` falls in, on the interval's grid.
        self.ends_ms = ((t_ms / self.interval_ms).floor() + 1.0) * self.interval_ms;
    }

    /// Every rail folded so far, as lines (the run's end).
    pub fn flush(&mut self, done: &mut impl FnMut(Rail)) {
        let t_ms = self.ends_ms;
        for at in self.touched.drain(..) {
            let fold = std::mem::take(&mut self.open[at as usize]);
            let (host, rail) = (at as usize / self.rails, at as usize % self.rails);
            let known = fold.gbps_min.is_finite();
            done(Rail {
                bytes: fold.bytes,
                channels: fold.channels,
                gbps: fold.bytes as f64 * 8.0 / (self.interval_ms * 1e6),
                gbps_max: known.then_some(fold.gbps_max),
                gbps_min: known.then_some(fold.gbps_min),
                host: self.hosts[host].clone(),
                interval_ms: self.interval_ms,
                ops: fold.ops,
                rail: rail as u16,
                slowest_rank: fold.slowest_rank,
                t_ms,
            });
        }
    }
}

/// `pair`'s data (fields in sorted order, as the line has them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pair {
    pub bytes: u64,
    pub gbps: f64,
    pub landings: u64,
    pub lat_p50_us: Option<f64>,
    pub lat_p99_us: Option<f64>,
    pub receiver: u32,
    pub sender: u32,
    pub t_ms: f64,
}

/// `sample`'s data: one rank's channel over one interval. A rank's GPU figures (`queue`, `nvlink`) ride
/// on its first line only; a rank with GPU figures and no channel gets one line with a null `channel`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    pub t_ms: f64,
    pub rank: u32,
    pub seq: u64,
    pub interval_ms: f64,
    pub drops: u64,
    /// `None`: the line only carries the rank's GPU figures.
    pub channel: Option<ChannelFigures>,
    pub queue: Option<QueueFigures>,
    pub nvlink: Option<Vec<NvlinkFigures>>,
}

/// A channel's figures in a `sample` line.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ChannelFigures {
    pub channel: u16,
    pub bytes: u64,
    pub gbps: f64,
    pub ops: u64,
    pub in_flight: u32,
    pub lat_p50_us: Option<f64>,
    pub lat_p99_us: Option<f64>,
    pub lat_max_us: Option<f64>,
}

/// The proxy's request queue in a `sample` line (fields in sorted order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueFigures {
    pub capacity: u64,
    pub depth: u64,
    pub held: u64,
    pub quiet_calls: u64,
    pub quiet_calls_per_s: f64,
    pub requests: u64,
    pub requests_per_s: f64,
}

/// What a rank's GPU wrote into a peer's GPU, in a `sample` line (fields in sorted order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NvlinkFigures {
    pub bytes: u64,
    pub gbytes_per_s: f64,
    pub gpu: u32,
    pub peak_gbytes_per_s: Option<f64>,
    pub peer: u32,
    pub peer_gpu: u32,
}

impl Serialize for Sample {
    /// The keys in sorted order, as the line has always had them; a channel's figures only when it has a
    /// channel, `queue` and `nvlink` only when present.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        let figures = self.channel.as_ref();
        if let Some(figures) = figures {
            map.serialize_entry("bytes", &figures.bytes)?;
        }
        map.serialize_entry("channel", &figures.map(|f| f.channel))?;
        map.serialize_entry("drops", &self.drops)?;
        if let Some(figures) = figures {
            map.serialize_entry("gbps", &figures.gbps)?;
            map.serialize_entry("in_flight", &figures.in_flight)?;
        }
        map.serialize_entry("interval_ms", &self.interval_ms)?;
        if let Some(figures) = figures {
            map.serialize_entry("lat_max_us", &figures.lat_max_us)?;
            map.serialize_entry("lat_p50_us", &figures.lat_p50_us)?;
            map.serialize_entry("lat_p99_us", &figures.lat_p99_us)?;
        }
        if let Some(nvlink) = &self.nvlink {
            map.serialize_entry("nvlink", nvlink)?;
        }
        if let Some(figures) = figures {
            map.serialize_entry("ops", &figures.ops)?;
        }
        if let Some(queue) = &self.queue {
            map.serialize_entry("queue", queue)?;
        }
        map.serialize_entry("rank", &self.rank)?;
        map.serialize_entry("seq", &self.seq)?;
        map.serialize_entry("t_ms", &self.t_ms)?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for Sample {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            t_ms: f64,
            rank: u32,
            seq: u64,
            interval_ms: f64,
            drops: u64,
            channel: Option<u16>,
            #[serde(default)]
            bytes: u64,
            // A rate that was not a number (NaN) was written as null.
            #[serde(default)]
            gbps: Option<f64>,
            #[serde(default)]
            ops: u64,
            #[serde(default)]
            in_flight: u32,
            #[serde(default)]
            lat_p50_us: Option<f64>,
            #[serde(default)]
            lat_p99_us: Option<f64>,
            #[serde(default)]
            lat_max_us: Option<f64>,
            #[serde(default)]
            queue: Option<QueueFigures>,
            #[serde(default)]
            nvlink: Option<Vec<NvlinkFigures>>,
        }
        let raw = Raw::deserialize(deserializer)?;
        Ok(Self {
            t_ms: raw.t_ms,
            rank: raw.rank,
            seq: raw.seq,
            interval_ms: raw.interval_ms,
            drops: raw.drops,
            channel: raw.channel.map(|channel| ChannelFigures {
                channel,
                bytes: raw.bytes,
                gbps: raw.gbps.unwrap_or(f64::NAN),
                ops: raw.ops,
                in_flight: raw.in_flight,
                lat_p50_us: raw.lat_p50_us,
                lat_p99_us: raw.lat_p99_us,
                lat_max_us: raw.lat_max_us,
            }),
            queue: raw.queue,
            nvlink: raw.nvlink,
        })
    }
}

impl<C, T> Line<C, T> {
    /// The line's `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Run(_) => "run",
            Self::Begin(_) => "begin",
            Self::Step(_) => "step",
            Self::Sample(_) => "sample",
            Self::Pair(_) => "pair",
            Self::Result(_) => "result",
            Self::Warning(_) => "warning",
            Self::PairMatrix(_) => "pair_matrix",
            Self::Note(_) => "note",
            Self::Error(_) => "error",
            Self::Dropped(_) => "dropped",
            Self::Rail(_) => "rail",
            Self::Node(_) => "node",
            Self::Sweep(_) => "sweep",
            Self::SweepRound(_) => "sweep_round",
            Self::Summary(_) => "summary",
            Self::Verdict(_) => "verdict",
            Self::Snapshot { .. } => "snapshot",
            Self::Check(_) => "check",
            Self::Queue(_) => "queue",
            Self::Watch(line) => line.kind(),
            Self::Topology(_) => "topology",
        }
    }

    /// A `note` line.
    pub fn note(text: impl Into<String>) -> Self {
        Self::Note(Text { text: text.into() })
    }

    /// An `error` line.
    pub fn error(text: impl Into<String>) -> Self {
        Self::Error(Text { text: text.into() })
    }

    /// A `warning` line with no counters behind it.
    pub fn warning(text: impl Into<String>) -> Self {
        Self::Warning(Warning { counters: None, text: text.into() })
    }
}

impl<C: Serialize, T: Serialize> Line<C, T> {
    /// Appends the line and its newline to `out`.
    pub fn write_to(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        serde_json::to_writer(&mut *out, self)?;
        out.push(b'\n');
        Ok(())
    }

    /// The line, without its newline.
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string(self)
    }
}

impl<C: DeserializeOwned, T: DeserializeOwned> Line<C, T> {
    /// Reads one line back.
    pub fn parse(line: &str) -> serde_json::Result<Self> {
        serde_json::from_str(line)
    }
}

/// Data serialized as a `serde_json::Value` would be: every object's keys sorted, at every depth.
struct Sorted<'a, T>(&'a T);

impl<T: Serialize> Serialize for Sorted<'_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serde_json::to_value(self.0).map_err(ser::Error::custom)?.serialize(serializer)
    }
}

fn data_first<S: Serializer>(serializer: S, kind: &str, data: &impl Serialize) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(2))?;
    map.serialize_entry("data", data)?;
    map.serialize_entry("type", kind)?;
    map.end()
}

fn type_first<S: Serializer>(serializer: S, kind: &str, rank: Option<u32>, data: &impl Serialize) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(None)?;
    map.serialize_entry("type", kind)?;
    if let Some(rank) = rank {
        map.serialize_entry("rank", &rank)?;
    }
    map.serialize_entry("data", data)?;
    map.end()
}

impl<C: Serialize, T: Serialize> Serialize for Line<C, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let kind = self.kind();
        match self {
            Self::Verdict(verdict) => type_first(serializer, kind, None, verdict),
            Self::Check(report) => type_first(serializer, kind, None, report),
            Self::Topology(topology) => type_first(serializer, kind, None, topology),
            Self::Snapshot { rank, data } => type_first(serializer, kind, *rank, data),
            // Written field by field, in sorted order: the lines a large run prints most.
            Self::Sample(sample) => data_first(serializer, kind, sample),
            Self::Pair(pair) => data_first(serializer, kind, pair),
            Self::Rail(rail) => data_first(serializer, kind, rail),
            Self::Run(data) => data_first(serializer, kind, &Sorted(data)),
            Self::Begin(data) => data_first(serializer, kind, &Sorted(data)),
            Self::Step(data) => data_first(serializer, kind, &Sorted(data)),
            Self::Result(data) => data_first(serializer, kind, &Sorted(data)),
            Self::Warning(data) => data_first(serializer, kind, &Sorted(data)),
            Self::PairMatrix(data) => data_first(serializer, kind, &Sorted(data)),
            Self::Note(data) | Self::Error(data) => data_first(serializer, kind, &Sorted(data)),
            Self::Dropped(data) => data_first(serializer, kind, &Sorted(data)),
            Self::Node(data) => data_first(serializer, kind, &Sorted(data)),
            Self::Sweep(data) => data_first(serializer, kind, &Sorted(data)),
            Self::SweepRound(data) => data_first(serializer, kind, &Sorted(data)),
            Self::Summary(data) => data_first(serializer, kind, &Sorted(data)),
            Self::Queue(data) => data_first(serializer, kind, &Sorted(data)),
            // Adjacently tagged: `{"type":…,"data":…}`.
            Self::Watch(line) => line.serialize(serializer),
        }
    }
}

/// A line's envelope read and its data left as JSON: for a reader of lines another version wrote, whose
/// data may not read as this version's types (and the first step of reading a [`Line`]).
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Untyped {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub rank: Option<u32>,
    #[serde(default)]
    pub data: Value,
}

impl<'de, C: DeserializeOwned, T: DeserializeOwned> Deserialize<'de> for Line<C, T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        fn data<T: DeserializeOwned, E: de::Error>(data: Value) -> Result<T, E> {
            serde_json::from_value(data).map_err(E::custom)
        }
        let Untyped { kind, rank, data: value } = Untyped::deserialize(deserializer)?;
        Ok(match kind.as_str() {
            "run" => Self::Run(data(value)?),
            "begin" => Self::Begin(data(value)?),
            "step" => Self::Step(data(value)?),
            "sample" => Self::Sample(data(value)?),
            "pair" => Self::Pair(data(value)?),
            "result" => Self::Result(data(value)?),
            "warning" => Self::Warning(data(value)?),
            "pair_matrix" => Self::PairMatrix(data(value)?),
            "note" => Self::Note(data(value)?),
            "error" => Self::Error(data(value)?),
            "dropped" => Self::Dropped(data(value)?),
            "rail" => Self::Rail(data(value)?),
            "node" => Self::Node(data(value)?),
            "sweep" => Self::Sweep(data(value)?),
            "sweep_round" => Self::SweepRound(data(value)?),
            "summary" => Self::Summary(data(value)?),
            "verdict" => Self::Verdict(data(value)?),
            "snapshot" => Self::Snapshot { rank, data: data(value)? },
            "check" => Self::Check(data(value)?),
            "queue" => Self::Queue(data(value)?),
            "topology" => Self::Topology(data(value)?),
            watch if WATCH_KINDS.contains(&watch) => Self::Watch(data(serde_json::json!({ "type": watch, "data": value }))?),
            other => return Err(de::Error::unknown_variant(other, KINDS)),
        })
    }
}

#[cfg(test)]
mod tests {
    //! Golden lines: each kind's bytes as the printers wrote them before the lines were typed. A change
    //! here changes what every `--json` reader sees.

    use super::*;
    use crate::sweep::{Checked, Verdict};

    fn golden<C, T>(line: &Line<C, T>, expected: &str)
    where
        C: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
        T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let written = line.to_json().expect("serializes");
        assert_eq!(written, expected, "{}", line.kind());
        let back: Line<C, T> = Line::parse(&written).expect("parses back");
        assert_eq!(back.kind(), line.kind());
        assert_eq!(back.to_json().expect("serializes"), expected, "{} round trip", line.kind());
    }

    #[test]
    fn watch_lines() {
        use crate::nccl::{Func, HangWhy, NicVerdict, NicWindow, Timing};
        let coll = WatchLine::Coll {
            comm: "d055e1ef875a2e15".into(),
            func: Func::AllReduce,
            size: 1 << 20,
            datatype: "ncclFloat32".into(),
            algo: "RING".into(),
            proto: "SIMPLE".into(),
            ranks: 2,
            nranks: 2,
            ops: 12,
            timing: Timing::Gpu,
            time_us: Some(250.0),
            algbw_gbps: Some(4.194304),
            busbw_gbps: Some(4.194304),
            user_tag: 7,
            variant: String::new(),
            wait_us: Some(20.5),
            work_us: Some(229.5),
        };
        golden::<Value, Value>(
            &Line::Watch(Box::new(coll)),
            r#"{"type":"coll","data":{"comm":"d055e1ef875a2e15","func":"all_reduce","size":1048576,"datatype":"ncclFloat32","algo":"RING","proto":"SIMPLE","ranks":2,"nranks":2,"ops":12,"timing":"gpu","time_us":250.0,"algbw_gbps":4.194304,"busbw_gbps":4.194304,"user_tag":7,"variant":"","wait_us":20.5,"work_us":229.5}}"#,
        );
        let untimed = WatchLine::Coll { comm: "c".into(), func: Func::AlltoAll, size: 1 << 20, datatype: "ncclFloat32".into(), algo: String::new(), proto: String::new(), ranks: 1, nranks: 1, ops: 25, timing: Timing::None, time_us: None, algbw_gbps: None, busbw_gbps: None, user_tag: 0, variant: String::new(), wait_us: None, work_us: None };
        golden::<Value, Value>(
            &Line::Watch(Box::new(untimed)),
            r#"{"type":"coll","data":{"comm":"c","func":"allto_all","size":1048576,"datatype":"ncclFloat32","algo":"","proto":"","ranks":1,"nranks":1,"ops":25,"timing":"none","time_us":null,"algbw_gbps":null,"busbw_gbps":null,"user_tag":0,"variant":"","wait_us":null,"work_us":null}}"#,
        );
        let hang = WatchLine::Hang { comm: "c".into(), func: Func::AllReduce, seq: 9, rank: 1, host: "vm".into(), gpu: Some("0".into()), why: HangWhy::NotStarted, waiting_s: 3.5, peers_done: vec![], peers_waiting: vec![0], rails: vec!["rdmap79s0".into()] };
        golden::<Value, Value>(
            &Line::Watch(Box::new(hang)),
            r#"{"type":"hang","data":{"comm":"c","func":"all_reduce","seq":9,"rank":1,"host":"vm","gpu":"0","why":"not_started","waiting_s":3.5,"peers_done":[],"peers_waiting":[0],"rails":["rdmap79s0"]}}"#,
        );
        let nics = WatchLine::Nics { host: "vm".into(), window_s: 5.0, nccl_bytes: 1 << 30, nic_bytes: 0, verdict: NicVerdict::Fallback, nics: vec![NicWindow { name: "rdmap79s0".into(), bytes: 0, behind: false }] };
        golden::<Value, Value>(
            &Line::Watch(Box::new(nics)),
            r#"{"type":"nics","data":{"host":"vm","window_s":5.0,"nccl_bytes":1073741824,"nic_bytes":0,"verdict":"fallback","nics":[{"name":"rdmap79s0","bytes":0,"behind":false}]}}"#,
        );
        golden::<Value, Value>(&Line::Watch(Box::new(WatchLine::HangOver { comm: "c".into(), func: Func::AllReduce, seq: 9 })), r#"{"type":"hang_over","data":{"comm":"c","func":"all_reduce","seq":9}}"#);
        golden::<Value, Value>(&Line::Watch(Box::new(WatchLine::Gone { host: "vm".into(), pid: 7, bye: true })), r#"{"type":"gone","data":{"host":"vm","pid":7,"bye":true}}"#);
        golden::<Value, Value>(
            &Line::Watch(Box::new(WatchLine::Health { plugins: 2, refused: 1, dropped: 0, unsent: 0 })),
            r#"{"type":"health","data":{"plugins":2,"refused":1,"dropped":0,"unsent":0}}"#,
        );
        let rank = WatchLine::Rank { host: "vm".into(), pid: 611, gpu: None, comm: "c".into(), comm_name: None, rank: 0, nranks: 2, nnodes: 2, nccl_version: Some("2.28.3".into()), abi: 5 };
        golden::<Value, Value>(
            &Line::Watch(Box::new(rank)),
            r#"{"type":"rank","data":{"host":"vm","pid":611,"gpu":null,"comm":"c","comm_name":null,"rank":0,"nranks":2,"nnodes":2,"nccl_version":"2.28.3","abi":5}}"#,
        );
        // A watch type is none of the other kinds'.
        assert!(WATCH_KINDS.iter().all(|k| !KINDS.contains(k)));
    }

    #[test]
    fn text_lines() {
        golden::<Value, Value>(&Line::note("hello"), r#"{"data":{"text":"hello"},"type":"note"}"#);
        golden::<Value, Value>(&Line::error("rank 2 (node2) did not answer"), r#"{"data":{"text":"rank 2 (node2) did not answer"},"type":"error"}"#);
        golden::<Value, Value>(&Line::warning("telemetry frame from x rejected"), r#"{"data":{"text":"telemetry frame from x rejected"},"type":"warning"}"#);
    }

    #[test]
    fn a_counters_warning_carries_its_counters_sorted() {
        let counters: CounterWarning = serde_json::from_value(serde_json::json!({
            "kind": "retransmits", "rank": 1, "channel": 0, "message": "rank 1 channel 0: retransmitted", "headline": "retransmitted"
        }))
        .expect("a counters warning");
        let line: Line = Line::Warning(Warning { text: counters.message.clone(), counters: Some(counters) });
        golden(
            &line,
            r#"{"data":{"counters":{"channel":0,"headline":"retransmitted","kind":"retransmits","message":"rank 1 channel 0: retransmitted","rank":1},"text":"rank 1 channel 0: retransmitted"},"type":"warning"}"#,
        );
    }

    #[test]
    fn sample_lines() {
        let figures = ChannelFigures { channel: 3, bytes: 1000, gbps: 0.08, ops: 4, in_flight: 2, lat_p50_us: Some(1.5), lat_p99_us: None, lat_max_us: Some(9.0) };
        let plain = Sample { t_ms: 250.0, rank: 2, seq: 7, interval_ms: 100.0, drops: 1, channel: Some(figures), queue: None, nvlink: None };
        golden::<Value, Value>(
            &Line::Sample(plain.clone()),
            r#"{"data":{"bytes":1000,"channel":3,"drops":1,"gbps":0.08,"in_flight":2,"interval_ms":100.0,"lat_max_us":9.0,"lat_p50_us":1.5,"lat_p99_us":null,"ops":4,"rank":2,"seq":7,"t_ms":250.0},"type":"sample"}"#,
        );
        let queue = QueueFigures { capacity: 64, depth: 3, held: 0, quiet_calls: 5, quiet_calls_per_s: 50.0, requests: 10, requests_per_s: 100.0 };
        let nvlink = NvlinkFigures { bytes: 8, gbytes_per_s: 0.5, gpu: 0, peak_gbytes_per_s: None, peer: 1, peer_gpu: 1 };
        golden::<Value, Value>(
            &Line::Sample(Sample { queue: Some(queue), nvlink: Some(vec![nvlink]), ..plain.clone() }),
            r#"{"data":{"bytes":1000,"channel":3,"drops":1,"gbps":0.08,"in_flight":2,"interval_ms":100.0,"lat_max_us":9.0,"lat_p50_us":1.5,"lat_p99_us":null,"nvlink":[{"bytes":8,"gbytes_per_s":0.5,"gpu":0,"peak_gbytes_per_s":null,"peer":1,"peer_gpu":1}],"ops":4,"queue":{"capacity":64,"depth":3,"held":0,"quiet_calls":5,"quiet_calls_per_s":50.0,"requests":10,"requests_per_s":100.0},"rank":2,"seq":7,"t_ms":250.0},"type":"sample"}"#,
        );
        golden::<Value, Value>(
            &Line::Sample(Sample { channel: None, queue: Some(queue), ..plain }),
            r#"{"data":{"channel":null,"drops":1,"interval_ms":100.0,"queue":{"capacity":64,"depth":3,"held":0,"quiet_calls":5,"quiet_calls_per_s":50.0,"requests":10,"requests_per_s":100.0},"rank":2,"seq":7,"t_ms":250.0},"type":"sample"}"#,
        );
    }

    #[test]
    fn pair_step_begin_and_dropped_lines() {
        let pair = Pair { bytes: 4096, gbps: 1.25, landings: 3, lat_p50_us: Some(2.0), lat_p99_us: None, receiver: 1, sender: 0, t_ms: 10.0 };
        golden::<Value, Value>(
            &Line::Pair(pair),
            r#"{"data":{"bytes":4096,"gbps":1.25,"landings":3,"lat_p50_us":2.0,"lat_p99_us":null,"receiver":1,"sender":0,"t_ms":10.0},"type":"pair"}"#,
        );
        let dropped = Dropped { reason: "the printer fell behind the run".into(), samples: 5, t_ms: 1.5, total: 9 };
        golden::<Value, Value>(
            &Line::Dropped(dropped),
            r#"{"data":{"reason":"the printer fell behind the run","samples":5,"t_ms":1.5,"total":9},"type":"dropped"}"#,
        );
        let column: Column = serde_json::from_value(serde_json::json!("SinglePin")).expect("a column");
        let label = serde_json::to_string(&column).expect("a column's label");
        golden::<Value, Value>(&Line::Step(Step { config: column.clone(), size: 4096 }), &format!(r#"{{"data":{{"config":{label},"size":4096}},"type":"step"}}"#));
        golden::<Value, Value>(
            &Line::Begin(Begin { configs: vec![column], memory: "host".into() }),
            &format!(r#"{{"data":{{"configs":[{label}],"memory":"host"}},"type":"begin"}}"#),
        );
    }

    #[test]
    fn rail_lines_fold_each_host_and_rail_over_each_interval() {
        use crate::telemetry::{ChannelSample, RankSample};
        /// A line's host, rail, channels, rate, slowest, fastest, slowest rank and time.
        type Seen<'a> = (&'a str, u16, u32, f64, Option<f64>, Option<f64>, u32, f64);
        let rail = Rail {
            bytes: 2_500_000_000,
            channels: 8,
            gbps: 200.0,
            gbps_max: Some(26.0),
            gbps_min: Some(23.5),
            host: "p5-node-0001".into(),
            interval_ms: 100.0,
            ops: 610,
            rail: 2,
            slowest_rank: 13,
            t_ms: 1200.0,
        };
        golden::<Value, Value>(
            &Line::Rail(rail),
            r#"{"data":{"bytes":2500000000,"channels":8,"gbps":200.0,"gbps_max":26.0,"gbps_min":23.5,"host":"p5-node-0001","interval_ms":100.0,"ops":610,"rail":2,"slowest_rank":13,"t_ms":1200.0},"type":"rail"}"#,
        );

        // Two hosts of two ranks, two channels a rank, at 100 ms.
        let hosts: Vec<String> = ["a", "a", "b", "b"].map(String::from).to_vec();
        let mut lines = RailLines::new(&hosts, 2, std::time::Duration::from_millis(100));
        let sample = |rank: u32, bytes: [u64; 2]| RankSample {
            rank,
            interval_ns: 100_000_000,
            channels: (0..2).map(|c| ChannelSample { channel: c, bytes: bytes[usize::from(c)], ops: 1, ..ChannelSample::default() }).collect(),
            ..RankSample::default()
        };
        let mut out = Vec::new();
        lines.add(10.0, &sample(0, [1_250_000_000, 1_000_000_000]), |line| out.push(line));
        lines.add(20.0, &sample(1, [625_000_000, 1_000_000_000]), |line| out.push(line));
        lines.add(30.0, &sample(2, [1_250_000_000, 1_250_000_000]), |line| out.push(line));
        // A sample beyond the run's ranks or channels is left out.
        lines.add(40.0, &sample(9, [1, 1]), |line| out.push(line));
        assert!(out.is_empty(), "the interval is still open: {out:?}");
        // The next interval's first sample closes it: a line per host and rail heard from, in that order.
        lines.add(105.0, &sample(3, [0, 0]), |line| out.push(line));
        let seen: Vec<Seen> = out
            .iter()
            .map(|l| (l.host.as_str(), l.rail, l.channels, l.gbps, l.gbps_min, l.gbps_max, l.slowest_rank, l.t_ms))
            .collect();
        assert_eq!(seen, [
            ("a", 0, 2, 150.0, Some(50.0), Some(100.0), 1, 100.0),
            ("a", 1, 2, 160.0, Some(80.0), Some(80.0), 0, 100.0),
            ("b", 0, 1, 100.0, Some(100.0), Some(100.0), 2, 100.0),
            ("b", 1, 1, 100.0, Some(100.0), Some(100.0), 2, 100.0),
        ]);
        assert_eq!(out[0].bytes, 1_875_000_000);
        assert_eq!(out[0].ops, 2);
        // The run's end: what is open comes out, at the end of its interval.
        out.clear();
        lines.flush(&mut |line| out.push(line));
        assert_eq!(out.iter().map(|l| (l.host.as_str(), l.rail, l.t_ms, l.gbps)).collect::<Vec<_>>(), [("b", 0, 200.0, 0.0), ("b", 1, 200.0, 0.0)]);
        out.clear();
        lines.flush(&mut |line| out.push(line));
        assert!(out.is_empty(), "nothing twice");
    }

    #[test]
    fn a_verdict_comes_type_first_in_declared_order() {
        let verdict = Verdict { suspects: Vec::new(), checked: Checked { nodes: 4, nics: 16 } };
        golden::<Value, Value>(&Line::Verdict(Box::new(verdict)), r#"{"type":"verdict","data":{"suspects":[],"checked":{"nodes":4,"nics":16}}}"#);
    }

    #[test]
    fn snapshots_and_checks_come_type_first() {
        let node = NodeSample { host: "node1".into(), ..NodeSample::default() };
        let data = serde_json::to_string(&node).expect("a node read");
        golden::<Value, Value>(&Line::Snapshot { rank: None, data: Box::new(node.clone()) }, &format!(r#"{{"type":"snapshot","data":{data}}}"#));
        golden::<Value, Value>(&Line::Snapshot { rank: Some(3), data: Box::new(node.clone()) }, &format!(r#"{{"type":"snapshot","rank":3,"data":{data}}}"#));
        // A node line (a served monitor's) sorts its keys; a snapshot keeps the declared order.
        let sorted = serde_json::to_value(&node).expect("a node read").to_string();
        golden::<Value, Value>(&Line::Node(Box::new(node)), &format!(r#"{{"data":{sorted},"type":"node"}}"#));

        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct Report {
            status: String,
            action: String,
        }
        golden::<Report, Value>(&Line::Check(Box::new(Report { status: "ok".into(), action: "none".into() })), r#"{"type":"check","data":{"status":"ok","action":"none"}}"#);
    }

    /// `efatop topo --json` (version 2): type first, then the data in its declared order, on one line,
    /// `schema_version` first; before version 2 the command printed the bare document, indented.
    #[test]
    fn a_topology_comes_type_first_with_its_schema_version_first() {
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct Topology {
            schema_version: u32,
            source: String,
            gpus: Vec<u32>,
            placement: Vec<u32>,
        }
        let topology = Topology { schema_version: TOPOLOGY_SCHEMA, source: "p5.xml".into(), gpus: vec![0, 1], placement: vec![1] };
        golden::<Value, Topology>(
            &Line::Topology(Box::new(topology)),
            r#"{"type":"topology","data":{"schema_version":2,"source":"p5.xml","gpus":[0,1],"placement":[1]}}"#,
        );
        // A reader that does not name the topology's type gets its data as JSON.
        let untyped: Line = Line::parse(r#"{"type":"topology","data":{"schema_version":2}}"#).expect("a topology line");
        assert_eq!(untyped, Line::Topology(Box::new(serde_json::json!({"schema_version": 2}))));
    }

    #[test]
    fn queue_rows_sort_their_fields() {
        let row = QueueRow {
            blocks: 1,
            threads: 32,
            requests: 100,
            requests_per_s: 1e6,
            latency_requests: 10,
            latency_p50_us: 1.0,
            latency_p99_us: 2.0,
            latency_max_us: 3.0,
            verified: true,
        };
        golden::<Value, Value>(
            &Line::Queue(row),
            r#"{"data":{"blocks":1,"latency_max_us":3.0,"latency_p50_us":1.0,"latency_p99_us":2.0,"latency_requests":10,"requests":100,"requests_per_s":1000000.0,"threads":32,"verified":true},"type":"queue"}"#,
        );
    }

    #[test]
    fn run_summary_and_sweep_lines_sort_their_keys() {
        let metadata = RunMetadata::default();
        let results = RunResults::default();
        for (line, data) in [
            (Line::<Value>::Run(Box::new(metadata.clone())), serde_json::to_value(&metadata).expect("metadata")),
            (Line::Summary(Box::new(results.clone())), serde_json::to_value(&results).expect("results")),
        ] {
            golden(&line, &format!(r#"{{"data":{data},"type":"{}"}}"#, line.kind()));
        }
    }

    #[test]
    fn an_unknown_type_is_refused_with_the_known_ones() {
        let err = Line::<Value>::parse(r#"{"type":"mystery","data":{}}"#).expect_err("unknown");
        assert!(err.to_string().contains("mystery") && err.to_string().contains("sweep_round"), "{err}");
        // Either key order reads.
        assert_eq!(Line::<Value>::parse(r#"{"type":"note","data":{"text":"a"}}"#).expect("type first"), Line::note("a"));
    }
}
