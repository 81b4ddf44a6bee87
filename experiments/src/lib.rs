//! efatop's benchmarks. Each experiment is one module that runs the same code on every rank of a
//! [`World`]; rank 0 returns the [`Measurement`]s (each made by `Measurement::verified` from the step's
//! pairs and latency histogram, BusBW over [`World::link_gbps_of`] the channels it used), every rank
//! verifies what it received. [`payload`] is the memory they move, and stages GPU memory through host
//! memory in one place ([`payload::Payload::stage`]). [`probe`] is what their hot paths count into (and the
//! sampler that turns it into telemetry samples).

#![forbid(unsafe_code)]

pub mod alltoall;
pub mod counters;
pub mod ipc;
pub mod pattern;
pub mod payload;
pub mod probe;
pub mod proxy;
pub mod queue;
pub mod reconcile;
pub mod sendrecv;
pub mod sweep;
pub mod world;
pub mod write;

pub use world::{Bootstrap, ChannelCount, ProviderChoice, World, WorldOptions};

use efatop_fabric::FabricError;
use efatop_proto::column::Column;
use efatop_proto::results::{self, Measurement};
use efatop_proto::sizes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    #[error(transparent)]
    Fabric(#[from] FabricError),
    /// The machine or provider cannot do what was asked (exit code 2).
    #[error("{0}")]
    Unsupported(String),
    /// A flag's value cannot work with this world (exit code 2).
    #[error("{flag}: {message}")]
    InvalidInput { flag: &'static str, message: String },
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    #[error("data verification failed: rank {receiver} received from rank {sender} ({config}, size {size}): {detail}")]
    Verification {
        receiver: usize,
        sender: usize,
        config: String,
        size: String,
        detail: String,
    },
    /// Nothing moved for the operation timeout (`--timeout`); says what this rank waited for, and from whom.
    #[error("no progress for {:.0} s (--timeout): {waiting}", timeout.as_secs_f64())]
    Stalled { waiting: String, timeout: std::time::Duration },
    /// This rank's failure has been shared with rank 0, which reports it for the run.
    #[error("(reported by rank 0)")]
    Reported { exit_code: i32 },
    /// The user asked rank 0 to stop; every rank ends after the round in progress.
    #[error("stopped at the user's request; the sizes finished so far are kept")]
    Stopped,
    /// Another rank failed; its own message says why.
    #[error("rank {rank} ({host}) failed: {message}")]
    PeerFailed {
        rank: usize,
        host: String,
        message: String,
        exit_code: i32,
    },
}

impl ExperimentError {
    /// The process exit code: 2 for input the run cannot honour, 1 for failures while running.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Unsupported(_) | Self::InvalidInput { .. } => 2,
            Self::Reported { exit_code } | Self::PeerFailed { exit_code, .. } => *exit_code,
            Self::Stopped => 130,
            _ => 1,
        }
    }

    /// Whether a rank ending with this error ends because of a failure rank 0 learns of another way: another
    /// rank's (an agreement round's word, the launcher's rendezvous closing), rank 0's own stop or abort, or
    /// this rank's own failure already shared in an agreement round. Such a rank says it is leaving before
    /// its telemetry closes (`Phase::Leaving`), so that rank 0 does not name it as the rank that died.
    pub fn follows_elsewhere(&self) -> bool {
        matches!(
            self,
            Self::Reported { .. } | Self::Stopped | Self::PeerFailed { .. } | Self::Bootstrap(_) | Self::Fabric(FabricError::Abandoned(_))
        )
    }
}

/// A CUDA failure as the experiments report it: the GPU memory the flags asked for cannot be had.
pub(crate) fn cuda_error(err: efatop_cuda::CudaError) -> ExperimentError {
    match err {
        efatop_cuda::CudaError::NoDevice(why) => {
            ExperimentError::Unsupported(format!("--memory device: no CUDA device ({why})"))
        }
        other => ExperimentError::Unsupported(format!("--memory device: {other}")),
    }
}

