//! The Slurm bootstrap: ranks started by `srun` without MPI (`--mpi=none`, the default) find each other
//! from Slurm's environment alone. Rank `SLURM_PROCID` of `SLURM_NTASKS`; rank 0 runs on the first node of
//! the step (`SLURM_STEP_NODELIST`, else `SLURM_JOB_NODELIST`) and serves the launcher's rendezvous
//! ([`super::local::Rendezvous`]) on its node's address (not every address), on the first free one of
//! [`CANDIDATES`] ports every rank derives alike from `SLURM_JOB_ID` and `SLURM_STEP_ID`
//! (`EFATOP_SLURM_PORT` names one instead); the others resolve that node's name (DNS, else its `NodeAddr`
//! from `scontrol show node`) and try each candidate, retrying while rank 0 starts.
//!
//! Anyone can compute those ports, so no rank trusts a port: every connection proves itself both ways,
//! through MUNGE ([`super::munge`]: the job's user, this job step, a fresh nonce), which also hands each
//! rank the run's secret; with `EFATOP_TOKEN` or `EFATOP_TOKEN_FILE` set, through that token's challenge
//! and response instead. A stranger who squats a candidate port is found out and the next one tried (said
//! in one line naming the port); when every candidate is held by such a party the rank gives up, naming the
//! ports and, where this node's `/proc/net/tcp` shows it, the user listening on each. A stranger who
//! connects is dropped. From there it is the launcher's wire format, sealed under keys bound to the
//! handshake: a stranger who relays a candidate port to rank 0's sees no byte of it in the clear and can
//! change none unseen.

use std::net::{SocketAddr, ToSocketAddrs};
use std::process::Command;
use std::time::{Duration, Instant};

use efatop_experiments::ExperimentError;
use efatop_auth::{self as auth, Secret, Session, Source};
use efatop_proto::handshake::Purpose;
use sha2::Digest;

use super::local::{Admission, LocalBootstrap, Rendezvous};
use super::munge::{JoinFailure, Munge};
use efatop_auth::secret::Keyed;

/// Sets the rendezvous port instead of the one derived from the job and step.
pub const ENV_PORT: &str = "EFATOP_SLURM_PORT";
/// How long ranks wait for each other to appear.
const JOIN_TIMEOUT: Duration = Duration::from_mins(2);
/// Derived ports lie in 10000..32000: below Linux's ephemeral ports (32768 and up by default), so no
/// outgoing connection of the node's holds one by chance.
const PORT_BASE: u16 = 10_000;
const PORT_SPAN: u64 = 22_000;
/// Ports a step may use, tried in order: rank 0 takes the first it can bind, the others try each in turn.
pub const CANDIDATES: usize = 8;

/// One rank of a Slurm job step, as its environment describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlurmStep {
    pub rank: usize,
    pub size: usize,
    /// The node rank 0 runs on.
    pub first_node: String,
    /// This task's node (`SLURMD_NODENAME`), when Slurm says.
    pub this_node: Option<String>,
    /// The rendezvous ports to try, in order.
    pub ports: Vec<u16>,
    /// `job.step`, as MUNGE payloads name it.
    pub job: String,
    pub step: String,
}

/// The rendezvous ports of a job step: the same on every rank, spread by a hash, so neighbouring jobs and
/// steps share none by arithmetic (two steps may still draw one port: the handshake tells them apart).
pub fn ports_for(job: u64, step: u64) -> Vec<u16> {
    (0..CANDIDATES as u64)
        .map(|k| {
            let hash = sha2::Sha256::digest(format!("efatop-slurm {job}.{step} {k}").as_bytes());
            let value = u64::from_le_bytes([hash[0], hash[1], hash[2], hash[3], hash[4], hash[5], hash[6], hash[7]]);
            PORT_BASE + (value % PORT_SPAN) as u16
        })
        .collect()
}

