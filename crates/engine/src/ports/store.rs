use async_trait::async_trait;
pub use fabric_domain::StatsGroup;
use fabric_domain::{RunEvent, RunId, RunStatus, RunSummary};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use thiserror::Error;

/// What can go wrong storing or reading runs. Every message names the store and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StoreError {
    /// No run has this id.
    #[error("no run `{0}`; `fabric logs list` shows the runs that exist")]
    NotFound(RunId),
    /// The file system refused.
    #[error("{action} {path}: {detail}")]
    Io {
        /// What we tried ("cannot create", "cannot write").
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The system's words.
        detail: String,
    },
    /// A runlog line that is not a valid event.
    #[error("{path}:{line}: not a runlog event: {detail}")]
    Corrupt {
        /// The runlog.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The parser's words.
        detail: String,
    },
    /// The database behind the store failed: unreachable, locked, corrupt, full, or migrated
    /// by a newer fabric. `store` names it (`sqlite:/path`, `postgres://host/db` without the
    /// password); `fix` says what the user can do.
    #[error("store {store}: {detail}; {fix}")]
    Database {
        /// Which store, safe to print.
        store: String,
        /// What went wrong, in the database's words.
        detail: String,
        /// What to do about it.
        fix: String,
    },
    /// Another process is running the run (it holds the run's runlog locked), so this one
    /// may neither continue it nor write to it.
    #[error(
        "run `{0}` is running in another fabric process (its runlog is locked); wait for it to end, or cancel it there"
    )]
    Claimed(String),
    /// This process's claim on a queued run is no longer current (it stalled past its lease
    /// and another worker took the run over): it may not write to the run any more.
    #[error(
        "run `{run}`: this worker's claim (fence {fence}) is no longer current, as another worker took the run over after its lease ran out; this one writes nothing more to it"
    )]
    Fenced {
        /// The run.
        run: RunId,
        /// The stale fence.
        fence: i64,
    },
    /// The process is shutting down and leaves its runs to be continued at its next start
    /// (`server.on_shutdown: suspend`): nothing more is written to them.
    #[error(
        "the fabric is shutting down and leaves this run to be continued at its next start (`fabric resume`, or `fabric serve` again)"
    )]
    Suspended,
    /// A query the caller can correct (an empty search, a semantic search with no embeddings
    /// model configured).
    #[error("{0}")]
    InvalidQuery(String),
}

impl StoreError {
    /// What the caller must do: fix a run id or query that names nothing, wait for a run
    /// another process holds or for a database that is down, report the rest.
    pub fn remedy(&self) -> crate::Remedy {
        match self {
            Self::NotFound(_) | Self::InvalidQuery(_) => crate::Remedy::FixInput,
            Self::Claimed(_) | Self::Database { .. } => crate::Remedy::Retry,
            Self::Io { .. } | Self::Corrupt { .. } | Self::Fenced { .. } | Self::Suspended => {
                crate::Remedy::Report
            }
        }
    }
}

/// A run that was just created: its id, its private workspace and its open runlog.
pub struct NewRun {
    /// The id.
    pub id: RunId,
    /// The directory tools work in.
    pub workspace: PathBuf,
    /// Where its events go.
    pub log: Box<dyn RunLog>,
    /// The workspace's history, when the run's files are versioned (a project's worktree,
    /// or a scratch workspace with `store.workspace_history`; issue #25). Stores leave it
    /// `None`; the run service sets it.
    pub versioned: Option<Arc<crate::versioned::RunWorkspace>>,
}

/// Which runs to list, newest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunQuery {
    /// At most this many (the caller bounds it).
    pub limit: usize,
    /// Only runs older than this one (the previous page's last id).
    pub before: Option<RunId>,
    /// Only runs with one of these statuses (empty: any). Several, so a caller whose states
    /// each stand for more than one status (A2A's `TASK_STATE_FAILED`) filters in the query,
    /// before the page is taken (issue #40).
    pub statuses: Vec<RunStatus>,
    /// Only runs this specialist worked on.
    pub specialist: Option<String>,
    /// Only runs started at or after this time (seconds since the Unix epoch).
    pub since: Option<f64>,
    /// Only runs of this origin (`fabric logs list` shows `user` runs unless `--all`).
    pub origin: Option<fabric_domain::runlog::RunOrigin>,
    /// Only runs whose A2A task belongs to this context (`ListTasks` with `contextId`).
    pub context_id: Option<String>,
}

/// The append-only event log of one run.
#[async_trait]
pub trait RunLog: Send + Sync {
    /// Appends one event as a whole line; returns once it is written.
    async fn append(&self, event: &RunEvent) -> Result<(), StoreError>;
}

