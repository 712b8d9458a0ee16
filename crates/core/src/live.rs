//! Runs in flight in one process, for front ends that watch runs they did not start
//! themselves: the HTTP API's SSE followers, late joiners, `Last-Event-ID` resumption, and
//! cancellation by id.
//!
//! A [`LiveRun`] is the [`RunObserver`] of its run: every event, after the runlog has it,
//! is appended to the run's in-memory window and the followers are woken. Each [`Follower`]
//! reads at its own pace with its own cursor, so a slow follower never loses an event and
//! never slows the run.
//!
//! The window holds what some follower has not read yet, and always the last event (the
//! run's status); older events are read back from the store, which has every event before
//! the window is told of it. Keeping every event of every run in flight cost each run its
//! whole runlog in memory, 3 KiB or more before its first model answer (issue #14), for
//! followers that mostly never come. A registry without a store keeps every event.

use async_trait::async_trait;
use fabric_domain::runlog;
use fabric_domain::{LiveToolOutput, OutputChunk, RunEvent, RunId, RunStatus};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::ports::{ChatObserver, RunObserver, RunStore};

/// The runs in flight in this process, by id.
#[derive(Default)]
pub struct RunRegistry {
    runs: Mutex<HashMap<RunId, Arc<LiveRun>>>,
    /// Parent of every run's token: cancelling it cancels every run (server shutdown).
    root: CancellationToken,
    /// Where the runs' older events are read back from; `None`: every event stays in memory.
    backlog: Option<Arc<dyn RunStore>>,
}

impl std::fmt::Debug for RunRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunRegistry")
            .field("runs", &self.len())
            .field("windowed", &self.backlog.is_some())
            .finish()
    }
}

impl RunRegistry {
    /// An empty registry whose runs keep every event in memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty registry whose runs keep only a window of their events in memory and read
    /// older ones back from `store`, where their runlogs are.
    pub fn windowed(store: Arc<dyn RunStore>) -> Self {
        Self {
            backlog: Some(store),
            ..Self::default()
        }
    }

    /// Registers a run that is about to start; its token is a child of the registry's, so
    /// [`RunRegistry::cancel_all`] reaches it.
    pub fn register(&self, id: RunId) -> Arc<LiveRun> {
        self.register_with(id, self.root.child_token())
    }

    /// Registers a run whose token derives from another (a child run's from its parent's),
    /// which itself derives from the registry's.
    pub(crate) fn register_with(&self, id: RunId, cancel: CancellationToken) -> Arc<LiveRun> {
        let run = Arc::new(LiveRun::new(id.clone(), cancel, self.backlog.clone()));
        lock(&self.runs).insert(id, Arc::clone(&run));
        run
    }

    /// The run with this id, while it is in flight.
    pub fn get(&self, id: &RunId) -> Option<Arc<LiveRun>> {
        lock(&self.runs).get(id).cloned()
    }

    /// Forgets a run once it ended; followers holding it keep reading it.
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
    pub(crate) fn cancel_all(&self) {
        self.root.cancel();
    }
}

/// One run in flight: its cancellation token and the window of its events.
pub struct LiveRun {
    id: RunId,
    cancel: CancellationToken,
    /// Where events that left the window are read back from; `None`: none leave it.
    backlog: Option<Arc<dyn RunStore>>,
    /// The window and whether the run has ended, under one lock: a follower that sees
    /// `ended` has also seen every event recorded before it (the terminal one too).
    state: Mutex<State>,
    /// Bumped after every change of `state`; followers wait on it.
    changed: watch::Sender<u64>,
}

impl std::fmt::Debug for LiveRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveRun").field("id", &self.id).finish()
    }
}

