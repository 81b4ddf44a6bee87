//! What a results file's figures can be: the one check every reader of a results file goes through
//! ([`crate::load::parse`], after proto's `RunResults::from_json` read its shape), so that a figure no fabric can produce is refused, naming its field, rather
//! than printed, plotted or compared.
//!
//! Refused: a rank or channel count of 0 or beyond the stream's caps (0 channels only in the file of a run
//! that ended before its ranks met, which holds no figure); a rate or a time that is negative, not
//! finite, or above what the run's links can carry; a measurement that moved bytes in no time (a latency of
//! 0 with a rate above 0). The ceiling of a rate is the run's own where its NICs' link speed bounds it: on
//! efa (whose completions come once the peer's NIC acknowledged the bytes), with no shared-memory shortcut,
//! `channels × the NICs' link speed` for a rank's figures and one link for a sweep channel's, each with
//! [`LINK_ALLOWANCE`] for the writer's clock. Elsewhere (shm, tcp, ipc, an unknown speed) the ceiling is
//! [`CEILING_GBPS`]. `docs/reports.md` states both and their sources.

use std::fmt;

use efatop_proto::experiment::Experiment;
use efatop_proto::results::{LinkSource, Measurement, RunResults, MAX_CHANNELS, MAX_RANKS};
use efatop_proto::sizes::format_size;

/// The most any one rate of a run can be, in Gbps, where no link speed of the run bounds it: above the
/// fastest memory of any GPU in efatop's node layouts (B200 and B300 high-bandwidth memory, 8 TB/s = 64,000 Gbps a GPU, by
/// NVIDIA's datasheets), which bounds a copy within one GPU, the fastest figure efatop measures (ipc); and
/// far above any NIC or NVLink in them (400 Gbps an EFA v4 NIC, 1.8 TB/s = 14,400 Gbps of NVLink 5 a GPU).
pub const CEILING_GBPS: f64 = 100_000.0;

/// How far above its links' speed a figure may read before it is refused: the writer times a step from
/// its first post to its last completion, and a clock read late or a completion counted early shows a
/// rate above the wire's. 25 %.
pub const LINK_ALLOWANCE: f64 = 1.25;

/// A figure a results file holds that no run can have measured: its field, the value, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ImpossibleFigure {
    /// Where it is in the file, e.g. `measurements[3] (SinglePin 64M) latency.p50_us`.
    pub field: String,
    pub why: String,
}

impl std::error::Error for ImpossibleFigure {}

impl fmt::Display for ImpossibleFigure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.field, self.why)
    }
}

/// A number as a reader can check it: plain when short, else in scientific notation (`1e308`, not 309
/// digits).
fn shown(value: f64) -> String {
    if value != 0.0 && value.is_finite() && !(1e-3..1e9).contains(&value.abs()) {
        format!("{value:e}")
    } else {
        format!("{value}")
    }
}

/// The most a rate may be, and what says so.
#[derive(Debug, Clone)]
struct Ceiling {
    gbps: f64,
    why: String,
}

impl Ceiling {
    /// No bound but finite: for times.
    fn unbounded() -> Self {
        Ceiling { gbps: f64::MAX, why: String::new() }
    }

    fn absolute() -> Self {
        Ceiling {
            gbps: CEILING_GBPS,
            why: format!("{CEILING_GBPS} Gbps, more than any node's memory, NIC or NVLink carries"),
        }
    }
}

/// Checks figure by figure; the first impossible one ends the check.
struct Checker<'a> {
    results: &'a RunResults,
    rank: Ceiling,
    channel: Ceiling,
}

type Checked = Result<(), ImpossibleFigure>;

fn refuse(field: impl Into<String>, why: String) -> Checked {
    Err(ImpossibleFigure {
        field: field.into(),
        why,
    })
}

/// A time, a share or a count as a float: finite and not negative.
fn non_negative(field: &str, value: f64) -> Checked {
    if !value.is_finite() {
        return refuse(
            field,
            format!("is {}: not a number a run measures", shown(value)),
        );
    }
    if value < 0.0 {
        return refuse(
            field,
            format!("is {}: no run measures a negative figure", shown(value)),
        );
    }
    Ok(())
}

