//! Path confinement: every path a tool receives is relative to the run's workspace and must
//! stay inside it.
//!
//! The rule, in two steps:
//! 1. Lexical ([`normalize`], pure): refuse NUL bytes and absolute paths, drop `.`, and resolve `..` against the components before it. A `..` that stays inside
//!    (`a/../b`) is fine; one that would climb above the workspace (`../x`, `a/../../x`) is
//!    refused. Models write `a/../b` legitimately, and refusing every `..` would only teach
//!    them a rule with no safety gain.
//! 2. On disk ([`confine`]): resolve the normalised path the way the kernel would, following
//!    symbolic links one component at a time (components that do not exist yet are taken
//!    lexically), and refuse it unless the result is under the canonical workspace. This
//!    catches a symlink inside the workspace pointing at `/etc`, a write through a symlinked
//!    directory, and a dangling symlink whose target is outside, which a write would create.
//!
//! The check happens before the file operation, so a process racing the tool could swap a
//! directory for a symlink in between. Race-free confinement (`openat2` with
//! `RESOLVE_BENEATH`, or cap-std) is a later issue; [`confine`] is the one function to
//! replace, and the OS sandbox is the wall in the meantime.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

use fabric_core::ToolError;

/// The `event_type` of a refused path.
pub(crate) const PATH_ESCAPE: &str = "path_escape";

/// How many symbolic links one resolution may follow before giving up, as the kernel does
/// (`ELOOP` after 40).
const MAX_SYMLINK_HOPS: usize = 40;

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
pub(crate) fn escape_error(raw: &str, how: &str) -> ToolError {
    ToolError::Denied {
        event_type: PATH_ESCAPE.to_owned(),
        attempted: raw.to_owned(),
        message: format!(
            "path `{raw}` is outside the workspace{how}; use a path relative to the workspace, such as `{}`",
            suggestion(raw)
        ),
    }
}

fn lexical_error(raw: &str, why: Lexical) -> ToolError {
    match why {
        Lexical::Nul => ToolError::InvalidArguments(
            "path contains a NUL byte; use a plain relative path such as `src/main.rs`".to_owned(),
        ),
        Lexical::Absolute | Lexical::Escapes => escape_error(raw, ""),
    }
}

/// A workspace path that passed the confinement check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Confined {
    /// The normalised relative path, as shown to the model (`.` for the workspace).
    pub(crate) relative: String,
    /// The resolved absolute path to operate on (symlinks inside the workspace followed).
    pub(crate) absolute: PathBuf,
    /// The canonical workspace, for showing other paths relative to it.
    pub(crate) workspace: PathBuf,
}

/// Checks `raw` against the workspace and resolves it; the single confinement point of every
/// file tool. Blocking file-system calls run on the blocking pool.
pub(crate) async fn confine(workspace: &Path, raw: &str) -> Result<Confined, ToolError> {
    let relative = normalize(raw).map_err(|why| lexical_error(raw, why))?;
    let workspace = workspace.to_path_buf();
    let raw_owned = raw.to_owned();
    tokio::task::spawn_blocking(move || confine_blocking(&workspace, &raw_owned, &relative))
        .await
        .map_err(|e| ToolError::Failed(format!("path check did not finish: {e}")))?
}

fn confine_blocking(workspace: &Path, raw: &str, relative: &Path) -> Result<Confined, ToolError> {
    let root = workspace.canonicalize().map_err(|e| {
        ToolError::Failed(format!(
            "the workspace `{}` is not usable: {e}",
            workspace.display()
        ))
    })?;
    let absolute = resolve_beneath(&root, relative).map_err(|e| match e.kind() {
        io::ErrorKind::NotADirectory => ToolError::Failed(format!(
            "path `{raw}` goes through a file as if it were a directory"
        )),
        _ => ToolError::Failed(format!("cannot check path `{raw}`: {e}")),
    })?;
    if !absolute.starts_with(&root) {
        return Err(escape_error(raw, " (a symbolic link leads out of it)"));
    }
    let shown = relative.to_string_lossy();
    Ok(Confined {
        relative: if shown.is_empty() {
            ".".to_owned()
        } else {
            shown.into_owned()
        },
        absolute,
        workspace: root,
    })
}

