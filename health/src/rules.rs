//! The rules: each looks at what was observed against the expected layout and gives one `ok` (or
//! `skipped`, `unknown`) finding, or one finding per thing that is wrong.

use std::fmt::Write as _;

use efatop_topology::{NicKind as LayoutNicKind, NodeTopology};

use efatop_node::node::{PciFunction, PcieLink, RdmaDevice};
use efatop_node::xid;
use efatop_proto::action::Action;

use super::{Expected, Finding, Libfabric, LibfabricFacts, Observed, Rule, Status};

/// The counters whose growth is a fault: those fleets alert on (EFA's `retrans_timeout_events`,
/// `impaired_remote_conn_events`, `unresponsive_remote_events`, `rx_drops`), failed RDMA work requests,
/// admin commands that failed or never completed, and (out-of-tree driver with kernel verbs, seen on the
/// EFA v3/v4 fake nodes) memory registrations that failed.
pub const WATCHED_COUNTERS: &[&str] = &[
    "impaired_remote_conn_events",
    "unresponsive_remote_events",
    "retrans_timeout_events",
    "rx_drops",
    "rdma_read_wr_err",
    "rdma_write_wr_err",
    "cmds_err",
    "no_completion_cmds",
    "alloc_mr_err",
    "get_dma_mr_err",
];

/// Every rule's findings, in [`Rule::ALL`] order.
pub fn evaluate(observed: &Observed, expected: &Expected) -> Vec<Finding> {
    let layout = expected.layout.as_ref();
    let efa: Vec<&RdmaDevice> = observed.rdma.iter().filter(|d| d.is_efa()).collect();
    let mut findings = vec![instance(observed, expected)];
    findings.extend(efa_devices(observed, layout, &efa));
    findings.extend(efa_ports(layout, &efa));
    findings.extend(efa_counters(observed, &efa));
    findings.extend(rails(observed));
    findings.extend(numa(observed, layout, &efa));
    findings.extend(pcie(observed, layout, &efa));
    findings.extend(pcie_link(observed, layout, &efa));
    findings.extend(gpus(observed, layout));
    findings.extend(gpu_xid(observed, layout, &efa));
    findings.extend(gpu_memory(observed, layout));
    findings.extend(gpudirect(observed, layout, &efa));
    findings.push(memlock(observed, layout, &efa));
    findings.extend(libfabric(observed, layout, &efa));
    findings.extend(super::traffic::traffic(observed));
    findings
}

fn ok(rule: Rule, message: String) -> Finding {
    let short = format!("{} ok", rule.name());
    Finding::new(rule, Status::Ok, None, message, short)
}

fn skipped(rule: Rule, message: String) -> Finding {
    let short = format!("{} not checked", rule.name());
    Finding::new(rule, Status::Skipped, None, message, short)
}

/// EFA is expected here: the layout has some, or some are found.
fn expects_efa(layout: Option<&NodeTopology>, efa: &[&RdmaDevice]) -> bool {
    layout.is_some_and(|layout| layout_efa(layout).next().is_some()) || !efa.is_empty()
}

/// More missing EFA than this are one finding (a driver that did not load), not one each.
const MISSING_ONE_BY_ONE: usize = 3;

fn layout_efa(layout: &NodeTopology) -> impl Iterator<Item = &efatop_topology::Nic> {
    layout.nics.iter().filter(|nic| nic.kind == LayoutNicKind::Efa)
}

/// The GPUs a layout NIC sits next to, as `GPU 0` or `GPUs 0,1`.
fn gpus_of_nic(layout: &NodeTopology, nic_index: usize) -> String {
    let gpus: Vec<String> =
        layout.gpus.iter().filter(|gpu| gpu.nearest_nics.contains(&nic_index)).map(|gpu| gpu.index.to_string()).collect();
    match gpus.len() {
        0 => "no GPU".into(),
        1 => format!("GPU {}", gpus[0]),
        _ => format!("GPUs {}", gpus.join(",")),
    }
}

/// The observed device at a layout NIC's place: by PCI address, else by name.
fn found<'a>(efa: &[&'a RdmaDevice], nic: &efatop_topology::Nic) -> Option<&'a RdmaDevice> {
    efa.iter().find(|d| d.pci_address() == Some(nic.pci_bus_id.as_str())).or_else(|| efa.iter().find(|d| d.name == nic.name)).copied()
}

fn describe_layout(layout: &NodeTopology) -> String {
    let efa: Vec<&efatop_topology::Nic> = layout_efa(layout).collect();
    let speed = efa.first().and_then(|nic| nic.link_gbps).map_or(String::new(), |g| format!(" at {g:.0} Gbps"));
    format!("{} GPUs, {} EFA{speed}", layout.gpus.len(), efa.len())
}

fn instance(observed: &Observed, expected: &Expected) -> Finding {
    if let (None, Some(file)) = (&expected.instance_type, &observed.product_name_unreadable) {
        return Finding::new(
            Rule::Instance,
            Status::Unknown,
            None,
            format!("{file}: the instance type cannot be read (give --instance-type): device counts, NUMA nodes and PCIe placement are not checked"),
            "instance type unreadable".into(),
        );
    }
    match (&expected.instance_type, &expected.layout) {
        (Some(name), Some(layout)) => ok(Rule::Instance, format!("{name} ({}): expects {}", expected.source, describe_layout(layout))),
        (Some(name), None) => skipped(
            Rule::Instance,
            format!(
                "{name} ({}) has no built-in layout (efatop knows {}): device counts, NUMA nodes and PCIe placement are not checked",
                expected.source,
                efatop_topology::known_instance_types().collect::<Vec<_>>().join(", ")
            ),
        ),
        (None, _) => skipped(
            Rule::Instance,
            format!(
                "no instance type: {} cannot be read (give --instance-type): device counts, NUMA nodes and PCIe placement are not checked",
                observed.root.join("sys/class/dmi/id/product_name").display()
            ),
        ),
    }
}

