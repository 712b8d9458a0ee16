//! The one application function behind every front end: turn a request (from the CLI, and
//! later HTTP and MCP) into a ready-to-run task with its model clients, so all of them behave
//! the same way: recruitment (unless the request names the specialists), model discovery,
//! each member's own tools and model.

use fabric_config::{Routing, Settings, TaskForceMode};
use fabric_core::ChatClient;
use fabric_core::delegate::{Lineage, RunBudget};
use fabric_core::engine::ModelParams;
use fabric_core::execute::{self, Member, Recruitment, RunOutcome, TaskForce};
use fabric_core::recruit::{self, LlmRouting, RoutingCall};
use fabric_domain::SpecialistSpec;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::errors::{ModelUnavailable, UsageError};
use crate::{bootstrap, wiring};

/// What a caller asks for; `None` means "use the configured default".
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskRequest {
    /// What to do.
    pub(crate) prompt: String,
    /// The specialists (`--pack a,b`); empty: recruit by routing.
    pub(crate) pack: Vec<String>,
    /// The model key.
    pub(crate) model_key: Option<String>,
    /// A model name that overrides the key's model and skips discovery (`--model`).
    pub(crate) model: Option<String>,
    /// Whether tools may use the network.
    pub(crate) network_allowed: Option<bool>,
    /// Step limit.
    pub(crate) max_steps: Option<u32>,
    /// Stream model text.
    pub(crate) stream: bool,
    /// The sandbox mode (`--sandbox`).
    pub(crate) sandbox: Option<fabric_config::SandboxMode>,
}

/// One member, ready: its specialist, tools, client and resolved model.
pub(crate) struct PreparedMember {
    specialist: Arc<SpecialistSpec>,
    tools: Vec<Arc<dyn fabric_core::Tool>>,
    sources: Vec<Arc<dyn fabric_core::ToolSource>>,
    chat: Arc<dyn ChatClient>,
    model_key: String,
    model: ModelParams,
    model_reason: String,
}

/// A task ready to run.
pub(crate) struct PreparedTask {
    prompt: String,
    members: Vec<PreparedMember>,
    recruitment: Recruitment,
    routing_call: Option<RoutingCall>,
    mode: execute::TaskForceMode,
    max_parallel: usize,
    max_steps: u32,
    network_allowed: bool,
    sandbox: fabric_core::RunSandbox,
    /// The delegation tree's budget, created with the task.
    lineage: Lineage,
}

impl PreparedTask {
    /// The task force to hand to `execute_task_force`, borrowing the clients.
    pub(crate) fn task_force(&self) -> TaskForce<'_> {
        TaskForce {
            prompt: self.prompt.clone(),
            members: self
                .members
                .iter()
                .map(|m| Member {
                    specialist: Arc::clone(&m.specialist),
                    tools: m.tools.clone(),
                    sources: m.sources.clone(),
                    chat: m.chat.as_ref(),
                    model_key: m.model_key.clone(),
                    model: m.model.clone(),
                    model_reason: Some(m.model_reason.clone()),
                })
                .collect(),
            recruitment: self.recruitment.clone(),
            routing_call: self.routing_call.clone(),
            mode: self.mode,
            max_parallel: self.max_parallel,
            max_steps: self.max_steps,
            network_allowed: self.network_allowed,
            sandbox: self.sandbox.clone(),
            lineage: Some(self.lineage.clone()),
        }
    }

    /// One line per member on which model it uses and why, for the person at the terminal.
    pub(crate) fn model_notes(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| {
                format!(
                    "{}: model {} ({})",
                    m.specialist.id, m.model.name, m.model_reason
                )
            })
            .collect()
    }

    /// The recruitment, for the person at the terminal.
    pub(crate) fn recruitment_note(&self) -> String {
        let ids: Vec<&str> = self
            .members
            .iter()
            .map(|m| m.specialist.id.as_str())
            .collect();
        format!(
            "recruited {} by {}: {}",
            ids.join(", "),
            self.recruitment.routing_method,
            self.recruitment.reason
        )
    }
}

