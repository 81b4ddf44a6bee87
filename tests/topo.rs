//! `efatop topo`: this machine's topology (no GPU needed), the fixtures through the real binary, and bad
//! input as one line naming the flag, exit code 2.

mod common;

use std::path::{Path, PathBuf};

use common::efatop;
use efatop_proto::output::{Line, TOPOLOGY_SCHEMA};

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("topology/fixtures").join(name).display().to_string()
}

/// The data of `topo --json`'s one line: a `topology` line (`efatop_proto::output::Line`), schema 2.
fn topology_line(stdout: &str) -> serde_json::Value {
    assert_eq!(stdout.lines().count(), 1, "one line:\n{stdout}");
    match efatop_testkit::parse_untyped(stdout.trim_end()).expect("a typed line") {
        Line::Topology(data) => {
            assert_eq!(data["schema_version"], TOPOLOGY_SCHEMA, "{stdout}");
            *data
        }
        other => panic!("not a topology line but a `{}` line: {stdout}", other.kind()),
    }
}

fn golden(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("topology/tests/golden").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn bad_input_is_one_line_and_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let malformed = dir.path().join("malformed.xml");
    std::fs::write(&malformed, "<topology><object type=\"Machine\"").unwrap();
    let not_xml = dir.path().join("notes.txt");
    std::fs::write(&not_xml, "this is not a topology\n").unwrap();
    let empty = dir.path().join("empty.xml");
    std::fs::write(&empty, "").unwrap();
    let [malformed, not_xml, empty] = [malformed, not_xml, empty].map(|p| p.display().to_string());
    let p5 = fixture("p5.48xlarge.xml");
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["topo", "--from-xml", "/nonexistent/p5.xml"],
            vec!["--from-xml /nonexistent/p5.xml", "cannot read", "No such file"],
        ),
        (vec!["topo", "--from-xml", &malformed], vec!["--from-xml", "malformed.xml", "not an hwloc XML topology"]),
        (vec!["topo", "--from-xml", &not_xml], vec!["--from-xml", "not an hwloc XML topology"]),
        (vec!["topo", "--from-xml", &empty], vec!["--from-xml", "not an hwloc XML topology"]),
        (vec!["topo", "--from-xml", "/"], vec!["--from-xml /", "cannot read"]),
        (vec!["topo", "--from-xml", &p5, "--gpu", "8"], vec!["--gpu 8", "this node has 8 GPUs (0-7)"]),
        (vec!["topo", "--from-xml", &p5, "--gpu", "x"], vec!["--gpu"]),
        (vec!["topo", "--from-xml", &p5, "--ranks", "0"], vec!["--ranks"]),
        (vec!["topo", "--from-xml"], vec!["--from-xml"]),
        (vec!["topo", "--gpu", "1", "--ranks", "2"], vec!["--gpu", "--ranks"]),
    ];
    for (args, needles) in &cases {
        let run = efatop(args);
        assert_eq!(run.code, Some(2), "{args:?}: stdout {} stderr {}", run.stdout, run.stderr);
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?} should print one line: {lines:?}");
        assert!(lines[0].starts_with("efatop: error: "), "{args:?}: {lines:?}");
        for needle in needles {
            assert!(lines[0].contains(needle), "{args:?}: `{needle}` missing from {lines:?}");
        }
        assert!(run.stdout.is_empty(), "{args:?}: {}", run.stdout);
    }
}

/// Network interfaces backed by a PCI device, as the kernel lists them: what hwloc must show.
fn pci_interfaces() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/sys/class/net") else { return Vec::new() };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            let device = e.path().join("device");
            let pci = |c: std::path::Component<'_>| c.as_os_str().to_string_lossy().starts_with("pci");
            std::fs::canonicalize(device).is_ok_and(|p| p.components().any(pci))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// PCI addresses of NVIDIA display/3D controllers, from sysfs.
fn nvidia_gpus() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/sys/bus/pci/devices") else { return Vec::new() };
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default().trim().to_string();
    let mut found: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| read(e.path().join("vendor")) == "0x10de" && read(e.path().join("class")).starts_with("0x03"))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    found
}

#[test]
fn this_machine_lists_its_real_nics() {
    let run = efatop(&["topo"]);
    assert_eq!(run.code, Some(0), "stderr: {}", run.stderr);
    assert!(run.stderr.is_empty(), "{}", run.stderr);
    for name in pci_interfaces() {
        assert!(run.stdout.contains(&name), "interface {name} missing:\n{}", run.stdout);
    }
    let gpus = nvidia_gpus();
    if gpus.is_empty() {
        assert!(run.stdout.contains("No GPUs"), "{}", run.stdout);
    }
    for bus_id in &gpus {
        assert!(run.stdout.contains(bus_id.as_str()), "GPU {bus_id} missing:\n{}", run.stdout);
    }
    assert!(run.stdout.contains("NUMA nodes:"), "{}", run.stdout);

    let run = efatop(&["topo", "--json", "--ranks", "2"]);
    assert_eq!(run.code, Some(0), "stderr: {}", run.stderr);
    let json = topology_line(&run.stdout);
    assert_eq!(json["source"], "this machine");
    assert_eq!(json["gpus"].as_array().unwrap().len(), gpus.len());
    let nics: Vec<&str> = json["nics"].as_array().unwrap().iter().filter_map(|n| n["name"].as_str()).collect();
    for name in pci_interfaces() {
        assert!(nics.contains(&name.as_str()), "{name} not in {nics:?}");
    }
    assert_eq!(json["placement"].as_array().unwrap().len(), 2);
}

