//! The Agent2Agent protocol (A2A v1.0) over JSON-RPC: another framework's agent discovers
//! this fabric by its card, sends it a task, follows it and cancels it. A task is a run: the
//! run id is the task id, so every run endpoint and `fabric logs` show what an A2A client
//! asked for, and a task survives what a run survives (a restart, `fabric resume`).
//!
//! - `GET /.well-known/agent-card.json` ([`card`]), public like a web page's robots file.
//! - `POST /a2a`: `SendMessage`, `SendStreamingMessage`, `GetTask`, `ListTasks`,
//!   `CancelTask`, `SubscribeToTask`; behind the server's token like every run endpoint.
//!
//! What is not supported answers with the protocol's own error codes: continuing a task
//! (`taskId` in a message; no specialist asks for input, so no task is ever
//! `input-required`), push notifications, an extended card.

pub(crate) mod card;
mod files;
mod methods;
mod rest;
mod stream;
pub(crate) mod task;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::{AppState, launch};

pub use card::{A2aSkill, AgentCardInfo};

/// JSON-RPC's and A2A's error codes.
mod code {
    pub(super) const PARSE: i64 = -32700;
    pub(super) const INVALID_REQUEST: i64 = -32600;
    pub(super) const METHOD_NOT_FOUND: i64 = -32601;
    pub(super) const INVALID_PARAMS: i64 = -32602;
    pub(super) const INTERNAL: i64 = -32603;
    pub(super) const TASK_NOT_FOUND: i64 = -32001;
    pub(super) const TASK_NOT_CANCELABLE: i64 = -32002;
    pub(super) const PUSH_NOT_SUPPORTED: i64 = -32003;
    pub(super) const UNSUPPORTED: i64 = -32004;
    pub(super) const NO_EXTENDED_CARD: i64 = -32007;
    pub(super) const VERSION_NOT_SUPPORTED: i64 = -32009;
}

/// An A2A error: its JSON-RPC code (the HTTP+JSON binding maps it to a status and a
/// reason) and a message that names the fix.
#[derive(Debug)]
pub(crate) struct RpcError(i64, String);

/// The card route (public), the JSON-RPC route and the HTTP+JSON routes (behind the token).
pub(crate) fn routes(state: AppState) -> Router<AppState> {
    let rpc = Router::new()
        .route("/a2a", post(rpc))
        .merge(rest::routes())
        .route_layer(crate::auth::Guard::token(state));
    Router::new()
        .route("/.well-known/agent-card.json", get(agent_card))
        .merge(rpc)
}

async fn agent_card(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    let info = state.inner.a2a.clone().unwrap_or_default();
    let token = state.inner.config.token.is_some();
    axum::Json(card::card(&info, &format!("http://{host}"), token)).into_response()
}

/// The answer to a request with `id`.
pub(crate) fn success(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

pub(crate) fn failure(id: &Value, error: RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": error.0, "message": error.1}})
}

/// How an answer travels: in a JSON-RPC response to the request `id`, or as the HTTP+JSON
/// binding's bare object (errors as HTTP statuses).
#[derive(Debug, Clone)]
pub(crate) enum Binding {
    JsonRpc(Value),
    Rest,
}

/// What a method answered: a value or an error, which each binding renders its way, or
/// an SSE stream already rendered.
pub(crate) enum Answer {
    Value(Result<Value, RpcError>),
    Stream(Response),
}

/// The one place a method name meets its implementation, for both bindings.
pub(crate) async fn dispatch(
    state: AppState,
    method: &str,
    params: Value,
    traceparent: Option<String>,
    binding: Binding,
) -> Answer {
    let value = match method {
        "SendMessage" => methods::send(&state, &params, traceparent).await,
        "SendStreamingMessage" => {
            return match methods::start(&state, &params, traceparent).await {
                Ok(methods::Started::Run(run)) => {
                    let accepted = files::Accepted::of(&params);
                    let live = std::sync::Arc::clone(run.live());
                    Answer::Stream(stream::run(state, binding, live, accepted).into_response())
                }
                Ok(methods::Started::Rejected(task)) => {
                    Answer::Stream(stream::once(binding, json!({"task": task})).into_response())
                }
                Err(error) => Answer::Value(Err(error)),
            };
        }
        "SubscribeToTask" => {
            return match methods::subscribe(&state, &params) {
                Ok(run) => Answer::Stream(
                    stream::run(state, binding, run, files::Accepted::default()).into_response(),
                ),
                Err(error) => Answer::Value(Err(error)),
            };
        }
        "GetTask" => methods::get_task(&state, &params).await,
        "ListTasks" => methods::list_tasks(&state, &params).await,
        "CancelTask" => methods::cancel_task(&state, &params).await,
        m if m.contains("PushNotificationConfig") => Err(RpcError(
            code::PUSH_NOT_SUPPORTED,
            "push notifications are not supported; follow a task with SendStreamingMessage or SubscribeToTask, or poll GetTask".to_owned(),
        )),
        "GetExtendedAgentCard" => Err(RpcError(
            code::NO_EXTENDED_CARD,
            "there is no extended card: the public card at /.well-known/agent-card.json is the whole card".to_owned(),
        )),
        other => Err(RpcError(
            code::METHOD_NOT_FOUND,
            format!("no method `{other}`; this server answers SendMessage, SendStreamingMessage, GetTask, ListTasks, CancelTask and SubscribeToTask"),
        )),
    };
    Answer::Value(value)
}

/// The `A2A-Version` a request asks for, if this server speaks it (1.x; 1.0 when absent).
pub(crate) fn check_version(headers: &HeaderMap) -> Result<(), RpcError> {
    let version = headers
        .get("a2a-version")
        .and_then(|v| v.to_str().ok())
        .unwrap_or(card::PROTOCOL_VERSION);
    if version == "1" || version.starts_with("1.") {
        Ok(())
    } else {
        Err(RpcError(
            code::VERSION_NOT_SUPPORTED,
            format!("A2A-Version `{version}` is not supported; this server speaks 1.0"),
        ))
    }
}

/// `POST /a2a`: the JSON-RPC binding.
async fn rpc(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            let error = RpcError(code::PARSE, format!("the body is not JSON: {e}"));
            return axum::Json(failure(&Value::Null, error)).into_response();
        }
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    if let Err(error) = check_version(&headers) {
        return axum::Json(failure(&id, error)).into_response();
    }
    let (method, params) = match (request.get("jsonrpc"), request.get("method")) {
        (Some(v), Some(Value::String(m))) if v == "2.0" => (
            m.clone(),
            request.get("params").cloned().unwrap_or(json!({})),
        ),
        _ => {
            let error = RpcError(
                code::INVALID_REQUEST,
                "not a JSON-RPC 2.0 request: it needs `\"jsonrpc\": \"2.0\"` and a `method`"
                    .to_owned(),
            );
            return axum::Json(failure(&id, error)).into_response();
        }
    };
    let traceparent = launch::traceparent(&headers);
    let binding = Binding::JsonRpc(id.clone());
    match dispatch(state, &method, params, traceparent, binding).await {
        Answer::Stream(response) => response,
        Answer::Value(Ok(result)) => axum::Json(success(&id, result)).into_response(),
        Answer::Value(Err(error)) => axum::Json(failure(&id, error)).into_response(),
    }
}
