//! The use case behind `fabric run` and the HTTP API: one task, one run, one result.

use fabric_domain::{EventKind, Message, RunId, RunStatus, SpecialistSpec, Usage};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::CoreError;
use crate::engine::{LoopInput, LoopOutcome, ModelParams, run_loop};
use crate::ports::{ChatClient, NewRun, RunObserver, RunStore, Tool, ToolContext};
use crate::recorder::Recorder;

/// How the specialist was chosen, for the `recruitment` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recruitment {
    /// `explicit` (`--pack`), `default`, `keyword_routing`, `llm_routing`, ...
    pub routing_method: String,
    /// Capabilities inferred from the prompt.
    pub required_capabilities: Vec<String>,
    /// Why these specialists, in words.
    pub reason: String,
}

/// One task to run.
pub struct Task {
    /// What the user asked.
    pub prompt: String,
    /// Who works on it.
    pub specialist: SpecialistSpec,
    /// How the specialist was chosen.
    pub recruitment: Recruitment,
    /// The tools the specialist may use. Those needing the network are dropped when the run
    /// does not allow it, and all but read-only ones when the specialist may not write.
    pub tools: Vec<Arc<dyn Tool>>,
    /// The model key from the config (`fast`, `quality`, ...).
    pub model_key: String,
    /// The resolved model.
    pub model: ModelParams,
    /// Step limit per specialist.
    pub max_steps: u32,
    /// Whether tools may use the network.
    pub network_allowed: bool,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// The run.
    pub run_id: RunId,
    /// The typed status.
    pub status: RunStatus,
    /// The finish payload; `null` when the run failed.
    pub payload: Value,
    /// Why it failed, or how it completed when not through `finish_task`.
    pub reason: Option<String>,
    /// The run's workspace.
    pub workspace: PathBuf,
    /// Who worked on it.
    pub specialist_ids: Vec<String>,
    /// The model key and name.
    pub model_key: String,
    /// The model name.
    pub model: String,
    /// Model calls made.
    pub steps: u32,
    /// Tokens used.
    pub usage: Usage,
}

/// Runs a task to its end: creates the run, records who works on it, runs the loop and
/// closes the runlog with exactly one `run_complete` or `run_failed` event.
pub async fn execute_task(
    store: &dyn RunStore,
    chat: &dyn ChatClient,
    task: Task,
    observer: &dyn RunObserver,
    cancel: CancellationToken,
) -> Result<RunOutcome, CoreError> {
    let run = store.create_run().await?;
    run_task(run, chat, task, observer, cancel).await
}

/// Runs a task in a run that already exists, so a caller can learn its id first (the HTTP
/// API answers `202 Accepted` with it before the run ends).
pub async fn run_task(
    run: NewRun,
    chat: &dyn ChatClient,
    task: Task,
    observer: &dyn RunObserver,
    cancel: CancellationToken,
) -> Result<RunOutcome, CoreError> {
    let mut rec = Recorder::new(run.log.as_ref(), observer);
    let specialist_ids = vec![task.specialist.id.clone()];
    let mut tools: Vec<Arc<dyn Tool>> = Vec::with_capacity(task.tools.len());
    let mut withheld: Vec<(String, &'static str)> = Vec::new();
    for tool in task.tools {
        let a = tool.spec().annotations;
        if a.needs_network && !task.network_allowed {
            withheld.push((
                tool.spec().name.clone(),
                "it needs the network, which this run does not allow (`--network-allowed`)",
            ));
        } else if !a.read_only && !task.specialist.may_write {
            // A specialist that may not write gets no tool that could: only read-only ones.
            withheld.push((
                tool.spec().name.clone(),
                "this specialist may not write, and the tool is not read-only",
            ));
        } else {
            tools.push(tool);
        }
    }

    rec.emit(
        EventKind::RunStart,
        None,
        json!({
            "run_id": run.id,
            "prompt": task.prompt,
            "model_key": task.model_key,
            "model": task.model.name,
            "max_steps": task.max_steps,
            "network_allowed": task.network_allowed,
            "workspace": run.workspace,
        }),
    )
    .await?;
    rec.emit(
        EventKind::Recruitment,
        None,
        json!({
            "specialist_id": task.specialist.id,
            "specialist_ids": specialist_ids,
            "required_capabilities": task.recruitment.required_capabilities,
            "routing_method": task.recruitment.routing_method,
            "reason": task.recruitment.reason,
            "is_task_force": false,
        }),
    )
    .await?;
    rec.emit(
        EventKind::PackStart,
        None,
        json!({
            "specialist_id": task.specialist.id,
            "pack_index": 0,
            "tools": tools.iter().map(|t| t.spec().name.clone()).collect::<Vec<_>>(),
        }),
    )
    .await?;

    let ctx = ToolContext {
        run_id: run.id.clone(),
        workspace: run.workspace.clone(),
        network_allowed: task.network_allowed,
        cancel,
    };
    let messages = vec![
        Message::system(system_prompt(&task.specialist)),
        Message::user(task.prompt),
    ];
    let outcome: LoopOutcome = run_loop(
        chat,
        LoopInput {
            specialist: &task.specialist,
            tools: &tools,
            messages,
            model: &task.model,
            max_steps: task.max_steps,
            ctx: &ctx,
            withheld: &withheld,
        },
        &mut rec,
    )
    .await?;

    let summary = json!({
        "run_id": run.id,
        "status": outcome.status,
        "specialist_ids": specialist_ids,
        "task_force_mode": "single",
        "steps": outcome.steps,
        "usage": outcome.usage,
        "reason": outcome.reason,
    });
    let (kind, payload) = if outcome.status.is_success() {
        let mut payload = summary;
        payload["result"] = outcome.payload.clone();
        (EventKind::RunComplete, payload)
    } else {
        (EventKind::RunFailed, summary)
    };
    rec.emit(kind, None, payload).await?;

    Ok(RunOutcome {
        run_id: run.id,
        status: outcome.status,
        payload: outcome.payload,
        reason: outcome.reason,
        workspace: run.workspace,
        specialist_ids,
        model_key: task.model_key,
        model: task.model.name,
        steps: outcome.steps,
        usage: outcome.usage,
    })
}

/// The specialist's prompt plus the rules of the workspace every specialist works under.
fn system_prompt(specialist: &SpecialistSpec) -> String {
    format!(
        "{}\n\nYou work inside a private workspace directory. Use relative paths only; paths outside the workspace are refused. Act only through tool calls. When the task is done and checked, call finish_task exactly once with your final answer.",
        specialist.system_prompt.trim_end()
    )
}
