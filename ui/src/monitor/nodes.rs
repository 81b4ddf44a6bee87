//! Several nodes' monitors in one view (`efatop monitor` under mpirun, one rank per node). Up to a handful
//! of nodes: one node's panel at a time under a line naming every node; Tab / `]` shows the next node,
//! Shift-Tab / `[` the previous one, and every other key goes to the node shown. From
//! [`FLEET_MIN_NODES`](super::fleet::FLEET_MIN_NODES) nodes on: the fleet overview of every node's EFA
//! NICs ([`super::fleet`]), Enter showing one node's panel under a line naming it.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use efatop_proto::telemetry::NodeSample;
use ratatui::Frame;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::fleet::{self, NodeFleet};
use super::{MAX_NODE_NICS, MonitorView, render};
use crate::state::{Action, Key};

/// Every node's view, by rank.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodesView {
    filter: String,
    /// The nodes expected (the job's ranks), so the tab line can say how many have not reported yet.
    pub expected: usize,
    pub nodes: BTreeMap<u32, MonitorView>,
    /// Index into `nodes`, in rank order (the tabs).
    pub selected: usize,
    /// Every node's EFA NICs in the fleet model, and the overview's selection, search and drill-down.
    pub fleet: NodeFleet,
    /// Reads refused: from a rank outside the job's `expected`, or naming more than [`MAX_NODE_NICS`] NICs.
    pub refused: u64,
    /// The ranks on each host, so that a node's first read renames only the nodes sharing its host (every
    /// node's label again, for each of a fleet's 4096 first reads, took seconds).
    ranks_by_host: HashMap<String, Vec<u32>>,
}

impl NodesView {
    pub fn new(filter: &str, expected: usize) -> Self {
        Self { filter: filter.to_string(), expected, ..Self::default() }
    }

    /// Folds in one snapshot of the node that is rank `rank` (into its view and the fleet model); false
    /// (and counted in `refused`) for a rank outside the job's `expected` ranks or a read naming more than
    /// [`MAX_NODE_NICS`] NICs, which changes nothing: no read can add a node or grow one past the bound.
    pub fn push(&mut self, rank: u32, snapshot: NodeSample) -> bool {
        if !usize::try_from(rank).is_ok_and(|rank| rank < self.expected) || snapshot.nics.len() > MAX_NODE_NICS {
            self.refused = self.refused.saturating_add(1);
            return false;
        }
        // A node's first read (or a new host name) renames the nodes that share its host, old and new.
        let last = self.nodes.get(&rank).and_then(MonitorView::snapshot).map(|last| last.host.as_str());
        let renamed = (last != Some(snapshot.host.as_str())).then(|| (last.map(str::to_string), snapshot.host.clone()));
        self.fleet.record(rank, &snapshot);
        let filter = &self.filter;
        self.nodes.entry(rank).or_insert_with(|| MonitorView::new(filter)).push(snapshot);
        if let Some((was, host)) = renamed {
            if let Some(ranks) = was.as_ref().and_then(|was| self.ranks_by_host.get_mut(was)) {
                ranks.retain(|&other| other != rank);
            }
            self.ranks_by_host.entry(host.clone()).or_default().push(rank);
            for name in was.iter().chain([&host]) {
                let labels: Vec<(u32, String)> =
                    self.ranks_by_host.get(name).into_iter().flatten().map(|&rank| (rank, self.label(name, rank))).collect();
                self.fleet.relabel(labels.iter().map(|(rank, label)| (*rank, label.as_str())));
            }
        }
        true
    }

    /// Brings the fleet overview's summaries up to date as of `now` (once a frame).
    pub fn refresh(&mut self, now: Duration) {
        self.fleet.refresh(now);
    }

    /// Whether the fleet overview is drawn rather than tabs (see [`fleet::FLEET_MIN_NODES`]).
    pub fn shows_fleet(&self) -> bool {
        fleet_applies(self)
    }

    /// The node whose panel is shown: the selected tab, or the node drilled into from the overview
    /// (`None` while the overview itself is shown).
    pub fn shown(&self) -> Option<&MonitorView> {
        if self.shows_fleet() {
            let rank = self.fleet.view.drilled.and_then(|host| self.fleet.rank_of(host))?;
            return self.nodes.get(&rank);
        }
        self.nodes.values().nth(self.selected)
    }

    /// Each node's name on the tab line: its host, with its rank where hosts repeat (several ranks on one
    /// machine, as when testing on one).
    pub fn labels(&self) -> Vec<String> {
        self.nodes.iter().map(|(&rank, view)| self.label(view.snapshot().map_or("?", |s| s.host.as_str()), rank)).collect()
    }

