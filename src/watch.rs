//! `efatop watch`: the CLI of the watch service (the runtime's `watch`: its server, fold loop and
//! recordings; docs/watch.md). On a terminal `efatop_ui::watch`'s view; `--json` prints its [`WatchLine`]s
//! as proto's typed lines ([`Line::Watch`]), one a line; otherwise a plain line per event. `--from
//! FILE...` folds recordings or plugin files instead of listening; `efatop replay FILE` plays a recording.

use std::io::{IsTerminal, Write};
use std::sync::mpsc::{channel, sync_channel};
use std::time::{Duration, Instant};

use efatop_runtime::watch::fold::Config;
use efatop_proto::nccl::WatchLine;
use efatop_proto::output::Line;
use efatop_runtime::watch::recording::{self, Recorder};
use efatop_runtime::watch::server::{Server, BATCHES_IN_FLIGHT};
use efatop_runtime::watch::{folder, Settings};
use efatop_node::prometheus::WatchMetrics;
use efatop_ui::watch::WatchView;

use crate::cli::watch::WatchArgs;

pub fn watch(args: &WatchArgs) -> i32 {
    let config = Config {
        hang_after: Duration::from_secs(args.hang_after),
        window: Duration::from_secs(args.window),
        fallback_min_bytes: args.fallback_min_mib << 20,
        max_plugins: args.max_plugins,
        straggler_min: Duration::from_micros(args.metrics.straggler_us),
    };
    if !args.from.is_empty() {
        return match recording::fold_files(&args.from, config) {
            Ok(batches) => print_batches(&batches, args.json),
            Err(err) => {
                eprintln!("efatop: error: --from {err}");
                2
            }
        };
    }
    let Some(address) = args.listen else { return 2 };
    if let Some(path) = &args.record {
        if let Err(line) = crate::parse::check_writable_file("--record", path) {
            eprintln!("efatop: error: {line}");
            return 2;
        }
    }
    let token = match efatop_auth::secret::user_token(true) {
        Ok(token) => token,
        Err(err) => {
            eprintln!("efatop: error: watch: the user's token: {err}");
            return 2;
        }
    };
    let settings = Settings { max_plugins: args.max_plugins, ..Settings::default() };
    // A descriptor for every plugin and unproven connection, and some to spare.
    let wanted = (settings.max_plugins + settings.unproven + 256) as u64;
    // The soft limit up to the hard one (and past it, where this process may): said below when short.
    let files = efatop_runtime::watch::open_files(wanted);
    let (tx, rx) = sync_channel(BATCHES_IN_FLIGHT);
    let server = match Server::start(address, token.secret, settings, tx) {
        Ok(server) => server,
        Err(err) => {
            eprintln!("efatop: error: --listen {address}: {err}");
            return 2;
        }
    };
    let recorder = match args.record.as_deref().map(|path| Recorder::create(path, &config)).transpose() {
        Ok(recorder) => recorder,
        Err(line) => {
            eprintln!("efatop: error: {line}");
            return 2;
        }
    };
    let exporter = match args.metrics.prometheus {
        Some(address) => match efatop_node::prometheus::Exporter::<WatchMetrics>::start(address) {
            Ok(exporter) => {
                exporter.offer(WatchMetrics::new());
                eprintln!("efatop watch: serving http://{}/metrics", exporter.address);
                Some(exporter)
            }
            Err(err) => {
                eprintln!("efatop watch: --prometheus {address}: {err}");
                return 2;
            }
        },
        None => None,
    };
    eprintln!("efatop watch: listening on {} (plugins prove the token: {})", server.address, token.source);
    if !files.enough() {
        let room = files.limit.saturating_sub((Settings::default().unproven + 256) as u64);
        eprintln!("efatop watch: warning: this process may open {} files (its hard limit): room for about {room} plugins at once, not --max-plugins {} (raise the hard limit: `ulimit -Hn`, limits.conf, or the unit's LimitNOFILE)", files.limit, args.max_plugins);
    }
    let started = Instant::now();
    let (lines_tx, lines_rx) = channel();
    if let Err(err) = folder::spawn(rx, config, started, Duration::from_secs(args.duration), recorder, exporter, lines_tx) {
        eprintln!("efatop watch: {err}");
        return 1;
    }
    if !args.json && std::io::stdout().is_terminal() {
        let mut view = Live { view: WatchView::new() };
        let code = match crate::tui::on_terminal(&mut view, &mut &lines_rx, || started.elapsed()) {
            Ok(()) => 0,
            Err(err) => {
                eprintln!("efatop watch: terminal: {err}");
                1
            }
        };
        // Under the view they would tear its screen: told once it is gone (counted in its header meanwhile).
        name_refusals(&server);
        return code;
    }
    let mut out = std::io::stdout().lock();
    for lines in lines_rx {
        name_refusals(&server);
        if print(&mut out, &lines, args.json).is_err() {
            return 0;
        }
    }
    name_refusals(&server);
    0
}

