//! The lines above a result table: what ran, where, over what, and how BusBW was computed.

use std::fmt::Write;

use efatop_experiments::RunMetadata;
use efatop_experiments::sizes::format_size;

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

pub fn render_header(meta: &RunMetadata, sizes: &[u64]) -> String {
    let mut hosts = meta.hosts.clone();
    hosts.dedup();
    let nics: Vec<&str> = meta.nics.iter().map(|n| n.domain.as_str()).collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# efatop {} — {} ranks on {} host{} ({}), provider {} [{}], libfabric {}",
        meta.experiment,
        meta.ranks,
        hosts.len(),
        plural(hosts.len()),
        hosts.join(", "),
        meta.provider_stack,
        meta.provider,
        meta.libfabric_version,
    );
    let _ = write!(
        out,
        "# channels: {} over {} NIC{} ({}), {} memory, window {}, warmup {}, iters {}",
        meta.channels,
        meta.distinct_nics,
        plural(meta.distinct_nics),
        nics.join(", "),
        meta.memory,
        meta.window,
        meta.warmup,
        meta.iters,
    );
    if let (Some(first), Some(last)) = (sizes.first(), sizes.last()) {
        let _ = write!(out, ", sizes {}..{}", format_size(*first), format_size(*last));
    }
    out.push('\n');
    let _ = match (meta.link_gbps, meta.link_source.as_str()) {
        (Some(link), "flag") => writeln!(out, "# link speed {link} Gbps per channel (from --link-gbps), used for BusBW"),
        (Some(link), _) => writeln!(out, "# link speed {link} Gbps per channel (reported by the provider), used for BusBW"),
        (None, _) => writeln!(out, "# link speed unknown (the provider reports none): BusBW not computed; pass --link-gbps"),
    };
    if meta.experiment == "alltoall" {
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
        let cpus = placement.pinned_cpus.as_deref().map_or_else(|| "not pinned".to_string(), |c| format!("pinned to CPUs {c}"));
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
