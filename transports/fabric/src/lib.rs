//! A safe layer over libfabric for efatop.
//!
//! The objects libfabric hands out form a tree (fabric → domain → {CQ, AV, MR, endpoint}); here each is an
//! RAII type whose `Drop` calls `fi_close`, and each child holds its parent alive through an `Rc`, so the
//! close order is right whatever order the caller drops things in. Everything is single-threaded on
//! purpose: one rank's hot path owns its channels, so nothing here takes a lock.
//!
//! `unsafe` lives in three places only: [`object`] (the libfabric objects), [`memory`] (page-aligned,
//! locked host buffers) and [`channel`] (posting operations and reading completion queues).

mod error;
pub mod info;
pub mod memory;
pub mod object;
pub mod channel;
pub mod shm_regions;

pub use channel::{Channel, ChannelCounters, ChannelOptions, Completion, Immediate, Op, PeerAddress, RemoteRegion, block_on};
pub use error::{FabricError, Result};
pub use info::{Capabilities, Nic, Provider, discover_nics, mr_mode_names};
pub use memory::{HostBuffer, MemoryKind, RegistrableMemory};
pub use object::MemoryRegion;

/// The libfabric library this binary runs against, as `major.minor`.
pub fn runtime_version() -> String {
    // SAFETY: fi_version takes no arguments and returns a constant.
    let version = unsafe { efatop_libfabric_sys::fi_version() };
    format!("{}.{}", version >> 16, version & 0xffff)
}
