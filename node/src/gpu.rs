//! GPU links through NVML, loaded at run time (`nvml-wrapper` opens `libnvidia-ml.so.1` with libloading):
//! per GPU its PCIe and NVLink throughput. A node without the NVIDIA driver gets a panel that says so.
//!
//! Hopper and newer GPUs (a p5's H100, a p5en's H200) have GPM, which gives PCIe and NVLink bytes per
//! second between two samples; older ones give PCIe only (`nvmlDeviceGetPcieThroughput`, a 20 ms window)
//! and the panel says NVLink needs GPM.

use std::ffi::OsStr;
use std::sync::OnceLock;

use nvml_wrapper::enum_wrappers::device::PcieUtilCounter;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, GpmSample, Nvml};
use efatop_proto::telemetry::{NodeGpu, NodeGpus};

/// The text shown when NVML cannot be loaded.
pub const NO_DRIVER: &str = "no NVIDIA driver (libnvidia-ml.so not found)";

/// NVML, loaded once for the process: GPM samples borrow it, and a monitor keeps them for its whole life.
static NVML: OnceLock<Result<Nvml, String>> = OnceLock::new();

pub(crate) fn nvml() -> Result<&'static Nvml, String> {
    NVML.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Nvml, String> {
    // The driver installs the versioned name; the bare one only comes with development packages.
    let mut first_error = None;
    for library in ["libnvidia-ml.so.1", "libnvidia-ml.so"] {
        match Nvml::builder().lib_path(OsStr::new(library)).init() {
            Ok(nvml) => return Ok(nvml),
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    Err(match first_error {
        Some(NvmlError::LibloadingError(_)) | None => NO_DRIVER.to_string(),
        Some(NvmlError::DriverNotLoaded) => "NVIDIA driver not loaded (NVML found, no kernel driver)".to_string(),
        Some(NvmlError::NoPermission) => "NVML: no permission to talk to the NVIDIA driver".to_string(),
        Some(other) => format!("NVML cannot start: {other}"),
    })
}

struct WatchedGpu {
    device: Device<'static>,
    index: usize,
    name: String,
    pci_bus_id: String,
    /// Hopper and newer: GPM gives PCIe and NVLink rates from two samples.
    has_gpm: bool,
    previous_gpm_sample: Option<GpmSample<'static>>,
}

/// Reads every GPU's link throughput; see the module docs.
pub struct GpuReader {
    state: Result<(&'static Nvml, Vec<WatchedGpu>), String>,
}

const GPM_METRICS: [GpmMetricId; 4] =
    [GpmMetricId::PcieTxPerSec, GpmMetricId::PcieRxPerSec, GpmMetricId::NvlinkTotalTxPerSec, GpmMetricId::NvlinkTotalRxPerSec];

impl GpuReader {
    /// Loads NVML and finds the GPUs; never fails (the panel says what went wrong).
    pub fn open() -> Self {
        let state = nvml().and_then(|nvml| {
            let count = nvml.device_count().map_err(|err| format!("NVML cannot count GPUs: {err}"))?;
            let gpus = (0..count).filter_map(|index| watch(nvml, index)).collect();
            Ok((nvml, gpus))
        });
        Self { state }
    }

    /// A reader that reads nothing and says why (a fake sysfs tree has no GPUs).
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Self { state: Err(reason.into()) }
    }

    pub fn read(&mut self) -> NodeGpus {
        match &mut self.state {
            Err(reason) => NodeGpus::Unavailable(reason.clone()),
            Ok((nvml, gpus)) => NodeGpus::Gpus(gpus.iter_mut().map(|gpu| read_gpu(nvml, gpu)).collect()),
        }
    }
}

fn watch(nvml: &'static Nvml, index: u32) -> Option<WatchedGpu> {
    let device = nvml.device_by_index(index).ok()?;
    let name = device.name().unwrap_or_else(|_| "unknown GPU".to_string());
    let pci_bus_id = device
        .pci_info()
        .ok()
        .and_then(|pci| efatop_topology::normalize_bus_id(&pci.bus_id))
        .unwrap_or_default();
    let has_gpm = device.gpm_support().unwrap_or(false);
    Some(WatchedGpu { device, index: index as usize, name, pci_bus_id, has_gpm, previous_gpm_sample: None })
}

/// GPM values are per second in the unit NVML names (MiB/sec in its headers); bytes → Gbps.
fn gpm_gbps(value: f64, unit: &str) -> f64 {
    let bytes = if unit.contains("MiB") {
        value * 1_048_576.0
    } else if unit.contains("MB") {
        value * 1e6
    } else if unit.contains("KiB") {
        value * 1024.0
    } else {
        value
    };
    bytes * 8.0 / 1e9
}

fn read_gpu(nvml: &'static Nvml, gpu: &mut WatchedGpu) -> NodeGpu {
    let mut stats = NodeGpu {
        index: gpu.index,
        name: gpu.name.clone(),
        pci_bus_id: gpu.pci_bus_id.clone(),
        pcie_tx_gbps: None,
        pcie_rx_gbps: None,
        nvlink_tx_gbps: None,
        nvlink_rx_gbps: None,
        note: None,
    };
    if gpu.has_gpm {
        match gpu.device.gpm_sample() {
            Ok(sample) => {
                if let Some(before) = gpu.previous_gpm_sample.as_ref() {
                    match nvml_wrapper::gpm::gpm_metrics_get(nvml, before, &sample, &GPM_METRICS) {
                        Ok(results) => {
                            let value =
                                |i: usize| results.get(i).and_then(|r| r.as_ref().ok()).map(|r| gpm_gbps(r.value, &r.metric_info.unit));
                            stats.pcie_tx_gbps = value(0);
                            stats.pcie_rx_gbps = value(1);
                            stats.nvlink_tx_gbps = value(2);
                            stats.nvlink_rx_gbps = value(3);
                        }
                        Err(err) => stats.note = Some(format!("GPM metrics: {err}")),
                    }
                }
                gpu.previous_gpm_sample = Some(sample);
            }
            Err(err) => stats.note = Some(format!("GPM sample: {err}")),
        }
        return stats;
    }
    // Before Hopper: PCIe from NVML's own 20 ms window (KB/s), NVLink not at all.
    let kib_per_s = |counter| gpu.device.pcie_throughput(counter).ok().map(|kib| f64::from(kib) * 1024.0 * 8.0 / 1e9);
    stats.pcie_tx_gbps = kib_per_s(PcieUtilCounter::Send);
    stats.pcie_rx_gbps = kib_per_s(PcieUtilCounter::Receive);
    stats.note = Some("NVLink rates need GPM (Hopper or newer)".to_string());
    stats
}

/// One GPU's memory health as NVML reports it (DCGM's and NVIDIA's catalog's inputs for reset and
/// replace): row remaps pending a reset or failed, and uncorrectable ECC errors since the driver loaded.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GpuMemory {
    pub index: usize,
    /// `0000:86:00.0`.
    pub pci_bus_id: String,
    /// A row was marked for remapping and waits for a GPU reset; `None` when NVML does not say (no row
    /// remapping before Ampere).
    pub remap_pending: Option<bool>,
    /// A remap failed: the GPU has no spare row left where it needed one.
    pub remap_failed: Option<bool>,
    /// Rows remapped for uncorrectable errors, over the GPU's life.
    pub remapped_uncorrectable: Option<u64>,
    /// Uncorrectable ECC errors since the driver loaded; `None` where ECC is off or unsupported.
    pub volatile_uncorrectable: Option<u64>,
    /// PCIe generation and width now and at most, as NVML sees them: (gen, width, max gen, max width).
    pub pcie: Option<(u32, u32, u32, u32)>,
}

/// NVML's field ids for row remapping (`nvml.h`: `NVML_FI_DEV_REMAPPED_*`).
const FI_REMAPPED_UNC: u32 = 143;
const FI_REMAPPED_PENDING: u32 = 144;
const FI_REMAPPED_FAILURE: u32 = 145;

/// Every GPU's memory health through NVML; `Err` says why it cannot be read (no driver on this machine).
pub fn memory_health() -> Result<Vec<GpuMemory>, String> {
    use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
    use nvml_wrapper::enums::device::SampleValue;
    use nvml_wrapper::structs::device::FieldId;
    let nvml = nvml()?;
    let count = nvml.device_count().map_err(|err| format!("NVML cannot count GPUs: {err}"))?;
    let mut gpus = Vec::new();
    for index in 0..count {
        let device = nvml.device_by_index(index).map_err(|err| format!("NVML GPU {index}: {err}"))?;
        let pci_bus_id = device.pci_info().ok().and_then(|pci| efatop_topology::normalize_bus_id(&pci.bus_id)).unwrap_or_default();
        let ids = [FieldId(FI_REMAPPED_UNC), FieldId(FI_REMAPPED_PENDING), FieldId(FI_REMAPPED_FAILURE)];
        let values: Vec<Option<u64>> = device.field_values_for(&ids).map_or_else(
            |_| vec![None; ids.len()],
            |samples| {
                samples
                    .into_iter()
                    .map(|sample| match sample.ok()?.value.ok()? {
                        SampleValue::U32(v) => Some(u64::from(v)),
                        SampleValue::U64(v) => Some(v),
                        SampleValue::I64(v) => u64::try_from(v).ok(),
                        SampleValue::F64(v) => (v >= 0.0).then_some(v as u64),
                    })
                    .collect()
            },
        );
        let value = |i: usize| values.get(i).copied().flatten();
        let pcie = (|| {
            Some((
                device.current_pcie_link_gen().ok()?,
                device.current_pcie_link_width().ok()?,
                device.max_pcie_link_gen().ok()?,
                device.max_pcie_link_width().ok()?,
            ))
        })();
        gpus.push(GpuMemory {
            index: index as usize,
            pci_bus_id,
            remap_pending: value(1).map(|v| v != 0),
            remap_failed: value(2).map(|v| v != 0),
            remapped_uncorrectable: value(0),
            volatile_uncorrectable: device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile).ok(),
            pcie,
        });
    }
    Ok(gpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpm_units_convert_to_gbps() {
        assert!((gpm_gbps(1000.0, "MiB/sec") - 8.388_608).abs() < 1e-9);
        assert!((gpm_gbps(1000.0, "MB/s") - 8.0).abs() < 1e-9);
        assert!((gpm_gbps(1e9, "B/s") - 8.0).abs() < 1e-9);
    }

    #[test]
    fn a_machine_without_the_driver_says_so_and_does_not_crash() {
        let mut reader = GpuReader::open();
        match reader.read() {
            // This build machine has no NVIDIA driver; a GPU machine must list its GPUs instead.
            NodeGpus::Unavailable(reason) => assert_eq!(reason, NO_DRIVER),
            NodeGpus::Gpus(gpus) => assert!(!gpus.is_empty()),
        }
    }
}
