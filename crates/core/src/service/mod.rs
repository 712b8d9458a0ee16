//! The run service: the one way a run is started, whoever asks (the CLI, `fabric serve`,
//! the MCP server, a parent run delegating to a child).
//!
//! [`RunService::submit`] checks the request, takes a slot (when the service has a limit),
//! mints the run id and registers the run, then hands it to a task the service owns:
//! preparation (routing, model discovery) is part of the run and cancellable by id from the
//! moment the id exists; then the run is created in the store and executed. The caller gets
//! a [`RunHandle`]: the id, the live run (events, cancel), when preparation ended, and the
//! outcome. The task always ends the run properly, even when the run's code panics: the
//! panic is caught, a `run_failed` event is recorded and shown, the run leaves the registry
//! and its slot is freed. Limits, cancellation, the shutdown drain and the run tree's budget
//! live here once.

mod attend;
mod children;
mod claims;
mod conversation;

pub mod prepare;
mod remote;
mod request;
mod resume;
mod review;
mod roots;
mod tee;
mod versioning;
mod worker;

use async_trait::async_trait;
use fabric_domain::{RunEvent, RunId, RunSummary};
use futures_util::FutureExt;
use serde_json::{Value, json};
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use attend::{Answer, MAX_INPUT_CHARS, WhenAsked};
pub use claims::ClaimedStore;
pub use conversation::{ConversationTotals, LineageRun, conversation_totals, lineage};
pub use fabric_engine::service_error::{
    ConversationError, DailySpent, ErrorCode, Fault, InvalidRequest, ProjectError, ServiceError,
};
pub use remote::cancelled_before_start;
pub use request::{ContinueRequest, PrepareContext, Preparer, Runnable, TaskRequest};
pub use review::RunDiff;
pub use versioning::{DiscardOnPrune, ProjectRequest, WorkspacePolicy};
pub use worker::{Worker, WorkerConfig, WorkerReport, WorkerReporter};

use crate::budget::Lineage;
use crate::execute::RunOutcome;
use crate::history::RunHistory;
use crate::live::{LiveRun, RunRegistry};
use crate::ports::{
    EventSink, NewRun, RunLog, RunObserver, RunQuery, RunQueue, RunStore, StoreError,
};
use tee::Tee;

/// Limits of one service.
#[derive(Debug, Clone, Default)]
pub struct ServiceConfig {
    /// Runs in flight at once (preparation included); one more is refused with
    /// [`ServiceError::TooManyRuns`]. `None`: no limit. Child runs are not counted: they
    /// are paid from their parent's budget, and a parent waiting on a slot its own child
    /// needs would never finish.
    pub max_runs_in_flight: Option<usize>,
    /// At shutdown, stop runs in flight without ending them (their logs refuse every write
    /// from that moment), so the next start continues them (`server.on_shutdown: suspend`;
    /// docs/DURABILITY.md); otherwise they are cancelled and end `cancelled`.
    pub suspend_on_shutdown: bool,
    /// The directories a request's `project` must be inside, its real path resolved
    /// (`server.project_roots`, for every front end a client outside this machine drives:
    /// HTTP, MCP, A2A, and the workers that run their queued runs); an empty list refuses
    /// every project. `None`: any directory (`fabric run --project`, whose user names their
    /// own). Issue #39, ADR-090.
    pub project_roots: Option<Vec<PathBuf>>,
}

/// Told when a run ended (in a task of the service's own, off the run's critical path):
/// the search index embeds the run.
#[async_trait]
pub trait RunEnded: Send + Sync {
    /// The run `id` ended; its terminal event is in the store.
    async fn run_ended(&self, id: RunId);
}

