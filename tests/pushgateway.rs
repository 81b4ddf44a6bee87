//! A run's figures in the Prometheus world, against real servers (Debian's `prometheus-pushgateway` and
//! `promtool`, which scripts/build/setup-debian installs): `--pushgateway` leaves the run's final per-channel
//! byte totals in a Pushgateway, equal to the bytes its results file records; the run's and the monitor's
//! `/metrics` pass `promtool check metrics`; and the run's endpoint still answers, with the final totals,
//! right after the run's last result; a push over https with basic auth reaches a Pushgateway that
//! requires both (its `--web.config.file`, with a CA and certificate `openssl` makes), and a wrong password
//! or an untrusted certificate is a warning that never shows the password. Without those programs the
//! tests say `SKIPPED` and why, except under `CI=true`, where they fail.
//!
//! Every run starts in a temporary working directory; the tests signal only the processes they started.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use common::prometheus::check_metrics as promtool;
use efatop_node::FakeSysfs;
use serde_json::Value;

/// A process this test started (and, for a launcher, the ranks it started), killed by pid when the test
/// ends however it ends.
struct Started {
    child: Child,
}

impl Drop for Started {
    fn drop(&mut self) {
        let mut ours = common::Tracked::default();
        ours.add_descendants(self.child.id());
        ours.kill_all();
        let _ = self.child.wait();
    }
}

/// A Pushgateway of our own on a free loopback port, with `extra` flags, its store and log in `dir` (not yet
/// ready: each caller waits for it as it reaches it).
fn spawn_pushgateway(pushgateway: &Path, dir: &Path, extra: &[String]) -> (SocketAddr, Started) {
    let gateway = SocketAddr::from(([127, 0, 0, 1], common::free_port()));
    let server = Command::new(pushgateway)
        .arg(format!("--web.listen-address={gateway}"))
        .args(extra)
        .arg(format!("--persistence.file={}", dir.join("pushgateway.store").display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("pushgateway.log")).expect("log file"))
        .spawn()
        .expect("start prometheus-pushgateway");
    (gateway, Started { child: server })
}

/// A Pushgateway of our own on a free loopback port, its store and log in `dir`, ready to take pushes.
fn start_pushgateway(pushgateway: &Path, dir: &Path) -> (SocketAddr, Started) {
    let (gateway, server) = spawn_pushgateway(pushgateway, dir, &[]);
    wait_for("the pushgateway ready", Duration::from_secs(30), || common::http_get(gateway, "/-/ready").filter(|(status, _)| *status == 200));
    (gateway, server)
}

/// Asks `done` every 50 ms until it gives a value; panics naming `what` after `limit`.
fn wait_for<T>(what: &str, limit: Duration, mut done: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = done() {
            return value;
        }
        assert!(started.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One sample line of the text format: its metric name, labels and value.
fn sample(line: &str) -> Option<(&str, BTreeMap<String, String>, f64)> {
    if line.starts_with('#') {
        return None;
    }
    let (series, value) = line.rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let Some((name, labels)) = series.split_once('{') else { return Some((series, BTreeMap::new(), value)) };
    let mut parsed = BTreeMap::new();
    let mut rest = labels.strip_suffix('}')?;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => value.push(chars.next()?.1),
                (at, '"') => break at,
                (_, c) => value.push(c),
            }
        };
        parsed.insert(key.to_string(), value);
        rest = after[end + 1..].trim_start_matches(',');
    }
    Some((name, parsed, value))
}

/// `efatop_run_channel_bytes_total` by `(rank, channel)`, with each series' labels.
fn channel_totals(text: &str) -> BTreeMap<(usize, usize), (u64, BTreeMap<String, String>)> {
    text.lines()
        .filter_map(sample)
        .filter(|(name, _, _)| *name == "efatop_run_channel_bytes_total")
        .map(|(_, labels, value)| {
            let key = (labels["rank"].parse().expect("rank"), labels["channel"].parse().expect("channel"));
            (key, (value as u64, labels))
        })
        .collect()
}

