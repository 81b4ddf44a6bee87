//! `efatop check` as a program, on fake p5, p5e, p5en, p4d, p4de, p6-b200, p6-b300 and p6e-gb200 nodes (`efatop_node::FakeNode`, what
//! `scripts/fixtures/make-fake-sysfs --type` writes): for every fault planted (a missing NIC, a port down,
//! `impaired_remote_conn_events` rising during the window, a NIC on the wrong NUMA node, memlock too low)
//! and every format (table, JSON, NHC, node-problem-detector, Slurm), exactly that fault is named, about
//! the thing it broke, with its action and exit code 1; a healthy node names nothing, action `none`, exit
//! 0. The same for a GPU's and an EFA's PCIe link trained at x8 of x16, and one Xid of each class of
//! NVIDIA's catalog in the kernel log.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{efatop, report_of};
use efatop_node::{FakeNode, Fault};
use serde_json::Value;

const TYPES: [&str; 8] = [
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p6-b200.48xlarge",
    "p6-b300.48xlarge",
    "p6e-gb200.36xlarge",
];
const FORMATS: [&str; 5] = ["table", "json", "nhc", "npd", "slurm"];

/// What each fault's one-line form must say besides the thing it broke.
fn words(fault: Fault) -> &'static str {
    match fault {
        Fault::MissingNic => "missing",
        Fault::PortDown => "port 1 DOWN",
        Fault::ImpairedRising => "impaired_remote_conn_events +",
        Fault::WrongNuma => "on NUMA",
        Fault::LowMemlock => "memlock 64 KiB, not unlimited",
        Fault::GpuLinkX8 | Fault::EfaLinkX8 => "PCIe x8 of x16",
        Fault::Xid(_) => "Xid",
    }
}

/// The action each fault calls for on `instance_type` (docs/check.md).
fn action(fault: Fault, instance_type: &str) -> &'static str {
    match fault {
        // x8 of a Gen4 or Gen5 x16 is 126 or 252 Gbps: a 100 or 200 Gbps EFA still fits, a 400 Gbps one does not.
        Fault::EfaLinkX8 if instance_type.starts_with("p6-b") => "reboot",
        Fault::ImpairedRising | Fault::EfaLinkX8 | Fault::Xid(13 | 31 | 43 | 94) => "watch",
        Fault::MissingNic | Fault::PortDown | Fault::LowMemlock | Fault::GpuLinkX8 | Fault::Xid(119) => "reboot",
        Fault::WrongNuma | Fault::Xid(79) => "replace",
        Fault::Xid(48 | 95) => "reset",
        Fault::Xid(other) => unreachable!("no expectation for Xid {other}"),
    }
}

fn rule(fault: Fault) -> &'static str {
    match fault {
        Fault::MissingNic => "efa-devices",
        Fault::PortDown => "efa-ports",
        Fault::ImpairedRising => "efa-counters",
        Fault::WrongNuma => "numa",
        Fault::LowMemlock => "memlock",
        Fault::GpuLinkX8 | Fault::EfaLinkX8 => "pcie-link",
        Fault::Xid(_) => "gpu-xid",
    }
}

/// Runs `efatop check --format FORMAT` on `node`; with `rising`, the victim's impaired counter grows
/// every 10 ms while it runs.
fn check(node: &FakeNode, format: &str, rising: bool) -> common::Run {
    let root = node.root().to_str().expect("utf-8").to_string();
    let window = if rising { "500ms" } else { "100ms" };
    let stop = Arc::new(AtomicBool::new(false));
    let bumper = rising.then(|| {
        let (node, stop) = (node.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                node.bump().expect("bump");
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    });
    let run = efatop(&["check", "--sysfs-root", &root, "--window", window, "--format", format]);
    stop.store(true, Ordering::Relaxed);
    if let Some(bumper) = bumper {
        bumper.join().expect("bumper");
    }
    run
}

/// Asserts that `run` (format `format`) names exactly one problem, by `rule`, about `subject`, saying
/// `words`; or, with `fault` `None`, nothing.
fn assert_names(run: &common::Run, format: &str, fault: Option<(Fault, &str)>, instance_type: &str, what: &str) {
    let named = fault.map(|(fault, subject)| Named { rule: rule(fault), subject, words: words(fault), action: action(fault, instance_type) });
    assert_flagged(run, format, named, what);
}

/// One problem as every format must show it: by `rule`, about `subject`, its short form saying `words`,
/// calling for `action`.
#[derive(Clone, Copy)]
struct Named<'a> {
    rule: &'a str,
    subject: &'a str,
    words: &'a str,
    action: &'a str,
}

