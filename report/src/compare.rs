//! Two saved runs side by side: per configuration and size, how bandwidth and p50 latency moved, and
//! which moved the wrong way by more than a threshold (for CI gates).

use std::fmt::Write;
use std::path::Path;

use efatop_proto::column::Column;
use efatop_proto::results::Measurement;
use efatop_proto::sizes::format_size;
use efatop_proto::RunResults;
use serde::Serialize;

use crate::formats::{file_summary, ordered_measurements};
use crate::load::{load, ReportError};

/// Reads `--threshold`: a percentage such as `5%`, `2.5%` or `5`.
pub fn parse_threshold(text: &str) -> Result<f64, String> {
    let number = text.trim().strip_suffix('%').unwrap_or(text.trim());
    match number.parse::<f64>() {
        Ok(percent) if percent.is_finite() && (0.0..=1000.0).contains(&percent) => Ok(percent),
        _ => Err(format!(
            "`{text}` is not a percentage; use 0% to 1000%, e.g. 5% or 2.5"
        )),
    }
}

/// Why a row counts against the candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Regression {
    /// Bandwidth fell by more than the threshold.
    Bandwidth,
    /// p50 latency rose by more than the threshold.
    Latency,
    /// The baseline's bytes were verified and the candidate's were not.
    Unverified,
}

/// One configuration and size measured in both runs.
#[derive(Clone, Debug, Serialize)]
pub struct Delta {
    pub config: Column,
    pub size: u64,
    pub baseline_gbps: f64,
    pub candidate_gbps: f64,
    /// Percent change from the baseline; `None` when the baseline is zero.
    pub gbps_change_percent: Option<f64>,
    pub baseline_p50_us: f64,
    pub candidate_p50_us: f64,
    pub p50_change_percent: Option<f64>,
    pub regressions: Vec<Regression>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub threshold_percent: f64,
    pub deltas: Vec<Delta>,
    /// (configuration, size) measured only in the baseline, or only in the candidate.
    pub only_in_baseline: Vec<(Column, u64)>,
    pub only_in_candidate: Vec<(Column, u64)>,
    /// How the two runs were set up differently (provider, ranks, ...): context for a reader, not a verdict.
    pub setup_differences: Vec<String>,
    /// How each run ended (complete, failed and why, not ended) and what its file holds, in one line.
    pub baseline_summary: String,
    pub candidate_summary: String,
    /// What reading each file took that the file does not say itself (an old experiment name read as
    /// today's), one line each ([`crate::load::Loaded::notes`]).
    pub baseline_notes: Vec<String>,
    pub candidate_notes: Vec<String>,
}

impl Comparison {
    pub fn regressed(&self) -> bool {
        self.deltas.iter().any(|d| !d.regressions.is_empty())
    }
}

fn change_percent(baseline: f64, candidate: f64) -> Option<f64> {
    (baseline > 0.0).then(|| (candidate - baseline) / baseline * 100.0)
}

/// Rounding in the measured numbers must not turn "exactly at the threshold" into a regression.
const TOLERANCE_PERCENT: f64 = 1e-9;

fn judge(baseline: &Measurement, candidate: &Measurement, threshold_percent: f64) -> Delta {
    let gbps_change_percent = change_percent(baseline.gbps, candidate.gbps);
    let p50_change_percent = change_percent(baseline.latency.p50_us, candidate.latency.p50_us);
    let mut regressions = Vec::new();
    if gbps_change_percent.is_some_and(|change| change < -(threshold_percent + TOLERANCE_PERCENT)) {
        regressions.push(Regression::Bandwidth);
    }
    if p50_change_percent.is_some_and(|change| change > threshold_percent + TOLERANCE_PERCENT) {
        regressions.push(Regression::Latency);
    }
    if baseline.verified && !candidate.verified {
        regressions.push(Regression::Unverified);
    }
    Delta {
        config: candidate.config.clone(),
        size: candidate.size,
        baseline_gbps: baseline.gbps,
        candidate_gbps: candidate.gbps,
        gbps_change_percent,
        baseline_p50_us: baseline.latency.p50_us,
        candidate_p50_us: candidate.latency.p50_us,
        p50_change_percent,
        regressions,
    }
}