/// The bytes the results file records per `(rank, channel)`: over its measurements, each channel's
/// `counters.channels[].app_bytes` (sent plus received, warmup included).
fn recorded_bytes(results: &Value) -> BTreeMap<(usize, usize), u64> {
    let mut bytes = BTreeMap::new();
    for measurement in results["measurements"].as_array().expect("measurements") {
        for channel in measurement["counters"]["channels"].as_array().expect("every write step records its channels' bytes") {
            let key = (channel["rank"].as_u64().expect("rank") as usize, channel["channel"].as_u64().expect("channel") as usize);
            *bytes.entry(key).or_default() += channel["app_bytes"].as_u64().expect("app_bytes");
        }
    }
    bytes
}

/// What a 2-rank, one-channel write moves on each rank's channel: every measurement's size, warmup and
/// timed iterations alike, written by rank 0 and received by rank 1.
fn write_bytes_per_rank(results: &Value) -> u64 {
    let metadata = &results["metadata"];
    let iterations = metadata["warmup"].as_u64().expect("warmup") + metadata["iters"].as_u64().expect("iters");
    results["measurements"].as_array().expect("measurements").iter().map(|m| m["size"].as_u64().expect("size") * iterations).sum()
}

fn read_results(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("results file")).expect("results JSON")
}

/// A 2-rank shm write from 4K to `max_size`, its results in `results.json`, then `more`.
fn write<'a>(max_size: &'a str, iters: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", "--ranks", "2", "write", "--provider", "shm", "--no-tui", "--min-size", "4K", "--max-size", max_size];
    args.extend(["--iters", iters, "--out", "results.json"]);
    args.extend_from_slice(more);
    args
}

/// `efatop ARGS` in `dir`, its stderr lines arriving on the receiver as they are written, its stdout kept.
fn start_efatop(dir: &Path, args: &[&str]) -> (Started, Receiver<String>, std::thread::JoinHandle<String>) {
    start_efatop_with(dir, args, &[])
}

/// [`start_efatop`] with `env` set (and `EFATOP_PUSHGATEWAY_AUTH` only where `env` sets it).
fn start_efatop_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (Started, Receiver<String>, std::thread::JoinHandle<String>) {
    let mut command = Command::new(common::efatop_path());
    command.args(args).current_dir(dir).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    command.env_remove(ENV_AUTH).envs(env.iter().copied());
    if let Some(path) = common::library_path() {
        command.env("LD_LIBRARY_PATH", path);
    }
    let mut child = command.spawn().expect("start efatop");
    let stderr = child.stderr.take().expect("stderr");
    let mut stdout = child.stdout.take().expect("stdout");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let stdout = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    (Started { child }, received, stdout)
}

/// Waits for a stderr line with `prefix`; every line read on the way is added to `seen`.
fn line_starting(lines: &Receiver<String>, prefix: &str, seen: &mut Vec<String>) -> String {
    let deadline = Instant::now() + Duration::from_mins(2);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.starts_with(prefix) => return line,
            Ok(line) => seen.push(line),
            Err(err) => panic!("no stderr line starting {prefix:?} ({err}); stderr so far:\n{}", seen.join("\n")),
        }
    }
}

