//! The request ring on a GPU: its words in mapped host memory, the producers' own words (tail, head
//! mirror) in device memory, and the two kernels that push into it — the queue benchmark's producers and
//! the proxy experiment's writer. Both push with the design [`RingDesign`] names.
//! Kernels run on a stream of their own (non-blocking), so the CPU can copy and verify on the default
//! stream while a kernel waits for the proxy.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};

use crate::mapped::MappedHostMemory;
use crate::ring::{self, RingView, RING_CUDA};
use crate::{CudaError, Gpu};

const KERNELS: &str = r#"
#define EFATOP_PUSH(seed, ...) ((seed) ? efatop_ring_push_seed(__VA_ARGS__) : efatop_ring_push(__VA_ARGS__))

// The queue benchmark: every producer thread pushes `per_producer` requests tagged (producer, index).
// With `wait_for_consume`, each push waits until the CPU consumed it and records how long that took.
// `seed` picks the first design of the push (see efatop_ring_push_seed).
extern "C" __global__ void efatop_queue_producers(unsigned long long* words, unsigned long long* dev,
        unsigned long long capacity, unsigned long long per_producer, int wait_for_consume,
        unsigned int* latency_ns, int seed) {
    unsigned long long producer = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    for (unsigned long long i = 0; i < per_producer; i++) {
        unsigned long long started = efatop_now_ns();
        unsigned long long ticket = EFATOP_PUSH(seed, words, dev, capacity, 0, producer, i, 0, (producer << 32) | i,
                                                wait_for_consume);
        if (ticket == EFATOP_ABORTED) return;
        if (wait_for_consume) {
            unsigned long long took = efatop_now_ns() - started;
            latency_ns[producer * per_producer + i] = took > 0xffffffffULL ? 0xffffffffU : (unsigned int)took;
        }
    }
}

// The proxy experiment's schedule, run by one GPU thread: `warmup + iters` iterations, each writing
// [0, size) to `peer`, split over `channels` channels, each channel's share in writes of at most `chunk`
// bytes (the channels take turns, chunk by chunk). Blocking: Quiet after every write. NBI: Quiet once
// after the warmup and once at the end. ends[0] is the timed start, ends[k] the end of timed iteration k
// (NBI's last one after its Quiet). The immediate is `immediate_base | iteration`.
extern "C" __global__ void efatop_proxy_writer(unsigned long long* words, unsigned long long* dev,
        unsigned long long capacity, unsigned long long peer, unsigned long long immediate_base,
        unsigned long long tag_mask, unsigned long long size, unsigned long long channels,
        unsigned long long chunk, unsigned long long warmup, unsigned long long iters, int quiet_each,
        unsigned long long* ends, int seed) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    unsigned long long last = EFATOP_ABORTED, quiet_calls = 0;
    // Only this thread writes the count; the CPU reads it for the dashboard, so plain volatile stores.
    volatile unsigned long long* quiets = words + EFATOP_QUIETS;
    // The most writes any channel takes per iteration.
    unsigned long long rounds = 0;
    for (unsigned long long c = 0; c < channels; c++) {
        unsigned long long share = size * (c + 1) / channels - size * c / channels;
        unsigned long long writes = (share + chunk - 1) / chunk;
        if (writes > rounds) rounds = writes;
    }
    for (unsigned long long it = 0; it < warmup + iters; it++) {
        if (it == warmup) {
            if (last != EFATOP_ABORTED && !efatop_quiet(words, last)) return;
            ends[0] = efatop_now_ns();
        }
        for (unsigned long long round = 0; round < rounds; round++) {
            for (unsigned long long c = 0; c < channels; c++) {
                unsigned long long start = size * c / channels + round * chunk, end = size * (c + 1) / channels;
                if (end <= start) continue;
                unsigned long long len = end - start < chunk ? end - start : chunk;
                last = EFATOP_PUSH(seed, words, dev, capacity, peer | (c << 32), start, len,
                                   immediate_base | (it & tag_mask), it, 0);
                if (last == EFATOP_ABORTED) return;
                if (quiet_each) {
                    if (!efatop_quiet(words, last)) return;
                    *quiets = ++quiet_calls;
                }
            }
        }
        if (it >= warmup) {
            if (it + 1 == warmup + iters && !quiet_each) {
                if (!efatop_quiet(words, last)) return;
                *quiets = ++quiet_calls;
            }
            ends[it - warmup + 1] = efatop_now_ns();
        }
    }
}
"#;

