//! One rank's run of an experiment: its world, pinning and placement, NVML pairs, telemetry wiring and
//! the results file (rewritten after every size, so a run that dies keeps what it measured). What rank 0
//! shows of the run is [`session`]'s.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use efatop_experiments::results::{GpuPairRecord, RankPlacement, RunMetadata, RunResults, RunState, RunStatus};
use efatop_experiments::{Bootstrap, ExperimentError, SweepOptions, Unobserved, World, WorldOptions, sizes};
use efatop_fabric::Capabilities;
use efatop_monitor::NvlinkSurvey;
use efatop_topology::NodeTopology;
use efatop_ui::liveness::Liveness;
use efatop_ui::state::RunInfo;

use crate::experiment::{Experiment, MemoryArg};
use crate::collector::{Collector, SamplerThread};
use crate::event::{ConsumerEvent, RunStart};
use crate::results_file::{ResultsFile, default_results_path, record_end};
use crate::printer::Mode;
use crate::session::{ConsumerOutcome, RankZero};
use crate::watchdog::{SharedLiveness, WatchdogOptions};
use crate::{bootstrap, printer, session, term};

/// Runs this process's rank; returns its exit code.
pub fn rank_main(experiment: &Experiment) -> i32 {
    if let Err(message) = experiment.validate() {
        eprintln!("efatop: error: {message}");
        return 2;
    }
    let bootstrap = match bootstrap::connect() {
        Ok(bootstrap) => bootstrap,
        Err(err) => {
            eprintln!("efatop: error: {err}");
            return 1;
        }
    };
    let rank = bootstrap.rank();
    if bootstrap.size() < 2 {
        eprintln!(
            "efatop: error: --ranks: {} needs at least 2 ranks; start them with `efatop run --ranks N {}` or under mpirun",
            experiment.name(),
            experiment.name()
        );
        return 2;
    }
    let mut results_path = None;
    let mut run_metrics = None;
    let outcome = run_rank(&*bootstrap, experiment, &mut results_path, &mut run_metrics);
    // The results file says how the run ended, whichever way it did.
    if let Some(path) = &results_path {
        let reason = outcome.as_ref().err().map(ToString::to_string);
        if let Err(err) = record_end(path, reason.as_deref().map_or(Ok(()), Err)) {
            eprintln!("efatop: warning: {err}");
        }
    }
    // Last, once the results file records the end: the push, and the endpoint's final figures for a while.
    if let Some((metrics, mut results)) = run_metrics {
        results.status = Some(match &outcome {
            Ok(_) => RunStatus { state: RunState::Complete, reason: None },
            Err(err) => RunStatus { state: RunState::Failed, reason: Some(err.to_string()) },
        });
        if let Some(url) = &experiment.common().pushgateway {
            if let Err(err) = crate::run_metrics::push(url, &results, metrics.as_ref()) {
                eprintln!("efatop: warning: --pushgateway {url}: {err}");
            }
        }
        if let Some(metrics) = metrics {
            metrics.finish(&results, crate::run_metrics::LINGER);
        }
    }
    match outcome {
        Ok(code) => code,
        Err(err) => {
            match &err {
                // Rank 0 speaks for the run: what other ranks shared with it, it prints.
                ExperimentError::Reported { .. } => {}
                ExperimentError::PeerFailed { .. } | ExperimentError::Bootstrap(_) | ExperimentError::Stopped if rank != 0 => {}
                ExperimentError::InvalidInput { .. }
                | ExperimentError::Unsupported(_)
                | ExperimentError::PeerFailed { .. }
                | ExperimentError::Stopped => {
                    eprintln!("efatop: error: {err}");
                }
                _ => eprintln!("efatop: error: rank {rank}: {err}"),
            }
            err.exit_code()
        }
    }
}

