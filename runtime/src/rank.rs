//! One rank's run of an experiment: its world, pinning and placement, NVML pairs, telemetry wiring and
//! the results file (rewritten after every size, so a run that dies keeps what it measured). The rank's
//! work runs on its own thread; rank 0's main thread runs the loop ([`rank_zero`]) that takes the run's
//! events and owns its ending.
//!
//! The binary hands in a [`Plan`] (the experiment as a [`Workload`], the world's and the sweep's options,
//! the outputs) and rank 0's consumer ([`Show`]); [`run`] gives back the process's exit code. Nothing here
//! reads a flag or a terminal, or prints the run: errors are one `efatop: error:` line each, as before.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, Sender};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use efatop_experiments::payload::MemoryChoice;
use efatop_experiments::world::{index_on_machine, machine};
use efatop_experiments::{Bootstrap, ExperimentError, Observer, StepOptions, Unobserved, World, WorldOptions};
use efatop_node::NvlinkSurvey;
use efatop_proto::column::Column;
use efatop_proto::liveness::Liveness;
use efatop_proto::results::{GpuPairRecord, RankPlacement, RunMetadata, RunResults, RunStatus};
use efatop_topology::NodeTopology;

use crate::affinity::pin_thread;
use crate::bootstrap;
use crate::collector::{Collector, SamplerThread};
use efatop_proto::events::{RunInfo, RunStart};
use crate::rank_zero::{self, Ending, Forward, Input, Setup, Show};
use crate::results_file::{ResultsFile, default_results_path};
use crate::run_metrics::{PushTarget, RunMetrics};
use crate::watchdog::Watchdog;

/// What a rank needs of the experiment it runs (the binary's experiments, each described once).
pub trait Workload: Send {
    /// Its name: the subcommand's, the results file's default file name.
    fn name(&self) -> &'static str;
    /// Which experiment it is, for the results file.
    fn kind(&self) -> efatop_proto::Experiment;
    /// The memory the results file names.
    fn memory_label(&self) -> String;
    /// Its writer is a GPU whatever the memories say (its errors name the experiment, not `--memory`).
    fn always_gpu(&self) -> bool;
    /// The results columns, named before memory is set up.
    fn columns(&self) -> Vec<Column>;
    /// It reports per-pair matrices (all-to-all).
    fn pair_matrices(&self) -> bool;
    /// The memories its columns move, given the GPU the rank opened.
    fn memories(&self, gpu: usize) -> Vec<MemoryChoice>;
    /// Before the first size, with every rank's placement known: what the metadata should say about this
    /// experiment, and the run itself, ready to go.
    fn plan<'a>(&'a self, world: &'a World<'a>, placements: &[RankPlacement], metadata: &mut RunMetadata) -> Planned<'a>;
}

/// An experiment's run, planned: the sweep and rank 0's observer go in, the outcome comes out.
pub type Planned<'a> = Box<dyn FnOnce(&StepOptions, &mut dyn Observer) -> Result<(), ExperimentError> + 'a>;

/// One rank's run, as the binary's flags decided it.
pub struct Plan {
    pub workload: Box<dyn Workload>,
    /// The world to establish; `max_in_flight` is raised to the window times the world's size.
    pub world: WorldOptions,
    /// The sweep; its `memories` are the workload's, set once the GPU is known.
    pub sweep: StepOptions,
    /// Read NIC counters (and the instance type) under this root (`--sysfs-root`).
    pub sysfs_root: Option<PathBuf>,
    /// `--nic-map`: which sysfs device each channel's NIC is.
    pub nic_map: Option<std::collections::BTreeMap<usize, String>>,
    /// Pin the rank's threads (not `--no-pin`).
    pub pin: bool,
    /// The results file (`--out`); `None`: a timestamped file under ./efatop-results/.
    pub out: Option<PathBuf>,
    pub serve: Option<SocketAddr>,
    pub record: Option<PathBuf>,
    pub prometheus: Option<SocketAddr>,
    pub pushgateway: Option<PushTarget>,
    /// Telemetry's sampling interval.
    pub interval: Duration,
    pub hang_timeout: Duration,
    /// Telemetry runs (not `--no-telemetry`): rank 0's heartbeat of every rank besides the live view.
    pub telemetry: bool,
}

