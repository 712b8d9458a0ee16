//! Staged writes for the critic gate (ADR-048): a staging area is a copy of the workspace
//! beside it (`<run>/staged/<run id>-<member>`), and the specialist's tools work in the copy
//! as if it were the workspace. So every tool's writes are staged, the shell's included,
//! and the OS sandbox confines tool processes to the copy exactly as it confines them to a
//! workspace. A manifest of what was copied (kept outside the copy, where no tool reaches)
//! tells the changes apart: a file whose size or modification time moved, a file that is
//! new, a file that is gone.
//!
//! `std::fs::copy` uses `copy_file_range`, which shares the blocks on filesystems that can
//! (Btrfs, XFS), so copying costs little there; elsewhere it is a plain copy, bounded by
//! [`MAX_STAGED_BYTES`].

mod diff;

use async_trait::async_trait;
use fabric_core::ports::{Applied, ChangeKind, Staged, StagedChange, StagedDiff, Stager};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

/// Most bytes a staging area copies from the workspace.
pub const MAX_STAGED_BYTES: u64 = 1 << 30;
/// Most files (and directories) a staging area copies.
pub const MAX_STAGED_ENTRIES: usize = 100_000;
/// Most characters of the diff shown to the critic.
const MAX_DIFF_CHARS: usize = 60_000;
/// Files larger than this are listed, not diffed.
const MAX_DIFF_FILE_BYTES: u64 = 512 * 1024;

/// Makes staging areas by copying the workspace.
pub struct CopyStager {
    /// Paths the workspace protects (`protected_paths`): staged changes under them are
    /// shown to the critic but never applied.
    protected: Arc<Vec<String>>,
}

impl CopyStager {
    /// A stager that never applies changes under `protected_paths`.
    pub fn new(protected_paths: Vec<String>) -> Self {
        Self {
            protected: Arc::new(protected_paths),
        }
    }
}

#[async_trait]
impl Stager for CopyStager {
    async fn stage(&self, workspace: &Path, name: &str) -> Result<Arc<dyn Staged>, String> {
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            return Err(format!("invalid staging area name `{name}`"));
        }
        let workspace = workspace.to_path_buf();
        let name = name.to_owned();
        let protected = Arc::clone(&self.protected);
        let area = blocking(move || Area::open(workspace, &name, protected)).await?;
        Ok(Arc::new(CopyStaged {
            dir: area.dir.clone(),
            area: Arc::new(area),
        }))
    }
}

/// What one copied path was, as the manifest records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Entry {
    Dir,
    File { size: u64, mtime_ns: u64 },
    Link { target: PathBuf },
}

/// One staging area, its file work done off the async threads.
struct CopyStaged {
    dir: PathBuf,
    area: Arc<Area>,
}

/// Runs blocking file work on the blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| format!("the staging work stopped: {e}"))?
}

/// A staging area: the copy and its manifest.
struct Area {
    workspace: PathBuf,
    dir: PathBuf,
    manifest: BTreeMap<String, Entry>,
    protected: Arc<Vec<String>>,
}

impl Area {
    /// Reopens the area `name` when it exists, or copies the workspace into a new one.
    fn open(workspace: PathBuf, name: &str, protected: Arc<Vec<String>>) -> Result<Self, String> {
        let root = workspace
            .parent()
            .ok_or_else(|| {
                format!(
                    "the workspace {} has no parent directory",
                    workspace.display()
                )
            })?
            .join("staged");
        let dir = root.join(name);
        let manifest_path = root.join(format!("{name}.manifest.json"));
        let manifest = if dir.is_dir() {
            let text = std::fs::read(&manifest_path)
                .map_err(|e| io_error("cannot read", &manifest_path, &e))?;
            serde_json::from_slice(&text)
                .map_err(|e| format!("the manifest {} is damaged: {e}", manifest_path.display()))?
        } else {
            // Copied beside its final name and renamed last, so an area that exists is
            // always whole and has its manifest.
            let partial = root.join(format!("{name}.partial"));
            if partial.exists() {
                std::fs::remove_dir_all(&partial)
                    .map_err(|e| io_error("cannot remove", &partial, &e))?;
            }
            std::fs::create_dir_all(&partial)
                .map_err(|e| io_error("cannot create", &partial, &e))?;
            let mut manifest = BTreeMap::new();
            let mut budget = (MAX_STAGED_BYTES, MAX_STAGED_ENTRIES);
            copy_tree(&workspace, &partial, "", &mut manifest, &mut budget)?;
            let text = serde_json::to_vec(&manifest).map_err(|e| e.to_string())?;
            std::fs::write(&manifest_path, text)
                .map_err(|e| io_error("cannot write", &manifest_path, &e))?;
            std::fs::rename(&partial, &dir).map_err(|e| io_error("cannot create", &dir, &e))?;
            manifest
        };
        let dir = dir
            .canonicalize()
            .map_err(|e| io_error("cannot resolve", &dir, &e))?;
        Ok(Self {
            workspace,
            dir,
            manifest,
            protected,
        })
    }

