//! The run queue many processes share (docs/DURABILITY.md, ADR-045): API nodes enqueue
//! runs, workers claim them under a lease with a fencing token, renew the lease while they
//! run them, and anyone follows a run's events or cancels it by id, wherever it runs.

use async_trait::async_trait;
use fabric_domain::{RunEvent, RunId};
use serde_json::Value;
use std::time::Duration;
use tokio::sync::mpsc;

use super::{NewRun, StoreError};

/// A run a worker took from the queue.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedRun {
    /// The run.
    pub id: RunId,
    /// What to run, as enqueued (`fabric_core::service::TaskRequest::to_json`).
    pub request: Value,
    /// The fencing token: every write for the run carries it, and a write with an older one
    /// is refused. It grows with every claim, so a worker that lost the run (its lease ran
    /// out while it was paused) cannot write to it any more.
    pub fence: i64,
    /// How many times the run was claimed, this claim included (more than 1: it was taken
    /// over from a worker that stopped, or handed back).
    pub attempts: u32,
    /// How many earlier claims ended in an error of the run's own ([`Release::Failed`]). A
    /// takeover after a worker stopped (killed, paused past its lease) or a hand-back at
    /// shutdown is not one: a run fails after its third *failure*, not its third claim
    /// (issue #26: two worker kills used the allowance up).
    pub failures: u32,
    /// How many takeovers in a row found the run had recorded no work (no model answer, no
    /// tool result) since the claim before: claims that most likely ended in the worker's
    /// death *because of the run* (a crash, the OOM killer). A takeover after progress (a
    /// worker killed from outside mid-run) starts the count again (issue #40).
    pub deaths: u32,
    /// Whether it was taken from a worker whose lease had run out (that worker stopped,
    /// hung or lost the network without handing it back), rather than taken from the
    /// queue (new, or handed back).
    pub lease_expired: bool,
}

/// How a worker lets go of a claimed run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Its end is recorded: it is done.
    Done,
    /// Back to the queue for another worker to continue (this one stops: shutdown).
    HandBack,
    /// Back to the queue after an error of its own on this worker, counted in
    /// [`ClaimedRun::failures`].
    Failed,
}

/// What renewing one lease found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renewal {
    /// The worker still holds the run (its fence is current and the run is not done).
    pub kept: bool,
    /// Someone asked to cancel the run.
    pub cancel_requested: bool,
}

/// What asking to cancel a run by id did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueuedCancel {
    /// It had not started: it is ended `cancelled` and will never start.
    BeforeStart,
    /// It runs on a worker, which is told (at once, and at its next renewal at the latest).
    Requested,
    /// It has already ended, or no such run was enqueued.
    NotRunning,
}

/// The queue behind `fabric worker` and `fabric serve` with `store.queue: true`.
#[async_trait]
pub trait RunQueue: Send + Sync {
    /// Enqueues run `id` (minted by [`crate::new_run_id`]): listed at once, claimed oldest
    /// first. `false` (nothing enqueued) when `limit` runs are queued or running already.
    async fn enqueue(
        &self,
        id: &RunId,
        request: &Value,
        limit: Option<u64>,
    ) -> Result<bool, StoreError>;

    /// Claims the oldest run that is queued or whose lease ran out, for `lease`; `None` when
    /// there is none.
    async fn claim(&self, worker: &str, lease: Duration) -> Result<Option<ClaimedRun>, StoreError>;

    /// Renews the leases of the runs a worker holds, each with the fence it claimed it with.
    async fn renew(
        &self,
        worker: &str,
        runs: &[(RunId, i64)],
        lease: Duration,
    ) -> Result<Vec<Renewal>, StoreError>;

    /// Lets go of a claimed run (see [`Release`]). Ignored with an older fence.
    async fn release(&self, id: &RunId, fence: i64, how: Release) -> Result<(), StoreError>;

    /// Puts back in the queue a run that let go of its worker to wait for a person's answer
    /// (its claim released as done) now that the answer is in its inbox; `false` when it is
    /// not there to put back (another answer did, or it runs).
    async fn requeue(&self, id: &RunId) -> Result<bool, StoreError>;

    /// Asks to cancel a run wherever it is.
    async fn cancel(&self, id: &RunId) -> Result<QueuedCancel, StoreError>;

    /// Whether run `id` has recorded any event in the shared store (a run taken over that
    /// had started is continued; one that had not, started).
    async fn started(&self, id: &RunId) -> Result<bool, StoreError>;

    /// Opens a claimed run for writing under its fence: its workspace and a runlog whose
    /// every append is refused once the fence is not current. `fresh`: a run that has not
    /// started (its directories are made); otherwise the runlog is rebuilt from the shared
    /// store first, so it holds exactly the events the run has.
    async fn open_claimed(&self, id: &RunId, fence: i64, fresh: bool)
    -> Result<NewRun, StoreError>;

    /// The events of run `id` after `after` (all with `None`), as they are written by
    /// whichever process runs it, until its terminal event; the channel closes then, or when
    /// the receiver is dropped.
    async fn follow(
        &self,
        id: &RunId,
        after: Option<u64>,
    ) -> Result<mpsc::Receiver<RunEvent>, StoreError>;

    /// What workers are told as it happens: a run was enqueued, a run is to be cancelled.
    async fn signals(&self) -> Result<mpsc::Receiver<QueueSignal>, StoreError>;
}

/// A notice to the workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueSignal {
    /// A run was enqueued: there is work.
    Enqueued,
    /// Someone asked to cancel this run.
    Cancel(RunId),
}
