//! Serving the router on a listener until a shutdown signal, then shutting down in order:
//! stop accepting, cancel the runs in flight so each records its end, let the open
//! responses finish, return.

use std::future::Future;
use std::time::Duration;
use tokio::net::TcpListener;

use crate::{ApiError, AppState, router_with};

/// How long runs get to record their cancellation at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Serves the API on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ApiError> {
    serve_with(listener, state, axum::Router::new(), shutdown).await
}

/// Serves the API plus `extra` routes (e.g. MCP at `/mcp`), which sit behind the same
/// bearer-token auth, until `shutdown` completes.
pub async fn serve_with(
    listener: TcpListener,
    state: AppState,
    extra: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ApiError> {
    let app = router_with(state.clone(), extra);
    let runs = state.clone();
    let signal = async move {
        shutdown.await;
        tracing::info!("shutting down: cancelling the runs in flight");
        // Cancelling first lets blocking requests and SSE streams end with their run's
        // terminal event, so the connections drain instead of being cut.
        if !runs.shutdown_runs(SHUTDOWN_GRACE).await {
            tracing::warn!("some runs did not end within the grace period");
        }
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(signal)
        .await
        .map_err(|e| ApiError::Internal(format!("the server failed: {e}")))?;
    // Runs started by requests that raced the shutdown are cancelled too.
    state.shutdown_runs(SHUTDOWN_GRACE).await;
    Ok(())
}
