//! The seed's result table: `Size | Count | <config> (Gbps) | BusBW (%) | Lat (us)` per configuration,
//! right-aligned Markdown, plus the p50 and p99 latency the seed tables lack.

use std::fmt::Write;

use efatop_proto::expected::{self, Expected};
use efatop_proto::ipc::IpcConfig;
use efatop_proto::column::Column;
use efatop_proto::{Experiment, RunResults};
use efatop_proto::sizes::format_size;

use crate::reference;

/// A cell with nothing measured behind it is shown as this, never as a number.
const NOT_MEASURED: &str = "-";

/// A rate as the results table shows it: two decimals as in the seed, except that a measured rate below
/// 0.01 keeps its first digits rather than reading as zero.
pub fn gbps(value: f64) -> String {
    if value > 0.0 && value < 0.01 { format!("{value:.4}") } else { format!("{value:.2}") }
}

pub fn render_table(results: &RunResults) -> String {
    let mut out = render_seed_table(results);
    out.push_str(&expected_legend(results));
    if results.measurements.iter().any(|m| m.nccl_busbw_gbps.is_some()) {
        out.push('\n');
        out.push_str(&render_nccl_busbw_table(results));
    }
    if results.metadata.experiment == Experiment::Ipc {
        out.push_str(&render_ipc_tables(results));
    }
    out
}

/// NVLink is quoted in GB/s (bytes); the tables keep Gbps like every experiment, this summary gives both.
fn gbytes(gbps: f64) -> String {
    format!("{:.1}", gbps / 8.0)
}

