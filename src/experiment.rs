//! The experiments this binary runs, each described once: its flags (clap), the defaults and checks that
//! depend on it, the columns it fills, what it needs of the world, and how it runs. [`Descriptor`] is
//! what a rank asks of an experiment; the [`register!`] list at the bottom is the one place that names
//! them, so a new benchmark is one module under `src/experiment/` plus one line there.
//!
//! The flags every experiment shares ([`CommonArgs`]) live here too: they are the experiments', and the
//! rest of the command line (`cli.rs`) builds on them.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use efatop_experiments::payload::MemoryChoice;
use efatop_proto::column::Column;
use efatop_proto::results::{RankPlacement, RunMetadata};
use efatop_proto::sizes::{self, format_size};
use efatop_experiments::{ChannelCount, ProviderChoice, World};
use efatop_fabric::{Capabilities, Provider};

mod alltoall;
mod ipc;
mod proxy;
mod sendrecv;
mod sweep;
mod write;

pub use alltoall::AlltoallArgs;
pub use ipc::IpcArgs;
pub use proxy::ProxyArgs;
pub use sendrecv::SendrecvArgs;
pub use sweep::{SweepArgs, SweepFormat};
pub use write::WriteArgs;

/// What a rank needs to know of an experiment, apart from the flags every experiment shares.
pub trait Descriptor {
    /// Which experiment it is; its name is the subcommand's, the results file's `experiment` and its
    /// default file name.
    fn kind(&self) -> efatop_proto::Experiment;
    fn common(&self) -> &CommonArgs;
    /// The sweep's smallest and largest size when the flags name none.
    fn default_sizes(&self) -> (u64, u64) {
        (4 << 10, 64 << 20)
    }
    /// What its channels must carry.
    fn capabilities(&self) -> Capabilities {
        Capabilities::MESSAGES_AND_WRITE
    }
    /// Its writer is a GPU whatever `--memory` says (the proxy's kernel, ipc's stores).
    fn always_gpu(&self) -> bool {
        false
    }
    /// The GPU every rank opens, given `--gpu` (`None`: auto, each rank its local rank's).
    fn gpu_index(&self, chosen: Option<usize>) -> Option<usize> {
        chosen
    }
    /// Receiving ranks may have a provider copy into their GPU memory. libfabric's shm (CUDA IPC protocol)
    /// copies with `cudaMemcpy` device→device, which returns before the copy is done (CUDA's documented
    /// behaviour for device→device), and then completes the write: the initiator's completion and the
    /// target's immediate would come before the data lands, and bandwidth would be a rate of queuing
    /// (libfabric issue 11231). The launcher then runs the receiving ranks with `CUDA_LAUNCH_BLOCKING=1`,
    /// so those copies return once done (an explicit `CUDA_LAUNCH_BLOCKING` is left as it is).
    fn copies_into_gpu_memory(&self) -> bool {
        true
    }
    /// Rank 0's writer is a persistent GPU kernel whose launch must not block (left out of the above).
    fn persistent_writer_kernel(&self) -> bool {
        false
    }
    /// Flag combinations clap cannot check alone: the one-line message for exit code 2.
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
    /// The results columns, named before memory is set up (the experiment renames them once it is).
    fn columns(&self) -> Vec<Column>;
    /// It reports per-pair matrices (all-to-all).
    fn pair_matrices(&self) -> bool {
        false
    }
    /// The memories its columns move, from `--memory` and `--staged`.
    fn memories(&self, gpu: usize) -> Vec<MemoryChoice> {
        memories_from_flags(self.common(), gpu)
    }
    /// Before the first size, with every rank's placement known: what the results file's metadata should
    /// say about this experiment (notes, the link its `BusBW` is against), and the run itself, ready to go.
    fn plan<'a>(&'a self, world: &'a World<'a>, placements: &[RankPlacement], metadata: &mut RunMetadata) -> Planned<'a>;
}

/// An experiment's run, planned: the sweep and rank 0's observer go in, the outcome comes out.
pub use efatop_runtime::rank::Planned;

/// The memories `--memory` names, `--staged` folding `device` into `staged`, each once, in order.
pub fn memories_from_flags(common: &CommonArgs, gpu: usize) -> Vec<MemoryChoice> {
    let mut memories = Vec::new();
    for memory in &common.memory {
        let memory = match memory {
            MemoryArg::Host => MemoryChoice::Host,
            MemoryArg::Device if !common.staged => MemoryChoice::Device { gpu },
            MemoryArg::Device | MemoryArg::Staged => MemoryChoice::Staged { gpu },
        };
        if !memories.contains(&memory) {
            memories.push(memory);
        }
    }
    memories
}

