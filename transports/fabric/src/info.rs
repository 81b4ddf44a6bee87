//! Finding the NICs a provider offers: `fi_getinfo` with efatop's hints, one [`Nic`] per distinct domain.

use std::ffi::{CStr, CString};
use std::fmt;
use std::ptr::NonNull;

use efatop_libfabric_sys as sys;

use crate::error::{FabricError, Result, check};

/// The libfabric providers efatop knows how to drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Provider {
    Efa,
    Shm,
    Tcp,
    Sockets,
}

impl Provider {
    pub const ALL: [Provider; 4] = [Provider::Efa, Provider::Shm, Provider::Tcp, Provider::Sockets];

    /// The name libfabric matches in `fabric_attr->prov_name`. For tcp, libfabric 1.17 layers the
    /// `ofi_rxm` utility provider over it to give RDM endpoints; the core name still selects it.
    pub fn libfabric_name(self) -> &'static str {
        match self {
            Provider::Efa => "efa",
            Provider::Shm => "shm",
            Provider::Tcp => "tcp",
            Provider::Sockets => "sockets",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.libfabric_name())
    }
}

/// What an experiment needs from the endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Two-sided SEND/RECV.
    pub messages: bool,
    /// One-sided RDMA WRITE with remote CQ data.
    pub rma_write: bool,
    /// Registration of device (GPU) memory: `FI_HMEM`, with `FI_MR_HMEM`.
    pub hmem: bool,
}

impl Capabilities {
    pub const MESSAGES: Capabilities = Capabilities { messages: true, rma_write: false, hmem: false };
    pub const MESSAGES_AND_WRITE: Capabilities = Capabilities { messages: true, rma_write: true, hmem: false };
}

/// An owned, single `fi_info` entry (its `next` is NULL), duplicated out of a `fi_getinfo` list.
pub(crate) struct OwnedInfo(NonNull<sys::fi_info>);

impl OwnedInfo {
    pub(crate) fn as_ptr(&self) -> *mut sys::fi_info {
        self.0.as_ptr()
    }

    fn get(&self) -> &sys::fi_info {
        // SAFETY: the pointer came from fi_dupinfo and stays valid until Drop.
        unsafe { self.0.as_ref() }
    }
}

impl Clone for OwnedInfo {
    fn clone(&self) -> Self {
        // SAFETY: duplicating a valid fi_info; fi_dupinfo returns NULL only when out of memory.
        let dup = unsafe { sys::fi_dupinfo(self.0.as_ptr()) };
        Self(NonNull::new(dup).expect("fi_dupinfo: out of memory"))
    }
}

impl Drop for OwnedInfo {
    fn drop(&mut self) {
        // SAFETY: we own this entry; its next pointer is NULL so only it is freed.
        unsafe { sys::fi_freeinfo(self.0.as_ptr()) }
    }
}

/// One NIC as libfabric describes it: a distinct domain of the chosen provider (one `rdmap*` device on a
/// p5, one network interface for tcp, the whole host for shm).
#[derive(Clone)]
pub struct Nic {
    /// The provider stack as libfabric names it, e.g. `efa` or `tcp;ofi_rxm`.
    pub provider: String,
    pub fabric: String,
    pub domain: String,
    /// Link speed in bits per second, when the provider reports one.
    pub link_speed_bps: Option<u64>,
    /// PCI address `dddd:bb:dd.f`, when the provider reports bus attributes.
    pub pci_address: Option<String>,
    pub max_msg_size: u64,
    pub inject_size: usize,
    pub cq_data_size: usize,
    /// The `FI_MR_*` bits the provider requires of us.
    pub mr_mode: u32,
    pub mode: u64,
    pub caps: u64,
    pub(crate) info: OwnedInfo,
}

impl fmt::Debug for Nic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nic")
            .field("provider", &self.provider)
            .field("fabric", &self.fabric)
            .field("domain", &self.domain)
            .field("link_speed_bps", &self.link_speed_bps)
            .field("mr_mode", &mr_mode_names(self.mr_mode))
            .finish_non_exhaustive()
    }
}

impl Nic {
    pub fn mr_requires(&self, bit: u32) -> bool {
        self.mr_mode & bit != 0
    }

    /// The provider says it can register device memory on this NIC (it may still refuse at registration:
    /// Debian's and Ubuntu's libfabric 1.17 advertise `FI_HMEM` on shm and return ENOSYS for CUDA memory).
    pub fn offers_hmem(&self) -> bool {
        self.caps & sys::FI_HMEM != 0
    }
}

/// Names of the `FI_MR_*` bits set in `mode`, for headers and JSON.
pub fn mr_mode_names(mode: u32) -> Vec<&'static str> {
    [
        (sys::FI_MR_LOCAL, "FI_MR_LOCAL"),
        (sys::FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"),
        (sys::FI_MR_ALLOCATED, "FI_MR_ALLOCATED"),
        (sys::FI_MR_PROV_KEY, "FI_MR_PROV_KEY"),
        (sys::FI_MR_ENDPOINT, "FI_MR_ENDPOINT"),
        (sys::FI_MR_HMEM, "FI_MR_HMEM"),
        (sys::FI_MR_RAW, "FI_MR_RAW"),
    ]
    .into_iter()
    .filter(|(bit, _)| mode & *bit != 0)
    .map(|(_, name)| name)
    .collect()
}

