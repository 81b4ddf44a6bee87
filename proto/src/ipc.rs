//! The ipc experiment's columns: how rank 0 moves bytes into its peer GPU, named as tables and reports
//! show it (`IPC <grid>x<block>`, `kernel (tuned)` or `CE`) and read back from a results file.

/// How the writer moves its bytes into the peer's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mover {
    /// The store kernel with `grid` blocks of `block` threads.
    Kernel { grid: u32, block: u32 },
    /// The tuned kernel: GPU-initiated copies sized to the GPU (Hopper bulk copies, else a store kernel with
    /// a resident grid and more loads in flight per thread).
    Tuned,
    /// One `cuMemcpyDtoDAsync`, done by a copy engine.
    CopyEngine,
}

/// One column of the ipc table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpcConfig(pub Mover);

impl IpcConfig {
    pub const COPY_ENGINE: IpcConfig = IpcConfig(Mover::CopyEngine);
    pub const TUNED: IpcConfig = IpcConfig(Mover::Tuned);
    const TUNED_COLUMN: &'static str = "kernel (tuned)";

    pub fn kernel(grid: u32, block: u32) -> Self {
        Self(Mover::Kernel { grid, block })
    }

    /// `IPC 128x256` (grid x block), `kernel (tuned)` or `CE`.
    pub fn column(self) -> String {
        match self.0 {
            Mover::Kernel { grid, block } => format!("IPC {grid}x{block}"),
            Mover::Tuned => Self::TUNED_COLUMN.into(),
            Mover::CopyEngine => "CE".into(),
        }
    }

    /// The store kernel's grid and block; `None` for the tuned kernel (its grid depends on the GPU) and
    /// the copy engine.
    pub fn grid_block(self) -> Option<(u32, u32)> {
        match self.0 {
            Mover::Kernel { grid, block } => Some((grid, block)),
            Mover::Tuned | Mover::CopyEngine => None,
        }
    }

    /// A store kernel (the grid x block sweep's or the tuned one), not the copy engine.
    pub fn is_kernel(self) -> bool {
        !matches!(self.0, Mover::CopyEngine)
    }

    /// The configuration a column name stands for (reports read them back).
    pub fn from_column(column: &str) -> Option<Self> {
        if column == "CE" {
            return Some(Self::COPY_ENGINE);
        }
        if column == Self::TUNED_COLUMN {
            return Some(Self::TUNED);
        }
        let (grid, block) = column.strip_prefix("IPC ")?.split_once('x')?;
        Some(Self::kernel(grid.parse().ok()?, block.parse().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_name_grid_and_block_and_read_back() {
        let configs = [IpcConfig::kernel(128, 256), IpcConfig::kernel(1, 32), IpcConfig::TUNED, IpcConfig::COPY_ENGINE];
        let columns: Vec<String> = configs.iter().map(|c| c.column()).collect();
        assert_eq!(columns, ["IPC 128x256", "IPC 1x32", "kernel (tuned)", "CE"]);
        assert_eq!(IpcConfig::TUNED.grid_block(), None);
        assert!(IpcConfig::TUNED.is_kernel() && !IpcConfig::COPY_ENGINE.is_kernel());
        for (config, column) in configs.iter().zip(&columns) {
            assert_eq!(IpcConfig::from_column(column), Some(*config));
        }
        assert_eq!(IpcConfig::from_column("IPC 12"), None);
        assert_eq!(IpcConfig::from_column("SinglePin"), None);
    }
}
