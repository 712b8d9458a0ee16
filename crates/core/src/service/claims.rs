//! The store a worker's run service writes through: the runs it claimed from the queue are
//! opened under their fencing token (every append is refused once another worker holds the
//! run), everything else goes to the store as usual (child runs, reads).

use async_trait::async_trait;
use fabric_domain::{RunEvent, RunId, RunSummary};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use crate::ports::{NewRun, RunQuery, RunQueue, RunStore, StoreError};

/// A store that opens claimed runs under their fence.
pub struct ClaimedStore {
    inner: Arc<dyn RunStore>,
    queue: Arc<dyn RunQueue>,
    /// The runs this worker holds, with the fence it claimed each with.
    held: Mutex<HashMap<RunId, i64>>,
}

impl ClaimedStore {
    /// Over the shared store and its queue.
    pub fn new(inner: Arc<dyn RunStore>, queue: Arc<dyn RunQueue>) -> Self {
        Self {
            inner,
            queue,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// Records that this worker holds `id` with `fence`.
    pub fn hold(&self, id: RunId, fence: i64) {
        self.lock().insert(id, fence);
    }

    /// Forgets `id` (ended, or lost to another worker); its fence, if it was held.
    pub fn drop_run(&self, id: &RunId) -> Option<i64> {
        self.lock().remove(id)
    }

    /// The runs held, with their fences.
    pub fn held(&self) -> Vec<(RunId, i64)> {
        self.lock()
            .iter()
            .map(|(id, fence)| (id.clone(), *fence))
            .collect()
    }

    /// The fence `id` is held with, if it is held.
    pub fn fence_of(&self, id: &RunId) -> Option<i64> {
        self.fence(id)
    }

    fn fence(&self, id: &RunId) -> Option<i64> {
        self.lock().get(id).copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, i64>> {
        // A poisoned lock only means a panic elsewhere while it was held; the map is intact.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl RunStore for ClaimedStore {
    async fn create_run(&self, id: RunId) -> Result<NewRun, StoreError> {
        match self.fence(&id) {
            Some(fence) => self.queue.open_claimed(&id, fence, true).await,
            None => self.inner.create_run(id).await,
        }
    }

    async fn reopen_run(&self, id: &RunId) -> Result<NewRun, StoreError> {
        match self.fence(id) {
            Some(fence) => self.queue.open_claimed(id, fence, false).await,
            None => self.inner.reopen_run(id).await,
        }
    }

    async fn interrupted_runs(&self) -> Result<Vec<RunId>, StoreError> {
        self.inner.interrupted_runs().await
    }

    async fn list_runs(&self, query: &RunQuery) -> Result<Vec<RunSummary>, StoreError> {
        self.inner.list_runs(query).await
    }

    async fn get_run(&self, id: &RunId) -> Result<RunSummary, StoreError> {
        self.inner.get_run(id).await
    }

    async fn read_events(&self, id: &RunId) -> Result<Vec<RunEvent>, StoreError> {
        self.inner.read_events(id).await
    }

    fn runlog_path(&self, id: &RunId) -> Option<PathBuf> {
        self.inner.runlog_path(id)
    }

    async fn flush(&self) {
        self.inner.flush().await;
    }
}
