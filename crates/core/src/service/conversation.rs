//! A run that continues an earlier run's conversation (`fabric run --continue ID` /
//! `--fork ID`, `continues` over HTTP, MCP and A2A; issue #42, ADR-105).
//!
//! Before the new run is prepared, the earlier run's runlog is read back (it must have
//! ended), the member whose conversation goes on is chosen, the request gets that member's
//! specialist and model key where it names none, and its project where it names none; the
//! conversation is rebuilt from the runlogs of the whole chain (a run that continued another
//! inherited that one's first). The workspace follows in `start`: a project run's branch is
//! reopened (continue) or branched from its head (fork); a scratch run's files are copied.

use fabric_domain::runlog::{Continues, WorkspaceOpened};
use fabric_domain::{RunEvent, RunId};
use std::path::{Path, PathBuf};

use super::{ConversationError, RunService, ServiceError, TaskRequest};
use crate::conversation::{Inherited, continued_member, member_messages};
use crate::history::RunHistory;
use crate::ports::StoreError;

/// The most runs a conversation's chain is read back through.
const MAX_CHAIN: usize = 100;

/// What continuing the earlier run brings to the new one.
pub(super) struct Continuation {
    /// The conversation its member starts from.
    pub(super) inherited: Inherited,
    /// The earlier run.
    pub(super) earlier: RunId,
    /// A fork: a new branch from the earlier head.
    pub(super) fork: bool,
    /// The earlier run's versioned workspace on a project (or a copied directory), if any.
    pub(super) workspace: Option<WorkspaceOpened>,
    /// The earlier run's head: its last checkpoint, else its base.
    pub(super) head: Option<String>,
    /// Where the earlier run's files are (a scratch run's are copied into the new run's).
    pub(super) files: PathBuf,
}

impl RunService {
    /// Reads the earlier run `request.continues` names and fills the request's defaults from
    /// it; `None` when the request continues nothing.
    pub(super) async fn continuation(
        &self,
        request: &mut TaskRequest,
    ) -> Result<Option<Continuation>, ServiceError> {
        let Some(asked) = request.continues.clone() else {
            return Ok(None);
        };
        let id = asked.run_id.clone();
        if self.inner.registry.get(&id).is_some() {
            return Err(ConversationError::NotEnded { id }.into());
        }
        let (history, events) = self.read_ended(&id).await?;
        let workspace = project_of(&history);
        let named = request.project.is_some();
        same_project(&id, workspace.as_ref(), request)?;
        if !named {
            // The earlier run's project is held to this server's roots like a named one.
            self.confine_project(request)?;
        }
        let member = chosen_member(&id, &history, request)?;
        let specialist = history
            .specialist_ids()
            .get(member)
            .cloned()
            .unwrap_or_default();
        let chosen = request.specialists.is_empty() && !specialist.is_empty();
        if chosen {
            request.specialists = vec![specialist.clone()];
        }
        if request.model_key.is_none() {
            request.model_key = history
                .members
                .get(member)
                .and_then(|m| m.model.as_ref())
                .map(|(key, _)| key.clone());
        }
        let mut inherited = self
            .conversation(&history, &events, member, asked.mode(), specialist)
            .await?;
        inherited.chosen = chosen
            .then(|| format!("the specialist of run {id}, whose conversation this run continues"));
        let files = self.files_of(&id, &history);
        Ok(Some(Continuation {
            inherited,
            earlier: id,
            fork: asked.fork,
            head: history
                .last_checkpoint
                .clone()
                .or_else(|| workspace.as_ref().map(|w| w.base.clone())),
            workspace,
            files,
        }))
    }

    /// The conversation a run resumed after a stop inherited (`link`, its
    /// `run_start.continues`), rebuilt as when it started.
    pub(super) async fn inherited_again(
        &self,
        link: Option<&Continues>,
    ) -> Result<Option<Inherited>, ServiceError> {
        let Some(link) = link else {
            return Ok(None);
        };
        let (history, events) = self.read_ended(&link.run_id).await?;
        let member = continued_member(&history, Some(&link.specialist_id)).unwrap_or(0);
        let specialist = link.specialist_id.clone();
        self.conversation(&history, &events, member, link.mode, specialist)
            .await
            .map(Some)
    }

