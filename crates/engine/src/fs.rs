//! Removing a directory tree of any depth (issue #31).
//!
//! Commands are written by a model and may leave a folder 100,000 levels deep in their
//! private `/tmp`, or create `.git` as such a chain. `std::fs::remove_dir_all` recurses once
//! per level, so a deep enough tree overflows the thread's stack and aborts the whole
//! process (every run of a `fabric serve` with it). [`remove_tree`] walks with an explicit
//! stack instead: one open directory at a time (a deep tree would otherwise exhaust the
//! descriptors), each level remembered by its device and inode so the way back up through
//! `..` is checked, every operation relative to a descriptor (no path grows past
//! `PATH_MAX`), and links never followed: a link is removed as a link. It never crosses into
//! another file system (a mount inside the tree is left alone and reported).

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

/// A directory's identity: its device and inode.
type Identity = (u64, u64);

fn identity(fd: impl AsFd) -> io::Result<Identity> {
    let stat = rustix::fs::fstat(fd)?;
    // The kernel's `dev_t` and `ino_t` are unsigned; the casts only widen where they differ.
    Ok((stat.st_dev as u64, stat.st_ino as u64))
}

fn open_dir(at: impl AsFd, name: &CStr) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        at,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Removes `path` and everything under it, whatever its depth; a file or a link is removed
/// as itself. A `path` that does not exist is an error of kind `NotFound`, as with
/// `std::fs::remove_dir_all`.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_dir() {
        return std::fs::remove_file(path);
    }
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no directory name"))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let parent = rustix::fs::open(
        parent,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    remove_under(parent, &cstring(name)?)
}

fn cstring(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a name holds a NUL byte"))
}

/// Removes the directory `name` in the directory `top`, walking down one directory at a
/// time and back up through `..`.
fn remove_under(top: OwnedFd, name: &CStr) -> io::Result<()> {
    let mut current = open_dir(&top, name)?;
    let device = identity(&current)?.0;
    // The names from `top` down to `current`, each with the identity of the directory it
    // names: checked again on the way back up.
    let mut path: Vec<(CString, Identity)> = vec![(name.to_owned(), identity(&current)?)];
    loop {
        match first_subdirectory(&current, device)? {
            Some(child) => {
                match open_dir(&current, &child) {
                    Ok(fd) => {
                        let id = identity(&fd)?;
                        path.push((child, id));
                        current = fd;
                    }
                    // Replaced by a file or a link since it was read: removed as such.
                    Err(Errno::LOOP | Errno::NOTDIR) => {
                        rustix::fs::unlinkat(&current, &*child, AtFlags::empty())?;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            None => {
                // `current` is empty now: go up and remove it.
                let (done, _) = path.pop().ok_or_else(|| io::Error::other("empty walk"))?;
                let Some((_, parent_id)) = path.last() else {
                    rustix::fs::unlinkat(&top, &*done, AtFlags::REMOVEDIR)?;
                    return Ok(());
                };
                let up = open_dir(&current, c"..")?;
                if identity(&up)? != *parent_id {
                    return Err(io::Error::other(
                        "the tree was moved while it was being removed",
                    ));
                }
                rustix::fs::unlinkat(&up, &*done, AtFlags::REMOVEDIR)?;
                current = up;
            }
        }
    }
}

/// Unlinks every entry of `dir` that is not a directory and returns the name of the first
/// subdirectory, if any. A subdirectory on another device (a mount point) is an error: the
/// walk does not cross into other file systems.
fn first_subdirectory(dir: &OwnedFd, device: u64) -> io::Result<Option<CString>> {
    let mut entries = Dir::read_from(dir)?;
    while let Some(entry) = entries.read() {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            FileType::Directory => true,
            FileType::Unknown => rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
                .map(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory)?,
            _ => false,
        };
        if !is_dir {
            rustix::fs::unlinkat(dir, name, AtFlags::empty())?;
            continue;
        }
        let stat = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
        if stat.st_dev as u64 != device {
            return Err(io::Error::other(format!(
                "{} is a mount point; not removed",
                name.to_string_lossy()
            )));
        }
        return Ok(Some(name.to_owned()));
    }
    Ok(None)
}

/// What one command may add to the disk while it runs (issue #31): bytes and files under
/// `paths` (its workspace and private temp directory), counted as growth over what was
/// there when it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskWatch {
    /// The directories counted.
    pub paths: Vec<std::path::PathBuf>,
    /// Bytes it may add (allocated blocks, so sparse files count what they really use).
    pub max_bytes: u64,
    /// Files and directories it may add.
    pub max_files: u64,
}

/// Bytes allocated and entries under `paths`, walked with an explicit stack (no depth can
/// overflow it), links counted but never followed, unreadable entries skipped.
pub fn usage(paths: &[std::path::PathBuf]) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let (mut bytes, mut files) = (0_u64, 0_u64);
    let mut stack: Vec<std::path::PathBuf> = paths.to_vec();
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            files += 1;
            bytes += meta.blocks() * 512;
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    (bytes, files)
}

/// The shortest pause between two counts of a [`DiskWatch`].
pub(crate) const MIN_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

