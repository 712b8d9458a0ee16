//! `fabric-store-fs`: the run store on the file system.
//!
//! An adapter implementing fabric-core's [`RunStore`] and [`RunLog`] ports. Every run gets
//! `<root>/runs/<run_id>/workspace/` (the only directory its tools may touch) and
//! `<root>/runs/<run_id>/runlog.jsonl` (one JSON event per line, the public format in
//! docs/RUNLOG.md).
//!
//! Key decision: each event is serialised first and written with a single `write` on a file
//! opened for appending, so a process killed at any moment leaves whole lines behind; the
//! write runs on tokio's blocking pool so the async runtime never waits on the disk.

mod log;
mod summary;

use async_trait::async_trait;
use fabric_domain::{RunEvent, RunId, RunSummary};
use fabric_engine::{NewRun, RunQuery, RunStore, StoreError};
use std::path::{Path, PathBuf};

pub use log::{FileRunLog, parse_runlog_lines};

/// Name of the runlog file inside a run directory.
pub const RUNLOG_FILE: &str = "runlog.jsonl";
/// Name of the workspace directory inside a run directory.
pub const WORKSPACE_DIR: &str = "workspace";

/// Runs stored under one workspace root (`.fabric` by default).
#[derive(Debug, Clone)]
pub struct FsRunStore {
    root: PathBuf,
}

impl FsRunStore {
    /// A store rooted at `root`; directories are created when the first run is.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The directory holding all runs.
    pub fn runs_dir(&self) -> PathBuf {
        self.root.join("runs")
    }

    /// The directory of one run.
    pub fn run_dir(&self, id: &RunId) -> PathBuf {
        self.runs_dir().join(id.as_str())
    }

    /// Makes a new run's directories and returns its workspace, by its canonical path: tools'
    /// own path checks then compare like with like even when the root was given through a
    /// symlink.
    pub async fn make_run_dirs(&self, id: &RunId) -> Result<PathBuf, StoreError> {
        let workspace = self.run_dir(id).join(WORKSPACE_DIR);
        tokio::fs::create_dir_all(&workspace)
            .await
            .map_err(|e| io_error("cannot create", &workspace, &e))?;
        tokio::fs::canonicalize(&workspace)
            .await
            .map_err(|e| io_error("cannot resolve", &workspace, &e))
    }

    /// Reopens an existing run to continue it: its workspace (which may be gone; the caller
    /// decides) and its runlog, claimed by this process.
    pub async fn reopen(&self, id: &RunId) -> Result<(PathBuf, FileRunLog), StoreError> {
        let dir = self.run_dir(id);
        let runlog = dir.join(RUNLOG_FILE);
        if !tokio::fs::try_exists(&runlog).await.unwrap_or(false) {
            return Err(StoreError::NotFound(id.clone()));
        }
        let log = FileRunLog::create(runlog).await?;
        // Claimed: no one else writes it now. A line the stopped process left half-written
        // is cut, so the next one starts on a line of its own.
        log.trim_torn_tail().await?;
        let workspace = dir.join(WORKSPACE_DIR);
        let workspace = tokio::fs::canonicalize(&workspace)
            .await
            .unwrap_or(workspace);
        Ok((workspace, log))
    }

    /// Whether a process is running run `id` (it holds its runlog).
    pub async fn claimed(&self, id: &RunId) -> bool {
        let runlog = self.run_dir(id).join(RUNLOG_FILE);
        tokio::task::spawn_blocking(move || FileRunLog::claimed(&runlog))
            .await
            .unwrap_or(true)
    }

    /// Who carries on run `id` as far as its runlog's lock says ([`FileRunLog::probe`]):
    /// held, interrupted (the lock is free), or unknown (no runlog here).
    pub async fn lock_liveness(&self, id: &RunId) -> fabric_engine::Liveness {
        let runlog = self.run_dir(id).join(RUNLOG_FILE);
        let probed = tokio::task::spawn_blocking(move || FileRunLog::probe(&runlog))
            .await
            .unwrap_or(None);
        match probed {
            Some(true) => fabric_engine::Liveness::Held,
            Some(false) => fabric_engine::Liveness::Interrupted,
            None => fabric_engine::Liveness::Unknown,
        }
    }

    /// A run's events, each with its runlog line as written (without its newline): what an
    /// index compares with, or keeps, byte for byte.
    pub async fn read_event_lines(
        &self,
        id: &RunId,
    ) -> Result<Vec<(RunEvent, String)>, StoreError> {
        let (path, text) = self.read_runlog(id).await?;
        Ok(parse_runlog_lines(&path, &text)?
            .into_iter()
            .map(|(event, line)| (event, line.to_owned()))
            .collect())
    }

