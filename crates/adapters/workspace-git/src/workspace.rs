//! One run's workspace: creating and reopening it, checkpoints, restore and diffs. Applying
//! the result is in `apply.rs`, the remote in `remote.rs`.

use crate::git::{At, Git, fields};
use async_trait::async_trait;
use fabric_core::ports::{
    AppliedRun, ApplyMode, Checkpointed, CommitId, DiffStat, FileStat, StepNote, Workspace,
    WorkspaceError, WorkspaceOrigin, WorkspaceSpec,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::Mutex;

/// The branch of run `run_id`.
pub fn branch_name(run_id: &str) -> String {
    format!("fabric/{run_id}")
}

/// Where the last fetched tip of a run's branch on the remote is kept, beside the branch.
pub(crate) fn remote_ref(run_id: &str) -> String {
    format!("refs/fabric/remote/{run_id}")
}

/// Whether the workspace is a project's worktree or a scratch directory.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// A worktree of the repository whose working tree's top is `top`.
    Project { top: PathBuf },
    /// A directory versioned by the repository at `git_dir`.
    Scratch { git_dir: PathBuf },
}

/// One run's workspace on git.
#[derive(Debug)]
pub(crate) struct GitWorkspace {
    pub(crate) git: Arc<Git>,
    pub(crate) spec: WorkspaceSpec,
    pub(crate) dir: PathBuf,
    pub(crate) branch: String,
    pub(crate) base: CommitId,
    pub(crate) kind: Kind,
    /// Where the workspace's own commands run.
    pub(crate) at: At,
    /// The branch's tip on the remote as this worker last pushed or fetched it (empty when
    /// it is not there): the lease of the next push, so a worker whose run was taken over
    /// cannot push over its successor's steps. Held across a push, so pushes go one at a time.
    pub(crate) leased: Mutex<String>,
    /// The last checkpoint this object made and its tree, so the next one needs no
    /// `rev-parse` (a process start is most of a checkpoint on a small tree). Safe to trust:
    /// the branch is moved only with the old value expected, so a stale entry fails the
    /// update instead of forking the branch. Cleared by a restore.
    last: Mutex<Option<(CommitId, String)>>,
}

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

