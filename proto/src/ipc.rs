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
