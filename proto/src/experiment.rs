//! Which experiment a run is, as every crate matches on it. Files, streams and JSON lines carry its
//! name (`"write"`, `"ipc"`, ...), which is also the subcommand's.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An efatop run: one of the benchmarks, or a monitor that serves or records its reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
    /// Not known yet (a viewer before the run's first event): no name.
    #[default]
    Unknown,
    /// A name this efatop does not know (a file from an older or newer one, `all2all`), kept as it is.
    Other(String),
}

impl Experiment {
    /// The subcommand's name, and what files and JSON lines say; empty for [`Experiment::Unknown`].
    pub fn name(&self) -> &str {
        match self {
            Experiment::Other(name) => name,
            known => known.known_name().unwrap_or_default(),
        }
    }

    /// The name of an experiment this efatop knows; `None` for [`Experiment::Other`].
    pub fn known_name(&self) -> Option<&'static str> {
        Some(match self {
            Experiment::Write => "write",
            Experiment::Sendrecv => "sendrecv",
            Experiment::Alltoall => "alltoall",
            Experiment::Proxy => "proxy",
            Experiment::Ipc => "ipc",
            Experiment::Sweep => "sweep",
            Experiment::Queue => "queue",
            Experiment::Monitor => "monitor",
            Experiment::Unknown => "",
            Experiment::Other(_) => return None,
        })
    }

    /// Today's experiment for a name an older efatop wrote (`all2all`, the seed's name, is `alltoall`),
    /// with that old name; `None` for every other experiment. Readers that take a file's old name for
    /// today's say so ([`OLD_NAMES`]).
    pub fn renamed(&self) -> Option<(Experiment, &'static str)> {
        let Experiment::Other(name) = self else { return None };
        OLD_NAMES.iter().find(|(old, _)| old == name).map(|(old, today)| (today.clone(), *old))
    }

    /// The experiment a file's name stands for.
    fn from_name(name: &str) -> Experiment {
        const KNOWN: [Experiment; 9] = [
            Experiment::Write,
            Experiment::Sendrecv,
            Experiment::Alltoall,
            Experiment::Proxy,
            Experiment::Ipc,
            Experiment::Sweep,
            Experiment::Queue,
            Experiment::Monitor,
            Experiment::Unknown,
        ];
        KNOWN.into_iter().find(|known| known.name() == name).unwrap_or_else(|| Experiment::Other(name.to_string()))
    }
}

/// Experiment names older efatops wrote in results files, and the experiment each is today. `all2all`:
/// the first `efatop report` read all-to-all runs under the seed's name (`seeds/all2all.md`) before the
/// subcommand was named `alltoall`; its configurations (`SingleDMA`, `MultiDMA`, ...) are today's labels.
pub const OLD_NAMES: [(&str, Experiment); 1] = [("all2all", Experiment::Alltoall)];

impl Serialize for Experiment {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Experiment {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Experiment::from_name(&String::deserialize(deserializer)?))
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
        for experiment in [Experiment::Write, Experiment::Alltoall, Experiment::Ipc, Experiment::Monitor, Experiment::Unknown, Experiment::Other("all2all".into())] {
            let json = serde_json::to_string(&experiment).expect("serializes");
            assert_eq!(json, format!("\"{}\"", experiment.name()));
            assert_eq!(serde_json::from_str::<Experiment>(&json).expect("reads back"), experiment);
        }
        assert_eq!(serde_json::from_str::<Experiment>("\"fleet\"").expect("reads"), Experiment::Other("fleet".into()));
        assert_eq!(Experiment::Sendrecv.to_string(), "sendrecv");
    }

    #[test]
    fn an_old_name_is_told_apart_and_maps_to_todays() {
        assert_eq!(Experiment::Other("all2all".into()).renamed(), Some((Experiment::Alltoall, "all2all")));
        assert_eq!(Experiment::Other("fleet".into()).renamed(), None);
        assert_eq!(Experiment::Alltoall.renamed(), None);
    }
}
