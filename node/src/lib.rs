//! What a node's NICs and GPU links carry right now, read from sysfs and NVML, with no benchmark running.
//!
//! [`Monitor::sample`] reads every RDMA device and network interface under a sysfs root ([`Sysfs`]: `/`,
//! or a [`FakeSysfs`] tree), turns the counters into rates against the previous read ([`RateTracker`]),
//! places each NIC next to its GPUs ([`Affinity`], from the topology) and adds the GPUs' PCIe and NVLink
//! throughput ([`GpuReader`], NVML loaded at run time). What a read gives is `efatop_proto`'s
//! [`NodeSample`], plain data: the view draws it, `--json` prints it, a many-node monitor sends it to rank 0.
#![forbid(unsafe_code)]

mod affinity;
mod fake;
pub mod fake_fleet;
mod fake_node;
mod gpu;
pub mod node;
pub mod nvlink;
pub mod prometheus;
mod rates;
pub mod sysfs;
pub mod xid;
pub mod xid_watch;

use std::time::Duration;

use efatop_proto::telemetry::NodeSample;

pub use affinity::Affinity;
pub use fake_node::{Fault, FakeNode};
pub use fake::{
    efa_device_counters, p5_efa_devices, FakeSysfs, EFA_DEVICE_COUNTERS, EFA_KVERBS_DEVICE_COUNTERS, EFA_PORT_COUNTERS,
    P5_EFA_FIRST_BUSES,
};
pub use gpu::{memory_health, GpuMemory, GpuReader, NO_DRIVER};
pub use nvlink::{NvlinkSurvey, pair_link, pair_link_or_inferred};
pub use rates::{is_error_counter, is_retransmit_counter, NicSnapshot, RateTracker};
pub use sysfs::{parse_net_speed, parse_rdma_rate, NicReading, Sysfs, Unreadable};

/// Reads a node again and again; see the crate docs.
pub struct Monitor {
    host: String,
    sysfs: Sysfs,
    tracker: RateTracker,
    gpus: GpuReader,
    /// The last read's counter files that held no count, by NIC.
    unreadable: Vec<(String, Unreadable)>,
}

impl Monitor {
    pub fn new(host: impl Into<String>, sysfs: Sysfs, affinity: Affinity, gpus: GpuReader) -> Self {
        Self { host: host.into(), sysfs, tracker: RateTracker::new(affinity), gpus, unreadable: Vec::new() }
    }

    /// The counter files of the last read that could not be read as a count, with their NIC's name: left
    /// out of its counters (and rates), never read as 0.
    pub fn unreadable(&self) -> &[(String, Unreadable)] {
        &self.unreadable
    }

    /// One read, taken at `at` (time since the monitor started; it must not go back).
    pub fn sample(&mut self, at: Duration) -> NodeSample {
        let readings = self.sysfs.read_all();
        self.unreadable =
            readings.iter().flat_map(|nic| nic.unreadable.iter().map(|file| (nic.name.clone(), file.clone()))).collect();
        let NicSnapshot { t_ms, interval_ms, nics } = self.tracker.update(readings, at);
        NodeSample {
            rank: 0,
            seq: 0,
            drops: 0,
            host: self.host.clone(),
            t_ms,
            interval_ms,
            topology_gpus: self.tracker.affinity().gpus().to_vec(),
            nics,
            gpus: self.gpus.read(),
        }
    }
}
