//! Where concrete adapters meet: settings in, ports out.

use anyhow::Context;
use fabric_config::{LoadOptions, ModelConfig, SandboxMode, Settings};
use fabric_core::{ChatClient, Tool, ToolSource};
use fabric_core::{ProcessSandbox, RunSandbox};
use fabric_domain::SpecialistSpec;
use fabric_sandbox::{Limits, OsSandbox, Policy};
use fabric_tools::{BUILTIN_TOOLS, FetchSettings, ToolPolicy, WebSearchSettings};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::cli::Cli;
use crate::errors::UsageError;

/// The effective sandbox policy for `mode` (the configured one when `None`) on this host, or
/// why it cannot be enforced here.
pub(crate) fn sandbox_policy(
    settings: &Settings,
    mode: Option<SandboxMode>,
) -> Result<Policy, fabric_sandbox::SandboxError> {
    let mode = mode.unwrap_or(settings.sandbox.mode);
    let l = settings.sandbox.limits;
    const MIB: u64 = 1024 * 1024;
    let limits = Limits {
        cpu_s: l.cpu_s,
        memory_bytes: l.memory_mb.saturating_mul(MIB),
        processes: l.processes,
        file_size_bytes: l.file_size_mb.saturating_mul(MIB),
        open_files: l.open_files,
        cgroup: match l.cgroup {
            fabric_config::SandboxCgroup::Auto => fabric_sandbox::CgroupUse::Auto,
            fabric_config::SandboxCgroup::Required => fabric_sandbox::CgroupUse::Required,
            fabric_config::SandboxCgroup::Off => fabric_sandbox::CgroupUse::Off,
        },
        disk_bytes: l.disk_mb.saturating_mul(MIB),
        files: l.files,
    };
    Policy::decide(mode, fabric_sandbox::probe(), limits, read_paths(settings))
}

/// Directories processes may read besides the system ones: the configured ones, and the
/// absolute directories on a `PATH` passed to tools (a toolchain the operator chose).
fn read_paths(settings: &Settings) -> Vec<PathBuf> {
    let mut paths = settings.sandbox.read_paths.clone();
    if settings.shell.pass_env.iter().any(|n| n == "PATH")
        && let Ok(path) = std::env::var("PATH")
    {
        paths.extend(
            path.split(':')
                .filter(|e| e.starts_with('/'))
                .map(PathBuf::from)
                .filter(|p| p.is_dir()),
        );
    }
    paths
}

/// The process sandbox of a run and what its runlog records about it. A policy this host
/// cannot enforce is a [`UsageError`] that says how to opt down.
pub(crate) fn sandbox(
    settings: &Settings,
    mode: Option<SandboxMode>,
) -> anyhow::Result<(Arc<dyn ProcessSandbox>, RunSandbox)> {
    let policy = sandbox_policy(settings, mode).map_err(|e| UsageError(e.to_string()))?;
    if policy.mode == SandboxMode::Off {
        tracing::warn!("the OS sandbox is OFF: tool processes run with the user's full rights");
    }
    let record = RunSandbox {
        policy: Arc::new(policy.to_json()),
        notices: policy.notices(),
    };
    let sandbox = OsSandbox::new(policy, settings.protected_paths.clone())
        .map_err(|e| UsageError(e.to_string()))?;
    Ok((Arc::new(sandbox), record))
}
use crate::app::AppPreparer;
use crate::daily::Daily;
use fabric_core::EmbeddingClient;
use fabric_core::RunQueue;
use fabric_core::delegate::{AgentTool, ChildRunner};
use fabric_core::search::{Embedding, RunSearch, SEARCH_RUNS_TOOL, SearchRunsTool};
use fabric_core::service::{ClaimedStore, RunService, ServiceConfig};
use fabric_core::typed::Typed;
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
        .chain([SEARCH_RUNS_TOOL])
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
    pub(crate) daily: Arc<Daily>,
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
    let daily = Daily::new(settings, store.clone());
    let preparer = Arc::new(AppPreparer {
        settings: settings.clone(),
        search: search.clone(),
        daily: Arc::clone(&daily),
        clients: ChatClients::default(),
        tools: SharedTools::default(),
        sandboxes: SharedSandboxes::default(),
    });
    let mut service = RunService::new(runs, preparer, config).on_end(Arc::new(search.clone()));
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
    let daily = Daily::new(settings, store.clone());
    let claims = Arc::new(ClaimedStore::new(store, Arc::clone(&queue)));
    let preparer = Arc::new(AppPreparer {
        settings: settings.clone(),
        search: search.clone(),
        daily,
        clients: ChatClients::default(),
        tools: SharedTools::default(),
        sandboxes: SharedSandboxes::default(),
    });
    let mut service = RunService::new(claims.clone(), preparer, ServiceConfig::default())
        .on_end(Arc::new(search));
    let telemetry = telemetry(settings)?;
    if let Some(telemetry) = &telemetry {
        service = service.with_sink(telemetry.sink());
        export_metrics(telemetry, &service);
    }
    Ok((service, queue, claims, telemetry))
}

