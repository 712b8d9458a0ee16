//! The file's shape: every key optional, unknown keys refused.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    pub(crate) models: Option<BTreeMap<String, RawModel>>,
    pub(crate) default_model_key: Option<String>,
    // `packs` is the seed's older name for the same map.
    #[serde(alias = "packs")]
    pub(crate) specialists: Option<BTreeMap<String, RawSpecialist>>,
    pub(crate) default_specialist: Option<String>,
    pub(crate) routing_model_key: Option<String>,
    pub(crate) task_force_mode: Option<fabric_domain::TaskForceMode>,
    pub(crate) task_force_max_parallel: Option<u32>,
    pub(crate) routing: Option<fabric_domain::Routing>,
    pub(crate) complexity_routing: Option<RawComplexityRouting>,
    pub(crate) cloud_fallback: Option<RawCloudFallback>,
    pub(crate) budget: Option<RawBudget>,
    pub(crate) daily_budget: Option<BTreeMap<String, RawDailyLimit>>,
    pub(crate) daily_budget_timezone: Option<String>,
    pub(crate) context_compaction: Option<fabric_domain::ContextCompaction>,
    pub(crate) local_llm_ensure_available: Option<bool>,
    pub(crate) local_llm_start_cmd: Option<Vec<String>>,
    pub(crate) local_llm_start_timeout_s: Option<u64>,
    pub(crate) auto_pull_if_missing: Option<bool>,
    pub(crate) auto_pull_model: Option<String>,
    pub(crate) max_steps: Option<u32>,
    pub(crate) network_allowed: Option<bool>,
    pub(crate) shell: Option<RawShell>,
    pub(crate) workspace: Option<String>,
    pub(crate) specialist_dirs: Option<Vec<String>>,
    pub(crate) web_search: Option<RawWebSearch>,
    pub(crate) fetch_url: Option<RawFetchUrl>,
    pub(crate) server: Option<crate::server::RawServer>,
    pub(crate) telemetry: Option<crate::telemetry::RawTelemetry>,
    #[serde(default, deserialize_with = "crate::switch::optional")]
    pub(crate) sandbox: Option<fabric_domain::SandboxMode>,
    pub(crate) sandbox_limits: Option<crate::security::RawLimits>,
    pub(crate) sandbox_read_paths: Option<Vec<String>>,
    pub(crate) protected_paths: Option<Vec<String>>,
    pub(crate) network: Option<crate::security::RawNetwork>,
    pub(crate) delegation: Option<RawDelegation>,
    pub(crate) agents: Option<BTreeMap<String, RawAgent>>,
    pub(crate) store: Option<crate::store::RawStore>,
    pub(crate) run_index: Option<crate::store::RawRunIndex>,
    pub(crate) instructions: Option<RawInstructions>,
    pub(crate) mcp_pool: Option<RawMcpPool>,
    pub(crate) trusted_projects: Option<Vec<String>>,
    /// Claude Code's `hooks` settings, as they are (issue #43); read by the domain.
    pub(crate) hooks: Option<Value>,
}

/// `mcp_pool:` as written (issue #45).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMcpPool {
    pub(crate) size: Option<u64>,
    pub(crate) idle_timeout_s: Option<u64>,
}

/// `instructions:` as written (issue #43).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawInstructions {
    pub(crate) max_bytes: Option<u64>,
    pub(crate) user_file: Option<bool>,
}

