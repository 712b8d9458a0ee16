//! One struct per payload, with the fields docs/RUNLOG.md lists.
//!
//! The runlog writes payloads as a `serde_json::Value`, whose keys come out sorted, so the
//! order of the fields here does not change a line; whether a field is written as `null` or
//! left out does, and each `Option` says which: plain `Option` fields are written as `null`,
//! those with `skip_serializing_if` are left out when `None`, exactly as the lines have
//! always been (tests/golden/runlog.jsonl in fabric-core holds them).
//!
//! Fields added after the first runlogs were written carry `#[serde(default)]`, so runlogs
//! of older versions still read (writing is unaffected).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;

use super::vocab::{
    CallPurpose, McpMessageType, McpRequestOutcome, McpStatus, RoutingMethod, RunOrigin,
    SecurityEventType, TaskForceShape, ToolErrorType,
};
use crate::{RunId, RunStatus, ToolLoading, Usage};

/// `run_start`: the first line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStart {
    /// The run's id.
    pub run_id: RunId,
    /// The task as given.
    pub prompt: String,
    /// The model key of the first member.
    pub model_key: String,
    /// The model of the first member.
    pub model: String,
    /// How discovery chose the model, when it did.
    pub model_reason: Option<String>,
    /// Who started the run; `user` in runlogs written before it existed (a child's is then
    /// known by its `parent_run_id`).
    #[serde(default)]
    pub origin: RunOrigin,
    /// The step limit per member.
    pub max_steps: u32,
    /// Whether tools may use the network.
    pub network_allowed: bool,
    /// The directory the run's tools work in.
    pub workspace: PathBuf,
    /// The effective sandbox policy (`mode`, `enforced_by_kernel`, `landlock_abi`,
    /// `enforced`, `not_enforced`, `limits`, `read_paths`, `host`); its shape belongs to the
    /// sandbox adapter, so it stays JSON here. `null` when the caller did not say. Shared:
    /// the same policy is every run's in a process, and a copy of its tree was 4 KiB of every
    /// run starting (issue #45).
    #[serde(default)]
    pub sandbox: std::sync::Arc<Value>,
    /// The run that delegated this one through `agent__<id>`.
    pub parent_run_id: Option<RunId>,
    /// 0 for a run a person started, 1 for its children, and so on.
    #[serde(default)]
    pub depth: u32,
    /// The A2A context the run's task belongs to (`contextId`), when an A2A client started
    /// it; absent otherwise (docs/A2A.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// The earlier run whose conversation this run goes on with (`fabric run --continue` or
    /// `--fork`, issue #42); absent for a run that starts a conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<Continues>,
    /// The project's instruction files (`AGENTS.md`, `CLAUDE.md`, the user's own) the run's
    /// system prompt was given, by path and digest, with those that did not fit (issue #43);
    /// absent when there were none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instructions: Vec<crate::InstructionFile>,
}

/// `run_start.continues`: the earlier run a run continues, and what it inherited of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Continues {
    /// The earlier run.
    pub run_id: RunId,
    /// `continue` (on the earlier run's branch) or `fork` (on a new branch from its head).
    pub mode: ContinueMode,
    /// Which of the earlier run's members' conversation was inherited (its specialist).
    pub specialist_id: String,
    /// The SHA-256 (hex) of the inherited messages as JSON: everything after the system
    /// prompt, before the new prompt.
    pub digest: String,
    /// How many messages were inherited.
    pub messages: usize,
}

/// How a run continues an earlier one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContinueMode {
    /// On the earlier run's own branch (a project run) or a copy of its files (scratch).
    Continue,
    /// On a new branch from the earlier run's head; the earlier branch is left alone.
    Fork,
}

impl ContinueMode {
    /// The word in the runlog.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Continue => "continue",
            Self::Fork => "fork",
        }
    }
}

/// `recruitment`: the specialists chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recruitment {
    /// The first specialist.
    pub specialist_id: String,
    /// All of them, in work order.
    pub specialist_ids: Vec<String>,
    /// The capabilities inferred from the prompt's keywords.
    pub required_capabilities: Vec<String>,
    /// How they were chosen.
    pub routing_method: RoutingMethod,
    /// Why, in words.
    pub reason: String,
    /// Whether more than one specialist works.
    pub is_task_force: bool,
    /// How they work together.
    pub task_force_mode: TaskForceShape,
}

