//! A run's figures for Prometheus, kept by rank 0 from the telemetry it already collects
//! ([`RunView`], below): `--prometheus ADDR` serves them at `http://ADDR/metrics` while the run
//! goes and for [`LINGER`] after it ends, so that a last scrape gets the final totals; `--pushgateway URL`
//! pushes the final totals and how the run ended to a Pushgateway ([`push`]), as batch jobs in the
//! Prometheus world do: over http or https (rustls, the built-in public roots or `--pushgateway-ca`'s),
//! with basic auth from `--pushgateway-auth FILE`, the URL or `EFATOP_PUSHGATEWAY_AUTH`.
//!
//! [`RunMetrics`] is a plain object for the loop that owns rank 0's outlets: it folds each telemetry batch
//! in ([`RunMetrics::observe`]) and offers the view to the endpoint's thread by `try_send`, so a scrape
//! never holds up the telemetry; [`RunMetrics::finish`] settles the final figures from the results and
//! lingers. [`push`] needs no endpoint. No thread besides the HTTP server's.
//!
//! The view: A benchmark run as rank 0 sees it (`efatop run ... --prometheus ADDR`), for the same endpoint as the
//! monitor's: every rank's telemetry samples folded into per-channel byte totals, the last interval's
//! rates and latency percentiles, and per-rank figures over the rank's channels; once the run is over
//! ([`RunView::end`]), its final figures and how it ended, which the endpoint keeps serving for a while and
//! a Pushgateway is given ([`RunView::final_text`]).
//!
//! Metrics: `efatop_run_channel_bytes_total` (counter), `efatop_run_channel_bytes_per_second`,
//! `efatop_run_channel_latency_p50_seconds` / `_p99_seconds` (gauges, where the interval timed any
//! operation), and the same per rank as `efatop_run_rank_*`; labels `experiment`, `host`, `rank`, and
//! `channel`, `nic` for channels. `efatop_run_state{state="running"|"complete"|"failed"}` is 1 for the
//! run's state and 0 for the others, and `efatop_run_end_timestamp_seconds` says when it ended. An ended
//! run has no last-interval gauges (no interval is going on): its channel totals, its ranks' telemetry
//! drops and its state remain.
//!
//! The view is sized by the run's world (its ranks, and the channels each has: [`RunView::set_world`]),
//! never by a sample: a sample naming a rank, channel or peer outside it is refused whole and counted in
//! `efatop_run_telemetry_refused_samples_total` (before the world is known, every sample is refused).

use std::fmt;
use std::net::SocketAddr;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use efatop_experiments::ExperimentError;
use efatop_node::prometheus::{counters, encode, gauges, Exporter, Exposition, TEXT_CONTENT_TYPE, to_text_format};
use efatop_proto::results::{RunResults, RunState};
use efatop_proto::telemetry::{IntervalHistogram, RankSample, WorldBounds};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};

use efatop_proto::events::CollectorEvent;

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
    /// an error naming `--prometheus`. `hosts` may be empty until the world is up ([`RunMetrics::set_world`]);
    /// until then every sample is refused.
    pub fn start(address: SocketAddr, experiment: &str, hosts: &[String]) -> Result<Self, ExperimentError> {
        let exporter: Exporter<RunView> =
            Exporter::start(address).map_err(|message| ExperimentError::InvalidInput { flag: "--prometheus", message })?;
        eprintln!("efatop: serving http://{}/metrics", exporter.address);
        Ok(Self { view: RunView::new(experiment, hosts.to_vec(), 0), exporter })
    }

    /// Where the endpoint listens (the port chosen for port 0).
    pub fn address(&self) -> SocketAddr {
        self.exporter.address
    }

    /// The world, once it is up: every rank's host (labels `host`) and the channels each has. Samples are
    /// taken only within it; one naming a rank, channel or peer outside it is refused and counted
    /// (`efatop_run_telemetry_refused_samples_total`).
    pub fn set_world(&mut self, hosts: &[String], channels: usize) {
        self.view.set_world(hosts.to_vec(), channels);
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

/// `--pushgateway URL`: a Pushgateway's base URL, `http[s]://[USER:PASSWORD@]HOST[:PORT][/PREFIX]`. Its
/// [`Display`](fmt::Display) is the URL without the credentials, which are never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Pushgateway {
    /// Scheme, host, port and path prefix, without credentials and without a trailing `/`.
    base: String,
    https: bool,
    /// `localhost` or a loopback address: reached directly, whatever `HTTP_PROXY` says (as Go's HTTP
    /// client, and so Prometheus's own push client, does); other hosts honour `HTTP_PROXY`/`NO_PROXY`.
    loopback: bool,
    /// Basic auth credentials from the URL's userinfo (percent-decoded).
    credentials: Option<Credentials>,
}

impl fmt::Debug for Pushgateway {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pushgateway").field("base", &self.base).field("credentials", &self.credentials).finish_non_exhaustive()
    }
}

