//! The columns of a run's results: what each configuration is, as a typed key every crate matches on
//! ([`Column`]), and the one place it turns into the label tables, files and JSON lines show
//! (`SinglePin`, `MultiDMA(staged)(emulated)`, `ProxySingleNBIDMA`, `SingleDevice(staged)`, `IPC 128x256`,
//! `CE`).
//!
//! Files and streams carry the label, as they always have, so that tools reading today's files read
//! these too; the label is read back here and nowhere else, by matching it against what the known
//! columns render to (a label this efatop does not know stays [`Column::Other`], shown as it is).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ipc::{IpcConfig, Mover};

/// How a configuration spreads its writes over the channels (the seed's `Single`, `Multi`, `RoundRobin`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layout {
    /// Every write on channel 0.
    Single,
    /// Each write split over every channel.
    Multi,
    /// Whole writes dealt to the channels in turn.
    RoundRobin,
}

impl Layout {
    pub const ALL: [Layout; 3] = [Layout::Single, Layout::Multi, Layout::RoundRobin];

    /// The channels of `channels` this layout writes over, which is what its `BusBW` divides by: one for
    /// `Single`, all for `Multi` and `RoundRobin`.
    pub fn channels_used(self, channels: usize) -> usize {
        match self {
            Layout::Single => 1,
            Layout::Multi | Layout::RoundRobin => channels,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Layout::Single => "Single",
            Layout::Multi => "Multi",
            Layout::RoundRobin => "RoundRobin",
        }
    }
}

/// The proxy's configurations: its channel layout, and whether a request waits for its write (blocking)
/// or not (`NBI`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProxyLayout {
    Single,
    Multi,
    SingleNbi,
    MultiNbi,
}

impl ProxyLayout {
    pub const ALL: [ProxyLayout; 4] = [Self::Single, Self::Multi, Self::SingleNbi, Self::MultiNbi];

    /// The channel layout its writes use.
    pub fn layout(self) -> Layout {
        match self {
            Self::Single | Self::SingleNbi => Layout::Single,
            Self::Multi | Self::MultiNbi => Layout::Multi,
        }
    }

    /// Requests do not wait for their write (`nvshmem_putmem_nbi`).
    pub fn nbi(self) -> bool {
        matches!(self, Self::SingleNbi | Self::MultiNbi)
    }

    /// Its name after the `Proxy` every proxy column starts with.
    fn label(self) -> &'static str {
        match self {
            Self::Single => "Single",
            Self::Multi => "Multi",
            Self::SingleNbi => "SingleNBI",
            Self::MultiNbi => "MultiNBI",
        }
    }
}

/// The memory a column moves and how it reaches the NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Memory {
    /// Pinned host memory.
    Host,
    /// GPU memory the NIC reads and writes itself (registered natively).
    Device,
    /// GPU memory copied through pinned host memory (the provider cannot register it, or `--staged`).
    Staged,
}

impl Memory {
    pub const ALL: [Memory; 3] = [Memory::Host, Memory::Device, Memory::Staged];

    /// The seed's write-table names (`Pin`, `DMA`), or its sendrecv-table names (`Host`, `Device`).
    fn label(self, write_style: bool) -> &'static str {
        match (self, write_style) {
            (Memory::Host, true) => "Pin",
            (Memory::Host, false) => "Host",
            (Memory::Device, true) => "DMA",
            (Memory::Device, false) => "Device",
            (Memory::Staged, true) => "DMA(staged)",
            (Memory::Staged, false) => "Device(staged)",
        }
    }
}

/// One column of a run's results.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Column {
    /// `write` and `alltoall`: `SinglePin`, `MultiDMA(staged)`, `RoundRobinPin(emulated)`.
    Write { layout: Layout, memory: Memory, emulated: bool },
    /// `proxy`: `ProxySingleDMA`, `ProxyMultiNBIDMA(staged)`.
    Proxy { layout: ProxyLayout, memory: Memory, emulated: bool },
    /// `sendrecv`: `SingleHost`, `SingleDevice(staged)`.
    SendRecv { memory: Memory },
    /// `sweep`'s one column, its writes between rank pairs: `SweepPin`, `SweepDMA(staged)`.
    Sweep { memory: Memory, emulated: bool },
    /// `ipc`: `IPC 128x256` (the store kernel's grid × block), `kernel (tuned)` or `CE` (the copy engine).
    Ipc(IpcConfig),
    /// A label this efatop does not know (a file from a newer one): shown as it is, nothing derived.
    Other(String),
}

