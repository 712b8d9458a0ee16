//! Starting a run: check the request, take a slot, prepare the task (holding the slot, so
//! the in-flight limit covers routing, discovery and model start-up too), create the run,
//! and hand it to a task the server owns, so it keeps going when the client that asked for
//! it goes away.
//!
//! The task always ends the run properly, even when the run's code panics: the panic is
//! caught, a `run_failed` event (status `failed`) is recorded in the runlog and shown to the
//! followers, the run leaves the registry and its slot is freed.

use async_trait::async_trait;
use fabric_core::execute::RunOutcome;
use fabric_core::live::LiveRun;
use fabric_core::{NewRun, RunLog, RunObserver, StoreError};
use fabric_domain::RunEvent;
use futures_util::FutureExt;
use std::panic::AssertUnwindSafe;
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
    let inner = &state.inner;
    // A bad request is answered as such even when the server is full: check it first.
    request.validate()?;
    inner.launcher.check(&request)?;
    if state.is_shutting_down() {
        return Err(ApiError::ShuttingDown);
    }
    // The slot comes before preparing: preparing may route with a model, discover models,
    // start a model server or pull a model, and all of that counts against the limit.
    let permit =
        Arc::clone(&inner.slots)
            .try_acquire_owned()
            .map_err(|_| ApiError::TooManyRuns {
                limit: inner.config.max_runs_in_flight,
                retry_after_s: inner.config.retry_after_s,
            })?;
    // Async I/O (discovery, probes), so it runs here rather than on the blocking pool. A
    // client that goes away drops it; shutdown abandons it.
    let prepared = tokio::select! {
        prepared = inner.launcher.prepare(request) => prepared?,
        () = inner.shutdown.cancelled() => return Err(ApiError::ShuttingDown),
    };
    if state.is_shutting_down() {
        return Err(ApiError::ShuttingDown);
    }
    let run = inner
        .store
        .create_run(fabric_core::new_run_id())
        .await
        .map_err(ApiError::from_store)?;
    let log: Arc<dyn RunLog> = Arc::from(run.log);
    let run = NewRun {
        id: run.id,
        workspace: run.workspace,
        log: Box::new(SharedLog(Arc::clone(&log))),
    };
    let live = inner.registry.register(run.id.clone());
    let (tx, done) = oneshot::channel();
    let registry = Arc::clone(&inner.registry);
    let task_live = Arc::clone(&live);
    inner.tracker.spawn(async move {
        // Held until the run has ended, so the in-flight limit counts this run.
        let _permit = permit;
        let id = task_live.id().clone();
        let running = prepared.run(run, task_live.as_ref(), task_live.cancel_token());
        let result = match AssertUnwindSafe(running).catch_unwind().await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(panic) => {
                let reason = format!("the run panicked: {}", panic_text(panic.as_ref()));
                record_failure(&task_live, log.as_ref(), &reason).await;
                Err(reason)
            }
        };
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

/// Records the `run_failed` a run could not record itself: runlog first, then followers.
async fn record_failure(live: &LiveRun, log: &dyn RunLog, reason: &str) {
    let Some(event) = live.failure_event(reason) else {
        return;
    };
    if let Err(e) = log.append(&event).await {
        tracing::error!(run_id = %live.id(), error = %e, "cannot record the run's failure");
    }
    live.on_event(&event).await;
}

/// The message of a panic payload (`panic!` gives a `&str` or a `String`).
fn panic_text(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}

/// The run's log, shared with its task so the task can still record the end after a panic.
struct SharedLog(Arc<dyn RunLog>);

#[async_trait]
impl RunLog for SharedLog {
    async fn append(&self, event: &RunEvent) -> Result<(), StoreError> {
        self.0.append(event).await
    }
}
