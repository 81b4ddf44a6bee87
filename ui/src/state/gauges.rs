//! What the gauges panel reads every frame, kept up to date as samples arrive, so that a frame costs
//! O(rows on screen) rather than O(channels × history): the host headings and their channels in display
//! order, the widths of the row's columns, and the highest rate in any channel's history (the bars' scale
//! when the link speed is unknown).
//!
//! [`Ingest`](crate::ingest::Ingest) builds it with the views and records each channel's interval into
//! it. A state put together some other way (tests, screenshots) has none that matches its views; the
//! gauges then build one for the frame, at the old cost.

use std::collections::{HashMap, VecDeque};

use super::{ChannelView, DashboardState};

/// One row of the gauges panel, in display order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GaugeRow {
    /// A host heading: index into [`GaugeIndex::hosts`].
    Host(usize),
    /// A channel: index into [`DashboardState::channels`].
    Channel(usize),
}

/// A host heading: its name and the ranks grouped under it, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostGroup {
    pub name: String,
    pub ranks: Vec<usize>,
}

/// The highest rate in each channel's history and its latest rate, and the highest of those.
#[derive(Clone, Debug, Default, PartialEq)]
struct PeakTracker {
    /// Per channel: `(sequence, rate)` of the history points that may still become its highest, rates
    /// falling front to back (a sliding-window maximum); the front is the history's highest.
    windows: Vec<VecDeque<(u64, f64)>>,
    /// Per channel: the sequence numbers of its history's oldest point and of the next point.
    first: Vec<u64>,
    next: Vec<u64>,
    /// Per channel: its latest rate (counted like a history point).
    current: Vec<f64>,
    /// Max-tree over the channels' highest rates: leaves at `leaves + channel`, the root at 1.
    tree: Vec<f64>,
    leaves: usize,
}

impl PeakTracker {
    fn new(channels: usize) -> Self {
        let leaves = channels.next_power_of_two();
        Self {
            windows: vec![VecDeque::new(); channels],
            first: vec![0; channels],
            next: vec![0; channels],
            current: vec![f64::NEG_INFINITY; channels],
            tree: vec![f64::NEG_INFINITY; 2 * leaves],
            leaves,
        }
    }

    fn push(&mut self, channel: usize, gbps: f64) {
        let window = &mut self.windows[channel];
        let sequence = self.next[channel];
        self.next[channel] += 1;
        // A rate that is not finite is never drawn against.
        if gbps.is_finite() {
            while window.back().is_some_and(|&(_, kept)| kept <= gbps) {
                window.pop_back();
            }
            window.push_back((sequence, gbps));
        }
    }

    fn pop_oldest(&mut self, channel: usize) {
        self.first[channel] += 1;
        let first = self.first[channel];
        let window = &mut self.windows[channel];
        while window.front().is_some_and(|&(sequence, _)| sequence < first) {
            window.pop_front();
        }
    }

    /// Puts the channel's highest (history and latest rate) into the tree.
    fn refresh(&mut self, channel: usize) {
        let highest = self.windows[channel].front().map_or(f64::NEG_INFINITY, |&(_, gbps)| gbps);
        let current = self.current[channel];
        let mut node = self.leaves + channel;
        self.tree[node] = if current.is_finite() { highest.max(current) } else { highest };
        while node > 1 {
            node /= 2;
            let highest = self.tree[2 * node].max(self.tree[2 * node + 1]);
            // Nodes above depend on this one alone: once it stays, they do (most samples stop here).
            if self.tree[node].to_bits() == highest.to_bits() {
                break;
            }
            self.tree[node] = highest;
        }
    }

    /// The highest finite rate of all histories and latest rates, at least 0.
    fn peak(&self) -> f64 {
        self.tree.get(1).copied().unwrap_or(f64::NEG_INFINITY).max(0.0)
    }
}

/// Digits of `value` in decimal.
fn digits(value: u64) -> usize {
    value.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// The gauges panel's rows, column widths and scale, for a state's channel views (see the module).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GaugeIndex {
    /// How many channel views the index was built for; `None` before it is built.
    built_for: Option<usize>,
    pub(crate) hosts: Vec<HostGroup>,
    pub(crate) rows: Vec<GaugeRow>,
    /// Per channel view, its row.
    row_of: Vec<usize>,
    /// The views are ordered by rank then channel, so a (rank, channel) is found by binary search.
    sorted: bool,
    /// Widest `r<rank> c<channel>` and NIC name.
    pub(crate) id_width: usize,
    pub(crate) nic_width: usize,
    /// Channels whose operations in flight have `n` digits, at index `n`.
    in_flight_digits: [usize; 21],
    peaks: PeakTracker,
}

