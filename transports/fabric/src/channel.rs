//! A channel: one RDM endpoint with its own completion queue and address vector on one NIC, and the
//! operations posted on it.
//!
//! Posting returns an [`Op`], which completes when its completion-queue entry arrives. An `Op` can be
//! waited on ([`Op::wait`]) or awaited (it is a `Future` that drives the channel's progress when polled).
//! Each operation owns one slot of a fixed table allocated when the channel opens; the slot's
//! `fi_context2` is the context libfabric hands back, so posting and completing never allocate.

use std::cell::{Cell, RefCell, UnsafeCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use efatop_libfabric_sys as sys;

use crate::error::{FabricError, Result, strerror};
use crate::info::Nic;
use crate::memory::RegistrableMemory;
use crate::object::{EndpointReport, EndpointStack, MemoryRegion};

/// How a channel is opened.
#[derive(Clone, Debug)]
pub struct ChannelOptions {
    /// The channel's index within its rank; peers pair channels by index.
    pub index: usize,
    /// Operations that may be in flight at once on this channel.
    pub max_in_flight: usize,
    /// How long an operation (or a wait for immediates) may take before it is reported as hung.
    pub op_timeout: Duration,
    /// Writes with immediate data that peers may have in flight towards this channel at once (peers ×
    /// window): the completion queue must hold them beside our own operations (efa-direct's hardware CQ is
    /// exactly the size asked for), and where writes consume receives this many are kept posted.
    pub remote_in_flight: usize,
    /// The endpoint will carry device memory: on efa, libfabric is told not to call the CUDA API itself
    /// (`FI_OPT_CUDA_API_PERMITTED` off, as aws-ofi-nccl does).
    pub device_memory: bool,
}

/// An endpoint's address, as exchanged through the bootstrap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerAddress(pub Vec<u8>);

/// What a peer needs to write into one of our registered regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteRegion {
    pub base: u64,
    pub key: u64,
    pub len: u64,
}

impl RemoteRegion {
    pub const ENCODED_LEN: usize = 24;

    pub fn to_bytes(self) -> [u8; Self::ENCODED_LEN] {
        let mut bytes = [0u8; Self::ENCODED_LEN];
        bytes[..8].copy_from_slice(&self.base.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.key.to_le_bytes());
        bytes[16..].copy_from_slice(&self.len.to_le_bytes());
        bytes
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let field = |range: std::ops::Range<usize>| -> Result<u64> {
            let slice = bytes.get(range).ok_or_else(|| FabricError::Invalid("remote region record is truncated".into()))?;
            Ok(u64::from_le_bytes(slice.try_into().map_err(|_| FabricError::Invalid("bad record".into()))?))
        };
        Ok(Self { base: field(0..8)?, key: field(8..16)?, len: field(16..24)? })
    }
}

/// The 32-bit immediate data carried by writes: the sender's rank in the top bits, so a target can count
/// arrivals per peer, and a tag below it.
pub struct Immediate;

impl Immediate {
    pub const SOURCE_BITS: u32 = 12;
    pub const TAG_BITS: u32 = 32 - Self::SOURCE_BITS;
    pub const MAX_RANKS: usize = 1 << Self::SOURCE_BITS;

    pub fn encode(source_rank: usize, tag: u32) -> u32 {
        ((source_rank as u32) << Self::TAG_BITS) | (tag & ((1 << Self::TAG_BITS) - 1))
    }

    pub fn source(data: u64) -> usize {
        ((data as u32) >> Self::TAG_BITS) as usize
    }
}

/// What a completed operation reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub len: usize,
    pub flags: u64,
    /// Remote CQ data carried by a received message, if any.
    pub data: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Free,
    Posted,
    Done,
    Failed,
    /// Its `Op` timed out and was dropped; the provider may still own the context, so it is never reused.
    Abandoned,
}

/// One in-flight operation's context. `#[repr(C)]` with the `fi_context2` first: libfabric returns the
/// context pointer we gave it, and we map it back to the slot by address.
#[repr(C)]
struct OpSlot {
    context: UnsafeCell<sys::fi_context2>,
    state: Cell<SlotState>,
    completion: Cell<Completion>,
    next_free: Cell<u32>,
}

const NO_SLOT: u32 = u32::MAX;

