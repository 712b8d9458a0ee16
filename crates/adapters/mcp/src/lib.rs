//! `fabric-mcp`: the Model Context Protocol for agent-fabric, on the official Rust SDK
//! (`rmcp`).
//!
//! The client side: [`McpTools`] starts the MCP servers a specialist declares
//! (`mcp_servers`: stdio child processes, streamable HTTP endpoints, or legacy HTTP+SSE
//! endpoints through a small client of our own), concurrently and in
//! the background, and offers their tools to the engine as `mcp__<server>__<tool>` through
//! the core's [`ToolSource`](fabric_core::ToolSource) port. Each MCP tool is a
//! [`Tool`](fabric_core::Tool) whose contract is built from the server's schema, so the
//! loop treats it like any built-in tool. Servers that are slow, fail or crash become
//! `mcp_server` runlog events and exact tool errors, never silently missing tools.
//!
//! The server side: [`FabricMcpServer`] offers `run_task`, `list_specialists`, `get_run`,
//! `search_runs`, `run_stats` and `prune_runs` over stdio ([`serve_stdio`]) or streamable
//! HTTP ([`http_service`]), doing the work through the core's `RunService` as the HTTP API
//! does, and answering with the core's shared views; its failures are typed [`McpError`]s.
//! It also offers each specialist as a prompt, runs as resources (`fabric://runs/{id}`, its
//! runlog and workspace files, subscribable), completion of run ids and paths, log messages
//! of the runs it starts, and `run_task` as an MCP task for clients that declare tasks
//! (issue #29; docs/MCP.md).
//!
//! Key decisions (docs/DECISIONS.md, ADR-030..): fresh servers per run (no state shared
//! between runs; a long-lived fabric's pool starts them ahead, ADR-117, and shares a
//! 2026-07-28 server's process between runs in flight, each on its own route, ADR-122), each stdio server in its own process group killed synchronously when the
//! run's [`McpTools`] is dropped, MCP annotations read as hints that default to the safe side.
//!
//! Depends on `fabric-core` and `fabric-domain` only.

mod asks;
mod completion;
mod connect;
mod elicit;
mod error;
mod handler;
mod logging;
mod mux;
mod oauth;
mod outputs;
mod pool;
mod prompts;
mod protocol;
mod resources;
mod server;
mod source;
mod sse_legacy;
mod stderr;
mod tasks;
mod tool;
mod uri;
mod watch;

pub use connect::SpawnHook;
pub use error::McpError;
pub use oauth::{Challenge, LoggedIn, LoginRequest, login, logout};
pub use pool::McpPool;
pub use server::{
    ContinuesInput, FabricMcpServer, GetRunInput, NoInput, PruneRunsInput, RunStatsInput,
    RunTaskInput, SpecialistEntry, SpecialistList, http_service, serve_stdio, server_tools,
};
pub use source::McpTools;
