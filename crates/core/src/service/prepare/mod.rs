//! Preparing a run (issue #28, step 2): a request becomes a [`TaskForce`] by the
//! configuration's policy ([`PreparePolicy`], a plain value) over narrow ports: the model
//! servers ([`ModelResolver`]: start, list, pull), a client per model key
//! ([`ChatFactory`]), the specialists' tools and sandbox ([`ToolFactory`]) and the daily
//! budgets over the spend ledger ([`DailyBudget`]).
//!
//! The policy, in order: recruitment (the request's `pack`, else routing); per member its
//! model key (`--model-key`, the specialist's own, the task's complexity, the default; a key
//! whose daily budget is spent gives way), the model on that key's server (discovery, a
//! pull), its client metered against the daily budget, its tools and its critic; then the
//! run tree's budget and the cloud fallback.

mod instructions;
mod keys;
mod models;
mod policy;
mod route;
#[cfg(test)]
mod tests;

pub use instructions::InstructionsPolicy;
pub use models::Flights;
pub use policy::{BudgetLimits, ComplexityRouting, PreparePolicy};

use async_trait::async_trait;
use fabric_domain::runlog::RunOrigin;
use fabric_domain::{ModelConfig, SpecialistSpec};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::{Fault, InvalidRequest, PrepareContext, Preparer, Runnable, ServiceError, TaskRequest};
use crate::budget::daily::DailyBudget;
use crate::budget::{Lineage, RunBudget};
use crate::engine::{Fallback, ModelParams};
use crate::execute::{Member, TaskForce};
use crate::models::ModelChoice;
use crate::ports::{
    ChatClient, ChatFactory, ModelResolver, ProcessSandbox, SetupError, ToolFactory,
};

/// What preparation reaches the outside through.
#[derive(Clone)]
pub struct PreparePorts {
    /// The model servers: start, list, pull.
    pub models: Arc<dyn ModelResolver>,
    /// A client per model key.
    pub chats: Arc<dyn ChatFactory>,
    /// The sandbox and the tools of each specialist.
    pub tools: Arc<dyn ToolFactory>,
    /// The daily budgets per model key, over the spend ledger.
    pub daily: Arc<DailyBudget>,
}

/// The fabric's [`Preparer`]: the configuration's policy over the ports.
pub struct Preparation {
    policy: PreparePolicy,
    ports: PreparePorts,
    pulls: models::Flights,
}

/// A member's model: its client, its name, and why it was chosen.
type Resolved = (Arc<dyn ChatClient>, String, String);

impl Preparation {
    /// Prepares by `policy` through `ports`.
    pub fn new(policy: PreparePolicy, ports: PreparePorts) -> Self {
        Self {
            policy,
            ports,
            pulls: models::Flights::default(),
        }
    }

    /// The policy it prepares by.
    pub fn policy(&self) -> &PreparePolicy {
        &self.policy
    }

    fn unknown_specialist(&self, id: &str) -> ServiceError {
        ServiceError::UnknownSpecialist {
            id: id.to_owned(),
            known: self.policy.specialist_ids(),
        }
    }

    fn unknown_key(&self, key: &str) -> ServiceError {
        ServiceError::UnknownModelKey {
            key: key.to_owned(),
            known: self.policy.model_keys(),
        }
    }

    /// What the policy decides about a request without I/O: an unknown specialist or
    /// model key.
    pub fn check_request(&self, request: &TaskRequest) -> Result<(), ServiceError> {
        let policy = &self.policy;
        if let Some(unknown) = request
            .specialists
            .iter()
            .find(|id| policy.specialist(id).is_none())
        {
            return Err(self.unknown_specialist(unknown));
        }
        if let Some(key) = &request.model_key
            && !policy.models.contains_key(key)
        {
            return Err(self.unknown_key(key));
        }
        for key in self.certain_keys(request) {
            self.api_key_of(&key, request)?;
        }
        Ok(())
    }

