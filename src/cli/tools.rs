//! The arguments of the tools beside the benchmarks: `queue`, `topo`, `report`, `compare`, `monitor`,
//! `package-files`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use efatop_report::{Format, parse_threshold};

use crate::parse::whole_number;

#[derive(Debug, Clone, Args)]
pub struct QueueArgs {
    /// GPU whose kernel pushes the requests
    #[arg(long, default_value_t = 0)]
    pub gpu: usize,
    /// Producer blocks to try (the kernel's grid)
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 8, 64, 132], value_parser = whole_number::<u32>(1..=65536))]
    pub blocks: Vec<u32>,
    /// Producer threads per block to try
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 32, 256], value_parser = whole_number::<u32>(1..=1024))]
    pub threads: Vec<u32>,
    /// Requests per shape in the open-loop (requests/s) pass; each producer pushes at least 16
    #[arg(long, default_value_t = 1 << 20, value_parser = whole_number::<u64>(1..=1 << 32))]
    pub requests: u64,
    /// Requests per shape in the closed-loop (latency) pass; each producer pushes at least 4
    #[arg(long, default_value_t = 1 << 16, value_parser = whole_number::<u64>(1..=1 << 28))]
    pub latency_requests: u64,
    /// Ring slots (a power of two); producers wait when the consumer is this far behind
    #[arg(long, default_value_t = 1024, value_parser = parse_slots)]
    pub slots: u64,
    /// Seconds without a request before the run is declared hung
    #[arg(long, default_value_t = 30, value_parser = crate::parse::seconds(1..=3600))]
    pub timeout: u64,
    /// How GPU producers push: `warp` (one claim and one waiter per warp, the head mirrored in GPU memory)
    /// or `seed` (the first design: every thread claims and polls host memory), for comparisons
    #[arg(long, value_enum, default_value_t = RingArg::Warp)]
    pub ring: RingArg,
    /// One JSON object per shape instead of a table
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RingArg {
    Warp,
    Seed,
}

fn parse_slots(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(n) if n.is_power_of_two() && (2..=1 << 20).contains(&n) => Ok(n),
        _ => Err(format!("`{text}` is not a ring size; use a power of two from 2 to 1048576")),
    }
}

#[derive(Debug, Args)]
pub struct TopoArgs {
    /// Read an hwloc XML topology (`lstopo --of xml`, or topology/fixtures/*.xml) instead of this machine's
    #[arg(long, value_name = "FILE")]
    pub from_xml: Option<PathBuf>,
    /// Print the topology as JSON instead of text
    #[arg(long)]
    pub json: bool,
    /// Also show where N local ranks would run: GPU = local rank, the NICs nearest it, its NUMA node's CPUs
    #[arg(long, value_name = "N", value_parser = whole_number::<u16>(1..=4096), conflicts_with = "gpu")]
    pub ranks: Option<u16>,
    /// Also show where a rank on this GPU would run
    #[arg(long, value_name = "INDEX")]
    pub gpu: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// the header and seed-layout table a run prints
    Table,
    /// one row per configuration and size, every field
    Csv,
    /// metadata and one table per configuration
    Md,
    /// the results file, pretty-printed
    Json,
}

impl From<FormatArg> for Format {
    fn from(arg: FormatArg) -> Self {
        match arg {
            FormatArg::Table => Format::Table,
            FormatArg::Csv => Format::Csv,
            FormatArg::Md => Format::Markdown,
            FormatArg::Json => Format::Json,
        }
    }
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A results file written by a run (`--out`, or ./efatop-results/)
    pub results: PathBuf,
    /// How to print the run
    #[arg(long, value_enum, default_value_t = FormatArg::Table)]
    pub format: FormatArg,
    /// Also draw bandwidth and latency against size (and all-to-all pair heatmaps) into this PNG; the data
    /// drawn goes to PATH.json beside it
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The baseline results file (with --expected: the one run to judge)
    pub baseline: PathBuf,
    /// The results file to judge against the baseline (not with --expected)
    pub candidate: Option<PathBuf>,
    /// A drop in bandwidth, or a rise in p50 latency, beyond this percentage is a regression (exit code 1);
    /// default 5%, with --expected 10% (a figure under 90% of its published one)
    #[arg(long, value_name = "PCT", value_parser = parse_threshold)]
    pub threshold: Option<f64>,
    /// Judge one run against the published reference figures of its instance type (docs/expected.md)
    #[arg(long)]
    pub expected: bool,
    /// With --expected: the instance type whose figures to use instead of the one the run recorded
    #[arg(long, value_name = "TYPE")]
    pub instance_type: Option<String>,
    /// Compare runs of different experiments (write against sendrecv, ...) instead of refusing
    #[arg(long)]
    pub allow_different: bool,
}

