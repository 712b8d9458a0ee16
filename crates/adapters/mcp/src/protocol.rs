//! [`FabricMcpServer`] as rmcp's [`ServerHandler`]: what the server declares and how each MCP
//! method reaches the server's parts (tools in `server`, prompts in `prompts`, resources in
//! `resources`, subscriptions in `watch`, logging in `logging`).
//!
//! Declared only what is implemented (issue #29): tools, prompts, resources with `subscribe`,
//! completions (run ids and workspace paths), logging, and the tasks extension (`run_task` as
//! a task, `tasks/get`, `tasks/cancel`). No `listChanged`: the lists do not change.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    CompleteRequestParams, CompleteResult, ContentBlock, GetPromptRequestParams, GetPromptResponse,
    GetTaskParams, GetTaskResult, Implementation, InitializeResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, SubscribeRequestParams,
    SubscriptionFilter, UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData, ServerHandler};
use serde_json::Value;

use crate::server::{self, FabricMcpServer};
use crate::{completion, prompts, resources, uri, watch};

impl ServerHandler for FabricMcpServer {
    fn get_info(&self) -> InitializeResult {
        #[expect(
            deprecated,
            reason = "logging is retired after 2026-07-28, still defined up to it"
        )]
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_tools()
            .enable_tasks()
            .build();
        InitializeResult::new(capabilities)
            .with_server_info(Implementation::new("agent-fabric", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "agent-fabric runs tasks with specialist agents on local models. Call list_specialists to see who can work, run_task to hand over a task, get_run to read a run again, search_runs to find earlier runs, run_stats for figures. Runs are resources too: fabric://runs/{run_id}, its runlog and its workspace's files.",
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

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(prompts::list(&self.specialists))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        prompts::get(&self.specialists, &request).map(GetPromptResponse::Complete)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let cursor = request.and_then(|r| r.cursor);
        self.resources.list(cursor.as_deref()).await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(resources::templates())
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.resources
            .read(&request.uri)
            .await
            .map(ReadResourceResponse::from)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let target = uri::parse(&request.uri)?;
        // A run that does not exist is refused now, not watched forever.
        self.resources.events(target.run(), &request.uri).await?;
        self.session.subscriptions.add(
            self.service.clone(),
            target.run().clone(),
            request.uri,
            context.peer,
        );
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.session.subscriptions.remove(&request.uri);
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(watch::accepted(requested))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        watch::listen(&self.service, context).await;
        Ok(())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.tasks.get(&request.task_id)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // Cooperative, as the extension says: the run records `cancelled` and the task
        // follows; one that has ended stays as it ended.
        let run = self.tasks.run_of(&request.task_id)?;
        self.service.cancel(&run);
        Ok(())
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.run_of(&request.task_id)?;
        Err(ErrorData::invalid_params(
            format!(
                "task `{}` asked for no input: a run of run_task never does, so there is nothing to answer",
                request.task_id
            ),
            None,
        ))
    }

    #[expect(
        deprecated,
        reason = "logging/setLevel is the handshake revisions' way"
    )]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.session.level.set(request.level);
        Ok(())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        completion::complete(&self.resources, &self.specialists, &request).await
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
        if let Err(violations) = fabric_domain::schema::validate(&spec.input_schema, &args) {
            return Ok(CallToolResponse::Complete(CallToolResult::error(vec![
                ContentBlock::text(format!(
                    "invalid arguments for `{}`: {violations}",
                    spec.name
                )),
            ])));
        }
        // A 2026-07-28 request whose envelope declares the tasks extension gets `run_task` as
        // a task (issue #29). SEP-2663 extends 2026-07-28: on a 2025-11-25 session the
        // extension is ignored, as the MCP Inspector (which declares it at `initialize` and
        // then expects a plain result) relies on, and the blocking answer is given.
        if spec.name == "run_task"
            // Only a 2026-07-28 (or later) request carries its revision in `_meta`.
            && context.meta.protocol_version().is_some()
            && context
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks())
        {
            let started = server::parse(args).and_then(|input| self.start_task(input, &context));
            return Ok(match started {
                Ok(task) => CallToolResponse::Task(task),
                Err(error) => {
                    CallToolResponse::Complete(CallToolResult::error(vec![ContentBlock::text(
                        error.to_string(),
                    )]))
                }
            });
        }
        let result = match self.dispatch(&spec.name, args, &context).await {
            Ok(value) => CallToolResult::structured(value),
            // The typed error's words, exactly as the client has always read them.
            Err(error) => CallToolResult::error(vec![ContentBlock::text(error.to_string())]),
        };
        Ok(CallToolResponse::Complete(result))
    }
}
