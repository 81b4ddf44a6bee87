//! Memory the NIC reads and writes: page-aligned, pre-faulted, locked host buffers.
//!
//! Registered memory is shared between the CPU and the NIC, which writes into it behind the compiler's
//! back. Access therefore goes through short closures ([`HostBuffer::read`], [`HostBuffer::write`]) with a
//! borrow flag, and callers only look at bytes after the completion that says the NIC is done with them.

use std::cell::Cell;
use std::ffi::c_void;
use std::ptr::NonNull;

use crate::error::{FabricError, Result};

/// Where a registrable buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// Pinned (page-locked) host memory.
    Host,
    /// Memory of CUDA device `device` (registered with `FI_HMEM_CUDA`).
    Cuda { device: i32 },
}

/// A dma-buf that exports a buffer's pages (for `FI_MR_DMABUF`): the file descriptor, and where the buffer
/// starts inside it. The memory that handed it out closes the descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmabufHandle {
    pub fd: i32,
    pub offset: u64,
}

/// How a buffer was registered with the NIC, in the order production code tries them for device memory
/// (aws-ofi-nccl: dma-buf, then the virtual address, which needs nvidia-peermem on EFA).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RegistrationPath {
    /// Host memory, by virtual address.
    Host,
    /// Device memory through a dma-buf file descriptor (`FI_MR_DMABUF`).
    Dmabuf,
    /// Device memory by virtual address (`FI_HMEM_CUDA`; on EFA this needs nvidia-peermem).
    VirtualAddress,
}

impl RegistrationPath {
    /// The short name used in column labels and results files.
    pub fn label(self) -> &'static str {
        match self {
            RegistrationPath::Host => "host",
            RegistrationPath::Dmabuf => "dmabuf",
            RegistrationPath::VirtualAddress => "va",
        }
    }
}

/// Memory that can be registered with a libfabric domain.
pub trait RegistrableMemory {
    fn address(&self) -> *mut c_void;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn kind(&self) -> MemoryKind;
    /// A dma-buf exporting this memory, when its allocator can give one (CUDA device memory on drivers
    /// with dma-buf support). Host memory has none.
    fn dmabuf(&self) -> Option<DmabufHandle> {
        None
    }
}

const PAGE: usize = 4096;
const HUGE_PAGE: usize = 2 << 20;

/// Anonymous page-aligned host memory, pre-faulted and (when the limit allows) locked in RAM so that the
/// NIC's registration pins real pages. Unmapped on drop.
pub struct HostBuffer {
    ptr: NonNull<u8>,
    len: usize,
    locked: bool,
    /// >0: that many readers; -1: one writer. Guards the closure accessors against re-entrance.
    borrow: Cell<isize>,
}

impl HostBuffer {
    /// Maps `len` bytes (rounded up to whole pages by the kernel), asks for transparent huge pages when the
    /// buffer spans at least one (fewer pages for the NIC or the kernel to pin and translate), faults every
    /// page in and tries to lock them.
    pub fn new(len: usize) -> Result<Self> {
        if len == 0 {
            return Err(FabricError::Invalid("a buffer must hold at least one byte".into()));
        }
        let huge = len >= HUGE_PAGE;
        // Over-map by one huge page so the buffer can start on a huge-page boundary.
        let mapped = if huge { len + HUGE_PAGE } else { len };
        // SAFETY: an anonymous private mapping with no address hint; checked for MAP_FAILED below.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(FabricError::Invalid(format!(
                "mmap of {len} bytes failed: {}",
                std::io::Error::last_os_error()
            )));
        }
        let start = if huge { (raw as usize).next_multiple_of(HUGE_PAGE) } else { raw as usize };
        if huge {
            let head = start - raw as usize;
            let tail = mapped - head - len;
            // SAFETY: trimming the unaligned head and the rest of the tail of our own mapping; both ranges
            // are page multiples inside it. A failed trim only leaves some address space mapped.
            unsafe {
                if head > 0 {
                    libc::munmap(raw, head);
                }
                if tail > 0 {
                    libc::munmap((start + len.next_multiple_of(PAGE)) as *mut libc::c_void, tail - (len.next_multiple_of(PAGE) - len));
                }
                // Advice only: without THP the buffer still works in small pages.
                libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
            }
        }
        let locked = lock_in_chunks(start, len);
        if !locked {
            // mlock would have faulted the pages in; do it by touching one byte per page instead.
            for page in (0..len).step_by(PAGE) {
                // SAFETY: inside the mapping.
                unsafe { std::ptr::write_volatile((start + page) as *mut u8, 0) };
            }
        }
        let ptr = NonNull::new(start as *mut u8).ok_or_else(|| FabricError::Invalid("mmap returned NULL".into()))?;
        Ok(Self { ptr, len, locked, borrow: Cell::new(0) })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `mlock` succeeded (it fails when `RLIMIT_MEMLOCK` is lower than the buffer).
    pub fn is_locked(&self) -> bool {
        self.locked
    }

    /// Reads the bytes. Call only when no operation that writes into this buffer is in flight.
    pub fn read<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        assert!(self.borrow.get() >= 0, "HostBuffer read while it is being written");
        self.borrow.set(self.borrow.get() + 1);
        // SAFETY: the mapping is valid for `len` bytes; the borrow flag rules out a live &mut from `write`.
        let result = f(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) });
        self.borrow.set(self.borrow.get() - 1);
        result
    }

    /// Writes the bytes. Call only when no operation that reads or writes this buffer is in flight.
    pub fn write<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        assert_eq!(self.borrow.get(), 0, "HostBuffer written while borrowed");
        self.borrow.set(-1);
        // SAFETY: the mapping is valid for `len` bytes and the borrow flag makes this the only reference.
        let result = f(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) });
        self.borrow.set(0);
        result
    }
}

