//! Files efatop writes at paths the user names (`--out`, `--record`, a report's PNG and its sidecar, ...):
//! the one place that decides how, so that every writer behaves the same.
//!
//! - A symbolic link at the path is refused ([`OutputError::Symlink`]), never written through: on a shared
//!   node another user may have left one where a run writes (a results folder in a shared directory), to
//!   make the run overwrite a file of the user's that the link points to.
//! - Anything else there that is not a regular file (a folder, a FIFO, a device) is refused too.
//! - The bytes go to a fresh temporary file in the same folder, under an unpredictable name, created
//!   create-new (`O_EXCL`: an existing name, a link included, is never opened), then renamed over the path:
//!   a reader sees the old file or the new one, never a part of either, and a link planted at the path after
//!   the check is replaced, not followed. A regular file the user named is replaced as before.
//!
//! The folder itself is the user's: a path whose folder is a link is written where the link leads.
//!
//! [`attribute`] is the reading side: a file another party may have planted (a node's sysfs) is opened and
//! read so that it can neither stall nor flood the reader.

#![forbid(unsafe_code)]

pub mod attribute;

use std::fs::{File, Permissions};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Why an output file was not written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// Refused: the path is a symbolic link (exit 2, naming the flag).
    #[error("{} is a symbolic link; efatop never writes through one (remove it, or name another path)", .0.display())]
    Symlink(PathBuf),
    /// Refused: the path is a folder, a FIFO, a device ...
    #[error("{} exists and is not a regular file", .0.display())]
    NotAFile(PathBuf),
    #[error("cannot write {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

impl OutputError {
    /// Whether the path itself was refused (the user's argument is wrong: exit 2), rather than the write
    /// failing (a full disk, a folder without write permission).
    pub fn is_refused(&self) -> bool {
        matches!(self, Self::Symlink(_) | Self::NotAFile(_))
    }
}

/// Refuses a path that is a symbolic link or anything but a regular file; a path that does not exist yet
/// is fine.
pub fn check_output_path(path: &Path) -> Result<(), OutputError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(OutputError::Symlink(path.to_path_buf())),
        Ok(meta) if !meta.is_file() => Err(OutputError::NotAFile(path.to_path_buf())),
        Ok(_) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(OutputError::Io { path: path.to_path_buf(), source }),
    }
}

/// A fresh file beside `path` (same folder, so the rename stays within one filesystem), named
/// `.<name>.<random>.tmp`, created create-new with the mode [`File::create`] would give (0666 less the
/// umask). Removed when dropped unless persisted.
fn staging(path: &Path) -> Result<tempfile::NamedTempFile, OutputError> {
    staging_with(path, 0o666)
}

fn staging_with(path: &Path, mode: u32) -> Result<tempfile::NamedTempFile, OutputError> {
    let io = |source| OutputError::Io { path: path.to_path_buf(), source };
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path.file_name().map_or_else(|| "efatop".into(), |name| name.to_string_lossy().into_owned());
    tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .permissions(Permissions::from_mode(mode))
        .tempfile_in(dir)
        .map_err(io)
}

/// Writes `bytes` as the file at `path` (see the module's rules): refused when `path` is a link or not a
/// regular file; otherwise staged under a fresh name and renamed over `path`.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    check_output_path(path)?;
    let io = |source| OutputError::Io { path: path.to_path_buf(), source };
    let mut staged = staging(path)?;
    staged.write_all(bytes).map_err(io)?;
    // On an error the staged file is removed when `persist` hands it back and it drops.
    staged.persist(path).map_err(|err| io(err.error))?;
    Ok(())
}

/// Makes a file at `path` that only its owner can read (0600) holding `bytes`, unless one is there: staged
/// under a fresh name and linked into place without replacing anything, so that a reader sees no file or the
/// whole one, and a file another process made there meanwhile (or planted: a link included) is left as it
/// is. Returns whether this call made it; `Ok(false)`: something was already at `path`, for the caller to
/// read by its own rules.
pub fn create_private(path: &Path, bytes: &[u8]) -> Result<bool, OutputError> {
    let io = |source| OutputError::Io { path: path.to_path_buf(), source };
    let mut staged = staging_with(path, 0o600)?;
    staged.write_all(bytes).map_err(io)?;
    match staged.persist_noclobber(path) {
        Ok(_) => Ok(true),
        Err(err) if err.error.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(err) => Err(io(err.error)),
    }
}

/// Creates the file at `path` for a writer that appends to it over a run (`--record`): a fresh empty file
/// staged and renamed into place at once, so that the path is a regular file of this process's from the
/// start; the returned handle is that file (later writes go to it, whatever happens to the name).
pub fn create_for_appending(path: &Path) -> Result<File, OutputError> {
    check_output_path(path)?;
    let staged = staging(path)?;
    staged.persist(path).map_err(|err| OutputError::Io { path: path.to_path_buf(), source: err.error })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_link_at_the_path_is_refused_and_its_target_is_left_alone() {
        let dir = tempfile::tempdir().expect("dir");
        let target = dir.path().join("precious");
        std::fs::write(&target, b"keep me").expect("target");
        let link = dir.path().join("out.json");
        symlink(&target, &link).expect("link");
        let err = write_atomically(&link, b"{}").expect_err("a link is refused");
        assert!(err.is_refused() && err.to_string().contains("is a symbolic link"), "{err}");
        let err = create_for_appending(&link).expect_err("a link is refused");
        assert!(matches!(err, OutputError::Symlink(_)), "{err}");
        // A dangling link too: following it would create the file it names.
        let dangling = dir.path().join("dangling");
        symlink(dir.path().join("not-yet"), &dangling).expect("link");
        assert!(matches!(write_atomically(&dangling, b"{}"), Err(OutputError::Symlink(_))));
        assert!(!dir.path().join("not-yet").exists());
        assert_eq!(std::fs::read(&target).expect("target"), b"keep me");
        assert!(matches!(write_atomically(dir.path(), b"{}"), Err(OutputError::NotAFile(_))));
        // Nothing staged is left behind.
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("list").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(left.len(), 3, "{left:?}");
    }

    #[test]
    fn a_regular_file_is_replaced_and_a_new_one_created_under_the_umask() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("run.json");
        write_atomically(&path, b"first").expect("create");
        write_atomically(&path, b"second").expect("replace");
        assert_eq!(std::fs::read(&path).expect("read"), b"second");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode & 0o600, 0o600, "the owner reads and writes it: {mode:o}");
        let mut file = create_for_appending(&dir.path().join("run.efarec")).expect("create");
        file.write_all(b"line\n").expect("append");
        assert_eq!(std::fs::read(dir.path().join("run.efarec")).expect("read"), b"line\n");
        let names: Vec<_> = std::fs::read_dir(dir.path()).expect("list").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names.len(), 2, "no staging file left: {names:?}");
    }

    #[test]
    fn a_private_file_is_made_whole_or_what_is_there_is_kept() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("token");
        assert!(create_private(&path, b"first\n").expect("made"));
        assert_eq!(std::fs::read(&path).expect("read"), b"first\n");
        assert_eq!(std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777, 0o600);
        assert!(!create_private(&path, b"second\n").expect("kept"), "an existing file is not replaced");
        assert_eq!(std::fs::read(&path).expect("read"), b"first\n");
        // A link planted at the path is neither followed nor replaced.
        let link = dir.path().join("link");
        symlink(dir.path().join("elsewhere"), &link).expect("link");
        assert!(!create_private(&link, b"x").expect("kept"));
        assert!(!dir.path().join("elsewhere").exists());
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("list").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(left.len(), 2, "nothing staged is left behind: {left:?}");
    }
}
