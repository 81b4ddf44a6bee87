//! GPU Xid errors from the kernel log, and what each calls for.
//!
//! The NVIDIA driver logs every Xid as a kernel message, `NVRM: Xid (PCI:0000:86:00): 79, pid=0, GPU has
//! fallen off the bus.` ([`parse_line`]). [`read`] takes them from the kernel log under a root: `ROOT/dev/kmsg`
//! (on this machine `/dev/kmsg`, else `journalctl -k`, else `dmesg`). A character device there must be the
//! kernel's log (char 1:11, what `/dev/kmsg` is, also as `/host/dev/kmsg` in a container that mounts the
//! host): it is read as the kernel gives it, opened non-blocking, one record per `read()` into a buffer that
//! holds the largest record, until `EAGAIN`; `EPIPE` (records overwritten while read) is counted and reading
//! goes on. A plain file there (a fake node's) holds one record a line in the same format
//! (`3,1234,5678,-;NVRM: Xid ...`). Anything else (a FIFO, a socket, another device) is not read.
//!
//! Every read is bounded ([`Limits`]: records, bytes, time); a log not read to its end says why
//! ([`XidLog::unfinished`]). Events are counted as they are read, never kept: per GPU address and Xid a
//! count, the first and last time (µs since boot) and the last message, cut to [`SAMPLE_MAX`] characters.
//!
//! **The reset window.** Only Xids since the NVIDIA driver last loaded count ([`XidLog::current`]): the
//! driver's own record of a load (`NVRM: loading NVIDIA UNIX ... Kernel Module ...`) moves everything
//! before it to [`XidLog::history`], which is reported but not judged. A GPU reset that does not reload the
//! driver (`nvidia-smi -r`) is not recognised: no kernel message for it could be confirmed.
//!
//! [`catalog`] gives each Xid an [`Action`]: the data file `node/data/xid-catalog.csv`, one row per Xid of
//! NVIDIA's Xid catalog with its source, date read and the mapping of the catalog's resolution buckets to
//! efatop's actions in its header. Xid 154 carries the recovery action in its text ([`judge`]); Xid 79 is
//! `reboot`, and `replace` when it recurs after the driver reloaded (in the rule, which sees the history).
//! An Xid not in the table is `watch`, its reason saying so.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use efatop_proto::action::Action;

/// The catalog as data (see its header for the source and the mapping).
pub const CATALOG_CSV: &str = include_str!("../data/xid-catalog.csv");

/// One Xid of the catalog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XidKind {
    pub xid: u32,
    /// NVIDIA's mnemonic (`ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS`).
    pub mnemonic: &'static str,
    /// The catalog's immediate resolution bucket (`RESTART_BM`); `-` where it gives none.
    pub bucket: &'static str,
    /// efatop's action; `None` for an Xid whose message names it (154).
    pub action: Option<Action>,
    /// A few words of efatop's own.
    pub what: &'static str,
    /// Why the action differs from the bucket's plain mapping, or how a workflow is read; may be empty.
    pub note: &'static str,
}

/// Every Xid of the catalog, in order.
pub fn catalog() -> &'static [XidKind] {
    static CATALOG: OnceLock<Vec<XidKind>> = OnceLock::new();
    CATALOG.get_or_init(|| parse_catalog(CATALOG_CSV).unwrap_or_else(|why| panic!("node/data/xid-catalog.csv: {why}")))
}

/// The rows of `text` (the catalog's format: `#` comments, a header, then `xid,mnemonic,bucket,action,what,note`).
fn parse_catalog(text: &'static str) -> Result<Vec<XidKind>, String> {
    let mut rows: Vec<XidKind> = Vec::new();
    let mut lines = text.lines().filter(|line| !line.starts_with('#') && !line.trim().is_empty());
    if lines.next() != Some("xid,mnemonic,bucket,action,what,note") {
        return Err("no header line `xid,mnemonic,bucket,action,what,note`".into());
    }
    for line in lines {
        let fields: Vec<&'static str> = line.split(',').collect();
        let [xid, mnemonic, bucket, action, what, note] = fields[..] else {
            return Err(format!("{line:?}: not 6 fields"));
        };
        let xid: u32 = xid.parse().map_err(|_| format!("{line:?}: Xid {xid:?} is not a number"))?;
        let action = match action {
            "message" => None,
            word => Some(Action::ALL.into_iter().find(|a| a.name() == word).ok_or_else(|| format!("{line:?}: action {word:?}"))?),
        };
        if rows.last().is_some_and(|last| last.xid >= xid) {
            return Err(format!("{line:?}: Xids out of order"));
        }
        rows.push(XidKind { xid, mnemonic, bucket, action, what, note });
    }
    Ok(rows)
}

