//! How a specialist reaches tools beyond the built-in ones: MCP servers, lazy loading of
//! tool schemas, and other specialists it may delegate to. Plain data, validated by
//! `fabric-config` and acted on by the adapters.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The prefix of every MCP tool's name: `mcp__<server>__<tool>`.
pub const MCP_TOOL_PREFIX: &str = "mcp__";
/// The prefix of every delegation tool's name: `agent__<specialist id>`.
pub const AGENT_TOOL_PREFIX: &str = "agent__";

/// Default seconds an MCP server may take to start and list its tools.
pub const DEFAULT_MCP_STARTUP_TIMEOUT_S: u64 = 30;
/// Default seconds one MCP tool call may take.
pub const DEFAULT_MCP_CALL_TIMEOUT_S: u64 = 120;
/// Default depth of delegation: a run may start children, and they grandchildren.
pub const DEFAULT_MAX_DELEGATION_DEPTH: u32 = 2;

crate::words::closed_set! {
    /// Where a delegated (child) run works (`delegation.workspace`).
    pub enum DelegationWorkspace {
        /// In its own run's workspace; the parent sees its result, not its files.
        #[default]
        Separate = "separate",
        /// In the parent's workspace, so it can work on the parent's files.
        Shared = "shared",
    }
}

/// The extra tooling of one specialist. Every field defaults to "none", so a specialist
/// that names none of them behaves as before.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tooling {
    /// MCP servers started for each run of this specialist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpServerSpec>,
    /// Whether the model sees every tool schema up front or loads them on demand.
    #[serde(default)]
    pub tool_loading: ToolLoading,
    /// Ids of specialists this one may hand a task to, each offered as `agent__<id>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delegates: Vec<String>,
    /// The critic that checks its work before it lands (the quality gate; docs/QUALITY.md):
    /// its writes are staged, and applied only when the critic approves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critic: Option<CriticSpec>,
    /// An Agent Client Protocol agent does this specialist's work (issue #44): a specialist
    /// that delegates to it (`agent__<id>`) starts the program, gives it a session in the
    /// run's workspace and returns its final message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp: Option<AcpAgentSpec>,
}

/// An ACP agent as a specialist: the program that speaks ACP on its stdin/stdout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcpAgentSpec {
    /// The program.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set for it (values written in the config).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The most one task may take, in seconds.
    pub timeout_s: u64,
}

/// How long an ACP agent's task may take by default (`acp.timeout_s`).
pub const DEFAULT_ACP_TIMEOUT_S: u64 = 600;

/// The programs `shell` runs by default.
///
/// Why these and not others: the list is advice that keeps a model on the path of ordinary
/// engineering work, not a security boundary. Arguments are not confined (`cat /etc/passwd`
/// runs), and `cargo`/`rustc` execute code by design (build scripts, proc macros,
/// `-C linker=`). The wall is the OS sandbox (ADR-011, docs/SECURITY.md). Within that, the
/// list leaves out every program whose ordinary flags run other programs or code passed as
/// text, because those turn one allowed name into all of them:
/// - shells and interpreters (`sh`, `bash`, `python3`, `node`, `perl`, `awk`): code via `-c`/`-e`;
/// - `env`, `xargs`, `nice`, `timeout`, `nohup`, `stdbuf`: they run the program named next;
/// - `find` (`-exec`), `git` (`-c core.pager=…`, hooks, aliases), `sed` (`e` runs a command,
///   `w` writes any file), `sort` (`--compress-program`), `tar` (`--to-command`),
///   `rg` (`--pre`), `make` (recipes are shell);
/// - `rm`: deletion is irreversible and its arguments may be absolute paths outside the
///   workspace; an operator who wants it adds it to `allowed_commands`.
///
/// An operator adds programs with `shell.also_allow` (`[python3, pytest]` for Python work)
/// or replaces the list with `shell.allowed_commands`.
pub const DEFAULT_ALLOWED_COMMANDS: &[&str] = &[
    // Looking around.
    "ls",
    "cat",
    "head",
    "tail",
    "wc",
    "grep",
    "diff",
    "cmp",
    "cut",
    "uniq",
    "stat",
    "du",
    "file",
    "pwd",
    "basename",
    "dirname",
    "realpath",
    "sha256sum",
    "date",
    // Output and tests.
    "echo",
    "printf",
    "test",
    "true",
    "false",
    // Changing files (the workspace is the place; see above for why `rm` is not here).
    "mkdir",
    "touch",
    "cp",
    "mv",
    // The Rust toolchain.
    "cargo",
    "rustc",
    "rustfmt",
];

