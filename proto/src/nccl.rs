//! NCCL's own traffic, as efatop's profiler plugin (`transports/nccl-plugin/`, loaded by NCCL through
//! `NCCL_PROFILER_PLUGIN`) reports it and `efatop watch` shows it.
//!
//! - [`PluginMessage`]: what one plugin (one process, one or more communicators) sends: who it is, each
//!   communicator it joined, and per interval the figures its own thread folded from NCCL's events
//!   (collectives, peers, channels, progress by sequence number) and the node's EFA counters. Figures are
//!   cumulative since the communicator began, so a watcher that connects late, or a file read from the
//!   middle, still adds up.
//! - Framing: the stream's ([`crate::stream::frame`], [`crate::stream::read_frame`]: a 4-byte
//!   little-endian length, then JSON), after the run secret's handshake (`efatop_auth`,
//!   [`crate::handshake::Purpose::Nccl`]) on a connection, after the line `efatop-nccl <version>` in a file.
//! - [`Func`]: a collective and nccl-tests' figures for it: its size column ([`Func::test_size`]), algbw
//!   and busbw ([`Func::bus_factor`]), so the plugin's figures and a driver timed as nccl-tests does
//!   compare one to one.
//! - [`WatchLine`]: `efatop watch --json`'s typed lines, which the watcher's fold (`efatop_runtime::watch::fold`)
//!   makes.

use std::io::Read;

use serde::{Deserialize, Serialize};

use crate::stream::{OverCap, StreamError};

/// The first word of a plugin's file (and of its trace, with `-trace`).
pub const MAGIC: &str = "efatop-nccl";
/// Bumped whenever a message changes shape.
pub const VERSION: u32 = 1;
/// No plugin message is longer: an interval of a communicator's rows is a few KiB.
pub const MAX_MESSAGE: u32 = 4 << 20;
/// Rows (collective kinds and sizes, peers, channels, NICs, functions) one message may carry: the stream's
/// cap on sizes.
pub const MAX_ROWS: usize = crate::stream::MAX_SIZES;
/// Characters of a name (host, communicator, algorithm...) a reader keeps.
pub const MAX_NAME: usize = 256;

/// A collective (or point-to-point call) as NCCL names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Func {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
    Reduce,
    /// NCCL's own `ncclAlltoAll`, or a group of sends to every rank of equal size (nccl-tests' alltoall).
    AlltoAll,
    Gather,
    Scatter,
    /// A group of sends and receives that is not an alltoall.
    SendRecv,
    Other,
}

impl Func {
    /// NCCL's name (`ncclFuncToString`: "AllReduce", "AllGather", ...).
    pub fn from_nccl(name: &str) -> Self {
        match name {
            "AllReduce" => Self::AllReduce,
            "AllGather" => Self::AllGather,
            "ReduceScatter" => Self::ReduceScatter,
            "Broadcast" => Self::Broadcast,
            "Reduce" => Self::Reduce,
            "AlltoAll" => Self::AlltoAll,
            "Gather" => Self::Gather,
            "Scatter" => Self::Scatter,
            "SendRecv" | "Send" | "Recv" => Self::SendRecv,
            _ => Self::Other,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::AllReduce => "allreduce",
            Self::AllGather => "allgather",
            Self::ReduceScatter => "reducescatter",
            Self::Broadcast => "broadcast",
            Self::Reduce => "reduce",
            Self::AlltoAll => "alltoall",
            Self::Gather => "gather",
            Self::Scatter => "scatter",
            Self::SendRecv => "sendrecv",
            Self::Other => "other",
        }
    }

    /// nccl-tests' busbw over algbw for `nranks` ranks: allreduce 2(n-1)/n; allgather, reducescatter,
    /// alltoall, gather, scatter (n-1)/n; broadcast, reduce, send/receive 1 (nccl-tests' doc/PERFORMANCE.md).
    pub fn bus_factor(self, nranks: u32) -> f64 {
        let n = f64::from(nranks.max(1));
        match self {
            Self::AllReduce => 2.0 * (n - 1.0) / n,
            Self::AllGather | Self::ReduceScatter | Self::AlltoAll | Self::Gather | Self::Scatter => (n - 1.0) / n,
            Self::Broadcast | Self::Reduce | Self::SendRecv | Self::Other => 1.0,
        }
    }