fn efa_devices(observed: &Observed, layout: Option<&NodeTopology>, efa: &[&RdmaDevice]) -> Vec<Finding> {
    let Some(layout) = layout else {
        if efa.is_empty() {
            return vec![Finding::new(
                Rule::EfaDevices,
                Status::Unknown,
                None,
                format!("no EFA devices under {} and no layout to expect any", observed.root.join("sys/class/infiniband").display()),
                "no EFA devices".into(),
            )];
        }
        return vec![ok(Rule::EfaDevices, format!("{} EFA devices (no layout to compare with)", efa.len()))];
    };
    let expected: Vec<(usize, &efatop_topology::Nic)> =
        layout.nics.iter().enumerate().filter(|(_, nic)| nic.kind == LayoutNicKind::Efa).collect();
    let present = expected.iter().filter(|(_, nic)| found(efa, nic).is_some()).count();
    let mut findings = Vec::new();
    let missing: Vec<&str> = expected.iter().filter(|(_, nic)| found(efa, nic).is_none()).map(|(_, nic)| nic.name.as_str()).collect();
    if missing.len() > MISSING_ONE_BY_ONE {
        findings.push(Finding::new(
            Rule::EfaDevices,
            Status::Problem,
            None,
            format!("{} of {} EFA devices are missing ({}): is the efa driver loaded?", missing.len(), expected.len(), missing.join(", ")),
            format!("{} of {} EFA missing", missing.len(), expected.len()),
        ));
    }
    for (index, nic) in expected.iter().filter(|_| missing.len() <= MISSING_ONE_BY_ONE) {
        if found(efa, nic).is_none() {
            findings.push(Finding::new(
                Rule::EfaDevices,
                Status::Problem,
                Some(&nic.name),
                format!(
                    "{} ({}, next to {}) is missing: {present} of {} EFA devices present",
                    nic.name,
                    nic.pci_bus_id,
                    gpus_of_nic(layout, *index),
                    expected.len()
                ),
                format!("{} missing ({present}/{} EFA)", nic.name, expected.len()),
            ));
        }
    }
    for device in efa {
        let known = expected.iter().any(|(_, nic)| device.pci_address() == Some(nic.pci_bus_id.as_str()) || device.name == nic.name);
        if !known {
            let address = device.pci_address().unwrap_or("no PCI address");
            findings.push(Finding::new(
                Rule::EfaDevices,
                Status::Problem,
                Some(&device.name),
                format!("{} ({address}) is not an EFA this instance type has", device.name),
                format!("{} unexpected EFA", device.name),
            ));
        }
    }
    if findings.is_empty() {
        findings.push(ok(Rule::EfaDevices, format!("{present} of {} EFA devices present", expected.len())));
    }
    findings
}

fn efa_ports(layout: Option<&NodeTopology>, efa: &[&RdmaDevice]) -> Vec<Finding> {
    if efa.is_empty() {
        return vec![skipped(Rule::EfaPorts, "no EFA devices".into())];
    }
    let expected_gbps = |device: &RdmaDevice| {
        let layout = layout?;
        layout_efa(layout).find(|nic| device.pci_address() == Some(nic.pci_bus_id.as_str()) || device.name == nic.name)?.link_gbps
    };
    let mut findings = Vec::new();
    let mut ports = 0;
    for device in efa {
        if device.ports.is_empty() {
            findings.push(Finding::new(
                Rule::EfaPorts,
                Status::Unknown,
                Some(&device.name),
                format!("{} shows no ports in sysfs", device.name),
                format!("{} no ports", device.name),
            ));
        }
        for port in &device.ports {
            ports += 1;
            let state = port.state.as_deref().unwrap_or("unknown");
            if !port.is_active() {
                let phys = port.phys_state.as_deref().map_or(String::new(), |p| format!(", physical state {p}"));
                let status = if port.state.is_none() { Status::Unknown } else { Status::Problem };
                findings.push(Finding::new(
                    Rule::EfaPorts,
                    status,
                    Some(&device.name),
                    format!("{} port {} is {state}{phys}: nothing crosses this NIC", device.name, port.port),
                    format!("{} port {} {state}", device.name, port.port),
                ));
                continue;
            }
            if let (Some(want), rate) = (expected_gbps(device), port.rate_gbps) {
                if !matches!(rate, Some(rate) if (rate - want).abs() <= 0.5) {
                    let got = rate.map_or("no rate".to_string(), |r| format!("{r:.0} Gb/sec"));
                    findings.push(Finding::new(
                        Rule::EfaPorts,
                        Status::Problem,
                        Some(&device.name),
                        format!("{} port {} links at {got}, not the {want:.0} Gb/sec of this type", device.name, port.port),
                        format!("{} port {} at {got}, not {want:.0}", device.name, port.port),
                    ));
                }
            }
        }
    }
    if findings.is_empty() {
        let speeds: std::collections::BTreeSet<String> =
            efa.iter().flat_map(|d| d.ports.iter()).filter_map(|p| p.rate_gbps).map(|r| format!("{r:.0}")).collect();
        let speeds: Vec<String> = speeds.into_iter().collect();
        findings.push(ok(Rule::EfaPorts, format!("{ports} ports ACTIVE at {} Gb/sec", speeds.join("/"))));
    }
    findings
}

/// At most this many unreadable files are named in one finding's sentence; the rest are counted.
const FILES_NAMED: usize = 8;