/// Byte and operation counts a channel has completed, read by telemetry off the hot path.
#[derive(Debug, Default)]
pub struct ChannelCounters {
    pub ops_completed: Cell<u64>,
    pub bytes_completed: Cell<u64>,
    pub immediates_received: Cell<u64>,
}

pub struct Channel {
    index: usize,
    nic: Nic,
    stack: EndpointStack,
    slots: Box<[OpSlot]>,
    free_head: Cell<u32>,
    in_flight: Cell<usize>,
    peers: RefCell<Vec<sys::fi_addr_t>>,
    immediates_by_source: RefCell<Vec<u64>>,
    op_timeout: Duration,
    report: EndpointReport,
    /// Receives kept posted for writes' immediate data where writes consume one (`FI_RX_CQ_DATA`), and
    /// which of them wait to be posted again (the provider said EAGAIN).
    cq_data_receives: Box<[UnsafeCell<sys::fi_context2>]>,
    cq_data_repost: Box<[Cell<bool>]>,
    cq_data_reposts_pending: Cell<usize>,
    pub counters: ChannelCounters,
}

impl Channel {
    pub fn open(nic: &Nic, options: &ChannelOptions) -> Result<Self> {
        let slot_count = options.max_in_flight.clamp(1, NO_SLOT as usize - 1);
        if nic.provider.starts_with("shm") {
            crate::shm_regions::remove_stale_regions_of_this_pid();
        }
        let cq_size = (slot_count * 2 + options.remote_in_flight).max(128);
        let (stack, report) = EndpointStack::open(nic, cq_size, options.device_memory)?;
        let receives = if nic.writes_consume_receives() { options.remote_in_flight.max(slot_count) } else { 0 };
        let slots: Box<[OpSlot]> = (0..slot_count)
            .map(|i| OpSlot {
                context: UnsafeCell::new(sys::fi_context2::default()),
                state: Cell::new(SlotState::Free),
                completion: Cell::new(Completion { len: 0, flags: 0, data: None }),
                next_free: Cell::new(if i + 1 < slot_count { (i + 1) as u32 } else { NO_SLOT }),
            })
            .collect();
        Ok(Self {
            index: options.index,
            nic: nic.clone(),
            stack,
            slots,
            free_head: Cell::new(0),
            in_flight: Cell::new(0),
            peers: RefCell::new(Vec::new()),
            immediates_by_source: RefCell::new(Vec::new()),
            op_timeout: options.op_timeout,
            report,
            cq_data_receives: (0..receives).map(|_| UnsafeCell::new(sys::fi_context2::default())).collect(),
            cq_data_repost: (0..receives).map(|_| Cell::new(false)).collect(),
            cq_data_reposts_pending: Cell::new(0),
            counters: ChannelCounters::default(),
        })
    }

    /// What opening the endpoint found out: shm shortcut, emulated writes, CUDA API use.
    pub fn report(&self) -> EndpointReport {
        self.report
    }

    pub fn index(&self) -> usize {
        self.index
    }

    pub fn nic(&self) -> &Nic {
        &self.nic
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.get()
    }

    /// This endpoint's address, to be gathered by every rank.
    pub fn address(&self) -> Result<PeerAddress> {
        self.stack.name().map(PeerAddress)
    }

    /// Inserts every rank's address of this channel (indexed by rank) into the address vector.
    pub fn connect(&self, addresses: &[PeerAddress]) -> Result<()> {
        if addresses.len() > Immediate::MAX_RANKS {
            return Err(FabricError::Invalid(format!("at most {} ranks are supported", Immediate::MAX_RANKS)));
        }
        let names: Vec<Vec<u8>> = addresses.iter().map(|a| a.0.clone()).collect();
        *self.peers.borrow_mut() = self.stack.insert_addresses(&names)?;
        *self.immediates_by_source.borrow_mut() = vec![0; addresses.len()];
        for index in 0..self.cq_data_receives.len() {
            self.cq_data_repost[index].set(true);
        }
        self.cq_data_reposts_pending.set(self.cq_data_receives.len());
        self.post_cq_data_receives()
    }

