//! The binary's side of preparing a run (issue #28, step 2): the settings turned once into
//! core's plain [`PreparePolicy`], and the adapters behind core's preparation ports: the
//! model servers ([`ConfigModels`], over `bootstrap`), a client per model key
//! ([`ConfigChats`]) and the specialists' tools and sandbox ([`tools::ConfigTools`]).
//! The policy itself (model keys, complexity, daily fallback, budgets, critics, the cloud
//! fallback) lives in `fabric_core::service::prepare`.

pub(crate) mod tools;

use anyhow::Context;
use async_trait::async_trait;
use fabric_config::{ModelConfig, Settings};
use fabric_core::ChatClient;
use fabric_core::budget::Price;
use fabric_core::budget::daily::DailyBudget;
use fabric_core::engine::FallbackPolicy;
use fabric_core::models::ModelCandidate;
use fabric_core::ports::{ChatFactory, ModelResolver, SetupError};
use fabric_core::search::RunSearch;
use fabric_core::service::prepare::{
    BudgetLimits, CloudFallbackPolicy, ComplexityPolicy, ModelPolicy, Preparation, PreparePolicy,
    PreparePorts,
};
use std::sync::Arc;

use crate::bootstrap;

/// The fabric's preparation of runs under `settings`, with live model clients.
pub(crate) fn preparation(
    settings: &Settings,
    search: &RunSearch,
    daily: Arc<DailyBudget>,
) -> Preparation {
    let chats = Arc::new(ConfigChats {
        settings: settings.clone(),
        clients: ChatClients::default(),
    });
    preparation_with(settings, search, daily, chats)
}

/// [`preparation`] with the clients `chats` makes (offline runs answer from a queue).
pub(crate) fn preparation_with(
    settings: &Settings,
    search: &RunSearch,
    daily: Arc<DailyBudget>,
    chats: Arc<dyn ChatFactory>,
) -> Preparation {
    let ports = PreparePorts {
        models: Arc::new(ConfigModels(settings.clone())),
        chats,
        tools: Arc::new(tools::ConfigTools {
            settings: settings.clone(),
            search: search.clone(),
            tools: tools::SharedTools::default(),
            sandboxes: tools::SharedSandboxes::default(),
        }),
        daily,
    };
    Preparation::new(policy(settings), ports)
}

/// What preparation decides by, read from the settings once.
pub(crate) fn policy(s: &Settings) -> PreparePolicy {
    let limits = |b: &fabric_config::BudgetConfig| BudgetLimits {
        max_tokens: b.max_tokens,
        max_cost_usd: b.max_cost_usd,
        max_wall_s: b.max_wall_s,
    };
    PreparePolicy {
        specialists: s.specialists.clone(),
        default_specialist: s.default_specialist.clone(),
        routing: s.routing,
        routing_model_key: s.routing_model_key.clone(),
        complexity: s.complexity_routing.as_ref().map(|c| ComplexityPolicy {
            threshold: c.threshold,
            simple: c.simple.clone(),
            complex: c.complex.clone(),
        }),
        default_model_key: s.default_model_key.clone(),
        models: s
            .models
            .iter()
            .map(|(key, m)| (key.clone(), model_policy(m)))
            .collect(),
        auto_pull: s.auto_pull_if_missing.then(|| s.auto_pull_model.clone()),
        summarize_compaction: s.summarize_compaction,
        max_steps: s.max_steps,
        budget: limits(&s.budget),
        specialist_budgets: s
            .specialist_budgets
            .iter()
            .map(|(id, b)| (id.clone(), limits(b)))
            .collect(),
        max_depth: s.delegation.max_depth,
        share_parent_workspace: s.delegation.workspace
            == fabric_config::DelegationWorkspace::Shared,
        mode: s.task_force_mode,
        max_parallel: s.task_force_max_parallel as usize,
        network_allowed: s.network_allowed,
        cloud_fallback: s.cloud_fallback.as_ref().map(|f| CloudFallbackPolicy {
            model_key: f.model_key.clone(),
            policy: FallbackPolicy {
                no_tool_calls: f.no_tool_calls,
                malformed_args: f.malformed_args,
                critic_rejected: f.critic_rejected,
                max_per_run: f.max_per_run,
            },
        }),
    }
}

