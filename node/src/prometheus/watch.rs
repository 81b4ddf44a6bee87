//! `efatop watch --prometheus ADDR`: the watcher's latest figures for Prometheus, from its lines. Where a
//! figure is one NCCL Inspector (NVIDIA/nccl `plugins/profiler/inspector`) exports, it has Inspector's
//! name and label names: `nccl_bus_bandwidth_gbs` and `nccl_collective_exec_time_microseconds`, labelled
//! `comm_name`, `nranks`, `collective` (NCCL's name, `AllReduce`), `message_size` and `algo_proto`; ours are
//! the job's (the ranks' mean), not a rank's, so they carry `comm` (the communicator's id) and no `node` or
//! `gpu`, and `message_size` is nccl-tests' size in bytes, not Inspector's range. The rest are efatop's:
//! `efatop_nccl_*`.

use std::collections::BTreeMap;

use efatop_proto::nccl::{Func, RailVerdict, WatchLine};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::{counters, encode, gauges, Exposition};

/// The latest of each figure the watcher's lines gave.
#[derive(Clone, Debug, Default)]
pub struct WatchMetrics {
    colls: BTreeMap<(String, Func, u64, String, String, u64), WatchLine>,
    nics: BTreeMap<String, WatchLine>,
    rails: BTreeMap<(String, String), WatchLine>,
    stragglers: BTreeMap<String, WatchLine>,
    hangs: BTreeMap<(String, Func, u64, u32), WatchLine>,
    comm_names: BTreeMap<String, String>,
}

/// NCCL's name of a collective, as Inspector labels it.
fn nccl_name(func: Func) -> &'static str {
    match func {
        Func::AllReduce => "AllReduce",
        Func::AllGather => "AllGather",
        Func::ReduceScatter => "ReduceScatter",
        Func::Broadcast => "Broadcast",
        Func::Reduce => "Reduce",
        Func::AlltoAll => "AlltoAll",
        Func::Gather => "Gather",
        Func::Scatter => "Scatter",
        Func::SendRecv => "SendRecv",
        Func::Other => "Other",
    }
}

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, String)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect()
}

impl WatchMetrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds the watcher's lines in.
    pub fn add(&mut self, lines: &[WatchLine]) {
        for line in lines {
            match line {
                WatchLine::Rank {
                    comm,
                    comm_name: Some(name),
                    ..
                } => {
                    self.comm_names.insert(comm.clone(), name.clone());
                }
                WatchLine::Coll {
                    comm,
                    func,
                    size,
                    algo,
                    proto,
                    user_tag,
                    ..
                } => {
                    self.colls.insert(
                        (
                            comm.clone(),
                            *func,
                            *size,
                            algo.clone(),
                            proto.clone(),
                            *user_tag,
                        ),
                        line.clone(),
                    );
                }
                WatchLine::Nics { host, .. } => {
                    self.nics.insert(host.clone(), line.clone());
                }
                WatchLine::Rails { host, gpu, .. } => {
                    self.rails.insert((host.clone(), gpu.clone()), line.clone());
                }
                WatchLine::Straggler { comm, .. } => {
                    self.stragglers.insert(comm.clone(), line.clone());
                }
                WatchLine::StragglerOver { comm, .. } => {
                    self.stragglers.remove(comm);
                }
                WatchLine::Hang {
                    comm,
                    func,
                    seq,
                    rank,
                    ..
                } => {
                    self.hangs
                        .insert((comm.clone(), *func, *seq, *rank), line.clone());
                }
                WatchLine::HangOver { comm, func, seq } => {
                    self.hangs
                        .retain(|(c, f, s, _), _| !(c == comm && f == func && s == seq));
                }
                _ => {}
            }
        }
    }
}