/// The steps every experiment takes, one a message size, and the iterations of each (not the fleet
/// `sweep`, which is an experiment of its own).
#[derive(Clone, Debug)]
pub struct StepOptions {
    pub sizes: Vec<u64>,
    pub warmup: u64,
    pub iters: u64,
    /// Iterations kept in flight per pair (write); 1 times each operation alone, as the seed tables do.
    pub window: usize,
    /// Host and/or GPU memory; each gets its own columns.
    pub memories: Vec<payload::MemoryChoice>,
    /// Testing aid: the sender flips this byte (modulo the size) after writing its pattern, so the
    /// receiver's verification must catch it.
    pub corrupt_byte: Option<u64>,
    /// Measuring what telemetry costs (`--telemetry-ab`): timed iterations in blocks of this many, the
    /// samplers paused in every other block (see [`efatop_proto::results::AbArm`]); write and alltoall.
    pub telemetry_ab: Option<u64>,
}

/// What an experiment tells the rest of efatop as it goes (rank 0 only: the dashboard, the JSON lines,
/// the results file), and how it learns that the user wants to stop.
pub trait Observer {
    /// The experiment is set up: its columns in order, and the memory it moves (which may be
    /// "device (staged ...)" when the provider could not register GPU memory).
    fn begin(&mut self, _columns: &[Column], _memory: &str) {}
    /// A (configuration, size) step starts.
    fn step(&mut self, _config: &Column, _size: u64) {}
    /// A step finished with this measurement.
    fn measured(&mut self, _measurement: &Measurement) {}
    /// All-to-all: every pair's bandwidth at a step, told just before the step's measurement.
    fn pair_matrix(&mut self, _matrix: &results::PairMatrix) {}
    /// Sweep: every round so far (told after each), then once more with the verdict.
    fn sweep(&mut self, _sweep: &efatop_proto::sweep::SweepResults) {}
    /// A line for the run's log while a step runs (the proxy's queue, once a second).
    fn note(&mut self, _line: &str) {}
    /// Checked by rank 0 between rounds; every rank then stops after the round in progress.
    fn stop_requested(&self) -> bool {
        false
    }
}

/// An observer that wants nothing (ranks other than 0).
pub struct Unobserved;

impl Observer for Unobserved {}

/// Every rank's `value`, in rank order, through `allgather`: the one encoding ranks use for what they tell
/// each other (serde's JSON, one record per rank), whatever the value.
pub fn gather_with<T: Serialize + DeserializeOwned>(
    allgather: impl FnOnce(&[u8]) -> Result<Vec<Vec<u8>>, ExperimentError>,
    value: &T,
    what: &str,
) -> Result<Vec<T>, ExperimentError> {
    let mine = serde_json::to_vec(value).map_err(|e| ExperimentError::Bootstrap(format!("{what}: {e}")))?;
    allgather(&mine)?
        .iter()
        .enumerate()
        .map(|(rank, record)| serde_json::from_slice(record).map_err(|e| ExperimentError::Bootstrap(format!("{what} from rank {rank}: {e}"))))
        .collect()
}

/// [`gather_with`] over the bootstrap, before the world exists ([`World::gather`] once it does).
pub fn gather<T: Serialize + DeserializeOwned>(bootstrap: &dyn Bootstrap, value: &T, what: &str) -> Result<Vec<T>, ExperimentError> {
    gather_with(|mine| bootstrap.allgather(mine), value, what)
}

/// What a rank shares after a round: fine, failed (with its exit code and message), or, from rank 0, that
/// the user asked every rank to stop.
#[derive(Serialize, Deserialize)]
enum RoundStatus {
    Fine,
    Stop,
    Failed { exit_code: i32, message: String },
}

