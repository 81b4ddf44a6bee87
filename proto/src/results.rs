//! What a run measured, as every printer (table, JSON, later the dashboard) sees it.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::column::Column;
use crate::experiment::Experiment;
use crate::topology::{GpuLinkSource, PairLink};


/// Ranks a run may claim (its start's `ranks`, hosts, NIC rows, placements; a sweep's nodes): 4096 nodes ×
/// 8 ranks is 32768; twice that. The dashboard's per-rank tables are a few hundred bytes a rank.
pub const MAX_RANKS: usize = 65_536;
/// Channels (NICs) a rank may claim: a p5 node has 32 EFA NICs, and a rank drives at most all of them;
/// twice that. Per-rank-and-channel tables hold at most [`MAX_RANKS`] × this.
pub const MAX_CHANNELS: usize = 64;

/// The results file's format. 1: files from before the field existed (read as they always were); 2:
/// the same fields, and this one.
pub const SCHEMA_VERSION: u32 = 2;

/// A results file's format version; files without one are version 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SchemaVersion(pub u32);

impl SchemaVersion {
    /// Files written before the version was recorded.
    pub const FIRST: SchemaVersion = SchemaVersion(1);

    #[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
    fn is_first(&self) -> bool {
        *self == SchemaVersion::FIRST
    }
}

impl Default for SchemaVersion {
    /// What this efatop writes.
    fn default() -> Self {
        SchemaVersion(SCHEMA_VERSION)
    }
}

fn first_schema() -> SchemaVersion {
    SchemaVersion::FIRST
}

/// When an operation counts as complete, and so what `--window` counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Completion {
    /// The provider's default: once the provider has taken the operation's bytes (on tcp, the kernel's
    /// socket buffer; on efa, once the peer's NIC acknowledged it).
    Transmit,
    /// `FI_DELIVERY_COMPLETE`: once the peer has the bytes.
    Delivery,
}

/// One channel's NIC as recorded in the results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NicRecord {
    pub channel: usize,
    pub domain: String,
    pub fabric: String,
    pub link_gbps: Option<f64>,
    pub pci_address: Option<String>,
    pub mr_mode: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunMetadata {
    pub efatop_version: String,
    pub libfabric_version: String,
    pub experiment: Experiment,
    /// The provider asked for (`efa`, `shm`, `tcp`, `sockets`), after `auto` was resolved.
    pub provider: String,
    /// The stack libfabric reports, e.g. `tcp;ofi_rxm`.
    pub provider_stack: String,
    /// The fabric libfabric named (`efa`, `efa-direct`, a subnet for tcp); empty in files from before.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fabric: String,
    /// The libfabric API version efatop ran at: the lower of its headers' and the library's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub libfabric_api: String,
    /// efa: RDMA WRITE was emulated over sends on some rank's endpoint (write columns say `(emulated)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emulated_write: Option<bool>,
    /// efa: same-host peers could use libfabric's shared-memory shortcut (`--allow-shm`) rather than the NIC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shm_shortcut: Option<bool>,
    /// When the endpoints' writes and sends counted as complete; absent in files from before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<Completion>,
    pub ranks: usize,
    pub hosts: Vec<String>,
    pub channels: usize,
    pub distinct_nics: usize,
    pub nics: Vec<NicRecord>,
    /// Link speed per channel used for `BusBW`, and where it came from.
    pub link_gbps: Option<f64>,
    pub link_source: LinkSource,
    pub memory: String,
    pub window: usize,
    pub warmup: u64,
    pub iters: u64,
    pub notes: Vec<String>,
    pub started_unix_s: u64,
    /// Where each rank ran: its GPU, the NICs its channels use, the CPUs it was pinned to.
    #[serde(default)]
    pub placements: Vec<RankPlacement>,
    /// How the GPUs of rank 0's host that the run uses reach each other, with the NVLink peak: from NVML
    /// there (the only host rank 0 can ask), else from its topology. Empty with fewer than two such GPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_pairs: Vec<GpuPairRecord>,
    /// Seconds of silence after which rank 0 names a rank hung (`--hang-timeout`); 0 in older files.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub hang_timeout_s: u64,
    /// The ranks that relayed their host's telemetry to rank 0 (one connection a host; see efatop_runtime's
    /// relay): the lowest rank of every host but rank 0's that runs more than one rank. Empty: every rank
    /// sent its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub telemetry_relays: Vec<usize>,
    /// The EC2 instance type rank 0 ran on, from its DMI product name (`p5.48xlarge`), which picks the
    /// reference figures measurements are held against ([`crate::expected`]); absent when unreadable and
    /// in files from before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// Where the link speed behind `BusBW` came from. Files carry it as text (`flag`, `provider`, `unknown`,
/// `nvlink`, `nvlink: NVML, 18 links x 25 GB/s`), as they always have; it is read back here only.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum LinkSource {
    /// Not set (a monitor's stream has no link).
    #[default]
    Unset,
    /// `--link-gbps`.
    Flag,
    /// The provider's `fi_nic` link attributes.
    Provider,
    /// Neither: `BusBW` is not computed.
    Unknown,
    /// ipc: the GPU pair's NVLink peak per direction, and where that came from when a peak is known.
    Nvlink(Option<NvlinkPeakOrigin>),
    /// Text this efatop does not know, shown as it is.
    Other(String),
}