/// Asks libfabric for RDM endpoints of `provider` with `caps`, and returns one [`Nic`] per domain, in the
/// order libfabric lists them.
pub fn discover_nics(provider: Provider, caps: Capabilities) -> Result<Vec<Nic>> {
    let found = getinfo(provider, caps);
    if matches!(&found, Ok(nics) if !nics.is_empty()) {
        return found;
    }
    if let Err(err) = &found {
        if !err.is_code(sys::FI_ENODATA) {
            return found;
        }
    }
    // Nothing matched: tell "the provider is missing" apart from "the provider lacks RMA".
    let without_rma = caps.rma_write.then(|| {
        getinfo(provider, Capabilities { rma_write: false, ..caps }).map_or(0, |nics| nics.len())
    });
    Err(explain_missing(provider, without_rma))
}

/// Why no NIC matched: `nics_without_rma` is how many NICs the provider offers when RMA is not asked for
/// (`None` when RMA was not asked for in the first place).
pub fn explain_missing(provider: Provider, nics_without_rma: Option<usize>) -> FabricError {
    match nics_without_rma {
        Some(n) if n > 0 => FabricError::Unavailable {
            provider: provider.to_string(),
            missing: "RMA WRITE with remote CQ data".into(),
            hint: "; write needs it: try --provider efa, shm or tcp".into(),
        },
        _ => missing_provider(provider),
    }
}

fn missing_provider(provider: Provider) -> FabricError {
    FabricError::Unavailable {
        provider: provider.to_string(),
        missing: "reliable-datagram (RDM) endpoints".into(),
        hint: "; `fi_info -l` lists the providers this libfabric has".into(),
    }
}

fn getinfo(provider: Provider, caps: Capabilities) -> Result<Vec<Nic>> {
    let hints = Hints::new(provider, caps)?;
    let mut list: *mut sys::fi_info = std::ptr::null_mut();
    // SAFETY: hints is a valid fi_info from fi_allocinfo; list receives a new list we free below.
    let ret = unsafe {
        sys::fi_getinfo(sys::EFATOP_FI_VERSION, std::ptr::null(), std::ptr::null(), 0, hints.0.as_ptr(), &raw mut list)
    };
    check("fi_getinfo", ret)?;
    let mut nics: Vec<Nic> = Vec::new();
    let mut cursor = list;
    while let Some(entry) = NonNull::new(cursor) {
        // SAFETY: entries of the list stay valid until fi_freeinfo(list).
        let entry_ref = unsafe { entry.as_ref() };
        cursor = entry_ref.next;
        let nic = nic_from_entry(entry)?;
        match nics.iter().position(|n| n.domain == nic.domain) {
            // Prefer IPv4 addressing for a domain that offers several formats (tcp lists v4 and v6).
            Some(i) => {
                if nics[i].info.get().addr_format != sys::FI_SOCKADDR_IN
                    && nic.info.get().addr_format == sys::FI_SOCKADDR_IN
                {
                    nics[i] = nic;
                }
            }
            None => nics.push(nic),
        }
    }
    // SAFETY: list came from fi_getinfo and every entry we keep was duplicated.
    unsafe { sys::fi_freeinfo(list) };
    Ok(nics)
}

fn nic_from_entry(entry: NonNull<sys::fi_info>) -> Result<Nic> {
    // SAFETY: duplicate one entry with next cleared; the list is unchanged.
    let dup = unsafe {
        let saved = (*entry.as_ptr()).next;
        (*entry.as_ptr()).next = std::ptr::null_mut();
        let dup = sys::fi_dupinfo(entry.as_ptr());
        (*entry.as_ptr()).next = saved;
        dup
    };
    let info = OwnedInfo(NonNull::new(dup).ok_or_else(|| FabricError::Invalid("fi_dupinfo: out of memory".into()))?);
    let raw = info.get();
    // SAFETY: fi_getinfo fills fabric, domain, ep and tx attributes for every entry; nic may be NULL.
    let (fabric_attr, domain_attr, ep_attr, tx_attr) =
        unsafe { (&*raw.fabric_attr, &*raw.domain_attr, &*raw.ep_attr, &*raw.tx_attr) };
    let (link_speed_bps, pci_address) = unsafe { nic_attributes(raw.nic) };
    Ok(Nic {
        provider: c_string(fabric_attr.prov_name),
        fabric: c_string(fabric_attr.name),
        domain: c_string(domain_attr.name),
        link_speed_bps,
        pci_address,
        max_msg_size: ep_attr.max_msg_size as u64,
        inject_size: tx_attr.inject_size,
        cq_data_size: domain_attr.cq_data_size,
        mr_mode: domain_attr.mr_mode as u32,
        mode: raw.mode,
        caps: raw.caps,
        info,
    })
}

