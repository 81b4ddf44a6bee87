//! `efatop watch`: listens for an NCCL job's profiler plugins (transports/nccl-plugin/, docs/watch.md), folds what
//! they send (proto's `nccl::fold`) and shows it live: on a terminal `efatop_ui::watch`'s view; `--json`
//! prints proto's typed [`WatchLine`]s, one a line; otherwise a plain line per event. `--from FILE...`
//! folds plugin files (written where no watcher was named) instead of listening.
//!
//! Every connection proves the user's token (proto's handshake, purpose `Nccl`) within 5 s or is dropped
//! and counted; connections are bounded by `--max-plugins`; a plugin's message is read within proto's caps.

use std::io::{BufReader, IsTerminal, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use efatop_proto::auth::{self, Purpose, Secret};
use efatop_proto::nccl::fold::{Config, Watch};
use efatop_proto::nccl::{self, PluginMessage, WatchLine};
use efatop_ui::watch::WatchView;

use crate::experiment::{parse_serve, whole_number};

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Where to listen for the job's plugins (their EFATOP_WATCH): IP:PORT, or a port on 127.0.0.1
    #[arg(long, value_name = "ADDR", value_parser = parse_serve, required_unless_present = "from")]
    pub listen: Option<SocketAddr>,
    /// Fold plugin files (written where no watcher was named) instead of listening
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with = "listen")]
    pub from: Vec<PathBuf>,
    /// Print typed JSON lines instead of plain ones
    #[arg(long)]
    pub json: bool,
    /// Seconds a rank may stay behind its peers (or silent while they wait) before it is named (1 to 3600)
    #[arg(long, default_value_t = 10, value_parser = whole_number::<u64>(1..=3600))]
    pub hang_after: u64,
    /// Seconds of the NIC join's window (1 to 600)
    #[arg(long, default_value_t = 5, value_parser = whole_number::<u64>(1..=600))]
    pub window: u64,
    /// MiB NCCL's network path must move in a window before its NICs are judged (0 to 1048576)
    #[arg(long, default_value_t = 16, value_parser = whole_number::<u64>(0..=1_048_576))]
    pub fallback_min_mib: u64,
    /// Plugins connected at once (1 to 65536); more are refused and counted
    #[arg(long, default_value_t = 4096, value_parser = whole_number::<usize>(1..=65_536))]
    pub max_plugins: usize,
    /// Stop after this many seconds (0: run until interrupted)
    #[arg(long, default_value_t = 0, value_parser = whole_number::<u64>(0..=31_536_000))]
    pub duration: u64,
}

enum Inbound {
    Message(u64, PluginMessage),
    Closed(u64),
    Refused,
}

pub fn watch(args: &WatchArgs) -> i32 {
    let config = Config {
        hang_after: Duration::from_secs(args.hang_after),
        window: Duration::from_secs(args.window),
        fallback_min_bytes: args.fallback_min_mib << 20,
        max_plugins: args.max_plugins,
    };
    if !args.from.is_empty() {
        return from_files(args, config);
    }
    let Some(address) = args.listen else { return 2 };
    let token = match efatop_runtime::secret::user_token(true) {
        Ok(token) => token,
        Err(err) => {
            eprintln!("efatop watch: the user's token: {err}");
            return 2;
        }
    };
    let listener = match TcpListener::bind(address) {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("efatop watch: --listen {address}: {err}");
            return 2;
        }
    };
    let bound = listener.local_addr().map_or_else(|_| address.to_string(), |a| a.to_string());
    eprintln!("efatop watch: listening on {bound} (plugins prove the token: {})", token.source);
    let (tx, rx) = channel();
    let live = Arc::new(AtomicUsize::new(0));
    let max = args.max_plugins;
    let secret = token.secret;
    std::thread::spawn(move || accept_loop(&listener, &secret, &tx, &live, max));
    let started = Instant::now();
    let (lines_tx, lines_rx) = channel();
    let duration = args.duration;
    std::thread::spawn(move || fold_loop(&rx, config, started, duration, &lines_tx));
    if !args.json && std::io::stdout().is_terminal() {
        let mut view = Live { view: WatchView::new() };
        return match crate::tui::on_terminal(&mut view, &mut &lines_rx, || started.elapsed()) {
            Ok(()) => 0,
            Err(err) => {
                eprintln!("efatop watch: terminal: {err}");
                1
            }
        };
    }
    let mut out = std::io::stdout().lock();
    for lines in lines_rx {
        if print(&mut out, &lines, args.json).is_err() {
            return 0;
        }
    }
    0
}

