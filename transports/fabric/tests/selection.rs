//! Which `fi_getinfo` entries become NICs, and what efatop asks for, tested on lists shaped exactly as the
//! providers report them. No EFA hardware is needed: selection is a pure function over [`EntryFacts`].
//!
//! The efa shapes follow ofiwg/libfabric v2.6.0 prov/efa/src:
//! - efa.h: fabric names `efa` (EFA_FABRIC_NAME) and `efa-direct` (EFA_DIRECT_FABRIC_NAME);
//! - efa_prov_info.c: domain caps FI_LOCAL_COMM|FI_REMOTE_COMM (EFA_DOMAIN_CAPS), cq_data_size 4
//!   (EFA_CQ_DATA_SIZE), efa-direct mode FI_CONTEXT2 and mr_mode with FI_MR_LOCAL, the RDM (`efa`) entry
//!   with FI_MR_LOCAL cleared, FI_MR_HMEM added, max_msg_size UINT64_MAX;
//! - efa_user_info.c: efa-direct without FI_RMA in the hints reports the device's max_msg_sz (the MTU, 8928
//!   on a p5's EFA), and with FI_RMA but without FI_RX_CQ_DATA on devices lacking unsolicited write recv
//!   returns nothing; FI_REMOTE_COMM without FI_LOCAL_COMM in the hints clears FI_LOCAL_COMM in the answer.
//! - Since 2.1 the provider lists the efa-direct entries first, with the same domain names as efa's.
//!
//! Domain names are a p5.48xlarge's (rdma-core names devices `rdmap<bus>s<slot>`; libfabric adds `-rdm`).

#![allow(clippy::doc_markdown)] // the header cites C identifiers from prov/efa as they are spelled there

use efatop_fabric::{Capabilities, EntryFacts, Provider, efa_may_use_shm, select_entries};
use efatop_libfabric_sys as sys;

const P5_DOMAINS: [&str; 4] = ["rdmap79s0-rdm", "rdmap80s0-rdm", "rdmap81s0-rdm", "rdmap82s0-rdm"];
const EFA_MTU: u64 = 8928;
const RMA: u64 = (sys::FI_RMA | sys::FI_WRITE | sys::FI_REMOTE_WRITE | sys::FI_READ | sys::FI_REMOTE_READ) as u64;
const MSG: u64 = (sys::FI_MSG | sys::FI_SEND | sys::FI_RECV) as u64;
const BASIC_MAP: u32 = sys::FI_MR_VIRT_ADDR | sys::FI_MR_ALLOCATED | sys::FI_MR_PROV_KEY;

fn efa_direct(domain: &str) -> EntryFacts {
    EntryFacts {
        provider: "efa".into(),
        fabric: "efa-direct".into(),
        domain: domain.into(),
        caps: MSG | RMA | sys::FI_HMEM | sys::FI_LOCAL_COMM | sys::FI_REMOTE_COMM,
        mode: sys::FI_CONTEXT2 | sys::FI_RX_CQ_DATA,
        mr_mode: BASIC_MAP | sys::FI_MR_LOCAL | sys::FI_MR_HMEM,
        max_msg_size: EFA_MTU,
        inject_size: 32,
        cq_data_size: 4,
        tx_size: 256,
        rx_size: 128,
        ..EntryFacts::default()
    }
}

/// The `efa` fabric's entry as the answer to efatop's hints (FI_REMOTE_COMM without FI_LOCAL_COMM) has it.
fn efa(domain: &str) -> EntryFacts {
    EntryFacts {
        fabric: "efa".into(),
        caps: MSG | RMA | sys::FI_HMEM | sys::FI_REMOTE_COMM,
        mode: 0,
        mr_mode: BASIC_MAP | sys::FI_MR_HMEM,
        max_msg_size: u64::MAX,
        inject_size: 4096,
        tx_size: 4096,
        rx_size: 8192,
        ..efa_direct(domain)
    }
}

/// A p5 with libfabric ≥ 2.1: every efa-direct entry, then every efa entry, same domains.
fn p5_list() -> Vec<EntryFacts> {
    P5_DOMAINS.iter().map(|d| efa_direct(d)).chain(P5_DOMAINS.iter().map(|d| efa(d))).collect()
}

