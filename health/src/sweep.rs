//! `efatop sweep --format slurm|npd`: the sweep's verdict in the contracts of the pipelines that drain
//! nodes ([`crate::contract`]): per suspect node, its drain reason and whether it is drained. The binary
//! runs the sweep in-process and feeds rank 0's events to a [`Heard`]; [`verdict`] judges what was heard.

use std::collections::BTreeMap;

use efatop_proto::action::Action;
use efatop_proto::events::ConsumerEvent;
use efatop_proto::sweep::{Scope, Suspect, Verdict as SweepVerdict};

use crate::contract::{self, Verdict};

/// What the sweep's events said.
#[derive(Default)]
pub struct Heard {
    hosts: BTreeMap<usize, String>,
    verdict: Option<SweepVerdict>,
    errors: Vec<String>,
}

impl Heard {
    /// Takes one of rank 0's events (those the contract does not need are ignored): every rank's host from
    /// the sweep's start, the suspects from its verdict, the error it ended with.
    pub fn take(&mut self, event: &ConsumerEvent) {
        match event {
            ConsumerEvent::SweepBegin(setup) => {
                for node in &setup.nodes {
                    self.hosts.insert(node.rank, node.host.clone());
                }
            }
            ConsumerEvent::SweepVerdict(verdict) => self.verdict = Some((**verdict).clone()),
            ConsumerEvent::Finished { error: Some(error) } => self.errors.push(error.clone()),
            _ => {}
        }
    }
}

/// A host as Slurm names its node: the short host name (the part before the first `.`); an emulated node
/// (`efatop run --netns`: `host:namespace`) by its namespace.
fn node_of(host: &str) -> String {
    let host = host.rsplit_once(':').map_or(host, |(_, namespace)| namespace);
    host.split('.').next().unwrap_or(host).to_string()
}

/// What a suspect calls for (docs/check.md, Actions): a NIC or a whole node slow with every peer is
/// `reboot` (drained, its links retrained; replaced if it stays slow), a slow link between two nodes is
/// `watch` (neither end is drained).
pub fn action(suspect: &Suspect) -> Action {
    match suspect.scope {
        Scope::Nic | Scope::Node => Action::Reboot,
        Scope::Link => Action::Watch,
    }
}

/// A few words on one suspect, for its node's reason, led by its action: `reboot: efa1 slow (...)`.
fn short(suspect: &Suspect, hosts: &BTreeMap<usize, String>) -> String {
    format!("{}: {}", action(suspect), words(suspect, hosts))
}

fn words(suspect: &Suspect, hosts: &BTreeMap<usize, String>) -> String {
    let figures = format!("{:.2} of {:.2} Gbps", suspect.measured_gbps, suspect.median_gbps);
    let nic = suspect.nic.as_deref().unwrap_or("?");
    match suspect.scope {
        Scope::Nic => format!("{nic} slow ({figures})"),
        Scope::Node => format!("all {} NICs slow ({figures})", suspect.nics.len()),
        Scope::Link => {
            let peer = suspect.peer.map_or_else(|| "?".to_string(), |rank| hosts.get(&rank).map_or_else(|| format!("rank {rank}"), |h| node_of(h)));
            format!("link {nic} to {peer} {} slow ({figures})", suspect.peer_nic.as_deref().unwrap_or("?"))
        }
    }
}

/// The contract's verdict, and per suspect node its drain reason (`efatop: sweep: ...`) and whether it is
/// to be drained (a NIC or the node is slow; a link names both ends and drains neither).
pub fn verdict(heard: &Heard, code: i32) -> (Verdict, Vec<(String, String, bool)>) {
    let Some(sweep) = &heard.verdict else {
        let why = heard.errors.first().cloned().unwrap_or_else(|| format!("the sweep ended with exit code {code} and no verdict"));
        return (Verdict::Unknown(why), Vec::new());
    };
    if sweep.suspects.is_empty() {
        let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        let checked = format!("sweep: {}, {}, nothing slow", plural(sweep.checked.nodes, "node"), plural(sweep.checked.nics, "NIC"));
        return (Verdict::Ok(checked), Vec::new());
    }
    let mut by_node: BTreeMap<String, (Vec<String>, bool)> = BTreeMap::new();
    let mut problems = Vec::new();
    for suspect in &sweep.suspects {
        let node = node_of(&suspect.host);
        let words = short(suspect, &heard.hosts);
        problems.push(format!("{node} {words}"));
        let entry = by_node.entry(node).or_default();
        entry.0.push(words);
        entry.1 |= action(suspect).drains();
    }
    let reasons = by_node
        .into_iter()
        .map(|(node, (words, drainable))| {
            let reason = contract::join_within(&format!("{} sweep: ", contract::REASON_PREFIX), &words, contract::SLURM_REASON_MAX);
            (node, reason, drainable)
        })
        .collect();
    (Verdict::Problems(problems.iter().map(|p| format!("sweep: {p}")).collect()), reasons)
}

