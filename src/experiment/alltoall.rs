//! `efatop alltoall`: every rank writes its buffer to every other rank at once, with per-pair matrices
//! (seed `all2all.md`). It takes `write`'s flags.

use efatop_experiments::alltoall;
use efatop_proto::results::{RankPlacement, RunMetadata};
use efatop_experiments::World;

use super::{Descriptor, Planned};
use crate::cli::{AlltoallArgs, CommonArgs};

impl Descriptor for AlltoallArgs {
    fn kind(&self) -> efatop_proto::Experiment {
        efatop_proto::Experiment::Alltoall
    }

    fn common(&self) -> &CommonArgs {
        &self.write.common
    }

    fn check(&self) -> Result<(), String> {
        self.write.check()?;
        let window = self.write.common.window;
        if window > 1 {
            return Err(format!(
                "--window {window}: alltoall times each iteration as a whole (every rank's writes and immediates), so it takes 1"
            ));
        }
        Ok(())
    }

    fn columns(&self) -> Vec<efatop_proto::Column> {
        self.write.columns()
    }

    fn pair_matrices(&self) -> bool {
        true
    }

    fn plan<'a>(&'a self, world: &'a World<'a>, _: &[RankPlacement], _: &mut RunMetadata) -> Planned<'a> {
        let configs = self.write.configs();
        Box::new(move |sweep, observer| alltoall::run(world, sweep, &configs, observer).map(|_| ()))
    }
}