/// The catalog's entry for `xid`, if it lists it.
pub fn kind(xid: u32) -> Option<&'static XidKind> {
    let catalog = catalog();
    catalog.binary_search_by_key(&xid, |kind| kind.xid).ok().map(|at| &catalog[at])
}

/// The action a bucket maps to (the catalog's header says the same).
pub fn bucket_action(bucket: &str) -> Option<Action> {
    Some(match bucket {
        "IGNORE" => Action::None,
        "RESTART_APP" | "CONTACT_SUPPORT" | "WORKFLOW_XID_45" | "-" => Action::Watch,
        "RESET_GPU" | "WORKFLOW_XID_48" | "WORKFLOW_NVLINK_ERR" | "WORKFLOW_NVLINK5_ERR" | "CHECK_UVM" => Action::Reset,
        "RESTART_BM" | "UPDATE_SWFW" | "RESTART_VM" => Action::Reboot,
        "CHECK_MECHANICALS" => Action::Replace,
        _ => return None,
    })
}

/// A bucket in words.
fn bucket_words(bucket: &str) -> &'static str {
    match bucket {
        "IGNORE" => "no action",
        "RESTART_APP" => "restart the application; the GPU is not at fault unless it recurs",
        "RESET_GPU" => "reset the GPU",
        "RESTART_BM" => "restart the node",
        "CONTACT_SUPPORT" => "contact NVIDIA support",
        "CHECK_MECHANICALS" => "check the board's seating and power connections",
        "UPDATE_SWFW" => "update the driver and firmware",
        "RESTART_VM" => "restart the VM that owns the GPU",
        "XID_154" => "the recovery action its message names",
        "-" => "no resolution given yet",
        _ => "follow its workflow",
    }
}

/// What an Xid calls for: the action, a few words on the Xid, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judged {
    pub action: Action,
    pub what: &'static str,
    pub why: String,
}

/// The action for `xid` whose message (after the number) is `text`: the catalog's; for 154 the recovery
/// action its text names; `watch` for an Xid the catalog does not list.
pub fn judge(xid: u32, text: &str) -> Judged {
    let Some(kind) = kind(xid) else {
        return Judged {
            action: Action::Watch,
            what: "an Xid",
            why: "not in NVIDIA's Xid catalog as efatop read it (node/data/xid-catalog.csv): watch, and look it up".into(),
        };
    };
    let mut why = format!("NVIDIA's Xid catalog: {} ({})", bucket_words(kind.bucket), kind.bucket);
    if !kind.note.is_empty() {
        why.push_str("; ");
        why.push_str(kind.note);
    }
    let action = if let Some(action) = kind.action {
        action
    } else if let Some((action, named)) = recovery_action(text) {
        why = format!("NVIDIA's Xid catalog: follow the recovery action Xid 154 names, here {named}");
        action
    } else {
        why = "Xid 154 names a recovery action efatop does not know (or none): watch, and read the message".into();
        Action::Watch
    };
    Judged { action, what: kind.what, why }
}

/// The action for `xid` (as [`judge`] with no message), its words and why.
pub fn action(xid: u32) -> (Action, &'static str, String) {
    let judged = judge(xid, "");
    (judged.action, judged.what, judged.why)
}

/// Xid 154's `GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)` → the action it
/// changed to, and its name. The codes are NVML's `nvmlDeviceGpuRecoveryAction_t`: 0 none, 1 GPU reset,
/// 2 node reboot, 3 drain P2P, 4 drain and reset, 5 recover the IMEX domain, 6 bus reset, 7 system reboot;
/// where the code is missing the name in parentheses is read.
pub fn recovery_action(text: &str) -> Option<(Action, String)> {
    let (_, to) = text.rsplit_once(" to ")?;
    let to = to.trim();
    let code = to.strip_prefix("0x").and_then(|rest| {
        let digits: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
        u32::from_str_radix(&digits, 16).ok()
    });
    let name = to.split_once('(').and_then(|(_, rest)| rest.split_once(')')).map(|(name, _)| name.trim().to_string());
    let by_name = |name: &str| match name.to_ascii_lowercase().as_str() {
        "none" => Some(0),
        "gpu reset required" | "gpu reset" => Some(1),
        "node reboot required" | "node reboot" => Some(2),
        "drain p2p" => Some(3),
        "drain and reset" => Some(4),
        _ => None,
    };
    let code = code.or_else(|| name.as_deref().and_then(by_name))?;
    let action = match code {
        0 => Action::None,
        1 | 3 | 4 | 6 => Action::Reset,
        2 | 5 | 7 => Action::Reboot,
        _ => return None,
    };
    Some((action, name.unwrap_or_else(|| format!("0x{code:x}"))))
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

/// `NVRM: Xid (PCI:0000:86:00): 79, pid=0, GPU has fallen off the bus.` anywhere in `line` (a kmsg record
/// after its `;`, a journal or dmesg line with its timestamp) → the event.
pub fn parse_line(line: &str) -> Option<XidEvent> {
    let (_, rest) = line.split_once("NVRM: Xid (")?;
    let (address, rest) = rest.split_once("):")?;
    let address = address.trim().trim_start_matches("PCI:").trim();
    if address.is_empty() || address.len() > 16 || !address.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.') {
        return None;
    }
    let rest = rest.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).take(6).collect();
    let xid = digits.parse().ok()?;
    let text = rest[digits.len()..].trim_start_matches(',').trim().to_string();
    Some(XidEvent { pci: address.to_ascii_lowercase(), xid, text })
}