/// The chat clients of one preparer, one per model key, made when a run first needs it and
/// shared by every run after: a client holds the connection pool and the TLS roots (about
/// 90 KiB), so a client per run cost that much memory per run in flight and a new connection
/// to the model server per run (issue #14). The settings of a preparer do not change, so a
/// key's client never goes stale.
#[derive(Default)]
pub(crate) struct ChatClients(std::sync::Mutex<HashMap<String, Arc<dyn ChatClient>>>);

impl ChatClients {
    /// The client of model key `key`, whose config is `model`.
    pub(crate) fn get(
        &self,
        key: &str,
        model: &ModelConfig,
    ) -> anyhow::Result<Arc<dyn ChatClient>> {
        let mut clients = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(client) = clients.get(key) {
            return Ok(Arc::clone(client));
        }
        let client = chat_client(model)?;
        clients.insert(key.to_owned(), Arc::clone(&client));
        Ok(client)
    }
}

/// A chat client for one configured model.
pub(crate) fn chat_client(model: &ModelConfig) -> anyhow::Result<Arc<dyn ChatClient>> {
    let (backend, http) = http_of(model);
    fabric_llm::build_client(backend, &http, Some(model.num_ctx))
        .with_context(|| format!("setting up the client for {}", model.base_url))
}

/// An embedding client for one configured model key's server.
pub(crate) fn embedding_client(model: &ModelConfig) -> anyhow::Result<Arc<dyn EmbeddingClient>> {
    let (backend, http) = http_of(model);
    fabric_llm::build_embedder(backend, &http)
        .with_context(|| format!("setting up the embedding client for {}", model.base_url))
}

/// How to reach a model key's server.
fn http_of(model: &ModelConfig) -> (fabric_llm::Backend, fabric_llm::HttpSettings) {
    let mut http = fabric_llm::HttpSettings::new(model.base_url.clone());
    http.api_key_env = model.api_key_env.clone();
    http.timeout_s = model.timeout_s;
    http.max_retries = model.max_retries;
    http.max_concurrent = model.concurrent_requests().map(|n| n as usize);
    http.constrained = model.constrained();
    http.chaining = model.response_chaining;
    (model.backend, http)
}

/// The tool sources of a specialist that grow while a run goes on: its MCP servers, started
/// when the run starts and stopped when it ends.
pub(crate) fn sources_for(specialist: &SpecialistSpec) -> Vec<Arc<dyn ToolSource>> {
    let mut sources: Vec<Arc<dyn ToolSource>> = Vec::new();
    if !specialist.tooling.mcp_servers.is_empty() {
        sources.push(Arc::new(
            fabric_mcp::McpTools::new(specialist)
                .with_spawn_hook(fabric_sandbox::dies_with_the_fabric),
        ));
    }
    sources
}

/// Values a preparer builds once and shares between its runs, by key; a failed build is not
/// kept, so the next run tries again. A preparer's settings do not change, so nothing kept
/// goes stale.
pub(crate) struct Memo<K, V>(std::sync::Mutex<HashMap<K, V>>);

impl<K, V> Default for Memo<K, V> {
    fn default() -> Self {
        Self(std::sync::Mutex::new(HashMap::new()))
    }
}

impl<K: std::hash::Hash + Eq, V: Clone> Memo<K, V> {
    /// The value kept under `key`, or the one `build` makes, kept when it succeeds.
    pub(crate) fn get_or_build(
        &self,
        key: K,
        build: impl FnOnce() -> anyhow::Result<V>,
    ) -> anyhow::Result<V> {
        let mut cache = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(value) = cache.get(&key) {
            return Ok(value.clone());
        }
        let value = build()?;
        cache.insert(key, value.clone());
        Ok(value)
    }
}

/// Each specialist's own tools (the built-in ones and `search_runs`), built once per sandbox
/// mode and shared by its runs: they hold no state of a run (that comes with each call's
/// `ToolContext`), and building them anew gave every run its own copies of their schemas
/// (issue #14).
pub(crate) type SharedTools = Memo<ToolsKey, Vec<Arc<dyn Tool>>>;

/// A specialist's id and the sandbox mode its run asked for.
type ToolsKey = (String, Option<SandboxMode>);

/// The process sandbox and its runlog record per sandbox mode a run asks for, decided once:
/// the policy is the same for every run of a mode, and its JSON record (2–3 KiB as a `Value`
/// tree) made per run cost every run in flight its own copies (issue #14).
pub(crate) type SharedSandboxes = Memo<Option<SandboxMode>, (Arc<dyn ProcessSandbox>, RunSandbox)>;

