//! The fleet model: what hundreds of hosts look like at a glance, kept beside the detailed views as
//! rates arrive. It is fed (host, rail, rate) observations and knows nothing else of where they came
//! from: the dashboard feeds it each channel of each rank (channel k of every rank is rail k, as `sweep`
//! counts them; [`Fleet::build`]), the many-node monitor each EFA NIC of each node (NIC k of every node,
//! in the rail check's order, is rail k; `crate::monitor`). Per host, a strip of its NICs with their
//! rates now; per rail, the live median and spread and a small histogram of the NICs against that
//! median; and the NICs furthest behind their rail now, with how long they have been low. Hosts are
//! ordered by their worst NIC's share of its rail's median, worst first.
//!
//! A NIC that stays below its rail is flagged by the rule `sweep`'s verdict and the monitor's rail check
//! use ([`RailRule`]; live, [`LIVE_RULE`]): below `threshold` × its rail's live median, without a break,
//! for [`FLEET_HOLD`].
//!
//! A feeder records each NIC's rate (O(1)) and refreshes the summaries on its tick (O(NICs), once per
//! frame at most, and only when something arrived). Memory is a few dozen bytes per NIC and a few
//! hundred per host: no history is kept here.

use std::collections::HashMap;
use std::time::Duration;

use efatop_sweep::rails::{RailRule, DEFAULT_THRESHOLD, IDLE_GBPS};

use super::DashboardState;

/// How long a NIC must stay below its rail to be flagged.
pub const FLEET_HOLD: Duration = Duration::from_secs(1);
/// How many of the worst NICs are kept, worst first.
pub const WORST_LEN: usize = 32;
/// Without new rates, the flags' clocks move on this often.
const IDLE_REFRESH: Duration = Duration::from_millis(100);
/// A model of more NICs than this (a fleet: 4096 hosts × 8 ranks × 4 channels is 131072) refreshes its
/// summaries at most every [`FLEET_REFRESH`], however often it is asked (the dashboard asks every frame,
/// 20 times a second): a refresh is O(NICs), and rates arrive once a telemetry interval anyway.
pub const FLEET_SCALE_NICS: usize = 4096;
/// See [`FLEET_SCALE_NICS`]: a telemetry interval at the default 10 Hz.
pub const FLEET_REFRESH: Duration = Duration::from_millis(100);
/// The rule the fleet judges by, live: below [`DEFAULT_THRESHOLD`] of the rail's median for [`FLEET_HOLD`].
pub const LIVE_RULE: RailRule = RailRule { threshold: DEFAULT_THRESHOLD, hold: FLEET_HOLD };
/// Bins of the rail histograms: tenths of the rail's median from 0 up to 1.5, then everything above.
pub const HISTOGRAM_BINS: usize = 16;

/// One rail across the fleet, as of the last refresh.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RailSummary {
    pub rail: usize,
    /// NICs of the rail that have reported a rate.
    pub nics: usize,
    /// Percentiles of the rail's rates (Gbps); 0 while no NIC has reported.
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
    pub min: f64,
    pub max: f64,
    /// NICs per tenth of the median: bin `i` holds the NICs at `[i/10, (i+1)/10)` of it, the last bin
    /// everything from 1.5 up. Empty on an idle rail.
    pub histogram: [u32; HISTOGRAM_BINS],
    /// NICs flagged behind the rail now.
    pub behind: usize,
}

/// One host's strip of NICs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostStrip {
    pub name: String,
    /// Its NICs (indices into the model's NICs, in the order they were added: for the dashboard its
    /// channel views, indices into [`DashboardState::channels`], by rank then channel).
    pub views: Vec<u32>,
    /// Its worst NIC's rate as a share of its rail's median; NaN while none is judged.
    pub worst_ratio: f32,
    /// That NIC (index into the model's NICs).
    pub worst_view: Option<u32>,
    /// Its NICs flagged behind their rail now.
    pub behind: u32,
}

/// One of the worst NICs now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorstNic {
    /// Its index among the model's NICs (for the dashboard its channel view, an index into
    /// [`DashboardState::channels`]).
    pub view: usize,
    /// Index into [`Fleet::hosts`].
    pub host: usize,
    pub rail: usize,
    pub gbps: f64,
    /// `gbps` over the rail's median.
    pub ratio: f64,
    pub rail_median: f64,
    /// How long it has been below the rule's share of its rail, without a break; `None` when it is not.
    pub low_for: Option<Duration>,
    /// Flagged: low for at least the rule's hold.
    pub behind: bool,
}

