//! A rank's NIC counters around each measured step: the counter files of every channel's NIC are opened
//! once, when the world is set up, and read again (`pread` at offset 0, into buffers allocated up front)
//! before and after each step, never inside the timed loop. What a step moved is then held against the
//! application's own byte count per channel (the probe's), and rank 0 gathers every rank's reading into
//! the step's [`StepCounters`] (`efatop_proto::counters`, where the rules live).
//!
//! Where a channel's counters come from:
//! - efa / efa-direct: the domain `rdmap79s0-rdm` names the RDMA device `rdmap79s0`, whose port counters are
//!   under `sys/class/infiniband/<dev>/ports/*/hw_counters`;
//! - tcp, udp, sockets and others: the domain names a network interface (`efa0`, `eth0`, `lo`); its
//!   counters are the interface's statistics. On this machine's root they are read from the calling
//!   thread's `/proc/thread-self/net/dev`, the same kernel counters as `sys/class/net/<if>/statistics`
//!   but of the network namespace the rank runs in (a rank of `efatop run --netns` joined its node's
//!   namespace, while `/sys` still shows the namespace that mounted it);
//! - shm: no NIC.
//!
//! `--sysfs-root DIR` reads another tree (a fake p5 in tests), and `--nic-map 0=rdmap79s0,...` names the
//! device of a channel where the domain does not (a tcp or shm channel mapped onto a fake EFA device);
//! the run's notes then say that the counters are not this machine's.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use efatop_fabric::Provider;
use efatop_files::attribute::open as open_attribute;
use efatop_node::sysfs::{read_counter_at, COUNTER_READ, COUNT_MAX};
use efatop_proto::counters::{ChannelReading, CounterSource, OtherNicReading, RankReading};

use crate::ExperimentError;

/// The counters read per RDMA device (those the device has; older drivers lack the later ones).
const RDMA_COUNTERS: &[&str] = &[
    "tx_bytes",
    "rx_bytes",
    "rdma_write_bytes",
    "rdma_write_recv_bytes",
    "send_bytes",
    "recv_bytes",
    "retrans_pkts",
    "retrans_timeout_events",
    "impaired_remote_conn_events",
    "unresponsive_remote_events",
];

/// The counters read per network interface.
const NET_COUNTERS: &[&str] = &["tx_bytes", "rx_bytes", "tx_packets", "rx_packets"];

/// Where to read counters, and which device each channel is on when its domain does not say.
#[derive(Clone, Debug, Default)]
pub struct CounterConfig {
    /// `/` for this machine.
    pub root: PathBuf,
    /// channel index → device or interface name (`--nic-map`).
    pub nic_map: BTreeMap<usize, String>,
}

impl CounterConfig {
    pub fn this_machine() -> Self {
        Self { root: PathBuf::from("/"), nic_map: BTreeMap::new() }
    }

    fn is_this_machine(&self) -> bool {
        self.root == Path::new("/")
    }
}

/// `--nic-map 0=rdmap79s0,1=rdmap80s0`.
pub fn parse_nic_map(text: &str) -> Result<BTreeMap<usize, String>, String> {
    let mut map = BTreeMap::new();
    for entry in text.split(',').filter(|e| !e.is_empty()) {
        let parsed = entry.split_once('=').and_then(|(channel, name)| {
            let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            Some((channel.trim().parse::<usize>().ok()?, name.trim().to_string())).filter(|_| valid)
        });
        let Some((channel, name)) = parsed else {
            return Err(format!("`{entry}` is not CHANNEL=DEVICE; use e.g. 0=rdmap79s0,1=rdmap80s0"));
        };
        map.insert(channel, name);
    }
    Ok(map)
}

/// One counter: its name and the open file of every port that has it (an RDMA device's port counters
/// are summed over its ports).
struct CounterFiles {
    name: &'static str,
    files: Vec<File>,
    /// Where `files` were opened: a fake tree's counters are replaced by renames (so that its readers
    /// never see half a number), and are opened again at each read.
    paths: Vec<PathBuf>,
}

/// How one NIC's counters are read.
enum Reader {
    /// Counter files, opened once.
    Files(Vec<CounterFiles>),
    /// An interface's line of `/proc/thread-self/net/dev`.
    ProcNetDev { interface: String },
    /// Nothing to read.
    Nothing,
}

