//! The many-node monitor's fleet overview: every node's EFA NICs at a glance, in place of the tabs once
//! the job has [`FLEET_MIN_NODES`] nodes or more (a tab line holds a handful of names; past that, finding
//! the slow NIC one node at a time is the problem). Each node's reads feed the fleet model the
//! dashboard's fleet view draws from ([`Fleet`], judging by [`LIVE_RULE`], the rule `sweep` and the rail
//! check use): a NIC's rail is its index among its node's RDMA NICs in the rail check's order
//! ([`fleet_rails`]), its rate tx + rx Gbps (the rail check's load).
//!
//! Keys: ↑/↓ select a node (worst first), Enter shows its one-node view (every key there is the one-node
//! monitor's; Tab or `]` / Shift-Tab or `[` the next or previous node by rank), Esc comes back, `/` finds
//! a node by name, `q` quits.

mod draw;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use efatop_proto::telemetry::rails::fleet_rails;
use efatop_proto::telemetry::NodeSample;

use super::nodes::MAX_NODE_NICS;
use super::NodesView;
use crate::state::fleet::{Fleet, LIVE_RULE};
use crate::state::{Action, Key};
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
    fn step(&mut self, down: bool) {
        let order = self.model.order();
        let at = self.selected().and_then(|host| self.model.position_of(host)).unwrap_or(0);
        let to = if down { (at + 1).min(order.len().saturating_sub(1)) } else { at.saturating_sub(1) };
        if let Some(&host) = order.get(to) {
            self.view.selected = Some(host as usize);
        }
    }
}

/// Whether `view` draws the fleet overview rather than tabs: the job has [`FLEET_MIN_NODES`] nodes or
/// more.
pub(super) fn applies(view: &NodesView) -> bool {
    view.expected.max(view.nodes.len()) >= FLEET_MIN_NODES
}

/// A key in the overview (or in a node drilled into from it).
pub(super) fn handle_key(view: &mut NodesView, key: Key) -> Action {
    let fleet = &mut view.fleet;
    if let Some(query) = &mut fleet.view.search {
        match key {
            Key::Esc | Key::Enter => fleet.view.search = None,
            Key::Char('\u{8}') => {
                query.pop();
            }
            Key::Char(c) => query.push(c),
            // Any other key ends the search and does what it does.
            _ => {
                fleet.view.search = None;
                return handle_key(view, key);
            }
        }
        if let Some(query) = &fleet.view.search {
            if let Some(host) = fleet.model.find_host(query) {
                fleet.view.selected = Some(host);
            }
        }
        return Action::None;
    }
    if let Some(host) = fleet.view.drilled {
        let Some(rank) = fleet.rank_of(host).filter(|rank| view.nodes.contains_key(rank)) else {
            fleet.view.drilled = None;
            return Action::None;
        };
        // The node's own prompt and help take their keys first.
        let busy = view.nodes.get(&rank).is_some_and(|node| node.view.filter_input.is_some() || node.view.show_help);
        if !busy {
            let to = match key {
                Key::Esc => {
                    fleet.view.drilled = None;
                    fleet.view.selected = Some(host);
                    return Action::None;
                }
                Key::Tab | Key::Char(']') => Some(next_rank(view, rank, true)),
                Key::BackTab | Key::Char('[') => Some(next_rank(view, rank, false)),
                _ => None,
            };
            if let Some(to) = to {
                let fleet = &mut view.fleet;
                fleet.view.drilled = fleet.host_of(to).or(Some(host));
                return Action::None;
            }
        }
        return view.nodes.get_mut(&rank).map_or(Action::None, |node| node.handle_key(key));
    }
    match key {
        Key::Char('q') => return Action::Quit,
        Key::Char('/') => fleet.view.search = Some(String::new()),
        Key::Down | Key::Char('j') => fleet.step(true),
        Key::Up | Key::Char('k') => fleet.step(false),
        Key::Enter => {
            if let Some(host) = fleet.selected().filter(|&host| fleet.rank_of(host).is_some_and(|rank| view.nodes.contains_key(&rank))) {
                fleet.view.selected = Some(host);
                fleet.view.drilled = Some(host);
            }
        }
        _ => {}
    }
    Action::None
}

/// The node after (or before) `rank`, by rank, wrapping around.
fn next_rank(view: &NodesView, rank: u32, forward: bool) -> u32 {
    let nodes = &view.nodes;
    let found = if forward {
        nodes.range(rank.saturating_add(1)..).next().or_else(|| nodes.iter().next())
    } else {
        nodes.range(..rank).next_back().or_else(|| nodes.iter().next_back())
    };
    found.map_or(rank, |(&rank, _)| rank)
}
