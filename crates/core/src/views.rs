//! The answers the front ends share (issue #28): the HTTP API and the MCP server serialise
//! these same types, so a figure or a deleted run reads the same through either. With the
//! `openapi` feature (which `fabric-api-http` turns on) they also describe themselves for the
//! OpenAPI document.

use fabric_domain::{EventKind, RunEvent, RunId, RunStatus, RunSummary, runlog};
use serde::Serialize;
use serde_json::Value;

use crate::{Liveness, StatsGroup, StatsRow};

/// What `GET /stats` and the `run_stats` tool answer.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StatsPage {
    /// The grouping.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub by: StatsGroup,
    /// One row per group.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub rows: Vec<StatsRow>,
}

/// What `POST /runs/prune` and the `prune_runs` tool deleted.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PruneResult {
    /// How many runs.
    pub deleted: usize,
    /// Their ids.
    pub run_ids: Vec<String>,
}

impl PruneResult {
    /// The answer for the runs `deleted`.
    pub fn of(deleted: &[RunId]) -> Self {
        Self {
            deleted: deleted.len(),
            run_ids: deleted.iter().map(ToString::to_string).collect(),
        }
    }
}

/// One run: its summary, and its result once it has one.
// What `GET /runs/{id}` answers, and the one place a run's fields are projected from its
// [`RunSummary`]: the MCP `get_run` tool's [`RunRecord`] takes its fields from here. The
// types and doc comments are the HTTP API's published schema (`RunView` in the OpenAPI
// document), so they stay as they were: `steps` a `u64`, `usage` JSON.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunView {
    /// The run.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub run_id: RunId,
    /// `running`, or how it ended.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub status: RunStatus,
    /// Seconds since the Unix epoch.
    pub started_at: Option<f64>,
    /// The prompt.
    pub prompt: Option<String>,
    /// Who worked on it.
    pub specialist_ids: Vec<String>,
    /// The model key.
    pub model_key: Option<String>,
    /// The run's one-line summary, the rule `GET /runs` lists (the finish payload's
    /// `summary`, else `executive_summary`, else its first text), or the failure reason.
    pub summary: Option<String>,
    /// Why it failed, or how it completed when not through `finish_task`.
    pub reason: Option<String>,
    /// Model calls made, once ended.
    pub steps: Option<u64>,
    /// Tokens used, once ended.
    pub usage: Option<Value>,
    /// The finish payload of a completed run.
    pub result: Option<Value>,
    /// How many events the runlog holds.
    pub events: usize,
    /// `true` when the run is `running` but no process carries it on any more (it was
    /// killed or crashed: its runlog's lock is free): `fabric resume <id>` continues it. The
    /// CLI shows it as `interrupted (resumable)`. Derived at each read, never stored; false
    /// when this server cannot tell (the run's runlog is on another machine).
    pub resumable: bool,
    /// `true` when the run is `running` but waits for a worker to claim it (`store.queue:
    /// true`): no worker has taken it yet, or its worker's lease ran out and none has taken
    /// it over yet. Derived at each read, never stored.
    pub queued: bool,
}

impl RunView {
    /// The view of run `id` from its events (the runlog, or a live run's buffer).
    pub fn from_events(id: RunId, events: &[RunEvent]) -> Self {
        let started = events.iter().any(|e| e.kind() == EventKind::RunStart);
        // Steps and usage only once the run has ended with a full `RunEnd` (a run ended by a
        // panic has the shorter `RunAborted`), which the summary does not tell apart.
        let end = events
            .iter()
            .rev()
            .find(|e| e.kind().is_terminal())
            .and_then(|e| e.run_end().cloned());
        Self::from_summary(RunSummary::from_events(id, events), started, end)
    }

    /// The projection of `summary`, with what it does not keep: whether the run `started`
    /// (else it has no prompt yet) and its full `end`.
    pub(crate) fn from_summary(
        summary: RunSummary,
        started: bool,
        end: Option<runlog::RunEnd>,
    ) -> Self {
        Self {
            summary: summary.summary.clone().or_else(|| summary.reason.clone()),
            started_at: (summary.events > 0).then_some(summary.started_at),
            prompt: started.then_some(summary.prompt),
            model_key: summary.model_keys.into_iter().next(),
            steps: end.as_ref().map(|e| u64::from(e.steps)),
            usage: end.and_then(|e| serde_json::to_value(e.usage).ok()),
            run_id: summary.id,
            status: summary.status,
            specialist_ids: summary.specialist_ids,
            reason: summary.reason,
            result: summary.result,
            // A count of events always fits a `usize` on the machines the fabric runs on.
            events: usize::try_from(summary.events).unwrap_or(usize::MAX),
            resumable: false,
            queued: false,
        }
    }