struct Watched {
    source: CounterSource,
    reader: Reader,
    /// Counter values at the start of the step, as many as the reader has counters; `None` where the
    /// read failed.
    before: Vec<Option<u64>>,
    after: Vec<Option<u64>>,
    app_before: u64,
}

struct OtherNic {
    name: String,
    reader: Reader,
    before: Vec<Option<u64>>,
    after: Vec<Option<u64>>,
}

/// A rank's counters around its steps; see the module docs.
pub struct NicCounters {
    channels: Vec<Watched>,
    others: Vec<OtherNic>,
    /// `/proc/thread-self/net/dev` of the thread that made this (the rank's main thread, in its namespace).
    net_dev: Option<File>,
    /// `/proc/thread-self/net/snmp`, for TCP's retransmitted segments.
    snmp: Option<File>,
    tcp_before: Option<u64>,
    /// Counter files are opened again at each read (a fake tree, see [`CounterFiles::paths`]).
    reopen: bool,
    /// Room for one read of a proc file, allocated once.
    buffer: Vec<u8>,
    /// Says where the counters came from when it is not this machine's NICs.
    pub note: Option<String>,
}

/// What the world knows of a channel, to place its NIC.
pub struct ChannelNic<'a> {
    pub index: usize,
    pub provider: &'a Provider,
    pub domain: &'a str,
}

fn open_counter(name: &'static str, paths: Vec<PathBuf>) -> CounterFiles {
    let opened: Vec<(File, PathBuf)> = paths.into_iter().filter_map(|path| Some((open_attribute(&path).ok()?, path))).collect();
    let (files, paths) = opened.into_iter().unzip();
    CounterFiles { name, files, paths }
}

/// A counter as the node's reader reads it (`efatop_node::sysfs`): a file that holds no count is `None`.
fn read_number(file: &File, scratch: &mut [u8; COUNTER_READ]) -> Option<u64> {
    read_counter_at(file, scratch).ok()
}

/// Counters summed over ports, `None` when one is unreadable or the sum is beyond a count.
fn summed(mut values: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    values.try_fold(0_u64, |sum, value| sum.checked_add(value?)).filter(|sum| *sum <= COUNT_MAX)
}

fn open_rdma(root: &Path, device: &str) -> Option<Vec<CounterFiles>> {
    let ports = fs::read_dir(root.join("sys/class/infiniband").join(device).join("ports")).ok()?;
    let mut port_dirs: Vec<PathBuf> = ports.filter_map(Result::ok).map(|e| e.path().join("hw_counters")).collect();
    port_dirs.sort();
    let counters: Vec<CounterFiles> = RDMA_COUNTERS
        .iter()
        .map(|name| open_counter(name, port_dirs.iter().map(|dir| dir.join(name)).collect()))
        .filter(|counter| !counter.files.is_empty())
        .collect();
    (!counters.is_empty()).then_some(counters)
}

fn open_net_sysfs(root: &Path, interface: &str) -> Option<Vec<CounterFiles>> {
    let dir = root.join("sys/class/net").join(interface).join("statistics");
    let counters: Vec<CounterFiles> =
        NET_COUNTERS.iter().map(|name| open_counter(name, vec![dir.join(name)])).filter(|c| !c.files.is_empty()).collect();
    (!counters.is_empty()).then_some(counters)
}

/// `rdmap79s0-rdm` → `rdmap79s0`.
fn rdma_device_of(domain: &str) -> &str {
    domain.strip_suffix("-rdm").or_else(|| domain.strip_suffix("-dgrm")).unwrap_or(domain)
}

/// The interfaces `/proc/.../net/dev` lists.
fn net_dev_interfaces(text: &str) -> Vec<String> {
    text.lines().filter_map(|line| line.split_once(':')).map(|(name, _)| name.trim().to_string()).collect()
}

/// One interface's `NET_COUNTERS` from `/proc/.../net/dev`: receive bytes, packets, ... then transmit.
fn net_dev_values(text: &str, interface: &str, out: &mut [Option<u64>]) {
    for value in out.iter_mut() {
        *value = None;
    }
    let Some(fields) = text.lines().filter_map(|line| line.split_once(':')).find(|(name, _)| name.trim() == interface).map(|(_, rest)| rest)
    else {
        return;
    };
    let mut numbers = fields.split_whitespace().map(|f| f.parse::<u64>().ok());
    let values: [Option<u64>; 10] = std::array::from_fn(|_| numbers.next().flatten());
    // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes packets ...
    let (rx_bytes, rx_packets, tx_bytes, tx_packets) = (values[0], values[1], values[8], values[9]);
    for (slot, name) in out.iter_mut().zip(NET_COUNTERS) {
        *slot = match *name {
            "tx_bytes" => tx_bytes,
            "rx_bytes" => rx_bytes,
            "tx_packets" => tx_packets,
            _ => rx_packets,
        };
    }
}

