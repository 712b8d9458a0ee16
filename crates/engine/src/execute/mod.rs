//! The use case behind `fabric run` and the HTTP API: one task, one run, one result.
//!
//! A task goes to a task force of one or more specialists ([`TaskForce::single`] makes one
//! of a single specialist), and one path runs every one of them: [`run_task_force`] (or
//! [`execute_task_force`] in a new run, [`resume_task_force`] after a stop). Several members
//! work one after another (`sequential`: each gets the previous one's finish payload as
//! context) or at the same time (`parallel`, up to a limit: their payloads are merged into
//! one result with a section per member, in recruitment order). All share one workspace and
//! one runlog. The engine loop knows
//! nothing of this: each member runs the same [`run_loop`](crate::engine) with its own
//! tools, model and a recorder view that tags its events with `pack_index`.

mod critic;
mod merge;
mod prompt;
mod team;
mod toolset;

use fabric_domain::{RunId, RunStatus, SpecialistSpec, Usage, runlog};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::CoreError;
use crate::engine::{Fallback, ModelParams};
use crate::ports::{ChatClient, NewRun, RunObserver, RunSandbox, RunStore, Tool, ToolSource};
pub use crate::recruit::Roster;
use crate::recruit::RoutingCall;

pub use fabric_domain::TaskForceMode;
pub use merge::HANDOFF_END;
pub(crate) use merge::handoff_message;
pub use prompt::{MAX_PROMPT_WORKFLOWS, WORKFLOW_WINDOW_SHARE};

/// One member of a task force: a specialist with its own tools and model, owning its client
/// (shared with the other runs of its model key).
pub struct Member {
    /// Who; shared, as the definition is the same for every run.
    pub specialist: Arc<SpecialistSpec>,
    /// Its tools. Those needing the network are dropped when the run does not allow it, and
    /// all but read-only ones when the specialist may not write.
    pub tools: Vec<Arc<dyn Tool>>,
    /// Tools that arrive while the run goes on (MCP servers, delegation), filtered by the
    /// same rules and read by the loop between steps.
    pub sources: Vec<Arc<dyn ToolSource>>,
    /// The client of its model.
    pub chat: Arc<dyn ChatClient>,
    /// Its model key.
    pub model_key: String,
    /// Its model.
    pub model: ModelParams,
    /// How the model was chosen (discovery), for `run_start` and `pack_start`.
    pub model_reason: Option<String>,
    /// The critic that reviews its work before the run completes, if it has one.
    pub critic: Option<MemberCritic>,
    /// The earlier conversation it goes on with (a run that continues another, issue #42):
    /// its loop starts from the system prompt, these messages and then the task.
    pub inherited: Option<Arc<crate::conversation::Inherited>>,
}

impl Member {
    /// `specialist` with `tools` on `chat`, the model `model` under `model_key`: no tools
    /// that arrive later, no discovery note, no critic.
    pub fn new(
        specialist: Arc<SpecialistSpec>,
        tools: Vec<Arc<dyn Tool>>,
        chat: Arc<dyn ChatClient>,
        model_key: impl Into<String>,
        model: ModelParams,
    ) -> Self {
        Self {
            specialist,
            tools,
            sources: Vec::new(),
            chat,
            model_key: model_key.into(),
            model,
            model_reason: None,
            critic: None,
            inherited: None,
        }
    }
}

/// A member's critic (the quality gate; docs/QUALITY.md): its writes are staged, and a
/// child run of the critic reviews them when it calls `finish_task`.
#[derive(Clone)]
pub struct MemberCritic {
    /// The critic's specialist id.
    pub specialist: String,
    /// Reviews at most.
    pub max_rounds: u32,
    /// Starts the critic's run.
    pub runner: Arc<dyn crate::delegate::ChildRunner>,
    /// Makes the staging area.
    pub stager: Arc<dyn crate::ports::Stager>,
}

