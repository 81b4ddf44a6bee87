//! The C side: the tables NCCL looks up (`ncclProfiler_v7`, `_v6`, `_v5`, `_v4`, newest first) and the functions in
//! them, plus the few libc calls the plugin makes. The only module of the crate with `unsafe` (each block
//! says why it holds).
//!
//! Handles: an event's handle is its id (a counter, never 0; a proxy step's, its operation's id with
//! [`STEP_TAG`]; a proxy operation's that holds a slot of [`crate::opsteps`], and its steps', with
//! [`SLOT_TAG`] too) cast to a pointer. NCCL never dereferences a
//! handle (it hands it back to `stopEvent` and `recordEventState`, and to `startEvent` as a child's
//! `parentObj`), so no memory is tied to an event and nothing is allocated for one.
//!
//! The hot path (`startEvent`, `stopEvent`, `recordEventState`) reads the descriptor, copies its names inline
//! and pushes one fixed-size record into the lock-free ring ([`crate::runtime`]); when the ring is full the
//! record is dropped and counted. A proxy step's states are summed into its operation's slot instead
//! ([`crate::opsteps`]), pushed as one record at the operation's stop. It takes no lock, makes no system
//! call and never allocates.

#[cfg(feature = "player")]
pub mod player;

use std::ffi::{c_char, c_int, c_void, CStr};

use efatop_proto::nccl::CommInfo;

use crate::abi::{
    DescrUnionV5, DescrV4, DescrV5, DescrV6, DescrV7, Logger, NcclResult, ProfilerV4, ProfilerV5, ProfilerV6, ProfilerV7, StateArgs, NCCL_SUCCESS, PROFILE_COLL,
    PROFILE_COLL_API, PROFILE_GROUP, PROFILE_GROUP_API, PROFILE_KERNEL_CH, PROFILE_KERNEL_LAUNCH, PROFILE_KERNEL_PHASE, PROFILE_P2P, PROFILE_P2P_API,
    PROFILE_PROXY_OP, PROFILE_PROXY_STEP, STATE_KERNEL_CH_STOP, STATE_KERNEL_PHASE_STOP, STATE_PROXY_STEP_RECV_GPU_WAIT, STATE_PROXY_STEP_SEND_GPU_WAIT,
    STATE_PROXY_STEP_SEND_PEER_WAIT_V4,
};
use crate::record::{Event, Name, Record};
use crate::runtime;

/// The events this plugin asks NCCL for: groups, collectives and point-to-point calls with their kernels'
/// channel times and the proxy's operations and steps (bytes per peer), and, from v5, the API calls (a
/// one-rank communicator's collectives are seen there only).
const MASK_V4: u64 = PROFILE_GROUP | PROFILE_COLL | PROFILE_P2P | PROFILE_PROXY_OP | PROFILE_PROXY_STEP | PROFILE_KERNEL_CH;
const MASK_V5: u64 = MASK_V4 | PROFILE_COLL_API | PROFILE_P2P_API;
/// v7 adds the kernels' phases (waiting for peers against the kernel's own work).
const MASK_V7: u64 = MASK_V5 | PROFILE_KERNEL_PHASE;

const NAME: &CStr = c"efatop";

/// A communicator's context, made by `init`: its index in the runtime.
struct Ctx {
    index: u32,
}

/// The tables, newest first: v5 to v7 share `init`'s signature; v4's takes the name before the id.
#[no_mangle]
#[used]
pub static ncclProfiler_v7: ProfilerV7 =
    ProfilerV7 { name: NAME.as_ptr(), init: init_v7, startEvent: start::<DescrV7>, stopEvent: stop, recordEventState: record, finalize };

#[no_mangle]
#[used]
pub static ncclProfiler_v6: ProfilerV6 =
    ProfilerV6 { name: NAME.as_ptr(), init: init_v6, startEvent: start::<DescrV6>, stopEvent: stop, recordEventState: record, finalize };

#[no_mangle]
#[used]
pub static ncclProfiler_v5: ProfilerV5 =
    ProfilerV5 { name: NAME.as_ptr(), init: init_v5, startEvent: start::<DescrV5>, stopEvent: stop, recordEventState: record, finalize };

#[no_mangle]
#[used]
pub static ncclProfiler_v4: ProfilerV4 =
    ProfilerV4 { name: NAME.as_ptr(), init: init_v4, startEvent: start::<DescrV4>, stopEvent: stop, recordEventState: record, finalize };

