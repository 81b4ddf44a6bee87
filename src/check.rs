//! `efatop check`: the node preflight (rules in `efatop_health`). This module picks the instance
//! type and its layout, asks libfabric what it offers (on this machine only: a fake tree is not this
//! machine's libfabric), watches the node for `--window`, and prints the report in the format asked: a
//! table, a JSON line, or the one-line contracts of NHC, Slurm and node-problem-detector
//! (`efatop_health::contract`). Exit code 0 nothing wrong, 1 a problem, 2 could not tell or bad input (NPD:
//! 0 also for problems that only call for watching, [`contract::npd`]). With
//! `--traffic` a short verified write through every NIC of this node runs inside the window
//! (`traffic_write`, below).

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use efatop_fabric::{Capabilities, Channel, ChannelOptions, Provider, discover_nics};
use efatop_health::contract::{self, table, verdict, DrainAction, Verdict};
use efatop_health::{observe_with_traffic, Carrier, Expected, Libfabric, LibfabricFacts, Report, Traffic, TrafficOutcome, WriteEnded};
use efatop_node::{FakeNode, Fault, Sysfs};
use efatop_proto::output::Line;
use efatop_proto::words::{printable, NAME_MAX};

use crate::cli::{CheckArgs, HealthFormat};

/// Runs `efatop check`; returns the exit code.
pub fn check(args: &CheckArgs) -> i32 {
    match run(args) {
        Ok(code) => code,
        Err((code, message)) => {
            eprintln!("efatop: error: {message}");
            code
        }
    }
}

type Failure = (i32, String);

fn run(args: &CheckArgs) -> Result<i32, Failure> {
    if let Some(dir) = &args.write_fake {
        return write_fake(args, dir);
    }
    if args.drain && args.format() != HealthFormat::Slurm {
        return Err((2, "--drain: only with --format slurm (it sets the Slurm drain reason)".into()));
    }
    if !args.traffic {
        if args.provider.is_some() {
            return Err((2, "--provider: only with --traffic (the provider of its write: efa, shm, tcp, ...)".into()));
        }
        if args.debug_corrupt_byte.is_some() {
            return Err((2, "--debug-corrupt-byte: only with --traffic (it corrupts a byte of its write)".into()));
        }
    }
    if !args.sysfs_root.is_dir() {
        return Err((2, format!("--sysfs-root {}: not a directory", printable(&args.sysfs_root.to_string_lossy(), NAME_MAX))));
    }
    let sysfs = Sysfs::new(&args.sysfs_root);
    let expected = expected(args, &sysfs)?;
    let this_machine = args.sysfs_root == Path::new("/");
    let libfabric = || {
        if this_machine {
            probe_libfabric()
        } else {
            Libfabric::NotChecked { reason: format!("--sysfs-root {} is not this machine: libfabric not asked", args.sysfs_root.display()) }
        }
    };
    // The write runs on this machine whatever --sysfs-root says (its finding says which provider carried it).
    let provider = args.provider.clone().unwrap_or(efatop_fabric::Provider::Efa);
    let traffic = || args.traffic.then(|| traffic_write(&provider, args.debug_corrupt_byte));
    let observed = observe_with_traffic(&sysfs, expected.layout.as_ref(), args.window, libfabric, traffic);
    let report = Report::new(host_name(), &expected, &observed);
    let verdict = verdict(&report);
    let code = if args.format() == HealthFormat::Npd { contract::npd(&verdict).1 } else { verdict.exit_code() };
    let unknown = match &verdict {
        Verdict::Unknown(why) | Verdict::Watch { unknown: Some(why), .. } => Some(why.as_str()),
        _ => None,
    };
    let text = match args.format() {
        HealthFormat::Table => table(&report),
        HealthFormat::Json => {
            let line = Line::<Report>::Check(Box::new(report.clone())).to_json().map_err(|err| (2, format!("JSON: {err}")))?;
            format!("{line}\n")
        }
        HealthFormat::Npd => format!("{}\n", contract::npd(&verdict).0),
        HealthFormat::Nhc => {
            if let Some(why) = unknown {
                eprintln!("efatop: check: could not tell: {why}");
            }
            contract::nhc_message(&verdict).map_or(String::new(), |message| format!("{message}\n"))
        }
        HealthFormat::Slurm => {
            if let Some(why) = unknown {
                eprintln!("efatop: check: could not tell (the node is left as it is): {why}");
            }
            contract::slurm_reason(&verdict).map_or(String::new(), |reason| format!("{reason}\n"))
        }
    };
    print(&text)?;
    // Only reset, reboot and replace drain: a node whose strongest action is watch stays in service.
    if args.drain && matches!(verdict, Verdict::Watch { .. }) {
        eprintln!("efatop: not drained: the strongest action is {} ({})", report.action, report.action_reason);
    } else if args.drain {
        let node = printable(&contract::slurm_node_name(args.node_name.as_deref()), NAME_MAX);
        match contract::apply_to_slurm(&node, &verdict) {
            Ok(DrainAction::Drained(_)) => eprintln!("efatop: drained {node}"),
            Ok(DrainAction::Resumed) => eprintln!("efatop: resumed {node} (efatop had drained it)"),
            Ok(DrainAction::Nothing) => {}
            // A faulty node is still a faulty node (exit 1) when scontrol fails; one line says so.
            Err(err) => {
                eprintln!("efatop: error: --drain: {err}");
                return Ok(if code == 1 { 1 } else { 2 });
            }
        }
    }
    Ok(code)
}

