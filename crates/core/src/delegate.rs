//! Sub-agents as tools (seed 002): a specialist may hand a task to another, through a tool
//! `agent__<id>` that starts a fresh child run and returns the child's finish payload. The
//! loop does not know it called an agent: [`AgentTool`] is a [`Tool`] like any other.
//!
//! Budgets are uniform: every run of one tree shares a [`RunBudget`] (steps, tokens, time)
//! and a depth cap; the engine charges each model call to it, so a child's work is paid from
//! its parent's budget, and a run that finds it used up ends `budget_exceeded`.

use async_trait::async_trait;
use fabric_domain::{AGENT_TOOL_PREFIX, RunId, ToolAnnotations, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::execute::RunOutcome;
use crate::ports::{ToolContext, ToolError};
use crate::typed::TypedTool;

/// What a tree of runs (a run and every run it delegated to) may spend together.
#[derive(Debug)]
pub struct RunBudget {
    max_depth: u32,
    max_steps: Option<u32>,
    max_tokens: Option<u64>,
    deadline: Option<Instant>,
    steps: AtomicU32,
    tokens: AtomicU64,
}

impl RunBudget {
    /// A budget: delegation depth cap, and optional limits on model calls, tokens and time
    /// for the whole tree.
    pub fn new(
        max_depth: u32,
        max_steps: Option<u32>,
        max_tokens: Option<u64>,
        time: Option<Duration>,
    ) -> Self {
        Self {
            max_depth,
            max_steps,
            max_tokens,
            deadline: time.map(|t| Instant::now() + t),
            steps: AtomicU32::new(0),
            tokens: AtomicU64::new(0),
        }
    }

    /// No limits besides the default depth cap.
    pub fn unlimited() -> Self {
        Self::new(
            fabric_domain::DEFAULT_MAX_DELEGATION_DEPTH,
            None,
            None,
            None,
        )
    }

    /// Takes one model call from the budget, or says which limit is used up.
    pub fn take_step(&self) -> Result<(), String> {
        if let Some(deadline) = self.deadline
            && Instant::now() >= deadline
        {
            return Err(
                "the time budget of this run and the runs it delegated to is used up".to_owned(),
            );
        }
        if let Some(max) = self.max_tokens {
            let used = self.tokens.load(Ordering::Acquire);
            if used >= max {
                return Err(format!(
                    "the token budget of this run and the runs it delegated to is used up ({used} of {max} tokens)"
                ));
            }
        }
        let used = self.steps.fetch_add(1, Ordering::AcqRel) + 1;
        if let Some(max) = self.max_steps
            && used > max
        {
            return Err(format!(
                "the step budget of this run and the runs it delegated to is used up ({max} model calls)"
            ));
        }
        Ok(())
    }

    /// Charges tokens a model call used.
    pub fn charge_tokens(&self, tokens: u64) {
        self.tokens.fetch_add(tokens, Ordering::AcqRel);
    }

    /// Model calls made so far by the whole tree.
    pub fn steps_used(&self) -> u32 {
        self.steps.load(Ordering::Acquire)
    }

    /// The depth cap.
    pub fn max_depth(&self) -> u32 {
        self.max_depth
    }
}

/// Where a run sits in its tree.
#[derive(Debug, Clone)]
pub struct Lineage {
    /// 0 for a run a person started, 1 for its children, and so on.
    pub depth: u32,
    /// The run that delegated this one.
    pub parent_run_id: Option<RunId>,
    /// Shared by the whole tree.
    pub budget: Arc<RunBudget>,
}

impl Default for Lineage {
    fn default() -> Self {
        Self::root(Arc::new(RunBudget::unlimited()))
    }
}

impl Lineage {
    /// A run a person started.
    pub fn root(budget: Arc<RunBudget>) -> Self {
        Self {
            depth: 0,
            parent_run_id: None,
            budget,
        }
    }

    /// The lineage of a child of `parent`, one level deeper, on the same budget.
    pub fn child(&self, parent: RunId) -> Self {
        Self {
            depth: self.depth + 1,
            parent_run_id: Some(parent),
            budget: self.budget.clone(),
        }
    }
}

/// Starts child runs; the binary implements it with its application function, so a child
/// is prepared like `fabric run --pack <id>`.
#[async_trait]
pub trait ChildRunner: Send + Sync {
    /// Runs `task` with specialist `specialist` as a child of the run `parent` works for,
    /// to its end. `Err` means it could not even start.
    async fn run_child(
        &self,
        specialist: &str,
        task: String,
        parent: &ToolContext,
    ) -> Result<RunOutcome, String>;
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