    /// nccl-tests' size column for one call of `count` elements of `type_size` bytes (NCCL's count: per
    /// rank for allgather (send), reducescatter (receive), alltoall, gather and scatter (per peer)): the
    /// whole buffer for those, the one buffer otherwise. A send/receive group's size is its bytes sent.
    pub fn test_size(self, count: u64, type_size: u64, nranks: u32) -> u64 {
        let bytes = count.saturating_mul(type_size);
        match self {
            Self::AllGather | Self::ReduceScatter | Self::AlltoAll | Self::Gather | Self::Scatter => {
                bytes.saturating_mul(u64::from(nranks.max(1)))
            }
            _ => bytes,
        }
    }
}

/// Bytes of one element of NCCL's datatype, by `ncclDatatypeToString`'s name ("ncclFloat32"); 1 for an
/// unknown one.
pub fn type_size(datatype: &str) -> u64 {
    match datatype.trim_start_matches("nccl") {
        "Int8" | "Uint8" | "Char" | "Float8e4m3" | "Float8e5m2" => 1,
        "Float16" | "Half" | "Bfloat16" => 2,
        "Int32" | "Uint32" | "Int" | "Float32" | "Float" => 4,
        "Int64" | "Uint64" | "Float64" | "Double" => 8,
        _ => 1,
    }
}

/// algbw in GB/s (10^9 bytes a second, as nccl-tests prints it): `size` bytes in `seconds`.
pub fn algbw_gbps(size: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        size as f64 / seconds / 1e9
    } else {
        0.0
    }
}

/// Where a collective's time came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Timing {
    /// The GPU's global timer at the kernel's start and end on each channel (NCCL's KernelCh events): the
    /// first channel's start to the last channel's end.
    Gpu,
    /// The proxy thread's first network step to its last (the host clock).
    Proxy,
    /// Not timed: a one-rank communicator (NCCL copies without a kernel plan, so only the API call is
    /// seen), or no kernel or proxy event came.
    None,
}

/// Who a plugin is: one process of the job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub host: String,
    pub pid: u32,
    /// The process's GPU as the job gave it (`EFATOP_GPU`, else CUDA's current device where libcudart is
    /// loaded, else `CUDA_VISIBLE_DEVICES` or the launcher's local rank).
    pub gpu: Option<String>,
    /// NCCL's version (`ncclGetVersion`, "2.28.3"), where the process exports it.
    pub nccl_version: Option<String>,
    /// The profiler ABI NCCL loaded: 4, 5 or 6.
    pub abi: u32,
    pub plugin_version: String,
}

/// A communicator as one rank joined it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommInfo {
    /// NCCL's communicator id (its hash): the same on every rank of the communicator.
    pub comm: u64,
    pub name: Option<String>,
    pub rank: u32,
    pub nranks: u32,
    pub nnodes: u32,
}

/// One kind of call at one size, cumulative.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CollRow {
    pub func: Func,
    /// nccl-tests' size column ([`Func::test_size`]).
    pub size: u64,
    pub datatype: String,
    pub algo: String,
    pub proto: String,
    /// Calls completed.
    pub ops: u64,
    pub timing: Timing,
    /// Calls timed, and their time in all, the shortest and the longest (ns).
    pub timed: u64,
    pub time_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    /// The calls' `userTag` (NCCL 2.31+, profiler v7; 0: untagged): a row per tag.
    #[serde(default)]
    pub tag: u64,
    /// The kernel variant NCCL ran (v7's `kernelVariant`), and whether it is a symmetric-memory kernel.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub variant: String,
    #[serde(default)]
    pub sym: bool,
    /// Calls whose kernels reported their phases (v7), and their time (ns, each call's mean over its
    /// channels) waiting for peers (initial and final sync) and working (compute).
    #[serde(default)]
    pub phased: u64,
    #[serde(default)]
    pub wait_ns: u64,
    #[serde(default)]
    pub work_ns: u64,
}

impl CollRow {
    /// Mean time of a timed call, seconds.
    pub fn mean_seconds(&self) -> Option<f64> {
        (self.timed > 0).then(|| self.time_ns as f64 / self.timed as f64 / 1e9)
    }
}