    /// Inserts more endpoints (another channel of every rank, for a cross-rail exchange) after the ranks
    /// [`Channel::connect`] inserted; returns the index the first of them takes. `write(base + r, ..)`
    /// then addresses the `r`-th of them. Immediates are still counted by the rank they carry.
    pub fn connect_more(&self, addresses: &[PeerAddress]) -> Result<usize> {
        let names: Vec<Vec<u8>> = addresses.iter().map(|a| a.0.clone()).collect();
        let inserted = self.stack.insert_addresses(&names)?;
        let mut peers = self.peers.borrow_mut();
        let base = peers.len();
        peers.extend(inserted);
        Ok(base)
    }

    /// Posts the immediate-data receives that wait to be posted; leaves the rest for the next progress call
    /// when the provider says EAGAIN.
    fn post_cq_data_receives(&self) -> Result<()> {
        let ep = self.stack.endpoint();
        for (index, context) in self.cq_data_receives.iter().enumerate() {
            if !self.cq_data_repost[index].get() {
                continue;
            }
            // SAFETY: a zero-length receive (no buffer, no descriptor) whose context lives as long as the
            // channel; the endpoint is closed (cancelling it) before the contexts are freed.
            let ret = unsafe {
                sys::fi_recv(ep, std::ptr::null_mut(), 0, std::ptr::null_mut(), sys::FI_ADDR_UNSPEC, context.get().cast())
            };
            if ret == -(sys::FI_EAGAIN as isize) {
                return Ok(());
            }
            if ret != 0 {
                return Err(FabricError::call("fi_recv(immediate data)", ret as i64));
            }
            self.cq_data_repost[index].set(false);
            self.cq_data_reposts_pending.set(self.cq_data_reposts_pending.get() - 1);
        }
        Ok(())
    }

    fn cq_data_receive_of(&self, context: *mut std::ffi::c_void) -> Option<usize> {
        let base = self.cq_data_receives.as_ptr() as usize;
        let offset = (context as usize).checked_sub(base)?;
        let index = offset / size_of::<UnsafeCell<sys::fi_context2>>();
        (offset % size_of::<UnsafeCell<sys::fi_context2>>() == 0 && index < self.cq_data_receives.len()).then_some(index)
    }

    /// Registers memory with this channel's domain.
    pub fn register(&self, memory: Rc<dyn RegistrableMemory>) -> Result<MemoryRegion> {
        MemoryRegion::register(&self.stack, &self.nic, memory)
    }

    /// What a peer needs to write into `region` through this channel.
    pub fn remote_region(region: &MemoryRegion) -> RemoteRegion {
        RemoteRegion { base: region.remote_base(), key: region.key(), len: region.len() as u64 }
    }

    fn peer(&self, rank: usize) -> Result<sys::fi_addr_t> {
        self.peers
            .borrow()
            .get(rank)
            .copied()
            .ok_or_else(|| FabricError::Invalid(format!("endpoint {rank} is not connected on channel {}", self.index)))
    }

    fn check_span(&self, region: &MemoryRegion, offset: usize, len: usize) -> Result<()> {
        if offset.checked_add(len).is_none_or(|end| end > region.len()) {
            return Err(FabricError::Invalid(format!(
                "span {offset}+{len} exceeds the registered region of {} bytes",
                region.len()
            )));
        }
        if len as u64 > self.nic.max_msg_size {
            return Err(FabricError::Invalid(format!(
                "{len} bytes exceed the provider's max_msg_size of {}",
                self.nic.max_msg_size
            )));
        }
        Ok(())
    }

