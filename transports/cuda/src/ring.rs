//! The GPU→CPU request ring: many producers (GPU threads, or CPU threads in tests), one consumer (the
//! CPU proxy). One protocol, written twice: in Rust here ([`RingView::push`], [`Consumer`]) and in CUDA C
//! ([`RING_CUDA`]), over the same words.
//!
//! Layout, in 64-bit words of memory both sides see (mapped host memory on a GPU):
//!
//! | words | what | written by | read by |
//! |---|---|---|---|
//! | [`HEAD`] | requests consumed so far | consumer | producers (room left) |
//! | [`COMPLETED`] | requests whose write completed, counted in ticket order | consumer | `Quiet` |
//! | [`ABORT`] | non-zero: the consumer gave up; producers return | consumer | producers |
//! | [`QUIETS`] | Quiet calls the proxy writer made so far | the writer's one thread | dashboard |
//! | [`SLOTS`].. | `capacity` slots of [`SLOT_WORDS`] words | producers | consumer |
//!
//! A slot: `[sequence, target | channel << 32, offset, len, immediate, tag, push time, -]`.
//!
//! Push: claim a ticket with an atomic add on a tail counter only producers touch (on a GPU, in device
//! memory; a warp, or [`RingView::push_group`], claims a run of consecutive tickets with one add); wait
//! until `ticket - head < capacity` (the slot's previous request has been consumed; a GPU waits on a copy
//! of the head in device memory that one producer at a time refreshes); write the fields; fence; publish
//! by storing `sequence = ticket + 1`. Pop: the slot at `head` is ready when its
//! sequence is `head + 1`; read the fields; store `head + 1`. A sequence is never reset: after a wrap the
//! slot still holds the previous round's `ticket + 1 - capacity`, which is not `head + 1`.

use std::sync::atomic::{AtomicU64, Ordering};

pub const HEAD: usize = 0;
pub const COMPLETED: usize = 8;
pub const ABORT: usize = 16;
pub const QUIETS: usize = 24;
/// Each control word on its own 64-byte line, so the consumer's stores do not bounce producers' slot lines.
pub const SLOTS: usize = 32;
pub const SLOT_WORDS: usize = 8;

/// The words a ring of `capacity` slots occupies.
pub fn words_for(capacity: u64) -> usize {
    SLOTS + capacity as usize * SLOT_WORDS
}

/// A write request, as a producer publishes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub target: u32,
    pub channel: u32,
    pub offset: u64,
    pub len: u64,
    pub immediate: u32,
    /// The producer's own label (the queue benchmark: producer id << 32 | index).
    pub tag: u64,
}

/// As messages name a request: what it asks to write, and where.
impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a write of {} bytes at offset {} on channel {} to rank {} (immediate {:#x}, tag {:#x})",
            self.len, self.offset, self.channel, self.target, self.immediate, self.tag
        )
    }
}

/// The ring over words someone else owns (mapped host memory, or a `Vec` in tests).
#[derive(Clone, Copy)]
pub struct RingView<'w> {
    words: &'w [AtomicU64],
    capacity: u64,
}

impl<'w> RingView<'w> {
    /// `capacity` must be a power of two and `words` at least [`words_for`] it.
    pub fn new(words: &'w [AtomicU64], capacity: u64) -> Option<Self> {
        (capacity.is_power_of_two() && words.len() >= words_for(capacity)).then_some(Self { words, capacity })
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    fn slot(&self, ticket: u64) -> &'w [AtomicU64] {
        let start = SLOTS + (ticket & (self.capacity - 1)) as usize * SLOT_WORDS;
        &self.words[start..start + SLOT_WORDS]
    }

    /// A CPU producer's push (the GPU's is `efatop_ring_push` in [`RING_CUDA`]); returns the ticket, or
    /// `None` if the consumer aborted while this producer waited for room.
    pub fn push(&self, tail: &AtomicU64, request: &Request) -> Option<u64> {
        let ticket = tail.fetch_add(1, Ordering::Relaxed);
        self.wait_for_room(ticket)?;
        self.publish(ticket, request);
        Some(ticket)
    }

