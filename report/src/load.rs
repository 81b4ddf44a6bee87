//! Reading a results file back, with errors that name the file: the one way `efatop report`, `compare`
//! and `compare --expected` read one. The file is read within a cap ([`MAX_RESULTS_BYTES`]), only if it is
//! a regular file, and only if its figures are ones a run can have measured ([`crate::figures`]); an
//! experiment under its old name is read as today's, and said so. [`parse`] is the bytes' part, which
//! every reader of a results file goes through.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use efatop_proto::sizes::format_size;
use efatop_proto::{Experiment, RunResults};

/// The most of a results file that is read: the cap `efatop replay` holds a recording's block to once
/// decompressed ([`efatop_proto::stream::MAX_MEMBER_BYTES`], 256 MiB). A results file is parsed whole, at
/// about its size again in memory; a write or sendrecv run of 4096 ranks writes some tens of MiB, a sweep
/// about 200 bytes per figure (ranks × channels × rounds of them: a quick sweep of 256 nodes × 32 NICs
/// fits).
pub const MAX_RESULTS_BYTES: u64 = efatop_proto::stream::MAX_MEMBER_BYTES;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{}: cannot read: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A FIFO, a device, a folder: not a file a run wrote, and one a read could wait on or never end.
    #[error("{}: not a regular file ({what}); report and compare read the results file a run wrote (--out)", .path.display())]
    NotAFile { path: PathBuf, what: &'static str },
    #[error("{}: larger than {} ({limit} bytes); efatop reads at most that of a results file", .path.display(), format_size(*.limit))]
    TooLarge { path: PathBuf, limit: u64 },
    /// The reader's own text says what is wrong (`not an efatop results file: …` for bad JSON).
    #[error("{}: {source}", .path.display())]
    Parse {
        path: PathBuf,
        source: Unreadable,
    },
    #[error("{}: cannot write: {source}", .path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An output path refused (a link, not a regular file) or not written ([`efatop_files`]).
    #[error("{0}")]
    Output(#[from] efatop_files::OutputError),
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

/// Why a results file's bytes were not taken: their shape (proto's reader), or a figure no run measures.
#[derive(Debug, thiserror::Error)]
pub enum Unreadable {
    #[error(transparent)]
    File(#[from] efatop_proto::results::ResultsFileError),
    #[error("{0}")]
    Impossible(#[from] crate::figures::ImpossibleFigure),
}

/// A results file's bytes as every reader takes them: its shape and what tables rely on
/// (`RunResults::from_json`), then its figures ([`crate::figures::check_figures`]).
pub fn parse(bytes: &[u8]) -> Result<RunResults, Unreadable> {
    let results = RunResults::from_json(bytes)?;
    crate::figures::check_figures(&results)?;
    Ok(results)
}

/// A results file as read: its results, and what reading it took that the file does not say itself (an
/// old experiment name read as today's), one line each.
#[derive(Debug)]
pub struct Loaded {
    pub results: RunResults,
    pub notes: Vec<String>,
}

/// Reads and parses a results file written by `efatop run ... --out FILE` ([`load`]'s results).
pub fn load_results(path: &Path) -> Result<RunResults, ReportError> {
    load(path).map(|loaded| loaded.results)
}

/// Reads a results file: a regular file of at most [`MAX_RESULTS_BYTES`], JSON of the results' shape, what
/// tables rely on (listed configurations, one measurement per configuration and size, square pair
/// matrices), and figures a run can have measured. An experiment under an old name is read as today's
/// ([`efatop_proto::experiment::OLD_NAMES`]), with a note in [`Loaded::notes`] and the run's notes.
pub fn load(path: &Path) -> Result<Loaded, ReportError> {
    let bytes = read_capped(path, MAX_RESULTS_BYTES)?;
    // The reader the fuzzer exercises.
    let mut results = parse(&bytes).map_err(|source| ReportError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    let mut notes = Vec::new();
    if let Some((today, old)) = results.metadata.experiment.renamed() {
        let note = format!(
            "read as {today}: the file names its experiment `{old}`, the name before efatop's rename (its configurations are today's)"
        );
        results.metadata.experiment = today;
        results.metadata.notes.push(note.clone());
        notes.push(note);
    }
    Ok(Loaded { results, notes })
}

/// The file's bytes: only a regular file (a FIFO or a device is refused before it is read; the file is
/// opened without blocking, so a FIFO put in its place meanwhile is refused too), and at most
/// `limit` bytes of it ([`MAX_RESULTS_BYTES`]), read through a cap as replay reads a recording.
fn read_capped(path: &Path, limit: u64) -> Result<Vec<u8>, ReportError> {
    let read_error = |source| ReportError::Read { path: path.to_path_buf(), source };
    let not_a_file = |kind: std::fs::FileType| {
        use std::os::unix::fs::FileTypeExt;
        let what = if kind.is_dir() {
            "a folder"
        } else if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "not a file"
        };
        ReportError::NotAFile { path: path.to_path_buf(), what }
    };
    let before = std::fs::metadata(path).map_err(read_error)?;
    if !before.is_file() {
        return Err(not_a_file(before.file_type()));
    }
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(read_error)?;
    let opened = file.metadata().map_err(read_error)?;
    if !opened.is_file() {
        return Err(not_a_file(opened.file_type()));
    }
    let too_large = || ReportError::TooLarge { path: path.to_path_buf(), limit };
    if opened.len() > limit {
        return Err(too_large());
    }
    // The size said can be wrong (a file still growing, one of /proc's that says 0): the cap holds anyway.
    let mut bytes = Vec::with_capacity(usize::try_from(opened.len()).unwrap_or(0));
    file.take(limit + 1).read_to_end(&mut bytes).map_err(read_error)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(bytes)
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
    fn the_cap_holds_where_the_size_a_file_says_is_wrong() {
        // /proc's files are regular files that say they hold 0 bytes and hold more.
        let status = Path::new("/proc/self/status");
        assert_eq!(std::fs::metadata(status).expect("stat").len(), 0);
        let err = read_capped(status, 64).expect_err("over 64 bytes");
        assert!(matches!(err, ReportError::TooLarge { limit: 64, .. }), "{err}");
        assert!(err.to_string().starts_with("/proc/self/status: larger than 64 (64 bytes)"), "{err}");
        assert!(read_capped(status, 1 << 20).is_ok_and(|bytes| bytes.len() > 64));
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