/// Runs this process's rank of `plan`; returns its exit code. The rank's work (bootstrap, world,
/// experiment) runs on a thread of its own; this, the process's main thread, waits for it and, on rank 0,
/// runs the loop that owns the run's ending ([`rank_zero`]) with `show` as its consumer, which must happen
/// even when that thread is stuck.
pub fn run(plan: Plan, show: Box<dyn Show>) -> i32 {
    let (inputs, heard) = mpsc::channel::<Input>();
    watch_stop_signals(inputs.clone());
    let launched_as_peer = std::env::var(bootstrap::ENV_RANK).is_ok_and(|rank| rank != "0");
    let spawned = std::thread::Builder::new().name("efatop-rank".into()).stack_size(RANK_STACK).spawn(move || {
        let outcome = rank_thread(plan, show, &inputs);
        let _ = inputs.send(Input::Done(outcome));
    });
    if let Err(err) = spawned {
        eprintln!("efatop: error: cannot start the rank's thread: {err}");
        return 1;
    }
    // Rank 0 hands its setup over once the world is up; any rank's thread says when it is done.
    let mut orphaned: Option<(String, Instant)> = None;
    // Rank 0's collector starts before its loop does: what it hears until then (each rank's hello as it
    // connects, a connection that closed) is kept for the loop, bounded (EARLY_EVENTS).
    let mut early: Vec<Vec<efatop_proto::events::CollectorEvent>> = Vec::new();
    let mut early_events = 0usize;
    loop {
        let next = match &orphaned {
            None => heard.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            Some((_, since)) => heard.recv_timeout(ORPHAN_GRACE.saturating_sub(since.elapsed())),
        };
        if let Some((reason, _)) = &orphaned {
            match next {
                // The thread returned well after all (the run had just ended everywhere): nothing to say.
                Ok(Input::Done(Ok(0))) => return 0,
                Ok(Input::Done(_)) | Err(_) => {
                    eprintln!("efatop: error: {reason}");
                    // Whether or not the thread came back, the fabric objects are left open: end now.
                    efatop_fabric::ending::exit(1);
                }
                Ok(_) => continue,
            }
        }
        let next = next.map_err(|_| mpsc::RecvError);
        match next {
            Ok(Input::Orphaned(reason)) => orphaned = Some((reason, Instant::now())),
            Ok(Input::Ready(setup)) => {
                let Ending { code, abandoned } = rank_zero::run(*setup, &heard, std::mem::take(&mut early));
                let code = exit_code(0, code);
                if !abandoned {
                    // Rank 0's thread closes its world now; a moment for that, never a hang.
                    let until = std::time::Instant::now() + CLOSE_LIMIT;
                    while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
                        match heard.recv_timeout(left) {
                            Ok(Input::Done(_)) | Err(_) => break,
                            Ok(_) => {}
                        }
                    }
                }
                if abandoned {
                    // Rank 0's own thread is stuck where nothing reaches it (inside MPI, or a fabric wait):
                    // the run has ended and said so everywhere; the process ends without that thread, and
                    // without libfabric's exit handlers, which would tear providers down under it.
                    efatop_fabric::ending::exit(code);
                }
                return code;
            }
            Ok(Input::Done(Ok(code))) => return code,
            Ok(Input::Done(Err((rank, err)))) => return exit_code(rank, Err(err)),
            // Ctrl-C reaches every rank of a launcher's run; the launcher passes it on to rank 0, whose
            // abort ends the others through the run's ending.
            Ok(Input::Terminated(rank_zero::Stop::Interrupt)) if launched_as_peer => {}
            Ok(Input::Terminated(stop)) => {
                // The rank's thread may be inside libfabric: its objects are left open, and the process
                // ends without libfabric's exit handlers (main ends it through efatop_fabric::ending).
                efatop_fabric::ending::abandon();
                return stop.exit_code();
            }
            Ok(Input::Telemetry(batch)) => {
                if early_events + batch.len() <= EARLY_EVENTS {
                    early_events += batch.len();
                    early.push(batch);
                }
            }
            Ok(Input::Experiment(_) | Input::Sweep(_) | Input::Ended(_)) => {}
            Err(_) => {
                eprintln!("efatop: error: the rank's thread ended without a result (it panicked)");
                return 1;
            }
        }
    }
}

/// At most how many telemetry events rank 0 keeps from before its loop starts (each rank's hello and any
/// closing in the moment between its collector's start and its loop's: a few per rank; 4096 p5 hosts are
/// 32,768 ranks).
const EARLY_EVENTS: usize = 1 << 17;

/// How long rank 0's process waits, after the run's ending, for its thread to close the world.
const CLOSE_LIMIT: Duration = Duration::from_secs(10);

/// The rank's thread's stack: the experiments keep their sweeps' bookkeeping on it.
const RANK_STACK: usize = 16 << 20;

/// How long a rank that lost rank 0 gives its thread to stop its transfers and return, before the process
/// ends without it (the thread may be blocked on a rendezvous or an MPI call that nothing will answer).
const ORPHAN_GRACE: Duration = Duration::from_secs(3);

/// Armed from the moment the world is up until the experiment has returned well: dropped armed (an error
/// on the way), it abandons the fabric objects before the world drops (see [`efatop_fabric::ending`]).
struct AbandonOnFailure(bool);

impl AbandonOnFailure {
    fn disarm_if(mut self, ok: bool) {
        if ok {
            self.0 = false;
        }
    }
}

impl Drop for AbandonOnFailure {
    fn drop(&mut self) {
        if self.0 {
            efatop_fabric::ending::abandon();
        }
    }
}

