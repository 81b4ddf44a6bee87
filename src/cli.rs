//! The command line. Every flag says what it takes; a bad value is refused by clap with the flag's name,
//! the allowed values and exit code 2.

use clap::{Args, Parser, Subcommand};

use crate::parse::whole_number;

mod check;
mod experiments;
mod tools;
mod view;
pub mod watch;

pub use check::{CheckArgs, HealthFormat};
pub use tools::{CompareArgs, MonitorArgs, PackageFilesArgs, QueueArgs, ReportArgs, RingArg, TopoArgs};
pub use experiments::{
    AlltoallArgs, CommonArgs, Experiment, IpcArgs, JsonSamplesArg, MemoryArg, ProxyArgs, SendrecvArgs, SweepArgs, SweepFormat, WriteArgs,
};
pub use view::{AttachArgs, ReplayArgs};

#[derive(Debug, Parser)]
#[command(name = "efatop", version, about = "Measure what an EFA / libfabric fabric really delivers, rank by rank")]
#[command(after_help = "Start ranks with `efatop run --ranks N <experiment>` on one host, or under mpirun/srun.")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    // The benchmarks, one rank per process: `experiments.rs`'s list.
    #[command(flatten)]
    Experiment(Experiment),
    /// The GPU→CPU request ring alone (one GPU, no fabric): requests/s and push-to-consume latency
    Queue(QueueArgs),
    /// Start N local ranks of an experiment, no MPI needed
    Run(RunArgs),
    /// Where GPUs, NICs and CPUs sit (as `nvidia-smi topo -m`), and which NICs a rank on each GPU should use
    Topo(TopoArgs),
    /// Render a saved results file as a table, CSV, Markdown or JSON, and plot it
    Report(ReportArgs),
    /// Compare two saved runs per configuration and size, or one run against the published figures of its
    /// instance type (--expected); exit code 1 when one regressed or fell below expectation
    Compare(CompareArgs),
    /// Live view of every NIC and GPU link on this node (or several), with no benchmark running
    Monitor(MonitorArgs),
    /// Node preflight: EFA devices, ports, error counters, NUMA and PCIe placement, GPUDirect, memlock and
    /// libfabric against the instance type; as a table, JSON, or a Slurm, NHC or node-problem-detector check
    Check(CheckArgs),
    /// Watch a run that rank 0 serves (`--serve`): its live dashboard, or its JSON lines
    Attach(AttachArgs),
    /// Play a recorded run (`--record`) in the dashboard, or print its JSON lines
    Replay(ReplayArgs),
    /// Watch an NCCL job live through efatop's profiler plugin: its ranks, busbw per collective and size,
    /// bytes per peer, its NICs (fallback, rails) and the rank a hang waits on
    Watch(crate::cli::watch::WatchArgs),
    /// Write the man pages and shell completions that the .deb and .rpm install (scripts/build/package)
    #[command(hide = true)]
    PackageFiles(PackageFilesArgs),
}

impl Cli {
    /// Parses the command line. A negative number is taken as a flag's value (`--iters -5`), so that the
    /// flag's own check refuses it by name, rather than clap reading `-5` as an unknown flag.
    pub fn parse_args() -> Result<Self, clap::Error> {
        fn negative_numbers_are_values(command: clap::Command) -> clap::Command {
            command
                .mut_args(|arg| if arg.get_action().takes_values() { arg.allow_negative_numbers(true) } else { arg })
                .mut_subcommands(negative_numbers_are_values)
        }
        let mut matches = negative_numbers_are_values(<Self as clap::CommandFactory>::command()).try_get_matches()?;
        <Self as clap::FromArgMatches>::from_arg_matches_mut(&mut matches)
    }

