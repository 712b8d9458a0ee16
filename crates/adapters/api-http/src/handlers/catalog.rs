//! Across runs: search (`GET /runs/search`), figures (`GET /stats`) and pruning
//! (`POST /runs/prune`), answered from the store's index.

use axum::extract::State;
use fabric_core::search::{RunSearch, SearchError, SearchRequest};
use fabric_core::{StatsGroup, StatsQuery};
use fabric_domain::{parse_duration, parse_since};

use crate::error::ErrorBody;
use crate::extract::{JsonBody, QueryOf};
use crate::formats;
use crate::model::{
    PruneRequest, RunListItem, SearchHitDoc, SearchPage, SearchParams, StatsParams, parse_status,
};
use crate::{ApiError, AppState};
use fabric_core::views::{PruneResult, StatsPage};

/// Most hits a search may ask for.
const MAX_HITS: usize = 100;

fn search_of(state: &AppState) -> Result<&RunSearch, ApiError> {
    state.inner.search.as_ref().ok_or_else(|| {
        ApiError::Internal("this server has no run index (no database store)".to_owned())
    })
}

fn since(text: Option<&str>) -> Result<Option<f64>, ApiError> {
    text.map(|t| {
        // The document's pattern first, so the server refuses exactly what it does not allow
        // (`parse_since` alone is more lenient: spaces around, `+` signs).
        if !formats::is_since(t) {
            return Err(ApiError::InvalidParameter(format!(
                "`since`: `{t}` is not a date; write 2026-11-01, 2026-11-01T12:30:00Z, or a duration back from now such as 7d"
            )));
        }
        parse_since(t, fabric_core::unix_now())
            .map_err(|e| ApiError::InvalidParameter(format!("`since`: {e}")))
    })
    .transpose()
}

/// Finds past runs by their prompt, result, tool calls and results: by text, and by meaning
/// when the server has an embedding model (hybrid ranking by default).
#[utoipa::path(
    get,
    path = "/runs/search",
    tag = "runs",
    params(SearchParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The runs found, best first, and how they were ranked", body = SearchPage),
        (status = 400, description = "`invalid_parameter`: an empty `q`, a bad `status`, `since` or `limit`, an unknown parameter", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 422, description = "`invalid_request`: `semantic=true` without an embedding model configured", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody),
        (status = 503, description = "`model_unavailable`: `semantic=true` and the embedding model did not answer", body = ErrorBody),
    )
)]
pub(crate) async fn search_runs(
    State(state): State<AppState>,
    QueryOf(params): QueryOf<SearchParams>,
) -> Result<axum::Json<SearchPage>, ApiError> {
    let limit = params.limit.unwrap_or(10);
    if !(1..=MAX_HITS).contains(&limit) {
        return Err(ApiError::InvalidParameter(format!(
            "`limit` must be between 1 and {MAX_HITS}, got {limit}"
        )));
    }
    let text = params.q.unwrap_or_default();
    if formats::is_blank(&text) {
        return Err(ApiError::InvalidParameter(
            "`q` is empty; give the words to look for".to_owned(),
        ));
    }
    let request = SearchRequest {
        text,
        semantic: params.semantic.unwrap_or(false),
        specialist: params.specialist,
        status: parse_status(params.status.as_deref())?,
        since: since(params.since.as_deref())?,
        limit,
    };
    let results = search_of(&state)?
        .search(&request)
        .await
        .map_err(|e| match e {
            SearchError::Invalid(m) => ApiError::InvalidRequest(m),
            e @ (SearchError::EmbeddingUnavailable { .. } | SearchError::Embedding(_)) => {
                ApiError::ModelUnavailable(e.to_string())
            }
            SearchError::Store(e) => ApiError::from_store(e),
        })?;
    let mut hits = Vec::with_capacity(results.hits.len());
    for hit in results.hits {
        let liveness = super::runs::liveness_of(&state, &hit.run.id, hit.run.status).await;
        hits.push(SearchHitDoc {
            score: hit.score,
            text_score: hit.text_score,
            semantic_score: hit.semantic_score,
            snippet: hit.snippet,
            run: RunListItem::from(hit.run).with_liveness(liveness),
        });
    }
    Ok(axum::Json(SearchPage {
        mode: results.mode,
        note: results.note,
        hits,
    }))
}

/// Figures per specialist, model key or tool: runs, outcomes, steps, tokens, time, tool
/// errors.
#[utoipa::path(
    get,
    path = "/stats",
    tag = "runs",
    params(StatsParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "One row per group", body = StatsPage),
        (status = 400, description = "`invalid_parameter`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody),
    )
)]
pub(crate) async fn stats(
    State(state): State<AppState>,
    QueryOf(params): QueryOf<StatsParams>,
) -> Result<axum::Json<StatsPage>, ApiError> {
    let by = match params.by.as_deref() {
        None => StatsGroup::default(),
        Some(word) => StatsGroup::parse(word).ok_or_else(|| {
            ApiError::InvalidParameter(format!(
                "`by` must be specialist, model or tool; got `{word}`"
            ))
        })?,
    };
    let query = StatsQuery {
        by,
        since: since(params.since.as_deref())?,
        all: params.all.unwrap_or(false),
    };
    let rows = search_of(&state)?
        .catalog()
        .stats(&query)
        .await
        .map_err(ApiError::from_store)?;
    Ok(axum::Json(StatsPage { by, rows }))
}

/// Deletes ended runs older than a duration: their records, events, runlogs and workspaces.
/// Runs still going are never deleted.
#[utoipa::path(
    post,
    path = "/runs/prune",
    tag = "runs",
    request_body = PruneRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The runs deleted", body = PruneResult),
        (status = 400, description = "`invalid_json`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 422, description = "`invalid_request`: `older_than` is not a duration", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody),
    )
)]
pub(crate) async fn prune_runs(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<PruneRequest>,
) -> Result<axum::Json<PruneResult>, ApiError> {
    // The document's pattern first, as for `since`.
    if !formats::is_duration(&request.older_than) {
        return Err(ApiError::InvalidRequest(format!(
            "`older_than`: `{}` is not a duration; write a number and a unit: 90s, 30m, 12h, 7d or 2w",
            request.older_than
        )));
    }
    let age = parse_duration(&request.older_than)
        .map_err(|e| ApiError::InvalidRequest(format!("`older_than`: {e}")))?;
    let deleted = search_of(&state)?
        .catalog()
        .prune(fabric_core::unix_now() - age)
        .await
        .map_err(ApiError::from_store)?;
    Ok(axum::Json(PruneResult::of(&deleted)))
}
