//! What one run amounts to, folded from its events: the row `fabric logs list`, `GET /runs`,
//! search and stats show. Computed in this one place, from the runlog's events, so every
//! reader (the store's index, the CLI, the HTTP API, the MCP server) agrees.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::{EventKind, EventPayload, RunEvent, RunId, RunStatus, Usage};

/// One run as listed, searched and counted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// The id.
    pub id: RunId,
    /// The run that delegated this one (`agent__<id>`), if any.
    pub parent_id: Option<RunId>,
    /// Who started it (`run_start.origin`).
    #[serde(default)]
    pub origin: crate::runlog::RunOrigin,
    /// The A2A context its task belongs to (`run_start.context_id`), if an A2A client
    /// started it.
    #[serde(default)]
    pub context_id: Option<String>,
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
            origin: crate::runlog::RunOrigin::User,
            context_id: None,
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
    ///
    /// A payload that does not fit its struct ([`EventPayload::Unreadable`]) is read field
    /// by field: one that is missing or does not fit is skipped, never a panic.
    pub fn apply(&mut self, event: &RunEvent) {
        self.fold(SummaryFold::of(event));
    }

    /// Folds in what one event adds ([`SummaryFold::of`]), as [`RunSummary::apply`] would.
    pub fn fold(&mut self, fold: SummaryFold) {
        if self.events == 0 {
            self.started_at = fold.ts;
        }
        self.events += 1;
        match fold.change {
            Change::Start(start) => self.start(*start),
            Change::Specialists(ids) => self.specialist_ids = ids,
            Change::Model(member) => self.note_model(member.model_key, member.model),
            Change::ToolCall => self.tool_calls = self.tool_calls.saturating_add(1),
            Change::ToolError => self.tool_errors = self.tool_errors.saturating_add(1),
            Change::End(end) => self.end(fold.ts, *end),
            // A run waiting for a person is listed so until an answer continues it.
            Change::InputRequired(question) if self.ended_at.is_none() => {
                self.status = RunStatus::InputRequired;
                self.reason = Some(question);
            }
            Change::Resumed if self.ended_at.is_none() => {
                self.status = RunStatus::Running;
                self.reason = None;
            }
            Change::InputRequired(_) | Change::Resumed | Change::Nothing => {}
        }
    }

    fn start(&mut self, start: StartFields) {
        self.prompt = start.prompt.unwrap_or_default();
        // Written before `origin` existed (read as `user`): a child is known by its parent.
        self.origin = match (start.origin, &start.parent_run_id) {
            (Some(crate::runlog::RunOrigin::User) | None, Some(_)) => {
                crate::runlog::RunOrigin::Child
            }
            (Some(origin), _) => origin,
            (None, None) => crate::runlog::RunOrigin::User,
        };
        self.parent_id = start.parent_run_id;
        self.context_id = start.context_id;
        self.note_model(start.model_key, start.model);
    }

    fn end(&mut self, ts: f64, end: EndFields) {
        self.ended_at = Some(ts);
        self.status = end.status.unwrap_or(RunStatus::Failed);
        self.reason = end.reason;
        if let Some(steps) = end.steps {
            self.steps = steps;
        }
        if let Some(usage) = end.usage {
            self.usage = usage;
        }
        // A `null` result is none.
        let result = end.result.filter(|r| !r.is_null());
        self.summary = result
            .as_ref()
            .and_then(result_summary)
            .or_else(|| self.reason.clone());
        self.result = result;
    }

    /// How long it ran, in seconds, once it ended.
    /// Only the unit tests read it.
    #[cfg(test)]
    pub(crate) fn duration_s(&self) -> Option<f64> {
        self.ended_at.map(|end| (end - self.started_at).max(0.0))
    }

    /// The text a run is found by in semantic search: its prompt and what it produced.
    pub fn embedding_text(&self) -> String {
        match &self.summary {
            Some(summary) => format!("{}\n{summary}", self.prompt),
            None => self.prompt.clone(),
        }
    }

    fn note_model(&mut self, key: Option<String>, model: Option<String>) {
        if let Some(key) = key
            && !self.model_keys.contains(&key)
        {
            self.model_keys.push(key);
        }
        if let Some(model) = model
            && !self.models.contains(&model)
        {
            self.models.push(model);
        }
    }
}

/// What one event adds to a run's summary, taken from the event: a writer that folds
/// summaries later keeps this rather than the whole event (a `run_start`'s sandbox policy
/// alone is 3 KiB; issue #45).
#[derive(Debug, Clone)]
pub struct SummaryFold {
    ts: f64,
    change: Change,
}

#[derive(Debug, Clone)]
enum Change {
    // Boxed: the largest, and each once a run.
    Start(Box<StartFields>),
    Specialists(Vec<String>),
    Model(MemberFields),
    ToolCall,
    ToolError,
    End(Box<EndFields>),
    InputRequired(String),
    Resumed,
    Nothing,
}

