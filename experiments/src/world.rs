//! A rank's view of the run: who the other ranks are (through a [`Bootstrap`]), which provider and NICs
//! were chosen, and the connected channels every experiment runs on.

use std::time::{Duration, Instant};

use efatop_fabric::{
    Capabilities, Channel, ChannelOptions, FabricError, Nic, PeerAddress, Provider, discover_nics, mr_mode_names,
};

use efatop_proto::results::{Completion, LinkSource};
use efatop_topology::{GpuChoice, NodeTopology, Placement};

use crate::ExperimentError;

/// Out-of-band exchange between ranks: used to set up (addresses, keys) and to agree between rounds,
/// never on the hot path. Implemented over MPI and over efatop's own launcher.
pub trait Bootstrap {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// Every rank contributes `data`; every rank gets all contributions, indexed by rank.
    fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>, ExperimentError>;
    fn barrier(&self) -> Result<(), ExperimentError> {
        self.allgather(&[]).map(|_| ())
    }
    /// [`Bootstrap::allgather`], calling `idle` while waiting for the other ranks (implementations that can
    /// wait without blocking do; the default blocks).
    fn allgather_while(&self, data: &[u8], idle: &mut dyn FnMut()) -> Result<Vec<Vec<u8>>, ExperimentError> {
        let _ = idle;
        self.allgather(data)
    }
    /// Every rank's host, once the world has gathered them: a bootstrap that names a rank in its own errors
    /// (the launcher's word on a rank that left) names its host too, as every other line does.
    fn know_hosts(&self, hosts: &[String]) {
        let _ = hosts;
    }
}

/// What the user asked for on the command line that shapes the world.
#[derive(Clone, Debug, PartialEq)]
pub enum ProviderChoice {
    Auto,
    Given(Provider),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelCount {
    All,
    Exactly(usize),
}

#[derive(Clone, Debug)]
pub struct WorldOptions {
    pub provider: ProviderChoice,
    pub channels: ChannelCount,
    pub capabilities: Capabilities,
    pub max_in_flight: usize,
    pub op_timeout: Duration,
    /// Overrides the link speed the provider reports, for `BusBW`.
    pub link_gbps: Option<f64>,
    /// Open a GPU for device memory: `Some(None)` picks the GPU of this rank's local rank.
    pub gpu: Option<Option<usize>>,
    /// When an operation counts as complete (`--completion`).
    pub completion: CompletionChoice,
}

/// `--completion`: when a write or send counts as complete, and so what a window of operations in flight
/// means.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CompletionChoice {
    /// Delivery where the provider's own completion is local (tcp and sockets: the kernel has taken the
    /// bytes), the provider's default elsewhere (efa completes a write once the peer's NIC acknowledged it,
    /// shm once the copy is done).
    #[default]
    Auto,
    /// The provider's default (`FI_TRANSMIT_COMPLETE` or weaker).
    Transmit,
    /// `FI_DELIVERY_COMPLETE` on every provider.
    Delivery,
}

impl CompletionChoice {
    /// Whether to ask `provider` for `FI_DELIVERY_COMPLETE`.
    pub fn delivery_for(self, provider: &Provider) -> bool {
        match self {
            CompletionChoice::Auto => provider.completes_locally(),
            CompletionChoice::Transmit => false,
            CompletionChoice::Delivery => true,
        }
    }
}

pub struct World<'b> {
    pub bootstrap: &'b dyn Bootstrap,
    pub rank: usize,
    pub size: usize,
    pub hosts: Vec<String>,
    pub provider: Provider,
    /// The provider stack libfabric names, e.g. `tcp;ofi_rxm`.
    pub provider_stack: String,
    /// The fabric libfabric named for the channels (`efa`, `efa-direct`, a subnet for tcp).
    pub fabric: String,
    /// What the endpoints report, over every channel: RDMA WRITE emulated on any of them, shm shortcut
    /// permitted on any of them (efa only; `None` where the provider does not say).
    pub emulated_write: Option<bool>,
    pub shm_shortcut: Option<bool>,
    /// When the channels' operations complete: what every channel's endpoint kept of what was asked.
    pub completion: Completion,
    pub channels: Vec<Channel>,
    /// Distinct NICs the channels are spread over on this rank.
    pub distinct_nics: usize,
    pub link_gbps: Option<f64>,
    /// Where `link_gbps` came from: `--link-gbps`, the provider, or nowhere.
    pub link_source: LinkSource,
    /// How long one operation may take before its rank is reported as hung.
    pub op_timeout: Duration,
    /// More ranks than cores on this host: a rank that polls and finds nothing yields its core, or
    /// busy-polling ranks would starve the one that has work for whole scheduler slices.
    pub share_cpu: bool,
    /// This rank's index among the ranks on its host.
    pub local_rank: usize,
    /// Where the topology puts this rank (GPU, nearest NICs, NUMA node's CPUs), when hwloc could tell.
    pub placement: Option<Placement>,
    /// The GPU this rank moves device memory on, when `--memory device`.
    pub gpu: Option<std::rc::Rc<efatop_cuda::Gpu>>,
    /// The hot path's telemetry counters, read by the sampler thread.
    pub probe: std::sync::Arc<crate::probe::Probe>,
    /// Raised from outside the hot path (rank 0's watchdog, a signal) to make every wait give up.
    pub abort: std::sync::Arc<Abort>,
    /// Things a user should know about this world (shared NICs, slow providers), for the header.
    pub notes: Vec<String>,
    /// The channels' NIC counters, read around every measured step (`counters`); `None` where they could
    /// not be opened at all.
    nic_counters: std::cell::RefCell<Option<crate::counters::NicCounters>>,
}

