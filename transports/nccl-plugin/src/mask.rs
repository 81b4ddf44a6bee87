//! NCCL's activation mask: which events the plugin asks NCCL for, and when it leaves the kernels' channel
//! events out of a point-to-point group.
//!
//! NCCL (2.28) makes a kernel's channel events through profiler work of its own: each work of the kernel
//! writes its start and end to host memory, and a proxy operation per channel polls them. Measured inside
//! one PyTorch job (docs/watch.md, "Where point-to-point's cost lies"), that is what a send/receive costs
//! with the plugin on (+2.4 to +5.5 % at 16 MiB), and nothing else the plugin asks for is. A point-to-point
//! call that goes through the proxy (the network, NCCL's sockets) is timed by the proxy and never by its
//! kernels (the fold's timing rule), so there the kernels' events buy nothing. The rule:
//!
//! - NCCL reads the mask at every API call, before it calls the plugin for it (2.28.3 and 2.28.9:
//!   `ncclProfilerStartGroupApiEvent`, once per call). The mask is changed only when an outermost group
//!   ends (its `GroupApi` event stops: a lone call is its own group), so every call of a group has the same
//!   mask: a work of the kernel whose send asked for the channel events and whose receive did not would
//!   leave NCCL's poller waiting on a counter the kernel never writes.
//! - After a group of point-to-point calls only, the next group is asked without the kernels' events
//!   (`KernelCh` and v7's `KernelPhase`); after any other, with them. Calls repeat: a training step's
//!   alltoalls follow one another, and a collective after them has its events again from the next group.
//! - Only once the fold has seen this process's point-to-point calls timed by the proxy and no call of any
//!   kind that the proxy did not time (NVLink, shared memory: those need their kernels). A call then left
//!   without its kernels' events and with no proxy either is given up on and turns the rule off for good.
//! - Only while NCCL is called from one thread: the mask is NCCL's one int for the process, and another
//!   thread's group could be half-way through when it changes.
//!
//! Every `CollApi` and `P2pApi` event records whether its call's mask had the channel events, so the fold
//! waits for kernels only where NCCL will report them. v4 (no API events) keeps them always.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, AtomicU8, Ordering::Relaxed};

use crate::abi::{PROFILE_KERNEL_CH, PROFILE_KERNEL_PHASE};

/// The events a point-to-point group is asked without, where the rule allows.
pub const KERNEL_BITS: u64 = PROFILE_KERNEL_CH | PROFILE_KERNEL_PHASE;

/// What `init` asked for (the ABI's events).
static ASKED: AtomicU64 = AtomicU64::new(0);
/// What the cost A/B keeps of it (`efatop_profiler_events`; all unless it says).
static KEEP: AtomicU64 = AtomicU64::new(u64::MAX);
/// The mask as last set: what NCCL reads for the calls until the next change.
static CURRENT: AtomicU64 = AtomicU64::new(0);
/// Whether the next group may go without the kernels' events: the fold's finding ([`learned`]).
static ALLOWED: AtomicBool = AtomicBool::new(false);
/// What the current outermost group has called: [`P2P`], [`COLL`].
static GROUP: AtomicU8 = AtomicU8::new(0);
const P2P: u8 = 1;
const COLL: u8 = 2;
/// The thread that called NCCL (an address of a thread-local, 0: none yet), and whether a second one has.
static CALLER: AtomicUsize = AtomicUsize::new(0);
static MANY_CALLERS: AtomicBool = AtomicBool::new(false);

thread_local! {
    static ME: u8 = const { 0 };
}

/// `init` asked NCCL for `bits`: the mask to set now (every event asked for, less what the A/B leaves out).
pub fn asked(bits: u64) -> u64 {
    ASKED.store(bits, Relaxed);
    let mask = bits & KEEP.load(Relaxed);
    CURRENT.store(mask, Relaxed);
    mask
}

/// The A/B keeps `keep` of what was asked: the mask to set now (with the kernels' events).
pub fn keep(keep: u64) -> u64 {
    KEEP.store(keep, Relaxed);
    let mask = ASKED.load(Relaxed) & keep;
    CURRENT.store(mask, Relaxed);
    mask
}

