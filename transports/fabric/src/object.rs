//! The libfabric objects themselves, each an RAII owner of one `fid`.
//!
//! Parents are kept alive by the children (`Rc`), so `fi_close` always runs child-first: endpoint, then
//! its CQ and AV, memory regions, the domain, and last the fabric. Once the run has failed
//! ([`crate::ending::abandon`]) nothing is closed: each `Drop` leaves its object open and keeps its parents
//! (and a region's memory) alive for as long as the process lasts.

use std::cell::Cell;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::rc::Rc;

use efatop_libfabric_sys as sys;

use crate::error::{FabricError, Result, check};
use crate::info::Nic;
use crate::memory::{MemoryKind, RegistrableMemory, RegistrationPath};

/// What opening a channel found out about its endpoint (read back, not assumed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndpointReport {
    /// The efa fabric may send to same-host peers through shm (`None`: not an efa endpoint).
    pub shm_permitted: Option<bool>,
    /// RDMA WRITE is emulated over sends (`FI_OPT_EFA_EMULATED_WRITE`; `None`: the provider does not say).
    pub emulated_write: Option<bool>,
    /// libfabric may call the CUDA API for this endpoint (`None`: not set or not known).
    pub cuda_api_permitted: Option<bool>,
}

/// Closes any libfabric object through its embedded `fid`.
///
/// # Safety
/// `fid` must be the `fid` member of a live object that nothing else will close.
unsafe fn close(fid: *mut sys::fid) {
    if crate::ending::abandoned() {
        return;
    }
    // SAFETY: guaranteed by the caller. A failing close during drop leaves nothing to recover.
    let _ = unsafe { sys::fi_close(fid) };
}

pub(crate) struct FabricObject(NonNull<sys::fid_fabric>);

impl Drop for FabricObject {
    fn drop(&mut self) {
        // SAFETY: we own the fabric; all children hold an Rc to us and are gone by now.
        unsafe { close(&raw mut (*self.0.as_ptr()).fid) }
    }
}

pub(crate) struct DomainObject {
    raw: NonNull<sys::fid_domain>,
    /// Next key to request when the provider lets us choose keys (no `FI_MR_PROV_KEY`); unique per domain.
    next_key: Cell<u64>,
    _fabric: Rc<FabricObject>,
}

impl Drop for DomainObject {
    fn drop(&mut self) {
        // SAFETY: we own the domain; its children hold an Rc to us.
        unsafe { close(&raw mut (*self.raw.as_ptr()).fid) }
    }
}

pub(crate) struct CqObject {
    raw: NonNull<sys::fid_cq>,
    _domain: Rc<DomainObject>,
}

impl Drop for CqObject {
    fn drop(&mut self) {
        // SAFETY: we own the CQ; the endpoint bound to it holds an Rc to us.
        unsafe { close(&raw mut (*self.raw.as_ptr()).fid) }
    }
}

pub(crate) struct AvObject {
    raw: NonNull<sys::fid_av>,
    _domain: Rc<DomainObject>,
}

impl Drop for AvObject {
    fn drop(&mut self) {
        // SAFETY: we own the AV; the endpoint bound to it holds an Rc to us.
        unsafe { close(&raw mut (*self.raw.as_ptr()).fid) }
    }
}

pub(crate) struct EndpointObject {
    raw: NonNull<sys::fid_ep>,
    cq: Rc<CqObject>,
    av: Rc<AvObject>,
    domain: Rc<DomainObject>,
}

impl Drop for EndpointObject {
    fn drop(&mut self) {
        if crate::ending::abandoned() {
            // The endpoint stays open: its CQ, AV and domain must outlive it.
            std::mem::forget((self.cq.clone(), self.av.clone(), self.domain.clone()));
            return;
        }
        // SAFETY: we own the endpoint; closing it cancels whatever is still posted.
        unsafe { close(&raw mut (*self.raw.as_ptr()).fid) }
    }
}

/// A fabric, domain, completion queue, address vector and enabled RDM endpoint opened on one NIC.
pub(crate) struct EndpointStack {
    pub(crate) endpoint: Rc<EndpointObject>,
    pub(crate) cq: Rc<CqObject>,
    pub(crate) av: Rc<AvObject>,
    pub(crate) domain: Rc<DomainObject>,
}