    /// The protected path `path` lies under, if any.
    fn protected(&self, path: &str) -> Option<String> {
        self.protected
            .iter()
            .find(|p| Path::new(path).starts_with(Path::new(p.as_str())))
            .cloned()
    }

    /// The changes, by path.
    fn changes(&self) -> Result<Vec<(StagedChange, Option<Entry>)>, String> {
        let mut now = BTreeMap::new();
        scan(&self.dir, "", &mut now)?;
        let mut changes = Vec::new();
        for (path, entry) in &now {
            let kind = match (self.manifest.get(path), entry) {
                (_, Entry::Dir) => None,
                (None, _) => Some(ChangeKind::Added),
                (Some(before), after) if before == after => None,
                // Written again with what the workspace holds: no change.
                (Some(Entry::File { .. }), Entry::File { .. })
                    if same_content(&self.dir.join(path), &self.workspace.join(path)) =>
                {
                    None
                }
                (Some(_), _) => Some(ChangeKind::Modified),
            };
            if let Some(kind) = kind {
                changes.push((self.change(path, kind), Some(entry.clone())));
            }
        }
        for (path, entry) in &self.manifest {
            if !matches!(entry, Entry::Dir) && !now.contains_key(path) {
                changes.push((self.change(path, ChangeKind::Deleted), None));
            }
        }
        changes.sort_by(|a, b| a.0.path.cmp(&b.0.path));
        Ok(changes)
    }

    fn change(&self, path: &str, kind: ChangeKind) -> StagedChange {
        StagedChange {
            path: path.to_owned(),
            kind,
            protected: self.protected(path),
        }
    }

    fn diff(&self) -> Result<StagedDiff, String> {
        let changes = self.changes()?;
        let mut text = String::new();
        let mut shown = 0;
        for (change, entry) in &changes {
            let part = self.render(change, entry.as_ref());
            if text.len() + part.len() > MAX_DIFF_CHARS {
                break;
            }
            text.push_str(&part);
            shown += 1;
        }
        if shown < changes.len() {
            let rest: Vec<&str> = changes[shown..]
                .iter()
                .map(|(c, _)| c.path.as_str())
                .collect();
            text.push_str(&format!(
                "(the diff was cut at {MAX_DIFF_CHARS} characters; {} more changed file(s), read them with read_file: {})\n",
                rest.len(),
                rest.join(", ")
            ));
        }
        Ok(StagedDiff {
            changes: changes.into_iter().map(|(c, _)| c).collect(),
            text,
        })
    }

    /// One change in the unified format.
    fn render(&self, change: &StagedChange, entry: Option<&Entry>) -> String {
        let path = &change.path;
        let mut out = match change.kind {
            ChangeKind::Added => format!("--- /dev/null\n+++ b/{path}\n"),
            ChangeKind::Modified => format!("--- a/{path}\n+++ b/{path}\n"),
            ChangeKind::Deleted => format!("--- a/{path}\n+++ /dev/null\n"),
        };
        if let Some(protected) = &change.protected {
            out.push_str(&format!(
                "(under the protected path `{protected}`: this change will NOT be applied)\n"
            ));
        }
        if let Some(Entry::Link { target }) = entry {
            out.push_str(&format!("symbolic link to {}\n", target.display()));
            return out;
        }
        let old = match change.kind {
            ChangeKind::Added => Some(Vec::new()),
            _ => read_small(&self.workspace.join(path)),
        };
        let new = match change.kind {
            ChangeKind::Deleted => Some(Vec::new()),
            _ => read_small(&self.dir.join(path)),
        };
        match (old, new) {
            (Some(old), Some(new)) => match (String::from_utf8(old), String::from_utf8(new)) {
                (Ok(old), Ok(new)) if !old.contains('\0') && !new.contains('\0') => {
                    out.push_str(&diff::hunks(&old, &new));
                }
                (old, new) => out.push_str(&format!(
                    "binary file ({} bytes before, {} after)\n",
                    old.map_or_else(|e| e.as_bytes().len(), |s| s.len()),
                    new.map_or_else(|e| e.as_bytes().len(), |s| s.len())
                )),
            },
            _ => out.push_str(&format!(
                "(larger than {MAX_DIFF_FILE_BYTES} bytes or unreadable: not shown; read it with read_file)\n"
            )),
        }
        out
    }