impl SlurmStep {
    /// The step this process is a task of; `None` when it is not one (`SLURM_STEP_ID` and `SLURM_PROCID`
    /// unset: not under srun, or a batch script itself), an error when the environment is malformed.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Option<Result<Self, String>> {
        let step = var("SLURM_STEP_ID")?;
        let rank = var("SLURM_PROCID")?;
        Some(Self::parse(&var, &step, &rank))
    }

    fn parse(var: &impl Fn(&str) -> Option<String>, step: &str, rank: &str) -> Result<Self, String> {
        let number = |name: &str, text: &str| text.trim().parse::<u64>().map_err(|_| format!("{name}={text} is not a number"));
        let rank = number("SLURM_PROCID", rank)? as usize;
        let size_text = var("SLURM_NTASKS").or_else(|| var("SLURM_NPROCS")).ok_or("SLURM_NTASKS is not set")?;
        let size = number("SLURM_NTASKS", &size_text)? as usize;
        if rank >= size {
            return Err(format!("SLURM_PROCID={rank} is not below SLURM_NTASKS={size}"));
        }
        let list = var("SLURM_STEP_NODELIST").or_else(|| var("SLURM_JOB_NODELIST")).ok_or("SLURM_STEP_NODELIST is not set")?;
        let first_node = expand_hostlist(&list)?.into_iter().next().ok_or_else(|| format!("an empty node list `{list}`"))?;
        let job = var("SLURM_JOB_ID").or_else(|| var("SLURM_JOBID")).ok_or("SLURM_JOB_ID is not set")?;
        let ports = if let Some(text) = var(ENV_PORT) {
            vec![text.trim().parse::<u16>().map_err(|_| format!("{ENV_PORT}={text} is not a port"))?]
        } else {
            ports_for(number("SLURM_JOB_ID", &job)?, number("SLURM_STEP_ID", step)?)
        };
        Ok(Self { rank, size, first_node, this_node: var("SLURMD_NODENAME"), ports, job: job.trim().into(), step: step.trim().into() })
    }
}

/// Expands a Slurm host list (`node[01-03,7],gpu5`, what `scontrol show hostnames` prints one per line):
/// comma-separated names, each with at most one bracketed set of numbers and ranges, zero-padding kept.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let bad = |why: &str| format!("`{list}` is not a Slurm host list: {why}");
    let mut names = Vec::new();
    let mut rest = list.trim();
    while !rest.is_empty() {
        // The next name runs to the first comma outside brackets.
        let mut depth = 0;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '[' => depth += 1,
                    ']' => depth -= 1,
                    _ => {}
                }
                c == ',' && depth == 0
            })
            .map_or(rest.len(), |(at, _)| at);
        let item = &rest[..end];
        rest = rest[end..].trim_start_matches(',');
        match item.split_once('[') {
            None if item.contains(']') => return Err(bad("a `]` without `[`")),
            None => names.push(item.to_string()),
            Some((prefix, tail)) => {
                let (ranges, suffix) = tail.split_once(']').ok_or_else(|| bad("a `[` without `]`"))?;
                for range in ranges.split(',') {
                    let (low, high) = range.split_once('-').unwrap_or((range, range));
                    let width = low.len();
                    let (low, high): (u64, u64) = (low.parse().map_err(|_| bad(range))?, high.parse().map_err(|_| bad(range))?);
                    if high < low || high - low > 100_000 {
                        return Err(bad(range));
                    }
                    names.extend((low..=high).map(|n| format!("{prefix}{n:0width$}{suffix}")));
                }
            }
        }
    }
    Ok(names)
}

/// The addresses of `node`: DNS (`/etc/hosts` included), else its `NodeAddr` as slurmctld knows it.
fn addresses(node: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    if let Ok(found) = (node, port).to_socket_addrs() {
        let found: Vec<SocketAddr> = found.collect();
        if !found.is_empty() {
            return Ok(found);
        }
    }
    let output = Command::new("scontrol").args(["show", "node", node]).output().map_err(|e| format!("cannot resolve {node}, nor run scontrol: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let address = text
        .split_whitespace()
        .find_map(|field| field.strip_prefix("NodeAddr="))
        .ok_or_else(|| format!("cannot resolve {node}, and `scontrol show node {node}` has no NodeAddr"))?;
    (address, port).to_socket_addrs().map(Iterator::collect).map_err(|e| format!("cannot resolve {node}'s NodeAddr {address}: {e}"))
}

/// How the step's connections prove themselves: a token the user gave, else MUNGE.
enum Proof {
    Token(Keyed),
    Munge(Munge),
}

impl Proof {
    fn for_step(step: &SlurmStep) -> Result<Self, String> {
        if std::env::var_os(efatop_auth::secret::ENV_TOKEN).is_some() || std::env::var_os(efatop_auth::secret::ENV_TOKEN_FILE).is_some() {
            return efatop_auth::secret::user_token(false).map(Self::Token);
        }
        Ok(Self::Munge(Munge::new(&step.job, &step.step)))
    }

    /// This rank's side of one connection's handshake; the run's secret when it holds, and the keys that
    /// seal what follows.
    fn join(&self, stream: &mut (impl std::io::Read + std::io::Write)) -> Result<(Keyed, Session), Reached> {
        match self {
            Self::Token(keyed) => auth::connect_session(stream, &keyed.secret, Purpose::Rendezvous)
                .map(|session| (keyed.clone(), session))
                .map_err(|err| match err {
                    // Closed before its greeting: a rank 0 whose handshakes are all taken does so.
                    auth::AuthError::NoHello(_) | auth::AuthError::Io(_) => Reached::Nobody(err.to_string()),
                    other => Reached::Stranger(other.to_string()),
                }),
            Self::Munge(munge) => munge.join(stream).map(|(secret, session)| (Keyed { secret, source: Source::Munge }, session)).map_err(|err| match err {
                JoinFailure::NoChallenge(why) => Reached::Nobody(why),
                JoinFailure::Unproven(why) => Reached::Stranger(why),
            }),
        }
    }
}

/// What a rank found on a candidate port that did not let it join.
enum Reached {
    /// No one, yet (nothing listens, or a listener that said nothing): rank 0 may still come.
    Nobody(String),
    /// A party that answered and could not prove the run's secret (a stranger, or rank 0 of another step
    /// that drew the same port): rank 0 is not there.
    Stranger(String),
}

impl std::fmt::Display for Reached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Nobody(why) | Self::Stranger(why) => f.write_str(why),
        }
    }
}

