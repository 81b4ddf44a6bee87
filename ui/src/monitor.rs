//! `efatop monitor`'s view: every NIC of a node with a gauge of its Gbps against its link, tx and rx,
//! a sparkline of its recent load and its error and retransmit counts (red while they move), grouped
//! under the GPU it sits next to; GPU headings carry the GPU's PCIe and NVLink rates when NVML has them.
//! Keys sort (`s`), filter (`/`), move the selection (↑↓), freeze (`p`) and quit (`q`).
//!
//! [`MonitorView`] is the render-ready state: the binary pushes each [`NodeSample`] into its reads
//! ([`NodeReads`]) and feeds keys to its view ([`NodeView`]); [`draw`] paints it and keeps nothing, so any
//! frame can be drawn at any size from the state.
//!
//! Many nodes ([`NodesView`]): up to a handful one at a time behind tabs, more as a fleet overview of
//! every node's EFA NICs on the dashboard's fleet model ([`fleet`]).

mod draw;
pub mod fleet;
mod nodes;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};

use efatop_proto::telemetry::{NodeNic, NodeSample};

use crate::state::{Action, Key};

pub use draw::{draw, plain_text, render};
pub use nodes::{NodesView, draw_nodes, render_nodes};

/// The most NICs one node's read may name (a p5 has 32 EFA NICs and a few others; the largest instances
/// fewer than 64): a read naming more is refused, and a node keeps at most this many in the fleet model.
pub const MAX_NODE_NICS: usize = 256;

/// Samples of history kept per NIC (the widest sparkline).
pub const HISTORY_LEN: usize = 120;
/// A counter that moved within this many samples is drawn red.
pub const RED_FOR_SAMPLES: u64 = 3;

/// How NICs are ordered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortKey {
    /// Under the GPU they sit next to, in PCI order; NICs next to no GPU last.
    #[default]
    Gpu,
    /// Busiest first (the larger of tx and rx).
    Rate,
    /// Most errors and retransmits first.
    Errors,
    /// By name, numbers in names compared as numbers (`rdmap96s0` before `rdmap113s0`).
    Name,
}

impl SortKey {
    pub fn label(self) -> &'static str {
        match self {
            SortKey::Gpu => "GPU",
            SortKey::Rate => "rate",
            SortKey::Errors => "errors",
            SortKey::Name => "name",
        }
    }

    fn next(self) -> Self {
        match self {
            SortKey::Gpu => SortKey::Rate,
            SortKey::Rate => SortKey::Errors,
            SortKey::Errors => SortKey::Name,
            SortKey::Name => SortKey::Gpu,
        }
    }
}

/// What the view remembers of one NIC across snapshots.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NicHistory {
    /// The larger of tx and rx Gbps per sample, oldest first; unknown rates are left out.
    pub load: VecDeque<f64>,
    /// The sample number at which errors / retransmits last grew.
    pub errors_moved_at: Option<u64>,
    pub retransmits_moved_at: Option<u64>,
}

/// What was read of one node: only reads change it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeReads {
    /// The latest snapshot; `None` until the first read.
    pub snapshot: Option<NodeSample>,
    pub history: BTreeMap<String, NicHistory>,
    /// Snapshots pushed so far.
    pub samples: u64,
}

impl NodeReads {
    /// Folds in one snapshot.
    pub fn push(&mut self, snapshot: NodeSample) {
        self.samples += 1;
        for nic in &snapshot.nics {
            let history = self.history.entry(nic.name.clone()).or_default();
            if let Some(load) = load(nic) {
                if history.load.len() == HISTORY_LEN {
                    history.load.pop_front();
                }
                history.load.push_back(load);
            }
            if nic.errors_delta > 0 {
                history.errors_moved_at = Some(self.samples);
            }
            if nic.retransmits_delta > 0 {
                history.retransmits_moved_at = Some(self.samples);
            }
        }
        // A NIC that is gone stays in its node's reads (marked absent); names no read holds any more are
        // let go once they pile up, so that reads naming new NICs again and again hold no more than this.
        if self.history.len() > 2 * MAX_NODE_NICS {
            self.history.retain(|name, _| snapshot.nics.iter().any(|nic| &nic.name == name));
        }
        self.snapshot = Some(snapshot);
    }

