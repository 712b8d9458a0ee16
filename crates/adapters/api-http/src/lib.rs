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
mod held;
mod launch;
mod model;
mod openapi;
mod serve;
mod sse;
mod state;
mod ui;

pub use a2a::{A2aSkill, AgentCardInfo};
pub use auth::Guarded;
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
use tower::Layer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use handlers::{attend, budget, catalog, meta, metrics, review, runs, start};

/// Every documented endpoint, once: one group of handlers per path. `$build` makes a router
/// of them: [`openapi`] one that writes the document, [`api`] one that only routes, so the
/// code that builds the document (the largest function of the binary) is left out of it.
macro_rules! endpoints {
    ($build:ident) => {
        $build! {
            (start::run_blocking)
            (start::run_stream)
            (runs::list_runs, start::start_run)
            (catalog::search_runs)
            (catalog::stats)
            (catalog::prune_runs)
            (runs::get_run)
            (runs::run_status)
            (runs::run_events)
            (runs::cancel_run)
            (attend::answer_run)
            (attend::steer_run)
            (review::run_diff)
            (review::apply_run)
            (review::discard_run)
            (budget::budget)
            (metrics::metrics)
            (meta::health)
            (meta::openapi_document)
        }
    };
}

/// Each handler's route, its path and methods read from its `#[utoipa::path]` (handlers of one
/// path are merged by the router).
macro_rules! routed {
    ($(($($module:ident :: $handler:ident),+))+) => {{
        use utoipa_axum::PathItemExt;
        let mut routes = Vec::new();
        $($(utoipa_axum::paste! {
            let mut method = axum::routing::MethodRouter::<AppState>::new();
            for each in <$module::[<__path_ $handler>] as utoipa::Path>::methods() {
                method = method.on(each.to_method_filter(), $module::$handler);
            }
            routes.push((<$module::[<__path_ $handler>] as utoipa::Path>::path(), method));
        })+)+
        routes
    }};
}

/// The API as one service: its routes behind the checks every request passes first.
///
/// The checks are tower layers around the router, not `Router::layer`: that one wraps every
/// route, and each wrapping boxes a future per request for as long as the answer takes (a
/// blocking `POST /run`'s whole run, issue #45). Around the router they are plain types,
/// their futures the router's own.
pub type App = auth::Guarded<<DefaultBodyLimit as Layer<Router>>::Service>;

/// Every route of the API over `state`, and the web run viewer at `/`. Auth guards all but
/// `/health`, `/openapi.json` and the viewer's files; without a token, only loopback `Host`
/// names are answered.
pub fn router(state: AppState) -> App {
    router_with(state, Router::new())
}

/// [`router`] plus `extra` routes from another driving adapter (the MCP endpoint), guarded
/// by the same bearer-token auth and the same checks. This crate does not know what they
/// serve.
pub fn router_with(state: AppState, extra: Router) -> App {
    let guarded = extra.layer(auth::Guard::token(state.clone()));
    let routes = api(state.clone())
        .merge(a2a::routes(state.clone()))
        .merge(ui::routes())
        .fallback(meta::not_found)
        .method_not_allowed_fallback(meta::method_not_allowed)
        .with_state(state.clone())
        .merge(guarded);
    let limited = DefaultBodyLimit::max(state.inner.config.max_body_bytes).layer(routes);
    auth::Guard::loopback_host(state).layer(limited)
}

/// The OpenAPI document of the API, built from the handlers' annotations. The server serves
/// the copy in `openapi.json` (see [`meta::openapi_document`]), which a test keeps equal to
/// this one.
pub fn openapi() -> utoipa::openapi::OpenApi {
    macro_rules! documented {
        ($(($($module:ident :: $handler:ident),+))+) => {
            OpenApiRouter::<AppState>::with_openapi(openapi::ApiDoc::openapi())
                $(.routes(routes!($($module::$handler),+)))+
        };
    }
    let (_, mut document) = endpoints!(documented).split_for_parts();
    openapi::publish_formats(&mut document);
    document
}

fn api(state: AppState) -> Router<AppState> {
    let (mut protected, mut metrics, mut public) = (Router::new(), Router::new(), Router::new());
    for (path, method) in endpoints!(routed) {
        let group = match path.as_str() {
            "/metrics" => &mut metrics,
            "/health" | "/openapi.json" => &mut public,
            _ => &mut protected,
        };
        *group = std::mem::take(group).route(&path, method);
    }
    // `/metrics` keeps the token unless the config opens it to a scraper without one.
    if !state.inner.config.metrics_public {
        metrics = metrics.route_layer(auth::Guard::token(state.clone()));
    }
    let protected = protected.route_layer(auth::Guard::token(state));
    protected.merge(metrics).merge(public)
}