/// What the NVIDIA driver logs when it loads: `NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07 ...`
/// (or `... Open Kernel Module for x86_64 ...`).
pub const DRIVER_LOADED: &str = "NVRM: loading NVIDIA UNIX";

/// A record's time (µs since boot) and its message: a kmsg record `3,1234,5678,-;text` (its third field), a
/// dmesg or `journalctl -o short-monotonic` line `[ 5.678000] text`, or a line without a time.
pub fn split_record(line: &str) -> (Option<u64>, &str) {
    if let Some((header, message)) = line.split_once(';') {
        let fields: Vec<&str> = header.splitn(4, ',').collect();
        if fields.len() >= 3 && fields[..3].iter().all(|f| !f.is_empty() && f.len() <= 20 && f.bytes().all(|b| b.is_ascii_digit())) {
            return (fields[2].parse().ok(), message);
        }
    }
    if let Some(rest) = line.trim_start().strip_prefix('[') {
        if let Some((stamp, message)) = rest.split_once(']') {
            if let Some((seconds, fraction)) = stamp.trim().split_once('.') {
                if let (Ok(seconds), true) = (seconds.parse::<u64>(), fraction.len() == 6 && fraction.bytes().all(|b| b.is_ascii_digit())) {
                    let micros = fraction.parse::<u64>().unwrap_or(0);
                    return (seconds.checked_mul(1_000_000).and_then(|s| s.checked_add(micros)), message.trim_start());
                }
            }
        }
    }
    (None, line)
}

/// At most this many characters of a message are kept.
pub const SAMPLE_MAX: usize = 160;
/// At most this many (GPU, Xid) pairs are named, in the window and in the history each; more are counted.
pub const MAX_PAIRS: usize = 4096;
/// A kernel log record is at most about 8 KiB; a read of one into a smaller buffer fails with `EINVAL`.
pub const RECORD_BUFFER: usize = 16 << 10;

/// One GPU's count of one Xid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidTally {
    /// `0000:86:00` as the driver logs it.
    pub pci: String,
    pub xid: u32,
    pub count: u64,
    /// µs since boot of the first and last, where the log gives times.
    pub first_us: Option<u64>,
    pub last_us: Option<u64>,
    /// The last one's message after the number, control characters escaped, at most [`SAMPLE_MAX`] characters.
    pub sample: String,
}

/// `text` with control characters escaped, cut to [`SAMPLE_MAX`] characters.
fn sample_of(text: &str) -> String {
    let mut sample = String::new();
    for (at, c) in text.chars().enumerate() {
        if at == SAMPLE_MAX {
            sample.push_str("...");
            break;
        }
        if c.is_control() {
            sample.extend(c.escape_default());
        } else {
            sample.push(c);
        }
    }
    sample
}

#[derive(Debug, Default)]
struct Tallies(BTreeMap<(String, u32), XidTally>);

impl Tallies {
    /// Counts one; `false` when the table is full and this (GPU, Xid) is new.
    fn add(&mut self, event: XidEvent, at: Option<u64>) -> bool {
        let full = self.0.len() >= MAX_PAIRS;
        let key = (event.pci, event.xid);
        if full && !self.0.contains_key(&key) {
            return false;
        }
        let tally = self.0.entry(key.clone()).or_insert_with(|| XidTally {
            pci: key.0.clone(),
            xid: key.1,
            count: 0,
            first_us: at,
            last_us: at,
            sample: String::new(),
        });
        tally.count = tally.count.saturating_add(1);
        tally.first_us = tally.first_us.min(at).or(tally.first_us).or(at);
        tally.last_us = tally.last_us.max(at);
        tally.sample = sample_of(&event.text);
        true
    }

