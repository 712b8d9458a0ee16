//! Writing behind the runlog: [`SqlRunLog`] appends each line to the file, then hands the
//! event to the store's one writer task through a bounded channel; the writer folds a
//! [`RunSummary`] per live run and writes events and run rows in batched transactions.
//! Nothing on the run's path waits for the database: a run's events and its row are in the
//! index a moment after its runlog has them (`RunStore::flush` waits for that; the run
//! service flushes at shutdown). A failed write is logged and never fails the run: the
//! runlog has the events, and reindexing repairs the index.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fabric_core::{NewRun, RunLog, RunStore, StoreError};
use fabric_domain::{RunEvent, RunId, RunSummary, SummaryFold};
use fabric_store_fs::{FileRunLog, FsRunStore, RUNLOG_FILE};
use tokio::sync::{Mutex, Notify, mpsc, oneshot};

use crate::db::{Backend, Db};
use crate::error::SqlError;
use crate::index::EventColumns;
use crate::{SqlStore, StoreOptions, index};

/// What the writer is asked to do.
pub(crate) enum Msg {
    /// Index one event with its runlog line (a run's end is written at once, others may
    /// linger): its columns and what it adds to its run's row, not the event itself (a
    /// burst of starts queued a copy of every `run_start`'s payload, issue #45).
    Event {
        run: RunId,
        columns: EventColumns,
        fold: SummaryFold,
        line: String,
    },
    /// Record a new run's row (status `running`), written at once but not waited for: the
    /// run's events follow it through the same queue, so they never arrive before it.
    /// Through the writer, like events: one connection writes, so SQLite's single write lock
    /// is never contended (10,000 runs starting at once waited on it for seconds each).
    Create { row: Box<RunSummary> },
    /// A run continued after its process stopped (docs/DURABILITY.md): its state so far,
    /// folded from its runlog, so its rows go on from there; and it is repaired from the
    /// runlog once, for the events its stopped process never got to write.
    Reopen { row: Box<RunSummary> },
    /// Acknowledge once everything before is written.
    Flush(oneshot::Sender<()>),
}

/// The senders' side of the writer: its queue, and a bell rung for what must not linger.
#[derive(Debug, Clone)]
pub(crate) struct WriterHandle {
    queue: mpsc::Sender<Msg>,
    urgent: Arc<Notify>,
}

impl WriterHandle {
    /// Queues `msg` (waiting while the queue is full); `false` when the writer has stopped.
    /// Hands an event written to its runlog to the writer (its row follows from it).
    pub(crate) async fn index_event(&self, run: &RunId, event: &RunEvent, line: String) {
        let sent = self
            .send(Msg::Event {
                run: run.clone(),
                columns: EventColumns::of(event),
                fold: SummaryFold::of(event),
                line,
            })
            .await;
        if !sent {
            tracing::warn!(run = %run, "the store's writer has stopped; the runlog has the event");
        }
    }

    pub(crate) async fn send(&self, msg: Msg) -> bool {
        // The writer lingers on one timer, and is rung only for what must go sooner.
        let urgent = msg.linger() < LINGER;
        let sent = self.queue.send(msg).await.is_ok();
        if sent && urgent {
            self.urgent.notify_one();
        }
        sent
    }
}

/// The writer's queue: the handle for senders, and what the writer task takes.
pub(crate) fn channel(capacity: usize) -> (WriterHandle, Receiver) {
    let (queue, receiver) = mpsc::channel(capacity.max(1));
    let urgent = Arc::new(Notify::new());
    (
        WriterHandle {
            queue,
            urgent: urgent.clone(),
        },
        Receiver { receiver, urgent },
    )
}

/// The writer task's side of the queue.
pub(crate) struct Receiver {
    receiver: mpsc::Receiver<Msg>,
    urgent: Arc<Notify>,
}

/// Creates the run's directory and runlog, and its row (status `running`) at once.
pub(crate) async fn create_run(store: &SqlStore, id: RunId) -> Result<NewRun, StoreError> {
    let inner = &store.inner;
    let workspace = inner.fs.make_run_dirs(&id).await?;
    let path = inner.fs.run_dir(&id).join(RUNLOG_FILE);
    let file = FileRunLog::create(path).await?;
    let mut row = RunSummary::new(id.clone());
    row.started_at = fabric_core::unix_now();
    // Listed as running within a moment (the writer takes it at once); not waited for, as it
    // cost every run a round trip to the database before its first step. A write that fails
    // is logged by the writer, the run goes on, and `fabric index rebuild` adds it later.
    // `get_run` reads the runlog, made above, so the run is found by id at once.
    if !inner.writer.send(Msg::Create { row: Box::new(row) }).await {
        tracing::warn!(store = %inner.name, run = %id, "the store's writer has stopped; the run goes on with its runlog");
    }
    Ok(NewRun {
        id: id.clone(),
        workspace,
        log: Box::new(SqlRunLog::new(store, file, id)),
        versioned: None,
    })
}

