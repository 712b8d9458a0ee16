//! The run queue (`src/queue.rs`) on a real PostgreSQL (issue #27): claim order, `SKIP
//! LOCKED` under concurrent claimers, lease expiry, failures counted toward the three-failures
//! rule, hand-back, and the fence on a claimed run's event insert, alone, refusing a stale
//! worker. The queue is PostgreSQL's only: on SQLite every call is refused with the fix.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{Script, TestStore, events};
use fabric_core::{ClaimedRun, Release, RunQueue, StoreError, new_run_id};
use fabric_domain::{RunEvent, RunId};
use fabric_store_fs::RUNLOG_FILE;
use fabric_store_sql::SqlStore;
use serde_json::json;
use sqlx::Connection;

const LONG: Duration = Duration::from_secs(300);

async fn enqueue(store: &SqlStore, id: &RunId) {
    assert!(
        store
            .enqueue(id, &json!({"prompt": "write hello world"}), None)
            .await
            .unwrap()
    );
}

/// A run enqueued, claimed by worker `a` for `lease` and opened for writing, with the
/// events of a scripted run to write: the claim, the open run, the events.
async fn opened(
    store: &SqlStore,
    lease: Duration,
) -> (ClaimedRun, fabric_core::NewRun, Vec<RunEvent>) {
    let id = new_run_id();
    enqueue(store, &id).await;
    let claimed = store.claim("a", lease).await.unwrap().unwrap();
    let run = store.open_claimed(&id, claimed.fence, true).await.unwrap();
    let script = events(&id, &Script::default());
    (claimed, run, script)
}

/// Claims by `worker` until one is granted: the positive sign that a lease has run out
/// (polling on the database's clock, not sleeping the lease on ours); how long it took.
async fn claim_when_expired(store: &SqlStore, worker: &str) -> (ClaimedRun, Duration) {
    claim_for_when_expired(store, worker, LONG).await
}