#[allow(clippy::too_many_lines)] // the rank's life in order: world, telemetry, consumer, experiment, results
/// Returns the exit code of a run that went well: 0, or [`crate::experiment::SUSPECTS_FOUND`] for a sweep
/// whose verdict names any.
/// `finished_metrics` gets rank 0's Prometheus figures and the final results, for `--prometheus` and
/// `--pushgateway` to finish with once the results file records the end.
fn run_rank(
    bootstrap: &dyn Bootstrap,
    experiment: &Experiment,
    results_path: &mut Option<PathBuf>,
    finished_metrics: &mut Option<(Option<crate::run_metrics::RunMetrics>, RunResults)>,
) -> Result<i32, ExperimentError> {
    let started = Instant::now();
    let common = experiment.common();
    let rank = bootstrap.rank();
    // Every run keeps what it measured: in --out, or else a timestamped file under ./efatop-results/.
    // It holds valid JSON from the start (what is known of the run, no measurements, "running"), so a run
    // that fails before its first size still leaves a readable file that says why.
    let results_file = if rank == 0 {
        let path = common.out.clone().unwrap_or_else(|| default_results_path(experiment.name(), SystemTime::now()));
        // The default folder is made on first use; a folder named in --out must exist.
        let file = ResultsFile::create(&path, common.out.is_none(), &early_results(experiment, bootstrap.size()))?;
        let dashboard = !common.json && !common.no_tui && term::stdout_is_terminal();
        crate::watchdog::end_on_sigterm(dashboard, Some(path.clone()));
        *results_path = Some(path);
        Some(file)
    } else {
        None
    };
    // --serve / --record: bound and created before the world, so a viewer can attach while it starts.
    let mut outlets = if rank == 0 { crate::serve::Outlets::open(common.serve, common.record.as_deref())? } else { None };
    // An emulated node's rank moves into its network namespace before libfabric looks for NICs.
    let namespaces = match std::env::var(efatop_experiments::world::ENV_NETNS) {
        Ok(name) if !name.is_empty() => Some(crate::netns::Namespaces::enter(&name)?),
        _ => None,
    };
    let descriptor = experiment.descriptor();
    let capabilities = Capabilities { same_host_shortcut: common.allow_shm, ..descriptor.capabilities() };
    let window = usize::from(common.window);
    let options = WorldOptions {
        provider: common.provider.clone(),
        channels: common.channels,
        capabilities,
        // Room for every iteration in flight to every peer, plus the control traffic around them.
        max_in_flight: (window * bootstrap.size()).max(64),
        op_timeout: Duration::from_secs(common.timeout),
        link_gbps: common.link_gbps,
        // The proxy's writer is a GPU kernel and ipc's a GPU's stores: they always need the GPU.
        gpu: (common.memory.iter().any(|m| *m != MemoryArg::Host) || descriptor.always_gpu()).then_some(common.gpu.0),
    };
    let mut world = World::establish(bootstrap, &options).map_err(|err| match err {
        // Those need a GPU whatever --memory says: name the experiment, not the flag.
        ExperimentError::Unsupported(message) if descriptor.always_gpu() => {
            ExperimentError::Unsupported(message.replacen("--memory device:", &format!("{}:", experiment.name()), 1))
        }
        err => err,
    })?;
    if common.sysfs_root.is_some() || common.nic_map.is_some() {
        let root = common.sysfs_root.clone().unwrap_or_else(|| "/".into());
        world.watch_counters(&efatop_experiments::counters::CounterConfig { root, nic_map: common.nic_map.clone().unwrap_or_default() })?;
    }
    let pinned = if common.no_pin { None } else { pin_to_placement(&world) };
    let placements = gather_placements(&world, pinned)?;
    let sweep = SweepOptions {
        sizes: {
            let (min, max) = experiment.sizes();
            sizes::sweep(min, max)
        },
        warmup: common.warmup,
        iters: common.iters,
        window,
        corrupt_byte: common.debug_corrupt_byte,
        memories: descriptor.memories(world.gpu.as_ref().map_or(0, |g| g.ordinal())),
    };
    // The experiment names its columns once its memory is set up (`begin`); until then, the host names.
    let configs = descriptor.columns();
    let mut results = RunResults {
        metadata: metadata(&world, experiment, &sweep),
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
    let planned = descriptor.plan(&world, &placements, &mut results.metadata);
    if let Some(address) = outlets.as_ref().and_then(|o| o.serving).filter(|a| !a.ip().is_loopback()) {
        results.metadata.notes.push(format!("--serve {address}: the run is served beyond this host; whoever reaches it can watch"));
    }
    results.metadata.placements = placements;
    if world.rank == 0 {
        results.metadata.gpu_pairs = gpu_pairs(&results.metadata.placements);
    }
    if let Some(file) = &results_file {
        // The whole of the run's metadata, before its first size.
        file.save(&results)?;
    }
    let mode = if common.json {
        Mode::Json
    } else if common.no_tui || !term::stdout_is_terminal() {
        Mode::Plain
    } else {
        Mode::Dashboard
    };
    // Telemetry runs in every mode: besides the live view, it is rank 0's heartbeat of every rank.
    let telemetry_wanted = !common.no_telemetry;

    let (events_tx, events_rx) = mpsc::channel::<ConsumerEvent>();
    // Rank 0's one liveness clock: the watchdog keeps it and judges by it, the dashboard shows it.
    let liveness = SharedLiveness::new(Liveness::new(world.size, common.interval, Duration::from_secs(common.hang_timeout)));
    let watchdog = if rank == 0 && telemetry_wanted {
        let consumer = (mode != Mode::Plain || outlets.is_some()).then(|| events_tx.clone());
        let options = WatchdogOptions {
            hosts: world.hosts.clone(),
            abort: world.abort.clone(),
            liveness: liveness.clone(),
            started,
            dashboard: mode == Mode::Dashboard,
            results: results_path.clone(),
        };
        let started = crate::watchdog::Watchdog::start(consumer, options);
        Some(started.map_err(|e| ExperimentError::Bootstrap(format!("telemetry watchdog: {e}")))?)
    } else {
        None
    };
    let collector_events = watchdog.as_ref().map_or_else(|| events_tx.clone(), |w| w.events.clone());
    // `--prometheus` / `--pushgateway`: rank 0's view of the job, folded from the telemetry on its way to
    // the watchdog (until rank 0's event loop owns the outlets).
    let (collector_events, run_metrics) = match (rank, common.prometheus) {
        (0, Some(address)) => {
            let metrics = crate::run_metrics::RunMetrics::start(address, experiment.name(), &world.hosts)?;
            let (tee, relay) = crate::run_metrics::relay(metrics, collector_events)?;
            (tee, Some(relay))
        }
        _ => (collector_events, None),
    };
    let telemetry = Telemetry::start(&world, telemetry_wanted, common.interval, &collector_events, namespaces.as_ref())?;
    drop(collector_events);
    let sampler = telemetry.sampler;
    let collector = telemetry.collector;
    let every_rank_nics = telemetry.nics;
    if let Some(metrics) = &run_metrics {
        metrics.set_nics(every_rank_nics.clone());
    }

    if rank != 0 {
        let outcome = planned(&sweep, &mut Unobserved);
        drop(sampler);
        return outcome.map(|()| 0);
    }

    // Rank 0: a consumer for the chosen mode, fed by the collector and by the experiment's observer.
    let stop = Arc::new(AtomicBool::new(false));
    let start = RunStart {
        info: run_info(&results, &world, &sweep),
        nics: every_rank_nics,
        results: results.clone(),
        pairs: descriptor.pair_matrices(),
        serving: outlets.as_ref().and_then(|o| o.serving),
        interval_ms: common.interval.as_millis() as u64,
    };
    let events_rx = match &mut outlets {
        Some(outlets) => outlets.tee(start.clone(), events_rx, started, mode != Mode::Plain),
        None => events_rx,
    };
    let consumer = session::start_consumer(session::ConsumerSetup {
        mode,
        metadata: &results.metadata,
        sizes: &sweep.sizes,
        dashboard: (mode == Mode::Dashboard).then_some(start),
        pairs: descriptor.pair_matrices(),
        events: events_rx,
        started,
        stop: stop.clone(),
        liveness: liveness.clone(),
    });
    let mut observer = RankZero {
        events: (mode != Mode::Plain || outlets.is_some()).then(|| events_tx.clone()),
        plain: mode == Mode::Plain,
        results,
        file: results_file,
        save_error: None,
        stop: stop.clone(),
    };
    let mut outcome = planned(&sweep, &mut observer);
    if matches!(outcome, Err(ExperimentError::Bootstrap(_))) && watchdog.is_some() {
        // The launcher's rendezvous closes when any rank dies, and the same death closes that rank's
        // telemetry connection, which the watchdog names: give it a moment to say which rank it was, rather
        // than reporting only that the rendezvous was lost.
        let deadline = Instant::now() + Duration::from_secs(1);
        while !world.abort.is_raised() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    if outcome.is_err() && world.abort.is_raised() {
        // The watchdog saw why first (a rank died or hung); whatever broke here followed from it.
        outcome = Err(ExperimentError::Fabric(efatop_fabric::FabricError::Abandoned(world.abort.reason())));
    }
    if let Some(watchdog) = &watchdog {
        watchdog.run_over.store(true, Ordering::Relaxed);
    }
    if let Some(sampler) = sampler {
        sampler.finish();
    }
    let finished = ConsumerEvent::Finished { error: outcome.as_ref().err().map(ToString::to_string) };
    match &watchdog {
        Some(watchdog) => {
            // The last samples drain through the collector before the consumer is told the run is over: each
            // rank closes its telemetry after its last sample, so once the collector has said every rank
            // closed, nothing is left in flight. `Finished` then follows them down the same channel. A rank
            // that never closes (hung, or its host gone) is waited for only so long.
            let limit = if outcome.is_ok() { DRAIN_LIMIT } else { common.interval.min(Duration::from_millis(200)) };
            let until = Instant::now() + limit;
            while !every_rank_closed(&liveness) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(2));
            }
            let _ = watchdog.events.send(finished);
        }
        None => {
            let _ = events_tx.send(finished);
        }
    }
    drop(events_tx);
    drop(watchdog);
    let consumer_outcome = consumer.map(|handle| handle.join().unwrap_or(ConsumerOutcome::Failed("the display thread panicked".into())));
    drop(collector);
    if let Some(outlets) = outlets {
        // The tee ends once the run's channel has no sender left: the observer's is the last.
        drop(observer.events.take());
        outlets.finish();
    }
    let RankZero { mut results, file, save_error, .. } = observer;
    // As the file will say once `rank_main` records the end.
    results.status = Some(match &outcome {
        Ok(()) => RunStatus { state: RunState::Complete, reason: None },
        Err(err) => RunStatus { state: RunState::Failed, reason: Some(err.to_string()) },
    });
    printer::plain::print_final(mode, &results, &sweep.sizes, outcome.is_ok(), file.as_ref().map(|f| f.path.as_path()));
    if let Some(ConsumerOutcome::Failed(reason)) = consumer_outcome {
        eprintln!("efatop: warning: the dashboard failed ({reason}); results above are complete");
    }
    // The collector is gone, so the relay has folded the last batch.
    let metrics = run_metrics.and_then(crate::run_metrics::Relay::join);
    if metrics.is_some() || common.pushgateway.is_some() {
        *finished_metrics = Some((metrics, results.clone()));
    }
    outcome?;
    save_error.map_or(Ok(()), Err)?;
    let suspects = results.sweep.as_ref().and_then(|s| s.verdict.as_ref()).is_some_and(|v| !v.suspects.is_empty());
    Ok(if suspects { crate::experiment::SUSPECTS_FOUND } else { 0 })
}

