//! Runs that execute on a worker (`fabric serve` with `store.queue: true`; docs/DURABILITY.md).
//!
//! A run submitted to such a service is enqueued, then followed: its events, written by
//! whichever worker claims it, arrive through the queue's feed (PostgreSQL `LISTEN/NOTIFY`,
//! no polling loop) into the run's [`LiveRun`], so every front end (SSE, `POST /run`, MCP)
//! serves it as if it ran here. A run another node enqueued is followed the same way the first
//! time someone asks for it ([`RunService::follow`]). Cancelling either asks the queue, which
//! ends a queued run at once and tells the worker of a running one.

use fabric_domain::runlog;
use fabric_domain::{EventPayload, RunEvent, RunId, RunStatus};
use serde_json::Value;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

use super::{RunService, RunTask, ServiceError};
use crate::execute::RunOutcome;
use crate::live::LiveRun;
use crate::ports::{Liveness, QueuedCancel, RunObserver, RunQueue, RunStore, StoreError};

impl RunTask {
    /// The queue, when this run is to be enqueued rather than run here: a new run a person
    /// or client submitted (child runs and continued runs always run where they are).
    pub(super) fn remote_queue(&self) -> Option<Arc<dyn RunQueue>> {
        let submission = &self.submission;
        if submission.parent.is_some() || submission.resume.is_some() {
            return None;
        }
        self.service.inner.queue.clone()
    }

    /// The refusal an enqueue answer means, if any: a full queue or a store that failed.
    fn enqueued(answer: Result<bool, StoreError>, limit: Option<u64>) -> Option<ServiceError> {
        match answer {
            Ok(true) => None,
            Ok(false) => Some(ServiceError::TooManyRuns {
                limit: usize::try_from(limit.unwrap_or_default()).unwrap_or(usize::MAX),
            }),
            Err(e) => Some(ServiceError::Store(e)),
        }
    }

    /// Enqueues the run, then follows it to its end.
    pub(super) async fn remote(
        &self,
        queue: Arc<dyn RunQueue>,
        prepared_tx: oneshot::Sender<Result<(), ServiceError>>,
    ) -> Result<RunOutcome, ServiceError> {
        let id = self.live.id().clone();
        let limit = self.service.inner.queue_limit;
        let refused = match self.submission.request.to_json() {
            Err(_) => Some(ServiceError::InvalidProject(super::ProjectError::NotUtf8 {
                path: self
                    .submission
                    .request
                    .project
                    .as_ref()
                    .map(|p| p.path.clone())
                    .unwrap_or_default(),
            })),
            Ok(request) => Self::enqueued(queue.enqueue(&id, &request, limit).await, limit),
        };
        if let Some(error) = refused {
            let _ = prepared_tx.send(Err(error.clone()));
            return Err(error);
        }
        let _ = prepared_tx.send(Ok(()));
        let store = Arc::clone(&self.service.inner.store);
        let every = self.service.inner.unclaimed_notice;
        let observer = self.submission.observer.as_deref();
        let tell = |notice: &str| {
            self.live.on_notice(notice);
            if let Some(observer) = observer {
                observer.on_notice(notice);
            }
        };
        tokio::select! {
            outcome = follow_into(queue, &self.live, observer, None) => outcome,
            never = say_when_unclaimed(store.as_ref(), &id, every, &tell) => match never {},
        }
    }
}

/// Warns, every time run `id` has waited `every` for a worker to claim it, that no worker
/// has (issue #26: with `store.queue: true` and no worker running, a run sat `running` with
/// no events and `POST /run` waited without a word): in the log, and through `tell` to the
/// people following it (the CLI, SSE streams). Once per wait: said again only after a
/// worker took it and it came back to the queue. Runs until dropped (the run's feed ended).
async fn say_when_unclaimed(
    store: &dyn RunStore,
    id: &RunId,
    every: Duration,
    tell: &(dyn Fn(&str) + Send + Sync),
) -> Infallible {
    let mut waiting_since = Instant::now();
    let mut said = false;
    loop {
        tokio::time::sleep(every).await;
        match unclaimed_notice(store, id, waiting_since.elapsed()).await {
            Some(notice) if !said => {
                tracing::warn!(run_id = %id, "{notice}");
                tell(&notice);
                said = true;
            }
            Some(_) => {}
            None => {
                said = false;
                waiting_since = Instant::now();
            }
        }
    }
}

