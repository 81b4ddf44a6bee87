//! The lines above a result table: what ran, where, over what, and how BusBW was computed.

use efatop_experiments::RunMetadata;
use efatop_experiments::sizes::format_size;

pub fn render_header(meta: &RunMetadata, sizes: &[u64]) -> String {
    let mut hosts = meta.hosts.clone();
    hosts.dedup();
    let mut out = String::new();
    out.push_str(&format!(
        "# efatop {} — {} ranks on {} host{} ({}), provider {} [{}], libfabric {}\n",
        meta.experiment,
        meta.ranks,
        hosts.len(),
        if hosts.len() == 1 { "" } else { "s" },
        hosts.join(", "),
        meta.provider_stack,
        meta.provider,
        meta.libfabric_version,
    ));
    let nics: Vec<String> = meta.nics.iter().map(|n| n.domain.clone()).collect();
    out.push_str(&format!(
        "# channels: {} over {} NIC{} ({}), {} memory, window {}, warmup {}, iters {}",
        meta.channels,
        meta.distinct_nics,
        if meta.distinct_nics == 1 { "" } else { "s" },
        nics.join(", "),
        meta.memory,
        meta.window,
        meta.warmup,
        meta.iters,
    ));
    if let (Some(first), Some(last)) = (sizes.first(), sizes.last()) {
        out.push_str(&format!(", sizes {}..{}", format_size(*first), format_size(*last)));
    }
    out.push('\n');
    match (meta.link_gbps, meta.link_source.as_str()) {
        (Some(link), "flag") => out.push_str(&format!("# link speed {link} Gbps per channel (from --link-gbps), used for BusBW\n")),
        (Some(link), _) => out.push_str(&format!("# link speed {link} Gbps per channel (reported by the provider), used for BusBW\n")),
        (None, _) => out.push_str("# link speed unknown (the provider reports none): BusBW not computed; pass --link-gbps\n"),
    }
    for note in &meta.notes {
        out.push_str(&format!("# note: {note}\n"));
    }
    out
}
