//! Whether a node is fit to run, in one place: `efatop check`'s rules, the judging of its traffic check,
//! the sweep's verdict per node, and the contracts they are told in.
//!
//! [`observe`] reads the node (under a [`Sysfs`] root: `/`, or a fake tree) over a short window: the
//! instance type (DMI), every RDMA device with its PCI function and ports, the NVIDIA GPUs, the kernel
//! modules for GPUDirect, the memlock limit, and two reads of the counters through the node monitor
//! ([`Monitor`]), whose difference shows the error counters that grew and whose rates feed the rail
//! check; what libfabric offers is asked by the caller (the binary links libfabric, this crate does not)
//! while the window runs. [`evaluate`] is pure: [`Observed`] and the expected layout
//! (`efatop_topology::instance_layout`) in, one [`Finding`] per problem (or one `ok` per rule) out.
//! - `rules`: every rule but traffic's; `traffic`: the facts of `check --traffic`'s verified write (the
//!   binary runs it) and the rule that judges them;
//! - [`contract`]: a verdict as the pipelines that drain nodes read it (Slurm drain reasons, LBNL NHC,
//!   node-problem-detector) and the report's table;
//! - [`sweep`]: the sweep's verdict in those contracts, per suspect node.
//!
//! The binary keeps only the commands' glue: flags, running the traffic and the sweep, printing.

pub mod contract;
mod rules;
pub mod sweep;
mod traffic;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use efatop_topology::NodeTopology;
use serde::{Deserialize, Serialize};

use efatop_node::node::{MemlockLimit, PciFunction, RdmaDevice};
use efatop_node::xid;
use efatop_proto::action::Action;
use efatop_sweep::rails::RailLoad;
use efatop_proto::telemetry::NicKind;
use efatop_proto::words::{into_printable, printable, MESSAGE_MAX, NAME_MAX};

use efatop_node::{Affinity, GpuReader, Monitor, Sysfs, Unreadable};

pub use rules::{evaluate, WATCHED_COUNTERS};
pub use traffic::{Carrier, NicBytes, SlowNic, Traffic, TrafficChannel, TrafficOutcome, WriteEnded};

/// A rule's outcome, from best to worst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Not applicable here (no layout for this type, a fake tree's libfabric, idle rails).
    Skipped,
    /// Could not tell (a file missing that a node has).
    Unknown,
    Problem,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Skipped => "skipped",
            Status::Unknown => "unknown",
            Status::Problem => "PROBLEM",
        }
    }
}

/// The rules, in the order they are shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// The instance type and its layout.
    Instance,
    /// EFA devices present against the layout.
    EfaDevices,
    /// Each EFA port's state and link speed.
    EfaPorts,
    /// Error counters that grew over the window.
    EfaCounters,
    /// The monitor's rail check over the window.
    Rails,
    /// NICs and GPUs on their NUMA nodes.
    Numa,
    /// Each GPU's NICs behind its PCIe switch.
    Pcie,
    /// Each GPU's and EFA's PCIe link trained at its full width and speed.
    PcieLink,
    /// NVIDIA GPUs present against the layout.
    Gpus,
    /// GPU Xid errors in the kernel log, each with the action NVIDIA's catalog gives it.
    GpuXid,
    /// GPU memory health through NVML: row remaps pending or failed, volatile uncorrectable ECC.
    GpuMemory,
    /// nvidia-peermem, or dma-buf.
    Gpudirect,
    /// The memlock limit.
    Memlock,
    /// libfabric's efa provider and RDMA write.
    Libfabric,
    /// `--traffic`: a short verified write through every NIC of the node.
    Traffic,
}

impl Rule {
    pub const ALL: [Rule; 15] = [
        Rule::Instance,
        Rule::EfaDevices,
        Rule::EfaPorts,
        Rule::EfaCounters,
        Rule::Rails,
        Rule::Numa,
        Rule::Pcie,
        Rule::PcieLink,
        Rule::Gpus,
        Rule::GpuXid,
        Rule::GpuMemory,
        Rule::Gpudirect,
        Rule::Memlock,
        Rule::Libfabric,
        Rule::Traffic,
    ];

    /// The name in the table and JSON (`efa-ports`).
    pub fn name(self) -> &'static str {
        match self {
            Rule::Instance => "instance",
            Rule::EfaDevices => "efa-devices",
            Rule::EfaPorts => "efa-ports",
            Rule::EfaCounters => "efa-counters",
            Rule::Rails => "rails",
            Rule::Numa => "numa",
            Rule::Pcie => "pcie",
            Rule::PcieLink => "pcie-link",
            Rule::Gpus => "gpus",
            Rule::GpuXid => "gpu-xid",
            Rule::GpuMemory => "gpu-memory",
            Rule::Gpudirect => "gpudirect",
            Rule::Memlock => "memlock",
            Rule::Libfabric => "libfabric",
            Rule::Traffic => "traffic",
        }
    }
}

