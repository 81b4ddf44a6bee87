//! `queue`: the GPU→CPU request ring alone, no fabric. A kernel of `blocks × threads` producers pushes
//! requests; this thread consumes them. For each producer shape, two passes:
//!
//! - open loop: every producer pushes its share without waiting; requests/s = requests consumed /
//!   time from the first pop to the last (the ring's sustained rate, whichever side limits it);
//! - closed loop: every push waits until the consumer has taken it; the producer measures push (before
//!   claiming its slot) to seeing the consumer's index pass it, on the GPU's clock — so the figure
//!   includes the index's trip back over PCIe. p50/p99 over every request.
//!
//! Both passes check that every request was consumed exactly once, in each producer's order.

use std::time::Instant;

use efatop_cuda::ring::ExactlyOnce;
use efatop_cuda::ring_gpu::{GpuRing, RingKernels, Running};
pub use efatop_cuda::ring_gpu::RingDesign;
use efatop_cuda::Gpu;

use efatop_proto::results::QueueRow;
use crate::cuda_error;
use crate::ExperimentError;

#[derive(Clone, Debug)]
pub struct QueueOptions {
    pub gpu: usize,
    pub blocks: Vec<u32>,
    pub threads: Vec<u32>,
    /// Requests per shape in the open-loop pass (each producer pushes its share, at least 16).
    pub requests: u64,
    /// Requests per shape in the closed-loop pass (at least 4 per producer).
    pub latency_requests: u64,
    pub slots: u64,
    pub timeout: std::time::Duration,
    /// How the GPU's producers push.
    pub design: RingDesign,
}

/// Opens the GPU, compiles the ring kernels and measures every (blocks, threads) shape, telling
/// `on_row` of each as it finishes.
pub fn run(options: &QueueOptions, on_row: &mut dyn FnMut(&QueueRow)) -> Result<Vec<QueueRow>, ExperimentError> {
    let no_device = |err: efatop_cuda::CudaError| match err {
        efatop_cuda::CudaError::NoDevice(why) => ExperimentError::Unsupported(format!("queue: no CUDA device ({why})")),
        other => cuda_error(other),
    };
    let gpu = Gpu::open(options.gpu).map_err(no_device)?;
    let kernels = RingKernels::with_design(&gpu, options.design).map_err(no_device)?;
    let mut rows = Vec::new();
    for &blocks in &options.blocks {
        for &threads in &options.threads {
            let producers = u64::from(blocks) * u64::from(threads);
            let per_producer = (options.requests / producers).max(16);
            let ring = kernels.ring(options.slots).map_err(cuda_error)?;
            let running = kernels.launch_producers(&ring, blocks, threads, per_producer, None).map_err(cuda_error)?;
            let (consumed, seconds) = drain(&ring, running, producers, per_producer, options.timeout)?;

            let latency_per_producer = (options.latency_requests / producers).max(4);
            let latency_total = producers * latency_per_producer;
            let mut latency = kernels.alloc::<u32>(latency_total as usize).map_err(cuda_error)?;
            let ring = kernels.ring(options.slots).map_err(cuda_error)?;
            let running = kernels
                .launch_producers(&ring, blocks, threads, latency_per_producer, Some(&mut latency))
                .map_err(cuda_error)?;
            drain(&ring, running, producers, latency_per_producer, options.timeout)?;
            let mut latency_ns = kernels.copy_back(&latency).map_err(cuda_error)?;
            latency_ns.sort_unstable();
            let row = QueueRow {
                blocks,
                threads,
                requests: consumed,
                requests_per_s: (consumed - 1) as f64 / seconds,
                latency_requests: latency_total,
                latency_p50_us: percentile(&latency_ns, 0.50),
                latency_p99_us: percentile(&latency_ns, 0.99),
                latency_max_us: percentile(&latency_ns, 1.0),
                verified: true,
            };
            on_row(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Consumes every request of a running producer kernel and checks each came exactly once; returns how
/// many, and the seconds from the first pop to the last.
fn drain(
    ring: &GpuRing,
    running: Running<'_>,
    producers: u64,
    per_producer: u64,
    timeout: std::time::Duration,
) -> Result<(u64, f64), ExperimentError> {
    let total = producers * per_producer;
    let mut consumer = ring.view().consumer();
    let mut check = ExactlyOnce::new(producers as usize, per_producer);
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    while consumer.consumed() < total {
        // Pops until the ring is empty, then reads the clock once: a clock read per pop would cost the
        // consumer a good part of its rate. The first pop is timed alone; the last pop's time is read
        // right after it (the batch it ends is the last).
        let mut popped = 0u32;
        while let Some((_, request)) = consumer.try_pop() {
            if first.is_none() {
                first = Some(Instant::now());
            }
            check.record(&request);
            popped += 1;
            if popped == 4096 || consumer.consumed() == total {
                break;
            }
        }
        if popped > 0 {
            last = Instant::now();
        } else if last.elapsed() > timeout {
            // Dropping `running` aborts the ring and waits for the kernel.
            return Err(ExperimentError::Stalled {
                waiting: format!("queue: {} of {total} GPU requests consumed", consumer.consumed()),
                timeout,
            });
        }
    }
    let seconds = first.map_or(0.0, |first| last.duration_since(first).as_secs_f64()).max(1e-9);
    running.finish().map_err(cuda_error)?;
    if consumer.try_pop().is_some() {
        return Err(ExperimentError::Unsupported("queue: more requests than the producers pushed".into()));
    }
    check.finish().map_err(|detail| ExperimentError::Verification {
        receiver: 0,
        sender: 0,
        config: format!("queue {producers} producers"),
        size: format!("{per_producer} requests each"),
        detail,
    })?;
    Ok((total, seconds))
}

fn percentile(sorted_ns: &[u32], quantile: f64) -> f64 {
    if sorted_ns.is_empty() {
        return 0.0;
    }
    let index = ((sorted_ns.len() - 1) as f64 * quantile).round() as usize;
    f64::from(sorted_ns[index]) / 1000.0
}
