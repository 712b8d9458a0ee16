//! Making a run's workspace and finding it again: a project's worktree or a scratch
//! history, created, reopened (from the remote when this disk has none) and discarded.

use crate::git::{At, Git};
use crate::guard;
use crate::workspace::{GitWorkspace, Kind, branch_name, commit_of, remote_ref};
use fabric_engine::ports::{CommitId, Workspace, WorkspaceError, WorkspaceOrigin, WorkspaceSpec};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The spec with a remote given as a relative path made absolute: git runs in the
/// workspace or the repository, where the path would mean something else.
fn resolved(spec: &WorkspaceSpec) -> WorkspaceSpec {
    let mut spec = spec.clone();
    if let Some(remote) = &spec.remote
        && !remote.contains(':')
        && Path::new(remote).is_relative()
        && let Ok(path) = std::path::absolute(remote)
    {
        spec.remote = Some(path.display().to_string());
    }
    spec
}

pub(crate) fn absolute(path: &Path) -> Result<PathBuf, WorkspaceError> {
    std::path::absolute(path).map_err(|e| WorkspaceError::Io {
        action: "cannot resolve",
        path: path.to_path_buf(),
        detail: e.to_string(),
    })
}

async fn create_dir_all(path: &Path) -> Result<(), WorkspaceError> {
    tokio::fs::create_dir_all(path).await.map_err(|e| {
        if e.raw_os_error() == Some(30) || e.kind() == std::io::ErrorKind::PermissionDenied {
            WorkspaceError::ReadOnly {
                path: path.to_path_buf(),
                detail: e.to_string(),
            }
        } else {
            WorkspaceError::Io {
                action: "cannot create",
                path: path.to_path_buf(),
                detail: e.to_string(),
            }
        }
    })
}

pub(crate) async fn remove_tree(path: &Path) -> Result<(), WorkspaceError> {
    let owned = path.to_path_buf();
    let result = tokio::task::spawn_blocking(move || fabric_engine::fs::remove_tree(&owned))
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|r| r);
    match result {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(WorkspaceError::Io {
            action: "cannot remove",
            path: path.to_path_buf(),
            detail: e.to_string(),
        }),
    }
}

/// The top of the working tree holding `repo`.
pub(crate) async fn toplevel(git: &Git, repo: &Path) -> Result<PathBuf, WorkspaceError> {
    let repo = absolute(repo)?;
    match tokio::fs::metadata(&repo).await {
        Ok(m) if m.is_dir() => {}
        _ => return Err(WorkspaceError::NotADirectory { path: repo }),
    }
    let ran = git
        .run(
            Some(&At::User(repo.clone())),
            ["rev-parse", "--show-toplevel"],
            None,
        )
        .await?;
    if !ran.ok {
        if ran.stderr.contains("not a git repository")
            || ran.stderr.contains("must be run in a work tree")
        {
            return Err(WorkspaceError::NotARepository { path: repo });
        }
        return Err(ran.error(&repo));
    }
    Ok(PathBuf::from(ran.text()))
}

/// The base asked for, as a commit, or why there is none.
async fn resolve_base(
    git: &Git,
    top: &Path,
    base: Option<&str>,
) -> Result<CommitId, WorkspaceError> {
    let at = At::User(top.to_path_buf());
    if let Some(commit) = commit_of(git, &at, base.unwrap_or("HEAD")).await? {
        return Ok(commit);
    }
    let any = git
        .run(Some(&at), ["for-each-ref", "--count=1", "--format=x"], None)
        .await?
        .checked(top)?;
    match base {
        Some(base) if !any.text().is_empty() => Err(WorkspaceError::BaseNotFound {
            base: base.to_string(),
        }),
        _ => Err(WorkspaceError::NoCommits {
            repo: top.to_path_buf(),
        }),
    }
}

/// A new repository at `git_dir` for a scratch workspace's history, on `branch`. Bare: its
/// files are wherever `--work-tree` says, never beside it.
async fn init_history(git: &Git, git_dir: &Path, branch: &str) -> Result<(), WorkspaceError> {
    git.run(
        None,
        [
            "init".as_ref(),
            "--bare".as_ref(),
            "--quiet".as_ref(),
            format!("--initial-branch={branch}").as_ref(),
            git_dir.as_os_str(),
        ],
        None,
    )
    .await?
    .checked(git_dir)?;
    Ok(())
}

