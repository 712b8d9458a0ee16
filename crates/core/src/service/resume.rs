//! Continuing a run whose process stopped before its end (docs/DURABILITY.md).
//!
//! The store reopens the run (claiming it, so two processes never continue the same run),
//! its runlog is read back into a [`RunHistory`], and the task is prepared again from what
//! `run_start` and `recruitment` recorded: the same specialists, model key, limits and
//! workspace. Whatever stops that (a specialist or model key that no longer exists, a
//! workspace that is gone, a configuration that no longer allows what the run needs) ends
//! the run with status `interrupted` and a reason that says which: a run is never left
//! `running`.

use fabric_domain::RunStatus;
use std::path::PathBuf;
use std::sync::Arc;

use super::{PrepareContext, RunTask, Runnable, ServiceError, Started, TaskRequest, children};
use crate::execute::RunOutcome;
use crate::history::RunHistory;
use crate::ports::{NewRun, RunLog, RunObserver};
use crate::versioned::RunWorkspace;

/// Why a continued run does not go on.
enum Halt {
    /// It ends `interrupted` for this reason, its files in `workspace`.
    Ends {
        /// Why, as recorded.
        reason: String,
        /// Where its files are.
        workspace: PathBuf,
    },
    /// It is not ended: the caller is told why, and it stays resumable.
    Stays(ServiceError),
}

impl RunTask {
    /// Reopens the run, reads its history and prepares it again.
    pub(super) async fn reopen(&self) -> Result<Started, ServiceError> {
        let (run, history) = self.read_back().await?;
        let log = self.suspendable(run.log);
        // From here on the run ends properly whatever happens: a reason it cannot go on is
        // recorded as its end.
        let Some(request) = request_of(&history) else {
            let reason = "its process stopped before it recorded its start; run the task again";
            return self
                .interrupted(&history, log.as_ref(), run.workspace, reason)
                .await;
        };
        let mut history = history;
        let (workspace, versioned) = match self.restore_files(&mut history, run.workspace).await {
            Ok(restored) => restored,
            Err(halt) => return self.halt(halt, &history, log.as_ref()).await,
        };
        // A run that continued another goes on from the same inherited conversation.
        let link = history.start.as_ref().and_then(|s| s.continues.as_ref());
        let inherited = match self.service.inherited_again(link).await {
            Ok(inherited) => inherited,
            Err(e) => {
                let halt = Halt::Ends {
                    reason: format!("it cannot be continued: {e}"),
                    workspace,
                };
                return self.halt(halt, &history, log.as_ref()).await;
            }
        };
        let mut prepared = match self.prepare_again(request, &workspace).await {
            Ok(prepared) => prepared,
            Err(halt) => return self.halt(halt, &history, log.as_ref()).await,
        };
        if let Some(inherited) = inherited {
            prepared.inherit(inherited);
        }
        if let Some(parent) = &self.submission.parent {
            prepared.adopt(parent.lineage.clone());
        }
        let run = NewRun {
            id: history.run_id.clone(),
            workspace,
            log: Box::new(super::SharedLog(Arc::clone(&log))),
            versioned,
        };
        Ok(Started::Ready {
            run,
            prepared,
            log,
            history: Some(Box::new(history)),
        })
    }

    /// The run reopened in the store (claimed, so no other process continues it) and its
    /// runlog read back; refused when there is no such run or it has already ended.
    async fn read_back(&self) -> Result<(NewRun, RunHistory), ServiceError> {
        let store = &self.service.inner.store;
        let id = self.live.id().clone();
        let run = store.reopen_run(&id).await.map_err(|e| match e {
            // A typo in the id is the caller's to fix, said as such (exit 2 in the CLI, as
            // `logs show` does), never a store failure.
            crate::ports::StoreError::NotFound(_) => {
                super::InvalidRequest::NoSuchRun { id: id.clone() }.into()
            }
            e => ServiceError::Store(e),
        })?;
        let events = store.read_events(&id).await.map_err(ServiceError::Store)?;
        let history = RunHistory::read(id.clone(), &events);
        if let Some(status) = history.ended {
            return Err(ServiceError::AlreadyEnded { id, status });
        }
        Ok((run, history))
    }