/// One collective call of one rank, as the straggler finder matches it with the other ranks' same call
/// (communicator, function, NCCL's sequence number). A plugin sends at most [`MAX_CALL_SAMPLES`] a function
/// an interval: every call whose number is a multiple of a power of two (1, 2, 4...), the smallest that
/// keeps it under the cap, so that ranks at different paces still send the same numbers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallSample {
    pub func: Func,
    pub seq: u64,
    /// When the call began on this rank, ns since the Unix epoch: its kernel's first channel's start on the
    /// GPU's global timer (which the driver keeps on the host's clock), else NCCL's start of the call on the
    /// host (the plugin's clock, made absolute at its start).
    pub start_ns: u64,
    /// Whether `start_ns` is the GPU's (else the host's).
    pub gpu: bool,
    /// v7: the call's initial sync (waiting for its peers to arrive), its final sync and its compute phase,
    /// each its channels' mean, ns.
    pub initial_sync_ns: Option<u64>,
    pub final_sync_ns: Option<u64>,
    pub compute_ns: Option<u64>,
    #[serde(default)]
    pub tag: u64,
}

/// The most call samples a plugin sends for one function in one interval.
pub const MAX_CALL_SAMPLES: usize = 64;

/// Bytes this rank's proxy moved with one peer (network transport), cumulative.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerRow {
    pub peer: u32,
    pub sent: u64,
    pub received: u64,
    /// The proxy's steps that moved bytes: a step counts when NCCL gives its size (a step that never got
    /// one, such as one hung before its data, is not counted; a hang is told by the calls, not by steps).
    pub steps: u64,
}

/// One channel's proxy traffic and kernel time, cumulative.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelRow {
    pub channel: u32,
    pub sent: u64,
    pub received: u64,
    /// As [`PeerRow::steps`]: the steps that moved bytes.
    pub steps: u64,
    pub kernel_ns: u64,
}

/// How far one rank got with one kind of collective (NCCL's sequence numbers count per communicator and
/// function, from 0).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub func: Func,
    /// Calls started: the next sequence number.
    pub started: u64,
    /// Every call below this number has finished.
    pub finished: u64,
    /// The oldest call started and not finished, and for how long (ms), if any.
    pub open_seq: Option<u64>,
    pub open_ms: u64,
}

/// One EFA device's counters (`ports/1/hw_counters`), cumulative as the kernel keeps them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicCount {
    pub name: String,
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    /// Its error counters, where the device has them (`None`: not read): packets retransmitted
    /// (`retrans_pkts`), remote peers that stopped answering (`unresponsive_remote_events`) and that the
    /// device judged impaired (`impaired_remote_conn_events`).
    #[serde(default)]
    pub retrans: Option<u64>,
    #[serde(default)]
    pub unresponsive: Option<u64>,
    #[serde(default)]
    pub impaired: Option<u64>,
    /// Whether the NIC is one of this process's GPU's (the NICs nearest it on PCIe, as NCCL picks them).
    #[serde(default)]
    pub rail: bool,
}

/// What a plugin sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PluginMessage {
    /// First, on every connection and at the top of a file.
    Hello { origin: Origin },
    /// A communicator this process joined (sent again on every reconnection).
    Comm { info: CommInfo },
    /// One communicator's figures, `t_ms` after the plugin started; sent every interval, even when nothing
    /// changed (a heartbeat), with the rows that changed since the last one.
    ///
    /// `calls`: samples of the calls finished since the last interval, for the straggler finder.
    Interval {
        t_ms: u64,
        comm: u64,
        rank: u32,
        colls: Vec<CollRow>,
        peers: Vec<PeerRow>,
        channels: Vec<ChannelRow>,
        progress: Vec<Progress>,
        #[serde(default)]
        calls: Vec<CallSample>,
    },
    /// The node's EFA devices, read by this process.
    Nics { t_ms: u64, nics: Vec<NicCount> },
    /// The plugin's own health: events seen, dropped (the ring was full), messages lost while no watcher
    /// took them, stops and states for events never started.
    Health { t_ms: u64, events: u64, dropped: u64, unsent: u64, unmatched: u64 },
    /// A communicator ended (`finalize`).
    Bye { comm: u64, rank: u32 },
    /// A process's own GPU's NICs (those marked `rail`), sent in place of its [`PluginMessage::Nics`] by the
    /// host's relay, whose own `Nics` carries the host's every NIC: the host's counters travel once an
    /// interval, not once per process.
    Rails { t_ms: u64, nics: Vec<NicCount> },
    /// From a host's relay (the plugin of one of the host's processes, which carries the others' messages
    /// on its own connection): `message`, as process `local` of that relay sent it. Never nested.
    Relayed { local: u32, message: Box<PluginMessage> },
    /// The relay's process `local` is gone: its connection to the relay ended (the process ended or died).
    Left { local: u32 },
}

