//! `fabric-core`: the run service of agent-fabric, over the engine (`fabric-engine`).
//!
//! Every front end (the CLI, the HTTP API, the MCP and A2A servers, the workers) submits runs
//! here; the engine runs them. Layout:
//! - [`service`]: the run service every front end submits runs to, and
//!   [`service::prepare`]: how a request becomes a task ready to run, by a plain policy over
//!   narrow ports (model servers, chat clients, tools, the daily budgets).
//! - [`live`]: the runs in flight in this process, with their cancellation tokens and event
//!   buffers, so the HTTP API can follow, resume and cancel runs by id.
//! - [`metrics`]: the service's counters and histograms, and their Prometheus text.
//! - [`search`]: search over past runs, and their embeddings.
//! - [`views`]: the answers the HTTP API and the MCP server share.
//!
//! The engine's modules are re-exported under their own names (`fabric_core::ports`,
//! `fabric_core::engine`, ...), so a front end or an adapter names one crate for both; the
//! arrow between the two crates goes one way only (`layers.rs`).
#![deny(missing_docs)]

pub mod live;
pub mod metrics;
pub mod search;
pub mod service;
pub mod views;

// The core's own unit tests use the one set of fakes (`crates/testing/fakes`, ADR-100),
// compiled into this crate: taken as a dependency, they would implement the service's ports
// (`Preparer`, `Runnable`) of a second copy of the core. `fabric_core::` in their source then
// names this crate.
#[cfg(test)]
extern crate self as fabric_core;
#[cfg(test)]
#[allow(dead_code, unreachable_pub, unused_imports)]
#[path = "../../testing/fakes/src/lib.rs"]
mod fakes;

pub use fabric_engine::{
    ChatClient, ChatError, ChatObserver, ChatRequest, ChatResponse, ClaimedRun, CommandWatch,
    EmbeddingClient, EventSink, Liveness, NewRun, NoOsSandbox, NoopObserver, ProcessSandbox,
    QueryEmbedding, QueueSignal, QueuedCancel, Reindexed, Release, Renewal, RunCatalog, RunLog,
    RunObserver, RunQuery, RunQueue, RunSandbox, RunStore, SampleError, SampleRequest, Sampled,
    Sampler, SandboxGuard, SearchHit, SearchQuery, SecurityNotice, StaticTools, StatsGroup,
    StatsQuery, StatsRow, StoreError, Tool, ToolContext, ToolDef, ToolDefinitions, ToolError,
    ToolNotice, ToolOutput, ToolSource, Withheld, WorkspaceFiles,
};
pub use fabric_engine::{
    CoreError, Remedy, ask_user, budget, context, conversation, delegate, engine, execute, fs,
    gate, history, lazy, live_output, models, new_run_id, ports, recruit, repair, trace, typed,
    unix_now, versioned,
};
