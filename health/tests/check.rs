//! The health check's rules on fake p5, p5e, p5en and p4d nodes: a healthy node has no problem and nothing
//! unknown; each planted fault is named, by the rule that owns it and about the thing it broke, and
//! nothing else is.

use std::time::Duration;

use efatop_health::{
    observe, observe_with_traffic, Carrier, Expected, Finding, Libfabric, LibfabricFacts, NicBytes, Observed, Report, Rule, SlowNic, Status, Traffic,
    TrafficChannel, TrafficOutcome,
};
use efatop_node::{FakeNode, Fault, Sysfs};

const TYPES: [&str; 4] = ["p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p4d.24xlarge"];

fn expected(instance_type: &str) -> Expected {
    Expected {
        instance_type: Some(instance_type.into()),
        source: "test".into(),
        layout: efatop_topology::instance_layout(instance_type).map(|layout| layout.expect("layout loads")),
    }
}

fn not_checked() -> Libfabric {
    Libfabric::NotChecked { reason: "a fake tree".into() }
}

/// Observes `node` over `window`, bumping the victim's impaired counter meanwhile when `rising`.
fn check(node: &FakeNode, window: Duration, rising: bool, libfabric: Libfabric) -> (Observed, Report) {
    let expected = expected(node.instance_type());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let bumper = rising.then(|| {
        let (node, stop) = (node.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                node.bump().expect("bump");
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    });
    let observed = observe(&Sysfs::new(node.root()), expected.layout.as_ref(), window, || libfabric);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(bumper) = bumper {
        bumper.join().expect("bumper");
    }
    let report = Report::new("node", &expected, &observed);
    (observed, report)
}

fn problems(report: &Report) -> Vec<(Rule, String)> {
    report.with_status(Status::Problem).map(|f| (f.rule, f.subject.clone().unwrap_or_default())).collect()
}

#[test]
fn a_healthy_node_of_every_type_has_no_problem_and_nothing_unknown() {
    for instance_type in TYPES {
        let dir = tempfile::tempdir().unwrap();
        let node = FakeNode::write(dir.path(), instance_type).unwrap();
        let (_, report) = check(&node, Duration::from_millis(50), false, not_checked());
        assert_eq!(report.status, Status::Ok, "{instance_type}: {:#?}", report.findings);
        let oks: Vec<Rule> = report.with_status(Status::Ok).map(|f| f.rule).collect();
        for rule in [
            Rule::Instance,
            Rule::EfaDevices,
            Rule::EfaPorts,
            Rule::EfaCounters,
            Rule::Numa,
            Rule::Pcie,
            Rule::PcieLink,
            Rule::Gpus,
            Rule::GpuXid,
            Rule::Gpudirect,
            Rule::Memlock,
        ] {
            assert!(oks.contains(&rule), "{instance_type}: {rule:?} not ok: {:#?}", report.findings);
        }
        let skipped: Vec<Rule> = report.with_status(Status::Skipped).map(|f| f.rule).collect();
        // GPU memory health is NVML's, which a fake tree is not asked.
        assert_eq!(skipped, [Rule::Rails, Rule::GpuMemory, Rule::Libfabric], "{instance_type}");
        assert_eq!(report.action, efatop_proto::action::Action::None, "{instance_type}");
    }
}

#[test]
fn each_planted_fault_is_named_alone_on_every_type() {
    for instance_type in TYPES {
        for fault in Fault::ALL {
            let dir = tempfile::tempdir().unwrap();
            let node = FakeNode::write(dir.path(), instance_type).unwrap();
            let subject = node.plant(fault).unwrap();
            let window = if fault == Fault::ImpairedRising { Duration::from_millis(300) } else { Duration::from_millis(50) };
            let (_, report) = check(&node, window, fault == Fault::ImpairedRising, not_checked());
            let rule = match fault {
                Fault::MissingNic => Rule::EfaDevices,
                Fault::PortDown => Rule::EfaPorts,
                Fault::ImpairedRising => Rule::EfaCounters,
                Fault::WrongNuma => Rule::Numa,
                Fault::LowMemlock => Rule::Memlock,
                Fault::GpuLinkX8 | Fault::EfaLinkX8 | Fault::GpuLinkDown | Fault::EfaLinkDown => Rule::PcieLink,
                Fault::Xid(_) => Rule::GpuXid,
            };
            assert_eq!(problems(&report), [(rule, subject.clone())], "{instance_type} {fault:?}: {:#?}", report.findings);
            assert_eq!(report.status, Status::Problem);
            assert!(report.with_status(Status::Unknown).next().is_none(), "{instance_type} {fault:?}: {:#?}", report.findings);
            let finding = report.with_status(Status::Problem).next().unwrap();
            assert!(finding.short.is_ascii() && finding.short.len() <= 60, "{:?}", finding.short);
            assert!(finding.short.contains(&subject), "{:?}", finding.short);
        }
    }
}

#[test]
fn the_messages_say_what_is_wrong_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::write(dir.path(), "p5.48xlarge").unwrap();
    node.plant(Fault::MissingNic).unwrap();
    node.plant(Fault::LowMemlock).unwrap();
    std::fs::write(dir.path().join("sys/class/infiniband/rdmap81s0/ports/1/rate"), "25 Gb/sec (1X EDR)\n").unwrap();
    let (_, report) = check(&node, Duration::from_millis(50), false, not_checked());
    let messages: Vec<&str> = report.with_status(Status::Problem).map(|f| f.message.as_str()).collect();
    assert_eq!(
        messages,
        [
            "rdmap80s0 (0000:50:00.0, next to GPU 0) is missing: 31 of 32 EFA devices present",
            "rdmap81s0 port 1 links at 25 Gb/sec, not the 100 Gb/sec of this type",
            "max locked memory is 64 KiB (hard 64 KiB); EFA registers (pins) every buffer and needs it unlimited \
             (the EFA installer sets it in /etc/security/limits.d; under Slurm, PropagateResourceLimits passes the submitter's)",
        ]
    );
}