/// Where an NVLink peak came from: NVML's or hwloc's view of the pair, with its links and per-link rate
/// when both are known.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NvlinkPeakOrigin {
    pub source: GpuLinkSource,
    /// Active links and GB/s per link.
    pub links: Option<(u8, f64)>,
}

impl fmt::Display for NvlinkPeakOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.links {
            Some((links, rate)) => write!(f, "{}, {links} links x {rate} GB/s", self.source.label()),
            None => f.write_str(self.source.label()),
        }
    }
}

impl fmt::Display for LinkSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkSource::Unset => Ok(()),
            LinkSource::Flag => f.write_str("flag"),
            LinkSource::Provider => f.write_str("provider"),
            LinkSource::Unknown => f.write_str("unknown"),
            LinkSource::Nvlink(None) => f.write_str("nvlink"),
            LinkSource::Nvlink(Some(origin)) => write!(f, "nvlink: {origin}"),
            LinkSource::Other(text) => f.write_str(text),
        }
    }
}

impl LinkSource {
    /// The source a file's text stands for: the one that renders to it, or [`LinkSource::Other`].
    fn from_text(text: &str) -> LinkSource {
        let simple = [LinkSource::Unset, LinkSource::Flag, LinkSource::Provider, LinkSource::Unknown, LinkSource::Nvlink(None)];
        if let Some(source) = simple.into_iter().find(|source| source.to_string() == text) {
            return source;
        }
        for source in [GpuLinkSource::Nvml, GpuLinkSource::Hwloc] {
            let plain = LinkSource::Nvlink(Some(NvlinkPeakOrigin { source, links: None }));
            if plain.to_string() == text {
                return plain;
            }
            let Some(links) = plain.to_string().len().checked_add(2).and_then(|at| text.get(at..)) else { continue };
            let counted = links.strip_suffix(" GB/s").and_then(|rest| rest.split_once(" links x ")).and_then(|(links, rate)| {
                Some(LinkSource::Nvlink(Some(NvlinkPeakOrigin { source, links: Some((links.parse().ok()?, rate.parse().ok()?)) })))
            });
            if let Some(counted) = counted.filter(|counted| counted.to_string() == text) {
                return counted;
            }
        }
        LinkSource::Other(text.to_string())
    }
}

impl Serialize for LinkSource {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for LinkSource {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(LinkSource::from_text(&String::deserialize(deserializer)?))
    }
}

/// How a run ended, as its results file tells it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    /// Still going (or ended without a word: killed outright).
    #[default]
    Running,
    /// Every size measured.
    Complete,
    /// Ended early; the reason says why.
    Failed,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStatus {
    pub state: RunState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One pair of a host's GPUs (`gpu_a` < `gpu_b`, the ranks' GPU indices) and how they are connected.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuPairRecord {
    pub host: String,
    pub gpu_a: usize,
    pub gpu_b: usize,
    pub pair: PairLink,
}

/// One rank's place on its node, as chosen from the topology (or by the flags).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RankPlacement {
    pub rank: usize,
    pub host: String,
    pub gpu: Option<usize>,
    pub gpu_pci_bus_id: Option<String>,
    pub numa_node: Option<u32>,
    /// The libfabric domain of each channel, in channel order.
    pub nics: Vec<String>,
    /// CPUs the rank's threads were pinned to: its GPU's NUMA node's within what the process was allowed,
    /// else all it was allowed; `None` when not pinned (`--no-pin`).
    pub pinned_cpus: Option<String>,
    /// The one CPU of that set its hot thread (posting and polling) had to itself; the other threads ran on
    /// the rest. `None` in results files from before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hot_cpu: Option<u32>,
}

/// Latency of one operation as the experiment defines it, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// One pair's (or one concurrent group's) share of a measurement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairMeasurement {
    pub peers: Vec<usize>,
    pub gbps: f64,
    pub mean_us: f64,
}

/// One configuration at one size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    pub config: Column,
    pub size: u64,
    /// `size / 4`, the seed tables' element count.
    pub count: u64,
    pub gbps: f64,
    /// Bandwidth over the link speed of the channels the configuration uses; absent when no link speed is
    /// known (never guessed).
    pub busbw_percent: Option<f64>,
    /// All-to-all only: what nccl-tests calls busbw, the bytes each rank puts on the wire per second
    /// ((N-1) × size per iteration), in Gbps. `gbps` keeps the seed's definition (one rank's buffer per
    /// iteration time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_busbw_gbps: Option<f64>,
    pub latency: LatencySummary,
    /// Timed iterations per pair.
    pub iterations: u64,
    pub pairs: Vec<PairMeasurement>,
    /// Every byte that arrived was checked against the sender's pattern.
    pub verified: bool,
    /// How the configuration's memory reached the NIC: `host`, `dmabuf` or `va` (GPU memory registered
    /// natively, through a dma-buf or by virtual address), `staged` (GPU memory copied through pinned host
    /// memory). Absent in files written before it was recorded, and for experiments without a NIC (ipc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registration: Option<String>,
    /// Application bytes against NIC counters per channel of every rank over this step, their ratio and
    /// warnings (see `counters`). Absent for experiments that do not read NIC counters, and in older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<crate::counters::StepCounters>,
    /// `--telemetry-ab` only: the same step's rates with the samplers running and paused, block by block
    /// (what telemetry costs, measured inside one run). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry_ab: Option<TelemetryAb>,
    /// The run's instance type has reference figures ([`crate::expected`]): this step's figure, its share
    /// of it and its source, or why none applies. Absent for other machines and in older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<crate::expected::Expected>,
}

