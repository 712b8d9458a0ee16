//! `GET /metrics`: the run service's metrics for Prometheus (issue #13).

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::AppState;

/// The metrics of the runs this server executed, in the Prometheus text exposition format
/// (docs/OBSERVABILITY.md). Behind the token unless `server.metrics_public: true`.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "server",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4", content_type = "text/plain; version=0.0.4", body = String))
)]
pub(crate) async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.service().metrics_text(),
    )
}
