//! One read of a node by `efatop monitor`: every NIC's rates, error and retransmit counts, and the GPUs'
//! PCIe and NVLink throughput. The one type for it: the monitor makes it, `--json` prints it, the view
//! draws it, and a many-node monitor's nodes send it to rank 0 ([`super::wire`] frames the figures the view
//! draws; the per-counter detail and the NICs' PCI addresses stay on the node).
//!
//! JSON: `{"host", "t_ms", "interval_ms", "topology_gpus", "nics": [{"name", "kind", ...,
//! "counters"}], "gpus": {"state": "gpus", "gpus": [...]}}`, with the wire's `rank`, `seq` and `drops`.
//! Recordings of stream version 1 carried a node's NICs with `rdma: true|false`, empty strings for a
//! missing model or note, and `{"Gpus": [...]}` / `{"Unavailable": "..."}`: those still read.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One node's monitor read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeSample {
    /// The node's rank in a many-node monitor; 0 for a monitor of this node alone.
    #[serde(default)]
    pub rank: u32,
    /// Reads this node sent before this one.
    #[serde(default)]
    pub seq: u64,
    pub host: String,
    /// Since the node's monitor started.
    pub t_ms: u64,
    /// Since the node's previous read; `None` for its first (which has no rates).
    pub interval_ms: Option<f64>,
    /// Reads the node's queue dropped because rank 0 was not reading.
    #[serde(default)]
    pub drops: u64,
    /// The GPUs the node's topology names, which its NICs are grouped under; empty when it names none.
    pub topology_gpus: Vec<NodeTopologyGpu>,
    pub nics: Vec<NodeNic>,
    pub gpus: NodeGpus,
}

impl NodeSample {
    /// This read as node `rank` sends it to rank 0: its `seq`-th, after `drops` its queue dropped.
    #[must_use]
    pub fn sent_as(self, rank: u32, seq: u64, drops: u64) -> Self {
        Self { rank, seq, drops, ..self }
    }
}

/// A GPU as the node's topology names it, for group headings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeTopologyGpu {
    pub index: usize,
    pub pci_bus_id: String,
    #[serde(default, deserialize_with = "empty_is_none")]
    pub model: Option<String>,
}

/// Where a NIC's counters come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NicKind {
    /// An RDMA device (`/sys/class/infiniband/<dev>`): EFA, mlx5, ...
    Rdma,
    /// A network interface (`/sys/class/net/<if>`).
    #[default]
    Net,
}

/// One counter of a NIC.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CounterStats {
    pub value: u64,
    /// Change per second since the previous read; `None` on the first read and when it went backwards.
    pub per_s: Option<f64>,
}

/// One NIC of a node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeNic {
    pub name: String,
    #[serde(alias = "rdma", deserialize_with = "kind_or_rdma_flag")]
    pub kind: NicKind,
    /// Known on the node; not sent to rank 0.
    #[serde(default)]
    pub pci_bus_id: Option<String>,
    /// Indices of the GPUs this NIC sits next to (the topology's nearest NICs); empty when none.
    pub gpus: Vec<usize>,
    pub link_gbps: Option<f64>,
    /// False once the device is no longer found; its last values stay.
    pub present: bool,
    /// From `tx_bytes` / `rx_bytes`; `None` without a previous read, or when the device has no such
    /// counter.
    pub tx_gbps: Option<f64>,
    pub rx_gbps: Option<f64>,
    /// Sum of the error and drop counters, as the device reports them.
    pub errors: u64,
    /// How much `errors` grew since the previous read.
    pub errors_delta: u64,
    /// Sum of the retransmit counters.
    pub retransmits: u64,
    pub retransmits_delta: u64,
    /// Counters that went backwards since the previous read (reset or wrapped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub went_backwards: Vec<String>,
    /// Every counter the device has; on the node only (rank 0 gets the sums above).
    #[serde(default)]
    pub counters: BTreeMap<String, CounterStats>,
}

impl NodeNic {
    /// tx + rx, when both are known.
    pub fn total_gbps(&self) -> Option<f64> {
        Some(self.tx_gbps? + self.rx_gbps?)
    }
}

/// A node's GPU panel: the GPUs' figures, or why there are none.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeGpus {
    /// No GPU figures, and why: `no NVIDIA driver (libnvidia-ml.so not found)`.
    Unavailable(String),
    Gpus(Vec<NodeGpu>),
}

impl Default for NodeGpus {
    fn default() -> Self {
        Self::Gpus(Vec::new())
    }
}

/// One GPU's links on a node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeGpu {
    /// NVML's index, which is PCI bus order like the topology's.
    pub index: usize,
    pub name: String,
    pub pci_bus_id: String,
    pub pcie_tx_gbps: Option<f64>,
    pub pcie_rx_gbps: Option<f64>,
    pub nvlink_tx_gbps: Option<f64>,
    pub nvlink_rx_gbps: Option<f64>,
    /// Why a figure is missing, when one is.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "empty_is_none")]
    pub note: Option<String>,
}

/// The panel as JSON: `{"state": "unavailable", "reason": ...}` or `{"state": "gpus", "gpus": [...]}`.
#[derive(Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
enum TaggedGpus<R, T> {
    Unavailable { reason: R },
    Gpus { gpus: T },
}

