//! A fake sysfs tree shaped like a p5.48xlarge's, for tests and for trying the monitor without EFA
//! (`efatop monitor --sysfs-root DIR`): 32 EFA devices `rdmap79s0` … `rdmap201s0` at the PCI addresses of
//! shared/NODE-FACTS.md (the names are their buses in decimal), each with one port at
//! `100 Gb/sec (4X EDR)` and the EFA driver's port and device counters, plus `lo`, an `eth0` and the DMI
//! product name `p5.48xlarge` (`sys/class/dmi/id/product_name`: the instance type runs read).
//! `eth0`'s PCI address and speed are placeholders: no source names a p5's ENA interface.
//!
//! Counters are plain files; [`FakeSysfs::advance`] moves one as traffic would, [`FakeSysfs::set`] puts
//! any value (a reset, a wrap), [`FakeSysfs::remove`] takes a device away.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::rates::{is_error_counter, is_retransmit_counter};
use efatop_proto::telemetry::NicKind;

/// First EFA bus (decimal) behind each of the 8 GPUs' PCIe switches; each switch has 4 consecutive ones.
pub const P5_EFA_FIRST_BUSES: [u32; 8] = [79, 96, 113, 130, 147, 164, 181, 198];

/// The EFA driver's per-port counters (`drivers/infiniband/hw/efa/efa_verbs.c`).
pub const EFA_PORT_COUNTERS: &[&str] = &[
    "tx_bytes",
    "tx_pkts",
    "rx_bytes",
    "rx_pkts",
    "rx_drops",
    "send_bytes",
    "send_wrs",
    "recv_bytes",
    "recv_wrs",
    "rdma_read_wrs",
    "rdma_read_bytes",
    "rdma_read_wr_err",
    "rdma_read_resp_bytes",
    "rdma_write_wrs",
    "rdma_write_bytes",
    "rdma_write_wr_err",
    "rdma_write_recv_bytes",
    "retrans_bytes",
    "retrans_pkts",
    "retrans_timeout_events",
    "unresponsive_remote_events",
    "impaired_remote_conn_events",
];

/// The EFA driver's device-wide counters.
pub const EFA_DEVICE_COUNTERS: &[&str] = &[
    "submitted_cmds",
    "completed_cmds",
    "cmds_err",
    "no_completion_cmds",
    "keep_alive_rcvd",
    "alloc_pd_err",
    "create_qp_err",
    "create_cq_err",
    "reg_mr_err",
    "alloc_ucontext_err",
    "create_ah_err",
    "mmap_err",
];

/// Device-wide counters the out-of-tree EFA driver adds when built with kernel verbs (amzn/amzn-drivers
/// `kernel/linux/efa/src/efa_verbs.c`, `EFA_DEFINE_KVERBS_DEVICE_STATS`, since "Introduce EFA kernel verbs
/// support" next to "Add 0xefa3 device support" in its RELEASENOTES; HEAD 64788ef, driver 3.1.0): memory
/// registrations by kernel consumers that failed. The upstream kernel's driver has none of them. No
/// counter was renamed: the 22 port counters above are the same names in both drivers.
pub const EFA_KVERBS_DEVICE_COUNTERS: &[&str] = &["alloc_mr_err", "get_dma_mr_err"];

/// The device counters a fake node of EFA generation `generation` has: the fake EFA v3 and v4 nodes
/// (p5en, p6) run the out-of-tree driver AWS's installer ships (ASSUMED), so they have
/// [`EFA_KVERBS_DEVICE_COUNTERS`] too; v1 and v2 nodes the upstream kernel's set.
pub fn efa_device_counters(generation: Option<u8>) -> Vec<&'static str> {
    let mut counters = EFA_DEVICE_COUNTERS.to_vec();
    if generation.is_some_and(|g| g >= 3) {
        counters.extend_from_slice(EFA_KVERBS_DEVICE_COUNTERS);
    }
    counters
}

pub(crate) const NET_COUNTERS: &[&str] = &[
    "rx_bytes",
    "tx_bytes",
    "rx_packets",
    "tx_packets",
    "rx_errors",
    "tx_errors",
    "rx_dropped",
    "tx_dropped",
    "rx_crc_errors",
    "multicast",
    "collisions",
];

/// A fake sysfs tree on disk.
#[derive(Clone, Debug)]
pub struct FakeSysfs {
    root: PathBuf,
}

