//! The store a worker's run service writes through: the runs it claimed from the queue are
//! opened under their fencing token (every append is refused once another worker holds the
//! run, and at once locally once this worker gave the run up), everything else goes to the
//! store as usual (child runs, reads).

use async_trait::async_trait;
use fabric_domain::{RunEvent, RunId, RunSummary};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::ports::{NewRun, RunLog, RunQuery, RunQueue, RunStore, StoreError};

/// One claimed run: its fence, and whether this worker gave it up (lost or handed back).
struct Held {
    fence: i64,
    revoked: Arc<AtomicBool>,
}

/// A store that opens claimed runs under their fence.
pub struct ClaimedStore {
    inner: Arc<dyn RunStore>,
    queue: Arc<dyn RunQueue>,
    /// The runs this worker holds.
    held: Mutex<HashMap<RunId, Held>>,
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
        self.lock().insert(
            id,
            Held {
                fence,
                revoked: Arc::default(),
            },
        );
    }

    /// Forgets `id` if it is still held with `fence` (a later claim of the same run keeps
    /// its own entry); whether it was.
    pub(crate) fn drop_run(&self, id: &RunId, fence: i64) -> bool {
        let mut held = self.lock();
        if held.get(id).is_some_and(|h| h.fence == fence) {
            held.remove(id);
            true
        } else {
            false
        }
    }

    /// Gives `id` up locally: its log refuses every further append at once (it was lost to
    /// another worker, or is being handed back).
    pub(crate) fn revoke(&self, id: &RunId, fence: i64) {
        if let Some(h) = self.lock().get(id).filter(|h| h.fence == fence) {
            h.revoked.store(true, Ordering::SeqCst);
        }
    }

    /// Gives every held run up locally; the runs with their fences.
    pub(crate) fn revoke_all(&self) -> Vec<(RunId, i64)> {
        self.lock()
            .iter()
            .map(|(id, h)| {
                h.revoked.store(true, Ordering::SeqCst);
                (id.clone(), h.fence)
            })
            .collect()
    }

    /// Whether `id` was given up while held with `fence`.
    pub(crate) fn is_revoked(&self, id: &RunId, fence: i64) -> bool {
        self.lock()
            .get(id)
            .is_some_and(|h| h.fence == fence && h.revoked.load(Ordering::SeqCst))
    }

    /// The runs held, with their fences.
    pub fn held(&self) -> Vec<(RunId, i64)> {
        self.lock()
            .iter()
            .map(|(id, h)| (id.clone(), h.fence))
            .collect()
    }

    /// The fence `id` is held with, if it is held.
    pub(crate) fn fence_of(&self, id: &RunId) -> Option<i64> {
        self.lock().get(id).map(|h| h.fence)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, Held>> {
        // A poisoned lock only means a panic elsewhere while it was held; the map is intact.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a held run under its fence, its log refusing appends once revoked.
    async fn open(&self, id: &RunId, fresh: bool) -> Option<Result<NewRun, StoreError>> {
        let (fence, revoked) = {
            let held = self.lock();
            let h = held.get(id)?;
            (h.fence, Arc::clone(&h.revoked))
        };
        Some(
            self.queue
                .open_claimed(id, fence, fresh)
                .await
                .map(|run| NewRun {
                    log: Box::new(Revocable {
                        inner: run.log,
                        revoked,
                        run: id.clone(),
                        fence,
                    }),
                    ..run
                }),
        )
    }
}

/// A claimed run's log that this worker can close locally.
struct Revocable {
    inner: Box<dyn RunLog>,
    revoked: Arc<AtomicBool>,
    run: RunId,
    fence: i64,
}

#[async_trait]
impl RunLog for Revocable {
    async fn append(&self, event: &RunEvent) -> Result<(), StoreError> {
        if self.revoked.load(Ordering::SeqCst) {
            return Err(StoreError::Fenced {
                run: self.run.clone(),
                fence: self.fence,
            });
        }
        self.inner.append(event).await
    }
}

#[async_trait]
impl RunStore for ClaimedStore {
    async fn create_run(&self, id: RunId) -> Result<NewRun, StoreError> {
        match self.open(&id, true).await {
            Some(opened) => opened,
            None => self.inner.create_run(id).await,
        }
    }

    async fn reopen_run(&self, id: &RunId) -> Result<NewRun, StoreError> {
        match self.open(id, false).await {
            Some(opened) => opened,
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

    async fn liveness(&self, id: &RunId) -> crate::ports::Liveness {
        self.inner.liveness(id).await
    }

    async fn post_to_inbox(
        &self,
        id: &RunId,
        item: &crate::ports::InboxItem,
    ) -> Result<(), StoreError> {
        self.inner.post_to_inbox(id, item).await
    }

    async fn take_inbox(&self, id: &RunId) -> Result<Vec<crate::ports::InboxItem>, StoreError> {
        self.inner.take_inbox(id).await
    }

    async fn flush(&self) {
        self.inner.flush().await;
    }
}
