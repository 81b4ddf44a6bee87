//! GPU memory for efatop. CUDA is found at run time (cudarc with dynamic loading): the binary builds and
//! runs on machines with no toolkit and no GPU, and says so when device memory is asked for. The kernels
//! that fill and check buffers are compiled at run time with NVRTC.
//!
//! The pattern the kernels write is byte for byte the host's (`efatop_experiments::pattern`): 8-byte words
//! `mix(key ^ index · K)` in little-endian order, so either side can check the other's data.

pub mod ipc;
pub mod mapped;
pub mod ring;
pub mod ring_gpu;
pub mod stager;

use std::ops::Range;
use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};
use efatop_fabric::{DmabufHandle, MemoryKind, RegistrableMemory};

#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    #[error("CUDA driver: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    #[error("NVRTC could not compile efatop's kernels: {0}")]
    Compile(String),
}

/// The CUDA driver library can be loaded and reports at least one device; never panics.
pub fn device_count() -> Result<usize, CudaError> {
    // SAFETY: only probes whether the shared library can be opened.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(CudaError::NoDevice("the CUDA driver library (libcuda.so) is not installed".into()));
    }
    let count = CudaContext::device_count()?;
    if count < 1 {
        return Err(CudaError::NoDevice("the driver reports no GPU".into()));
    }
    Ok(count as usize)
}

/// The NVRTC target for this context's GPU: its own compute capability, up to `compute_90` (newer GPUs
/// JIT the PTX). The ring's system-scope acquire loads and `__nanosleep`, and the tuned store kernel's cache
/// hints, need compute capability 7.0.
pub(crate) fn nvrtc_arch(context: &CudaContext) -> Result<&'static str, CudaError> {
    use cudarc::driver::sys::CUdevice_attribute as Attr;
    let major = context.attribute(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = context.attribute(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    Ok(match (major, minor) {
        (..=6, _) => {
            let name = context.name().unwrap_or_default();
            return Err(CudaError::NoDevice(format!("efatop's GPU kernels need compute capability 7.0 or newer; {name} is {major}.{minor}")));
        }
        (7, ..=4) => "compute_70",
        (7, _) => "compute_75",
        (8, 0) => "compute_80",
        (8, ..=8) => "compute_86",
        (8, _) => "compute_89",
        _ => "compute_90",
    })
}

const KERNELS: &str = r#"
__device__ unsigned long long efatop_mix(unsigned long long x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

__device__ unsigned long long efatop_word(unsigned long long key, unsigned long long index) {
    return efatop_mix(key ^ (index * 0xd6e8feb86659fd93ULL));
}

extern "C" __global__ void efatop_fill(unsigned char* buf, unsigned long long len, unsigned long long key,
                                       unsigned long long corrupt) {
    unsigned long long words = (len + 7) / 8;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < words;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long v = efatop_word(key, i);
        for (int b = 0; b < 8; b++) {
            unsigned long long at = i * 8 + b;
            if (at < len) {
                unsigned char byte = (unsigned char)(v >> (8 * b));
                buf[at] = at == corrupt ? (unsigned char)(byte ^ 0xff) : byte;
            }
        }
    }
}

extern "C" __global__ void efatop_verify(const unsigned char* buf, unsigned long long len, unsigned long long key,
                                         unsigned long long* first_bad_word) {
    unsigned long long words = (len + 7) / 8;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < words;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long v = efatop_word(key, i);
        for (int b = 0; b < 8; b++) {
            unsigned long long at = i * 8 + b;
            if (at < len && buf[at] != (unsigned char)(v >> (8 * b))) {
                atomicMin(first_bad_word, i);
                break;
            }
        }
    }
}
"#;

/// One GPU: its context, a stream, and efatop's kernels loaded.
pub struct Gpu {
    ordinal: usize,
    name: String,
    pci_bus_id: String,
    stream: Arc<CudaStream>,
    fill: CudaFunction,
    verify: CudaFunction,
}