/// The 32 EFA devices of a p5.48xlarge, in GPU order, with their PCI addresses.
pub fn p5_efa_devices() -> Vec<(String, String)> {
    P5_EFA_FIRST_BUSES
        .iter()
        .flat_map(|&first| first..first + 4)
        .map(|bus| (format!("rdmap{bus}s0"), format!("0000:{bus:02x}:00.0")))
        .collect()
}

/// A starting value that differs per device and counter, so a test that mixes two up fails.
pub(crate) fn initial_value(device_index: usize, counter_index: usize, counter: &str) -> u64 {
    let scale: u64 = if counter.ends_with("bytes") { 1_000_000_000 } else { 1_000 };
    let error_like = is_error_counter(NicKind::Rdma, counter)
        || is_retransmit_counter(NicKind::Rdma, counter)
        || counter.contains("err")
        || counter.contains("drop");
    if error_like {
        // Errors start small and mostly at zero, as on a healthy node.
        return (device_index % 3) as u64;
    }
    (device_index as u64 + 1) * scale + counter_index as u64
}

impl FakeSysfs {
    /// Writes a p5.48xlarge-like tree under `root` (created if missing) and returns it.
    pub fn p5(root: impl Into<PathBuf>) -> io::Result<Self> {
        let fake = Self { root: root.into() };
        // The instance type, as DMI names it: runs pointed at this tree hold themselves to p5's figures.
        let dmi = fake.root.join("sys/class/dmi/id");
        fs::create_dir_all(&dmi)?;
        fs::write(dmi.join("product_name"), "p5.48xlarge\n")?;
        for (device_index, (name, bus_id)) in p5_efa_devices().into_iter().enumerate() {
            let dir = fake.root.join("sys/class/infiniband").join(&name);
            let port = dir.join("ports/1");
            fs::create_dir_all(port.join("hw_counters"))?;
            fs::create_dir_all(dir.join("hw_counters"))?;
            fs::write(port.join("rate"), "100 Gb/sec (4X EDR)\n")?;
            fs::write(port.join("hw_counters/lifespan"), "10\n")?;
            fs::write(dir.join("hw_counters/lifespan"), "10\n")?;
            for (counter_index, counter) in EFA_PORT_COUNTERS.iter().enumerate() {
                fs::write(port.join("hw_counters").join(counter), format!("{}\n", initial_value(device_index, counter_index, counter)))?;
            }
            for (counter_index, counter) in EFA_DEVICE_COUNTERS.iter().enumerate() {
                fs::write(dir.join("hw_counters").join(counter), format!("{}\n", initial_value(device_index, counter_index, counter)))?;
            }
            fake.link_pci_device(&dir, &bus_id)?;
        }
        fake.add_net("lo", None, None)?;
        fake.add_net("eth0", Some("0000:00:05.0"), Some(100_000))?;
        Ok(fake)
    }

