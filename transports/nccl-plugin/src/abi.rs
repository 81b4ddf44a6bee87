//! NCCL's profiler plugin ABI, v4 to v7, written from NCCL's headers: v4–v6 from 2.30.7's (tag v2.30.7-1:
//! `src/include/plugin/nccl_profiler.h`, `src/include/plugin/profiler/profiler_v{4,5,6}.h`), v7 from
//! `profiler_v7.h` and `nccl_profiler.h` at NVIDIA/nccl 8898068 (NCCL 2.31). Layouts only; what is done with
//! them is in [`crate::ffi`].
//!
//! - v4 (NCCL 2.25–2.26, and later NCCLs through their v4 adapter): `type` is one byte; `init` takes the
//!   communicator's name before its hash; a collective's and a point-to-point's parent is their group.
//! - v5 (2.27–2.28): `type` is 64 bits; `init` takes the communicator id first; API events (group,
//!   collective, point-to-point, kernel launch) parent the collective and point-to-point events, whose
//!   group is in `parentGroup`.
//! - v6 (2.29+): v5 plus copy-engine collective events (not folded here).
//! - v7 (2.31+): v6's callbacks and `init`; a per-call `userTag` on the API, collective, point-to-point and
//!   copy-engine descriptors (0: untagged), the kernel variant (`kernelVariant`, `isSymColl`) on a
//!   collective, and the kernel-phase event (`ncclProfileKernelPhase`, bit 15): a child of a kernel channel
//!   (NCCL turns kernel channels on with it) whose three phases, 0 initial sync, 1 compute, 2 final sync,
//!   start and stop on the GPU's global timer (the stop's `pTimer` in the kernel channel's state argument,
//!   state `ncclProfilerKernelPhaseStop`, 31). Only symmetric kernels have phases.

#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_void};

/// `ncclResult_t`: 0 is success.
pub type NcclResult = c_int;
pub const NCCL_SUCCESS: NcclResult = 0;

// Event types (`type` of a descriptor), the activation mask's bits.
pub const PROFILE_GROUP: u64 = 1 << 0;
pub const PROFILE_COLL: u64 = 1 << 1;
pub const PROFILE_P2P: u64 = 1 << 2;
pub const PROFILE_PROXY_OP: u64 = 1 << 3;
pub const PROFILE_PROXY_STEP: u64 = 1 << 4;
pub const PROFILE_PROXY_CTRL: u64 = 1 << 5;
pub const PROFILE_KERNEL_CH: u64 = 1 << 6;
pub const PROFILE_NET_PLUGIN: u64 = 1 << 7;
pub const PROFILE_GROUP_API: u64 = 1 << 8;
pub const PROFILE_COLL_API: u64 = 1 << 9;
pub const PROFILE_P2P_API: u64 = 1 << 10;
pub const PROFILE_KERNEL_LAUNCH: u64 = 1 << 11;
/// v7: a kernel channel's barrier phases.
pub const PROFILE_KERNEL_PHASE: u64 = 1 << 15;

