use fabric_domain::SpecialistSpec;
pub use fabric_domain::{
    Backend, BudgetLimits, ComplexityRouting, DelegationWorkspace, Routing, SearchProvider,
    TaskForceMode,
};
pub use fabric_domain::{
    DEFAULT_MAX_CONCURRENT_REQUESTS, DEFAULT_OLLAMA_PARALLEL, FallbackPolicy, ModelConfig, Price,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// What one model key may spend per day (`daily_budget:`), across every run and process
/// sharing the store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct DailyLimit {
    /// Tokens (prompt and completion) per day.
    pub max_tokens: Option<u64>,
    /// US dollars per day (needs the key's `price_per_mtok`).
    pub max_cost_usd: Option<f64>,
}

/// Where a day starts and ends for daily budgets (`daily_budget_timezone`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DayZone {
    /// The machine's zone (`TZ`, else `/etc/localtime`).
    Local,
    /// UTC.
    Utc,
    /// A fixed offset east of UTC, in seconds (`+02:00`).
    Offset(i32),
}

/// Settings of the `shell` tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShellConfig {
    /// Programs the shell tool may start: the built-in list or `allowed_commands`, plus
    /// `also_allow` (what `config show` prints is what runs get).
    pub allowed_commands: Vec<String>,
    /// Default timeout of one command.
    pub timeout_s: u64,
    /// Environment variables passed to tools, by name, from the fabric's own environment.
    pub pass_env: Vec<String>,
}

/// Settings of the `web_search` tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WebSearchConfig {
    /// The service.
    pub provider: SearchProvider,
    /// Its base URL (SearXNG: the instance; Brave: `https://api.search.brave.com`).
    pub base_url: String,
    /// Name of the environment variable holding the API key (Brave).
    pub api_key_env: Option<String>,
    /// Seconds one search may take.
    pub timeout_s: u64,
    /// Results returned when the call does not say.
    pub max_results: u32,
}

/// Settings of the `fetch_url` tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FetchUrlConfig {
    /// Seconds one fetch may take, redirects and body included.
    pub timeout_s: u64,
    /// Bytes downloaded at most; the rest is not read.
    pub max_download_bytes: u64,
    /// Characters of text returned at most.
    pub max_text_chars: u64,
    /// Redirects followed at most.
    pub max_redirects: u32,
}

/// A remote A2A agent (`agents.<name>`): a specialist that names it in `delegates` gets the
/// tool `agent__<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemoteAgentSettings {
    /// The agent's base URL; its card is at `{url}/.well-known/agent-card.json`.
    pub url: String,
    /// The environment variable holding its bearer token, if it needs one.
    pub token_env: Option<String>,
    /// The most one task may take, in seconds (the run's time budget may cut it shorter).
    pub timeout_s: u64,
}

/// Limits on sub-agents (`delegates`): every run of one tree shares them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DelegationConfig {
    /// How deep delegation may go: 2 lets a run start children, and them grandchildren.
    pub max_depth: u32,
    /// Tokens the whole tree may use; `None`: no token limit.
    pub max_tokens: Option<u64>,
    /// Seconds the whole tree may take; `None`: no time limit.
    pub timeout_s: Option<u64>,
    /// Where children work.
    pub workspace: DelegationWorkspace,
}

/// Where a specialist's definition came from, lowest precedence first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SpecialistSource {
    /// Compiled into the fabric.
    BuiltIn,
    /// A markdown file in a specialists directory.
    File {
        /// The file.
        path: PathBuf,
    },
    /// The `specialists:` map of the config file.
    Config {
        /// The config file.
        path: PathBuf,
    },
}

impl std::fmt::Display for SpecialistSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BuiltIn => f.write_str("built-in"),
            Self::File { path } => write!(f, "{}", path.display()),
            Self::Config { path } => write!(f, "config {}", path.display()),
        }
    }
}