/// `task_force_parallel`: before the members of a parallel task force start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskForceParallel {
    /// The members, in recruitment order.
    pub specialist_ids: Vec<String>,
    /// How many run at once.
    pub max_parallel: usize,
}

/// `pack_start`: a specialist starts its loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberStart {
    /// Who.
    pub specialist_id: String,
    /// Its position in `specialist_ids` (0 for a lone specialist), written `pack_index`.
    #[serde(rename = "pack_index")]
    pub member: u32,
    /// The tool names offered at the start (MCP tools that arrive later are in
    /// `mcp_server` events).
    pub tools: Vec<String>,
    /// How tool schemas reach the model.
    #[serde(default)]
    pub tool_loading: ToolLoading,
    /// Its model key.
    pub model_key: String,
    /// Its model.
    pub model: String,
    /// In a sequential task force, the member whose result it was handed.
    pub handoff_from: Option<String>,
    /// The model's context window in tokens, when known (docs/LOCAL_MODELS.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u32>,
}

/// A tool the specialist's patterns did not let in from an MCP server, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkippedTool {
    /// The server's name for the tool.
    pub tool: String,
    /// Why it was left out.
    pub reason: String,
}

/// `mcp_server`: an MCP server of the specialist changed state. Which fields are present
/// depends on `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpServer {
    /// The server's name.
    pub server: String,
    /// What it changed to.
    pub status: McpStatus,
    /// Milliseconds since the servers started.
    pub elapsed_ms: u64,
    /// `starting`: `stdio` or `http`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// `starting`: whether the run fails without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    /// `starting`: whether the first model call waits for it (`required`, or its tools are
    /// named in the specialist's `tools`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub awaited: Option<bool>,
    /// `ready`, `tools_changed`: the tool names offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// `ready`, `tools_changed`: tools left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<Vec<SkippedTool>>,
    /// `failed`, `timeout`, `stopped` (and a `tools_changed` whose listing failed): what went
    /// wrong, with the server's last stderr lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `ready`, in a fabric that pools servers (issue #45): whether the run got a warm
    /// process, started ahead of it by the pool, rather than one started for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<bool>,
    /// `ready`, for a share of a connection several runs use at once (a 2026-07-28 server,
    /// ADR-122): how many runs held a share of that process when this run took its own,
    /// itself included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<usize>,
}

impl McpServer {
    /// A notice with only the fields every status has; set the others as the status needs.
    pub fn new(server: impl Into<String>, status: McpStatus, elapsed_ms: u64) -> Self {
        Self {
            server: server.into(),
            status,
            elapsed_ms,
            transport: None,
            required: None,
            awaited: None,
            tools: None,
            skipped: None,
            error: None,
            warm: None,
            shared: None,
        }
    }
}

/// `mcp_message`: an MCP server's log message or a tool call's progress, as the server sent
/// it (issue #29). Texts are cut to [`MAX_MCP_MESSAGE_CHARS`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpMessage {
    /// The server's name.
    pub server: String,
    /// `log` or `progress`.
    #[serde(rename = "type")]
    pub message_type: McpMessageType,
    /// `log`: its level (`debug` ... `emergency`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    /// `log`: the logger the server names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logger: Option<String>,
    /// The log's data as text, or the progress message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `progress`: how far, and out of how much when the server knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<f64>,
    /// `progress`: the total, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// `progress`: the tool whose call it reports on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
}

/// Longest text of an `mcp_message`, in characters.
pub const MAX_MCP_MESSAGE_CHARS: usize = 2_000;

/// `mcp_request`: an MCP server asked the fabric for something (a completion of the run's
/// model, an answer to a form, the roots) and how it was answered (issue #29).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpRequest {
    /// The server's name.
    pub server: String,
    /// `sampling/createMessage`, `elicitation/create` or `roots/list`.
    pub method: String,
    /// How it was answered.
    pub outcome: McpRequestOutcome,
    /// Why it was declined, refused or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Sampling: the model key that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_key: Option<String>,
    /// Sampling: the model that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Sampling: the tokens the answer used (counted in the run's budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Elicitation: the fields answered; roots: the roots given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<String>>,
}

impl McpRequest {
    /// A request of `server` answered with `outcome`; set the other fields as it needs.
    pub fn new(server: impl Into<String>, method: &str, outcome: McpRequestOutcome) -> Self {
        Self {
            server: server.into(),
            method: method.to_owned(),
            outcome,
            reason: None,
            model_key: None,
            model: None,
            usage: None,
            fields: None,
        }
    }
}

