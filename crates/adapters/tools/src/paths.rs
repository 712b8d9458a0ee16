//! Path confinement: every path a tool receives is relative to the run's workspace and must
//! stay inside it.
//!
//! The rule, in two steps:
//! 1. Lexical ([`normalize`], pure): refuse NUL bytes and absolute paths, drop `.`, and
//!    resolve `..` against the components before it. A `..` that stays inside (`a/../b`) is
//!    fine; one that would climb above the workspace (`../x`, `a/../../x`) is refused. Models
//!    write `a/../b` legitimately, and refusing every `..` would only teach them a rule with
//!    no safety gain.
//! 2. On disk, capability style and free of races (ADR-026): each call opens the workspace
//!    directory once ([`Root`]) and resolves every path beneath that descriptor in the kernel
//!    with `openat2(2)` and `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS` ([`open_beneath`]).
//!    Symbolic links are followed only while they stay beneath the workspace; one that leads
//!    out (absolute, or `..` above the root) fails with `EXDEV`, which the tools report as a
//!    `path_escape`. Nothing is checked first and used later, so a directory swapped for a
//!    symbolic link between two system calls cannot lead out. Where `openat2` is missing
//!    (Linux < 5.6, `ENOSYS`) the same walk is done one component at a time with `openat`
//!    and `O_NOFOLLOW` ([`walk_beneath`]), each symbolic link read and expanded by hand.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use fabric_engine::ToolError;

/// The `event_type` of a refused path.
pub(crate) const PATH_ESCAPE: &str = "path_escape";

/// How many symbolic links one resolution may follow before giving up, as the kernel does
/// (`ELOOP` after 40).
const MAX_SYMLINK_HOPS: usize = 40;

/// How often `openat2` is retried when the kernel reports a concurrent rename (`EAGAIN`).
const EAGAIN_RETRIES: usize = 32;

/// Set once `openat2` answered `ENOSYS`: later calls go straight to [`walk_beneath`].
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Why a path is refused before touching the disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lexical {
    /// The path contains a NUL byte.
    Nul,
    /// The path is absolute.
    Absolute,
    /// A `..` climbs above the workspace.
    Escapes,
}

/// Normalises a workspace-relative path lexically: drops `.`, resolves `..` against earlier
/// components. The result is relative, has only normal components, and is empty for the
/// workspace itself (`.`, `a/..`, the empty string).
pub(crate) fn normalize(raw: &str) -> Result<PathBuf, Lexical> {
    if raw.contains('\0') {
        return Err(Lexical::Nul);
    }
    let mut out = PathBuf::new();
    for component in Path::new(raw).components() {
        match component {
            Component::Prefix(_) | Component::RootDir => return Err(Lexical::Absolute),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return Err(Lexical::Escapes);
                }
            }
            Component::Normal(name) => out.push(name),
        }
    }
    Ok(out)
}

/// A path a small model can use instead of a refused one: the same path with the root and
/// the escaping `..` dropped (`../x` → `x`, `/etc/passwd` → `etc/passwd`, `..` → `.`).
pub(crate) fn suggestion(raw: &str) -> String {
    let mut out = PathBuf::new();
    for component in Path::new(&raw.replace('\0', "")).components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::ParentDir => {
                out.pop();
            }
            Component::Prefix(_) | Component::RootDir | Component::CurDir => {}
        }
    }
    if out.as_os_str().is_empty() {
        ".".to_owned()
    } else {
        out.to_string_lossy().into_owned()
    }
}

/// The refusal for a path outside the workspace, worded so a small model can fix its call.
pub(crate) fn escape_error(raw: &str, how: &str, meant: &str) -> ToolError {
    ToolError::Denied {
        event_type: PATH_ESCAPE.to_owned(),
        attempted: raw.to_owned(),
        message: format!(
            "path `{raw}` is outside the workspace{how}; use a path relative to the workspace, most likely `{meant}`"
        ),
    }
}

/// Normalises `raw` as [`normalize`] does; a refused absolute or escaping path is answered
/// with the path inside `workspace` the model most likely meant ([`likely_meant`]), found by
/// looking only beneath the workspace, never outside it (issue #24). Blocking: run it off
/// the async threads.
pub(crate) fn normalize_in(workspace: &Path, raw: &str) -> Result<PathBuf, ToolError> {
    normalize(raw).map_err(|why| match why {
        Lexical::Nul => ToolError::InvalidArguments(
            "path contains a NUL byte; use a plain relative path such as `src/main.rs`".to_owned(),
        ),
        Lexical::Absolute | Lexical::Escapes => {
            let meant = Root::open(workspace)
                .map(|root| likely_meant(&root, raw))
                .unwrap_or_else(|_| suggestion(raw));
            escape_error(raw, "", &meant)
        }
    })
}

