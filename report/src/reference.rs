//! What a run should deliver on its instance type: the published reference figures efatop knows, per
//! instance type, experiment, column and size, each with where it was published, and the one rule by
//! which a measurement is held against one ([`lookup`], [`annotate`]).
//!
//! The figures are data compiled into the binary ([`REFERENCES`]); `docs/expected.md` shows the same
//! tables ([`render_markdown`]) and a test holds the two to agree. A type efatop lists ([`INSTANCE_TYPES`])
//! without a figure for an experiment has none: it is never filled in from another type, another column
//! or another size. The figures were measured over efa; a run over another provider is still shown against
//! them (a p5-shaped tree with tcp standing in, say), and its header says the provider was not efa.

use std::fmt::Write;

use efatop_proto::column::Column;
use efatop_proto::expected::Expected;
use efatop_proto::results::{Measurement, RunMetadata};
use efatop_proto::sizes::format_size;
use efatop_proto::Experiment;

/// Where the whole table is described, for lines that point a reader to it.
pub const DOC: &str = "docs/expected.md";

/// The instance types efatop knows to ask about, each with what is known of its figures when it has none
/// (shown in `docs/expected.md`).
pub const INSTANCE_TYPES: [(&str, &str); 8] = [
    ("p4d.24xlarge", "no published figure for these experiments (its EFA v1 NICs have no RDMA write)"),
    ("p4de.24xlarge", "no published figure for these experiments"),
    ("p5.48xlarge", "the seed tables the project began from (runs on p5.48xlarge, quoted in docs/expected.md)"),
    ("p5e.48xlarge", "no published figure (same NICs as p5.48xlarge, but no run on it was published)"),
    ("p5en.48xlarge", "no published figure (no per-NIC figure for its 200G EFA was found)"),
    ("p6-b200.48xlarge", "no published figure (no per-NIC figure for its 400G EFA was found)"),
    ("p6-b300.48xlarge", "no published figure (no per-NIC figure for its 400G EFA was found)"),
    ("p6e-gb200.36xlarge", "no published figure"),
];

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// One column of a published table and what its figures depend on.
#[derive(Clone, Copy, Debug)]
pub struct ReferenceColumn {
    /// The efatop column the figures stand for (`SinglePin`, `ProxyMultiNBIDMA`, `IPC 128x256`).
    pub label: &'static str,
    /// Channels (NICs) the figures' layout wrote over, when a run must use as many to compare.
    pub channels: Option<usize>,
    /// Ranks the figures were measured with, when the figure depends on it (round robin, all-to-all).
    pub ranks: Option<usize>,
}

const fn any(label: &'static str) -> ReferenceColumn {
    ReferenceColumn { label, channels: None, ranks: None }
}

const fn over(label: &'static str, channels: usize, ranks: Option<usize>) -> ReferenceColumn {
    ReferenceColumn { label, channels: Some(channels), ranks }
}

const fn ranked(label: &'static str, ranks: usize) -> ReferenceColumn {
    ReferenceColumn { label, channels: None, ranks: Some(ranks) }
}

/// One published table: an instance type's figures for one experiment, in Gbps, by size and column.
#[derive(Clone, Debug)]
pub struct Reference {
    pub instance_type: &'static str,
    pub experiment: Experiment,
    /// Where the figures were published (`seeds/write.md`), and how they were measured.
    pub source: &'static str,
    pub setup: &'static str,
    pub columns: &'static [ReferenceColumn],
    /// Per size (`None`: the source states no size, and says the figure holds across sizes), one figure
    /// per column, in Gbps.
    pub rows: &'static [(Option<u64>, &'static [f64])],
}

