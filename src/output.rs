//! One rank's run of an experiment, and what rank 0 makes of it: the header, the seed-format table and
//! the JSON results file (rewritten after every size, so a run that dies keeps what it measured).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use efatop_experiments::results::{Measurement, RunMetadata, RunResults};
use efatop_experiments::write::WriteConfig;
use efatop_experiments::{Bootstrap, ExperimentError, SweepOptions, World, WorldOptions, sendrecv, sizes, write};
use efatop_fabric::Capabilities;

use crate::bootstrap;
use crate::cli::{self, Experiment};

/// Runs this process's rank; returns its exit code.
pub fn rank_main(experiment: &Experiment) -> i32 {
    let common = experiment.common();
    if let Err(message) = cli::validate(common) {
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
    match run_rank(&*bootstrap, experiment) {
        Ok(()) => 0,
        Err(err) => {
            match &err {
                // Rank 0 speaks for the run: what other ranks shared with it, it prints.
                ExperimentError::Reported { .. } => {}
                ExperimentError::PeerFailed { .. } | ExperimentError::Bootstrap(_) if rank != 0 => {}
                ExperimentError::InvalidInput { .. } | ExperimentError::Unsupported(_) | ExperimentError::PeerFailed { .. } => {
                    eprintln!("efatop: error: {err}");
                }
                _ => eprintln!("efatop: error: rank {rank}: {err}"),
            }
            err.exit_code()
        }
    }
}

fn run_rank(bootstrap: &dyn Bootstrap, experiment: &Experiment) -> Result<(), ExperimentError> {
    let common = experiment.common();
    let results_file = match (&common.out, bootstrap.rank()) {
        (Some(path), 0) => Some(ResultsFile::create(path)?),
        _ => None,
    };
    let capabilities = match experiment {
        Experiment::Write(_) => Capabilities { messages: true, rma_write: true },
        Experiment::Sendrecv(_) => Capabilities { messages: true, rma_write: false },
    };
    let window = usize::from(common.window);
    let options = WorldOptions {
        provider: common.provider.choice(),
        channels: common.channels,
        capabilities,
        // Room for every iteration in flight to every peer, plus the control traffic around them.
        max_in_flight: (window * bootstrap.size()).max(64),
        op_timeout: Duration::from_secs(common.timeout),
        link_gbps: common.link_gbps,
    };
    let world = World::establish(bootstrap, &options)?;
    let sweep = SweepOptions {
        sizes: sizes::sweep(common.min_size, common.max_size),
        warmup: common.warmup,
        iters: common.iters,
        window,
        corrupt_byte: common.debug_corrupt_byte,
    };
    let configs: Vec<String> = match experiment {
        Experiment::Write(args) => args.configs.iter().map(|c| WriteConfig::from(*c).column()).collect(),
        Experiment::Sendrecv(_) => vec![sendrecv::SINGLE_HOST.into()],
    };
    let mut results = RunResults { metadata: metadata(&world, experiment, &sweep), configs, measurements: Vec::new() };
    if world.rank == 0 {
        print!("{}", efatop_ui::render_header(&results.metadata, &sweep.sizes));
        let _ = std::io::stdout().flush();
    }
    let mut save_error = None;
    let mut on_measurement = |measurement: &Measurement| {
        results.measurements.push(measurement.clone());
        if let Some(file) = &results_file {
            if let Err(err) = file.save(&results) {
                save_error.get_or_insert(err);
            }
        }
    };
    match experiment {
        Experiment::Write(args) => {
            let configs: Vec<WriteConfig> = args.configs.iter().map(|c| WriteConfig::from(*c)).collect();
            write::run(&world, &sweep, &configs, &mut on_measurement)?;
        }
        Experiment::Sendrecv(_) => {
            sendrecv::run(&world, &sweep, &mut on_measurement)?;
        }
    }
    if world.rank == 0 {
        println!();
        print!("{}", efatop_ui::render_table(&results));
        println!("# every size verified: all bytes received matched the sender's pattern");
        if let Some(file) = &results_file {
            println!("# results written to {}", file.path.display());
        }
    }
    match save_error {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

fn metadata(world: &World<'_>, experiment: &Experiment, sweep: &SweepOptions) -> RunMetadata {
    let notes = world.notes.clone();
    RunMetadata {
        efatop_version: env!("CARGO_PKG_VERSION").into(),
        libfabric_version: efatop_fabric::runtime_version(),
        experiment: experiment.name().into(),
        provider: world.provider.to_string(),
        provider_stack: world.provider_stack.clone(),
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
        memory: "host".into(),
        window: sweep.window,
        warmup: sweep.warmup,
        iters: sweep.iters,
        notes,
        started_unix_s: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
    }
}

/// The results file, replaced atomically (write to a sibling, rename) after every measurement.
struct ResultsFile {
    path: PathBuf,
}

impl ResultsFile {
    fn create(path: &Path) -> Result<Self, ExperimentError> {
        std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|e| ExperimentError::InvalidInput {
            flag: "--out",
            message: format!("cannot write {}: {e}", path.display()),
        })?;
        Ok(Self { path: path.to_path_buf() })
    }

    fn save(&self, results: &RunResults) -> Result<(), ExperimentError> {
        let failed = |e: &dyn std::fmt::Display| ExperimentError::Bootstrap(format!("saving {}: {e}", self.path.display()));
        let json = serde_json::to_vec_pretty(results).map_err(|e| failed(&e))?;
        let mut staging = self.path.clone().into_os_string();
        staging.push(".tmp");
        std::fs::write(&staging, json).map_err(|e| failed(&e))?;
        std::fs::rename(&staging, &self.path).map_err(|e| failed(&e))
    }
}