    async fn read_runlog(&self, id: &RunId) -> Result<(PathBuf, String), StoreError> {
        let path = self.run_dir(id).join(RUNLOG_FILE);
        match tokio::fs::read_to_string(&path).await {
            Ok(text) => Ok((path, text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(StoreError::NotFound(id.clone()))
            }
            Err(e) => Err(io_error("cannot read", &path, &e)),
        }
    }

    /// The ids of every run directory, oldest first.
    pub async fn run_ids(&self) -> Result<Vec<RunId>, StoreError> {
        let runs_dir = self.runs_dir();
        let mut entries = match tokio::fs::read_dir(&runs_dir).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error("cannot read", &runs_dir, &e)),
        };
        let mut ids = Vec::new();
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(|e| io_error("cannot read", &runs_dir, &e))?
        {
            // Directories that are not run ids (a stray file, an editor's backup) are skipped.
            if let Some(id) = entry
                .file_name()
                .to_str()
                .and_then(|n| RunId::parse(n).ok())
            {
                ids.push(id);
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }
}

/// `EMFILE` and `ENFILE` (Linux and the BSDs alike): this process, or the whole system, has
/// no file descriptor left. std gives them no `ErrorKind` of their own.
const OUT_OF_DESCRIPTORS: [i32; 2] = [24, 23];

fn io_error(action: &'static str, path: &Path, error: &std::io::Error) -> StoreError {
    // A full disk and a full descriptor table are the I/O failures with an obvious fix; say it.
    let detail = if error.kind() == std::io::ErrorKind::StorageFull {
        format!("{error}; free space on that disk and retry (`fabric logs prune` deletes old runs)")
    } else if error
        .raw_os_error()
        .is_some_and(|code| OUT_OF_DESCRIPTORS.contains(&code))
    {
        format!(
            "{error}; each run in flight holds up to three open files (its runlog, its model connection, a blocking caller's connection): raise the open-files hard limit (`ulimit -Hn`, `LimitNOFILE=` in a systemd unit), or lower `server.max_runs_in_flight` (`fabric doctor` checks them; ADR-132)"
        )
    } else {
        error.to_string()
    };
    StoreError::Io {
        action,
        path: path.to_path_buf(),
        detail,
    }
}

#[async_trait]
impl RunStore for FsRunStore {
    async fn create_run(&self, id: RunId) -> Result<NewRun, StoreError> {
        let workspace = self.make_run_dirs(&id).await?;
        let log = FileRunLog::create(self.run_dir(&id).join(RUNLOG_FILE)).await?;
        Ok(NewRun {
            id,
            workspace,
            log: Box::new(log),
            versioned: None,
        })
    }

    async fn reopen_run(&self, id: &RunId) -> Result<NewRun, StoreError> {
        let (workspace, log) = self.reopen(id).await?;
        Ok(NewRun {
            id: id.clone(),
            workspace,
            log: Box::new(log),
            versioned: None,
        })
    }

    async fn interrupted_runs(&self) -> Result<Vec<RunId>, StoreError> {
        let mut out = Vec::new();
        for id in self.run_ids().await? {
            if matches!(self.get_run(&id).await, Ok(run) if run.status == fabric_domain::RunStatus::Running)
                && !self.claimed(&id).await
            {
                out.push(id);
            }
        }
        Ok(out)
    }

    async fn list_runs(&self, query: &RunQuery) -> Result<Vec<RunSummary>, StoreError> {
        let mut ids = self.run_ids().await?;
        // Ids sort by start time, so the newest come last; list newest first.
        ids.reverse();
        // Reads every runlog until the page is full: this store has no index (the database
        // store has one; this one serves tests and the database's own reindexing).
        ids.retain(|id| query.before.as_ref().is_none_or(|b| id < b));
        let mut out = Vec::new();
        for id in ids {
            if out.len() >= query.limit {
                break;
            }
            match self.get_run(&id).await {
                Ok(run) if matches(&run, query) => out.push(run),
                Ok(_) => {}
                Err(StoreError::NotFound(_)) => continue,
                // One damaged runlog must not hide every other run: list it as failed, with
                // what is wrong, so the user can find and inspect it.
                Err(e @ StoreError::Corrupt { .. }) => {
                    tracing::warn!(run = %id, error = %e, "unreadable runlog");
                    let run = summary::unreadable(id, &e);
                    if matches(&run, query) {
                        out.push(run);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    fn runlog_path(&self, id: &RunId) -> Option<PathBuf> {
        Some(self.run_dir(id).join(RUNLOG_FILE))
    }

    async fn liveness(&self, id: &RunId) -> fabric_engine::Liveness {
        self.lock_liveness(id).await
    }

    async fn read_events(&self, id: &RunId) -> Result<Vec<RunEvent>, StoreError> {
        let (path, text) = self.read_runlog(id).await?;
        log::parse_runlog(&path, &text)
    }
}

/// Whether a run passes a query's filters (all but `limit` and `before`).
pub fn matches(run: &RunSummary, query: &RunQuery) -> bool {
    (query.statuses.is_empty() || query.statuses.contains(&run.status))
        && query
            .specialist
            .as_ref()
            .is_none_or(|s| run.specialist_ids.contains(s))
        && query.since.is_none_or(|t| run.started_at >= t)
        && query.origin.as_ref().is_none_or(|o| run.origin == *o)
        && query
            .context_id
            .as_ref()
            .is_none_or(|c| run.context_id.as_ref() == Some(c))
}

#[cfg(test)]
mod tests;