/// How one specialist was assembled: every layer that defined or changed it, in order, and
/// what was noticed on the way (foreign keys ignored, tools without an equivalent).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SpecialistOrigin {
    /// The layers, lowest precedence first; the last one is where it now comes from.
    pub sources: Vec<SpecialistSource>,
    /// Things the user should know, e.g. "Claude Code tool `Grep` has no equivalent".
    pub warnings: Vec<String>,
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settings {
    /// Models by key.
    pub models: BTreeMap<String, ModelConfig>,
    /// The model key runs use unless told otherwise.
    pub default_model_key: String,
    /// All specialists: built-in ones, then those from the file.
    // Behind `Arc` so every run shares the one definition instead of cloning its prompt and
    // finish schema (docs/BENCHMARKS.md, memory per run in flight).
    pub specialists: Vec<Arc<SpecialistSpec>>,
    /// The specialist used when the task names none.
    pub default_specialist: String,
    /// Model key used to route prompts to specialists.
    pub routing_model_key: String,
    /// How task forces run.
    pub task_force_mode: TaskForceMode,
    /// Most members of a parallel task force running at once.
    pub task_force_max_parallel: u32,
    /// How prompts are routed to specialists when the run names none.
    pub routing: Routing,
    /// Which model key a run uses by how complex its task looks, when neither the request
    /// nor the specialist names one (docs/QUALITY.md); `None`: `default_model_key`.
    pub complexity_routing: Option<ComplexityRouting>,
    /// The cloud model a step falls back to when the local one fails by quality
    /// (docs/QUALITY.md); `None`: no fallback.
    pub cloud_fallback: Option<FallbackPolicy>,
    /// Start the local model server when it does not answer.
    pub local_llm_ensure_available: bool,
    /// The command that starts it.
    pub local_llm_start_cmd: Vec<String>,
    /// How long to wait for it.
    pub local_llm_start_timeout_s: u64,
    /// Pull a missing model.
    pub auto_pull_if_missing: bool,
    /// Which model to pull when none is present.
    pub auto_pull_model: String,
    /// Step limit per specialist.
    pub max_steps: u32,
    /// Whether tools may use the network, unless the run says otherwise.
    pub network_allowed: bool,
    /// The shell tool.
    pub shell: ShellConfig,
    /// Where runs are stored.
    pub workspace: PathBuf,
    /// The HTTP API (`fabric serve`).
    pub server: crate::ServerConfig,
    /// Traces of runs over OTLP (`telemetry:`).
    pub telemetry: crate::TelemetryConfig,
    /// The file the settings came from, if any.
    pub source: Option<PathBuf>,
    /// The directories markdown specialists were read from, lowest precedence first (empty
    /// when loaded without them, see [`Settings::load`]).
    pub specialist_dirs: Vec<PathBuf>,
    /// Where each specialist came from, by id.
    pub specialist_origins: BTreeMap<String, SpecialistOrigin>,
    /// The `web_search` tool.
    pub web_search: WebSearchConfig,
    /// The `fetch_url` tool.
    pub fetch_url: FetchUrlConfig,
    /// The OS sandbox of tool processes.
    pub sandbox: crate::SandboxConfig,
    /// Workspace paths the file tools never write (`.git`, the fabric's own files).
    pub protected_paths: Vec<String>,
    /// What the network tools may reach.
    pub network: crate::NetworkConfig,
    /// A project run's instructions from its `AGENTS.md` files (`instructions:`, issue #43).
    pub instructions: InstructionsConfig,
    /// How a long-lived fabric keeps MCP servers warm (`mcp_pool:`, issue #45).
    pub mcp_pool: McpPoolConfig,
    /// Directories whose repositories' hooks and MCP servers run in any version, without
    /// `fabric trust` (`trusted_projects:`, issue #43).
    pub trusted_projects: Vec<PathBuf>,
    /// Sub-agent limits.
    pub delegation: DelegationConfig,
    /// Remote A2A agents a specialist may hand tasks to (`agents:`), by name.
    pub agents: BTreeMap<String, RemoteAgentSettings>,
    /// What a run and the runs it delegates to may spend together (`budget:`).
    pub budget: BudgetLimits,
    /// Per specialist, the limits that replace `budget:` for the runs it leads.
    pub specialist_budgets: BTreeMap<String, BudgetLimits>,
    /// What each model key may spend per day (`daily_budget:`).
    pub daily_budget: BTreeMap<String, DailyLimit>,
    /// Where the day of `daily_budget` begins (`daily_budget_timezone`).
    pub daily_budget_timezone: DayZone,
    /// How turns left out to fit a context window are stood for (`context_compaction`):
    /// `false` lists what they called, `true` has the model summarise them.
    pub summarize_compaction: bool,
    /// Keys that still work but have a newer spelling, as messages for the person.
    #[serde(skip)]
    pub deprecations: Vec<String>,
    /// Where the run catalogue lives (`store:`, `FABRIC_STORE_URL`).
    pub store: crate::StoreConfig,
    /// Semantic search over past runs (`run_index:`).
    pub run_index: crate::RunIndexConfig,
    /// Lifecycle hooks in Claude Code's settings shape (`hooks:`, issue #43, docs/HOOKS.md).
    pub hooks: fabric_domain::hooks::HooksConfig,
}

