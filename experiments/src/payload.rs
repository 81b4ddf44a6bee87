//! The buffer an experiment moves: pinned host memory, GPU memory the NIC reads and writes directly
//! (`FI_HMEM_CUDA`), or GPU memory staged through pinned host memory where the provider cannot register
//! it. The experiments run the same code over all three; only how bytes are made, checked and staged
//! differs, and the column names say which ran.

use std::rc::Rc;

use efatop_cuda::{DeviceBuffer, Gpu};
use efatop_fabric::{Channel, FabricError, HostBuffer, MemoryRegion, RegistrableMemory, RegistrationPath};
use efatop_proto::column::Memory;

use crate::pattern::{self, Mismatch, PatternSeed};
use crate::{cuda_error, ExperimentError};

/// What `--memory` asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryChoice {
    Host,
    /// GPU memory, registered with the NIC where the provider can, else staged.
    Device { gpu: usize },
    /// GPU memory always staged through pinned host memory (`--staged`, or `--memory staged`), to compare
    /// with the native path in one run.
    Staged { gpu: usize },
}

/// How device memory reaches the NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DevicePath {
    /// Registered with the provider as CUDA memory: the NIC moves it directly.
    Native,
    /// Copied through a pinned host buffer on both sides, because the provider cannot register it.
    Staged,
}

/// Native when the provider offers `FI_HMEM` and accepted the registration; staged otherwise.
pub fn choose_path(
    offers_hmem: bool,
    registration: Option<&Result<(), FabricError>>,
) -> DevicePath {
    match (offers_hmem, registration) {
        (true, Some(Ok(()))) => DevicePath::Native,
        _ => DevicePath::Staged,
    }
}

/// Which way [`Payload::stage`] copies staged memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// GPU → the registered host buffer, before the NIC sends it.
    Out,
    /// The registered host buffer → GPU, after the NIC received into it.
    In,
}

enum Storage {
    Host(Rc<HostBuffer>),
    Device {
        gpu: Rc<Gpu>,
        buffer: Rc<DeviceBuffer>,
    },
    Staged {
        gpu: Rc<Gpu>,
        device: Rc<DeviceBuffer>,
        staging: Rc<HostBuffer>,
    },
}

/// A buffer of one rank, registered with every channel.
pub struct Payload {
    storage: Storage,
    /// One registration per channel, of the memory the NIC touches.
    pub regions: Vec<MemoryRegion>,
}

impl Payload {
    /// Allocates `len` bytes of the chosen memory and registers it with every channel. For device
    /// memory, every rank must call [`Payload::agree_path`] afterwards.
    pub fn new(
        choice: MemoryChoice,
        len: usize,
        channels: &[Channel],
        gpu: Option<&Rc<Gpu>>,
    ) -> Result<Self, ExperimentError> {
        match (choice, gpu) {
            (MemoryChoice::Host, _) => {
                let host = Rc::new(HostBuffer::new(len)?);
                let regions = register_all(channels, &(host.clone() as Rc<dyn RegistrableMemory>))?;
                Ok(Self {
                    storage: Storage::Host(host),
                    regions,
                })
            }
            (MemoryChoice::Device { .. }, Some(gpu)) => {
                let buffer = Rc::new(gpu.alloc(len).map_err(cuda_error)?);
                let offers = channels.iter().all(|c| c.nic().offers_hmem());
                let attempt = offers.then(|| {
                    register_all(channels, &(buffer.clone() as Rc<dyn RegistrableMemory>))
                });
                let outcome = attempt.as_ref().map(|r| {
                    r.as_ref()
                        .map(|_| ())
                        .map_err(|e| FabricError::Invalid(e.to_string()))
                });
                match (choose_path(offers, outcome.as_ref()), attempt) {
                    (DevicePath::Native, Some(Ok(regions))) => Ok(Self {
                        storage: Storage::Device {
                            gpu: gpu.clone(),
                            buffer,
                        },
                        regions,
                    }),
                    _ => Self::staged(gpu, buffer, len, channels),
                }
            }
            (MemoryChoice::Staged { .. }, Some(gpu)) => {
                let buffer = Rc::new(gpu.alloc(len).map_err(cuda_error)?);
                Self::staged(gpu, buffer, len, channels)
            }
            (MemoryChoice::Device { gpu } | MemoryChoice::Staged { gpu }, None) => Err(
                ExperimentError::Unsupported(format!("--memory device: GPU {gpu} is not open")),
            ),
        }
    }

    fn staged(
        gpu: &Rc<Gpu>,
        device: Rc<DeviceBuffer>,
        len: usize,
        channels: &[Channel],
    ) -> Result<Self, ExperimentError> {
        let staging = Rc::new(HostBuffer::new(len)?);
        let regions = register_all(channels, &(staging.clone() as Rc<dyn RegistrableMemory>))?;
        Ok(Self {
            storage: Storage::Staged {
                gpu: gpu.clone(),
                device,
                staging,
            },
            regions,
        })
    }