/// Where each channel reaches other channels of the ranks ([`World::connect_cross_rail`]).
#[derive(Clone, Debug, Default)]
pub struct CrossRail {
    /// Per channel: (the remote channel, the endpoint index its rank 0 took on this channel).
    bases: Vec<Vec<(usize, usize)>>,
}

impl CrossRail {
    /// The endpoint index channel `channel` writes `rank`'s channel `remote` at: `rank` itself for the same
    /// channel, `None` for a channel it was not connected to.
    pub fn endpoint(&self, channel: usize, remote: usize, rank: usize) -> Option<usize> {
        if channel == remote {
            return Some(rank);
        }
        self.bases.get(channel)?.iter().find(|(j, _)| *j == remote).map(|(_, base)| base + rank)
    }
}

/// A request, from outside the hot path, that every wait of this rank give up, with the reason to report.
#[derive(Debug, Default)]
pub struct Abort {
    raised: std::sync::atomic::AtomicBool,
    reason: std::sync::Mutex<String>,
}

impl Abort {
    /// The first reason wins: it names what went wrong first.
    pub fn raise(&self, reason: impl Into<String>) {
        // The run is over for this rank: its fabric objects are left as they are, never closed mid-transfer
        // (efatop_fabric::ending).
        efatop_fabric::ending::abandon();
        let mut kept = self.reason.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !self.raised.load(std::sync::atomic::Ordering::Acquire) {
            *kept = reason.into();
            self.raised.store(true, std::sync::atomic::Ordering::Release);
        }
    }

