//! `efatop report` and `efatop compare` as a user runs them, on the fixture runs in
//! report/tests/fixtures: every format, a plot, and compare's exit codes (0 same, 1 regressed, 2 bad input).

mod common;

use std::path::{Path, PathBuf};

use common::efatop;
use serde_json::Value;

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("report/tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

fn golden(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("report/tests/golden")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("efatop-cli-report-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Self(dir)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One line on stderr, starting as every efatop error does, containing each needle; exit code 2.
fn assert_one_line_error(run: &common::Run, needles: &[&str]) {
    assert_eq!(
        run.code,
        Some(2),
        "stdout {} stderr {}",
        run.stdout,
        run.stderr
    );
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("efatop: error: "), "{lines:?}");
    for needle in needles {
        assert!(
            lines[0].contains(needle),
            "`{needle}` missing from {lines:?}"
        );
    }
}

#[test]
fn report_prints_the_seed_table_by_default() {
    let run = efatop(&["report", &fixture("write-p5.json")]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stdout
            .starts_with("# efatop write — 4 ranks on 4 hosts"),
        "{}",
        run.stdout
    );
    let header = run
        .stdout
        .lines()
        .find(|l| l.starts_with("| Size"))
        .expect("a table header");
    assert!(
        header.contains("SinglePin (Gbps)") && header.contains("RoundRobinPin (Gbps)"),
        "{header}"
    );
    let row = run
        .stdout
        .lines()
        .find(|l| l.starts_with("|  64M"))
        .expect("the 64M row");
    assert!(
        row.contains("96.61") && row.contains("366.64") && row.contains("284.74"),
        "{row}"
    );
    assert!(run
        .stdout
        .ends_with("# every size verified: all bytes received matched the sender's pattern\n"));
}

#[test]
fn report_formats_match_the_golden_files() {
    let run = efatop(&["report", &fixture("write-p5.json"), "--format", "csv"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, golden("write-p5.csv"));
    let run = efatop(&["report", &fixture("all2all-p5.json"), "--format", "md"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, golden("all2all-p5.md"));
    let run = efatop(&["report", &fixture("all2all-p5.json"), "--format", "json"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let printed: Value = serde_json::from_str(&run.stdout).expect("JSON");
    let original: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("all2all-p5.json")).expect("fixture"),
    )
    .expect("JSON");
    assert_eq!(printed, original);
}

/// Width and height from a PNG's IHDR chunk, which always comes first.
fn png_size(path: &str) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{path} is not a PNG");
    assert_eq!(&bytes[12..16], b"IHDR");
    let word =
        |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    (word(16), word(20))
}

#[test]
fn report_plot_writes_the_png_and_its_sidecar() {
    let scratch = Scratch::new("plot");
    let png = scratch.path("all2all.png");
    let run = efatop(&[
        "report",
        &fixture("all2all-p5.json"),
        "--plot",
        &png,
        "--format",
        "csv",
    ]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stdout.starts_with("config,size,"),
        "the format is printed as well: {}",
        run.stdout
    );
    assert!(
        run.stderr.contains(&format!("plot written to {png}")),
        "{}",
        run.stderr
    );
    assert_eq!(png_size(&png), (1600, 656 + 560));
    let sidecar: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{png}.json")).expect("sidecar"))
            .expect("JSON");
    assert_eq!(sidecar["charts"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        sidecar["charts"][0]["series"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(sidecar["heatmaps"].as_array().map(Vec::len), Some(2));
}

#[test]
fn a_missing_font_is_a_clear_error() {
    let scratch = Scratch::new("font");
    let png = scratch.path("nofont.png");
    let output = common::efatop_in(&scratch.0)
        .args(["report", &fixture("write-p5.json"), "--plot", &png])
        .env("EFATOP_FONT", "/nonexistent/font.ttf")
        .output()
        .expect("run efatop");
    let run = common::Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        elapsed: std::time::Duration::ZERO,
    };
    assert_one_line_error(
        &run,
        &[
            "--plot",
            "no font for plot text",
            "/nonexistent/font.ttf",
            "EFATOP_FONT",
        ],
    );
    assert!(!Path::new(&png).exists());
}

#[test]
fn report_bad_input_ends_in_one_line_and_exit_code_2() {
    let scratch = Scratch::new("bad");
    let broken = scratch.path("broken.json");
    std::fs::write(&broken, "{\"configs\": [").expect("write");
    assert_one_line_error(
        &efatop(&["report", "/nonexistent/run.json"]),
        &["/nonexistent/run.json", "cannot read"],
    );
    assert_one_line_error(
        &efatop(&["report", &broken]),
        &[&broken, "not an efatop results file"],
    );
    assert_one_line_error(
        &efatop(&["report", &fixture("write-p5.json"), "--format", "xml"]),
        &["--format", "possible values: table, csv, md, json"],
    );
    assert_one_line_error(
        &efatop(&[
            "report",
            &fixture("write-p5.json"),
            "--plot",
            "/nonexistent/dir/p.png",
        ]),
        &["--plot", "/nonexistent/dir/p.png", "cannot write"],
    );
}

#[test]
fn compare_exit_codes_gate_on_regressions() {
    let scratch = Scratch::new("compare");
    let baseline = fixture("write-p5.json");
    let same = efatop(&["compare", &baseline, &baseline]);
    assert_eq!(same.code, Some(0), "{}{}", same.stdout, same.stderr);
    assert!(
        same.stdout
            .ends_with("# no regression beyond 5% (27 compared)\n"),
        "{}",
        same.stdout
    );

    // Plant a 10% bandwidth drop in one configuration and size.
    let mut results: Value =
        serde_json::from_str(&std::fs::read_to_string(&baseline).expect("fixture")).expect("JSON");
    let planted = results["measurements"]
        .as_array_mut()
        .expect("measurements")
        .iter_mut()
        .find(|m| m["config"] == "RoundRobinPin" && m["size"] == 8 << 20)
        .expect("RoundRobinPin 8M");
    planted["gbps"] = Value::from(planted["gbps"].as_f64().expect("gbps") * 0.9);
    let candidate = scratch.path("candidate.json");
    std::fs::write(&candidate, results.to_string()).expect("write");
    let regressed = efatop(&["compare", &baseline, &candidate]);
    assert_eq!(
        regressed.code,
        Some(1),
        "{}{}",
        regressed.stdout,
        regressed.stderr
    );
    let flagged: Vec<&str> = regressed
        .stdout
        .lines()
        .filter(|l| l.contains("REGRESSED ("))
        .collect();
    assert_eq!(flagged.len(), 1, "{}", regressed.stdout);
    assert!(
        flagged[0].contains("RoundRobinPin |   8M") && flagged[0].contains("-10.0%"),
        "{}",
        flagged[0]
    );
    assert!(
        regressed
            .stdout
            .ends_with("# REGRESSED: 1 of 27 beyond 5%: RoundRobinPin 8M\n"),
        "{}",
        regressed.stdout
    );
    // A looser gate lets the same drop through.
    assert_eq!(
        efatop(&["compare", &baseline, &candidate, "--threshold", "12%"]).code,
        Some(0)
    );

    assert_one_line_error(
        &efatop(&["compare", &baseline, "/nonexistent/b.json"]),
        &["/nonexistent/b.json"],
    );
    assert_one_line_error(
        &efatop(&["compare", &baseline, &candidate, "--threshold", "lots"]),
        &["--threshold", "not a percentage"],
    );
    assert_one_line_error(
        &efatop(&["compare", &baseline, &fixture("all2all-p5.json")]),
        &["`write` run", "`all2all` run", "--allow-different"],
    );
    assert_one_line_error(
        &efatop(&[
            "compare",
            &baseline,
            &fixture("all2all-p5.json"),
            "--allow-different",
        ]),
        &["nothing to compare"],
    );
}
