//! What one run amounts to, folded from its events: the row `fabric logs list`, `GET /runs`,
//! search and stats show. Computed in this one place, from the runlog's events, so every
//! reader (the store's index, the CLI, the HTTP API, the MCP server) agrees.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{EventKind, RunEvent, RunId, RunStatus, Usage};

/// One run as listed, searched and counted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// The id.
    pub id: RunId,
    /// The run that delegated this one (`agent__<id>`), if any.
    pub parent_id: Option<RunId>,
    /// When it started, in seconds since the Unix epoch (its first event).
    pub started_at: f64,
    /// When it ended (its terminal event), or `None` while it goes on.
    pub ended_at: Option<f64>,
    /// How it ended, or `running` when its runlog has no terminal event (yet).
    pub status: RunStatus,
    /// Why it failed, or how it completed when not through `finish_task`.
    pub reason: Option<String>,
    /// The prompt.
    pub prompt: String,
    /// Who worked on it, in work order.
    pub specialist_ids: Vec<String>,
    /// The model keys its members used, in work order, without repeats.
    pub model_keys: Vec<String>,
    /// The models its members used, in work order, without repeats.
    pub models: Vec<String>,
    /// The finish payload's summary (or its first text field), else the failure reason.
    pub summary: Option<String>,
    /// The finish payload (merged for task forces), once the run completed.
    pub result: Option<Value>,
    /// Model calls made, all members together.
    pub steps: u32,
    /// Tokens used, all members together.
    pub usage: Usage,
    /// Tool calls made.
    pub tool_calls: u32,
    /// Tool calls that failed.
    pub tool_errors: u32,
    /// Number of events.
    pub events: u64,
}

impl RunSummary {
    /// A run with no events yet.
    pub fn new(id: RunId) -> Self {
        Self {
            id,
            parent_id: None,
            started_at: 0.0,
            ended_at: None,
            status: RunStatus::Running,
            reason: None,
            prompt: String::new(),
            specialist_ids: Vec::new(),
            model_keys: Vec::new(),
            models: Vec::new(),
            summary: None,
            result: None,
            steps: 0,
            usage: Usage::default(),
            tool_calls: 0,
            tool_errors: 0,
            events: 0,
        }
    }

    /// The summary of a whole runlog.
    pub fn from_events(id: RunId, events: &[RunEvent]) -> Self {
        let mut summary = Self::new(id);
        for event in events {
            summary.apply(event);
        }
        summary
    }

    /// Folds one more event in (events come in `seq` order).
    pub fn apply(&mut self, event: &RunEvent) {
        if self.events == 0 {
            self.started_at = event.ts;
        }
        self.events += 1;
        let payload = &event.payload;
        match event.kind {
            EventKind::RunStart => {
                self.prompt = text(&payload["prompt"]).unwrap_or_default();
                self.parent_id = payload["parent_run_id"]
                    .as_str()
                    .and_then(|p| RunId::parse(p).ok());
                self.note_model(&payload["model_key"], &payload["model"]);
            }
            EventKind::Recruitment => {
                self.specialist_ids = strings(&payload["specialist_ids"]);
            }
            EventKind::PackStart => self.note_model(&payload["model_key"], &payload["model"]),
            EventKind::ToolCall => self.tool_calls = self.tool_calls.saturating_add(1),
            EventKind::ToolError => self.tool_errors = self.tool_errors.saturating_add(1),
            EventKind::RunComplete | EventKind::RunFailed => {
                self.ended_at = Some(event.ts);
                self.status = serde_json::from_value(payload["status"].clone()).unwrap_or(
                    if event.kind == EventKind::RunComplete {
                        RunStatus::Completed
                    } else {
                        RunStatus::Failed
                    },
                );
                self.reason = text(&payload["reason"]);
                if let Some(steps) = payload["steps"].as_u64() {
                    self.steps = u32::try_from(steps).unwrap_or(u32::MAX);
                }
                if let Ok(usage) = serde_json::from_value::<Usage>(payload["usage"].clone()) {
                    self.usage = usage;
                }
                let result = payload.get("result").filter(|r| !r.is_null());
                self.summary = result
                    .and_then(result_summary)
                    .or_else(|| self.reason.clone());
                self.result = result.cloned();
            }
            _ => {}
        }
    }

    /// How long it ran, in seconds, once it ended.
    pub fn duration_s(&self) -> Option<f64> {
        self.ended_at.map(|end| (end - self.started_at).max(0.0))
    }

    /// The text a run is found by in semantic search: its prompt and what it produced.
    pub fn embedding_text(&self) -> String {
        match &self.summary {
            Some(summary) => format!("{}\n{summary}", self.prompt),
            None => self.prompt.clone(),
        }
    }

    fn note_model(&mut self, key: &Value, model: &Value) {
        if let Some(key) = key.as_str()
            && !self.model_keys.iter().any(|k| k == key)
        {
            self.model_keys.push(key.to_owned());
        }
        if let Some(model) = model.as_str()
            && !self.models.iter().any(|m| m == model)
        {
            self.models.push(model.to_owned());
        }
    }
}

fn text(value: &Value) -> Option<String> {
    value.as_str().map(str::to_owned)
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