/// What the fleet model keeps per NIC.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Nic {
    host: u32,
    rail: u16,
    /// Latest rate; NaN until the channel reports.
    gbps: f32,
    /// `gbps` over the rail's median at the last refresh; NaN when not judged (no rate, idle rail).
    ratio: f32,
    behind: bool,
    /// When its current spell below the rail began ([`RailRule::judge`]'s clock).
    low_since: Option<Duration>,
}

/// The fleet model of a run or of many nodes (see the module).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fleet {
    /// How many channel views it was built for (the dashboard's); `None` before it is built, and for a
    /// model fed NIC by NIC.
    built_for: Option<usize>,
    rule: RailRule,
    nics: Vec<Nic>,
    hosts: Vec<HostStrip>,
    rails: Vec<RailSummary>,
    /// Indices into `hosts`, worst first.
    order: Vec<u32>,
    worst: Vec<WorstNic>,
    /// A rate arrived since the last refresh.
    dirty: bool,
    refreshed_at: Duration,
    /// Refreshed at least once.
    refreshed: bool,
}

impl Fleet {
    /// The model of `state`'s channel views (their current rates included), refreshed as of `now`.
    pub fn build(state: &DashboardState, now: Duration) -> Self {
        let mut fleet = Self::with_rule(state, LIVE_RULE);
        for (at, view) in state.channels.iter().enumerate() {
            if view.gbps.is_finite() && (view.gbps != 0.0 || !view.history.is_empty()) {
                fleet.record(at, view.gbps);
            }
        }
        fleet.refresh(now);
        fleet
    }

    /// An empty model of `state`'s channel views (no rate yet), judging by `rule`: a NIC per channel
    /// view, its host the rank's, its rail the channel.
    pub fn with_rule(state: &DashboardState, rule: RailRule) -> Self {
        let host_of = |rank: usize| state.run.hosts.get(rank).map_or("unknown host", String::as_str);
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut fleet = Self::new(rule);
        fleet.nics.reserve(state.channels.len());
        for view in &state.channels {
            let name = host_of(view.rank);
            let host = *index.entry(name).or_insert_with(|| fleet.add_host(name));
            fleet.add_nic(host, view.channel);
        }
        fleet.built_for = Some(state.channels.len());
        fleet
    }

    /// An empty model with no host yet, judging by `rule`; hosts and NICs come with
    /// [`Self::add_host`] and [`Self::add_nic`].
    pub fn new(rule: RailRule) -> Self {
        Self { rule, ..Self::default() }
    }

    /// A new host named `name`, with no NIC yet; returns its index into [`Self::hosts`].
    pub fn add_host(&mut self, name: &str) -> usize {
        self.hosts.push(HostStrip { name: name.to_string(), worst_ratio: f32::NAN, ..HostStrip::default() });
        self.order.push((self.hosts.len() - 1) as u32);
        self.hosts.len() - 1
    }

    /// Host `host` is now called `name` (a many-node view telling apart nodes on one machine).
    pub fn rename_host(&mut self, host: usize, name: &str) {
        if let Some(strip) = self.hosts.get_mut(host) {
            if strip.name != name {
                strip.name = name.to_string();
            }
        }
    }

    /// A new NIC of `host` on `rail`, with no rate yet; returns its index (what [`Self::record`] takes).
    /// Rails are numbered from 0; a rail past the last one adds the rails up to it.
    pub fn add_nic(&mut self, host: usize, rail: usize) -> usize {
        let at = self.nics.len();
        let host = u32::try_from(host).unwrap_or(u32::MAX);
        let rail = u16::try_from(rail).unwrap_or(u16::MAX);
        while self.rails.len() <= usize::from(rail) {
            let next = self.rails.len();
            self.rails.push(RailSummary { rail: next, ..RailSummary::default() });
        }
        if let Some(strip) = self.hosts.get_mut(host as usize) {
            strip.views.push(at as u32);
        }
        self.nics.push(Nic { host, rail, gbps: f32::NAN, ratio: f32::NAN, behind: false, low_since: None });
        at
    }

    /// Whether the model was built for `state`'s views (their count is the check, as for the gauges).
    pub fn is_current(&self, state: &DashboardState) -> bool {
        self.built_for == Some(state.channels.len())
    }

    pub fn rule(&self) -> RailRule {
        self.rule
    }

