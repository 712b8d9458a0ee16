//! The run store and runlog in memory.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fabric_core::{Liveness, NewRun, RunLog, RunQuery, RunStore, StoreError};
use fabric_domain::{EventKind, RunEvent, RunId, RunSummary};

use super::{Line, lock};

/// A runlog in memory; a clone appends to the same list.
#[derive(Clone, Default)]
pub struct MemLog {
    events: Arc<Mutex<Vec<RunEvent>>>,
    /// Appends fail ("disk full") once the log holds this many events.
    fail_after: Option<usize>,
    /// Yields inside each append, so concurrent writers would interleave if the recorder
    /// let them.
    yielding: bool,
}

impl MemLog {
    /// A log that already holds `events`, as a run that wrote them before left it.
    pub fn holding(events: Vec<RunEvent>) -> Self {
        let log = Self::default();
        *lock(&log.events) = events;
        log
    }

    /// Yields inside each append, so concurrent writers would interleave if the recorder let
    /// them.
    pub fn yielding(mut self) -> Self {
        self.yielding = true;
        self
    }

    /// Its events so far.
    pub fn events(&self) -> Vec<RunEvent> {
        lock(&self.events).clone()
    }

    /// Its events so far as their runlog lines: what a reader of the runlog sees.
    pub fn lines(&self) -> Vec<Line> {
        lock(&self.events).iter().map(Line::of).collect()
    }
}

#[async_trait]
impl RunLog for MemLog {
    async fn append(&self, event: &RunEvent) -> Result<(), StoreError> {
        if self.yielding {
            tokio::task::yield_now().await;
        }
        let mut events = lock(&self.events);
        if self.fail_after.is_some_and(|n| events.len() >= n) {
            return Err(StoreError::Io {
                action: "cannot write",
                path: "mem".into(),
                detail: "disk full".into(),
            });
        }
        events.push(event.clone());
        Ok(())
    }
}

/// How a [`MemStore`] keeps its runs.
enum Keeping {
    /// Every run is `id` and writes to one runlog (a test of one run and its children).
    Shared(RunId, MemLog),
    /// Each run has its own runlog under the id it was created with.
    PerRun,
    /// Creating a run fails; no run is found.
    Refusing,
}

/// A run store in memory, for tests.
pub struct MemStore {
    keeping: Keeping,
    runs: Mutex<Vec<(RunId, MemLog)>>,
    workspace: PathBuf,
    liveness: Liveness,
}

impl Default for MemStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemStore {
    /// One runlog for every run, each called `test-run`, in the temporary directory.
    pub fn new() -> Self {
        Self::keeping(Keeping::Shared(id("test-run"), MemLog::default()))
    }

    /// Each run its own runlog under its own id, in the temporary directory.
    pub fn per_run() -> Self {
        Self::keeping(Keeping::PerRun)
    }

    /// A store that cannot create runs (a read-only disk) and has none.
    pub fn refusing() -> Self {
        Self::keeping(Keeping::Refusing)
    }

    fn keeping(keeping: Keeping) -> Self {
        Self {
            keeping,
            runs: Mutex::default(),
            workspace: std::env::temp_dir(),
            liveness: Liveness::Unknown,
        }
    }

    /// Every run is called `run_id` (with [`MemStore::new`]).
    pub fn with_id(mut self, run_id: &str) -> Self {
        if let Keeping::Shared(id_, _) = &mut self.keeping {
            *id_ = id(run_id);
        }
        self
    }

    /// Runs work in `workspace`.
    pub fn with_workspace(mut self, workspace: impl Into<PathBuf>) -> Self {
        self.workspace = workspace.into();
        self
    }

    /// Answers [`RunStore::liveness`] with `liveness` for every run.
    pub fn with_liveness(mut self, liveness: Liveness) -> Self {
        self.liveness = liveness;
        self
    }

    /// The shared runlog's appends fail once it holds `n` events.
    pub fn failing_after(mut self, n: usize) -> Self {
        if let Keeping::Shared(_, log) = &mut self.keeping {
            log.fail_after = Some(n);
        }
        self
    }

    /// Appends yield first, so concurrent writers would interleave.
    pub fn yielding(mut self) -> Self {
        if let Keeping::Shared(_, log) = &mut self.keeping {
            log.yielding = true;
        }
        self
    }

