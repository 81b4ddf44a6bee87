//! The text form of a [`NodeTopology`]: `nvidia-smi topo -m`'s matrix, its legend, then per GPU what a
//! rank on it should use. No I/O: the caller prints the string.

use std::fmt::Write;

use efatop_proto::topology::{GpuLinkSource, Link, format_gbytes};

use crate::model::{Nic, NodeTopology};
use crate::placement::Placement;

impl NodeTopology {
    /// The matrix (rows GPUs; columns GPUs, NICs, CPU and NUMA affinity), its legend, the NICs, and per
    /// GPU its nearest and preferred NICs, NUMA node and CPUs.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let host = self.host.as_deref().unwrap_or("unnamed host");
        let origin = if self.source == "this machine" {
            format!("{host} (this machine)")
        } else {
            format!("{host}, from {}", self.source)
        };
        let _ = writeln!(
            out,
            "{origin}: {}, {}, {}",
            plural(self.gpus.len(), "GPU", "GPUs"),
            plural(self.nics.len(), "NIC", "NICs"),
            plural(self.numa_nodes.len(), "NUMA node", "NUMA nodes"),
        );
        if let Some(instance_type) = &self.instance_type {
            let from = if self.source == "this machine" { "DMI product_name" } else { "the XML's efatop.InstanceType" };
            let _ = writeln!(out, "Instance type: {instance_type} (from {from})");
        }
        self.efa_summary(&mut out);
        out.push('\n');
        if self.gpus.is_empty() {
            out.push_str("No GPUs: hwloc sees no NVIDIA GPU (PCI vendor 10de) here.\n\n");
        } else {
            self.matrix(&mut out);
        }
        self.nic_table(&mut out);
        self.other_fabric(&mut out);
        if !self.gpus.is_empty() {
            self.gpu_table(&mut out);
        }
        self.numa_table(&mut out);
        out
    }

    /// One line on the EFA devices: how many, on how many physical NICs, what they carry together, and
    /// what the GPUs' channels (every GPU's preferred NICs) carry.
    fn efa_summary(&self, out: &mut String) {
        let efa: Vec<usize> = self.nics.iter().filter(|nic| nic.kind.is_rdma()).map(|nic| nic.index).collect();
        if efa.is_empty() {
            return;
        }
        let gbps = |indices: &[usize]| self.aggregate_gbps(indices).map_or_else(|| "? Gbps".to_string(), |g| format!("{} Gbps", trim_float(g)));
        let physical = self.physical_nic_count(&efa);
        let on = if physical == efa.len() { String::new() } else { format!(" on {physical} physical NICs") };
        let mut line = format!("RDMA NICs: {} devices{on}, {} of links", efa.len(), gbps(&efa));
        let mut channels: Vec<usize> = self.gpus.iter().flat_map(|gpu| gpu.preferred_nics.iter().copied()).collect();
        channels.sort_unstable();
        channels.dedup();
        if !channels.is_empty() {
            let _ = write!(line, "; the GPUs' channels: {} devices, {}", channels.len(), gbps(&channels));
        }
        let _ = writeln!(out, "{line}");
    }

    fn matrix(&self, out: &mut String) {
        let mut header: Vec<String> = vec![String::new()];
        header.extend((0..self.gpus.len()).map(|i| format!("GPU{i}")));
        header.extend((0..self.nics.len()).map(|k| format!("NIC{k}")));
        header.extend(["CPU Affinity".to_string(), "NUMA Affinity".to_string()]);
        let mut rows = vec![header];
        for gpu in &self.gpus {
            let mut row = vec![format!("GPU{}", gpu.index)];
            row.extend(self.gpu_links[gpu.index].iter().map(Link::to_string));
            row.extend(self.nic_links[gpu.index].iter().map(Link::to_string));
            row.push(gpu.cpus.clone());
            row.push(gpu.numa_node.map_or_else(|| "N/A".to_string(), |n| n.to_string()));
            rows.push(row);
        }
        write_columns(out, &rows, "");
        out.push_str("\nLegend:\n");
        for (word, meaning) in Link::LEGEND {
            let _ = writeln!(out, "  {word:<4} = {meaning}");
        }
        if self.gpus.len() > 1 {
            self.gpu_link_legend(out);
        }
        out.push('\n');
    }

    /// Where the GPU–GPU cells came from, and what each NV# carries.
    fn gpu_link_legend(&self, out: &mut String) {
        match self.gpu_link_source {
            GpuLinkSource::Nvml => out.push_str("  GPU-GPU cells from NVML: each pair's active NVLinks, direct or through NVSwitches\n"),
            GpuLinkSource::Hwloc if self.nvswitches > 0 => {
                let _ = writeln!(
                    out,
                    "  GPU-GPU cells inferred from hwloc: {} NVSwitch PCI device{}, so every pair has the GPU model's NVLinks",
                    self.nvswitches,
                    if self.nvswitches == 1 { "" } else { "s" }
                );
            }
            GpuLinkSource::Hwloc => {
                out.push_str("  GPU-GPU cells from hwloc's PCI tree: no NVSwitch seen (NVLink bridges need NVML to be seen)\n");
            }
        }
        if let Some(note) = &self.gpu_link_note {
            let _ = writeln!(out, "  (NVML not used: {note})");
        }
        // Each distinct NV# with its peak, in the order the matrix first shows them.
        let mut peaks: Vec<String> = Vec::new();
        for (i, j) in (0..self.gpus.len()).flat_map(|i| (0..self.gpus.len()).map(move |j| (i, j))) {
            let Some(pair) = self.pair_link(i, j) else { continue };
            if !matches!(pair.link, Link::NvLink(_)) {
                continue;
            }
            let text = match (pair.peak_gbytes_per_s, pair.per_link_gbytes_per_s) {
                (Some(peak), Some(rate)) => {
                    format!("{} = {} GB/s ({} x {} GB/s)", pair.link, format_gbytes(peak), pair.active_links.unwrap_or(0), format_gbytes(rate))
                }
                _ => format!("{} = rate unknown", pair.link),
            };
            if !peaks.contains(&text) {
                peaks.push(text);
            }
        }
        if !peaks.is_empty() {
            let _ = writeln!(out, "  NVLink peak per direction: {}", peaks.join(", "));
        }
    }

    fn nic_table(&self, out: &mut String) {
        if self.nics.is_empty() {
            out.push_str("No NICs: hwloc sees no network device here.\n\n");
            return;
        }
        out.push_str("NICs:\n");
        let rails = self.rails();
        let rows: Vec<Vec<String>> = self
            .nics
            .iter()
            .map(|nic| {
                let rail = match rails[nic.index] {
                    Some((gpu, rail)) => format!("GPU{gpu} rail {rail}"),
                    None if self.gpus.is_empty() => String::new(),
                    None => "no GPU channel".to_string(),
                };
                let generation = nic.efa_generation().map_or_else(String::new, |g| {
                    let read_only = if nic.native_rdma_write() == Some(false) { ", RDMA read only" } else { "" };
                    format!("EFA v{g}{read_only}")
                });
                let physical = nic.physical_nic.as_ref().map_or_else(String::new, |p| {
                    let link = p.link_gbps.map_or_else(|| "?".to_string(), trim_float);
                    format!("shares {} ({link} Gbps)", p.label)
                });
                vec![
                    format!("NIC{}", nic.index),
                    nic.name.clone(),
                    nic.kind.label().to_string(),
                    nic.pci_bus_id.clone(),
                    nic.pci_id.clone(),
                    nic.link_gbps.map_or_else(|| "- Gbps".to_string(), |g| format!("{} Gbps", trim_float(g))),
                    nic.numa_node.map_or_else(|| "NUMA -".to_string(), |n| format!("NUMA {n}")),
                    if self.gpus.is_empty() { format!("CPUs {}", nic.cpus) } else { String::new() },
                    generation,
                    rail,
                    physical,
                    libfabric_summary(nic),
                ]
            })
            .collect();
        write_columns(out, &rows, "  ");
        out.push('\n');
    }

    fn other_fabric(&self, out: &mut String) {
        if self.other_fabric_nics.is_empty() {
            return;
        }
        out.push_str("libfabric NICs on no PCI device (loopback, virtual):\n");
        for nic in &self.other_fabric_nics {
            let _ = writeln!(out, "  {} {}", nic.provider, nic.domain);
        }
        out.push('\n');
    }

    fn gpu_table(&self, out: &mut String) {
        out.push_str("GPUs:\n");
        for gpu in &self.gpus {
            let _ = writeln!(
                out,
                "  GPU{}  {}  {}  NUMA {}  CPUs {}",
                gpu.index,
                gpu.pci_bus_id,
                gpu.model.as_deref().unwrap_or(&gpu.pci_id),
                gpu.numa_node.map_or_else(|| "-".to_string(), |n| n.to_string()),
                gpu.cpus
            );
            match gpu.nearest_link {
                None => out.push_str("        nearest NICs: none\n"),
                Some(link) => {
                    let sharers: Vec<String> = self
                        .gpus
                        .iter()
                        .filter(|other| other.index != gpu.index && other.nearest_nics == gpu.nearest_nics)
                        .map(|other| format!("GPU{}", other.index))
                        .collect();
                    let shared =
                        if sharers.is_empty() { String::new() } else { format!(", shared with {}", sharers.join(" ")) };
                    let (nearest, preferred) = (self.nic_names(&gpu.nearest_nics), self.nic_names(&gpu.preferred_nics));
                    let _ = writeln!(out, "        nearest NICs ({link}{shared}): {nearest}");
                    let carries = self.aggregate_gbps(&gpu.preferred_nics).map_or_else(String::new, |g| format!(" ({} Gbps)", trim_float(g)));
                    let _ = writeln!(out, "        a rank on GPU{} uses: {preferred}{carries}", gpu.index);
                }
            }
        }
        out.push('\n');
    }

    fn numa_table(&self, out: &mut String) {
        out.push_str("NUMA nodes:\n");
        let rows: Vec<Vec<String>> = self
            .numa_nodes
            .iter()
            .map(|node| {
                vec![
                    format!("NUMA {}", node.os_index),
                    format!("CPUs {}", node.cpus),
                    node.memory_bytes.map_or_else(String::new, |b| format!("{} GiB", b >> 30)),
                ]
            })
            .collect();
        write_columns(out, &rows, "  ");
    }

    fn nic_names(&self, indices: &[usize]) -> String {
        indices.iter().map(|&k| format!("NIC{k} {}", self.nics[k].name)).collect::<Vec<_>>().join(", ")
    }

    /// The placement table: one line per local rank.
    pub fn render_placements(&self, placements: &[Placement]) -> String {
        let mut rows = vec![["rank", "GPU", "PCI bus id", "NICs", "Gbps", "NUMA", "CPUs"].map(String::from).to_vec()];
        for p in placements {
            let indices: Option<Vec<usize>> = p.nics.iter().map(|name| self.nic_by_name(name).map(|nic| nic.index)).collect();
            let gbps = indices.and_then(|indices| self.aggregate_gbps(&indices)).map_or_else(|| "-".to_string(), trim_float);
            rows.push(vec![
                p.local_rank.to_string(),
                p.gpu.map_or_else(|| "-".to_string(), |g| format!("GPU{g}")),
                p.gpu_pci_bus_id.clone().unwrap_or_else(|| "-".to_string()),
                if p.nics.is_empty() { "-".to_string() } else { p.nics.join(",") },
                gbps,
                p.numa_node.map_or_else(|| "-".to_string(), |n| n.to_string()),
                p.cpus.clone(),
            ]);
        }
        let mut out =
            String::from("Placement of local ranks (GPU = local rank; NICs nearest it; CPUs of its NUMA node):\n");
        write_columns(&mut out, &rows, "  ");
        out
    }
}

