//! Reading runs: listing (an index range scan, newest first), one run, one run's events.

use fabric_core::{RunQuery, RunStore, StoreError};
use fabric_domain::runlog::RunOrigin;
use fabric_domain::{RunEvent, RunId, RunStatus, RunSummary, Usage};
use fabric_store_fs::RUNLOG_FILE;

use crate::SqlStore;
use crate::db::{Arg, Row, placeholders};

/// The `runs` columns a summary is read from, prefixed `r.`.
pub(crate) const SUMMARY_COLUMNS: &str = "r.id, r.parent_id, r.prompt, r.specialist_ids, r.model_keys, r.models, r.status, \
     r.reason, r.started_at, r.ended_at, r.steps, r.prompt_tokens, r.completion_tokens, r.total_tokens, \
     r.tool_calls, r.tool_errors, r.events, r.summary, r.result, r.origin, r.context_id";

fn uint(value: i64) -> u64 {
    u64::try_from(value).unwrap_or_default()
}

fn small(value: i64) -> u32 {
    u32::try_from(value).unwrap_or_default()
}

fn list(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

/// A status as stored; an unknown one (from a newer fabric) reads as `failed`.
pub(crate) fn parse_status(text: &str) -> RunStatus {
    serde_json::from_value(serde_json::Value::String(text.to_owned())).unwrap_or(RunStatus::Failed)
}

/// A run row as a summary.
pub(crate) fn summary(row: &Row) -> Result<RunSummary, sqlx::Error> {
    let id = row.text("id")?;
    let id = RunId::parse(&id).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
    Ok(RunSummary {
        id,
        parent_id: row
            .opt_text("parent_id")?
            .and_then(|p| RunId::parse(&p).ok()),
        origin: RunOrigin::from(row.text("origin")?.as_str()),
        context_id: row.opt_text("context_id")?,
        started_at: row.real("started_at")?,
        ended_at: row.opt_real("ended_at")?,
        status: parse_status(&row.text("status")?),
        reason: row.opt_text("reason")?,
        prompt: row.text("prompt")?,
        specialist_ids: list(&row.text("specialist_ids")?),
        model_keys: list(&row.text("model_keys")?),
        models: list(&row.text("models")?),
        summary: row.opt_text("summary")?,
        result: row
            .opt_text("result")?
            .and_then(|r| serde_json::from_str(&r).ok()),
        steps: small(row.int("steps")?),
        usage: Usage {
            prompt_tokens: uint(row.int("prompt_tokens")?),
            completion_tokens: uint(row.int("completion_tokens")?),
            total_tokens: uint(row.int("total_tokens")?),
        },
        tool_calls: small(row.int("tool_calls")?),
        tool_errors: small(row.int("tool_errors")?),
        events: uint(row.int("events")?),
    })
}

/// Runs newest first. With a specialist, the scan walks `run_specialists`' key
/// `(specialist_id, run_id)` backwards; otherwise `runs`' primary key (or `(status, id)`).
/// Runs marked `running` that no process holds (docs/DURABILITY.md), oldest first; plus
/// runs on disk newer than every row, whose process stopped before their row was written.
pub(crate) async fn interrupted_runs(store: &SqlStore) -> Result<Vec<RunId>, StoreError> {
    let inner = &store.inner;
    // Runs of the queue are the workers' (leases, not locks, say who holds them).
    let rows = inner
        .db
        .fetch_all(
            "SELECT id FROM runs WHERE status = 'running' \
             AND id NOT IN (SELECT run_id FROM run_queue WHERE state IN ('queued', 'running')) ORDER BY id",
            vec![],
        )
        .await
        .map_err(|e| store.err(&e))?;
    let mut ids: Vec<RunId> = rows
        .iter()
        .filter_map(|row| row.text("id").ok())
        .filter_map(|id| RunId::parse(&id).ok())
        .collect();
    let newest = inner
        .db
        .fetch_optional("SELECT MAX(id) AS id FROM runs", vec![])
        .await
        .map_err(|e| store.err(&e))?
        .and_then(|row| row.text("id").ok());
    for id in inner.fs.run_ids().await? {
        if newest.as_deref().is_none_or(|n| id.as_str() > n)
            && matches!(inner.fs.get_run(&id).await, Ok(run) if run.status == RunStatus::Running)
        {
            ids.push(id);
        }
    }
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if !inner.fs.claimed(&id).await {
            out.push(id);
        }
    }
    Ok(out)
}

