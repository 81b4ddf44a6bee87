//! The MPI bootstrap (rsmpi): allgather of variable-length records, in two collectives.

use mpi::datatype::PartitionMut;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives};

use efatop_experiments::{Bootstrap, ExperimentError};

pub struct MpiBootstrap {
    world: SimpleCommunicator,
    // Finalizes MPI when dropped, after the communicator above.
    _universe: Universe,
}

impl MpiBootstrap {
    /// MPI at the level of threading a rank's process has: several threads (sampler, collector, signals,
    /// rank 0's loop), of which only the rank's thread, the one that initializes MPI, ever calls it
    /// (`MPI_THREAD_FUNNELED`; `MPI_THREAD_SINGLE` promises one thread in the process).
    pub fn initialize() -> Result<Self, ExperimentError> {
        let (universe, provided) = mpi::initialize_with_threading(mpi::Threading::Funneled)
            .ok_or_else(|| ExperimentError::Bootstrap("MPI was already initialized in this process".into()))?;
        if provided < mpi::Threading::Funneled {
            return Err(ExperimentError::Bootstrap(format!(
                "this MPI gives {provided:?} threading; efatop needs MPI_THREAD_FUNNELED (only the rank's thread calls MPI, beside others)"
            )));
        }
        Ok(Self { world: universe.world(), _universe: universe })
    }
}

impl Bootstrap for MpiBootstrap {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn size(&self) -> usize {
        self.world.size() as usize
    }

    fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>, ExperimentError> {
        self.gather(data, None)
    }

    /// Non-blocking collectives (`MPI_Iallgather`/`MPI_Iallgatherv`) tested in a loop that calls `idle`
    /// between tests, so a rank on a manual-progress provider keeps reading its completion queues.
    fn allgather_while(&self, data: &[u8], idle: &mut dyn FnMut()) -> Result<Vec<Vec<u8>>, ExperimentError> {
        self.gather(data, Some(idle))
    }

    fn barrier(&self) -> Result<(), ExperimentError> {
        self.world.barrier();
        Ok(())
    }
}

impl MpiBootstrap {
    /// Variable-length allgather in two collectives (lengths, then records). With `idle`: non-blocking
    /// collectives (`MPI_Iallgather`/`MPI_Iallgatherv`) tested in a loop that calls it between tests, so a
    /// rank on a manual-progress provider keeps reading its completion queues; without, the plain
    /// blocking ones.
    fn gather(&self, data: &[u8], mut idle: Option<&mut dyn FnMut()>) -> Result<Vec<Vec<u8>>, ExperimentError> {
        let size = self.size();
        let len = i32::try_from(data.len()).map_err(|_| ExperimentError::Bootstrap("record over 2 GiB".into()))?;
        let mut lengths = vec![0i32; size];
        mpi::request::scope(|scope| {
            complete_while(self.world.immediate_all_gather_into(scope, &len, &mut lengths[..]), &mut idle);
        });
        let displacements: Vec<i32> = lengths
            .iter()
            .scan(0i32, |offset, len| {
                let start = *offset;
                *offset += len;
                Some(start)
            })
            .collect();
        let total: usize = lengths.iter().map(|l| *l as usize).sum();
        if total == 0 {
            // Nothing to move (a barrier-like round); some MPIs reject zero-length varcount buffers.
            return Ok(vec![Vec::new(); size]);
        }
        let mut gathered = vec![0u8; total];
        {
            let mut partition = PartitionMut::new(&mut gathered[..], &lengths[..], &displacements[..]);
            mpi::request::scope(|scope| {
                complete_while(self.world.immediate_all_gather_varcount_into(scope, data, &mut partition), &mut idle);
            });
        }
        Ok(lengths
            .iter()
            .zip(&displacements)
            .map(|(len, start)| gathered[*start as usize..(*start + *len) as usize].to_vec())
            .collect())
    }
}

/// Tests `request` until it completes, calling `idle` between tests.
/// Without `idle`, waits for it (blocking, as MPI's blocking collectives do).
fn complete_while<'a, D: ?Sized, S: mpi::request::Scope<'a>>(
    mut request: mpi::request::Request<'a, D, S>,
    idle: &mut Option<&mut dyn FnMut()>,
) {
    let Some(idle) = idle else {
        request.wait_without_status();
        return;
    };
    loop {
        match request.test() {
            Ok(_) => return,
            Err(pending) => {
                request = pending;
                idle();
            }
        }
    }
}
