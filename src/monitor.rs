//! `efatop monitor`: a live view of a node's NIC and GPU-link counters with no benchmark running (logic in
//! `efatop-node`, drawing in `efatop_ui::monitor`). On a terminal: the ratatui view, redrawn on a tick,
//! fed by a reader thread every `--interval`. Otherwise, or with `--json` / `--once`: text or JSON lines
//! on stdout. Under mpirun or srun, one rank per node, rank 0 shows every node ([`nodes`]).

mod nodes;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use efatop_node::prometheus::{Exporter, FreshCounters};
use efatop_node::{Affinity, FakeSysfs, GpuReader, Monitor, Sysfs};
use efatop_proto::output::Line;
use efatop_proto::telemetry::NodeSample;
use efatop_topology::NodeTopology;
use efatop_ui::monitor::{MonitorView, plain_text};
use efatop_ui::state::{Action, Key};

use crate::cli::MonitorArgs;
use efatop_ui::tui::Tui;

/// Runs `efatop monitor`; returns the exit code (2 for bad input, after one line on stderr).
pub fn monitor(args: &MonitorArgs) -> i32 {
    match run(args) {
        Ok(()) => 0,
        Err((code, message)) => {
            eprintln!("efatop: error: {message}");
            code
        }
    }
}

type Failure = (i32, String);

fn run(args: &MonitorArgs) -> Result<(), Failure> {
    if let Some(dir) = &args.write_fake_p5 {
        FakeSysfs::p5(dir).map_err(|err| (1, format!("--write-fake-p5 {}: {err}", dir.display())))?;
        println!("{}", dir.display());
        return Ok(());
    }
    if !args.hosts.is_empty() {
        return Err((
            2,
            format!(
                "--hosts {}: efatop does not start monitors on other hosts; run one per node under mpirun or srun \
                 (e.g. `mpirun -N 1 efatop monitor`) and rank 0 shows them all",
                args.hosts.join(",")
            ),
        ));
    }
    // As a run's: two listeners on one port, or a recording with no folder, refused before anything starts.
    crate::parse::check_listeners(args.serve, args.prometheus).map_err(|line| (2, line))?;
    if let Some(record) = &args.record {
        crate::parse::check_writable_file("--record", record).map_err(|line| (2, line))?;
    }
    let launched = std::env::var_os(efatop_runtime::bootstrap::ENV_RENDEZVOUS).is_some();
    if let (Some(ranks), false) = (args.ranks, launched) {
        // Checked here once, so that bad input is one line rather than one per rank.
        for rank in 0..ranks {
            let root = PathBuf::from(args.sysfs_root.to_string_lossy().replace("{rank}", &rank.to_string()));
            if !root.is_dir() {
                return Err((2, format!("--sysfs-root {}: not a directory", root.display())));
            }
        }
        return launch_local_nodes(ranks);
    }
    let (bootstrap, secret) = efatop_runtime::bootstrap::connect().map_err(|err| (1, err.to_string()))?;
    // `{rank}` lets ranks sharing a machine each read their own fake tree.
    let sysfs_root = PathBuf::from(args.sysfs_root.to_string_lossy().replace("{rank}", &bootstrap.rank().to_string()));
    if !sysfs_root.is_dir() {
        return Err((2, format!("--sysfs-root {}: not a directory", sysfs_root.display())));
    }
    if bootstrap.size() > 1 {
        if args.serve.is_some() || args.record.is_some() {
            return Err((2, "--serve/--record: one node's monitor only; serve each node's, or watch them all on rank 0".into()));
        }
        return nodes::run(args, bootstrap.as_ref(), &secret, &sysfs_root);
    }
    let monitor = build_monitor(args, &sysfs_root)?;
    let exporter = start_exporter(args)?;
    let sysfs = Sysfs::new(&sysfs_root);
    let mut served = efatop_runtime::serve::MonitorStream::open(args.serve, args.record.as_deref(), &host_name(), args.interval)?;
    let sinks = Sinks { served: served.as_mut(), exporter: exporter.as_ref().map(|exporter| (exporter, &sysfs)) };
    let outcome = watch(monitor, args, sinks);
    if let Some(served) = served {
        served.finish();
    }
    outcome
}

