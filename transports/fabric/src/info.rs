//! Finding the NICs a provider offers: `fi_getinfo` with efatop's hints, one [`Nic`] per distinct domain.

use std::ffi::{CStr, CString};
use std::fmt;
use std::ptr::NonNull;

use efatop_libfabric_sys as sys;

use crate::error::{FabricError, Result, check};

/// The libfabric provider (and, for efa, the fabric) a run uses.
///
/// Since libfabric 2.1 the efa provider lists two fabrics over the same devices and domain names:
/// `efa-direct` (the device's own queues: no protocol emulation, messages up to about the MTU, `FI_MR_LOCAL`)
/// first, then `efa` (the RDM protocol layer production code uses: segmentation, emulation, shm for
/// same-host peers). `--provider efa` means the `efa` fabric; `efa-direct` is its own choice.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Provider {
    Efa,
    EfaDirect,
    Shm,
    Tcp,
    /// rxd over UDP (`udp;ofi_rxd`).
    Udp,
    Sockets,
    /// Any other provider `fi_info -l` lists, by name.
    Other(String),
}

impl Provider {
    /// The providers efatop names in help and errors (any other listed provider is accepted by name).
    pub const KNOWN: [&'static str; 6] = ["efa", "efa-direct", "shm", "tcp", "udp", "sockets"];

    /// Parses a `--provider` value: a known name, or any other provider name libfabric might list
    /// (letters, digits, `_`, `-`, `;`). `None` for anything else.
    pub fn parse(name: &str) -> Option<Provider> {
        Some(match name {
            "efa" => Provider::Efa,
            "efa-direct" => Provider::EfaDirect,
            "shm" => Provider::Shm,
            "tcp" => Provider::Tcp,
            "udp" => Provider::Udp,
            "sockets" => Provider::Sockets,
            other
                if !other.is_empty()
                    && other.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ';')) =>
            {
                Provider::Other(other.to_string())
            }
            _ => return None,
        })
    }

    /// The name libfabric matches in `fabric_attr->prov_name`. For tcp and udp, libfabric layers a utility
    /// provider (`ofi_rxm`, `ofi_rxd`) over the core one where needed for RDM endpoints; the core name
    /// still selects it. Both efa fabrics belong to the `efa` provider.
    pub fn libfabric_name(&self) -> &str {
        match self {
            Provider::Efa | Provider::EfaDirect => "efa",
            Provider::Shm => "shm",
            Provider::Tcp => "tcp",
            Provider::Udp => "udp",
            Provider::Sockets => "sockets",
            Provider::Other(name) => name,
        }
    }

    /// The efa provider's fabrics: same-host shortcuts and fabric names apply.
    pub fn is_efa(&self) -> bool {
        matches!(self, Provider::Efa | Provider::EfaDirect)
    }

    /// The provider's own completion of a write or send is local: the kernel has taken the bytes (tcp,
    /// sockets), not the peer. efa completes once the peer's NIC acknowledged, shm once the copy is done.
    pub fn completes_locally(&self) -> bool {
        matches!(self, Provider::Tcp | Provider::Sockets)
    }

    /// Whether an `fi_info` entry of fabric `fabric` belongs to this choice. libfabric 1.x names the efa
    /// fabric after the device's GID prefix (`EFA-fe80::…`), 2.x names it `efa` and adds `efa-direct`.
    pub fn accepts_fabric(&self, fabric: &str) -> bool {
        match self {
            Provider::Efa => !fabric.eq_ignore_ascii_case(EFA_DIRECT_FABRIC),
            Provider::EfaDirect => fabric.eq_ignore_ascii_case(EFA_DIRECT_FABRIC),
            _ => true,
        }
    }
}

/// The fabric name of efa's device-direct path (libfabric ≥ 2.1, prov/efa/src/efa.h).
pub const EFA_DIRECT_FABRIC: &str = "efa-direct";

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Provider::EfaDirect => f.write_str(EFA_DIRECT_FABRIC),
            other => f.write_str(other.libfabric_name()),
        }
    }
}

