//! `sweep`'s plain output: every channel's best figure per rank and rail, the rails' medians, and the
//! verdict table (what the dashboard's final view and `--json`'s last line say too).

use std::fmt::Write;

use efatop_proto::sizes::format_size;
use efatop_proto::sweep::{Figure, RoundKind, Scope, SweepResults};
use efatop_proto::words::plural;

/// The sweep's tables as text; `rails` is the run's channels per rank.
pub fn render_verdict(sweep: &SweepResults, rails: usize) -> String {
    let mut out = String::new();
    let judged = efatop_sweep::verdict::judge_record(sweep, rails);
    let count = |kind: RoundKind| sweep.rounds.iter().filter(|r| r.round.kind == kind).count();
    let (pairing, cross, retests) = (count(RoundKind::Pairing), count(RoundKind::CrossRail), count(RoundKind::Retest));
    let bar = (sweep.threshold * 100.0).round();
    let _ = writeln!(
        out,
        "# sweep: {} + {cross} cross-rail + {}, {} × {}, {} per write; a \
         channel is judged by its best figure with any peer NIC against {bar:.0}% of its rail's median{}",
        plural(pairing, "pairing round"),
        plural(retests, "retest"),
        plural(sweep.nodes.len(), "rank"),
        plural(rails, "rail"),
        format_size(sweep.size),
        sweep.link_gbps.map_or(String::new(), |l| format!(" and of {l} Gbps (--link-gbps)")),
    );
    for note in &sweep.notes {
        let _ = writeln!(out, "# note: {note}");
    }
    let names: Vec<String> = (0..rails)
        .map(|rail| sweep.nodes.first().and_then(|n| n.nics.get(rail)).map_or_else(|| format!("ch{rail}"), |n| n.name.clone()))
        .collect();
    let _ = writeln!(out, "\n# best Gbps per rank and rail with any peer, the median write's rate (* below the bar)");
    let _ = writeln!(out, "| rank | host | {} |", names.join(" | "));
    let _ = writeln!(out, "|---:|:---|{}", "---:|".repeat(rails));
    for (rank, row) in judged.best.iter().enumerate() {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(rail, best)| match best {
                Some(b) if judged.is_low(rail, *b) => format!("{b:.2}*"),
                Some(b) => format!("{b:.2}"),
                None => "-".into(),
            })
            .collect();
        let host = sweep.nodes.get(rank).map_or("", |n| n.host.as_str());
        let _ = writeln!(out, "| {rank} | {host} | {} |", cells.join(" | "));
    }
    let medians: Vec<String> = judged.medians.iter().map(|m| m.map_or_else(|| "-".into(), |m| format!("{m:.2}"))).collect();
    let _ = writeln!(out, "| median | | {} |", medians.join(" | "));
    latency_table(&mut out, sweep, rails, &names);
    let Some(verdict) = &sweep.verdict else {
        let _ = writeln!(out, "\n# no verdict: the sweep did not finish");
        return out;
    };
    let checked = verdict.checked.describe();
    if verdict.suspects.is_empty() {
        let _ = writeln!(out, "\nverdict: no suspects ({checked})");
        return out;
    }
    let n = verdict.suspects.len();
    let _ = writeln!(out, "\nverdict: {n} suspect{} ({checked})", if n == 1 { "" } else { "s" });
    let _ = writeln!(out, "| scope | rank | host | gpu | nic | pci | measured Gbps | median Gbps | peers tried | why |");
    let _ = writeln!(out, "|:---|---:|:---|---:|:---|:---|---:|---:|:---|:---|");
    for s in &verdict.suspects {
        let scope = match s.scope {
            Scope::Nic => "nic",
            Scope::Node => "node",
            Scope::Link => "link",
        };
        let nic = match s.scope {
            Scope::Node => s.nics.join(" "),
            Scope::Link => format!(
                "{} (to rank {} {})",
                s.nic.as_deref().unwrap_or("-"),
                s.peer.map_or_else(|| "-".into(), |p| p.to_string()),
                s.peer_nic.as_deref().unwrap_or("-")
            ),
            Scope::Nic => s.nic.clone().unwrap_or_else(|| "-".into()),
        };
        let peers: Vec<String> = s.peers_tried.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            out,
            "| {scope} | {} | {} | {} | {nic} | {} | {:.2} | {:.2} | {} | {} |",
            s.rank,
            s.host,
            s.gpu.map_or_else(|| "-".into(), |g| g.to_string()),
            s.pci.as_deref().unwrap_or("-"),
            s.measured_gbps,
            s.median_gbps,
            peers.join(","),
            s.why
        );
    }
    out
}

