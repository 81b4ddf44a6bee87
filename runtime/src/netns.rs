//! Ranks of an emulated cluster live in network namespaces (`efatop run --netns`). A rank joins the
//! launcher's rendezvous first, then moves its main thread into its namespace, where libfabric sees that
//! node's NICs. Telemetry sockets are made back in the original namespace, where rank 0's collector is.

use std::fs::File;

use nix::sched::{CloneFlags, setns};

use efatop_experiments::ExperimentError;

/// The namespace the process started in, kept open so the thread can step back into it.
pub struct Namespaces {
    home: File,
    node: File,
}

impl Namespaces {
    /// Moves the calling thread into `/var/run/netns/<name>`.
    pub fn enter(name: &str) -> Result<Self, ExperimentError> {
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            ExperimentError::Unsupported(format!("--netns {name}: {what}: {e} (entering a namespace needs root)"))
        };
        let home = File::open("/proc/thread-self/ns/net").map_err(|e| failed("cannot open this thread's namespace", &e))?;
        let node = File::open(format!("/var/run/netns/{name}")).map_err(|e| failed("no such namespace", &e))?;
        setns(&node, CloneFlags::CLONE_NEWNET).map_err(|e| failed("setns", &e))?;
        Ok(Self { home, node })
    }

    /// Runs `f` on this thread in the original namespace, then comes back.
    pub fn at_home<T>(&self, f: impl FnOnce() -> T) -> T {
        let _ = setns(&self.home, CloneFlags::CLONE_NEWNET);
        let result = f();
        let _ = setns(&self.node, CloneFlags::CLONE_NEWNET);
        result
    }
}

/// Runs `f` in the original namespace when the rank has moved into a node's, else just runs it.
pub fn at_home<T>(namespaces: Option<&Namespaces>, f: impl FnOnce() -> T) -> T {
    match namespaces {
        Some(namespaces) => namespaces.at_home(f),
        None => f(),
    }
}