    /// NIC `at` (for the dashboard, channel view `at`) took a new interval at `gbps` (NaN: it has no
    /// rate now). O(1); the summaries follow at the next refresh.
    pub fn record(&mut self, at: usize, gbps: f64) {
        if let Some(nic) = self.nics.get_mut(at) {
            nic.gbps = gbps as f32;
            self.dirty = true;
        }
    }

    /// Brings the summaries up to date as of `now`, if a rate arrived since the last refresh (for a model
    /// of more than [`FLEET_SCALE_NICS`] NICs, at most every [`FLEET_REFRESH`]): O(channels + hosts log hosts).
    pub fn refresh(&mut self, now: Duration) {
        if !self.dirty {
            // Nothing new, but flags depend on how long a NIC has been low: the clocks move on, at the
            // pace of a telemetry interval at most.
            if now.saturating_sub(self.refreshed_at) >= IDLE_REFRESH {
                self.refreshed_at = now;
                self.judge(now);
            }
            return;
        }
        let since = now.saturating_sub(self.refreshed_at);
        if self.refreshed && self.nics.len() > FLEET_SCALE_NICS && since < FLEET_REFRESH {
            // A fleet's rates are taken in as they come (O(1) each); its summaries follow at most every
            // FLEET_REFRESH (see there).
            return;
        }
        self.dirty = false;
        self.refreshed = true;
        self.refreshed_at = now;
        // Per rail: percentiles by selection over the rates reported so far.
        let mut rates: Vec<Vec<f32>> = vec![Vec::new(); self.rails.len()];
        for nic in &self.nics {
            if nic.gbps.is_finite() {
                rates[usize::from(nic.rail)].push(nic.gbps);
            }
        }
        for (summary, rates) in self.rails.iter_mut().zip(&mut rates) {
            *summary = RailSummary { rail: summary.rail, nics: rates.len(), ..RailSummary::default() };
            if rates.is_empty() {
                continue;
            }
            let mut at = |q: f64| {
                let index = ((rates.len() - 1) as f64 * q).round() as usize;
                f64::from(*rates.select_nth_unstable_by(index, f32::total_cmp).1)
            };
            summary.p50 = at(0.5);
            summary.p10 = at(0.1);
            summary.p90 = at(0.9);
            summary.min = at(0.0);
            summary.max = at(1.0);
        }
        self.judge(now);
    }

    /// Judges every NIC against its rail's median, then orders the hosts and picks the worst NICs.
    fn judge(&mut self, now: Duration) {
        for summary in &mut self.rails {
            summary.histogram = [0; HISTOGRAM_BINS];
            summary.behind = 0;
        }
        for host in &mut self.hosts {
            host.worst_ratio = f32::NAN;
            host.worst_view = None;
            host.behind = 0;
        }
        for (at, nic) in self.nics.iter_mut().enumerate() {
            let rail = &mut self.rails[usize::from(nic.rail)];
            let median = rail.p50;
            nic.behind = self.rule.judge(f64::from(nic.gbps), median, now, &mut nic.low_since);
            nic.ratio = if nic.gbps.is_finite() && median >= IDLE_GBPS { (f64::from(nic.gbps) / median) as f32 } else { f32::NAN };
            if nic.ratio.is_nan() {
                continue;
            }
            let bin = ((nic.ratio * 10.0).max(0.0) as usize).min(HISTOGRAM_BINS - 1);
            rail.histogram[bin] += 1;
            rail.behind += usize::from(nic.behind);
            let host = &mut self.hosts[nic.host as usize];
            host.behind += u32::from(nic.behind);
            if host.worst_ratio.is_nan() || nic.ratio < host.worst_ratio {
                host.worst_ratio = nic.ratio;
                host.worst_view = Some(at as u32);
            }
        }
        let hosts = &self.hosts;
        // Worst first; hosts not judged yet last, in their order.
        self.order.sort_by(|&a, &b| {
            let (ra, rb) = (hosts[a as usize].worst_ratio, hosts[b as usize].worst_ratio);
            match (ra.is_nan(), rb.is_nan()) {
                (false, false) => ra.total_cmp(&rb).then(a.cmp(&b)),
                (nan_a, nan_b) => nan_a.cmp(&nan_b).then(a.cmp(&b)),
            }
        });
        let mut judged: Vec<(f32, u32)> =
            self.nics.iter().enumerate().filter(|(_, nic)| !nic.ratio.is_nan()).map(|(at, nic)| (nic.ratio, at as u32)).collect();
        let by_ratio = |a: &(f32, u32), b: &(f32, u32)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
        if judged.len() > WORST_LEN {
            judged.select_nth_unstable_by(WORST_LEN, by_ratio);
            judged.truncate(WORST_LEN);
        }
        judged.sort_by(by_ratio);
        self.worst = judged
            .into_iter()
            .map(|(ratio, at)| {
                let nic = self.nics[at as usize];
                let rail = usize::from(nic.rail);
                WorstNic {
                    view: at as usize,
                    host: nic.host as usize,
                    rail,
                    gbps: f64::from(nic.gbps),
                    ratio: f64::from(ratio),
                    rail_median: self.rails[rail].p50,
                    low_for: nic.low_since.map(|since| now.saturating_sub(since)),
                    behind: nic.behind,
                }
            })
            .collect();
    }

