//! A run's versioned workspace as the engine uses it (issue #25): after every tool call that
//! may have changed files, the fabric commits them ([`RunWorkspace::checkpoint`]) and records
//! the commit as a `checkpoint` event, before the call's result. So the runlog never records
//! a result whose files no checkpoint holds: a continued run restores the last recorded
//! checkpoint and its files are exactly what the runlog describes. With a remote, each
//! checkpoint is pushed (retried while the remote is unreachable) so a worker without this
//! disk can take the run over.

use fabric_domain::{RunStatus, runlog};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use crate::ports::{StepNote, StoreError, Workspace, WorkspaceError};
use crate::recorder::Recorder;

/// How long the run waits between pushes to an unreachable remote before it gives up: five
/// tries over about 15 seconds, as a store write waits for its database.
const PUSH_RETRIES: [Duration; 4] = [
    Duration::from_millis(500),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
];

/// A run's versioned workspace: the adapter's handle and what the runlog says of it.
pub struct RunWorkspace {
    handle: Arc<dyn Workspace>,
    opened: runlog::WorkspaceOpened,
    /// Serialises checkpoints (parallel members share the workspace; git takes one writer)
    /// and keeps the ignored paths last recorded, so they are said once, not after every
    /// call.
    last_ignored: tokio::sync::Mutex<Vec<String>>,
}

/// Why a checkpoint stops the run.
#[derive(Debug)]
pub(crate) enum CheckpointStop {
    /// The run ends with this status and reason.
    Ended(RunStatus, String),
    /// The runlog cannot be written.
    Store(StoreError),
}

impl From<StoreError> for CheckpointStop {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl RunWorkspace {
    /// The workspace `handle`, recorded as `opened`.
    pub fn new(handle: Arc<dyn Workspace>, opened: runlog::WorkspaceOpened) -> Self {
        Self {
            handle,
            opened,
            last_ignored: tokio::sync::Mutex::new(Vec::new()),
        }
    }

    /// The directory the tools work in.
    pub fn dir(&self) -> &Path {
        self.handle.dir()
    }

    /// The adapter's handle.
    pub fn handle(&self) -> &Arc<dyn Workspace> {
        &self.handle
    }

    /// The `workspace` event's payload.
    pub fn opened(&self) -> &runlog::WorkspaceOpened {
        &self.opened
    }

    /// Commits the files after call `call_id` of `tool` in `step` and records the
    /// `checkpoint` (nothing when the call changed nothing and wrote no new ignored path).
    pub(crate) async fn checkpoint(
        &self,
        rec: &Recorder<'_>,
        step: u32,
        tool: &str,
        call_id: &str,
        cancel: &CancellationToken,
    ) -> Result<(), CheckpointStop> {
        let mut last_ignored = self.last_ignored.lock().await;
        let note = StepNote {
            step: step + 1,
            tools: vec![tool.to_owned()],
            summary: None,
        };
        let done = self.handle.checkpoint(&note).await.map_err(|e| {
            CheckpointStop::Ended(
                RunStatus::Failed,
                format!("the fabric could not record the workspace after `{tool}`: {e}"),
            )
        })?;
        if !done.removed_git.is_empty() {
            record_removed_git(rec, step, tool, call_id, &done.removed_git).await?;
        }
        if done.commit.is_none() && done.ignored == *last_ignored && done.removed_git.is_empty() {
            return Ok(());
        }
        let pushed = match (&done.commit, &self.opened.remote) {
            (Some(_), Some(_)) => Some(self.push(cancel).await?),
            _ => None,
        };
        rec.record(
            Some(step),
            runlog::Checkpoint {
                tool: tool.to_owned(),
                call_id: call_id.to_owned(),
                commit: done.commit.as_ref().map(ToString::to_string),
                ignored: done.ignored.clone(),
                removed_git: done.removed_git.clone(),
                pushed,
            },
        )
        .await?;
        *last_ignored = done.ignored;
        Ok(())
    }

    /// Pushes the branch, retrying while the remote is unreachable; `Ok(true)` once pushed.
    async fn push(&self, cancel: &CancellationToken) -> Result<bool, CheckpointStop> {
        let mut waits = PUSH_RETRIES.iter();
        loop {
            match self.handle.push().await {
                Ok(()) => return Ok(true),
                Err(e) if e.is_retryable() => match waits.next() {
                    Some(wait) => {
                        tracing::warn!(branch = %self.opened.branch, error = %e, "cannot push the workspace; trying again");
                        tokio::select! {
                            () = cancel.cancelled() => return Ok(false),
                            () = tokio::time::sleep(*wait) => {}
                        }
                    }
                    None => {
                        return Err(CheckpointStop::Ended(
                            RunStatus::Failed,
                            format!(
                                "{e}, and it was tried {} times: the run stops here. Its checkpoints are kept on branch `{}` in this workspace; once the remote answers, `fabric resume` goes on and pushes them",
                                PUSH_RETRIES.len() + 1,
                                self.opened.branch
                            ),
                        ));
                    }
                },
                Err(e) => return Err(CheckpointStop::Ended(RunStatus::Failed, e.to_string())),
            }
        }
    }

    /// The branch and what it changes against the base, for the run's end; `None` (and a
    /// warning in the log) when git cannot say.
    pub(crate) async fn result(&self) -> Option<runlog::WorkspaceResult> {
        let read = async {
            let head = self.handle.head().await?;
            let stat = self.handle.diff_stat().await?;
            Ok::<_, WorkspaceError>((head, stat))
        };
        match read.await {
            Ok((head, stat)) => {
                let (added, removed) = stat.lines();
                Some(runlog::WorkspaceResult {
                    branch: self.opened.branch.clone(),
                    base: self.opened.base.clone(),
                    head: head.to_string(),
                    files: stat.files.into_iter().map(|f| f.path).collect(),
                    added,
                    removed,
                })
            }
            Err(e) => {
                tracing::warn!(branch = %self.opened.branch, error = %e, "cannot read the run's diff");
                None
            }
        }
    }
}

/// A `security_event` for the `.git` entries a checkpoint removed: a run that makes a
/// repository inside its workspace (or points its worktree's link elsewhere) could have had
/// the fabric's own git run what that repository configures (ADR-088).
async fn record_removed_git(
    rec: &Recorder<'_>,
    step: u32,
    tool: &str,
    call_id: &str,
    removed: &[String],
) -> Result<(), StoreError> {
    let names = removed.join("`, `");
    rec.record(
        Some(step),
        runlog::SecurityEvent {
            event_type: runlog::SecurityEventType::ProtectedPath,
            tool: Some(tool.to_owned()),
            call_id: Some(call_id.to_owned()),
            attempted: format!("`{names}` in the workspace after `{tool}`"),
            error_message: format!(
                "`{names}` would have made the fabric's git open a repository the run wrote; the fabric removed it (or put the worktree's own link back) before recording the workspace. A nested repository's files are recorded as plain files"
            ),
        },
    )
    .await
}