/// `ipc`: every store-kernel configuration beside the copy engine measured in the same run, per size, with
/// the best kernel's share of the copy engine; and, when the run swept several grids and blocks, the grid ×
/// block matrix at the largest size.
fn render_ipc_tables(results: &RunResults) -> String {
    // Every store kernel, the tuned one too (its grid depends on the GPU: no grid x block here).
    let kernels: Vec<(&Column, Option<(u32, u32)>)> = results
        .configs
        .iter()
        .filter_map(|config| {
            let ipc = config.ipc().filter(|c| c.is_kernel())?;
            Some((config, ipc.grid_block()))
        })
        .collect();
    let copy_engine_column = Column::Ipc(IpcConfig::COPY_ENGINE);
    if kernels.is_empty() {
        return String::new();
    }
    let copy_engine = results.configs.contains(&copy_engine_column);
    let mut header = vec!["Size".to_string()];
    // Every kernel column when they fit on a line; a sweep shows only its best per size here.
    let each_kernel = kernels.len() <= 8;
    if each_kernel {
        header.extend(kernels.iter().map(|(config, ..)| format!("{config} (GB/s)")));
    }
    header.extend(["Best kernel".to_string(), "(GB/s)".to_string()]);
    if copy_engine {
        header.extend(["CE (GB/s)".to_string(), "Best / CE".to_string()]);
    }
    let rows: Vec<Vec<String>> = results
        .sizes()
        .into_iter()
        .map(|size| {
            let mut row = vec![format_size(size)];
            let rate = |config: &Column| results.find(config, size).map(|m| m.gbps);
            if each_kernel {
                row.extend(kernels.iter().map(|(config, ..)| rate(config).map_or_else(|| NOT_MEASURED.into(), gbytes)));
            }
            let best = kernels
                .iter()
                .filter_map(|kernel| rate(kernel.0).map(|gbps| (kernel, gbps)))
                .max_by(|a, b| a.1.total_cmp(&b.1));
            match best {
                Some(((config, shape), gbps)) => row.extend([shape.map_or_else(|| config.to_string(), |(grid, block)| format!("{grid}x{block}")), gbytes(gbps)]),
                None => row.extend([NOT_MEASURED.to_string(), NOT_MEASURED.to_string()]),
            }
            if copy_engine {
                let ce = rate(&copy_engine_column);
                row.push(ce.map_or_else(|| NOT_MEASURED.into(), gbytes));
                row.push(match (best, ce) {
                    (Some((_, kernel)), Some(ce)) if ce > 0.0 => format!("{:.2}", kernel / ce),
                    _ => NOT_MEASURED.into(),
                });
            }
            row
        })
        .collect();
    let mut out = String::from(
        "\nNVLink IPC write, GB/s: the store kernel (grid x block), the tuned kernel (sized to the GPU) and the copy engine (CE), same pair and run:\n",
    );
    out.push_str(&markdown(&header, &rows));

    let mut grids: Vec<u32> = kernels.iter().filter_map(|k| k.1.map(|(grid, _)| grid)).collect();
    let mut blocks: Vec<u32> = kernels.iter().filter_map(|k| k.1.map(|(_, block)| block)).collect();
    grids.sort_unstable();
    grids.dedup();
    blocks.sort_unstable();
    blocks.dedup();
    if let (true, Some(&largest)) = (grids.len() > 1 && blocks.len() > 1, results.sizes().last()) {
        let mut header = vec!["grid \\ block".to_string()];
        header.extend(blocks.iter().map(u32::to_string));
        let rows: Vec<Vec<String>> = grids
            .iter()
            .map(|grid| {
                let mut row = vec![grid.to_string()];
                row.extend(blocks.iter().map(|block| {
                    results.find(&Column::Ipc(IpcConfig::kernel(*grid, *block)), largest).map_or_else(|| NOT_MEASURED.into(), |m| gbytes(m.gbps))
                }));
                row
            })
            .collect();
        let _ = write!(out, "\nStore kernel GB/s at {} by grid (rows) and block (columns):\n", format_size(largest));
        out.push_str(&markdown(&header, &rows));
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

/// The run holds reference figures (its instance type is one efatop lists): each Gbps gets its share.
fn with_expected(results: &RunResults) -> bool {
    results.measurements.iter().any(|m| m.expected.is_some())
}

/// `97.1`, `45.2*` under [`expected::BELOW_PERCENT`], `-` where no figure applies (the legend says why).
pub fn expected_cell(expected: Option<&Expected>) -> String {
    match expected {
        Some(figure @ Expected::Figure { percent, .. }) => format!("{percent:.1}{}", if figure.below() { "*" } else { "" }),
        _ => NOT_MEASURED.to_string(),
    }
}

/// Under the table: what `% of expected` is against, where the figures come from, and why a cell has none.
fn expected_legend(results: &RunResults) -> String {
    if !with_expected(results) {
        return String::new();
    }
    let mut out = String::new();
    let mut sources: Vec<&str> = Vec::new();
    let mut missing: Vec<&str> = Vec::new();
    for measurement in &results.measurements {
        match &measurement.expected {
            Some(Expected::Figure { source, .. }) => {
                let file = source.split_once(": ").map_or(source.as_str(), |(file, _)| file);
                if !sources.contains(&file) {
                    sources.push(file);
                }
            }
            Some(Expected::Missing { missing: why }) if !missing.contains(&why.as_str()) => missing.push(why),
            _ => {}
        }
    }
    if !sources.is_empty() {
        let below = expected::BELOW_PERCENT;
        let _ = writeln!(
            out,
            "# % of expected: Gbps as a share of the published figure for {} at that configuration and size ({}; {}); * under {below}%",
            results.metadata.instance_type.as_deref().unwrap_or("the instance type"),
            sources.join(", "),
            reference::DOC,
        );
    }
    for why in missing {
        let _ = writeln!(out, "# % of expected -: {why}");
    }
    out
}

fn render_seed_table(results: &RunResults) -> String {
    let expected = with_expected(results);
    let mut header = vec!["Size".to_string(), "Count".to_string()];
    for config in &results.configs {
        header.push(format!("{config} (Gbps)"));
        if expected {
            header.push("% of expected".into());
        }
        header.extend([
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
                Some(m) => row.extend([gbps(m.gbps)].into_iter().chain(expected.then(|| expected_cell(m.expected.as_ref()))).chain([
                    m.busbw_percent.map_or_else(|| NOT_MEASURED.into(), |b| format!("{b:.1}")),
                    format!("{:.2}", m.latency.mean_us),
                    format!("{:.2}", m.latency.p50_us),
                    format!("{:.2}", m.latency.p99_us),
                ])),
                None => row.extend(std::iter::repeat_n(NOT_MEASURED.to_string(), if expected { 6 } else { 5 })),
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
pub(crate) mod tests {
    use super::*;
    use efatop_proto::results::{LatencySummary, LinkSource, Measurement, RunMetadata};

    /// The column a results file's label stands for, read as a file is.
    pub(crate) fn column(label: &str) -> Column {
        serde_json::from_value(label.into()).expect("a label")
    }

    pub(crate) fn sample() -> RunResults {
        let metadata = RunMetadata {
            efatop_version: "0.1.0".into(),
            libfabric_version: "1.17".into(),
            experiment: Experiment::Write,
            provider: "shm".into(),
            provider_stack: "shm".into(),
            fabric: String::new(),
            libfabric_api: String::new(),
            emulated_write: None,
            shm_shortcut: None,
            completion: None,
            ranks: 2,
            hosts: vec!["node-a".into(), "node-a".into()],
            channels: 1,
            distinct_nics: 1,
            nics: vec![],
            link_gbps: Some(100.0),
            link_source: LinkSource::Flag,
            memory: "host".into(),
            window: 1,
            warmup: 1,
            hang_timeout_s: 0,
        telemetry_relays: Vec::new(),
            iters: 10,
            notes: vec![],
            started_unix_s: 0,
            placements: vec![],
            gpu_pairs: vec![],
            instance_type: None,
        };
        let m = |config: &str, size: u64, gbps: f64| Measurement {
            busbw_percent: Some(gbps),
            ..Measurement::plain(column(config), size, gbps, LatencySummary { mean_us: 66.54, p50_us: 65.0, p99_us: 70.25, max_us: 71.0 }, 10)
        };
        RunResults {
            metadata,
            configs: vec![column("SinglePin"), column("MultiPin")],
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
    fn ipc_summary_puts_each_kernel_beside_the_copy_engine_with_the_ratio() {
        let mut results = sample();
        results.metadata.experiment = Experiment::Ipc;
        results.configs = vec![column("IPC 1x256"), column("IPC 128x256"), column("CE")];
        let m = |config: &str, size: u64, gbps: f64| Measurement { config: column(config), size, gbps, ..sample().measurements[0].clone() };
        results.measurements = vec![
            m("IPC 1x256", 1 << 20, 800.0),
            m("IPC 128x256", 1 << 20, 1600.0),
            m("CE", 1 << 20, 2000.0),
            m("IPC 1x256", 1 << 30, 2800.0),
            m("IPC 128x256", 1 << 30, 2971.0),
            m("CE", 1 << 30, 3100.0),
        ];
        let table = render_table(&results);
        let summary = table.split("NVLink IPC write").nth(1).expect("the ipc summary");
        let expected = "\
| Size | IPC 1x256 (GB/s) | IPC 128x256 (GB/s) | Best kernel | (GB/s) | CE (GB/s) | Best / CE |
|-----:|-----------------:|-------------------:|------------:|-------:|----------:|----------:|
|   1M |            100.0 |              200.0 |     128x256 |  200.0 |     250.0 |      0.80 |
|   1G |            350.0 |              371.4 |     128x256 |  371.4 |     387.5 |      0.96 |
";
        assert!(summary.ends_with(expected), "{summary}");
        // One block size: no grid x block matrix.
        assert!(!table.contains("by grid (rows)"));
    }

    #[test]
    fn ipc_summary_counts_the_tuned_kernel_among_the_kernels_but_not_in_the_grid_matrix() {
        let mut results = sample();
        let col = |label: &str| -> efatop_proto::Column { serde_json::from_value(serde_json::Value::String(label.into())).unwrap() };
        results.metadata.experiment = efatop_proto::Experiment::Ipc;
        results.configs = ["IPC 1x64", "IPC 1x256", "IPC 128x64", "IPC 128x256", "kernel (tuned)", "CE"].map(col).to_vec();
        let m = |config: &str, gbps: f64| Measurement { config: col(config), size: 1 << 30, gbps, ..sample().measurements[0].clone() };
        results.measurements =
            vec![m("IPC 1x64", 80.0), m("IPC 1x256", 350.0), m("IPC 128x64", 2000.0), m("IPC 128x256", 2971.0), m("kernel (tuned)", 3050.0), m("CE", 3100.0)];
        let table = render_table(&results);
        let summary = table.split("NVLink IPC write").nth(1).expect("the ipc summary");
        assert!(summary.contains("| kernel (tuned) (GB/s) |"), "{summary}");
        assert!(summary.contains("| kernel (tuned) |  381.2 |     387.5 |      0.98 |"), "{summary}");
        // The matrix is the grid sweep's alone: 2 grids x 2 blocks, no row or column for the tuned kernel.
        let matrix = table.split("by grid (rows)").nth(1).expect("the matrix");
        assert!(matrix.contains("| grid \\ block |    64 |   256 |"), "{matrix}");
        assert!(!matrix.contains("tuned"), "{matrix}");
    }

    #[test]
    fn ipc_sweep_adds_the_grid_by_block_matrix_at_the_largest_size() {
        let mut results = sample();
        results.metadata.experiment = Experiment::Ipc;
        let mut configs = Vec::new();
        results.measurements.clear();
        for grid in [1, 128] {
            for block in [64, 256] {
                let config = column(&format!("IPC {grid}x{block}"));
                let gbps = f64::from(grid * block) / 10.0;
                results.measurements.push(Measurement { config: config.clone(), size: 1 << 30, gbps, ..sample().measurements[0].clone() });
                configs.push(config);
            }
        }
        results.configs = configs;
        let table = render_table(&results);
        assert!(!table.contains("CE (GB/s)"), "no copy engine was run: no CE column");
        let matrix = table.split("by grid (rows) and block (columns):\n").nth(1).expect("a matrix");
        // Cells are right-aligned to the widest of their column.
        assert_eq!(matrix.lines().count(), 4, "{matrix}");
        assert!(matrix.lines().nth(3).is_some_and(|row| row.contains("102.4") && row.contains("409.6")), "{matrix}");
        assert!(matrix.lines().nth(2).is_some_and(|row| row.contains(" 0.8 ") && row.contains(" 3.2 ")), "{matrix}");
    }

    #[test]
    fn each_figure_gets_its_share_of_the_published_one_and_gaps_say_why() {
        let mut results = sample();
        results.metadata.instance_type = Some("p5.48xlarge".into());
        results.measurements[2].gbps = 48.84;
        for m in &mut results.measurements {
            crate::reference::annotate(m, &results.metadata);
        }
        let table = render_table(&results);
        let expected = "\
| Size |     Count | SinglePin (Gbps) | % of expected | BusBW (%) | Lat (us) | p50 (us) | p99 (us) | MultiPin (Gbps) | % of expected | BusBW (%) | Lat (us) | p50 (us) | p99 (us) |
|-----:|----------:|-----------------:|--------------:|----------:|---------:|---------:|---------:|----------------:|--------------:|----------:|---------:|---------:|---------:|
| 256K |     65536 |            31.58 |         100.0 |      31.6 |    66.54 |    65.00 |    70.25 |           32.76 |             - |      32.8 |    66.54 |    65.00 |    70.25 |
|   1G | 268435456 |            48.84 |         50.0* |      97.7 |    66.54 |    65.00 |    70.25 |               - |             - |         - |        - |        - |        - |
# % of expected: Gbps as a share of the published figure for p5.48xlarge at that configuration and size (seeds/write.md; docs/expected.md); * under 90%
# % of expected -: p5.48xlarge: no published figure for write MultiPin
";
        assert_eq!(table, expected);
        // A listed type without figures: every cell `-`, one line naming the type.
        results.metadata.instance_type = Some("p6-b300.48xlarge".into());
        for m in &mut results.measurements {
            crate::reference::annotate(m, &results.metadata);
        }
        let table = render_table(&results);
        assert!(table.ends_with("# % of expected -: p6-b300.48xlarge: no published figure for write\n"), "{table}");
        assert!(!table.contains("% of expected: Gbps"), "{table}");
        let header = crate::text::render_header(&results.metadata, &[4096]);
        assert!(header.contains("# instance type p6-b300.48xlarge (DMI product name): p6-b300.48xlarge: no published figure for write"), "{header}");
        // Another machine: its type named, nothing per cell.
        results.metadata.instance_type = Some("m7i.large".into());
        let header = crate::text::render_header(&results.metadata, &[4096]);
        assert!(header.contains("# instance type m7i.large (DMI product name): efatop has no reference figures for it"), "{header}");
        results.metadata.instance_type = Some("p5.48xlarge".into());
        let header = crate::text::render_header(&results.metadata, &[4096]);
        assert!(header.contains("measured over efa: this run's provider is shm, not efa"), "{header}");
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