    /// Every rail, by number.
    pub fn rails(&self) -> &[RailSummary] {
        &self.rails
    }

    /// Every host, in the order they were added (the dashboard's: first appearance among the ranks).
    pub fn hosts(&self) -> &[HostStrip] {
        &self.hosts
    }

    /// Indices into [`Self::hosts`], the host whose worst NIC is furthest behind its rail first.
    pub fn order(&self) -> &[u32] {
        &self.order
    }

    /// The NICs furthest below their rail's median now, worst first (at most [`WORST_LEN`]).
    pub fn worst(&self) -> &[WorstNic] {
        &self.worst
    }

    /// Channel view `at`'s rate over its rail's median as of the last refresh; `None` when not judged.
    pub fn ratio(&self, at: usize) -> Option<f64> {
        self.nics.get(at).map(|nic| f64::from(nic.ratio)).filter(|ratio| !ratio.is_nan())
    }

    /// Whether channel view `at` is flagged behind its rail.
    pub fn is_behind(&self, at: usize) -> bool {
        self.nics.get(at).is_some_and(|nic| nic.behind)
    }

    /// Channel view `at`'s rail.
    pub fn rail_of(&self, at: usize) -> Option<usize> {
        self.nics.get(at).map(|nic| usize::from(nic.rail))
    }

    /// The host named `query`, or failing that the first (in host order) whose name contains it, ignoring
    /// case. An empty query finds nothing.
    pub fn find_host(&self, query: &str) -> Option<usize> {
        if query.is_empty() {
            return None;
        }
        if let Some(exact) = self.hosts.iter().position(|host| host.name == query) {
            return Some(exact);
        }
        let query = query.to_lowercase();
        self.hosts.iter().position(|host| host.name.to_lowercase().contains(&query))
    }

