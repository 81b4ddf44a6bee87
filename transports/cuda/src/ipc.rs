//! CUDA IPC between processes of one host, for the `ipc` experiment: one process exports a device buffer
//! ([`export_handle`]), another maps it into its own GPU's address space ([`PeerMemory`]), and an
//! [`IpcWriter`] moves bytes into it either with a kernel of a chosen grid × block, whose stores cross
//! NVLink (or PCIe) one thread at a time, or with the copy engine (`cuMemcpyDtoDAsync`), the baseline.
//!
//! Every pass is followed by a timing event, so the caller can follow the passes as they finish (live
//! telemetry) without stopping the stream, and time them on the GPU's clock afterwards.

use std::sync::Arc;

use cudarc::driver::sys::{self, CUevent_flags};
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};

use crate::{CudaError, DeviceBuffer, Gpu};

/// Bytes of a CUDA IPC memory handle (`CUipcMemHandle`), as the bootstrap carries it.
pub const HANDLE_LEN: usize = 64;

/// The largest block CUDA launches (threads per block), and the smallest the store kernel takes: a warp, so
/// the first block can always copy the last few bytes past the last whole 16-byte vector.
pub const MAX_BLOCK: u32 = 1024;
pub const MIN_BLOCK: u32 = 32;

// One thread stores 16-byte vectors, grid-stride, four loads in flight before their four stores: enough
// independent stores per thread that a small grid is limited by how many stores it can keep outstanding
// over the link, which is what the grid sweep shows. The system-scope fence makes the stores visible to the
// peer GPU and the host before the kernel is seen to finish (the seed's `__threadfence_system`).
const STORE_KERNEL: &str = r#"
extern "C" __global__ void efatop_ipc_store(const uint4* __restrict__ source, uint4* __restrict__ target,
                                            unsigned long long vectors, const unsigned char* source_bytes,
                                            unsigned char* target_bytes, unsigned long long len) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long first = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long i = first;
    for (; i + 3 * stride < vectors; i += 4 * stride) {
        uint4 a = source[i];
        uint4 b = source[i + stride];
        uint4 c = source[i + 2 * stride];
        uint4 d = source[i + 3 * stride];
        target[i] = a;
        target[i + stride] = b;
        target[i + 2 * stride] = c;
        target[i + 3 * stride] = d;
    }
    for (; i < vectors; i += stride) {
        target[i] = source[i];
    }
    unsigned long long tail = vectors * 16 + first;
    if (tail < len) {
        target_bytes[tail] = source_bytes[tail];
    }
    __threadfence_system();
}

// The tuned kernels (`Mover::Tuned`; TunedShape picks one): on Hopper the bulk kernel below (mode 6), and
// for sizes under BULK_SMALLEST or on older GPUs this store kernel: a grid sized to the GPU (a few blocks
// per SM, all resident at once) in which each block copies contiguous tiles of EFATOP_UNROLL x blockDim vectors, every thread keeping
// EFATOP_UNROLL 16-byte loads in flight before its stores. Contiguous tiles keep each block's accesses in
// few DRAM pages, and the resident grid keeps enough bytes in flight to fill HBM (or NVLink) without the
// block-scheduling churn of a grid-stride over a huge grid. EFATOP_TUNED_MODE picks the cache hints:
// 0 plain loads and stores, 1 streaming (`ld.global.cs`/`st.global.cs`), 2 non-coherent loads that skip
// L1 (`ld.global.nc.L1::no_allocate`), 3 those with a 256-byte L2 prefetch (`.L2::256B`), 4 those marked
// evict-first in L2, 5 non-coherent loads and streaming stores; 6 is the bulk kernel below. The remainder
// past the last whole round of tiles goes grid-stride over every thread, the last bytes past the last whole
// vector one per thread.
//
// EFATOP_TUNED_FENCE: 0 no fence (the default): like the copy engine, the kernel's completion, which the
// event after it marks, is what makes its stores visible to the peer GPU and the host, and rank 1 checks
// every byte after each step; 1 one system-scope fence per block (after a barrier); 2 one per thread, the
// seed kernel's `__threadfence_system()`. Per thread it costs a quarter of the rate at 8M and 5 % at 64M
// on an H100 (docs/measurements.md).
__device__ __forceinline__ uint4 efatop_tuned_load(const uint4* p, unsigned long long policy) {
#if EFATOP_TUNED_MODE == 1
    return __ldcs(p);
#elif EFATOP_TUNED_MODE == 2 || EFATOP_TUNED_MODE == 5
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
#elif EFATOP_TUNED_MODE == 3
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
#elif EFATOP_TUNED_MODE == 4
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(policy));
    return v;
#else
    return *p;
#endif
}

__device__ __forceinline__ void efatop_tuned_store(uint4* p, uint4 v) {
#if EFATOP_TUNED_MODE == 1 || EFATOP_TUNED_MODE == 5
    __stcs(p, v);
#else
    *p = v;
#endif
}

