//! efatop: measures what a libfabric fabric (EFA on AWS p5, or shm/tcp anywhere) really delivers.
//!
//! This binary parses the command line, starts or joins the ranks (its own launcher or MPI), sets up the
//! world, runs one experiment and prints what rank 0 measured.

#![forbid(unsafe_code)]

mod attach;
mod check;
mod cli;
mod experiment;
mod launch;
mod monitor;
mod nvlink;
mod package_files;
mod parse;
mod printer;
mod queue;
mod rank;
mod replay;
mod report;
mod session;
mod sweep_contract;
mod term;
mod topo;
mod tui;
mod viewer;
mod watch;

use std::process::ExitCode;

/// Rank 0's collector decodes tens of thousands of samples a second on one thread and frees them on
/// another; glibc's allocator spent a third of the collector's time on that (perf, 4096 ranks × 32
/// channels), mimalloc a fraction of it. The benchmark hot paths never allocate either way.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::fmt::Write as _;

use cli::{Cli, Command};

fn main() -> ExitCode {
    // CUDA numbers GPUs fastest-first unless told otherwise; hwloc, nvidia-smi and `efatop topo` number
    // them in PCI bus order. Make them agree before CUDA is loaded, so `--gpu N` means one GPU everywhere.
    if std::env::var_os("CUDA_DEVICE_ORDER").is_none() {
        std::env::set_var("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    }
    // Before any handler of ours: SIGINT/SIGTERM/SIGHUP back from a linked library's constructor (see
    // `reclaim_stop_signals`), so that they end a run through its ending.
    if let Err(err) = efatop_fabric::signals::reclaim_stop_signals() {
        eprintln!("efatop: warning: cannot reset the stop signals ({err}): a SIGTERM may end a run without its tables");
    }
    let cli = match Cli::parse_args() {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    // A rank's process (what `efatop run` launches, and a rank under mpirun or srun) loads libfabric.
    let a_rank = matches!(cli.command, Command::Experiment(_));
    let code = match cli.command {
        // Each rank of a sweep with --format keeps its own contract (rank 0 prints it).
        Command::Run(run) => launch::launch(&run),
        Command::Experiment(experiment) => match sweep_contract::wanted(&experiment) {
            Some((format, drain)) => sweep_contract::run(experiment, format, drain),
            None => rank::rank_main(experiment),
        },
        Command::Queue(args) => queue::queue(&args),
        Command::Topo(args) => topo::topo(&args),
        Command::Report(args) => report::report(&args),
        Command::Compare(args) => report::compare(&args),
        Command::Monitor(args) => monitor::monitor(&args),
        Command::Check(args) => check::check(&args),
        Command::Attach(args) => attach::attach(&args),
        Command::Replay(args) => replay::replay(&args),
        Command::Watch(args) => watch::watch(&args),
        Command::PackageFiles(args) => package_files::package_files(&args),
    };
    if a_rank || efatop_fabric::ending::abandoned() {
        // A run that failed left its fabric objects open, and a run that ended well has closed them and
        // written its files: either way the process ends without libfabric's exit handlers. `fi_fini`
        // destroys the memory monitor's locks and frees the providers while another thread of the process
        // may still reach them (a relay's or sampler's last free, through the monitor's munmap hook); a lock
        // taken after that aborts the rank in glibc (docs/endings.md).
        efatop_fabric::ending::exit(code);
    }
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Prints clap's verdict: help and version as clap formats them; a usage error as one line naming the flag
/// and, where clap lists them, the allowed values; exit code 2.
fn usage_error(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(err.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand) {
        let _ = err.print();
        return ExitCode::from(if err.use_stderr() { 2 } else { 0 });
    }
    let rendered = err.render().to_string();
    let line: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("For more information") && !l.starts_with("Usage:"))
        .map(|l| l.trim_start_matches("error: "))
        .collect();
    let mut line = line.join(" ");
    // `efatop writ`, `efatop run --ranks 2 bogus`: name what there is.
    if err.kind() == ErrorKind::InvalidSubcommand {
        let _ = write!(line, "; experiments: {} (`efatop --help` lists every command)", Cli::experiments().join(", "));
    }
    // clap quotes the value it refused: a `--pushgateway` URL's password must not be echoed.
    eprintln!("efatop: error: {}", efatop_runtime::run_metrics::scrub_userinfo(&line));
    ExitCode::from(2)
}
