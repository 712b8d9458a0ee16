//! The tools and the process sandbox a run's specialists get, behind core's
//! [`ToolFactory`] port: the built-in tools under the settings' tool policy, `search_runs`,
//! one `agent__<id>` tool per delegate, MCP servers as tool sources, the OS sandbox per
//! sandbox mode, the critic's staging area.

use anyhow::Context;
use async_trait::async_trait;
use fabric_config::{SandboxMode, Settings};
use fabric_core::delegate::{AgentTool, ChildRunner};
use fabric_core::ports::{SetupError, Stager, ToolFactory};
use fabric_core::search::{RunSearch, SEARCH_RUNS_TOOL, SearchRunsTool};
use fabric_core::typed::Typed;
use fabric_core::{ProcessSandbox, RunSandbox, Tool, ToolSource};
use fabric_domain::SpecialistSpec;
use fabric_sandbox::{Limits, OsSandbox, Policy};
use fabric_tools::{FetchSettings, ToolPolicy, WebSearchSettings};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::errors::UsageError;

/// The tools of the specialists of one configuration, shared by the runs it prepares.
pub(crate) struct ConfigTools {
    pub(crate) settings: Settings,
    /// Search over past runs, for specialists given the `search_runs` tool.
    pub(crate) search: RunSearch,
    /// Each specialist's own tools, shared by the runs.
    pub(crate) tools: SharedTools,
    /// The process sandbox per sandbox mode, shared by the runs.
    pub(crate) sandboxes: SharedSandboxes,
    /// Project specialists whose MCP servers wait for the user's trust, with the refusal
    /// (issue #43).
    pub(crate) untrusted: std::collections::BTreeMap<String, String>,
}

/// A set-up failure the request or the config must fix.
fn refused(error: anyhow::Error) -> SetupError {
    SetupError::Refused(format!("{error:#}"))
}

#[async_trait]
impl ToolFactory for ConfigTools {
    fn sandbox(
        &self,
        mode: Option<SandboxMode>,
    ) -> Result<(Arc<dyn ProcessSandbox>, RunSandbox), SetupError> {
        let sandbox = self
            .sandboxes
            .get_or_build(mode, || sandbox(&self.settings, mode))
            .map_err(refused)?;
        // Recorded as it is now: a sandbox that fell back after its namespaces failed to set
        // up says so in the next run's `run_start` (issue #40).
        let record = sandbox.record();
        Ok((sandbox, record))
    }

    fn check(&self, specialist: &SpecialistSpec) -> Result<(), SetupError> {
        // What an untrusted repository ships never runs (issue #43).
        if let Some(why) = self.untrusted.get(&specialist.id) {
            return Err(SetupError::Refused(why.clone()));
        }
        match &specialist.container_image {
            Some(image) if fabric_tools::podman_path().is_none() => {
                Err(SetupError::Refused(format!(
                    "specialist `{}` runs its shell in the container image `{image}`, but Podman is not installed; install it (`apt-get install podman`) or remove `container_image` from the specialist",
                    specialist.id
                )))
            }
            _ => Ok(()),
        }
    }

    fn tools(
        &self,
        specialist: &SpecialistSpec,
        sandbox: (&Arc<dyn ProcessSandbox>, Option<SandboxMode>),
        children: &Arc<dyn ChildRunner>,
    ) -> Result<Vec<Arc<dyn Tool>>, SetupError> {
        tools_for(
            specialist,
            &self.settings,
            sandbox,
            &self.tools,
            children,
            &self.search,
        )
        .map_err(refused)
    }

    fn sources(&self, specialist: &SpecialistSpec) -> Vec<Arc<dyn ToolSource>> {
        sources_for(specialist, &self.settings)
    }

    fn stager(&self) -> Arc<dyn Stager> {
        Arc::new(fabric_tools::CopyStager::new(
            self.settings.protected_paths.clone(),
        ))
    }

    async fn hooks(
        &self,
        mut sources: Vec<fabric_core::ports::HookSource>,
        mut place: fabric_core::ports::HookPlace,
    ) -> fabric_core::ports::RunHooks {
        let mut notices = Vec::new();
        // A trusted project's own hooks are the second source (`project`).
        if let Some(project) = place.project.clone() {
            let found = self.project_hooks(project).await;
            place.project = found.root.or(place.project);
            for warning in found.warnings {
                tracing::warn!(warning = %warning, "a project's hooks");
            }
            if let Some(why) = found.refused {
                notices.push(fabric_core::ports::SecurityNotice {
                    event_type: "untrusted_project".to_owned(),
                    message: why,
                });
            }
            sources.extend(
                found
                    .read
                    .into_iter()
                    .map(|config| fabric_core::ports::HookSource {
                        name: "project",
                        config: Arc::new(config),
                    }),
            );
        }
        if sources.iter().all(|s| s.config.is_empty()) {
            return fabric_core::ports::RunHooks {
                hooks: None,
                notices,
            };
        }
        // A run's runlog is `<workspace>/runs/<id>/runlog.jsonl` (`transcript_path`).
        let runs = self.settings.workspace.join("runs");
        fabric_core::ports::RunHooks {
            hooks: Some(Arc::new(fabric_tools::CommandHooks::new(
                sources, place, runs,
            ))),
            notices,
        }
    }

