//! The A2A methods, whatever the binding that carried them (JSON-RPC or HTTP+JSON): a
//! message starts a run, a task is read, listed, cancelled or followed.

use fabric_core::{Liveness, RunQuery};
use fabric_domain::{RunId, RunStatus};
use serde_json::{Value, json};

use super::{RpcError, code, files, task};
use crate::{AppState, RunRequest, launch};

/// What starting a task led to.
pub(crate) enum Started {
    /// A run, prepared and going.
    Run(fabric_core::service::RunHandle),
    /// Refused by budget or policy: a task in `TASK_STATE_REJECTED` (not stored).
    Rejected(Value),
}

/// The prompt of a message: its text parts, then its data parts as JSON context.
fn prompt_of(message: &Value) -> Result<String, RpcError> {
    let parts = message
        .get("parts")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            RpcError(
                code::INVALID_PARAMS,
                "`message.parts` must be a list of parts".to_owned(),
            )
        })?;
    let mut text = Vec::new();
    let mut data = Vec::new();
    for part in parts {
        if let Some(t) = part.get("text").and_then(Value::as_str) {
            text.push(t.to_owned());
        } else if let Some(d) = part.get("data") {
            data.push(format!("```json\n{d}\n```"));
        } else if part.get("url").is_some() || part.get("raw").is_some() {
            return Err(RpcError(
                code::INVALID_PARAMS,
                "file parts (`url`, `raw`) are not taken; send the content as a text or data part"
                    .to_owned(),
            ));
        }
    }
    if text.iter().all(|t| t.trim().is_empty()) {
        return Err(RpcError(
            code::INVALID_PARAMS,
            "the message has no text: give at least one text part with the task".to_owned(),
        ));
    }
    if !data.is_empty() {
        text.push(format!("Context given with the task:\n{}", data.join("\n")));
    }
    Ok(text.join("\n\n"))
}

/// The context a message belongs to: the client's `contextId`, else a new one (a task that
/// starts a conversation). A follow-up in a context is a new task in it (docs/A2A.md).
fn context_of(message: &Value) -> Result<String, RpcError> {
    match message.get("contextId") {
        None | Some(Value::Null) => Ok(format!("ctx-{}", fabric_core::new_run_id())),
        Some(Value::String(c)) if c.is_empty() => Ok(format!("ctx-{}", fabric_core::new_run_id())),
        Some(Value::String(c)) if c.len() <= MAX_CONTEXT_ID && !c.chars().any(char::is_control) => {
            Ok(c.clone())
        }
        Some(_) => Err(RpcError(
            code::INVALID_PARAMS,
            format!(
                "`message.contextId` must be a string of at most {MAX_CONTEXT_ID} characters without control characters; leave it out to start a new context"
            ),
        )),
    }
}

/// The longest `contextId` kept.
const MAX_CONTEXT_ID: usize = 256;

/// Starts the run a `SendMessage` asks for.
pub(crate) async fn start(
    state: &AppState,
    params: &Value,
    traceparent: Option<String>,
) -> Result<Started, RpcError> {
    let message = params
        .get("message")
        .ok_or_else(|| RpcError(code::INVALID_PARAMS, "`message` is missing".to_owned()))?;
    if let Some(task) = message
        .get("taskId")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    {
        return answer(state, task, message).await;
    }
    let prompt = prompt_of(message)?;
    let mut context = context_of(message)?;
    // A message naming an earlier task of its context continues that task's run (ADR-105).
    let continues = match referenced(state, message).await? {
        Some(run) => Some(continued_in(&run, message, &mut context)?),
        None => None,
    };
    // `metadata.specialist`, `.project` and `.base`, on the message or the request.
    let meta = |key: &str| {
        [message, params]
            .iter()
            .find_map(|v| {
                v.pointer(&format!("/metadata/{key}"))
                    .and_then(Value::as_str)
            })
            .map(str::to_owned)
    };
    let request = RunRequest {
        prompt,
        pack: meta("specialist"),
        model_key: None,
        network_allowed: None,
        max_steps: None,
        // Checked as `POST /runs`'s: inside `server.project_roots` only (issue #39).
        project: meta("project"),
        base: meta("base"),
        continues,
    };
    let error =
        match launch::start_in_context(state, request, Some(context.clone()), traceparent).await {
            Ok(handle) => return Ok(Started::Run(handle)),
            Err(error) => error,
        };
    match refusal(error.code()) {
        Refusal::Rejected => {
            let id = format!("rejected-{}", fabric_core::new_run_id());
            Ok(Started::Rejected(json!({
                "id": id, "contextId": context,
                "status": {
                    "state": "TASK_STATE_REJECTED",
                    "timestamp": task::timestamp(now()),
                    "message": task::agent_message(&id, &context, &error.to_string()),
                },
            })))
        }
        Refusal::InvalidParams => Err(RpcError(code::INVALID_PARAMS, error.to_string())),
        Refusal::Internal => Err(RpcError(code::INTERNAL, error.to_string())),
    }
}