/// Every published figure efatop holds runs against.
pub const REFERENCES: &[Reference] = &[
    Reference {
        instance_type: "p5.48xlarge",
        experiment: Experiment::Write,
        source: "seeds/write.md",
        setup: "4 nodes, 1 rank per node, efa",
        columns: &[any("SinglePin"), any("SingleDMA"), over("MultiDMA", 4, None), over("RoundRobinDMA", 4, Some(4))],
        rows: &[
            (Some(256 * KIB), &[31.58, 32.56, 32.76, 90.54]),
            (Some(512 * KIB), &[48.04, 47.93, 66.36, 133.70]),
            (Some(MIB), &[63.27, 64.23, 114.82, 181.24]),
            (Some(2 * MIB), &[77.28, 78.18, 167.37, 223.30]),
            (Some(4 * MIB), &[86.24, 85.92, 231.22, 252.65]),
            (Some(8 * MIB), &[91.36, 91.11, 289.74, 268.17]),
            (Some(16 * MIB), &[94.03, 93.99, 329.95, 277.87]),
            (Some(32 * MIB), &[95.75, 95.65, 354.61, 282.07]),
            (Some(64 * MIB), &[96.61, 96.59, 366.64, 284.74]),
            (Some(128 * MIB), &[97.22, 97.29, 372.88, 286.64]),
            (Some(256 * MIB), &[97.45, 97.42, 376.66, 287.61]),
            (Some(512 * MIB), &[97.54, 97.54, 378.46, 288.13]),
            (Some(GIB), &[97.68, 97.71, 380.00, 288.58]),
        ],
    },
    Reference {
        instance_type: "p5.48xlarge",
        experiment: Experiment::Sendrecv,
        source: "seeds/sendrecv.md",
        setup: "2 nodes, 1 rank per node, one EFA channel, efa",
        columns: &[any("SingleDevice"), any("SingleHost")],
        rows: &[
            (Some(128 * KIB), &[9.75, 7.14]),
            (Some(256 * KIB), &[14.51, 12.05]),
            (Some(512 * KIB), &[20.71, 14.22]),
            (Some(MIB), &[30.57, 26.83]),
            (Some(2 * MIB), &[25.69, 34.63]),
            (Some(4 * MIB), &[41.57, 40.23]),
            (Some(8 * MIB), &[44.98, 43.70]),
            (Some(16 * MIB), &[46.19, 45.90]),
            (Some(32 * MIB), &[47.33, 47.00]),
            (Some(64 * MIB), &[47.97, 47.71]),
            (Some(128 * MIB), &[48.28, 48.23]),
        ],
    },
    Reference {
        instance_type: "p5.48xlarge",
        experiment: Experiment::Alltoall,
        source: "seeds/all2all.md",
        setup: "4 nodes, 1 rank per node, efa",
        columns: &[
            ranked("SingleDMA", 4),
            over("MultiDMA", 4, Some(4)),
            over("RoundRobinDMA", 4, Some(4)),
            ranked("SinglePin", 4),
            over("MultiPin", 4, Some(4)),
        ],
        rows: &[
            (Some(4 * MIB), &[12.53, 40.49, 39.64, 12.57, 7.27]),
            (Some(8 * MIB), &[12.84, 44.77, 41.33, 13.06, 9.13]),
            (Some(16 * MIB), &[12.70, 46.86, 43.13, 12.97, 11.48]),
            (Some(32 * MIB), &[11.97, 48.53, 42.21, 12.19, 11.98]),
            (Some(64 * MIB), &[12.64, 48.97, 42.38, 12.69, 12.18]),
            (Some(128 * MIB), &[12.73, 46.73, 39.95, 13.08, 12.98]),
        ],
    },
    Reference {
        instance_type: "p5.48xlarge",
        experiment: Experiment::Proxy,
        source: "seeds/proxy.md",
        setup: "4 nodes, 1 rank per node, GPU memory, efa",
        columns: &[any("ProxySingleDMA"), over("ProxyMultiDMA", 4, None), any("ProxySingleNBIDMA"), over("ProxyMultiNBIDMA", 4, None)],
        rows: &[
            (Some(8 * MIB), &[52.50, 93.58, 82.78, 214.07]),
            (Some(16 * MIB), &[61.90, 118.36, 89.26, 271.29]),
            (Some(32 * MIB), &[67.20, 142.82, 92.62, 277.77]),
            (Some(64 * MIB), &[71.81, 160.29, 95.50, 329.24]),
            (Some(128 * MIB), &[74.21, 172.48, 96.54, 345.69]),
            (Some(256 * MIB), &[75.93, 180.23, 97.21, 363.97]),
            (Some(512 * MIB), &[76.90, 185.22, 97.43, 374.16]),
            (Some(GIB), &[77.42, 188.63, 97.60, 379.08]),
        ],
    },
    Reference {
        instance_type: "p5.48xlarge",
        experiment: Experiment::Ipc,
        source: "seeds/overview.md",
        setup: "NVLink section: \"~350\" and \"~2971\", printed as GB/s but Gbps (docs/experiments.md); no size \
                stated, the seed says NVLink bandwidth holds across sizes; the section names no instance, the \
                rest of the seed and its 3600 Gbps H100 peak are p5.48xlarge's",
        columns: &[any("IPC 1x256"), any("IPC 128x256")],
        rows: &[(None, &[350.0, 2971.0])],
    },
];
/// A figure found for a column at a size, or why none applies.
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup {
    Figure { gbps: f64, source: String },
    Missing(String),
}

