//! The filters of a search (specialist, status, since) as SQL, shared by the full-text and
//! the vector rankings: a leaf, so `search` and `vectors` need not import each other.

use fabric_core::{SearchQuery, StoreError};

use crate::SqlStore;
use crate::db::{Arg, placeholders};

/// The filters of a search as SQL conditions on `r` (the `runs` row), numbered from `first`.
pub(crate) fn filters(query: &SearchQuery, args: &mut Vec<Arg>) -> String {
    let mut sql = String::new();
    if let Some(specialist) = &query.specialist {
        args.push(specialist.as_str().into());
        sql.push_str(&format!(
            " AND EXISTS (SELECT 1 FROM run_specialists s WHERE s.specialist_id = ${} AND s.run_id = r.id)",
            args.len()
        ));
    }
    if let Some(status) = query.status {
        args.push(status.as_str().into());
        sql.push_str(&format!(" AND r.status = ${}", args.len()));
    }
    if let Some(since) = query.since {
        args.push(Arg::Real(since));
        sql.push_str(&format!(" AND r.started_at >= ${}", args.len()));
    }
    sql
}

fn has_filters(query: &SearchQuery) -> bool {
    query.specialist.is_some() || query.status.is_some() || query.since.is_some()
}

/// The first `depth` runs of a vector ranking that pass the filters, checked in chunks.
pub(crate) async fn filtered(
    store: &SqlStore,
    query: &SearchQuery,
    ranked: Vec<(String, f64)>,
    depth: usize,
) -> Result<Vec<(String, f64)>, StoreError> {
    if !has_filters(query) {
        return Ok(ranked.into_iter().take(depth).collect());
    }
    let mut out = Vec::new();
    for chunk in ranked.chunks(500) {
        let mut args: Vec<Arg> = chunk.iter().map(|(id, _)| Arg::Text(id.clone())).collect();
        let filters = filters(query, &mut args);
        let sql = format!(
            "SELECT r.id AS id FROM runs r WHERE r.id IN ({}){filters}",
            placeholders(1, chunk.len())
        );
        let rows = store
            .inner
            .db
            .fetch_all(&sql, args)
            .await
            .map_err(|e| store.err(&e))?;
        let pass: std::collections::HashSet<String> =
            rows.iter().filter_map(|r| r.text("id").ok()).collect();
        out.extend(chunk.iter().filter(|(id, _)| pass.contains(id)).cloned());
        if out.len() >= depth {
            break;
        }
    }
    out.truncate(depth);
    Ok(out)
}
