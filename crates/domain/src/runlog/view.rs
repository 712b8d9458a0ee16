//! An event's payload as one value to `match` on: [`EventPayload`], from [`RunEvent::typed`].
//!
//! The envelope keeps its payload as JSON (`RunEvent::payload`): the recorder adds
//! `pack_index` to members' payloads, and a runlog read back keeps fields this version does
//! not know, so storing the structs would change lines. Consumers decode once here instead
//! of reading keys; the `match` has no wildcard, so a new kind fails to compile in every sink
//! until it is handled there.

use serde_json::Value;

use super::payloads::{
    Checkpoint, CloudFallback, ContextCompacted, CorrectiveReprompt, CriticReview, LlmRequest,
    LlmResponse, LoopDetected, McpMessage, McpRequest, McpServer, PackEnd, PackStart, Recruitment,
    RepairRound, RoutingRequest, RoutingResponse, RunAborted, RunEnd, RunResumed, RunStart,
    SecurityEvent, TaskForceParallel, ToolCall, ToolCallRepaired, ToolError, ToolResult,
    WorkspaceOpened,
};
use crate::{DomainError, EventKind, RunEvent};

/// The payload of one event as its struct: one variant per payload shape, each naming the
/// kind it is recorded as (two shapes for `llm_request`, `llm_response` and `run_failed`).
#[derive(Debug, Clone, PartialEq)]
pub enum EventPayload {
    /// `run_start`.
    RunStart(RunStart),
    /// `recruitment`.
    Recruitment(Recruitment),
    /// `task_force_parallel`.
    TaskForceParallel(TaskForceParallel),
    /// `pack_start`.
    PackStart(PackStart),
    /// `pack_end`.
    PackEnd(PackEnd),
    /// `mcp_server`.
    McpServer(McpServer),
    /// `mcp_message`.
    McpMessage(McpMessage),
    /// `mcp_request`.
    McpRequest(McpRequest),
    /// `llm_request` of a specialist's loop.
    LlmRequest(LlmRequest),
    /// `llm_request` of the routing call.
    RoutingRequest(RoutingRequest),
    /// `llm_response` of a specialist's loop.
    LlmResponse(LlmResponse),
    /// `llm_response` of the routing call.
    RoutingResponse(RoutingResponse),
    /// `corrective_reprompt`.
    CorrectiveReprompt(CorrectiveReprompt),
    /// `tool_call_repaired`.
    ToolCallRepaired(ToolCallRepaired),
    /// `context_compacted`.
    ContextCompacted(ContextCompacted),
    /// `cloud_fallback`.
    CloudFallback(CloudFallback),
    /// `critic_review`.
    CriticReview(CriticReview),
    /// `repair_round`.
    RepairRound(RepairRound),
    /// `tool_call`.
    ToolCall(ToolCall),
    /// `tool_result`.
    ToolResult(ToolResult),
    /// `tool_error`.
    ToolError(ToolError),
    /// `security_event`.
    SecurityEvent(SecurityEvent),
    /// `loop_detected`.
    LoopDetected(LoopDetected),
    /// `run_resumed`.
    RunResumed(RunResumed),
    /// `workspace`.
    Workspace(WorkspaceOpened),
    /// `checkpoint`.
    Checkpoint(Checkpoint),
    /// `run_complete`.
    RunComplete(RunEnd),
    /// `run_failed` written by the run itself.
    RunFailed(RunEnd),
    /// `run_failed` written in place of a run that panicked ([`RunAborted`]).
    RunAborted(RunAborted),
    /// A kind written by a newer fabric: its payload as it was.
    Unknown(Value),
}

impl EventPayload {
    /// The kind this payload is recorded as.
    pub fn kind(&self) -> EventKind {
        match self {
            Self::RunStart(_) => EventKind::RunStart,
            Self::Recruitment(_) => EventKind::Recruitment,
            Self::TaskForceParallel(_) => EventKind::TaskForceParallel,
            Self::PackStart(_) => EventKind::PackStart,
            Self::PackEnd(_) => EventKind::PackEnd,
            Self::McpServer(_) => EventKind::McpServer,
            Self::McpMessage(_) => EventKind::McpMessage,
            Self::McpRequest(_) => EventKind::McpRequest,
            Self::LlmRequest(_) | Self::RoutingRequest(_) => EventKind::LlmRequest,
            Self::LlmResponse(_) | Self::RoutingResponse(_) => EventKind::LlmResponse,
            Self::CorrectiveReprompt(_) => EventKind::CorrectiveReprompt,
            Self::ToolCallRepaired(_) => EventKind::ToolCallRepaired,
            Self::ContextCompacted(_) => EventKind::ContextCompacted,
            Self::CloudFallback(_) => EventKind::CloudFallback,
            Self::CriticReview(_) => EventKind::CriticReview,
            Self::RepairRound(_) => EventKind::RepairRound,
            Self::ToolCall(_) => EventKind::ToolCall,
            Self::ToolResult(_) => EventKind::ToolResult,
            Self::ToolError(_) => EventKind::ToolError,
            Self::SecurityEvent(_) => EventKind::SecurityEvent,
            Self::LoopDetected(_) => EventKind::LoopDetected,
            Self::RunResumed(_) => EventKind::RunResumed,
            Self::Workspace(_) => EventKind::Workspace,
            Self::Checkpoint(_) => EventKind::Checkpoint,
            Self::RunComplete(_) => EventKind::RunComplete,
            Self::RunFailed(_) | Self::RunAborted(_) => EventKind::RunFailed,
            Self::Unknown(_) => EventKind::Unknown,
        }
    }

