//! The request ring on a GPU: its words in mapped host memory, its tail in device memory, and the two
//! kernels that push into it — the queue benchmark's producers and the proxy experiment's writer.
//! Kernels run on a stream of their own (non-blocking), so the CPU can copy and verify on the default
//! stream while a kernel waits for the proxy.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};

use crate::mapped::MappedHostMemory;
use crate::ring::{self, RingView, RING_CUDA};
use crate::{CudaError, Gpu};

const KERNELS: &str = r#"
// The queue benchmark: every producer thread pushes `per_producer` requests tagged (producer, index).
// With `wait_for_consume`, each push waits until the CPU consumed it and records how long that took.
extern "C" __global__ void efatop_queue_producers(unsigned long long* words, unsigned long long* tail,
        unsigned long long capacity, unsigned long long per_producer, int wait_for_consume,
        unsigned int* latency_ns) {
    unsigned long long producer = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    for (unsigned long long i = 0; i < per_producer; i++) {
        unsigned long long started = efatop_now_ns();
        unsigned long long ticket = efatop_ring_push(words, tail, capacity, 0, producer, i, 0, (producer << 32) | i);
        if (ticket == EFATOP_ABORTED) return;
        if (wait_for_consume) {
            while (efatop_load_acquire_sys(words + EFATOP_HEAD) <= ticket) {
                if (efatop_load_acquire_sys(words + EFATOP_ABORT)) return;
                __nanosleep(32);
            }
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
extern "C" __global__ void efatop_proxy_writer(unsigned long long* words, unsigned long long* tail,
        unsigned long long capacity, unsigned long long peer, unsigned long long immediate_base,
        unsigned long long tag_mask, unsigned long long size, unsigned long long channels,
        unsigned long long chunk, unsigned long long warmup, unsigned long long iters, int quiet_each,
        unsigned long long* ends) {
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
                last = efatop_ring_push(words, tail, capacity, peer | (c << 32), start, len,
                                        immediate_base | (it & tag_mask), it);
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

/// The ring kernels of one GPU, and the stream they run on.
pub struct RingKernels {
    stream: Arc<CudaStream>,
    producers: CudaFunction,
    writer: CudaFunction,
}

impl RingKernels {
    pub fn new(gpu: &Gpu) -> Result<Self, CudaError> {
        use cudarc::driver::sys::CUdevice_attribute as Attr;
        let context = gpu.stream.context().clone();
        let major = context.attribute(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = context.attribute(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        // System-scope acquire loads and __nanosleep need compute capability 7.0; newer GPUs JIT the PTX.
        let arch = match (major, minor) {
            (..=6, _) => {
                return Err(CudaError::NoDevice(format!(
                    "the GPU ring needs compute capability 7.0 or newer; {} is {major}.{minor}",
                    gpu.name()
                )))
            }
            (7, ..=4) => "compute_70",
            (7, _) => "compute_75",
            (8, 0) => "compute_80",
            (8, ..=8) => "compute_86",
            (8, _) => "compute_89",
            _ => "compute_90",
        };
        let options = cudarc::nvrtc::CompileOptions { arch: Some(arch), ..Default::default() };
        let source = format!("{RING_CUDA}\n{KERNELS}");
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(source, options).map_err(|e| CudaError::Compile(e.to_string()))?;
        let module = context.load_module(ptx)?;
        Ok(Self {
            producers: module.load_function("efatop_queue_producers")?,
            writer: module.load_function("efatop_proxy_writer")?,
            stream: context.new_stream()?,
        })
    }

    /// A ring of `capacity` slots (a power of two).
    pub fn ring(&self, capacity: u64) -> Result<GpuRing, CudaError> {
        if !capacity.is_power_of_two() {
            return Err(CudaError::Compile(format!("ring capacity {capacity} is not a power of two")));
        }
        let memory = MappedHostMemory::new(self.stream.context(), ring::words_for(capacity))?;
        let tail = self.stream.alloc_zeros::<u64>(1)?;
        self.stream.synchronize()?;
        let tail_address = device_address(&tail, &self.stream);
        Ok(GpuRing { memory, _tail: tail, tail_address, capacity })
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
        let latency_address = latency_ns.map_or(0, |slice| device_address(slice, &self.stream));
        let words = ring.memory.device_address();
        let mut launch = self.stream.launch_builder(&self.producers);
        launch
            .arg(&words)
            .arg(&ring.tail_address)
            .arg(&ring.capacity)
            .arg(&per_producer)
            .arg(&wait_for_consume)
            .arg(&latency_address);
        let config = LaunchConfig { grid_dim: (blocks.max(1), 1, 1), block_dim: (threads.max(1), 1, 1), shared_mem_bytes: 0 };
        // SAFETY: the arguments match (u64*, u64*, u64, u64, int, u32*); words and tail stay allocated
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
        // 0 (or anything past the size) is one write per channel per iteration.
        let chunk = if plan.chunk == 0 { plan.size.max(1) } else { plan.chunk };
        let mut launch = self.stream.launch_builder(&self.writer);
        launch
            .arg(&words)
            .arg(&ring.tail_address)
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
            .arg(&ends_address);
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

/// A ring on the GPU: its words in mapped host memory, its claim counter in device memory.
pub struct GpuRing {
    memory: MappedHostMemory,
    /// The tail producers claim tickets from; held so that `tail_address` stays valid.
    _tail: CudaSlice<u64>,
    tail_address: u64,
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

    fn open() -> Option<(Gpu, RingKernels)> {
        let gpu = crate::tests::gpu_or_skip()?;
        let kernels = RingKernels::new(&gpu).expect("ring kernels compile");
        Some((gpu, kernels))
    }

    /// 64 blocks × 128 GPU threads × 64 pushes through 256 slots: every request consumed exactly once.
    #[test]
    fn gpu_producers_every_request_consumed_exactly_once() {
        let Some((_gpu, kernels)) = open() else { return };
        for wait in [false, true] {
            let (blocks, threads, per_producer) = (64u32, 128u32, 64u64);
            let total = u64::from(blocks * threads) * per_producer;
            let ring = kernels.ring(256).expect("ring");
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
                assert!(started.elapsed().as_secs() < 60, "the GPU stopped pushing at {}", consumer.consumed());
            }
            running.finish().expect("kernel");
            assert!(consumer.try_pop().is_none());
            check.finish().expect("exactly once");
            if wait {
                let latencies = kernels.copy_back(&latency).expect("copy");
                assert!(latencies.iter().all(|ns| *ns > 0), "every push measured");
            }
        }
    }
}
