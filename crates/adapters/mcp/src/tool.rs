//! One MCP server's tool as a fabric [`Tool`]: its schema becomes a [`ToolSpec`] like any
//! other, and a call goes to the server with a timeout.

use async_trait::async_trait;
use base64::Engine as _;
use fabric_core::{Tool, ToolContext, ToolError, ToolOutput};
use fabric_domain::{ToolAnnotations, ToolImage, ToolSpec, mcp_tool_name};
use rmcp::model::CallToolRequestParams;
use serde_json::Value;
use std::sync::{Arc, Weak};

use crate::connect::Service;
use std::time::Duration;

use crate::source::Shared;

/// Longest tool name OpenAI-compatible servers accept.
const MAX_TOOL_NAME: usize = 64;

/// A tool of an MCP server.
pub(crate) struct McpTool {
    spec: ToolSpec,
    server: String,
    remote_name: String,
    /// Weak: the connection owns the service; a call holds it only while it runs.
    service: Weak<Service>,
    timeout: Duration,
    hub: Weak<Shared>,
    /// The run's share of a connection other runs use too (ADR-122), and its route on it.
    lease: Weak<crate::pool::Lease>,
    route: Option<u64>,
}

/// What a server's `tools/list` entry becomes: a tool, or why it was left out.
pub(crate) enum Converted {
    /// Usable.
    Tool(Box<ToolSpec>, String),
    /// Left out, with the reason (reported in the `mcp_server` event, never silently).
    Skipped(String, String),
}

/// The contract of one listed tool: `mcp__<server>__<tool>`, the server's description and
/// schema, and its annotations read as hints (`readOnlyHint`, `destructiveHint`,
/// `openWorldHint`, each false unless the server says true).
pub(crate) fn convert(server: &str, tool: &rmcp::model::Tool) -> Converted {
    let raw = serde_json::to_value(tool).unwrap_or(Value::Null);
    let remote = raw["name"].as_str().unwrap_or_default().to_owned();
    let name = mcp_tool_name(server, &remote);
    let valid_name = name.len() <= MAX_TOOL_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid_name {
        return Converted::Skipped(
            remote,
            format!(
                "`{name}` is not a valid tool name for models (letters, digits, `_`, `-`, at most {MAX_TOOL_NAME} characters)"
            ),
        );
    }
    let description = raw["description"]
        .as_str()
        .or_else(|| raw["title"].as_str())
        .unwrap_or("(no description)");
    let description = format!("{description} (tool `{remote}` of MCP server `{server}`)");
    let mut schema = raw["inputSchema"].clone();
    // Some servers list `{}` for tools without parameters.
    if schema.as_object().is_some_and(|m| m.is_empty()) {
        schema = serde_json::json!({"type": "object"});
    }
    // `$schema` stays in the contract (SEP-1613: a client preserves the server's schema); the
    // definitions sent to models leave it out (`ToolSpec::tool_def`).
    let hint = |key: &str| raw["annotations"][key].as_bool() == Some(true);
    match ToolSpec::with_schema(&name, &description, schema) {
        Ok(spec) => Converted::Tool(
            Box::new(spec.annotate(ToolAnnotations {
                read_only: hint("readOnlyHint"),
                destructive: hint("destructiveHint"),
                needs_network: hint("openWorldHint"),
            })),
            remote,
        ),
        Err(e) => Converted::Skipped(remote, e.to_string()),
    }
}

impl McpTool {
    pub(crate) fn new(
        spec: ToolSpec,
        server: &str,
        remote_name: String,
        service: Weak<Service>,
        timeout: Duration,
        hub: Weak<Shared>,
    ) -> Self {
        Self {
            spec,
            server: server.to_owned(),
            remote_name,
            service,
            timeout,
            hub,
            lease: Weak::new(),
            route: None,
        }
    }

    /// Calls through `lease`'s shared connection as the run it routes.
    pub(crate) fn on_lease(mut self, lease: Option<&Arc<crate::pool::Lease>>) -> Self {
        if let Some(lease) = lease {
            self.lease = Arc::downgrade(lease);
            self.route = Some(lease.route);
        }
        self
    }
}

impl McpTool {
    /// The server stopped: its tools go, and the model is told to use others.
    fn stopped(&self, why: &str) -> ToolError {
        let detail = match self.hub.upgrade() {
            Some(hub) => hub.server_stopped(&self.server),
            None => String::new(),
        };
        ToolError::Failed(format!(
            "MCP server `{}` stopped while running `{}` ({why}{detail}); its tools are not available any more in this run, use other tools",
            self.server, self.spec.name
        ))
    }