#[async_trait::async_trait]
impl fabric_api_http::Runnable for PreparedTask {
    async fn run(
        self: Box<Self>,
        run: fabric_core::NewRun,
        observer: &dyn fabric_core::RunObserver,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<fabric_core::execute::RunOutcome, fabric_core::CoreError> {
        execute::run_task_force(run, self.task_force(), observer, cancel).await
    }
}

/// Resolves the specialists, the models and the tools for a request. Anything the caller
/// can fix (an unknown specialist or model key) is a [`UsageError`].
pub(crate) async fn prepare(
    settings: &Settings,
    request: TaskRequest,
) -> anyhow::Result<PreparedTask> {
    if request.prompt.trim().is_empty() {
        return Err(
            UsageError("the prompt is empty; say what the agent should do".to_owned()).into(),
        );
    }
    // Decided before anything else: a sandbox this host cannot enforce stops the run here,
    // before a model is started or a runlog exists.
    let (sandbox, run_sandbox) = wiring::sandbox(settings, request.sandbox)?;
    let (ids, recruitment, routing_call) = recruit_for(settings, &request).await?;
    let mut members = Vec::new();
    let mut clients: HashMap<String, (Arc<dyn ChatClient>, String, String)> = HashMap::new();
    for id in &ids {
        let specialist = settings.shared_specialist(id).ok_or_else(|| {
            UsageError(format!(
                "no specialist `{id}`; the specialists are: {}",
                settings.specialist_ids().join(", ")
            ))
        })?;
        // A specialist that asks for a container must not quietly run on the host.
        if let Some(image) = &specialist.container_image
            && fabric_tools::podman_path().is_none()
        {
            return Err(UsageError(format!(
                "specialist `{id}` runs its shell in the container image `{image}`, but Podman is not installed; install it (`apt-get install podman`) or remove `container_image` from the specialist"
            ))
            .into());
        }
        let model_key = request
            .model_key
            .clone()
            .or_else(|| specialist.model_key.clone())
            .unwrap_or_else(|| settings.default_model_key.clone());
        let config = settings.model(&model_key).ok_or_else(|| {
            UsageError(format!(
                "no model key `{model_key}`; the configured keys are: {}",
                settings.model_keys().join(", ")
            ))
        })?;
        if !clients.contains_key(&model_key) {
            let (name, reason) = match &request.model {
                Some(name) => (
                    name.clone(),
                    format!("`{name}` given with --model; discovery skipped"),
                ),
                None => {
                    // Marked, so the HTTP API can answer 503 with the reason; the text is
                    // the same as before for the CLI.
                    let choice = bootstrap::resolve(settings, config)
                        .await
                        .map_err(|e| ModelUnavailable(format!("{e:#}")))?;
                    (choice.model, choice.reason)
                }
            };
            clients.insert(
                model_key.clone(),
                (wiring::chat_client(config)?, name, reason),
            );
        }
        let (chat, name, reason) = clients
            .get(&model_key)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("internal: no client for `{model_key}`"))?;
        let tools = wiring::tools_for(&specialist, settings, &sandbox)?;
        let sources = wiring::sources_for(&specialist);
        members.push(PreparedMember {
            specialist,
            tools,
            sources,
            chat,
            model_key,
            model: ModelParams {
                name,
                temperature: Some(config.temperature),
                top_p: Some(config.top_p),
                max_tokens: Some(config.max_tokens),
                stream: request.stream,
            },
            model_reason: reason,
        });
    }
    let max_steps = request.max_steps.unwrap_or(settings.max_steps);
    let delegation = &settings.delegation;
    // A person's run: each member's own step limit, together, is the whole tree's budget;
    // delegated children are paid from it.
    let budget = RunBudget::new(
        delegation.max_depth,
        Some(max_steps.saturating_mul(members.len() as u32)),
        delegation.max_tokens,
        delegation.timeout_s.map(Duration::from_secs),
    );
    Ok(PreparedTask {
        lineage: Lineage::root(Arc::new(budget)),
        prompt: request.prompt,
        members,
        recruitment,
        routing_call,
        mode: match settings.task_force_mode {
            TaskForceMode::Sequential => execute::TaskForceMode::Sequential,
            TaskForceMode::Parallel => execute::TaskForceMode::Parallel,
        },
        max_parallel: settings.task_force_max_parallel as usize,
        max_steps,
        network_allowed: request.network_allowed.unwrap_or(settings.network_allowed),
        sandbox: run_sandbox,
    })
}