/// Default number of critic reviews before a rejected run ends `quality_gate_failed`.
pub const DEFAULT_MAX_REPAIR_ROUNDS: u32 = 3;
/// The built-in critic: a read-only specialist that reviews staged changes.
pub const DEFAULT_CRITIC: &str = "reviewer";

/// Who reviews a specialist's staged work, and how often it may try again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CriticSpec {
    /// The critic's specialist id (read-only, its finish schema has a boolean `approved`).
    pub specialist: String,
    /// Reviews at most: after this many rejections the run ends `quality_gate_failed`.
    pub max_repair_rounds: u32,
}

crate::words::closed_set! {
    /// How tool schemas reach the model (`tool_loading`).
    pub enum ToolLoading {
        /// Every tool's definition is sent with every model call.
        #[default]
        Eager = "eager",
        /// Only `search_tools`, `load_tool_schema` and `finish_task` are sent; a tool becomes
        /// callable once its schema is loaded, and stays so for the rest of the run.
        Lazy = "lazy",
    }
}

crate::words::closed_set! {
    /// How the fabric answers an MCP server's question to the user (`elicitation/create`):
    /// a run has no one to ask (issue #29).
    pub enum McpElicitation {
        /// Declined, with the reason recorded.
        #[default]
        Decline = "decline",
        /// Accepted with the defaults the server's form gives, when it gives one for every
        /// field it requires; otherwise declined.
        Defaults = "defaults",
    }
}

/// One MCP server a specialist uses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpServerSpec {
    /// Short name: letters, digits, `-` and single `_`; the middle part of `mcp__<server>__<tool>`.
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// When true the run waits for this server before the first model call and fails if it
    /// does not start; otherwise the run goes on without it.
    #[serde(default)]
    pub required: bool,
    /// Seconds it may take to start and list its tools.
    pub startup_timeout_s: u64,
    /// Seconds one tool call may take.
    pub call_timeout_s: u64,
    /// Whether the server may ask the run's model for a completion (`sampling/createMessage`):
    /// answered by the member's own model key, counted in the run's budget, recorded.
    #[serde(default = "default_true")]
    pub sampling: bool,
    /// How its questions to the user (`elicitation/create`) are answered.
    #[serde(default)]
    pub elicitation: McpElicitation,
    /// Whether a long-lived fabric may start this stdio server ahead of the run that uses it
    /// (`pool`, issue #45, ADR-117): a warm process that has served no session yet. `false`
    /// starts it when the run starts, as `fabric run` always does.
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    pub pool: bool,
}

fn default_true() -> bool {
    true
}

fn is_true(value: &bool) -> bool {
    *value
}

/// How an MCP server is reached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "transport", rename_all = "snake_case")]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        #[serde(default)]
        args: Vec<String>,
        /// Variables set for it (values written in the config).
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// Names of variables copied from the fabric's environment (tokens stay out of files).
        #[serde(default)]
        pass_env: Vec<String>,
        /// Its working directory.
        #[serde(default)]
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint.
    Http {
        /// The endpoint, e.g. `https://example.com/mcp`.
        url: String,
        /// Headers sent with every request (values written in the config).
        #[serde(default)]
        headers: BTreeMap<String, String>,
        /// Name of the variable holding a bearer token, sent as `Authorization: Bearer`.
        #[serde(default)]
        bearer_token_env: Option<String>,
        /// How `fabric mcp login` authorizes with OAuth; `None`: dynamic client registration
        /// and the scopes the server names (tokens are used whenever some are stored).
        #[serde(default)]
        oauth: Option<McpOAuth>,
    },
    /// A legacy HTTP+SSE endpoint (MCP 2024-11-05): an SSE stream from `url` names the
    /// address messages are posted to.
    Sse {
        /// The SSE endpoint, e.g. `http://localhost:3001/sse`.
        url: String,
        /// Headers sent with every request (values written in the config).
        #[serde(default)]
        headers: BTreeMap<String, String>,
        /// Name of the variable holding a bearer token, sent as `Authorization: Bearer`.
        #[serde(default)]
        bearer_token_env: Option<String>,
    },
}

