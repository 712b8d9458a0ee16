//! The vector index kept in tables (ADR-041): an IVF index per embeddings model.
//!
//! - `vector_index` (one row per model): the vector count, and once there are
//!   `StoreOptions::vector_index_min` vectors (5,000), the k-means centroids (about √n lists, one `f32` blob) with
//!   a `version` bumped by every training;
//! - each vector's list and int8 code, packed by list (`vlists`: `vector_chunks`, and the
//!   tail `vector_codes`);
//! - the probe count, calibrated at training on the data itself (ADR-042).
//!
//! A query reads the centroids (about 1 MB at 100k × 768), the nearest lists' codes, and the
//! exact `f32` vectors of the best candidates only: a fresh process reads a few megabytes
//! instead of every vector. New vectors are assigned to their nearest list as they are put;
//! the lists are retrained when the count doubled or halved since training, or when they
//! were trained without calibration (by an older fabric). Training writes the new version's
//! codes beside the old ones and switches versions in one transaction, so searches meanwhile
//! use a complete old version.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use crate::SqlStore;
use crate::db::{Arg, Row, Tx, placeholders};
use crate::ivf::{self, Calibration, Trained, decode, encode};
use crate::vlists;

/// Vectors read per page while training (bounded memory: one page plus the sample).
const PAGE: i64 = 2_000;
/// Codes written per statement.
const INSERT_ROWS: usize = 100;

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
    let probes = size(row.int("probes")?);
    Ok(
        (lists > 0 && dims > 0 && centroids.len() == lists * dims).then_some(Trained {
            version,
            dims,
            lists,
            centroids,
            probes,
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
            "SELECT dims, lists, centroids, probes FROM vector_index WHERE model = $1 AND version = $2",
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
    /// Whether the lists' probe count was calibrated (false: trained by an older fabric).
    calibrated: bool,
}

impl Counts {
    /// Whether the lists should be (re)trained: enough vectors and none yet, or the count
    /// doubled or halved since training (lists too long or too few for √n).
    pub(crate) fn need_training(self) -> bool {
        if self.lists == 0 {
            return self.vectors >= self.min;
        }
        !self.calibrated
            || self.vectors >= 2 * self.trained_on
            || 2 * self.vectors < self.trained_on
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
    // Always an update, so PostgreSQL holds the model's row (puts of one model, and so the
    // packing of their lists' tails, take turns; SQLite's write lock does the same).
    let counted = tx
        .execute(
            "UPDATE vector_index SET vectors = vectors + $2 WHERE model = $1",
            vec![model.into(), Arg::Int(i64::from(new))],
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
    let rows = tx
        .fetch_all(
            "SELECT lists, version, trained_on, vectors, probes FROM vector_index WHERE model = $1",
            vec![model.into()],
        )
        .await?;
    let Some(row) = rows.first() else {
        return Ok(Counts {
            vectors: 0,
            lists: 0,
            trained_on: 0,
            min: store.inner.index_min,
            calibrated: true,
        });
    };
    let counts = Counts {
        vectors: size(row.int("vectors")?),
        lists: size(row.int("lists")?),
        trained_on: size(row.int("trained_on")?),
        min: store.inner.index_min,
        calibrated: row.int("probes")? > 0,
    };
    let version = row.int("version")?;
    let cache = &store.inner.vectors.centroids;
    let trained = match cache.get(model, version) {
        Some(t) => Some(t),
        None if counts.lists == 0 => None,
        // Read once per version: the centroids are about 1 MB at 100k vectors.
        None => match tx
            .fetch_all(
                "SELECT dims, lists, centroids, probes FROM vector_index WHERE model = $1",
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
        let list =
            i64::try_from(ivf::assign(&trained.centroids, trained.dims, unit)).unwrap_or(i64::MAX);
        tx.execute(
            "INSERT INTO vector_codes (model, version, list_id, run_id, code) VALUES ($1, $2, $3, $4, $5)",
            vec![
                model.into(),
                Arg::Int(version),
                Arg::Int(list),
                run_id.into(),
                Arg::Blob(ivf::quantise(unit)),
            ],
        )
        .await?;
        if size(vlists::tail_len(tx, model, version, list).await?) >= store.inner.tail_max {
            vlists::pack_list(tx, model, version, list).await?;
        }
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

/// One vector's list and code.
type Coded = (usize, String, Vec<u8>);

/// Files these vectors under their lists with their codes (CPU work: run off the async
/// threads), and shows each to the calibration.
fn code_vectors(
    trained: &Trained,
    vectors: Vec<(String, Vec<f32>)>,
    mut calibration: Option<&mut Calibration>,
) -> Vec<Coded> {
    vectors
        .into_iter()
        .filter(|(_, v)| v.len() == trained.dims)
        .map(|(id, v)| {
            let list = ivf::assign(&trained.centroids, trained.dims, &v);
            if let Some(c) = calibration.as_deref_mut() {
                c.observe(&id, &v, list);
            }
            (list, id, ivf::quantise(&v))
        })
        .collect()
}

/// Writes codes of `version` (as tail rows; `vlists` packs them).
async fn write_codes(
    tx: &mut Tx,
    model: &str,
    version: i64,
    coded: &[Coded],
) -> Result<(), sqlx::Error> {
    for chunk in coded.chunks(INSERT_ROWS) {
        let values: Vec<String> = (0..chunk.len())
            .map(|i| format!("($1, $2, {})", placeholders(3 + 3 * i, 3)))
            .collect();
        let mut args: Vec<Arg> = vec![model.into(), Arg::Int(version)];
        for (list, id, code) in chunk {
            args.extend([int(*list), id.as_str().into(), Arg::Blob(code.clone())]);
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

fn joined(e: tokio::task::JoinError) -> sqlx::Error {
    sqlx::Error::Protocol(format!("training the vector index: {e}"))
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
        upsert_state(&mut tx, model, version, 0, 0, count, Vec::new(), 0).await?;
        for table in ["vector_codes", "vector_chunks"] {
            tx.execute(
                &format!("DELETE FROM {table} WHERE model = $1"),
                vec![model.into()],
            )
            .await?;
        }
        return tx.commit().await;
    }
    // Pass 1: an even sample of the vectors (of the first vector's dimension), and a few of
    // them as calibration queries.
    let lists = ivf::lists_for(count);
    let stride = ivf::sample_stride(count, lists);
    let query_stride = (count / ivf::CALIBRATION_QUERIES).max(1);
    let (mut sample, mut dims, mut seen, mut after) = (Vec::new(), 0, 0usize, String::new());
    let mut queries = Vec::new();
    loop {
        let vectors = page(store, model, &after).await?;
        let Some((last, _)) = vectors.last() else {
            break;
        };
        after = last.clone();
        for (id, v) in vectors {
            dims = if dims == 0 { v.len() } else { dims };
            if v.len() == dims {
                if seen.is_multiple_of(query_stride) && queries.len() < ivf::CALIBRATION_QUERIES {
                    queries.push((id, v.clone()));
                }
                if seen.is_multiple_of(stride) {
                    sample.extend(v);
                }
                seen += 1;
            }
        }
    }
    let centroids = tokio::task::spawn_blocking(move || ivf::train(&sample, dims, lists))
        .await
        .map_err(joined)?;
    let mut trained = Trained {
        version,
        dims,
        lists: centroids.len() / dims.max(1),
        centroids,
        probes: 0,
    };
    // Pass 2: the codes of the new version, a page per transaction, beside the old ones;
    // every vector is shown to the calibration.
    let mut calibration = Calibration::new(dims, queries);
    let mut after = String::new();
    loop {
        let vectors = page(store, model, &after).await?;
        let Some((last, _)) = vectors.last() else {
            break;
        };
        after = last.clone();
        // Both move to the blocking thread and back: no copy of the centroids per page.
        let (coded, t, c) = tokio::task::spawn_blocking(move || {
            let coded = code_vectors(&trained, vectors, Some(&mut calibration));
            (coded, trained, calibration)
        })
        .await
        .map_err(joined)?;
        (trained, calibration) = (t, c);
        let mut tx = db.begin().await?;
        write_codes(&mut tx, model, version, &coded).await?;
        tx.commit().await?;
    }
    trained.probes = calibration
        .probes(&trained.centroids, trained.lists)
        .unwrap_or_else(|| ivf::probes_for(trained.lists));
    let shared = Arc::new(trained);
    // The switch: vectors put meanwhile get codes, then the new version becomes current.
    // The model's row is held first, so a put cannot commit a vector between the query
    // for late vectors and the switch (PostgreSQL; SQLite's write lock does the same).
    let mut tx = db.begin().await?;
    tx.execute(
        "UPDATE vector_index SET vectors = vectors WHERE model = $1",
        vec![model.into()],
    )
    .await?;
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
    let late = code_vectors(&shared, late, None);
    write_codes(&mut tx, model, version, &late).await?;
    let centroids = encode(&shared.centroids);
    upsert_state(
        &mut tx,
        model,
        version,
        dims,
        shared.lists,
        count,
        centroids,
        shared.probes,
    )
    .await?;
    for table in ["vector_codes", "vector_chunks"] {
        tx.execute(
            &format!("DELETE FROM {table} WHERE model = $1 AND version <> $2"),
            vec![model.into(), Arg::Int(version)],
        )
        .await?;
    }
    tx.commit().await?;
    store.inner.vectors.centroids.put(model, shared.clone());
    // Pass 3: each list's codes packed into chunks, a list per transaction. Searches
    // meanwhile read the unpacked rows (slower, same results); an interrupted pass is
    // finished by later puts, which pack a list once its tail is long.
    for list in 0..shared.lists {
        let mut tx = db.begin().await?;
        // Holds the model's row, as a put does, so no put adds to the tail being packed.
        tx.execute(
            "UPDATE vector_index SET vectors = vectors WHERE model = $1 AND version = $2",
            vec![model.into(), Arg::Int(version)],
        )
        .await?;
        vlists::pack_list(
            &mut tx,
            model,
            version,
            i64::try_from(list).unwrap_or(i64::MAX),
        )
        .await?;
        tx.commit().await?;
    }
    tracing::debug!(store = %store.inner.name, model, vectors = count, lists, probes = shared.probes, "vector index trained");
    Ok(())
}

#[allow(clippy::too_many_arguments)] // one per column of the row it writes
async fn upsert_state(
    tx: &mut Tx,
    model: &str,
    version: i64,
    dims: usize,
    lists: usize,
    count: usize,
    centroids: Vec<u8>,
    probes: usize,
) -> Result<(), sqlx::Error> {
    tx.execute(
        "INSERT INTO vector_index (model, dims, lists, version, trained_on, vectors, centroids, probes) \
         VALUES ($1, $2, $3, $4, $5, $5, $6, $7) ON CONFLICT (model) DO UPDATE SET dims = excluded.dims, \
         lists = excluded.lists, version = excluded.version, trained_on = excluded.trained_on, \
         vectors = excluded.vectors, centroids = excluded.centroids, probes = excluded.probes",
        vec![
            model.into(),
            int(dims),
            int(lists),
            Arg::Int(version),
            int(count),
            Arg::Blob(centroids),
            int(probes),
        ],
    )
    .await
    .map(drop)
}

/// The state of one model's vector index, for `fabric index rebuild` and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VectorIndexInfo {
    /// Vectors of the model.
    pub vectors: usize,
    /// Lists (0 while the model is searched exactly).
    pub lists: usize,
    /// Lists a query reads first (0 while exact).
    pub probes: usize,
    /// Packed chunks of codes.
    pub chunks: usize,
    /// Codes still kept as single rows (put since their list was packed).
    pub tail: usize,
}

/// The state of `model`'s index, `None` when it has no vectors.
pub(crate) async fn info(
    store: &SqlStore,
    model: &str,
) -> Result<Option<VectorIndexInfo>, sqlx::Error> {
    let db = &store.inner.db;
    let Some(row) = db
        .fetch_optional(
            "SELECT vectors, lists, version, probes FROM vector_index WHERE model = $1",
            vec![model.into()],
        )
        .await?
    else {
        return Ok(None);
    };
    let (vectors, lists, version) = (
        size(row.int("vectors")?),
        size(row.int("lists")?),
        row.int("version")?,
    );
    let count = |table: &str| {
        format!("SELECT COUNT(*) AS n FROM {table} WHERE model = $1 AND version = $2")
    };
    let mut counts = [0usize; 2];
    for (at, table) in ["vector_chunks", "vector_codes"].iter().enumerate() {
        counts[at] = db
            .fetch_optional(&count(table), vec![model.into(), Arg::Int(version)])
            .await?
            .map(|r| r.int("n"))
            .transpose()?
            .map_or(0, size);
    }
    let probes = ivf::probes_in_use(lists, size(row.int("probes")?));
    Ok(Some(VectorIndexInfo {
        vectors,
        lists,
        probes,
        chunks: counts[0],
        tail: counts[1],
    }))
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
    let state: HashMap<String, (usize, usize, bool)> = db
        .fetch_all(
            "SELECT model, lists, trained_on, probes FROM vector_index",
            vec![],
        )
        .await?
        .iter()
        .filter_map(|r| {
            let lists = size(r.int("lists").ok()?);
            let calibrated = r.int("probes").ok()? > 0;
            Some((
                r.text("model").ok()?,
                (lists, size(r.int("trained_on").ok()?), calibrated),
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
        let (lists, trained_on, calibrated) = state.get(&model).copied().unwrap_or((0, 0, true));
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
            calibrated,
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
