//! How a process whose run failed leaves its fabric objects: abandoned, never closed.
//!
//! A run that ends well has received everything its peers sent before it closes anything, and closes in
//! order (endpoint, then CQ and AV, memory regions, domain, fabric). A run that failed cannot know that: a
//! peer that died, was cut off or was stopped may have an operation half-way into one of this rank's
//! endpoints, and closing the endpoint then is what crashed ranks in libfabric 1.17's `tcp;ofi_rxm`
//! (`rxm_ep_close` → `rxm_freeall_conns` → `rxm_close_conn` → `rxm_flush_msg_cq` → `rxm_handle_comp_error`
//! dereferences the NULL `op_context` of the `FI_ECANCELED` entry tcpx reports for a half-received write
//! with remote CQ data; see docs/endings.md). The crash is inside `fi_close` itself: nothing this rank can
//! cancel or drain beforehand reaches the provider's own half-received entry.
//!
//! So, once [`abandon`] has been called (the run failed, or its abort was raised), nothing is closed any
//! more: every object's `Drop` leaves the provider's object open and keeps what it points at (operation
//! contexts, registered memory) allocated; operations in flight are abandoned instead of waited for; and the
//! process ends through [`exit`], which skips libfabric's destructors (`fi_fini` would tear providers down
//! under a thread still inside them) and removes this process's shm regions, which the unclosed shm
//! endpoints would otherwise leave in `/dev/shm`. The kernel closes the sockets, so the peers see the
//! connections end.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static ABANDONED: AtomicBool = AtomicBool::new(false);

/// From now on no libfabric object of this process is closed, and operations in flight are not waited for.
pub fn abandon() {
    ABANDONED.store(true, Ordering::Release);
}

/// Whether [`abandon`] was called.
#[inline]
pub fn abandoned() -> bool {
    ABANDONED.load(Ordering::Acquire)
}

/// Ends the process with `code` at once: flushes stdout and stderr, removes this process's shm regions when
/// its objects were abandoned, and exits without running libfabric's (or any library's) exit handlers,
/// whatever other threads are doing.
pub fn exit(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    if abandoned() {
        crate::shm_regions::remove_regions_of_this_process();
    }
    // SAFETY: `_exit` ends the process without touching any state of this one; every buffer that matters
    // was flushed above, and files the run wrote were renamed into place before this point.
    unsafe { libc::_exit(code) }
}
