//! Embeddings: stored as little-endian `f32` blobs (`BLOB` / `bytea`), searched by cosine
//! similarity. Below `StoreOptions::vector_index_min` (5,000) vectors of a model the search is exact: a
//! store keeps the model's vectors in memory, normalised and packed, after the first
//! semantic search, and reloads them only when `fabric_meta`'s `embeddings_generation`
//! (bumped by every change, from any process) moved. From there on, the model's IVF index
//! (`vindex`) answers, reading only the nearest lists and re-ranking exactly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fabric_core::{QueryEmbedding, SearchQuery, StoreError};
use fabric_domain::RunId;

use crate::db::Arg;
use crate::ivf::{decode, encode, normalised};
use crate::queries::{SUMMARY_COLUMNS, summary};
use crate::{SqlStore, filters, vindex, vlists};

const GENERATION_KEY: &str = "embeddings_generation";

/// One model's vectors, normalised, in one block.
#[derive(Debug, Default)]
pub(crate) struct ModelVectors {
    generation: String,
    dims: usize,
    ids: Vec<String>,
    positions: HashMap<String, usize>,
    data: Vec<f32>,
}

impl ModelVectors {
    /// Every run's cosine similarity to `query`, best first (none when dimensions differ).
    pub(crate) fn ranked(&self, query: &[f32]) -> Vec<(String, f64)> {
        if query.len() != self.dims || self.dims == 0 {
            return Vec::new();
        }
        let query = normalised(query.to_vec());
        let mut scored: Vec<(usize, f32)> = self
            .data
            .chunks_exact(self.dims)
            .map(|v| v.iter().zip(&query).map(|(a, b)| a * b).sum::<f32>())
            .enumerate()
            .collect();
        scored.sort_unstable_by(|a, b| b.1.total_cmp(&a.1));
        scored
            .into_iter()
            .map(|(i, s)| (self.ids[i].clone(), f64::from(s)))
            .collect()
    }

    /// One run's cosine similarity to `query`, if it has a vector.
    pub(crate) fn similarity(&self, id: &str, query: &[f32]) -> Option<f64> {
        let at = *self.positions.get(id)?;
        if query.len() != self.dims {
            return None;
        }
        let query = normalised(query.to_vec());
        let v = &self.data[at * self.dims..(at + 1) * self.dims];
        Some(f64::from(
            v.iter().zip(&query).map(|(a, b)| a * b).sum::<f32>(),
        ))
    }
}

/// The per-store cache of vectors by model.
#[derive(Debug, Default)]
pub(crate) struct VectorCache {
    models: Mutex<HashMap<String, Arc<ModelVectors>>>,
    /// Trained IVF centroids by model (`vindex`).
    pub(crate) centroids: vindex::CentroidCache,
}

/// The current generation of the embeddings (any process's change moves it).
async fn generation(store: &SqlStore) -> Result<String, StoreError> {
    Ok(store
        .inner
        .db
        .fetch_optional(
            "SELECT value FROM fabric_meta WHERE key = $1",
            vec![GENERATION_KEY.into()],
        )
        .await
        .map_err(|e| store.err(&e))?
        .and_then(|r| r.text("value").ok())
        .unwrap_or_default())
}

/// The vectors of `model`, from the cache when it is current.
pub(crate) async fn model_vectors(
    store: &SqlStore,
    model: &str,
) -> Result<Arc<ModelVectors>, StoreError> {
    let current = generation(store).await?;
    let cache = &store.inner.vectors;
    if let Some(cached) = cache
        .models
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(model)
        .filter(|m| m.generation == current)
    {
        return Ok(cached.clone());
    }
    let rows = store
        .inner
        .db
        .fetch_all(
            "SELECT run_id, dims, vector FROM embeddings WHERE model = $1",
            vec![model.into()],
        )
        .await
        .map_err(|e| store.err(&e))?;
    let mut loaded = ModelVectors {
        generation: current,
        ..ModelVectors::default()
    };
    for row in rows {
        let (Ok(id), Ok(bytes)) = (row.text("run_id"), row.blob("vector")) else {
            continue;
        };
        let Some(vector) = decode(&bytes) else {
            continue;
        };
        // One model has one dimension; the first vector sets it, odd ones are skipped.
        if loaded.dims == 0 {
            loaded.dims = vector.len();
        }
        if vector.len() != loaded.dims {
            continue;
        }
        loaded.positions.insert(id.clone(), loaded.ids.len());
        loaded.ids.push(id);
        loaded.data.extend(normalised(vector));
    }
    let loaded = Arc::new(loaded);
    cache
        .models
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(model.to_owned(), loaded.clone());
    Ok(loaded)
}

