//! Reading, following and cancelling runs by id.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use fabric_core::Liveness;
use fabric_core::live::LiveRun;
use fabric_domain::{RunEvent, RunId, RunStatus};
use std::sync::Arc;

use crate::RunView;
use crate::error::ErrorBody;
use crate::extract::{QueryOf, RunIdPath};
use crate::model::{
    CancelAccepted, EventList, EventsQuery, LastEventIdHeader, ListQuery, RunListItem, RunPage,
    SseFrameDoc, StatusView,
};
use crate::sse::{self, Source};
use crate::{ApiError, AppState};

/// Runs per page without `limit`, and the most a page may hold.
const DEFAULT_PAGE: usize = 20;
const MAX_PAGE: usize = 100;

/// A run, in flight in this server or stored.
enum Found {
    Live(Arc<LiveRun>),
    Stored(Vec<RunEvent>),
}

impl Found {
    fn status(&self) -> RunStatus {
        match self {
            Self::Live(run) => run.status(),
            Self::Stored(events) => fabric_core::live::status_after(events.last()),
        }
    }

    /// The events with a `seq` of at least `first`.
    async fn events_from(self, first: u64) -> Vec<RunEvent> {
        let mut events = match self {
            Self::Live(run) => run.events().await,
            Self::Stored(events) => events,
        };
        events.retain(|e| e.seq >= first);
        events
    }
}

/// The live run first: its window has the latest events, its store what came before. With
/// a queue, a run executing on any worker is followed live too.
async fn find(state: &AppState, id: &RunId) -> Result<Found, ApiError> {
    if let Some(run) = state.service().follow(id).await {
        return Ok(Found::Live(run));
    }
    let events = state
        .store()
        .read_events(id)
        .await
        .map_err(ApiError::from_store)?;
    Ok(Found::Stored(events))
}

/// Who carries on a run that has no end (issue #26): probed only for a `running` one, so a
/// page costs at most one probe per such run.
pub(crate) async fn liveness_of(state: &AppState, id: &RunId, status: RunStatus) -> Liveness {
    if status == RunStatus::Running {
        state.store().liveness(id).await
    } else {
        Liveness::Unknown
    }
}

/// Lists runs, newest first, a page at a time.
#[utoipa::path(
    get,
    path = "/runs",
    tag = "runs",
    params(ListQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A page of runs, newest first", body = RunPage),
        (status = 400, description = "`invalid_parameter`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody),
    )
)]
pub(crate) async fn list_runs(
    State(state): State<AppState>,
    QueryOf(query): QueryOf<ListQuery>,
) -> Result<axum::Json<RunPage>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::InvalidParameter(format!(
            "`limit` must be between 1 and {MAX_PAGE}, got {limit}"
        )));
    }
    let status = crate::model::parse_status(query.status.as_deref())?;
    let specialist = match query.specialist {
        Some(s) if crate::formats::is_blank(&s) => {
            return Err(ApiError::InvalidParameter(
                "`specialist` is empty; leave it out to list every run".to_owned(),
            ));
        }
        other => other,
    };
    let before = query
        .before
        .as_deref()
        .map(|b| RunId::parse(b).map_err(|_| ApiError::InvalidRunId(b.to_owned())))
        .transpose()?;
    // One more than the page, to know whether there is a next page.
    let query = fabric_core::RunQuery {
        limit: limit + 1,
        before,
        statuses: status.into_iter().collect(),
        specialist,
        ..fabric_core::RunQuery::default()
    };
    let found = state
        .store()
        .list_runs(&query)
        .await
        .map_err(ApiError::from_store)?;
    let more = found.len() > limit;
    let mut runs = Vec::with_capacity(limit);
    for run in found.into_iter().take(limit) {
        let liveness = liveness_of(&state, &run.id, run.status).await;
        let conversation =
            fabric_core::service::conversation_totals(state.store().as_ref(), &run.id).await;
        let mut item = RunListItem::from(run).with_liveness(liveness);
        item.conversation = conversation.map(Into::into);
        runs.push(item);
    }
    let next_before = match (more, runs.last()) {
        (true, Some(last)) => Some(last.run_id.to_string()),
        _ => None,
    };
    Ok(axum::Json(RunPage { runs, next_before }))
}

