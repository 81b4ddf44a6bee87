//! Pinned host memory mapped into the GPU's address space (`cuMemHostAlloc` with
//! `CU_MEMHOSTALLOC_DEVICEMAP`): the CPU and the GPU read and write the same bytes, the GPU over PCIe.
//! This is where the GPU→CPU request ring and the proxy's completion counter live.
//!
//! The CPU sees the memory only as `AtomicU64` words: the GPU changes them behind the compiler's back,
//! so every CPU access must be an atomic (never a plain) load or store.

use std::ffi::c_void;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext};

use crate::CudaError;

/// `words` 64-bit words of mapped, zeroed host memory; freed on drop.
pub struct MappedHostMemory {
    host: *mut c_void,
    device_address: u64,
    words: usize,
    /// The allocation belongs to this context, which must outlive it.
    context: Arc<CudaContext>,
}

impl MappedHostMemory {
    pub fn new(context: &Arc<CudaContext>, words: usize) -> Result<Self, CudaError> {
        let bytes = words.max(1) * std::mem::size_of::<u64>();
        context.bind_to_thread()?;
        // SAFETY: the context is bound to this thread; cuMemHostAlloc returns page-aligned memory of
        // `bytes` bytes or an error. PORTABLE: usable from every context; DEVICEMAP: the GPU gets an address.
        let host = unsafe {
            result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE)
        }?;
        let mut memory = Self { host, device_address: 0, words: words.max(1), context: context.clone() };
        // SAFETY: `host` points to `bytes` writable bytes that nothing else references yet.
        unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, bytes) };
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: `host` was returned by cuMemHostAlloc with DEVICEMAP in this (bound) context; `device`
        // is a valid out-pointer. On error `memory`'s drop frees the allocation.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&raw mut device, host, 0) }.result()?;
        memory.device_address = device;
        Ok(memory)
    }

    /// The GPU's address of word 0, for kernel arguments.
    pub fn device_address(&self) -> u64 {
        self.device_address
    }

    /// The memory as atomic words, as the CPU must access it.
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: `host` is page-aligned (so 8-aligned), `words` words long, zero-initialised and valid
        // until drop, which the returned borrow cannot outlive. AtomicU64 has u64's layout; the GPU's
        // concurrent writes are why the CPU goes through atomics at all.
        unsafe { std::slice::from_raw_parts(self.host.cast::<AtomicU64>(), self.words) }
    }
}

impl Drop for MappedHostMemory {
    fn drop(&mut self) {
        let _ = self.context.bind_to_thread();
        // SAFETY: `host` came from cuMemHostAlloc and is freed once; every borrow of it (words, and the
        // kernels given its device address, which the ring's owners synchronise first) has ended.
        let _ = unsafe { result::free_host(self.host) };
    }
}
