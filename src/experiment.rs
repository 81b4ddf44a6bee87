//! The experiments this binary runs, each described once: the defaults and checks that depend on its
//! flags, the columns it fills, what it needs of the world, and how it runs. [`Descriptor`] is what a rank
//! asks of an experiment; its flags (clap) are the command line's (`cli/experiments.rs`, whose
//! `Experiment` lists them all), and [`Experiment::descriptor`] maps each to its module here, so a new
//! benchmark is its flags there, one module under `src/experiment/` and one line in each list.

use std::path::Path;

use clap::ValueEnum;
use efatop_experiments::payload::MemoryChoice;
use efatop_experiments::World;
use efatop_fabric::Capabilities;
use efatop_proto::column::Column;
use efatop_proto::results::{RankPlacement, RunMetadata};
use efatop_proto::sizes::format_size;

use crate::cli::{CommonArgs, Experiment, JsonSamplesArg, MemoryArg};
use crate::parse::{check_listeners, check_writable_file};

mod alltoall;
mod ipc;
mod proxy;
mod sendrecv;
mod sweep;
mod write;

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
        // Without --out, results go to ./efatop-results: a link or another user's folder there is refused.
        if common.out.is_none() {
            efatop_runtime::results_file::check_default_folder(std::path::Path::new(efatop_runtime::results_file::DEFAULT_RESULTS_DIR))?;
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

/// Whether two paths name one file: by their folders' canonical paths (the files need not exist yet).
fn same_file(a: &Path, b: &Path) -> bool {
    let resolved = |path: &Path| {
        let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let dir = dir.canonicalize().or_else(|_| std::path::absolute(dir)).unwrap_or_else(|_| dir.to_path_buf());
        path.file_name().map(|name| dir.join(name))
    };
    a == b || resolved(a).is_some_and(|a| Some(a) == resolved(b))
}

impl Experiment {
    /// What a rank asks of the experiment: its flags' `Args`, each a [`Descriptor`]; the one place that
    /// maps each of `cli::Experiment`'s subcommands to its module here.
    pub fn descriptor(&self) -> &dyn Descriptor {
        match self {
            Experiment::Write(args) => args,
            Experiment::Sendrecv(args) => args,
            Experiment::Alltoall(args) => args,
            Experiment::Proxy(args) => args,
            Experiment::Ipc(args) => args,
            Experiment::Sweep(args) => args,
        }
    }
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

