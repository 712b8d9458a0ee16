//! What a run's runlog says about it, read back to continue the run after its process
//! stopped (docs/DURABILITY.md).
//!
//! The runlog is the checkpoint: every model answer is recorded before its tools run, and
//! every tool result before the next model call, so the state to continue from (the
//! conversation, the step, the tokens spent, the tools loaded) is a fold over the events.
//! [`RunHistory::read`] does that fold once; each member's loop then replays its recorded
//! steps instead of asking the model again (`engine`), and goes on live from the first step
//! whose answer was not recorded.

use fabric_domain::runlog::{self, EventPayload, TaskForceShape};
use fabric_domain::{FallbackReason, RunEvent, RunId, RunStatus, ToolCall, Usage};
use serde_json::Value;
use std::collections::VecDeque;

use crate::ports::ChatResponse;
pub use crate::recorded::{RecordedOutcome, RecordedStep, StartHooks};

/// A run's recorded past.
#[derive(Debug, Clone)]
pub struct RunHistory {
    /// The run.
    pub run_id: RunId,
    /// Its `run_start`; `None` when the process stopped before writing it.
    pub start: Option<runlog::RunStart>,
    /// Its `recruitment`, when written.
    pub recruitment: Option<runlog::Recruitment>,
    /// Each member's recorded steps, by `pack_index` (a lone specialist is member 0).
    pub members: Vec<MemberHistory>,
    /// How the run ended, if it did.
    pub ended: Option<RunStatus>,
    /// Earlier resumptions.
    pub resumptions: u32,
    /// Whether `task_force_parallel` was written.
    pub parallel_recorded: bool,
    /// The `seq` of the next event.
    pub next_seq: u64,
    /// When the last event was written.
    pub last_ts: f64,
    /// Processes the stopped run left running, killed before it goes on (set by the
    /// service when it continues the run, recorded in `run_resumed`).
    pub reaped: Vec<u32>,
    /// Its versioned workspace as first recorded (`workspace`), if it has one.
    pub workspace: Option<runlog::WorkspaceOpened>,
    /// The last commit a `checkpoint` recorded: what a continued run's files are restored
    /// to (the base when there is none).
    pub last_checkpoint: Option<String>,
}

/// One member's recorded past.
#[derive(Debug, Clone, Default)]
pub struct MemberHistory {
    /// Whether its `pack_start` was written.
    pub started: bool,
    /// The model key and model its `pack_start` recorded: the conversation goes on with the
    /// same model.
    pub model: Option<(String, String)>,
    /// Its steps in order.
    pub steps: VecDeque<RecordedStep>,
    /// How its loop ended, when its `pack_end` was written (task-force members): it is not
    /// run again.
    pub ended: Option<crate::outcome::LoopOutcome>,
    /// Critic reviews recorded (`critic_review`).
    pub critic_rounds: u32,
    /// Whether the repair under way had gone to the cloud model (`critic_rejected`).
    pub repair_on_cloud: bool,
    /// Whether the last review approved the work.
    pub critic_approved: bool,
    /// The calls a person was asked about (`input_required`), by call id: a call in
    /// flight among them waited for the answer, it was not interrupted (issue #42).
    pub asked: std::collections::HashSet<String>,
    /// A person's answers (`input_answered`), by call id: an approval answered before the
    /// stop is not asked again, and one for the run covers later calls as it did.
    pub answers: std::collections::HashMap<String, runlog::InputAnswered>,
    /// The hooks its loop ran at its start (SessionStart, the task's UserPromptSubmit),
    /// whose context a resumed loop gives again (ADR-125).
    pub start_hooks: StartHooks,
}

impl RunHistory {
    /// Folds a run's events (in `seq` order). Events it does not need are skipped, and a
    /// payload that does not fit its kind is skipped too: a resumed run loses at most that
    /// one step's replay and asks the model again.
    pub fn read(run_id: RunId, events: &[RunEvent]) -> Self {
        let mut history = Self {
            run_id,
            start: None,
            recruitment: None,
            members: Vec::new(),
            ended: None,
            resumptions: 0,
            parallel_recorded: false,
            next_seq: events.last().map_or(0, |e| e.seq + 1),
            last_ts: events.last().map_or(0.0, |e| e.ts),
            reaped: Vec::new(),
            workspace: None,
            last_checkpoint: None,
        };
        for event in events {
            history.fold(event);
        }
        history
    }

    fn member(&mut self, event: &RunEvent) -> &mut MemberHistory {
        let index = event.member.unwrap_or(0) as usize;
        if self.members.len() <= index {
            self.members.resize_with(index + 1, MemberHistory::default);
        }
        &mut self.members[index]
    }

