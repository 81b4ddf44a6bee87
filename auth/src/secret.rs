//! Where a run's secret comes from, and a viewer's token (docs/security.md).
//!
//! - `efatop run`: the launcher makes one and hands it to the ranks it starts ([`ENV_RUN_SECRET`]; a
//!   process's environment is readable by its own user and root alone).
//! - mpirun (or srun with an MPI plugin): rank 0 makes one and broadcasts it over MPI.
//! - srun without MPI: rank 0 makes one and hands it to each rank inside a MUNGE credential that only the
//!   job's user can decode (`bootstrap::munge`).
//! - A world of one: one made for the process.
//! - Viewers of `--serve` and `efatop attach`, and a many-node monitor's nodes: the user's token,
//!   `EFATOP_TOKEN`, else the file `EFATOP_TOKEN_FILE` names, else `~/.config/efatop/token` (made, readable by
//!   its owner alone, on first use). A token file readable by anyone else is refused.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::{Secret, Source};

/// The run secret `efatop run` hands to its ranks, as 64 hex digits.
pub const ENV_RUN_SECRET: &str = "EFATOP_RUN_SECRET";
/// A token given explicitly.
pub const ENV_TOKEN: &str = "EFATOP_TOKEN";
/// Where the token file is, instead of `~/.config/efatop/token`.
pub const ENV_TOKEN_FILE: &str = "EFATOP_TOKEN_FILE";
/// A token file is a line, not a document: longer ones are refused unread.
const TOKEN_FILE_LIMIT: u64 = 4096;

/// A secret and where it came from.
#[derive(Clone, Debug)]
pub struct Keyed {
    pub secret: Secret,
    pub source: Source,
}

impl Keyed {
    /// One made here, for `source`.
    pub fn generate(source: Source) -> Result<Self, String> {
        Ok(Self { secret: Secret::generate().map_err(|e| e.to_string())?, source })
    }

    /// The line the header and the results file carry.
    pub fn note(&self) -> String {
        format!("connections into this run prove its secret ({}): strangers are refused", self.source)
    }
}

/// The launcher's secret, when this process is one of `efatop run`'s ranks.
pub fn from_launcher() -> Option<Result<Keyed, String>> {
    let text = std::env::var(ENV_RUN_SECRET).ok()?;
    Some(Secret::from_hex(&text).map(|secret| Keyed { secret, source: Source::Launcher }).map_err(|e| format!("{ENV_RUN_SECRET}: {e}")))
}

/// The user's token: `EFATOP_TOKEN`, else the token file; with `create`, a missing default file is made.
pub fn user_token(create: bool) -> Result<Keyed, String> {
    if let Ok(token) = std::env::var(ENV_TOKEN) {
        let secret = Secret::from_token(&token).map_err(|e| format!("{ENV_TOKEN}: {e}"))?;
        return Ok(Keyed { secret, source: Source::Environment });
    }
    let (path, explicit) = match std::env::var_os(ENV_TOKEN_FILE) {
        Some(path) => (PathBuf::from(path), true),
        None => (default_token_file().ok_or("no home directory for the token file: set EFATOP_TOKEN or EFATOP_TOKEN_FILE")?, false),
    };
    let token = match read_token_file(&path) {
        Ok(token) => token,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound && create && !explicit => make_token_file(&path)?,
        Err(err) => return Err(format!("token file {}: {err}", path.display())),
    };
    let secret = Secret::from_token(&token).map_err(|e| format!("token file {}: {e}", path.display()))?;
    Ok(Keyed { secret, source: Source::File(path.display().to_string()) })
}

fn default_token_file() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some(Path::new(&home).join(".config/efatop/token"))
}

/// Reads a token file that is a regular file of this user's, readable by no one else (not followed
/// through a symbolic link).
fn read_token_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path)?;
    let meta = file.metadata()?;
    let refuse = |why: String| Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, why));
    if !meta.is_file() {
        return refuse("not a regular file".into());
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return refuse(format!("owned by uid {}, not by this user ({me})", meta.uid()));
    }
    if meta.mode() & 0o077 != 0 {
        return refuse(format!("readable by others (mode {:o}): chmod 600 {}", meta.mode() & 0o777, path.display()));
    }
    if meta.len() > TOKEN_FILE_LIMIT {
        return refuse(format!("{} bytes; a token file holds one line", meta.len()));
    }
    let mut text = String::new();
    Read::by_ref(&mut file).take(TOKEN_FILE_LIMIT).read_to_string(&mut text)?;
    Ok(text)
}

/// Makes the default token file: 32 random bytes as hex, in a file (and folder) only its owner can read,
/// staged and linked into place whole (`efatop_files::create_private`): a plugin reading it meanwhile finds
/// no file or the whole token, never a part. When another process made one first (two watchers starting at
/// once), that one is read and used, by the same rules as any token file.
fn make_token_file(path: &Path) -> Result<String, String> {
    let failed = |e: std::io::Error| format!("cannot make the token file {}: {e}", path.display());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(failed)?;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    let token = Secret::generate().map_err(|e| e.to_string())?.to_hex();
    match efatop_files::create_private(path, format!("{token}\n").as_bytes()) {
        Ok(true) => Ok(token),
        Ok(false) => read_token_file(path).map(|text| text.trim().to_string()).map_err(|e| format!("token file {}: {e}", path.display())),
        Err(e) => Err(format!("cannot make the token file: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_readable_by_others_or_behind_a_link_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("token");
        std::fs::write(&path, "0123456789abcdef0123\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let err = read_token_file(&path).expect_err("0644 is refused");
        assert!(err.to_string().contains("readable by others"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert_eq!(read_token_file(&path).expect("0600 is read").trim(), "0123456789abcdef0123");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).expect("symlink");
        assert!(read_token_file(&link).is_err(), "a symbolic link is not followed");
    }

    #[test]
    fn the_default_token_file_is_made_once_and_private() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("efatop/token");
        let made = make_token_file(&path).expect("made");
        assert_eq!(read_token_file(&path).expect("read").trim(), made);
        assert_eq!(std::fs::metadata(&path).expect("meta").mode() & 0o777, 0o600);
        // A second watcher finds it made (never written over) and uses the same token.
        assert_eq!(make_token_file(&path).expect("found"), made);
        assert_eq!(read_token_file(&path).expect("read").trim(), made);
    }
}
