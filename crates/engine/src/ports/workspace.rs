//! A run's versioned workspace (issue #25): the directory a run's tools work in, with a
//! history the fabric keeps. Every step that changed files becomes a checkpoint (a commit made
//! by the fabric, not by the agent), so a continued run restores the files its runlog
//! describes, a worker without the first one's disk fetches them, and the result is a branch
//! to diff, apply or discard.
//!
//! Two origins: a worktree of the user's own repository on a new branch (`fabric/<run-id>`),
//! or a scratch directory whose history lives outside it, where the tools cannot see it. The
//! adapter (`fabric-workspace-git`) and its decisions are in docs/DECISIONS.md (ADR-065).

use async_trait::async_trait;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A checkpoint's id (a commit's full hex id).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CommitId(pub String);

impl CommitId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 12 characters, for people.
    pub fn short(&self) -> &str {
        self.0.get(..12).unwrap_or(&self.0)
    }
}

impl fmt::Display for CommitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A remote as messages and runlogs show it: without the user name, password or token in
/// it (`https://bob:s3cret@host/r.git` gives `https://host/r.git`; a user name alone may be
/// a token). A path or an scp-like `git@host:r.git` is shown as given.
pub fn remote_shown(remote: &str) -> String {
    if let Some((scheme, rest)) = remote.split_once("://")
        && let Some((userinfo, host)) = rest.split_once('@')
        && !userinfo.contains('/')
    {
        return format!("{scheme}://{host}");
    }
    remote.to_string()
}

/// Where a workspace's files come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkspaceOrigin {
    /// A worktree of the user's repository at `repo` (any directory inside its working tree),
    /// on a new branch from `base` (a commit, branch or tag; `HEAD` when `None`).
    Project {
        /// The user's repository.
        repo: PathBuf,
        /// What the run starts from.
        base: Option<String>,
    },
    /// A directory of the fabric's own, versioned by a repository kept at `git_dir`, outside
    /// the workspace.
    Scratch {
        /// The repository holding the workspace's history.
        git_dir: PathBuf,
    },
    /// A copy of the user's directory `source`, which is not a git repository, versioned like
    /// a scratch workspace by the repository at `git_dir` (outside the workspace); its base
    /// holds the copy. [`Workspace::apply`] copies the changed files back.
    Copy {
        /// The user's directory.
        source: PathBuf,
        /// The repository holding the workspace's history.
        git_dir: PathBuf,
    },
}

/// Which workspace to create or open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceSpec {
    /// The run it belongs to; names the branch (`fabric/<run-id>`).
    pub run_id: String,
    /// Where its files come from.
    pub origin: WorkspaceOrigin,
    /// The directory the tools work in. For a project, a directory outside the user's
    /// working tree that does not exist yet (the caller's `.fabric/worktrees/<run-id>`); for
    /// a scratch workspace, the run's workspace directory.
    pub dir: PathBuf,
    /// Where each checkpoint is pushed for workers that do not share this disk
    /// (`store.workspace_remote`: any URL or path git can push to), if anywhere.
    pub remote: Option<String>,
    /// Git pathspec patterns (`.gitignore` syntax) that [`Workspace::restore`] leaves in
    /// place although no checkpoint holds them, such as a build cache.
    pub keep: Vec<String>,
}

/// What a step did, for its checkpoint's message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepNote {
    /// The step's number (1-based), written as the `Fabric-Step` trailer.
    pub step: u32,
    /// The tools the step called, in order.
    pub tools: Vec<String>,
    /// A line about the step, if any (the first line of the message).
    pub summary: Option<String>,
}

/// What [`Workspace::checkpoint`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checkpointed {
    /// The new checkpoint; `None` when nothing had changed since the last one.
    pub commit: Option<CommitId>,
    /// Paths written into the workspace that `.gitignore` excludes, so no checkpoint holds
    /// them (directories end with `/`): a continued run, another worker and the result do
    /// not have them.
    pub ignored: Vec<String>,
    /// The `.git` entries the fabric removed from the workspace before recording it
    /// (ADR-088): a nested repository's (whose files are then recorded as plain files), and
    /// `.git` itself when a worktree's link to its repository was changed and put back.
    pub removed_git: Vec<String>,
}

/// One file of a diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStat {
    /// The path, relative to the workspace, with `/` separators.
    pub path: String,
    /// Lines added; `None` for a binary file.
    pub added: Option<u64>,
    /// Lines removed; `None` for a binary file.
    pub removed: Option<u64>,
}

