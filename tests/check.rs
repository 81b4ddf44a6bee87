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

use common::efatop;
use efatop_testkit::report_of;
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
        Fault::GpuLinkDown | Fault::EfaLinkDown => "PCIe link down",
        Fault::Xid(_) => "Xid",
    }
}

/// The action each fault calls for on `instance_type` (docs/check.md).
fn action(fault: Fault, instance_type: &str) -> &'static str {
    match fault {
        // x8 of a Gen4 or Gen5 x16 is 126 or 252 Gbps: a 100 or 200 Gbps EFA still fits, a 400 Gbps one does not.
        Fault::EfaLinkX8 if instance_type.starts_with("p6-b") => "reboot",
        Fault::ImpairedRising | Fault::EfaLinkX8 | Fault::Xid(13 | 31 | 94) => "watch",
        Fault::MissingNic | Fault::PortDown | Fault::LowMemlock | Fault::GpuLinkX8 | Fault::GpuLinkDown | Fault::EfaLinkDown | Fault::Xid(79) => {
            "reboot"
        }
        Fault::WrongNuma | Fault::Xid(54) => "replace",
        Fault::Xid(48 | 95 | 119 | 145 | 154) => "reset",
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
        Fault::GpuLinkX8 | Fault::EfaLinkX8 | Fault::GpuLinkDown | Fault::EfaLinkDown => "pcie-link",
        Fault::Xid(_) => "gpu-xid",
    }
}

/// A temporary directory for a fake node, on tmpfs (`/dev/shm`) where there is one: a fake tree is
/// thousands of small files, written here in 0.6 s on tmpfs against 2.5 s on the loaded CI machine's disk,
/// and a counter that a test rewrites during a check's window (write, then rename) never waits there on a
/// file system's journal behind other programs' writes.
fn node_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("efatop-check-")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("a temporary directory")
}

/// Runs `efatop check --format FORMAT` on `node`; with `rising`, the victim's impaired counter grows
/// every 10 ms while it runs.
fn check(node: &FakeNode, format: &'static str, rising: bool) -> common::Run {
    in_formats(node, &[format], rising).pop().expect("one run").1
}

/// Runs `efatop check` on `node` in each of `formats`, all at once, in their order. Each run is a process
/// that mostly waits, to be loaded and on its window (100 ms; 2 s, check's default, with `rising`), and
/// the runs of one node are independent: one after another, this file's thousand-odd runs were most of its 11 minutes on
/// the loaded 2-core CI machine (docs/testing.md). With `rising`, one thread grows the victim's impaired
/// counter every 10 ms while they run (one, so that the counter only ever grows: two bumpers could write
/// it back).
/// A format's run, joined: its panic (its two-minute limit, a write) said again with the format. Resumed as
/// it was, a panic reached the harness without its message once (a fresh-clone run at load 10).
fn joined(format: &str, run: std::thread::ScopedJoinHandle<'_, common::Run>) -> common::Run {
    run.join().unwrap_or_else(|panic| {
        let why = panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()));
        panic!("efatop check --format {format}: {}", why.unwrap_or_else(|| "panicked".into()))
    })
}

