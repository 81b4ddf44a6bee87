//! A saved run as text: the seed-format table the run printed, CSV for spreadsheets and scripts, a
//! Markdown document for issues and wikis, or the results JSON again.

use std::fmt::Write;

use efatop_proto::column::Column;
use efatop_proto::results::{Measurement, PairMatrix, RunState};
use efatop_proto::sizes::format_size;
use efatop_proto::words::plural;
use efatop_proto::RunResults;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The header and seed-layout table, as a run prints them at its end.
    Table,
    /// One row per configuration and size, every field, full precision.
    Csv,
    /// Metadata and one table per configuration (and the pair matrices of an all-to-all run).
    Markdown,
    /// The results file itself, pretty-printed.
    Json,
}

pub fn render(results: &RunResults, format: Format) -> String {
    match format {
        Format::Table => render_table(results),
        Format::Csv => render_csv(results),
        Format::Markdown => render_markdown(results),
        Format::Json => {
            // Serializing plain data (strings, numbers, vectors) cannot fail.
            let mut text = serde_json::to_string_pretty(results).unwrap_or_default();
            text.push('\n');
            text
        }
    }
}

/// Measurements in the order a reader expects: configurations in column order, each by ascending size;
/// any configuration missing from `configs` (a hand-edited file) after them, in file order.
pub fn ordered_measurements(results: &RunResults) -> Vec<&Measurement> {
    let mut ordered: Vec<&Measurement> = Vec::with_capacity(results.measurements.len());
    for config in &results.configs {
        let mut of_config: Vec<&Measurement> = results
            .measurements
            .iter()
            .filter(|m| &m.config == config)
            .collect();
        of_config.sort_by_key(|m| m.size);
        ordered.extend(of_config);
    }
    ordered.extend(
        results
            .measurements
            .iter()
            .filter(|m| !results.configs.contains(&m.config)),
    );
    ordered
}

fn render_table(results: &RunResults) -> String {
    let mut out = crate::text::render_header(&results.metadata, &results.sizes());
    if let Some(status) = status_text(results) {
        let _ = writeln!(out, "# status: {status}");
    }
    if !results.measurements.is_empty() {
        out.push('\n');
        out.push_str(&crate::text::render_table(results));
    }
    out.push_str(&sweep_text(results));
    out.push_str(&verification_line(results));
    out
}

/// A sweep's verdict (best figure per rank and rail, latencies, suspects), its rounds and its slowest
/// per-pair figures; empty for other runs.
fn sweep_text(results: &RunResults) -> String {
    let Some(sweep) = &results.sweep else { return String::new() };
    let mut out = String::from("\n");
    out.push_str(&crate::text::render_verdict(sweep, results.metadata.channels));
    out.push_str(&crate::text::render_rounds(sweep));
    out
}

/// How the run ended, as its file says: `complete`, `FAILED: why`, or that it had not ended when the file
/// was last written (still going, or cut off without a word). `None` for files from before runs said.
pub fn status_text(results: &RunResults) -> Option<String> {
    let status = results.status.as_ref()?;
    Some(match status.state {
        RunState::Complete => "complete".to_string(),
        RunState::Failed => format!("FAILED: {}", status.reason.as_deref().unwrap_or("no reason recorded")),
        RunState::Running => {
            "not ended: still running, or cut off without a word (killed) when the file was last written".to_string()
        }
    })
}

/// A file in one line, for `compare`: how its run ended and what it holds.
pub fn file_summary(results: &RunResults) -> String {
    let status = status_text(results).unwrap_or_else(|| "status unknown (the file predates run statuses)".to_string());
    format!("{status}; {} ({})", plural(results.measurements.len(), "measurement"), sizes_text(&results.sizes()))
}

