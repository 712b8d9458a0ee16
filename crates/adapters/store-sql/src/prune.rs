//! `RunCatalog::prune`: deleting ended runs that started before a time, everywhere: rows,
//! events, embeddings and their vector codes, full-text documents, and the run directory (runlog and workspace).

use fabric_core::StoreError;
use fabric_domain::RunId;

use crate::db::{Arg, placeholders};
use crate::{SqlStore, index, vectors, vindex};

/// How many runs are deleted per transaction.
const CHUNK: usize = 200;

/// The ended runs that started before `before`, oldest id first.
pub(crate) async fn prunable(store: &SqlStore, before: f64) -> Result<Vec<RunId>, StoreError> {
    let rows = store
        .inner
        .db
        .fetch_all(
            "SELECT id FROM runs WHERE status NOT IN ('running', 'input_required') AND started_at < $1 ORDER BY id",
            vec![Arg::Real(before)],
        )
        .await
        .map_err(|e| store.err(&e))?;
    Ok(rows
        .iter()
        .filter_map(|r| r.text("id").ok())
        .filter_map(|id| RunId::parse(&id).ok())
        .collect())
}

pub(crate) async fn prune(store: &SqlStore, before: f64) -> Result<Vec<RunId>, StoreError> {
    let db = &store.inner.db;
    let ids = prunable(store, before).await?;
    let backend = db.backend();
    for chunk in ids.chunks(CHUNK) {
        if let Some(hook) = store.inner.prune_hook.get() {
            for id in chunk {
                // A runlog that cannot be read has nothing a hook could use.
                let events = fabric_core::RunStore::read_events(&store.inner.fs, id)
                    .await
                    .unwrap_or_default();
                hook.before_delete(id, &events).await;
            }
        }
        let result = async {
            let mut tx = db.begin().await?;
            for id in chunk {
                index::delete_document(&mut tx, backend, id.as_str()).await?;
            }
            let list = placeholders(1, chunk.len());
            let args: Vec<Arg> = chunk.iter().map(|id| id.as_str().into()).collect();
            for sql in [
                format!("DELETE FROM events WHERE run_id IN ({list})"),
                format!("DELETE FROM embeddings WHERE run_id IN ({list})"),
                // Their codes in packed chunks stay until the next training (vlists).
                format!("DELETE FROM vector_codes WHERE run_id IN ({list})"),
                format!("DELETE FROM run_specialists WHERE run_id IN ({list})"),
                format!("DELETE FROM run_models WHERE run_id IN ({list})"),
                // Checked again: a run cannot go back to running, but be exact.
                format!("DELETE FROM runs WHERE id IN ({list}) AND status NOT IN ('running', 'input_required')"),
            ] {
                tx.execute(&sql, args.clone()).await?;
            }
            vectors::bump_generation(&mut tx).await?;
            tx.commit().await
        }
        .await;
        result.map_err(|e| store.err(&e))?;
        for id in chunk {
            let dir = store.inner.fs.run_dir(id);
            // Without recursion (issue #31): a workspace may hold a tree of any depth.
            let target = dir.clone();
            let removed =
                tokio::task::spawn_blocking(move || fabric_core::fs::remove_tree(&target))
                    .await
                    .unwrap_or_else(|e| Err(std::io::Error::other(e)));
            match removed {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(StoreError::Io {
                        action: "cannot delete",
                        path: dir,
                        detail: e.to_string(),
                    });
                }
            }
        }
    }
    // Recount the vectors; lists halved by the prune are retrained (or dropped).
    vindex::refresh(store).await.map_err(|e| store.err(&e))?;
    Ok(ids)
}
