//! `efatop monitor`'s live Xid counts: every GPU's Xids in the kernel log ([`crate::xid::read`]),
//! read again every few seconds on a thread of their own, counted per GPU and Xid, and served to
//! Prometheus as the counter `efatop_gpu_xid_total{host, gpu, pci, xid, action}` (the action from NVIDIA's
//! Xid catalog, [`crate::xid::catalog`]). A count never goes down: the kernel's ring forgets old
//! records, and a re-read that finds fewer keeps the count it had.
//!
//! The counts are the process's (one kernel log per machine): [`XidWatch::start`] sets them, and
//! the exporter (`crate::prometheus`, its `xid` module) adds them to every scrape once set.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::xid;
use crate::Sysfs;

/// How often the kernel log is read again.
pub const EVERY: Duration = Duration::from_secs(5);

/// One GPU's count of one Xid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XidCount {
    /// The GPU's index among the node's NVIDIA GPUs in PCI order; `None` when the address is none of them.
    pub gpu: Option<usize>,
    /// `0000:86:00` as the driver logs it.
    pub pci: String,
    pub xid: u32,
    pub count: u64,
}

#[derive(Debug, Default)]
struct Counts {
    host: String,
    /// The GPUs' PCI addresses in PCI order.
    gpus: Vec<String>,
    seen: BTreeMap<(String, u32), u64>,
    /// Why the log could not be read, last time.
    error: Option<String>,
}

static WATCH: OnceLock<Arc<Mutex<Counts>>> = OnceLock::new();

/// The process's live Xid counts.
#[derive(Clone, Debug)]
pub struct XidWatch(Arc<Mutex<Counts>>);

impl XidWatch {
    /// Reads the kernel log under `sysfs`'s root now, then every [`EVERY`] on a thread; the first call
    /// in a process starts it, later ones get the same counts.
    pub fn start(host: &str, sysfs: &Sysfs) -> XidWatch {
        let root = sysfs.root().to_path_buf();
        let mut started = false;
        let shared = WATCH.get_or_init(|| {
            started = true;
            let gpus = sysfs.nvidia_gpus().into_iter().map(|f| f.address).collect();
            Arc::new(Mutex::new(Counts { host: host.to_string(), gpus, ..Counts::default() }))
        });
        let watch = XidWatch(shared.clone());
        if started {
            watch.read_once(&root);
            let (watch, root) = (watch.clone(), root.clone());
            std::thread::Builder::new()
                .name("efatop-xids".into())
                .spawn(move || loop {
                    std::thread::sleep(EVERY);
                    watch.read_once(&root);
                })
                .ok();
        }
        watch
    }

    /// The process's counts, once [`XidWatch::start`] ran.
    pub fn running() -> Option<XidWatch> {
        WATCH.get().cloned().map(XidWatch)
    }

    /// One read of the log: each count becomes the larger of what it was and what the log holds now.
    pub fn read_once(&self, root: &Path) {
        let read = xid::read(root);
        let Ok(mut counts) = self.0.lock() else { return };
        match read {
            Err(why) => counts.error = Some(why),
            Ok(log) => {
                counts.error = None;
                for ((pci, number), times) in log.all() {
                    let entry = counts.seen.entry((pci, number)).or_insert(0);
                    *entry = (*entry).max(times);
                }
            }
        }
    }

    /// Every GPU's count of every Xid seen, in (address, Xid) order.
    pub fn counts(&self) -> Vec<XidCount> {
        let Ok(counts) = self.0.lock() else { return Vec::new() };
        counts
            .seen
            .iter()
            .map(|((pci, number), count)| XidCount {
                gpu: counts.gpus.iter().position(|address| xid::names_function(pci, address)),
                pci: pci.clone(),
                xid: *number,
                count: *count,
            })
            .collect()
    }

    /// Why the log could not be read at the last try.
    pub fn error(&self) -> Option<String> {
        self.0.lock().ok().and_then(|counts| counts.error.clone())
    }

    pub(crate) fn host(&self) -> String {
        self.0.lock().map(|counts| counts.host.clone()).unwrap_or_default()
    }
}