/// `llm_request`: before a model call of a specialist's loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmRequest {
    /// The model.
    pub model: String,
    /// Messages sent.
    pub message_count: usize,
    /// Tool definitions sent (with `finish_task`).
    pub tool_count: usize,
}

/// `llm_request` of the routing call (`step: null`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoutingRequest {
    /// Always `routing`.
    pub purpose: CallPurpose,
    /// The routing model's key.
    pub model_key: String,
    /// The routing model.
    pub model: String,
    /// Messages sent.
    pub message_count: usize,
    /// Tool definitions sent.
    pub tool_count: usize,
}

/// One tool call as the model sent it, in an `llm_response`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmToolCall {
    /// The call's id (absent for the routing call, which is never answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The tool named.
    pub name: String,
    /// The argument text as received, capped at 2 000 characters.
    pub arguments: String,
    /// The whole argument text, only when `arguments` was capped: a resumed run continues
    /// the conversation exactly as the model wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_arguments: Option<String>,
}

/// `llm_response`: after a model call of a specialist's loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmResponse {
    /// The model's text (capped), if any.
    pub content: Option<String>,
    /// The tool calls, in order.
    pub tool_calls: Vec<LlmToolCall>,
    /// Tokens used, when the server reported them.
    pub usage: Option<Usage>,
    /// How long the call took.
    pub latency_ms: f64,
    /// Why the model stopped, when reported.
    pub finish_reason: Option<String>,
    /// The whole text, only when `content` was capped (for a resumed run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_content: Option<String>,
    /// How long the request waited for a free slot of its endpoint
    /// (`max_concurrent_requests`), when it waited; `latency_ms` includes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_ms: Option<u64>,
    /// How the server's prompt cache served the call, when it says (llama.cpp).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache: Option<crate::PromptCache>,
    /// The answer was asked for by JSON schema (`constrained_decoding`), its call read from
    /// the JSON; absent otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub constrained: bool,
}

/// `llm_response` of the routing call (`step: null`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoutingResponse {
    /// Always `routing`.
    pub purpose: CallPurpose,
    /// The routing model.
    pub model: String,
    /// Its text (capped), if any.
    pub content: Option<String>,
    /// Its `route` call, if it made one.
    pub tool_calls: Vec<LlmToolCall>,
    /// How long the call took.
    pub latency_ms: f64,
    /// Why its answer was not used (keyword routing was used instead).
    pub error: Option<String>,
}

/// `corrective_reprompt`: the model answered in plain text and was asked to use tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CorrectiveReprompt {
    /// Why (`plain_text_response`).
    pub reason: String,
    /// The how-manieth reprompt in a row, from 1.
    pub attempt: u32,
    /// How many are allowed in a row.
    pub max_retries: u32,
}

/// `loop_detected`: the model called one tool with the same arguments and got the same result
/// `repeat_limit` times in a row (issue #24; docs/LOCAL_MODELS.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopDetected {
    /// The tool called.
    pub tool: String,
    /// The call that made the streak (`nudged`) or was refused or stopped the run.
    pub call_id: String,
    /// Its arguments (parsed, or the raw text when they are not JSON).
    pub args: Value,
    /// Identical calls in a row, this one included.
    pub repeats: u32,
    /// `nudged` (the result went back with a note naming the repetition), `refused` (the
    /// call was not run; the model was told why) or `stopped` (the run ends `stalled`).
    pub action: String,
    /// What the model was told.
    pub message: String,
}

/// `tool_call_repaired`: the server handed the model's tool calls back as text, and they were
/// recovered from it (issue #12).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRepaired {
    /// The format they were written in: `hermes`, `python_tag`, `mistral`, `bare_json`,
    /// `fenced_json`.
    pub format: String,
    /// The tools called, in order.
    pub tools: Vec<String>,
    /// The ids given to the calls (`repaired_<step>_<n>`).
    pub call_ids: Vec<String>,
}

/// `context_compacted`: before a model call, the conversation was compacted to fit the
/// model's context window (issue #12).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextCompacted {
    /// The window, in tokens.
    pub window: u32,
    /// The room the prompt may take (the window less the answer's share).
    pub room: u64,
    /// The prompt's estimate before compacting (UTF-8 bytes / 3).
    pub tokens_before: u64,
    /// After.
    pub tokens_after: u64,
    /// Older tool results shortened.
    pub shortened_results: usize,
    /// Messages of older turns left out (answers and their tool results).
    pub dropped_messages: usize,
    /// Results of the last turn cut to what fits, each with a note on how to get the rest
    /// (absent in runlogs written before it existed).
    #[serde(default)]
    pub cut_results: usize,
    /// `drop` (a note lists what the left-out turns called) or `summarize` (the model wrote
    /// the note).
    pub mode: String,
    /// The model's summary of the left-out turns, with `summarize`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The tokens the summary call used (counted in the run's usage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_usage: Option<Usage>,
}

