//! What a node's NICs and GPU links carry right now, read from sysfs and NVML, with no benchmark running.
//!
//! [`Monitor::sample`] reads every RDMA device and network interface under a sysfs root ([`Sysfs`]: `/`,
//! or a [`FakeSysfs`] tree), turns the counters into rates against the previous read ([`RateTracker`]),
//! places each NIC next to its GPUs ([`Affinity`], from the topology) and adds the GPUs' PCIe and NVLink
//! throughput ([`GpuReader`], NVML loaded at run time). A [`Snapshot`] is plain data: the view draws it,
//! `--json` prints it.
#![forbid(unsafe_code)]

mod affinity;
pub mod check;
mod fake;
mod fake_node;
mod gpu;
pub mod node;
pub mod nvlink;
pub mod prometheus;
pub mod rails;
pub mod run_metrics;
mod rates;
mod sysfs;
pub mod wire;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use affinity::{Affinity, TopologyGpu};
pub use fake_node::{Fault, FakeNode};
pub use fake::{p5_efa_devices, FakeSysfs, EFA_DEVICE_COUNTERS, EFA_PORT_COUNTERS, P5_EFA_FIRST_BUSES};
pub use gpu::{GpuPanel, GpuReader, GpuStats, NO_DRIVER};
pub use nvlink::{NvlinkSurvey, pair_link, pair_link_or_inferred};
pub use rates::{is_error_counter, is_retransmit_counter, CounterStats, NicSnapshot, NicStats, RateTracker};
pub use sysfs::{parse_net_speed, parse_rdma_rate, NicKind, NicReading, Sysfs};

/// Everything one read of a node shows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub host: String,
    /// Since the monitor started.
    pub t_ms: u64,
    /// Since the previous read; `None` for the first (which has no rates).
    pub interval_ms: Option<f64>,
    /// The GPUs the topology names, which NICs are grouped under; empty when it names none.
    pub topology_gpus: Vec<TopologyGpu>,
    pub nics: Vec<NicStats>,
    pub gpus: GpuPanel,
}

/// Reads a node again and again; see the crate docs.
pub struct Monitor {
    host: String,
    sysfs: Sysfs,
    tracker: RateTracker,
    gpus: GpuReader,
}

impl Monitor {
    pub fn new(host: impl Into<String>, sysfs: Sysfs, affinity: Affinity, gpus: GpuReader) -> Self {
        Self { host: host.into(), sysfs, tracker: RateTracker::new(affinity), gpus }
    }

    /// One read, taken at `at` (time since the monitor started; it must not go back).
    pub fn sample(&mut self, at: Duration) -> Snapshot {
        let readings = self.sysfs.read_all();
        let NicSnapshot { t_ms, interval_ms, nics } = self.tracker.update(readings, at);
        Snapshot {
            host: self.host.clone(),
            t_ms,
            interval_ms,
            topology_gpus: self.tracker.affinity().gpus().to_vec(),
            nics,
            gpus: self.gpus.read(),
        }
    }
}