#[test]
fn the_rail_check_is_the_monitors_and_names_a_nic_off_its_rail() {
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::write(dir.path(), "p5.48xlarge").unwrap();
    // Rail 1 of every GPU carries traffic during the window, GPU 5's at a tenth.
    let mover = {
        let node = node.clone();
        std::thread::spawn(move || {
            for _ in 0..30 {
                for (index, (device, _)) in node.efa().iter().enumerate().filter(|(i, _)| i % 4 == 1) {
                    let by = if index == 21 { 10_000_000 } else { 100_000_000 };
                    node.counters().advance(device, "tx_bytes", by).unwrap();
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let (_, report) = check(&node, Duration::from_millis(200), false, not_checked());
    mover.join().unwrap();
    assert_eq!(problems(&report), [(Rule::Rails, "rdmap165s0".to_string())], "{:#?}", report.findings);
}

#[test]
fn libfabric_without_efa_or_with_emulated_write_is_a_problem_but_not_on_p4d() {
    let facts = |domains: Result<Vec<String>, String>, emulated: Option<bool>| {
        Libfabric::Checked(LibfabricFacts {
            version: "2.1".into(),
            library: Some("/opt/amazon/efa/lib/libfabric.so.1".into()),
            dmabuf_api: true,
            efa_domains: domains,
            emulated_write: emulated,
            endpoint_error: None,
        })
    };
    let all = |n: usize| Ok((0..n).map(|i| format!("rdmap{i}-rdm")).collect::<Vec<_>>());
    for (instance_type, efa, libfabric, want) in [
        ("p5.48xlarge", 32, facts(all(32), Some(false)), None),
        ("p5.48xlarge", 32, facts(Err("fi_getinfo: No data available".into()), None), Some("libfabric 2.1: no efa provider")),
        ("p5.48xlarge", 32, facts(all(32), Some(true)), Some("efa RDMA write emulated")),
        ("p5.48xlarge", 32, facts(all(31), Some(false)), Some("efa offers 31 of 32 NICs")),
        ("p4d.24xlarge", 4, facts(all(4), Some(true)), None),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let node = FakeNode::write(dir.path(), instance_type).unwrap();
        assert_eq!(node.efa().len(), efa);
        let (_, report) = check(&node, Duration::from_millis(20), false, libfabric);
        let shorts: Vec<&str> = report.with_status(Status::Problem).map(|f| f.short.as_str()).collect();
        assert_eq!(shorts, want.into_iter().collect::<Vec<_>>(), "{instance_type}: {:#?}", report.findings);
        if want.is_none() {
            assert!(report.findings.iter().any(|f| f.rule == Rule::Libfabric && f.status == Status::Ok));
        }
    }
}

#[test]
fn an_unknown_type_without_efa_is_unknown_not_healthy() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("proc/self")).unwrap();
    std::fs::write(dir.path().join("proc/self/limits"), "Max locked memory         unlimited            unlimited            bytes\n").unwrap();
    let expected = Expected { instance_type: None, source: "DMI product name".into(), layout: None };
    let observed = observe(&Sysfs::new(dir.path()), None, Duration::from_millis(10), not_checked);
    let report = Report::new("node", &expected, &observed);
    assert_eq!(report.status, Status::Unknown, "{:#?}", report.findings);
    let unknown: Vec<&str> = report.with_status(Status::Unknown).map(|f| f.short.as_str()).collect();
    // No kernel log in the tree either: GPU Xids are not known.
    assert_eq!(unknown, ["no EFA devices", "kernel log unreadable"]);
}

#[test]
fn a_node_with_no_efa_at_all_is_one_finding_not_one_per_nic() {
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::write(dir.path(), "p5en.48xlarge").unwrap();
    std::fs::remove_dir_all(dir.path().join("sys/class/infiniband")).unwrap();
    let (_, report) = check(&node, Duration::from_millis(20), false, not_checked());
    let shorts: Vec<&str> = report.with_status(Status::Problem).map(|f| f.short.as_str()).collect();
    assert_eq!(shorts, ["16 of 16 EFA missing"], "{:#?}", report.findings);
}

#[test]
fn gpudirect_and_memlock_are_not_judged_without_efa() {
    // A GPU machine with no EFA and no layout (the H100 device machine): nvidia loaded, no peermem.
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::write(dir.path(), "p5.48xlarge").unwrap();
    std::fs::remove_dir_all(dir.path().join("sys/class/infiniband")).unwrap();
    std::fs::remove_dir_all(dir.path().join("sys/module/nvidia_peermem")).unwrap();
    node.plant(Fault::LowMemlock).unwrap();
    let expected = Expected { instance_type: Some("g9.xlarge".into()), source: "test".into(), layout: None };
    let observed = observe(&Sysfs::new(node.root()), None, Duration::from_millis(10), not_checked);
    let report = Report::new("node", &expected, &observed);
    let status = |rule: Rule| report.findings.iter().find(|f| f.rule == rule).map(|f| f.status);
    assert_eq!(status(Rule::Gpudirect), Some(Status::Skipped), "{:#?}", report.findings);
    assert_eq!(status(Rule::Memlock), Some(Status::Skipped));
    assert_eq!(report.status, Status::Unknown, "no EFA and no layout: could not tell");
}

/// `--traffic`'s facts as the binary hands them over: 2 ranks on GPU 0 and GPU 1 of a p5, each writing
/// through its GPU's 4 EFA, ending with `outcome`.
fn efa_traffic(node: &FakeNode, outcome: TrafficOutcome) -> Traffic {
    let efa = node.efa();
    let channels = (0..8)
        .map(|i| TrafficChannel { rank: i / 4, gpu: Some(i / 4), channel: i % 4, nic: format!("{}-rdm", efa[i].0), best_gbps: Some(95.0 + i as f64) })
        .collect();
    Traffic {
        provider: "efa".into(),
        stack: Some("efa".into()),
        carrier: Carrier::Nic,
        ranks: 2,
        size: 4 << 20,
        iters: 4,
        threshold: 0.5,
        seconds: 3.0,
        channels,
        outcome,
    }
}

/// The traffic rule's findings for `traffic` on a healthy fake p5, with `edit` applied to what was observed.
fn traffic_findings(traffic: Traffic, edit: impl FnOnce(&mut Observed)) -> Vec<(Status, String, String)> {
    traffic_report(traffic, edit).iter().map(|f| (f.status, f.subject.clone().unwrap_or_default(), f.short.clone())).collect()
}

fn traffic_report(traffic: Traffic, edit: impl FnOnce(&mut Observed)) -> Vec<Finding> {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = FakeNode::write(dir.path(), "p5.48xlarge").expect("fake node");
    let expected = expected("p5.48xlarge");
    let mut observed =
        observe_with_traffic(&Sysfs::new(node.root()), expected.layout.as_ref(), Duration::from_millis(10), not_checked, || Some(traffic));
    edit(&mut observed);
    let report = Report::new("node", &expected, &observed);
    assert!(report.traffic.is_some(), "the report carries what the write found");
    // A healthy tree: nothing else is wrong, but for a NIC off its rail where `edit` put one.
    let others: Vec<&Finding> =
        report.findings.iter().filter(|f| !matches!(f.rule, Rule::Traffic | Rule::Rails) && f.status == Status::Problem).collect();
    assert!(others.is_empty(), "{others:#?}");
    report.findings.into_iter().filter(|f| f.rule == Rule::Traffic).collect()
}

#[test]
fn traffic_names_a_slow_nic_a_slow_pair_and_how_a_write_failed() {
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::write(dir.path(), "p5.48xlarge").unwrap();
    let slow = |nic: &str, with: Option<(String, usize)>| SlowNic { rank: 0, nic: nic.into(), with, gbps: 12.0, median_gbps: 96.0 };
    let verified = TrafficOutcome::Verified {
        slow: vec![slow("rdmap80s0-rdm", None), slow("rdmap81s0-rdm", Some(("rdmap97s0-rdm".into(), 1)))],
    };
    assert_eq!(
        traffic_findings(efa_traffic(&node, verified), |_| {}),
        [
            (Status::Problem, "rdmap80s0".into(), "rdmap80s0 slow 12.0 of 96.0 Gbps (efa)".into()),
            (Status::Problem, "rdmap81s0".into(), "rdmap81s0 to rdmap97s0 slow 12.0 of 96.0 Gbps (efa)".into()),
        ]
    );
    let corrupt = TrafficOutcome::Corrupt {
        receiver: 1,
        sender: 0,
        nic: "rdmap97s0-rdm".into(),
        from_nic: Some("rdmap80s0-rdm".into()),
        detail: "offset 8: expected 0x01, found 0x00".into(),
    };
    assert_eq!(
        traffic_findings(efa_traffic(&node, corrupt), |_| {}),
        [(Status::Problem, "rdmap97s0".into(), "rdmap97s0 corrupt write from rdmap80s0 (efa)".into())]
    );
    for (outcome, want) in [
        (TrafficOutcome::TimedOut { after_s: 20.0 }, (Status::Problem, "write via efa hung (20 s)")),
        (TrafficOutcome::Failed { why: "rank 1 (node) exited mid-run".into() }, (Status::Problem, "write via efa failed: rank 1 (node) exited mid-run")),
        (TrafficOutcome::NotRun { why: "no efa provider".into() }, (Status::Unknown, "write via efa not run: no efa provider")),
    ] {
        let found = traffic_findings(efa_traffic(&node, outcome), |_| {});
        assert_eq!(found, [(want.0, String::new(), want.1.to_string())]);
    }
}

#[test]
fn traffic_on_efa_names_a_nic_whose_counters_did_not_grow_once() {
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::write(dir.path(), "p5.48xlarge").unwrap();
    let devices: Vec<String> = node.efa().iter().map(|(name, _)| name.clone()).collect();
    let moved = |quiet: &[&str]| -> Vec<NicBytes> {
        devices.iter().map(|nic| NicBytes { nic: nic.clone(), bytes: if quiet.contains(&nic.as_str()) { 0 } else { 80 << 20 } }).collect()
    };
    // The counters are this machine's only: read under `/`.
    let here = |quiet: &'static [&'static str], off: Option<&'static str>| {
        let moved = moved(quiet);
        move |observed: &mut Observed| {
            observed.root = "/".into();
            observed.moved = moved;
            if let Some(nic) = off {
                observed.rails.push(efatop_sweep::rails::RailLoad {
                    host: "node".into(),
                    nic: nic.into(),
                    gpu: 0,
                    rail: 2,
                    gbps: 0.0,
                    rail_median_gbps: 1.0,
                    ratio: Some(0.0),
                    off: true,
                });
            }
        }
    };
    let verified = || efa_traffic(&node, TrafficOutcome::Verified { slow: Vec::new() });
    let found = traffic_findings(verified(), here(&["rdmap81s0", "rdmap150s0"], None));
    // rdmap150s0 is no channel of this write (GPU 4's): not blamed.
    assert_eq!(found, [(Status::Problem, "rdmap81s0".into(), "rdmap81s0 moved no bytes (efa)".into())]);
    // The rail check already names it: once is enough.
    let found = traffic_report(verified(), here(&["rdmap81s0"], Some("rdmap81s0")));
    assert_eq!(found.iter().map(|f| f.status).collect::<Vec<_>>(), [Status::Ok], "{found:?}");
    assert!(!found[0].message.contains("counters grew"), "{}", found[0].message);
    let found = traffic_report(verified(), here(&[], None));
    assert_eq!(found.iter().map(|f| (f.status, f.short.as_str())).collect::<Vec<_>>(), [(Status::Ok, "traffic via efa ok")]);
    assert!(found[0].message.contains("; every NIC's counters grew"), "{}", found[0].message);
}

#[test]
fn traffic_ok_says_what_carried_it_and_what_that_proves() {
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::write(dir.path(), "p5.48xlarge").unwrap();
    let expected = expected("p5.48xlarge");
    for (provider, stack, proves) in [("efa", "efa", false), ("tcp", "tcp;ofi_rxm", true), ("shm", "shm", true)] {
        let mut traffic = efa_traffic(&node, TrafficOutcome::Verified { slow: Vec::new() });
        traffic.provider = provider.into();
        traffic.stack = Some(stack.into());
        traffic.carrier = Carrier::of(stack);
        let observed =
            observe_with_traffic(&Sysfs::new(node.root()), expected.layout.as_ref(), Duration::from_millis(10), not_checked, || Some(traffic));
        let report = Report::new("node", &expected, &observed);
        let finding = report.findings.iter().find(|f| f.rule == Rule::Traffic).expect("a traffic finding");
        assert_eq!(finding.status, Status::Ok, "{finding:?}");
        assert!(finding.message.starts_with(&format!("via {stack}: 2 ranks wrote 4 MiB x 4 each way through 8 NICs, every byte verified")), "{}", finding.message);
        assert_eq!(finding.message.contains("not the NICs"), proves, "{}", finding.message);
    }
    // Without --traffic there is no traffic finding at all.
    let (_, report) = check(&node, Duration::from_millis(10), false, not_checked());
    assert!(report.findings.iter().all(|f| f.rule != Rule::Traffic) && report.traffic.is_none());
}

/// The GPU Xid findings of `observed` with its kernel log read again (after the test wrote to it).
fn xid_report(node: &FakeNode, observed: &mut Observed, limits: efatop_node::xid::Limits) -> Report {
    observed.xids = efatop_node::xid::read_with(node.root(), limits);
    Report::new("node", &expected(node.instance_type()), observed)
}

fn xid_findings(report: &Report) -> Vec<&Finding> {
    report.findings.iter().filter(|f| f.rule == Rule::GpuXid).collect()
}

/// A test per row of NVIDIA's Xid catalog (node/data/xid-catalog.csv): one record of that Xid on GPU 3 of a
/// fake p5 is that row's action, by the rule, about GPU 3; an Xid whose action is none is not a problem.
#[test]
fn every_xid_of_the_catalog_gets_its_rows_action() {
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::write(dir.path(), "p5.48xlarge").unwrap();
    let log = dir.path().join("dev/kmsg");
    let clean = std::fs::read_to_string(&log).unwrap();
    let (_, address) = node.victim_gpu();
    let (mut observed, _) = check(&node, Duration::from_millis(20), false, not_checked());
    let catalog = efatop_node::xid::catalog();
    assert_eq!(catalog.len(), 172);
    for kind in catalog {
        std::fs::write(&log, &clean).unwrap();
        node.log_xid(&address, kind.xid).unwrap();
        let report = xid_report(&node, &mut observed, efatop_node::xid::Limits::default());
        let findings = xid_findings(&report);
        // 154's record (the fake driver's) names a GPU reset.
        let want = kind.action.unwrap_or(efatop_proto::action::Action::Reset);
        assert_eq!(findings.len(), 1, "Xid {}: {findings:#?}", kind.xid);
        let finding = findings[0];
        if want == efatop_proto::action::Action::None {
            assert_eq!((finding.status, report.status), (Status::Ok, Status::Ok), "Xid {}: {finding:#?}", kind.xid);
            assert!(finding.message.contains(&format!("Xid {}", kind.xid)), "told, not judged: {}", finding.message);
        } else {
            assert_eq!((finding.status, finding.action), (Status::Problem, want), "Xid {} ({}): {finding:#?}", kind.xid, kind.bucket);
            assert_eq!((finding.subject.as_deref(), finding.short.as_str()), (Some("GPU 3"), format!("GPU 3 Xid {}", kind.xid).as_str()));
            assert!(finding.action_reason.contains(&format!("Xid {}", kind.xid)), "{}", finding.action_reason);
        }
    }
}

/// 12,000 × Xid 31 on GPU 0, then Xid 79 on GPU 1: every GPU is named with its counts, and the node's
/// action is the worst (79's), not the first N events'.
#[test]
fn a_flood_of_one_xid_does_not_hide_a_worse_one_on_another_gpu() {
    use efatop_proto::action::Action;
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::write(dir.path(), "p5.48xlarge").unwrap();
    let layout = efatop_topology::instance_layout("p5.48xlarge").unwrap().unwrap();
    node.log_xids(&layout.gpus[0].pci_bus_id, 31, 12_000).unwrap();
    node.log_xid(&layout.gpus[1].pci_bus_id, 79).unwrap();
    let (_, report) = check(&node, Duration::from_millis(20), false, not_checked());
    let findings = xid_findings(&report);
    let named: Vec<(Option<&str>, Action)> = findings.iter().map(|f| (f.subject.as_deref(), f.action)).collect();
    assert_eq!(named, [(Some("GPU 0"), Action::Watch), (Some("GPU 1"), Action::Reboot)], "{findings:#?}");
    assert!(findings[0].message.contains("Xid 31 x12000 ("), "{}", findings[0].message);
    assert_eq!(report.action, Action::Reboot);
    assert!(report.action_reason.starts_with("GPU 1 Xid 79: "), "{}", report.action_reason);
}

/// Only Xids since the NVIDIA driver last loaded count: a 79 before a driver reload is history (the node is
/// fine again, so `--drain` may resume it); a 79 after it again is `replace`.
#[test]
fn xids_before_the_driver_reloaded_are_history_and_79_again_is_replace() {
    use efatop_proto::action::Action;
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::write(dir.path(), "p6e-gb200.36xlarge").unwrap();
    let (name, address) = node.victim_gpu();
    node.log_xid(&address, 79).unwrap();
    let (mut observed, report) = check(&node, Duration::from_millis(20), false, not_checked());
    assert_eq!((report.status, report.action), (Status::Problem, Action::Reboot), "{:#?}", report.findings);
    node.log_driver_load().unwrap();
    let report = xid_report(&node, &mut observed, efatop_node::xid::Limits::default());
    assert_eq!((report.status, report.action), (Status::Ok, Action::None), "{:#?}", report.findings);
    let finding = xid_findings(&report)[0];
    assert!(
        finding.message.contains("since the NVIDIA driver loaded") && finding.message.contains("(history, not judged): GPU 3 Xid 79"),
        "{}",
        finding.message
    );
    node.log_xid(&address, 145).unwrap();
    node.log_xid(&address, 79).unwrap();
    let report = xid_report(&node, &mut observed, efatop_node::xid::Limits::default());
    let findings = xid_findings(&report);
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!((findings[0].subject.as_deref(), findings[0].action), (Some(name.as_str()), Action::Replace));
    assert_eq!(findings[0].short, "GPU 3 Xid 79,145");
    assert!(findings[0].action_reason.contains("recurs after the driver reloaded"), "{}", findings[0].action_reason);
}

/// A log not read to its end is unknown, unless a fault was found in what was read, which stays a fault.
#[test]
fn a_log_not_read_to_its_end_is_unknown_unless_a_fault_was_found() {
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::write(dir.path(), "p5.48xlarge").unwrap();
    let limits = efatop_node::xid::Limits { records: 2, ..Default::default() };
    let (mut observed, _) = check(&node, Duration::from_millis(20), false, not_checked());
    node.log_xid(&node.victim_gpu().1, 31).unwrap();
    let report = xid_report(&node, &mut observed, limits);
    assert_eq!(report.status, Status::Unknown, "{:#?}", report.findings);
    assert_eq!(xid_findings(&report)[0].short, "kernel log not read to its end");
    assert!(xid_findings(&report)[0].message.contains("stopped at 2 records"), "{}", xid_findings(&report)[0].message);
    // The fault first, then more than the limit lets be read.
    std::fs::write(dir.path().join("dev/kmsg"), "").unwrap();
    node.log_xid(&node.victim_gpu().1, 79).unwrap();
    node.log_xids(&node.victim_gpu().1, 13, 5).unwrap();
    let report = xid_report(&node, &mut observed, limits);
    assert_eq!((report.status, report.action), (Status::Problem, efatop_proto::action::Action::Reboot), "{:#?}", report.findings);
    assert!(xid_findings(&report)[0].message.contains("the log was read only in part (stopped at 2 records)"));
}
