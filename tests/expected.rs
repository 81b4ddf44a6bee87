//! "What numbers should I expect on this instance?": real two-rank runs over tcp pointed at fake sysfs trees
//! (`--sysfs-root`), whose DMI product name makes them a p5.48xlarge (figures published) or a
//! p6-b300.48xlarge (none), and what the table, the results file, `efatop report` and `efatop compare
//! --expected` say of them; and compare's bad input.

mod common;

use std::path::Path;

use common::{efatop, serial, table_rows};
use serde_json::Value;

fn results(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("results file")).expect("results JSON")
}

/// `efatop run --ranks 2 write --provider tcp` over SinglePin at 256K and 512K, reading sysfs under `root`.
fn run_write(root: &Path, out: &Path) -> common::Run {
    let run = efatop(&[
        "run", "--ranks", "2", "write", "--provider", "tcp", "--configs", "single", "--min-size", "256K", "--max-size", "512K",
        "--iters", "4", "--warmup", "1", "--no-tui", "--sysfs-root", root.to_str().expect("utf-8"), "--out", out.to_str().expect("utf-8"),
    ]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    run
}

/// The seed table's `% of expected` cells: each row's, right after its Gbps.
fn expected_cells(stdout: &str) -> Vec<String> {
    let header = stdout.lines().find(|l| l.starts_with("| Size |")).unwrap_or_else(|| panic!("no table:\n{stdout}"));
    let titles: Vec<&str> = header.trim_matches('|').split('|').map(str::trim).collect();
    let at = titles.iter().position(|t| *t == "% of expected").unwrap_or_else(|| panic!("no % of expected column: {header}"));
    assert_eq!(titles[at - 1], "SinglePin (Gbps)", "beside the figure: {header}");
    let rows: Vec<Vec<String>> = table_rows(stdout).into_iter().filter(|row| row.len() == titles.len()).collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    rows.into_iter().map(|row| row[at].clone()).collect()
}

fn assert_one_line_error(run: &common::Run, needles: &[&str]) {
    assert_eq!(run.code, Some(2), "stdout {} stderr {}", run.stdout, run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("efatop: error: "), "{lines:?}");
    for needle in needles {
        assert!(lines[0].contains(needle), "`{needle}` missing from {lines:?}");
    }
    assert!(run.stdout.is_empty(), "nothing on stdout: {}", run.stdout);
}

#[test]
fn a_p5_shaped_run_shows_each_figure_against_the_published_one() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("p5");
    let write_fake = efatop(&["monitor", "--write-fake-p5", root.to_str().expect("utf-8")]);
    assert_eq!(write_fake.code, Some(0), "{}", write_fake.stderr);
    assert_eq!(std::fs::read_to_string(root.join("sys/class/dmi/id/product_name")).expect("product_name").trim(), "p5.48xlarge");
    let out = dir.path().join("p5.json");
    let run = run_write(&root, &out);

    // The table: the type and that tcp stood in for efa in the header, a share beside each Gbps, its legend.
    let stdout = &run.stdout;
    assert!(stdout.contains("# instance type p5.48xlarge (DMI product name); % of expected against its published figures (docs/expected.md), which were measured over efa: this run's provider is tcp, not efa"), "{stdout}");
    let cells = expected_cells(stdout);
    for cell in &cells {
        assert!(cell.trim_end_matches('*').parse::<f64>().is_ok_and(|p| p > 0.0), "{cell} in\n{stdout}");
    }
    assert!(stdout.contains("# % of expected: Gbps as a share of the published figure for p5.48xlarge at that configuration and size (seeds/write.md; docs/expected.md); * under 90%"), "{stdout}");

    // The file: the type, and per measurement the figure, its source and the share the table showed.
    let saved = results(&out);
    assert_eq!(saved["metadata"]["instance_type"], "p5.48xlarge");
    let notes = saved["metadata"]["notes"].to_string();
    assert!(notes.contains("the instance type is read from") && notes.contains("(--sysfs-root), not from this machine"), "{notes}");
    let measurements = saved["measurements"].as_array().expect("measurements");
    assert_eq!(measurements.len(), 2);
    let mut below = false;
    for (m, cell) in measurements.iter().zip(&cells) {
        let expected = &m["expected"];
        let figure = if m["size"] == 262_144 { 31.58 } else { 48.04 };
        assert_eq!(expected["gbps"], figure, "{m}");
        assert!(expected["source"].as_str().is_some_and(|s| s.starts_with("seeds/write.md: p5.48xlarge SinglePin ")), "{m}");
        let percent = expected["percent"].as_f64().expect("percent");
        assert!((percent - 100.0 * m["gbps"].as_f64().expect("gbps") / figure).abs() < 1e-6, "{m}");
        assert_eq!(cell, &format!("{percent:.1}{}", if percent < 90.0 { "*" } else { "" }));
        below |= percent < 90.0;
    }

    // `efatop report` prints the same shares.
    let report = efatop(&["report", out.to_str().expect("utf-8")]);
    assert_eq!(report.code, Some(0), "{}", report.stderr);
    assert_eq!(expected_cells(&report.stdout), cells);
    assert!(report.stdout.contains("# instance type p5.48xlarge (DMI product name)"), "{}", report.stdout);

    // compare --expected: each figure beside the published one; exit 1 when one is under 90% (tcp on a small
    // machine is far from efa's figures), as compare exits 1 on a regression.
    let compare = efatop(&["compare", "--expected", out.to_str().expect("utf-8")]);
    assert_eq!(compare.code, Some(i32::from(below)), "{}\n{}", compare.stdout, compare.stderr);
    assert!(compare.stdout.contains("against p5.48xlarge's published figures (docs/expected.md)"), "{}", compare.stdout);
    assert!(compare.stdout.contains("| Published (Gbps) | % of expected |"), "{}", compare.stdout);
    assert!(compare.stdout.contains("|            31.58 |") && compare.stdout.contains("|            48.04 |"), "{}", compare.stdout);
    assert!(compare.stdout.contains("# note: this run's provider is tcp, not efa"), "{}", compare.stdout);
    // A threshold of 100% accepts anything: exit 0.
    let lenient = efatop(&["compare", "--expected", "--threshold", "100%", out.to_str().expect("utf-8")]);
    assert_eq!(lenient.code, Some(0), "{}\n{}", lenient.stdout, lenient.stderr);
}