fn efa_counters(observed: &Observed, efa: &[&RdmaDevice]) -> Vec<Finding> {
    if efa.is_empty() {
        return vec![skipped(Rule::EfaCounters, "no EFA devices".into())];
    }
    let seconds = observed.window.as_secs_f64();
    let is_efa = |nic: &str| efa.iter().any(|d| d.name == nic);
    let mut findings = Vec::new();
    // Files that hold no count: the counters of that NIC cannot be judged.
    let mut unreadable: std::collections::BTreeMap<&str, Vec<&efatop_node::Unreadable>> = std::collections::BTreeMap::new();
    for (nic, file) in observed.unreadable_counters.iter().filter(|(nic, _)| is_efa(nic)) {
        unreadable.entry(nic.as_str()).or_default().push(file);
    }
    for (nic, files) in unreadable {
        let named: Vec<String> = files.iter().take(FILES_NAMED).map(ToString::to_string).collect();
        let more = files.len().saturating_sub(FILES_NAMED);
        let more = if more > 0 { format!(" (+{more} more)") } else { String::new() };
        let counters: Vec<String> =
            files.iter().take(3).map(|file| file.path.file_name().map_or_else(String::new, |name| name.to_string_lossy().into_owned())).collect();
        findings.push(Finding::new(
            Rule::EfaCounters,
            Status::Unknown,
            Some(nic),
            format!("{nic}: {}{more}: these counters cannot be read, so their growth is not judged", named.join("; ")),
            format!("{nic} {} unreadable", counters.join(",")),
        ));
    }
    // Counters that went back: reset, not growth.
    let mut resets: std::collections::BTreeMap<&str, Vec<&super::Reset>> = std::collections::BTreeMap::new();
    for reset in observed.resets.iter().filter(|reset| is_efa(&reset.nic)) {
        resets.entry(reset.nic.as_str()).or_default().push(reset);
    }
    for (nic, resets) in resets {
        let listed: Vec<String> = resets.iter().map(|r| format!("{} went back from {} to {}", r.counter, r.before, r.after)).collect();
        findings.push(Finding::new(
            Rule::EfaCounters,
            Status::Unknown,
            Some(nic),
            format!(
                "{nic}: {} in {seconds:.1} s: its counters were reset (a driver reload, the device created again), which is not growth; what grew meanwhile cannot be told",
                listed.join(", ")
            ),
            format!("{nic} counters reset"),
        ));
    }
    let mut by_nic: std::collections::BTreeMap<&str, Vec<&super::Growth>> = std::collections::BTreeMap::new();
    for growth in observed.grown.iter().filter(|g| is_efa(&g.nic)) {
        by_nic.entry(growth.nic.as_str()).or_default().push(growth);
    }
    for (nic, grown) in by_nic {
        let mut message = format!("{nic}:");
        let mut short = nic.to_string();
        for growth in &grown {
            let _ = write!(message, " {} +{}", growth.counter, growth.by);
            let _ = write!(short, " {} +{}", growth.counter, growth.by);
        }
        let _ = write!(message, " in {seconds:.1} s");
        findings.push(Finding::new(Rule::EfaCounters, Status::Problem, Some(nic), message, short));
    }
    if findings.is_empty() {
        findings.push(ok(
            Rule::EfaCounters,
            format!("no error counter grew in {seconds:.1} s on {} EFA ({})", efa.len(), WATCHED_COUNTERS[..4].join(", ")),
        ));
    }
    findings
}

fn rails(observed: &Observed) -> Vec<Finding> {
    let judged: Vec<_> = observed.rails.iter().filter(|load| load.ratio.is_some()).collect();
    if judged.is_empty() {
        return vec![skipped(Rule::Rails, "no rail carried traffic during the window: rail balance not judged".into())];
    }
    let off: Vec<Finding> = judged
        .iter()
        .filter(|load| load.off)
        .map(|load| {
            let ratio = load.ratio.unwrap_or(0.0);
            Finding::new(
                Rule::Rails,
                Status::Problem,
                Some(&load.nic),
                format!(
                    "{} (GPU {}, rail {}) carried {:.2} Gbps, {ratio:.2}x its rail's median of {:.2} Gbps",
                    load.nic, load.gpu, load.rail, load.gbps, load.rail_median_gbps
                ),
                format!("{} {ratio:.2}x rail {} median", load.nic, load.rail),
            )
        })
        .collect();
    if off.is_empty() {
        vec![ok(Rule::Rails, format!("{} NICs within half of their rail's median", judged.len()))]
    } else {
        off
    }
}

fn numa(observed: &Observed, layout: Option<&NodeTopology>, efa: &[&RdmaDevice]) -> Vec<Finding> {
    let Some(layout) = layout else { return vec![skipped(Rule::Numa, "no layout for this instance type".into())] };
    let mut findings = Vec::new();
    let mut judged = 0;
    let mut compare = |what: &str, short_what: &str, function: Option<&PciFunction>, want: Option<u32>| {
        let (Some(function), Some(want)) = (function, want) else { return };
        judged += 1;
        match function.numa_node {
            Some(got) if got == want => {}
            Some(got) => findings.push(Finding::new(
                Rule::Numa,
                Status::Problem,
                Some(short_what),
                format!("{what} is on NUMA node {got}, not {want}: its traffic crosses between sockets"),
                format!("{short_what} on NUMA {got}, not {want}"),
            )),
            None => findings.push(Finding::new(
                Rule::Numa,
                Status::Unknown,
                Some(short_what),
                format!("{what} has no NUMA node in sysfs (expected {want})"),
                format!("{short_what} NUMA unknown"),
            )),
        }
    };
    for nic in layout_efa(layout) {
        if let Some(device) = found(efa, nic) {
            compare(&format!("{} ({})", device.name, nic.pci_bus_id), &device.name, device.pci.as_ref(), nic.numa_node);
        }
    }
    for gpu in &layout.gpus {
        let function = observed.gpus.iter().find(|f| f.address == gpu.pci_bus_id);
        compare(&format!("GPU {} ({})", gpu.index, gpu.pci_bus_id), &format!("GPU {}", gpu.index), function, gpu.numa_node);
    }
    if findings.is_empty() {
        findings.push(ok(Rule::Numa, format!("{judged} EFA and GPUs on their NUMA nodes")));
    }
    findings
}