    async fn reap(&self, workspace: &std::path::Path) -> Vec<u32> {
        let workspace = workspace.to_owned();
        // Reading `/proc` is blocking file work.
        tokio::task::spawn_blocking(move || fabric_tools::reap_leftovers(&workspace))
            .await
            .unwrap_or_default()
    }
}

impl ConfigTools {
    /// The project's own hooks behind its trust, read on the blocking pool.
    async fn project_hooks(&self, project: std::path::PathBuf) -> super::trusted::ProjectHooks {
        let trusted = self.settings.trusted_projects.clone();
        let specialists = super::trusted::specialist_files(&self.settings);
        tokio::task::spawn_blocking(move || {
            super::trusted::project_hooks(&project, &trusted, &specialists)
        })
        .await
        .unwrap_or_default()
    }
}

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

/// The process sandbox of a run, which says what its runlog records about it. A policy this
/// host cannot enforce is a [`UsageError`] that says how to opt down.
pub(crate) fn sandbox(
    settings: &Settings,
    mode: Option<SandboxMode>,
) -> anyhow::Result<Arc<OsSandbox>> {
    let policy = sandbox_policy(settings, mode).map_err(|e| UsageError(e.to_string()))?;
    if policy.mode == SandboxMode::Off {
        tracing::warn!("the OS sandbox is OFF: tool processes run with the user's full rights");
    }
    let sandbox = OsSandbox::new(policy, settings.protected_paths.clone())
        .map_err(|e| UsageError(e.to_string()))?;
    Ok(Arc::new(sandbox))
}
/// The warm MCP server processes of a long-lived fabric (`serve`, `worker`, `acp`, `mcp`;
/// issue #45, ADR-117): set once, when such a command starts; `fabric run` has none.
static MCP_POOL: std::sync::OnceLock<Arc<fabric_mcp::McpPool>> = std::sync::OnceLock::new();

/// Makes this process keep MCP servers warm for its runs, as `mcp_pool:` says (a size of 0
/// keeps none).
pub(crate) fn keep_mcp_servers_warm(settings: &Settings) {
    let config = settings.mcp_pool;
    if config.size > 0 {
        let idle = std::time::Duration::from_secs(config.idle_timeout_s);
        let _ = MCP_POOL.set(fabric_mcp::McpPool::new(config.size, idle));
    }
}

/// The tool sources of a specialist that grow while a run goes on: its MCP servers, started
/// when the run starts (from a warm process in a long-lived fabric) and stopped when it ends.
pub(crate) fn sources_for(
    specialist: &SpecialistSpec,
    settings: &Settings,
) -> Vec<Arc<dyn ToolSource>> {
    let mut sources: Vec<Arc<dyn ToolSource>> = Vec::new();
    if !specialist.tooling.mcp_servers.is_empty() {
        let mut servers = fabric_mcp::McpTools::new(specialist)
            .with_spawn_hook(fabric_sandbox::dies_with_the_fabric);
        // Tokens from `fabric mcp login` (ADR-085).
        if let Some(dir) = fabric_config::mcp_token_dir() {
            servers = servers.with_token_dir(dir);
        }
        if let Some(pool) = MCP_POOL.get() {
            servers = servers.with_pool(pool.clone());
        }
        sources.push(Arc::new(servers));
    }
    let agents = remote_delegates(specialist, settings);
    if !agents.is_empty() {
        sources.push(Arc::new(fabric_tools::a2a::RemoteAgents::new(agents)));
    }
    sources
}

/// The delegates of `specialist` that are remote A2A agents (`agents:`), their tokens read
/// from the environment now, when the run is prepared.
fn remote_delegates(
    specialist: &SpecialistSpec,
    settings: &Settings,
) -> Vec<fabric_tools::a2a::RemoteAgentConfig> {
    specialist
        .tooling
        .delegates
        .iter()
        .filter(|id| settings.specialist(id).is_none())
        .filter_map(|id| {
            let agent = settings.agents.get(id.as_str())?;
            Some(fabric_tools::a2a::RemoteAgentConfig {
                name: id.clone(),
                url: agent.url.clone(),
                token: agent
                    .token_env
                    .as_deref()
                    .and_then(|var| std::env::var(var).ok()),
                timeout_s: agent.timeout_s,
            })
        })
        .collect()
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

/// The process sandbox per sandbox mode a run asks for, decided once: the policy is the same
/// for every run of a mode (until its namespaces fail to set up, issue #40), and the sandbox
/// keeps its JSON record (2–3 KiB as a `Value` tree), which made per run cost every run in
/// flight its own copies (issue #14).
pub(crate) type SharedSandboxes = Memo<Option<SandboxMode>, Arc<OsSandbox>>;

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
        // A remote agent's tool comes from its tool source, once its card is read.
        if settings.specialist(id).is_none() && settings.agents.contains_key(id) {
            continue;
        }
        let target = settings.specialist(id).with_context(|| {
            format!("specialist `{}` delegates to unknown `{id}`", specialist.id)
        })?;
        // An ACP agent does the work of this one: started per call (docs/ACP.md).
        if let Some(acp) = &target.tooling.acp {
            tools.push(Arc::new(Typed::new(fabric_acp::AcpAgentTool::new(
                id,
                &target.description,
                acp.clone(),
                specialist.approval.mode,
            ))));
            continue;
        }
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
            if name == fabric_domain::ASK_TOOL {
                let tool: Arc<dyn Tool> = Arc::new(Typed::new(fabric_core::ask_user::AskUserTool));
                return Ok(tool);
            }
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
