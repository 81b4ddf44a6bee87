//! How a rank finds the others: under mpirun/srun through MPI, under `efatop run` through the launcher's
//! rendezvous socket. Either way only setup and round agreement travel here, never benchmark data.

pub mod local;
pub mod mpi;

use efatop_experiments::{Bootstrap, ExperimentError};

/// Environment variables `efatop run` sets for the ranks it starts.
pub const ENV_RENDEZVOUS: &str = "EFATOP_RENDEZVOUS";
pub const ENV_RANK: &str = "EFATOP_RANK";
pub const ENV_WORLD_SIZE: &str = "EFATOP_WORLD_SIZE";

/// True when a process manager (`OpenMPI`, `PMIx`, Slurm, Hydra) started this process.
pub fn under_mpi_launcher() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "SLURM_STEP_ID"]
        .iter()
        .any(|name| std::env::var_os(name).is_some())
}

/// This process's rank where its launcher says it before any bootstrap (`efatop run`, `OpenMPI`, `PMIx`,
/// Hydra, Slurm); `None` where none does.
pub fn rank_from_env() -> Option<usize> {
    [ENV_RANK, "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"]
        .iter()
        .find_map(|name| std::env::var(name).ok()?.parse().ok())
}

/// A world of one: what a plain `efatop write` without a launcher gets.
pub struct Alone;

impl Bootstrap for Alone {
    fn rank(&self) -> usize {
        0
    }

    fn size(&self) -> usize {
        1
    }

    fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>, ExperimentError> {
        Ok(vec![data.to_vec()])
    }
}

/// Picks the bootstrap this process was started with.
pub fn connect() -> Result<Box<dyn Bootstrap>, ExperimentError> {
    if let Some(address) = std::env::var_os(ENV_RENDEZVOUS) {
        let rank = env_number(ENV_RANK)?;
        let size = env_number(ENV_WORLD_SIZE)?;
        return Ok(Box::new(local::LocalBootstrap::connect(&address.to_string_lossy(), rank, size)?));
    }
    if under_mpi_launcher() {
        return Ok(Box::new(mpi::MpiBootstrap::initialize()?));
    }
    Ok(Box::new(Alone))
}

fn env_number(name: &str) -> Result<usize, ExperimentError> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| ExperimentError::Bootstrap(format!("{name} is missing or not a number")))
}