    /// Adds every count of `other` (later records) to these; the number that did not fit.
    fn absorb(&mut self, other: Tallies) -> u64 {
        let mut dropped = 0;
        for (key, tally) in other.0 {
            if self.0.len() >= MAX_PAIRS && !self.0.contains_key(&key) {
                dropped += tally.count;
                continue;
            }
            let mine = self.0.entry(key).or_insert_with(|| XidTally { count: 0, first_us: tally.first_us, ..tally.clone() });
            mine.count = mine.count.saturating_add(tally.count);
            mine.first_us = mine.first_us.min(tally.first_us).or(mine.first_us).or(tally.first_us);
            mine.last_us = mine.last_us.max(tally.last_us);
            mine.sample = tally.sample;
        }
        dropped
    }
}

/// How much of a log one read may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub records: u64,
    pub bytes: u64,
    pub time: Duration,
}

/// The time a read of the kernel log may take within `efatop check`'s budget.
pub const READ_BUDGET: Duration = Duration::from_secs(5);

impl Default for Limits {
    /// A million records, 64 MiB, [`READ_BUDGET`]: more than any kernel ring holds.
    fn default() -> Self {
        Self { records: 1_000_000, bytes: 64 << 20, time: READ_BUDGET }
    }
}

/// What the kernel log said about Xids, and where and how far it was read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidLog {
    /// `/dev/kmsg`, `ROOT/dev/kmsg`, `journalctl -k`, `dmesg`.
    pub source: String,
    /// Xids since the NVIDIA driver last loaded (or since boot when the log has no load), by GPU and Xid.
    pub current: Vec<XidTally>,
    /// Xids before that: history, not judged.
    pub history: Vec<XidTally>,
    /// When the driver last loaded, µs since boot, when the log says.
    pub driver_loaded_us: Option<u64>,
    /// How many times the log records the driver loading.
    pub driver_loads: u64,
    /// Records and bytes read.
    pub records: u64,
    pub bytes: u64,
    /// How many times records were overwritten before they were read (`EPIPE`).
    pub overwritten: u64,
    /// Xids counted but not named: more (GPU, Xid) pairs than [`MAX_PAIRS`].
    pub unnamed: u64,
    /// Why the log was not read to its end (a limit reached), when it was not.
    pub unfinished: Option<String>,
}

impl XidLog {
    /// The window that counts, in words: `since the NVIDIA driver loaded 12.3 s after boot`, `since boot`.
    pub fn window(&self) -> String {
        match (self.driver_loads, self.driver_loaded_us) {
            (0, _) => "since boot (no NVIDIA driver load in the log)".into(),
            (_, Some(at)) => format!("since the NVIDIA driver loaded {} after boot", seconds(at)),
            (_, None) => "since the NVIDIA driver last loaded".into(),
        }
    }

    /// The Xids of the whole log, window and history, per GPU and Xid.
    pub fn all(&self) -> BTreeMap<(String, u32), u64> {
        let mut counts: BTreeMap<(String, u32), u64> = BTreeMap::new();
        for tally in self.history.iter().chain(&self.current) {
            let count = counts.entry((tally.pci.clone(), tally.xid)).or_insert(0);
            *count = count.saturating_add(tally.count);
        }
        counts
    }
}

/// `12345678` µs → `12.3 s`.
pub fn seconds(micros: u64) -> String {
    format!("{:.1} s", micros as f64 / 1e6)
}

/// Reads records into tallies within [`Limits`].
struct Reader {
    current: Tallies,
    history: Tallies,
    driver_loaded_us: Option<u64>,
    driver_loads: u64,
    records: u64,
    bytes: u64,
    overwritten: u64,
    unnamed: u64,
    limits: Limits,
    started: Instant,
}

impl Reader {
    fn new(limits: Limits) -> Self {
        Self {
            current: Tallies::default(),
            history: Tallies::default(),
            driver_loaded_us: None,
            driver_loads: 0,
            records: 0,
            bytes: 0,
            overwritten: 0,
            unnamed: 0,
            limits,
            started: Instant::now(),
        }
    }

    /// One record (one line of text).
    fn record(&mut self, line: &str) {
        self.records += 1;
        let (at, message) = split_record(line);
        if message.contains(DRIVER_LOADED) {
            self.driver_loads += 1;
            self.driver_loaded_us = at.or(self.driver_loaded_us);
            let before = std::mem::take(&mut self.current);
            self.unnamed += self.history.absorb(before);
            return;
        }
        if let Some(event) = parse_line(message) {
            let earlier = matches!((at, self.driver_loaded_us), (Some(at), Some(loaded)) if at < loaded);
            let tallies = if earlier { &mut self.history } else { &mut self.current };
            if !tallies.add(event, at) {
                self.unnamed += 1;
            }
        }
    }