impl DiskWatch {
    /// Resolves when the command has added more than it may, with the reason in words for
    /// the model; never resolves otherwise (race it against the command's end). The first
    /// count is the baseline; later counts come at intervals of ten times what a count takes
    /// (at least [`MIN_PAUSE`]), so watching a large workspace costs at most a tenth of a
    /// core, and what a command can add between two counts is what it writes in that pause.
    pub async fn exceeded(self) -> String {
        let count = |paths: Vec<std::path::PathBuf>| async move {
            let started = std::time::Instant::now();
            let counted = tokio::task::spawn_blocking(move || usage(&paths))
                .await
                .unwrap_or((0, 0));
            (counted, started.elapsed())
        };
        let ((base_bytes, base_files), took) = count(self.paths.clone()).await;
        let mut pause = (took * 10).max(MIN_PAUSE);
        loop {
            tokio::time::sleep(pause).await;
            let ((bytes, files), took) = count(self.paths.clone()).await;
            pause = (took * 10).max(MIN_PAUSE);
            let (added_bytes, added_files) = (
                bytes.saturating_sub(base_bytes),
                files.saturating_sub(base_files),
            );
            if added_bytes > self.max_bytes {
                return format!(
                    "it wrote {} MiB to the workspace and its temp directory, more than the sandbox's limit of {} MiB per command (sandbox_limits.disk_mb)",
                    added_bytes >> 20,
                    self.max_bytes >> 20
                );
            }
            if added_files > self.max_files {
                return format!(
                    "it made {added_files} files and directories in the workspace and its temp directory, more than the sandbox's limit of {} per command (sandbox_limits.files)",
                    self.max_files
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a chain of `depth` directories named `d` under `root`, relative to descriptors
    /// (the path is far past `PATH_MAX`), with a file and a link at the bottom.
    fn deep_chain(root: &Path, depth: usize) {
        let mut dir =
            rustix::fs::open(root, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        for _ in 0..depth {
            rustix::fs::mkdirat(&dir, c"d", Mode::from_raw_mode(0o755)).unwrap();
            dir = open_dir(&dir, c"d").unwrap();
        }
        let file = rustix::fs::openat(
            &dir,
            c"f",
            OFlags::CREATE | OFlags::WRONLY,
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        drop(file);
        rustix::fs::symlinkat(c"/", &dir, c"to-root").unwrap();
    }

    #[test]
    fn issue_31_a_100000_deep_tree_is_removed_without_recursion() {
        // On tmpfs where there is one: the disk of a small VM takes minutes for 200,000
        // directory operations, and what is tested is the walk, not the disk.
        let base = tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let top = base.path().join("deep");
        std::fs::create_dir(&top).unwrap();
        deep_chain(&top, 100_000);
        // On a thread with a small stack: the walk's depth must not cost stack.
        let target = top.clone();
        std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || remove_tree(&target))
            .unwrap()
            .join()
            .unwrap()
            .unwrap();
        assert!(!top.exists());
    }

    #[test]
    fn links_are_removed_never_followed() {
        let base = tempfile::tempdir().unwrap();
        let outside = base.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep.txt"), "keep").unwrap();
        let tree = base.path().join("tree");
        std::fs::create_dir_all(tree.join("a/b")).unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("a/link")).unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("a/b/link2")).unwrap();
        std::fs::write(tree.join("a/b/file"), "x").unwrap();
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
        assert_eq!(
            std::fs::read_to_string(outside.join("keep.txt")).unwrap(),
            "keep"
        );
        // A link given itself is removed as a link.
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        remove_tree(&link).unwrap();
        assert!(outside.join("keep.txt").exists());
    }

    #[test]
    fn usage_counts_files_and_blocks_without_following_links() {
        let base = tempfile::tempdir().unwrap();
        let tree = base.path().join("t");
        std::fs::create_dir_all(tree.join("a/b")).unwrap();
        std::fs::write(tree.join("a/b/f"), vec![1u8; 64 * 1024]).unwrap();
        std::os::unix::fs::symlink("/usr", tree.join("a/usr")).unwrap();
        let (bytes, files) = usage(&[tree]);
        // a, b, f and the link.
        assert_eq!(files, 4);
        assert!(bytes >= 64 * 1024, "{bytes}");
    }

    #[tokio::test]
    async fn issue_31_a_command_that_writes_past_the_cap_is_caught() {
        let base = tempfile::tempdir().unwrap();
        let watch = DiskWatch {
            paths: vec![base.path().to_path_buf()],
            max_bytes: u64::MAX,
            max_files: 50,
        };
        let dir = base.path().to_path_buf();
        let writer = tokio::task::spawn_blocking(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            for i in 0..100 {
                std::fs::write(dir.join(format!("f{i}")), "x").unwrap();
            }
        });
        let why = tokio::time::timeout(std::time::Duration::from_secs(10), watch.exceeded())
            .await
            .expect("caught within 10 s");
        writer.await.unwrap();
        assert!(why.contains("sandbox_limits.files"), "{why}");
        assert!(why.contains("limit of 50 per command"), "{why}");
    }

    #[test]
    fn a_missing_path_is_not_found() {
        let base = tempfile::tempdir().unwrap();
        let err = remove_tree(&base.path().join("nothing")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn wide_trees_and_a_relative_path_are_removed() {
        let base = tempfile::tempdir().unwrap();
        let tree = base.path().join("wide");
        for i in 0..300 {
            std::fs::create_dir_all(tree.join(format!("d{i}/e"))).unwrap();
            std::fs::write(tree.join(format!("d{i}/e/f")), "x").unwrap();
            std::fs::write(tree.join(format!("f{i}")), "x").unwrap();
        }
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
    }
}
