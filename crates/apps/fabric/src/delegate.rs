//! Child runs for `agent__<id>` tools: prepared by the same application function as
//! `fabric run --pack <id>`, recorded in their own runlog (with `parent_run_id`), paid from
//! the parent's budget.

use async_trait::async_trait;
use fabric_config::{DelegationWorkspace, Settings};
use fabric_core::delegate::ChildRunner;
use fabric_core::execute::{self, RunOutcome};
use fabric_core::{NoopObserver, RunStore, ToolContext};

use crate::app::{self, TaskRequest};
use crate::wiring;

/// Runs children with the settings of the run that delegates.
pub(crate) struct CliChildRunner {
    pub(crate) settings: Settings,
}

#[async_trait]
impl ChildRunner for CliChildRunner {
    async fn run_child(
        &self,
        specialist: &str,
        task: String,
        parent: &ToolContext,
    ) -> Result<RunOutcome, String> {
        let request = TaskRequest {
            prompt: task,
            pack: vec![specialist.to_owned()],
            network_allowed: Some(parent.network_allowed),
            ..TaskRequest::default()
        };
        // Boxed: a child's tools may delegate again, which makes this future recursive.
        let prepared = Box::pin(app::prepare(&self.settings, request))
            .await
            .map_err(|e| format!("{e:#}"))?;
        let mut force = prepared.task_force();
        force.lineage = Some(parent.lineage.child(parent.run_id.clone()));
        let store = wiring::store(&self.settings);
        let mut run = store
            .create_run(fabric_core::new_run_id())
            .await
            .map_err(|e| e.to_string())?;
        if self.settings.delegation.workspace == DelegationWorkspace::Shared {
            run.workspace = parent.workspace.clone();
        }
        // The child stops when the parent is cancelled, and only then.
        Box::pin(execute::run_task_force(
            run,
            force,
            &NoopObserver,
            parent.cancel.child_token(),
        ))
        .await
        .map_err(|e| e.to_string())
    }
}
