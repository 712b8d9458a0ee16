//! The server itself: health, the OpenAPI document, and the answers for unknown routes.

use axum::extract::State;

use crate::model::Health;
use crate::{ApiError, AppState};

/// Whether the server is up. Needs no token, so probes can call it.
#[utoipa::path(
    get,
    path = "/health",
    tag = "server",
    responses((status = 200, description = "The server is up", body = Health))
)]
pub(crate) async fn health(State(state): State<AppState>) -> axum::Json<Health> {
    axum::Json(Health {
        status: "ok".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        runs_in_flight: state.inner.registry.len(),
    })
}

/// Any path the API does not have.
pub(crate) async fn not_found() -> ApiError {
    ApiError::RouteNotFound
}

/// A known path with a method it does not take.
pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