/// Per-pair figures a report lists in text, slowest first; CSV lists every one.
pub const FIGURES_SHOWN: usize = 20;

/// What a round is, in a word or two.
fn kind_text(kind: RoundKind) -> &'static str {
    match kind {
        RoundKind::Pairing => "pairing",
        RoundKind::CrossRail => "cross-rail",
        RoundKind::Retest => "retest",
    }
}

/// The channel a figure wrote over: `0`, or `0 → 1` across rails.
fn channel_text(figure: &Figure) -> String {
    if figure.target_rail() == figure.rail { figure.rail.to_string() } else { format!("{} → {}", figure.rail, figure.target_rail()) }
}

/// `efatop report`'s view of a sweep's file beyond [`render_verdict`]: every round (its kind, pairs, its
/// median and slowest figure) and the slowest per-pair figures of the whole sweep, worst first
/// ([`FIGURES_SHOWN`] of them; CSV has every one).
pub fn render_rounds(sweep: &SweepResults) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "\n# rounds: the median and the slowest figure of each (median write's rate, Gbps)");
    let _ = writeln!(out, "| round | kind | pairs | figures | median Gbps | slowest Gbps | slowest: from → to, channel |");
    let _ = writeln!(out, "|---:|:---|---:|---:|---:|---:|:---|");
    for round in &sweep.rounds {
        let mut rates: Vec<f64> = round.figures.iter().map(Figure::judged_gbps).collect();
        rates.sort_by(f64::total_cmp);
        let median = rates.get(rates.len() / 2).map_or_else(|| "-".to_string(), |m| format!("{m:.2}"));
        let slowest = round.figures.iter().min_by(|a, b| a.judged_gbps().total_cmp(&b.judged_gbps()));
        let (rate, who) = slowest.map_or_else(
            || ("-".to_string(), "-".to_string()),
            |f| (format!("{:.2}", f.judged_gbps()), format!("rank {} → rank {}, {}", f.from, f.to, channel_text(f))),
        );
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {median} | {rate} | {who} |",
            round.round.index + 1,
            kind_text(round.round.kind),
            round.round.pairs.len(),
            round.figures.len(),
        );
    }
    let mut figures: Vec<(usize, &Figure)> = sweep.rounds.iter().flat_map(|r| r.figures.iter().map(move |f| (r.round.index, f))).collect();
    figures.sort_by(|(_, a), (_, b)| a.judged_gbps().total_cmp(&b.judged_gbps()));
    let shown = figures.len().min(FIGURES_SHOWN);
    let _ = writeln!(
        out,
        "\n# per-pair figures, slowest first: {} of {}{}",
        shown,
        plural(figures.len(), "figure"),
        if figures.len() > shown { " (--format csv lists every one)" } else { "" }
    );
    let _ = writeln!(out, "| round | from | to | channel | Gbps (median write) | Gbps (whole) | p50 (µs) | p99 (µs) | retransmits |");
    let _ = writeln!(out, "|---:|---:|---:|:---|---:|---:|---:|---:|---:|");
    for (round, f) in figures.iter().take(shown) {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.1} | {:.1} | {} |",
            round + 1,
            f.from,
            f.to,
            channel_text(f),
            f.judged_gbps(),
            f.gbps,
            f.p50_us,
            f.p99_us,
            f.retransmits.map_or_else(|| "-".to_string(), |r| r.to_string()),
        );
    }
    out
}

/// Every figure of a sweep, one CSV row each, in round order: what a spreadsheet of a fleet's sweep
/// sorts and filters.
pub fn render_figures_csv(sweep: &SweepResults) -> String {
    let mut out = String::from("round,kind,from,to,rail,to_rail,gbps,steady_gbps,p50_us,p99_us,retransmits\n");
    for round in &sweep.rounds {
        for f in &round.figures {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{},{},{}",
                round.round.index + 1,
                kind_text(round.round.kind),
                f.from,
                f.to,
                f.rail,
                f.target_rail(),
                f.gbps,
                f.steady_gbps,
                f.p50_us,
                f.p99_us,
                f.retransmits.map_or_else(String::new, |r| r.to_string()),
            );
        }
    }
    out
}

