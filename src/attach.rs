//! `efatop attach HOST:PORT`: watch a run that rank 0 serves (`--serve`), in the same dashboard or as the
//! same JSON lines as the run's own. The viewer says its handshake line, checks rank 0's, then only reads.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::Duration;

use efatop_auth::seal::SealedReader;
use efatop_proto::stream::{self, Hello, StreamMessage};
use efatop_runtime::handshake::{Attempt, Deadline, retry};
use efatop_ui::state::SourceLine;

use crate::cli::AttachArgs;
use efatop_proto::events::ConsumerEvent;
use crate::term;
use efatop_ui::tui::{Polled, Source};
use crate::viewer::{Fed, JsonViewer};

/// What a viewer reads: the served stream, opened from its sealed records.
type Served = BufReader<SealedReader<TcpStream>>;

/// How long connecting and the peer's handshake line may take.
const CONNECT_WAIT: Duration = Duration::from_secs(5);

const KEYS: [(&str, &str); 1] = [("q", "viewer: leave (the run goes on)")];

pub fn attach(args: &AttachArgs) -> i32 {
    let reader = match connect(&args.address) {
        Ok(reader) => reader,
        Err(line) => {
            eprintln!("efatop: error: attach: {line}");
            return 2;
        }
    };
    if args.json || !term::stdout_is_terminal() {
        json(reader, &args.address)
    } else {
        dashboard(reader, &args.address)
    }
}

/// Connects and shakes hands: one line each way, naming efatop's stream and its version.
fn connect(address: &str) -> Result<Served, String> {
    let targets: Vec<_> = address
        .to_socket_addrs()
        .map_err(|err| format!("`{address}` is not an address to attach to ({err}); use HOST:PORT, as the run's --serve printed it"))?
        .collect();
    let not_efatop = |what: &str| format!("{address} is not an efatop run ({what}); attach to the address the run's --serve printed");
    // The viewer proves the user's token first; the run proves it back.
    let token = efatop_auth::secret::user_token(false).map_err(|err| format!("the viewer's token: {err}"))?;
    // A run that drops this connection before it could prove anything (strangers filling its budget of
    // unproven connections) resets or closes it: try again, backing off, for a while.
    let proven = retry(RETRY_FOR, || {
        let mut stream = reach(address, &targets).map_err(|line| Attempt::Final(Proven::Unreachable(line)))?;
        match prove_token(&mut stream, &token) {
            Ok(session) => Ok((stream, session)),
            Err(Proven::Busy) => Err(Attempt::Again(Proven::Busy)),
            Err(other) => Err(Attempt::Final(other)),
        }
    });
    let (stream, session) = match proven {
        Ok(proven) => proven,
        Err(Proven::Busy) => {
            return Err(not_efatop(&format!(
                "it closed the connection without a greeting, or dropped it, on every try for {} s",
                RETRY_FOR.as_secs()
            )));
        }
        Err(Proven::Unreachable(line)) => return Err(line),
        Err(Proven::NotEfatop(what)) => return Err(not_efatop(&what)),
        Err(Proven::Refused(err)) => {
            return Err(format!(
                "{address} did not accept this viewer's token ({}; {err}): the run's rank 0 must hold the same one \
                 (EFATOP_TOKEN, or the token file EFATOP_TOKEN_FILE names, else ~/.config/efatop/token)",
                token.source
            ));
        }
    };
    stream.set_write_timeout(None).map_err(|err| err.to_string())?;
    // From here both ways are sealed under the keys of that handshake.
    let (reader, mut writer) = session.wrap(stream.try_clone().map_err(|err| err.to_string())?, stream, &format!("the run at {address}"));
    writer.write_all(stream::hello().as_bytes()).map_err(|err| not_efatop(&format!("it refused the handshake: {err}")))?;
    drop(writer);
    reader.get_ref().set_read_timeout(Some(CONNECT_WAIT)).map_err(|err| err.to_string())?;
    let mut reader = BufReader::new(reader);
    let mut line = Vec::new();
    let read = std::io::Read::take(&mut reader, stream::MAX_HELLO as u64).read_until(b'\n', &mut line);
    match read {
        Err(err) if matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            return Err(not_efatop(&format!("it said nothing within {} s", CONNECT_WAIT.as_secs())));
        }
        Err(err) => return Err(not_efatop(&format!("the connection failed: {err}"))),
        Ok(0) => return Err(not_efatop("it closed the connection without a greeting")),
        Ok(_) => {}
    }
    match stream::parse_hello(&line, stream::MAGIC) {
        Hello::Efatop { version } if version == stream::VERSION => {}
        Hello::Efatop { version } => {
            return Err(format!(
                "{address} serves efatop's stream version {version}; this efatop reads version {}: attach with the efatop the run uses",
                stream::VERSION
            ));
        }
        Hello::Foreign(text) => return Err(not_efatop(&format!("it answered `{text}`"))),
    }
    reader.get_ref().get_ref().set_read_timeout(None).map_err(|err| err.to_string())?;
    Ok(reader)
}

