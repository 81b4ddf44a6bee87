//! Who this process is, the token it proves, and the node's EFA counters: read once at start (counters once
//! an interval), on the fold's thread.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use efatop_proto::auth::Secret;
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

/// Devices read at most.
const MAX_NICS: usize = 64;

/// The node's RDMA devices' port-1 byte counters, under `EFATOP_SYSFS_ROOT` (a fake node's tree) or `/`.
pub fn nics() -> Vec<NicCount> {
    let root = std::env::var_os("EFATOP_SYSFS_ROOT").map_or_else(|| PathBuf::from("/"), PathBuf::from);
    let Ok(dir) = std::fs::read_dir(root.join("sys/class/infiniband")) else { return Vec::new() };
    let mut names: Vec<String> = dir.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names.truncate(MAX_NICS);
    let read = |path: PathBuf| std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse::<u64>().ok());
    names
        .into_iter()
        .filter_map(|name| {
            let counters = root.join("sys/class/infiniband").join(&name).join("ports/1/hw_counters");
            let tx = read(counters.join("tx_bytes"))?;
            let rx = read(counters.join("rx_bytes"))?;
            Some(NicCount { name, tx_bytes: tx, rx_bytes: rx })
        })
        .collect()
}
