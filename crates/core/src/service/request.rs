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
///
/// The run queue keeps it as JSON (docs/DURABILITY.md) through its serde form: read back
/// leniently, so a field that does not fit (a request written by a newer fabric) is left at
/// its default and the request still runs.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct TaskRequest {
    /// What to do.
    #[serde(deserialize_with = "lenient")]
    pub prompt: String,
    /// The specialists of the task force (`--pack a,b`; `pack` in the queue's JSON, the wire's
    /// old word for a task force); empty: recruit by routing.
    #[serde(rename = "pack", deserialize_with = "lenient")]
    pub specialists: Vec<String>,
    /// The model key.
    #[serde(deserialize_with = "lenient")]
    pub model_key: Option<String>,
    /// A model name that overrides the key's model and skips discovery (`--model`).
    #[serde(deserialize_with = "lenient")]
    pub model: Option<String>,
    /// Whether tools may use the network.
    #[serde(deserialize_with = "lenient")]
    pub network_allowed: Option<bool>,
    /// Step limit.
    #[serde(deserialize_with = "lenient")]
    pub max_steps: Option<u32>,
    /// Stream model text.
    #[serde(deserialize_with = "lenient")]
    pub stream: bool,
    /// The sandbox mode (`--sandbox`).
    #[serde(deserialize_with = "lenient")]
    pub sandbox: Option<SandboxMode>,
    /// A run continued after its process stopped (`fabric resume`): it goes on with the
    /// model keys it recorded, whatever today's daily budgets say (a run under way is not
    /// stopped by them). Not part of the queued request.
    #[serde(skip)]
    pub continued: bool,
    /// Who asks (`run_start.origin`): a person by default; the service sets `child` and
    /// `critic`, `fabric replay`, `test` and `eval` their own.
    #[serde(deserialize_with = "lenient")]
    pub origin: fabric_domain::runlog::RunOrigin,
    /// The user's project to work on, in a worktree on the run's own branch (issue #25);
    /// `None`: a scratch workspace.
    #[serde(deserialize_with = "lenient")]
    pub project: Option<super::ProjectRequest>,
    /// The A2A context of the task this run is (`run_start.context_id`), when an A2A client
    /// asked for it.
    #[serde(deserialize_with = "lenient")]
    pub context_id: Option<String>,
    /// The earlier run whose conversation this run goes on with (`fabric run --continue` or
    /// `--fork`, issue #42); `None`: a new conversation. Left out of the queue's JSON when
    /// `None`, so requests without it keep their JSON.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub continues: Option<ContinueRequest>,
    /// MCP servers the caller hands the run besides its specialists' own (an editor's, over
    /// ACP, issue #44): each member starts them and is offered all their tools; a
    /// specialist's own server of the same name wins. Left out of the queue's JSON when empty.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<fabric_domain::McpServerSpec>,
    /// The approval mode for this run in place of each specialist's own (its rules kept): an
    /// ACP session's mode (issue #44); `None`: the specialists' own. Left out of the queue's
    /// JSON when `None`.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub approval_mode: Option<fabric_domain::ApprovalMode>,
}

/// Which earlier run a request continues, and how (issue #42).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContinueRequest {
    /// The earlier run: it must have ended.
    pub run_id: fabric_domain::RunId,
    /// `false`: on the earlier run's branch (`--continue`); `true`: on a new branch from its
    /// head, the earlier branch left alone (`--fork`).
    #[serde(default)]
    pub fork: bool,
}

impl ContinueRequest {
    /// How the run continues, as `run_start.continues.mode` records it.
    pub fn mode(&self) -> fabric_domain::runlog::ContinueMode {
        match self.fork {
            true => fabric_domain::runlog::ContinueMode::Fork,
            false => fabric_domain::runlog::ContinueMode::Continue,
        }
    }
}

/// A field's value, or its default when it does not fit.
fn lenient<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned + Default,
{
    let value = <serde_json::Value as serde::Deserialize>::deserialize(deserializer)?;
    Ok(T::deserialize(value).unwrap_or_default())
}

impl TaskRequest {
    /// The request as the run queue keeps it (a JSON object; docs/DURABILITY.md).
    ///
    /// Fails only for what JSON cannot hold: a project path that is not UTF-8.
    pub fn to_json(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::to_value(self)
    }

    /// A request read back from the queue; what does not fit is left at its default, so a
    /// request written by a newer fabric still runs.
    pub fn from_json(value: &serde_json::Value) -> Self {
        <Self as serde::Deserialize>::deserialize(value).unwrap_or_default()
    }

