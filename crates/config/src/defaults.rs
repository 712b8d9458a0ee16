//! The built-in configuration: what a user gets with no config file at all.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::builtins::builtin_specialists;
use crate::settings::{
    Backend, FetchUrlConfig, ModelConfig, Routing, SearchProvider, Settings, ShellConfig,
    SpecialistOrigin, SpecialistSource, TaskForceMode, WebSearchConfig,
};

/// SearXNG's address in its own container image's default setup.
pub(crate) const SEARXNG_URL: &str = "http://localhost:8080";
/// The Brave Search API.
pub(crate) const BRAVE_URL: &str = "https://api.search.brave.com";
/// The environment variable the Brave key is read from unless `api_key_env` says otherwise.
pub(crate) const BRAVE_KEY_ENV: &str = "BRAVE_SEARCH_API_KEY";

const OLLAMA_URL: &str = "http://localhost:11434/v1";

pub(crate) fn ollama_model(model: &str, max_tokens: u32) -> ModelConfig {
    ModelConfig {
        max_tokens,
        ..ModelConfig::new(Backend::Ollama, OLLAMA_URL, model)
    }
}

impl Settings {
    /// The built-in settings.
    pub fn defaults() -> Self {
        let mut models = BTreeMap::new();
        models.insert("fast".to_owned(), ollama_model("qwen2.5:7b", 1200));
        models.insert("quality".to_owned(), ollama_model("qwen2.5:14b", 2400));
        let specialists = builtin_specialists();
        Self {
            models,
            default_model_key: "quality".to_owned(),
            specialist_origins: specialists
                .iter()
                .map(|s| {
                    let origin = SpecialistOrigin {
                        sources: vec![SpecialistSource::BuiltIn],
                        warnings: Vec::new(),
                    };
                    (s.id.clone(), origin)
                })
                .collect(),
            specialists: specialists.into_iter().map(std::sync::Arc::new).collect(),
            default_specialist: "engineering".to_owned(),
            routing_model_key: "fast".to_owned(),
            task_force_mode: TaskForceMode::Sequential,
            task_force_max_parallel: 2,
            routing: Routing::Keyword,
            complexity_routing: None,
            cloud_fallback: None,
            local_llm_ensure_available: true,
            local_llm_start_cmd: vec!["ollama".to_owned(), "serve".to_owned()],
            local_llm_start_timeout_s: 90,
            auto_pull_if_missing: true,
            auto_pull_model: "qwen2.5:7b".to_owned(),
            max_steps: 40,
            network_allowed: false,
            shell: ShellConfig {
                allowed_commands: fabric_domain::DEFAULT_ALLOWED_COMMANDS
                    .iter()
                    .map(|c| (*c).to_owned())
                    .collect(),
                timeout_s: 120,
                pass_env: Vec::new(),
            },
            workspace: PathBuf::from(".fabric"),
            server: crate::ServerConfig::default(),
            telemetry: crate::TelemetryConfig::default(),
            source: None,
            specialist_dirs: Vec::new(),
            web_search: WebSearchConfig {
                provider: SearchProvider::Searxng,
                base_url: SEARXNG_URL.to_owned(),
                api_key_env: None,
                timeout_s: 20,
                max_results: 8,
            },
            fetch_url: FetchUrlConfig {
                timeout_s: 30,
                max_download_bytes: 2 * 1024 * 1024,
                // About 5 000 tokens: enough for an article, small enough for a 16k context.
                max_text_chars: 20_000,
                max_redirects: 5,
            },
            sandbox: crate::SandboxConfig::default(),
            protected_paths: crate::security::default_protected_paths(),
            network: crate::NetworkConfig::default(),
            instructions: crate::InstructionsConfig::default(),
            mcp_pool: crate::McpPoolConfig::default(),
            trusted_projects: Vec::new(),
            agents: Default::default(),
            delegation: crate::settings::DelegationConfig {
                max_depth: fabric_domain::DEFAULT_MAX_DELEGATION_DEPTH,
                max_tokens: None,
                timeout_s: None,
                workspace: crate::settings::DelegationWorkspace::Separate,
            },
            budget: crate::BudgetLimits::default(),
            specialist_budgets: Default::default(),
            daily_budget: Default::default(),
            daily_budget_timezone: crate::DayZone::Local,
            summarize_compaction: false,
            deprecations: Vec::new(),
            store: crate::StoreConfig::default(),
            run_index: crate::RunIndexConfig::default(),
            hooks: Default::default(),
        }
    }
}