    /// The connection to call on: the run's own, or its share of a pooled process, renewed
    /// on another process of the pool if that one stopped.
    async fn service(&self) -> Result<Arc<Service>, ToolError> {
        if self.route.is_none() {
            return self
                .service
                .upgrade()
                .ok_or_else(|| self.stopped("the connection is closed"));
        }
        match self.lease.upgrade() {
            Some(lease) => lease.renew().await.ok_or_else(|| {
                self.stopped("no process of it came up again within its startup_timeout_s")
            }),
            None => Err(self.stopped("the connection is closed")),
        }
    }

    /// The connection closed during the call: a shared process (other runs' too) is restarted
    /// by the pool and the run keeps its tools; a process of the run's own takes them along.
    fn closed_during_call(&self, why: &str) -> ToolError {
        if self.route.is_none() {
            return self.stopped(why);
        }
        ToolError::Failed(format!(
            "MCP server `{}` stopped while running `{}` ({why}); it is being restarted: call the tool again (the call may or may not have taken effect)",
            self.server, self.spec.name
        ))
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<Value, ToolError> {
        self.call_for_model(args, ctx)
            .await
            .map(|output| output.result)
    }

    /// The result's text, and its image blocks for a model that reads images: the text
    /// keeps their placeholders either way, so the runlog reads the same (ADR-087).
    async fn call_for_model(
        &self,
        args: Value,
        _ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let arguments = match args {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        let mut params =
            CallToolRequestParams::new(self.remote_name.clone()).with_arguments(arguments);
        // The tool call's span as the server's parent, in `_meta` (SEP-414), when the run is
        // traced (issue #13); stdio and HTTP servers alike.
        let mut meta = rmcp::model::RequestMetaObject::new();
        if let Some(traceparent) = fabric_core::trace::current_traceparent() {
            meta.set_traceparent(traceparent);
        }
        // Log messages of `info` and above during the call (a 2026-07-28 server sends none
        // unless asked; issue #29). rmcp adds a progress token to every request.
        #[expect(deprecated)] // logging leaves in a future revision (SEP-2577)
        meta.set_log_level(rmcp::model::LoggingLevel::Info);
        if let Some(route) = self.route {
            // Taken off before the request is written (`mux::Routed`).
            meta.insert(crate::mux::ROUTE_KEY.into(), route.into());
        }
        params.meta = Some(meta);
        let service = self.service().await?;
        // The server's progress during the call is recorded as this tool's.
        let _calling = self
            .hub
            .upgrade()
            .map(|hub| hub.calling(&self.server, &self.spec.name));
        // `call_tool` answers a 2026-07-28 server's input requests (sampling, elicitation,
        // roots; SEP-2322) through our handler and retries, as a 2025-11-25 server's own
        // requests are answered during the call.
        let call = tokio::time::timeout(self.timeout, service.call_tool(params));
        let answer = match self.route {
            // The input requests of the call are answered by this run (`mux::CALLER`).
            Some(route) => crate::mux::CALLER.scope(route, call).await,
            None => call.await,
        };
        let result = match answer {
            Err(_) => {
                return Err(ToolError::Failed(format!(
                    "`{}` did not answer within {} s (call_timeout_s of MCP server `{}`); try a smaller request or another tool",
                    self.spec.name,
                    self.timeout.as_secs(),
                    self.server
                )));
            }
            Ok(Err(e)) => {
                if service.is_transport_closed() {
                    return Err(self.closed_during_call(&e.to_string()));
                }
                return Err(ToolError::Failed(format!(
                    "`{}` failed: {e}",
                    self.spec.name
                )));
            }
            Ok(Ok(result)) => result,
        };
        let raw = serde_json::to_value(&result).unwrap_or(Value::Null);
        let text = render(&raw);
        if raw["isError"].as_bool() == Some(true) {
            return Err(ToolError::Failed(format!(
                "`{}` reported an error: {text}",
                self.spec.name
            )));
        }
        Ok(ToolOutput {
            result: Value::String(text),
            images: images(&raw),
        })
    }
}

/// A `tools/call` result's image blocks whose data is base64 (a block that is not is
/// left at its placeholder: a model's server would refuse the whole request for it).
fn images(result: &Value) -> Vec<ToolImage> {
    let blocks = result["content"].as_array().into_iter().flatten();
    blocks
        .filter(|block| block["type"].as_str() == Some("image"))
        .filter_map(|block| {
            let data = block["data"].as_str()?;
            let mime_type = block["mimeType"].as_str().unwrap_or_default();
            if let Err(e) = base64::engine::general_purpose::STANDARD.decode(data) {
                tracing::warn!(mime_type, error = %e, "an MCP image block is not base64; the model gets its placeholder only");
                return None;
            }
            Some(ToolImage::new(mime_type, data))
        })
        .collect()
}

/// A `resource_link` block as text: its URI, with what the server says of it (name,
/// title, type, size, description) so the model can decide to read it; nothing is fetched.
fn resource_link(block: &Value) -> String {
    let uri = block["uri"].as_str().unwrap_or("");
    let name = block["name"]
        .as_str()
        .filter(|n| !n.is_empty() && *n != uri);
    let title = block["title"].as_str().filter(|t| Some(*t) != name);
    let size = block["size"].as_u64().map(|n| format!("{n} bytes"));
    let facts: Vec<String> = [name, title, block["mimeType"].as_str()]
        .into_iter()
        .flatten()
        .map(str::to_owned)
        .chain(size)
        .collect();
    let mut text = format!("[resource link {uri}");
    if !facts.is_empty() {
        text.push_str(&format!(" ({})", facts.join(", ")));
    }
    if let Some(description) = block["description"].as_str().filter(|d| !d.is_empty()) {
        text.push_str(&format!(": {description}"));
    }
    text.push(']');
    text
}

/// A `tools/call` result as text for the model: text blocks as they are, other blocks
/// described, and the structured content when there is no text.
fn render(result: &Value) -> String {
    let mut parts: Vec<String> = Vec::new();
    for block in result["content"].as_array().into_iter().flatten() {
        let part = match block["type"].as_str() {
            Some("text") => block["text"].as_str().unwrap_or_default().to_owned(),
            Some("image") | Some("audio") => format!(
                "[{} content, {}, {} base64 characters]",
                block["type"].as_str().unwrap_or_default(),
                block["mimeType"].as_str().unwrap_or("unknown type"),
                block["data"].as_str().map_or(0, str::len)
            ),
            Some("resource") => {
                let r = &block["resource"];
                match r["text"].as_str() {
                    Some(text) => format!("[resource {}]\n{text}", r["uri"].as_str().unwrap_or("")),
                    None => format!("[resource {}]", r["uri"].as_str().unwrap_or("")),
                }
            }
            Some("resource_link") => resource_link(block),
            _ => block.to_string(),
        };
        parts.push(part);
    }
    if parts.is_empty() {
        if let Some(structured) = result.get("structuredContent") {
            return structured.to_string();
        }
        return "(the tool returned no content)".to_owned();
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn results_render_text_and_describe_the_rest() {
        let r = json!({"content": [{"type": "text", "text": "hi"}, {"type": "image", "mimeType": "image/png", "data": "AAAA"}]});
        assert_eq!(
            render(&r),
            "hi\n[image content, image/png, 4 base64 characters]"
        );
        assert_eq!(
            render(&json!({"content": [], "structuredContent": {"a": 1}})),
            r#"{"a":1}"#
        );
        assert_eq!(render(&json!({})), "(the tool returned no content)");
    }

    #[test]
    fn issue_29_image_blocks_reach_the_model_and_links_say_what_they_are() {
        let r = json!({"content": [
            {"type": "text", "text": "here"},
            {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="},
            {"type": "image", "mimeType": "image/png", "data": "not base64!"},
            {"type": "audio", "mimeType": "audio/wav", "data": "AAAA"}
        ]});
        assert_eq!(
            images(&r),
            vec![ToolImage::new("image/png", "iVBORw0KGgo=")]
        );
        assert!(render(&r).contains("[image content, image/png, 12 base64 characters]"));
        let link = |block: Value| render(&json!({"content": [block]}));
        assert_eq!(
            link(json!({"type": "resource_link", "uri": "file:///a.txt", "name": "file:///a.txt"})),
            "[resource link file:///a.txt]"
        );
        assert_eq!(
            link(
                json!({"type": "resource_link", "uri": "file:///r.md", "name": "r.md", "title": "Readme",
                "mimeType": "text/markdown", "size": 120, "description": "The project's readme"})
            ),
            "[resource link file:///r.md (r.md, Readme, text/markdown, 120 bytes): The project's readme]"
        );
    }

    #[test]
    fn listed_tools_become_contracts_or_are_skipped_with_a_reason() {
        let tool: rmcp::model::Tool = serde_json::from_value(json!({
            "name": "echo", "description": "Echoes.", "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}},
            "annotations": {"readOnlyHint": true}
        })).unwrap_or_else(|e| panic!("{e}"));
        match convert("everything", &tool) {
            Converted::Tool(spec, remote) => {
                assert_eq!(spec.name, "mcp__everything__echo");
                assert_eq!(remote, "echo");
                assert!(spec.annotations.read_only && !spec.annotations.needs_network);
                assert!(spec.description.contains("MCP server `everything`"));
            }
            Converted::Skipped(_, why) => panic!("{why}"),
        }
        let long: rmcp::model::Tool = serde_json::from_value(json!({
            "name": "x".repeat(70), "inputSchema": {"type": "object"}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(convert("s", &long), Converted::Skipped(..)));
    }
}
