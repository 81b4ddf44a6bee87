//! The experiments' flags: what every experiment shares ([`CommonArgs`]), each one's own, and the
//! subcommand list ([`Experiment`]). What each flag does is the experiment's (`crate::experiment`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use efatop_experiments::{ChannelCount, ProviderChoice};
use efatop_fabric::Provider;
use efatop_proto::column::{Layout, ProxyLayout};
use efatop_proto::sizes;

use crate::parse::{parse_listen_address, parse_serve, parse_size_arg, whole_number};

/// The experiments, each a subcommand (`efatop <name>`, and `efatop run --ranks N <name>`); what a rank asks of
/// each is its `Descriptor` (`crate::experiment`).
#[derive(Debug, clap::Subcommand)]
pub enum Experiment {
    /// One-sided RDMA WRITE with immediate data, rank 0 → ranks 1..N-1 (Single, Multi, `RoundRobin`)
    Write(WriteArgs),
    /// Two-sided SEND/RECV ping-pong between rank 0 and each rank k
    Sendrecv(SendrecvArgs),
    /// Every rank writes its buffer to every other rank at once (RDMA WRITE with immediate data)
    Alltoall(AlltoallArgs),
    /// GPU-initiated RDMA WRITEs through a CPU proxy, rank 0's GPU → rank 1 (blocking and NBI)
    Proxy(ProxyArgs),
    /// NVLink writes through CUDA IPC, rank 0's GPU → rank 1's (store kernel grid × block, and the copy engine)
    Ipc(IpcArgs),
    /// Find the slow NIC, link or node of a fleet: every rank pair, rail by rail; exit code 3 when something is suspect
    Sweep(SweepArgs),
}

