//! The `ipc` experiment's plot. Its columns are store-kernel launch shapes (`IPC <grid>x<block>`, fifty
//! with `--sweep`) and the copy engine (`CE`): one line per column would be unreadable, so this plot says
//! what the ipc tables say (`text::table::render_ipc_tables`):
//! - left, GB/s against size: the copy engine, the best kernel at each size, and every kernel only when
//!   there are a few of them (else the best kernel's points name their grid x block); dashed at the pair's
//!   NVLink peak when it is known;
//! - right, GB/s against the kernel's grid at the largest size, one line per block size, the copy engine
//!   dashed across: how the store kernel's rate rises with its grid.
//!
//! GB/s are bytes (how NVLink is quoted): the results file's Gbps over eight.

use std::path::Path;

use efatop_proto::ipc::IpcConfig;
use efatop_proto::column::Column;
use efatop_proto::results::{LinkSource, Measurement};
use efatop_proto::sizes::format_size;
use efatop_proto::RunResults;

use super::{
    Axis, Legend, LineChart, PlotSpec, ReferenceLine, Scale, Series, Ticks, CHART_ROW_HEIGHT,
    REFERENCE_COLOR, TITLE_HEIGHT, WIDTH,
};

/// Kernel columns drawn one by one on the size chart when there are at most this many; past it only the
/// best kernel per size is.
pub const MAX_KERNEL_SERIES: usize = 6;
/// Lines on the grid chart (one per block size); more block sizes are thinned to this many, evenly.
pub const MAX_BLOCK_SERIES: usize = 6;
/// The best kernel is named at every size up to this many sizes; past it, only where it changes.
pub const MAX_LABELLED_POINTS: usize = 12;

/// The copy engine's column.
fn copy_engine() -> Column {
    Column::Ipc(IpcConfig::COPY_ENGINE)
}

pub const BEST_KERNEL: &str = "best kernel";
const COPY_ENGINE_COLOR: &str = "#d62728";
const BEST_KERNEL_COLOR: &str = "#1f77b4";
/// Tableau 10 less the copy engine's red and the best kernel's blue, for kernels and block sizes.
const KERNEL_PALETTE: [&str; 6] = [
    "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// One store-kernel column: `IPC <grid>x<block>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Kernel<'a> {
    column: &'a Column,
    grid: u64,
    block: u64,
}

/// The grid or the block of a kernel.
type KernelField = fn(&Kernel<'_>) -> u64;

/// The kernel columns measured, in column order.
fn kernels(results: &RunResults) -> Vec<Kernel<'_>> {
    let mut columns: Vec<&Column> = results.configs.iter().collect();
    for m in &results.measurements {
        if !columns.contains(&&m.config) {
            columns.push(&m.config);
        }
    }
    columns
        .into_iter()
        .filter(|column| results.measurements.iter().any(|m| &m.config == *column))
        .filter_map(|column| {
            let (grid, block) = column.ipc()?.grid_block()?;
            Some(Kernel { column, grid: grid.into(), block: block.into() })
        })
        .collect()
}

fn gbytes(m: &Measurement) -> f64 {
    m.gbps / 8.0
}

/// The pair's peak in GB/s and what to call it, from `link_gbps` (ipc stores the NVLink peak × 8 there).
fn peak_line(results: &RunResults) -> Option<ReferenceLine> {
    let meta = &results.metadata;
    let gbytes = meta.link_gbps? / 8.0;
    let what = if matches!(meta.link_source, LinkSource::Nvlink(_)) {
        "NVLink peak"
    } else {
        "link peak"
    };
    Some(ReferenceLine {
        name: format!("{what} {} GB/s", round1(gbytes)),
        value: gbytes,
        color: REFERENCE_COLOR.into(),
    })
}

