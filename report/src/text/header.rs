//! The lines above a result table: what ran, where, over what, and how BusBW was computed.

use std::fmt::Write;

use crate::reference;
use efatop_proto::results::LinkSource;
use efatop_proto::{Experiment, RunMetadata};
use efatop_proto::sizes::format_size;
use efatop_proto::words::plural;

pub fn render_header(meta: &RunMetadata, sizes: &[u64]) -> String {
    // Each host once, in rank order (ranks placed round-robin over hosts repeat them out of order).
    let mut seen = std::collections::HashSet::new();
    let hosts: Vec<&str> = meta.hosts.iter().map(String::as_str).filter(|host| seen.insert(*host)).collect();
    let mut out = String::new();
    let sizes = match (sizes.first(), sizes.last()) {
        (Some(first), Some(last)) => format!(", sizes {}..{}", format_size(*first), format_size(*last)),
        _ => String::new(),
    };
    if hosts.is_empty() {
        // A run that ended before its ranks met (the results file of a failed start): no hosts, NICs or
        // provider stack to show, only what was asked for.
        return early_header(meta);
    }
    let host_list = format!("{} on {} ({})", plural(meta.ranks, "rank"), plural(hosts.len(), "host"), host_names(&hosts));
    if meta.experiment == Experiment::Ipc {
        // No NIC moves ipc's bytes: the header names the GPUs (in the rank lines) and the NVLink peak.
        let _ = writeln!(out, "# efatop ipc — {host_list}, CUDA IPC between the ranks' GPUs");
        let _ = writeln!(out, "# {} memory, warmup {}, iters {}{sizes}", meta.memory, meta.warmup, meta.iters);
        let _ = match (meta.link_gbps, &meta.link_source) {
            (Some(link), LinkSource::Nvlink(Some(source))) => writeln!(
                out,
                "# NVLink peak {:.0} GB/s ({link:.0} Gbps) per direction ({source}), used for BusBW",
                link / 8.0
            ),
            _ => writeln!(out, "# NVLink peak unknown (no NVML, no NVLink seen): BusBW not computed"),
        };
    } else {
        let nics: Vec<&str> = meta.nics.iter().map(|n| n.domain.as_str()).collect();
        let fabric = if meta.fabric.is_empty() { String::new() } else { format!(", fabric {}", meta.fabric) };
        let api = if meta.libfabric_api.is_empty() { String::new() } else { format!(" (API {})", meta.libfabric_api) };
        let _ = writeln!(
            out,
            "# efatop {} — {host_list}, provider {} [{}]{fabric}, libfabric {}{api}",
            meta.experiment, meta.provider_stack, meta.provider, meta.libfabric_version,
        );
        let _ = writeln!(
            out,
            "# channels: {} over {} ({}), {} memory, window {}, warmup {}, iters {}{sizes}",
            meta.channels,
            plural(meta.distinct_nics, "NIC"),
            nics.join(", "),
            meta.memory,
            meta.window,
            meta.warmup,
            meta.iters,
        );
        let _ = match (meta.link_gbps, &meta.link_source) {
            (Some(link), LinkSource::Flag) => writeln!(out, "# link speed {link} Gbps per channel (from --link-gbps), used for BusBW"),
            (Some(link), _) => writeln!(out, "# link speed {link} Gbps per channel (reported by the provider), used for BusBW"),
            (None, _) => writeln!(out, "# link speed unknown (the provider reports none): BusBW not computed; pass --link-gbps"),
        };
    }
    if let Some(line) = instance_line(meta) {
        out.push_str(&line);
    }
    if meta.hang_timeout_s > 0 {
        let _ = writeln!(
            out,
            "# liveness: a rank that exits is named at once; one silent for {} s is named hung (--hang-timeout)",
            meta.hang_timeout_s
        );
    }
    if !meta.telemetry_relays.is_empty() {
        let _ = writeln!(
            out,
            "# telemetry: {} relayed to rank 0 over one connection a host, by the host's lowest rank ({}{})",
            efatop_proto::words::plural(meta.telemetry_relays.len(), "host"),
            meta.telemetry_relays.iter().take(6).map(ToString::to_string).collect::<Vec<_>>().join(", "),
            if meta.telemetry_relays.len() > 6 { ", …" } else { "" }
        );
    }
    if meta.experiment == Experiment::Alltoall {
        let _ = writeln!(
            out,
            "# all-to-all: Gbps = one rank's buffer (size) per iteration time, as the seed table; BusBW = that over \
             link x channels used; nccl-tests busbw = (N-1) x size per iteration time (what each rank puts on the wire), \
             in its own table below"
        );
    }
    // Where each rank runs (a few lines; large runs keep the detail in the results file).
    for placement in meta.placements.iter().take(8) {
        let gpu = placement.gpu.map_or_else(|| "no GPU".to_string(), |g| format!("GPU {g}"));
        let cpus = match (placement.pinned_cpus.as_deref(), placement.hot_cpu) {
            (Some(set), Some(hot)) => format!("pinned to CPUs {set}, its hot path alone on CPU {hot}"),
            (Some(set), None) => format!("pinned to CPUs {set}"),
            (None, _) => "not pinned".to_string(),
        };
        let _ = writeln!(out, "# rank {} on {}: {gpu}, NICs {}, {cpus}", placement.rank, placement.host, placement.nics.join(","));
    }
    if meta.placements.len() > 8 {
        let _ = writeln!(out, "# ... {} more ranks: see the results file", meta.placements.len() - 8);
    }
    for note in &meta.notes {
        let _ = writeln!(out, "# note: {note}");
    }
    out
}