/// A request and who watches it.
pub struct Submission {
    /// What to do.
    pub request: TaskRequest,
    /// Watches every event besides the service's own live buffer (the CLI's renderer, the
    /// MCP server's progress notifications).
    pub observer: Option<Arc<dyn RunObserver>>,
    /// The run that delegates this one, for a child run.
    pub parent: Option<ParentRun>,
    /// An existing run to continue from its runlog instead of a new one (`request` is then
    /// read from the runlog; docs/DURABILITY.md).
    pub resume: Option<RunId>,
    /// The id of a new run, when it was minted already (a run a worker claimed from the
    /// queue); `None`: the service mints one.
    pub run_id: Option<RunId>,
    /// The W3C `traceparent` of the caller's trace (`POST /run` with the header): the run's
    /// spans continue it.
    pub trace_parent: Option<String>,
    /// What the run does when it asks a person and no answer is at hand (issue #42); by
    /// default the model is told no one can answer.
    pub when_asked: WhenAsked,
}

impl Submission {
    /// A request nobody else watches.
    pub fn new(request: TaskRequest) -> Self {
        Self {
            request,
            observer: None,
            parent: None,
            resume: None,
            run_id: None,
            trace_parent: None,
            when_asked: WhenAsked::Refuse(
                "it was started without a channel to a person".to_owned(),
            ),
        }
    }

    /// With what the run does when it asks a person (issue #42).
    pub fn attended(mut self, when: WhenAsked) -> Self {
        self.when_asked = when;
        self
    }

    /// Continues run `id`, whose process stopped before its end.
    pub fn resume(id: RunId) -> Self {
        Self {
            resume: Some(id),
            ..Self::new(TaskRequest::default())
        }
    }

    /// With an observer.
    pub fn observed(mut self, observer: Arc<dyn RunObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Continuing the caller's trace (a W3C `traceparent`).
    pub fn traced(mut self, traceparent: Option<String>) -> Self {
        self.trace_parent = traceparent;
        self
    }
}

/// The parent of a child run.
#[derive(Clone)]
pub struct ParentRun {
    /// The child's place in the tree (one level below the parent, on the parent's budget).
    pub lineage: Lineage,
    /// The parent's workspace, shared when the configuration says so.
    pub workspace: PathBuf,
    /// Share it whatever the configuration says (a critic reads the staged work there).
    pub share_workspace: bool,
    /// The parent's token: the child stops when the parent is cancelled.
    pub cancel: CancellationToken,
}

/// A run that was submitted.
pub struct RunHandle {
    id: RunId,
    live: Arc<LiveRun>,
    prepared: Option<oneshot::Receiver<Result<(), ServiceError>>>,
    done: oneshot::Receiver<Done>,
}

/// What a run's end sends to its handle. The outcome is boxed: the channel's cell holds room
/// for its value from the run's start to its end, 440 bytes inline against 152 (issue #45).
type Done = Result<Box<RunOutcome>, ServiceError>;

impl RunHandle {
    /// The run's id, known from the moment it was submitted.
    pub fn id(&self) -> &RunId {
        &self.id
    }

    /// Its events so far, followers, and its cancellation.
    pub fn live(&self) -> &Arc<LiveRun> {
        &self.live
    }

    /// Waits until preparation ended: `Ok` once the run exists in the store and executes;
    /// the reason otherwise (the outcome then carries the same error).
    pub async fn prepared(&mut self) -> Result<(), ServiceError> {
        match self.prepared.take() {
            Some(rx) => rx
                .await
                .unwrap_or(Err(ServiceError::Internal(Fault::EndedBeforePreparing))),
            None => Ok(()),
        }
    }

