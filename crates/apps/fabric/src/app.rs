//! The application's preparer: turns a request (from the CLI, HTTP, MCP or a parent run)
//! into a task ready to run with its model clients, so every front end behaves the same way:
//! recruitment (unless the request names the specialists), model discovery, each member's
//! own tools and model. The run service (fabric-core) calls it for every run.

use async_trait::async_trait;
use fabric_config::{Routing, Settings};
use fabric_core::ChatClient;
use fabric_core::budget::{Lineage, RunBudget};
use fabric_core::engine::ModelParams;
use fabric_core::execute::Recruitment;
use fabric_core::recruit::{self, LlmRouting, RoutingCall};
use fabric_core::search::RunSearch;
use fabric_core::service::{
    PrepareContext, PreparedMember, PreparedTask, Preparer, Runnable, ServiceError, TaskRequest,
};
use fabric_domain::runlog::{RoutingMethod, RunOrigin};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::daily::Daily;
use crate::{bootstrap, wiring};

/// Prepares requests with the loaded settings.
pub(crate) struct AppPreparer {
    pub(crate) settings: Settings,
    /// Search over past runs, for specialists given the `search_runs` tool.
    pub(crate) search: RunSearch,
    /// The daily budgets per model key, over the store.
    pub(crate) daily: Arc<Daily>,
    /// The model clients, shared by the runs this preparer prepares.
    pub(crate) clients: wiring::ChatClients,
    /// Each specialist's own tools, shared by the runs this preparer prepares.
    pub(crate) tools: wiring::SharedTools,
    /// The process sandbox per sandbox mode, shared by the runs this preparer prepares.
    pub(crate) sandboxes: wiring::SharedSandboxes,
}

#[async_trait]
impl Preparer for AppPreparer {
    fn check(&self, request: &TaskRequest) -> Result<(), ServiceError> {
        let s = &self.settings;
        if let Some(unknown) = request.pack.iter().find(|id| s.specialist(id).is_none()) {
            return Err(ServiceError::UnknownSpecialist(format!(
                "no specialist `{unknown}`; the specialists are: {}",
                s.specialist_ids().join(", ")
            )));
        }
        if let Some(key) = &request.model_key
            && s.model(key).is_none()
        {
            return Err(ServiceError::UnknownModelKey(format!(
                "no model key `{key}`; the configured keys are: {}",
                s.model_keys().join(", ")
            )));
        }
        Ok(())
    }

    async fn prepare(
        &self,
        request: TaskRequest,
        context: &PrepareContext,
    ) -> Result<Box<dyn Runnable>, ServiceError> {
        let prepared = prepare(self, request, context).await?;
        Ok(Box::new(prepared))
    }

    async fn reap(&self, workspace: &std::path::Path) -> Vec<u32> {
        let workspace = workspace.to_owned();
        // Reading `/proc` is blocking file work.
        tokio::task::spawn_blocking(move || fabric_tools::reap_leftovers(&workspace))
            .await
            .unwrap_or_default()
    }
}

/// The cloud model steps fall back to (`cloud_fallback`), used as configured: no discovery,
/// no pull (a cloud key names its model).
fn cloud_fallback(
    settings: &Settings,
    clients: &wiring::ChatClients,
    stream: bool,
    offline: bool,
) -> Result<Option<fabric_core::service::PreparedFallback>, ServiceError> {
    let Some(fallback) = &settings.cloud_fallback else {
        return Ok(None);
    };
    let config = settings.model(&fallback.model_key).ok_or_else(|| {
        ServiceError::UnknownModelKey(format!(
            "cloud_fallback.model_key names `{}`, which is not a model key",
            fallback.model_key
        ))
    })?;
    Ok(Some(fabric_core::service::PreparedFallback {
        chat: if offline {
            crate::offline::QueueChat::new(Vec::new(), "the recording") as Arc<dyn ChatClient>
        } else {
            clients.get(&fallback.model_key, config).map_err(internal)?
        },
        model_key: fallback.model_key.clone(),
        model: ModelParams {
            name: config.model.clone(),
            temperature: Some(config.temperature),
            top_p: Some(config.top_p),
            max_tokens: Some(config.max_tokens),
            stream,
            price: price_of(config),
            tool_call_repair: config.repairs_tool_calls(),
            context_window: window_of(config, None),
            summarize_compaction: settings.summarize_compaction,
        },
        policy: fabric_core::engine::FallbackPolicy {
            no_tool_calls: fallback.no_tool_calls,
            malformed_args: fallback.malformed_args,
            critic_rejected: fallback.critic_rejected,
            max_per_run: fallback.max_per_run,
        },
    }))
}

