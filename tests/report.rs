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
    let mut original: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("all2all-p5.json")).expect("fixture"),
    )
    .expect("JSON");
    // The old name is read as today's, and the run's notes say so.
    original["metadata"]["experiment"] = Value::from("alltoall");
    let notes = original["metadata"]["notes"].as_array_mut().expect("notes");
    notes.push(Value::from(
        "read as alltoall: the file names its experiment `all2all`, the name before efatop's rename (its configurations are today's)",
    ));
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
        &["is a `write` run", "an `alltoall` run", "--allow-different"],
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

/// The write-p5 fixture with `edit` applied, written to `name` in `scratch`.
fn edited(scratch: &Scratch, name: &str, edit: impl Fn(&mut Value)) -> String {
    let mut results: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("write-p5.json")).expect("fixture")).expect("JSON");
    edit(&mut results);
    let path = scratch.path(name);
    std::fs::write(&path, results.to_string()).expect("write");
    path
}

/// Refused by every reader of a results file: one line naming the file and each needle, exit 2, nothing
/// on stdout, no plot written.
fn refused_everywhere(scratch: &Scratch, path: &str, needles: &[&str]) {
    let mut with_file = vec![path];
    with_file.extend_from_slice(needles);
    let png = scratch.path("refused.png");
    for format in ["table", "csv", "md", "json"] {
        let run = efatop(&["report", path, "--format", format, "--plot", &png]);
        assert_one_line_error(&run, &with_file);
        assert!(run.stdout.is_empty(), "{format}: {}", run.stdout);
        assert!(!Path::new(&png).exists() && !Path::new(&format!("{png}.json")).exists(), "{format}: a plot was written");
    }
    let base = fixture("write-p5.json");
    for (a, b) in [(base.as_str(), path), (path, base.as_str())] {
        let run = efatop(&["compare", a, b]);
        assert_one_line_error(&run, &with_file);
        assert!(run.stdout.is_empty(), "{}", run.stdout);
    }
    let run = efatop(&["compare", "--expected", "--instance-type", "p5.48xlarge", path]);
    assert_one_line_error(&run, &with_file);
}

