//! The command line. Every flag says what it takes; a bad value is refused by clap with the flag's name,
//! the allowed values and exit code 2.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use efatop_experiments::sizes::{self, format_size};
use efatop_experiments::ipc::IpcConfig;
use efatop_experiments::proxy::ProxyConfig;
use efatop_experiments::write::WriteConfig;
use efatop_experiments::{ChannelCount, ProviderChoice};
use efatop_fabric::Provider;

mod tools;

pub use tools::{CompareArgs, MonitorArgs, QueueArgs, ReportArgs, TopoArgs};

#[derive(Debug, Parser)]
#[command(name = "efatop", version, about = "Measure what an EFA / libfabric fabric really delivers, rank by rank")]
#[command(after_help = "Start ranks with `efatop run --ranks N <experiment>` on one host, or under mpirun/srun.")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// One-sided RDMA WRITE with immediate data, rank 0 → ranks 1..N-1 (Single, Multi, `RoundRobin`)
    Write(WriteArgs),
    /// Two-sided SEND/RECV ping-pong between rank 0 and each rank k
    Sendrecv(SendrecvArgs),
    /// Every rank writes its buffer to every other rank at once (RDMA WRITE with immediate data)
    Alltoall(WriteArgs),
    /// GPU-initiated RDMA WRITEs through a CPU proxy, rank 0's GPU → rank 1 (blocking and NBI)
    Proxy(ProxyArgs),
    /// NVLink writes through CUDA IPC, rank 0's GPU → rank 1's (store kernel grid × block, and the copy engine)
    Ipc(IpcArgs),
    /// Find the slow NIC, link or node of a fleet: every rank pair, rail by rail; exit code 3 when something is suspect
    Sweep(SweepArgs),
    /// The GPU→CPU request ring alone (one GPU, no fabric): requests/s and push-to-consume latency
    Queue(QueueArgs),
    /// Start N local ranks of an experiment, no MPI needed
    Run(RunArgs),
    /// Load-test rank 0's telemetry collector with synthetic ranks (a benchmark, not a test)
    #[command(hide = true)]
    BenchCollector(BenchCollectorArgs),
    /// Where GPUs, NICs and CPUs sit (as `nvidia-smi topo -m`), and which NICs a rank on each GPU should use
    Topo(TopoArgs),
    /// Render a saved results file as a table, CSV, Markdown or JSON, and plot it
    Report(ReportArgs),
    /// Compare two saved runs per configuration and size; exit code 1 when one regressed
    Compare(CompareArgs),
    /// Live view of every NIC and GPU link on this node (or several), with no benchmark running
    Monitor(MonitorArgs),
}

#[derive(Debug, Args)]
pub struct BenchCollectorArgs {
    /// Synthetic ranks, one connection each
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub ranks: u32,
    /// Channels per rank
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub channels: u32,
    /// Samples per second per rank
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub hz: u32,
    /// How long to run
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(2..=600))]
    pub seconds: u32,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Number of ranks to start on this host
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub ranks: u16,
    /// Run rank i inside network namespace i (cycling), e.g. the nodes of scripts/emulate-cluster
    #[arg(long, value_delimiter = ',', value_parser = parse_netns)]
    pub netns: Vec<String>,
    #[command(subcommand)]
    pub experiment: Experiment,
}

#[derive(Debug, Subcommand)]
pub enum Experiment {
    /// One-sided RDMA WRITE with immediate data
    Write(WriteArgs),
    /// Two-sided SEND/RECV ping-pong
    Sendrecv(SendrecvArgs),
    /// Every rank writes to every other rank at once
    Alltoall(WriteArgs),
    /// GPU-initiated writes through a CPU proxy
    Proxy(ProxyArgs),
    /// NVLink writes between two GPUs through CUDA IPC
    Ipc(IpcArgs),
    /// Every rank pair, rail by rail, then a verdict naming the slow NIC, link or node (exit code 3)
    Sweep(SweepArgs),
}