/// A model's context window: Ollama's is the `num_ctx` the fabric sends (or the model's
/// trained length when smaller); other servers' is `context_window` when configured, else
/// what the server reported (llama.cpp's `/props`).
fn window_of(config: &fabric_config::ModelConfig, reported: Option<u64>) -> Option<u32> {
    let reported = reported.and_then(|t| u32::try_from(t).ok());
    match config.backend {
        fabric_config::Backend::Ollama => Some(config.num_ctx.min(reported.unwrap_or(u32::MAX))),
        _ => config.context_window.or(reported),
    }
}

/// A model key's price, for the cost budget.
fn price_of(config: &fabric_config::ModelConfig) -> Option<fabric_core::budget::Price> {
    config
        .price_per_mtok
        .map(|(input, output)| fabric_core::budget::Price {
            input_per_mtok: input,
            output_per_mtok: output,
        })
}

/// An error of the set-up code, as the service reports it.
fn internal(error: anyhow::Error) -> ServiceError {
    ServiceError::Internal(format!("{error:#}"))
}

/// Resolves the specialists, the models and the tools for a request. Anything the caller
/// can fix (an unknown specialist or model key) is typed as such.
pub(crate) async fn prepare(
    app: &AppPreparer,
    request: TaskRequest,
    context: &PrepareContext,
) -> Result<PreparedTask, ServiceError> {
    let (settings, search, daily) = (&app.settings, &app.search, &app.daily);
    // `fabric replay` and `fabric test` answer from a recording or a scenario (their
    // preparer puts the answers in place): no server is asked, no key is needed.
    let offline = matches!(request.origin, RunOrigin::Replay | RunOrigin::Test);
    // Decided before anything else: a sandbox this host cannot enforce stops the run here,
    // before a model is started or a runlog exists.
    let (sandbox, run_sandbox) = app
        .sandboxes
        .get_or_build(request.sandbox, || {
            wiring::sandbox(settings, request.sandbox)
        })
        .map_err(|e| ServiceError::Invalid(format!("{e:#}")))?;
    let (ids, recruitment, routing_call) = recruit_for(settings, &app.clients, &request).await?;
    // Scored once per task, used by members whose specialist names no model key.
    let by_complexity = settings.complexity_routing.as_ref().map(|routing| {
        let complexity = fabric_core::recruit::complexity::score(&request.prompt);
        let (key, relation) = if complexity.score >= routing.threshold {
            (routing.complex.clone(), "≥")
        } else {
            (routing.simple.clone(), "<")
        };
        let why = format!(
            "complexity {} {relation} {}: {key} ({})",
            complexity.score,
            routing.threshold,
            complexity.explain()
        );
        (key, why)
    });
    let mut members = Vec::new();
    let mut clients: HashMap<String, (Arc<dyn ChatClient>, String, String)> = HashMap::new();
    for id in &ids {
        let specialist = settings.shared_specialist(id).ok_or_else(|| {
            ServiceError::UnknownSpecialist(format!(
                "no specialist `{id}`; the specialists are: {}",
                settings.specialist_ids().join(", ")
            ))
        })?;
        // A specialist that asks for a container must not quietly run on the host.
        if let Some(image) = &specialist.container_image
            && fabric_tools::podman_path().is_none()
        {
            return Err(ServiceError::Invalid(format!(
                "specialist `{id}` runs its shell in the container image `{image}`, but Podman is not installed; install it (`apt-get install podman`) or remove `container_image` from the specialist"
            )));
        }
        // `--model-key` first, then the specialist's own key, then the task's complexity,
        // then the default.
        let (model_key, routed) = match (&request.model_key, &specialist.model_key, &by_complexity)
        {
            (Some(key), _, _) | (None, Some(key), _) => (key.clone(), None),
            (None, None, Some((key, why))) => (key.clone(), Some(why.clone())),
            (None, None, None) => (settings.default_model_key.clone(), None),
        };
        // A key whose daily budget is spent gives way to a local one (one a person named
        // with `--model-key` does not: the run is refused instead).
        // A continued run goes on with the keys it recorded.
        let choice = if request.continued {
            None
        } else {
            daily_choice(settings, daily, &model_key, request.model_key.is_some()).await?
        };
        let (model_key, routed) = match choice {
            None => (model_key, routed),
            Some((key, why)) => {
                let why = match routed {
                    Some(before) => format!("{before}; {why}"),
                    None => why,
                };
                (key, Some(why))
            }
        };
        let config = settings.model(&model_key).ok_or_else(|| {
            ServiceError::UnknownModelKey(format!(
                "no model key `{model_key}`; the configured keys are: {}",
                settings.model_keys().join(", ")
            ))
        })?;
        if !offline && let Some(var) = config.missing_api_key() {
            return Err(ServiceError::ModelUnavailable(format!(
                "model key `{model_key}` needs an API key: {}",
                fabric_config::ModelConfig::missing_api_key_fix(&model_key, var)
            )));
        }
        if !clients.contains_key(&model_key) {
            let (name, reason) = match &request.model {
                Some(name) => (
                    name.clone(),
                    match request.origin {
                        RunOrigin::Replay => {
                            format!("`{name}` as recorded; `fabric replay` asks no server")
                        }
                        RunOrigin::Test => {
                            format!(
                                "`{name}`: the scenario's answers; `fabric test` asks no server"
                            )
                        }
                        _ => format!("`{name}` given with --model; discovery skipped"),
                    },
                ),
                None => {
                    // Marked, so the HTTP API can answer 503 with the reason; the text is
                    // the same as before for the CLI.
                    let choice = bootstrap::resolve(settings, config)
                        .await
                        .map_err(|e| ServiceError::ModelUnavailable(format!("{e:#}")))?;
                    (choice.model, choice.reason)
                }
            };
            // Offline, the answers come from the recording or the scenario: no client is
            // built, so nothing reads the key's API variable or warns it is unset.
            let chat = if offline {
                crate::offline::QueueChat::new(Vec::new(), "the recording") as Arc<dyn ChatClient>
            } else {
                app.clients.get(&model_key, config).map_err(internal)?
            };
            clients.insert(model_key.clone(), (chat, name, reason));
        }
        let (chat, name, reason) = clients
            .get(&model_key)
            .cloned()
            .ok_or_else(|| ServiceError::Internal(format!("no client for `{model_key}`")))?;
        let tools = wiring::tools_for(
            &specialist,
            settings,
            (&sandbox, request.sandbox),
            &app.tools,
            &context.children,
            search,
        )
        .map_err(|e| ServiceError::Invalid(format!("{e:#}")))?;
        let sources = wiring::sources_for(&specialist);
        // Its writes are staged and reviewed before they land (docs/QUALITY.md).
        let critic =
            specialist
                .tooling
                .critic
                .as_ref()
                .map(|c| fabric_core::execute::MemberCritic {
                    specialist: c.specialist.clone(),
                    max_rounds: c.max_repair_rounds,
                    runner: Arc::clone(&context.children),
                    stager: Arc::new(fabric_tools::CopyStager::new(
                        settings.protected_paths.clone(),
                    )),
                });
        let chat = daily.meter(&model_key, price_of(config), chat);
        // Discovery already listed the server (cached); `--model` skips it, and so does this.
        let trained = match (config.backend, &request.model) {
            (fabric_config::Backend::Ollama, None) => {
                bootstrap::context_length(config, &name).await
            }
            // The server reports one window whatever the model is called (cached listing).
            (fabric_config::Backend::OpenAi, _) if config.context_window.is_none() && !offline => {
                bootstrap::server_window(config).await
            }
            _ => None,
        };
        members.push(PreparedMember {
            critic,
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
                price: price_of(config),
                tool_call_repair: config.repairs_tool_calls(),
                context_window: window_of(config, trained),
                summarize_compaction: settings.summarize_compaction,
            },
            model_reason: match routed {
                Some(why) => format!("{why}; {reason}"),
                None => reason,
            },
        });
    }
    let max_steps = request.max_steps.unwrap_or(settings.max_steps);
    let delegation = &settings.delegation;
    // A person's run: each member's own step limit, together, is the whole tree's budget;
    // delegated children are paid from it.
    // The first specialist's own `budget:` replaces the top-level one, limit by limit.
    let mut limits = settings.budget.clone();
    if let Some(own) = members
        .first()
        .and_then(|m| settings.specialist_budgets.get(&m.specialist.id))
    {
        limits.max_tokens = own.max_tokens.or(limits.max_tokens);
        limits.max_cost_usd = own.max_cost_usd.or(limits.max_cost_usd);
        limits.max_wall_s = own.max_wall_s.or(limits.max_wall_s);
    }
    let limits = &limits;
    if limits.max_cost_usd.is_some()
        && let Some(m) = members.iter().find(|m| m.model.price.is_none())
    {
        return Err(ServiceError::Invalid(format!(
            "`budget.max_cost_usd` needs a price for every model key a run uses, and `{}` has none; add `price_per_mtok: {{input: …, output: …}}` (US dollars per million tokens) to `models.{}`",
            m.model_key, m.model_key
        )));
    }
    // A critic's reviews are runs of their own, paid from the same budget: each may take
    // up to `max_steps` too.
    let reviews: u32 = members
        .iter()
        .filter_map(|m| m.critic.as_ref().map(|c| c.max_rounds))
        .sum();
    // The cloud fallback, unless its daily budget is spent or its API key is missing (said
    // in the run's model reason).
    let mut fallback = cloud_fallback(settings, &app.clients, request.stream, offline)?;
    if let Some(f) = &mut fallback {
        // A continued run keeps its fallback (the budget is checked as it takes one).
        let missing_key = settings
            .model(&f.model_key)
            .and_then(fabric_config::ModelConfig::missing_api_key)
            .filter(|_| !offline);
        let spent = if let Some(var) = missing_key {
            Ok(Some(fabric_config::ModelConfig::missing_api_key_fix(
                &f.model_key,
                var,
            )))
        } else if request.continued {
            Ok(None)
        } else {
            daily.spent(&f.model_key).await
        };
        match spent {
            Ok(Some(why)) => {
                if let Some(first) = members.first_mut() {
                    first.model_reason = format!(
                        "{}; cloud fallback to `{}` off: {why}",
                        first.model_reason, f.model_key
                    );
                }
                fallback = None;
            }
            Ok(None) => f.chat = daily.meter(&f.model_key, f.model.price, Arc::clone(&f.chat)),
            Err(e) => return Err(ServiceError::Store(e.to_string())),
        }
    }
    let budget = RunBudget::new(
        delegation.max_depth,
        Some(max_steps.saturating_mul(members.len() as u32 + reviews)),
        limits.max_tokens,
        limits.max_wall_s.map(Duration::from_secs),
    )
    .with_cost_limit(limits.max_cost_usd);
    Ok(PreparedTask {
        origin: request.origin,
        lineage: Lineage::root(Arc::new(budget)),
        share_parent_workspace: delegation.workspace == fabric_config::DelegationWorkspace::Shared,
        fallback,
        prompt: request.prompt,
        members,
        recruitment,
        routing_call,
        mode: settings.task_force_mode,
        max_parallel: settings.task_force_max_parallel as usize,
        max_steps,
        network_allowed: request.network_allowed.unwrap_or(settings.network_allowed),
        sandbox: run_sandbox,
    })
}

