//! Which experiment a run is, as every crate matches on it. Files, streams and JSON lines carry its
//! name (`"write"`, `"ipc"`, ...), which is also the subcommand's.

use std::fmt;

use serde::{Deserialize, Serialize};

/// An efatop run: one of the benchmarks, or a monitor that serves or records its reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Experiment {
    Write,
    Sendrecv,
    Alltoall,
    Proxy,
    Ipc,
    Sweep,
    Queue,
    /// `efatop monitor --serve/--record`: no benchmark, a node's reads.
    Monitor,
    /// Not known yet (a viewer before the run's first event), or a name this efatop does not know.
    #[default]
    #[serde(rename = "", other)]
    Unknown,
}

impl Experiment {
    /// The subcommand's name, and what files and JSON lines say; empty for [`Experiment::Unknown`].
    pub fn name(self) -> &'static str {
        match self {
            Experiment::Write => "write",
            Experiment::Sendrecv => "sendrecv",
            Experiment::Alltoall => "alltoall",
            Experiment::Proxy => "proxy",
            Experiment::Ipc => "ipc",
            Experiment::Sweep => "sweep",
            Experiment::Queue => "queue",
            Experiment::Monitor => "monitor",
            Experiment::Unknown => "",
        }
    }
}

impl fmt::Display for Experiment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_travel_as_they_always_have() {
        for experiment in [Experiment::Write, Experiment::Alltoall, Experiment::Ipc, Experiment::Monitor, Experiment::Unknown] {
            let json = serde_json::to_string(&experiment).expect("serializes");
            assert_eq!(json, format!("\"{}\"", experiment.name()));
            assert_eq!(serde_json::from_str::<Experiment>(&json).expect("reads back"), experiment);
        }
        assert_eq!(serde_json::from_str::<Experiment>("\"fleet\"").expect("reads"), Experiment::Unknown);
        assert_eq!(Experiment::Sendrecv.to_string(), "sendrecv");
    }
}
