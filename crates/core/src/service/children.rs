//! Child runs (`agent__<id>` tools) go through the same service as every other run: the
//! same preparation as `fabric run --pack <id>`, their own runlog with `parent_run_id`,
//! paid from the parent's budget, cancelled with the parent.

use async_trait::async_trait;

use super::{ParentRun, RunService, Submission, TaskRequest};
use crate::delegate::ChildRunner;
use crate::execute::RunOutcome;
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
    ) -> Result<RunOutcome, String> {
        let submission = Submission {
            request: TaskRequest {
                prompt: task,
                pack: vec![specialist.to_owned()],
                network_allowed: Some(parent.network_allowed),
                ..TaskRequest::default()
            },
            observer: None,
            parent: Some(ParentRun {
                lineage: parent.lineage.child(parent.run_id.clone()),
                workspace: parent.workspace.clone(),
                cancel: parent.cancel.clone(),
            }),
        };
        let handle = self.0.submit(submission).map_err(|e| e.to_string())?;
        handle.outcome().await.map_err(|e| e.to_string())
    }
}