impl Checker<'_> {
    /// Whether a rate passes [`Checker::rate`], without naming it (a fleet's pair matrices and sweep
    /// figures hold millions: the field is named only for the one refused).
    fn passes(value: f64, ceiling: &Ceiling) -> bool {
        value.is_finite() && value >= 0.0 && value <= ceiling.gbps
    }

    /// A rate: finite, not negative, not above `ceiling`.
    fn rate(field: &str, value: f64, ceiling: &Ceiling) -> Checked {
        non_negative(field, value)?;
        if value > ceiling.gbps {
            return refuse(
                field,
                format!("is {} Gbps: above {}", shown(value), ceiling.why),
            );
        }
        Ok(())
    }

    fn measurement(&self, index: usize, m: &Measurement) -> Checked {
        let at = format!(
            "measurements[{index}] ({} {})",
            m.config,
            format_size(m.size)
        );
        let field = |name: &str| format!("{at} {name}");
        Self::rate(&field("gbps"), m.gbps, &self.rank)?;
        if let Some(busbw) = m.busbw_percent {
            non_negative(&field("busbw_percent"), busbw)?;
        }
        if let Some(busbw) = m.nccl_busbw_gbps {
            Self::rate(&field("nccl_busbw_gbps"), busbw, &self.rank)?;
        }
        let latency = [
            ("mean_us", m.latency.mean_us),
            ("p50_us", m.latency.p50_us),
            ("p99_us", m.latency.p99_us),
            ("max_us", m.latency.max_us),
        ];
        for (name, us) in latency {
            let name = field(&format!("latency.{name}"));
            non_negative(&name, us)?;
            if us == 0.0 && m.gbps > 0.0 && m.size > 0 {
                return refuse(
                    name,
                    format!(
                        "is 0 while {} Gbps moved: no operation takes no time",
                        shown(m.gbps)
                    ),
                );
            }
        }
        for (p, pair) in m.pairs.iter().enumerate() {
            if !Self::passes(pair.gbps, &self.rank) || !Self::passes(pair.mean_us, &Ceiling::unbounded()) {
                Self::rate(&field(&format!("pairs[{p}].gbps")), pair.gbps, &self.rank)?;
                non_negative(&field(&format!("pairs[{p}].mean_us")), pair.mean_us)?;
            }
        }
        if let Some(ab) = &m.telemetry_ab {
            let rates = [("on_gbps", ab.on_gbps), ("off_gbps", ab.off_gbps)]
                .into_iter()
                .chain(ab.on_halves_gbps.iter().map(|r| ("on_halves_gbps", *r)))
                .chain(ab.off_halves_gbps.iter().map(|r| ("off_halves_gbps", *r)))
                .chain(ab.position_gbps.iter().map(|r| ("position_gbps", *r)))
                .chain(ab.unit_gbps.iter().flatten().map(|r| ("unit_gbps", *r)));
            for (name, gbps) in rates {
                Self::rate(&field(&format!("telemetry_ab.{name}")), gbps, &self.rank)?;
            }
        }
        if let Some(efatop_proto::expected::Expected::Figure { gbps, percent, .. }) = &m.expected {
            Self::rate(&field("expected.gbps"), *gbps, &self.rank)?;
            non_negative(&field("expected.percent"), *percent)?;
        }
        if let Some(ratio) = m.counters.as_ref().and_then(|c| c.ratio) {
            non_negative(&field("counters.ratio"), ratio)?;
        }
        Ok(())
    }

    fn all(&self) -> Checked {
        let results = self.results;
        for (index, measurement) in results.measurements.iter().enumerate() {
            self.measurement(index, measurement)?;
        }
        for (index, matrix) in results.pair_matrices.iter().enumerate() {
            for (sender, row) in matrix.gbps.iter().enumerate() {
                for (receiver, cell) in row.iter().enumerate() {
                    if let Some(gbps) = cell.filter(|gbps| !Self::passes(*gbps, &self.rank)) {
                        let field = format!(
                            "pair_matrices[{index}] ({} {}) gbps[{sender}][{receiver}]",
                            matrix.config,
                            format_size(matrix.size)
                        );
                        Self::rate(&field, gbps, &self.rank)?;
                    }
                }
            }
        }
        let Some(sweep) = &results.sweep else {
            return Ok(());
        };
        non_negative("sweep.threshold", sweep.threshold)?;
        if let Some(link) = sweep.link_gbps {
            link_speed("sweep.link_gbps", link)?;
        }
        for (r, round) in sweep.rounds.iter().enumerate() {
            for (f, figure) in round.figures.iter().enumerate() {
                let unbounded = Ceiling::unbounded();
                let fine = Self::passes(figure.gbps, &self.channel)
                    && Self::passes(figure.steady_gbps, &self.channel)
                    && Self::passes(figure.p50_us, &unbounded)
                    && Self::passes(figure.p99_us, &unbounded)
                    && (figure.p50_us > 0.0 || figure.judged_gbps() == 0.0);
                if fine {
                    continue;
                }
                let at = format!(
                    "sweep.rounds[{r}].figures[{f}] (rank {} to {}, channel {})",
                    figure.from, figure.to, figure.rail
                );
                Self::rate(&format!("{at} gbps"), figure.gbps, &self.channel)?;
                Self::rate(
                    &format!("{at} steady_gbps"),
                    figure.steady_gbps,
                    &self.channel,
                )?;
                for (name, us) in [("p50_us", figure.p50_us), ("p99_us", figure.p99_us)] {
                    non_negative(&format!("{at} {name}"), us)?;
                }
                if figure.p50_us == 0.0 && figure.judged_gbps() > 0.0 {
                    return refuse(
                        format!("{at} p50_us"),
                        format!(
                            "is 0 while {} Gbps moved: no write takes no time",
                            shown(figure.judged_gbps())
                        ),
                    );
                }
            }
        }
        for (s, suspect) in sweep.verdict.iter().flat_map(|v| &v.suspects).enumerate() {
            Self::rate(
                &format!("sweep.verdict.suspects[{s}] measured_gbps"),
                suspect.measured_gbps,
                &self.channel,
            )?;
            Self::rate(
                &format!("sweep.verdict.suspects[{s}] median_gbps"),
                suspect.median_gbps,
                &self.channel,
            )?;
        }
        Ok(())
    }
}

