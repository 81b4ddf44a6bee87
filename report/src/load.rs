//! Reading a results file back, with errors that name the file.

use std::path::{Path, PathBuf};

use efatop_proto::{Experiment, RunResults};

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{}: cannot read: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The reader's own text says what is wrong (`not an efatop results file: …` for bad JSON).
    #[error("{}: {source}", .path.display())]
    Parse {
        path: PathBuf,
        source: efatop_proto::results::ResultsFileError,
    },
    #[error("{}: cannot write: {source}", .path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An output path refused (a link, not a regular file) or not written ([`efatop_proto::files`]).
    #[error("{0}")]
    Output(#[from] efatop_proto::files::OutputError),
    #[error("{}: {message}", .path.display())]
    Plot { path: PathBuf, message: String },
    /// Plot text needs a TrueType font file; none was found where we looked.
    #[error("no font for plot text: {0}")]
    Font(String),
    /// Comparing a write run with a sendrecv run compares different operations; refused unless asked for.
    #[error(
        "{} is {} `{baseline_experiment}` run and {} {} `{candidate_experiment}` run; compare runs of one \
         experiment, or pass --allow-different to compare them anyway",
        .baseline.display(),
        efatop_proto::words::article(.baseline_experiment.name()),
        .candidate.display(),
        efatop_proto::words::article(.candidate_experiment.name())
    )]
    DifferentExperiments {
        baseline: PathBuf,
        baseline_experiment: Experiment,
        candidate: PathBuf,
        candidate_experiment: Experiment,
    },
    /// A gate that compares nothing would pass whatever the candidate did.
    #[error("{} and {} have no configuration and size in common: nothing to compare", .baseline.display(), .candidate.display())]
    NothingInCommon {
        baseline: PathBuf,
        candidate: PathBuf,
    },
}

/// Reads and parses a results file written by `efatop run ... --out FILE`.
pub fn load_results(path: &Path) -> Result<RunResults, ReportError> {
    let bytes = std::fs::read(path).map_err(|source| ReportError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    // The reader the fuzzer exercises: JSON shape, and what the tables rely on (listed configurations,
    // one measurement per configuration and size, square pair matrices).
    RunResults::from_json(&bytes).map_err(|source| ReportError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_named() {
        let err = load_results(Path::new("/nonexistent/run.json")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("/nonexistent/run.json: cannot read:"),
            "{text}"
        );
    }

    #[test]
    fn bad_json_is_named_with_its_position() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broken.json");
        std::fs::write(&path, "{\"metadata\": ").unwrap();
        let text = load_results(&path).unwrap_err().to_string();
        assert!(
            text.starts_with(&format!("{}: not an efatop results file:", path.display())),
            "{text}"
        );
        assert!(text.contains("line 1"), "{text}");
        assert_eq!(text.matches("not an efatop results file").count(), 1, "said once: {text}");
    }
}
