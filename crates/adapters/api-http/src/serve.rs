//! Serving the router on a listener until a shutdown signal, then shutting down in order:
//! stop accepting connections, cancel the runs in flight so each records its end, let the
//! open responses finish (they end with their run's terminal event), return.

use std::future::{Future, IntoFuture};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{ApiError, AppState, router_with};

/// How long runs and open responses get to end at shutdown.
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
    serve_inner(listener, state, extra, shutdown, SHUTDOWN_GRACE).await
}

/// [`serve`] with its grace period as a parameter, for tests.
#[doc(hidden)]
pub async fn serve_with_grace(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> Result<(), ApiError> {
    serve_inner(listener, state, axum::Router::new(), shutdown, grace).await
}

async fn serve_inner(
    listener: TcpListener,
    state: AppState,
    extra: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> Result<(), ApiError> {
    let app = router_with(state.clone(), extra);
    let runs = state.clone();
    let stopping = CancellationToken::new();
    let signal_stopping = stopping.clone();
    // When this future completes, axum stops accepting connections at once; the runs are
    // cancelled at the same moment, without waiting here, so blocking requests and SSE
    // streams end with their run's terminal event and the connections drain.
    let signal = async move {
        shutdown.await;
        tracing::info!("shutting down: no new connections; cancelling the runs in flight");
        runs.begin_shutdown();
        signal_stopping.cancel();
    };
    // Served as one make-service: each connection clones the finished router (a count).
    // `axum::serve(listener, router)` would rebuild the router's route table for every
    // connection (`Router::with_state` per accepted stream): 18 KiB of heap, 30 KiB of RSS,
    // for every connection held open, such as a blocking `POST /run` (issue #45,
    // docs/BENCHMARKS.md).
    let app = app.with_state(()).into_make_service();
    let server = axum::serve(listener, app)
        .with_graceful_shutdown(signal)
        .into_future();
    let drained = tokio::select! {
        served = server => {
            served.map_err(|e| ApiError::Internal(format!("the server failed: {e}")))?;
            true
        }
        () = async {
            stopping.cancelled().await;
            tokio::time::sleep(grace).await;
        } => false,
    };
    if !drained {
        tracing::warn!("some connections were still open after the grace period; closing them");
    }
    // Runs started by requests that raced the shutdown are cancelled too; wait for every run
    // task to record its end.
    if !state.shutdown_runs(grace).await {
        tracing::warn!("some runs did not end within the grace period");
    }
    Ok(())
}