impl EndpointStack {
    /// Opens the stack; efa endpoints get their options set before `fi_enable` (shm shortcut off unless
    /// the answer kept `FI_LOCAL_COMM`, CUDA API calls off for device memory) and report what they do.
    pub(crate) fn open(nic: &Nic, cq_size: usize, device_memory: bool) -> Result<(Self, EndpointReport)> {
        let info = nic.info.as_ptr();
        let mut fabric_raw: *mut sys::fid_fabric = std::ptr::null_mut();
        // SAFETY: info is a valid fi_info from fi_getinfo; out-pointers are ours.
        check("fi_fabric", unsafe { sys::fi_fabric((*info).fabric_attr, &raw mut fabric_raw, std::ptr::null_mut()) })?;
        let fabric = Rc::new(FabricObject(non_null(fabric_raw, "fi_fabric")?));

        let mut domain_raw: *mut sys::fid_domain = std::ptr::null_mut();
        // SAFETY: fabric is open; info describes one of its domains.
        check("fi_domain", unsafe { sys::fi_domain(fabric.0.as_ptr(), info, &raw mut domain_raw, std::ptr::null_mut()) })?;
        let domain = Rc::new(DomainObject { raw: non_null(domain_raw, "fi_domain")?, next_key: Cell::new(1), _fabric: fabric });

        let mut cq_attr = sys::fi_cq_attr {
            size: cq_size,
            format: sys::fi_cq_format_FI_CQ_FORMAT_DATA,
            wait_obj: sys::fi_wait_obj_FI_WAIT_NONE,
            ..Default::default()
        };
        let mut cq_raw: *mut sys::fid_cq = std::ptr::null_mut();
        // SAFETY: domain is open; attr lives across the call.
        check("fi_cq_open", unsafe { sys::fi_cq_open(domain.raw.as_ptr(), &raw mut cq_attr, &raw mut cq_raw, std::ptr::null_mut()) })?;
        let cq = Rc::new(CqObject { raw: non_null(cq_raw, "fi_cq_open")?, _domain: domain.clone() });

        let mut av_attr = sys::fi_av_attr { type_: sys::fi_av_type_FI_AV_TABLE, ..Default::default() };
        let mut av_raw: *mut sys::fid_av = std::ptr::null_mut();
        // SAFETY: as above.
        check("fi_av_open", unsafe { sys::fi_av_open(domain.raw.as_ptr(), &raw mut av_attr, &raw mut av_raw, std::ptr::null_mut()) })?;
        let av = Rc::new(AvObject { raw: non_null(av_raw, "fi_av_open")?, _domain: domain.clone() });

        let mut ep_raw: *mut sys::fid_ep = std::ptr::null_mut();
        // SAFETY: as above.
        check("fi_endpoint", unsafe { sys::fi_endpoint(domain.raw.as_ptr(), info, &raw mut ep_raw, std::ptr::null_mut()) })?;
        let endpoint = Rc::new(EndpointObject {
            raw: non_null(ep_raw, "fi_endpoint")?,
            cq: cq.clone(),
            av: av.clone(),
            domain: domain.clone(),
        });
        let ep = endpoint.raw.as_ptr();
        // SAFETY: binding live objects of the same domain, then enabling the endpoint.
        unsafe {
            check(
                "fi_ep_bind(cq)",
                sys::fi_ep_bind(ep, &raw mut (*cq.raw.as_ptr()).fid, u64::from(sys::FI_TRANSMIT | sys::FI_RECV)),
            )?;
            check("fi_ep_bind(av)", sys::fi_ep_bind(ep, &raw mut (*av.raw.as_ptr()).fid, 0))?;
        }
        let mut report = EndpointReport::default();
        if nic.provider == "efa" {
            let efa_fabric = !nic.fabric.eq_ignore_ascii_case(crate::info::EFA_DIRECT_FABRIC);
            if efa_fabric {
                // Belt and braces with the hints (FI_REMOTE_COMM without FI_LOCAL_COMM): aws-ofi-nccl sets the
                // option too. Headers older than 1.18 lack it; the hints alone then decide.
                let permitted = nic.may_use_shm();
                let set = set_bool(ep, sys::EFATOP_OPT_SHARED_MEMORY_PERMITTED, permitted);
                report.shm_permitted = Some(if set.is_ok() { permitted } else { nic.may_use_shm() });
            }
            if device_memory && set_bool(ep, sys::EFATOP_OPT_CUDA_API_PERMITTED, false).is_ok() {
                report.cuda_api_permitted = Some(false);
            }
        }
        // SAFETY: the endpoint is bound to its CQ and AV.
        check("fi_enable", unsafe { sys::fi_enable(ep) })?;
        if nic.provider == "efa" {
            report.emulated_write = get_bool(ep, sys::EFATOP_OPT_EFA_EMULATED_WRITE).ok();
        }
        Ok((Self { endpoint, cq, av, domain }, report))
    }

    pub(crate) fn endpoint(&self) -> *mut sys::fid_ep {
        self.endpoint.raw.as_ptr()
    }