/// The workspace path a refused one most likely meant: for the workspace's own absolute
/// path, what follows it (`/…/workspace/src/a.rs` → `src/a.rs`); otherwise the longest
/// tail of the path that exists in the workspace (`/home/u/project/src/a.rs` → `src/a.rs`),
/// else the longest tail whose folder exists (`/Users/x/hello.txt` → `hello.txt`), else
/// the file name.
pub(crate) fn likely_meant(root: &Root, raw: &str) -> String {
    let cleaned = raw.replace('\0', "");
    if let Ok(inside) = Path::new(&cleaned).strip_prefix(&root.path)
        && let Ok(relative) = normalize(&inside.to_string_lossy())
    {
        return shown(&relative);
    }
    let names: Vec<&OsStr> = Path::new(&cleaned)
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect();
    let tails = || (0..names.len()).map(|start| names[start..].iter().collect::<PathBuf>());
    let exists = |relative: &Path| root.open_at(relative, OFlags::PATH).is_ok();
    tails()
        .find(|tail| exists(tail))
        .or_else(|| tails().find(|tail| tail.parent().is_none_or(exists)))
        .map_or_else(|| ".".to_owned(), |tail| shown(&tail))
}

/// A relative path as a model should write it (`.` for the workspace itself).
fn shown(relative: &Path) -> String {
    if relative.as_os_str().is_empty() {
        ".".to_owned()
    } else {
        relative.to_string_lossy().into_owned()
    }
}

/// The refusal for a symbolic link that leads out of the workspace.
pub(crate) fn link_escape_error(raw: &str) -> ToolError {
    escape_error(raw, " (a symbolic link leads out of it)", &suggestion(raw))
}

/// Maps an error of a resolution beneath the root to the tools' common messages, or `None`
/// for errors each tool words itself (`ENOENT`, permissions, ...).
pub(crate) fn resolution_error(raw: &str, errno: Errno) -> Option<ToolError> {
    match errno {
        Errno::XDEV => Some(link_escape_error(raw)),
        Errno::NOTDIR => Some(ToolError::Failed(format!(
            "path `{raw}` goes through a file as if it were a directory"
        ))),
        Errno::LOOP => Some(ToolError::Failed(format!(
            "cannot check path `{raw}`: {}",
            std::io::Error::from(errno)
        ))),
        _ => None,
    }
}

/// The run's workspace, opened once per tool call: every path of the call is resolved
/// beneath this descriptor, never through the workspace's path again.
#[derive(Debug)]
pub(crate) struct Root {
    fd: OwnedFd,
    /// The canonical workspace path, only for naming where an opened directory lies.
    path: PathBuf,
}

impl Root {
    /// Opens the workspace directory (`O_PATH`: no read right needed, nothing to leak).
    pub(crate) fn open(workspace: &Path) -> Result<Self, ToolError> {
        let unusable = |e: std::io::Error| {
            ToolError::Failed(format!(
                "the workspace `{}` is not usable: {e}",
                workspace.display()
            ))
        };
        let fd = rustix::fs::open(
            workspace,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| unusable(e.into()))?;
        let path = workspace.canonicalize().map_err(unusable)?;
        Ok(Self { fd, path })
    }

    /// The workspace descriptor.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Opens `relative` (normalised) beneath the workspace; see [`open_beneath`].
    pub(crate) fn open_at(&self, relative: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
        open_beneath(self.fd(), relative, flags, Mode::empty())
    }

    /// Where the opened directory `dir` is now, relative to the workspace, read from
    /// `/proc/self/fd`; `None` without `/proc` or if it is not under the workspace. Used only
    /// to name the location for the protected-path check, never to open anything.
    pub(crate) fn locate(&self, dir: BorrowedFd<'_>) -> Option<PathBuf> {
        let at = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())).ok()?;
        at.strip_prefix(&self.path).ok().map(Path::to_path_buf)
    }
}

/// Opens `relative` (a normalised workspace path; empty for the workspace itself) beneath
/// `root` with `flags` (`O_CLOEXEC` is added), following symbolic links only while they stay
/// beneath it. `EXDEV` means a link leads out; `ELOOP` with `O_NOFOLLOW` in `flags` means
/// the last component is a symbolic link.
pub(crate) fn open_beneath(
    root: BorrowedFd<'_>,
    relative: &Path,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    let flags = flags | OFlags::CLOEXEC;
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        let target = if relative.as_os_str().is_empty() {
            Path::new(".")
        } else {
            relative
        };
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        let mut last = Errno::AGAIN;
        for _ in 0..EAGAIN_RETRIES {
            match rustix::fs::openat2(root, target, flags, mode, resolve) {
                Err(Errno::AGAIN) => last = Errno::AGAIN,
                Err(Errno::NOSYS) => {
                    NO_OPENAT2.store(true, Ordering::Relaxed);
                    last = Errno::NOSYS;
                    break;
                }
                other => return other,
            }
        }
        if last == Errno::AGAIN {
            return Err(Errno::AGAIN);
        }
    }
    walk_beneath(root, relative, flags, mode)
}