impl Column {
    /// A `write`/`alltoall` column whose RDMA WRITE is the NIC's own.
    pub fn write(layout: Layout, memory: Memory) -> Column {
        Column::Write { layout, memory, emulated: false }
    }

    /// The memory the column moves; `None` for ipc (always GPU memory, no NIC) and unknown columns.
    pub fn memory(&self) -> Option<Memory> {
        match self {
            Column::Write { memory, .. }
            | Column::Proxy { memory, .. }
            | Column::SendRecv { memory }
            | Column::Sweep { memory, .. } => Some(*memory),
            Column::Ipc(_) | Column::Other(_) => None,
        }
    }

    /// GPU memory copied through pinned host memory.
    pub fn is_staged(&self) -> bool {
        self.memory() == Some(Memory::Staged)
    }

    /// The ipc configuration behind an ipc column.
    pub fn ipc(&self) -> Option<IpcConfig> {
        match self {
            Column::Ipc(config) => Some(*config),
            _ => None,
        }
    }

    /// RDMA WRITE was emulated over sends for this column.
    pub fn emulated(&self) -> bool {
        matches!(self, Column::Write { emulated: true, .. } | Column::Proxy { emulated: true, .. } | Column::Sweep { emulated: true, .. })
    }

    /// The label in three parts, `prefix + core + suffix`: the experiment's prefix (`Proxy`, or none),
    /// what tells the experiment's columns apart (`SingleNBI`, `RoundRobin`, `IPC 1x32`), and the memory
    /// suffix with its marks (`DMA(staged)`, `Pin(emulated)`). Displays that are short of room drop what
    /// every column shares.
    pub fn parts(&self) -> (&'static str, String, String) {
        let emulated = |emulated: bool| if emulated { "(emulated)" } else { "" };
        match self {
            Column::Write { layout, memory, emulated: e } => {
                ("", layout.label().to_string(), format!("{}{}", memory.label(true), emulated(*e)))
            }
            Column::Proxy { layout, memory, emulated: e } => {
                ("Proxy", layout.label().to_string(), format!("{}{}", memory.label(true), emulated(*e)))
            }
            Column::SendRecv { memory } => ("", "Single".to_string(), memory.label(false).to_string()),
            Column::Sweep { memory, emulated: e } => ("", "Sweep".to_string(), format!("{}{}", memory.label(true), emulated(*e))),
            Column::Ipc(config) => match config.0 {
                Mover::Kernel { grid, block } => ("", format!("IPC {grid}x{block}"), String::new()),
                Mover::Tuned => ("", IpcConfig::TUNED_COLUMN.to_string(), String::new()),
                Mover::CopyEngine => ("", "CE".to_string(), String::new()),
            },
            Column::Other(label) => ("", label.clone(), String::new()),
        }
    }

    /// Every column but ipc's kernels and unknown ones: what a label is matched against.
    fn named() -> impl Iterator<Item = Column> {
        let flags = [false, true];
        let write = Layout::ALL.into_iter().flat_map(move |layout| {
            Memory::ALL.into_iter().flat_map(move |memory| flags.into_iter().map(move |emulated| Column::Write { layout, memory, emulated }))
        });
        let proxy = ProxyLayout::ALL.into_iter().flat_map(move |layout| {
            Memory::ALL.into_iter().flat_map(move |memory| flags.into_iter().map(move |emulated| Column::Proxy { layout, memory, emulated }))
        });
        let sendrecv = Memory::ALL.into_iter().map(|memory| Column::SendRecv { memory });
        let sweep = Memory::ALL.into_iter().flat_map(move |memory| flags.into_iter().map(move |emulated| Column::Sweep { memory, emulated }));
        write.chain(proxy).chain(sendrecv).chain(sweep).chain([Column::Ipc(IpcConfig::TUNED), Column::Ipc(IpcConfig::COPY_ENGINE)])
    }

    /// The column a file's label stands for: the known column that renders to it, an ipc kernel's grid
    /// and block, or [`Column::Other`].
    fn from_label(label: &str) -> Column {
        if let Some(column) = Column::named().find(|column| column.to_string() == label) {
            return column;
        }
        let kernel = label.strip_prefix("IPC ").and_then(|rest| rest.split_once('x')).and_then(|(grid, block)| {
            let config = IpcConfig::kernel(grid.parse().ok()?, block.parse().ok()?);
            (Column::Ipc(config).to_string() == label).then_some(config)
        });
        kernel.map_or_else(|| Column::Other(label.to_string()), Column::Ipc)
    }
}