/// What an experiment needs from the endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(clippy::struct_excessive_bools)] // independent requests, each a libfabric capability bit
pub struct Capabilities {
    /// Two-sided SEND/RECV.
    pub messages: bool,
    /// One-sided RDMA WRITE with remote CQ data.
    pub rma_write: bool,
    /// Registration of device (GPU) memory: `FI_HMEM`, with `FI_MR_HMEM`.
    pub hmem: bool,
    /// Let the efa fabric reach same-host peers through shared memory (`--allow-shm`). Off by default, so
    /// that every byte crosses the NIC: efatop asks for `FI_REMOTE_COMM` without `FI_LOCAL_COMM` and turns
    /// `FI_OPT_SHARED_MEMORY_PERMITTED` off, as aws-ofi-nccl does.
    pub same_host_shortcut: bool,
    /// Ask for `FI_DELIVERY_COMPLETE` as the endpoint's default operation flag (`tx_attr.op_flags`, as
    /// Open MPI's `btl/ofi` and Sandia's SHMEM library do for one-sided writes): an operation completes once the
    /// peer has it, not once the provider has taken its bytes. On tcp the latter is the kernel's socket
    /// buffer, so a window of one operation would stream through it.
    pub delivery_complete: bool,
}

impl Capabilities {
    pub const MESSAGES: Capabilities =
        Capabilities { messages: true, rma_write: false, hmem: false, same_host_shortcut: false, delivery_complete: false };
    pub const MESSAGES_AND_WRITE: Capabilities =
        Capabilities { messages: true, rma_write: true, hmem: false, same_host_shortcut: false, delivery_complete: false };

    /// The `caps` efatop puts in its hints for `provider`.
    pub fn hint_caps(self, provider: &Provider) -> u64 {
        let mut wanted = 0u64;
        if self.messages {
            wanted |= u64::from(sys::FI_MSG | sys::FI_SEND | sys::FI_RECV);
        }
        if self.rma_write {
            wanted |= u64::from(sys::FI_RMA | sys::FI_WRITE | sys::FI_REMOTE_WRITE);
        }
        if self.hmem {
            wanted |= sys::FI_HMEM;
        }
        if provider.is_efa() {
            // efa_user_info.c: FI_REMOTE_COMM without FI_LOCAL_COMM clears FI_LOCAL_COMM in the answer, and
            // the endpoint then sends to same-host peers through the NIC, not shm.
            wanted |= sys::FI_REMOTE_COMM;
            if self.same_host_shortcut {
                wanted |= sys::FI_LOCAL_COMM;
            }
        }
        wanted
    }

    /// The `mode` bits efatop can honour in its hints for `provider`. Every operation gets an
    /// `fi_context2`. efa-direct on devices without unsolicited write receive returns no RMA unless the
    /// application takes `FI_RX_CQ_DATA` (a write with immediate data consumes a posted receive), which
    /// efatop honours for that fabric only.
    pub fn hint_mode(self, provider: &Provider) -> u64 {
        let mut mode = sys::FI_CONTEXT | sys::FI_CONTEXT2;
        if *provider == Provider::EfaDirect && self.rma_write {
            mode |= sys::FI_RX_CQ_DATA;
        }
        mode
    }
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
    /// Transmit and receive queue depths the provider offers.
    pub tx_size: usize,
    pub rx_size: usize,
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

    /// The provider's answer keeps `FI_DELIVERY_COMPLETE` as the endpoint's default operation flag (asked
    /// for with [`Capabilities::delivery_complete`]): what the endpoint really does, for the run's facts.
    pub fn delivery_complete(&self) -> bool {
        // SAFETY: the entry came from fi_getinfo/fi_dupinfo; tx_attr is allocated with it.
        let tx_attr = unsafe { self.info.get().tx_attr.as_ref() };
        tx_attr.is_some_and(|attr| attr.op_flags & u64::from(sys::FI_DELIVERY_COMPLETE) != 0)
    }

    /// A write with remote CQ data consumes a receive the target posted (`FI_RX_CQ_DATA`: efa-direct on
    /// devices without unsolicited write receive).
    pub fn writes_consume_receives(&self) -> bool {
        self.mode & sys::FI_RX_CQ_DATA != 0
    }

    /// The efa fabric may send to same-host peers through shm: the provider kept `FI_LOCAL_COMM`.
    pub fn may_use_shm(&self) -> bool {
        efa_may_use_shm(&self.provider, &self.fabric, self.caps)
    }
}