fn in_formats(node: &FakeNode, formats: &[&'static str], rising: bool) -> Vec<(&'static str, common::Run)> {
    let root = node.root().to_str().expect("utf-8").to_string();
    // Rising: check's default window, so that the bumper has two seconds to be seen.
    let window = if rising { "2s" } else { "100ms" };
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
    let runs = std::thread::scope(|scope| {
        let started: Vec<_> = formats
            .iter()
            .map(|&format| {
                let root = root.as_str();
                (format, scope.spawn(move || efatop(&["check", "--sysfs-root", root, "--window", window, "--format", format])))
            })
            .collect();
        started.into_iter().map(|(format, run)| (format, joined(format, run))).collect()
    });
    stop.store(true, Ordering::Relaxed);
    if let Some(bumper) = bumper {
        bumper.join().expect("bumper");
    }
    runs
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
    // node-problem-detector's OK for a problem that only calls for watching: its NonOK cordons.
    let code = match fault {
        None => 0,
        Some(Named { action: "watch", .. }) if format == "npd" => 0,
        Some(_) => 1,
    };
    assert_eq!(run.code, Some(code), "{context}");
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

/// `fault` (or nothing) planted on a node of every type, checked in every format. The types' nodes are
/// written and checked each on a thread of its own, but for a rising counter: one type at a time, so that
/// its bumper (every 10 ms) is never crowded out of the window by 40 processes.
fn every_format(fault: Option<Fault>) {
    let rising = fault == Some(Fault::ImpairedRising);
    let one_type = |instance_type: &'static str| {
        let dir = node_dir();
        let node = FakeNode::write(dir.path(), instance_type).expect("fake node");
        let subject = fault.map(|fault| node.plant(fault).expect("plant"));
        for (format, run) in in_formats(&node, &FORMATS, rising) {
            let what = format!("{instance_type} {}", fault.map_or_else(|| "healthy".to_string(), Fault::name));
            assert_names(&run, format, fault.zip(subject.as_deref()), instance_type, &what);
        }
    };
    if rising {
        TYPES.into_iter().for_each(one_type);
        return;
    }
    std::thread::scope(|scope| {
        let types: Vec<_> = TYPES.into_iter().map(|instance_type| scope.spawn(move || one_type(instance_type))).collect();
        for checked in types {
            checked.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        }
    });
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
fn a_gpu_link_down_is_named_in_every_format() {
    every_format(Some(Fault::GpuLinkDown));
}

#[test]
fn an_efa_link_down_is_named_in_every_format() {
    every_format(Some(Fault::EfaLinkDown));
}

#[test]
fn one_xid_of_each_class_is_named_with_the_catalogs_action_in_every_format() {
    for xid in Fault::XID_CLASSES {
        every_format(Some(Fault::Xid(xid)));
    }
}

/// Runs `check` on `node` in every format (all at once: [`in_formats`]).
fn every_format_of(node: &FakeNode) -> Vec<(&'static str, common::Run)> {
    in_formats(node, &FORMATS, false)
}

/// Asserts that every format says `line` (`reboot: GPU 1 Xid 79; watch: GPU 0 Xid 31`), exit 1.
fn assert_problems_line(runs: &[(&str, common::Run)], line: &str, what: &str) {
    for (format, run) in runs {
        let context = format!("{what} --format {format}\nstdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
        assert_eq!(run.code, Some(1), "{context}");
        let count = line.split("; ").count();
        let want = match *format {
            "table" => format!("PROBLEM: {count} thing{} wrong: {line}", if count == 1 { "" } else { "s" }),
            "json" => continue,
            "nhc" => format!("check_efatop:  {line}"),
            _ => format!("efatop: {line}"),
        };
        assert_eq!(run.stdout.lines().last(), Some(want.as_str()), "{context}");
    }
}

/// Asserts that every format says the node could not be told, naming `short`, exit 2.
fn assert_unknown(runs: &[(&str, common::Run)], short: &str, what: &str) {
    for (format, run) in runs {
        let context = format!("{what} --format {format}\nstdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
        assert_eq!(run.code, Some(2), "{context}");
        match *format {
            "table" => assert_eq!(run.stdout.lines().last(), Some(format!("UNKNOWN: could not tell: {short}").as_str()), "{context}"),
            "json" => {
                let report = report_of(run.stdout.trim());
                assert_eq!(report["status"], "unknown", "{context}");
                let xid =
                    report["findings"].as_array().expect("findings").iter().find(|f| f["rule"] == "gpu-xid").cloned().expect("gpu-xid");
                assert_eq!((xid["status"].as_str(), xid["short"].as_str()), (Some("unknown"), Some(short)), "{context}");
            }
            "npd" => assert_eq!(run.stdout, format!("efatop: unknown: {short}\n"), "{context}"),
            _ => {
                assert!(run.stdout.is_empty(), "{context}");
                assert!(run.stderr.contains("could not tell") && run.stderr.contains(short), "{context}");
            }
        }
    }
}

/// 12,000 × Xid 31 on GPU 0, then Xid 79 on GPU 1, on every type: every format leads with 79's action and
/// names both GPUs; JSON counts all 12,000.
#[test]
fn a_flood_of_one_xid_does_not_hide_a_worse_one_in_any_format() {
    for instance_type in TYPES {
        let dir = node_dir();
        let node = FakeNode::write(dir.path(), instance_type).expect("fake node");
        let layout = efatop_topology::instance_layout(instance_type).expect("known").expect("loads");
        node.log_xids(&layout.gpus[0].pci_bus_id, 31, 12_000).expect("flood");
        node.log_xid(&layout.gpus[1].pci_bus_id, 79).expect("79");
        let runs = every_format_of(&node);
        let (first, second) = (layout.gpus[0].index, layout.gpus[1].index);
        assert_problems_line(&runs, &format!("reboot: GPU {second} Xid 79; watch: GPU {first} Xid 31"), instance_type);
        let report = report_of(runs[1].1.stdout.trim());
        assert_eq!(report["action"], "reboot", "{instance_type}");
        let xids: Vec<&Value> = report["findings"].as_array().expect("findings").iter().filter(|f| f["rule"] == "gpu-xid").collect();
        assert_eq!(xids.len(), 2, "{instance_type}: {xids:?}");
        assert!(xids[0]["message"].as_str().expect("message").contains("Xid 31 x12000 ("), "{instance_type}: {}", xids[0]);
    }
}

/// On every type, in every format: Xid 79 is reboot (NVIDIA's catalog: `RESTART_BM`); after the driver
/// reloaded (a reset) the node is healthy again, the 79 told as history; 79 again after that is replace.
#[test]
fn only_xids_since_the_driver_loaded_count_and_79_again_is_replace_in_every_format() {
    for instance_type in TYPES {
        let dir = node_dir();
        let node = FakeNode::write(dir.path(), instance_type).expect("fake node");
        let (gpu, address) = node.victim_gpu();
        node.log_xid(&address, 79).expect("79");
        assert_problems_line(&every_format_of(&node), &format!("reboot: {gpu} Xid 79"), instance_type);
        node.log_driver_load().expect("driver load");
        for (format, run) in every_format_of(&node) {
            assert_names(&run, format, None, instance_type, &format!("{instance_type} 79 then a driver load"));
            if format == "json" {
                let report = report_of(run.stdout.trim());
                let xid =
                    report["findings"].as_array().expect("findings").iter().find(|f| f["rule"] == "gpu-xid").cloned().expect("gpu-xid");
                assert!(xid["message"].as_str().expect("message").contains(&format!("(history, not judged): {gpu} Xid 79")), "{xid}");
            }
        }
        node.log_xid(&address, 79).expect("79 again");
        for (format, run) in every_format_of(&node) {
            let named = Named { rule: "gpu-xid", subject: &gpu, words: "Xid 79", action: "replace" };
            assert_flagged(&run, format, Some(named), &format!("{instance_type} 79, a driver load, 79"));
        }
    }
}

/// A kernel log that is not one (a FIFO, a directory, a link to itself, nothing) is unknown, exit 2, in every
/// format, on every type; the check does not wait on a FIFO.
#[test]
fn an_unreadable_kernel_log_is_unknown_exit_2_in_every_format() {
    for (at, instance_type) in TYPES.iter().enumerate() {
        let dir = node_dir();
        let node = FakeNode::write(dir.path(), instance_type).expect("fake node");
        let log = dir.path().join("dev/kmsg");
        std::fs::remove_file(&log).expect("remove");
        let what = match at % 4 {
            0 => {
                let made = std::process::Command::new("mkfifo").arg(&log).status().expect("mkfifo");
                assert!(made.success());
                "a FIFO, not the kernel log"
            }
            1 => {
                std::fs::create_dir(&log).expect("dir");
                "a directory, not the kernel log"
            }
            2 => {
                std::os::unix::fs::symlink("kmsg", &log).expect("link");
                "symbolic links"
            }
            _ => "No such file",
        };
        let runs = every_format_of(&node);
        assert_unknown(&runs, "kernel log unreadable", instance_type);
        let report = report_of(runs[1].1.stdout.trim());
        let xid = report["findings"].as_array().expect("findings").iter().find(|f| f["rule"] == "gpu-xid").cloned().expect("gpu-xid");
        assert!(xid["message"].as_str().expect("message").contains(what), "{instance_type}: {xid}");
        assert!(runs.iter().all(|(_, run)| run.elapsed < Duration::from_secs(30)));
    }
}

/// A log longer than a check reads (a million records) is unknown, exit 2, in every format; a fault found in
/// what was read stays a fault, exit 1.
#[test]
fn a_kernel_log_not_read_to_its_end_is_unknown_unless_a_fault_was_read() {
    let dir = node_dir();
    let node = FakeNode::write(dir.path(), "p6e-gb200.36xlarge").expect("fake node");
    let log = dir.path().join("dev/kmsg");
    let clean = std::fs::read_to_string(&log).expect("log");
    let noise = "6,3,5000,-;eth0: link up\n".repeat(1_000_001);
    std::fs::write(&log, format!("{clean}{noise}")).expect("write");
    assert_unknown(&every_format_of(&node), "kernel log not read to its end", "a million records");
    std::fs::write(&log, &clean).expect("write");
    let (gpu, address) = node.victim_gpu();
    node.log_xid(&address, 79).expect("79");
    let mut text = std::fs::read_to_string(&log).expect("log");
    text.push_str(&noise);
    std::fs::write(&log, text).expect("write");
    let runs = every_format_of(&node);
    assert_problems_line(&runs, &format!("reboot: {gpu} Xid 79"), "79 then a million records");
    let report = report_of(runs[1].1.stdout.trim());
    let xid = report["findings"].as_array().expect("findings").iter().find(|f| f["rule"] == "gpu-xid").cloned().expect("gpu-xid");
    assert!(xid["message"].as_str().expect("message").contains("the log was read only in part (stopped at 1000000 records)"), "{xid}");
}

/// Whether this process may read and write the machine's kernel log (`/dev/kmsg`): as root, as CI runs.
/// Elsewhere a SKIPPED line says why; under `CI=true` that fails.
fn kernel_log_here() -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new().read(true).write(true).custom_flags(nix::libc::O_NONBLOCK).open("/dev/kmsg") {
        Ok(_) => true,
        Err(err) => {
            assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "CI=true and /dev/kmsg cannot be read and written: {err}");
            eprintln!("SKIPPED: /dev/kmsg cannot be read and written here ({err}): the real kernel log needs root");
            false
        }
    }
}

/// A fake node of `instance_type` whose kernel log is this machine's: `dev/kmsg` a link to `/dev/kmsg`.
fn on_the_real_kernel_log(dir: &std::path::Path, instance_type: &str) -> FakeNode {
    let node = FakeNode::write(dir, instance_type).expect("fake node");
    let log = dir.join("dev/kmsg");
    std::fs::remove_file(&log).expect("remove");
    std::os::unix::fs::symlink("/dev/kmsg", &log).expect("link");
    node
}

/// The kernel log as the kernel gives it (the character device, which `--sysfs-root /host` reads in the
/// Kubernetes DaemonSet): read on every type, never skipped or unknown, its verdict's exit code in every format.
#[test]
fn the_kernel_log_device_is_read_through_sysfs_root() {
    if !kernel_log_here() {
        return;
    }
    for instance_type in TYPES {
        let dir = node_dir();
        let node = on_the_real_kernel_log(dir.path(), instance_type);
        for (format, run) in every_format_of(&node) {
            let context = format!("{instance_type} --format {format}\n{}\n{}", run.stdout, run.stderr);
            match format {
                "json" => {
                    let report = report_of(run.stdout.trim());
                    let xids: Vec<&Value> =
                        report["findings"].as_array().expect("findings").iter().filter(|f| f["rule"] == "gpu-xid").collect();
                    assert!(!xids.is_empty() && xids.iter().all(|f| f["status"] == "ok" || f["status"] == "problem"), "{context}");
                    assert!(xids.iter().all(|f| f["message"].as_str().unwrap_or("").contains("/dev/kmsg, ")), "{context}");
                    let code = i32::from(report["status"] == "problem");
                    assert_eq!((report["status"] != "unknown", run.code), (true, Some(code)), "{context}");
                }
                "table" => {
                    let row = run.stdout.lines().find(|l| l.trim_start().starts_with("gpu-xid ")).unwrap_or_else(|| panic!("{context}"));
                    assert!(row.contains(" ok ") || row.contains(" PROBLEM "), "{context}");
                    assert!(matches!(run.code, Some(0 | 1)), "{context}");
                }
                _ => assert!(matches!(run.code, Some(0 | 1)), "{context}"),
            }
        }
    }
}

/// The address of the GPU the test below adds to fake nodes and plants Xids for in this machine's log: one
/// no real GPU has (PCI domain 0x00ef), the same every run, so earlier runs' records only add to its count.
const TEST_GPU: &str = "00ef:ef:00";

/// Adds an NVIDIA GPU at [`TEST_GPU`] to the fake node under `root`.
fn add_test_gpu(root: &std::path::Path) {
    let address = format!("{TEST_GPU}.0");
    let dir = root.join("sys/devices/pci00ef:ef").join(&address);
    std::fs::create_dir_all(&dir).expect("dir");
    // A GPU's whole PCIe link too (Gen5 x16, trained at full width and speed), so that only its Xids are judged.
    for (file, value) in [
        ("vendor", "0x10de"),
        ("device", "0x2330"),
        ("class", "0x030200"),
        ("numa_node", "0"),
        ("current_link_width", "16"),
        ("max_link_width", "16"),
        ("current_link_speed", "32.0 GT/s PCIe"),
        ("max_link_speed", "32.0 GT/s PCIe"),
    ] {
        std::fs::write(dir.join(file), format!("{value}\n")).expect("write");
    }
    std::os::unix::fs::symlink(&dir, root.join("sys/bus/pci/devices").join(&address)).expect("link");
}

/// `Xid 79 x3 (` → 3, `Xid 79 (` → 1, in the test GPU's finding of a JSON report; 0 without one.
fn test_gpu_79s(report: &Value) -> (u64, Option<Value>) {
    let finding =
        report["findings"].as_array().expect("findings").iter().find(|f| f["rule"] == "gpu-xid" && f["message"].as_str().unwrap_or("").contains(TEST_GPU)).cloned();
    let count = finding.as_ref().map_or(0, |f| {
        let message = f["message"].as_str().unwrap_or("");
        let rest = message.split_once("Xid 79").map_or("", |(_, rest)| rest);
        rest.strip_prefix(" x").and_then(|n| n.split(' ').next()?.parse().ok()).unwrap_or(1)
    });
    (count, finding)
}

/// As root, a line written to `/dev/kmsg` is a kernel log record: Xid 79 for the GPU at [`TEST_GPU`] is
/// named for that GPU, counted once more, with its message, in every format on every type.
#[test]
fn an_xid_written_to_the_kernel_log_is_named_for_the_gpu_at_its_address() {
    use std::io::Write as _;
    if !kernel_log_here() {
        return;
    }
    let before: Vec<u64> = TYPES
        .iter()
        .map(|instance_type| {
            let dir = node_dir();
            let node = on_the_real_kernel_log(dir.path(), instance_type);
            add_test_gpu(dir.path());
            test_gpu_79s(&report_of(check(&node, "json", false).stdout.trim())).0
        })
        .collect();
    let token = format!(
        "efatop test {}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("time").as_nanos()
    );
    let line = format!("NVRM: Xid (PCI:{TEST_GPU}): 79, pid=0, GPU has fallen off the bus. ({token})\n");
    std::fs::OpenOptions::new().write(true).open("/dev/kmsg").expect("open /dev/kmsg").write_all(line.as_bytes()).expect("write /dev/kmsg");
    for (instance_type, before) in TYPES.iter().zip(before) {
        let dir = node_dir();
        let node = on_the_real_kernel_log(dir.path(), instance_type);
        add_test_gpu(dir.path());
        let runs = every_format_of(&node);
        let report = report_of(runs[1].1.stdout.trim());
        let (count, finding) = test_gpu_79s(&report);
        let finding = finding.unwrap_or_else(|| panic!("{instance_type}: no finding for {TEST_GPU}: {report}"));
        assert_eq!(count, before + 1, "{instance_type}: {finding}");
        assert!(finding["message"].as_str().unwrap_or("").contains(&token), "{instance_type}: {finding}");
        // Reboot; replace where this machine's driver reloaded since an earlier run planted one.
        assert!(finding["action"] == "reboot" || finding["action"] == "replace", "{instance_type}: {finding}");
        let subject = finding["subject"].as_str().expect("subject").to_string();
        for (format, run) in &runs {
            let context = format!("{instance_type} --format {format}\n{}\n{}", run.stdout, run.stderr);
            assert_eq!(run.code, Some(1), "{context}");
            if *format != "json" {
                assert!(run.stdout.contains(&format!("{subject} Xid 79")), "{context}");
            }
        }
    }
}

/// A GPU and a NIC failing together: on a fake p5, Xid 79 logged for GPU 3 and EFA rdmap80s0 trained at x8 of
/// x16. JSON names both, `reboot` for the GPU (NVIDIA's catalog: `RESTART_BM`; with its PCI address and the
/// NICs behind its switch) and the NIC's own action, `reboot` for the node; the NPD line fits 80 characters and exits 1; the Slurm
/// reason names both. The same node healthy says `none` and exits 0.
#[test]
fn a_p5_with_xid_79_on_gpu_3_and_an_efa_at_x8_is_reboot_and_names_both() {
    let dir = node_dir();
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
    assert_eq!(data["action"], "reboot", "{data}");
    let problems: Vec<&Value> = data["findings"].as_array().expect("findings").iter().filter(|f| f["status"] == "problem").collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    let gpu = problems.iter().find(|f| f["rule"] == "gpu-xid").expect("the Xid finding");
    assert_eq!((gpu["subject"].as_str(), gpu["action"].as_str()), (Some("GPU 3"), Some("reboot")), "{gpu}");
    let message = gpu["message"].as_str().expect("message");
    // Named by index and PCI address, with the NICs of its PCIe switch (GPU 3's: rdmap130s0..rdmap133s0).
    assert!(message.contains(&gpu3) && message.contains("Xid 79") && message.contains("rdmap130s0, rdmap131s0, rdmap132s0, rdmap133s0"), "{message}");
    assert!(gpu["action_reason"].as_str().expect("reason").contains("fallen off the bus"), "{gpu}");
    let nic = problems.iter().find(|f| f["rule"] == "pcie-link").expect("the link finding");
    assert_eq!((nic["subject"].as_str(), nic["action"].as_str()), (Some("rdmap80s0"), Some("watch")), "{nic}");
    let message = nic["message"].as_str().expect("message");
    assert!(message.contains("x8 16 GT/s of x16 16 GT/s") && message.contains("126 Gbps less"), "{message}");

    let npd = check(&node, "npd", false);
    assert_eq!(npd.code, Some(1), "replace calls for draining: NonOK");
    let npd_line = npd.stdout.trim_end();
    assert!(npd_line.len() <= 80 && npd.stdout.lines().count() == 1, "{npd_line}");
    assert_eq!(npd_line, "efatop: reboot: GPU 3 Xid 79; watch: rdmap80s0 PCIe x8 of x16");
    let slurm = check(&node, "slurm", false);
    assert_eq!(slurm.code, Some(1));
    assert_eq!(slurm.stdout, "efatop: reboot: GPU 3 Xid 79; watch: rdmap80s0 PCIe x8 of x16\n");
    let table = check(&node, "table", false);
    assert!(table.stdout.contains("action: reboot (GPU 3 Xid 79: "), "{}", table.stdout);
}

/// The newer EFA driver's device counters (on the EFA v3/v4 fake nodes) are read and watched: one growing
/// during the window is named, in JSON and in the one-line formats, with the type's expectations met.
#[test]
fn the_newer_drivers_counters_are_watched_on_efa_v3_and_v4_nodes() {
    for instance_type in ["p5en.48xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge", "p6e-gb200.36xlarge"] {
        let dir = node_dir();
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
    let dir = node_dir();
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
    let dir = node_dir();
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
    let dir = node_dir();
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

// What a faulty node shows where a healthy one has a number: dead and garbled PCIe links, counters that
// hold no count, a FIFO or a link where an attribute should be, a counter reset during the window, a DMI
// product name crafted to attack a terminal. Every run gets the check's 30 s budget as its wall-clock
// limit (a run past it is killed and fails the test).

/// The budget `efatop check` keeps within (docs/check.md).
const BUDGET: Duration = Duration::from_secs(30);

/// `efatop check --sysfs-root ROOT --window WINDOW --format FORMAT`, killed (and failed) past [`BUDGET`].
fn check_within_budget(root: &std::path::Path, format: &str, window: &str) -> common::Run {
    let root = root.to_str().expect("utf-8");
    common::run_program(
        common::efatop_path().to_str().expect("utf-8"),
        &["check", "--sysfs-root", root, "--window", window, "--format", format],
        BUDGET,
    )
}

/// [`check_within_budget`] in every format, all at once (as [`in_formats`]), in their order; each run
/// is still killed (and failed) past the budget on its own.
fn every_format_within_budget(root: &std::path::Path, window: &str) -> Vec<(&'static str, common::Run)> {
    std::thread::scope(|scope| {
        let started: Vec<_> = FORMATS.iter().map(|&format| (format, scope.spawn(move || check_within_budget(root, format, window)))).collect();
        started.into_iter().map(|(format, run)| (format, joined(format, run))).collect()
    })
}

fn mkfifo(path: &std::path::Path) {
    if path.exists() {
        std::fs::remove_file(path).expect("remove");
    }
    let made = std::process::Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(made.success(), "mkfifo {}", path.display());
}

fn self_symlink(path: &std::path::Path) {
    std::fs::remove_file(path).expect("remove");
    std::os::unix::fs::symlink(path.file_name().expect("a name"), path).expect("symlink");
}

/// Asserts that `run` (format `format`) names exactly these findings of `rule`, each (subject, words in
/// its message) with `status` (`unknown`, or `problem` with `action`), and says the node's verdict in
/// the format's words with its exit code: unknown is exit 2 everywhere; a problem exit 1.
fn assert_findings(run: &common::Run, format: &str, rule: &str, status: &str, action: &str, named: &[(String, String)], what: &str) {
    let context = format!("{what} --format {format}\nstdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    let code = if status == "unknown" { 2 } else { 1 };
    assert_eq!(run.code, Some(code), "{context}");
    assert!(run.stdout.len() < 64 << 10 && run.stderr.len() < 64 << 10, "capped output: {what} {format}: {} bytes", run.stdout.len());
    let lines: Vec<&str> = run.stdout.lines().collect();
    match format {
        "table" => {
            let label = if status == "unknown" { " unknown " } else { " PROBLEM " };
            let rows: Vec<&str> = lines.iter().copied().filter(|l| l.trim_start().starts_with(rule) && l.contains(label)).collect();
            assert_eq!(rows.len(), named.len(), "{context}");
            for (subject, words) in named {
                assert!(rows.iter().any(|row| row.contains(subject.as_str()) && row.contains(words.as_str())), "{subject} {words}: {context}");
            }
            let last = lines.last().copied().unwrap_or_default();
            if status == "unknown" {
                assert!(last.starts_with("UNKNOWN: could not tell: "), "{context}");
            } else {
                assert!(last.starts_with(&format!("PROBLEM: {} things wrong: {action}: ", named.len())) || named.len() == 1, "{context}");
            }
        }
        "json" => {
            assert_eq!(lines.len(), 1, "{context}");
            let report = report_of(lines[0]);
            assert_eq!(report["status"], status, "{context}");
            let findings = report["findings"].as_array().expect("findings");
            let flagged: Vec<&Value> = findings.iter().filter(|f| f["status"] == "problem" || f["status"] == "unknown").collect();
            assert_eq!(flagged.len(), named.len(), "{context}");
            for (subject, words) in named {
                let found = flagged.iter().find(|f| f["subject"] == subject.as_str()).unwrap_or_else(|| panic!("{subject}: {context}"));
                assert_eq!((found["rule"].as_str(), found["status"].as_str()), (Some(rule), Some(status)), "{context}");
                assert!(found["message"].as_str().unwrap_or("").contains(words.as_str()), "{subject} {words}: {context}");
                if status == "problem" {
                    assert_eq!(found["action"], action, "{context}");
                }
            }
        }
        "npd" => {
            assert_eq!(lines.len(), 1, "{context}");
            assert!(lines[0].len() <= 80 && lines[0].is_ascii(), "{context}");
            let lead = if status == "unknown" { "efatop: unknown: ".to_string() } else { format!("efatop: {action}: ") };
            assert!(lines[0].starts_with(&lead), "{context}");
        }
        "nhc" | "slurm" => {
            if status == "unknown" {
                assert!(run.stdout.is_empty(), "{context}");
                assert!(run.stderr.contains("could not tell") && run.stderr.contains(named[0].0.as_str()), "{context}");
            } else {
                let prefix = if format == "nhc" { "check_efatop:  " } else { "efatop: " };
                assert_eq!(lines.len(), 1, "{context}");
                assert!(lines[0].starts_with(&format!("{prefix}{action}: ")), "{context}");
            }
        }
        other => unreachable!("format {other}"),
    }
}

/// Devices of a fake node by (name or index, PCI address).
type Devices<Name> = Vec<(Name, String)>;

/// A fake node of `instance_type`, its layout's EFA names and (index, PCI address) of its GPUs.
fn fake(dir: &std::path::Path, instance_type: &str) -> (FakeNode, Devices<String>, Devices<usize>) {
    let node = FakeNode::write(dir, instance_type).expect("fake node");
    let layout = efatop_topology::instance_layout(instance_type).expect("known").expect("loads");
    let gpus = layout.gpus.iter().map(|gpu| (gpu.index, gpu.pci_bus_id.clone())).collect();
    let efa = node.efa();
    (node, efa, gpus)
}

#[test]
fn pcie_links_down_are_problems_calling_for_a_reboot_in_every_format() {
    for instance_type in TYPES {
        let dir = node_dir();
        let (node, efa, gpus) = fake(dir.path(), instance_type);
        // Each as the kernel shows a link that is down, one file at a time: width 0; `Unknown`; older
        // kernels' `Unknown speed`.
        std::fs::write(node.link_file(&efa[0].1, "current_link_width").expect("link"), "0\n").expect("write");
        std::fs::write(node.link_file(&gpus[0].1, "current_link_speed").expect("link"), "Unknown\n").expect("write");
        std::fs::write(node.link_file(&gpus[1].1, "current_link_speed").expect("link"), "Unknown speed\n").expect("write");
        let named = vec![
            (efa[0].0.clone(), "PCIe link is down: trained at x0".to_string()),
            (format!("GPU {}", gpus[0].0), "PCIe link is down: trained at x16 Unknown".to_string()),
            (format!("GPU {}", gpus[1].0), "PCIe link is down".to_string()),
        ];
        for (format, run) in every_format_within_budget(node.root(), "10ms") {
            assert_findings(&run, format, "pcie-link", "problem", "reboot", &named, &format!("{instance_type} links down"));
            if format != "json" && format != "table" {
                assert!(run.stdout.contains("PCIe link down"), "{instance_type} {format}: {}", run.stdout);
            }
        }
    }
}

#[test]
fn pcie_link_files_that_cannot_be_read_are_unknown_naming_the_file_in_every_format() {
    for instance_type in TYPES {
        let dir = node_dir();
        let (node, efa, gpus) = fake(dir.path(), instance_type);
        let file = |address: &str, name: &str| node.link_file(address, name).expect("link file");
        let last = efa.last().expect("an EFA");
        std::fs::write(file(&efa[0].1, "current_link_width"), "x16\n").expect("write");
        std::fs::remove_file(file(&last.1, "current_link_width")).expect("remove");
        std::fs::remove_file(file(&last.1, "current_link_speed")).expect("remove");
        std::fs::write(file(&gpus[0].1, "current_link_width"), "32\n").expect("write");
        std::fs::write(file(&gpus[1].1, "max_link_speed"), "fast\n").expect("write");
        self_symlink(&file(&gpus[2].1, "current_link_speed"));
        let shown = |path: std::path::PathBuf| path.display().to_string();
        let named = vec![
            (efa[0].0.clone(), format!("{}: `x16` is not a PCIe link width", shown(file(&efa[0].1, "current_link_width")))),
            (last.0.clone(), format!("{}: missing", shown(file(&last.1, "current_link_width")))),
            (format!("GPU {}", gpus[0].0), "x32 32 GT/s, above its max x16".to_string()),
            (format!("GPU {}", gpus[1].0), format!("{}: `fast` is not a PCIe link speed", shown(file(&gpus[1].1, "max_link_speed")))),
            (format!("GPU {}", gpus[2].0), format!("{}: a symbolic link, not a sysfs attribute", shown(file(&gpus[2].1, "current_link_speed")))),
        ];
        // p4d's GPUs are Gen4 (16 GT/s): the contradiction reads with its own speed.
        let named: Vec<(String, String)> = named
            .into_iter()
            .map(|(subject, words)| (subject, if instance_type.starts_with("p4") { words.replace("x32 32 GT/s, above its max x16", "x32 16 GT/s, above its max x16") } else { words }))
            .collect();
        for (format, run) in every_format_within_budget(node.root(), "10ms") {
            assert_findings(&run, format, "pcie-link", "unknown", "watch", &named, &format!("{instance_type} unreadable links"));
        }
    }
}

/// What each garbage counter file holds (or is), and the words that must name it.
const GARBAGE: [(&str, &str, &str); 8] = [
    ("rx_drops", "abc\n", "`abc` is not a count"),
    ("retrans_timeout_events", "-1\n", "`-1` is negative, not a count"),
    ("unresponsive_remote_events", "", "empty, not a count"),
    ("impaired_remote_conn_events", "(10 MB of digits)", "longer than 4096 bytes, not a sysfs attribute"),
    ("rdma_read_wr_err", "18446744073709551616\n", "`18446744073709551616` is more than a 64-bit counter holds"),
    ("rdma_write_wr_err", "18446744073709551615\n", "`18446744073709551615` is 2^63 or more"),
    ("tx_pkts", "(a link to itself)", "a symbolic link, not a sysfs attribute"),
    ("cmds_err", "(a FIFO)", "a FIFO, not a sysfs attribute"),
];

#[test]
fn counters_that_hold_no_count_are_unknown_naming_each_file_and_a_fifo_does_not_stall_the_check() {
    for instance_type in TYPES {
        let dir = node_dir();
        let node = FakeNode::write(dir.path(), instance_type).expect("fake node");
        let victim = node.victim();
        let mut words = Vec::new();
        for (counter, text, says) in GARBAGE {
            let path = node.counter_file(&victim, counter);
            match text {
                "(10 MB of digits)" => std::fs::write(&path, "9".repeat(10 << 20)).expect("write"),
                "(a link to itself)" => self_symlink(&path),
                "(a FIFO)" => mkfifo(&path),
                text => std::fs::write(&path, text).expect("write"),
            }
            words.push(format!("{}: {says}", path.display()));
        }
        // Each ended within the budget (killed and failed otherwise), the FIFO named.
        for (format, run) in every_format_within_budget(node.root(), "10ms") {
            let named: Vec<(String, String)> = words.iter().map(|words| (victim.clone(), words.clone())).collect();
            // One finding about the NIC names every file.
            let one = &named[..1];
            assert_findings(&run, format, "efa-counters", "unknown", "watch", one, &format!("{instance_type} garbage counters"));
            if format == "json" || format == "table" {
                for (_, words) in &named {
                    assert!(run.stdout.contains(words.as_str()), "{instance_type} {format}: {words}\n{}", run.stdout);
                }
                assert!(!run.stdout.contains("18446744073709551615") || run.stdout.contains("`18446744073709551615` is 2^63"), "{}", run.stdout);
            }
        }
    }
}

#[test]
fn fifos_where_the_product_name_and_a_link_should_be_are_named_within_the_budget() {
    let dir = node_dir();
    let (node, _, gpus) = fake(dir.path(), "p6e-gb200.36xlarge");
    let product_name = node.root().join("sys/class/dmi/id/product_name");
    mkfifo(&product_name);
    let width = node.link_file(&gpus[3].1, "current_link_width").expect("link");
    mkfifo(&width);
    let run = check_within_budget(node.root(), "json", "10ms");
    assert_eq!(run.code, Some(2), "{}\n{}", run.stdout, run.stderr);
    let report = report_of(run.stdout.trim());
    let findings = report["findings"].as_array().expect("findings");
    let instance = findings.iter().find(|f| f["rule"] == "instance").expect("instance");
    assert_eq!(instance["status"], "unknown", "{instance}");
    assert!(instance["message"].as_str().unwrap_or("").contains(&format!("{}: a FIFO, not a sysfs attribute", product_name.display())), "{instance}");
    let link = findings.iter().find(|f| f["rule"] == "pcie-link" && f["status"] == "unknown").expect("the link");
    assert!(link["message"].as_str().unwrap_or("").contains(&format!("{}: a FIFO", width.display())), "{link}");
}

#[test]
fn a_counter_that_goes_back_during_the_window_is_a_reset_not_growth() {
    let dir = node_dir();
    let node = FakeNode::write(dir.path(), "p5.48xlarge").expect("fake node");
    let victim = node.victim();
    for format in ["json", "npd", "table"] {
        // The counter falls every 5 ms (a driver that reloads and reloads), written whole each time: the
        // window's two reads see it lower the second time.
        node.counters().set(&victim, "rx_drops", 1_000_000).expect("set");
        let stop = Arc::new(AtomicBool::new(false));
        let falling = {
            let (node, stop, victim) = (node.clone(), stop.clone(), victim.clone());
            std::thread::spawn(move || {
                let mut value = 1_000_000_u64;
                while !stop.load(Ordering::Relaxed) {
                    value -= 1;
                    node.counters().set(&victim, "rx_drops", value).expect("set");
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        };
        let run = check_within_budget(node.root(), format, "500ms");
        stop.store(true, Ordering::Relaxed);
        falling.join().expect("falling");
        let context = format!("--format {format}\n{}\n{}", run.stdout, run.stderr);
        assert_eq!(run.code, Some(2), "{context}");
        assert!(!run.stdout.contains("+18446744073709551615") && !run.stdout.contains("rx_drops +"), "{context}");
        match format {
            "json" => {
                let report = report_of(run.stdout.trim());
                let findings = report["findings"].as_array().expect("findings");
                let flagged: Vec<&Value> = findings.iter().filter(|f| f["status"] != "ok" && f["status"] != "skipped").collect();
                assert_eq!(flagged.len(), 1, "{context}");
                assert_eq!((flagged[0]["rule"].as_str(), flagged[0]["status"].as_str()), (Some("efa-counters"), Some("unknown")), "{context}");
                assert_eq!(flagged[0]["subject"], victim.as_str(), "{context}");
                assert!(flagged[0]["message"].as_str().unwrap_or("").contains("rx_drops went back from"), "{context}");
            }
            "npd" => assert_eq!(run.stdout, format!("efatop: unknown: {victim} counters reset\n"), "{context}"),
            _ => assert!(run.stdout.contains("its counters were reset"), "{context}"),
        }
    }
}

#[test]
fn a_crafted_product_name_is_escaped_and_capped_in_every_format() {
    let dir = node_dir();
    let node = FakeNode::write(dir.path(), "p5.48xlarge").expect("fake node");
    let product_name = node.root().join("sys/class/dmi/id/product_name");
    // Retitles the terminal, clears the screen, reverses the text after it.
    std::fs::write(&product_name, "\u{1b}]0;owned\u{7}p5.48xlarge\u{1b}[2J\u{202e}\u{9b}31m\n").expect("write");
    for format in FORMATS {
        let run = check_within_budget(node.root(), format, "10ms");
        let all = format!("{}{}", run.stdout, run.stderr);
        let context = format!("--format {format}\n{all}");
        assert!(!all.chars().any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'), "{context}");
        let escaped = r"\x1b]0;owned\x07p5.48xlarge\x1b[2J\u{202e}\x9b31m";
        match format {
            "table" => assert!(run.stdout.contains(escaped), "{context}"),
            "json" => assert_eq!(report_of(run.stdout.trim())["instance_type"], escaped, "{context}"),
            _ => {}
        }
    }
    // 10 MB of name: not an attribute, said in a line; not 20 MB of output.
    std::fs::write(&product_name, "\u{1b}[2J".repeat(2 << 20)).expect("write");
    for format in FORMATS {
        let run = check_within_budget(node.root(), format, "10ms");
        let context = format!("--format {format}\n{}\n{}", run.stdout, run.stderr);
        assert_eq!(run.code, Some(2), "{context}");
        assert!(run.stdout.len() + run.stderr.len() < 64 << 10, "{context}");
        if format == "json" {
            let report = report_of(run.stdout.trim());
            let instance = report["findings"].as_array().expect("findings").iter().find(|f| f["rule"] == "instance").cloned().expect("instance");
            assert_eq!(instance["status"], "unknown", "{context}");
            assert!(instance["message"].as_str().unwrap_or("").contains("longer than 4096 bytes"), "{context}");
        }
    }
}

#[test]
fn write_fake_refuses_a_directory_that_is_not_empty_and_writes_nothing() {
    let dir = node_dir();
    let gb200 = dir.path().join("gb200");
    let written = efatop(&["check", "--write-fake", gb200.to_str().expect("utf-8"), "--instance-type", "p6e-gb200.36xlarge"]);
    assert_eq!(written.code, Some(0), "{}", written.stderr);
    let listing = |root: &std::path::Path| {
        let mut all = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read_dir").map(|e| e.expect("entry")) {
                let meta = std::fs::symlink_metadata(entry.path()).expect("meta");
                if meta.is_dir() {
                    stack.push(entry.path());
                }
                all.push((entry.path(), meta.len()));
            }
        }
        all.sort();
        all
    };
    let before = listing(&gb200);
    let other = dir.path().join("other");
    std::fs::create_dir(&other).expect("mkdir");
    std::fs::write(other.join("notes"), "mine\n").expect("write");
    for (target, what) in [(&gb200, "a fake GB200"), (&other, "a directory with one file")] {
        let run = efatop(&["check", "--write-fake", target.to_str().expect("utf-8"), "--instance-type", "p5.48xlarge", "--plant", "port-down"]);
        assert_eq!(run.code, Some(2), "{what}: {}", run.stderr);
        assert_eq!(run.stderr.lines().count(), 1, "{what}: {}", run.stderr);
        assert!(run.stderr.contains("--write-fake") && run.stderr.contains("not empty"), "{what}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{what}");
    }
    assert_eq!(listing(&gb200), before, "nothing written over the GB200");
    assert_eq!(listing(&other).len(), 1);
    assert_eq!(std::fs::read_to_string(gb200.join("sys/class/dmi/id/product_name")).expect("read"), "p6e-gb200.36xlarge\n");
}

#[test]
fn a_failing_scontrol_leaves_a_faulty_node_at_exit_1_with_one_line_saying_why() {
    let dir = node_dir();
    let node = FakeNode::write(dir.path().join("node"), "p5.48xlarge").expect("fake node");
    node.plant(Fault::PortDown).expect("plant");
    // An scontrol that fails as one does when slurmctld is away: several lines on stderr.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    let scontrol = bin.join("scontrol");
    std::fs::write(
        &scontrol,
        "#!/bin/sh\necho 'slurm_update error: Unable to contact slurm controller (connect failure)' >&2\n\
         echo 'scontrol: error: second line' >&2\necho '' >&2\necho 'third line' >&2\nexit 1\n",
    )
    .expect("write");
    std::fs::set_permissions(&scontrol, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let scratch = common::scratch();
    let root = node.root().to_str().expect("utf-8");
    let output = common::efatop_in(scratch.path())
        .args(["check", "--sysfs-root", root, "--window", "10ms", "--format", "slurm", "--drain", "--node-name", "node7"])
        .env("PATH", path)
        .output()
        .expect("efatop");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(1), "a faulty node is exit 1 whatever scontrol does: {stdout}\n{stderr}");
    assert_eq!(stdout, "efatop: reboot: rdmap80s0 port 1 DOWN\n");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("efatop: error: --drain: scontrol update nodename=node7 state=drain")
            && stderr.contains("exit 1: slurm_update error: Unable to contact slurm controller (connect failure) / scontrol: error: second line / third line"),
        "{stderr}"
    );
}

#[test]
fn check_help_lists_every_known_type_the_fake_tree_flags_and_the_exit_codes() {
    let run = efatop(&["check", "--help"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let help = run.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    for instance_type in efatop_topology::known_instance_types() {
        assert!(help.contains(instance_type), "{instance_type} in:\n{}", run.stdout);
    }
    assert_eq!(efatop_topology::known_instance_types().count(), TYPES.len());
    for words in ["--write-fake", "--plant", "Exit codes:", "npd 0 (OK) nothing wrong, or only problems whose action is watch", "unknown could not be read", "watch keep the node in service"] {
        assert!(help.contains(words), "{words} in:\n{}", run.stdout);
    }
}