/// The watch a rank other than 0 keeps on rank 0 (see [`crate::collector::RankZeroWatch`]): when rank 0 is
/// gone, the rank's waits give up (its world's abort) and its main thread ends the process.
fn orphan_watch(world: &World<'_>, hang_timeout: Duration, events: &Sender<Input>, relay: Option<String>) -> crate::collector::RankZeroWatch {
    let (abort, events) = (world.abort.clone(), events.clone());
    let me = format!("rank {} ({})", world.rank, world.hosts[world.rank]);
    crate::collector::RankZeroWatch {
        timeout: hang_timeout,
        lost: Box::new(move |why| {
            let reason = format!("{me}: lost rank 0: {why}; this rank stops its transfers and ends");
            abort.raise(reason.clone());
            let _ = events.send(Input::Orphaned(reason));
        }),
        relay,
    }
}

/// The exit code of a rank's outcome; prints its error as the rank speaks for it.
fn exit_code(rank: usize, outcome: Result<i32, ExperimentError>) -> i32 {
    let err = match outcome {
        Ok(code) => return code,
        Err(err) => err,
    };
    match &err {
        // Rank 0 speaks for the run: what other ranks shared with it, it prints.
        ExperimentError::Reported { .. } => {}
        ExperimentError::PeerFailed { .. } | ExperimentError::Bootstrap(_) | ExperimentError::Stopped if rank != 0 => {}
        ExperimentError::InvalidInput { .. } | ExperimentError::Unsupported(_) | ExperimentError::PeerFailed { .. } | ExperimentError::Stopped => {
            eprintln!("efatop: error: {err}");
        }
        // Another rank's waits were abandoned because it lost rank 0: its main thread says so, once.
        ExperimentError::Fabric(efatop_fabric::FabricError::Abandoned(_)) if rank != 0 && efatop_fabric::ending::abandoned() => {}
        ExperimentError::Fabric(efatop_fabric::FabricError::Abandoned(reason)) if rank == 0 => {
            eprintln!("efatop: error: {reason}");
            if let Some(stop) = rank_zero::Stop::from_reason(reason) {
                return stop.exit_code();
            }
        }
        _ => eprintln!("efatop: error: rank {rank}: {err}"),
    }
    err.exit_code()
}

/// SIGTERM and SIGHUP (mpirun or a batch system ending the job, the launcher passing on its own) and SIGINT
/// are inputs of the main thread: rank 0's loop ends the run through its ordinary ending; before the run
/// has started (or on another rank) the process ends with the signal's usual code (143, 130).
fn watch_stop_signals(inputs: Sender<Input>) {
    if let Err(err) = rank_zero::Stop::watch("efatop-signals", move |stop| inputs.send(Input::Terminated(stop)).is_ok()) {
        eprintln!("efatop: warning: no signal handler ({err}): a SIGTERM would end the run without its tables");
    }
}

/// The rank's thread: bootstrap, then the run; returns the rank's exit code, having printed its error. An
/// error comes back only when the bootstrap could not start (as rank 0's: no rank is known yet).
fn rank_thread(plan: Plan, show: Box<dyn Show>, inputs: &Sender<Input>) -> Result<i32, (usize, ExperimentError)> {
    let (bootstrap, secret) = bootstrap::connect().map_err(|err| (0, err))?;
    let rank = bootstrap.rank();
    let outcome = if bootstrap.size() < 2 {
        Err(ExperimentError::InvalidInput {
            flag: "--ranks",
            message: format!(
                "{} needs at least 2 ranks; start them with `efatop run --ranks N {}` or under mpirun",
                plan.workload.name(),
                plan.workload.name()
            ),
        })
    } else {
        run_rank(&*bootstrap, &secret, plan, show, inputs)
    };
    // The rank says why it failed (rank 0 for the run) before its bootstrap closes. Closing MPI waits for
    // every rank, and once it returns the other ranks exit: a launcher that sees their non-zero codes ends
    // this process at once, which could otherwise come before rank 0 has named the failed rank.
    let code = exit_code(rank, outcome);
    drop(bootstrap);
    Ok(code)
}