/// How a token's handshake failed: the peer closed before its greeting or reset the connection (a run
/// whose budget of unproven connections is full does), is not efatop, or refused (or did not prove) the
/// token; or nothing could be reached.
enum Proven {
    Busy,
    Unreachable(String),
    NotEfatop(String),
    Refused(String),
}

/// How long attach keeps trying a run that drops it before it could prove its token.
const RETRY_FOR: Duration = Duration::from_secs(30);

/// The first of `targets` that accepts a connection.
fn reach(address: &str, targets: &[std::net::SocketAddr]) -> Result<TcpStream, String> {
    let mut refused = None;
    for target in targets {
        match TcpStream::connect_timeout(target, CONNECT_WAIT) {
            Ok(connected) => return Ok(connected),
            Err(err) => refused = Some(err),
        }
    }
    // A run serves only while it runs: nothing there may as well be a run that has ended.
    let after = "the run may have ended (what it recorded with --record FILE plays with `efatop replay FILE`), or not started yet";
    Err(match refused {
        Some(err) if err.kind() == std::io::ErrorKind::ConnectionRefused => format!("nothing listens at {address}: {after}"),
        Some(err) => format!("cannot reach {address} ({err}): {after}"),
        None => format!("`{address}` names no address to attach to"),
    })
}

/// The viewer's side of the token's handshake ([`efatop_auth::connect_session`]), telling a peer that is no
/// efatop run (its first bytes are not the handshake's), one that closed before its greeting, and one that
/// refused the token apart.
fn prove_token(stream: &mut TcpStream, token: &efatop_auth::secret::Keyed) -> Result<efatop_auth::Session, Proven> {
    use efatop_auth::{self as auth, AuthError};
    use efatop_proto::handshake::Purpose;
    use std::io::ErrorKind;
    // One deadline for the whole exchange, as the run gives its side.
    let deadline = Deadline::after(CONNECT_WAIT);
    auth::connect_session(&mut deadline.on(&*stream), &token.secret, Purpose::Viewer).map_err(|err| match err {
        AuthError::NoHello(io) => match io.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => Proven::NotEfatop(format!("it said nothing within {} s", CONNECT_WAIT.as_secs())),
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset => Proven::Busy,
            _ => Proven::NotEfatop(format!("the connection failed: {io}")),
        },
        // Reset after our answer, before the run's proof: dropped to make room, not refused.
        AuthError::Refused(io) | AuthError::Io(io) if matches!(io.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => Proven::Busy,
        AuthError::NotEfatop => Proven::NotEfatop("its greeting is not efatop's".into()),
        AuthError::WrongPurpose(_) => Proven::NotEfatop(err.to_string()),
        other => Proven::Refused(other.to_string()),
    })
}

/// What the connection said, message by message, then how it ended (`None`: it closed cleanly).
enum Incoming {
    Message(StreamMessage),
    End(Option<String>),
}

fn read_all(mut reader: Served, mut each: impl FnMut(Incoming) -> bool) {
    loop {
        let incoming = match stream::read_message(&mut reader) {
            Ok(Some(message)) => Incoming::Message(message),
            Ok(None) => Incoming::End(None),
            Err(err) => Incoming::End(Some(err.to_string())),
        };
        let end = matches!(incoming, Incoming::End(_));
        if !each(incoming) || end {
            return;
        }
    }
}

