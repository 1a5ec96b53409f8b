//! The process's open-file limit (`RLIMIT_NOFILE`): every connection is a file descriptor, so
//! connection caps that add up to less than this limit (with room for files and listeners) are
//! what keeps a flood of connections to one port from stopping the others.

use std::io;

/// The open-file limit: the soft one applies; the process may raise it up to the hard one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdLimit {
    /// The limit that applies (`ulimit -Sn`).
    pub soft: u64,
    /// The most the soft limit may be raised to without privileges (`ulimit -Hn`).
    pub hard: u64,
}

/// The process's open-file limit.
///
/// # Errors
///
/// `getrlimit` failed, or (not on Unix) there is no such limit.
pub fn fd_limit() -> io::Result<FdLimit> {
    imp::get()
}

/// Raises the soft open-file limit to the hard one (at most [`MAX_RAISED_FD_LIMIT`]), as
/// servers that hold many connections usually do at start (the usual soft limit, 1,024, is a few
/// hundred clients). Returns the soft limit now in force.
///
/// # Errors
///
/// `getrlimit` or `setrlimit` failed; the limit is then unchanged.
pub fn raise_fd_limit() -> io::Result<u64> {
    let limit = fd_limit()?;
    let target = limit.hard.min(MAX_RAISED_FD_LIMIT);
    if limit.soft < target {
        imp::set(FdLimit { soft: target, ..limit })?;
        return Ok(target);
    }
    Ok(limit.soft)
}

/// The most [`raise_fd_limit`] raises the soft limit to: Linux's default ceiling
/// (`fs.nr_open`). An unlimited hard limit (macOS and the BSDs report one) cannot be the soft
/// limit there (`setrlimit` refuses it), and connection caps over a million are bounded by
/// memory long before descriptors.
pub const MAX_RAISED_FD_LIMIT: u64 = 1 << 20;

#[cfg(unix)]
#[allow(clippy::useless_conversion)] // rlim_t is u64 on most targets, not on all
mod imp {
    use super::FdLimit;
    use std::io;

    pub(super) fn get() -> io::Result<FdLimit> {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: `limit` is a valid rlimit to write into.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(FdLimit { soft: u64::from(limit.rlim_cur), hard: u64::from(limit.rlim_max) })
    }

    pub(super) fn set(limit: FdLimit) -> io::Result<()> {
        let rlim = |n: u64| libc::rlim_t::try_from(n).unwrap_or(libc::RLIM_INFINITY);
        let limit = libc::rlimit { rlim_cur: rlim(limit.soft), rlim_max: rlim(limit.hard) };
        // SAFETY: `limit` is a valid rlimit to read from.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(not(unix))]
mod imp {
    use super::FdLimit;
    use std::io;

    pub(super) fn get() -> io::Result<FdLimit> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "no open-file limit on this platform"))
    }

    pub(super) fn set(_: FdLimit) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "no open-file limit on this platform"))
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_read_and_raising_it_never_lowers_it() {
        let before = fd_limit().expect("getrlimit");
        assert!(before.soft <= before.hard && before.soft > 0, "{before:?}");
        let now = raise_fd_limit().expect("raising to the hard limit is allowed");
        let expected = before.soft.max(before.hard.min(MAX_RAISED_FD_LIMIT));
        assert_eq!(now, expected);
        assert_eq!(fd_limit().expect("getrlimit").soft, expected);
    }
}
