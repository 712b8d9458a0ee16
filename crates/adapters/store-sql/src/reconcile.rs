//! Keeping the index in line with the runlogs (the source of truth).
//!
//! - On open, cheaply: a one-time import of the `runs/` directory as it was before the store
//!   existed (remembered per root in `fabric_meta`), and runs marked `running` whose runlog
//!   on this machine has more lines than the index has events (a process killed between the
//!   two writes).
//! - `reindex()`: every runlog on disk the index lacks or is behind on, every run whose
//!   indexed events differ from its runlog's lines (issue #26: the runlog's replace them),
//!   then the vector index's counts and training (`vindex::refresh`).

use std::collections::{HashMap, HashSet};

use fabric_core::{Reindexed, StoreError};
use fabric_domain::{RunEvent, RunId};
use fabric_store_fs::RUNLOG_FILE;

use crate::db::{Arg, Conn, placeholders};
use crate::{SqlStore, index, vindex, writer};

/// The open-time part.
pub(crate) async fn catch_up(store: &SqlStore, mut conn: Conn) -> Result<usize, StoreError> {
    let key = format!("imported:{}", store.inner.root.display());
    let db = &store.inner.db;
    let imported = conn
        .fetch_optional(
            "SELECT value FROM fabric_meta WHERE key = $1",
            vec![key.as_str().into()],
        )
        .await
        .map_err(|e| store.err(&e))?;
    if imported.is_none() {
        drop(conn);
        let changed = reindex(store).await?.runs;
        db.execute(
            "INSERT INTO fabric_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            vec![key.as_str().into(), Arg::Text(fabric_core::unix_now().to_string())],
        )
        .await
        .map_err(|e| store.err(&e))?;
        if changed > 0 {
            tracing::info!(store = %store.inner.name, runs = changed, "imported the runs already on disk");
        }
        return Ok(changed);
    }
    let rows = conn
        .fetch_all(
            // The row's own count: a row is written with (or after) its events, so it is
            // behind whenever they are, and also when only the row lags (it is rewritten at
            // most once a second while the run goes on).
            "SELECT id, events AS n FROM runs WHERE status = 'running'",
            vec![],
        )
        .await
        .map_err(|e| store.err(&e))?;
    drop(conn);
    let mut changed = 0;
    for row in rows {
        let (Ok(id), Ok(indexed)) = (row.text("id"), row.int("n")) else {
            continue;
        };
        let Ok(id) = RunId::parse(&id) else { continue };
        let Some(lines) = runlog_lines(store, &id).await else {
            continue;
        };
        if lines > usize::try_from(indexed).unwrap_or(0) && reindex_run(store, &id, false).await? {
            changed += 1;
        }
    }
    Ok(changed)
}