/// The plugins' connections the server dropped since the last call, each on a line naming its peer and
/// why (a record that failed authentication, a frame past proto's caps); the server keeps 64 at most
/// between calls, and counts them all (`refused`).
fn name_refusals(server: &Server) {
    for refusal in server.counts().take_named() {
        eprintln!("efatop watch: {refusal}");
    }
}

fn print_batches(batches: &recording::Batches, json: bool) -> i32 {
    let mut out = std::io::stdout().lock();
    for (_, lines) in batches {
        if print(&mut out, lines, json).is_err() {
            return 0;
        }
    }
    0
}

/// The live view (`efatop_ui::watch`) in the TUI loop: each tick's lines folded in, keys scroll or quit.
struct Live {
    view: WatchView,
}

impl efatop_ui::tui::Tui for Live {
    type Event = Vec<WatchLine>;
    type Ended = ();

    fn event(&mut self, lines: Vec<WatchLine>, _now: Duration) -> Option<()> {
        for line in lines {
            self.view.push(line);
        }
        None
    }

    fn gone(&mut self, _now: Duration) -> Option<()> {
        Some(())
    }

    fn key(&mut self, key: efatop_ui::state::Key, _now: Duration) -> Option<()> {
        (self.view.handle_key(key) == efatop_ui::state::Action::Quit).then_some(())
    }

    fn interrupt(&mut self, _now: Duration) -> Option<()> {
        Some(())
    }

    fn draw(&self, frame: &mut ratatui::Frame) {
        efatop_ui::watch::draw(frame, &self.view);
    }
}

/// Whether `path` starts as `efatop watch --record` starts its file.
pub fn is_recording(path: &std::path::Path) -> bool {
    recording::is_recording(path)
}

/// `efatop replay FILE` of a watch recording: folded with the settings it was recorded with; on a
/// terminal the live view at the recording's pace (`speed` times), else its lines at once (`--json`: typed).
pub fn replay(path: &std::path::Path, json: bool, speed: f64) -> i32 {
    let batches = match recording::replay(path) {
        Ok(batches) => batches,
        Err(err) => {
            eprintln!("efatop: error: replay: {}: {err}", path.display());
            return 2;
        }
    };
    if json || !std::io::stdout().is_terminal() {
        return print_batches(&batches, json);
    }
    let mut view = Live { view: WatchView::new() };
    let mut paced = Paced { batches: batches.into(), speed };
    let started = Instant::now();
    match crate::tui::on_terminal(&mut view, &mut paced, || started.elapsed()) {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("efatop: error: replay: terminal: {err}");
            1
        }
    }
}

/// A recording's batches, each due at its time over `speed`; after the last, the view stays until `q`.
struct Paced {
    batches: std::collections::VecDeque<(u64, Vec<WatchLine>)>,
    speed: f64,
}

impl efatop_ui::tui::Source for Paced {
    type Event = Vec<WatchLine>;
    fn poll(&mut self, now: Duration) -> efatop_ui::tui::Polled<Vec<WatchLine>> {
        match self.batches.front() {
            Some((t_ms, _)) if Duration::from_millis(*t_ms).div_f64(self.speed) <= now => {
                efatop_ui::tui::Polled::Ready(self.batches.pop_front().map(|(_, lines)| lines).unwrap_or_default())
            }
            _ => efatop_ui::tui::Polled::Pending,
        }
    }
}

