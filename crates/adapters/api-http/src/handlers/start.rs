//! Starting runs: blocking, streaming, or in the background.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::Response;
use serde_json::Value;

use crate::error::ErrorBody;
use crate::extract::JsonBody;
use crate::model::{RunAccepted, RunResultDoc, SseFrameDoc};
use crate::sse::{self, Source};
use crate::{ApiError, AppState, RunRequest, launch};

/// Runs a task and answers when it has ended, with the object `fabric run --json` prints.
#[utoipa::path(
    post,
    path = "/run",
    tag = "runs",
    request_body = RunRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The run ended; `_meta.status` says how (also on a failed run)", body = RunResultDoc),
        (status = 400, description = "`invalid_json`: the body is not JSON; `invalid_run_id`: `continues.run_id` is not a run id", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`not_permitted`: `network_allowed` or `max_steps` asks for more than the server's config allows", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 404, description = "`run_not_found`: `continues.run_id` names no run", body = ErrorBody),
        (status = 409, description = "`run_not_ended`: the run `continues` names has not ended", body = ErrorBody),
        (status = 422, description = "`invalid_request`, `unknown_specialist`, `unknown_model_key`, `invalid_project`, or `cannot_continue`: the run `continues` names cannot be continued as asked (another project, a parallel task force without `pack`, a runlog that cannot be read)", body = ErrorBody),
        (status = 429, description = "`too_many_runs`, or `daily_budget_spent`: the model keys the run needs spent their daily budget", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))),
        (status = 500, description = "`internal` (a run that failed inside the fabric names its id)", body = ErrorBody),
        (status = 503, description = "`shutting_down` (with `Retry-After`), or `model_unavailable`: the model cannot be used now (its server cannot be started, none of its models can call tools, a pull failed); the message says why", body = ErrorBody, headers(("Retry-After" = u64, description = "With `shutting_down`: seconds to wait before retrying"))),
    )
)]
pub(crate) async fn run_blocking(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    JsonBody(request): JsonBody<RunRequest>,
) -> Result<axum::Json<Value>, ApiError> {
    let parent = launch::traceparent(&headers);
    // Held for the run's life, the headers would pin hyper's first read buffer (their values
    // are slices of it) and make it take a second one (docs/BENCHMARKS.md, issue #45).
    drop(headers);
    // Boxed: inline, the start's future stayed in the handler's for the run's life (issue #45).
    let handle = Box::pin(launch::start(&state, request, parent)).await?;
    let id = handle.id().to_string();
    let outcome = handle.outcome().await.map_err(|e| ApiError::RunCrashed {
        id,
        detail: e.to_string(),
    })?;
    Ok(axum::Json(state.service().result_object(&outcome)))
}

/// Runs a task and streams every runlog event as it happens (Server-Sent Events), ending
/// with `run_complete` or `run_failed`. The run goes on if the client goes away.
#[utoipa::path(
    post,
    path = "/run/stream",
    tag = "runs",
    request_body = RunRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "An SSE stream: per event `id: <seq>`, `event: <kind>`, `data: <runlog line>`", content_type = "text/event-stream", body = SseFrameDoc),
        (status = 400, description = "`invalid_json`, or `invalid_run_id`: `continues.run_id` is not a run id", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`not_permitted`: `network_allowed` or `max_steps` asks for more than the server's config allows", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 404, description = "`run_not_found`: `continues.run_id` names no run", body = ErrorBody),
        (status = 409, description = "`run_not_ended`: the run `continues` names has not ended", body = ErrorBody),
        (status = 422, description = "`invalid_request`, `unknown_specialist`, `unknown_model_key`, `invalid_project`, or `cannot_continue`: the run `continues` names cannot be continued as asked (another project, a parallel task force without `pack`, a runlog that cannot be read)", body = ErrorBody),
        (status = 429, description = "`too_many_runs`, or `daily_budget_spent`: the model keys the run needs spent their daily budget", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))),
        (status = 500, description = "`internal` (a run that failed inside the fabric names its id)", body = ErrorBody),
        (status = 503, description = "`shutting_down` (with `Retry-After`), or `model_unavailable`: the model cannot be used now (its server cannot be started, none of its models can call tools, a pull failed); the message says why", body = ErrorBody, headers(("Retry-After" = u64, description = "With `shutting_down`: seconds to wait before retrying"))),
    )
)]
pub(crate) async fn run_stream(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    JsonBody(request): JsonBody<RunRequest>,
) -> Result<Response, ApiError> {
    let handle = Box::pin(launch::start(
        &state,
        request,
        launch::traceparent(&headers),
    ))
    .await?;
    Ok(sse::events(Source::Live(std::sync::Arc::clone(handle.live())), None).into_response())
}

/// Starts a task in the background and answers with its id once it is prepared (recruited,
/// its models resolved); the run itself goes on in the background.
#[utoipa::path(
    post,
    path = "/runs",
    tag = "runs",
    request_body = RunRequest,
    security(("bearer" = [])),
    responses(
        (status = 202, description = "The run started", body = RunAccepted),
        (status = 400, description = "`invalid_json`, or `invalid_run_id`: `continues.run_id` is not a run id", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`not_permitted`: `network_allowed` or `max_steps` asks for more than the server's config allows", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 404, description = "`run_not_found`: `continues.run_id` names no run", body = ErrorBody),
        (status = 409, description = "`run_not_ended`: the run `continues` names has not ended", body = ErrorBody),
        (status = 422, description = "`invalid_request`, `unknown_specialist`, `unknown_model_key`, `invalid_project`, or `cannot_continue`: the run `continues` names cannot be continued as asked (another project, a parallel task force without `pack`, a runlog that cannot be read)", body = ErrorBody),
        (status = 429, description = "`too_many_runs`, or `daily_budget_spent`: the model keys the run needs spent their daily budget", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))),
        (status = 500, description = "`internal` (a run that failed inside the fabric names its id)", body = ErrorBody),
        (status = 503, description = "`shutting_down` (with `Retry-After`), or `model_unavailable`: the model cannot be used now (its server cannot be started, none of its models can call tools, a pull failed); the message says why", body = ErrorBody, headers(("Retry-After" = u64, description = "With `shutting_down`: seconds to wait before retrying"))),
    )
)]
pub(crate) async fn start_run(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    JsonBody(request): JsonBody<RunRequest>,
) -> Result<Response, ApiError> {
    let handle = launch::start(&state, request, launch::traceparent(&headers)).await?;
    let id = handle.id().clone();
    let body = RunAccepted {
        events_url: format!("/runs/{id}/events"),
        status_url: format!("/runs/{id}/status"),
        status: fabric_domain::RunStatus::Running,
        run_id: id.clone(),
    };
    let location = format!("/runs/{id}");
    Ok((
        StatusCode::ACCEPTED,
        [(axum::http::header::LOCATION, location)],
        axum::Json(body),
    )
        .into_response())
}
