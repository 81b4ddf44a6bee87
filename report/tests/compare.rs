//! `compare`: a planted regression is flagged, an identical pair passes, and sizes measured on one side
//! only are listed.

mod common;

use common::{fixture, golden, load, Scratch};
use efatop_report::compare::{compare_files, Regression};
use efatop_report::{compare, ReportError};

#[test]
fn identical_runs_pass() {
    let results = load("write-p5.json");
    let comparison = compare(&results, &results, 5.0);
    assert!(!comparison.regressed());
    assert_eq!(comparison.deltas.len(), results.measurements.len());
    assert!(comparison
        .deltas
        .iter()
        .all(|d| d.gbps_change_percent == Some(0.0)));
    assert!(comparison
        .render("a.json", "a.json")
        .ends_with("# no regression beyond 5% (27 compared)\n"));
}

#[test]
fn a_planted_ten_percent_bandwidth_drop_is_flagged() {
    let baseline = load("write-p5.json");
    let mut candidate = baseline.clone();
    let planted = candidate
        .measurements
        .iter_mut()
        .find(|m| m.config.to_string() == "MultiPin" && m.size == 4 << 20)
        .expect("MultiPin 4M");
    planted.gbps *= 0.9;
    let comparison = compare(&baseline, &candidate, 5.0);
    assert!(comparison.regressed());
    let flagged: Vec<_> = comparison
        .deltas
        .iter()
        .filter(|d| !d.regressions.is_empty())
        .collect();
    assert_eq!(flagged.len(), 1);
    assert_eq!(
        (flagged[0].config.to_string(), flagged[0].size),
        ("MultiPin".to_string(), 4 << 20)
    );
    assert_eq!(flagged[0].regressions, vec![Regression::Bandwidth]);
    assert!((flagged[0].gbps_change_percent.expect("a change") + 10.0).abs() < 1e-9);
    golden(
        "compare-bandwidth-regressed.txt",
        &comparison.render("baseline.json", "candidate.json"),
    );
    // The same drop is within a 15% threshold.
    assert!(!compare(&baseline, &candidate, 15.0).regressed());
}

#[test]
fn a_planted_latency_rise_is_flagged_and_a_speedup_is_not() {
    let baseline = load("write-p5.json");
    let mut candidate = baseline.clone();
    candidate.measurements[0].latency.p50_us *= 1.10;
    candidate.measurements[1].gbps *= 1.5;
    let comparison = compare(&baseline, &candidate, 5.0);
    assert_eq!(comparison.deltas[0].regressions, vec![Regression::Latency]);
    let text = comparison.render("a", "b");
    assert!(text.contains("REGRESSED (latency)"), "{text}");
    assert!(text.contains("improved"), "{text}");
    assert!(
        text.contains("# REGRESSED: 1 of 27 beyond 5%: SinglePin 256K"),
        "{text}"
    );
}

#[test]
fn a_drop_exactly_at_the_threshold_passes() {
    let baseline = load("write-p5.json");
    let mut candidate = baseline.clone();
    for m in &mut candidate.measurements {
        m.gbps *= 0.95;
    }
    assert!(!compare(&baseline, &candidate, 5.0).regressed());
}

#[test]
fn sizes_on_one_side_only_are_listed() {
    let baseline = load("write-p5.json");
    let mut candidate = baseline.clone();
    candidate.measurements.retain(|m| m.size != 64 << 20);
    let comparison = compare(&baseline, &candidate, 5.0);
    assert!(!comparison.regressed());
    assert_eq!(comparison.only_in_baseline.len(), 3);
    assert!(comparison.only_in_candidate.is_empty());
    let text = comparison.render("old.json", "new.json");
    assert!(
        text.contains("# only in old.json: SinglePin 64M, MultiPin 64M, RoundRobinPin 64M\n"),
        "{text}"
    );
}

#[test]
fn an_unverified_candidate_regresses() {
    let baseline = load("write-p5.json");
    let mut candidate = baseline.clone();
    candidate.measurements[2].verified = false;
    let comparison = compare(&baseline, &candidate, 5.0);
    assert_eq!(
        comparison
            .deltas
            .iter()
            .filter(|d| d.regressions == [Regression::Unverified])
            .count(),
        1
    );
}

#[test]
fn different_experiments_are_refused_unless_allowed() {
    let (write, all2all) = (fixture("write-p5.json"), fixture("all2all-p5.json"));
    let err = compare_files(&write, &all2all, 5.0, false).unwrap_err();
    assert!(matches!(err, ReportError::DifferentExperiments { .. }));
    let text = err.to_string();
    assert!(
        text.contains("`write` run")
            && text.contains("`alltoall` run")
            && text.contains("--allow-different"),
        "{text}"
    );
    let err = compare_files(&write, &all2all, 5.0, true).unwrap_err();
    assert!(matches!(err, ReportError::NothingInCommon { .. }), "{err}");
}

#[test]
fn files_compare_from_disk() {
    let scratch = Scratch::new("compare");
    let mut candidate = load("write-p5.json");
    candidate.measurements[5].gbps *= 0.8;
    let path = scratch.path("candidate.json");
    std::fs::write(&path, serde_json::to_string(&candidate).expect("json")).expect("write");
    let comparison =
        compare_files(&fixture("write-p5.json"), &path, 5.0, false).expect("comparable");
    assert!(comparison.regressed());
}