    /// The run's files as the runlog describes them: what its commands left running is
    /// stopped first, so nothing of the stopped process writes beside the continued run;
    /// then a versioned workspace is reopened (fetched from the remote when this disk does
    /// not have it) and restored to the last recorded checkpoint, whatever the stopped
    /// process did after. The directory the run goes on in, and its versioned workspace.
    async fn restore_files(
        &self,
        history: &mut RunHistory,
        scratch: PathBuf,
    ) -> Result<(PathBuf, Option<Arc<RunWorkspace>>), Halt> {
        let inner = &self.service.inner;
        let workspace = history
            .start
            .as_ref()
            .map_or_else(|| scratch.clone(), |s| s.workspace.clone());
        // One `stat`, once per resumption: not worth a trip through the blocking pool.
        if history.workspace.is_none() && !workspace.is_dir() {
            let reason = format!(
                "its workspace {} no longer exists, and the work recorded so far happened there",
                workspace.display()
            );
            return Err(Halt::Ends { reason, workspace });
        }
        history.reaped = inner.preparer.reap(&workspace).await;
        let (recorded, versioning) = match (&history.workspace, &inner.versioning) {
            (None, _) => return Ok((workspace, None)),
            (Some(_), None) => {
                let reason = "its workspace is versioned (a project or a scratch history), and this fabric was started without versioned workspaces".to_owned();
                return Err(Halt::Ends { reason, workspace });
            }
            (Some(recorded), Some(v)) => (recorded, v),
        };
        let checkpoint = history.last_checkpoint.as_deref();
        match versioning
            .reopen(&history.run_id, recorded, &scratch, checkpoint)
            .await
        {
            Ok(versioned) => Ok((versioned.dir().to_path_buf(), Some(Arc::new(versioned)))),
            // The remote may answer later: still resumable, not ended here.
            Err(e) if e.is_retryable() => Err(Halt::Stays(
                super::Fault::RemoteDown {
                    id: history.run_id.clone(),
                    cause: e,
                }
                .into(),
            )),
            Err(e) => Err(Halt::Ends {
                reason: format!("its workspace cannot be restored: {e}"),
                workspace,
            }),
        }
    }

    /// The task prepared again from its recorded request; stopped again before it went on
    /// (cancelled, or the service shutting down), it stays resumable.
    async fn prepare_again(
        &self,
        request: TaskRequest,
        workspace: &std::path::Path,
    ) -> Result<Box<dyn Runnable>, Halt> {
        let preparer = &self.service.inner.preparer;
        let context = PrepareContext {
            children: Arc::new(children::ServiceChildren(self.service.clone())),
        };
        let cancel = self.live.cancel_token();
        let prepared = match preparer.check(&request) {
            Err(e) => Err(e),
            Ok(()) => tokio::select! {
                prepared = preparer.prepare(request, &context) => prepared,
                () = cancel.cancelled() => Err(if self.service.is_shutting_down() {
                    ServiceError::ShuttingDown
                } else {
                    ServiceError::Cancelled
                }),
            },
        };
        prepared.map_err(|e| match e {
            e @ (ServiceError::ShuttingDown | ServiceError::Cancelled) => Halt::Stays(e),
            e => Halt::Ends {
                reason: format!("it cannot be continued: {e}"),
                workspace: workspace.to_path_buf(),
            },
        })
    }

    /// What a halt means: the run ended `interrupted`, or an error that leaves it resumable.
    async fn halt(
        &self,
        halt: Halt,
        history: &RunHistory,
        log: &dyn RunLog,
    ) -> Result<Started, ServiceError> {
        match halt {
            Halt::Ends { reason, workspace } => {
                self.interrupted(history, log, workspace, &reason).await
            }
            Halt::Stays(e) => Err(e),
        }
    }