/// Per rank and rail, as the writer: p50/p99 of each write in its best round, and what it retransmitted
/// over the sweep where a counter tells.
fn latency_table(out: &mut String, sweep: &SweepResults, rails: usize, names: &[String]) {
    let ranks = sweep.nodes.len();
    // `[rank][rail]`: (the best figure's rate, p50, p99), retransmits summed.
    let mut best: Vec<Vec<Option<(f64, f64, f64)>>> = vec![vec![None; rails]; ranks];
    let mut retransmits: Vec<Vec<Option<u64>>> = vec![vec![None; rails]; ranks];
    for figure in sweep.rounds.iter().flat_map(|r| &r.figures) {
        if figure.from >= ranks || figure.rail >= rails {
            continue;
        }
        let slot = &mut best[figure.from][figure.rail];
        if slot.is_none_or(|(gbps, _, _)| figure.judged_gbps() > gbps) {
            *slot = Some((figure.judged_gbps(), figure.p50_us, figure.p99_us));
        }
        if let Some(count) = figure.retransmits {
            let slot = &mut retransmits[figure.from][figure.rail];
            *slot = Some(slot.unwrap_or(0) + count);
        }
    }
    let counted = retransmits.iter().flatten().any(Option::is_some);
    let _ = writeln!(
        out,
        "\n# write latency p50/p99 (µs) per rank and rail in its best round{}",
        if counted { ", and retransmits over the sweep (r)" } else { " (no counter here tells retransmits per channel)" }
    );
    let _ = writeln!(out, "| rank | {} |", names.join(" | "));
    let _ = writeln!(out, "|---:|{}", "---:|".repeat(rails));
    for rank in 0..ranks {
        let cells: Vec<String> = (0..rails)
            .map(|rail| {
                let latency = best[rank][rail].map_or_else(|| "-".into(), |(_, p50, p99)| format!("{p50:.0}/{p99:.0}"));
                match retransmits[rank][rail] {
                    Some(count) => format!("{latency} ({count}r)"),
                    None => latency,
                }
            })
            .collect();
        let _ = writeln!(out, "| {rank} | {} |", cells.join(" | "));
    }
}

#[cfg(test)]
mod tests {
    use efatop_proto::sweep::{NicFacts, NodeFacts, SweepRound};
    use efatop_sweep::plan::pairing_rounds;

    use super::*;

    #[test]
    fn a_slow_nic_shows_starred_and_in_the_verdict() {
        let nodes: Vec<NodeFacts> = (0..4)
            .map(|rank| NodeFacts {
                rank,
                host: format!("n{rank}"),
                nics: (0..2).map(|k| NicFacts { name: format!("efa{k}"), pci: None }).collect(),
                ..NodeFacts::default()
            })
            .collect();
        let plan = pairing_rounds(4, false);
        let rate = |rank: usize, rail: usize| -> f64 { if (rank, rail) == (1, 1) { 0.25 } else { 0.95 } };
        let rounds = plan
            .iter()
            .map(|round| SweepRound {
                round: round.clone(),
                planned: plan.len(),
                figures: round
                    .pairs
                    .iter()
                    .flat_map(|&(a, b)| {
                        (0..2).flat_map(move |rail| {
                            let gbps = rate(a, rail).min(rate(b, rail));
                            [(a, b), (b, a)].map(|(from, to)| Figure { from, to, rail, gbps, steady_gbps: gbps, p50_us: 1.0, p99_us: 1.0, ..Figure::default() })
                        })
                    })
                    .collect(),
            })
            .collect();
        let mut sweep = SweepResults { size: 1 << 20, threshold: 0.9, nodes, rounds, ..SweepResults::default() };
        sweep.verdict = Some(efatop_sweep::verdict::judge_record(&sweep, 2).verdict);
        let text = render_verdict(&sweep, 2);
        assert!(text.contains("| 1 | n1 | 0.95 | 0.25* |"), "{text}");
        assert!(text.contains("| median | | 0.95 | 0.95 |"), "{text}");
        assert!(text.contains("verdict: 1 suspect (4 nodes, 8 NICs checked)"), "{text}");
        assert!(text.contains("| nic | 1 | n1 | - | efa1 | - | 0.25 | 0.95 | 0,2,3 |"), "{text}");
    }
}