fn setup_differences(baseline: &RunResults, candidate: &RunResults) -> Vec<String> {
    let (a, b) = (&baseline.metadata, &candidate.metadata);
    let facts = [
        ("experiment", a.experiment.to_string(), b.experiment.to_string()),
        (
            "provider",
            a.provider_stack.clone(),
            b.provider_stack.clone(),
        ),
        ("ranks", a.ranks.to_string(), b.ranks.to_string()),
        ("channels", a.channels.to_string(), b.channels.to_string()),
        ("memory", a.memory.clone(), b.memory.clone()),
        ("window", a.window.to_string(), b.window.to_string()),
        ("iters", a.iters.to_string(), b.iters.to_string()),
        (
            "libfabric",
            a.libfabric_version.clone(),
            b.libfabric_version.clone(),
        ),
    ];
    facts
        .into_iter()
        .filter(|(_, x, y)| x != y)
        .map(|(name, x, y)| format!("{name} differs: {x} vs {y}"))
        .collect()
}

/// Matches measurements by (configuration, size) and judges each pair against `threshold_percent`.
pub fn compare(
    baseline: &RunResults,
    candidate: &RunResults,
    threshold_percent: f64,
) -> Comparison {
    let mut deltas = Vec::new();
    let mut only_in_candidate = Vec::new();
    for measured in ordered_measurements(candidate) {
        match baseline.find(&measured.config, measured.size) {
            Some(before) => deltas.push(judge(before, measured, threshold_percent)),
            None => only_in_candidate.push((measured.config.clone(), measured.size)),
        }
    }
    let only_in_baseline = ordered_measurements(baseline)
        .into_iter()
        .filter(|m| candidate.find(&m.config, m.size).is_none())
        .map(|m| (m.config.clone(), m.size))
        .collect();
    Comparison {
        threshold_percent,
        deltas,
        only_in_baseline,
        only_in_candidate,
        setup_differences: setup_differences(baseline, candidate),
        baseline_summary: file_summary(baseline),
        candidate_summary: file_summary(candidate),
        baseline_notes: Vec::new(),
        candidate_notes: Vec::new(),
    }
}

/// Loads both files and compares them; runs of different experiments only when `allow_different`.
pub fn compare_files(
    baseline_path: &Path,
    candidate_path: &Path,
    threshold_percent: f64,
    allow_different: bool,
) -> Result<Comparison, ReportError> {
    let crate::Loaded { results: baseline, notes: baseline_notes } = load(baseline_path)?;
    let crate::Loaded { results: candidate, notes: candidate_notes } = load(candidate_path)?;
    if baseline.metadata.experiment != candidate.metadata.experiment && !allow_different {
        return Err(ReportError::DifferentExperiments {
            baseline: baseline_path.to_path_buf(),
            baseline_experiment: baseline.metadata.experiment,
            candidate: candidate_path.to_path_buf(),
            candidate_experiment: candidate.metadata.experiment,
        });
    }
    let mut comparison = compare(&baseline, &candidate, threshold_percent);
    (comparison.baseline_notes, comparison.candidate_notes) = (baseline_notes, candidate_notes);
    if comparison.deltas.is_empty() {
        return Err(ReportError::NothingInCommon {
            baseline: baseline_path.to_path_buf(),
            candidate: candidate_path.to_path_buf(),
        });
    }
    Ok(comparison)
}

fn signed_percent(change: Option<f64>) -> String {
    change.map_or_else(|| "-".to_string(), |c| format!("{c:+.1}%"))
}

fn verdict(delta: &Delta, threshold_percent: f64) -> String {
    if !delta.regressions.is_empty() {
        let why: Vec<&str> = delta
            .regressions
            .iter()
            .map(|r| match r {
                Regression::Bandwidth => "bandwidth",
                Regression::Latency => "latency",
                Regression::Unverified => "unverified",
            })
            .collect();
        return format!("REGRESSED ({})", why.join(", "));
    }
    let faster = delta
        .gbps_change_percent
        .is_some_and(|c| c > threshold_percent)
        || delta
            .p50_change_percent
            .is_some_and(|c| c < -threshold_percent);
    if faster { "improved" } else { "ok" }.to_string()
}

fn rate(gbps: f64) -> String {
    if gbps > 0.0 && gbps < 0.01 {
        format!("{gbps:.4}")
    } else {
        format!("{gbps:.2}")
    }
}