/// Asserts that `run` (format `format`) names exactly `fault`, or nothing.
fn assert_flagged(run: &common::Run, format: &str, fault: Option<Named<'_>>, what: &str) {
    let context = format!("{what} --format {format}\nstdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    assert_eq!(run.code, Some(i32::from(fault.is_some())), "{context}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    match format {
        "table" => {
            let flagged: Vec<&str> =
                lines.iter().copied().filter(|l| l.starts_with("  ") && (l.contains(" PROBLEM ") || l.contains(" unknown "))).collect();
            let last = lines.last().copied().unwrap_or_default();
            match fault {
                None => {
                    assert!(flagged.is_empty(), "{context}");
                    assert_eq!(last, "ok: nothing wrong found", "{context}");
                }
                Some(Named { rule, subject, words, action }) => {
                    assert_eq!(flagged.len(), 1, "{context}");
                    assert!(flagged[0].trim_start().starts_with(rule) && flagged[0].contains(subject), "{context}");
                    assert!(flagged[0].contains(&format!(" {action} ")), "{context}");
                    assert!(last.starts_with(&format!("PROBLEM: 1 thing wrong: {action}: ")), "{context}");
                    assert!(last.contains(subject) && last.contains(words), "{context}");
                    let action_line = lines[lines.len() - 2];
                    assert!(action_line.starts_with(&format!("action: {action} (")), "{context}");
                }
            }
        }
        "json" => {
            assert_eq!(lines.len(), 1, "{context}");
            let report = report_of(lines[0]);
            let findings = report["findings"].as_array().expect("findings");
            let flagged: Vec<(&str, &str, &str)> = findings
                .iter()
                .filter(|f| f["status"] == "problem" || f["status"] == "unknown")
                .map(|f| (f["rule"].as_str().unwrap_or(""), f["subject"].as_str().unwrap_or(""), f["short"].as_str().unwrap_or("")))
                .collect();
            match fault {
                None => {
                    assert!(flagged.is_empty(), "{context}");
                    assert_eq!(report["status"], "ok", "{context}");
                    assert_eq!(report["action"], "none", "{context}");
                    assert!(findings.iter().all(|f| f["action"] == "none"), "{context}");
                }
                Some(Named { rule, subject, words, action }) => {
                    assert_eq!(flagged.len(), 1, "{context}");
                    assert_eq!((flagged[0].0, flagged[0].1), (rule, subject), "{context}");
                    assert!(flagged[0].2.contains(words), "{context}");
                    assert_eq!(report["status"], "problem", "{context}");
                    let finding = findings.iter().find(|f| f["status"] == "problem").expect("the problem");
                    assert_eq!(finding["action"], action, "{context}");
                    assert!(!finding["action_reason"].as_str().unwrap_or("").is_empty(), "{context}");
                    assert_eq!(report["action"], action, "{context}");
                    assert!(report["action_reason"].as_str().unwrap_or("").contains(subject), "{context}");
                    // Everything else is fine: no other action.
                    assert_eq!(findings.iter().filter(|f| f["action"] != "none").count(), 1, "{context}");
                }
            }
        }
        "npd" => {
            assert_eq!(lines.len(), 1, "{context}");
            assert!(lines[0].len() <= 80 && lines[0].is_ascii(), "{context}");
            match fault {
                None => assert!(lines[0].starts_with("efatop: ok: "), "{context}"),
                Some(Named { subject, words, action, .. }) => {
                    assert!(lines[0].starts_with(&format!("efatop: {action}: ")), "{context}");
                    assert!(lines[0].contains(subject) && lines[0].contains(words), "{context}");
                    assert!(!lines[0].contains(';') && !lines[0].contains("more)"), "one problem only: {context}");
                }
            }
        }
        "nhc" | "slurm" => {
            let prefix = if format == "nhc" { "check_efatop:  " } else { "efatop: " };
            match fault {
                None => assert!(run.stdout.is_empty(), "{context}"),
                Some(Named { subject, words, action, .. }) => {
                    assert_eq!(lines.len(), 1, "{context}");
                    let reason = lines[0].strip_prefix(prefix).unwrap_or_else(|| panic!("no {prefix:?}: {context}"));
                    assert!(reason.starts_with(&format!("{action}: ")), "{context}");
                    assert!(reason.contains(subject) && reason.contains(words) && !reason.contains(';'), "{context}");
                }
            }
        }
        other => unreachable!("format {other}"),
    }
}

fn every_format(fault: Option<Fault>) {
    for instance_type in TYPES {
        let dir = tempfile::tempdir().expect("tempdir");
        let node = FakeNode::write(dir.path(), instance_type).expect("fake node");
        let subject = fault.map(|fault| node.plant(fault).expect("plant"));
        for format in FORMATS {
            let run = check(&node, format, fault == Some(Fault::ImpairedRising));
            let what = format!("{instance_type} {}", fault.map_or_else(|| "healthy".to_string(), Fault::name));
            assert_names(&run, format, fault.zip(subject.as_deref()), instance_type, &what);
        }
    }
}

#[test]
fn a_healthy_node_names_nothing_in_any_format() {
    every_format(None);
}

#[test]
fn a_missing_nic_is_named_in_every_format() {
    every_format(Some(Fault::MissingNic));
}

#[test]
fn a_port_down_is_named_in_every_format() {
    every_format(Some(Fault::PortDown));
}

#[test]
fn impaired_remote_connections_rising_are_named_in_every_format() {
    every_format(Some(Fault::ImpairedRising));
}

#[test]
fn a_nic_on_the_wrong_numa_node_is_named_in_every_format() {
    every_format(Some(Fault::WrongNuma));
}

#[test]
fn memlock_too_low_is_named_in_every_format() {
    every_format(Some(Fault::LowMemlock));
}

#[test]
fn a_gpu_link_trained_at_x8_is_named_in_every_format() {
    every_format(Some(Fault::GpuLinkX8));
}

#[test]
fn an_efa_link_trained_at_x8_is_named_in_every_format() {
    every_format(Some(Fault::EfaLinkX8));
}

#[test]
fn one_xid_of_each_class_is_named_with_the_catalogs_action_in_every_format() {
    for xid in Fault::XID_CLASSES {
        every_format(Some(Fault::Xid(xid)));
    }
}

/// A GPU and a NIC failing together: on a fake p5, Xid 79 logged for GPU 3 and EFA rdmap80s0 trained at x8 of
/// x16. JSON names both, `replace` for the GPU (with its PCI address and the NICs behind its switch) and
/// the NIC's own action, `replace` for the node; the NPD line fits 80 characters and exits 1; the Slurm
/// reason names both. The same node healthy says `none` and exits 0.
#[test]
fn a_p5_with_xid_79_on_gpu_3_and_an_efa_at_x8_is_replace_and_names_both() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = FakeNode::write(dir.path(), "p5.48xlarge").expect("fake p5");
    let healthy = check(&node, "json", false);
    assert_eq!(healthy.code, Some(0), "{}{}", healthy.stdout, healthy.stderr);
    let report = report_of(healthy.stdout.trim());
    assert_eq!((report["status"].as_str(), report["action"].as_str()), (Some("ok"), Some("none")));
    let layout = efatop_topology::instance_layout("p5.48xlarge").expect("known").expect("loads");
    let gpu3 = layout.gpus.iter().find(|gpu| gpu.index == 3).expect("GPU 3").pci_bus_id.clone();
    node.log_xid(&gpu3, 79).expect("log Xid 79");
    assert_eq!(node.plant(Fault::EfaLinkX8).expect("plant"), "rdmap80s0");

    let run = check(&node, "json", false);
    assert_eq!(run.code, Some(1), "{}{}", run.stdout, run.stderr);
    let report = report_of(run.stdout.trim());
    let data = &report;
    assert_eq!(data["action"], "replace", "{data}");
    let problems: Vec<&Value> = data["findings"].as_array().expect("findings").iter().filter(|f| f["status"] == "problem").collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    let gpu = problems.iter().find(|f| f["rule"] == "gpu-xid").expect("the Xid finding");
    assert_eq!((gpu["subject"].as_str(), gpu["action"].as_str()), (Some("GPU 3"), Some("replace")), "{gpu}");
    let message = gpu["message"].as_str().expect("message");
    // Named by index and PCI address, with the NICs of its PCIe switch (GPU 3's: rdmap130s0..rdmap133s0).
    assert!(message.contains(&gpu3) && message.contains("Xid 79") && message.contains("rdmap130s0, rdmap131s0, rdmap132s0, rdmap133s0"), "{message}");
    assert!(gpu["action_reason"].as_str().expect("reason").contains("fallen off the bus"), "{gpu}");
    let nic = problems.iter().find(|f| f["rule"] == "pcie-link").expect("the link finding");
    assert_eq!((nic["subject"].as_str(), nic["action"].as_str()), (Some("rdmap80s0"), Some("watch")), "{nic}");
    let message = nic["message"].as_str().expect("message");
    assert!(message.contains("x8 16 GT/s of x16 16 GT/s") && message.contains("126 Gbps less"), "{message}");

    let npd = check(&node, "npd", false);
    assert_eq!(npd.code, Some(1));
    let npd_line = npd.stdout.trim_end();
    assert!(npd_line.len() <= 80 && npd.stdout.lines().count() == 1, "{npd_line}");
    assert_eq!(npd_line, "efatop: replace: GPU 3 Xid 79; watch: rdmap80s0 PCIe x8 of x16");
    let slurm = check(&node, "slurm", false);
    assert_eq!(slurm.code, Some(1));
    assert_eq!(slurm.stdout, "efatop: replace: GPU 3 Xid 79; watch: rdmap80s0 PCIe x8 of x16\n");
    let table = check(&node, "table", false);
    assert!(table.stdout.contains("action: replace (GPU 3 Xid 79: "), "{}", table.stdout);
}