/// `cloud_fallback`: the step goes to the cloud model (seed 001's fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CloudFallback {
    /// Why: `no_tool_calls` or `malformed_args`.
    pub reason: String,
    /// The local model that failed.
    pub local_model: String,
    /// The cloud model asked instead.
    pub cloud_model: String,
    /// Its model key.
    pub cloud_model_key: String,
}

/// One thing a critic found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// How bad: `error`, `warning` or `info` (a critic may use its own words).
    pub severity: String,
    /// The file it concerns, relative to the workspace, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// What is wrong and what to do about it.
    pub reason: String,
}

/// `critic_review`: the critic reviewed a specialist's staged work after its `finish_task`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriticReview {
    /// The how-manieth review of this specialist's work, from 1.
    pub round: u32,
    /// Reviews allowed (`max_repair_rounds`).
    pub max_rounds: u32,
    /// The critic's specialist id.
    pub critic: String,
    /// The critic's own run (a child of this one), when it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critic_run_id: Option<RunId>,
    /// Whether the work was approved.
    pub approved: bool,
    /// The critic's run did not complete, so it gave no verdict: how it ended (absent when
    /// it completed). The run then ends too (`quality_gate_failed`, or the critic's
    /// `cancelled` or `budget_exceeded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critic_status: Option<crate::RunStatus>,
    /// Why the critic's run ended so, when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critic_reason: Option<String>,
    /// What the critic found.
    pub findings: Vec<Finding>,
    /// The staged files the review covered (added, changed or deleted), relative to the
    /// workspace.
    pub files: Vec<String>,
    /// Approved: the files applied to the workspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied: Vec<String>,
    /// Approved: staged files not applied because the workspace protects them (a
    /// `security_event` follows for each).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
    /// Where the staged changes are kept (to inspect them after `quality_gate_failed`).
    pub staged_dir: PathBuf,
}

/// `repair_round`: the critic rejected the work, and the specialist repairs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepairRound {
    /// The review this repair will go to, from 2.
    pub round: u32,
    /// Reviews allowed (`max_repair_rounds`).
    pub max_rounds: u32,
    /// The model key the repair runs on: the specialist's own, or the cloud fallback's
    /// (`cloud_fallback.policy: critic_rejected`).
    pub model_key: String,
}

/// `tool_call`: before a tool runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCalled {
    /// The tool named.
    pub tool: String,
    /// The call's id.
    pub call_id: String,
    /// The parsed arguments, or the raw text (capped) when it is not JSON.
    pub args: Value,
}

/// `tool_result`: a tool succeeded, or `finish_task` was accepted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The tool.
    pub tool: String,
    /// The call's id.
    pub call_id: String,
    /// Text (capped) for tools; the payload object for `finish_task`.
    pub result: Value,
    /// The media types of the images shown to the model with the text (a key with
    /// `vision: true`), in order; never their bytes. Empty (absent) when none were.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
}

/// `tool_error`: a call failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolFailed {
    /// The tool named.
    pub tool: String,
    /// The call's id.
    pub call_id: String,
    /// Why it failed.
    pub error_type: ToolErrorType,
    /// Exactly what the model was told.
    pub error_message: String,
}

/// `security_event`: something was refused for safety (next to a `tool_error`), or the run
/// starts with the sandbox off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SecurityEvent {
    /// What.
    pub event_type: SecurityEventType,
    /// The tool refused; `null` for what concerns the whole run (`sandbox_off`).
    pub tool: Option<String>,
    /// The refused call's id; absent for what concerns the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// What was attempted (the path, the program; `run_start` for the whole run).
    pub attempted: String,
    /// What was refused, why, and what is allowed instead.
    pub error_message: String,
}