/// `--provider`: `auto`, one of [`Provider::KNOWN`], or any other provider name `fi_info -l` lists.
fn parse_provider(text: &str) -> Result<ProviderChoice, String> {
    if text == "auto" {
        return Ok(ProviderChoice::Auto);
    }
    Provider::parse(text).map(ProviderChoice::Given).ok_or_else(|| {
        format!("`{text}` is not a provider name; use auto, {}, or another name `fi_info -l` lists", Provider::KNOWN.join(", "))
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MemoryArg {
    /// pinned (page-locked) host memory
    Host,
    /// GPU memory (registered with the NIC where the provider can, else staged through pinned host memory)
    Device,
    /// GPU memory always staged through pinned host memory (columns `...DMA(staged)`), beside `device`
    /// to compare the two paths in one run
    Staged,
}

/// `--json-samples`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JsonSamplesArg {
    /// `sample` lines up to 32768 channels, `rail` lines beyond
    Auto,
    /// a `sample` line per channel whatever the run's size
    Every,
    /// `rail` lines (per host and rail, every interval) whatever the run's size
    Rails,
}

/// `--completion`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompletionArg {
    /// delivery on tcp and sockets, the provider's default elsewhere
    Auto,
    /// the provider's default
    Transmit,
    /// `FI_DELIVERY_COMPLETE`: once the peer has the bytes
    Delivery,
}

impl From<CompletionArg> for efatop_experiments::world::CompletionChoice {
    fn from(arg: CompletionArg) -> Self {
        match arg {
            CompletionArg::Auto => Self::Auto,
            CompletionArg::Transmit => Self::Transmit,
            CompletionArg::Delivery => Self::Delivery,
        }
    }
}

#[derive(Debug, Clone, Args)]
#[allow(clippy::struct_excessive_bools)] // command-line switches
pub struct CommonArgs {
    /// libfabric provider: auto (efa when every rank has it, else shm when all ranks share a host, else
    /// tcp), efa (the efa fabric), efa-direct, shm, tcp, udp (rxd over UDP), sockets (milliseconds per
    /// transfer: not for benchmarking), or any other provider `fi_info -l` lists
    #[arg(long, default_value = "auto", value_parser = parse_provider)]
    pub provider: ProviderChoice,
    /// On efa, let same-host peers use libfabric's shared-memory shortcut (measures shm, not the NIC);
    /// same-host pairs are then marked in tables and results
    #[arg(long)]
    pub allow_shm: bool,
    /// Channels per rank (one endpoint each, on its own NIC where there are enough): a count or `all`
    #[arg(long, default_value = "1", value_parser = parse_channels)]
    pub channels: ChannelCount,
    /// Smallest message size, a power of two (K, M, G suffixes) [default: 4K; proxy: 8M, as its seed; ipc: 1M]
    #[arg(long, value_parser = parse_size_arg)]
    pub min_size: Option<u64>,
    /// Largest message size, a power of two (K, M, G suffixes) [default: 64M; proxy and ipc: 1G]
    #[arg(long, value_parser = parse_size_arg)]
    pub max_size: Option<u64>,
    /// Untimed iterations before each size
    #[arg(long, default_value_t = 3, value_parser = whole_number::<u64>(0..=1_000_000))]
    pub warmup: u64,
    /// Timed iterations per size and pair
    #[arg(long, default_value_t = 20, value_parser = whole_number::<u64>(1..=1_000_000))]
    pub iters: u64,
    /// Memory the benchmark moves; `host,device` runs both, their columns side by side
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [MemoryArg::Host])]
    pub memory: Vec<MemoryArg>,
    /// GPU for --memory device: an index, or `auto` for this rank's local rank
    #[arg(long, default_value = "auto", value_parser = parse_gpu)]
    pub gpu: GpuChoice,
    /// Stage GPU memory through pinned host memory even where the provider registers it natively
    /// (`--memory device` becomes `staged`; the proxy uses its staging pipeline)
    #[arg(long)]
    pub staged: bool,
    /// Do not pin each rank's threads (its hot thread alone on one CPU of its GPU's NUMA node, the others on the rest)
    #[arg(long)]
    pub no_pin: bool,
    /// Iterations kept in flight per pair; 1 times each operation alone, as the seed tables do
    #[arg(long, default_value_t = 1, value_parser = whole_number::<u16>(1..=1024))]
    pub window: u16,
    /// When a write or send counts as complete: auto (delivery on tcp and sockets, whose own completion only
    /// means the kernel took the bytes; the provider's default elsewhere), transmit (the provider's default),
    /// or delivery (`FI_DELIVERY_COMPLETE`: once the peer has the bytes)
    #[arg(long, value_enum, default_value_t = CompletionArg::Auto)]
    pub completion: CompletionArg,
    /// Link speed per channel in Gbps for `BusBW`, instead of what the provider reports
    #[arg(long, value_parser = parse_link_gbps, allow_hyphen_values = true)]
    pub link_gbps: Option<f64>,
    /// Results file (JSON, rewritten after every size); default efatop-results/<experiment>-<UTC time>-<pid>.json
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seconds an operation may take before its rank is reported as hung
    #[arg(long, default_value_t = 30, value_parser = crate::parse::seconds(1..=3600))]
    pub timeout: u64,
    /// Seconds a rank may send no telemetry (no sample, no progress) before rank 0 names it hung; a rank
    /// that exits is named at once whatever this says
    #[arg(long, default_value_t = 60, value_parser = crate::parse::seconds(1..=86_400))]
    pub hang_timeout: u64,
    /// Print JSON lines to stdout (samples, per-size results, a final summary) instead of tables
    #[arg(long, conflicts_with = "no_tui")]
    pub json: bool,
    /// With --json, what telemetry becomes: `auto`, a `sample` line per channel up to 32768 channels (ranks ×
    /// channels) and `rail` lines beyond (per host and rail, every interval); `every`, a `sample` line per
    /// channel whatever the size; `rails`, `rail` lines whatever the size
    #[arg(long, value_enum, default_value_t = JsonSamplesArg::Auto)]
    pub json_samples: JsonSamplesArg,
    /// Print plain tables even on a terminal (the dashboard never starts when stdout is not a terminal)
    #[arg(long)]
    pub no_tui: bool,
    /// Telemetry sampling interval, e.g. 100ms or 1s (10ms to 10s)
    #[arg(long, default_value = "100ms", value_parser = crate::parse::duration("an interval", Duration::from_millis(10), Duration::from_secs(10), "100ms or 1s"))]
    pub interval: Duration,
    /// Do not sample or stream telemetry (for measuring what telemetry costs)
    #[arg(long)]
    pub no_telemetry: bool,
    /// Measuring aid (scripts/bench/bench-telemetry-cost): each size's timed iterations in blocks of BLOCK, every
    /// rank's telemetry sampler paused in every other block (on, off, off, on, then the other way round), and
    /// both rates in the results file (`telemetry_ab`); write and alltoall, --iters a multiple of 16 × BLOCK.
    /// With --no-telemetry there is nothing to pause: the same blocks, whose arms differ by the method alone
    #[arg(long, hide = true, value_name = "BLOCK", value_parser = whole_number::<u64>(1..=1_000_000))]
    pub telemetry_ab: Option<u64>,
    /// Rank 0 serves the run's events to `efatop attach` viewers at ADDR: IP:PORT, or a port on 127.0.0.1
    /// (another address is served beyond this host, and the header says so); port 0 picks a free port and
    /// prints it
    #[arg(long, value_name = "ADDR", value_parser = parse_serve)]
    pub serve: Option<SocketAddr>,
    /// Rank 0 records the run's events, timestamped and compressed, into FILE for `efatop replay`
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Rank 0 serves the run (per-channel bytes and rates, p50/p99 per channel and rank, its state) for
    /// Prometheus at /metrics on ADDR while it runs, and its final figures for 5 s after it ends so that a
    /// last scrape gets them, e.g. 127.0.0.1:9401
    #[arg(long, value_name = "ADDR", value_parser = parse_listen_address)]
    pub prometheus: Option<SocketAddr>,
    /// At the end, rank 0 pushes the run's final per-channel byte totals and how it ended to the Prometheus
    /// Pushgateway at URL (http://HOST:PORT or https://HOST:PORT), as job `efatop`, instance rank 0's host; a
    /// failed push is a warning
    #[arg(long, value_name = "URL", value_parser = efatop_runtime::run_metrics::Pushgateway::parse)]
    pub pushgateway: Option<efatop_runtime::run_metrics::Pushgateway>,
    /// --pushgateway's HTTP basic auth: FILE holds `user:password` on one line and only its owner may read
    /// it (else the variable `EFATOP_PUSHGATEWAY_AUTH` holds `user:password`, or the URL does,
    /// `https://user:password@HOST:PORT`, where other users can read it in the process list). Sent only over
    /// https or to a loopback address
    #[arg(long, value_name = "FILE")]
    pub pushgateway_auth: Option<PathBuf>,
    /// --pushgateway `https://...`: trust only the CA certificates in FILE (PEM), e.g. a private CA, instead
    /// of the built-in public roots; /etc/ssl/certs/ca-certificates.crt trusts the system's
    #[arg(long, value_name = "FILE")]
    pub pushgateway_ca: Option<PathBuf>,
    /// Testing aid: read NIC counters under this root (a fake p5 tree from `efatop monitor --write-fake-p5`)
    /// instead of this machine's; the run's notes say so (docs/counters.md)
    #[arg(long, hide = true)]
    pub sysfs_root: Option<PathBuf>,
    /// Testing aid: the NIC of each channel for its counters, e.g. `0=rdmap79s0,1=rdmap80s0`, where the
    /// domain does not name it (docs/counters.md)
    #[arg(long, hide = true, value_parser = efatop_experiments::counters::parse_nic_map)]
    pub nic_map: Option<std::collections::BTreeMap<usize, String>>,
    /// Testing aid: the sender corrupts this byte offset (modulo the size) so verification must fail
    #[arg(long, hide = true)]
    pub debug_corrupt_byte: Option<u64>,
}

