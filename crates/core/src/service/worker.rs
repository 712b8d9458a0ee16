//! `fabric worker`: takes queued runs from the shared queue and runs them (docs/DURABILITY.md,
//! ADR-045).
//!
//! A worker claims the oldest ready run (queued, or whose lease ran out) when it has a free
//! slot, holds it under a lease it renews every third of the lease, and runs it through its
//! own [`RunService`] (built over a [`ClaimedStore`], so every write carries the run's
//! fence). A run that was started before (taken over from a worker that stopped) is
//! continued from its recorded events, like `fabric resume`. A renewal that finds the run
//! gone (another worker claimed it after this one stalled past its lease) stops the run here
//! without writing to it; the fence refuses any write that races that.

use fabric_domain::{RunId, RunStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use super::{ClaimedStore, RunService, ServiceError, Submission, TaskRequest};
use crate::ports::{ClaimedRun, QueueSignal, Release, RunQueue, StoreError};

/// How a worker works.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Its name in the queue (host, process and a random part).
    pub id: String,
    /// Runs at once.
    pub concurrency: usize,
    /// How long a claim holds without renewal.
    pub lease: Duration,
    /// How long to wait for work when the queue is empty, besides its notifications.
    pub idle_poll: Duration,
    /// Takeovers in a row with no work recorded in between ([`ClaimedRun::deaths`]) after
    /// which a run is ended `failed` instead of run again (`store.max_worker_deaths`).
    pub max_deaths: u32,
    /// How long a run waits for a person's answer before it ends `unanswered`
    /// (`server.input_timeout_s`); `None`: as long as it takes (issue #42).
    pub input_timeout: Option<Duration>,
}

/// What a worker did with a run, as it happens, for its process to tell (issue #26: a
/// worker said nothing of what it claimed, took over or finished). The library reports;
/// the binary prints.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerReport {
    /// It claimed a run: new or handed back (`lease_expired: false`), or taken over from a
    /// worker whose lease ran out. `resumed`: the run had started and is continued from its
    /// recorded events. `specialists`: who works on it, when known yet (a new run without
    /// `pack` is routed once it starts).
    Claimed {
        /// The run.
        id: RunId,
        /// Its specialists, as recorded or requested; empty when routing decides.
        specialists: Vec<String>,
        /// Taken from a worker whose lease ran out.
        lease_expired: bool,
        /// Continued from its recorded events rather than started.
        resumed: bool,
    },
    /// A run it ran ended here, its end recorded.
    Ended {
        /// The run.
        id: RunId,
        /// How it ended.
        status: RunStatus,
        /// How long it ran on this worker, from its claim.
        elapsed: Duration,
    },
    /// A run went back to the queue for another worker, without its end.
    HandedBack {
        /// The run.
        id: RunId,
        /// Why: this worker stops, or the error it met here.
        reason: String,
    },
}

/// Told each [`WorkerReport`].
pub type WorkerReporter = Arc<dyn Fn(&WorkerReport) + Send + Sync>;

/// One worker process's loop.
pub struct Worker {
    service: RunService,
    queue: Arc<dyn RunQueue>,
    claims: Arc<ClaimedStore>,
    config: WorkerConfig,
    report: WorkerReporter,
}

impl Worker {
    /// A worker over `service`, which must write through `claims`.
    pub fn new(
        service: RunService,
        queue: Arc<dyn RunQueue>,
        claims: Arc<ClaimedStore>,
        config: WorkerConfig,
    ) -> Self {
        Self {
            service,
            queue,
            claims,
            config,
            report: Arc::new(|_: &WorkerReport| {}),
        }
    }

    /// Tells `report` what the worker claims, takes over, finishes and hands back.
    pub fn reporting(mut self, report: WorkerReporter) -> Self {
        self.report = report;
        self
    }

