//! How a rank finds the others: under mpirun (or srun with `--mpi=pmi2`/`pmix`) through MPI, under plain
//! srun from Slurm's environment ([`slurm`]), under `efatop run` through the launcher's rendezvous socket.
//! Either way only setup and round agreement travel here, never benchmark data.

pub mod local;
pub mod mpi;
pub mod munge;
pub mod slurm;

use efatop_experiments::{Bootstrap, ExperimentError};
use efatop_auth::Source;

use efatop_auth::secret::Keyed;

/// Environment variables `efatop run` sets for the ranks it starts.
pub const ENV_RENDEZVOUS: &str = "EFATOP_RENDEZVOUS";
pub const ENV_RANK: &str = "EFATOP_RANK";
pub const ENV_WORLD_SIZE: &str = "EFATOP_WORLD_SIZE";

/// Chooses the bootstrap instead of the environment: `mpi`, `slurm` or `none` (a world of one).
pub const ENV_BOOTSTRAP: &str = "EFATOP_BOOTSTRAP";

/// True when an MPI process manager (`OpenMPI`'s, a `PMIx` or PMI server: mpirun, Hydra, srun with
/// `--mpi=pmi2` or `--mpi=pmix`) started this process.
pub fn under_mpi_launcher() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"].iter().any(|name| std::env::var_os(name).is_some())
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

/// The bootstrap this process was started with, and the run's secret (`efatop_auth::secret`).
pub type Joined = (Box<dyn Bootstrap>, Keyed);

/// Picks the bootstrap this process was started with, and learns the run's secret through it.
pub fn connect() -> Result<Joined, ExperimentError> {
    let keyed = |made: Result<Keyed, String>| made.map_err(|why| ExperimentError::Bootstrap(format!("the run's secret: {why}")));
    if let Some(address) = std::env::var_os(ENV_RENDEZVOUS) {
        let rank = env_number(ENV_RANK)?;
        let size = env_number(ENV_WORLD_SIZE)?;
        let secret = keyed(efatop_auth::secret::from_launcher().unwrap_or_else(|| Err(format!("{} is not set", efatop_auth::secret::ENV_RUN_SECRET))))?;
        let bootstrap = local::LocalBootstrap::connect(&address.to_string_lossy(), rank, size, &secret.secret)?;
        return Ok((Box::new(bootstrap), secret));
    }
    let slurm_step = || slurm::SlurmStep::from_env(|name| std::env::var(name).ok());
    match std::env::var(ENV_BOOTSTRAP).ok().as_deref() {
        Some("mpi") => return mpi_bootstrap(),
        Some("none") => return Ok((Box::new(Alone), keyed(Keyed::generate(Source::Process))?)),
        Some("slurm") => {
            let step = slurm_step()
                .ok_or_else(|| ExperimentError::Bootstrap(format!("{ENV_BOOTSTRAP}=slurm: not a task of an srun step (no SLURM_STEP_ID)")))?;
            return slurm_bootstrap(step);
        }
        Some(other) => return Err(ExperimentError::Bootstrap(format!("{ENV_BOOTSTRAP}={other}: use mpi, slurm or none"))),
        None => {}
    }
    if under_mpi_launcher() {
        return mpi_bootstrap();
    }
    // srun without an MPI plugin: Slurm's environment says who is who.
    if let Some(step) = slurm_step() {
        return slurm_bootstrap(step);
    }
    Ok((Box::new(Alone), keyed(Keyed::generate(Source::Process))?))
}

/// MPI: rank 0 makes the secret and every rank takes it from the first allgather.
fn mpi_bootstrap() -> Result<Joined, ExperimentError> {
    let bootstrap = mpi::MpiBootstrap::initialize()?;
    let mine = if bootstrap.rank() == 0 {
        Keyed::generate(Source::Mpi).map_err(ExperimentError::Bootstrap)?.secret.as_bytes().to_vec()
    } else {
        Vec::new()
    };
    let gathered = bootstrap.allgather(&mine)?;
    let bytes: [u8; 32] = gathered
        .first()
        .and_then(|first| first.as_slice().try_into().ok())
        .ok_or_else(|| ExperimentError::Bootstrap("rank 0 broadcast no run secret".into()))?;
    Ok((Box::new(bootstrap), Keyed { secret: efatop_auth::Secret::from_bytes(bytes), source: Source::Mpi }))
}

fn slurm_bootstrap(step: Result<slurm::SlurmStep, String>) -> Result<Joined, ExperimentError> {
    let step = step.map_err(|why| ExperimentError::Bootstrap(format!("Slurm bootstrap: {why}")))?;
    if step.size == 1 {
        let secret = Keyed::generate(Source::Process).map_err(ExperimentError::Bootstrap)?;
        return Ok((Box::new(Alone), secret));
    }
    let (bootstrap, secret) = slurm::connect(&step)?;
    Ok((Box::new(bootstrap), secret))
}

fn env_number(name: &str) -> Result<usize, ExperimentError> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| ExperimentError::Bootstrap(format!("{name} is missing or not a number")))
}
