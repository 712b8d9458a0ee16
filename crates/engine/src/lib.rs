//! `fabric-engine`: the tool-calling loop of agent-fabric, the task force that runs it, and
//! the ports adapters implement.
//!
//! It knows nothing of how runs are submitted, queued, followed or shown: that is the run
//! service in `fabric-core`, which depends on this crate and never the other way round
//! (`layers.rs` checks the arrow).
//!
//! Layout:
//! - [`ports`]: the traits adapters implement: [`ChatClient`] (a model server),
//!   [`EmbeddingClient`] (a server that turns texts into vectors), [`Tool`]
//!   (anything the model can call: built-in tools, MCP tools, other agents), [`RunStore`] and
//!   [`RunLog`] (where runs and their events live), and [`RunObserver`] (who watches a run live:
//!   the CLI renderer, an SSE stream).
//! - [`engine`]: the tool-calling loop of one specialist. It checks every call against the
//!   tool's contract before running it, turns every failure into an exact message for the
//!   model, and records each step. It never asks where a tool came from.
//! - [`execute`]: a task force in a run: record who works on it, run the loop of one
//!   specialist or of a task force (sequential or parallel), close the runlog with exactly
//!   one terminal event.
//! - [`recruit`]: who works on a prompt: whole-word keyword routing with a greedy set
//!   cover, or the routing model with a validated answer and keyword fallback.
//! - [`models`]: choosing a model from what a server offers (pure).
//! - [`budget`]: what a tree of runs may spend together ([`budget::RunBudget`]) and where a
//!   run sits in it ([`budget::Lineage`]); what each model key may spend per day
//!   ([`budget::daily::DailyBudget`]).
//! - [`delegate`]: sub-agents as tools (`agent__<id>`), over the [`delegate::ChildRunner`]
//!   port the run service implements.
//! - [`repair`]: tool calls a server failed to parse, recovered from the model's text.
//! - [`context`]: keeping a conversation inside the model's context window (compaction).
//! - [`gate`]: the quality gate: a critic reviews staged work before a run may complete.
//! - [`history`]: a run's runlog read back, to continue the run after its process stopped.
//! - [`ask_user`]: the tool whose answer is a person's; the loop asks the run's
//!   [`ports::Person`], who also steers the run and approves calls (issue #42).
//! - [`lazy`]: progressive tool loading: `search_tools` and `load_tool_schema` in front of a
//!   member's tools.
//! - [`fs`]: removing a directory tree of any depth without recursion, for every adapter
//!   that deletes what a command made (private temp dirs, protected-path reverts, staging,
//!   pruning).
//! - [`versioned`]: a run's versioned workspace as the loop commits it.
//! - [`trace`]: the trace context of the run a task works for.
//!
//! It depends only on `fabric-domain` (and `rustix` for [`fs`]).
#![deny(missing_docs)]

pub mod ask_user;
pub mod budget;
pub mod context;
pub mod conversation;
pub mod delegate;
pub mod engine;
mod error;
pub mod execute;
mod fallback;
pub mod fs;
pub mod gate;
pub mod history;
mod ids;
pub mod lazy;
pub mod live_output;
pub mod models;
mod outcome;
mod params;
pub mod ports;
mod recorded;
mod recorder;
pub mod recruit;
pub mod repair;
mod sampling;
pub mod service_error;
pub mod trace;
pub mod typed;
pub mod versioned;

pub use error::{CoreError, Remedy};
pub use ids::{new_run_id, unix_now};
pub use ports::{
    ChatClient, ChatError, ChatObserver, ChatRequest, ChatResponse, ClaimedRun, CommandWatch,
    EmbeddingClient, EventSink, Liveness, NewRun, NoOsSandbox, NoopObserver, ProcessSandbox,
    QueryEmbedding, QueueSignal, QueuedCancel, Reindexed, Release, Renewal, RunCatalog, RunLog,
    RunObserver, RunQuery, RunQueue, RunSandbox, RunStore, SampleError, SampleRequest, Sampled,
    Sampler, SandboxGuard, SearchHit, SearchQuery, SecurityNotice, StaticTools, StatsGroup,
    StatsQuery, StatsRow, StoreError, Tool, ToolContext, ToolDef, ToolDefinitions, ToolError,
    ToolNotice, ToolOutput, ToolSource, Withheld, WorkspaceFiles,
};
pub use service_error::ServiceError;