#[cfg(test)]
mod tests {
    use super::*;
    use efatop_proto::sweep::Checked;

    fn suspect(scope: Scope, rank: usize, host: &str, nic: Option<&str>) -> Suspect {
        Suspect {
            rank,
            host: host.into(),
            gpu: None,
            nic: nic.map(str::to_string),
            pci: None,
            measured_gbps: 0.24,
            median_gbps: 0.96,
            peers_tried: vec![],
            why: String::new(),
            scope,
            rail: Some(1),
            peer: None,
            peer_nic: None,
            nics: vec![],
        }
    }

    #[test]
    fn suspects_become_reasons_per_node_and_links_are_not_drained() {
        let mut heard = Heard::default();
        heard.hosts.insert(3, "vm:node3".into());
        let mut link = suspect(Scope::Link, 0, "node0.cluster", Some("efa2"));
        link.peer = Some(3);
        link.peer_nic = Some("efa2".into());
        let mut node = suspect(Scope::Node, 1, "node1", None);
        node.nics = vec!["efa0".into(), "efa1".into()];
        heard.verdict = Some(SweepVerdict {
            suspects: vec![suspect(Scope::Nic, 2, "node2", Some("efa1")), node, link],
            checked: efatop_proto::sweep::Checked { nodes: 4, nics: 16 },
        });
        let (verdict, reasons) = verdict(&heard, 3);
        assert_eq!(
            reasons,
            [
                ("node0".to_string(), "efatop: sweep: watch: link efa2 to node3 efa2 slow (0.24 of 0.96 Gbps)".to_string(), false),
                ("node1".to_string(), "efatop: sweep: reboot: all 2 NICs slow (0.24 of 0.96 Gbps)".to_string(), true),
                ("node2".to_string(), "efatop: sweep: reboot: efa1 slow (0.24 of 0.96 Gbps)".to_string(), true),
            ]
        );
        let (npd_line, code) = contract::npd(&verdict);
        assert_eq!(code, 1);
        assert_eq!(npd_line, "efatop: sweep: node2 reboot: efa1 slow (0.24 of 0.96 Gbps) (+2 more)");
    }

    #[test]
    fn no_verdict_is_unknown_and_no_suspect_is_ok() {
        let mut heard = Heard::default();
        heard.take(&ConsumerEvent::Finished { error: Some("rank 2 (node2) did not answer".into()) });
        assert_eq!(verdict(&heard, 1).0, Verdict::Unknown("rank 2 (node2) did not answer".into()));
        let judged = SweepVerdict { suspects: Vec::new(), checked: Checked { nodes: 4, nics: 16 } };
        heard.take(&ConsumerEvent::SweepVerdict(Box::new(judged)));
        assert_eq!(verdict(&heard, 0).0, Verdict::Ok("sweep: 4 nodes, 16 NICs, nothing slow".into()));
    }

    #[test]
    fn every_rank_s_host_comes_from_the_sweep_s_start() {
        let mut heard = Heard::default();
        let node = |rank: usize, host: &str| efatop_proto::sweep::NodeFacts { rank, host: host.into(), ..Default::default() };
        let setup = efatop_proto::sweep::SweepResults { nodes: vec![node(0, "a"), node(1, "b")], ..Default::default() };
        heard.take(&ConsumerEvent::SweepBegin(Box::new(setup)));
        assert_eq!(heard.hosts.into_iter().collect::<Vec<_>>(), [(0, "a".to_string()), (1, "b".to_string())]);
    }
}