/// What the run is, as far as a reference figure cares.
#[derive(Clone, Copy, Debug)]
pub struct RunShape<'a> {
    pub instance_type: &'a str,
    pub experiment: &'a Experiment,
    pub ranks: usize,
    pub channels: usize,
}

/// Whether `instance_type` is one efatop lists (with or without figures).
pub fn is_listed(instance_type: &str) -> bool {
    INSTANCE_TYPES.iter().any(|(name, _)| *name == instance_type)
}

/// The listed instance types, for messages: `p4d.24xlarge, p4de.24xlarge, ...`.
pub fn listed() -> String {
    INSTANCE_TYPES.map(|(name, _)| name).join(", ")
}

/// The published tables of `instance_type` for `experiment`.
pub fn references<'a>(instance_type: &'a str, experiment: &'a Experiment) -> impl Iterator<Item = &'static Reference> + 'a {
    REFERENCES.iter().filter(move |r| r.instance_type == instance_type && &r.experiment == experiment)
}

/// Whether the type has any figure for the experiment.
pub fn has_figures(instance_type: &str, experiment: &Experiment) -> bool {
    references(instance_type, experiment).next().is_some()
}

/// The line that says a type has no figure for an experiment.
pub fn no_figure(instance_type: &str, experiment: &Experiment) -> String {
    format!("{instance_type}: no published figure for {experiment}")
}

/// The figure for `column` at `size` in a run of this shape, or why there is none. A figure applies only
/// to its own type, experiment, column and size (a figure published without a size, to every size), and
/// only when the run used the channels and ranks the figure depends on.
pub fn lookup(shape: RunShape<'_>, column: &Column, size: u64) -> Lookup {
    let RunShape { instance_type, experiment, .. } = shape;
    if !has_figures(instance_type, experiment) {
        return Lookup::Missing(no_figure(instance_type, experiment));
    }
    let label = column.to_string();
    let Some((reference, index, spec)) = references(instance_type, experiment)
        .find_map(|r| r.columns.iter().position(|c| c.label == label).map(|index| (r, index, r.columns[index])))
    else {
        return Lookup::Missing(format!("{instance_type}: no published figure for {experiment} {label}"));
    };
    if let Some(ranks) = spec.ranks.filter(|ranks| *ranks != shape.ranks) {
        return Lookup::Missing(format!(
            "{instance_type}: the published {label} figures ({}) are for {ranks} ranks; this run has {}",
            reference.source, shape.ranks
        ));
    }
    if let Some(channels) = spec.channels.filter(|channels| *channels != shape.channels) {
        return Lookup::Missing(format!(
            "{instance_type}: the published {label} figures ({}) write over {channels} channels; this run has {}",
            reference.source, shape.channels
        ));
    }
    let row = reference.rows.iter().find(|(at, _)| at.is_none_or(|at| at == size));
    match row.and_then(|(at, figures)| Some((at, *figures.get(index)?))) {
        Some((at, gbps)) => {
            let size_text = at.map_or_else(|| "any size".to_string(), format_size);
            Lookup::Figure { gbps, source: format!("{}: {instance_type} {label} {size_text} ({})", reference.source, reference.setup) }
        }
        None => Lookup::Missing(format!(
            "{instance_type}: no published figure for {experiment} {label} at {} ({} covers {})",
            format_size(size),
            reference.source,
            sizes_covered(reference)
        )),
    }
}

