//! `efatop run --ranks N <experiment>`: the launcher's plan from the command line; the launcher itself is
//! the runtime's ([`efatop_runtime::launch`]).

use std::ffi::OsString;

use efatop_runtime::launch::{CUDA_LAUNCH_BLOCKING, PeerCopies, Ranks, launch_ranks};

use crate::cli::RunArgs;

pub fn launch(run: &RunArgs) -> i32 {
    let ranks = usize::from(run.ranks);
    if ranks < 2 {
        eprintln!(
            "efatop: error: --ranks {ranks}: {} needs at least 2 ranks (rank 0 and a peer)",
            run.experiment.name()
        );
        return 2;
    }
    if let Err(message) = run.experiment.validate() {
        eprintln!("efatop: error: {message}");
        return 2;
    }
    let descriptor = run.experiment.descriptor();
    let copies = PeerCopies {
        synchronous: descriptor.copies_into_gpu_memory() && std::env::var_os(CUDA_LAUNCH_BLOCKING).is_none(),
        writer_exempt: descriptor.persistent_writer_kernel(),
    };
    let plan = Ranks {
        count: ranks,
        args: experiment_args(),
        netns: run.netns.clone(),
        copies,
        dashboard_may_be_up: crate::term::stdout_is_terminal(),
        ..Ranks::default()
    };
    match launch_ranks(&plan) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("efatop: error: launching {ranks} ranks: {err}");
            1
        }
    }
}

/// The arguments each rank gets: everything from the experiment's name on.
fn experiment_args() -> Vec<OsString> {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let after_run = args.iter().position(|a| a == "run").map_or(0, |i| i + 1);
    // The experiments `run` knows, as the command line defines them: a new one needs no change here.
    let experiments = crate::cli::Cli::experiments();
    let experiment = args[after_run..]
        .iter()
        .position(|a| experiments.iter().any(|name| a == name.as_str()))
        .map_or(after_run, |i| after_run + i);
    args[experiment..].to_vec()
}
