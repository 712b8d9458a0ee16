//! The writes that keep the index: events (idempotent by `(run_id, seq)`), the run row
//! (from a [`RunSummary`]) and, once a run ended, its full-text document. Shared by the
//! writer task and reindexing, inside their transactions.

use fabric_domain::{EventKind, RunEvent, RunSummary};

use crate::db::{Arg, Backend, Tx};
use crate::document::{DOCUMENT_CAP, ToolEvent, search_document};

fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn json_list(items: &[String]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".to_owned())
}

/// An event's row in `events` but its line: taken from the event where it is made, so the
/// writer's queue holds this and the line rather than the event (issue #45).
#[derive(Debug, Clone)]
pub(crate) struct EventColumns {
    pub(crate) seq: u64,
    pub(crate) ts: f64,
    pub(crate) kind: EventKind,
    pub(crate) step: Option<u32>,
    /// The tool an event is about (`tool_call`, `tool_result`, `tool_error`), for stats by
    /// tool.
    pub(crate) tool: Option<String>,
}

impl EventColumns {
    pub(crate) fn of(event: &RunEvent) -> Self {
        Self {
            seq: event.seq,
            ts: event.ts,
            kind: event.kind(),
            step: event.step,
            tool: ToolEvent::of(event).map(|t| t.tool().to_owned()),
        }
    }
}

/// Events per `INSERT` statement: one statement per row cost a round trip to the driver
/// each (most of the writer's time); 7 values a row keeps a statement far under both
/// databases' limits on bound values.
const EVENTS_PER_STATEMENT: usize = 100;

/// Records events many to a statement. An event already there at its `(run_id, seq)` is
/// kept, unless `replace` and its line differs: a caller writing what the runlog has now
/// (the source of truth) replaces what an earlier process indexed at that `seq` (issue #26:
/// a torn last line indexed, then cut by `fabric resume`, which wrote another event there).
pub(crate) async fn insert_events(
    tx: &mut Tx,
    events: &[(&str, &EventColumns, &str)],
    replace: bool,
) -> Result<(), sqlx::Error> {
    for chunk in events.chunks(EVENTS_PER_STATEMENT) {
        let mut sql =
            String::from("INSERT INTO events (run_id, seq, ts, kind, step, tool, line) VALUES ");
        let mut args = Vec::with_capacity(chunk.len() * 7);
        for (i, (run_id, event, line)) in chunk.iter().enumerate() {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push('(');
            sql.push_str(&crate::db::placeholders(i * 7 + 1, 7));
            sql.push(')');
            args.extend([
                (*run_id).into(),
                Arg::Int(int(event.seq)),
                Arg::Real(event.ts),
                event.kind.as_str().into(),
                Arg::OptInt(event.step.map(i64::from)),
                Arg::OptText(event.tool.clone()),
                // The runlog's own line.
                Arg::Text((*line).to_owned()),
            ]);
        }
        sql.push_str(if replace {
            // Only a differing line is rewritten: the same line (the usual case, and every
            // event of a queued run, inserted under its fence first) costs no write.
            " ON CONFLICT (run_id, seq) DO UPDATE SET ts = excluded.ts, kind = excluded.kind, \
             step = excluded.step, tool = excluded.tool, line = excluded.line \
             WHERE events.line <> excluded.line"
        } else {
            " ON CONFLICT (run_id, seq) DO NOTHING"
        });
        tx.execute(&sql, args).await?;
    }
    Ok(())
}

const RUN_COLUMNS: &str = "id, parent_id, prompt, specialist_ids, model_keys, models, status, reason, started_at, ended_at, \
     steps, prompt_tokens, completion_tokens, total_tokens, tool_calls, tool_errors, events, summary, result, origin, context_id";

/// Values per run row.
const RUN_VALUES: usize = 21;

/// Run rows per `INSERT` statement (21 values each, far under both databases' limits).
const RUNS_PER_STATEMENT: usize = 50;
/// `(id, run_id)` pairs per `INSERT` into the link tables.
const LINKS_PER_STATEMENT: usize = 400;