/// The waits before `git worktree add` is tried again when another one, in this process or
/// another, was making its own worktree of the same repository at the same moment: git reads
/// every worktree's records first, and one half-written fails it ("failed to read
/// .git/worktrees/<name>/commondir"), after `-b` made the branch but before the worktree.
const WORKTREE_ADD_WAITS_MS: [u64; 6] = [10, 40, 100, 200, 400, 800];

/// `git worktree add` in the user's repository at `top`, making `dir` on `branch`: a new
/// branch from `base` when given, else the existing one. Tried again while another
/// worktree's records are half-written and `dir` was not made, on the branch the failed try
/// may have made.
async fn worktree_add(
    git: &Git,
    top: &Path,
    dir: &Path,
    branch: &str,
    base: Option<&CommitId>,
) -> Result<crate::git::Ran, WorkspaceError> {
    let at_top = At::User(top.to_path_buf());
    let mut new_branch = base;
    let mut waits = WORKTREE_ADD_WAITS_MS.iter();
    loop {
        let mut argv: Vec<&std::ffi::OsStr> =
            vec!["worktree".as_ref(), "add".as_ref(), "--quiet".as_ref()];
        match new_branch {
            Some(base) => argv.extend([
                "-b".as_ref(),
                branch.as_ref(),
                dir.as_os_str(),
                base.as_str().as_ref(),
            ]),
            None => argv.extend([dir.as_os_str(), branch.as_ref()]),
        }
        let ran = git.run(Some(&at_top), &argv, None).await?;
        let raced = !ran.ok
            && ran.stderr.contains("commondir")
            && tokio::fs::symlink_metadata(dir).await.is_err();
        match waits.next() {
            Some(ms) if raced => {
                tracing::debug!(stderr = %ran.stderr, "another worktree was being made; trying again");
                // A little apart from the others that raced, so they do not race again.
                let spread = u64::from(std::process::id() % 7)
                    + u64::from(dir.as_os_str().len() as u32 % 11);
                tokio::time::sleep(std::time::Duration::from_millis(ms + spread)).await;
                if new_branch.is_some() && branch_exists(git, &at_top, branch).await? {
                    new_branch = None;
                }
            }
            _ => return Ok(ran),
        }
    }
}

/// The directory the user's repository at `top` keeps its objects, refs and worktrees in.
async fn common_dir(git: &Git, top: &Path) -> Result<PathBuf, WorkspaceError> {
    let common = git
        .run(
            Some(&At::User(top.to_path_buf())),
            ["rev-parse", "--git-common-dir"],
            None,
        )
        .await?
        .checked(top)?
        .text();
    Ok(top.join(common))
}

/// The administrative directory of the worktree at `dir` of the repository at `top`, found
/// in that repository's records (ADR-088); `None` when it has no such worktree.
async fn worktree_admin(
    git: &Git,
    top: &Path,
    dir: &Path,
) -> Result<Option<PathBuf>, WorkspaceError> {
    guard::admin_dir(&common_dir(git, top).await?, dir).await
}

/// Like [`worktree_admin`] for a worktree just made, which must be there.
async fn made_admin(git: &Git, top: &Path, dir: &Path) -> Result<PathBuf, WorkspaceError> {
    worktree_admin(git, top, dir)
        .await?
        .ok_or_else(|| WorkspaceError::Io {
            action: "cannot find the worktree's record in the repository for",
            path: dir.to_path_buf(),
            detail: "git made the worktree but its repository does not list it".to_owned(),
        })
}

