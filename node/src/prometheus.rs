//! `--prometheus ADDR`: the monitor's latest snapshot as a text endpoint at `/metrics`, for a Prometheus
//! server to scrape. The exposition comes from `prometheus-client` (a [`Collector`] over one owned
//! snapshot, encoded per scrape) as `OpenMetrics` text, which a scrape that asks for it gets (Prometheus
//! does); every other client (`curl`, `promtool check metrics`) gets the classic text format 0.0.4
//! ([`to_text_format`]), as Prometheus's own Go client negotiates. The HTTP ([`Exporter`], in `http`) answers
//! `GET` and `HEAD` of `/metrics` only, on threads of its own, with a request's size, time and the
//! connections served at once bounded: the reader offers it each new state, which a scrape renders outside
//! any lock, so a slow scrape never holds up a read.
//!
//! Names follow Prometheus's conventions: one metric per sysfs counter, `efatop_nic_<counter>_total`
//! (`efatop_nic_rdma_write_bytes_total`), gauges in base units (`efatop_nic_tx_bytes_per_second`), labels
//! `host`, `nic`, `pci`, `gpu`, `rail` (empty where the topology does not say). Rail symmetry is the gauge
//! `efatop_nic_rail_load_ratio` (a NIC's load over its rail's median) and `efatop_nic_rail_off` (1 when
//! far off). NVLink per GPU where NVML has it: `efatop_gpu_nvlink_{tx,rx}_bytes_per_second`.

mod http;
mod watch;
mod xid;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use efatop_sweep::rails::{balance, rails_of};
use efatop_proto::telemetry::{NodeGpus, NodeSample};

pub use watch::WatchMetrics;
pub use http::{Exporter, HEAD_TIMEOUT, MAX_CONNECTIONS, MAX_HEADERS, MAX_HEAD_BYTES, WRITE_TIMEOUT};

/// The content type of `OpenMetrics` text, which `prometheus-client` writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of Prometheus's classic text format (0.0.4), for every client that does not ask for
/// `OpenMetrics`: `curl`, `promtool check metrics`, a Pushgateway.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Which exposition format a scrape gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `OpenMetrics` text: what a Prometheus server asks for first.
    OpenMetrics,
    /// The classic text format 0.0.4: what everything else gets, as from Prometheus's own Go client.
    Text,
}

impl Format {
    /// `OpenMetrics` when the request's `Accept` header names it, else the classic text format.
    pub fn negotiate(accept: Option<&str>) -> Self {
        if accept.is_some_and(|accept| accept.to_ascii_lowercase().contains("application/openmetrics-text")) {
            Self::OpenMetrics
        } else {
            Self::Text
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Self::OpenMetrics => CONTENT_TYPE,
            Self::Text => TEXT_CONTENT_TYPE,
        }
    }
}

/// `OpenMetrics` text (as `prometheus-client` writes it: counters and gauges) in the classic text format
/// 0.0.4. The two differ where a parser of the other would go wrong: an `OpenMetrics` counter family is
/// named without the `_total` its samples carry (the classic format names the family as its samples, else
/// `promtool check metrics` finds samples with no HELP or TYPE); `unknown` is `untyped`; HELP escapes only
/// `\\` and `\n`; `# UNIT`, `_created` samples and `# EOF` have no classic form and are left out.
pub fn to_text_format(openmetrics: &str) -> String {
    use std::fmt::Write as _;
    let mut text = String::with_capacity(openmetrics.len());
    // A family's HELP comes before its TYPE, which says whether its name takes `_total`.
    let mut help: Option<(&str, String)> = None;
    let mut counter: Option<&str> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, docstring) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name, unescape_quotes(docstring)));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (family, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "gauge" => (name.to_string(), "gauge"),
                _ => (name.to_string(), "untyped"),
            };
            counter = (kind == "counter").then_some(name);
            if let Some((_, docstring)) = help.take().filter(|(described, _)| *described == name) {
                let _ = writeln!(text, "# HELP {family} {docstring}");
            }
            let _ = writeln!(text, "# TYPE {family} {kind}");
        } else {
            let created = counter.is_some_and(|name| line.strip_prefix(name).is_some_and(|rest| rest.starts_with("_created")));
            // `# UNIT`, `# EOF` and `_created` have no classic form.
            if line.starts_with('#') || created || line.is_empty() {
                continue;
            }
            text.push_str(line);
            text.push('\n');
        }
    }
    text
}