/// The newer EFA driver's device counters (on the EFA v3/v4 fake nodes) are read and watched: one growing
/// during the window is named, in JSON and in the one-line formats, with the type's expectations met.
#[test]
fn the_newer_drivers_counters_are_watched_on_efa_v3_and_v4_nodes() {
    for instance_type in ["p5en.48xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge", "p6e-gb200.36xlarge"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let node = FakeNode::write(dir.path(), instance_type).expect("fake node");
        let victim = node.victim();
        let root = node.root().to_str().expect("utf-8").to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let bumper = {
            let (node, stop, victim) = (node.clone(), stop.clone(), victim.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    node.counters().advance(&victim, "alloc_mr_err", 1).expect("advance");
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        let run = efatop(&["check", "--sysfs-root", &root, "--window", "500ms", "--format", "json"]);
        stop.store(true, Ordering::Relaxed);
        bumper.join().expect("bumper");
        assert_eq!(run.code, Some(1), "{instance_type}: {}\n{}", run.stdout, run.stderr);
        let report = report_of(run.stdout.trim());
        let problems: Vec<&Value> =
            report["findings"].as_array().expect("findings").iter().filter(|f| f["status"] == "problem").collect();
        assert_eq!(problems.len(), 1, "{instance_type}: {problems:?}");
        assert_eq!(problems[0]["rule"], "efa-counters", "{instance_type}");
        let message = problems[0]["message"].as_str().expect("message");
        assert!(message.contains(&victim) && message.contains("alloc_mr_err +"), "{instance_type}: {message}");
    }
}

#[test]
fn several_faults_fit_one_npd_line_worst_first_and_the_rest_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = FakeNode::write(dir.path(), "p5.48xlarge").expect("fake node");
    for fault in [Fault::PortDown, Fault::WrongNuma, Fault::LowMemlock] {
        node.plant(fault).expect("plant");
    }
    // Two more NICs down: five problems in all.
    for device in ["rdmap81s0", "rdmap82s0"] {
        std::fs::write(dir.path().join("sys/class/infiniband").join(device).join("ports/1/state"), "1: DOWN\n").expect("write");
    }
    let run = check(&node, "npd", false);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let line = run.stdout.trim_end();
    assert!(line.len() <= 80, "{line}");
    // Strongest action first: the NIC on the wrong NUMA node (replace), then the ports down and memlock (reboot).
    assert_eq!(line, "efatop: replace: rdmap80s0 on NUMA 1, not 0 (+4 more)");
    let slurm = check(&node, "slurm", false);
    assert_eq!(
        slurm.stdout,
        "efatop: replace: rdmap80s0 on NUMA 1, not 0; reboot: rdmap80s0 port 1 DOWN; rdmap81s0 port 1 DOWN; rdmap82s0 port 1 DOWN; \
         memlock 64 KiB, not unlimited\n"
    );
}

#[test]
fn this_machine_is_checked_within_30_seconds_and_says_how_it_stands() {
    let run = efatop(&["check", "--json"]);
    assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
    let report = report_of(run.stdout.trim());
    let status = report["status"].as_str().expect("status");
    let code = match status {
        "ok" => 0,
        "problem" => 1,
        _ => 2,
    };
    assert_eq!(run.code, Some(code), "{}", run.stdout);
    let libfabric = report["findings"].as_array().expect("findings").iter().find(|f| f["rule"] == "libfabric").cloned();
    let libfabric = libfabric.expect("a libfabric finding");
    assert!(libfabric["message"].as_str().unwrap_or("").contains("libfabric "), "libfabric is asked on this machine: {libfabric}");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    for (args, says) in [
        (vec!["check", "--instance-type", "m7i.large"], "--instance-type m7i.large: no built-in layout"),
        (vec!["check", "--drain"], "--drain: only with --format slurm"),
        (vec!["check", "--sysfs-root", "/nonexistent/efatop"], "--sysfs-root /nonexistent/efatop: not a directory"),
        (vec!["check", "--window", "30s"], "too long a window"),
    ] {
        let run = efatop(&args);
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.stderr);
        assert_eq!(run.stderr.lines().count(), 1, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
    }
}

/// `efatop check --traffic` on a healthy fake node (the rules read the tree; the write runs on this machine,
/// between two ranks, with `provider`) in `format`, corrupting one byte when asked.
fn check_traffic(node: &FakeNode, provider: &str, format: &str, corrupt: bool) -> common::Run {
    let root = node.root().to_str().expect("utf-8").to_string();
    let mut args = vec!["check", "--sysfs-root", &root, "--window", "100ms", "--traffic", "--provider", provider, "--format", format];
    if corrupt {
        args.extend(["--debug-corrupt-byte", "1000"]);
    }
    efatop(&args)
}

/// The `traffic` finding of a `--json` run, and its `traffic` record.
fn traffic_of(run: &common::Run) -> (Value, Value) {
    let report = report_of(run.stdout.trim());
    let finding = report["findings"].as_array().expect("findings").iter().find(|f| f["rule"] == "traffic").cloned();
    (finding.unwrap_or_else(|| panic!("no traffic finding: {}", run.stdout)), report["traffic"].clone())
}

#[test]
fn traffic_over_tcp_and_shm_passes_on_a_healthy_node_and_says_what_carried_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = FakeNode::write(dir.path(), "p5.48xlarge").expect("fake node");
    for (provider, stack, carrier) in [("tcp", "tcp;ofi_rxm", "loopback"), ("shm", "shm", "shared_memory")] {
        for format in FORMATS {
            let run = check_traffic(&node, provider, format, false);
            assert_flagged(&run, format, None, &format!("healthy --traffic --provider {provider}"));
            let context = format!("--provider {provider} --format {format}\n{}\n{}", run.stdout, run.stderr);
            match format {
                "table" => {
                    let row = run.stdout.lines().find(|l| l.trim_start().starts_with("traffic ")).unwrap_or_else(|| panic!("{context}"));
                    assert!(row.contains(" ok ") && row.contains(&format!("via {stack}: 2 ranks")), "{context}");
                    assert!(row.contains("every byte verified") && row.contains("not the NICs"), "{context}");
                    assert!(run.stdout.lines().next().unwrap_or_default().ends_with(&format!("traffic via {stack}")), "{context}");
                }
                "json" => {
                    let (finding, traffic) = traffic_of(&run);
                    assert_eq!(finding["status"], "ok", "{context}");
                    assert_eq!((traffic["provider"].as_str(), traffic["stack"].as_str()), (Some(provider), Some(stack)), "{context}");
                    assert_eq!(traffic["carrier"], carrier, "{context}");
                    assert_eq!(traffic["outcome"]["state"], "verified", "{context}");
                    let channels = traffic["channels"].as_array().expect("channels");
                    assert!(channels.len() >= 2 && channels.iter().all(|c| c["best_gbps"].as_f64().is_some_and(|g| g > 0.0)), "{context}");
                }
                "npd" => assert!(run.stdout.trim_end().ends_with(&format!("traffic via {provider} (not NICs)")), "{context}"),
                _ => {}
            }
        }
    }
}