/// Where a timed block of `--telemetry-ab` stands: blocks go on, off, off, on in a cycle of four (so a
/// drift within a cycle weighs on both alike), or the other way round ([`AbArm::ROUND`]), and cycles
/// alternate between two halves, each of which holds both, so that the spread between halves of the same
/// arm tells the noise (A against A).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbArm {
    /// Telemetry's samplers run during the block (else they are paused on every rank).
    pub on: bool,
    /// 0 for even cycles, 1 for odd ones.
    pub half: usize,
    /// Its place in the cycle, 0 to 3: places 0 and 3 are on in an on-off-off-on cycle and off in the
    /// other order, so that over a round each arm holds each place equally often.
    pub position: usize,
    /// The smallest run of blocks in which each arm holds each place once ([`AbArm::UNIT`]), counted from 0:
    /// a cycle and the cycle of the other order two after it (cycles 0 and 2 of a round, then 1 and 3). A
    /// unit's cost carries neither a drift nor a place's effect, so units are the samples a confidence
    /// interval is drawn from ([`TelemetryAb::unit_gbps`]).
    pub unit: usize,
}

impl AbArm {
    /// Blocks per cycle: on, off, off, on, or the other way round.
    pub const CYCLE: u64 = 4;
    /// Blocks per round: four cycles, on-off-off-on twice then off-on-on-off twice, so that each arm holds
    /// each place in the cycle equally often and each half holds both orders. A block's place can matter
    /// by itself: at one-iteration blocks, 8-rank all-to-all over shm ran the cycle's fourth iteration 4 %
    /// faster than its second, telemetry or not, which on-off-off-on alone counted as telemetry's.
    pub const ROUND: u64 = 4 * Self::CYCLE;
    /// Blocks per unit ([`AbArm::unit`]): two cycles, one of each order.
    pub const UNIT: u64 = 2 * Self::CYCLE;

    /// The arm of timed block `block` (counted from 0).
    pub fn of_block(block: u64) -> Self {
        let cycle = block / Self::CYCLE;
        let position = (block % Self::CYCLE) as usize;
        let turned = (cycle / 2) % 2 == 1;
        let unit = ((cycle / 4) * 2 + cycle % 2) as usize;
        Self { on: matches!(position, 0 | 3) != turned, half: (cycle % 2) as usize, position, unit }
    }
}

/// Bytes and seconds of the timed blocks, by arm and half, summed over pairs or ranks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AbTally {
    /// `[on as usize][half]`.
    bytes: [[f64; 2]; 2],
    seconds: [[f64; 2]; 2],
    /// By place in the cycle ([`AbArm::position`]).
    position_bytes: [f64; 4],
    position_seconds: [f64; 4],
    /// By unit ([`AbArm::unit`]): `[on bytes, on seconds, off bytes, off seconds]`. Grown as blocks arrive,
    /// outside the blocks' time; a step holds a few hundred units at most.
    units: Vec<[f64; 4]>,
}

impl AbTally {
    pub fn add(&mut self, arm: AbArm, bytes: f64, seconds: f64) {
        self.bytes[usize::from(arm.on)][arm.half] += bytes;
        self.seconds[usize::from(arm.on)][arm.half] += seconds;
        self.position_bytes[arm.position] += bytes;
        self.position_seconds[arm.position] += seconds;
        if self.units.len() <= arm.unit {
            self.units.resize(arm.unit + 1, [0.0; 4]);
        }
        let at = if arm.on { 0 } else { 2 };
        self.units[arm.unit][at] += bytes;
        self.units[arm.unit][at + 1] += seconds;
    }

    pub fn merge(&mut self, other: &AbTally) {
        for on in 0..2 {
            for half in 0..2 {
                self.bytes[on][half] += other.bytes[on][half];
                self.seconds[on][half] += other.seconds[on][half];
            }
        }
        for position in 0..4 {
            self.position_bytes[position] += other.position_bytes[position];
            self.position_seconds[position] += other.position_seconds[position];
        }
        if self.units.len() < other.units.len() {
            self.units.resize(other.units.len(), [0.0; 4]);
        }
        for (mine, theirs) in self.units.iter_mut().zip(&other.units) {
            for (a, b) in mine.iter_mut().zip(theirs) {
                *a += b;
            }
        }
    }

    /// The step's figures, for blocks of `block_iterations` iterations, `blocks` of them per pair or rank.
    pub fn result(&self, block_iterations: u64, blocks: u64) -> TelemetryAb {
        let rate = |on: usize, halves: &[usize]| {
            let bytes: f64 = halves.iter().map(|h| self.bytes[on][*h]).sum();
            let seconds: f64 = halves.iter().map(|h| self.seconds[on][*h]).sum();
            gbps(bytes, seconds)
        };
        TelemetryAb {
            block_iterations,
            blocks,
            on_gbps: rate(1, &[0, 1]),
            off_gbps: rate(0, &[0, 1]),
            on_halves_gbps: [rate(1, &[0]), rate(1, &[1])],
            off_halves_gbps: [rate(0, &[0]), rate(0, &[1])],
            position_gbps: std::array::from_fn(|p| gbps(self.position_bytes[p], self.position_seconds[p])),
            // A unit cut short by the end of the step holds an arm at some places only: it is left out.
            unit_gbps: self
                .units
                .iter()
                .take(usize::try_from(blocks / AbArm::UNIT).unwrap_or(usize::MAX))
                .map(|u| [gbps(u[0], u[1]), gbps(u[2], u[3])])
                .collect(),
        }
    }
}