/// One key of `agents:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAgent {
    pub(crate) url: Option<String>,
    pub(crate) token_env: Option<String>,
    pub(crate) timeout_s: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDelegation {
    pub(crate) max_depth: Option<u32>,
    pub(crate) max_tokens: Option<u64>,
    pub(crate) timeout_s: Option<u64>,
    pub(crate) workspace: Option<fabric_domain::DelegationWorkspace>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWebSearch {
    pub(crate) provider: Option<fabric_domain::SearchProvider>,
    pub(crate) base_url: Option<String>,
    pub(crate) api_key_env: Option<String>,
    pub(crate) timeout_s: Option<u64>,
    pub(crate) max_results: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFetchUrl {
    pub(crate) timeout_s: Option<u64>,
    pub(crate) max_download_bytes: Option<u64>,
    pub(crate) max_text_chars: Option<u64>,
    pub(crate) max_redirects: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawModel {
    pub(crate) base_url: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) backend: Option<fabric_domain::Backend>,
    pub(crate) api_key_env: Option<String>,
    pub(crate) temperature: Option<f32>,
    pub(crate) top_p: Option<f32>,
    pub(crate) max_tokens: Option<u32>,
    pub(crate) timeout_s: Option<u64>,
    pub(crate) num_ctx: Option<u32>,
    pub(crate) max_retries: Option<u32>,
    pub(crate) price_per_mtok: Option<RawPrice>,
    pub(crate) tool_call_repair: Option<bool>,
    pub(crate) context_window: Option<u64>,
    pub(crate) max_concurrent_requests: Option<u64>,
    #[serde(default, deserialize_with = "crate::switch::optional")]
    pub(crate) constrained_decoding: Option<fabric_domain::ConstrainedDecoding>,
    pub(crate) response_chaining: Option<fabric_domain::ResponseChaining>,
    pub(crate) vision: Option<bool>,
}

/// `price_per_mtok:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPrice {
    pub(crate) input: Option<f64>,
    pub(crate) output: Option<f64>,
}

/// `budget:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBudget {
    pub(crate) max_tokens: Option<u64>,
    pub(crate) max_cost_usd: Option<f64>,
    pub(crate) max_wall_s: Option<u64>,
}

/// One key of `daily_budget:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDailyLimit {
    pub(crate) max_tokens: Option<u64>,
    pub(crate) max_cost_usd: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSpecialist {
    pub(crate) description: Option<String>,
    pub(crate) keywords: Option<Vec<String>>,
    pub(crate) capabilities: Option<Vec<String>>,
    pub(crate) system_prompt: Option<String>,
    pub(crate) tools: Option<Vec<String>>,
    pub(crate) finish_schema: Option<Value>,
    pub(crate) model_key: Option<String>,
    pub(crate) may_write: Option<bool>,
    pub(crate) needs_network: Option<bool>,
    pub(crate) limitations: Option<Vec<String>>,
    pub(crate) container_image: Option<String>,
    pub(crate) mcp_servers: Option<Vec<crate::mcp::RawMcpServer>>,
    pub(crate) acp: Option<RawAcpAgent>,
    pub(crate) tool_loading: Option<fabric_domain::ToolLoading>,
    pub(crate) delegates: Option<Vec<String>>,
    pub(crate) critic: Option<String>,
    pub(crate) max_repair_rounds: Option<u64>,
    pub(crate) budget: Option<RawBudget>,
    pub(crate) repeat_limit: Option<u64>,
    pub(crate) require_finish: Option<bool>,
    pub(crate) approval: Option<fabric_domain::ApprovalPolicy>,
    pub(crate) project_instructions: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawShell {
    pub(crate) allowed_commands: Option<Vec<String>>,
    pub(crate) also_allow: Option<Vec<String>>,
    pub(crate) timeout_s: Option<u64>,
    pub(crate) pass_env: Option<Vec<String>>,
}

/// `complexity_routing:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawComplexityRouting {
    pub(crate) threshold: Option<u64>,
    pub(crate) simple: Option<String>,
    pub(crate) complex: Option<String>,
}

/// `cloud_fallback:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCloudFallback {
    pub(crate) model_key: Option<String>,
    pub(crate) policy: Option<Vec<fabric_domain::FallbackReason>>,
    pub(crate) max_per_run: Option<u64>,
}

/// A specialist's `acp:` as written: the ACP agent that does its work (issue #44).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAcpAgent {
    pub(crate) command: String,
    #[serde(default)]
    pub(crate) args: Vec<String>,
    #[serde(default)]
    pub(crate) env: std::collections::BTreeMap<String, String>,
    pub(crate) timeout_s: Option<u64>,
}