/// [`claim_when_expired`] with a claim of `lease`.
async fn claim_for_when_expired(
    store: &SqlStore,
    worker: &str,
    lease: Duration,
) -> (ClaimedRun, Duration) {
    let started = Instant::now();
    loop {
        if let Some(claimed) = store.claim(worker, lease).await.unwrap() {
            return (claimed, started.elapsed());
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the lease never ran out"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `seq`s the events table holds for run `id`, read on a connection of its own.
async fn stored_seqs(t: &TestStore, id: &RunId) -> Vec<i64> {
    let mut conn = sqlx::PgConnection::connect(t.url.as_deref().unwrap())
        .await
        .unwrap();
    let seqs: Vec<(i64,)> = sqlx::query_as("SELECT seq FROM events WHERE run_id = $1 ORDER BY seq")
        .bind(id.as_str())
        .fetch_all(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    seqs.into_iter().map(|(s,)| s).collect()
}

fn runlog_seqs(t: &TestStore, id: &RunId) -> Vec<u64> {
    let text =
        std::fs::read_to_string(t.root().join("runs").join(id.as_str()).join(RUNLOG_FILE)).unwrap();
    text.lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

/// Issue #27: a worker paused past its lease, whose run another worker has claimed (and
/// opened) but not yet written to, tries its next event. Its `seq` is free, nothing renews
/// here and the runlog file comes second: only the fence in the insert can refuse it. It is
/// refused, and neither the events table nor the runlog has it; the new owner's write at
/// the same `seq` goes in.
#[cfg_attr(
    fabric_no_postgres,
    ignore = "needs PostgreSQL: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_27_the_fence_alone_refuses_a_stale_worker_s_insert() {
    let Some(t) = common::postgres().await else {
        return;
    };
    // Two workers: two processes, two stores on the one database.
    let (a, b) = (&t.store, t.reopen().await);
    let (stale, run, script) = opened(a, Duration::from_millis(300)).await;
    let id = stale.id.clone();
    for event in &script[..3] {
        run.log.append(event).await.unwrap();
    }
    // Worker a stalls; its lease runs out and b takes the run over.
    let (taken, _) = claim_when_expired(&b, "b").await;
    assert_eq!((&taken.id, taken.lease_expired), (&id, true));
    assert_eq!(taken.fence, stale.fence + 1);
    let new = b.open_claimed(&id, taken.fence, false).await.unwrap();
    // a wakes and writes its next event, at the `seq` nobody has written yet.
    match run.log.append(&script[3]).await {
        Err(StoreError::Fenced { run, fence }) => {
            assert_eq!((run, fence), (id.clone(), stale.fence));
        }
        other => panic!("the stale worker's insert was not refused: {other:?}"),
    }
    assert_eq!(stored_seqs(&t, &id).await, [0, 1, 2]);
    assert_eq!(runlog_seqs(&t, &id), [0, 1, 2]);
    // The seq was free: the current owner's write there goes in.
    new.log.append(&script[3]).await.unwrap();
    assert_eq!(stored_seqs(&t, &id).await, [0, 1, 2, 3]);
    assert_eq!(runlog_seqs(&t, &id), [0, 1, 2, 3]);
    b.close().await;
}

/// Writes `event` of run `id` into the events table as the store's insert does, on a
/// connection of its own: what a try that committed before its reply was lost leaves.
async fn insert_directly(t: &TestStore, id: &RunId, event: &RunEvent) {
    let mut conn = sqlx::PgConnection::connect(t.url.as_deref().unwrap())
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO events (run_id, seq, ts, kind, step, tool, line) VALUES ($1, $2, $3, $4, $5, NULL, $6)",
    )
    .bind(id.as_str())
    .bind(i64::try_from(event.seq).unwrap())
    .bind(event.ts)
    .bind(event.kind().as_str())
    .bind(event.step.map(i64::from))
    .bind(serde_json::to_string(event).unwrap())
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
}

/// Issue #27: a claimed run's write whose reply was lost (the database restarting after
/// it committed) is retried; the retry inserts nothing, finds its own line at its `seq` and
/// goes on, writing the runlog line once. A different line at that `seq` (another writer's)
/// is refused.
#[cfg_attr(
    fabric_no_postgres,
    ignore = "needs PostgreSQL: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_27_a_retried_write_finds_its_own_line_after_a_lost_reply() {
    let Some(t) = common::postgres().await else {
        return;
    };
    let s = &t.store;
    let (claimed, run, script) = opened(s, LONG).await;
    let id = claimed.id;
    run.log.append(&script[0]).await.unwrap();
    // The first try of seq 1 committed; its reply never came.
    insert_directly(&t, &id, &script[1]).await;
    run.log.append(&script[1]).await.unwrap();
    assert_eq!(stored_seqs(&t, &id).await, [0, 1]);
    assert_eq!(runlog_seqs(&t, &id), [0, 1]);
    // Someone else's line at seq 2 is not this writer's: refused.
    let mut other = script[2].clone();
    other.ts += 1.0;
    insert_directly(&t, &id, &other).await;
    assert!(matches!(
        run.log.append(&script[2]).await,
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(runlog_seqs(&t, &id), [0, 1]);
}

/// Issue #27: a claim and a stale worker's write that race are ordered by the share lock
/// the fence check takes on the run's queue row. A claim's update (fence + 1) is held open
/// in a transaction; the stale worker's insert, still under the old fence, must wait for
/// it rather than read the old fence and go in, and once the claim commits it is refused.
#[cfg_attr(
    fabric_no_postgres,
    ignore = "needs PostgreSQL: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_27_a_stale_write_racing_a_claim_waits_for_it_and_is_refused() {
    let Some(t) = common::postgres().await else {
        return;
    };
    let s = &t.store;
    let (stale, run, script) = opened(s, LONG).await;
    let id = stale.id;
    run.log.append(&script[0]).await.unwrap();
    // The claim, in flight: its row updated, not yet committed.
    let url = t.url.as_deref().unwrap();
    let mut claim = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut claim).await.unwrap();
    sqlx::query("UPDATE run_queue SET fence = fence + 1, owner = 'b' WHERE run_id = $1")
        .bind(id.as_str())
        .execute(&mut claim)
        .await
        .unwrap();
    let write = tokio::spawn(async move {
        let result = run.log.append(&script[1]).await;
        (run, result)
    });
    // The positive sign that the write waits on the claim: a session of this database
    // waiting for a lock (not a pause that a slow machine could outlast).
    let mut watch = sqlx::PgConnection::connect(url).await.unwrap();
    let started = Instant::now();
    loop {
        let waiting: (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&mut watch)
        .await
        .unwrap();
        if waiting.0 > 0 {
            break;
        }
        assert!(
            !write.is_finished(),
            "the stale write did not wait for the claim in flight"
        );
        assert!(started.elapsed() < Duration::from_secs(30), "no lock wait");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    sqlx::query("COMMIT").execute(&mut claim).await.unwrap();
    let (_run, result) = write.await.unwrap();
    assert!(
        matches!(result, Err(StoreError::Fenced { .. })),
        "{result:?}"
    );
    assert_eq!(stored_seqs(&t, &id).await, [0]);
    assert_eq!(runlog_seqs(&t, &id), [0]);
}

/// Issue #27: claims take the oldest enqueued run first, by the time it was enqueued (not by
/// its id), and none once all are held.
#[cfg_attr(
    fabric_no_postgres,
    ignore = "needs PostgreSQL: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_27_claims_take_the_oldest_run_first() {
    let Some(t) = common::postgres().await else {
        return;
    };
    let s = &t.store;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(new_run_id());
        // Ids are minted from the clock; keep them apart so their order is their minting's.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Enqueued in the reverse of the ids' order.
    ids.reverse();
    for id in &ids {
        enqueue(s, id).await;
    }
    let mut claimed = Vec::new();
    while let Some(run) = s.claim("w", LONG).await.unwrap() {
        assert!(!run.lease_expired);
        claimed.push(run.id);
    }
    assert_eq!(claimed, ids);
}

/// Issue #27: twelve claimers on three stores (three worker processes), all at once, over
/// twenty runs: each run is granted exactly once (`FOR UPDATE SKIP LOCKED`), and every run
/// is granted.
#[cfg_attr(
    fabric_no_postgres,
    ignore = "needs PostgreSQL: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issue_27_concurrent_claimers_never_get_the_same_run() {
    let Some(t) = common::postgres().await else {
        return;
    };
    let mut ids = BTreeSet::new();
    for _ in 0..20 {
        let id = new_run_id();
        enqueue(&t.store, &id).await;
        ids.insert(id);
    }
    let stores = [t.store.clone(), t.reopen().await, t.reopen().await];
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(12));
    let mut claimers = Vec::new();
    for n in 0..12 {
        let store = stores[n % 3].clone();
        let start = std::sync::Arc::clone(&start);
        claimers.push(tokio::spawn(async move {
            start.wait().await;
            let mut got = Vec::new();
            while let Some(run) = store.claim(&format!("w{n}"), LONG).await.unwrap() {
                got.push(run.id);
            }
            got
        }));
    }
    let mut granted = Vec::new();
    for claimer in claimers {
        granted.extend(claimer.await.unwrap());
    }
    let distinct: BTreeSet<RunId> = granted.iter().cloned().collect();
    assert_eq!(
        granted.len(),
        distinct.len(),
        "a run granted twice: {granted:?}"
    );
    assert_eq!(distinct, ids);
}

