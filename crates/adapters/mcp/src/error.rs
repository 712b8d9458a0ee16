use fabric_core::Remedy;
use fabric_core::StoreError;
use fabric_core::search::SearchError;
use fabric_core::service::ServiceError;
use thiserror::Error;

/// What went wrong on either side of MCP.
///
/// As a client: why an MCP server could not be used. Every message names the server and
/// says what to check; it goes into the runlog's `mcp_server` event and, for required
/// servers, the run's reason.
///
/// As a server: why a tool call of `fabric mcp` failed. The message is the tool error the
/// client (often a model) reads, so it says exactly what was wrong; [`McpError::remedy`] says
/// what the caller must do.
#[derive(Debug, Error)]
pub enum McpError {
    /// The server's program could not be started.
    #[error(
        "MCP server `{server}`: cannot start `{command}`: {detail}; check `command` (is it installed and on PATH?)"
    )]
    Spawn {
        /// The server.
        server: String,
        /// The program.
        command: String,
        /// The system's words.
        detail: String,
    },
    /// A variable named by `pass_env` or `bearer_token_env` is not set.
    #[error(
        "MCP server `{server}`: environment variable `{name}` is not set; set it, or remove it from the server's config"
    )]
    MissingEnv {
        /// The server.
        server: String,
        /// The variable.
        name: String,
    },
    /// A header in the config is not a valid HTTP header.
    #[error("MCP server `{server}`: header `{name}` is not a valid HTTP header")]
    BadHeader {
        /// The server.
        server: String,
        /// The header.
        name: String,
    },
    /// The MCP handshake failed.
    #[error("MCP server `{server}` did not complete the MCP handshake: {detail}")]
    Initialize {
        /// The server.
        server: String,
        /// What went wrong, with the last lines the server wrote to stderr.
        detail: String,
    },
    /// `tools/list` failed.
    #[error("MCP server `{server}` could not list its tools: {detail}")]
    ListTools {
        /// The server.
        server: String,
        /// The protocol error.
        detail: String,
    },
    /// Starting took longer than `startup_timeout_s`.
    #[error(
        "MCP server `{server}` did not start within {seconds} s (`startup_timeout_s`); the run goes on without its tools{tail}"
    )]
    StartupTimeout {
        /// The server.
        server: String,
        /// The limit.
        seconds: u64,
        /// The last lines the server wrote to stderr, if any.
        tail: String,
    },
    /// The server wants OAuth and no token for it is stored, or the stored one was refused
    /// and could not be refreshed.
    #[error(
        "MCP server `{server}` requires authorization (it answered 401) and the fabric has no token it accepts; run `fabric mcp login {server}`"
    )]
    AuthRequired {
        /// The server.
        server: String,
    },
    /// The server refused the token's scopes for a request (403 `insufficient_scope`).
    #[error(
        "MCP server `{server}` refused the token's scopes (403 insufficient_scope; it asks for `{scope}`); run `fabric mcp login {server}` again to grant them"
    )]
    InsufficientScope {
        /// The server.
        server: String,
        /// The scopes the server named.
        scope: String,
    },
    /// The stored tokens could not be read or used (a damaged file, the authorization
    /// server unreachable while refreshing).
    #[error(
        "MCP server `{server}`: its stored OAuth tokens cannot be used: {detail}; run `fabric mcp login {server}` again"
    )]
    TokensUnusable {
        /// The server.
        server: String,
        /// What went wrong.
        detail: String,
    },
    /// `fabric mcp login` failed.
    #[error("MCP server `{server}`: login failed: {detail}")]
    Login {
        /// The server.
        server: String,
        /// What went wrong, from discovery to the token exchange.
        detail: String,
    },
    /// A tool's arguments do not fit it.
    #[error("{0}")]
    InvalidArguments(String),
    /// A tool this server does not offer.
    #[error("unknown tool `{0}`")]
    UnknownTool(String),
    /// The run service refused the task, or the run ended inside the fabric.
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// The store failed, or has no such run.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A search was refused or failed.
    #[error(transparent)]
    Search(#[from] SearchError),
    /// An answer could not be written as JSON.
    #[error("the answer could not be written as JSON: {0}")]
    Answer(String),
    /// The MCP handshake on stdio failed.
    #[error("MCP handshake on stdio failed: {0}")]
    Handshake(String),
    /// The stdio server stopped with an error.
    #[error("the MCP server stopped: {0}")]
    Stopped(String),
}

impl McpError {
    /// What the caller must do: fix its arguments, try again later (a server that did not
    /// start in time, a busy service), or report it.
    pub fn remedy(&self) -> Remedy {
        match self {
            Self::MissingEnv { .. }
            | Self::BadHeader { .. }
            | Self::InvalidArguments(_)
            | Self::UnknownTool(_) => Remedy::FixInput,
            Self::StartupTimeout { .. } => Remedy::Retry,
            Self::AuthRequired { .. }
            | Self::InsufficientScope { .. }
            | Self::TokensUnusable { .. }
            | Self::Login { .. } => Remedy::FixInput,
            Self::Service(e) => e.remedy(),
            Self::Store(e) => e.remedy(),
            Self::Search(e) => e.remedy(),
            Self::Spawn { .. }
            | Self::Initialize { .. }
            | Self::ListTools { .. }
            | Self::Answer(_)
            | Self::Handshake(_)
            | Self::Stopped(_) => Remedy::Report,
        }
    }
}