    #[inline]
    pub fn is_raised(&self) -> bool {
        self.raised.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn reason(&self) -> String {
        self.reason.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

impl<'b> World<'b> {
    /// Chooses the provider and NICs, opens the channels and connects every rank's channel `c` to every
    /// other rank's channel `c`.
    #[allow(clippy::too_many_lines)] // one agreed sequence of setup rounds, each commented
    pub fn establish(bootstrap: &'b dyn Bootstrap, options: &WorldOptions) -> Result<Self, ExperimentError> {
        let rank = bootstrap.rank();
        let size = bootstrap.size();
        let hosts: Vec<String> = crate::gather(bootstrap, &hostname(), "host name")?;
        bootstrap.know_hosts(&hosts);

        let provider = resolve_provider(bootstrap, &options.provider, options.capabilities, &hosts)?;
        let options = &WorldOptions {
            capabilities: Capabilities { delivery_complete: options.completion.delivery_for(&provider), ..options.capabilities },
            ..options.clone()
        };

        // Every rank must find the provider, or none proceeds: the failing rank's reason is shared.
        let single_host = hosts.iter().all(|h| *h == hosts[0]);
        let local_rank = hosts[..rank].iter().filter(|h| **h == hosts[rank]).count();
        // Where this rank belongs on its node (hwloc): its GPU, the NICs next to it, its NUMA node's CPUs.
        // The GPU is opened first, and the NICs follow the PCI bus id of the GPU actually opened: under
        // CUDA_VISIBLE_DEVICES, CUDA's ordinal and hwloc's index name different GPUs. Without a readable
        // topology the rank still runs, on every NIC in libfabric's order.
        let gpu = options.gpu.map(|choice| open_gpu(bootstrap, rank, &hosts, choice, local_rank)).transpose()?;
        let topology = NodeTopology::discover().ok();
        let gpu_choice = match options.gpu {
            Some(Some(index)) => GpuChoice::Index(index),
            _ => GpuChoice::Auto,
        };
        let placement = topology.as_ref().and_then(|t| place(t, local_rank, gpu_choice, gpu.as_deref()));
        let preference = |nic: &Nic| -> Option<usize> {
            let (topology, placement) = (topology.as_ref()?, placement.as_ref()?);
            topology.nic_preference(placement, nic.pci_address.as_deref(), &nic.domain)
        };
        // Device memory: prefer NICs that can register it; without them it is staged through host memory.
        let (nics, nic_counts) =
            discover_agreed(bootstrap, &hosts, &provider, options, single_host, &preference)?;

        let mut notes = Vec::new();
        if let Some(warning) = efatop_fabric::version_warning() {
            notes.push(warning);
        }
        let nics = match &gpu {
            Some(gpu) => keep_hmem_only_if_usable(bootstrap, &provider, options, nics, gpu, single_host, &preference, &mut notes)?,
            None => nics,
        };
        let min_nics = nic_counts.iter().copied().min().unwrap_or(1).max(1);
        let channel_count = match options.channels {
            ChannelCount::All => min_nics,
            ChannelCount::Exactly(n) => n,
        };
        // By machine, as pinning counts them: emulated nodes are namespaces of one kernel and share its cores.
        let (_, ranks_here) = index_on_machine(&hosts, rank);
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let share_cpu = ranks_here > cores;
        if share_cpu {
            notes.push(format!(
                "{ranks_here} ranks share {} on {}: idle ranks yield the CPU while polling, so figures \
                 are lower than with a core per rank",
                efatop_proto::words::plural(cores, "core"),
                machine(&hosts[rank])
            ));
        }
        if provider == Provider::Udp {
            notes.push(
                "udp is reliability emulated over UDP datagrams (ofi_rxd): lost datagrams wait for its retransmit \
                 timer, so figures swing and are not representative of RDMA"
                    .into(),
            );
        }
        if provider == Provider::Sockets {
            notes.push("the sockets provider takes milliseconds per RDM transfer: its figures are not representative".into());
        }
        if channel_count > nics.len() {
            notes.push(format!(
                "{channel_count} channels share {} NIC{} on rank {rank}: several endpoints per NIC",
                nics.len(),
                if nics.len() == 1 { "" } else { "s" }
            ));
        }

        // A rank whose endpoint cannot be opened or connected says so to every rank, which all end with
        // its reason: one that simply left would leave the others in the next collective (under MPI,
        // its MPI_Finalize would wait for them, and nobody would end).
        let opened = (0..channel_count)
            .map(|index| {
                let nic: &Nic = &nics[index % nics.len()];
                let channel_options = ChannelOptions {
                    index,
                    max_in_flight: options.max_in_flight,
                    op_timeout: options.op_timeout,
                    remote_in_flight: size.saturating_sub(1) * options.max_in_flight,
                    device_memory: gpu.is_some(),
                };
                Channel::open(nic, &channel_options).map_err(ExperimentError::Fabric)
            })
            .collect::<Result<Vec<Channel>, _>>()
            .and_then(|channels| {
                // One gather carries every channel's address.
                let mine = addresses_of(&channels)?;
                Ok((channels, mine))
            });
        let (channels, mine) = crate::agree_with(bootstrap, rank, &hosts, opened, false)?;
        let everyone = crate::gather(bootstrap, &mine, "channel addresses")?;
        let connected = channels.iter().enumerate().try_for_each(|(index, channel)| {
            let mut addresses = Vec::with_capacity(size);
            for (peer, records) in everyone.iter().enumerate() {
                let record = records.get(index).ok_or_else(|| {
                    ExperimentError::Bootstrap(format!("rank {peer} opened fewer channels than rank {rank}"))
                })?;
                addresses.push(PeerAddress(record.clone()));
            }
            channel.connect(&addresses).map_err(ExperimentError::Fabric)
        });
        crate::agree_with(bootstrap, rank, &hosts, connected, false)?;

        let provider_link = channels.first().and_then(|c| c.nic().link_speed_bps).map(|bps| bps as f64 / 1e9);
        let (link_gbps, link_source) = match (options.link_gbps, provider_link) {
            (Some(flag), _) => (Some(flag), LinkSource::Flag),
            (None, Some(reported)) => (Some(reported), LinkSource::Provider),
            (None, None) => (None, LinkSource::Unknown),
        };
        let distinct_nics = channel_count.min(nics.len());
        let provider_stack = nics[0].provider.clone();
        let fabric = nics[0].fabric.clone();
        let any = |get: &dyn Fn(&Channel) -> Option<bool>| {
            channels.iter().filter_map(get).reduce(|a, b| a || b)
        };
        let emulated_write = any(&|c| c.report().emulated_write);
        let shm_shortcut = any(&|c| c.report().shm_permitted);
        notes.extend(endpoint_notes(&provider, emulated_write, shm_shortcut, &hosts, rank));
        let delivery = channels.iter().all(|c| c.nic().delivery_complete());
        let completion = if delivery { Completion::Delivery } else { Completion::Transmit };
        if let Some(note) = completion_note(&provider, options.capabilities.delivery_complete, completion) {
            notes.push(note);
        }
        let channel_nics: Vec<crate::counters::ChannelNic<'_>> = channels
            .iter()
            .map(|c| crate::counters::ChannelNic { index: c.index(), provider: &provider, domain: &c.nic().domain })
            .collect();
        // This machine's counters cannot be refused: a NIC without them is recorded as such.
        let nic_counters = crate::counters::NicCounters::open(&crate::counters::CounterConfig::this_machine(), &channel_nics).ok();
        drop(channel_nics);
        Ok(Self {
            bootstrap,
            rank,
            size,
            hosts,
            provider,
            provider_stack,
            fabric,
            emulated_write,
            completion,
            shm_shortcut,
            channels,
            distinct_nics,
            link_gbps,
            link_source,
            op_timeout: options.op_timeout,
            share_cpu,
            probe: std::sync::Arc::new(crate::probe::Probe::new(channel_count, size)),
            abort: std::sync::Arc::new(Abort::default()),
            local_rank,
            placement,
            gpu,
            notes,
            nic_counters: std::cell::RefCell::new(nic_counters),
        })
    }

    /// Reads NIC counters from another tree and/or names channels' devices (`--sysfs-root`, `--nic-map`),
    /// instead of this machine's NICs as the domains name them; the run's notes say so.
    pub fn watch_counters(&mut self, config: &crate::counters::CounterConfig) -> Result<(), ExperimentError> {
        let channel_nics: Vec<crate::counters::ChannelNic<'_>> = self
            .channels
            .iter()
            .map(|c| crate::counters::ChannelNic { index: c.index(), provider: &self.provider, domain: &c.nic().domain })
            .collect();
        let counters = crate::counters::NicCounters::open(config, &channel_nics)?;
        if let Some(note) = &counters.note {
            self.notes.push(note.clone());
        }
        *self.nic_counters.borrow_mut() = Some(counters);
        Ok(())
    }

    /// Reads this rank's NIC counters before a measured step (never inside the timed loop).
    pub fn counters_before_step(&self) {
        if let Some(counters) = self.nic_counters.borrow_mut().as_mut() {
            counters.begin(|channel| self.probe.channel_bytes(channel));
        }
    }

    /// What this rank retransmitted since [`World::counters_before_step`], read locally (nothing gathered):
    /// per channel the NIC's retransmitted packets and retransmit timeouts where its counters have them
    /// (EFA's `retrans_pkts`, `retrans_timeout_events`), and the TCP segments the rank's network namespace
    /// retransmitted (`/proc/net/snmp`) where the channels are TCP.
    pub fn retransmits_since_before_step(&self) -> (Vec<Option<u64>>, Option<u64>) {
        let reading = self.nic_counters.borrow_mut().as_mut().map(|counters| counters.end(self.rank, |_| 0));
        let Some(reading) = reading else { return (vec![None; self.channels.len()], None) };
        let per_channel = (0..self.channels.len())
            .map(|index| {
                let deltas = &reading.channels.iter().find(|c| c.channel == index)?.deltas;
                let counted: Vec<u64> =
                    ["retrans_pkts", "retrans_timeout_events"].iter().filter_map(|name| deltas.get(*name).copied()).collect();
                (!counted.is_empty()).then(|| counted.iter().sum())
            })
            .collect();
        let tcp = if self.provider_stack.starts_with("tcp") { reading.tcp_retransmits } else { None };
        (per_channel, tcp)
    }

    /// Reads them after the step and gathers every rank's reading: rank 0 gets the step's reconciliation,
    /// the others `None`. Every rank calls it once per step, as it does `agree`.
    pub fn counters_after_step(&self, op: efatop_proto::counters::StepOp) -> Result<Option<efatop_proto::counters::StepCounters>, ExperimentError> {
        self.counters_after_step_adding(op, &[])
    }

    /// [`World::counters_after_step`] where the probe does not count all of the step's bytes: `unprobed[c]`
    /// is what the application moved on channel `c` during the step that the probe's per-channel count left
    /// out (all-to-all's arrivals and start-together writes, the proxy target's arrivals), worked out
    /// between steps from the step's plan; a channel past the slice's end adds nothing.
    pub fn counters_after_step_adding(
        &self,
        op: efatop_proto::counters::StepOp,
        unprobed: &[u64],
    ) -> Result<Option<efatop_proto::counters::StepCounters>, ExperimentError> {
        // `begin` took the probe's count alone, so the step's application bytes are the probe's change
        // plus what it did not count.
        let app_bytes = |channel: usize| self.probe.channel_bytes(channel).saturating_add(unprobed.get(channel).copied().unwrap_or(0));
        let reading = self.nic_counters.borrow_mut().as_mut().map(|counters| counters.end(self.rank, app_bytes));
        let gathered = self.gather(&reading, "NIC counters")?;
        if self.rank != 0 {
            return Ok(None);
        }
        let readings: Vec<efatop_proto::counters::RankReading> = gathered.into_iter().flatten().collect();
        Ok(Some(crate::reconcile::gather(op, &readings)))
    }

    /// RDMA WRITE is emulated over sends on some channel: write columns say so (`SinglePin(emulated)`).
    pub fn write_emulated(&self) -> bool {
        self.emulated_write == Some(true)
    }

    /// The speed of `channels` of this world's channels together, what a `BusBW` over them divides by;
    /// `None` when the link speed is not known (BusBW is then left out, never guessed).
    pub fn link_gbps_of(&self, channels: usize) -> Option<f64> {
        self.link_gbps.map(|link| link * channels as f64)
    }

    /// Connects channel k of this rank to channels k + `shift` and k − `shift` (mod the channel count) of
    /// every rank, besides channel k, for a cross-rail exchange (NIC k of one node with NIC j of another).
    /// Every rank calls it at once; a rank that fails says so to all. The world's addresses are gathered
    /// again (they are not kept), once.
    pub fn connect_cross_rail(&self, shift: usize) -> Result<CrossRail, ExperimentError> {
        let channels = self.channels.len();
        let records = self.gather(&addresses_of(&self.channels)?, "channel addresses")?;
        let connected = (|| {
            let mut bases = vec![Vec::new(); channels];
            for (channel, bases) in self.channels.iter().zip(bases.iter_mut()) {
                let k = channel.index();
                let mut remote = vec![(k + shift) % channels, (k + channels - shift % channels) % channels];
                remote.dedup();
                for j in remote.into_iter().filter(|&j| j != k) {
                    let addresses = records
                        .iter()
                        .enumerate()
                        .map(|(peer, records)| {
                            records.get(j).map(|r| PeerAddress(r.clone())).ok_or_else(|| {
                                ExperimentError::Bootstrap(format!("rank {peer} has no channel {j} for a cross-rail exchange"))
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    bases.push((j, channel.connect_more(&addresses).map_err(ExperimentError::Fabric)?));
                }
            }
            Ok(CrossRail { bases })
        })();
        crate::agree_with(self.bootstrap, self.rank, &self.hosts, connected, false)
    }

    /// The GPU this rank names: the one it opened, else the one the topology assigned it.
    pub fn gpu_ordinal(&self) -> Option<usize> {
        self.gpu.as_ref().map(|g| g.ordinal()).or_else(|| self.placement.as_ref().and_then(|p| p.gpu))
    }

    /// That GPU's PCI bus id: the opened GPU's, else the one the topology assigned.
    pub fn gpu_pci_bus_id(&self) -> Option<String> {
        self.gpu
            .as_ref()
            .map(|g| g.pci_bus_id().to_string())
            .or_else(|| self.placement.as_ref().and_then(|p| p.gpu_pci_bus_id.clone()))
    }

    /// The largest message every channel's provider accepts.
    pub fn max_msg_size(&self) -> u64 {
        self.channels.iter().map(|c| c.nic().max_msg_size).min().unwrap_or(0)
    }

    pub fn nic_records(&self) -> Vec<efatop_proto::results::NicRecord> {
        self.channels
            .iter()
            .map(|c| efatop_proto::results::NicRecord {
                channel: c.index(),
                domain: c.nic().domain.clone(),
                fabric: c.nic().fabric.clone(),
                link_gbps: c.nic().link_speed_bps.map(|b| b as f64 / 1e9),
                pci_address: c.nic().pci_address.clone(),
                mr_mode: mr_mode_names(c.nic().mr_mode).into_iter().map(String::from).collect(),
            })
            .collect()
    }

    /// Every rank contributes `data` and gets all contributions, while this rank keeps reading its
    /// channels' completion queues: on manual-progress providers (efa RDM) a peer can be waiting for a
    /// packet this rank only sends from inside a CQ read (the long-read protocol's next step), and would
    /// otherwise wait until the round is over. A CQ error seen while waiting fails the round.
    pub fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>, ExperimentError> {
        let mut failure: Option<FabricError> = None;
        let mut empty_polls = 0u32;
        let gathered = self.bootstrap.allgather_while(data, &mut || {
            if failure.is_some() {
                std::thread::sleep(IDLE_BACKOFF);
                return;
            }
            match self.progress_once(&self.channels) {
                Ok(0) => {
                    // Nothing is in flight, or it is not moving: back off, so ranks waiting for the others
                    // leave the cores to the ranks that still work. Spinning waiters took the emulated
                    // cluster's SinglePin from 0.96 to 0.84-0.88 of its shaped 1 Gbit/s (tests/cluster.rs,
                    // 4 ranks on 2 cores). A manual-progress provider is still driven every IDLE_BACKOFF.
                    empty_polls = empty_polls.saturating_add(1);
                    if empty_polls > IDLE_SPINS {
                        std::thread::sleep(IDLE_BACKOFF);
                    }
                }
                Ok(_) => empty_polls = 0,
                Err(err) => failure = Some(err),
            }
        })?;
        match failure {
            // An abort raised by rank 0 is reported where the experiment next looks, not here.
            Some(err) if !matches!(err, FabricError::Abandoned(_)) => Err(ExperimentError::Fabric(err)),
            _ => Ok(gathered),
        }
    }

    /// Every rank's `value`, in rank order, in the ranks' one encoding ([`crate::gather_with`]), with
    /// progress kept going while waiting ([`World::allgather`]).
    pub fn gather<T: serde::Serialize + serde::de::DeserializeOwned>(&self, value: &T, what: &str) -> Result<Vec<T>, ExperimentError> {
        crate::gather_with(|mine| self.allgather(mine), value, what)
    }

    /// A barrier that keeps progress going (see [`World::allgather`]).
    pub fn barrier(&self) -> Result<(), ExperimentError> {
        self.allgather(&[]).map(|_| ())
    }

    /// Reads every channel's completion queue once; returns how many entries were found.
    pub fn progress_all(&self) -> Result<usize, FabricError> {
        self.progress_once(&self.channels)
    }

    /// Reads each of `channels`' completion queues once (a few of this world's channels); returns how many
    /// entries were found.
    pub fn progress(&self, channels: &[Channel]) -> Result<usize, FabricError> {
        self.progress_once(channels)
    }

    /// Reads each of `channels`' completion queues once; a rank sharing its core yields when all were empty.
    fn progress_once(&self, channels: &[Channel]) -> Result<usize, FabricError> {
        let mut found = 0;
        for channel in channels {
            found += channel.progress()?;
        }
        if found == 0 {
            // Only idle spins look: one relaxed load, while nothing else is happening anyway.
            if self.abort.is_raised() {
                return Err(FabricError::Abandoned(self.abort.reason()));
            }
            if self.share_cpu {
                std::thread::yield_now();
            }
        }
        Ok(found)
    }

    /// Progresses `channels` until `done()` holds, or fails after the operation timeout naming `what`.
    pub fn progress_until(&self, channels: &[Channel], what: &'static str, done: impl FnMut() -> bool) -> Result<(), FabricError> {
        self.progress_until_within(channels, self.op_timeout, what, done)
    }

    /// As [`World::progress_until`], with a timeout of its own.
    pub fn progress_until_within(
        &self,
        channels: &[Channel],
        timeout: Duration,
        what: &'static str,
        mut done: impl FnMut() -> bool,
    ) -> Result<(), FabricError> {
        let started = Instant::now();
        let mut spins = 0u32;
        while !done() {
            self.progress_once(channels)?;
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) && started.elapsed() > timeout {
                return Err(FabricError::Timeout { what, channel: channels.first().map_or(0, Channel::index), timeout });
            }
        }
        Ok(())
    }
}

/// This rank's place on its node: by the PCI bus id of the GPU it opened (CUDA's ordinal and hwloc's
/// index differ under `CUDA_VISIBLE_DEVICES`), else by `--gpu` or the local rank.
fn place(topology: &NodeTopology, local_rank: usize, choice: GpuChoice, opened: Option<&efatop_cuda::Gpu>) -> Option<Placement> {
    match opened {
        Some(gpu) => topology.placement_of_gpu(local_rank, gpu.pci_bus_id()),
        None => topology.placement(local_rank, choice).ok(),
    }
}

/// The header's word on completion where it decides what `--window` means: on tcp and sockets, and wherever
/// delivery was asked for and the provider did not keep it.
fn completion_note(provider: &Provider, asked_delivery: bool, completion: Completion) -> Option<String> {
    let local = provider.completes_locally();
    match (asked_delivery, completion) {
        (true, Completion::Delivery) if local => Some(format!(
            "{provider}: operations complete once the peer has them (FI_DELIVERY_COMPLETE), so --window counts \
             operations the peer has not yet received; --completion transmit completes them once the kernel has \
             taken their bytes, and even --window 1 then streams through the socket buffers"
        )),
        (true, Completion::Delivery) => {
            Some(format!("{provider}: operations complete once the peer has them (FI_DELIVERY_COMPLETE, --completion delivery)"))
        }
        (true, Completion::Transmit) => Some(format!(
            "{provider} did not keep FI_DELIVERY_COMPLETE: operations complete when the provider says, which may be \
             before the peer has them"
        )),
        (false, _) if local => Some(format!(
            "{provider}: an operation completes once the kernel has taken its bytes (--completion transmit), so even \
             --window 1 streams through the socket buffers"
        )),
        (false, _) => None,
    }
}

/// What the header says about an efa endpoint: emulated writes (aws-ofi-nccl refuses to run so), and
/// whether same-host peers cross the NIC.
fn endpoint_notes(
    provider: &Provider,
    emulated_write: Option<bool>,
    shm_shortcut: Option<bool>,
    hosts: &[String],
    rank: usize,
) -> Vec<String> {
    let mut notes = Vec::new();
    if emulated_write == Some(true) {
        notes.push(format!(
            "{provider} emulates RDMA WRITE over sends on rank {rank} (FI_OPT_EFA_EMULATED_WRITE: device RDMA off, or \
             peers disagree): write columns are marked (emulated), and are not what a p5's RDMA delivers"
        ));
    }
    let same_host_peers = hosts.iter().enumerate().any(|(peer, host)| peer != rank && *host == hosts[rank]);
    if provider.is_efa() && same_host_peers {
        notes.push(match shm_shortcut {
            Some(true) => format!(
                "--allow-shm: same-host pairs on {} move through shared memory, not the NIC (marked same-host)",
                hosts[rank]
            ),
            Some(false) => "same-host peers go through the NIC (efa's shm shortcut off; --allow-shm measures it)".into(),
            None => "same-host peers: libfabric does not say whether efa uses shm for them".into(),
        });
    }
    notes
}

/// Opens this rank's GPU; every rank learns whether all could (rank 0 reports a failure for the run).
fn open_gpu(
    bootstrap: &dyn Bootstrap,
    rank: usize,
    hosts: &[String],
    choice: Option<usize>,
    local_rank: usize,
) -> Result<std::rc::Rc<efatop_cuda::Gpu>, ExperimentError> {
    // `auto`: ranks of a host take its GPUs in turn (two ranks on a one-GPU machine share it).
    let ordinal = match choice {
        Some(index) => Ok(index),
        None => efatop_cuda::device_count().map(|count| local_rank % count),
    };
    let opened = ordinal.and_then(efatop_cuda::Gpu::open).map(std::rc::Rc::new).map_err(crate::cuda_error);
    crate::agree_with(bootstrap, rank, hosts, opened, false)
}

/// libfabric 1.17's shm offers `FI_HMEM` but refuses to register CUDA memory (ENOSYS), and an shm
/// endpoint opened with `FI_HMEM` turns off CMA, its single-copy path, so every transfer, host memory
/// included, goes through bounce buffers. Device memory is staged through host memory where it cannot be
/// registered anyway, so unless every rank can register its GPU's memory with the NICs found, they are
/// found again without `FI_HMEM`. One small registration on a throwaway endpoint tells.
#[allow(clippy::too_many_arguments)]
fn keep_hmem_only_if_usable(
    bootstrap: &dyn Bootstrap,
    provider: &Provider,
    options: &WorldOptions,
    nics: Vec<Nic>,
    gpu: &efatop_cuda::Gpu,
    single_host: bool,
    preference: &dyn Fn(&Nic) -> Option<usize>,
    notes: &mut Vec<String>,
) -> Result<Vec<Nic>, ExperimentError> {
    let offered = nics.first().is_some_and(Nic::offers_hmem);
    let usable = offered && registers_device_memory(&nics[0], gpu, options);
    let votes = crate::gather(bootstrap, &(!offered || usable), "GPU memory registration")?;
    if !offered || votes.iter().all(|&usable| usable) {
        return Ok(nics);
    }
    match discover_nics(provider, options.capabilities) {
        Ok(plain) if plain.len() == nics.len() => {
            notes.push(format!(
                "{} offers FI_HMEM but cannot register GPU memory here: its endpoints are opened without it \
                 (keeping {provider}'s own fast paths) and device memory is staged through host memory",
                nics[0].provider
            ));
            Ok(order_nics(plain, single_host, preference))
        }
        _ => Ok(nics),
    }
}

/// Whether `nic` accepts a registration of `gpu`'s memory (on an endpoint opened for the question).
fn registers_device_memory(nic: &Nic, gpu: &efatop_cuda::Gpu, options: &WorldOptions) -> bool {
    let probe = ChannelOptions {
        index: 0,
        max_in_flight: 1,
        op_timeout: options.op_timeout,
        remote_in_flight: 0,
        device_memory: true,
    };
    let (Ok(channel), Ok(buffer)) = (Channel::open(nic, &probe), gpu.alloc(4096)) else { return false };
    channel.register(std::rc::Rc::new(buffer)).is_ok()
}

/// Finds this rank's NICs (own NICs first) and shares with every rank how many `--channels all` would
/// give; a rank that finds none ends the run, named by rank 0. Device memory prefers NICs that can
/// register it; without them it is staged through host memory.
fn discover_agreed(
    bootstrap: &dyn Bootstrap,
    hosts: &[String],
    provider: &Provider,
    options: &WorldOptions,
    single_host: bool,
    preference: &dyn Fn(&Nic) -> Option<usize>,
) -> Result<(Vec<Nic>, Vec<usize>), ExperimentError> {
    let rank = bootstrap.rank();
    let hmem = Capabilities { hmem: options.gpu.is_some(), ..options.capabilities };
    let found = discover_nics(provider, hmem).or_else(|_| discover_nics(provider, options.capabilities));
    let discovered = found.map_err(|e| e.to_string()).and_then(|nics| {
        let nics = order_nics(nics, single_host, preference);
        if nics.is_empty() {
            Err(format!("{provider} offers only loopback here, which cannot reach ranks on other hosts"))
        } else {
            Ok(nics)
        }
    });
    // `--channels all` means the NICs next to this rank's GPU when the topology names some (a p5 GPU's
    // four EFA), else every NIC.
    let nearest = discovered.as_ref().map_or(0, |nics| nics.iter().filter(|nic| preference(nic).is_some()).count());
    let status: Result<usize, String> = match &discovered {
        Ok(nics) => Ok(if nearest > 0 { nearest } else { nics.len() }),
        Err(err) => Err(err.clone()),
    };
    let statuses = crate::gather(bootstrap, &status, "NICs found")?;
    let mut nic_counts = Vec::with_capacity(hosts.len());
    for (peer, status) in statuses.into_iter().enumerate() {
        let count = status.map_err(|reason| match rank {
            // Rank 0 names the failing rank for everyone.
            0 if peer == rank => ExperimentError::Unsupported(reason),
            0 => ExperimentError::Unsupported(format!("rank {peer} ({}): {reason}", hosts[peer])),
            _ => ExperimentError::Reported { exit_code: 2 },
        })?;
        nic_counts.push(count);
    }
    let nics = discovered.map_err(ExperimentError::Unsupported)?;
    Ok((nics, nic_counts))
}

/// `auto` is efa when every rank has it, else shm when all ranks share a host, else tcp.
fn resolve_provider(
    bootstrap: &dyn Bootstrap,
    choice: &ProviderChoice,
    capabilities: Capabilities,
    hosts: &[String],
) -> Result<Provider, ExperimentError> {
    Ok(match choice {
        ProviderChoice::Given(provider) => provider.clone(),
        ProviderChoice::Auto => {
            let efa_here = discover_nics(&Provider::Efa, capabilities).is_ok();
            let votes = crate::gather(bootstrap, &efa_here, "efa found")?;
            if votes.iter().all(|&efa| efa) {
                Provider::Efa
            } else if hosts.iter().all(|h| *h == hosts[0]) {
                Provider::Shm
            } else {
                Provider::Tcp
            }
        }
    })
}

/// Every channel's endpoint address, in channel order, as the ranks exchange them.
fn addresses_of(channels: &[Channel]) -> Result<Vec<Vec<u8>>, ExperimentError> {
    channels.iter().map(|channel| channel.address().map(|address| address.0).map_err(ExperimentError::Fabric)).collect()
}

/// Empty completion-queue polls a rank waiting in an agreement makes before it starts sleeping between
/// polls, and how long it sleeps.
const IDLE_SPINS: u32 = 256;
const IDLE_BACKOFF: Duration = Duration::from_micros(200);

/// The environment variable naming the network namespace a rank runs in (set by `efatop run --netns`).
pub const ENV_NETNS: &str = "EFATOP_NETNS";

/// This rank's host as the run sees it: the host name, and for a rank inside an emulated node (a network
/// namespace) `host:namespace`, since such ranks reach each other only over the network.
pub fn hostname() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").map_or_else(|_| "localhost".into(), |h| h.trim().to_string());
    match std::env::var(ENV_NETNS) {
        Ok(netns) if !netns.is_empty() => format!("{name}:{netns}"),
        _ => name,
    }
}

/// The machine part of a [`hostname`]: ranks with the same machine can reach each other on loopback.
pub fn machine(host: &str) -> &str {
    host.split(':').next().unwrap_or(host)
}

/// This rank's index among the ranks on its machine, and how many there are. Ranks are counted by
/// [`machine`], not by host name: emulated nodes are network namespaces of one kernel and share its CPUs.
pub fn index_on_machine(hosts: &[String], rank: usize) -> (usize, usize) {
    let Some(mine) = hosts.get(rank).map(|host| machine(host)) else { return (0, 1) };
    let index = hosts[..rank].iter().filter(|host| machine(host) == mine).count();
    (index, hosts.iter().filter(|host| machine(host) == mine).count())
}

/// Orders NICs the same way on every rank, so that channel c pairs NIC c with NIC c (rail with rail):
/// by PCI address, then name. Loopback is left out when the ranks span hosts, since it reaches no peer.
pub fn order_nics(mut nics: Vec<Nic>, single_host: bool, preference: &dyn Fn(&Nic) -> Option<usize>) -> Vec<Nic> {
    if !single_host {
        nics.retain(|nic| nic.domain != "lo" && !nic.fabric.starts_with("127.") && nic.fabric != "::1/128");
    }
    // The rank's own NICs (nearest its GPU) first, in the topology's order; then the rest.
    nics.sort_by_cached_key(|nic| (preference(nic).unwrap_or(usize::MAX), nic.pci_address.clone(), nic.domain.clone()));
    nics
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_counted_by_machine_not_by_host_name() {
        // Three emulated nodes on one machine (network namespaces of it), and a rank on another.
        let hosts: Vec<String> = ["a:efatop-node0", "a:efatop-node1", "b", "a:efatop-node2"].iter().map(|h| (*h).to_string()).collect();
        assert_eq!(index_on_machine(&hosts, 0), (0, 3));
        assert_eq!(index_on_machine(&hosts, 3), (2, 3));
        assert_eq!(index_on_machine(&hosts, 2), (0, 1));
    }

    #[test]
    fn auto_asks_for_delivery_only_where_completion_is_local() {
        for provider in [Provider::Tcp, Provider::Sockets] {
            assert!(CompletionChoice::Auto.delivery_for(&provider), "{provider}");
            assert!(!CompletionChoice::Transmit.delivery_for(&provider), "{provider}");
        }
        for provider in [Provider::Efa, Provider::EfaDirect, Provider::Shm, Provider::Udp] {
            assert!(!CompletionChoice::Auto.delivery_for(&provider), "{provider}");
            assert!(CompletionChoice::Delivery.delivery_for(&provider), "{provider}");
        }
    }

    #[test]
    fn the_header_says_what_a_window_counts() {
        let note = |provider, asked, got| completion_note(&provider, asked, got).unwrap_or_default();
        assert!(note(Provider::Tcp, true, Completion::Delivery).contains("complete once the peer has them"));
        assert!(note(Provider::Tcp, false, Completion::Transmit).contains("streams through the socket buffers"));
        assert!(note(Provider::Shm, true, Completion::Transmit).contains("did not keep FI_DELIVERY_COMPLETE"));
        assert!(note(Provider::Efa, true, Completion::Delivery).contains("--completion delivery"));
        assert_eq!(completion_note(&Provider::Efa, false, Completion::Transmit), None, "efa's default needs no word");
    }
}