/// The address in `efatop: serving http://ADDR/metrics`.
fn serving(line: &str) -> SocketAddr {
    line.strip_prefix("efatop: serving http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .and_then(|address| address.parse().ok())
        .unwrap_or_else(|| panic!("not a serving line: {line:?}"))
}

/// Waits for the process to end, within `limit`: its exit code.
fn exit_code(started: &mut Started, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = started.child.try_wait().expect("wait") {
            return status.code();
        }
        assert!(Instant::now() < deadline, "efatop did not end within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_run_leaves_its_final_per_channel_totals_in_a_pushgateway_equal_to_its_results_file() {
    let Some(pushgateway) = common::required("prometheus-pushgateway", "prometheus-pushgateway") else { return };
    let _one = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let (gateway, _server) = start_pushgateway(&pushgateway, dir.path());

    let url = format!("http://{gateway}");
    let args = write("256K", "5", &["--pushgateway", &url]);
    let (mut run, lines, stdout) = start_efatop(dir.path(), &args);
    let code = exit_code(&mut run, Duration::from_mins(2));
    let stderr: Vec<String> = lines.try_iter().collect();
    let stdout = stdout.join().expect("stdout");
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{}", stderr.join("\n"));
    assert!(!stderr.iter().any(|l| l.contains("--pushgateway")), "the push went through: {stderr:?}");

    let results = read_results(&dir.path().join("results.json"));
    let recorded = recorded_bytes(&results);
    let (status, metrics) = common::http_get(gateway, "/metrics").expect("the pushgateway's /metrics");
    assert_eq!(status, 200, "{metrics}");
    let pushed = channel_totals(&metrics);
    let pushed_bytes: BTreeMap<(usize, usize), u64> = pushed.iter().map(|(key, (bytes, _))| (*key, *bytes)).collect();
    println!("pushed efatop_run_channel_bytes_total: {pushed_bytes:?}; the results file's app_bytes: {recorded:?}");
    assert_eq!(pushed_bytes.keys().collect::<Vec<_>>(), [&(0, 0), &(1, 0)], "two ranks of one channel each: {metrics}");
    assert_eq!(pushed_bytes, recorded, "{metrics}");
    // And what those figures are: every size, warmup and timed iterations, written by rank 0, received by 1.
    let moved = write_bytes_per_rank(&results);
    assert!(moved > 0);
    assert!(pushed_bytes.values().all(|&bytes| bytes == moved), "{moved} per rank: {pushed_bytes:?}");

    let host = results["metadata"]["hosts"][0].as_str().expect("rank 0's host");
    for (rank, (_, labels)) in pushed.iter().map(|((rank, _), series)| (rank, series)) {
        assert_eq!(labels["job"], "efatop", "{labels:?}");
        assert_eq!(labels["instance"], host, "{labels:?}");
        assert_eq!(labels["experiment"], "write", "{labels:?}");
        assert_eq!(Some(labels["nic"].as_str()), results["metadata"]["placements"][rank]["nics"][0].as_str(), "{labels:?}");
    }
    let state = |name: &str| {
        metrics.lines().filter_map(sample).find(|(metric, labels, _)| *metric == "efatop_run_state" && labels["state"] == name).map(|(_, _, v)| v)
    };
    assert_eq!((state("complete"), state("failed"), state("running")), (Some(1.0), Some(0.0), Some(0.0)), "{metrics}");
    assert!(metrics.lines().any(|l| l.starts_with("efatop_run_end_timestamp_seconds{")), "{metrics}");
    assert!(metrics.lines().any(|l| l.starts_with("push_time_seconds{")), "{metrics}");
}

#[test]
fn a_failed_push_is_a_warning_and_a_bad_url_is_refused_before_the_run() {
    let _one = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    // Nobody listens there: the run still ends as it went, with one warning.
    let url = format!("http://127.0.0.1:{}", common::free_port());
    let args = write("4K", "5", &["--pushgateway", &url]);
    let (mut run, lines, stdout) = start_efatop(dir.path(), &args);
    let code = exit_code(&mut run, Duration::from_mins(2));
    let stderr: Vec<String> = lines.try_iter().collect();
    assert_eq!(code, Some(0), "stdout:\n{}\nstderr:\n{}", stdout.join().expect("stdout"), stderr.join("\n"));
    let warnings: Vec<&String> = stderr.iter().filter(|l| l.contains("--pushgateway")).collect();
    assert_eq!(warnings.len(), 1, "{stderr:?}");
    assert!(warnings[0].starts_with(&format!("efatop: warning: --pushgateway {url}: PUT {url}/metrics/job/efatop/instance/")), "{warnings:?}");
    assert_eq!(read_results(&dir.path().join("results.json"))["status"]["state"], "complete");

    for bad in ["127.0.0.1:9091", "ftp://127.0.0.1:9091", "http://", "http://gw:9091/?job=x"] {
        let run = common::efatop(&["run", "--ranks", "2", "write", "--provider", "shm", "--pushgateway", bad]);
        assert_eq!(run.code, Some(2), "{bad}: {}", run.stderr);
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{bad}: {lines:?}");
        assert!(lines[0].starts_with("efatop: error: ") && lines[0].contains("--pushgateway"), "{bad}: {lines:?}");
    }
}

#[test]
fn the_runs_and_the_monitors_metrics_pass_promtool() {
    let Some(promtool_path) = common::required("promtool", "prometheus") else { return };
    let _one = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");

    // The monitor over a fake p5 tree: every sysfs counter of 32 EFA devices, rates, rails.
    let fake = FakeSysfs::p5(dir.path().join("p5")).expect("fake p5 tree");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("topology/fixtures/p5.48xlarge.xml");
    let fixture = fixture.to_str().expect("utf-8 path");
    let root = fake.root().to_str().expect("utf-8 path");
    let args = ["monitor", "--interval", "100ms", "--prometheus", "127.0.0.1:0", "--topology-xml", fixture, "--sysfs-root", root];
    let (monitor, lines, _) = start_efatop(dir.path(), &args);
    let endpoint = serving(&line_starting(&lines, "efatop: serving", &mut Vec::new()));
    fake.advance("rdmap80s0", "rdma_write_bytes", 5_000_000).expect("advance");
    // Once a second read has given rates.
    let text = wait_for("the monitor's rates", Duration::from_secs(30), || {
        common::http_get(endpoint, "/metrics").filter(|(status, body)| *status == 200 && body.contains("efatop_nic_tx_bytes_per_second{")).map(|(_, body)| body)
    });
    drop(monitor);
    let (code, said) = promtool(&promtool_path, &text);
    assert_eq!(code, Some(0), "promtool check metrics of the monitor's /metrics:\n{said}");
    assert!(said.trim().is_empty(), "{said}");
    assert!(text.contains("# HELP efatop_nic_rdma_write_bytes_total "), "{text}");

    // A run, scraped while it goes (rates and percentiles of the last interval). It is long (minutes
    // at 256M × 1000 on shm) so that it is surely still going at the scrape, however fast the machine;
    // the test then ends it as an operator would, with SIGTERM, which keeps the final figures too.
    let args = write("256M", "1000", &["--prometheus", "127.0.0.1:0"]);
    let (mut run, lines, stdout) = start_efatop(dir.path(), &args);
    let mut seen = Vec::new();
    let endpoint = serving(&line_starting(&lines, "efatop: serving", &mut seen));
    let live = wait_for("a scrape of the run going", Duration::from_mins(1), || {
        common::http_get(endpoint, "/metrics")
            .filter(|(status, body)| *status == 200 && body.contains("efatop_run_channel_latency_p50_seconds{") && body.contains(r#"state="running"} 1"#))
            .map(|(_, body)| body)
    });
    let (code, said) = promtool(&promtool_path, &live);
    assert_eq!(code, Some(0), "promtool check metrics of the run's /metrics:\n{said}\n{live}");
    assert!(said.trim().is_empty(), "{said}");
    for name in ["efatop_run_channel_bytes_total", "efatop_run_channel_bytes_per_second", "efatop_run_rank_latency_p99_seconds", "efatop_run_state"] {
        assert!(live.contains(&format!("# HELP {name} ")) && live.contains(&format!("# TYPE {name} ")), "{name}: {live}");
    }
    // And once it is over (what a Pushgateway is given).
    let pid = nix::unistd::Pid::from_raw(i32::try_from(run.child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM the run this test started");
    line_starting(&lines, "efatop: the final figures stay at", &mut seen);
    let (status, ended) = common::http_get(endpoint, "/metrics").expect("the final scrape");
    assert_eq!(status, 200, "{ended}");
    let (code, said) = promtool(&promtool_path, &ended);
    assert_eq!(code, Some(0), "promtool check metrics of the ended run's /metrics:\n{said}\n{ended}");
    assert!(ended.contains("efatop_run_state{"), "{ended}");
    assert_eq!(exit_code(&mut run, Duration::from_mins(1)), Some(143), "{}", stdout.join().expect("stdout"));
}

#[test]
fn the_runs_endpoint_answers_a_final_scrape_with_the_final_totals_then_closes() {
    let _one = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let args = write("256K", "5", &["--prometheus", "127.0.0.1:0"]);
    let (mut run, lines, stdout) = start_efatop(dir.path(), &args);
    let mut seen = Vec::new();
    let endpoint = serving(&line_starting(&lines, "efatop: serving", &mut seen));
    // Right after the run's last result: the tables are printed, the results file says how it ended.
    let lingering = line_starting(&lines, "efatop: the final figures stay at", &mut seen);
    let told = Instant::now();
    assert_eq!(lingering, format!("efatop: the final figures stay at http://{endpoint}/metrics for 5 s"));
    let (status, text) = common::http_get(endpoint, "/metrics").expect("a scrape after the end");
    assert_eq!(status, 200, "{text}");
    let results = read_results(&dir.path().join("results.json"));
    assert_eq!(results["status"]["state"], "complete", "{results}");
    let scraped: BTreeMap<(usize, usize), u64> = channel_totals(&text).into_iter().map(|(key, (bytes, _))| (key, bytes)).collect();
    assert_eq!(scraped, recorded_bytes(&results), "{text}");
    assert!(scraped.values().all(|&bytes| bytes == write_bytes_per_rank(&results)), "{scraped:?}");
    assert!(text.lines().any(|l| l == r#"efatop_run_state{experiment="write",state="complete"} 1.0"#), "{text}");
    assert!(!text.contains("efatop_run_channel_bytes_per_second"), "an ended run has no last interval: {text}");
    // Still there a moment later, gone once the run has exited, after the 5 s it said.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(common::http_get(endpoint, "/metrics").map(|(status, _)| status), Some(200));
    assert_eq!(exit_code(&mut run, Duration::from_secs(30)), Some(0), "{}", stdout.join().expect("stdout"));
    let lingered = told.elapsed();
    assert!(lingered >= Duration::from_millis(4500), "the endpoint closed after {lingered:?}, not 5 s");
    assert!(TcpStream::connect(endpoint).is_err(), "the endpoint closed with the run");
}

/// A run that fails (a rank killed mid-run) still pushes: the Pushgateway says `failed` and holds at least
/// what the results file recorded per channel (the failed step moved bytes no measurement holds).
#[test]
fn a_failed_run_still_pushes_its_figures_and_says_it_failed() {
    let Some(pushgateway) = common::required("prometheus-pushgateway", "prometheus-pushgateway") else { return };
    let _one = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let (gateway, _server) = start_pushgateway(&pushgateway, dir.path());
    let url = format!("http://{gateway}");
    let args = write("64M", "300", &["--pushgateway", &url, "--hang-timeout", "3"]);
    let (mut run, lines, stdout) = start_efatop(dir.path(), &args);
    let results_path = dir.path().join("results.json");
    wait_for("a size measured", Duration::from_mins(1), || {
        std::fs::read(&results_path).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok()).filter(|r| {
            r["measurements"].as_array().is_some_and(|m| !m.is_empty())
        })
    });
    // Rank 1 of this run: the child of our launcher whose environment says so.
    let victim = wait_for("rank 1's process", Duration::from_secs(10), || {
        common::descendants(run.child.id()).into_iter().find(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == b"EFATOP_RANK=1"))
        })
    });
    assert!(Command::new("kill").args(["-KILL", &victim.to_string()]).status().expect("kill").success());
    let code = exit_code(&mut run, Duration::from_mins(1));
    let stderr: Vec<String> = lines.try_iter().collect();
    let _ = stdout.join();
    assert_eq!(code, Some(1), "{stderr:?}");
    assert!(!stderr.iter().any(|l| l.contains("warning: --pushgateway")), "the push went through: {stderr:?}");
    let results = read_results(&results_path);
    assert_eq!(results["status"]["state"], "failed");
    let (_, metrics) = common::http_get(gateway, "/metrics").expect("the pushgateway's /metrics");
    assert!(metrics.lines().any(|l| l.starts_with("efatop_run_state{") && l.contains("state=\"failed\"") && l.ends_with(" 1")), "{metrics}");
    let pushed = channel_totals(&metrics);
    let recorded = recorded_bytes(&results);
    assert!(!recorded.is_empty());
    for (key, bytes) in &recorded {
        assert!(pushed.get(key).is_some_and(|(pushed, _)| pushed >= bytes), "{key:?}: pushed {:?} < recorded {bytes}", pushed.get(key));
    }
}

/// The endpoint's linger after the run (`runtime/src/run_metrics.rs` `LINGER`, 5 s) is the one `--help` states.
#[test]
fn the_linger_is_the_one_the_help_states() {
    let help = Command::new(env!("CARGO_BIN_EXE_efatop")).args(["write", "--help"]).output().expect("efatop write --help");
    let help = String::from_utf8_lossy(&help.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(help.contains("for 5 s after it ends"), "{help}");
}

/// The variable that may hold `--pushgateway`'s `user:password`.
const ENV_AUTH: &str = "EFATOP_PUSHGATEWAY_AUTH";
/// Who the secured Pushgateway lets in.
const GATEWAY_USER: &str = "efatop";
const GATEWAY_PASSWORD: &str = "efatop-test-secret";
/// bcrypt (cost 4, the least Go's bcrypt takes) of [`GATEWAY_PASSWORD`], as crypt(3) makes it:
/// `perl -e 'print crypt("efatop-test-secret", q($2b$04$) . "abcdefghijklmnopqrstuu")'`. The Pushgateway
/// checking it is what tells it right: the right password is let in and a wrong one refused, below.
const GATEWAY_HASH: &str = "$2b$04$abcdefghijklmnopqrstuuH2ww.SJ3ASXKxB.NXJo3tD2dO8FiKNC";

/// Runs `openssl ARGS` in `dir`; panics with what it said when it fails.
fn openssl(openssl: &Path, dir: &Path, args: &[&str]) {
    let output = Command::new(openssl).args(args).current_dir(dir).stdin(Stdio::null()).output().expect("start openssl");
    assert!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
}

/// A CA (`ca.pem`) and a certificate for 127.0.0.1 it signed (`server.pem`, key `server.key`), in `dir`.
fn certificates(openssl_path: &Path, dir: &Path) -> PathBuf {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let mut ca = vec!["req", "-x509", "-days", "2", "-subj", "/CN=efatop test CA", "-keyout", "ca.key", "-out", "ca.pem"];
    ca.extend(ec);
    openssl(openssl_path, dir, &ca);
    let mut request = vec!["req", "-subj", "/CN=127.0.0.1", "-keyout", "server.key", "-out", "server.csr"];
    request.extend(ec);
    openssl(openssl_path, dir, &request);
    std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n").expect("extensions");
    let sign = ["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2", "-extfile", "server.ext", "-out", "server.pem"];
    openssl(openssl_path, dir, &sign);
    dir.join("ca.pem")
}

/// An agent that trusts only `ca`, for the test's own requests to the secured Pushgateway.
fn trusting(ca: &Path) -> ureq::Agent {
    let pem = std::fs::read(ca).expect("ca.pem");
    let roots: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(certificate)) => Some(certificate),
            _ => None,
        })
        .collect();
    let tls = ureq::tls::TlsConfig::builder().provider(ureq::tls::TlsProvider::Rustls).root_certs(ureq::tls::RootCerts::from(roots)).build();
    ureq::Agent::config_builder().tls_config(tls).http_status_as_error(false).proxy(None).timeout_global(Some(Duration::from_secs(5))).build().into()
}

/// `GET https://gateway/path` as `user:password` (none: no credentials): the status and the body.
fn secured_get(agent: &ureq::Agent, gateway: SocketAddr, path: &str, auth: Option<(&str, &str)>) -> Option<(u16, String)> {
    use base64::Engine as _;
    let mut request = agent.get(&format!("https://{gateway}{path}"));
    if let Some((user, password)) = auth {
        request = request.header("Authorization", format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))));
    }
    let mut response = request.call().ok()?;
    Some((response.status().as_u16(), response.body_mut().read_to_string().unwrap_or_default()))
}