/// A wait that made no progress for the operation timeout: the run has failed for this rank, whose fabric
/// objects are left open from now on (operations still in flight are abandoned, not waited for; see
/// `efatop_fabric::ending`).
pub(crate) fn stalled(waiting: String, timeout: std::time::Duration) -> ExperimentError {
    efatop_fabric::ending::abandon();
    ExperimentError::Stalled { waiting, timeout }
}

/// A fabric error met on an operation towards `peer`: a timeout becomes a stall that names the peer (that
/// rank, or the way to it, is what stopped), anything else stays as it is.
pub(crate) fn towards(world: &World<'_>, peer: usize, err: FabricError) -> ExperimentError {
    match err {
        FabricError::Timeout { what, channel, .. } => stalled(
            format!(
                "rank {}'s writes to rank {peer} ({}) on channel {channel} never completed ({what})",
                world.rank,
                world.hosts.get(peer).map_or("?", String::as_str)
            ),
            world.op_timeout,
        ),
        err => ExperimentError::Fabric(err),
    }
}

/// After a round, every rank shares whether it is fine; any failure ends the run on every rank, with the
/// failing rank's own message. Rank 0 also passes on a stop request this way.
pub(crate) fn agree(
    world: &World<'_>,
    outcome: Result<(), ExperimentError>,
    observer: &dyn Observer,
) -> Result<(), ExperimentError> {
    agree_on(world, outcome, observer)
}

/// [`agree`] before the world exists (during its setup), for any value; `stop` passes rank 0's stop
/// request on.
pub(crate) fn agree_with<T>(
    bootstrap: &dyn Bootstrap,
    rank: usize,
    hosts: &[String],
    outcome: Result<T, ExperimentError>,
    stop: bool,
) -> Result<T, ExperimentError> {
    agree_gathering(|text| bootstrap.allgather(text), rank, hosts, outcome, stop)
}

/// [`agree_with`] over any allgather (the world's keeps its channels progressing while it waits).
fn agree_gathering<T>(
    gather: impl FnOnce(&[u8]) -> Result<Vec<Vec<u8>>, ExperimentError>,
    rank: usize,
    hosts: &[String],
    outcome: Result<T, ExperimentError>,
    stop: bool,
) -> Result<T, ExperimentError> {
    let mine = match &outcome {
        Ok(_) if stop => RoundStatus::Stop,
        Ok(_) => RoundStatus::Fine,
        Err(err) => RoundStatus::Failed { exit_code: err.exit_code(), message: err.to_string() },
    };
    let statuses = gather_with(gather, &mine, "round status")?;
    let value = match outcome {
        Ok(value) => value,
        Err(err) => {
            return Err(if rank == 0 { err } else { ExperimentError::Reported { exit_code: err.exit_code() } });
        }
    };
    for (peer, status) in statuses.into_iter().enumerate() {
        match status {
            RoundStatus::Fine => {}
            RoundStatus::Stop => return Err(ExperimentError::Stopped),
            RoundStatus::Failed { exit_code, message } => {
                return Err(ExperimentError::PeerFailed { rank: peer, host: hosts.get(peer).cloned().unwrap_or_default(), message, exit_code });
            }
        }
    }
    Ok(value)
}

/// Shares a setup step's outcome (e.g. allocating and registering memory) like [`agree`], and returns its
/// value on every rank when all succeeded.
pub(crate) fn agree_on<T>(
    world: &World<'_>,
    outcome: Result<T, ExperimentError>,
    observer: &dyn Observer,
) -> Result<T, ExperimentError> {
    let stop = world.rank == 0 && observer.stop_requested();
    agree_gathering(|text| world.allgather(text), world.rank, &world.hosts, outcome, stop)
}

