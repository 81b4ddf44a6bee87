//! Where a node's GPUs, NICs, NUMA nodes and CPUs sit relative to each other, read from hwloc (this
//! machine, or an hwloc XML file such as the p5/p4d/p5en fixtures), in the terms of `nvidia-smi topo -m`.
//!
//! [`NodeTopology`] is plain data: built once by [`NodeTopology::discover`] or
//! [`NodeTopology::from_xml_file`], printed by [`NodeTopology::render_text`], serialized for `--json`.
//! Every GPU–GPU and GPU–NIC pair gets an `efatop_proto::topology::Link` (X, NV#, PIX, PXB, PHB, NODE,
//! SYS): the plain facts live in `efatop-proto`, this crate fills them from hwloc. Every GPU gets its
//! nearest NICs, the share of them a rank on it should use, its NUMA node and CPUs;
//! [`NodeTopology::placement`] turns that into a [`Placement`] for a local rank.
//!
//! What is a GPU: an NVIDIA (vendor 0x10de) PCI display or 3D controller. What is a NIC: a PCI network
//! controller, or any PCI device with a network or OpenFabrics OS device; EFA is Amazon's 0x1d0f:efa*.
//! NVLink is inferred from NVSwitch PCI devices (NVIDIA, class 0x0680): on an NVSwitch baseboard every GPU
//! reaches every other with all of its links.

#![forbid(unsafe_code)]
// PCIe, NVSwitch, NVLinks and OpenFabrics are hardware names in prose here, not code to put in backticks;
// the workspace's clippy.toml (doc-valid-idents) is shared, so the exception stays in this crate.

mod discover;
mod instances;
mod link;
mod model;
mod pair;
mod placement;
mod render;

use std::path::PathBuf;

pub use discover::dmi_product_name;
pub use instances::{instance_layout, known_instance_types};
pub use model::{FabricNic, Gpu, Nic, NicKind, NodeTopology, NumaNode, PhysicalNic, normalize_bus_id};
pub use placement::{GpuChoice, Placement};

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{name} is not an hwloc XML topology ({detail})")]
    InvalidXml { name: String, detail: String },
    #[error("hwloc cannot read this machine's topology: {0}")]
    Discovery(String),
    #[error("GPU {requested} does not exist: {}", gpu_count_text(*count))]
    NoSuchGpu { requested: usize, count: usize },
}

fn gpu_count_text(count: usize) -> String {
    match count {
        0 => "this node has no GPUs".to_string(),
        1 => "this node has 1 GPU (0)".to_string(),
        n => format!("this node has {n} GPUs (0-{})", n - 1),
    }
}