impl PluginMessage {
    /// Checks what a crafted message could make a reader hold.
    pub fn check(&self) -> Result<(), OverCap> {
        use crate::stream::Cap;
        let rows = match self {
            Self::Interval { colls, peers, channels, progress, calls, .. } => colls.len().max(peers.len()).max(channels.len()).max(progress.len()).max(calls.len()),
            Self::Nics { nics, .. } | Self::Rails { nics, .. } => nics.len(),
            Self::Relayed { message, .. } => return message.check(),
            _ => 0,
        };
        // MAX_ROWS is the stream's cap on sizes and columns.
        OverCap::check(Cap::Sizes, rows)
    }
}

/// Appends `message` framed.
pub fn encode(message: &PluginMessage, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    crate::stream::frame(out, |out| serde_json::to_writer(out, message))
}

/// The next message; `None` where the stream ends between messages. Names longer than [`MAX_NAME`] are cut.
pub fn read(reader: &mut impl Read) -> Result<Option<PluginMessage>, StreamError> {
    let Some(body) = crate::stream::read_frame(reader, MAX_MESSAGE)? else { return Ok(None) };
    decode(&body).map(Some)
}

/// A frame's body (its length prefix cut off by the caller, who held it to [`MAX_MESSAGE`]) as a message,
/// within the same caps as [`read`]: for a reader that has the whole frame in its buffer already (the
/// watcher's server), without copying it out.
pub fn decode(body: &[u8]) -> Result<PluginMessage, StreamError> {
    let mut message: PluginMessage = serde_json::from_slice(body)?;
    message.check()?;
    let inner = match &mut message {
        PluginMessage::Relayed { message, .. } => &mut **message,
        message => message,
    };
    if let PluginMessage::Hello { origin } = inner {
        origin.host.truncate(MAX_NAME);
    }
    Ok(message)
}

/// The first line of a plugin's file.
pub fn file_hello() -> String {
    format!("{MAGIC} {VERSION}\n")
}

/// The first word of `efatop watch --record`'s file (then its version, [`RECORDING_VERSION`]): a member of
/// the recordings' family ([`crate::recording`]).
pub const RECORDING_MAGIC: &str = "efatop-nccl-watch";
/// 2: the records in gzip members, as a run's recording holds its messages (1: the frames as they are).
pub const RECORDING_VERSION: u32 = 2;
/// The oldest watch recording this efatop reads.
pub const OLDEST_RECORDING: u32 = 1;
/// The first version whose records are in gzip members.
pub const RECORDING_GZIP_SINCE: u32 = 2;

/// One thing `efatop watch` took in, at `t_ms` after it started, as `--record` writes it: what the
/// watcher is given is what it folds, so a recording folds again to the same lines (`--from`, `replay`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recorded {
    /// The watcher's settings, the recording's first record: a replay judges as the watcher did.
    Settings { hang_after_s: u64, window_s: u64, fallback_min_bytes: u64 },
    /// Connection `conn` (numbered from 1 as they came) sent `message`.
    Message { t_ms: u64, conn: u64, message: PluginMessage },
    /// Connection `conn` closed.
    Closed { t_ms: u64, conn: u64 },
    /// A connection was refused (no token proof, or no room).
    Refused { t_ms: u64 },
}

/// Appends `record` framed.
pub fn encode_recorded(record: &Recorded, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    crate::stream::frame(out, |out| serde_json::to_writer(out, record))
}

/// The next record of a recording; `None` where it ends between records.
pub fn read_recorded(reader: &mut impl Read) -> Result<Option<Recorded>, StreamError> {
    let Some(body) = crate::stream::read_frame(reader, MAX_MESSAGE)? else { return Ok(None) };
    let mut record: Recorded = serde_json::from_slice(&body)?;
    if let Recorded::Message { message, .. } = &mut record {
        message.check()?;
        if let PluginMessage::Hello { origin } = message {
            origin.host.truncate(MAX_NAME);
        }
    }
    Ok(Some(record))
}