fn sizes_covered(reference: &Reference) -> String {
    let sizes: Vec<u64> = reference.rows.iter().filter_map(|(at, _)| *at).collect();
    match (sizes.first(), sizes.last()) {
        (Some(first), Some(last)) => format!("{}..{}", format_size(*first), format_size(*last)),
        _ => "every size".to_string(),
    }
}

/// A measurement of `gbps` in `column` at `size` against its figure in a run of this shape: `None` when the
/// run's instance type is not one efatop lists (such a machine has nothing to say per measurement; the
/// header names its type), else the figure and the share, or why there is none.
/// [`annotate`] applies it to a measurement of a recorded run.
pub fn judge(shape: RunShape<'_>, column: &Column, size: u64, gbps: f64) -> Option<Expected> {
    if !is_listed(shape.instance_type) {
        return None;
    }
    Some(match lookup(shape, column, size) {
        Lookup::Figure { gbps: figure, source } => {
            let percent = if figure > 0.0 { 100.0 * gbps / figure } else { 0.0 };
            Expected::Figure { gbps: figure, percent, source }
        }
        Lookup::Missing(why) => Expected::Missing { missing: why },
    })
}

/// The reference tables as `docs/expected.md` shows them: the listed types and what each has, then one
/// table per published source (Gbps by size and column, as published), with what the figures depend on.
pub fn render_markdown() -> String {
    let mut out = String::from("| Instance type | Experiments with figures | Source |\n|---|---|---|\n");
    for (name, note) in INSTANCE_TYPES {
        let experiments: Vec<String> =
            REFERENCES.iter().filter(|r| r.instance_type == name).map(|r| format!("`{}`", r.experiment)).collect();
        let experiments = if experiments.is_empty() { "unknown".to_string() } else { experiments.join(", ") };
        let _ = writeln!(out, "| {name} | {experiments} | {note} |");
    }
    for reference in REFERENCES {
        let _ = write!(out, "\n### {} `{}` ({})\n\n{}.", reference.instance_type, reference.experiment, reference.source, reference.setup);
        let conditions: Vec<String> = reference
            .columns
            .iter()
            .filter(|c| c.channels.is_some() || c.ranks.is_some())
            .map(|c| {
                let channels = c.channels.map(|n| format!("{n} channels"));
                let ranks = c.ranks.map(|n| format!("{n} ranks"));
                format!("{} only with {}", c.label, [channels, ranks].into_iter().flatten().collect::<Vec<_>>().join(" and "))
            })
            .collect();
        if !conditions.is_empty() {
            let _ = write!(out, " Compared: {}.", conditions.join("; "));
        }
        out.push_str("\n\n| Size |");
        for column in reference.columns {
            let _ = write!(out, " {} (Gbps) |", column.label);
        }
        out.push_str("\n|---:|");
        out.push_str(&"---:|".repeat(reference.columns.len()));
        out.push('\n');
        for (size, figures) in reference.rows {
            let size = size.map_or_else(|| "any".to_string(), format_size);
            let cells: Vec<String> = figures.iter().map(|g| format!("{g:.2}")).collect();
            let _ = writeln!(out, "| {size} | {} |", cells.join(" | "));
        }
    }
    out
}

