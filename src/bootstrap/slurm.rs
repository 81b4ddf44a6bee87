//! The Slurm bootstrap: ranks started by `srun` without MPI (`--mpi=none`, the default) find each other
//! from Slurm's environment alone. Rank `SLURM_PROCID` of `SLURM_NTASKS`; rank 0 runs on the first node of
//! the step (`SLURM_STEP_NODELIST`, else `SLURM_JOB_NODELIST`) and serves the launcher's rendezvous
//! ([`super::local::Rendezvous`]) on a port every rank derives alike from `SLURM_JOB_ID` and
//! `SLURM_STEP_ID` (`EFATOP_SLURM_PORT` sets it); the others resolve that node's name (DNS, else its
//! `NodeAddr` from `scontrol show node`) and connect, retrying while rank 0 starts. From there it is the
//! launcher's wire format, so nothing else changes.

use std::net::{SocketAddr, ToSocketAddrs};
use std::process::Command;
use std::time::{Duration, Instant};

use efatop_experiments::ExperimentError;

use super::local::{LocalBootstrap, Rendezvous};

/// Sets the rendezvous port instead of the one derived from the job and step.
pub const ENV_PORT: &str = "EFATOP_SLURM_PORT";
/// How long ranks wait for each other to appear.
const JOIN_TIMEOUT: Duration = Duration::from_mins(2);
/// Derived ports start here and span this many.
const PORT_BASE: u16 = 20_000;
const PORT_SPAN: u64 = 20_000;

/// One rank of a Slurm job step, as its environment describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlurmStep {
    pub rank: usize,
    pub size: usize,
    /// The node rank 0 runs on.
    pub first_node: String,
    /// This task's node (`SLURMD_NODENAME`), when Slurm says.
    pub this_node: Option<String>,
    pub port: u16,
}

/// The rendezvous port of a job step: the same on every rank, different for the steps of a job and for
/// jobs near each other.
pub fn port_for(job: u64, step: u64) -> u16 {
    PORT_BASE + ((job.wrapping_mul(64).wrapping_add(step)) % PORT_SPAN) as u16
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
        let port = if let Some(text) = var(ENV_PORT) {
            text.trim().parse::<u16>().map_err(|_| format!("{ENV_PORT}={text} is not a port"))?
        } else {
            let job = var("SLURM_JOB_ID").or_else(|| var("SLURM_JOBID")).ok_or("SLURM_JOB_ID is not set")?;
            port_for(number("SLURM_JOB_ID", &job)?, number("SLURM_STEP_ID", step)?)
        };
        Ok(Self { rank, size, first_node, this_node: var("SLURMD_NODENAME"), port })
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

/// Joins the step's ranks: rank 0 serves the rendezvous and joins it, the others connect to it.
pub fn connect(step: &SlurmStep) -> Result<LocalBootstrap, ExperimentError> {
    let failed = |why: String| ExperimentError::Bootstrap(format!("Slurm bootstrap (rank {} of {}): {why}", step.rank, step.size));
    if step.rank == 0 {
        if let Some(here) = step.this_node.as_deref().filter(|here| *here != step.first_node) {
            return Err(failed(format!(
                "rank 0 runs on {here}, not on {}, the step's first node, where the other ranks look for it; \
                 use the default (block) task distribution",
                step.first_node
            )));
        }
        let address = SocketAddr::from(([0, 0, 0, 0], step.port));
        let rendezvous = Rendezvous::bind_on(address, step.size)
            .map_err(|e| failed(format!("cannot listen on port {} ({e}); set {ENV_PORT} to another", step.port)))?;
        std::thread::Builder::new()
            .name("efatop-slurm-rendezvous".into())
            .spawn(move || rendezvous.serve(JOIN_TIMEOUT))
            .map_err(|e| failed(format!("cannot start the rendezvous: {e}")))?;
        return LocalBootstrap::connect(&format!("127.0.0.1:{}", step.port), 0, step.size);
    }
    let started = Instant::now();
    let mut last_error = String::new();
    while started.elapsed() < JOIN_TIMEOUT {
        match addresses(&step.first_node, step.port) {
            Ok(found) => {
                for address in found {
                    match LocalBootstrap::connect(&address.to_string(), step.rank, step.size) {
                        Ok(bootstrap) => return Ok(bootstrap),
                        Err(err) => last_error = err.to_string(),
                    }
                }
            }
            Err(err) => last_error = err,
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(failed(format!("rank 0 on {} port {} did not answer within {JOIN_TIMEOUT:?}: {last_error}", step.first_node, step.port)))
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
            SlurmStep { rank: 3, size: 4, first_node: "efatop-node0".into(), this_node: Some("efatop-node3".into()), port: port_for(42, 1) }
        );
        assert_ne!(port_for(42, 1), port_for(42, 2), "steps of a job differ");
        assert_ne!(port_for(42, 0), port_for(43, 0), "neighbouring jobs differ");
        // A batch script, or no Slurm at all: not a step.
        assert!(SlurmStep::from_env(env(&[("SLURM_JOB_ID", "42"), ("SLURM_PROCID", "0")])).is_none());
        let port = SlurmStep::from_env(env(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_NODELIST", "a,b"),
            (ENV_PORT, "31000"),
        ]))
        .unwrap()
        .unwrap()
        .port;
        assert_eq!(port, 31000);
        let bad = SlurmStep::from_env(env(&[("SLURM_STEP_ID", "0"), ("SLURM_PROCID", "5"), ("SLURM_NTASKS", "2"), ("SLURM_JOB_NODELIST", "a")]));
        assert!(bad.unwrap().unwrap_err().contains("not below"));
    }

    #[test]
    fn four_ranks_join_through_rank_zero_on_localhost() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let ranks: Vec<_> = (0..4)
            .map(|rank| {
                std::thread::spawn(move || {
                    let step = SlurmStep { rank, size: 4, first_node: "localhost".into(), this_node: None, port };
                    let bootstrap = connect(&step).expect("connect");
                    efatop_experiments::Bootstrap::allgather(&bootstrap, format!("r{rank}").as_bytes()).expect("allgather")
                })
            })
            .collect();
        for rank in ranks {
            assert_eq!(rank.join().unwrap(), [b"r0".to_vec(), b"r1".to_vec(), b"r2".to_vec(), b"r3".to_vec()]);
        }
    }
}