    /// The experiments, as `efatop run --ranks N <experiment>` knows them.
    pub fn experiments() -> Vec<String> {
        let cli = <Self as clap::CommandFactory>::command();
        cli.find_subcommand("run").map(|run| run.get_subcommands().map(|c| c.get_name().to_string()).collect()).unwrap_or_default()
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Number of ranks to start on this host
    #[arg(long, value_parser = whole_number::<u16>(1..=4096))]
    pub ranks: u16,
    /// Run rank i inside network namespace i (cycling), e.g. the nodes of scripts/cluster/emulate-cluster
    #[arg(long, value_delimiter = ',', value_parser = parse_netns)]
    pub netns: Vec<String>,
    #[command(subcommand)]
    pub experiment: Experiment,
}

fn parse_netns(text: &str) -> Result<String, String> {
    let path = std::path::Path::new("/var/run/netns").join(text);
    if text.is_empty() || text.contains('/') || !path.exists() {
        return Err(format!("`{text}` is not a network namespace in /var/run/netns (see `ip netns list`)"));
    }
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn sizes(args: &[&str]) -> (u64, u64) {
        let cli = Cli::try_parse_from(std::iter::once("efatop").chain(args.iter().copied())).expect("parses");
        match cli.command {
            Command::Experiment(experiment) => experiment.sizes(),
            _ => unreachable!("only experiments here"),
        }
    }

    #[test]
    fn proxy_sweeps_the_seeds_sizes_unless_told_and_the_others_keep_theirs() {
        const K: u64 = 1 << 10;
        const M: u64 = 1 << 20;
        assert_eq!(sizes(&["proxy"]), (8 * M, 1024 * M));
        assert_eq!(sizes(&["write"]), (4 * K, 64 * M));
        assert_eq!(sizes(&["proxy", "--min-size", "64K", "--max-size", "256M"]), (64 * K, 256 * M));
        // One end given: the other default, unless that would leave nothing to sweep.
        assert_eq!(sizes(&["proxy", "--max-size", "4M"]), (4 * M, 4 * M));
        assert_eq!(sizes(&["proxy", "--min-size", "64M"]), (64 * M, 1024 * M));
        assert_eq!(sizes(&["write", "--min-size", "1G"]), (1024 * M, 1024 * M));
        assert_eq!(sizes(&["write", "--max-size", "1M"]), (4 * K, M));
        assert_eq!(sizes(&["ipc"]), (M, 1024 * M));
    }

    /// `ipc --same-gpu` opens one GPU for both ranks (the first unless `--gpu` names one), also on hosts
    /// with more; without it each rank takes its own (auto).
    #[test]
    fn ipc_same_gpu_puts_both_ranks_on_one_gpu() {
        let gpu = |args: &[&str]| {
            let cli = Cli::try_parse_from(std::iter::once("efatop").chain(args.iter().copied())).expect("parses");
            match cli.command {
                Command::Experiment(experiment) => experiment.descriptor().gpu_index(experiment.common().gpu.0),
                _ => unreachable!("only experiments here"),
            }
        };
        assert_eq!(gpu(&["ipc"]), None);
        assert_eq!(gpu(&["ipc", "--same-gpu"]), Some(0));
        assert_eq!(gpu(&["ipc", "--same-gpu", "--gpu", "1"]), Some(1));
        assert_eq!(gpu(&["write", "--memory", "device"]), None);
    }

    /// Every duration flag takes units, and a bare number is seconds on every one of them.
    #[test]
    fn every_duration_flag_takes_units_and_bare_seconds() {
        let parse = |args: &[&str]| Cli::try_parse_from(std::iter::once("efatop").chain(args.iter().copied())).expect("parses").command;
        let Command::Experiment(write) = parse(&["write", "--interval", "2", "--timeout", "2m", "--hang-timeout", "90s"]) else { unreachable!() };
        assert_eq!(write.common().interval, std::time::Duration::from_secs(2));
        assert_eq!((write.common().timeout, write.common().hang_timeout), (120, 90));
        let Command::Watch(watch) = parse(&["watch", "--listen", "0", "--window", "5s", "--hang-after", "1m", "--duration", "2"]) else { unreachable!() };
        assert_eq!((watch.window, watch.hang_after, watch.duration), (5, 60, 2));
        let Command::Check(check) = parse(&["check", "--window", "2"]) else { unreachable!() };
        assert_eq!(check.window, std::time::Duration::from_secs(2));
        let Command::Monitor(monitor) = parse(&["monitor", "--interval", "2.5s"]) else { unreachable!() };
        assert_eq!(monitor.interval, std::time::Duration::from_millis(2500));
        let Command::Queue(queue) = parse(&["queue", "--timeout", "1m"]) else { unreachable!() };
        assert_eq!(queue.timeout, 60);
    }
}
