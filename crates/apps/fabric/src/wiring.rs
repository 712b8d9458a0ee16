//! Where concrete adapters meet: settings in, ports out.

use anyhow::Context;
use fabric_config::{LoadOptions, ModelConfig, Settings};
use fabric_tools::BUILTIN_TOOLS;
use std::sync::Arc;

use crate::app;
use crate::cli::Cli;
use crate::errors::UsageError;
use fabric_core::EmbeddingClient;
use fabric_core::RunQueue;
use fabric_core::budget::daily::DailyBudget;
use fabric_core::search::{Embedding, RunSearch, SEARCH_RUNS_TOOL};
use fabric_core::service::{ClaimedStore, RunService, ServiceConfig};
use fabric_store_sql::SqlStore;

/// Loads the settings: defaults < config file < `FABRIC_WORKSPACE` / `--workspace`, and
/// the specialists: built-in < user directory < `<workspace>/specialists` < config file.
pub(crate) fn load_settings(cli: &Cli) -> anyhow::Result<Settings> {
    let mut options = LoadOptions::new(cli.config.clone());
    options.workspace = cli.workspace.clone();
    let settings = Settings::load_with(&options)?;
    let known: Vec<&str> = BUILTIN_TOOLS
        .iter()
        .copied()
        .chain([SEARCH_RUNS_TOOL, fabric_domain::ASK_TOOL])
        .collect();
    settings.check_tools(&known)?;
    for note in &settings.deprecations {
        eprintln!("warning: {note}");
    }
    Ok(settings)
}

/// What every front end runs on: the store, search over it, and the run service.
pub(crate) struct Fabric {
    /// Where runs are submitted.
    pub(crate) service: RunService,
    /// Search, stats and pruning over the store's index.
    pub(crate) search: RunSearch,
    /// The store itself (the run queue, for `fabric serve` with `store.queue`).
    pub(crate) store: Arc<SqlStore>,
    /// The daily budgets per model key (`GET /budget`).
    pub(crate) daily: Arc<DailyBudget>,
    /// Traces over OTLP, when `telemetry.enabled`.
    pub(crate) telemetry: Option<fabric_telemetry::Telemetry>,
}

impl Fabric {
    /// Records the daily spend of calls cut off midway, and sends the spans still queued,
    /// waiting at most a second for them: at exit, so an unreachable collector costs a
    /// command at most that.
    pub(crate) async fn flush_telemetry(&self) {
        self.daily.settle().await;
        if let Some(telemetry) = &self.telemetry {
            telemetry.flush(std::time::Duration::from_secs(1)).await;
        }
    }
}

/// Sends `service`'s metrics over OTLP with the traces.
fn export_metrics(telemetry: &fabric_telemetry::Telemetry, service: &RunService) {
    let service = service.clone();
    telemetry.export_metrics(Arc::new(move || service.metrics_snapshot()));
}

/// The tracer and exporter of `telemetry:` with the standard `OTEL_*` variables, or `None`
/// when it is off.
fn telemetry(settings: &Settings) -> anyhow::Result<Option<fabric_telemetry::Telemetry>> {
    let config = &settings.telemetry;
    if !config.enabled {
        return Ok(None);
    }
    let env = |name: &str| std::env::var(name).ok();
    let providers = settings
        .models
        .iter()
        .map(|(key, model)| {
            let provider = match model.backend {
                fabric_domain::Backend::Ollama => "ollama",
                fabric_domain::Backend::OpenAi | fabric_domain::Backend::OpenAiResponses => {
                    "openai"
                }
                fabric_domain::Backend::Anthropic => "anthropic",
            };
            (key.clone(), provider.to_owned())
        })
        .collect();
    let options = fabric_telemetry::TelemetryOptions {
        traces_url: fabric_telemetry::traces_url(&config.otlp_endpoint, env),
        resource: fabric_telemetry::resource_from_env(&config.service_name, env)?,
        capture_content: config.capture_content,
        providers,
        metrics_url: fabric_telemetry::metrics_url(&config.otlp_endpoint, env),
        metrics_interval: fabric_telemetry::metrics_interval(env),
    };
    tracing::debug!(url = %options.traces_url, "exporting traces");
    let telemetry = fabric_telemetry::Telemetry::start(options);
    // Model requests carry the trace context of their chat span.
    fabric_core::trace::install(telemetry.trace_source());
    Ok(Some(telemetry))
}

/// The store under the settings (`store.url` / `FABRIC_STORE_URL`, else SQLite in the
/// workspace root), opened and migrated.
pub(crate) async fn open_store(settings: &Settings) -> anyhow::Result<Arc<SqlStore>> {
    let store = SqlStore::open(settings.store.url.as_deref(), &settings.workspace).await?;
    // A pruned run on a project takes its worktree and branch with it.
    store.on_prune(Arc::new(fabric_core::service::DiscardOnPrune::new(
        Arc::new(fabric_workspace_git::GitWorkspaces::new()),
        workspace_policy(settings),
    )));
    Ok(Arc::new(store))
}

