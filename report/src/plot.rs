//! A saved run as a PNG: bandwidth and latency against message size (log2 axis, one line per
//! configuration, dashed lines at the link speed), and for all-to-all runs one pair heatmap per
//! configuration. Next to the PNG goes a sidecar JSON with exactly what was drawn, so scripts and tests can
//! read the series without decoding pixels. `ipc` runs, whose columns are kernel launch shapes, get a plot
//! of their own (`plot/ipc.rs`): the copy engine and the best kernel by size, and GB/s by the kernel's grid.
//!
//! The plot is first described as a [`PlotSpec`] (pure data, serialized as the sidecar) and then drawn
//! from that description, so the sidecar cannot disagree with the picture.

mod draw;
mod ipc;

use std::path::{Path, PathBuf};

use efatop_proto::column::Column;
use efatop_proto::results::Measurement;
use efatop_proto::sizes::format_size;
use efatop_proto::{Experiment, RunResults};
use serde::Serialize;

use crate::formats::{largest_matrix, ordered_measurements};
use crate::load::ReportError;

/// Pixels across; wide enough for two charts side by side with readable labels.
pub const WIDTH: u32 = 1600;
const TITLE_HEIGHT: u32 = 56;
const CHART_ROW_HEIGHT: u32 = 600;
const HEATMAP_ROW_HEIGHT: u32 = 560;
/// Heatmaps get narrow past four in a row; more configurations wrap onto further rows.
const HEATMAPS_PER_ROW: usize = 4;

/// Distinct, colour-blind-tolerable line colours (Tableau 10), one per configuration in column order.
const PALETTE: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#7f7f7f",
];
/// Reference lines are drawn in a grey that no configuration uses.
const REFERENCE_COLOR: &str = "#555555";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scale {
    Linear,
    Log2,
    Log10,
}

/// How an axis's tick labels read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ticks {
    /// The scale's own: sizes on log2 (`4K`, `1M`), microseconds on log10, plain numbers on linear.
    #[default]
    Default,
    /// Plain whole numbers on a log2 axis (`1`, `16`, `512`): the ipc store kernel's grid or block.
    Counts,
}

impl Ticks {
    /// Every axis but ipc's grid has the default, which the sidecar leaves out: plots from before counts
    /// existed read the same.
    #[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
    fn is_default(&self) -> bool {
        *self == Ticks::Default
    }
}

/// One axis in data units (bytes, Gbps, GB/s, microseconds, grid), before any log transform.
#[derive(Clone, Debug, Serialize)]
pub struct Axis {
    pub label: String,
    pub scale: Scale,
    pub min: f64,
    pub max: f64,
    #[serde(skip_serializing_if = "Ticks::is_default")]
    pub ticks: Ticks,
}

#[derive(Clone, Debug, Serialize)]
pub struct Series {
    pub name: String,
    /// `#rrggbb`, exactly the colour of the line's pixels.
    pub color: String,
    pub dashed: bool,
    /// (x, value) in ascending x: x is the message size in bytes, or on ipc's grid chart the grid (or the
    /// block, when the run had a single grid).
    pub points: Vec<(u64, f64)>,
    /// Text drawn below the points, one per point, `""` where a point has none (ipc's best kernel names
    /// its grid x block); usually none at all, and then left out of the sidecar.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
}

/// A horizontal dashed line at a fixed value, such as the link speed.
#[derive(Clone, Debug, Serialize)]
pub struct ReferenceLine {
    pub name: String,
    pub value: f64,
    pub color: String,
}

/// Where a chart's legend goes. Not part of the sidecar: it moves no data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Legend {
    #[default]
    UpperLeft,
    /// The corner of the plot that the lines cross least (ipc's charts, whose lines sit anywhere).
    Clearest,
}

#[derive(Clone, Debug, Serialize)]
pub struct LineChart {
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
    pub reference_lines: Vec<ReferenceLine>,
    #[serde(skip)]
    pub legend: Legend,
}

/// All-to-all: what each sender delivered to each receiver, at one configuration and size.
#[derive(Clone, Debug, Serialize)]
pub struct Heatmap {
    pub title: String,
    pub config: String,
    pub size: u64,
    /// `gbps[sender][receiver]`; `None` on the diagonal.
    pub gbps: Vec<Vec<Option<f64>>>,
    /// The colour scale runs from 0 to this value.
    pub max_gbps: f64,
}

