//! A run on a directory that is not a git repository (issue #25): the run works in a copy,
//! versioned like a scratch workspace, and `apply` copies the changed files back, refusing,
//! before it writes anything, when one of them changed in the user's directory since the
//! copy was made.

use crate::git::fields;
use crate::open::{absolute, remove_tree};
use crate::workspace::GitWorkspace;
use fabric_core::ports::{AppliedRun, ApplyMode, Workspace, WorkspaceError};
use std::path::{Path, PathBuf};

/// Names never copied: the fabric's own directory (its runs may sit inside the user's) and
/// a repository's metadata.
const SKIPPED: &[&str] = &[".fabric", ".git"];

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
    let (source, dir, history) = (
        source.to_path_buf(),
        dir.to_path_buf(),
        history.to_path_buf(),
    );
    tokio::task::spawn_blocking(move || copy_tree(&source, &dir, &[&dir, &history]))
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|r| r)
        .map_err(|e| WorkspaceError::Io {
            action: "cannot copy the directory into the run's workspace at",
            path: absolute(Path::new(".")).unwrap_or_default(),
            detail: e.to_string(),
        })
}

/// The copy itself, with an explicit stack (a tree of any depth, no recursion).
fn copy_tree(source: &Path, dir: &Path, avoid: &[&PathBuf]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut stack = vec![(source.to_path_buf(), dir.to_path_buf())];
    while let Some((from, to)) = stack.pop() {
        for entry in std::fs::read_dir(&from)? {
            let entry = entry?;
            let name = entry.file_name();
            let path = entry.path();
            if SKIPPED.iter().any(|s| name == *s) || avoid.iter().any(|a| a.starts_with(&path)) {
                continue;
            }
            let target = to.join(&name);
            let kind = entry.file_type()?;
            if kind.is_dir() {
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