fn chosen<'a>(provider: &Provider, caps: Capabilities, list: &'a [EntryFacts]) -> Vec<&'a EntryFacts> {
    select_entries(provider, caps, list).into_iter().map(|i| &list[i]).collect()
}

#[test]
fn provider_efa_means_the_efa_fabric_even_when_efa_direct_is_listed_first() {
    let list = p5_list();
    let nics = chosen(&Provider::Efa, Capabilities::MESSAGES_AND_WRITE, &list);
    let fabrics: Vec<&str> = nics.iter().map(|e| e.fabric.as_str()).collect();
    let domains: Vec<&str> = nics.iter().map(|e| e.domain.as_str()).collect();
    assert_eq!(fabrics, ["efa"; 4], "one NIC per domain, all on the efa fabric");
    assert_eq!(domains, P5_DOMAINS);
    assert!(nics.iter().all(|e| e.max_msg_size == u64::MAX), "the RDM protocol segments: no MTU limit");
}

#[test]
fn efa_direct_is_its_own_choice() {
    let list = p5_list();
    let nics = chosen(&Provider::EfaDirect, Capabilities::MESSAGES_AND_WRITE, &list);
    assert_eq!(nics.iter().map(|e| e.fabric.as_str()).collect::<Vec<_>>(), ["efa-direct"; 4]);
    assert!(nics.iter().all(|e| e.mr_mode & sys::FI_MR_LOCAL != 0 && e.max_msg_size == EFA_MTU));
    assert_eq!(Provider::parse("efa-direct"), Some(Provider::EfaDirect));
    assert_eq!(Provider::EfaDirect.libfabric_name(), "efa", "both fabrics belong to the efa provider");
    assert_eq!(Provider::EfaDirect.to_string(), "efa-direct");
}

#[test]
fn libfabric_1x_efa_fabric_names_are_still_the_efa_fabric() {
    // Before 2.x the fabric was named after the device's GID prefix and there was no efa-direct.
    let list: Vec<EntryFacts> = P5_DOMAINS.iter().map(|d| EntryFacts { fabric: "EFA-fe80::4f6:3cff:fe5d:7b9d".into(), ..efa(d) }).collect();
    assert_eq!(chosen(&Provider::Efa, Capabilities::MESSAGES_AND_WRITE, &list).len(), 4);
    assert!(chosen(&Provider::EfaDirect, Capabilities::MESSAGES_AND_WRITE, &list).is_empty());
}

#[test]
fn efa_hints_ask_for_remote_comm_without_local_comm_unless_shm_is_allowed() {
    let caps = Capabilities::MESSAGES_AND_WRITE;
    let hinted = caps.hint_caps(&Provider::Efa);
    assert_ne!(hinted & sys::FI_REMOTE_COMM, 0, "NIC-only traffic needs FI_REMOTE_COMM");
    assert_eq!(hinted & sys::FI_LOCAL_COMM, 0, "FI_LOCAL_COMM would let efa send to same-host peers through shm");
    assert_ne!(hinted & RMA & !u64::from(sys::FI_READ | sys::FI_REMOTE_READ), 0);
    let allowed = Capabilities { same_host_shortcut: true, ..caps }.hint_caps(&Provider::Efa);
    assert_eq!(allowed & (sys::FI_LOCAL_COMM | sys::FI_REMOTE_COMM), sys::FI_LOCAL_COMM | sys::FI_REMOTE_COMM);
    // Neither flag for providers without a shortcut to turn off (shm is local only: FI_REMOTE_COMM would
    // find nothing).
    for provider in [Provider::Shm, Provider::Tcp, Provider::Udp] {
        assert_eq!(caps.hint_caps(&provider) & (sys::FI_LOCAL_COMM | sys::FI_REMOTE_COMM), 0, "{provider}");
    }
}

