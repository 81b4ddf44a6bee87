//! `efatop monitor --prometheus` scraped by a real Prometheus server (Debian's `prometheus` package, which
//! scripts/build/setup-debian installs): the monitor reads a fake p5 tree whose `rdmap80s0` writes at a known
//! rate, Prometheus scrapes it every 250 ms, and `rate()` through Prometheus's HTTP API must give that rate
//! for that NIC, with its PCI address, GPU and rail as labels, and nothing for its idle neighbour. And the
//! alert rules efatop ships (deploy/prometheus/efatop-rules.yml), loaded by a real Prometheus scraping a
//! healthy and a faulty fake p5: the alert fires for the planted fault, not for the healthy node.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use efatop_node::FakeSysfs;
use common::prometheus::{query, wait_for, Started};
use serde_json::Value;

/// Bytes per second the test writes on the fake NIC.
const RATE: f64 = 2.0e9;

/// Writes `rdma_write_bytes` of `device` as traffic at [`RATE`] would leave it: its start value plus
/// RATE × the time since start, rewritten every few milliseconds, until dropped.
struct Traffic {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Traffic {
    fn start(fake: FakeSysfs, device: &'static str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let start = fake.get(device, "rdma_write_bytes").expect("counter");
        let began = Instant::now();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                let value = start + (RATE * began.elapsed().as_secs_f64()) as u64;
                fake.set(device, "rdma_write_bytes", value).expect("set");
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Self { stop, thread: Some(thread) }
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// `efatop monitor --prometheus 127.0.0.1:0` over `root`, placed by `fixture`; it picks its own port and
/// says which on stderr.
fn start_monitor(root: &Path, fixture: &Path) -> (Started, SocketAddr) {
    let mut monitor = Command::new(common::efatop_path())
        .args(["monitor", "--interval", "100ms", "--prometheus", "127.0.0.1:0", "--topology-xml"])
        .arg(fixture)
        .arg("--sysfs-root")
        .arg(root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start efatop monitor");
    let stderr = monitor.stderr.take().expect("stderr");
    let monitor = Started(monitor);
    let mut line = String::new();
    BufReader::new(stderr).read_line(&mut line).expect("the monitor's first line");
    let endpoint: SocketAddr = line
        .trim()
        .strip_prefix("efatop: serving http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .and_then(|address| address.parse().ok())
        .unwrap_or_else(|| panic!("the monitor says where it serves: {line:?}"));
    (monitor, endpoint)
}

#[test]
fn prometheus_scrapes_the_monitor_and_its_rate_is_the_fake_nics_write_rate() {
    let Some(prometheus) = common::required("prometheus", "prometheus") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let fake = FakeSysfs::p5(dir.path().join("p5")).expect("fake p5 tree");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("topology/fixtures/p5.48xlarge.xml");

    let (monitor, endpoint) = start_monitor(fake.root(), &fixture);

    let _traffic = Traffic::start(fake.clone(), "rdmap80s0");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 250ms\n  scrape_timeout: 200ms\n  evaluation_interval: 250ms\n\
             scrape_configs:\n  - job_name: efatop\n    static_configs:\n      - targets: ['{endpoint}']\n"
        ),
    )
    .expect("config");
    let (_server, web, logs) = common::prometheus::start(&prometheus, &config, dir.path());

    wait_for("prometheus ready", Duration::from_mins(1), &logs, || common::http_get(web, "/-/ready").filter(|(status, _)| *status == 200));
    // rate() over a window the series does not fill yet extrapolates only half a scrape interval back,
    // so wait until the series is older than the window: 52 scrapes (13 s at 250 ms) in the last 15 s.
    let window = "10s";
    let samples = r#"count_over_time(efatop_nic_rdma_write_bytes_total{nic="rdmap80s0"}[15s])"#;
    wait_for("13 s of scrapes of the fake NIC", Duration::from_mins(2), &logs, || {
        query(web, samples).first().and_then(|s| s["value"][1].as_str()?.parse::<f64>().ok()).filter(|n| *n >= 52.0)
    });
    let result = query(web, &format!(r#"rate(efatop_nic_rdma_write_bytes_total{{nic="rdmap80s0"}}[{window}])"#));
    assert_eq!(result.len(), 1, "one series for one NIC: {result:?}");
    let series = &result[0];
    let labels = &series["metric"];
    assert_eq!((labels["pci"].as_str(), labels["gpu"].as_str(), labels["rail"].as_str()), (Some("0000:50:00.0"), Some("0"), Some("1")), "{labels}");
    assert!(labels["host"].as_str().is_some_and(|h| !h.is_empty()), "{labels}");
    let rate: f64 = series["value"][1].as_str().and_then(|v| v.parse().ok()).expect("a rate");
    println!("prometheus: rate(efatop_nic_rdma_write_bytes_total{{nic=\"rdmap80s0\"}}[{window}]) = {rate:.0} B/s (written at {RATE:.0} B/s)");
    // Counters are read at each scrape; what is left is how late the writer thread and the scrape run on a
    // busy machine, a small part of 10 s. A wrong NIC, counter or scale is far outside.
    assert!((rate / RATE - 1.0).abs() < 0.15, "rate {rate} against {RATE}");
    let idle = query(web, &format!(r#"rate(efatop_nic_rdma_write_bytes_total{{nic="rdmap79s0"}}[{window}])"#));
    let idle_rate: f64 = idle.first().and_then(|s| s["value"][1].as_str()?.parse().ok()).expect("the idle neighbour's series");
    assert!(idle_rate.abs() < f64::EPSILON, "rdmap79s0 moved nothing: {idle_rate}");
    drop(monitor);
}

/// The alerts Prometheus holds now: (name, state, instance, nic).
fn alerts(prometheus: SocketAddr) -> Vec<(String, String, String, String)> {
    let Some((200, body)) = common::http_get(prometheus, "/api/v1/alerts") else { return Vec::new() };
    let reply: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    reply["data"]["alerts"]
        .as_array()
        .map(|alerts| {
            alerts
                .iter()
                .map(|a| (text(&a["labels"]["alertname"]), text(&a["state"]), text(&a["labels"]["instance"]), text(&a["labels"]["nic"])))
                .collect()
        })
        .unwrap_or_default()
}

/// deploy/prometheus/efatop-rules.yml loaded by a real Prometheus that scrapes two monitors: one over a
/// healthy fake p5, one over a fake p5 whose rdmap80s0 sees impaired remote connections (its counter grows
/// every 200 ms). The impaired-connections alert fires for that NIC of that monitor, and no alert fires
/// for the healthy one.
#[test]
fn the_shipped_alert_fires_on_the_planted_fault_and_not_on_a_healthy_node() {
    let Some(prometheus) = common::required("prometheus", "prometheus") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("topology/fixtures/p5.48xlarge.xml");
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus/efatop-rules.yml");
    let healthy = efatop_node::FakeNode::write(dir.path().join("healthy"), "p5.48xlarge").expect("healthy p5");
    let faulty = efatop_node::FakeNode::write(dir.path().join("faulty"), "p5.48xlarge").expect("faulty p5");
    let (_healthy_monitor, healthy_endpoint) = start_monitor(healthy.root(), &fixture);
    let (_faulty_monitor, faulty_endpoint) = start_monitor(faulty.root(), &fixture);
    let stop = Arc::new(AtomicBool::new(false));
    let bumper = {
        let (faulty, stop) = (faulty.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                faulty.bump().expect("bump");
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 250ms\n  scrape_timeout: 200ms\n  evaluation_interval: 250ms\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: efatop\n    static_configs:\n      - targets: ['{healthy_endpoint}', '{faulty_endpoint}']\n",
            rules.display()
        ),
    )
    .expect("config");
    let (_server, web, logs) = common::prometheus::start(&prometheus, &config, dir.path());
    wait_for("prometheus ready", Duration::from_mins(1), &logs, || common::http_get(web, "/-/ready").filter(|(status, _)| *status == 200));
    let firing = wait_for("the impaired-connections alert firing", Duration::from_mins(2), &logs, || {
        let all = alerts(web);
        all.iter().any(|(name, state, _, _)| name == "EfaImpairedRemoteConnections" && state == "firing").then_some(all)
    });
    println!("prometheus alerts: {firing:?}");
    // Both targets have been scraped for a while by now; ten more seconds of evaluations for the healthy
    // one to show anything it would.
    std::thread::sleep(Duration::from_secs(10));
    let all = alerts(web);
    stop.store(true, Ordering::Relaxed);
    bumper.join().expect("bumper");
    let scraped = query(web, r#"count(efatop_nic_impaired_remote_conn_events_total{nic="rdmap80s0"})"#);
    assert_eq!(scraped.first().and_then(|s| s["value"][1].as_str()), Some("2"), "both monitors scraped: {scraped:?}");
    let faulty_instance = faulty_endpoint.to_string();
    assert!(
        all.iter().any(|(name, state, instance, nic)| name == "EfaImpairedRemoteConnections"
            && state == "firing"
            && *instance == faulty_instance
            && nic == "rdmap80s0"),
        "{all:?}"
    );
    assert!(all.iter().all(|(_, _, instance, nic)| *instance == faulty_instance && nic == "rdmap80s0"), "only the planted fault alerts: {all:?}");
}