/// A message naming its task (`taskId`): the answer to the question that task waits on
/// (`TASK_STATE_INPUT_REQUIRED`, issue #42). An approval's decision is the text's first
/// word (`approve`, `approve_for_run`, `deny`) or `metadata.decision`.
async fn answer(state: &AppState, task: &str, message: &Value) -> Result<Started, RpcError> {
    let id = task_id(&json!({"id": task}))?;
    let decision = match message.pointer("/metadata/decision").and_then(Value::as_str) {
        None => None,
        Some(word) => Some(fabric_domain::runlog::Decision::parse(word).ok_or_else(|| {
            RpcError(
                code::INVALID_PARAMS,
                format!("`metadata.decision` must be `approve`, `approve_for_run` or `deny`, got `{word}`"),
            )
        })?),
    };
    let answer = fabric_core::service::Answer {
        text: prompt_of(message)?,
        decision,
        by: "a2a".to_owned(),
    };
    let when = fabric_core::service::WhenAsked::Wait {
        timeout: state.inner.config.input_timeout,
    };
    use fabric_core::service::{InvalidRequest, ServiceError};
    match state.service().answer(&id, answer, when, None).await {
        Ok(handle) => Ok(Started::Run(handle)),
        Err(ServiceError::Invalid(InvalidRequest::NoSuchRun { .. })) => {
            Err(RpcError(code::TASK_NOT_FOUND, format!("no task `{id}`")))
        }
        Err(ServiceError::Invalid(e @ InvalidRequest::NotWaiting { .. })) => Err(RpcError(
            code::UNSUPPORTED,
            format!(
                "{e}; a message naming a task answers it only while it is input-required: send a new message without `taskId` (with `referenceTaskIds` to continue its conversation)"
            ),
        )),
        Err(ServiceError::Invalid(e)) => Err(RpcError(code::INVALID_PARAMS, e.to_string())),
        Err(e) => Err(RpcError(code::INTERNAL, e.to_string())),
    }
}

/// The task a message names in `referenceTaskIds` (the newest, when it names several: run
/// ids sort by time), read; `None` when it names none.
async fn referenced(
    state: &AppState,
    message: &Value,
) -> Result<Option<fabric_domain::RunSummary>, RpcError> {
    let Some(ids) = message.get("referenceTaskIds") else {
        return Ok(None);
    };
    let invalid = || {
        RpcError(
            code::INVALID_PARAMS,
            "`message.referenceTaskIds` must be a list of task ids (strings)".to_owned(),
        )
    };
    let ids = ids.as_array().ok_or_else(invalid)?;
    let mut newest: Option<&str> = None;
    for id in ids {
        let id = id.as_str().ok_or_else(invalid)?;
        newest = newest.max(Some(id));
    }
    let Some(newest) = newest else {
        return Ok(None);
    };
    let id = task_id(&json!({"id": newest}))?;
    summary(state, &id).await.map(Some)
}

/// The `continues` of a message that names the earlier task `run`: in `run`'s context (a
/// message without `contextId` joins it; one in another context is refused).
fn continued_in(
    run: &fabric_domain::RunSummary,
    message: &Value,
    context: &mut String,
) -> Result<crate::model::ContinuesBody, RpcError> {
    let given = message
        .get("contextId")
        .and_then(Value::as_str)
        .is_some_and(|c| !c.is_empty());
    match &run.context_id {
        Some(theirs) if !given => context.clone_from(theirs),
        Some(theirs) if theirs == context => {}
        theirs => {
            return Err(RpcError(
                code::INVALID_PARAMS,
                format!(
                    "task `{}` is not in context `{context}` ({}); send the message in the task's context to continue it, or leave out `referenceTaskIds` to start a new task",
                    run.id,
                    theirs.as_deref().map_or_else(
                        || "no A2A client started it".to_owned(),
                        |c| format!("its context is `{c}`")
                    )
                ),
            ));
        }
    }
    Ok(crate::model::ContinuesBody {
        run_id: run.id.to_string(),
        fork: false,
    })
}