/// Reopens a run to continue it: claims its runlog, then tells the writer where the run
/// stands.
pub(crate) async fn reopen_run(store: &SqlStore, id: &RunId) -> Result<NewRun, StoreError> {
    let inner = &store.inner;
    let (workspace, file) = inner.fs.reopen(id).await?;
    let events = inner.fs.read_events(id).await?;
    let row = RunSummary::from_events(id.clone(), &events);
    if !inner.writer.send(Msg::Reopen { row: Box::new(row) }).await {
        tracing::warn!(store = %inner.name, run = %id, "the store's writer has stopped; the run goes on with its runlog");
    }
    Ok(NewRun {
        id: id.clone(),
        workspace,
        log: Box::new(SqlRunLog::new(store, file, id.clone())),
        versioned: None,
    })
}

impl SqlRunLog {
    fn new(store: &SqlStore, file: FileRunLog, run: RunId) -> Self {
        Self {
            file,
            run,
            writer: store.inner.writer.clone(),
            order: Mutex::new(()),
        }
    }
}

/// The runlog of one run: the file first, then the database behind it.
pub struct SqlRunLog {
    file: FileRunLog,
    run: RunId,
    writer: WriterHandle,
    // Keeps the writer's order the file's order when appends race (parallel task forces).
    order: Mutex<()>,
}

impl std::fmt::Debug for SqlRunLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlRunLog")
            .field("run", &self.run)
            .field("path", &self.file.path())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl RunLog for SqlRunLog {
    async fn append(&self, event: &RunEvent) -> Result<(), StoreError> {
        let guard = self.order.lock().await;
        // Encoded once: the file's line is the database's `line`.
        let line = self.file.encode(event)?;
        self.file.append_line(&line)?;
        self.writer.index_event(&self.run, event, line).await;
        drop(guard);
        Ok(())
    }
}

/// How long an event may wait for company before it is written: a short run's events then
/// share one transaction, and a long run's progress is in the database within this (its
/// runlog has every line at once).
const LINGER: Duration = Duration::from_millis(50);
/// How long a new run's row may wait: it is listed as running within this, and a run
/// shorter than this is written in one transaction with its events.
const CREATE_LINGER: Duration = Duration::from_millis(5);

impl Msg {
    /// How long this message may wait for company: a run's end and a flush not at all.
    fn linger(&self) -> Duration {
        match self {
            Self::Event { columns, .. } if columns.kind.is_terminal() => Duration::ZERO,
            Self::Event { .. } => LINGER,
            Self::Create { .. } | Self::Reopen { .. } => CREATE_LINGER,
            Self::Flush(_) => Duration::ZERO,
        }
    }
}

/// Waits until the writer has handled everything sent before.
pub(crate) async fn flush(writer: &WriterHandle) {
    let (tx, rx) = oneshot::channel();
    if writer.send(Msg::Flush(tx)).await {
        let _ = rx.await;
    }
}

/// The writer task's state.
pub(crate) struct Writer {
    db: Db,
    name: String,
    fs: FsRunStore,
    batch: usize,
    retry_after: Duration,
    /// The runs in progress, folded from their events.
    live: HashMap<RunId, Live>,
    /// Runs in progress whose row is behind their events (written once due, or on a flush).
    stale: HashSet<RunId>,
    /// Runs some of whose events were not written: re-read from the runlog once possible.
    behind: HashSet<RunId>,
    /// While set and in the future, the database is not tried.
    paused_until: Option<Instant>,
}

impl Writer {
    pub(crate) fn new(db: Db, name: String, root: PathBuf, options: StoreOptions) -> Self {
        Self {
            db,
            name,
            fs: FsRunStore::new(root),
            batch: options.batch.max(1),
            retry_after: options.retry_after,
            live: HashMap::new(),
            stale: HashSet::new(),
            behind: HashSet::new(),
            paused_until: None,
        }
    }
}

/// A run in progress as the writer knows it.
struct Live {
    summary: RunSummary,
    /// When its row was last written with its events' state (`None`: not yet).
    row_written: Option<Instant>,
    /// How many specialists and model keys it has links for.
    linked: (usize, usize),
}

/// How often a running run's row is rewritten while its events arrive: listings show its
/// progress within this. Rewriting every touched row on every batch made 10,000 concurrent
/// runs cost a row write per event.
const ROW_EVERY: Duration = Duration::from_secs(1);

/// Runs the writer fell behind on that one successful batch repairs from their runlogs.
const REPAIR_PER_BATCH: usize = 16;