impl Experiment {
    pub fn common(&self) -> &CommonArgs {
        self.descriptor().common()
    }

    pub fn name(&self) -> &'static str {
        self.kind().known_name().unwrap_or_default()
    }

    pub fn kind(&self) -> efatop_proto::Experiment {
        self.descriptor().kind()
    }

    /// The sweep's smallest and largest size: the flags, else the experiment's defaults.
    pub fn sizes(&self) -> (u64, u64) {
        let common = self.common();
        let (min, max) = self.descriptor().default_sizes();
        // With one end given, the other default gives way rather than empty the sweep.
        let max = common.max_size.unwrap_or_else(|| max.max(common.min_size.unwrap_or(0)));
        let min = common.min_size.unwrap_or_else(|| min.min(max));
        (min, max)
    }

    /// What clap cannot check alone: checked by the launcher before any rank starts (one line, not one per
    /// rank) and by each rank under MPI. Returns the one-line message for exit code 2.
    pub fn validate(&self) -> Result<(), String> {
        let (min, max) = self.sizes();
        if min > max {
            return Err(format!("--min-size {} is larger than --max-size {}", format_size(min), format_size(max)));
        }
        let common = self.common();
        check_memories(common)?;
        check_outputs(common)?;
        if common.json_samples != JsonSamplesArg::Auto && !common.json {
            return Err("--json-samples chooses what --json prints (auto, every or rails); it needs --json".to_string());
        }
        check_telemetry_ab(&self.kind(), common)?;
        self.descriptor().check()
    }

    /// The memory the results file names: the writer's GPU for experiments that always move it.
    pub fn memory_label(&self) -> String {
        if self.descriptor().always_gpu() {
            return "device".into();
        }
        let labels: Vec<&str> =
            self.common().memory.iter().map(|memory| if *memory == MemoryArg::Host { "host" } else { "device" }).collect();
        labels.join(" + ")
    }
}

/// The first value a list flag names twice, by the name the command line knows it by.
pub fn given_twice<T: ValueEnum + PartialEq>(values: &[T]) -> Option<String> {
    let (index, _) = values.iter().enumerate().find(|(index, value)| values[..*index].contains(value))?;
    values[index].to_possible_value().map(|value| value.get_name().to_string())
}

/// `--telemetry-ab BLOCK` times whole rounds of sixteen blocks, in the two experiments that time blocks.
fn check_telemetry_ab(kind: &efatop_proto::Experiment, common: &CommonArgs) -> Result<(), String> {
    let Some(block) = common.telemetry_ab else { return Ok(()) };
    if !matches!(kind, efatop_proto::Experiment::Write | efatop_proto::Experiment::Alltoall) {
        return Err(format!("--telemetry-ab: {} does not time blocks of iterations; use write or alltoall", kind.known_name().unwrap_or("this experiment")));
    }
    let round = block.saturating_mul(efatop_proto::results::AbArm::ROUND);
    if !common.iters.is_multiple_of(round) {
        return Err(format!(
            "--telemetry-ab {block}: --iters {} must be a multiple of {round} (rounds of 16 blocks: on, off, off, on twice, then off, on, on, off twice)",
            common.iters
        ));
    }
    Ok(())
}

/// `--memory host,host` would measure host memory twice and show it once; `--staged` folds `device` into
/// `staged`, so `device,staged` with it names one memory twice too.
fn check_memories(common: &CommonArgs) -> Result<(), String> {
    if let Some(memory) = given_twice(&common.memory) {
        return Err(format!("--memory: {memory} is given twice; name each memory once"));
    }
    if common.staged && common.memory.contains(&MemoryArg::Device) && common.memory.contains(&MemoryArg::Staged) {
        return Err("--memory device,staged with --staged: --staged makes device staged too, so both name one memory; \
                    leave out --staged to compare the two paths"
            .into());
    }
    Ok(())
}

/// The files and addresses the run will write and listen on, checked before any rank starts so that a
/// conflict or a missing folder is refused with nothing written: `--out` and `--record` must be two files
/// in folders that exist, `--serve` and `--prometheus` two listeners.
pub fn check_outputs(common: &CommonArgs) -> Result<(), String> {
    check_listeners(common.serve, common.prometheus)?;
    let files = [("--out", common.out.as_deref()), ("--record", common.record.as_deref())];
    // The folders are rank 0's to write in: a rank known to be another (under mpirun, perhaps on a host
    // where they do not exist) leaves them to it.
    if efatop_runtime::bootstrap::rank_from_env().is_none_or(|rank| rank == 0) {
        for (flag, path) in files {
            if let Some(path) = path {
                check_writable_file(flag, path)?;
            }
        }
        // Rank 0 pushes: only it needs the credentials and the CA (files perhaps on its host only).
        efatop_runtime::run_metrics::PushTarget::check(common.pushgateway.as_ref(), common.pushgateway_auth.as_deref(), common.pushgateway_ca.as_deref())?;
    }
    if let (Some(out), Some(record)) = (&common.out, &common.record) {
        if same_file(out, record) {
            return Err(format!(
                "--out and --record both name {}: the results file would overwrite the recording; give each its own file",
                record.display()
            ));
        }
    }
    Ok(())
}

