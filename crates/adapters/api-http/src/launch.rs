//! Starting a run: check the request, take a slot, prepare the task off the async runtime,
//! create the run, and hand it to a task the server owns, so it keeps going when the client
//! that asked for it goes away.

use fabric_core::execute::RunOutcome;
use fabric_core::live::LiveRun;
use std::sync::Arc;
use tokio::sync::oneshot;

use crate::{ApiError, AppState, RunRequest};

/// A run that was started.
pub(crate) struct Started {
    /// Its events and cancellation token.
    pub(crate) live: Arc<LiveRun>,
    /// How it ended, once it has; an error text when the fabric itself failed.
    pub(crate) done: oneshot::Receiver<Result<RunOutcome, String>>,
}

pub(crate) async fn start(state: &AppState, request: RunRequest) -> Result<Started, ApiError> {
    request.validate()?;
    let inner = &state.inner;
    if state.is_shutting_down() {
        return Err(ApiError::ShuttingDown);
    }
    // A bad request is answered as such even when the server is full: check it first.
    let launcher = Arc::clone(&inner.launcher);
    // Preparing may ask the model server which models it has (discovery); that is async
    // I/O, so it runs here rather than on the blocking pool.
    let prepared = launcher.prepare(request).await?;
    let permit =
        Arc::clone(&inner.slots)
            .try_acquire_owned()
            .map_err(|_| ApiError::TooManyRuns {
                limit: inner.config.max_runs_in_flight,
                retry_after_s: inner.config.retry_after_s,
            })?;
    let run = inner
        .store
        .create_run()
        .await
        .map_err(ApiError::from_store)?;
    let live = inner.registry.register(run.id.clone());
    let (tx, done) = oneshot::channel();
    let registry = Arc::clone(&inner.registry);
    let task_live = Arc::clone(&live);
    inner.tracker.spawn(async move {
        // Held until the run has ended, so the in-flight limit counts this run.
        let _permit = permit;
        let id = task_live.id().clone();
        let result = prepared
            .run(run, task_live.as_ref(), task_live.cancel_token())
            .await
            .map_err(|e| e.to_string());
        if let Err(error) = &result {
            tracing::error!(run_id = %id, %error, "run failed inside the fabric");
        }
        task_live.finish(result.as_ref().err().map(String::as_str));
        registry.remove(&id);
        // Nobody may be waiting (POST /runs, or a client that went away): that is fine.
        let _ = tx.send(result);
    });
    Ok(Started { live, done })
}