/// Where each read goes besides the screen: `--serve`/`--record`'s viewers and `--prometheus`'s endpoint.
struct Sinks<'a> {
    served: Option<&'a mut efatop_runtime::serve::MonitorStream>,
    exporter: Option<(&'a Exporter<FreshCounters>, &'a Sysfs)>,
}

impl Sinks<'_> {
    fn send(&mut self, snapshot: &NodeSample) {
        if let Some(served) = self.served.as_mut() {
            served.send(snapshot);
        }
        if let Some((exporter, sysfs)) = self.exporter {
            exporter.offer(FreshCounters { sysfs: sysfs.clone(), snapshot: snapshot.clone() });
        }
    }
}

/// One node's monitor until `--count` reads or the user quits, each read also to its sinks.
fn watch(mut monitor: Monitor, args: &MonitorArgs, mut sinks: Sinks<'_>) -> Result<(), Failure> {
    let started = Instant::now();
    if args.once {
        monitor.sample(started.elapsed());
        std::thread::sleep(args.interval);
        let snapshot = monitor.sample(started.elapsed());
        sinks.send(&snapshot);
        let mut view = MonitorView::new(&args.filter);
        view.push(snapshot.clone());
        return print_line(&snapshot, None, &view, args.json);
    }
    if !args.json && std::io::stdout().is_terminal() {
        return run_terminal(monitor, args, started, sinks).map_err(|err| (1, format!("terminal: {err}")));
    }
    let mut view = MonitorView::new(&args.filter);
    let mut printed = 0_u64;
    loop {
        let snapshot = monitor.sample(started.elapsed());
        sinks.send(&snapshot);
        view.push(snapshot.clone());
        print_line(&snapshot, None, &view, args.json)?;
        printed += 1;
        if args.count.is_some_and(|count| printed >= count) {
            return Ok(());
        }
        std::thread::sleep(args.interval);
    }
}

/// `--ranks N`: this binary N times as the launcher's ranks, each a node of the many-node view.
fn launch_local_nodes(ranks: u16) -> Result<(), Failure> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let plan = efatop_runtime::launch::Ranks {
        count: usize::from(ranks),
        args,
        dashboard_may_be_up: crate::term::stdout_is_terminal(),
        ..efatop_runtime::launch::Ranks::default()
    };
    match efatop_runtime::launch::launch_ranks(&plan) {
        Ok(0) => Ok(()),
        Ok(code) => std::process::exit(code),
        Err(err) => Err((1, format!("starting {ranks} monitors: {err}"))),
    }
}

fn build_monitor(args: &MonitorArgs, sysfs_root: &Path) -> Result<Monitor, Failure> {
    let this_machine = sysfs_root == Path::new("/");
    let affinity = match &args.topology_xml {
        Some(path) => {
            let topology = NodeTopology::from_xml_file(path).map_err(|err| (2, format!("--topology-xml {}: {err}", path.display())))?;
            Affinity::from_topology(&topology)
        }
        // This machine's topology says nothing about another tree's devices.
        None if this_machine => NodeTopology::discover().map_or_else(|_| Affinity::none(), |t| Affinity::from_topology(&t)),
        None => Affinity::none(),
    };
    let gpus = if this_machine {
        GpuReader::open()
    } else {
        GpuReader::unavailable(format!("not read: --sysfs-root {} is not this machine", sysfs_root.display()))
    };
    let sysfs = Sysfs::new(sysfs_root);
    // Xids counted live from the kernel log (this machine's, or the tree's dev/kmsg), for --prometheus.
    efatop_node::xid_watch::XidWatch::start(&host_name(), &sysfs);
    Ok(Monitor::new(host_name(), sysfs, affinity, gpus))
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map_or_else(|_| "this host".to_string(), |name| name.trim().to_string())
}