/// Every run on disk the index lacks or is behind on, and every run whose indexed events
/// disagree with its runlog's lines (repaired: the runlog's replace them).
pub(crate) async fn reindex(store: &SqlStore) -> Result<Reindexed, StoreError> {
    let runs_dir = store.inner.fs.runs_dir();
    let mut entries = match tokio::fs::read_dir(&runs_dir).await {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Reindexed::default()),
        Err(e) => {
            return Err(StoreError::Io {
                action: "cannot read",
                path: runs_dir,
                detail: e.to_string(),
            });
        }
    };
    let db = &store.inner.db;
    // Each row's own count of events (see `catch_up`).
    let counts: HashMap<String, i64> = db
        .fetch_all("SELECT id, events AS n FROM runs", vec![])
        .await
        .map_err(|e| store.err(&e))?
        .iter()
        .filter_map(|r| Some((r.text("id").ok()?, r.int("n").ok()?)))
        .collect();
    // A queued run's events go to the database first and to its runlog second, and taking
    // it over rebuilds the runlog from the database (docs/DURABILITY.md): the database is
    // its truth, so it is only ever caught up, never "repaired" from a runlog.
    let queued: HashSet<String> = db
        .fetch_all("SELECT run_id FROM run_queue", vec![])
        .await
        .map_err(|e| store.err(&e))?
        .iter()
        .filter_map(|r| r.text("run_id").ok())
        .collect();
    let mut ids = Vec::new();
    while let Ok(Some(entry)) = entries.next_entry().await {
        if let Some(id) = entry
            .file_name()
            .to_str()
            .and_then(|n| RunId::parse(n).ok())
        {
            ids.push(id);
        }
    }
    let mut done = Reindexed::default();
    // The indexed events of a chunk of runs in one query, not one per run (issue #40).
    for chunk in ids.chunks(COMPARE_CHUNK) {
        let compared: Vec<&RunId> = chunk
            .iter()
            .filter(|id| counts.contains_key(id.as_str()) && !queued.contains(id.as_str()))
            .collect();
        let mut indexed = indexed_lines(store, &compared).await?;
        for id in chunk {
            let agreement = match counts.get(id.as_str()).copied() {
                None => Agreement::Behind,
                Some(n) if queued.contains(id.as_str()) => {
                    let Some(lines) = runlog_lines(store, id).await else {
                        continue;
                    };
                    if lines > usize::try_from(n).unwrap_or(0) {
                        Agreement::Behind
                    } else {
                        Agreement::Same
                    }
                }
                Some(n) => {
                    let rows = indexed.remove(id.as_str()).unwrap_or_default();
                    compare(store, id, n, &rows).await?
                }
            };
            settle(store, id, agreement, &mut done).await?;
        }
    }
    // The vector index too: counts, and lists to train (a database from before the index).
    vindex::refresh(store).await.map_err(|e| store.err(&e))?;
    Ok(done)
}

/// Runs whose indexed events one query of `reindex` reads.
const COMPARE_CHUNK: usize = 200;

/// Brings a run's index to its runlog as `agreement` says, counting it in `done`.
async fn settle(
    store: &SqlStore,
    id: &RunId,
    agreement: Agreement,
    done: &mut Reindexed,
) -> Result<(), StoreError> {
    match agreement {
        Agreement::Same => {}
        Agreement::Behind => {
            if reindex_run(store, id, false).await? {
                done.runs += 1;
            }
        }
        Agreement::Differs => {
            if reindex_run(store, id, true).await? {
                tracing::warn!(store = %store.inner.name, run = %id, "the index had events its runlog does not have; replaced them with the runlog's");
                done.runs += 1;
                done.repaired += 1;
            }
        }
    }
    Ok(())
}

/// An indexed event: its `seq` and its line as written (`None`: unreadable).
type IndexedRow = (Option<i64>, Option<String>);

/// The indexed events (`seq`, line as written) of these runs, per run, in `seq` order.
async fn indexed_lines(
    store: &SqlStore,
    ids: &[&RunId],
) -> Result<HashMap<String, Vec<IndexedRow>>, StoreError> {
    let mut by_run: HashMap<String, Vec<IndexedRow>> = HashMap::new();
    if ids.is_empty() {
        return Ok(by_run);
    }
    let sql = format!(
        "SELECT run_id, seq, line FROM events WHERE run_id IN ({}) ORDER BY run_id, seq",
        placeholders(1, ids.len())
    );
    let args = ids.iter().map(|id| id.as_str().into()).collect();
    let rows = store
        .inner
        .db
        .fetch_all(&sql, args)
        .await
        .map_err(|e| store.err(&e))?;
    for row in &rows {
        let Ok(run) = row.text("run_id") else {
            continue;
        };
        by_run
            .entry(run)
            .or_default()
            .push((row.int("seq").ok(), row.text("line").ok()));
    }
    Ok(by_run)
}

/// How a run's index stands against its runlog.
enum Agreement {
    /// Every event the same (or the runlog cannot be read: nothing to compare with).
    Same,
    /// The index lacks some of the runlog's events, or its row counts fewer.
    Behind,
    /// The index has an event the runlog does not: at a `seq` the runlog lacks, or another
    /// event at the same `seq`.
    Differs,
}