impl Pushgateway {
    /// Checks `text` as the flag's value parser does; the message is clap's, naming no flag (clap adds it).
    /// The message never repeats a password the URL holds.
    pub fn parse(text: &str) -> Result<Self, String> {
        let shown = scrub_userinfo(text);
        let bad = |why: &str| format!("`{shown}` is not a Pushgateway URL: {why}; use http://HOST:PORT or https://HOST:PORT, e.g. http://127.0.0.1:9091");
        let uri: ureq::http::Uri = text.parse().map_err(|_| bad("it does not parse as a URL"))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            Some(_) | None => return Err(bad("it does not start with http:// or https://")),
        };
        let Some(authority) = uri.authority().filter(|a| !a.host().is_empty()) else { return Err(bad("it names no host")) };
        if uri.query().is_some() {
            return Err(bad("it has a query string"));
        }
        let (userinfo, host_port) = match authority.as_str().rsplit_once('@') {
            Some((userinfo, host_port)) => (Some(userinfo), host_port),
            None => (None, authority.as_str()),
        };
        let credentials = userinfo
            .map(|userinfo| {
                let decoded = percent_encoding::percent_decode_str(userinfo).decode_utf8().map_err(|_| bad("its credentials are not UTF-8"))?;
                Credentials::parse(&decoded).map_err(|why| bad(&format!("its credentials: {why}")))
            })
            .transpose()?;
        let host = authority.host().trim_start_matches('[').trim_end_matches(']');
        let loopback = host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
        let scheme = if https { "https" } else { "http" };
        Ok(Self { base: format!("{scheme}://{host_port}{}", uri.path().trim_end_matches('/')), https, loopback, credentials })
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

/// `text` with the userinfo of every URL in it (what stands between `://` and the last `@` before the next
/// `/`, `?`, `#` or white space) replaced by `***`: a URL, or a line quoting one, as it may be echoed
/// (clap's refusal of a `--pushgateway` value quotes it).
pub fn scrub_userinfo(text: &str) -> String {
    let mut scrubbed = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        scrubbed.push_str(before);
        let authority_end = after.find(|c: char| "/?#".contains(c) || c.is_whitespace()).unwrap_or(after.len());
        match after[..authority_end].rfind('@') {
            Some(userinfo_end) => {
                scrubbed.push_str("***");
                rest = &after[userinfo_end..];
            }
            None => rest = after,
        }
    }
    scrubbed.push_str(rest);
    scrubbed
}

/// Basic auth credentials: a user and a password. Debug shows the user only.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    user: String,
    password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials").field("user", &self.user).field("password", &"<hidden>").finish()
    }
}

impl Credentials {
    /// `user:password` (the password may hold `:`); the user must not be empty, and neither may hold a
    /// control character (no header could carry it). The reason names neither.
    pub fn parse(text: &str) -> Result<Self, &'static str> {
        let Some((user, password)) = text.split_once(':') else { return Err("not `user:password` (no `:`)") };
        if user.is_empty() {
            return Err("the user is empty");
        }
        if text.chars().any(char::is_control) {
            return Err("it holds a control character");
        }
        Ok(Self { user: user.to_string(), password: password.to_string() })
    }

    /// The `Authorization` header's value.
    fn header(&self) -> String {
        use base64::Engine as _;
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", self.user, self.password)))
    }
}

/// The environment variable that may hold `--pushgateway`'s credentials, `user:password`.
pub const ENV_PUSHGATEWAY_AUTH: &str = "EFATOP_PUSHGATEWAY_AUTH";

/// The most an auth file or a CA file may hold: a crafted path (a device, a huge file) costs no more.
const AUTH_FILE_MAX: u64 = 4 * 1024;
const CA_FILE_MAX: u64 = 1024 * 1024;

/// Where and how rank 0 pushes: the gateway, and where its credentials and trusted CA come from. The files
/// are read when the push is made (and once before the run, by [`PushTarget::check`]), so the password is
/// not held through the run.
#[derive(Clone, Debug)]
pub struct PushTarget {
    gateway: Pushgateway,
    auth_file: Option<std::path::PathBuf>,
    ca_file: Option<std::path::PathBuf>,
}

/// What a push is made with, once read.
struct Resolved {
    credentials: Option<Credentials>,
    roots: Option<Vec<ureq::tls::Certificate<'static>>>,
}

impl PushTarget {
    /// The target the flags name, if `--pushgateway` is given: `--pushgateway-auth FILE`,
    /// `--pushgateway-ca FILE`.
    pub fn new(gateway: Option<&Pushgateway>, auth_file: Option<&std::path::Path>, ca_file: Option<&std::path::Path>) -> Option<Self> {
        gateway.map(|gateway| Self { gateway: gateway.clone(), auth_file: auth_file.map(Into::into), ca_file: ca_file.map(Into::into) })
    }

    /// The flags checked together before anything runs: a file flag without `--pushgateway`, credentials
    /// given twice or over plain HTTP to another host, a CA for plain HTTP, and every file read as the
    /// push will read it. The message names the flag (or the variable) and is one line; it never holds the
    /// password.
    pub fn check(gateway: Option<&Pushgateway>, auth_file: Option<&std::path::Path>, ca_file: Option<&std::path::Path>) -> Result<(), String> {
        match Self::new(gateway, auth_file, ca_file) {
            Some(target) => target.resolve().map(|_| ()),
            None if auth_file.is_some() => Err("--pushgateway-auth needs --pushgateway URL".into()),
            None if ca_file.is_some() => Err("--pushgateway-ca needs --pushgateway https://HOST:PORT".into()),
            None => Ok(()),
        }
    }

