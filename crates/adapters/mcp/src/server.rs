//! The fabric as an MCP server: `fabric mcp` (stdio) and `/mcp` on `fabric serve`
//! (streamable HTTP). Its tools are contracts like any other ([`ToolSpec`]), listed through
//! [`ToolSpec::mcp_definition`]; the work is done by the core's [`RunService`], as for the
//! CLI and HTTP, and the answers are the core's shared [`fabric_core::views`] (issue #28).

use async_trait::async_trait;
use fabric_core::execute::RunOutcome;
use fabric_core::search::{
    RunSearch, SearchRunsInput, results_json, search_runs_spec, since_parameter,
};
use fabric_core::service::{RunService, Submission, TaskRequest, WhenAsked};
use fabric_core::views::{PruneResult, RunRecord, StatsPage};
use fabric_core::{ChatObserver, RunObserver, StatsGroup, StatsQuery, WorkspaceFiles};
use fabric_domain::{
    RunEvent, RunId, RunStatus, SpecialistSpec, ToolAnnotations, ToolSpec, parse_duration,
};
use rmcp::model::{CallToolResult, ContentBlock, CreateTaskResult, ProgressNotificationParam};
use rmcp::service::{RequestContext, RoleServer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::McpError;
use crate::logging::{self, SessionLevel, Severity};
use crate::outputs;
use crate::resources::RunResources;
use crate::tasks::TaskBoard;
use crate::watch::Subscriptions;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Events buffered between a run and the client's progress notifications; a slow client
/// slows the run's event recording rather than losing events (the runlog has them all).
const EVENT_BUFFER: usize = 64;

/// The input of `run_task`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunTaskInput {
    /// What to do, in words.
    pub prompt: String,
    /// The specialist to use (see `list_specialists`); routed from the prompt when left out.
    #[serde(default)]
    pub specialist: Option<String>,
    /// Whether the run's tools may use the network (default: the server's configuration).
    #[serde(default)]
    pub network_allowed: Option<bool>,
    /// A git repository on the server's machine to work on (an absolute path inside its
    /// working tree): the run works in a worktree on its own branch `fabric/<run_id>`, and
    /// `_meta.changes` names it (docs/PROJECTS.md). Only inside the directories the
    /// server's config lists in `server.project_roots` (none by default). Default: a scratch
    /// workspace.
    #[serde(default)]
    pub project: Option<String>,
    /// With `project`: the commit, branch or tag to start from (default `HEAD`).
    #[serde(default)]
    pub base: Option<String>,
    /// Go on with the conversation of an ended run (its `_meta.run_id`): `prompt` is its
    /// next message, the specialist is that run's unless `specialist` names one, and a
    /// project run works on that run's branch (with `fork`, on a new branch from its head).
    #[serde(default)]
    pub continues: Option<ContinuesInput>,
}

/// Which ended run `run_task` continues.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContinuesInput {
    /// The earlier run's id.
    pub run_id: String,
    /// On a new branch from the earlier run's head, its own branch left alone (default
    /// `false`: on its branch).
    #[serde(default)]
    pub fork: bool,
}

/// The input of `get_run`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetRunInput {
    /// The run's id, as `run_task` returned it in `_meta.run_id`.
    pub run_id: String,
}

/// The input of `run_stats`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunStatsInput {
    /// Group by `specialist` (default), `model` (model key) or `tool`.
    #[serde(default)]
    pub by: Option<String>,
    /// Only runs started since: a date (`2026-11-01`) or a duration back from now (`7d`).
    #[serde(default)]
    pub since: Option<String>,
}

/// The input of `prune_runs`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PruneRunsInput {
    /// Delete ended runs that started longer ago than this: `12h`, `7d`, `2w`.
    pub older_than: String,
}

/// The input of `list_specialists` (none).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoInput {}

/// What `list_specialists` answers: who `run_task` can use, and who it uses by default.
#[derive(Debug, Clone, Serialize)]
pub struct SpecialistList {
    /// The specialists, in the configuration's order.
    pub specialists: Vec<SpecialistEntry>,
    /// The specialist a task without one is routed to when routing finds none.
    pub default: String,
}

