//! The vector index kept in tables (ADR-041): an IVF index per embeddings model.
//!
//! - `vector_index` (one row per model): the vector count, and once there are
//!   `StoreOptions::vector_index_min` vectors (5,000), the k-means centroids (about √n lists, one `f32` blob) with
//!   a `version` bumped by every training;
//! - `vector_codes`: each vector's list and int8 code, keyed `(model, version, list_id,
//!   run_id)` so a list is one range of the key.
//!
//! A query reads the centroids (about 1 MB at 100k × 768), the nearest lists' codes, and the
//! exact `f32` vectors of the best candidates only: a fresh process reads a few megabytes
//! instead of every vector. New vectors are assigned to their nearest list as they are put;
//! the lists are retrained when the count doubled or halved since training. Training writes
//! the new version's codes beside the old ones and switches versions in one transaction, so
//! searches meanwhile use a complete old version.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use crate::SqlStore;
use crate::db::{Arg, Row, Tx, placeholders};
use crate::ivf;
use crate::vectors::{decode, encode};

/// Vectors read per page while training (bounded memory: one page plus the sample).
const PAGE: i64 = 2_000;
/// Codes written per statement.
const INSERT_ROWS: usize = 100;

/// A model's trained lists.
#[derive(Debug)]
pub(crate) struct Trained {
    pub(crate) version: i64,
    pub(crate) dims: usize,
    pub(crate) lists: usize,
    pub(crate) centroids: Vec<f32>,
}

/// The per-store cache of trained centroids by model (checked against `version`), and the
/// models being trained by this store.
#[derive(Debug, Default)]
pub(crate) struct CentroidCache {
    trained: Mutex<HashMap<String, Arc<Trained>>>,
    training: Arc<Mutex<HashSet<String>>>,
}

/// While held, other puts of this store do not start training the same model (each put
/// past the threshold would, while a training of seconds runs).
pub(crate) struct TrainingGuard {
    model: String,
    training: Arc<Mutex<HashSet<String>>>,
}

impl Drop for TrainingGuard {
    fn drop(&mut self) {
        let mut set = self.training.lock().unwrap_or_else(PoisonError::into_inner);
        set.remove(&self.model);
    }
}

impl CentroidCache {
    fn get(&self, model: &str, version: i64) -> Option<Arc<Trained>> {
        let map = self.trained.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(model).filter(|t| t.version == version).cloned()
    }

    fn put(&self, model: &str, trained: Arc<Trained>) {
        let mut map = self.trained.lock().unwrap_or_else(PoisonError::into_inner);
        map.insert(model.to_owned(), trained);
    }

    /// Claims the training of `model`, or `None` when this store is training it already.
    pub(crate) fn start_training(&self, model: &str) -> Option<TrainingGuard> {
        let mut set = self.training.lock().unwrap_or_else(PoisonError::into_inner);
        set.insert(model.to_owned()).then(|| TrainingGuard {
            model: model.to_owned(),
            training: self.training.clone(),
        })
    }
}

fn size(value: i64) -> usize {
    usize::try_from(value).unwrap_or_default()
}

fn int(value: usize) -> Arg {
    Arg::Int(i64::try_from(value).unwrap_or(i64::MAX))
}

fn decode_trained(row: &Row, version: i64) -> Result<Option<Trained>, sqlx::Error> {
    let (dims, lists) = (size(row.int("dims")?), size(row.int("lists")?));
    let centroids = decode(&row.blob("centroids")?).unwrap_or_default();
    Ok(
        (lists > 0 && dims > 0 && centroids.len() == lists * dims).then_some(Trained {
            version,
            dims,
            lists,
            centroids,
        }),
    )
}

/// The model's trained index, or `None` while it is searched exactly.
pub(crate) async fn trained(
    store: &SqlStore,
    model: &str,
) -> Result<Option<Arc<Trained>>, sqlx::Error> {
    let db = &store.inner.db;
    let Some(row) = db
        .fetch_optional(
            "SELECT lists, version FROM vector_index WHERE model = $1",
            vec![model.into()],
        )
        .await?
    else {
        return Ok(None);
    };
    let version = row.int("version")?;
    if row.int("lists")? == 0 {
        return Ok(None);
    }
    let cache = &store.inner.vectors.centroids;
    if let Some(cached) = cache.get(model, version) {
        return Ok(Some(cached));
    }
    let Some(row) = db
        .fetch_optional(
            "SELECT dims, lists, centroids FROM vector_index WHERE model = $1 AND version = $2",
            vec![model.into(), Arg::Int(version)],
        )
        .await?
    else {
        return Ok(None);
    };
    let Some(loaded) = decode_trained(&row, version)? else {
        return Ok(None);
    };
    let loaded = Arc::new(loaded);
    cache.put(model, loaded.clone());
    Ok(Some(loaded))
}

