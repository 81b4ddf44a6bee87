//! The endpoint's HTTP: a listener on a thread of its own that answers `GET` (and `HEAD`) of `/metrics`
//! and nothing else, with what one request may cost bounded. The request head is parsed by `httparse`;
//! the rest is a fixed response and a close (one request per connection, as a Prometheus scrape makes).
//!
//! Bounds, so that whoever can reach the port (it needs no credentials) cannot make the process hold more:
//! - at most [`MAX_CONNECTIONS`] connections are served at once, each on a short-lived thread; one more is
//!   closed at once, unanswered, and counted ([`Exporter::refused`]);
//! - the request line and headers must fit in [`MAX_HEAD_BYTES`] (at most [`MAX_HEADERS`] headers) and
//!   arrive within [`HEAD_TIMEOUT`] of the connection, however slowly they trickle in; else `431` or `408`;
//! - a request body is never read (at most [`DRAIN_BYTES`] are discarded after the answer, so that the
//!   client sees it rather than a reset); a response that the client does not take within
//!   [`WRITE_TIMEOUT`] is abandoned.
//!
//! Every method but `GET` and `HEAD` gets `405 Method Not Allowed` with `Allow: GET, HEAD`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use efatop_auth::deadline::Deadline;
use efatop_proto::telemetry::NodeSample;

use super::{to_text_format, Exposition, Format};

/// Connections served at once; one more is closed unanswered (and counted).
pub const MAX_CONNECTIONS: usize = 8;
/// The request line and headers together, in bytes.
pub const MAX_HEAD_BYTES: usize = 8 * 1024;
/// Headers in a request.
pub const MAX_HEADERS: usize = 32;
/// How long a connection has to deliver its request line and headers, from its accept.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client has to take the response.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// What is read and thrown away after the answer (a body sent with a refused method, say), within
/// [`DRAIN_TIMEOUT`], before the connection closes.
const DRAIN_BYTES: usize = 64 * 1024;
const DRAIN_TIMEOUT: Duration = Duration::from_millis(200);
/// How long the accepting thread waits before it accepts again after a failed accept (out of file
/// descriptors, say).
const ACCEPT_PAUSE: Duration = Duration::from_millis(20);

/// What the serving threads share: the latest state (swapped in under the lock, rendered outside it, so a
/// slow scrape never holds up an offer) and the counts.
struct Shared<T> {
    latest: Mutex<Option<Arc<T>>>,
    stop: AtomicBool,
    active: AtomicUsize,
    refused: AtomicU64,
}

impl<T> Shared<T> {
    fn latest(&self) -> Option<Arc<T>> {
        self.latest.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn refuse(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }
}

/// The endpoint, serving on its own thread until dropped; it serves the latest state offered.
pub struct Exporter<T: Exposition = Vec<NodeSample>> {
    shared: Arc<Shared<T>>,
    pub address: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

/// Where a connection reaches a listener bound to `address`: itself, or loopback for a wildcard.
fn reachable(address: SocketAddr) -> SocketAddr {
    let ip = match address.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    SocketAddr::new(ip, address.port())
}

impl<T: Exposition> Exporter<T> {
    /// Listens on `address` (port 0 picks one; [`Exporter::address`] says which).
    pub fn start(address: SocketAddr) -> Result<Self, String> {
        let listener = TcpListener::bind(address).map_err(|err| format!("cannot listen on {address}: {err}"))?;
        let bound = listener.local_addr().map_err(|err| format!("cannot listen on {address}: {err}"))?;
        let shared = Arc::new(Shared { latest: Mutex::new(None), stop: AtomicBool::new(false), active: AtomicUsize::new(0), refused: AtomicU64::new(0) });
        let serving = shared.clone();
        let thread = std::thread::Builder::new()
            .name("efatop-prometheus".into())
            .spawn(move || accept(&listener, &serving))
            .map_err(|err| format!("cannot start the endpoint's thread: {err}"))?;
        Ok(Self { shared, address: bound, thread: Some(thread) })
    }

    /// Offers the latest state (every node's snapshots, a run's view): every request from now on is
    /// answered with it. Never waits on a scrape.
    pub fn offer(&self, state: T) {
        *self.shared.latest.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(state));
    }

    /// Hands over the last state: as [`Exporter::offer`] (kept for the callers that say it is the last).
    pub fn offer_last(&self, state: T) {
        self.offer(state);
    }

    /// Connections closed without an answer (over [`MAX_CONNECTIONS`]) and requests refused for their
    /// size, their slowness or their form, so far.
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::Relaxed)
    }
}

impl<T: Exposition> Drop for Exporter<T> {
    fn drop(&mut self) {
        // The accepting thread, woken by a connection of our own, sees the flag and closes the listener;
        // connections being answered finish on their own threads, within their time limits. Were that
        // connection refused (no thread would then wait in accept), the thread is left to the process's end.
        self.shared.stop.store(true, Ordering::SeqCst);
        let woken = TcpStream::connect_timeout(&reachable(self.address), Duration::from_secs(1)).is_ok();
        if let Some(thread) = self.thread.take().filter(|_| woken) {
            let _ = thread.join();
        }
    }
}

