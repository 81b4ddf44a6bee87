//! The seed's result table: `Size | Count | <config> (Gbps) | BusBW (%) | Lat (us)` per configuration,
//! right-aligned Markdown, plus the p50 and p99 latency the seed tables lack.

use std::fmt::Write;

use efatop_experiments::RunResults;
use efatop_experiments::sizes::format_size;

/// A cell with nothing measured behind it is shown as this, never as a number.
const NOT_MEASURED: &str = "-";

/// Two decimals as in the seed, except that a measured rate below 0.01 keeps its first digits rather than
/// reading as zero.
fn gbps(value: f64) -> String {
    if value > 0.0 && value < 0.01 { format!("{value:.4}") } else { format!("{value:.2}") }
}

pub fn render_table(results: &RunResults) -> String {
    let mut out = render_seed_table(results);
    if results.measurements.iter().any(|m| m.nccl_busbw_gbps.is_some()) {
        out.push('\n');
        out.push_str(&render_nccl_busbw_table(results));
    }
    out
}

/// All-to-all's second reading of the same runs: nccl-tests' busbw, (N-1) × size per iteration time.
fn render_nccl_busbw_table(results: &RunResults) -> String {
    let mut header = vec!["Size".to_string()];
    header.extend(results.configs.iter().map(|config| format!("{config} busbw (Gbps)")));
    let rows: Vec<Vec<String>> = results
        .sizes()
        .into_iter()
        .map(|size| {
            let mut row = vec![format_size(size)];
            row.extend(results.configs.iter().map(|config| {
                results.find(config, size).and_then(|m| m.nccl_busbw_gbps).map_or_else(|| NOT_MEASURED.into(), gbps)
            }));
            row
        })
        .collect();
    let mut out = format!("nccl-tests alltoall busbw, (N-1) x size per iteration time, N = {} ranks:\n", results.metadata.ranks);
    out.push_str(&markdown(&header, &rows));
    out
}

fn render_seed_table(results: &RunResults) -> String {
    let mut header = vec!["Size".to_string(), "Count".to_string()];
    for config in &results.configs {
        header.extend([
            format!("{config} (Gbps)"),
            "BusBW (%)".into(),
            "Lat (us)".into(),
            "p50 (us)".into(),
            "p99 (us)".into(),
        ]);
    }
    let mut rows = Vec::new();
    for size in results.sizes() {
        let mut row = vec![format_size(size), (size / 4).to_string()];
        for config in &results.configs {
            match results.find(config, size) {
                Some(m) => row.extend([
                    gbps(m.gbps),
                    m.busbw_percent.map_or_else(|| NOT_MEASURED.into(), |b| format!("{b:.1}")),
                    format!("{:.2}", m.latency.mean_us),
                    format!("{:.2}", m.latency.p50_us),
                    format!("{:.2}", m.latency.p99_us),
                ]),
                None => row.extend(std::iter::repeat_n(NOT_MEASURED.to_string(), 5)),
            }
        }
        rows.push(row);
    }
    markdown(&header, &rows)
}

/// Right-aligned Markdown, each column as wide as its widest cell.
fn markdown(header: &[String], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|col| rows.iter().map(|r| r[col].len()).chain([header[col].len()]).max().unwrap_or(0))
        .collect();
    let line = |cells: &[String]| -> String {
        let body: Vec<String> = cells.iter().zip(&widths).map(|(cell, width)| format!(" {cell:>width$} ")).collect();
        format!("|{}|", body.join("|"))
    };
    let mut out = line(header);
    out.push('\n');
    let rule: Vec<String> = widths.iter().map(|w| format!("{}:", "-".repeat(w + 1))).collect();
    let _ = writeln!(out, "|{}|", rule.join("|"));
    for row in rows {
        out.push_str(&line(row));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use efatop_experiments::results::{LatencySummary, Measurement, RunMetadata};

    pub(crate) fn sample() -> RunResults {
        let metadata = RunMetadata {
            efatop_version: "0.1.0".into(),
            libfabric_version: "1.17".into(),
            experiment: "write".into(),
            provider: "shm".into(),
            provider_stack: "shm".into(),
            ranks: 2,
            hosts: vec!["node-a".into(), "node-a".into()],
            channels: 1,
            distinct_nics: 1,
            nics: vec![],
            link_gbps: Some(100.0),
            link_source: "flag".into(),
            memory: "host".into(),
            window: 1,
            warmup: 1,
            iters: 10,
            notes: vec![],
            started_unix_s: 0,
            placements: vec![],
            gpu_pairs: vec![],
        };
        let m = |config: &str, size: u64, gbps: f64| Measurement {
            config: config.into(),
            size,
            count: size / 4,
            gbps,
            busbw_percent: Some(gbps),
            nccl_busbw_gbps: None,
            latency: LatencySummary { mean_us: 66.54, p50_us: 65.0, p99_us: 70.25, max_us: 71.0 },
            iterations: 10,
            pairs: vec![],
            verified: true,
        };
        RunResults {
            metadata,
            configs: vec!["SinglePin".into(), "MultiPin".into()],
            measurements: vec![m("SinglePin", 262_144, 31.58), m("MultiPin", 262_144, 32.76), m("SinglePin", 1 << 30, 97.68)],
            ..RunResults::default()
        }
    }

    #[test]
    fn seed_layout_with_percentiles_and_gaps() {
        let expected = "\
| Size |     Count | SinglePin (Gbps) | BusBW (%) | Lat (us) | p50 (us) | p99 (us) | MultiPin (Gbps) | BusBW (%) | Lat (us) | p50 (us) | p99 (us) |
|-----:|----------:|-----------------:|----------:|---------:|---------:|---------:|----------------:|----------:|---------:|---------:|---------:|
| 256K |     65536 |            31.58 |      31.6 |    66.54 |    65.00 |    70.25 |           32.76 |      32.8 |    66.54 |    65.00 |    70.25 |
|   1G | 268435456 |            97.68 |      97.7 |    66.54 |    65.00 |    70.25 |               - |         - |        - |        - |        - |
";
        assert_eq!(render_table(&sample()), expected);
    }

    #[test]
    fn a_slow_rate_is_not_printed_as_zero() {
        assert_eq!(gbps(0.0045), "0.0045");
        assert_eq!(gbps(12.345), "12.35");
        assert_eq!(gbps(0.0), "0.00");
    }

    #[test]
    fn unknown_link_speed_prints_no_busbw() {
        let mut results = sample();
        for m in &mut results.measurements {
            m.busbw_percent = None;
        }
        let table = render_table(&results);
        let first_row = table.lines().nth(2).expect("a row");
        assert_eq!(first_row.split('|').nth(4).map(str::trim), Some("-"));
    }
}
