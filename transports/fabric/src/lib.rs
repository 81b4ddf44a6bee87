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
pub mod ending;
pub mod shm_regions;
pub mod signals;

pub use channel::{Channel, ChannelCounters, ChannelOptions, Completion, Immediate, Op, PeerAddress, RemoteRegion, block_on};
pub use object::EndpointReport;
pub use error::{FabricError, Result};
pub use info::{Capabilities, EntryFacts, Nic, Provider, discover_nics, efa_may_use_shm, mr_mode_names, select_entries};
pub use memory::{DmabufHandle, HostBuffer, MemoryKind, RegistrableMemory, RegistrationPath};
pub use object::MemoryRegion;

/// The libfabric library this binary runs against, as `major.minor`.
pub fn runtime_version() -> String {
    version_string(runtime_api())
}

/// The libfabric headers this binary was built against, as `major.minor`.
pub fn header_version() -> String {
    version_string(header_api())
}

/// The API version efatop asks `fi_getinfo` for: the highest that both the headers it was built with and the
/// library it runs against offer (a library refuses a version newer than itself; headers older than the
/// library hide what the newer API adds, e.g. `FI_MR_DMABUF` needs 1.20).
pub fn api_version() -> u32 {
    header_api().min(runtime_api())
}

/// [`api_version`] as `major.minor`.
pub fn api_version_string() -> String {
    version_string(api_version())
}

/// A warning when the library loaded at run time is older than the headers efatop was built against (the
/// binary then runs at the library's API level: features of the newer headers stay off).
pub fn version_warning() -> Option<String> {
    (runtime_api() < header_api()).then(|| {
        format!(
            "libfabric {} loaded at run time is older than the {} headers efatop was built against; running at API {}",
            runtime_version(),
            header_version(),
            version_string(api_version())
        )
    })
}

/// Whether the API efatop runs at is at least `major.minor`.
pub fn api_at_least(major: u32, minor: u32) -> bool {
    api_version() >= efatop_libfabric_sys::make_fi_version(major, minor)
}

fn runtime_api() -> u32 {
    // SAFETY: fi_version takes no arguments and returns a constant.
    unsafe { efatop_libfabric_sys::fi_version() }
}

fn header_api() -> u32 {
    // SAFETY: returns a constant compiled into the shim.
    unsafe { efatop_libfabric_sys::efatop_header_version() }
}

fn version_string(version: u32) -> String {
    format!("{}.{}", version >> 16, version & 0xffff)
}
