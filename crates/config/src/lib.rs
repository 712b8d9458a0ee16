//! `fabric-config`: agent-fabric's settings, loaded once and validated up front.
//!
//! Precedence, lowest first: built-in defaults < the file named by `--config` or
//! `FABRIC_CONFIG_PATH` (JSON or YAML, chosen by extension) < environment < command-line
//! flags. This crate does the first two; the binary applies the last two, because it owns
//! the CLI (except `FABRIC_STORE_URL`, which [`LoadOptions::new`] reads, since no flag
//! names the store). The result is a plain [`Settings`] value passed explicitly (no global).
//!
//! Key decision: a mistake in the file is an error that names the key and what is allowed
//! (`models.fast.temperature: must be between 0 and 2, got 7`), never a silent default. An
//! unknown key is a mistake. Both formats are parsed to one JSON value first so the key path
//! is reported the same way for both. It depends only on `fabric-domain` (specialists are
//! domain data) and does file I/O only in [`Settings::load`].

// First, so its macros are in scope in the modules below.
#[macro_use]
mod overlay;
mod builtins;
mod defaults;
mod dirs;
mod error;
mod load;
pub use load::parse_document;
mod markdown;
mod mcp;
mod raw;
mod security;
mod server;
mod settings;
mod store;
mod switch;
mod telemetry;
pub mod trust;

pub use builtins::{
    builtin_specialists, critic_finish_schema, engineering_finish_schema, research_finish_schema,
};
pub use dirs::{
    LoadOptions, chat_history_file, mcp_token_dir, trust_file, user_instructions_file,
    user_specialist_dir,
};
pub use error::ConfigError;
pub use security::{NetworkConfig, SandboxCgroup, SandboxConfig, SandboxLimits, SandboxMode};
pub use server::ServerConfig;
pub use settings::{
    Backend, BudgetLimits, ComplexityRouting, DEFAULT_MAX_CONCURRENT_REQUESTS,
    DEFAULT_OLLAMA_PARALLEL, DailyLimit, DayZone, DelegationConfig, DelegationWorkspace,
    FallbackPolicy, FetchUrlConfig, InstructionsConfig, McpPoolConfig, ModelConfig, Price,
    RemoteAgentSettings, Routing, SearchProvider, Settings, ShellConfig, SpecialistOrigin,
    SpecialistSource, TaskForceMode, WebSearchConfig,
};
pub use store::{DEFAULT_EMBEDDING_MODEL, RunIndexConfig, STORE_URL_ENV, StoreConfig};
pub use telemetry::TelemetryConfig;