    /// Node `rank`'s name on `host`: the host, with the rank where several nodes share it.
    fn label(&self, host: &str, rank: u32) -> String {
        if self.ranks_by_host.get(host).is_some_and(|ranks| ranks.len() > 1) { format!("{host}#{rank}") } else { host.to_string() }
    }

    pub fn handle_key(&mut self, key: Key) -> Action {
        if self.shows_fleet() {
            return fleet_key(self, key);
        }
        let typing = self.shown().is_some_and(|view| view.view.filter_input.is_some());
        let count = self.nodes.len().max(1);
        match key {
            Key::Tab | Key::Char(']') if !typing => self.selected = (self.selected + 1) % count,
            Key::BackTab | Key::Char('[') if !typing => self.selected = (self.selected + count - 1) % count,
            _ => {
                let selected = self.selected;
                return self.nodes.values_mut().nth(selected).map_or_else(
                    || if matches!(key, Key::Char('q') | Key::Esc) { Action::Quit } else { Action::None },
                    |view| view.handle_key(key),
                );
            }
        }
        Action::None
    }
}

pub fn draw_nodes(frame: &mut Frame, view: &NodesView) {
    let area = frame.area();
    render_nodes(view, area, frame.buffer_mut());
}

/// The tab line, then the shown node's view below it; from a handful of nodes on, the fleet overview, or
/// the node drilled into from it under a line naming it.
pub fn render_nodes(view: &NodesView, area: Rect, buf: &mut Buffer) {
    if area.is_empty() {
        return;
    }
    if view.shows_fleet() {
        match view.shown() {
            Some(shown) => {
                drilled_line(view, Rect { height: 1, ..area }, buf);
                render(shown, Rect { y: area.y + 1, height: area.height - 1, ..area }, buf);
            }
            None => fleet::render_fleet(view, area, buf),
        }
        return;
    }
    let mut spans = vec![Span::raw(" nodes ")];
    for (index, label) in view.labels().into_iter().enumerate() {
        let style = if index == view.selected {
            Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD)
        } else {
            Style::new()
        };
        spans.push(Span::styled(format!(" {label} "), style));
    }
    let missing = view.expected.saturating_sub(view.nodes.len());
    if missing > 0 {
        spans.push(Span::styled(format!("  waiting for {missing} of {}", view.expected), Style::new().fg(Color::Yellow)));
    }
    if view.refused > 0 {
        spans.push(Span::styled(format!("  refused {}", view.refused), Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)));
    }
    spans.push(Span::styled("  Tab/[ ] switch node", Style::new().fg(Color::DarkGray)));
    Line::from(spans).render(Rect { height: 1, ..area }, buf);
    let rest = Rect { y: area.y + 1, height: area.height - 1, ..area };
    if let Some(shown) = view.shown() {
        render(shown, rest, buf);
    }
}

/// Above a node drilled into from the overview: which node of how many, where it stands, the way back.
fn drilled_line(view: &NodesView, area: Rect, buf: &mut Buffer) {
    let fleet = &view.fleet;
    let host = fleet.view.drilled;
    let name = host.and_then(|host| fleet.model.hosts().get(host)).map_or("?", |strip| strip.name.as_str());
    let rank = host.and_then(|host| fleet.rank_of(host)).map_or(String::new(), |rank| format!(" (rank {rank})"));
    let place = host.and_then(|host| fleet.model.position_of(host)).map_or(String::new(), |at| format!("  {} of {} worst first", at + 1, fleet.model.hosts().len()));
    let key = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
    let dim = Style::new().fg(Color::DarkGray);
    Line::from(vec![
        Span::raw(" node "),
        Span::styled(format!(" {name} "), Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD)),
        Span::raw(rank),
        Span::styled(place, dim),
        Span::styled("  Esc", key),
        Span::styled(" fleet", dim),
        Span::styled("  Tab/[ ]", key),
        Span::styled(" next node by rank", dim),
    ])
    .render(area, buf);
}

/// Whether `view` draws the fleet overview rather than tabs: the job has [`fleet::FLEET_MIN_NODES`] nodes or
/// more.
fn fleet_applies(view: &NodesView) -> bool {
    view.expected.max(view.nodes.len()) >= fleet::FLEET_MIN_NODES
}