    /// Resolves the specialists, the models and the tools for a request. Anything the
    /// caller can fix (an unknown specialist or model key) is typed as such.
    pub async fn prepare_task(
        &self,
        request: TaskRequest,
        context: &PrepareContext,
    ) -> Result<TaskForce, ServiceError> {
        // Decided before anything else: a sandbox this host cannot enforce stops the run
        // here, before a model is started or a runlog exists.
        let (sandbox, run_sandbox) = self.ports.tools.sandbox(request.sandbox).map_err(refused)?;
        let (recruitment, routing_call) = self.recruit(&request).await?;
        let ids = recruitment.specialist_ids.clone();
        let by_complexity = self.by_complexity(&request.prompt);
        // Sized to the team: a `Vec` grown by `push` starts at four members, three of them
        // empty for a lone specialist, and the run holds it to its end (issue #45).
        let mut members = Vec::with_capacity(ids.len());
        let mut models: HashMap<String, Resolved> = HashMap::new();
        for id in &ids {
            let specialist = self
                .policy
                .specialist(id)
                .cloned()
                .ok_or_else(|| self.unknown_specialist(id))?;
            let member = self
                .member(
                    specialist,
                    &request,
                    context,
                    &sandbox,
                    &by_complexity,
                    &mut models,
                )
                .await?;
            members.push(member);
        }
        let max_steps = request.max_steps.unwrap_or(self.policy.max_steps);
        let budget = self.budget(&members, max_steps)?;
        let fallback = self.fallback(&request, &mut members).await?;
        // A project's own instructions, for a run a person started on it (issue #43).
        let instructions = match &request.project {
            Some(project) => Some(Arc::new(
                instructions::gather(&project.path, &self.policy.instructions).await,
            ))
            .filter(|i| !i.is_empty()),
            None => None,
        };
        let hooks = self.hooks(&request).await;
        let mut run_sandbox = run_sandbox;
        run_sandbox.notices.extend(hooks.notices);
        let hooks = hooks.hooks;
        Ok(TaskForce {
            instructions,
            origin: request.origin,
            context_id: request.context_id,
            lineage: Some(Lineage::root(Arc::new(budget))),
            share_parent_workspace: self.policy.share_parent_workspace,
            fallback,
            prompt: request.prompt,
            members,
            recruitment,
            routing_call,
            mode: self.policy.mode,
            max_parallel: self.policy.max_parallel,
            max_steps,
            network_allowed: request
                .network_allowed
                .unwrap_or(self.policy.network_allowed),
            sandbox: run_sandbox,
            person: None,
            hooks,
        })
    }

    /// The run's lifecycle hooks (issue #43), from its sources in order: the config's
    /// `hooks:` (`source: config`), then what the factory adds for the run's place (a
    /// trusted project's `.claude/settings.json`, `source: project`). No source: none.
    async fn hooks(&self, request: &TaskRequest) -> crate::ports::RunHooks {
        let mut sources = Vec::new();
        if !self.policy.hooks.is_empty() {
            sources.push(crate::ports::HookSource {
                name: "config",
                config: Arc::clone(&self.policy.hooks),
            });
        }
        let place = crate::ports::HookPlace {
            project: request.project.as_ref().map(|p| p.path.clone()),
        };
        self.ports.tools.hooks(sources, place).await
    }