/// How long rank 0 waits, after a run that went well, for every rank's telemetry to close.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// The collector has told the watchdog (which keeps the liveness clock) that every rank's telemetry
/// connection closed.
fn every_rank_closed(liveness: &SharedLiveness) -> bool {
    let live = liveness.lock();
    (0..live.ranks()).all(|rank| live.silence(rank, Duration::ZERO).is_none())
}

/// Pins this rank's threads (the hot path and every thread it starts later) to the CPUs of its GPU's NUMA
/// node; returns them, or `None` when the topology gave none or the kernel refused.
fn pin_to_placement(world: &World<'_>) -> Option<String> {
    use nix::sched::{CpuSet, sched_setaffinity};
    let cpus = world.placement.as_ref()?.cpus.clone();
    let list = efatop_topology::parse_cpu_list(&cpus);
    if list.is_empty() {
        return None;
    }
    let mut set = CpuSet::new();
    for cpu in list {
        set.set(cpu as usize).ok()?;
    }
    sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).ok()?;
    Some(cpus)
}

/// Every rank's placement, for the header and the results file.
fn gather_placements(world: &World<'_>, pinned: Option<String>) -> Result<Vec<RankPlacement>, ExperimentError> {
    let placement = world.placement.as_ref();
    let mine = RankPlacement {
        rank: world.rank,
        host: world.hosts[world.rank].clone(),
        gpu: world.gpu_ordinal(),
        gpu_pci_bus_id: world.gpu_pci_bus_id(),
        numa_node: placement.and_then(|p| p.numa_node),
        nics: world.channels.iter().map(|c| c.nic().domain.clone()).collect(),
        pinned_cpus: pinned,
    };
    let encoded = serde_json::to_vec(&mine).map_err(|e| ExperimentError::Bootstrap(e.to_string()))?;
    world
        .bootstrap
        .allgather(&encoded)?
        .iter()
        .map(|record| serde_json::from_slice(record).map_err(|e| ExperimentError::Bootstrap(format!("placement record: {e}"))))
        .collect()
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
    nics: Vec<Vec<String>>,
}

