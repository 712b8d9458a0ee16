//! Serving the router on a listener until a shutdown signal, then shutting down in order:
//! stop accepting connections, cancel the runs in flight so each records its end, let the
//! open responses finish (they end with their run's terminal event), return.
//!
//! Connections are served by hyper's HTTP/1 connection directly (ADR-128), not through
//! `axum::serve`, whose connection first reads the bytes that tell HTTP/1 from HTTP/2 and
//! hands them back to HTTP/1: the head then arrives in two reads and hyper grows its read
//! buffer from 8 to 16 KiB, held by every open connection (a blocking `POST /run` holds one
//! for its run's life). The API speaks HTTP/1.1 only (axum's `http2` feature is off), so
//! there is nothing to tell apart. The first request of a connection is read here first:
//! a `POST /run` or `POST /run/stream`, which holds its connection for a run's life, is
//! answered without hyper's connection and its buffers (ADR-129, [`crate::held`]).

use std::future::Future;
use std::pin::pin;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::{ApiError, App, AppState, held, router_with};

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
    // Each connection clones the finished service (a few counts). Serving a `Router` per accepted
    // stream (`Router::with_state`) would rebuild its route table for every connection: 18
    // KiB of heap, 30 KiB of RSS, for every connection held open, such as a blocking
    // `POST /run` (issue #45, docs/BENCHMARKS.md).
    let limits = Limits {
        max_body: state.inner.config.max_body_bytes,
        header_timeout: state.inner.config.header_timeout,
    };
    let server = serve_http1(listener, app, limits, signal);
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

/// What every connection is held to.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// `server.max_body_bytes`.
    max_body: usize,
    /// `server.header_timeout_s`: a whole request head within this long.
    header_timeout: Duration,
}

/// Accepts connections on `listener` and serves each with `app` over HTTP/1.1 until
/// `signal` completes; then stops accepting, asks every open connection to close once its
/// response in flight is done, and returns when all have.
async fn serve_http1(
    listener: TcpListener,
    app: App,
    limits: Limits,
    signal: impl Future<Output = ()>,
) -> std::io::Result<()> {
    // Every connection task holds a receiver of `stop` (to hear the signal) and of `open`
    // (whose sender sees them all gone when the last connection ends).
    let (stop_tx, stop_rx) = watch::channel(false);
    let (open_tx, open_rx) = watch::channel(());
    let mut signal = pin!(signal);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut signal => break,
        };
        let (app, mut stop, open) = (app.clone(), stop_rx.clone(), open_rx.clone());
        tokio::spawn(async move {
            // An idle connection closes at the signal, as hyper closes one between requests,
            // and when its first request's head has not come whole in time.
            let first = tokio::select! {
                first = tokio::time::timeout(
                    limits.header_timeout,
                    held::first(&stream, limits.max_body),
                ) => first,
                _ = stop.changed() => return,
            };
            match first {
                Ok(Ok(held::First::Held { head, length, body })) => {
                    held::serve(stream, app, head, length, body, limits.header_timeout).await;
                }
                Ok(Ok(held::First::Other(read))) => {
                    // Boxed: hyper's connection is the larger arm, and inline it would size
                    // the task of every held request too (issue #45).
                    let io = held::Rewind::new(read, stream);
                    Box::pin(serve_hyper(io, app, limits.header_timeout, stop)).await;
                }
                Ok(Ok(held::First::Closed)) => {}
                Ok(Err(e)) => {
                    tracing::trace!(error = %e, "reading a connection's first request failed")
                }
                Err(_) => tracing::debug!("a connection sent no whole request head in time"),
            }
            drop(open);
        });
    }
    drop(listener);
    drop(open_rx);
    // No receiver left (every connection already ended) is fine: nothing to tell.
    let _ = stop_tx.send(true);
    open_tx.closed().await;
    Ok(())
}

/// Serves `io` with hyper's HTTP/1 connection until it closes, or until `stop` changes: then
/// the response in flight finishes and the connection closes. Each request's head must come
/// whole within `header_timeout` of hyper starting to wait for it (hyper's
/// `header_read_timeout`, which needs its timer).
async fn serve_hyper(
    io: held::Rewind,
    app: App,
    header_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let service = hyper_util::service::TowerToHyperService::new(app);
    let io = hyper_util::rt::TokioIo::new(io);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout);
    let mut connection = pin!(builder.serve_connection(io, service));
    let mut stopping = false;
    loop {
        tokio::select! {
            served = connection.as_mut() => {
                if let Err(e) = served {
                    tracing::trace!(error = %e, "connection ended with an error");
                }
                break;
            }
            changed = stop.changed(), if !stopping => {
                stopping = true;
                if changed.is_ok() {
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// What `axum::serve` does with a failed accept: a connection the peer reset is skipped; any
/// other error (most often no file descriptors left) is logged and the loop waits a second,
/// for connections to close, rather than spin.
async fn accept_failed(error: std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %error, "accepting a connection failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