    /// Ends a run that cannot be continued: `run_failed` with status `interrupted`.
    async fn interrupted(
        &self,
        history: &RunHistory,
        log: &dyn RunLog,
        workspace: PathBuf,
        reason: &str,
    ) -> Result<Started, ServiceError> {
        let event = history
            .interrupted_event(reason)
            .map_err(super::Fault::Encode)?;
        log.append(&event).await.map_err(ServiceError::Store)?;
        self.observer().on_event(&event).await;
        let specialist_ids = history.specialist_ids();
        let (model_key, model) = history
            .start
            .as_ref()
            .map(|s| (s.model_key.clone(), s.model.clone()))
            .unwrap_or_default();
        Ok(Started::Ended(Box::new(RunOutcome {
            run_id: history.run_id.clone(),
            status: RunStatus::Interrupted,
            payload: serde_json::Value::Null,
            reason: Some(reason.to_owned()),
            workspace,
            specialist_ids,
            model_key,
            model,
            steps: history.answered_steps(),
            usage: history.usage(),
            routing: history
                .recruitment
                .as_ref()
                .map(crate::execute::RoutingNote::from),
            model_reason: history.start.as_ref().and_then(|s| s.model_reason.clone()),
            changes: None,
        })))
    }
}

/// The request that prepares the run again as it was recorded ([`TaskRequest::recorded`]),
/// continued: the project's workspace is reopened from its `workspace` event, not made anew.
fn request_of(history: &RunHistory) -> Option<TaskRequest> {
    // The project, for its instructions (issue #43); its worktree is reopened, not made.
    let project = history
        .workspace
        .as_ref()
        .filter(|w| w.origin == "project")
        .and_then(|w| w.repo.clone())
        .map(|path| super::ProjectRequest { path, base: None });
    Some(TaskRequest {
        continued: true,
        project,
        ..TaskRequest::recorded(history)?
    })
}

impl super::RunService {
    /// Continues every run whose process stopped before its end (`fabric resume --all`,
    /// `fabric run --resume-interrupted`, `fabric serve` at start), oldest first. A child
    /// run whose parent is interrupted too is left to its parent, which continues it when
    /// it gets to the call that started it; any other is continued on its own. A run that
    /// cannot be submitted now (the service is full or shutting down) stays interrupted for
    /// the next time, and is reported in the second list with why.
    pub async fn resume_interrupted(
        &self,
        observer: Option<Arc<dyn RunObserver>>,
    ) -> Result<
        (
            Vec<super::RunHandle>,
            Vec<(fabric_domain::RunId, ServiceError)>,
        ),
        ServiceError,
    > {
        let store = self.store();
        let ids = store
            .interrupted_runs()
            .await
            .map_err(ServiceError::Store)?;
        let mut parents = std::collections::HashMap::new();
        for id in &ids {
            let parent = match store.read_events(id).await {
                Ok(events) => RunHistory::read(id.clone(), &events)
                    .start
                    .and_then(|s| s.parent_run_id),
                Err(_) => None,
            };
            parents.insert(id.clone(), parent);
        }
        let mut handles = Vec::new();
        let mut refused = Vec::new();
        for id in ids {
            let parent_waits = parents
                .get(&id)
                .and_then(Option::as_ref)
                .is_some_and(|p| parents.contains_key(p));
            if parent_waits {
                continue;
            }
            let mut submission = super::Submission::resume(id.clone());
            submission.observer = observer.clone();
            match self.submit(submission) {
                Ok(handle) => handles.push(handle),
                Err(e) => {
                    tracing::warn!(run_id = %id, error = %e, "cannot continue an interrupted run now");
                    refused.push((id, e));
                }
            }
        }
        Ok((handles, refused))
    }
}