    /// Takes one event: what continuing the run needs of it (issue #41: matched on the typed
    /// payload, every kind named). A payload that does not fit its struct is from elsewhere
    /// and is left out, but an end is still an end: a run is never continued past it.
    fn fold(&mut self, event: &RunEvent) {
        // What the history keeps is its own (a resumed run's conversation is rebuilt from it).
        let payload = event.payload.clone();
        match payload {
            EventPayload::Unreadable { kind, error, .. } => {
                tracing::debug!(%error, ?kind, "event left out of the history");
                if kind.is_terminal() {
                    self.ended = Some(RunStatus::Failed);
                }
            }
            EventPayload::RunStart(start) => self.start = Some(start),
            EventPayload::Recruitment(recruitment) => self.recruitment = Some(recruitment),
            EventPayload::TaskForceParallel(_) => self.parallel_recorded = true,
            EventPayload::RunResumed(_) => self.resumptions += 1,
            EventPayload::Workspace(opened) => {
                self.workspace.get_or_insert(opened);
            }
            EventPayload::Checkpoint(checkpoint) => {
                if let Some(commit) = checkpoint.commit {
                    self.last_checkpoint = Some(commit);
                }
            }
            EventPayload::RunComplete(end) | EventPayload::RunFailed(end) => {
                self.ended = Some(end.status);
            }
            EventPayload::RunAborted(aborted) => self.ended = Some(aborted.status),
            EventPayload::MemberStart(start) => {
                let member = self.member(event);
                member.started = true;
                member.model = Some((start.model_key, start.model));
            }
            EventPayload::MemberEnd(end) => {
                self.member(event).ended = Some(crate::outcome::LoopOutcome {
                    status: end.status,
                    payload: end.result.unwrap_or(Value::Null),
                    steps: end.steps,
                    usage: end.usage,
                    reason: end.reason,
                });
            }
            EventPayload::CriticReview(review) => {
                let member = self.member(event);
                member.critic_rounds += 1;
                member.repair_on_cloud = false;
                member.critic_approved = review.approved;
            }
            EventPayload::CloudFallback(fallback) => {
                if fallback.reason == FallbackReason::CriticRejected.as_str() {
                    self.member(event).repair_on_cloud = true;
                }
            }
            // A model call or a compaction of a member's loop has a step (the routing call's
            // do not, and are other variants); without one there is nothing to place it in.
            EventPayload::LlmRequest(_) => {
                self.step_of(event);
            }
            EventPayload::LlmResponse(recorded) => self.answered(event, recorded),
            // Recorded before the step's `llm_request`: it belongs to the next step.
            EventPayload::ContextCompacted(compacted) => self.compacted(event, compacted),
            EventPayload::ToolCallRepaired(repair) => {
                if let Some(last) = self.last_step(event) {
                    last.repaired_tools = Some(repair.tools);
                }
            }
            EventPayload::ToolCall(call) => {
                if let Some(last) = self.last_step(event) {
                    last.started.insert(call.call_id);
                }
            }
            EventPayload::ToolResult(result) => {
                let outcome = RecordedOutcome::Result(result.result);
                self.settled(event, result.call_id, outcome);
            }
            EventPayload::ToolError(error) => {
                let outcome = RecordedOutcome::Error(error.error_message);
                self.settled(event, error.call_id, outcome);
            }
            // What continuing a run does not need: the routing call (it has no step), what
            // MCP servers and the sandbox said, and the loop's own notes.
            EventPayload::InputRequired(_)
            | EventPayload::InputAnswered(_)
            | EventPayload::UserMessage(_) => self.person(event, payload),
            EventPayload::HookRun(run) => self.hook_ran(event, run),
            EventPayload::RoutingRequest(_)
            | EventPayload::RoutingResponse(_)
            | EventPayload::McpServer(_)
            | EventPayload::McpMessage(_)
            | EventPayload::McpRequest(_)
            | EventPayload::CorrectiveReprompt(_)
            | EventPayload::RepairRound(_)
            | EventPayload::SecurityEvent(_)
            | EventPayload::LoopDetected(_)
            | EventPayload::Unknown { .. } => {}
        }
    }

    /// What a person was asked, answered or said (issue #42): the calls that waited, the
    /// answers, and what was said before a step's model call (that step's).
    fn person(&mut self, event: &RunEvent, payload: EventPayload) {
        if let EventPayload::InputRequired(asked) = payload {
            self.member(event).asked.insert(asked.call_id);
        } else if let EventPayload::InputAnswered(answer) = payload {
            let member = self.member(event);
            member.answers.insert(answer.call_id.clone(), answer);
        } else if let EventPayload::UserMessage(message) = payload
            && let Some(step) = self.step_of(event)
        {
            step.said.push(message.text);
        }
    }

    /// A hook's run: one of a loop's start (it has no step) is kept, its context given
    /// again when the run is resumed (ADR-125).
    fn hook_ran(&mut self, event: &RunEvent, run: runlog::HookRun) {
        if event.step.is_none() {
            let resumption = self.resumptions;
            self.member(event).start_hooks.add(resumption, run);
        }
    }

