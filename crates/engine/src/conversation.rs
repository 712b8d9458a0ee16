//! A conversation carried from one run into the next (`fabric run --continue` / `--fork`,
//! issue #42).
//!
//! A run that continues an earlier one starts from the earlier member's conversation as its
//! model last saw it, rebuilt from the earlier runlog the way a resumed run replays its own
//! steps ([`crate::history`]): the task (and a task-force member's hand-over), then per
//! step what was said to the run before it (steering, as user messages), and, answered, the
//! assistant message with its tool calls and one `tool` message per call,
//! the text the model was given (a tool's result, or `{"error": …}`, with the repetition
//! breaker's note where it added one). The `finish_task` call that ended the earlier run gets
//! its accepted payload as its result, so every call has its answer. Not rebuilt: the
//! corrective message after a plain-text reply (the reply is kept), images a tool returned
//! (never stored, ADR-087), and compactions: the whole conversation is inherited and the
//! loop compacts it as usual when it does not fit the window (ADR-105).

use fabric_domain::runlog::{self, EventPayload};
use fabric_domain::{FINISH_TOOL, Message, RunEvent};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

use crate::history::{MemberHistory, RecordedOutcome, RunHistory};

/// What a continued run's member inherits: the earlier conversation (after its system
/// prompt) and the link `run_start.continues` records.
#[derive(Debug, Clone, PartialEq)]
pub struct Inherited {
    /// The messages after the system prompt, before the new prompt.
    pub messages: Vec<Message>,
    /// The link recorded in `run_start`.
    pub link: runlog::Continues,
    /// Why the specialist, when the continuation chose it (the request named none): the
    /// recruitment's reason.
    pub chosen: Option<String>,
}

impl Inherited {
    /// The inherited `messages` from `run_id`'s member `specialist_id`, with their digest.
    pub fn new(
        messages: Vec<Message>,
        run_id: fabric_domain::RunId,
        mode: runlog::ContinueMode,
        specialist_id: String,
    ) -> Self {
        let link = runlog::Continues {
            run_id,
            mode,
            specialist_id,
            digest: digest(&messages),
            messages: messages.len(),
        };
        Self {
            messages,
            link,
            chosen: None,
        }
    }
}

/// The SHA-256 (hex) of `messages` as JSON: what `run_start.continues.digest` records.
pub fn digest(messages: &[Message]) -> String {
    let json = serde_json::to_vec(messages).unwrap_or_default();
    sha256_hex(&json)
}

/// The SHA-256 of `bytes` in lowercase hex, as the runlog records digests.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The text a call that was never settled is answered with, so every call has a result.
const NOT_RUN: &str = "this call was not run: the run ended before it";

/// Member `index`'s part of a run's conversation: what it was told (the run's prompt, and a
/// sequential member's hand-over from the member before it), then its answered steps.
/// `events` are the run's, for what its history does not keep (the repetition breaker's
/// notes). A run that itself continued another inherits that one first (the caller).
pub fn member_messages(history: &RunHistory, events: &[RunEvent], index: usize) -> Vec<Message> {
    let mut messages = Vec::new();
    if let Some(start) = &history.start {
        messages.push(Message::user(start.prompt.clone()));
    }
    if let Some(handoff) = handoff_of(history, index) {
        messages.push(Message::user(handoff));
    }
    let notes = nudges(events, index);
    if let Some(member) = history.members.get(index) {
        steps_into(&mut messages, member, &notes);
    }
    messages
}

/// The hand-over message a sequential member `index` was given: the previous member's id and
/// finish payload, as recorded.
fn handoff_of(history: &RunHistory, index: usize) -> Option<String> {
    if index == 0 || history.mode() != runlog::TaskForceShape::Sequential {
        return None;
    }
    let ids = history.specialist_ids();
    let previous = ids.get(index - 1)?;
    let payload = history.members.get(index - 1)?.ended.as_ref()?;
    Some(crate::execute::handoff_message(previous, &payload.payload))
}