    /// The shared runlog (with [`MemStore::new`]), to reopen a run by hand.
    pub fn log(&self) -> MemLog {
        match &self.keeping {
            Keeping::Shared(_, log) => log.clone(),
            _ => panic!("only a store of one runlog has the runlog"),
        }
    }

    /// Every event: the shared runlog's, or every run's in the order they were created.
    pub fn events(&self) -> Vec<RunEvent> {
        match &self.keeping {
            Keeping::Shared(_, log) => log.events(),
            _ => lock(&self.runs)
                .iter()
                .flat_map(|(_, l)| l.events())
                .collect(),
        }
    }

    /// [`MemStore::events`] as their runlog lines: what a reader of the runlog sees.
    pub fn lines(&self) -> Vec<Line> {
        self.events().iter().map(Line::of).collect()
    }

    /// The kinds of [`MemStore::events`].
    pub fn kinds(&self) -> Vec<EventKind> {
        self.events().iter().map(RunEvent::kind).collect()
    }

    /// The events of `kind`, as their runlog lines.
    pub fn of(&self, kind: EventKind) -> Vec<Line> {
        let events = self.events().into_iter();
        events
            .filter(|e| e.kind() == kind)
            .map(|e| Line::of(&e))
            .collect()
    }

    /// The kinds of run `id`'s events; panics when there is no such run.
    pub fn kinds_of(&self, id: &RunId) -> Vec<EventKind> {
        self.events_of(id).iter().map(RunEvent::kind).collect()
    }

    /// Run `id`'s events; panics when there is no such run.
    pub fn events_of(&self, id: &RunId) -> Vec<RunEvent> {
        self.run(id)
            .unwrap_or_else(|| panic!("no run {id}"))
            .events()
    }

    /// The ids of the runs created, in order.
    pub fn ids(&self) -> Vec<RunId> {
        lock(&self.runs).iter().map(|(id, _)| id.clone()).collect()
    }

    /// Stores run `id` with `events`, as a process that is gone left it.
    pub fn insert(&self, id: RunId, events: Vec<RunEvent>) {
        lock(&self.runs).push((id, MemLog::holding(events)));
    }

    fn run(&self, id: &RunId) -> Option<MemLog> {
        match &self.keeping {
            Keeping::Shared(_, log) => Some(log.clone()),
            _ => lock(&self.runs)
                .iter()
                .find(|(run, _)| run == id)
                .map(|(_, log)| log.clone()),
        }
    }

    fn opened(&self, id: RunId, log: MemLog) -> NewRun {
        NewRun {
            id,
            workspace: self.workspace.clone(),
            log: Box::new(log),
            versioned: None,
        }
    }
}

#[async_trait]
impl RunStore for MemStore {
    async fn create_run(&self, run_id: RunId) -> Result<NewRun, StoreError> {
        match &self.keeping {
            Keeping::Shared(id, log) => Ok(self.opened(id.clone(), log.clone())),
            Keeping::PerRun => {
                let log = MemLog::default();
                lock(&self.runs).push((run_id.clone(), log.clone()));
                Ok(self.opened(run_id, log))
            }
            Keeping::Refusing => Err(StoreError::Io {
                action: "cannot create",
                path: "/nowhere".into(),
                detail: "read-only".into(),
            }),
        }
    }
    async fn list_runs(&self, _query: &RunQuery) -> Result<Vec<RunSummary>, StoreError> {
        Ok(Vec::new())
    }
    async fn read_events(&self, id: &RunId) -> Result<Vec<RunEvent>, StoreError> {
        let log = self
            .run(id)
            .ok_or_else(|| StoreError::NotFound(id.clone()))?;
        Ok(log.events())
    }
    async fn reopen_run(&self, id: &RunId) -> Result<NewRun, StoreError> {
        let log = self
            .run(id)
            .ok_or_else(|| StoreError::NotFound(id.clone()))?;
        Ok(self.opened(id.clone(), log))
    }
    async fn liveness(&self, _id: &RunId) -> Liveness {
        self.liveness
    }
}

fn id(text: &str) -> RunId {
    RunId::parse(text).unwrap()
}
