//! The runlog's events: every kind, its payload struct(s) and the envelope, from one table.
//!
//! [`events!`] below is the one list of kinds. Each entry names the kind, its text in the
//! runlog and the payload struct(s) it carries (in `runlog::payloads`); the macro makes
//! [`EventKind`] (with `ALL`, `as_str` and `parse`), [`EventPayload`] (one variant per
//! payload shape, and `kind()`), and decoding a payload of a kind. Adding a kind is one entry
//! here plus its payload struct; every sink `match`es [`EventPayload`] with no wildcard arm,
//! so the compiler then names each sink that must say what it does with it.
//!
//! JSON exists only at the runlog's edge ([`crate::runlog`]'s `wire` module: a line written
//! or read) and at the front ends' wire.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::DomainError;
use crate::runlog::{
    Checkpoint, CloudFallback, ContextCompacted, CorrectiveReprompt, CriticReview, HookRun,
    InputAnswered, InputRequired, LlmRequest, LlmResponse, LoopDetected, McpMessage, McpRequest,
    McpServer, MemberEnd, MemberStart, Payload, Recruitment, RepairRound, RoutingRequest,
    RoutingResponse, RunAborted, RunEnd, RunResumed, RunStart, SecurityEvent, TaskForceParallel,
    ToolCallRepaired, ToolCalled, ToolFailed, ToolResult, UserMessage, WorkspaceOpened,
};

