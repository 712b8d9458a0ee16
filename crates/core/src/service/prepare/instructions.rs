//! Finding a project's instruction files (issue #43): `AGENTS.md` (else `CLAUDE.md`) in the
//! repository's root, in each directory down to the one the run was given, and in the
//! directories below it; and the user's own file. The rule of the block they make is the
//! domain's ([`Instructions::assemble`]); this reads the disk.
//!
//! Read from the user's working tree (`--project PATH`), which the run's tools never write,
//! so a run reads the same files when it is continued. A repository is hostile input: a link
//! is never followed (a `AGENTS.md` pointing at `~/.ssh/id_rsa` would put the key in front
//! of a model), the walk is bounded in directories and depth, and hidden directories and the
//! usual build output (`node_modules`, `target`) are not entered.

use fabric_domain::instructions::FILE_NAMES;
use fabric_domain::{InstructionScope, InstructionSource, Instructions};
use std::fs;
use std::path::{Path, PathBuf};

/// Most directories looked into below the project's directory.
const MAX_DIRS: usize = 10_000;
/// Deepest directory looked into, counted from the project's directory.
const MAX_DEPTH: usize = 12;
/// A file larger than this is not read (it could never fit a budget).
const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Directories never entered: build output and dependencies.
const SKIPPED_DIRS: [&str; 2] = ["node_modules", "target"];

/// How a project run's instructions are made (`instructions:` in the config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstructionsPolicy {
    /// The budget of their text in bytes; 0 reads none.
    pub max_bytes: usize,
    /// The user's own file, read for every project run when it exists.
    pub user_file: Option<PathBuf>,
}

impl Default for InstructionsPolicy {
    fn default() -> Self {
        Self {
            max_bytes: fabric_domain::instructions::DEFAULT_MAX_BYTES,
            user_file: None,
        }
    }
}

/// The instructions of a run on `project`, read in the blocking pool.
pub(crate) async fn gather(project: &Path, policy: &InstructionsPolicy) -> Instructions {
    if policy.max_bytes == 0 {
        return Instructions::default();
    }
    let (project, policy) = (project.to_path_buf(), policy.clone());
    let found = tokio::task::spawn_blocking(move || find(&project, policy.user_file.as_deref()))
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "reading the project's instructions failed");
            Vec::new()
        });
    Instructions::assemble(found, policy.max_bytes)
}

/// Every instruction file of a run on `project`, in no particular order.
fn find(project: &Path, user_file: Option<&Path>) -> Vec<InstructionSource> {
    let mut found = Vec::new();
    if let Some(file) = user_file
        && let Some(text) = read(file)
    {
        found.push(source(shown_user_path(file), InstructionScope::User, text));
    }
    let root = repository_root(project);
    for dir in chain(&root, project) {
        found.extend(in_dir(&root, &dir));
    }
    let mut dirs = 0usize;
    walk(project, 0, &mut dirs, &mut |dir| {
        found.extend(in_dir(&root, dir))
    });
    found
}

/// The nearest directory at or above `project` holding `.git` (a directory, or the file of a
/// worktree); `project` itself when there is none.
fn repository_root(project: &Path) -> PathBuf {
    project
        .ancestors()
        .find(|dir| fs::symlink_metadata(dir.join(".git")).is_ok())
        .unwrap_or(project)
        .to_path_buf()
}

/// `root`, then each directory below it down to `project` (inclusive).
fn chain(root: &Path, project: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = project
        .ancestors()
        .take_while(|dir| dir.starts_with(root))
        .map(Path::to_path_buf)
        .collect();
    dirs.reverse();
    dirs
}

/// Calls `visit` with each directory strictly below `dir`, depth first, within the bounds.
fn walk(dir: &Path, depth: usize, dirs: &mut usize, visit: &mut dyn FnMut(&Path)) {
    if depth >= MAX_DEPTH {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut children: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        // `file_type` does not follow links: a link to a directory is not entered.
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            !name.starts_with('.') && !SKIPPED_DIRS.contains(&name.as_ref())
        })
        .map(|e| e.path())
        .collect();
    children.sort();
    for child in children {
        if *dirs >= MAX_DIRS {
            tracing::warn!(dir = %dir.display(), "instruction files: the walk stopped at {MAX_DIRS} directories");
            return;
        }
        *dirs += 1;
        visit(&child);
        walk(&child, depth + 1, dirs, visit);
    }
}