/// The candidates in the `probes` lists nearest `query` (a unit vector), by their codes'
/// approximate similarity, best first.
pub(crate) async fn scan(
    store: &SqlStore,
    model: &str,
    trained: &Trained,
    query: &[f32],
    probes: usize,
) -> Result<Vec<(String, f32)>, sqlx::Error> {
    let lists = ivf::nearest(&trained.centroids, trained.dims, query, probes);
    let mut args: Vec<Arg> = vec![model.into(), Arg::Int(trained.version)];
    args.extend(lists.iter().map(|l| int(*l)));
    let sql = format!(
        "SELECT run_id, code FROM vector_codes WHERE model = $1 AND version = $2 AND list_id IN ({})",
        placeholders(3, lists.len())
    );
    let rows = store.inner.db.fetch_all(&sql, args).await?;
    let mut scored: Vec<(String, f32)> = rows
        .iter()
        .filter_map(|r| {
            let code = r.blob("code").ok()?;
            Some((r.text("run_id").ok()?, ivf::approx_dot(&code, query)?))
        })
        .collect();
    scored.sort_unstable_by(|a, b| b.1.total_cmp(&a.1));
    Ok(scored)
}

/// The exact cosine similarity of these runs' vectors to `query` (a unit vector).
pub(crate) async fn exact_scores(
    store: &SqlStore,
    model: &str,
    query: &[f32],
    ids: &[String],
) -> Result<HashMap<String, f64>, sqlx::Error> {
    let mut scores = HashMap::new();
    for chunk in ids.chunks(500) {
        let mut args: Vec<Arg> = vec![model.into()];
        args.extend(chunk.iter().map(|id| Arg::Text(id.clone())));
        let sql = format!(
            "SELECT run_id, vector FROM embeddings WHERE model = $1 AND run_id IN ({})",
            placeholders(2, chunk.len())
        );
        for row in store.inner.db.fetch_all(&sql, args).await? {
            let (Ok(id), Ok(bytes)) = (row.text("run_id"), row.blob("vector")) else {
                continue;
            };
            if let Some(v) = decode(&bytes).filter(|v| v.len() == query.len()) {
                let v = ivf::normalised(v);
                scores.insert(id, f64::from(ivf::dot(&v, query)));
            }
        }
    }
    Ok(scores)
}

/// Counts of a model's index, read inside a transaction.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counts {
    vectors: usize,
    lists: usize,
    trained_on: usize,
    min: usize,
}

impl Counts {
    /// Whether the lists should be (re)trained: enough vectors and none yet, or the count
    /// doubled or halved since training (lists too long or too few for √n).
    pub(crate) fn need_training(self) -> bool {
        if self.lists == 0 {
            return self.vectors >= self.min;
        }
        self.vectors >= 2 * self.trained_on || 2 * self.vectors < self.trained_on
    }
}

/// Records a put vector (`unit`, normalised) in the index, inside `put_embedding`'s
/// transaction: counts a new one, and once the model is trained, files its code under its
/// nearest list.
pub(crate) async fn add(
    store: &SqlStore,
    tx: &mut Tx,
    model: &str,
    run_id: &str,
    unit: &[f32],
    new: bool,
) -> Result<Counts, sqlx::Error> {
    if new {
        let counted = tx
            .execute(
                "UPDATE vector_index SET vectors = vectors + 1 WHERE model = $1",
                vec![model.into()],
            )
            .await?;
        if counted == 0 {
            // The first vector of this model (or of a database from before the index).
            tx.execute(
                "INSERT INTO vector_index (model, dims, lists, version, trained_on, vectors, centroids) \
                 SELECT $1, $2, 0, 0, 0, COUNT(*), $3 FROM embeddings WHERE model = $1 ON CONFLICT (model) DO NOTHING",
                vec![model.into(), int(unit.len()), Arg::Blob(Vec::new())],
            )
            .await?;
        }
    }
    let rows = tx
        .fetch_all(
            "SELECT lists, version, trained_on, vectors FROM vector_index WHERE model = $1",
            vec![model.into()],
        )
        .await?;
    let Some(row) = rows.first() else {
        return Ok(Counts {
            vectors: 0,
            lists: 0,
            trained_on: 0,
            min: store.inner.index_min,
        });
    };
    let counts = Counts {
        vectors: size(row.int("vectors")?),
        lists: size(row.int("lists")?),
        trained_on: size(row.int("trained_on")?),
        min: store.inner.index_min,
    };
    let version = row.int("version")?;
    let cache = &store.inner.vectors.centroids;
    let trained = match cache.get(model, version) {
        Some(t) => Some(t),
        None if counts.lists == 0 => None,
        // Read once per version: the centroids are about 1 MB at 100k vectors.
        None => match tx
            .fetch_all(
                "SELECT dims, lists, centroids FROM vector_index WHERE model = $1",
                vec![model.into()],
            )
            .await?
            .first()
        {
            Some(row) => decode_trained(row, version)?.map(Arc::new),
            None => None,
        },
    };
    if let Some(trained) = trained.filter(|t| t.dims == unit.len()) {
        cache.put(model, trained.clone());
        if !new {
            tx.execute(
                "DELETE FROM vector_codes WHERE model = $1 AND run_id = $2",
                vec![model.into(), run_id.into()],
            )
            .await?;
        }
        let list = ivf::assign(&trained.centroids, trained.dims, unit);
        tx.execute(
            "INSERT INTO vector_codes (model, version, list_id, run_id, code) VALUES ($1, $2, $3, $4, $5)",
            vec![
                model.into(),
                Arg::Int(version),
                int(list),
                run_id.into(),
                Arg::Blob(ivf::quantise(unit)),
            ],
        )
        .await?;
    }
    Ok(counts)
}