/// The users listening on TCP `port` on this node, as `/proc/net/tcp` and `/proc/net/tcp6` tell (readable
/// by every user on Linux; in this network namespace), by uid.
fn listening_uids(port: u16) -> Vec<u32> {
    use std::io::Read;
    let mut uids = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let mut text = String::new();
        if std::fs::File::open(table)
            .and_then(|file| file.take(64 << 20).read_to_string(&mut text))
            .is_ok()
        {
            uids.extend(listeners_in(&text, port));
        }
    }
    uids.sort_unstable();
    uids.dedup();
    uids
}

/// The uids of the listening sockets (state `0A`) on local `port` in one `/proc/net/tcp` table.
fn listeners_in(table: &str, port: u16) -> impl Iterator<Item = u32> + '_ {
    table.lines().skip(1).filter_map(move |line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (local, state, uid) = (fields.get(1)?, fields.get(3)?, fields.get(7)?);
        let local_port = u16::from_str_radix(local.rsplit_once(':')?.1, 16).ok()?;
        (local_port == port && *state == "0A")
            .then(|| uid.parse().ok())
            .flatten()
    })
}

/// Who holds `port`, as far as this node can tell: "uid 1001 (alice)", this job's user, or unknown.
fn holder(port: u16) -> String {
    let me = nix::unistd::geteuid().as_raw();
    let uids = listening_uids(port);
    if uids.is_empty() {
        return "held by a listener this node cannot see (another node's, or another network namespace's)".to_string();
    }
    let named: Vec<String> = uids
        .iter()
        .map(|&uid| {
            let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
                .ok()
                .flatten()
                .map(|user| user.name);
            let whose = if uid == me { ", this job's user" } else { "" };
            match name {
                Some(name) => format!("uid {uid} ({name}{whose})"),
                None => format!("uid {uid}{whose}"),
            }
        })
        .collect();
    format!("held by {}", named.join(", "))
}

/// Joins the step's ranks: rank 0 serves the rendezvous and joins it, the others connect to it. Returns
/// the bootstrap and the run's secret.
pub fn connect(step: &SlurmStep) -> Result<(LocalBootstrap, Keyed), ExperimentError> {
    let proof = Proof::for_step(step)
        .map_err(|why| ExperimentError::Bootstrap(format!("Slurm bootstrap (rank {} of {}): {why}", step.rank, step.size)))?;
    connect_with(step, &proof)
}

