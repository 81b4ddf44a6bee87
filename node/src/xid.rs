//! GPU Xid errors from the kernel log, and what each calls for.
//!
//! The NVIDIA driver logs every Xid as a kernel message, `NVRM: Xid (PCI:0000:86:00): 79, pid=0, GPU has
//! fallen off the bus.` ([`parse_line`]). [`read`] takes them from `/dev/kmsg` where this process may read
//! it, else from `journalctl -k`, else `dmesg`; under another root (a fake node) from `ROOT/dev/kmsg`, a
//! plain file of `/dev/kmsg` records (`3,1234,5678,-;NVRM: Xid ...`).
//!
//! [`CATALOG`] gives each Xid an [`Action`]. Source: NVIDIA's "Xid Errors" documentation,
//! <https://docs.nvidia.com/deploy/xid-errors/> ("Analyzing Xid Errors with the Xid Catalog", the
//! catalog for Ampere and newer GPUs), whose "Resolution Bucket (Immediate Action)" column is mapped so:
//! `IGNORE` and `RESTART_APP` → `watch` (the application, not the node); `RESET_GPU` → `reset`;
//! `RESTART_BM` (restart bare metal) → `reboot`; and where the catalog's investigatory action is hardware
//! service (`CONTACT_SUPPORT` for a GPU that left the bus or could not record a row remap) → `replace`.
//! An Xid not in the table is `watch`, its reason saying so.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};

use efatop_proto::action::Action;

/// One Xid of the catalog: its number, a few words, and the action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XidKind {
    pub xid: u32,
    /// NVIDIA's description, shortened.
    pub what: &'static str,
    pub action: Action,
    /// Why that action (the catalog's resolution, in words).
    pub why: &'static str,
}

const APP: &str = "the catalog's immediate action is to restart the application (RESTART_APP); the GPU is not at fault unless it recurs";
const RESET: &str = "the catalog's immediate action is a GPU reset (RESET_GPU)";
const REBOOT: &str = "the catalog's immediate action is to restart the node (RESTART_BM)";

/// The Xids efatop knows, from NVIDIA's Xid catalog (see the module docs for the source and mapping).
pub const CATALOG: &[XidKind] = &[
    XidKind { xid: 8, what: "GPU stopped processing (channel idle timeout)", action: Action::Watch, why: APP },
    XidKind { xid: 13, what: "graphics engine exception", action: Action::Watch, why: APP },
    XidKind { xid: 31, what: "GPU memory page fault", action: Action::Watch, why: APP },
    XidKind { xid: 32, what: "invalid or corrupted push buffer stream", action: Action::Watch, why: APP },
    XidKind { xid: 43, what: "GPU stopped processing (channel reset)", action: Action::Watch, why: APP },
    XidKind { xid: 45, what: "preemptive cleanup after an earlier error", action: Action::Watch, why: "the catalog says to ignore it (IGNORE): it follows another Xid or a killed application" },
    XidKind { xid: 46, what: "GPU stopped processing", action: Action::Reset, why: RESET },
    XidKind { xid: 48, what: "double-bit ECC error", action: Action::Reset, why: "an uncorrectable (double-bit) ECC error: the catalog resets the GPU (RESET_GPU) so the row is remapped" },
    XidKind { xid: 61, what: "internal micro-controller breakpoint", action: Action::Reset, why: RESET },
    XidKind { xid: 62, what: "internal micro-controller halt", action: Action::Reset, why: RESET },
    XidKind { xid: 63, what: "row remap recorded, pending a reset", action: Action::Reset, why: "a row was marked for remapping and takes effect on the next GPU reset (RESET_GPU)" },
    XidKind { xid: 64, what: "row remap recording failed", action: Action::Replace, why: "the GPU could not record a row remap: the catalog's investigation is hardware service (CONTACT_SUPPORT)" },
    XidKind { xid: 74, what: "NVLink error", action: Action::Reset, why: "the catalog resets the GPU (RESET_GPU) and has the NVLink checked if it recurs" },
    XidKind { xid: 79, what: "GPU has fallen off the bus", action: Action::Replace, why: "the GPU left the PCI bus: the catalog restarts the node and has the hardware serviced (CONTACT_SUPPORT)" },
    XidKind { xid: 92, what: "high single-bit ECC error rate", action: Action::Watch, why: "corrected errors: the catalog watches the rate (no immediate action)" },
    XidKind { xid: 94, what: "contained ECC error", action: Action::Watch, why: "a contained uncorrectable ECC error: only the application that touched it stops (RESTART_APP); the row is remapped at the next reset" },
    XidKind { xid: 95, what: "uncontained ECC error", action: Action::Reset, why: "an uncontained uncorrectable ECC error: every application on the GPU is affected; the catalog resets the GPU (RESET_GPU)" },
    XidKind { xid: 109, what: "context switch timeout", action: Action::Watch, why: APP },
    XidKind { xid: 119, what: "GSP RPC timeout", action: Action::Reboot, why: REBOOT },
    XidKind { xid: 120, what: "GSP error", action: Action::Reboot, why: REBOOT },
    XidKind { xid: 140, what: "unrecovered ECC error", action: Action::Reset, why: RESET },
];

