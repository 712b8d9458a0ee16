use async_trait::async_trait;
use fabric_domain::{RunEvent, RunId, RunStatus};
use std::path::PathBuf;
use thiserror::Error;

/// What can go wrong storing or reading runs.
#[derive(Debug, Error)]
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
}

/// A run that was just created: its id, its private workspace and its open runlog.
pub struct NewRun {
    /// The id.
    pub id: RunId,
    /// The directory tools work in.
    pub workspace: PathBuf,
    /// Where its events go.
    pub log: Box<dyn RunLog>,
}

/// One run as listed by `fabric logs list`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// The id.
    pub id: RunId,
    /// When it started, in seconds since the Unix epoch.
    pub started_at: f64,
    /// How it ended, or `running` when its runlog has no terminal event (yet).
    pub status: RunStatus,
    /// Who worked on it.
    pub specialist_ids: Vec<String>,
    /// The prompt.
    pub prompt: String,
    /// The finish payload's summary, or the failure reason.
    pub summary: Option<String>,
    /// Number of events.
    pub events: usize,
}

/// The append-only event log of one run.
#[async_trait]
pub trait RunLog: Send + Sync {
    /// Appends one event as a whole line; returns once it is written.
    async fn append(&self, event: &RunEvent) -> Result<(), StoreError>;
}

/// Where runs live.
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Creates a new run with an empty workspace and runlog.
    async fn create_run(&self) -> Result<NewRun, StoreError>;
    /// The newest runs first.
    async fn list_runs(&self, limit: usize) -> Result<Vec<RunSummary>, StoreError>;
    /// Every event of one run, in order.
    async fn read_events(&self, id: &RunId) -> Result<Vec<RunEvent>, StoreError>;
}