    fn apply(&self) -> Result<Applied, String> {
        let changes = self.changes()?;
        let mut applied = Applied::default();
        // First every new content beside its target; any failure removes them all and
        // leaves the workspace as it was.
        let mut pending: Vec<(PathBuf, PathBuf, String)> = Vec::new();
        let prepared = (|| {
            for (n, (change, entry)) in changes.iter().enumerate() {
                if change.protected.is_some() {
                    applied.refused.push(change.path.clone());
                    continue;
                }
                let Some(entry) = entry else { continue };
                let target = self.target(&change.path)?;
                let parent = target.parent().unwrap_or(&self.workspace);
                let temp = parent.join(format!(".fabric-staged-{}-{n}", std::process::id()));
                match entry {
                    Entry::File { .. } => {
                        std::fs::copy(self.dir.join(&change.path), &temp)
                            .map_err(|e| io_error("cannot write", &temp, &e))?;
                    }
                    Entry::Link { target } => std::os::unix::fs::symlink(target, &temp)
                        .map_err(|e| io_error("cannot write", &temp, &e))?,
                    Entry::Dir => continue,
                }
                pending.push((temp, target, change.path.clone()));
            }
            Ok::<(), String>(())
        })();
        if let Err(e) = prepared {
            for (temp, _, _) in &pending {
                let _ = std::fs::remove_file(temp);
            }
            return Err(e);
        }
        for (temp, target, path) in pending {
            std::fs::rename(&temp, &target).map_err(|e| io_error("cannot replace", &target, &e))?;
            applied.applied.push(path);
        }
        for (change, _) in &changes {
            if change.kind != ChangeKind::Deleted || change.protected.is_some() {
                continue;
            }
            let target = self.target(&change.path)?;
            match std::fs::symlink_metadata(&target) {
                Ok(meta) if !meta.is_dir() => {
                    std::fs::remove_file(&target)
                        .map_err(|e| io_error("cannot delete", &target, &e))?;
                }
                _ => {}
            }
            applied.applied.push(change.path.clone());
        }
        applied.applied.sort();
        Ok(applied)
    }

    /// Where `path` goes in the workspace, its directories created: every directory on the
    /// way must be a real directory inside the workspace, never a symbolic link (the fabric
    /// applies with its own rights, outside the sandbox, so it must not follow one out).
    fn target(&self, path: &str) -> Result<PathBuf, String> {
        let relative = Path::new(path);
        if relative
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
        {
            return Err(format!("refusing the staged path `{path}`"));
        }
        let mut here = self.workspace.clone();
        let parts: Vec<_> = relative.components().collect();
        for part in &parts[..parts.len().saturating_sub(1)] {
            here.push(part);
            match std::fs::symlink_metadata(&here) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    return Err(format!(
                        "cannot apply `{path}`: `{}` in the workspace is not a directory (or is a symbolic link)",
                        here.display()
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    std::fs::create_dir(&here).map_err(|e| io_error("cannot create", &here, &e))?;
                }
                Err(e) => return Err(io_error("cannot read", &here, &e)),
            }
        }
        Ok(self.workspace.join(relative))
    }
}

#[async_trait]
impl Staged for CopyStaged {
    fn dir(&self) -> &Path {
        &self.dir
    }

    async fn diff(&self) -> Result<StagedDiff, String> {
        let area = Arc::clone(&self.area);
        blocking(move || area.diff()).await
    }

