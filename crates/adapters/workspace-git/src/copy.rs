//! A run on a directory that is not a git repository (issue #25): the run works in a copy,
//! versioned like a scratch workspace, and `apply` copies the changed files back, refusing,
//! before it writes anything, when one of them changed in the user's directory since the
//! copy was made.

use crate::git::fields;
use crate::open::remove_tree;
use crate::workspace::GitWorkspace;
use fabric_engine::ports::{AppliedRun, ApplyMode, Workspace, WorkspaceError};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Names never copied: the fabric's own directory (its runs may sit inside the user's) and
/// a repository's metadata.
const SKIPPED: &[&str] = &[".fabric", ".git"];

/// The most entries (files, directories, links) a copy may hold: a project, not a disk.
const MAX_ENTRIES: u64 = 50_000;
/// The most bytes a copy may hold.
const MAX_BYTES: u64 = 1 << 30;

/// Copies `source` into `dir` (which must not exist): files, directories and symbolic links
/// as links; not the directories that hold `dir` or `history` (the fabric's own root may be
/// inside `source`), nothing of another kind.
pub(crate) async fn copy_in(
    source: &Path,
    dir: &Path,
    history: &Path,
) -> Result<(), WorkspaceError> {
    let meta = tokio::fs::metadata(source).await;
    if !meta.as_ref().is_ok_and(std::fs::Metadata::is_dir) {
        return Err(WorkspaceError::NotADirectory {
            path: source.to_path_buf(),
        });
    }
    if tokio::fs::symlink_metadata(dir).await.is_ok() {
        return Err(WorkspaceError::DirTaken {
            path: dir.to_path_buf(),
        });
    }
    // Measured before anything is written, so `--project /` is refused at once.
    let measured = source.to_path_buf();
    let avoid = [dir.to_path_buf(), history.to_path_buf()];
    let too_large =
        tokio::task::spawn_blocking(move || measure(&measured, &avoid, (MAX_ENTRIES, MAX_BYTES)))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|r| r)
            .map_err(|e| WorkspaceError::Io {
                action: "cannot read",
                path: source.to_path_buf(),
                detail: e.to_string(),
            })?;
    if let Some(what) = too_large {
        return Err(WorkspaceError::TooLargeToCopy {
            path: source.to_path_buf(),
            what,
        });
    }
    let (from, to, history) = (
        source.to_path_buf(),
        dir.to_path_buf(),
        history.to_path_buf(),
    );
    let copied = tokio::task::spawn_blocking(move || {
        let avoid = [to.clone(), history];
        copy_tree(&from, &to, &avoid)
    })
    .await
    .map_err(|e| std::io::Error::other(e.to_string()))
    .and_then(|r| r);
    if let Err(e) = copied {
        // A copy cut short (a full disk) is not left behind.
        let _ = remove_tree(dir).await;
        return Err(WorkspaceError::Io {
            action: "cannot copy the project's files into",
            path: dir.to_path_buf(),
            detail: format!("{e} (copying {})", source.display()),
        });
    }
    Ok(())
}

/// Walks what [`copy_tree`] would copy, stopping at the first limit passed: `Some(limit)`
/// when the copy would be too large. The root directory is too large by definition.
fn measure(
    source: &Path,
    avoid: &[PathBuf],
    (max_entries, max_bytes): (u64, u64),
) -> std::io::Result<Option<String>> {
    if source.parent().is_none() {
        return Ok(Some("the root of the file system".to_owned()));
    }
    let device = std::fs::metadata(source)?.dev();
    let (mut entries, mut bytes) = (0u64, 0u64);
    let mut stack = vec![source.to_path_buf()];
    while let Some(from) = stack.pop() {
        for entry in std::fs::read_dir(&from)? {
            let entry = entry?;
            let path = entry.path();
            if skipped(&entry.file_name(), &path, avoid) {
                continue;
            }
            entries += 1;
            let meta = entry.metadata()?;
            if meta.is_dir() && meta.dev() == device {
                stack.push(path);
            } else if meta.is_file() {
                bytes += meta.len();
            }
            if entries > max_entries {
                return Ok(Some(format!(
                    "more than {max_entries} files and directories"
                )));
            }
            if bytes > max_bytes {
                return Ok(Some(format!("more than {} MiB", max_bytes >> 20)));
            }
        }
    }
    Ok(None)
}

/// Whether an entry is left out of a copy: a skipped name, or a directory holding the copy
/// or its history.
fn skipped(name: &std::ffi::OsStr, path: &Path, avoid: &[PathBuf]) -> bool {
    SKIPPED.iter().any(|s| name == *s) || avoid.iter().any(|a| a.starts_with(path))
}

