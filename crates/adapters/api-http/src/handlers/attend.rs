//! Working with a run over HTTP (issue #42): answering a run that waits for a person, and
//! saying something to a running one.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fabric_core::service::{Answer, InvalidRequest, ServiceError, WhenAsked};
use fabric_domain::runlog::Decision;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::extract::{JsonBody, RunIdPath};
use crate::{ApiError, AppState};

/// The body of `POST /runs/{id}/input`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct InputRequest {
    /// The answer; for an approval its reason, or the decision itself (`approve`,
    /// `approve_for_run`, `deny`, optionally followed by a reason). Not blank.
    // The not-blank pattern is `formats::NOT_BLANK_PATTERN`, published by
    // `openapi::publish_formats`.
    #[schema(min_length = 1, max_length = 16000)]
    pub(crate) answer: String,
    /// An approval's decision, apart from the text: `approve`, `approve_for_run`, `deny`.
    #[serde(default)]
    #[schema(pattern = "^(approve|approve_for_run|deny)$")]
    pub(crate) decision: Option<String>,
}

/// The body of `POST /runs/{id}/messages`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MessageRequest {
    /// What to say to the run. Not blank (the pattern is published as the answer's).
    #[schema(min_length = 1, max_length = 16000)]
    pub(crate) text: String,
}

/// What answering or steering did.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Accepted {
    /// The run.
    pub(crate) run_id: String,
    /// `running`: the run goes on with it (an answer), or hears it at its next step (a
    /// message).
    pub(crate) status: &'static str,
}

/// The service's refusal, as the API answers it: a run in the wrong state is a conflict.
fn refused(state: &AppState, error: ServiceError) -> ApiError {
    match error {
        ServiceError::Invalid(
            e @ (InvalidRequest::NotWaiting { .. } | InvalidRequest::NotRunning { .. }),
        ) => ApiError::RunNotWaiting(e.to_string()),
        ServiceError::Invalid(InvalidRequest::NoSuchRun { id }) => {
            ApiError::RunNotFound(id.to_string())
        }
        ServiceError::Invalid(InvalidRequest::AlreadyRunning { id }) => ApiError::RunNotWaiting(
            format!("run `{id}` is not waiting for an answer (it is running)"),
        ),
        other => crate::launch::from_service(state, other),
    }
}

/// Answers a run that waits for a person (status `input_required`); it goes on here.
#[utoipa::path(
    post,
    path = "/runs/{id}/input",
    tag = "runs",
    params(("id" = String, Path, description = "The run id", pattern = r"^[A-Za-z0-9_-]{1,128}$")),
    request_body = InputRequest,
    security(("bearer" = [])),
    responses(
        (status = 202, description = "The answer was taken; the run goes on", body = Accepted),
        (status = 400, description = "`invalid_run_id`, `invalid_json`", body = crate::error::ErrorBody),
        (status = 401, description = "`unauthorized`", body = crate::error::ErrorBody),
        (status = 413, description = "`payload_too_large`", body = crate::error::ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = crate::error::ErrorBody),
        (status = 500, description = "`internal`", body = crate::error::ErrorBody),
        (status = 404, description = "`run_not_found`", body = crate::error::ErrorBody),
        (status = 409, description = "`run_not_waiting`: the run's status is not `input_required` (the message names it)", body = crate::error::ErrorBody),
        (status = 422, description = "`invalid_request`: an empty or too long answer (1 to 16000 characters), or an approval's answer that decides nothing", body = crate::error::ErrorBody),
    )
)]
pub(crate) async fn answer_run(
    State(state): State<AppState>,
    RunIdPath(id): RunIdPath,
    JsonBody(body): JsonBody<InputRequest>,
) -> Result<Response, ApiError> {
    let decision = match body.decision.as_deref() {
        None => None,
        Some(text) => Some(Decision::parse(text).ok_or_else(|| {
            ApiError::InvalidRequest(format!(
                "`decision` must be `approve`, `approve_for_run` or `deny`, got `{text}`"
            ))
        })?),
    };
    let answer = Answer {
        text: body.answer,
        decision,
        by: "http".to_owned(),
    };
    let when = WhenAsked::Wait {
        timeout: state.inner.config.input_timeout,
    };
    let service = &state.inner.service;
    let handle = service
        .answer(&id, answer, when, None)
        .await
        .map_err(|e| refused(&state, e))?;
    Ok(accepted(handle.id().to_string()))
}

/// Says something to a running run: its model gets it at its next step, on whichever
/// process runs it.
#[utoipa::path(
    post,
    path = "/runs/{id}/messages",
    tag = "runs",
    params(("id" = String, Path, description = "The run id", pattern = r"^[A-Za-z0-9_-]{1,128}$")),
    request_body = MessageRequest,
    security(("bearer" = [])),
    responses(
        (status = 202, description = "Taken: the model hears it at its next step", body = Accepted),
        (status = 400, description = "`invalid_run_id`, `invalid_json`", body = crate::error::ErrorBody),
        (status = 401, description = "`unauthorized`", body = crate::error::ErrorBody),
        (status = 413, description = "`payload_too_large`", body = crate::error::ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = crate::error::ErrorBody),
        (status = 500, description = "`internal`", body = crate::error::ErrorBody),
        (status = 404, description = "`run_not_found`", body = crate::error::ErrorBody),
        (status = 409, description = "`run_not_waiting`: the run has ended", body = crate::error::ErrorBody),
        (status = 422, description = "`invalid_request`: an empty or too long message (1 to 16000 characters)", body = crate::error::ErrorBody),
    )
)]
pub(crate) async fn steer_run(
    State(state): State<AppState>,
    RunIdPath(id): RunIdPath,
    JsonBody(body): JsonBody<MessageRequest>,
) -> Result<Response, ApiError> {
    state
        .inner
        .service
        .steer(&id, &body.text, "http")
        .await
        .map_err(|e| refused(&state, e))?;
    Ok(accepted(id.to_string()))
}

fn accepted(run_id: String) -> Response {
    (
        StatusCode::ACCEPTED,
        axum::Json(Accepted {
            run_id,
            status: "running",
        }),
    )
        .into_response()
}
