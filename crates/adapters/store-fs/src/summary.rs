//! Summarises a run from its events, for `fabric logs list`.

use fabric_core::RunSummary;
use fabric_domain::{EventKind, RunEvent, RunId, RunStatus};
use serde_json::Value;

pub(crate) fn summarise(id: RunId, events: &[RunEvent]) -> RunSummary {
    let mut summary = RunSummary {
        id,
        started_at: events.first().map(|e| e.ts).unwrap_or_default(),
        status: RunStatus::Running,
        specialist_ids: Vec::new(),
        prompt: String::new(),
        summary: None,
        events: events.len(),
    };
    for event in events {
        let payload = &event.payload;
        match event.kind {
            EventKind::RunStart => {
                summary.prompt = payload["prompt"].as_str().unwrap_or_default().to_owned();
            }
            EventKind::Recruitment => {
                summary.specialist_ids = strings(&payload["specialist_ids"]);
            }
            EventKind::RunComplete | EventKind::RunFailed => {
                summary.status = serde_json::from_value(payload["status"].clone()).unwrap_or(
                    if event.kind == EventKind::RunComplete {
                        RunStatus::Completed
                    } else {
                        RunStatus::Failed
                    },
                );
                summary.summary = result_summary(&payload["result"])
                    .or_else(|| payload["reason"].as_str().map(str::to_owned));
            }
            _ => {}
        }
    }
    summary
}

/// The summary of a run whose runlog cannot be read.
pub(crate) fn unreadable(id: RunId, error: &fabric_core::StoreError) -> RunSummary {
    RunSummary {
        id,
        started_at: 0.0,
        status: RunStatus::Failed,
        specialist_ids: Vec::new(),
        prompt: String::new(),
        summary: Some(format!("unreadable runlog: {error}")),
        events: 0,
    }
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The `summary` of a finish payload, or the first string field when it has another name
/// (research's `executive_summary`).
fn result_summary(result: &Value) -> Option<String> {
    let object = result.as_object()?;
    object
        .get("summary")
        .and_then(Value::as_str)
        .or_else(|| object.values().find_map(Value::as_str))
        .map(str::to_owned)
}
