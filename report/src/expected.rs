//! `efatop compare --expected`: one saved run against the published reference figures of an instance type
//! (its own, or the one `--instance-type` names), per configuration and size, with a verdict a CI gate can
//! use: below expectation when a figure is under `100 - threshold` percent of its published one.

use std::fmt::Write;

use efatop_proto::column::Column;
use efatop_proto::sizes::format_size;
use efatop_proto::{Experiment, RunResults};

use crate::formats::{file_summary, ordered_measurements};
use crate::reference::{self, Lookup, RunShape};

/// One measurement that has a published figure.
#[derive(Clone, Debug)]
pub struct ExpectedRow {
    pub config: Column,
    pub size: u64,
    pub gbps: f64,
    /// The published figure and where it comes from.
    pub expected_gbps: f64,
    pub source: String,
    pub percent: f64,
    pub below: bool,
}

#[derive(Clone, Debug)]
pub struct AgainstExpected {
    pub instance_type: String,
    pub threshold_percent: f64,
    pub rows: Vec<ExpectedRow>,
    /// Why the run's other measurements have no figure, each reason once.
    pub missing: Vec<String>,
    pub summary: String,
    /// The run's provider, when it was not efa (the figures were measured over efa).
    pub not_efa: Option<String>,
    /// What reading the file took that it does not say itself ([`crate::load::Loaded::notes`]); set by
    /// the caller that read it.
    pub notes: Vec<String>,
}

impl AgainstExpected {
    pub fn below(&self) -> bool {
        self.rows.iter().any(|row| row.below)
    }

    /// The share under which a figure is below expectation.
    fn floor(&self) -> f64 {
        100.0 - self.threshold_percent
    }
}

/// `results` against `instance_type`'s figures (a type efatop lists). Err with the reason when none of its
/// measurements has one (`p6-b300.48xlarge: no published figure for write`): a gate that compares nothing
/// would pass whatever the run did.
pub fn against_expected(results: &RunResults, instance_type: &str, threshold_percent: f64) -> Result<AgainstExpected, String> {
    let meta = &results.metadata;
    let shape = RunShape { instance_type, experiment: &meta.experiment, ranks: meta.ranks, channels: meta.channels };
    let floor = 100.0 - threshold_percent;
    let mut rows = Vec::new();
    let mut missing: Vec<String> = Vec::new();
    for measurement in ordered_measurements(results) {
        match reference::lookup(shape, &measurement.config, measurement.size) {
            Lookup::Figure { gbps, source } => {
                let percent = if gbps > 0.0 { 100.0 * measurement.gbps / gbps } else { 0.0 };
                rows.push(ExpectedRow {
                    config: measurement.config.clone(),
                    size: measurement.size,
                    gbps: measurement.gbps,
                    expected_gbps: gbps,
                    source,
                    percent,
                    below: percent < floor,
                });
            }
            Lookup::Missing(why) if !missing.contains(&why) => missing.push(why),
            Lookup::Missing(_) => {}
        }
    }
    if rows.is_empty() {
        return Err(missing.into_iter().next().unwrap_or_else(|| format!("{instance_type}: the run holds no measurement")));
    }
    let not_efa = (meta.experiment != Experiment::Ipc && meta.provider != "efa").then(|| meta.provider.clone());
    Ok(AgainstExpected { instance_type: instance_type.to_string(), threshold_percent, rows, missing, summary: file_summary(results), not_efa, notes: Vec::new() })
}

/// Right-aligned Markdown, the last column (the source) left as it is.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|col| rows.iter().map(|r| r[col].chars().count()).chain([header[col].chars().count()]).max().unwrap_or(0))
        .collect();
    let line = |cells: &[&str]| -> String {
        let body: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(index, (cell, width))| if index + 1 == cells.len() { format!(" {cell:<width$} ") } else { format!(" {cell:>width$} ") })
            .collect();
        format!("|{}|\n", body.join("|"))
    };
    let mut out = line(header);
    let rule: Vec<String> =
        widths.iter().enumerate().map(|(index, w)| if index + 1 == widths.len() { "-".repeat(w + 2) } else { format!("{}:", "-".repeat(w + 1)) }).collect();
    let _ = writeln!(out, "|{}|", rule.join("|"));
    for row in rows {
        out.push_str(&line(&row.iter().map(String::as_str).collect::<Vec<_>>()));
    }
    out
}

