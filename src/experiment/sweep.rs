//! `efatop sweep`: every rank pair, rail by rail, in the rounds of a round-robin tournament, then a verdict
//! naming the slow NIC, link or node (docs/sweep.md). Exit code
//! [`efatop_runtime::rank_zero::SUSPECTS_FOUND`] (3; 1 stays "the run failed", 2 "bad input") when it
//! names any.

use clap::Args;
use efatop_proto::results::{RankPlacement, RunMetadata};
use efatop_experiments::sweep::{self, SweepConfig};
use efatop_experiments::World;

use super::{parse_size_arg, CommonArgs, Descriptor, Planned};


#[derive(Debug, Clone, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Bytes each channel writes per iteration (K, M, G suffixes)
    #[arg(long, default_value = "64M", value_parser = parse_size_arg)]
    pub size: u64,
    /// Only the first ⌈n/2⌉ rounds of the tournament (each rank meets half its peers), then the retests
    #[arg(long)]
    pub quick: bool,
    /// A channel whose best figure with any peer is below this share of its rail's fleet median is suspect
    /// (and below this share of --link-gbps, when given)
    #[arg(long, default_value_t = efatop_proto::telemetry::rails::DEFAULT_THRESHOLD, value_parser = parse_threshold)]
    pub threshold: f64,
    /// Skip the cross-rail round (NIC k of one node with NIC k+1 of another), for fabrics whose rails do not
    /// reach each other
    #[arg(long)]
    pub no_cross_rail: bool,
    /// How rank 0 reports the verdict: plain (tables, exit 3 when something is suspect), slurm (a line
    /// `NODE REASON` per suspect node on stdout; the run's tables go to stderr) or npd (one line of at most 80
    /// characters); with slurm and npd the exit code is 0 nothing suspect, 1 suspects, 2 the sweep failed
    #[arg(long, value_enum, default_value_t = SweepFormat::Plain, conflicts_with = "json")]
    pub format: SweepFormat,
    /// With --format slurm: drain every node with a slow NIC (or slow as a whole) with its reason, through
    /// `scontrol update` (links between two nodes are reported, not drained)
    #[arg(long)]
    pub drain: bool,
}

/// `sweep --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SweepFormat {
    /// tables (or the dashboard), exit 3 when something is suspect
    Plain,
    /// a Slurm drain reason per suspect node
    Slurm,
    /// a node-problem-detector line
    Npd,
}

fn parse_threshold(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v > 0.0 && v < 1.0 => Ok(v),
        _ => Err(format!("`{text}` is not a threshold; use a share of the median between 0 and 1, e.g. 0.9")),
    }
}

impl Descriptor for SweepArgs {
    fn kind(&self) -> efatop_proto::Experiment {
        efatop_proto::Experiment::Sweep
    }

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    /// One size, `--size` (`--min-size`/`--max-size` are refused).
    fn default_sizes(&self) -> (u64, u64) {
        (self.size, self.size)
    }

    fn check(&self) -> Result<(), String> {
        let common = &self.common;
        if common.min_size.is_some() || common.max_size.is_some() {
            let flag = if common.min_size.is_some() { "--min-size" } else { "--max-size" };
            return Err(format!("{flag}: sweep writes one size; use --size"));
        }
        if common.window > 1 {
            return Err(format!("--window {}: sweep keeps one write in flight per channel, so it takes 1", common.window));
        }
        if common.memory.len() > 1 {
            return Err("--memory: sweep moves one kind of memory; use host, device or staged".into());
        }
        if self.drain && self.format != SweepFormat::Slurm {
            return Err("--drain: only with --format slurm (it sets the Slurm drain reason of each suspect node)".into());
        }
        Ok(())
    }

    fn columns(&self) -> Vec<efatop_proto::Column> {
        vec![efatop_proto::Column::Sweep { memory: efatop_proto::column::Memory::Host, emulated: false }]
    }

    fn plan<'a>(&'a self, world: &'a World<'a>, _: &[RankPlacement], metadata: &mut RunMetadata) -> Planned<'a> {
        metadata.notes.push(if self.no_cross_rail {
            "sweep: rail-aligned rounds only (--no-cross-rail): a slow NIC is told from a slow link by the peers it is slow \
             with, and suspects are retested against a healthy peer"
                .into()
        } else {
            "sweep: rail-aligned rounds, then a cross-rail round (NIC k of the smaller rank of each first-round pair with \
             NIC k+1 of the larger) that tells a slow NIC from a slow link, then retests of suspects against a healthy peer"
                .into()
        });
        let config = SweepConfig {
            size: self.size,
            quick: self.quick,
            threshold: self.threshold,
            link_gbps: self.common.link_gbps,
            cross_rail: !self.no_cross_rail,
        };
        Box::new(move |options, observer| sweep::run(world, options, &config, observer).map(|_| ()))
    }
}