/// One run: its summary, and its result once it has ended.
#[utoipa::path(
    get,
    path = "/runs/{id}",
    tag = "runs",
    params(("id" = String, Path, description = "The run id", pattern = r"^[A-Za-z0-9_-]{1,128}$")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The run", body = RunView),
        (status = 400, description = "`invalid_run_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 404, description = "`run_not_found`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody),
    )
)]
pub(crate) async fn get_run(
    State(state): State<AppState>,
    RunIdPath(id): RunIdPath,
) -> Result<axum::Json<RunView>, ApiError> {
    // A live run's view is built from its window and what the store has before it; a
    // stored one from its runlog.
    let view = match find(&state, &id).await? {
        Found::Live(run) => RunView::from_events(id, &run.events().await),
        Found::Stored(events) => RunView::from_events(id, &events),
    };
    let liveness = liveness_of(&state, &view.run_id, view.status).await;
    Ok(axum::Json(view.with_liveness(liveness)))
}

/// How a run stands: `running` or how it ended.
#[utoipa::path(
    get,
    path = "/runs/{id}/status",
    tag = "runs",
    params(("id" = String, Path, description = "The run id", pattern = r"^[A-Za-z0-9_-]{1,128}$")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The status", body = StatusView),
        (status = 400, description = "`invalid_run_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 404, description = "`run_not_found`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody),
    )
)]
pub(crate) async fn run_status(
    State(state): State<AppState>,
    RunIdPath(id): RunIdPath,
) -> Result<axum::Json<StatusView>, ApiError> {
    let found = find(&state, &id).await?;
    let status = found.status();
    let liveness = liveness_of(&state, &id, status).await;
    Ok(axum::Json(StatusView {
        status,
        live: matches!(found, Found::Live(_)),
        resumable: liveness.resumable(),
        queued: liveness.queued(),
        run_id: id,
    }))
}

/// The events of a run: JSON, or with `Accept: text/event-stream` an SSE stream that
/// follows a live run to its end and resumes after `Last-Event-ID`.
#[utoipa::path(
    get,
    path = "/runs/{id}/events",
    tag = "runs",
    params(
        ("id" = String, Path, description = "The run id", pattern = r"^[A-Za-z0-9_-]{1,128}$"),
        EventsQuery,
        LastEventIdHeader,
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The events, as JSON or as an SSE stream", content(
            (EventList = "application/json"),
            (SseFrameDoc = "text/event-stream"),
        )),
        (status = 400, description = "`invalid_run_id`, `invalid_parameter`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 404, description = "`run_not_found`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody),
    )
)]
pub(crate) async fn run_events(
    State(state): State<AppState>,
    RunIdPath(id): RunIdPath,
    QueryOf(query): QueryOf<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    // Exactly the document's pattern (issue #14: the document allowed values, `null` among
    // them, that the server refused).
    let last_event_id = LastEventIdHeader::read(&headers)?.seq()?;
    let after = last_event_id.or(query.after);
    let found = find(&state, &id).await?;
    if wants_sse(&headers) {
        let source = match found {
            Found::Live(run) => Source::Live(run),
            Found::Stored(events) => Source::Stored(events),
        };
        return Ok(sse::events(source, after).into_response());
    }
    let status = found.status();
    let first = after.map_or(0, |seq| seq.saturating_add(1));
    let events = found.events_from(first).await;
    Ok(axum::Json(EventList {
        run_id: id,
        status,
        events,
    })
    .into_response())
}

fn wants_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("text/event-stream"))
}

/// Cancels a run in flight: the model call or tool in flight is stopped, child processes
/// are killed, and the run ends with `run_failed` / `cancelled`.
#[utoipa::path(
    post,
    path = "/runs/{id}/cancel",
    tag = "runs",
    params(("id" = String, Path, description = "The run id", pattern = r"^[A-Za-z0-9_-]{1,128}$")),
    security(("bearer" = [])),
    responses(
        (status = 202, description = "The run was asked to stop", body = CancelAccepted),
        (status = 400, description = "`invalid_run_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 404, description = "`run_not_found`", body = ErrorBody),
        (status = 409, description = "`run_not_running`: it has already ended, or this server is not running it (its runlog has no terminal event)", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody),
    )
)]
pub(crate) async fn cancel_run(
    State(state): State<AppState>,
    RunIdPath(id): RunIdPath,
) -> Result<Response, ApiError> {
    match find(&state, &id).await? {
        Found::Live(run) if run.status() == RunStatus::Running => {
            run.cancel();
            Ok((
                StatusCode::ACCEPTED,
                axum::Json(CancelAccepted {
                    run_id: id,
                    cancel_requested: true,
                }),
            )
                .into_response())
        }
        found => match found.status() {
            // A runlog without a terminal event that this server is not running: its process
            // stopped without recording the end (or another process runs it).
            RunStatus::Running => Err(ApiError::RunNotLive(id.to_string())),
            status => Err(ApiError::RunNotRunning {
                id: id.to_string(),
                status: status.to_string(),
            }),
        },
    }
}