    /// Pushes `requests` as one group, as a warp of GPU producers does (`efatop_ring_push` in
    /// [`RING_CUDA`]): one `fetch_add` claims consecutive tickets, room for the last is room for all
    /// (when the group fits the ring; else each waits for its own slot), then each slot is written and
    /// published in ticket order. Returns the first ticket, or `None` if the consumer aborted.
    pub fn push_group(&self, tail: &AtomicU64, requests: &[Request]) -> Option<u64> {
        let count = requests.len() as u64;
        let base = tail.fetch_add(count, Ordering::Relaxed);
        if count <= self.capacity && count > 0 {
            self.wait_for_room(base + count - 1)?;
        }
        for (ticket, request) in (base..).zip(requests) {
            if count > self.capacity {
                self.wait_for_room(ticket)?;
            }
            self.publish(ticket, request);
        }
        Some(base)
    }

    /// Waits until `ticket`'s slot has been consumed in its previous round; `None` if the consumer aborted.
    fn wait_for_room(&self, ticket: u64) -> Option<()> {
        let mut spins = 0u32;
        // Acquire: the consumer read this slot's previous request before it stored the head we see, so
        // our writes below cannot be seen by that read.
        while ticket - self.words[HEAD].load(Ordering::Acquire) >= self.capacity {
            if self.words[ABORT].load(Ordering::Relaxed) != 0 {
                return None;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        Some(())
    }

    /// Writes `ticket`'s slot and publishes it.
    fn publish(&self, ticket: u64, request: &Request) {
        let slot = self.slot(ticket);
        slot[1].store(u64::from(request.target) | (u64::from(request.channel) << 32), Ordering::Relaxed);
        slot[2].store(request.offset, Ordering::Relaxed);
        slot[3].store(request.len, Ordering::Relaxed);
        slot[4].store(u64::from(request.immediate), Ordering::Relaxed);
        slot[5].store(request.tag, Ordering::Relaxed);
        // Release: the fields above are visible to whoever sees the sequence (the GPU's
        // __threadfence_system() before its publishing store).
        slot[0].store(ticket + 1, Ordering::Release);
    }

    /// The single consumer; there must be only one at a time.
    pub fn consumer(&self) -> Consumer<'w> {
        Consumer { ring: *self, head: self.words[HEAD].load(Ordering::Relaxed) }
    }

    /// Requests consumed so far (what producers see).
    pub fn head(&self) -> u64 {
        self.words[HEAD].load(Ordering::Acquire)
    }

    /// Quiet calls the proxy writer has made (it publishes the count as it goes).
    pub fn quiet_calls(&self) -> u64 {
        self.words[QUIETS].load(Ordering::Relaxed)
    }

    /// Tells waiting producers to return.
    pub fn abort(&self) {
        self.words[ABORT].store(1, Ordering::Release);
    }
}

/// The consumer's side: pops in ticket order and publishes how many writes completed.
pub struct Consumer<'w> {
    ring: RingView<'w>,
    head: u64,
}

