//! Our side of an MCP connection: what we tell the server about ourselves, its
//! notifications (tools changed, log messages, progress) and its requests to us: a
//! completion of the run's model (sampling), an answer to a form (elicitation) and the
//! roots, each recorded as an event of the run (issue #29).
//!
//! rmcp marks roots, logging and sampling deprecated (SEP-2577 moves them out of a future
//! revision); the servers of 2025-11-25 and 2026-07-28 use them today, so we answer them.
#![expect(deprecated)]

use fabric_domain::runlog::{
    MAX_MCP_MESSAGE_CHARS, McpMessage, McpMessageType, McpRequest, McpRequestOutcome,
};
use fabric_domain::{EventKind, McpElicitation};
use rmcp::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ElicitResult, ElicitationAction, ElicitationCapability, ErrorCode,
    ErrorData, FormElicitationCapability, ListRootsResult, LoggingMessageNotificationParam,
    ProgressNotificationParam, ProgressToken, Root, RootsCapabilities,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use serde_json::{Value, json};
use std::sync::{Arc, Weak};
use tokio::sync::mpsc;

use crate::asks;
use crate::source::Shared;

/// The client handler of one server.
#[derive(Clone)]
pub(crate) struct Handler {
    /// Capacity 1: several announcements before the next listing are one relisting.
    pub(crate) tools_changed: mpsc::Sender<()>,
    /// The server's name.
    pub(crate) server: String,
    /// Whether it may borrow the run's model (`sampling`).
    pub(crate) sampling: bool,
    /// How its forms are answered (`elicitation`).
    pub(crate) elicitation: McpElicitation,
    /// The run's side: its notices, workspace and model. Weak: the connection this handler
    /// serves is owned by it.
    pub(crate) hub: Weak<Shared>,
    /// Set on the handler of a connection lent to many runs (ADR-122): what the server sends
    /// is passed to the handler of the run it names, never answered here.
    pub(crate) routes: Option<Arc<crate::mux::Routes>>,
}

impl Handler {
    /// Records `event` for the run, if it is still going.
    fn record(&self, kind: EventKind, payload: Result<Value, fabric_domain::DomainError>) {
        if let (Some(hub), Ok(payload)) = (self.hub.upgrade(), payload) {
            hub.push_notice(kind, payload);
        }
    }

    fn record_request(&self, event: &McpRequest) {
        use fabric_domain::runlog::Payload as _;
        self.record(EventKind::McpRequest, event.to_json());
    }

    fn record_message(&self, event: &McpMessage) {
        use fabric_domain::runlog::Payload as _;
        self.record(EventKind::McpMessage, event.to_json());
    }

    /// Refuses a request of the server: recorded with `reason`, answered with an error that
    /// says it.
    fn refuse(&self, method: &str, outcome: McpRequestOutcome, reason: String) -> ErrorData {
        let mut event = McpRequest::new(&self.server, method, outcome);
        event.reason = Some(reason.clone());
        self.record_request(&event);
        // -1: the code the specification gives for a request the client's user rejected.
        ErrorData::new(ErrorCode(-1), reason, None)
    }
}