/// Fails with [`WorkspaceError::ReadOnly`] unless the repository's own directory takes a
/// new file: git's words for a refused write do not always say why ("cannot lock ref").
async fn writable(git: &Git, top: &Path) -> Result<(), WorkspaceError> {
    let common = common_dir(git, top).await?;
    let probe = common.join(format!("fabric-probe-{}", std::process::id()));
    let created = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .await;
    match created {
        Ok(file) => {
            drop(file);
            let _ = tokio::fs::remove_file(&probe).await;
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(WorkspaceError::ReadOnly {
            path: common,
            detail: e.to_string(),
        }),
    }
}

async fn branch_exists(git: &Git, at: &At, branch: &str) -> Result<bool, WorkspaceError> {
    let ran = git
        .run(
            Some(at),
            [
                "show-ref",
                "--verify",
                "--quiet",
                &format!("refs/heads/{branch}"),
            ],
            None,
        )
        .await?;
    Ok(ran.ok)
}

/// The base of the run whose branch ends at `tip`: the `Fabric-Base` trailer of its last
/// checkpoint, or the tip itself when the run has none yet.
async fn base_of(git: &Git, at: &At, run_id: &str, tip: &str) -> Result<CommitId, WorkspaceError> {
    let ran = git
        .run(
            Some(at),
            [
                "log",
                "-1",
                "--format=%H%x00%(trailers:key=Fabric-Run,valueonly,separator=%x2c)%x00%(trailers:key=Fabric-Step,valueonly)%x00%(trailers:key=Fabric-Base,valueonly)",
                tip,
            ],
            None,
        )
        .await?
        .checked(Path::new(tip))?;
    let text = ran.text();
    let parts: Vec<&str> = text.split('\0').map(str::trim).collect();
    match parts.as_slice() {
        [_, run, step, base, ..] if *run == run_id && !step.is_empty() && !base.is_empty() => {
            Ok(CommitId((*base).to_string()))
        }
        [head, ..] => Ok(CommitId((*head).to_string())),
        [] => Err(ran.error(Path::new(tip))),
    }
}

/// The spec's remote's name for messages.
fn shown(remote: &str) -> String {
    crate::git::redact(remote)
}

/// Fetches the run's branch from `remote` into `dst` (a full ref name). `Ok(false)` when
/// the remote has no such branch.
pub(crate) async fn fetch_into(
    git: &Git,
    at: &At,
    remote: &str,
    branch: &str,
    dst: &str,
) -> Result<bool, WorkspaceError> {
    let ran = git
        .run(
            Some(at),
            [
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                "--end-of-options",
                remote,
                &format!("+refs/heads/{branch}:{dst}"),
            ],
            None,
        )
        .await?;
    if ran.ok {
        return Ok(true);
    }
    if ran.stderr.contains("couldn't find remote ref") {
        return Ok(false);
    }
    Err(WorkspaceError::RemoteUnavailable {
        remote: shown(remote),
        detail: last_line(&ran.stderr),
    })
}

pub(crate) fn last_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("failed")
        .to_string()
}

/// The user's directory a copy was made of, absolute; `None` for any other origin.
fn copied_from(origin: &WorkspaceOrigin) -> Result<Option<PathBuf>, WorkspaceError> {
    match origin {
        WorkspaceOrigin::Copy { source, .. } => absolute(source).map(Some),
        WorkspaceOrigin::Scratch { .. } | WorkspaceOrigin::Project { .. } => Ok(None),
    }
}

/// What every opening starts with: a usable git, the spec resolved, the workspace's
/// absolute path and the run's branch.
async fn start(
    git: &Git,
    spec: &WorkspaceSpec,
) -> Result<(WorkspaceSpec, PathBuf, String), WorkspaceError> {
    git.check().await?;
    let spec = resolved(spec);
    let dir = absolute(&spec.dir)?;
    let branch = branch_name(&spec.run_id);
    Ok((spec, dir, branch))
}

