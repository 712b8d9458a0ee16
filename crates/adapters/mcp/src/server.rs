//! The fabric as an MCP server: `fabric mcp` (stdio) and `/mcp` on `fabric serve`
//! (streamable HTTP). Its tools are contracts like any other ([`ToolSpec`]), listed through
//! [`ToolSpec::mcp_definition`]; the work is done by a [`FabricService`] the binary
//! implements with its one application function, so MCP behaves like the CLI and HTTP.

use async_trait::async_trait;
use fabric_core::search::{SearchRunsInput, search_runs_spec};
use fabric_domain::{RunEvent, ToolAnnotations, ToolSpec, schema};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ServerCapabilities,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use schemars::JsonSchema;
use serde::Deserialize;
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

/// What the MCP server does, implemented by the binary over its application function.
#[async_trait]
pub trait FabricService: Send + Sync + 'static {
    /// Runs a task to its end, sending every runlog event to `events` as it is recorded,
    /// and returns the result object (the finish payload plus `_meta` with the run id).
    /// `cancel` is cancelled when the client cancels the request. `traceparent` is the
    /// caller's W3C trace context from the request's `_meta` (SEP-414), which the run's
    /// spans continue.
    async fn run_task(
        &self,
        input: RunTaskInput,
        events: mpsc::Sender<RunEvent>,
        cancel: CancellationToken,
        traceparent: Option<String>,
    ) -> Result<Value, String>;

    /// The specialists: id, description, tools.
    async fn list_specialists(&self) -> Result<Value, String>;

    /// A run's status, result and events.
    async fn get_run(&self, run_id: &str) -> Result<Value, String>;

    /// Past runs that match (the `search_runs` contract of fabric-core).
    async fn search_runs(&self, input: SearchRunsInput) -> Result<Value, String>;

    /// Figures per specialist, model key or tool.
    async fn run_stats(&self, input: RunStatsInput) -> Result<Value, String>;

    /// Deletes ended runs older than a duration.
    async fn prune_runs(&self, input: PruneRunsInput) -> Result<Value, String>;
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
        .annotate(ToolAnnotations {
            destructive: true,
            ..ToolAnnotations::default()
        })
        .plan(&["list_specialists"], &["get_run"]),
        ToolSpec::for_input::<NoInput>(
            "list_specialists",
            "List the specialists run_task can use: id, description and tools.",
        )
        .example(json!({}))
        .annotate(read)
        .plan(&[], &["run_task"]),
        ToolSpec::for_input::<GetRunInput>(
            "get_run",
            "Read a run by id: status, prompt, result, usage and its events.",
        )
        .example(json!({"run_id": "20260101T000000Z-abcd"}))
        .annotate(read)
        .plan(&["run_task"], &[]),
        search_runs_spec().plan(&[], &["get_run"]),
        ToolSpec::for_input::<RunStatsInput>(
            "run_stats",
            "Figures of past runs per specialist, model key or tool: runs, outcomes, success rate, steps, tokens, time, tool error rate.",
        )
        .example(json!({}))
        .example(json!({"by": "tool", "since": "7d"}))
        .annotate(read)
        .plan(&[], &["search_runs"]),
        ToolSpec::for_input::<PruneRunsInput>(
            "prune_runs",
            "Delete ended runs (records, runlogs, workspaces) that started longer ago than a duration. Runs still going are kept.",
        )
        .example(json!({"older_than": "30d"}))
        .annotate(ToolAnnotations {
            destructive: true,
            ..ToolAnnotations::default()
        })
        .plan(&["run_stats"], &[]),
    ]
}

/// The MCP server handler.
#[derive(Clone)]
pub struct FabricMcpServer {
    service: Arc<dyn FabricService>,
    tools: Arc<Vec<ToolSpec>>,
}

impl FabricMcpServer {
    /// A server over `service`.
    pub fn new(service: Arc<dyn FabricService>) -> Self {
        Self {
            service,
            tools: Arc::new(server_tools()),
        }
    }

