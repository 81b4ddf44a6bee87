//! Bytes as `efatop topo --from-xml FILE` reads them: written to a file and loaded from its path as the
//! binary does (hwloc parses the XML in C, so the whole path from file to rendered text is what is tested),
//! then everything `topo` prints: the matrix and lists, the JSON, and placements on every GPU and for
//! local ranks in turn. Anything may be refused with an error; nothing may panic.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use efatop_topology::{GpuChoice, NodeTopology};
use libfuzzer_sys::fuzz_target;

/// One file, rewritten for every input: a new temporary file per input would cost more than hwloc's parse.
fn input_path() -> &'static PathBuf {
    static DIRECTORY: OnceLock<tempfile::TempDir> = OnceLock::new();
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let directory = DIRECTORY.get_or_init(|| tempfile::tempdir().expect("a temporary directory"));
        directory.path().join("topology.xml")
    })
}

fuzz_target!(|xml: &[u8]| {
    let path = input_path();
    std::fs::write(path, xml).expect("the input file can be written");
    let Ok(topology) = NodeTopology::from_xml_file(path) else { return };
    let _ = topology.render_text();
    let _ = serde_json::to_string(&topology).expect("a topology serializes");
    let mut placements = Vec::new();
    for gpu in 0..=topology.gpus.len() {
        // One past the last GPU must be refused, not panicked on.
        if let Ok(placement) = topology.placement(0, GpuChoice::Index(gpu)) {
            placements.push(placement);
        }
    }
    for local_rank in 0..=topology.gpus.len().max(1) {
        if let Ok(placement) = topology.placement(local_rank, GpuChoice::Auto) {
            placements.push(placement);
        }
    }
    let _ = topology.render_placements(&placements);
});
