//! What keeps a workspace's files from choosing what the fabric's git opens (ADR-088).
//!
//! Everything in a workspace is the run's to write, and the fabric's git runs outside the
//! sandbox with the fabric's privileges. git opens another repository where it finds a
//! `.git`: the worktree's own `.git` file, or a nested one, which `git add` records as a
//! gitlink and later commands enter, running what *that* repository configures. So:
//! - the fabric names the repository on every command ([`crate::git::At::Split`]): a
//!   worktree's `.git` file is never read, and is put back when a run changed it, so the
//!   user's own git in that directory opens the right repository too;
//! - before a checkpoint records new directories, every `.git` below them (directory, file
//!   or link) is removed, so git sees plain directories and records their files as files.

use fabric_engine::ports::WorkspaceError;
use std::path::{Path, PathBuf};

/// The name git looks for.
const DOT_GIT: &str = ".git";

/// The administrative directory of the worktree at `dir` among the worktrees of the
/// repository whose common directory is `common`: the one whose `gitdir` file names
/// `dir/.git`. Read from the user's repository only (a run cannot write there), never from
/// the workspace.
pub(crate) async fn admin_dir(
    common: &Path,
    dir: &Path,
) -> Result<Option<PathBuf>, WorkspaceError> {
    let (common, dir) = (common.to_path_buf(), dir.to_path_buf());
    blocking(&common.clone(), move || find_admin(&common, &dir)).await
}

fn find_admin(common: &Path, dir: &Path) -> std::io::Result<Option<PathBuf>> {
    let want = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let entries = match std::fs::read_dir(common.join("worktrees")) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let admin = entry?.path();
        let Ok(named) = std::fs::read_to_string(admin.join("gitdir")) else {
            continue;
        };
        let named = Path::new(named.trim_end_matches(['\n', '\r']));
        let Some(worktree) = named.parent() else {
            continue;
        };
        let worktree = worktree
            .canonicalize()
            .unwrap_or_else(|_| worktree.to_path_buf());
        if worktree == want {
            return Ok(Some(admin.canonicalize().unwrap_or(admin)));
        }
    }
    Ok(None)
}

/// The text of a worktree's `.git` file pointing at `admin`, as git writes it.
fn link_text(admin: &Path) -> String {
    format!("gitdir: {}\n", admin.display())
}

/// Whether the file at `path` (a worktree's `.git`, in `dir`) points at `admin`, in git's
/// absolute or relative spelling (`worktree.useRelativePaths`).
fn points_at(path: &Path, dir: &Path, admin: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    let Some(named) = text.strip_prefix("gitdir: ") else {
        return false;
    };
    let named = dir.join(named.trim_end_matches(['\n', '\r']));
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    canonical(&named) == canonical(admin)
}

/// Puts `dir/.git` back as the file pointing at `admin` when it is anything else (a run
/// rewrote it, replaced it by a directory or a link, or removed it). `Ok(true)` when it had
/// to.
pub(crate) async fn restore_link(dir: &Path, admin: &Path) -> Result<bool, WorkspaceError> {
    let (path, text) = (dir.join(DOT_GIT), link_text(admin));
    let (dir, admin) = (dir.to_path_buf(), admin.to_path_buf());
    blocking(&path.clone(), move || {
        let meta = std::fs::symlink_metadata(&path);
        if meta.as_ref().is_ok_and(|m| m.is_file() && m.len() < 4096)
            && points_at(&path, &dir, &admin)
        {
            return Ok(false);
        }
        if meta.is_ok() {
            fabric_engine::fs::remove_tree(&path)?;
        }
        // A new file, never through whatever stood there.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        std::io::Write::write_all(&mut file, text.as_bytes())?;
        Ok(true)
    })
    .await
}

/// Removes every `.git` below the directories `dirs` (workspace-relative, as `git status`
/// names untracked directories, ending with `/`) of the workspace `top`; returns the removed
/// entries' workspace-relative paths. Links are removed as links and never followed; a
/// directory the fabric cannot read is one git cannot enter either.
pub(crate) async fn remove_nested(
    top: &Path,
    dirs: Vec<String>,
) -> Result<Vec<String>, WorkspaceError> {
    if dirs.is_empty() {
        return Ok(Vec::new());
    }
    let top = top.to_path_buf();
    blocking(&top.clone(), move || {
        let mut removed = Vec::new();
        for dir in dirs {
            let mut stack = vec![PathBuf::from(dir.trim_end_matches('/'))];
            while let Some(relative) = stack.pop() {
                let Ok(entries) = std::fs::read_dir(top.join(&relative)) else {
                    continue;
                };
                for entry in entries.flatten() {
                    let name = relative.join(entry.file_name());
                    if entry.file_name() == DOT_GIT {
                        fabric_engine::fs::remove_tree(&entry.path())?;
                        removed.push(name.display().to_string());
                    } else if entry.file_type().is_ok_and(|t| t.is_dir()) {
                        stack.push(name);
                    }
                }
            }
        }
        removed.sort();
        Ok(removed)
    })
    .await
}

/// Runs `work` off the async threads (it walks or writes the disk); an error names `path`.
async fn blocking<T: Send + 'static>(
    path: &Path,
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, WorkspaceError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|r| r)
        .map_err(|e| WorkspaceError::Io {
            action: "cannot guard",
            path: path.to_path_buf(),
            detail: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn nested_git_entries_of_every_kind_are_removed_and_named() {
        let top = tempfile::tempdir().expect("tempdir");
        let t = top.path();
        std::fs::create_dir_all(t.join("a/.git/hooks")).expect("mkdir");
        std::fs::write(t.join("a/.git/config"), "[core]\n").expect("write");
        std::fs::write(t.join("a/kept.txt"), "kept").expect("write");
        std::fs::create_dir_all(t.join("a/deep/er")).expect("mkdir");
        std::fs::write(t.join("a/deep/er/.git"), "gitdir: /elsewhere\n").expect("write");
        std::fs::create_dir_all(t.join("b")).expect("mkdir");
        std::os::unix::fs::symlink("/", t.join("b/.git")).expect("link");
        let removed = remove_nested(t, vec!["a/".into(), "b/".into(), "gone/".into()])
            .await
            .expect("removed");
        assert_eq!(removed, ["a/.git", "a/deep/er/.git", "b/.git"]);
        assert!(t.join("a/kept.txt").exists());
        assert!(std::fs::symlink_metadata(t.join("b/.git")).is_err());
        // The link was removed, not followed.
        assert!(Path::new("/").exists());
    }

    #[tokio::test]
    async fn a_changed_worktree_link_is_put_back() {
        let top = tempfile::tempdir().expect("tempdir");
        let admin = top.path().join("admin");
        let dir = top.path().join("wt");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join(".git"), link_text(&admin)).expect("write");
        assert!(!restore_link(&dir, &admin).await.expect("checked"));
        std::fs::write(dir.join(".git"), "gitdir: /somewhere/else\n").expect("write");
        assert!(restore_link(&dir, &admin).await.expect("restored"));
        std::fs::remove_file(dir.join(".git")).expect("rm");
        std::fs::create_dir_all(dir.join(".git/hooks")).expect("mkdir");
        assert!(restore_link(&dir, &admin).await.expect("restored"));
        assert_eq!(
            std::fs::read_to_string(dir.join(".git")).expect("read"),
            link_text(&admin)
        );
    }
}