impl Serialize for NodeGpus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Unavailable(reason) => TaggedGpus::Unavailable { reason: reason.as_str() },
            Self::Gpus(gpus) => TaggedGpus::Gpus { gpus: gpus.as_slice() },
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for NodeGpus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// Stream version 1: serde's default, externally tagged.
        #[derive(Deserialize)]
        enum Version1 {
            Unavailable(String),
            Gpus(Vec<NodeGpu>),
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Tagged(TaggedGpus<String, Vec<NodeGpu>>),
            Version1(Version1),
        }
        Ok(match Either::deserialize(deserializer)? {
            Either::Tagged(TaggedGpus::Unavailable { reason }) | Either::Version1(Version1::Unavailable(reason)) => {
                Self::Unavailable(reason)
            }
            Either::Tagged(TaggedGpus::Gpus { gpus }) | Either::Version1(Version1::Gpus(gpus)) => Self::Gpus(gpus),
        })
    }
}

/// `null`, or text where version 1 wrote `""` for none.
fn empty_is_none<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.filter(|text| !text.is_empty()))
}

/// `"rdma"` / `"net"`, or version 1's `rdma: true|false`.
fn kind_or_rdma_flag<'de, D: Deserializer<'de>>(deserializer: D) -> Result<NicKind, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Kind(NicKind),
        Rdma(bool),
    }
    Ok(match Either::deserialize(deserializer)? {
        Either::Kind(kind) => kind,
        Either::Rdma(true) => NicKind::Rdma,
        Either::Rdma(false) => NicKind::Net,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> NodeSample {
        NodeSample {
            rank: 1,
            seq: 3,
            host: "n1".into(),
            t_ms: 2000,
            interval_ms: Some(1000.0),
            drops: 0,
            topology_gpus: vec![NodeTopologyGpu { index: 0, pci_bus_id: "0000:53:00.0".into(), model: None }],
            nics: vec![NodeNic {
                name: "rdmap79s0".into(),
                kind: NicKind::Rdma,
                gpus: vec![0],
                present: true,
                tx_gbps: Some(1.5),
                errors: 2,
                ..NodeNic::default()
            }],
            gpus: NodeGpus::Gpus(vec![NodeGpu { index: 0, name: "H100".into(), pci_bus_id: "0000:53:00.0".into(), ..NodeGpu::default() }]),
        }
    }

    #[test]
    fn json_is_the_monitors_shape_and_reads_back() {
        let json = serde_json::to_value(sample()).expect("serializes");
        assert_eq!(json["nics"][0]["kind"], "rdma");
        assert_eq!(json["gpus"]["state"], "gpus");
        assert!(json["topology_gpus"][0]["model"].is_null());
        assert!(json["gpus"]["gpus"][0].get("note").is_none());
        assert_eq!(serde_json::from_value::<NodeSample>(json).expect("reads back"), sample());
        let unavailable = NodeSample { gpus: NodeGpus::Unavailable("no NVIDIA driver".into()), ..sample() };
        let json = serde_json::to_value(&unavailable).expect("serializes");
        assert_eq!(json["gpus"], serde_json::json!({"state": "unavailable", "reason": "no NVIDIA driver"}));
        assert_eq!(serde_json::from_value::<NodeSample>(json).expect("reads back"), unavailable);
    }

    /// A node's read as stream version 1 recorded it.
    #[test]
    fn version_1_recordings_still_read() {
        let version_1 = r#"{"rank":1,"seq":3,"t_ms":2000,"interval_ms":1000.0,"drops":0,"host":"n1",
            "topology_gpus":[{"index":0,"pci_bus_id":"0000:53:00.0","model":""}],
            "nics":[{"name":"rdmap79s0","rdma":true,"present":true,"gpus":[0],"link_gbps":null,"tx_gbps":1.5,
              "rx_gbps":null,"errors":2,"errors_delta":0,"retransmits":0,"retransmits_delta":0}],
            "gpus":{"Gpus":[{"index":0,"name":"H100","pci_bus_id":"0000:53:00.0","pcie_tx_gbps":null,
              "pcie_rx_gbps":null,"nvlink_tx_gbps":null,"nvlink_rx_gbps":null,"note":""}]}}"#;
        assert_eq!(serde_json::from_str::<NodeSample>(version_1).expect("reads"), sample());
        let unavailable: NodeGpus = serde_json::from_str(r#"{"Unavailable":"no driver"}"#).expect("reads");
        assert_eq!(unavailable, NodeGpus::Unavailable("no driver".into()));
    }

    /// What `efatop monitor --json` printed before the node's read was one type.
    #[test]
    fn a_monitor_json_line_without_the_wire_fields_reads() {
        let line = r#"{"host":"n1","t_ms":2000,"interval_ms":1000.0,
            "topology_gpus":[{"index":0,"pci_bus_id":"0000:53:00.0","model":null}],
            "nics":[{"name":"rdmap79s0","kind":"rdma","pci_bus_id":null,"gpus":[0],"link_gbps":null,"present":true,
              "tx_gbps":1.5,"rx_gbps":null,"errors":2,"errors_delta":0,"retransmits":0,"retransmits_delta":0,"counters":{}}],
            "gpus":{"state":"gpus","gpus":[{"index":0,"name":"H100","pci_bus_id":"0000:53:00.0","pcie_tx_gbps":null,
              "pcie_rx_gbps":null,"nvlink_tx_gbps":null,"nvlink_rx_gbps":null}]}}"#;
        assert_eq!(serde_json::from_str::<NodeSample>(line).expect("reads"), NodeSample { rank: 0, seq: 0, ..sample() });
    }
}