    /// Waits for the run to end.
    pub async fn outcome(self) -> Result<RunOutcome, ServiceError> {
        match self.done.await {
            Ok(done) => done.map(|outcome| *outcome),
            Err(_) => Err(ServiceError::Internal(Fault::EndedWithoutOutcome)),
        }
    }
}

/// The run service; cheap to clone.
#[derive(Clone)]
pub struct RunService {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn RunStore>,
    preparer: Arc<dyn Preparer>,
    registry: RunRegistry,
    slots: Option<Arc<Semaphore>>,
    limit: Option<usize>,
    /// Owns every run task, so shutdown can wait for them to record their end.
    tracker: TaskTracker,
    shutting_down: AtomicBool,
    /// Set at a suspending shutdown: every run's log refuses further writes.
    suspended: Arc<AtomicBool>,
    suspend_on_shutdown: bool,
    /// What `project` may name ([`ServiceConfig::project_roots`]).
    project_roots: Option<Vec<PathBuf>>,
    /// Told when each run that reached the store ended.
    on_end: Option<Arc<dyn RunEnded>>,
    /// Where new runs go when this service only enqueues them for workers (`fabric serve`
    /// with `store.queue: true`), and the queue's limit across workers; `None`: they run
    /// here.
    queue: Option<Arc<dyn RunQueue>>,
    queue_limit: Option<u64>,
    /// How long a run enqueued here may wait for a worker before the service says so
    /// (issue #26: with no worker, `POST /run` waited without a word).
    unclaimed_notice: std::time::Duration,
    /// Counted from every event of every run executed here (`GET /metrics`).
    metrics: Arc<crate::metrics::Metrics>,
    /// Every event of every run executed here goes to each: the metrics first, then what
    /// [`RunService::with_sink`] added (traces).
    sinks: Vec<Arc<dyn EventSink>>,
    /// Versioned workspaces (issue #25): runs on the user's project, and scratch histories
    /// where the policy asks; `None`: every run works in a plain scratch directory.
    versioning: Option<versioning::Versioning>,
}

impl RunService {
    /// A service over a store and a preparer.
    pub fn new(
        store: Arc<dyn RunStore>,
        preparer: Arc<dyn Preparer>,
        config: ServiceConfig,
    ) -> Self {
        let metrics = Arc::new(crate::metrics::Metrics::new());
        Self {
            inner: Arc::new(Inner {
                // A run's older events are read back from its runlog (docs/BENCHMARKS.md).
                registry: RunRegistry::windowed(Arc::clone(&store)),
                store,
                preparer,
                slots: config
                    .max_runs_in_flight
                    .map(|n| Arc::new(Semaphore::new(n))),
                limit: config.max_runs_in_flight,
                tracker: TaskTracker::new(),
                shutting_down: AtomicBool::new(false),
                suspended: Arc::new(AtomicBool::new(false)),
                suspend_on_shutdown: config.suspend_on_shutdown,
                project_roots: config.project_roots,
                on_end: None,
                queue: None,
                queue_limit: None,
                unclaimed_notice: std::time::Duration::from_secs(30),
                metrics: Arc::clone(&metrics),
                sinks: vec![metrics],
                versioning: None,
            }),
        }
    }

    /// Enqueues new runs for workers instead of running them here, and follows runs that
    /// execute on any worker (before any run is submitted).
    /// `limit`: most runs queued or running across every worker (the service's own
    /// in-flight limit does not apply to enqueued runs: workers' `--concurrency` does).
    pub fn enqueue_to(mut self, queue: Arc<dyn RunQueue>, limit: Option<u64>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.queue = Some(queue);
            inner.queue_limit = limit;
        } else {
            tracing::error!("RunService::enqueue_to called after the service was shared; ignored");
        }
        self
    }