/// Issue #27: a held lease keeps the run from other claimers, renewing it keeps it held;
/// once it runs out the run is claimable again, with a fence one higher, reported as a
/// takeover, and the former owner's renewal is no longer kept.
#[cfg_attr(
    fabric_no_postgres,
    ignore = "needs PostgreSQL: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_27_an_expired_lease_is_claimable_again() {
    let Some(t) = common::postgres().await else {
        return;
    };
    let s = &t.store;
    let id = new_run_id();
    enqueue(s, &id).await;
    let lease = Duration::from_millis(800);
    let first = s.claim("a", lease).await.unwrap().unwrap();
    assert_eq!((first.fence, first.lease_expired), (1, false));
    assert!(s.claim("b", LONG).await.unwrap().is_none(), "held");
    let kept = s
        .renew("a", &[(id.clone(), first.fence)], lease)
        .await
        .unwrap();
    assert!(kept[0].kept);
    let renewed_at = Instant::now();
    let (second, _) = claim_when_expired(s, "b").await;
    // Not before the renewed lease ran out.
    assert!(renewed_at.elapsed() >= lease, "{:?}", renewed_at.elapsed());
    assert_eq!(
        (
            &second.id,
            second.fence,
            second.lease_expired,
            second.attempts
        ),
        (&id, 2, true, 2)
    );
    let lost = s
        .renew("a", &[(id.clone(), first.fence)], lease)
        .await
        .unwrap();
    assert!(!lost[0].kept);
    assert!(s.claim("c", LONG).await.unwrap().is_none(), "b holds it");
}