fn connect_with(step: &SlurmStep, proof: &Proof) -> Result<(LocalBootstrap, Keyed), ExperimentError> {
    let failed = |why: String| ExperimentError::Bootstrap(format!("Slurm bootstrap (rank {} of {}): {why}", step.rank, step.size));
    if step.rank == 0 {
        if let Some(here) = step.this_node.as_deref().filter(|here| *here != step.first_node) {
            return Err(failed(format!(
                "rank 0 runs on {here}, not on {}, the step's first node, where the other ranks look for it; \
                 use the default (block) task distribution",
                step.first_node
            )));
        }
        let admission = match proof {
            Proof::Token(keyed) => Admission::Secret(keyed.secret.clone()),
            Proof::Munge(munge) => Admission::Munge(munge.clone(), Secret::generate().map_err(|e| failed(e.to_string()))?),
        };
        let (rendezvous, address) = bind_first_free(step, &admission).map_err(failed)?;
        std::thread::Builder::new()
            .name("efatop-slurm-rendezvous".into())
            .spawn(move || {
                if let Err(err) = rendezvous.serve(JOIN_TIMEOUT) {
                    eprintln!("efatop: error: Slurm rendezvous: {err}");
                }
            })
            .map_err(|e| failed(format!("cannot start the rendezvous: {e}")))?;
        return join_at(address, step, proof).map_err(|err| failed(err.to_string()));
    }
    let started = Instant::now();
    let mut last_error = String::new();
    // The candidates found held by a party that proved nothing, each told once.
    let mut told = vec![false; step.ports.len()];
    while started.elapsed() < JOIN_TIMEOUT {
        // Per candidate, what answered there this pass and could not prove the secret.
        let mut strangers: Vec<Option<String>> = vec![None; step.ports.len()];
        for (at, &port) in step.ports.iter().enumerate() {
            match addresses(&step.first_node, port) {
                Ok(found) => {
                    for address in found {
                        match join_at(address, step, proof) {
                            Ok(joined) => return Ok(joined),
                            Err(Reached::Nobody(err)) => last_error = format!("{address}: {err}"),
                            Err(Reached::Stranger(why)) => {
                                if !told[at] {
                                    told[at] = true;
                                    eprintln!(
                                        "efatop: warning: Slurm bootstrap (rank {}): port {port} on {}: the party there cannot prove the run's secret ({why}); trying the next candidate",
                                        step.rank, step.first_node
                                    );
                                }
                                last_error = format!("{address}: {why}");
                                strangers[at] = Some(why);
                            }
                        }
                    }
                }
                Err(err) => last_error = err,
            }
        }
        // Every candidate is held by a party that proved nothing: rank 0 can be on none of them.
        if strangers.iter().all(Option::is_some) {
            let held: Vec<String> = step
                .ports
                .iter()
                .zip(&strangers)
                .map(|(&port, why)| format!("port {port} is {} ({})", holder(port), why.as_deref().unwrap_or_default()))
                .collect();
            return Err(failed(format!(
                "every candidate port on {} is held by a party that cannot prove the run's secret: {}; set {ENV_PORT} to a free port for the step",
                step.first_node,
                held.join("; ")
            )));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(failed(format!(
        "rank 0 on {} did not answer on ports {:?} within {JOIN_TIMEOUT:?}: {last_error}",
        step.first_node, step.ports
    )))
}

/// Connects to `address`, proves this rank and checks rank 0's proof, then names this rank.
fn join_at(address: SocketAddr, step: &SlurmStep, proof: &Proof) -> Result<(LocalBootstrap, Keyed), Reached> {
    let nobody = |e: std::io::Error| Reached::Nobody(e.to_string());
    let stream = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(2)).map_err(nobody)?;
    // One deadline for the whole exchange: a squatter that trickles its side is left at it.
    let deadline = crate::handshake::deadline();
    let mut within = deadline.on(&stream);
    let (keyed, session) = proof.join(&mut within)?;
    within.done().map_err(nobody)?;
    let bootstrap = LocalBootstrap::join(stream, session, step.rank, step.size, &format!("rank 0's rendezvous at {address}")).map_err(nobody)?;
    Ok((bootstrap, keyed))
}

/// Rank 0 listens on its node's own address (as the other ranks resolve its name), on the first candidate
/// port free there: a port squatted by someone else, or taken by another step, costs one candidate.
fn bind_first_free(step: &SlurmStep, admission: &Admission) -> Result<(Rendezvous, SocketAddr), String> {
    let mut last_error = String::from("no candidate port");
    // Candidates in use already, and by whom this node can tell.
    let mut taken: Vec<String> = Vec::new();
    for &port in &step.ports {
        let found = addresses(&step.first_node, port)?;
        // An address of this node's: one that binds. A name that resolves to no local address (a DNS view
        // that differs inside the node) leaves every address, said so.
        let mut bound = None;
        for address in found.iter().filter(|a| a.is_ipv4()).chain(found.iter().filter(|a| a.is_ipv6())) {
            match Rendezvous::bind_on(*address, step.size, admission.clone()) {
                Ok(rendezvous) => {
                    bound = Some((rendezvous, *address));
                    break;
                }
                Err(err) if err.kind() == std::io::ErrorKind::AddrNotAvailable => {}
                Err(err) if err.kind() == std::io::ErrorKind::AddrInUse => taken.push(format!("port {port} is {}", holder(port))),
                Err(err) => last_error = format!("port {port}: {err}"),
            }
        }
        if bound.is_none() && found.iter().all(|a| !is_local(a)) {
            let any = SocketAddr::from(([0, 0, 0, 0], port));
            eprintln!("efatop: warning: {} resolves to no address of this node; the rendezvous listens on every address", step.first_node);
            match Rendezvous::bind_on(any, step.size, admission.clone()) {
                Ok(rendezvous) => bound = Some((rendezvous, SocketAddr::from(([127, 0, 0, 1], port)))),
                Err(err) => last_error = format!("port {port}: {err}"),
            }
        }
        if let Some(bound) = bound {
            if !taken.is_empty() {
                eprintln!("efatop: warning: Slurm bootstrap (rank 0): {}: the rendezvous listens on port {} instead", taken.join("; "), bound.1.port());
            }
            return Ok(bound);
        }
    }
    if taken.len() == step.ports.len() {
        return Err(format!("every candidate port is in use: {}; set {ENV_PORT} to a free one", taken.join("; ")));
    }
    Err(format!("cannot listen on any of ports {:?} ({last_error}); set {ENV_PORT} to a free one", step.ports))
}

/// Whether `address` belongs to this node (it binds).
fn is_local(address: &SocketAddr) -> bool {
    std::net::TcpListener::bind(SocketAddr::new(address.ip(), 0)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn host_lists_expand_as_scontrol_show_hostnames_does() {
        assert_eq!(expand_hostlist("efatop-node[0-3]").unwrap(), ["efatop-node0", "efatop-node1", "efatop-node2", "efatop-node3"]);
        assert_eq!(expand_hostlist("node[01-03,7],gpu5").unwrap(), ["node01", "node02", "node03", "node7", "gpu5"]);
        assert_eq!(expand_hostlist("a,b").unwrap(), ["a", "b"]);
        assert_eq!(expand_hostlist("p5-[8-9]-x").unwrap(), ["p5-8-x", "p5-9-x"]);
        assert!(expand_hostlist("node[3-1]").is_err());
        assert!(expand_hostlist("node[1-2").is_err());
        assert!(expand_hostlist("node1]").is_err());
    }

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn a_step_is_read_from_slurms_environment() {
        let step = SlurmStep::from_env(env(&[
            ("SLURM_STEP_ID", "1"),
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_JOB_ID", "42"),
            ("SLURM_STEP_NODELIST", "efatop-node[0-3]"),
            ("SLURM_JOB_NODELIST", "efatop-node[0-7]"),
            ("SLURMD_NODENAME", "efatop-node3"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            step,
            SlurmStep {
                rank: 3,
                size: 4,
                first_node: "efatop-node0".into(),
                this_node: Some("efatop-node3".into()),
                ports: ports_for(42, 1),
                job: "42".into(),
                step: "1".into(),
            }
        );
        assert_ne!(ports_for(42, 1)[0], ports_for(42, 2)[0], "steps of a job differ");
        assert_ne!(ports_for(42, 0)[0], ports_for(43, 0)[0], "neighbouring jobs differ");
        // Jobs 625 apart shared a port with the old arithmetic; a hash spreads them.
        assert_ne!(ports_for(42, 0)[0], ports_for(42 + 625, 0)[0]);
        for port in ports_for(7, 3) {
            assert!((10_000..32_000).contains(&port), "{port} lies below the ephemeral ports");
        }
        // A batch script, or no Slurm at all: not a step.
        assert!(SlurmStep::from_env(env(&[("SLURM_JOB_ID", "42"), ("SLURM_PROCID", "0")])).is_none());
        let port = SlurmStep::from_env(env(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_NODELIST", "a,b"),
            ("SLURM_JOB_ID", "42"),
            (ENV_PORT, "31000"),
        ]))
        .unwrap()
        .unwrap()
        .ports;
        assert_eq!(port, [31000]);
        let bad = SlurmStep::from_env(env(&[("SLURM_STEP_ID", "0"), ("SLURM_PROCID", "5"), ("SLURM_NTASKS", "2"), ("SLURM_JOB_NODELIST", "a"), ("SLURM_JOB_ID", "1")]));
        assert!(bad.unwrap().unwrap_err().contains("not below"));
    }

    #[test]
    fn listeners_are_read_from_proc_net_tcp_by_port_and_state() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
            0: 0100007F:2710 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 12345 1 0 100 0 0 10 0\n\
            1: 0100007F:2710 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 12346 1 0 20 4 30 10 -1\n\
            2: 00000000:2711 00000000:0000 0A 00000000:00000000 00:00000000 00000000 65534        0 12347 1 0 100 0 0 10 0\n";
        assert_eq!(
            listeners_in(table, 10_000).collect::<Vec<_>>(),
            [1001],
            "the listener, not the connection on the same port"
        );
        assert_eq!(listeners_in(table, 10_001).collect::<Vec<_>>(), [65534]);
        assert!(listeners_in(table, 10_002).next().is_none());
    }

    #[test]
    fn the_holder_of_a_port_is_named_by_uid() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let said = holder(listener.local_addr().unwrap().port());
        let me = nix::unistd::geteuid().as_raw();
        assert!(
            said.starts_with(&format!("held by uid {me}")) && said.contains("this job's user"),
            "{said}"
        );
    }

    /// Every candidate held by a party that speaks the handshake without the secret: a rank says so once a
    /// port and gives up after one pass (rank 0 can be on none of them), naming each port.
    #[test]
    fn a_rank_gives_up_when_every_candidate_holds_a_stranger() {
        let ports: Vec<u16> = (0..2)
            .map(|_| {
                let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let port = squatter.local_addr().unwrap().port();
                std::thread::spawn(move || {
                    for stream in squatter.incoming() {
                        let Ok(mut stream) = stream else { continue };
                        let (_, hello) =
                            efatop_auth::Challenge::new(Purpose::Rendezvous).unwrap();
                        let _ = std::io::Write::write_all(&mut stream, &hello);
                        let _ = std::io::Read::read(&mut stream, &mut [0u8; 96]);
                    }
                });
                port
            })
            .collect();
        let proof = Keyed {
            secret: Secret::from_token("a-test-token-of-the-slurm-bootstrap").unwrap(),
            source: Source::Environment,
        };
        let step = SlurmStep {
            rank: 1,
            size: 2,
            first_node: "127.0.0.1".into(),
            this_node: None,
            ports: ports.clone(),
            job: "1".into(),
            step: "0".into(),
        };
        let started = Instant::now();
        let Err(err) = connect_with(&step, &Proof::Token(proof)) else {
            panic!("joined a stranger")
        };
        let said = err.to_string();
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?} to give up",
            started.elapsed()
        );
        assert!(said.contains("every candidate port on 127.0.0.1 is held by a party that cannot prove the run's secret"), "{said}");
        for port in ports {
            assert!(
                said.contains(&format!("port {port} is held by uid")),
                "{said}"
            );
        }
    }

    #[test]
    fn four_ranks_join_through_rank_zero_on_localhost_past_a_squatter() {
        // Someone squats the step's first candidate port: rank 0 takes the next, and the ranks, trying the
        // squatter first, find it out (it proves nothing) and move on.
        let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken_port = squatter.local_addr().unwrap().port();
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in squatter.incoming() {
                let Ok(mut stream) = stream else { continue };
                let _ = std::io::Write::write_all(&mut stream, b"EFATOP\x01\x01 a squatter's hello ..............");
            }
        });
        // A token (not MUNGE) proves these ranks; tests/slurm.rs runs the MUNGE exchange under real srun.
        let token = "a-test-token-of-the-slurm-bootstrap";
        let proof = Keyed { secret: Secret::from_token(token).unwrap(), source: Source::Environment };
        let ranks: Vec<_> = (0..4)
            .map(|rank| {
                let proof = proof.clone();
                std::thread::spawn(move || {
                    let step = SlurmStep {
                        rank,
                        size: 4,
                        first_node: "localhost".into(),
                        this_node: None,
                        ports: vec![taken_port, free],
                        job: "1".into(),
                        step: "0".into(),
                    };
                    let (bootstrap, keyed) = connect_with(&step, &Proof::Token(proof)).expect("connect");
                    assert_eq!(keyed.source, Source::Environment);
                    efatop_experiments::Bootstrap::allgather(&bootstrap, format!("r{rank}").as_bytes()).expect("allgather")
                })
            })
            .collect();
        for rank in ranks {
            assert_eq!(rank.join().unwrap(), [b"r0".to_vec(), b"r1".to_vec(), b"r2".to_vec(), b"r3".to_vec()]);
        }
    }
}