impl Telemetry {
    fn start(
        world: &World<'_>,
        wanted: bool,
        interval: Duration,
        events: &Sender<ConsumerEvent>,
        namespaces: Option<&crate::netns::Namespaces>,
    ) -> Result<Self, ExperimentError> {
        // Telemetry sockets live in the namespace the launcher runs in, whichever node a rank emulates.
        let collector = if world.rank == 0 && wanted {
            let started = crate::netns::at_home(namespaces, || Collector::start(events.clone()));
            Some(started.map_err(|e| ExperimentError::Bootstrap(format!("telemetry collector: {e}")))?)
        } else {
            None
        };
        let published = collector.as_ref().map_or(String::new(), |c| format!("{}:{}", world.hosts[0], c.address.port()));
        let nic_names: Vec<String> = world.channels.iter().map(|c| c.nic().domain.clone()).collect();
        let gathered = world.bootstrap.allgather(format!("{published}\n{}", nic_names.join(",")).as_bytes())?;
        let nics = gathered
            .iter()
            .map(|record| {
                let text = String::from_utf8_lossy(record);
                text.split_once('\n').map_or(Vec::new(), |(_, nics)| nics.split(',').map(String::from).collect())
            })
            .collect();
        let address = String::from_utf8_lossy(&gathered[0]).split('\n').next().unwrap_or_default().to_string();
        let sampler = if address.is_empty() {
            None
        } else {
            let started = crate::netns::at_home(namespaces, || {
                crate::collector::resolve(&address, &world.hosts[0], &world.hosts[world.rank])
                    .and_then(|target| SamplerThread::start(world.rank, world.probe.clone(), target, interval))
            });
            Some(started.map_err(|e| ExperimentError::Bootstrap(format!("telemetry: cannot reach rank 0's collector: {e}")))?)
        };
        Ok(Self { collector, sampler, nics })
    }
}

