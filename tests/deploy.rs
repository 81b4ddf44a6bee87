//! What deploy/ ships, against the binary (no Kubernetes cluster or NHC installation runs here):
//!
//! - the node-problem-detector custom-plugin config (deploy/kubernetes/npd-efatop-check.json): each rule's
//!   command, with the fake node's root in place of the host's `/host`, exits 0 on a healthy p5, 1 on one
//!   with a port down (named), 0 on one whose only problem calls for watching (NonOK would set the
//!   condition that cordons; its line says `watch`), 2 where it cannot tell, always with one stdout line no
//!   longer than the config's `max_output_length`, well inside the rule's timeout;
//! - the `MPIJob`'s efatop command line and the NPD `DaemonSet`'s flags are ones the binary accepts;
//! - the NHC check (deploy/nhc/efatop.nhc), sourced by bash with NHC's `die` and `log` stubbed: it dies
//!   with efatop's message on a problem, and passes (logging why) on a healthy node, on a problem whose
//!   action is `watch`, and where efatop cannot tell;
//! - the Slurm prolog (deploy/slurm/efatop-prolog.sh), run by bash with an `scontrol` that records what it
//!   is asked: it drains and fails (exit 1) only for a problem calling for more than watching; a healthy
//!   node, a `watch` finding and an unknown verdict run the job (exit 0) with no drain.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{efatop, efatop_path, run_program};
use efatop_node::{FakeNode, Fault};
use serde_json::Value;

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy").join(path)
}

/// Seconds in an NPD duration (`45s`, `5m`).
fn seconds(duration: &str) -> u64 {
    let (number, unit) = duration.split_at(duration.len() - 1);
    let number: u64 = number.parse().unwrap_or_else(|_| panic!("duration {duration}"));
    match unit {
        "s" => number,
        "m" => number * 60,
        other => panic!("unit {other} of {duration}"),
    }
}

#[test]
fn the_npd_plugin_rules_keep_npds_contract_on_fake_nodes() {
    let config: Value = serde_json::from_str(&std::fs::read_to_string(deploy("kubernetes/npd-efatop-check.json")).expect("config")).expect("JSON");
    let max = config["pluginConfig"]["max_output_length"].as_u64().expect("max_output_length") as usize;
    assert_eq!(max, 80);
    let plugin_timeout = seconds(config["pluginConfig"]["timeout"].as_str().expect("timeout"));
    let rules = config["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 2, "a temporary event and a permanent condition");
    let condition = config["conditions"][0]["type"].as_str().expect("condition");
    assert!(rules.iter().any(|r| r["type"] == "permanent" && r["condition"] == condition), "{config}");

    let dir = tempfile::tempdir().expect("tempdir");
    let healthy = FakeNode::write(dir.path().join("healthy"), "p5.48xlarge").expect("healthy");
    let broken = FakeNode::write(dir.path().join("broken"), "p5en.48xlarge").expect("broken");
    let victim = broken.plant(Fault::PortDown).expect("plant");
    // An EFA at x8 of a Gen4 x16 still carries its 100 Gbps: watch, which must not cordon.
    let watched = FakeNode::write(dir.path().join("watched"), "p4d.24xlarge").expect("watched");
    let watched_victim = watched.plant(Fault::EfaLinkX8).expect("plant");
    let watch_line = format!("efatop: watch: {watched_victim} PCIe x8 of x16");
    let nothing = dir.path().join("nothing");
    std::fs::create_dir(&nothing).expect("empty root");
    for rule in rules {
        assert!(rule["path"].as_str().is_some_and(|p| p.ends_with("/efatop")), "{rule}");
        let timeout = seconds(rule["timeout"].as_str().expect("rule timeout"));
        assert!(timeout <= plugin_timeout, "{rule}");
        let args: Vec<&str> = rule["args"].as_array().expect("args").iter().map(|a| a.as_str().expect("string")).collect();
        let at = args.iter().position(|a| *a == "--sysfs-root").expect("the host's root is given") + 1;
        assert_eq!(args[at], "/host", "the DaemonSet mounts the host's / at /host");
        for (root, code, says) in [
            (healthy.root(), 0, "efatop: ok: "),
            (broken.root(), 1, victim.as_str()),
            (watched.root(), 0, watch_line.as_str()),
            (nothing.as_path(), 2, "efatop: unknown: "),
        ] {
            let mut args = args.clone();
            let root = root.to_str().expect("utf-8");
            args[at] = root;
            let run = efatop(&args);
            let what = format!("{} {args:?}", rule["type"]);
            assert_eq!(run.code, Some(code), "{what}: {}\n{}", run.stdout, run.stderr);
            let lines: Vec<&str> = run.stdout.lines().collect();
            assert_eq!(lines.len(), 1, "{what}: one line: {}", run.stdout);
            assert!(lines[0].len() <= max && lines[0].contains(says), "{what}: {:?}", lines[0]);
            assert!(run.elapsed < Duration::from_secs(timeout), "{what}: {:?}", run.elapsed);
        }
    }
}

/// The list items after `- <marker>` in a YAML `command:` list, up to the first line that is not one.
fn command_after(yaml: &str, marker: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut inside = false;
    for line in yaml.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') {
            continue;
        }
        if inside {
            let Some(item) = trimmed.strip_prefix("- ") else { break };
            items.push(item.trim_matches('"').to_string());
        } else if trimmed == format!("- {marker}") {
            inside = true;
        }
    }
    items
}