/// `sweep`'s exit code when its verdict names a suspect (0: none; 1 stays "the run failed", 2 "bad input").
pub const SUSPECTS_FOUND: i32 = 3;

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
    #[arg(long, default_value_t = 0.9, value_parser = parse_threshold)]
    pub threshold: f64,
}

fn parse_threshold(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v > 0.0 && v < 1.0 => Ok(v),
        _ => Err(format!("`{text}` is not a threshold; use a share of the median between 0 and 1, e.g. 0.9")),
    }
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WriteConfigArg {
    Single,
    Multi,
    Roundrobin,
}

impl From<WriteConfigArg> for WriteConfig {
    fn from(arg: WriteConfigArg) -> Self {
        match arg {
            WriteConfigArg::Single => WriteConfig::Single,
            WriteConfigArg::Multi => WriteConfig::Multi,
            WriteConfigArg::Roundrobin => WriteConfig::RoundRobin,
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
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub warmup: u64,
    /// Timed iterations per size and pair
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
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
    /// Do not pin each rank to the CPUs of its GPU's NUMA node
    #[arg(long)]
    pub no_pin: bool,
    /// Iterations kept in flight per pair; 1 times each operation alone, as the seed tables do
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub window: u16,
    /// Link speed per channel in Gbps for `BusBW`, instead of what the provider reports
    #[arg(long, value_parser = parse_link_gbps, allow_hyphen_values = true)]
    pub link_gbps: Option<f64>,
    /// Results file (JSON, rewritten after every size); default efatop-results/<experiment>-<UTC time>-<pid>.json
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seconds an operation may take before its rank is reported as hung
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout: u64,
    /// Seconds a rank may send no telemetry (no sample, no progress) before rank 0 names it hung; a rank
    /// that exits is named at once whatever this says
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub hang_timeout: u64,
    /// Print JSON lines to stdout (samples, per-size results, a final summary) instead of tables
    #[arg(long, conflicts_with = "no_tui")]
    pub json: bool,
    /// Print plain tables even on a terminal (the dashboard never starts when stdout is not a terminal)
    #[arg(long)]
    pub no_tui: bool,
    /// Telemetry sampling interval, e.g. 100ms or 1s (10ms to 10s)
    #[arg(long, default_value = "100ms", value_parser = parse_interval)]
    pub interval: std::time::Duration,
    /// Do not sample or stream telemetry (for measuring what telemetry costs)
    #[arg(long)]
    pub no_telemetry: bool,
    /// Testing aid: the sender corrupts this byte offset (modulo the size) so verification must fail
    #[arg(long, hide = true)]
    pub debug_corrupt_byte: Option<u64>,
}

#[derive(Debug, Clone, Args)]
pub struct WriteArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Configurations to run, in this order
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [WriteConfigArg::Single, WriteConfigArg::Multi, WriteConfigArg::Roundrobin])]
    pub configs: Vec<WriteConfigArg>,
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

impl From<ProxyConfigArg> for ProxyConfig {
    fn from(arg: ProxyConfigArg) -> Self {
        match arg {
            ProxyConfigArg::Single => ProxyConfig::Single,
            ProxyConfigArg::Multi => ProxyConfig::Multi,
            ProxyConfigArg::SingleNbi => ProxyConfig::SingleNbi,
            ProxyConfigArg::MultiNbi => ProxyConfig::MultiNbi,
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
pub struct IpcArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Store kernel grids to run (blocks per launch), e.g. 1,16,128
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 16, 128], value_parser = clap::value_parser!(u32).range(1..=65_535))]
    pub grid: Vec<u32>,
    /// Store kernel blocks to run (threads per block): multiples of 32 from 32 to 1024
    #[arg(long, value_delimiter = ',', default_values_t = [256u32], value_parser = parse_block)]
    pub block: Vec<u32>,
    /// Sweep every grid 1, 2, 4 … 512 with every block 64, 128 … 1024 (instead of --grid and --block)
    #[arg(long, conflicts_with_all = ["grid", "block"])]
    pub sweep: bool,
    /// Leave out the copy-engine baseline (`CE`)
    #[arg(long)]
    pub no_copy_engine: bool,
    /// Let both ranks use one GPU: checks the IPC path on a one-GPU machine (bytes cross HBM, not NVLink)
    #[arg(long, hide = true)]
    pub same_gpu: bool,
}

