//! Reading a file another party may have planted (a node's sysfs and `/proc`, read as any user): a sysfs
//! attribute is a regular file of at most one page ([`ATTRIBUTE_MAX`]). [`open`] opens it non-blocking
//! and without following a final symbolic link, and refuses anything else (a FIFO, a character device, a
//! socket, a link, a directory); [`read`] reads at most a page and a byte. So no file planted where an
//! attribute should be can stall or flood a reader, and what is refused is said. Every reader of a node's
//! files goes through here: the node's reads and NIC counters (`efatop_node::sysfs`), the topology's DMI
//! name and link rates, the NCCL plugin's NIC counters.

use std::fs::{self, File};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The most a sysfs attribute holds: the kernel gives an attribute's `show` one page.
pub const ATTRIBUTE_MAX: usize = 4096;

/// Why a file could not be read as a sysfs attribute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// There is no such file.
    Missing,
    /// It is there but is not an attribute's text: why, in a few words.
    Bad(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Missing => f.write_str("missing"),
            ReadError::Bad(why) => f.write_str(why),
        }
    }
}

/// What a file that is not a regular one is, in a few words (`a FIFO`, `a character device`, ...): how every
/// reader of a planted file says what it found instead.
pub fn kind_of(file_type: fs::FileType) -> &'static str {
    if file_type.is_symlink() {
        "a symbolic link"
    } else if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

fn refuse(file_type: fs::FileType) -> ReadError {
    ReadError::Bad(format!("{}, not a sysfs attribute (a regular file)", kind_of(file_type)))
}

/// Opens `path` as a sysfs attribute: a regular file, not reached through a final symbolic link, opened
/// non-blocking (`O_NONBLOCK | O_NOFOLLOW | O_NOCTTY`), so that a FIFO or a device planted in its place
/// is refused without waiting on it. The type is checked before the open (a device is never opened) and
/// again on the open file (it cannot be swapped between the two).
pub fn open(path: &Path) -> Result<File, ReadError> {
    let metadata = match fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Err(ReadError::Missing),
        Err(err) => return Err(ReadError::Bad(err.to_string())),
    };
    if !metadata.file_type().is_file() {
        return Err(refuse(metadata.file_type()));
    }
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY)
        .open(path)
        .map_err(|err| if err.kind() == std::io::ErrorKind::NotFound { ReadError::Missing } else { ReadError::Bad(err.to_string()) })?;
    let opened = file.metadata().map_err(|err| ReadError::Bad(err.to_string()))?;
    if !opened.file_type().is_file() {
        return Err(refuse(opened.file_type()));
    }
    Ok(file)
}

/// The text of the sysfs attribute at `path` ([`open`]), at most [`ATTRIBUTE_MAX`] bytes: a longer file,
/// or one that is not UTF-8, is not an attribute.
pub fn read(path: &Path) -> Result<String, ReadError> {
    let file = open(path)?;
    let mut bytes = Vec::with_capacity(256);
    file.take(ATTRIBUTE_MAX as u64 + 1).read_to_end(&mut bytes).map_err(|err| ReadError::Bad(err.to_string()))?;
    if bytes.len() > ATTRIBUTE_MAX {
        return Err(ReadError::Bad(format!("longer than {ATTRIBUTE_MAX} bytes, not a sysfs attribute")));
    }
    String::from_utf8(bytes).map_err(|_| ReadError::Bad("not text".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_of_a_page_are_attributes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rx_drops");
        std::fs::write(&file, "7\n").unwrap();
        assert_eq!(read(&file).as_deref(), Ok("7\n"));
        assert_eq!(read(&dir.path().join("absent")), Err(ReadError::Missing));
        // A FIFO with no writer: refused at once, never waited on.
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        assert_eq!(read(&fifo), Err(ReadError::Bad("a FIFO, not a sysfs attribute (a regular file)".into())));
        // A link to itself, a link to a good file: links are not attributes.
        let looped = dir.path().join("looped");
        std::os::unix::fs::symlink("looped", &looped).unwrap();
        assert!(matches!(read(&looped), Err(ReadError::Bad(why)) if why.starts_with("a symbolic link")));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("rx_drops", &link).unwrap();
        assert!(matches!(read(&link), Err(ReadError::Bad(why)) if why.starts_with("a symbolic link")));
        // A character device and a directory.
        assert!(matches!(read(Path::new("/dev/null")), Err(ReadError::Bad(why)) if why.starts_with("a character device")));
        assert!(matches!(read(dir.path()), Err(ReadError::Bad(why)) if why.starts_with("a directory")));
        // A page is an attribute; a page and a byte is not.
        std::fs::write(&file, "1".repeat(ATTRIBUTE_MAX)).unwrap();
        assert_eq!(read(&file).map(|text| text.len()), Ok(ATTRIBUTE_MAX));
        std::fs::write(&file, "1".repeat(10 << 20)).unwrap();
        assert!(matches!(read(&file), Err(ReadError::Bad(why)) if why.starts_with("longer than 4096 bytes")));
        std::fs::write(&file, [0xff, 0xfe]).unwrap();
        assert_eq!(read(&file), Err(ReadError::Bad("not text".into())));
    }
}
