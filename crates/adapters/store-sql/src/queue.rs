//! The run queue on PostgreSQL (docs/DURABILITY.md, ADR-045): `run_queue` rows claimed with
//! `FOR UPDATE SKIP LOCKED` under a lease on the database's clock, a fencing token checked by
//! every write of a claimed run, and `LISTEN/NOTIFY` for followers and workers.
//!
//! A claimed run's events are written to the database first, in one statement that inserts
//! the event only while the writer's fence is current and notifies followers; then to the
//! runlog file. Taking a run over rebuilds its runlog file from the database and renames it
//! into place, so a stalled former owner that still holds the old file writes into an
//! unlinked one, and the runlog is exactly the database's events.

use async_trait::async_trait;
use fabric_core::StoreError;
use fabric_core::{
    ClaimedRun, NewRun, QueueSignal, QueuedCancel, Release, Renewal, RunLog, RunQueue,
};
use fabric_domain::{RunEvent, RunId, RunSummary};
use fabric_store_fs::{FileRunLog, RUNLOG_FILE};
use serde_json::Value;
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, mpsc};

use crate::db::{Arg, Backend};
use crate::listen::Signal;
use crate::writer::{Msg, WriterHandle};
use crate::{SqlStore, queries};

/// The database's clock, in seconds since the epoch: leases are compared on one clock,
/// whatever the workers' clocks say.
const NOW: &str = "EXTRACT(EPOCH FROM clock_timestamp())";

impl SqlStore {
    fn require_postgres(&self) -> Result<(), StoreError> {
        match self.inner.db.backend() {
            Backend::Postgres => Ok(()),
            Backend::Sqlite => Err(StoreError::InvalidQuery(format!(
                "the run queue needs PostgreSQL, and {} is SQLite; set `store.url` (or FABRIC_STORE_URL) to a postgres:// URL, or run without `store.queue` (SQLite runs are durable in one process: docs/DURABILITY.md)",
                self.inner.name
            ))),
        }
    }
}

impl SqlStore {
    /// Who carries on a run the queue knows (issue #26), on the database's clock: a worker
    /// whose lease is current ([`Liveness::Held`]), none yet (queued, handed back, or its
    /// worker's lease ran out: [`Liveness::Queued`]); `None` when the queue has no live row
    /// for it (not a queued run, or not PostgreSQL), and its runlog's lock says.
    pub(crate) async fn queue_liveness(
        &self,
        id: &RunId,
    ) -> Result<Option<fabric_core::Liveness>, StoreError> {
        if self.inner.db.backend() != Backend::Postgres {
            return Ok(None);
        }
        let row = self
            .inner
            .db
            .fetch_optional(
                &format!(
                    "SELECT CAST(CASE WHEN state = 'running' AND lease_until >= {NOW} THEN 1 ELSE 0 END AS BIGINT) AS held \
                     FROM run_queue WHERE run_id = $1 AND state IN ('queued', 'running')"
                ),
                vec![id.as_str().into()],
            )
            .await
            .map_err(|e| self.err(&e))?;
        let Some(row) = row else {
            return Ok(None);
        };
        Ok(Some(if row.int("held").map_err(|e| self.err(&e))? == 1 {
            fabric_core::Liveness::Held
        } else {
            fabric_core::Liveness::Queued
        }))
    }
}

#[async_trait]
impl RunQueue for SqlStore {
    async fn enqueue(
        &self,
        id: &RunId,
        request: &Value,
        limit: Option<u64>,
    ) -> Result<bool, StoreError> {
        self.require_postgres()?;
        let prompt = request
            .get("prompt")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut row = RunSummary::new(id.clone());
        row.prompt = prompt.to_owned();
        row.started_at = fabric_core::unix_now();
        let result = async {
            let mut tx = self.inner.db.begin().await?;
            if let Some(limit) = limit {
                // Enqueues take turns on the count, so the limit holds across API nodes.
                tx.execute("SELECT pg_advisory_xact_lock(7236510)", vec![]).await?;
                let rows = tx
                    .fetch_all(
                        "SELECT COUNT(*) AS n FROM run_queue WHERE state IN ('queued', 'running')",
                        vec![],
                    )
                    .await?;
                let n = rows.first().map_or(Ok(0), |r| r.int("n"))?;
                if u64::try_from(n).unwrap_or(0) >= limit {
                    return Ok(false);
                }
            }
            crate::index::upsert_run_rows(&mut tx, &[&row], false).await?;
            tx.execute(
                &format!(
                    "INSERT INTO run_queue (run_id, request, state, enqueued_at) VALUES ($1, $2, 'queued', {NOW})"
                ),
                vec![id.as_str().into(), Arg::Text(request.to_string())],
            )
            .await?;
            tx.execute("SELECT pg_notify('fabric_queue', $1)", vec![id.as_str().into()])
                .await?;
            tx.commit().await.map(|()| true)
        }
        .await;
        result.map_err(|e| self.err(&e))
    }