#[derive(Debug, Default)]
struct State {
    /// The `seq` of `events[0]`: events come in `seq` order without gaps (the recorder is
    /// the only writer), so the event with `seq` n is at `n - first`. Not 0 for a resumed
    /// run, whose earlier events were recorded by the process before.
    first: u64,
    /// The window, as the typed events the recorder showed (no JSON in memory: a payload's
    /// struct is about the size of its text, a `Value` tree about three times that). Boxed:
    /// a windowed run keeps one event, and the deque's spare slots would each be a whole
    /// event (408 bytes; 1.2 KiB of every run in flight, issue #45).
    events: VecDeque<Box<RunEvent>>,
    ended: bool,
    /// Notices for the people following the run ([`RunObserver::on_notice`]), the latest
    /// few; `notices_said` counts every notice ever given, so a follower knows what it has
    /// not seen.
    notices: VecDeque<String>,
    notices_said: u64,
    /// Running tools' live output (issue #42, ADR-106), the latest [`OUTPUT_KEPT`] items,
    /// each with the `seq` of the event recorded after it (a follower gets it once it has
    /// read every event before it); `output_said` counts every item ever kept. Kept only
    /// while someone follows: a follower gets what was printed after it came.
    output: VecDeque<(u64, Arc<LiveToolOutput>)>,
    output_said: u64,
    /// The `seq` each follower reads next, by follower number: the window keeps every event
    /// from the smallest on.
    cursors: Vec<(u64, u64)>,
    next_follower: u64,
}

impl State {
    fn get(&self, seq: u64) -> Option<&RunEvent> {
        let offset = usize::try_from(seq.checked_sub(self.first)?).ok()?;
        self.events.get(offset).map(|event| &**event)
    }

    fn last(&self) -> Option<&RunEvent> {
        self.events.back().map(|event| &**event)
    }

    fn push(&mut self, event: RunEvent) {
        if self.events.is_empty() {
            self.first = event.seq;
        }
        self.events.push_back(Box::new(event));
    }

    /// Drops what no follower needs, keeping the last event.
    fn trim(&mut self) {
        let needed = self
            .cursors
            .iter()
            .map(|&(_, next)| next)
            .min()
            .unwrap_or(u64::MAX);
        while self.events.len() > 1 && self.first < needed {
            self.events.pop_front();
            self.first += 1;
        }
    }

    /// The `seq` the next event will have.
    fn next_seq(&self) -> u64 {
        self.last().map_or(self.first, |e| e.seq + 1)
    }

    fn move_cursor(&mut self, follower: u64, next: u64) {
        if let Some(cursor) = self.cursors.iter_mut().find(|(n, _)| *n == follower) {
            cursor.1 = next;
        }
    }
}

