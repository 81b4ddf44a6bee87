//! The fixtures from scripts/fixtures/make-topology-fixtures, read through hwloc: what every GPU is next to, and
//! golden files of the text and JSON output. `EFATOP_BLESS=1 cargo test -p efatop-topology` rewrites the
//! golden files after an intended change; review the diff.

use std::path::{Path, PathBuf};

use efatop_proto::topology::{GpuLinkSource, Link, PairLink};
use efatop_topology::{GpuChoice, NicKind, NodeTopology, TopologyError};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(name)
}

fn load(name: &str) -> NodeTopology {
    NodeTopology::from_xml_file(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn golden(file: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(file);
    if std::env::var_os("EFATOP_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().expect("golden dir")).expect("create golden dir");
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (EFATOP_BLESS=1 writes it)", path.display()));
    if expected != actual {
        // The first differing line, not the whole file: the p5 JSON is a thousand lines.
        let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
        let at = (0..e.len().max(a.len())).find(|&i| e.get(i) != a.get(i)).unwrap_or(0);
        panic!(
            "{file}, line {}:\n  golden: {:?}\n  actual: {:?}\nEFATOP_BLESS=1 rewrites the golden file",
            at + 1,
            e.get(at),
            a.get(at)
        );
    }
}

fn check_golden(name: &str) -> NodeTopology {
    let topo = load(&format!("{name}.xml"));
    golden(&format!("{name}.txt"), &topo.render_text());
    let json = serde_json::to_string_pretty(&topo).expect("serialize") + "\n";
    golden(&format!("{name}.json"), &json);
    // The JSON is the same data: it reads back into an equal topology.
    let back: NodeTopology = serde_json::from_str(&json).expect("deserialize");
    assert_eq!(back, topo);
    // `efatop topo --ranks 8`'s table: 8 local ranks, round-robin over the GPUs.
    let placements: Vec<_> = (0..8).map(|rank| topo.placement(rank, GpuChoice::Auto).expect("placement")).collect();
    golden(&format!("{name}.ranks8.txt"), &topo.render_placements(&placements));
    topo
}

/// Every GPU's channels (its preferred NICs' names), the rail of every NIC, and what a GPU's channels carry.
fn channels(topo: &NodeTopology) -> Vec<Vec<&str>> {
    topo.gpus.iter().map(|gpu| gpu.preferred_nics.iter().map(|&k| topo.nics[k].name.as_str()).collect()).collect()
}

/// The rules every type must keep, whatever its layout: a GPU's channels are rails 0.. of that GPU, no
/// NIC is a channel of two GPUs unless it is their only NIC (p4d), and no ENA is ever a channel.
fn rails_follow_the_channels(topo: &NodeTopology) {
    let rails = topo.rails();
    for gpu in &topo.gpus {
        for (rail, &k) in gpu.preferred_nics.iter().enumerate() {
            let (owner, at) = rails[k].expect("a channel has a rail");
            assert!(owner <= gpu.index, "NIC{k}'s rail belongs to the first GPU that uses it");
            if owner == gpu.index {
                assert_eq!(at, rail, "GPU{} NIC{k}", gpu.index);
            }
        }
    }
    for nic in &topo.nics {
        if nic.kind == NicKind::Ethernet {
            assert_eq!(rails[nic.index], None, "{} (ENA) is never a channel", nic.name);
            assert!(topo.gpus.iter().all(|gpu| !gpu.nearest_nics.contains(&nic.index)), "{}", nic.name);
        }
    }
}

#[test]
fn p4de_is_the_p4d_layout_with_80gb_a100s() {
    let (p4d, p4de) = (load("p4d.24xlarge.xml"), check_golden("p4de.24xlarge"));
    assert_eq!(p4de.nics, p4d.nics);
    assert_eq!((p4de.nic_links.clone(), p4de.gpu_links.clone()), (p4d.nic_links.clone(), p4d.gpu_links.clone()));
    for (a80, a40) in p4de.gpus.iter().zip(&p4d.gpus) {
        assert_eq!((a80.pci_id.as_str(), a80.model.as_deref()), ("10de:20b2", Some("NVIDIA A100-SXM4-80GB")));
        assert_eq!((&a80.pci_bus_id, &a80.preferred_nics), (&a40.pci_bus_id, &a40.preferred_nics));
    }
    // EFA v1 reads only: writes are emulated over sends.
    assert!(p4de.nics.iter().all(|n| n.efa_generation() == Some(1) && n.native_rdma_write() == Some(false)));
    assert!(p4de.render_text().contains("EFA v1, RDMA read only"));
    // One NIC shared by two GPUs: both use it, it is rail 0 of the first.
    assert_eq!(p4de.rails()[0], Some((0, 0)));
    assert_eq!(channels(&p4de)[1], ["rdmap16s27"]);
    rails_follow_the_channels(&p4de);
    assert_eq!(p4de.aggregate_gbps(&[0, 1, 2, 3]), Some(400.0));
}

#[test]
fn p6_b200_gives_each_gpu_one_400g_efa_of_its_switch() {
    let topo = check_golden("p6-b200.48xlarge");
    assert_eq!((topo.gpus.len(), topo.nics.len()), (8, 8));
    assert!(topo.nics.iter().all(|n| n.pci_id == "1d0f:efa3" && n.efa_generation() == Some(4) && n.link_gbps == Some(400.0)));
    for gpu in &topo.gpus {
        assert_eq!(gpu.nearest_nics.len(), 2, "2 GPUs and 2 NICs per switch");
        assert_eq!(gpu.preferred_nics, [gpu.index], "split: NIC k for GPU k");
        assert_eq!(topo.rails()[gpu.index], Some((gpu.index, 0)));
        assert_eq!(topo.gpu_links[gpu.index][(gpu.index + 1) % 8], Link::NvLink(Some(18)));
    }
    rails_follow_the_channels(&topo);
    assert_eq!(topo.aggregate_gbps(&(0..8).collect::<Vec<_>>()), Some(3200.0));
    assert_eq!(topo.pair_link(0, 1).and_then(|p| p.peak_gbytes_per_s), Some(900.0), "B200: 18 x 50 GB/s");
}

#[test]
fn p6_b300_gives_each_gpu_two_efa_and_never_the_ena_only_card_0() {
    let topo = check_golden("p6-b300.48xlarge");
    assert_eq!((topo.gpus.len(), topo.nics.len()), (8, 17));
    let ena = &topo.nics[0];
    assert_eq!((ena.kind, ena.pci_id.as_str(), ena.efa_generation()), (NicKind::Ethernet, "1d0f:ec20", None));
    let efa: Vec<usize> = topo.nics.iter().filter(|n| n.kind == NicKind::Efa).map(|n| n.index).collect();
    assert_eq!(efa.len(), 16);
    assert_eq!(topo.aggregate_gbps(&efa), Some(6400.0));
    let mut claimed = Vec::new();
    for gpu in &topo.gpus {
        assert_eq!(gpu.nearest_nics.len(), 4);
        assert_eq!(gpu.preferred_nics.len(), 2, "GPU{}", gpu.index);
        assert!(!gpu.preferred_nics.contains(&0) && !gpu.nearest_nics.contains(&0), "card 0 is ENA only");
        assert_eq!(topo.aggregate_gbps(&gpu.preferred_nics), Some(800.0));
        claimed.extend(gpu.preferred_nics.iter().copied());
        let placement = topo.placement(gpu.index, GpuChoice::Auto).expect("placement");
        assert!(!placement.nics.contains(&ena.name));
    }
    claimed.sort_unstable();
    assert_eq!(claimed, efa, "every EFA is exactly one GPU's channel");
    assert_eq!(channels(&topo)[1], ["rdmap28s0", "rdmap29s0"]);
    assert_eq!(topo.rails()[0], None);
    rails_follow_the_channels(&topo);
    assert!(topo.render_text().contains("no GPU channel"));
}

#[test]
fn p6e_gb200_takes_one_device_per_physical_nic_and_never_counts_a_nic_twice() {
    let topo = check_golden("p6e-gb200.36xlarge");
    assert_eq!((topo.gpus.len(), topo.nics.len(), topo.numa_nodes.len()), (4, 17, 2));
    assert_eq!(topo.numa_nodes[0].cpus, "0-71");
    assert_eq!(topo.numa_nodes[1].cpus, "72-143");
    assert_eq!(topo.nvswitches, 0, "the NVLink switches are outside the host");
    let efa: Vec<usize> = (1..17).collect();
    assert!(efa.iter().all(|&k| topo.nics[k].physical_nic.as_ref().is_some_and(|p| p.link_gbps == Some(400.0))));
    assert_eq!(topo.physical_nic_count(&efa), 8);
    // AWS's pairs: GPU0 on cards (1,3), GPU1 (5,7), GPU2 (9,11), GPU3 (13,15).
    for gpu in &topo.gpus {
        let first = 4 * gpu.index + 1;
        assert_eq!(gpu.nearest_nics, (first..first + 4).collect::<Vec<_>>());
        assert_eq!(gpu.preferred_nics, [first, first + 2], "GPU{}", gpu.index);
        assert_eq!(topo.aggregate_gbps(&gpu.preferred_nics), Some(400.0));
        // All four nearest devices are two physical NICs: 800, not 4 x 200 counted per physical link.
        assert_eq!(topo.aggregate_gbps(&gpu.nearest_nics), Some(800.0));
    }
    // Two devices of one physical NIC are its link, not twice it, even where each device says 400.
    let mut doubled = topo.clone();
    for k in [1, 2] {
        doubled.nics[k].link_gbps = Some(400.0);
    }
    assert_eq!(doubled.aggregate_gbps(&[1, 2]), Some(400.0));
    assert_eq!(doubled.aggregate_gbps(&[1, 3]), Some(600.0));
    let channel_set: Vec<usize> = topo.gpus.iter().flat_map(|g| g.preferred_nics.clone()).collect();
    assert_eq!(topo.aggregate_gbps(&channel_set), Some(1600.0), "AWS: 1600 Gbps of EFA");
    assert_eq!(topo.rails()[2], None, "the second half of a physical NIC is no channel");
    assert_eq!(topo.rails()[3], Some((0, 1)));
    rails_follow_the_channels(&topo);
    // Placement of 8 ranks on 4 GPUs wraps around.
    assert_eq!(topo.placement(5, GpuChoice::Auto).expect("placement").nics, channels(&topo)[1]);
}

/// GPU i's links to every NIC, grouped: (PIX/PXB NIC names, NODE/SYS count, others).
fn split(topo: &NodeTopology, gpu: usize) -> (Vec<&str>, usize, usize) {
    let links = &topo.nic_links[gpu];
    let local = topo.nics.iter().filter(|n| links[n.index].is_pcie_local()).map(|n| n.name.as_str()).collect();
    let far = links.iter().filter(|l| matches!(l, Link::Node | Link::Sys)).count();
    let other = links.len() - far - links.iter().filter(|l| l.is_pcie_local()).count();
    (local, far, other)
}

#[test]
fn p5_every_gpu_has_its_own_four_efa() {
    let topo = check_golden("p5.48xlarge");
    assert_eq!(topo.gpus.len(), 8);
    assert_eq!(topo.nics.len(), 32);
    assert!(topo.nics.iter().all(|n| n.kind == NicKind::Efa && n.link_gbps == Some(100.0)));
    assert_eq!(topo.numa_nodes.len(), 2);
    let mut claimed = Vec::new();
    for gpu in &topo.gpus {
        let (local, far, other) = split(&topo, gpu.index);
        assert_eq!(local.len(), 4, "GPU{}: {local:?}", gpu.index);
        assert_eq!(far, 28, "GPU{}", gpu.index);
        assert_eq!(other, 0, "GPU{}", gpu.index);
        assert_eq!(gpu.nearest_nics.len(), 4);
        assert_eq!(gpu.preferred_nics, gpu.nearest_nics, "nobody shares a p5 GPU's EFAs");
        claimed.extend(gpu.nearest_nics.iter().copied());
        assert_eq!(gpu.numa_node, Some(u32::from(gpu.index >= 4)));
        assert_eq!(gpu.cpus, if gpu.index < 4 { "0-47,96-143" } else { "48-95,144-191" });
        for (j, link) in topo.gpu_links[gpu.index].iter().enumerate() {
            assert_eq!(*link, if j == gpu.index { Link::Same } else { Link::NvLink(Some(18)) });
        }
    }
    claimed.sort_unstable();
    assert_eq!(claimed, (0..32).collect::<Vec<_>>(), "every EFA belongs to exactly one GPU");
    // The table of NODE-FACTS.md: GPU 0 at 53:00.0 with rdmap79s0..rdmap82s0.
    assert_eq!(topo.gpus[0].pci_bus_id, "0000:53:00.0");
    assert_eq!(split(&topo, 0).0, ["rdmap79s0", "rdmap80s0", "rdmap81s0", "rdmap82s0"]);
    assert_eq!(split(&topo, 7).0, ["rdmap198s0", "rdmap199s0", "rdmap200s0", "rdmap201s0"]);
    // Same socket is NODE, the other socket SYS.
    assert_eq!(topo.nic_links[0][4], Link::Node);
    assert_eq!(topo.nic_links[0][16], Link::Sys);
    // Four NICs per GPU: GPU1's are its rails 0-3.
    assert_eq!(topo.rails()[4..8], [Some((1, 0)), Some((1, 1)), Some((1, 2)), Some((1, 3))]);
    rails_follow_the_channels(&topo);
}

#[test]
fn p4d_each_efa_serves_two_gpus() {
    let topo = check_golden("p4d.24xlarge");
    assert_eq!((topo.gpus.len(), topo.nics.len()), (8, 4));
    for nic in &topo.nics {
        let near: Vec<usize> =
            (0..topo.gpus.len()).filter(|&g| topo.nic_links[g][nic.index].is_pcie_local()).collect();
        assert_eq!(near.len(), 2, "{}: {near:?}", nic.name);
        assert_eq!(near, [2 * nic.index, 2 * nic.index + 1], "{}", nic.name);
    }
    for gpu in &topo.gpus {
        assert_eq!(gpu.nearest_link, Some(Link::Pix));
        assert_eq!(gpu.nearest_nics, [gpu.index / 2]);
        assert_eq!(gpu.preferred_nics, [gpu.index / 2], "one EFA for two GPUs is shared, not split");
        for (j, link) in topo.gpu_links[gpu.index].iter().enumerate() {
            assert_eq!(*link, if j == gpu.index { Link::Same } else { Link::NvLink(Some(12)) });
        }
    }
    assert_eq!(topo.nics[0].name, "rdmap16s27");
    assert_eq!(topo.gpus[1].pci_bus_id, "0000:10:1d.0");
    assert_eq!(topo.gpus[0].cpus, "0-23,48-71");
}

#[test]
fn p5en_splits_a_switch_between_its_two_gpus() {
    let topo = check_golden("p5en.48xlarge");
    assert_eq!((topo.gpus.len(), topo.nics.len()), (8, 16));
    assert!(topo.nics.iter().all(|n| n.link_gbps == Some(200.0) && n.pci_id == "1d0f:efa2"));
    for gpu in &topo.gpus {
        let (local, far, _) = split(&topo, gpu.index);
        assert_eq!((local.len(), far), (4, 12), "GPU{}", gpu.index);
        assert_eq!(gpu.preferred_nics.len(), 2);
    }
    assert_eq!(topo.gpus[0].preferred_nics, [0, 1]);
    assert_eq!(topo.gpus[1].preferred_nics, [2, 3]);
    assert_eq!(topo.gpus[0].pci_bus_id, "0000:59:00.0");
    assert_eq!(topo.nics[0].name, "rdmap85s0");
    // Two NICs per GPU: GPU1's are rails 0 and 1 of GPU1, not rails 2 and 3 of the switch's first GPU.
    assert_eq!(topo.rails()[2], Some((1, 0)));
    rails_follow_the_channels(&topo);
}

/// p5e.48xlarge is a p5 with H200s: aws-ofi-nccl gives both one platform entry ("p5/p5e"), AWS's EFA
/// guide one network-card layout; the fixture is p5's tree with the GPUs changed (see
/// scripts/fixtures/make-topology-fixtures, [ofi-p5e]).
#[test]
fn p5e_is_the_p5_layout_with_h200s() {
    let (p5, p5e) = (load("p5.48xlarge.xml"), load("p5e.48xlarge.xml"));
    assert_eq!(p5e.nics, p5.nics);
    assert_eq!(p5e.nic_links, p5.nic_links);
    assert_eq!(p5e.gpu_links, p5.gpu_links);
    assert_eq!(p5e.gpus.len(), 8);
    for (h200, h100) in p5e.gpus.iter().zip(&p5.gpus) {
        assert_eq!((h200.pci_id.as_str(), h200.model.as_deref()), ("10de:2335", Some("NVIDIA H200")));
        assert_eq!((&h200.pci_bus_id, h200.numa_node, &h200.cpus), (&h100.pci_bus_id, h100.numa_node, &h100.cpus));
        assert_eq!((&h200.nearest_nics, &h200.preferred_nics), (&h100.nearest_nics, &h100.preferred_nics));
    }
    assert!(p5e.nics.iter().filter(|n| n.kind == NicKind::Efa).all(|n| n.link_gbps == Some(100.0) && n.pci_id == "1d0f:efa1"));
}

#[test]
fn this_machine_fixture_has_no_gpus_and_lists_its_nics() {
    let topo = load("this-machine.xml");
    assert!(topo.gpus.is_empty());
    assert!(topo.nic_links.is_empty() && topo.gpu_links.is_empty());
    assert!(!topo.nics.is_empty());
    let text = topo.render_text();
    assert!(text.contains("No GPUs"), "{text}");
    for nic in &topo.nics {
        assert!(text.contains(&nic.name), "{text}");
    }
}

#[test]
fn nvswitch_pairs_peak_at_the_gpu_models_links_times_its_link_rate() {
    // H100: 18 NVLink 4 links at 25 GB/s each way (900 GB/s bidirectional in the datasheet).
    let p5 = load("p5.48xlarge.xml");
    let pair = p5.pair_link(0, 7).expect("GPU0 and GPU7 exist");
    assert_eq!(pair.link, Link::NvLink(Some(18)));
    assert_eq!((pair.active_links, pair.per_link_gbytes_per_s, pair.peak_gbytes_per_s), (Some(18), Some(25.0), Some(450.0)));
    assert_eq!(pair.source, GpuLinkSource::Hwloc);
    // A100: 12 NVLink 3 links, 600 GB/s bidirectional.
    let p4d = load("p4d.24xlarge.xml");
    assert_eq!(p4d.pair_link(1, 2).and_then(|p| p.peak_gbytes_per_s), Some(300.0));
    // A GPU with itself, and GPUs that do not exist.
    assert_eq!(p5.pair_link(3, 3).map(|p| (p.link, p.peak_gbytes_per_s)), Some((Link::Same, None)));
    assert!(p5.pair_link(0, 8).is_none());
}

#[test]
fn nvml_links_replace_the_inferred_ones_all_or_nothing() {
    let mut topo = load("p5.48xlarge.xml");
    let before = topo.clone();
    // The NVML side failing on one pair keeps every inferred cell.
    let failed = topo.replace_gpu_links(
        |a, b| if b == "0000:ca:00.0" { Err(format!("{a}-{b}: NVML error")) } else { Ok(PairLink::pcie(Link::Sys, GpuLinkSource::Nvml)) },
        GpuLinkSource::Nvml,
    );
    assert!(failed.is_err());
    assert_eq!(topo, before);
    // GPU0-GPU1 with 4 direct links and everything else PCIe, as NVML might say for bridged PCIe cards.
    let bridged = |a: &str, b: &str| -> Result<PairLink, String> {
        let pair = [a, b];
        Ok(if pair.contains(&"0000:53:00.0") && pair.contains(&"0000:64:00.0") {
            PairLink::nvlink(Some(4), Some(25.0), GpuLinkSource::Nvml)
        } else {
            PairLink::pcie(Link::Node, GpuLinkSource::Nvml)
        })
    };
    topo.replace_gpu_links(bridged, GpuLinkSource::Nvml).expect("every pair answered");
    assert_eq!(topo.gpu_links[0][1], Link::NvLink(Some(4)));
    assert_eq!(topo.gpu_links[1][0], Link::NvLink(Some(4)));
    assert_eq!(topo.gpu_links[0][2], Link::Node);
    assert_eq!(topo.gpu_links[5][5], Link::Same);
    assert_eq!(topo.pair_link(1, 0).and_then(|p| p.peak_gbytes_per_s), Some(100.0));
    let text = topo.render_text();
    assert!(text.contains("GPU-GPU cells from NVML: each pair's active NVLinks"), "{text}");
    assert!(text.contains("NVLink peak per direction: NV4 = 100 GB/s (4 x 25 GB/s)"), "{text}");
    assert!(!text.contains("inferred from hwloc"), "{text}");
    // The JSON says where the cells came from and reads back the same.
    let json = serde_json::to_value(&topo).expect("serialize");
    assert_eq!(json["gpu_link_source"], "nvml");
    assert_eq!(json["gpu_peak_gbytes_per_s"][0][1], 100.0);
    assert_eq!(serde_json::from_value::<NodeTopology>(json).expect("deserialize"), topo);
}

#[test]
fn placement_follows_the_local_rank() {
    let topo = load("p5.48xlarge.xml");
    let p = topo.placement(5, GpuChoice::Auto).unwrap();
    assert_eq!(p.gpu, Some(5));
    assert_eq!(p.gpu_pci_bus_id.as_deref(), Some("0000:a8:00.0"));
    assert_eq!(p.nics, ["rdmap164s0", "rdmap165s0", "rdmap166s0", "rdmap167s0"]);
    assert_eq!((p.numa_node, p.cpus.as_str()), (Some(1), "48-95,144-191"));
    // More local ranks than GPUs wrap around.
    assert_eq!(topo.placement(9, GpuChoice::Auto).unwrap().gpu, Some(1));
    let err = topo.placement(0, GpuChoice::Index(8)).unwrap_err();
    assert!(matches!(err, TopologyError::NoSuchGpu { requested: 8, count: 8 }));
    assert_eq!(err.to_string(), "GPU 8 does not exist: this node has 8 GPUs (0-7)");
    // A rank on GPU1 ranks libfabric's NICs: its own EFAs first, by bus id or by domain name.
    let gpu1 = topo.placement(1, GpuChoice::Auto).unwrap();
    assert_eq!(topo.nic_preference(&gpu1, Some("0000:60:00.0"), "whatever"), Some(0));
    assert_eq!(topo.nic_preference(&gpu1, None, "rdmap99s0-rdm"), Some(3));
    assert_eq!(topo.nic_preference(&gpu1, Some("0000:4f:00.0"), "rdmap79s0-rdm"), None);
    assert_eq!(topo.nic_preference(&gpu1, None, "lo"), None);
    let p5en = load("p5en.48xlarge.xml");
    assert_eq!(p5en.placement(1, GpuChoice::Auto).unwrap().nics, ["rdmap87s0", "rdmap88s0"]);
    let text = topo.render_placements(&[topo.placement(0, GpuChoice::Auto).unwrap()]);
    assert!(text.contains("rdmap79s0,rdmap80s0,rdmap81s0,rdmap82s0"), "{text}");
}

#[test]
fn placement_follows_the_gpu_actually_opened_not_the_local_rank() {
    // Under CUDA_VISIBLE_DEVICES=5 rank 0 opens CUDA ordinal 0, which is hwloc's GPU 5 (bus a8): its NICs
    // must be GPU 5's, found by the bus id CUDA reports (8-digit domain), not GPU 0's.
    let topo = load("p5.48xlarge.xml");
    let p = topo.placement_of_gpu(0, "00000000:A8:00.0").expect("GPU a8 is on a p5");
    assert_eq!((p.local_rank, p.gpu), (0, Some(5)));
    assert_eq!(p.nics, ["rdmap164s0", "rdmap165s0", "rdmap166s0", "rdmap167s0"]);
    assert_eq!(topo.placement_of_gpu(0, "0000:53:00.0").and_then(|p| p.gpu), Some(0));
    assert!(topo.placement_of_gpu(0, "0000:ff:00.0").is_none(), "a bus id hwloc does not list");
}

#[test]
fn placement_without_gpus_uses_every_nic() {
    let topo = load("this-machine.xml");
    let p = topo.placement(3, GpuChoice::Auto).unwrap();
    assert_eq!(p.gpu, None);
    assert_eq!(p.nics, topo.nics.iter().map(|n| n.name.clone()).collect::<Vec<_>>());
    assert!(!p.cpus.is_empty());
    assert!(matches!(topo.placement(0, GpuChoice::Index(0)), Err(TopologyError::NoSuchGpu { requested: 0, count: 0 })));
}

#[test]
fn libfabric_nics_attach_by_bus_id_then_name() {
    use efatop_topology::FabricNic;
    let mut topo = load("p5.48xlarge.xml");
    let fabric = |domain: &str, bus: Option<&str>| FabricNic {
        provider: "efa".into(),
        domain: domain.into(),
        pci_bus_id: bus.map(str::to_string),
        link_gbps: Some(100.0),
    };
    topo.attach_fabric_nics([
        fabric("rdmap79s0-rdm", Some("0000:4f:00.0")),
        fabric("rdmap80s0-rdm", None),
        fabric("lo", None),
    ]);
    assert_eq!(topo.nics[0].libfabric[0].domain, "rdmap79s0-rdm");
    assert_eq!(topo.nics[1].libfabric[0].domain, "rdmap80s0-rdm");
    assert_eq!(topo.other_fabric_nics.len(), 1);
    assert!(topo.render_text().contains("libfabric: efa rdmap79s0-rdm"));
    assert_eq!(topo.nic_by_name("rdmap81s0").map(|n| n.index), Some(2));
    assert_eq!(topo.gpu_by_pci_bus_id("00000000:53:00.0").map(|g| g.index), Some(0));
}

#[test]
fn bad_xml_is_an_error_not_a_panic() {
    let dir = std::env::temp_dir().join(format!("efatop-topology-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("missing.xml");
    assert!(matches!(NodeTopology::from_xml_file(&missing), Err(TopologyError::Read { .. })));
    for (name, text) in [
        ("truncated.xml", "<topology><object type="),
        ("text.xml", "not xml at all"),
        ("empty.xml", ""),
        ("no-objects.xml", "<?xml version=\"1.0\"?>\n<topology version=\"2.0\"></topology>\n"),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let err = NodeTopology::from_xml_file(&path).unwrap_err();
        assert!(matches!(err, TopologyError::InvalidXml { .. }), "{name}: {err}");
        assert!(err.to_string().starts_with(&format!("{name} is not an hwloc XML topology")), "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn this_machine_is_discovered() {
    let topo = NodeTopology::discover().unwrap();
    assert_eq!(topo.source, "this machine");
    assert!(!topo.numa_nodes.is_empty());
    assert_eq!(topo.nic_links.len(), topo.gpus.len());
}