    /// RDMA WRITE of `len` bytes at `offset` of `local` to `remote` + `remote_offset` on rank `peer`,
    /// carrying `immediate` as remote CQ data when given.
    pub fn write<'c>(
        &'c self,
        peer: usize,
        local: &'c MemoryRegion,
        offset: usize,
        len: usize,
        remote: RemoteRegion,
        remote_offset: u64,
        immediate: Option<u32>,
    ) -> Result<Op<'c>> {
        let WriteTarget { dest, buf, descriptor, addr } = self.write_target(peer, local, offset, len, remote, remote_offset)?;
        let ep = self.stack.endpoint();
        self.post("fi_writedata", |context| match immediate {
            // SAFETY: buf/len lie inside a registered region borrowed by the returned Op; context is a slot
            // reserved for this operation until its completion is read.
            Some(data) => unsafe {
                sys::fi_writedata(ep, buf, len, descriptor, u64::from(data), dest, addr, remote.key, context)
            },
            // SAFETY: as above.
            None => unsafe { sys::fi_write(ep, buf, len, descriptor, dest, addr, remote.key, context) },
        })
    }

    /// As [`Channel::write`], but never waits: `Ok(None)` when no operation slot is free or the provider
    /// says EAGAIN (shm does while an earlier transfer to that peer is still being copied through its
    /// bounce buffers), after one progress call. A caller with other work (a proxy serving a queue) tries
    /// again later instead of spinning inside the provider.
    #[allow(clippy::too_many_arguments)]
    pub fn try_write<'c>(
        &'c self,
        peer: usize,
        local: &'c MemoryRegion,
        offset: usize,
        len: usize,
        remote: RemoteRegion,
        remote_offset: u64,
        immediate: u32,
    ) -> Result<Option<Op<'c>>> {
        let WriteTarget { dest, buf, descriptor, addr } = self.write_target(peer, local, offset, len, remote, remote_offset)?;
        let ep = self.stack.endpoint();
        if self.free_head.get() == NO_SLOT {
            self.progress()?;
            return Ok(None);
        }
        let slot = self.reserve_slot()?;
        let context = self.slots[slot as usize].context.get().cast();
        // SAFETY: as for write.
        let ret = unsafe { sys::fi_writedata(ep, buf, len, descriptor, u64::from(immediate), dest, addr, remote.key, context) };
        if ret == 0 {
            return Ok(Some(self.posted(slot, "fi_writedata")));
        }
        self.release_slot(slot);
        if ret != -(sys::FI_EAGAIN as isize) {
            return Err(FabricError::call("fi_writedata", ret as i64));
        }
        self.progress()?;
        Ok(None)
    }

    /// Two-sided SEND of `len` bytes at `offset` of `local` to rank `peer`.
    pub fn send<'c>(&'c self, peer: usize, local: &'c MemoryRegion, offset: usize, len: usize) -> Result<Op<'c>> {
        self.check_span(local, offset, len)?;
        let dest = self.peer(peer)?;
        let ep = self.stack.endpoint();
        let buf = local.local_address(offset);
        let descriptor = local.desc();
        // SAFETY: as for write.
        self.post("fi_send", |context| unsafe { sys::fi_send(ep, buf, len, descriptor, dest, context) })
    }

    /// Posts a receive of up to `len` bytes into `offset` of `local` (from any peer: efatop does not ask for
    /// directed receives, which not every provider offers).
    pub fn recv<'c>(&'c self, local: &'c MemoryRegion, offset: usize, len: usize) -> Result<Op<'c>> {
        self.check_span(local, offset, len)?;
        let ep = self.stack.endpoint();
        let buf = local.local_address(offset);
        let descriptor = local.desc();
        // SAFETY: as for write.
        self.post("fi_recv", |context| unsafe { sys::fi_recv(ep, buf, len, descriptor, sys::FI_ADDR_UNSPEC, context) })
    }

    /// Reserves a slot and posts through `call`, progressing and retrying while the provider says EAGAIN.
    /// Checks a write's local and remote spans and resolves where it goes (shared by `write` and
    /// `try_write`).
    fn write_target(
        &self,
        peer: usize,
        local: &MemoryRegion,
        offset: usize,
        len: usize,
        remote: RemoteRegion,
        remote_offset: u64,
    ) -> Result<WriteTarget> {
        self.check_span(local, offset, len)?;
        if remote_offset + len as u64 > remote.len {
            return Err(FabricError::Invalid(format!(
                "write of {len} bytes at {remote_offset} exceeds the peer's region of {} bytes",
                remote.len
            )));
        }
        Ok(WriteTarget {
            dest: self.peer(peer)?,
            buf: local.local_address(offset),
            descriptor: local.desc(),
            addr: remote.base + remote_offset,
        })
    }

    /// A slot whose operation the provider accepted: counted in flight, followed by the returned `Op`.
    fn posted(&self, slot: u32, api: &'static str) -> Op<'_> {
        self.slots[slot as usize].state.set(SlotState::Posted);
        self.in_flight.set(self.in_flight.get() + 1);
        Op { channel: self, slot, api, finished: false }
    }

    fn post(&self, api: &'static str, mut call: impl FnMut(*mut std::ffi::c_void) -> isize) -> Result<Op<'_>> {
        let slot = self.reserve_slot()?;
        let context = self.slots[slot as usize].context.get().cast();
        let started = Instant::now();
        let mut spins = 0u32;
        loop {
            let ret = call(context);
            if ret == 0 {
                break;
            }
            if ret != -(sys::FI_EAGAIN as isize) {
                self.release_slot(slot);
                return Err(FabricError::call(api, ret as i64));
            }
            if let Err(err) = self.progress() {
                self.release_slot(slot);
                return Err(err);
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) && crate::ending::abandoned() {
                self.release_slot(slot);
                return Err(FabricError::Abandoned("the run has failed; nothing more is posted".into()));
            }
            if spins.is_multiple_of(1024) && started.elapsed() > self.op_timeout {
                self.release_slot(slot);
                crate::ending::abandon();
                return Err(FabricError::Timeout { what: api, channel: self.index, timeout: self.op_timeout });
            }
        }
        Ok(self.posted(slot, api))
    }

    fn reserve_slot(&self) -> Result<u32> {
        let started = Instant::now();
        let mut spins = 0u32;
        while self.free_head.get() == NO_SLOT {
            // Every slot is in flight: completing one frees it.
            self.progress()?;
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) && crate::ending::abandoned() {
                return Err(FabricError::Abandoned("the run has failed; nothing more is posted".into()));
            }
            if spins.is_multiple_of(1024) && started.elapsed() > self.op_timeout {
                crate::ending::abandon();
                return Err(FabricError::Timeout { what: "a free operation slot", channel: self.index, timeout: self.op_timeout });
            }
        }
        let slot = self.free_head.get();
        self.free_head.set(self.slots[slot as usize].next_free.get());
        Ok(slot)
    }

    fn release_slot(&self, slot: u32) {
        let entry = &self.slots[slot as usize];
        entry.state.set(SlotState::Free);
        entry.next_free.set(self.free_head.get());
        self.free_head.set(slot);
    }

    fn slot_of(&self, context: *mut std::ffi::c_void) -> Option<u32> {
        let base = self.slots.as_ptr() as usize;
        let offset = (context as usize).checked_sub(base)?;
        let index = offset / size_of::<OpSlot>();
        (offset % size_of::<OpSlot>() == 0 && index < self.slots.len()).then_some(index as u32)
    }

    /// Reads this channel's completion queue once and applies what it finds. Returns the number of entries.
    pub fn progress(&self) -> Result<usize> {
        const BATCH: usize = 32;
        if self.cq_data_reposts_pending.get() > 0 {
            self.post_cq_data_receives()?;
        }
        // Not zeroed: this runs on every spin of every busy-poll loop, and the provider writes what it returns.
        let mut entries = [const { std::mem::MaybeUninit::<sys::fi_cq_data_entry>::uninit() }; BATCH];
        // SAFETY: the CQ was opened with FI_CQ_FORMAT_DATA, so entries are fi_cq_data_entry; BATCH fit.
        let ret = unsafe { sys::fi_cq_read(self.stack.cq(), entries.as_mut_ptr().cast(), BATCH) };
        if ret == -(sys::FI_EAGAIN as isize) {
            return Ok(0);
        }
        if ret == -(sys::FI_EAVAIL as isize) {
            return self.read_error().map(|()| 1);
        }
        if ret < 0 {
            return Err(FabricError::call("fi_cq_read", ret as i64));
        }
        let count = (ret as usize).min(BATCH);
        for entry in &entries[..count] {
            // SAFETY: fi_cq_read wrote `ret` complete entries at the front of the array.
            let entry = unsafe { entry.assume_init_ref() };
            let has_data = entry.flags & u64::from(sys::FI_REMOTE_CQ_DATA) != 0;
            match self.slot_of(entry.op_context) {
                Some(slot) => {
                    let slot_ref = &self.slots[slot as usize];
                    slot_ref.completion.set(Completion {
                        len: entry.len,
                        flags: entry.flags,
                        data: has_data.then_some(entry.data),
                    });
                    self.finish_slot(slot, SlotState::Done);
                    self.counters.ops_completed.set(self.counters.ops_completed.get() + 1);
                    self.counters.bytes_completed.set(self.counters.bytes_completed.get() + entry.len as u64);
                }
                // A write with immediate data from a peer, on a provider where it consumed one of the
                // receives kept posted for that: count it below and post that receive again.
                None if has_data && self.cq_data_receive_of(entry.op_context).is_some() => {
                    if let Some(index) = self.cq_data_receive_of(entry.op_context) {
                        self.cq_data_repost[index].set(true);
                        self.cq_data_reposts_pending.set(self.cq_data_reposts_pending.get() + 1);
                    }
                    self.count_immediate(entry.data);
                }
                // A write with immediate data from a peer: it consumed no posted receive of ours.
                None if has_data => self.count_immediate(entry.data),
                None => {}
            }
        }
        Ok(count)
    }

    fn count_immediate(&self, data: u64) {
        self.counters.immediates_received.set(self.counters.immediates_received.get() + 1);
        let source = Immediate::source(data);
        if let Some(count) = self.immediates_by_source.borrow_mut().get_mut(source) {
            *count += 1;
        }
    }

    fn finish_slot(&self, slot: u32, state: SlotState) {
        let entry = &self.slots[slot as usize];
        if entry.state.get() == SlotState::Abandoned {
            // Its Op gave up waiting; now that the provider is done with the context, reuse it.
            self.release_slot(slot);
        } else {
            entry.state.set(state);
        }
        self.in_flight.set(self.in_flight.get().saturating_sub(1));
    }

    fn read_error(&self) -> Result<()> {
        let mut entry = sys::fi_cq_err_entry::default();
        // SAFETY: reading one error entry into our struct; err_data stays valid until the next readerr.
        let ret = unsafe { sys::fi_cq_readerr(self.stack.cq(), &raw mut entry, 0) };
        if ret < 0 {
            return if ret == -(sys::FI_EAGAIN as isize) { Ok(()) } else { Err(FabricError::call("fi_cq_readerr", ret as i64)) };
        }
        let mut text = [0 as std::os::raw::c_char; 256];
        // SAFETY: text has room for 256 bytes; the returned pointer is NUL-terminated.
        let provider_text = unsafe {
            let ptr = sys::fi_cq_strerror(self.stack.cq(), entry.prov_errno, entry.err_data, text.as_mut_ptr(), text.len());
            if ptr.is_null() { String::new() } else { std::ffi::CStr::from_ptr(ptr).to_string_lossy().into_owned() }
        };
        let error = FabricError::Completion {
            api: "completion queue",
            channel: self.index,
            code: entry.err,
            prov_errno: entry.prov_errno,
            message: format!("{}; {}", strerror(entry.err), provider_text),
        };
        match self.slot_of(entry.op_context) {
            Some(slot) => {
                self.slots[slot as usize].completion.set(Completion { len: 0, flags: entry.flags, data: None });
                self.finish_slot(slot, SlotState::Failed);
                // The operation's owner learns of it when it waits; report it here as well.
                Err(error)
            }
            None => Err(error),
        }
    }

    /// Immediates received so far from `source_rank` on this channel.
    pub fn immediates_from(&self, source_rank: usize) -> u64 {
        self.immediates_by_source.borrow().get(source_rank).copied().unwrap_or(0)
    }

    /// Progresses until `count` immediates from `source_rank` have arrived in total.
    pub fn wait_immediates(&self, source_rank: usize, count: u64) -> Result<()> {
        let started = Instant::now();
        let mut spins = 0u32;
        while self.immediates_from(source_rank) < count {
            self.progress()?;
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) && crate::ending::abandoned() {
                return Err(FabricError::Abandoned("the run has failed; stopped waiting for write immediates".into()));
            }
            if spins.is_multiple_of(1024) && started.elapsed() > self.op_timeout {
                crate::ending::abandon();
                return Err(FabricError::Timeout { what: "waiting for write immediates", channel: self.index, timeout: self.op_timeout });
            }
        }
        Ok(())
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        if crate::ending::abandoned() {
            // The endpoint is left open (see [`crate::ending`]): the contexts the provider may still hold
            // stay allocated, and nothing is progressed again.
            std::mem::forget(std::mem::take(&mut self.slots));
            std::mem::forget(std::mem::take(&mut self.cq_data_receives));
            return;
        }
        // Give outstanding operations a moment to finish so the provider is not torn down mid-transfer.
        let deadline = Instant::now() + Duration::from_millis(200);
        while self.in_flight.get() > 0 && Instant::now() < deadline {
            if self.progress().is_err() {
                break;
            }
        }
    }
}