/// One step of `--telemetry-ab`: its timed iterations in blocks, the samplers of every rank paused in every
/// other block (on, off, off, on, or the other way round), and the rate of each arm (bytes over the blocks' time, all pairs or
/// ranks together). `cost()` is what telemetry takes; the halves (even and odd cycles) of one arm differ
/// only by noise, which `noise()` gives.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TelemetryAb {
    pub block_iterations: u64,
    /// Timed blocks per pair (write) or rank (alltoall).
    pub blocks: u64,
    pub on_gbps: f64,
    pub off_gbps: f64,
    /// Each arm over even and over odd cycles.
    pub on_halves_gbps: [f64; 2],
    pub off_halves_gbps: [f64; 2],
    /// Each place in the cycle (0 to 3, both arms together): where the place itself matters, or a switch of
    /// the samplers costs, it shows here rather than between the arms. Absent (zero) in older files.
    #[serde(default)]
    pub position_gbps: [f64; 4],
    /// Each whole unit's rates, `[on, off]` ([`AbArm::unit`]), in order: the samples from which
    /// `scripts/bench/bench-telemetry-cost` draws the cost's confidence interval, pooled over runs. Absent in
    /// older files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unit_gbps: Vec<[f64; 2]>,
}

impl TelemetryAb {
    /// `1 - on / off`: the share of the rate telemetry costs (negative when the on blocks ran faster).
    pub fn cost(&self) -> f64 {
        if self.off_gbps > 0.0 { 1.0 - self.on_gbps / self.off_gbps } else { f64::NAN }
    }

    /// The same figure between the two halves of each arm (A against A), the larger in size: what noise
    /// alone makes of `cost()` in this step.
    pub fn noise(&self) -> f64 {
        let between = |[a, b]: [f64; 2]| if a > 0.0 { 1.0 - b / a } else { f64::NAN };
        let (on, off) = (between(self.on_halves_gbps), between(self.off_halves_gbps));
        if on.abs() >= off.abs() { on } else { off }
    }
}

impl Measurement {
    /// The one way every experiment turns a step into its measurement, once every receiver has verified
    /// what it got: Gbps is the mean of the pairs' (or the concurrent groups', or the ranks'), `BusBW` that
    /// over `link_gbps` ([`busbw_percent`]: the speed of every link the configuration used together; `None`
    /// when not known, and BusBW is left out), the latency `latency`'s summary. The caller adds what only
    /// some experiments have (registration path, NIC counters, nccl-tests' busbw).
    pub fn verified(
        config: Column,
        size: u64,
        iterations: u64,
        pairs: Vec<PairMeasurement>,
        latency: &LatencyRecorder,
        link_gbps: Option<f64>,
    ) -> Self {
        let gbps = pairs.iter().map(|p| p.gbps).sum::<f64>() / pairs.len().max(1) as f64;
        Measurement { busbw_percent: busbw_percent(gbps, link_gbps), pairs, ..Measurement::plain(config, size, gbps, latency.summary(), iterations) }
    }

    /// `gbps` at `size` in `config` over `iterations` with `latency`, verified, and none of what only some
    /// steps add (pairs, BusBW, registration, NIC counters, ...): the one shape tests, fixtures and
    /// synthetic runs start from and complete with struct-update syntax. A run's steps are [`Self::verified`].
    pub fn plain(config: Column, size: u64, gbps: f64, latency: LatencySummary, iterations: u64) -> Self {
        Measurement {
            config,
            size,
            count: size / 4,
            gbps,
            busbw_percent: None,
            nccl_busbw_gbps: None,
            latency,
            iterations,
            pairs: Vec::new(),
            verified: true,
            registration: None,
            counters: None,
            telemetry_ab: None,
            expected: None,
        }
    }
}

/// `BusBW (%)`: `gbps` over the speed of the links it crossed (`link_gbps`, e.g. a NIC's speed times the
/// channels the configuration used, or an NVLink pair's peak); `None` when that speed is not known.
pub fn busbw_percent(gbps: f64, link_gbps: Option<f64>) -> Option<f64> {
    link_gbps.map(|link| 100.0 * gbps / link)
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunResults {
    /// The file's format ([`SCHEMA_VERSION`] when written now; 1 for files from before it was recorded,
    /// which are written back as they were, without it).
    #[serde(default = "first_schema", skip_serializing_if = "SchemaVersion::is_first")]
    pub schema_version: SchemaVersion,
    pub metadata: RunMetadata,
    /// Configurations in column order.
    pub configs: Vec<Column>,
    pub measurements: Vec<Measurement>,
    /// All-to-all only: the bandwidth of every sender→receiver pair, per configuration and size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pair_matrices: Vec<PairMatrix>,
    /// Whether the run is going, complete or failed (and why). Absent in files from before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RunStatus>,
    /// `sweep` only: every round's figures and the verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<crate::sweep::SweepResults>,
}

/// All-to-all: what each sender→receiver pair delivered at one configuration and size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairMatrix {
    pub config: Column,
    pub size: u64,
    /// `gbps[sender][receiver]`: bytes the sender wrote to that receiver over the time the sender's timed
    /// iterations took. `None` on the diagonal (a rank does not write to itself).
    pub gbps: Vec<Vec<Option<f64>>>,
    /// `same_host[sender][receiver]`: the pair shares a host and libfabric could take its shared-memory
    /// shortcut (efa with `--allow-shm`), so its figure is memcpy, not the NIC. Empty when no pair could.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub same_host: Vec<Vec<bool>>,
}

