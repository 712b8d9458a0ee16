//! Opening a run's versioned workspace (issue #25): a worktree of the user's project on the
//! run's branch, or a scratch workspace whose history the fabric keeps beside it; and, for a
//! continued run, the same workspace reopened (fetched from the remote by a worker without
//! this disk) and restored to the last recorded checkpoint.

use fabric_domain::{RunId, runlog};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ServiceError;
use crate::ports::{CommitId, WorkspaceError, WorkspaceOrigin, WorkspaceSpec, Workspaces};
use crate::versioned::RunWorkspace;

/// Where runs' versioned workspaces go, and which are versioned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkspacePolicy {
    /// Where project worktrees are made, one directory per run (`<root>/worktrees`).
    pub worktrees: PathBuf,
    /// Where every checkpoint is pushed (`store.workspace_remote`).
    pub remote: Option<String>,
    /// Whether scratch workspaces are versioned too (`store.workspace_history`; always with
    /// a remote, which is how a worker without this disk gets their files).
    pub scratch: bool,
    /// Patterns a restore leaves in place although no checkpoint holds them.
    pub keep: Vec<String>,
}

/// The user's project a run works on (`fabric run --project PATH [--base REF]`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProjectRequest {
    /// A directory inside the repository's working tree.
    pub path: PathBuf,
    /// What the run starts from (a commit, branch or tag); `HEAD` when `None`.
    pub base: Option<String>,
}

/// The service's workspaces and their policy.
pub(super) struct Versioning {
    pub(super) workspaces: Arc<dyn Workspaces>,
    pub(super) policy: WorkspacePolicy,
}

impl Versioning {
    /// An ended run's workspace opened as it is: one that is gone, or that the user must
    /// fix, is the request's problem; any other failure the fabric's.
    pub(super) async fn open_ended(
        &self,
        spec: &WorkspaceSpec,
    ) -> Result<Arc<dyn crate::ports::Workspace>, ServiceError> {
        self.workspaces.reopen(spec).await.map_err(|e| {
            if e.is_user_fixable() || matches!(e, WorkspaceError::NotFound { .. }) {
                ServiceError::from(super::InvalidRequest::Workspace(e))
            } else {
                super::Fault::Workspace(e).into()
            }
        })
    }

    /// The worktree of a new run on `project`.
    pub(super) async fn project(
        &self,
        id: &RunId,
        project: &ProjectRequest,
    ) -> Result<RunWorkspace, ServiceError> {
        let repo = std::path::absolute(&project.path).map_err(|e| {
            ServiceError::from(super::ProjectError::NotAbsolute {
                project: project.path.clone(),
                detail: e.to_string(),
            })
        })?;
        let spec = WorkspaceSpec {
            run_id: id.to_string(),
            origin: WorkspaceOrigin::Project {
                repo: repo.clone(),
                base: project.base.clone(),
            },
            dir: self.policy.worktrees.join(id.as_str()),
            remote: self.policy.remote.clone(),
            keep: self.policy.keep.clone(),
        };
        let handle = match self.workspaces.create(&spec).await {
            Ok(handle) => handle,
            // A directory that is not a git repository: the run works in a copy of it.
            Err(WorkspaceError::NotARepository { .. }) if project.base.is_none() => {
                return self.copy(id, repo).await;
            }
            Err(WorkspaceError::NotARepository { path }) => {
                return Err(super::ProjectError::NoBase { path }.into());
            }
            Err(e) => return Err(opening_failed(e)),
        };
        self.opened_new(&spec, handle, project.base.clone()).await
    }

    /// A new run's copy of `source`, a directory that is not a git repository.
    async fn copy(&self, id: &RunId, source: PathBuf) -> Result<RunWorkspace, ServiceError> {
        self.create(&self.copy_spec(id, source)).await
    }

    /// A new run's workspace of `spec`.
    async fn create(&self, spec: &WorkspaceSpec) -> Result<RunWorkspace, ServiceError> {
        let handle = self.workspaces.create(spec).await.map_err(opening_failed)?;
        self.opened_new(spec, handle, None).await
    }