    /// Reads the credentials (`--pushgateway-auth FILE`, else the URL's, else `EFATOP_PUSHGATEWAY_AUTH`) and
    /// the CA file.
    fn resolve(&self) -> Result<Resolved, String> {
        let gateway = &self.gateway;
        let from_env = std::env::var(ENV_PUSHGATEWAY_AUTH).ok().filter(|value| !value.is_empty());
        let (credentials, source) = match (&self.auth_file, &gateway.credentials) {
            (Some(_), Some(_)) => return Err("--pushgateway-auth: the --pushgateway URL holds credentials too; give them one way (the file)".into()),
            (Some(path), None) => (Some(read_auth_file(path)?), "--pushgateway-auth"),
            (None, Some(credentials)) => (Some(credentials.clone()), "--pushgateway"),
            (None, None) => match from_env {
                Some(value) => (Some(Credentials::parse(&value).map_err(|why| format!("{ENV_PUSHGATEWAY_AUTH}: {why}; it holds user:password"))?), ENV_PUSHGATEWAY_AUTH),
                None => (None, ""),
            },
        };
        if credentials.is_some() && !gateway.https && !gateway.loopback {
            return Err(format!("{source}: credentials would cross the network in the clear to {gateway}; use https://"));
        }
        let roots = match &self.ca_file {
            Some(_) if !gateway.https => return Err(format!("--pushgateway-ca: {gateway} is plain HTTP; a CA is for https://")),
            Some(path) => Some(read_ca_file(path)?),
            None => None,
        };
        Ok(Resolved { credentials, roots })
    }
}

impl fmt::Display for PushTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.gateway.fmt(f)
    }
}

/// Reads at most `limit` bytes of `path`, refusing a larger file.
fn read_capped(flag: &str, path: &std::path::Path, limit: u64) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let cannot = |err: std::io::Error| format!("{flag} {}: cannot read it: {err}", path.display());
    let file = std::fs::File::open(path).map_err(cannot)?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).map_err(cannot)?;
    if bytes.len() as u64 > limit {
        return Err(format!("{flag} {}: larger than {limit} bytes", path.display()));
    }
    Ok(bytes)
}

/// `--pushgateway-auth FILE`: `user:password` on its first line, in a file only its owner may read.
fn read_auth_file(path: &std::path::Path) -> Result<Credentials, String> {
    use std::os::unix::fs::PermissionsExt as _;
    let flag = "--pushgateway-auth";
    let metadata = std::fs::metadata(path).map_err(|err| format!("{flag} {}: cannot read it: {err}", path.display()))?;
    if !metadata.is_file() {
        return Err(format!("{flag} {}: not a regular file", path.display()));
    }
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!("{flag} {}: others may read it (mode {mode:03o}); chmod 600 it", path.display()));
    }
    let bytes = read_capped(flag, path, AUTH_FILE_MAX)?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{flag} {}: not UTF-8 text", path.display()))?;
    let line = text.lines().next().unwrap_or_default();
    Credentials::parse(line).map_err(|why| format!("{flag} {}: {why}; it holds user:password on one line", path.display()))
}

/// `--pushgateway-ca FILE`: one or more PEM certificates, trusted instead of the built-in roots.
fn read_ca_file(path: &std::path::Path) -> Result<Vec<ureq::tls::Certificate<'static>>, String> {
    let flag = "--pushgateway-ca";
    let bytes = read_capped(flag, path, CA_FILE_MAX)?;
    let mut certificates = Vec::new();
    for item in ureq::tls::parse_pem(&bytes) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(certificate)) => certificates.push(certificate),
            Ok(_) => {}
            Err(err) => return Err(format!("{flag} {}: not PEM: {err}", path.display())),
        }
    }
    if certificates.is_empty() {
        return Err(format!("{flag} {}: no PEM certificate in it", path.display()));
    }
    Ok(certificates)
}

/// A label value as one path segment of the push URL: host names pass as they are; anything else becomes
/// `_` (a Pushgateway route would split on `/`); an empty value is `unknown`.
fn path_segment(value: &str) -> String {
    if value.is_empty() {
        return "unknown".into();
    }
    value.chars().map(|c| if c.is_ascii_alphanumeric() || "-._".contains(c) { c } else { '_' }).collect()
}

/// What of a Pushgateway's answer a warning repeats.
const SAID_MAX: usize = 200;

/// Pushes a run's final figures to `target` in one `PUT /metrics/job/efatop/instance/<rank 0's host>`,
/// which replaces what an earlier run from that host left: every channel's total bytes by rank, channel and
/// NIC, each rank's telemetry drops, the run's state and end time ([`RunView::final_text`], what the
/// endpoint serves once the run is over). The totals are the results file's per-channel bytes, or the
/// telemetry's (`metrics`, when `--prometheus` kept them) where those are more or the results hold none
/// ([`RunView::end`]). Call it once `results.status` says how the run ended. Err is a message for a
/// warning: a failed push never fails the run.
///
/// Over https the server's certificate is checked against the built-in public roots (webpki-roots), or
/// only `--pushgateway-ca`'s; credentials go as HTTP basic auth; no redirect is followed (it would carry
/// them elsewhere).
pub fn push(target: &PushTarget, results: &RunResults, metrics: Option<&RunMetrics>) -> Result<(), String> {
    let resolved = target.resolve()?;
    let gateway = &target.gateway;
    let mut view = metrics.map_or_else(
        || RunView::new(results.metadata.experiment.name(), results.metadata.hosts.clone(), results.metadata.channels),
        |m| m.view.clone(),
    );
    view.end(results, SystemTime::now());
    let body = view.final_text().map_err(|err| format!("cannot encode the run's figures: {err}"))?;
    let url = gateway.group_url(view.hosts().first().map_or("", String::as_str));
    let mut config = ureq::Agent::config_builder().timeout_global(Some(PUSH_TIMEOUT)).http_status_as_error(false).max_redirects(0).https_only(gateway.https);
    if gateway.loopback {
        config = config.proxy(None);
    }
    if gateway.https {
        let roots = resolved.roots.map_or(ureq::tls::RootCerts::WebPki, ureq::tls::RootCerts::from);
        config = config.tls_config(ureq::tls::TlsConfig::builder().provider(ureq::tls::TlsProvider::Rustls).root_certs(roots).build());
    }
    let agent: ureq::Agent = config.build().into();
    let mut request = agent.put(&url).header("Content-Type", TEXT_CONTENT_TYPE);
    if let Some(credentials) = &resolved.credentials {
        request = request.header("Authorization", credentials.header());
    }
    let mut response = request.send(body.as_bytes()).map_err(|err| format!("PUT {url}: {err}"))?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let said = response.body_mut().with_config().limit(SAID_MAX as u64 * 4).read_to_string().unwrap_or_default();
    let said: String = said.trim().chars().filter(|c| !c.is_control()).take(SAID_MAX).collect();
    Err(format!("PUT {url}: {status} {said}"))
}
// ---- The view the endpoint serves and a Pushgateway is given ----