impl RegistrableMemory for HostBuffer {
    fn address(&self) -> *mut c_void {
        self.ptr.as_ptr().cast()
    }

    fn len(&self) -> usize {
        self.len
    }

    fn kind(&self) -> MemoryKind {
        MemoryKind::Host
    }
}

/// The most a single mlock or munmap covers. Locking faults every page in while holding the process's
/// memory map lock; over 1 GiB on a loaded node that takes seconds, and every other thread of the process
/// that maps, unmaps or grows its heap (an allocation) waits all that time. In chunks, the lock is let go
/// between them: another thread waits for one chunk at most.
const LOCK_CHUNK: usize = 32 << 20;

/// Locks `[start, start + len)` chunk by chunk; on a refusal, unlocks what was locked and returns false.
fn lock_in_chunks(start: usize, len: usize) -> bool {
    let mut done = 0;
    while done < len {
        let chunk = LOCK_CHUNK.min(len - done);
        // SAFETY: the range is inside the mapping `new` made and keeps.
        if unsafe { libc::mlock((start + done) as *const libc::c_void, chunk) } != 0 {
            if done > 0 {
                // SAFETY: as above; unlocking what this call locked.
                unsafe { libc::munlock(start as *const libc::c_void, done) };
            }
            return false;
        }
        done += chunk;
    }
    true
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // In chunks, for the reason given at LOCK_CHUNK: munmap of a locked gigabyte holds the memory map
        // lock while it frees every page. munmap also drops the lock.
        let mut done = 0;
        while done < self.len {
            let chunk = LOCK_CHUNK.min(self.len - done);
            // SAFETY: unmapping what `new` kept of its mapping, a page-aligned chunk at a time (the last
            // chunk may end mid-page; munmap rounds it up to the page the mapping ends with).
            unsafe { libc::munmap(self.ptr.as_ptr().add(done).cast(), chunk) };
            done += chunk;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_is_page_aligned_and_writable() {
        let buffer = HostBuffer::new(10_000).expect("mmap");
        assert_eq!(buffer.address() as usize % 4096, 0);
        buffer.write(|bytes| bytes.fill(0xab));
        assert!(buffer.read(|bytes| bytes.iter().all(|b| *b == 0xab)));
    }

    #[test]
    fn large_buffers_start_on_a_huge_page() {
        let buffer = HostBuffer::new(3 << 20).expect("mmap");
        assert_eq!(buffer.address() as usize % HUGE_PAGE, 0);
        buffer.write(|bytes| bytes.fill(1));
        assert_eq!(buffer.read(|bytes| bytes.iter().map(|b| usize::from(*b)).sum::<usize>()), 3 << 20);
    }

    #[test]
    fn zero_length_is_refused() {
        assert!(HostBuffer::new(0).is_err());
    }
}