    /// The payload as the runlog writes it (without the `pack_index` the recorder adds).
    ///
    /// Fails only for what JSON cannot hold, e.g. a workspace path that is not UTF-8.
    pub fn to_json(&self) -> Result<Value, DomainError> {
        use super::Payload as _;
        match self {
            Self::RunStart(p) => p.to_json(),
            Self::Recruitment(p) => p.to_json(),
            Self::TaskForceParallel(p) => p.to_json(),
            Self::PackStart(p) => p.to_json(),
            Self::PackEnd(p) => p.to_json(),
            Self::McpServer(p) => p.to_json(),
            Self::McpMessage(p) => p.to_json(),
            Self::McpRequest(p) => p.to_json(),
            Self::LlmRequest(p) => p.to_json(),
            Self::RoutingRequest(p) => p.to_json(),
            Self::LlmResponse(p) => p.to_json(),
            Self::RoutingResponse(p) => p.to_json(),
            Self::CorrectiveReprompt(p) => p.to_json(),
            Self::ToolCallRepaired(p) => p.to_json(),
            Self::ContextCompacted(p) => p.to_json(),
            Self::CloudFallback(p) => p.to_json(),
            Self::CriticReview(p) => p.to_json(),
            Self::RepairRound(p) => p.to_json(),
            Self::ToolCall(p) => p.to_json(),
            Self::ToolResult(p) => p.to_json(),
            Self::ToolError(p) => p.to_json(),
            Self::SecurityEvent(p) => p.to_json(),
            Self::LoopDetected(p) => p.to_json(),
            Self::RunResumed(p) => p.to_json(),
            Self::Workspace(p) => p.to_json(),
            Self::Checkpoint(p) => p.to_json(),
            Self::RunComplete(p) | Self::RunFailed(p) => p.to_json(),
            Self::RunAborted(p) => p.to_json(),
            Self::Unknown(p) => Ok(p.clone()),
        }
    }
}

impl RunEvent {
    /// The payload as its struct, decoded once for a sink to `match` on.
    ///
    /// An `Err` when the payload does not fit its kind's struct (a runlog edited by hand, or
    /// a field whose meaning changed); readers skip the event, as with
    /// [`RunEvent::payload_as`].
    pub fn typed(&self) -> Result<EventPayload, DomainError> {
        use EventPayload as P;
        // The routing call's request and answer are the only ones that name a purpose.
        let routing = self.payload.get("purpose").is_some();
        Ok(match self.kind {
            EventKind::RunStart => P::RunStart(self.payload_as()?),
            EventKind::Recruitment => P::Recruitment(self.payload_as()?),
            EventKind::TaskForceParallel => P::TaskForceParallel(self.payload_as()?),
            EventKind::PackStart => P::PackStart(self.payload_as()?),
            EventKind::PackEnd => P::PackEnd(self.payload_as()?),
            EventKind::McpServer => P::McpServer(self.payload_as()?),
            EventKind::McpMessage => P::McpMessage(self.payload_as()?),
            EventKind::McpRequest => P::McpRequest(self.payload_as()?),
            EventKind::LlmRequest if routing => P::RoutingRequest(self.payload_as()?),
            EventKind::LlmRequest => P::LlmRequest(self.payload_as()?),
            EventKind::LlmResponse if routing => P::RoutingResponse(self.payload_as()?),
            EventKind::LlmResponse => P::LlmResponse(self.payload_as()?),
            EventKind::CorrectiveReprompt => P::CorrectiveReprompt(self.payload_as()?),
            EventKind::ToolCallRepaired => P::ToolCallRepaired(self.payload_as()?),
            EventKind::ContextCompacted => P::ContextCompacted(self.payload_as()?),
            EventKind::CloudFallback => P::CloudFallback(self.payload_as()?),
            EventKind::CriticReview => P::CriticReview(self.payload_as()?),
            EventKind::RepairRound => P::RepairRound(self.payload_as()?),
            EventKind::ToolCall => P::ToolCall(self.payload_as()?),
            EventKind::ToolResult => P::ToolResult(self.payload_as()?),
            EventKind::ToolError => P::ToolError(self.payload_as()?),
            EventKind::SecurityEvent => P::SecurityEvent(self.payload_as()?),
            EventKind::LoopDetected => P::LoopDetected(self.payload_as()?),
            EventKind::RunResumed => P::RunResumed(self.payload_as()?),
            EventKind::Workspace => P::Workspace(self.payload_as()?),
            EventKind::Checkpoint => P::Checkpoint(self.payload_as()?),
            EventKind::RunComplete => P::RunComplete(self.payload_as()?),
            // A run's own end names its specialists; the host's stand-in for a panicked
            // run does not, so it is the fallback (and the first error is the one shown).
            EventKind::RunFailed => match self.payload_as() {
                Ok(end) => P::RunFailed(end),
                Err(e) => P::RunAborted(self.payload_as().map_err(|_| e)?),
            },
            EventKind::Unknown => P::Unknown(self.payload.clone()),
        })
    }
}
