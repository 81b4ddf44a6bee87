//! `efatop sweep --format slurm|npd` (also under `efatop run`): the sweep's verdict in the contracts of
//! the pipelines that drain nodes (`efatop_health::contract`), with the exit codes they read (0 nothing suspect,
//! 1 suspects, 2 the sweep failed) instead of sweep's own 3.
//!
//! This process runs its rank of the sweep itself (the runtime's [`efatop_runtime::rank::run`]) with a
//! consumer of its own that keeps the events the contract needs (`SweepBegin`: every rank's host;
//! `SweepVerdict`: the suspects; `Finished`: the error) and prints nothing: its stdout then carries nothing
//! but the contract; what the verdict becomes per node is `efatop_health::sweep`'s. Under mpirun, srun or `efatop run` every rank does this, and only rank 0's consumer
//! hears the run, so only rank 0 prints a contract.

use std::io::Write;
use std::path::Path;
use std::sync::mpsc;

use efatop_proto::events::ConsumerEvent;
use efatop_proto::results::RunResults;
use efatop_health::contract::{self, Verdict};
use efatop_health::sweep::{verdict, Heard};
use efatop_runtime::rank_zero::{Consumer, ConsumerOutcome, Show, ShowStart};

use crate::cli::{Experiment, SweepFormat};

/// The contract asked for, when this process is the one to wrap the sweep.
pub fn wanted(experiment: &Experiment) -> Option<(SweepFormat, bool)> {
    let Experiment::Sweep(args) = experiment else { return None };
    // --drain with npd is refused by the sweep's own checks.
    let refused = args.drain && args.format != SweepFormat::Slurm;
    if args.format == SweepFormat::Plain || refused {
        return None;
    }
    Some((args.format, args.drain))
}

/// This process is rank 0 (or alone), by whichever launcher started it.
fn is_rank_zero() -> bool {
    ["EFATOP_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"]
        .iter()
        .find_map(|name| std::env::var(name).ok())
        .is_none_or(|rank| rank.trim() == "0")
}

/// Rank 0's consumer: keeps what the contract needs and prints nothing.
struct Listen {
    heard: mpsc::Sender<Heard>,
}

impl Show for Listen {
    fn start(&mut self, _run: ShowStart<'_>) -> Option<Consumer> {
        let (events, received) = mpsc::channel::<ConsumerEvent>();
        let told = self.heard.clone();
        let handle = std::thread::Builder::new().name("efatop-contract".into()).spawn(move || {
            let mut heard = Heard::default();
            for event in received {
                heard.take(&event);
            }
            let _ = told.send(heard);
            ConsumerOutcome::Done
        });
        match handle {
            Ok(handle) => Some((events, handle)),
            Err(err) => {
                eprintln!("efatop: error: cannot start the sweep's consumer: {err}");
                None
            }
        }
    }

    fn finish(&mut self, _results: &RunResults, _sizes: &[u64], _file: &Path, _outcome: Option<ConsumerOutcome>) {}
}

/// Runs this rank of the sweep and, on rank 0, prints its verdict in `format`; returns the exit code.
pub fn run(experiment: Experiment, format: SweepFormat, drain: bool) -> i32 {
    let (told, heard) = mpsc::channel();
    let code = crate::rank::rank_with(experiment, Box::new(Listen { heard: told }));
    if !is_rank_zero() {
        // Another rank: rank 0's verdict and exit code are the contract. A failure of this rank during the
        // sweep is in it (rank 0 names the rank: unknown, 2); what this rank meets as it closes after rank 0
        // has ended (`efatop run` stops the other ranks as soon as rank 0 exits non-zero, and a suspect's 1
        // is such an exit; or its peer gone) is not the sweep's, and a 2 from it would read as bad input and
        // be put before rank 0's verdict. Bad input (2) is every rank's own.
        return if code == 2 { 2 } else { 0 };
    }
    // Nothing heard: the run ended before it started (its error is on stderr).
    let heard = heard.try_recv().unwrap_or_default();
    let verdict = verdict(&heard, code);
    let lines = match format {
        SweepFormat::Npd => vec![contract::npd(&verdict.0).0],
        SweepFormat::Slurm => verdict.1.iter().map(|(node, reason, _)| format!("{node} {reason}")).collect(),
        SweepFormat::Plain => Vec::new(),
    };
    if let Verdict::Unknown(why) = &verdict.0 {
        eprintln!("efatop: sweep: could not tell: {why}");
    }
    let mut stdout = std::io::stdout().lock();
    for line in &lines {
        let _ = writeln!(stdout, "{line}");
    }
    let _ = stdout.flush();
    if drain && format == SweepFormat::Slurm {
        for (node, reason, drainable) in &verdict.1 {
            if !drainable {
                continue;
            }
            match contract::drain_with_reason(node, reason) {
                Ok(()) => eprintln!("efatop: drained {node}"),
                Err(err) => eprintln!("efatop: error: --drain {node}: {err}"),
            }
        }
    }
    verdict.0.exit_code()
}