#[derive(Clone, Debug, Default)]
struct ChannelState {
    bytes_total: u64,
    bytes_per_second: f64,
    p50_s: Option<f64>,
    p99_s: Option<f64>,
}

#[derive(Clone, Debug, Default)]
struct RankState {
    channels: Vec<ChannelState>,
    bytes_per_second: f64,
    p50_s: Option<f64>,
    p99_s: Option<f64>,
    drops: u64,
}

/// How the run ended, once it has.
#[derive(Clone, Copy, Debug)]
struct Ended {
    state: RunState,
    unix_s: f64,
}

/// What the endpoint of a run serves; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct RunView {
    experiment: String,
    hosts: Vec<String>,
    /// Every rank's channels' NIC names, once known.
    nics: Vec<Vec<String>>,
    /// One per rank of the world, each with room for the world's channels.
    ranks: Vec<RankState>,
    /// Channels per rank in the world.
    channels: usize,
    /// Samples refused for an index outside the world.
    refused: u64,
    ended: Option<Ended>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    experiment: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    experiment: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RankLabels {
    experiment: String,
    host: String,
    rank: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelLabels {
    experiment: String,
    host: String,
    rank: String,
    channel: String,
    nic: String,
}

impl RunView {
    /// A view of a run of `hosts.len()` ranks (`hosts` by rank) with `channels` channels each; a view that
    /// starts before the world is up has none, until [`RunView::set_world`].
    pub fn new(experiment: &str, hosts: Vec<String>, channels: usize) -> Self {
        let mut view = Self { experiment: experiment.to_string(), ..Self::default() };
        view.set_world(hosts, channels);
        view
    }

    pub fn set_nics(&mut self, nics: Vec<Vec<String>>) {
        self.nics = nics;
    }

    /// The world, once it is up (a view may start before it): every rank's host, by rank, and the channels
    /// each rank has. Samples outside it are refused from then on.
    pub fn set_world(&mut self, hosts: Vec<String>, channels: usize) {
        self.ranks.resize(hosts.len(), RankState::default());
        for rank in &mut self.ranks {
            rank.channels.resize(channels, ChannelState::default());
        }
        self.hosts = hosts;
        self.channels = channels;
    }

    /// The world the view holds: its ranks and channels per rank.
    pub fn world(&self) -> WorldBounds {
        WorldBounds { ranks: self.ranks.len(), channels: self.channels }
    }

    /// Samples refused so far for an index outside the world.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    pub fn experiment(&self) -> &str {
        &self.experiment
    }

    /// Every rank's host, by rank.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// Every channel's bytes so far, by `(rank, channel)`.
    pub fn channel_totals(&self) -> BTreeMap<(usize, usize), u64> {
        self.ranks
            .iter()
            .enumerate()
            .flat_map(|(rank, state)| state.channels.iter().enumerate().map(move |(channel, c)| ((rank, channel), c.bytes_total)))
            .collect()
    }

    /// The run is over, at `at`, as `results` says (its status: complete, else failed; a missing or still
    /// `running` status is taken as failed, since the run is over). Each channel's total is settled from the
    /// results file: the bytes its measured steps record for the channel ([`recorded_channel_bytes`]), which
    /// the ranks agreed on and no dropped telemetry sample can shorten; where that is less than the
    /// telemetry counted (a failed run's unfinished last step moved bytes no measurement holds) or the
    /// results record nothing for the channel, the telemetry's total stays, so the counter never goes back.
    /// NIC labels not known from telemetry come from the results' placements.
    /// Only the world's ranks and channels are settled (a view with no world yet takes the results'); a
    /// figure the results hold for another is left out.
    pub fn end(&mut self, results: &RunResults, at: SystemTime) {
        if self.ranks.is_empty() {
            self.set_world(results.metadata.hosts.clone(), results.metadata.channels);
        }
        for ((rank, channel), bytes) in recorded_channel_bytes(results) {
            let Some(counted) = self.ranks.get_mut(rank).and_then(|state| state.channels.get_mut(channel)) else { continue };
            counted.bytes_total = counted.bytes_total.max(bytes);
        }
        if self.nics.iter().all(Vec::is_empty) {
            self.nics = results.metadata.placements.iter().map(|p| p.nics.clone()).collect();
        }
        if self.hosts.is_empty() {
            self.hosts.clone_from(&results.metadata.hosts);
        }
        let state = match results.status.as_ref().map(|s| s.state) {
            Some(RunState::Complete) => RunState::Complete,
            _ => RunState::Failed,
        };
        let unix_s = at.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        self.ended = Some(Ended { state, unix_s });
    }

    /// What a Pushgateway keeps of an ended run, in the classic text format: each channel's total bytes,
    /// each rank's telemetry drops, the run's state and when it ended (the endpoint's final figures).
    pub fn final_text(&self) -> Result<String, std::fmt::Error> {
        Ok(to_text_format(&self.render()?))
    }

    /// Folds in one interval sample of a rank; false (and counted) when it names a rank, channel or peer
    /// outside the world, which leaves the view as it was.
    pub fn ingest(&mut self, sample: &RankSample) -> bool {
        let world = self.world();
        let Some(state) = self.ranks.get_mut(sample.rank as usize).filter(|_| sample.outside(world).is_none()) else {
            self.refused = self.refused.saturating_add(1);
            return false;
        };
        let mut merged = IntervalHistogram::default();
        let mut bytes = 0_u64;
        for channel in &sample.channels {
            let rates = channel.rates(sample.interval_ns);
            let Some(counted) = state.channels.get_mut(usize::from(channel.channel)) else { continue };
            counted.bytes_total = counted.bytes_total.saturating_add(channel.bytes);
            counted.bytes_per_second = rates.bytes_per_s;
            counted.p50_s = rates.lat_p50_us.map(|us| us / 1e6);
            counted.p99_s = rates.lat_p99_us.map(|us| us / 1e6);
            merged.merge(&channel.latency);
            bytes = bytes.saturating_add(channel.bytes);
        }
        state.bytes_per_second = RankSample::bytes_per_s(bytes, sample.interval_ns);
        state.p50_s = merged.quantile_us(0.50).map(|us| us / 1e6);
        state.p99_s = merged.quantile_us(0.99).map(|us| us / 1e6);
        state.drops = sample.drops;
        true
    }

    fn rank_labels(&self, rank: usize) -> RankLabels {
        RankLabels { experiment: self.experiment.clone(), host: self.hosts.get(rank).cloned().unwrap_or_default(), rank: rank.to_string() }
    }

    fn channel_labels(&self, rank: usize, channel: usize) -> ChannelLabels {
        let RankLabels { experiment, host, rank: rank_text } = self.rank_labels(rank);
        let nic = self.nics.get(rank).and_then(|nics| nics.get(channel)).cloned().unwrap_or_default();
        ChannelLabels { experiment, host, rank: rank_text, channel: channel.to_string(), nic }
    }

    fn channels(&self) -> impl Iterator<Item = (ChannelLabels, &ChannelState)> {
        self.ranks
            .iter()
            .enumerate()
            .flat_map(move |(rank, state)| state.channels.iter().enumerate().map(move |(channel, c)| (self.channel_labels(rank, channel), c)))
    }
}