    /// A new run's workspace, just made: its `workspace` event, and its branch pushed.
    async fn opened_new(
        &self,
        spec: &WorkspaceSpec,
        handle: Arc<dyn crate::ports::Workspace>,
        base_ref: Option<String>,
    ) -> Result<RunWorkspace, ServiceError> {
        let opened = self.opened(spec, handle.as_ref(), base_ref, None);
        self.first_push(handle.as_ref()).await?;
        Ok(RunWorkspace::new(handle, opened))
    }

    /// A copy's spec: the copy in `<worktrees>/<id>`, its history in
    /// `<worktrees>/.history/<id>`, outside it.
    fn copy_spec(&self, id: &RunId, source: PathBuf) -> WorkspaceSpec {
        WorkspaceSpec {
            run_id: id.to_string(),
            origin: WorkspaceOrigin::Copy {
                source,
                git_dir: self.policy.worktrees.join(".history").join(id.as_str()),
            },
            dir: self.policy.worktrees.join(id.as_str()),
            remote: self.policy.remote.clone(),
            keep: self.policy.keep.clone(),
        }
    }

    /// The history of a new scratch run's `workspace` (kept beside it, in `history`).
    pub(super) async fn scratch(
        &self,
        id: &RunId,
        workspace: &Path,
    ) -> Result<RunWorkspace, ServiceError> {
        self.create(&self.scratch_spec(id, workspace)).await
    }

    /// A continued run's workspace, reopened and restored to `checkpoint` (its base when
    /// `None`). `workspace` is the run's scratch directory in this store.
    pub(super) async fn reopen(
        &self,
        id: &RunId,
        recorded: &runlog::WorkspaceOpened,
        workspace: &Path,
        checkpoint: Option<&str>,
    ) -> Result<RunWorkspace, WorkspaceError> {
        let spec = self.spec_of(id, recorded, workspace);
        let handle = self.workspaces.reopen(&spec).await?;
        // A run that continued another started from that one's head (`restored_to`).
        let start = recorded.restored_to.as_deref().unwrap_or(&recorded.base);
        let target = CommitId(checkpoint.unwrap_or(start).to_owned());
        handle.restore(&target).await?;
        let mut opened = self.opened(&spec, handle.as_ref(), recorded.base_ref.clone(), None);
        opened.restored_to = Some(target.to_string());
        opened.owner.clone_from(&recorded.owner);
        Ok(RunWorkspace::new(handle, opened))
    }

    /// The workspace of a run that continues `earlier` (issue #42): the earlier run's own
    /// worktree and branch, reopened at its head (continue), or a new branch from that head,
    /// or from `project.base` when the request names one (fork).
    pub(super) async fn continued(
        &self,
        id: &RunId,
        earlier: &super::conversation::Continuation,
        recorded: &runlog::WorkspaceOpened,
        project: &ProjectRequest,
    ) -> Result<RunWorkspace, ServiceError> {
        if earlier.fork {
            let base = project.base.clone().or_else(|| earlier.head.clone());
            let forked = ProjectRequest {
                path: project.path.clone(),
                base,
            };
            return self.project(id, &forked).await;
        }
        let mut recorded = recorded.clone();
        let owner = recorded
            .owner
            .get_or_insert_with(|| earlier.earlier.clone());
        let owner = owner.clone();
        self.reopen(&owner, &recorded, &earlier.files, earlier.head.as_deref())
            .await
            .map_err(|cause| {
                super::ConversationError::Workspace {
                    id: earlier.earlier.clone(),
                    cause,
                }
                .into()
            })
    }