/// The instruction file of `dir`: its `AGENTS.md`, else its `CLAUDE.md`.
fn in_dir(root: &Path, dir: &Path) -> Option<InstructionSource> {
    let relative = dir.strip_prefix(root).ok()?;
    let scope = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/");
    FILE_NAMES.iter().find_map(|name| {
        let text = read(&dir.join(name))?;
        let path = if scope.is_empty() {
            (*name).to_owned()
        } else {
            format!("{scope}/{name}")
        };
        Some(source(
            path,
            InstructionScope::Directory(scope.clone()),
            text,
        ))
    })
}

/// The text of `file` when it is a regular file (not a link) of a readable size.
fn read(file: &Path) -> Option<Vec<u8>> {
    let meta = fs::symlink_metadata(file).ok()?;
    if !meta.is_file() {
        if meta.file_type().is_symlink() {
            tracing::warn!(file = %file.display(), "instruction file is a link; not followed");
        }
        return None;
    }
    if meta.len() > MAX_FILE_BYTES {
        tracing::warn!(file = %file.display(), bytes = meta.len(), "instruction file too large; not read");
        return None;
    }
    fs::read(file).ok()
}

fn source(path: String, scope: InstructionScope, bytes: Vec<u8>) -> InstructionSource {
    InstructionSource {
        path,
        scope,
        sha256: fabric_engine::conversation::sha256_hex(&bytes),
        text: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// The user's file as `~/…` when it is under `$HOME`, else as it is.
fn shown_user_path(file: &Path) -> String {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    match home.as_deref().and_then(|h| file.strip_prefix(h).ok()) {
        Some(rest) => format!("~/{}", rest.display()),
        None => file.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn write(root: &Path, path: &str, text: &str) {
        let file = root.join(path);
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(file, text).unwrap();
    }

    fn paths(found: &Instructions) -> Vec<&str> {
        found.files.iter().map(|f| f.path.as_str()).collect()
    }

    #[tokio::test]
    async fn the_chain_from_the_root_and_the_files_below_are_read_nearest_last() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir(root.join(".git")).unwrap();
        write(root, "AGENTS.md", "root rules");
        write(root, "CLAUDE.md", "ignored: AGENTS.md is there");
        write(root, "app/CLAUDE.md", "app rules");
        write(root, "app/src/AGENTS.md", "src rules");
        write(root, "other/AGENTS.md", "not on the way");
        write(root, "app/node_modules/x/AGENTS.md", "never");
        write(root, "app/.hidden/AGENTS.md", "never");
        let user = root.join("user-AGENTS.md");
        fs::write(&user, "mine").unwrap();
        let policy = InstructionsPolicy {
            max_bytes: 1000,
            user_file: Some(user),
        };
        let found = gather(&root.join("app"), &policy).await;
        assert_eq!(
            paths(&found)[1..],
            ["AGENTS.md", "app/CLAUDE.md", "app/src/AGENTS.md"]
        );
        assert!(found.text.contains("root rules") && found.text.contains("src rules"));
        assert!(!found.text.contains("never") && !found.text.contains("not on the way"));
        assert!(found.text.find("mine").unwrap() < found.text.find("root rules").unwrap());
    }

    #[tokio::test]
    async fn a_link_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir(root.join(".git")).unwrap();
        let secret = dir.path().join("secret");
        fs::write(&secret, "PRIVATE KEY").unwrap();
        std::os::unix::fs::symlink(&secret, root.join("AGENTS.md")).unwrap();
        let found = gather(root, &InstructionsPolicy::default()).await;
        assert!(found.is_empty(), "{found:?}");
    }

    #[tokio::test]
    async fn a_budget_of_zero_reads_nothing() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "AGENTS.md", "rules");
        let policy = InstructionsPolicy {
            max_bytes: 0,
            user_file: None,
        };
        assert!(gather(dir.path(), &policy).await.is_empty());
    }
}
