//! Results files and recordings of the version before typed facts (results schema 1, stream version 1),
//! made by that efatop (tests/fixtures/v1: write, alltoall and sendrecv over shm, a sweep, a one-node
//! monitor), still load: `report` prints the same table, CSV and Markdown, `compare` the same comparison,
//! and `replay --json` the same lines, with fields added where the format grew and none dropped.

mod common;

use std::path::{Path, PathBuf};

use common::efatop;
use efatop_testkit::json_lines;
use efatop_proto::output::Untyped;
use serde::Deserialize;
use serde_json::Value;

const RUNS: [&str; 4] = ["write-shm", "alltoall-shm", "sendrecv-shm", "sweep-shm"];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1").join(name)
}

fn golden(name: &str) -> String {
    let path = fixture("golden").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn path_text(name: &str) -> String {
    fixture(name).display().to_string()
}

/// `new` says everything `old` said: every field of every object with the same value (numbers as
/// numbers), arrays element by element; `new` may have more fields.
fn says_all_of(new: &Value, old: &Value, at: &str) {
    match (new, old) {
        (Value::Object(new), Value::Object(old)) => {
            for (key, value) in old {
                let inner = new.get(key).unwrap_or_else(|| panic!("{at}.{key} dropped"));
                says_all_of(inner, value, &format!("{at}.{key}"));
            }
        }
        (Value::Array(new), Value::Array(old)) => {
            assert_eq!(new.len(), old.len(), "{at}: length");
            for (index, (new, old)) in new.iter().zip(old).enumerate() {
                says_all_of(new, old, &format!("{at}[{index}]"));
            }
        }
        (Value::Number(new), Value::Number(old)) => assert_eq!(new.as_f64(), old.as_f64(), "{at}"),
        (new, old) => assert_eq!(new, old, "{at}"),
    }
}

fn lines(text: &str) -> Vec<Value> {
    text.lines().map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"))).collect()
}

/// The goldens are the output of the binary before the typed facts, plus what was added on purpose since
/// (each file's `status` line, `compare`'s line per file, "1 NIC" for "1 NIC(s)"; a sweep's verdict, rounds and
/// per-pair figures, where it said "no measurements"): nothing else changed.
#[test]
fn report_prints_the_same_table_csv_and_markdown() {
    for run in RUNS {
        for (format, extension) in [("table", "table"), ("csv", "csv"), ("md", "md")] {
            let printed = efatop(&["report", "--format", format, &path_text(&format!("{run}.json"))]);
            assert_eq!(printed.code, Some(0), "{run} {format}: {}", printed.stderr);
            assert_eq!(printed.stdout, golden(&format!("{run}.report.{extension}")), "{run} {format}");
        }
    }
}

#[test]
fn report_json_is_the_file_as_it_was() {
    for run in RUNS {
        let printed = efatop(&["report", "--format", "json", &path_text(&format!("{run}.json"))]);
        assert_eq!(printed.code, Some(0), "{run}: {}", printed.stderr);
        let new: Value = serde_json::from_str(&printed.stdout).expect("JSON");
        let old: Value = serde_json::from_slice(&std::fs::read(fixture(&format!("{run}.json"))).expect("the file")).expect("JSON");
        says_all_of(&new, &old, run);
        says_all_of(&old, &new, run);
        assert!(new.get("schema_version").is_none(), "{run}: a file from before the version is printed as it was");
    }
}

#[test]
fn compare_prints_the_same_comparison() {
    for run in ["write-shm", "alltoall-shm", "sendrecv-shm"] {
        let file = path_text(&format!("{run}.json"));
        let compared = efatop(&["compare", &file, &file]);
        assert_eq!(compared.code, Some(0), "{run}: {}", compared.stderr);
        // The golden file was made in the fixtures' folder: the files are named without it.
        let printed = compared.stdout.replace(&format!("{}/", fixture("").display()).replace("//", "/"), "");
        assert_eq!(printed, golden(&format!("{run}.compare.txt")), "{run}");
    }
    // A sweep has no measurements to compare, then and now.
    let sweep = path_text("sweep-shm.json");
    let compared = efatop(&["compare", &sweep, &sweep]);
    assert_eq!(compared.code, Some(2), "{}", compared.stderr);
    assert!(compared.stderr.contains("no configuration and size in common"), "{}", compared.stderr);
}

#[test]
fn replay_prints_the_same_lines() {
    for run in RUNS {
        let replayed = efatop(&["replay", "--json", &path_text(&format!("{run}.efarec"))]);
        let expected_code = if run == "sweep-shm" { 3 } else { 0 };
        assert_eq!(replayed.code, Some(expected_code), "{run}: {}", replayed.stderr);
        json_lines(&replayed.stdout);
        let (new, old) = (lines(&replayed.stdout), lines(&golden(&format!("{run}.replay.jsonl"))));
        assert_eq!(new.len(), old.len(), "{run}: lines");
        for (index, (new, old)) in new.iter().zip(&old).enumerate() {
            says_all_of(new, old, &format!("{run} line {index}"));
        }
    }
}

/// A monitor's recording of version 1 replays: its node lines carry the same reads, in the shape
/// `efatop monitor --json` prints (NICs with `kind`, the GPU panel with `state`).
#[test]
fn a_version_1_monitor_recording_replays_its_reads() {
    let replayed = efatop(&["replay", "--json", &path_text("monitor-lo.efarec")]);
    assert_eq!(replayed.code, Some(0), "{}", replayed.stderr);
    // Every line replayed reads as this version's line.
    json_lines(&replayed.stdout);
    let (new, old) = (lines(&replayed.stdout), lines(&golden("monitor-lo.replay.jsonl")));
    assert_eq!(new.len(), old.len());
    let mut nodes = 0;
    for (new, old) in new.iter().zip(&old) {
        let [new_line, old_line] = [new, old].map(|line| Untyped::deserialize(line).expect("a line's envelope"));
        assert_eq!(new_line.kind, old_line.kind);
        if old_line.kind != "node" {
            says_all_of(new, old, "monitor line");
            continue;
        }
        nodes += 1;
        let (new, old) = (&new_line.data, &old_line.data);
        for field in ["rank", "seq", "drops", "host", "t_ms", "interval_ms"] {
            assert_eq!(new[field], old[field], "{field}");
        }
        for (new, old) in new["topology_gpus"].as_array().expect("GPUs").iter().zip(old["topology_gpus"].as_array().expect("GPUs")) {
            assert_eq!((&new["index"], &new["pci_bus_id"], &new["model"]), (&old["index"], &old["pci_bus_id"], &old["model"]));
        }
        let (new_nics, old_nics) = (new["nics"].as_array().expect("NICs"), old["nics"].as_array().expect("NICs"));
        assert_eq!(new_nics.len(), old_nics.len());
        for (new, old) in new_nics.iter().zip(old_nics) {
            for field in ["name", "present", "gpus", "link_gbps", "tx_gbps", "rx_gbps", "errors", "errors_delta", "retransmits"] {
                assert_eq!(new[field], old[field], "{field}");
            }
            assert_eq!(new["kind"], if old["rdma"] == true { "rdma" } else { "net" });
        }
        assert_eq!(new["gpus"]["state"], "unavailable");
        assert_eq!(new["gpus"]["reason"], old["gpus"]["Unavailable"]);
    }
    assert_eq!(nodes, 3);
}
