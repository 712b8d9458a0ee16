//! Sub-agents as tools (seed 002): a specialist may hand a task to another, through a tool
//! `agent__<id>` that starts a fresh child run and returns the child's finish payload. The
//! loop does not know it called an agent: [`AgentTool`] is a [`Tool`] like any other.
//!
//! Budgets are uniform: every run of one tree shares a [`RunBudget`] (steps, tokens, time)
//! and a depth cap; the engine charges each model call to it, so a child's work is paid from
//! its parent's budget, and a run that finds it used up ends `budget_exceeded`.

use async_trait::async_trait;
use fabric_domain::{AGENT_TOOL_PREFIX, ToolAnnotations, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

use crate::ServiceError;
pub use crate::budget::{Lineage, RunBudget};
use crate::execute::RunOutcome;
use crate::ports::{ToolContext, ToolError};
use crate::typed::TypedTool;

/// Starts child runs; the run service implements it, so a child is prepared like
/// `fabric run --pack <id>`.
#[async_trait]
pub trait ChildRunner: Send + Sync {
    /// Runs `task` with specialist `specialist` as a child of the run `parent` works for,
    /// to its end. `Err` means it could not even start (the service's refusal, typed:
    /// [`ServiceError::remedy`] says whether the parent's model can fix its request).
    async fn run_child(
        &self,
        specialist: &str,
        task: String,
        parent: &ToolContext,
    ) -> Result<RunOutcome, ServiceError>;

    /// Runs `task` like [`run_child`](Self::run_child), but always in `parent.workspace`,
    /// whatever `delegation.workspace` says: a critic reviews the staged work there.
    async fn run_child_in_workspace(
        &self,
        specialist: &str,
        task: String,
        parent: &ToolContext,
    ) -> Result<RunOutcome, ServiceError> {
        self.run_child(specialist, task, parent).await
    }

    /// Continues the child run that `specialist` was working on for `parent` when their
    /// process stopped (found by its parent, specialist and task); `None` when there is no
    /// such child to continue.
    async fn resume_child(
        &self,
        specialist: &str,
        task: &str,
        parent: &ToolContext,
    ) -> Option<Result<RunOutcome, ServiceError>> {
        let _ = (specialist, task, parent);
        None
    }
}

/// The input of an `agent__<id>` tool.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DelegateInput {
    /// The task for the other specialist, complete in itself: it sees nothing of this
    /// conversation.
    pub task: String,
}

/// The tool `agent__<id>`: hands a task to specialist `id` in a fresh child run.
pub struct AgentTool {
    target: String,
    description: String,
    runner: Arc<dyn ChildRunner>,
}

impl AgentTool {
    /// A tool delegating to specialist `target`, whose one-line description says what it
    /// is good at.
    pub fn new(target: &str, description: &str, runner: Arc<dyn ChildRunner>) -> Self {
        Self {
            target: target.to_owned(),
            description: description.to_owned(),
            runner,
        }
    }
}

#[async_trait]
impl TypedTool for AgentTool {
    type Input = DelegateInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_input::<DelegateInput>(
            &format!("{AGENT_TOOL_PREFIX}{}", self.target),
            &format!(
                "Hand a task to the specialist `{}` ({}). It works in a fresh run and returns its final answer. Describe the task completely: it sees nothing of this conversation.",
                self.target,
                self.description.trim_end_matches('.')
            ),
        )
        .example(json!({"task": "Summarise the findings in notes.md in three bullet points"}))
        .annotate(ToolAnnotations {
            destructive: true,
            ..ToolAnnotations::default()
        })
    }

    async fn run(&self, input: DelegateInput, ctx: &ToolContext) -> Result<Value, ToolError> {
        let max_depth = ctx.lineage.budget.max_depth();
        if ctx.lineage.depth >= max_depth {
            return Err(ToolError::Failed(
                json!({
                    "status": "depth_exceeded",
                    "reason": format!("delegation is limited to depth {max_depth} and this run is at depth {}; do the task yourself with your other tools", ctx.lineage.depth),
                })
                .to_string(),
            ));
        }
        if input.task.trim().is_empty() {
            return Err(ToolError::InvalidArguments(
                "`task` is empty; describe what the other specialist should do".to_owned(),
            ));
        }
        let outcome = self
            .runner
            .run_child(&self.target, input.task, ctx)
            .await
            .map_err(|e| ToolError::Failed(format!("could not start `{}`: {e}", self.target)))?;
        self.answer(outcome)
    }

    async fn resume(
        &self,
        input: DelegateInput,
        ctx: &ToolContext,
    ) -> Option<Result<Value, ToolError>> {
        let resumed = self
            .runner
            .resume_child(&self.target, &input.task, ctx)
            .await?;
        Some(
            resumed
                .map_err(|e| {
                    ToolError::Failed(format!("could not continue `{}`: {e}", self.target))
                })
                .and_then(|outcome| self.answer(outcome)),
        )
    }
}

impl AgentTool {
    /// The child's outcome as the parent's model reads it: an error when it has no result.
    fn answer(&self, outcome: RunOutcome) -> Result<Value, ToolError> {
        let answer = json!({
            "run_id": outcome.run_id,
            "specialist": self.target,
            "status": outcome.status,
            "steps": outcome.steps,
            "result": outcome.payload,
            "reason": outcome.reason,
        });
        if outcome.status.has_result() {
            Ok(answer)
        } else {
            Err(ToolError::Failed(answer.to_string()))
        }
    }
}