/// An `OpenMetrics` HELP text with `\"` as a plain `"` (the classic format escapes only `\\` and `\n`).
fn unescape_quotes(docstring: &str) -> String {
    let mut plain = String::with_capacity(docstring.len());
    let mut chars = docstring.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            plain.push(c);
            continue;
        }
        match chars.next() {
            Some('"') => plain.push('"'),
            Some(next) => {
                plain.push('\\');
                plain.push(next);
            }
            None => plain.push('\\'),
        }
    }
    plain
}

/// Labels of a NIC's series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NicLabels {
    host: String,
    nic: String,
    pci: String,
    gpu: String,
    rail: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabels {
    host: String,
    gpu: String,
    pci: String,
}

/// A counter name as a metric name part: `rdma_write_bytes` stays, anything but `[a-zA-Z0-9_]` becomes `_`.
fn metric_part(counter: &str) -> String {
    counter.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

/// The snapshots of one scrape: one node's, or every node's.
#[derive(Debug)]
struct Snapshots(Vec<NodeSample>);

impl Snapshots {
    fn nic_labels(&self) -> Vec<Vec<NicLabels>> {
        self.0
            .iter()
            .map(|snapshot| {
                let rails = rails_of(snapshot);
                snapshot
                    .nics
                    .iter()
                    .map(|nic| {
                        let rail = rails.iter().find(|(name, _, _)| *name == nic.name);
                        NicLabels {
                            host: snapshot.host.clone(),
                            nic: nic.name.clone(),
                            pci: nic.pci_bus_id.clone().unwrap_or_default(),
                            gpu: nic.gpus.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
                            rail: rail.map(|(_, _, rail)| rail.to_string()).unwrap_or_default(),
                        }
                    })
                    .collect()
            })
            .collect()
    }
}

/// One gauge family: its descriptor and a sample per label set; nothing at all when there is none (a
/// family without samples is noise to a scrape). Every exporter of efatop's encodes its gauges through it.
pub fn gauges<'a, L: EncodeLabelSet + 'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (&'a L, f64)>,
) -> Result<(), std::fmt::Error> {
    let mut series = series.into_iter().peekable();
    if series.peek().is_none() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, None, ConstGauge::new(0.0_f64).metric_type())?;
    for (labels, value) in series {
        ConstGauge::new(value).encode(metric.encode_family(labels)?)?;
    }
    Ok(())
}

/// One counter family (`prometheus-client` adds the `_total` suffix), as [`gauges`].
pub fn counters<'a, L: EncodeLabelSet + 'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (&'a L, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut series = series.into_iter().peekable();
    if series.peek().is_none() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, None, ConstCounter::new(0_u64).metric_type())?;
    for (labels, value) in series {
        ConstCounter::new(value).encode(metric.encode_family(labels)?)?;
    }
    Ok(())
}

/// The `OpenMetrics` text of `collectors`, registered in this order: what every [`Exposition`] renders.
pub fn encode(collectors: Vec<Box<dyn Collector>>) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    for collector in collectors {
        registry.register_collector(collector);
    }
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    Ok(text)
}