// The launch bounds are the shape the writer launches: the compiler may then give each thread all the
// registers that many resident threads leave (64 at 1024 threads per SM: all 8 loads in flight; at 2048
// threads per SM it has 32 and keeps 4 in flight, the same bytes per SM).
extern "C" __global__ void __launch_bounds__(EFATOP_TUNED_BLOCK, EFATOP_TUNED_BLOCKS_PER_SM) efatop_ipc_store_tuned(
        const uint4* __restrict__ source, uint4* __restrict__ target, unsigned long long vectors,
        const unsigned char* source_bytes, unsigned char* target_bytes, unsigned long long len) {
    unsigned long long policy = 0;
#if EFATOP_TUNED_MODE == 4
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
    // Whole rounds of tiles (one per block), dealt round-robin; the rest, less than a round, is shared by
    // every thread of the grid below, so that no block still copies a whole tile while the others idle.
    const unsigned long long tile = (unsigned long long)EFATOP_UNROLL * blockDim.x;
    const unsigned long long tiles = vectors / tile / gridDim.x * gridDim.x;
    for (unsigned long long t = blockIdx.x; t < tiles; t += gridDim.x) {
        const uint4* from = source + t * tile + threadIdx.x;
        uint4* to = target + t * tile + threadIdx.x;
        uint4 v[EFATOP_UNROLL];
#pragma unroll
        for (int u = 0; u < EFATOP_UNROLL; u++) v[u] = efatop_tuned_load(from + (unsigned long long)u * blockDim.x, policy);
#pragma unroll
        for (int u = 0; u < EFATOP_UNROLL; u++) efatop_tuned_store(to + (unsigned long long)u * blockDim.x, v[u]);
    }
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long first = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long i = tiles * tile + first;
    for (; i + 3 * stride < vectors; i += 4 * stride) {
        uint4 a = efatop_tuned_load(source + i, policy), b = efatop_tuned_load(source + i + stride, policy);
        uint4 c = efatop_tuned_load(source + i + 2 * stride, policy), d = efatop_tuned_load(source + i + 3 * stride, policy);
        efatop_tuned_store(target + i, a);
        efatop_tuned_store(target + i + stride, b);
        efatop_tuned_store(target + i + 2 * stride, c);
        efatop_tuned_store(target + i + 3 * stride, d);
    }
    for (; i < vectors; i += stride) {
        efatop_tuned_store(target + i, efatop_tuned_load(source + i, policy));
    }
    unsigned long long tail = vectors * 16 + first;
    if (tail < len) {
        target_bytes[tail] = source_bytes[tail];
    }
#if EFATOP_TUNED_FENCE == 2
    __threadfence_system();
#elif EFATOP_TUNED_FENCE == 1
    __syncthreads();
    if (threadIdx.x == 0) __threadfence_system();
#endif
}

// Mode 6, Hopper's bulk copies: in each block one thread moves pieces global -> shared -> global with
// `cp.async.bulk`, through EFATOP_BULK_STAGES shared-memory stages of EFATOP_BULK_STAGE bytes, each load
// completing on an mbarrier, each store in a bulk group that must have read its stage before the stage is
// loaded again. The host cuts the whole grains (EFATOP_BULK_GRAIN bytes, so pieces start on cache lines)
// into gridDim.x x `rounds` pieces of `piece` bytes, the first `extra` of them a grain longer, so every
// block moves the same bytes within a grain (piece p of block p % gridDim.x starts at
// p x piece + grain x min(p, extra)); the bytes past the last whole grain go one per thread of block 0.
#define EFATOP_BULK_STAGE 16384
#define EFATOP_BULK_GRAIN 1024
// EFATOP_BULK_HINT (modes 7 to 9 are mode 6 with L2 hints): 0 none, 1 loads and stores marked evict-first
// in L2, 2 loads only, 3 stores only: a copy's bytes are not read again, and the copy engine keeps them out
// of the way of the rest.
__device__ __forceinline__ void efatop_bulk_load(unsigned stage, unsigned barrier, const unsigned char* from, unsigned bytes,
                                                 unsigned long long policy) {
    unsigned long long state;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;" : "=l"(state) : "r"(barrier), "r"(bytes) : "memory");
#if EFATOP_BULK_HINT == 1 || EFATOP_BULK_HINT == 2
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
                 :: "r"(stage), "l"(from), "r"(bytes), "r"(barrier), "l"(policy) : "memory");
#else
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(stage), "l"(from), "r"(bytes), "r"(barrier) : "memory");
#endif
}

__device__ __forceinline__ void efatop_bulk_store(unsigned char* to, unsigned stage, unsigned bytes, unsigned long long policy) {
#if EFATOP_BULK_HINT == 1 || EFATOP_BULK_HINT == 3
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;"
                 :: "l"(to), "r"(stage), "r"(bytes), "l"(policy) : "memory");
#else
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" :: "l"(to), "r"(stage), "r"(bytes) : "memory");
#endif
}

