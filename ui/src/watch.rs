//! `efatop watch`'s live view of an NCCL job, from the watcher's typed lines ([`WatchLine`]): a header with
//! the job's size and the watcher's health, the hang locator's line, then sections drawn worst first so
//! that a fleet's trouble is on the first screen:
//! - **hosts**: per host, what NCCL's network path moved against what its EFA NICs carried over the last
//!   window, with the fallback and rail flags (fallback first, then NICs behind their rail);
//! - **ranks**: host, GPU, rank, communicator, NCCL and profiler ABI (a rank the hang locator names first,
//!   then ranks that left);
//! - **collectives**: per communicator, kind and size, calls, time, nccl-tests' algbw and busbw;
//! - **peers**: bytes each rank's proxy sent to and received from each peer, most first.
//!
//! [`WatchView`] folds lines and keys; [`render`] paints it and keeps nothing. Keys: ↑↓ (or k j) scroll,
//! PgUp-like `b`/space by a screen, `g` to the top, `q` quits.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use efatop_proto::counters::human_bytes;
use efatop_proto::nccl::{Func, HangWhy, LagSource, NicVerdict, RailVerdict, WatchLine};
use efatop_proto::sizes::format_size;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;
use ratatui::Frame;

use crate::state::{Action, Key};

/// One rank as the view shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct RankRow {
    pub host: String,
    pub pid: u32,
    pub gpu: Option<String>,
    pub comm: String,
    pub rank: u32,
    pub nranks: u32,
    pub nccl_version: Option<String>,
    pub abi: u32,
    /// Its plugin left: with a bye (its communicator ended) or not.
    pub gone: Option<bool>,
}

/// What the watcher's lines said, latest of each kind, and where the user scrolled to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WatchView {
    /// By (host, pid, comm, rank).
    pub ranks: BTreeMap<(String, u32, String, u32), RankRow>,
    /// The latest `Coll` line of each (comm, func, size).
    pub colls: BTreeMap<(String, Func, u64), WatchLine>,
    /// The latest `Peer` line of each (rank, peer), per comm: a fleet's tick is one line per rank and peer
    /// (65,536 at 32,768 ranks), each keyed by integers, no name copied for it.
    pub peers: BTreeMap<String, HashMap<(u32, u32), WatchLine>>,
    /// The hosts and communicators of the ranks, and the ranks gone: the header's counts, kept as lines come
    /// rather than walked from 32,768 ranks at every frame made.
    rank_hosts: BTreeSet<String>,
    rank_comms: BTreeSet<String>,
    gone_ranks: usize,
    /// The latest `Nics` line of each host.
    pub hosts: BTreeMap<String, WatchLine>,
    /// Open hangs by (comm, func, seq).
    pub hangs: BTreeMap<(String, Func, u64), WatchLine>,
    /// The named straggler of each communicator.
    pub stragglers: BTreeMap<String, WatchLine>,
    /// The latest `Rails` line of each (host, GPU) whose rails are skewed or erring.
    pub rails: BTreeMap<(String, String), WatchLine>,
    pub health: Option<WatchLine>,
    /// Lines folded so far.
    pub lines: u64,
    pub scroll: usize,
    /// What [`lines`] made of the state, kept until the next [`WatchView::push`]: a frame redrawn between
    /// two of the watcher's ticks (ten frames a second, a tick a second) does not walk 32,768 ranks again.
    cached: LinesCache,
}

/// The view's lines as last made; never part of what a view is (equal, cloned empty).
#[derive(Default)]
struct LinesCache(std::cell::RefCell<Option<Vec<Line<'static>>>>);

impl Clone for LinesCache {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for LinesCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for LinesCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinesCache")
    }
}