    async fn dispatch(
        &self,
        name: &str,
        args: Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, String> {
        match name {
            "run_task" => {
                let input: RunTaskInput = parse(args)?;
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
                let traceparent = context.meta.get_traceparent().map(str::to_owned);
                let run = self
                    .service
                    .run_task(input, tx, context.ct.clone(), traceparent);
                let (result, ()) = tokio::join!(run, forward);
                result
            }
            "list_specialists" => {
                let _: NoInput = parse(args)?;
                self.service.list_specialists().await
            }
            "get_run" => {
                let input: GetRunInput = parse(args)?;
                self.service.get_run(&input.run_id).await
            }
            "search_runs" => self.service.search_runs(parse(args)?).await,
            "run_stats" => self.service.run_stats(parse(args)?).await,
            "prune_runs" => self.service.prune_runs(parse(args)?).await,
            other => Err(format!("unknown tool `{other}`")),
        }
    }
}

fn parse<T: for<'de> Deserialize<'de>>(args: Value) -> Result<T, String> {
    serde_json::from_value(args).map_err(|e| format!("invalid arguments: {e}"))
}

impl ServerHandler for FabricMcpServer {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("agent-fabric", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "agent-fabric runs tasks with specialist agents on local models. Call list_specialists to see who can work, run_task to hand over a task, get_run to read a run again, search_runs to find earlier runs, run_stats for figures.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .tools
            .iter()
            .map(|t| serde_json::from_value(t.mcp_definition()))
            .collect::<Result<Vec<rmcp::model::Tool>, _>>()
            .map_err(|e| ErrorData::internal_error(format!("tool list: {e}"), None))?;
        // Through the constructor, which sets `resultType: "complete"`: the 2026-07-28
        // revision requires it, and rmcp strips it for clients of older ones. Built from raw
        // JSON it was missing, and the Python SDK's default client refused every list (issue
        // #29).
        Ok(ListToolsResult::with_all_items(tools))
    }

    // Issue #29: rmcp answers these with empty lists by default, for capabilities this
    // server never declares; a client then believes there are none rather than that they
    // are not offered. "Method not found" says what is true.
    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, ErrorData> {
        Err(ErrorData::method_not_found::<
            rmcp::model::ListPromptsRequestMethod,
        >())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, ErrorData> {
        Err(ErrorData::method_not_found::<
            rmcp::model::ListResourcesRequestMethod,
        >())
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, ErrorData> {
        Err(ErrorData::method_not_found::<
            rmcp::model::ListResourceTemplatesRequestMethod,
        >())
    }

    async fn complete(
        &self,
        _request: rmcp::model::CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, ErrorData> {
        Err(ErrorData::method_not_found::<
            rmcp::model::CompleteRequestMethod,
        >())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(spec) = self.tools.iter().find(|t| t.name == request.name) else {
            let names: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool `{}`; the tools are: {}",
                    request.name,
                    names.join(", ")
                ),
                None,
            ));
        };
        let args = Value::Object(request.arguments.unwrap_or_default());
        if let Err(violations) = schema::validate(&spec.input_schema, &args) {
            return Ok(CallToolResponse::Complete(CallToolResult::error(vec![
                ContentBlock::text(format!(
                    "invalid arguments for `{}`: {violations}",
                    spec.name
                )),
            ])));
        }
        let result = match self.dispatch(&spec.name, args, &context).await {
            Ok(value) => CallToolResult::structured(value),
            Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
        };
        Ok(CallToolResponse::Complete(result))
    }
}

/// Serves `server` on stdin/stdout until the client closes the connection.
pub async fn serve_stdio(server: FabricMcpServer) -> Result<(), String> {
    use rmcp::ServiceExt;
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("MCP handshake on stdio failed: {e}"))?;
    running
        .waiting()
        .await
        .map_err(|e| format!("the MCP server stopped: {e}"))?;
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
    rmcp::transport::StreamableHttpService::new(move || Ok(server.clone()), Arc::default(), config)
}