/// `--gpu`: an index, or `None` for the rank's local rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuChoice(pub Option<usize>);

fn parse_gpu(text: &str) -> Result<GpuChoice, String> {
    if text.eq_ignore_ascii_case("auto") {
        return Ok(GpuChoice(None));
    }
    text.parse::<usize>()
        .map(|index| GpuChoice(Some(index)))
        .map_err(|_| format!("`{text}` is not a GPU; use an index such as 0, or `auto` (the rank's local rank)"))
}

fn parse_channels(text: &str) -> Result<ChannelCount, String> {
    if text.eq_ignore_ascii_case("all") {
        return Ok(ChannelCount::All);
    }
    match text.parse::<usize>() {
        Ok(n) if (1..=256).contains(&n) => Ok(ChannelCount::Exactly(n)),
        _ => Err(format!("`{text}` is not a channel count; use a number from 1 to 256, or `all`")),
    }
}

fn parse_link_gbps(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 100_000.0 => Ok(v),
        _ => Err(format!("`{text}` is not a link speed; use Gbps above 0, e.g. 100 or 2.5")),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WriteConfigArg {
    Single,
    Multi,
    Roundrobin,
}

impl From<WriteConfigArg> for Layout {
    fn from(arg: WriteConfigArg) -> Self {
        match arg {
            WriteConfigArg::Single => Layout::Single,
            WriteConfigArg::Multi => Layout::Multi,
            WriteConfigArg::Roundrobin => Layout::RoundRobin,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct WriteArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Configurations to run, in this order
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [WriteConfigArg::Single, WriteConfigArg::Multi, WriteConfigArg::Roundrobin])]
    pub configs: Vec<WriteConfigArg>,
}

#[derive(Debug, Clone, Args)]
pub struct SendrecvArgs {
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Debug, Clone, Args)]
pub struct AlltoallArgs {
    #[command(flatten)]
    pub write: WriteArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProxyConfigArg {
    Single,
    Multi,
    #[value(name = "single-nbi")]
    SingleNbi,
    #[value(name = "multi-nbi")]
    MultiNbi,
}

impl From<ProxyConfigArg> for ProxyLayout {
    fn from(arg: ProxyConfigArg) -> Self {
        match arg {
            ProxyConfigArg::Single => ProxyLayout::Single,
            ProxyConfigArg::Multi => ProxyLayout::Multi,
            ProxyConfigArg::SingleNbi => ProxyLayout::SingleNbi,
            ProxyConfigArg::MultiNbi => ProxyLayout::MultiNbi,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct ProxyArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Configurations to run, in this order (blocking: Quiet after each write; NBI: Quiet once at the end)
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [ProxyConfigArg::Single, ProxyConfigArg::Multi, ProxyConfigArg::SingleNbi, ProxyConfigArg::MultiNbi])]
    pub configs: Vec<ProxyConfigArg>,
    /// Largest write the GPU asks for: each channel's share of a size goes out in writes of at most this
    /// size, and blocking configurations Quiet after every one (a power of two, or `whole` for one write
    /// per channel per iteration)
    #[arg(long, default_value = "1M", value_parser = parse_chunk)]
    pub chunk: u64,
}

/// `--chunk`: a size, or `whole` (0).
fn parse_chunk(text: &str) -> Result<u64, String> {
    if text.eq_ignore_ascii_case("whole") {
        return Ok(0);
    }
    sizes::parse_size(text).map_err(|why| format!("{why}; or `whole` for one write per channel per iteration"))
}

#[derive(Debug, Clone, Args)]
#[allow(clippy::struct_excessive_bools)] // command-line switches
pub struct IpcArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Store kernel grids to run (blocks per launch), e.g. 1,16,128
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 16, 128], value_parser = whole_number::<u32>(1..=65_535))]
    pub grid: Vec<u32>,
    /// Store kernel blocks to run (threads per block): multiples of 32 from 32 to 1024
    #[arg(long, value_delimiter = ',', default_values_t = [256u32], value_parser = parse_block)]
    pub block: Vec<u32>,
    /// Sweep every grid 1, 2, 4 … 512 with every block 64, 128 … 1024 (instead of --grid and --block)
    #[arg(long, conflicts_with_all = ["grid", "block"])]
    pub sweep: bool,
    /// Leave out the tuned kernel (`kernel (tuned)`: Hopper bulk copies, one block per SM; else a store kernel
    /// with a resident grid and 8 loads in flight per thread)
    #[arg(long)]
    pub no_tuned: bool,
    /// Leave out the copy-engine baseline (`CE`)
    #[arg(long)]
    pub no_copy_engine: bool,
    /// Put both ranks on one GPU (the first, or --gpu's): the IPC path on a one-GPU machine, or a GPU's
    /// copy rate into its own memory (bytes cross HBM, not NVLink)
    #[arg(long, hide = true)]
    pub same_gpu: bool,
}