/// How GPU producers push (both designs speak the same protocol over the same words; see [`RING_CUDA`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RingDesign {
    /// One tail atomic per warp (lanes take consecutive tickets), one waiter per warp, waiting on a
    /// device-memory mirror of the head that one producer at a time refreshes over PCIe (docs/measurements.md).
    #[default]
    Warp,
    /// The first design: one tail atomic and one poller of the head in host memory per thread.
    Seed,
}

impl RingDesign {
    /// `EFATOP_RING=seed` picks the first design (for before/after comparisons of `proxy`); anything
    /// else, or nothing, the current one.
    pub fn from_env() -> Self {
        match std::env::var("EFATOP_RING").as_deref() {
            Ok("seed") => Self::Seed,
            _ => Self::Warp,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Warp => "warp",
            Self::Seed => "seed",
        }
    }

    /// What the design does, for a header line.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Warp => "one tail atomic and one waiter per warp, head mirrored in device memory",
            Self::Seed => "one tail atomic and one host-memory head poller per thread (the first design)",
        }
    }
}

/// The ring kernels of one GPU, and the stream they run on.
pub struct RingKernels {
    stream: Arc<CudaStream>,
    producers: CudaFunction,
    writer: CudaFunction,
    design: RingDesign,
}

impl RingKernels {
    /// The kernels with the design `EFATOP_RING` names (the current one by default).
    pub fn new(gpu: &Gpu) -> Result<Self, CudaError> {
        Self::with_design(gpu, RingDesign::from_env())
    }

    pub fn with_design(gpu: &Gpu, design: RingDesign) -> Result<Self, CudaError> {
        let context = gpu.stream.context().clone();
        let options = cudarc::nvrtc::CompileOptions { arch: Some(crate::nvrtc_arch(&context)?), ..Default::default() };
        let source = format!("{RING_CUDA}\n{KERNELS}");
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(source, options).map_err(|e| CudaError::Compile(e.to_string()))?;
        let module = context.load_module(ptx)?;
        Ok(Self {
            producers: module.load_function("efatop_queue_producers")?,
            writer: module.load_function("efatop_proxy_writer")?,
            stream: context.new_stream()?,
            design,
        })
    }

    pub fn design(&self) -> RingDesign {
        self.design
    }

    fn seed(&self) -> i32 {
        i32::from(self.design == RingDesign::Seed)
    }

    /// A ring of `capacity` slots (a power of two).
    pub fn ring(&self, capacity: u64) -> Result<GpuRing, CudaError> {
        if !capacity.is_power_of_two() {
            return Err(CudaError::Compile(format!("ring capacity {capacity} is not a power of two")));
        }
        let memory = MappedHostMemory::new(self.stream.context(), ring::words_for(capacity))?;
        let device_words = self.stream.alloc_zeros::<u64>(ring::DEVICE_WORDS)?;
        self.stream.synchronize()?;
        let device_address = device_address(&device_words, &self.stream);
        Ok(GpuRing { memory, _device_words: device_words, device_address, capacity })
    }