/// The instance type the run found, and what its figures are held against: `# instance type p5.48xlarge
/// (DMI product name)`, and whether efatop has reference figures for it; for a run over another provider
/// than efa, that the figures it is shown against were measured over efa.
fn instance_line(meta: &RunMetadata) -> Option<String> {
    let instance_type = meta.instance_type.as_deref()?;
    let what = if !reference::is_listed(instance_type) {
        format!(": efatop has no reference figures for it ({})", reference::DOC)
    } else if !reference::has_figures(instance_type, &meta.experiment) {
        format!(": {}, % of expected not shown ({})", reference::no_figure(instance_type, &meta.experiment), reference::DOC)
    } else if meta.experiment != Experiment::Ipc && meta.provider != "efa" {
        format!(
            "; % of expected against its published figures ({}), which were measured over efa: this run's provider is {}, \
             not efa",
            reference::DOC,
            meta.provider
        )
    } else {
        format!("; % of expected against its published figures ({})", reference::DOC)
    };
    Some(format!("# instance type {instance_type} (DMI product name){what}\n"))
}

/// The header of a run that never set up its world: what was asked for, and that nothing more is known.
fn early_header(meta: &RunMetadata) -> String {
    let provider = if meta.provider.is_empty() { String::new() } else { format!(", provider {} asked for", meta.provider) };
    let memory = if meta.memory.is_empty() { String::new() } else { format!("{} memory, ", meta.memory) };
    let mut out = format!(
        "# efatop {} — {}{provider}, libfabric {}: the run ended before its ranks met (no hosts, NICs or channels known)\n",
        meta.experiment,
        plural(meta.ranks, "rank"),
        meta.libfabric_version
    );
    let _ = writeln!(out, "# {memory}window {}, warmup {}, iters {}", meta.window, meta.warmup, meta.iters);
    for note in &meta.notes {
        let _ = writeln!(out, "# note: {note}");
    }
    out
}

/// The hosts' names for the header's first line: all of a small run's, the first few of a fleet's.
fn host_names(hosts: &[&str]) -> String {
    const SHOWN: usize = 8;
    if hosts.len() <= SHOWN {
        return hosts.join(", ");
    }
    format!("{}, … and {} more", hosts[..SHOWN].join(", "), hosts.len() - SHOWN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_counted_once_each_and_a_fleets_are_not_all_listed() {
        let mut meta = crate::text::table::tests::sample().metadata;
        // Round-robin over two emulated nodes: each host once, in rank order.
        meta.ranks = 4;
        meta.hosts = ["m:node0", "m:node1", "m:node0", "m:node1"].iter().map(ToString::to_string).collect();
        let header = render_header(&meta, &[1 << 20]);
        assert!(header.contains("— 4 ranks on 2 hosts (m:node0, m:node1),"), "{header}");
        meta.ranks = 32768;
        meta.hosts = (0..32768).map(|rank| format!("p5-node-{:04}", rank / 8)).collect();
        let first_line = render_header(&meta, &[1 << 20]).lines().next().unwrap_or_default().to_string();
        assert!(first_line.contains("32768 ranks on 4096 hosts (p5-node-0000, "), "{first_line}");
        assert!(first_line.contains("p5-node-0007, … and 4088 more)"), "{first_line}");
        assert!(first_line.len() < 400, "{first_line}");
    }

    #[test]
    fn ipc_names_the_nvlink_peak_not_a_nic() {
        let mut meta = crate::text::table::tests::sample().metadata;
        meta.experiment = Experiment::Ipc;
        meta.memory = "device".into();
        meta.link_gbps = Some(3600.0);
        meta.link_source = serde_json::from_value("nvlink: NVML, 18 links x 25 GB/s".into()).expect("a link source");
        let header = render_header(&meta, &[1 << 20, 1 << 30]);
        assert!(header.starts_with("# efatop ipc — 2 ranks on 1 host (node-a), CUDA IPC between the ranks' GPUs\n"), "{header}");
        assert!(header.contains("# device memory, warmup 1, iters 10, sizes 1M..1G\n"), "{header}");
        assert!(header.contains("# NVLink peak 450 GB/s (3600 Gbps) per direction (NVML, 18 links x 25 GB/s), used for BusBW\n"));
        assert!(!header.contains("provider") && !header.contains("NIC"), "{header}");
        meta.link_gbps = None;
        meta.link_source = LinkSource::Nvlink(None);
        assert!(render_header(&meta, &[]).contains("# NVLink peak unknown (no NVML, no NVLink seen): BusBW not computed\n"));
        // Other experiments keep their fabric lines.
        let fabric = render_header(&crate::text::table::tests::sample().metadata, &[4096]);
        assert!(fabric.contains("provider shm [shm]") && fabric.contains("# link speed 100 Gbps per channel (from --link-gbps)"));
    }

    #[test]
    fn a_run_that_ended_before_its_ranks_met_shows_no_empty_hosts_or_nics() {
        let meta = RunMetadata {
            experiment: efatop_proto::Experiment::Write,
            provider: "nosuchprov".into(),
            libfabric_version: "1.17".into(),
            ranks: 2,
            window: 1,
            warmup: 3,
            iters: 20,
            ..RunMetadata::default()
        };
        let header = render_header(&meta, &[]);
        assert_eq!(
            header,
            "# efatop write — 2 ranks, provider nosuchprov asked for, libfabric 1.17: the run ended before its ranks met (no \
             hosts, NICs or channels known)\n# window 1, warmup 3, iters 20\n"
        );
        let mut one = crate::text::table::tests::sample().metadata;
        one.distinct_nics = 1;
        assert!(render_header(&one, &[4096]).contains(" over 1 NIC ("), "{}", render_header(&one, &[4096]));
    }
}