/// Takes connections until the endpoint is dropped, each onto a thread of its own while there is a free
/// slot.
fn accept<T: Exposition>(listener: &TcpListener, shared: &Arc<Shared<T>>) {
    loop {
        let accepted = listener.accept();
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        match accepted {
            Ok((stream, _)) => admit(stream, shared),
            // Out of file descriptors for a moment, say: try again shortly.
            Err(_) => std::thread::sleep(ACCEPT_PAUSE),
        }
    }
}

/// Gives back a connection slot however its thread ends.
struct Slot<'a>(&'a AtomicUsize);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn admit<T: Exposition>(stream: TcpStream, shared: &Arc<Shared<T>>) {
    if shared.active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
        shared.active.fetch_sub(1, Ordering::AcqRel);
        shared.refuse();
        return;
    }
    let serving = shared.clone();
    let spawned = std::thread::Builder::new().name("efatop-scrape".into()).spawn(move || {
        let _slot = Slot(&serving.active);
        answer(stream, &serving);
    });
    if spawned.is_err() {
        shared.active.fetch_sub(1, Ordering::AcqRel);
        shared.refuse();
    }
}

/// What the endpoint needs of a request's head.
#[derive(Debug, PartialEq, Eq)]
struct Head {
    method: String,
    path: String,
    /// `HTTP/1.x`: the minor version, which the answer repeats.
    minor: u8,
    accept: Option<String>,
}

/// Why a request's head was not taken.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// Not HTTP/1.x: `400`.
    Malformed,
    /// Longer than [`MAX_HEAD_BYTES`] or with more than [`MAX_HEADERS`] headers: `431`.
    TooLarge,
    /// Not complete within [`HEAD_TIMEOUT`]: `408`.
    TooSlow,
    /// The client went away first: no answer.
    Gone,
}

/// Reads a request's line and headers within [`MAX_HEAD_BYTES`], from a stream bounded by one deadline
/// ([`HEAD_TIMEOUT`] from the connection: `efatop_auth::deadline`).
fn read_head(stream: &mut impl Read) -> Result<Head, Refusal> {
    let mut buffer = vec![0_u8; MAX_HEAD_BYTES];
    let mut filled = 0;
    loop {
        let read = match stream.read(&mut buffer[filled..]) {
            Ok(0) => return Err(Refusal::Gone),
            Ok(read) => read,
            Err(err) if matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => return Err(Refusal::TooSlow),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(Refusal::Gone),
        };
        filled += read;
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buffer[..filled]) {
            Ok(httparse::Status::Complete(_)) => {
                let accept = request
                    .headers
                    .iter()
                    .find(|header| header.name.eq_ignore_ascii_case("accept"))
                    .map(|header| String::from_utf8_lossy(header.value).into_owned());
                return Ok(Head {
                    method: request.method.unwrap_or_default().to_string(),
                    path: request.path.unwrap_or_default().to_string(),
                    minor: request.version.unwrap_or(1),
                    accept,
                });
            }
            Ok(httparse::Status::Partial) if filled == buffer.len() => return Err(Refusal::TooLarge),
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => return Err(Refusal::TooLarge),
            Err(_) => return Err(Refusal::Malformed),
        }
    }
}

/// A response: status, its reason, content type, body, and whether it says which methods are allowed.
struct Response {
    status: u16,
    content_type: &'static str,
    body: String,
    allow: bool,
}

impl Response {
    fn text(status: u16, body: &str) -> Self {
        Self { status, content_type: "text/plain; charset=utf-8", body: body.to_string(), allow: false }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    }
}

/// What the endpoint answers `head` with, given its latest state.
fn respond<T: Exposition>(head: &Head, latest: Option<&T>) -> Response {
    if head.method != "GET" && head.method != "HEAD" {
        return Response { allow: true, ..Response::text(405, "efatop: the endpoint answers GET and HEAD only\n") };
    }
    let path = head.path.split('?').next().unwrap_or_default();
    if path != "/metrics" {
        return Response::text(404, "efatop: metrics are at /metrics\n");
    }
    let Some(state) = latest else { return Response::text(503, "no read yet\n") };
    match state.render() {
        Ok(text) => {
            let format = Format::negotiate(head.accept.as_deref());
            let body = if format == Format::Text { to_text_format(&text) } else { text };
            Response { status: 200, content_type: format.content_type(), body, allow: false }
        }
        Err(err) => Response::text(500, &format!("encoding failed: {err}\n")),
    }
}

