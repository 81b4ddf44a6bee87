//! The many-node monitor's fleet overview: every node's EFA NICs at a glance, in place of the tabs once
//! the job has [`FLEET_MIN_NODES`] nodes or more (a tab line holds a handful of names; past that, finding
//! the slow NIC one node at a time is the problem). Each node's reads feed the fleet model the
//! dashboard's fleet view draws from ([`Fleet`], judging by [`LIVE_RULE`], the rule `sweep` and the rail
//! check use): a NIC's rail is its index among its node's RDMA NICs in the rail check's order
//! ([`fleet_rails`]), its rate tx + rx Gbps (the rail check's load).
//!
//! Keys (the many-node view's, `nodes.rs`, which holds this model): ↑/↓ select a node (worst first),
//! Enter shows its one-node view (every key there is the one-node monitor's; Tab or `]` / Shift-Tab or
//! `[` the next or previous node by rank), Esc comes back, `/` finds a node by name, `q` quits.

mod draw;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use efatop_sweep::rails::fleet_rails;
use efatop_proto::telemetry::NodeSample;

use super::MAX_NODE_NICS;
use crate::state::fleet::{Fleet, LIVE_RULE};
use crate::view::FleetView;

pub(super) use draw::render_fleet;

/// From this many nodes on (expected or reporting) the many-node monitor opens on the fleet overview;
/// below it, one node at a time behind a tab line as before.
pub const FLEET_MIN_NODES: usize = 5;

/// One EFA NIC of the overview: where it is, for the worst list and the strips.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetNic {
    /// Its node's rank.
    pub rank: u32,
    pub name: String,
    /// The first GPU it sits next to, when the node's topology says.
    pub gpu: Option<usize>,
}

/// What the overview keeps of one node: its host in the model and its NICs' indices there, by name.
#[derive(Clone, Debug, Default, PartialEq)]
struct FleetNode {
    host: usize,
    nics: HashMap<String, usize>,
}

/// The fleet model fed with every node's EFA NICs, and the view over it (selected node, `/` search, node
/// drilled into).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeFleet {
    pub model: Fleet,
    /// Hosts are the model's (one per node), `drilled` the node whose one-node view is shown.
    pub view: FleetView,
    nodes: BTreeMap<u32, FleetNode>,
    /// Per NIC of the model.
    nics: Vec<FleetNic>,
    /// Per host of the model: its node's rank.
    ranks: Vec<u32>,
}

impl Default for NodeFleet {
    fn default() -> Self {
        Self { model: Fleet::new(LIVE_RULE), view: FleetView::default(), nodes: BTreeMap::new(), nics: Vec::new(), ranks: Vec::new() }
    }
}

impl NodeFleet {
    /// Folds in node `rank`'s read: each of its RDMA NICs' tx + rx Gbps on its rail (no rate, or gone:
    /// not a number, which the model leaves out). A NIC keeps the rail of its first read. O(the node's
    /// NICs).
    pub fn record(&mut self, rank: u32, snapshot: &NodeSample) {
        let model = &mut self.model;
        let node = self.nodes.entry(rank).or_insert_with(|| {
            self.ranks.push(rank);
            FleetNode { host: model.add_host(&snapshot.host), nics: HashMap::new() }
        });
        let host = node.host;
        for (at, rail) in fleet_rails(snapshot) {
            let nic = &snapshot.nics[at];
            let gpu = nic.gpus.first().copied();
            // A node keeps at most MAX_NODE_NICS NICs in the model: names past those are left out.
            let index = match node.nics.get(&nic.name) {
                Some(index) => *index,
                None if node.nics.len() >= MAX_NODE_NICS => continue,
                None => {
                    self.nics.push(FleetNic { rank, name: nic.name.clone(), gpu });
                    let index = model.add_nic(host, rail);
                    node.nics.insert(nic.name.clone(), index);
                    index
                }
            };
            if let Some(known) = self.nics.get_mut(index) {
                known.gpu = gpu;
            }
            let gbps = if nic.present { nic.total_gbps().unwrap_or(f64::NAN) } else { f64::NAN };
            model.record(index, gbps);
        }
    }

    /// How many NICs node `rank` has in the model.
    pub fn nics_of(&self, rank: u32) -> usize {
        self.nodes.get(&rank).map_or(0, |node| node.nics.len())
    }

    /// Names the nodes as the view does (`host`, or `host#rank` where hosts repeat).
    pub fn relabel<'a>(&mut self, labels: impl IntoIterator<Item = (u32, &'a str)>) {
        for (rank, label) in labels {
            if let Some(node) = self.nodes.get(&rank) {
                self.model.rename_host(node.host, label);
            }
        }
    }

    /// The model's summaries as of `now` (the flags' clocks move on even without new reads).
    pub fn refresh(&mut self, now: Duration) {
        self.model.refresh(now);
    }

    /// NIC `at` of the model.
    pub fn nic(&self, at: usize) -> Option<&FleetNic> {
        self.nics.get(at)
    }

    /// The rank of host `host` of the model.
    pub fn rank_of(&self, host: usize) -> Option<u32> {
        self.ranks.get(host).copied()
    }

    /// The host of the model that is node `rank`.
    pub fn host_of(&self, rank: u32) -> Option<usize> {
        self.nodes.get(&rank).map(|node| node.host)
    }

    /// The selected host: the one chosen, else the worst now.
    pub fn selected(&self) -> Option<usize> {
        self.view.selected.or_else(|| self.model.order().first().map(|&host| host as usize))
    }

    /// Moves the selection one host down (towards the better ones) or up.
    pub(super) fn step(&mut self, down: bool) {
        let order = self.model.order();
        let at = self.selected().and_then(|host| self.model.position_of(host)).unwrap_or(0);
        let to = if down { (at + 1).min(order.len().saturating_sub(1)) } else { at.saturating_sub(1) };
        if let Some(&host) = order.get(to) {
            self.view.selected = Some(host as usize);
        }
    }
}