    /// Claims and runs until `stop` is cancelled; then gives its runs back to the queue
    /// (another worker continues them) and returns.
    pub async fn run(&self, stop: CancellationToken) -> Result<(), ServiceError> {
        let slots = Arc::new(Semaphore::new(self.config.concurrency.max(1)));
        let signals = self.queue.signals().await.map_err(ServiceError::Store)?;
        let work = Arc::new(Notify::new());
        let listening = self.spawn_signals(signals, Arc::clone(&work));
        let renewing = self.spawn_renewal(stop.clone());
        loop {
            let permit = tokio::select! {
                permit = Arc::clone(&slots).acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break,
                },
                () = stop.cancelled() => break,
            };
            let claimed = match self.queue.claim(&self.config.id, self.config.lease).await {
                Ok(claimed) => claimed,
                Err(e) => {
                    tracing::warn!(worker = %self.config.id, error = %e, "cannot claim a run; retrying");
                    None
                }
            };
            let Some(claimed) = claimed else {
                drop(permit);
                // Woken by an enqueue, or after a while in any case (a lease may have run
                // out meanwhile).
                tokio::select! {
                    () = work.notified() => {}
                    () = tokio::time::sleep(self.config.idle_poll) => {}
                    () = stop.cancelled() => break,
                }
                continue;
            };
            let (service, queue, claims) = (
                self.service.clone(),
                Arc::clone(&self.queue),
                Arc::clone(&self.claims),
            );
            let worker = self.config.id.clone();
            let max_deaths = self.config.max_deaths;
            let input_timeout = self.config.input_timeout;
            let report = Arc::clone(&self.report);
            tokio::spawn(async move {
                run_claimed(
                    &service,
                    queue.as_ref(),
                    &claims,
                    (&worker, max_deaths, input_timeout),
                    claimed,
                    &*report,
                )
                .await;
                drop(permit);
            });
        }
        listening.abort();
        renewing.abort();
        // Runs in flight go back to the queue: first closed here (their logs refuse every
        // write, so the cancellation below records nothing), stopped (their tools killed),
        // then released, so the next worker never meets a tool of this one still running.
        let held = self.claims.revoke_all();
        self.service.begin_shutdown();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.service.drained()).await;
        for (id, fence) in held {
            self.claims.drop_run(&id, fence);
            match self.queue.release(&id, fence, Release::HandBack).await {
                Ok(()) => (self.report)(&WorkerReport::HandedBack {
                    id,
                    reason: "this worker stops".to_owned(),
                }),
                Err(e) => {
                    tracing::warn!(run_id = %id, error = %e, "cannot hand a run back to the queue; it is taken over when its lease runs out");
                }
            }
        }
        Ok(())
    }

    /// Passes on what the queue says as it says it, busy or not: a cancellation to the run it
    /// names, an enqueue to the claiming loop.
    fn spawn_signals(
        &self,
        mut signals: tokio::sync::mpsc::Receiver<QueueSignal>,
        work: Arc<Notify>,
    ) -> tokio::task::JoinHandle<()> {
        let service = self.service.clone();
        tokio::spawn(async move {
            while let Some(signal) = signals.recv().await {
                match signal {
                    QueueSignal::Cancel(id) => {
                        service.cancel(&id);
                    }
                    QueueSignal::Enqueued => work.notify_one(),
                }
            }
        })
    }

    /// Renews every held lease each third of the lease; stops the runs it lost, passes on
    /// cancellations.
    fn spawn_renewal(&self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let (service, queue, claims, config) = (
            self.service.clone(),
            Arc::clone(&self.queue),
            Arc::clone(&self.claims),
            self.config.clone(),
        );
        tokio::spawn(async move {
            let every = config.lease / 3;
            loop {
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    () = stop.cancelled() => return,
                }
                let cancel = |id: &RunId| {
                    service.cancel(id);
                };
                if let Err(e) = renew_held(queue.as_ref(), &claims, &config, &cancel).await {
                    tracing::warn!(worker = %config.id, error = %e, "cannot renew leases; retrying");
                }
            }
        })
    }
}

/// One round of renewals: renews every lease held, stops (through `cancel`) the runs it
/// lost and passes on cancellations; returns the runs lost.
///
/// The list of runs is taken before the round trip, so a run may end here meanwhile: it
/// marks itself done in the queue (after letting go of its claim), and its renewal then
/// finds it no longer running. Such a run was not lost: a renewal not kept counts only
/// while the run is still held with that fence, so "lost the lease" is said only of runs
/// another worker took (issue #26: a false alarm 6 ms after a run completed).
pub(super) async fn renew_held(
    queue: &dyn RunQueue,
    claims: &ClaimedStore,
    config: &WorkerConfig,
    cancel: &(dyn Fn(&RunId) + Sync),
) -> Result<Vec<RunId>, StoreError> {
    let held = claims.held();
    if held.is_empty() {
        return Ok(Vec::new());
    }
    let renewals = queue.renew(&config.id, &held, config.lease).await?;
    let mut lost = Vec::new();
    for ((id, fence), renewal) in held.iter().zip(renewals) {
        if !renewal.kept {
            // `run_claimed` lets go of its claim before it releases the run in the queue,
            // so a run released while its renewal was on the way is no longer held here.
            if claims.fence_of(id) != Some(*fence) {
                continue;
            }
            claims.revoke(id, *fence);
            claims.drop_run(id, *fence);
            cancel(id);
            tracing::warn!(worker = %config.id, run_id = %id, "lost the lease of this run (it stalled past its lease and another worker took it over): stopped it here without writing to it");
            lost.push(id.clone());
        } else if renewal.cancel_requested {
            cancel(id);
        }
    }
    Ok(lost)
}

