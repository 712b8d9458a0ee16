//! The runlog: what each line's payload holds, as types.
//!
//! docs/RUNLOG.md is the contract; this module is its code. Every event kind has a struct in
//! [`payloads`](self) (two for `llm_request` and `llm_response`: a specialist's call and the
//! routing call), the closed sets of words are enums, and [`Payload`] ties each struct to its
//! [`EventKind`]: the engine records a struct, readers get one back with
//! [`RunEvent::payload_as`]. The lines themselves do not change: a payload is still written
//! as a JSON object (keys sorted), with the same `null`s and absent fields as ever.
//!
//! Reading is tolerant, as the contract asks: unknown fields are ignored, unknown words
//! become `Other`, and a payload that does not fit its struct is an `Err` for the reader to
//! skip, never a panic. Task-force members' payloads also carry `pack_index`, which the
//! recorder adds; read it with [`RunEvent::pack_index`].

mod payloads;
mod view;
mod vocab;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use payloads::{
    Checkpoint, CloudFallback, ContextCompacted, CorrectiveReprompt, CriticReview, Finding,
    LlmRequest, LlmResponse, LlmToolCall, LoopDetected, MAX_MCP_MESSAGE_CHARS, McpMessage,
    McpRequest, McpServer, PackEnd, PackStart, Recruitment, RepairRound, RoutingRequest,
    RoutingResponse, RunAborted, RunEnd, RunResumed, RunStart, SecurityEvent, SkippedTool,
    TaskForceParallel, ToolCall, ToolCallRepaired, ToolError, ToolResult, WorkspaceOpened,
    WorkspaceResult,
};
pub use view::EventPayload;
pub use vocab::{
    CallPurpose, McpMessageType, McpRequestOutcome, McpStatus, RoutingMethod, RunOrigin,
    SecurityEventType, TaskForceMode, ToolErrorType,
};

use crate::{DomainError, EventKind, RunEvent};

/// A payload of one runlog kind.
pub trait Payload: Serialize + DeserializeOwned {
    /// Whether events of `kind` carry this payload (both `run_complete` and `run_failed`
    /// carry a [`RunEnd`]).
    fn carried_by(kind: EventKind) -> bool;

    /// The kind this payload is recorded as.
    fn kind(&self) -> EventKind;

    /// The payload as the runlog writes it.
    ///
    /// Fails only for what JSON cannot hold, e.g. a workspace path that is not UTF-8.
    fn to_json(&self) -> Result<Value, DomainError> {
        serde_json::to_value(self).map_err(|e| DomainError::InvalidPayload {
            kind: self.kind().as_str(),
            detail: e.to_string(),
        })
    }
}

/// Ties each struct with a fixed kind to it.
macro_rules! fixed_kind {
    ($($payload:ty => $kind:ident),+ $(,)?) => {
        $(
            impl Payload for $payload {
                fn carried_by(kind: EventKind) -> bool {
                    kind == EventKind::$kind
                }
                fn kind(&self) -> EventKind {
                    EventKind::$kind
                }
            }
        )+
    };
}

fixed_kind! {
    RunStart => RunStart,
    Recruitment => Recruitment,
    TaskForceParallel => TaskForceParallel,
    PackStart => PackStart,
    PackEnd => PackEnd,
    McpServer => McpServer,
    McpMessage => McpMessage,
    McpRequest => McpRequest,
    LlmRequest => LlmRequest,
    RunResumed => RunResumed,
    RoutingRequest => LlmRequest,
    LlmResponse => LlmResponse,
    RoutingResponse => LlmResponse,
    CorrectiveReprompt => CorrectiveReprompt,
    CloudFallback => CloudFallback,
    ToolCallRepaired => ToolCallRepaired,
    ContextCompacted => ContextCompacted,
    CriticReview => CriticReview,
    RepairRound => RepairRound,
    ToolCall => ToolCall,
    ToolResult => ToolResult,
    ToolError => ToolError,
    SecurityEvent => SecurityEvent,
    LoopDetected => LoopDetected,
    RunAborted => RunFailed,
    WorkspaceOpened => Workspace,
    Checkpoint => Checkpoint,
}

impl Payload for RunEnd {
    fn carried_by(kind: EventKind) -> bool {
        kind.is_terminal()
    }
    fn kind(&self) -> EventKind {
        if self.status.has_result() {
            EventKind::RunComplete
        } else {
            EventKind::RunFailed
        }
    }
}

impl RunEvent {
    /// The payload as its struct, e.g. `event.payload_as::<RunStart>()`.
    ///
    /// An `Err` when the event is of another kind or its payload does not fit (a runlog
    /// edited by hand, or a field whose meaning changed); readers skip it.
    pub fn payload_as<P: Payload>(&self) -> Result<P, DomainError> {
        let mismatch = |detail: String| DomainError::InvalidPayload {
            kind: self.kind.as_str(),
            detail,
        };
        if !P::carried_by(self.kind) {
            return Err(mismatch(format!(
                "does not carry a {}",
                std::any::type_name::<P>()
                    .rsplit("::")
                    .next()
                    .unwrap_or_default()
            )));
        }
        P::deserialize(&self.payload).map_err(|e| mismatch(e.to_string()))
    }

    /// The status a terminal event records; `None` for other events and for a terminal
    /// payload that names none we know.
    ///
    /// Only `status` is read, the one field [`RunEnd`] and [`RunAborted`] share, so the
    /// status is known even when the rest of the payload does not fit either.
    pub fn terminal_status(&self) -> Option<crate::RunStatus> {
        #[derive(serde::Deserialize)]
        struct Status {
            status: crate::RunStatus,
        }
        if !self.kind.is_terminal() {
            return None;
        }
        Status::deserialize(&self.payload).ok().map(|s| s.status)
    }

    /// The task-force member the event belongs to (`pack_index`), if it is a member's.
    pub fn pack_index(&self) -> Option<u32> {
        self.payload
            .get("pack_index")
            .and_then(Value::as_u64)
            .and_then(|i| u32::try_from(i).ok())
    }
}

#[cfg(test)]
mod tests;