fn pcie(observed: &Observed, layout: Option<&NodeTopology>, efa: &[&RdmaDevice]) -> Vec<Finding> {
    let Some(layout) = layout else { return vec![skipped(Rule::Pcie, "no layout for this instance type".into())] };
    let mut findings = Vec::new();
    let mut pairs = 0;
    for gpu in &layout.gpus {
        let Some(gpu_function) = observed.gpus.iter().find(|f| f.address == gpu.pci_bus_id) else { continue };
        for &nic_index in &gpu.nearest_nics {
            let Some(nic) = layout.nics.get(nic_index) else { continue };
            let Some(function) = found(efa, nic).and_then(|d| d.pci.as_ref()) else { continue };
            pairs += 1;
            if !gpu_function.shares_switch_with(function) {
                let name = found(efa, nic).map_or(nic.name.as_str(), |d| d.name.as_str());
                findings.push(Finding::new(
                    Rule::Pcie,
                    Status::Problem,
                    Some(name),
                    format!(
                        "{name} ({}) is not behind GPU {}'s PCIe switch ({}): GPUDirect traffic between them crosses the CPU",
                        function.address, gpu.index, gpu.pci_bus_id
                    ),
                    format!("{name} off GPU {}'s PCIe switch", gpu.index),
                ));
            }
        }
    }
    if findings.is_empty() {
        if pairs == 0 {
            return vec![skipped(Rule::Pcie, "no GPU and EFA of the layout found to place".into())];
        }
        findings.push(ok(Rule::Pcie, format!("{pairs} GPU-EFA pairs share their PCIe switch")));
    }
    findings
}

fn gpus(observed: &Observed, layout: Option<&NodeTopology>) -> Vec<Finding> {
    let Some(layout) = layout.filter(|layout| !layout.gpus.is_empty()) else {
        return vec![skipped(Rule::Gpus, format!("{} NVIDIA GPUs; no layout to compare with", observed.gpus.len()))];
    };
    let present = layout.gpus.iter().filter(|gpu| observed.gpus.iter().any(|f| f.address == gpu.pci_bus_id)).count();
    let mut findings: Vec<Finding> = layout
        .gpus
        .iter()
        .filter(|gpu| !observed.gpus.iter().any(|f| f.address == gpu.pci_bus_id))
        .map(|gpu| {
            let subject = format!("GPU {}", gpu.index);
            Finding::new(
                Rule::Gpus,
                Status::Problem,
                Some(&subject),
                format!("GPU {} ({}) is missing: {present} of {} NVIDIA GPUs on the PCI bus", gpu.index, gpu.pci_bus_id, layout.gpus.len()),
                format!("GPU {} missing ({present}/{})", gpu.index, layout.gpus.len()),
            )
        })
        .collect();
    if findings.is_empty() {
        findings.push(ok(Rule::Gpus, format!("{present} of {} NVIDIA GPUs present", layout.gpus.len())));
    }
    findings
}

/// A GPU's index: the layout's where it places the address, else its place among the GPUs found (the
/// PCI order nvidia-smi numbers them in).
fn gpu_index(observed: &Observed, layout: Option<&NodeTopology>, address: &str) -> Option<usize> {
    let laid_out = layout.and_then(|layout| layout.gpus.iter().find(|gpu| gpu.pci_bus_id.eq_ignore_ascii_case(address)).map(|gpu| gpu.index));
    laid_out.or_else(|| observed.gpus.iter().position(|f| f.address == address))
}

/// The EFA devices behind the same PCIe switch as `function`, by name.
fn nics_on_switch(function: &PciFunction, efa: &[&RdmaDevice]) -> Vec<String> {
    efa.iter().filter(|d| d.pci.as_ref().is_some_and(|pci| function.shares_switch_with(pci))).map(|d| d.name.clone()).collect()
}

fn gbps_text(gbps: f64) -> String {
    format!("{gbps:.0} Gbps")
}