/// One page of a model's vectors after `after` (run id order), normalised.
async fn page(
    store: &SqlStore,
    model: &str,
    after: &str,
) -> Result<Vec<(String, Vec<f32>)>, sqlx::Error> {
    let rows = store
        .inner
        .db
        .fetch_all(
            "SELECT run_id, vector FROM embeddings WHERE model = $1 AND run_id > $2 ORDER BY run_id LIMIT $3",
            vec![model.into(), after.into(), Arg::Int(PAGE)],
        )
        .await?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            let v = decode(&r.blob("vector").ok()?)?;
            Some((r.text("run_id").ok()?, ivf::normalised(v)))
        })
        .collect())
}

/// Writes codes of `version` for these vectors.
async fn write_codes(
    tx: &mut Tx,
    model: &str,
    version: i64,
    trained: &Trained,
    vectors: &[(String, Vec<f32>)],
) -> Result<(), sqlx::Error> {
    let coded: Vec<(usize, &str, Vec<u8>)> = vectors
        .iter()
        .filter(|(_, v)| v.len() == trained.dims)
        .map(|(id, v)| {
            let list = ivf::assign(&trained.centroids, trained.dims, v);
            (list, id.as_str(), ivf::quantise(v))
        })
        .collect();
    for chunk in coded.chunks(INSERT_ROWS) {
        let values: Vec<String> = (0..chunk.len())
            .map(|i| format!("($1, $2, {})", placeholders(3 + 3 * i, 3)))
            .collect();
        let mut args: Vec<Arg> = vec![model.into(), Arg::Int(version)];
        for (list, id, code) in chunk {
            args.extend([int(*list), (*id).into(), Arg::Blob(code.clone())]);
        }
        let sql = format!(
            "INSERT INTO vector_codes (model, version, list_id, run_id, code) VALUES {} \
             ON CONFLICT (model, version, list_id, run_id) DO NOTHING",
            values.join(", ")
        );
        tx.execute(&sql, args).await?;
    }
    Ok(())
}

