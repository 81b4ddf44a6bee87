//! The arguments of `efatop check`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use efatop_fabric::Provider;

/// How `efatop check` (and `efatop sweep --format`) reports. Exit codes: 0 nothing wrong, 1 a problem, 2
/// could not tell (or bad input); `npd` also 0 when every problem only calls for watching (CHECK_HELP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HealthFormat {
    /// a table: one row per rule and per thing found wrong
    Table,
    /// one JSON `check` line (docs/output.md)
    Json,
    /// LBNL NHC: nothing when healthy; else the line for NHC's `die` (deploy/nhc/efatop.nhc)
    Nhc,
    /// Kubernetes node-problem-detector custom plugin: one line of at most 80 characters; exit 0 (OK) also
    /// when every problem's action is watch, 1 (NonOK) only when one calls for reset, reboot or replace
    Npd,
    /// Slurm: the drain reason when something is wrong, nothing when healthy
    Slurm,
}

/// What `efatop check --help` adds after the flags: the exit codes per format, and what each verdict and
/// action means for a scheduler (docs/check.md says more).
const CHECK_HELP: &str = "\
Exit codes:
  table, json, slurm, nhc  0 nothing wrong; 1 a problem, whatever its action (the output names the action);
                           2 could not tell (something a node has could not be read), or bad input
  npd                      0 (OK) nothing wrong, or only problems whose action is watch (the line says
                           `efatop: watch: ...`); 1 (NonOK) a problem calling for reset, reboot or replace;
                           2 (Unknown) could not tell, or bad input
  --drain                  a faulty node is still exit 1 when scontrol fails (stderr says why, one line)

Verdicts (each rule's status, then the node's):
  ok       nothing wrong found
  skipped  does not apply here (no layout for the type, idle rails, a fake tree's libfabric): not a fault
  unknown  could not be read or told (a file that does not read as a sysfs attribute, a counter reset
           during the window): look before trusting the node; the shipped integrations leave it in service
  PROBLEM  something is wrong; its action says what to do

Actions (the node's is its strongest finding's):
  none     nothing to do
  watch    keep the node in service and look again: no shipped integration drains or cordons for it
  reset    drain, then reset the GPU (or reload its driver)
  reboot   drain, then reboot the node
  replace  drain, and replace the node (or the part)

Instance types with a built-in layout: p5.48xlarge, p5e.48xlarge, p5en.48xlarge, p4d.24xlarge,
p4de.24xlarge, p6-b200.48xlarge, p6-b300.48xlarge, p6e-gb200.36xlarge.";

#[derive(Debug, Args)]
#[command(after_help = CHECK_HELP)]
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
    /// Judge against this instance type instead of the DMI product name: p5.48xlarge, p5e.48xlarge,
    /// p5en.48xlarge, p4d.24xlarge, p4de.24xlarge, p6-b200.48xlarge, p6-b300.48xlarge, p6e-gb200.36xlarge
    #[arg(long, value_name = "TYPE")]
    pub instance_type: Option<String>,
    /// Read sysfs (and proc/self/limits, proc/driver/nvidia) under this directory instead of /: a fake
    /// node from `scripts/fixtures/make-fake-sysfs --type TYPE DIR`; libfabric is then not asked
    #[arg(long, value_name = "PATH", default_value = "/")]
    pub sysfs_root: PathBuf,
    /// Write a fake node of --instance-type under DIR (new or empty) and exit, to try check on with
    /// --sysfs-root DIR (scripts/fixtures/make-fake-sysfs)
    #[arg(long, value_name = "DIR", requires = "instance_type")]
    pub write_fake: Option<PathBuf>,
    /// With --write-fake: break one thing (missing-nic, port-down, wrong-numa, low-memlock, gpu-link-x8,
    /// efa-link-x8, gpu-link-down, efa-link-down, xid-N); repeat to break several
    #[arg(long, value_name = "FAULT", requires = "write_fake")]
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