/// Compares the indexed events of a run (`rows`, whose row counts `row_events`) with its
/// runlog.
async fn compare(
    store: &SqlStore,
    id: &RunId,
    row_events: i64,
    rows: &[IndexedRow],
) -> Result<Agreement, StoreError> {
    // The index was read first, the runlog second: a running run's line reaches its
    // runlog before the index, so every event read there is in the runlog read now, and a
    // run going on meanwhile never looks damaged.
    let logged = match store.inner.fs.read_event_lines(id).await {
        Ok(logged) => logged,
        Err(e @ (StoreError::Corrupt { .. } | StoreError::Io { .. })) => {
            tracing::warn!(store = %store.inner.name, run = %id, error = %e, "cannot compare the index with an unreadable runlog");
            return Ok(Agreement::Same);
        }
        Err(StoreError::NotFound(_)) => return Ok(Agreement::Same),
        Err(e) => return Err(e),
    };
    let by_seq: HashMap<u64, &(RunEvent, String)> =
        logged.iter().map(|pair| (pair.0.seq, pair)).collect();
    let mut seen = HashSet::with_capacity(rows.len());
    for row in rows {
        let (Some(seq), Some(line)) = (row.0, row.1.as_deref()) else {
            return Ok(Agreement::Differs);
        };
        let seq = u64::try_from(seq).unwrap_or(u64::MAX);
        seen.insert(seq);
        let Some((event, logged_line)) = by_seq.get(&seq) else {
            return Ok(Agreement::Differs);
        };
        // A row indexed before lines were kept as written is the event re-serialised: the
        // same event in other bytes is no difference.
        if line != *logged_line
            && serde_json::from_str::<RunEvent>(line).ok().as_ref() != Some(event)
        {
            return Ok(Agreement::Differs);
        }
    }
    let missing = logged.iter().any(|(event, _)| !seen.contains(&event.seq));
    if missing || usize::try_from(row_events).unwrap_or(0) < logged.len() {
        Ok(Agreement::Behind)
    } else {
        Ok(Agreement::Same)
    }
}

/// The number of newline-terminated, non-empty lines of a run's runlog on this machine, if
/// it has one (a last line without its newline is not one yet: docs/RUNLOG.md).
async fn runlog_lines(store: &SqlStore, id: &RunId) -> Option<usize> {
    let path = store.inner.fs.run_dir(id).join(RUNLOG_FILE);
    let text = tokio::fs::read(&path).await.ok()?;
    let whole = text
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(&text[..0], |end| &text[..=end]);
    Some(
        whole
            .split(|b| *b == b'\n')
            .filter(|l| l.iter().any(|b| !b.is_ascii_whitespace()))
            .count(),
    )
}

/// Indexes one run from its runlog; `false` when the runlog cannot be read (logged).
/// `repair`: the index disagrees with the runlog, so the run's events are replaced by the
/// runlog's (those it does not have go) and its row with the runlog's, even when the old
/// row counted more events.
async fn reindex_run(store: &SqlStore, id: &RunId, repair: bool) -> Result<bool, StoreError> {
    let events = match store.inner.fs.read_event_lines(id).await {
        Ok(events) => events,
        Err(e @ (StoreError::Corrupt { .. } | StoreError::Io { .. })) => {
            tracing::warn!(store = %store.inner.name, run = %id, error = %e, "cannot index an unreadable runlog");
            return Ok(false);
        }
        Err(StoreError::NotFound(_)) => return Ok(false),
        Err(e) => return Err(e),
    };
    let summary = writer::summarise(id, &events);
    let backend = store.inner.db.backend();
    let result = async {
        let mut tx = store.inner.db.begin().await?;
        if repair {
            tx.execute(
                "DELETE FROM events WHERE run_id = $1",
                vec![id.as_str().into()],
            )
            .await?;
            // Rows only move forward (`upsert_run_rows`); the damaged row may count an
            // event the runlog does not have, so it is let go of first.
            tx.execute(
                "UPDATE runs SET events = 0 WHERE id = $1",
                vec![id.as_str().into()],
            )
            .await?;
        }
        index::index_run(&mut tx, backend, &summary, &events).await?;
        tx.commit().await
    }
    .await;
    result.map_err(|e| store.err(&e))?;
    Ok(true)
}