impl Collector for Snapshots {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let labels = self.nic_labels();
        let nics = || self.0.iter().zip(&labels).flat_map(|(snapshot, labels)| snapshot.nics.iter().zip(labels));
        // Every counter any NIC has, each its own metric.
        let names: std::collections::BTreeSet<&str> = nics().flat_map(|(nic, _)| nic.counters.keys().map(String::as_str)).collect();
        for counter in names {
            let name = format!("efatop_nic_{}", metric_part(counter));
            let help = format!("the NIC's `{counter}` counter, as sysfs has it (RDMA port counters summed over ports)");
            counters(&mut encoder, &name, &help, nics().filter_map(|(nic, labels)| Some((labels, nic.counters.get(counter)?.value))))?;
        }
        gauges(
            &mut encoder,
            "efatop_nic_tx_bytes_per_second",
            "bytes the NIC sent per second over the monitor's last interval (tx_bytes)",
            nics().filter_map(|(nic, labels)| Some((labels, nic.tx_gbps? * 1e9 / 8.0))),
        )?;
        gauges(
            &mut encoder,
            "efatop_nic_rx_bytes_per_second",
            "bytes the NIC received per second over the monitor's last interval (rx_bytes)",
            nics().filter_map(|(nic, labels)| Some((labels, nic.rx_gbps? * 1e9 / 8.0))),
        )?;
        gauges(
            &mut encoder,
            "efatop_nic_link_speed_bytes_per_second",
            "the NIC's link speed as sysfs reports it, in bytes per second",
            nics().filter_map(|(nic, labels)| Some((labels, nic.link_gbps? * 1e9 / 8.0))),
        )?;
        gauges(
            &mut encoder,
            "efatop_nic_present",
            "1 while the NIC is found in sysfs, 0 once it is gone",
            nics().map(|(nic, labels)| (labels, if nic.present { 1.0 } else { 0.0 })),
        )?;
        // Rail symmetry over every snapshot of this scrape (across nodes too).
        let snapshots: Vec<&NodeSample> = self.0.iter().collect();
        let loads = balance(&snapshots);
        let load_of = |labels: &NicLabels| loads.iter().find(|l| l.host == labels.host && l.nic == labels.nic);
        gauges(
            &mut encoder,
            "efatop_nic_rail_load_ratio",
            "the NIC's tx+rx load over the median of its rail's NICs (NIC k of every GPU); absent on idle rails",
            nics().filter_map(|(_, labels)| Some((labels, load_of(labels)?.ratio?))),
        )?;
        gauges(
            &mut encoder,
            "efatop_nic_rail_off",
            "1 when the NIC's load is more than half its rail's median away from it, else 0 (rails with a load only)",
            nics().filter_map(|(_, labels)| {
                let load = load_of(labels)?;
                load.ratio.map(|_| (labels, if load.off { 1.0 } else { 0.0 }))
            }),
        )?;
        let gpus: Vec<(GpuLabels, Option<f64>, Option<f64>)> = self
            .0
            .iter()
            .flat_map(|snapshot| match &snapshot.gpus {
                NodeGpus::Gpus(gpus) => gpus
                    .iter()
                    .map(|gpu| {
                        let labels = GpuLabels { host: snapshot.host.clone(), gpu: gpu.index.to_string(), pci: gpu.pci_bus_id.clone() };
                        (labels, gpu.nvlink_tx_gbps, gpu.nvlink_rx_gbps)
                    })
                    .collect(),
                NodeGpus::Unavailable(_) => Vec::new(),
            })
            .collect();
        for (name, help, pick) in [
            ("efatop_gpu_nvlink_tx_bytes_per_second", "bytes the GPU sent over NVLink per second (NVML)", 0),
            ("efatop_gpu_nvlink_rx_bytes_per_second", "bytes the GPU received over NVLink per second (NVML)", 1),
        ] {
            gauges(&mut encoder, name, help, gpus.iter().filter_map(|(labels, tx, rx)| Some((labels, if pick == 0 { (*tx)? } else { (*rx)? } * 1e9 / 8.0))))?;
        }
        Ok(())
    }
}

/// The `OpenMetrics` text of these snapshots.
pub fn render(snapshots: Vec<NodeSample>) -> Result<String, std::fmt::Error> {
    let mut collectors: Vec<Box<dyn Collector>> = vec![Box::new(Snapshots(snapshots))];
    // The process's live Xid counts, once `efatop monitor` started them (crate::xid_watch).
    if let Some(xids) = crate::xid_watch::XidWatch::running() {
        collectors.push(Box::new(xid::XidCollector(xids)));
    }
    encode(collectors)
}

/// What an endpoint serves: the `OpenMetrics` text of its latest state.
pub trait Exposition: Send + Sync + 'static {
    fn render(&self) -> Result<String, std::fmt::Error>;
}

impl Exposition for Vec<NodeSample> {
    fn render(&self) -> Result<String, std::fmt::Error> {
        render(self.clone())
    }
}

/// One node's latest snapshot whose counters are read again at each scrape, as `node_exporter` reads at
/// scrape time: Prometheus stamps a sample with the scrape's time, and a value read up to an interval
/// earlier (longer when the reader was held up) would bend `rate()`. The rates, rails and GPU figures stay
/// the snapshot's.
#[derive(Clone, Debug)]
pub struct FreshCounters {
    pub sysfs: crate::Sysfs,
    pub snapshot: NodeSample,
}

