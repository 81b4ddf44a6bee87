//! Raw libfabric bindings. Nothing here is safe to call directly: `efatop-fabric` wraps it.
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case, dead_code)]
#![allow(clippy::all, clippy::pedantic)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// `FI_VERSION(major, minor)` is a macro in `fabric.h`; bindgen cannot see it.
pub const fn make_fi_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// The oldest libfabric API efatop supports (Debian bookworm ships 1.17).
pub const EFATOP_MIN_FI_VERSION: u32 = make_fi_version(1, 14);

/// `FI_ADDR_UNSPEC` is `((uint64_t) -1)` in `fabric.h`.
pub const FI_ADDR_UNSPEC: u64 = u64::MAX;

/// `FI_KEY_NOTAVAIL` is `((uint64_t) -1)` in `fi_domain.h`.
pub const FI_KEY_NOTAVAIL: u64 = u64::MAX;
