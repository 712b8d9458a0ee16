//! The answers the front ends share (issue #28): the HTTP API and the MCP server serialise
//! these same types, so a figure or a deleted run reads the same through either. With the
//! `openapi` feature (which `fabric-api-http` turns on) they also describe themselves for the
//! OpenAPI document.

use fabric_domain::{EventKind, RunEvent, RunId, RunStatus, RunSummary, Usage, runlog};
use serde::Serialize;
use serde_json::Value;

use crate::{StatsGroup, StatsRow};

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

/// A run read back whole, as the MCP `get_run` tool answers it: a projection of its
/// [`RunSummary`] with every event.
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
    pub steps: Option<u32>,
    /// Tokens used, once the run has ended with a full `RunEnd`.
    pub usage: Option<Usage>,
    /// Every event of its runlog.
    pub events: Vec<RunEvent>,
}

impl RunRecord {
    /// The record of run `id` from its events.
    pub fn from_events(id: RunId, events: Vec<RunEvent>) -> Self {
        let summary = RunSummary::from_events(id, &events);
        let started = events.iter().any(|e| e.kind == EventKind::RunStart);
        // Steps and usage only once the run has ended with a full `RunEnd`, as before.
        let end = events
            .iter()
            .rev()
            .find(|e| e.kind.is_terminal())
            .and_then(|e| e.payload_as::<runlog::RunEnd>().ok());
        Self {
            run_id: summary.id,
            status: summary.status,
            prompt: started.then_some(summary.prompt),
            result: summary.result,
            reason: summary.reason,
            steps: end.as_ref().map(|e| e.steps),
            usage: end.map(|e| e.usage),
            events,
        }
    }
}
