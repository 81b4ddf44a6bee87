//! A rank of `efatop <experiment>`: the runtime's plan ([`efatop_runtime::rank::Plan`]) from the command
//! line, and the printer the flags and the terminal choose as rank 0's consumer. The rank itself is the
//! runtime's ([`efatop_runtime::rank::run`]).

use std::time::Duration;

use efatop_experiments::payload::MemoryChoice;
use efatop_experiments::{StepOptions, World, WorldOptions};
use efatop_fabric::Capabilities;
use efatop_proto::column::Column;
use efatop_proto::results::{RankPlacement, RunMetadata};
use efatop_runtime::rank::{Plan, Planned, Workload};
use efatop_runtime::rank_zero::Show;
use efatop_runtime::run_metrics::PushTarget;

use crate::cli::{Experiment, MemoryArg};
use crate::printer::Mode;
use crate::session::Session;

/// Runs this process's rank with the printer the flags and the terminal choose; returns its exit code.
pub fn rank_main(experiment: Experiment) -> i32 {
    let common = experiment.common();
    let mode = if common.json {
        Mode::Json
    } else if common.no_tui || !crate::term::stdout_is_terminal() {
        Mode::Plain
    } else {
        Mode::Dashboard
    };
    let samples = common.json_samples.into();
    rank_with(experiment, Box::new(Session { mode, samples }))
}

/// Runs this process's rank with `show` as rank 0's consumer; returns its exit code (2, one line, for
/// flags clap cannot check alone).
pub fn rank_with(experiment: Experiment, show: Box<dyn Show>) -> i32 {
    if let Err(message) = experiment.validate() {
        eprintln!("efatop: error: {message}");
        return 2;
    }
    efatop_runtime::rank::run(plan(experiment), show)
}

/// The runtime's plan of the rank the flags describe.
fn plan(experiment: Experiment) -> Plan {
    let common = experiment.common();
    let descriptor = experiment.descriptor();
    let world = WorldOptions {
        provider: common.provider.clone(),
        channels: common.channels,
        capabilities: Capabilities { same_host_shortcut: common.allow_shm, ..descriptor.capabilities() },
        // The runtime raises it to the window times the world's size.
        max_in_flight: 64,
        op_timeout: Duration::from_secs(common.timeout),
        link_gbps: common.link_gbps,
        completion: common.completion.into(),
        // The proxy's writer is a GPU kernel and ipc's a GPU's stores: they always need the GPU.
        gpu: (common.memory.iter().any(|m| *m != MemoryArg::Host) || descriptor.always_gpu()).then_some(descriptor.gpu_index(common.gpu.0)),
    };
    let (min, max) = experiment.sizes();
    let sweep = StepOptions {
        sizes: efatop_proto::sizes::sweep(min, max),
        warmup: common.warmup,
        iters: common.iters,
        window: usize::from(common.window),
        corrupt_byte: common.debug_corrupt_byte,
        telemetry_ab: common.telemetry_ab,
        memories: Vec::new(),
    };
    Plan {
        world,
        sweep,
        sysfs_root: common.sysfs_root.clone(),
        nic_map: common.nic_map.clone(),
        pin: !common.no_pin,
        out: common.out.clone(),
        serve: common.serve,
        record: common.record.clone(),
        prometheus: common.prometheus,
        pushgateway: PushTarget::new(common.pushgateway.as_ref(), common.pushgateway_auth.as_deref(), common.pushgateway_ca.as_deref()),
        interval: common.interval,
        hang_timeout: Duration::from_secs(common.hang_timeout),
        telemetry: !common.no_telemetry,
        workload: Box::new(experiment),
    }
}

impl Workload for Experiment {
    fn name(&self) -> &'static str {
        Experiment::name(self)
    }

    fn kind(&self) -> efatop_proto::Experiment {
        Experiment::kind(self)
    }

    fn memory_label(&self) -> String {
        Experiment::memory_label(self)
    }

    fn always_gpu(&self) -> bool {
        self.descriptor().always_gpu()
    }

    fn columns(&self) -> Vec<Column> {
        self.descriptor().columns()
    }

    fn pair_matrices(&self) -> bool {
        self.descriptor().pair_matrices()
    }

    fn memories(&self, gpu: usize) -> Vec<MemoryChoice> {
        self.descriptor().memories(gpu)
    }

    fn plan<'a>(&'a self, world: &'a World<'a>, placements: &[RankPlacement], metadata: &mut RunMetadata) -> Planned<'a> {
        self.descriptor().plan(world, placements, metadata)
    }
}
