//! The libfabric objects themselves, each an RAII owner of one `fid`.
//!
//! Parents are kept alive by the children (`Rc`), so `fi_close` always runs child-first: endpoint, then
//! its CQ and AV, memory regions, the domain, and last the fabric.

use std::cell::Cell;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::rc::Rc;

use efatop_libfabric_sys as sys;

use crate::error::{FabricError, Result, check};
use crate::info::Nic;
use crate::memory::{MemoryKind, RegistrableMemory};

/// Closes any libfabric object through its embedded `fid`.
///
/// # Safety
/// `fid` must be the `fid` member of a live object that nothing else will close.
unsafe fn close(fid: *mut sys::fid) {
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
    _cq: Rc<CqObject>,
    _av: Rc<AvObject>,
    _domain: Rc<DomainObject>,
}

impl Drop for EndpointObject {
    fn drop(&mut self) {
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
    pub(crate) fn open(nic: &Nic, cq_size: usize) -> Result<Self> {
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
            _cq: cq.clone(),
            _av: av.clone(),
            _domain: domain.clone(),
        });
        let ep = endpoint.raw.as_ptr();
        // SAFETY: binding live objects of the same domain, then enabling the endpoint.
        unsafe {
            check(
                "fi_ep_bind(cq)",
                sys::fi_ep_bind(ep, &raw mut (*cq.raw.as_ptr()).fid, u64::from(sys::FI_TRANSMIT | sys::FI_RECV)),
            )?;
            check("fi_ep_bind(av)", sys::fi_ep_bind(ep, &raw mut (*av.raw.as_ptr()).fid, 0))?;
            check("fi_enable", sys::fi_enable(ep))?;
        }
        Ok(Self { endpoint, cq, av, domain })
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
    /// Under `FI_MR_ENDPOINT` the registration is bound to the endpoint, which must outlive it.
    bound_endpoint: Option<Rc<EndpointObject>>,
    _domain: Rc<DomainObject>,
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
        match memory.kind() {
            // SAFETY: the memory is valid for `len` bytes and outlives the registration (we hold an Rc).
            MemoryKind::Host => check("fi_mr_reg", unsafe {
                sys::fi_mr_reg(
                    stack.domain.raw.as_ptr(),
                    memory.address(),
                    memory.len(),
                    access,
                    0,
                    requested_key,
                    0,
                    &raw mut mr_raw,
                    std::ptr::null_mut(),
                )
            })?,
            MemoryKind::Cuda { device } => {
                let iov = sys::iovec { iov_base: memory.address(), iov_len: memory.len() };
                let mut attr = sys::fi_mr_attr {
                    mr_iov: &raw const iov,
                    iov_count: 1,
                    access,
                    requested_key,
                    iface: sys::fi_hmem_iface_FI_HMEM_CUDA,
                    ..Default::default()
                };
                attr.device.cuda = device;
                // SAFETY: attr and iov live across the call; the device memory outlives the registration.
                check("fi_mr_regattr(FI_HMEM_CUDA)", unsafe {
                    sys::fi_mr_regattr(stack.domain.raw.as_ptr(), &raw const attr, 0, &raw mut mr_raw)
                })?;
            }
        }
        let raw = non_null(mr_raw, "fi_mr_reg")?;
        let mut region = Self {
            raw,
            desc: std::ptr::null_mut(),
            key: 0,
            remote_base: 0,
            memory,
            bound_endpoint: None,
            _domain: stack.domain.clone(),
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
        // SAFETY: we own the registration. Operations that use it borrow it, so none is in flight.
        unsafe { close(&raw mut (*self.raw.as_ptr()).fid) }
    }
}