    /// Whether `moved_at` is recent enough to be drawn red.
    pub fn is_fresh(&self, moved_at: Option<u64>) -> bool {
        moved_at.is_some_and(|at| self.samples.saturating_sub(at) < RED_FOR_SAMPLES)
    }
}

/// What the user looks at: only keys change it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeView {
    pub sort: SortKey,
    /// Comma-separated substrings; a NIC is shown when its name, or `gpuN` of a GPU it sits next to,
    /// contains one. Empty: all.
    pub filter: String,
    /// The filter being typed after `/`; `Some` while the prompt is open.
    pub filter_input: Option<String>,
    /// Index into the shown NICs (read through [`MonitorView::selected`], which keeps it on one).
    pub selected: usize,
    /// `p`: a copy of the reads stays on screen while the live reads go on.
    pub paused: bool,
    pub show_help: bool,
}

/// The monitor's render-ready state: the node's reads and the view over them, kept apart (bottom's
/// `FrozenState`): reads change the reads, keys the view, and `p` freezes a copy of the reads only.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MonitorView {
    /// The reads as they come.
    pub reads: NodeReads,
    /// `p`: the reads as they stood when paused, drawn instead of the live ones.
    pub frozen: Option<Box<NodeReads>>,
    pub view: NodeView,
}

impl MonitorView {
    pub fn new(filter: &str) -> Self {
        Self { view: NodeView { filter: filter.to_string(), ..NodeView::default() }, ..Self::default() }
    }

    /// Folds in one snapshot (into the live reads; a paused view keeps drawing its copy).
    pub fn push(&mut self, snapshot: NodeSample) {
        self.reads.push(snapshot);
    }

    /// The reads drawn: the copy frozen by `p`, else the live ones.
    pub fn drawn(&self) -> &NodeReads {
        self.frozen.as_deref().unwrap_or(&self.reads)
    }

    /// The latest snapshot drawn; `None` until the first read.
    pub fn snapshot(&self) -> Option<&NodeSample> {
        self.drawn().snapshot.as_ref()
    }

    /// What the view remembers of `nic`, as drawn.
    pub fn history(&self, nic: &str) -> Option<&NicHistory> {
        self.drawn().history.get(nic)
    }

    /// Whether `moved_at` is recent enough to be drawn red.
    pub fn is_fresh(&self, moved_at: Option<u64>) -> bool {
        self.drawn().is_fresh(moved_at)
    }

    /// Whether `nic` passes the filter: its name contains one of the filter's comma-separated words, or a
    /// word is `gpuN` and the NIC sits next to GPU N. An empty filter passes every NIC.
    pub fn passes(&self, nic: &NodeNic) -> bool {
        let mut alternatives = self.view.filter.split(',').map(|part| part.trim().to_ascii_lowercase()).filter(|part| !part.is_empty()).peekable();
        alternatives.peek().is_none()
            || alternatives.any(|wanted| {
                nic.name.to_ascii_lowercase().contains(wanted.as_str()) || nic.gpus.iter().any(|gpu| format!("gpu{gpu}") == wanted)
            })
    }

