use fabric_domain::SpecialistSpec;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Which wire protocol a model server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// Ollama: its native chat API (so `num_ctx` can be set) plus model listing.
    Ollama,
    /// Any OpenAI-compatible Chat Completions server (vLLM, llama.cpp, LM Studio, cloud).
    Openai,
}

/// One model the fabric can use, under a key such as `fast` or `quality`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelConfig {
    /// Server base URL, e.g. `http://localhost:11434/v1`.
    pub base_url: String,
    /// Model name on the server.
    pub model: String,
    /// Wire protocol.
    pub backend: Backend,
    /// Name of the environment variable holding the API key, if the server needs one.
    pub api_key_env: Option<String>,
    /// Sampling temperature.
    pub temperature: f32,
    /// Nucleus sampling.
    pub top_p: f32,
    /// Most tokens generated per call.
    pub max_tokens: u32,
    /// Seconds to wait for one answer.
    pub timeout_s: u64,
    /// Ollama context size; large enough that tool definitions are never cut.
    pub num_ctx: u32,
    /// Retries on connection errors, 429 and 5xx.
    pub max_retries: u32,
}

/// How the specialists of a task force work together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskForceMode {
    /// One after another, each seeing the previous one's result.
    Sequential,
    /// At the same time, results merged.
    Parallel,
}

/// Settings of the `shell` tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShellConfig {
    /// Programs the shell tool may start; `None` keeps the built-in list.
    pub allowed_commands: Option<Vec<String>>,
    /// Default timeout of one command.
    pub timeout_s: u64,
    /// Environment variables passed to tools, by name, from the fabric's own environment.
    pub pass_env: Vec<String>,
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settings {
    /// Models by key.
    pub models: BTreeMap<String, ModelConfig>,
    /// The model key runs use unless told otherwise.
    pub default_model_key: String,
    /// All specialists: built-in ones, then those from the file.
    pub specialists: Vec<SpecialistSpec>,
    /// The specialist used when the task names none.
    pub default_specialist: String,
    /// Model key used to route prompts to specialists.
    pub routing_model_key: String,
    /// How task forces run.
    pub task_force_mode: TaskForceMode,
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
    /// The file the settings came from, if any.
    pub source: Option<PathBuf>,
}

impl Settings {
    /// The specialist with this id.
    pub fn specialist(&self, id: &str) -> Option<&SpecialistSpec> {
        self.specialists.iter().find(|s| s.id == id)
    }

    /// The model under this key.
    pub fn model(&self, key: &str) -> Option<&ModelConfig> {
        self.models.get(key)
    }

    /// The keys of all models, for messages.
    pub fn model_keys(&self) -> Vec<&str> {
        self.models.keys().map(String::as_str).collect()
    }

    /// The ids of all specialists, for messages.
    pub fn specialist_ids(&self) -> Vec<&str> {
        self.specialists.iter().map(|s| s.id.as_str()).collect()
    }

    /// Keys that are set away from their defaults but take effect only with features not
    /// built yet; `fabric config validate` warns about them instead of ignoring them silently.
    pub fn inert_keys(&self) -> Vec<&'static str> {
        let defaults = Self::defaults();
        let mut out = Vec::new();
        if self.routing_model_key != defaults.routing_model_key {
            out.push("routing_model_key");
        }
        if self.task_force_mode != defaults.task_force_mode {
            out.push("task_force_mode");
        }
        if self.local_llm_ensure_available != defaults.local_llm_ensure_available
            || self.local_llm_start_cmd != defaults.local_llm_start_cmd
            || self.local_llm_start_timeout_s != defaults.local_llm_start_timeout_s
        {
            out.push("local_llm_*");
        }
        if self.auto_pull_if_missing != defaults.auto_pull_if_missing
            || self.auto_pull_model != defaults.auto_pull_model
        {
            out.push("auto_pull_*");
        }
        out
    }
}
