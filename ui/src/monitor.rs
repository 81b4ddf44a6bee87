//! `efatop monitor`'s view: every NIC of a node with a gauge of its Gbps against its link, tx and rx,
//! a sparkline of its recent load and its error and retransmit counts (red while they move), grouped
//! under the GPU it sits next to; GPU headings carry the GPU's PCIe and NVLink rates when NVML has them.
//! Keys sort (`s`), filter (`/`), move the selection (↑↓), freeze (`p`) and quit (`q`).
//!
//! [`MonitorView`] is the render-ready state: the binary pushes each [`NodeSample`] into it and feeds it
//! keys; [`draw`] paints it and keeps nothing, so any frame can be drawn at any size from the state.

mod draw;
mod nodes;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};

use efatop_proto::telemetry::{NodeNic, NodeSample};

use crate::state::{Action, Key};

pub use draw::{draw, plain_text, render};
pub use nodes::{NodesView, draw_nodes, render_nodes};

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

/// The monitor's render-ready state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MonitorView {
    /// The latest snapshot; `None` until the first read.
    pub snapshot: Option<NodeSample>,
    pub history: BTreeMap<String, NicHistory>,
    /// Snapshots pushed so far.
    pub samples: u64,
    pub sort: SortKey,
    /// Comma-separated substrings; a NIC is shown when its name, or `gpuN` of a GPU it sits next to,
    /// contains one. Empty: all.
    pub filter: String,
    /// The filter being typed after `/`; `Some` while the prompt is open.
    pub filter_input: Option<String>,
    /// Index into the shown NICs.
    pub selected: usize,
    /// Frozen: snapshots are kept out until `p` again.
    pub paused: bool,
    pub show_help: bool,
}

impl MonitorView {
    pub fn new(filter: &str) -> Self {
        Self { filter: filter.to_string(), ..Self::default() }
    }

    /// Folds in one snapshot (ignored while paused).
    pub fn push(&mut self, snapshot: NodeSample) {
        if self.paused {
            return;
        }
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
        self.snapshot = Some(snapshot);
        self.selected = self.selected.min(self.shown().len().saturating_sub(1));
    }

    /// Whether `moved_at` is recent enough to be drawn red.
    pub fn is_fresh(&self, moved_at: Option<u64>) -> bool {
        moved_at.is_some_and(|at| self.samples.saturating_sub(at) < RED_FOR_SAMPLES)
    }

    /// The NICs that pass the filter, in sort order.
    pub fn shown(&self) -> Vec<&NodeNic> {
        let Some(snapshot) = &self.snapshot else { return Vec::new() };
        let alternatives: Vec<String> =
            self.filter.split(',').map(|part| part.trim().to_ascii_lowercase()).filter(|part| !part.is_empty()).collect();
        let mut nics: Vec<&NodeNic> = snapshot
            .nics
            .iter()
            .filter(|nic| {
                alternatives.is_empty()
                    || alternatives.iter().any(|wanted| {
                        nic.name.to_ascii_lowercase().contains(wanted.as_str())
                            || nic.gpus.iter().any(|gpu| format!("gpu{gpu}") == *wanted)
                    })
            })
            .collect();
        match self.sort {
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

    /// The selected NIC, when any is shown.
    pub fn selected_nic(&self) -> Option<&NodeNic> {
        self.shown().get(self.selected).copied()
    }

    pub fn handle_key(&mut self, key: Key) -> Action {
        if let Some(input) = &mut self.filter_input {
            match key {
                Key::Enter => {
                    self.filter = std::mem::take(input);
                    self.filter_input = None;
                    self.selected = 0;
                }
                Key::Esc => self.filter_input = None,
                Key::Char('\u{8}') => {
                    input.pop();
                }
                Key::Char(c) => input.push(c),
                _ => {}
            }
            return Action::None;
        }
        if self.show_help {
            self.show_help = false;
            return if matches!(key, Key::Char('q')) { Action::Quit } else { Action::None };
        }
        match key {
            Key::Char('q') | Key::Esc => return Action::Quit,
            Key::Char('s') => {
                self.sort = self.sort.next();
                self.selected = 0;
            }
            Key::Char('/') => self.filter_input = Some(self.filter.clone()),
            Key::Char('c') => {
                self.filter.clear();
                self.selected = 0;
            }
            Key::Char('p') => self.paused = !self.paused,
            Key::Char('?') => self.show_help = true,
            Key::Down | Key::Char('j') => self.selected = (self.selected + 1).min(self.shown().len().saturating_sub(1)),
            Key::Up | Key::Char('k') => self.selected = self.selected.saturating_sub(1),
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