/// What one rule found about one thing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub rule: Rule,
    pub status: Status,
    /// What it is about: an EFA (`rdmap80s0`), a GPU (`GPU 3`), `memlock`; `None` for the node as a whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// A sentence, for the table and JSON.
    pub message: String,
    /// A few ASCII words naming the fault, for one-line contracts (a Slurm drain reason, an NPD message):
    /// `rdmap80s0 port 1 DOWN`.
    pub short: String,
    /// What to do about it ([`Action`]): `none` for what is fine or not checked.
    #[serde(default)]
    pub action: Action,
    /// Why that action, in a sentence.
    #[serde(default)]
    pub action_reason: String,
}

impl Finding {
    /// A finding with its rule's usual action for `status` ([`default_action`]); [`Finding::act`] sets
    /// another.
    /// Every text is made [`printable`]: names read from the node (a device, a DMI product name, a path)
    /// are the node's, and may hold anything; each is capped, so that no file can flood the output.
    pub(crate) fn new(rule: Rule, status: Status, subject: Option<&str>, message: String, short: String) -> Self {
        let (action, reason) = default_action(rule, status);
        Self {
            rule,
            status,
            subject: subject.map(|subject| printable(subject, NAME_MAX)),
            message: into_printable(message, MESSAGE_MAX),
            short: into_printable(short, NAME_MAX),
            action,
            action_reason: reason.to_string(),
        }
    }

    /// The same finding with this action and reason.
    pub(crate) fn act(mut self, action: Action, reason: impl Into<String>) -> Self {
        self.action = action;
        self.action_reason = into_printable(reason.into(), MESSAGE_MAX);
        self
    }
}

/// What a rule's finding calls for when the rule says nothing more specific: nothing when fine or not
/// checked; `watch` when it could not tell; for a problem, by what the rule looks at (docs/check.md lists
/// them).
pub fn default_action(rule: Rule, status: Status) -> (Action, &'static str) {
    match status {
        Status::Ok => (Action::None, "nothing wrong"),
        Status::Skipped => (Action::None, "not checked here"),
        Status::Unknown => (Action::Watch, "could not tell: look at the node before trusting it"),
        Status::Problem => match rule {
            Rule::Instance | Rule::EfaCounters | Rule::Rails => {
                (Action::Watch, "the node still works: watch whether it keeps happening or spreads")
            }
            Rule::EfaDevices | Rule::EfaPorts => (
                Action::Reboot,
                "an EFA that did not enumerate or a port that did not come up returns on a reboot unless it is broken; replace the node if it does not",
            ),
            Rule::Numa | Rule::Pcie => (Action::Replace, "device placement is the platform's: a reboot does not move a device"),
            Rule::Gpus => (Action::Replace, "a GPU missing from the PCI bus is a hardware fault"),
            Rule::PcieLink => (Action::Reboot, "a link retrains on a reboot; one that trains low again is hardware: replace"),
            Rule::GpuXid | Rule::GpuMemory => (Action::Reset, "a GPU fault that a GPU reset clears"),
            Rule::Gpudirect | Rule::Memlock | Rule::Libfabric => (
                Action::Reboot,
                "the node's software or configuration is wrong: fix it and restart the node (or its services) before jobs run",
            ),
            Rule::Traffic => (Action::Reboot, "a NIC that cannot carry a verified write is not fit for jobs until restarted"),
        },
    }
}

/// What libfabric's efa provider offers, as the binary found out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Libfabric {
    /// Not asked (a fake tree is not this machine's libfabric).
    NotChecked { reason: String },
    Checked(LibfabricFacts),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LibfabricFacts {
    /// `2.1`: the library loaded at run time.
    pub version: String,
    /// Where it was loaded from (`/opt/amazon/efa/lib/libfabric.so.1`), when the process's maps say.
    pub library: Option<String>,
    /// The API efatop runs at allows `FI_MR_DMABUF` (≥ 1.20).
    pub dmabuf_api: bool,
    /// The `efa` fabric's RDM domains with RMA write (`rdmap79s0-rdm`), or why there are none.
    pub efa_domains: Result<Vec<String>, String>,
    /// `FI_OPT_EFA_EMULATED_WRITE` read on an endpoint of the first domain: `Some(true)` when writes are
    /// emulated over sends; `None` when the provider does not say.
    pub emulated_write: Option<bool>,
    /// Why no endpoint could be opened to ask, when none could.
    pub endpoint_error: Option<String>,
}