/// The watcher's fold: takes what the plugins send, and every half second the lines it makes; ends after
/// `duration` seconds (0: never), or when no one takes its lines.
fn fold_loop(rx: &std::sync::mpsc::Receiver<Inbound>, config: Config, started: Instant, duration: u64, out: &Sender<Vec<WatchLine>>) {
    let mut watch = Watch::new(config);
    let tick = Duration::from_millis(500);
    let mut next = started + tick;
    loop {
        let wait = next.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok(Inbound::Message(conn, message)) => watch.ingest(conn, message, started.elapsed()),
            Ok(Inbound::Closed(conn)) => watch.closed(conn),
            Ok(Inbound::Refused) => watch.refused(),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if Instant::now() >= next {
            next += tick;
            if out.send(watch.tick(started.elapsed())).is_err() {
                return;
            }
            if duration > 0 && started.elapsed() >= Duration::from_secs(duration) {
                return;
            }
        }
    }
}

/// The live view (`efatop_ui::watch`) in the TUI loop: each tick's lines folded in, keys scroll or quit.
struct Live {
    view: WatchView,
}

impl crate::tui::Tui for Live {
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

fn accept_loop(listener: &TcpListener, secret: &Secret, tx: &Sender<Inbound>, live: &Arc<AtomicUsize>, max: usize) {
    let mut next_conn = 0u64;
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        if live.load(Ordering::Relaxed) >= max {
            drop(stream);
            let _ = tx.send(Inbound::Refused);
            continue;
        }
        next_conn += 1;
        let conn = next_conn;
        live.fetch_add(1, Ordering::Relaxed);
        let (tx, live, secret) = (tx.clone(), Arc::clone(live), secret.clone());
        std::thread::spawn(move || {
            serve_plugin(stream, &secret, conn, &tx);
            live.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

fn serve_plugin(mut stream: TcpStream, secret: &Secret, conn: u64, tx: &Sender<Inbound>) {
    let timeout = Some(Duration::from_secs(5));
    let _ = stream.set_read_timeout(timeout);
    let _ = stream.set_write_timeout(timeout);
    if auth::accept(&mut stream, secret, Purpose::Nccl).is_err() {
        let _ = tx.send(Inbound::Refused);
        return;
    }
    // A plugin sends every interval; a silent one (a stopped process) is the fold's to judge, so reads wait.
    let _ = stream.set_read_timeout(None);
    let mut reader = BufReader::new(stream);
    while let Ok(Some(message)) = nccl::read(&mut reader) {
        if tx.send(Inbound::Message(conn, message)).is_err() {
            return;
        }
    }
    let _ = tx.send(Inbound::Closed(conn));
}

/// Folds plugin files, each as one connection, on their own clock (`t_ms`), and prints every line.
fn from_files(args: &WatchArgs, config: Config) -> i32 {
    let mut watch = Watch::new(config);
    let mut messages: Vec<(u64, u64, PluginMessage)> = Vec::new();
    for (index, path) in args.from.iter().enumerate() {
        let conn = index as u64 + 1;
        match read_file(path) {
            Ok(file) => messages.extend(file.into_iter().map(|(t, m)| (t, conn, m))),
            Err(err) => {
                eprintln!("efatop watch: --from {}: {err}", path.display());
                return 2;
            }
        }
    }
    messages.sort_by_key(|(t, c, _)| (*t, *c));
    let mut out = std::io::stdout().lock();
    let mut last_tick = 0u64;
    let mut end = 0;
    for (t_ms, conn, message) in messages {
        while t_ms >= last_tick + 500 {
            last_tick += 500;
            if print(&mut out, &watch.tick(Duration::from_millis(last_tick)), args.json).is_err() {
                return 0;
            }
        }
        watch.ingest(conn, message, Duration::from_millis(t_ms));
        end = t_ms;
    }
    for conn in 1..=args.from.len() as u64 {
        watch.closed(conn);
    }
    let _ = print(&mut out, &watch.tick(Duration::from_millis(end + 500)), args.json);
    0
}

/// A plugin file's messages with their times (ms): the line `efatop-nccl 1`, then frames.
pub fn read_file(path: &std::path::Path) -> Result<Vec<(u64, PluginMessage)>, String> {
    use std::io::{BufRead, Read};
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(file);
    let mut first = Vec::new();
    Read::by_ref(&mut reader).take(64).read_until(b'\n', &mut first).map_err(|e| e.to_string())?;
    match efatop_proto::stream::parse_hello(&first, nccl::MAGIC) {
        efatop_proto::stream::Hello::Efatop { version } if version == nccl::VERSION => {}
        efatop_proto::stream::Hello::Efatop { version } => return Err(format!("version {version}; this efatop reads {}", nccl::VERSION)),
        efatop_proto::stream::Hello::Foreign(text) => return Err(format!("not an efatop NCCL plugin file (it starts with '{text}')")),
    }
    let mut out = Vec::new();
    let mut t = 0;
    loop {
        match nccl::read(&mut reader) {
            Ok(Some(message)) => {
                if let PluginMessage::Interval { t_ms, .. } | PluginMessage::Nics { t_ms, .. } | PluginMessage::Health { t_ms, .. } = &message {
                    t = *t_ms;
                }
                out.push((t, message));
                if out.len() > efatop_proto::stream::MAX_RECORDING_MESSAGES {
                    return Err("more messages than a reader holds".into());
                }
            }
            Ok(None) => return Ok(out),
            // A file cut short (the job was killed mid-write) keeps what came before.
            Err(efatop_proto::stream::StreamError::Truncated) => return Ok(out),
            Err(err) => return Err(err.to_string()),
        }
    }
}

fn print(out: &mut impl Write, lines: &[WatchLine], json: bool) -> std::io::Result<()> {
    for line in lines {
        if json {
            serde_json::to_writer(&mut *out, line)?;
            out.write_all(b"\n")?;
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
        WatchLine::Coll { comm, func, size, ops, algo, proto, time_us, algbw_gbps, busbw_gbps, ranks, nranks, .. } => format!(
            "{} {} B comm {comm}: {ops} calls, {} us, algbw {} GB/s, busbw {} GB/s ({algo}/{proto}, {ranks} of {nranks} ranks)",
            func.label(),
            size,
            time_us.map_or_else(|| "-".into(), |t| format!("{t:.1}")),
            gbps(*algbw_gbps),
            gbps(*busbw_gbps)
        ),
        WatchLine::Peer { host, rank, peer, sent, received, .. } => format!("rank {rank} ({host}) <-> peer {peer}: sent {sent} B, received {received} B"),
        WatchLine::Nics { host, nccl_bytes, nic_bytes, verdict, window_s, nics } => {
            let behind: Vec<&str> = nics.iter().filter(|n| n.behind).map(|n| n.name.as_str()).collect();
            let mut text = format!("{host}: NCCL moved {nccl_bytes} B, its NICs carried {nic_bytes} B in {window_s:.1} s: {verdict:?}");
            if !behind.is_empty() {
                text.push_str(&format!(" (behind their rail: {})", behind.join(", ")));
            }
            text
        }
        WatchLine::Hang { comm, func, seq, rank, host, gpu, why, waiting_s, peers_done, peers_waiting } => format!(
            "HANG comm {comm}: rank {rank} on {host} GPU {} has not finished {} #{seq} ({why:?}, {waiting_s:.0} s; done: {peers_done:?}, waiting: {peers_waiting:?})",
            gpu.as_deref().unwrap_or("?"),
            func.label()
        ),
        WatchLine::HangOver { comm, func, seq } => format!("comm {comm}: {} #{seq} finished", func.label()),
        WatchLine::Gone { host, pid, bye } => format!("plugin {host}:{pid} left{}", if *bye { "" } else { " without finalizing" }),
        WatchLine::Health { plugins, refused, dropped, unsent } => format!("{plugins} plugins; {refused} refused; {dropped} events dropped, {unsent} messages unsent"),
    }
}
