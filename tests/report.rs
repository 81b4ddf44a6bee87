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
    let run = efatop(&["report", &broken]);
    assert_one_line_error(&run, &[&broken, "not an efatop results file"]);
    assert_eq!(run.stderr.matches("not an efatop results file").count(), 1, "said once: {}", run.stderr);
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
        &["is a `write` run", "an `all2all` run", "--allow-different"],
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

/// The write-p5 fixture with its status set, and only the measurements `keep` keeps.
fn with_status(scratch: &Scratch, name: &str, status: &Value, keep: impl Fn(&Value) -> bool) -> (String, usize) {
    let mut results: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("write-p5.json")).expect("fixture")).expect("JSON");
    results["measurements"].as_array_mut().expect("measurements").retain(keep);
    results["status"] = status.clone();
    let kept = results["measurements"].as_array().expect("measurements").len();
    let path = scratch.path(name);
    std::fs::write(&path, results.to_string()).expect("write");
    (path, kept)
}

/// `report` and `compare` say how each run ended (complete, failed and why, not ended) and claim only the
/// sizes a file holds: "every size verified" is for a complete run.
#[test]
fn report_and_compare_say_how_each_run_ended_and_claim_only_the_sizes_it_holds() {
    let scratch = Scratch::new("status");
    let every = |_: &Value| true;
    let (complete, all) = with_status(&scratch, "complete.json", &serde_json::json!({"state": "complete"}), every);
    let run = efatop(&["report", &complete]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stdout.contains("\n# status: complete\n"), "{}", run.stdout);
    assert!(run.stdout.ends_with("# every size verified: all bytes received matched the sender's pattern\n"), "{}", run.stdout);

    let why = "rank 3 (vm) stopped responding: no telemetry for 5.1 s";
    let small = |m: &Value| m["size"].as_u64().is_some_and(|size| size <= 1 << 20);
    let (failed, kept) = with_status(&scratch, "failed.json", &serde_json::json!({"state": "failed", "reason": why}), small);
    assert!(kept > 0 && kept < all);
    let run = efatop(&["report", &failed]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stdout.contains(&format!("\n# status: FAILED: {why}\n")), "{}", run.stdout);
    assert!(!run.stdout.contains("every size verified"), "{}", run.stdout);
    assert!(
        run.stdout.ends_with(&format!(
            "# only {kept} measurements (3 sizes, 256K..1M) measured before the run failed, each verified: all bytes received \
             matched the sender's pattern\n"
        )),
        "{}",
        run.stdout
    );
    let markdown = efatop(&["report", "--format", "md", &failed]);
    assert!(markdown.stdout.contains(&format!("- **status:** FAILED: {why}\n")), "{}", markdown.stdout);

    let (running, _) = with_status(&scratch, "running.json", &serde_json::json!({"state": "running"}), small);
    let run = efatop(&["report", &running]);
    assert!(run.stdout.contains("# status: not ended: still running, or cut off"), "{}", run.stdout);
    assert!(!run.stdout.contains("every size verified"), "{}", run.stdout);
    assert!(run.stdout.contains("measured before the run stopped writing this file"), "{}", run.stdout);

    let compared = efatop(&["compare", &complete, &failed]);
    assert_eq!(compared.code, Some(0), "{}{}", compared.stdout, compared.stderr);
    assert!(
        compared.stdout.contains(&format!("\n# baseline {complete}: complete; {all} measurements (9 sizes, 256K..64M)\n")),
        "{}",
        compared.stdout
    );
    assert!(
        compared.stdout.contains(&format!("\n# candidate {failed}: FAILED: {why}; {kept} measurements (3 sizes, 256K..1M)\n")),
        "{}",
        compared.stdout
    );
}

/// The results file of a run that failed before its ranks met (an unknown provider): no hosts, NICs or
/// provider stack, and the report prints none of them empty.
#[test]
fn the_report_of_a_run_that_never_started_prints_no_empty_hosts_or_nics() {
    let scratch = Scratch::new("early");
    let why = "no nosuchprov interface offers reliable-datagram (RDM) endpoints here; `fi_info -l` lists the providers this libfabric has";
    let early = serde_json::json!({
        "metadata": {
            "efatop_version": "0.1.0", "libfabric_version": "1.17", "experiment": "write", "provider": "nosuchprov",
            "provider_stack": "", "ranks": 2, "hosts": [], "channels": 0, "distinct_nics": 0, "nics": [],
            "link_gbps": null, "link_source": "", "memory": "", "window": 1, "warmup": 3, "iters": 20, "notes": [],
            "started_unix_s": 1_795_611_240, "placements": [], "hang_timeout_s": 60
        },
        "configs": [],
        "measurements": [],
        "status": {"state": "failed", "reason": why}
    });
    let path = scratch.path("early.json");
    std::fs::write(&path, early.to_string()).expect("write");
    let run = efatop(&["report", &path]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.stdout,
        format!(
            "# efatop write — 2 ranks, provider nosuchprov asked for, libfabric 1.17: the run ended before its ranks met (no \
             hosts, NICs or channels known)\n# window 1, warmup 3, iters 20\n# status: FAILED: {why}\n# no measurements in this file\n"
        )
    );
    let markdown = efatop(&["report", "--format", "md", &path]).stdout;
    for absent in ["0 hosts", "()", "NIC(s)", " [nosuchprov]", "**memory:** \n"] {
        assert!(!markdown.contains(absent), "`{absent}` in {markdown}");
    }
    assert!(markdown.contains("- **hosts:** unknown: the run ended before its ranks met\n"), "{markdown}");
    assert!(markdown.contains(&format!("- **status:** FAILED: {why}")), "{markdown}");
}