#[allow(clippy::too_many_lines)] // the rank's setup in order: outlets, world, placement, telemetry, hand-over
/// Sets the rank up and runs the experiment. Rank 0 hands the run's events, and its ending, to the main
/// thread's loop ([`Input::Ready`]); its own result then comes as [`Input::Ended`]. Returns the exit code of
/// a rank other than 0 that went well.
fn run_rank(bootstrap: &dyn Bootstrap, secret: &efatop_auth::secret::Keyed, plan: Plan, show: Box<dyn Show>, inputs: &Sender<Input>) -> Result<i32, ExperimentError> {
    let started = Instant::now();
    let Plan { workload, world: mut options, mut sweep, sysfs_root, nic_map, pin, out, serve, record, prometheus, pushgateway, interval, hang_timeout, telemetry } = plan;
    let rank = bootstrap.rank();
    // --serve and --prometheus: bound before the world, so a viewer can attach while it starts (and a port
    // in use is refused before anything is written). The recording is created once the run starts.
    let mut outlets = if rank == 0 { crate::serve::Outlets::open(serve, record.as_deref(), started)? } else { None };
    let metrics = match (rank, prometheus) {
        (0, Some(address)) => Some(RunMetrics::start(address, workload.name(), &[])?),
        _ => None,
    };
    // An emulated node's rank moves into its network namespace before libfabric looks for NICs.
    let namespaces = match std::env::var(efatop_experiments::world::ENV_NETNS) {
        Ok(name) if !name.is_empty() => Some(crate::netns::Namespaces::enter(&name)?),
        _ => None,
    };
    // Room for every iteration in flight to every peer, plus the control traffic around them.
    options.max_in_flight = options.max_in_flight.max((sweep.window * bootstrap.size()).max(64));
    let mut world = World::establish(bootstrap, &options).map_err(|err| match err {
        // Those need a GPU whatever --memory says: name the experiment, not the flag.
        ExperimentError::Unsupported(message) if workload.always_gpu() => {
            ExperimentError::Unsupported(message.replacen("--memory device:", &format!("{}:", workload.name()), 1))
        }
        err => err,
    })?;
    // Declared after the world, so dropped before it: a run that fails from here on leaves its fabric
    // objects open (efatop_fabric::ending), as a peer may be mid-transfer into them.
    let ending = AbandonOnFailure(true);
    if sysfs_root.is_some() || nic_map.is_some() {
        let root = sysfs_root.clone().unwrap_or_else(|| "/".into());
        world.watch_counters(&efatop_experiments::counters::CounterConfig { root, nic_map: nic_map.unwrap_or_default() })?;
    }
    let pinning = if pin { Pinning::plan(&world) } else { None };
    let placements = gather_placements(&world, pinning.as_ref())?;
    // The threads started from here on (telemetry, rank 0's loop and printers) stay off every rank's hot CPU.
    if let Some(pinning) = &pinning {
        pinning.confine_helpers(&world, &placements);
    }
    sweep.memories = workload.memories(world.gpu.as_ref().map_or(0, |g| g.ordinal()));
    // The experiment names its columns once its memory is set up (`begin`); until then, the host names.
    let configs = workload.columns();
    let mut results = RunResults {
        metadata: metadata(&world, &*workload, &sweep, hang_timeout),
        configs,
        status: Some(RunStatus::default()),
        ..RunResults::default()
    };
    if world.gpu.is_some() && std::env::var(crate::launch::ENV_PEER_COPIES).is_ok_and(|v| v == "synchronous") {
        results.metadata.notes.push(
            "receiving ranks run with CUDA_LAUNCH_BLOCKING=1: a provider's device-to-device cudaMemcpy (shm's CUDA \
             IPC) then completes only once the data has landed"
                .into(),
        );
    }
    let planned = workload.plan(&world, &placements, &mut results.metadata);
    results.metadata.notes.push(secret.note());
    if let Some((address, token)) = outlets.as_ref().and_then(|o| Some((o.serving?, o.viewers_token.clone()?))) {
        let reach = if address.ip().is_loopback() { "" } else { " (beyond this host)" };
        results.metadata.notes.push(format!("--serve {address}{reach}: viewers prove the token ({token})"));
    }
    results.metadata.placements = placements;
    instance_type(&world, sysfs_root.as_deref(), &mut results.metadata)?;
    if world.rank == 0 {
        results.metadata.gpu_pairs = gpu_pairs(&results.metadata.placements);
    }
    // Every run that started keeps what it measured: in --out, or else a timestamped file under
    // ./efatop-results/. It holds the whole of the run's metadata before its first size and is rewritten
    // after every size, so a run that dies keeps what it measured. A run refused before this point (bad
    // input, no such provider) writes none.
    let file = if rank == 0 {
        let path = out.clone().unwrap_or_else(|| default_results_path(workload.name(), SystemTime::now()));
        // The default folder is made on first use; a folder named in --out must exist.
        Some(ResultsFile::create(&path, out.is_none(), &results)?)
    } else {
        None
    };
    // Telemetry runs in every mode: besides the live view, it is rank 0's heartbeat of every rank.
    let telemetry = Telemetry::start(
        &world,
        &secret.secret,
        telemetry,
        interval,
        hang_timeout,
        inputs,
        namespaces.as_ref(),
    )
    .inspect_err(|err| {
        // Rank 0's file says Running until its loop ends the run: a failure before the loop (a rank lost in
        // the telemetry's setup, the rendezvous gone with it) ends it here, with the error rank 0 prints.
        if let Some(file) = &file {
            let mut failed = results.clone();
            failed.status = Some(RunStatus { state: efatop_proto::results::RunState::Failed, reason: Some(err.to_string()) });
            if let Err(save) = file.save(&failed) {
                eprintln!("efatop: warning: cannot record the run's end: {save}");
            }
        }
    })?;
    let Telemetry { collector, sampler, relay, nics: every_rank_nics } = telemetry;
    // Every rank has been told where rank 0's collector listens: silence counts from here.
    let liveness = Liveness::new(world.size, interval, hang_timeout).counting_from(started.elapsed());
    // This thread is the hot path from here on: alone on its CPU (the helpers above left it).
    if let Some(pinning) = &pinning {
        pinning.pin_hot_thread();
    }

    let Some(file) = file else {
        let outcome = planned(&sweep, &mut Unobserved);
        // Its sampler sends the phase before it closes: rank 0 then waits for the rank that died.
        if outcome.as_ref().is_err_and(ExperimentError::follows_elsewhere) {
            world.probe.set_phase(efatop_proto::telemetry::Phase::Leaving, 0);
        } else if outcome.is_ok() {
            // Rank 0's loop may hear this rank close before its own hot thread says the run ended (a loaded
            // machine: a fresh-clone run named rank 1 "exited mid-run" after a passing alltoall): done first.
            world.probe.set_phase(efatop_proto::telemetry::Phase::Done, 0);
        }
        drop(sampler);
        // A relay waits (briefly) for its host's ranks to close before it closes.
        drop(relay);
        ending.disarm_if(outcome.is_ok());
        return outcome.map(|()| 0);
    };

    // Rank 0: the main thread's loop takes the run's events, its clock and its ending from here.
    let stop = Arc::new(AtomicBool::new(false));
    let mut metrics = metrics;
    if let Some(metrics) = &mut metrics {
        metrics.set_world(&world.hosts, world.channels.len());
        metrics.set_nics(every_rank_nics.clone());
    }
    let start = RunStart {
        info: run_info(&results, &world, &sweep),
        nics: every_rank_nics,
        results: results.clone(),
        pairs: workload.pair_matrices(),
        serving: outlets.as_ref().and_then(|o| o.serving),
        interval_ms: interval.as_millis() as u64,
    };
    let (release, released) = mpsc::channel::<()>();
    let setup = Setup {
        release,
        show,
        results,
        file,
        sizes: sweep.sizes.clone(),
        start,
        started,
        stop: stop.clone(),
        abort: world.abort.clone(),
        watchdog: collector.is_some().then(|| Watchdog::new(liveness.clone(), world.hosts.clone())),
        liveness,
        interval,
        outlets: outlets.take(),
        metrics,
        pushgateway,
        collector,
    };
    if inputs.send(Input::Ready(Box::new(setup))).is_err() {
        return Err(ExperimentError::Bootstrap("rank 0's loop is gone".into()));
    }
    let mut observer = Forward { inputs: inputs.clone(), stop };
    let outcome = planned(&sweep, &mut observer);
    ending.disarm_if(outcome.is_ok());
    // Rank 0's own telemetry closes after its last sample, as every rank's does.
    if let Some(sampler) = sampler {
        sampler.finish();
    }
    let _ = inputs.send(Input::Ended(outcome));
    // The world (every fabric object) closes only once the loop has ended the run everywhere.
    let _ = released.recv();
    Ok(0)
}