/// Reads link speed and PCI address from a `fid_nic`, if the provider filled one in.
///
/// # Safety
/// `nic` is NULL or points to a `fid_nic` owned by a live `fi_info`.
unsafe fn nic_attributes(nic: *mut sys::fid_nic) -> (Option<u64>, Option<String>) {
    let Some(nic) = (unsafe { nic.as_ref() }) else { return (None, None) };
    let speed = unsafe { nic.link_attr.as_ref() }.map(|link| link.speed as u64).filter(|s| *s > 0);
    let pci = unsafe { nic.bus_attr.as_ref() }
        .filter(|bus| bus.bus_type == sys::fi_bus_type_FI_BUS_PCI)
        .map(|bus| {
            // SAFETY: bus_type says the union holds PCI attributes.
            let pci = unsafe { bus.attr.pci };
            format!("{:04x}:{:02x}:{:02x}.{:x}", pci.domain_id, pci.bus_id, pci.device_id, pci.function_id)
        });
    (speed, pci)
}

fn c_string(ptr: *const std::os::raw::c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: libfabric strings are NUL-terminated and live as long as their fi_info.
    unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
}

/// An `fi_info` used as hints; freed with `fi_freeinfo`, which also frees the strings we strdup into it.
struct Hints(NonNull<sys::fi_info>);

impl Hints {
    fn new(provider: Provider, caps: Capabilities) -> Result<Self> {
        // SAFETY: fi_allocinfo returns a zeroed fi_info with all attribute structs allocated, or NULL.
        let raw = unsafe { sys::fi_allocinfo() };
        let hints = Self(NonNull::new(raw).ok_or_else(|| FabricError::Invalid("fi_allocinfo: out of memory".into()))?);
        let name = CString::new(provider.libfabric_name()).map_err(|e| FabricError::Invalid(e.to_string()))?;
        let mut wanted = 0u64;
        if caps.messages {
            wanted |= u64::from(sys::FI_MSG | sys::FI_SEND | sys::FI_RECV);
        }
        if caps.rma_write {
            wanted |= u64::from(sys::FI_RMA | sys::FI_WRITE | sys::FI_REMOTE_WRITE);
        }
        if caps.hmem {
            wanted |= sys::FI_HMEM;
        }
        // SAFETY: all attribute pointers of an fi_allocinfo result are valid; prov_name takes ownership of a
        // malloc'd copy, which fi_freeinfo releases.
        unsafe {
            let info = &mut *raw;
            info.caps = wanted;
            // We give every operation an fi_context2 (the largest context any provider asks for).
            info.mode = sys::FI_CONTEXT | sys::FI_CONTEXT2;
            (*info.ep_attr).type_ = sys::fi_ep_type_FI_EP_RDM;
            (*info.fabric_attr).prov_name = libc::strdup(name.as_ptr());
            let domain = &mut *info.domain_attr;
            // Every mode bit we know how to honour; the provider keeps the ones it needs.
            let hmem = if caps.hmem { sys::FI_MR_HMEM } else { 0 };
            domain.mr_mode = (sys::FI_MR_LOCAL
                | sys::FI_MR_VIRT_ADDR
                | sys::FI_MR_ALLOCATED
                | sys::FI_MR_PROV_KEY
                | sys::FI_MR_ENDPOINT
                | hmem) as i32;
            domain.threading = sys::fi_threading_FI_THREAD_DOMAIN;
            domain.av_type = sys::fi_av_type_FI_AV_TABLE;
            if caps.rma_write {
                domain.cq_data_size = 4;
            }
        }
        Ok(hints)
    }
}

impl Drop for Hints {
    fn drop(&mut self) {
        // SAFETY: allocated by fi_allocinfo and owned here.
        unsafe { sys::fi_freeinfo(self.0.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_without_rma_is_told_apart_from_a_missing_one() {
        let lacks_rma = explain_missing(Provider::Sockets, Some(2)).to_string();
        assert!(lacks_rma.contains("RMA WRITE"), "{lacks_rma}");
        assert!(lacks_rma.contains("sockets"), "{lacks_rma}");
        let missing = explain_missing(Provider::Efa, Some(0)).to_string();
        assert!(missing.contains("no efa interface offers reliable-datagram"), "{missing}");
        let missing = explain_missing(Provider::Efa, None).to_string();
        assert!(missing.contains("fi_info -l"), "{missing}");
    }

    #[test]
    fn mr_mode_bits_are_named() {
        assert_eq!(mr_mode_names(sys::FI_MR_VIRT_ADDR | sys::FI_MR_PROV_KEY), vec!["FI_MR_VIRT_ADDR", "FI_MR_PROV_KEY"]);
        assert!(mr_mode_names(0).is_empty());
    }
}