/// The catalog's entry for `xid`, if efatop knows it.
pub fn kind(xid: u32) -> Option<&'static XidKind> {
    CATALOG.iter().find(|kind| kind.xid == xid)
}

/// The action for `xid` and why: the catalog's, else `watch`.
pub fn action(xid: u32) -> (Action, &'static str, &'static str) {
    kind(xid).map_or((Action::Watch, "an Xid", "not in efatop's table: look it up in NVIDIA's Xid catalog"), |kind| {
        (kind.action, kind.what, kind.why)
    })
}

/// One Xid logged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidEvent {
    /// The GPU's PCI address as the driver logs it: `0000:86:00` (domain, bus, device).
    pub pci: String,
    pub xid: u32,
    /// The rest of the line (`pid=0, GPU has fallen off the bus.`).
    pub text: String,
}

/// What the kernel log said about Xids, and where it was read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidLog {
    /// `/dev/kmsg`, `journalctl -k`, `dmesg`, `ROOT/dev/kmsg`.
    pub source: String,
    pub events: Vec<XidEvent>,
}

/// At most this many Xid events are kept (a storm of one Xid says no more than its first thousands).
pub const MAX_EVENTS: usize = 10_000;

/// `NVRM: Xid (PCI:0000:86:00): 79, pid=0, GPU has fallen off the bus.` anywhere in `line` (a kmsg record
/// after its `;`, a journal or dmesg line with its timestamp) → the event.
pub fn parse_line(line: &str) -> Option<XidEvent> {
    let (_, rest) = line.split_once("NVRM: Xid (")?;
    let (address, rest) = rest.split_once("):")?;
    let address = address.trim().trim_start_matches("PCI:").trim();
    if address.is_empty() || !address.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.') {
        return None;
    }
    let rest = rest.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let xid = digits.parse().ok()?;
    let text = rest[digits.len()..].trim_start_matches(',').trim().to_string();
    Some(XidEvent { pci: address.to_ascii_lowercase(), xid, text })
}

/// Every Xid in `text`, one message a line, at most [`MAX_EVENTS`].
pub fn parse_text(text: &str) -> Vec<XidEvent> {
    text.lines().filter_map(parse_line).take(MAX_EVENTS).collect()
}

/// The Xids of the kernel log under `root`: `/` is this machine (see the module docs); another root's
/// `dev/kmsg` is a plain file. `Err` says why none could be read.
pub fn read(root: &Path) -> Result<XidLog, String> {
    if root != Path::new("/") {
        let path = root.join("dev/kmsg");
        return read_capped(&path)
            .map(|text| XidLog { source: path.display().to_string(), events: parse_text(&text) })
            .map_err(|err| format!("{}: {err}", path.display()));
    }
    let mut why = Vec::new();
    match read_kmsg() {
        Ok(events) => return Ok(XidLog { source: "/dev/kmsg".into(), events }),
        Err(err) => why.push(format!("/dev/kmsg: {err}")),
    }
    for (program, args, source) in [("journalctl", &["-k", "-o", "cat", "--no-pager", "-q"][..], "journalctl -k"), ("dmesg", &[][..], "dmesg")] {
        match Command::new(program).args(args).output() {
            Ok(output) if output.status.success() => {
                let text = String::from_utf8_lossy(&output.stdout);
                return Ok(XidLog { source: source.into(), events: parse_text(&text) });
            }
            Ok(output) => why.push(format!("{source}: {}", String::from_utf8_lossy(&output.stderr).trim())),
            Err(err) => why.push(format!("{source}: {err}")),
        }
    }
    Err(why.join("; "))
}

