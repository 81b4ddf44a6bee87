//! The ipc experiment's columns: how rank 0 moves bytes into its peer GPU, named as tables and reports
//! show it (`IPC <grid>x<block>` or `CE`) and read back from a results file.

/// How the writer moves its bytes into the peer's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mover {
    /// The store kernel with `grid` blocks of `block` threads.
    Kernel { grid: u32, block: u32 },
    /// One `cuMemcpyDtoDAsync`, done by a copy engine.
    CopyEngine,
}

/// One column of the ipc table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpcConfig(pub Mover);

impl IpcConfig {
    pub const COPY_ENGINE: IpcConfig = IpcConfig(Mover::CopyEngine);

    pub fn kernel(grid: u32, block: u32) -> Self {
        Self(Mover::Kernel { grid, block })
    }

    /// `IPC 128x256` (grid x block) or `CE`.
    pub fn column(self) -> String {
        match self.0 {
            Mover::Kernel { grid, block } => format!("IPC {grid}x{block}"),
            Mover::CopyEngine => "CE".into(),
        }
    }

    /// The store kernel's grid and block; `None` for the copy engine.
    pub fn grid_block(self) -> Option<(u32, u32)> {
        match self.0 {
            Mover::Kernel { grid, block } => Some((grid, block)),
            Mover::CopyEngine => None,
        }
    }

    /// The configuration a column name stands for (reports read them back).
    pub fn from_column(column: &str) -> Option<Self> {
        if column == "CE" {
            return Some(Self::COPY_ENGINE);
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
        let configs = [IpcConfig::kernel(128, 256), IpcConfig::kernel(1, 32), IpcConfig::COPY_ENGINE];
        let columns: Vec<String> = configs.iter().map(|c| c.column()).collect();
        assert_eq!(columns, ["IPC 128x256", "IPC 1x32", "CE"]);
        for (config, column) in configs.iter().zip(&columns) {
            assert_eq!(IpcConfig::from_column(column), Some(*config));
        }
        assert_eq!(IpcConfig::from_column("IPC 12"), None);
        assert_eq!(IpcConfig::from_column("SinglePin"), None);
    }
}
