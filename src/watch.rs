//! `efatop watch`: listens for an NCCL job's profiler plugins (transports/nccl-plugin/, docs/watch.md), folds what
//! they send (proto's `nccl::fold`) and shows it live: on a terminal `efatop_ui::watch`'s view; `--json`
//! prints its [`WatchLine`]s as proto's typed lines ([`Line::Watch`]), one a line; otherwise a plain line
//! per event. `--record FILE` also writes what the plugins sent, with its times ([`Recorded`]);
//! `efatop replay FILE` plays it back, and `--from FILE...` folds such recordings, or plugin files (written
//! where no watcher was named), instead of listening.
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
use efatop_proto::nccl::{self, PluginMessage, Recorded, WatchLine};
use efatop_proto::output::Line;
use efatop_node::prometheus::WatchMetrics;
use efatop_ui::watch::WatchView;

use crate::experiment::{parse_serve, whole_number};

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Where to listen for the job's plugins (their EFATOP_WATCH): IP:PORT, or a port on 127.0.0.1
    #[arg(long, value_name = "ADDR", value_parser = parse_serve, required_unless_present = "from")]
    pub listen: Option<SocketAddr>,
    /// Fold plugin files (written where no watcher was named) or `--record`ings instead of listening
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with = "listen")]
    pub from: Vec<PathBuf>,
    /// Also write what the plugins send, with its times, to FILE (`efatop replay FILE` plays it back)
    #[arg(long, value_name = "FILE", conflicts_with = "from")]
    pub record: Option<PathBuf>,
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
    #[command(flatten)]
    pub metrics: crate::cli::watch::WatchFindings,
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
        straggler_min: Duration::from_micros(args.metrics.straggler_us),
    };
    if !args.from.is_empty() {
        return from_files(args, config);
    }
    let Some(address) = args.listen else { return 2 };
    if let Some(path) = &args.record {
        if let Err(line) = crate::experiment::check_writable_file("--record", path) {
            eprintln!("efatop watch: {line}");
            return 2;
        }
    }
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
    let recorder = match args.record.as_deref().map(|path| Recorder::create(path, &config)).transpose() {
        Ok(recorder) => recorder,
        Err(line) => {
            eprintln!("efatop watch: {line}");
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
    std::thread::spawn(move || fold_loop(&rx, config, started, duration, recorder, exporter, &lines_tx));
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

/// `--record`'s file: the line `efatop-nccl-watch 1`, the watcher's settings, then each thing it took in,
/// framed as the plugins' messages are; flushed every tick, so a watcher killed mid-way leaves a file that
/// reads up to its last tick.
struct Recorder {
    file: std::io::BufWriter<std::fs::File>,
    frame: Vec<u8>,
    failed: bool,
}

impl Recorder {
    fn create(path: &std::path::Path, config: &Config) -> Result<Self, String> {
        let file = efatop_proto::files::create_for_appending(path).map_err(|err| format!("--record: {err}"))?;
        let mut recorder = Self { file: std::io::BufWriter::new(file), frame: Vec::new(), failed: false };
        let settings = Recorded::Settings { hang_after_s: config.hang_after.as_secs(), window_s: config.window.as_secs(), fallback_min_bytes: config.fallback_min_bytes };
        let header = format!("{} {}\n", nccl::RECORDING_MAGIC, nccl::RECORDING_VERSION);
        recorder.file.write_all(header.as_bytes()).map_err(|err| format!("--record {}: {err}", path.display()))?;
        recorder.add(&settings);
        recorder.flush();
        if recorder.failed {
            return Err(format!("--record {}: the file could not be written", path.display()));
        }
        Ok(recorder)
    }

    fn add(&mut self, record: &Recorded) {
        self.frame.clear();
        if self.failed || nccl::encode_recorded(record, &mut self.frame).is_err() {
            return;
        }
        if let Err(err) = self.file.write_all(&self.frame) {
            eprintln!("efatop watch: --record: {err}; the recording stops here");
            self.failed = true;
        }
    }

    fn flush(&mut self) {
        if !self.failed {
            if let Err(err) = self.file.flush() {
                eprintln!("efatop watch: --record: {err}; the recording stops here");
                self.failed = true;
            }
        }
    }
}

/// The watcher's fold: takes what the plugins send (and records it), and every half second the lines it
/// makes; ends after `duration` seconds (0: never), or when no one takes its lines.
fn fold_loop(
    rx: &std::sync::mpsc::Receiver<Inbound>,
    config: Config,
    started: Instant,
    duration: u64,
    mut recorder: Option<Recorder>,
    exporter: Option<efatop_node::prometheus::Exporter<WatchMetrics>>,
    out: &Sender<Vec<WatchLine>>,
) {
    let mut watch = Watch::new(config);
    let mut metrics = WatchMetrics::new();
    let tick = Duration::from_millis(500);
    let mut next = started + tick;
    loop {
        let wait = next.saturating_duration_since(Instant::now());
        let received = rx.recv_timeout(wait);
        let now = started.elapsed();
        if let (Some(recorder), Ok(inbound)) = (recorder.as_mut(), &received) {
            let t_ms = now.as_millis() as u64;
            recorder.add(&match inbound {
                Inbound::Message(conn, message) => Recorded::Message { t_ms, conn: *conn, message: message.clone() },
                Inbound::Closed(conn) => Recorded::Closed { t_ms, conn: *conn },
                Inbound::Refused => Recorded::Refused { t_ms },
            });
        }
        match received {
            Ok(Inbound::Message(conn, message)) => watch.ingest(conn, message, now),
            Ok(Inbound::Closed(conn)) => watch.closed(conn),
            Ok(Inbound::Refused) => watch.refused(),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if Instant::now() >= next {
            next += tick;
            if let Some(recorder) = recorder.as_mut() {
                recorder.flush();
            }
            let lines = watch.tick(started.elapsed());
            if let Some(exporter) = &exporter {
                // The endpoint's copy of the latest figures, offered when they changed (never waits on a scrape).
                if !lines.is_empty() {
                    metrics.add(&lines);
                    exporter.offer(metrics.clone());
                }
            }
            if out.send(lines).is_err() {
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

/// What a file given to `--from` or `efatop replay` holds, in the order it is to be folded.
enum Taken {
    Message(PluginMessage),
    Closed,
    Refused,
}

/// Folds plugin files (each one connection) and recordings (their connections as they were), on their
/// own clocks, and prints every line.
fn from_files(args: &WatchArgs, config: Config) -> i32 {
    let mut events: Vec<(u64, u64, Taken)> = Vec::new();
    for (index, path) in args.from.iter().enumerate() {
        // Each file's connections apart from every other file's.
        let base = (index as u64 + 1) << 32;
        match read_any(path) {
            Ok(Input::Plugin(file)) => {
                let end = file.last().map_or(0, |(t, _)| *t);
                events.extend(file.into_iter().map(|(t, m)| (t, base, Taken::Message(m))));
                events.push((end, base, Taken::Closed));
            }
            Ok(Input::Recording(records)) => events.extend(records.into_iter().filter_map(|r| recorded(base, r))),
            Err(err) => {
                eprintln!("efatop watch: --from {}: {err}", path.display());
                return 2;
            }
        }
    }
    // Stable: a file's own order stands where times tie.
    events.sort_by_key(|(t, _, _)| *t);
    let mut out = std::io::stdout().lock();
    for (_, lines) in fold(events, config) {
        if print(&mut out, &lines, args.json).is_err() {
            return 0;
        }
    }
    0
}

/// A record as an event to fold, its connection apart from other files' (`base`).
fn recorded(base: u64, record: Recorded) -> Option<(u64, u64, Taken)> {
    match record {
        Recorded::Message { t_ms, conn, message } => Some((t_ms, base + conn, Taken::Message(message))),
        Recorded::Closed { t_ms, conn } => Some((t_ms, base + conn, Taken::Closed)),
        Recorded::Refused { t_ms } => Some((t_ms, base, Taken::Refused)),
        Recorded::Settings { .. } => None,
    }
}

/// Folds timed events as the live watcher does (a tick every half second of their clock): each tick's
/// lines, with its time.
fn fold(events: Vec<(u64, u64, Taken)>, config: Config) -> Vec<(u64, Vec<WatchLine>)> {
    let mut watch = Watch::new(config);
    let mut batches = Vec::new();
    let mut last_tick = 0u64;
    let mut end = 0;
    for (t_ms, conn, event) in events {
        while t_ms >= last_tick + 500 {
            last_tick += 500;
            batches.push((last_tick, watch.tick(Duration::from_millis(last_tick))));
        }
        match event {
            Taken::Message(message) => watch.ingest(conn, message, Duration::from_millis(t_ms)),
            Taken::Closed => watch.closed(conn),
            Taken::Refused => watch.refused(),
        }
        end = t_ms;
    }
    batches.push((end + 500, watch.tick(Duration::from_millis(end + 500))));
    batches.retain(|(_, lines)| !lines.is_empty());
    batches
}

enum Input {
    Plugin(Vec<(u64, PluginMessage)>),
    /// What a watcher took in (`--from` judges it by its own flags, not the recording's settings).
    Recording(Vec<Recorded>),
}

/// A file's first line names what it is: a plugin's file or a watcher's recording.
fn read_any(path: &std::path::Path) -> Result<Input, String> {
    if is_recording(path) {
        read_recording(path).map(|(_, records)| Input::Recording(records))
    } else {
        read_file(path).map(Input::Plugin)
    }
}

/// Whether `path` starts as `efatop watch --record` starts its file.
pub fn is_recording(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 64];
    let Ok(mut file) = std::fs::File::open(path) else { return false };
    let n = file.read(&mut head).unwrap_or(0);
    head[..n].starts_with(format!("{} ", nccl::RECORDING_MAGIC).as_bytes())
}

/// `path` opened and read past its first line, the hello `MAGIC VERSION` (at most 64 bytes): `what` names
/// the kind of file in the error for a foreign one, `of_version` starts the error for another version.
fn open_past_hello(path: &std::path::Path, magic: &str, expected: u32, what: &str, of_version: &str) -> Result<BufReader<std::fs::File>, String> {
    use std::io::{BufRead, Read};
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(file);
    let mut first = Vec::new();
    Read::by_ref(&mut reader).take(64).read_until(b'\n', &mut first).map_err(|e| e.to_string())?;
    match efatop_proto::stream::parse_hello(&first, magic) {
        efatop_proto::stream::Hello::Efatop { version } if version == expected => Ok(reader),
        efatop_proto::stream::Hello::Efatop { version } => Err(format!("{of_version} {version}; this efatop reads {expected}")),
        efatop_proto::stream::Hello::Foreign(text) => Err(format!("not an efatop {what} (it starts with '{text}')")),
    }
}

/// A `--record`ing: its settings (the watcher's defaults before its first record) and its records.
fn read_recording(path: &std::path::Path) -> Result<(Config, Vec<Recorded>), String> {
    let mut reader = open_past_hello(path, nccl::RECORDING_MAGIC, nccl::RECORDING_VERSION, "watch recording", "a watch recording of version")?;
    let mut config = Config::default();
    let mut out = Vec::new();
    loop {
        match nccl::read_recorded(&mut reader) {
            Ok(Some(Recorded::Settings { hang_after_s, window_s, fallback_min_bytes, .. })) => {
                config.hang_after = Duration::from_secs(hang_after_s);
                config.window = Duration::from_secs(window_s);
                config.fallback_min_bytes = fallback_min_bytes;
            }
            Ok(Some(record)) => {
                out.push(record);
                if out.len() > efatop_proto::stream::MAX_RECORDING_MESSAGES {
                    return Err("more records than a reader holds".into());
                }
            }
            Ok(None) => return Ok((config, out)),
            // A watcher killed mid-write keeps what came before.
            Err(efatop_proto::stream::StreamError::Truncated) => return Ok((config, out)),
            Err(err) => return Err(err.to_string()),
        }
    }
}

/// `efatop replay FILE` of a watch recording: folded with the settings it was recorded with; on a
/// terminal the live view at the recording's pace (`speed` times), else its lines at once (`--json`: typed).
pub fn replay(path: &std::path::Path, json: bool, speed: f64) -> i32 {
    let (config, records) = match read_recording(path) {
        Ok(read) => read,
        Err(err) => {
            eprintln!("efatop: error: replay: {}: {err}", path.display());
            return 2;
        }
    };
    let batches = fold(records.into_iter().filter_map(|r| recorded(0, r)).collect(), config);
    if json || !std::io::stdout().is_terminal() {
        let mut out = std::io::stdout().lock();
        for (_, lines) in &batches {
            if print(&mut out, lines, json).is_err() {
                return 0;
            }
        }
        return 0;
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

/// A plugin file's messages with their times (ms): the line `efatop-nccl 1`, then frames.
pub fn read_file(path: &std::path::Path) -> Result<Vec<(u64, PluginMessage)>, String> {
    let mut reader = open_past_hello(path, nccl::MAGIC, nccl::VERSION, "NCCL plugin file", "version")?;
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