/// Where a rank's threads run. The CPUs near its GPU (its NUMA node's), within what the process was
/// allowed (taskset, Slurm's cpuset): all of them when the topology names none or none are allowed. In that
/// set the rank's hot thread (posting and polling) gets one CPU of its own, by its index among the ranks on
/// its machine, as MPI's bind-to-core does; the threads that serve it (sampler, collector, rank 0's loop and
/// printers) get the rest of the set less the hot CPU of every rank on the machine, so that a wake-up of
/// theirs never lands on a busy poller and no busy poller is moved onto another's CPU. With more ranks on
/// the machine than CPUs in the set the hot threads are not given CPUs of their own (there are not enough):
/// the scheduler shares the set.
struct Pinning {
    set: Vec<u32>,
    hot: Option<u32>,
}

impl Pinning {
    fn plan(world: &World<'_>) -> Option<Self> {
        let allowed: Vec<u32> = crate::affinity::allowed_cpus().into_iter().map(|cpu| cpu as u32).collect();
        let near: Vec<u32> = world.placement.as_ref().map_or_else(Vec::new, |p| efatop_proto::topology::parse_cpu_list(&p.cpus));
        let set = pinning_set(&near, &allowed);
        if set.is_empty() {
            return None;
        }
        let (index, count) = index_on_machine(&world.hosts, world.rank);
        let hot = (count <= set.len()).then(|| set[index % set.len()]);
        Some(Self { set, hot })
    }

    /// Confines this thread (so every thread it starts) and the process's main thread to the set less the
    /// hot CPUs of the ranks on this machine; a set with nothing left keeps every CPU but this rank's own.
    fn confine_helpers(&self, world: &World<'_>, placements: &[RankPlacement]) {
        let mine = machine(&world.hosts[world.rank]);
        let taken: Vec<u32> = placements.iter().filter(|p| machine(&p.host) == mine).filter_map(|p| p.hot_cpu).collect();
        let helpers = match self.hot {
            Some(hot) => helper_cpus(&self.set, &taken, hot),
            None => self.set.clone(),
        };
        let cpus = || helpers.iter().map(|&cpu| cpu as usize);
        let _ = pin_thread(None, cpus());
        let _ = pin_thread(Some(std::process::id() as i32), cpus());
    }

