//! Drawing a [`PlotSpec`] into an RGB buffer with plotters, and writing it as a PNG.
//!
//! Axes in log scale are drawn in log space (x = log2 bytes, y = log10 microseconds) with tick marks placed
//! by hand at whole powers, so every tick reads as a size the sweep can hit (4K, 8K, ...) or a decade.

use std::path::Path;
use std::sync::OnceLock;

use efatop_proto::sizes::format_size;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{
    Axis, Heatmap, Legend, LineChart, PlotSpec, Scale, Series, Ticks, CHART_ROW_HEIGHT,
    HEATMAPS_PER_ROW, TITLE_HEIGHT,
};
use crate::load::ReportError;

/// The family name plot text asks for; registered from a TrueType file by [`ensure_font`].
const FONT_FAMILY: &str = "sans-serif";
/// Set to a `.ttf` file to use instead of the Debian path below.
const FONT_ENV: &str = "EFATOP_FONT";
/// `DejaVuSans.ttf` from Debian's `fonts-dejavu-core` (`scripts/build/setup-debian` installs it).
const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// plotters' pure-Rust text path keeps fonts in a process-wide table that wants `'static` bytes: the font
/// is read once and kept for the life of the process.
pub fn ensure_font() -> Result<(), ReportError> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let (path, hint) = match std::env::var_os(FONT_ENV) {
                Some(path) => (std::path::PathBuf::from(path), format!("from {FONT_ENV}")),
                None => (
                    std::path::PathBuf::from(DEFAULT_FONT),
                    format!("install Debian's fonts-dejavu-core (scripts/build/setup-debian does) or set {FONT_ENV} to a .ttf file"),
                ),
            };
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e} ({hint})", path.display()))?;
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font(FONT_FAMILY, FontStyle::Normal, bytes)
                .map_err(|_| format!("{}: not a TrueType/OpenType font ({hint})", path.display()))
        })
        .clone()
        .map_err(ReportError::Font)
}

fn rgb(hex: &str) -> RGBColor {
    let channel =
        |at: usize| u8::from_str_radix(hex.get(at..at + 2).unwrap_or("00"), 16).unwrap_or(0);
    RGBColor(channel(1), channel(3), channel(5))
}

fn font(size: u32) -> TextStyle<'static> {
    (FONT_FAMILY, size).into_font().color(&BLACK)
}