impl IpcArgs {
    /// The kernel configurations in column order (grid-major), then the copy engine.
    pub fn configs(&self) -> Vec<IpcConfig> {
        let (grids, blocks): (Vec<u32>, Vec<u32>) = if self.sweep {
            ((0..=9).map(|p| 1 << p).collect(), (6..=10).map(|p| 1 << p).collect())
        } else {
            (self.grid.clone(), self.block.clone())
        };
        let mut configs: Vec<IpcConfig> =
            grids.iter().flat_map(|&grid| blocks.iter().map(move |&block| IpcConfig::kernel(grid, block))).collect();
        configs.dedup();
        if !self.no_copy_engine {
            configs.push(IpcConfig::COPY_ENGINE);
        }
        configs
    }
}

fn parse_block(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(block) if (32..=1024).contains(&block) && block % 32 == 0 => Ok(block),
        _ => Err(format!("`{text}` is not a block size; use threads per block, a multiple of 32 from 32 to 1024")),
    }
}

#[derive(Debug, Clone, Args)]
pub struct SendrecvArgs {
    #[command(flatten)]
    pub common: CommonArgs,
}

impl Experiment {
    pub fn common(&self) -> &CommonArgs {
        match self {
            Experiment::Write(args) | Experiment::Alltoall(args) => &args.common,
            Experiment::Sendrecv(args) => &args.common,
            Experiment::Proxy(args) => &args.common,
            Experiment::Ipc(args) => &args.common,
            Experiment::Sweep(args) => &args.common,
        }
    }

    /// The sweep's smallest and largest size: the flags, else the experiment's defaults. The proxy's seed
    /// table runs 8M..1G (below that its staged shm figures are about per-request overhead, not the
    /// pipeline); ipc's 1M..1G (NVLink needs large sizes to fill); every other experiment's 4K..64M.
    pub fn sizes(&self) -> (u64, u64) {
        let common = self.common();
        let (min, max) = match self {
            Experiment::Proxy(_) => (8 << 20, 1 << 30),
            Experiment::Ipc(_) => (1 << 20, 1 << 30),
            // One size, --size.
            Experiment::Sweep(args) => return (args.size, args.size),
            _ => (4 << 10, 64 << 20),
        };
        // With one end given, the other default gives way rather than empty the sweep.
        let max = common.max_size.unwrap_or_else(|| max.max(common.min_size.unwrap_or(0)));
        let min = common.min_size.unwrap_or_else(|| min.min(max));
        (min, max)
    }

    pub fn name(&self) -> &'static str {
        match self {
            Experiment::Write(_) => "write",
            Experiment::Sendrecv(_) => "sendrecv",
            Experiment::Alltoall(_) => "alltoall",
            Experiment::Proxy(_) => "proxy",
            Experiment::Ipc(_) => "ipc",
            Experiment::Sweep(_) => "sweep",
        }
    }
}