/// A link speed: above 0 and below the absolute ceiling.
fn link_speed(field: &str, gbps: f64) -> Checked {
    Checker::rate(field, gbps, &Ceiling::absolute())?;
    if gbps == 0.0 {
        return refuse(
            field,
            "is 0 Gbps: a link that carries nothing carried no run".to_string(),
        );
    }
    Ok(())
}

/// Refuses a file whose figures no run can have measured (see the module's text): the first such figure,
/// named by its field.
pub fn check_figures(results: &RunResults) -> Result<(), ImpossibleFigure> {
    let meta = &results.metadata;
    if meta.ranks == 0 || meta.ranks > MAX_RANKS {
        return refuse(
            "metadata.ranks",
            format!("is {}: a run has 1 to {MAX_RANKS} ranks", meta.ranks),
        );
    }
    // Older efatops wrote the file of a run that ended before its ranks met: no hosts, so no channels,
    // and no figure. Any figure needs a channel it went over.
    let never_met = meta.hosts.is_empty()
        && results.measurements.is_empty()
        && results.pair_matrices.is_empty()
        && results.sweep.is_none();
    if (meta.channels == 0 && !never_met) || meta.channels > MAX_CHANNELS {
        return refuse(
            "metadata.channels",
            format!(
                "is {}: a run has 1 to {MAX_CHANNELS} channels a rank",
                meta.channels
            ),
        );
    }
    if let Some(link) = meta.link_gbps {
        link_speed("metadata.link_gbps", link)?;
    }
    for (index, nic) in meta.nics.iter().enumerate() {
        if let Some(link) = nic.link_gbps {
            link_speed(&format!("metadata.nics[{index}].link_gbps"), link)?;
        }
    }
    let (rank, channel) = ceilings(results);
    Checker {
        results,
        rank,
        channel,
    }
    .all()
}