/// What to say of run `id` after it `waited`, if it still waits for a worker.
pub(super) async fn unclaimed_notice(
    store: &dyn RunStore,
    id: &RunId,
    waited: Duration,
) -> Option<String> {
    (store.liveness(id).await == Liveness::Queued).then(|| {
        format!(
            "no worker has claimed run {id} for {} s: no worker is running, or every worker is busy; start one with `fabric worker`",
            waited.as_secs()
        )
    })
}

impl RunService {
    /// The run `id` as followers see it: the one in flight here, or, when this service
    /// enqueues runs, one that runs on a worker (followed from now on; `None` when it is not
    /// running anywhere).
    pub async fn follow(&self, id: &RunId) -> Option<Arc<LiveRun>> {
        if let Some(run) = self.live(id) {
            return Some(run);
        }
        let queue = self.inner.queue.clone()?;
        let summary = self.inner.store.get_run(id).await.ok()?;
        if summary.status != RunStatus::Running {
            return None;
        }
        let live = self.inner.registry.register(id.clone());
        let (service, run) = (self.clone(), Arc::clone(&live));
        self.inner.tracker.spawn(async move {
            let result = follow_into(queue, &run, None, None).await;
            run.finish(result.err().map(|e| e.to_string()).as_deref());
            service.inner.registry.remove(run.id());
        });
        Some(live)
    }
}

impl RunService {
    /// Follows run `id`, which a worker is to run (an answered run put back in the queue),
    /// as a run submitted here is followed: its handle.
    /// `answered`: the `seq` of the question that was answered: followed from after it.
    pub(super) fn follow_queued(
        &self,
        id: &RunId,
        queue: Arc<dyn RunQueue>,
        answered: Option<u64>,
    ) -> super::RunHandle {
        let live = self.inner.registry.register(id.clone());
        let (done_tx, done_rx) = oneshot::channel();
        let (service, run) = (self.clone(), Arc::clone(&live));
        self.inner.tracker.spawn(async move {
            let result = follow_into(queue, &run, None, answered).await;
            run.finish(result.as_ref().err().map(ToString::to_string).as_deref());
            service.inner.registry.remove(run.id());
            let _ = done_tx.send(result.map(Box::new));
        });
        super::RunHandle {
            id: id.clone(),
            live,
            prepared: None,
            done: done_rx,
        }
    }
}

/// Feeds the run's events from the queue into its live run (and `observer`) until its
/// terminal event; a cancellation of the live run is passed on to the queue once.
async fn follow_into(
    queue: Arc<dyn RunQueue>,
    live: &LiveRun,
    observer: Option<&dyn RunObserver>,
    answered: Option<u64>,
) -> Result<RunOutcome, ServiceError> {
    let id = live.id().clone();
    // An answered run is followed from after the question it was answered on: its live
    // run then shows it running, not waiting, until the worker's next event.
    let mut feed = queue
        .follow(&id, answered)
        .await
        .map_err(ServiceError::Store)?;
    let cancel = live.cancel_token();
    let mut asked = false;
    let mut start: Option<runlog::RunStart> = None;
    let mut recruitment: Option<runlog::Recruitment> = None;
    loop {
        let event = tokio::select! {
            event = feed.recv() => event,
            () = cancel.cancelled(), if !asked => {
                asked = true;
                match queue.cancel(&id).await {
                    // Nothing to wait for when it never started: the queue recorded its end,
                    // which arrives through the feed like any event.
                    Ok(QueuedCancel::BeforeStart | QueuedCancel::Requested | QueuedCancel::NotRunning) => {}
                    Err(e) => tracing::warn!(run_id = %id, error = %e, "cannot ask the queue to cancel a run"),
                }
                continue;
            }
        };
        let Some(event) = event else {
            return Err(super::Fault::FeedStopped { id }.into());
        };
        if let EventPayload::RunStart(started) = &event.payload {
            start = Some(started.clone());
        }
        if let EventPayload::Recruitment(recruited) = &event.payload {
            recruitment = Some(recruited.clone());
        }
        live.on_event(&event).await;
        if let Some(observer) = observer {
            observer.on_event(&event).await;
        }
        // A run that waits for a person lets go of its worker: followed up to its question.
        if event.kind().is_terminal() || event.kind() == fabric_domain::EventKind::InputRequired {
            return Ok(outcome_of(
                &id,
                start.as_ref(),
                recruitment.as_ref(),
                &event,
            ));
        }
    }
}

