//! Who this process is, the token it proves, and the node's EFA counters: read once at start (counters once
//! an interval), on the fold's thread.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use efatop_auth::Secret;
use efatop_proto::nccl::{NicCount, Origin};

/// The host's name (`EFATOP_HOST` overrides it: a test plays several hosts on one machine).
pub fn host() -> String {
    if let Ok(host) = std::env::var("EFATOP_HOST") {
        return host;
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname").map_or_else(|_| "unknown".into(), |h| h.trim().to_string())
}

/// The process's GPU: `EFATOP_GPU`, else the CUDA device NCCL's thread had when it first called `init`
/// ([`crate::runtime::INIT_GPU`]; the fold's own thread has no device of its own to ask about), else
/// `CUDA_VISIBLE_DEVICES` when it names one device, else the launcher's local rank.
pub fn gpu() -> Option<String> {
    if let Ok(gpu) = std::env::var("EFATOP_GPU") {
        return Some(gpu);
    }
    if let Some(device) = crate::runtime::INIT_GPU.get() {
        return Some(device.to_string());
    }
    if let Ok(visible) = std::env::var("CUDA_VISIBLE_DEVICES") {
        if !visible.is_empty() && !visible.contains(',') {
            return Some(visible);
        }
    }
    ["LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"].iter().find_map(|v| std::env::var(v).ok()).map(|r| format!("local rank {r}"))
}

pub fn origin(abi: u32) -> Origin {
    Origin {
        host: host(),
        pid: std::process::id(),
        gpu: gpu(),
        // `EFATOP_NCCL_VERSION` stands in where no NCCL is loaded (the trace player).
        nccl_version: crate::host::nccl_version().or_else(|| std::env::var("EFATOP_NCCL_VERSION").ok()),
        abi,
        plugin_version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

/// The user's token, as efatop's listeners take it: `EFATOP_TOKEN`, else the file `EFATOP_TOKEN_FILE` names,
/// else `~/.config/efatop/token` (never made here); a file must be this user's, readable by no one else,
/// one line.
pub fn token() -> Result<Secret, String> {
    if let Ok(token) = std::env::var("EFATOP_TOKEN") {
        return Secret::from_token(&token).map_err(|e| format!("EFATOP_TOKEN: {e}"));
    }
    let path = match std::env::var_os("EFATOP_TOKEN_FILE") {
        Some(path) => PathBuf::from(path),
        None => {
            let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).ok_or("no token: set EFATOP_TOKEN or EFATOP_TOKEN_FILE")?;
            Path::new(&home).join(".config/efatop/token")
        }
    };
    let text = read_token_file(&path).map_err(|e| format!("token file {}: {e}", path.display()))?;
    Secret::from_token(&text).map_err(|e| format!("token file {}: {e}", path.display()))
}

fn read_token_file(path: &Path) -> Result<String, String> {
    let mut file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path).map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.uid() != crate::host::euid() {
        return Err(format!("owned by uid {}, not by this user", meta.uid()));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!("readable by others (mode {:o})", meta.mode() & 0o777));
    }
    let mut text = String::new();
    Read::by_ref(&mut file).take(4096).read_to_string(&mut text).map_err(|e| e.to_string())?;
    Ok(text)
}

/// A counter file's value: opened by the one bounded reader (`efatop_files::attribute::open`: no link
/// followed, no blocking, so a FIFO planted in a fake node's tree returns at once; a regular file only),
/// read to at most 32 bytes (a u64 and its newline are 21): `None` when any of that fails or the text is not
/// a count.
fn counter(path: &Path) -> Option<u64> {
    let file = efatop_files::attribute::open(path).ok()?;
    let mut text = String::new();
    file.take(32).read_to_string(&mut text).ok()?;
    text.trim().parse::<u64>().ok()
}

/// Devices read at most.
const MAX_NICS: usize = 64;

/// The node's RDMA devices' port-1 byte and error counters, under `EFATOP_SYSFS_ROOT` (a fake node's tree) or
/// `/`, each marked when it is one of this process's GPU's NICs ([`rails`]).
pub fn nics() -> Vec<NicCount> {
    let root = sysfs_root();
    let Ok(dir) = std::fs::read_dir(root.join("sys/class/infiniband")) else { return Vec::new() };
    let mut names: Vec<String> = dir.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names.truncate(MAX_NICS);
    let rails = RAILS.get_or_init(|| rails(&root, gpu_pci_bus_id().as_deref()));
    let read = |path: PathBuf| counter(&path);
    names
        .into_iter()
        .filter_map(|name| {
            let counters = root.join("sys/class/infiniband").join(&name).join("ports/1/hw_counters");
            let tx = read(counters.join("tx_bytes"))?;
            let rx = read(counters.join("rx_bytes"))?;
            Some(NicCount {
                rail: rails.contains(&name),
                retrans: read(counters.join("retrans_pkts")),
                unresponsive: read(counters.join("unresponsive_remote_events")),
                impaired: read(counters.join("impaired_remote_conn_events")),
                name,
                tx_bytes: tx,
                rx_bytes: rx,
            })
        })
        .collect()
}

fn sysfs_root() -> PathBuf {
    std::env::var_os("EFATOP_SYSFS_ROOT").map_or_else(|| PathBuf::from("/"), PathBuf::from)
}

static RAILS: std::sync::OnceLock<std::collections::BTreeSet<String>> = std::sync::OnceLock::new();

