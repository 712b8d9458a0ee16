//! The vector index's lists on disk (ADR-041, ADR-042): each list's int8 codes packed into
//! chunks of up to [`CHUNK_MAX`] vectors (`vector_chunks`: the run ids joined by newlines,
//! the codes end to end), plus a short tail of single rows (`vector_codes`) for vectors put
//! since. A query reads a few dozen rows instead of one row per vector: per row, both
//! drivers pay far more than the bytes cost.
//!
//! A vector put after training goes to its list's tail; once the tail holds [`TAIL_MAX`]
//! codes it is packed into a new chunk, in the same transaction. A replaced or pruned
//! vector's old code may stay in a chunk until the next training: the scan keeps each run
//! once, and the exact re-ranking reads the current vector (a pruned run has none and drops
//! out), so a stale code costs a candidate slot, never a wrong score.

use std::collections::HashSet;

use crate::SqlStore;
use crate::db::{Arg, Row, Tx, placeholders};
use crate::ivf::{self, Trained};

/// Most vectors in one chunk (about 200 KB at 768 dimensions).
const CHUNK_MAX: usize = 256;
/// Tail codes of one list that are packed into a chunk: `StoreOptions::vector_tail_max`'s
/// default.
pub(crate) const TAIL_MAX: usize = 64;

/// Packs every tail code of one list into new chunks, inside the caller's transaction. The
/// caller holds the model's `vector_index` row (PostgreSQL: row lock; SQLite: the write
/// lock), so no put adds to this tail meanwhile.
pub(crate) async fn pack_list(
    tx: &mut Tx,
    model: &str,
    version: i64,
    list: i64,
) -> Result<(), sqlx::Error> {
    let key = || vec![model.into(), Arg::Int(version), Arg::Int(list)];
    let rows = tx
        .fetch_all(
            "SELECT run_id, code FROM vector_codes WHERE model = $1 AND version = $2 AND list_id = $3 ORDER BY run_id",
            key(),
        )
        .await?;
    if rows.is_empty() {
        return Ok(());
    }
    let next = tx
        .fetch_all(
            "SELECT COALESCE(MAX(chunk), -1) + 1 AS n FROM vector_chunks WHERE model = $1 AND version = $2 AND list_id = $3",
            key(),
        )
        .await?
        .first()
        .map(|r| r.int("n"))
        .transpose()?
        .unwrap_or(0);
    for (chunk, part) in (next..).zip(rows.chunks(CHUNK_MAX)) {
        let (mut ids, mut codes) = (String::new(), Vec::new());
        for row in part {
            if !ids.is_empty() {
                ids.push('\n');
            }
            ids.push_str(&row.text("run_id")?);
            codes.extend(row.blob("code")?);
        }
        let mut args = key();
        args.extend([Arg::Int(chunk), Arg::Text(ids), Arg::Blob(codes)]);
        tx.execute(
            "INSERT INTO vector_chunks (model, version, list_id, chunk, ids, codes) VALUES ($1, $2, $3, $4, $5, $6)",
            args,
        )
        .await?;
    }
    tx.execute(
        "DELETE FROM vector_codes WHERE model = $1 AND version = $2 AND list_id = $3",
        key(),
    )
    .await
    .map(drop)
}

/// How many codes wait in one list's tail.
pub(crate) async fn tail_len(
    tx: &mut Tx,
    model: &str,
    version: i64,
    list: i64,
) -> Result<i64, sqlx::Error> {
    tx.fetch_all(
        "SELECT COUNT(*) AS n FROM vector_codes WHERE model = $1 AND version = $2 AND list_id = $3",
        vec![model.into(), Arg::Int(version), Arg::Int(list)],
    )
    .await?
    .first()
    .map_or(Ok(0), |r| r.int("n"))
}

/// Scores one chunk's codes against `query`; a chunk whose sizes do not add up is skipped.
fn score_chunk(row: &Row, query: &[f32], out: &mut Vec<(String, f32)>) {
    let (Ok(ids), Ok(codes)) = (row.text("ids"), row.blob("codes")) else {
        return;
    };
    let width = 4 + query.len();
    let count = ids.split('\n').count();
    if codes.len() != count * width {
        tracing::warn!(
            vectors = count,
            bytes = codes.len(),
            "skipping a vector index chunk whose size does not match; `fabric index rebuild` retrains"
        );
        return;
    }
    for (id, code) in ids.split('\n').zip(codes.chunks_exact(width)) {
        if let Some(score) = ivf::approx_dot(code, query) {
            out.push((id.to_owned(), score));
        }
    }
}

/// The candidates in the `probes` lists nearest `query` (a unit vector), by their codes'
/// approximate similarity, best first, each run once.
pub(crate) async fn scan(
    store: &SqlStore,
    model: &str,
    trained: &Trained,
    query: &[f32],
    probes: usize,
) -> Result<Vec<(String, f32)>, sqlx::Error> {
    let lists = ivf::nearest(&trained.centroids, trained.dims, query, probes);
    let mut args: Vec<Arg> = vec![model.into(), Arg::Int(trained.version)];
    args.extend(
        lists
            .iter()
            .map(|l| Arg::Int(i64::try_from(*l).unwrap_or(i64::MAX))),
    );
    let wanted = placeholders(3, lists.len());
    let db = &store.inner.db;
    // The tail first: a pack committed between the two reads moves codes from the tail
    // into a chunk, so they are read twice (and kept once), never missed.
    let tail = db
        .fetch_all(
            &format!(
                "SELECT run_id, code FROM vector_codes WHERE model = $1 AND version = $2 AND list_id IN ({wanted})"
            ),
            args.clone(),
        )
        .await?;
    let chunks = db
        .fetch_all(
            &format!(
                "SELECT ids, codes FROM vector_chunks WHERE model = $1 AND version = $2 AND list_id IN ({wanted})"
            ),
            args,
        )
        .await?;
    let mut scored: Vec<(String, f32)> = Vec::with_capacity(chunks.len() * CHUNK_MAX);
    for row in &chunks {
        score_chunk(row, query, &mut scored);
    }
    scored.extend(tail.iter().filter_map(|r| {
        let code = r.blob("code").ok()?;
        Some((r.text("run_id").ok()?, ivf::approx_dot(&code, query)?))
    }));
    scored.sort_unstable_by(|a, b| b.1.total_cmp(&a.1));
    // A run re-embedded since its list was packed has an older code too: keep its best
    // (marked by reference, so no id is copied on this path).
    let keep: Vec<bool> = {
        let mut seen = HashSet::with_capacity(scored.len());
        scored
            .iter()
            .map(|(id, _)| seen.insert(id.as_str()))
            .collect()
    };
    Ok(scored
        .into_iter()
        .zip(keep)
        .filter_map(|(hit, keep)| keep.then_some(hit))
        .collect())
}
