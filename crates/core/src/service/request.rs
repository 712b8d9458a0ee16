//! What a front end asks for, and the port that turns it into a task ready to run.

use async_trait::async_trait;
use fabric_domain::SandboxMode;
use std::sync::Arc;

use super::ServiceError;
use crate::CoreError;
use crate::budget::Lineage;
use crate::delegate::ChildRunner;
use crate::execute::RunOutcome;
use crate::execute::{TaskForce, TaskForceMode};
use crate::history::RunHistory;
use crate::ports::{NewRun, RunObserver};
use tokio_util::sync::CancellationToken;

/// A task as a person (CLI), a client (HTTP, MCP) or a parent run asks for it; `None` means
/// "use the configured default".
#[derive(Debug, Clone, Default)]
pub struct TaskRequest {
    /// What to do.
    pub prompt: String,
    /// The specialists (`--pack a,b`); empty: recruit by routing.
    pub pack: Vec<String>,
    /// The model key.
    pub model_key: Option<String>,
    /// A model name that overrides the key's model and skips discovery (`--model`).
    pub model: Option<String>,
    /// Whether tools may use the network.
    pub network_allowed: Option<bool>,
    /// Step limit.
    pub max_steps: Option<u32>,
    /// Stream model text.
    pub stream: bool,
    /// The sandbox mode (`--sandbox`).
    pub sandbox: Option<SandboxMode>,
    /// A run continued after its process stopped (`fabric resume`): it goes on with the
    /// model keys it recorded, whatever today's daily budgets say (a run under way is not
    /// stopped by them). Not part of the queued request.
    pub continued: bool,
    /// Who asks (`run_start.origin`): a person by default; the service sets `child` and
    /// `critic`, `fabric replay`, `test` and `eval` their own.
    pub origin: fabric_domain::runlog::RunOrigin,
    /// The user's project to work on, in a worktree on the run's own branch (issue #25);
    /// `None`: a scratch workspace.
    pub project: Option<super::ProjectRequest>,
    /// The A2A context of the task this run is (`run_start.context_id`), when an A2A client
    /// asked for it.
    pub context_id: Option<String>,
}

impl TaskRequest {
    /// The request as the run queue keeps it (a JSON object; docs/DURABILITY.md).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "prompt": self.prompt,
            "pack": self.pack,
            "model_key": self.model_key,
            "model": self.model,
            "network_allowed": self.network_allowed,
            "max_steps": self.max_steps,
            "stream": self.stream,
            "sandbox": self.sandbox,
            "origin": self.origin,
            "project": self.project.as_ref().map(|p| serde_json::json!({
                "path": p.path,
                "base": p.base,
            })),
            "context_id": self.context_id,
        })
    }

    /// A request read back from the queue; what does not fit is left at its default, so a
    /// request written by a newer fabric still runs.
    pub fn from_json(value: &serde_json::Value) -> Self {
        let text = |key: &str| value.get(key).and_then(|v| v.as_str()).map(str::to_owned);
        Self {
            prompt: text("prompt").unwrap_or_default(),
            pack: value
                .get("pack")
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            model_key: text("model_key"),
            model: text("model"),
            network_allowed: value.get("network_allowed").and_then(|v| v.as_bool()),
            max_steps: value
                .get("max_steps")
                .and_then(|v| v.as_u64())
                .and_then(|n| u32::try_from(n).ok()),
            stream: value
                .get("stream")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
            sandbox: text("sandbox").as_deref().and_then(SandboxMode::parse),
            continued: false,
            origin: text("origin")
                .map(|o| fabric_domain::runlog::RunOrigin::from(o.as_str()))
                .unwrap_or_default(),
            project: value.get("project").and_then(|p| {
                Some(super::ProjectRequest {
                    path: p.get("path")?.as_str()?.into(),
                    base: p.get("base").and_then(|b| b.as_str()).map(str::to_owned),
                })
            }),
            context_id: text("context_id"),
        }
    }
}

/// What the preparer may use besides the request: the runner of child runs, so
/// `agent__<id>` tools start their children through the same service.
#[derive(Clone)]
pub struct PrepareContext {
    /// Starts child runs through the service.
    pub children: Arc<dyn ChildRunner>,
}