/// Runs one claimed run to its end and marks it done, unless it was lost meanwhile; tells
/// `report` what it claimed and how that went. `worker`: its name, and the takeovers in a
/// row without work after which a run is ended `failed` (issue #40).
pub(super) async fn run_claimed(
    service: &RunService,
    queue: &dyn RunQueue,
    claims: &ClaimedStore,
    (worker, max_deaths, input_timeout): (&str, u32, Option<Duration>),
    claimed: ClaimedRun,
    report: &(dyn Fn(&WorkerReport) + Send + Sync),
) {
    let ClaimedRun {
        id,
        request,
        fence,
        attempts,
        failures,
        deaths,
        lease_expired,
    } = claimed;
    let since = Instant::now();
    claims.hold(id.clone(), fence);
    // Started before (a run taken over): continued from what it recorded. Asked of the
    // shared store, which a stopped worker wrote before its runlog file.
    let started = match queue.started(&id).await {
        Ok(started) => started,
        Err(e) => {
            tracing::warn!(worker, run_id = %id, error = %e, "cannot tell whether a claimed run started; handing it back");
            if claims.drop_run(&id, fence) {
                let _ = queue.release(&id, fence, Release::HandBack).await;
            }
            return;
        }
    };
    let (submission, specialists) = if started {
        let specialists = service.recorded_specialists(&id).await;
        (Submission::resume(id.clone()), specialists)
    } else {
        let request = TaskRequest::from_json(&request);
        let specialists = request.specialists.clone();
        (
            Submission {
                run_id: Some(id.clone()),
                ..Submission::new(request)
            },
            specialists,
        )
    };
    // A question waits in the store, the worker let go of (issue #42).
    let submission = submission.attended(super::WhenAsked::Wait {
        timeout: input_timeout,
    });
    tracing::info!(worker, run_id = %id, fence, attempts, failures, deaths, resumed = started, "claimed a run");
    report(&WorkerReport::Claimed {
        id: id.clone(),
        specialists,
        lease_expired,
        resumed: started,
    });
    // What to tell once the queue has it: how it ended, or why it went back.
    let (release, told) = if lease_expired && deaths >= max_deaths {
        end_poison_run(
            service,
            queue,
            (worker, deaths),
            (&id, fence, started),
            since,
        )
        .await
    } else {
        match run_here(
            service,
            queue,
            claims,
            (worker, failures),
            (&id, fence),
            submission,
            since,
        )
        .await
        {
            Some(ended) => ended,
            // Given up here: whoever gave it up deals with the queue.
            None => return,
        }
    };
    // The claim goes first, the queue second: a renewal on its way meanwhile then sees the
    // run is no longer held here (`renew_held`).
    if claims.drop_run(&id, fence) {
        match queue.release(&id, fence, release).await {
            Ok(()) => {
                if let Some(told) = told {
                    report(&told);
                }
            }
            Err(e) => {
                tracing::warn!(worker, run_id = %id, error = %e, "cannot mark a run done in the queue");
            }
        }
    }
}

/// Runs a claimed run here: how to release it and what to tell, or `None` when it was given
/// up here (lost to another worker, or handed back at shutdown).
async fn run_here(
    service: &RunService,
    queue: &dyn RunQueue,
    claims: &ClaimedStore,
    (worker, failures): (&str, u32),
    (id, fence): (&RunId, i64),
    submission: Submission,
    since: Instant,
) -> Option<(Release, Option<WorkerReport>)> {
    let outcome = match service.submit(submission) {
        Ok(handle) => handle.outcome().await,
        Err(e) => Err(e),
    };
    Some(match &outcome {
        Ok(outcome) => (
            Release::Done,
            Some(WorkerReport::Ended {
                id: id.clone(),
                status: outcome.status,
                elapsed: since.elapsed(),
            }),
        ),
        // A run that had ended before this claim (its worker stopped right after
        // recording the end) is simply done: nothing ended here.
        Err(ServiceError::AlreadyEnded { .. }) => (Release::Done, None),
        // Given up here (lost to another worker, or handed back at shutdown): whoever
        // gave it up deals with the queue.
        Err(_) if claims.is_revoked(id, fence) || claims.fence_of(id) != Some(fence) => {
            return None;
        }
        // Stopped here before it went on (shutdown): back to the queue, no failure.
        Err(ServiceError::ShuttingDown | ServiceError::Cancelled) => (
            Release::HandBack,
            Some(WorkerReport::HandedBack {
                id: id.clone(),
                reason: "this worker stops".to_owned(),
            }),
        ),
        Err(e) => {
            let release = end_or_hand_back(service, queue, id, fence, failures, worker, e).await;
            (
                release,
                Some(after_failure(release, id, since, e.to_string())),
            )
        }
    })
}

