//! The runlog: what each line's payload holds, as types.
//!
//! docs/RUNLOG.md is the contract; this module is its code. Every event kind has a struct in
//! [`payloads`](self) (two for `llm_request` and `llm_response`: a specialist's call and the
//! routing call), the closed sets of words are enums, and [`Payload`] ties each struct to its
//! [`EventKind`]. An event carries its payload as [`EventPayload`] (the kinds and their
//! structs are one table, in the crate's `event.rs`); JSON exists only at the edge, the
//! `wire` module, which writes an event as its line and reads a line back. The lines
//! themselves do not change: a payload is still written as a JSON object (keys sorted), with
//! the same `null`s and absent fields as ever.
//!
//! Reading is tolerant, as the contract asks: unknown fields are ignored, unknown words
//! become `Other`, an unknown kind keeps its payload and a payload that does not fit its
//! struct is an [`EventPayload::Unreadable`] for sinks to skip, never a panic nor a failed
//! read. Task-force members' payloads also carry `pack_index`, the envelope's
//! [`crate::RunEvent::pack_index`].

mod hook;
mod input;
mod payloads;
mod vocab;
mod wire;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use crate::event::EventPayload;
pub use hook::HookRun;
pub use input::{Decision, InputAnswered, InputKind, InputRequired, UserMessage};
pub use payloads::{
    Checkpoint, CloudFallback, ContextCompacted, ContinueMode, Continues, CorrectiveReprompt,
    CriticReview, Finding, LlmRequest, LlmResponse, LlmToolCall, LoopDetected,
    MAX_MCP_MESSAGE_CHARS, McpMessage, McpRequest, McpServer, MemberEnd, MemberStart, Recruitment,
    RepairRound, RoutingRequest, RoutingResponse, RunAborted, RunEnd, RunResumed, RunStart,
    SecurityEvent, SkippedTool, TaskForceParallel, ToolCallRepaired, ToolCalled, ToolFailed,
    ToolResult, WorkspaceOpened, WorkspaceResult,
};
pub use vocab::{
    CallPurpose, HookOutcome, McpMessageType, McpRequestOutcome, McpStatus, RoutingMethod,
    RunOrigin, SecurityEventType, TaskForceShape, ToolErrorType,
};

use crate::{DomainError, EventKind};

/// A payload of one runlog kind.
pub trait Payload: Serialize + DeserializeOwned {
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

#[cfg(test)]
mod tests;