impl Consumer<'_> {
    /// The next request if its producer has published it, with its ticket.
    pub fn try_pop(&mut self) -> Option<(u64, Request)> {
        let slot = self.ring.slot(self.head);
        // Acquire: pairs with the producer's release (or fence) before it stored the sequence, so the
        // fields read below are the ones it wrote.
        if slot[0].load(Ordering::Acquire) != self.head + 1 {
            return None;
        }
        let route = slot[1].load(Ordering::Relaxed);
        let request = Request {
            target: route as u32,
            channel: (route >> 32) as u32,
            offset: slot[2].load(Ordering::Relaxed),
            len: slot[3].load(Ordering::Relaxed),
            immediate: slot[4].load(Ordering::Relaxed) as u32,
            tag: slot[5].load(Ordering::Relaxed),
        };
        let ticket = self.head;
        self.head += 1;
        // Release: our reads of the slot happen before a producer that sees this head reuses it.
        self.ring.words[HEAD].store(self.head, Ordering::Release);
        Some((ticket, request))
    }

    /// Requests popped so far.
    pub fn consumed(&self) -> u64 {
        self.head
    }

    /// Requests published and not yet popped (the producers' tail lives on the GPU; this needs only the
    /// slots): counts consecutive published slots from the head, up to the ring's capacity.
    pub fn waiting(&self) -> u64 {
        (0..self.ring.capacity)
            .take_while(|i| self.ring.slot(self.head + i)[0].load(Ordering::Acquire) == self.head + i + 1)
            .count() as u64
    }

    /// Requests claimed (by tail) but not yet consumed, given the producers' tail.
    pub fn depth(&self, tail: u64) -> u64 {
        tail.saturating_sub(self.head)
    }

    /// Publishes that the writes of tickets `0..completed` have all completed (what `Quiet` waits on).
    pub fn set_completed(&self, completed: u64) {
        // Release: any bookkeeping done for those writes is visible before Quiet returns on the GPU.
        self.ring.words[COMPLETED].store(completed, Ordering::Release);
    }

    pub fn abort(&self) {
        self.ring.abort();
    }
}

/// Counts every (producer, index) request the queue benchmark and the tests push, and says whether each
/// was consumed exactly once and in each producer's order.
pub struct ExactlyOnce {
    next: Vec<u64>,
    per_producer: u64,
    errors: Vec<String>,
}

impl ExactlyOnce {
    pub fn new(producers: usize, per_producer: u64) -> Self {
        Self { next: vec![0; producers], per_producer, errors: Vec::new() }
    }

    /// The tag a producer puts on its `index`-th request.
    pub fn tag(producer: u64, index: u64) -> u64 {
        (producer << 32) | index
    }

    /// Records one consumed request; the producer also wrote itself and the index into `offset` and
    /// `len`, so a torn slot (fields of two requests) is caught too.
    pub fn record(&mut self, request: &Request) {
        let (producer, index) = (request.tag >> 32, request.tag & 0xffff_ffff);
        if request.offset != producer || request.len != index {
            self.fail(format!("torn request: tag says producer {producer} #{index}, fields say {} #{}", request.offset, request.len));
            return;
        }
        let Some(&next) = self.next.get(producer as usize) else {
            self.fail(format!("request from producer {producer}, which does not exist"));
            return;
        };
        if index != next {
            let what = if index < next { "again (duplicate)" } else { "before earlier ones (lost or reordered)" };
            self.fail(format!("producer {producer}'s request #{index} consumed {what}; expected #{next}"));
        }
        self.next[producer as usize] = next.max(index + 1);
    }

    fn fail(&mut self, message: String) {
        if self.errors.len() < 8 {
            self.errors.push(message);
        }
    }