    fn pin_hot_thread(&self) {
        if let Some(hot) = self.hot {
            let _ = pin_thread(None, [hot as usize]);
        }
    }
}

/// The rank's CPUs: those near its GPU that it is allowed, else every allowed one.
fn pinning_set(near: &[u32], allowed: &[u32]) -> Vec<u32> {
    let both: Vec<u32> = near.iter().copied().filter(|cpu| allowed.contains(cpu)).collect();
    if both.is_empty() { allowed.to_vec() } else { both }
}

/// The helper threads' CPUs: the set less every local hot CPU, else less this rank's, else the set.
fn helper_cpus(set: &[u32], taken: &[u32], hot: u32) -> Vec<u32> {
    let free: Vec<u32> = set.iter().copied().filter(|cpu| !taken.contains(cpu)).collect();
    if !free.is_empty() {
        return free;
    }
    let but_mine: Vec<u32> = set.iter().copied().filter(|&cpu| cpu != hot).collect();
    if but_mine.is_empty() { set.to_vec() } else { but_mine }
}


/// Every rank's placement, for the header and the results file.
fn gather_placements(world: &World<'_>, pinning: Option<&Pinning>) -> Result<Vec<RankPlacement>, ExperimentError> {
    let placement = world.placement.as_ref();
    let mine = RankPlacement {
        rank: world.rank,
        host: world.hosts[world.rank].clone(),
        gpu: world.gpu_ordinal(),
        gpu_pci_bus_id: world.gpu_pci_bus_id(),
        numa_node: placement.and_then(|p| p.numa_node),
        nics: world.channels.iter().map(|c| c.nic().domain.clone()).collect(),
        pinned_cpus: pinning.map(|p| efatop_proto::topology::format_cpu_list(&p.set)),
        hot_cpu: pinning.and_then(|p| p.hot),
    };
    efatop_experiments::gather(world.bootstrap, &mine, "placement record")
}

/// The instance type every rank reads from its DMI product name (under `--sysfs-root` when given), gathered
/// so that rank 0 records its own and notes ranks on other types (their figures would differ).
fn instance_type(world: &World<'_>, sysfs_root: Option<&std::path::Path>, metadata: &mut RunMetadata) -> Result<(), ExperimentError> {
    let root = sysfs_root.unwrap_or_else(|| std::path::Path::new("/"));
    let mine = efatop_node::Sysfs::new(root).product_name();
    let all: Vec<Option<String>> = efatop_experiments::gather(world.bootstrap, &mine, "instance type")?;
    let ours = all.first().cloned().flatten();
    if let Some(dir) = sysfs_root.filter(|_| ours.is_some()) {
        metadata.notes.push(format!(
            "the instance type is read from {} (--sysfs-root), not from this machine",
            dir.join("sys/class/dmi/id/product_name").display()
        ));
    }
    let others: Vec<String> = all
        .iter()
        .enumerate()
        .filter(|(_, theirs)| **theirs != ours)
        .map(|(rank, theirs)| format!("rank {rank} on {}", theirs.as_deref().unwrap_or("an unknown type")))
        .collect();
    if !others.is_empty() {
        metadata.notes.push(format!(
            "ranks run on different instance types: {}; % of expected is against rank 0's ({})",
            others.join(", "),
            ours.as_deref().unwrap_or("unknown")
        ));
    }
    metadata.instance_type = ours;
    Ok(())
}

/// How the GPUs the run uses on rank 0's host reach each other, for the dashboard's topology view and the
/// results file: NVML there (the only host rank 0 can ask), else its hwloc topology. Pairs neither can
/// answer are left out.
fn gpu_pairs(placements: &[RankPlacement]) -> Vec<GpuPairRecord> {
    let Some(host) = placements.first().map(|p| p.host.as_str()) else { return Vec::new() };
    let mut gpus: Vec<(usize, &str)> = placements
        .iter()
        .filter(|p| p.host == host)
        .filter_map(|p| Some((p.gpu?, p.gpu_pci_bus_id.as_deref()?)))
        .collect();
    gpus.sort_unstable();
    gpus.dedup();
    if gpus.len() < 2 {
        return Vec::new();
    }
    let survey = NvlinkSurvey::read().ok();
    let topology = std::cell::OnceCell::new();
    let inferred = |a: &str, b: &str| {
        let topology: &NodeTopology = topology.get_or_init(|| NodeTopology::discover().ok()).as_ref()?;
        topology.pair_link(topology.gpu_by_pci_bus_id(a)?.index, topology.gpu_by_pci_bus_id(b)?.index)
    };
    let mut pairs = Vec::new();
    for (i, &(gpu_a, bus_a)) in gpus.iter().enumerate() {
        for &(gpu_b, bus_b) in &gpus[i + 1..] {
            let from_nvml = survey.as_ref().and_then(|survey| survey.pair(bus_a, bus_b).ok());
            if let Some(pair) = from_nvml.or_else(|| inferred(bus_a, bus_b)) {
                pairs.push(GpuPairRecord { host: host.to_string(), gpu_a, gpu_b, pair });
            }
        }
    }
    pairs
}