impl Settings {
    /// The specialist with this id.
    pub fn specialist(&self, id: &str) -> Option<&SpecialistSpec> {
        self.specialists
            .iter()
            .find(|s| s.id == id)
            .map(Arc::as_ref)
    }

    /// The specialist with this id, shared: what a run holds for its whole life.
    pub fn shared_specialist(&self, id: &str) -> Option<Arc<SpecialistSpec>> {
        self.specialists.iter().find(|s| s.id == id).cloned()
    }

    /// The model under this key.
    pub fn model(&self, key: &str) -> Option<&ModelConfig> {
        self.models.get(key)
    }

    /// The keys of all models, for messages.
    pub fn model_keys(&self) -> Vec<&str> {
        self.models.keys().map(String::as_str).collect()
    }

    /// Where the specialist with this id came from.
    pub fn specialist_origin(&self, id: &str) -> Option<&SpecialistOrigin> {
        self.specialist_origins.get(id)
    }

    /// The ids of all specialists, for messages.
    pub fn specialist_ids(&self) -> Vec<&str> {
        self.specialists.iter().map(|s| s.id.as_str()).collect()
    }

    /// Keys that are set away from their defaults but take effect only with features not
    /// built yet; `fabric config validate` warns about them instead of ignoring them silently.
    /// Empty since issue #3 made routing, task forces, bootstrap and auto-pull effective; kept
    /// for the keys of features to come.
    pub fn inert_keys(&self) -> Vec<&'static str> {
        Vec::new()
    }
}

/// `instructions:`: how much of a project's `AGENTS.md` files a project run's system prompt
/// takes, and whether the user's own file is read (docs/INSTRUCTIONS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct InstructionsConfig {
    /// The budget of their text in bytes; 0 reads none.
    pub max_bytes: usize,
    /// Whether `~/.config/agent-fabric/AGENTS.md` is read too.
    pub user_file: bool,
}

impl Default for InstructionsConfig {
    fn default() -> Self {
        Self {
            max_bytes: fabric_domain::instructions::DEFAULT_MAX_BYTES,
            user_file: true,
        }
    }
}

/// `mcp_pool:`: how many warm processes a long-lived fabric keeps ready per MCP server
/// definition, and how long one waits unused before it is stopped (docs/MCP.md, ADR-117).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct McpPoolConfig {
    /// Warm processes kept per definition; 0 turns pooling off.
    pub size: usize,
    /// Seconds a warm process waits for a run before it is stopped.
    pub idle_timeout_s: u64,
}

impl Default for McpPoolConfig {
    fn default() -> Self {
        Self {
            size: 2,
            idle_timeout_s: 300,
        }
    }
}

impl Settings {
    /// The project's markdown specialists (`<workspace>/specialists/*.md`) that declare MCP
    /// servers, by id and file: what a repository ships that would run, waiting for the
    /// user's trust (issue #43, [`crate::trust`]).
    pub fn project_mcp_specialists(&self) -> Vec<(String, PathBuf)> {
        let dir = self.workspace.join("specialists");
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        self.specialists
            .iter()
            .filter(|s| !s.tooling.mcp_servers.is_empty())
            .filter_map(|s| match self.specialist_origin(&s.id)?.sources.last()? {
                SpecialistSource::File { path } => {
                    let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
                    path.starts_with(&dir).then(|| (s.id.clone(), path))
                }
                _ => None,
            })
            .collect()
    }
}