#[test]
fn the_answer_decides_whether_same_host_peers_use_shm() {
    // What efa_user_info.c answers to each request.
    assert!(!efa_may_use_shm("efa", "efa", efa("d").caps), "FI_LOCAL_COMM cleared: through the NIC");
    assert!(efa_may_use_shm("efa", "efa", efa("d").caps | sys::FI_LOCAL_COMM), "--allow-shm kept it");
    assert!(!efa_may_use_shm("efa", "efa-direct", efa_direct("d").caps), "efa-direct has no shm");
    assert!(!efa_may_use_shm("shm", "shm", sys::FI_LOCAL_COMM), "only efa has the shortcut");
}

#[test]
fn efa_direct_writes_take_rx_cq_data_and_efa_does_not() {
    let write = Capabilities::MESSAGES_AND_WRITE;
    assert_ne!(write.hint_mode(&Provider::EfaDirect) & sys::FI_RX_CQ_DATA, 0);
    assert_eq!(write.hint_mode(&Provider::Efa) & sys::FI_RX_CQ_DATA, 0);
    assert_eq!(Capabilities::MESSAGES.hint_mode(&Provider::EfaDirect) & sys::FI_RX_CQ_DATA, 0);
    for provider in [Provider::Efa, Provider::EfaDirect, Provider::Shm, Provider::Tcp] {
        let mode = write.hint_mode(&provider);
        assert_eq!(mode & (sys::FI_CONTEXT | sys::FI_CONTEXT2), sys::FI_CONTEXT | sys::FI_CONTEXT2, "{provider}");
    }
}

#[test]
fn entries_that_cannot_carry_the_writes_are_not_chosen() {
    let mut list = p5_list();
    // An efa entry without RMA (a device without RDMA write whose emulation was not offered) and one with
    // too little CQ data for the 4-byte immediate.
    list[4].caps &= !RMA;
    list[5].cq_data_size = 0;
    let nics = chosen(&Provider::Efa, Capabilities::MESSAGES_AND_WRITE, &list);
    assert_eq!(nics.iter().map(|e| e.domain.as_str()).collect::<Vec<_>>(), &P5_DOMAINS[2..]);
    // Messages alone do not need either.
    assert_eq!(chosen(&Provider::Efa, Capabilities::MESSAGES, &list).len(), 4);
}

#[test]
fn tcp_keeps_one_entry_per_interface_preferring_ipv4_and_shm_its_single_domain() {
    let tcp = |domain: &str, fabric: &str, ipv4: bool| EntryFacts {
        provider: "tcp".into(),
        fabric: fabric.into(),
        domain: domain.into(),
        ipv4,
        caps: MSG | RMA,
        mr_mode: 0,
        max_msg_size: u64::MAX,
        cq_data_size: 8,
        ..EntryFacts::default()
    };
    let list = vec![
        tcp("eth0", "fe80::/64", false),
        tcp("eth0", "192.0.2.0/24", true),
        tcp("lo", "::1/128", false),
        tcp("lo", "127.0.0.0/8", true),
    ];
    let nics = chosen(&Provider::Tcp, Capabilities::MESSAGES_AND_WRITE, &list);
    assert_eq!(nics.iter().map(|e| (e.domain.as_str(), e.ipv4)).collect::<Vec<_>>(), [("eth0", true), ("lo", true)]);
    let shm = vec![EntryFacts {
        provider: "shm".into(),
        fabric: "shm".into(),
        domain: "shm".into(),
        caps: MSG | RMA | sys::FI_LOCAL_COMM,
        cq_data_size: 8,
        ..EntryFacts::default()
    }];
    assert_eq!(chosen(&Provider::Shm, Capabilities::MESSAGES_AND_WRITE, &shm).len(), 1);
}

#[test]
fn any_listed_provider_is_accepted_by_name_and_nonsense_is_not() {
    assert_eq!(Provider::parse("udp"), Some(Provider::Udp));
    assert_eq!(Provider::Udp.libfabric_name(), "udp");
    assert_eq!(Provider::parse("verbs;ofi_rxm"), Some(Provider::Other("verbs;ofi_rxm".into())));
    assert_eq!(Provider::parse("a b"), None);
    assert_eq!(Provider::parse(""), None);
}
