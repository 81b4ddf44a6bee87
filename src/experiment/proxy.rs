//! `efatop proxy`: GPU-initiated RDMA WRITEs through a CPU proxy, rank 0's GPU → rank 1, blocking and NBI
//! (seed `proxy.md`).

use clap::{Args, ValueEnum};
use efatop_experiments::payload::MemoryChoice;
use efatop_experiments::proxy;
use efatop_proto::column::{Column, Memory, ProxyLayout};
use efatop_proto::results::{RankPlacement, RunMetadata};
use efatop_experiments::World;
use efatop_proto::sizes;

use super::{CommonArgs, Descriptor, Planned, memories_from_flags};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProxyConfigArg {
    Single,
    Multi,
    #[value(name = "single-nbi")]
    SingleNbi,
    #[value(name = "multi-nbi")]
    MultiNbi,
}

impl From<ProxyConfigArg> for ProxyLayout {
    fn from(arg: ProxyConfigArg) -> Self {
        match arg {
            ProxyConfigArg::Single => ProxyLayout::Single,
            ProxyConfigArg::Multi => ProxyLayout::Multi,
            ProxyConfigArg::SingleNbi => ProxyLayout::SingleNbi,
            ProxyConfigArg::MultiNbi => ProxyLayout::MultiNbi,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct ProxyArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Configurations to run, in this order (blocking: Quiet after each write; NBI: Quiet once at the end)
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [ProxyConfigArg::Single, ProxyConfigArg::Multi, ProxyConfigArg::SingleNbi, ProxyConfigArg::MultiNbi])]
    pub configs: Vec<ProxyConfigArg>,
    /// Largest write the GPU asks for: each channel's share of a size goes out in writes of at most this
    /// size, and blocking configurations Quiet after every one (a power of two, or `whole` for one write
    /// per channel per iteration)
    #[arg(long, default_value = "1M", value_parser = parse_chunk)]
    pub chunk: u64,
}

/// `--chunk`: a size, or `whole` (0).
fn parse_chunk(text: &str) -> Result<u64, String> {
    if text.eq_ignore_ascii_case("whole") {
        return Ok(0);
    }
    sizes::parse_size(text).map_err(|why| format!("{why}; or `whole` for one write per channel per iteration"))
}

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