    /// The spec of the workspace `recorded` describes, where this fabric keeps it: under its
    /// own root, which is where it was when this is the process (or a worker sharing the
    /// disk) that made it; a worker with a root of its own fetches it there from the
    /// remote. `workspace` is the run's scratch directory in this fabric's store.
    pub(super) fn spec_of(
        &self,
        id: &RunId,
        recorded: &runlog::WorkspaceOpened,
        workspace: &Path,
    ) -> WorkspaceSpec {
        // A continued run works in the workspace of the run it continues (issue #42).
        let id = recorded.owner.as_ref().unwrap_or(id);
        if let Some(source) = &recorded.source {
            return self.copy_spec(id, source.clone());
        }
        match &recorded.repo {
            Some(repo) => WorkspaceSpec {
                run_id: id.to_string(),
                origin: WorkspaceOrigin::Project {
                    repo: repo.clone(),
                    base: None,
                },
                dir: self.policy.worktrees.join(id.as_str()),
                remote: self.policy.remote.clone(),
                keep: self.policy.keep.clone(),
            },
            None => self.scratch_spec(id, workspace),
        }
    }

    fn scratch_spec(&self, id: &RunId, workspace: &Path) -> WorkspaceSpec {
        // `<root>/runs/<id>/workspace` keeps its history in `<root>/runs/<id>/history`,
        // where the run's tools cannot reach it.
        let git_dir = workspace.parent().map_or_else(
            || workspace.with_extension("history"),
            |p| p.join("history"),
        );
        WorkspaceSpec {
            run_id: id.to_string(),
            origin: WorkspaceOrigin::Scratch { git_dir },
            dir: workspace.to_path_buf(),
            remote: self.policy.remote.clone(),
            keep: self.policy.keep.clone(),
        }
    }

    /// The `workspace` event of `spec`'s opened workspace.
    fn opened(
        &self,
        spec: &WorkspaceSpec,
        handle: &dyn crate::ports::Workspace,
        base_ref: Option<String>,
        restored_to: Option<String>,
    ) -> runlog::WorkspaceOpened {
        let (origin, repo, source, git_dir) = match &spec.origin {
            WorkspaceOrigin::Project { repo, .. } => ("project", Some(repo.clone()), None, None),
            WorkspaceOrigin::Scratch { git_dir } => ("scratch", None, None, Some(git_dir.clone())),
            WorkspaceOrigin::Copy { source, git_dir } => {
                ("copy", None, Some(source.clone()), Some(git_dir.clone()))
            }
        };
        runlog::WorkspaceOpened {
            origin: origin.to_owned(),
            repo,
            source,
            git_dir,
            dir: handle.dir().to_path_buf(),
            branch: handle.branch().to_owned(),
            base: handle.base().to_string(),
            base_ref,
            remote: spec.remote.as_deref().map(crate::ports::remote_shown),
            restored_to,
            owner: None,
        }
    }

    /// The new branch on the remote, so a worker taking the run over finds its base even
    /// before the first checkpoint. An unreachable remote does not stop the run here: each
    /// checkpoint pushes again, and waits for it.
    async fn first_push(&self, handle: &dyn crate::ports::Workspace) -> Result<(), ServiceError> {
        match handle.push().await {
            Ok(()) => Ok(()),
            Err(e) if e.is_retryable() => {
                tracing::warn!(branch = handle.branch(), error = %e, "cannot push the new workspace yet");
                Ok(())
            }
            Err(e) => Err(opening_failed(e)),
        }
    }
}

impl super::RunService {
    /// The versioned workspace of a run that ended, opened as it is (not restored): for
    /// `fabric diff`, `apply` and `discard`. `Ok(None)`: the run has none (a plain scratch
    /// run).
    pub async fn ended_workspace(
        &self,
        id: &RunId,
    ) -> Result<Option<Arc<dyn crate::ports::Workspace>>, ServiceError> {
        let Some((versioning, spec)) = self.ended_spec(id).await? else {
            return Ok(None);
        };
        Ok(Some(versioning.open_ended(&spec).await?))
    }