    /// Says (a warning in the log) when a run enqueued here has waited `after` for a worker
    /// to claim it, and again each time it waits that long anew (its worker's lease ran
    /// out); 30 s unless set (before any run is submitted).
    pub fn say_unclaimed_after(mut self, after: std::time::Duration) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.unclaimed_notice = after.max(std::time::Duration::from_secs(1));
        } else {
            tracing::error!(
                "RunService::say_unclaimed_after called after the service was shared; ignored"
            );
        }
        self
    }

    /// With versioned workspaces (before any run is submitted): runs on the user's project
    /// work in a worktree of it, and every call that may change files is checkpointed.
    pub fn with_workspaces(
        mut self,
        workspaces: Arc<dyn crate::ports::Workspaces>,
        policy: WorkspacePolicy,
    ) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.versioning = Some(versioning::Versioning { workspaces, policy });
        } else {
            tracing::error!(
                "RunService::with_workspaces called after the service was shared; ignored"
            );
        }
        self
    }

    /// With a hook told when each run ended (before any run is submitted).
    pub fn on_end(mut self, hook: Arc<dyn RunEnded>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.on_end = Some(hook);
        } else {
            tracing::error!("RunService::on_end called after the service was shared; ignored");
        }
        self
    }

    /// With one more sink told every event of every run (before any run is submitted).
    pub fn with_sink(mut self, sink: Arc<dyn EventSink>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.sinks.push(sink);
        } else {
            tracing::error!("RunService::with_sink called after the service was shared; ignored");
        }
        self
    }

    /// The store runs are kept in.
    pub fn store(&self) -> &Arc<dyn RunStore> {
        &self.inner.store
    }

    /// Who worked on a run, as recorded; none for a run that stopped before its
    /// recruitment (or that the store cannot read: this only names runs in messages).
    pub async fn recorded_specialists(&self, id: &RunId) -> Vec<String> {
        self.inner
            .store
            .get_run(id)
            .await
            .map(|run| run.specialist_ids)
            .unwrap_or_default()
    }

    /// The runs in flight.
    pub fn registry(&self) -> &RunRegistry {
        &self.inner.registry
    }

    /// The metrics of the runs executed here, in the Prometheus text format, with the
    /// runs in flight now.
    pub fn metrics_text(&self) -> String {
        self.inner.metrics.render(self.gauges())
    }

    /// The metrics of the runs executed here, with the runs in flight now, for an exporter.
    pub fn metrics_snapshot(&self) -> Vec<crate::metrics::Family> {
        self.inner.metrics.snapshot(self.gauges())
    }

    fn gauges(&self) -> crate::metrics::Gauges {
        crate::metrics::Gauges {
            runs_in_flight: self.inner.registry.len(),
        }
    }

    /// Checks a request without starting it (the preparer's cheap checks).
    pub fn check(&self, request: &TaskRequest) -> Result<(), ServiceError> {
        if request.prompt.trim().is_empty() {
            return Err(InvalidRequest::EmptyPrompt.into());
        }
        if request.project.is_some() && self.inner.versioning.is_none() {
            return Err(InvalidRequest::NoVersioning.into());
        }
        self.inner.preparer.check(request)
    }

    /// With [`ServiceConfig::project_roots`], the request's `project` replaced by its real
    /// path when that is inside a root, else refused (the one check HTTP, MCP and A2A go
    /// through). Resolving the path reads the disk: a few `stat`s and `readlink`s.
    fn confine_project(&self, request: &mut TaskRequest) -> Result<(), ServiceError> {
        if let (Some(roots), Some(project)) = (&self.inner.project_roots, &mut request.project) {
            project.path = roots::confine(&project.path, roots)?;
        }
        Ok(())
    }

    /// Starts a run: checks, takes a slot, mints the id and hands the run to a task the
    /// service owns, so it keeps going when the caller goes away.
    pub fn submit(&self, mut submission: Submission) -> Result<RunHandle, ServiceError> {
        let inner = &self.inner;
        // A bad request is answered as such even when the service is full: check it first.
        // A run to continue is checked once its runlog is read.
        if submission.resume.is_none() {
            self.check(&submission.request)?;
            self.confine_project(&mut submission.request)?;
        }
        if self.is_shutting_down() {
            return Err(ServiceError::ShuttingDown);
        }
        let enqueued =
            inner.queue.is_some() && submission.parent.is_none() && submission.resume.is_none();
        let permit = match (&submission.parent, &inner.slots) {
            (None, Some(slots)) if !enqueued => {
                Some(Arc::clone(slots).try_acquire_owned().map_err(|_| {
                    ServiceError::TooManyRuns {
                        limit: inner.limit.unwrap_or_default(),
                    }
                })?)
            }
            _ => None,
        };
        let id = match &submission.resume {
            Some(id) if inner.registry.get(id).is_some() => {
                return Err(InvalidRequest::AlreadyRunning { id: id.clone() }.into());
            }
            Some(id) => id.clone(),
            None => submission.run_id.clone().unwrap_or_else(crate::new_run_id),
        };
        let live = match &submission.parent {
            Some(parent) => inner
                .registry
                .register_with(id.clone(), parent.cancel.child_token()),
            None => inner.registry.register(id.clone()),
        };
        if let Some(traceparent) = &submission.trace_parent {
            for sink in &inner.sinks {
                sink.link_parent(&id, traceparent);
            }
        }
        let (prepared_tx, prepared_rx) = oneshot::channel();
        let (done_tx, done_rx) = oneshot::channel();
        let task = RunTask {
            service: self.clone(),
            live: Arc::clone(&live),
            submission,
            _permit: permit,
        };
        // The run's own task carries its id, for the trace context of its outgoing calls.
        inner.tracker.spawn(crate::trace::scope(
            id.clone(),
            Box::new(task).run(prepared_tx, done_tx),
        ));
        Ok(RunHandle {
            id,
            live,
            prepared: Some(prepared_rx),
            done: done_rx,
        })
    }

    /// Cancels a run in flight (preparing or executing); `false` when no such run is in
    /// flight here.
    pub fn cancel(&self, id: &RunId) -> bool {
        match self.inner.registry.get(id) {
            Some(run) => {
                run.cancel();
                true
            }
            None => false,
        }
    }

    /// The run in flight with this id.
    pub fn live(&self, id: &RunId) -> Option<Arc<LiveRun>> {
        self.inner.registry.get(id)
    }

    /// A run's summary: the store's.
    pub async fn get(&self, id: &RunId) -> Result<RunSummary, StoreError> {
        self.inner.store.get_run(id).await
    }

    /// Runs that match, newest first.
    pub async fn list(&self, query: &RunQuery) -> Result<Vec<RunSummary>, StoreError> {
        self.inner.store.list_runs(query).await
    }

    /// The result object of a finished run, as `fabric run --json` prints it: the finish
    /// payload's fields plus `_meta`.
    pub fn result_object(&self, outcome: &RunOutcome) -> Value {
        let meta = json!({
            "run_id": outcome.run_id,
            "status": outcome.status,
            "reason": outcome.reason,
            "specialist_ids": outcome.specialist_ids,
            "workspace": outcome.workspace,
            "runlog": self.inner.store.runlog_path(&outcome.run_id),
            "model_key": outcome.model_key,
            "model": outcome.model,
            "steps": outcome.steps,
            "usage": outcome.usage,
            "routing": outcome.routing,
            "model_reason": outcome.model_reason,
        });
        let mut meta = meta;
        if let (Some(changes), Some(map)) = (&outcome.changes, meta.as_object_mut()) {
            map.insert("changes".to_owned(), json!(changes));
        }
        let mut object = match &outcome.payload {
            Value::Object(map) => map.clone(),
            _ => serde_json::Map::new(),
        };
        object.insert("_meta".to_owned(), meta);
        Value::Object(object)
    }

    /// Stops starting runs and cancels those in flight (preparing or executing, and any
    /// submitted later), without waiting.
    pub fn begin_shutdown(&self) {
        if self.inner.suspend_on_shutdown {
            // Before the cancellation: the runs stop without recording an end.
            self.inner.suspended.store(true, Ordering::SeqCst);
        }
        self.inner.shutting_down.store(true, Ordering::SeqCst);
        self.inner.registry.cancel_all();
        self.inner.tracker.close();
    }

    /// Stops starting runs, cancels those in flight and waits up to `grace` for them to
    /// record their end. Returns whether all of them did.
    pub async fn shutdown(&self, grace: Duration) -> bool {
        self.begin_shutdown();
        let ended = tokio::time::timeout(grace, self.inner.tracker.wait())
            .await
            .is_ok();
        // The store's index catches up with the runlogs before the process exits.
        self.inner.store.flush().await;
        ended
    }

    /// Whether shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.shutting_down.load(Ordering::SeqCst)
    }

    /// Waits until every run task has ended (after [`RunService::begin_shutdown`]).
    pub async fn drained(&self) {
        self.inner.tracker.wait().await;
    }
}