/// Refuses sizes the provider cannot carry in one message.
pub(crate) fn check_sizes(world: &World<'_>, sweep: &StepOptions) -> Result<(), ExperimentError> {
    match sweep.sizes.iter().copied().max() {
        // efa-direct carries messages of about the MTU: name the fabric, which is what the user chose.
        Some(largest) if world.provider == efatop_fabric::Provider::EfaDirect => {
            size_limit(largest, world.max_msg_size(), "efa-direct")
        }
        Some(largest) => size_limit(largest, world.max_msg_size(), &world.provider_stack),
        None => Ok(()),
    }
}

/// The error for a largest size over the provider's `max_msg_size`, naming the flag and what would fit.
pub fn size_limit(largest: u64, limit: u64, provider_stack: &str) -> Result<(), ExperimentError> {
    if largest <= limit {
        return Ok(());
    }
    let fits = if limit >= sizes::MIN_SIZE {
        sizes::format_size(1 << limit.ilog2())
    } else {
        "nothing".into()
    };
    Err(ExperimentError::InvalidInput {
        flag: "--max-size",
        message: format!(
            "{} exceeds the {provider_stack} provider's max_msg_size of {limit} bytes; the largest size allowed is {fits}",
            sizes::format_size(largest)
        ),
    })
}

/// Tells a polling loop when it has gone longer than its timeout without progress, reading the clock only
/// once every [`Stall::SPINS`] idle spins: a spin is one progress call (one `epoll_wait` on tcp), and a clock
/// read on every one of them is a cost of its own on hosts whose clock is not in the vDSO.
pub(crate) struct Stall {
    spins: u32,
    since: Option<std::time::Instant>,
}

impl Stall {
    const SPINS: u32 = 256;

    pub(crate) fn new() -> Self {
        Self { spins: 0, since: None }
    }

    /// Something arrived or completed: idleness starts over.
    pub(crate) fn advanced(&mut self) {
        self.spins = 0;
        self.since = None;
    }

    /// One spin found nothing; true once the loop has been idle for longer than `timeout` (counted from
    /// the first clock read of this idle stretch, at most [`Stall::SPINS`] spins after it began).
    pub(crate) fn idle_longer_than(&mut self, timeout: std::time::Duration) -> bool {
        self.spins = self.spins.wrapping_add(1);
        if !self.spins.is_multiple_of(Self::SPINS) {
            return false;
        }
        let now = std::time::Instant::now();
        match self.since {
            None => {
                self.since = Some(now);
                false
            }
            Some(since) => now.duration_since(since) > timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_stall_is_told_only_after_the_timeout_and_progress_resets_it() {
        let mut stall = super::Stall::new();
        let timeout = std::time::Duration::from_millis(30);
        let idle = |stall: &mut super::Stall| (0..super::Stall::SPINS).any(|_| stall.idle_longer_than(timeout));
        assert!(!idle(&mut stall), "the first clock read starts the idle stretch");
        std::thread::sleep(timeout * 2);
        assert!(idle(&mut stall), "idle for twice the timeout");
        stall.advanced();
        assert!(!idle(&mut stall));
        assert!(!idle(&mut stall), "a fresh idle stretch, well inside the timeout");
    }

    use super::*;

    #[test]
    fn sizes_over_the_provider_limit_name_the_flag_and_the_limit() {
        assert!(size_limit(1 << 20, u64::MAX, "tcp;ofi_rxm").is_ok());
        let err = size_limit(1 << 30, (1 << 20) + 5, "efa").expect_err("over the limit");
        assert_eq!(err.exit_code(), 2);
        assert_eq!(
            err.to_string(),
            "--max-size: 1G exceeds the efa provider's max_msg_size of 1048581 bytes; the largest size allowed is 1M"
        );
        // efa-direct's sends are limited to the device MTU (8928 on a p5's EFA).
        let err = size_limit(64 << 20, 8928, "efa-direct").expect_err("over the MTU");
        assert_eq!(
            err.to_string(),
            "--max-size: 64M exceeds the efa-direct provider's max_msg_size of 8928 bytes; the largest size allowed is 8K"
        );
    }
}