/// Where a checked write goes: the peer's address, the local bytes and their descriptor, the remote address.
struct WriteTarget {
    dest: sys::fi_addr_t,
    buf: *mut std::ffi::c_void,
    descriptor: *mut std::ffi::c_void,
    addr: u64,
}

/// An operation in flight on a channel. Completes when its CQ entry is read. Dropping an `Op` that has not
/// completed waits for it (bounded by the channel's timeout, after which it is abandoned), so the memory it
/// uses cannot be released under the NIC; once the run has failed ([`crate::ending`]) it is abandoned at
/// once, and the memory stays allocated.
#[must_use = "an operation must be waited for"]
pub struct Op<'c> {
    channel: &'c Channel,
    slot: u32,
    api: &'static str,
    finished: bool,
}

impl Op<'_> {
    /// Progresses the channel until this operation completes.
    pub fn wait(mut self) -> Result<Completion> {
        self.wait_inner()
    }

    /// True once the operation's completion has been read (does not progress the channel).
    pub fn is_complete(&self) -> bool {
        matches!(self.channel.slots[self.slot as usize].state.get(), SlotState::Done | SlotState::Failed)
    }

    fn wait_inner(&mut self) -> Result<Completion> {
        let started = Instant::now();
        let mut spins = 0u32;
        loop {
            if let Some(result) = self.take() {
                return result;
            }
            if let Err(err) = self.channel.progress() {
                // An error entry for another operation still leaves ours pending; ours reports its own.
                if let Some(result) = self.take() {
                    return result.map_err(|_| err);
                }
                return Err(err);
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) && crate::ending::abandoned() {
                self.abandon();
                return Err(FabricError::Abandoned("the run has failed; the operation was abandoned".into()));
            }
            if spins.is_multiple_of(1024) && started.elapsed() > self.channel.op_timeout {
                self.abandon();
                return Err(FabricError::Timeout { what: self.api, channel: self.channel.index, timeout: self.channel.op_timeout });
            }
        }
    }

    fn take(&mut self) -> Option<Result<Completion>> {
        let entry = &self.channel.slots[self.slot as usize];
        let result = match entry.state.get() {
            SlotState::Done => Ok(entry.completion.get()),
            SlotState::Failed => Err(FabricError::Completion {
                api: self.api,
                channel: self.channel.index,
                code: i32::try_from(sys::FI_EIO).unwrap_or(5),
                prov_errno: 0,
                message: "the operation completed in error".into(),
            }),
            _ => return None,
        };
        self.channel.release_slot(self.slot);
        self.finished = true;
        Some(result)
    }

    /// Gives up on the operation: its slot is never reused, and the process's fabric objects are left open
    /// from now on (the provider may still write into its context and memory).
    fn abandon(&mut self) {
        crate::ending::abandon();
        self.channel.slots[self.slot as usize].state.set(SlotState::Abandoned);
        self.finished = true;
    }
}

impl Future for Op<'_> {
    type Output = Result<Completion>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(result) = self.take() {
            return Poll::Ready(result);
        }
        if let Err(err) = self.channel.progress() {
            return Poll::Ready(self.take().unwrap_or(Err(err)));
        }
        if let Some(result) = self.take() { Poll::Ready(result) } else {
            // Completion queues have no wakeup here (FI_WAIT_NONE): ask to be polled again.
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

impl Drop for Op<'_> {
    fn drop(&mut self) {
        if self.finished || self.take().is_some() {
            return;
        }
        if crate::ending::abandoned() {
            // The run has failed: not waited for. The provider may still own its context and memory, which
            // stay allocated (crate::ending); its slot is never reused.
            self.abandon();
        } else {
            let _ = self.wait_inner();
        }
    }
}

/// Runs a future to completion on the calling thread, busy-polling: the right executor for a benchmark's
/// hot path, where an `Op` drives its own channel's progress each time it is polled.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = Context::from_waker(std::task::Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
    }
}