#[test]
fn a_corrupt_write_names_its_nic_and_provider_in_every_format() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = FakeNode::write(dir.path(), "p5.48xlarge").expect("fake node");
    // The sweep's first round has rank 0 write rank 1: the first channel rank 1 verifies is its channel 0.
    let json = check_traffic(&node, "tcp", "json", true);
    let (finding, traffic) = traffic_of(&json);
    let nic = traffic["channels"].as_array().expect("channels").iter().find(|c| c["rank"] == 1 && c["channel"] == 0).expect("rank 1 channel 0")["nic"]
        .as_str()
        .expect("nic")
        .to_string();
    assert_eq!(traffic["outcome"]["state"], "corrupt", "{}", json.stdout);
    assert_eq!((traffic["outcome"]["receiver"].as_u64(), traffic["outcome"]["sender"].as_u64()), (Some(1), Some(0)), "{}", json.stdout);
    assert!(finding["message"].as_str().unwrap_or("").contains("via tcp;ofi_rxm: offset 1000: expected"), "{finding}");
    let words = format!("corrupt write from {nic} (tcp)");
    for format in FORMATS {
        let run = check_traffic(&node, "tcp", format, true);
        assert_flagged(&run, format, Some(Named { rule: "traffic", subject: &nic, words: &words, action: "reboot" }), "--traffic with a corrupt byte");
    }
}

#[test]
fn traffic_on_this_machine_stays_within_30_seconds() {
    let run = efatop(&["check", "--json", "--traffic", "--provider", "tcp"]);
    assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
    let (finding, traffic) = traffic_of(&run);
    assert_eq!(finding["status"], "ok", "{}\n{}", run.stdout, run.stderr);
    assert!(finding["message"].as_str().unwrap_or("").contains("this proves efatop's path, not the NICs"), "{finding}");
    assert!(traffic["seconds"].as_f64().is_some_and(|s| s < 20.0), "{traffic}");
}

#[test]
fn traffic_flags_are_checked() {
    for (args, says) in [
        (vec!["check", "--provider", "tcp"], "--provider"),
        (vec!["check", "--traffic", "--provider", "auto"], "--provider"),
        (vec!["check", "--traffic", "--provider", "no such!"], "--provider"),
        (vec!["check", "--debug-corrupt-byte", "3"], "--debug-corrupt-byte"),
    ] {
        let run = efatop(&args);
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.stderr);
        assert_eq!(run.stderr.lines().count(), 1, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{args:?}: {}", run.stdout);
    }
}