/// Everything drawn into one PNG; written beside it as the sidecar JSON.
#[derive(Clone, Debug, Serialize)]
pub struct PlotSpec {
    pub png: String,
    pub width: u32,
    pub height: u32,
    pub title: String,
    pub charts: Vec<LineChart>,
    pub heatmaps: Vec<Heatmap>,
}

/// Where the sidecar of `png` goes: the same name with `.json` appended (`bw.png` → `bw.png.json`), so it
/// can never overwrite the results file the plot was made from.
pub fn sidecar_path(png: &Path) -> PathBuf {
    let mut name = png.as_os_str().to_os_string();
    name.push(".json");
    PathBuf::from(name)
}

/// Draws `results` into the PNG at `png` and writes its sidecar; returns what was drawn.
pub fn plot(results: &RunResults, png: &Path) -> Result<PlotSpec, ReportError> {
    // Both paths checked before either is written: a link at the sidecar leaves no picture behind.
    efatop_files::check_output_path(png)?;
    efatop_files::check_output_path(&sidecar_path(png))?;
    let spec = describe(results, png).map_err(|message| ReportError::Plot {
        path: png.to_path_buf(),
        message,
    })?;
    draw::ensure_font()?;
    let pixels = draw::render(&spec).map_err(|message| ReportError::Plot {
        path: png.to_path_buf(),
        message,
    })?;
    draw::write_png(png, spec.width, spec.height, &pixels)?;
    let sidecar = sidecar_path(png);
    let text = serde_json::to_string_pretty(&spec).map_err(|e| ReportError::Plot {
        path: sidecar.clone(),
        message: e.to_string(),
    })?;
    efatop_files::write_atomically(&sidecar, (text + "\n").as_bytes())?;
    Ok(spec)
}

/// Configurations in column order, then any measured but not listed.
fn config_order(results: &RunResults) -> Vec<Column> {
    let mut configs = results.configs.clone();
    for m in &results.measurements {
        if !configs.contains(&m.config) {
            configs.push(m.config.clone());
        }
    }
    configs.retain(|c| results.measurements.iter().any(|m| &m.config == c));
    configs
}

fn color_of(index: usize) -> String {
    PALETTE[index % PALETTE.len()].to_string()
}

/// What the plot shows, from the results alone.
pub fn describe(results: &RunResults, png: &Path) -> Result<PlotSpec, String> {
    let sizes = results.sizes();
    let (Some(&smallest), Some(&largest)) = (sizes.first(), sizes.last()) else {
        return Err("the results file has no measurements to plot".to_string());
    };
    if results.metadata.experiment == Experiment::Ipc {
        return Ok(ipc::describe(results, png, smallest, largest));
    }
    let configs = config_order(results);
    let measured = ordered_measurements(results);
    let size_axis = Axis {
        label: "message size (bytes)".into(),
        scale: Scale::Log2,
        min: smallest as f64,
        max: largest as f64,
        ticks: Ticks::Default,
    };
    let heatmaps = heatmaps(results, &configs);
    let heatmap_rows = heatmaps.len().div_ceil(HEATMAPS_PER_ROW) as u32;
    Ok(PlotSpec {
        png: png.display().to_string(),
        width: WIDTH,
        height: TITLE_HEIGHT + CHART_ROW_HEIGHT + heatmap_rows * HEATMAP_ROW_HEIGHT,
        title: plot_title(results, smallest, largest),
        charts: vec![
            bandwidth_chart(results, &configs, &measured, size_axis.clone()),
            latency_chart(&configs, &measured, size_axis),
        ],
        heatmaps,
    })
}

fn plot_title(results: &RunResults, smallest: u64, largest: u64) -> String {
    let meta = &results.metadata;
    let mut hosts = meta.hosts.clone();
    hosts.dedup();
    format!(
        "efatop {}: {} ranks on {} host{}, {} [{}], {} channel{}, {} memory, sizes {}..{}",
        meta.experiment,
        meta.ranks,
        hosts.len(),
        if hosts.len() == 1 { "" } else { "s" },
        meta.provider_stack,
        meta.provider,
        meta.channels,
        if meta.channels == 1 { "" } else { "s" },
        meta.memory,
        format_size(smallest),
        format_size(largest),
    )
}