/// `run_complete` or `run_failed`: the last line. Which of the two follows from `status`
/// ([`RunStatus::has_result`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEnd {
    /// The run's id.
    pub run_id: RunId,
    /// How it ended.
    pub status: RunStatus,
    /// Who worked, in recruitment order.
    pub specialist_ids: Vec<String>,
    /// How they worked together.
    pub task_force_mode: TaskForceShape,
    /// Model calls, all members together.
    pub steps: u32,
    /// Tokens, all members together.
    pub usage: Usage,
    /// Why it failed, or how it completed when not through `finish_task`.
    pub reason: Option<String>,
    /// `run_complete` only: the finish payload (for task forces `{summary,
    /// task_force_mode, sections}`). Read back as `None` when absent or `null`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// A run on a versioned workspace: its branch and diff stat (issue #25); absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceResult>,
}

/// `pack_end`: a task-force member's loop ended (a lone specialist's end is the run's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberEnd {
    /// The member.
    pub specialist_id: String,
    /// How its loop ended.
    pub status: RunStatus,
    /// Its model calls.
    pub steps: u32,
    /// Its tokens.
    pub usage: Usage,
    /// Why, for statuses other than `completed`.
    pub reason: Option<String>,
    /// Its finish payload (or the payload built from its text); absent when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

/// `run_resumed`: the run's process stopped before the run's end, and this process goes on
/// from its runlog (docs/DURABILITY.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResumed {
    /// The run's id.
    pub run_id: RunId,
    /// The how-manieth resumption, from 1.
    pub resumption: u32,
    /// Events the runlog held before this line.
    pub previous_events: u64,
    /// Model calls whose answers were recorded and are not made again.
    pub replayed_steps: u32,
    /// When the last event before the stop was written (seconds since the Unix epoch).
    pub last_event_ts: f64,
    /// Processes the stopped run's commands left running (detached from their command,
    /// which died with the fabric), killed before the run went on; absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reaped_processes: Vec<u32>,
}

/// `run_failed` for a run whose own code could not end it (it panicked): the server or CLI
/// that hosted it writes this shorter payload in its place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunAborted {
    /// The run's id.
    pub run_id: RunId,
    /// Always `failed`.
    pub status: RunStatus,
    /// What happened.
    pub reason: String,
}

/// `workspace`: the run works in a versioned workspace (issue #25): a worktree of the user's
/// repository on the run's branch, or a scratch directory whose history the fabric keeps
/// outside it. Written after `run_start`, and again after each `run_resumed` with the
/// checkpoint the files were restored to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkspaceOpened {
    /// `project`, `copy` (of a directory that is not a git repository) or `scratch`.
    pub origin: String,
    /// The user's repository (a project's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<PathBuf>,
    /// The user's directory a copy was made of (a copy's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<PathBuf>,
    /// Where a scratch workspace's history is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_dir: Option<PathBuf>,
    /// The directory the tools work in.
    pub dir: PathBuf,
    /// The run's branch (`fabric/<run-id>`).
    pub branch: String,
    /// The commit the run started from.
    pub base: String,
    /// What the user named as the base (`--base`), when they did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_ref: Option<String>,
    /// Where each checkpoint is pushed (`store.workspace_remote`), without credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// A continued run: the checkpoint its files were restored to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_to: Option<String>,
    /// The run whose workspace (worktree and branch) this is, when it is not this run's own:
    /// a run that continues an earlier one works on that run's branch (issue #42).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<RunId>,
}

/// `checkpoint`: the fabric committed the workspace's files after a tool call that may have
/// changed them (issue #25). `step` is the envelope's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The tool whose call was checkpointed.
    pub tool: String,
    /// Its call id.
    pub call_id: String,
    /// The new commit; `null` when the call changed no recorded file (and `ignored` says
    /// what it wrote that no checkpoint holds).
    pub commit: Option<String>,
    /// Paths written that `.gitignore` excludes, so no checkpoint holds them (directories
    /// end with `/`); absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<String>,
    /// The `.git` entries the fabric removed from the workspace before this checkpoint
    /// (nested repositories, recorded as plain files; `.git` when a worktree's link to its
    /// repository was changed and put back); absent when none (ADR-088).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed_git: Vec<String>,
    /// Whether the commit reached `store.workspace_remote`; absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pushed: Option<bool>,
}

/// What a run on a versioned workspace leaves: its branch and what it changes against its
/// base (`run_complete.workspace`, `run_failed.workspace`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkspaceResult {
    /// The run's branch.
    pub branch: String,
    /// The commit it started from.
    pub base: String,
    /// Its last checkpoint (the base when it changed nothing).
    pub head: String,
    /// The files it changes, by path.
    pub files: Vec<String>,
    /// Lines added in text files.
    pub added: u64,
    /// Lines removed in text files.
    pub removed: u64,
}