/// The copy itself, with an explicit stack (a tree of any depth, no recursion); it stays
/// on the source's file system.
fn copy_tree(source: &Path, dir: &Path, avoid: &[PathBuf]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let device = std::fs::metadata(source)?.dev();
    let mut stack = vec![(source.to_path_buf(), dir.to_path_buf())];
    while let Some((from, to)) = stack.pop() {
        for entry in std::fs::read_dir(&from)? {
            let entry = entry?;
            let name = entry.file_name();
            let path = entry.path();
            if skipped(&name, &path, avoid) {
                continue;
            }
            let target = to.join(&name);
            let kind = entry.file_type()?;
            if kind.is_dir() {
                if entry.metadata()?.dev() != device {
                    continue;
                }
                std::fs::create_dir(&target)?;
                stack.push((path, target));
            } else if kind.is_file() {
                std::fs::copy(&path, &target)?;
            } else if kind.is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(&path)?, &target)?;
            }
        }
    }
    Ok(())
}

/// Brings the run's changes into `source`: each file the run changed against its base is
/// written there (or removed), once every one of them is checked to be as the copy found it.
pub(crate) async fn apply(
    ws: &GitWorkspace,
    source: &Path,
    mode: ApplyMode,
) -> Result<AppliedRun, WorkspaceError> {
    if mode == ApplyMode::Commit {
        return Err(WorkspaceError::NothingToCommitOnto {
            dir: source.to_path_buf(),
        });
    }
    let tip = ws.head().await?;
    let names = ["--name-only", "-z", "--no-renames"];
    let names = ws
        .git
        .diff(&ws.at, &ws.dir, &names, ws.base.as_str(), tip.as_str())
        .await?;
    let touched: Vec<String> = fields(&names).collect();
    let mut changed_there = Vec::new();
    let mut writes = Vec::new();
    for path in &touched {
        let was = blob(ws, ws.base.as_str(), path).await?;
        let now = match tokio::fs::read(source.join(path)).await {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(WorkspaceError::Io {
                    action: "cannot read",
                    path: source.join(path),
                    detail: e.to_string(),
                });
            }
        };
        if was != now {
            changed_there.push(path.clone());
        }
        writes.push((path.clone(), blob(ws, tip.as_str(), path).await?));
    }
    if !changed_there.is_empty() {
        return Err(WorkspaceError::CopyConflict {
            dir: source.to_path_buf(),
            files: changed_there,
        });
    }
    for (path, content) in &writes {
        let target = source.join(path);
        let written = match content {
            Some(bytes) => write_file(&target, bytes).await,
            None => remove_tree(&target).await,
        };
        written?;
    }
    Ok(AppliedRun {
        files: touched,
        commit: None,
    })
}

/// The bytes of `path` in `commit`, or `None` when the commit does not have it.
async fn blob(
    ws: &GitWorkspace,
    commit: &str,
    path: &str,
) -> Result<Option<Vec<u8>>, WorkspaceError> {
    let spec = format!("{commit}:{path}");
    let ran = ws
        .git
        .run(Some(&ws.at), ["cat-file", "blob", &spec], None)
        .await?;
    Ok(ran.ok.then_some(ran.stdout))
}

async fn write_file(target: &Path, bytes: &[u8]) -> Result<(), WorkspaceError> {
    let io = |action: &'static str, e: std::io::Error| WorkspaceError::Io {
        action,
        path: target.to_path_buf(),
        detail: e.to_string(),
    };
    if let Some(parent) = target.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| io("cannot create", e))?;
    }
    tokio::fs::write(target, bytes)
        .await
        .map_err(|e| io("cannot write", e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn issue_25_a_copy_is_measured_against_its_limits_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("src");
        std::fs::create_dir_all(source.join("a/.git")).unwrap();
        for i in 0..5 {
            std::fs::write(source.join(format!("a/f{i}")), vec![b'x'; 1024]).unwrap();
        }
        std::fs::write(source.join("a/.git/skipped"), "x").unwrap();
        let fits = measure(&source, &[], (6, 1 << 20)).unwrap();
        assert_eq!(fits, None, "a, its five files; .git not counted");
        let entries = measure(&source, &[], (5, 1 << 20)).unwrap();
        assert_eq!(
            entries.as_deref(),
            Some("more than 5 files and directories")
        );
        let bytes = measure(&source, &[], (100, 4_000)).unwrap();
        assert!(bytes.unwrap().starts_with("more than"));
        // The directory holding the copy is not counted (nor copied).
        let inside = measure(&source, &[source.join("a/x")], (0, 0)).unwrap();
        assert_eq!(inside, None);
        assert_eq!(
            measure(Path::new("/"), &[], (u64::MAX, u64::MAX))
                .unwrap()
                .as_deref(),
            Some("the root of the file system")
        );
    }
}