/// One file's changes between two commits, with its part of the unified diff (issue #42:
/// the web viewer shows a run's changes file by file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDiff {
    /// The path and its lines counted.
    pub stat: FileStat,
    /// The file's unified diff, from its `diff --git` line (a binary file's says so).
    pub diff: String,
}

/// What a workspace changes against its base.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiffStat {
    /// The changed files, by path.
    pub files: Vec<FileStat>,
}

impl DiffStat {
    /// Lines added and removed in all text files.
    pub fn lines(&self) -> (u64, u64) {
        self.files.iter().fold((0, 0), |(a, r), f| {
            (a + f.added.unwrap_or(0), r + f.removed.unwrap_or(0))
        })
    }
}

/// How [`Workspace::apply`] brings a run's result into the user's working tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyMode {
    /// As uncommitted changes, for the user to review and commit.
    WorkingTree,
    /// As one commit on the branch checked out there (`fabric apply --commit`).
    Commit,
}

/// What [`Workspace::apply`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppliedRun {
    /// The files it changed in the user's working tree.
    pub files: Vec<String>,
    /// The commit it made ([`ApplyMode::Commit`]).
    pub commit: Option<CommitId>,
}

/// Why a workspace operation failed, sorted by what the caller can do: [`is_retryable`]
/// (wait and try again), [`is_user_fixable`] (tell the user; the message says how) or
/// neither (a fault to report).
///
/// [`is_retryable`]: WorkspaceError::is_retryable
/// [`is_user_fixable`]: WorkspaceError::is_user_fixable
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkspaceError {
    /// The `git` program could not be started.
    #[error("cannot run `{program}` ({detail}); install git (2.40 or newer) or put it on the PATH")]
    GitMissing {
        /// The program tried.
        program: String,
        /// The system's words.
        detail: String,
    },
    /// The installed git lacks what the fabric needs.
    #[error("git {found} is too old; the fabric needs git {need} or newer")]
    GitTooOld {
        /// The version found.
        found: String,
        /// The version needed.
        need: String,
    },
    /// The project path is not a directory.
    #[error("{path} is not a directory; give the path of a repository's working tree")]
    NotADirectory {
        /// The path given.
        path: PathBuf,
    },
    /// The project path is not inside a git working tree.
    #[error(
        "{path} is not in a git repository; run `git init` and commit there first, or run without a project"
    )]
    NotARepository {
        /// The path given.
        path: PathBuf,
    },
    /// The repository has no commit to start from.
    #[error(
        "the repository at {repo} has no commits yet; commit something first (`git commit --allow-empty -m start` will do)"
    )]
    NoCommits {
        /// The repository.
        repo: PathBuf,
    },
    /// The base names no commit.
    #[error(
        "base `{base}` is not a commit, branch or tag of this repository; `git log --oneline` or `git branch -a` shows what exists"
    )]
    BaseNotFound {
        /// The base asked for.
        base: String,
    },
    /// The run's branch exists already.
    #[error(
        "branch `{branch}` exists already; `fabric discard` the run that made it, or delete it (`git branch -D {branch}`)"
    )]
    BranchTaken {
        /// The branch.
        branch: String,
    },
    /// The workspace directory of a new run exists already.
    #[error("{path} exists already; a new run's workspace must be a directory that does not")]
    DirTaken {
        /// The directory.
        path: PathBuf,
    },
    /// Nothing to reopen: no worktree, no branch here, and none on the remote.
    #[error("run `{run_id}` has no workspace here{where_}; it may have been discarded")]
    NotFound {
        /// The run.
        run_id: String,
        /// Where else it was looked for (", nor on the remote <url>"), or empty.
        where_: String,
    },
    /// A checkpoint the workspace does not have.
    #[error(
        "checkpoint {commit} is not in this workspace's history; fetch it from the remote, or resume from an earlier step"
    )]
    CommitNotFound {
        /// The checkpoint asked for.
        commit: CommitId,
    },
    /// The disk refused a write.
    #[error(
        "cannot write at {path}: {detail}; the repository (or the workspace root) must be on a writable disk"
    )]
    ReadOnly {
        /// Where.
        path: PathBuf,
        /// The system's words.
        detail: String,
    },
    /// The remote could not be reached or refused for a reason that may pass.
    #[error("workspace remote {remote}: {detail}; the fabric retries")]
    RemoteUnavailable {
        /// The remote, without credentials.
        remote: String,
        /// Git's words.
        detail: String,
    },
    /// The run's branch on the remote moved since this worker last saw it: another worker
    /// took the run over.
    #[error(
        "branch `{branch}` on {remote} was moved by another worker; this one pushes nothing more"
    )]
    RemoteMoved {
        /// The remote, without credentials.
        remote: String,
        /// The branch.
        branch: String,
    },
    /// Applying would change files the user's commits since the base changed too.
    #[error(
        "the run's changes conflict with the repository's in: {}; merge branch `{branch}` yourself (`git merge {branch}`)",
        files.join(", ")
    )]
    Conflict {
        /// The run's branch.
        branch: String,
        /// The files in conflict.
        files: Vec<String>,
    },
    /// Applying would write over uncommitted changes.
    #[error(
        "the run changes files with uncommitted changes in your working tree: {}; commit or stash them first (`git stash`), then apply again",
        files.join(", ")
    )]
    Uncommitted {
        /// The files.
        files: Vec<String>,
    },
    /// Files of a copied directory changed there since the run copied it.
    #[error(
        "the run changes files that changed in {} since the run copied it: {}; `fabric diff` shows the run's changes: make them there by hand, or discard the run",
        dir.display(), files.join(", ")
    )]
    CopyConflict {
        /// The user's directory.
        dir: PathBuf,
        /// The files.
        files: Vec<String>,
    },
    /// A directory that is not a git repository, too large to copy for a run.
    #[error(
        "{} is too large to work on as a copy ({what}); make it a git repository (`git init`, then commit) so the run works in a worktree instead, or point at a smaller directory",
        path.display()
    )]
    TooLargeToCopy {
        /// The directory.
        path: PathBuf,
        /// Which limit, in words ("more than 50000 files").
        what: String,
    },
    /// `apply --commit` of a run on a directory that is not a git repository.
    #[error(
        "{} is not a git repository, so there is no branch to commit onto; `fabric apply` without `--commit` copies the changed files into it",
        dir.display()
    )]
    NothingToCommitOnto {
        /// The user's directory.
        dir: PathBuf,
    },
    /// The operation needs a project and the workspace is a scratch one.
    #[error("run `{run_id}` worked in a scratch workspace; there is no project to apply it to")]
    NoProject {
        /// The run.
        run_id: String,
    },
    /// A file operation failed.
    #[error("{action} {path}: {detail}")]
    Io {
        /// What was tried ("cannot create").
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The system's words.
        detail: String,
    },
    /// Git failed in a way none of the above names.
    #[error("`git {command}` failed ({status}): {stderr}")]
    Git {
        /// The git subcommand and its arguments.
        command: String,
        /// Its exit status.
        status: String,
        /// Its error output (trimmed).
        stderr: String,
    },
}