    async fn apply(&self) -> Result<Applied, String> {
        let area = Arc::clone(&self.area);
        blocking(move || area.apply()).await
    }
}

/// Copies `src` into `dst` (which exists), recording each path in `manifest`.
fn copy_tree(
    src: &Path,
    dst: &Path,
    prefix: &str,
    manifest: &mut BTreeMap<String, Entry>,
    budget: &mut (u64, usize),
) -> Result<(), String> {
    let entries = std::fs::read_dir(src).map_err(|e| io_error("cannot read", src, &e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_error("cannot read", src, &e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            return Err(format!(
                "the workspace holds a file name that is not UTF-8 in {}; the critic gate cannot stage it",
                src.display()
            ));
        };
        let path = join(prefix, name);
        budget.1 = budget.1.checked_sub(1).ok_or_else(|| {
            format!("the workspace holds more than {MAX_STAGED_ENTRIES} files; the critic gate copies the workspace and refuses one this large")
        })?;
        let (from, to) = (entry.path(), dst.join(name));
        let meta =
            std::fs::symlink_metadata(&from).map_err(|e| io_error("cannot read", &from, &e))?;
        if meta.is_dir() {
            std::fs::create_dir(&to).map_err(|e| io_error("cannot create", &to, &e))?;
            manifest.insert(path.clone(), Entry::Dir);
            copy_tree(&from, &to, &path, manifest, budget)?;
        } else if meta.is_file() {
            budget.0 = budget.0.checked_sub(meta.len()).ok_or_else(|| {
                format!("the workspace holds more than {MAX_STAGED_BYTES} bytes; the critic gate copies the workspace and refuses one this large")
            })?;
            std::fs::copy(&from, &to).map_err(|e| io_error("cannot copy", &from, &e))?;
            let copied =
                std::fs::symlink_metadata(&to).map_err(|e| io_error("cannot read", &to, &e))?;
            manifest.insert(path, file_entry(&copied));
        } else if meta.is_symlink() {
            let target =
                std::fs::read_link(&from).map_err(|e| io_error("cannot read", &from, &e))?;
            std::os::unix::fs::symlink(&target, &to)
                .map_err(|e| io_error("cannot create", &to, &e))?;
            manifest.insert(path, Entry::Link { target });
        }
        // Sockets, pipes and devices are not work to review; they are not staged.
    }
    Ok(())
}

/// What the staging area holds now, by path.
fn scan(dir: &Path, prefix: &str, out: &mut BTreeMap<String, Entry>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| io_error("cannot read", dir, &e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_error("cannot read", dir, &e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let path = join(prefix, &name);
        let meta = match std::fs::symlink_metadata(entry.path()) {
            Ok(meta) => meta,
            // Removed while scanning: it is gone.
            Err(_) => continue,
        };
        if meta.is_dir() {
            out.insert(path.clone(), Entry::Dir);
            scan(&entry.path(), &path, out)?;
        } else if meta.is_file() {
            out.insert(path, file_entry(&meta));
        } else if meta.is_symlink()
            && let Ok(target) = std::fs::read_link(entry.path())
        {
            out.insert(path, Entry::Link { target });
        }
    }
    Ok(())
}

fn file_entry(meta: &std::fs::Metadata) -> Entry {
    let mtime_ns = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    Entry::File {
        size: meta.len(),
        mtime_ns,
    }
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}/{name}")
    }
}

/// Whether two regular files hold the same bytes (both read without following a link).
fn same_content(a: &Path, b: &Path) -> bool {
    let regular = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file());
    if !regular(a) || !regular(b) {
        return false;
    }
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(ma), Ok(mb)) if ma.len() == mb.len() => {
            matches!((std::fs::read(a), std::fs::read(b)), (Ok(x), Ok(y)) if x == y)
        }
        _ => false,
    }
}

/// A file's bytes when it is a regular file no larger than [`MAX_DIFF_FILE_BYTES`].
fn read_small(path: &Path) -> Option<Vec<u8>> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    (meta.is_file() && meta.len() <= MAX_DIFF_FILE_BYTES)
        .then(|| std::fs::read(path).ok())
        .flatten()
}

fn io_error(what: &str, path: &Path, e: &io::Error) -> String {
    format!("{what} {}: {e}", path.display())
}

#[cfg(test)]
mod tests;