    /// What continuing `history`'s run inherits: the conversation of the runs it goes back
    /// through, then its `member`'s.
    async fn conversation(
        &self,
        history: &RunHistory,
        events: &[RunEvent],
        member: usize,
        mode: fabric_domain::runlog::ContinueMode,
        specialist: String,
    ) -> Result<Inherited, ServiceError> {
        let mut messages = self.earlier_messages(history).await?;
        messages.extend(member_messages(history, events, member));
        Ok(Inherited::new(
            messages,
            history.run_id.clone(),
            mode,
            specialist,
        ))
    }

    /// An ended run's history and events; refused when it does not exist, cannot be read or
    /// has not ended.
    async fn read_ended(&self, id: &RunId) -> Result<(RunHistory, Vec<RunEvent>), ServiceError> {
        let events = self
            .inner
            .store
            .read_events(id)
            .await
            .map_err(|e| match e {
                StoreError::NotFound(_) => ConversationError::NoSuchRun { id: id.clone() },
                e => ConversationError::Unreadable {
                    id: id.clone(),
                    detail: e.to_string(),
                },
            })?;
        let history = RunHistory::read(id.clone(), &events);
        if history.start.is_none() {
            return Err(ConversationError::Unreadable {
                id: id.clone(),
                detail: "it has no `run_start`".to_owned(),
            }
            .into());
        }
        if history.ended.is_none() {
            return Err(ConversationError::NotEnded { id: id.clone() }.into());
        }
        Ok((history, events))
    }

    /// What the runs before `history`'s inherited, oldest first: the chain its
    /// `run_start.continues` links walk back through.
    async fn earlier_messages(
        &self,
        history: &RunHistory,
    ) -> Result<Vec<fabric_domain::Message>, ServiceError> {
        let mut parts = Vec::new();
        let mut link = history.start.as_ref().and_then(|s| s.continues.clone());
        while let Some(earlier) = link {
            if parts.len() >= MAX_CHAIN {
                return Err(ConversationError::Unreadable {
                    id: history.run_id.clone(),
                    detail: format!(
                        "its conversation goes back through more than {MAX_CHAIN} runs"
                    ),
                }
                .into());
            }
            let (h, events) = self.read_ended(&earlier.run_id).await?;
            let member = continued_member(&h, Some(&earlier.specialist_id)).unwrap_or(0);
            parts.push(member_messages(&h, &events, member));
            link = h.start.as_ref().and_then(|s| s.continues.clone());
        }
        Ok(parts.into_iter().rev().flatten().collect())
    }

    /// Where an ended run's files are: its run directory's `workspace` in this store, else
    /// where its `run_start` says.
    fn files_of(&self, id: &RunId, history: &RunHistory) -> PathBuf {
        self.inner
            .store
            .runlog_path(id)
            .and_then(|p| p.parent().map(|d| d.join("workspace")))
            .filter(|d| d.is_dir())
            .or_else(|| history.start.as_ref().map(|s| s.workspace.clone()))
            .unwrap_or_default()
    }
}

/// The earlier run's versioned workspace when it worked on a project or a copied directory.
fn project_of(history: &RunHistory) -> Option<WorkspaceOpened> {
    history
        .workspace
        .clone()
        .filter(|w| w.repo.is_some() || w.source.is_some())
}

/// The continued run works where the earlier one did: a request without a project gets the
/// earlier run's; one naming another place is refused.
fn same_project(
    id: &RunId,
    workspace: Option<&WorkspaceOpened>,
    request: &mut TaskRequest,
) -> Result<(), ConversationError> {
    let recorded = workspace.and_then(|w| w.repo.clone().or_else(|| w.source.clone()));
    let other = |asked: &Path, recorded: String| ConversationError::OtherProject {
        id: id.clone(),
        recorded,
        asked: format!("project {}", asked.display()),
    };
    match (recorded, &mut request.project) {
        (None, None) => Ok(()),
        (Some(repo), None) => {
            request.project = Some(super::ProjectRequest {
                path: repo,
                base: None,
            });
            Ok(())
        }
        (None, Some(asked)) => Err(other(&asked.path, "a scratch workspace".to_owned())),
        (Some(repo), Some(asked)) if same_place(&repo, &asked.path) => Ok(()),
        (Some(repo), Some(asked)) => Err(other(&asked.path, format!("project {}", repo.display()))),
    }
}