/// A key in the fleet overview (or in a node drilled into from it).
fn fleet_key(view: &mut NodesView, key: Key) -> Action {
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
                return fleet_key(view, key);
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

#[cfg(test)]
mod tests {
    use super::*;
    use efatop_proto::telemetry::{NicKind, NodeGpus, NodeNic};

    fn snapshot(host: &str, nic: &str) -> NodeSample {
        NodeSample {
            rank: 0,
            seq: 0,
            drops: 0,
            host: host.into(),
            t_ms: 0,
            interval_ms: Some(1000.0),
            topology_gpus: Vec::new(),
            nics: vec![NodeNic {
                name: nic.into(),
                kind: NicKind::Rdma,
                pci_bus_id: None,
                gpus: Vec::new(),
                link_gbps: Some(100.0),
                present: true,
                tx_gbps: Some(10.0),
                rx_gbps: Some(0.0),
                errors: 0,
                errors_delta: 0,
                retransmits: 0,
                retransmits_delta: 0,
                went_backwards: Vec::new(),
                counters: BTreeMap::new(),
            }],
            gpus: NodeGpus::Unavailable("none".into()),
        }
    }

    fn screen(view: &NodesView, width: u16, height: u16) -> String {
        crate::screen::rendered(width, height, |area, buf| render_nodes(view, area, buf))
    }

    #[test]
    fn monitor_nodes_switch_with_tab_and_brackets_and_show_one_node_at_a_time() {
        let mut view = NodesView::new("", 3);
        view.push(1, snapshot("b", "efa-b"));
        view.push(0, snapshot("a", "efa-a"));
        let first = screen(&view, 120, 12);
        assert!(first.contains(" a  b "), "{first}");
        assert!(first.contains("waiting for 1 of 3"), "{first}");
        assert!(first.contains("efa-a") && !first.contains("efa-b"), "{first}");
        assert_eq!(view.handle_key(Key::Tab), Action::None);
        let second = screen(&view, 120, 12);
        assert!(second.contains("efa-b") && !second.contains("efa-a"), "{second}");
        view.handle_key(Key::Char(']'));
        assert_eq!(view.selected, 0, "wraps around");
        view.handle_key(Key::Char('['));
        assert_eq!(view.selected, 1);
        // While the filter prompt is open, brackets are typed, not switching.
        view.handle_key(Key::Char('/'));
        view.handle_key(Key::Char('['));
        assert_eq!(view.selected, 1);
        assert_eq!(view.shown().and_then(|v| v.view.filter_input.clone()).as_deref(), Some("["));
        view.handle_key(Key::Esc);
        assert_eq!(view.handle_key(Key::Char('q')), Action::Quit);
    }

    #[test]
    fn monitor_nodes_on_one_host_are_told_apart_by_rank_and_tiny_areas_do_not_panic() {
        let mut view = NodesView::new("", 2);
        view.push(0, snapshot("h", "x"));
        view.push(1, snapshot("h", "y"));
        assert_eq!(view.labels(), ["h#0", "h#1"]);
        // The fleet model's names follow each first read (and a host renamed), node by node.
        let names = |view: &NodesView| view.fleet.model.hosts().iter().map(|host| host.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&view), ["h#0", "h#1"]);
        view.push(1, snapshot("g", "y"));
        assert_eq!((view.labels(), names(&view)), (vec!["h".to_string(), "g".into()], vec!["h".to_string(), "g".into()]));
        view.push(1, snapshot("h", "y"));
        for (width, height) in [(0, 0), (1, 1), (5, 2), (30, 3)] {
            screen(&view, width, height);
        }
        let mut empty = NodesView::new("", 2);
        assert!(screen(&empty, 60, 3).contains("waiting for 2 of 2"));
        assert_eq!(empty.handle_key(Key::Tab), Action::None);
        assert_eq!(empty.handle_key(Key::Char('q')), Action::Quit);
    }

    /// A read from a rank outside the job, or naming more NICs than a node has, adds no node and grows
    /// nothing; it is counted and shown. A node naming new NICs read after read keeps a bounded history.
    #[test]
    fn reads_outside_the_job_are_refused_counted_and_grow_nothing() {
        let mut view = NodesView::new("", 2);
        assert!(view.push(0, snapshot("a", "efa0")));
        for rank in [2, 7, u32::MAX] {
            assert!(!view.push(rank, snapshot("evil", "efa0")), "{rank}");
        }
        let mut wide = snapshot("a", "efa0");
        wide.nics = (0..=MAX_NODE_NICS).map(|n| NodeNic { name: format!("efa{n}"), ..wide.nics[0].clone() }).collect();
        assert!(!view.push(1, wide));
        assert_eq!(view.refused, 4);
        assert_eq!(view.nodes.keys().copied().collect::<Vec<_>>(), [0]);
        assert_eq!(view.fleet.model.hosts().len(), 1);
        assert!(screen(&view, 120, 12).contains("refused 4"));
        // New names read after read: the fleet keeps at most MAX_NODE_NICS of the node's, its history too.
        for n in 0..MAX_NODE_NICS * 3 {
            assert!(view.push(0, snapshot("a", &format!("efa-new-{n}"))));
        }
        let node = &view.nodes[&0];
        assert!(node.reads.history.len() <= 2 * MAX_NODE_NICS, "{}", node.reads.history.len());
        assert!(view.fleet.nics_of(0) <= MAX_NODE_NICS, "{}", view.fleet.nics_of(0));
    }
}
