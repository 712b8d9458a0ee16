//! The HTTP+JSON binding of A2A v1.0 under `/a2a/v1` (the card's second interface): the
//! same methods as `POST /a2a`, named by path, answered with the bare objects, errors as
//! HTTP statuses with a `google.rpc.Status`-shaped body whose `ErrorInfo` carries the A2A
//! reason (what the official SDKs read back into their typed errors).
//!
//! | route | method |
//! |---|---|
//! | `POST /a2a/v1/message:send` | `SendMessage` |
//! | `POST /a2a/v1/message:stream` | `SendStreamingMessage` (SSE of bare `StreamResponse`s) |
//! | `GET /a2a/v1/tasks/{id}` | `GetTask` (`?historyLength=`) |
//! | `GET /a2a/v1/tasks` | `ListTasks` (`?contextId=&status=&pageSize=&pageToken=&includeArtifacts=`) |
//! | `POST /a2a/v1/tasks/{id}:cancel` | `CancelTask` |
//! | `POST` or `GET /a2a/v1/tasks/{id}:subscribe` | `SubscribeToTask` |

use std::collections::HashMap;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use serde_json::{Value, json};

use super::{Answer, Binding, RpcError, code};
use crate::{AppState, launch};

/// The binding's path prefix; the card's HTTP+JSON interface URL ends with it.
pub(crate) const PREFIX: &str = "/a2a/v1";

/// The routes (the caller puts them behind the token).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route(&format!("{PREFIX}/message:send"), post(message_send))
        .route(&format!("{PREFIX}/message:stream"), post(message_stream))
        .route(&format!("{PREFIX}/tasks"), get(list_tasks))
        .route(
            &format!("{PREFIX}/tasks/{{target}}"),
            get(task_get).post(task_post),
        )
        .route(
            &format!("{PREFIX}/tasks/{{target}}/pushNotificationConfigs"),
            any(push),
        )
        .route(
            &format!("{PREFIX}/tasks/{{target}}/pushNotificationConfigs/{{config}}"),
            any(push),
        )
        .route(&format!("{PREFIX}/extendedAgentCard"), get(extended_card))
}

/// The HTTP status, the `google.rpc` status name and the A2A reason of an error.
fn status_of(error: &RpcError) -> (StatusCode, &'static str, &'static str) {
    match error.0 {
        code::TASK_NOT_FOUND => (StatusCode::NOT_FOUND, "NOT_FOUND", "TASK_NOT_FOUND"),
        code::METHOD_NOT_FOUND => (StatusCode::NOT_FOUND, "NOT_FOUND", "METHOD_NOT_FOUND"),
        code::TASK_NOT_CANCELABLE => (
            StatusCode::BAD_REQUEST,
            "FAILED_PRECONDITION",
            "TASK_NOT_CANCELABLE",
        ),
        code::PUSH_NOT_SUPPORTED => (
            StatusCode::BAD_REQUEST,
            "FAILED_PRECONDITION",
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        code::UNSUPPORTED => (
            StatusCode::BAD_REQUEST,
            "FAILED_PRECONDITION",
            "UNSUPPORTED_OPERATION",
        ),
        code::NO_EXTENDED_CARD => (
            StatusCode::BAD_REQUEST,
            "FAILED_PRECONDITION",
            "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        ),
        code::VERSION_NOT_SUPPORTED => (
            StatusCode::BAD_REQUEST,
            "FAILED_PRECONDITION",
            "VERSION_NOT_SUPPORTED",
        ),
        code::INVALID_PARAMS => (
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "INVALID_PARAMS",
        ),
        code::INVALID_REQUEST | code::PARSE => (
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "INVALID_REQUEST",
        ),
        _ => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL",
            "INTERNAL_ERROR",
        ),
    }
}

/// The body of an error: `{"error": {code, status, message, details: [ErrorInfo]}}`.
pub(crate) fn error_body(error: &RpcError) -> Value {
    let (http, status, reason) = status_of(error);
    json!({"error": {
        "code": http.as_u16(),
        "status": status,
        "message": error.1,
        "details": [{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "a2a-protocol.org",
            "metadata": {},
        }],
    }})
}

fn failure(error: &RpcError) -> Response {
    (status_of(error).0, axum::Json(error_body(error))).into_response()
}

/// Calls `method` with `params` and renders the answer.
async fn call(
    state: AppState,
    headers: &HeaderMap,
    method: &str,
    params: Result<Value, RpcError>,
) -> Response {
    let params = match super::check_version(headers).and(params) {
        Ok(params) => params,
        Err(error) => return failure(&error),
    };
    let traceparent = launch::traceparent(headers);
    match super::dispatch(state, method, params, traceparent, Binding::Rest).await {
        Answer::Stream(response) => response,
        Answer::Value(Ok(result)) => axum::Json(result).into_response(),
        Answer::Value(Err(error)) => failure(&error),
    }
}

/// A request body as the method's params: a JSON object, or nothing.
fn body_params(body: &Bytes) -> Result<Value, RpcError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(RpcError(
            code::INVALID_REQUEST,
            "the body must be a JSON object".to_owned(),
        )),
        Err(e) => Err(RpcError(code::PARSE, format!("the body is not JSON: {e}"))),
    }
}