#[test]
fn the_mpijob_and_the_daemonset_give_efatop_flags_it_accepts() {
    let job = std::fs::read_to_string(deploy("kubernetes/efatop-sweep-mpijob.yaml")).expect("MPIJob");
    let mut args = command_after(&job, "/opt/efatop/bin/efatop");
    assert_eq!(args.first().map(String::as_str), Some("sweep"), "{args:?}");
    assert!(args.windows(2).any(|w| w == ["--format", "npd"]), "{args:?}");
    // Every flag is parsed before --help prints: an unknown flag or a bad value would fail first.
    args.push("--help".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = efatop(&args);
    assert_eq!(run.code, Some(0), "{args:?}: {}", run.stderr);
    let daemonset = std::fs::read_to_string(deploy("kubernetes/node-problem-detector-efatop.yaml")).expect("DaemonSet");
    assert!(daemonset.contains("--config.custom-plugin-monitor=/config/npd-efatop-check.json"));
    assert!(daemonset.contains("mountPath: /host"));
}

/// Sources deploy/nhc/efatop.nhc in bash with NHC's `die` and `log` as stubs that print, and runs
/// `check_efatop ARGS`; returns what it printed, then `ret N`.
fn nhc(args: &[&str]) -> String {
    let script = format!(
        "die() {{ echo \"DIE $1 $2\"; return \"$1\"; }}; log() {{ echo \"LOG $*\"; }}; source {}; check_efatop {}; echo \"ret $?\"",
        deploy("nhc/efatop.nhc").display(),
        args.join(" ")
    );
    let run = Command::new("bash").args(["-c", &script]).env("EFATOP", efatop_path()).output().expect("bash");
    String::from_utf8_lossy(&run.stdout).into_owned()
}

#[test]
fn the_nhc_check_dies_with_efatops_message_only_on_a_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let healthy = FakeNode::write(dir.path().join("healthy"), "p4d.24xlarge").expect("healthy");
    let broken = FakeNode::write(dir.path().join("broken"), "p4d.24xlarge").expect("broken");
    broken.plant(Fault::LowMemlock).expect("plant");
    let root = |node: &FakeNode| node.root().to_str().expect("utf-8").to_string();
    assert_eq!(nhc(&["--sysfs-root", &root(&healthy), "--window", "100ms"]), "ret 0\n");
    assert_eq!(nhc(&["--sysfs-root", &root(&broken), "--window", "100ms"]), "DIE 1 check_efatop:  reboot: memlock 64 KiB, not unlimited\nret 1\n");
    // A problem whose action is only watch (an EFA at x8 that still carries its 100 Gbps) is logged, not a drain.
    let watched = FakeNode::write(dir.path().join("watched"), "p4d.24xlarge").expect("watched");
    let victim = watched.plant(Fault::EfaLinkX8).expect("plant");
    assert_eq!(
        nhc(&["--sysfs-root", &root(&watched), "--window", "100ms"]),
        format!("LOG check_efatop:  watch: {victim} PCIe x8 of x16 (action watch: not drained)\nret 0\n")
    );
    let said = nhc(&["--sysfs-root", dir.path().to_str().expect("utf-8"), "--window", "100ms"]);
    assert_eq!(said, "LOG check_efatop:  efatop check could not tell (exit 2); passing\nret 0\n");
    // A slow binary is NHC's to time out; efatop's own window keeps it far inside NHC's default 30 s.
    let run = run_program(efatop_path().to_str().expect("utf-8"), &["check", "--format", "nhc", "--sysfs-root", &root(&healthy)], Duration::from_secs(30));
    assert!(run.elapsed < Duration::from_secs(10), "{:?}", run.elapsed);
}