/// How A2A answers a message the server does not run.
enum Refusal {
    /// A task in `TASK_STATE_REJECTED`: the server will not take it on now or ever.
    Rejected,
    /// JSON-RPC's invalid params: the message is wrong as given.
    InvalidParams,
    /// JSON-RPC's internal error.
    Internal,
}

/// A2A's table of the API's error codes (ADR-097): what the server's limits refuse is a
/// rejected task, what the caller got wrong is invalid params, the rest is internal.
fn refusal(code: &str) -> Refusal {
    match code {
        "not_permitted" | "daily_budget_spent" | "too_many_runs" => Refusal::Rejected,
        "invalid_request" | "unknown_specialist" | "unknown_model_key" | "invalid_project"
        | "run_not_found" | "run_not_ended" | "cannot_continue" => Refusal::InvalidParams,
        _ => Refusal::Internal,
    }
}

/// `SendMessage`: the run's task once it ended, or at once with `returnImmediately`.
pub(crate) async fn send(
    state: &AppState,
    params: &Value,
    traceparent: Option<String>,
) -> Result<Value, RpcError> {
    let handle = match start(state, params, traceparent).await? {
        Started::Run(handle) => handle,
        Started::Rejected(task) => return Ok(json!({"task": task})),
    };
    let id = handle.id().clone();
    let immediately = params
        .pointer("/configuration/returnImmediately")
        .and_then(Value::as_bool)
        == Some(true);
    if immediately {
        recorded(handle.live()).await;
    } else {
        handle.outcome().await.map_err(|e| {
            RpcError(
                code::INTERNAL,
                format!("task `{id}` failed inside the fabric: {e}"),
            )
        })?;
    }
    let run = summary(state, &id).await?;
    let mut task = task::task_of(&run, true);
    if let (Some(files), Some(artifacts)) = (
        files::artifact(state, &run, &files::Accepted::of(params)).await,
        task["artifacts"].as_array_mut(),
    ) {
        artifacts.push(files);
    }
    Ok(json!({"task": task}))
}

fn task_id(params: &Value) -> Result<RunId, RpcError> {
    let text = params.get("id").and_then(Value::as_str).ok_or_else(|| {
        RpcError(
            code::INVALID_PARAMS,
            "`id` (the task id) is missing".to_owned(),
        )
    })?;
    RunId::parse(text).map_err(|_| {
        RpcError(
            code::TASK_NOT_FOUND,
            format!("no task `{text}`: task ids are run ids, like 20260101-120000-000-0123abcd"),
        )
    })
}

pub(crate) async fn summary(
    state: &AppState,
    id: &RunId,
) -> Result<fabric_domain::RunSummary, RpcError> {
    match state.service().get(id).await {
        Ok(run) => Ok(run),
        Err(fabric_core::StoreError::NotFound(_)) => {
            Err(RpcError(code::TASK_NOT_FOUND, format!("no task `{id}`")))
        }
        Err(e) => Err(RpcError(code::INTERNAL, e.to_string())),
    }
}

pub(crate) async fn get_task(state: &AppState, params: &Value) -> Result<Value, RpcError> {
    let id = task_id(params)?;
    let run = summary(state, &id).await?;
    let history = params.get("historyLength").and_then(Value::as_u64) != Some(0);
    Ok(task::task_of(&run, history))
}