    pub(crate) fn cq(&self) -> *mut sys::fid_cq {
        self.cq.raw.as_ptr()
    }

    /// The endpoint's address as raw bytes, for the bootstrap to pass to the peers.
    pub(crate) fn name(&self) -> Result<Vec<u8>> {
        let mut name = vec![0u8; 256];
        loop {
            let mut len = name.len();
            // SAFETY: name has `len` writable bytes; libfabric writes the real length back.
            let ret = unsafe { sys::fi_getname(&raw mut (*self.endpoint()).fid, name.as_mut_ptr().cast(), &raw mut len) };
            if ret == -(sys::FI_ETOOSMALL as i32) && len > name.len() {
                name.resize(len, 0);
                continue;
            }
            check("fi_getname", ret)?;
            name.truncate(len);
            return Ok(name);
        }
    }

    /// Inserts the peers' endpoint names into the AV; returns one `fi_addr_t` per name, in order.
    pub(crate) fn insert_addresses(&self, names: &[Vec<u8>]) -> Result<Vec<sys::fi_addr_t>> {
        let mut addresses = Vec::with_capacity(names.len());
        for name in names {
            let mut fi_addr: sys::fi_addr_t = 0;
            // SAFETY: one address of the provider's format; fi_addr receives its handle.
            let ret = unsafe {
                sys::fi_av_insert(self.av.raw.as_ptr(), name.as_ptr().cast(), 1, &raw mut fi_addr, 0, std::ptr::null_mut())
            };
            if ret != 1 {
                return Err(FabricError::call("fi_av_insert", if ret < 0 { i64::from(ret) } else { -i64::from(sys::FI_EINVAL) }));
            }
            addresses.push(fi_addr);
        }
        Ok(addresses)
    }
}

/// `fi_setopt` of one of the shim's bool endpoint options.
fn set_bool(ep: *mut sys::fid_ep, option: u32, value: bool) -> Result<()> {
    // SAFETY: ep is a live endpoint; the shim passes a bool of the right size.
    check("fi_setopt", unsafe { sys::efatop_ep_set_bool(ep, option as i32, value) })
}

/// `fi_getopt` of one of the shim's bool endpoint options.
fn get_bool(ep: *mut sys::fid_ep, option: u32) -> Result<bool> {
    let mut value = false;
    // SAFETY: ep is a live endpoint; value is a bool the shim writes.
    check("fi_getopt", unsafe { sys::efatop_ep_get_bool(ep, option as i32, &raw mut value) })?;
    Ok(value)
}

fn non_null<T>(ptr: *mut T, api: &'static str) -> Result<NonNull<T>> {
    NonNull::new(ptr).ok_or_else(|| FabricError::Invalid(format!("{api} returned success but no object")))
}

/// A registration of memory with one channel's domain. Holds the memory alive: the NIC may touch it for as
/// long as the registration exists.
pub struct MemoryRegion {
    raw: NonNull<sys::fid_mr>,
    desc: *mut c_void,
    key: u64,
    /// What a peer puts in an RMA address for byte 0 of this region: the virtual address under
    /// `FI_MR_VIRT_ADDR`, else 0 (offset addressing).
    remote_base: u64,
    memory: Rc<dyn RegistrableMemory>,
    path: RegistrationPath,
    /// Under `FI_MR_ENDPOINT` the registration is bound to the endpoint, which must outlive it.
    bound_endpoint: Option<Rc<EndpointObject>>,
    domain: Rc<DomainObject>,
}