    /// The step of `event`'s member that `event` belongs to, begun if it is a new one;
    /// `None` for an event without a step.
    fn step_of(&mut self, event: &RunEvent) -> Option<&mut RecordedStep> {
        let step = event.step?;
        let member = self.member(event);
        if member.steps.back().is_none_or(|s| s.step != step) {
            member.steps.push_back(RecordedStep::new(step));
        }
        member.steps.back_mut()
    }

    /// A model's answer in its step (an earlier answer of the step was replaced by it).
    fn answered(&mut self, event: &RunEvent, recorded: runlog::LlmResponse) {
        if let Some(last) = self.step_of(event) {
            if let Some(u) = last.response.as_ref().and_then(|r| r.usage) {
                last.replaced_usage.add(u);
            }
            last.response = Some(response_of(recorded));
        }
    }

    /// A compaction, which opens the step it was made for.
    fn compacted(&mut self, event: &RunEvent, compacted: runlog::ContextCompacted) {
        if let Some(last) = self.step_of(event) {
            last.summary = compacted.summary;
            if let Some(u) = compacted.summary_usage {
                last.replaced_usage.add(u);
            }
        }
    }

    /// How call `call_id` of the latest step was settled.
    fn settled(&mut self, event: &RunEvent, call_id: String, outcome: RecordedOutcome) {
        if let Some(last) = self.last_step(event) {
            last.outcomes.insert(call_id, outcome);
        }
    }

    /// The latest step of `event`'s member: the one its calls belong to.
    fn last_step(&mut self, event: &RunEvent) -> Option<&mut RecordedStep> {
        self.member(event).steps.back_mut()
    }

    /// The specialists, in recruitment order.
    pub fn specialist_ids(&self) -> Vec<String> {
        self.recruitment
            .as_ref()
            .map(|r| r.specialist_ids.clone())
            .unwrap_or_default()
    }

    /// The model key every member recorded, when they share one (so a run started with
    /// `--model-key` goes on with it); `None` when they differ or none was recorded.
    pub fn shared_model_key(&self) -> Option<String> {
        let mut keys = self
            .members
            .iter()
            .filter_map(|m| m.model.as_ref().map(|(key, _)| key));
        let first = keys.next()?;
        keys.all(|k| k == first).then(|| first.clone())
    }

    /// How the members worked together.
    pub fn mode(&self) -> TaskForceShape {
        self.recruitment
            .as_ref()
            .map_or(TaskForceShape::Single, |r| r.task_force_mode.clone())
    }

    /// Model calls whose answers were recorded, all members together.
    pub fn answered_steps(&self) -> u32 {
        let answered = self
            .members
            .iter()
            .flat_map(|m| &m.steps)
            .filter(|s| s.response.is_some())
            .count();
        u32::try_from(answered).unwrap_or(u32::MAX)
    }

    /// Tokens of the recorded answers.
    pub fn usage(&self) -> Usage {
        let mut usage = Usage::default();
        for u in self
            .members
            .iter()
            .flat_map(|m| &m.steps)
            .filter_map(|s| s.response.as_ref().and_then(|r| r.usage))
        {
            usage.add(u);
        }
        for step in self.members.iter().flat_map(|m| &m.steps) {
            usage.add(step.replaced_usage);
        }
        usage
    }

    /// The `run_failed` that ends a run that cannot be continued, with status
    /// `interrupted` and `reason`.
    pub fn interrupted_event(&self, reason: &str) -> Result<RunEvent, fabric_domain::DomainError> {
        self.end_event(RunStatus::Interrupted, reason)
    }

    /// The `run_failed` that ends the run with `status` (`interrupted`, or `unanswered` for
    /// a wait that timed out), its totals as recorded.
    pub fn end_event(
        &self,
        status: RunStatus,
        reason: &str,
    ) -> Result<RunEvent, fabric_domain::DomainError> {
        let end = runlog::RunEnd {
            run_id: self.run_id.clone(),
            status,
            specialist_ids: self.specialist_ids(),
            task_force_mode: self.mode(),
            steps: self.answered_steps(),
            usage: self.usage(),
            reason: Some(reason.to_owned()),
            result: None,
            workspace: None,
        };
        Ok(RunEvent {
            seq: self.next_seq,
            ts: crate::unix_now(),
            step: None,
            member: None,
            payload: end.into(),
        })
    }
}