/// Where runs live: their workspaces, their runlogs and what they amount to.
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Creates the run `id` (minted by [`crate::new_run_id`]) with an empty workspace and
    /// runlog.
    async fn create_run(&self, id: RunId) -> Result<NewRun, StoreError>;
    /// The runs that match, newest first.
    async fn list_runs(&self, query: &RunQuery) -> Result<Vec<RunSummary>, StoreError>;
    /// One run's summary; by default folded from its events.
    async fn get_run(&self, id: &RunId) -> Result<RunSummary, StoreError> {
        let events = self.read_events(id).await?;
        Ok(RunSummary::from_events(id.clone(), &events))
    }
    /// Every event of one run, in order.
    async fn read_events(&self, id: &RunId) -> Result<Vec<RunEvent>, StoreError>;
    /// Where the run's runlog file is, when the store keeps one on this machine.
    fn runlog_path(&self, id: &RunId) -> Option<PathBuf> {
        let _ = id;
        None
    }
    /// Opens a run that exists, to continue it after its process stopped: its workspace and
    /// its runlog, opened for appending and claimed by this process for as long as the
    /// returned log lives ([`StoreError::Claimed`] when another process holds it).
    async fn reopen_run(&self, id: &RunId) -> Result<NewRun, StoreError> {
        Err(StoreError::InvalidQuery(format!(
            "this store cannot continue runs, so run `{id}` cannot be resumed"
        )))
    }
    /// Runs left `running` by a process that is gone (no process claims them), oldest
    /// first.
    async fn interrupted_runs(&self) -> Result<Vec<RunId>, StoreError> {
        Ok(Vec::new())
    }
    /// Who, if anyone, is carrying on run `id`, whose runlog has no end (`running`); see
    /// [`Liveness`]. Asked only of runs listed or shown as `running`, so the cost stays at
    /// one probe per such run. By default [`Liveness::Unknown`]: a store that cannot tell
    /// claims nothing.
    async fn liveness(&self, id: &RunId) -> Liveness {
        let _ = id;
        Liveness::Unknown
    }
    /// Leaves `item` for run `id` (issue #42): what a person said to it, or an answer to
    /// the question it waits for. Kept, on any node that shares the store, until the run
    /// takes it ([`RunStore::take_inbox`]).
    async fn post_to_inbox(
        &self,
        id: &RunId,
        item: &crate::ports::InboxItem,
    ) -> Result<(), StoreError> {
        let _ = item;
        Err(StoreError::InvalidQuery(format!(
            "this store cannot carry messages to a run, so nothing can be said to run `{id}`"
        )))
    }
    /// Takes what was left for run `id`, oldest first; each item is taken once.
    async fn take_inbox(&self, id: &RunId) -> Result<Vec<crate::ports::InboxItem>, StoreError> {
        let _ = id;
        Ok(Vec::new())
    }
    /// Waits until everything appended before is in the store's index (a store that writes
    /// an index behind its runlogs lists a run's latest state a moment after its runlog has
    /// it). The run service calls it at shutdown, so a process exits with its index current.
    async fn flush(&self) {}
}

/// What a run stored as `running` (its runlog has no end) is doing, as far as this process
/// can tell (issue #26: a run killed with `kill -9` showed `running` until resumed). Derived
/// when a run is listed or shown, never stored: the stored status stays `running` until the
/// run records its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    /// A live process holds its runlog, or a worker holds its lease: it is going on.
    Held,
    /// No process holds its runlog: the one running it is gone (killed, crashed), and
    /// `fabric resume` continues it.
    Interrupted,
    /// It waits in the queue for a worker: never claimed yet, or its worker's lease ran out
    /// and no worker has taken it over yet.
    Queued,
    /// This process cannot tell (its runlog is on another machine, the store has no lock to
    /// probe): nothing is claimed either way.
    Unknown,
}

impl Liveness {
    /// Whether `fabric resume` would continue the run (only a run this process can see is
    /// unclaimed).
    pub fn resumable(self) -> bool {
        self == Self::Interrupted
    }

    /// Whether the run waits for a worker to claim it.
    pub fn queued(self) -> bool {
        self == Self::Queued
    }
}

/// A search over every run (`fabric logs search`, `GET /runs/search`, `search_runs`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchQuery {
    /// The words, as the user typed them; never SQL.
    pub text: String,
    /// The query's embedding, for semantic or hybrid ranking; `None`: text only.
    pub embedding: Option<QueryEmbedding>,
    /// Rank by embeddings only (`--semantic`); otherwise hybrid when an embedding is given.
    pub semantic_only: bool,
    /// Only runs this specialist worked on.
    pub specialist: Option<String>,
    /// Only runs with this status.
    pub status: Option<RunStatus>,
    /// Only runs started at or after this time (seconds since the Unix epoch).
    pub since: Option<f64>,
    /// At most this many hits.
    pub limit: usize,
}