/// When `key`'s daily budget is spent: the key to use instead and why (complexity routing's
/// `simple` key, else the default key, whichever has budget left), or the refusal when no
/// key is left or the person named the key. `None`: `key` may be used.
async fn daily_choice(
    settings: &Settings,
    daily: &Daily,
    key: &str,
    named: bool,
) -> Result<Option<(String, String)>, ServiceError> {
    if daily.is_off() {
        return Ok(None);
    }
    let store = |e: fabric_core::ports::StoreError| ServiceError::Store(e.to_string());
    let Some(why) = daily.spent(key).await.map_err(store)? else {
        return Ok(None);
    };
    if named {
        return Err(ServiceError::BudgetSpent(format!(
            "{why}; it resets at midnight ({} time). Run with another `--model-key`, or raise `daily_budget.{key}`",
            daily.zone_name()
        )));
    }
    let candidates = settings
        .complexity_routing
        .as_ref()
        .map(|r| r.simple.clone())
        .into_iter()
        .chain(std::iter::once(settings.default_model_key.clone()));
    for candidate in candidates.filter(|c| c != key) {
        if daily.spent(&candidate).await.map_err(store)?.is_none() {
            return Ok(Some((
                candidate.clone(),
                format!("{why}: `{candidate}` instead"),
            )));
        }
    }
    Err(ServiceError::BudgetSpent(format!(
        "{why}, and no other model key has budget left today; it resets at midnight ({} time). Raise `daily_budget` or wait",
        daily.zone_name()
    )))
}

