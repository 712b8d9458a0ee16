//! Runs in flight in one process, for front ends that watch runs they did not start
//! themselves: the HTTP API's SSE followers, late joiners, `Last-Event-ID` resumption, and
//! cancellation by id.
//!
//! A [`LiveRun`] is the [`RunObserver`] of its run: every event, after the runlog has it,
//! is appended to the run's own in-memory buffer and the followers are woken. Followers read
//! the buffer at their own pace through [`LiveRun::next_event`] with their own cursor, so a
//! slow follower never loses an event and never slows the run; the buffer is bounded by the
//! run itself (`max_steps` and the runlog's caps on payloads) and is dropped with the last
//! follower once the run ended. Finished runs are read from the runlog, the source of truth.

use async_trait::async_trait;
use fabric_domain::{EventKind, RunEvent, RunId, RunStatus};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::ports::{ChatObserver, RunObserver};

/// The runs in flight in this process, by id.
#[derive(Debug, Default)]
pub struct RunRegistry {
    runs: Mutex<HashMap<RunId, Arc<LiveRun>>>,
    /// Parent of every run's token: cancelling it cancels every run (server shutdown).
    root: CancellationToken,
}

impl RunRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a run that is about to start; its token is a child of the registry's, so
    /// [`RunRegistry::cancel_all`] reaches it.
    pub fn register(&self, id: RunId) -> Arc<LiveRun> {
        let run = Arc::new(LiveRun::new(id.clone(), self.root.child_token()));
        lock(&self.runs).insert(id, Arc::clone(&run));
        run
    }

    /// The run with this id, while it is in flight.
    pub fn get(&self, id: &RunId) -> Option<Arc<LiveRun>> {
        lock(&self.runs).get(id).cloned()
    }

    /// Forgets a run once it ended; followers holding it keep reading its buffer.
    pub fn remove(&self, id: &RunId) {
        lock(&self.runs).remove(id);
    }

    /// How many runs are in flight.
    pub fn len(&self) -> usize {
        lock(&self.runs).len()
    }

    /// Whether no run is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Cancels every run in flight and every run registered later (shutdown).
    pub fn cancel_all(&self) {
        self.root.cancel();
    }
}

/// One run in flight: its cancellation token and every event it has recorded so far.
#[derive(Debug)]
pub struct LiveRun {
    id: RunId,
    cancel: CancellationToken,
    /// The events so far, in `seq` order (the recorder is the only writer).
    events: Mutex<Vec<RunEvent>>,
    /// How many events the buffer holds, and whether the run has ended; followers wait on it.
    progress: watch::Sender<Progress>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Progress {
    events: usize,
    ended: bool,
}

impl LiveRun {
    fn new(id: RunId, cancel: CancellationToken) -> Self {
        Self {
            id,
            cancel,
            events: Mutex::new(Vec::new()),
            progress: watch::Sender::new(Progress::default()),
        }
    }

    /// The run's id.
    pub fn id(&self) -> &RunId {
        &self.id
    }

    /// The token the run's loop and tools watch.
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Asks the run to stop; it ends with `run_failed` / `cancelled` in its runlog.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// `running` until the terminal event, then the status it records.
    pub fn status(&self) -> RunStatus {
        lock(&self.events)
            .last()
            .filter(|e| e.kind.is_terminal())
            .map_or(RunStatus::Running, terminal_status)
    }

    /// A copy of the events recorded so far.
    pub fn events(&self) -> Vec<RunEvent> {
        lock(&self.events).clone()
    }

    /// The event at position `index` (its `seq`), waiting for it while the run goes on;
    /// `None` once the run has ended without one.
    pub async fn next_event(&self, index: usize) -> Option<RunEvent> {
        let mut progress = self.progress.subscribe();
        loop {
            // Check after subscribing, so an event recorded in between still wakes us.
            if let Some(event) = lock(&self.events).get(index) {
                return Some(event.clone());
            }
            if progress.borrow_and_update().ended {
                return None;
            }
            if progress.changed().await.is_err() {
                return None;
            }
        }
    }