/// Turns a request into a task ready to run: recruitment, model discovery, each member's
/// tools and client. The binary implements it over its configuration and adapters.
#[async_trait]
pub trait Preparer: Send + Sync {
    /// What the configuration decides about a request, cheaply and without I/O, before it
    /// takes a slot: an unknown specialist or model key, a request for more than the config
    /// allows. So a bad request is answered as such even when the service is full.
    fn check(&self, request: &TaskRequest) -> Result<(), ServiceError> {
        let _ = request;
        Ok(())
    }

    /// Routes, resolves the specialists, the models and the tools; may take long (routing
    /// model, discovery, starting or pulling a model). Part of the run: it is cancelled with
    /// it, by id or at shutdown.
    async fn prepare(
        &self,
        request: TaskRequest,
        context: &PrepareContext,
    ) -> Result<Box<dyn Runnable>, ServiceError>;

    /// Before a stopped run goes on: kills what its commands left running in `workspace`
    /// and returns their pids (recorded in `run_resumed`). Nothing by default.
    async fn reap(&self, workspace: &std::path::Path) -> Vec<u32> {
        let _ = workspace;
        Vec::new()
    }
}

/// A task ready to run. [`TaskForce`] is the fabric's; tests of front ends script their
/// own.
#[async_trait]
pub trait Runnable: Send {
    /// Who works on it, with which model and why, for the person at the terminal.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// Makes it a child run: one level below its parent, on the parent's budget.
    fn adopt(&mut self, lineage: Lineage) {
        let _ = lineage;
    }

    /// Whether a child run works in its parent's workspace.
    fn shares_parent_workspace(&self) -> bool {
        false
    }

    /// Runs it in `run` to its end.
    async fn run(
        self: Box<Self>,
        run: NewRun,
        observer: &dyn RunObserver,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, CoreError>;

    /// Continues `run`, whose process stopped before its end, from its recorded `history`.
    async fn resume(
        self: Box<Self>,
        run: NewRun,
        history: RunHistory,
        observer: &dyn RunObserver,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, CoreError> {
        let _ = (run, history, observer, cancel);
        Err(CoreError::InvalidTask(
            "this task cannot continue a run".to_owned(),
        ))
    }
}

#[async_trait]
impl Runnable for TaskForce {
    fn notes(&self) -> Vec<String> {
        let mut notes = vec![self.recruitment_note()];
        notes.extend(self.model_notes());
        notes
    }

    fn adopt(&mut self, lineage: Lineage) {
        self.lineage = Some(lineage);
    }

    fn shares_parent_workspace(&self) -> bool {
        self.share_parent_workspace
    }

    async fn run(
        self: Box<Self>,
        run: NewRun,
        observer: &dyn RunObserver,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, CoreError> {
        crate::execute::run_task_force(run, *self, observer, cancel).await
    }

    async fn resume(
        self: Box<Self>,
        run: NewRun,
        history: RunHistory,
        observer: &dyn RunObserver,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, CoreError> {
        let mut force = *self;
        // As recorded: the same mode, limits and models, so the conversation goes on as it
        // began (the configuration may have changed its defaults since).
        if history.recruitment.is_some() {
            force.mode = TaskForceMode::recorded(&history.mode());
        }
        if let Some(start) = &history.start {
            force.max_steps = start.max_steps;
            force.network_allowed = start.network_allowed;
        }
        for (member, recorded) in force.members.iter_mut().zip(&history.members) {
            if let Some((_, model)) = &recorded.model {
                member.model.name.clone_from(model);
            }
        }
        crate::execute::resume_task_force(run, force, history, observer, cancel).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_30_a_queued_request_keeps_its_a2a_context() {
        let request = TaskRequest {
            prompt: "go".into(),
            context_id: Some("conv-1".into()),
            ..TaskRequest::default()
        };
        let back = TaskRequest::from_json(&request.to_json());
        assert_eq!(back.context_id.as_deref(), Some("conv-1"));
        assert_eq!(back.prompt, "go");
        let older = TaskRequest::from_json(&serde_json::json!({"prompt": "go"}));
        assert_eq!(older.context_id, None, "queued before contexts existed");
    }
}