/// Whether every measurement's bytes were checked, or which were not. A run that did not complete is not
/// said to have verified "every size": only the sizes it holds.
fn verification_line(results: &RunResults) -> String {
    let unverified: Vec<String> = ordered_measurements(results)
        .iter()
        .filter(|m| !m.verified)
        .map(|m| format!("{} {}", m.config, format_size(m.size)))
        .collect();
    let complete = results.status.as_ref().is_none_or(|status| status.state == RunState::Complete);
    if let Some(sweep) = results.sweep.as_ref().filter(|_| results.measurements.is_empty()) {
        let figures: usize = sweep.rounds.iter().map(|r| r.figures.len()).sum();
        let ended = match results.status.as_ref().map(|status| status.state) {
            Some(RunState::Complete) => "",
            Some(RunState::Failed) => ", before the run failed",
            _ => ", before the run stopped writing this file",
        };
        format!("# sweep: {} in {}{ended}\n", plural(figures, "figure"), plural(sweep.rounds.len(), "round"))
    } else if results.measurements.is_empty() {
        "# no measurements in this file\n".to_string()
    } else if !unverified.is_empty() {
        format!("# NOT verified: {}\n", unverified.join(", "))
    } else if complete {
        "# every size verified: all bytes received matched the sender's pattern\n".to_string()
    } else {
        let measured = results.measurements.len();
        let ended = match results.status.as_ref().map(|status| status.state) {
            Some(RunState::Failed) => "before the run failed",
            _ => "before the run stopped writing this file",
        };
        format!(
            "# only {} ({}) measured {ended}, {} verified: all bytes received matched the sender's pattern\n",
            plural(measured, "measurement"),
            sizes_text(&results.sizes()),
            if measured == 1 { "it" } else { "each" },
        )
    }
}

/// `1 size, 4K`, `3 sizes, 4K..16K`.
pub fn sizes_text(sizes: &[u64]) -> String {
    match (sizes.first(), sizes.last()) {
        (Some(first), Some(last)) if first == last => format!("1 size, {}", format_size(*first)),
        (Some(first), Some(last)) => format!("{}, {}..{}", plural(sizes.len(), "size"), format_size(*first), format_size(*last)),
        _ => "no size".to_string(),
    }
}

/// CSV field: quoted when it holds a separator, a quote or a line break (RFC 4180).
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

fn render_csv(results: &RunResults) -> String {
    // A sweep measures per-pair figures, not steps: a row per figure.
    if let Some(sweep) = results.sweep.as_ref().filter(|_| results.measurements.is_empty()) {
        return crate::text::render_figures_csv(sweep);
    }
    let mut out =
        String::from("config,size,count,gbps,busbw_percent,lat_mean_us,lat_p50_us,lat_p99_us,lat_max_us,iterations,verified\n");
    for m in ordered_measurements(results) {
        // `{}` on f64 prints the shortest text that reads back as the same number: no precision is lost.
        let busbw = m.busbw_percent.map(|b| b.to_string()).unwrap_or_default();
        let _ = writeln!(
            out,
            "{},{},{},{},{busbw},{},{},{},{},{},{}",
            csv_field(&m.config.to_string()),
            m.size,
            m.count,
            m.gbps,
            m.latency.mean_us,
            m.latency.p50_us,
            m.latency.p99_us,
            m.latency.max_us,
            m.iterations,
            m.verified,
        );
    }
    out
}

/// Markdown cell text: a `|` would end the cell.
fn md_cell(text: &str) -> String {
    text.replace('|', "\\|")
}

