//! `efatop ipc`: NVLink writes through CUDA IPC, rank 0's GPU → rank 1's: store kernels of each grid ×
//! block and the tuned store kernel against the copy engine; `BusBW` against the GPU pair's NVLink peak.

use efatop_experiments::ipc;
use efatop_experiments::World;
use efatop_fabric::Capabilities;
use efatop_proto::ipc::IpcConfig;
use efatop_proto::results::{LinkSource, RankPlacement, RunMetadata};

use super::{Descriptor, Planned};
use crate::cli::{CommonArgs, IpcArgs, MemoryArg};

impl IpcArgs {
    /// The kernel configurations in column order (grid-major), then the tuned kernel, then the copy engine.
    pub fn configs(&self) -> Vec<IpcConfig> {
        let (grids, blocks): (Vec<u32>, Vec<u32>) = if self.sweep {
            ((0..=9).map(|p| 1 << p).collect(), (6..=10).map(|p| 1 << p).collect())
        } else {
            (self.grid.clone(), self.block.clone())
        };
        let mut configs: Vec<IpcConfig> =
            grids.iter().flat_map(|&grid| blocks.iter().map(move |&block| IpcConfig::kernel(grid, block))).collect();
        configs.dedup();
        if !self.no_tuned {
            configs.push(IpcConfig::TUNED);
        }
        if !self.no_copy_engine {
            configs.push(IpcConfig::COPY_ENGINE);
        }
        configs
    }
}

impl Descriptor for IpcArgs {
    fn kind(&self) -> efatop_proto::Experiment {
        efatop_proto::Experiment::Ipc
    }

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    /// NVLink needs large sizes to fill.
    fn default_sizes(&self) -> (u64, u64) {
        (1 << 20, 1 << 30)
    }

    /// ipc moves nothing over libfabric; its world still gives it the bootstrap, telemetry and placement.
    fn capabilities(&self) -> Capabilities {
        Capabilities::MESSAGES
    }

    fn always_gpu(&self) -> bool {
        true
    }

    /// `--same-gpu` puts both ranks on one GPU (the first, unless `--gpu` names one), also where the host has
    /// more: it measures a GPU's copy into its own memory through an IPC mapping.
    fn gpu_index(&self, chosen: Option<usize>) -> Option<usize> {
        chosen.or(self.same_gpu.then_some(0))
    }

    fn copies_into_gpu_memory(&self) -> bool {
        false
    }

    fn check(&self) -> Result<(), String> {
        if self.common.memory != [MemoryArg::Host] {
            return Err("--memory: ipc always moves GPU memory; leave --memory out".into());
        }
        for (flag, values) in [("--grid", &self.grid), ("--block", &self.block)] {
            if let Some(twice) = values.iter().enumerate().find_map(|(i, v)| values[..i].contains(v).then_some(v)) {
                return Err(format!("{flag}: {twice} is given twice; name each once"));
            }
        }
        Ok(())
    }

    fn columns(&self) -> Vec<efatop_proto::Column> {
        self.configs().iter().map(|c| efatop_proto::Column::Ipc(*c)).collect()
    }

    /// `BusBW` is against the GPU pair's NVLink peak, not a NIC's link speed.
    fn plan<'a>(&'a self, world: &'a World<'a>, placements: &[RankPlacement], metadata: &mut RunMetadata) -> Planned<'a> {
        let peak = crate::nvlink::peak_between_ranks(placements);
        metadata.link_gbps = peak.as_ref().map(|peak| peak.gbytes_per_s * 8.0);
        metadata.link_source = LinkSource::Nvlink(peak.as_ref().map(|peak| peak.origin));
        Box::new(move |sweep, observer| {
            let link_counters = (world.rank == 0).then(|| crate::nvlink::writer_link_counters(world));
            let mut options = ipc::IpcOptions { configs: self.configs(), peak, same_gpu: self.same_gpu, link_counters };
            ipc::run(world, sweep, &mut options, observer).map(|_| ())
        })
    }
}