impl Exposition for FreshCounters {
    fn render(&self) -> Result<String, std::fmt::Error> {
        let mut snapshot = self.snapshot.clone();
        let readings = self.sysfs.read_all();
        for nic in &mut snapshot.nics {
            let Some(reading) = readings.iter().find(|r| r.name == nic.name) else { continue };
            for (name, stats) in &mut nic.counters {
                if let Some(value) = reading.counters.get(name) {
                    stats.value = *value;
                }
            }
        }
        render(vec![snapshot])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use crate::{Affinity, FakeSysfs, GpuReader, Monitor, Sysfs};

    #[test]
    fn counters_are_totals_rates_are_gauges_with_the_nics_labels() {
        let dir = tempfile::tempdir().unwrap();
        let fake = FakeSysfs::p5(dir.path()).unwrap();
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../topology/fixtures/p5.48xlarge.xml");
        let topology = efatop_topology::NodeTopology::from_xml_file(&fixture).unwrap();
        let mut monitor = Monitor::new("p5", Sysfs::new(fake.root()), Affinity::from_topology(&topology), GpuReader::unavailable("test"));
        monitor.sample(Duration::ZERO);
        fake.advance("rdmap80s0", "rdma_write_bytes", 5_000).unwrap();
        fake.advance("rdmap80s0", "tx_bytes", 2_000).unwrap();
        let snapshot = monitor.sample(Duration::from_secs(2));
        let value = snapshot.nics.iter().find(|n| n.name == "rdmap80s0").unwrap().counters["rdma_write_bytes"].value;
        let text = render(vec![snapshot]).unwrap();
        let labels = r#"host="p5",nic="rdmap80s0",pci="0000:50:00.0",gpu="0",rail="1""#;
        assert!(text.contains("# TYPE efatop_nic_rdma_write_bytes counter\n"), "{text}");
        assert!(text.contains(&format!("efatop_nic_rdma_write_bytes_total{{{labels}}} {value}\n")), "{text}");
        assert!(text.contains(&format!("efatop_nic_tx_bytes_per_second{{{labels}}} 1000.0\n")), "{text}");
        assert!(text.contains(&format!("efatop_nic_link_speed_bytes_per_second{{{labels}}} 12500000000.0\n")), "{text}");
        assert!(text.contains(r#"efatop_nic_rx_bytes_total{host="p5",nic="lo",pci="",gpu="",rail=""}"#), "{text}");
        assert!(text.ends_with("# EOF\n"));
        assert!(!text.contains("efatop_gpu_nvlink"), "no NVML, no NVLink series");
    }

    #[test]
    fn the_endpoint_serves_metrics_over_http() {
        use std::io::{Read, Write};
        let dir = tempfile::tempdir().unwrap();
        FakeSysfs::p5(dir.path()).unwrap();
        let mut monitor = Monitor::new("p5", Sysfs::new(dir.path()), Affinity::none(), GpuReader::unavailable("test"));
        let exporter: Exporter = Exporter::start("127.0.0.1:0".parse().unwrap()).unwrap();
        exporter.offer(vec![monitor.sample(Duration::ZERO)]);
        let get = |path: &str, headers: &str| {
            // The snapshot reaches the serving thread at its next look: ask until it has.
            loop {
                let mut stream = std::net::TcpStream::connect(exporter.address).unwrap();
                write!(stream, "GET {path} HTTP/1.0\r\n{headers}\r\n").unwrap();
                let mut reply = String::new();
                stream.read_to_string(&mut reply).unwrap();
                if !reply.starts_with("HTTP/1.0 503") {
                    return reply;
                }
            }
        };
        // curl and promtool ask for nothing in particular: the classic text format.
        let reply = get("/metrics", "");
        assert!(reply.starts_with("HTTP/1.0 200"), "{reply}");
        assert!(reply.contains(TEXT_CONTENT_TYPE), "{reply}");
        assert!(reply.contains("# TYPE efatop_nic_rdma_write_bytes_total counter\n"), "{reply}");
        assert!(reply.contains("efatop_nic_rdma_write_bytes_total{host=\"p5\",nic=\"rdmap79s0\",pci=\"0000:4f:00.0\",gpu=\"\",rail=\"\"} 1000000014"), "{reply}");
        assert!(!reply.contains("# EOF"), "{reply}");
        // Prometheus asks for OpenMetrics first.
        let accept = "Accept: application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n";
        let reply = get("/metrics", accept);
        assert!(reply.contains(CONTENT_TYPE), "{reply}");
        assert!(reply.contains("# TYPE efatop_nic_rdma_write_bytes counter\n"), "{reply}");
        assert!(reply.ends_with("# EOF\n"), "{reply}");
        assert!(get("/", "").starts_with("HTTP/1.0 404"));
    }

    #[test]
    fn openmetrics_counters_become_classic_families_named_as_their_samples() {
        let lines = |lines: &[&str]| lines.join("\n") + "\n";
        let openmetrics = lines(&[
            r#"# HELP a_bytes moved \"here\" \\ \n"#,
            "# TYPE a_bytes counter",
            "# UNIT a_bytes bytes",
            r#"a_bytes_total{x="1"} 5"#,
            r#"a_bytes_created{x="1"} 1.0"#,
            "# HELP b_ratio a gauge",
            "# TYPE b_ratio gauge",
            "b_ratio 0.5",
            "# TYPE c unknown",
            "c 1",
            "# EOF",
        ]);
        let classic = lines(&[
            r#"# HELP a_bytes_total moved "here" \\ \n"#,
            "# TYPE a_bytes_total counter",
            r#"a_bytes_total{x="1"} 5"#,
            "# HELP b_ratio a gauge",
            "# TYPE b_ratio gauge",
            "b_ratio 0.5",
            "# TYPE c untyped",
            "c 1",
        ]);
        assert_eq!(to_text_format(&openmetrics), classic);
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Text);
        assert_eq!(Format::negotiate(Some("application/openmetrics-text; version=1.0.0")), Format::OpenMetrics);
    }

    #[test]
    fn the_last_state_offered_answers_the_next_request() {
        use std::io::{Read, Write};
        let dir = tempfile::tempdir().unwrap();
        FakeSysfs::p5(dir.path()).unwrap();
        let mut monitor = Monitor::new("p5", Sysfs::new(dir.path()), Affinity::none(), GpuReader::unavailable("test"));
        let exporter: Exporter = Exporter::start("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut snapshot = monitor.sample(Duration::ZERO);
        // More offers than the queue holds, the last one guaranteed.
        for _ in 0..10 {
            exporter.offer(vec![snapshot.clone()]);
        }
        snapshot.host = "last".into();
        exporter.offer_last(vec![snapshot]);
        let mut stream = std::net::TcpStream::connect(exporter.address).unwrap();
        write!(stream, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        assert!(reply.contains("host=\"last\""), "{reply}");
    }

    /// Over real connections: other methods get 405 with `Allow`, `HEAD` gets no body, and connections
    /// past the cap are closed unanswered and counted while the others are served.
    #[test]
    fn the_endpoint_answers_get_and_head_only_and_caps_its_connections() {
        use std::io::{Read, Write};
        let dir = tempfile::tempdir().unwrap();
        FakeSysfs::p5(dir.path()).unwrap();
        let mut monitor = Monitor::new("p5", Sysfs::new(dir.path()), Affinity::none(), GpuReader::unavailable("test"));
        let exporter: Exporter = Exporter::start("127.0.0.1:0".parse().unwrap()).unwrap();
        exporter.offer(vec![monitor.sample(Duration::ZERO)]);
        let ask = |request: &str| {
            let mut stream = std::net::TcpStream::connect(exporter.address).unwrap();
            stream.write_all(request.as_bytes()).unwrap();
            let mut reply = String::new();
            let _ = stream.read_to_string(&mut reply);
            reply
        };
        for method in ["POST", "PUT", "DELETE", "OPTIONS"] {
            let reply = ask(&format!("{method} /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"));
            assert!(reply.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{method}: {reply}");
            assert!(reply.contains("\r\nAllow: GET, HEAD\r\n"), "{method}: {reply}");
            assert!(!reply.contains("efatop_nic"), "{method}: {reply}");
        }
        let head = ask("HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n") && head.contains(TEXT_CONTENT_TYPE), "{head}");
        assert!(head.ends_with("\r\n\r\n"), "no body: {head}");
        let big = ask(&format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD_BYTES)));
        assert!(big.starts_with("HTTP/1.1 431 "), "{big}");
        assert_eq!(exporter.refused(), 1);

        // Every slot held by a connection that says nothing: one more is closed at once, unanswered.
        let idle: Vec<std::net::TcpStream> = (0..MAX_CONNECTIONS).map(|_| std::net::TcpStream::connect(exporter.address).unwrap()).collect();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let mut extra = std::net::TcpStream::connect(exporter.address).unwrap();
            let _ = extra.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
            let mut reply = Vec::new();
            let _ = extra.read_to_end(&mut reply);
            if reply.is_empty() {
                break;
            }
            // The idle connections' threads may not all have started yet.
            assert!(std::time::Instant::now() < deadline, "a connection past the cap was answered");
        }
        assert!(exporter.refused() >= 2, "{}", exporter.refused());
        drop(idle);
        // Their slots come back once they are gone.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !ask("GET /metrics HTTP/1.0\r\n\r\n").starts_with("HTTP/1.0 200 OK") {
            assert!(std::time::Instant::now() < deadline, "slots never came back");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