fn parse_size_arg(text: &str) -> Result<u64, String> {
    sizes::parse_size(text)
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

fn parse_netns(text: &str) -> Result<String, String> {
    let path = std::path::Path::new("/var/run/netns").join(text);
    if text.is_empty() || text.contains('/') || !path.exists() {
        return Err(format!("`{text}` is not a network namespace in /var/run/netns (see `ip netns list`)"));
    }
    Ok(text.to_string())
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

fn parse_interval(text: &str) -> Result<std::time::Duration, String> {
    let trimmed = text.trim();
    let millis = if let Some(ms) = trimmed.strip_suffix("ms") {
        ms.parse::<u64>().ok()
    } else if let Some(s) = trimmed.strip_suffix('s') {
        s.parse::<u64>().ok().and_then(|s| s.checked_mul(1000))
    } else {
        trimmed.parse::<u64>().ok()
    };
    match millis {
        Some(ms) if (10..=10_000).contains(&ms) => Ok(std::time::Duration::from_millis(ms)),
        _ => Err(format!("`{text}` is not an interval; use 10ms to 10s, e.g. 100ms or 1s")),
    }
}

fn parse_link_gbps(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 100_000.0 => Ok(v),
        _ => Err(format!("`{text}` is not a link speed; use Gbps above 0, e.g. 100 or 2.5")),
    }
}

/// Checks that need more than one flag; returns the one-line message for exit code 2.
/// What clap cannot check alone, for one experiment: checked by the launcher before any rank starts (one
/// line, not one per rank) and by each rank under MPI.
pub fn validate_experiment(experiment: &Experiment) -> Result<(), String> {
    let (min, max) = experiment.sizes();
    if min > max {
        return Err(format!("--min-size {} is larger than --max-size {}", format_size(min), format_size(max)));
    }
    if let Experiment::Ipc(args) = experiment {
        if args.common.memory != [MemoryArg::Host] {
            return Err("--memory: ipc always moves GPU memory; leave --memory out".into());
        }
    }
    if let Experiment::Sweep(args) = experiment {
        if args.common.min_size.is_some() || args.common.max_size.is_some() {
            let flag = if args.common.min_size.is_some() { "--min-size" } else { "--max-size" };
            return Err(format!("{flag}: sweep writes one size; use --size"));
        }
        if args.common.window > 1 {
            return Err(format!("--window {}: sweep keeps one write in flight per channel, so it takes 1", args.common.window));
        }
        if args.common.memory.len() > 1 {
            return Err("--memory: sweep moves one kind of memory; use host, device or staged".into());
        }
    }
    if matches!(experiment, Experiment::Alltoall(_)) && experiment.common().window > 1 {
        return Err(format!(
            "--window {}: alltoall times each iteration as a whole (every rank's writes and immediates), so it takes 1",
            experiment.common().window
        ));
    }
    Ok(())
}


#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn sizes(args: &[&str]) -> (u64, u64) {
        let cli = Cli::try_parse_from(std::iter::once("efatop").chain(args.iter().copied())).expect("parses");
        match cli.command {
            Command::Proxy(args) => Experiment::Proxy(args).sizes(),
            Command::Write(args) => Experiment::Write(args).sizes(),
            Command::Ipc(args) => Experiment::Ipc(args).sizes(),
            _ => unreachable!("only proxy, write and ipc here"),
        }
    }

    #[test]
    fn proxy_sweeps_the_seeds_sizes_unless_told_and_the_others_keep_theirs() {
        const K: u64 = 1 << 10;
        const M: u64 = 1 << 20;
        assert_eq!(sizes(&["proxy"]), (8 * M, 1024 * M));
        assert_eq!(sizes(&["write"]), (4 * K, 64 * M));
        assert_eq!(sizes(&["proxy", "--min-size", "64K", "--max-size", "256M"]), (64 * K, 256 * M));
        // One end given: the other default, unless that would leave nothing to sweep.
        assert_eq!(sizes(&["proxy", "--max-size", "4M"]), (4 * M, 4 * M));
        assert_eq!(sizes(&["proxy", "--min-size", "64M"]), (64 * M, 1024 * M));
        assert_eq!(sizes(&["write", "--min-size", "1G"]), (1024 * M, 1024 * M));
        assert_eq!(sizes(&["write", "--max-size", "1M"]), (4 * K, M));
        assert_eq!(sizes(&["ipc"]), (M, 1024 * M));
    }
}