fn libfabric_summary(nic: &Nic) -> String {
    if nic.libfabric.is_empty() {
        return String::new();
    }
    let domains: Vec<String> = nic.libfabric.iter().map(|f| format!("{} {}", f.provider, f.domain)).collect();
    format!("libfabric: {}", domains.join(", "))
}

/// 100.0 → "100", 2.5 → "2.5".
fn trim_float(value: f64) -> String {
    let text = format!("{value:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Left-aligned columns two spaces apart, no trailing blanks.
fn write_columns(out: &mut String, rows: &[Vec<String>], indent: &str) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width = |c: usize| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns).map(width).collect();
    for row in rows {
        let mut line = String::from(indent);
        for (c, cell) in row.iter().enumerate() {
            let _ = write!(line, "{cell:<width$}  ", width = widths[c]);
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_lose_their_zeros() {
        assert_eq!(trim_float(100.0), "100");
        assert_eq!(trim_float(2.5), "2.5");
        assert_eq!(trim_float(0.1), "0.1");
    }

    #[test]
    fn columns_align() {
        let mut out = String::new();
        let rows = vec![vec!["a".to_string(), "bb".to_string()], vec!["ccc".to_string(), String::new()]];
        write_columns(&mut out, &rows, " ");
        assert_eq!(out, " a    bb\n ccc\n");
    }
}
