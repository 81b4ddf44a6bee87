//! Every text format of a saved run, against golden files made from the fixtures.

mod common;

use common::{golden, load};
use efatop_report::{render, Format};

#[test]
fn csv_has_every_field_of_every_measurement() {
    let results = load("write-p5.json");
    let csv = render(&results, Format::Csv);
    golden("write-p5.csv", &csv);
    // One header and one row per measurement, in column order then size order.
    assert_eq!(csv.lines().count(), 1 + results.measurements.len());
    let second = csv.lines().nth(2).expect("a second row");
    assert!(
        second.starts_with("SinglePin,524288,131072,48.04,48,"),
        "{second}"
    );
}

#[test]
fn markdown_documents_metadata_and_each_configuration() {
    golden(
        "write-p5.md",
        &render(&load("write-p5.json"), Format::Markdown),
    );
    let markdown = render(&load("all2all-p5.json"), Format::Markdown);
    golden("all2all-p5.md", &markdown);
    // The largest size's pair matrix follows each configuration's table.
    assert_eq!(
        markdown.matches("Pair bandwidth at 4M").count(),
        2,
        "{markdown}"
    );
}

#[test]
fn table_is_the_header_and_seed_table_a_run_prints() {
    let results = load("write-p5.json");
    let table = render(&results, Format::Table);
    let header = efatop_report::text::render_header(&results.metadata, &results.sizes());
    let seed_table = efatop_report::text::render_table(&results);
    assert_eq!(table, format!("{header}\n{seed_table}# every size verified: all bytes received matched the sender's pattern\n"));
    assert!(seed_table.contains("SinglePin (Gbps)"), "{seed_table}");
}

#[test]
fn unverified_sizes_are_named_under_the_table() {
    let mut results = load("write-p5.json");
    results.measurements[4].verified = false;
    let table = render(&results, Format::Table);
    assert!(
        table.ends_with("# NOT verified: MultiPin 512K\n"),
        "{table}"
    );
}

#[test]
fn json_reads_back_as_the_same_results() {
    let results = load("all2all-p5.json");
    let json = render(&results, Format::Json);
    let back: efatop_proto::RunResults = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(back, results);
}

#[test]
fn csv_quotes_a_config_name_with_a_comma() {
    let mut results = load("write-p5.json");
    let odd = efatop_proto::Column::Other("Single,\"Pin\"".into());
    for m in &mut results.measurements {
        if m.config.to_string() == "SinglePin" {
            m.config = odd.clone();
        }
    }
    results.configs[0] = odd;
    let csv = render(&results, Format::Csv);
    assert!(
        csv.lines()
            .nth(1)
            .expect("row")
            .starts_with("\"Single,\"\"Pin\"\"\",262144,"),
        "{csv}"
    );
}

#[test]
fn same_host_pairs_are_marked_only_where_the_shm_shortcut_was_allowed() {
    // The p5 all-to-all fixture's 4 ranks, seen as two per host. Nothing is marked unless the run says
    // same-host pairs could take libfabric's shm shortcut (efa with --allow-shm).
    let mut results = load("all2all-p5.json");
    assert!(!render(&results, Format::Markdown).contains("(same host)"));
    let hosts: Vec<String> = ["p5-node-0", "p5-node-0", "p5-node-1", "p5-node-1"].map(String::from).to_vec();
    assert_eq!(hosts.len(), results.pair_matrices[0].gbps.len());
    for matrix in &mut results.pair_matrices {
        matrix.same_host = efatop_proto::results::PairMatrix::same_host_pairs(&hosts);
    }
    let markdown = render(&results, Format::Markdown);
    let matrix = markdown.split("Pair bandwidth at 4M").nth(1).expect("a matrix");
    let same_host_cells = hosts
        .iter()
        .enumerate()
        .flat_map(|(a, ha)| hosts.iter().enumerate().filter(move |(b, hb)| a != *b && ha == *hb))
        .count();
    let table = matrix.split("\n\n").nth(1).expect("the matrix table");
    assert_eq!(same_host_cells, 4);
    assert_eq!(table.matches("(same host)").count(), same_host_cells, "{matrix}");
    assert!(matrix.contains("memcpy, not the NIC"), "{matrix}");
    // And the JSON a pair_matrix line carries says the same, per cell.
    let json = serde_json::to_value(&results.pair_matrices[0]).expect("json");
    assert_eq!(json["same_host"][0][0], false);
}