/// The bytes `results` records per `(rank, channel)`: over its measurements, the application bytes each
/// channel moved in the step (`counters.channels[].app_bytes`: sent plus received, warmup included), which
/// the ranks count with the same probe as their telemetry. Empty for experiments that record no counters.
pub fn recorded_channel_bytes(results: &RunResults) -> BTreeMap<(usize, usize), u64> {
    let mut bytes = BTreeMap::new();
    for channel in results.measurements.iter().filter_map(|m| m.counters.as_ref()).flat_map(|c| &c.channels) {
        let total: &mut u64 = bytes.entry((channel.rank, channel.channel)).or_default();
        *total = total.saturating_add(channel.app_bytes);
    }
    bytes
}

impl Collector for RunView {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let channels: Vec<(ChannelLabels, &ChannelState)> = self.channels().collect();
        counters(
            &mut encoder,
            "efatop_run_channel_bytes",
            "bytes the benchmark moved on the channel, sent plus received (the rank's telemetry; at the run's end, the results file's figure)",
            channels.iter().map(|(labels, channel)| (labels, channel.bytes_total)),
        )?;
        // An ended run has no last interval: its gauges of one are left out.
        let live = self.ended.is_none();
        let series = |pick: &dyn Fn(&ChannelState) -> Option<f64>| -> Vec<(&ChannelLabels, f64)> {
            channels.iter().filter(|_| live).filter_map(|(labels, c)| Some((labels, pick(c)?))).collect()
        };
        gauges(&mut encoder, "efatop_run_channel_bytes_per_second", "the channel's bytes per second over the last telemetry interval", series(&|c| Some(c.bytes_per_second)))?;
        gauges(&mut encoder, "efatop_run_channel_latency_p50_seconds", "median operation latency on the channel over the last interval", series(&|c| c.p50_s))?;
        gauges(&mut encoder, "efatop_run_channel_latency_p99_seconds", "99th percentile operation latency on the channel over the last interval", series(&|c| c.p99_s))?;
        let rank_labels: Vec<RankLabels> = (0..self.ranks.len()).map(|rank| self.rank_labels(rank)).collect();
        let ranks = |pick: &dyn Fn(&RankState) -> Option<f64>| -> Vec<(&RankLabels, f64)> {
            self.ranks.iter().zip(&rank_labels).filter_map(|(state, labels)| Some((labels, pick(state)?))).collect()
        };
        let live_ranks = |pick: &dyn Fn(&RankState) -> Option<f64>| if live { ranks(pick) } else { Vec::new() };
        gauges(&mut encoder, "efatop_run_rank_bytes_per_second", "the rank's bytes per second over its channels, last interval", live_ranks(&|r| Some(r.bytes_per_second)))?;
        gauges(&mut encoder, "efatop_run_rank_latency_p50_seconds", "median operation latency over the rank's channels, last interval", live_ranks(&|r| r.p50_s))?;
        gauges(&mut encoder, "efatop_run_rank_latency_p99_seconds", "99th percentile latency over the rank's channels, last interval", live_ranks(&|r| r.p99_s))?;
        gauges(&mut encoder, "efatop_run_rank_telemetry_drops", "samples the rank dropped because rank 0 did not keep up (so far)", ranks(&|r| Some(r.drops as f64)))?;
        let run = RunLabels { experiment: self.experiment.clone() };
        counters(
            &mut encoder,
            "efatop_run_telemetry_refused_samples",
            "telemetry samples refused because they named a rank, channel or peer outside the run's world",
            [(&run, self.refused)],
        )?;
        let current = self.ended.map_or(RunState::Running, |ended| ended.state);
        let states: Vec<(StateLabels, f64)> = [RunState::Running, RunState::Complete, RunState::Failed]
            .into_iter()
            .map(|state| {
                let labels = StateLabels { experiment: self.experiment.clone(), state: state_name(state).into() };
                (labels, if state == current { 1.0 } else { 0.0 })
            })
            .collect();
        gauges(&mut encoder, "efatop_run_state", "1 for the run's state (running, complete: every size measured, failed: ended early), 0 for the others", states.iter().map(|(l, v)| (l, *v)))?;
        gauges(&mut encoder, "efatop_run_end_timestamp_seconds", "when the run ended, in seconds since the Unix epoch", self.ended.iter().map(|ended| (&run, ended.unix_s)))?;
        Ok(())
    }
}

