//! Runlog events built by hand, for the tests of sinks (telemetry, metrics, stores) and of
//! the service: a test names the fields it is about and the rest get placeholders, so the
//! event still decodes with its struct as the fabric's own events do. (They were
//! `fabric-domain`'s `sample_payload` and `RunEvent::sample`; no shipped code used them.)

use fabric_domain::{EventKind, RunEvent, RunId};
use serde_json::{Value, json};

/// An event of `kind` with `payload` as its runlog line holds it: the one place the fakes
/// build a [`RunEvent`] from JSON.
pub fn event(seq: u64, ts: f64, kind: EventKind, payload: Value) -> RunEvent {
    RunEvent::from_wire(seq, ts, kind.as_str(), None, payload)
}

/// An event as the runlog line holds it (`payload` as JSON, `pack_index` inside it): what a
/// test that reads the runlog as a reader would compares.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// Its `seq`.
    pub seq: u64,
    /// Its `kind`.
    pub kind: EventKind,
    /// Its `step`.
    pub step: Option<u32>,
    /// Its `payload`, as written.
    pub payload: Value,
}

impl Line {
    /// The line of `event`.
    pub fn of(event: &RunEvent) -> Self {
        Self {
            seq: event.seq,
            kind: event.kind(),
            step: event.step,
            payload: event.payload_json().unwrap_or_default(),
        }
    }

    /// Its kind.
    pub fn kind(&self) -> EventKind {
        self.kind
    }
}

/// An event of run `id` at `ts` 1.0 whose payload has the fields a summary reads
/// (`run_id`, `status` completed, `prompt` x): what a [`ScriptedRun`](super::ScriptedRun)
/// records.
pub fn run_event(id: &RunId, seq: u64, kind: EventKind) -> RunEvent {
    let fields = json!({"run_id": id, "status": "completed", "prompt": "x"});
    RunEvent {
        seq,
        ..sample(kind, 1.0, fields)
    }
}

/// A payload of `kind` with every field a reader requires, as placeholders: a member's
/// `llm_request` and `llm_response` (not the routing call's), a run's own `run_failed`;
/// an empty object for [`EventKind::Unknown`].
pub fn sample_payload(kind: EventKind) -> Value {
    let usage = json!({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0});
    let end = json!({"run_id": "r", "status": "completed", "specialist_ids": [],
        "task_force_mode": "single", "steps": 0, "usage": usage, "reason": null});
    match kind {
        EventKind::RunStart => json!({"run_id": "r", "prompt": "", "model_key": "", "model": "",
            "model_reason": null, "max_steps": 1, "network_allowed": false, "workspace": "/",
            "sandbox": null, "parent_run_id": null, "depth": 0}),
        EventKind::Recruitment => json!({"specialist_id": "", "specialist_ids": [],
            "required_capabilities": [], "routing_method": "explicit", "reason": "",
            "is_task_force": false, "task_force_mode": "single"}),
        EventKind::TaskForceParallel => json!({"specialist_ids": [], "max_parallel": 1}),
        EventKind::MemberStart => json!({"specialist_id": "", "pack_index": 0, "tools": [],
            "model_key": "", "model": "", "handoff_from": null}),
        EventKind::MemberEnd => json!({"specialist_id": "", "status": "completed", "steps": 0,
            "usage": usage, "reason": null}),
        EventKind::McpServer => json!({"server": "", "status": "starting", "elapsed_ms": 0}),
        EventKind::McpMessage => json!({"server": "", "type": "log"}),
        EventKind::McpRequest => json!({"server": "", "method": "roots/list",
            "outcome": "answered"}),
        EventKind::LlmRequest => json!({"model": "", "message_count": 0, "tool_count": 0}),
        EventKind::LlmResponse => json!({"content": null, "tool_calls": [], "usage": null,
            "latency_ms": 0.0, "finish_reason": null}),
        EventKind::CorrectiveReprompt => json!({"reason": "", "attempt": 1, "max_retries": 1}),
        EventKind::ToolCallRepaired => json!({"format": "", "tools": [], "call_ids": []}),
        EventKind::ContextCompacted => json!({"window": 0, "room": 0, "tokens_before": 0,
            "tokens_after": 0, "shortened_results": 0, "dropped_messages": 0, "mode": "drop"}),
        EventKind::CloudFallback => json!({"reason": "", "local_model": "", "cloud_model": "",
            "cloud_model_key": ""}),
        EventKind::CriticReview => json!({"round": 1, "max_rounds": 1, "critic": "",
            "approved": true, "findings": [], "files": [], "staged_dir": "/"}),
        EventKind::RepairRound => json!({"round": 2, "max_rounds": 2, "model_key": ""}),
        EventKind::ToolCall => json!({"tool": "", "call_id": "", "args": {}}),
        EventKind::ToolResult => json!({"tool": "", "call_id": "", "result": ""}),
        EventKind::ToolError => json!({"tool": "", "call_id": "", "error_type": "failed",
            "error_message": ""}),
        EventKind::SecurityEvent => json!({"event_type": "path_escape",
            "tool": null, "attempted": "", "error_message": ""}),
        EventKind::LoopDetected => json!({"tool": "", "call_id": "", "args": {}, "repeats": 2,
            "action": "nudged", "message": ""}),
        EventKind::RunResumed => json!({"run_id": "r", "resumption": 1, "previous_events": 0,
            "replayed_steps": 0, "last_event_ts": 0.0}),
        EventKind::Workspace => json!({"origin": "project", "dir": "/w", "branch": "fabric/r",
            "base": "0000000000000000000000000000000000000000"}),
        EventKind::Checkpoint => json!({"tool": "", "call_id": "", "commit": null}),
        EventKind::InputRequired => json!({"call_id": "", "input": "question", "question": ""}),
        EventKind::InputAnswered => json!({"call_id": "", "answer": "", "by": "http"}),
        EventKind::UserMessage => json!({"text": "", "by": "http"}),
        EventKind::HookRun => json!({"event": "PreToolUse", "source": "config", "command": "",
            "duration_ms": 0, "outcome": "ok"}),
        EventKind::RunComplete => end,
        EventKind::RunFailed => {
            let mut end = end;
            end["status"] = json!("failed");
            end
        }
        EventKind::Unknown => json!({}),
    }
}

/// An event of `kind` at `ts` (`seq` 0, no step) whose payload is `fields` over
/// [`sample_payload`]: for tests, which name only the fields they are about.
pub fn sample(kind: EventKind, ts: f64, fields: Value) -> RunEvent {
    let mut payload = sample_payload(kind);
    if let (Value::Object(payload), Value::Object(fields)) = (&mut payload, fields) {
        payload.extend(fields);
    }
    event(0, ts, kind, payload)
}