/// `--pack` names the specialists (one, or a task force in the order given); without it
/// the router decides (keywords, or the routing model with keyword fallback).
async fn recruit_for(
    settings: &Settings,
    request: &TaskRequest,
) -> anyhow::Result<(Vec<String>, Recruitment, Option<RoutingCall>)> {
    if !request.pack.is_empty() {
        let mut ids: Vec<String> = Vec::new();
        for id in &request.pack {
            if ids.contains(id) {
                return Err(UsageError(format!("`--pack` names `{id}` twice")).into());
            }
            ids.push(id.clone());
        }
        let recruitment = Recruitment {
            routing_method: "explicit".to_owned(),
            required_capabilities: Vec::new(),
            reason: format!("--pack {}", ids.join(",")),
        };
        return Ok((ids, recruitment, None));
    }
    let (decision, call) = match settings.routing {
        Routing::Keyword => {
            recruit::route(
                &request.prompt,
                &settings.specialists,
                &settings.default_specialist,
                None,
            )
            .await
        }
        Routing::Llm => llm_route(settings, &request.prompt).await,
    };
    let recruitment = Recruitment {
        routing_method: decision.routing_method,
        required_capabilities: decision.required_capabilities,
        reason: decision.reason,
    };
    Ok((decision.specialist_ids, recruitment, call))
}

/// LLM routing on the routing model's own endpoint and model; any failure to even set it up
/// is a fallback to keywords like any other routing failure.
async fn llm_route(settings: &Settings, prompt: &str) -> (recruit::Decision, Option<RoutingCall>) {
    let key = &settings.routing_model_key;
    let keywords =
        || recruit::route_by_keywords(prompt, &settings.specialists, &settings.default_specialist);
    let Some(config) = settings.model(key) else {
        let mut d = keywords();
        d.routing_method = "keyword_fallback".to_owned();
        d.reason = format!("no routing model `{key}`; keyword routing: {}", d.reason);
        return (d, None);
    };
    let setup = async {
        let choice = bootstrap::resolve(settings, config).await?;
        let chat = wiring::chat_client(config)?;
        anyhow::Ok((choice, chat))
    };
    let (choice, chat) = match setup.await {
        Ok(ok) => ok,
        Err(e) => {
            let mut d = keywords();
            d.routing_method = "keyword_fallback".to_owned();
            d.reason = format!(
                "routing model `{key}` unusable ({e:#}); keyword routing: {}",
                d.reason
            );
            return (d, None);
        }
    };
    let routing = LlmRouting {
        model_key: key.clone(),
        model: choice.model,
        timeout: Duration::from_secs(config.timeout_s.min(60)),
    };
    recruit::route(
        prompt,
        &settings.specialists,
        &settings.default_specialist,
        Some((chat.as_ref(), &routing)),
    )
    .await
}

/// The result object of `fabric run --json` (and `POST /run`): the payload's fields plus
/// `_meta`.
pub(crate) fn result_object(outcome: &RunOutcome, settings: &Settings) -> Value {
    let meta = json!({
        "run_id": outcome.run_id,
        "status": outcome.status,
        "reason": outcome.reason,
        "specialist_ids": outcome.specialist_ids,
        "workspace": outcome.workspace,
        "runlog": settings.workspace.join("runs").join(outcome.run_id.as_str()).join(fabric_store_fs::RUNLOG_FILE),
        "model_key": outcome.model_key,
        "model": outcome.model,
        "steps": outcome.steps,
        "usage": outcome.usage,
    });
    let mut object = match &outcome.payload {
        Value::Object(map) => map.clone(),
        _ => serde_json::Map::new(),
    };
    object.insert("_meta".to_owned(), meta);
    Value::Object(object)
}
