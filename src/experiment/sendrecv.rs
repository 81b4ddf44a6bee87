//! `efatop sendrecv`: two-sided SEND/RECV ping-pong between rank 0 and each rank k (seed `sendrecv.md`).

use efatop_proto::results::{RankPlacement, RunMetadata};
use efatop_experiments::{World, sendrecv};
use efatop_proto::column::{Column, Memory};
use efatop_fabric::Capabilities;

use super::{Descriptor, Planned};
use crate::cli::{CommonArgs, SendrecvArgs};

impl Descriptor for SendrecvArgs {
    fn kind(&self) -> efatop_proto::Experiment {
        efatop_proto::Experiment::Sendrecv
    }

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::MESSAGES
    }

    fn columns(&self) -> Vec<Column> {
        vec![Column::SendRecv { memory: Memory::Host }]
    }

    fn plan<'a>(&'a self, world: &'a World<'a>, _: &[RankPlacement], _: &mut RunMetadata) -> Planned<'a> {
        Box::new(move |sweep, observer| sendrecv::run(world, sweep, observer).map(|_| ()))
    }
}
