//! Every error the API answers, and the one place that maps them to HTTP.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use fabric_core::StoreError;
use fabric_core::service::{ErrorCode, ServiceError};
use serde::Serialize;
use thiserror::Error;
use utoipa::ToSchema;

/// What can go wrong answering a request. Each variant has a stable `code` (the public
/// contract, docs/HTTP.md) and an HTTP status; input errors are always 4xx.
#[derive(Debug, Error)]
pub enum ApiError {
    /// No or a wrong bearer token.
    #[error("missing or wrong bearer token; send `Authorization: Bearer <token>`")]
    Unauthorized,
    /// A server without a token was reached under a name that is not a loopback one: a page
    /// of another site whose name was made to resolve to this machine (DNS rebinding).
    #[error(
        "this server has no token and answers only under a loopback name (127.0.0.1, localhost, [::1]), not `{0}`; open it by one of those, or set a token"
    )]
    HostNotAllowed(String),
    /// The body is not JSON at all.
    #[error("the body is not valid JSON: {0}")]
    InvalidJson(String),
    /// The body is JSON but not a valid request (wrong type, unknown or missing field, bad value).
    #[error("{0}")]
    InvalidRequest(String),
    /// The body is not declared as JSON.
    #[error("the body must be JSON, sent with `Content-Type: application/json`")]
    UnsupportedMediaType,
    /// The body is larger than `server.max_body_bytes`.
    #[error("the body is larger than the limit of {0} bytes")]
    PayloadTooLarge(usize),
    /// A run id that cannot be one (`../x`).
    #[error("`{0}` is not a run id; run ids look like 20260101-120000-000-0123abcd")]
    InvalidRunId(String),
    /// A query parameter or header with a bad value.
    #[error("{0}")]
    InvalidParameter(String),
    /// The project the request names cannot be used: no git repository at that path on the
    /// server's machine, no commit, a base that names nothing, `base` without `project`.
    #[error("{0}")]
    InvalidProject(String),
    /// The request asks for more than the server's configuration allows (the network when
    /// the config forbids it, more steps than its `max_steps`): a request may only narrow
    /// the server's permissions.
    #[error("{0}")]
    NotPermitted(String),
    /// The model the request needs cannot be used now: its server cannot be started, none
    /// of its models can call tools, a pull failed. The message says what and how to fix it.
    #[error("{0}")]
    ModelUnavailable(String),
    /// No run has this id.
    #[error("no run `{0}`")]
    RunNotFound(String),
    /// An answer for a run that waits for none, or a message for a run that has ended
    /// (issue #42); the message says its status.
    #[error("{0}")]
    RunNotWaiting(String),
    /// The run has not ended, so its changes are not final (issue #42: its diff, apply,
    /// discard); the message says what to do.
    #[error("{0}")]
    RunNotEnded(String),
    /// The run has no versioned workspace (a plain scratch run), or this server has none.
    #[error("{0}")]
    NotVersioned(String),
    /// A `checkpoint` that is not one of the run's; the message lists them.
    #[error("{0}")]
    CheckpointNotFound(String),
    /// The run's workspace was discarded (or pruned).
    #[error("{0}")]
    WorkspaceGone(String),
    /// Applying was refused before anything was written: the changes conflict with the
    /// repository's commits or uncommitted changes (the message says which and how).
    #[error("{0}")]
    ApplyRefused(String),
    /// The run exists but has already ended.
    #[error("run `{id}` is not running; it ended `{status}`")]
    RunNotRunning {
        /// The run.
        id: String,
        /// How it ended.
        status: String,
    },
    /// The runlog has no terminal event but this server is not running the run: the
    /// process that ran it ended without recording its end, or another process runs it.
    #[error(
        "run `{0}` is not running in this server: its runlog has no terminal event (the process that ran it stopped without recording its end, or another process is running it), so it cannot be cancelled here"
    )]
    RunNotLive(String),
    /// No route at this path.
    #[error("no endpoint at this path; GET /openapi.json lists them")]
    RouteNotFound,
    /// The path exists but not for this method.
    #[error("this endpoint does not take this method; GET /openapi.json lists them")]
    MethodNotAllowed,
    /// `server.max_runs_in_flight` runs are already going.
    #[error(
        "{limit} runs are already in flight, the server's limit; retry after {retry_after_s} s"
    )]
    TooManyRuns {
        /// The limit.
        limit: usize,
        /// Seconds to wait, sent as `Retry-After`.
        retry_after_s: u64,
    },
    /// The server is shutting down and starts no new runs.
    #[error("the server is shutting down and starts no new runs")]
    ShuttingDown,
    /// A run failed inside the fabric (its runlog could not be written, or it panicked); it
    /// ended `failed`. The details are logged, not shown.
    #[error(
        "run `{id}` failed inside the fabric and ended `failed`; the server log has the details"
    )]
    RunCrashed {
        /// The run.
        id: String,
        /// What went wrong, for the log only.
        detail: String,
    },
    /// Something inside the fabric failed; the details are logged, not shown.
    #[error("internal error: {0}")]
    Internal(String),
    /// The run service refused the request or the run ended inside the fabric: its code and
    /// status come from [`http`], the API's one table of the service's codes.
    #[error("{}", shown(.0))]
    Service(ServiceError),
}