/// TCP's `RetransSegs` from `/proc/.../net/snmp` (a header line of names, then a line of values).
fn tcp_retransmits(text: &str) -> Option<u64> {
    let mut tcp = text.lines().filter(|line| line.starts_with("Tcp:"));
    let (names, values) = (tcp.next()?, tcp.next()?);
    let index = names.split_whitespace().position(|name| name == "RetransSegs")?;
    values.split_whitespace().nth(index)?.parse().ok()
}

impl NicCounters {
    /// Opens the counters of every channel's NIC, and of the node's other NICs. Called on the thread that
    /// runs the steps (the rank's main thread, in its network namespace).
    pub fn open(config: &CounterConfig, channels: &[ChannelNic<'_>]) -> Result<Self, ExperimentError> {
        let root = config.root.as_path();
        let this_machine = config.is_this_machine();
        let net_dev = if this_machine { File::open("/proc/thread-self/net/dev").ok() } else { None };
        let mut buffer = vec![0_u8; 256 * 1024];
        let interfaces: Vec<String> = if this_machine {
            read_proc(net_dev.as_ref(), &mut buffer).map(net_dev_interfaces).unwrap_or_default()
        } else {
            list(&root.join("sys/class/net"))
        };
        let rdma_devices = list(&root.join("sys/class/infiniband"));
        let net_reader = |interface: &str| -> Option<Reader> {
            if this_machine {
                interfaces.iter().any(|i| i == interface).then(|| Reader::ProcNetDev { interface: interface.to_string() })
            } else {
                open_net_sysfs(root, interface).map(Reader::Files)
            }
        };
        let net_source = |interface: &str| {
            if interface == "lo" {
                CounterSource::Loopback { interface: interface.to_string() }
            } else {
                CounterSource::Net { interface: interface.to_string() }
            }
        };
        let mut watched = Vec::with_capacity(channels.len());
        for channel in channels {
            let (source, reader) = if let Some(name) = config.nic_map.get(&channel.index) {
                if let Some(files) = open_rdma(root, name) {
                    (CounterSource::Rdma { device: name.clone() }, Reader::Files(files))
                } else if let Some(reader) = net_reader(name) {
                    (net_source(name), reader)
                } else {
                    return Err(ExperimentError::InvalidInput {
                        flag: "--nic-map",
                        message: format!(
                            "channel {}: {name} has no counters under {} (an RDMA device under sys/class/infiniband or an interface)",
                            channel.index,
                            root.display()
                        ),
                    });
                }
            } else {
                match channel.provider {
                    Provider::Shm => (CounterSource::None { why: "shm moves bytes through shared memory".into() }, Reader::Nothing),
                    Provider::Efa | Provider::EfaDirect => {
                        let device = rdma_device_of(channel.domain);
                        match open_rdma(root, device) {
                            Some(files) => (CounterSource::Rdma { device: device.to_string() }, Reader::Files(files)),
                            None => (
                                CounterSource::None { why: format!("no counters for {device} under {}", root.join("sys/class/infiniband").display()) },
                                Reader::Nothing,
                            ),
                        }
                    }
                    _ => match net_reader(channel.domain) {
                        Some(reader) => (net_source(channel.domain), reader),
                        None => (CounterSource::None { why: format!("domain {} names no interface with counters", channel.domain) }, Reader::Nothing),
                    },
                }
            };
            let count = reader_len(&reader);
            watched.push(Watched { source, reader, before: vec![None; count], after: vec![None; count], app_before: 0 });
        }
        // The node's other NICs: a step's bytes found there went around the channel's NIC.
        let taken: Vec<&str> = watched.iter().filter_map(|w| w.source.nic()).collect();
        let mut others = Vec::new();
        for device in rdma_devices.iter().filter(|d| !taken.contains(&d.as_str())) {
            if let Some(files) = open_rdma(root, device) {
                let files: Vec<CounterFiles> = files.into_iter().filter(|c| matches!(c.name, "tx_bytes" | "rx_bytes")).collect();
                others.push(OtherNic::new(device.clone(), Reader::Files(files)));
            }
        }
        for interface in interfaces.iter().filter(|i| !taken.contains(&i.as_str()) && i.as_str() != "lo") {
            if let Some(reader) = net_reader(interface) {
                others.push(OtherNic::new(interface.clone(), reader));
            }
        }
        let tcp = channels.iter().any(|c| matches!(c.provider, Provider::Tcp | Provider::Sockets));
        let snmp = if this_machine && tcp { File::open("/proc/thread-self/net/snmp").ok() } else { None };
        let note = (!this_machine || !config.nic_map.is_empty()).then(|| {
            let mapped: Vec<String> = config.nic_map.iter().map(|(channel, name)| format!("channel {channel} on {name}")).collect();
            format!(
                "NIC counters are read from {}{}{}: they are not this machine's NICs' unless that tree is",
                root.display(),
                if mapped.is_empty() { "" } else { " with --nic-map " },
                mapped.join(", ")
            )
        });
        Ok(Self { channels: watched, others, net_dev, snmp, tcp_before: None, reopen: !this_machine, buffer, note })
    }

    /// Reads every counter before a step; `app_bytes(channel)` is the application's count so far.
    pub fn begin(&mut self, app_bytes: impl Fn(usize) -> u64) {
        let text = read_proc(self.net_dev.as_ref(), &mut self.buffer);
        for (index, channel) in self.channels.iter_mut().enumerate() {
            read_into(&channel.reader, self.reopen, text, &mut channel.before);
            channel.app_before = app_bytes(index);
        }
        for other in &mut self.others {
            read_into(&other.reader, self.reopen, text, &mut other.before);
        }
        self.tcp_before = read_proc(self.snmp.as_ref(), &mut self.buffer).and_then(tcp_retransmits);
    }

    /// Reads every counter after a step and says what moved.
    pub fn end(&mut self, rank: usize, app_bytes: impl Fn(usize) -> u64) -> RankReading {
        let text = read_proc(self.net_dev.as_ref(), &mut self.buffer);
        let mut reading = RankReading { rank, ..RankReading::default() };
        for (index, channel) in self.channels.iter_mut().enumerate() {
            read_into(&channel.reader, self.reopen, text, &mut channel.after);
            let names = reader_names(&channel.reader);
            let deltas = names
                .iter()
                .zip(channel.before.iter().zip(&channel.after))
                .filter_map(|(name, (before, after))| Some(((*name).to_string(), after.zip(*before).and_then(|(a, b)| a.checked_sub(b))?)))
                .collect();
            reading.channels.push(ChannelReading {
                channel: index,
                source: channel.source.clone(),
                app_bytes: app_bytes(index).saturating_sub(channel.app_before),
                deltas,
            });
        }
        for other in &mut self.others {
            read_into(&other.reader, self.reopen, text, &mut other.after);
            let names = reader_names(&other.reader);
            let bytes: u64 = names
                .iter()
                .zip(other.before.iter().zip(&other.after))
                .filter(|(name, _)| matches!(**name, "tx_bytes" | "rx_bytes"))
                .filter_map(|(_, (before, after))| after.zip(*before).and_then(|(a, b)| a.checked_sub(b)))
                .sum();
            if bytes > 0 {
                reading.others.push(OtherNicReading { nic: other.name.clone(), bytes });
            }
        }
        // Channels the application did not use this step count as other NICs too.
        for channel in &reading.channels {
            if let (0, Some(nic)) = (channel.app_bytes, channel.source.nic()) {
                let bytes = channel.deltas.get("tx_bytes").copied().unwrap_or(0) + channel.deltas.get("rx_bytes").copied().unwrap_or(0);
                if bytes > 0 && !reading.others.iter().any(|o| o.nic == nic) && nic != "lo" {
                    reading.others.push(OtherNicReading { nic: nic.to_string(), bytes });
                }
            }
        }
        let tcp_after = read_proc(self.snmp.as_ref(), &mut self.buffer).and_then(tcp_retransmits);
        reading.tcp_retransmits = tcp_after.zip(self.tcp_before).and_then(|(a, b)| a.checked_sub(b));
        reading
    }
}

impl OtherNic {
    fn new(name: String, reader: Reader) -> Self {
        let count = reader_len(&reader);
        Self { name, reader, before: vec![None; count], after: vec![None; count] }
    }
}

fn reader_len(reader: &Reader) -> usize {
    reader_names(reader).len()
}

fn reader_names(reader: &Reader) -> Vec<&'static str> {
    match reader {
        Reader::Files(counters) => counters.iter().map(|c| c.name).collect(),
        Reader::ProcNetDev { .. } => NET_COUNTERS.to_vec(),
        Reader::Nothing => Vec::new(),
    }
}