fn absolute(path: &Path) -> Result<PathBuf, WorkspaceError> {
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

async fn remove_tree(path: &Path) -> Result<(), WorkspaceError> {
    let owned = path.to_path_buf();
    let result = tokio::task::spawn_blocking(move || fabric_core::fs::remove_tree(&owned))
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
async fn toplevel(git: &Git, repo: &Path) -> Result<PathBuf, WorkspaceError> {
    let repo = absolute(repo)?;
    match tokio::fs::metadata(&repo).await {
        Ok(m) if m.is_dir() => {}
        _ => return Err(WorkspaceError::NotADirectory { path: repo }),
    }
    let ran = git
        .run(
            Some(&At::Dir(repo.clone())),
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

/// The commit `name` names at `at`, if any.
pub(crate) async fn commit_of(
    git: &Git,
    at: &At,
    name: &str,
) -> Result<Option<CommitId>, WorkspaceError> {
    let ran = git
        .run(
            Some(at),
            [
                "rev-parse",
                "--verify",
                "--quiet",
                "--end-of-options",
                &format!("{name}^{{commit}}"),
            ],
            None,
        )
        .await?;
    Ok(ran.ok.then(|| CommitId(ran.text())))
}

/// The base asked for, as a commit, or why there is none.
async fn resolve_base(
    git: &Git,
    top: &Path,
    base: Option<&str>,
) -> Result<CommitId, WorkspaceError> {
    let at = At::Dir(top.to_path_buf());
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

/// Fails with [`WorkspaceError::ReadOnly`] unless the repository's own directory takes a
/// new file: git's words for a refused write do not always say why ("cannot lock ref").
async fn writable(git: &Git, at: &At, top: &Path) -> Result<(), WorkspaceError> {
    let common = git
        .run(Some(at), ["rev-parse", "--git-common-dir"], None)
        .await?
        .checked(top)?
        .text();
    let common = top.join(common);
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

impl GitWorkspace {
    fn assemble(
        git: Arc<Git>,
        spec: &WorkspaceSpec,
        dir: PathBuf,
        kind: Kind,
        base: CommitId,
    ) -> Self {
        let at = match &kind {
            Kind::Project { .. } => At::Dir(dir.clone()),
            Kind::Scratch { git_dir } => At::Split {
                git_dir: git_dir.clone(),
                work_tree: dir.clone(),
            },
        };
        Self {
            git,
            spec: spec.clone(),
            dir,
            branch: branch_name(&spec.run_id),
            base,
            kind,
            at,
            leased: Mutex::new(String::new()),
            last: Mutex::new(None),
        }
    }

    pub(crate) async fn create(
        git: Arc<Git>,
        spec: &WorkspaceSpec,
    ) -> Result<Self, WorkspaceError> {
        git.check().await?;
        let spec = &resolved(spec);
        let dir = absolute(&spec.dir)?;
        let branch = branch_name(&spec.run_id);
        match &spec.origin {
            WorkspaceOrigin::Project { repo, base } => {
                if tokio::fs::symlink_metadata(&dir).await.is_ok() {
                    return Err(WorkspaceError::DirTaken { path: dir });
                }
                let top = toplevel(&git, repo).await?;
                let base = resolve_base(&git, &top, base.as_deref()).await?;
                let at_top = At::Dir(top.clone());
                if branch_exists(&git, &at_top, &branch).await? {
                    return Err(WorkspaceError::BranchTaken { branch });
                }
                writable(&git, &at_top, &top).await?;
                if let Some(parent) = dir.parent() {
                    create_dir_all(parent).await?;
                }
                let ran = git
                    .run(
                        Some(&at_top),
                        [
                            "worktree".as_ref(),
                            "add".as_ref(),
                            "--quiet".as_ref(),
                            "-b".as_ref(),
                            branch.as_ref(),
                            dir.as_os_str(),
                            base.as_str().as_ref(),
                        ],
                        None,
                    )
                    .await?;
                if !ran.ok {
                    if ran.stderr.contains("already exists") && ran.stderr.contains("branch") {
                        return Err(WorkspaceError::BranchTaken { branch });
                    }
                    return Err(ran.error(&top));
                }
                Ok(Self::assemble(git, spec, dir, Kind::Project { top }, base))
            }
            WorkspaceOrigin::Scratch { git_dir } => {
                let git_dir = absolute(git_dir)?;
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
                create_dir_all(&dir).await?;
                if let Some(parent) = git_dir.parent() {
                    create_dir_all(parent).await?;
                }
                init_history(&git, &git_dir, &branch).await?;
                let kind = Kind::Scratch { git_dir };
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
        git.check().await?;
        let spec = &resolved(spec);
        let dir = absolute(&spec.dir)?;
        let branch = branch_name(&spec.run_id);
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
                let at_top = At::Dir(top.clone());
                if tokio::fs::symlink_metadata(dir.join(".git")).await.is_ok() {
                    let head = git
                        .run(
                            Some(&At::Dir(dir.clone())),
                            ["symbolic-ref", "-q", "HEAD"],
                            None,
                        )
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
                    git.run(
                        Some(&at_top),
                        [
                            "worktree".as_ref(),
                            "add".as_ref(),
                            "--quiet".as_ref(),
                            dir.as_os_str(),
                            branch.as_ref(),
                        ],
                        None,
                    )
                    .await?
                    .checked(&top)?;
                }
                Kind::Project { top }
            }
            WorkspaceOrigin::Scratch { git_dir } => {
                let git_dir = absolute(git_dir)?;
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
                Kind::Scratch { git_dir }
            }
        };
        let mut ws = Self::assemble(git, spec, dir, kind, CommitId(String::new()));
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

    /// Stages `changed` (the paths `git status` named; everything when `None`), and commits
    /// the result as `message` on the branch when the tree differs from `parent`'s (a commit
    /// and its tree; or always, without a parent). Returns the new commit, or `parent`.
    async fn commit_all(
        &self,
        message: &str,
        parent: Option<(&CommitId, &str)>,
        changed: Option<&[String]>,
    ) -> Result<(CommitId, String), WorkspaceError> {
        let git = &self.git;
        match changed {
            // Only the changed paths: a second scan of a large tree would double the
            // checkpoint's cost (docs/BENCHMARKS.md, "#25"). Literal, so a name with `*` in it
            // is that name, not a pattern.
            Some(paths) => {
                let mut list = Vec::new();
                for path in paths {
                    list.extend_from_slice(path.as_bytes());
                    list.push(0);
                }
                let args = [
                    "--literal-pathspecs",
                    "add",
                    "--all",
                    "--pathspec-from-file=-",
                    "--pathspec-file-nul",
                ];
                git.run(Some(&self.at), args, Some(&list))
                    .await?
                    .checked(&self.dir)?;
            }
            None => {
                git.run(Some(&self.at), ["add", "--all"], None)
                    .await?
                    .checked(&self.dir)?;
            }
        }
        let tree = git
            .run(Some(&self.at), ["write-tree"], None)
            .await?
            .checked(&self.dir)?
            .text();
        let mut args = vec!["commit-tree".to_string(), tree.clone()];
        if let Some((parent, parent_tree)) = parent {
            if *parent_tree == tree {
                return Ok((parent.clone(), tree));
            }
            args.extend(["-p".to_string(), parent.to_string()]);
        }
        args.extend(["-F".to_string(), "-".to_string()]);
        let commit = git
            .run(Some(&self.at), &args, Some(message.as_bytes()))
            .await?
            .checked(&self.dir)?
            .text();
        // The old value guards against a second writer: the update fails if the branch moved.
        let old = parent.map(|(p, _)| p.to_string()).unwrap_or_default();
        git.run(
            Some(&self.at),
            [
                "update-ref",
                "-m",
                "fabric: checkpoint",
                &format!("refs/heads/{}", self.branch),
                &commit,
                &old,
            ],
            None,
        )
        .await?
        .checked(&self.dir)?;
        Ok((CommitId(commit), tree))
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

    fn message(&self, note: &StepNote) -> String {
        let tools = if note.tools.is_empty() {
            "no tool".to_string()
        } else {
            note.tools.join(", ")
        };
        let mut message = format!(
            "fabric: run {}, step {}: {tools}\n\n",
            self.spec.run_id, note.step
        );
        if let Some(summary) = note.summary.as_deref().map(str::trim)
            && !summary.is_empty()
        {
            message.push_str(summary);
            message.push_str("\n\n");
        }
        message.push_str(&format!(
            "Fabric-Run: {}\nFabric-Step: {}\n",
            self.spec.run_id, note.step
        ));
        if !note.tools.is_empty() {
            message.push_str(&format!("Fabric-Tools: {tools}\n"));
        }
        message.push_str(&format!("Fabric-Base: {}\n", self.base));
        message
    }

    pub(crate) fn project_top(&self) -> Result<&Path, WorkspaceError> {
        match &self.kind {
            Kind::Project { top } => Ok(top),
            Kind::Scratch { .. } => Err(WorkspaceError::NoProject {
                run_id: self.spec.run_id.clone(),
            }),
        }
    }
}

/// What `git status --porcelain -z` says: whether anything changed, and what is ignored.
pub(crate) fn parse_status(bytes: &[u8]) -> (Vec<String>, Vec<String>) {
    let mut changed = Vec::new();
    let mut ignored = Vec::new();
    for field in fields(bytes) {
        let (Some(xy), Some(path)) = (field.get(..2), field.get(3..)) else {
            continue;
        };
        if xy == "!!" {
            ignored.push(path.to_string());
        } else {
            changed.push(path.to_string());
        }
    }
    (changed, ignored)
}

#[async_trait]
impl Workspace for GitWorkspace {
    fn dir(&self) -> &Path {
        &self.dir
    }

    fn branch(&self) -> &str {
        &self.branch
    }

    fn base(&self) -> &CommitId {
        &self.base
    }

    async fn head(&self) -> Result<CommitId, WorkspaceError> {
        commit_of(&self.git, &self.at, "HEAD")
            .await?
            .ok_or_else(|| WorkspaceError::NotFound {
                run_id: self.spec.run_id.clone(),
                where_: String::new(),
            })
    }

    async fn checkpoint(&self, note: &StepNote) -> Result<Checkpointed, WorkspaceError> {
        let status = self
            .git
            .run(
                Some(&self.at),
                [
                    "status",
                    "--porcelain=v1",
                    "-z",
                    "--no-renames",
                    "--ignored=traditional",
                    "--untracked-files=normal",
                ],
                None,
            )
            .await?
            .checked(&self.dir)?;
        let (changed, ignored) = parse_status(&status.stdout);
        if changed.is_empty() {
            return Ok(Checkpointed {
                commit: None,
                ignored,
            });
        }
        let mut last = self.last.lock().await;
        let (head, tree) = match last.take() {
            Some(known) => known,
            None => {
                // The last checkpoint and its tree, in one process.
                let ran = self
                    .git
                    .run(Some(&self.at), ["rev-parse", "HEAD", "HEAD^{tree}"], None)
                    .await?
                    .checked(&self.dir)?;
                let text = ran.text();
                let mut lines = text.lines();
                let (Some(head), Some(tree)) = (lines.next(), lines.next()) else {
                    return Err(ran.error(&self.dir));
                };
                (CommitId(head.to_string()), tree.to_string())
            }
        };
        let (commit, new_tree) = self
            .commit_all(&self.message(note), Some((&head, &tree)), Some(&changed))
            .await?;
        *last = Some((commit.clone(), new_tree));
        Ok(Checkpointed {
            commit: (commit != head).then_some(commit),
            ignored,
        })
    }

    async fn restore(&self, commit: &CommitId) -> Result<(), WorkspaceError> {
        let not_found = || WorkspaceError::CommitNotFound {
            commit: commit.clone(),
        };
        // Held to the end, so no checkpoint runs while the files and the branch move.
        let mut last = self.last.lock().await;
        *last = None;
        let Some(found) = commit_of(&self.git, &self.at, commit.as_str()).await? else {
            return Err(not_found());
        };
        // A checkpoint of this run is in its branch's history here or on the remote (a
        // recorded step is never ahead of both).
        let mut ours = false;
        for tip in [
            format!("refs/heads/{}", self.branch),
            remote_ref(&self.spec.run_id),
        ] {
            let ran = self
                .git
                .run(
                    Some(&self.at),
                    ["merge-base", "--is-ancestor", found.as_str(), &tip],
                    None,
                )
                .await?;
            if ran.ok {
                ours = true;
                break;
            }
        }
        if !ours {
            return Err(not_found());
        }
        self.git
            .run(
                Some(&self.at),
                ["reset", "--hard", "--quiet", found.as_str()],
                None,
            )
            .await?
            .checked(&self.dir)?;
        let mut clean = vec!["clean", "-ffdxq"];
        for keep in &self.spec.keep {
            clean.extend(["-e", keep.as_str()]);
        }
        self.git
            .run(Some(&self.at), &clean, None)
            .await?
            .checked(&self.dir)?;
        if let Kind::Scratch { .. } = self.kind {
            // git never looks at a `.git` at the top of a work tree, so `clean` leaves one the
            // tools made; no checkpoint holds it.
            remove_tree(&self.dir.join(".git")).await?;
        }
        Ok(())
    }

    async fn diff_stat(&self) -> Result<DiffStat, WorkspaceError> {
        let head = self.head().await?;
        let flags = ["--numstat", "-z", "--no-renames"];
        let out = self
            .git
            .diff(
                &self.at,
                &self.dir,
                &flags,
                self.base.as_str(),
                head.as_str(),
            )
            .await?;
        let files = fields(&out)
            .filter_map(|line| {
                let mut parts = line.splitn(3, '\t');
                let added = parts.next()?.parse().ok();
                let removed = parts.next()?.parse().ok();
                let path = parts.next()?.to_string();
                Some(FileStat {
                    path,
                    added,
                    removed,
                })
            })
            .collect();
        Ok(DiffStat { files })
    }

    async fn diff(&self) -> Result<String, WorkspaceError> {
        let head = self.head().await?;
        let out = self
            .git
            .diff(&self.at, &self.dir, &[], self.base.as_str(), head.as_str())
            .await?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    async fn apply(&self, mode: ApplyMode) -> Result<AppliedRun, WorkspaceError> {
        crate::apply::apply(self, mode).await
    }

    async fn push(&self) -> Result<(), WorkspaceError> {
        crate::remote::push(self).await
    }

    async fn fetch_branch(&self) -> Result<Option<CommitId>, WorkspaceError> {
        crate::remote::fetch_branch(self).await
    }

    async fn discard(&self) -> Result<(), WorkspaceError> {
        discard(&self.git, &self.spec).await
    }
}

/// Removes what is left of `spec`'s workspace ([`fabric_core::ports::Workspaces::discard`]).
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
            let at_top = At::Dir(top.clone());
            if tokio::fs::symlink_metadata(dir.join(".git")).await.is_ok() {
                let removed = git
                    .run(
                        Some(&at_top),
                        [
                            "worktree".as_ref(),
                            "remove".as_ref(),
                            "--force".as_ref(),
                            "--force".as_ref(),
                            dir.as_os_str(),
                        ],
                        None,
                    )
                    .await?;
                if !removed.ok {
                    tracing::debug!(stderr = %removed.stderr, "worktree remove failed; removing the directory");
                }
            }
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
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_separates_changes_from_ignored_paths() {
        let out = b" M a.txt\0?? new/\0!! target/\0D  gone\0";
        let (changed, ignored) = parse_status(out);
        assert_eq!(changed, ["a.txt", "new/", "gone"]);
        assert_eq!(ignored, ["target/"]);
    }
}
