//! `RunCatalog::search`: full-text (SQLite FTS5 with bm25, PostgreSQL `tsvector` + GIN with
//! `ts_rank`), semantic (cosine over the model's vectors, exact or through the IVF index
//! of `vindex`), and hybrid by default when an
//! embedding is given: reciprocal-rank fusion of both rankings, so a run without an
//! embedding is still found by its words.

use std::collections::HashMap;

use fabric_core::{SearchHit, SearchQuery, StoreError};

use crate::db::{Arg, Backend, placeholders};
use crate::document::{fts5_query, plain_query, query_words, search_terms, snippet};
use crate::filters::filters;
use crate::queries::summaries;
use crate::{SqlStore, vectors};

/// Reciprocal-rank fusion's damping constant (the usual 60).
const RRF_K: f64 = 60.0;
/// Characters of context each side of a snippet's match.
const SNIPPET_RADIUS: usize = 80;

pub(crate) async fn search(
    store: &SqlStore,
    query: &SearchQuery,
) -> Result<Vec<SearchHit>, StoreError> {
    let given = query_words(&query.text);
    let words = search_terms(&given);
    if query.semantic_only && query.embedding.is_none() {
        return Err(StoreError::InvalidQuery(
            "a semantic search needs the query's embedding: configure an embeddings model".into(),
        ));
    }
    if words.is_empty() && query.embedding.is_none() {
        return Err(StoreError::InvalidQuery(match given.is_empty() {
            true => "nothing to search for: give some words".into(),
            false => format!(
                "nothing to search for: {} too common for a text search, which leaves out English stopwords; give other words",
                given
                    .iter()
                    .map(|w| format!("`{w}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
                    + if given.len() == 1 { " is" } else { " are" }
            ),
        }));
    }
    if query.limit == 0 {
        return Ok(Vec::new());
    }
    // Each ranking contributes this many candidates to the fusion.
    let depth = (query.limit * 4).clamp(20, 400);

    // Both rankings at once: each is a query of its own (on SQLite, its own connection).
    let text = async {
        if query.semantic_only || words.is_empty() {
            Ok(Vec::new())
        } else {
            text_ranking(store, query, &words, depth).await
        }
    };
    let semantic = async {
        match &query.embedding {
            Some(embedding) => vectors::semantic(store, query, embedding, depth)
                .await
                .map(Some),
            None => Ok(None),
        }
    };
    let (text, scorer) = tokio::try_join!(text, semantic)?;
    let semantic = scorer
        .as_ref()
        .map(|found| found.ranked.clone())
        .unwrap_or_default();

    let text_scores: HashMap<&str, f64> = text.iter().map(|(id, s)| (id.as_str(), *s)).collect();
    let mut fused: HashMap<String, f64> = HashMap::new();
    let order: Vec<(String, f64)> = if query.embedding.is_none() {
        text.clone()
    } else if query.semantic_only {
        semantic.clone()
    } else {
        for ranking in [&text, &semantic] {
            for (rank, (id, _)) in ranking.iter().enumerate() {
                *fused.entry(id.clone()).or_default() += 1.0 / (RRF_K + rank as f64 + 1.0);
            }
        }
        let mut order: Vec<(String, f64)> = fused.into_iter().collect();
        order.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
        order
    };
    let order: Vec<(String, f64)> = order.into_iter().take(query.limit).collect();
    let ids: Vec<String> = order.iter().map(|(id, _)| id.clone()).collect();
    let runs = summaries(store, &ids).await?;
    let bodies = documents(store, &ids).await?;
    let similarities = match (&scorer, &query.embedding) {
        (Some(scorer), Some(embedding)) => scorer.similarities(store, embedding, &ids).await?,
        _ => HashMap::new(),
    };

    let mut hits = Vec::with_capacity(runs.len());
    for run in runs {
        let id = run.id.as_str().to_owned();
        let score = order
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, s)| *s)
            .unwrap_or_default();
        let semantic_score = similarities.get(&id).copied();
        let text_of = bodies.get(&id).map(String::as_str).unwrap_or(&run.prompt);
        hits.push(SearchHit {
            score,
            text_score: text_scores.get(id.as_str()).copied(),
            semantic_score,
            snippet: snippet(text_of, &words, SNIPPET_RADIUS),
            run,
        });
    }
    Ok(hits)
}