fn state_name(state: RunState) -> &'static str {
    match state {
        RunState::Running => "running",
        RunState::Complete => "complete",
        RunState::Failed => "failed",
    }
}

impl Exposition for RunView {
    fn render(&self) -> Result<String, std::fmt::Error> {
        encode(vec![Box::new(self.clone())])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushgateway_urls_are_http_or_https_with_a_host() {
        let gateway = Pushgateway::parse("http://127.0.0.1:9091").unwrap();
        assert_eq!(gateway.group_url("node-1"), "http://127.0.0.1:9091/metrics/job/efatop/instance/node-1");
        assert!(gateway.loopback && !gateway.https && Pushgateway::parse("http://[::1]:9091").unwrap().loopback);
        assert!(Pushgateway::parse("http://localhost:9091").unwrap().loopback);
        let prefixed = Pushgateway::parse("http://gw.example:80/push/").unwrap();
        assert!(!prefixed.loopback);
        assert_eq!(prefixed.group_url("a b/c"), "http://gw.example:80/push/metrics/job/efatop/instance/a_b_c");
        assert_eq!(prefixed.group_url(""), "http://gw.example:80/push/metrics/job/efatop/instance/unknown");
        let secure = Pushgateway::parse("https://gw.example:9091").unwrap();
        assert!(secure.https && secure.credentials.is_none());
        assert_eq!(secure.to_string(), "https://gw.example:9091");
        for (bad, why) in [
            ("127.0.0.1:9091", "http:// or https://"),
            ("ftp://gw", "http:// or https://"),
            ("http://", "parse"),
            ("http://gw:9091/?x=1", "query"),
            ("https://:secret@gw:9091", "the user is empty"),
            ("https://justauser@gw:9091", "no `:`"),
            ("not a url", "parse"),
        ] {
            let message = Pushgateway::parse(bad).unwrap_err();
            assert!(message.contains(why) && message.contains("http://HOST:PORT"), "{bad}: {message}");
            assert!(!message.contains("secret"), "{bad}: {message}");
        }
    }

    /// Credentials in the URL are taken (percent-decoded) and never shown: not by Display, not by Debug,
    /// not in the push URL, not in a refusal.
    #[test]
    fn credentials_in_the_url_are_used_and_never_shown() {
        let gateway = Pushgateway::parse("https://efatop:p%40ss:w%3Ard@gw.example:9091/prefix").unwrap();
        assert_eq!(gateway.credentials, Some(Credentials { user: "efatop".into(), password: "p@ss:w:rd".into() }));
        assert_eq!(gateway.to_string(), "https://gw.example:9091/prefix");
        assert_eq!(gateway.group_url("h"), "https://gw.example:9091/prefix/metrics/job/efatop/instance/h");
        let debug = format!("{gateway:?}");
        assert!(debug.contains("efatop") && !debug.contains("p@ss") && !debug.contains("p%40ss"), "{debug}");
        let refused = Pushgateway::parse("https://efatop:hunter2@gw:9091/?q").unwrap_err();
        assert!(refused.contains("`https://***@gw:9091/?q`") && !refused.contains("hunter2"), "{refused}");
        assert_eq!(scrub_userinfo("http://gw:9091/a@b"), "http://gw:9091/a@b", "an @ in the path is no userinfo");
        assert_eq!(
            scrub_userinfo("invalid value 'https://u:p'w@gw:1' for '--pushgateway <URL>': `http://a:b@c/` x"),
            "invalid value 'https://***@gw:1' for '--pushgateway <URL>': `http://***@c/` x"
        );
        // RFC 7617: base64 of user:password.
        let header = Credentials::parse("Aladdin:open sesame").unwrap().header();
        assert_eq!(header, "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        assert_eq!(Credentials::parse("a:b\u{7}c").unwrap_err(), "it holds a control character");
    }

    /// The flags checked before the run: each bad combination or file is one line naming its flag, and
    /// none repeats the password.
    #[test]
    fn push_flags_are_checked_with_one_line_naming_the_flag() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str, mode: u32| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            path
        };
        let auth = file("auth", "efatop:s3cret\n", 0o600);
        let open = file("open", "efatop:s3cret\n", 0o644);
        let colonless = file("colonless", "s3cret\n", 0o600);
        let huge = file("huge", &format!("efatop:{}", "x".repeat(5000)), 0o600);
        let not_pem = file("ca", "efatop:s3cret\n", 0o644);
        let https = Pushgateway::parse("https://gw.example:9091").unwrap();
        let http_remote = Pushgateway::parse("http://gw.example:9091").unwrap();
        let http_local = Pushgateway::parse("http://127.0.0.1:9091").unwrap();
        let in_url = Pushgateway::parse("https://u:s3cret@gw.example:9091").unwrap();
        let missing = dir.path().join("missing");
        assert_eq!(PushTarget::check(Some(&https), Some(&auth), None), Ok(()));
        assert_eq!(PushTarget::check(Some(&http_local), Some(&auth), None), Ok(()), "loopback may take credentials in the clear");
        assert_eq!(PushTarget::check(None, None, None), Ok(()));
        for (gateway, auth_file, ca_file, flag, why) in [
            (None, Some(auth.as_path()), None, "--pushgateway-auth", "needs --pushgateway"),
            (None, None, Some(not_pem.as_path()), "--pushgateway-ca", "needs --pushgateway"),
            (Some(&https), Some(open.as_path()), None, "--pushgateway-auth", "others may read it (mode 644); chmod 600"),
            (Some(&https), Some(colonless.as_path()), None, "--pushgateway-auth", "not `user:password`"),
            (Some(&https), Some(huge.as_path()), None, "--pushgateway-auth", "larger than 4096 bytes"),
            (Some(&https), Some(missing.as_path()), None, "--pushgateway-auth", "cannot read it"),
            (Some(&https), Some(dir.path()), None, "--pushgateway-auth", "not a regular file"),
            (Some(&http_remote), Some(auth.as_path()), None, "--pushgateway-auth", "in the clear"),
            (Some(&in_url), Some(auth.as_path()), None, "--pushgateway-auth", "one way"),
            (Some(&http_local), None, Some(not_pem.as_path()), "--pushgateway-ca", "plain HTTP"),
            (Some(&https), None, Some(not_pem.as_path()), "--pushgateway-ca", "no PEM certificate"),
            (Some(&https), None, Some(missing.as_path()), "--pushgateway-ca", "cannot read it"),
        ] {
            let message = PushTarget::check(gateway, auth_file, ca_file).unwrap_err();
            assert!(message.starts_with(flag) && message.contains(why), "{flag} {why}: {message}");
            assert!(!message.contains("s3cret") && !message.contains('\n'), "{message}");
        }
    }
}