/// The most a rank's figure and a channel's figure (a sweep's) can be in this run.
fn ceilings(results: &RunResults) -> (Ceiling, Ceiling) {
    let meta = &results.metadata;
    // The NICs' own report of their speed; `--link-gbps` is a claim, and is not held against the file.
    let nic_link = meta
        .nics
        .iter()
        .filter_map(|nic| nic.link_gbps)
        .reduce(f64::max)
        .or(match meta.link_source {
            LinkSource::Provider => meta.link_gbps,
            _ => None,
        });
    // Same-host pairs may have gone through libfabric's shared-memory shortcut: memory, not the wire.
    // Files from before it was recorded say nothing; there, one rank a host rules it out.
    let mut hosts: Vec<&String> = meta.hosts.iter().collect();
    hosts.sort_unstable();
    hosts.dedup();
    let apart = !meta.hosts.is_empty() && hosts.len() == meta.hosts.len();
    let no_shortcut = meta.shm_shortcut == Some(false) || (meta.shm_shortcut.is_none() && apart);
    let wire_bound = meta.experiment != Experiment::Ipc && meta.provider == "efa" && no_shortcut;
    match nic_link.filter(|_| wire_bound) {
        Some(link) => {
            let allowance = (LINK_ALLOWANCE - 1.0) * 100.0;
            let channels = meta.channels;
            let rank = Ceiling {
                gbps: (link * channels as f64 * LINK_ALLOWANCE).min(CEILING_GBPS),
                why: format!(
                    "{} Gbps, what this run's {channels} channel{} of {link} Gbps (the NICs' link speed) carry, +{allowance:.0} %",
                    shown(link * channels as f64 * LINK_ALLOWANCE),
                    if channels == 1 { "" } else { "s" }
                ),
            };
            let channel = Ceiling {
                gbps: (link * LINK_ALLOWANCE).min(CEILING_GBPS),
                why: format!("{} Gbps, what one channel of {link} Gbps (the NIC's link speed) carries, +{allowance:.0} %", shown(link * LINK_ALLOWANCE)),
            };
            (rank, channel)
        }
        None => (Ceiling::absolute(), Ceiling::absolute()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use efatop_proto::column::{Column, Layout, Memory};
    use efatop_proto::results::{LatencySummary, NicRecord, PairMeasurement, RunMetadata};

    fn run(provider: &str, link: Option<f64>) -> RunResults {
        let config = Column::write(Layout::Single, Memory::Host);
        let measurement = Measurement {
            config: config.clone(),
            size: 1 << 20,
            count: 1 << 18,
            gbps: 90.0,
            busbw_percent: None,
            nccl_busbw_gbps: None,
            latency: LatencySummary {
                mean_us: 90.0,
                p50_us: 90.0,
                p99_us: 95.0,
                max_us: 99.0,
            },
            iterations: 20,
            pairs: vec![PairMeasurement {
                peers: vec![1],
                gbps: 90.0,
                mean_us: 90.0,
            }],
            verified: true,
            registration: None,
            counters: None,
            telemetry_ab: None,
            expected: None,
        };
        let nics = (0..2)
            .map(|channel| NicRecord {
                channel,
                domain: format!("d{channel}"),
                fabric: "f".into(),
                link_gbps: link,
                pci_address: None,
                mr_mode: Vec::new(),
            })
            .collect();
        let metadata = RunMetadata {
            experiment: Experiment::Write,
            provider: provider.into(),
            ranks: 2,
            channels: 2,
            nics,
            hosts: vec!["a".into(), "b".into()],
            ..RunMetadata::default()
        };
        RunResults {
            metadata,
            configs: vec![config],
            measurements: vec![measurement],
            ..RunResults::default()
        }
    }

    #[test]
    fn a_real_run_passes_and_each_impossible_figure_is_named() {
        assert_eq!(check_figures(&run("efa", Some(100.0))), Ok(()));
        let refused = |edit: &dyn Fn(&mut RunResults), provider: &str| {
            let mut results = run(provider, Some(100.0));
            edit(&mut results);
            check_figures(&results).expect_err("refused").to_string()
        };
        let text = refused(&|r| r.measurements[0].gbps = -5.0, "efa");
        assert_eq!(
            text,
            "measurements[0] (SinglePin 1M) gbps is -5: no run measures a negative figure"
        );
        let text = refused(&|r| r.measurements[0].latency.p50_us = 0.0, "efa");
        assert!(
            text.starts_with(
                "measurements[0] (SinglePin 1M) latency.p50_us is 0 while 90 Gbps moved"
            ),
            "{text}"
        );
        let text = refused(&|r| r.measurements[0].gbps = 1e308, "tcp");
        assert!(
            text.contains("gbps is 1e308 Gbps: above 100000 Gbps"),
            "{text}"
        );
        let text = refused(&|r| r.measurements[0].latency.max_us = f64::INFINITY, "efa");
        assert!(
            text.contains("latency.max_us is inf: not a number"),
            "{text}"
        );
        // efa: 2 channels of 100 Gbps, + 25 %.
        let text = refused(&|r| r.measurements[0].pairs[0].gbps = 251.0, "efa");
        assert!(
            text.contains(
                "pairs[0].gbps is 251 Gbps: above 250 Gbps, what this run's 2 channels of 100 Gbps"
            ),
            "{text}"
        );
        let mut fast_tcp = run("tcp", Some(100.0));
        fast_tcp.measurements[0].gbps = 251.0;
        assert_eq!(
            check_figures(&fast_tcp),
            Ok(()),
            "tcp's completions come from the socket buffer: not bound by the link"
        );
        // Two ranks on one host, in a file that does not say whether the shm shortcut was allowed: memory
        // may have moved it, so only the absolute ceiling holds; a file that says it was not is bound.
        let mut one_host = run("efa", Some(100.0));
        one_host.measurements[0].gbps = 251.0;
        one_host.metadata.hosts = vec!["a".into(), "a".into()];
        assert_eq!(check_figures(&one_host), Ok(()));
        one_host.metadata.shm_shortcut = Some(false);
        assert!(check_figures(&one_host).is_err());
        let text = refused(&|r| r.metadata.ranks = 0, "efa");
        assert_eq!(
            text,
            format!("metadata.ranks is 0: a run has 1 to {MAX_RANKS} ranks")
        );
        let text = refused(&|r| r.metadata.channels = 0, "efa");
        assert!(text.starts_with("metadata.channels is 0"), "{text}");
        let text = refused(&|r| r.metadata.nics[1].link_gbps = Some(0.0), "efa");
        assert!(
            text.starts_with("metadata.nics[1].link_gbps is 0 Gbps"),
            "{text}"
        );
    }
}