extern "C" __global__ void __launch_bounds__(32, 1) efatop_ipc_store_bulk(const unsigned char* source,
        unsigned char* target, unsigned long long len, unsigned long long piece, unsigned long long rounds,
        unsigned long long extra) {
#if __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) unsigned char efatop_stages[];
    __shared__ __align__(8) unsigned long long efatop_barriers[EFATOP_BULK_STAGES];
    if (threadIdx.x == 0 && piece + EFATOP_BULK_GRAIN <= EFATOP_BULK_STAGE) {
        unsigned long long policy = 0;
#if EFATOP_BULK_HINT != 0
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
        const unsigned stages = (unsigned)__cvta_generic_to_shared(efatop_stages);
        const unsigned barriers = (unsigned)__cvta_generic_to_shared(efatop_barriers);
        for (int s = 0; s < EFATOP_BULK_STAGES; s++) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(barriers + 8 * s) : "memory");
        }
        // The barriers' initialisation is seen by the copy engine's (async) proxy.
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        unsigned long long issued = 0;
        for (; issued < rounds && issued < EFATOP_BULK_STAGES; issued++) {
            const unsigned long long p = blockIdx.x + issued * gridDim.x;
            const unsigned long long at = p * piece + EFATOP_BULK_GRAIN * (p < extra ? p : extra);
            const unsigned bytes = (unsigned)(piece + (p < extra ? EFATOP_BULK_GRAIN : 0));
            if (bytes) efatop_bulk_load(stages + (unsigned)issued * EFATOP_BULK_STAGE, barriers + 8 * (unsigned)issued, source + at, bytes, policy);
        }
        for (unsigned long long i = 0; i < rounds; i++) {
            const unsigned s = (unsigned)(i % EFATOP_BULK_STAGES);
            const unsigned long long p = blockIdx.x + i * gridDim.x;
            const unsigned long long at = p * piece + EFATOP_BULK_GRAIN * (p < extra ? p : extra);
            const unsigned bytes = (unsigned)(piece + (p < extra ? EFATOP_BULK_GRAIN : 0));
            if (bytes) {
                const unsigned parity = (unsigned)((i / EFATOP_BULK_STAGES) & 1);
                unsigned done = 0;
                while (!done) {
                    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                                 : "=r"(done) : "r"(barriers + 8 * s), "r"(parity) : "memory");
                }
                efatop_bulk_store(target + at, stages + s * EFATOP_BULK_STAGE, bytes, policy);
                asm volatile("cp.async.bulk.commit_group;" ::: "memory");
            }
            if (issued < rounds) {
                // The stage is loaded again only once the store from it has read it.
                asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
                const unsigned long long q = blockIdx.x + issued * gridDim.x;
                const unsigned long long from = q * piece + EFATOP_BULK_GRAIN * (q < extra ? q : extra);
                const unsigned next = (unsigned)(piece + (q < extra ? EFATOP_BULK_GRAIN : 0));
                const unsigned t = (unsigned)(issued % EFATOP_BULK_STAGES);
                if (next) efatop_bulk_load(stages + t * EFATOP_BULK_STAGE, barriers + 8 * t, source + from, next, policy);
                issued++;
            }
        }
        // Every store complete (not only read from shared memory) before the block ends.
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
    for (unsigned long long at = len / EFATOP_BULK_GRAIN * EFATOP_BULK_GRAIN + threadIdx.x; blockIdx.x == 0 && at < len; at += 32) {
        target[at] = source[at];
    }
#endif
}
"#;

/// The tuned kernel's shape: `unroll` 16-byte vectors in flight per thread, `blocks_per_sm` blocks of
/// `block` threads per multiprocessor (the grid is that times the GPU's SM count, fewer for small copies),
/// `mode` its cache hints and `fence` its system-scope fence (see the kernel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TunedShape {
    pub unroll: u32,
    pub blocks_per_sm: u32,
    pub block: u32,
    pub mode: u32,
    pub fence: u32,
}

impl TunedShape {
    /// What the measurements chose (docs/measurements.md): Hopper's bulk copies, 8 stages of
    /// 16 KiB, one block per SM; where the GPU has none (before compute capability 9.0) and for sizes under
    /// [`BULK_SMALLEST`], the store kernel in [`TunedShape::STORE`]'s shape.
    pub const DEFAULT: TunedShape = TunedShape { unroll: 8, blocks_per_sm: 1, block: 32, mode: 6, fence: 0 };
    /// The store kernel's shape when the bulk mode is not there: 2 blocks of 512 per SM, 8 loads in flight
    /// per thread, plain loads and stores, no fence.
    pub const STORE: TunedShape = TunedShape { unroll: 8, blocks_per_sm: 2, block: 512, mode: 0, fence: 0 };

    /// `EFATOP_IPC_TUNED=unroll,blocks_per_sm,block,mode[,fence]` replaces the default (for measuring
    /// variants; the run's notes say which shape ran); anything unreadable keeps the default.
    pub fn from_env() -> Self {
        std::env::var("EFATOP_IPC_TUNED").ok().and_then(|text| Self::parse(&text)).unwrap_or(Self::DEFAULT)
    }