/// Runs deploy/slurm/efatop-prolog.sh as slurmd would (`SLURMD_NODENAME`), with efatop judging `root` and
/// an `scontrol` (first on `PATH`) that appends each call's arguments to `calls` and answers `show node`
/// with an idle node; returns the prolog's exit code and stderr.
fn prolog(root: &Path, bin: &Path, calls: &Path) -> (Option<i32>, String) {
    let _ = std::fs::remove_file(calls);
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let run = Command::new("bash")
        .arg(deploy("slurm/efatop-prolog.sh"))
        .env("EFATOP", efatop_path())
        .env("EFATOP_CHECK_ARGS", format!("--sysfs-root {} --window 100ms", root.display()))
        .env("SLURMD_NODENAME", "node7")
        .env("SCONTROL_CALLS", calls)
        .env("PATH", path)
        .output()
        .expect("bash");
    (run.status.code(), String::from_utf8_lossy(&run.stderr).into_owned())
}

#[test]
fn the_slurm_prolog_drains_only_for_what_calls_for_more_than_watching() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    let scontrol = bin.join("scontrol");
    std::fs::write(
        &scontrol,
        "#!/bin/sh\necho \"$*\" >> \"$SCONTROL_CALLS\"\n\
         if [ \"$1\" = show ]; then echo \"NodeName=$3 Arch=x86_64\"; echo \"   State=IDLE ThreadsPerCore=1\"; fi\nexit 0\n",
    )
    .expect("write");
    std::fs::set_permissions(&scontrol, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let calls = dir.path().join("calls");
    let said = || std::fs::read_to_string(&calls).unwrap_or_default();

    let healthy = FakeNode::write(dir.path().join("healthy"), "p5.48xlarge").expect("healthy");
    let (code, stderr) = prolog(healthy.root(), &bin, &calls);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(said(), "show node node7\n", "a healthy node is only looked at (to resume it if efatop drained it)");

    let watched = FakeNode::write(dir.path().join("watched"), "p4d.24xlarge").expect("watched");
    let victim = watched.plant(Fault::EfaLinkX8).expect("plant");
    let (code, stderr) = prolog(watched.root(), &bin, &calls);
    assert_eq!(code, Some(0), "a watch finding runs the job: {stderr}");
    assert_eq!(said(), "", "and is not drained");
    assert!(stderr.contains(&format!("efatop prolog: efatop: watch: {victim} PCIe x8 of x16 (action watch: not drained)")), "{stderr}");

    let broken = FakeNode::write(dir.path().join("broken"), "p5.48xlarge").expect("broken");
    broken.plant(Fault::PortDown).expect("plant");
    let (code, stderr) = prolog(broken.root(), &bin, &calls);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(said(), "update nodename=node7 state=drain reason=efatop: reboot: rdmap80s0 port 1 DOWN\n");

    let nothing = dir.path().join("nothing");
    std::fs::create_dir(&nothing).expect("empty root");
    let (code, stderr) = prolog(&nothing, &bin, &calls);
    assert_eq!(code, Some(0), "could not tell: the job runs: {stderr}");
    assert_eq!(said(), "", "and the node is left as it is");
}
