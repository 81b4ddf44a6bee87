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
    for note in &meta.notes {
        let _ = writeln!(out, "# note: {note}");
    }
    out
}
