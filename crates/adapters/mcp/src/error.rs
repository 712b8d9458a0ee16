use thiserror::Error;

/// Why an MCP server could not be used. Every message names the server and says what to
/// check; it goes into the runlog's `mcp_server` event and, for required servers, the run's
/// reason.
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
}