    fn parse(text: &str) -> Option<Self> {
        let numbers: Vec<u32> = text.split(',').map(|n| n.trim().parse().ok()).collect::<Option<_>>()?;
        let (&[unroll, blocks_per_sm, block, mode], fence) = match numbers.as_slice() {
            [four @ .., fence] if four.len() == 4 => (<&[u32; 4]>::try_from(four).ok()?, *fence),
            four => (<&[u32; 4]>::try_from(four).ok()?, Self::DEFAULT.fence),
        };
        let valid = (1..=32).contains(&unroll)
            && (1..=32).contains(&blocks_per_sm)
            && (MIN_BLOCK..=MAX_BLOCK).contains(&block)
            && block % 32 == 0
            && block * blocks_per_sm <= 2048
            && mode <= 9
            && fence <= 2
            // The bulk kernel: one warp a block, its stages in at most 224 KiB of shared memory per SM.
            && (mode < 6 || (block == 32 && fence == 0 && u64::from(unroll * blocks_per_sm) * BULK_STAGE <= 224 << 10));
        valid.then_some(Self { unroll, blocks_per_sm, block, mode, fence })
    }

    /// The store kernel's grid for `vectors` 16-byte vectors on `sms` multiprocessors: every resident block,
    /// but no more blocks than it takes to give each thread a vector (at least one).
    pub fn grid(&self, sms: u32, vectors: u64) -> u32 {
        let needed = vectors.div_ceil(u64::from(self.block)).max(1);
        u64::from(sms * self.blocks_per_sm).min(needed) as u32
    }

    /// Modes 6 to 9: the bulk-copy kernel (Hopper's `cp.async.bulk`), `unroll` stages of [`BULK_STAGE`]
    /// bytes; 7 to 9 with L2 evict-first hints (`EFATOP_BULK_HINT`).
    pub fn is_bulk(&self) -> bool {
        self.mode >= 6
    }

    /// The shape the store kernel is compiled for: this one, or for the bulk mode (whose store kernel moves
    /// only the sizes under [`BULK_SMALLEST`]) [`TunedShape::STORE`].
    fn store_kernel(self) -> Self {
        if self.is_bulk() { Self::STORE } else { self }
    }
}

/// Bytes of one shared-memory stage of the bulk kernel (`EFATOP_BULK_STAGE`).
pub const BULK_STAGE: u64 = 16384;
/// Below this the bulk mode moves bytes with the store kernel: its pieces would be too few and too small.
pub const BULK_SMALLEST: usize = 1 << 20;

/// The bulk kernel's pieces are whole multiples of this many bytes (and start at such offsets): pieces cut
/// at 16-byte units start inside cache lines and ran 5 % slower on an H100 (docs/measurements.md).
pub const BULK_GRAIN: u64 = 1024;

/// How the bulk kernel cuts `len` bytes for `grid` blocks: `(piece, rounds, extra)`, every block moving
/// `rounds` pieces of `piece` bytes, the first `extra` pieces [`BULK_GRAIN`] bytes more, each at most a
/// stage; the bytes past the last whole grain are copied apart.
pub fn bulk_pieces(grid: u64, len: u64) -> (u64, u64, u64) {
    let grains = len / BULK_GRAIN;
    let most = BULK_STAGE / BULK_GRAIN - 1;
    let rounds = grains.div_ceil(grid * most).max(1);
    let piece_grains = grains / (grid * rounds);
    (piece_grains * BULK_GRAIN, rounds, grains - grid * rounds * piece_grains)
}

/// The handle another process of this host opens with [`PeerMemory::open`]. Only memory from
/// [`Gpu::alloc_shareable`] can be exported.
pub fn export_handle(buffer: &DeviceBuffer) -> Result<[u8; HANDLE_LEN], CudaError> {
    let crate::Allocation::Shareable { context, .. } = &buffer.allocation else {
        return Err(CudaError::NoDevice("CUDA IPC needs memory from Gpu::alloc_shareable (cuMemAlloc)".into()));
    };
    context.bind_to_thread()?;
    let mut handle = sys::CUipcMemHandle { reserved: [0; HANDLE_LEN] };
    // SAFETY: writes the handle struct; the address is the start of a live cuMemAlloc allocation.
    unsafe { sys::cuIpcGetMemHandle(&raw mut handle, buffer.address) }.result()?;
    Ok(handle.reserved.map(|b| b as u8))
}

/// Another process's device buffer, mapped into this process (and reachable from this process's GPU; the
/// driver enables peer access between the two GPUs as needed). Unmapped on drop.
pub struct PeerMemory {
    context: Arc<CudaContext>,
    address: u64,
    len: usize,
}

