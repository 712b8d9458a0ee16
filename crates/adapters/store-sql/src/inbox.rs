//! A run's inbox (issue #42): what people said to a run and answers to its questions, left
//! by any process that shares the store and taken once by the process running the run.

use fabric_core::ports::InboxItem;
use fabric_core::{StoreError, unix_now};
use fabric_domain::RunId;

use crate::SqlStore;

/// Leaves `item` for run `id`.
pub(crate) async fn post(store: &SqlStore, id: &RunId, item: &InboxItem) -> Result<(), StoreError> {
    let body = serde_json::to_string(item)
        .map_err(|e| StoreError::InvalidQuery(format!("cannot write the message: {e}")))?;
    store
        .inner
        .db
        .execute(
            "INSERT INTO run_inbox (run_id, body, created_at) VALUES ($1, $2, $3)",
            vec![id.as_str().into(), body.into(), unix_now().into()],
        )
        .await
        .map_err(|e| store.err(&e))?;
    Ok(())
}

/// Takes what was left for run `id`, oldest first. One `DELETE … RETURNING`, so two takers never get
/// the same item; an item that does not read (from a newer fabric) is dropped with a warning.
pub(crate) async fn take(store: &SqlStore, id: &RunId) -> Result<Vec<InboxItem>, StoreError> {
    // Asked at every step of every run: an empty inbox (nearly always) is answered by a read
    // of the index, not a write that would queue behind SQLite's one writer.
    let waiting = store
        .inner
        .db
        .fetch_optional(
            "SELECT seq FROM run_inbox WHERE run_id = $1 LIMIT 1",
            vec![id.as_str().into()],
        )
        .await
        .map_err(|e| store.err(&e))?;
    if waiting.is_none() {
        return Ok(Vec::new());
    }
    let mut rows = store
        .inner
        .db
        .fetch_all(
            "DELETE FROM run_inbox WHERE run_id = $1 RETURNING seq, body",
            vec![id.as_str().into()],
        )
        .await
        .map_err(|e| store.err(&e))?;
    rows.sort_by_key(|row| row.int("seq").unwrap_or_default());
    let mut items = Vec::with_capacity(rows.len());
    for row in rows {
        let body = row.text("body").map_err(|e| store.err(&e))?;
        match serde_json::from_str(&body) {
            Ok(item) => items.push(item),
            Err(e) => {
                tracing::warn!(run_id = %id, error = %e, "an inbox item that does not read was dropped")
            }
        }
    }
    Ok(items)
}