impl SummaryFold {
    /// What `event` adds to its run's summary.
    pub fn of(event: &RunEvent) -> Self {
        use EventPayload as P;
        let change = match &event.payload {
            P::RunStart(start) => Change::Start(Box::new(StartFields {
                prompt: Some(start.prompt.clone()),
                parent_run_id: start.parent_run_id.clone(),
                origin: Some(start.origin.clone()),
                model_key: Some(start.model_key.clone()),
                model: Some(start.model.clone()),
                context_id: start.context_id.clone(),
            })),
            P::Recruitment(recruitment) => Change::Specialists(recruitment.specialist_ids.clone()),
            P::MemberStart(member) => Change::Model(MemberFields {
                model_key: Some(member.model_key.clone()),
                model: Some(member.model.clone()),
            }),
            P::ToolCall(_) => Change::ToolCall,
            P::ToolError(_) => Change::ToolError,
            P::RunComplete(end) | P::RunFailed(end) => Change::End(Box::new(EndFields {
                status: Some(end.status),
                reason: end.reason.clone(),
                steps: Some(end.steps),
                usage: Some(end.usage),
                result: end.result.clone(),
            })),
            P::RunAborted(aborted) => Change::End(Box::new(EndFields {
                status: Some(aborted.status),
                reason: Some(aborted.reason.clone()),
                ..EndFields::default()
            })),
            P::InputRequired(asked) => Change::InputRequired(asked.question.clone()),
            P::RunResumed(_) => Change::Resumed,
            P::Unreadable { kind, payload, .. } => unreadable(*kind, payload),
            P::Workspace(_)
            | P::TaskForceParallel(_)
            | P::MemberEnd(_)
            | P::McpServer(_)
            | P::McpMessage(_)
            | P::McpRequest(_)
            | P::LlmRequest(_)
            | P::RoutingRequest(_)
            | P::LlmResponse(_)
            | P::RoutingResponse(_)
            | P::CorrectiveReprompt(_)
            | P::ToolCallRepaired(_)
            | P::ContextCompacted(_)
            | P::CloudFallback(_)
            | P::CriticReview(_)
            | P::RepairRound(_)
            | P::ToolResult(_)
            | P::SecurityEvent(_)
            | P::LoopDetected(_)
            | P::InputAnswered(_)
            | P::UserMessage(_)
            | P::HookRun(_)
            | P::Checkpoint(_)
            | P::Unknown { .. } => Change::Nothing,
        };
        Self {
            ts: event.ts,
            change,
        }
    }
}

/// A payload of `kind` that does not fit its struct, summarised as far as it goes.
fn unreadable(kind: EventKind, payload: &Value) -> Change {
    match kind {
        EventKind::RunStart => Change::Start(Box::new(fields(payload))),
        EventKind::Recruitment => {
            let recruitment: RecruitmentFields = fields(payload);
            Change::Specialists(recruitment.specialist_ids.unwrap_or_default())
        }
        EventKind::MemberStart => Change::Model(fields(payload)),
        EventKind::ToolCall => Change::ToolCall,
        EventKind::ToolError => Change::ToolError,
        EventKind::RunComplete | EventKind::RunFailed => {
            let mut end: EndFields = fields(payload);
            end.status = end.status.or(Some(if kind == EventKind::RunComplete {
                RunStatus::Completed
            } else {
                RunStatus::Failed
            }));
            Change::End(Box::new(end))
        }
        // The other kinds say nothing a summary shows.
        _ => Change::Nothing,
    }
}

// The fields a summary needs, named and typed as in the `runlog` structs (`RunStart`,
// `Recruitment`, `MemberStart`, `RunEnd`/`RunAborted`): taken from the struct, or for a payload
// that does not fit it each read on its own: a field that is missing or does not fit is
// `None` and the others still count, so a hand-edited or partial runlog is summarised as far
// as it goes.

#[derive(Debug, Clone, Default, Deserialize)]
struct StartFields {
    #[serde(default, deserialize_with = "lenient")]
    prompt: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    parent_run_id: Option<RunId>,
    #[serde(default, deserialize_with = "lenient")]
    origin: Option<crate::runlog::RunOrigin>,
    #[serde(default, deserialize_with = "lenient")]
    model_key: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    model: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    context_id: Option<String>,
}