/// The embedding of a search query, and the model that made it (only vectors of the same
/// model are compared).
#[derive(Debug, Clone, PartialEq)]
pub struct QueryEmbedding {
    /// The embedding model's name.
    pub model: String,
    /// The vector.
    pub vector: Vec<f32>,
}

/// One run found by a search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchHit {
    /// The run.
    pub run: RunSummary,
    /// The combined score the hits are ordered by (higher is better).
    pub score: f64,
    /// The full-text rank, when the text matched.
    pub text_score: Option<f64>,
    /// The cosine similarity, when the run has an embedding of the query's model.
    pub semantic_score: Option<f64>,
    /// A short excerpt around the matched words.
    pub snippet: Option<String>,
}

/// Which runs to count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatsQuery {
    /// The grouping.
    pub by: StatsGroup,
    /// Only runs started at or after this time (seconds since the Unix epoch).
    pub since: Option<f64>,
    /// Replays, `fabric test` and `fabric eval` runs too; by default only what people's runs
    /// did (with their children and critics) is counted.
    pub all: bool,
}

/// The figures of one group.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StatsRow {
    /// The specialist id, model key or tool name.
    pub key: String,
    /// Runs (for tools: runs that called it).
    pub runs: u64,
    /// Runs by status.
    pub by_status: BTreeMap<String, u64>,
    /// Share of ended runs that succeeded (`completed`, `completed_without_finish`).
    pub success_rate: Option<f64>,
    /// Model calls, summed.
    pub steps: u64,
    /// Prompt tokens, summed.
    pub prompt_tokens: u64,
    /// Completion tokens, summed.
    pub completion_tokens: u64,
    /// Wall time of ended runs, summed, in seconds.
    pub wall_s: f64,
    /// Tool calls.
    pub tool_calls: u64,
    /// Tool calls that failed.
    pub tool_errors: u64,
    /// `tool_errors / tool_calls`, when there were calls.
    pub tool_error_rate: Option<f64>,
}

/// What [`RunCatalog::reindex`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reindexed {
    /// Runs brought up to date from their runlogs (lacking, behind, or repaired).
    pub runs: usize,
    /// Of those, runs whose indexed events disagreed with their runlog (an event the runlog
    /// does not have, or another at the same `seq`: issue #26), replaced by the runlog's.
    pub repaired: usize,
}

/// Told about each run [`RunCatalog::prune`] is about to delete, with its events: the
/// run service removes a project run's worktree and branch, which live outside the store.
#[async_trait]
pub trait PruneHook: Send + Sync {
    /// Run `id`, whose recorded `events` these are, is about to be deleted.
    async fn before_delete(&self, id: &RunId, events: &[RunEvent]);
}

/// What the store knows across runs: search, stats, embeddings and pruning. Implemented by
/// the database-backed store; the engine never needs it.
#[async_trait]
pub trait RunCatalog: RunStore {
    /// Runs that match, best first.
    async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError>;
    /// Figures per group.
    async fn stats(&self, query: &StatsQuery) -> Result<Vec<StatsRow>, StoreError>;
    /// Stores a run's embedding (made from [`RunSummary::embedding_text`]).
    async fn put_embedding(
        &self,
        id: &RunId,
        model: &str,
        vector: &[f32],
    ) -> Result<(), StoreError>;
    /// Ended runs that have no embedding of `model` yet, oldest first, with their text.
    async fn missing_embeddings(
        &self,
        model: &str,
        limit: usize,
    ) -> Result<Vec<(RunId, String)>, StoreError>;
    /// Deletes the ended runs that started before `before` (seconds since the Unix epoch):
    /// their rows, events, embeddings, runlogs and workspaces. Never a running run.
    async fn prune(&self, before: f64) -> Result<Vec<RunId>, StoreError>;
    /// The runs [`RunCatalog::prune`] would delete now, deleting nothing (`--dry-run`).
    async fn prunable(&self, before: f64) -> Result<Vec<RunId>, StoreError>;
    /// Brings the store up to date with the runlogs on disk (runs it lacks or is behind on,
    /// and runs whose indexed events differ from their runlog's, which the runlog's
    /// replace); says how many runs changed.
    async fn reindex(&self) -> Result<Reindexed, StoreError>;
    /// The store, safe to print (`sqlite:/path`, `postgres://host/db`).
    fn describe(&self) -> String;
}