/// This rank's telemetry: rank 0's collector (when a consumer wants samples), every rank's sampler
/// streaming to it, and every rank's NIC names. The collector address and the NIC names travel in one
/// bootstrap round.
struct Telemetry {
    collector: Option<Collector>,
    sampler: Option<SamplerThread>,
    /// This rank's host's relay, when this rank runs it.
    relay: Option<crate::relay::Relay>,
    nics: Vec<Vec<String>>,
}

impl Telemetry {
    fn start(
        world: &World<'_>,
        secret: &efatop_auth::Secret,
        wanted: bool,
        interval: Duration,
        hang_timeout: Duration,
        events: &Sender<Input>,
        namespaces: Option<&crate::netns::Namespaces>,
    ) -> Result<Self, ExperimentError> {
        // Telemetry sockets live in the namespace the launcher runs in, whichever node a rank emulates.
        let collector = if world.rank == 0 && wanted {
            let gate = crate::collector::Gate {
                secret: secret.clone(),
                bounds: efatop_proto::telemetry::WorldBounds { ranks: world.size, channels: world.channels.len() },
                bind: crate::collector::bind_address(&world.hosts),
            };
            let started = crate::netns::at_home(namespaces, || Collector::start(events.clone(), gate));
            Some(started.map_err(|e| ExperimentError::Bootstrap(format!("telemetry collector: {e}")))?)
        } else {
            None
        };
        // A host other than rank 0's with more than one rank: its lowest rank relays the host's telemetry
        // (crate::relay), its listener bound before the round so that the round can tell where it is.
        let plan = crate::relay::Plan::of(&world.hosts, world.rank);
        let leader = plan.as_ref().is_some_and(|plan| plan.leader == world.rank);
        let listener = if leader {
            let bound = crate::netns::at_home(namespaces, crate::relay::RelayListener::bind);
            Some(bound.map_err(|e| ExperimentError::Bootstrap(format!("telemetry relay: {e}")))?)
        } else {
            None
        };
        // Rank 0 publishes where its collector listens; a relay's rank where it listens; every rank its NICs' names.
        let published = collector.as_ref().map_or(String::new(), |c| crate::collector::published(c, &world.hosts[0]));
        let relaying = listener.as_ref().map_or(String::new(), |l| l.address.to_string());
        let nic_names: Vec<String> = world.channels.iter().map(|c| c.nic().domain.clone()).collect();
        let gathered = efatop_experiments::gather(world.bootstrap, &(published, relaying, nic_names), "telemetry address, relays and NICs")?;
        let address = gathered.first().map(|(address, ..)| address.clone()).unwrap_or_default();
        let relay_address = plan.as_ref().and_then(|plan| gathered.get(plan.leader)).and_then(|(_, relay, _)| relay.parse::<SocketAddr>().ok());
        let nics = gathered.into_iter().map(|(.., nics)| nics).collect();
        let (sampler, relay) = if address.is_empty() {
            (None, None)
        } else {
            let started = crate::netns::at_home(namespaces, || {
                let upstream = crate::collector::resolve(&address, &world.hosts[0], &world.hosts[world.rank])?;
                // Every rank but 0 watches rank 0 through its connection: once rank 0 is gone or cut off the run
                // is over for this rank, which stops its transfers and ends by itself. A relay's rank watches
                // through the relay; the host's other ranks through their connection to it, which the relay
                // closes once rank 0 is gone.
                let watch = |relay: Option<String>| (world.rank != 0).then(|| orphan_watch(world, hang_timeout, events, relay));
                let bounds = efatop_proto::telemetry::WorldBounds { ranks: world.size, channels: world.channels.len() };
                let relay = match (listener, &plan) {
                    (Some(listener), Some(plan)) => {
                        let every = crate::relay::Plan::forward_every(interval, crate::relay::Plan::leaders(&world.hosts).len());
                        Some(listener.start(plan.clone(), upstream, secret, bounds, every, watch(None))?)
                    }
                    _ => None,
                };
                let sampler = match (relay_address, &plan) {
                    (Some(relayed), Some(plan)) => {
                        let watched = if leader { None } else { watch(Some(plan.describe())) };
                        SamplerThread::start_watching(world.rank, world.probe.clone(), relayed, secret, interval, watched)?
                    }
                    _ => SamplerThread::start_watching(world.rank, world.probe.clone(), upstream, secret, interval, watch(None))?,
                };
                Ok::<_, std::io::Error>((sampler, relay))
            });
            let (sampler, relay) = started.map_err(|e| ExperimentError::Bootstrap(format!("telemetry: cannot reach rank 0's collector: {e}")))?;
            (Some(sampler), relay)
        };
        Ok(Self { collector, sampler, relay, nics })
    }
}