/// One run's task: prepare, create, execute, always end.
struct RunTask {
    service: RunService,
    live: Arc<LiveRun>,
    submission: Submission,
    /// Held until the run has ended, so the in-flight limit counts this run.
    _permit: Option<OwnedSemaphorePermit>,
}

impl RunTask {
    /// The run's task, start to end. `self` comes boxed: an async fn keeps its arguments
    /// twice (as given and as moved into its body), and inline that was 1 KiB of every run's
    /// task (issue #45).
    async fn run(
        self: Box<Self>,
        prepared_tx: oneshot::Sender<Result<(), ServiceError>>,
        done_tx: oneshot::Sender<Done>,
    ) {
        let id = self.live.id().clone();
        // The arms that end before the run executes, or are rare, are boxed: inline, the
        // largest of them sized the task of every run for its whole life (issue #45: 3 KiB
        // a run in flight).
        if let Some(queue) = self.remote_queue() {
            let result = Box::pin(self.remote(queue, prepared_tx))
                .await
                .map(Box::new);
            self.end(&id, result, done_tx);
            return;
        }
        let started = match &self.submission.resume {
            Some(_) => Box::pin(self.reopen()).await,
            None => Box::pin(self.start())
                .await
                .map(|(run, prepared, log)| Started::Ready {
                    run,
                    prepared,
                    log,
                    history: None,
                }),
        };
        // Boxed: the outcome is held across the store's flush, and inline its room would be
        // kept in the task for the run's whole life (384 bytes, issue #45).
        let result = match started {
            Err(error) => {
                let _ = prepared_tx.send(Err(error.clone()));
                Err(error)
            }
            Ok(Started::Ended(outcome)) => {
                let _ = prepared_tx.send(Ok(()));
                self.service.inner.store.flush().await;
                Ok(outcome)
            }
            Ok(Started::Ready {
                run,
                prepared,
                log,
                history,
            }) => {
                let _ = prepared_tx.send(Ok(()));
                let result = self
                    .execute(run, prepared, log, history)
                    .await
                    .map(Box::new);
                // The engine never waits for the store's index (ADR-043); its submitter does,
                // once: a run whose outcome was returned is listed with its end.
                self.service.inner.store.flush().await;
                if let Some(hook) = &self.service.inner.on_end {
                    // On the service's tracker, so a draining shutdown waits for it too.
                    let (hook, id) = (Arc::clone(hook), id.clone());
                    self.service
                        .inner
                        .tracker
                        .spawn(async move { hook.run_ended(id).await });
                }
                result
            }
        };
        self.end(&id, result, done_tx);
    }

