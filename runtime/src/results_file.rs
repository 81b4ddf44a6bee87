//! The run's JSON results file: valid JSON from the moment it exists, replaced atomically after every
//! measurement, and told how the run ended by rank 0's loop, which sees every ending.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use efatop_experiments::ExperimentError;
use efatop_files::write_atomically;
use efatop_proto::results::RunResults;
use time::OffsetDateTime;

/// The results file, replaced atomically after every measurement: written to a fresh, unpredictably named
/// sibling, then renamed over the path; never through a link ([`efatop_files`]).
pub struct ResultsFile {
    pub path: PathBuf,
}

/// Where a run's results go without `--out`.
pub const DEFAULT_RESULTS_DIR: &str = "efatop-results";

/// The default results folder, checked before any rank starts (the launcher, or rank 0 under MPI and
/// Slurm) and again when rank 0 makes it: it must be a folder of this user's own, and not a symbolic link,
/// since it is often made in a shared directory where another user could have left either, to receive (or
/// later replace) the run's results. A folder that is not there yet is fine. The one-line reason otherwise.
pub fn check_default_folder(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let named = || format!("./{}", dir.display());
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(format!("the default results folder {}: {err}; name a results file with --out FILE", named())),
    };
    let me = nix::unistd::geteuid().as_raw();
    if meta.file_type().is_symlink() {
        Err(format!(
            "the default results folder {} is a symbolic link; efatop never writes through one (remove it, or name a results file with --out FILE)",
            named()
        ))
    } else if !meta.is_dir() {
        Err(format!("the default results folder {} exists and is not a folder; remove it, or name a results file with --out FILE", named()))
    } else if meta.uid() != me {
        Err(format!(
            "the default results folder {} belongs to uid {}, not to this user (uid {me}): its owner could replace the results; \
             remove it, or name a results file with --out FILE",
            named(),
            meta.uid()
        ))
    } else {
        Ok(())
    }
}

/// Makes the default results folder when it is not there, readable by this user alone (0700), never
/// through a link (`mkdir` does not follow one), then checks it as [`check_default_folder`] does (another
/// user may have made it meanwhile).
fn make_default_folder(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    check_default_folder(dir)?;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(format!("cannot create the default results folder ./{}: {err}", dir.display())),
    }
    check_default_folder(dir)
}

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
    /// `make_folder`: `path` is in the default folder, made (owner-only) when it is not there, and refused
    /// when it is a link or another user's ([`check_default_folder`]).
    pub fn create(path: &Path, make_folder: bool, first: &RunResults) -> Result<Self, ExperimentError> {
        if let Some(dir) = path.parent().filter(|d| make_folder && !d.as_os_str().is_empty()) {
            make_default_folder(dir).map_err(ExperimentError::Unsupported)?;
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
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_default_folder_is_made_owner_only_and_a_link_or_a_file_there_is_refused() {
        let scratch = tempfile::tempdir().expect("dir");
        let dir = scratch.path().join(super::DEFAULT_RESULTS_DIR);
        super::make_default_folder(&dir).expect("made");
        assert_eq!(std::fs::metadata(&dir).expect("made").permissions().mode() & 0o777, 0o700);
        super::make_default_folder(&dir).expect("ours, made already");
        std::fs::remove_dir(&dir).expect("remove");
        let elsewhere = scratch.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).expect("dir");
        std::os::unix::fs::symlink(&elsewhere, &dir).expect("link");
        let refused = super::make_default_folder(&dir).expect_err("a link");
        assert!(refused.contains("symbolic link"), "{refused}");
        std::fs::remove_file(&dir).expect("remove");
        std::fs::write(&dir, b"").expect("file");
        assert!(super::check_default_folder(&dir).expect_err("a file").contains("not a folder"));
    }

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