    /// Removes what is left of an ended run's versioned workspace (its worktree and branch,
    /// or its scratch history); `Ok(false)` when it has none.
    pub async fn discard_workspace(&self, id: &RunId) -> Result<bool, ServiceError> {
        let Some((versioning, spec)) = self.ended_spec(id).await? else {
            return Ok(false);
        };
        versioning
            .workspaces
            .discard(&spec)
            .await
            .map_err(super::Fault::Workspace)?;
        Ok(true)
    }

    /// The spec of an ended run's versioned workspace, if it has one.
    async fn ended_spec(
        &self,
        id: &RunId,
    ) -> Result<Option<(&Versioning, WorkspaceSpec)>, ServiceError> {
        let (_, history) = self.read_ended_run(id).await?;
        self.spec_of_history(id, &history)
    }

    /// An ended run's events and what they say (one read of the runlog): refused when the
    /// run is unknown or has not ended.
    pub(super) async fn read_ended_run(
        &self,
        id: &RunId,
    ) -> Result<(Vec<fabric_domain::RunEvent>, crate::history::RunHistory), ServiceError> {
        let store = &self.inner.store;
        let events = store.read_events(id).await.map_err(|e| match e {
            crate::ports::StoreError::NotFound(_) => {
                super::InvalidRequest::NoSuchRun { id: id.clone() }.into()
            }
            e => ServiceError::Store(e),
        })?;
        let history = crate::history::RunHistory::read(id.clone(), &events);
        if history.ended.is_none() {
            return Err(super::InvalidRequest::NotEnded { id: id.clone() }.into());
        }
        Ok((events, history))
    }

    /// The spec of the versioned workspace `history` records, if it has one.
    pub(super) fn spec_of_history(
        &self,
        id: &RunId,
        history: &crate::history::RunHistory,
    ) -> Result<Option<(&Versioning, WorkspaceSpec)>, ServiceError> {
        let Some(recorded) = &history.workspace else {
            return Ok(None);
        };
        let Some(versioning) = &self.inner.versioning else {
            return Err(super::InvalidRequest::NotVersioned { id: id.clone() }.into());
        };
        let scratch = self
            .inner
            .store
            .runlog_path(id)
            .and_then(|p| p.parent().map(|d| d.join("workspace")))
            .unwrap_or_else(|| recorded.dir.clone());
        Ok(Some((
            versioning,
            versioning.spec_of(id, recorded, &scratch),
        )))
    }
}

/// Removes a pruned project run's worktree and branch, or a copied directory's copy and its
/// history (a scratch run's history is in its run directory, which the store deletes; a
/// remote's copy is the remote owner's).
pub struct DiscardOnPrune(Versioning);

impl DiscardOnPrune {
    /// Over the service's workspaces and policy.
    pub fn new(workspaces: Arc<dyn Workspaces>, policy: WorkspacePolicy) -> Self {
        Self(Versioning { workspaces, policy })
    }
}

#[async_trait::async_trait]
impl crate::ports::PruneHook for DiscardOnPrune {
    async fn before_delete(&self, id: &RunId, events: &[fabric_domain::RunEvent]) {
        let history = crate::history::RunHistory::read(id.clone(), events);
        // A continued run's workspace is the earlier run's: removed with that one.
        let Some(recorded) = history
            .workspace
            .filter(|w| w.repo.is_some() || w.source.is_some())
            .filter(|w| w.owner.is_none())
        else {
            return;
        };
        let spec = self.0.spec_of(id, &recorded, &recorded.dir);
        if let Err(e) = self.0.workspaces.discard(&spec).await {
            tracing::warn!(run_id = %id, error = %e, "cannot remove a pruned run's worktree and branch");
        }
    }
}

/// A workspace that could not be opened, as the service says it: the user's to fix (a
/// path that is no repository, a base that does not exist, ...) or the fabric's.
fn opening_failed(e: WorkspaceError) -> ServiceError {
    if e.is_user_fixable() {
        super::ProjectError::Workspace(e).into()
    } else {
        super::Fault::OpenWorkspace(e).into()
    }
}
