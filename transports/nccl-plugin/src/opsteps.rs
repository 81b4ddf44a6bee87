//! A proxy operation's steps summed where they happen, on NCCL's proxy thread, into one record at the
//! operation's end.
//!
//! A point-to-point call over the network has over a hundred proxy steps a rank at 16 MiB (NCCL's network
//! chunks), each with a state that carries its size and, for a send, one that says the GPU handed it over;
//! until 2026-12-08 each of those pushed a record of its own into the ring (about 150 bytes, the size of the
//! largest record, written into a 10 MB ring whose lines have long left the cache), on the thread that paces
//! the transfer. Under MPS, 1,000 pairs of 10-call blocks read the plugin's cost at +1.16 % on a 16 MiB
//! alltoall and on a send/recv (docs/watch.md, the twenty-fourth session), above the 1 % it is held to.
//!
//! Now an operation's steps add their bytes, their count and the latest hand-over into a slot of a fixed table
//! (indexed by the operation's id; claimed when the operation starts, given back when it stops), and the
//! operation's stop pushes them as one [`crate::record::Record::OpSteps`] just before its own stop record: the
//! same figures the fold read from every step's record (`fold.rs`'s tests play real traces both ways), a few
//! records a call where there were hundreds. An operation whose slot is held by another still open (more
//! operations open at once than the table has slots, sharing an index) pushes its steps' records as before; a
//! trace (`EFATOP_PROFILER_TRACE`) keeps every step's record and claims no slot.
//!
//! The table is made once, with the runtime; the hot path only loads and stores atomics on a slot that NCCL's
//! one proxy thread for the operation owns from its start to its stop. Never a lock, a system call or an
//! allocation.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::abi::{carries_size, hand_over, send_handed};

/// Slots in the table: operations open at once beyond it (sharing an index with one still open) fall back
/// to a record a step. 256 KB.
pub const OP_SLOTS: usize = 1 << 12;

/// One operation's steps so far; `id` 0 is a free slot.
#[derive(Default)]
#[repr(align(64))]
struct Slot {
    id: AtomicU64,
    bytes: AtomicU64,
    steps: AtomicU64,
    /// The latest hand-over by the GPU (ns; 0: none yet).
    handed: AtomicU64,
    peer_waits: AtomicBool,
}

/// What an operation's steps came to, pushed at its stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Summed {
    /// The sizes the steps' sized states carried, and how many such states there were.
    pub bytes: u64,
    pub steps: u64,
    /// A send's hand-over (`abi::hand_over`): its last step's; 0 for none.
    pub handed_ns: u64,
    /// A step reported the hand-over as v4's peer wait.
    pub peer_waits: bool,
}

pub struct OpSlots {
    slots: Box<[Slot]>,
}

impl OpSlots {
    /// A table of `n` slots (at least 1).
    pub fn new(n: usize) -> Self {
        Self { slots: (0..n.max(1)).map(|_| Slot::default()).collect() }
    }

    #[inline]
    fn slot(&self, id: u64) -> &Slot {
        &self.slots[(id % self.slots.len() as u64) as usize]
    }