/// Defines the kinds and their payloads from one table (see the module's doc).
///
/// An entry: `Kind = "text" { Variant(PayloadStruct), ... }`, the shapes in the order a
/// payload read back is tried. A shape marked `shared` carries a struct that another kind
/// carries too (`RunEnd`): its [`Payload`] impl is written by hand, choosing the kind.
macro_rules! events {
    ($(
        $(#[doc = $kind_doc:literal])*
        $kind:ident = $text:literal {
            $( $(#[doc = $shape_doc:literal])* $variant:ident($payload:ty) $($shared:ident)? ),+ $(,)?
        }
    ),+ $(,)?) => {
        /// The kind of a runlog event. The names are the public runlog contract
        /// (docs/RUNLOG.md); new kinds may be added, existing ones never change meaning.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum EventKind {
            $( $(#[doc = $kind_doc])* #[serde(rename = $text)] $kind, )+
            /// A kind written by a newer fabric; kept readable, never written by this one.
            #[serde(rename = "unknown", other)]
            Unknown,
        }

        impl EventKind {
            /// Every kind this version knows (all but [`EventKind::Unknown`]), in the order
            /// of docs/RUNLOG.md, with `loop_detected` before the terminal kinds.
            pub const ALL: [EventKind; [$($text),+].len()] = [$(Self::$kind),+];

            /// The kind as written in the runlog.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Self::$kind => $text, )+
                    Self::Unknown => "unknown",
                }
            }
        }

        /// The payload of one event as its struct: one variant per payload shape, each
        /// naming the kind it is recorded as (two shapes for `llm_request`, `llm_response`
        /// and `run_failed`), and what a runlog may hold that this version cannot read.
        #[derive(Debug, Clone, PartialEq)]
        pub enum EventPayload {
            $( $( #[doc = concat!("`", $text, "`.")] $(#[doc = $shape_doc])* $variant($payload), )+ )+
            /// A kind written by a newer fabric: its name and payload as they were, written
            /// back unchanged.
            Unknown {
                /// The kind as written.
                kind: String,
                /// The payload as written.
                payload: Value,
            },
            /// A known kind whose payload does not fit its struct (a runlog edited by hand,
            /// or a field whose meaning changed): kept as it was so the rest of the runlog
            /// still reads; sinks skip it (ADR-096).
            Unreadable {
                /// The kind as written.
                kind: EventKind,
                /// The payload as written.
                payload: Value,
                /// Why it does not fit, per shape tried.
                error: String,
            },
        }

        impl EventPayload {
            /// The kind this payload is recorded as.
            pub fn kind(&self) -> EventKind {
                match self {
                    $( $( Self::$variant(_) => EventKind::$kind, )+ )+
                    Self::Unknown { .. } => EventKind::Unknown,
                    Self::Unreadable { kind, .. } => *kind,
                }
            }

            /// The payload as the runlog writes it (without the `pack_index` the envelope
            /// adds): keys sorted, `null`s and absent fields as each struct says.
            ///
            /// Fails only for what JSON cannot hold, e.g. a workspace path that is not UTF-8.
            pub fn to_json(&self) -> Result<Value, DomainError> {
                match self {
                    $( $( Self::$variant(p) => p.to_json(), )+ )+
                    Self::Unknown { payload, .. } | Self::Unreadable { payload, .. } => {
                        Ok(payload.clone())
                    }
                }
            }

            /// The payload of an event of `kind` (as written) read back: the first shape of
            /// the kind it fits, else [`EventPayload::Unreadable`]; an unknown kind's is kept
            /// as [`EventPayload::Unknown`]. Never fails: the runlog's edge.
            pub(crate) fn decode(kind: &str, payload: Value) -> Self {
                match kind {
                    $( $text => {
                        let mut errors = Vec::new();
                        $(
                            match <$payload>::deserialize(&payload) {
                                Ok(shape) => return Self::$variant(shape),
                                Err(e) => errors.push(format!(
                                    "as {}: {e}", stringify!($variant)
                                )),
                            }
                        )+
                        Self::Unreadable {
                            kind: EventKind::$kind,
                            payload,
                            error: errors.join("; "),
                        }
                    } )+
                    _ => Self::Unknown { kind: kind.to_owned(), payload },
                }
            }
        }

        $( $( events!(@payload $kind $variant ($payload) $($shared)?); )+ )+
    };
    (@payload $kind:ident $variant:ident ($payload:ty)) => {
        impl Payload for $payload {
            fn kind(&self) -> EventKind {
                EventKind::$kind
            }
        }
        impl From<$payload> for EventPayload {
            fn from(payload: $payload) -> Self {
                Self::$variant(payload)
            }
        }
    };
    (@payload $kind:ident $variant:ident ($payload:ty) shared) => {};
}

events! {
    /// The run started: prompt, model, limits and workspace.
    RunStart = "run_start" { RunStart(RunStart) },
    /// The run works in a versioned workspace: its branch and base, and after a resumption
    /// the checkpoint its files were restored to (issue #25).
    Workspace = "workspace" { Workspace(WorkspaceOpened) },
    /// Which specialist(s) will work on the task, and why.
    Recruitment = "recruitment" { Recruitment(Recruitment) },
    /// Parallel task force started.
    TaskForceParallel = "task_force_parallel" { TaskForceParallel(TaskForceParallel) },
    /// One specialist starts its loop.
    MemberStart = "pack_start" { MemberStart(MemberStart) },
    /// An MCP server started, failed, timed out, stopped or changed its tools.
    McpServer = "mcp_server" { McpServer(McpServer) },
    /// Before each model call.
    LlmRequest = "llm_request" {
        /// `llm_request` of the routing call (the only one naming a `purpose`).
        RoutingRequest(RoutingRequest),
        /// `llm_request` of a specialist's loop.
        LlmRequest(LlmRequest),
    },
    /// After each model call: content, tool calls, usage, latency.
    LlmResponse = "llm_response" {
        /// `llm_response` of the routing call (the only one naming a `purpose`).
        RoutingResponse(RoutingResponse),
        /// `llm_response` of a specialist's loop.
        LlmResponse(LlmResponse),
    },
    /// The model answered in plain text and was asked to call a tool.
    CorrectiveReprompt = "corrective_reprompt" { CorrectiveReprompt(CorrectiveReprompt) },
    /// Tool calls the server handed back as text were recovered from it.
    ToolCallRepaired = "tool_call_repaired" { ToolCallRepaired(ToolCallRepaired) },
    /// The conversation was compacted to fit the model's context window.
    ContextCompacted = "context_compacted" { ContextCompacted(ContextCompacted) },
    /// A step went to the cloud model because the local one failed in a way it may fix.
    CloudFallback = "cloud_fallback" { CloudFallback(CloudFallback) },
    /// Before a tool runs.
    ToolCall = "tool_call" { ToolCall(ToolCalled) },
    /// A tool's successful result, or an accepted `finish_task`.
    ToolResult = "tool_result" { ToolResult(ToolResult) },
    /// A tool call that failed: bad arguments, unknown tool, refused or failed execution.
    ToolError = "tool_error" { ToolError(ToolFailed) },
    /// An MCP server's log message or a tool call's progress (issue #29).
    McpMessage = "mcp_message" { McpMessage(McpMessage) },
    /// An MCP server's request to the fabric (sampling, elicitation, roots) and its answer.
    McpRequest = "mcp_request" { McpRequest(McpRequest) },
    /// The fabric committed the workspace after a tool call that may have changed it.
    Checkpoint = "checkpoint" { Checkpoint(Checkpoint) },
    /// The critic reviewed a specialist's staged work (round, verdict, findings).
    CriticReview = "critic_review" { CriticReview(CriticReview) },
    /// The critic rejected the work; the specialist repairs it for another round.
    RepairRound = "repair_round" { RepairRound(RepairRound) },
    /// A task-force member's loop ended (its status, steps, tokens, result).
    MemberEnd = "pack_end" { MemberEnd(MemberEnd) },
    /// Something was refused for safety reasons.
    SecurityEvent = "security_event" { SecurityEvent(SecurityEvent) },
    /// The same call was repeated.
    LoopDetected = "loop_detected" { LoopDetected(LoopDetected) },
    /// The run's process stopped before its end and another one continues it from its
    /// runlog (docs/DURABILITY.md).
    RunResumed = "run_resumed" { RunResumed(RunResumed) },
    /// The run waits for a person: a question or an approval (issue #42).
    InputRequired = "input_required" { InputRequired(InputRequired) },
    /// A person answered the run's question or approval.
    InputAnswered = "input_answered" { InputAnswered(InputAnswered) },
    /// A person said something to the run while it worked (steering).
    UserMessage = "user_message" { UserMessage(UserMessage) },
    /// A lifecycle hook ran (issue #43): its event, command, time, exit code and outcome.
    HookRun = "hook_run" { HookRun(HookRun) },
    /// The run ended with a result.
    RunComplete = "run_complete" { RunComplete(RunEnd) shared },
    /// The run ended without one; the payload names the status and the reason.
    RunFailed = "run_failed" {
        /// `run_failed` written by the run itself.
        RunFailed(RunEnd) shared,
        /// `run_failed` written in place of a run that panicked ([`RunAborted`]).
        RunAborted(RunAborted),
    },
}

impl Payload for RunEnd {
    fn kind(&self) -> EventKind {
        if self.status.has_result() {
            EventKind::RunComplete
        } else {
            EventKind::RunFailed
        }
    }
}

impl From<RunEnd> for EventPayload {
    fn from(end: RunEnd) -> Self {
        if end.status.has_result() {
            Self::RunComplete(end)
        } else {
            Self::RunFailed(end)
        }
    }
}

impl EventKind {
    /// The known kind written as `text`, if any.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }

    /// Whether this event ends a run (exactly one such event closes every runlog).
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::RunComplete | Self::RunFailed)
    }
}

/// One event of a run: the envelope and its typed payload. On the wire (the runlog line, and
/// front ends' JSON) it is `{"seq", "ts", "kind", "step", "payload"}`, with `pack_index`
/// inside the payload object; `runlog`'s `wire` module writes and reads that line.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEvent {
    /// Position in the run, from 0, with no gaps; streaming clients resume after it.
    pub seq: u64,
    /// Wall-clock time in seconds since the Unix epoch.
    pub ts: f64,
    /// The loop step (from 0) the event belongs to, or `null` outside the loop.
    pub step: Option<u32>,
    /// The task-force member the event belongs to (its position in `specialist_ids`), if it
    /// is a member's; written as the payload's `pack_index`.
    pub member: Option<u32>,
    /// What happened, as its struct.
    pub payload: EventPayload,
}

impl RunEvent {
    /// What happened.
    pub fn kind(&self) -> EventKind {
        self.payload.kind()
    }

    /// The kind as written in the runlog (an unknown kind's own name).
    pub(crate) fn kind_text(&self) -> &str {
        match &self.payload {
            EventPayload::Unknown { kind, .. } => kind,
            other => other.kind().as_str(),
        }
    }

    /// The full end of a run (`run_complete`, or a `run_failed` the run wrote itself), if
    /// this is one.
    pub fn run_end(&self) -> Option<&RunEnd> {
        match &self.payload {
            EventPayload::RunComplete(end) | EventPayload::RunFailed(end) => Some(end),
            _ => None,
        }
    }

    /// Why a terminal event says the run ended so, if it says.
    pub fn end_reason(&self) -> Option<&str> {
        match &self.payload {
            EventPayload::RunComplete(end) | EventPayload::RunFailed(end) => end.reason.as_deref(),
            EventPayload::RunAborted(aborted) => Some(&aborted.reason),
            _ => None,
        }
    }

    /// The status a terminal event records; `None` for other events and for a terminal
    /// payload that names none we know.
    pub fn terminal_status(&self) -> Option<crate::RunStatus> {
        match &self.payload {
            EventPayload::RunComplete(end) | EventPayload::RunFailed(end) => Some(end.status),
            EventPayload::RunAborted(aborted) => Some(aborted.status),
            // Only `status` is read, so the status is known even when the rest of the
            // payload does not fit.
            EventPayload::Unreadable { kind, payload, .. } if kind.is_terminal() => {
                #[derive(Deserialize)]
                struct Status {
                    status: crate::RunStatus,
                }
                Status::deserialize(payload).ok().map(|s| s.status)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn event_line_shape_is_the_public_contract() {
        let event = RunEvent::from_wire(
            3,
            1.5,
            "tool_call",
            Some(0),
            json!({"tool": "shell", "call_id": "", "args": {}}),
        );
        let line = serde_json::to_value(&event).unwrap_or_default();
        assert_eq!(
            line,
            json!({"seq": 3, "ts": 1.5, "kind": "tool_call", "step": 0,
                   "payload": {"tool": "shell", "call_id": "", "args": {}}})
        );
    }

    #[test]
    fn all_lists_every_known_kind_once_under_its_serde_name() {
        for kind in EventKind::ALL {
            assert_ne!(kind, EventKind::Unknown);
            assert_eq!(EventKind::ALL.iter().filter(|k| **k == kind).count(), 1);
            assert_eq!(
                serde_json::to_value(kind).unwrap_or_default(),
                kind.as_str()
            );
            assert_eq!(EventKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(EventKind::parse("unknown"), None);
    }

    #[test]
    fn unknown_kinds_from_newer_versions_still_parse_and_keep_their_name() {
        let line = r#"{"seq":0,"ts":0.0,"kind":"from_the_future","step":null,"payload":{"a":1}}"#;
        let event: RunEvent = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(event.kind(), EventKind::Unknown);
        assert_eq!(event.kind_text(), "from_the_future");
        assert_eq!(serde_json::to_string(&event).unwrap_or_default(), line);
    }
}
