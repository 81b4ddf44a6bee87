//! `efatop write`: one-sided RDMA WRITE with immediate data, rank 0 → ranks 1..N-1 (seed `write.md`).

use clap::{Args, ValueEnum};
use efatop_proto::results::{RankPlacement, RunMetadata};
use efatop_experiments::write::{self, WriteConfig};
use efatop_experiments::World;

use super::{CommonArgs, Descriptor, Planned};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WriteConfigArg {
    Single,
    Multi,
    Roundrobin,
}

impl From<WriteConfigArg> for WriteConfig {
    fn from(arg: WriteConfigArg) -> Self {
        match arg {
            WriteConfigArg::Single => WriteConfig::Single,
            WriteConfigArg::Multi => WriteConfig::Multi,
            WriteConfigArg::Roundrobin => WriteConfig::RoundRobin,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct WriteArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Configurations to run, in this order
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [WriteConfigArg::Single, WriteConfigArg::Multi, WriteConfigArg::Roundrobin])]
    pub configs: Vec<WriteConfigArg>,
}

impl WriteArgs {
    pub fn configs(&self) -> Vec<WriteConfig> {
        self.configs.iter().map(|c| WriteConfig::from(*c)).collect()
    }

    /// The host-memory column names (the experiment renames them once its memory is set up).
    pub fn columns(&self) -> Vec<String> {
        self.configs().iter().map(|c| c.column("Pin")).collect()
    }
}

impl Descriptor for WriteArgs {
    fn name(&self) -> &'static str {
        "write"
    }

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn columns(&self) -> Vec<String> {
        WriteArgs::columns(self)
    }

    fn plan<'a>(&'a self, world: &'a World<'a>, _: &[RankPlacement], _: &mut RunMetadata) -> Planned<'a> {
        let configs = self.configs();
        Box::new(move |sweep, observer| write::run(world, sweep, &configs, observer).map(|_| ()))
    }
}