/// What `efatop watch` shows, one line per event. `--json` prints each as a [`crate::output::Line`], the
/// envelope every command's lines have: `{"type":"coll","data":{...}}` (the data's fields in the order
/// declared here).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
pub enum WatchLine {
    /// A rank of the job joined (or rejoined) a communicator.
    Rank { host: String, pid: u32, gpu: Option<String>, comm: String, comm_name: Option<String>, rank: u32, nranks: u32, nnodes: u32, nccl_version: Option<String>, abi: u32 },
    /// One collective kind at one size on one communicator, over the ranks that reported it: calls, mean
    /// time (the ranks' mean of their mean), nccl-tests' algbw and busbw.
    ///
    /// `user_tag`: the calls' v7 `userTag` (0: untagged; a row per tag); `variant`: v7's kernel variant;
    /// `wait_us` and `work_us`: with v7's kernel phases, the mean call's time waiting for peers (initial
    /// and final sync) and working (compute), `null` without them.
    Coll {
        comm: String,
        func: Func,
        size: u64,
        datatype: String,
        algo: String,
        proto: String,
        ranks: u32,
        nranks: u32,
        ops: u64,
        timing: Timing,
        time_us: Option<f64>,
        algbw_gbps: Option<f64>,
        busbw_gbps: Option<f64>,
        #[serde(default)]
        user_tag: u64,
        #[serde(default)]
        variant: String,
        #[serde(default)]
        wait_us: Option<f64>,
        #[serde(default)]
        work_us: Option<f64>,
    },
    /// Bytes one rank's proxy moved with one peer.
    Peer { comm: String, host: String, rank: u32, peer: u32, sent: u64, received: u64, steps: u64 },
    /// One host over the last window: what NCCL's network path moved against what its EFA NICs carried,
    /// and the verdict.
    Nics { host: String, window_s: f64, nccl_bytes: u64, nic_bytes: u64, verdict: NicVerdict, nics: Vec<NicWindow> },
    /// The hang locator: `rank` has not finished collective `seq` of `func` on `comm` (or went silent in
    /// it) while `peers_done` have finished it, or wait in it.
    ///
    /// `rails`: the named rank's GPU's NICs whose error counters grew over the last window.
    Hang {
        comm: String,
        func: Func,
        seq: u64,
        rank: u32,
        host: String,
        gpu: Option<String>,
        why: HangWhy,
        waiting_s: f64,
        peers_done: Vec<u32>,
        peers_waiting: Vec<u32>,
        #[serde(default)]
        rails: Vec<String>,
    },
    /// A hang that was named is over.
    HangOver { comm: String, func: Func, seq: u64 },
    /// The straggler of a communicator over the last window: the rank its peers waited for in `last` of the
    /// `of` calls matched (by communicator, function and sequence number), `lag_us` on average each time;
    /// `source` says how that was measured. With v7's kernel phases, `its_wait_us` and `others_wait_us`: its
    /// and its peers' mean initial sync (waiting for the others) in those calls.
    Straggler {
        comm: String,
        func: Func,
        rank: u32,
        host: String,
        gpu: Option<String>,
        source: LagSource,
        lag_us: f64,
        last: u64,
        of: u64,
        its_wait_us: Option<f64>,
        others_wait_us: Option<f64>,
    },
    /// A straggler that was named no longer is.
    StragglerOver { comm: String, rank: u32 },
    /// One GPU's rails over the last window: NCCL's bytes by its ranks against each of its NICs' bytes and
    /// error counters. Printed when the verdict is not `ok` or `quiet`, or changes.
    Rails { host: String, gpu: String, window_s: f64, nccl_bytes: u64, verdict: RailVerdict, nics: Vec<RailNic> },
    /// A plugin went away (`bye`: its communicator ended; otherwise its connection closed).
    Gone { host: String, pid: u32, bye: bool },
    /// The watcher's own counts: plugins connected, strangers refused, plugins' drops.
    Health { plugins: u32, refused: u64, dropped: u64, unsent: u64 },
}

/// Every `type` a [`WatchLine`] may have.
pub const WATCH_KINDS: &[&str] = &["rank", "coll", "peer", "nics", "hang", "hang_over", "straggler", "straggler_over", "rails", "gone", "health"];