fn pcie_link(observed: &Observed, layout: Option<&NodeTopology>, efa: &[&RdmaDevice]) -> Vec<Finding> {
    // (name for messages, subject, function, what it needs in Gbps, need's words)
    let mut devices: Vec<(String, String, &PciFunction, Option<f64>, &str)> = Vec::new();
    for function in &observed.gpus {
        let name = gpu_index(observed, layout, &function.address).map_or_else(|| format!("GPU {}", function.address), |i| format!("GPU {i}"));
        // A GPU uses its whole link (host copies, GPUDirect peers): it needs what it can do.
        let need = function.link.as_ref().and_then(PcieLink::bandwidths).map(|(_, max)| max);
        devices.push((name.clone(), name, function, need, "the link it can train at"));
    }
    for device in efa {
        let Some(function) = device.pci.as_ref() else { continue };
        let ports: f64 = device.ports.iter().filter_map(|port| port.rate_gbps).sum();
        let layout_rate = layout.and_then(|layout| {
            layout_efa(layout).find(|nic| device.pci_address() == Some(nic.pci_bus_id.as_str()) || device.name == nic.name)?.link_gbps
        });
        let need = layout_rate.or((ports > 0.0).then_some(ports));
        devices.push((device.name.clone(), device.name.clone(), function, need, "its line rate"));
    }
    let with_link: Vec<_> = devices.iter().filter(|(_, _, function, _, _)| function.link.is_some()).collect();
    if with_link.is_empty() {
        return vec![skipped(Rule::PcieLink, "no GPU or EFA shows current_link_width/max_link_width in sysfs".into())];
    }
    let mut findings = Vec::new();
    // The kernel shows the link files of every PCIe function: one without them, beside others that have
    // them, cannot be judged.
    for (name, subject, function, ..) in devices.iter().filter(|(_, _, function, _, _)| function.link.is_none()) {
        findings.push(Finding::new(
            Rule::PcieLink,
            Status::Unknown,
            Some(subject),
            format!(
                "{name} ({}) has no current_link_width, current_link_speed, max_link_width or max_link_speed in sysfs, which the other devices have: its link cannot be judged",
                function.address
            ),
            format!("{name} PCIe link files missing"),
        ));
    }
    for (name, subject, function, need, need_words) in &with_link {
        let Some(link) = function.link.as_ref() else { continue };
        let now = PcieLink::describe(link.width, link.speed_gts);
        let max = PcieLink::describe(link.max_width, link.max_speed_gts);
        if !link.unreadable.is_empty() {
            let files: Vec<String> = link.unreadable.iter().map(ToString::to_string).collect();
            let names: Vec<String> =
                link.unreadable.iter().filter_map(|file| file.path.file_name()).map(|name| name.to_string_lossy().into_owned()).collect();
            findings.push(Finding::new(
                Rule::PcieLink,
                Status::Unknown,
                Some(subject),
                format!("{name} ({}): {}: its PCIe link cannot be judged", function.address, files.join("; ")),
                format!("{name} PCIe {} unreadable", names.join(",")),
            ));
            continue;
        }
        if link.down() {
            findings.push(
                Finding::new(
                    Rule::PcieLink,
                    Status::Problem,
                    Some(subject),
                    format!("{name} ({}) PCIe link is down: trained at {now} of {max}: nothing crosses it", function.address),
                    format!("{name} PCIe link down"),
                )
                .act(Action::Reboot, "a PCIe link that is down carries nothing: a reboot retrains it; replace the node if it stays down"),
            );
            continue;
        }
        if link.above_max() {
            findings.push(Finding::new(
                Rule::PcieLink,
                Status::Unknown,
                Some(subject),
                format!("{name} ({}) claims its PCIe link trained at {now}, above its max {max}: sysfs contradicts itself", function.address),
                format!("{name} PCIe {now} above max {max}"),
            ));
            continue;
        }
        if !link.downgraded() {
            continue;
        }
        let short = match (link.width, link.max_width) {
            (Some(w), Some(m)) if w < m => format!("{name} PCIe x{w} of x{m}"),
            _ => format!("{name} PCIe {} of {}", PcieLink::describe(None, link.speed_gts).trim_start_matches("x? "), PcieLink::describe(None, link.max_speed_gts).trim_start_matches("x? ")),
        };
        let (message, action, reason) = match link.bandwidths() {
            Some((trained, most)) => {
                let cost = format!("{} of {}, {} less", gbps_text(trained), gbps_text(most), gbps_text(most - trained));
                match need {
                    Some(need) if trained + 0.5 < *need => (
                        format!("{name} ({}) trained at {now} of {max}: {cost}, below {need_words} of {}", function.address, gbps_text(*need)),
                        Action::Reboot,
                        format!("it can no longer carry {need_words} ({}): a reboot retrains the link; replace the node if it trains low again", gbps_text(*need)),
                    ),
                    Some(need) => (
                        format!("{name} ({}) trained at {now} of {max}: {cost}; {need_words} of {} still fits", function.address, gbps_text(*need)),
                        Action::Watch,
                        format!("{need_words} ({}) still fits: watch it, and reboot to retrain when it is next drained", gbps_text(*need)),
                    ),
                    None => (
                        format!("{name} ({}) trained at {now} of {max}: {cost}", function.address),
                        Action::Reboot,
                        "a reboot retrains the link; replace the node if it trains low again".to_string(),
                    ),
                }
            }
            None => (
                format!("{name} ({}) trained at {now} of {max}", function.address),
                Action::Reboot,
                "a reboot retrains the link; replace the node if it trains low again".to_string(),
            ),
        };
        findings.push(Finding::new(Rule::PcieLink, Status::Problem, Some(subject), message, short).act(action, reason));
    }
    if findings.is_empty() {
        let gpus = with_link.iter().filter(|(n, ..)| n.starts_with("GPU")).count();
        findings.push(ok(Rule::PcieLink, format!("{gpus} GPUs and {} EFA at their full PCIe width and speed", with_link.len() - gpus)));
    }
    findings
}

/// At most this many Xids are named in one finding; the rest are counted.
const XIDS_NAMED: usize = 8;

/// `items` joined with `sep`, at most `max` of them, then `(+N more)`.
fn at_most(items: &[String], max: usize, sep: &str) -> String {
    let mut text = items.iter().take(max).cloned().collect::<Vec<_>>().join(sep);
    if items.len() > max {
        let _ = write!(text, " (+{} more)", items.len() - max);
    }
    text
}