/// Right-aligned Markdown table, as the result table is drawn.
fn aligned_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|col| {
            rows.iter()
                .map(|r| r[col].chars().count())
                .chain([header[col].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| -> String {
        let body: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!(" {cell:>width$} "))
            .collect();
        format!("|{}|\n", body.join("|"))
    };
    let mut out = line(header.to_vec());
    let rule: Vec<String> = widths
        .iter()
        .map(|w| format!("{}:", "-".repeat(w + 1)))
        .collect();
    let _ = writeln!(out, "|{}|", rule.join("|"));
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

fn list_points(points: &[(Column, u64)]) -> String {
    points
        .iter()
        .map(|(config, size)| format!("{config} {}", format_size(*size)))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Comparison {
    /// The comparison as a table with one line per configuration and size, and a closing verdict.
    pub fn render(&self, baseline_name: &str, candidate_name: &str) -> String {
        let threshold = self.threshold_percent;
        let mut out = format!("# baseline {baseline_name}, candidate {candidate_name}; regression beyond {threshold}%\n");
        let _ = writeln!(out, "# baseline {baseline_name}: {}", self.baseline_summary);
        let _ = writeln!(out, "# candidate {candidate_name}: {}", self.candidate_summary);
        for (name, notes) in [(baseline_name, &self.baseline_notes), (candidate_name, &self.candidate_notes)] {
            for note in notes {
                let _ = writeln!(out, "# note: {name}: {note}");
            }
        }
        for difference in &self.setup_differences {
            let _ = writeln!(out, "# note: {difference}");
        }
        let header = [
            "Config",
            "Size",
            "Gbps before",
            "Gbps after",
            "Δ Gbps",
            "p50 before (us)",
            "p50 after (us)",
            "Δ p50",
            "Verdict",
        ];
        let rows: Vec<Vec<String>> = self
            .deltas
            .iter()
            .map(|d| {
                vec![
                    d.config.to_string(),
                    format_size(d.size),
                    rate(d.baseline_gbps),
                    rate(d.candidate_gbps),
                    signed_percent(d.gbps_change_percent),
                    format!("{:.2}", d.baseline_p50_us),
                    format!("{:.2}", d.candidate_p50_us),
                    signed_percent(d.p50_change_percent),
                    verdict(d, threshold),
                ]
            })
            .collect();
        if !rows.is_empty() {
            out.push_str(&aligned_table(&header, &rows));
        }
        if !self.only_in_baseline.is_empty() {
            let _ = writeln!(
                out,
                "# only in {baseline_name}: {}",
                list_points(&self.only_in_baseline)
            );
        }
        if !self.only_in_candidate.is_empty() {
            let _ = writeln!(
                out,
                "# only in {candidate_name}: {}",
                list_points(&self.only_in_candidate)
            );
        }
        let regressed: Vec<&Delta> = self
            .deltas
            .iter()
            .filter(|d| !d.regressions.is_empty())
            .collect();
        let _ = if self.deltas.is_empty() {
            writeln!(
                out,
                "# nothing to compare: no configuration and size was measured in both files"
            )
        } else if regressed.is_empty() {
            writeln!(
                out,
                "# no regression beyond {threshold}% ({} compared)",
                self.deltas.len()
            )
        } else {
            let points: Vec<(Column, u64)> = regressed
                .iter()
                .map(|d| (d.config.clone(), d.size))
                .collect();
            writeln!(
                out,
                "# REGRESSED: {} of {} beyond {threshold}%: {}",
                regressed.len(),
                self.deltas.len(),
                list_points(&points)
            )
        };
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_read_with_or_without_percent_sign() {
        assert_eq!(parse_threshold("5%"), Ok(5.0));
        assert_eq!(parse_threshold("2.5"), Ok(2.5));
        assert_eq!(parse_threshold("0%"), Ok(0.0));
        for bad in ["-1%", "five", "", "%", "NaN", "1e9"] {
            let err = parse_threshold(bad).unwrap_err();
            assert!(err.contains("not a percentage"), "{bad}: {err}");
        }
    }

    #[test]
    fn change_is_relative_to_the_baseline() {
        assert_eq!(change_percent(100.0, 90.0), Some(-10.0));
        assert_eq!(change_percent(0.0, 5.0), None);
    }
}
