//! `efatop sweep --format slurm|npd` (also under `efatop run`): the sweep's verdict in the contracts of
//! the pipelines that drain nodes (`efatop_health::contract`), with the exit codes they read (0 nothing suspect,
//! 1 suspects, 2 the sweep failed) instead of sweep's own 3.
//!
//! The contract itself (what a verdict becomes, per node) is `efatop_health::sweep`'s.
//!
//! The process runs the same command again as a child, with `--json` in place of `--format` and stderr
//! passed through, and reads the child's typed JSON lines (`sweep`: every rank's host; `verdict`: the
//! suspects; `error`): its own stdout then carries nothing but the contract. Under mpirun or srun every
//! rank does this, and only rank 0's child prints the JSON lines, so only rank 0 prints a contract.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use efatop_health::contract::{self, Verdict};
use efatop_health::sweep::{verdict, Heard};

use crate::experiment::{Experiment, SweepFormat};

/// Set on the child, which then runs the sweep itself.
const ENV_INNER: &str = "EFATOP_SWEEP_CONTRACT_CHILD";

/// The contract asked for, when this process is the one to wrap the sweep.
pub fn wanted(experiment: &Experiment) -> Option<(SweepFormat, bool)> {
    let Experiment::Sweep(args) = experiment else { return None };
    // --drain with npd is refused by the sweep's own checks.
    let refused = args.drain && args.format != SweepFormat::Slurm;
    if args.format == SweepFormat::Plain || refused || std::env::var_os(ENV_INNER).is_some() {
        return None;
    }
    Some((args.format, args.drain))
}

/// This process's arguments for the child: `--format X` and `--drain` out, `--json` in.
fn child_args() -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    let mut skip_value = false;
    for arg in std::env::args_os().skip(1) {
        if skip_value {
            skip_value = false;
            continue;
        }
        let text = arg.to_string_lossy();
        if text == "--format" {
            skip_value = true;
            continue;
        }
        if text.starts_with("--format=") || text == "--drain" {
            continue;
        }
        args.push(arg);
    }
    args.push("--json".into());
    args
}

/// This process is rank 0 (or alone), by whichever launcher started it.
fn is_rank_zero() -> bool {
    ["EFATOP_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"]
        .iter()
        .find_map(|name| std::env::var(name).ok())
        .is_none_or(|rank| rank.trim() == "0")
}

/// Runs the sweep as a child and prints its verdict in `format`; returns the exit code.
pub fn run(format: SweepFormat, drain: bool) -> i32 {
    let Ok(program) = std::env::current_exe() else {
        eprintln!("efatop: error: cannot find this program to run the sweep");
        return 2;
    };
    let mut child = match Command::new(program).args(child_args()).env(ENV_INNER, "1").stdout(Stdio::piped()).spawn() {
        Ok(child) => child,
        Err(err) => {
            eprintln!("efatop: error: cannot start the sweep: {err}");
            return 2;
        }
    };
    let mut heard = Heard::default();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            heard.take(&line);
        }
    }
    let code = child.wait().ok().and_then(|status| status.code()).unwrap_or(1);
    if !is_rank_zero() {
        // Another rank: rank 0 reports; this one says only whether it ran.
        return if code == 0 { 0 } else { 2 };
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_child_gets_json_instead_of_the_format() {
        // The test binary's own arguments: whatever they are, no --format and a --json at the end.
        let args = child_args();
        assert_eq!(args.last().map(|a| a.to_string_lossy().into_owned()).as_deref(), Some("--json"));
        assert!(!args.iter().any(|a| a.to_string_lossy().starts_with("--format")));
    }
}