impl MemoryRegion {
    pub(crate) fn register(stack: &EndpointStack, nic: &Nic, memory: Rc<dyn RegistrableMemory>) -> Result<Self> {
        let access = u64::from(
            sys::FI_SEND | sys::FI_RECV | sys::FI_READ | sys::FI_WRITE | sys::FI_REMOTE_READ | sys::FI_REMOTE_WRITE,
        );
        let requested_key = if nic.mr_requires(sys::FI_MR_PROV_KEY) {
            0
        } else {
            let key = stack.domain.next_key.get();
            stack.domain.next_key.set(key + 1);
            key
        };
        let mut mr_raw: *mut sys::fid_mr = std::ptr::null_mut();
        let (iface, device) = match memory.kind() {
            MemoryKind::Host => (sys::fi_hmem_iface_FI_HMEM_SYSTEM, 0),
            MemoryKind::Cuda { device } => (sys::fi_hmem_iface_FI_HMEM_CUDA, device),
        };
        let mut path = RegistrationPath::Host;
        // Device memory is device-only (cuMemAlloc, never managed memory): FI_HMEM_DEVICE_ONLY lets shm use
        // CUDA IPC (without it shm copies through host memory in segments) and efa accepts it.
        // `EFATOP_MR_DEVICE_ONLY=0` leaves it out, to measure the difference.
        let device_only = iface != sys::fi_hmem_iface_FI_HMEM_SYSTEM
            && std::env::var("EFATOP_MR_DEVICE_ONLY").map_or(true, |v| v != "0");
        if iface != sys::fi_hmem_iface_FI_HMEM_SYSTEM {
            path = RegistrationPath::VirtualAddress;
            // dma-buf first where both the API in use and the memory offer it; a provider that refuses it
            // (no dma-buf support in its HMEM layer) still gets the virtual address below.
            if let Some(handle) = memory.dmabuf().filter(|_| crate::api_at_least(1, 20)) {
                // SAFETY: the dma-buf exports `len` bytes of the memory at `handle.offset`; the memory (and
                // with it the descriptor) outlives the registration (we hold an Rc).
                let ret = unsafe {
                    sys::efatop_mr_reg_dmabuf(
                        stack.domain.raw.as_ptr(),
                        handle.fd,
                        handle.offset,
                        memory.len(),
                        memory.address(),
                        access,
                        requested_key,
                        iface as i32,
                        device,
                        device_only,
                        &raw mut mr_raw,
                    )
                };
                if ret == 0 {
                    path = RegistrationPath::Dmabuf;
                } else {
                    mr_raw = std::ptr::null_mut();
                }
            }
        }
        if path != RegistrationPath::Dmabuf {
            let api = if path == RegistrationPath::Host { "fi_mr_regattr" } else { "fi_mr_regattr(FI_HMEM_CUDA)" };
            // SAFETY: the memory is valid for `len` bytes and outlives the registration (we hold an Rc).
            check(api, unsafe {
                sys::efatop_mr_reg_iov(
                    stack.domain.raw.as_ptr(),
                    memory.address(),
                    memory.len(),
                    access,
                    requested_key,
                    iface as i32,
                    device,
                    device_only,
                    &raw mut mr_raw,
                )
            })?;
        }
        let raw = non_null(mr_raw, "fi_mr_reg")?;
        let mut region = Self {
            raw,
            desc: std::ptr::null_mut(),
            key: 0,
            remote_base: 0,
            memory,
            path,
            bound_endpoint: None,
            domain: stack.domain.clone(),
        };
        if nic.mr_requires(sys::FI_MR_ENDPOINT) {
            // SAFETY: binding a fresh MR to a live endpoint of the same domain, then enabling it.
            unsafe {
                check("fi_mr_bind", sys::fi_mr_bind(raw.as_ptr(), &raw mut (*stack.endpoint()).fid, 0))?;
                check("fi_mr_enable", sys::fi_mr_enable(raw.as_ptr()))?;
            }
            region.bound_endpoint = Some(stack.endpoint.clone());
        }
        // SAFETY: the MR is registered (and enabled where required), so key and descriptor are available.
        region.key = unsafe { sys::fi_mr_key(raw.as_ptr()) };
        if region.key == sys::FI_KEY_NOTAVAIL {
            return Err(FabricError::Invalid("fi_mr_key: the provider gave no key for a registered region".into()));
        }
        region.desc = unsafe { sys::fi_mr_desc(raw.as_ptr()) };
        if nic.mr_requires(sys::FI_MR_VIRT_ADDR) {
            region.remote_base = region.memory.address() as u64;
        }
        Ok(region)
    }

    pub fn key(&self) -> u64 {
        self.key
    }

    /// How the memory was registered (dma-buf, virtual address, or host).
    pub fn path(&self) -> RegistrationPath {
        self.path
    }

    pub fn len(&self) -> usize {
        self.memory.len()
    }

    pub fn is_empty(&self) -> bool {
        self.memory.len() == 0
    }

    pub(crate) fn desc(&self) -> *mut c_void {
        self.desc
    }

    pub(crate) fn remote_base(&self) -> u64 {
        self.remote_base
    }

    /// The local address of byte `offset`; callers have checked `offset` against the length.
    pub(crate) fn local_address(&self, offset: usize) -> *mut c_void {
        self.memory.address().cast::<u8>().wrapping_add(offset).cast()
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        if crate::ending::abandoned() {
            // The registration stays: an operation abandoned in flight may still reach its memory.
            std::mem::forget((self.memory.clone(), self.domain.clone(), self.bound_endpoint.clone()));
            return;
        }
        // SAFETY: we own the registration. Operations that use it borrow it, so none is in flight.
        unsafe { close(&raw mut (*self.raw.as_ptr()).fid) }
    }
}