/// Issue #27: each failed claim is counted once, so the third claim after two failures
/// says so (the worker ends the run `failed` when that claim fails too: core's
/// `issue_26_takeovers_do_not_use_up_the_failure_allowance`); a takeover counts none.
#[cfg_attr(
    fabric_no_postgres,
    ignore = "needs PostgreSQL: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_27_failed_claims_are_counted_toward_the_third() {
    let Some(t) = common::postgres().await else {
        return;
    };
    let s = &t.store;
    let id = new_run_id();
    enqueue(s, &id).await;
    for failures in 0..3 {
        let run = s.claim("w", LONG).await.unwrap().unwrap();
        assert_eq!((&run.id, run.failures), (&id, failures));
        s.release(&id, run.fence, Release::Failed).await.unwrap();
    }
    let fourth = s.claim("w", LONG).await.unwrap().unwrap();
    assert_eq!((fourth.failures, fourth.attempts), (3, 4));
}

/// Issue #27: a run handed back (a worker stopping on SIGTERM) is claimable at once, long
/// before its lease would have run out, not as a takeover and not as a failure; a hand-back
/// under an older fence changes nothing.
#[cfg_attr(
    fabric_no_postgres,
    ignore = "needs PostgreSQL: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_27_a_handed_back_run_is_claimable_at_once() {
    let Some(t) = common::postgres().await else {
        return;
    };
    let s = &t.store;
    let id = new_run_id();
    enqueue(s, &id).await;
    let first = s.claim("a", LONG).await.unwrap().unwrap();
    s.release(&id, first.fence, Release::HandBack)
        .await
        .unwrap();
    let second = s.claim("b", LONG).await.unwrap().unwrap();
    assert_eq!(
        (
            &second.id,
            second.fence,
            second.lease_expired,
            second.failures
        ),
        (&id, first.fence + 1, false, 0)
    );
    // The stopped worker's late hand-back does not free b's run.
    s.release(&id, first.fence, Release::HandBack)
        .await
        .unwrap();
    assert!(s.claim("c", LONG).await.unwrap().is_none());
}

/// Issue #27: the queue on SQLite refuses with the fix rather than half working.
#[tokio::test]
async fn issue_27_the_queue_on_sqlite_is_refused_with_the_fix() {
    let t = common::sqlite().await;
    match t.store.claim("w", LONG).await {
        Err(StoreError::InvalidQuery(why)) => {
            assert!(why.contains("needs PostgreSQL"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

/// Issue #40: takeovers of a run that recorded no work (no model answer, no tool result)
/// since the claim before count as deaths of the run's own, in a row; a takeover after work
/// was recorded (a worker killed from outside mid-run) starts the count again, and a
/// hand-back keeps it.
#[cfg_attr(
    fabric_no_postgres,
    ignore = "needs PostgreSQL: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_40_takeovers_without_work_in_between_are_counted_as_deaths() {
    let Some(t) = common::postgres().await else {
        return;
    };
    let s = &t.store;
    let short = Duration::from_millis(300);
    let (first, run, script) = opened(s, short).await;
    let id = first.id.clone();
    assert_eq!(first.deaths, 0);
    // The first claim records its start, then its worker dies before any work.
    let answer = script
        .iter()
        .position(|e| ["llm_response", "tool_result", "tool_error"].contains(&e.kind().as_str()))
        .unwrap();
    for event in &script[..answer] {
        run.log.append(event).await.unwrap();
    }
    let mut deaths = Vec::new();
    let mut claimed = first;
    for _ in 0..2 {
        claimed = claim_after(s, short).await;
        deaths.push(claimed.deaths);
    }
    assert_eq!(deaths, [1, 2]);
    // This claim records work (a tool's result) before its worker dies: the count starts
    // again.
    let run = s.open_claimed(&id, claimed.fence, false).await.unwrap();
    run.log.append(&script[answer]).await.unwrap();
    let after_work = claim_after(s, short).await;
    assert_eq!((after_work.deaths, after_work.lease_expired), (0, true));
    let again = claim_after(s, LONG).await;
    assert_eq!(again.deaths, 1);
    // A hand-back is no death, and keeps the count.
    s.release(&id, again.fence, Release::HandBack)
        .await
        .unwrap();
    let handed = s.claim("next", LONG).await.unwrap().unwrap();
    assert_eq!((handed.deaths, handed.lease_expired), (1, false));
}

/// Claims for `lease` once the lease held runs out (polling on the database's clock).
async fn claim_after(store: &SqlStore, lease: Duration) -> ClaimedRun {
    claim_for_when_expired(store, "next", lease).await.0
}