impl Gpu {
    pub fn open(ordinal: usize) -> Result<Self, CudaError> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(CudaError::NoDevice(format!("GPU {ordinal} does not exist; this node has {count} (0..{})", count - 1)));
        }
        let context = CudaContext::new(ordinal)?;
        let name = context.name()?;
        let pci_bus_id = pci_bus_id(&context)?;
        // SAFETY: only probes whether the shared library can be opened.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(CudaError::Compile("libnvrtc is not installed (or not on LD_LIBRARY_PATH)".into()));
        }
        let ptx = cudarc::nvrtc::compile_ptx(KERNELS).map_err(|e| CudaError::Compile(e.to_string()))?;
        let module = context.load_module(ptx)?;
        let fill = module.load_function("efatop_fill")?;
        let verify = module.load_function("efatop_verify")?;
        Ok(Self { ordinal, name, pci_bus_id, stream: context.default_stream(), fill, verify })
    }

    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `dddd:bb:dd.f`, as `nvidia-smi` prints it.
    pub fn pci_bus_id(&self) -> &str {
        &self.pci_bus_id
    }

    /// Device memory for the NIC (and CUDA IPC): a plain `cuMemAlloc`, not cudarc's stream-ordered pool.
    /// Pool memory cannot be exported through CUDA IPC (`cuIpcGetMemHandle` refuses it), so libfabric's shm
    /// falls back from its IPC protocol to a segmented copy through host memory, and efa rejects it
    /// (libfabric issue 12853). `EFATOP_CUDA_ALLOC=pool` still takes the pool, to measure the difference.
    pub fn alloc(&self, len: usize) -> Result<DeviceBuffer, CudaError> {
        if std::env::var("EFATOP_CUDA_ALLOC").is_ok_and(|v| v == "pool") {
            return self.alloc_pooled(len);
        }
        self.alloc_shareable(len)
    }

    /// cudarc's allocation on the GPU's stream (from its memory pool where the GPU has one): not exportable
    /// through CUDA IPC nor as a dma-buf. Only for comparisons (`EFATOP_CUDA_ALLOC=pool`).
    pub(crate) fn alloc_pooled(&self, len: usize) -> Result<DeviceBuffer, CudaError> {
        let slice = self.stream.alloc_zeros::<u8>(len)?;
        let address = {
            let (ptr, _sync) = slice.device_ptr(&self.stream);
            ptr
        };
        self.stream.synchronize()?;
        Ok(DeviceBuffer {
            allocation: Allocation::Stream(slice),
            address,
            len,
            device: self.ordinal as i32,
            dmabuf: std::sync::OnceLock::new(),
        })
    }

    /// Device memory another process can map (CUDA IPC) and the NIC can take as a dma-buf: a plain
    /// `cuMemAlloc` of whole 64 KiB pages, so that the dma-buf range (host pages) stays inside it.
    pub fn alloc_shareable(&self, len: usize) -> Result<DeviceBuffer, CudaError> {
        let context = self.stream.context().clone();
        context.bind_to_thread()?;
        let mut address = 0;
        let allocated = len.max(1).next_multiple_of(ALLOC_GRANULE);
        // SAFETY: writes one device pointer; freed exactly once, in `DeviceBuffer`'s drop.
        unsafe { cudarc::driver::sys::cuMemAlloc_v2(&raw mut address, allocated) }.result()?;
        let buffer = DeviceBuffer {
            allocation: Allocation::Shareable { context, allocated },
            address,
            len,
            device: self.ordinal as i32,
            dmabuf: std::sync::OnceLock::new(),
        };
        // SAFETY: the whole allocation just made; nothing else refers to it yet.
        unsafe { cudarc::driver::sys::cuMemsetD8Async(address, 0, allocated, self.stream.cu_stream()) }.result()?;
        self.stream.synchronize()?;
        Ok(buffer)
    }

    fn launch_config(words: u64) -> LaunchConfig {
        let blocks = words.div_ceil(256).clamp(1, 4096) as u32;
        LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
    }

    /// Writes the pattern of `key` over `bytes` of the buffer (the pattern's word 0 at `bytes.start`, which
    /// must be a multiple of 8), flipping byte `corrupt` (counted from `bytes.start`) if given.
    pub fn fill(&self, buffer: &DeviceBuffer, bytes: Range<usize>, key: u64, corrupt: Option<u64>) -> Result<(), CudaError> {
        let bytes = clamp(bytes, buffer.len);
        let len64 = bytes.len() as u64;
        let corrupt = corrupt.unwrap_or(u64::MAX);
        let start = buffer.address + bytes.start as u64;
        let mut launch = self.stream.launch_builder(&self.fill);
        launch.arg(&start).arg(&len64).arg(&key).arg(&corrupt);
        // SAFETY: the kernel's signature is (u8*, u64, u64, u64) and it writes only the len64 bytes from
        // `start`, which `clamp` kept inside the buffer; `&self`/`&buffer` keep both alive until the sync.
        unsafe { launch.launch(Self::launch_config(len64.div_ceil(8))) }?;
        self.stream.synchronize()?;
        Ok(())
    }

    /// Checks `bytes` of the buffer against the pattern of `key` (word 0 at `bytes.start`); returns the
    /// offset (from `bytes.start`) and the found byte of the first mismatch.
    pub fn verify(&self, buffer: &DeviceBuffer, bytes: Range<usize>, key: u64) -> Result<Option<(u64, u8)>, CudaError> {
        let bytes = clamp(bytes, buffer.len);
        let (base, len) = (bytes.start, bytes.len());
        let len64 = len as u64;
        let mut first_bad = self.stream.clone_htod(&[u64::MAX])?;
        let start = buffer.address + base as u64;
        let mut launch = self.stream.launch_builder(&self.verify);
        launch.arg(&start).arg(&len64).arg(&key).arg(&mut first_bad);
        // SAFETY: the kernel's signature is (const u8*, u64, u64, u64*); it reads below len64 and writes one word.
        unsafe { launch.launch(Self::launch_config(len64.div_ceil(8))) }?;
        let word = self.stream.clone_dtoh(&first_bad)?[0];
        if word == u64::MAX {
            return Ok(None);
        }
        let start = (word * 8) as usize;
        let end = (start + 8).min(len);
        let mut found = vec![0u8; end - start];
        self.to_host(buffer, base + start, &mut found)?;
        let expected = efatop_expected_word(key, word);
        let at = found.iter().zip(expected).position(|(a, b)| *a != b).unwrap_or(0);
        Ok(Some((word * 8 + at as u64, found[at])))
    }

    /// Copies device bytes from `offset` into `host`.
    pub fn to_host(&self, buffer: &DeviceBuffer, offset: usize, host: &mut [u8]) -> Result<(), CudaError> {
        let bytes = clamp(offset..offset + host.len(), buffer.len);
        self.stream.synchronize()?;
        // SAFETY: `clamp` kept the device range inside the buffer and the host range is as long; the stream
        // is idle, so no kernel is writing those device bytes, and the copy is synchronous.
        unsafe { cudarc::driver::sys::cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), buffer.address + bytes.start as u64, bytes.len()) }
            .result()?;
        Ok(())
    }

    /// Copies `host` into the device buffer at `offset`.
    pub fn from_host(&self, host: &[u8], buffer: &DeviceBuffer, offset: usize) -> Result<(), CudaError> {
        let bytes = clamp(offset..offset + host.len(), buffer.len);
        self.stream.synchronize()?;
        // SAFETY: as in `to_host`, the other way round.
        unsafe { cudarc::driver::sys::cuMemcpyHtoD_v2(buffer.address + bytes.start as u64, host.as_ptr().cast(), bytes.len()) }
            .result()?;
        Ok(())
    }
}

