//! `ipc`: NVLink writes between two GPUs of one host through CUDA IPC (seed `overview.md`, NVLink section).
//!
//! Rank 1 allocates its target buffer with `cuMemAlloc` and shares a CUDA IPC handle to it through the
//! bootstrap; rank 0 maps it and moves its own device buffer into it, for each configuration:
//! - `IPC <grid>x<block>`: a store kernel of that grid and block, each thread storing 16-byte vectors into
//!   the peer's memory, then a system-scope fence (the seed's kernel);
//! - `kernel (tuned)`: GPU-initiated copies sized to the writer's GPU, to show what they reach beside the
//!   seed's grid sweep: on Hopper, bulk copies (`cp.async.bulk`) through shared memory, one block per SM
//!   moving an equal share; elsewhere, and under 1 MiB, a store kernel with a resident grid and 8 loads in
//!   flight per thread (`efatop_cuda::ipc::TunedShape`; the run's notes say which ran);
//! - `CE`: the copy engine (`cuMemcpyDtoDAsync` into the mapped buffer), the baseline in the same run.
//!
//! Each (configuration, size) step: rank 0 fills its source with the step's pattern and rank 1 poisons its
//! target; then `warmup` untimed passes and `iters` timed passes, each followed by a CUDA event, so
//! Gbps = bytes of the timed passes / the GPU time from the first to the last event, and the latency
//! columns are per pass. Rank 1 then checks every byte of its target against the pattern.
//!
//! GB/s (bytes) is how NVLink is usually quoted; the table keeps Gbps like every other experiment, and the
//! ipc summary gives both. BusBW is against the pair's NVLink peak per direction, when it is known.

use std::time::{Duration, Instant};

use efatop_cuda::ipc::{export_handle, IpcWriter, Mover, PeerMemory, HANDLE_LEN};
use efatop_cuda::DeviceBuffer;
use efatop_proto::column::Column;
use efatop_proto::ipc::{IpcConfig, Mover as Planned};
use efatop_proto::results::{NvlinkPeakOrigin, gbps, LatencyRecorder, Measurement, PairMeasurement};
use efatop_proto::sizes::format_size;

use crate::pattern::PatternSeed;
use crate::world::World;
use crate::{agree_on, cuda_error, ExperimentError, Observer, StepOptions};

const WRITER: usize = 0;
const TARGET: usize = 1;
/// Rank 1 fills its target with this key's pattern before each step, so bytes left from an earlier step
/// cannot pass for this one's.
const POISON: u64 = 0x706f_6973_6f6e;

/// The CUDA side's name for a column's mover.
fn mover(config: IpcConfig) -> Mover {
    match config.0 {
        Planned::Kernel { grid, block } => Mover::Kernel { grid, block },
        Planned::Tuned => Mover::Tuned,
        Planned::CopyEngine => Mover::CopyEngine,
    }
}

/// The NVLink peak per direction between two GPUs (GB/s) and where that figure came from.
#[derive(Clone, Debug, PartialEq)]
pub struct PairPeak {
    pub gbytes_per_s: f64,
    pub origin: NvlinkPeakOrigin,
}

/// Rank 0: a line about the writer GPU's NVLink traffic as the driver counts it (NVML), asked about every
/// few seconds while bytes move; `None` when there is nothing to say.
pub type LinkCounters = Box<dyn FnMut() -> Option<String>>;

/// What the `ipc` run needs beyond the sweep.
pub struct IpcOptions {
    pub configs: Vec<IpcConfig>,
    /// Rank 0: the pair's NVLink peak, for BusBW and the gauges; `None` where nobody can tell (BusBW is
    /// then left out, never guessed).
    pub peak: Option<PairPeak>,
    /// Testing aid: let both ranks use one GPU (the bytes then cross HBM, not NVLink).
    pub same_gpu: bool,
    /// The driver's own count of the link's traffic, beside ours, for the log.
    pub link_counters: Option<LinkCounters>,
}