/// `Xid 79 x3 (GPU has fallen off the bus, reboot; 12.0 to 14.5 s after boot: pid=0, ...)`.
fn xid_words(tally: &xid::XidTally, judged: &xid::Judged) -> String {
    let times = if tally.count == 1 { String::new() } else { format!(" x{}", tally.count) };
    let when = match (tally.first_us, tally.last_us) {
        (Some(first), Some(last)) if first != last => format!("; {} to {} after boot", xid::seconds(first), xid::seconds(last)),
        (_, Some(last)) => format!("; {} after boot", xid::seconds(last)),
        _ => String::new(),
    };
    format!("Xid {}{times} ({}, {}{when}: {})", tally.xid, judged.what, judged.action, tally.sample)
}

/// The GPU a driver message names, as the findings name it: (subject, address, the EFA behind its switch).
fn xid_gpu(observed: &Observed, layout: Option<&NodeTopology>, efa: &[&RdmaDevice], pci: &str) -> (String, String, String) {
    let function = observed.gpus.iter().find(|f| xid::names_function(pci, &f.address));
    let address = function.map_or_else(|| pci.to_string(), |f| f.address.clone());
    let subject = gpu_index(observed, layout, &address).map_or_else(|| format!("GPU {pci}"), |i| format!("GPU {i}"));
    let nics = function.map(|f| nics_on_switch(f, efa)).unwrap_or_default();
    let behind = if nics.is_empty() { String::new() } else { format!(", its PCIe switch shared with {}", nics.join(", ")) };
    (subject, address, behind)
}

/// Xids since the NVIDIA driver last loaded: one finding per GPU whose Xids call for an action, its worst
/// Xid's (NVIDIA's catalog, `efatop_node::xid`); Xids before the load are history, told and not judged. A log
/// that could not be read is unknown; one not read to its end is unknown unless a fault was found in what
/// was read (which stays a fault, its message saying the log was read in part).
fn gpu_xid(observed: &Observed, layout: Option<&NodeTopology>, efa: &[&RdmaDevice]) -> Vec<Finding> {
    let log = match &observed.xids {
        Err(why) => {
            return vec![Finding::new(
                Rule::GpuXid,
                Status::Unknown,
                None,
                format!("the kernel log could not be read, so GPU Xids are not known: {why}"),
                "kernel log unreadable".into(),
            )];
        }
        Ok(log) => log,
    };
    let window = log.window();
    let mut read = format!("{}, {} records", log.source, log.records);
    if log.overwritten > 0 {
        let _ = write!(read, "; records were overwritten {} times while read, so some may be missed", log.overwritten);
    }
    if log.unnamed > 0 {
        let _ = write!(read, "; {} Xids of more than {} GPU-Xid pairs counted, not named", log.unnamed, xid::MAX_PAIRS);
    }
    let history_of = |pci: Option<&str>| -> Vec<String> {
        log.history
            .iter()
            .filter(|tally| pci.is_none_or(|pci| tally.pci == pci))
            .map(|tally| {
                let times = if tally.count == 1 { String::new() } else { format!(" x{}", tally.count) };
                let gpu = if pci.is_some() { String::new() } else { format!("{} ", xid_gpu(observed, layout, efa, &tally.pci).0) };
                format!("{gpu}Xid {}{times}", tally.xid)
            })
            .collect()
    };
    let before = || match log.driver_loaded_us {
        Some(at) => format!("before the driver loaded at {}", xid::seconds(at)),
        None => "before the driver last loaded".to_string(),
    };
    // Per GPU address: its Xids in the window, each judged, worst first.
    let mut by_gpu: std::collections::BTreeMap<&str, Vec<(&xid::XidTally, xid::Judged)>> = std::collections::BTreeMap::new();
    for tally in &log.current {
        let mut judged = xid::judge(tally.xid, &tally.sample);
        // 79 again after the driver reloaded: the restart did not bring the GPU back for good.
        if tally.xid == 79 && log.history.iter().any(|old| old.pci == tally.pci && old.xid == 79) {
            judged.action = Action::Replace;
            judged.why = "it recurs after the driver reloaded: NVIDIA's catalog has the hardware serviced (CONTACT_SUPPORT)".into();
        }
        by_gpu.entry(tally.pci.as_str()).or_default().push((tally, judged));
    }
    let mut findings = Vec::new();
    let mut quiet = Vec::new();
    for (pci, mut xids) in by_gpu {
        xids.sort_by_key(|(tally, judged)| (std::cmp::Reverse(judged.action), tally.xid));
        let (subject, address, behind) = xid_gpu(observed, layout, efa, pci);
        let listed: Vec<String> = xids.iter().map(|(tally, judged)| xid_words(tally, judged)).collect();
        let (worst, judged) = (&xids[0].0, &xids[0].1);
        if judged.action == Action::None {
            quiet.push(format!("{subject} {}", at_most(&listed, XIDS_NAMED, "; ")));
            continue;
        }
        let numbers: Vec<String> = xids.iter().filter(|(_, j)| j.action != Action::None).map(|(tally, _)| tally.xid.to_string()).collect();
        let short = format!("{subject} Xid {}", at_most(&numbers, 4, ","));
        let mut message = format!("{subject} ({address}{behind}): {} {window} ({read})", at_most(&listed, XIDS_NAMED, "; "));
        let history = history_of(Some(pci));
        if !history.is_empty() {
            let _ = write!(message, "; {} (history, not judged): {}", before(), at_most(&history, XIDS_NAMED, ", "));
        }
        if let Some(why) = &log.unfinished {
            let _ = write!(message, "; the log was read only in part ({why})");
        }
        let reason = format!("Xid {} ({}): {}", worst.xid, judged.what, judged.why);
        findings.push(Finding::new(Rule::GpuXid, Status::Problem, Some(&subject), message, short).act(judged.action, reason));
    }
    if !findings.is_empty() {
        return findings;
    }
    let mut told = String::new();
    if !quiet.is_empty() {
        let _ = write!(told, "; Xids that call for no action: {}", at_most(&quiet, XIDS_NAMED, "; "));
    }
    let history = history_of(None);
    if !history.is_empty() {
        let _ = write!(told, "; {} (history, not judged): {}", before(), at_most(&history, XIDS_NAMED, ", "));
    }
    if let Some(why) = &log.unfinished {
        return vec![Finding::new(
            Rule::GpuXid,
            Status::Unknown,
            None,
            format!(
                "the kernel log was not read to its end ({why}; {read}): no GPU Xid calling for action in what was read {window}{told}"
            ),
            "kernel log not read to its end".into(),
        )];
    }
    if log.current.is_empty() && log.history.is_empty() && observed.gpus.is_empty() && layout.is_none_or(|layout| layout.gpus.is_empty()) {
        return vec![skipped(Rule::GpuXid, format!("no GPUs; no Xid in {read}"))];
    }
    vec![ok(Rule::GpuXid, format!("no GPU Xid calling for action {window} ({read}){told}"))]
}

