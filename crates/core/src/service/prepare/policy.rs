//! The plain value preparation decides by: what the configuration says about specialists,
//! model keys, routing, budgets and the cloud fallback. The binary converts its settings
//! into it once at start-up; tests write it by hand.

pub use fabric_domain::{BudgetLimits, ComplexityRouting};
use fabric_domain::{FallbackPolicy, ModelConfig, Routing, SpecialistSpec, TaskForceMode};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Everything preparation needs to know from the configuration.
#[derive(Debug, Clone)]
pub struct PreparePolicy {
    /// The specialists, in the configuration's order.
    pub specialists: Vec<Arc<SpecialistSpec>>,
    /// Who works when routing finds no one.
    pub default_specialist: String,
    /// Keywords, or the routing model with keyword fallback.
    pub routing: Routing,
    /// The routing model's key.
    pub routing_model_key: String,
    /// The model key by the task's complexity, for specialists that name none.
    pub complexity: Option<ComplexityRouting>,
    /// The model key of everything else.
    pub default_model_key: String,
    /// The model keys, as configured; each shared by the runs on it.
    pub models: BTreeMap<String, Arc<ModelConfig>>,
    /// The model to pull when an Ollama server has none that fits (`auto_pull_model`),
    /// when pulling is allowed (`auto_pull_if_missing`).
    pub auto_pull: Option<String>,
    /// Left-out turns are summarised by the model rather than listed.
    pub summarize_compaction: bool,
    /// Step limit per member, unless the request says.
    pub max_steps: u32,
    /// The run tree's limits (`budget:`).
    pub budget: BudgetLimits,
    /// A specialist's own limits, replacing the top-level ones limit by limit when it is
    /// the first member.
    pub specialist_budgets: BTreeMap<String, BudgetLimits>,
    /// How deep runs may delegate.
    pub max_depth: u32,
    /// Whether a child run works in its parent's workspace (`delegation.workspace`).
    pub share_parent_workspace: bool,
    /// How several members work together.
    pub mode: TaskForceMode,
    /// Most members at once in parallel mode.
    pub max_parallel: usize,
    /// Whether tools may use the network, unless the request says.
    pub network_allowed: bool,
    /// The cloud model steps fall back to.
    pub cloud_fallback: Option<FallbackPolicy>,
    /// A project run's `AGENTS.md` instructions (issue #43).
    pub instructions: super::InstructionsPolicy,
    /// The config's lifecycle hooks (`hooks:`, issue #43), every run's first source.
    pub hooks: Arc<fabric_domain::hooks::HooksConfig>,
}

impl PreparePolicy {
    /// The specialist with this id.
    pub fn specialist(&self, id: &str) -> Option<&Arc<SpecialistSpec>> {
        self.specialists.iter().find(|s| s.id == id)
    }

    /// The ids of all specialists, for messages.
    pub fn specialist_ids(&self) -> String {
        let ids: Vec<&str> = self.specialists.iter().map(|s| s.id.as_str()).collect();
        ids.join(", ")
    }

    /// The keys of all models, for messages.
    pub fn model_keys(&self) -> String {
        let keys: Vec<&str> = self.models.keys().map(String::as_str).collect();
        keys.join(", ")
    }
}