    /// One member: its model key, model, client, tools and critic.
    async fn member(
        &self,
        specialist: Arc<SpecialistSpec>,
        request: &TaskRequest,
        context: &PrepareContext,
        sandbox: &Arc<dyn ProcessSandbox>,
        by_complexity: &Option<(String, String)>,
        models: &mut HashMap<String, Resolved>,
    ) -> Result<Member, ServiceError> {
        let tools = &self.ports.tools;
        // A specialist that asks for a container must not quietly run on the host.
        tools.check(&specialist).map_err(refused)?;
        let (model_key, routed) = self.model_key(&specialist, request, by_complexity).await?;
        let model = self
            .policy
            .models
            .get(&model_key)
            .ok_or_else(|| self.unknown_key(&model_key))?;
        self.api_key_of(&model_key, request)?;
        if !models.contains_key(&model_key) {
            let resolved = self.model_of(&model_key, model, request).await?;
            models.insert(model_key.clone(), resolved);
        }
        let (chat, name, reason) =
            models
                .get(&model_key)
                .cloned()
                .ok_or_else(|| Fault::NoClient {
                    key: model_key.clone(),
                })?;
        let specialist = for_request(specialist, request);
        let member_tools = tools
            .tools(&specialist, (sandbox, request.sandbox), &context.children)
            .map_err(refused)?;
        let sources = tools.sources(&specialist);
        // Its writes are staged and reviewed before they land (docs/QUALITY.md).
        let critic = specialist
            .tooling
            .critic
            .as_ref()
            .map(|c| crate::execute::MemberCritic {
                specialist: c.specialist.clone(),
                max_rounds: c.max_repair_rounds,
                runner: Arc::clone(&context.children),
                stager: tools.stager(),
            });
        let chat = self
            .ports
            .daily
            .meter(&model_key, model.price_per_mtok, chat);
        let reported = models::reported_window(
            self.ports.models.as_ref(),
            (&model_key, model),
            &name,
            (request.model.is_some(), offline(request)),
        )
        .await;
        Ok(Member {
            critic,
            specialist,
            tools: member_tools,
            sources,
            chat,
            model: self.params(model, name, request.stream, reported),
            model_key,
            model_reason: Some(match routed {
                Some(why) => format!("{why}; {reason}"),
                None => reason,
            }),
            inherited: None,
        })
    }

    /// The model `key` runs (the request's by name, else discovery's) and its client.
    async fn model_of(
        &self,
        key: &str,
        model: &Arc<ModelConfig>,
        request: &TaskRequest,
    ) -> Result<Resolved, ServiceError> {
        let (name, reason) = match &request.model {
            Some(name) => (
                name.clone(),
                match request.origin {
                    RunOrigin::Replay => {
                        format!("`{name}` as recorded; `fabric replay` asks no server")
                    }
                    RunOrigin::Test => {
                        format!("`{name}`: the scenario's answers; `fabric test` asks no server")
                    }
                    _ => format!("`{name}` given with --model; discovery skipped"),
                },
            ),
            None => {
                // Marked, so the HTTP API can answer 503 with the reason.
                let choice = self
                    .resolve(key, model)
                    .await
                    .map_err(ServiceError::ModelUnavailable)?;
                (choice.model, choice.reason)
            }
        };
        let chat = self.ports.chats.chat(key).map_err(internal)?;
        Ok((chat, name, reason))
    }

    /// Discovery for `key`: the model its server runs, and why.
    async fn resolve(&self, key: &str, model: &ModelConfig) -> Result<ModelChoice, SetupError> {
        models::resolve(
            &self.policy,
            self.ports.models.as_ref(),
            &self.pulls,
            (key, model),
        )
        .await
    }

    /// How a member's model is asked.
    fn params(
        &self,
        model: &Arc<ModelConfig>,
        name: String,
        stream: bool,
        reported: Option<u64>,
    ) -> ModelParams {
        ModelParams {
            name,
            temperature: Some(model.temperature),
            top_p: Some(model.top_p),
            max_tokens: Some(model.max_tokens),
            stream,
            context_window: model.window(reported),
            summarize_compaction: self.policy.summarize_compaction,
            config: Arc::clone(model),
        }
    }

    /// The run tree's budget: each member's step limit, together, plus its critic's
    /// reviews; the first specialist's own `budget:` over the top-level one, limit by limit.
    fn budget(&self, members: &[Member], max_steps: u32) -> Result<RunBudget, ServiceError> {
        let policy = &self.policy;
        let own = members
            .first()
            .and_then(|m| policy.specialist_budgets.get(&m.specialist.id));
        let limits = match own {
            Some(own) => policy.budget.overlaid(own),
            None => policy.budget,
        };
        if limits.max_cost_usd.is_some()
            && let Some(m) = members.iter().find(|m| m.model.price().is_none())
        {
            return Err(InvalidRequest::NoPrice {
                key: m.model_key.clone(),
            }
            .into());
        }
        // A critic's reviews are runs of their own, paid from the same budget: each may
        // take up to `max_steps` too.
        let reviews: u32 = members
            .iter()
            .filter_map(|m| m.critic.as_ref().map(|c| c.max_rounds))
            .sum();
        Ok(RunBudget::new(
            policy.max_depth,
            Some(max_steps.saturating_mul(members.len() as u32 + reviews)),
            limits.max_tokens,
            limits.max_wall_s.map(Duration::from_secs),
        )
        .with_cost_limit(limits.max_cost_usd))
    }