    /// The run leaves: its followers are told, the registry forgets it, its submitter gets
    /// the outcome.
    fn end(&self, id: &RunId, result: Done, done_tx: oneshot::Sender<Done>) {
        if let Err(error) = &result {
            // What the caller can fix (a request, a model server to start, a budget) is told
            // to it as the error; only the fabric's own failures are worth a warning.
            if !error.code().is_the_fabrics() {
                tracing::debug!(run_id = %id, %error, "run ended with an error for the caller");
            } else {
                tracing::warn!(run_id = %id, %error, "run ended inside the fabric");
            }
        }
        // A run that waits for a person has not ended either (issue #42): its followers'
        // streams end at its `input_required`, with no `run_failed` made up for them.
        let waits = matches!(&result, Ok(outcome) if outcome.status == fabric_domain::RunStatus::InputRequired);
        if waits || (result.is_err() && self.service.inner.suspended.load(Ordering::SeqCst)) {
            // Suspended at shutdown, not ended: the next start continues it.
            self.live.suspend();
        } else {
            self.live
                .finish(result.as_ref().err().map(ToString::to_string).as_deref());
        }
        self.service.inner.registry.remove(id);
        for sink in &self.service.inner.sinks {
            sink.forget(id);
        }
        // Nobody may be waiting (POST /runs, or a client that went away): that is fine.
        let _ = done_tx.send(result);
    }