fn gpu_memory(observed: &Observed, layout: Option<&NodeTopology>) -> Vec<Finding> {
    let gpus = match &observed.gpu_memory {
        Err(why) => return vec![skipped(Rule::GpuMemory, format!("GPU memory health not read: {why}"))],
        Ok(gpus) if gpus.is_empty() => return vec![skipped(Rule::GpuMemory, "NVML lists no GPUs".into())],
        Ok(gpus) => gpus,
    };
    let mut findings = Vec::new();
    for gpu in gpus {
        let index = gpu_index(observed, layout, &gpu.pci_bus_id).unwrap_or(gpu.index);
        let subject = format!("GPU {index}");
        let problem = |message: String, short: String, action: Action, reason: &str| {
            Finding::new(Rule::GpuMemory, Status::Problem, Some(&subject), message, short).act(action, reason)
        };
        if gpu.remap_failed == Some(true) {
            findings.push(problem(
                format!("{subject} ({}): a row remap failed: the GPU has no spare row where it needed one", gpu.pci_bus_id),
                format!("{subject} row remap failed"),
                Action::Replace,
                "a failed row remap is hardware out of spare memory rows: NVIDIA services the GPU",
            ));
        } else if gpu.remap_pending == Some(true) {
            findings.push(problem(
                format!("{subject} ({}): a row remap is pending; it takes effect on the next GPU reset", gpu.pci_bus_id),
                format!("{subject} row remap pending"),
                Action::Reset,
                "a pending row remap needs a GPU reset to take effect",
            ));
        } else if let Some(errors) = gpu.volatile_uncorrectable.filter(|errors| *errors > 0) {
            findings.push(problem(
                format!("{subject} ({}): {errors} uncorrectable ECC errors since the driver loaded", gpu.pci_bus_id),
                format!("{subject} {errors} uncorrectable ECC"),
                Action::Reset,
                "uncorrectable ECC errors: reset the GPU so the rows are remapped; replace it if they come back",
            ));
        }
    }
    if findings.is_empty() {
        let remapped: u64 = gpus.iter().filter_map(|gpu| gpu.remapped_uncorrectable).sum();
        let pcie: std::collections::BTreeSet<String> =
            gpus.iter().filter_map(|gpu| gpu.pcie).map(|(now, width, max, max_width)| format!("PCIe Gen{now} x{width} of Gen{max} x{max_width}")).collect();
        let pcie: Vec<String> = pcie.into_iter().collect();
        findings.push(ok(
            Rule::GpuMemory,
            format!(
                "{} GPUs (NVML): no row remap pending or failed, no uncorrectable ECC since the driver loaded ({remapped} rows remapped over their life){}",
                gpus.len(),
                if pcie.is_empty() { String::new() } else { format!("; {}", pcie.join(", ")) }
            ),
        ));
    }
    findings
}

/// `6.8.0-1015-aws` → (6, 8).
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

fn gpudirect(observed: &Observed, layout: Option<&NodeTopology>, efa: &[&RdmaDevice]) -> Vec<Finding> {
    let expects_gpus = layout.is_some_and(|layout| !layout.gpus.is_empty()) || !observed.gpus.is_empty();
    if !expects_gpus {
        return vec![skipped(Rule::Gpudirect, "no GPUs".into())];
    }
    // GPUDirect RDMA is the NIC reading and writing GPU memory: without EFA there is nothing to judge.
    if !expects_efa(layout, efa) {
        return vec![skipped(Rule::Gpudirect, "no EFA: GPUDirect RDMA is not judged".into())];
    }
    let problem = |message: String, short: &str| vec![Finding::new(Rule::Gpudirect, Status::Problem, None, message, short.into())];
    if !observed.nvidia_loaded {
        return problem(
            "the NVIDIA kernel module is not loaded: no CUDA, no GPUDirect RDMA".into(),
            "NVIDIA driver not loaded",
        );
    }
    if observed.peermem_loaded {
        return vec![ok(Rule::Gpudirect, "nvidia_peermem is loaded: EFA can register GPU memory".into())];
    }
    let open_module = observed.nvidia_driver.as_deref().is_some_and(|line| line.contains("Open Kernel Module"));
    let kernel = observed.kernel.as_deref().and_then(kernel_version);
    let kernel_ok = kernel.is_some_and(|version| version >= (5, 12));
    let api_ok = match &observed.libfabric {
        Libfabric::Checked(facts) => Some(facts.dmabuf_api),
        Libfabric::NotChecked { .. } => None,
    };
    if open_module && kernel_ok && api_ok != Some(false) {
        return vec![ok(
            Rule::Gpudirect,
            format!(
                "dma-buf: NVIDIA's open kernel module on Linux {}{}",
                observed.kernel.as_deref().unwrap_or("?"),
                if api_ok == Some(true) { " and libfabric API >= 1.20 (FI_MR_DMABUF)" } else { "" }
            ),
        )];
    }
    let mut why = Vec::new();
    if !open_module {
        why.push(format!(
            "the NVIDIA driver is not the open kernel module ({})",
            observed.nvidia_driver.as_deref().unwrap_or("no /proc/driver/nvidia/version")
        ));
    }
    if !kernel_ok {
        why.push(format!("Linux {} is older than 5.12", observed.kernel.as_deref().unwrap_or("(unknown)")));
    }
    if api_ok == Some(false) {
        why.push("libfabric's API is older than 1.20 (no FI_MR_DMABUF)".into());
    }
    problem(
        format!("no GPUDirect RDMA: nvidia_peermem is not loaded and dma-buf cannot be used: {}", why.join("; ")),
        "no GPUDirect RDMA (no peermem, no dma-buf)",
    )
}

