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
    // Fields only ipc's plot uses stay out of every other sidecar.
    for axis in [
        &bandwidth["x"],
        &bandwidth["y"],
        &latency["x"],
        &latency["y"],
    ] {
        assert!(axis.get("ticks").is_none(), "{axis}");
    }
    for series in bandwidth["series"].as_array().expect("series") {
        assert!(series.get("labels").is_none(), "{series}");
    }

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

fn points(series: &Value) -> Vec<(u64, f64)> {
    series["points"]
        .as_array()
        .expect("points")
        .iter()
        .map(|p| (p[0].as_u64().expect("x"), p[1].as_f64().expect("value")))
        .collect()
}

fn near(actual: f64, expected: f64) -> bool {
    (actual - expected).abs() < 0.01
}

fn read_sidecar(png: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(sidecar_path(png)).expect("sidecar"))
        .expect("json")
}

const GIB: u64 = 1 << 30;

#[test]
fn ipc_sweep_plots_the_best_kernel_and_one_line_per_block_not_fifty_one_lines() {
    let scratch = Scratch::new("plot-ipc-sweep");
    let png = scratch.path("ipc.png");
    let spec = plot(&load("ipc-sweep-h100-same-gpu.json"), &png).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        spec.title,
        "efatop ipc: CUDA IPC writes GPU 0 (00000000:00:06.0) → GPU 0 (00000000:00:06.0), one GPU: \
         HBM, not NVLink; 50 kernels + CE, sizes 512M..1G"
    );
    let image = Image::read(&png);
    assert_eq!((image.width, image.height), (1600, 656));
    let inked = image.non_white_fraction(0..image.height);
    assert!(
        (0.03..0.5).contains(&inked),
        "{inked} of the pixels are not white"
    );

    let sidecar = read_sidecar(&png);
    assert_eq!(sidecar["title"], spec.title);
    let charts = sidecar["charts"].as_array().expect("charts");
    assert_eq!(charts.len(), 2, "no latency chart: the grid chart instead");
    let (by_size, by_grid) = (&charts[0], &charts[1]);

    // By size: only the copy engine and the best kernel (fifty kernels are too many to draw one by one).
    assert_eq!(names(by_size), ["CE", "best kernel"]);
    let y_label = by_size["y"]["label"].as_str().expect("label");
    assert!(
        y_label.starts_with("GB/s") && y_label.contains("bytes"),
        "{y_label}"
    );
    assert_eq!(by_size["x"]["scale"], "log2");
    assert!(
        by_size["x"].get("ticks").is_none(),
        "sizes are the default ticks"
    );
    let (ce, best) = (&by_size["series"][0], &by_size["series"][1]);
    let ce_points = points(ce);
    assert_eq!(ce_points.len(), 2);
    assert!(near(ce_points[1].1, 1498.53), "{ce_points:?}");
    let best_points = points(best);
    assert_eq!(
        best_points.iter().map(|p| p.0).collect::<Vec<_>>(),
        [GIB / 2, GIB]
    );
    assert!(
        near(best_points[0].1, 1406.99) && near(best_points[1].1, 1419.03),
        "{best_points:?}"
    );
    assert_eq!(best["labels"], serde_json::json!(["128x1024", "128x1024"]));
    assert_eq!(best["dashed"], false);
    assert!(
        by_size["reference_lines"]
            .as_array()
            .expect("lines")
            .is_empty(),
        "no NVLink peak known"
    );

    // By grid at 1G: a line per block size, grids 1..512 on a log2 axis read as counts, CE dashed across.
    assert_eq!(
        names(by_grid),
        [
            "block 64",
            "block 128",
            "block 256",
            "block 512",
            "block 1024"
        ]
    );
    assert_eq!(by_grid["x"]["scale"], "log2");
    assert_eq!(by_grid["x"]["ticks"], "counts");
    assert_eq!(
        (by_grid["x"]["min"].as_f64(), by_grid["x"]["max"].as_f64()),
        (Some(1.0), Some(512.0))
    );
    for series in by_grid["series"].as_array().expect("series") {
        let line = points(series);
        let grids: Vec<u64> = line.iter().map(|p| p.0).collect();
        assert_eq!(
            grids,
            [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
            "{}",
            series["name"]
        );
        // Bandwidth rises with the grid: the widest grid moves over ten times what one block does.
        assert!(line[9].1 > 10.0 * line[0].1, "{}: {line:?}", series["name"]);
    }
    let block_256 = points(&by_grid["series"][2]);
    assert!(
        near(block_256[0].1, 30.42) && near(block_256[9].1, 1415.85),
        "{block_256:?}"
    );
    let reference = &by_grid["reference_lines"][0];
    assert_eq!(reference["name"], "CE 1498.5 GB/s");
    assert!(near(reference["value"].as_f64().expect("value"), 1498.53));
    assert_eq!(
        reference["color"], ce["color"],
        "CE keeps its colour across both charts"
    );

    // Each line left its colour in its own half; the CE reference crosses the right one.
    let (left, right, below_title) = (
        0..image.width / 2,
        image.width / 2..image.width,
        56..image.height,
    );
    for series in by_size["series"].as_array().expect("series") {
        let pixels = image.count_in(hex(&series["color"]), left.clone(), below_title.clone());
        assert!(pixels > 800, "{} drew {pixels} pixels", series["name"]);
    }
    for series in by_grid["series"].as_array().expect("series") {
        let pixels = image.count_in(hex(&series["color"]), right.clone(), below_title.clone());
        assert!(pixels > 800, "{} drew {pixels} pixels", series["name"]);
    }
    let ce_line = image.count_in(hex(&reference["color"]), right, below_title);
    assert!(ce_line > 1_000, "the CE reference drew {ce_line} pixels");
}