    async fn claim(&self, worker: &str, lease: Duration) -> Result<Option<ClaimedRun>, StoreError> {
        self.require_postgres()?;
        let row = self
            .inner
            .db
            .fetch_optional(
                // The row's state before the update says whether a lease ran out (a
                // takeover), which the worker reports. A takeover whose run recorded no
                // work (no answer, no tool result) since the dead claim began counts as a
                // death of the run's own; one after progress starts the count again (an
                // outside kill, issue #40).
                &format!(
                    "WITH next AS (SELECT run_id, state AS was, progress AS before FROM run_queue \
                        WHERE state = 'queued' OR (state = 'running' AND lease_until < {NOW}) \
                        ORDER BY enqueued_at, run_id LIMIT 1 FOR UPDATE SKIP LOCKED), \
                     work AS (SELECT COUNT(*) AS done FROM events, next WHERE events.run_id = next.run_id \
                        AND events.kind IN ('llm_response', 'tool_result', 'tool_error')) \
                     UPDATE run_queue AS q SET state = 'running', owner = $1, fence = q.fence + 1, attempts = q.attempts + 1, \
                     lease_until = {NOW} + $2, progress = work.done, \
                     deaths = CASE WHEN next.was <> 'running' THEN q.deaths \
                        WHEN work.done > next.before THEN 0 ELSE q.deaths + 1 END \
                     FROM next, work WHERE q.run_id = next.run_id \
                     RETURNING q.run_id, q.request, q.fence, q.attempts, q.failures, q.deaths, next.was"
                ),
                vec![worker.into(), Arg::Real(lease.as_secs_f64())],
            )
            .await
            .map_err(|e| self.err(&e))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let id = row.text("run_id").map_err(|e| self.err(&e))?;
        let id = RunId::parse(&id).map_err(|e| StoreError::InvalidQuery(e.to_string()))?;
        let request = row.text("request").map_err(|e| self.err(&e))?;
        Ok(Some(ClaimedRun {
            id,
            request: serde_json::from_str(&request).unwrap_or(Value::Null),
            fence: row.int("fence").map_err(|e| self.err(&e))?,
            attempts: u32::try_from(row.int("attempts").map_err(|e| self.err(&e))?)
                .unwrap_or(u32::MAX),
            failures: u32::try_from(row.int("failures").map_err(|e| self.err(&e))?)
                .unwrap_or(u32::MAX),
            deaths: u32::try_from(row.int("deaths").map_err(|e| self.err(&e))?).unwrap_or(u32::MAX),
            lease_expired: row.text("was").map_err(|e| self.err(&e))? == "running",
        }))
    }

    async fn renew(
        &self,
        _worker: &str,
        runs: &[(RunId, i64)],
        lease: Duration,
    ) -> Result<Vec<Renewal>, StoreError> {
        self.require_postgres()?;
        let mut out = Vec::with_capacity(runs.len());
        for (id, fence) in runs {
            let row = self
                .inner
                .db
                .fetch_optional(
                    &format!(
                        "UPDATE run_queue SET lease_until = {NOW} + $3 \
                         WHERE run_id = $1 AND fence = $2 AND state = 'running' \
                         RETURNING CAST(CASE WHEN cancel_requested THEN 1 ELSE 0 END AS BIGINT) AS cancel"
                    ),
                    vec![
                        id.as_str().into(),
                        Arg::Int(*fence),
                        Arg::Real(lease.as_secs_f64()),
                    ],
                )
                .await
                .map_err(|e| self.err(&e))?;
            out.push(match row {
                Some(row) => Renewal {
                    kept: true,
                    cancel_requested: row.int("cancel").unwrap_or(0) == 1,
                },
                None => Renewal {
                    kept: false,
                    cancel_requested: false,
                },
            });
        }
        Ok(out)
    }