fn parse_block(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(block) if (32..=1024).contains(&block) && block % 32 == 0 => Ok(block),
        _ => Err(format!("`{text}` is not a block size; use threads per block, a multiple of 32 from 32 to 1024")),
    }
}

#[derive(Debug, Clone, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Bytes each channel writes per iteration (K, M, G suffixes)
    #[arg(long, default_value = "64M", value_parser = parse_size_arg)]
    pub size: u64,
    /// Only the first ⌈n/2⌉ rounds of the tournament (each rank meets half its peers), then the retests
    #[arg(long)]
    pub quick: bool,
    /// A channel whose best figure with any peer is below this share of its rail's fleet median is suspect
    /// (and below this share of --link-gbps, when given)
    #[arg(long, default_value_t = efatop_sweep::rails::DEFAULT_THRESHOLD, value_parser = parse_threshold)]
    pub threshold: f64,
    /// Skip the cross-rail round (NIC k of one node with NIC k+1 of another), for fabrics whose rails do not
    /// reach each other
    #[arg(long)]
    pub no_cross_rail: bool,
    /// How rank 0 reports the verdict: plain (tables, exit 3 when something is suspect), slurm (a line
    /// `NODE REASON` per suspect node on stdout; the run's tables go to stderr) or npd (one line of at most 80
    /// characters); with slurm and npd the exit code is 0 nothing suspect, 1 suspects, 2 the sweep failed
    #[arg(long, value_enum, default_value_t = SweepFormat::Plain, conflicts_with = "json")]
    pub format: SweepFormat,
    /// With --format slurm: drain every node with a slow NIC (or slow as a whole) with its reason, through
    /// `scontrol update` (links between two nodes are reported, not drained)
    #[arg(long)]
    pub drain: bool,
}

/// `sweep --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SweepFormat {
    /// tables (or the dashboard), exit 3 when something is suspect
    Plain,
    /// a Slurm drain reason per suspect node
    Slurm,
    /// a node-problem-detector line
    Npd,
}

fn parse_threshold(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v > 0.0 && v < 1.0 => Ok(v),
        _ => Err(format!("`{text}` is not a threshold; use a share of the median between 0 and 1, e.g. 0.9")),
    }
}