/// A task for one or more specialists, ready to run: what preparation makes
/// (`service::prepare`) and the engine runs. [`TaskForce::single`] makes one of a single
/// specialist.
pub struct TaskForce {
    /// What the user asked.
    pub prompt: String,
    /// The members in recruitment order (at least one).
    pub members: Vec<Member>,
    /// How they were chosen.
    pub recruitment: Roster,
    /// The routing model call, recorded as `llm_request`/`llm_response` with
    /// `purpose: routing`.
    pub routing_call: Option<RoutingCall>,
    /// How several members work together (ignored for one member).
    pub mode: TaskForceMode,
    /// Most members running at once in parallel mode (at least 1).
    pub max_parallel: usize,
    /// Step limit per member.
    pub max_steps: u32,
    /// Whether tools may use the network.
    pub network_allowed: bool,
    /// The sandbox policy in force, recorded at the run's start.
    pub sandbox: RunSandbox,
    /// Where the run sits in its delegation tree and the budget the tree shares; `None`: a
    /// run a person started, with a budget of `max_steps` per member. The service replaces
    /// it with the parent's for a child run.
    pub lineage: Option<crate::budget::Lineage>,
    /// Whether a child run works in its parent's workspace (`delegation.workspace: shared`).
    pub share_parent_workspace: bool,
    /// The cloud model to fall back to, if any.
    pub fallback: Option<Fallback>,
    /// Who started the run (`run_start.origin`).
    pub origin: runlog::RunOrigin,
    /// The A2A context of the run's task (`run_start.context_id`).
    pub context_id: Option<String>,
    /// Whoever started the run, asked the model's questions and the approvals its
    /// specialists' policies want (issue #42); `None`: no one can answer.
    pub person: Option<Arc<dyn crate::ports::Person>>,
    /// A project run's instructions from its `AGENTS.md` files (issue #43), in the system
    /// prompt of each member whose specialist takes them.
    pub instructions: Option<Arc<fabric_domain::Instructions>>,
    /// The run's lifecycle hooks (issue #43): what preparation built from the config's
    /// `hooks:` (and a trusted project's); `None`: none.
    pub hooks: Option<Arc<dyn crate::ports::Hooks>>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// The run.
    pub run_id: RunId,
    /// The typed status.
    pub status: RunStatus,
    /// The finish payload (merged for task forces); `null` when the run failed.
    pub payload: Value,
    /// Why it failed, or how it completed when not through `finish_task`.
    pub reason: Option<String>,
    /// The run's workspace.
    pub workspace: PathBuf,
    /// Who worked on it.
    pub specialist_ids: Vec<String>,
    /// The model key (of the first member).
    pub model_key: String,
    /// The model name (of the first member).
    pub model: String,
    /// Model calls made, all members together.
    pub steps: u32,
    /// Tokens used, all members together.
    pub usage: Usage,
    /// How the specialists were chosen and why (`None` when the run never recorded it).
    pub routing: Option<RoutingNote>,
    /// How discovery chose the model, when it did.
    pub model_reason: Option<String>,
    /// A run on a versioned workspace: its branch and what it changes (issue #25).
    pub changes: Option<runlog::WorkspaceResult>,
}

/// How a run's specialists were chosen, for `_meta.routing`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RoutingNote {
    /// `explicit`, `keyword`, `llm` or `keyword_fallback`.
    pub method: runlog::RoutingMethod,
    /// Why, in words.
    pub reason: String,
}

impl From<&runlog::Recruitment> for RoutingNote {
    fn from(r: &runlog::Recruitment) -> Self {
        Self {
            method: r.routing_method.clone(),
            reason: r.reason.clone(),
        }
    }
}

impl TaskForce {
    /// A task force of one `member` working on `prompt`, as `recruitment` chose it: a run a
    /// person started, of at most `max_steps` model calls, without the network, in the
    /// default sandbox. What tests and benches run; preparation (`service::prepare`) sets
    /// every field itself.
    pub fn single(
        prompt: impl Into<String>,
        member: Member,
        recruitment: Roster,
        max_steps: u32,
    ) -> Self {
        TaskForce {
            prompt: prompt.into(),
            members: vec![member],
            recruitment,
            routing_call: None,
            mode: TaskForceMode::Sequential,
            max_parallel: 1,
            max_steps,
            network_allowed: false,
            sandbox: RunSandbox::default(),
            lineage: None,
            share_parent_workspace: false,
            origin: runlog::RunOrigin::User,
            context_id: None,
            fallback: None,
            person: None,
            instructions: None,
            hooks: None,
        }
    }

    /// One line per member on which model it uses and why, for the person at the terminal.
    pub fn model_notes(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| {
                format!(
                    "{}: model {} ({})",
                    m.specialist.id,
                    m.model.name,
                    m.model_reason.as_deref().unwrap_or_default()
                )
            })
            .collect()
    }

    /// The recruitment, for the person at the terminal.
    pub fn recruitment_note(&self) -> String {
        let ids: Vec<&str> = self
            .members
            .iter()
            .map(|m| m.specialist.id.as_str())
            .collect();
        format!(
            "recruited {} by {}: {}",
            ids.join(", "),
            self.recruitment.routing_method,
            self.recruitment.reason
        )
    }
}

/// Runs a task force in a new run: creates the run, records who works on it, runs the
/// members and closes the runlog with exactly one `run_complete` or `run_failed` event.
pub async fn execute_task_force(
    store: &dyn RunStore,
    force: TaskForce,
    observer: &dyn RunObserver,
    cancel: CancellationToken,
) -> Result<RunOutcome, CoreError> {
    let run = store.create_run(crate::new_run_id()).await?;
    run_task_force(run, force, observer, cancel).await
}

/// Runs a task force in a run that already exists, so a caller can learn its id first (the
/// HTTP API answers `202 Accepted` with it before the run ends).
///
/// This and [`resume_task_force`] are plain functions returning the engine's future, not
/// `async fn`s: an `async fn` keeps its arguments in its own state beside the future it
/// awaits, hundreds of bytes more for every run in flight (issue #14).
pub fn run_task_force<'a>(
    run: NewRun,
    force: TaskForce,
    observer: &'a dyn RunObserver,
    cancel: CancellationToken,
) -> impl Future<Output = Result<RunOutcome, CoreError>> + Send + 'a {
    team::run(run, Box::new(force), None, observer, cancel)
}

/// Continues a run whose process stopped before its end, in `run` (reopened by the store):
/// recorded steps are replayed from `history`, the rest runs live, into the same runlog.
pub fn resume_task_force<'a>(
    run: NewRun,
    force: TaskForce,
    history: crate::history::RunHistory,
    observer: &'a dyn RunObserver,
    cancel: CancellationToken,
) -> impl Future<Output = Result<RunOutcome, CoreError>> + Send + 'a {
    team::run(
        run,
        Box::new(force),
        Some(Box::new(history)),
        observer,
        cancel,
    )
}
