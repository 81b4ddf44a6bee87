//! A run's figures for Prometheus, kept by rank 0 from the telemetry it already collects
//! (`efatop_monitor::run_metrics`): `--prometheus ADDR` serves them at `http://ADDR/metrics` while the run
//! goes and for [`LINGER`] after it ends, so that a last scrape gets the final totals; `--pushgateway URL`
//! pushes the final totals and how the run ended to a Pushgateway ([`push`]), as batch jobs in the
//! Prometheus world do.
//!
//! [`RunMetrics`] is a plain object for the loop that owns rank 0's outlets: it folds each telemetry batch
//! in ([`RunMetrics::observe`]) and offers the view to the endpoint's thread by `try_send`, so a scrape
//! never holds up the telemetry; [`RunMetrics::finish`] settles the final figures from the results and
//! lingers. [`push`] needs no endpoint. No thread besides the HTTP server's.

use std::fmt;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use efatop_experiments::ExperimentError;
use efatop_proto::results::RunResults;
use efatop_monitor::prometheus::{Exporter, TEXT_CONTENT_TYPE};
use efatop_monitor::run_metrics::RunView;

use crate::collector::CollectorEvent;

/// How long `--prometheus`'s endpoint keeps answering with the final figures after the run ends.
pub const LINGER: Duration = Duration::from_secs(5);

/// How long a push may take, connection included, before it is given up (with a warning).
const PUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// Rank 0's view of the run for Prometheus, and the endpoint serving it.
pub struct RunMetrics {
    view: RunView,
    exporter: Exporter<RunView>,
}

impl RunMetrics {
    /// Binds `address` (prints `efatop: serving http://ADDR/metrics` on stderr); a bad or taken address is
    /// an error naming `--prometheus`. `hosts` may be empty until the world is up ([`RunMetrics::set_hosts`]).
    pub fn start(address: SocketAddr, experiment: &str, hosts: &[String]) -> Result<Self, ExperimentError> {
        let exporter: Exporter<RunView> =
            Exporter::start(address).map_err(|message| ExperimentError::InvalidInput { flag: "--prometheus", message })?;
        eprintln!("efatop: serving http://{}/metrics", exporter.address);
        Ok(Self { view: RunView::new(experiment, hosts.to_vec()), exporter })
    }

    /// Where the endpoint listens (the port chosen for port 0).
    pub fn address(&self) -> SocketAddr {
        self.exporter.address
    }

    /// Every rank's host, once the world is up (labels `host`).
    #[allow(dead_code)] // for rank 0's loop, which binds the endpoint before the world is up
    pub fn set_hosts(&mut self, hosts: &[String]) {
        self.view.set_hosts(hosts.to_vec());
    }

    /// Every rank's channels' NIC names, once telemetry has gathered them (labels `nic`).
    pub fn set_nics(&mut self, nics: Vec<Vec<String>>) {
        self.view.set_nics(nics);
    }

    /// Folds one telemetry batch in and offers the view to the endpoint (never blocks on a scrape).
    pub fn observe(&mut self, batch: &[CollectorEvent]) {
        let mut sampled = false;
        for event in batch {
            if let CollectorEvent::Sample(sample) = event {
                self.view.ingest(sample);
                sampled = true;
            }
        }
        if sampled {
            self.exporter.offer(self.view.clone());
        }
    }

    /// The run is over, as `results` says (its `status` set to how it ended): the endpoint answers every
    /// request from now on with the final figures ([`RunView::end`]: the channel totals settled from the
    /// results, the run's state), for `linger`, then closes. Blocks for `linger` (saying so on stderr): call
    /// it last, once the tables are printed and the results file records the end.
    pub fn finish(mut self, results: &RunResults, linger: Duration) {
        self.view.end(results, SystemTime::now());
        let address = self.address();
        self.exporter.offer_last(self.view);
        if !linger.is_zero() {
            eprintln!("efatop: the final figures stay at http://{address}/metrics for {} s", linger.as_secs_f64());
            std::thread::sleep(linger);
        }
        // Dropping the exporter closes the endpoint.
    }
}

/// `--pushgateway URL`: a Pushgateway's base URL, `http://HOST[:PORT][/PREFIX]` (plain HTTP: this build
/// has no TLS stack).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pushgateway {
    /// Scheme, authority and path prefix, without a trailing `/`.
    base: String,
    /// `localhost` or a loopback address: reached directly, whatever `HTTP_PROXY` says (as Go's HTTP
    /// client, and so Prometheus's own push client, does); other hosts honour `HTTP_PROXY`/`NO_PROXY`.
    loopback: bool,
}

