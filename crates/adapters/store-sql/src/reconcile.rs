//! Keeping the index in line with the runlogs (the source of truth).
//!
//! - On open, cheaply: a one-time import of the `runs/` directory as it was before the store
//!   existed (remembered per root in `fabric_meta`), and runs marked `running` whose runlog
//!   on this machine has more lines than the index has events (a process killed between the
//!   two writes).
//! - `reindex()`: every runlog on disk the index lacks or is behind on, then the vector
//!   index's counts and training (`vindex::refresh`).

use std::collections::HashMap;

use fabric_core::{RunStore, StoreError};
use fabric_domain::{RunId, RunSummary};
use fabric_store_fs::RUNLOG_FILE;

use crate::db::Arg;
use crate::{SqlStore, index, vindex};

/// The open-time part.
pub(crate) async fn catch_up(store: &SqlStore) -> Result<usize, StoreError> {
    let key = format!("imported:{}", store.inner.root.display());
    let db = &store.inner.db;
    let imported = db
        .fetch_optional(
            "SELECT value FROM fabric_meta WHERE key = $1",
            vec![key.as_str().into()],
        )
        .await
        .map_err(|e| store.err(&e))?;
    if imported.is_none() {
        let changed = reindex(store).await?;
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
    let rows = db
        .fetch_all(
            // The row's own count: a row is written with (or after) its events, so it is
            // behind whenever they are, and also when only the row lags (it is rewritten at
            // most once a second while the run goes on).
            "SELECT id, events AS n FROM runs WHERE status = 'running'",
            vec![],
        )
        .await
        .map_err(|e| store.err(&e))?;
    let mut changed = 0;
    for row in rows {
        let (Ok(id), Ok(indexed)) = (row.text("id"), row.int("n")) else {
            continue;
        };
        let Ok(id) = RunId::parse(&id) else { continue };
        let Some(lines) = runlog_lines(store, &id).await else {
            continue;
        };
        if lines > usize::try_from(indexed).unwrap_or(0) && reindex_run(store, &id).await? {
            changed += 1;
        }
    }
    Ok(changed)
}

/// Every run on disk the index lacks, or has fewer events of than its runlog.
pub(crate) async fn reindex(store: &SqlStore) -> Result<usize, StoreError> {
    let runs_dir = store.inner.fs.runs_dir();
    let mut entries = match tokio::fs::read_dir(&runs_dir).await {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
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
    let mut changed = 0;
    while let Ok(Some(entry)) = entries.next_entry().await {
        let Some(id) = entry
            .file_name()
            .to_str()
            .and_then(|n| RunId::parse(n).ok())
        else {
            continue;
        };
        let Some(lines) = runlog_lines(store, &id).await else {
            continue;
        };
        let indexed = counts.get(id.as_str()).copied();
        let behind = indexed.is_none_or(|n| lines > usize::try_from(n).unwrap_or(0));
        if behind && reindex_run(store, &id).await? {
            changed += 1;
        }
    }
    // The vector index too: counts, and lists to train (a database from before the index).
    vindex::refresh(store).await.map_err(|e| store.err(&e))?;
    Ok(changed)
}

/// The number of non-empty lines of a run's runlog on this machine, if it has one.
async fn runlog_lines(store: &SqlStore, id: &RunId) -> Option<usize> {
    let path = store.inner.fs.run_dir(id).join(RUNLOG_FILE);
    let text = tokio::fs::read(&path).await.ok()?;
    Some(
        text.split(|b| *b == b'\n')
            .filter(|l| l.iter().any(|b| !b.is_ascii_whitespace()))
            .count(),
    )
}

/// Indexes one run from its runlog; `false` when the runlog cannot be read (logged).
async fn reindex_run(store: &SqlStore, id: &RunId) -> Result<bool, StoreError> {
    let events = match store.inner.fs.read_events(id).await {
        Ok(events) => events,
        Err(e @ (StoreError::Corrupt { .. } | StoreError::Io { .. })) => {
            tracing::warn!(store = %store.inner.name, run = %id, error = %e, "cannot index an unreadable runlog");
            return Ok(false);
        }
        Err(StoreError::NotFound(_)) => return Ok(false),
        Err(e) => return Err(e),
    };
    let summary = RunSummary::from_events(id.clone(), &events);
    let backend = store.inner.db.backend();
    let result = async {
        let mut tx = store.inner.db.begin().await?;
        index::index_run(&mut tx, backend, &summary, &events).await?;
        tx.commit().await
    }
    .await;
    result.map_err(|e| store.err(&e))?;
    Ok(true)
}
