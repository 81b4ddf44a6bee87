//! Plain output: the run's header before the first size, a line per step and sweep round as they come,
//! the table and where the results went at the end.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::sync::mpsc::Receiver;

use efatop_proto::results::{RunMetadata, RunResults};

use super::{Mode, jsonl};
use efatop_proto::events::ConsumerEvent;

/// The run's header, before its first size.
pub fn print_header(metadata: &RunMetadata, sizes: &[u64]) {
    print!("{}", efatop_report::text::render_header(metadata, sizes));
    let _ = std::io::stdout().flush();
}

/// Rank 0's last word on stdout: the JSON summary, or the header and table, and how the run ended.
pub fn print_final(mode: Mode, results: &RunResults, sizes: &[u64], file: Option<&Path>) {
    if mode == Mode::Json {
        jsonl::print_summary(results);
        if let Some(verdict) = results.sweep.as_ref().and_then(|s| s.verdict.as_ref()) {
            jsonl::print_verdict(verdict);
        }
        return;
    }
    if mode == Mode::Dashboard {
        // The dashboard has left the alternate screen: leave the tables in the scrollback.
        print!("{}", efatop_report::text::render_header(&results.metadata, sizes));
    }
    if !results.measurements.is_empty() {
        println!();
        print!("{}", efatop_report::text::render_table(results));
        print!("{}", efatop_report::text::counters::render_counters(results));
    }
    if let Some(sweep) = &results.sweep {
        println!();
        print!("{}", efatop_report::text::render_verdict(sweep, results.metadata.channels));
    }
    for line in ending_lines(results) {
        println!("{line}");
    }
    if let Some(file) = file {
        println!("# results written to {}", file.display());
    }
}

/// How the run ended, under its tables: every size it holds was verified (a size whose bytes did not match
/// ends the run instead of adding a row), and a run that did not complete says why.
pub fn ending_lines(results: &RunResults) -> Vec<String> {
    use efatop_proto::results::RunState;
    let sizes = results.measurements.len();
    let measured = match sizes {
        0 => "no size was measured".to_string(),
        1 => "the 1 size above was verified: all bytes received matched the sender's pattern".to_string(),
        n => format!("the {n} sizes above were verified: all bytes received matched the sender's pattern"),
    };
    match results.status.as_ref().map(|s| (s.state, s.reason.as_deref())) {
        Some((RunState::Complete, _)) if sizes > 0 || results.sweep.is_some() => {
            vec!["# every size verified: all bytes received matched the sender's pattern".into()]
        }
        Some((RunState::Complete, _)) => Vec::new(),
        Some((RunState::Failed, reason)) => {
            vec![format!("# the run failed: {}", reason.unwrap_or("no reason recorded")), format!("# {measured}")]
        }
        _ => vec![format!("# the run did not finish (no end recorded); {measured}")],
    }
}

/// Plain output's line for a finished sweep round: who met whom, and the slowest channel figure.
pub fn sweep_round_line(round: &efatop_proto::sweep::SweepRound, ranks: usize) -> String {
    use efatop_proto::sweep::RoundKind;
    let kind = match round.round.kind {
        RoundKind::Pairing => format!("round {} of {}", round.round.index + 1, round.planned),
        RoundKind::CrossRail => format!("round {} of {} (cross-rail: channel k with channel k+1)", round.round.index + 1, round.planned),
        RoundKind::Retest if round.round.shift > 0 => format!("retest round {} (cross-rail)", round.round.index + 1 - round.planned),
        RoundKind::Retest => format!("retest round {}", round.round.index + 1 - round.planned),
    };
    let pairs: Vec<String> = round.round.pairs.iter().map(|(a, b)| format!("{a}-{b}")).collect();
    let slowest = round
        .figures
        .iter()
        .min_by(|a, b| a.judged_gbps().total_cmp(&b.judged_gbps()))
        .map_or_else(String::new, |f| {
            let channel = if f.target_rail() == f.rail { format!("channel {}", f.rail) } else { format!("channel {} → {}", f.rail, f.target_rail()) };
            format!("; slowest {:.2} Gbps (median write; rank {} → rank {}, {channel})", f.judged_gbps(), f.from, f.to)
        });
    let retransmits: u64 = round.figures.iter().filter_map(|f| f.retransmits).sum();
    let slowest = if retransmits > 0 { format!("{slowest}; {}", efatop_proto::words::plural(retransmits, "retransmit")) } else { slowest };
    format!("# sweep {kind} ({ranks} ranks): pairs {}{slowest}", pairs.join(" "))
}

/// Plain output's lines during the run, from the events rank 0's loop sends its consumer: how the memory
/// was registered (the header was printed before), each NIC-counter warning once, each step's counter
/// line, a line per sweep round as it finishes; the tables come at the end ([`print_final`]).
pub fn print_events(events: &Receiver<ConsumerEvent>, mut memory: String) {
    let mut warned = BTreeSet::new();
    let mut nodes = 0;
    for event in events {
        match event {
            ConsumerEvent::Begin { memory: registered, .. } => {
                if registered != memory {
                    println!("# memory as registered: {registered}");
                }
                memory = registered;
            }
            ConsumerEvent::Measured(measurement) => {
                for warning in measurement.counters.iter().flat_map(|c| &c.warnings) {
                    if warned.insert(warning.headline.clone()) {
                        println!("# warning: {}", warning.message);
                    }
                }
                if let Some(line) = efatop_report::text::counters::step_line(&measurement) {
                    println!("# {line}");
                }
            }
            ConsumerEvent::SweepBegin(sweep) => nodes = sweep.nodes.len(),
            ConsumerEvent::SweepRound(round) => println!("{}", sweep_round_line(&round, nodes)),
            _ => {}
        }
    }
}