impl WorkspaceError {
    /// Whether the same operation may succeed later (the run waits and retries, as it does
    /// for the store).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::RemoteUnavailable { .. })
    }

    /// Whether the user (not the fabric) must act; the message says how.
    pub fn is_user_fixable(&self) -> bool {
        match self {
            Self::GitMissing { .. }
            | Self::GitTooOld { .. }
            | Self::NotADirectory { .. }
            | Self::NotARepository { .. }
            | Self::NoCommits { .. }
            | Self::BaseNotFound { .. }
            | Self::BranchTaken { .. }
            | Self::DirTaken { .. }
            | Self::ReadOnly { .. }
            | Self::Conflict { .. }
            | Self::Uncommitted { .. }
            | Self::CopyConflict { .. }
            | Self::TooLargeToCopy { .. }
            | Self::NothingToCommitOnto { .. }
            | Self::NoProject { .. } => true,
            Self::NotFound { .. }
            | Self::CommitNotFound { .. }
            | Self::RemoteUnavailable { .. }
            | Self::RemoteMoved { .. }
            | Self::Io { .. }
            | Self::Git { .. } => false,
        }
    }

    /// A short stable tag for logs and runlogs.
    pub fn kind_tag(&self) -> &'static str {
        match self {
            Self::GitMissing { .. } => "git_missing",
            Self::GitTooOld { .. } => "git_too_old",
            Self::NotADirectory { .. } => "not_a_directory",
            Self::NotARepository { .. } => "not_a_repository",
            Self::NoCommits { .. } => "no_commits",
            Self::BaseNotFound { .. } => "base_not_found",
            Self::BranchTaken { .. } => "branch_taken",
            Self::DirTaken { .. } => "dir_taken",
            Self::NotFound { .. } => "not_found",
            Self::CommitNotFound { .. } => "commit_not_found",
            Self::ReadOnly { .. } => "read_only",
            Self::RemoteUnavailable { .. } => "remote_unavailable",
            Self::RemoteMoved { .. } => "remote_moved",
            Self::Conflict { .. } => "conflict",
            Self::Uncommitted { .. } => "uncommitted",
            Self::CopyConflict { .. } => "copy_conflict",
            Self::TooLargeToCopy { .. } => "too_large_to_copy",
            Self::NothingToCommitOnto { .. } => "nothing_to_commit_onto",
            Self::NoProject { .. } => "no_project",
            Self::Io { .. } => "io",
            Self::Git { .. } => "git",
        }
    }
}

