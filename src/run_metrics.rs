//! A run's figures for Prometheus, kept by rank 0 from the telemetry it already collects
//! (`efatop_monitor::run_metrics`): `--prometheus ADDR` serves them at `http://ADDR/metrics` while the run
//! goes and for [`LINGER`] after it ends, so that a last scrape gets the final totals; `--pushgateway URL`
//! pushes the final totals and how the run ended to a Pushgateway ([`push`]), as batch jobs in the
//! Prometheus world do: over http or https (rustls, the built-in public roots or `--pushgateway-ca`'s),
//! with basic auth from `--pushgateway-auth FILE`, the URL or `EFATOP_PUSHGATEWAY_AUTH`.
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
