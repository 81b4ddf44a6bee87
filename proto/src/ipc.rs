//! The ipc experiment's columns: how rank 0 moves bytes into its peer GPU. [`crate::column::Column::Ipc`]
//! names them (`IPC <grid>x<block>`, `kernel (tuned)` or `CE`) as tables and reports show them.

/// How the writer moves its bytes into the peer's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpcConfig(pub Mover);

impl IpcConfig {
    pub const COPY_ENGINE: IpcConfig = IpcConfig(Mover::CopyEngine);
    pub const TUNED: IpcConfig = IpcConfig(Mover::Tuned);
    pub const TUNED_COLUMN: &'static str = "kernel (tuned)";

    pub fn kernel(grid: u32, block: u32) -> Self {
        Self(Mover::Kernel { grid, block })
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
}