/// Stores (or replaces) a run's embedding of `model`.
pub(crate) async fn put_embedding(
    store: &SqlStore,
    id: &RunId,
    model: &str,
    vector: &[f32],
) -> Result<(), StoreError> {
    if vector.is_empty() || vector.iter().any(|x| !x.is_finite()) {
        return Err(StoreError::InvalidQuery(format!(
            "the embedding of run {id} is empty or not finite"
        )));
    }
    let dims = i64::try_from(vector.len()).unwrap_or(i64::MAX);
    let unit = normalised(vector.to_vec());
    // The run's row is written behind its runlog: have it before attaching a vector.
    crate::writer::flush(&store.inner.writer).await;
    let result = async {
        let mut tx = store.inner.db.begin().await?;
        let new = tx
            .fetch_all(
                "SELECT 1 AS one FROM embeddings WHERE model = $1 AND run_id = $2",
                vec![model.into(), id.as_str().into()],
            )
            .await?
            .is_empty();
        let changed = tx
            .execute(
                "INSERT INTO embeddings (run_id, model, dims, vector) SELECT id, $2, $3, $4 FROM runs WHERE id = $1 \
                 ON CONFLICT (model, run_id) DO UPDATE SET dims = excluded.dims, vector = excluded.vector",
                vec![
                    id.as_str().into(),
                    model.into(),
                    Arg::Int(dims),
                    Arg::Blob(encode(vector)),
                ],
            )
            .await?;
        if changed == 0 {
            return Ok((changed, None));
        }
        let counts = vindex::add(store, &mut tx, model, id.as_str(), &unit, new).await?;
        bump_generation(&mut tx).await?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>((changed, Some(counts)))
    }
    .await
    .map_err(|e| store.err(&e))?;
    let (changed, counts) = result;
    if changed == 0 {
        return Err(StoreError::NotFound(id.clone()));
    }
    if counts.is_some_and(vindex::Counts::need_training)
        && let Some(_guard) = store.inner.vectors.centroids.start_training(model)
        && let Err(e) = vindex::train(store, model).await
    {
        // The vector is stored and search stays right (exact, or the previous lists); the
        // next put or `fabric index rebuild` tries again.
        tracing::warn!(store = %store.inner.name, model, error = %store.err(&e), "could not train the vector index");
    }
    Ok(())
}

/// A semantic ranking, and how to score other runs against the same query.
pub(crate) struct Semantic {
    /// The first `depth` runs passing the filters, best first.
    pub(crate) ranked: Vec<(String, f64)>,
    exact: Option<Arc<ModelVectors>>,
    scores: HashMap<String, f64>,
}

/// Ranks runs by similarity to the query's embedding: exactly below the index threshold,
/// else through the model's IVF index (nearest lists by code, the best re-ranked exactly),
/// reading more lists while the filters leave fewer than `depth` runs.
pub(crate) async fn semantic(
    store: &SqlStore,
    query: &SearchQuery,
    embedding: &QueryEmbedding,
    depth: usize,
) -> Result<Semantic, StoreError> {
    let err = |e: sqlx::Error| store.err(&e);
    let trained = vindex::trained(store, &embedding.model)
        .await
        .map_err(err)?
        .filter(|t| t.dims == embedding.vector.len());
    let Some(trained) = trained else {
        let model = model_vectors(store, &embedding.model).await?;
        let ranked =
            filters::filtered(store, query, model.ranked(&embedding.vector), depth).await?;
        return Ok(Semantic {
            ranked,
            exact: Some(model),
            scores: HashMap::new(),
        });
    };
    let unit = normalised(embedding.vector.clone());
    let mut probes = trained.probes();
    loop {
        let approx = vlists::scan(store, &embedding.model, &trained, &unit, probes)
            .await
            .map_err(err)?;
        let rerank = (depth * 2).max(100).min(approx.len());
        let ids: Vec<String> = approx[..rerank].iter().map(|(id, _)| id.clone()).collect();
        let scores = vindex::exact_scores(store, &embedding.model, &unit, &ids)
            .await
            .map_err(err)?;
        let mut ranked: Vec<(String, f64)> = ids
            .into_iter()
            .filter_map(|id| scores.get(&id).map(|s| (id, *s)))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        ranked.extend(
            approx[rerank..]
                .iter()
                .map(|(id, s)| (id.clone(), f64::from(*s))),
        );
        let ranked = filters::filtered(store, query, ranked, depth).await?;
        if ranked.len() >= depth || probes >= trained.lists {
            return Ok(Semantic {
                ranked,
                exact: None,
                scores,
            });
        }
        probes = (probes * 4).min(trained.lists);
    }
}