/// One batch, folded: what to write in its transaction.
#[derive(Default)]
struct Folded {
    creates: Vec<RunSummary>,
    events: Vec<(RunId, EventColumns, String)>,
    /// Runs with events in the batch, in order.
    touched: Vec<RunId>,
    /// Rows due (ended, first events, links changed, or `ROW_EVERY` since the last), each
    /// with whether its links changed.
    rows: Vec<(RunSummary, bool)>,
    acks: Vec<oneshot::Sender<()>>,
}

impl Writer {
    /// Folds a batch into the live runs and picks the rows due: ended runs', and those of
    /// running runs that are stale and due (first events, links changed, `ROW_EVERY` since
    /// the last), or all stale ones when the batch has a flush. Rows of runs the writer fell
    /// behind on are left to `catch_up_run`, which writes them from the runlog: a row
    /// counting events that were never written would hide them from `reindex`.
    fn fold(&mut self, batch: Vec<Msg>) -> Folded {
        let mut out = Folded::default();
        let mut seen = HashSet::new();
        let mut ended = Vec::new();
        for msg in batch {
            match msg {
                Msg::Event {
                    run,
                    columns,
                    fold,
                    line,
                } => {
                    let live = self.live.entry(run.clone()).or_insert_with(|| Live {
                        summary: RunSummary::new(run.clone()),
                        row_written: None,
                        linked: (0, 0),
                    });
                    live.summary.fold(fold);
                    if columns.kind.is_terminal() {
                        ended.push(run.clone());
                    } else {
                        self.stale.insert(run.clone());
                    }
                    if seen.insert(run.clone()) {
                        out.touched.push(run.clone());
                    }
                    out.events.push((run, columns, line));
                }
                Msg::Create { row } => out.creates.push(*row),
                Msg::Reopen { row } => {
                    let id = row.id.clone();
                    self.live.insert(
                        id.clone(),
                        Live {
                            summary: *row,
                            row_written: None,
                            linked: (0, 0),
                        },
                    );
                    self.stale.insert(id.clone());
                    self.behind.insert(id);
                }
                Msg::Flush(ack) => out.acks.push(ack),
            }
        }
        let flushing = !out.acks.is_empty();
        self.rows_due(ended, flushing, &mut out.rows);
        out
    }

    /// Adds the rows due to `rows` (see `fold`).
    fn rows_due(&mut self, ended: Vec<RunId>, all: bool, rows: &mut Vec<(RunSummary, bool)>) {
        // A run's end: its last row (with its links when they changed), and it leaves.
        for id in ended {
            self.stale.remove(&id);
            if let Some(live) = self.live.remove(&id)
                && !self.behind.contains(&id)
            {
                let relink = link_counts(&live.summary) != live.linked;
                rows.push((live.summary, relink));
            }
        }
        let now = Instant::now();
        let mut written = Vec::new();
        for id in &self.stale {
            let Some(live) = self.live.get_mut(id) else {
                written.push(id.clone());
                continue;
            };
            if self.behind.contains(id) {
                continue;
            }
            let counts = link_counts(&live.summary);
            let relink = counts != live.linked;
            if all || relink || live.row_written.is_none_or(|t| now - t >= ROW_EVERY) {
                live.row_written = Some(now);
                live.linked = counts;
                rows.push((live.summary.clone(), relink));
                written.push(id.clone());
            }
        }
        for id in written {
            self.stale.remove(&id);
        }
    }
}

fn link_counts(summary: &RunSummary) -> (usize, usize) {
    (summary.specialist_ids.len(), summary.model_keys.len())
}

/// The writer task: until every sender is gone, take what is queued (up to a batch), fold,
/// write in one transaction, acknowledge.
pub(crate) async fn run(mut writer: Writer, queue: Receiver) {
    let Receiver {
        mut receiver,
        urgent,
    } = queue;
    loop {
        // Idle with stale rows: write them once due, so a run waiting on a slow model is
        // listed with its progress within about `ROW_EVERY`.
        let first = if writer.stale.is_empty() {
            receiver.recv().await
        } else {
            match tokio::time::timeout(ROW_EVERY, receiver.recv()).await {
                Ok(first) => first,
                Err(_) => {
                    let mut due = Folded::default();
                    writer.rows_due(Vec::new(), false, &mut due.rows);
                    if !due.rows.is_empty() {
                        write(&mut writer, &due).await;
                    }
                    continue;
                }
            }
        };
        let Some(first) = first else {
            break;
        };
        let mut batch = vec![first];
        // Group commit: each message may wait its `linger` for company (a run's events 50
        // ms, its row 5 ms, its end and a flush not at all), and a full batch goes at once.
        // Lingering is one timer, not a wake-up per event queued meanwhile (those cost the
        // run's own threads more than the writes did); the senders ring `urgent` for what
        // may not wait that long.
        let mut deadline = tokio::time::Instant::now() + batch[0].linger();
        let mut seen = 0;
        loop {
            drain(&mut receiver, &mut batch, writer.batch);
            let now = tokio::time::Instant::now();
            for msg in &batch[seen..] {
                deadline = deadline.min(now + msg.linger());
            }
            seen = batch.len();
            if batch.len() >= writer.batch || now >= deadline {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {}
                () = urgent.notified() => {}
            }
        }
        let mut folded = writer.fold(batch);
        let acks = std::mem::take(&mut folded.acks);
        if !folded.events.is_empty() || !folded.creates.is_empty() || !folded.rows.is_empty() {
            write(&mut writer, &folded).await;
        }
        for ack in acks {
            let _ = ack.send(());
        }
    }
}

