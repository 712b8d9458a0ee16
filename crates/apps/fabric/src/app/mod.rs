//! The binary's side of preparing a run (issue #28, step 2): the settings turned once into
//! core's plain [`PreparePolicy`], and the adapters behind core's preparation ports: the
//! model servers and a client per model key (`fabric_llm::ModelServers`, ADR-099) and the
//! specialists' tools and sandbox ([`tools::ConfigTools`]). The policy itself (model keys,
//! complexity, daily fallback, budgets, critics, the cloud fallback) lives in
//! `fabric_core::service::prepare`.

pub(crate) mod notices;
pub(crate) mod tools;
pub(crate) mod trusted;

use fabric_config::Settings;
use fabric_core::budget::daily::DailyBudget;
use fabric_core::ports::ChatFactory;
use fabric_core::search::RunSearch;
use fabric_core::service::prepare::{Preparation, PreparePolicy, PreparePorts};
use fabric_llm::ModelServers;
use std::sync::Arc;

/// The model servers of `settings`, telling a person on stderr what starting and pulling do.
pub(crate) fn model_servers(settings: &Settings) -> Arc<ModelServers> {
    Arc::new(ModelServers::new(settings, Arc::new(notices::Stderr)))
}

/// The fabric's preparation of runs under `settings`, with live model clients.
pub(crate) fn preparation(
    settings: &Settings,
    search: &RunSearch,
    daily: Arc<DailyBudget>,
) -> Preparation {
    let servers = model_servers(settings);
    preparation_with(settings, search, daily, (Arc::clone(&servers), servers))
}

/// [`preparation`] over `servers` with the clients `chats` makes (offline runs answer from
/// a queue).
pub(crate) fn preparation_with(
    settings: &Settings,
    search: &RunSearch,
    daily: Arc<DailyBudget>,
    (servers, chats): (Arc<ModelServers>, Arc<dyn ChatFactory>),
) -> Preparation {
    let ports = PreparePorts {
        models: servers,
        chats,
        tools: Arc::new(tools::ConfigTools {
            settings: settings.clone(),
            search: search.clone(),
            tools: tools::SharedTools::default(),
            sandboxes: tools::SharedSandboxes::default(),
            untrusted: trusted::untrusted_specialists(settings),
        }),
        daily,
    };
    Preparation::new(policy(settings), ports)
}

/// What preparation decides by, read from the settings once.
pub(crate) fn policy(s: &Settings) -> PreparePolicy {
    PreparePolicy {
        specialists: s.specialists.clone(),
        default_specialist: s.default_specialist.clone(),
        routing: s.routing,
        routing_model_key: s.routing_model_key.clone(),
        complexity: s.complexity_routing.clone(),
        default_model_key: s.default_model_key.clone(),
        models: s
            .models
            .iter()
            .map(|(key, m)| (key.clone(), Arc::new(m.clone())))
            .collect(),
        auto_pull: s.auto_pull_if_missing.then(|| s.auto_pull_model.clone()),
        summarize_compaction: s.summarize_compaction,
        max_steps: s.max_steps,
        budget: s.budget,
        specialist_budgets: s.specialist_budgets.clone(),
        max_depth: s.delegation.max_depth,
        share_parent_workspace: s.delegation.workspace
            == fabric_config::DelegationWorkspace::Shared,
        mode: s.task_force_mode,
        max_parallel: s.task_force_max_parallel as usize,
        network_allowed: s.network_allowed,
        cloud_fallback: s.cloud_fallback.clone(),
        instructions: fabric_core::service::prepare::InstructionsPolicy {
            max_bytes: s.instructions.max_bytes,
            user_file: s
                .instructions
                .user_file
                .then(fabric_config::user_instructions_file)
                .flatten(),
        },
        hooks: Arc::new(s.hooks.clone()),
    }
}