#[test]
fn fixtures_print_what_the_golden_files_hold() {
    for name in [
        "p5.48xlarge",
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p5en.48xlarge",
        "p6-b200.48xlarge",
        "p6-b300.48xlarge",
        "p6e-gb200.36xlarge",
    ] {
        let xml = fixture(&format!("{name}.xml"));
        let run = efatop(&["topo", "--from-xml", &xml]);
        assert_eq!(run.code, Some(0), "{name}: {}", run.stderr);
        // Not assert_eq: a 30 kB diff helps nobody; the library's golden test shows the first bad line.
        let text = &run.stdout;
        assert!(*text == golden(&format!("{name}.txt")), "{name}: text differs from the golden file:\n{text}");
        // `--json`: one `topology` line, type first, `schema_version` 2 first in its data, then the golden
        // topology's fields in their order.
        let run = efatop(&["topo", "--from-xml", &xml, "--json"]);
        assert_eq!(run.code, Some(0), "{name}: {}", run.stderr);
        let topology: efatop_topology::NodeTopology = serde_json::from_str(&golden(&format!("{name}.json"))).expect("the golden topology");
        let fields = serde_json::to_string(&topology).expect("serializes");
        let expected = format!(r#"{{"type":"topology","data":{{"schema_version":2,{}}}"#, &fields[1..]) + "\n";
        assert!(run.stdout == expected, "{name}: JSON differs from the golden file:\n{}", run.stdout);
        // `--ranks 8`: the topology, a blank line, then the placement table the library's golden holds.
        let run = efatop(&["topo", "--from-xml", &xml, "--ranks", "8"]);
        assert_eq!(run.code, Some(0), "{name}: {}", run.stderr);
        let expected = format!("{}\n{}", golden(&format!("{name}.txt")), golden(&format!("{name}.ranks8.txt")));
        assert!(run.stdout == expected, "{name}: --ranks 8 differs from the golden files:\n{}", run.stdout);
        // Its JSON carries the same 8 placements, each rank on GPU (rank mod GPUs) with that GPU's channels.
        let run = efatop(&["topo", "--from-xml", &xml, "--ranks", "8", "--json"]);
        let json = topology_line(&run.stdout);
        let placements = json["placement"].as_array().expect("placement");
        assert_eq!(placements.len(), 8, "{name}");
        let gpus = json["gpus"].as_array().expect("gpus");
        for (rank, placement) in placements.iter().enumerate() {
            let gpu = &gpus[rank % gpus.len()];
            assert_eq!(placement["gpu"], gpu["index"], "{name} rank {rank}");
            let names: Vec<&serde_json::Value> = gpu["preferred_nics"]
                .as_array()
                .expect("preferred")
                .iter()
                .map(|k| &json["nics"][k.as_u64().expect("index") as usize]["name"])
                .collect();
            assert_eq!(placement["nics"].as_array().expect("nics").iter().collect::<Vec<_>>(), names, "{name} rank {rank}");
        }
    }
}

/// The ENA-only card of a p6-b300 and the second device of a p6e-gb200 physical NIC are no rank's NIC.
#[test]
fn no_rank_gets_an_ena_or_the_second_half_of_a_physical_nic() {
    let run = efatop(&["topo", "--from-xml", &fixture("p6-b300.48xlarge.xml"), "--ranks", "8"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let table = run.stdout.split("Placement of local ranks").nth(1).expect("placement table");
    assert!(!table.contains("ens5"), "{table}");
    assert!(run.stdout.contains("NIC0   ens5") && run.stdout.contains("no GPU channel"), "{}", run.stdout);
    let run = efatop(&["topo", "--from-xml", &fixture("p6e-gb200.36xlarge.xml"), "--ranks", "4"]);
    let table = run.stdout.split("Placement of local ranks").nth(1).expect("placement table");
    assert!(table.contains("rdmap10s0,rdmap12s0    400"), "{table}");
    assert!(!table.contains("rdmap11s0"), "{table}");
    assert!(run.stdout.contains("16 devices on 8 physical NICs"), "{}", run.stdout);
}

#[test]
fn placement_of_local_ranks() {
    let p5 = fixture("p5.48xlarge.xml");
    let run = efatop(&["topo", "--from-xml", &p5, "--ranks", "8"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stdout.contains("Placement of local ranks"), "{}", run.stdout);
    assert!(run.stdout.contains("rdmap198s0,rdmap199s0,rdmap200s0,rdmap201s0"), "{}", run.stdout);

    let run = efatop(&["topo", "--from-xml", &p5, "--gpu", "3", "--json"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let json = topology_line(&run.stdout);
    let placement = &json["placement"][0];
    assert_eq!(placement["gpu"], 3);
    assert_eq!(placement["gpu_pci_bus_id"], "0000:86:00.0");
    assert_eq!(placement["nics"], serde_json::json!(["rdmap130s0", "rdmap131s0", "rdmap132s0", "rdmap133s0"]));
    assert_eq!(placement["cpus"], "0-47,96-143");
}

#[test]
fn help_lists_topo() {
    let run = efatop(&["--help"]);
    assert!(run.stdout.contains("topo"), "{}", run.stdout);
    let run = efatop(&["topo", "--help"]);
    assert_eq!(run.code, Some(0));
    for flag in ["--from-xml", "--json", "--ranks", "--gpu"] {
        assert!(run.stdout.contains(flag), "{flag} missing:\n{}", run.stdout);
    }
}
