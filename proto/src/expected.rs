//! A measurement against its instance type's published reference figure, as the results file, the
//! tables and the dashboard carry it ([`Expected`]). The figures themselves and the rule that holds a
//! measurement against one are the report's (`efatop_report::reference`).

use serde::{Deserialize, Serialize};

/// A measurement under this share of its expected figure is marked (`*` in text, red in the dashboard)
/// and, in `efatop compare --expected` with no `--threshold`, counts as below expectation.
pub const BELOW_PERCENT: f64 = 90.0;

/// A measurement against its instance type's figure, as the results file keeps it: the figure, its share
/// and its source; or why there is none (`p6-b300.48xlarge: no published figure for write`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Expected {
    Figure {
        /// The reference figure, in Gbps.
        gbps: f64,
        /// The measured Gbps as a percentage of it.
        percent: f64,
        /// Where the figure was published and for what (`seeds/write.md: p5.48xlarge SinglePin 1G, ...`).
        source: String,
    },
    Missing {
        /// Why no figure applies, naming the instance type.
        missing: String,
    },
}

impl Expected {
    pub fn percent(&self) -> Option<f64> {
        match self {
            Expected::Figure { percent, .. } => Some(*percent),
            Expected::Missing { .. } => None,
        }
    }

    /// Under [`BELOW_PERCENT`] of its figure.
    pub fn below(&self) -> bool {
        self.percent().is_some_and(|percent| percent < BELOW_PERCENT)
    }
}