pub fn run(
    world: &World<'_>,
    sweep: &StepOptions,
    options: &mut IpcOptions,
    observer: &mut dyn Observer,
) -> Result<Vec<Measurement>, ExperimentError> {
    if world.size != 2 {
        return Err(ExperimentError::InvalidInput {
            flag: "--ranks",
            message: format!("ipc runs 2 ranks (rank 0's GPU writes into rank 1's), not {}", world.size),
        });
    }
    if world.hosts[WRITER] != world.hosts[TARGET] {
        return Err(ExperimentError::Unsupported(format!(
            "ipc: CUDA IPC maps memory between processes of one host, but rank 0 is on {} and rank 1 on {}",
            world.hosts[WRITER], world.hosts[TARGET]
        )));
    }
    let Some(gpu) = world.gpu.as_ref() else {
        return Err(ExperimentError::Unsupported("ipc: no GPU is open on this rank".into()));
    };
    // Each rank's GPU: its ordinal on the host and its PCI bus id.
    let mine: (u32, String) = (u32::try_from(gpu.ordinal()).unwrap_or(0), gpu.pci_bus_id().to_string());
    let gpus = crate::gather(world.bootstrap, &mine, "ipc GPUs")?;
    if gpus[WRITER].1 == gpus[TARGET].1 && !options.same_gpu {
        let count = efatop_cuda::device_count().unwrap_or(1);
        return Err(ExperimentError::Unsupported(format!(
            "ipc needs two GPUs, one per rank, but both ranks got GPU {} ({}): this host has {count} GPU{}",
            gpu.ordinal(),
            gpu.pci_bus_id(),
            if count == 1 { "" } else { "s (pick them with --gpu auto, the default)" }
        )));
    }
    let largest = sweep.sizes.iter().copied().max().unwrap_or(16) as usize;

    // Rank 1's target is shareable memory; rank 0 gets its handle and maps it.
    let (buffer, writer) = agree_on(world, setup(world, gpu, largest), observer)?;
    let handles = world.allgather(&export(world, &buffer, observer)?)?;
    let peer = agree_on(
        world,
        match (world.rank, handles[TARGET].as_slice().try_into()) {
            (WRITER, Ok(handle)) => PeerMemory::open(gpu, handle, largest).map(Some).map_err(cuda_error),
            (WRITER, Err(_)) => Err(ExperimentError::Bootstrap("ipc: rank 1's IPC handle did not arrive whole".into())),
            _ => Ok(None),
        },
        observer,
    )?;

    let columns: Vec<Column> = options.configs.iter().map(|c| Column::Ipc(*c)).collect();
    let (from, to) = (&gpus[WRITER].1, &gpus[TARGET].1);
    observer.begin(&columns, "device");
    observer.note(&format!("CUDA IPC: rank 0's GPU {from} writes into rank 1's GPU {to}"));
    match &options.peak {
        Some(peak) => observer.note(&format!(
            "NVLink peak {from} -> {to}: {:.0} GB/s per direction ({}); BusBW is against it",
            peak.gbytes_per_s, peak.origin
        )),
        None if world.rank == WRITER => {
            observer.note(&format!("NVLink peak {from} -> {to} unknown (no NVML, no NVLink seen): BusBW left out"));
        }
        None => {}
    }
    if let (Some(writer), true) = (&writer, options.configs.contains(&IpcConfig::TUNED)) {
        observer.note(&writer.tuned_description());
    }
    let peak_gbytes_per_s = options.peak.as_ref().map(|p| p.gbytes_per_s);
    if world.rank == WRITER {
        // The dashboard's NVLink gauge for this pair, against its peak when known.
        world.probe.set_nvlink_pair(TARGET, gpus[WRITER].0, gpus[TARGET].0, peak_gbytes_per_s);
    }
    let mut counters = LinkNotes { read: options.link_counters.take(), last: Instant::now() };

    let mut measurements = Vec::new();
    // Size by size, every configuration of a size back to back: the kernel and the copy engine compared at a
    // size were measured moments apart, not a whole sweep apart (clocks, other tenants).
    for &size in &sweep.sizes {
        for (config_index, (config, column)) in options.configs.iter().zip(&columns).enumerate() {
            observer.step(column, size);
            let seed = PatternSeed { sender: WRITER, size, iteration: config_index as u64 };
            let bytes = 0..size as usize;
            // Both sides set up before anything moves.
            let prepared = if world.rank == WRITER {
                gpu.fill(&buffer, bytes.clone(), seed.key(), sweep.corrupt_byte.map(|b| b % size))
            } else {
                gpu.fill(&buffer, bytes.clone(), seed.key() ^ POISON, None)
            };
            agree_on(world, prepared.map_err(cuda_error), observer)?;
            let moved = match (&writer, &peer) {
                (Some(writer), Some(peer)) => {
                    move_bytes(world, writer, mover(*config), &buffer, peer, size, sweep, &mut counters, observer)
                        .map(|timing| Some((timing, size)))
                }
                _ => Ok(None),
            };
            let moved = agree_on(world, moved, observer)?;
            let verified = if world.rank == TARGET {
                gpu.verify(&buffer, bytes, seed.key()).map_err(cuda_error).and_then(|mismatch| match mismatch {
                    None => Ok(()),
                    Some((offset, found)) => Err(ExperimentError::Verification {
                        receiver: TARGET,
                        sender: WRITER,
                        config: column.to_string(),
                        size: format_size(size),
                        detail: format!("offset {offset}: found {found:#04x}, not the pattern's byte"),
                    }),
                })
            } else {
                Ok(())
            };
            agree_on(world, verified, observer)?;
            if let Some(((each, total_ns), size)) = moved {
                let measurement = summarise(column, size, &each, total_ns, peak_gbytes_per_s);
                observer.measured(&measurement);
                measurements.push(measurement);
            }
        }
    }
    Ok(measurements)
}