impl WatchLine {
    /// The line's `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Rank { .. } => "rank",
            Self::Coll { .. } => "coll",
            Self::Peer { .. } => "peer",
            Self::Nics { .. } => "nics",
            Self::Hang { .. } => "hang",
            Self::HangOver { .. } => "hang_over",
            Self::Straggler { .. } => "straggler",
            Self::StragglerOver { .. } => "straggler_over",
            Self::Rails { .. } => "rails",
            Self::Gone { .. } => "gone",
            Self::Health { .. } => "health",
        }
    }
}

/// The NIC join's verdict for a host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NicVerdict {
    /// NCCL's network path moved bytes and the EFA NICs carried them.
    Ok,
    /// Little moved on NCCL's network path.
    Quiet,
    /// NCCL's network path moved bytes while the host's EFA NICs stayed (nearly) idle: NCCL fell back to
    /// sockets (TCP) or another transport.
    Fallback,
    /// A NIC carried much less than its rail (the host's other NICs).
    BehindRail,
}

/// One NIC over the window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicWindow {
    pub name: String,
    pub bytes: u64,
    pub behind: bool,
}

/// How the straggler finder knew who the others waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LagSource {
    /// v7's kernel phases: the rank whose initial sync was shortest (the others' was their wait for it).
    KernelPhase,
    /// Each rank's start of the call's kernel on the GPU's timer (v4–v6): the last to start, by how much
    /// after the one before it. Across hosts as good as the hosts' clocks agree.
    GpuStart,
    /// Each rank's start of the call on the host (no kernel events), likewise.
    HostStart,
}

/// A GPU's rails' verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RailVerdict {
    /// Its rails share the bytes and no error counter grew.
    Ok,
    /// NCCL moved less than `--fallback-min-mib` through this GPU's ranks.
    Quiet,
    /// A rail carried far less than its share (less than the rail rule's share of the GPU's median rail).
    Skewed,
    /// A rail's error counters grew (retransmits, unresponsive or impaired remote).
    Errors,
}

/// One rail of a GPU over the window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RailNic {
    pub name: String,
    pub bytes: u64,
    /// Growth of its error counters over the window (`None`: the device has no such counter).
    pub retrans: Option<u64>,
    pub unresponsive: Option<u64>,
    pub impaired: Option<u64>,
    /// Carried far less than its share.
    pub behind: bool,
}

impl RailNic {
    /// Whether any error counter grew.
    pub fn errors(&self) -> bool {
        [self.retrans, self.unresponsive, self.impaired].iter().any(|c| c.is_some_and(|n| n > 0))
    }
}

/// Why the hang locator named a rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HangWhy {
    /// It has not finished the call while its peers have.
    NotFinished,
    /// It has not started the call while its peers have.
    NotStarted,
    /// Its plugin went silent (the process stopped, or died) while its peers wait in the call.
    Silent,
}

