//! The run's JSON results file: valid JSON from the moment it exists, replaced atomically after every
//! measurement, and told how the run ended by rank 0's loop, which sees every ending.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use efatop_experiments::ExperimentError;
use efatop_proto::files::write_atomically;
use efatop_proto::results::RunResults;
use time::OffsetDateTime;

/// The results file, replaced atomically after every measurement: written to a fresh, unpredictably named
/// sibling, then renamed over the path; never through a link ([`efatop_proto::files`]).
pub struct ResultsFile {
    pub path: PathBuf,
}

/// Where a run's results go without `--out`.
pub const DEFAULT_RESULTS_DIR: &str = "efatop-results";

/// `efatop-results/<experiment>-<UTC date>T<time>Z-<pid>.json`: sortable, and two runs started in the same
/// second do not overwrite each other.
pub fn default_results_path(experiment: &str, now: SystemTime) -> PathBuf {
    let at = OffsetDateTime::from(now);
    let stamp = format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    );
    Path::new(DEFAULT_RESULTS_DIR).join(format!("{experiment}-{stamp}-{}.json", std::process::id()))
}

impl ResultsFile {
    /// Creates the file holding `first` (valid JSON from the moment the file exists).
    pub fn create(path: &Path, make_folder: bool, first: &RunResults) -> Result<Self, ExperimentError> {
        if let Some(dir) = path.parent().filter(|d| make_folder && !d.as_os_str().is_empty() && !d.exists()) {
            std::fs::create_dir_all(dir).map_err(|e| ExperimentError::InvalidInput {
                flag: "--out",
                message: format!("cannot create {}: {e}", dir.display()),
            })?;
        }
        let json = serde_json::to_vec_pretty(first).map_err(|e| ExperimentError::Bootstrap(e.to_string()))?;
        write_atomically(path, &json).map_err(|e| ExperimentError::InvalidInput { flag: "--out", message: e.to_string() })?;
        Ok(Self { path: path.to_path_buf() })
    }

    pub fn save(&self, results: &RunResults) -> Result<(), ExperimentError> {
        let failed = |e: &dyn std::fmt::Display| ExperimentError::Bootstrap(format!("saving {}: {e}", self.path.display()));
        let json = serde_json::to_vec_pretty(results).map_err(|e| failed(&e))?;
        write_atomically(&self.path, &json).map_err(|e| failed(&e))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn default_results_names_sort_by_time_in_utc() {
        let at = |s: u64| super::default_results_path("write", std::time::UNIX_EPOCH + std::time::Duration::from_secs(s));
        let pid = std::process::id();
        assert_eq!(at(0), std::path::Path::new("efatop-results").join(format!("write-19700101T000000Z-{pid}.json")));
        // 2026-11-23 12:38:46 UTC, and a leap day (2024-02-29, day 19 782 since 1970).
        assert_eq!(at(1_795_437_526).file_name().and_then(|n| n.to_str()), Some(format!("write-20261123T123846Z-{pid}.json").as_str()));
        assert_eq!(at(19_782 * 86_400 + 1).file_name().and_then(|n| n.to_str()), Some(format!("write-20240229T000001Z-{pid}.json").as_str()));
    }
}
