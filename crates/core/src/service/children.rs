//! Child runs (`agent__<id>` tools) go through the same service as every other run: the
//! same preparation as `fabric run --pack <id>`, their own runlog with `parent_run_id`,
//! paid from the parent's budget, cancelled with the parent.

use async_trait::async_trait;
use fabric_domain::RunId;
use fabric_domain::runlog::RunOrigin;

use super::{ParentRun, RunService, ServiceError, Submission, TaskRequest};
use crate::delegate::ChildRunner;
use crate::execute::RunOutcome;
use crate::history::RunHistory;
use crate::ports::ToolContext;

/// The service, as the runner of child runs.
pub(super) struct ServiceChildren(pub(super) RunService);

#[async_trait]
impl ChildRunner for ServiceChildren {
    async fn run_child(
        &self,
        specialist: &str,
        task: String,
        parent: &ToolContext,
    ) -> Result<RunOutcome, ServiceError> {
        self.start(specialist, task, parent, false, RunOrigin::Child)
            .await
    }

    async fn run_child_in_workspace(
        &self,
        specialist: &str,
        task: String,
        parent: &ToolContext,
    ) -> Result<RunOutcome, ServiceError> {
        // Only the quality gate runs a child in the parent's own workspace: its critic.
        self.start(specialist, task, parent, true, RunOrigin::Critic)
            .await
    }

    async fn resume_child(
        &self,
        specialist: &str,
        task: &str,
        parent: &ToolContext,
    ) -> Option<Result<RunOutcome, ServiceError>> {
        let id = self.interrupted_child(specialist, task, parent).await?;
        let submission = Submission {
            request: TaskRequest::default(),
            observer: None,
            parent: Some(ParentRun {
                lineage: parent.lineage.child(parent.run_id.clone()),
                workspace: parent.workspace.clone(),
                share_workspace: false,
                cancel: parent.cancel.clone(),
            }),
            resume: Some(id),
            run_id: None,
            // A child's spans hang under its parent's by `parent_run_id` (run_start).
            trace_parent: None,
            ..Submission::new(TaskRequest::default())
        };
        let handle = match self.0.submit(submission) {
            Ok(handle) => handle,
            Err(e) => return Some(Err(e)),
        };
        Some(handle.outcome().await)
    }
}

impl ServiceChildren {
    /// Starts a child run of `parent` and waits for its end.
    async fn start(
        &self,
        specialist: &str,
        task: String,
        parent: &ToolContext,
        share_workspace: bool,
        origin: RunOrigin,
    ) -> Result<RunOutcome, ServiceError> {
        let submission = Submission {
            request: TaskRequest {
                prompt: task,
                specialists: vec![specialist.to_owned()],
                network_allowed: Some(parent.network_allowed),
                origin,
                ..TaskRequest::default()
            },
            observer: None,
            parent: Some(ParentRun {
                lineage: parent.lineage.child(parent.run_id.clone()),
                workspace: parent.workspace.clone(),
                share_workspace,
                cancel: parent.cancel.clone(),
            }),
            resume: None,
            run_id: None,
            trace_parent: None,
            ..Submission::new(TaskRequest::default())
        };
        self.0.submit(submission)?.outcome().await
    }

    /// The interrupted run that `specialist` was doing `task` in for `parent`, if any.
    async fn interrupted_child(
        &self,
        specialist: &str,
        task: &str,
        parent: &ToolContext,
    ) -> Option<RunId> {
        let store = self.0.store();
        let candidates = match store.interrupted_runs().await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(run_id = %parent.run_id, error = %e, "cannot list interrupted runs to continue a child run");
                return None;
            }
        };
        for id in candidates {
            let Ok(events) = store.read_events(&id).await else {
                continue;
            };
            let history = RunHistory::read(id, &events);
            let Some(start) = &history.start else {
                continue;
            };
            if start.parent_run_id.as_ref() == Some(&parent.run_id)
                && start.prompt == task
                && history.specialist_ids() == [specialist]
            {
                return Some(history.run_id);
            }
        }
        None
    }
}