    /// Takes the slot of operation `id` (never 0) as it starts; false when another open operation holds it.
    #[inline]
    pub fn claim(&self, id: u64) -> bool {
        self.slot(id).id.compare_exchange(0, id, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    /// A state of a step of operation `op`, at `t_ns` (0: not timed): its size and hand-over added to the
    /// operation's slot. False when the slot is not `op`'s (then the caller pushes the state as a record).
    #[inline]
    pub fn step(&self, op: u64, state: i32, size: u64, t_ns: u64) -> bool {
        let slot = self.slot(op);
        if slot.id.load(Ordering::Relaxed) != op {
            return false;
        }
        // The fold's rule for a hand-over (`abi::hand_over`). One writer, the operation's proxy thread: loads
        // and stores, no read-modify-write.
        if send_handed(state) && t_ns > 0 {
            let mut waits = slot.peer_waits.load(Ordering::Relaxed);
            let mut handed = Some(slot.handed.load(Ordering::Relaxed)).filter(|&h| h > 0);
            hand_over(state, t_ns, &mut waits, &mut handed);
            slot.peer_waits.store(waits, Ordering::Relaxed);
            slot.handed.store(handed.unwrap_or(0), Ordering::Relaxed);
        }
        if carries_size(state) {
            slot.bytes.store(slot.bytes.load(Ordering::Relaxed) + size, Ordering::Relaxed);
            slot.steps.store(slot.steps.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
        true
    }

    /// Operation `id` stops: what its steps came to, its slot freed; `None` when it held none.
    #[inline]
    pub fn release(&self, id: u64) -> Option<Summed> {
        let slot = self.slot(id);
        if slot.id.load(Ordering::Acquire) != id {
            return None;
        }
        let summed = Summed {
            bytes: slot.bytes.swap(0, Ordering::Relaxed),
            steps: slot.steps.swap(0, Ordering::Relaxed),
            handed_ns: slot.handed.swap(0, Ordering::Relaxed),
            peer_waits: slot.peer_waits.swap(false, Ordering::Relaxed),
        };
        // Cleared before it is free: the next operation to claim it (Acquire) starts from nothing.
        slot.id.store(0, Ordering::Release);
        Some(summed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{STATE_PROXY_STEP_RECV_FLUSH_WAIT, STATE_PROXY_STEP_SEND_GPU_WAIT, STATE_PROXY_STEP_SEND_PEER_WAIT_V4, STATE_PROXY_STEP_SEND_WAIT};

    #[test]
    fn a_slot_sums_its_operations_steps_and_is_free_again_after_its_stop() {
        let slots = OpSlots::new(8);
        assert!(slots.claim(3));
        for (t, size) in [(10, 100), (20, 200), (30, 300)] {
            assert!(slots.step(3, STATE_PROXY_STEP_SEND_GPU_WAIT, 999, t - 1), "a state of no size nor hand-over is still the slot's");
            assert!(slots.step(3, STATE_PROXY_STEP_SEND_WAIT, size, t));
        }
        assert_eq!(slots.release(3), Some(Summed { bytes: 600, steps: 3, handed_ns: 30, peer_waits: false }));
        assert_eq!(slots.release(3), None, "released once");
        assert!(!slots.step(3, STATE_PROXY_STEP_SEND_WAIT, 1, 40), "a stopped operation's late state is not summed");
        // The slot is free and clear for the next operation at its index.
        assert!(slots.claim(11));
        assert!(slots.step(11, STATE_PROXY_STEP_RECV_FLUSH_WAIT, 64, 0));
        assert_eq!(slots.release(11), Some(Summed { bytes: 64, steps: 1, handed_ns: 0, peer_waits: false }));
    }

    #[test]
    fn an_operation_whose_index_is_held_by_another_open_one_gets_no_slot() {
        let slots = OpSlots::new(4);
        assert!(slots.claim(1));
        assert!(!slots.claim(5), "index 1 is operation 1's while it is open");
        assert!(!slots.step(5, STATE_PROXY_STEP_SEND_WAIT, 10, 1), "its steps go back to the caller, to be pushed");
        assert_eq!(slots.release(5), None);
        assert!(slots.step(1, STATE_PROXY_STEP_SEND_WAIT, 10, 1));
        assert_eq!(slots.release(1).map(|s| s.bytes), Some(10), "operation 1's own bytes only");
    }

    #[test]
    fn the_first_peer_wait_takes_over_the_hand_over_from_the_send_waits() {
        // NCCL 2.28 reports v4's peer wait before each send wait: once one came, only peer waits say when the
        // GPU handed a step over (the fold's rule for every step's records).
        let slots = OpSlots::new(2);
        assert!(slots.claim(2));
        slots.step(2, STATE_PROXY_STEP_SEND_WAIT, 8, 50);
        slots.step(2, STATE_PROXY_STEP_SEND_PEER_WAIT_V4, 0, 40);
        slots.step(2, STATE_PROXY_STEP_SEND_WAIT, 8, 45);
        slots.step(2, STATE_PROXY_STEP_SEND_PEER_WAIT_V4, 0, 60);
        slots.step(2, STATE_PROXY_STEP_SEND_WAIT, 8, 70);
        assert_eq!(slots.release(2), Some(Summed { bytes: 24, steps: 3, handed_ns: 60, peer_waits: true }));
    }
}