impl GitWorkspace {
    pub(crate) async fn create(
        git: Arc<Git>,
        spec: &WorkspaceSpec,
    ) -> Result<Self, WorkspaceError> {
        let (spec, dir, branch) = &start(&git, spec).await?;
        let (dir, branch) = (dir.clone(), branch.clone());
        match &spec.origin {
            WorkspaceOrigin::Project { repo, base } => {
                if tokio::fs::symlink_metadata(&dir).await.is_ok() {
                    return Err(WorkspaceError::DirTaken { path: dir });
                }
                let top = toplevel(&git, repo).await?;
                let base = resolve_base(&git, &top, base.as_deref()).await?;
                let at_top = At::User(top.clone());
                if branch_exists(&git, &at_top, &branch).await? {
                    return Err(WorkspaceError::BranchTaken { branch });
                }
                writable(&git, &top).await?;
                if let Some(parent) = dir.parent() {
                    create_dir_all(parent).await?;
                }
                let ran = worktree_add(&git, &top, &dir, &branch, Some(&base)).await?;
                if !ran.ok {
                    if ran.stderr.contains("already exists") && ran.stderr.contains("branch") {
                        return Err(WorkspaceError::BranchTaken { branch });
                    }
                    return Err(ran.error(&top));
                }
                let admin = made_admin(&git, &top, &dir).await?;
                let kind = Kind::Project { top, admin };
                Ok(Self::assemble(git, spec, dir, kind, base))
            }
            WorkspaceOrigin::Scratch { git_dir } | WorkspaceOrigin::Copy { git_dir, .. } => {
                let git_dir = absolute(git_dir)?;
                let source = copied_from(&spec.origin)?;
                if git_dir.starts_with(&dir) {
                    return Err(WorkspaceError::Io {
                        action: "refusing to keep a workspace's history inside it at",
                        path: git_dir,
                        detail: "the tools could change it; give a directory outside the workspace"
                            .to_string(),
                    });
                }
                if tokio::fs::symlink_metadata(&git_dir).await.is_ok() {
                    return Err(WorkspaceError::DirTaken { path: git_dir });
                }
                if let Some(source) = &source {
                    crate::copy::copy_in(source, &dir, &git_dir).await?;
                }
                create_dir_all(&dir).await?;
                if let Some(parent) = git_dir.parent() {
                    create_dir_all(parent).await?;
                }
                init_history(&git, &git_dir, &branch).await?;
                let kind = Kind::Scratch { git_dir, source };
                let mut ws = Self::assemble(git, spec, dir, kind, CommitId(String::new()));
                let message = format!(
                    "fabric: run {} starts\n\nFabric-Run: {}\n",
                    spec.run_id, spec.run_id
                );
                let (base, _) = ws.commit_all(&message, None, None).await?;
                ws.base = base;
                Ok(ws)
            }
        }
    }

    pub(crate) async fn reopen(
        git: Arc<Git>,
        spec: &WorkspaceSpec,
    ) -> Result<Self, WorkspaceError> {
        let (spec, dir, branch) = &start(&git, spec).await?;
        let (dir, branch) = (dir.clone(), branch.clone());
        let not_found = || WorkspaceError::NotFound {
            run_id: spec.run_id.clone(),
            where_: spec
                .remote
                .as_deref()
                .map(|r| format!(", nor on the remote {}", shown(r)))
                .unwrap_or_default(),
        };
        let kind = match &spec.origin {
            WorkspaceOrigin::Project { repo, .. } => {
                let top = toplevel(&git, repo).await?;
                let at_top = At::User(top.clone());
                // The repository's records say where the worktree is; its `.git` file is the
                // run's to write and is never asked (ADR-088).
                // A directory without `.git` is not (or no longer) the worktree: `worktree
                // prune` below forgets a record whose directory is gone, and it is made again.
                let admin = match tokio::fs::symlink_metadata(dir.join(".git")).await {
                    Ok(_) => worktree_admin(&git, &top, &dir).await?,
                    Err(_) => None,
                };
                if let Some(admin) = admin {
                    let at = At::Split {
                        git_dir: admin.clone(),
                        work_tree: dir.clone(),
                    };
                    let head = git
                        .run(Some(&at), ["symbolic-ref", "-q", "HEAD"], None)
                        .await?;
                    if head.text() != format!("refs/heads/{branch}") {
                        return Err(WorkspaceError::DirTaken { path: dir });
                    }
                } else {
                    git.run(Some(&at_top), ["worktree", "prune"], None)
                        .await?
                        .checked(&top)?;
                    if !branch_exists(&git, &at_top, &branch).await? {
                        let Some(remote) = &spec.remote else {
                            return Err(not_found());
                        };
                        let dst = format!("refs/heads/{branch}");
                        if !fetch_into(&git, &at_top, remote, &branch, &dst).await? {
                            return Err(not_found());
                        }
                    }
                    if let Ok(mut entries) = tokio::fs::read_dir(&dir).await
                        && entries.next_entry().await.ok().flatten().is_some()
                    {
                        return Err(WorkspaceError::DirTaken { path: dir });
                    }
                    if let Some(parent) = dir.parent() {
                        create_dir_all(parent).await?;
                    }
                    worktree_add(&git, &top, &dir, &branch, None)
                        .await?
                        .checked(&top)?;
                }
                let admin = made_admin(&git, &top, &dir).await?;
                Kind::Project { top, admin }
            }
            WorkspaceOrigin::Scratch { git_dir } | WorkspaceOrigin::Copy { git_dir, .. } => {
                let git_dir = absolute(git_dir)?;
                let source = copied_from(&spec.origin)?;
                create_dir_all(&dir).await?;
                let at = At::Split {
                    git_dir: git_dir.clone(),
                    work_tree: dir.clone(),
                };
                if tokio::fs::symlink_metadata(&git_dir).await.is_err() {
                    let Some(remote) = &spec.remote else {
                        return Err(not_found());
                    };
                    init_history(&git, &git_dir, &branch).await?;
                    let dst = format!("refs/heads/{branch}");
                    if !fetch_into(&git, &at, remote, &branch, &dst).await? {
                        remove_tree(&git_dir).await?;
                        return Err(not_found());
                    }
                    // The files of the fetched tip, over whatever the directory holds.
                    git.run(Some(&at), ["reset", "--hard", "--quiet", "HEAD"], None)
                        .await?
                        .checked(&dir)?;
                } else if !branch_exists(&git, &at, &branch).await? {
                    return Err(not_found());
                }
                Kind::Scratch { git_dir, source }
            }
        };
        let mut ws = Self::assemble(git, spec, dir, kind, CommitId(String::new()));
        ws.guard_link().await?;
        ws.clear_stale_locks().await?;
        let tip = commit_of(&ws.git, &ws.at, &format!("refs/heads/{branch}"))
            .await?
            .ok_or_else(not_found)?;
        ws.base = base_of(&ws.git, &ws.at, &spec.run_id, tip.as_str()).await?;
        if spec.remote.is_some() {
            // The lease of the next push: the remote's tip now (this worker has the claim).
            ws.fetch_branch().await?;
        }
        Ok(ws)
    }