pub(crate) async fn list_tasks(state: &AppState, params: &Value) -> Result<Value, RpcError> {
    let size = params
        .get("pageSize")
        .and_then(Value::as_u64)
        .unwrap_or(50)
        .clamp(1, 100) as usize;
    let before = page_token(state, params).await?;
    let context_id = params
        .get("contextId")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_owned);
    // The state filter is the query's, so every page is full but the last (issue #40).
    let Some(statuses) = task::statuses_of(params.get("status").and_then(Value::as_str))? else {
        return Ok(json!({"tasks": [], "nextPageToken": "", "pageSize": size}));
    };
    // One more than asked, to know whether there is a next page.
    let query = RunQuery {
        limit: size + 1,
        before,
        context_id,
        statuses,
        ..RunQuery::default()
    };
    let mut runs = state
        .service()
        .list(&query)
        .await
        .map_err(|e| RpcError(code::INTERNAL, e.to_string()))?;
    let more = runs.len() > size;
    runs.truncate(size);
    let next = if more {
        runs.last().map(|r| r.id.to_string()).unwrap_or_default()
    } else {
        String::new()
    };
    let artifacts = params.get("includeArtifacts").and_then(Value::as_bool) == Some(true);
    let tasks: Vec<Value> = runs
        .iter()
        .map(|r| task::task_of(r, false))
        .map(|mut t| {
            if !artifacts && let Some(task) = t.as_object_mut() {
                task.remove("artifacts");
            }
            t
        })
        .collect();
    Ok(json!({"tasks": tasks, "nextPageToken": next, "pageSize": size}))
}

/// The run a `pageToken` names: the last task of a page this server gave, so a task that
/// exists. Anything else is the protocol's invalid-params error, not an empty page (issue
/// #40).
async fn page_token(state: &AppState, params: &Value) -> Result<Option<RunId>, RpcError> {
    let Some(token) = params
        .get("pageToken")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    else {
        return Ok(None);
    };
    let refused = || {
        RpcError(
            code::INVALID_PARAMS,
            format!(
                "`pageToken` `{token}` is not one this server gave (a `nextPageToken` of ListTasks); leave it out to list from the newest task"
            ),
        )
    };
    let id = RunId::parse(token).map_err(|_| refused())?;
    match state.service().get(&id).await {
        Ok(_) => Ok(Some(id)),
        Err(fabric_core::StoreError::NotFound(_)) => Err(refused()),
        Err(e) => Err(RpcError(code::INTERNAL, e.to_string())),
    }
}

pub(crate) async fn cancel_task(state: &AppState, params: &Value) -> Result<Value, RpcError> {
    let id = task_id(params)?;
    let run = summary(state, &id).await?;
    if run.status == RunStatus::Running && !state.service().cancel(&id) {
        return Err(not_here(state, &id).await);
    }
    if run.status != RunStatus::Running {
        return Err(RpcError(
            code::TASK_NOT_CANCELABLE,
            format!(
                "task `{id}` cannot be canceled: it is {} ({})",
                task::state_of(run.status),
                run.status
            ),
        ));
    }
    // The run records its end promptly once cancelled; answer with that end when it comes.
    if let Some(live) = state.service().live(&id) {
        let mut follower = live.follow(0);
        let wait = async { while follower.next().await.is_some() {} };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), wait).await;
    }
    let run = summary(state, &id).await?;
    Ok(task::task_of(&run, false))
}

/// Why a task that has not ended cannot be cancelled by this server: it is not running here
/// (issue #40: it said only that the task was working).
async fn not_here(state: &AppState, id: &RunId) -> RpcError {
    let why = match state.store().liveness(id).await {
        Liveness::Interrupted => format!(
            "no process runs it any more (the one that ran it stopped without recording its end); `fabric resume {id}` continues it"
        ),
        Liveness::Queued => "it waits in the queue for a worker, and only the node it was sent to can cancel it: send CancelTask there".to_owned(),
        Liveness::Held | Liveness::Unknown => "another node of this fabric runs it (another process, or another machine sharing the store), and only that node can cancel it: send CancelTask to the node it was sent to".to_owned(),
    };
    RpcError(
        code::TASK_NOT_CANCELABLE,
        format!("task `{id}` cannot be canceled by this server: {why}"),
    )
}

/// A live run to follow for `SubscribeToTask`.
pub(crate) fn subscribe(
    state: &AppState,
    params: &Value,
) -> Result<std::sync::Arc<fabric_core::live::LiveRun>, RpcError> {
    let id = task_id(params)?;
    state.service().live(&id).ok_or_else(|| {
        RpcError(
            code::UNSUPPORTED,
            format!("task `{id}` is not running here (it ended, or another server runs it): read it with GetTask"),
        )
    })
}

/// Waits until the run recorded its start (its first event: the runlog has it before the
/// live run does), so its task reads back with its prompt and context; a prepared run may
/// not have written it yet. At most 10 s: a run that slow to start is answered as it is.
pub(crate) async fn recorded(live: &std::sync::Arc<fabric_core::live::LiveRun>) {
    let mut follower = live.follow(0);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), follower.next()).await;
}

pub(crate) fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