impl PairMatrix {
    /// `same_host` for `hosts` (indexed by rank): true where two different ranks share a host.
    pub fn same_host_pairs(hosts: &[String]) -> Vec<Vec<bool>> {
        hosts
            .iter()
            .enumerate()
            .map(|(sender, a)| hosts.iter().enumerate().map(|(receiver, b)| sender != receiver && a == b).collect())
            .collect()
    }

    /// Whether the sender→receiver figure went through a same-host shortcut.
    pub fn is_same_host(&self, sender: usize, receiver: usize) -> bool {
        self.same_host.get(sender).and_then(|row| row.get(receiver)).copied().unwrap_or(false)
    }
}

impl RunResults {
    /// The sizes measured, ascending, each once.
    pub fn sizes(&self) -> Vec<u64> {
        let mut sizes: Vec<u64> = self.measurements.iter().map(|m| m.size).collect();
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    }

    pub fn find(&self, config: &Column, size: u64) -> Option<&Measurement> {
        self.measurements.iter().find(|m| &m.config == config && m.size == size)
    }
}

/// Why a results file cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum ResultsFileError {
    #[error("not an efatop results file: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{config} at size {size} is measured but not among the configurations ({})", .configs.join(", "))]
    UnlistedConfig { config: String, size: u64, configs: Vec<String> },
    #[error("{config} at size {size} is measured twice")]
    MeasuredTwice { config: String, size: u64 },
    #[error("the pair matrix of {config} at size {size} is not square ({rows} senders, a row of {columns} receivers)")]
    PairMatrixShape { config: String, size: u64, rows: usize, columns: usize },
}

impl RunResults {
    /// Reads a results file (`--out`) back. Beyond its shape, checks what readers of it rely on: every
    /// measurement's configuration is listed (tables have one column per listed configuration, so an
    /// unlisted one would vanish silently), each configuration and size is measured once (so [`Self::find`]
    /// is not ambiguous) and each pair matrix is square (it is indexed `[sender][receiver]`). Whether its
    /// figures are ones a run can have measured is the report's to judge (`efatop_report::figures`), which
    /// every reader of a results file goes through (`efatop_report::load::parse`).
    pub fn from_json(bytes: &[u8]) -> Result<Self, ResultsFileError> {
        let results: Self = serde_json::from_slice(bytes)?;
        let mut measured = std::collections::HashSet::new();
        for measurement in &results.measurements {
            let (config, size) = (measurement.config.to_string(), measurement.size);
            if !results.configs.contains(&measurement.config) {
                let configs = results.configs.iter().map(ToString::to_string).collect();
                return Err(ResultsFileError::UnlistedConfig { config, size, configs });
            }
            if !measured.insert((&measurement.config, size)) {
                return Err(ResultsFileError::MeasuredTwice { config, size });
            }
        }
        for matrix in &results.pair_matrices {
            let rows = matrix.gbps.len();
            if let Some(row) = matrix.gbps.iter().find(|row| row.len() != rows) {
                let (config, size, columns) = (matrix.config.to_string(), matrix.size, row.len());
                return Err(ResultsFileError::PairMatrixShape { config, size, rows, columns });
            }
        }
        Ok(results)
    }
}

/// Per-iteration latencies, recorded without allocating (fixed bounds) and merged across pairs and ranks:
/// the one histogram every final latency figure (a step's mean, p50, p99, max; a sweep figure's p50 and
/// p99) comes from. It travels between ranks as its non-empty buckets (`[[ns, count], ...]`, each bucket
/// named by its highest value), which rebuild the same histogram: rank 0 merging every rank's gets the
/// percentiles it would have had recording their iterations itself.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencyRecorder {
    histogram: hdrhistogram::Histogram<u64>,
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyRecorder {
    /// Nanoseconds from 1 ns to one hour at three significant digits.
    pub fn new() -> Self {
        let histogram = hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
            .expect("static histogram bounds are valid");
        Self { histogram }
    }

    pub fn record(&mut self, elapsed: std::time::Duration) {
        self.histogram.saturating_record(elapsed.as_nanos().max(1) as u64);
    }

    pub fn merge(&mut self, other: &LatencyRecorder) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.histogram.add(&other.histogram);
    }

    pub fn is_empty(&self) -> bool {
        self.histogram.is_empty()
    }

    pub fn summary(&self) -> LatencySummary {
        let us = |ns: f64| ns / 1000.0;
        LatencySummary {
            mean_us: us(self.histogram.mean()),
            p50_us: us(self.histogram.value_at_quantile(0.50) as f64),
            p99_us: us(self.histogram.value_at_quantile(0.99) as f64),
            max_us: us(self.histogram.max() as f64),
        }
    }
}

impl Serialize for LatencyRecorder {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.histogram.iter_recorded().map(|bucket| (bucket.value_iterated_to(), bucket.count_at_value())))
    }
}