    pub fn path(&self) -> Option<DevicePath> {
        match self.storage {
            Storage::Host(_) => None,
            Storage::Device { .. } => Some(DevicePath::Native),
            Storage::Staged { .. } => Some(DevicePath::Staged),
        }
    }

    /// Every rank must move device memory the same way for the columns to mean one thing: if any rank
    /// had to stage, all do.
    pub fn agree_path(
        self,
        world: &crate::World<'_>,
        channels: &[Channel],
    ) -> Result<Self, ExperimentError> {
        let staged = self.path() == Some(DevicePath::Staged);
        let anyone_staged = world.gather(&staged, "staging")?.into_iter().any(|staged| staged);
        match self.storage {
            Storage::Device { gpu, buffer } if anyone_staged => {
                drop(self.regions);
                let len = buffer.len();
                Self::staged(&gpu, buffer, len, channels)
            }
            storage => Ok(Self {
                storage,
                regions: self.regions,
            }),
        }
    }

    /// What its columns say of it (`Pin`, `DMA`, `DMA(staged)`: [`Column`](efatop_proto::column::Column)).
    pub fn memory(&self) -> Memory {
        match self.storage {
            Storage::Host(_) => Memory::Host,
            Storage::Device { .. } => Memory::Device,
            Storage::Staged { .. } => Memory::Staged,
        }
    }

    /// How the NIC got this memory, as the results file records it per configuration: `host`, `dmabuf`
    /// or `va` (device memory registered natively, through a dma-buf or by virtual address), `staged`.
    pub fn registration(&self) -> &'static str {
        match self.storage {
            Storage::Host(_) => "host",
            Storage::Device { .. } => self.native_path().unwrap_or(RegistrationPath::VirtualAddress).label(),
            Storage::Staged { .. } => "staged",
        }
    }

    /// For natively registered device memory, how this rank's regions were registered (the first channel's;
    /// every channel tries the same way).
    pub fn native_path(&self) -> Option<RegistrationPath> {
        match self.storage {
            Storage::Device { .. } => self.regions.first().map(MemoryRegion::path),
            _ => None,
        }
    }

    pub fn memory_label(&self) -> String {
        match self.storage {
            Storage::Host(_) => "host".into(),
            Storage::Device { .. } => format!(
                "device (native: {} registration, no staging)",
                match self.native_path() {
                    Some(RegistrationPath::Dmabuf) => "dma-buf",
                    _ => "virtual-address",
                }
            ),
            Storage::Staged { .. } => "device (staged through pinned host memory)".into(),
        }
    }

    /// Writes the sender's pattern for `seed` into the first `seed.size` bytes (where the data lives:
    /// host memory, or the GPU), flipping byte `corrupt` if given.
    pub fn fill(&self, seed: PatternSeed, corrupt: Option<u64>) -> Result<(), ExperimentError> {
        self.fill_at(0, seed, corrupt)
    }

    /// As [`Payload::fill`], into the `seed.size` bytes from `offset` (a multiple of 8).
    pub fn fill_at(&self, offset: u64, seed: PatternSeed, corrupt: Option<u64>) -> Result<(), ExperimentError> {
        let size = seed.size;
        let corrupt = corrupt.map(|at| at % size);
        let range = offset as usize..(offset + size) as usize;
        match &self.storage {
            Storage::Host(host) => {
                host.write(|bytes| {
                    let bytes = &mut bytes[range];
                    pattern::fill(bytes, seed);
                    if let Some(at) = corrupt {
                        bytes[at as usize] ^= 0xff;
                    }
                });
                Ok(())
            }
            Storage::Device { gpu, buffer }
            | Storage::Staged {
                gpu,
                device: buffer,
                ..
            } => gpu
                .fill(buffer, range, seed.key(), corrupt)
                .map_err(cuda_error),
        }
    }

    /// Staged memory's copy between the GPU and the registered host buffer, for the `len` bytes from
    /// `offset`: [`Stage::Out`] before sending, [`Stage::In`] after receiving. Nothing for host memory
    /// and natively registered device memory, which the NIC reaches where the data lives.
    pub fn stage(&self, way: Stage, offset: u64, len: u64) -> Result<(), ExperimentError> {
        let Storage::Staged { gpu, device, staging } = &self.storage else { return Ok(()) };
        let range = offset as usize..(offset + len) as usize;
        match way {
            Stage::Out => staging.write(|bytes| gpu.to_host(device, range.start, &mut bytes[range.clone()])),
            Stage::In => staging.read(|bytes| gpu.from_host(&bytes[range.clone()], device, range.start)),
        }
        .map_err(cuda_error)
    }

    /// For staged memory, the GPU and the device buffer behind the staging copy (for a caller that stages
    /// asynchronously into a buffer of its own).
    pub fn staged_device(&self) -> Option<(&Rc<Gpu>, &DeviceBuffer)> {
        match &self.storage {
            Storage::Staged { gpu, device, .. } => Some((gpu, device)),
            _ => None,
        }
    }

    /// Checks the first `seed.size` bytes where the data lives (device buffers are checked on the GPU).
    pub fn verify(&self, seed: PatternSeed) -> Result<Result<(), Mismatch>, ExperimentError> {
        self.verify_at(0, seed)
    }

    /// As [`Payload::verify`], for the `seed.size` bytes from `offset`; a mismatch's offset counts from there.
    pub fn verify_at(&self, offset: u64, seed: PatternSeed) -> Result<Result<(), Mismatch>, ExperimentError> {
        let size = seed.size as usize;
        let range = offset as usize..offset as usize + size;
        match &self.storage {
            Storage::Host(host) => Ok(host.read(|bytes| pattern::verify(&bytes[range], seed))),
            Storage::Device { gpu, buffer }
            | Storage::Staged {
                gpu,
                device: buffer,
                ..
            } => match gpu.verify(buffer, range, seed.key()).map_err(cuda_error)? {
                None => Ok(Ok(())),
                Some((offset, found)) => {
                    let mut expected = vec![0u8; (offset as usize + 1).min(size)];
                    pattern::fill(&mut expected, seed);
                    Ok(Err(Mismatch {
                        offset: offset as usize,
                        expected: expected[offset as usize],
                        found,
                    }))
                }
            },
        }
    }
}