/// `--write-fake DIR`: a fake node of `--instance-type`, with each `--plant`'s fault, in a new or empty
/// directory (never over another tree: two types' files would mix into a node of neither).
fn write_fake(args: &CheckArgs, dir: &Path) -> Result<i32, Failure> {
    let shown = printable(&dir.to_string_lossy(), NAME_MAX);
    let instance_type = args.instance_type.as_deref().unwrap_or_default();
    let mut faults = Vec::new();
    for name in &args.plant {
        faults.push(Fault::parse(name).filter(|fault| *fault != Fault::ImpairedRising).ok_or_else(|| {
            let plantable: Vec<String> = Fault::ALL.iter().filter(|fault| **fault != Fault::ImpairedRising).map(|fault| fault.name()).collect();
            (
                2,
                format!(
                    "--plant {}: not a fault to plant on disk; use {} or xid-N (N an Xid number, 1 to 9999)",
                    printable(name, NAME_MAX),
                    plantable.iter().filter(|name| !name.starts_with("xid-")).cloned().collect::<Vec<_>>().join(", ")
                ),
            )
        })?);
    }
    if efatop_topology::instance_layout(instance_type).is_none() {
        let known: Vec<&str> = efatop_topology::known_instance_types().collect();
        return Err((2, format!("--instance-type {}: no built-in layout; efatop knows {}", printable(instance_type, NAME_MAX), known.join(", "))));
    }
    match std::fs::read_dir(dir).map(|mut entries| entries.next().is_some()) {
        Ok(true) => {
            return Err((2, format!("--write-fake {shown}: not empty; give a new or empty directory (a fake node is never written over another)")));
        }
        Ok(false) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err((2, format!("--write-fake {shown}: {err}"))),
    }
    let node = FakeNode::write(dir, instance_type).map_err(|err| (2, format!("--write-fake {shown}: {err}")))?;
    for fault in faults {
        let what = node.plant(fault).map_err(|err| (1, format!("--plant {}: {err}", fault.name())))?;
        eprintln!("efatop: planted {} on {what}", fault.name());
    }
    print(&format!("{shown}\n"))?;
    Ok(0)
}

fn expected(args: &CheckArgs, sysfs: &Sysfs) -> Result<Expected, Failure> {
    let (instance_type, source) = match &args.instance_type {
        Some(given) => (Some(given.trim().to_string()), "--instance-type".to_string()),
        None => (sysfs.product_name(), "DMI product name".to_string()),
    };
    let layout = match instance_type.as_deref().and_then(efatop_topology::instance_layout) {
        Some(Ok(layout)) => Some(layout),
        Some(Err(err)) => return Err((1, format!("the built-in layout of {}: {err}", printable(&instance_type.unwrap_or_default(), NAME_MAX)))),
        None if args.instance_type.is_some() => {
            let known: Vec<&str> = efatop_topology::known_instance_types().collect();
            let given = printable(&instance_type.unwrap_or_default(), NAME_MAX);
            return Err((2, format!("--instance-type {given}: no built-in layout; efatop knows {}", known.join(", "))));
        }
        None => None,
    };
    Ok(Expected { instance_type, source, layout })
}

/// What libfabric's efa provider offers on this machine: the `efa` fabric's domains with RMA write, and on
/// the first an endpoint opened to read `FI_OPT_EFA_EMULATED_WRITE`.
fn probe_libfabric() -> Libfabric {
    let mut facts = LibfabricFacts {
        version: efatop_fabric::runtime_version(),
        library: loaded_library("libfabric.so"),
        dmabuf_api: efatop_fabric::api_at_least(1, 20),
        efa_domains: Err(String::new()),
        emulated_write: None,
        endpoint_error: None,
    };
    match discover_nics(&Provider::Efa, Capabilities::MESSAGES_AND_WRITE) {
        Err(err) => facts.efa_domains = Err(err.to_string()),
        Ok(nics) => {
            facts.efa_domains = Ok(nics.iter().map(|nic| nic.domain.clone()).collect());
            if let Some(nic) = nics.first() {
                let options = ChannelOptions {
                    index: 0,
                    max_in_flight: 1,
                    op_timeout: Duration::from_secs(5),
                    remote_in_flight: 1,
                    device_memory: false,
                };
                match Channel::open(nic, &options) {
                    Ok(channel) => facts.emulated_write = channel.report().emulated_write,
                    Err(err) => facts.endpoint_error = Some(err.to_string()),
                }
            }
        }
    }
    Libfabric::Checked(facts)
}

/// The path of a shared library this process loaded, from `/proc/self/maps`.
fn loaded_library(name: &str) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().filter_map(|line| line.split_whitespace().nth(5)).find(|path| path.contains(name)).map(str::to_string)
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map_or_else(|_| "this host".to_string(), |name| name.trim().to_string())
}