impl Semantic {
    /// The exact similarity of each of `ids` that has a vector of the query's model.
    pub(crate) async fn similarities(
        &self,
        store: &SqlStore,
        embedding: &QueryEmbedding,
        ids: &[String],
    ) -> Result<HashMap<String, f64>, StoreError> {
        if let Some(model) = &self.exact {
            return Ok(ids
                .iter()
                .filter_map(|id| Some((id.clone(), model.similarity(id, &embedding.vector)?)))
                .collect());
        }
        let missing: Vec<String> = ids
            .iter()
            .filter(|id| !self.scores.contains_key(*id))
            .cloned()
            .collect();
        let unit = normalised(embedding.vector.clone());
        let mut found = vindex::exact_scores(store, &embedding.model, &unit, &missing)
            .await
            .map_err(|e| store.err(&e))?;
        for id in ids {
            if let Some(s) = self.scores.get(id) {
                found.insert(id.clone(), *s);
            }
        }
        Ok(found)
    }
}

/// Moves the embeddings generation on, inside a writing transaction.
pub(crate) async fn bump_generation(tx: &mut crate::db::Tx) -> Result<(), sqlx::Error> {
    tx.execute(
        "INSERT INTO fabric_meta (key, value) VALUES ($1, '1') ON CONFLICT (key) \
         DO UPDATE SET value = CAST(CAST(fabric_meta.value AS BIGINT) + 1 AS TEXT)",
        vec![GENERATION_KEY.into()],
    )
    .await
    .map(drop)
}

/// Ended runs without an embedding of `model`, oldest first, with their text.
pub(crate) async fn missing_embeddings(
    store: &SqlStore,
    model: &str,
    limit: usize,
) -> Result<Vec<(RunId, String)>, StoreError> {
    let sql = format!(
        "SELECT {SUMMARY_COLUMNS} FROM runs r WHERE r.status <> 'running' AND NOT EXISTS \
         (SELECT 1 FROM embeddings e WHERE e.model = $1 AND e.run_id = r.id) ORDER BY r.id LIMIT $2"
    );
    let rows = store
        .inner
        .db
        .fetch_all(
            &sql,
            vec![
                model.into(),
                Arg::Int(i64::try_from(limit).unwrap_or(i64::MAX)),
            ],
        )
        .await
        .map_err(|e| store.err(&e))?;
    rows.iter()
        .map(|row| summary(row).map(|s| (s.id.clone(), s.embedding_text())))
        .collect::<Result<_, _>>()
        .map_err(|e| store.err(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_round_trip_and_rank_by_cosine() {
        let v = vec![1.0_f32, -2.5, 3.25];
        assert_eq!(decode(&encode(&v)).unwrap(), v);
        assert!(decode(&[1, 2, 3]).is_none());
        let mut m = ModelVectors {
            dims: 2,
            ..ModelVectors::default()
        };
        for (id, v) in [("a", [1.0, 0.0]), ("b", [0.0, 1.0]), ("c", [1.0, 1.0])] {
            m.positions.insert(id.to_owned(), m.ids.len());
            m.ids.push(id.to_owned());
            m.data.extend(normalised(v.to_vec()));
        }
        let ranked = m.ranked(&[2.0, 0.1]);
        assert_eq!(ranked[0].0, "a");
        assert_eq!(ranked[2].0, "b");
        assert!((m.similarity("c", &[1.0, 1.0]).unwrap() - 1.0).abs() < 1e-6);
        assert!(m.ranked(&[1.0]).is_empty());
    }
}