    /// Why reading must stop now, if it must.
    fn over(&self) -> Option<String> {
        let elapsed = self.started.elapsed();
        if self.records >= self.limits.records {
            Some(format!("stopped at {} records", self.records))
        } else if self.bytes >= self.limits.bytes {
            Some(format!("stopped at {} bytes", self.bytes))
        } else if elapsed >= self.limits.time {
            Some(format!("stopped after {:.1} s with {} records read", elapsed.as_secs_f64(), self.records))
        } else {
            None
        }
    }

    fn finish(self, source: String, unfinished: Option<String>) -> XidLog {
        XidLog {
            source,
            current: self.current.0.into_values().collect(),
            history: self.history.0.into_values().collect(),
            driver_loaded_us: self.driver_loaded_us,
            driver_loads: self.driver_loads,
            records: self.records,
            bytes: self.bytes,
            overwritten: self.overwritten,
            unnamed: self.unnamed,
            unfinished,
        }
    }
}

/// The Xids of the kernel log under `root` within [`Limits::default`]. `Err` says why it could not be read.
pub fn read(root: &Path) -> Result<XidLog, String> {
    read_with(root, Limits::default())
}

/// [`read`] within `limits`.
pub fn read_with(root: &Path, limits: Limits) -> Result<XidLog, String> {
    if root != Path::new("/") {
        let path = root.join("dev/kmsg");
        let source = path.display().to_string();
        return read_path(&path, source.clone(), limits).map_err(|err| format!("{source}: {err}"));
    }
    let mut why = Vec::new();
    match read_path(Path::new("/dev/kmsg"), "/dev/kmsg".into(), limits) {
        Ok(log) => return Ok(log),
        Err(err) => why.push(format!("/dev/kmsg: {err}")),
    }
    for (program, args, source) in
        [("journalctl", &["-k", "-o", "short-monotonic", "--no-pager", "-q"][..], "journalctl -k"), ("dmesg", &[][..], "dmesg")]
    {
        match read_command(program, args, source, limits) {
            Ok(log) => return Ok(log),
            Err(err) => why.push(format!("{source}: {err}")),
        }
    }
    Err(why.join("; "))
}

/// `/dev/kmsg` is char device 1:11.
const KMSG_DEVICE: (u64, u64) = (1, 11);

/// Linux's major and minor numbers of a `dev_t` (glibc's encoding).
fn major_minor(dev: u64) -> (u64, u64) {
    (((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff), (dev & 0xff) | ((dev >> 12) & !0xff))
}

fn read_path(path: &Path, source: String, limits: Limits) -> std::io::Result<XidLog> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let metadata = file.metadata()?;
    let kind = metadata.file_type();
    let other = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    if kind.is_char_device() {
        let device = major_minor(metadata.rdev());
        if device != KMSG_DEVICE {
            return Err(other(format!("character device {}:{}, not the kernel log (1:11)", device.0, device.1)));
        }
        return read_device(file, source, limits);
    }
    if kind.is_file() {
        return read_lines(file, source, limits);
    }
    Err(other(format!("{}, not the kernel log", efatop_files::attribute::kind_of(kind))))
}

