//! Starting a run from a request: check it against the server's ceiling, hand it to the run
//! service, and wait until it is prepared (recruited, its models resolved), so preparation
//! failures are answered as such. The run belongs to the service, not to the request: it
//! keeps going when the client that asked for it goes away.

use fabric_core::service::{RunHandle, ServiceError, Submission, TaskRequest, WhenAsked};

use crate::{ApiError, AppState, RunRequest};

/// The W3C `traceparent` header of a request, which the run's spans continue.
pub(crate) fn traceparent(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

pub(crate) async fn start(
    state: &AppState,
    request: RunRequest,
    traceparent: Option<String>,
) -> Result<RunHandle, ApiError> {
    start_in_context(state, request, None, traceparent).await
}

/// [`start`], the run being the task of an A2A client in `context_id` (`run_start.context_id`).
pub(crate) async fn start_in_context(
    state: &AppState,
    request: RunRequest,
    context_id: Option<String>,
    traceparent: Option<String>,
) -> Result<RunHandle, ApiError> {
    // A bad request is answered as such even when the server is full: check it first.
    request.validate()?;
    check_ceiling(state, &request)?;
    if state.is_shutting_down() {
        return Err(ApiError::ShuttingDown);
    }
    let task = TaskRequest {
        context_id,
        ..task_request(request)
    };
    let mut handle = state
        .inner
        .service
        .submit(
            Submission::new(task)
                .traced(traceparent)
                // Whoever started it answers later, by `POST /runs/{id}/input` (issue #42).
                .attended(WhenAsked::Wait {
                    timeout: state.inner.config.input_timeout,
                }),
        )
        .map_err(|e| from_service(state, e))?;
    handle
        .prepared()
        .await
        .map_err(|e| from_service(state, e))?;
    Ok(handle)
}

/// `pack` may name a task force as on the command line: `a,b`.
fn task_request(request: RunRequest) -> TaskRequest {
    TaskRequest {
        specialists: request
            .pack
            .as_deref()
            .map(|p| p.split(',').map(|id| id.trim().to_owned()).collect())
            .unwrap_or_default(),
        prompt: request.prompt,
        model_key: request.model_key,
        network_allowed: request.network_allowed,
        max_steps: request.max_steps,
        project: request
            .project
            .map(|path| fabric_core::service::ProjectRequest {
                path: path.into(),
                base: request.base,
            }),
        // Checked by `RunRequest::validate`.
        continues: request.continues.and_then(|c| {
            Some(fabric_core::service::ContinueRequest {
                run_id: fabric_domain::RunId::parse(&c.run_id).ok()?,
                fork: c.fork,
            })
        }),
        ..TaskRequest::default()
    }
}

/// A request may narrow the server's permissions, never widen them.
fn check_ceiling(state: &AppState, request: &RunRequest) -> Result<(), ApiError> {
    let ceiling = state.inner.config.ceiling;
    if request.network_allowed == Some(true) && !ceiling.network_allowed {
        return Err(ApiError::NotPermitted(
            "`network_allowed: true` is refused: this server's config has `network_allowed: false`, and a request may only narrow the server's permissions".to_owned(),
        ));
    }
    if let (Some(asked), Some(most)) = (request.max_steps, ceiling.max_steps)
        && asked > most
    {
        return Err(ApiError::NotPermitted(format!(
            "`max_steps` {asked} is more than this server allows ({most}, its config's `max_steps`); ask for at most {most} or leave it out"
        )));
    }
    Ok(())
}

/// The one mapping of the service's errors to the API's.
pub(crate) fn from_service(state: &AppState, error: ServiceError) -> ApiError {
    // Only the answers with a header or the server's own words are the API's; the rest
    // keep the service's error, coded by `error::http`.
    match error {
        ServiceError::TooManyRuns { limit } => ApiError::TooManyRuns {
            limit,
            retry_after_s: state.inner.config.retry_after_s,
        },
        ServiceError::ShuttingDown => ApiError::ShuttingDown,
        ServiceError::Cancelled if state.is_shutting_down() => ApiError::ShuttingDown,
        other => ApiError::Service(other),
    }
}
