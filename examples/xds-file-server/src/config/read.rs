//! Reading one configuration file safely: only regular files, never blocking in `open()`, never
//! more than the size limit, and only a file that did not change while it was read.

use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// What identifies one version of a file on disk: if any part differs, the content may differ.
/// The inode and change time catch a file renamed over another of the same size and mtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stamp {
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    inode: (u64, u64),
}

impl Stamp {
    /// The stamp of a file's metadata.
    pub fn of(meta: &Metadata) -> Stamp {
        Stamp {
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            inode: (meta.dev(), meta.ino()),
        }
    }
}

/// Why a file could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The file changed while it was read (or between listing and reading): read it again once
    /// it has been quiet.
    Unstable,
    /// The file cannot be used as configuration; the reason names what is wrong.
    Refused(String),
}

/// What a non-regular file is, for the error that refuses it.
fn kind(meta: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Reads `file` (following symbolic links) if it is a regular file of at most `max_bytes`
/// bytes that does not change while it is read: a FIFO or a device would block the reload
/// thread forever, and a file read while it is written would be served half-written.
///
/// The type is checked on the metadata before anything opens the file, so a FIFO or a device
/// never blocks the reader; the open itself is non-blocking as well, in case the path is
/// swapped for one in between, and the opened file's type is checked again. The read stops
/// at `max_bytes + 1` whatever the file claims its size is (`/proc` files and devices
/// report 0).
pub(crate) fn read_stable(file: &Path, max_bytes: u64) -> Result<(Stamp, String), ReadError> {
    let io = |e: std::io::Error| ReadError::Refused(e.to_string());
    let before = std::fs::metadata(file).map_err(io)?;
    if !before.is_file() {
        return Err(ReadError::Refused(format!(
            "{} is {}, not a regular file; refused",
            file.display(),
            kind(&before)
        )));
    }
    let too_big = |size: u64| {
        ReadError::Refused(format!(
            "the file has {size} bytes, more than the limit of {max_bytes} (--max-config-bytes)"
        ))
    };
    if before.len() > max_bytes {
        return Err(too_big(before.len()));
    }
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(file)
        .map_err(io)?;
    let meta = opened.metadata().map_err(io)?;
    if !meta.is_file() || Stamp::of(&meta) != Stamp::of(&before) {
        return Err(ReadError::Unstable);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(before.len()).unwrap_or(0));
    let limit = max_bytes.saturating_add(1);
    Read::take(&opened, limit).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_big(bytes.len() as u64));
    }
    let after = Stamp::of(&File::metadata(&opened).map_err(io)?);
    let now = std::fs::metadata(file).map(|m| Stamp::of(&m)).ok();
    // A file that says it is empty yet has content, and whose stamp did not move while it was
    // read, is a pseudo-file (`/proc`, `/sys`): its content is made up at each read and never
    // settles. Refused with that reason, rather than read again forever as "still changing".
    if after.len == 0 && !bytes.is_empty() && after == Stamp::of(&before) && now == Some(after) {
        return Err(ReadError::Refused(format!(
            "{} reports a size of 0 but has content: a pseudo-file (such as under /proc) is \
             never stable; refused",
            file.display()
        )));
    }
    // Size, times and inode unchanged across the read, and the path still names this file.
    if after != Stamp::of(&before) || now != Some(after) || bytes.len() as u64 != after.len {
        return Err(ReadError::Unstable);
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        ReadError::Refused(format!(
            "the file is not UTF-8 (at byte {})",
            e.utf8_error().valid_up_to()
        ))
    })?;
    Ok((after, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_to_a_proc_file_is_refused_not_retried_forever() {
        let dir = std::env::temp_dir().join(format!("xds-read-proc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join("status.yaml");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/proc/self/status", &link).unwrap();
        match read_stable(&link, 1 << 20) {
            Err(ReadError::Refused(reason)) => assert!(reason.contains("pseudo-file"), "{reason}"),
            Err(ReadError::Unstable) => panic!("reported as still changing"),
            Ok(_) => panic!("read as configuration"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