impl Collector for WatchMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut colls: Vec<CollSeries> = Vec::new();
        for line in self.colls.values() {
            let WatchLine::Coll { comm, func, size, algo, proto, nranks, ops, timing, time_us, busbw_gbps, user_tag, wait_us, .. } = line else { continue };
            let l = labels(&[
                ("comm", comm.clone()),
                ("comm_name", self.comm_names.get(comm).cloned().unwrap_or_default()),
                ("nranks", nranks.to_string()),
                ("collective", nccl_name(*func).to_string()),
                ("message_size", size.to_string()),
                ("algo_proto", if algo.is_empty() { String::new() } else { format!("{algo}_{proto}") }),
                ("timing", format!("{timing:?}").to_lowercase()),
                ("user_tag", user_tag.to_string()),
            ]);
            colls.push((l, *ops, *busbw_gbps, *time_us, wait_us.map(|w| w / 1e6)));
        }
        gauges(
            &mut encoder,
            "nccl_bus_bandwidth_gbs",
            "NCCL bus bandwidth in GB/s (nccl-tests' formula), the job's ranks' mean call",
            colls.iter().filter_map(|(l, _, busbw, _, _)| Some((l, (*busbw)?))),
        )?;
        gauges(&mut encoder, "nccl_collective_exec_time_microseconds", "a call's time in microseconds, the job's ranks' mean", colls.iter().filter_map(|(l, _, _, time, _)| Some((l, (*time)?))))?;
        gauges(
            &mut encoder,
            "efatop_nccl_wait_for_peers_seconds",
            "a call's time waiting for its peers (profiler v7's sync phases), the ranks' mean",
            colls.iter().filter_map(|(l, _, _, _, wait)| Some((l, (*wait)?))),
        )?;
        counters(&mut encoder, "efatop_nccl_calls", "calls completed (the most any rank reported)", colls.iter().map(|(l, ops, ..)| (l, *ops)))?;
        let mut nccl_bytes = Vec::new();
        let mut nic_bytes = Vec::new();
        for line in self.nics.values() {
            let WatchLine::Nics { host, nccl_bytes: moved, nics, verdict, .. } = line else { continue };
            nccl_bytes.push((labels(&[("host", host.clone()), ("verdict", format!("{verdict:?}").to_lowercase())]), *moved as f64));
            for nic in nics {
                nic_bytes.push((labels(&[("host", host.clone()), ("nic", nic.name.clone())]), nic.bytes as f64));
            }
        }
        gauges(&mut encoder, "efatop_nccl_host_window_bytes", "bytes NCCL's network path moved on the host over the watcher's window", each(&nccl_bytes))?;
        gauges(&mut encoder, "efatop_nccl_nic_window_bytes", "bytes the NIC carried (tx + rx) over the watcher's window", each(&nic_bytes))?;
        let mut behind = Vec::new();
        let mut errors = Vec::new();
        for line in self.rails.values() {
            let WatchLine::Rails { host, gpu, nics, verdict, .. } = line else { continue };
            for nic in nics {
                let base = [("host", host.clone()), ("gpu", gpu.clone()), ("nic", nic.name.clone())];
                behind.push((labels(&base), f64::from(u8::from(nic.behind && *verdict != RailVerdict::Quiet))));
                for (what, count) in [("retrans_pkts", nic.retrans), ("unresponsive_remote_events", nic.unresponsive), ("impaired_remote_conn_events", nic.impaired)] {
                    if let Some(count) = count {
                        let mut l = labels(&base);
                        l.push(("counter".into(), what.into()));
                        errors.push((l, count as f64));
                    }
                }
            }
        }
        gauges(&mut encoder, "efatop_nccl_rail_behind", "1 when the GPU's rail carried far less than its share of the GPU's rails over the window", each(&behind))?;
        gauges(&mut encoder, "efatop_nccl_rail_errors_window", "growth of the rail's error counter over the watcher's window", each(&errors))?;
        let stragglers: Vec<(Labels, f64)> = self
            .stragglers
            .values()
            .filter_map(|line| {
                let WatchLine::Straggler { comm, func, rank, host, gpu, source, lag_us, .. } = line else { return None };
                let l = labels(&[
                    ("comm", comm.clone()),
                    ("collective", nccl_name(*func).to_string()),
                    ("rank", rank.to_string()),
                    ("host", host.clone()),
                    ("gpu", gpu.clone().unwrap_or_default()),
                    ("source", format!("{source:?}")),
                ]);
                Some((l, lag_us / 1e6))
            })
            .collect();
        gauges(
            &mut encoder,
            "efatop_nccl_straggler_lag_seconds",
            "how long the named straggler's peers waited for it, on average in the calls it was last",
            each(&stragglers),
        )?;
        let hangs: Vec<(Labels, f64)> = self
            .hangs
            .values()
            .filter_map(|line| {
                let WatchLine::Hang { comm, func, seq, rank, host, gpu, why, waiting_s, .. } = line else { return None };
                let l = labels(&[
                    ("comm", comm.clone()),
                    ("collective", nccl_name(*func).to_string()),
                    ("seq", seq.to_string()),
                    ("rank", rank.to_string()),
                    ("host", host.clone()),
                    ("gpu", gpu.clone().unwrap_or_default()),
                    ("why", format!("{why:?}")),
                ]);
                Some((l, *waiting_s))
            })
            .collect();
        gauges(&mut encoder, "efatop_nccl_hang_waiting_seconds", "a hang the locator named: how long its peers had waited when it was named", each(&hangs))?;
        gauges(&mut encoder, "efatop_nccl_hangs", "hangs open now", [(&Labels::new(), self.hangs.len() as f64)])?;
        Ok(())
    }
}

/// A collective row's labels, calls, busbw (GB/s), time (µs) and wait for peers (s).
type CollSeries = (Labels, u64, Option<f64>, Option<f64>, Option<f64>);

/// Owned series as the helpers take them.
fn each(series: &[(Labels, f64)]) -> impl Iterator<Item = (&Labels, f64)> {
    series.iter().map(|(l, v)| (l, *v))
}

impl Exposition for WatchMetrics {
    fn render(&self) -> Result<String, std::fmt::Error> {
        encode(vec![Box::new(self.clone())])
    }
}
