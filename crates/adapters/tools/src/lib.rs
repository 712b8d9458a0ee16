//! `fabric-tools`: the built-in tools of agent-fabric — the engineering tools `shell`,
//! `read_file`, `write_file` and `list_files`, and the research tools `web_search` and
//! `fetch_url` (read-only, offered only to runs that allow the network).
//!
//! This is an adapter: it implements `fabric-core`'s [`Tool`] port (through
//! [`fabric_engine::typed::TypedTool`], so each tool's input schema is derived from its Rust
//! input type) and depends on nothing but `fabric-core` and `fabric-domain`. The binary
//! picks tools by name with [`builtin_tool`] or takes all of them with
//! [`engineering_tools`], and hands them to the engine like any other tool.
//!
//! The key decision: everything a tool touches is confined to the run's workspace
//! ([`ToolContext::workspace`](fabric_engine::ToolContext)), and every refusal is a
//! [`ToolError::Denied`](fabric_engine::ToolError) with an exact, actionable message, which the
//! engine also records as a `security_event`.
//! - File paths are relative to the workspace; escapes (absolute paths, `..` above it,
//!   symlinks out of it) are refused in one place, `paths`: every path is opened beneath the
//!   workspace descriptor with `openat2(RESOLVE_BENEATH)`, free of check-then-use races.
//! - `shell` runs argv, never `sh -c`: one allowlisted program ([`ToolPolicy`]), a scrubbed
//!   environment, its own process group that dies with the call (timeout, cancellation,
//!   drop), capped output.
//! - The allowlist is advice, not the wall: arguments are not confined and compilers run
//!   code. The wall is the OS sandbox plugged in behind [`ProcessSandbox`] (the
//!   `fabric-sandbox` crate: Landlock, seccomp, resource limits; [`NoOsSandbox`] when the
//!   operator turned it off). A command that fails because the sandbox refused something is
//!   reported as a `sandbox_denied` refusal, so the model learns why.
//! - The web tools speak HTTP with reqwest, follow redirects one checked hop at a time, and
//!   bound every fetch in time, bytes and characters ([`FetchSettings`]).
//!
//! It also runs the user's lifecycle hooks ([`CommandHooks`], issue #43, docs/HOOKS.md):
//! unlike a tool's command, a hook is the user's own `sh -c` line, run as the user outside
//! the OS sandbox, with a scrubbed environment, bounded in time and output.
//!
//! Each contract carries the canonical workflows its tool is a step of (`inspect-edit-verify`,
//! `search-fetch-cite`, ...), defined once in [`builtin_workflows`]; docs/TOOLS.md is
//! generated from these contracts (`tests/tools_doc.rs`).
#![deny(missing_docs)]

pub mod a2a;
mod container;
mod denial;
mod files;
mod hooks;
mod lines;
mod paths;
mod policy;
mod reader;
mod reap;
mod shell;
mod staging;
mod text;
mod web;
mod workflows;

use std::sync::Arc;

use fabric_engine::Tool;
use fabric_engine::typed::Typed;

pub use container::{container_starts, podman_path};
/// The sandbox seam, defined in the core so the OS sandbox can be its own adapter.
pub use fabric_engine::{NoOsSandbox, ProcessSandbox};
pub use hooks::CommandHooks;
pub use policy::{ContainerSettings, DEFAULT_ALLOWED_COMMANDS, ToolPolicy};
pub use reader::WorkspaceReader;
pub use reap::reap_leftovers;
pub use staging::{CopyStager, MAX_STAGED_BYTES, MAX_STAGED_ENTRIES};
pub use web::{AddressPolicy, FetchSettings, SearchProvider, WebSearchSettings};
pub use workflows::builtin_workflows;

/// The names of the built-in tools, in the order [`engineering_tools`] returns them.
pub const BUILTIN_TOOLS: &[&str] = &[
    "shell",
    "read_file",
    "write_file",
    "list_files",
    "web_search",
    "fetch_url",
];

/// The built-in tool called `name`, or `None` if there is none. `sandbox` confines the
/// processes `shell` starts; the file tools do not start processes.
pub fn builtin_tool(
    name: &str,
    policy: &Arc<ToolPolicy>,
    sandbox: &Arc<dyn ProcessSandbox>,
) -> Option<Arc<dyn Tool>> {
    let tool: Arc<dyn Tool> = match name {
        "shell" => Arc::new(Typed::new(shell::ShellTool::new(
            Arc::clone(policy),
            Arc::clone(sandbox),
        ))),
        "read_file" => Arc::new(Typed::new(files::ReadFileTool::new(Arc::clone(policy)))),
        "write_file" => Arc::new(Typed::new(files::WriteFileTool::new(Arc::clone(policy)))),
        "list_files" => Arc::new(Typed::new(files::ListFilesTool::new(Arc::clone(policy)))),
        "web_search" => Arc::new(Typed::new(web::WebSearchTool::new(
            policy.web_search.clone(),
        ))),
        "fetch_url" => Arc::new(Typed::new(web::FetchUrlTool::new(policy.fetch.clone()))),
        _ => return None,
    };
    Some(tool)
}

/// All built-in tools, in the order of [`BUILTIN_TOOLS`].
pub fn engineering_tools(
    policy: &Arc<ToolPolicy>,
    sandbox: &Arc<dyn ProcessSandbox>,
) -> Vec<Arc<dyn Tool>> {
    BUILTIN_TOOLS
        .iter()
        .filter_map(|name| builtin_tool(name, policy, sandbox))
        .collect()
}