    async fn release(&self, id: &RunId, fence: i64, how: Release) -> Result<(), StoreError> {
        self.require_postgres()?;
        let sql = match how {
            Release::Done => {
                "UPDATE run_queue SET state = 'done', lease_until = NULL WHERE run_id = $1 AND fence = $2"
            }
            Release::HandBack => {
                "WITH back AS (UPDATE run_queue SET state = 'queued', owner = NULL, lease_until = NULL \
                 WHERE run_id = $1 AND fence = $2 AND state = 'running' RETURNING run_id) \
                 SELECT pg_notify('fabric_queue', run_id) FROM back"
            }
            // The failure is counted in the same statement that hands the run back, so a
            // count is never lost nor doubled by a retry (the fence matches once).
            Release::Failed => {
                "WITH back AS (UPDATE run_queue SET state = 'queued', owner = NULL, lease_until = NULL, \
                 failures = failures + 1 \
                 WHERE run_id = $1 AND fence = $2 AND state = 'running' RETURNING run_id) \
                 SELECT pg_notify('fabric_queue', run_id) FROM back"
            }
        };
        self.inner
            .db
            .fetch_all(sql, vec![id.as_str().into(), Arg::Int(fence)])
            .await
            .map(|_| ())
            .map_err(|e| self.err(&e))
    }

    async fn requeue(&self, id: &RunId) -> Result<bool, StoreError> {
        self.require_postgres()?;
        let rows = self
            .inner
            .db
            .fetch_all(
                "WITH back AS (UPDATE run_queue SET state = 'queued', owner = NULL, lease_until = NULL \
                 WHERE run_id = $1 AND state = 'done' RETURNING run_id) \
                 SELECT pg_notify('fabric_queue', run_id) FROM back",
                vec![id.as_str().into()],
            )
            .await
            .map_err(|e| self.err(&e))?;
        Ok(!rows.is_empty())
    }

    async fn cancel(&self, id: &RunId) -> Result<QueuedCancel, StoreError> {
        self.require_postgres()?;
        let db = &self.inner.db;
        // Waiting for a worker (never started, or handed back): it ends here, with the event
        // its followers wait for, after whatever it recorded, in one transaction.
        let result = async {
            let mut tx = db.begin().await?;
            let queued = tx
                .fetch_all(
                    "UPDATE run_queue SET state = 'cancelled' WHERE run_id = $1 AND state = 'queued' RETURNING run_id",
                    vec![id.as_str().into()],
                )
                .await?;
            if queued.is_empty() {
                return Ok(false);
            }
            let next = tx
                .fetch_all(
                    "SELECT COALESCE(MAX(seq), -1) + 1 AS n FROM events WHERE run_id = $1",
                    vec![id.as_str().into()],
                )
                .await?;
            let seq = next.first().map_or(Ok(0), |r| r.int("n"))?;
            let mut event = fabric_core::service::cancelled_before_start(id)
                .map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
            event.seq = u64::try_from(seq).unwrap_or(0);
            let line =
                serde_json::to_string(&event).map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
            crate::index::insert_events(
                &mut tx,
                &[(
                    id.as_str(),
                    &crate::index::EventColumns::of(&event),
                    line.as_str(),
                )],
                false,
            )
            .await?;
            tx.execute(
                "UPDATE runs SET status = 'cancelled', reason = $2, ended_at = $3, events = $4 WHERE id = $1",
                vec![
                    id.as_str().into(),
                    Arg::Text("the run was cancelled while it waited for a worker".to_owned()),
                    Arg::Real(event.ts),
                    Arg::Int(seq + 1),
                ],
            )
            .await?;
            tx.execute(
                "SELECT pg_notify('fabric_events', $1)",
                vec![Arg::Text(format!("{id} {seq}"))],
            )
            .await?;
            tx.commit().await.map(|()| true)
        }
        .await;
        if result.map_err(|e| self.err(&e))? {
            return Ok(QueuedCancel::BeforeStart);
        }
        let running = db
            .fetch_optional(
                "WITH asked AS (UPDATE run_queue SET cancel_requested = TRUE WHERE run_id = $1 AND state = 'running' RETURNING run_id) \
                 SELECT pg_notify('fabric_cancel', run_id) FROM asked",
                vec![id.as_str().into()],
            )
            .await
            .map_err(|e| self.err(&e))?;
        Ok(if running.is_some() {
            QueuedCancel::Requested
        } else {
            QueuedCancel::NotRunning
        })
    }

    async fn started(&self, id: &RunId) -> Result<bool, StoreError> {
        self.require_postgres()?;
        let row = self
            .inner
            .db
            .fetch_optional(
                "SELECT 1 AS n FROM events WHERE run_id = $1 LIMIT 1",
                vec![id.as_str().into()],
            )
            .await
            .map_err(|e| self.err(&e))?;
        Ok(row.is_some())
    }

