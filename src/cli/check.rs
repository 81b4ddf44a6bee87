//! The arguments of `efatop check`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use efatop_fabric::Provider;

/// How `efatop check` (and `efatop sweep --format`) reports. Exit codes are the same in every format: 0
/// nothing wrong, 1 a problem, 2 could not tell (or bad input).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HealthFormat {
    /// a table: one row per rule and per thing found wrong
    Table,
    /// one JSON `check` line (docs/output.md)
    Json,
    /// LBNL NHC: nothing when healthy; else the line for NHC's `die` (deploy/nhc/efatop.nhc)
    Nhc,
    /// Kubernetes node-problem-detector custom plugin: one line of at most 80 characters
    Npd,
    /// Slurm: the drain reason when something is wrong, nothing when healthy
    Slurm,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// How to report
    #[arg(long, value_enum, default_value_t = HealthFormat::Table)]
    pub format: HealthFormat,
    /// The same as --format json
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// With --format slurm: drain this node with the reason (`scontrol update nodename=NODE state=drain
    /// reason=...`) when something is wrong, and resume it when nothing is and efatop drained it
    #[arg(long)]
    pub drain: bool,
    /// The Slurm node name for --drain (default: `$SLURMD_NODENAME`, else `hostname -s`)
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,
    /// How long to watch the error counters (and the rails) for growth, e.g. 2s (10ms to 20s)
    #[arg(long, default_value = "2s", value_name = "DURATION", value_parser = parse_window)]
    pub window: Duration,
    /// Judge against this instance type (p5.48xlarge, p5e.48xlarge, p5en.48xlarge, p4d.24xlarge) instead of
    /// the DMI product name
    #[arg(long, value_name = "TYPE")]
    pub instance_type: Option<String>,
    /// Read sysfs (and proc/self/limits, proc/driver/nvidia) under this directory instead of /: a fake
    /// node from `scripts/fixtures/make-fake-sysfs --type TYPE DIR`; libfabric is then not asked
    #[arg(long, value_name = "PATH", default_value = "/")]
    pub sysfs_root: PathBuf,
    /// Write a fake node of --instance-type under DIR and exit (scripts/fixtures/make-fake-sysfs)
    #[arg(long, value_name = "DIR", hide = true, requires = "instance_type")]
    pub write_fake: Option<PathBuf>,
    /// With --write-fake: break one thing (missing-nic, port-down, wrong-numa, low-memlock, gpu-link-x8,
    /// efa-link-x8, xid-N); repeat to break several
    #[arg(long, value_name = "FAULT", hide = true, requires = "write_fake")]
    pub plant: Vec<String>,
    /// Also write through every NIC of this node while the window runs: ranks on this node (one per GPU,
    /// at least 2), every NIC a channel, efa's shared-memory shortcut off, 4 MiB a write, every byte
    /// verified; a NIC that corrupts, lags far behind its peers or moves no bytes is a problem. Runs on this
    /// machine even with --sysfs-root
    #[arg(long)]
    pub traffic: bool,
    /// The libfabric provider --traffic writes with [default: efa, each byte crosses a NIC]; shm, tcp,
    /// udp, sockets or another name `fi_info -l` lists prove efatop's path, not the NICs
    #[arg(long, value_parser = parse_provider)]
    pub provider: Option<Provider>,
    /// Testing aid: --traffic's sender corrupts this byte offset (modulo 4 MiB), so verification must fail
    #[arg(long, hide = true)]
    pub debug_corrupt_byte: Option<u64>,
}

impl CheckArgs {
    pub fn format(&self) -> HealthFormat {
        if self.json { HealthFormat::Json } else { self.format }
    }
}

/// `--provider` for `--traffic`: a provider by name (`auto` would pick shm between ranks of one node, which
/// proves nothing about the NICs, so it is not offered).
fn parse_provider(text: &str) -> Result<Provider, String> {
    Provider::parse(text).filter(|_| text != "auto").ok_or_else(|| {
        format!("`{text}` is not a provider for --traffic; use {}, or another name `fi_info -l` lists", Provider::KNOWN.join(", "))
    })
}

fn parse_window(text: &str) -> Result<Duration, String> {
    let window = crate::parse::parse_duration(text)
        .filter(|window| *window >= Duration::from_millis(10))
        .ok_or_else(|| format!("`{text}` is not a window; use 10ms to 20s, e.g. 2s (a bare number is seconds)"))?;
    if window > Duration::from_secs(20) {
        return Err(format!("`{text}` is too long a window: the whole check must finish within Slurm's 60 s; use at most 20s"));
    }
    Ok(window)
}