/// A Pushgateway of our own that speaks only TLS (`server.pem` in `dir`) and lets in only
/// [`GATEWAY_USER`] with [`GATEWAY_PASSWORD`]; returns once it answers them.
fn start_secured_pushgateway(pushgateway: &Path, dir: &Path, agent: &ureq::Agent) -> (SocketAddr, Started) {
    let config = dir.join("web.yml");
    let yaml = format!(
        "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  {GATEWAY_USER}: {GATEWAY_HASH}\n",
        dir.join("server.pem").display(),
        dir.join("server.key").display()
    );
    std::fs::write(&config, yaml).expect("web config");
    let (gateway, server) = spawn_pushgateway(pushgateway, dir, &[format!("--web.config.file={}", config.display())]);
    let ready = || secured_get(agent, gateway, "/-/ready", Some((GATEWAY_USER, GATEWAY_PASSWORD))).filter(|(status, _)| *status == 200);
    wait_for("the secured pushgateway ready", Duration::from_secs(30), ready);
    (gateway, server)
}

/// A 4K write pushing to `url` with `more` flags and `env`: its exit code, stderr lines and results.
fn push_run(dir: &Path, url: &str, more: &[&str], env: &[(&str, &str)]) -> (Option<i32>, Vec<String>, String, Value) {
    let mut flags = vec!["--pushgateway", url];
    flags.extend_from_slice(more);
    let args = write("4K", "5", &flags);
    let (mut run, lines, stdout) = start_efatop_with(dir, &args, env);
    let code = exit_code(&mut run, Duration::from_mins(2));
    let stderr: Vec<String> = lines.try_iter().collect();
    let stdout = stdout.join().expect("stdout");
    let results = read_results(&dir.join("results.json"));
    (code, stderr, stdout, results)
}