/// Resolves `relative` under the canonical `root` like the kernel would: symlinks are followed
/// where they exist, missing components are appended lexically (they cannot be links). The
/// result may lie outside `root`; the caller decides.
fn resolve_beneath(root: &Path, relative: &Path) -> io::Result<PathBuf> {
    let mut current = root.to_path_buf();
    let mut pending: VecDeque<OsString> = relative
        .components()
        .map(|c| c.as_os_str().to_owned())
        .collect();
    let mut hops = 0;
    // Once a component is missing, nothing below it exists, so no more lookups are needed.
    let mut missing = false;
    while let Some(name) = pending.pop_front() {
        if name == ".." {
            // The kernel fails `missing/..` with ENOENT; resolving it as text would skip the
            // on-disk checks of everything after it (a link `l -> nope/../evil` with `evil`
            // pointing out of the workspace).
            if missing {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "a symbolic link's `..` follows a directory that does not exist",
                ));
            }
            current.pop();
            continue;
        }
        if name == "." || name.is_empty() {
            continue;
        }
        let next = current.join(&name);
        if missing {
            current = next;
            continue;
        }
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(io::Error::other("too many levels of symbolic links"));
                }
                let target = std::fs::read_link(&next)?;
                if target.is_absolute() {
                    current = PathBuf::from("/");
                }
                // The target's components replace the link, ahead of what was left.
                for component in target.components().rev() {
                    if !matches!(component, Component::RootDir | Component::Prefix(_)) {
                        pending.push_front(component.as_os_str().to_owned());
                    }
                }
            }
            Ok(meta) => {
                if !meta.is_dir() && !pending.is_empty() {
                    return Err(io::Error::from(io::ErrorKind::NotADirectory));
                }
                current = next;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                missing = true;
                current = next;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(current)
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
        let err = escape_error("../x", "");
        assert_eq!(
            err.to_string(),
            "path `../x` is outside the workspace; use a path relative to the workspace, such as `x`"
        );
        assert_eq!(denied_type(&err), Some(PATH_ESCAPE));
    }

    #[tokio::test]
    async fn confine_refuses_lexical_escapes() {
        let dir = tempfile::tempdir().unwrap();
        for raw in ["../x", "a/../../x", "/etc/passwd", ".."] {
            let err = confine(dir.path(), raw).await.unwrap_err();
            assert_eq!(denied_type(&err), Some(PATH_ESCAPE), "{raw}");
            match err {
                ToolError::Denied { attempted, .. } => assert_eq!(attempted, raw),
                other => panic!("{other:?}"),
            }
        }
        let err = confine(dir.path(), "a\0b").await.unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments(_)), "{err:?}");
    }

    #[tokio::test]
    async fn dotdot_after_a_missing_directory_is_not_resolved_as_text() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.join("evil")).unwrap();
        std::os::unix::fs::symlink("nope/../evil", root.join("l")).unwrap();
        let err = confine(&root, "l").await.unwrap_err();
        assert!(
            matches!(err, ToolError::Failed(_) | ToolError::Denied { .. }),
            "{err:?}"
        );
        // The direct route is refused as an escape.
        let err = confine(&root, "evil").await.unwrap_err();
        assert_eq!(denied_type(&err), Some(PATH_ESCAPE));
    }

    #[tokio::test]
    async fn confine_resolves_inside_paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        let ok = confine(dir.path(), "a/b/../new.txt").await.unwrap();
        assert_eq!(ok.relative, "a/new.txt");
        assert_eq!(ok.absolute, root.join("a/new.txt"));
        let ok = confine(dir.path(), "not/yet/there.txt").await.unwrap();
        assert_eq!(ok.absolute, root.join("not/yet/there.txt"));
        let ok = confine(dir.path(), ".").await.unwrap();
        assert_eq!(ok.relative, ".");
        assert_eq!(ok.absolute, root);
    }

    #[tokio::test]
    async fn confine_follows_links_that_stay_inside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("real")).unwrap();
        symlink("real", root.join("alias")).unwrap();
        symlink("../real", root.join("real/loop")).unwrap();
        let ok = confine(dir.path(), "alias/f.txt").await.unwrap();
        assert_eq!(ok.absolute, root.join("real/f.txt"));
        let ok = confine(dir.path(), "real/loop/g.txt").await.unwrap();
        assert_eq!(ok.absolute, root.join("real/g.txt"));
    }

    #[tokio::test]
    async fn confine_refuses_links_that_leave() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        symlink("/etc", root.join("etc")).unwrap();
        symlink(outside.path(), root.join("out")).unwrap();
        // Dangling, relative, pointing out: a write would create the file outside.
        symlink("../../nowhere/file", root.join("dangling")).unwrap();
        std::fs::create_dir(root.join("d")).unwrap();
        symlink("../..", root.join("d/up")).unwrap();
        for raw in ["etc", "etc/passwd", "out/new.txt", "dangling", "d/up/x"] {
            let err = confine(dir.path(), raw).await.unwrap_err();
            assert_eq!(denied_type(&err), Some(PATH_ESCAPE), "{raw}: {err:?}");
        }
    }

    #[tokio::test]
    async fn confine_reports_link_loops_and_files_used_as_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        symlink("b", root.join("a")).unwrap();
        symlink("a", root.join("b")).unwrap();
        std::fs::write(root.join("f"), "x").unwrap();
        let err = confine(dir.path(), "a/x").await.unwrap_err();
        assert!(matches!(err, ToolError::Failed(_)), "{err:?}");
        let err = confine(dir.path(), "f/x").await.unwrap_err();
        assert!(err.to_string().contains("through a file"), "{err}");
    }
}
