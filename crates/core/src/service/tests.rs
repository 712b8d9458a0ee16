//! The service with fakes: preparation that waits, fails or is cancelled; the in-flight
//! limit; a run that panics; shutdown during preparation.

use super::*;
use crate::fakes::{FakePreparer, MemStore, RunScript as Script};
use fabric_domain::{EventKind, RunStatus};
use std::sync::Mutex;
use tokio::sync::Notify;

/// Prepares `script`'s run after `gate` (when set) is notified; fails with `fail` when set.
struct Prep {
    script: Script,
    gate: Option<Arc<Notify>>,
    fail: Option<ServiceError>,
}

impl Prep {
    fn preparer(self) -> FakePreparer {
        let Prep { script, gate, fail } = self;
        let preparer = match fail {
            Some(error) => FakePreparer::failing(move |_| error.clone()),
            None => FakePreparer::running(script),
        };
        match gate {
            Some(gate) => preparer.gated(gate),
            None => preparer,
        }
    }
}

fn service(prep: Prep, limit: Option<usize>) -> (RunService, Arc<MemStore>) {
    let store = Arc::new(MemStore::per_run());
    let service = RunService::new(
        Arc::clone(&store) as Arc<dyn RunStore>,
        Arc::new(prep.preparer()),
        ServiceConfig {
            max_runs_in_flight: limit,
            ..ServiceConfig::default()
        },
    );
    (service, store)
}

fn prep(script: Script) -> Prep {
    Prep {
        script,
        gate: None,
        fail: None,
    }
}

fn request(prompt: &str) -> Submission {
    Submission::new(TaskRequest {
        prompt: prompt.to_owned(),
        ..TaskRequest::default()
    })
}

#[tokio::test]
async fn a_run_goes_through_preparation_to_its_outcome_and_leaves_the_registry() {
    let (service, store) = service(prep(Script::Complete), None);
    let mut handle = service
        .submit(request("do it"))
        .unwrap_or_else(|e| panic!("{e}"));
    let id = handle.id().clone();
    assert!(service.live(&id).is_some(), "registered from submit on");
    handle.prepared().await.unwrap_or_else(|e| panic!("{e}"));
    let outcome = handle.outcome().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.run_id, id);
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(
        store.kinds_of(&id),
        vec![EventKind::RunStart, EventKind::RunComplete]
    );
    assert!(service.registry().is_empty());
    assert_eq!(service.result_object(&outcome)["summary"], "done");
}

#[tokio::test]
async fn bad_requests_are_refused_before_a_run_exists() {
    let (service, store) = service(prep(Script::Complete), Some(1));
    let empty = service.submit(request("  ")).err();
    assert!(matches!(empty, Some(ServiceError::Invalid(_))), "{empty:?}");
    let mut unknown = request("x");
    unknown.request.specialists = vec!["nobody".to_owned()];
    let unknown = service.submit(unknown).err();
    assert!(
        matches!(unknown, Some(ServiceError::UnknownSpecialist { .. })),
        "{unknown:?}"
    );
    assert!(service.registry().is_empty());
    assert!(store.ids().is_empty());
}