/// One payload per memory kind asked for (`--memory host,device` gives both, columns side by side), each
/// allocated, registered with `channels` and, for device memory, agreed on by every rank.
pub(crate) fn prepare(
    world: &crate::World<'_>,
    memories: &[MemoryChoice],
    len: usize,
    channels: &[Channel],
    observer: &dyn crate::Observer,
) -> Result<Vec<Payload>, ExperimentError> {
    let mut payloads = Vec::with_capacity(memories.len());
    for &memory in memories {
        // Mapping, faulting in, locking and registering a large buffer takes seconds on a loaded node:
        // rank 0 hears that this rank is busy, not hung.
        world.probe.set_phase(efatop_proto::telemetry::Phase::Allocating, len as u64);
        let payload = crate::agree_on(
            world,
            Payload::new(memory, len, channels, world.gpu.as_ref()),
            observer,
        )?;
        payloads.push(if matches!(memory, MemoryChoice::Device { .. }) {
            payload.agree_path(world, channels)?
        } else {
            payload
        });
    }
    Ok(payloads)
}

/// Every rank learns every rank's registration of `payload`: `remotes[rank][channel]`, in one bootstrap
/// round (one record per channel from each rank).
pub(crate) fn exchange_regions(
    world: &crate::World<'_>,
    payload: &Payload,
) -> Result<Vec<Vec<efatop_fabric::RemoteRegion>>, ExperimentError> {
    let mine: Vec<Vec<u8>> = payload.regions.iter().map(|region| Channel::remote_region(region).to_bytes().to_vec()).collect();
    crate::gather(world.bootstrap, &mine, "registered regions")?
        .iter()
        .map(|records| {
            records.iter().map(|record| efatop_fabric::RemoteRegion::from_bytes(record).map_err(ExperimentError::from)).collect()
        })
        .collect()
}

/// What the run moved, e.g. `host + device`.
pub(crate) fn memory_labels(payloads: &[Payload]) -> String {
    payloads
        .iter()
        .map(Payload::memory_label)
        .collect::<Vec<_>>()
        .join(" + ")
}

pub(crate) fn register_all(
    channels: &[Channel],
    memory: &Rc<dyn RegistrableMemory>,
) -> Result<Vec<MemoryRegion>, FabricError> {
    channels
        .iter()
        .map(|c| c.register(memory.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_memory_goes_native_only_when_offered_and_accepted() {
        assert_eq!(choose_path(true, Some(&Ok(()))), DevicePath::Native);
        // Debian/Ubuntu libfabric 1.17 on shm: FI_HMEM offered, registration refused with ENOSYS.
        let refused = Err(FabricError::Invalid(
            "fi_mr_regattr(FI_HMEM_CUDA) failed: Function not implemented".into(),
        ));
        assert_eq!(choose_path(true, Some(&refused)), DevicePath::Staged);
        // tcp: no FI_HMEM at all, nothing tried.
        assert_eq!(choose_path(false, None), DevicePath::Staged);
    }

    /// The GPU writes the host's pattern byte for byte (skips without a GPU).
    #[test]
    fn gpu_and_host_patterns_agree() {
        let gpu = match Gpu::open(0) {
            Ok(gpu) => gpu,
            Err(efatop_cuda::CudaError::NoDevice(why)) => {
                // Straight to stderr, not through `eprintln!`, which the test harness captures: the skip shows
                // in a plain `cargo test` run.
                let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("SKIPPED: no CUDA device ({why})\n").as_bytes());
                return;
            }
            Err(err) => panic!("{err}"),
        };
        let seed = PatternSeed {
            sender: 3,
            size: 4100,
            iteration: 1,
        };
        let buffer = gpu.alloc(4100).expect("alloc");
        gpu.fill(&buffer, 0..4100, seed.key(), None).expect("fill");
        let mut host = vec![0u8; 4100];
        gpu.to_host(&buffer, 0, &mut host).expect("copy");
        assert_eq!(pattern::verify(&host, seed), Ok(()));
    }
}