/// Takes what is queued, up to `max` in `batch`.
fn drain(receiver: &mut mpsc::Receiver<Msg>, batch: &mut Vec<Msg>, max: usize) {
    while batch.len() < max {
        match receiver.try_recv() {
            Ok(msg) => batch.push(msg),
            Err(_) => break,
        }
    }
}

async fn write(writer: &mut Writer, batch: &Folded) {
    let all_runs = || {
        batch
            .creates
            .iter()
            .map(|r| r.id.clone())
            .chain(batch.touched.iter().cloned())
            .chain(batch.rows.iter().map(|(r, _)| r.id.clone()))
    };
    if writer.paused_until.is_some_and(|t| Instant::now() < t) {
        writer.behind.extend(all_runs());
        return;
    }
    let backend = writer.db.backend();
    let result = async {
        let mut tx = writer.db.begin().await?;
        let created: Vec<&RunSummary> = batch.creates.iter().collect();
        index::upsert_run_rows(&mut tx, &created, false).await?;
        let lines: Vec<(&str, &EventColumns, &str)> = batch
            .events
            .iter()
            .map(|(run, columns, line)| (run.as_str(), columns, line.as_str()))
            .collect();
        // The lines were just appended to their runlogs: they replace whatever an earlier
        // process indexed at their `seq` (issue #26).
        index::insert_events(&mut tx, &lines, true).await?;
        let rows: Vec<&RunSummary> = batch.rows.iter().map(|(row, _)| row).collect();
        index::upsert_run_rows(&mut tx, &rows, true).await?;
        let relinked: Vec<&RunSummary> = batch
            .rows
            .iter()
            .filter(|(_, relink)| *relink)
            .map(|(row, _)| row)
            .collect();
        index::insert_run_links(&mut tx, &relinked).await?;
        for row in rows.iter().filter(|r| r.ended_at.is_some()) {
            index::write_document(&mut tx, backend, row).await?;
        }
        tx.commit().await
    }
    .await;
    match result {
        Ok(()) => {
            writer.paused_until = None;
            // Every run the writer fell behind on, a few per batch, not only those in this
            // one: a run that went quiet (or ended) meanwhile is repaired too.
            let repair: Vec<RunId> = writer
                .behind
                .iter()
                .take(REPAIR_PER_BATCH)
                .cloned()
                .collect();
            for id in repair {
                catch_up_run(writer, backend, &id).await;
            }
        }
        Err(e) => {
            writer.paused_until = Some(Instant::now() + writer.retry_after);
            writer.behind.extend(all_runs());
            tracing::warn!(
                store = %writer.name,
                error = %SqlError::from_sqlx(&e, &writer.name),
                runs = batch.touched.len(),
                "the store could not index events; the runs go on (their runlogs have every event) and `fabric index rebuild` repairs the index"
            );
        }
    }
}

/// Re-reads a run the writer fell behind on from its runlog, now that the database answers.
async fn catch_up_run(writer: &mut Writer, backend: Backend, id: &RunId) {
    let events = match writer.fs.read_event_lines(id).await {
        Ok(events) => events,
        // Pruned meanwhile: nothing left to repair.
        Err(StoreError::NotFound(_)) => {
            writer.behind.remove(id);
            return;
        }
        Err(_) => return,
    };
    let summary = summarise(id, &events);
    let result = async {
        let mut tx = writer.db.begin().await?;
        index::index_run(&mut tx, backend, &summary, &events).await?;
        tx.commit().await
    }
    .await;
    if result.is_ok() {
        writer.behind.remove(id);
    }
}

/// A run's summary folded from its runlog's events with their lines.
pub(crate) fn summarise(id: &RunId, events: &[(RunEvent, String)]) -> RunSummary {
    let mut summary = RunSummary::new(id.clone());
    for (event, _) in events {
        summary.apply(event);
    }
    summary
}