    /// The run's log, refusing writes once the service suspends its runs.
    pub(super) fn suspendable(&self, log: Box<dyn RunLog>) -> Arc<dyn RunLog> {
        Arc::new(Suspendable {
            inner: log,
            suspended: Arc::clone(&self.service.inner.suspended),
        })
    }

    /// Every event to the live run and to the submitter's observer.
    fn observer(&self) -> Tee<'_> {
        Tee {
            live: self.live.as_ref(),
            sinks: &self.service.inner.sinks,
            extra: self.submission.observer.as_deref(),
            output: Arc::new(tee::LiveOutput {
                live: Arc::clone(&self.live),
                extra: self.submission.observer.clone(),
            }),
        }
    }

    /// Preparation, cancellable, then the run in the store.
    async fn start(&self) -> Result<(NewRun, Box<dyn Runnable>, Arc<dyn RunLog>), ServiceError> {
        let inner = &self.service.inner;
        let context = PrepareContext {
            children: Arc::new(children::ServiceChildren(self.service.clone())),
        };
        let cancel = self.live.cancel_token();
        let mut request = self.submission.request.clone();
        // A run that continues another takes its defaults and its conversation (issue #42).
        let continuation = self.service.continuation(&mut request).await?;
        let mut prepared = tokio::select! {
            prepared = inner.preparer.prepare(request.clone(), &context) => prepared?,
            () = cancel.cancelled() => {
                return Err(if self.service.is_shutting_down() {
                    ServiceError::ShuttingDown
                } else {
                    ServiceError::Cancelled
                });
            }
        };
        if let Some(parent) = &self.submission.parent {
            prepared.adopt(parent.lineage.clone());
        }
        if let Some(c) = &continuation {
            prepared.inherit(c.inherited.clone());
        }
        // A project's worktree is made before the run exists: a path that is no repository
        // is the caller's mistake, answered as such, with no run left behind.
        let top = self.submission.parent.is_none();
        let mut versioned = self
            .open_project(&request, continuation.as_ref(), top)
            .await?;
        let run = match inner.store.create_run(self.live.id().clone()).await {
            Ok(run) => run,
            Err(e) => {
                // The earlier run's own branch, which a continued run works on, stays.
                let own = continuation.as_ref().is_none_or(|c| c.fork);
                if let Some(versioned) = versioned.take().filter(|_| own) {
                    let _ = versioned.handle().discard().await;
                }
                return Err(ServiceError::Store(e));
            }
        };
        let log = self.suspendable(run.log);
        if let Some(c) = continuation.as_ref().filter(|c| c.workspace.is_none())
            && let Err(e) = conversation::copy_files(c.files.clone(), run.workspace.clone()).await
        {
            let e = ServiceError::from(Fault::Copy {
                from: c.files.clone(),
                detail: e.to_string(),
            });
            remote::record_end_before_start(log.as_ref(), self.live.id(), &e).await;
            return Err(e);
        }
        let workspace = match &self.submission.parent {
            Some(parent) if parent.share_workspace || prepared.shares_parent_workspace() => {
                parent.workspace.clone()
            }
            _ => run.workspace,
        };
        if let (Some(v), None, true) = (&inner.versioning, &versioned, top)
            && v.policy.scratch
        {
            match v.scratch(self.live.id(), &workspace).await {
                Ok(scratch) => versioned = Some(scratch),
                Err(e) => {
                    remote::record_end_before_start(log.as_ref(), self.live.id(), &e).await;
                    return Err(e);
                }
            }
        }
        let run = NewRun {
            id: run.id,
            workspace: versioned
                .as_ref()
                .map_or(workspace, |v| v.dir().to_path_buf()),
            log: Box::new(SharedLog(Arc::clone(&log))),
            versioned: versioned.map(Arc::new),
        };
        Ok((run, prepared, log))
    }

    /// The worktree of a run on a project: its own, or for a run that continues another the
    /// earlier run's branch, or a fork of it (issue #42).
    async fn open_project(
        &self,
        request: &TaskRequest,
        continuation: Option<&conversation::Continuation>,
        top: bool,
    ) -> Result<Option<crate::versioned::RunWorkspace>, ServiceError> {
        let inner = &self.service.inner;
        let earlier = continuation.and_then(|c| c.workspace.as_ref().map(|w| (c, w)));
        let (Some(project), true) = (&request.project, top) else {
            return Ok(None);
        };
        let Some(v) = &inner.versioning else {
            return match earlier {
                Some(_) => Err(InvalidRequest::NoVersioning.into()),
                None => Ok(None),
            };
        };
        Ok(Some(match earlier {
            Some((c, recorded)) => v.continued(self.live.id(), c, recorded, project).await?,
            None => v.project(self.live.id(), project).await?,
        }))
    }

    async fn execute(
        &self,
        run: NewRun,
        prepared: Box<dyn Runnable>,
        log: Arc<dyn RunLog>,
        history: Option<Box<RunHistory>>,
    ) -> Result<RunOutcome, ServiceError> {
        let observer = self.observer();
        observer.on_prepared(&prepared.notes());
        let mut prepared = prepared;
        // A child run asks no one: its parent's model is who it answers to.
        if self.submission.parent.is_none() {
            prepared.attend(Arc::new(attend::InboxPerson::new(
                Arc::clone(&self.service.inner.store),
                self.live.id().clone(),
                self.submission.when_asked.clone(),
            )));
        }
        let cancel = self.live.cancel_token();
        let running = match history {
            Some(history) => prepared.resume(run, *history, &observer, cancel),
            None => prepared.run(run, &observer, cancel),
        };
        match AssertUnwindSafe(running).catch_unwind().await {
            Ok(result) => result.map_err(ServiceError::from),
            Err(panic) => {
                let text = panic_text(panic.as_ref()).to_owned();
                let reason = format!("the run panicked: {text}");
                // Boxed: rare, and inline it sized every run's task (issue #45).
                Box::pin(record_failure(
                    &observer,
                    self.live.as_ref(),
                    log.as_ref(),
                    &reason,
                ))
                .await;
                Err(ServiceError::Panicked { message: text })
            }
        }
    }
}