/// A communicator id as lines show it.
pub fn comm_hex(comm: u64) -> String {
    format!("{comm:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_tests_formulas() {
        assert!((Func::AllReduce.bus_factor(8) - 1.75).abs() < 1e-12);
        assert!((Func::AllGather.bus_factor(4) - 0.75).abs() < 1e-12);
        assert!((Func::AlltoAll.bus_factor(2) - 0.5).abs() < 1e-12);
        assert!((Func::Broadcast.bus_factor(8) - 1.0).abs() < 1e-12);
        assert!(Func::AllReduce.bus_factor(1).abs() < 1e-12);
        assert_eq!(Func::AllGather.test_size(1024, 4, 8), 32768);
        assert_eq!(Func::AllReduce.test_size(1024, 4, 8), 4096);
        assert_eq!(type_size("ncclBfloat16"), 2);
        assert_eq!(type_size("ncclFloat32"), 4);
        assert!((algbw_gbps(1_000_000_000, 0.5) - 2.0).abs() < 1e-12);
    }

    #[test]
    fn a_watch_recording_reads_back_as_written_and_a_cut_one_up_to_the_cut() {
        let records = vec![
            Recorded::Settings { hang_after_s: 3, window_s: 5, fallback_min_bytes: 16 << 20 },
            Recorded::Message { t_ms: 10, conn: 1, message: example() },
            Recorded::Refused { t_ms: 11 },
            Recorded::Closed { t_ms: 12, conn: 1 },
        ];
        let mut out = Vec::new();
        for record in &records {
            encode_recorded(record, &mut out).expect("encode");
        }
        let mut reader = out.as_slice();
        let back: Vec<Recorded> = std::iter::from_fn(|| read_recorded(&mut reader).expect("reads")).collect();
        assert_eq!(back, records);
        let cut = &out[..out.len() - 3];
        let mut reader = cut;
        assert_eq!(read_recorded(&mut reader).expect("first").as_ref(), Some(&records[0]));
        assert_eq!(read_recorded(&mut reader).expect("second").as_ref(), Some(&records[1]));
        assert_eq!(read_recorded(&mut reader).expect("third").as_ref(), Some(&records[2]));
        assert!(matches!(read_recorded(&mut reader), Err(StreamError::Truncated)), "the cut record is named");
    }

    #[test]
    fn messages_come_back_as_they_went_and_oversized_ones_are_refused() {
        let message = example();
        let mut out = Vec::new();
        encode(&message, &mut out).expect("encode");
        let back = read(&mut out.as_slice()).expect("read").expect("one");
        assert_eq!(back, message);
        let mut big = Vec::new();
        big.extend_from_slice(&(MAX_MESSAGE + 1).to_le_bytes());
        assert!(read(&mut big.as_slice()).is_err());
        let many = PluginMessage::Nics { t_ms: 0, nics: vec![NicCount { name: "x".into(), tx_bytes: 0, rx_bytes: 0, retrans: None, unresponsive: None, impaired: None, rail: false }; MAX_ROWS + 1] };
        let mut out = Vec::new();
        encode(&many, &mut out).expect("encode");
        assert!(read(&mut out.as_slice()).is_err(), "more rows than a reader holds");
    }

    #[test]
    fn a_relayed_message_comes_back_whole_within_the_same_caps_and_its_host_cut() {
        let relayed = PluginMessage::Relayed { local: 3, message: Box::new(example()) };
        let mut out = Vec::new();
        encode(&relayed, &mut out).expect("encode");
        assert_eq!(read(&mut out.as_slice()).expect("read").expect("one"), relayed);
        let nic = NicCount { name: "x".into(), tx_bytes: 0, rx_bytes: 0, retrans: None, unresponsive: None, impaired: None, rail: true };
        let many = PluginMessage::Relayed { local: 0, message: Box::new(PluginMessage::Rails { t_ms: 0, nics: vec![nic; MAX_ROWS + 1] }) };
        let mut out = Vec::new();
        encode(&many, &mut out).expect("encode");
        assert!(read(&mut out.as_slice()).is_err(), "a relayed message is held to the caps of its own kind");
        let origin = Origin { host: "h".repeat(MAX_NAME + 10), pid: 1, gpu: None, nccl_version: None, abi: 7, plugin_version: "t".into() };
        let mut out = Vec::new();
        encode(&PluginMessage::Relayed { local: 1, message: Box::new(PluginMessage::Hello { origin }) }, &mut out).expect("encode");
        let Some(PluginMessage::Relayed { message, .. }) = read(&mut out.as_slice()).expect("read") else { panic!("relayed") };
        assert!(matches!(*message, PluginMessage::Hello { origin } if origin.host.len() == MAX_NAME));
    }

    fn example() -> PluginMessage {
        PluginMessage::Interval {
                t_ms: 1000,
                comm: 0xfeed,
                rank: 1,
                colls: vec![CollRow { func: Func::AllReduce, size: 1 << 20, datatype: "ncclFloat32".into(), algo: "RING".into(), proto: "SIMPLE".into(), ops: 3, timing: Timing::Gpu, timed: 3, time_ns: 300_000, min_ns: 90_000, max_ns: 110_000, tag: 7, variant: String::new(), sym: false, phased: 3, wait_ns: 30, work_ns: 60 }],
                peers: vec![PeerRow { peer: 0, sent: 10, received: 20, steps: 2 }],
                channels: vec![ChannelRow { channel: 0, sent: 10, received: 20, steps: 2, kernel_ns: 5 }],
                progress: vec![Progress { func: Func::AllReduce, started: 4, finished: 3, open_seq: Some(3), open_ms: 12 }],
                calls: vec![CallSample { func: Func::AllReduce, seq: 2, start_ns: 1_796_191_881_279_863_648, gpu: true, initial_sync_ns: Some(5), final_sync_ns: Some(1), compute_ns: Some(9), tag: 7 }],
            }
    }
}