fn print(text: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => Err((2, format!("writing to stdout: {err}"))),
        _ => Ok(()),
    }
}

// `--traffic`: a short verified write through every NIC of this node. The check launches the ranks of a
// `sweep` itself, through the runtime's launcher (`efatop_runtime::launch`: ranks of this node, one per
// GPU and at least 2, `--channels all`, efa's shared-memory shortcut off as on every run), 4 MiB per
// write, one warmup and ITERS timed writes on every channel of every pair, each byte verified by its
// receiver, NICs judged against their peers at THRESHOLD. Its results file and how its ranks ended become
// the facts (`Traffic::read_back`) that the `traffic` rule judges (`efatop_health`): the NIC that received
// corrupt data, the NICs far below their peers, or how the run failed. The ranks are stopped when they
// outlast LIMIT, so that the whole check stays within 30 s.

/// Bytes each channel writes per iteration.
const SIZE: u64 = 4 << 20;
/// Timed writes per channel and peer (after one warmup write).
const ITERS: u64 = 4;
/// A NIC whose best write is below this share of its peers' median is slow: the monitor's rail check's
/// bar (more than half its rail's median away), not the sweep's 0.9, since four 4 MiB writes are a short
/// look and a health check must not drain a node for noise.
const THRESHOLD: f64 = 1.0 - efatop_sweep::rails::OFF_SHARE;
/// How long the write may take, launch included, before it is stopped.
const LIMIT: Duration = Duration::from_secs(20);
/// `--timeout` and `--hang-timeout` of the run: well inside [`LIMIT`].
const OP_TIMEOUT_S: u64 = 5;
const HANG_TIMEOUT_S: u64 = 10;

/// Ranks for this node: one per NVIDIA GPU (each then writes through the NICs next to its GPU, so every
/// NIC of a p5 is some rank's), and at least 2.
fn ranks_here() -> usize {
    Sysfs::new("/").nvidia_gpus().len().max(2)
}

/// Runs the write and says what came of it.
fn traffic_write(provider: &Provider, corrupt_byte: Option<u64>) -> Traffic {
    let started = Instant::now();
    let name = provider.to_string();
    let ranks = ranks_here();
    let mut traffic = Traffic {
        provider: name.clone(),
        stack: None,
        carrier: Carrier::of(&name),
        ranks,
        size: SIZE,
        iters: ITERS,
        threshold: THRESHOLD,
        seconds: 0.0,
        channels: Vec::new(),
        outcome: TrafficOutcome::NotRun { why: String::new() },
    };
    // A private folder for the run's results file (0700, a random name, removed with everything in it when
    // dropped): nothing another user can guess or plant a link in.
    let scratch = match tempfile::Builder::new().prefix("efatop-check-").tempdir() {
        Ok(scratch) => scratch,
        Err(err) => {
            traffic.outcome = TrafficOutcome::NotRun { why: format!("no folder for the results file: {err}") };
            return traffic;
        }
    };
    let out = scratch.path().join("traffic.json");
    let ended = launch(ranks, &name, corrupt_byte, &out);
    traffic.seconds = started.elapsed().as_secs_f64();
    let results = efatop_report::load_results(&out).ok();
    traffic.read_back(&ended, results.as_ref(), LIMIT);
    traffic
}

fn launch(ranks: usize, provider: &str, corrupt_byte: Option<u64>, out: &Path) -> WriteEnded {
    let mut args: Vec<std::ffi::OsString> = [
        "sweep", "--provider", provider, "--channels", "all", "--size", "4M", "--warmup", "1", "--iters", &ITERS.to_string(),
        "--threshold", &THRESHOLD.to_string(), "--timeout", &OP_TIMEOUT_S.to_string(), "--hang-timeout", &HANG_TIMEOUT_S.to_string(),
        "--no-tui", "--out",
    ]
    .iter()
    .map(Into::into)
    .collect();
    args.push(out.into());
    if let Some(byte) = corrupt_byte {
        args.extend(["--debug-corrupt-byte".into(), byte.to_string().into()]);
    }
    use efatop_runtime::launch::{CUDA_LAUNCH_BLOCKING, PeerCopies, Ranks};
    // As `efatop run` launches a sweep: the receiving ranks' CUDA copies synchronous.
    let copies = PeerCopies { synchronous: std::env::var_os(CUDA_LAUNCH_BLOCKING).is_none(), writer_exempt: false };
    let plan = Ranks { count: ranks, args, copies, limit: Some(LIMIT), quiet: true, ..Ranks::default() };
    match efatop_runtime::launch::launch(&plan) {
        // Killed (137) after outlasting the limit: no exit code of its own.
        Ok(launched) => WriteEnded {
            code: Some(launched.code).filter(|code| !(launched.timed_out && *code == 137)),
            timed_out: launched.timed_out,
            last_error: launched.last_error,
        },
        Err(err) => WriteEnded { code: Some(2), timed_out: false, last_error: Some(format!("cannot start the ranks: {err}")) },
    }
}
