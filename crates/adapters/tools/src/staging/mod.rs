//! Staged writes for the critic gate (ADR-048): a staging area is a copy of the workspace
//! beside it (`<run>/staged/<run id>-<member>`), and the specialist's tools work in the copy
//! as if it were the workspace. So every tool's writes are staged, the shell's included,
//! and the OS sandbox confines tool processes to the copy exactly as it confines them to a
//! workspace. A manifest of what was copied (kept outside the copy, where no tool reaches)
//! tells the changes apart: a file whose size, modification or change time moved (and whose
//! bytes differ), a file that is new, a file that is gone. It also keeps each workspace
//! file's stamp at copy time, so applying refuses to overwrite a file someone else changed
//! meanwhile (another member of a parallel task force).
//!
//! Every read and write after the first directory is opened goes through directory
//! descriptors and refuses symbolic links ([`fsat`]): the fabric applies with its own rights,
//! so a tool process swapping a directory for a link must not lead it out.
//!
//! `std::fs::copy` uses `copy_file_range`, which shares the blocks on filesystems that can
//! (Btrfs, XFS), so copying costs little there; elsewhere it is a plain copy, bounded by
//! [`MAX_STAGED_BYTES`].

mod diff;
mod fsat;

use async_trait::async_trait;
use fabric_engine::ports::{
    Applied, ChangeKind, Staged, StagedChange, StagedDiff, Stager, StagingError,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use fsat::Stamp;

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
    /// Most bytes and entries an area copies ([`MAX_STAGED_BYTES`], [`MAX_STAGED_ENTRIES`];
    /// smaller in tests, which cannot copy a gigabyte to prove the limit).
    limits: (u64, usize),
}

impl CopyStager {
    /// A stager that never applies changes under `protected_paths`.
    pub fn new(protected_paths: Vec<String>) -> Self {
        Self {
            protected: Arc::new(protected_paths),
            limits: (MAX_STAGED_BYTES, MAX_STAGED_ENTRIES),
        }
    }
}

#[async_trait]
impl Stager for CopyStager {
    async fn stage(&self, workspace: &Path, name: &str) -> Result<Arc<dyn Staged>, StagingError> {
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            return Err(StagingError::Refused(format!(
                "invalid staging area name `{name}`"
            )));
        }
        let workspace = workspace.to_path_buf();
        let name = name.to_owned();
        let protected = Arc::clone(&self.protected);
        let limits = self.limits;
        let area = blocking(move || Area::open(workspace, &name, protected, limits)).await?;
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
    /// A file: the staged copy's stamp, and the workspace original's (`None` for a file
    /// that appeared in the staging area).
    File {
        stamp: Stamp,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<Stamp>,
    },
    Link {
        target: PathBuf,
    },
}

/// One staging area, its file work done off the async threads.
struct CopyStaged {
    dir: PathBuf,
    area: Arc<Area>,
}

/// Runs blocking file work on the blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StagingError> + Send + 'static,
) -> Result<T, StagingError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| StagingError::Io(format!("the staging work stopped: {e}")))?
}

/// Names of temporary files in the workspace, unique in the process.
static TEMP: AtomicU64 = AtomicU64::new(0);

/// A staging area: the copy and its manifest.
struct Area {
    workspace: PathBuf,
    dir: PathBuf,
    manifest: BTreeMap<String, Entry>,
    protected: Arc<Vec<String>>,
}

