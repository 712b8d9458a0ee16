//! The one application function behind every front end: turn a request (from the CLI, and
//! later HTTP and MCP) into a ready-to-run task with its model client, so all of them behave
//! the same way.

use fabric_config::Settings;
use fabric_core::ChatClient;
use fabric_core::engine::ModelParams;
use fabric_core::execute::{Recruitment, RunOutcome, Task};
use fabric_domain::SpecialistSpec;
use serde_json::{Value, json};
use std::sync::Arc;

use crate::errors::UsageError;
use crate::wiring;

/// What a caller asks for; `None` means "use the configured default".
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskRequest {
    /// What to do.
    pub(crate) prompt: String,
    /// The specialist (`--pack`).
    pub(crate) pack: Option<String>,
    /// The model key.
    pub(crate) model_key: Option<String>,
    /// Whether tools may use the network.
    pub(crate) network_allowed: Option<bool>,
    /// Step limit.
    pub(crate) max_steps: Option<u32>,
    /// Stream model text.
    pub(crate) stream: bool,
}

/// A task ready to run, with the client for its model.
pub(crate) struct PreparedTask {
    pub(crate) task: Task,
    pub(crate) chat: Arc<dyn ChatClient>,
}

/// Resolves the specialist, the model and the tools for a request. Anything the caller can
/// fix (an unknown specialist or model key) is a [`UsageError`].
pub(crate) fn prepare(settings: &Settings, request: TaskRequest) -> anyhow::Result<PreparedTask> {
    if request.prompt.trim().is_empty() {
        return Err(
            UsageError("the prompt is empty; say what the agent should do".to_owned()).into(),
        );
    }
    let (specialist, recruitment) = choose_specialist(settings, request.pack.as_deref())?;
    let model_key = request
        .model_key
        .or_else(|| specialist.model_key.clone())
        .unwrap_or_else(|| settings.default_model_key.clone());
    let model = settings.model(&model_key).ok_or_else(|| {
        UsageError(format!(
            "no model key `{model_key}`; the configured keys are: {}",
            settings.model_keys().join(", ")
        ))
    })?;
    let chat = wiring::chat_client(model)?;
    let tools = wiring::tools_for(&specialist, settings)?;
    let task = Task {
        prompt: request.prompt,
        specialist,
        recruitment,
        tools,
        model_key,
        model: ModelParams {
            name: model.model.clone(),
            temperature: Some(model.temperature),
            top_p: Some(model.top_p),
            max_tokens: Some(model.max_tokens),
            stream: request.stream,
        },
        max_steps: request.max_steps.unwrap_or(settings.max_steps),
        network_allowed: request.network_allowed.unwrap_or(settings.network_allowed),
    };
    Ok(PreparedTask { task, chat })
}

/// `--pack` names the specialist; without it the default specialist works (routing across
/// several specialists comes with the specialists issue).
fn choose_specialist(
    settings: &Settings,
    pack: Option<&str>,
) -> anyhow::Result<(SpecialistSpec, Recruitment)> {
    let (id, method, reason) = match pack {
        Some(id) => (id, "explicit", format!("--pack {id}")),
        None => (
            settings.default_specialist.as_str(),
            "default",
            "no --pack given; using the default specialist".to_owned(),
        ),
    };
    let specialist = settings.specialist(id).cloned().ok_or_else(|| {
        UsageError(format!(
            "no specialist `{id}`; the specialists are: {}",
            settings.specialist_ids().join(", ")
        ))
    })?;
    let recruitment = Recruitment {
        routing_method: method.to_owned(),
        required_capabilities: Vec::new(),
        reason,
    };
    Ok((specialist, recruitment))
}

/// The result object of `fabric run --json` (and `POST /run`): the payload's fields plus
/// `_meta`.
pub(crate) fn result_object(outcome: &RunOutcome, settings: &Settings) -> Value {
    let meta = json!({
        "run_id": outcome.run_id,
        "status": outcome.status,
        "reason": outcome.reason,
        "specialist_ids": outcome.specialist_ids,
        "workspace": outcome.workspace,
        "runlog": settings.workspace.join("runs").join(outcome.run_id.as_str()).join(fabric_store_fs::RUNLOG_FILE),
        "model_key": outcome.model_key,
        "model": outcome.model,
        "steps": outcome.steps,
        "usage": outcome.usage,
    });
    let mut object = match &outcome.payload {
        Value::Object(map) => map.clone(),
        _ => serde_json::Map::new(),
    };
    object.insert("_meta".to_owned(), meta);
    Value::Object(object)
}
