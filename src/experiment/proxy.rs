//! `efatop proxy`: GPU-initiated RDMA WRITEs through a CPU proxy, rank 0's GPU → rank 1, blocking and NBI
//! (seed `proxy.md`).

use efatop_experiments::payload::MemoryChoice;
use efatop_experiments::proxy;
use efatop_proto::column::{Column, Memory, ProxyLayout};
use efatop_proto::results::{RankPlacement, RunMetadata};
use efatop_experiments::World;

use super::{Descriptor, Planned, memories_from_flags};
use crate::cli::{CommonArgs, ProxyArgs};
use efatop_proto::sizes;

impl ProxyArgs {
    fn configs(&self) -> Vec<ProxyLayout> {
        self.configs.iter().map(|c| ProxyLayout::from(*c)).collect()
    }
}

impl Descriptor for ProxyArgs {
    fn kind(&self) -> efatop_proto::Experiment {
        efatop_proto::Experiment::Proxy
    }

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    /// The seed table's sizes: below 8M its staged shm figures are about per-request overhead, not the
    /// pipeline.
    fn default_sizes(&self) -> (u64, u64) {
        (8 << 20, 1 << 30)
    }

    fn always_gpu(&self) -> bool {
        true
    }

    fn persistent_writer_kernel(&self) -> bool {
        true
    }

    fn check(&self) -> Result<(), String> {
        match super::given_twice(&self.configs) {
            Some(config) => Err(format!("--configs: {config} is given twice; name each configuration once")),
            None => Ok(()),
        }
    }

    fn columns(&self) -> Vec<Column> {
        self.configs().iter().map(|c| Column::Proxy { layout: *c, memory: Memory::Device, emulated: false }).collect()
    }

    /// Always GPU memory: `--staged` (or `--memory staged`) picks its staging pipeline.
    fn memories(&self, gpu: usize) -> Vec<MemoryChoice> {
        if self.common.staged {
            vec![MemoryChoice::Staged { gpu }]
        } else {
            memories_from_flags(&self.common, gpu)
        }
    }

    fn plan<'a>(&'a self, world: &'a World<'a>, _: &[RankPlacement], metadata: &mut RunMetadata) -> Planned<'a> {
        metadata.notes.push(if self.chunk == 0 {
            "proxy: one write per channel per iteration (--chunk whole); blocking Quiets after each".into()
        } else {
            format!("proxy: writes of at most {} (--chunk); blocking Quiets after each", sizes::format_size(self.chunk))
        });
        let configs = self.configs();
        Box::new(move |sweep, observer| proxy::run(world, sweep, &configs, self.chunk, observer).map(|_| ()))
    }
}