/// Writes a run's row; `replace`: overwrite an existing row (else keep it).
pub(crate) async fn upsert_run(
    tx: &mut Tx,
    run: &RunSummary,
    replace: bool,
) -> Result<(), sqlx::Error> {
    upsert_runs(tx, &[run], replace).await
}

/// Writes runs' rows (ids unique within the call), many to a statement, and their links to
/// specialists and model keys; `replace`: overwrite existing rows (else keep them).
pub(crate) async fn upsert_runs(
    tx: &mut Tx,
    runs: &[&RunSummary],
    replace: bool,
) -> Result<(), sqlx::Error> {
    upsert_run_rows(tx, runs, replace).await?;
    insert_run_links(tx, runs).await
}

/// Writes runs' rows (ids unique within the call), many to a statement; `replace`:
/// overwrite existing rows (else keep them), but never with a row that counts fewer events:
/// a row only moves forward, so a late write from a process that lost the run (a worker
/// paused past its lease, docs/DURABILITY.md) cannot bring back an older state.
pub(crate) async fn upsert_run_rows(
    tx: &mut Tx,
    runs: &[&RunSummary],
    replace: bool,
) -> Result<(), sqlx::Error> {
    let conflict = if replace {
        "ON CONFLICT (id) DO UPDATE SET parent_id = excluded.parent_id, prompt = excluded.prompt, \
         specialist_ids = excluded.specialist_ids, model_keys = excluded.model_keys, models = excluded.models, \
         status = excluded.status, reason = excluded.reason, started_at = excluded.started_at, \
         ended_at = excluded.ended_at, steps = excluded.steps, prompt_tokens = excluded.prompt_tokens, \
         completion_tokens = excluded.completion_tokens, total_tokens = excluded.total_tokens, \
         tool_calls = excluded.tool_calls, tool_errors = excluded.tool_errors, events = excluded.events, \
         summary = excluded.summary, result = excluded.result, origin = excluded.origin, \
         context_id = excluded.context_id \
         WHERE runs.events <= excluded.events"
    } else {
        "ON CONFLICT (id) DO NOTHING"
    };
    for chunk in runs.chunks(RUNS_PER_STATEMENT) {
        let mut values = Vec::with_capacity(chunk.len());
        let mut args = Vec::with_capacity(chunk.len() * RUN_VALUES);
        for (i, run) in chunk.iter().enumerate() {
            values.push(format!(
                "({})",
                crate::db::placeholders(i * RUN_VALUES + 1, RUN_VALUES)
            ));
            args.extend([
                run.id.as_str().into(),
                Arg::OptText(run.parent_id.as_ref().map(|p| p.as_str().to_owned())),
                run.prompt.as_str().into(),
                Arg::Text(json_list(&run.specialist_ids)),
                Arg::Text(json_list(&run.model_keys)),
                Arg::Text(json_list(&run.models)),
                run.status.as_str().into(),
                Arg::OptText(run.reason.clone()),
                Arg::Real(run.started_at),
                Arg::OptReal(run.ended_at),
                Arg::Int(i64::from(run.steps)),
                Arg::Int(int(run.usage.prompt_tokens)),
                Arg::Int(int(run.usage.completion_tokens)),
                Arg::Int(int(run.usage.total_tokens)),
                Arg::Int(i64::from(run.tool_calls)),
                Arg::Int(i64::from(run.tool_errors)),
                Arg::Int(int(run.events)),
                Arg::OptText(run.summary.clone()),
                Arg::OptText(run.result.as_ref().map(ToString::to_string)),
                run.origin.as_str().into(),
                Arg::OptText(run.context_id.clone()),
            ]);
        }
        let sql = format!(
            "INSERT INTO runs ({RUN_COLUMNS}) VALUES {} {conflict}",
            values.join(", ")
        );
        tx.execute(&sql, args).await?;
    }
    Ok(())
}