/// An outermost group starts (its `GroupApi` event; NCCL gives none for nested ones).
pub fn group_started() {
    let me = ME.with(|m| std::ptr::from_ref(m) as usize);
    match CALLER.compare_exchange(0, me, Relaxed, Relaxed) {
        Ok(_) => {}
        Err(first) if first != me => MANY_CALLERS.store(true, Relaxed),
        Err(_) => {}
    }
    GROUP.store(0, Relaxed);
}

/// A call of the group (its `CollApi` or `P2pApi` event): whether its mask has the kernels' channel events.
pub fn api_call(p2p: bool) -> bool {
    GROUP.fetch_or(if p2p { P2P } else { COLL }, Relaxed);
    CURRENT.load(Relaxed) & PROFILE_KERNEL_CH != 0
}

/// The outermost group ended: the mask for the next one, where it changes.
pub fn group_ended() -> Option<u64> {
    if PLAYBACK.load(Relaxed) {
        return None;
    }
    let full = ASKED.load(Relaxed) & KEEP.load(Relaxed);
    let bare = GROUP.load(Relaxed) == P2P && ALLOWED.load(Relaxed) && !MANY_CALLERS.load(Relaxed);
    let mask = if bare { full & !KERNEL_BITS } else { full };
    (CURRENT.swap(mask, Relaxed) != mask).then_some(mask)
}

/// Set by the trace player (`efatop_profiler_playback_kernels`): its calls are as recorded.
static PLAYBACK: AtomicBool = AtomicBool::new(false);

/// The trace player's next calls had the kernels' events (`on`) or not, as the trace recorded them; the
/// rule is off from then on in this process (the mask is the recording's).
pub fn playback_kernels(on: bool) {
    PLAYBACK.store(true, Relaxed);
    let full = ASKED.load(Relaxed) & KEEP.load(Relaxed);
    CURRENT.store(if on { full } else { full & !KERNEL_BITS }, Relaxed);
}

/// The fold's finding: point-to-point groups may go without the kernels' events (see the module's doc).
pub fn learned(allowed: bool) {
    ALLOWED.store(allowed, Relaxed);
}

/// Whether point-to-point groups may now go without the kernels' events (the rule's state, for the trace
/// and the tests).
pub fn allowed() -> bool {
    ALLOWED.load(Relaxed) && !MANY_CALLERS.load(Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{PROFILE_COLL, PROFILE_P2P, PROFILE_PROXY_OP};

    /// The statics are the process's: the tests of this module run as one.
    #[test]
    fn a_point_to_point_group_goes_bare_only_where_allowed_and_a_collective_brings_the_kernels_back() {
        let bits = PROFILE_COLL | PROFILE_P2P | PROFILE_PROXY_OP | PROFILE_KERNEL_CH;
        assert_eq!(asked(bits), bits);
        // Not yet allowed: a point-to-point group keeps its kernels.
        group_started();
        assert!(api_call(true));
        assert_eq!(group_ended(), None);
        learned(true);
        // Allowed: after a point-to-point group, the next goes without them, every call of it alike.
        group_started();
        assert!(api_call(true));
        assert!(api_call(true));
        assert_eq!(group_ended(), Some(bits & !KERNEL_BITS));
        group_started();
        assert!(!api_call(true));
        assert!(!api_call(true));
        assert_eq!(group_ended(), None);
        // A collective comes bare (the previous group was point-to-point); the next group has them again.
        group_started();
        assert!(!api_call(false));
        assert_eq!(group_ended(), Some(bits));
        // A group with both keeps them.
        group_started();
        assert!(api_call(true));
        assert!(api_call(false));
        assert_eq!(group_ended(), None);
        // The A/B's settings win: everything off stays off.
        assert_eq!(keep(0), 0);
        group_started();
        assert!(!api_call(true));
        assert_eq!(group_ended(), None);
        assert_eq!(keep(u64::MAX), bits);
        // Given up (a call with neither kernels nor proxy): kernels for every group again.
        group_started();
        api_call(true);
        assert_eq!(group_ended(), Some(bits & !KERNEL_BITS));
        learned(false);
        group_started();
        assert!(!api_call(true));
        assert_eq!(group_ended(), Some(bits));
        // A second thread calling NCCL turns the rule off.
        learned(true);
        std::thread::spawn(group_started).join().unwrap();
        assert!(!allowed());
        group_started();
        api_call(true);
        assert_eq!(group_ended(), None);
    }
}