#[tokio::test]
async fn a_preparation_failure_is_typed_and_stores_nothing() {
    let failing = Prep {
        fail: Some(ServiceError::ModelUnavailable(
            crate::ports::SetupError::ModelUnavailable("ollama is down".to_owned()),
        )),
        ..prep(Script::Complete)
    };
    let (service, store) = service(failing, None);
    let mut handle = service
        .submit(request("x"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        handle.prepared().await,
        Err(ServiceError::ModelUnavailable(
            crate::ports::SetupError::ModelUnavailable("ollama is down".to_owned())
        ))
    );
    assert!(matches!(
        handle.outcome().await,
        Err(ServiceError::ModelUnavailable(_))
    ));
    assert!(store.ids().is_empty());
    assert!(service.registry().is_empty());
}

#[tokio::test]
async fn a_run_is_cancellable_by_id_while_it_is_prepared_and_holds_its_slot() {
    let gate = Arc::new(Notify::new());
    let gated = Prep {
        gate: Some(Arc::clone(&gate)),
        ..prep(Script::Complete)
    };
    let (service, store) = service(gated, Some(1));
    let mut first = service
        .submit(request("slow"))
        .unwrap_or_else(|e| panic!("{e}"));
    // The first run holds the only slot while it is prepared.
    assert_eq!(
        service.submit(request("second")).err(),
        Some(ServiceError::TooManyRuns { limit: 1 })
    );
    assert!(service.cancel(first.id()));
    assert_eq!(first.prepared().await, Err(ServiceError::Cancelled));
    assert!(store.ids().is_empty());
    // The slot is free again once the cancelled run's task ended.
    for _ in 0..100 {
        if service.registry().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let again = service.submit(request("third"));
    assert!(again.is_ok(), "the slot was not freed");
    assert!(!service.cancel(&crate::new_run_id()), "unknown ids say so");
}

#[tokio::test]
async fn a_panicking_run_ends_failed_in_its_runlog_and_for_its_followers() {
    let (service, store) = service(prep(Script::Panic), None);
    let handle = service
        .submit(request("x"))
        .unwrap_or_else(|e| panic!("{e}"));
    let id = handle.id().clone();
    let live = Arc::clone(handle.live());
    let outcome = handle.outcome().await;
    assert_eq!(
        outcome.err(),
        Some(ServiceError::Panicked {
            message: "a bug in the run".to_owned()
        })
    );
    assert_eq!(
        store.kinds_of(&id),
        vec![EventKind::RunStart, EventKind::RunFailed]
    );
    assert_eq!(live.status(), RunStatus::Failed);
    assert!(service.registry().is_empty());
}

#[tokio::test]
async fn shutdown_abandons_preparations_and_refuses_new_runs() {
    let gated = Prep {
        gate: Some(Arc::new(Notify::new())),
        ..prep(Script::Complete)
    };
    let (service, _store) = service(gated, None);
    let mut handle = service
        .submit(request("x"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(service.shutdown(Duration::from_secs(5)).await);
    assert_eq!(handle.prepared().await, Err(ServiceError::ShuttingDown));
    assert_eq!(
        service.submit(request("late")).err(),
        Some(ServiceError::ShuttingDown)
    );
}

/// Issue #27: a run being continued that is cancelled again while it is prepared (Ctrl-C,
/// shutdown) records nothing: it is not ended, so it stays interrupted and can be
/// continued later.
#[tokio::test]
async fn issue_27_a_run_cancelled_while_prepared_again_stays_interrupted() {
    let gated = Prep {
        gate: Some(Arc::new(Notify::new())),
        ..prep(Script::Complete)
    };
    let (service, store) = service(gated, None);
    let id = crate::new_run_id();
    let start = fabric_domain::runlog::RunStart {
        run_id: id.clone(),
        prompt: "go on".to_owned(),
        model_key: "k".to_owned(),
        model: "m".to_owned(),
        model_reason: None,
        origin: fabric_domain::runlog::RunOrigin::default(),
        max_steps: 10,
        network_allowed: false,
        workspace: std::env::temp_dir(),
        sandbox: std::sync::Arc::default(),
        parent_run_id: None,
        depth: 0,
        context_id: None,
        continues: None,
        instructions: Vec::new(),
    };
    let new = store
        .create_run(id.clone())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let event = RunEvent::from_wire(
        0,
        1.0,
        EventKind::RunStart.as_str(),
        None,
        serde_json::to_value(&start).unwrap_or_else(|e| panic!("{e}")),
    );
    new.log
        .append(&event)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut handle = service
        .submit(Submission::resume(id.clone()))
        .unwrap_or_else(|e| panic!("{e}"));
    // Waits in preparation (its gate is never opened) until cancelled.
    for _ in 0..100 {
        if service.cancel(&id) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(handle.prepared().await, Err(ServiceError::Cancelled));
    assert_eq!(
        store.kinds_of(&id),
        [EventKind::RunStart],
        "nothing recorded"
    );
}

/// A queue for one worker's decisions: `started` says no the first time it is asked (the
/// claimed run starts fresh) and yes after; releases and cancellations are recorded; a
/// renewal runs `on_renew` (what happens here during its round trip) and keeps nothing.
/// What a worker runs over `store`: a queue that records into it, and the claimed store the
/// worker's service writes through.
fn worker_side(store: &Arc<MemStore>) -> (Arc<FakeQueue>, ClaimedStore) {
    let queue = Arc::new(FakeQueue::new(Arc::clone(store)));
    let claims = ClaimedStore::new(
        Arc::clone(store) as Arc<dyn RunStore>,
        Arc::clone(&queue) as Arc<dyn crate::ports::RunQueue>,
    );
    (queue, claims)
}

struct FakeQueue {
    store: Arc<MemStore>,
    asked_started: std::sync::atomic::AtomicUsize,
    releases: Mutex<Vec<(RunId, i64, crate::ports::Release)>>,
    on_renew: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl FakeQueue {
    fn new(store: Arc<MemStore>) -> Self {
        Self {
            store,
            asked_started: std::sync::atomic::AtomicUsize::new(0),
            releases: Mutex::new(Vec::new()),
            on_renew: Mutex::new(None),
        }
    }

    fn releases(&self) -> Vec<(RunId, i64, crate::ports::Release)> {
        self.releases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

fn not_here<T>() -> Result<T, StoreError> {
    Err(StoreError::InvalidQuery("not used by this test".to_owned()))
}

#[async_trait]
impl crate::ports::RunQueue for FakeQueue {
    async fn enqueue(&self, _: &RunId, _: &Value, _: Option<u64>) -> Result<bool, StoreError> {
        not_here()
    }
    async fn claim(
        &self,
        _: &str,
        _: Duration,
    ) -> Result<Option<crate::ports::ClaimedRun>, StoreError> {
        not_here()
    }
    async fn renew(
        &self,
        _: &str,
        runs: &[(RunId, i64)],
        _: Duration,
    ) -> Result<Vec<crate::ports::Renewal>, StoreError> {
        let hook = self
            .on_renew
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(hook) = hook {
            hook();
        }
        Ok(runs
            .iter()
            .map(|_| crate::ports::Renewal {
                kept: false,
                cancel_requested: false,
            })
            .collect())
    }
    async fn requeue(&self, _: &RunId) -> Result<bool, StoreError> {
        Ok(false)
    }
    async fn release(
        &self,
        id: &RunId,
        fence: i64,
        how: crate::ports::Release,
    ) -> Result<(), StoreError> {
        self.releases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id.clone(), fence, how));
        Ok(())
    }
    async fn cancel(&self, _: &RunId) -> Result<crate::ports::QueuedCancel, StoreError> {
        not_here()
    }
    async fn started(&self, _: &RunId) -> Result<bool, StoreError> {
        let asked = self
            .asked_started
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(asked > 0)
    }
    async fn open_claimed(&self, id: &RunId, _: i64, _: bool) -> Result<NewRun, StoreError> {
        self.store.create_run(id.clone()).await
    }
    async fn follow(
        &self,
        _: &RunId,
        _: Option<u64>,
    ) -> Result<tokio::sync::mpsc::Receiver<RunEvent>, StoreError> {
        not_here()
    }
    async fn signals(
        &self,
    ) -> Result<tokio::sync::mpsc::Receiver<crate::ports::QueueSignal>, StoreError> {
        not_here()
    }
}

fn worker_config() -> WorkerConfig {
    WorkerConfig {
        id: "w1".to_owned(),
        concurrency: 1,
        lease: Duration::from_secs(30),
        idle_poll: Duration::from_secs(1),
        max_deaths: 3,
        input_timeout: None,
    }
}

/// Issue #26: a run taken over twice after its workers were killed (its third claim) that
/// then fails once (PostgreSQL down for longer than a write retries) goes back to the
/// queue: it has failed once, not three times. It is ended `failed` at its third failure.
/// Before the fix the queue counted claims, so this run was ended `failed` at once.
#[tokio::test]
async fn issue_26_takeovers_do_not_use_up_the_failure_allowance() {
    for (failures, ended) in [(0, false), (1, false), (2, true)] {
        let failing = Prep {
            fail: Some(ServiceError::Store(unreachable_store(
                "postgres://db/fabric",
            ))),
            ..prep(Script::Complete)
        };
        let (service, store) = service(failing, None);
        let (queue, claims) = worker_side(&store);
        let id = crate::new_run_id();
        let claimed = crate::ports::ClaimedRun {
            id: id.clone(),
            request: json!({"prompt": "go on"}),
            fence: 3,
            attempts: 3 + failures,
            failures,
            deaths: 0,
            lease_expired: true,
        };
        super::worker::run_claimed(
            &service,
            queue.as_ref(),
            &claims,
            ("w1", 3, None),
            claimed,
            &|_| {},
        )
        .await;
        let how = if ended {
            crate::ports::Release::Done
        } else {
            crate::ports::Release::Failed
        };
        assert_eq!(
            queue.releases(),
            [(id.clone(), 3, how)],
            "after {failures} earlier failures"
        );
        if ended {
            assert_eq!(store.kinds_of(&id), [EventKind::RunFailed]);
            let events = store.read_events(&id).await.unwrap_or_default();
            let reason = events[0].end_reason().unwrap_or_default();
            assert!(reason.contains("failed on 3 workers"), "{reason}");
        } else {
            assert!(store.ids().is_empty(), "not ended: handed back");
        }
        assert_eq!(claims.fence_of(&id), None);
    }
}

/// Issue #40: a run taken over after its workers died with no work recorded in between
/// (`deaths`, counted by the queue) runs again below `max_deaths`, and is ended `failed`
/// with the reason, not run, at it. Before, takeovers were never counted, so a run that
/// kills its worker was claimed forever.
#[tokio::test]
async fn issue_40_a_run_that_keeps_stopping_its_workers_is_ended_failed() {
    for (deaths, ended) in [(2, false), (3, true)] {
        let (service, store) = service(prep(Script::Complete), None);
        let (queue, claims) = worker_side(&store);
        let id = crate::new_run_id();
        let claimed = crate::ports::ClaimedRun {
            id: id.clone(),
            request: json!({"prompt": "go"}),
            fence: 4,
            attempts: 4,
            failures: 0,
            deaths,
            lease_expired: true,
        };
        let reports = Mutex::new(Vec::new());
        let report = |r: &super::WorkerReport| {
            reports
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(r.clone())
        };
        super::worker::run_claimed(
            &service,
            queue.as_ref(),
            &claims,
            ("w1", 3, None),
            claimed,
            &report,
        )
        .await;
        assert_eq!(
            queue.releases(),
            [(id.clone(), 4, crate::ports::Release::Done)]
        );
        let events = store.read_events(&id).await.unwrap_or_default();
        let end = events
            .last()
            .and_then(|e| e.end_reason())
            .unwrap_or_default();
        if ended {
            assert_eq!(store.kinds_of(&id), [EventKind::RunFailed], "not run");
            let reason = end;
            assert!(
                reason.contains("taken over 3 times in a row from a worker that stopped"),
                "{reason}"
            );
            let seen = reports.lock().unwrap_or_else(|e| e.into_inner()).clone();
            assert!(
                matches!(
                    seen.last(),
                    Some(super::WorkerReport::Ended {
                        status: RunStatus::Failed,
                        ..
                    })
                ),
                "{seen:?}"
            );
        } else {
            assert_eq!(
                store.kinds_of(&id).last(),
                Some(&EventKind::RunComplete),
                "run"
            );
        }
    }
}

/// Issue #26: a run that ends normally while the renewal of its lease is on its way (the
/// renewal then finds it done, not running) was reported "lost the lease" 6 ms after it
/// completed. The renewal says so only of a run still held here; a run really taken over
/// is still reported, revoked and stopped.
#[tokio::test]
async fn issue_26_a_run_that_ends_during_its_renewal_is_not_reported_lost() {
    let store = Arc::new(MemStore::per_run());
    let queue = Arc::new(FakeQueue::new(Arc::clone(&store)));
    let claims = Arc::new(ClaimedStore::new(
        Arc::clone(&store) as Arc<dyn RunStore>,
        Arc::clone(&queue) as Arc<dyn crate::ports::RunQueue>,
    ));
    let cancelled = Mutex::new(Vec::new());
    let cancel = |id: &RunId| {
        cancelled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(id.clone());
    };
    let (ended, taken) = (crate::new_run_id(), crate::new_run_id());
    claims.hold(ended.clone(), 1);
    claims.hold(taken.clone(), 2);
    // During the round trip, `ended` completes: `run_claimed` lets go of its claim, then
    // marks it done in the queue, so its renewal is not kept.
    let during = Arc::clone(&claims);
    let done = ended.clone();
    *queue.on_renew.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(move || {
        assert!(during.drop_run(&done, 1));
    }));
    let lost = super::worker::renew_held(queue.as_ref(), &claims, &worker_config(), &cancel)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        lost,
        vec![taken.clone()],
        "only the run another worker took"
    );
    assert_eq!(
        *cancelled.lock().unwrap_or_else(|e| e.into_inner()),
        vec![taken]
    );
    assert!(claims.held().is_empty());
}

/// Issue #26: with `store.queue: true` and no worker, a run waited without a word. A run
/// still queued after the wait is said to be unclaimed, with what to do; one a worker holds
/// (or that this process cannot see) is not.
#[tokio::test]
async fn issue_26_a_run_no_worker_claimed_is_said_so() {
    use crate::ports::Liveness;
    let id = crate::new_run_id();
    let waited = Duration::from_secs(30);
    let notice = super::remote::unclaimed_notice(
        &MemStore::new().with_liveness(Liveness::Queued),
        &id,
        waited,
    )
    .await;
    let notice = notice.unwrap_or_default();
    assert!(
        notice.contains(&format!("no worker has claimed run {id} for 30 s"))
            && notice.contains("`fabric worker`"),
        "{notice}"
    );
    for other in [Liveness::Held, Liveness::Unknown, Liveness::Interrupted] {
        let notice =
            super::remote::unclaimed_notice(&MemStore::new().with_liveness(other), &id, waited)
                .await;
        assert_eq!(notice, None, "{other:?}");
    }
}

/// Issue #26: a worker said nothing of what it claimed, took over or finished. It reports
/// a claim (with the requested specialist, and whether a lease ran out) and the run's end,
/// with the time it took here; a run that failed and goes back to the queue is reported
/// handed back with the error.
#[tokio::test]
async fn issue_26_a_worker_reports_what_it_claims_and_how_it_ends() {
    let reports = Arc::new(Mutex::new(Vec::new()));
    let told = Arc::clone(&reports);
    let report = move |r: &super::WorkerReport| {
        told.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(r.clone());
    };
    let (running, store) = service(prep(Script::Complete), None);
    let (queue, claims) = worker_side(&store);
    let id = crate::new_run_id();
    let claimed = crate::ports::ClaimedRun {
        id: id.clone(),
        request: json!({"prompt": "go", "pack": ["engineering"]}),
        fence: 1,
        attempts: 1,
        failures: 0,
        deaths: 0,
        lease_expired: false,
    };
    super::worker::run_claimed(
        &running,
        queue.as_ref(),
        &claims,
        ("w1", 3, None),
        claimed,
        &report,
    )
    .await;
    let seen = reports.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        seen[0],
        super::WorkerReport::Claimed {
            id: id.clone(),
            specialists: vec!["engineering".to_owned()],
            lease_expired: false,
            resumed: false,
        }
    );
    assert!(
        matches!(&seen[1], super::WorkerReport::Ended { id: ended, status: RunStatus::Completed, .. } if *ended == id),
        "{seen:?}"
    );

    // A run taken over that fails here goes back to the queue, reported with the error.
    reports.lock().unwrap_or_else(|e| e.into_inner()).clear();
    let failing = Prep {
        fail: Some(ServiceError::Store(unreachable_store("the store"))),
        ..prep(Script::Complete)
    };
    let (failing, store) = service(failing, None);
    let (queue, claims) = worker_side(&store);
    let id = crate::new_run_id();
    let claimed = crate::ports::ClaimedRun {
        id: id.clone(),
        request: json!({"prompt": "go on"}),
        fence: 2,
        attempts: 2,
        failures: 0,
        deaths: 0,
        lease_expired: true,
    };
    super::worker::run_claimed(
        &failing,
        queue.as_ref(),
        &claims,
        ("w1", 3, None),
        claimed,
        &report,
    )
    .await;
    let seen = reports.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(
        matches!(
            &seen[0],
            super::WorkerReport::Claimed {
                lease_expired: true,
                ..
            }
        ),
        "{seen:?}"
    );
    assert!(
        matches!(&seen[1], super::WorkerReport::HandedBack { reason, .. } if reason.contains("cannot reach the store")),
        "{seen:?}"
    );
}

/// A store that cannot be reached, as a failing preparation reports it.
fn unreachable_store(store: &str) -> crate::ports::StoreError {
    crate::ports::StoreError::Database {
        store: store.to_owned(),
        detail: format!("cannot reach {store}"),
        fix: "start it".to_owned(),
    }
}