/// (Re)trains a model's lists from its vectors, or drops them below the threshold.
pub(crate) async fn train(store: &SqlStore, model: &str) -> Result<(), sqlx::Error> {
    let db = &store.inner.db;
    let count = db
        .fetch_optional(
            "SELECT COUNT(*) AS n FROM embeddings WHERE model = $1",
            vec![model.into()],
        )
        .await?
        .map(|r| r.int("n"))
        .transpose()?
        .map_or(0, size);
    let version = db
        .fetch_optional(
            "SELECT version FROM vector_index WHERE model = $1",
            vec![model.into()],
        )
        .await?
        .map(|r| r.int("version"))
        .transpose()?
        .unwrap_or(0)
        + 1;
    if count < store.inner.index_min {
        let mut tx = db.begin().await?;
        upsert_state(&mut tx, model, version, 0, 0, count, Vec::new()).await?;
        tx.execute(
            "DELETE FROM vector_codes WHERE model = $1",
            vec![model.into()],
        )
        .await?;
        return tx.commit().await;
    }
    // Pass 1: an even sample of the vectors (of the first vector's dimension).
    let lists = ivf::lists_for(count);
    let stride = ivf::sample_stride(count, lists);
    let (mut sample, mut dims, mut seen, mut after) = (Vec::new(), 0, 0usize, String::new());
    loop {
        let vectors = page(store, model, &after).await?;
        let Some((last, _)) = vectors.last() else {
            break;
        };
        after = last.clone();
        for (_, v) in vectors {
            dims = if dims == 0 { v.len() } else { dims };
            if v.len() == dims {
                if seen.is_multiple_of(stride) {
                    sample.extend(v);
                }
                seen += 1;
            }
        }
    }
    let centroids = tokio::task::spawn_blocking(move || ivf::train(&sample, dims, lists))
        .await
        .map_err(|e| sqlx::Error::Protocol(format!("training the vector index: {e}")))?;
    let trained = Arc::new(Trained {
        version,
        dims,
        lists: centroids.len() / dims.max(1),
        centroids,
    });
    // Pass 2: the codes of the new version, a page per transaction, beside the old ones.
    let mut after = String::new();
    loop {
        let vectors = page(store, model, &after).await?;
        let Some((last, _)) = vectors.last() else {
            break;
        };
        after = last.clone();
        let mut tx = db.begin().await?;
        write_codes(&mut tx, model, version, &trained, &vectors).await?;
        tx.commit().await?;
    }
    // The switch: vectors put meanwhile get codes, then the new version becomes current.
    let mut tx = db.begin().await?;
    let late_sql = "SELECT e.run_id AS run_id, e.vector AS vector FROM embeddings e WHERE e.model = $1 AND NOT EXISTS \
         (SELECT 1 FROM vector_codes c WHERE c.model = e.model AND c.run_id = e.run_id AND c.version = $2)";
    let late: Vec<(String, Vec<f32>)> = tx
        .fetch_all(late_sql, vec![model.into(), Arg::Int(version)])
        .await?
        .iter()
        .filter_map(|r| {
            let v = decode(&r.blob("vector").ok()?)?;
            Some((r.text("run_id").ok()?, ivf::normalised(v)))
        })
        .collect();
    write_codes(&mut tx, model, version, &trained, &late).await?;
    let centroids = encode(&trained.centroids);
    upsert_state(
        &mut tx,
        model,
        version,
        dims,
        trained.lists,
        count,
        centroids,
    )
    .await?;
    tx.execute(
        "DELETE FROM vector_codes WHERE model = $1 AND version <> $2",
        vec![model.into(), Arg::Int(version)],
    )
    .await?;
    tx.commit().await?;
    store.inner.vectors.centroids.put(model, trained);
    tracing::debug!(store = %store.inner.name, model, vectors = count, lists, "vector index trained");
    Ok(())
}

async fn upsert_state(
    tx: &mut Tx,
    model: &str,
    version: i64,
    dims: usize,
    lists: usize,
    count: usize,
    centroids: Vec<u8>,
) -> Result<(), sqlx::Error> {
    tx.execute(
        "INSERT INTO vector_index (model, dims, lists, version, trained_on, vectors, centroids) \
         VALUES ($1, $2, $3, $4, $5, $5, $6) ON CONFLICT (model) DO UPDATE SET dims = excluded.dims, \
         lists = excluded.lists, version = excluded.version, trained_on = excluded.trained_on, \
         vectors = excluded.vectors, centroids = excluded.centroids",
        vec![
            model.into(),
            int(dims),
            int(lists),
            Arg::Int(version),
            int(count),
            Arg::Blob(centroids),
        ],
    )
    .await
    .map(drop)
}

/// Recounts every model's vectors and (re)trains those that need it (`reindex`, `prune`,
/// and a database from before the index).
pub(crate) async fn refresh(store: &SqlStore) -> Result<usize, sqlx::Error> {
    let db = &store.inner.db;
    let counts = db
        .fetch_all(
            "SELECT model, COUNT(*) AS n FROM embeddings GROUP BY model",
            vec![],
        )
        .await?;
    let state: HashMap<String, (usize, usize)> = db
        .fetch_all("SELECT model, lists, trained_on FROM vector_index", vec![])
        .await?
        .iter()
        .filter_map(|r| {
            let lists = size(r.int("lists").ok()?);
            Some((
                r.text("model").ok()?,
                (lists, size(r.int("trained_on").ok()?)),
            ))
        })
        .collect();
    let mut trained = 0;
    let mut models: Vec<(String, usize)> = counts
        .iter()
        .filter_map(|r| Some((r.text("model").ok()?, size(r.int("n").ok()?))))
        .collect();
    // Models whose vectors are all gone still have lists to drop.
    models.extend(
        state
            .keys()
            .filter(|m| !models.iter().any(|(n, _)| n == *m))
            .map(|m| (m.clone(), 0))
            .collect::<Vec<_>>(),
    );
    for (model, vectors) in models {
        let (lists, trained_on) = state.get(&model).copied().unwrap_or((0, 0));
        db.execute(
            "UPDATE vector_index SET vectors = $2 WHERE model = $1",
            vec![model.as_str().into(), int(vectors)],
        )
        .await?;
        let counts = Counts {
            vectors,
            lists,
            trained_on,
            min: store.inner.index_min,
        };
        if counts.need_training()
            && let Some(_guard) = store.inner.vectors.centroids.start_training(&model)
        {
            train(store, &model).await?;
            trained += 1;
        }
    }
    Ok(trained)
}