/// A figure no fabric produces (negative, not a number, moved in no time, beyond the run's links or any
/// memory) and a file claiming no ranks or channels are refused by report, compare (either side) and
/// compare --expected, naming the file and the field: a CI gate never passes them.
#[test]
fn impossible_figures_are_refused_naming_the_file_and_field() {
    let scratch = Scratch::new("impossible");
    let at = |results: &mut Value, config: &str, size: u64| -> usize {
        let measurements = results["measurements"].as_array().expect("measurements");
        measurements.iter().position(|m| m["config"] == config && m["size"] == size).expect("measured")
    };
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Edit, Vec<&str>)> = vec![
        (
            "negative.json",
            Box::new(move |r| {
                let i = at(r, "SinglePin", 256 << 10);
                r["measurements"][i]["gbps"] = Value::from(-5.0);
            }),
            vec!["(SinglePin 256K) gbps is -5: no run measures a negative figure"],
        ),
        (
            "negative-latency.json",
            Box::new(move |r| {
                let i = at(r, "MultiPin", 256 << 10);
                r["measurements"][i]["latency"]["p50_us"] = Value::from(-3.0);
            }),
            vec!["(MultiPin 256K) latency.p50_us is -3"],
        ),
        (
            "huge.json",
            Box::new(move |r| {
                let i = at(r, "RoundRobinPin", 256 << 10);
                r["measurements"][i]["gbps"] = Value::from(1e308);
            }),
            vec!["(RoundRobinPin 256K) gbps is 1e308 Gbps: above 500 Gbps", "4 channels of 100 Gbps"],
        ),
        (
            // 600 Gbps over 4 × 100 Gbps EFA links: more than the wire carries, far below any absolute bound.
            "beyond-links.json",
            Box::new(move |r| {
                let i = at(r, "MultiPin", 64 << 20);
                r["measurements"][i]["gbps"] = Value::from(600.0);
            }),
            vec!["(MultiPin 64M) gbps is 600 Gbps: above 500 Gbps"],
        ),
        (
            "no-time.json",
            Box::new(move |r| {
                let i = at(r, "SinglePin", 1 << 20);
                r["measurements"][i]["latency"]["mean_us"] = Value::from(0.0);
            }),
            vec!["(SinglePin 1M) latency.mean_us is 0 while 63.27 Gbps moved"],
        ),
        (
            "pair.json",
            Box::new(move |r| {
                let i = at(r, "SinglePin", 1 << 20);
                r["measurements"][i]["pairs"] = serde_json::json!([{"peers": [1], "gbps": 63.0, "mean_us": 131.0}, {"peers": [2], "gbps": -1.0, "mean_us": 131.0}]);
            }),
            vec!["(SinglePin 1M) pairs[1].gbps is -1"],
        ),
        ("no-ranks.json", Box::new(|r| r["metadata"]["ranks"] = Value::from(0)), vec!["metadata.ranks is 0"]),
        ("no-channels.json", Box::new(|r| r["metadata"]["channels"] = Value::from(0)), vec!["metadata.channels is 0"]),
        (
            "dead-link.json",
            Box::new(|r| r["metadata"]["nics"][2]["link_gbps"] = Value::from(0.0)),
            vec!["metadata.nics[2].link_gbps is 0 Gbps"],
        ),
    ];
    for (name, edit, needles) in &cases {
        let path = edited(&scratch, name, edit);
        refused_everywhere(&scratch, &path, needles);
    }
    // Not numbers JSON can hold: an exponent beyond f64, a string where a rate goes.
    let text = std::fs::read_to_string(fixture("write-p5.json")).expect("fixture");
    let first = text.find("\"gbps\": ").expect("a gbps field") + "\"gbps\": ".len();
    let end = first + text[first..].find(',').expect("the number ends");
    for (name, number) in [("exponent.json", "1e999"), ("nan.json", "\"NaN\""), ("inf.json", "\"inf\"")] {
        let path = scratch.path(name);
        std::fs::write(&path, format!("{}{number}{}", &text[..first], &text[end..])).expect("write");
        refused_everywhere(&scratch, &path, &["not an efatop results file"]);
    }
    // A sweep's figure beyond any memory, on shm (no link speed known): the absolute ceiling.
    let mut sweep: Value = serde_json::from_str(&std::fs::read_to_string(sweep_fixture()).expect("fixture")).expect("JSON");
    sweep["sweep"]["rounds"][1]["figures"][2]["steady_gbps"] = Value::from(2e5);
    let path = scratch.path("sweep-huge.json");
    std::fs::write(&path, sweep.to_string()).expect("write");
    let run = efatop(&["report", &path]);
    assert_one_line_error(&run, &[&path, "sweep.rounds[1].figures[2]", "steady_gbps is 200000 Gbps: above 100000 Gbps"]);
}

/// A FIFO, a device, a folder are refused before they are read (a FIFO without a writer would hang a
/// reader; /dev/zero never ends); a file over the cap is refused by its size; 100 MB within it is read and
/// refused by the parser in one line.
#[test]
fn report_refuses_what_is_not_a_results_file_or_too_large_at_once() {
    let scratch = Scratch::new("size");
    let fifo = scratch.path("fifo.json");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let base = fixture("write-p5.json");
    for (path, what) in [("/dev/zero", "a device"), (fifo.as_str(), "a FIFO"), (scratch.0.to_str().expect("utf-8"), "a folder")] {
        assert_one_line_error(&efatop(&["report", path]), &[path, &format!("not a regular file ({what})")]);
        assert_one_line_error(&efatop(&["compare", &base, path]), &[path, "not a regular file"]);
        assert_one_line_error(&efatop(&["compare", "--expected", "--instance-type", "p5.48xlarge", path]), &[path, "not a regular file"]);
    }
    // 1 GiB that takes no disk (sparse): refused by its size, before any byte is read.
    let sparse = scratch.path("sparse.json");
    std::fs::File::create(&sparse).expect("create").set_len(1 << 30).expect("set_len");
    assert_one_line_error(&efatop(&["report", &sparse]), &[&sparse, "larger than 256M (268435456 bytes)"]);
    // 100 MB within the cap: read, and refused by the parser at its first byte that is not a results file.
    let big = scratch.path("big.json");
    let mut bytes = b"{\"metadata\": {\"notes\": [".to_vec();
    bytes.resize(100_000_000, b'[');
    std::fs::write(&big, bytes).expect("write");
    assert_one_line_error(&efatop(&["report", &big]), &[&big, "not an efatop results file", "line 1"]);
}

/// The results file of a real 4-rank sweep over shm (tests/fixtures/v1): a report shows its verdict with
/// the suspects, every round, the per-pair figures slowest first, and CSV lists every figure.
fn sweep_fixture() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1/sweep-shm.json").display().to_string()
}