// Event states (`ncclProfilerEventState_t`) this plugin reads.
pub const STATE_PROXY_STEP_SEND_GPU_WAIT: c_int = 8;
pub const STATE_PROXY_STEP_SEND_WAIT: c_int = 9;
/// Whether a proxy step's `state` is the first after a send step waited for the GPU: the GPU handed the
/// step's bytes over (v4's peer wait, or the send wait itself).
pub fn send_handed(state: c_int) -> bool {
    state == STATE_PROXY_STEP_SEND_PEER_WAIT_V4 || state == STATE_PROXY_STEP_SEND_WAIT
}
/// A proxy operation's hand-over by the GPU so far (`handed`, and whether a step reported it as v4's peer wait),
/// updated by one of its steps' states at `t_ns` (0: not timed, no change). A step's hand-over is its first such
/// state: the peer wait where NCCL reports one (2.28 still reports it before each send wait), else the send
/// wait; the operation's is its last step's. The first peer wait replaces what the send waits before it said,
/// and after it only peer waits count. The fold (every step's records) and the hot path's slots
/// (`crate::opsteps`) both go by this.
pub fn hand_over(state: c_int, t_ns: u64, peer_waits: &mut bool, handed: &mut Option<u64>) {
    if !send_handed(state) || t_ns == 0 {
        return;
    }
    let peer_wait = state == STATE_PROXY_STEP_SEND_PEER_WAIT_V4;
    if peer_wait && !*peer_waits {
        *peer_waits = true;
        *handed = Some(t_ns);
    } else if peer_wait || !*peer_waits {
        *handed = Some(handed.map_or(t_ns, |h| h.max(t_ns)));
    }
}
/// Whether a proxy step's `state` carries that step's own size in its `transSize`: NCCL (2.27 on,
/// `transport/net.cc`) sets `sub->transSize` just before a send step's SendWait and a receive step's
/// RecvFlushWait. Every other step state reads the same field while it still holds an earlier step's size,
/// or an earlier operation's (the first step of a small call after a large one): counted, a two-rank NCCL
/// 2.28.3 sweep read 18-23 % more bytes than were moved, and one rank's sends no longer matched the other's
/// receives.
pub fn carries_size(state: c_int) -> bool {
    state == STATE_PROXY_STEP_SEND_WAIT || state == STATE_PROXY_STEP_RECV_FLUSH_WAIT
}
pub const STATE_PROXY_STEP_RECV_WAIT: c_int = 10;
pub const STATE_PROXY_STEP_RECV_FLUSH_WAIT: c_int = 11;
pub const STATE_PROXY_STEP_RECV_GPU_WAIT: c_int = 12;
pub const STATE_PROXY_STEP_SEND_PEER_WAIT_V4: c_int = 20;
pub const STATE_KERNEL_CH_STOP: c_int = 22;
/// v7: a kernel phase's end, its `pTimer` in the kernel channel's argument.
pub const STATE_KERNEL_PHASE_STOP: c_int = 31;