impl Area {
    /// Reopens the area `name` when it exists, or copies the workspace into a new one.
    fn open(
        workspace: PathBuf,
        name: &str,
        protected: Arc<Vec<String>>,
        limits: (u64, usize),
    ) -> Result<Self, StagingError> {
        let root = workspace
            .parent()
            .ok_or_else(|| {
                StagingError::Io(format!(
                    "the workspace {} has no parent directory",
                    workspace.display()
                ))
            })?
            .join("staged");
        let dir = root.join(name);
        let manifest_path = root.join(format!("{name}.manifest.json"));
        let manifest = if dir.is_dir() {
            let text = std::fs::read(&manifest_path)
                .map_err(|e| io_error("cannot read", &manifest_path, &e))?;
            serde_json::from_slice(&text).map_err(|e| {
                StagingError::Io(format!(
                    "the manifest {} is damaged: {e}",
                    manifest_path.display()
                ))
            })?
        } else {
            // Copied beside its final name and renamed last, so an area that exists is
            // always whole and has its manifest.
            let partial = root.join(format!("{name}.partial"));
            if partial.exists() {
                fabric_engine::fs::remove_tree(&partial)
                    .map_err(|e| io_error("cannot remove", &partial, &e))?;
            }
            std::fs::create_dir_all(&partial)
                .map_err(|e| io_error("cannot create", &partial, &e))?;
            let from =
                fsat::open_root(&workspace).map_err(|e| io_error("cannot open", &workspace, &e))?;
            let to =
                fsat::open_root(&partial).map_err(|e| io_error("cannot open", &partial, &e))?;
            let mut manifest = BTreeMap::new();
            let mut budget = limits;
            if let Err(e) = copy_tree(
                from.as_fd(),
                to.as_fd(),
                "",
                &mut manifest,
                &mut budget,
                limits,
            ) {
                // A refused copy can be up to a gigabyte: not left behind until the next try.
                if let Err(removing) = fabric_engine::fs::remove_tree(&partial) {
                    tracing::warn!("cannot remove {}: {removing}", partial.display());
                }
                return Err(e.context(&format!(
                    "cannot stage the workspace {}",
                    workspace.display()
                )));
            }
            let text =
                serde_json::to_vec(&manifest).map_err(|e| StagingError::Io(e.to_string()))?;
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

    fn roots(&self) -> Result<(OwnedFd, OwnedFd), StagingError> {
        let ws = fsat::open_root(&self.workspace)
            .map_err(|e| io_error("cannot open", &self.workspace, &e))?;
        let st = fsat::open_root(&self.dir).map_err(|e| io_error("cannot open", &self.dir, &e))?;
        Ok((ws, st))
    }

    /// The protected path `path` lies under, if any.
    fn protected(&self, path: &str) -> Option<String> {
        self.protected
            .iter()
            .find(|p| Path::new(path).starts_with(Path::new(p.as_str())))
            .cloned()
    }

    /// The changes, by path, with what the staging area holds for each.
    fn changes(
        &self,
        ws: BorrowedFd<'_>,
        st: BorrowedFd<'_>,
    ) -> Result<Vec<(StagedChange, Option<Entry>)>, StagingError> {
        let mut now = BTreeMap::new();
        scan(st, "", &mut now).map_err(|e| {
            e.context(&format!(
                "cannot read the staging area {}",
                self.dir.display()
            ))
        })?;
        let mut changes = Vec::new();
        for (path, entry) in &now {
            let kind = match (self.manifest.get(path), entry) {
                (_, Entry::Dir) => None,
                (None, _) => Some(ChangeKind::Added),
                (Some(Entry::File { stamp: before, .. }), Entry::File { stamp: after, .. })
                    if before == after =>
                {
                    None
                }
                // Written again with what the workspace holds: no change.
                (Some(Entry::File { .. }), Entry::File { .. })
                    if same_file(ws, st, Path::new(path)) =>
                {
                    None
                }
                (Some(before), after) if before == after => None,
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

    fn diff(&self) -> Result<StagedDiff, StagingError> {
        let (ws, st) = self.roots()?;
        let changes = self.changes(ws.as_fd(), st.as_fd())?;
        let mut text = String::new();
        let mut shown = 0;
        for (change, entry) in &changes {
            let part = render(ws.as_fd(), st.as_fd(), change, entry.as_ref());
            if text.len() + part.len() > MAX_DIFF_CHARS {
                break;
            }
            text.push_str(&part);
            shown += 1;
        }
        if shown < changes.len() {
            let rest: Vec<String> = changes[shown..]
                .iter()
                .map(|(c, _)| shown_path(&c.path))
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

    fn apply(&self) -> Result<Applied, StagingError> {
        let (ws, st) = self.roots()?;
        let changes = self.changes(ws.as_fd(), st.as_fd())?;
        let mut applied = Applied::default();
        let mut plan = Vec::new();
        for (change, entry) in &changes {
            if change.protected.is_some() {
                applied.refused.push(change.path.clone());
            } else {
                plan.push((change, entry.as_ref()));
            }
        }
        // First every new content beside its target, checking nobody changed the target
        // since it was staged; any failure removes them all: nothing is applied.
        let mut pending: Vec<Pending> = Vec::new();
        let mut deletions: Vec<(OwnedFd, OsString, &str)> = Vec::new();
        let prepared = (|| {
            for (change, entry) in &plan {
                let path = Path::new(&change.path);
                if path
                    .components()
                    .any(|c| !matches!(c, Component::Normal(_)))
                {
                    return Err(StagingError::Refused(format!(
                        "refusing the staged path `{}`",
                        shown_path(&change.path)
                    )));
                }
                // What the workspace must still hold for the staged version to replace it.
                let expect = match self.manifest.get(&change.path) {
                    Some(Entry::File {
                        origin: Some(stamp),
                        ..
                    }) => Expect::Stamp(*stamp),
                    Some(_) => Expect::Anything,
                    None => Expect::Absent,
                };
                match entry {
                    None => {
                        let Some((parent, name)) = fsat::parent_of(ws.as_fd(), path, false)
                            .map_err(|e| self.apply_error(&change.path, &e))?
                        else {
                            continue;
                        };
                        self.check_unchanged(parent.as_fd(), &name, expect, &change.path)?;
                        deletions.push((parent, name, &change.path));
                    }
                    Some(Entry::Dir) => {}
                    Some(staged) => {
                        let (parent, name) = fsat::parent_of(ws.as_fd(), path, true)
                            .map_err(|e| self.apply_error(&change.path, &e))?
                            .ok_or_else(|| {
                                StagingError::Io(format!(
                                    "cannot apply `{}`",
                                    shown_path(&change.path)
                                ))
                            })?;
                        if let Entry::File { .. } = staged
                            && same_file(ws.as_fd(), st.as_fd(), path)
                        {
                            // Applied already (a run continued after its process stopped).
                            applied.applied.push(change.path.clone());
                            continue;
                        }
                        self.check_unchanged(parent.as_fd(), &name, expect, &change.path)?;
                        let temp = OsString::from(format!(
                            ".fabric-staged-{}-{}",
                            std::process::id(),
                            TEMP.fetch_add(1, Ordering::Relaxed)
                        ));
                        // Pushed before it is written, so a failure still removes it.
                        pending.push(Pending {
                            dir: parent,
                            temp: temp.clone(),
                            name,
                            path: &change.path,
                        });
                        let last = pending.last().map(|p| p.dir.as_fd());
                        let dir = last.ok_or_else(|| {
                            StagingError::Io("internal: no pending entry".to_owned())
                        })?;
                        write_temp(dir, &temp, st.as_fd(), path, staged)
                            .map_err(|e| self.apply_error(&change.path, &e))?;
                    }
                }
            }
            Ok::<(), StagingError>(())
        })();
        if let Err(e) = prepared {
            remove_temps(&pending);
            return Err(e.context("nothing was applied"));
        }
        let total = pending.len() + deletions.len();
        for (done, p) in pending.iter().enumerate() {
            if let Err(e) = rustix::fs::renameat(p.dir.as_fd(), &p.temp, p.dir.as_fd(), &p.name) {
                remove_temps(&pending[done..]);
                return Err(StagingError::Io(format!(
                    "applying stopped after {done} of {total} change(s): cannot replace `{}` ({}); the workspace holds part of the changes",
                    shown_path(p.path),
                    io::Error::from(e)
                )));
            }
            applied.applied.push(p.path.to_owned());
        }
        for (done, (dir, name, path)) in deletions.iter().enumerate() {
            match rustix::fs::unlinkat(dir.as_fd(), name, rustix::fs::AtFlags::empty()) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => applied.applied.push((*path).to_owned()),
                Err(e) => {
                    return Err(StagingError::Io(format!(
                        "applying stopped after {} of {total} change(s): cannot delete `{}` ({}); the workspace holds part of the changes",
                        pending.len() + done,
                        shown_path(path),
                        io::Error::from(e)
                    )));
                }
            }
        }
        applied.applied.sort();
        Ok(applied)
    }

    /// Refuses to replace or delete a workspace file that changed since it was staged (or,
    /// for a new file, one that appeared since).
    fn check_unchanged(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        expect: Expect,
        path: &str,
    ) -> Result<(), StagingError> {
        let now = fsat::lstat(dir, name).map_err(|e| self.apply_error(path, &e))?;
        let unchanged = match (&now, expect) {
            (None, _) | (_, Expect::Anything) => true,
            (Some(meta), Expect::Stamp(stamp)) => meta.is_file() && Stamp::of(meta) == stamp,
            (Some(_), Expect::Absent) => false,
        };
        if unchanged {
            Ok(())
        } else {
            Err(StagingError::Conflict(format!(
                "`{}` in the workspace changed since the work was staged (another member of the task force, or a process outside the fabric); the staged version would overwrite that change",
                shown_path(path)
            )))
        }
    }

    fn apply_error(&self, path: &str, e: &io::Error) -> StagingError {
        let why =
            if e.raw_os_error() == Some(libc_eloop()) || e.raw_os_error() == Some(libc_enotdir()) {
                "a directory on its way in the workspace is a symbolic link or not a directory"
                    .to_owned()
            } else {
                e.to_string()
            };
        StagingError::Io(format!("cannot apply `{}`: {why}", shown_path(path)))
    }
}

/// What a workspace path must hold for a staged change to replace it.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// The file as it was copied.
    Stamp(Stamp),
    /// Nothing: the staged file is new.
    Absent,
    /// Whatever (a link or directory, which have no stamp).
    Anything,
}

/// A new content written beside its target, waiting for its rename.
struct Pending<'a> {
    dir: OwnedFd,
    temp: OsString,
    name: OsString,
    path: &'a str,
}

fn remove_temps(pending: &[Pending<'_>]) {
    for p in pending {
        let _ = rustix::fs::unlinkat(p.dir.as_fd(), &p.temp, rustix::fs::AtFlags::empty());
    }
}

fn libc_eloop() -> i32 {
    rustix::io::Errno::LOOP.raw_os_error()
}

fn libc_enotdir() -> i32 {
    rustix::io::Errno::NOTDIR.raw_os_error()
}

/// Writes the staged version of `path` as `temp` in `dir`.
fn write_temp(
    dir: BorrowedFd<'_>,
    temp: &OsStr,
    st: BorrowedFd<'_>,
    path: &Path,
    staged: &Entry,
) -> io::Result<()> {
    match staged {
        Entry::File { .. } => {
            let (mut from, meta) = fsat::open_file_at(st, path)?;
            let mut to = fsat::create_new(dir, temp, meta.permissions().mode())?;
            io::copy(&mut from, &mut to)?;
            to.set_permissions(std::fs::Permissions::from_mode(
                meta.permissions().mode() & 0o777,
            ))?;
            Ok(())
        }
        Entry::Link { target } => Ok(rustix::fs::symlinkat(target, dir, temp)?),
        Entry::Dir => Ok(()),
    }
}

#[async_trait]
impl Staged for CopyStaged {
    fn dir(&self) -> &Path {
        &self.dir
    }

    async fn diff(&self) -> Result<StagedDiff, StagingError> {
        let area = Arc::clone(&self.area);
        blocking(move || area.diff()).await
    }

    async fn apply(&self) -> Result<Applied, StagingError> {
        let area = Arc::clone(&self.area);
        blocking(move || area.apply()).await
    }

    async fn discard(&self) {
        let area = Arc::clone(&self.area);
        let _ = blocking(move || {
            let name = area
                .dir
                .file_name()
                .map(OsStr::to_owned)
                .unwrap_or_default();
            if let Some(root) = area.dir.parent() {
                let mut manifest = name.clone();
                manifest.push(".manifest.json");
                let _ = std::fs::remove_file(root.join(manifest));
            }
            fabric_engine::fs::remove_tree(&area.dir)
                .map_err(|e| StagingError::Io(e.to_string()))?;
            // `staged/` itself goes with its last area (issue #26: an empty one stayed);
            // one still holding another member's area is not empty and stays.
            if let Some(root) = area.dir.parent() {
                let _ = std::fs::remove_dir(root);
            }
            Ok::<(), StagingError>(())
        })
        .await;
    }
}

/// Copies the directory `from` into `to` (which exists), recording each path in `manifest`.
fn copy_tree(
    from: BorrowedFd<'_>,
    to: BorrowedFd<'_>,
    prefix: &str,
    manifest: &mut BTreeMap<String, Entry>,
    budget: &mut (u64, usize),
    limits: (u64, usize),
) -> Result<(), StagingError> {
    let names = fsat::entries(from).map_err(|e| list_error(prefix, &e))?;
    for name in names {
        let path = join(prefix, &name)?;
        budget.1 = budget.1.checked_sub(1).ok_or_else(|| {
            StagingError::Refused(format!("the workspace holds more than {} files; the critic gate copies the workspace and refuses one this large", limits.1))
        })?;
        let failed =
            |e: io::Error| StagingError::Io(format!("cannot copy `{}`: {e}", shown_path(&path)));
        let Some(meta) = fsat::lstat(from, &name).map_err(failed)? else {
            continue;
        };
        if meta.is_dir() {
            let sub_from = fsat::open_dir(from, &name).map_err(failed)?;
            rustix::fs::mkdirat(to, &name, rustix::fs::Mode::from_raw_mode(0o755))
                .map_err(|e| failed(e.into()))?;
            let sub_to = fsat::open_dir(to, &name).map_err(failed)?;
            manifest.insert(path.clone(), Entry::Dir);
            copy_tree(
                sub_from.as_fd(),
                sub_to.as_fd(),
                &path,
                manifest,
                budget,
                limits,
            )?;
        } else if meta.is_file() {
            let (mut source, meta) = fsat::open_file(from, &name).map_err(failed)?;
            budget.0 = budget.0.checked_sub(meta.len()).ok_or_else(|| {
                StagingError::Refused(format!("the workspace holds more than {} bytes; the critic gate copies the workspace and refuses one this large", limits.0))
            })?;
            let mode = meta.permissions().mode();
            let mut copy = fsat::create_new(to, &name, mode).map_err(failed)?;
            io::copy(&mut source, &mut copy).map_err(failed)?;
            copy.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777 & !0o6000))
                .map_err(failed)?;
            let copied = copy.metadata().map_err(failed)?;
            manifest.insert(
                path,
                Entry::File {
                    stamp: Stamp::of(&copied),
                    origin: Some(Stamp::of(&meta)),
                },
            );
        } else if meta.is_symlink() {
            let target = fsat::read_link(from, &name).map_err(failed)?;
            rustix::fs::symlinkat(&target, to, &name).map_err(|e| failed(e.into()))?;
            manifest.insert(path, Entry::Link { target });
        }
        // Sockets, pipes and devices are not work to review; they are not staged.
    }
    Ok(())
}

/// What the staging area holds now, by path.
fn scan(
    dir: BorrowedFd<'_>,
    prefix: &str,
    out: &mut BTreeMap<String, Entry>,
) -> Result<(), StagingError> {
    let names = fsat::entries(dir).map_err(|e| list_error(prefix, &e))?;
    for name in names {
        let path = join(prefix, &name)?;
        // Removed while scanning: it is gone.
        let Ok(Some(meta)) = fsat::lstat(dir, &name) else {
            continue;
        };
        if meta.is_dir() {
            let Ok(sub) = fsat::open_dir(dir, &name) else {
                continue;
            };
            out.insert(path.clone(), Entry::Dir);
            scan(sub.as_fd(), &path, out)?;
        } else if meta.is_file() {
            out.insert(
                path,
                Entry::File {
                    stamp: Stamp::of(&meta),
                    origin: None,
                },
            );
        } else if meta.is_symlink()
            && let Ok(target) = fsat::read_link(dir, &name)
        {
            out.insert(path, Entry::Link { target });
        }
    }
    Ok(())
}

/// `prefix/name`; a name that is not UTF-8 is refused (it could not be shown to the
/// critic, nor matched against protected paths).
fn join(prefix: &str, name: &OsStr) -> Result<String, StagingError> {
    let Some(name) = name.to_str() else {
        return Err(StagingError::Refused(format!(
            "a file name in {} is not UTF-8 ({}); rename it: the critic gate cannot review or apply it",
            shown_prefix(prefix),
            name.to_string_lossy()
        )));
    };
    Ok(if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}/{name}")
    })
}

fn list_error(prefix: &str, e: &io::Error) -> StagingError {
    StagingError::Io(format!("cannot list {}: {e}", shown_prefix(prefix)))
}

fn shown_prefix(prefix: &str) -> String {
    if prefix.is_empty() {
        "the top directory".to_owned()
    } else {
        format!("`{}`", shown_path(prefix))
    }
}

/// A path as it is shown to the critic and in messages: control characters escaped, so a
/// file name cannot forge lines of the diff.
fn shown_path(path: &str) -> String {
    if path.chars().any(char::is_control) {
        path.escape_debug().to_string()
    } else {
        path.to_owned()
    }
}

/// Whether the workspace and the staging area hold the same bytes at `path` (both regular
/// files, read without following links).
fn same_file(ws: BorrowedFd<'_>, st: BorrowedFd<'_>, path: &Path) -> bool {
    let (Ok((a, ma)), Ok((b, mb))) = (fsat::open_file_at(ws, path), fsat::open_file_at(st, path))
    else {
        return false;
    };
    ma.len() == mb.len() && fsat::same_bytes(a, b).unwrap_or(false)
}

/// A file's bytes when it is a regular file no larger than [`MAX_DIFF_FILE_BYTES`].
fn read_small(root: BorrowedFd<'_>, path: &Path) -> Option<Vec<u8>> {
    let (mut file, meta) = fsat::open_file_at(root, path).ok()?;
    if meta.len() > MAX_DIFF_FILE_BYTES {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    io::Read::read_to_end(&mut file, &mut bytes).ok()?;
    Some(bytes)
}

/// One change in the unified format.
fn render(
    ws: BorrowedFd<'_>,
    st: BorrowedFd<'_>,
    change: &StagedChange,
    entry: Option<&Entry>,
) -> String {
    let path = shown_path(&change.path);
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
        out.push_str(&format!(
            "symbolic link to {}\n",
            shown_path(&target.to_string_lossy())
        ));
        return out;
    }
    let relative = Path::new(&change.path);
    let old = match change.kind {
        ChangeKind::Added => Some(Vec::new()),
        _ => read_small(ws, relative),
    };
    let new = match change.kind {
        ChangeKind::Deleted => Some(Vec::new()),
        _ => read_small(st, relative),
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
            "(not a regular file of at most {MAX_DIFF_FILE_BYTES} bytes on one side: not shown; read it with read_file)\n"
        )),
    }
    out
}

fn io_error(what: &str, path: &Path, e: &io::Error) -> StagingError {
    StagingError::Io(format!("{what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests;