/// Rank 0: its source buffer and a writer; rank 1: its shareable target.
fn setup(world: &World<'_>, gpu: &efatop_cuda::Gpu, largest: usize) -> Result<(DeviceBuffer, Option<IpcWriter>), ExperimentError> {
    if world.rank == WRITER {
        let buffer = gpu.alloc(largest).map_err(cuda_error)?;
        Ok((buffer, Some(IpcWriter::new(gpu).map_err(cuda_error)?)))
    } else {
        Ok((gpu.alloc_shareable(largest).map_err(cuda_error)?, None))
    }
}

/// Rank 1's handle (rank 0 shares nothing); a rank that cannot export fails the run everywhere.
fn export(world: &World<'_>, buffer: &DeviceBuffer, observer: &dyn Observer) -> Result<Vec<u8>, ExperimentError> {
    let handle = if world.rank == TARGET { export_handle(buffer).map(|h| h.to_vec()).map_err(cuda_error) } else { Ok(Vec::new()) };
    let handle = agree_on(world, handle, observer)?;
    debug_assert!(world.rank != TARGET || handle.len() == HANDLE_LEN);
    Ok(handle)
}

const NVML_EVERY: Duration = Duration::from_secs(5);

/// Rank 0's NVML lines, one every [`NVML_EVERY`] while bytes move (the live gauge shows ours every interval;
/// the driver's count is a cross-check, not worth a log line a second).
struct LinkNotes {
    read: Option<LinkCounters>,
    last: Instant,
}

impl LinkNotes {
    fn tick(&mut self, observer: &mut dyn Observer) {
        if self.last.elapsed() < NVML_EVERY {
            return;
        }
        self.last = Instant::now();
        if let Some(line) = self.read.as_mut().and_then(|read| read()) {
            observer.note(&line);
        }
    }
}

/// Rank 0: the warmup, then the timed passes, telling the probe of each pass as it lands (the CPU only
/// watches events; it is not in the data path). Returns each timed pass's and all passes' GPU time (ns).
#[allow(clippy::too_many_arguments)] // one step's whole context; a struct would only rename it
fn move_bytes(
    world: &World<'_>,
    writer: &IpcWriter,
    mover: Mover,
    source: &DeviceBuffer,
    peer: &PeerMemory,
    size: u64,
    sweep: &StepOptions,
    counters: &mut LinkNotes,
    observer: &mut dyn Observer,
) -> Result<(Vec<u64>, u64), ExperimentError> {
    let len = size as usize;
    if sweep.warmup > 0 {
        writer.start(mover, source, peer, len, sweep.warmup as usize).and_then(efatop_cuda::ipc::Passes::finish).map_err(cuda_error)?;
    }
    let mut passes = writer.start(mover, source, peer, len, sweep.iters as usize).map_err(cuda_error)?;
    while passes.finished() < passes.total() {
        let landed = passes.poll().map_err(cuda_error)?;
        if landed > 0 {
            world.probe.nvlink_moved(TARGET, size * landed as u64);
        } else if world.abort.is_raised() {
            return Err(efatop_fabric::FabricError::Abandoned(world.abort.reason()).into());
        } else {
            counters.tick(observer);
            std::thread::yield_now();
        }
    }
    passes.finish().map_err(cuda_error)
}

/// Rank 0's measurement of a step: `each_ns` the timed passes' GPU times, `total_ns` all of them together
/// (Gbps is the timed bytes over it), BusBW against the pair's NVLink peak per direction when known.
fn summarise(column: &Column, size: u64, each_ns: &[u64], total_ns: u64, peak_gbytes_per_s: Option<f64>) -> Measurement {
    let mut latency = LatencyRecorder::new();
    for ns in each_ns {
        latency.record(std::time::Duration::from_nanos(*ns));
    }
    let rate = gbps((size * each_ns.len() as u64) as f64, total_ns.max(1) as f64 / 1e9);
    let pair = PairMeasurement { peers: vec![TARGET], gbps: rate, mean_us: latency.summary().mean_us };
    let peak_gbps = peak_gbytes_per_s.map(|peak| peak * 8.0);
    Measurement::verified(column.clone(), size, each_ns.len() as u64, vec![pair], &latency, peak_gbps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_is_timed_bytes_over_gpu_time_and_busbw_needs_a_peak() {
        // 4 passes of 1 GB in 10 ms: 3200 Gbps, which is 400 GB/s; against a 450 GB/s peak, 88.9 %.
        let m = summarise(&Column::Ipc(IpcConfig::kernel(128, 256)), 1 << 30, &[2_500_000; 4], 10_000_000, Some(450.0));
        let expected = (4u64 << 30) as f64 * 8.0 / 0.01 / 1e9;
        assert!((m.gbps - expected).abs() < 1e-6, "{}", m.gbps);
        assert!((m.busbw_percent.expect("peak") - 100.0 * expected / 3600.0).abs() < 1e-6);
        assert!((m.latency.mean_us - 2500.0).abs() < 50.0, "{:?}", m.latency);
        assert_eq!(summarise(&Column::Ipc(IpcConfig::COPY_ENGINE), 1 << 20, &[1000], 1000, None).busbw_percent, None);
    }
}