#[test]
fn report_on_a_sweep_shows_its_rounds_figures_and_suspects() {
    let run = efatop(&["report", &sweep_fixture()]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let out = &run.stdout;
    assert!(!out.contains("no measurements"), "{out}");
    assert!(out.contains("\nverdict: 2 suspects (1 node, 4 NICs checked)\n"), "{out}");
    assert!(out.contains("| nic | 0 | vm | - | shm | - | 14.65 | 21.19 | 1,2,3 |"), "{out}");
    assert!(out.contains("| nic | 3 | vm | - | shm | - | 14.23 | 21.19 | 0,1,2 |"), "{out}");
    // Three rounds, in order, with their slowest figure.
    let rounds: Vec<&str> = out.lines().filter(|l| l.starts_with("| 1 | pairing") || l.starts_with("| 2 | pairing") || l.starts_with("| 3 | retest")).collect();
    assert_eq!(rounds.len(), 3, "{out}");
    assert!(rounds[0].contains("| 2 | 4 |"), "2 pairs, 4 figures: {}", rounds[0]);
    // Per-pair figures, slowest first: 12 of 12.
    assert!(out.contains("\n# per-pair figures, slowest first: 12 of 12 figures\n"), "{out}");
    let figures: Vec<f64> = out
        .split("# per-pair figures")
        .nth(1)
        .expect("the figures")
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| round"))
        .map(|l| l.split('|').nth(5).expect("a rate").trim().parse().expect("a number"))
        .collect();
    assert_eq!(figures.len(), 12, "{out}");
    assert!(figures.windows(2).all(|w| w[0] <= w[1]), "slowest first: {figures:?}");
    assert!((figures[0] - 9.65).abs() < 0.01, "the retest of 2 → 3: {figures:?}");
    assert!(out.ends_with("# sweep: 12 figures in 3 rounds\n"), "{out}");
    let csv = efatop(&["report", &sweep_fixture(), "--format", "csv"]);
    assert_eq!(csv.code, Some(0), "{}", csv.stderr);
    let lines: Vec<&str> = csv.stdout.lines().collect();
    assert_eq!(lines[0], "round,kind,from,to,rail,to_rail,gbps,steady_gbps,p50_us,p99_us,retransmits");
    assert_eq!(lines.len(), 13, "{}", csv.stdout);
    assert!(lines[1].starts_with("1,pairing,0,3,0,0,13.51753224882239,14.23457900469581,37715.967,"), "{}", lines[1]);
    let md = efatop(&["report", &sweep_fixture(), "--format", "md"]);
    assert!(md.stdout.contains("\n## sweep\n") && md.stdout.contains("verdict: 2 suspects"), "{}", md.stdout);
}

/// A file from before the rename (experiment `all2all`) is read as alltoall, and every reader says so.
#[test]
fn an_old_all2all_file_is_read_as_alltoall_and_said_so() {
    let old = fixture("all2all-p5.json");
    let note = "read as alltoall: the file names its experiment `all2all`, the name before efatop's rename";
    let run = efatop(&["report", &old]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stdout.starts_with("# efatop alltoall — 4 ranks"), "{}", run.stdout);
    assert!(run.stdout.contains(&format!("# note: {note}")), "{}", run.stdout);
    let csv = efatop(&["report", &old, "--format", "csv"]);
    assert_eq!(csv.stderr, format!("efatop: note: {old}: {note} (its configurations are today's)\n"));
    // Against today's alltoall run it is one experiment (these two share no configuration and size).
    let today = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1/alltoall-shm.json").display().to_string();
    assert_one_line_error(&efatop(&["compare", &old, &today]), &["have no configuration and size in common"]);
    let compared = efatop(&["compare", &old, &old]);
    assert_eq!(compared.code, Some(0), "{}{}", compared.stdout, compared.stderr);
    assert_eq!(compared.stdout.matches(note).count(), 2, "both sides: {}", compared.stdout);
    // Held to p5's published alltoall figures (seeds/all2all.md) at 4M, the one size both have.
    let expected = efatop(&["compare", "--expected", "--instance-type", "p5.48xlarge", &old]);
    assert!(expected.code == Some(0) || expected.code == Some(1), "{}{}", expected.stdout, expected.stderr);
    assert!(expected.stdout.contains(&format!("# note: {old}: {note}")), "{}", expected.stdout);
    assert!(expected.stdout.contains("seeds/all2all.md: p5.48xlarge SingleDMA 4M"), "{}", expected.stdout);
}