/// Makes and finds runs' workspaces.
#[async_trait]
pub trait Workspaces: Send + Sync {
    /// The workspace of a new run: a worktree on the new branch `fabric/<run-id>` from the
    /// base, or a scratch history over `spec.dir` (created if missing) whose one commit, the
    /// base, holds what the directory holds. The user's working tree is never touched.
    /// Nothing is pushed yet: the caller pushes ([`Workspace::push`]) after this and after
    /// each checkpoint, retrying what is retryable.
    async fn create(&self, spec: &WorkspaceSpec) -> Result<Arc<dyn Workspace>, WorkspaceError>;

    /// The workspace of a run being continued: as this disk has it, or, when it has none,
    /// fetched from the remote (a worker taking a run over). The files are as the last
    /// process left them; [`Workspace::restore`] brings them to a recorded checkpoint.
    async fn reopen(&self, spec: &WorkspaceSpec) -> Result<Arc<dyn Workspace>, WorkspaceError>;

    /// Removes whatever is left of a run's workspace (the directory, the worktree's record
    /// and the branch here, a scratch history), whether or not it can be opened. Removing
    /// what is gone is not an error. The remote's copy stays: it is the remote owner's.
    async fn discard(&self, spec: &WorkspaceSpec) -> Result<(), WorkspaceError>;
}

/// One run's workspace.
#[async_trait]
pub trait Workspace: Send + Sync {
    /// The directory the tools work in.
    fn dir(&self) -> &Path;

    /// The run's branch (`fabric/<run-id>`).
    fn branch(&self) -> &str;

    /// The commit the run started from.
    fn base(&self) -> &CommitId;

    /// The last checkpoint (the base before the first).
    async fn head(&self) -> Result<CommitId, WorkspaceError>;

    /// Records the files as they are now as the checkpoint of `note`'s step; nothing when
    /// nothing changed. Files `.gitignore` excludes are not recorded; they are listed.
    async fn checkpoint(&self, note: &StepNote) -> Result<Checkpointed, WorkspaceError>;

    /// Makes the files exactly those of `commit` (a checkpoint of this run, or its base):
    /// changed files reset, files no checkpoint holds removed (but the spec's `keep`), and the
    /// branch moved back to it, so the next checkpoint follows it.
    async fn restore(&self, commit: &CommitId) -> Result<(), WorkspaceError>;

    /// The last checkpoint's changes against the base, per file.
    async fn diff_stat(&self) -> Result<DiffStat, WorkspaceError>;

    /// The last checkpoint's changes against the base as a unified diff.
    async fn diff(&self) -> Result<String, WorkspaceError>;

    /// The changes from `from` to `to` (the base or checkpoints of this run), per file, in
    /// path order.
    async fn diff_files(
        &self,
        from: &CommitId,
        to: &CommitId,
    ) -> Result<Vec<FileDiff>, WorkspaceError>;

    /// Brings the last checkpoint's changes into the user's working tree (a project only),
    /// refusing, before it writes anything, when they conflict with commits made there since
    /// the base or with uncommitted changes to the same files.
    async fn apply(&self, mode: ApplyMode) -> Result<AppliedRun, WorkspaceError>;

    /// Pushes the branch to the remote (nothing without one). Refused with
    /// [`WorkspaceError::RemoteMoved`] when another worker moved it since this one last
    /// pushed or fetched it.
    async fn push(&self) -> Result<(), WorkspaceError>;

    /// Fetches the branch from the remote and returns its tip there (`None` without a
    /// remote or when it is not there); the files and the branch here do not move. That tip
    /// becomes the lease of the next [`Workspace::push`].
    async fn fetch_branch(&self) -> Result<Option<CommitId>, WorkspaceError>;

    /// Removes the workspace and its branch ([`Workspaces::discard`]).
    async fn discard(&self) -> Result<(), WorkspaceError>;
}