/// A counter that grew over the window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Growth {
    pub nic: String,
    pub counter: String,
    pub by: u64,
}

/// A watched counter that went back between the two reads: the driver reset it (a reload, the device
/// created again), which is not growth; what grew in between cannot be told.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reset {
    pub nic: String,
    pub counter: String,
    pub before: u64,
    pub after: u64,
}

/// Everything the rules look at.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Observed {
    /// The root everything was read under, for messages.
    pub root: PathBuf,
    pub product_name: Option<String>,
    /// At the end of the window.
    pub rdma: Vec<RdmaDevice>,
    pub gpus: Vec<PciFunction>,
    /// The window actually watched.
    pub window: Duration,
    /// Watched counters ([`WATCHED_COUNTERS`]) of RDMA devices that grew over the window, by exactly
    /// what the second read holds more than the first.
    pub grown: Vec<Growth>,
    /// Watched counters of RDMA devices that went back between the two reads.
    #[serde(default)]
    pub resets: Vec<Reset>,
    /// The counter files of each NIC that held no count in either read (not a number, a FIFO, too long,
    /// ...), by NIC name.
    #[serde(default)]
    pub unreadable_counters: Vec<(String, Unreadable)>,
    /// The DMI product name's file, where it is there but cannot be read.
    #[serde(default)]
    pub product_name_unreadable: Option<Unreadable>,
    /// The rail check over the window (NICs with a rail and a rate).
    pub rails: Vec<RailLoad>,
    pub nvidia_loaded: bool,
    pub peermem_loaded: bool,
    pub nvidia_driver: Option<String>,
    pub kernel: Option<String>,
    pub memlock: Option<MemlockLimit>,
    pub libfabric: Libfabric,
    /// The bytes each RDMA NIC's counters moved (tx + rx) over the window.
    pub moved: Vec<NicBytes>,
    /// What `--traffic` found; `None` without it.
    pub traffic: Option<Traffic>,
    /// The GPU Xids of the kernel log ([`xid::read`]), or why it could not be read.
    pub xids: Result<xid::XidLog, String>,
    /// Each GPU's memory health through NVML ([`crate::memory_health`]), or why it was not read.
    pub gpu_memory: Result<Vec<efatop_node::GpuMemory>, String>,
}

/// The instance type to judge against, and where it came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Expected {
    /// `p5.48xlarge`.
    pub instance_type: Option<String>,
    /// `DMI product name`, `--instance-type`.
    pub source: String,
    /// The built-in layout of that type; `None` when efatop has none.
    #[serde(skip)]
    pub layout: Option<NodeTopology>,
}

/// Reads the node under `sysfs` over `window` (at least): facts, then the counters twice, asking
/// `libfabric` between the two reads so that its time counts towards the window.
pub fn observe(sysfs: &Sysfs, layout: Option<&NodeTopology>, window: Duration, libfabric: impl FnOnce() -> Libfabric) -> Observed {
    observe_with_traffic(sysfs, layout, window, libfabric, || None)
}