impl LiveRun {
    fn new(id: RunId, cancel: CancellationToken, backlog: Option<Arc<dyn RunStore>>) -> Self {
        Self {
            id,
            cancel,
            backlog,
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
        status_after(lock(&self.state).last())
    }

    /// Every event recorded so far: the window, after what the store has from before it.
    pub async fn events(&self) -> Vec<RunEvent> {
        let (first, mut window) = {
            let state = lock(&self.state);
            let window: Vec<RunEvent> = state.events.iter().map(|e| (**e).clone()).collect();
            (state.first, window)
        };
        if first == 0 {
            return window;
        }
        let mut events = self.backfill(0, first).await;
        events.append(&mut window);
        events
    }

    /// The events with `seq` from `from` up to `until` (excluded), from the store; none
    /// without one, or when it cannot be read (logged: the window still has the rest).
    async fn backfill(&self, from: u64, until: u64) -> Vec<RunEvent> {
        let Some(store) = &self.backlog else {
            return Vec::new();
        };
        match store.read_events(&self.id).await {
            Ok(mut events) => {
                events.retain(|e| (from..until).contains(&e.seq));
                events
            }
            Err(e) => {
                tracing::warn!(run_id = %self.id, error = %e, "cannot read a live run's earlier events back from the store");
                Vec::new()
            }
        }
    }

    /// A follower reading from the event with `seq` `from` on; the window keeps every event
    /// it has not read yet.
    pub fn follow(self: &Arc<Self>, from: u64) -> Follower {
        let mut state = lock(&self.state);
        let number = state.next_follower;
        state.next_follower += 1;
        state.cursors.push((number, from));
        let notices_seen = state.notices_said;
        let output_seen = state.output_said;
        Follower {
            run: Arc::clone(self),
            number,
            next: from,
            earlier: VecDeque::new(),
            notices_seen,
            output_seen,
        }
    }

    /// The `run_failed` event (status `failed`, `reason`) that would end this run now, or
    /// `None` when it already has its terminal event. The caller records it (runlog first,
    /// then [`RunObserver::on_event`]) when the run's own code could not, e.g. after a panic.
    pub(crate) fn failure_event(&self, reason: &str) -> Option<RunEvent> {
        let state = lock(&self.state);
        if state.last().is_some_and(|e| e.kind().is_terminal()) {
            return None;
        }
        let last = state.last();
        Some(RunEvent {
            seq: last.map_or(0, |e| e.seq + 1),
            ts: last.map_or(0.0, |e| e.ts),
            step: None,
            member: None,
            payload: runlog::RunAborted {
                run_id: self.id.clone(),
                status: RunStatus::Failed,
                reason: reason.to_owned(),
            }
            .into(),
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
    /// stream ends with a terminal event; that event exists only in memory (it is the last
    /// one, which the window always keeps).
    pub fn finish(&self, failure: Option<&str>) {
        let reason = failure.unwrap_or("the run ended without a terminal event");
        let missing = self.failure_event(reason);
        {
            let mut state = lock(&self.state);
            // Only the run's own task records events, and it is the one finishing: nothing
            // was recorded since `failure_event` looked.
            if let Some(event) = missing
                && !state.last().is_some_and(|e| e.kind().is_terminal())
            {
                state.push(event);
            }
            state.ended = true;
        }
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// A reader of one run's events in order, from memory or, for what left the window before
/// it came, from the store. Dropping it lets the window forget what it kept for it.
pub struct Follower {
    run: Arc<LiveRun>,
    number: u64,
    /// The `seq` it reads next.
    next: u64,
    /// Events read back from the store, not yet taken.
    earlier: VecDeque<RunEvent>,
    /// How many of the run's notices it has taken (it sees those given after it came).
    notices_seen: u64,
    /// How many items of live output it has taken or missed (those given after it came).
    output_seen: u64,
}

/// What a follower reads: the run's events and, between them, notices for people.
// An event is its typed payload inline; a follower takes one at a time and hands it on at
// once, so boxing it would only add an allocation per event.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Followed {
    /// A runlog event.
    Event(RunEvent),
    /// A notice ([`RunObserver::on_notice`]): not an event, not in the runlog.
    Notice(String),
    /// A running tool's live output ([`RunObserver::on_tool_output`]): not in the runlog;
    /// a follower too slow for it is told how many lines it missed.
    Output(Arc<LiveToolOutput>),
}

/// The notices a run keeps for followers that have not read them yet.
const NOTICES_KEPT: usize = 8;

/// The items of live output a run keeps for followers that have not read them yet (at most
/// [`crate::live_output::MAX_LINE_BYTES`] each): older ones are missed, and said so.
pub const OUTPUT_KEPT: usize = 256;

impl Follower {
    /// The next event, waiting for it while the run goes on; `None` once the run has ended
    /// without one. Notices and live output are skipped.
    pub async fn next(&mut self) -> Option<RunEvent> {
        loop {
            match self.next_followed().await? {
                Followed::Event(event) => return Some(event),
                Followed::Notice(_) | Followed::Output(_) => {}
            }
        }
    }

    /// The next event or notice, waiting while the run goes on; `None` once the run has
    /// ended without one.
    pub async fn next_followed(&mut self) -> Option<Followed> {
        loop {
            if let Some(event) = self.earlier.pop_front() {
                self.advance(event.seq + 1);
                return Some(Followed::Event(event));
            }
            // Subscribe before looking, so a change made after the look still wakes us.
            let mut changed = self.run.changed.subscribe();
            let missing = {
                // One lock for all: an event recorded before `finish` is always seen.
                let state = lock(&self.run.state);
                if state.notices_said > self.notices_seen {
                    // The oldest kept one it has not seen (older ones were dropped).
                    let kept = state.notices.len() as u64;
                    let first_kept = state.notices_said - kept;
                    let at = self.notices_seen.max(first_kept);
                    self.notices_seen = at + 1;
                    // `at` is within the kept notices: first_kept <= at < notices_said.
                    let notice =
                        state.notices[usize::try_from(at - first_kept).unwrap_or(0)].clone();
                    return Some(Followed::Notice(notice));
                }
                if let Some(output) = take_output(&mut self.output_seen, self.next, &state) {
                    return Some(output);
                }
                if let Some(event) = state.get(self.next) {
                    let event = event.clone();
                    drop(state);
                    self.advance(event.seq + 1);
                    return Some(Followed::Event(event));
                }
                if self.next < state.first && !state.events.is_empty() {
                    // Left the window before this follower came: the cursor keeps
                    // everything from `next` on, so only `next..first` is to be read back.
                    Some(state.first)
                } else if state.ended {
                    return None;
                } else {
                    None
                }
            };
            if let Some(first) = missing {
                self.earlier = self.run.backfill(self.next, first).await.into();
                if self.earlier.is_empty() {
                    // The store lacks them (unreadable, or none to read from): go on with
                    // the window rather than wait for events that will not come.
                    tracing::warn!(run_id = %self.run.id, from = self.next, to = first, "earlier events of a live run are missing; the follower skips them");
                    self.advance(first);
                }
                continue;
            }
            if changed.changed().await.is_err() {
                return None;
            }
        }
    }

    fn advance(&mut self, next: u64) {
        self.next = next;
        let mut state = lock(&self.run.state);
        state.move_cursor(self.number, next);
        if self.run.backlog.is_some() {
            state.trim();
        }
    }
}

/// The next item of live output a follower that read the events before `next` and
/// `output_seen` items may read now: one printed after those events, or a count of the lines
/// it missed by reading too slowly.
fn take_output(output_seen: &mut u64, next: u64, state: &State) -> Option<Followed> {
    let kept = state.output.len() as u64;
    let first_kept = state.output_said - kept;
    let at = (*output_seen).max(first_kept);
    let (after, output) = state.output.get(usize::try_from(at - first_kept).ok()?)?;
    if *after > next {
        return None;
    }
    let missed = at - *output_seen;
    if missed > 0 {
        *output_seen = at;
        return Some(Followed::Output(Arc::new(LiveToolOutput {
            chunk: OutputChunk::Dropped { dropped: missed },
            ..(**output).clone()
        })));
    }
    *output_seen = at + 1;
    Some(Followed::Output(Arc::clone(output)))
}

impl Drop for Follower {
    fn drop(&mut self) {
        let mut state = lock(&self.run.state);
        state.cursors.retain(|(n, _)| *n != self.number);
        if self.run.backlog.is_some() {
            state.trim();
        }
        if state.cursors.is_empty() {
            state.output.clear();
        }
    }
}

impl ChatObserver for LiveRun {
    fn on_text_delta(&self, _delta: &str) {}
}

#[async_trait]
impl RunObserver for LiveRun {
    async fn on_event(&self, event: &RunEvent) {
        let event = event.clone();
        {
            let mut state = lock(&self.state);
            state.push(event);
            if self.backlog.is_some() {
                state.trim();
            }
        }
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn on_notice(&self, notice: &str) {
        {
            let mut state = lock(&self.state);
            if state.notices.len() == NOTICES_KEPT {
                state.notices.pop_front();
            }
            state.notices.push_back(notice.to_owned());
            state.notices_said += 1;
        }
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn on_tool_output(&self, output: &LiveToolOutput) {
        {
            let mut state = lock(&self.state);
            if state.cursors.is_empty() {
                return;
            }
            if state.output.len() == OUTPUT_KEPT {
                state.output.pop_front();
            }
            let after = state.next_seq();
            state.output.push_back((after, Arc::new(output.clone())));
            state.output_said += 1;
        }
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// A run's status after its last event: its end's, `input_required` when it waits for a
/// person (its process lets go of it; issue #42), else `running`.
pub fn status_after(last: Option<&RunEvent>) -> RunStatus {
    match last {
        Some(e) if e.kind().is_terminal() => terminal_status(e),
        Some(e) if e.kind() == fabric_domain::EventKind::InputRequired => RunStatus::InputRequired,
        _ => RunStatus::Running,
    }
}

/// The status a terminal event records (`failed` when it names none we know).
pub fn terminal_status(event: &RunEvent) -> RunStatus {
    event.terminal_status().unwrap_or(RunStatus::Failed)
}

/// A poisoned lock only means another thread panicked while holding it; the data (a window
/// of events, a map of runs) is still consistent, so keep going rather than spread the panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fakes::MemStore;
    use crate::ports::RunLog;
    use fabric_domain::EventKind;
    use serde_json::json;

    fn event(seq: u64, kind: EventKind) -> RunEvent {
        let end = json!({"run_id": "r", "status": "completed", "specialist_ids": ["a"],
                         "task_force_mode": "single", "steps": 1, "reason": null,
                         "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                         "result": {"summary": "s"}});
        RunEvent {
            seq,
            ..crate::fakes::sample(kind, 1.0, end)
        }
    }

    fn id() -> RunId {
        RunId::parse("20260101-000000-000-aaaaaaaa").unwrap_or_else(|e| panic!("{e}"))
    }

    /// Records `event` as the recorder does: runlog first, then the live run.
    async fn record(store: &MemStore, run: &LiveRun, event: RunEvent) {
        let appended = store.log().append(&event).await;
        appended.unwrap_or_else(|e| panic!("{e}"));
        run.on_event(&event).await;
    }

    fn in_memory(run: &LiveRun) -> Vec<u64> {
        let state = lock(&run.state);
        (state.first..state.first + state.events.len() as u64).collect()
    }

    async fn read_all(mut follower: Follower) -> Vec<u64> {
        let mut seen = Vec::new();
        while let Some(e) = follower.next().await {
            seen.push(e.seq);
        }
        seen
    }

    #[tokio::test]
    async fn issue_26_followers_get_notices_given_after_they_came_between_events() {
        let registry = RunRegistry::new();
        let run = registry.register(id());
        run.on_notice("before anyone followed");
        let mut follower = run.follow(0);
        let mut plain = run.follow(0);
        run.on_event(&event(0, EventKind::RunStart)).await;
        run.on_notice("no worker has claimed it");
        run.on_event(&event(1, EventKind::RunComplete)).await;
        run.finish(None);
        let mut seen = Vec::new();
        while let Some(item) = follower.next_followed().await {
            seen.push(shown(&item));
        }
        // A notice comes before the events not yet read when it was given.
        assert_eq!(
            seen,
            ["no worker has claimed it", "run_start", "run_complete"]
        );
        // `next` gives events only.
        assert_eq!(plain.next().await.map(|e| e.seq), Some(0));
        assert_eq!(plain.next().await.map(|e| e.seq), Some(1));
        assert!(plain.next().await.is_none());
    }

    #[tokio::test]
    async fn a_late_follower_gets_every_event_then_the_end() {
        let registry = RunRegistry::new();
        let run = registry.register(id());
        run.on_event(&event(0, EventKind::RunStart)).await;
        let reader = tokio::spawn(read_all(run.follow(0)));
        run.on_event(&event(1, EventKind::LlmRequest)).await;
        run.on_event(&event(2, EventKind::RunComplete)).await;
        assert_eq!(run.status(), RunStatus::Completed);
        run.finish(None);
        registry.remove(run.id());
        assert!(registry.is_empty());
        assert_eq!(reader.await.unwrap_or_default(), vec![0, 1, 2]);
        assert_eq!(
            in_memory(&run),
            vec![0, 1, 2],
            "without a store every event stays"
        );
    }

    /// Issue #14: with a store, a run in flight keeps only its last event and what its
    /// followers have not read; a late follower reads the rest back from the store.
    #[tokio::test]
    async fn issue_14_a_windowed_run_keeps_only_what_its_followers_need() {
        let log = Arc::new(MemStore::new());
        let registry = RunRegistry::windowed(log.clone());
        let run = registry.register(id());
        for seq in 0..4 {
            record(&log, &run, event(seq, EventKind::LlmRequest)).await;
        }
        assert_eq!(in_memory(&run), vec![3], "no follower: only the last event");

        // A follower that stops reading pins the window from where it stands.
        let mut slow = run.follow(0);
        assert_eq!(slow.next().await.map(|e| e.seq), Some(0), "read back");
        assert_eq!(slow.next().await.map(|e| e.seq), Some(1));
        record(&log, &run, event(4, EventKind::LlmRequest)).await;
        record(&log, &run, event(5, EventKind::LlmRequest)).await;
        assert_eq!(in_memory(&run), vec![3, 4, 5], "kept for the slow follower");
        assert_eq!(slow.next().await.map(|e| e.seq), Some(2));
        assert_eq!(slow.next().await.map(|e| e.seq), Some(3));
        assert_eq!(in_memory(&run), vec![4, 5], "what it read is let go");
        drop(slow);
        assert_eq!(in_memory(&run), vec![5], "and all of it when it leaves");

        // Every event, in order, for a follower that came late and one from the middle.
        let late = tokio::spawn(read_all(run.follow(0)));
        let middle = tokio::spawn(read_all(run.follow(3)));
        record(&log, &run, event(6, EventKind::RunComplete)).await;
        run.finish(None);
        assert_eq!(late.await.unwrap_or_default(), (0..7).collect::<Vec<_>>());
        assert_eq!(middle.await.unwrap_or_default(), (3..7).collect::<Vec<_>>());
        let all: Vec<u64> = run.events().await.iter().map(|e| e.seq).collect();
        assert_eq!(all, (0..7).collect::<Vec<_>>());
        assert_eq!(run.status(), RunStatus::Completed);
    }

    /// Issue #14: a resumed run's first live event is not `seq` 0; followers get the events
    /// by `seq`, the earlier ones from the store (they were counted from 0 in the window).
    #[tokio::test]
    async fn issue_14_a_resumed_run_is_followed_by_seq() {
        let log = Arc::new(MemStore::new());
        for seq in 0..3 {
            let appended = log.log().append(&event(seq, EventKind::LlmRequest)).await;
            appended.unwrap_or_else(|e| panic!("{e}"));
        }
        let run = RunRegistry::windowed(log.clone()).register(id());
        let after_one = run.follow(2);
        let from_start = run.follow(0);
        record(&log, &run, event(3, EventKind::RunResumed)).await;
        record(&log, &run, event(4, EventKind::RunComplete)).await;
        run.finish(None);
        assert_eq!(read_all(after_one).await, vec![2, 3, 4]);
        assert_eq!(read_all(from_start).await, vec![0, 1, 2, 3, 4]);

        // Without a store the window has every event it was told of, by `seq` too.
        let run = RunRegistry::new().register(id());
        run.on_event(&event(3, EventKind::RunResumed)).await;
        run.on_event(&event(4, EventKind::RunComplete)).await;
        run.finish(None);
        assert_eq!(read_all(run.follow(4)).await, vec![4]);
    }

    #[tokio::test]
    async fn a_run_without_terminal_event_still_ends_its_streams_with_one() {
        let log = Arc::new(MemStore::new());
        let run = RunRegistry::windowed(log.clone()).register(id());
        record(&log, &run, event(0, EventKind::RunStart)).await;
        run.finish(Some("disk full"));
        let mut follower = run.follow(1);
        let last = follower.next().await.unwrap_or_else(|| panic!("no event"));
        assert_eq!(last.kind(), EventKind::RunFailed);
        assert_eq!(last.seq, 1);
        // The same bytes as before the payloads were typed.
        assert_eq!(
            last.payload_json().unwrap_or_default().to_string(),
            r#"{"reason":"disk full","run_id":"20260101-000000-000-aaaaaaaa","status":"failed"}"#
        );
        assert!(follower.next().await.is_none());
        assert_eq!(run.status(), RunStatus::Failed);
        // The in-memory end follows the stored events for a reader from the start.
        assert_eq!(read_all(run.follow(0)).await, vec![0, 1]);
    }

    /// The terminal event and `finish` landing while a follower looks must never lose the
    /// terminal event: the follower sees it, or waits and then sees it.
    #[test]
    fn a_follower_racing_the_end_still_gets_the_terminal_event() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        for _ in 0..3000 {
            let run = Arc::new(LiveRun::new(id(), CancellationToken::new(), None));
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
            let mut follower = run.follow(1);
            barrier.wait();
            let got = runtime.block_on(follower.next());
            writer.join().unwrap_or_else(|_| panic!("writer panicked"));
            assert_eq!(got.map(|e| e.kind()), Some(EventKind::RunComplete));
        }
    }

    #[tokio::test]
    async fn failure_event_follows_the_last_event_and_only_once() {
        let run = Arc::new(LiveRun::new(id(), CancellationToken::new(), None));
        run.on_event(&event(0, EventKind::RunStart)).await;
        let failed = run
            .failure_event("it panicked")
            .unwrap_or_else(|| panic!("no failure event"));
        assert_eq!((failed.seq, failed.kind()), (1, EventKind::RunFailed));
        assert!(
            matches!(&failed.payload, fabric_domain::EventPayload::RunAborted(a) if a.reason == "it panicked")
        );
        run.on_event(&failed).await;
        assert!(run.failure_event("again").is_none());
        run.finish(Some("again"));
        assert_eq!(
            run.events().await.len(),
            2,
            "finish adds no second terminal event"
        );
    }

    fn output(line: &str) -> LiveToolOutput {
        LiveToolOutput {
            call_id: "c1".into(),
            tool: "shell".into(),
            step: 0,
            member: None,
            chunk: OutputChunk::Line {
                stream: fabric_domain::OutputStream::Stdout,
                line: line.into(),
            },
        }
    }

    fn shown(item: &Followed) -> String {
        match item {
            Followed::Event(e) => e.kind().as_str().to_owned(),
            Followed::Notice(n) => n.clone(),
            Followed::Output(o) => match &o.chunk {
                OutputChunk::Line { line, .. } => line.clone(),
                OutputChunk::Dropped { dropped } => format!("missed {dropped}"),
            },
        }
    }

    /// Issue #42: live output reaches the followers there are, after the events recorded
    /// before it, and `next` skips it; with nobody following nothing is kept.
    #[tokio::test]
    async fn issue_42_live_output_comes_in_order_among_events_and_only_to_followers() {
        let run = RunRegistry::new().register(id());
        run.on_event(&event(0, EventKind::RunStart)).await;
        run.on_tool_output(&output("before anyone followed"));
        assert!(
            lock(&run.state).output.is_empty(),
            "nobody follows: nothing kept"
        );
        let mut from_start = run.follow(0);
        let mut plain = run.follow(0);
        run.on_event(&event(1, EventKind::ToolCall)).await;
        run.on_tool_output(&output("line1"));
        run.on_event(&event(2, EventKind::RunComplete)).await;
        run.finish(None);
        let mut seen = Vec::new();
        while let Some(item) = from_start.next_followed().await {
            seen.push(shown(&item));
        }
        assert_eq!(seen, ["run_start", "tool_call", "line1", "run_complete"]);
        let events: Vec<u64> =
            std::iter::from_fn(|| futures_util::FutureExt::now_or_never(plain.next()).flatten())
                .map(|e| e.seq)
                .collect();
        assert_eq!(events, [0, 1, 2]);
        drop((from_start, plain));
        assert!(
            lock(&run.state).output.is_empty(),
            "let go with the last follower"
        );
    }

    /// Issue #42: a follower too slow for the live output is told how many items it missed.
    #[tokio::test]
    async fn issue_42_a_slow_follower_is_told_what_output_it_missed() {
        let run = RunRegistry::new().register(id());
        run.on_event(&event(0, EventKind::ToolCall)).await;
        let mut slow = run.follow(1);
        for i in 0..OUTPUT_KEPT + 10 {
            run.on_tool_output(&output(&format!("l{i}")));
        }
        let first = slow.next_followed().await.map(|f| shown(&f));
        assert_eq!(first.as_deref(), Some("missed 10"));
        let next = slow.next_followed().await.map(|f| shown(&f));
        assert_eq!(next.as_deref(), Some("l10"));
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