/// The answer as the model gave it: the whole text and arguments where the runlog's fields
/// were capped.
pub fn response_of(recorded: runlog::LlmResponse) -> ChatResponse {
    ChatResponse {
        content: recorded.full_content.or(recorded.content),
        tool_calls: recorded
            .tool_calls
            .into_iter()
            .map(|c| ToolCall {
                id: c.call_id.unwrap_or_default(),
                name: c.name,
                arguments: c.full_arguments.unwrap_or(c.arguments),
            })
            .collect(),
        usage: recorded.usage,
        finish_reason: recorded.finish_reason,
        queued_ms: None,
        prompt_cache: recorded.prompt_cache,
        constrained: recorded.constrained,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_domain::EventKind;
    use serde_json::json;

    fn event(seq: u64, kind: EventKind, step: Option<u32>, payload: Value) -> RunEvent {
        RunEvent::from_wire(seq, seq as f64, kind.as_str(), step, payload)
    }

    #[test]
    fn issue_43_a_loops_start_hooks_are_kept_per_fire_for_a_resumed_run() {
        let hook = |seq: u64, step: Option<u32>, name: &str, message: &str| {
            let run = json!({"event": name, "source": "config", "command": "c",
                "duration_ms": 1, "outcome": "ok", "message": message});
            event(seq, EventKind::HookRun, step, run)
        };
        let events = vec![
            hook(0, None, "SessionStart", "a"),
            hook(1, None, "SessionStart", "b"),
            hook(2, None, "UserPromptSubmit", "task"),
            // A steering message's, and the end's: not the start's.
            hook(3, Some(0), "UserPromptSubmit", "steer"),
            hook(4, None, "SessionEnd", "end"),
            event(
                5,
                EventKind::RunResumed,
                None,
                json!({"last_event_ts": 1.0, "previous_events": 5, "reaped_processes": [], "replayed_steps": 1, "resumption": 1, "run_id": "r"}),
            ),
            hook(6, None, "SessionStart", "c"),
        ];
        let history = RunHistory::read(RunId::parse("r").expect("id"), &events);
        let start = &history.members[0].start_hooks;
        use fabric_domain::hooks::HookEvent;
        assert_eq!(start.contexts(HookEvent::SessionStart), ["a\nb", "c"]);
        assert_eq!(start.contexts(HookEvent::UserPromptSubmit), ["task"]);
    }

    #[test]
    fn folds_steps_calls_and_outcomes_per_member() {
        let events = vec![
            // As the fabric writes it: an event that does not decode is left out.
            event(
                0,
                EventKind::MemberStart,
                None,
                json!({"pack_index": 1, "specialist_id": "s", "tools": [], "tool_loading": "eager", "model_key": "k", "model": "m", "handoff_from": null}),
            ),
            event(
                1,
                EventKind::LlmRequest,
                Some(0),
                json!({"pack_index": 1, "model": "m", "message_count": 2, "tool_count": 1}),
            ),
            event(
                2,
                EventKind::LlmResponse,
                Some(0),
                json!({"pack_index": 1, "content": "cut", "full_content": "whole text", "tool_calls": [{"call_id": "c1", "name": "write_file", "arguments": "{", "full_arguments": "{\"path\":\"a\"}"}, {"call_id": "c2", "name": "read_file", "arguments": "{}"}], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}, "latency_ms": 1.0, "finish_reason": null}),
            ),
            event(
                3,
                EventKind::ToolCall,
                Some(0),
                json!({"pack_index": 1, "tool": "write_file", "call_id": "c1", "args": {}}),
            ),
            event(
                4,
                EventKind::ToolResult,
                Some(0),
                json!({"pack_index": 1, "tool": "write_file", "call_id": "c1", "result": "ok"}),
            ),
            event(
                5,
                EventKind::ToolCall,
                Some(0),
                json!({"pack_index": 1, "tool": "read_file", "call_id": "c2", "args": {}}),
            ),
            event(
                6,
                EventKind::LlmRequest,
                Some(1),
                json!({"pack_index": 1, "model": "m", "message_count": 4, "tool_count": 1}),
            ),
        ];
        let history = RunHistory::read(RunId::parse("r").expect("id"), &events);
        assert_eq!(history.members.len(), 2);
        assert!(!history.members[0].started);
        let member = &history.members[1];
        assert!(member.started);
        assert_eq!(member.steps.len(), 2);
        let first = &member.steps[0];
        let response = first.response.as_ref().expect("answered");
        assert_eq!(response.content.as_deref(), Some("whole text"));
        assert_eq!(response.tool_calls[0].arguments, r#"{"path":"a"}"#);
        assert_eq!(
            first.outcomes.get("c1"),
            Some(&RecordedOutcome::Result(json!("ok")))
        );
        assert!(first.started.contains("c2") && !first.outcomes.contains_key("c2"));
        assert!(member.steps[1].response.is_none());
        assert_eq!(history.answered_steps(), 1);
        assert_eq!(history.usage().total_tokens, 7);
        assert_eq!(history.next_seq, 7);
        assert_eq!(history.ended, None);
    }
}