/// `--serve` and `--prometheus` (on a run or the monitor) on one port of one address: the second could not
/// listen. Port 0 picks a free port for each.
pub fn check_listeners(serve: Option<SocketAddr>, prometheus: Option<SocketAddr>) -> Result<(), String> {
    let (Some(serve), Some(prometheus)) = (serve, prometheus) else { return Ok(()) };
    let same_address = serve.ip() == prometheus.ip() || serve.ip().is_unspecified() || prometheus.ip().is_unspecified();
    if serve.port() != 0 && serve.port() == prometheus.port() && same_address {
        return Err(format!(
            "--serve {serve} and --prometheus {prometheus} would listen on one port; give each its own (or port 0 for --serve)"
        ));
    }
    Ok(())
}

/// A file `flag` will create: its folder must exist (a folder named on the command line is not made), and
/// it must not be a folder itself.
pub fn check_writable_file(flag: &str, path: &Path) -> Result<(), String> {
    if path.is_dir() {
        return Err(format!("{flag} {}: is a directory; name a file in it", path.display()));
    }
    // A link (or a FIFO, a device) is refused here, before anything runs, and again where the file is
    // written (a link planted in between is replaced, never followed).
    efatop_proto::files::check_output_path(path).map_err(|err| format!("{flag}: {err}"))?;
    match path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        Some(dir) if !dir.is_dir() => {
            Err(format!("{flag} {}: there is no directory {} to write it in", path.display(), dir.display()))
        }
        _ => Ok(()),
    }
}

/// Whether two paths name one file: by their folders' canonical paths (the files need not exist yet).
fn same_file(a: &Path, b: &Path) -> bool {
    let resolved = |path: &Path| {
        let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let dir = dir.canonicalize().or_else(|_| std::path::absolute(dir)).unwrap_or_else(|_| dir.to_path_buf());
        path.file_name().map(|name| dir.join(name))
    };
    a == b || resolved(a).is_some_and(|a| Some(a) == resolved(b))
}

/// Declares the experiments: the clap subcommands (`efatop <name>` and `efatop run --ranks N <name>`) and
/// the one place that maps each to its [`Descriptor`].
macro_rules! register {
    ($( $(#[$doc:meta])* $variant:ident($args:ty) ),* $(,)?) => {
        #[derive(Debug, clap::Subcommand)]
        pub enum Experiment {
            $( $(#[$doc])* $variant($args), )*
        }

        impl Experiment {
            pub fn descriptor(&self) -> &dyn Descriptor {
                match self {
                    $( Experiment::$variant(args) => args, )*
                }
            }
        }
    };
}

register! {
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

impl From<JsonSamplesArg> for crate::printer::jsonl::Samples {
    fn from(arg: JsonSamplesArg) -> Self {
        match arg {
            JsonSamplesArg::Auto => Self::Auto,
            JsonSamplesArg::Every => Self::Every,
            JsonSamplesArg::Rails => Self::Rails,
        }
    }
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

/// `--serve`: `IP:PORT`, or a bare port on 127.0.0.1.
pub fn parse_serve(text: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    text.parse::<SocketAddr>()
        .map_err(|_| format!("`{text}` is not an address to serve on; use IP:PORT (e.g. 127.0.0.1:0, 0.0.0.0:7420) or a port"))
}

/// `--prometheus`: an IP address and port to listen on.
pub fn parse_listen_address(text: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| format!("`{text}` is not an address to listen on; use IP:PORT, e.g. 127.0.0.1:9400 or 0.0.0.0:9400"))
}

/// A whole-number flag within `range`. Read as a signed number, so that `--iters -5` is refused as out of
/// range, naming the flag and the range, rather than as a stray `-5` or "invalid digit".
pub fn whole_number<T>(range: impl std::ops::RangeBounds<i64>) -> impl clap::builder::TypedValueParser<Value = T>
where
    T: TryFrom<i64> + Clone + Send + Sync + 'static,
    T::Error: std::error::Error + Send + Sync + 'static,
{
    use clap::builder::TypedValueParser as _;
    clap::value_parser!(i64).range(range).try_map(T::try_from)
}

pub fn parse_size_arg(text: &str) -> Result<u64, String> {
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