/// One specialist as `list_specialists` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SpecialistEntry {
    /// Its id, for `run_task`'s `specialist`.
    pub id: String,
    /// What it does.
    pub description: String,
    /// Its built-in tools.
    pub tools: Vec<String>,
    /// The MCP servers it starts, by name.
    pub mcp_servers: Vec<String>,
    /// The specialists it may delegate to.
    pub delegates: Vec<String>,
    /// Its system prompt, offered as an MCP prompt (not in `list_specialists`' answer).
    #[serde(skip)]
    pub system_prompt: String,
}

impl SpecialistList {
    /// The list of `specialists`, with `default` the default.
    pub fn new(specialists: &[Arc<SpecialistSpec>], default: &str) -> Self {
        let specialists = specialists
            .iter()
            .map(|s| SpecialistEntry {
                id: s.id.clone(),
                description: s.description.clone(),
                tools: s.tools.clone(),
                mcp_servers: s
                    .tooling
                    .mcp_servers
                    .iter()
                    .map(|m| m.name.clone())
                    .collect(),
                delegates: s.tooling.delegates.clone(),
                system_prompt: s.system_prompt.clone(),
            })
            .collect();
        Self {
            specialists,
            default: default.to_owned(),
        }
    }
}

/// The tools this server offers, as contracts.
pub fn server_tools() -> Vec<ToolSpec> {
    let read = ToolAnnotations {
        read_only: true,
        ..ToolAnnotations::default()
    };
    vec![
        ToolSpec::for_input::<RunTaskInput>(
            "run_task",
            "Run a task with agent-fabric's specialist agents on local models. Progress notifications carry the run's events (runlog lines); the result is the specialist's final answer plus `_meta` (run_id, status, reason, steps, usage).",
        )
        .example(json!({"prompt": "Create hello.txt containing Hello"}))
        .example(json!({"prompt": "Summarise README.md", "specialist": "engineering"}))
        .example(json!({"prompt": "Now add a test for it", "continues": {"run_id": "20261123-180202-671-9afa8e3b"}}))
        .annotate(ToolAnnotations {
            destructive: true,
            ..ToolAnnotations::default()
        })
        .plan(&["list_specialists"], &["get_run"])
        .output(outputs::run_task()),
        ToolSpec::for_input::<NoInput>(
            "list_specialists",
            "List the specialists run_task can use: id, description and tools.",
        )
        .example(json!({}))
        .annotate(read)
        .plan(&[], &["run_task"])
        .output(outputs::list_specialists()),
        ToolSpec::for_input::<GetRunInput>(
            "get_run",
            "Read a run by id: status, prompt, result, usage and its events.",
        )
        .example(json!({"run_id": "20260101T000000Z-abcd"}))
        .annotate(read)
        .plan(&["run_task"], &[])
        .output(outputs::get_run()),
        search_runs_spec()
            .plan(&[], &["get_run"])
            .output(outputs::search_runs()),
        ToolSpec::for_input::<RunStatsInput>(
            "run_stats",
            "Figures of past runs per specialist, model key or tool: runs, outcomes, success rate, steps, tokens, time, tool error rate.",
        )
        .example(json!({}))
        .example(json!({"by": "tool", "since": "7d"}))
        .annotate(read)
        .plan(&[], &["search_runs"])
        .output(outputs::run_stats()),
        ToolSpec::for_input::<PruneRunsInput>(
            "prune_runs",
            "Delete ended runs (records, runlogs, workspaces) that started longer ago than a duration. Runs still going are kept.",
        )
        .example(json!({"older_than": "30d"}))
        .annotate(ToolAnnotations {
            destructive: true,
            ..ToolAnnotations::default()
        })
        .plan(&["run_stats"], &[])
        .output(outputs::prune_runs()),
    ]
}

/// The MCP server handler: the run service's front end, as the HTTP API is.
#[derive(Clone)]
pub struct FabricMcpServer {
    pub(crate) service: RunService,
    search: RunSearch,
    pub(crate) specialists: Arc<SpecialistList>,
    pub(crate) tools: Arc<Vec<ToolSpec>>,
    pub(crate) resources: RunResources,
    /// The tasks `run_task` started, shared by every session.
    pub(crate) tasks: Arc<TaskBoard>,
    /// What belongs to one client's session: its log level and resource subscriptions.
    pub(crate) session: Arc<Session>,
}

