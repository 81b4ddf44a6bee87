//! Plots: the PNG has the size the sidecar states, is mostly but not entirely white, and every series the
//! sidecar lists left pixels of its own colour; the sidecar holds the right charts, axes and series.

mod common;

use common::{load, Scratch};
use efatop_report::{plot, sidecar_path};
use serde_json::Value;

struct Image {
    width: u32,
    height: u32,
    rgb: Vec<u8>,
}

impl Image {
    fn read(path: &std::path::Path) -> Self {
        let decoder = png::Decoder::new(std::io::BufReader::new(
            std::fs::File::open(path).expect("png exists"),
        ));
        let mut reader = decoder.read_info().expect("a PNG header");
        let mut rgb = vec![0; reader.output_buffer_size().expect("buffer size")];
        let info = reader.next_frame(&mut rgb).expect("a PNG frame");
        assert_eq!(info.color_type, png::ColorType::Rgb);
        rgb.truncate(info.buffer_size());
        Self {
            width: info.width,
            height: info.height,
            rgb,
        }
    }

    fn pixels(&self, rows: std::ops::Range<u32>) -> impl Iterator<Item = [u8; 3]> + '_ {
        let row_bytes = self.width as usize * 3;
        self.rgb[rows.start as usize * row_bytes..rows.end as usize * row_bytes]
            .chunks_exact(3)
            .map(|p| [p[0], p[1], p[2]])
    }

    /// Pixels of exactly `color` in the given columns and rows.
    fn count_in(
        &self,
        color: [u8; 3],
        columns: std::ops::Range<u32>,
        rows: std::ops::Range<u32>,
    ) -> usize {
        let width = self.width as usize;
        self.pixels(rows)
            .enumerate()
            .filter(|(at, p)| columns.contains(&((at % width) as u32)) && *p == color)
            .count()
    }

    fn non_white_fraction(&self, rows: std::ops::Range<u32>) -> f64 {
        let total = (rows.end - rows.start) as usize * self.width as usize;
        self.pixels(rows).filter(|p| *p != [255, 255, 255]).count() as f64 / total as f64
    }
}

fn hex(color: &Value) -> [u8; 3] {
    let text = color.as_str().expect("colour string");
    let channel = |at: usize| u8::from_str_radix(&text[at..at + 2], 16).expect("hex");
    [channel(1), channel(3), channel(5)]
}

fn names(chart: &Value) -> Vec<&str> {
    chart["series"]
        .as_array()
        .expect("series")
        .iter()
        .map(|s| s["name"].as_str().expect("name"))
        .collect()
}