/// A file's text, at most 64 MiB of it (a crafted fake tree cannot cost more).
fn read_capped(path: &Path) -> std::io::Result<String> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(64 << 20).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The records `/dev/kmsg` holds now: opened non-blocking, one record a read, until it has no more.
fn read_kmsg() -> std::io::Result<Vec<XidEvent>> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open("/dev/kmsg")?;
    let mut events = Vec::new();
    let mut record = vec![0u8; 8192];
    // The ring holds a bounded number of records; this bound stops a log written faster than it is read.
    for _ in 0..1_000_000 {
        match file.read(&mut record) {
            Ok(0) => break,
            Ok(n) => {
                if let Some(event) = parse_line(&String::from_utf8_lossy(&record[..n])) {
                    if events.len() < MAX_EVENTS {
                        events.push(event);
                    }
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => break,
            // EPIPE: records were overwritten before this read; the next read goes on from the oldest.
            Err(err) if err.raw_os_error() == Some(libc::EPIPE) => {}
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(events)
}

/// Events per GPU address and Xid: (address, xid) → (count, first text).
pub fn count(events: &[XidEvent]) -> BTreeMap<(String, u32), (u64, String)> {
    let mut counts: BTreeMap<(String, u32), (u64, String)> = BTreeMap::new();
    for event in events {
        let entry = counts.entry((event.pci.clone(), event.xid)).or_insert_with(|| (0, event.text.clone()));
        entry.0 += 1;
    }
    counts
}

/// Whether a GPU at `function` (`0000:86:00.0`) is the one a driver message names (`0000:86:00`).
pub fn names_function(logged: &str, function: &str) -> bool {
    let function = function.to_ascii_lowercase();
    function == logged || function.strip_prefix(logged).is_some_and(|rest| rest.starts_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kmsg_journal_and_dmesg_lines_parse() {
        let kmsg = "3,1234,5678,-;NVRM: Xid (PCI:0000:86:00): 79, pid=0, GPU has fallen off the bus.";
        assert_eq!(
            parse_line(kmsg),
            Some(XidEvent { pci: "0000:86:00".into(), xid: 79, text: "pid=0, GPU has fallen off the bus.".into() })
        );
        let dmesg = "[ 5107.644336] NVRM: Xid (PCI:0000:03:00): 13, pid=1896, name=python, Graphics Exception";
        assert_eq!(parse_line(dmesg).map(|e| (e.pci, e.xid)), Some(("0000:03:00".into(), 13)));
        let old = "NVRM: Xid (0000:01:00): 31, Ch 00000010, intr 10000000";
        assert_eq!(parse_line(old).map(|e| e.xid), Some(31));
        assert_eq!(parse_line("NVRM: GPU at PCI:0000:2b:00: GPU-0b11"), None);
        assert_eq!(parse_line("NVRM: Xid (PCI:0000:2b:00): x, nonsense"), None);
        assert_eq!(parse_line("NVRM: Xid (PCI:$(rm -rf)): 79, x"), None);
    }

    #[test]
    fn the_catalog_maps_the_classes_the_issue_names() {
        assert_eq!(action(79).0, Action::Replace);
        for xid in [13, 31, 43] {
            assert_eq!(action(xid).0, Action::Watch, "{xid}");
        }
        assert_eq!(action(48).0, Action::Reset);
        assert_eq!(action(94).0, Action::Watch);
        assert_eq!(action(95).0, Action::Reset);
        assert_eq!(action(119).0, Action::Reboot);
        assert_eq!(action(9999).0, Action::Watch);
        let mut numbers: Vec<u32> = CATALOG.iter().map(|k| k.xid).collect();
        numbers.dedup();
        assert_eq!(numbers.len(), CATALOG.len(), "one entry per Xid, in order");
    }

    #[test]
    fn functions_match_the_logged_address_only() {
        assert!(names_function("0000:86:00", "0000:86:00.0"));
        assert!(!names_function("0000:86:00", "0000:86:001.0"));
        assert!(!names_function("0000:86:00", "0000:87:00.0"));
    }

    #[test]
    fn counts_group_by_gpu_and_xid() {
        let events = parse_text(
            "3,1,1,-;NVRM: Xid (PCI:0000:86:00): 13, a\n3,2,2,-;NVRM: Xid (PCI:0000:86:00): 13, b\n3,3,3,-;NVRM: Xid (PCI:0000:53:00): 79, c\n",
        );
        let counts = count(&events);
        assert_eq!(counts.get(&("0000:86:00".into(), 13)), Some(&(2, "a".into())));
        assert_eq!(counts.len(), 2);
    }
}