/// The fallback of [`open_beneath`] for kernels without `openat2`: walks `relative` one
/// component at a time with `openat(O_NOFOLLOW)` from a stack of directory descriptors,
/// expanding each symbolic link by hand (absolute targets and `..` above `root` fail with
/// `EXDEV`, more than 40 links with `ELOOP`). Every step is relative to a descriptor
/// already opened beneath `root`, so a concurrent swap cannot lead out either.
pub(crate) fn walk_beneath(
    root: BorrowedFd<'_>,
    relative: &Path,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    let flags = flags | OFlags::CLOEXEC;
    let follow_last = !flags.contains(OFlags::NOFOLLOW);
    let probe_flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut stack: Vec<OwnedFd> = Vec::new();
    let mut pending: VecDeque<OsString> = relative
        .components()
        .map(|c| c.as_os_str().to_owned())
        .collect();
    let mut hops = 0;
    loop {
        let Some(name) = pending.pop_front() else {
            let here = stack.last().map_or(root, AsFd::as_fd);
            return rustix::fs::openat(here, ".", flags, mode);
        };
        if name == ".." {
            if stack.pop().is_none() {
                return Err(Errno::XDEV);
            }
            continue;
        }
        if name == "." || name.is_empty() {
            continue;
        }
        let here = stack.last().map_or(root, AsFd::as_fd);
        let last = pending.is_empty();
        if last && !follow_last {
            return rustix::fs::openat(here, &name, flags | OFlags::NOFOLLOW, mode);
        }
        let probe = match rustix::fs::openat(here, &name, probe_flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) if last => {
                return rustix::fs::openat(here, &name, flags | OFlags::NOFOLLOW, mode);
            }
            Err(e) => return Err(e),
        };
        let kind = FileType::from_raw_mode(rustix::fs::fstat(&probe)?.st_mode);
        if kind != FileType::Symlink {
            if last {
                // Swapped for a link since the probe: ELOOP, never followed.
                return rustix::fs::openat(here, &name, flags | OFlags::NOFOLLOW, mode);
            }
            if kind != FileType::Directory {
                return Err(Errno::NOTDIR);
            }
            stack.push(probe);
            continue;
        }
        hops += 1;
        if hops > MAX_SYMLINK_HOPS {
            return Err(Errno::LOOP);
        }
        let target = rustix::fs::readlinkat(here, &name, Vec::new())?;
        let target = Path::new(OsStr::from_bytes(target.as_bytes()));
        if target.is_absolute() {
            return Err(Errno::XDEV);
        }
        for component in target.components().rev() {
            pending.push_front(component.as_os_str().to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn denied_type(err: &ToolError) -> Option<&str> {
        match err {
            ToolError::Denied { event_type, .. } => Some(event_type),
            _ => None,
        }
    }

    #[test]
    fn normalize_keeps_inside_paths() {
        assert_eq!(normalize("a/b.txt"), Ok(PathBuf::from("a/b.txt")));
        assert_eq!(normalize("./a/./b"), Ok(PathBuf::from("a/b")));
        assert_eq!(normalize("a/../b"), Ok(PathBuf::from("b")));
        assert_eq!(normalize("a/b/../../c"), Ok(PathBuf::from("c")));
        assert_eq!(normalize("."), Ok(PathBuf::new()));
        assert_eq!(normalize(""), Ok(PathBuf::new()));
        assert_eq!(normalize("a/.."), Ok(PathBuf::new()));
        assert_eq!(normalize("a//b/"), Ok(PathBuf::from("a/b")));
    }

    #[test]
    fn normalize_refuses_escapes() {
        assert_eq!(normalize("../x"), Err(Lexical::Escapes));
        assert_eq!(normalize(".."), Err(Lexical::Escapes));
        assert_eq!(normalize("a/../../x"), Err(Lexical::Escapes));
        assert_eq!(normalize("/etc/passwd"), Err(Lexical::Absolute));
        assert_eq!(normalize("/"), Err(Lexical::Absolute));
        assert_eq!(normalize("a\0b"), Err(Lexical::Nul));
    }

    #[test]
    fn suggestions_drop_the_escape() {
        assert_eq!(suggestion("../x"), "x");
        assert_eq!(suggestion("/etc/passwd"), "etc/passwd");
        assert_eq!(suggestion(".."), ".");
        assert_eq!(suggestion("a/../../x"), "x");
    }

    #[test]
    fn escape_message_is_exact() {
        let err = escape_error("../x", "", "x");
        assert_eq!(
            err.to_string(),
            "path `../x` is outside the workspace; use a path relative to the workspace, most likely `x`"
        );
        assert_eq!(denied_type(&err), Some(PATH_ESCAPE));
    }

    type Resolver = fn(BorrowedFd<'_>, &Path, OFlags, Mode) -> Result<OwnedFd, Errno>;

    fn resolvers() -> [Resolver; 2] {
        [open_beneath, walk_beneath]
    }

    fn inode(fd: &OwnedFd) -> u64 {
        rustix::fs::fstat(fd).unwrap().st_ino
    }

    fn ino(path: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).unwrap().ino()
    }

    fn setup() -> (tempfile::TempDir, tempfile::TempDir, Root) {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = Root::open(dir.path()).unwrap();
        (dir, outside, root)
    }

    #[test]
    fn resolves_inside_paths_and_links_that_stay_inside() {
        let (dir, _outside, root) = setup();
        let ws = dir.path();
        std::fs::create_dir_all(ws.join("real/b")).unwrap();
        std::fs::write(ws.join("real/f.txt"), "x").unwrap();
        symlink("real", ws.join("alias")).unwrap();
        symlink("../real", ws.join("real/loop")).unwrap();
        symlink("f.txt", ws.join("real/file_link")).unwrap();
        for resolve in resolvers() {
            let open = |p: &str| resolve(root.fd(), Path::new(p), OFlags::PATH, Mode::empty());
            assert_eq!(inode(&open("").unwrap()), ino(ws));
            assert_eq!(
                inode(&open("alias/f.txt").unwrap()),
                ino(&ws.join("real/f.txt"))
            );
            assert_eq!(
                inode(&open("real/loop/b").unwrap()),
                ino(&ws.join("real/b"))
            );
            assert_eq!(
                inode(&open("real/file_link").unwrap()),
                ino(&ws.join("real/f.txt"))
            );
            assert_eq!(open("missing").unwrap_err(), Errno::NOENT);
            // O_NOFOLLOW refuses a link as the last component.
            let err = resolve(
                root.fd(),
                Path::new("real/file_link"),
                OFlags::RDONLY | OFlags::NOFOLLOW,
                Mode::empty(),
            )
            .unwrap_err();
            assert_eq!(err, Errno::LOOP);
        }
    }

    #[test]
    fn links_that_leave_fail_with_exdev() {
        let (dir, outside, root) = setup();
        let ws = dir.path();
        symlink("/etc", ws.join("etc")).unwrap();
        symlink(outside.path(), ws.join("out")).unwrap();
        symlink("../../nowhere/file", ws.join("dangling")).unwrap();
        std::fs::create_dir(ws.join("d")).unwrap();
        symlink("../..", ws.join("d/up")).unwrap();
        symlink("/proc/self/root", ws.join("magic")).unwrap();
        for resolve in resolvers() {
            for raw in [
                "etc",
                "etc/passwd",
                "out/new.txt",
                "dangling",
                "d/up/x",
                "magic/etc",
            ] {
                let err = resolve(root.fd(), Path::new(raw), OFlags::PATH, Mode::empty());
                assert_eq!(err.unwrap_err(), Errno::XDEV, "{raw}");
            }
        }
    }

    #[test]
    fn loops_files_as_dirs_and_dotdot_after_missing() {
        let (dir, outside, root) = setup();
        let ws = dir.path();
        symlink("b", ws.join("a")).unwrap();
        symlink("a", ws.join("b")).unwrap();
        std::fs::write(ws.join("f"), "x").unwrap();
        symlink(outside.path().join("secret"), ws.join("evil")).unwrap();
        symlink("nope/../evil", ws.join("l")).unwrap();
        for resolve in resolvers() {
            let open = |p: &str| resolve(root.fd(), Path::new(p), OFlags::PATH, Mode::empty());
            assert_eq!(open("a/x").unwrap_err(), Errno::LOOP);
            assert_eq!(open("f/x").unwrap_err(), Errno::NOTDIR);
            // The kernel fails `nope/..` with ENOENT instead of resolving it as text.
            assert_eq!(open("l").unwrap_err(), Errno::NOENT);
        }
    }

    #[test]
    fn resolution_errors_are_worded_for_the_model() {
        let err = resolution_error("out/x", Errno::XDEV).unwrap();
        assert_eq!(
            err.to_string(),
            "path `out/x` is outside the workspace (a symbolic link leads out of it); use a path relative to the workspace, most likely `out/x`"
        );
        assert_eq!(denied_type(&err), Some(PATH_ESCAPE));
        let err = resolution_error("f/x", Errno::NOTDIR).unwrap();
        assert!(err.to_string().contains("through a file"), "{err}");
        assert!(resolution_error("x", Errno::NOENT).is_none());
    }
}