impl WatchView {
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds one line in.
    pub fn push(&mut self, line: WatchLine) {
        self.lines += 1;
        self.cached.0.get_mut().take();
        match &line {
            WatchLine::Rank { host, pid, gpu, comm, rank, nranks, nccl_version, abi, .. } => {
                let row = RankRow { host: host.clone(), pid: *pid, gpu: gpu.clone(), comm: comm.clone(), rank: *rank, nranks: *nranks, nccl_version: nccl_version.clone(), abi: *abi, gone: None };
                match self.ranks.insert((host.clone(), *pid, comm.clone(), *rank), row) {
                    // Rejoined: live again.
                    Some(old) => self.gone_ranks -= usize::from(old.gone.is_some()),
                    None => {
                        if !self.rank_hosts.contains(host.as_str()) {
                            self.rank_hosts.insert(host.clone());
                        }
                        if !self.rank_comms.contains(comm.as_str()) {
                            self.rank_comms.insert(comm.clone());
                        }
                    }
                }
            }
            WatchLine::Coll { comm, func, size, .. } => {
                self.colls.insert((comm.clone(), *func, *size), line);
            }
            WatchLine::Peer { comm, rank, peer, .. } => {
                let key = (*rank, *peer);
                let pairs = match self.peers.get_mut(comm.as_str()) {
                    Some(pairs) => pairs,
                    None => self.peers.entry(comm.clone()).or_default(),
                };
                pairs.insert(key, line);
            }
            WatchLine::Nics { host, .. } => match self.hosts.get_mut(host.as_str()) {
                Some(slot) => *slot = line,
                None => {
                    self.hosts.insert(host.clone(), line);
                }
            },
            WatchLine::Hang { comm, func, seq, .. } => {
                self.hangs.insert((comm.clone(), *func, *seq), line);
            }
            WatchLine::HangOver { comm, func, seq } => {
                self.hangs.remove(&(comm.clone(), *func, *seq));
            }
            WatchLine::Gone { host, pid, bye } => {
                // The plugin's ranks are together in the map's order: a fleet's thousands of plugins leaving
                // cost each its own ranks, not the world's.
                let from = (host.clone(), *pid, String::new(), 0);
                for (_, row) in self.ranks.range_mut(from..).take_while(|((h, p, _, _), _)| h == host && p == pid) {
                    self.gone_ranks += usize::from(row.gone.is_none());
                    row.gone = Some(*bye);
                }
            }
            WatchLine::Straggler { comm, .. } => {
                self.stragglers.insert(comm.clone(), line);
            }
            WatchLine::StragglerOver { comm, .. } => {
                self.stragglers.remove(comm);
            }
            WatchLine::Rails { host, gpu, verdict, .. } => {
                let key = (host.clone(), gpu.clone());
                if matches!(verdict, RailVerdict::Errors | RailVerdict::Skewed) {
                    self.rails.insert(key, line);
                } else {
                    self.rails.remove(&key);
                }
            }
            WatchLine::Health { .. } => self.health = Some(line),
        }
    }

    /// One key: scrolling, or quitting.
    pub fn handle_key(&mut self, key: Key) -> Action {
        match key {
            Key::Char('q') | Key::Esc => return Action::Quit,
            Key::Down | Key::Char('j') => self.scroll += 1,
            Key::Up | Key::Char('k') => self.scroll = self.scroll.saturating_sub(1),
            Key::Char(' ') => self.scroll += 20,
            Key::Char('b') => self.scroll = self.scroll.saturating_sub(20),
            Key::Char('g') => self.scroll = 0,
            _ => {}
        }
        Action::None
    }

    /// The ranks the hang locator names: (comm, rank, host).
    fn hung(&self) -> std::collections::HashSet<(&str, u32, &str)> {
        self.hangs
            .values()
            .filter_map(|h| match h {
                WatchLine::Hang { comm, rank, host, .. } => Some((comm.as_str(), *rank, host.as_str())),
                _ => None,
            })
            .collect()
    }
}

const HEAD: Style = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
const BAD: Style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
const WARN: Style = Style::new().fg(Color::Yellow);
const GOOD: Style = Style::new().fg(Color::Green);
const DIM: Style = Style::new().fg(Color::DarkGray);

fn severity(verdict: NicVerdict) -> u8 {
    match verdict {
        NicVerdict::Fallback => 0,
        NicVerdict::BehindRail => 1,
        NicVerdict::Ok => 2,
        NicVerdict::Quiet => 3,
    }
}