fn read_into(reader: &Reader, reopen: bool, net_dev: Option<&str>, out: &mut [Option<u64>]) {
    match reader {
        Reader::Files(counters) => {
            let mut scratch = [0_u8; COUNTER_READ];
            for (slot, counter) in out.iter_mut().zip(counters) {
                *slot = if reopen {
                    summed(counter.paths.iter().map(|path| open_attribute(path).ok().and_then(|file| read_number(&file, &mut scratch))))
                } else {
                    summed(counter.files.iter().map(|file| read_number(file, &mut scratch)))
                };
            }
        }
        Reader::ProcNetDev { interface } => match net_dev {
            Some(text) => net_dev_values(text, interface, out),
            None => out.iter_mut().for_each(|v| *v = None),
        },
        Reader::Nothing => {}
    }
}

/// A proc file read again from its start into `buffer`.
fn read_proc<'b>(file: Option<&File>, buffer: &'b mut [u8]) -> Option<&'b str> {
    let file = file?;
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read_at(&mut buffer[filled..], filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(_) => return None,
        }
    }
    std::str::from_utf8(&buffer[..filled]).ok()
}

fn list(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        fs::read_dir(dir).map(|read| read.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    const NET_DEV: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       2    0    0    0     0          0         0      100       2    0    0    0     0       0          0
  efa0: 5000000    4000    0    0    0     0          0         0  7000000    6000    0    0    0     0       0          0
";

    #[test]
    fn proc_net_dev_lines_give_an_interfaces_counters() {
        assert_eq!(net_dev_interfaces(NET_DEV), ["lo", "efa0"]);
        let mut out = [None; 4];
        net_dev_values(NET_DEV, "efa0", &mut out);
        assert_eq!(out, [Some(7_000_000), Some(5_000_000), Some(6000), Some(4000)], "tx_bytes, rx_bytes, tx_packets, rx_packets");
        net_dev_values(NET_DEV, "efa9", &mut out);
        assert_eq!(out, [None; 4]);
    }

    #[test]
    fn tcp_retransmits_come_from_snmp() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\nTcp: RtoAlgorithm RtoMin RetransSegs InErrs\nTcp: 1 200 17 0\n";
        assert_eq!(tcp_retransmits(snmp), Some(17));
        assert_eq!(tcp_retransmits("Ip: 1\n"), None);
    }

    #[test]
    fn nic_maps_parse_and_bad_ones_say_the_shape() {
        let map = parse_nic_map("0=rdmap79s0,1=rdmap80s0").unwrap();
        assert_eq!(map.get(&1).map(String::as_str), Some("rdmap80s0"));
        assert!(parse_nic_map("rdmap79s0").unwrap_err().contains("CHANNEL=DEVICE"));
        assert!(parse_nic_map("0=../etc").is_err());
        assert_eq!(rdma_device_of("rdmap79s0-rdm"), "rdmap79s0");
        assert_eq!(rdma_device_of("rdmap79s0-dgrm"), "rdmap79s0");
    }

    #[test]
    fn this_machines_loopback_is_read_from_the_threads_namespace() {
        let provider = Provider::Tcp;
        let mut counters =
            NicCounters::open(&CounterConfig::this_machine(), &[ChannelNic { index: 0, provider: &provider, domain: "lo" }]).unwrap();
        assert!(counters.note.is_none());
        counters.begin(|_| 0);
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.send_to(&[7_u8; 1000], socket.local_addr().unwrap()).unwrap();
        let reading = counters.end(0, |_| 1000);
        let channel = &reading.channels[0];
        assert_eq!(channel.source, CounterSource::Loopback { interface: "lo".into() });
        assert!(channel.deltas["tx_bytes"] >= 1000, "{channel:?}");
        assert_eq!(channel.app_bytes, 1000);
    }
}