/// One model key as preparation uses it.
fn model_policy(m: &ModelConfig) -> ModelPolicy {
    ModelPolicy {
        model: m.model.clone(),
        backend: m.backend,
        endpoint: m.base_url.clone(),
        temperature: m.temperature,
        top_p: m.top_p,
        max_tokens: m.max_tokens,
        timeout_s: m.timeout_s,
        price: m.price_per_mtok.map(|(input, output)| Price {
            input_per_mtok: input,
            output_per_mtok: output,
        }),
        tool_call_repair: m.repairs_tool_calls(),
        num_ctx: m.num_ctx,
        context_window: m.context_window,
        vision: m.vision,
    }
}

/// The model servers of the configured keys (`bootstrap`: start, list, pull).
struct ConfigModels(Settings);

impl ConfigModels {
    fn model(&self, key: &str) -> Result<&ModelConfig, SetupError> {
        self.0
            .model(key)
            .ok_or_else(|| SetupError::Internal(format!("no model key `{key}`")))
    }
}

/// A model server that cannot be used now, with the whole chain of causes.
fn unavailable(error: anyhow::Error) -> SetupError {
    SetupError::ModelUnavailable(format!("{error:#}"))
}

#[async_trait]
impl ModelResolver for ConfigModels {
    async fn start(&self, key: &str) -> Result<(), SetupError> {
        bootstrap::ensure_available(&self.0, self.model(key)?)
            .await
            .map_err(unavailable)
    }

    async fn list(&self, key: &str) -> Result<Arc<Vec<ModelCandidate>>, SetupError> {
        bootstrap::list(self.model(key)?).await.map_err(unavailable)
    }

    async fn pull(&self, key: &str, model: &str) -> Result<(), SetupError> {
        bootstrap::pull(self.model(key)?, model)
            .await
            .map_err(unavailable)
    }
}

/// The chat clients of the configured keys, one per key for the preparer's life.
pub(crate) struct ConfigChats {
    settings: Settings,
    clients: ChatClients,
}

impl ChatFactory for ConfigChats {
    fn chat(&self, key: &str) -> Result<Arc<dyn ChatClient>, SetupError> {
        let model = self
            .settings
            .model(key)
            .ok_or_else(|| SetupError::Internal(format!("no model key `{key}`")))?;
        self.clients
            .get_or_build(key.to_owned(), || chat_client(model))
            .map_err(|e| SetupError::Internal(format!("{e:#}")))
    }

    fn missing_api_key(&self, key: &str) -> Option<String> {
        let model = self.settings.model(key)?;
        let var = model.missing_api_key()?;
        Some(model.missing_api_key_fix(key, var))
    }
}

/// The chat clients of one preparer, one per model key, made when a run first needs it and
/// shared by every run after: a client holds the connection pool and the TLS roots (about
/// 90 KiB), so a client per run cost that much memory per run in flight and a new connection
/// to the model server per run (issue #14). The settings of a preparer do not change, so a
/// key's client never goes stale.
type ChatClients = tools::Memo<String, Arc<dyn ChatClient>>;

/// A chat client for one configured model.
fn chat_client(model: &ModelConfig) -> anyhow::Result<Arc<dyn ChatClient>> {
    let (backend, http) = http_of(model);
    fabric_llm::build_client(backend, &http, Some(model.num_ctx))
        .with_context(|| format!("setting up the client for {}", model.base_url))
}

/// How to reach a model key's server.
pub(crate) fn http_of(model: &ModelConfig) -> (fabric_llm::Backend, fabric_llm::HttpSettings) {
    let mut http = fabric_llm::HttpSettings::new(model.base_url.clone());
    http.api_key_env = model.api_key_env.clone();
    http.timeout_s = model.timeout_s;
    http.max_retries = model.max_retries;
    http.max_concurrent = model.concurrent_requests().map(|n| n as usize);
    http.constrained = model.constrained();
    http.chaining = model.response_chaining;
    (model.backend, http)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::path::Path;

    /// Issue #14: runs share their model key's client (its connection pool and TLS roots)
    /// instead of building one each.
    #[test]
    fn issue_14_runs_share_one_client_per_model_key() {
        let yaml = "models:\n  a:\n    base_url: http://127.0.0.1:9/v1\n    model: m\n    backend: openai\n  b:\n    base_url: http://127.0.0.1:9/v1\n    model: m\n    backend: openai\ndefault_model_key: a\nrouting_model_key: a\n";
        let settings = Settings::from_text(yaml, Path::new("test.yaml")).unwrap();
        let chats = ConfigChats {
            settings,
            clients: ChatClients::default(),
        };
        let first = chats.chat("a").unwrap();
        assert!(Arc::ptr_eq(&first, &chats.chat("a").unwrap()));
        assert!(!Arc::ptr_eq(&first, &chats.chat("b").unwrap()));
    }
}