impl GaugeIndex {
    /// The index of `state`'s channel views as they are now: O(channels × history).
    pub fn build(state: &DashboardState) -> Self {
        let channels = &state.channels;
        let host_of = |rank: usize| state.run.hosts.get(rank).map_or("unknown host", String::as_str);
        // Hosts in order of first appearance, each with its views in their order.
        let mut host_index: HashMap<&str, usize> = HashMap::new();
        let mut members: Vec<(usize, Vec<usize>)> = Vec::new();
        for (at, view) in channels.iter().enumerate() {
            let host = host_of(view.rank);
            let index = *host_index.entry(host).or_insert_with(|| {
                members.push((members.len(), Vec::new()));
                members.len() - 1
            });
            members[index].1.push(at);
        }
        let mut hosts = Vec::with_capacity(members.len());
        let mut rows = Vec::with_capacity(channels.len() + members.len());
        let mut row_of = vec![0; channels.len()];
        for (host, views) in members {
            let mut ranks: Vec<usize> = views.iter().map(|&at| channels[at].rank).collect();
            ranks.dedup();
            hosts.push(HostGroup { name: host_of(channels[views[0]].rank).to_string(), ranks });
            rows.push(GaugeRow::Host(host));
            for at in views {
                row_of[at] = rows.len();
                rows.push(GaugeRow::Channel(at));
            }
        }
        let mut in_flight_digits = [0; 21];
        let mut peaks = PeakTracker::new(channels.len());
        for (at, view) in channels.iter().enumerate() {
            in_flight_digits[digits(view.in_flight)] += 1;
            for &gbps in &view.history {
                peaks.push(at, gbps);
            }
            peaks.current[at] = view.gbps;
            peaks.refresh(at);
        }
        Self {
            built_for: Some(channels.len()),
            hosts,
            rows,
            row_of,
            sorted: channels.windows(2).all(|pair| (pair[0].rank, pair[0].channel) < (pair[1].rank, pair[1].channel)),
            id_width: channels.iter().map(|view| id_text(view).chars().count()).max().unwrap_or(0),
            nic_width: channels.iter().map(|view| view.nic.chars().count()).max().unwrap_or(0),
            in_flight_digits,
            peaks,
        }
    }

    /// Whether the index was built for `state`'s views (their count is the check: views are only
    /// replaced whole, by [`Ingest::begin`](crate::ingest::Ingest::begin), which rebuilds it).
    pub fn is_current(&self, state: &DashboardState) -> bool {
        self.built_for == Some(state.channels.len())
    }

    /// View `at` took a new interval: its rate became `gbps` and was pushed onto its history after the
    /// oldest point was dropped when `popped`; its operations in flight went from `in_flight_was` to
    /// `in_flight`. O(log channels).
    pub fn record(&mut self, at: usize, gbps: f64, popped: bool, in_flight_was: u64, in_flight: u64) {
        match self.built_for {
            Some(count) if at < count => {}
            _ => return,
        }
        self.in_flight_digits[digits(in_flight_was)] -= 1;
        self.in_flight_digits[digits(in_flight)] += 1;
        if popped {
            self.peaks.pop_oldest(at);
        }
        self.peaks.push(at, gbps);
        self.peaks.current[at] = gbps;
        self.peaks.refresh(at);
    }

    /// The highest finite rate in any channel's history or latest interval, at least 0.
    pub fn peak_gbps(&self) -> f64 {
        self.peaks.peak()
    }

    /// Widest operations-in-flight figure; 1 without channels.
    pub fn in_flight_width(&self) -> usize {
        self.in_flight_digits.iter().rposition(|&count| count > 0).unwrap_or(1)
    }

    /// The view of `rank`'s `channel`, if there is one.
    pub fn view(&self, state: &DashboardState, rank: usize, channel: usize) -> Option<usize> {
        if self.sorted {
            state.channels.binary_search_by_key(&(rank, channel), |view| (view.rank, view.channel)).ok()
        } else {
            state.channels.iter().position(|view| view.rank == rank && view.channel == channel)
        }
    }

    /// `rank`'s first view, if it has any.
    pub fn first_view_of(&self, state: &DashboardState, rank: usize) -> Option<usize> {
        if self.sorted {
            let at = state.channels.partition_point(|view| view.rank < rank);
            state.channels.get(at).filter(|view| view.rank == rank).map(|_| at)
        } else {
            state.channels.iter().position(|view| view.rank == rank)
        }
    }

    /// The row of view `at`.
    pub fn row_of(&self, at: usize) -> Option<usize> {
        self.row_of.get(at).copied()
    }
}

/// `r<rank> c<channel>`, a gauge row's name.
pub fn id_text(view: &ChannelView) -> String {
    format!("r{} c{}", view.rank, view.channel)
}