/// Runs whose document has all the words, best first, with their text score (higher is
/// better).
async fn text_ranking(
    store: &SqlStore,
    query: &SearchQuery,
    words: &[String],
    depth: usize,
) -> Result<Vec<(String, f64)>, StoreError> {
    let backend = store.inner.db.backend();
    let mut args = vec![Arg::Text(match backend {
        Backend::Sqlite => fts5_query(words),
        Backend::Postgres => plain_query(words),
    })];
    let filters = filters(query, &mut args);
    args.push(Arg::Int(i64::try_from(depth).unwrap_or(i64::MAX)));
    let limit = args.len();
    // Without filters the ranking runs on the text index alone and only the best `depth`
    // are joined to their runs (at 100k runs a topic word matches thousands). PostgreSQL
    // ranks by `ts_rank` (term frequency) rather than `ts_rank_cd` (cover density), which
    // reads every match's positions and costs about twice as much.
    let sql = match (backend, filters.is_empty()) {
        (Backend::Sqlite, true) => format!(
            "SELECT r.id AS id, -m.rank AS score FROM (SELECT rowid, rank FROM run_docs \
             WHERE run_docs MATCH $1 ORDER BY rank LIMIT ${limit}) m JOIN runs r ON r.rowid = m.rowid \
             ORDER BY m.rank"
        ),
        (Backend::Sqlite, false) => format!(
            "SELECT r.id AS id, -bm25(run_docs) AS score FROM run_docs JOIN runs r ON r.rowid = run_docs.rowid \
             WHERE run_docs MATCH $1{filters} ORDER BY bm25(run_docs) LIMIT ${limit}"
        ),
        (Backend::Postgres, true) => format!(
            "SELECT d.run_id AS id, CAST(ts_rank(d.tsv, q) AS DOUBLE PRECISION) AS score \
             FROM run_docs d, plainto_tsquery('english', $1) q \
             WHERE d.tsv @@ q ORDER BY score DESC, d.run_id DESC LIMIT ${limit}"
        ),
        (Backend::Postgres, false) => format!(
            "SELECT r.id AS id, CAST(ts_rank(d.tsv, q) AS DOUBLE PRECISION) AS score \
             FROM run_docs d JOIN runs r ON r.id = d.run_id, plainto_tsquery('english', $1) q \
             WHERE d.tsv @@ q{filters} ORDER BY score DESC, r.id DESC LIMIT ${limit}"
        ),
    };
    let rows = store
        .inner
        .db
        .fetch_all(&sql, args)
        .await
        .map_err(|e| store.err(&e))?;
    rows.iter()
        .map(|r| Ok((r.text("id")?, r.real("score")?)))
        .collect::<Result<_, sqlx::Error>>()
        .map_err(|e| store.err(&e))
}

/// The full-text documents of these runs, by id.
async fn documents(
    store: &SqlStore,
    ids: &[String],
) -> Result<HashMap<String, String>, StoreError> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let list = placeholders(1, ids.len());
    let sql = match store.inner.db.backend() {
        Backend::Sqlite => format!(
            "SELECT r.id AS id, d.body AS body FROM run_docs d JOIN runs r ON r.rowid = d.rowid WHERE r.id IN ({list})"
        ),
        Backend::Postgres => {
            format!("SELECT run_id AS id, body FROM run_docs WHERE run_id IN ({list})")
        }
    };
    let rows = store
        .inner
        .db
        .fetch_all(&sql, ids.iter().map(|id| Arg::Text(id.clone())).collect())
        .await
        .map_err(|e| store.err(&e))?;
    Ok(rows
        .iter()
        .filter_map(|r| Some((r.text("id").ok()?, r.text("body").ok()?)))
        .collect())
}
