//! Sessions from the store (ADR-114): each turn's run carries its session's id as its
//! `context_id`, so `session/load` finds the conversation's runs after `fabric acp`
//! restarts, replays them as `session/update`s and goes on from the last; `session/list`
//! lists the sessions the store holds.

use fabric_core::RunQuery;
use fabric_core::service::RunService;
use fabric_domain::runlog::RunOrigin;
use fabric_domain::{EventPayload, RunId, RunSummary, UtcTime};
use serde_json::{Value, json};
use std::path::PathBuf;

use crate::rpc::RpcError;
use crate::updates::Updates;
use fabric_core::RunObserver;

/// The most runs `session/list` reads.
const LISTED_RUNS: usize = 500;

/// The id's prefix of a session of `fabric acp`.
pub(crate) const SESSION_PREFIX: &str = "sess_";

/// The turns of session `id`, oldest first; an unknown session is an error.
pub(crate) async fn turns(service: &RunService, id: &str) -> Result<Vec<RunSummary>, RpcError> {
    let query = RunQuery {
        limit: LISTED_RUNS,
        context_id: Some(id.to_owned()),
        origin: Some(RunOrigin::User),
        ..RunQuery::default()
    };
    let mut runs = service
        .list(&query)
        .await
        .map_err(|e| RpcError::internal(e.to_string()))?;
    if runs.is_empty() || !id.starts_with(SESSION_PREFIX) {
        return Err(RpcError::unknown_session(id));
    }
    runs.sort_by(|a, b| a.started_at.total_cmp(&b.started_at));
    Ok(runs)
}

/// Replays `runs` as updates: each turn's prompt, its model's text and its calls, then
/// what it ended with.
pub(crate) async fn replay(service: &RunService, runs: &[RunSummary], updates: &Updates) {
    for run in runs {
        updates.user_message(&run.prompt);
        let events = match service.store().read_events(&run.id).await {
            Ok(events) => events,
            Err(e) => {
                updates.message(&format!("(run {} cannot be read: {e})", run.id));
                continue;
            }
        };
        for event in &events {
            updates.on_event(event).await;
        }
        if let Some(summary) = &run.summary {
            updates.message(summary);
        }
    }
}

/// `session/list`: the sessions in the store, newest first, those on `cwd` when given.
pub(crate) async fn list(service: &RunService, params: &Value) -> Result<Value, RpcError> {
    let cwd = params.get("cwd").and_then(Value::as_str).map(PathBuf::from);
    let query = RunQuery {
        limit: LISTED_RUNS,
        origin: Some(RunOrigin::User),
        ..RunQuery::default()
    };
    let runs = service
        .list(&query)
        .await
        .map_err(|e| RpcError::internal(e.to_string()))?;
    let mut sessions: Vec<Value> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for run in &runs {
        let Some(id) = run
            .context_id
            .as_deref()
            .filter(|c| c.starts_with(SESSION_PREFIX))
        else {
            continue;
        };
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        let Some(dir) = project_dir(service, &run.id).await else {
            continue;
        };
        if cwd.as_ref().is_some_and(|cwd| *cwd != dir) {
            continue;
        }
        sessions.push(json!({
            "sessionId": id,
            "cwd": dir,
            "title": fabric_domain::visible_line(&first_line(&run.prompt)),
            "updatedAt": iso(run.ended_at.unwrap_or(run.started_at)),
        }));
    }
    Ok(json!({"sessions": sessions}))
}

/// The user's directory a run worked on (its project, or the directory it copied).
pub(crate) async fn project_dir(service: &RunService, run: &RunId) -> Option<PathBuf> {
    let events = service.store().read_events(run).await.ok()?;
    events.iter().find_map(|e| match &e.payload {
        EventPayload::Workspace(opened) => opened.repo.clone().or_else(|| opened.source.clone()),
        _ => None,
    })
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").chars().take(80).collect()
}

/// Seconds since the epoch as ISO 8601 (UTC).
fn iso(secs: f64) -> String {
    let time = UtcTime::from_unix(secs.max(0.0) as u64).to_string();
    format!("{}Z", time.replacen(' ', "T", 1))
}