fn round1(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

fn gbytes_axis(top: f64) -> Axis {
    Axis {
        label: "GB/s (bytes per second, as NVLink is quoted)".into(),
        scale: Scale::Linear,
        min: 0.0,
        max: if top > 0.0 { top * 1.12 } else { 1.0 },
        ticks: Ticks::Default,
    }
}

fn top_of(series: &[Series], lines: &[ReferenceLine]) -> f64 {
    series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(lines.iter().map(|l| l.value))
        .fold(0.0, f64::max)
}

pub fn describe(results: &RunResults, png: &Path, smallest: u64, largest: u64) -> PlotSpec {
    let kernels = kernels(results);
    let mut charts = vec![size_chart(results, &kernels, smallest, largest)];
    charts.extend(grid_chart(results, &kernels, largest));
    PlotSpec {
        png: png.display().to_string(),
        width: WIDTH,
        height: TITLE_HEIGHT + CHART_ROW_HEIGHT,
        title: title(results, kernels.len(), smallest, largest),
        charts,
        heatmaps: vec![],
    }
}

/// `efatop ipc: CUDA IPC writes GPU 0 (00000000:18:00.0) → GPU 1 (00000000:2A:00.0), ...`: the GPUs and
/// sizes, not the provider or channels (no NIC carries these bytes).
fn title(results: &RunResults, kernel_count: usize, smallest: u64, largest: u64) -> String {
    let meta = &results.metadata;
    let rank = |r: usize| meta.placements.iter().find(|p| p.rank == r);
    let name = |r: usize| match rank(r) {
        Some(p) => match (p.gpu, &p.gpu_pci_bus_id) {
            (Some(gpu), Some(bus)) => format!("GPU {gpu} ({bus})"),
            (Some(gpu), None) => format!("GPU {gpu}"),
            (None, Some(bus)) => format!("GPU {bus}"),
            (None, None) => format!("rank {r}"),
        },
        None => format!("rank {r}"),
    };
    let same_gpu = match (rank(0), rank(1)) {
        (Some(a), Some(b)) => match (&a.gpu_pci_bus_id, &b.gpu_pci_bus_id) {
            (Some(x), Some(y)) => x == y,
            _ => a.host == b.host && a.gpu.is_some() && a.gpu == b.gpu,
        },
        _ => false,
    };
    let path = if same_gpu {
        ", one GPU: HBM, not NVLink"
    } else {
        ""
    };
    let copy_engine = if results.configs.contains(&copy_engine()) {
        " + CE"
    } else {
        ""
    };
    format!(
        "efatop ipc: CUDA IPC writes {} → {}{path}; {kernel_count} kernel{}{copy_engine}, sizes {}..{}",
        name(0),
        name(1),
        if kernel_count == 1 { "" } else { "s" },
        format_size(smallest),
        format_size(largest),
    )
}

/// GB/s against size: the copy engine, the best kernel per size, and each kernel when there are few.
fn size_chart(
    results: &RunResults,
    kernels: &[Kernel<'_>],
    smallest: u64,
    largest: u64,
) -> LineChart {
    let sizes = results.sizes();
    let each_kernel = kernels.len() <= MAX_KERNEL_SERIES;
    let mut series = Vec::new();
    if each_kernel {
        for (i, kernel) in kernels.iter().enumerate() {
            series.push(Series {
                name: kernel.column.to_string(),
                color: KERNEL_PALETTE[i % KERNEL_PALETTE.len()].into(),
                dashed: false,
                points: sizes
                    .iter()
                    .filter_map(|&size| {
                        results.find(kernel.column, size).map(|m| (size, gbytes(m)))
                    })
                    .collect(),
                labels: vec![],
            });
        }
    }
    let ce = copy_engine();
    let ce_points: Vec<(u64, f64)> = sizes
        .iter()
        .filter_map(|&size| results.find(&ce, size).map(|m| (size, gbytes(m))))
        .collect();
    if !ce_points.is_empty() {
        series.push(Series {
            name: ce.to_string(),
            color: COPY_ENGINE_COLOR.into(),
            dashed: false,
            points: ce_points,
            labels: vec![],
        });
    }
    let best: Vec<(u64, f64, Kernel<'_>)> = sizes
        .iter()
        .filter_map(|&size| {
            kernels
                .iter()
                .filter_map(|k| {
                    results
                        .find(k.column, size)
                        .map(|m| (size, gbytes(m), *k))
                })
                .max_by(|a, b| a.1.total_cmp(&b.1))
        })
        .collect();
    if !best.is_empty() {
        series.push(Series {
            name: BEST_KERNEL.into(),
            color: BEST_KERNEL_COLOR.into(),
            // Dashed over the kernel lines it follows, so both stay visible.
            dashed: each_kernel,
            points: best.iter().map(|&(size, rate, _)| (size, rate)).collect(),
            labels: if each_kernel {
                vec![]
            } else {
                best_kernel_labels(&best)
            },
        });
    }
    let reference_lines: Vec<ReferenceLine> = peak_line(results).into_iter().collect();
    let shown = if each_kernel {
        "each kernel, the best per size, CE"
    } else {
        "best kernel per size (grid x block), CE"
    };
    LineChart {
        title: match reference_lines.first() {
            Some(_) => format!("GB/s by size: {shown} (dashed: NVLink peak)"),
            None => format!("GB/s by size: {shown}"),
        },
        x: Axis {
            label: "message size (bytes)".into(),
            scale: Scale::Log2,
            min: smallest as f64,
            max: largest as f64,
            ticks: Ticks::Default,
        },
        y: gbytes_axis(top_of(&series, &reference_lines)),
        series,
        reference_lines,
        legend: Legend::Clearest,
    }
}

/// The best kernel's grid x block at each of its points: every point when they fit, else (past
/// [`MAX_LABELLED_POINTS`] sizes) only where it differs from the size before, `""` elsewhere.
fn best_kernel_labels(best: &[(u64, f64, Kernel<'_>)]) -> Vec<String> {
    let every = best.len() <= MAX_LABELLED_POINTS;
    best.iter()
        .enumerate()
        .map(|(i, (_, _, kernel))| {
            if every || i == 0 || best[i - 1].2 != *kernel {
                format!("{}x{}", kernel.grid, kernel.block)
            } else {
                String::new()
            }
        })
        .collect()
}

/// The block sizes to draw: all of them up to [`MAX_BLOCK_SERIES`], else that many spread evenly from the
/// smallest to the largest.
fn shown_blocks(blocks: &[u64]) -> Vec<u64> {
    if blocks.len() <= MAX_BLOCK_SERIES {
        return blocks.to_vec();
    }
    let last = blocks.len() - 1;
    let mut shown: Vec<u64> = (0..MAX_BLOCK_SERIES)
        .map(|i| blocks[(i * last + (MAX_BLOCK_SERIES - 1) / 2) / (MAX_BLOCK_SERIES - 1)])
        .collect();
    shown.dedup();
    shown
}

/// GB/s against the grid at the largest size, one line per block size (against the block, one line, when
/// the run had a single grid and several blocks), the copy engine dashed across. `None` without kernels.
fn grid_chart(results: &RunResults, kernels: &[Kernel<'_>], largest: u64) -> Option<LineChart> {
    let measured: Vec<(Kernel<'_>, f64)> = kernels
        .iter()
        .filter_map(|k| results.find(k.column, largest).map(|m| (*k, gbytes(m))))
        .collect();
    if measured.is_empty() {
        return None;
    }
    let distinct = |of: fn(&Kernel<'_>) -> u64| {
        let mut values: Vec<u64> = measured.iter().map(|(k, _)| of(k)).collect();
        values.sort_unstable();
        values.dedup();
        values
    };
    let (grids, blocks) = (distinct(|k| k.grid), distinct(|k| k.block));
    // x is the grid unless only the block varies.
    let by_grid = grids.len() > 1 || blocks.len() == 1;
    let (x_of, line_of): (KernelField, KernelField) = if by_grid {
        (|k| k.grid, |k| k.block)
    } else {
        (|k| k.block, |k| k.grid)
    };
    let (xs, lines) = if by_grid {
        (&grids, shown_blocks(&blocks))
    } else {
        (&blocks, grids.clone())
    };
    let series: Vec<Series> = lines
        .iter()
        .enumerate()
        .map(|(i, &line)| {
            let mut points: Vec<(u64, f64)> = measured
                .iter()
                .filter(|(k, _)| line_of(k) == line)
                .map(|(k, rate)| (x_of(k), *rate))
                .collect();
            points.sort_by_key(|p| p.0);
            Series {
                name: if by_grid {
                    format!("block {line}")
                } else {
                    format!("grid {line}")
                },
                color: KERNEL_PALETTE[i % KERNEL_PALETTE.len()].into(),
                dashed: false,
                points,
                labels: vec![],
            }
        })
        .collect();
    let mut reference_lines = Vec::new();
    let ce = results.find(&copy_engine(), largest);
    if let Some(ce) = ce {
        reference_lines.push(ReferenceLine {
            name: format!("CE {} GB/s", round1(gbytes(ce))),
            value: gbytes(ce),
            color: COPY_ENGINE_COLOR.into(),
        });
    }
    reference_lines.extend(peak_line(results));
    let thinned = if by_grid && lines.len() < blocks.len() {
        format!(" ({} of {} block sizes)", lines.len(), blocks.len())
    } else {
        String::new()
    };
    let (x_label, title) = if by_grid {
        (
            "grid (thread blocks in the store kernel)",
            format!(
                "Store kernel at {}: GB/s by grid, a line per block{thinned}",
                format_size(largest)
            ),
        )
    } else {
        (
            "block (threads per thread block)",
            format!("Store kernel at {}: GB/s by block", format_size(largest)),
        )
    };
    Some(LineChart {
        title: if ce.is_some() {
            format!("{title} (dashed: CE)")
        } else {
            title
        },
        x: Axis {
            label: x_label.into(),
            scale: Scale::Log2,
            min: xs.first().copied().unwrap_or(1) as f64,
            max: xs.last().copied().unwrap_or(1) as f64,
            ticks: Ticks::Counts,
        },
        y: gbytes_axis(top_of(&series, &reference_lines)),
        series,
        reference_lines,
        legend: Legend::Clearest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_block_sizes_than_lines_are_thinned_evenly_keeping_both_ends() {
        let five = [64, 128, 256, 512, 1024];
        assert_eq!(shown_blocks(&five), five);
        let eight = [32, 64, 128, 256, 512, 1024, 2048, 4096];
        assert_eq!(shown_blocks(&eight), [32, 64, 256, 512, 2048, 4096]);
    }

    #[test]
    fn past_twelve_sizes_the_best_kernel_is_named_where_it_changes() {
        fn kernel(column: &Column) -> Kernel<'_> {
            let (grid, block) = column.ipc().and_then(IpcConfig::grid_block).expect("a kernel");
            Kernel { column, grid: grid.into(), block: block.into() }
        }
        let columns = [Column::Ipc(IpcConfig::kernel(1, 256)), Column::Ipc(IpcConfig::kernel(16, 256)), Column::Ipc(IpcConfig::kernel(128, 256))];
        let few = [(1, 1.0, kernel(&columns[0])), (2, 2.0, kernel(&columns[0]))];
        assert_eq!(best_kernel_labels(&few), ["1x256", "1x256"]);
        let mut many: Vec<(u64, f64, Kernel<'_>)> =
            (0..13).map(|i| (1 << i, 1.0, kernel(&columns[1]))).collect();
        many[5].2 = kernel(&columns[2]);
        many[6].2 = kernel(&columns[2]);
        let labels = best_kernel_labels(&many);
        assert_eq!(
            &labels[..8],
            ["16x256", "", "", "", "", "128x256", "", "16x256"]
        );
        assert!(labels[8..].iter().all(String::is_empty));
    }
}
