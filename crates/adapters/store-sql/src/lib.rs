//! `fabric-store-sql`: the database-backed run store (issue #9).
//!
//! An adapter implementing fabric-core's [`RunStore`] and [`RunCatalog`] ports on SQLite
//! (embedded, the default: one file `<root>/fabric.db`) or PostgreSQL (a `postgres://` URL),
//! with the same schema and behaviour on both. It sits beside `fabric-store-fs`, which it
//! wraps: every run still gets `<root>/runs/<id>/workspace/` and `runlog.jsonl`, and the
//! runlog stays the source of truth. The database is an index of the runlogs, written
//! behind them by one writer task per store, that makes listing, search (full-text and
//! semantic), stats and pruning fast.
//!
//! Key decisions (docs/STORE.md, ADR-038 to ADR-040, ADR-043):
//! - a runlog line is written to the file first, then queued (bounded channel) for the
//!   writer, which batches events into transactions; nothing on the run's path waits for a
//!   commit (a run is listed as ended a moment after its runlog says so; `flush` waits);
//! - a failed database write never fails the run: it is logged, and [`RunCatalog::reindex`]
//!   (cheaply, also [`SqlStore::open`]) brings the index back in line with the runlogs;
//! - runtime `sqlx::query` with bound values only; a search string is never SQL nor FTS
//!   syntax.
//!
//! Layout: `open` (connecting, pragmas, migrating), `schema`, `db` (one API over both
//! drivers), `index` (the writes shared by the writer and reindexing), `writer`, `queries`,
//! `search` + `vectors` + `document` + `ivf` + `vindex` + `vlists` (the vector index, ADR-041/042), `stats`, `prune`, `reconcile`, `error`.

mod db;
mod document;
mod error;
mod filters;
mod inbox;
mod index;
mod ivf;
mod ledger;
mod listen;
mod open;
mod prune;
mod queries;
mod queue;
mod reconcile;
mod schema;
mod search;
mod stats;
mod vectors;
mod vindex;
mod vlists;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fabric_core::{
    NewRun, Reindexed, RunCatalog, RunQuery, RunStore, SearchHit, SearchQuery, StatsQuery,
    StatsRow, StoreError,
};
use fabric_domain::{RunEvent, RunId, RunSummary};
use fabric_store_fs::FsRunStore;

pub use document::{
    DOCUMENT_CAP, STOPWORDS, fts5_query, query_words, search_document, search_terms, snippet,
};
pub use error::{SqlError, redact};
pub use schema::SCHEMA_VERSION;
pub use vindex::VectorIndexInfo;
pub use writer::SqlRunLog;

/// The SQLite file's name inside the workspace root.
pub const SQLITE_FILE: &str = "fabric.db";

/// Tuning of a store; the defaults suit the CLI and the server.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// How long SQLite waits for another connection's lock before giving up.
    pub busy_timeout: Duration,
    /// How long to wait for a database connection (PostgreSQL down: fail after this).
    pub connect_timeout: Duration,
    /// Events queued for the writer before `append` waits (back-pressure).
    pub queue: usize,
    /// Most events written in one transaction.
    pub batch: usize,
    /// After a failed write, how long the writer skips the database (the runlog has the
    /// events; reindexing repairs the gap) instead of making every event wait on it.
    pub retry_after: Duration,
    /// Vectors of one embeddings model from which semantic search goes through the IVF
    /// index instead of an exact scan (ADR-041).
    pub vector_index_min: usize,
    /// Codes of one list kept as single rows before they are packed into a chunk (ADR-042).
    pub vector_tail_max: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            queue: 1024,
            batch: 256,
            retry_after: Duration::from_secs(2),
            vector_index_min: ivf::MIN_INDEXED,
            vector_tail_max: vlists::TAIL_MAX,
        }
    }
}

/// The run store on a database: SQLite under the workspace root, or PostgreSQL.
#[derive(Clone)]
pub struct SqlStore {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) db: db::Db,
    /// Safe to print: `sqlite:/path/fabric.db` or `postgres://user@host:port/db`.
    pub(crate) name: String,
    /// `host:port` for connection errors.
    pub(crate) addr: String,
    pub(crate) fs: FsRunStore,
    pub(crate) root: PathBuf,
    pub(crate) writer: writer::WriterHandle,
    pub(crate) vectors: vectors::VectorCache,
    /// [`StoreOptions::vector_index_min`].
    pub(crate) index_min: usize,
    /// [`StoreOptions::vector_tail_max`].
    pub(crate) tail_max: usize,
    /// The `LISTEN` connection of this process (PostgreSQL), made on first use.
    pub(crate) listener: tokio::sync::OnceCell<listen::Listener>,
    /// Told about each run `prune` deletes, before it goes ([`SqlStore::on_prune`]).
    pub(crate) prune_hook: std::sync::OnceLock<Arc<dyn fabric_core::ports::PruneHook>>,
}

impl std::fmt::Debug for SqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("store", &self.inner.name)
            .finish_non_exhaustive()
    }
}

impl SqlStore {
    /// Tells `hook` about each run `prune` deletes, before it goes (the first hook set
    /// stays; a second is ignored, with a warning).
    pub fn on_prune(&self, hook: Arc<dyn fabric_core::ports::PruneHook>) {
        if self.inner.prune_hook.set(hook).is_err() {
            tracing::warn!(store = %self.inner.name, "a prune hook was set already; the second is ignored");
        }
    }