impl fmt::Display for Column {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (prefix, core, suffix) = self.parts();
        f.pad(&format!("{prefix}{core}{suffix}"))
    }
}

impl Serialize for Column {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Column {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Column::from_label(&String::deserialize(deserializer)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(layout: Layout, memory: Memory, emulated: bool) -> Column {
        Column::Write { layout, memory, emulated }
    }

    #[test]
    fn single_uses_one_channel_and_the_others_all() {
        assert_eq!(Layout::ALL.map(|layout| layout.channels_used(4)), [1, 4, 4]);
        assert_eq!(ProxyLayout::ALL.map(|layout| layout.layout().channels_used(2)), [1, 2, 1, 2]);
    }

    #[test]
    fn labels_are_the_seeds_and_todays() {
        let cases = [
            (write(Layout::Single, Memory::Host, false), "SinglePin"),
            (write(Layout::RoundRobin, Memory::Device, false), "RoundRobinDMA"),
            (write(Layout::Multi, Memory::Staged, true), "MultiDMA(staged)(emulated)"),
            (Column::Proxy { layout: ProxyLayout::SingleNbi, memory: Memory::Staged, emulated: false }, "ProxySingleNBIDMA(staged)"),
            (Column::Proxy { layout: ProxyLayout::Multi, memory: Memory::Device, emulated: true }, "ProxyMultiDMA(emulated)"),
            (Column::SendRecv { memory: Memory::Host }, "SingleHost"),
            (Column::SendRecv { memory: Memory::Staged }, "SingleDevice(staged)"),
            (Column::Sweep { memory: Memory::Host, emulated: false }, "SweepPin"),
            (Column::Ipc(IpcConfig::kernel(128, 256)), "IPC 128x256"),
            (Column::Ipc(IpcConfig::COPY_ENGINE), "CE"),
        ];
        for (column, label) in cases {
            assert_eq!(column.to_string(), label);
            let json = serde_json::to_string(&column).expect("serializes");
            assert_eq!(json, format!("\"{label}\""));
            assert_eq!(serde_json::from_str::<Column>(&json).expect("reads back"), column, "{label}");
        }
    }

    #[test]
    fn every_known_column_reads_back_and_unknown_labels_stay_as_they_are() {
        for column in Column::named() {
            assert_eq!(Column::from_label(&column.to_string()), column);
        }
        for label in ["IPC 12", "IPC 1x32x", "IPC 01x32", "Pin", "FleetPin", ""] {
            assert_eq!(Column::from_label(label), Column::Other(label.to_string()), "{label}");
            assert_eq!(Column::Other(label.to_string()).to_string(), label);
        }
    }

    #[test]
    fn facts_come_from_the_key() {
        let staged = write(Layout::Single, Memory::Staged, false);
        assert!(staged.is_staged() && !staged.emulated() && staged.ipc().is_none());
        assert_eq!(Column::Ipc(IpcConfig::kernel(1, 32)).ipc().and_then(IpcConfig::grid_block), Some((1, 32)));
        assert_eq!(Column::Ipc(IpcConfig::COPY_ENGINE).memory(), None);
        let proxy = Column::Proxy { layout: ProxyLayout::MultiNbi, memory: Memory::Device, emulated: false };
        assert_eq!(proxy.parts(), ("Proxy", "MultiNBI".to_string(), "DMA".to_string()));
    }

    /// The ipc experiment's columns (moved from `ipc`, which `column` builds on).
    #[test]
    fn columns_name_grid_and_block_and_read_back() {
        let configs = [IpcConfig::kernel(128, 256), IpcConfig::kernel(1, 32), IpcConfig::TUNED, IpcConfig::COPY_ENGINE];
        let columns: Vec<String> = configs.iter().map(|c| Column::Ipc(*c).to_string()).collect();
        assert_eq!(columns, ["IPC 128x256", "IPC 1x32", "kernel (tuned)", "CE"]);
        let read = |label: &str| serde_json::from_value::<Column>(label.into()).expect("a label").ipc();
        for (config, column) in configs.iter().zip(&columns) {
            assert_eq!(read(column), Some(*config));
        }
        assert_eq!(read("IPC 12"), None);
        assert_eq!(read("SinglePin"), None);
    }
}