fn gbps(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

fn short_comm(comm: &str) -> &str {
    comm.get(comm.len().saturating_sub(8)..).unwrap_or(comm)
}

/// Ranks as a sentence names them: every one of a few (`ranks [0, 2]`), a count and the first of many (a
/// fleet's 32,767 peers).
fn rank_list(ranks: &[u32]) -> String {
    if ranks.len() <= LISTED_RANKS {
        format!("ranks {ranks:?}")
    } else {
        let first: Vec<String> = ranks.iter().take(LISTED_RANKS).map(u32::to_string).collect();
        format!("{} ranks [{}, …]", ranks.len(), first.join(", "))
    }
}

/// Ranks a hang's sentence lists by number.
const LISTED_RANKS: usize = 8;
/// Rows a section shows at most; past them one line counts the rest (the worst come first). A fleet's
/// view stays a screenful of its trouble: every row is in `--json`.
pub const SECTION_ROWS: usize = 64;
/// Hang lines shown (under the header, not scrolled) at most.
pub const HANG_ROWS: usize = 8;

/// The hang locator's sentence for one open hang.
pub fn hang_text(line: &WatchLine) -> Option<String> {
    let WatchLine::Hang { comm, func, seq, rank, host, gpu, why, waiting_s, peers_done, peers_waiting, rails } = line else { return None };
    let what = match why {
        HangWhy::NotFinished => "has not finished",
        HangWhy::NotStarted => "has not started",
        HangWhy::Silent => "went silent in",
    };
    let peers = if peers_done.is_empty() { format!("{} wait in it", rank_list(peers_waiting)) } else { format!("{} finished it", rank_list(peers_done)) };
    let rails = if rails.is_empty() { String::new() } else { format!("; its rails with errors: {}", rails.join(", ")) };
    Some(format!(
        "HANG rank {rank} on {host} GPU {} {what} {} #{seq} on comm {} for {waiting_s:.0} s; {peers}{rails}",
        gpu.as_deref().unwrap_or("?"),
        func.label(),
        short_comm(comm)
    ))
}

/// The straggler finder's sentence for a communicator's named straggler.
pub fn straggler_text(line: &WatchLine) -> Option<String> {
    let WatchLine::Straggler { comm, func, rank, host, gpu, source, lag_us, last, of, its_wait_us, others_wait_us } = line else { return None };
    let how = match source {
        LagSource::KernelPhase => "kernel phases",
        LagSource::GpuStart => "kernel starts, GPU clock",
        LagSource::HostStart => "call starts, host clock",
    };
    let waits = match (its_wait_us, others_wait_us) {
        (Some(its), Some(others)) => format!("; its sync {:.2} ms, its peers' {:.2} ms", its / 1e3, others / 1e3),
        _ => String::new(),
    };
    Some(format!(
        "STRAGGLER rank {rank} on {host} GPU {}: its peers waited {:.2} ms for it in {last} of {of} {} calls on comm {} ({how}){waits}",
        gpu.as_deref().unwrap_or("?"),
        lag_us / 1e3,
        func.label(),
        short_comm(comm)
    ))
}

/// A GPU's skewed or erring rails in a sentence.
pub fn rails_text(line: &WatchLine) -> Option<String> {
    let WatchLine::Rails { host, gpu, nccl_bytes, verdict, nics, window_s } = line else { return None };
    let named: Vec<String> = nics
        .iter()
        .filter(|n| n.behind || n.errors())
        .map(|n| {
            let mut text = format!("{} {}", n.name, human_bytes(n.bytes));
            let errors: Vec<String> = [("retransmits", n.retrans), ("unresponsive", n.unresponsive), ("impaired", n.impaired)]
                .iter()
                .filter_map(|(what, c)| c.filter(|c| *c > 0).map(|c| format!("+{c} {what}")))
                .collect();
            if !errors.is_empty() {
                text.push_str(&format!(" ({})", errors.join(", ")));
            } else if n.behind {
                text.push_str(" (behind its rail)");
            }
            text
        })
        .collect();
    let what = if *verdict == RailVerdict::Errors { "RAIL ERRORS" } else { "RAIL SKEWED" };
    Some(format!("{what} {host} GPU {gpu}: NCCL moved {} in {window_s:.0} s; {}", human_bytes(*nccl_bytes), named.join("; ")))
}

/// Every line of the view, before scrolling: header, hang locator, hosts, ranks, collectives, peers.
#[allow(clippy::too_many_lines)] // one section after another, in the order they are drawn
pub fn lines(view: &WatchView) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut header = format!(
        " efatop watch · {} on {} · {}",
        plural(view.ranks.len(), "rank", "ranks"),
        plural(view.rank_hosts.len(), "host", "hosts"),
        plural(view.rank_comms.len(), "communicator", "communicators")
    );
    if let Some(WatchLine::Health { plugins, refused, dropped, unsent }) = &view.health {
        header.push_str(&format!(" · {plugins} plugins connected · {refused} refused · {dropped} events dropped · {unsent} unsent"));
    }
    out.push(Line::styled(header, Style::new().add_modifier(Modifier::BOLD)));
    if view.hangs.is_empty() {
        out.push(Line::styled(" hang locator: no rank is behind its peers", GOOD));
    } else {
        out.extend(view.hangs.values().take(HANG_ROWS).filter_map(hang_text).map(|t| Line::styled(format!(" {t}"), BAD)));
        if view.hangs.len() > HANG_ROWS {
            out.push(Line::styled(format!(" … and {} more hangs", view.hangs.len() - HANG_ROWS), BAD));
        }
    }
    out.extend(straggler_lines(view));

    out.push(Line::from(""));
    out.push(Line::styled(format!(" {:<16} {:>12} {:>12} {:>7}  {:<12} NICs", "HOST", "NCCL moved", "NICs carried", "window", "verdict"), HEAD));
    let mut hosts: Vec<&WatchLine> = view.hosts.values().collect();
    // Stable: hosts of one verdict stay in their names' order.
    hosts.sort_by_key(|l| match l {
        WatchLine::Nics { verdict, .. } => severity(*verdict),
        _ => 9,
    });
    let more_hosts = hosts.len().saturating_sub(SECTION_ROWS);
    for line in hosts.into_iter().take(SECTION_ROWS) {
        let WatchLine::Nics { host, window_s, nccl_bytes, nic_bytes, verdict, nics } = line else { continue };
        let (label, style) = match verdict {
            NicVerdict::Fallback => ("FALLBACK", BAD),
            NicVerdict::BehindRail => ("NIC BEHIND", WARN),
            NicVerdict::Ok => ("ok", GOOD),
            NicVerdict::Quiet => ("quiet", DIM),
        };
        let behind: Vec<&str> = nics.iter().filter(|n| n.behind).map(|n| n.name.as_str()).collect();
        let mut detail = format!("{} EFA", nics.len());
        if !behind.is_empty() {
            detail.push_str(&format!(", behind their rail: {}", behind.join(" ")));
        }
        out.push(Line::from(vec![
            Span::raw(format!(" {host:<16} {:>12} {:>12} {:>6.1}s  ", human_bytes(*nccl_bytes), human_bytes(*nic_bytes), window_s)),
            Span::styled(format!("{label:<12}"), style),
            Span::raw(format!(" {detail}")),
        ]));
        if *verdict == NicVerdict::Fallback {
            out.push(Line::styled(format!("   NCCL moved {}, its NICs carried {}: NCCL is not on EFA (sockets, TCP or shm)", human_bytes(*nccl_bytes), human_bytes(*nic_bytes)), BAD));
        }
    }
    if more_hosts > 0 {
        out.push(Line::styled(format!(" … {more_hosts} more hosts, none worse than those above"), DIM));
    }
    if view.hosts.is_empty() {
        out.push(Line::styled(" (no host has sent its NICs' counters yet)", DIM));
    }

    out.push(Line::from(""));
    out.push(Line::styled(format!(" {:<16} {:<10} {:>9} {:<9} {:<8} state", "HOST", "GPU", "RANK", "COMM", "NCCL"), HEAD));
    let hung = view.hung();
    let is_hung = |r: &RankRow| hung.contains(&(r.comm.as_str(), r.rank, r.host.as_str()));
    // Hung first, then live before gone, then by communicator (in name order) and rank: as a key of
    // integers, so that picking the first of 32,768 compares no names.
    let comm_order: HashMap<&str, u32> = view.rank_comms.iter().zip(0..).map(|(c, i)| (c.as_str(), i)).collect();
    let mut ranks: Vec<((bool, bool, u32, u32), bool, &RankRow)> = view
        .ranks
        .values()
        .map(|r| {
            let hung = is_hung(r);
            ((!hung, r.gone.is_some(), comm_order.get(r.comm.as_str()).copied().unwrap_or(u32::MAX), r.rank), hung, r)
        })
        .collect();
    let shown = ranks.len().min(SECTION_ROWS);
    // The worst of a fleet's ranks without sorting all of them each frame.
    if shown < ranks.len() {
        ranks.select_nth_unstable_by_key(shown, |r| r.0);
        ranks.truncate(shown);
    }
    ranks.sort_by_key(|r| r.0);
    let more_ranks = view.ranks.len() - shown;
    for (_, hung, row) in ranks {
        let (state, style) = if hung {
            ("BEHIND (hang locator)".to_string(), BAD)
        } else {
            match row.gone {
                Some(true) => ("finished".to_string(), DIM),
                Some(false) => ("left without finalizing".to_string(), WARN),
                None => ("live".to_string(), Style::new()),
            }
        };
        out.push(Line::from(vec![
            Span::raw(format!(
                " {:<16} {:<10} {:>9} {:<9} {:<8} ",
                row.host,
                row.gpu.as_deref().unwrap_or("?"),
                format!("{}/{}", row.rank, row.nranks),
                short_comm(&row.comm),
                format!("{} v{}", row.nccl_version.as_deref().unwrap_or("?"), row.abi)
            )),
            Span::styled(state, style),
        ]));
    }
    if more_ranks > 0 {
        let live = view.ranks.len() - view.gone_ranks;
        out.push(Line::styled(format!(" … {more_ranks} more ranks ({live} of all {} live), none worse than those above", view.ranks.len()), DIM));
    }

    out.push(Line::from(""));
    out.push(Line::styled(format!(" {:<9} {:<14} {:>6} {:>6} {:>6} {:<14} {:>10} {:>9} {:>9}", "COMM", "COLLECTIVE", "SIZE", "CALLS", "RANKS", "ALGO/PROTO", "TIME us", "ALGBW", "BUSBW"), HEAD));
    for line in view.colls.values().take(SECTION_ROWS) {
        let WatchLine::Coll { comm, func, size, algo, proto, ranks, nranks, ops, time_us, algbw_gbps, busbw_gbps, .. } = line else { continue };
        out.push(Line::raw(format!(
            " {:<9} {:<14} {:>6} {:>6} {:>6} {:<14} {:>10} {:>9} {:>9}",
            short_comm(comm),
            func.label(),
            format_size(*size),
            ops,
            format!("{ranks}/{nranks}"),
            // NCCL names no algorithm or protocol for a group of sends and receives.
            if algo.is_empty() && proto.is_empty() { "-".to_string() } else { format!("{algo}/{proto}") },
            time_us.map_or_else(|| "-".into(), |t| format!("{t:.1}")),
            gbps(*algbw_gbps),
            gbps(*busbw_gbps)
        )));
    }
    if view.colls.len() > SECTION_ROWS {
        out.push(Line::styled(format!(" … {} more collectives and sizes", view.colls.len() - SECTION_ROWS), DIM));
    }
    if view.colls.is_empty() {
        out.push(Line::styled(" (no collective yet)", DIM));
    }

    out.push(Line::from(""));
    out.push(Line::styled(format!(" {:<9} {:<16} {:>6} {:>6} {:>12} {:>12} {:>9}", "COMM", "HOST", "RANK", "PEER", "SENT", "RECEIVED", "STEPS"), HEAD));
    // The most bytes first; pairs that moved as much in (comm, rank, peer) order: a key of integers (the
    // communicator by its place in name order), so that picking the first of 65,536 compares no names.
    let mut peers: Vec<((std::cmp::Reverse<u64>, u32, u32, u32), &WatchLine)> = view
        .peers
        .values()
        .zip(0u32..)
        .flat_map(|(pairs, c)| {
            pairs.iter().map(move |(&(rank, peer), line)| {
                let bytes = match line {
                    WatchLine::Peer { sent, received, .. } => sent.saturating_add(*received),
                    _ => 0,
                };
                ((std::cmp::Reverse(bytes), c, rank, peer), line)
            })
        })
        .collect();
    if peers.len() > SECTION_ROWS {
        peers.select_nth_unstable_by_key(SECTION_ROWS, |p| p.0);
        peers.truncate(SECTION_ROWS);
    }
    peers.sort_by_key(|p| p.0);
    for (_, line) in peers {
        let WatchLine::Peer { comm, host, rank, peer, sent, received, steps } = line else { continue };
        out.push(Line::raw(format!(" {:<9} {:<16} {rank:>6} {peer:>6} {:>12} {:>12} {steps:>9}", short_comm(comm), host, human_bytes(*sent), human_bytes(*received))));
    }
    let pairs: usize = view.peers.values().map(HashMap::len).sum();
    if pairs > SECTION_ROWS {
        out.push(Line::styled(format!(" … {} more pairs of peers, each moved less than those above", pairs - SECTION_ROWS), DIM));
    }
    if pairs == 0 {
        out.push(Line::styled(" (no bytes between peers yet: a one-rank communicator has none)", DIM));
    }
    out
}