    async fn open_claimed(
        &self,
        id: &RunId,
        fence: i64,
        fresh: bool,
    ) -> Result<NewRun, StoreError> {
        self.require_postgres()?;
        let inner = &self.inner;
        // Never rebuild the runlog of a run this process no longer holds: the new owner
        // writes to it.
        let held = inner
            .db
            .fetch_optional(
                "SELECT 1 AS n FROM run_queue WHERE run_id = $1 AND fence = $2 AND state = 'running'",
                vec![id.as_str().into(), Arg::Int(fence)],
            )
            .await
            .map_err(|e| self.err(&e))?;
        if held.is_none() {
            return Err(StoreError::Fenced {
                run: id.clone(),
                fence,
            });
        }
        let workspace = if fresh {
            inner.fs.make_run_dirs(id).await?
        } else {
            // A worker that does not share the first one's disk has no directory for the run
            // yet: its runlog is rebuilt here, and its versioned workspace fetched into it
            // (issue #25).
            let dir = inner.fs.run_dir(id);
            tokio::fs::create_dir_all(&dir)
                .await
                .map_err(|e| StoreError::Io {
                    action: "cannot create",
                    path: dir.clone(),
                    detail: e.to_string(),
                })?;
            let workspace = dir.join(fabric_store_fs::WORKSPACE_DIR);
            tokio::fs::canonicalize(&workspace)
                .await
                .unwrap_or(workspace)
        };
        // The runlog is rebuilt from the database and renamed into place.
        let events = queries::indexed_events(self, id, None).await?;
        let path = inner.fs.run_dir(id).join(RUNLOG_FILE);
        let staged = inner
            .fs
            .run_dir(id)
            .join(format!("{RUNLOG_FILE}.{fence}.tmp"));
        let mut text = String::new();
        for event in &events {
            let line = serde_json::to_string(event).map_err(|e| StoreError::Io {
                action: "cannot encode an event for",
                path: path.clone(),
                detail: e.to_string(),
            })?;
            text.push_str(&line);
            text.push('\n');
        }
        tokio::fs::write(&staged, text)
            .await
            .map_err(|e| io(&staged, "cannot write", &e))?;
        tokio::fs::rename(&staged, &path)
            .await
            .map_err(|e| io(&path, "cannot replace", &e))?;
        let file = FileRunLog::create(path).await?;
        let row = RunSummary::from_events(id.clone(), &events);
        if !inner.writer.send(Msg::Reopen { row: Box::new(row) }).await {
            tracing::warn!(run_id = %id, "the store's writer has stopped; the run goes on with its events");
        }
        Ok(NewRun {
            id: id.clone(),
            workspace,
            log: Box::new(ClaimedRunLog {
                store: self.clone(),
                file,
                run: id.clone(),
                fence,
                writer: inner.writer.clone(),
                order: Mutex::new(()),
            }),
            versioned: None,
        })
    }

    async fn follow(
        &self,
        id: &RunId,
        after: Option<u64>,
    ) -> Result<mpsc::Receiver<RunEvent>, StoreError> {
        self.require_postgres()?;
        let mut signals = self.listener().await?.subscribe();
        let (tx, rx) = mpsc::channel(256);
        let (store, id) = (self.clone(), id.clone());
        tokio::spawn(async move {
            let mut last = after;
            loop {
                let events = match queries::indexed_events(&store, &id, last).await {
                    Ok(events) => events,
                    Err(e) => {
                        tracing::warn!(run_id = %id, error = %e, "cannot read a followed run's events; retrying");
                        Vec::new()
                    }
                };
                for event in events {
                    last = Some(event.seq);
                    let terminal = event.kind().is_terminal();
                    if tx.send(event).await.is_err() || terminal {
                        return;
                    }
                }
                // Woken by a notification for this run (or a reconnect, after which missed
                // ones are read), with a slow safety net for anything lost.
                let deadline = tokio::time::sleep(FOLLOW_SAFETY_NET);
                tokio::pin!(deadline);
                loop {
                    tokio::select! {
                        signal = signals.recv() => match signal {
                            Ok(Signal::Event(run)) if run == id.as_str() => break,
                            Ok(Signal::Resync) | Err(_) => break,
                            Ok(_) => {}
                        },
                        () = &mut deadline => break,
                        () = tx.closed() => return,
                    }
                }
            }
        });
        Ok(rx)
    }

