//! `efatop write`: one-sided RDMA WRITE with immediate data, rank 0 → ranks 1..N-1 (seed `write.md`).

use efatop_proto::column::{Column, Layout, Memory};
use efatop_proto::results::{RankPlacement, RunMetadata};
use efatop_experiments::write;
use efatop_experiments::World;

use super::{Descriptor, Planned};
use crate::cli::{CommonArgs, WriteArgs};

impl WriteArgs {
    pub fn configs(&self) -> Vec<Layout> {
        self.configs.iter().map(|c| Layout::from(*c)).collect()
    }

    /// The host-memory columns (the experiment names them again once its memory is set up).
    pub fn columns(&self) -> Vec<Column> {
        self.configs().iter().map(|c| Column::write(*c, Memory::Host)).collect()
    }
}

impl Descriptor for WriteArgs {
    fn kind(&self) -> efatop_proto::Experiment {
        efatop_proto::Experiment::Write
    }

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    /// A configuration given twice would be measured twice and shown once.
    fn check(&self) -> Result<(), String> {
        match super::given_twice(&self.configs) {
            Some(config) => Err(format!("--configs: {config} is given twice; name each configuration once")),
            None => Ok(()),
        }
    }

    fn columns(&self) -> Vec<Column> {
        WriteArgs::columns(self)
    }

    fn plan<'a>(&'a self, world: &'a World<'a>, _: &[RankPlacement], _: &mut RunMetadata) -> Planned<'a> {
        let configs = self.configs();
        Box::new(move |sweep, observer| write::run(world, sweep, &configs, observer).map(|_| ()))
    }
}