/// Links runs to their specialists and model keys (the links that exist stay).
pub(crate) async fn insert_run_links(tx: &mut Tx, runs: &[&RunSummary]) -> Result<(), sqlx::Error> {
    let specialists: Vec<(&str, &str)> = runs
        .iter()
        .flat_map(|r| r.specialist_ids.iter().map(|s| (s.as_str(), r.id.as_str())))
        .collect();
    insert_links(tx, "run_specialists", "specialist_id", &specialists).await?;
    let models: Vec<(&str, &str)> = runs
        .iter()
        .flat_map(|r| r.model_keys.iter().map(|k| (k.as_str(), r.id.as_str())))
        .collect();
    insert_links(tx, "run_models", "model_key", &models).await
}

/// Links runs to specialists or model keys, keeping the links that exist.
async fn insert_links(
    tx: &mut Tx,
    table: &str,
    column: &str,
    links: &[(&str, &str)],
) -> Result<(), sqlx::Error> {
    for chunk in links.chunks(LINKS_PER_STATEMENT) {
        let values: Vec<String> = (0..chunk.len())
            .map(|i| format!("({})", crate::db::placeholders(i * 2 + 1, 2)))
            .collect();
        let args = chunk
            .iter()
            .flat_map(|(key, run)| [(*key).into(), (*run).into()])
            .collect();
        let sql = format!(
            "INSERT INTO {table} ({column}, run_id) VALUES {} ON CONFLICT DO NOTHING",
            values.join(", ")
        );
        tx.execute(&sql, args).await?;
    }
    Ok(())
}

/// (Re)builds an ended run's full-text document from its events in the database.
pub(crate) async fn write_document(
    tx: &mut Tx,
    backend: Backend,
    run: &RunSummary,
) -> Result<(), sqlx::Error> {
    let rows = tx
        .fetch_all(
            "SELECT line FROM events WHERE run_id = $1 AND kind IN ('tool_call', 'tool_result', 'tool_error') ORDER BY seq",
            vec![run.id.as_str().into()],
        )
        .await?;
    let mut events = Vec::with_capacity(rows.len());
    for row in rows {
        if let Ok(event) = serde_json::from_str::<RunEvent>(&row.text("line")?) {
            events.push(event);
        }
    }
    let body = search_document(run, &events, DOCUMENT_CAP);
    delete_document(tx, backend, run.id.as_str()).await?;
    let insert = match backend {
        // The FTS row shares the run row's rowid, so it is found and deleted by key.
        Backend::Sqlite => {
            "INSERT INTO run_docs (rowid, run_id, body) SELECT rowid, id, $2 FROM runs WHERE id = $1"
        }
        Backend::Postgres => "INSERT INTO run_docs (run_id, body) VALUES ($1, $2)",
    };
    tx.execute(insert, vec![run.id.as_str().into(), Arg::Text(body)])
        .await
        .map(drop)
}

/// Removes a run's full-text document, if any.
pub(crate) async fn delete_document(
    tx: &mut Tx,
    backend: Backend,
    run_id: &str,
) -> Result<(), sqlx::Error> {
    let sql = match backend {
        Backend::Sqlite => {
            "DELETE FROM run_docs WHERE rowid = (SELECT rowid FROM runs WHERE id = $1)"
        }
        Backend::Postgres => "DELETE FROM run_docs WHERE run_id = $1",
    };
    tx.execute(sql, vec![run_id.into()]).await.map(drop)
}

/// Indexes a whole run from its runlog's events with their lines: events (replacing any
/// that differ from the runlog's), row, and document when it ended.
pub(crate) async fn index_run(
    tx: &mut Tx,
    backend: Backend,
    run: &RunSummary,
    events: &[(RunEvent, String)],
) -> Result<(), sqlx::Error> {
    let columns: Vec<EventColumns> = events.iter().map(|(e, _)| EventColumns::of(e)).collect();
    let lines: Vec<(&str, &EventColumns, &str)> = events
        .iter()
        .zip(&columns)
        .map(|((_, line), columns)| (run.id.as_str(), columns, line.as_str()))
        .collect();
    insert_events(tx, &lines, true).await?;
    upsert_run(tx, run, true).await?;
    if run.ended_at.is_some() {
        write_document(tx, backend, run).await?;
    }
    Ok(())
}