/// Gbps per configuration, with dashed lines at one channel's link speed and, when the run used several
/// channels, at all of them together (what `Multi` and `RoundRobin` can reach).
fn bandwidth_chart(
    results: &RunResults,
    configs: &[Column],
    measured: &[&Measurement],
    size_axis: Axis,
) -> LineChart {
    let meta = &results.metadata;
    let series: Vec<Series> = configs
        .iter()
        .enumerate()
        .map(|(i, config)| Series {
            name: config.to_string(),
            color: color_of(i),
            dashed: false,
            points: measured
                .iter()
                .filter(|m| &m.config == config)
                .map(|m| (m.size, m.gbps))
                .collect(),
            labels: vec![],
        })
        .collect();
    let mut reference_lines = Vec::new();
    if let Some(link) = meta.link_gbps {
        reference_lines.push(ReferenceLine {
            name: format!("link {link} Gbps"),
            value: link,
            color: REFERENCE_COLOR.into(),
        });
        if meta.channels > 1 {
            let all = link * meta.channels as f64;
            reference_lines.push(ReferenceLine {
                name: format!("{} channels {all} Gbps", meta.channels),
                value: all,
                color: REFERENCE_COLOR.into(),
            });
        }
    }
    let top_gbps = measured
        .iter()
        .map(|m| m.gbps)
        .chain(reference_lines.iter().map(|r| r.value))
        .fold(0.0, f64::max);
    LineChart {
        title: match meta.link_gbps {
            Some(_) => "Bandwidth (dashed: link speed)".to_string(),
            None => "Bandwidth (link speed unknown)".to_string(),
        },
        x: size_axis,
        y: Axis {
            label: "Gbps".into(),
            scale: Scale::Linear,
            min: 0.0,
            max: if top_gbps > 0.0 { top_gbps * 1.12 } else { 1.0 },
            ticks: Ticks::Default,
        },
        series,
        reference_lines,
        legend: Legend::UpperLeft,
    }
}

/// p50 (solid) and p99 (dashed, same colour) per configuration, on a log scale: latency grows with size
/// over several decades.
fn latency_chart(configs: &[Column], measured: &[&Measurement], size_axis: Axis) -> LineChart {
    let mut series = Vec::new();
    for (i, config) in configs.iter().enumerate() {
        let of_config: Vec<_> = measured.iter().filter(|m| &m.config == config).collect();
        series.push(Series {
            name: format!("{config} p50"),
            color: color_of(i),
            dashed: false,
            points: of_config
                .iter()
                .map(|m| (m.size, m.latency.p50_us))
                .collect(),
            labels: vec![],
        });
        series.push(Series {
            name: format!("{config} p99"),
            color: color_of(i),
            dashed: true,
            points: of_config
                .iter()
                .map(|m| (m.size, m.latency.p99_us))
                .collect(),
            labels: vec![],
        });
    }
    let positive = || {
        series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .filter(|us| *us > 0.0)
    };
    let lowest_us = positive().fold(f64::INFINITY, f64::min);
    let highest_us = positive().fold(0.0, f64::max);
    let (min, max) = if lowest_us.is_finite() {
        (lowest_us / 1.5, highest_us * 1.5)
    } else {
        (0.1, 10.0)
    };
    LineChart {
        title: "Latency (solid: p50, dashed: p99)".into(),
        x: size_axis,
        y: Axis {
            label: "microseconds".into(),
            scale: Scale::Log10,
            min,
            max,
            ticks: Ticks::Default,
        },
        series,
        reference_lines: vec![],
        legend: Legend::UpperLeft,
    }
}

/// One heatmap per configuration that has pair matrices, at its largest size.
fn heatmaps(results: &RunResults, configs: &[Column]) -> Vec<Heatmap> {
    configs
        .iter()
        .filter_map(|config| largest_matrix(results, config))
        .map(|matrix| {
            let max_gbps = matrix
                .gbps
                .iter()
                .flatten()
                .flatten()
                .copied()
                .fold(0.0, f64::max);
            Heatmap {
                // Short enough for a quarter of the image's width at the caption's size: four heatmaps
                // share a row, and the axes already say which way is sender and receiver.
                title: format!("{} at {}, Gbps", matrix.config, format_size(matrix.size)),
                config: matrix.config.to_string(),
                size: matrix.size,
                gbps: matrix.gbps.clone(),
                max_gbps: if max_gbps > 0.0 { max_gbps } else { 1.0 },
            }
        })
        .collect()
}
