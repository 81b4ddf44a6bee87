//! What `efatop monitor` sends rank 0 from each node: the figures its view draws, without the per-counter
//! detail (which stays on the node, for its own `--json`). Plain data; [`super::wire`] frames it.

/// One node's monitor read.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NodeSample {
    pub rank: u32,
    pub seq: u64,
    /// Since the node's monitor started.
    pub t_ms: u64,
    /// Since the node's previous read; `None` for its first (which has no rates).
    pub interval_ms: Option<f64>,
    /// Snapshots the node's queue dropped because rank 0 was not reading.
    pub drops: u64,
    pub host: String,
    /// The GPUs the node's topology names, which its NICs are grouped under.
    pub topology_gpus: Vec<NodeTopologyGpu>,
    pub nics: Vec<NodeNic>,
    pub gpus: NodeGpus,
}

/// A GPU as the node's topology names it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NodeTopologyGpu {
    pub index: u32,
    pub pci_bus_id: String,
    /// Empty when the topology does not say.
    pub model: String,
}

/// One NIC of a node.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NodeNic {
    pub name: String,
    /// An RDMA device (EFA) rather than a network interface.
    pub rdma: bool,
    pub present: bool,
    /// Indices of the GPUs this NIC sits next to.
    pub gpus: Vec<u16>,
    pub link_gbps: Option<f64>,
    pub tx_gbps: Option<f64>,
    pub rx_gbps: Option<f64>,
    pub errors: u64,
    pub errors_delta: u64,
    pub retransmits: u64,
    pub retransmits_delta: u64,
}

/// A node's GPU panel.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum NodeGpus {
    Unavailable(String),
    Gpus(Vec<NodeGpu>),
}

impl Default for NodeGpus {
    fn default() -> Self {
        Self::Gpus(Vec::new())
    }
}

/// One GPU's links on a node.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NodeGpu {
    pub index: u32,
    pub name: String,
    pub pci_bus_id: String,
    pub pcie_tx_gbps: Option<f64>,
    pub pcie_rx_gbps: Option<f64>,
    pub nvlink_tx_gbps: Option<f64>,
    pub nvlink_rx_gbps: Option<f64>,
    /// Why a figure is missing; empty when none is.
    pub note: String,
}