/// The state of one MCP session; a new one for each ([`FabricMcpServer::for_session`]).
#[derive(Default)]
pub(crate) struct Session {
    /// The level `logging/setLevel` set.
    pub(crate) level: SessionLevel,
    /// The `resources/subscribe` subscriptions.
    pub(crate) subscriptions: Subscriptions,
}

/// Hands every event of a run to the MCP server's progress notifications.
struct Forward(mpsc::Sender<RunEvent>);

impl ChatObserver for Forward {
    fn on_text_delta(&self, _delta: &str) {}
}

#[async_trait]
impl RunObserver for Forward {
    async fn on_event(&self, event: &RunEvent) {
        // Awaited: the run waits for a slow client instead of dropping events; a client
        // that went away closes the channel and the run goes on.
        let _ = self.0.send(event.clone()).await;
    }
}

impl FabricMcpServer {
    /// A server starting runs through `service` (shared with `fabric serve`, so its limits
    /// and shutdown drain cover MCP runs too), searching with `search`, reading runs'
    /// workspaces for its resources through `files`.
    pub fn new(
        service: RunService,
        search: RunSearch,
        specialists: SpecialistList,
        files: Arc<dyn WorkspaceFiles>,
    ) -> Self {
        Self {
            resources: RunResources::new(service.clone(), files),
            service,
            search,
            specialists: Arc::new(specialists),
            tools: Arc::new(server_tools()),
            tasks: Arc::default(),
            session: Arc::default(),
        }
    }

    /// This server for a new session: everything shared but the session's own state.
    pub fn for_session(&self) -> Self {
        Self {
            session: Arc::default(),
            ..self.clone()
        }
    }