fn render_markdown(results: &RunResults) -> String {
    let meta = &results.metadata;
    let mut hosts = meta.hosts.clone();
    hosts.dedup();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# efatop {}: {}, provider {}\n",
        md_cell(meta.experiment.name()),
        plural(meta.ranks, "rank"),
        md_cell(&meta.provider)
    );
    let nics: Vec<&str> = meta.nics.iter().map(|n| n.domain.as_str()).collect();
    let link = match meta.link_gbps {
        Some(gbps) => format!("{gbps} Gbps per channel ({})", meta.link_source),
        None => "unknown (BusBW not computed)".to_string(),
    };
    // A run that ended before its ranks met knows no hosts, NICs or provider stack.
    let unknown = |text: String| if hosts.is_empty() { "unknown: the run ended before its ranks met".to_string() } else { text };
    let facts = [
        ("efatop", meta.efatop_version.clone()),
        ("libfabric", meta.libfabric_version.clone()),
        (
            "provider",
            if meta.provider_stack.is_empty() {
                meta.provider.clone()
            } else {
                format!("{} [{}]", meta.provider_stack, meta.provider)
            },
        ),
        ("hosts", unknown(hosts.join(", "))),
        (
            "channels",
            unknown(format!(
                "{} over {}: {}",
                meta.channels,
                plural(meta.distinct_nics, "NIC"),
                nics.join(", ")
            )),
        ),
        ("link speed", link),
        ("memory", if meta.memory.is_empty() { "-".to_string() } else { meta.memory.clone() }),
        (
            "window, warmup, iters",
            format!("{}, {}, {}", meta.window, meta.warmup, meta.iters),
        ),
        ("started (unix s)", meta.started_unix_s.to_string()),
    ];
    for (name, value) in facts {
        let _ = writeln!(out, "- **{name}:** {}", md_cell(&value));
    }
    if let Some(status) = status_text(results) {
        let _ = writeln!(out, "- **status:** {}", md_cell(&status));
    }
    for note in &meta.notes {
        let _ = writeln!(out, "- **note:** {}", md_cell(note));
    }
    let ordered = ordered_measurements(results);
    let mut configs: Vec<&Column> = results.configs.iter().collect();
    for m in &ordered {
        if !configs.contains(&&m.config) {
            configs.push(&m.config);
        }
    }
    for config in configs {
        let _ = writeln!(out, "\n## {}\n", md_cell(&config.to_string()));
        out.push_str(
            "| Size | Gbps | BusBW (%) | mean (us) | p50 (us) | p99 (us) | max (us) | verified |\n",
        );
        out.push_str(
            "|-----:|-----:|----------:|----------:|---------:|---------:|---------:|:--------:|\n",
        );
        for m in ordered.iter().filter(|m| &m.config == config) {
            let busbw = m
                .busbw_percent
                .map_or_else(|| "-".to_string(), |b| format!("{b:.1}"));
            let _ = writeln!(
                out,
                "| {} | {} | {busbw} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
                format_size(m.size),
                gbps_text(m.gbps),
                m.latency.mean_us,
                m.latency.p50_us,
                m.latency.p99_us,
                m.latency.max_us,
                if m.verified { "yes" } else { "**no**" },
            );
        }
        if let Some(matrix) = largest_matrix(results, config) {
            out.push_str(&markdown_matrix(matrix));
        }
    }
    if results.sweep.is_some() {
        out.push_str("\n## sweep\n");
        // The text's `# ` lines are headings in Markdown: there they are paragraphs of their own.
        for line in sweep_text(results).lines() {
            match line.strip_prefix("# ") {
                Some(text) => {
                    let _ = writeln!(out, "{}\n", md_cell(text));
                }
                None => {
                    let _ = writeln!(out, "{line}");
                }
            }
        }
    }
    out
}

/// As the seed table prints rates: two decimals, but a slow rate keeps its first digits.
fn gbps_text(value: f64) -> String {
    if value > 0.0 && value < 0.01 {
        format!("{value:.4}")
    } else {
        format!("{value:.2}")
    }
}

/// The pair matrix of a configuration's largest measured size: where the fabric is busiest and uneven
/// pairs show most.
pub fn largest_matrix<'a>(results: &'a RunResults, config: &Column) -> Option<&'a PairMatrix> {
    results
        .pair_matrices
        .iter()
        .filter(|p| &p.config == config)
        .max_by_key(|p| p.size)
}

fn markdown_matrix(matrix: &PairMatrix) -> String {
    let mut out = format!(
        "\nPair bandwidth at {}, Gbps (rows send, columns receive):\n\n",
        format_size(matrix.size)
    );
    let ranks = matrix.gbps.len();
    out.push_str("| sender |");
    for receiver in 0..ranks {
        let _ = write!(out, " to {receiver} |");
    }
    out.push_str("\n|-------:|");
    out.push_str(&"-----:|".repeat(ranks));
    out.push('\n');
    for (sender, row) in matrix.gbps.iter().enumerate() {
        let _ = write!(out, "| {sender} |");
        for (receiver, cell) in row.iter().enumerate() {
            let mark = if matrix.is_same_host(sender, receiver) { " (same host)" } else { "" };
            match cell {
                Some(gbps) => {
                    let _ = write!(out, " {}{mark} |", gbps_text(*gbps));
                }
                None => out.push_str(" - |"),
            }
        }
        out.push('\n');
    }
    if matrix.same_host.iter().flatten().any(|same| *same) {
        out.push_str("\n(same host): the pair shares a host and libfabric's shared-memory shortcut was allowed (--allow-shm): memcpy, not the NIC.\n");
    }
    out
}
