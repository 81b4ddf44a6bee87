//! The ipc experiment's columns: how rank 0 moves bytes into its peer GPU. [`crate::column::Column::Ipc`]
//! names them (`IPC <grid>x<block>` or `CE`) as tables and reports show them.

/// How the writer moves its bytes into the peer's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mover {
    /// The store kernel with `grid` blocks of `block` threads.
    Kernel { grid: u32, block: u32 },
    /// One `cuMemcpyDtoDAsync`, done by a copy engine.
    CopyEngine,
}

/// One column of the ipc table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpcConfig(pub Mover);

impl IpcConfig {
    pub const COPY_ENGINE: IpcConfig = IpcConfig(Mover::CopyEngine);

    pub fn kernel(grid: u32, block: u32) -> Self {
        Self(Mover::Kernel { grid, block })
    }

    /// The store kernel's grid and block; `None` for the copy engine.
    pub fn grid_block(self) -> Option<(u32, u32)> {
        match self.0 {
            Mover::Kernel { grid, block } => Some((grid, block)),
            Mover::CopyEngine => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::column::Column;

    #[test]
    fn columns_name_grid_and_block_and_read_back() {
        let configs = [IpcConfig::kernel(128, 256), IpcConfig::kernel(1, 32), IpcConfig::COPY_ENGINE];
        let columns: Vec<String> = configs.iter().map(|c| Column::Ipc(*c).to_string()).collect();
        assert_eq!(columns, ["IPC 128x256", "IPC 1x32", "CE"]);
        let read = |label: &str| serde_json::from_value::<Column>(label.into()).expect("a label").ipc();
        for (config, column) in configs.iter().zip(&columns) {
            assert_eq!(read(column), Some(*config));
        }
        assert_eq!(read("IPC 12"), None);
        assert_eq!(read("SinglePin"), None);
    }
}