/// Whether two paths name the same directory (resolved; as given when they cannot be).
fn same_place(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The member whose conversation goes on (ADR-105): refused for several specialists asked,
/// and for a parallel task force without one of its members named.
fn chosen_member(
    id: &RunId,
    history: &RunHistory,
    request: &TaskRequest,
) -> Result<usize, ConversationError> {
    if request.specialists.len() > 1 {
        return Err(ConversationError::OneSpecialist {
            count: request.specialists.len(),
        });
    }
    continued_member(history, request.specialists.first().map(String::as_str)).ok_or_else(|| {
        ConversationError::WhichMember {
            id: id.clone(),
            specialists: history.specialist_ids().join(", "),
        }
    })
}

/// Copies the earlier scratch run's files into the new run's workspace (ADR-105), without
/// recursion; symbolic links are copied as links.
pub(super) async fn copy_files(from: PathBuf, to: PathBuf) -> Result<(), std::io::Error> {
    tokio::task::spawn_blocking(move || copy_tree(&from, &to))
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), std::io::Error> {
    // Nothing to copy: the earlier run's files are not on this machine (a worker of its
    // own), or it had none.
    if !from.is_dir() {
        tracing::warn!(from = %from.display(), "the earlier run's files are not here; the continued run starts without them");
        return Ok(());
    }
    let mut pending = vec![(from.to_path_buf(), to.to_path_buf())];
    while let Some((src, dst)) = pending.pop() {
        std::fs::create_dir_all(&dst)?;
        for entry in std::fs::read_dir(&src)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            let target = dst.join(entry.file_name());
            if kind.is_dir() {
                pending.push((entry.path(), target));
            } else if kind.is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
            } else {
                std::fs::copy(entry.path(), &target)?;
            }
        }
    }
    Ok(())
}

/// One run of a conversation, as `fabric logs show` and `logs list` show it.
#[derive(Debug, Clone, PartialEq)]
pub struct LineageRun {
    /// The run.
    pub run_id: RunId,
    /// How it continues the run after it in the lineage; `None` for the conversation's first.
    pub mode: Option<fabric_domain::runlog::ContinueMode>,
    /// Its model calls.
    pub steps: u32,
    /// Its tokens.
    pub usage: fabric_domain::Usage,
}

/// `id` and the runs whose conversation it continues, walking back through
/// `run_start.continues` (newest first, at most [`MAX_CHAIN`] runs): the last is the
/// conversation's first run. A run that cannot be read ends the walk.
pub async fn lineage(
    store: &dyn crate::ports::RunStore,
    id: &RunId,
) -> Result<Vec<LineageRun>, StoreError> {
    let mut runs = Vec::new();
    let mut next = Some(id.clone());
    while let Some(run_id) = next.take() {
        let events = match store.read_events(&run_id).await {
            Ok(events) => events,
            Err(e) if runs.is_empty() => return Err(e),
            Err(_) => break,
        };
        let summary = fabric_domain::RunSummary::from_events(run_id.clone(), &events);
        let link = events.iter().find_map(|e| match &e.payload {
            fabric_domain::EventPayload::RunStart(start) => start.continues.clone(),
            _ => None,
        });
        runs.push(LineageRun {
            run_id,
            mode: link.as_ref().map(|l| l.mode),
            steps: summary.steps,
            usage: summary.usage,
        });
        if runs.len() < MAX_CHAIN {
            next = link.map(|l| l.run_id);
        }
    }
    Ok(runs)
}

/// A conversation up to one of its runs, as listings show it (issue #42): its first run and
/// the totals of the runs from there to this one (budgets stay per run).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConversationTotals {
    /// The conversation's first run (the run itself when it continues none).
    pub first: RunId,
    /// Runs from the first to this one.
    pub runs: usize,
    /// Their model calls.
    pub steps: u32,
    /// Their tokens.
    pub tokens: u64,
}

impl ConversationTotals {
    /// The totals of a lineage ([`lineage`], newest first); `None` when it is empty.
    pub fn of(lineage: &[LineageRun]) -> Option<Self> {
        Some(Self {
            first: lineage.last()?.run_id.clone(),
            runs: lineage.len(),
            steps: lineage.iter().map(|r| r.steps).sum(),
            tokens: lineage.iter().map(|r| r.usage.total_tokens).sum(),
        })
    }
}

/// [`ConversationTotals`] of `id`'s conversation up to it; `None` when its runlog cannot be
/// read.
pub async fn conversation_totals(
    store: &dyn crate::ports::RunStore,
    id: &RunId,
) -> Option<ConversationTotals> {
    let lineage = lineage(store, id).await.ok()?;
    ConversationTotals::of(&lineage)
}