    /// Opens the store: `None` is SQLite in `<root>/fabric.db` (created on first use), a
    /// `postgres://` URL a PostgreSQL database. Migrates the schema, starts the writer, and
    /// catches up with the runlogs cheaply (a one-time import of runs from before the store,
    /// and running runs whose runlog is ahead of the index).
    pub async fn open(url: Option<&str>, root: &Path) -> Result<Self, StoreError> {
        Self::open_with(url, root, StoreOptions::default()).await
    }

    /// [`SqlStore::open`] with explicit tuning.
    pub async fn open_with(
        url: Option<&str>,
        root: &Path,
        options: StoreOptions,
    ) -> Result<Self, StoreError> {
        open::open(url, root, options).await
    }

    /// Brings the schema up to this fabric's version (done on open too); returns the
    /// version. A database migrated by a newer fabric is refused.
    pub async fn migrate(&self) -> Result<i64, StoreError> {
        open::migrate(&self.inner.db, &self.inner.name).await?;
        Ok(SCHEMA_VERSION)
    }

    /// The workspace root (the directory holding `runs/`).
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// Waits until every event appended so far is written (or given up on).
    pub async fn flush(&self) {
        writer::flush(&self.inner.writer).await;
    }

    /// The state of `model`'s vector index (ADR-041/042), `None` when it has no vectors.
    pub async fn vector_index(&self, model: &str) -> Result<Option<VectorIndexInfo>, StoreError> {
        vindex::info(self, model).await.map_err(|e| self.err(&e))
    }

    /// Flushes, then closes the database connections.
    pub async fn close(&self) {
        self.flush().await;
        self.inner.db.close().await;
    }

    pub(crate) fn err(&self, error: &sqlx::Error) -> StoreError {
        SqlError::from_sqlx(error, &self.inner.addr).into_store(&self.inner.name)
    }
}

#[async_trait]
impl RunStore for SqlStore {
    async fn create_run(&self, id: RunId) -> Result<NewRun, StoreError> {
        writer::create_run(self, id).await
    }

    async fn list_runs(&self, query: &RunQuery) -> Result<Vec<RunSummary>, StoreError> {
        queries::list_runs(self, query).await
    }

    async fn get_run(&self, id: &RunId) -> Result<RunSummary, StoreError> {
        queries::get_run(self, id).await
    }

    async fn read_events(&self, id: &RunId) -> Result<Vec<RunEvent>, StoreError> {
        queries::read_events(self, id).await
    }

    /// The runlog of the wrapped file store: without it `_meta.runlog` was null for every
    /// run on this store, while the CLI and the OpenAPI document promise a path (issue #14).
    fn runlog_path(&self, id: &RunId) -> Option<PathBuf> {
        self.inner.fs.runlog_path(id)
    }

    async fn flush(&self) {
        writer::flush(&self.inner.writer).await;
    }

    async fn reopen_run(&self, id: &RunId) -> Result<NewRun, StoreError> {
        writer::reopen_run(self, id).await
    }

    async fn interrupted_runs(&self) -> Result<Vec<RunId>, StoreError> {
        queries::interrupted_runs(self).await
    }

    async fn post_to_inbox(
        &self,
        id: &RunId,
        item: &fabric_core::ports::InboxItem,
    ) -> Result<(), StoreError> {
        inbox::post(self, id, item).await
    }

    async fn take_inbox(
        &self,
        id: &RunId,
    ) -> Result<Vec<fabric_core::ports::InboxItem>, StoreError> {
        inbox::take(self, id).await
    }

    /// A run of the queue by its lease (leases, not locks, say who holds those: a worker may
    /// be on another machine); any other by its runlog's lock, when the runlog is here.
    async fn liveness(&self, id: &RunId) -> fabric_core::Liveness {
        match self.queue_liveness(id).await {
            Ok(Some(liveness)) => liveness,
            Ok(None) => self.inner.fs.lock_liveness(id).await,
            Err(e) => {
                tracing::warn!(run_id = %id, error = %e, "cannot read a run's queue row");
                fabric_core::Liveness::Unknown
            }
        }
    }
}

#[async_trait]
impl RunCatalog for SqlStore {
    async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError> {
        search::search(self, query).await
    }

    async fn stats(&self, query: &StatsQuery) -> Result<Vec<StatsRow>, StoreError> {
        stats::stats(self, query).await
    }

    async fn put_embedding(
        &self,
        id: &RunId,
        model: &str,
        vector: &[f32],
    ) -> Result<(), StoreError> {
        vectors::put_embedding(self, id, model, vector).await
    }

    async fn missing_embeddings(
        &self,
        model: &str,
        limit: usize,
    ) -> Result<Vec<(RunId, String)>, StoreError> {
        vectors::missing_embeddings(self, model, limit).await
    }

    async fn prune(&self, before: f64) -> Result<Vec<RunId>, StoreError> {
        prune::prune(self, before).await
    }

    async fn prunable(&self, before: f64) -> Result<Vec<RunId>, StoreError> {
        prune::prunable(self, before).await
    }

    async fn reindex(&self) -> Result<Reindexed, StoreError> {
        reconcile::reindex(self).await
    }

    fn describe(&self) -> String {
        self.inner.name.clone()
    }
}