    /// The cloud fallback, used as configured (no discovery, no pull: a cloud key names its
    /// model), unless its daily budget is spent or its API key is missing (said in the first
    /// member's model reason).
    async fn fallback(
        &self,
        request: &TaskRequest,
        members: &mut [Member],
    ) -> Result<Option<Fallback>, ServiceError> {
        let Some(fallback) = &self.policy.cloud_fallback else {
            return Ok(None);
        };
        let key = &fallback.model_key;
        let model = self
            .policy
            .models
            .get(key)
            .ok_or_else(|| ServiceError::UnknownFallbackKey { key: key.clone() })?;
        let chat = self.ports.chats.chat(key).map_err(internal)?;
        let missing_key = self
            .ports
            .chats
            .missing_api_key(key)
            .filter(|_| !offline(request));
        // A continued run keeps its fallback (the budget is checked as it takes one).
        let off = match missing_key {
            Some(fix) => Some(fix),
            None if request.continued => None,
            None => self
                .ports
                .daily
                .spent(key)
                .await
                .map_err(ServiceError::Store)?,
        };
        if let Some(why) = off {
            if let Some(reason) = members.first_mut().and_then(|m| m.model_reason.as_mut()) {
                *reason = format!("{reason}; cloud fallback to `{key}` off: {why}");
            }
            return Ok(None);
        }
        Ok(Some(Fallback {
            chat: self.ports.daily.meter(key, model.price_per_mtok, chat),
            model: self.params(model, model.model.clone(), request.stream, None),
            policy: fallback.clone(),
        }))
    }
}

#[async_trait]
impl Preparer for Preparation {
    fn check(&self, request: &TaskRequest) -> Result<(), ServiceError> {
        self.check_request(request)
    }

    async fn prepare(
        &self,
        request: TaskRequest,
        context: &PrepareContext,
    ) -> Result<Box<dyn Runnable>, ServiceError> {
        Ok(Box::new(self.prepare_task(request, context).await?))
    }

    async fn reap(&self, workspace: &std::path::Path) -> Vec<u32> {
        self.ports.tools.reap(workspace).await
    }
}

/// `fabric replay` and `fabric test` answer from a recording or a scenario: no server is
/// asked, no key is needed.
fn offline(request: &TaskRequest) -> bool {
    matches!(request.origin, RunOrigin::Replay | RunOrigin::Test)
}

/// A fault of the set-up code, as the service reports it.
fn internal(error: SetupError) -> ServiceError {
    Fault::Setup(error).into()
}

/// A tool set-up the request or the config must change, as the service reports it.
fn refused(error: SetupError) -> ServiceError {
    InvalidRequest::Setup(error).into()
}

/// `specialist` as the request has it: with the request's own MCP servers (an editor's,
/// over ACP) besides its own, all their tools offered (`mcp__<server>__*`; a server of its own
/// with the same name wins), and the request's approval mode in place of its own.
fn for_request(specialist: Arc<SpecialistSpec>, request: &TaskRequest) -> Arc<SpecialistSpec> {
    let own = |name: &str| {
        specialist
            .tooling
            .mcp_servers
            .iter()
            .any(|s| s.name == name)
    };
    let added: Vec<_> = request
        .mcp_servers
        .iter()
        .filter(|s| !own(&s.name))
        .cloned()
        .collect();
    let mode = request
        .approval_mode
        .filter(|mode| *mode != specialist.approval.mode);
    if added.is_empty() && mode.is_none() {
        return specialist;
    }
    let mut spec = (*specialist).clone();
    for server in added {
        spec.tools.push(format!(
            "{}{}__*",
            fabric_domain::MCP_TOOL_PREFIX,
            server.name
        ));
        spec.tooling.mcp_servers.push(server);
    }
    if let Some(mode) = mode {
        spec.approval.mode = mode;
    }
    Arc::new(spec)
}