    /// A tree already on disk (written by [`FakeSysfs::p5`], or `scripts/fixtures/make-fake-sysfs`).
    pub fn open(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `device` → `../../../devices/pci0000:00/<bus id>`, with the target made so that it resolves as on a
    /// real node.
    fn link_pci_device(&self, dir: &Path, bus_id: &str) -> io::Result<()> {
        let target = self.root.join("sys/devices/pci0000:00").join(bus_id);
        fs::create_dir_all(&target)?;
        let link = dir.join("device");
        if fs::symlink_metadata(&link).is_ok() {
            fs::remove_file(&link)?;
        }
        std::os::unix::fs::symlink(Path::new("../../../devices/pci0000:00").join(bus_id), link)
    }

    pub(crate) fn add_net(&self, name: &str, bus_id: Option<&str>, speed_mbps: Option<i64>) -> io::Result<()> {
        let dir = self.root.join("sys/class/net").join(name);
        fs::create_dir_all(dir.join("statistics"))?;
        for (counter_index, counter) in NET_COUNTERS.iter().enumerate() {
            fs::write(dir.join("statistics").join(counter), format!("{}\n", initial_value(0, counter_index, counter)))?;
        }
        if let Some(speed) = speed_mbps {
            fs::write(dir.join("speed"), format!("{speed}\n"))?;
        }
        if let Some(bus_id) = bus_id {
            self.link_pci_device(&dir, bus_id)?;
        }
        Ok(())
    }

    /// The file that holds `counter` of `device`: an RDMA port counter, an RDMA device counter, or a net
    /// interface statistic.
    pub fn counter_path(&self, device: &str, counter: &str) -> PathBuf {
        let rdma = self.root.join("sys/class/infiniband").join(device);
        if rdma.exists() {
            let port = rdma.join("ports/1/hw_counters").join(counter);
            if port.exists() || !rdma.join("hw_counters").join(counter).exists() {
                return port;
            }
            return rdma.join("hw_counters").join(counter);
        }
        self.root.join("sys/class/net").join(device).join("statistics").join(counter)
    }

    pub fn get(&self, device: &str, counter: &str) -> io::Result<u64> {
        let text = fs::read_to_string(self.counter_path(device, counter))?;
        text.trim().parse().map_err(|err| io::Error::new(io::ErrorKind::InvalidData, format!("{device}/{counter}: {err}")))
    }

    pub fn set(&self, device: &str, counter: &str, value: u64) -> io::Result<()> {
        // Write then rename, so a reader never sees a half-written number; staged outside the counters'
        // directory (on the same file system), where a reader listing the counters never meets it.
        static STAGED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let path = self.counter_path(device, counter);
        let staging_dir = self.root.join(".staging");
        fs::create_dir_all(&staging_dir)?;
        let staging = staging_dir.join(format!("{}-{}", std::process::id(), STAGED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
        fs::write(&staging, format!("{value}\n"))?;
        fs::rename(staging, path)
    }

    /// Adds `by` to a counter (wrapping at 2^64 as the kernel's u64 would) and returns the new value.
    pub fn advance(&self, device: &str, counter: &str, by: u64) -> io::Result<u64> {
        let value = self.get(device, counter)?.wrapping_add(by);
        self.set(device, counter, value)?;
        Ok(value)
    }

    /// Takes a device away, as a driver unbind would.
    pub fn remove(&self, device: &str) -> io::Result<()> {
        let rdma = self.root.join("sys/class/infiniband").join(device);
        if rdma.exists() {
            return fs::remove_dir_all(rdma);
        }
        fs::remove_dir_all(self.root.join("sys/class/net").join(device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysfs::Sysfs;

    #[test]
    fn the_fake_p5_reads_back_as_32_efa_at_100_gbps_and_two_interfaces() {
        let dir = tempfile::tempdir().unwrap();
        let fake = FakeSysfs::p5(dir.path()).unwrap();
        let nics = Sysfs::new(fake.root()).read_all();
        let rdma: Vec<_> = nics.iter().filter(|nic| nic.kind == NicKind::Rdma).collect();
        assert_eq!(rdma.len(), 32);
        assert_eq!(rdma[0].name, "rdmap113s0", "name order");
        let first = nics.iter().find(|nic| nic.name == "rdmap79s0").unwrap();
        assert_eq!(first.pci_bus_id.as_deref(), Some("0000:4f:00.0"));
        assert_eq!(first.link_gbps, Some(100.0));
        assert_eq!(first.counters.len(), EFA_PORT_COUNTERS.len() + EFA_DEVICE_COUNTERS.len(), "lifespan is not a counter");
        assert_eq!(first.counters["tx_bytes"], 1_000_000_000);
        assert_eq!(first.counters["rx_bytes"], 1_000_000_002);
        let last = nics.iter().find(|nic| nic.name == "rdmap201s0").unwrap();
        assert_eq!(last.pci_bus_id.as_deref(), Some("0000:c9:00.0"));
        let net: Vec<(&str, Option<f64>, Option<&str>)> = nics
            .iter()
            .filter(|nic| nic.kind == NicKind::Net)
            .map(|nic| (nic.name.as_str(), nic.link_gbps, nic.pci_bus_id.as_deref()))
            .collect();
        assert_eq!(net, [("eth0", Some(100.0), Some("0000:00:05.0")), ("lo", None, None)]);
    }

    #[test]
    fn counters_advance_and_devices_go() {
        let dir = tempfile::tempdir().unwrap();
        let fake = FakeSysfs::p5(dir.path()).unwrap();
        assert_eq!(fake.advance("rdmap80s0", "rdma_write_bytes", 5).unwrap(), fake.get("rdmap80s0", "rdma_write_bytes").unwrap());
        fake.set("rdmap80s0", "cmds_err", 4).unwrap();
        assert!(fake.counter_path("rdmap80s0", "cmds_err").ends_with("rdmap80s0/hw_counters/cmds_err"));
        fake.advance("lo", "rx_bytes", 10).unwrap();
        fake.remove("rdmap80s0").unwrap();
        let nics = Sysfs::new(fake.root()).read_all();
        assert_eq!(nics.iter().filter(|nic| nic.kind == NicKind::Rdma).count(), 31);
        assert_eq!(nics.iter().find(|nic| nic.name == "lo").unwrap().counters["rx_bytes"], 1_000_000_010);
    }
}