impl PeerMemory {
    /// Maps the buffer behind `handle`, which its owner says is `len` bytes long.
    pub fn open(gpu: &Gpu, handle: &[u8; HANDLE_LEN], len: usize) -> Result<Self, CudaError> {
        let context = gpu.stream.context().clone();
        context.bind_to_thread()?;
        let handle = sys::CUipcMemHandle { reserved: handle.map(|b| b as core::ffi::c_char) };
        let mut address = 0;
        let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
        // SAFETY: writes one device pointer; closed exactly once, in drop.
        unsafe { sys::cuIpcOpenMemHandle_v2(&raw mut address, handle, flags) }.result()?;
        Ok(Self { context, address, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for PeerMemory {
    fn drop(&mut self) {
        // No kernel or copy of ours may still be storing into it.
        let _ = self.context.bind_to_thread().and_then(|()| self.context.synchronize());
        // SAFETY: the address came from cuIpcOpenMemHandle in `open` and is closed only here.
        let _ = unsafe { sys::cuIpcCloseMemHandle(self.address) };
    }
}

/// How the writer moves its bytes into the peer's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mover {
    /// The store kernel with `grid` blocks of `block` threads.
    Kernel { grid: u32, block: u32 },
    /// The tuned kernel, its grid sized to this GPU ([`TunedShape`]).
    Tuned,
    /// One `cuMemcpyDtoDAsync`, done by a copy engine.
    CopyEngine,
}

/// Moves bytes from a local device buffer into a [`PeerMemory`] on a stream of its own.
pub struct IpcWriter {
    stream: Arc<CudaStream>,
    store: CudaFunction,
    tuned: CudaFunction,
    /// The bulk kernel, when the shape asks for it and the GPU has it (compute capability 9.0).
    bulk: Option<CudaFunction>,
    shape: TunedShape,
    sms: u32,
    /// The bulk kernel's grid: a block per SM times `blocks_per_sm`, or the SMs `EFATOP_IPC_BULK_SMS` allows.
    bulk_grid: u32,
}

impl IpcWriter {
    /// A writer whose tuned kernel has the shape `EFATOP_IPC_TUNED` names, else the default.
    pub fn new(gpu: &Gpu) -> Result<Self, CudaError> {
        Self::with_shape(gpu, TunedShape::from_env())
    }

    /// A writer whose tuned kernel has `shape` (the bulk mode falls back to the default below compute
    /// capability 9.0).
    pub fn with_shape(gpu: &Gpu, mut shape: TunedShape) -> Result<Self, CudaError> {
        let context = gpu.stream.context().clone();
        context.bind_to_thread()?;
        let sms = context.attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let major = context.attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        if shape.is_bulk() && major < 9 {
            shape = TunedShape::STORE;
        }
        let kernel = shape.store_kernel();
        let source = format!(
            "#define EFATOP_UNROLL {}\n#define EFATOP_TUNED_MODE {}\n#define EFATOP_TUNED_BLOCK {}\n\
             #define EFATOP_TUNED_BLOCKS_PER_SM {}\n#define EFATOP_TUNED_FENCE {}\n#define EFATOP_BULK_STAGES {}\n\
             #define EFATOP_BULK_HINT {}\n{STORE_KERNEL}",
            kernel.unroll, kernel.mode, kernel.block, kernel.blocks_per_sm, kernel.fence, shape.unroll, shape.mode.saturating_sub(6)
        );
        let options = cudarc::nvrtc::CompileOptions { arch: Some(crate::nvrtc_arch(&context)?), ..Default::default() };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(source, options).map_err(|e| CudaError::Compile(e.to_string()))?;
        let module = context.load_module(ptx)?;
        let store = module.load_function("efatop_ipc_store")?;
        let tuned = module.load_function("efatop_ipc_store_tuned")?;
        let bulk = if shape.is_bulk() {
            let bulk = module.load_function("efatop_ipc_store_bulk")?;
            let bytes = i32::try_from(u64::from(shape.unroll) * BULK_STAGE).unwrap_or(i32::MAX);
            bulk.set_attribute(cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes)?;
            Some(bulk)
        } else {
            None
        };
        let sms = sms.max(1) as u32;
        // A measuring aid beside EFATOP_IPC_TUNED: the bulk kernel on fewer SMs than the GPU has.
        let bulk_sms = std::env::var("EFATOP_IPC_BULK_SMS").ok().and_then(|n| n.trim().parse::<u32>().ok()).filter(|n| *n > 0);
        let bulk_grid = bulk_sms.unwrap_or(sms).min(sms) * shape.blocks_per_sm;
        Ok(Self { stream: context.new_stream()?, store, tuned, bulk, shape, sms, bulk_grid })
    }

    /// The tuned kernel's shape on this GPU, as a note for the run.
    pub fn tuned_description(&self) -> String {
        let TunedShape { unroll, blocks_per_sm, block, mode, fence } = self.shape;
        let fence = match fence {
            1 => "a system-scope fence per block",
            2 => "a system-scope fence per thread",
            _ => "no fence (the kernel's end orders its stores, as for the copy engine)",
        };
        if self.bulk.is_some() {
            let hints = match mode {
                7 => ", loads and stores marked evict-first in L2",
                8 => ", loads marked evict-first in L2",
                9 => ", stores marked evict-first in L2",
                _ => "",
            };
            return format!(
                "kernel (tuned): Hopper bulk copies (cp.async.bulk), grid {}x32 ({blocks_per_sm} per SM, {} of {} SMs), one thread a \
                 block moving equal shares through {unroll} shared-memory stages of {} KiB{hints}; sizes under {} KiB by the store \
                 kernel; {fence}",
                self.bulk_grid,
                self.bulk_grid / blocks_per_sm,
                self.sms,
                BULK_STAGE >> 10,
                BULK_SMALLEST >> 10
            );
        }
        let hints = match mode {
            1 => "streaming loads and stores",
            2 => "non-coherent loads",
            3 => "non-coherent loads with 256-byte L2 prefetch",
            4 => "non-coherent loads marked evict-first in L2",
            5 => "non-coherent loads and streaming stores",
            _ => "plain loads and stores",
        };
        format!(
            "kernel (tuned): grid {}x{block} ({blocks_per_sm} blocks of {block} threads per SM, {} SMs; fewer for sizes under \
             a vector a thread), whole rounds of contiguous tiles then the rest over every thread, {unroll} 16-byte loads in \
             flight per thread, {hints}, {fence}",
            self.sms * blocks_per_sm,
            self.sms
        )
    }

    /// Starts `passes` moves of the first `len` bytes of `source` to the start of `target`, each followed
    /// by a timing event, and returns at once; the [`Passes`] follow them and queue the rest.
    pub fn start<'w>(
        &'w self,
        mover: Mover,
        source: &'w DeviceBuffer,
        target: &'w PeerMemory,
        len: usize,
        passes: usize,
    ) -> Result<Passes<'w>, CudaError> {
        if len > source.len || len > target.len {
            return Err(CudaError::Driver(cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE)));
        }
        if let Mover::Kernel { grid, block } = mover {
            if grid == 0 || !(MIN_BLOCK..=MAX_BLOCK).contains(&block) {
                return Err(CudaError::Driver(cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE)));
            }
        }
        let context = self.stream.context();
        context.bind_to_thread()?;
        let timing = || context.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT));
        let start = timing()?;
        let ends = (0..passes).map(|_| timing()).collect::<Result<Vec<_>, _>>()?;
        start.record(&self.stream)?;
        let mut passes = Passes { writer: self, mover, source, target, len, start, ends, queued: 0, done: 0 };
        passes.top_up()?;
        Ok(passes)
    }

    fn queue_one(&self, mover: Mover, source: u64, target: u64, len: usize) -> Result<(), CudaError> {
        match mover {
            Mover::CopyEngine => {
                // SAFETY: `start` checked that both buffers hold `len` bytes; both outlive the stream's work
                // (`Passes` borrows them, and `PeerMemory` and `DeviceBuffer` synchronise before they free
                // or unmap).
                unsafe { sys::cuMemcpyDtoDAsync_v2(target, source, len, self.stream.cu_stream()) }.result()?;
            }
            Mover::Tuned if self.bulk.is_some() && len >= BULK_SMALLEST => {
                let Some(bulk) = &self.bulk else { unreachable!("checked") };
                let grid = self.bulk_grid;
                let (piece, rounds, extra) = bulk_pieces(u64::from(grid), len as u64);
                let len64 = len as u64;
                let mut launch = self.stream.launch_builder(bulk);
                launch.arg(&source).arg(&target).arg(&len64).arg(&piece).arg(&rounds).arg(&extra);
                let shared = u32::try_from(u64::from(self.shape.unroll) * BULK_STAGE).unwrap_or(u32::MAX);
                let config = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: shared };
                // SAFETY: the signature is (const u8*, u8*, u64, u64, u64, u64); the pieces cover exactly the
                // whole 16-byte units of `len` (bulk_pieces), the rest one byte per thread, all within the
                // `len` bytes `start` checked; the shared memory is what `new` allowed the function.
                unsafe { launch.launch(config) }?;
            }
            Mover::Kernel { .. } | Mover::Tuned => {
                let vectors = (len / 16) as u64;
                let len64 = len as u64;
                let (function, grid, block) = if let Mover::Kernel { grid, block } = mover {
                    (&self.store, grid, block)
                } else {
                    let shape = self.shape.store_kernel();
                    (&self.tuned, shape.grid(self.sms, vectors), shape.block)
                };
                let mut launch = self.stream.launch_builder(function);
                launch.arg(&source).arg(&target).arg(&vectors).arg(&source).arg(&target).arg(&len64);
                let config = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (block, 1, 1), shared_mem_bytes: 0 };
                // SAFETY: both kernels' signature is (const uint4*, uint4*, u64, const u8*, u8*, u64); each reads
                // and writes only the first `len` bytes of each buffer, which `start` checked exist. Both
                // pointers come from cuMemAlloc/cuIpcOpenMemHandle, so they are 256-byte aligned for uint4.
                unsafe { launch.launch(config) }?;
            }
        }
        Ok(())
    }
}