impl<'de> Deserialize<'de> for LatencyRecorder {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut recorder = LatencyRecorder::new();
        for (ns, count) in Vec::<(u64, u64)>::deserialize(deserializer)? {
            recorder
                .histogram
                .record_n(ns, count)
                .map_err(|err| serde::de::Error::custom(format!("latency of {ns} ns: {err:?}")))?;
        }
        Ok(recorder)
    }
}

/// Gigabits per second for `bytes` moved in `seconds`.
pub fn gbps(bytes: f64, seconds: f64) -> f64 {
    if seconds > 0.0 { bytes * 8.0 / seconds / 1e9 } else { 0.0 }
}

/// `efatop queue`: one (blocks, threads) shape of the GPU→CPU request ring, measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueRow {
    pub blocks: u32,
    pub threads: u32,
    pub requests: u64,
    pub requests_per_s: f64,
    pub latency_requests: u64,
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    pub latency_max_us: f64,
    /// Every request of both passes consumed exactly once (a row is only made when this holds).
    pub verified: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::column::{Layout, Memory};
    use std::time::Duration;

    #[test]
    fn percentiles_come_from_what_was_recorded() {
        let mut recorder = LatencyRecorder::new();
        for us in 1..=100 {
            recorder.record(Duration::from_micros(us));
        }
        let summary = recorder.summary();
        assert!((summary.p50_us - 50.0).abs() < 0.1, "{summary:?}");
        assert!((summary.p99_us - 99.0).abs() < 0.1, "{summary:?}");
        assert!((summary.mean_us - 50.5).abs() < 0.1, "{summary:?}");
        assert!((summary.max_us - 100.0).abs() < 0.1, "{summary:?}");
    }

    #[test]
    fn histograms_travel_as_buckets_and_merge_as_if_recorded_in_one() {
        let (mut all, mut first, mut second) = (LatencyRecorder::new(), LatencyRecorder::new(), LatencyRecorder::new());
        for (index, ns) in [1u64, 7, 999, 1000, 1001, 65_432, 65_432, 2_500_000, 3_600_000_000_000, u64::MAX].into_iter().enumerate() {
            all.record(Duration::from_nanos(ns));
            if index % 2 == 0 { &mut first } else { &mut second }.record(Duration::from_nanos(ns));
        }
        let trip = |recorder: &LatencyRecorder| -> LatencyRecorder {
            serde_json::from_str(&serde_json::to_string(recorder).expect("serializes")).expect("reads back")
        };
        assert_eq!(trip(&first), first);
        let mut merged = trip(&first);
        merged.merge(&trip(&second));
        assert_eq!(merged.summary(), all.summary());
        assert_eq!(merged, all);
        assert_eq!(serde_json::to_string(&LatencyRecorder::new()).expect("serializes"), "[]");
        assert!(serde_json::from_str::<LatencyRecorder>("[[1, 2], [3]]").is_err());
        assert!(serde_json::from_str::<LatencyRecorder>("[[18446744073709551615, 1]]").is_err(), "beyond the bounds");
    }

    #[test]
    fn a_verified_step_is_the_mean_of_its_pairs_against_the_links_it_used() {
        let mut latency = LatencyRecorder::new();
        latency.record(Duration::from_micros(10));
        latency.record(Duration::from_micros(30));
        let pairs = vec![PairMeasurement { peers: vec![1], gbps: 40.0, mean_us: 10.0 }, PairMeasurement { peers: vec![2], gbps: 80.0, mean_us: 30.0 }];
        let measured = Measurement::verified(single(), 4096, 2, pairs.clone(), &latency, Some(200.0));
        assert_eq!((measured.count, measured.iterations, measured.verified), (1024, 2, true));
        assert!((measured.gbps - 60.0).abs() < 1e-12, "{measured:?}");
        assert_eq!(measured.busbw_percent, Some(30.0));
        assert_eq!((measured.latency, &measured.pairs), (latency.summary(), &pairs));
        assert_eq!((measured.nccl_busbw_gbps, measured.registration, measured.counters), (None, None, None));
        assert_eq!(Measurement::verified(single(), 4096, 2, pairs, &latency, None).busbw_percent, None, "never guessed");
        let nothing = Measurement::verified(single(), 4, 0, Vec::new(), &LatencyRecorder::new(), Some(1.0));
        assert!(nothing.gbps.abs() < f64::EPSILON && nothing.busbw_percent.is_some_and(|busbw| busbw.abs() < f64::EPSILON), "{nothing:?}");
    }

    #[test]
    fn files_without_a_schema_version_are_version_1() {
        let mut json = serde_json::to_value(saved_run()).expect("serializes");
        assert_eq!(json["schema_version"], SCHEMA_VERSION);
        json.as_object_mut().expect("an object").remove("schema_version");
        let old: RunResults = serde_json::from_value(json.clone()).expect("reads");
        assert_eq!(old.schema_version, SchemaVersion::FIRST);
        assert_eq!(serde_json::to_value(&old).expect("serializes"), json, "written back as it was");
        assert_eq!(RunResults { schema_version: SchemaVersion::default(), ..old }, saved_run());
    }

    #[test]
    fn link_sources_travel_as_the_text_files_always_had() {
        let nvml = NvlinkPeakOrigin { source: GpuLinkSource::Nvml, links: Some((18, 25.0)) };
        let hwloc = NvlinkPeakOrigin { source: GpuLinkSource::Hwloc, links: None };
        for (source, text) in [
            (LinkSource::Unset, ""),
            (LinkSource::Flag, "flag"),
            (LinkSource::Provider, "provider"),
            (LinkSource::Unknown, "unknown"),
            (LinkSource::Nvlink(None), "nvlink"),
            (LinkSource::Nvlink(Some(nvml)), "nvlink: NVML, 18 links x 25 GB/s"),
            (LinkSource::Nvlink(Some(hwloc)), "nvlink: inferred from hwloc and the GPU model"),
            (LinkSource::Other("nvlink: a guess".into()), "nvlink: a guess"),
        ] {
            assert_eq!(source.to_string(), text);
            let json = serde_json::to_value(&source).expect("serializes");
            assert_eq!(json, serde_json::Value::from(text));
            assert_eq!(serde_json::from_value::<LinkSource>(json).expect("reads back"), source, "{text}");
        }
    }

    fn single() -> Column {
        Column::write(Layout::Single, Memory::Host)
    }

    fn multi() -> Column {
        Column::write(Layout::Multi, Memory::Host)
    }

    fn saved_run() -> RunResults {
        let latency = LatencySummary { mean_us: 2.0, p50_us: 2.0, p99_us: 3.0, max_us: 4.0 };
        let measurement = |config: Column, size: u64| Measurement {
            pairs: vec![PairMeasurement { peers: vec![1], gbps: 1.5, mean_us: 2.0 }],
            ..Measurement::plain(config, size, 1.5, latency, 20)
        };
        RunResults {
            schema_version: SchemaVersion::default(),
            metadata: RunMetadata { experiment: Experiment::Write, ranks: 2, channels: 1, ..RunMetadata::default() },
            configs: vec![single(), multi()],
            measurements: vec![measurement(single(), 4096), measurement(multi(), 4096)],
            pair_matrices: vec![PairMatrix { config: single(), size: 4096, gbps: vec![vec![None, Some(1.5)], vec![Some(1.0), None]], same_host: Vec::new() }],
            status: None,
            sweep: None,
        }
    }

    #[test]
    fn a_saved_file_reads_back_as_it_was() {
        let saved = saved_run();
        let bytes = serde_json::to_vec_pretty(&saved).expect("serializes");
        assert_eq!(RunResults::from_json(&bytes).expect("reads back"), saved);
        // GPU pairs too, with their link in nvidia-smi's words.
        let mut with_pairs = saved_run();
        let pair = crate::topology::PairLink::nvlink(Some(18), Some(25.0), crate::topology::GpuLinkSource::Nvml);
        with_pairs.metadata.gpu_pairs = vec![GpuPairRecord { host: "a".into(), gpu_a: 0, gpu_b: 1, pair }];
        let json = serde_json::to_value(&with_pairs).expect("serializes");
        assert_eq!(json["metadata"]["gpu_pairs"][0]["pair"]["link"], "NV18");
        assert_eq!(json["metadata"]["gpu_pairs"][0]["pair"]["peak_gbytes_per_s"], 450.0);
        let bytes = serde_json::to_vec(&with_pairs).expect("serializes");
        assert_eq!(RunResults::from_json(&bytes).expect("reads back"), with_pairs);
    }

    #[test]
    fn the_registration_path_is_recorded_per_configuration_and_old_files_still_read() {
        let mut run = saved_run();
        run.measurements[0].registration = Some("dmabuf".into());
        let json = serde_json::to_value(&run).expect("serializes");
        assert_eq!(json["measurements"][0]["registration"], "dmabuf");
        // Absent (not null) where nothing was recorded, so files stay as they were.
        assert!(json["measurements"][1].get("registration").is_none());
        let bytes = serde_json::to_vec(&run).expect("serializes");
        assert_eq!(RunResults::from_json(&bytes).expect("reads back"), run);
        // A file written before the field existed reads, with no path.
        let old = serde_json::to_vec(&saved_run()).expect("serializes");
        let read = RunResults::from_json(&old).expect("old file reads");
        assert!(read.measurements.iter().all(|m| m.registration.is_none()));
    }

    #[test]
    fn files_readers_cannot_rely_on_are_refused_with_the_reason() {
        let read = |results: &RunResults| RunResults::from_json(&serde_json::to_vec(results).expect("serializes"));
        let mut unlisted = saved_run();
        unlisted.configs.pop();
        let err = read(&unlisted).expect_err("MultiPin is not listed");
        assert!(matches!(&err, ResultsFileError::UnlistedConfig { config, size: 4096, .. } if config == "MultiPin"), "{err}");
        let mut twice = saved_run();
        twice.measurements.push(twice.measurements[0].clone());
        let err = read(&twice).expect_err("measured twice");
        assert_eq!(err.to_string(), "SinglePin at size 4096 is measured twice");
        let mut ragged = saved_run();
        ragged.pair_matrices[0].gbps[1].pop();
        let err = read(&ragged).expect_err("not square");
        assert!(matches!(err, ResultsFileError::PairMatrixShape { rows: 2, columns: 1, .. }), "{err}");
        assert!(matches!(RunResults::from_json(b"{\"metadata\": 1}"), Err(ResultsFileError::Json(_))));
        assert!(matches!(RunResults::from_json(&[0xff, 0xfe]), Err(ResultsFileError::Json(_))));
    }

    #[test]
    fn gbps_is_bits_over_time() {
        assert!((gbps(1.25e9, 1.0) - 10.0).abs() < 1e-9);
        assert!(gbps(1.0, 0.0).abs() < f64::EPSILON);
    }

    #[test]
    fn telemetry_ab_blocks_go_on_off_off_on_then_the_other_way_and_cycles_alternate_halves() {
        let arms: String = (0..AbArm::ROUND + 4).map(AbArm::of_block).map(|a| if a.on { 'N' } else { 'f' }).collect();
        assert_eq!(arms, "NffNNffNfNNffNNfNffN");
        let halves: Vec<usize> = (0..AbArm::ROUND).step_by(4).map(|b| AbArm::of_block(b).half).collect();
        assert_eq!(halves, [0, 1, 0, 1]);
        // Over a round, each arm holds each place twice, and each half both orders.
        for position in 0..4 {
            let on = (0..AbArm::ROUND).map(AbArm::of_block).filter(|a| a.position == position && a.on).count();
            assert_eq!(on, 2, "place {position}");
        }
        for half in 0..2 {
            let first: Vec<bool> = (0..AbArm::ROUND).map(AbArm::of_block).filter(|a| a.half == half && a.position == 0).map(|a| a.on).collect();
            assert_eq!(first, [true, false], "half {half}");
        }
    }

    #[test]
    fn a_unit_holds_each_arm_at_each_place_once_and_its_cost_is_telemetrys_alone() {
        // Units pair a cycle with the cycle of the other order two after it: 0 with 2, 1 with 3, 4 with 6...
        let units: Vec<usize> = (0..8 * AbArm::CYCLE).step_by(4).map(|b| AbArm::of_block(b).unit).collect();
        assert_eq!(units, [0, 1, 0, 1, 2, 3, 2, 3]);
        for unit in 0..4 {
            let arms: Vec<AbArm> = (0..8 * AbArm::CYCLE).map(AbArm::of_block).filter(|a| a.unit == unit).collect();
            assert_eq!(arms.len() as u64, AbArm::UNIT);
            for position in 0..4 {
                assert_eq!(arms.iter().filter(|a| a.position == position && a.on).count(), 1, "unit {unit} place {position}");
            }
        }
        // Three whole units and part of a fourth; every on block 1 % slower, and the fourth place of each
        // cycle 5 % faster whatever its arm: a unit's cost holds telemetry's alone.
        let mut tally = AbTally::default();
        for block in 0..3 * AbArm::UNIT + 4 {
            let arm = AbArm::of_block(block);
            let seconds = if arm.on { 1.01 } else { 1.0 } * if arm.position == 3 { 0.95 } else { 1.0 };
            tally.add(arm, 1e9, seconds);
        }
        let ab = tally.result(1, 3 * AbArm::UNIT + 4);
        assert_eq!(ab.unit_gbps.len(), 3, "the cut-short unit is left out: {ab:?}");
        for [on, off] in &ab.unit_gbps {
            assert!((1.0 - on / off - (1.0 - 1.0 / 1.01)).abs() < 1e-12, "a unit's cost is telemetry's alone: {ab:?}");
        }
        // The units travel in the file and are left out of it when there are none.
        let back: TelemetryAb = serde_json::from_str(&serde_json::to_string(&ab).expect("json")).expect("back");
        assert_eq!(back, ab);
        assert!(!serde_json::to_string(&AbTally::default().result(1, 0)).expect("json").contains("unit_gbps"));
    }

    #[test]
    fn telemetry_ab_rates_are_each_arms_bytes_over_its_time() {
        let mut tally = AbTally::default();
        // Two cycles of 1 GB blocks: on blocks take 0.101 s, off ones 0.1 s; the odd cycle's off blocks 0.098 s.
        for block in 0..8 {
            let arm = AbArm::of_block(block);
            let seconds = if arm.on { 0.101 } else if arm.half == 0 { 0.1 } else { 0.098 };
            tally.add(arm, 1e9, seconds);
        }
        let mut both = AbTally::default();
        both.merge(&tally);
        both.merge(&tally);
        let ab = both.result(5, 8);
        assert_eq!((ab.block_iterations, ab.blocks), (5, 8));
        assert!((ab.on_gbps - 8.0 / 0.101).abs() < 1e-9, "{ab:?}");
        assert!((ab.off_gbps - 8.0 * 4.0 / (2.0 * 0.1 + 2.0 * 0.098)).abs() < 1e-9, "{ab:?}");
        assert!((ab.off_halves_gbps[0] - 80.0).abs() < 1e-9 && (ab.off_halves_gbps[1] - 8.0 / 0.098).abs() < 1e-9);
        assert!((ab.cost() - (1.0 - ab.on_gbps / ab.off_gbps)).abs() < 1e-12 && ab.cost() > 0.0);
        // The on halves agree; the off halves differ by 2%: that is the noise this step shows.
        assert!((ab.noise() - (1.0 - 0.1 / 0.098)).abs() < 1e-9, "{}", ab.noise());
        // An arm with no time has no rate rather than an infinite one; the file never holds NaN.
        let empty = AbTally::default().result(1, 0);
        assert_eq!((empty.on_gbps, empty.off_gbps), (0.0, 0.0));
        assert!(empty.cost().is_nan());
        let text = serde_json::to_string(&empty).expect("json");
        assert_eq!(serde_json::from_str::<TelemetryAb>(&text).expect("back"), empty);
    }
}