/// The repetition breaker's notes the model was given after a call (`loop_detected` with
/// action `nudged`), by call id, for member `index`.
fn nudges(events: &[RunEvent], index: usize) -> HashMap<String, String> {
    events
        .iter()
        .filter(|e| e.member.unwrap_or(0) as usize == index && e.step.is_some())
        .filter_map(|e| match &e.payload {
            EventPayload::LoopDetected(l) if l.action == "nudged" => {
                Some((l.call_id.clone(), l.message.clone()))
            }
            _ => None,
        })
        .collect()
}

/// Each step: what was said to the run before it (steering, as the model was given it),
/// then, answered, the assistant's message and one `tool` message per call.
fn steps_into(
    messages: &mut Vec<Message>,
    member: &MemberHistory,
    notes: &HashMap<String, String>,
) {
    for step in &member.steps {
        messages.extend(step.said.iter().cloned().map(Message::user));
        let Some(response) = &step.response else {
            continue;
        };
        let calls = response.tool_calls.clone();
        messages.push(Message::assistant(response.content.clone(), calls.clone()));
        for call in &calls {
            let text = match step.outcomes.get(&call.id) {
                Some(RecordedOutcome::Result(result)) => rendered(result),
                Some(RecordedOutcome::Error(message)) => json!({"error": message}).to_string(),
                None => json!({"error": NOT_RUN}).to_string(),
            };
            let text = match notes.get(&call.id) {
                Some(note) if call.name != FINISH_TOOL => format!("{text}\n\n{note}"),
                _ => text,
            };
            messages.push(Message::tool_result(&call.id, text));
        }
    }
}