#[test]
fn write_run_plots_bandwidth_and_latency_with_link_lines() {
    let scratch = Scratch::new("plot-write");
    let png = scratch.path("write.png");
    let spec = plot(&load("write-p5.json"), &png).unwrap_or_else(|e| panic!("{e}"));
    let image = Image::read(&png);
    assert_eq!((image.width, image.height), (spec.width, spec.height));
    assert_eq!((image.width, image.height), (1600, 656));
    let inked = image.non_white_fraction(0..image.height);
    assert!(
        (0.03..0.5).contains(&inked),
        "{inked} of the pixels are not white"
    );

    let sidecar: Value =
        serde_json::from_str(&std::fs::read_to_string(sidecar_path(&png)).expect("sidecar"))
            .expect("json");
    assert_eq!(sidecar["png"], png.display().to_string());
    let charts = sidecar["charts"].as_array().expect("charts");
    assert_eq!(charts.len(), 2);
    let (bandwidth, latency) = (&charts[0], &charts[1]);
    assert_eq!(names(bandwidth), ["SinglePin", "MultiPin", "RoundRobinPin"]);
    assert_eq!(
        names(latency),
        [
            "SinglePin p50",
            "SinglePin p99",
            "MultiPin p50",
            "MultiPin p99",
            "RoundRobinPin p50",
            "RoundRobinPin p99"
        ]
    );
    assert_eq!(
        (
            bandwidth["x"]["scale"].as_str(),
            bandwidth["y"]["scale"].as_str()
        ),
        (Some("log2"), Some("linear"))
    );
    assert_eq!(
        (
            latency["x"]["scale"].as_str(),
            latency["y"]["scale"].as_str()
        ),
        (Some("log2"), Some("log10"))
    );
    assert_eq!(
        (
            bandwidth["x"]["min"].as_f64(),
            bandwidth["x"]["max"].as_f64()
        ),
        (Some(262_144.0), Some(67_108_864.0))
    );
    for series in bandwidth["series"].as_array().expect("series") {
        assert_eq!(
            series["points"].as_array().expect("points").len(),
            9,
            "{series}"
        );
    }
    let links: Vec<f64> = bandwidth["reference_lines"]
        .as_array()
        .expect("links")
        .iter()
        .map(|l| l["value"].as_f64().expect("value"))
        .collect();
    assert_eq!(links, [100.0, 400.0]);
    assert!(sidecar["heatmaps"].as_array().expect("heatmaps").is_empty());

    // Every line left its colour in the bandwidth chart (the left half, below the title). Its markers and
    // legend entry alone leave about 500 pixels; the line across the chart adds over a thousand.
    let bandwidth_area = (0..image.width / 2, 56..image.height);
    for series in bandwidth["series"].as_array().expect("series") {
        let pixels = image.count_in(
            hex(&series["color"]),
            bandwidth_area.0.clone(),
            bandwidth_area.1.clone(),
        );
        assert!(pixels > 1_200, "{} drew {pixels} pixels", series["name"]);
    }
    // The latency chart (the right half) draws each configuration's p50 and p99 in its colour.
    for series in latency["series"]
        .as_array()
        .expect("series")
        .iter()
        .step_by(2)
    {
        let pixels = image.count_in(
            hex(&series["color"]),
            image.width / 2..image.width,
            56..image.height,
        );
        assert!(pixels > 1_200, "{} drew {pixels} pixels", series["name"]);
    }
    let reference = image.count_in(
        hex(&bandwidth["reference_lines"][0]["color"]),
        bandwidth_area.0,
        bandwidth_area.1,
    );
    assert!(reference > 1_000, "link lines drew {reference} pixels");
}

#[test]
fn all_to_all_run_adds_one_pair_heatmap_per_configuration() {
    let scratch = Scratch::new("plot-all2all");
    let png = scratch.path("all2all.png");
    let spec = plot(&load("all2all-p5.json"), &png).unwrap_or_else(|e| panic!("{e}"));
    let image = Image::read(&png);
    assert_eq!((image.width, image.height), (1600, 656 + 560));
    let sidecar: Value =
        serde_json::from_str(&std::fs::read_to_string(sidecar_path(&png)).expect("sidecar"))
            .expect("json");
    let heatmaps = sidecar["heatmaps"].as_array().expect("heatmaps");
    let configs: Vec<&str> = heatmaps
        .iter()
        .map(|h| h["config"].as_str().expect("config"))
        .collect();
    assert_eq!(configs, ["SingleDMA", "MultiDMA"]);
    for heatmap in heatmaps {
        assert_eq!(
            heatmap["size"].as_u64(),
            Some(4 << 20),
            "the largest size is shown"
        );
        let rows = heatmap["gbps"].as_array().expect("rows");
        assert_eq!(rows.len(), 4);
        assert!(rows[2][2].is_null(), "no self pair");
    }
    assert!((spec.heatmaps[1].max_gbps - 100.0).abs() < 1e-9);
    // The heatmap row is mostly cells: well inked, and blue where the pairs are fast.
    let heat_rows = image.height - 560..image.height;
    let inked = image.non_white_fraction(heat_rows.clone());
    assert!(inked > 0.2, "heatmap row only {inked} inked");
    let blue = image
        .pixels(heat_rows)
        .filter(|[r, g, b]| *b > 90 && u16::from(*r) + 40 < u16::from(*b) && *g < 120)
        .count();
    assert!(blue > 20_000, "{blue} dark blue pixels");
}

#[test]
fn nothing_measured_is_an_error_naming_the_file() {
    let scratch = Scratch::new("plot-empty");
    let mut results = load("write-p5.json");
    results.measurements.clear();
    let png = scratch.path("empty.png");
    let err = plot(&results, &png).unwrap_err().to_string();
    assert!(
        err.starts_with(&png.display().to_string()) && err.contains("no measurements"),
        "{err}"
    );
    assert!(!png.exists());
}
