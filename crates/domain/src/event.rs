use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The kind of a runlog event. The names are the public runlog contract (docs/RUNLOG.md);
/// new kinds may be added, existing ones never change meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The run started: prompt, model, limits and workspace.
    RunStart,
    /// Which specialist(s) will work on the task, and why.
    Recruitment,
    /// Parallel task force started.
    TaskForceParallel,
    /// One specialist starts its loop.
    PackStart,
    /// A task-force member's loop ended (its status, steps, tokens, result).
    PackEnd,
    /// Before each model call.
    LlmRequest,
    /// After each model call: content, tool calls, usage, latency.
    LlmResponse,
    /// The model answered in plain text and was asked to call a tool.
    CorrectiveReprompt,
    /// Tool calls the server handed back as text were recovered from it.
    ToolCallRepaired,
    /// The conversation was compacted to fit the model's context window.
    ContextCompacted,
    /// A step went to the cloud model because the local one failed in a way it may fix.
    CloudFallback,
    /// The critic reviewed a specialist's staged work (round, verdict, findings).
    CriticReview,
    /// The critic rejected the work; the specialist repairs it for another round.
    RepairRound,
    /// Before a tool runs.
    ToolCall,
    /// A tool's successful result, or an accepted `finish_task`.
    ToolResult,
    /// A tool call that failed: bad arguments, unknown tool, refused or failed execution.
    ToolError,
    /// Something was refused for safety reasons.
    SecurityEvent,
    /// The same call was repeated.
    LoopDetected,
    /// An MCP server started, failed, timed out, stopped or changed its tools.
    McpServer,
    /// An MCP server's log message or a tool call's progress (issue #29).
    McpMessage,
    /// An MCP server's request to the fabric (sampling, elicitation, roots) and its answer.
    McpRequest,
    /// The run's process stopped before its end and another one continues it from its
    /// runlog (docs/DURABILITY.md).
    RunResumed,
    /// The run works in a versioned workspace: its branch and base, and after a resumption
    /// the checkpoint its files were restored to (issue #25).
    Workspace,
    /// The fabric committed the workspace after a tool call that may have changed it.
    Checkpoint,
    /// The run ended with a result.
    RunComplete,
    /// The run ended without one; the payload names the status and the reason.
    RunFailed,
    /// A kind written by a newer fabric; kept readable, never written by this one.
    #[serde(other)]
    Unknown,
}

impl EventKind {
    /// Every kind this version knows (all but [`EventKind::Unknown`]), in the order of
    /// docs/RUNLOG.md, with `loop_detected` before the terminal kinds.
    pub const ALL: [EventKind; 26] = [
        Self::RunStart,
        Self::Workspace,
        Self::Recruitment,
        Self::TaskForceParallel,
        Self::PackStart,
        Self::McpServer,
        Self::LlmRequest,
        Self::LlmResponse,
        Self::CorrectiveReprompt,
        Self::ToolCallRepaired,
        Self::ContextCompacted,
        Self::CloudFallback,
        Self::ToolCall,
        Self::ToolResult,
        Self::ToolError,
        Self::McpMessage,
        Self::McpRequest,
        Self::Checkpoint,
        Self::CriticReview,
        Self::RepairRound,
        Self::PackEnd,
        Self::SecurityEvent,
        Self::LoopDetected,
        Self::RunResumed,
        Self::RunComplete,
        Self::RunFailed,
    ];

    /// The known kind written as `text`, if any.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }

    /// The kind as written in the runlog.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RunStart => "run_start",
            Self::Recruitment => "recruitment",
            Self::TaskForceParallel => "task_force_parallel",
            Self::PackStart => "pack_start",
            Self::PackEnd => "pack_end",
            Self::LlmRequest => "llm_request",
            Self::LlmResponse => "llm_response",
            Self::CorrectiveReprompt => "corrective_reprompt",
            Self::ToolCallRepaired => "tool_call_repaired",
            Self::ContextCompacted => "context_compacted",
            Self::CloudFallback => "cloud_fallback",
            Self::CriticReview => "critic_review",
            Self::RepairRound => "repair_round",
            Self::ToolCall => "tool_call",
            Self::ToolResult => "tool_result",
            Self::ToolError => "tool_error",
            Self::SecurityEvent => "security_event",
            Self::LoopDetected => "loop_detected",
            Self::McpServer => "mcp_server",
            Self::McpMessage => "mcp_message",
            Self::McpRequest => "mcp_request",
            Self::RunResumed => "run_resumed",
            Self::Workspace => "workspace",
            Self::Checkpoint => "checkpoint",
            Self::RunComplete => "run_complete",
            Self::RunFailed => "run_failed",
            Self::Unknown => "unknown",
        }
    }

    /// Whether this event ends a run (exactly one such event closes every runlog).
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::RunComplete | Self::RunFailed)
    }
}

/// One line of a runlog: `{"seq", "ts", "kind", "step", "payload"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEvent {
    /// Position in the run, from 0, with no gaps; streaming clients resume after it.
    pub seq: u64,
    /// Wall-clock time in seconds since the Unix epoch.
    pub ts: f64,
    /// What happened.
    pub kind: EventKind,
    /// The loop step (from 0) the event belongs to, or `null` outside the loop.
    pub step: Option<u32>,
    /// Kind-specific fields, documented in docs/RUNLOG.md.
    pub payload: Value,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn event_line_shape_is_the_public_contract() {
        let event = RunEvent {
            seq: 3,
            ts: 1.5,
            kind: EventKind::ToolCall,
            step: Some(0),
            payload: json!({"tool": "shell"}),
        };
        let line = serde_json::to_value(&event).unwrap_or_default();
        assert_eq!(
            line,
            json!({"seq": 3, "ts": 1.5, "kind": "tool_call", "step": 0, "payload": {"tool": "shell"}})
        );
    }

    #[test]
    fn all_lists_every_known_kind_once_under_its_serde_name() {
        // The match has no wildcard, so a new variant fails to compile until it is sorted
        // into ALL or deliberately left out.
        let listed = |kind: EventKind| match kind {
            EventKind::Unknown => false,
            EventKind::RunStart
            | EventKind::Recruitment
            | EventKind::TaskForceParallel
            | EventKind::PackStart
            | EventKind::LlmRequest
            | EventKind::LlmResponse
            | EventKind::CorrectiveReprompt
            | EventKind::ToolCallRepaired
            | EventKind::ContextCompacted
            | EventKind::CloudFallback
            | EventKind::CriticReview
            | EventKind::RepairRound
            | EventKind::ToolCall
            | EventKind::ToolResult
            | EventKind::ToolError
            | EventKind::SecurityEvent
            | EventKind::LoopDetected
            | EventKind::McpServer
            | EventKind::McpMessage
            | EventKind::McpRequest
            | EventKind::PackEnd
            | EventKind::RunResumed
            | EventKind::Workspace
            | EventKind::Checkpoint
            | EventKind::RunComplete
            | EventKind::RunFailed => true,
        };
        for kind in EventKind::ALL {
            assert!(listed(kind));
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
    fn unknown_kinds_from_newer_versions_still_parse() {
        let event: RunEvent = serde_json::from_value(
            json!({"seq": 0, "ts": 0.0, "kind": "from_the_future", "step": null, "payload": {}}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(event.kind, EventKind::Unknown);
    }
}