#[test]
fn ipc_default_run_draws_each_kernel_and_the_best_dashed_over_them() {
    let scratch = Scratch::new("plot-ipc-default");
    let png = scratch.path("ipc.png");
    let spec =
        plot(&load("ipc-default-h100-same-gpu.json"), &png).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        spec.title
            .ends_with("one GPU: HBM, not NVLink; 3 kernels + CE, sizes 1M..1G"),
        "{}",
        spec.title
    );
    assert!(
        !spec.title.contains("shm") && !spec.title.contains("channel"),
        "{}",
        spec.title
    );
    let image = Image::read(&png);
    assert_eq!((image.width, image.height), (1600, 656));

    let sidecar = read_sidecar(&png);
    let (by_size, by_grid) = (&sidecar["charts"][0], &sidecar["charts"][1]);
    assert_eq!(
        names(by_size),
        [
            "IPC 1x256",
            "IPC 16x256",
            "IPC 128x256",
            "CE",
            "best kernel"
        ]
    );
    let best = &by_size["series"][4];
    assert_eq!(
        best["dashed"], true,
        "dashed over the kernel line it follows"
    );
    assert!(
        best.get("labels").is_none(),
        "the kernels' own lines say which is best"
    );
    let best_points = points(best);
    assert_eq!(best_points.len(), 11);
    // 16x256 wins at 1M, 128x256 from 2M on.
    assert!(near(best_points[0].1, 145.73), "{best_points:?}");
    assert_eq!(&best_points[1..], &points(&by_size["series"][2])[1..]);

    assert_eq!(names(by_grid), ["block 256"]);
    let line = points(&by_grid["series"][0]);
    assert_eq!(line.iter().map(|p| p.0).collect::<Vec<_>>(), [1, 16, 128]);
    assert!(near(line[2].1, 1328.66), "{line:?}");

    for series in by_size["series"].as_array().expect("series") {
        let pixels = image.count_in(hex(&series["color"]), 0..image.width / 2, 56..image.height);
        assert!(pixels > 500, "{} drew {pixels} pixels", series["name"]);
    }
}

#[test]
fn ipc_between_two_gpus_names_both_and_draws_the_nvlink_peak() {
    let mut results = load("ipc-default-h100-same-gpu.json");
    results.metadata.link_gbps = Some(3600.0);
    results.metadata.link_source =
        serde_json::from_value("nvlink: NVML, 18 links x 25 GB/s".into()).expect("a link source");
    results.metadata.placements[1].gpu = Some(1);
    results.metadata.placements[1].gpu_pci_bus_id = Some("00000000:2A:00.0".into());
    let spec = efatop_report::plot::describe(&results, std::path::Path::new("ipc.png"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        spec.title,
        "efatop ipc: CUDA IPC writes GPU 0 (00000000:00:06.0) → GPU 1 (00000000:2A:00.0); 3 kernels + CE, \
         sizes 1M..1G"
    );
    let peak = |chart: &efatop_report::plot::LineChart| -> Vec<(String, f64)> {
        chart
            .reference_lines
            .iter()
            .map(|l| (l.name.clone(), l.value))
            .collect()
    };
    assert_eq!(
        peak(&spec.charts[0]),
        [("NVLink peak 450 GB/s".to_string(), 450.0)]
    );
    assert!(
        spec.charts[0].title.ends_with("(dashed: NVLink peak)"),
        "{}",
        spec.charts[0].title
    );
    let on_grid = peak(&spec.charts[1]);
    assert_eq!(on_grid.len(), 2);
    assert_eq!(on_grid[1], ("NVLink peak 450 GB/s".to_string(), 450.0));

    // Without placements the ranks stand in for the GPUs.
    results.metadata.placements.clear();
    let spec = efatop_report::plot::describe(&results, std::path::Path::new("ipc.png"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        spec.title
            .starts_with("efatop ipc: CUDA IPC writes rank 0 → rank 1; "),
        "{}",
        spec.title
    );
}

/// The copy engine, or a store kernel with a grid of 128.
fn copy_engine_or_grid_128(column: &efatop_proto::Column) -> bool {
    column.ipc().is_some_and(|config| config.grid_block().is_none_or(|(grid, _)| grid == 128))
}

#[test]
fn ipc_with_one_grid_plots_against_the_block() {
    let mut results = load("ipc-sweep-h100-same-gpu.json");
    results
        .measurements
        .retain(|m| copy_engine_or_grid_128(&m.config));
    results.configs.retain(copy_engine_or_grid_128);
    let spec = efatop_report::plot::describe(&results, std::path::Path::new("ipc.png"))
        .unwrap_or_else(|e| panic!("{e}"));
    let by_size: Vec<&str> = spec.charts[0]
        .series
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        by_size,
        [
            "IPC 128x64",
            "IPC 128x128",
            "IPC 128x256",
            "IPC 128x512",
            "IPC 128x1024",
            "CE",
            "best kernel"
        ],
        "five kernels are few enough to draw"
    );
    let by_block = &spec.charts[1];
    assert!(
        by_block.x.label.starts_with("block"),
        "{}",
        by_block.x.label
    );
    assert_eq!(by_block.series.len(), 1);
    assert_eq!(by_block.series[0].name, "grid 128");
    let blocks: Vec<u64> = by_block.series[0].points.iter().map(|p| p.0).collect();
    assert_eq!(blocks, [64, 128, 256, 512, 1024]);
}