#[test]
fn a_type_without_published_figures_shows_a_dash_and_says_why() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    // Only the DMI product name: efatop keys on the type's name, not on a topology it may not know yet.
    let root = dir.path().join("p6-b300");
    std::fs::create_dir_all(root.join("sys/class/dmi/id")).expect("mkdir");
    std::fs::write(root.join("sys/class/dmi/id/product_name"), "p6-b300.48xlarge\n").expect("product_name");
    let out = dir.path().join("p6.json");
    let run = run_write(&root, &out);
    assert_eq!(expected_cells(&run.stdout), ["-", "-"]);
    assert!(run.stdout.contains("# % of expected -: p6-b300.48xlarge: no published figure for write\n"), "{}", run.stdout);
    assert!(run.stdout.contains("# instance type p6-b300.48xlarge (DMI product name): p6-b300.48xlarge: no published figure for write"), "{}", run.stdout);
    let saved = results(&out);
    for m in saved["measurements"].as_array().expect("measurements") {
        assert_eq!(m["expected"], serde_json::json!({"missing": "p6-b300.48xlarge: no published figure for write"}));
    }
    let compare = efatop(&["compare", "--expected", out.to_str().expect("utf-8")]);
    assert_one_line_error(&compare, &["--expected: p6-b300.48xlarge: no published figure for write", "docs/expected.md"]);
    // The same run against p5's figures, asked for by name.
    let against_p5 = efatop(&["compare", "--expected", "--instance-type", "p5.48xlarge", out.to_str().expect("utf-8")]);
    assert!(matches!(against_p5.code, Some(0 | 1)), "{}\n{}", against_p5.stdout, against_p5.stderr);
    assert!(against_p5.stdout.contains("against p5.48xlarge's published figures"), "{}", against_p5.stdout);
}

#[test]
fn compare_expected_refuses_bad_input_in_one_line() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("report/tests/fixtures/write-p5.json");
    let fixture = fixture.to_str().expect("utf-8");
    let types = "p4d.24xlarge, p4de.24xlarge, p5.48xlarge, p5e.48xlarge, p5en.48xlarge, p6-b200.48xlarge, p6-b300.48xlarge, p6e-gb200.36xlarge";
    // A file from before instance types were recorded: name the flag that fills the gap.
    assert_one_line_error(&efatop(&["compare", "--expected", fixture]), &["--expected", "records no instance type", "--instance-type", types]);
    assert_one_line_error(&efatop(&["compare", "--expected", "--instance-type", "p9.huge", fixture]), &["--instance-type p9.huge", types]);
    assert_one_line_error(&efatop(&["compare", "--expected", fixture, fixture]), &["--expected", "one file, not two"]);
    assert_one_line_error(&efatop(&["compare", fixture]), &["a baseline and a candidate", "--expected"]);
    assert_one_line_error(&efatop(&["compare", "--instance-type", "p5.48xlarge", fixture, fixture]), &["--instance-type", "--expected"]);
    // That seed-shaped p5 run (efa, 4 ranks, 4 channels) against p5's figures: SinglePin has them.
    let run = efatop(&["compare", "--expected", "--instance-type", "p5.48xlarge", fixture]);
    assert!(matches!(run.code, Some(0 | 1)), "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("| SinglePin |") && !run.stdout.contains("provider is"), "{}", run.stdout);
    assert!(run.stdout.contains("# % of expected -: p5.48xlarge: no published figure for write MultiPin"), "{}", run.stdout);
}