fn run_info(results: &RunResults, world: &World<'_>, sweep: &StepOptions) -> RunInfo {
    RunInfo {
        experiment: results.metadata.experiment.clone(),
        provider_stack: world.provider_stack.clone(),
        ranks: world.size,
        hosts: world.hosts.clone(),
        channels: world.channels.len(),
        link_gbps: world.link_gbps,
        memory: results.metadata.memory.clone(),
        configs: results.configs.clone(),
        sizes: sweep.sizes.clone(),
        placements: results.metadata.placements.clone(),
    }
}

fn metadata(world: &World<'_>, workload: &dyn Workload, sweep: &StepOptions, hang_timeout: Duration) -> RunMetadata {
    RunMetadata {
        efatop_version: env!("CARGO_PKG_VERSION").into(),
        libfabric_version: efatop_fabric::runtime_version(),
        experiment: workload.kind(),
        provider: world.provider.to_string(),
        provider_stack: world.provider_stack.clone(),
        fabric: world.fabric.clone(),
        libfabric_api: efatop_fabric::api_version_string(),
        emulated_write: world.emulated_write,
        shm_shortcut: world.shm_shortcut,
        completion: Some(world.completion),
        ranks: world.size,
        hosts: world.hosts.clone(),
        channels: world.channels.len(),
        distinct_nics: world.distinct_nics,
        nics: world.nic_records(),
        link_gbps: world.link_gbps,
        link_source: world.link_source.clone(),
        // The proxy's and ipc's writers move GPU memory whatever --memory says.
        memory: workload.memory_label(),
        window: sweep.window,
        warmup: sweep.warmup,
        iters: sweep.iters,
        notes: world.notes.clone(),
        started_unix_s: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        placements: Vec::new(),
        gpu_pairs: Vec::new(),
        instance_type: None,
        hang_timeout_s: hang_timeout.as_secs(),
        telemetry_relays: crate::relay::Plan::leaders(&world.hosts),
    }
}

#[cfg(test)]
mod tests {
    use efatop_proto::results::RankPlacement;

    #[test]
    fn a_rank_stays_within_the_cpus_it_was_allowed() {
        // p5's NUMA node 0 under `taskset -c 46,47,96`: only the allowed part of the node.
        let near: Vec<u32> = (0..48).chain(96..144).collect();
        assert_eq!(super::pinning_set(&near, &[46, 47, 96, 150]), vec![46, 47, 96]);
        // The node's CPUs all outside the allowed set (taskset to the other socket): the allowed set.
        assert_eq!(super::pinning_set(&near, &[60, 61]), vec![60, 61]);
        // No topology: every allowed CPU.
        assert_eq!(super::pinning_set(&[], &[0, 1]), vec![0, 1]);
    }

    #[test]
    fn helpers_keep_off_every_hot_cpu_when_they_can() {
        // Four ranks' hot CPUs 0..3 in a set of six: helpers get 4 and 5.
        assert_eq!(super::helper_cpus(&[0, 1, 2, 3, 4, 5], &[0, 1, 2, 3], 1), vec![4, 5]);
        // Two ranks on two CPUs (bench-vs-fabtests' taskset): each rank's helpers run on the other's CPU.
        assert_eq!(super::helper_cpus(&[0, 1], &[0, 1], 0), vec![1]);
        assert_eq!(super::helper_cpus(&[0, 1], &[0, 1], 1), vec![0]);
        // One CPU: nowhere else to go.
        assert_eq!(super::helper_cpus(&[7], &[7], 7), vec![7]);
    }

    fn on(host: &str, gpu: usize, bus: &str) -> RankPlacement {
        RankPlacement { host: host.into(), gpu: Some(gpu), gpu_pci_bus_id: Some(bus.into()), ..RankPlacement::default() }
    }

    #[test]
    fn gpu_pairs_need_two_gpus_on_rank_0s_host() {
        // One GPU on rank 0's host (the other host's are not rank 0's to ask about): no pair.
        let placements = [on("a", 0, "0000:53:00.0"), on("b", 1, "0000:64:00.0"), on("a", 0, "0000:53:00.0")];
        assert!(super::gpu_pairs(&placements).is_empty());
        assert!(super::gpu_pairs(&[]).is_empty());
        // Two GPUs that neither NVML nor hwloc knows here (no driver, no GPUs on a build machine): left out.
        if efatop_node::NvlinkSurvey::read().is_err() && efatop_topology::NodeTopology::discover().is_ok_and(|t| t.gpus.is_empty()) {
            assert!(super::gpu_pairs(&[on("a", 0, "0000:53:00.0"), on("a", 1, "0000:64:00.0")]).is_empty());
        }
    }
}
