//! `fabric-workspace-git`: runs' versioned workspaces on the `git` program (issue #25).
//!
//! An adapter implementing fabric-core's [`Workspaces`] and [`Workspace`] ports. A run on
//! the user's project works in a `git worktree` of their repository, on the new branch
//! `fabric/<run-id>`, in a directory outside their working tree; a scratch run works in a
//! plain directory whose history lives in a repository kept elsewhere
//! (`git --git-dir=<outside> --work-tree=<workspace>`), where its tools cannot reach it.
//! Each step that changed files is a commit the fabric makes with its own identity and the
//! `Fabric-Run` / `Fabric-Step` trailers; a continued run restores the last recorded one;
//! with a remote, each checkpoint is pushed so a worker on another disk can fetch the branch
//! and go on. The result is the branch: its diff, applied to the user's working tree (or
//! committed onto their branch), or discarded.
//!
//! Key decisions (docs/DECISIONS.md, ADR-065): the git CLI, not a library (the user's git,
//! its formats and its worktrees exactly; no new dependency), run through `tokio::process`
//! with a scrubbed environment and `-c` overrides, so no global configuration, hook, signing
//! key or LFS filter changes what happens; commits are made with plumbing
//! (`write-tree`/`commit-tree`/`update-ref` with the expected old value), so nothing else
//! the repository configures runs. A worktree shares the repository's object store: creating
//! one writes the checked-out files and copies no object.
//!
//! Documented behaviours: files `.gitignore` excludes are never committed and are listed in
//! each [`Checkpointed`]; submodules are not checked out (their directories stay empty, and
//! what is written into one is not recorded); Git LFS files stay the pointer files the
//! repository holds.
//!
//! [`Checkpointed`]: fabric_engine::ports::Checkpointed

mod apply;
mod copy;
mod git;
mod guard;
mod open;
mod remote;
mod workspace;

use async_trait::async_trait;
use fabric_engine::ports::{Workspace, WorkspaceError, WorkspaceSpec, Workspaces};
use std::path::PathBuf;
use std::sync::Arc;

pub use git::{EMAIL as COMMIT_EMAIL, NAME as COMMIT_NAME};
pub use workspace::branch_name;

/// Makes runs' workspaces with the `git` program.
#[derive(Debug, Clone)]
pub struct GitWorkspaces {
    git: Arc<git::Git>,
}

impl Default for GitWorkspaces {
    fn default() -> Self {
        Self::new()
    }
}

impl GitWorkspaces {
    /// Workspaces made with the `git` on the `PATH`.
    pub fn new() -> Self {
        Self::with_program("git")
    }

    /// Whether a usable git is there (2.40 or newer), for `fabric doctor`.
    pub async fn check(&self) -> Result<(), WorkspaceError> {
        self.git.check().await
    }

    /// Workspaces made with the git at `program`.
    pub fn with_program(program: impl Into<PathBuf>) -> Self {
        Self {
            git: Arc::new(git::Git::new(program.into())),
        }
    }
}

#[async_trait]
impl Workspaces for GitWorkspaces {
    async fn create(&self, spec: &WorkspaceSpec) -> Result<Arc<dyn Workspace>, WorkspaceError> {
        let ws = workspace::GitWorkspace::create(self.git.clone(), spec).await?;
        Ok(Arc::new(ws))
    }

    async fn reopen(&self, spec: &WorkspaceSpec) -> Result<Arc<dyn Workspace>, WorkspaceError> {
        let ws = workspace::GitWorkspace::reopen(self.git.clone(), spec).await?;
        Ok(Arc::new(ws))
    }

    async fn discard(&self, spec: &WorkspaceSpec) -> Result<(), WorkspaceError> {
        open::discard(&self.git, spec).await
    }
}