impl Pushgateway {
    /// Checks `text` as the flag's value parser does; the message is clap's, naming no flag (clap adds it).
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("`{text}` is not a Pushgateway URL: {why}; use http://HOST:PORT, e.g. http://127.0.0.1:9091");
        let uri: ureq::http::Uri = text.parse().map_err(|_| bad("it does not parse as a URL"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => return Err(bad("https is not supported (efatop pushes over plain HTTP)")),
            Some(_) | None => return Err(bad("it does not start with http://")),
        }
        let Some(authority) = uri.authority().filter(|a| !a.host().is_empty()) else { return Err(bad("it names no host")) };
        if authority.as_str().contains('@') {
            return Err(bad("credentials in the URL are not supported"));
        }
        if uri.query().is_some() {
            return Err(bad("it has a query string"));
        }
        let host = authority.host().trim_start_matches('[').trim_end_matches(']');
        let loopback = host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
        Ok(Self { base: format!("http://{authority}{}", uri.path().trim_end_matches('/')), loopback })
    }

    /// Where a run's group is put: `<base>/metrics/job/efatop/instance/<instance>`.
    pub fn group_url(&self, instance: &str) -> String {
        format!("{}/metrics/job/efatop/instance/{}", self.base, path_segment(instance))
    }
}

impl fmt::Display for Pushgateway {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.base)
    }
}

/// A label value as one path segment of the push URL: host names pass as they are; anything else becomes
/// `_` (a Pushgateway route would split on `/`); an empty value is `unknown`.
fn path_segment(value: &str) -> String {
    if value.is_empty() {
        return "unknown".into();
    }
    value.chars().map(|c| if c.is_ascii_alphanumeric() || "-._".contains(c) { c } else { '_' }).collect()
}

/// Pushes a run's final figures to `gateway` in one `PUT /metrics/job/efatop/instance/<rank 0's host>`,
/// which replaces what an earlier run from that host left: every channel's total bytes by rank, channel and
/// NIC, each rank's telemetry drops, the run's state and end time ([`RunView::final_text`], what the
/// endpoint serves once the run is over). The totals are the results file's per-channel bytes, or the
/// telemetry's (`metrics`, when `--prometheus` kept them) where those are more or the results hold none
/// ([`RunView::end`]). Call it once `results.status` says how the run ended. Err is a message for a
/// warning: a failed push never fails the run.
pub fn push(gateway: &Pushgateway, results: &RunResults, metrics: Option<&RunMetrics>) -> Result<(), String> {
    let mut view = metrics.map_or_else(|| RunView::new(results.metadata.experiment.name(), results.metadata.hosts.clone()), |m| m.view.clone());
    view.end(results, SystemTime::now());
    let body = view.final_text().map_err(|err| format!("cannot encode the run's figures: {err}"))?;
    let url = gateway.group_url(view.hosts().first().map_or("", String::as_str));
    let mut config = ureq::Agent::config_builder().timeout_global(Some(PUSH_TIMEOUT)).http_status_as_error(false);
    if gateway.loopback {
        config = config.proxy(None);
    }
    let config = config.build();
    let agent: ureq::Agent = config.into();
    let mut response =
        agent.put(&url).header("Content-Type", TEXT_CONTENT_TYPE).send(body.as_bytes()).map_err(|err| format!("PUT {url}: {err}"))?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let said = response.body_mut().read_to_string().unwrap_or_default();
    Err(format!("PUT {url}: {status} {}", said.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushgateway_urls_are_plain_http_with_a_host() {
        let gateway = Pushgateway::parse("http://127.0.0.1:9091").unwrap();
        assert_eq!(gateway.group_url("node-1"), "http://127.0.0.1:9091/metrics/job/efatop/instance/node-1");
        assert!(gateway.loopback && Pushgateway::parse("http://[::1]:9091").unwrap().loopback);
        assert!(Pushgateway::parse("http://localhost:9091").unwrap().loopback);
        let prefixed = Pushgateway::parse("http://gw.example:80/push/").unwrap();
        assert!(!prefixed.loopback);
        assert_eq!(prefixed.group_url("a b/c"), "http://gw.example:80/push/metrics/job/efatop/instance/a_b_c");
        assert_eq!(prefixed.group_url(""), "http://gw.example:80/push/metrics/job/efatop/instance/unknown");
        for (bad, why) in [
            ("127.0.0.1:9091", "http://"),
            ("https://gw:9091", "https is not supported"),
            ("ftp://gw", "http://"),
            ("http://", "parse"),
            ("http://gw:9091/?x=1", "query"),
            ("http://user:pw@gw:9091", "credentials"),
            ("not a url", "parse"),
        ] {
            let message = Pushgateway::parse(bad).unwrap_err();
            assert!(message.contains(why) && message.contains("http://HOST:PORT"), "{bad}: {message}");
        }
    }
}
