//! The process's one plugin runtime: the ring the hot path pushes into, its counters, the communicators
//! `init` registered, and the fold's thread, started by the first `init`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;
use efatop_proto::nccl::CommInfo;

use crate::record::Record;

/// Records the ring holds: at about 150 bytes each (the largest kind, a collective's start with its names,
/// sets every slot's size), 10 MB; drained a millisecond apart while records flow (at once from a quarter of
/// it), that is tens of millions of events a second before one drops.
pub const RING_RECORDS: usize = 1 << 16;

/// A communicator's start or end, told by `init` and `finalize` (never on the hot path).
#[derive(Clone, Debug)]
pub enum CommEvent {
    Init { ctx: u32, info: CommInfo, t_ns: u64 },
    Finalize { ctx: u32, t_ns: u64 },
}

/// What every hook reads and nothing writes after the runtime is made, on a cache line of its own: a line
/// the fold's thread writes (its lock of the communicators, its counters) would otherwise be taken from
/// NCCL's proxy thread at each of its drains, and every hook after it would wait for the line to come back
/// (from the other socket, on a two-socket host).
struct Hot {
    states_timed: bool,
    base: Instant,
}

pub struct Runtime {
    hot: CachePadded<Hot>,
    /// Written by every `startEvent` (NCCL's main and proxy threads both): apart from the hooks' reads.
    next_id: CachePadded<AtomicU64>,
    pub ring: ArrayQueue<Record>,
    /// Proxy operations' steps, summed until each operation stops ([`crate::opsteps`]).
    pub op_slots: crate::opsteps::OpSlots,
    /// Events the full ring dropped. Those it took are counted by the fold's thread as it drains them: a
    /// shared counter bumped by every hook call would be one more atomic write on NCCL's threads, contended
    /// between its main and proxy threads.
    pub dropped: CachePadded<AtomicU64>,
    next_ctx: AtomicU32,
    /// The Unix time (ns) at the runtime's start: the plugin's clock made absolute, to match calls across hosts.
    pub epoch_base_ns: u64,
    /// The ABI NCCL took: 4 to 7.
    pub abi: AtomicU32,
    pub comms: Mutex<Vec<CommEvent>>,
    /// Finalizes told, and those whose last interval and bye the fold's thread has sent and flushed.
    finalizes: AtomicU64,
    pub finalizes_sent: AtomicU64,
}

/// How long `finalize` waits for the fold's thread to send the communicator's last figures and its bye: a
/// job ends right after it (the process exits), and a watcher that missed the end would see its last calls
/// unfinished. Not on the hot path; bounded, so a stuck sink never holds the job up longer.
pub const FINALIZE_WAIT: Duration = Duration::from_millis(250);

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The trace player's clock (`efatop_profiler_playback_clock`): the recorded time, in ns, of the record being
/// played, which records and communicator events are stamped with instead of the monotonic clock, so that a
/// playback folds to the recording's figures however late a busy machine wakes the player; 0 (always, under
/// NCCL): the monotonic clock.
pub static PLAYBACK_NS: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));

/// The CUDA device of the thread that first called `init` (NCCL's, with the communicator's device set),
/// where CUDA could tell it: the process's GPU.
pub static INIT_GPU: OnceLock<i32> = OnceLock::new();
static FOLD: Once = Once::new();

impl Runtime {
    fn new() -> Self {
        Self {
            hot: CachePadded::new(Hot {
                states_timed: std::env::var_os("EFATOP_PROFILER_TRACE").is_some_and(|v| !v.is_empty()),
                base: Instant::now(),
            }),
            next_id: CachePadded::new(AtomicU64::new(1)),
            ring: ArrayQueue::new(RING_RECORDS),
            op_slots: crate::opsteps::OpSlots::new(crate::opsteps::OP_SLOTS),
            next_ctx: AtomicU32::new(0),
            dropped: CachePadded::new(AtomicU64::new(0)),
            epoch_base_ns: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64),
            abi: AtomicU32::new(0),
            comms: Mutex::new(Vec::new()),
            finalizes: AtomicU64::new(0),
            finalizes_sent: AtomicU64::new(0),
        }
    }

    /// ns since the runtime started (the vDSO's monotonic clock: no system call, no lock).
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.hot.base.elapsed().as_nanos() as u64
    }

    /// Whether a state change carries its time: only a trace (`EFATOP_PROFILER_TRACE`) writes it; the fold
    /// reads a state's step size or timer, never its time, so without a trace the hook skips the clock.
    #[inline]
    pub fn states_timed(&self) -> bool {
        self.hot.states_timed
    }

    /// A record's time: [`Self::now_ns`], or the player's clock while a trace is played ([`PLAYBACK_NS`]).
    #[inline]
    pub fn record_ns(&self) -> u64 {
        match PLAYBACK_NS.load(Ordering::Relaxed) {
            0 => self.now_ns(),
            t => t,
        }
    }

    /// A fresh event id (never 0).
    #[inline]
    pub fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Pushes one record; a full ring drops it and counts. Never blocks, locks or allocates.
    #[inline]
    pub fn push(&self, record: Record) {
        if self.ring.push(record).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Registers a communicator (from `init`): its context index.
    pub fn register(&self, info: CommInfo) -> u32 {
        let ctx = self.next_ctx.fetch_add(1, Ordering::Relaxed);
        let t_ns = self.record_ns();
        self.comms.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(CommEvent::Init { ctx, info, t_ns });
        ctx
    }

    /// A communicator ends (from `finalize`): waits up to [`FINALIZE_WAIT`] for its last figures to leave.
    pub fn finalize(&self, ctx: u32) {
        let t_ns = self.record_ns();
        self.comms.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(CommEvent::Finalize { ctx, t_ns });
        let told = self.finalizes.fetch_add(1, Ordering::Relaxed) + 1;
        let started = Instant::now();
        while self.finalizes_sent.load(Ordering::Acquire) < told && started.elapsed() < FINALIZE_WAIT {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    pub fn take_comms(&self) -> Vec<CommEvent> {
        std::mem::take(&mut *self.comms.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// The runtime, once some `init` made it.
#[inline]
pub fn get() -> Option<&'static Runtime> {
    RUNTIME.get()
}

/// The runtime, made by the first call, which also starts its fold's thread with `spawn` (the worker's).
pub fn start(abi: u32, spawn: fn(&'static Runtime)) -> &'static Runtime {
    let runtime = RUNTIME.get_or_init(Runtime::new);
    let _ = runtime.abi.compare_exchange(0, abi, Ordering::Relaxed, Ordering::Relaxed);
    FOLD.call_once(|| spawn(runtime));
    runtime
}
