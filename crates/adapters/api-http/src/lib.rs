//! `fabric-api-http`: the HTTP API of agent-fabric (`fabric serve`).
//!
//! A driving adapter: it turns HTTP requests into runs of the core's use case and streams
//! their runlog events back as Server-Sent Events. It depends on `fabric-core` and
//! `fabric-domain` only; the binary hands it the core's run service (the one way every front
//! end starts runs, with the store and the preparer behind it) in an [`AppState`], and serves
//! [`router`].
//!
//! Layout:
//! - [`router`]: every route, the auth layer, the body limit and the OpenAPI document.
//! - `launch`: a request checked against the server's ceiling, submitted to the service.
//! - `sse`: runlog events as SSE frames, pulled from the run's buffer (back-pressure,
//!   never dropped events).
//! - `a2a`: the Agent2Agent protocol: the agent card and the JSON-RPC binding, a task being
//!   a run.
//! - `ui`: the web run viewer, plain files embedded in the binary and served at `/`.
//! - `handlers`: one module per group of endpoints; `extract`: extractors whose rejections
//!   are [`ApiError`]s; [`ApiError`]: every error and its one mapping to HTTP.
//!
//! Key decision: runs belong to the server, not to the request. A client that goes away
//! leaves its run going; runs are cancelled by `POST /runs/{id}/cancel` or at shutdown.

mod a2a;
mod auth;
mod error;
mod extract;
mod formats;
mod handlers;
mod launch;
mod model;
mod openapi;
mod serve;
mod sse;
mod state;
mod ui;

pub use a2a::{A2aSkill, AgentCardInfo};
pub use error::{ApiError, ErrorBody, ErrorDetail};
/// The answers the HTTP API shares with the MCP server (issue #28).
pub use fabric_core::views::{PruneResult, RunView, StatsPage};
pub use handlers::budget::{BudgetReport, BudgetSource, KeyBudget};
pub use model::{
    CancelAccepted, EventDoc, EventList, EventsQuery, Health, ListQuery, MAX_STEPS_LIMIT,
    PruneRequest, RunAccepted, RunListItem, RunMetaDoc, RunPage, RunRequest, RunResultDoc,
    STATUSES, SearchHitDoc, SearchPage, SearchParams, SseFrameDoc, StatsParams, StatusView,
};
pub use serve::{serve, serve_with, serve_with_grace};
pub use state::{ApiConfig, AppState, RequestCeiling};
pub use ui::{CONTENT_SECURITY_POLICY, assets_size};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use handlers::{attend, budget, catalog, meta, metrics, review, runs, start};

/// Every route of the API over `state`, and the web run viewer at `/`. Auth guards all but
/// `/health`, `/openapi.json` and the viewer's files; without a token, only loopback `Host`
/// names are answered.
pub fn router(state: AppState) -> Router {
    let (router, _document) = api(state.clone());
    router
        .merge(a2a::routes(state.clone()))
        .merge(ui::routes())
        .fallback(meta::not_found)
        .method_not_allowed_fallback(meta::method_not_allowed)
        .layer(DefaultBodyLimit::max(state.inner.config.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_loopback_host,
        ))
        .with_state(state)
}

/// [`router`] plus `extra` routes from another driving adapter (the MCP endpoint), guarded
/// by the same bearer-token auth. This crate does not know what they serve.
pub fn router_with(state: AppState, extra: Router) -> Router {
    let guarded = extra.layer(axum::middleware::from_fn_with_state(
        state.clone(),
        auth::require_token,
    ));
    router(state).merge(guarded)
}

/// The OpenAPI document of the API, as served at `/openapi.json`.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let service = fabric_core::service::RunService::new(
        std::sync::Arc::new(NoStore),
        std::sync::Arc::new(NoPreparer),
        fabric_core::service::ServiceConfig::default(),
    );
    let state = AppState::new(service, ApiConfig::default());
    api(state).1
}

fn api(state: AppState) -> (Router<AppState>, utoipa::openapi::OpenApi) {
    // `/metrics` keeps the token unless the config opens it to a scraper without one.
    let mut metrics = OpenApiRouter::new().routes(routes!(metrics::metrics));
    if !state.inner.config.metrics_public {
        metrics = metrics.route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ));
    }
    let protected = OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(start::run_blocking))
        .routes(routes!(start::run_stream))
        .routes(routes!(runs::list_runs, start::start_run))
        .routes(routes!(catalog::search_runs))
        .routes(routes!(catalog::stats))
        .routes(routes!(catalog::prune_runs))
        .routes(routes!(runs::get_run))
        .routes(routes!(runs::run_status))
        .routes(routes!(runs::run_events))
        .routes(routes!(runs::cancel_run))
        .routes(routes!(attend::answer_run))
        .routes(routes!(attend::steer_run))
        .routes(routes!(review::run_diff))
        .routes(routes!(review::apply_run))
        .routes(routes!(review::discard_run))
        .routes(routes!(budget::budget))
        .route_layer(axum::middleware::from_fn_with_state(
            state,
            auth::require_token,
        ));
    let public = OpenApiRouter::new()
        .routes(routes!(meta::health))
        .routes(routes!(meta::openapi_document));
    let (router, mut document) = protected.merge(metrics).merge(public).split_for_parts();
    openapi::publish_formats(&mut document);
    (router, document)
}

/// Stand-ins that let [`openapi`] build the document without a server.
struct NoStore;

#[async_trait::async_trait]
impl fabric_core::RunStore for NoStore {
    async fn create_run(
        &self,
        _id: fabric_domain::RunId,
    ) -> Result<fabric_core::NewRun, fabric_core::StoreError> {
        Err(fabric_core::StoreError::Io {
            action: "cannot create",
            path: std::path::PathBuf::new(),
            detail: "no store".to_owned(),
        })
    }
    async fn list_runs(
        &self,
        _query: &fabric_core::RunQuery,
    ) -> Result<Vec<fabric_domain::RunSummary>, fabric_core::StoreError> {
        Ok(Vec::new())
    }
    async fn read_events(
        &self,
        id: &fabric_domain::RunId,
    ) -> Result<Vec<fabric_domain::RunEvent>, fabric_core::StoreError> {
        Err(fabric_core::StoreError::NotFound(id.clone()))
    }
}

struct NoPreparer;

#[async_trait::async_trait]
impl fabric_core::service::Preparer for NoPreparer {
    async fn prepare(
        &self,
        _request: fabric_core::service::TaskRequest,
        _context: &fabric_core::service::PrepareContext,
    ) -> Result<Box<dyn fabric_core::service::Runnable>, fabric_core::service::ServiceError> {
        Err(
            fabric_core::service::Fault::Setup(fabric_core::ports::SetupError::Internal(
                "no preparer".to_owned(),
            ))
            .into(),
        )
    }
}
