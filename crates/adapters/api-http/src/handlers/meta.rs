//! The server itself: health, the OpenAPI document, and the answers for unknown routes.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

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
        runs_in_flight: state.service().registry().len(),
    })
}

/// The OpenAPI document of this API (this document). Needs no token: it describes public
/// code.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "server",
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json", body = Object))
)]
pub(crate) async fn openapi_document() -> impl IntoResponse {
    // The document `crate::openapi` builds, written out by a test: building it here would put
    // the binary's largest function into it (ADR-126).
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI_JSON)
}

/// The served document, kept equal to [`crate::openapi`] by the test
/// `issue_45_the_served_openapi_file_is_the_generated_document` (tests/router.rs), which
/// rewrites it under `FABRIC_UPDATE_GOLDEN=1`.
pub(crate) const OPENAPI_JSON: &str = include_str!("../../openapi.json");

/// Any path the API does not have.
pub(crate) async fn not_found() -> ApiError {
    ApiError::RouteNotFound
}

/// A known path with a method it does not take.
pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