/// One snapshot on stdout: a JSON line, or the plain table followed by a blank line.
fn print_line(snapshot: &NodeSample, rank: Option<u32>, view: &MonitorView, json: bool) -> Result<(), Failure> {
    let text = if json {
        // `--filter` keeps the same NICs as in the table (the sinks get every NIC).
        let data = if view.view.filter.trim().is_empty() {
            snapshot.clone()
        } else {
            NodeSample { nics: snapshot.nics.iter().filter(|nic| view.passes(nic)).cloned().collect(), ..snapshot.clone() }
        };
        // `rank`: the node's rank when several are shown.
        let line = Line::<()>::Snapshot { rank, data: Box::new(data) };
        line.to_json().map_err(|err| (1, format!("JSON: {err}")))? + "\n"
    } else {
        let columns = crossterm::terminal::size().map_or(120, |(width, _)| width.max(80));
        // Ranks sharing a machine share a host name: the rank tells their tables apart.
        let node = rank.map_or(String::new(), |rank| format!(" node: rank {rank} on {}\n", snapshot.host));
        // A NIC far off its rail is drawn red on a terminal; here it gets a line.
        let rails = view.snapshot().map(rail_lines).unwrap_or_default();
        format!("{node}{}{rails}\n", plain_text(view, columns))
    };
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        // A reader that stops early (`| head`) ends the monitor quietly.
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(err) => Err((1, format!("writing to stdout: {err}"))),
        Ok(()) => Ok(()),
    }
}

/// ` rail 1 off: rdmap165s0 (GPU 5) 0.10× the rail's median of 160.00 Gbps` per NIC far off its rail.
fn rail_lines(snapshot: &NodeSample) -> String {
    use std::fmt::Write as _;
    let mut lines = String::new();
    for load in efatop_sweep::rails::balance(&[snapshot]).iter().filter(|load| load.off) {
        let _ = writeln!(
            lines,
            " rail {} off: {} (GPU {}) {:.2}× the rail's median of {:.2} Gbps",
            load.rail,
            load.nic,
            load.gpu,
            load.ratio.unwrap_or(0.0),
            load.rail_median_gbps
        );
    }
    lines
}

/// Reads on its own thread every `interval` (so a slow sysfs or NVML never stalls the keys) and sends
/// the snapshots; it ends when the view hangs up.
fn spawn_reader(mut monitor: Monitor, interval: Duration, started: Instant) -> Receiver<NodeSample> {
    let (sender, receiver) = mpsc::sync_channel(4);
    std::thread::spawn(move || {
        let mut next = Instant::now();
        loop {
            if sender.send(monitor.sample(started.elapsed())).is_err() {
                return;
            }
            next += interval;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
    });
    receiver
}

/// `--prometheus ADDR`: the endpoint, listening before the first read (exit code 2 when it cannot).
fn start_exporter(args: &MonitorArgs) -> Result<Option<Exporter<FreshCounters>>, Failure> {
    let Some(address) = args.prometheus else { return Ok(None) };
    let exporter = Exporter::start(address).map_err(|err| (2, format!("--prometheus {address}: {err}")))?;
    if !args.json {
        eprintln!("efatop: serving http://{}/metrics", exporter.address);
    }
    Ok(Some(exporter))
}

fn run_terminal(monitor: Monitor, args: &MonitorArgs, started: Instant, sinks: Sinks<'_>) -> std::io::Result<()> {
    let mut snapshots = spawn_reader(monitor, args.interval, started);
    let mut node = Node::new(&args.filter, args.count, sinks);
    crate::tui::on_terminal(&mut node, &mut snapshots, || started.elapsed())
}

/// One node's monitor as the TUI loop drives it: each read to the sinks and into the view, until
/// `--count` reads, the reader stops, or the user quits.
struct Node<'a> {
    view: MonitorView,
    sinks: Sinks<'a>,
    count: Option<u64>,
    taken: u64,
}

impl<'a> Node<'a> {
    fn new(filter: &str, count: Option<u64>, sinks: Sinks<'a>) -> Self {
        Self { view: MonitorView::new(filter), sinks, count, taken: 0 }
    }
}

impl Tui for Node<'_> {
    type Event = NodeSample;
    type Ended = ();

    fn event(&mut self, snapshot: NodeSample, _now: Duration) -> Option<()> {
        self.sinks.send(&snapshot);
        self.view.push(snapshot);
        self.taken += 1;
        None
    }

    fn gone(&mut self, _now: Duration) -> Option<()> {
        Some(())
    }

    fn tick(&mut self, _now: Duration) -> Option<()> {
        self.count.is_some_and(|count| self.taken >= count).then_some(())
    }

    fn key(&mut self, key: Key, _now: Duration) -> Option<()> {
        (self.view.handle_key(key) == Action::Quit).then_some(())
    }

    fn interrupt(&mut self, _now: Duration) -> Option<()> {
        Some(())
    }

    fn draw(&self, frame: &mut ratatui::Frame) {
        efatop_ui::monitor::draw(frame, &self.view);
    }
}

#[cfg(test)]
mod tests;