fn print(out: &mut impl Write, lines: &[WatchLine], json: bool) -> std::io::Result<()> {
    let mut buffer = Vec::new();
    for line in lines {
        if json {
            buffer.clear();
            Line::<serde_json::Value>::Watch(Box::new(line.clone())).write_to(&mut buffer).map_err(std::io::Error::other)?;
            out.write_all(&buffer)?;
        } else {
            writeln!(out, "{}", plain(line))?;
        }
    }
    out.flush()
}

fn gbps(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

/// One line for a person.
pub fn plain(line: &WatchLine) -> String {
    match line {
        WatchLine::Rank { host, gpu, comm, rank, nranks, nccl_version, abi, .. } => {
            format!("rank {rank}/{nranks} on {host} GPU {} joined comm {comm} (NCCL {}, profiler v{abi})", gpu.as_deref().unwrap_or("?"), nccl_version.as_deref().unwrap_or("?"))
        }
        WatchLine::Coll { comm, func, size, ops, algo, proto, time_us, algbw_gbps, busbw_gbps, ranks, nranks, user_tag, wait_us, work_us, .. } => {
            let mut text = format!(
                "{} {} B comm {comm}: {ops} calls, {} us, algbw {} GB/s, busbw {} GB/s ({algo}/{proto}, {ranks} of {nranks} ranks)",
                func.label(),
                size,
                time_us.map_or_else(|| "-".into(), |t| format!("{t:.1}")),
                gbps(*algbw_gbps),
                gbps(*busbw_gbps)
            );
            if let (Some(wait), Some(work)) = (wait_us, work_us) {
                text.push_str(&format!(", waiting for peers {wait:.1} us, working {work:.1} us"));
            }
            if *user_tag != 0 {
                text.push_str(&format!(", tag {user_tag}"));
            }
            text
        }
        WatchLine::Peer { host, rank, peer, sent, received, .. } => format!("rank {rank} ({host}) <-> peer {peer}: sent {sent} B, received {received} B"),
        WatchLine::Nics { host, nccl_bytes, nic_bytes, verdict, window_s, nics } => {
            let behind: Vec<&str> = nics.iter().filter(|n| n.behind).map(|n| n.name.as_str()).collect();
            let mut text = format!("{host}: NCCL moved {nccl_bytes} B, its NICs carried {nic_bytes} B in {window_s:.1} s: {verdict:?}");
            if !behind.is_empty() {
                text.push_str(&format!(" (behind their rail: {})", behind.join(", ")));
            }
            text
        }
        WatchLine::Hang { comm, func, seq, rank, host, gpu, why, waiting_s, peers_done, peers_waiting, rails } => format!(
            "HANG comm {comm}: rank {rank} on {host} GPU {} has not finished {} #{seq} ({why:?}, {waiting_s:.0} s; done: {peers_done:?}, waiting: {peers_waiting:?}){}",
            gpu.as_deref().unwrap_or("?"),
            func.label(),
            if rails.is_empty() { String::new() } else { format!("; its rails with errors: {}", rails.join(", ")) }
        ),
        WatchLine::Straggler { .. } => efatop_ui::watch::straggler_text(line).unwrap_or_default(),
        WatchLine::StragglerOver { comm, rank } => format!("comm {comm}: rank {rank} is no longer the straggler"),
        WatchLine::Rails { host, gpu, verdict, .. } => efatop_ui::watch::rails_text(line).unwrap_or_else(|| format!("{host} GPU {gpu}: rails {verdict:?}")),
        WatchLine::HangOver { comm, func, seq } => format!("comm {comm}: {} #{seq} finished", func.label()),
        WatchLine::Gone { host, pid, bye } => format!("plugin {host}:{pid} left{}", if *bye { "" } else { " without finalizing" }),
        WatchLine::Health { plugins, refused, dropped, unsent } => format!("{plugins} plugins; {refused} refused; {dropped} events dropped, {unsent} messages unsent"),
    }
}