    /// Where host `host` stands in [`Self::order`].
    pub fn position_of(&self, host: usize) -> Option<usize> {
        self.order.iter().position(|&at| at as usize == host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use efatop_proto::events::RunInfo;
    use crate::state::ChannelView;

    /// `hosts` × `ranks` × `channels` views, every NIC at 100 Gbps but those in `slow` (view, Gbps).
    fn fleet(hosts: usize, ranks: usize, channels: usize) -> DashboardState {
        let total = hosts * ranks;
        DashboardState {
            run: RunInfo {
                ranks: total,
                hosts: (0..total).map(|rank| format!("node-{:03}", rank / ranks)).collect(),
                channels,
                ..RunInfo::default()
            },
            channels: (0..total)
                .flat_map(|rank| (0..channels).map(move |channel| ChannelView { rank, channel, ..ChannelView::default() }))
                .collect(),
            ..DashboardState::default()
        }
    }

    fn feed(model: &mut Fleet, views: usize, slow: &[(usize, f64)], now: Duration) {
        for at in 0..views {
            let gbps = slow.iter().find(|(view, _)| *view == at).map_or(100.0 + (at % 5) as f64, |(_, gbps)| *gbps);
            model.record(at, gbps);
        }
        model.refresh(now);
    }

    #[test]
    fn rails_hosts_and_the_worst_nics_follow_the_rates() {
        let state = fleet(16, 2, 4);
        let mut model = Fleet::build(&state, Duration::ZERO);
        assert_eq!(model.hosts().len(), 16);
        assert_eq!(model.rails().len(), 4);
        assert!(model.worst().is_empty(), "nothing reported yet");
        assert!(model.rails().iter().all(|rail| rail.nics == 0));

        // Host 9's rank 19, channel 2 (view 19 × 4 + 2) runs at 60 Gbps: 40 % below its rail.
        let slow = 19 * 4 + 2;
        let views = state.channels.len();
        feed(&mut model, views, &[(slow, 60.0)], Duration::from_millis(100));
        let rail = &model.rails()[2];
        assert_eq!(rail.nics, 32);
        assert!((100.0..=104.0).contains(&rail.p50), "{rail:?}");
        assert!((rail.min - 60.0).abs() < 1e-9);
        assert_eq!(rail.histogram[5], 1, "one NIC at 0.5-0.6 of the median: {:?}", rail.histogram);
        assert_eq!(rail.histogram.iter().sum::<u32>(), 32);
        let worst = model.worst()[0];
        assert_eq!((worst.view, worst.host, worst.rail), (slow, 9, 2));
        assert!((worst.ratio - 60.0 / rail.p50).abs() < 1e-6);
        assert_eq!(worst.low_for, Some(Duration::ZERO));
        assert!(!worst.behind, "not yet held low");
        assert_eq!(model.order()[0], 9, "its host first");
        assert_eq!(model.worst().len(), WORST_LEN);

        // Held low: flagged after the rule's hold, on its rail and its host.
        feed(&mut model, views, &[(slow, 60.0)], Duration::from_millis(1100));
        let worst = model.worst()[0];
        assert!(worst.behind && model.is_behind(slow), "{worst:?}");
        assert_eq!(worst.low_for, Some(Duration::from_secs(1)));
        assert_eq!((model.rails()[2].behind, model.hosts()[9].behind), (1, 1));
        // Recovered: the flag and the clock go.
        feed(&mut model, views, &[], Duration::from_millis(1200));
        assert!(!model.is_behind(slow));
        assert_eq!(model.rails()[2].behind, 0);
    }

    #[test]
    fn hosts_sort_worst_first_and_are_found_by_name() {
        let state = fleet(5, 1, 2);
        let mut model = Fleet::build(&state, Duration::ZERO);
        // Host 3 at 50 %, host 1 at 80 %, host 4 silent.
        for at in 0..8 {
            model.record(at, match at {
                6 => 50.0,
                3 => 80.0,
                _ => 100.0,
            });
        }
        model.refresh(Duration::from_millis(100));
        assert_eq!(model.order(), [3, 1, 0, 2, 4]);
        assert!(model.hosts()[4].worst_ratio.is_nan());
        assert_eq!(model.find_host("node-002"), Some(2));
        assert_eq!(model.find_host("NODE-004"), Some(4));
        assert_eq!(model.find_host("3"), Some(3));
        assert_eq!(model.find_host("nope"), None);
        assert_eq!(model.find_host(""), None);
        assert_eq!(model.position_of(1), Some(1));
    }

    #[test]
    fn a_fleet_refreshes_at_most_every_interval_however_often_it_is_asked() {
        // 1040 hosts × 4 ranks × 1 channel: above FLEET_SCALE_NICS.
        let state = fleet(1040, 4, 1);
        let views = state.channels.len();
        assert!(views > FLEET_SCALE_NICS);
        let mut model = Fleet::build(&state, Duration::ZERO);
        feed(&mut model, views, &[(7, 10.0)], Duration::from_secs(1));
        assert_eq!(model.worst()[0].view, 7, "the first refresh after a while is at once");
        // A new slow NIC 50 ms later: taken in, summaries not yet refreshed...
        feed(&mut model, views, &[(9, 5.0)], Duration::from_millis(1050));
        assert_eq!(model.worst()[0].view, 7);
        // ... until an interval after the last refresh, with nothing new asked of it in between.
        model.refresh(Duration::from_millis(1100));
        assert_eq!(model.worst()[0].view, 9);
        // A small model refreshes whenever asked.
        let small = fleet(4, 2, 2);
        let mut model = Fleet::build(&small, Duration::ZERO);
        feed(&mut model, small.channels.len(), &[(3, 10.0)], Duration::from_secs(1));
        feed(&mut model, small.channels.len(), &[(5, 5.0)], Duration::from_millis(1001));
        assert_eq!(model.worst()[0].view, 5);
    }

    #[test]
    fn an_idle_rail_judges_nobody() {
        let state = fleet(3, 1, 1);
        let mut model = Fleet::build(&state, Duration::ZERO);
        for at in 0..3 {
            model.record(at, 0.0);
        }
        model.refresh(Duration::from_secs(5));
        assert!(model.worst().is_empty());
        assert_eq!(model.rails()[0].nics, 3);
        assert!(!model.is_behind(0));
    }
}