#[derive(Debug, Args)]
pub struct MonitorArgs {
    /// Time between reads, e.g. 500ms, 1s, 2.5s (10ms to 60s); rates are the change over it
    #[arg(long, default_value = "1s", value_name = "DURATION", value_parser = crate::parse::duration("an interval", Duration::from_millis(10), Duration::from_secs(60), "500ms or 1s"))]
    pub interval: Duration,
    /// Read twice, --interval apart, print one snapshot with rates and exit
    #[arg(long)]
    pub once: bool,
    /// Print a JSON `snapshot` line per read (docs/output.md), instead of drawing
    #[arg(long)]
    pub json: bool,
    /// Stop after N snapshots (without --once: the first one, which has no rates, counts)
    #[arg(long, value_name = "N", value_parser = whole_number::<u64>(1..=1_000_000_000))]
    pub count: Option<u64>,
    /// Read sysfs under this directory instead of / (a fake tree: scripts/fixtures/make-fake-sysfs)
    #[arg(long, value_name = "PATH", default_value = "/")]
    pub sysfs_root: PathBuf,
    /// Place NICs next to GPUs by this hwloc XML topology (e.g. topology/fixtures/p5.48xlarge.xml) instead
    /// of this machine's
    #[arg(long, value_name = "FILE")]
    pub topology_xml: Option<PathBuf>,
    /// Show only NICs whose name (or `gpuN`) contains one of these comma-separated words
    #[arg(long, value_name = "WORDS", default_value = "")]
    pub filter: String,
    /// Other hosts to watch: not supported (efatop starts no remote processes); start one monitor per node
    /// with mpirun or srun instead, and rank 0 shows every node
    #[arg(long, value_name = "HOSTS", value_delimiter = ',')]
    pub hosts: Vec<String>,
    /// Start N monitors on this machine as if each were a node (to try the many-node view on one machine;
    /// `{rank}` in --sysfs-root gives each its own tree)
    #[arg(long, value_name = "N", value_parser = whole_number::<u16>(2..=256))]
    pub ranks: Option<u16>,
    /// Serve the monitor's reads to `efatop attach` viewers at ADDR (IP:PORT, or a port on 127.0.0.1; port
    /// 0 picks one and prints it); one node (not with mpirun/srun)
    #[arg(long, value_name = "ADDR", value_parser = crate::parse::parse_serve)]
    pub serve: Option<std::net::SocketAddr>,
    /// Record the monitor's reads, timestamped and compressed, into FILE for `efatop replay`; one node
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Serve the counters, rates and rail balance for Prometheus at /metrics on ADDR, e.g. 127.0.0.1:9400
    /// or 0.0.0.0:9400; see docs/counters.md
    #[arg(long, value_name = "ADDR", value_parser = crate::parse::parse_listen_address)]
    pub prometheus: Option<std::net::SocketAddr>,
    /// Write a fake p5.48xlarge sysfs tree (32 EFA, lo, eth0, DMI product name) under DIR and exit
    #[arg(long, value_name = "DIR", hide = true)]
    pub write_fake_p5: Option<PathBuf>,
}

/// `efatop package-files` (hidden): what scripts/build/package installs beside the binary.
#[derive(Debug, clap::Args)]
pub struct PackageFilesArgs {
    /// Directory to create, with man/ (one page per command, `efatop-run-write.1` for `efatop run write`)
    /// and completions/ (bash, zsh, fish); it must not exist yet
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}