/// Query parameters as the method's params: numbers and booleans where the method takes them.
fn query_params(query: HashMap<String, String>) -> Result<Value, RpcError> {
    let mut params = serde_json::Map::new();
    for (key, text) in query {
        let value = match key.as_str() {
            "pageSize" | "historyLength" => text.parse::<u64>().map(Value::from).map_err(|_| {
                RpcError(
                    code::INVALID_PARAMS,
                    format!("`{key}` must be a whole number, not `{text}`"),
                )
            })?,
            "includeArtifacts" => text.parse::<bool>().map(Value::from).map_err(|_| {
                RpcError(
                    code::INVALID_PARAMS,
                    format!("`{key}` must be true or false, not `{text}`"),
                )
            })?,
            _ => Value::String(text),
        };
        params.insert(key, value);
    }
    Ok(Value::Object(params))
}

async fn message_send(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    call(state, &headers, "SendMessage", body_params(&body)).await
}

async fn message_stream(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    call(state, &headers, "SendStreamingMessage", body_params(&body)).await
}

async fn list_tasks(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    call(state, &headers, "ListTasks", query_params(query)).await
}

/// `GET /tasks/{id}` (GetTask) and `GET /tasks/{id}:subscribe`.
async fn task_get(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(target): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if let Some(id) = target.strip_suffix(":subscribe") {
        return call(state, &headers, "SubscribeToTask", Ok(json!({"id": id}))).await;
    }
    let params = query_params(query).map(|mut p| {
        p["id"] = json!(target);
        p
    });
    call(state, &headers, "GetTask", params).await
}

/// `POST /tasks/{id}:cancel` and `POST /tasks/{id}:subscribe`.
async fn task_post(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(target): Path<String>,
) -> Response {
    let method = match target.rsplit_once(':') {
        Some((id, "cancel")) => ("CancelTask", id),
        Some((id, "subscribe")) => ("SubscribeToTask", id),
        _ => {
            return failure(&RpcError(
                code::METHOD_NOT_FOUND,
                format!(
                    "no action on `tasks/{target}`: POST `tasks/{{id}}:cancel` or `tasks/{{id}}:subscribe`"
                ),
            ));
        }
    };
    call(state, &headers, method.0, Ok(json!({"id": method.1}))).await
}

async fn push(State(state): State<AppState>, headers: HeaderMap) -> Response {
    call(
        state,
        &headers,
        "CreateTaskPushNotificationConfig",
        Ok(json!({})),
    )
    .await
}

async fn extended_card(State(state): State<AppState>, headers: HeaderMap) -> Response {
    call(state, &headers, "GetExtendedAgentCard", Ok(json!({}))).await
}