    /// With what a probe found about who carries the run on.
    pub fn with_liveness(mut self, liveness: Liveness) -> Self {
        self.resumable = liveness.resumable();
        self.queued = liveness.queued();
        self
    }
}

/// A run read back whole, as the MCP `get_run` tool answers it: the fields of its
/// [`RunView`] that tool has always shown, with every event.
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    /// The run.
    pub run_id: RunId,
    /// `running`, or how it ended.
    pub status: RunStatus,
    /// The prompt, once the run has started.
    pub prompt: Option<String>,
    /// The finish payload of a completed run.
    pub result: Option<Value>,
    /// Why it failed, or how it completed when not through `finish_task`.
    pub reason: Option<String>,
    /// Model calls made, once the run has ended with a full `RunEnd`.
    pub steps: Option<u64>,
    /// Tokens used, once the run has ended with a full `RunEnd`.
    pub usage: Option<Value>,
    /// As [`RunView::resumable`]: `running`, but no process carries it on any more.
    pub resumable: bool,
    /// As [`RunView::queued`]: `running`, but waiting for a worker to claim it.
    pub queued: bool,
    /// Every event of its runlog.
    pub events: Vec<RunEvent>,
}

impl RunRecord {
    /// The record of run `id` from its events.
    pub fn from_events(id: RunId, events: Vec<RunEvent>) -> Self {
        let view = RunView::from_events(id, &events);
        Self {
            run_id: view.run_id,
            status: view.status,
            prompt: view.prompt,
            result: view.result,
            reason: view.reason,
            steps: view.steps,
            usage: view.usage,
            resumable: view.resumable,
            queued: view.queued,
            events,
        }
    }

    /// With what a probe found about who carries the run on (issue #40: `get_run` lacked
    /// what `GET /runs/{id}` says).
    pub fn with_liveness(mut self, liveness: Liveness) -> Self {
        self.resumable = liveness.resumable();
        self.queued = liveness.queued();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(seq: u64, kind: EventKind, payload: Value) -> RunEvent {
        RunEvent::from_wire(seq, 100.0 + seq as f64, kind.as_str(), None, payload)
    }

    fn id() -> RunId {
        RunId::parse("r").unwrap_or_else(|e| panic!("{e}"))
    }

    fn start() -> RunEvent {
        event(
            0,
            EventKind::RunStart,
            json!({"run_id": "r", "prompt": "p", "model_key": "k", "model": "m",
                   "model_reason": null, "max_steps": 3, "network_allowed": false,
                   "workspace": "/w", "sandbox": null, "parent_run_id": null}),
        )
    }

    #[test]
    fn issue_28_an_ended_run_shows_its_end_and_the_summary_the_listing_shows() {
        let end = event(
            1,
            EventKind::RunComplete,
            json!({"run_id": "r", "status": "completed", "specialist_ids": ["a"],
                   "task_force_mode": "sequential", "steps": 4, "reason": null,
                   "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
                   "result": {"executive_summary": "e"}}),
        );
        let view = RunView::from_events(id(), &[start(), end]);
        assert_eq!(view.status, RunStatus::Completed);
        assert_eq!(view.started_at, Some(100.0));
        assert_eq!(view.prompt.as_deref(), Some("p"));
        assert_eq!(view.model_key.as_deref(), Some("k"));
        assert_eq!((view.steps, view.events), (Some(4), 2));
        assert_eq!(
            view.usage,
            Some(json!({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}))
        );
        // One rule with the listing: a research run's `executive_summary` (it read only
        // `summary` before issue #28, so this was null).
        assert_eq!(view.summary.as_deref(), Some("e"));
    }

    #[test]
    fn a_run_ended_by_a_panic_has_a_reason_but_no_figures() {
        let aborted = event(
            1,
            EventKind::RunFailed,
            json!({"run_id": "r", "status": "failed", "reason": "panic"}),
        );
        let record = RunRecord::from_events(id(), vec![start(), aborted]);
        assert_eq!(record.status, RunStatus::Failed);
        assert_eq!(record.reason.as_deref(), Some("panic"));
        assert_eq!((record.steps, record.usage), (None, None));
        assert_eq!(record.events.len(), 2);
    }

    #[test]
    fn a_run_with_no_events_has_not_started() {
        let view = RunView::from_events(id(), &[]);
        assert_eq!(view.status, RunStatus::Running);
        assert_eq!((view.started_at, view.prompt, view.events), (None, None, 0));
    }
}