impl AgainstExpected {
    /// The comparison as a table, one line per configuration and size with a published figure, and a
    /// closing verdict.
    pub fn render(&self, name: &str) -> String {
        let floor = self.floor();
        let mut out = format!(
            "# {name} against {}'s published figures ({}); below expectation under {floor}% of a figure\n",
            self.instance_type,
            reference::DOC
        );
        let _ = writeln!(out, "# {name}: {}", self.summary);
        for note in &self.notes {
            let _ = writeln!(out, "# note: {name}: {note}");
        }
        if let Some(provider) = &self.not_efa {
            let _ = writeln!(out, "# note: this run's provider is {provider}, not efa; the published figures were measured over efa");
        }
        let header = ["Config", "Size", "Gbps", "Published (Gbps)", "% of expected", "Verdict", "Source"];
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|row| {
                vec![
                    row.config.to_string(),
                    format_size(row.size),
                    format!("{:.2}", row.gbps),
                    format!("{:.2}", row.expected_gbps),
                    format!("{:.1}{}", row.percent, if row.below { "*" } else { "" }),
                    if row.below { "BELOW".to_string() } else { "ok".to_string() },
                    row.source.split_once(" (").map_or(row.source.as_str(), |(head, _)| head).to_string(),
                ]
            })
            .collect();
        out.push_str(&table(&header, &rows));
        for why in &self.missing {
            let _ = writeln!(out, "# % of expected -: {why}");
        }
        let below: Vec<String> = self.rows.iter().filter(|row| row.below).map(|row| format!("{} {}", row.config, format_size(row.size))).collect();
        let _ = if below.is_empty() {
            writeln!(out, "# every figure at {floor}% of its published one or more ({} compared)", self.rows.len())
        } else {
            writeln!(out, "# BELOW EXPECTED: {} of {} under {floor}%: {}", below.len(), self.rows.len(), below.join(", "))
        };
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::table::tests::sample;

    #[test]
    fn each_figure_is_held_to_its_published_one_and_the_rest_say_why_not() {
        let mut run = sample();
        run.metadata.ranks = 2;
        let against = against_expected(&run, "p5.48xlarge", 10.0).expect("SinglePin has figures");
        // SinglePin 256K 31.58 of 31.58 and 1G 97.68 of 97.68; MultiPin has none.
        assert_eq!(against.rows.len(), 2);
        assert!(against.rows.iter().all(|row| (row.percent - 100.0).abs() < 1e-9 && !row.below), "{against:?}");
        assert_eq!(against.missing, ["p5.48xlarge: no published figure for write MultiPin"]);
        let text = against.render("run.json");
        assert!(text.contains("| SinglePin | 256K | 31.58 |            31.58 |         100.0 |      ok | seeds/write.md: p5.48xlarge SinglePin 256K"), "{text}");
        assert!(text.contains("# note: this run's provider is shm, not efa"), "{text}");
        assert!(text.ends_with("# every figure at 90% of its published one or more (2 compared)\n"), "{text}");
        run.measurements[0].gbps = 3.158;
        let against = against_expected(&run, "p5.48xlarge", 10.0).expect("figures");
        assert!(against.below());
        assert!(against.render("run.json").ends_with("# BELOW EXPECTED: 1 of 2 under 90%: SinglePin 256K\n"));
        let none = against_expected(&run, "p6-b300.48xlarge", 10.0).expect_err("no figures");
        assert_eq!(none, "p6-b300.48xlarge: no published figure for write");
    }
}