/// Serves one connection: one request, one answer, then a close.
fn answer<T: Exposition>(mut stream: TcpStream, shared: &Shared<T>) {
    let head = read_head(&mut Deadline::after(HEAD_TIMEOUT).on(&stream));
    if stream.set_write_timeout(Some(WRITE_TIMEOUT)).is_err() {
        return;
    }
    let (response, minor, head_only) = match head {
        Ok(head) => {
            let response = respond(&head, shared.latest().as_deref());
            (response, head.minor, head.method == "HEAD")
        }
        Err(Refusal::Gone) => return,
        Err(refusal) => {
            shared.refuse();
            let (status, why) = match refusal {
                Refusal::TooLarge => (431, "efatop: the request line and headers exceed 8 KiB or 32 headers\n"),
                Refusal::TooSlow => (408, "efatop: the request did not arrive within 5 s\n"),
                Refusal::Malformed | Refusal::Gone => (400, "efatop: not an HTTP/1.x request\n"),
            };
            (Response::text(status, why), 1, false)
        }
    };
    let mut message = format!(
        "HTTP/1.{minor} {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        response.status,
        reason(response.status),
        response.content_type,
        response.body.len()
    );
    if response.allow {
        message.push_str("Allow: GET, HEAD\r\n");
    }
    message.push_str("\r\n");
    if !head_only {
        message.push_str(&response.body);
    }
    if stream.write_all(message.as_bytes()).and_then(|()| stream.flush()).is_err() {
        return;
    }
    // Closing with unread bytes (a body) would reset the connection, and the client could lose the
    // answer: say no more is coming, and throw away a bounded amount of what it still sends.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut drain = Deadline::after(DRAIN_TIMEOUT).on(&stream);
    let mut drained = 0;
    let mut sink = [0_u8; 4096];
    while drained < DRAIN_BYTES {
        match drain.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(read) => drained += read,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use efatop_auth::deadline::Timed;

    /// Reads handed out one by one; past the script, the time limit runs out.
    struct Script(Vec<Vec<u8>>);

    impl Timed for Script {
        fn set_read_timeout(&self, _limit: Option<Duration>) -> std::io::Result<()> {
            Ok(())
        }

        fn set_write_timeout(&self, _limit: Option<Duration>) -> std::io::Result<()> {
            Ok(())
        }

        fn write_some(&mut self, _buffer: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::Unsupported.into())
        }

        fn read_some(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            let chunk = self.0.remove(0);
            let taken = chunk.len().min(buffer.len());
            buffer[..taken].copy_from_slice(&chunk[..taken]);
            if taken < chunk.len() {
                self.0.insert(0, chunk[taken..].to_vec());
            }
            Ok(taken)
        }
    }

    fn head_of(chunks: &[&[u8]]) -> Result<Head, Refusal> {
        read_head(&mut Deadline::after(Duration::from_mins(1)).on(Script(chunks.iter().map(|c| c.to_vec()).collect())))
    }

    #[test]
    fn a_head_in_pieces_is_read_and_bad_ones_are_refused() {
        let head = head_of(&[b"GET /metrics?x=1 HT", b"TP/1.0\r\nAccept: text/plain\r\n", b"\r\n"]).unwrap();
        assert_eq!(head, Head { method: "GET".into(), path: "/metrics?x=1".into(), minor: 0, accept: Some("text/plain".into()) });
        assert_eq!(head_of(&[b"GET /metrics HTTP/1.1\r\n"]), Err(Refusal::TooSlow), "headers never ended");
        assert_eq!(head_of(&[b"\x16\x03\x01 not http\r\n\r\n"]), Err(Refusal::Malformed));
        let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_HEAD_BYTES));
        assert_eq!(head_of(&[long.as_bytes()]), Err(Refusal::TooLarge));
        let many = format!("GET / HTTP/1.1\r\n{}\r\n", "X: y\r\n".repeat(MAX_HEADERS + 1));
        assert_eq!(head_of(&[many.as_bytes()]), Err(Refusal::TooLarge));
        assert_eq!(head_of(&[b"GET / HTTP/1.1\r\n", b""]), Err(Refusal::Gone));
        let expired = read_head(&mut Deadline::after(Duration::ZERO).on(Script(vec![b"GET".to_vec(); 100])));
        assert_eq!(expired, Err(Refusal::TooSlow), "past the deadline whatever still trickles in");
    }

    #[test]
    fn only_get_and_head_of_metrics_are_answered() {
        let state: Vec<NodeSample> = Vec::new();
        let head = |method: &str, path: &str| Head { method: method.into(), path: path.into(), minor: 1, accept: None };
        for method in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "get"] {
            let response = respond(&head(method, "/metrics"), Some(&state));
            assert_eq!((response.status, response.allow), (405, true), "{method}");
        }
        assert_eq!(respond(&head("GET", "/metrics"), Some(&state)).status, 200);
        assert_eq!(respond(&head("HEAD", "/metrics?a=b"), Some(&state)).status, 200);
        assert_eq!(respond::<Vec<NodeSample>>(&head("GET", "/metrics"), None).status, 503);
        assert_eq!(respond(&head("GET", "/"), Some(&state)).status, 404);
    }
}