/// The whole picture as RGB bytes, row by row.
pub fn render(spec: &PlotSpec) -> Result<Vec<u8>, String> {
    let mut pixels = vec![0u8; spec.width as usize * spec.height as usize * 3];
    {
        let root =
            BitMapBackend::with_buffer(&mut pixels, (spec.width, spec.height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (title, body) = root.split_vertically(TITLE_HEIGHT);
        title
            .draw(&Text::new(spec.title.clone(), (20, 16), font(24)))
            .map_err(|e| e.to_string())?;
        let (charts, heatmaps) = body.split_vertically(CHART_ROW_HEIGHT);
        let chart_areas = charts.split_evenly((1, spec.charts.len().max(1)));
        for (chart, area) in spec.charts.iter().zip(&chart_areas) {
            draw_line_chart(chart, area)?;
        }
        if !spec.heatmaps.is_empty() {
            let rows = spec.heatmaps.len().div_ceil(HEATMAPS_PER_ROW);
            let columns = spec.heatmaps.len().min(HEATMAPS_PER_ROW);
            let areas = heatmaps.split_evenly((rows, columns));
            for (heatmap, area) in spec.heatmaps.iter().zip(&areas) {
                draw_heatmap(heatmap, area)?;
            }
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(pixels)
}

/// A data value in the axis's drawing space.
fn to_axis(scale: Scale, value: f64) -> f64 {
    match scale {
        Scale::Linear => value,
        Scale::Log2 => value.max(f64::MIN_POSITIVE).log2(),
        Scale::Log10 => value.max(f64::MIN_POSITIVE).log10(),
    }
}

/// The drawing-space range of an axis, padded so end points are not drawn on the frame.
fn axis_range(axis: &super::Axis) -> std::ops::Range<f64> {
    let (lo, hi) = (to_axis(axis.scale, axis.min), to_axis(axis.scale, axis.max));
    match axis.scale {
        // One size only: show a power of two either side.
        Scale::Log2 if hi - lo < 1.0 => lo - 1.0..hi + 1.0,
        Scale::Log2 => lo - 0.3..hi + 0.3,
        Scale::Linear | Scale::Log10 => lo..hi,
    }
}

/// Ticks at whole powers of two (every second or fourth one when there are many), or at 1-2-5 steps of
/// each decade when the latency range spans little more than one.
fn log_ticks(scale: Scale, range: &std::ops::Range<f64>) -> Vec<f64> {
    let whole: Vec<f64> = ((range.start.ceil() as i64)..=(range.end.floor() as i64))
        .map(|p| p as f64)
        .collect();
    match scale {
        Scale::Log2 => {
            let step = whole.len().div_ceil(13).max(1);
            whole.into_iter().step_by(step).collect()
        }
        Scale::Log10 if whole.len() >= 3 => whole,
        Scale::Log10 => {
            let decades = (range.start.floor() as i64)..=(range.end.ceil() as i64);
            decades
                .flat_map(|d| [1.0f64, 2.0, 5.0].map(|m| (m * 10f64.powi(d as i32)).log10()))
                .filter(|v| range.contains(v))
                .collect()
        }
        Scale::Linear => vec![],
    }
}

fn size_label(log2_bytes: f64) -> String {
    format_size(2f64.powf(log2_bytes).round() as u64)
}

fn microseconds_label(log10_us: f64) -> String {
    let us = 10f64.powf(log10_us);
    if us >= 1.0 {
        format!("{}", us.round())
    } else {
        format!("{us:.2}")
    }
}

/// An axis in drawing space (already log-transformed where the scale is logarithmic) whose tick marks
/// are the ones given, not ones plotters would pick: ticks must land on whole powers on log axes and on
/// cell centres in heatmaps.
struct TickedAxis {
    range: std::ops::Range<f64>,
    ticks: Vec<f64>,
}

impl plotters::coord::ranged1d::Ranged for TickedAxis {
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = self.range.end - self.range.start;
        let fraction = if span == 0.0 {
            0.5
        } else {
            (value - self.range.start) / span
        };
        limit.0 + (fraction * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: plotters::coord::ranged1d::KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // Only bold grid lines: the light ones would be plotters' own picks.
        if hint.weight().allow_light_points() {
            vec![]
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.range.clone()
    }
}

/// About eight ticks at 1-2-5 steps from zero, for a linear axis.
fn linear_ticks(range: &std::ops::Range<f64>) -> Vec<f64> {
    let raw = (range.end - range.start) / 8.0;
    if raw <= 0.0 || !raw.is_finite() {
        return vec![range.start];
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    let first = (range.start / step).ceil() as i64;
    let last = (range.end / step).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

fn ticked(scale: Scale, range: std::ops::Range<f64>) -> TickedAxis {
    let ticks = match scale {
        Scale::Linear => linear_ticks(&range),
        Scale::Log2 | Scale::Log10 => log_ticks(scale, &range),
    };
    TickedAxis { range, ticks }
}

fn tick_label(axis: &Axis, value: f64) -> String {
    match axis.scale {
        Scale::Log2 if axis.ticks == Ticks::Counts => format!("{}", 2f64.powf(value).round()),
        Scale::Log2 => size_label(value),
        Scale::Log10 => microseconds_label(value),
        Scale::Linear => {
            let rounded = (value * 100.0).round() / 100.0;
            format!("{rounded}")
        }
    }
}

fn draw_line_chart(
    chart: &LineChart,
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
) -> Result<(), String> {
    let mut plot = ChartBuilder::on(area)
        .caption(&chart.title, font(22))
        .margin(18)
        .x_label_area_size(56)
        .y_label_area_size(80)
        .build_cartesian_2d(
            ticked(chart.x.scale, axis_range(&chart.x)),
            ticked(chart.y.scale, axis_range(&chart.y)),
        )
        .map_err(|e| e.to_string())?;
    let x_label = |v: &f64| tick_label(&chart.x, *v);
    let y_label = |v: &f64| tick_label(&chart.y, *v);
    plot.configure_mesh()
        .x_desc(&chart.x.label)
        .y_desc(&chart.y.label)
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .label_style(font(16))
        .axis_desc_style(font(18))
        .bold_line_style(RGBColor(225, 225, 225))
        .draw()
        .map_err(|e| e.to_string())?;
    draw_series(&mut plot, chart)?;
    let position = match chart.legend {
        Legend::UpperLeft => SeriesLabelPosition::UpperLeft,
        Legend::Clearest => clearest_corner(&plot, chart)?,
    };
    plot.configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(180, 180, 180))
        .label_font(font(LEGEND_FONT_SIZE))
        .legend_area_size(LEGEND_AREA)
        .draw()
        .map_err(|e| e.to_string())
}

const LEGEND_FONT_SIZE: u32 = 15;
/// Pixels of a legend row given to the line sample, left of its name.
const LEGEND_AREA: i32 = 30;
/// plotters' default space inside the legend box.
const LEGEND_MARGIN: i32 = 10;

fn draw_series(
    plot: &mut ChartContext<'_, BitMapBackend<'_>, Cartesian2d<TickedAxis, TickedAxis>>,
    chart: &LineChart,
) -> Result<(), String> {
    let to_point = |series: &Series| -> Vec<(f64, f64)> {
        series
            .points
            .iter()
            .filter(|(_, v)| chart.y.scale != Scale::Log10 || *v > 0.0)
            .map(|&(size, v)| {
                (
                    to_axis(chart.x.scale, size as f64),
                    to_axis(chart.y.scale, v),
                )
            })
            .collect()
    };
    let x_ends = axis_range(&chart.x);
    for line in &chart.reference_lines {
        let color = rgb(&line.color);
        let y = to_axis(chart.y.scale, line.value);
        plot.draw_series(DashedLineSeries::new(
            [(x_ends.start, y), (x_ends.end, y)],
            10,
            6,
            color.stroke_width(2),
        ))
        .map_err(|e| e.to_string())?
        .label(line.name.clone())
        .legend(move |(x, y)| dashed_legend(x, y, color));
    }
    for series in &chart.series {
        let color = rgb(&series.color);
        let points = to_point(series);
        if series.dashed {
            plot.draw_series(DashedLineSeries::new(
                points.clone(),
                8,
                5,
                color.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(series.name.clone())
            .legend(move |(x, y)| dashed_legend(x, y, color));
        } else {
            plot.draw_series(LineSeries::new(points.clone(), color.stroke_width(3)))
                .map_err(|e| e.to_string())?
                .label(series.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
                });
            plot.draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))
                .map_err(|e| e.to_string())?;
        }
        if !series.labels.is_empty() {
            // Point labels sit just below their point, in the line's colour, on a pale patch so that
            // the line they hang from does not run through them.
            let style = font(POINT_LABEL_SIZE)
                .color(&color)
                .pos(Pos::new(HPos::Center, VPos::Top));
            let mut labels = Vec::new();
            for (p, text) in points.iter().zip(&series.labels) {
                if text.is_empty() {
                    continue;
                }
                let (w, h) = style.font.box_size(text).map_err(|e| e.to_string())?;
                let (half, h) = (w as i32 / 2 + 2, h as i32);
                let patch = [
                    (-half, POINT_LABEL_DROP - 1),
                    (half, POINT_LABEL_DROP + h + 1),
                ];
                labels.push(
                    EmptyElement::at(*p)
                        + Rectangle::new(patch, WHITE.mix(0.85).filled())
                        + Text::new(text.clone(), (0, POINT_LABEL_DROP), style.clone()),
                );
            }
            plot.draw_series(labels).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

const POINT_LABEL_SIZE: u32 = 14;
/// Pixels from a point down to the top of its label.
const POINT_LABEL_DROP: i32 = 8;

/// The corner of the plotting area where the legend (as plotters will lay it out) covers the fewest
/// pixels of lines, reference lines and point labels; the upper left on a tie.
fn clearest_corner(
    plot: &ChartContext<'_, BitMapBackend<'_>, Cartesian2d<TickedAxis, TickedAxis>>,
    chart: &LineChart,
) -> Result<SeriesLabelPosition, String> {
    let style = font(LEGEND_FONT_SIZE);
    let mut text = MultiLineText::<_, String>::new((0, 0), &style);
    for name in chart
        .reference_lines
        .iter()
        .map(|l| &l.name)
        .chain(chart.series.iter().map(|s| &s.name))
    {
        text.push_line(name.clone());
    }
    let (w, h) = text.estimate_dimension().map_err(|e| e.to_string())?;
    let (w, h) = (w + LEGEND_AREA + 2 * LEGEND_MARGIN, h + 2 * LEGEND_MARGIN);
    let area = plot.plotting_area();
    let base = area.get_base_pixel();
    let (area_w, area_h) = area.dim_in_pixel();
    let (area_w, area_h) = (area_w as i32, area_h as i32);
    let pixel = |x: f64, y: f64| {
        let (px, py) = area.map_coordinate(&(x, y));
        (px - base.0, py - base.1)
    };
    // Every line walked in steps of a few pixels, in plotting-area pixels.
    let mut ink: Vec<(i32, i32)> = Vec::new();
    let mut walk = |from: (i32, i32), to: (i32, i32)| {
        let steps = ((to.0 - from.0).abs().max((to.1 - from.1).abs()) / 3).max(1);
        for k in 0..=steps {
            ink.push((
                from.0 + (to.0 - from.0) * k / steps,
                from.1 + (to.1 - from.1) * k / steps,
            ));
        }
    };
    for line in &chart.reference_lines {
        let y = to_axis(chart.y.scale, line.value);
        let x = axis_range(&chart.x);
        walk(pixel(x.start, y), pixel(x.end, y));
    }
    for series in &chart.series {
        let points: Vec<(i32, i32)> = series
            .points
            .iter()
            .filter(|(_, v)| chart.y.scale != Scale::Log10 || *v > 0.0)
            .map(|&(x, v)| pixel(to_axis(chart.x.scale, x as f64), to_axis(chart.y.scale, v)))
            .collect();
        for pair in points.windows(2) {
            walk(pair[0], pair[1]);
        }
        if let [only] = points[..] {
            walk(only, only);
        }
        for (p, label) in points
            .iter()
            .zip(&series.labels)
            .filter(|(_, t)| !t.is_empty())
        {
            let half = label.len() as i32 * POINT_LABEL_SIZE as i32 / 4;
            let y = p.1 + POINT_LABEL_DROP + POINT_LABEL_SIZE as i32 / 2;
            walk((p.0 - half, y), (p.0 + half, y));
        }
    }
    let candidates = [
        SeriesLabelPosition::UpperLeft,
        SeriesLabelPosition::UpperRight,
        SeriesLabelPosition::LowerRight,
        SeriesLabelPosition::LowerLeft,
    ];
    // Where plotters puts the box: 5 pixels in from the corner.
    let corner = |at: &SeriesLabelPosition| match at {
        SeriesLabelPosition::UpperRight => (area_w - w - 5, 5),
        SeriesLabelPosition::LowerRight => (area_w - w - 5, area_h - h - 5),
        SeriesLabelPosition::LowerLeft => (5, area_h - h - 5),
        _ => (5, 5),
    };
    let covered = |at: &SeriesLabelPosition| {
        let (x0, y0) = corner(at);
        ink.iter()
            .filter(|(x, y)| (x0..=x0 + w).contains(x) && (y0..=y0 + h).contains(y))
            .count()
    };
    Ok(candidates
        .into_iter()
        .min_by_key(|at| covered(at))
        .unwrap_or(SeriesLabelPosition::UpperLeft))
}

/// A dashed stroke in the legend, like the line it stands for.
fn dashed_legend(
    x: i32,
    y: i32,
    color: RGBColor,
) -> DashedPathElement<std::vec::IntoIter<(i32, i32)>, i32> {
    DashedPathElement::new(vec![(x, y), (x + 24, y)], 7, 5, color.stroke_width(2))
}

/// White to dark blue as bandwidth goes from zero to the matrix's best pair.
fn heat_color(fraction: f64) -> RGBColor {
    let t = fraction.clamp(0.0, 1.0);
    let (light, dark) = ((239.0, 243.0, 255.0), (8.0, 48.0, 107.0));
    let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    RGBColor(
        mix(light.0, dark.0),
        mix(light.1, dark.1),
        mix(light.2, dark.2),
    )
}

/// Cell numbers get small past this many ranks; the colours alone carry the matrix then.
const MAX_ANNOTATED_RANKS: usize = 12;

fn draw_heatmap(
    heatmap: &Heatmap,
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
) -> Result<(), String> {
    let ranks = heatmap.gbps.len();
    let extent = ranks.max(1) as f64;
    let centers: Vec<f64> = (0..ranks).map(|r| r as f64 + 0.5).collect();
    let mut plot = ChartBuilder::on(area)
        .caption(&heatmap.title, font(18))
        .margin(18)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(
            TickedAxis {
                range: 0.0..extent,
                ticks: centers.clone(),
            },
            TickedAxis {
                range: 0.0..extent,
                ticks: centers,
            },
        )
        .map_err(|e| e.to_string())?;
    // Row 0 (sender 0) at the top, as a matrix is read.
    let sender_at = |y: f64| ranks.saturating_sub(1).saturating_sub(y.floor() as usize);
    let receiver_label = |x: &f64| format!("{}", x.floor());
    let sender_label = |y: &f64| format!("{}", sender_at(*y));
    plot.configure_mesh()
        .disable_mesh()
        .x_desc("receiver rank")
        .y_desc("sender rank")
        .x_label_formatter(&receiver_label)
        .y_label_formatter(&sender_label)
        .label_style(font(15))
        .axis_desc_style(font(16))
        .draw()
        .map_err(|e| e.to_string())?;
    for (sender, row) in heatmap.gbps.iter().enumerate() {
        let top = (ranks - 1 - sender) as f64;
        for (receiver, cell) in row.iter().enumerate() {
            let corner = (receiver as f64, top);
            let far = (receiver as f64 + 1.0, top + 1.0);
            let fill = cell.map_or(RGBColor(215, 215, 215), |gbps| {
                heat_color(gbps / heatmap.max_gbps)
            });
            plot.draw_series([Rectangle::new([corner, far], fill.filled())])
                .map_err(|e| e.to_string())?;
            plot.draw_series([Rectangle::new([corner, far], WHITE.stroke_width(1))])
                .map_err(|e| e.to_string())?;
            if ranks <= MAX_ANNOTATED_RANKS {
                let text = cell.map_or_else(
                    || "-".to_string(),
                    |gbps| {
                        if gbps < 10.0 {
                            format!("{gbps:.2}")
                        } else {
                            format!("{gbps:.1}")
                        }
                    },
                );
                let dark = cell.is_some_and(|gbps| gbps / heatmap.max_gbps > 0.55);
                let style = font(if ranks <= 6 { 16 } else { 12 })
                    .color(if dark { &WHITE } else { &BLACK })
                    .pos(Pos::new(HPos::Center, VPos::Center));
                plot.draw_series([Text::new(text, (receiver as f64 + 0.5, top + 0.5), style)])
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    Ok(())
}

/// Encodes the picture and writes it at `path` ([`efatop_files::write_atomically`]: never through a
/// link, staged under a fresh name and renamed into place).
pub fn write_png(path: &Path, width: u32, height: u32, pixels: &[u8]) -> Result<(), ReportError> {
    let as_write_error = |e: png::EncodingError| ReportError::Write {
        path: path.to_path_buf(),
        source: std::io::Error::other(e.to_string()),
    };
    let mut bytes = Vec::new();
    let mut encoder = png::Encoder::new(&mut bytes, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(as_write_error)?;
    writer.write_image_data(pixels).map_err(as_write_error)?;
    writer.finish().map_err(as_write_error)?;
    efatop_files::write_atomically(path, &bytes)?;
    Ok(())
}