#[cfg(test)]
mod view_tests {
    use super::*;
    use efatop_experiments::probe::{Probe, Sampler};
    use efatop_proto::telemetry::ChannelSample;
    use std::time::Duration;

    #[test]
    fn samples_become_channel_totals_rates_and_percentiles() {
        let probe = Probe::new(2, 2);
        let mut sampler = Sampler::new(1, &probe);
        probe.completed(0, 0, 1_000_000, Some(Duration::from_micros(100)));
        probe.completed(1, 0, 3_000_000, Some(Duration::from_micros(100)));
        let sample = sampler.sample(&probe, Duration::from_millis(100), 2);
        let mut view = RunView::new("write", vec!["a".into(), "b".into()], 2);
        view.set_nics(vec![vec![], vec!["efa0".into(), "efa1".into()]]);
        view.ingest(&sample);
        view.ingest(&RankSample { rank: 1, interval_ns: 100_000_000, channels: vec![ChannelSample { channel: 0, bytes: 500, ..ChannelSample::default() }], ..RankSample::default() });
        let text = view.render().unwrap();
        let labels = r#"experiment="write",host="b",rank="1",channel="0",nic="efa0""#;
        assert!(text.contains(&format!("efatop_run_channel_bytes_total{{{labels}}} 1000500\n")), "{text}");
        assert!(text.contains(&format!("efatop_run_channel_bytes_per_second{{{labels}}} 5000.0\n")), "{text}");
        assert!(text.contains(r#"efatop_run_channel_bytes_total{experiment="write",host="b",rank="1",channel="1",nic="efa1"} 3000000"#), "{text}");
        assert!(text.contains(r#"efatop_run_channel_latency_p50_seconds{experiment="write",host="b",rank="1",channel="1",nic="efa1"}"#), "{text}");
        assert!(!text.contains(&format!("efatop_run_channel_latency_p50_seconds{{{labels}}}")), "an interval that timed nothing has no percentile: {text}");
        assert!(text.contains(r#"efatop_run_rank_telemetry_drops{experiment="write",host="b",rank="1"} 0.0"#), "{text}");
    }

    fn measured(channels: &[(usize, usize, u64)]) -> efatop_proto::results::Measurement {
        use efatop_proto::counters::{ChannelCounters, CounterSource, StepCounters};
        use efatop_proto::results::{LatencySummary, Measurement};
        let channels = channels
            .iter()
            .map(|&(rank, channel, app_bytes)| ChannelCounters {
                rank,
                channel,
                nic: None,
                source: CounterSource::None { why: "shm".into() },
                app_bytes,
                nic_bytes: None,
                counter: None,
                ratio: None,
                deltas: BTreeMap::new(),
            })
            .collect();
        let config = efatop_proto::column::Column::write(efatop_proto::column::Layout::Single, efatop_proto::column::Memory::Host);
        let latency = LatencySummary { mean_us: 1.0, p50_us: 1.0, p99_us: 1.0, max_us: 1.0 };
        Measurement { counters: Some(StepCounters { channels, ..StepCounters::default() }), ..Measurement::plain(config, 4096, 1.0, latency, 1) }
    }

    #[test]
    fn an_ended_run_settles_its_totals_from_the_results_and_says_how_it_ended() {
        use efatop_proto::results::{RankPlacement, RunStatus};
        let mut view = RunView::new("write", vec!["a".into(), "b".into()], 2);
        // Telemetry saw 700 bytes of rank 0's channel 0 (a sample was dropped) and 900 of rank 1's (its
        // unfinished last step counts too); nothing yet of rank 1's channel 1.
        for (rank, bytes) in [(0, 700), (1, 900)] {
            assert!(view.ingest(&RankSample { rank, interval_ns: 1, channels: vec![ChannelSample { channel: 0, bytes, ..ChannelSample::default() }], ..RankSample::default() }));
        }
        let mut results = RunResults {
            measurements: vec![measured(&[(0, 0, 500), (1, 0, 500)]), measured(&[(0, 0, 300), (1, 0, 300), (1, 1, 40)])],
            status: Some(RunStatus { state: RunState::Failed, reason: Some("rank 1 stopped responding".into()) }),
            ..RunResults::default()
        };
        results.metadata.placements = ["a", "b"].iter().enumerate().map(|(rank, host)| RankPlacement { rank, host: (*host).into(), nics: vec!["shm".into(), "shm".into()], ..RankPlacement::default() }).collect();
        assert_eq!(recorded_channel_bytes(&results), BTreeMap::from([((0, 0), 800), ((1, 0), 800), ((1, 1), 40)]));
        let live = view.render().unwrap();
        assert!(live.contains(r#"efatop_run_state{experiment="write",state="running"} 1.0"#), "{live}");
        assert!(live.contains("efatop_run_channel_bytes_per_second{"), "{live}");
        assert!(!live.contains("efatop_run_end_timestamp_seconds{"), "{live}");

        view.end(&results, UNIX_EPOCH + std::time::Duration::from_hours(500_000));
        // Every channel of the world has its series, rank 0's channel 1 that moved nothing too.
        assert_eq!(view.channel_totals(), BTreeMap::from([((0, 0), 800), ((0, 1), 0), ((1, 0), 900), ((1, 1), 40)]), "the larger of the two, per channel");
        let text = view.final_text().unwrap();
        for line in [
            "# TYPE efatop_run_channel_bytes_total counter",
            r#"efatop_run_channel_bytes_total{experiment="write",host="a",rank="0",channel="0",nic="shm"} 800"#,
            r#"efatop_run_channel_bytes_total{experiment="write",host="b",rank="1",channel="1",nic="shm"} 40"#,
            r#"efatop_run_state{experiment="write",state="running"} 0.0"#,
            r#"efatop_run_state{experiment="write",state="failed"} 1.0"#,
            r#"efatop_run_end_timestamp_seconds{experiment="write"} 1800000000.0"#,
            r#"efatop_run_rank_telemetry_drops{experiment="write",host="b",rank="1"} 0.0"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from\n{text}");
        }
        assert!(!text.contains("per_second") && !text.contains("latency"), "no last interval once ended: {text}");
        assert!(!text.contains("# EOF"), "{text}");
        // A run that ended with no status, or still `running`, is over all the same: failed.
        results.status = None;
        view.end(&results, UNIX_EPOCH);
        assert!(view.final_text().unwrap().contains(r#"efatop_run_state{experiment="write",state="failed"} 1.0"#));
        results.status = Some(RunStatus { state: RunState::Complete, reason: None });
        view.end(&results, UNIX_EPOCH);
        assert!(view.final_text().unwrap().contains(r#"efatop_run_state{experiment="write",state="complete"} 1.0"#));
    }

    /// One sample claiming rank `u32::MAX` once made rank 0 size its table by it (hundreds of GB): a
    /// sample naming a rank, channel or peer outside the world is refused whole, counted, and the view
    /// holds what it held.
    #[test]
    fn samples_outside_the_world_are_refused_and_counted_and_grow_nothing() {
        use efatop_proto::telemetry::PeerSample;
        let mut view = RunView::new("write", Vec::new(), 0);
        let one = |rank: u32, channel: u16, peer: u32| RankSample {
            rank,
            interval_ns: 1,
            channels: vec![ChannelSample { channel, bytes: 7, ..ChannelSample::default() }],
            peers: vec![PeerSample { peer, bytes: 1, ..PeerSample::default() }],
            ..RankSample::default()
        };
        assert!(!view.ingest(&one(0, 0, 0)), "no world yet: nothing can be placed");
        view.set_world(vec!["a".into(), "b".into()], 2);
        let before = view.channel_totals();
        assert_eq!(before.len(), 4, "the world's 2 ranks x 2 channels: {before:?}");
        for forged in [one(u32::MAX, 0, 0), one(2, 0, 0), one(1, 2, 0), one(1, u16::MAX, 0), one(0, 0, 2), one(0, 0, u32::MAX)] {
            assert!(!view.ingest(&forged), "{forged:?}");
        }
        assert_eq!(view.refused(), 7);
        assert_eq!(view.channel_totals(), before, "nothing grew, nothing was counted");
        assert_eq!(view.world(), WorldBounds { ranks: 2, channels: 2 });
        assert!(view.ingest(&one(1, 1, 0)));
        assert_eq!(view.channel_totals()[&(1, 1)], 7);
        let text = view.render().unwrap();
        assert!(text.contains(r#"efatop_run_telemetry_refused_samples_total{experiment="write"} 7"#), "{text}");
        assert!(!text.contains("rank=\"2\"") && !text.contains("channel=\"2\""), "{text}");
        // The results cannot grow it either.
        let results = RunResults { measurements: vec![measured(&[(5, 0, 1), (0, 9, 1), (0, 1, 3)])], ..RunResults::default() };
        view.end(&results, UNIX_EPOCH);
        assert_eq!(view.channel_totals().len(), 4);
        assert_eq!(view.channel_totals()[&(0, 1)], 3);
    }
}
