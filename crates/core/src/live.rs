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
use fabric_domain::runlog::{self, Payload};
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
        self.register_with(id, self.root.child_token())
    }

    /// Registers a run whose token derives from another (a child run's from its parent's),
    /// which itself derives from the registry's.
    pub fn register_with(&self, id: RunId, cancel: CancellationToken) -> Arc<LiveRun> {
        let run = Arc::new(LiveRun::new(id.clone(), cancel));
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
    /// The events so far and whether the run has ended, under one lock: a follower that
    /// sees `ended` has also seen every event recorded before it (the terminal one too).
    state: Mutex<State>,
    /// Bumped after every change of `state`; followers wait on it.
    changed: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct State {
    /// The events so far, in `seq` order (the recorder is the only writer), kept as their
    /// runlog lines: a `Value` tree takes about three times the memory of its text, and
    /// 10,000 runs in flight each hold every event (docs/BENCHMARKS.md).
    events: Vec<Stored>,
    ended: bool,
}

/// One event as JSON text, with its kind for the checks that need no decoding.
#[derive(Debug)]
struct Stored {
    kind: EventKind,
    line: Box<str>,
}

impl Stored {
    fn new(event: &RunEvent) -> Self {
        Self {
            kind: event.kind,
            // Serialising an event cannot fail: its payload is a `Value`, whose keys are
            // strings. An empty line would decode to the placeholder below, never panic.
            line: serde_json::to_string(event)
                .unwrap_or_default()
                .into_boxed_str(),
        }
    }

    fn decode(&self) -> RunEvent {
        // The text was produced by `serde_json` from a `RunEvent` (with exact float
        // round-trips), so it decodes; the fallback keeps this total.
        serde_json::from_str(&self.line).unwrap_or(RunEvent {
            seq: 0,
            ts: 0.0,
            kind: self.kind,
            step: None,
            payload: json!({}),
        })
    }
}

impl LiveRun {
    fn new(id: RunId, cancel: CancellationToken) -> Self {
        Self {
            id,
            cancel,
            state: Mutex::new(State::default()),
            changed: watch::Sender::new(0),
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
        lock(&self.state)
            .events
            .last()
            .filter(|e| e.kind.is_terminal())
            .map_or(RunStatus::Running, |e| terminal_status(&e.decode()))
    }

    /// A copy of the events recorded so far.
    pub fn events(&self) -> Vec<RunEvent> {
        self.with_events(<[RunEvent]>::to_vec)
    }

    /// Calls `f` with the events recorded so far, decoded from their stored text.
    pub fn with_events<R>(&self, f: impl FnOnce(&[RunEvent]) -> R) -> R {
        let decoded: Vec<RunEvent> = lock(&self.state)
            .events
            .iter()
            .map(Stored::decode)
            .collect();
        f(&decoded)
    }

    /// The event at position `index` (its `seq`), waiting for it while the run goes on;
    /// `None` once the run has ended without one.
    pub async fn next_event(&self, index: usize) -> Option<RunEvent> {
        // Subscribe before looking, so a change made after the look still wakes us.
        let mut changed = self.changed.subscribe();
        loop {
            {
                // One lock for both: an event recorded before `finish` is always seen.
                let state = lock(&self.state);
                if let Some(event) = state.events.get(index) {
                    return Some(event.decode());
                }
                if state.ended {
                    return None;
                }
            }
            if changed.changed().await.is_err() {
                return None;
            }
        }
    }

    /// The `run_failed` event (status `failed`, `reason`) that would end this run now, or
    /// `None` when it already has its terminal event. The caller records it (runlog first,
    /// then [`RunObserver::on_event`]) when the run's own code could not, e.g. after a panic.
    pub fn failure_event(&self, reason: &str) -> Option<RunEvent> {
        let state = lock(&self.state);
        if state.events.last().is_some_and(|e| e.kind.is_terminal()) {
            return None;
        }
        let last = state.events.last().map(Stored::decode);
        let last = last.as_ref();
        Some(RunEvent {
            seq: last.map_or(0, |e| e.seq + 1),
            ts: last.map_or(0.0, |e| e.ts),
            kind: EventKind::RunFailed,
            step: None,
            // Built from a struct that cannot fail to encode (an id, a status, a text).
            payload: runlog::RunAborted {
                run_id: self.id.clone(),
                status: RunStatus::Failed,
                reason: reason.to_owned(),
            }
            .to_json()
            .unwrap_or_default(),
        })
    }

    /// Marks the run as stopped without an end (a suspending shutdown: the next start
    /// continues it): followers' streams end without a terminal event, as docs/HTTP.md
    /// says, instead of a `run_failed` that would tell them the run failed.
    pub fn suspend(&self) {
        lock(&self.state).ended = true;
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Marks the run as ended. When it ended without a terminal event (the runlog itself
    /// could not be written), followers get a `run_failed` event with the reason, so every
    /// stream ends with a terminal event; that event exists only in memory.
    pub fn finish(&self, failure: Option<&str>) {
        let reason = failure.unwrap_or("the run ended without a terminal event");
        let missing = self.failure_event(reason);
        {
            let mut state = lock(&self.state);
            // Only the run's own task records events, and it is the one finishing: nothing
            // was recorded since `failure_event` looked.
            if let Some(event) = missing
                && !state.events.last().is_some_and(|e| e.kind.is_terminal())
            {
                state.events.push(Stored::new(&event));
            }
            state.ended = true;
        }
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl ChatObserver for LiveRun {
    fn on_text_delta(&self, _delta: &str) {}
}

#[async_trait]
impl RunObserver for LiveRun {
    async fn on_event(&self, event: &RunEvent) {
        let stored = Stored::new(event);
        lock(&self.state).events.push(stored);
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// The status a terminal event records (`failed` when it names none we know).
pub fn terminal_status(event: &RunEvent) -> RunStatus {
    event.terminal_status().unwrap_or(RunStatus::Failed)
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
            payload: json!({"run_id": "r", "status": "completed", "specialist_ids": ["a"],
                             "task_force_mode": "single", "steps": 1, "reason": null,
                             "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                             "result": {"summary": "s"}}),
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
        // The same bytes as before the payloads were typed.
        assert_eq!(
            last.payload.to_string(),
            r#"{"reason":"disk full","run_id":"20260101-000000-000-aaaaaaaa","status":"failed"}"#
        );
        assert!(run.next_event(2).await.is_none());
        assert_eq!(run.status(), RunStatus::Failed);
    }

    /// The terminal event and `finish` landing while a follower looks must never lose the
    /// terminal event: the follower sees it, or waits and then sees it.
    #[test]
    fn a_follower_racing_the_end_still_gets_the_terminal_event() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        for _ in 0..3000 {
            let run = Arc::new(LiveRun::new(id(), CancellationToken::new()));
            runtime.block_on(run.on_event(&event(0, EventKind::RunStart)));
            let barrier = Arc::new(std::sync::Barrier::new(2));
            let writer = {
                let (run, barrier) = (Arc::clone(&run), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    futures_util::FutureExt::now_or_never(
                        run.on_event(&event(1, EventKind::RunComplete)),
                    );
                    run.finish(None);
                })
            };
            barrier.wait();
            let got = runtime.block_on(run.next_event(1));
            writer.join().unwrap_or_else(|_| panic!("writer panicked"));
            assert_eq!(got.map(|e| e.kind), Some(EventKind::RunComplete));
        }
    }

    #[tokio::test]
    async fn failure_event_follows_the_last_event_and_only_once() {
        let run = Arc::new(LiveRun::new(id(), CancellationToken::new()));
        run.on_event(&event(0, EventKind::RunStart)).await;
        let failed = run
            .failure_event("it panicked")
            .unwrap_or_else(|| panic!("no failure event"));
        assert_eq!((failed.seq, failed.kind), (1, EventKind::RunFailed));
        assert_eq!(failed.payload["reason"], "it panicked");
        run.on_event(&failed).await;
        assert!(run.failure_event("again").is_none());
        run.finish(Some("again"));
        assert_eq!(
            run.events().len(),
            2,
            "finish adds no second terminal event"
        );
        assert_eq!(run.with_events(<[RunEvent]>::len), 2);
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