/// The PCI address of this process's GPU: `EFATOP_GPU_PCI` (tests' fake nodes), else CUDA's for the device
/// NCCL's thread had at `init`.
pub fn gpu_pci_bus_id() -> Option<String> {
    if let Ok(id) = std::env::var("EFATOP_GPU_PCI") {
        return Some(id);
    }
    crate::host::cuda_pci_bus_id(*crate::runtime::INIT_GPU.get()?)
}

/// `00000000:53:00.0` (CUDA's) or `0000:53:00.0` as sysfs names it: a 4-digit domain, lower case.
fn sysfs_address(bus_id: &str) -> Option<String> {
    let (domain, rest) = bus_id.trim().split_once(':')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    Some(format!("{domain:04x}:{}", rest.to_ascii_lowercase()))
}

/// The GPU's NICs, as NCCL picks a GPU's NICs on a node: the RDMA devices closest to it on PCIe, those
/// under the deepest bridge they share with it (a p5's GPU shares a PCIe switch with its four EFA devices,
/// a p5en's with two). None where no device shares more than the root complex with it, or where the GPU is
/// not known.
pub fn rails(root: &Path, gpu_bus_id: Option<&str>) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let Some(address) = gpu_bus_id.and_then(sysfs_address) else { return out };
    let Ok(gpu) = std::fs::canonicalize(root.join("sys/bus/pci/devices").join(address)) else { return out };
    let Ok(dir) = std::fs::read_dir(root.join("sys/class/infiniband")) else { return out };
    let pci_parts = |path: &Path| -> Vec<String> {
        // The path from the root complex (`pci0000:00`) down: each component a bridge or the function.
        let parts: Vec<String> = path.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        let start = parts.iter().position(|p| p.starts_with("pci")).unwrap_or(parts.len());
        parts[start..].to_vec()
    };
    let gpu = pci_parts(&gpu);
    let mut best = 1;
    for entry in dir.filter_map(|e| e.ok()).take(MAX_NICS) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(device) = std::fs::canonicalize(entry.path().join("device")) else { continue };
        let nic = pci_parts(&device);
        // Components shared below the root complex, the function itself never (a GPU is not a NIC).
        let shared = gpu.iter().zip(&nic).take_while(|(a, b)| a == b).count().min(gpu.len().saturating_sub(1));
        if shared > best {
            best = shared;
            out.clear();
        }
        if shared == best && shared > 1 {
            out.insert(name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpus_rails_are_the_nics_under_its_pcie_switch() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path();
        let make = |path: &str| std::fs::create_dir_all(root.join(path)).expect("mkdir");
        let link = |target: &str, at: &str| {
            std::fs::create_dir_all(root.join(at).parent().expect("parent")).expect("mkdir");
            std::os::unix::fs::symlink(root.join(target), root.join(at)).expect("symlink");
        };
        // Two switches under two root ports: GPU 53 with NICs a and b, GPU 64 with NIC c.
        make("sys/devices/pci0000:00/0000:00:01.0/0000:e1:00.0/0000:53:00.0");
        make("sys/devices/pci0000:00/0000:00:01.0/0000:e1:00.0/0000:4f:00.0");
        make("sys/devices/pci0000:00/0000:00:01.0/0000:e1:00.0/0000:50:00.0");
        make("sys/devices/pci0000:00/0000:00:02.0/0000:e2:00.0/0000:64:00.0");
        make("sys/devices/pci0000:00/0000:00:02.0/0000:e2:00.0/0000:60:00.0");
        link("sys/devices/pci0000:00/0000:00:01.0/0000:e1:00.0/0000:53:00.0", "sys/bus/pci/devices/0000:53:00.0");
        link("sys/devices/pci0000:00/0000:00:02.0/0000:e2:00.0/0000:64:00.0", "sys/bus/pci/devices/0000:64:00.0");
        link("sys/devices/pci0000:00/0000:00:01.0/0000:e1:00.0/0000:4f:00.0", "sys/class/infiniband/a/device");
        link("sys/devices/pci0000:00/0000:00:01.0/0000:e1:00.0/0000:50:00.0", "sys/class/infiniband/b/device");
        link("sys/devices/pci0000:00/0000:00:02.0/0000:e2:00.0/0000:60:00.0", "sys/class/infiniband/c/device");
        let names = |set: std::collections::BTreeSet<String>| set.into_iter().collect::<Vec<_>>();
        assert_eq!(names(rails(root, Some("00000000:53:00.0"))), vec!["a", "b"], "CUDA's 8-digit domain");
        assert_eq!(names(rails(root, Some("0000:64:00.0"))), vec!["c"]);
        assert!(rails(root, Some("0000:99:00.0")).is_empty(), "an unknown GPU has no rails");
        assert!(rails(root, None).is_empty());
    }

    #[test]
    fn a_counter_is_a_short_regular_file_of_digits_and_nothing_else_blocks_or_counts() {
        let dir = tempfile::tempdir().expect("dir");
        let at = |name: &str| dir.path().join(name);
        std::fs::write(at("good"), "12345\n").expect("write");
        assert_eq!(counter(&at("good")), Some(12345));
        std::fs::write(at("long"), "1".repeat(10 << 20)).expect("write");
        assert_eq!(counter(&at("long")), None, "10 MiB of digits");
        std::fs::write(at("word"), "abc\n").expect("write");
        assert_eq!(counter(&at("word")), None, "not a count");
        std::os::unix::fs::symlink(at("good"), at("link")).expect("symlink");
        assert_eq!(counter(&at("link")), None, "a link");
        assert!(std::process::Command::new("mkfifo").arg(at("fifo")).status().expect("mkfifo").success());
        assert_eq!(counter(&at("fifo")), None, "a FIFO, at once");
        assert_eq!(counter(&at("missing")), None);
    }
}