/// v7's `phaseId`s.
pub const PHASE_INITIAL_SYNC: u8 = 0;
pub const PHASE_COMPUTE: u8 = 1;
pub const PHASE_FINAL_SYNC: u8 = 2;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct GroupApi {
    pub graphCaptured: bool,
    pub groupDepth: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollApi {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub root: c_int,
    pub stream: *mut c_void,
    pub graphCaptured: bool,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pApi {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub stream: *mut c_void,
    pub graphCaptured: bool,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelLaunch {
    pub stream: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV4 {
    pub seqNumber: u64,
    pub func: *const c_char,
    pub sendBuff: *const c_void,
    pub recvBuff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub nChannels: u8,
    pub nWarps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV5 {
    pub seqNumber: u64,
    pub func: *const c_char,
    pub sendBuff: *const c_void,
    pub recvBuff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub nChannels: u8,
    pub nWarps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
    pub parentGroup: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV4 {
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
    pub nChannels: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV5 {
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
    pub nChannels: u8,
    pub parentGroup: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyOp {
    /// `ncclPid_t`: `pid_t` on Linux.
    pub pid: libc::pid_t,
    pub channelId: u8,
    pub peer: c_int,
    pub nSteps: c_int,
    pub chunkSize: c_int,
    pub isSend: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyStep {
    pub step: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelCh {
    pub channelId: u8,
    pub pTimer: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetPlugin {
    pub id: i64,
    pub data: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeColl {
    pub seqNumber: u64,
    pub func: *const c_char,
    pub sendBuff: *const c_void,
    pub recvBuff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub syncStrategy: *const c_char,
    pub intraBatchSync: bool,
    pub batchSize: u32,
    pub numBatches: u32,
    pub ceSeqNum: u32,
    pub stream: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeCollSync {
    pub isComplete: bool,
    pub nRanks: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeCollBatch {
    pub numOps: c_int,
    pub totalBytes: usize,
    pub useIntraSync: bool,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV4 {
    pub coll: CollV4,
    pub p2p: P2pV4,
    pub proxyOp: ProxyOp,
    pub proxyStep: ProxyStep,
    pub kernelCh: KernelCh,
    pub netPlugin: NetPlugin,
}

/// `ncclProfilerEventDescr_v4_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DescrV4 {
    pub type_: u8,
    pub parentObj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnionV4,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV5 {
    pub groupApi: GroupApi,
    pub collApi: CollApi,
    pub p2pApi: P2pApi,
    pub kernelLaunch: KernelLaunch,
    pub coll: CollV5,
    pub p2p: P2pV5,
    pub proxyOp: ProxyOp,
    pub proxyStep: ProxyStep,
    pub kernelCh: KernelCh,
    pub netPlugin: NetPlugin,
}

/// `ncclProfilerEventDescr_v5_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DescrV5 {
    pub type_: u64,
    pub parentObj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnionV5,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV6 {
    pub groupApi: GroupApi,
    pub collApi: CollApi,
    pub p2pApi: P2pApi,
    pub kernelLaunch: KernelLaunch,
    pub coll: CollV5,
    pub p2p: P2pV5,
    pub proxyOp: ProxyOp,
    pub proxyStep: ProxyStep,
    pub kernelCh: KernelCh,
    pub netPlugin: NetPlugin,
    pub ceColl: CeColl,
    pub ceCollSync: CeCollSync,
    pub ceCollBatch: CeCollBatch,
}

/// `ncclProfilerEventDescr_v6_t`: v5's layout for every event v5 has (the union only grows).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DescrV6 {
    pub type_: u64,
    pub parentObj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnionV6,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct StepArgs {
    pub transSize: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CtrlArgs {
    pub appendedProxyOps: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetArgs {
    pub data: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelChArgs {
    pub pTimer: u64,
}

/// `ncclProfilerEventStateArgs_v4_t` to `_v7_t` (one layout; v7's kernel phase stop uses `kernelCh`).
#[repr(C)]
#[derive(Clone, Copy)]
pub union StateArgs {
    pub proxyStep: StepArgs,
    pub proxyCtrl: CtrlArgs,
    pub netPlugin: NetArgs,
    pub kernelCh: KernelChArgs,
}

/// v7's `collApi`: v5's and a tag.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollApiV7 {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub root: c_int,
    pub stream: *mut c_void,
    pub graphCaptured: bool,
    pub userTag: u64,
}

/// v7's `p2pApi`: v5's and a tag.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pApiV7 {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub stream: *mut c_void,
    pub graphCaptured: bool,
    pub userTag: u64,
}

/// v7's `coll`: v5's, the kernel's variant, whether it is a symmetric-memory kernel, and a tag.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV7 {
    pub seqNumber: u64,
    pub func: *const c_char,
    pub sendBuff: *const c_void,
    pub recvBuff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub nChannels: u8,
    pub nWarps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
    pub parentGroup: *mut c_void,
    pub kernelVariant: *const c_char,
    pub isSymColl: bool,
    pub userTag: u64,
}

/// v7's `p2p`: v5's and a tag.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV7 {
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
    pub nChannels: u8,
    pub parentGroup: *mut c_void,
    pub userTag: u64,
}

/// v7's `ceColl`: v6's and a tag.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeCollV7 {
    pub base: CeColl,
    pub userTag: u64,
}

/// v7's `kernelPhase`: a kernel channel's phase and its start on the GPU's global timer (ns).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelPhase {
    pub channelId: u8,
    pub phaseId: u8,
    pub phaseName: *const c_char,
    pub pTimer: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV7 {
    pub groupApi: GroupApi,
    pub collApi: CollApiV7,
    pub p2pApi: P2pApiV7,
    pub kernelLaunch: KernelLaunch,
    pub coll: CollV7,
    pub p2p: P2pV7,
    pub proxyOp: ProxyOp,
    pub proxyStep: ProxyStep,
    pub kernelCh: KernelCh,
    pub netPlugin: NetPlugin,
    pub ceColl: CeCollV7,
    pub ceCollSync: CeCollSync,
    pub ceCollBatch: CeCollBatch,
    pub kernelPhase: KernelPhase,
}

/// `ncclProfilerEventDescr_v7_t`. Not v5's layout: the tags come last in the members that have one (the
/// API, collective and point-to-point members grew), so every member is read through v7's own view.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DescrV7 {
    pub type_: u64,
    pub parentObj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnionV7,
}

/// `ncclDebugLogger_t` (variadic; never called here).
pub type Logger = *const c_void;

pub type InitV4 = unsafe extern "C" fn(*mut *mut c_void, *mut c_int, *const c_char, u64, c_int, c_int, c_int, Logger) -> NcclResult;
pub type InitV5 = unsafe extern "C" fn(*mut *mut c_void, u64, *mut c_int, *const c_char, c_int, c_int, c_int, Logger) -> NcclResult;
pub type StartV4 = unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut DescrV4) -> NcclResult;
pub type StartV5 = unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut DescrV5) -> NcclResult;
pub type StartV6 = unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut DescrV6) -> NcclResult;
pub type StartV7 = unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut DescrV7) -> NcclResult;
pub type Stop = unsafe extern "C" fn(*mut c_void) -> NcclResult;
pub type Record = unsafe extern "C" fn(*mut c_void, c_int, *mut StateArgs) -> NcclResult;
pub type Finalize = unsafe extern "C" fn(*mut c_void) -> NcclResult;

/// `ncclProfiler_v4_t`.
#[repr(C)]
pub struct ProfilerV4 {
    pub name: *const c_char,
    pub init: InitV4,
    pub startEvent: StartV4,
    pub stopEvent: Stop,
    pub recordEventState: Record,
    pub finalize: Finalize,
}

/// `ncclProfiler_v5_t`.
#[repr(C)]
pub struct ProfilerV5 {
    pub name: *const c_char,
    pub init: InitV5,
    pub startEvent: StartV5,
    pub stopEvent: Stop,
    pub recordEventState: Record,
    pub finalize: Finalize,
}

/// `ncclProfiler_v6_t`.
#[repr(C)]
pub struct ProfilerV6 {
    pub name: *const c_char,
    pub init: InitV5,
    pub startEvent: StartV6,
    pub stopEvent: Stop,
    pub recordEventState: Record,
    pub finalize: Finalize,
}

/// `ncclProfiler_v7_t`: v6's callbacks over v7's descriptor.
#[repr(C)]
pub struct ProfilerV7 {
    pub name: *const c_char,
    pub init: InitV5,
    pub startEvent: StartV7,
    pub stopEvent: Stop,
    pub recordEventState: Record,
    pub finalize: Finalize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn v7_layouts_are_the_headers_on_x86_64() {
        // Offsets as a C compiler lays out profiler_v7.h's structs (LP64: pointers and size_t 8 bytes).
        assert_eq!((offset_of!(CollV7, parentGroup), offset_of!(CollV7, kernelVariant), offset_of!(CollV7, isSymColl), offset_of!(CollV7, userTag)), (80, 88, 96, 104));
        assert_eq!(size_of::<CollV7>(), 112);
        assert_eq!((offset_of!(P2pV7, parentGroup), offset_of!(P2pV7, userTag)), (40, 48));
        assert_eq!((offset_of!(CollApiV7, graphCaptured), offset_of!(CollApiV7, userTag)), (40, 48));
        assert_eq!((offset_of!(P2pApiV7, graphCaptured), offset_of!(P2pApiV7, userTag)), (32, 40));
        assert_eq!((offset_of!(KernelPhase, phaseId), offset_of!(KernelPhase, phaseName), offset_of!(KernelPhase, pTimer)), (1, 8, 16));
        assert_eq!(offset_of!(CeCollV7, userTag), 88);
        assert_eq!(offset_of!(DescrV7, u), 24);
        assert_eq!(size_of::<DescrUnionV7>(), 112);
        // The members v5 had keep their offsets where they did not grow.
        assert_eq!(offset_of!(CollV7, proto), offset_of!(CollV5, proto));
    }

    #[test]
    fn v4_to_v6_layouts_are_the_headers_on_x86_64() {
        // profiler_v4.h, _v5.h and _v6.h as a C compiler lays them out (LP64). The player and the plugin read
        // and write these members by name: a field moved here would pass every playback and fail under NCCL.
        assert_eq!((offset_of!(CollV4, nChannels), offset_of!(CollV4, nWarps), offset_of!(CollV4, algo), offset_of!(CollV4, proto), size_of::<CollV4>()), (56, 57, 64, 72, 80));
        assert_eq!((offset_of!(CollV5, parentGroup), size_of::<CollV5>()), (80, 88));
        assert_eq!((offset_of!(P2pV4, peer), offset_of!(P2pV4, nChannels), size_of::<P2pV4>()), (32, 36, 40));
        assert_eq!((offset_of!(P2pV5, parentGroup), size_of::<P2pV5>()), (40, 48));
        assert_eq!((offset_of!(ProxyOp, channelId), offset_of!(ProxyOp, peer), offset_of!(ProxyOp, isSend), size_of::<ProxyOp>()), (4, 8, 20, 24));
        assert_eq!((offset_of!(KernelCh, pTimer), size_of::<KernelCh>()), (8, 16));
        assert_eq!((offset_of!(CollApi, graphCaptured), size_of::<CollApi>()), (40, 48));
        assert_eq!((offset_of!(P2pApi, graphCaptured), size_of::<P2pApi>()), (32, 40));
        assert_eq!((offset_of!(GroupApi, groupDepth), size_of::<GroupApi>()), (4, 8));
        assert_eq!((offset_of!(CeColl, syncStrategy), offset_of!(CeColl, batchSize), offset_of!(CeColl, stream), size_of::<CeColl>()), (56, 68, 80, 88));
        assert_eq!((offset_of!(CeCollBatch, totalBytes), size_of::<CeCollBatch>()), (8, 24));
        assert_eq!((size_of::<DescrUnionV4>(), size_of::<DescrUnionV5>(), size_of::<DescrUnionV6>()), (80, 88, 88));
        for (parent, rank, u) in [
            (offset_of!(DescrV4, parentObj), offset_of!(DescrV4, rank), offset_of!(DescrV4, u)),
            (offset_of!(DescrV5, parentObj), offset_of!(DescrV5, rank), offset_of!(DescrV5, u)),
            (offset_of!(DescrV6, parentObj), offset_of!(DescrV6, rank), offset_of!(DescrV6, u)),
        ] {
            assert_eq!((parent, rank, u), (8, 16, 24));
        }
        assert_eq!((size_of::<DescrV4>(), size_of::<DescrV5>(), size_of::<DescrV6>(), size_of::<DescrV7>()), (104, 112, 112, 136));
        assert_eq!((size_of::<StateArgs>(), offset_of!(KernelChArgs, pTimer)), (8, 0));
        // The tables: a name and five functions, in the headers' order, in every version.
        for (size, init, start, stop, record, finalize) in [
            (size_of::<ProfilerV4>(), offset_of!(ProfilerV4, init), offset_of!(ProfilerV4, startEvent), offset_of!(ProfilerV4, stopEvent), offset_of!(ProfilerV4, recordEventState), offset_of!(ProfilerV4, finalize)),
            (size_of::<ProfilerV5>(), offset_of!(ProfilerV5, init), offset_of!(ProfilerV5, startEvent), offset_of!(ProfilerV5, stopEvent), offset_of!(ProfilerV5, recordEventState), offset_of!(ProfilerV5, finalize)),
            (size_of::<ProfilerV6>(), offset_of!(ProfilerV6, init), offset_of!(ProfilerV6, startEvent), offset_of!(ProfilerV6, stopEvent), offset_of!(ProfilerV6, recordEventState), offset_of!(ProfilerV6, finalize)),
            (size_of::<ProfilerV7>(), offset_of!(ProfilerV7, init), offset_of!(ProfilerV7, startEvent), offset_of!(ProfilerV7, stopEvent), offset_of!(ProfilerV7, recordEventState), offset_of!(ProfilerV7, finalize)),
        ] {
            assert_eq!((size, init, start, stop, record, finalize), (48, 8, 16, 24, 32, 40));
        }
    }
}
