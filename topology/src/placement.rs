//! Where a rank should run: its GPU, the NICs nearest that GPU, and the CPUs of the GPU's NUMA node.

use efatop_proto::topology::{format_cpu_list, parse_cpu_list};
use serde::{Deserialize, Serialize};

use crate::TopologyError;
use crate::model::NodeTopology;

/// Which GPU a rank takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuChoice {
    /// The rank's local rank, modulo the node's GPUs (more ranks than GPUs share them round-robin).
    Auto,
    /// This GPU index; an index the node does not have is an error.
    Index(usize),
}

/// What one rank was given.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    pub local_rank: usize,
    /// `None` on a node without GPUs.
    pub gpu: Option<usize>,
    pub gpu_pci_bus_id: Option<String>,
    /// The NICs to use, by name (`rdmap79s0`): the GPU's preferred NICs; on a node without GPUs, every
    /// RDMA NIC (or every NIC when there is no RDMA).
    pub nics: Vec<String>,
    pub numa_node: Option<u32>,
    /// CPUs to pin the rank's progress thread to, in the kernel's list format.
    pub cpus: String,
}

impl NodeTopology {
    pub fn placement(&self, local_rank: usize, choice: GpuChoice) -> Result<Placement, TopologyError> {
        let gpu_index = match (choice, self.gpus.len()) {
            (GpuChoice::Index(i), count) if i >= count => return Err(TopologyError::NoSuchGpu { requested: i, count }),
            (GpuChoice::Index(i), _) => Some(i),
            (GpuChoice::Auto, 0) => None,
            (GpuChoice::Auto, count) => Some(local_rank % count),
        };
        let Some(gpu) = gpu_index.map(|i| &self.gpus[i]) else {
            let any_rdma = self.nics.iter().any(|nic| nic.kind.is_rdma());
            let usable = self.nics.iter().filter(|nic| !any_rdma || nic.kind.is_rdma());
            return Ok(Placement {
                local_rank,
                gpu: None,
                gpu_pci_bus_id: None,
                nics: usable.map(|nic| nic.name.clone()).collect(),
                numa_node: None,
                cpus: self.all_cpus(),
            });
        };
        Ok(Placement {
            local_rank,
            gpu: Some(gpu.index),
            gpu_pci_bus_id: Some(gpu.pci_bus_id.clone()),
            nics: gpu.preferred_nics.iter().map(|&k| self.nics[k].name.clone()).collect(),
            numa_node: gpu.numa_node,
            cpus: gpu.cpus.clone(),
        })
    }

    /// The placement of the GPU a rank actually opened, found by its PCI bus id (as CUDA reports it,
    /// `00000000:53:00.0`). Under `CUDA_VISIBLE_DEVICES` CUDA's ordinal and hwloc's index differ; the bus
    /// id does not. `None` when hwloc does not list that GPU.
    pub fn placement_of_gpu(&self, local_rank: usize, pci_bus_id: &str) -> Option<Placement> {
        let wanted = crate::model::normalize_bus_id(pci_bus_id)?;
        let index = self.gpus.iter().position(|gpu| crate::model::normalize_bus_id(&gpu.pci_bus_id).as_deref() == Some(&wanted))?;
        self.placement(local_rank, GpuChoice::Index(index)).ok()
    }

    /// Where a libfabric NIC (found by PCI address, else by domain name, e.g. `rdmap96s0-rdm` or `eth0`)
    /// stands in `placement`'s order: its position in [`Placement::nics`], `None` when the rank should
    /// not prefer it. Sorting a rank's libfabric NICs by this key (`None` last) puts its own first, which
    /// is what `--channels all` wants on a p5.
    pub fn nic_preference(&self, placement: &Placement, pci_bus_id: Option<&str>, domain: &str) -> Option<usize> {
        let nic = pci_bus_id.and_then(|id| self.nic_by_pci_bus_id(id)).or_else(|| self.nic_by_name(domain))?;
        placement.nics.iter().position(|name| *name == nic.name)
    }

    /// The CPUs of every NUMA node, as one list.
    fn all_cpus(&self) -> String {
        let mut cpus: Vec<u32> = self.numa_nodes.iter().flat_map(|node| parse_cpu_list(&node.cpus)).collect();
        cpus.sort_unstable();
        cpus.dedup();
        format_cpu_list(&cpus)
    }
}