/// Claims of one run that may fail (end in an error of the run's own) before it is ended
/// `failed` rather than handed back. Takeovers after a worker stopped are not failures.
const MAX_FAILURES: u32 = 3;

/// A claimed run that stopped here without its end, for a reason of its own (a model that
/// cannot be used, a store that refused a write): one that never started, or whose failure
/// here is its last allowed one, is ended `failed` with the reason (so it is not claimed
/// again and again); any other goes back to the queue for another worker, this failure
/// counted. `failures`: those of earlier claims. Whether it started is asked again of the
/// shared store. Returns how to release it.
async fn end_or_hand_back(
    service: &RunService,
    queue: &dyn RunQueue,
    id: &RunId,
    fence: i64,
    failures: u32,
    worker: &str,
    error: &ServiceError,
) -> Release {
    let started = queue.started(id).await.unwrap_or(true);
    let failures = failures.saturating_add(1);
    if started && failures < MAX_FAILURES {
        tracing::warn!(worker, run_id = %id, %error, failures, "a claimed run stopped without its end; it goes back to the queue");
        return Release::Failed;
    }
    let reason = if started {
        format!("the run failed on {failures} workers in turn, the last time with: {error}")
    } else {
        error.to_string()
    };
    record_failed(service, queue, (id, fence), started, &reason, worker).await
}

/// A run taken over `deaths` times in a row from workers that stopped while holding it, with
/// no work recorded in between: ended `failed` with the reason rather than run again, for it
/// is most likely what stops them (issue #40: such a run looped across the fleet forever).
/// How to release it and what to tell.
async fn end_poison_run(
    service: &RunService,
    queue: &dyn RunQueue,
    (worker, deaths): (&str, u32),
    (id, fence, started): (&RunId, i64, bool),
    since: Instant,
) -> (Release, Option<WorkerReport>) {
    let reason = format!(
        "the run was taken over {deaths} times in a row from a worker that stopped while holding it (killed, crashed or out of memory) with no model answer or tool result recorded in between; it is most likely what stops them, so it is not run again (`store.max_worker_deaths`)"
    );
    tracing::warn!(worker, run_id = %id, deaths, "ending a run that stopped its workers");
    let release = record_failed(service, queue, (id, fence), started, &reason, worker).await;
    (release, Some(after_failure(release, id, since, reason)))
}

/// What a worker tells of a run that failed here: its end (`failed`, recorded), or that it
/// went back to the queue with `reason`.
fn after_failure(release: Release, id: &RunId, since: Instant, reason: String) -> WorkerReport {
    match release {
        Release::Done => WorkerReport::Ended {
            id: id.clone(),
            status: RunStatus::Failed,
            elapsed: since.elapsed(),
        },
        Release::HandBack | Release::Failed => WorkerReport::HandedBack {
            id: id.clone(),
            reason,
        },
    }
}

/// Records the end of a claimed run, `failed` with `reason` (its runlog made first when it
/// never `started`). Returns how to release it: done, or back to the queue as a failure when
/// the end could not be written.
async fn record_failed(
    service: &RunService,
    queue: &dyn RunQueue,
    (id, fence): (&RunId, i64),
    started: bool,
    reason: &str,
    worker: &str,
) -> Release {
    let written = async {
        let run = queue.open_claimed(id, fence, !started).await?;
        let seq = service.store().read_events(id).await?.len() as u64;
        let event = crate::service::remote::failed_at(id, seq, reason)
            .map_err(|e| crate::ports::StoreError::InvalidQuery(e.to_string()))?;
        run.log.append(&event).await
    }
    .await;
    match written {
        Ok(()) => Release::Done,
        Err(e) => {
            tracing::warn!(worker, run_id = %id, error = %e, "cannot record the end of a run that failed; it goes back to the queue");
            Release::Failed
        }
    }
}
