//! What the handlers share: the ports, the live runs, the limits.

use async_trait::async_trait;
use fabric_core::execute::RunOutcome;
use fabric_core::live::RunRegistry;
use fabric_core::{CoreError, NewRun, RunObserver, RunStore};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::{ApiError, RunRequest};

/// A task ready to run: one specialist or a task force, with its model clients. What it is
/// made of is the binary's business; the API only starts it in a run it created.
#[async_trait]
pub trait Runnable: Send {
    /// Runs the task in `run` to its end, as the CLI would.
    async fn run(
        self: Box<Self>,
        run: NewRun,
        observer: &dyn RunObserver,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, CoreError>;
}

/// A prepared task.
pub type PreparedRun = Box<dyn Runnable>;

/// Turns a request into a runnable task, exactly as the CLI does, so HTTP and CLI behave
/// the same. The binary implements it with its one application function.
#[async_trait]
pub trait RunLauncher: Send + Sync {
    /// Checks what the configuration decides about a request, cheaply and without I/O, before
    /// the request takes a slot: an unknown specialist or model key
    /// ([`ApiError::UnknownSpecialist`] / [`ApiError::UnknownModelKey`]), a request for more
    /// than the config allows ([`ApiError::NotPermitted`]). So a bad request is answered as
    /// such even when the server is full. The default accepts everything.
    fn check(&self, request: &RunRequest) -> Result<(), ApiError> {
        let _ = request;
        Ok(())
    }

    /// Routes, resolves the specialists, the models and the tools; may take long (routing
    /// model, discovery, starting or pulling a model). It runs holding the request's slot and
    /// is abandoned at shutdown. A model that cannot be used is [`ApiError::ModelUnavailable`].
    async fn prepare(&self, request: RunRequest) -> Result<PreparedRun, ApiError>;

    /// The result object of a finished run: the finish payload plus `_meta`, as
    /// `fabric run --json` prints it.
    fn result_object(&self, outcome: &RunOutcome) -> Value;
}

/// Limits and credentials of one server.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// The bearer token every endpoint but `/health` and `/openapi.json` requires; `None`
    /// turns auth off (the binary allows that only on loopback addresses).
    pub token: Option<String>,
    /// Runs in flight at once; one more is answered 429.
    pub max_runs_in_flight: usize,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// `Retry-After` of a 429, in seconds.
    pub retry_after_s: u64,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            token: None,
            max_runs_in_flight: 64,
            max_body_bytes: 256 * 1024,
            retry_after_s: 2,
        }
    }
}

/// The state every handler gets: cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) store: Arc<dyn RunStore>,
    pub(crate) launcher: Arc<dyn RunLauncher>,
    pub(crate) registry: Arc<RunRegistry>,
    /// One permit per run in flight; a run holds its permit until its task ends.
    pub(crate) slots: Arc<Semaphore>,
    /// Owns every run task, so shutdown can wait for them to record their end.
    pub(crate) tracker: TaskTracker,
    pub(crate) config: ApiConfig,
    pub(crate) shutting_down: AtomicBool,
    /// Cancelled when shutdown starts: abandons the preparations in flight.
    pub(crate) shutdown: CancellationToken,
}

impl AppState {
    /// A server's state over these ports.
    pub fn new(
        store: Arc<dyn RunStore>,
        launcher: Arc<dyn RunLauncher>,
        config: ApiConfig,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                launcher,
                registry: Arc::new(RunRegistry::new()),
                slots: Arc::new(Semaphore::new(config.max_runs_in_flight)),
                tracker: TaskTracker::new(),
                config,
                shutting_down: AtomicBool::new(false),
                shutdown: CancellationToken::new(),
            }),
        }
    }

    /// The runs in flight.
    pub fn registry(&self) -> &Arc<RunRegistry> {
        &self.inner.registry
    }

    /// Stops starting runs, cancels those in flight and waits up to `grace` for them to
    /// record their end (`run_failed` / `cancelled`). Returns whether all of them did.
    pub async fn shutdown_runs(&self, grace: Duration) -> bool {
        self.begin_shutdown();
        tokio::time::timeout(grace, self.inner.tracker.wait())
            .await
            .is_ok()
    }

    /// Stops starting runs, abandons the preparations in flight and cancels the runs in
    /// flight (and any started later), without waiting for them.
    pub fn begin_shutdown(&self) {
        self.inner.shutting_down.store(true, Ordering::SeqCst);
        self.inner.shutdown.cancel();
        self.inner.registry.cancel_all();
        self.inner.tracker.close();
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.inner.shutting_down.load(Ordering::SeqCst)
    }
}