    /// Removes the locks a process killed mid-checkpoint left (the index's, the branch's):
    /// a run is reopened only by the process that holds its claim, so no live git holds them.
    async fn clear_stale_locks(&self) -> Result<(), WorkspaceError> {
        let branch_lock = format!("refs/heads/{}.lock", self.branch);
        let ran = self
            .git
            .run(
                Some(&self.at),
                [
                    "rev-parse",
                    "--git-path",
                    "index.lock",
                    "--git-path",
                    &branch_lock,
                ],
                None,
            )
            .await?
            .checked(&self.dir)?;
        for lock in ran.text().lines() {
            let path = self.dir.join(lock);
            if tokio::fs::remove_file(&path).await.is_ok() {
                tracing::warn!(path = %path.display(), "removed a lock a stopped process left");
            }
        }
        Ok(())
    }
}

/// Removes what is left of `spec`'s workspace ([`fabric_engine::ports::Workspaces::discard`]).
pub(crate) async fn discard(git: &Git, spec: &WorkspaceSpec) -> Result<(), WorkspaceError> {
    git.check().await?;
    let dir = absolute(&spec.dir)?;
    let branch = branch_name(&spec.run_id);
    match &spec.origin {
        WorkspaceOrigin::Project { repo, .. } => {
            let top = match toplevel(git, repo).await {
                Ok(top) => top,
                // The repository is gone (deleted, or no longer one): its branch and records
                // went with it, and only the directory is left to remove.
                Err(
                    WorkspaceError::NotADirectory { .. } | WorkspaceError::NotARepository { .. },
                ) => {
                    return remove_tree(&dir).await;
                }
                Err(e) => return Err(e),
            };
            let at_top = At::User(top.clone());
            // Removed by the fabric, then forgotten by `prune`: `git worktree remove` would
            // look into the directory through its `.git` file, the run's to write (ADR-088).
            remove_tree(&dir).await?;
            git.run(Some(&at_top), ["worktree", "prune"], None)
                .await?
                .checked(&top)?;
            if branch_exists(git, &at_top, &branch).await? {
                git.run(Some(&at_top), ["branch", "-D", "--quiet", &branch], None)
                    .await?
                    .checked(&top)?;
            }
            git.run(
                Some(&at_top),
                ["update-ref", "-d", &remote_ref(&spec.run_id)],
                None,
            )
            .await?
            .checked(&top)?;
        }
        WorkspaceOrigin::Scratch { git_dir } => {
            // The directory itself is the run store's (it prunes runs); its history is ours.
            remove_tree(&absolute(git_dir)?).await?;
        }
        WorkspaceOrigin::Copy { git_dir, .. } => {
            // A copy's directory is ours too; the user's directory is never touched.
            remove_tree(&dir).await?;
            remove_tree(&absolute(git_dir)?).await?;
        }
    }
    Ok(())
}