/// What a text field of an `mcp_message` holds: a string as it is, anything else as JSON,
/// cut to [`MAX_MCP_MESSAGE_CHARS`].
fn message_text(data: &Value) -> String {
    let text = match data {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match text.char_indices().nth(MAX_MCP_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// Who we are to a server and what we answer (the same for every run, so a warm process's
/// discovery, ADR-117, says what the run's own would).
pub(crate) fn client_info() -> rmcp::model::ClientConfig {
    let mut capabilities = ClientCapabilities::default();
    capabilities.roots = Some(RootsCapabilities::default());
    capabilities.elicitation =
        Some(ElicitationCapability::new().with_form(FormElicitationCapability::new()));
    // Declared even when the config refuses it, so the server asks and the refusal is
    // recorded naming the key (a server that finds no capability fails on its own words).
    capabilities.sampling = Some(Default::default());
    let mut info = rmcp::model::ClientConfig::new(
        capabilities,
        rmcp::model::Implementation::new("agent-fabric", env!("CARGO_PKG_VERSION")),
    );
    info.protocol_version = rmcp::model::ProtocolVersion::V_2025_11_25;
    info
}

impl Handler {
    /// The handler of a connection lent to many runs: it routes, it answers nothing itself.
    pub(crate) fn routing(server: &str, routes: Arc<crate::mux::Routes>) -> Self {
        let (tools_changed, _) = mpsc::channel(1);
        Self {
            tools_changed,
            server: server.to_owned(),
            sampling: false,
            elicitation: McpElicitation::default(),
            hub: Weak::new(),
            routes: Some(routes),
        }
    }

    /// Who answers a request the server sends: this handler, or on a shared connection the
    /// run whose call it belongs to (an input request of its multi-round call, or a request
    /// naming its progress token). `Err`: it names no run's request, refused.
    fn answerer(&self, context: &RequestContext<RoleClient>) -> Result<Self, ErrorData> {
        let Some(routes) = &self.routes else {
            return Ok(self.clone());
        };
        let by_token = || {
            context
                .meta
                .get_progress_token()
                .and_then(|t| routes.by_token(&t))
        };
        routes.caller().or_else(by_token).ok_or_else(|| {
            tracing::debug!(server = %self.server, "a shared MCP server's request names no run's call; refused");
            ErrorData::invalid_request(
                format!(
                    "MCP server `{}` serves several runs at once: a request must belong to a call in progress (sent as an input request of the call, or naming its progress token)",
                    self.server
                ),
                None,
            )
        })
    }

    /// Who records a notification naming `token` (if it names one): this handler, or on a
    /// shared connection the run whose request carried it; `None`: dropped (logged at debug).
    fn recorder(&self, token: Option<&ProgressToken>, what: &str) -> Option<Self> {
        let Some(routes) = &self.routes else {
            return Some(self.clone());
        };
        let found = token.and_then(|t| routes.by_token(t));
        if found.is_none() {
            tracing::debug!(server = %self.server, what, "a shared MCP server's notification names no run's request; dropped");
        }
        found
    }

    fn record_log(&self, params: LoggingMessageNotificationParam) {
        let level = serde_json::to_value(params.level)
            .ok()
            .and_then(|l| l.as_str().map(str::to_owned));
        self.record_message(&McpMessage {
            server: self.server.clone(),
            message_type: McpMessageType::Log,
            level,
            logger: params.logger,
            message: Some(message_text(&params.data)),
            progress: None,
            total: None,
            tool: None,
        });
    }

    fn record_progress(&self, params: ProgressNotificationParam) {
        let tool = self.hub.upgrade().and_then(|hub| hub.call_of(&self.server));
        self.record_message(&McpMessage {
            server: self.server.clone(),
            message_type: McpMessageType::Progress,
            level: None,
            logger: None,
            message: params.message.as_deref().map(|m| message_text(&json!(m))),
            progress: Some(params.progress),
            total: params.total,
            tool,
        });
    }

    fn roots(&self) -> ListRootsResult {
        let roots: Vec<Root> = self
            .hub
            .upgrade()
            .and_then(|hub| hub.workspace())
            // A URI, so a path with spaces or other reserved characters is escaped.
            .and_then(|dir| reqwest::Url::from_file_path(&dir).ok())
            .map(|uri| Root::new(uri.to_string()).with_name("workspace"))
            .into_iter()
            .collect();
        let mut event = McpRequest::new(&self.server, asks::ROOTS, McpRequestOutcome::Answered);
        event.fields = Some(roots.iter().map(|r| r.uri.clone()).collect());
        self.record_request(&event);
        ListRootsResult::new(roots)
    }

    fn elicit(&self, request: &rmcp::model::ElicitRequestParams) -> ElicitResult {
        let params = serde_json::to_value(request).unwrap_or(Value::Null);
        let elicited = asks::elicit(&self.server, self.elicitation, &params);
        self.record_request(&elicited.event);
        match elicited.accepted {
            Some(content) => {
                let mut result = ElicitResult::new(ElicitationAction::Accept);
                result.content = Some(Value::Object(content));
                result
            }
            None => ElicitResult::new(ElicitationAction::Decline),
        }
    }

    async fn sample(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
    ) -> Result<rmcp::model::CreateMessageResult, ErrorData> {
        if !self.sampling {
            return Err(self.refuse(
                asks::SAMPLING,
                McpRequestOutcome::Refused,
                format!(
                    "MCP server `{}` may not use the run's model (`sampling: false` in its config)",
                    self.server
                ),
            ));
        }
        let Some(sampler) = self.hub.upgrade().and_then(|hub| hub.sampler()) else {
            return Err(self.refuse(
                asks::SAMPLING,
                McpRequestOutcome::Refused,
                "no model is lent outside a run's loop".into(),
            ));
        };
        let wire = serde_json::to_value(&params).unwrap_or(Value::Null);
        let request = asks::sample_request(&wire).inspect_err(|e| {
            let mut event =
                McpRequest::new(&self.server, asks::SAMPLING, McpRequestOutcome::Failed);
            event.reason = Some(e.message.to_string());
            self.record_request(&event);
        })?;
        let sampled = sampler.sample(request).await.map_err(|e| {
            let outcome = match e {
                fabric_core::SampleError::Model(_) => McpRequestOutcome::Failed,
                fabric_core::SampleError::Budget(_) | fabric_core::SampleError::Cancelled => {
                    McpRequestOutcome::Refused
                }
            };
            self.refuse(asks::SAMPLING, outcome, e.to_string())
        })?;
        let mut event = McpRequest::new(&self.server, asks::SAMPLING, McpRequestOutcome::Answered);
        event.model_key = Some(sampled.model_key);
        event.model = Some(sampled.model.clone());
        event.usage = Some(sampled.usage);
        self.record_request(&event);
        serde_json::from_value(json!({
            "model": sampled.model,
            "stopReason": sampled.stop_reason,
            "role": "assistant",
            "content": {"type": "text", "text": sampled.text},
        }))
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }
}

impl ClientHandler for Handler {
    /// Who we are to the server: the fabric by its name and version (rmcp's default names
    /// rmcp), asking in the `initialize` handshake for its newest revision, 2025-11-25
    /// (2026-07-28 has no `initialize`; issue #29), with what we answer: roots, forms
    /// (declined unless the config says otherwise) and sampling (refused when it says so).
    fn get_info(&self) -> rmcp::model::ClientConfig {
        client_info()
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // On a shared connection the list is every run's: each relists.
        let handlers = match &self.routes {
            Some(routes) => routes.all(),
            None => vec![self.clone()],
        };
        for handler in handlers {
            // Full means a relisting is already pending, which will see this change too.
            let _ = handler.tools_changed.try_send(());
        }
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        let token = params
            .meta
            .as_ref()
            .and_then(|m| m.get("progressToken"))
            .or_else(|| context.meta.get("progressToken"))
            .and_then(|t| serde_json::from_value::<ProgressToken>(t.clone()).ok());
        if let Some(recorder) = self.recorder(token.as_ref(), "log message") {
            recorder.record_log(params);
        }
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(recorder) = self.recorder(Some(&params.progress_token), "progress") {
            recorder.record_progress(params);
        }
    }

    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        Ok(self.answerer(&context)?.roots())
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(self.answerer(&context)?.elicit(&request))
    }

    // Its parameters are read as JSON (`asks::sample_request`).
    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, ErrorData> {
        self.answerer(&context)?.sample(params).await
    }
}

/// What a handler needs from the run, lent when the run starts its servers.
pub(crate) struct RunLoan {
    pub(crate) workspace: std::path::PathBuf,
    pub(crate) sampler: Option<Arc<dyn fabric_core::Sampler>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_29_log_data_is_text_cut_to_size() {
        assert_eq!(message_text(&json!("hello")), "hello");
        assert_eq!(message_text(&json!({"n": 1})), r#"{"n":1}"#);
        let long = "é".repeat(MAX_MCP_MESSAGE_CHARS + 5);
        assert_eq!(
            message_text(&json!(long)).chars().count(),
            MAX_MCP_MESSAGE_CHARS + 1
        );
    }
}