#[derive(Default, Deserialize)]
struct RecruitmentFields {
    #[serde(default, deserialize_with = "lenient")]
    specialist_ids: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct MemberFields {
    #[serde(default, deserialize_with = "lenient")]
    model_key: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    model: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct EndFields {
    #[serde(default, deserialize_with = "lenient")]
    status: Option<RunStatus>,
    #[serde(default, deserialize_with = "lenient")]
    reason: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    steps: Option<u32>,
    #[serde(default, deserialize_with = "lenient")]
    usage: Option<Usage>,
    #[serde(default, deserialize_with = "lenient")]
    result: Option<Value>,
}

/// A payload that does not fit its struct as `T`, field by field; one that is not an object
/// gives `T::default()`.
fn fields<T: DeserializeOwned + Default>(payload: &Value) -> T {
    T::deserialize(payload).unwrap_or_default()
}

/// One field, or `None` when it does not fit its type.
fn lenient<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    let value = Value::deserialize(d)?;
    Ok(T::deserialize(&value).ok())
}

/// A finish payload's one-line summary, the one rule for the run's `summary` and a merged
/// member's line: `summary`, else `executive_summary` (research's), else its first string.
pub fn result_summary(result: &Value) -> Option<String> {
    let object = result.as_object()?;
    ["summary", "executive_summary"]
        .iter()
        .find_map(|k| object.get(*k).and_then(Value::as_str))
        .or_else(|| object.values().find_map(Value::as_str))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(seq: u64, kind: EventKind, payload: Value) -> RunEvent {
        RunEvent::from_wire(seq, seq as f64, kind.as_str(), None, payload)
    }

    fn id(text: &str) -> RunId {
        RunId::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_run_is_summarised_from_its_typed_payloads() {
        let events = [
            event(
                0,
                EventKind::RunStart,
                json!({"run_id": "r", "prompt": "p", "model_key": "k", "model": "m",
                       "model_reason": null, "max_steps": 3, "network_allowed": false,
                       "workspace": "/w", "sandbox": null, "parent_run_id": "q", "depth": 1}),
            ),
            event(
                1,
                EventKind::Recruitment,
                json!({"specialist_id": "a", "specialist_ids": ["a", "b"],
                       "required_capabilities": [], "routing_method": "explicit", "reason": "r",
                       "is_task_force": true, "task_force_mode": "sequential"}),
            ),
            event(
                2,
                EventKind::MemberStart,
                json!({"specialist_id": "b", "pack_index": 1, "tools": [], "tool_loading": "lazy",
                       "model_key": "k2", "model": "m", "handoff_from": "a"}),
            ),
            event(3, EventKind::ToolCall, json!({})),
            event(4, EventKind::ToolError, json!({})),
            event(
                5,
                EventKind::RunComplete,
                json!({"run_id": "r", "status": "partial", "specialist_ids": ["a", "b"],
                       "task_force_mode": "sequential", "steps": 4,
                       "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
                       "reason": "`b` failed", "result": {"n": 1, "summary": "half"}}),
            ),
        ];
        let s = RunSummary::from_events(id("r"), &events);
        assert_eq!(s.prompt, "p");
        assert_eq!(s.parent_id, Some(id("q")));
        // Written before `origin` existed: a child by its parent.
        assert_eq!(s.origin, crate::runlog::RunOrigin::Child);
        assert_eq!(s.specialist_ids, ["a", "b"]);
        assert_eq!(s.model_keys, ["k", "k2"]);
        assert_eq!(s.models, ["m"]);
        assert_eq!((s.tool_calls, s.tool_errors, s.events), (1, 1, 6));
        assert_eq!(s.status, RunStatus::Partial);
        assert_eq!(s.steps, 4);
        assert_eq!(s.usage.total_tokens, 3);
        assert_eq!(s.summary.as_deref(), Some("half"));
        assert_eq!(s.ended_at, Some(5.0));
        assert_eq!(s.duration_s(), Some(5.0));
    }

    #[test]
    fn payloads_that_do_not_fit_are_skipped_without_losing_the_end() {
        let events = [
            event(0, EventKind::RunStart, json!({"prompt": 3})),
            event(1, EventKind::Recruitment, json!("not an object")),
            event(2, EventKind::RunFailed, json!({"status": "exploded"})),
        ];
        let s = RunSummary::from_events(id("r"), &events);
        assert_eq!(s.prompt, "");
        assert!(s.specialist_ids.is_empty());
        assert_eq!(s.status, RunStatus::Failed);
        assert_eq!(s.ended_at, Some(2.0));
        assert_eq!(s.summary, None);
    }

    /// One rule for a payload's line (it was written twice, and the two disagreed on a
    /// payload with `executive_summary` and an earlier string key).
    #[test]
    fn issue_28_one_summary_rule() {
        let line = |v: Value| result_summary(&v);
        assert_eq!(
            line(json!({"answer": "a", "summary": "s"})),
            Some("s".into())
        );
        assert_eq!(
            line(json!({"answer": "a", "executive_summary": "e"})),
            Some("e".into())
        );
        assert_eq!(line(json!({"n": 1, "title": "t"})), Some("t".into()));
        assert_eq!(line(json!({"n": 1})), None);
        assert_eq!(line(json!("text")), None);
    }
}