/// A result as the model read it: strings as they are, anything else (a `finish_task`
/// payload) as JSON.
fn rendered(result: &Value) -> String {
    match result {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Which member of an ended run a continuation goes on with: the only one; the one whose
/// specialist is `asked` (`--pack`); for a sequential task force, the last member that
/// worked (whose finish ended the run). `None` for a parallel task force without `asked`
/// naming one of its members: their conversations are separate, and none is the run's.
pub fn continued_member(history: &RunHistory, asked: Option<&str>) -> Option<usize> {
    let ids = history.specialist_ids();
    if ids.len() <= 1 {
        return Some(0);
    }
    if let Some(i) = asked.and_then(|a| ids.iter().position(|id| id == a)) {
        return Some(i);
    }
    match history.mode() {
        runlog::TaskForceShape::Sequential => history
            .members
            .iter()
            .rposition(|m| m.started && !m.steps.is_empty())
            .or(Some(0)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_domain::{EventKind, RunId};

    fn event(seq: u64, kind: EventKind, step: Option<u32>, payload: Value) -> RunEvent {
        RunEvent::from_wire(seq, seq as f64, kind.as_str(), step, payload)
    }

    fn run_start() -> RunEvent {
        event(
            0,
            EventKind::RunStart,
            None,
            json!({"run_id": "r", "prompt": "do it", "model_key": "k", "model": "m", "model_reason": null, "max_steps": 5, "network_allowed": false, "workspace": "/w", "parent_run_id": null}),
        )
    }

    /// A run's member rebuilt as its loop had it: the task, the answer, a result with the
    /// repetition breaker's note, an error, a call never settled, and the accepted finish.
    #[test]
    fn issue_42_a_member_conversation_is_rebuilt_from_its_runlog() {
        let call = |id: &str, name: &str| json!({"call_id": id, "name": name, "arguments": "{}"});
        let events = vec![
            run_start(),
            event(
                1,
                EventKind::LlmRequest,
                Some(0),
                json!({"model": "m", "message_count": 2, "tool_count": 1}),
            ),
            event(
                2,
                EventKind::LlmResponse,
                Some(0),
                json!({"content": "looking", "tool_calls": [call("a", "list_files"), call("b", "read_file"), call("c", "shell")], "usage": null, "latency_ms": 1.0, "finish_reason": null}),
            ),
            event(
                3,
                EventKind::ToolResult,
                Some(0),
                json!({"tool": "list_files", "call_id": "a", "result": "x.txt"}),
            ),
            event(
                4,
                EventKind::LoopDetected,
                Some(0),
                json!({"tool": "list_files", "call_id": "a", "args": {}, "repeats": 3, "action": "nudged", "message": "try another tool"}),
            ),
            event(
                5,
                EventKind::ToolError,
                Some(0),
                json!({"tool": "read_file", "call_id": "b", "error_type": "failed", "error_message": "no such file"}),
            ),
            event(
                6,
                EventKind::LlmRequest,
                Some(1),
                json!({"model": "m", "message_count": 6, "tool_count": 1}),
            ),
            event(
                7,
                EventKind::LlmResponse,
                Some(1),
                json!({"content": null, "tool_calls": [call("d", "finish_task")], "usage": null, "latency_ms": 1.0, "finish_reason": null}),
            ),
            event(
                8,
                EventKind::ToolResult,
                Some(1),
                json!({"tool": "finish_task", "call_id": "d", "result": {"summary": "done"}}),
            ),
        ];
        let history = RunHistory::read(RunId::parse("r").expect("id"), &events);
        let messages = member_messages(&history, &events, 0);
        let text = |i: usize| messages[i].content.clone().unwrap_or_default();
        assert_eq!(messages.len(), 7, "{messages:#?}");
        assert_eq!(messages[0], Message::user("do it"));
        assert_eq!(messages[1].tool_calls.len(), 3);
        assert_eq!(text(2), "x.txt\n\ntry another tool");
        assert_eq!(text(3), r#"{"error":"no such file"}"#);
        assert_eq!(text(4), json!({"error": NOT_RUN}).to_string());
        assert_eq!(messages[5].tool_calls[0].name, FINISH_TOOL);
        assert_eq!(text(6), r#"{"summary":"done"}"#);
        assert_eq!(continued_member(&history, None), Some(0));
    }

    /// What a person said to the run (steering) is where its model was given it: before the
    /// step it was heard at.
    #[test]
    fn issue_42_what_was_said_to_the_run_is_part_of_its_conversation() {
        let events = vec![
            run_start(),
            event(
                1,
                EventKind::UserMessage,
                Some(0),
                json!({"text": "and the tests", "by": "chat"}),
            ),
            event(
                2,
                EventKind::LlmRequest,
                Some(0),
                json!({"model": "m", "message_count": 3, "tool_count": 1}),
            ),
            event(
                3,
                EventKind::LlmResponse,
                Some(0),
                json!({"content": null, "tool_calls": [{"call_id": "d", "name": "finish_task", "arguments": "{}"}], "usage": null, "latency_ms": 1.0, "finish_reason": null}),
            ),
            event(
                4,
                EventKind::ToolResult,
                Some(0),
                json!({"tool": "finish_task", "call_id": "d", "result": {"summary": "done"}}),
            ),
        ];
        let history = RunHistory::read(RunId::parse("r").expect("id"), &events);
        let messages = member_messages(&history, &events, 0);
        assert_eq!(messages.len(), 4, "{messages:#?}");
        assert_eq!(messages[1], Message::user("and the tests"));
        assert_eq!(messages[2].tool_calls[0].name, FINISH_TOOL);
    }

    #[test]
    fn issue_42_the_digest_is_the_sha256_of_the_messages_json() {
        let messages = vec![Message::user("hi")];
        // sha256 of `[{"role":"user","content":"hi"}]`
        let d = digest(&messages);
        assert_eq!(d.len(), 64);
        assert_eq!(d, digest(&messages.clone()));
        assert_ne!(d, digest(&[Message::user("ho")]));
    }
}