/// [`observe`], running `traffic` (`--traffic`'s verified write) after asking `libfabric`, inside the
/// window: the window lasts until it ends, and its error counters, rails and bytes moved cover it.
pub fn observe_with_traffic(
    sysfs: &Sysfs,
    layout: Option<&NodeTopology>,
    window: Duration,
    libfabric: impl FnOnce() -> Libfabric,
    traffic: impl FnOnce() -> Option<Traffic>,
) -> Observed {
    let affinity = layout.map_or_else(Affinity::none, Affinity::from_topology);
    let mut monitor = Monitor::new("check", sysfs.clone(), affinity, GpuReader::unavailable("not read by the check"));
    let started = Instant::now();
    let first = monitor.sample(Duration::ZERO);
    let mut unreadable_counters: Vec<(String, Unreadable)> = monitor.unreadable().to_vec();
    let libfabric = libfabric();
    let traffic = traffic();
    std::thread::sleep(window.saturating_sub(started.elapsed()));
    let snapshot = monitor.sample(started.elapsed());
    for file in monitor.unreadable() {
        if !unreadable_counters.contains(file) {
            unreadable_counters.push(file.clone());
        }
    }
    let seconds = snapshot.interval_ms.unwrap_or(0.0) / 1e3;
    let mut grown = Vec::new();
    let mut resets = Vec::new();
    let mut moved = Vec::new();
    for nic in snapshot.nics.iter().filter(|nic| nic.kind == NicKind::Rdma && nic.present) {
        if let Some(gbps) = nic.total_gbps() {
            moved.push(NicBytes { nic: nic.name.clone(), bytes: (gbps * 1e9 / 8.0 * seconds).round() as u64 });
        }
        let before = first.nics.iter().find(|old| old.name == nic.name && old.present);
        for (counter, stats) in &nic.counters {
            if !WATCHED_COUNTERS.contains(&counter.as_str()) {
                continue;
            }
            let Some(then) = before.and_then(|old| old.counters.get(counter)).map(|old| old.value) else { continue };
            match stats.value.checked_sub(then) {
                Some(0) => {}
                Some(by) => grown.push(Growth { nic: nic.name.clone(), counter: counter.clone(), by }),
                None => resets.push(Reset { nic: nic.name.clone(), counter: counter.clone(), before: then, after: stats.value }),
            }
        }
    }
    let (product_name, product_name_unreadable) = match sysfs.read_product_name() {
        Ok(name) => (name, None),
        Err(file) => (None, Some(file)),
    };
    Observed {
        root: sysfs.root().to_path_buf(),
        product_name,
        product_name_unreadable,
        rdma: sysfs.rdma_devices(),
        gpus: sysfs.nvidia_gpus(),
        window: Duration::from_secs_f64(seconds),
        grown,
        resets,
        unreadable_counters,
        rails: efatop_sweep::rails::balance(&[&snapshot]),
        nvidia_loaded: sysfs.module_loaded("nvidia"),
        peermem_loaded: sysfs.module_loaded("nvidia_peermem"),
        nvidia_driver: sysfs.nvidia_driver(),
        kernel: sysfs.kernel_release(),
        memlock: sysfs.memlock(),
        libfabric,
        moved,
        traffic,
        xids: xid::read(sysfs.root()),
        gpu_memory: if sysfs.root() == std::path::Path::new("/") {
            efatop_node::memory_health()
        } else {
            Err(format!("--sysfs-root {} is not this machine: NVML not asked", sysfs.root().display()))
        },
    }
}

/// One node's check: what was expected, what was found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub host: String,
    pub instance_type: Option<String>,
    /// Where the instance type came from.
    pub instance_source: String,
    pub window_s: f64,
    /// The worst finding's status ([`Report::status_of`]).
    pub status: Status,
    /// The node's verdict: the strongest action of its findings ([`Report::action_of`]).
    #[serde(default)]
    pub action: Action,
    /// Why: the finding that called for it (`GPU 3: ...`).
    #[serde(default)]
    pub action_reason: String,
    pub findings: Vec<Finding>,
    /// What `--traffic` ran (provider, ranks, every channel's NIC and best rate) and how it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic: Option<Traffic>,
}

impl Report {
    pub fn new(host: impl Into<String>, expected: &Expected, observed: &Observed) -> Self {
        let findings = evaluate(observed, expected);
        let (action, action_reason) = Self::action_of(&findings);
        Self {
            host: into_printable(host.into(), NAME_MAX),
            instance_type: expected.instance_type.as_deref().map(|name| printable(name, NAME_MAX)),
            instance_source: printable(&expected.source, NAME_MAX),
            window_s: observed.window.as_secs_f64(),
            status: Self::status_of(&findings),
            action,
            action_reason,
            findings,
            traffic: observed.traffic.clone(),
        }
    }

    /// A problem if any rule found one; else unknown if any rule could not tell; else ok.
    pub fn status_of(findings: &[Finding]) -> Status {
        if findings.iter().any(|f| f.status == Status::Problem) {
            Status::Problem
        } else if findings.iter().any(|f| f.status == Status::Unknown) {
            Status::Unknown
        } else {
            Status::Ok
        }
    }

    /// The strongest action of `findings` (the first of the strongest), and its reason naming the finding:
    /// `none` and `nothing wrong` when none calls for one.
    pub fn action_of(findings: &[Finding]) -> (Action, String) {
        let mut strongest: Option<&Finding> = None;
        for finding in findings {
            if finding.action > strongest.map_or(Action::None, |f| f.action) {
                strongest = Some(finding);
            }
        }
        match strongest {
            None => (Action::None, "nothing wrong".into()),
            Some(finding) => (finding.action, format!("{}: {}", finding.short, finding.action_reason)),
        }
    }

    /// The findings with this status.
    pub fn with_status(&self, status: Status) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(move |f| f.status == status)
    }
}
