//! `efatop sweep`: every rank pair, rail by rail, in the rounds of a round-robin tournament, then a verdict
//! naming the slow NIC, link or node (docs/sweep.md). Exit code
//! [`efatop_runtime::rank_zero::SUSPECTS_FOUND`] (3; 1 stays "the run failed", 2 "bad input") when it
//! names any.

use efatop_proto::results::{RankPlacement, RunMetadata};
use efatop_experiments::sweep::{self, SweepConfig};
use efatop_experiments::World;

use super::{Descriptor, Planned};
use crate::cli::{CommonArgs, SweepArgs, SweepFormat};


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