#[test]
fn a_push_over_https_with_basic_auth_reaches_a_gateway_that_requires_both() {
    let Some(pushgateway) = common::required("prometheus-pushgateway", "prometheus-pushgateway") else { return };
    let Some(openssl_path) = common::required("openssl", "openssl") else { return };
    let _one = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = certificates(&openssl_path, dir.path());
    let agent = trusting(&ca);
    let (gateway, _server) = start_secured_pushgateway(&pushgateway, dir.path(), &agent);
    // The gateway really asks: no credentials, or the wrong ones, are turned away.
    assert_eq!(secured_get(&agent, gateway, "/metrics", None).map(|(status, _)| status), Some(401));
    assert_eq!(secured_get(&agent, gateway, "/metrics", Some((GATEWAY_USER, "wrong"))).map(|(status, _)| status), Some(401));

    let auth = dir.path().join("pushgateway.auth");
    std::fs::write(&auth, format!("{GATEWAY_USER}:{GATEWAY_PASSWORD}\n")).expect("auth file");
    std::fs::set_permissions(&auth, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod 600");
    let (auth, ca_flag) = (auth.to_str().expect("utf-8 path"), ca.to_str().expect("utf-8 path"));
    let url = format!("https://{gateway}");
    let secret_shown = |stderr: &[String], stdout: &str, results: &Value| {
        stderr.iter().any(|l| l.contains(GATEWAY_PASSWORD)) || stdout.contains(GATEWAY_PASSWORD) || results.to_string().contains(GATEWAY_PASSWORD)
    };

    // The file's credentials, the CA's trust: pushed, and the gateway holds what the results record.
    let (code, stderr, stdout, results) = push_run(dir.path(), &url, &["--pushgateway-auth", auth, "--pushgateway-ca", ca_flag], &[]);
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{}", stderr.join("\n"));
    assert!(!stderr.iter().any(|l| l.contains("--pushgateway")), "the push went through: {stderr:?}");
    assert!(!secret_shown(&stderr, &stdout, &results));
    let (status, metrics) = secured_get(&agent, gateway, "/metrics", Some((GATEWAY_USER, GATEWAY_PASSWORD))).expect("the gateway's /metrics");
    assert_eq!(status, 200, "{metrics}");
    let pushed: BTreeMap<(usize, usize), u64> = channel_totals(&metrics).into_iter().map(|(key, (bytes, _))| (key, bytes)).collect();
    assert_eq!(pushed, recorded_bytes(&results), "{metrics}");

    // The same credentials in the URL are taken too; the URL is echoed nowhere with them.
    let with_userinfo = format!("https://{GATEWAY_USER}:{GATEWAY_PASSWORD}@{gateway}");
    let (code, stderr, stdout, results) = push_run(dir.path(), &with_userinfo, &["--pushgateway-ca", ca_flag], &[]);
    assert_eq!(code, Some(0), "{stderr:?}");
    assert!(!stderr.iter().any(|l| l.contains("--pushgateway")), "the push went through: {stderr:?}");
    assert!(!secret_shown(&stderr, &stdout, &results));

    // A wrong password from the environment: the gateway's 401 in one warning, the run still complete,
    // the password nowhere.
    let wrong = format!("{GATEWAY_USER}:not-{GATEWAY_PASSWORD}");
    let (code, stderr, stdout, results) = push_run(dir.path(), &url, &["--pushgateway-ca", ca_flag], &[(ENV_AUTH, &wrong)]);
    assert_eq!(code, Some(0), "{stderr:?}");
    let warnings: Vec<&String> = stderr.iter().filter(|l| l.contains("--pushgateway")).collect();
    assert_eq!(warnings.len(), 1, "{stderr:?}");
    assert!(warnings[0].starts_with(&format!("efatop: warning: --pushgateway {url}: PUT {url}/metrics/job/efatop/instance/")), "{warnings:?}");
    assert!(warnings[0].contains("401"), "{warnings:?}");
    assert!(!secret_shown(&stderr, &stdout, &results) && !stderr.iter().any(|l| l.contains(&wrong)), "{stderr:?}");
    assert_eq!(results["status"]["state"], "complete");

    // Without the CA the gateway's certificate is not trusted (the built-in roots do not hold it): no
    // credentials are sent, and the warning says why.
    let (code, stderr, _, _) = push_run(dir.path(), &url, &["--pushgateway-auth", auth], &[]);
    assert_eq!(code, Some(0), "{stderr:?}");
    let warnings: Vec<&String> = stderr.iter().filter(|l| l.contains("--pushgateway")).collect();
    assert_eq!(warnings.len(), 1, "{stderr:?}");
    assert!(warnings[0].to_lowercase().contains("certificate"), "{warnings:?}");
}

/// Each bad auth or CA flag is refused before anything runs: one line naming the flag, exit 2, no results
/// file, and never the password.
#[test]
fn bad_auth_and_ca_flags_are_refused_before_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name).to_str().expect("utf-8 path").to_string();
    std::fs::write(path("open.auth"), "efatop:hunter2\n").expect("auth file");
    std::fs::set_permissions(path("open.auth"), std::os::unix::fs::PermissionsExt::from_mode(0o644)).expect("chmod");
    std::fs::write(path("ok.auth"), "efatop:hunter2\n").expect("auth file");
    std::fs::set_permissions(path("ok.auth"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    std::fs::write(path("junk.pem"), "not a certificate\n").expect("ca file");
    let out = path("results.json");
    let (open, ok, junk, missing) = (path("open.auth"), path("ok.auth"), path("junk.pem"), path("missing"));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--pushgateway", "https://127.0.0.1:9", "--pushgateway-auth", &open], "--pushgateway-auth"),
        (vec!["--pushgateway", "https://127.0.0.1:9", "--pushgateway-auth", &missing], "--pushgateway-auth"),
        (vec!["--pushgateway", "http://gw.example:9091", "--pushgateway-auth", &ok], "--pushgateway-auth"),
        (vec!["--pushgateway", "https://efatop:hunter2@127.0.0.1:9", "--pushgateway-auth", &ok], "--pushgateway-auth"),
        (vec!["--pushgateway-auth", &ok], "--pushgateway-auth"),
        (vec!["--pushgateway", "http://127.0.0.1:9", "--pushgateway-ca", &junk], "--pushgateway-ca"),
        (vec!["--pushgateway", "https://127.0.0.1:9", "--pushgateway-ca", &junk], "--pushgateway-ca"),
        (vec!["--pushgateway", "https://efatop:hunter2@gw:9091/?x=1"], "--pushgateway"),
        (vec!["--pushgateway", "https://:hunter2@gw:9091"], "--pushgateway"),
    ];
    for (flags, flag) in cases {
        let mut args = vec!["run", "--ranks", "2", "write", "--provider", "shm", "--out", &out];
        args.extend_from_slice(&flags);
        let run = common::efatop(&args);
        assert_eq!(run.code, Some(2), "{flags:?}: {}", run.stderr);
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{flags:?}: {lines:?}");
        assert!(lines[0].starts_with("efatop: error: ") && lines[0].contains(flag), "{flags:?}: {lines:?}");
        assert!(!run.stderr.contains("hunter2") && !run.stdout.contains("hunter2"), "{flags:?}: {lines:?}");
        assert!(!Path::new(&out).exists(), "{flags:?}: nothing written");
    }
    // From the environment: a value that is not user:password names the variable.
    let output = Command::new(common::efatop_path())
        .args(["run", "--ranks", "2", "write", "--provider", "shm", "--out", &out, "--pushgateway", "https://127.0.0.1:9"])
        .current_dir(dir.path())
        .env(ENV_AUTH, "hunter2")
        .stdin(Stdio::null())
        .output()
        .expect("efatop runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with(&format!("efatop: error: {ENV_AUTH}: ")) && stderr.lines().count() == 1, "{stderr}");
    assert!(!stderr.contains("hunter2") && !Path::new(&out).exists(), "{stderr}");
}