/// How a run's task got going.
enum Started {
    /// Prepared, in the store, ready to execute (or to continue, with its history).
    Ready {
        run: NewRun,
        prepared: Box<dyn Runnable>,
        log: Arc<dyn RunLog>,
        history: Option<Box<RunHistory>>,
    },
    /// A run that could not be continued, ended `interrupted` (boxed: an outcome is large).
    Ended(Box<RunOutcome>),
}

/// Records the `run_failed` a run could not record itself: runlog first, then watchers.
async fn record_failure(observer: &Tee<'_>, live: &LiveRun, log: &dyn RunLog, reason: &str) {
    let Some(event) = live.failure_event(reason) else {
        return;
    };
    if let Err(e) = log.append(&event).await {
        tracing::error!(run_id = %live.id(), error = %e, "cannot record the run's failure");
    }
    observer.on_event(&event).await;
}

/// The message of a panic payload (`panic!` gives a `&str` or a `String`).
fn panic_text(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}

/// A run's log that stops writing when the service suspends its runs at shutdown.
struct Suspendable {
    inner: Box<dyn RunLog>,
    suspended: Arc<AtomicBool>,
}

#[async_trait]
impl RunLog for Suspendable {
    async fn append(&self, event: &RunEvent) -> Result<(), StoreError> {
        if self.suspended.load(Ordering::SeqCst) {
            return Err(StoreError::Suspended);
        }
        self.inner.append(event).await
    }
}

/// The run's log, shared with its task so the task can still record the end after a panic.
struct SharedLog(Arc<dyn RunLog>);

#[async_trait]
impl RunLog for SharedLog {
    async fn append(&self, event: &RunEvent) -> Result<(), StoreError> {
        self.0.append(event).await
    }
}

#[cfg(test)]
mod tests;