fn bytes_text(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

fn memlock(observed: &Observed, layout: Option<&NodeTopology>, efa: &[&RdmaDevice]) -> Finding {
    if !expects_efa(layout, efa) {
        return skipped(Rule::Memlock, "no EFA: the memlock limit is not judged".into());
    }
    match observed.memlock {
        None => Finding::new(
            Rule::Memlock,
            Status::Unknown,
            Some("memlock"),
            format!("{} has no `Max locked memory` line", observed.root.join("proc/self/limits").display()),
            "memlock limit unknown".into(),
        ),
        Some(limit) if limit.soft.is_none() => ok(Rule::Memlock, "max locked memory unlimited".into()),
        Some(limit) => {
            let soft = limit.soft.map_or("unlimited".to_string(), bytes_text);
            let hard = limit.hard.map_or("unlimited".to_string(), bytes_text);
            Finding::new(
                Rule::Memlock,
                Status::Problem,
                Some("memlock"),
                format!(
                    "max locked memory is {soft} (hard {hard}); EFA registers (pins) every buffer and needs it unlimited \
                     (the EFA installer sets it in /etc/security/limits.d; under Slurm, PropagateResourceLimits passes the submitter's)"
                ),
                format!("memlock {soft}, not unlimited"),
            )
        }
    }
}

fn libfabric(observed: &Observed, layout: Option<&NodeTopology>, efa: &[&RdmaDevice]) -> Vec<Finding> {
    let facts: &LibfabricFacts = match &observed.libfabric {
        Libfabric::NotChecked { reason } => return vec![skipped(Rule::Libfabric, reason.clone())],
        Libfabric::Checked(facts) => facts,
    };
    let expects_efa = expects_efa(layout, efa);
    let library = facts.library.as_deref().map_or(String::new(), |path| format!(" ({path})"));
    let problem = |message: String, short: String| Finding::new(Rule::Libfabric, Status::Problem, None, message, short);
    let domains = match &facts.efa_domains {
        Err(why) if expects_efa => {
            return vec![problem(
                format!("libfabric {}{library} offers no efa RDM endpoints with RMA: {why}", facts.version),
                format!("libfabric {}: no efa provider", facts.version),
            )];
        }
        Err(_) => return vec![skipped(Rule::Libfabric, format!("libfabric {}{library}; no EFA here", facts.version))],
        Ok(domains) => domains,
    };
    let mut findings = Vec::new();
    if domains.len() < efa.len() {
        findings.push(problem(
            format!("libfabric {}{library} offers {} efa domains for {} EFA devices", facts.version, domains.len(), efa.len()),
            format!("efa offers {} of {} NICs", domains.len(), efa.len()),
        ));
    }
    // EFA v1 (p4d, device 0xefa0) has RDMA read but no write: emulated writes are what it should do.
    let write_capable = efa.iter().any(|d| d.pci.as_ref().and_then(|p| p.device.as_deref()).is_some_and(|id| id != "0xefa0"));
    match facts.emulated_write {
        Some(true) if write_capable => findings.push(problem(
            format!("RDMA write is emulated over sends on {}: the device or libfabric {} does not offer it", domains.first().map_or("efa", String::as_str), facts.version),
            "efa RDMA write emulated".into(),
        )),
        None if write_capable => findings.push(Finding::new(
            Rule::Libfabric,
            Status::Unknown,
            None,
            format!(
                "libfabric {}{library} does not say whether RDMA write is emulated{}",
                facts.version,
                facts.endpoint_error.as_deref().map_or(String::new(), |e| format!(" ({e})"))
            ),
            "efa RDMA write unknown".into(),
        )),
        _ => {}
    }
    if findings.is_empty() {
        let write = match facts.emulated_write {
            Some(false) => "RDMA write offered (not emulated)",
            Some(true) => "RDMA write emulated, as EFA v1 does",
            None => "RDMA write not asked",
        };
        findings.push(ok(Rule::Libfabric, format!("libfabric {}{library}: efa fabric on {} domains, {write}", facts.version, domains.len())));
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions_parse() {
        assert_eq!(kernel_version("6.8.0-1015-aws"), Some((6, 8)));
        assert_eq!(kernel_version("5.10.228-219.884.amzn2.x86_64"), Some((5, 10)));
        assert_eq!(kernel_version("weird"), None);
    }

    #[test]
    fn byte_sizes_read_as_people_write_them() {
        assert_eq!(bytes_text(65536), "64 KiB");
        assert_eq!(bytes_text(8 << 20), "8 MiB");
        assert_eq!(bytes_text(1000), "1000 B");
    }
}