crate::words::closed_set! {
    /// How the fabric gets a token for a server (`oauth.grant`).
    pub enum McpOAuthGrant {
        /// A person approves once with `fabric mcp login` (authorization code with PKCE).
        #[default]
        AuthorizationCode = "authorization_code",
        /// The fabric exchanges `client_id` and its secret for a token at each connection,
        /// with no person (SEP-1046's client credentials, for machine-to-machine servers).
        ClientCredentials = "client_credentials",
    }
}

/// The `oauth` block of a streamable HTTP server: what `fabric mcp login` sends the
/// authorization server (ADR-085). Tokens themselves are never in the config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpOAuth {
    /// A client id registered with the authorization server beforehand; without one the
    /// fabric registers itself (dynamic client registration) or uses `client_metadata_url`.
    #[serde(default)]
    pub client_id: Option<String>,
    /// Name of the variable holding the secret of `client_id`, for confidential clients.
    #[serde(default)]
    pub client_secret_env: Option<String>,
    /// The HTTPS address of the fabric's client ID metadata document, used as the client id
    /// when the authorization server supports such documents.
    #[serde(default)]
    pub client_metadata_url: Option<String>,
    /// Scopes to ask for; empty: those the server's 401 names, else all it supports.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The local port the authorization server redirects to (`http://127.0.0.1:PORT/callback`);
    /// `None`: any free port, for servers that accept any loopback port (RFC 8252).
    #[serde(default)]
    pub redirect_port: Option<u16>,
    /// How tokens are obtained.
    #[serde(default)]
    pub grant: McpOAuthGrant,
}

impl McpTransport {
    /// `stdio` or `http`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Stdio { .. } => "stdio",
            Self::Http { .. } => "http",
            Self::Sse { .. } => "sse",
        }
    }
}

/// The model-facing name of an MCP server's tool.
pub fn mcp_tool_name(server: &str, tool: &str) -> String {
    format!("{MCP_TOOL_PREFIX}{server}__{tool}")
}

/// Whether `name` matches a tool pattern such as `mcp__github__*` or `mcp__github__get_*`
/// (`*` matches any run of characters, including none).
pub fn pattern_matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return pattern == name;
    };
    if parts.len() == 1 {
        return pattern == name;
    }
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_with_stars_anywhere_in_the_tool_part() {
        assert!(pattern_matches("mcp__gh__*", "mcp__gh__create_issue"));
        assert!(pattern_matches("mcp__gh__get_*", "mcp__gh__get_me"));
        assert!(pattern_matches("mcp__gh__*_issue", "mcp__gh__create_issue"));
        assert!(pattern_matches("mcp__gh__*a*b", "mcp__gh__xaxb"));
        assert!(!pattern_matches("mcp__gh__get_*", "mcp__gh__create_issue"));
        assert!(!pattern_matches("mcp__gh__*", "mcp__ghx__a"));
        assert!(!pattern_matches("mcp__gh__a*a", "mcp__gh__a"));
        assert_eq!(mcp_tool_name("fs", "read"), "mcp__fs__read");
    }

    #[test]
    fn tooling_defaults_to_nothing_extra() {
        let t: Tooling = serde_json::from_str("{}").unwrap_or_default();
        assert_eq!(t, Tooling::default());
        assert_eq!(t.tool_loading, ToolLoading::Eager);
    }
}