/// Search over `store`, semantic when `run_index.embedding_model_key` names a model key.
pub(crate) fn run_search(settings: &Settings, store: Arc<SqlStore>) -> anyhow::Result<RunSearch> {
    let embedding = match &settings.run_index.embedding_model_key {
        None => None,
        Some(key) => {
            let model = settings.model(key).with_context(|| {
                format!("run_index.embedding_model_key names `{key}`, which is not a model key")
            })?;
            Some(Embedding {
                client: embedding_client(model)?,
                model: settings.run_index.embedding_model.clone(),
                min_similarity: settings.run_index.min_similarity,
            })
        }
    };
    Ok(RunSearch::new(store, embedding))
}

/// What a service driven from outside this machine allows (`fabric serve`, `fabric mcp`,
/// `fabric worker`): a `project` only inside `server.project_roots` (issue #39).
pub(crate) fn served(settings: &Settings) -> ServiceConfig {
    ServiceConfig {
        project_roots: Some(settings.server.project_roots.clone()),
        ..ServiceConfig::default()
    }
}

/// The store, search and the run service every front end submits runs to.
pub(crate) async fn fabric(settings: &Settings, config: ServiceConfig) -> anyhow::Result<Fabric> {
    fabric_over(settings, config, |store| store).await
}

/// [`fabric`], its runs created through what `runs` makes of the store (a store that wraps
/// it, as `fabric eval` does to place a task's files in each new workspace).
pub(crate) async fn fabric_over(
    settings: &Settings,
    config: ServiceConfig,
    runs: impl FnOnce(Arc<SqlStore>) -> Arc<dyn fabric_core::RunStore>,
) -> anyhow::Result<Fabric> {
    let store = open_store(settings).await?;
    let runs = runs(store.clone());
    let search = run_search(settings, Arc::clone(&store))?;
    let daily = crate::daily::budgets(settings, store.clone());
    let preparer = Arc::new(app::preparation(settings, &search, Arc::clone(&daily)));
    let mut service = versioned(
        RunService::new(runs, preparer, config).on_end(Arc::new(search.clone())),
        settings,
    );
    let telemetry = telemetry(settings)?;
    if let Some(telemetry) = &telemetry {
        service = service.with_sink(telemetry.sink());
        export_metrics(telemetry, &service);
    }
    Ok(Fabric {
        service,
        search,
        store,
        daily,
        telemetry,
    })
}

/// The service with versioned workspaces on the `git` program (issue #25): runs on a project
/// work in `<workspace root>/worktrees/<run-id>`; scratch runs are versioned when
/// `store.workspace_history` or `store.workspace_remote` says so.
pub(crate) fn versioned(service: RunService, settings: &Settings) -> RunService {
    service.with_workspaces(
        Arc::new(fabric_workspace_git::GitWorkspaces::new()),
        workspace_policy(settings),
    )
}

/// Where versioned workspaces go and which are versioned, from the settings.
fn workspace_policy(settings: &Settings) -> fabric_core::service::WorkspacePolicy {
    let worktrees = settings.workspace.join("worktrees");
    fabric_core::service::WorkspacePolicy {
        worktrees: std::path::absolute(&worktrees).unwrap_or(worktrees),
        remote: settings.store.workspace_remote.clone(),
        scratch: settings.store.workspace_history || settings.store.workspace_remote.is_some(),
        keep: Vec::new(),
    }
}

/// Refuses a store that is not PostgreSQL for what needs one to share: `what` (why it is
/// needed), `otherwise` (the alternative).
pub(crate) fn require_postgres(
    settings: &Settings,
    what: &str,
    otherwise: &str,
) -> anyhow::Result<()> {
    let postgres = settings
        .store
        .url
        .as_deref()
        .is_some_and(|u| u.starts_with("postgres://") || u.starts_with("postgresql://"));
    if postgres {
        return Ok(());
    }
    Err(UsageError(format!(
        "{what}: set `store.url` (or FABRIC_STORE_URL) to a postgres:// URL, {otherwise} (docs/DURABILITY.md)"
    ))
    .into())
}

/// A worker's run service: the same preparation, writing through the runs it claims.
pub(crate) async fn worker_service(
    settings: &Settings,
) -> anyhow::Result<(
    RunService,
    Arc<dyn RunQueue>,
    Arc<ClaimedStore>,
    Option<fabric_telemetry::Telemetry>,
)> {
    let store = open_store(settings).await?;
    let search = run_search(settings, Arc::clone(&store))?;
    let queue: Arc<dyn RunQueue> = store.clone();
    let daily = crate::daily::budgets(settings, store.clone());
    let claims = Arc::new(ClaimedStore::new(store, Arc::clone(&queue)));
    let preparer = Arc::new(app::preparation(settings, &search, daily));
    let mut service = versioned(
        RunService::new(claims.clone(), preparer, served(settings)).on_end(Arc::new(search)),
        settings,
    );
    let telemetry = telemetry(settings)?;
    if let Some(telemetry) = &telemetry {
        service = service.with_sink(telemetry.sink());
        export_metrics(telemetry, &service);
    }
    Ok((service, queue, claims, telemetry))
}
/// An embedding client for one configured model key's server.
pub(crate) fn embedding_client(model: &ModelConfig) -> anyhow::Result<Arc<dyn EmbeddingClient>> {
    fabric_llm::embedding_client(model)
        .with_context(|| format!("setting up the embedding client for {}", model.base_url))
}