fn json(reader: Served, address: &str) -> i32 {
    let mut viewer = JsonViewer::default();
    let mut dropped = 0;
    let mut cut = None;
    read_all(reader, |incoming| match incoming {
        Incoming::Message(StreamMessage::Event { t_us, event }) => {
            viewer.event(event, Duration::from_micros(t_us));
            viewer.tally.ended.is_none()
        }
        Incoming::Message(StreamMessage::Dropped { total }) => {
            dropped = total;
            true
        }
        Incoming::End(reason) => {
            cut = Some(reason.unwrap_or_else(|| "the connection closed".into()));
            false
        }
    });
    if dropped > 0 {
        eprintln!(
            "efatop: warning: attach: this viewer fell behind and lost {} (every result arrived)",
            efatop_proto::words::plural(dropped, "telemetry batch")
        );
    }
    if viewer.tally.ended.is_none() {
        eprintln!("efatop: error: attach: the stream from {address} ended before the run did ({})", cut.unwrap_or_default());
        return 1;
    }
    viewer.tally.exit_code()
}

/// A served run's stream as a dashboard's feed: the run's clock runs on from its last event.
struct Attached {
    address: String,
    incoming: Receiver<Incoming>,
    /// The run's time at the last event, and the session's when it arrived here.
    last: (Duration, Duration),
    dropped: u64,
    /// The run has said how it ended (or the stream's end has said it for the run).
    over: bool,
    /// The clock and the source line as last told.
    told: (Option<Duration>, Option<SourceLine>),
}

impl Attached {
    fn new(address: &str, incoming: Receiver<Incoming>) -> Self {
        Self { address: address.to_string(), incoming, last: (Duration::ZERO, Duration::ZERO), dropped: 0, over: false, told: (None, None) }
    }

    fn source(&self) -> SourceLine {
        match self.dropped {
            0 => SourceLine { text: format!("attached to {}", self.address), alert: false },
            dropped => SourceLine {
                text: format!("attached to {}: {} lost here", self.address, efatop_proto::words::plural(dropped, "batch")),
                alert: true,
            },
        }
    }
}

impl Source for Attached {
    type Event = Fed;

    fn poll(&mut self, now: Duration) -> Polled<Fed> {
        loop {
            match self.incoming.try_recv() {
                Ok(Incoming::Message(StreamMessage::Event { t_us, event })) => {
                    let at = Duration::from_micros(t_us);
                    self.last = (at, now);
                    self.over |= matches!(event, ConsumerEvent::Finished { .. });
                    return Polled::Ready(Fed::Event(at, event));
                }
                Ok(Incoming::Message(StreamMessage::Dropped { total })) => self.dropped = total,
                Ok(Incoming::End(reason)) => {
                    if !std::mem::replace(&mut self.over, true) {
                        let why = reason.unwrap_or_else(|| "the connection closed".into());
                        let error = format!("the stream from {} ended before the run did ({why})", self.address);
                        return Polled::Ready(Fed::Event(self.last.0, ConsumerEvent::Finished { error: Some(error) }));
                    }
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let clock = if self.over { self.last.0 } else { self.last.0 + now.saturating_sub(self.last.1) };
        if self.told.0 != Some(clock) {
            self.told.0 = Some(clock);
            return Polled::Ready(Fed::Clock(clock));
        }
        let source = self.source();
        if self.told.1.as_ref() != Some(&source) {
            self.told.1 = Some(source.clone());
            return Polled::Ready(Fed::Source(source));
        }
        Polled::Pending
    }
}

fn dashboard(reader: Served, address: &str) -> i32 {
    let (send, incoming) = mpsc::channel();
    let spawned = std::thread::Builder::new().name("efatop-attach".into()).spawn(move || read_all(reader, |incoming| send.send(incoming).is_ok()));
    if let Err(err) = spawned {
        eprintln!("efatop: error: attach: {err}");
        return 1;
    }
    crate::viewer::show(&mut Attached::new(address, incoming), &KEYS, "attach", 1)
}

#[cfg(test)]
mod tests;
