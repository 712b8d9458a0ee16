//! Faults, each with the message the user gets: a corrupt or locked SQLite file, a schema from
//! a newer fabric, PostgreSQL unreachable, and PostgreSQL dropping in the middle of a run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::time::{Duration, Instant};

use common::{Script, events, options};
use fabric_core::{RunCatalog, RunQuery, RunStore, StoreError, new_run_id};
use fabric_domain::RunStatus;
use fabric_store_sql::{SQLITE_FILE, SqlStore};
use sqlx::Connection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};

fn database_error(result: Result<SqlStore, StoreError>) -> (String, String, String) {
    match result {
        Err(StoreError::Database { store, detail, fix }) => (store, detail, fix),
        other => panic!("expected a database error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_corrupt_sqlite_file_says_move_it_aside_and_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(SQLITE_FILE), vec![0x5a_u8; 8192]).unwrap();
    let (store, detail, fix) =
        database_error(SqlStore::open_with(None, dir.path(), options()).await);
    assert!(
        store.starts_with("sqlite:") && store.ends_with(SQLITE_FILE),
        "{store}"
    );
    assert!(detail.contains("not a database"), "{detail}");
    assert!(
        fix.contains("move it aside") && fix.contains("fabric index rebuild"),
        "{fix}"
    );
}

#[tokio::test]
async fn a_locked_sqlite_file_is_reported_after_the_busy_timeout() {
    let dir = tempfile::tempdir().unwrap();
    SqlStore::open_with(None, dir.path(), options())
        .await
        .unwrap()
        .close()
        .await;
    // Another process holding an exclusive lock (a long write, a sqlite3 shell).
    let mut other = SqliteConnection::connect_with(
        &SqliteConnectOptions::new().filename(dir.path().join(SQLITE_FILE)),
    )
    .await
    .unwrap();
    sqlx::raw_sql("PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; INSERT INTO fabric_meta (key, value) VALUES ('lock', 'held');")
        .execute(&mut other)
        .await
        .unwrap();
    let started = Instant::now();
    let (_, detail, fix) = database_error(SqlStore::open_with(None, dir.path(), options()).await);
    assert!(detail.contains("locked"), "{detail}");
    assert!(fix.contains("busy timeout"), "{fix}");
    assert!(started.elapsed() < Duration::from_secs(10));
    drop(other);
}

#[tokio::test]
async fn a_schema_from_a_newer_fabric_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    SqlStore::open_with(None, dir.path(), options())
        .await
        .unwrap()
        .close()
        .await;
    let mut conn = SqliteConnection::connect_with(
        &SqliteConnectOptions::new().filename(dir.path().join(SQLITE_FILE)),
    )
    .await
    .unwrap();
    sqlx::raw_sql(
        "INSERT INTO fabric_schema (version, description, applied_at) VALUES (999, 'future', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    let (store, detail, fix) =
        database_error(SqlStore::open_with(None, dir.path(), options()).await);
    assert!(store.starts_with("sqlite:"));
    assert!(detail.contains("999"), "{detail}");
    assert!(fix.contains("upgrade fabric"), "{fix}");
}

#[cfg_attr(
    fabric_no_postgres,
    ignore = "needs PostgreSQL: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_schema_from_a_newer_fabric_is_refused() {
    let Some(t) = common::postgres().await else {
        return;
    };
    t.store.close().await;
    let url = t.url.clone().unwrap();
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(
        "INSERT INTO fabric_schema (version, description, applied_at) VALUES (999, 'future', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    let (store, detail, fix) =
        database_error(SqlStore::open_with(Some(&url), t.root(), options()).await);
    assert!(
        store.starts_with("postgres://postgres@127.0.0.1:"),
        "{store}"
    );
    assert!(detail.contains("999") && fix.contains("upgrade fabric"));
}

#[tokio::test]
async fn unreachable_postgres_names_host_and_port_and_never_the_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://fabric:s3cret@127.0.0.1:{port}/runs");
    let dir = tempfile::tempdir().unwrap();
    let result = SqlStore::open_with(Some(&url), dir.path(), options()).await;
    let message = result.as_ref().map(|_| ()).unwrap_err().to_string();
    let (store, detail, fix) = database_error(result);
    assert_eq!(store, format!("postgres://fabric@127.0.0.1:{port}/runs"));
    assert!(detail.contains(&format!("127.0.0.1:{port}")), "{detail}");
    assert!(
        fix.contains("start PostgreSQL") && fix.contains("FABRIC_STORE_URL"),
        "{fix}"
    );
    assert!(!message.contains("s3cret"), "{message}");
    // Not a postgres URL at all.
    let (_, detail, _) =
        database_error(SqlStore::open_with(Some("mysql://u:pw@h/db"), dir.path(), options()).await);
    assert!(!detail.contains("pw@"), "{detail}");
}

#[cfg_attr(
    fabric_no_postgres,
    ignore = "needs PostgreSQL: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_dropping_mid_run_does_not_fail_the_run_and_reindex_repairs_it() {
    let cluster = match fabric_test_support::PgCluster::start() {
        Ok(cluster) => cluster,
        Err(e) => {
            if std::env::var("FABRIC_REQUIRE_TEST_DEPS").as_deref() == Ok("1") {
                panic!("no PostgreSQL: {e}");
            }
            eprintln!("SKIPPED: PostgreSQL drop test: {e}; run scripts/install-test-deps.sh");
            return;
        }
    };
    let url = cluster.create_database().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = SqlStore::open_with(Some(&url), dir.path(), options())
        .await
        .unwrap();
    let new = store.create_run(new_run_id()).await.unwrap();
    let all = events(&new.id, &Script::default());
    for event in &all[..2] {
        new.log.append(event).await.unwrap();
    }
    store.flush().await;
    cluster.stop_server().unwrap();

    // The run goes on and ends: every append succeeds, quickly.
    let started = Instant::now();
    for event in &all[2..] {
        new.log.append(event).await.unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(store.read_events(&new.id).await.unwrap(), all);
    // The writer has tried (and failed) to index the rest before the server is back.
    store.flush().await;

    cluster.start_server().unwrap();
    assert_eq!(store.reindex().await.unwrap().runs, 1);
    let row = store
        .list_runs(&RunQuery {
            limit: 5,
            ..RunQuery::default()
        })
        .await
        .unwrap()
        .remove(0);
    assert_eq!((row.status, row.events), (RunStatus::Completed, 5));
    store.close().await;
}

/// Issue #26: the queue counts a run's failures apart from its claims. Takeovers after a
/// worker stopped (its lease ran out) and hand-backs at shutdown are claims, not failures;
/// a release as failed counts one, once, and only under the current fence.
#[cfg_attr(
    fabric_no_postgres,
    ignore = "needs PostgreSQL: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_26_the_queue_counts_failures_not_takeovers() {
    use fabric_core::{Release, RunQueue};
    let Some(t) = common::postgres().await else {
        return;
    };
    let s = &t.store;
    let id = new_run_id();
    assert!(
        s.enqueue(&id, &serde_json::json!({"prompt": "x"}), None)
            .await
            .unwrap()
    );
    let short = Duration::from_millis(200);
    let claim = async |worker: &str, lease: Duration| {
        let claimed = s.claim(worker, lease).await.unwrap().unwrap();
        assert_eq!(claimed.id, id);
        claimed
    };
    // Two workers killed in turn: each lease runs out and the next worker takes over.
    let first = claim("w1", short).await;
    assert_eq!((first.attempts, first.failures), (1, 0));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = claim("w2", short).await;
    assert_eq!((second.attempts, second.failures), (2, 0));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let third = claim("w3", Duration::from_secs(30)).await;
    assert_eq!((third.attempts, third.failures), (3, 0));
    // Its first real failure.
    s.release(&id, third.fence, Release::Failed).await.unwrap();
    let fourth = claim("w4", Duration::from_secs(30)).await;
    assert_eq!((fourth.attempts, fourth.failures), (4, 1));
    // A stale worker's release (an older fence) counts nothing; a shutdown's hand-back
    // neither.
    s.release(&id, third.fence, Release::Failed).await.unwrap();
    s.release(&id, fourth.fence, Release::HandBack)
        .await
        .unwrap();
    let fifth = claim("w5", Duration::from_secs(30)).await;
    assert_eq!((fifth.attempts, fifth.failures), (5, 1));
    s.release(&id, fifth.fence, Release::Done).await.unwrap();
    assert!(s.claim("w6", short).await.unwrap().is_none());
}
