//! A real Prometheus server for the tests that scrape efatop's endpoints (Debian's `prometheus` package,
//! which scripts/build/setup-debian installs): started with a config, queried through its HTTP API, polled
//! until what a test waits for is there.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A child a test started, killed (by its pid) when the test ends however it ends.
pub struct Started(pub Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

/// An instant query through Prometheus's HTTP API: the result vector.
pub fn query(prometheus: SocketAddr, expression: &str) -> Vec<Value> {
    let Some((200, body)) = super::http_get(prometheus, &format!("/api/v1/query?query={}", percent_encode(expression))) else { return Vec::new() };
    let reply: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    reply["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// A series' value in a query's result.
pub fn value(series: &Value) -> Option<f64> {
    series["value"][1].as_str()?.parse().ok()
}

/// Polls `done` every 250 ms until it gives a value; panics with `what` after `limit` (a broken setup, not
/// a slow one: the tests' figures do not depend on how long this takes).
pub fn wait_for<T>(what: &str, limit: Duration, logs: &Path, mut done: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = done() {
            return value;
        }
        assert!(started.elapsed() < limit, "{what} within {limit:?}; prometheus said:\n{}", std::fs::read_to_string(logs).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A Prometheus server with `config`, its data and log under `dir`: the server, its web address and its
/// log file.
pub fn start(prometheus: &Path, config: &Path, dir: &Path) -> (Started, SocketAddr, PathBuf) {
    let web = SocketAddr::from(([127, 0, 0, 1], super::free_port()));
    let logs = dir.join("prometheus.log");
    let server = Command::new(prometheus)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
        .arg(format!("--web.listen-address={web}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&logs).expect("log file"))
        .spawn()
        .expect("start prometheus");
    (Started(server), web, logs)
}

/// `promtool check metrics` of `text`: its exit code and what it said.
pub fn check_metrics(promtool: &Path, text: &str) -> (Option<i32>, String) {
    use std::io::Write;
    let mut check = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start promtool");
    check.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("feed promtool");
    let output = check.wait_with_output().expect("promtool ends");
    (output.status.code(), format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)))
}