/// The tools a specialist may use: its own, shared through `shared`, and one `agent__<id>`
/// tool per delegate, made for this run (it starts child runs of this run).
pub(crate) fn tools_for(
    specialist: &SpecialistSpec,
    settings: &Settings,
    (sandbox, mode): (&Arc<dyn ProcessSandbox>, Option<SandboxMode>),
    shared: &SharedTools,
    children: &Arc<dyn ChildRunner>,
    search: &RunSearch,
) -> anyhow::Result<Vec<Arc<dyn Tool>>> {
    let mut tools = shared.get_or_build((specialist.id.clone(), mode), || {
        own_tools(specialist, settings, sandbox, search)
    })?;
    for id in &specialist.tooling.delegates {
        let target = settings.specialist(id).with_context(|| {
            format!("specialist `{}` delegates to unknown `{id}`", specialist.id)
        })?;
        tools.push(Arc::new(Typed::new(AgentTool::new(
            id,
            &target.description,
            Arc::clone(children),
        ))));
    }
    Ok(tools)
}

/// A specialist's built-in tools and `search_runs`, built from the settings' tool policy.
fn own_tools(
    specialist: &SpecialistSpec,
    settings: &Settings,
    sandbox: &Arc<dyn ProcessSandbox>,
    search: &RunSearch,
) -> anyhow::Result<Vec<Arc<dyn Tool>>> {
    let mut policy = ToolPolicy::default();
    policy.allowed_commands = settings.shell.allowed_commands.clone();
    policy.container = specialist
        .container_image
        .as_ref()
        .map(fabric_tools::ContainerSettings::new);
    policy.shell_timeout_s = settings.shell.timeout_s;
    policy.max_shell_timeout_s = policy.max_shell_timeout_s.max(settings.shell.timeout_s);
    // Only variables the config names by name reach tools; everything else stays behind.
    policy.extra_env = settings
        .shell
        .pass_env
        .iter()
        .filter_map(|name| std::env::var(name).ok().map(|value| (name.clone(), value)))
        .collect();
    let web = &settings.web_search;
    policy.web_search = WebSearchSettings {
        provider: web.provider,
        base_url: web.base_url.clone(),
        api_key_env: web.api_key_env.clone(),
        timeout_s: web.timeout_s,
        max_results: web.max_results,
    };
    let fetch = &settings.fetch_url;
    policy.fetch = FetchSettings {
        timeout_s: fetch.timeout_s,
        max_download_bytes: fetch.max_download_bytes,
        max_text_chars: fetch.max_text_chars,
        max_redirects: fetch.max_redirects,
        addresses: fabric_tools::AddressPolicy {
            allow_private: settings.network.allow_private,
            allow_hosts: settings.network.allow_hosts.clone(),
        },
    };
    policy.protected_paths = settings.protected_paths.clone();
    let policy = Arc::new(policy);
    let (patterns, names): (Vec<&String>, Vec<&String>) = specialist
        .tools
        .iter()
        .partition(|name| name.starts_with(fabric_domain::MCP_TOOL_PREFIX));
    let servers = &specialist.tooling.mcp_servers;
    let unmatched: Vec<&&String> = patterns
        .iter()
        .filter(|p| {
            !servers
                .iter()
                .any(|s| p.starts_with(&format!("mcp__{}__", s.name)))
        })
        .collect();
    if !unmatched.is_empty() {
        // A pattern naming a server the specialist does not declare can match nothing.
        tracing::warn!(
            specialist = %specialist.id,
            ?unmatched,
            "tool patterns name MCP servers this specialist does not declare in `mcp_servers`"
        );
    }
    names
        .into_iter()
        .map(|name| {
            if name == SEARCH_RUNS_TOOL {
                let tool: Arc<dyn Tool> = Arc::new(Typed::new(SearchRunsTool::new(search.clone())));
                return Ok(tool);
            }
            fabric_tools::builtin_tool(name, &policy, sandbox).with_context(|| {
                format!("specialist `{}` names unknown tool `{name}`", specialist.id)
            })
        })
        .collect()
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
        let clients = ChatClients::default();
        let (a, b) = (settings.model("a").unwrap(), settings.model("b").unwrap());
        let first = clients.get("a", a).unwrap();
        assert!(Arc::ptr_eq(&first, &clients.get("a", a).unwrap()));
        assert!(!Arc::ptr_eq(&first, &clients.get("b", b).unwrap()));
    }

    /// Issue #14: a specialist's own tools are built once per sandbox mode and shared; a
    /// failed build is not kept.
    #[test]
    fn issue_14_runs_share_a_specialists_own_tools() {
        let shared = SharedTools::default();
        let builds = std::cell::Cell::new(0);
        let build = || {
            builds.set(builds.get() + 1);
            anyhow::Ok(Vec::new())
        };
        let key = |mode| ("engineering".to_owned(), mode);
        shared.get_or_build(key(None), build).unwrap();
        shared.get_or_build(key(None), build).unwrap();
        assert_eq!(builds.get(), 1, "built once for one specialist and mode");
        shared
            .get_or_build(key(Some(SandboxMode::Off)), build)
            .unwrap();
        assert_eq!(builds.get(), 2, "another mode has its own");
        let failing = || anyhow::bail!("unknown tool");
        assert!(
            shared
                .get_or_build(key(Some(SandboxMode::Strict)), failing)
                .is_err()
        );
        shared
            .get_or_build(key(Some(SandboxMode::Strict)), build)
            .unwrap();
        assert_eq!(builds.get(), 3, "a failed build is tried again");
    }
}
