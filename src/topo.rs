//! `efatop topo`: where this node's (or an hwloc XML's) GPUs, NICs and CPUs sit relative to each other, as
//! `nvidia-smi topo -m` shows it, plus which NICs and CPUs a rank on each GPU should use.

use std::io::Write;

use efatop_fabric::{Capabilities, Provider, discover_nics};
use efatop_node::NvlinkSurvey;
use efatop_proto::output::{Line, TOPOLOGY_SCHEMA};
use efatop_proto::topology::GpuLinkSource;
use efatop_topology::{FabricNic, GpuChoice, NodeTopology, Placement, TopologyError};

use crate::cli::TopoArgs;

/// Runs `efatop topo`; returns the exit code (2 for bad input, after one line on stderr).
pub fn topo(args: &TopoArgs) -> i32 {
    match run(args) {
        Ok(()) => 0,
        Err((code, message)) => {
            eprintln!("efatop: error: {message}");
            code
        }
    }
}

fn run(args: &TopoArgs) -> Result<(), (i32, String)> {
    let mut topology = match &args.from_xml {
        Some(path) => NodeTopology::from_xml_file(path).map_err(|err| {
            let shown = path.display();
            (2, match err {
                TopologyError::Read { source, .. } => format!("--from-xml {shown}: cannot read it: {source}"),
                TopologyError::InvalidXml { detail, .. } => {
                    let hint = "`lstopo --of xml FILE` writes one";
                    format!("--from-xml {shown}: not an hwloc XML topology ({detail}); {hint}")
                }
                other => format!("--from-xml {shown}: {other}"),
            })
        })?,
        None => NodeTopology::discover().map_err(|err| (1, err.to_string()))?,
    };
    if args.from_xml.is_none() {
        // Only this machine's NICs are libfabric's to name, and its GPUs NVML's; an XML describes another machine.
        topology.attach_fabric_nics(fabric_nics());
        nvml_gpu_links(&mut topology);
    }
    let placements = placements(&topology, args)?;

    let text = if args.json {
        let report = Report { schema_version: TOPOLOGY_SCHEMA, topology: &topology, placement: &placements };
        Line::<serde_json::Value, Report>::Topology(Box::new(report)).to_json().map_err(|e| (1, e.to_string()))? + "\n"
    } else if placements.is_empty() {
        topology.render_text()
    } else {
        format!("{}\n{}", topology.render_text(), topology.render_placements(&placements))
    };
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        // A reader that stops early (`| head`) is not an error.
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => Err((1, format!("writing to stdout: {err}"))),
        _ => Ok(()),
    }
}

/// `--json`'s `topology` line: its schema version, the topology's own fields in its order, plus
/// `placement` when `--ranks` or `--gpu` asked.
#[derive(serde::Serialize)]
struct Report<'a> {
    schema_version: u32,
    #[serde(flatten)]
    topology: &'a NodeTopology,
    #[serde(skip_serializing_if = "<[Placement]>::is_empty")]
    placement: &'a [Placement],
}

fn placements(topology: &NodeTopology, args: &TopoArgs) -> Result<Vec<Placement>, (i32, String)> {
    if let Some(gpu) = args.gpu {
        // "--gpu 9: GPU 9 does not exist: this node has 8 GPUs (0-7)"
        let placement = topology.placement(0, GpuChoice::Index(gpu)).map_err(|err| (2, format!("--gpu {gpu}: {err}")))?;
        return Ok(vec![placement]);
    }
    let ranks = args.ranks.map_or(0, usize::from);
    (0..ranks).map(|rank| topology.placement(rank, GpuChoice::Auto).map_err(|e| (1, e.to_string()))).collect()
}

/// Replaces hwloc's inferred GPU–GPU cells with NVML's active link counts when NVML can answer for every
/// pair; otherwise the topology keeps hwloc's and says why NVML was not used.
fn nvml_gpu_links(topology: &mut NodeTopology) {
    if topology.gpus.len() < 2 {
        return;
    }
    let answered = NvlinkSurvey::read()
        .and_then(|survey| topology.replace_gpu_links(|a, b| survey.pair(a, b), GpuLinkSource::Nvml));
    if let Err(reason) = answered {
        topology.gpu_link_note = Some(reason);
    }
}

/// The NICs libfabric's efa and tcp providers offer here, for matching to hwloc's. A provider that is
/// missing offers none; that is not an error for `topo`.
fn fabric_nics() -> Vec<FabricNic> {
    [Provider::Efa, Provider::Tcp]
        .into_iter()
        .filter_map(|provider| discover_nics(&provider, Capabilities::MESSAGES).ok())
        .flatten()
        .map(|nic| FabricNic {
            provider: nic.provider.clone(),
            domain: nic.domain.clone(),
            pci_bus_id: nic.pci_address.clone(),
            link_gbps: nic.link_speed_bps.map(|bps| bps as f64 / 1e9),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use efatop_proto::topology::Link;

    #[test]
    fn without_nvml_the_inferred_links_stay_and_the_legend_says_why() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("topology/fixtures/p5.48xlarge.xml");
        let mut topology = NodeTopology::from_xml_file(&path).expect("p5 fixture");
        let Err(reason) = NvlinkSurvey::read() else {
            // A machine with the driver answers for its own GPUs, not the fixture's: nothing to check here.
            return;
        };
        nvml_gpu_links(&mut topology);
        assert_eq!(topology.gpu_link_source, GpuLinkSource::Hwloc);
        assert_eq!(topology.gpu_links[0][1], Link::NvLink(Some(18)));
        assert_eq!(topology.gpu_link_note.as_deref(), Some(reason.as_str()));
        let text = topology.render_text();
        assert!(text.contains(&format!("(NVML not used: {reason})")), "{text}");
        assert!(text.contains("NVLink peak per direction: NV18 = 450 GB/s (18 x 25 GB/s)"), "{text}");
    }
}