    /// Starts `blocks × threads` producers, each pushing `per_producer` requests. With
    /// `latency_ns` (one entry per request), each waits for its request to be consumed and records
    /// how long push-to-consumed took on the GPU's clock.
    pub fn launch_producers<'r>(
        &'r self,
        ring: &'r GpuRing,
        blocks: u32,
        threads: u32,
        per_producer: u64,
        latency_ns: Option<&'r mut CudaSlice<u32>>,
    ) -> Result<Running<'r>, CudaError> {
        let wait_for_consume = i32::from(latency_ns.is_some());
        let seed = self.seed();
        let latency_address = latency_ns.map_or(0, |slice| device_address(slice, &self.stream));
        let words = ring.memory.device_address();
        let mut launch = self.stream.launch_builder(&self.producers);
        launch
            .arg(&words)
            .arg(&ring.device_address)
            .arg(&ring.capacity)
            .arg(&per_producer)
            .arg(&wait_for_consume)
            .arg(&latency_address)
            .arg(&seed);
        let config = LaunchConfig { grid_dim: (blocks.max(1), 1, 1), block_dim: (threads.max(1), 1, 1), shared_mem_bytes: 0 };
        // SAFETY: the arguments match (u64*, u64*, u64, u64, int, u32*, int); words and the device words stay allocated
        // while the returned guard borrows the ring, and latency_ns (when given, blocks·threads·per_producer
        // entries, checked by the caller) likewise; the guard waits for the kernel before either ends.
        unsafe { launch.launch(config) }?;
        Ok(Running { stream: &self.stream, ring, finished: false })
    }

    /// Starts the proxy writer (see the kernel's comment); `ends` needs `iters + 1` entries.
    pub fn launch_writer<'r>(&'r self, ring: &'r GpuRing, plan: &WriterPlan, ends: &'r mut CudaSlice<u64>) -> Result<Running<'r>, CudaError> {
        if ends.len() < plan.iters as usize + 1 {
            return Err(CudaError::Compile("the writer's timestamp buffer is too small".into()));
        }
        let ends_address = device_address(ends, &self.stream);
        let words = ring.memory.device_address();
        let quiet_each = i32::from(plan.quiet_each);
        let seed = self.seed();
        // 0 (or anything past the size) is one write per channel per iteration.
        let chunk = if plan.chunk == 0 { plan.size.max(1) } else { plan.chunk };
        let mut launch = self.stream.launch_builder(&self.writer);
        launch
            .arg(&words)
            .arg(&ring.device_address)
            .arg(&ring.capacity)
            .arg(&plan.peer)
            .arg(&plan.immediate_base)
            .arg(&plan.tag_mask)
            .arg(&plan.size)
            .arg(&plan.channels)
            .arg(&chunk)
            .arg(&plan.warmup)
            .arg(&plan.iters)
            .arg(&quiet_each)
            .arg(&ends_address)
            .arg(&seed);
        let config = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: the arguments match the kernel's signature; ends has iters + 1 entries (checked above);
        // the ring and ends outlive the kernel because the guard borrows them and waits for it.
        unsafe { launch.launch(config) }?;
        Ok(Running { stream: &self.stream, ring, finished: false })
    }

    pub fn copy_back<T: cudarc::driver::DeviceRepr + Default + Clone>(&self, slice: &CudaSlice<T>) -> Result<Vec<T>, CudaError> {
        Ok(self.stream.clone_dtoh(slice)?)
    }

    pub fn alloc<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(&self, len: usize) -> Result<CudaSlice<T>, CudaError> {
        let slice = self.stream.alloc_zeros::<T>(len.max(1))?;
        self.stream.synchronize()?;
        Ok(slice)
    }
}

/// What the proxy writer kernel does (see its comment).
#[derive(Clone, Copy, Debug)]
pub struct WriterPlan {
    pub peer: u64,
    pub immediate_base: u64,
    pub tag_mask: u64,
    pub size: u64,
    pub channels: u64,
    /// The largest write: each channel's share goes out in writes of at most this many bytes (0: whole).
    pub chunk: u64,
    pub warmup: u64,
    pub iters: u64,
    pub quiet_each: bool,
}

/// A ring on the GPU: its words in mapped host memory, the producers' words (claim counter, head mirror)
/// in device memory.
pub struct GpuRing {
    memory: MappedHostMemory,
    /// [`ring::DEVICE_WORDS`] words; held so that `device_address` stays valid.
    _device_words: CudaSlice<u64>,
    device_address: u64,
    capacity: u64,
}