/// A run's outcome from its terminal event (and its `run_start`, for the workspace and
/// model).
fn outcome_of(
    id: &RunId,
    start: Option<&runlog::RunStart>,
    recruitment: Option<&runlog::Recruitment>,
    end: &RunEvent,
) -> RunOutcome {
    let status = crate::live::status_after(Some(end));
    let payload = end.run_end();
    let reason = end.end_reason().map(str::to_owned);
    RunOutcome {
        run_id: id.clone(),
        status,
        payload: payload
            .as_ref()
            .and_then(|p| p.result.clone())
            .unwrap_or(Value::Null),
        reason,
        workspace: start.map(|s| s.workspace.clone()).unwrap_or_default(),
        specialist_ids: payload
            .as_ref()
            .map(|p| p.specialist_ids.clone())
            .unwrap_or_default(),
        model_key: start.map(|s| s.model_key.clone()).unwrap_or_default(),
        model: start.map(|s| s.model.clone()).unwrap_or_default(),
        steps: payload.as_ref().map_or(0, |p| p.steps),
        changes: payload.as_ref().and_then(|p| p.workspace.clone()),
        usage: payload.map(|p| p.usage).unwrap_or_default(),
        routing: recruitment.map(crate::execute::RoutingNote::from),
        model_reason: start.and_then(|s| s.model_reason.clone()),
    }
}

/// The `run_failed` / `cancelled` of a queued run cancelled before it started, written by
/// the queue.
pub fn cancelled_before_start(id: &RunId) -> Result<RunEvent, fabric_domain::DomainError> {
    end_before_start(
        id,
        RunStatus::Cancelled,
        "the run was cancelled while it waited for a worker",
    )
}

/// The `run_failed` / `failed` at `seq` of a queued run a worker could not start or finish.
pub(super) fn failed_at(
    id: &RunId,
    seq: u64,
    reason: &str,
) -> Result<RunEvent, fabric_domain::DomainError> {
    let mut event = end_before_start(
        id,
        RunStatus::Failed,
        &format!("a worker could not run it: {reason}"),
    )?;
    event.seq = seq;
    Ok(event)
}

/// Ends a run that was created but could not start (its scratch history could not be
/// made): `run_failed` as its only event, so the store does not list it as running.
pub(super) async fn record_end_before_start(
    log: &dyn crate::ports::RunLog,
    id: &RunId,
    error: &super::ServiceError,
) {
    let event = match end_before_start(id, RunStatus::Failed, &error.to_string()) {
        Ok(event) => event,
        Err(e) => {
            tracing::error!(run_id = %id, error = %e, "cannot encode the end of a run that could not start");
            return;
        }
    };
    if let Err(e) = log.append(&event).await {
        tracing::error!(run_id = %id, error = %e, "cannot record the end of a run that could not start");
    }
}

fn end_before_start(
    id: &RunId,
    status: RunStatus,
    reason: &str,
) -> Result<RunEvent, fabric_domain::DomainError> {
    let end = runlog::RunEnd {
        run_id: id.clone(),
        status,
        specialist_ids: Vec::new(),
        task_force_mode: runlog::TaskForceShape::Single,
        steps: 0,
        usage: fabric_domain::Usage::default(),
        reason: Some(reason.to_owned()),
        result: None,
        workspace: None,
    };
    Ok(RunEvent {
        seq: 0,
        ts: crate::unix_now(),
        step: None,
        member: None,
        payload: end.into(),
    })
}