    /// The NICs that pass the filter, in sort order.
    pub fn shown(&self) -> Vec<&NodeNic> {
        let Some(snapshot) = self.snapshot() else { return Vec::new() };
        let view = &self.view;
        let mut nics: Vec<&NodeNic> = snapshot.nics.iter().filter(|nic| self.passes(nic)).collect();
        match view.sort {
            SortKey::Gpu => nics.sort_by(|a, b| {
                let group = |nic: &NodeNic| nic.gpus.first().copied().unwrap_or(usize::MAX);
                group(a).cmp(&group(b)).then_with(|| natural_cmp(&a.name, &b.name))
            }),
            SortKey::Rate => nics.sort_by(|a, b| {
                let busy = |nic: &NodeNic| load(nic).unwrap_or(-1.0);
                busy(b).total_cmp(&busy(a)).then_with(|| natural_cmp(&a.name, &b.name))
            }),
            SortKey::Errors => nics.sort_by(|a, b| {
                let bad = |nic: &NodeNic| nic.errors.saturating_add(nic.retransmits);
                bad(b).cmp(&bad(a)).then_with(|| natural_cmp(&a.name, &b.name))
            }),
            SortKey::Name => nics.sort_by(|a, b| natural_cmp(&a.name, &b.name)),
        }
        nics
    }

    /// The selected index into the shown NICs, kept on the last when fewer are shown than it says.
    pub fn selected(&self) -> usize {
        self.view.selected.min(self.shown().len().saturating_sub(1))
    }

    /// The selected NIC, when any is shown.
    pub fn selected_nic(&self) -> Option<&NodeNic> {
        self.shown().get(self.selected()).copied()
    }

    /// Applies `key` to the view (and, for `p`, freezes a copy of the reads or lets it go).
    pub fn handle_key(&mut self, key: Key) -> Action {
        let selected = self.selected();
        let shown = self.shown().len();
        let view = &mut self.view;
        if let Some(input) = &mut view.filter_input {
            match key {
                Key::Enter => {
                    view.filter = std::mem::take(input);
                    view.filter_input = None;
                    view.selected = 0;
                }
                Key::Esc => view.filter_input = None,
                Key::Char('\u{8}') => {
                    input.pop();
                }
                Key::Char(c) => input.push(c),
                _ => {}
            }
            return Action::None;
        }
        if view.show_help {
            view.show_help = false;
            return if matches!(key, Key::Char('q')) { Action::Quit } else { Action::None };
        }
        match key {
            Key::Char('q') | Key::Esc => return Action::Quit,
            Key::Char('s') => {
                view.sort = view.sort.next();
                view.selected = 0;
            }
            Key::Char('/') => view.filter_input = Some(view.filter.clone()),
            Key::Char('c') => {
                view.filter.clear();
                view.selected = 0;
            }
            Key::Char('p') => {
                view.paused = !view.paused;
                self.frozen = view.paused.then(|| Box::new(self.reads.clone()));
            }
            Key::Char('?') => view.show_help = true,
            Key::Down | Key::Char('j') => view.selected = (selected + 1).min(shown.saturating_sub(1)),
            Key::Up | Key::Char('k') => view.selected = selected.saturating_sub(1),
            _ => {}
        }
        Action::None
    }
}

/// The larger of a NIC's tx and rx, which is what fills its link (each direction has the whole link).
pub fn load(nic: &NodeNic) -> Option<f64> {
    match (nic.tx_gbps, nic.rx_gbps) {
        (Some(tx), Some(rx)) => Some(tx.max(rx)),
        (one, other) => one.or(other),
    }
}

/// Compares names with their digit runs as numbers: `rdmap96s0` < `rdmap113s0`.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn split(text: &str) -> Vec<(bool, &str)> {
        let mut parts = Vec::new();
        let mut start = 0;
        let bytes = text.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                parts.push((bytes[start].is_ascii_digit(), &text[start..i]));
                start = i;
            }
        }
        parts
    }
    let (left, right) = (split(a), split(b));
    for (l, r) in left.iter().zip(&right) {
        let order = match (l, r) {
            ((true, l), (true, r)) => {
                let (l, r) = (l.trim_start_matches('0'), r.trim_start_matches('0'));
                l.len().cmp(&r.len()).then_with(|| l.cmp(r))
            }
            ((_, l), (_, r)) => l.cmp(r),
        };
        if order.is_ne() {
            return order;
        }
    }
    left.len().cmp(&right.len())
}