/// `--pack` names the specialists (one, or a task force in the order given); without it
/// the router decides (keywords, or the routing model with keyword fallback).
async fn recruit_for(
    settings: &Settings,
    clients: &wiring::ChatClients,
    request: &TaskRequest,
) -> Result<(Vec<String>, Recruitment, Option<RoutingCall>), ServiceError> {
    if !request.pack.is_empty() {
        let mut ids: Vec<String> = Vec::new();
        for id in &request.pack {
            if ids.contains(id) {
                return Err(ServiceError::Invalid(format!(
                    "`--pack` names `{id}` twice"
                )));
            }
            ids.push(id.clone());
        }
        let recruitment = Recruitment {
            routing_method: RoutingMethod::Explicit,
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
        Routing::Llm => llm_route(settings, clients, &request.prompt).await,
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
async fn llm_route(
    settings: &Settings,
    clients: &wiring::ChatClients,
    prompt: &str,
) -> (recruit::Decision, Option<RoutingCall>) {
    let key = &settings.routing_model_key;
    let keywords =
        || recruit::route_by_keywords(prompt, &settings.specialists, &settings.default_specialist);
    let Some(config) = settings.model(key) else {
        let mut d = keywords();
        d.routing_method = RoutingMethod::KeywordFallback;
        d.reason = format!("no routing model `{key}`; keyword routing: {}", d.reason);
        return (d, None);
    };
    let setup = async {
        let choice = bootstrap::resolve(settings, config).await?;
        let chat = clients.get(key, config)?;
        anyhow::Ok((choice, chat))
    };
    let (choice, chat) = match setup.await {
        Ok(ok) => ok,
        Err(e) => {
            let mut d = keywords();
            d.routing_method = RoutingMethod::KeywordFallback;
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