    pub(crate) async fn dispatch(
        &self,
        name: &str,
        args: Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, McpError> {
        match name {
            "run_task" => self.run_task(parse(args)?, context).await,
            "list_specialists" => {
                let _: NoInput = parse(args)?;
                answer(&*self.specialists)
            }
            "get_run" => {
                let input: GetRunInput = parse(args)?;
                answer(&self.get_run(&input.run_id).await?)
            }
            "search_runs" => {
                let input: SearchRunsInput = parse(args)?;
                let request = input.to_request(fabric_core::unix_now())?;
                Ok(results_json(&self.search.search(&request).await?))
            }
            "run_stats" => answer(&self.run_stats(parse(args)?).await?),
            "prune_runs" => answer(&self.prune_runs(parse(args)?).await?),
            other => Err(McpError::UnknownTool(other.to_owned())),
        }
    }

    /// Runs a task to its end, sending every runlog event to the client as a progress
    /// notification; the client cancelling the request cancels the run by id. The caller's
    /// W3C trace context from the request's `_meta` (SEP-414) is continued by the run's spans.
    async fn run_task(
        &self,
        input: RunTaskInput,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, McpError> {
        let (tx, mut rx) = mpsc::channel::<RunEvent>(EVENT_BUFFER);
        let token = context.meta.get_progress_token();
        let peer = context.peer.clone();
        let forward = async move {
            while let Some(event) = rx.recv().await {
                let Some(token) = &token else { continue };
                let line = serde_json::to_string(&event).unwrap_or_default();
                let progress =
                    ProgressNotificationParam::new(token.clone(), (event.seq + 1) as f64)
                        .with_message(line);
                // A client that went away does not stop the run.
                let _ = peer.notify_progress(progress).await;
            }
        };
        // Its questions and approvals go to the client as elicitation forms, where it can
        // answer one (issue #42).
        let when = match crate::elicit::Elicitor::of(&context.peer) {
            Some(client) => WhenAsked::Ask(Arc::new(client)),
            None => WhenAsked::Refuse(
                "the MCP client that started it did not declare the `elicitation` capability"
                    .to_owned(),
            ),
        };
        let submission = submission_of(input, context)?
            .observed(Arc::new(Forward(tx)))
            .attended(when);
        let cancel = context.ct.clone();
        let run = async move {
            let handle = self.service.submit(submission)?;
            let (service, id) = (self.service.clone(), handle.id().clone());
            self.log(
                context,
                Severity::Info,
                json!({"event": "run_started", "run_id": id}),
            )
            .await;
            let watcher = tokio::spawn(async move {
                cancel.cancelled().await;
                service.cancel(&id);
            });
            let outcome = handle.outcome().await;
            watcher.abort();
            let outcome = outcome?;
            self.log_end(context, &outcome).await;
            Ok::<_, McpError>(self.service.result_object(&outcome))
        };
        let (result, ()) = tokio::join!(run, forward);
        result
    }

    /// Starts `run_task` as an MCP task (issue #29): the run goes on after the request has
    /// been answered with its task, and its end is recorded on the task board for
    /// `tasks/get`. A run the service refuses is a tool error, as for the blocking call.
    pub(crate) fn start_task(
        &self,
        input: RunTaskInput,
        context: &RequestContext<RoleServer>,
    ) -> Result<CreateTaskResult, McpError> {
        let handle = self.service.submit(submission_of(input, context)?)?;
        let id = handle.id().clone();
        let created = self.tasks.start(&id);
        let (service, tasks) = (self.service.clone(), Arc::clone(&self.tasks));
        tokio::spawn(async move {
            let (result, cancelled) = match handle.outcome().await {
                Ok(outcome) => (
                    CallToolResult::structured(service.result_object(&outcome)),
                    outcome.status == RunStatus::Cancelled,
                ),
                Err(e) => {
                    let text = McpError::Service(e).to_string();
                    (CallToolResult::error(vec![ContentBlock::text(text)]), false)
                }
            };
            tasks.finish(&id, &result, cancelled);
        });
        Ok(created)
    }

    /// Sends `data` as a log message of `severity`, when the client asked for it.
    async fn log(&self, context: &RequestContext<RoleServer>, severity: Severity, data: Value) {
        logging::send(&self.session.level, context, severity, data).await;
    }

    /// How a run ended, as a log message: `info` when it completed, `warning` when it
    /// completed without `finish_task`, in part, or was cancelled, `error` otherwise.
    async fn log_end(&self, context: &RequestContext<RoleServer>, outcome: &RunOutcome) {
        let severity = match outcome.status {
            RunStatus::Completed => Severity::Info,
            RunStatus::CompletedWithoutFinish | RunStatus::Partial | RunStatus::Cancelled => {
                Severity::Warning
            }
            _ => Severity::Error,
        };
        let data = json!({
            "event": "run_ended",
            "run_id": outcome.run_id,
            "status": outcome.status,
            "reason": outcome.reason,
        });
        self.log(context, severity, data).await;
    }

    /// A run's status, result and events.
    async fn get_run(&self, run_id: &str) -> Result<RunRecord, McpError> {
        let id = RunId::parse(run_id).map_err(|e| McpError::InvalidArguments(e.to_string()))?;
        let store = self.service.store();
        let events = store.read_events(&id).await?;
        let record = RunRecord::from_events(id, events);
        // Probed only for a run with no end, as `GET /runs/{id}` does.
        let liveness = match record.status {
            RunStatus::Running => store.liveness(&record.run_id).await,
            _ => fabric_core::Liveness::Unknown,
        };
        Ok(record.with_liveness(liveness))
    }

    /// Figures per specialist, model key or tool.
    async fn run_stats(&self, input: RunStatsInput) -> Result<StatsPage, McpError> {
        let by = match input.by.as_deref() {
            None => StatsGroup::default(),
            Some(word) => StatsGroup::parse(word).ok_or_else(|| {
                McpError::InvalidArguments(format!(
                    "parameter `by` must be specialist, model or tool; got `{word}`"
                ))
            })?,
        };
        let since = input
            .since
            .as_deref()
            .map(|s| since_parameter(s, fabric_core::unix_now()))
            .transpose()?;
        let query = StatsQuery {
            by,
            since,
            all: false,
        };
        let rows = self.search.catalog().stats(&query).await?;
        Ok(StatsPage { by, rows })
    }

    /// Deletes ended runs older than a duration.
    async fn prune_runs(&self, input: PruneRunsInput) -> Result<PruneResult, McpError> {
        let age = parse_duration(&input.older_than)
            .map_err(|e| McpError::InvalidArguments(format!("parameter `older_than`: {e}")))?;
        let deleted = self
            .search
            .catalog()
            .prune(fabric_core::unix_now() - age)
            .await?;
        Ok(PruneResult::of(&deleted))
    }
}

/// The run `run_task` asks for, continuing the caller's W3C trace context from the
/// request's `_meta` (SEP-414).
fn submission_of(
    input: RunTaskInput,
    context: &RequestContext<RoleServer>,
) -> Result<Submission, McpError> {
    let traceparent = context.meta.get_traceparent().map(str::to_owned);
    let project = match (input.project, input.base) {
        (Some(path), base) if std::path::Path::new(&path).is_absolute() => {
            Some(fabric_core::service::ProjectRequest {
                path: path.into(),
                base,
            })
        }
        (Some(path), _) => {
            return Err(McpError::InvalidArguments(format!(
                "parameter `project` must be an absolute path on the server's machine, got `{path}`"
            )));
        }
        (None, Some(_)) => {
            return Err(McpError::InvalidArguments(
                "parameter `base` needs `project`: it names where a run on a project starts"
                    .to_owned(),
            ));
        }
        (None, None) => None,
    };
    let continues = match input.continues {
        Some(c) => Some(fabric_core::service::ContinueRequest {
            run_id: fabric_domain::RunId::parse(&c.run_id).map_err(|e| {
                McpError::InvalidArguments(format!("parameter `continues.run_id`: {e}"))
            })?,
            fork: c.fork,
        }),
        None => None,
    };
    let request = TaskRequest {
        prompt: input.prompt,
        specialists: input.specialist.into_iter().collect(),
        network_allowed: input.network_allowed,
        project,
        continues,
        ..TaskRequest::default()
    };
    Ok(Submission::new(request).traced(traceparent))
}

pub(crate) fn parse<T: for<'de> Deserialize<'de>>(args: Value) -> Result<T, McpError> {
    serde_json::from_value(args)
        .map_err(|e| McpError::InvalidArguments(format!("invalid arguments: {e}")))
}

/// A typed answer as the tool result's structured content.
fn answer<T: Serialize>(value: &T) -> Result<Value, McpError> {
    serde_json::to_value(value).map_err(|e| McpError::Answer(e.to_string()))
}

/// Serves `server` on stdin/stdout until the client closes the connection.
pub async fn serve_stdio(server: FabricMcpServer) -> Result<(), McpError> {
    use rmcp::ServiceExt;
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| McpError::Handshake(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| McpError::Stopped(e.to_string()))?;
    Ok(())
}

/// The browser origins `/mcp` accepts: pages served from this machine, on any port.
pub(crate) const LOCAL_ORIGINS: &[&str] = &[
    "http://localhost:*",
    "http://127.0.0.1:*",
    "http://[::1]:*",
    "https://localhost:*",
    "https://127.0.0.1:*",
    "https://[::1]:*",
];

/// The streamable HTTP service of `server`, to mount at `/mcp`; `cancel` ends its streams
/// at shutdown. rmcp accepts only loopback `Host` headers by default (DNS-rebinding
/// protection); `any_host` lifts that for a server bound to another address, which the
/// binary allows only behind a bearer token that a rebinding page cannot send.
pub fn http_service(
    server: FabricMcpServer,
    cancel: CancellationToken,
    any_host: bool,
) -> rmcp::transport::StreamableHttpService<
    FabricMcpServer,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    // A browser's `Origin` must be a page on this machine (the MCP Inspector, a local app):
    // the 2025-11-25 revision requires 403 for any other, so a page elsewhere cannot drive
    // the server through a user's browser. Clients that are not browsers send none and pass.
    let mut config = rmcp::transport::StreamableHttpServerConfig::default()
        .with_allowed_origins(LOCAL_ORIGINS.iter().copied())
        .enforce_origin_validation();
    if any_host {
        config = config.disable_allowed_hosts();
    }
    config.cancellation_token = cancel;
    // A new session's handler shares the service but has its own log level and
    // subscriptions.
    rmcp::transport::StreamableHttpService::new(
        move || Ok(server.for_session()),
        Arc::default(),
        config,
    )
}