/// The run as far as a reference figure cares; `None` when it records no instance type.
pub fn run_shape(meta: &RunMetadata) -> Option<RunShape<'_>> {
    let instance_type = meta.instance_type.as_deref()?;
    Some(RunShape { instance_type, experiment: &meta.experiment, ranks: meta.ranks, channels: meta.channels })
}

/// `measurement` against its figure in a run of `meta`'s shape ([`judge`]): set when the run records an
/// instance type efatop lists, left alone otherwise.
pub fn annotate(measurement: &mut Measurement, meta: &RunMetadata) {
    if let Some(expected) = run_shape(meta).and_then(|shape| judge(shape, &measurement.config, measurement.size, measurement.gbps)) {
        measurement.expected = Some(expected);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use efatop_proto::column::{Layout, Memory};
    use efatop_proto::results::LatencyRecorder;

    fn p5(experiment: &Experiment, ranks: usize, channels: usize) -> RunShape<'_> {
        RunShape { instance_type: "p5.48xlarge", experiment, ranks, channels }
    }

    fn label(text: &str) -> Column {
        serde_json::from_value(text.into()).expect("a label")
    }

    #[test]
    fn every_table_is_rectangular_names_real_columns_and_lists_its_type() {
        for reference in REFERENCES {
            assert!(is_listed(reference.instance_type), "{}", reference.instance_type);
            for column in reference.columns {
                assert!(!matches!(label(column.label), Column::Other(_)), "{} is not an efatop column", column.label);
            }
            for (size, figures) in reference.rows {
                assert_eq!(figures.len(), reference.columns.len(), "{} {size:?}", reference.source);
                assert!(figures.iter().all(|g| *g > 0.0));
            }
        }
    }

    #[test]
    fn the_seed_figures_are_found_by_column_and_size() {
        let write = Experiment::Write;
        let single = Column::write(Layout::Single, Memory::Host);
        let found = lookup(p5(&write, 2, 1), &single, GIB);
        assert_eq!(found, Lookup::Figure { gbps: 97.68, source: "seeds/write.md: p5.48xlarge SinglePin 1G (4 nodes, 1 rank per node, efa)".into() });
        let multi = Column::write(Layout::Multi, Memory::Device);
        assert!(matches!(lookup(p5(&write, 2, 4), &multi, GIB), Lookup::Figure { gbps, .. } if (gbps - 380.0).abs() < 1e-9));
        // Multi over one channel is not the seed's 4-NIC split.
        assert_eq!(
            lookup(p5(&write, 2, 1), &multi, GIB),
            Lookup::Missing("p5.48xlarge: the published MultiDMA figures (seeds/write.md) write over 4 channels; this run has 1".into())
        );
        let round_robin = Column::write(Layout::RoundRobin, Memory::Device);
        assert!(matches!(lookup(p5(&write, 2, 4), &round_robin, GIB), Lookup::Missing(why) if why.contains("are for 4 ranks; this run has 2")));
        // A column or a size the seed did not measure.
        let multi_pin = Column::write(Layout::Multi, Memory::Host);
        assert_eq!(lookup(p5(&write, 2, 4), &multi_pin, GIB), Lookup::Missing("p5.48xlarge: no published figure for write MultiPin".into()));
        assert_eq!(
            lookup(p5(&write, 2, 1), &single, 4096),
            Lookup::Missing("p5.48xlarge: no published figure for write SinglePin at 4K (seeds/write.md covers 256K..1G)".into())
        );
        let staged = Column::write(Layout::Single, Memory::Staged);
        assert!(matches!(lookup(p5(&write, 2, 1), &staged, GIB), Lookup::Missing(_)), "staged is not the seed's dmabuf");
        // ipc's figures hold at every size.
        let ipc = Experiment::Ipc;
        assert!(matches!(lookup(p5(&ipc, 2, 1), &label("IPC 128x256"), MIB), Lookup::Figure { gbps, .. } if (gbps - 2971.0).abs() < 1e-9));
    }

    #[test]
    fn types_without_figures_say_so_and_unlisted_types_are_left_alone() {
        let write = Experiment::Write;
        let shape = RunShape { instance_type: "p6-b300.48xlarge", experiment: &write, ranks: 2, channels: 1 };
        assert_eq!(
            lookup(shape, &Column::write(Layout::Single, Memory::Host), GIB),
            Lookup::Missing("p6-b300.48xlarge: no published figure for write".into())
        );
        let single = Column::write(Layout::Single, Memory::Host);
        let unlisted = RunShape { instance_type: "m7i.large", experiment: &write, ranks: 2, channels: 1 };
        assert_eq!(judge(unlisted, &single, GIB, 40.0), None, "not a listed type");
        assert!(matches!(judge(shape, &single, GIB, 40.0), Some(Expected::Missing { .. })), "listed, no figure");
        let p5 = RunShape { instance_type: "p5.48xlarge", experiment: &write, ranks: 2, channels: 1 };
        let expected = judge(p5, &single, GIB, 40.0).expect("a figure");
        assert!((expected.percent().expect("a share") - 100.0 * 40.0 / 97.68).abs() < 1e-9 && expected.below());
        // In the file: the figure, its share and source; or why not.
        let json = serde_json::to_value(&expected).expect("json");
        assert_eq!(json["gbps"], 97.68);
        assert_eq!(serde_json::from_value::<Expected>(json).expect("back"), expected);
        let missing = Expected::Missing { missing: "p6-b300.48xlarge: no published figure for write".into() };
        let json = serde_json::to_value(&missing).expect("json");
        assert_eq!(json["missing"], "p6-b300.48xlarge: no published figure for write");
        assert_eq!(serde_json::from_value::<Expected>(json).expect("back"), missing);
    }

    #[test]
    fn the_doc_shows_the_same_tables() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/expected.md")).expect("docs/expected.md");
        let begin = "<!-- reference tables: generated from report/src/reference.rs (render_markdown) -->\n";
        let end = "<!-- end of reference tables -->";
        let inside = doc.split_once(begin).and_then(|(_, rest)| rest.split_once(end)).map(|(inside, _)| inside);
        let rendered = render_markdown();
        assert_eq!(
            inside,
            Some(rendered.as_str()),
            "docs/expected.md's tables differ from the data; between the markers it should read:\n{rendered}"
        );
    }

    #[test]
    fn a_measurement_is_held_to_its_figure_only_on_a_listed_type() {
        let latency = LatencyRecorder::new();
        let mut measurement = Measurement::verified(Column::write(Layout::Single, Memory::Host), 1 << 30, 1, Vec::new(), &latency, None);
        measurement.gbps = 40.0;
        let mut meta = RunMetadata { experiment: Experiment::Write, ranks: 2, channels: 1, ..RunMetadata::default() };
        annotate(&mut measurement, &meta);
        assert_eq!(measurement.expected, None, "no instance type");
        meta.instance_type = Some("m7i.large".into());
        annotate(&mut measurement, &meta);
        assert_eq!(measurement.expected, None, "not a listed type");
        meta.instance_type = Some("p6-b300.48xlarge".into());
        annotate(&mut measurement, &meta);
        assert!(matches!(measurement.expected, Some(Expected::Missing { .. })), "listed, no figure");
        meta.instance_type = Some("p5.48xlarge".into());
        annotate(&mut measurement, &meta);
        let share = measurement.expected.as_ref().and_then(Expected::percent).expect("a share");
        assert!((share - 100.0 * 40.0 / 97.68).abs() < 1e-9, "{share}");
    }
}