/// `bytes` cut to a buffer of `len` bytes (an empty range past its end).
fn clamp(bytes: Range<usize>, len: usize) -> Range<usize> {
    bytes.start.min(len)..bytes.end.min(len)
}

/// The host-side twin of the kernels' word, for naming the expected bytes of a mismatch.
fn efatop_expected_word(key: u64, index: u64) -> [u8; 8] {
    let mut x = key ^ index.wrapping_mul(0xd6e8_feb8_6659_fd93);
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)).to_le_bytes()
}

fn pci_bus_id(context: &CudaContext) -> Result<String, CudaError> {
    use cudarc::driver::sys::CUdevice_attribute as Attr;
    let domain = context.attribute(Attr::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?;
    let bus = context.attribute(Attr::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?;
    let device = context.attribute(Attr::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?;
    Ok(format!("{domain:08x}:{bus:02x}:{device:02x}.0"))
}

/// `cuMemAlloc` sizes are rounded up to this, so that a dma-buf of whole host pages fits inside.
const ALLOC_GRANULE: usize = 64 << 10;
/// The host page size dma-buf ranges are aligned to.
const HOST_PAGE: u64 = 4096;

/// Device memory the NIC can be given (as `FI_HMEM_CUDA`). Kernels and copies reach it by `address`.
pub struct DeviceBuffer {
    allocation: Allocation,
    address: u64,
    len: usize,
    device: i32,
    /// The dma-buf exporting it, asked for once (on the first registration) and closed on drop; `None`
    /// inside when the driver refused (no dma-buf support, or pool memory).
    dmabuf: std::sync::OnceLock<Option<DmabufHandle>>,
}

/// What keeps a [`DeviceBuffer`]'s memory alive, and how it is given back.
enum Allocation {
    /// cudarc's allocation on the GPU's stream (from its memory pool where the GPU has one), held only so
    /// that it lives as long as the buffer.
    Stream(#[allow(dead_code)] CudaSlice<u8>),
    /// `cuMemAlloc` memory of `allocated` bytes, shareable through CUDA IPC; freed in `drop`.
    Shareable { context: Arc<cudarc::driver::CudaContext>, allocated: usize },
}

impl DeviceBuffer {
    /// The device this memory is on.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// Whether the memory is a plain `cuMemAlloc` (exportable through CUDA IPC and as a dma-buf), not
    /// cudarc's stream-ordered pool.
    pub fn is_plain_allocation(&self) -> bool {
        matches!(self.allocation, Allocation::Shareable { .. })
    }

    /// Asks the driver for a dma-buf of the page-aligned range around the buffer.
    fn export_dmabuf(&self) -> Option<DmabufHandle> {
        use cudarc::driver::sys::{self, CUdevice_attribute, CUmemRangeHandleType};
        let Allocation::Shareable { context, allocated } = &self.allocation else { return None };
        if std::env::var("EFATOP_NO_DMABUF").is_ok_and(|v| v == "1") {
            return None;
        }
        // Drivers before dma-buf support report 0 (or do not know the attribute): do not ask.
        if context.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED).ok()? != 1 {
            return None;
        }
        context.bind_to_thread().ok()?;
        let base = self.address & !(HOST_PAGE - 1);
        let end = (self.address + self.len.max(1) as u64).next_multiple_of(HOST_PAGE);
        // The range must lie inside the allocation, which `alloc_shareable` rounded up to whole granules.
        if end > self.address + *allocated as u64 {
            return None;
        }
        let mut fd: libc::c_int = -1;
        // SAFETY: writes one int (the descriptor) for a range inside our own live allocation; the
        // descriptor is ours and closed exactly once, in drop.
        let ret = unsafe {
            sys::cuMemGetHandleForAddressRange(
                (&raw mut fd).cast(),
                base,
                (end - base) as usize,
                CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        };
        (ret == sys::CUresult::CUDA_SUCCESS && fd >= 0).then_some(DmabufHandle { fd, offset: self.address - base })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if let Some(Some(handle)) = self.dmabuf.get() {
            // SAFETY: the descriptor came from cuMemGetHandleForAddressRange and is closed only here; every
            // registration that used it holds this buffer, so none outlives the close.
            unsafe { libc::close(handle.fd) };
        }
        if let Allocation::Shareable { context, .. } = &self.allocation {
            // Nothing queued on the context may still use the memory.
            let _ = context.bind_to_thread().and_then(|()| context.synchronize());
            // SAFETY: the pointer came from `cuMemAlloc_v2` in `alloc_shareable` and is freed only here.
            let _ = unsafe { cudarc::driver::sys::cuMemFree_v2(self.address) };
        }
    }
}

impl RegistrableMemory for DeviceBuffer {
    fn address(&self) -> *mut c_void {
        self.address as *mut c_void
    }

    fn len(&self) -> usize {
        self.len
    }

    fn kind(&self) -> MemoryKind {
        MemoryKind::Cuda { device: self.device }
    }

    fn dmabuf(&self) -> Option<DmabufHandle> {
        *self.dmabuf.get_or_init(|| self.export_dmabuf())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// GPU 0, or `None` after saying the test is skipped where there is no CUDA device (CI); any other
    /// failure to open it fails the test.
    pub(crate) fn gpu_or_skip() -> Option<Gpu> {
        match Gpu::open(0) {
            Ok(gpu) => Some(gpu),
            Err(CudaError::NoDevice(why)) => {
                // Straight to stderr, not through `eprintln!`, which the test harness captures: the skip shows
                // in a plain `cargo test` run.
                let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("SKIPPED: no CUDA device ({why})\n").as_bytes());
                None
            }
            Err(err) => panic!("{err}"),
        }
    }

    /// On machines without CUDA (CI) this says so and passes; on a GPU machine it checks the kernels.
    #[test]
    fn kernels_write_and_check_the_pattern() {
        let Some(gpu) = crate::tests::gpu_or_skip() else { return };
        let buffer = gpu.alloc(1 << 20).expect("alloc");
        gpu.fill(&buffer, 0..1 << 20, 42, None).expect("fill");
        assert_eq!(gpu.verify(&buffer, 0..1 << 20, 42).expect("verify"), None);
        assert!(gpu.verify(&buffer, 0..1 << 20, 43).expect("verify").is_some());
        gpu.fill(&buffer, 0..1000, 42, Some(777)).expect("fill");
        let (offset, _) = gpu.verify(&buffer, 0..1000, 42).expect("verify").expect("the flipped byte");
        assert_eq!(offset, 777);
        let mut host = vec![0u8; 16];
        gpu.to_host(&buffer, 0, &mut host).expect("copy");
        assert_eq!(&host[..8], &efatop_expected_word(42, 0));
        // A slot further in: the pattern starts over at its first byte, and mismatches count from there.
        gpu.fill(&buffer, 4096..8192, 7, Some(5)).expect("fill");
        assert_eq!(gpu.verify(&buffer, 4096..8192, 7).expect("verify").map(|(at, _)| at), Some(5));
        gpu.to_host(&buffer, 4096 + 8, &mut host).expect("copy");
        assert_eq!(&host[..8], &efatop_expected_word(7, 1));
    }

    /// NIC buffers are plain `cuMemAlloc` memory (CUDA IPC and dma-buf can export it); the dma-buf, where
    /// the driver gives one, is asked for once and covers the buffer from a page-aligned start.
    #[test]
    fn device_buffers_are_plain_allocations_with_a_page_aligned_dmabuf() {
        let Some(gpu) = crate::tests::gpu_or_skip() else { return };
        let buffer = gpu.alloc(3 << 20).expect("alloc");
        assert!(buffer.is_plain_allocation(), "NIC buffers must not come from the stream-ordered pool");
        match buffer.dmabuf() {
            Some(handle) => {
                assert!(handle.fd >= 0);
                assert!(handle.offset < HOST_PAGE, "{handle:?}");
                assert_eq!((buffer.address - handle.offset) % HOST_PAGE, 0);
                assert_eq!(buffer.dmabuf(), Some(handle), "the descriptor is obtained once");
                eprintln!("dma-buf: fd {} offset {}", handle.fd, handle.offset);
            }
            None => eprintln!("NOTE: this driver gives no dma-buf for device memory (registration falls back to the virtual address)"),
        }
        // CUDA IPC can export it too (the pool's memory cannot).
        crate::ipc::export_handle(&buffer).expect("cuIpcGetMemHandle on a plain allocation");
    }

    #[test]
    fn no_device_is_an_error_not_a_panic() {
        // Wherever this runs, asking for a GPU that cannot exist is a clear error.
        match Gpu::open(10_000) {
            Err(CudaError::NoDevice(why)) => assert!(!why.is_empty()),
            Err(other) => panic!("unexpected {other}"),
            Ok(_) => panic!("GPU 10000 exists?"),
        }
    }
}