/// Whether an entry of `provider`/`fabric` with `caps` lets same-host peers go through shm: only the efa
/// fabric has that shortcut, and it keeps it while the answer has `FI_LOCAL_COMM`.
pub fn efa_may_use_shm(provider: &str, fabric: &str, caps: u64) -> bool {
    provider == "efa" && !fabric.eq_ignore_ascii_case(EFA_DIRECT_FABRIC) && caps & sys::FI_LOCAL_COMM != 0
}

/// What efatop reads of one `fi_getinfo` entry to choose among them. Plain data, so that the choice
/// ([`select_entries`]) is tested on lists shaped exactly as providers report them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EntryFacts {
    pub provider: String,
    pub fabric: String,
    pub domain: String,
    /// The entry addresses with IPv4 (`FI_SOCKADDR_IN`).
    pub ipv4: bool,
    pub caps: u64,
    pub mode: u64,
    pub mr_mode: u32,
    pub max_msg_size: u64,
    pub inject_size: usize,
    pub cq_data_size: usize,
    pub tx_size: usize,
    pub rx_size: usize,
}

/// Which entries of a `fi_getinfo` answer become NICs, in the order listed: those of the chosen fabric
/// (`efa` and `efa-direct` list the same domains), with the capabilities asked for and room for the 4-byte
/// immediate data efatop's writes carry; one per domain, preferring IPv4 addressing where a domain offers
/// several formats (tcp lists v4 and v6).
pub fn select_entries(provider: &Provider, caps: Capabilities, entries: &[EntryFacts]) -> Vec<usize> {
    // FI_REMOTE_COMM/FI_LOCAL_COMM are requests about shortcuts, not capabilities an entry must show.
    let needed = caps.hint_caps(provider) & !(sys::FI_REMOTE_COMM | sys::FI_LOCAL_COMM);
    let mut chosen: Vec<usize> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let usable = provider.accepts_fabric(&entry.fabric)
            && entry.caps & needed == needed
            && (!caps.rma_write || entry.cq_data_size >= 4);
        if !usable {
            continue;
        }
        match chosen.iter().position(|&i| entries[i].domain == entry.domain) {
            Some(slot) => {
                if !entries[chosen[slot]].ipv4 && entry.ipv4 {
                    chosen[slot] = index;
                }
            }
            None => chosen.push(index),
        }
    }
    chosen
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
pub fn discover_nics(provider: &Provider, caps: Capabilities) -> Result<Vec<Nic>> {
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
pub fn explain_missing(provider: &Provider, nics_without_rma: Option<usize>) -> FabricError {
    match nics_without_rma {
        Some(n) if n > 0 => FabricError::Unavailable {
            provider: provider.to_string(),
            missing: "RMA WRITE with remote CQ data".into(),
            hint: if *provider == Provider::EfaDirect {
                "; efa-direct offers RMA only where the device supports RDMA write: try --provider efa".into()
            } else {
                "; write needs it: try --provider efa, shm or tcp".into()
            },
        },
        _ => missing_provider(provider),
    }
}

fn missing_provider(provider: &Provider) -> FabricError {
    FabricError::Unavailable {
        provider: provider.to_string(),
        missing: "reliable-datagram (RDM) endpoints".into(),
        hint: "; `fi_info -l` lists the providers this libfabric has".into(),
    }
}

fn getinfo(provider: &Provider, caps: Capabilities) -> Result<Vec<Nic>> {
    let hints = Hints::new(provider, caps)?;
    let mut list: *mut sys::fi_info = std::ptr::null_mut();
    // SAFETY: hints is a valid fi_info from fi_allocinfo; list receives a new list we free below.
    let ret = unsafe {
        sys::fi_getinfo(crate::api_version(), std::ptr::null(), std::ptr::null(), 0, hints.0.as_ptr(), &raw mut list)
    };
    check("fi_getinfo", ret)?;
    let mut entries: Vec<NonNull<sys::fi_info>> = Vec::new();
    let mut cursor = list;
    while let Some(entry) = NonNull::new(cursor) {
        // SAFETY: entries of the list stay valid until fi_freeinfo(list).
        cursor = unsafe { entry.as_ref() }.next;
        entries.push(entry);
    }
    // SAFETY: as above: every entry is live until the list is freed.
    let facts: Vec<EntryFacts> = entries.iter().map(|entry| unsafe { entry_facts(entry.as_ref()) }).collect();
    let nics = select_entries(provider, caps, &facts)
        .into_iter()
        .map(|index| nic_from_entry(entries[index]))
        .collect::<Result<Vec<Nic>>>();
    // SAFETY: list came from fi_getinfo and every entry we keep was duplicated.
    unsafe { sys::fi_freeinfo(list) };
    nics
}

/// Reads the selection facts of one entry.
///
/// # Safety
/// `raw` is a live entry of an `fi_getinfo` answer (attribute pointers filled in).
unsafe fn entry_facts(raw: &sys::fi_info) -> EntryFacts {
    // SAFETY: fi_getinfo fills fabric, domain, ep and tx/rx attributes for every entry.
    let (fabric_attr, domain_attr, ep_attr, tx_attr, rx_attr) =
        unsafe { (&*raw.fabric_attr, &*raw.domain_attr, &*raw.ep_attr, &*raw.tx_attr, &*raw.rx_attr) };
    EntryFacts {
        provider: c_string(fabric_attr.prov_name),
        fabric: c_string(fabric_attr.name),
        domain: c_string(domain_attr.name),
        ipv4: raw.addr_format == sys::FI_SOCKADDR_IN,
        caps: raw.caps,
        mode: raw.mode,
        mr_mode: domain_attr.mr_mode as u32,
        max_msg_size: ep_attr.max_msg_size as u64,
        inject_size: tx_attr.inject_size,
        cq_data_size: domain_attr.cq_data_size,
        tx_size: tx_attr.size,
        rx_size: rx_attr.size,
    }
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
    // SAFETY: a duplicated entry keeps every attribute of the original; nic may be NULL.
    let facts = unsafe { entry_facts(raw) };
    let (link_speed_bps, pci_address) = unsafe { nic_attributes(raw.nic) };
    Ok(Nic {
        provider: facts.provider,
        fabric: facts.fabric,
        domain: facts.domain,
        link_speed_bps,
        pci_address,
        max_msg_size: facts.max_msg_size,
        inject_size: facts.inject_size,
        cq_data_size: facts.cq_data_size,
        mr_mode: facts.mr_mode,
        mode: facts.mode,
        caps: facts.caps,
        tx_size: facts.tx_size,
        rx_size: facts.rx_size,
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
    fn new(provider: &Provider, caps: Capabilities) -> Result<Self> {
        // SAFETY: fi_allocinfo returns a zeroed fi_info with all attribute structs allocated, or NULL.
        let raw = unsafe { sys::fi_allocinfo() };
        let hints = Self(NonNull::new(raw).ok_or_else(|| FabricError::Invalid("fi_allocinfo: out of memory".into()))?);
        let name = CString::new(provider.libfabric_name()).map_err(|e| FabricError::Invalid(e.to_string()))?;
        // SAFETY: all attribute pointers of an fi_allocinfo result are valid; prov_name takes ownership of a
        // malloc'd copy, which fi_freeinfo releases.
        unsafe {
            let info = &mut *raw;
            info.caps = caps.hint_caps(provider);
            info.mode = caps.hint_mode(provider);
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
            if caps.delivery_complete {
                (*info.tx_attr).op_flags = u64::from(sys::FI_DELIVERY_COMPLETE);
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
        let lacks_rma = explain_missing(&Provider::Sockets, Some(2)).to_string();
        assert!(lacks_rma.contains("RMA WRITE"), "{lacks_rma}");
        assert!(lacks_rma.contains("sockets"), "{lacks_rma}");
        let missing = explain_missing(&Provider::Efa, Some(0)).to_string();
        assert!(missing.contains("no efa interface offers reliable-datagram"), "{missing}");
        let missing = explain_missing(&Provider::Efa, None).to_string();
        assert!(missing.contains("fi_info -l"), "{missing}");
    }

    #[test]
    fn mr_mode_bits_are_named() {
        assert_eq!(mr_mode_names(sys::FI_MR_VIRT_ADDR | sys::FI_MR_PROV_KEY), vec!["FI_MR_VIRT_ADDR", "FI_MR_PROV_KEY"]);
        assert!(mr_mode_names(0).is_empty());
    }
}