/// The kernel log device: one record per read, until `EAGAIN`.
fn read_device(mut file: std::fs::File, source: String, limits: Limits) -> std::io::Result<XidLog> {
    let mut reader = Reader::new(limits);
    let mut record = vec![0u8; RECORD_BUFFER];
    loop {
        if let Some(why) = reader.over() {
            return Ok(reader.finish(source, Some(why)));
        }
        match file.read(&mut record) {
            Ok(0) => break,
            Ok(n) => {
                reader.bytes += n as u64;
                let text = String::from_utf8_lossy(&record[..n]);
                // A record is its line; continuation lines (` KEY=value`) follow it.
                reader.record(text.split('\n').next().unwrap_or_default());
            }
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => break,
            // EPIPE: the ring overwrote records before this read; the next read goes on from the oldest left.
            Err(err) if err.raw_os_error() == Some(libc::EPIPE) => reader.overwritten += 1,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(reader.finish(source, None))
}

/// Text, one record a line (a fake node's `dev/kmsg`, `journalctl`, `dmesg`); a line longer than a record
/// is skipped.
fn read_lines(input: impl Read, source: String, limits: Limits) -> std::io::Result<XidLog> {
    let mut reader = Reader::new(limits);
    let mut input = BufReader::with_capacity(64 << 10, input);
    let mut line = Vec::with_capacity(256);
    loop {
        if let Some(why) = reader.over() {
            return Ok(reader.finish(source, Some(why)));
        }
        line.clear();
        let n = (&mut input).take(RECORD_BUFFER as u64).read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        reader.bytes += n as u64;
        if !line.ends_with(b"\n") && n == RECORD_BUFFER {
            // Longer than any record: skip to its end, still within the limits.
            loop {
                line.clear();
                let skipped = (&mut input).take(RECORD_BUFFER as u64).read_until(b'\n', &mut line)?;
                reader.bytes += skipped as u64;
                if skipped == 0 || line.ends_with(b"\n") || reader.over().is_some() {
                    break;
                }
            }
            continue;
        }
        if line.first() == Some(&b' ') {
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        reader.record(text.trim_end_matches(['\n', '\r']));
    }
    Ok(reader.finish(source, None))
}

/// A program's output read as log lines, within `limits` (the program is stopped when they run out).
fn read_command(program: &str, args: &[&str], source: &str, limits: Limits) -> Result<XidLog, String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|err| err.to_string())?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (send, receive) = std::sync::mpsc::channel();
    let source_name = source.to_string();
    std::thread::spawn(move || {
        let _ = send.send(read_lines(stdout, source_name, limits));
    });
    let outcome = receive.recv_timeout(limits.time + Duration::from_millis(500));
    // Whatever it read, the program is done with: it exits once its output ended (a second's grace), else
    // it is stopped; then reaped.
    let grace = Instant::now() + Duration::from_secs(1);
    while outcome.as_ref().is_ok_and(|read| read.as_ref().is_ok_and(|log| log.unfinished.is_none()))
        && Instant::now() < grace
        && child.try_wait().map_err(|err| err.to_string())?.is_none()
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    if child.try_wait().map_err(|err| err.to_string())?.is_none() {
        let _ = child.kill();
    }
    let status = child.wait().map_err(|err| err.to_string())?;
    match outcome {
        // A kernel log always holds the boot's messages: none read means none could be (no permission).
        Ok(Ok(log)) if log.records == 0 => Err(format!("no records ({status}): not allowed to read the kernel's messages?")),
        Ok(Ok(log)) if status.success() || log.unfinished.is_some() => Ok(log),
        Ok(Ok(_)) => Err(format!("exited with {status}")),
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err(format!("no output within {:.1} s", limits.time.as_secs_f64())),
    }
}

/// Whether a GPU at `function` (`0000:86:00.0`) is the one a driver message names (`0000:86:00`).
pub fn names_function(logged: &str, function: &str) -> bool {
    let function = function.to_ascii_lowercase();
    function == logged || function.strip_prefix(logged).is_some_and(|rest| rest.starts_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write as _;

    fn log_of(text: &str, limits: Limits) -> XidLog {
        read_lines(text.as_bytes(), "test".into(), limits).unwrap()
    }

    #[test]
    fn kmsg_journal_and_dmesg_lines_parse() {
        let kmsg = "3,1234,5678,-;NVRM: Xid (PCI:0000:86:00): 79, pid=0, GPU has fallen off the bus.";
        let (at, message) = split_record(kmsg);
        assert_eq!(at, Some(5678));
        assert_eq!(
            parse_line(message),
            Some(XidEvent { pci: "0000:86:00".into(), xid: 79, text: "pid=0, GPU has fallen off the bus.".into() })
        );
        let dmesg = "[ 5107.644336] NVRM: Xid (PCI:0000:03:00): 13, pid=1896, name=python, Graphics Exception";
        assert_eq!(split_record(dmesg).0, Some(5_107_644_336));
        assert_eq!(parse_line(dmesg).map(|e| (e.pci, e.xid)), Some(("0000:03:00".into(), 13)));
        let old = "NVRM: Xid (0000:01:00): 31, Ch 00000010, intr 10000000";
        assert_eq!(split_record(old), (None, old));
        assert_eq!(parse_line(old).map(|e| e.xid), Some(31));
        assert_eq!(parse_line("NVRM: GPU at PCI:0000:2b:00: GPU-0b11"), None);
        assert_eq!(parse_line("NVRM: Xid (PCI:0000:2b:00): x, nonsense"), None);
        assert_eq!(parse_line("NVRM: Xid (PCI:$(rm -rf)): 79, x"), None);
    }

    #[test]
    fn the_catalog_parses_and_covers_every_xid_it_lists_in_order() {
        let catalog = catalog();
        assert_eq!(catalog.len(), 172);
        assert!(catalog.iter().enumerate().all(|(at, kind)| kind.xid as usize == at + 1), "1 to 172, one row each");
        assert!(CATALOG_CSV.contains("https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"));
        assert!(parse_catalog("xid,mnemonic,bucket,action,what,note\n1,A,IGNORE,none,x\n").is_err());
        assert!(parse_catalog("xid,mnemonic,bucket,action,what,note\n2,A,IGNORE,none,x,\n1,B,IGNORE,none,y,\n").is_err());
    }

    /// A test per row: each row's action is its bucket's (the header's mapping), or a note says why not.
    #[test]
    fn every_row_acts_as_its_bucket_maps_or_says_why() {
        for kind in catalog() {
            let mapped = bucket_action(kind.bucket);
            match (kind.action, mapped) {
                (None, _) => assert_eq!(kind.bucket, "XID_154", "{kind:?}"),
                (Some(action), Some(mapped)) if action == mapped => {}
                (Some(action), Some(mapped)) => {
                    assert!(
                        action > mapped && !kind.note.is_empty(),
                        "Xid {}: {action} for {}, and no note why: {kind:?}",
                        kind.xid,
                        kind.bucket
                    );
                }
                (Some(_), None) => {
                    panic!("Xid {}: bucket {} has no mapping", kind.xid, kind.bucket);
                }
            }
            let judged = judge(kind.xid, "");
            assert!(judged.why.contains(kind.bucket) || kind.xid == 154, "{judged:?}");
            assert!(!kind.what.is_empty() && !kind.mnemonic.is_empty(), "{kind:?}");
        }
    }

    #[test]
    fn the_xids_the_issue_names_act_as_the_catalog_says() {
        for xid in [144, 145, 146, 147, 148, 149, 150, 109, 136, 143, 155, 156, 158, 64, 119, 48, 95, 74] {
            assert_eq!(action(xid).0, Action::Reset, "Xid {xid}");
        }
        assert_eq!(action(160).0, Action::Reboot);
        assert_eq!(action(79).0, Action::Reboot);
        assert_eq!(action(63).0, Action::None);
        assert_eq!(action(54).0, Action::Replace);
        for xid in [13, 31, 94, 45] {
            assert_eq!(action(xid).0, Action::Watch, "Xid {xid}");
        }
        assert_eq!(action(13).0, Action::Watch);
        assert_eq!(action(9999).0, Action::Watch);
        assert!(action(9999).2.contains("not in NVIDIA's Xid catalog"));
    }

    #[test]
    fn xid_154_acts_on_the_action_its_text_names() {
        let judged = |text: &str| judge(154, text).action;
        assert_eq!(judged("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"), Action::Reboot);
        assert_eq!(judged("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"), Action::Reset);
        assert_eq!(judged("GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)"), Action::Reset);
        assert_eq!(judged("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)"), Action::Reset);
        assert_eq!(judged("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)"), Action::None);
        assert_eq!(judged("GPU recovery action changed to (Node Reboot Required)"), Action::Reboot);
        assert_eq!(judged("something else entirely"), Action::Watch);
        assert_eq!(judged("changed from 0x0 to 0x63 (Who Knows)"), Action::Watch);
        assert!(judge(154, "changed from 0x0 (None) to 0x2 (Node Reboot Required)").why.contains("Node Reboot Required"));
    }

    #[test]
    fn a_flood_is_counted_whole_with_bounded_state() {
        let mut text = String::new();
        for at in 0..12_000 {
            let _ = writeln!(text, "3,{at},{},-;NVRM: Xid (PCI:0000:53:00): 31, pid={at}, MMU Fault", 1000 + at);
        }
        text.push_str("3,12000,99000,-;NVRM: Xid (PCI:0000:64:00): 79, pid=0, GPU has fallen off the bus.\n");
        let log = log_of(&text, Limits::default());
        assert_eq!(log.unfinished, None);
        assert_eq!(log.records, 12_001);
        let counts: Vec<String> =
            log.current.iter().map(|t| format!("{} {} x{} {:?}..{:?}", t.pci, t.xid, t.count, t.first_us, t.last_us)).collect();
        assert_eq!(counts, ["0000:53:00 31 x12000 Some(1000)..Some(12999)", "0000:64:00 79 x1 Some(99000)..Some(99000)"]);
        assert_eq!(log.current[0].sample, "pid=11999, MMU Fault");
    }

    #[test]
    fn only_xids_since_the_driver_loaded_count() {
        let text = "3,1,1000,-;NVRM: Xid (PCI:0000:53:00): 79, pid=0, GPU has fallen off the bus.\n\
                    6,2,2000,-;NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build\n\
                    3,3,3000,-;NVRM: Xid (PCI:0000:64:00): 13, pid=7, Graphics Exception\n";
        let log = log_of(text, Limits::default());
        assert_eq!(log.driver_loaded_us, Some(2000));
        assert_eq!(log.history.iter().map(|t| (t.xid, t.count)).collect::<Vec<_>>(), [(79, 1)]);
        assert_eq!(log.current.iter().map(|t| (t.xid, t.count)).collect::<Vec<_>>(), [(13, 1)]);
        assert!(log.window().contains("0.0 s after boot"), "{}", log.window());
        assert_eq!(log.all().values().sum::<u64>(), 2);
    }

    #[test]
    fn reads_stop_at_their_limits_and_say_so() {
        let lines = "6,1,1,-;a line\n".repeat(1000);
        let log = log_of(&lines, Limits { records: 100, ..Limits::default() });
        assert_eq!(log.records, 100);
        assert!(log.unfinished.as_deref().is_some_and(|why| why.contains("100 records")), "{:?}", log.unfinished);
        let log = log_of(&lines, Limits { bytes: 1000, ..Limits::default() });
        assert!(log.unfinished.as_deref().is_some_and(|why| why.contains("bytes")), "{:?}", log.unfinished);
        let log = log_of(&lines, Limits { time: Duration::ZERO, ..Limits::default() });
        assert!(log.unfinished.is_some());
        // A line longer than any record is skipped; the records around it are read.
        let overlong =
            format!("3,1,1,-;NVRM: Xid (PCI:0000:53:00): 31, {}\n3,2,2,-;NVRM: Xid (PCI:0000:53:00): 13, x\n", "y".repeat(100_000));
        let log = log_of(&overlong, Limits::default());
        assert_eq!(log.current.iter().map(|t| t.xid).collect::<Vec<_>>(), [13]);
    }

    #[test]
    fn samples_are_cut_and_escaped_and_pairs_are_bounded() {
        let text = format!("3,1,1,-;NVRM: Xid (PCI:0000:53:00): 31, \u{1b}[2J{}\n", "z".repeat(1000));
        let log = log_of(&text, Limits::default());
        assert!(
            log.current[0].sample.starts_with("\\u{1b}[2J") && log.current[0].sample.chars().count() <= SAMPLE_MAX + 12,
            "{}",
            log.current[0].sample
        );
        let mut many = String::new();
        for bus in 0..(MAX_PAIRS + 10) {
            let _ = writeln!(many, "3,1,1,-;NVRM: Xid (PCI:{:04x}:{:02x}:00): 31, x", bus / 256, bus % 256);
        }
        let log = log_of(&many, Limits::default());
        assert_eq!((log.current.len(), log.unnamed), (MAX_PAIRS, 10));
    }

    #[test]
    fn a_program_that_gives_no_records_is_not_a_clean_log() {
        let err = read_command("true", &[], "true", Limits::default()).unwrap_err();
        assert!(err.contains("no records"), "{err}");
        let log =
            read_command("printf", &["[    1.500000] NVRM: Xid (PCI:0000:53:00): 79, pid=0, x\\n"], "printf", Limits::default()).unwrap();
        assert_eq!(log.current.iter().map(|t| (t.xid, t.first_us)).collect::<Vec<_>>(), [(79, Some(1_500_000))]);
        let slow = Limits { time: Duration::from_millis(200), ..Limits::default() };
        let started = Instant::now();
        assert!(read_command("sleep", &["30"], "sleep", slow).is_err());
        assert!(started.elapsed() < Duration::from_secs(10), "stopped at its time limit: {:?}", started.elapsed());
    }

    #[test]
    fn functions_match_the_logged_address_only() {
        assert!(names_function("0000:86:00", "0000:86:00.0"));
        assert!(!names_function("0000:86:00", "0000:86:001.0"));
        assert!(!names_function("0000:86:00", "0000:87:00.0"));
    }

    #[test]
    fn a_fifo_or_another_device_is_not_read_as_the_kernel_log() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("dev")).unwrap();
        let fifo = dir.path().join("dev/kmsg");
        assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let err = read(dir.path()).unwrap_err();
        assert!(err.contains("a FIFO, not the kernel log"), "{err}");
        std::fs::remove_file(&fifo).unwrap();
        std::os::unix::fs::symlink("/dev/null", &fifo).unwrap();
        let err = read(dir.path()).unwrap_err();
        assert!(err.contains("character device 1:3, not the kernel log"), "{err}");
        std::fs::remove_file(&fifo).unwrap();
        std::os::unix::fs::symlink("kmsg", &fifo).unwrap();
        assert!(read(dir.path()).is_err(), "a link to itself");
    }
}