    async fn signals(&self) -> Result<mpsc::Receiver<QueueSignal>, StoreError> {
        self.require_postgres()?;
        let mut signals = self.listener().await?.subscribe();
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let signal = match signals.recv().await {
                    Ok(Signal::Enqueued) | Ok(Signal::Resync) => QueueSignal::Enqueued,
                    Ok(Signal::Cancel(id)) => match RunId::parse(&id) {
                        Ok(id) => QueueSignal::Cancel(id),
                        Err(_) => continue,
                    },
                    Ok(Signal::Event(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        QueueSignal::Enqueued
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                if tx.send(signal).await.is_err() {
                    return;
                }
            }
        });
        Ok(rx)
    }
}

/// How long a follower waits without a notification before it reads anyway.
const FOLLOW_SAFETY_NET: Duration = Duration::from_secs(5);

/// How long a claimed run's write keeps retrying a database that does not answer (it
/// restarts, the network blips) before the run stops; its lease outlives this by default,
/// so the run is continued by whichever worker claims it next.
const WRITE_RETRY_FOR: Duration = Duration::from_secs(30);

fn io(path: &std::path::Path, action: &'static str, e: &std::io::Error) -> StoreError {
    StoreError::Io {
        action,
        path: path.to_path_buf(),
        detail: e.to_string(),
    }
}

/// The runlog of a claimed run: the database (under the fence) first, then the file.
struct ClaimedRunLog {
    store: SqlStore,
    file: FileRunLog,
    run: RunId,
    fence: i64,
    writer: WriterHandle,
    // One append at a time, so the file's order is the database's.
    order: Mutex<()>,
}

impl ClaimedRunLog {
    /// Whether the event at `seq` is already this line.
    async fn already_written(&self, seq: u64, line: &str) -> bool {
        let row = self
            .store
            .inner
            .db
            .fetch_optional(
                "SELECT line FROM events WHERE run_id = $1 AND seq = $2",
                vec![
                    self.run.as_str().into(),
                    Arg::Int(i64::try_from(seq).unwrap_or(i64::MAX)),
                ],
            )
            .await;
        matches!(row, Ok(Some(row)) if row.text("line").is_ok_and(|l| l == line))
    }
}

#[async_trait]
impl RunLog for ClaimedRunLog {
    async fn append(&self, event: &RunEvent) -> Result<(), StoreError> {
        let guard = self.order.lock().await;
        let line = self.file.encode(event)?;
        let columns = crate::index::EventColumns::of(event);
        let started = Instant::now();
        let mut pause = Duration::from_millis(50);
        let inserted = loop {
            let result = self
                .store
                .inner
                .db
                .fetch_all(
                    "WITH ins AS (INSERT INTO events (run_id, seq, ts, kind, step, tool, line) \
                     SELECT $1, $2, $3, $4, $5, $6, $7 \
                     WHERE EXISTS (SELECT 1 FROM run_queue WHERE run_id = $1 AND fence = $8 AND state = 'running' FOR SHARE) \
                     ON CONFLICT (run_id, seq) DO NOTHING RETURNING seq) \
                     SELECT pg_notify('fabric_events', $1 || ' ' || CAST(seq AS TEXT)) FROM ins",
                    vec![
                        self.run.as_str().into(),
                        Arg::Int(i64::try_from(columns.seq).unwrap_or(i64::MAX)),
                        Arg::Real(columns.ts),
                        columns.kind.as_str().into(),
                        Arg::OptInt(columns.step.map(i64::from)),
                        Arg::OptText(columns.tool.clone()),
                        Arg::Text(line.clone()),
                        Arg::Int(self.fence),
                    ],
                )
                .await;
            match result {
                Ok(rows) => break !rows.is_empty(),
                Err(e) if started.elapsed() < WRITE_RETRY_FOR => {
                    tracing::warn!(run_id = %self.run, error = %self.store.err(&e), "cannot write a claimed run's event; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                Err(e) => return Err(self.store.err(&e)),
            }
        };
        // Nothing inserted: the fence moved on, or an earlier try committed before its reply
        // was lost (the database restarting), which leaves this very line in place.
        if !inserted && !self.already_written(event.seq, &line).await {
            return Err(StoreError::Fenced {
                run: self.run.clone(),
                fence: self.fence,
            });
        }
        self.file.append_line(&line)?;
        // The run's row follows through the writer (its event insert is a no-op by then).
        self.writer.index_event(&self.run, event, line).await;
        drop(guard);
        Ok(())
    }
}