/// THE STRAGGLER LINE's place: under the hang locator, above the hosts. The rank the others
/// wait for, how long, how often, on which host and GPU, once the fold computes it (from v7's kernel
/// phases, else each rank's start of the same collective); nothing until then.
fn straggler_lines(view: &WatchView) -> Vec<Line<'static>> {
    let stragglers = view.stragglers.values().filter_map(straggler_text);
    let rails = view.rails.values().filter_map(rails_text);
    stragglers.chain(rails).map(|t| Line::styled(format!(" {t}"), WARN)).collect()
}

/// Draws the whole view over the frame.
pub fn draw(frame: &mut Frame, view: &WatchView) {
    let area = frame.area();
    render(view, area, frame.buffer_mut());
}

/// Draws the whole view into `area` of `buf`: the header and the hang locator stay; the rest scrolls;
/// the last row names the keys.
pub fn render(view: &WatchView, area: Rect, buf: &mut Buffer) {
    if area.is_empty() {
        return;
    }
    let mut cached = view.cached.0.borrow_mut();
    let all = cached.get_or_insert_with(|| lines(view));
    let fixed = 1 + view.hangs.len().clamp(1, HANG_ROWS + 1);
    let footer = u16::from(area.height > 2);
    let rows = area.height.saturating_sub(footer) as usize;
    let body = all.len().saturating_sub(fixed);
    let scroll = view.scroll.min(body.saturating_sub(rows.saturating_sub(fixed)));
    let shown = all.iter().take(fixed).chain(all.iter().skip(fixed + scroll)).take(rows);
    for (y, line) in shown.enumerate() {
        line.clone().render(Rect { y: area.y + y as u16, height: 1, ..area }, buf);
    }
    if footer == 1 {
        let keys = format!(" ↑↓ scroll · space/b page · g top · q quit   {} lines", view.lines);
        Line::styled(keys, DIM).render(Rect { y: area.bottom() - 1, height: 1, ..area }, buf);
    }
}

/// The view as plain text, every line unscrolled (for logs and tests).
pub fn plain_text(view: &WatchView) -> String {
    lines(view).iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect::<String>().trim_end().to_string() + "\n").collect()
}

#[cfg(test)]
mod tests;