/// The API's table of the service's codes: the HTTP status and the API's `code` (ADR-097).
/// The configuration's faults are the server operator's to fix: the caller can only wait.
pub(crate) fn http(code: ErrorCode) -> (StatusCode, &'static str) {
    match code {
        ErrorCode::InvalidRequest => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_request"),
        ErrorCode::UnknownSpecialist => (StatusCode::UNPROCESSABLE_ENTITY, "unknown_specialist"),
        ErrorCode::UnknownModelKey => (StatusCode::UNPROCESSABLE_ENTITY, "unknown_model_key"),
        ErrorCode::InvalidProject => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_project"),
        ErrorCode::ModelUnavailable | ErrorCode::ConfigError => {
            (StatusCode::SERVICE_UNAVAILABLE, "model_unavailable")
        }
        ErrorCode::DailyBudgetSpent => (StatusCode::TOO_MANY_REQUESTS, "daily_budget_spent"),
        ErrorCode::TooManyRuns => (StatusCode::TOO_MANY_REQUESTS, "too_many_runs"),
        ErrorCode::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
        ErrorCode::Cancelled | ErrorCode::Internal => {
            (StatusCode::INTERNAL_SERVER_ERROR, "internal")
        }
        ErrorCode::RunNotFound => (StatusCode::NOT_FOUND, "run_not_found"),
        ErrorCode::RunNotEnded => (StatusCode::CONFLICT, "run_not_ended"),
        ErrorCode::CannotContinue => (StatusCode::UNPROCESSABLE_ENTITY, "cannot_continue"),
    }
}

/// Whether the API answers the service's error as `internal`, its details kept to the log.
fn is_internal(error: &ServiceError) -> bool {
    http(error.code()).0 == StatusCode::INTERNAL_SERVER_ERROR
}

/// The service's message, said as [`ApiError::Internal`] says one when it is internal.
fn shown(error: &ServiceError) -> String {
    if is_internal(error) {
        format!("internal error: {error}")
    } else {
        error.to_string()
    }
}

impl ApiError {
    /// The stable code clients branch on.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthorized => "unauthorized",
            Self::HostNotAllowed(_) => "host_not_allowed",
            Self::InvalidJson(_) => "invalid_json",
            Self::InvalidRequest(_) => "invalid_request",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::PayloadTooLarge(_) => "payload_too_large",
            Self::InvalidRunId(_) => "invalid_run_id",
            Self::InvalidParameter(_) => "invalid_parameter",
            Self::InvalidProject(_) => "invalid_project",
            Self::RunNotFound(_) => "run_not_found",
            Self::NotPermitted(_) => "not_permitted",
            Self::ModelUnavailable(_) => "model_unavailable",
            Self::RunNotRunning { .. } | Self::RunNotLive(_) => "run_not_running",
            Self::RunNotWaiting(_) => "run_not_waiting",
            Self::RunNotEnded(_) => "run_not_ended",
            Self::NotVersioned(_) => "not_versioned",
            Self::CheckpointNotFound(_) => "checkpoint_not_found",
            Self::WorkspaceGone(_) => "workspace_gone",
            Self::ApplyRefused(_) => "apply_refused",
            Self::RouteNotFound => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::TooManyRuns { .. } => "too_many_runs",
            Self::ShuttingDown => "shutting_down",
            Self::Internal(_) | Self::RunCrashed { .. } => "internal",
            Self::Service(e) => http(e.code()).1,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::InvalidJson(_) | Self::InvalidRunId(_) | Self::InvalidParameter(_) => {
                StatusCode::BAD_REQUEST
            }
            Self::InvalidRequest(_) | Self::InvalidProject(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::CheckpointNotFound(_) => StatusCode::NOT_FOUND,
            Self::RunNotEnded(_)
            | Self::NotVersioned(_)
            | Self::WorkspaceGone(_)
            | Self::ApplyRefused(_) => StatusCode::CONFLICT,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::RunNotFound(_) | Self::RouteNotFound => StatusCode::NOT_FOUND,
            Self::NotPermitted(_) | Self::HostNotAllowed(_) => StatusCode::FORBIDDEN,
            Self::RunNotRunning { .. } | Self::RunNotLive(_) | Self::RunNotWaiting(_) => {
                StatusCode::CONFLICT
            }
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::TooManyRuns { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::ShuttingDown | Self::ModelUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) | Self::RunCrashed { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Service(e) => http(e.code()).0,
        }
    }

    /// A store failure: an unknown run is the client's mistake, anything else is ours.
    pub(crate) fn from_store(error: StoreError) -> Self {
        match error {
            StoreError::NotFound(id) => Self::RunNotFound(id.to_string()),
            other => Self::Internal(other.to_string()),
        }
    }
}

/// The body of every error: `{"error": {"code", "message"}}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// One error.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable code, listed in docs/HTTP.md (e.g. `invalid_request`, `run_not_found`).
    pub code: String,
    /// What was wrong and what to do, for a person.
    pub message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = match &self {
            // Internal details stay in the server's log: they can name paths and hosts.
            Self::Internal(detail) => {
                tracing::error!(%detail, "internal error answering a request");
                "internal error; the server log has the details".to_owned()
            }
            Self::Service(error) if is_internal(error) => {
                tracing::error!(detail = %error, "internal error answering a request");
                "internal error; the server log has the details".to_owned()
            }
            Self::RunCrashed { id, detail } => {
                tracing::error!(run_id = %id, %detail, "a run failed inside the fabric");
                self.to_string()
            }
            other => other.to_string(),
        };
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code().to_owned(),
                message,
            },
        };
        let mut response = (status, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        match &self {
            Self::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            Self::TooManyRuns { retry_after_s, .. } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_s));
            }
            Self::ShuttingDown => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(5u64));
            }
            _ => {}
        }
        response
    }
}