impl GpuRing {
    pub fn view(&self) -> RingView<'_> {
        RingView::new(self.memory.words(), self.capacity).expect("words_for(capacity) words of a power-of-two ring")
    }
}

/// A kernel in flight over a ring. Dropping it without [`Running::finish`] aborts the ring (so waiting
/// producers return) and waits for the kernel, so no memory it uses is freed under it.
pub struct Running<'r> {
    stream: &'r Arc<CudaStream>,
    ring: &'r GpuRing,
    finished: bool,
}

impl Running<'_> {
    /// Waits for the kernel to end.
    pub fn finish(mut self) -> Result<(), CudaError> {
        self.finished = true;
        Ok(self.stream.synchronize()?)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.ring.view().abort();
            let _ = self.stream.synchronize();
        }
    }
}

fn device_address<T>(slice: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (address, _sync) = slice.device_ptr(stream);
    address
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::ExactlyOnce;

    /// Both designs: 64 blocks × 128 GPU threads × 64 pushes through 256 slots, and 4 × 96 threads through
    /// 16 slots (fewer than a warp claims at once: each lane then waits for its own slot); open and closed
    /// loop. Every request consumed exactly once, in each producer's order.
    #[test]
    fn gpu_producers_every_request_consumed_exactly_once() {
        let Some(gpu) = crate::tests::gpu_or_skip() else { return };
        for design in [RingDesign::Warp, RingDesign::Seed] {
            let kernels = RingKernels::with_design(&gpu, design).expect("ring kernels compile");
            for (slots, blocks, threads, per_producer) in [(256u64, 64u32, 128u32, 64u64), (16, 4, 96, 32)] {
                for wait in [false, true] {
                    let what = format!("{design:?}, {slots} slots, {blocks}x{threads}, wait {wait}");
                    let total = u64::from(blocks * threads) * per_producer;
                    let ring = kernels.ring(slots).expect("ring");
                    let mut latency = kernels.alloc::<u32>(total as usize).expect("latency buffer");
                    let running = kernels
                        .launch_producers(&ring, blocks, threads, per_producer, wait.then_some(&mut latency))
                        .expect("launch");
                    let mut consumer = ring.view().consumer();
                    let mut check = ExactlyOnce::new((blocks * threads) as usize, per_producer);
                    let started = std::time::Instant::now();
                    while consumer.consumed() < total {
                        if let Some((_, request)) = consumer.try_pop() {
                            check.record(&request);
                        }
                        assert!(started.elapsed().as_secs() < 60, "{what}: the GPU stopped pushing at {}", consumer.consumed());
                    }
                    running.finish().expect("kernel");
                    assert!(consumer.try_pop().is_none(), "{what}");
                    check.finish().unwrap_or_else(|err| panic!("{what}: {err}"));
                    if wait {
                        let latencies = kernels.copy_back(&latency).expect("copy");
                        assert!(latencies.iter().all(|ns| *ns > 0), "{what}: every push measured");
                    }
                }
            }
        }
    }

    /// A consumer that gives up (drops the kernel's guard) releases producers that wait for room, in both
    /// designs: the kernel ends instead of hanging.
    #[test]
    fn an_abort_releases_waiting_gpu_producers() {
        let Some(gpu) = crate::tests::gpu_or_skip() else { return };
        for design in [RingDesign::Warp, RingDesign::Seed] {
            let kernels = RingKernels::with_design(&gpu, design).expect("ring kernels compile");
            let ring = kernels.ring(64).expect("ring");
            let running = kernels.launch_producers(&ring, 8, 256, 16, None).expect("launch");
            let mut consumer = ring.view().consumer();
            let started = std::time::Instant::now();
            while consumer.consumed() < 100 {
                consumer.try_pop();
                assert!(started.elapsed().as_secs() < 60, "{design:?}: no requests");
            }
            drop(running);
            assert!(started.elapsed().as_secs() < 60, "{design:?}: the abort ended the kernel");
        }
    }
}
