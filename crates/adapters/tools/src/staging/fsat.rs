//! File operations relative to directory descriptors, never through a path again once its
//! first directory is open: the staging area and the workspace may be changed by tool
//! processes while the fabric reads or applies them, and the fabric does that with its own
//! rights, outside the sandbox, so a directory swapped for a symbolic link must not lead it
//! anywhere else (the same approach as the file tools, ADR-026).

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What identifies one version of a file: a write changes the size, the modification time
/// or (always, and no program can set it back) the change time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Stamp {
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    ino: u64,
}

impl Stamp {
    pub(super) fn of(meta: &Metadata) -> Self {
        // Nanoseconds since the epoch fit an i64 until 2262.
        let ns = |s: i64, n: i64| s.saturating_mul(1_000_000_000).saturating_add(n);
        Self {
            size: meta.size(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
            ino: meta.ino(),
        }
    }
}

/// Opens a directory the fabric names itself (the workspace, the staging area).
pub(super) fn open_root(path: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Opens the directory `name` in `dir`, refusing a symbolic link.
pub(super) fn open_dir(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// The metadata of `name` in `dir`, of a symbolic link itself; `None` when it is not there.
pub(super) fn lstat(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<Metadata>> {
    match rustix::fs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => File::from(fd).metadata().map(Some),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Opens the regular file `name` in `dir` for reading; a link or anything else is refused.
pub(super) fn open_file(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<(File, Metadata)> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let file = File::from(fd);
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok((file, meta))
}

/// The entries of a directory (without `.` and `..`).
pub(super) fn entries(dir: BorrowedFd<'_>) -> io::Result<Vec<OsString>> {
    let mut listing = rustix::fs::Dir::read_from(dir)?;
    let mut names = Vec::new();
    while let Some(entry) = listing.read() {
        let entry = entry?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name != "." && name != ".." {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

/// The target of the symbolic link `name` in `dir`.
pub(super) fn read_link(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<PathBuf> {
    let target = rustix::fs::readlinkat(dir, name, Vec::new())?;
    Ok(PathBuf::from(OsStr::from_bytes(target.as_bytes())))
}

/// Walks to the directory holding `relative` beneath `root`, one component at a time and
/// never through a link; with `create`, missing directories are made. `None` when a
/// directory on the way is missing and `create` is off.
pub(super) fn parent_of(
    root: BorrowedFd<'_>,
    relative: &Path,
    create: bool,
) -> io::Result<Option<(OwnedFd, OsString)>> {
    let parts: Vec<&OsStr> = relative.iter().collect();
    let Some((name, dirs)) = parts.split_last() else {
        return Err(io::Error::other("empty path"));
    };
    let mut here = rustix::fs::openat(
        root,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    for dir in dirs {
        here = match open_dir(here.as_fd(), dir) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                match rustix::fs::mkdirat(here.as_fd(), *dir, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                open_dir(here.as_fd(), dir)?
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
    }
    Ok(Some((here, (*name).to_owned())))
}

/// Opens the regular file at `relative` beneath `root`, never through a link.
pub(super) fn open_file_at(root: BorrowedFd<'_>, relative: &Path) -> io::Result<(File, Metadata)> {
    match parent_of(root, relative, false)? {
        Some((dir, name)) => open_file(dir.as_fd(), &name),
        None => Err(io::Error::from(io::ErrorKind::NotFound)),
    }
}

/// Whether two readers hold the same bytes, read in pieces.
pub(super) fn same_bytes(mut a: impl Read, mut b: impl Read) -> io::Result<bool> {
    let (mut x, mut y) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = read_full(&mut a, &mut x)?;
        let m = read_full(&mut b, &mut y)?;
        if n != m || x[..n] != y[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// Creates a new file `name` in `dir` (never an existing one, never through a link).
pub(super) fn create_new(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<File> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode & 0o777),
    )?;
    Ok(File::from(fd))
}