/// Passes queued ahead of the GPU at most. CUDA's launch queue holds about a thousand entries and a full
/// one blocks the caller: queueing a whole long run at once would leave the CPU stuck in a launch, unable
/// to report progress, for as long as the run takes. 256 passes (and their events) keep the GPU fed.
const QUEUED_AHEAD: usize = 256;

/// Passes started by [`IpcWriter::start`], queued a window at a time and followed as they finish.
pub struct Passes<'w> {
    writer: &'w IpcWriter,
    mover: Mover,
    source: &'w DeviceBuffer,
    target: &'w PeerMemory,
    len: usize,
    start: CudaEvent,
    ends: Vec<CudaEvent>,
    queued: usize,
    done: usize,
}

impl Passes<'_> {
    /// Queues passes until [`QUEUED_AHEAD`] are outstanding or all are queued.
    fn top_up(&mut self) -> Result<(), CudaError> {
        while self.queued < self.ends.len() && self.queued < self.done + QUEUED_AHEAD {
            self.writer.queue_one(self.mover, self.source.address, self.target.address, self.len)?;
            self.ends[self.queued].record(&self.writer.stream)?;
            self.queued += 1;
        }
        Ok(())
    }

    /// How many more passes have finished since the last call (never waits), queueing more behind them.
    pub fn poll(&mut self) -> Result<usize, CudaError> {
        let before = self.done;
        while self.done < self.queued && self.ends[self.done].try_is_complete()? {
            self.done += 1;
        }
        self.top_up()?;
        Ok(self.done - before)
    }

    pub fn finished(&self) -> usize {
        self.done
    }

    pub fn total(&self) -> usize {
        self.ends.len()
    }

    /// Waits for every pass; returns each pass's time and the time of all of them, in nanoseconds on the
    /// GPU's clock (CUDA events resolve about half a microsecond).
    pub fn finish(mut self) -> Result<(Vec<u64>, u64), CudaError> {
        // Oldest first, topping up behind it, so the GPU never waits for the CPU to queue the next pass.
        while self.done < self.ends.len() {
            self.top_up()?;
            self.ends[self.done].synchronize()?;
            self.done += 1;
        }
        let Some(last) = self.ends.last() else { return Ok((Vec::new(), 0)) };
        let ns = |from: &CudaEvent, to: &CudaEvent| -> Result<u64, CudaError> {
            Ok((f64::from(from.elapsed_ms(to)?) * 1e6).round().max(0.0) as u64)
        };
        let mut each = Vec::with_capacity(self.ends.len());
        let mut previous = &self.start;
        for end in &self.ends {
            each.push(ns(previous, end)?);
            previous = end;
        }
        Ok((each, ns(&self.start, last)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a GPU machine: a buffer exported and opened in the same process (the driver refuses that, so the
    /// test checks the refusal is an error) — and the store kernel and the copy engine both move every byte,
    /// including a tail that is not a whole vector, between two local buffers through the same code path.
    #[test]
    fn store_kernel_and_copy_engine_move_every_byte() {
        let Some(gpu) = crate::tests::gpu_or_skip() else { return };
        let len = (1 << 20) + 13;
        let source = gpu.alloc(len).expect("alloc");
        let target = gpu.alloc_shareable(len).expect("alloc");
        let handle = export_handle(&target).expect("export");
        assert!(PeerMemory::open(&gpu, &handle, len).is_err(), "the driver maps IPC handles only in other processes");
        // Buffers are plain cuMemAlloc now (exportable); cudarc's stream-ordered pool still cannot be.
        assert!(export_handle(&source).is_ok(), "Gpu::alloc memory is exportable");
        assert!(export_handle(&gpu.alloc_pooled(4096).expect("alloc")).is_err(), "pool memory cannot be exported");
        // The same process reaches its own buffer directly: a PeerMemory over a local address.
        let local = PeerMemory { context: gpu.stream.context().clone(), address: target.address, len };
        let writer = IpcWriter::new(&gpu).expect("writer");
        for (key, mover) in
            [(5, Mover::Kernel { grid: 3, block: 64 }), (6, Mover::CopyEngine), (7, Mover::Kernel { grid: 128, block: 256 }), (9, Mover::Tuned)]
        {
            gpu.fill(&source, 0..len, key, None).expect("fill");
            let passes = writer.start(mover, &source, &local, len, 3).expect("start");
            let (each, total) = passes.finish().expect("finish");
            assert_eq!(each.len(), 3);
            assert!(total > 0 && each.iter().sum::<u64>().abs_diff(total) < 10_000, "{each:?} vs {total}");
            assert_eq!(gpu.verify(&target, 0..len, key).expect("verify"), None, "{mover:?}");
        }
        // The tuned kernel, the default and the bulk mode, at sizes around a tile (8 x 512 vectors), a round
        // of tiles and the bulk mode's smallest: tails of vectors and of bytes.
        for shape in [TunedShape::STORE, TunedShape::DEFAULT, TunedShape::parse("8,1,1024,1").expect("shape")] {
            let tuned = IpcWriter::with_shape(&gpu, shape).expect("writer");
            for (key, len) in [(10u64, 4096 * 16 - 1), (11, 3 * 4096 * 16 + 17), (12, len), (13, 1 << 20), (14, len - 16)] {
                gpu.fill(&source, 0..len, key, None).expect("fill");
                gpu.fill(&target, 0..len, key ^ 0xff, None).expect("poison");
                tuned.start(Mover::Tuned, &source, &local, len, 2).expect("start").finish().expect("finish");
                assert_eq!(gpu.verify(&target, 0..len, key).expect("verify"), None, "tuned {shape:?}, {len} bytes");
            }
        }
        // More passes than are queued at once: the rest are queued as the first ones finish.
        gpu.fill(&source, 0..len, 8, None).expect("fill");
        let mut passes = writer.start(Mover::Kernel { grid: 64, block: 128 }, &source, &local, 4096, QUEUED_AHEAD * 2 + 3).expect("start");
        while passes.finished() < passes.total() {
            passes.poll().expect("poll");
        }
        let (each, _) = passes.finish().expect("finish");
        assert_eq!(each.len(), QUEUED_AHEAD * 2 + 3);
        assert_eq!(gpu.verify(&target, 0..4096, 8).expect("verify"), None);
        assert!(writer.start(Mover::Kernel { grid: 1, block: 16 }, &source, &local, len, 1).is_err());
        assert!(writer.start(Mover::CopyEngine, &source, &local, len + 1, 1).is_err());
        // `local` does not own the mapping: do not close it.
        std::mem::forget(local);
    }

    #[test]
    fn tuned_shapes_read_from_the_environment_and_grids_fit_the_size() {
        assert_eq!(TunedShape::parse("8,1,32,6"), Some(TunedShape::DEFAULT));
        assert_eq!(TunedShape::parse("8,2,512,0,0"), Some(TunedShape::STORE));
        assert_eq!(TunedShape::DEFAULT.store_kernel(), TunedShape::STORE);
        assert_eq!(
            TunedShape::parse("4, 4, 256, 1, 2"),
            Some(TunedShape { unroll: 4, blocks_per_sm: 4, block: 256, mode: 1, fence: 2 })
        );
        for bad in ["", "8,2,512", "8,2,500,0", "0,2,512,0", "8,2,512,7", "8,1,32,10", "8,2,2048,0", "8,0,512,0", "a,2,512,0", "8,4,1024,0", "8,2,512,0,3", "8,2,512,0,0,0"] {
            assert_eq!(TunedShape::parse(bad), None, "{bad}");
        }
        let shape = TunedShape::parse("8,2,512,0").expect("shape");
        // 132 SMs: 264 blocks of 512 once there is a vector a thread, fewer below, never none.
        assert_eq!(shape.grid(132, 1 << 26), 264);
        assert_eq!(shape.grid(132, 512 * 10 + 5), 11);
        assert_eq!(shape.grid(132, 100), 1);
        assert_eq!(TunedShape::parse("8,1,1024,1").expect("shape").grid(132, 1 << 26), 132);
        // The bulk mode: one warp a block, at most 224 KiB of stages per SM.
        assert!(TunedShape::parse("8,1,32,6").is_some_and(|s| s.is_bulk()));
        assert_eq!(TunedShape::parse("8,1,64,6"), None);
        assert_eq!(TunedShape::parse("8,2,32,6"), None);
        assert_eq!(TunedShape::parse("8,1,32,6,1"), None);
        assert!(TunedShape::parse("4,3,32,6").is_some());
    }

    /// The bulk kernel's pieces cover every whole grain exactly once, each fits a stage, and every block
    /// moves the same bytes within a grain.
    #[test]
    fn bulk_pieces_cover_the_whole_units_evenly() {
        for grid in [1u64, 132, 396] {
            for len in [1u64 << 20, (1 << 20) + 17, 8 << 20, 3 << 28, 1 << 30, (1 << 30) - 48, (1 << 30) - 4096 + 1000] {
                let (piece, rounds, extra) = bulk_pieces(grid, len);
                let grain = BULK_GRAIN;
                assert!(piece % grain == 0 && piece >= grain && piece + grain <= BULK_STAGE, "{grid} {len}: {piece}");
                assert!(extra < grid * rounds, "{grid} {len}");
                assert_eq!(grid * rounds * piece + grain * extra, len / grain * grain, "{grid} {len}");
                // The last piece ends where the whole grains end.
                let last = grid * rounds - 1;
                assert_eq!(last * piece + grain * last.min(extra) + piece + if last < extra { grain } else { 0 }, len / grain * grain);
            }
        }
    }
}