pub(crate) async fn list_runs(
    store: &SqlStore,
    query: &RunQuery,
) -> Result<Vec<RunSummary>, StoreError> {
    if query.limit == 0 {
        return Ok(Vec::new());
    }
    let mut args: Vec<Arg> = Vec::new();
    let mut sql = format!("SELECT {SUMMARY_COLUMNS} FROM ");
    let mut conditions = Vec::new();
    let order = if let Some(specialist) = &query.specialist {
        sql.push_str("run_specialists s JOIN runs r ON r.id = s.run_id");
        args.push(specialist.as_str().into());
        conditions.push(format!("s.specialist_id = ${}", args.len()));
        if let Some(before) = &query.before {
            args.push(before.as_str().into());
            conditions.push(format!("s.run_id < ${}", args.len()));
        }
        "s.run_id DESC"
    } else {
        sql.push_str("runs r");
        if let Some(before) = &query.before {
            args.push(before.as_str().into());
            conditions.push(format!("r.id < ${}", args.len()));
        }
        "r.id DESC"
    };
    if !query.statuses.is_empty() {
        let first = args.len() + 1;
        args.extend(query.statuses.iter().map(|s| s.as_str().into()));
        conditions.push(format!(
            "r.status IN ({})",
            placeholders(first, query.statuses.len())
        ));
    }
    if let Some(since) = query.since {
        args.push(Arg::Real(since));
        conditions.push(format!("r.started_at >= ${}", args.len()));
    }
    if let Some(origin) = &query.origin {
        args.push(origin.as_str().into());
        conditions.push(format!("r.origin = ${}", args.len()));
    }
    if let Some(context) = &query.context_id {
        args.push(context.as_str().into());
        conditions.push(format!("r.context_id = ${}", args.len()));
    }
    if !conditions.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conditions.join(" AND "));
    }
    args.push(Arg::Int(i64::try_from(query.limit).unwrap_or(i64::MAX)));
    sql.push_str(&format!(" ORDER BY {order} LIMIT ${}", args.len()));
    let rows = store
        .inner
        .db
        .fetch_all(&sql, args)
        .await
        .map_err(|e| store.err(&e))?;
    rows.iter()
        .map(summary)
        .collect::<Result<_, _>>()
        .map_err(|e| store.err(&e))
}

/// Summaries of these runs, in the order given (missing ones left out).
pub(crate) async fn summaries(
    store: &SqlStore,
    ids: &[String],
) -> Result<Vec<RunSummary>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT {SUMMARY_COLUMNS} FROM runs r WHERE r.id IN ({})",
        placeholders(1, ids.len())
    );
    let rows = store
        .inner
        .db
        .fetch_all(&sql, ids.iter().map(|id| Arg::Text(id.clone())).collect())
        .await
        .map_err(|e| store.err(&e))?;
    let mut found: Vec<RunSummary> = rows
        .iter()
        .map(summary)
        .collect::<Result<_, _>>()
        .map_err(|e| store.err(&e))?;
    found.sort_by_key(|s| ids.iter().position(|id| id == s.id.as_str()));
    Ok(found)
}

/// One run: folded from its runlog when it is on this machine (the source of truth), else
/// the database's row.
pub(crate) async fn get_run(store: &SqlStore, id: &RunId) -> Result<RunSummary, StoreError> {
    if let Some(events) = local_events(store, id).await? {
        return Ok(RunSummary::from_events(id.clone(), &events));
    }
    summaries(store, &[id.as_str().to_owned()])
        .await?
        .pop()
        .ok_or_else(|| StoreError::NotFound(id.clone()))
}

/// The run's events from its runlog on this machine, unless the database has more: on
/// PostgreSQL a worker that does not share this disk may have taken the run over from one
/// that did, and the runlog here then stopped where that one was killed (issue #25).
async fn local_events(store: &SqlStore, id: &RunId) -> Result<Option<Vec<RunEvent>>, StoreError> {
    if !has_runlog(store, id).await {
        return Ok(None);
    }
    let events = store.inner.fs.read_events(id).await?;
    if store.inner.db.backend() != crate::db::Backend::Postgres {
        return Ok(Some(events));
    }
    // The runlog here is the answer when the database cannot say otherwise (it may be
    // down: a run's own runlog never depends on it).
    let after = events.last().map(|e| e.seq);
    match indexed_events(store, id, after).await {
        Ok(newer) if !newer.is_empty() => {
            // The index lags a runlog being written here, never leads it: it is ahead only
            // when another machine wrote the run on.
            Ok(Some(
                indexed_events(store, id, None).await.unwrap_or(events),
            ))
        }
        _ => Ok(Some(events)),
    }
}

async fn has_runlog(store: &SqlStore, id: &RunId) -> bool {
    tokio::fs::try_exists(store.inner.fs.run_dir(id).join(RUNLOG_FILE))
        .await
        .unwrap_or(false)
}

/// One run's events: from its runlog when it is on this machine, else from the database
/// (a run made on another machine sharing PostgreSQL).
/// The events the index holds of one run, in order, those after `after` only when given.
pub(crate) async fn indexed_events(
    store: &SqlStore,
    id: &RunId,
    after: Option<u64>,
) -> Result<Vec<RunEvent>, StoreError> {
    let after = after.map_or(-1, |seq| i64::try_from(seq).unwrap_or(i64::MAX));
    let rows = store
        .inner
        .db
        .fetch_all(
            "SELECT line FROM events WHERE run_id = $1 AND seq > $2 ORDER BY seq",
            vec![id.as_str().into(), Arg::Int(after)],
        )
        .await
        .map_err(|e| store.err(&e))?;
    let mut events = Vec::with_capacity(rows.len());
    for (index, row) in rows.iter().enumerate() {
        let line = row.text("line").map_err(|e| store.err(&e))?;
        let event = serde_json::from_str(&line).map_err(|e| StoreError::Corrupt {
            path: format!("{}#events/{id}", store.inner.name).into(),
            line: index + 1,
            detail: e.to_string(),
        })?;
        events.push(event);
    }
    Ok(events)
}

pub(crate) async fn read_events(store: &SqlStore, id: &RunId) -> Result<Vec<RunEvent>, StoreError> {
    if let Some(events) = local_events(store, id).await? {
        return Ok(events);
    }
    let events = indexed_events(store, id, None).await?;
    if events.is_empty() {
        // A run created but with no event yet still exists.
        return match summaries(store, &[id.as_str().to_owned()]).await?.pop() {
            Some(_) => Ok(Vec::new()),
            None => Err(StoreError::NotFound(id.clone())),
        };
    }
    Ok(events)
}