/// The trace player's clock (`ffi::player`): stamps the records it plays next with `t_ns`, their recorded time
/// (0: the monotonic clock again). NCCL never calls it; under NCCL it stays 0.
#[no_mangle]
pub extern "C" fn efatop_profiler_playback_clock(t_ns: u64) {
    crate::runtime::PLAYBACK_NS.store(t_ns, std::sync::atomic::Ordering::Relaxed);
}

/// NCCL's activation mask, as `init` was given it (one int of NCCL's for the process, read atomically at
/// every call NCCL enqueues: 2.28.3's `enqueue.cc`), and the bits this plugin set in it.
static NCCL_MASK: std::sync::atomic::AtomicPtr<c_int> = std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
static OUR_BITS: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Turns the plugin on (`on` non-zero: the events it asked for at `init`) or off (0: NCCL calls it for no
/// call enqueued after) for the whole process: the plugin's cost measured inside one job, blocks of calls
/// with it and without alternating (`scripts/gpu/torch-alltoall-check.py --cost-ab`), free of the spread
/// between two jobs. Call it between calls, with the GPU idle. Returns 0, or -1 before any communicator's
/// `init` (no mask to set). NCCL never calls it.
#[no_mangle]
pub extern "C" fn efatop_profiler_active(on: c_int) -> c_int {
    efatop_profiler_events(if on != 0 { u64::MAX } else { 0 })
}

/// Where the plugin's cost lies, for the same A/B: NCCL's activation mask set to the events the plugin
/// asked for at `init` that are also in `keep` (the event types' bits: [`PROFILE_PROXY_STEP`] left out
/// measures what the proxy's steps cost). Returns as [`efatop_profiler_active`]. NCCL never calls it.
#[no_mangle]
pub extern "C" fn efatop_profiler_events(keep: u64) -> c_int {
    let mask = NCCL_MASK.load(std::sync::atomic::Ordering::Acquire);
    if mask.is_null() {
        return -1;
    }
    let bits = OUR_BITS.load(std::sync::atomic::Ordering::Relaxed) & keep as c_int;
    // SAFETY: `mask` is the pointer NCCL gave `init`: its own int, aligned, living for the process, which
    // NCCL itself reads with atomic loads.
    unsafe { std::sync::atomic::AtomicI32::from_ptr(mask) }.store(bits, std::sync::atomic::Ordering::Relaxed);
    0
}

/// The other half of that split: with `idle` non-zero, every hook returns at once (an event still gets a
/// handle, so NCCL goes on calling for its states and its end), so an A/B against it measures NCCL's own
/// profiler path apart from this plugin's. Events while idle are not folded. NCCL never calls it.
#[no_mangle]
pub extern "C" fn efatop_profiler_idle(idle: c_int) {
    IDLE.store(idle != 0, std::sync::atomic::Ordering::Relaxed);
}

static IDLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A finer split of the plugin's own work, for the same A/B: with `what` 1, the hooks do all their work but
/// the push into the ring (what the ring costs NCCL's thread); 2, all of it but reading the clock (every
/// record stamped 1 ns, as the player's clock would); 3, neither; 0, everything again. While either is
/// left out the fold's figures are not the job's. NCCL never calls it.
#[no_mangle]
pub extern "C" fn efatop_profiler_skip(what: c_int) {
    NO_PUSH.store(what & 1 != 0, std::sync::atomic::Ordering::Relaxed);
    crate::runtime::PLAYBACK_NS.store(u64::from(what & 2 != 0), std::sync::atomic::Ordering::Relaxed);
}

static NO_PUSH: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Pushes a record, unless the A/B leaves the push out ([`efatop_profiler_skip`]).
#[inline]
fn push(runtime: &runtime::Runtime, record: Record) {
    if !NO_PUSH.load(std::sync::atomic::Ordering::Relaxed) {
        runtime.push(record);
    }
}

/// The handle an idle hook gives an event (never an id: ids count up from 1 and this is the last).
const IDLE_HANDLE: u64 = u64::MAX;

use crate::record::STEP_TAG;

/// The bit a handle carries when its proxy operation holds a slot of [`crate::opsteps`] (the operation's,
/// and its steps'): the steps' states go into the slot and the operation's stop pushes them. A handle's
/// bit only: no record's id or parent carries it (ids count up from 1 and never reach it).
const SLOT_TAG: u64 = 1 << 61;

macro_rules! shared_table {
    ($($table:ty),*) => {$(
        // SAFETY: the tables are immutable statics whose only pointer is to a static C string; sharing them
        // between threads reads constant data.
        unsafe impl Sync for $table {}
    )*};
}
shared_table!(ProfilerV4, ProfilerV5, ProfilerV6, ProfilerV7);

/// A C string's first 15 bytes, copied; empty for a null pointer.
///
/// # Safety
/// `ptr` is null or points to a NUL-terminated string (NCCL's names are static literals).
#[inline]
unsafe fn name(ptr: *const c_char) -> Name {
    if ptr.is_null() {
        return Name::default();
    }
    let mut bytes = [0u8; 15];
    let mut len = 0;
    while len < bytes.len() {
        // SAFETY: the caller promises a NUL-terminated string; we stop at its NUL, never reading past it.
        let byte = unsafe { *ptr.add(len) } as u8;
        if byte == 0 {
            break;
        }
        bytes[len] = byte;
        len += 1;
    }
    Name::new(&bytes[..len])
}

fn init_common(abi: u32, context: *mut *mut c_void, mask: *mut c_int, comm: u64, comm_name: *const c_char, nnodes: c_int, nranks: c_int, rank: c_int, bits: u64) -> NcclResult {
    let result = std::panic::catch_unwind(|| {
        // On NCCL's thread, whose device is the communicator's; before the fold's thread starts and asks.
        if runtime::INIT_GPU.get().is_none() {
            if let Some(device) = crate::host::cuda_device() {
                let _ = runtime::INIT_GPU.set(device);
            }
        }
        let runtime = runtime::start(abi, crate::worker::spawn);
        let name = if comm_name.is_null() {
            None
        } else {
            // SAFETY: NCCL passes its communicator's name as a NUL-terminated string, or null.
            let text = unsafe { CStr::from_ptr(comm_name) };
            Some(text.to_string_lossy().chars().take(efatop_proto::nccl::MAX_NAME).collect())
        };
        let info = CommInfo { comm, name, rank: rank.max(0) as u32, nranks: nranks.max(0) as u32, nnodes: nnodes.max(0) as u32 };
        let index = runtime.register(info);
        Box::into_raw(Box::new(Ctx { index }))
    });
    let Ok(ctx) = result else { return NCCL_SUCCESS };
    // SAFETY: NCCL passes valid pointers to its context slot and to its activation mask.
    unsafe {
        *context = ctx.cast();
        *mask = bits as c_int;
    }
    OUR_BITS.store(bits as c_int, std::sync::atomic::Ordering::Relaxed);
    NCCL_MASK.store(mask, std::sync::atomic::Ordering::Release);
    NCCL_SUCCESS
}

/// `init` of an ABI of v5's signature (the communicator's id first): its number and activation mask.
macro_rules! init_v5_signature {
    ($($name:ident: $abi:expr, $mask:expr;)*) => {$(
        unsafe extern "C" fn $name(context: *mut *mut c_void, comm: u64, mask: *mut c_int, comm_name: *const c_char, nnodes: c_int, nranks: c_int, rank: c_int, _log: Logger) -> NcclResult {
            init_common($abi, context, mask, comm, comm_name, nnodes, nranks, rank, $mask)
        }
    )*};
}
init_v5_signature! {
    init_v7: 7, MASK_V7;
    init_v6: 6, MASK_V5;
    init_v5: 5, MASK_V5;
}

unsafe extern "C" fn init_v4(context: *mut *mut c_void, mask: *mut c_int, comm_name: *const c_char, comm: u64, nnodes: c_int, nranks: c_int, rank: c_int, _log: Logger) -> NcclResult {
    init_common(4, context, mask, comm, comm_name, nnodes, nranks, rank, MASK_V4)
}

/// The context's index, or `None` for a null context.
///
/// # Safety
/// `context` is null or a pointer `init` returned.
#[inline]
unsafe fn ctx_index(context: *mut c_void) -> Option<u32> {
    // SAFETY: non-null contexts are the `Ctx` boxes `init` leaked; they live for the process.
    (!context.is_null()).then(|| unsafe { (*context.cast::<Ctx>()).index })
}

#[inline]
fn push_start(context: *mut c_void, handle: *mut *mut c_void, parent: *mut c_void, rank: c_int, event: Event) -> NcclResult {
    let Some(runtime) = runtime::get() else { return NCCL_SUCCESS };
    // SAFETY: the context is null or one `init` gave NCCL.
    let Some(ctx) = (unsafe { ctx_index(context) }) else { return NCCL_SUCCESS };
    // A parent is pushed as its id: a slot's bit is the handle's alone.
    let slotted = parent as u64 & SLOT_TAG != 0;
    let parent = parent as u64 & !SLOT_TAG;
    // A proxy step, NCCL's most frequent event (a point-to-point call over the network has hundreds a call,
    // each on the proxy thread that paces the transfer): its handle is its operation's id, tagged, so that
    // its states name the operation whose peer and channel their bytes go to, with no record of their own
    // step. Only an operation's first step is pushed (its start is where the proxy's timing of the call
    // begins), and no step's stop (the fold reads nothing of it); a trace keeps every one. Under an
    // operation that holds a slot, its states are summed there (`record`).
    if let Event::ProxyStep { step } = event {
        let op = parent;
        if op != 0 && op & STEP_TAG == 0 {
            let id = op | STEP_TAG;
            if step == 0 || runtime.states_timed() {
                push(runtime, Record::Start { t_ns: runtime.record_ns(), id, ctx, parent: op, rank, event });
            }
            if !handle.is_null() {
                let handle_id = if slotted { id | SLOT_TAG } else { id };
                // SAFETY: NCCL passes a valid slot for the event's handle.
                unsafe { *handle = handle_id as *mut c_void };
            }
            return NCCL_SUCCESS;
        }
    }
    let id = runtime.id();
    // A proxy operation takes a slot for its steps, unless a trace is written (which keeps every step's
    // record) or another open operation holds its slot (then its steps push their records).
    let handle_id = if matches!(event, Event::ProxyOp { .. }) && !runtime.states_timed() && runtime.op_slots.claim(id) { id | SLOT_TAG } else { id };
    push(runtime, Record::Start { t_ns: runtime.record_ns(), id, ctx, parent, rank, event });
    if !handle.is_null() {
        // SAFETY: NCCL passes a valid slot for the event's handle.
        unsafe { *handle = handle_id as *mut c_void };
    }
    NCCL_SUCCESS
}

/// A collective's event from any ABI's `coll` member (v4's fields, which v5 and v7 extend): `$group` its
/// group, `$tag`, `$variant` and `$sym` v7's (0, none and false before).
macro_rules! coll_event {
    ($c:ident, $group:expr, $tag:expr, $variant:expr, $sym:expr) => {
        Event::Coll {
            seq: $c.seqNumber,
            func: name($c.func),
            count: $c.count as u64,
            datatype: name($c.datatype),
            root: $c.root,
            channels: $c.nChannels,
            warps: $c.nWarps,
            algo: name($c.algo),
            proto: name($c.proto),
            group: $group as u64,
            tag: $tag,
            variant: $variant,
            sym: $sym,
        }
    };
}

/// A point-to-point call's event from any ABI's `p2p` member, likewise.
macro_rules! p2p_event {
    ($p:ident, $group:expr, $tag:expr) => {
        Event::P2p { func: name($p.func), count: $p.count as u64, datatype: name($p.datatype), peer: $p.peer, channels: $p.nChannels, group: $group as u64, tag: $tag }
    };
}

/// An event of type `$type_` from union `$u`: the arms that differ by version first (`$arms`), then the
/// members every version lays out alike (group, proxy operation and step, kernel channel).
macro_rules! decode {
    ($type_:expr, $u:ident, { $($arms:tt)* }) => {
        match $type_ {
            $($arms)*
            PROFILE_GROUP => Event::Group,
            PROFILE_PROXY_OP => {
                let p = $u.proxyOp;
                Event::ProxyOp { channel: p.channelId, peer: p.peer, steps: p.nSteps, chunk: p.chunkSize, send: p.isSend != 0 }
            }
            PROFILE_PROXY_STEP => Event::ProxyStep { step: $u.proxyStep.step },
            PROFILE_KERNEL_CH => Event::KernelCh { channel: $u.kernelCh.channelId, ptimer: $u.kernelCh.pTimer },
            kind => Event::Other { kind },
        }
    };
}

/// One ABI's event descriptor, as the hot path reads it.
trait Descriptor {
    /// The event, its `parentObj` and its rank.
    ///
    /// # Safety
    /// `self` is NCCL's descriptor of this ABI, whose union member matches its type.
    unsafe fn read(&self) -> (Event, *mut c_void, c_int);
}

impl Descriptor for DescrV4 {
    /// v4 has no API events; a collective's and a point-to-point call's parent is their group.
    unsafe fn read(&self) -> (Event, *mut c_void, c_int) {
        let u = &self.u;
        // SAFETY (every union read): NCCL fills the member that `type_` names.
        let event = unsafe {
            decode!(u64::from(self.type_), u, {
                PROFILE_COLL => {
                    let c = u.coll;
                    coll_event!(c, self.parentObj, 0, Name::default(), false)
                }
                PROFILE_P2P => {
                    let p = u.p2p;
                    p2p_event!(p, self.parentObj, 0)
                }
            })
        };
        (event, self.parentObj, self.rank)
    }
}

/// v5's union members, whose group is `parentGroup`, with the API events.
///
/// # Safety
/// `u` is NCCL's v5 union (or v6's, which starts with v5's members at the same offsets) whose member matches
/// `type_`.
#[inline]
unsafe fn read_v5(type_: u64, u: &DescrUnionV5) -> Event {
    // SAFETY (every union read): NCCL fills the member that `type_` names.
    unsafe {
        decode!(type_, u, {
            PROFILE_COLL => {
                let c = u.coll;
                coll_event!(c, c.parentGroup, 0, Name::default(), false)
            }
            PROFILE_P2P => {
                let p = u.p2p;
                p2p_event!(p, p.parentGroup, 0)
            }
            PROFILE_COLL_API => {
                let c = u.collApi;
                Event::CollApi { func: name(c.func), count: c.count as u64, datatype: name(c.datatype), root: c.root }
            }
            PROFILE_P2P_API => {
                let p = u.p2pApi;
                Event::P2pApi { func: name(p.func), count: p.count as u64, datatype: name(p.datatype) }
            }
            PROFILE_GROUP_API => Event::GroupApi { depth: u.groupApi.groupDepth },
            PROFILE_KERNEL_LAUNCH => Event::KernelLaunch,
        })
    }
}

impl Descriptor for DescrV5 {
    unsafe fn read(&self) -> (Event, *mut c_void, c_int) {
        // SAFETY: the caller's promise.
        (unsafe { read_v5(self.type_, &self.u) }, self.parentObj, self.rank)
    }
}

impl Descriptor for DescrV6 {
    unsafe fn read(&self) -> (Event, *mut c_void, c_int) {
        // SAFETY: v6's union starts with v5's members at the same offsets (the union only grew), so for every
        // type v5 knows, v5's view of it is v6's; the caller promises the member matches the type.
        let event = unsafe {
            let u = &*std::ptr::addr_of!(self.u).cast::<DescrUnionV5>();
            read_v5(self.type_, u)
        };
        (event, self.parentObj, self.rank)
    }
}

impl Descriptor for DescrV7 {
    /// v7's members in v7's own layout (the tags come last in those that grew), with the kernel phases.
    unsafe fn read(&self) -> (Event, *mut c_void, c_int) {
        let u = &self.u;
        // SAFETY (every union read): NCCL fills the member that `type_` names.
        let event = unsafe {
            decode!(self.type_, u, {
                PROFILE_COLL => {
                    let c = u.coll;
                    coll_event!(c, c.parentGroup, c.userTag, name(c.kernelVariant), c.isSymColl)
                }
                PROFILE_P2P => {
                    let p = u.p2p;
                    p2p_event!(p, p.parentGroup, p.userTag)
                }
                PROFILE_COLL_API => {
                    let c = u.collApi;
                    Event::CollApi { func: name(c.func), count: c.count as u64, datatype: name(c.datatype), root: c.root }
                }
                PROFILE_P2P_API => {
                    let p = u.p2pApi;
                    Event::P2pApi { func: name(p.func), count: p.count as u64, datatype: name(p.datatype) }
                }
                PROFILE_GROUP_API => Event::GroupApi { depth: u.groupApi.groupDepth },
                PROFILE_KERNEL_LAUNCH => Event::KernelLaunch,
                PROFILE_KERNEL_PHASE => {
                    let k = u.kernelPhase;
                    Event::KernelPhase { channel: k.channelId, phase: k.phaseId, ptimer: k.pTimer }
                }
            })
        };
        (event, self.parentObj, self.rank)
    }
}

/// `startEvent` of every ABI, over its descriptor.
unsafe extern "C" fn start<D: Descriptor>(context: *mut c_void, handle: *mut *mut c_void, descr: *mut D) -> NcclResult {
    if descr.is_null() {
        return NCCL_SUCCESS;
    }
    if IDLE.load(std::sync::atomic::Ordering::Relaxed) {
        // Before the descriptor is read: idle, the plugin does none of its own work.
        if !handle.is_null() {
            // SAFETY: NCCL passes a valid slot for the event's handle.
            unsafe { *handle = IDLE_HANDLE as *mut c_void };
        }
        return NCCL_SUCCESS;
    }
    // SAFETY: NCCL passes a valid descriptor of the table's ABI for the call's duration, whose union member
    // matches its type.
    let (event, parent, rank) = unsafe { (*descr).read() };
    push_start(context, handle, parent, rank, event)
}

unsafe extern "C" fn stop(handle: *mut c_void) -> NcclResult {
    if handle.is_null() || handle as u64 == IDLE_HANDLE {
        return NCCL_SUCCESS;
    }
    if let Some(runtime) = runtime::get() {
        let id = handle as u64 & !SLOT_TAG;
        // A proxy step's stop is left out but where a trace is written (the fold reads nothing of it).
        if id & STEP_TAG == 0 || runtime.states_timed() {
            let t_ns = runtime.record_ns();
            // An operation with a slot: what its steps came to, just before its stop.
            if handle as u64 & SLOT_TAG != 0 && id & STEP_TAG == 0 {
                if let Some(s) = runtime.op_slots.release(id) {
                    push(runtime, Record::OpSteps { t_ns, id, bytes: s.bytes, steps: s.steps, handed_ns: s.handed_ns, peer_waits: s.peer_waits });
                }
            }
            push(runtime, Record::Stop { t_ns, id });
        }
    }
    NCCL_SUCCESS
}

unsafe extern "C" fn record(handle: *mut c_void, state: c_int, args: *mut StateArgs) -> NcclResult {
    if handle.is_null() || handle as u64 == IDLE_HANDLE {
        return NCCL_SUCCESS;
    }
    let Some(runtime) = runtime::get() else { return NCCL_SUCCESS };
    let timer = state == STATE_KERNEL_CH_STOP || state == STATE_KERNEL_PHASE_STOP;
    let sized = crate::abi::carries_size(state);
    // A state the fold reads nothing of (a step's waits that carry no size of their own, other than a
    // send's hand-over) is not pushed, unless a trace is written: fewer records on NCCL's proxy thread.
    if !(timer || sized || crate::abi::send_handed(state) || runtime.states_timed()) {
        return NCCL_SUCCESS;
    }
    // A trace keeps every step state's transSize as NCCL gave it (stale ones included: the fold reads only
    // the sized states').
    let step = (STATE_PROXY_STEP_SEND_GPU_WAIT..=STATE_PROXY_STEP_RECV_GPU_WAIT).contains(&state) || state == STATE_PROXY_STEP_SEND_PEER_WAIT_V4;
    let arg = if (timer || sized || (runtime.states_timed() && step)) && !args.is_null() {
        // SAFETY: NCCL passes the state's arguments (zero-initialised, then the member for the state set):
        // a proxy step's transSize for the step states, the kernel's pTimer for KernelChStop and (v7)
        // KernelPhaseStop; both are 8 bytes at the union's start.
        unsafe {
            if timer {
                (*args).kernelCh.pTimer
            } else {
                (*args).proxyStep.transSize as u64
            }
        }
    } else {
        0
    };
    // A send step's hand-over by the GPU is when the call's sends were done for the GPU, where the fold
    // ends a call (fold.rs): one clock read a send step; the other states only when a trace is written.
    let t_ns = if runtime.states_timed() || crate::abi::send_handed(state) { runtime.record_ns() } else { 0 };
    let id = handle as u64;
    // A step of an operation with a slot: summed there, no record (its operation's stop pushes the sum).
    if id & SLOT_TAG != 0 && id & STEP_TAG != 0 && runtime.op_slots.step(id & !(SLOT_TAG | STEP_TAG), state, arg, t_ns) {
        return NCCL_SUCCESS;
    }
    push(runtime, Record::State { t_ns, id: id & !SLOT_TAG, state, arg });
    NCCL_SUCCESS
}

unsafe extern "C" fn finalize(context: *mut c_void) -> NcclResult {
    // SAFETY: the context is null or one `init` gave NCCL. The `Ctx` is left allocated (a few bytes per
    // communicator): a proxy thread could still hold it.
    if let (Some(runtime), Some(ctx)) = (runtime::get(), unsafe { ctx_index(context) }) {
        runtime.finalize(ctx);
    }
    NCCL_SUCCESS
}