    /// Marks the run as ended. When it ended without a terminal event (the runlog itself
    /// could not be written), followers get a `run_failed` event with the reason, so every
    /// stream ends with a terminal event; that event exists only in memory.
    pub fn finish(&self, failure: Option<&str>) {
        let count = {
            let mut events = lock(&self.events);
            let has_terminal = events.last().is_some_and(|e| e.kind.is_terminal());
            if !has_terminal {
                let reason = failure.unwrap_or("the run ended without a terminal event");
                let seq = events.last().map_or(0, |e| e.seq + 1);
                let ts = events.last().map_or(0.0, |e| e.ts);
                events.push(RunEvent {
                    seq,
                    ts,
                    kind: EventKind::RunFailed,
                    step: None,
                    payload: json!({
                        "run_id": self.id,
                        "status": RunStatus::Failed,
                        "reason": reason,
                    }),
                });
            }
            events.len()
        };
        self.progress.send_modify(|p| {
            p.events = count;
            p.ended = true;
        });
    }
}

impl ChatObserver for LiveRun {
    fn on_text_delta(&self, _delta: &str) {}
}

#[async_trait]
impl RunObserver for LiveRun {
    async fn on_event(&self, event: &RunEvent) {
        let count = {
            let mut events = lock(&self.events);
            events.push(event.clone());
            events.len()
        };
        self.progress.send_modify(|p| p.events = count);
    }
}

/// The status a terminal event records (`failed` when it names none we know).
pub fn terminal_status(event: &RunEvent) -> RunStatus {
    event
        .payload
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok())
        .unwrap_or(RunStatus::Failed)
}

/// A poisoned lock only means another thread panicked while holding it; the data (a list of
/// events, a map of runs) is still consistent, so keep going rather than spread the panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, kind: EventKind) -> RunEvent {
        RunEvent {
            seq,
            ts: 1.0,
            kind,
            step: None,
            payload: json!({"status": "completed"}),
        }
    }

    fn id() -> RunId {
        RunId::parse("20260101-000000-000-aaaaaaaa").unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn a_late_follower_gets_every_event_then_the_end() {
        let registry = RunRegistry::new();
        let run = registry.register(id());
        run.on_event(&event(0, EventKind::RunStart)).await;
        let follower = Arc::clone(&run);
        let reader = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(e) = follower.next_event(seen.len()).await {
                seen.push(e.seq);
            }
            seen
        });
        run.on_event(&event(1, EventKind::LlmRequest)).await;
        run.on_event(&event(2, EventKind::RunComplete)).await;
        assert_eq!(run.status(), RunStatus::Completed);
        run.finish(None);
        registry.remove(run.id());
        assert!(registry.is_empty());
        assert_eq!(reader.await.unwrap_or_default(), vec![0, 1, 2]);
    }

    #[tokio::test]
    async fn a_run_without_terminal_event_still_ends_its_streams_with_one() {
        let registry = RunRegistry::new();
        let run = registry.register(id());
        run.on_event(&event(0, EventKind::RunStart)).await;
        run.finish(Some("disk full"));
        let last = run
            .next_event(1)
            .await
            .unwrap_or_else(|| panic!("no event"));
        assert_eq!(last.kind, EventKind::RunFailed);
        assert_eq!(last.seq, 1);
        assert_eq!(last.payload["reason"], "disk full");
        assert!(run.next_event(2).await.is_none());
        assert_eq!(run.status(), RunStatus::Failed);
    }

    #[tokio::test]
    async fn cancel_all_reaches_every_run() {
        let registry = RunRegistry::new();
        let run = registry.register(id());
        assert!(!run.cancel_token().is_cancelled());
        registry.cancel_all();
        assert!(run.cancel_token().is_cancelled());
    }
}
