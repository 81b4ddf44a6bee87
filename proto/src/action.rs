//! What to do about a finding: one word from a small vocabulary, from least to most drastic, that the
//! systems which take nodes out of service act on. `reset`, `reboot` and `replace` imply draining the
//! node first; `watch` keeps it in service. docs/check.md maps these words to awsome-distributed-training's,
//! `SageMaker` `HyperPod`'s and NVIDIA `NVSentinel`'s.

use serde::{Deserialize, Serialize};

/// The action a finding calls for; a node's is the strongest of its findings' ([`Action::max`] order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Nothing to do.
    #[default]
    None,
    /// Keep the node in service and look again (a counter that grew, an application's fault).
    Watch,
    /// Drain, then reset the GPU (or reload its driver): the fault clears without a reboot.
    Reset,
    /// Drain, then reboot the node: a driver, a link or a device that only a restart brings back.
    Reboot,
    /// Drain and replace the node (or the part): hardware that a reboot does not fix.
    Replace,
}

impl Action {
    pub const ALL: [Action; 5] = [Action::None, Action::Watch, Action::Reset, Action::Reboot, Action::Replace];

    /// The word in JSON, the table and the one-line contracts.
    pub fn name(self) -> &'static str {
        match self {
            Action::None => "none",
            Action::Watch => "watch",
            Action::Reset => "reset",
            Action::Reboot => "reboot",
            Action::Replace => "replace",
        }
    }

    /// The node must be drained before the action: `reset`, `reboot`, `replace`.
    pub fn drains(self) -> bool {
        self >= Action::Reset
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_order_from_none_to_replace_and_drain_from_reset() {
        assert!(Action::ALL.windows(2).all(|pair| pair[0] < pair[1]));
        assert_eq!(Action::ALL.iter().filter(|a| a.drains()).count(), 3);
        assert_eq!(serde_json::to_string(&Action::Replace).unwrap(), "\"replace\"");
        assert_eq!(Action::ALL.map(Action::name), ["none", "watch", "reset", "reboot", "replace"]);
    }
}