fn run_info(results: &RunResults, world: &World<'_>, sweep: &SweepOptions) -> RunInfo {
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

fn metadata(world: &World<'_>, experiment: &Experiment, sweep: &SweepOptions) -> RunMetadata {
    RunMetadata {
        efatop_version: env!("CARGO_PKG_VERSION").into(),
        libfabric_version: efatop_fabric::runtime_version(),
        experiment: experiment.name().into(),
        provider: world.provider.to_string(),
        provider_stack: world.provider_stack.clone(),
        fabric: world.fabric.clone(),
        libfabric_api: efatop_fabric::api_version_string(),
        emulated_write: world.emulated_write,
        shm_shortcut: world.shm_shortcut,
        ranks: world.size,
        hosts: world.hosts.clone(),
        channels: world.channels.len(),
        distinct_nics: world.distinct_nics,
        nics: world.nic_records(),
        link_gbps: world.link_gbps,
        link_source: serde_json::to_value(world.link_source)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default(),
        // The proxy's and ipc's writers move GPU memory whatever --memory says.
        memory: experiment.memory_label(),
        window: sweep.window,
        warmup: sweep.warmup,
        iters: sweep.iters,
        notes: world.notes.clone(),
        started_unix_s: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        placements: Vec::new(),
        gpu_pairs: Vec::new(),
        hang_timeout_s: experiment.common().hang_timeout,
    }
}

/// What the results file says before the world is up: what the command line and the bootstrap tell.
fn early_results(experiment: &Experiment, ranks: usize) -> RunResults {
    let common = experiment.common();
    RunResults {
        metadata: RunMetadata {
            efatop_version: env!("CARGO_PKG_VERSION").into(),
            libfabric_version: efatop_fabric::runtime_version(),
            experiment: experiment.name().into(),
            provider: format!("{:?}", common.provider).to_lowercase(),
            ranks,
            warmup: common.warmup,
            iters: common.iters,
            window: usize::from(common.window),
            started_unix_s: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            hang_timeout_s: common.hang_timeout,
            ..RunMetadata::default()
        },
        status: Some(RunStatus::default()),
        ..RunResults::default()
    }
}

#[cfg(test)]
mod tests {
    use efatop_experiments::results::RankPlacement;

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
        if efatop_monitor::NvlinkSurvey::read().is_err() && efatop_topology::NodeTopology::discover().is_ok_and(|t| t.gpus.is_empty()) {
            assert!(super::gpu_pairs(&[on("a", 0, "0000:53:00.0"), on("a", 1, "0000:64:00.0")]).is_empty());
        }
    }
}
