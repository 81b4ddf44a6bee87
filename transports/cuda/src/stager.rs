//! Asynchronous device → host staging, for a proxy that must copy GPU bytes into host memory before a
//! provider that cannot register GPU memory sends them.
//!
//! The host buffer is page-locked for CUDA (`cuMemHostRegister`): only then is `cuMemcpyDtoHAsync`
//! asynchronous and done by a copy engine at full PCIe speed (pageable memory goes through the driver's
//! bounce buffer, synchronously). Copies run on a non-blocking stream of their own, so they neither wait
//! for nor hold up kernels (the ring's writer) on other streams; each copy records one event of a fixed
//! pool, which the caller polls before it lets the NIC read those bytes.

use std::rc::Rc;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUevent_flags};
use cudarc::driver::{CudaEvent, CudaStream};
use efatop_fabric::{HostBuffer, RegistrableMemory};

use crate::{CudaError, DeviceBuffer, Gpu};

/// A host buffer registered with CUDA, a stream and a pool of events for copies into it.
pub struct AsyncStager {
    stream: Arc<CudaStream>,
    host: Rc<HostBuffer>,
    /// Whether `cuMemHostRegister` accepted the buffer (it can fail, e.g. over a memlock limit); if not,
    /// copies are still correct but synchronous and slower.
    pinned: bool,
    events: Vec<CudaEvent>,
}

impl AsyncStager {
    /// Registers `host` with CUDA and makes `slots` events: at most that many copies may be pending at once.
    pub fn new(gpu: &Gpu, host: Rc<HostBuffer>, slots: usize) -> Result<Self, CudaError> {
        let context = gpu.stream.context().clone();
        context.bind_to_thread()?;
        let stream = context.new_stream()?;
        // SAFETY: the range is the whole of a live mapping that `host` keeps alive until drop, where it is
        // unregistered after the stream has finished every copy into it.
        let pinned = unsafe { sys::cuMemHostRegister_v2(host.address(), host.len(), 0) }.result().is_ok();
        let events = (0..slots.max(1))
            .map(|_| context.new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { stream, host, pinned, events })
    }

    pub fn is_pinned(&self) -> bool {
        self.pinned
    }

    pub fn slots(&self) -> usize {
        self.events.len()
    }

    /// Starts copying `len` device bytes from `device_offset` to host bytes from `host_offset`, and
    /// records event `slot` (modulo the pool) after it. The host bytes must not be read (by the NIC or
    /// anyone) until [`AsyncStager::is_done`] says so for that slot, nor the slot reused before then.
    pub fn copy_out(
        &self,
        device: &DeviceBuffer,
        device_offset: usize,
        host_offset: usize,
        len: usize,
        slot: usize,
    ) -> Result<(), CudaError> {
        let fits = |offset: usize, total: usize| offset.checked_add(len).is_some_and(|end| end <= total);
        if !fits(device_offset, device.len) || !fits(host_offset, self.host.len()) {
            return Err(CudaError::Driver(cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE)));
        }
        self.stream.context().bind_to_thread()?;
        // SAFETY: both ranges were checked to lie inside live allocations (the device buffer is borrowed
        // for this call and outlives the copy because the proxy finishes before the payload drops; the host
        // buffer is kept alive by `self`). No Rust reference to the host bytes exists while the copy runs:
        // the buffer is only handed to the NIC, after the slot's event completes.
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                self.host.address().cast::<u8>().add(host_offset).cast(),
                device.address + device_offset as u64,
                len,
                self.stream.cu_stream(),
            )
        }
        .result()?;
        self.events[slot % self.events.len()].record(&self.stream)?;
        Ok(())
    }

    /// Whether the copy last recorded on `slot` has finished (its host bytes are complete).
    pub fn is_done(&self, slot: usize) -> Result<bool, CudaError> {
        Ok(self.events[slot % self.events.len()].try_is_complete()?)
    }
}

impl Drop for AsyncStager {
    fn drop(&mut self) {
        // Nothing may still be copying into the memory we unregister.
        let _ = self.stream.synchronize();
        if self.pinned {
            // SAFETY: the same address registered in `new`; the stream is idle.
            let _ = unsafe { sys::cuMemHostUnregister(self.host.address()) };
        }
    }
}