    /// `Ok` when every producer's requests were each consumed once, in order; else the first problems.
    pub fn finish(&self) -> Result<(), String> {
        let mut errors = self.errors.clone();
        for (producer, next) in self.next.iter().enumerate() {
            if *next != self.per_producer && errors.len() < 8 {
                errors.push(format!("producer {producer}: {next} of {} requests consumed", self.per_producer));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

/// Words of the producers' own state in device memory ([`RING_CUDA`]'s `EFATOP_DEV_*`): the tail, a
/// mirror of [`HEAD`], the lock of whoever refreshes that mirror, and a mirror of [`ABORT`], each on its
/// own 128-byte line. The CPU never touches them.
pub const DEVICE_WORDS: usize = 64;

/// The producer's side in CUDA C, for NVRTC; the constants are the ones above.
///
/// Two designs of the same protocol over the same words: `efatop_ring_push` (`--ring warp`) claims one run of
/// tickets per warp (one atomic, lanes take consecutive tickets), lets one lane wait for room for the whole
/// run, and waits on a device-memory mirror of the head that one producer at a time refreshes from host
/// memory; `efatop_ring_push_seed` is the first design, one ticket and one poller of host memory per
/// thread, kept for before/after comparisons (`efatop queue --ring seed`, `EFATOP_RING=seed`).
pub const RING_CUDA: &str = r#"
#define EFATOP_HEAD 0
#define EFATOP_COMPLETED 8
#define EFATOP_ABORT 16
#define EFATOP_QUIETS 24
#define EFATOP_SLOTS 32
#define EFATOP_SLOT_WORDS 8
#define EFATOP_ABORTED 0xffffffffffffffffULL
// The producers' words in device memory, each on its own 128-byte line (DEVICE_WORDS in all).
#define EFATOP_DEV_TAIL 0
#define EFATOP_DEV_HEAD 16
#define EFATOP_DEV_LOCK 32
#define EFATOP_DEV_ABORT 48

__device__ __forceinline__ unsigned long long efatop_now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// A word the CPU writes (head, completed, abort): an acquire load at system scope, so it is read from
// host memory every time (never a stale cached copy) and later accesses are not moved before it.
__device__ __forceinline__ unsigned long long efatop_load_acquire_sys(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ unsigned long long efatop_load_acquire_gpu(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void efatop_store_release_gpu(unsigned long long* p, unsigned long long v) {
    asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void efatop_max_release_gpu(unsigned long long* p, unsigned long long v) {
    asm volatile("red.release.gpu.global.max.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void efatop_store_pair(unsigned long long* p, unsigned long long a, unsigned long long b) {
    asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" :: "l"(p), "l"(a), "l"(b) : "memory");
}

__device__ __forceinline__ unsigned int efatop_lane() {
    unsigned int lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

// Waits until the consumer's head is at least `target`. Every waiter reads the device-memory mirror of the
// head (an L2 hit); only the producer holding the lock reads the head itself over PCIe, then raises the
// mirror to it: one host read in flight for the whole GPU, however many producers wait. Returns 0 when
// the CPU aborted.
__device__ int efatop_wait_head(unsigned long long* words, unsigned long long* dev, unsigned long long target) {
    unsigned int backoff = 32;
    for (;;) {
        // Acquire (GPU scope), paired with the refresher's release after its system-scope acquire of the
        // head: the CPU's reads of the slots below `target` happen before whatever the caller writes next.
        const unsigned long long seen = efatop_load_acquire_gpu(dev + EFATOP_DEV_HEAD);
        if (seen >= target) return 1;
        if (*(volatile unsigned long long*)(dev + EFATOP_DEV_ABORT)) return 0;
        if (*(volatile unsigned long long*)(dev + EFATOP_DEV_LOCK) == 0ULL
            && atomicCAS(dev + EFATOP_DEV_LOCK, 0ULL, 1ULL) == 0ULL) {
            unsigned long long head = efatop_load_acquire_sys(words + EFATOP_HEAD);
            efatop_max_release_gpu(dev + EFATOP_DEV_HEAD, head);
            // The abort word costs a second read over PCIe: only when the head has not moved.
            if (head == seen && efatop_load_acquire_sys(words + EFATOP_ABORT)) {
                atomicExch(dev + EFATOP_DEV_ABORT, 1ULL);
            }
            efatop_store_release_gpu(dev + EFATOP_DEV_LOCK, 0ULL);
            if (head >= target) return 1;
            // Not yet: read again at once. One read in flight at a time is what bounds the PCIe traffic;
            // backing off here too (measured) cost up to half the rate with 64 blocks of producers.
            continue;
        }
        __nanosleep(backoff);
        if (backoff < 256) backoff *= 2;
    }
}

// Claims a slot, waits for room, writes the request and publishes it; with `wait_consumed`, then waits
// until the consumer's head passes it. Returns the ticket, or EFATOP_ABORTED when the CPU gave up while
// we waited. The threads of a warp that call together (__activemask) claim consecutive tickets with one
// atomic on the tail (device memory: only producers touch it), and one of them waits for the group.
__device__ unsigned long long efatop_ring_push(unsigned long long* words, unsigned long long* dev,
        unsigned long long capacity, unsigned long long route, unsigned long long offset,
        unsigned long long len, unsigned long long immediate, unsigned long long tag, int wait_consumed) {
    const unsigned int group = __activemask();
    const unsigned int lane = efatop_lane();
    const unsigned int leader = __ffs(group) - 1;
    const unsigned int count = __popc(group);
    const unsigned int rank = __popc(group & ((1u << lane) - 1u));
    unsigned long long base = 0;
    if (lane == leader) base = atomicAdd(dev + EFATOP_DEV_TAIL, (unsigned long long)count);
    base = __shfl_sync(group, base, leader);
    const unsigned long long ticket = base + rank, last = base + count - 1;
    int room = 1;
    if (count <= capacity) {
        // Room for the group's last ticket is room for all of them: its slots were consumed.
        if (lane == leader && last >= capacity) room = efatop_wait_head(words, dev, last - capacity + 1);
        room = __shfl_sync(group, room, leader);
        // Orders the leader's acquire before every lane's slot writes.
        __syncwarp(group);
    } else if (ticket >= capacity) {
        // A ring smaller than the group: each lane waits for its own slot.
        room = efatop_wait_head(words, dev, ticket - capacity + 1);
    }
    if (!room) return EFATOP_ABORTED;
    // The head we saw means the CPU finished reading this slot's previous request; order our slot writes
    // after that observation at system scope.
    __threadfence_system();
    // Each slot is one 64-byte line and a group's slots are consecutive lines: 16-byte stores coalesce.
    unsigned long long* slot = words + EFATOP_SLOTS + (ticket & (capacity - 1)) * EFATOP_SLOT_WORDS;
    efatop_store_pair(slot + 2, offset, len);
    efatop_store_pair(slot + 4, immediate, tag);
    efatop_store_pair(slot + 6, efatop_now_ns(), 0ULL);
    *(volatile unsigned long long*)(slot + 1) = route;
    // The CPU reads the fields as soon as it sees the sequence: they must reach host memory first.
    // Writes over PCIe may become visible out of order without a system-scope fence.
    __threadfence_system();
    *(volatile unsigned long long*)slot = ticket + 1;
    if (wait_consumed) {
        int consumed = 1;
        if (count <= capacity) {
            if (lane == leader) consumed = efatop_wait_head(words, dev, last + 1);
            consumed = __shfl_sync(group, consumed, leader);
        } else {
            consumed = efatop_wait_head(words, dev, ticket + 1);
        }
        if (!consumed) return EFATOP_ABORTED;
    }
    return ticket;
}

// The first design (`--ring seed`), for comparisons: every thread claims its own ticket and polls the
// head in host memory, with backoff, until its slot is free.
__device__ unsigned long long efatop_ring_push_seed(unsigned long long* words, unsigned long long* dev,
        unsigned long long capacity, unsigned long long route, unsigned long long offset,
        unsigned long long len, unsigned long long immediate, unsigned long long tag, int wait_consumed) {
    unsigned long long ticket = atomicAdd(dev + EFATOP_DEV_TAIL, 1ULL);
    unsigned int backoff = 32;
    while (ticket - efatop_load_acquire_sys(words + EFATOP_HEAD) >= capacity) {
        if (efatop_load_acquire_sys(words + EFATOP_ABORT)) return EFATOP_ABORTED;
        // Thousands of producers polling one host word would saturate PCIe reads; back off.
        __nanosleep(backoff);
        if (backoff < 2048) backoff *= 2;
    }
    __threadfence_system();
    volatile unsigned long long* slot = words + EFATOP_SLOTS + (ticket & (capacity - 1)) * EFATOP_SLOT_WORDS;
    slot[1] = route;
    slot[2] = offset;
    slot[3] = len;
    slot[4] = immediate;
    slot[5] = tag;
    slot[6] = efatop_now_ns();
    __threadfence_system();
    slot[0] = ticket + 1;
    if (wait_consumed) {
        while (efatop_load_acquire_sys(words + EFATOP_HEAD) <= ticket) {
            if (efatop_load_acquire_sys(words + EFATOP_ABORT)) return EFATOP_ABORTED;
            __nanosleep(32);
        }
    }
    return ticket;
}

// nvshmem_quiet for the proxy: waits until the writes of every ticket up to `ticket` completed.
// Returns 0 when the CPU aborted.
__device__ int efatop_quiet(unsigned long long* words, unsigned long long ticket) {
    while (efatop_load_acquire_sys(words + EFATOP_COMPLETED) <= ticket) {
        if (efatop_load_acquire_sys(words + EFATOP_ABORT)) return 0;
    }
    // Whatever the GPU does next (reuse the source buffer, signal a peer) happens after the writes.
    __threadfence_system();
    return 1;
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn words(capacity: u64) -> Vec<AtomicU64> {
        (0..words_for(capacity)).map(|_| AtomicU64::new(0)).collect()
    }

    fn request(producer: u64, index: u64) -> Request {
        Request { target: 1, channel: 0, offset: producer, len: index, immediate: 7, tag: ExactlyOnce::tag(producer, index) }
    }

    /// 8 CPU producers × 100k pushes through 64 slots (the ring wraps 12,500 times): every request is
    /// consumed exactly once, in each producer's order.
    #[test]
    fn many_producers_every_request_consumed_exactly_once() {
        const PRODUCERS: u64 = 8;
        const PER_PRODUCER: u64 = 100_000;
        let memory = words(64);
        let ring = RingView::new(&memory, 64).expect("ring");
        let tail = AtomicU64::new(0);
        let mut check = ExactlyOnce::new(PRODUCERS as usize, PER_PRODUCER);
        std::thread::scope(|scope| {
            for producer in 0..PRODUCERS {
                let (ring, tail) = (&ring, &tail);
                scope.spawn(move || {
                    for index in 0..PER_PRODUCER {
                        ring.push(tail, &request(producer, index)).expect("not aborted");
                    }
                });
            }
            let mut consumer = ring.consumer();
            let mut tickets = 0;
            let mut idle = 0u32;
            while consumer.consumed() < PRODUCERS * PER_PRODUCER {
                if let Some((ticket, request)) = consumer.try_pop() {
                    assert_eq!(ticket, tickets, "tickets come out in order");
                    tickets += 1;
                    check.record(&request);
                    idle = 0;
                } else {
                    idle += 1;
                    if idle.is_multiple_of(64) {
                        std::thread::yield_now();
                    }
                }
            }
            assert!(consumer.try_pop().is_none(), "nothing beyond what was pushed");
        });
        assert_eq!(tail.load(Ordering::Relaxed), PRODUCERS * PER_PRODUCER);
        check.finish().expect("exactly once");
    }

    /// 8 CPU producers pushing groups of 1 to 37 requests (one `fetch_add` each, as a GPU warp claims its
    /// tickets) through 32 slots, so some groups are larger than the ring: every request consumed exactly
    /// once, in each producer's order, and the tickets come out in order.
    #[test]
    fn producers_pushing_groups_every_request_consumed_exactly_once() {
        const PRODUCERS: u64 = 8;
        const PER_PRODUCER: u64 = 20_000;
        let memory = words(32);
        let ring = RingView::new(&memory, 32).expect("ring");
        let tail = AtomicU64::new(0);
        let mut check = ExactlyOnce::new(PRODUCERS as usize, PER_PRODUCER);
        std::thread::scope(|scope| {
            for producer in 0..PRODUCERS {
                let (ring, tail) = (&ring, &tail);
                scope.spawn(move || {
                    let mut index = 0;
                    let mut size = producer + 1;
                    while index < PER_PRODUCER {
                        let group: Vec<Request> = (index..(index + size).min(PER_PRODUCER)).map(|i| request(producer, i)).collect();
                        ring.push_group(tail, &group).expect("not aborted");
                        index += group.len() as u64;
                        size = size % 37 + 1;
                    }
                });
            }
            let mut consumer = ring.consumer();
            let mut tickets = 0;
            while consumer.consumed() < PRODUCERS * PER_PRODUCER {
                if let Some((ticket, request)) = consumer.try_pop() {
                    assert_eq!(ticket, tickets, "tickets come out in order");
                    tickets += 1;
                    check.record(&request);
                } else {
                    std::thread::yield_now();
                }
            }
            assert!(consumer.try_pop().is_none(), "nothing beyond what was pushed");
        });
        check.finish().expect("exactly once");
    }

    #[test]
    fn the_checker_catches_lost_duplicated_and_torn_requests() {
        let mut lost = ExactlyOnce::new(2, 3);
        for index in [0, 2] {
            lost.record(&request(0, index));
        }
        for index in 0..3 {
            lost.record(&request(1, index));
        }
        assert!(lost.finish().expect_err("lost #1").contains("expected #1"));

        let mut duplicated = ExactlyOnce::new(1, 2);
        for index in [0, 1, 1] {
            duplicated.record(&request(0, index));
        }
        assert!(duplicated.finish().expect_err("dup").contains("duplicate"));

        let mut short = ExactlyOnce::new(1, 2);
        short.record(&request(0, 0));
        assert!(short.finish().expect_err("short").contains("1 of 2"));

        let mut torn = ExactlyOnce::new(1, 1);
        torn.record(&Request { len: 5, ..request(0, 0) });
        assert!(torn.finish().expect_err("torn").contains("torn"));
    }

    #[test]
    fn waiting_counts_published_requests_not_yet_popped() {
        let memory = words(4);
        let ring = RingView::new(&memory, 4).expect("ring");
        let tail = AtomicU64::new(0);
        let mut consumer = ring.consumer();
        assert_eq!(consumer.waiting(), 0);
        for index in 0..3 {
            ring.push(&tail, &request(0, index)).expect("room");
        }
        assert_eq!(consumer.waiting(), 3);
        consumer.try_pop().expect("published");
        assert_eq!(consumer.waiting(), 2);
        // Across the wrap: a full ring counts every slot once.
        for index in 3..5 {
            ring.push(&tail, &request(0, index)).expect("room");
        }
        assert_eq!(consumer.waiting(), 4);
    }

    #[test]
    fn a_full_ring_holds_its_producers_until_the_consumer_pops_and_abort_releases_them() {
        let memory = words(4);
        let ring = RingView::new(&memory, 4).expect("ring");
        let tail = AtomicU64::new(0);
        for index in 0..4 {
            assert_eq!(ring.push(&tail, &request(0, index)), Some(index));
        }
        std::thread::scope(|scope| {
            let blocked = scope.spawn(|| ring.push(&tail, &request(0, 4)));
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!blocked.is_finished(), "the fifth push waits for room");
            let mut consumer = ring.consumer();
            assert_eq!(consumer.try_pop().map(|(t, r)| (t, r.len)), Some((0, 0)));
            assert_eq!(blocked.join().expect("producer"), Some(4));
            // Full again: a sixth producer waits until the consumer aborts.
            let waiting = scope.spawn(|| ring.push(&tail, &request(0, 5)));
            std::thread::sleep(std::time::Duration::from_millis(50));
            consumer.abort();
            assert_eq!(waiting.join().expect("producer"), None);
        });
        assert!(RingView::new(&memory, 3).is_none(), "capacity must be a power of two");
    }
}