    /// The request that runs `history`'s run again as it was recorded: its prompt,
    /// specialists (recruited explicitly, no routing call again; none when the run stopped
    /// before recording its recruitment), model key, limits, sandbox mode, origin and A2A
    /// context. `None` when the run never recorded its start.
    pub fn recorded(history: &RunHistory) -> Option<Self> {
        let start = history.start.as_ref()?;
        let specialists = history.specialist_ids();
        Some(Self {
            prompt: start.prompt.clone(),
            // Each member's recorded key when they differ (their specialists' own keys), the
            // shared one otherwise.
            model_key: history
                .shared_model_key()
                .or_else(|| (history.members.len() <= 1).then(|| start.model_key.clone())),
            specialists,
            network_allowed: Some(start.network_allowed),
            max_steps: Some(start.max_steps),
            sandbox: start
                .sandbox
                .get("mode")
                .and_then(|m| m.as_str())
                .and_then(SandboxMode::parse),
            origin: start.origin.clone(),
            context_id: start.context_id.clone(),
            continues: start.continues.as_ref().map(|c| ContinueRequest {
                run_id: c.run_id.clone(),
                fork: c.mode == fabric_domain::runlog::ContinueMode::Fork,
            }),
            ..Self::default()
        })
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

    /// Gives it the person who started it, asked its questions and approvals (issue #42).
    fn attend(&mut self, person: Arc<dyn crate::ports::Person>) {
        let _ = person;
    }

    /// Whether a child run works in its parent's workspace.
    fn shares_parent_workspace(&self) -> bool {
        false
    }

    /// Makes it go on with an earlier run's conversation (issue #42): its one member starts
    /// from `inherited`. Nothing by default.
    fn inherit(&mut self, inherited: crate::conversation::Inherited) {
        let _ = inherited;
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

    fn attend(&mut self, person: Arc<dyn crate::ports::Person>) {
        self.person = Some(person);
    }

    fn shares_parent_workspace(&self) -> bool {
        self.share_parent_workspace
    }

    fn inherit(&mut self, inherited: crate::conversation::Inherited) {
        if let Some(chosen) = &inherited.chosen {
            self.recruitment.reason.clone_from(chosen);
        }
        if let Some(member) = self.members.first_mut() {
            member.inherited = Some(Arc::new(inherited));
        }
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
        let back = TaskRequest::from_json(&request.to_json().unwrap_or_default());
        assert_eq!(back.context_id.as_deref(), Some("conv-1"));
        assert_eq!(back.prompt, "go");
        let older = TaskRequest::from_json(&serde_json::json!({"prompt": "go"}));
        assert_eq!(older.context_id, None, "queued before contexts existed");
    }

    #[test]
    fn issue_41_the_queued_request_keeps_its_json_and_reads_leniently() {
        let request = TaskRequest {
            prompt: "go".into(),
            specialists: vec!["engineering".into()],
            max_steps: Some(4),
            sandbox: Some(SandboxMode::Strict),
            continued: true,
            project: Some(super::super::ProjectRequest {
                path: "/src/app".into(),
                base: None,
            }),
            ..TaskRequest::default()
        };
        // The shape queues written by earlier fabrics hold (docs/DURABILITY.md).
        assert_eq!(
            request.to_json().unwrap_or_default(),
            serde_json::json!({
                "prompt": "go", "pack": ["engineering"], "model_key": null, "model": null,
                "network_allowed": null, "max_steps": 4, "stream": false, "sandbox": "strict",
                "origin": "user", "project": {"path": "/src/app", "base": null},
                "context_id": null,
            })
        );
        let newer = TaskRequest::from_json(&serde_json::json!({
            "prompt": "go", "max_steps": "many", "sandbox": "from-the-future",
            "origin": "scheduler", "pack": "engineering", "extra": 1,
        }));
        assert_eq!(newer.prompt, "go");
        assert_eq!(newer.max_steps, None);
        assert_eq!(newer.sandbox, None);
        assert!(newer.specialists.is_empty());
        assert!(!newer.continued);
        assert_eq!(TaskRequest::from_json(&serde_json::json!(3)).prompt, "");
    }

    /// A queued continuation keeps its link (a worker continues the same run), and a link
    /// that does not fit is left out, as any field.
    #[test]
    fn issue_42_a_queued_request_keeps_the_run_it_continues() {
        let id = fabric_domain::RunId::parse("20260101-120000-000-0123abcd")
            .unwrap_or_else(|e| panic!("{e}"));
        let request = TaskRequest {
            prompt: "go on".into(),
            continues: Some(ContinueRequest {
                run_id: id.clone(),
                fork: true,
            }),
            ..TaskRequest::default()
        };
        let json = request.to_json().unwrap_or_default();
        assert_eq!(
            json["continues"],
            serde_json::json!({"run_id": "20260101-120000-000-0123abcd", "fork": true})
        );
        let back = TaskRequest::from_json(&json);
        assert_eq!(back.continues, request.continues);
        let odd = TaskRequest::from_json(&serde_json::json!({"prompt": "x", "continues": 7}));
        assert_eq!(odd.continues, None);
        assert_eq!(odd.prompt, "x");
    }

    #[test]
    fn issue_41_a_project_path_that_is_not_utf8_is_an_error_not_a_panic_when_queued() {
        use std::os::unix::ffi::OsStrExt;
        let path = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(b"/src/\xff"));
        let request = TaskRequest {
            prompt: "go".into(),
            project: Some(super::super::ProjectRequest { path, base: None }),
            ..TaskRequest::default()
        };
        // The queue refuses it with `ProjectError::NotUtf8` (remote.rs); `json!` panicked.
        assert!(request.to_json().is_err());
    }
}
