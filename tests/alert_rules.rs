//! The alert rules efatop ships (deploy/prometheus/efatop-rules.yml): `promtool check rules` accepts them,
//! `promtool test rules` runs their unit tests (efatop-rules.test.yml beside them), and every efatop metric
//! they name is one that `efatop monitor --prometheus` serves (a rename would otherwise leave an alert
//! that never fires). Without promtool (Debian's `prometheus` package) the promtool tests say SKIPPED,
//! except under CI=true, where they fail.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use efatop_node::{Affinity, FakeNode, GpuReader, Monitor, Sysfs};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus")
}

/// promtool, or `None` after saying why the test is skipped (a failure under CI=true).
fn promtool() -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).map(|dir| dir.join("promtool")).find(|path| path.is_file()));
    if found.is_none() {
        assert!(
            std::env::var("CI").ok().as_deref() != Some("true"),
            "promtool is not on PATH (Debian package `prometheus`; scripts/build/setup-debian installs it) and CI=true"
        );
        eprintln!("SKIPPED: no `promtool` on PATH (Debian package `prometheus`; scripts/build/setup-debian installs it)");
    }
    found
}

fn promtool_says(args: &[&str]) -> (bool, String) {
    let Some(promtool) = promtool() else { return (true, String::new()) };
    let output = Command::new(promtool).args(args).current_dir(deploy()).output().expect("run promtool");
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), said)
}

#[test]
fn promtool_checks_the_rules() {
    let (ok, said) = promtool_says(&["check", "rules", "efatop-rules.yml"]);
    assert!(ok, "{said}");
    if !said.is_empty() {
        assert!(said.contains("SUCCESS: 9 rules found"), "{said}");
    }
}

#[test]
fn promtool_runs_the_rules_unit_tests() {
    let (ok, said) = promtool_says(&["test", "rules", "efatop-rules.test.yml"]);
    assert!(ok, "{said}");
}

/// Every `efatop_…` name in the rules' expressions.
fn metric_names(rules: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let expressions: String = rules.lines().filter(|line| line.trim_start().starts_with("expr:")).collect::<Vec<_>>().join("\n");
    let mut rest = expressions.as_str();
    while let Some(at) = rest.find("efatop_") {
        let name: String = rest[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        rest = &rest[at + name.len()..];
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

#[test]
fn every_metric_the_rules_name_is_served_by_the_monitor() {
    let rules = std::fs::read_to_string(deploy().join("efatop-rules.yml")).expect("rules");
    let names = metric_names(&rules);
    assert!(names.len() >= 7, "{names:?}");
    // A fake p5 whose rail 1 carries traffic, so that the rail gauges are served too.
    let dir = tempfile::tempdir().expect("tempdir");
    let node = FakeNode::write(dir.path(), "p5.48xlarge").expect("fake p5");
    // An Xid in its kernel log, counted live as `efatop monitor` counts them (efatop_gpu_xid_total).
    node.plant(efatop_node::Fault::Xid(79)).expect("plant Xid 79");
    let xids = efatop_node::xid_watch::XidWatch::start("p5", &Sysfs::new(node.root()));
    let counts = xids.counts();
    assert_eq!(counts.len(), 1, "{counts:?}");
    assert_eq!((counts[0].gpu, counts[0].xid, counts[0].count), (Some(3), 79, 1));
    let layout = efatop_topology::instance_layout("p5.48xlarge").expect("known").expect("loads");
    let mut monitor = Monitor::new("p5", Sysfs::new(node.root()), Affinity::from_topology(&layout), GpuReader::unavailable("test"));
    monitor.sample(Duration::ZERO);
    for (device, _) in node.efa().iter().skip(1).step_by(4) {
        node.counters().advance(device, "tx_bytes", 1_000_000_000).expect("advance");
    }
    let text = efatop_node::prometheus::render(vec![monitor.sample(Duration::from_secs(1))]).expect("render");
    for name in &names {
        assert!(text.contains(&format!("\n{name}{{")), "the rules name {name}, which efatop monitor does not serve");
    }
    assert!(
        text.contains(r#"efatop_gpu_xid_total{host="p5",gpu="3",pci="0000:86:00",xid="79",action="reboot"} 1"#),
        "{}",
        text.lines().filter(|line| line.contains("xid")).collect::<Vec<_>>().join("\n")
    );
}
