//! `fabric-domain`: the pure heart of agent-fabric.
//!
//! This crate sits at the centre of the hexagon. It holds the types every other crate speaks
//! (chat messages, tool calls, tool contracts, specialists, runs, runlog events and their
//! payloads in [`runlog`]) and the
//! rules that need no I/O: checking a value against a tool's JSON Schema with messages a small
//! model can act on, and generating the OpenAI function definition from a tool contract.
//!
//! It depends on no other crate of ours, does no I/O and knows nothing of tokio, so every rule
//! here is tested with plain values.
#![deny(missing_docs)]

mod approval;
mod error;
mod event;
pub mod hooks;
pub mod instructions;
mod limits;
pub mod live;
mod message;
mod model;
mod run;
pub mod runlog;
mod sandbox;
pub mod schema;
mod services;
mod specialist;
mod stats;
mod summary;
mod task_force;
mod time;
mod tool;
mod tooling;
mod visible;
mod words;

pub use approval::{ApprovalAsk, ApprovalMode, ApprovalPolicy, ApprovalRule, RuleAction};
pub use error::DomainError;
pub use event::{EventKind, EventPayload, RunEvent};
pub use instructions::{InstructionFile, InstructionScope, InstructionSource, Instructions};
pub use limits::{BudgetLimits, ComplexityRouting};
pub use live::{LiveToolOutput, OutputChunk, OutputStream};
pub use message::{
    IMAGE_TYPES, MAX_IMAGE_BYTES, MAX_IMAGES_PER_RESULT, Message, PromptCache, Role, Text,
    ToolCall, ToolImage, Usage,
};
pub use model::{
    DEFAULT_MAX_CONCURRENT_REQUESTS, DEFAULT_OLLAMA_PARALLEL, FallbackPolicy, ModelConfig, Price,
};
pub use run::{RunId, RunStatus};
pub use sandbox::SandboxMode;
pub use services::{
    Backend, ConstrainedDecoding, FallbackReason, ResponseChaining, SearchProvider, endpoint_key,
};
pub use specialist::{
    ASK_TOOL, DEFAULT_REPEAT_LIMIT, FINISH_TOOL, LoopAids, SpecialistSpec, check_finish_schema,
    check_tool_pattern, is_tool_pattern,
};
pub use stats::StatsGroup;
pub use summary::{RunSummary, SummaryFold, result_summary};
pub use task_force::{ContextCompaction, Routing, TaskForceMode};
pub use time::{UtcTime, parse_duration, parse_since};
pub use tool::{
    PlannerHints, ToolAnnotations, ToolDef, ToolSpec, Workflow, builtin, fitting_workflows,
    input_schema_for as schema_for,
};
pub use tooling::{
    AGENT_TOOL_PREFIX, AcpAgentSpec, CriticSpec, DEFAULT_ACP_TIMEOUT_S, DEFAULT_ALLOWED_COMMANDS,
    DEFAULT_CRITIC, DEFAULT_MAX_DELEGATION_DEPTH, DEFAULT_MAX_REPAIR_ROUNDS,
    DEFAULT_MCP_CALL_TIMEOUT_S, DEFAULT_MCP_STARTUP_TIMEOUT_S, DelegationWorkspace,
    MCP_TOOL_PREFIX, McpElicitation, McpOAuth, McpOAuthGrant, McpServerSpec, McpTransport,
    ToolLoading, Tooling, mcp_tool_name, pattern_matches,
};
pub use visible::{visible_json, visible_line, visible_text};
