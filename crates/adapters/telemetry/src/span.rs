//! Spans of runs, built from their events as they pass (the engine knows nothing of
//! traces): one `invoke_agent` span per run and per task-force member, a `chat` span per
//! model call, an `execute_tool` span per tool call, following the OpenTelemetry GenAI
//! semantic conventions (v1.37); plus the fabric's own spans for routing and MCP server
//! start-up. A child run (a sub-agent, a critic) continues its parent's trace under the
//! parent's tool call that started it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use fabric_domain::runlog::{
    self, CriticReview, EventPayload, LlmToolCall, McpServer, McpStatus, RunStart,
};
use fabric_domain::{EventKind, RunEvent, RunId, RunStatus, Usage};
use serde_json::Value;

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    /// A string.
    Str(String),
    /// A 64-bit integer.
    Int(i64),
    /// A float.
    Double(f64),
    /// A boolean.
    Bool(bool),
    /// An array of strings.
    StrArray(Vec<String>),
}

/// `SpanKind` of OTLP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// In-process work (an agent, a tool, routing).
    Internal = 1,
    /// A call to another service (a model server).
    Client = 3,
}

/// A finished span.
#[derive(Debug, Clone)]
pub struct Span {
    /// The trace it belongs to.
    pub trace_id: [u8; 16],
    /// Its own id.
    pub span_id: [u8; 8],
    /// The span it hangs under; `None` for a trace's root.
    pub parent: Option<[u8; 8]>,
    /// `invoke_agent engineering`, `chat qwen2.5:7b`, `execute_tool shell`, …
    pub name: String,
    /// Internal or client.
    pub kind: Kind,
    /// Seconds since the epoch (the events' `ts`).
    pub start: f64,
    /// Seconds since the epoch.
    pub end: f64,
    /// Its attributes.
    pub attributes: Vec<(String, Attr)>,
    /// The error status's message, when it failed.
    pub error: Option<String>,
}

/// Where finished spans go (the exporter's queue).
pub trait SpanSink: Send + Sync {
    /// One finished span; must not block.
    fn emit(&self, span: Span);
}

fn new_span_id() -> [u8; 8] {
    let mut id = [0; 8];
    id.copy_from_slice(&uuid::Uuid::new_v4().as_bytes()[..8]);
    id
}

/// A span begun and not yet ended.
#[derive(Debug, Clone)]
struct Open {
    span_id: [u8; 8],
    parent: Option<[u8; 8]>,
    name: String,
    kind: Kind,
    start: f64,
    attributes: Vec<(String, Attr)>,
}

impl Open {
    fn new(parent: Option<[u8; 8]>, name: String, kind: Kind, start: f64) -> Self {
        Self {
            span_id: new_span_id(),
            parent,
            name,
            kind,
            start,
            attributes: Vec::new(),
        }
    }

    fn attr(&mut self, key: &str, value: Attr) {
        self.attributes.push((key.to_owned(), value));
    }

    fn str(&mut self, key: &str, value: &str) {
        self.attr(key, Attr::Str(value.to_owned()));
    }

    fn end(self, trace_id: [u8; 16], end: f64, error: Option<String>) -> Span {
        Span {
            trace_id,
            span_id: self.span_id,
            parent: self.parent,
            name: self.name,
            kind: self.kind,
            start: self.start,
            end,
            attributes: self.attributes,
            error,
        }
    }
}

/// Where an event stands: its run, its time and its member.
struct At<'a> {
    run: &'a RunId,
    ts: f64,
    member: Option<u32>,
}

/// The review happens inside the `finish_task` call it judges: its verdict goes on that
/// span (the critic's own run is a child span under it).
fn review_on_finish(t: &mut RunTrace, review: &CriticReview) {
    if let Some((_, span)) = t
        .tools
        .iter_mut()
        .rev()
        .find(|(_, tool)| tool.name == "execute_tool finish_task")
    {
        span.str("fabric.critic", &review.critic);
        span.attr("fabric.critic.approved", Attr::Bool(review.approved));
        span.attr("fabric.critic.round", Attr::Int(i64::from(review.round)));
        span.attr(
            "fabric.critic.findings",
            Attr::Int(i64::try_from(review.findings.len()).unwrap_or(i64::MAX)),
        );
    }
}

/// One run's trace in progress.
#[derive(Debug)]
struct RunTrace {
    trace_id: [u8; 16],
    root: Open,
    /// The task-force members working now, by `pack_index` (parallel members overlap).
    members: HashMap<u32, Open>,
    /// The model call in flight, by `pack_index` (`None`: a lone specialist, routing).
    chats: HashMap<Option<u32>, Open>,
    tools: Vec<(String, Open)>,
    /// The model key of each member (`None`: a lone specialist), for its calls' provider.
    model_keys: HashMap<Option<u32>, String>,
    /// A cloud fallback's key, for that member's next model call only.
    next_call_keys: HashMap<Option<u32>, String>,
    task_force: bool,
}

impl RunTrace {
    /// The span a member's work hangs under: the member's, else the run's.
    fn current(&self, member: Option<u32>) -> [u8; 8] {
        member
            .and_then(|i| self.members.get(&i))
            .unwrap_or(&self.root)
            .span_id
    }

    /// The model key a member's calls use now.
    fn model_key(&self, member: Option<u32>) -> String {
        self.model_keys
            .get(&member)
            .or_else(|| self.model_keys.get(&None))
            .cloned()
            .unwrap_or_default()
    }

    /// Takes the span of tool call `call_id` out of those in flight.
    fn take_tool(&mut self, call_id: &str) -> Option<Open> {
        let i = self.tools.iter().position(|(id, _)| id == call_id)?;
        Some(self.tools.remove(i).1)
    }

    /// The `traceparent` of the latest model or tool call in flight, for its outgoing
    /// request (a model request, an MCP `tools/call`).
    fn call_traceparent(&self) -> Option<String> {
        let call = self
            .chats
            .values()
            .chain(self.tools.iter().map(|(_, tool)| tool))
            .max_by(|a, b| a.start.total_cmp(&b.start))?;
        Some(format_traceparent(&self.trace_id, &call.span_id))
    }
}

/// A W3C `traceparent` header for `span` of `trace`, sampled.
pub fn format_traceparent(trace: &[u8; 16], span: &[u8; 8]) -> String {
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    format!("00-{}-{}-01", hex(trace), hex(span))
}

/// How to read a `traceparent` header: `00-<trace id>-<span id>-<flags>`.
pub fn parse_traceparent(header: &str) -> Option<([u8; 16], [u8; 8])> {
    let mut parts = header.trim().split('-');
    let (version, trace, span) = (parts.next()?, parts.next()?, parts.next()?);
    parts.next()?;
    if version.len() != 2 || version == "ff" || trace.len() != 32 || span.len() != 16 {
        return None;
    }
    let hex = |s: &str, out: &mut [u8]| -> Option<()> {
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(())
    };
    let (mut t, mut s) = ([0; 16], [0; 8]);
    hex(trace, &mut t)?;
    hex(span, &mut s)?;
    (t != [0; 16] && s != [0; 8]).then_some((t, s))
}

/// Builds spans from the events of every run of a process.
pub struct Tracer {
    state: Mutex<State>,
    sink: Box<dyn SpanSink>,
    capture_content: bool,
    /// Model key → provider (`gen_ai.provider.name`: `ollama`, `openai`, `anthropic`).
    providers: HashMap<String, String>,
}

#[derive(Default)]
struct State {
    runs: HashMap<RunId, RunTrace>,
    /// Remote parents given before a run's first event (`traceparent`).
    remote: HashMap<RunId, ([u8; 16], [u8; 8])>,
}

/// A content attribute's text, capped (a tool result may be megabytes).
fn capped(v: &Value) -> String {
    cap(match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

fn cap(mut s: String) -> String {
    const CAP: usize = 4096;
    if s.len() > CAP {
        let mut end = CAP;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

/// The token counts of a model call or a run, as GenAI attributes.
fn usage_attrs(span: &mut Open, usage: Usage) {
    for (n, attr) in [
        (usage.prompt_tokens, "gen_ai.usage.input_tokens"),
        (usage.completion_tokens, "gen_ai.usage.output_tokens"),
    ] {
        if let Ok(n) = i64::try_from(n) {
            span.attr(attr, Attr::Int(n));
        }
    }
}

/// What a `chat` span takes from an answer, a member's or the routing call's.
struct Answer<'a> {
    usage: Option<Usage>,
    finish_reason: Option<&'a str>,
    content: Option<&'a str>,
    tool_calls: &'a [LlmToolCall],
    /// Why the routing call's answer was not used.
    error: Option<&'a str>,
}

/// What a run's root span takes from its end, a run's own or a host's for a panicked run.
struct End<'a> {
    specialist_ids: &'a [String],
    status: RunStatus,
    usage: Option<Usage>,
    reason: Option<&'a str>,
}

impl Tracer {
    /// A tracer sending finished spans to `sink`.
    pub fn new(
        sink: Box<dyn SpanSink>,
        capture_content: bool,
        providers: HashMap<String, String>,
    ) -> Self {
        Self {
            state: Mutex::new(State::default()),
            sink,
            capture_content,
            providers,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while tracing leaves maps of spans, still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn provider(&self, key: &str) -> Option<&str> {
        self.providers.get(key).map(String::as_str)
    }

    /// Opens run `run`'s root span: from its `run_start`, or with `None` for a run continued
    /// in this process (its `run_start` was written by the process before).
    fn start_run(&self, state: &mut State, run: &RunId, ts: f64, start: Option<&RunStart>) {
        let parent_run = start.and_then(|s| s.parent_run_id.clone());
        // A child continues its parent's trace under the tool call now open (the
        // `agent__…` call, or `finish_task` for a critic), else under the parent's agent.
        let from_parent = parent_run
            .as_ref()
            .and_then(|id| state.runs.get(id))
            .map(|parent| {
                // The latest open call that starts runs: a delegation, or a finish_task
                // under review (parallel members may have other tools open).
                let under = parent
                    .tools
                    .iter()
                    .rev()
                    .find(|(_, tool)| {
                        tool.name.starts_with("execute_tool agent__")
                            || tool.name == "execute_tool finish_task"
                    })
                    .map_or_else(|| parent.current(None), |(_, tool)| tool.span_id);
                (parent.trace_id, Some(under))
            });
        let (trace_id, parent) = match (from_parent, state.remote.remove(run)) {
            (Some(link), _) => link,
            (None, Some((trace, span))) => (trace, Some(span)),
            (None, None) => (*uuid::Uuid::new_v4().as_bytes(), None),
        };
        let mut root = Open::new(parent, "invoke_agent".to_owned(), Kind::Internal, ts);
        root.str("gen_ai.operation.name", "invoke_agent");
        root.str("gen_ai.conversation.id", run.as_str());
        root.str("fabric.run_id", run.as_str());
        if let Some(start) = start {
            root.attr("fabric.depth", Attr::Int(i64::from(start.depth)));
        }
        if let Some(parent) = &parent_run {
            root.str("fabric.parent_run_id", parent.as_str());
        }
        if self.capture_content {
            let prompt = start.map(|s| s.prompt.as_str());
            let messages = serde_json::json!([{"role": "user", "parts": [{"type": "text", "content": prompt}]}]);
            root.str("gen_ai.input.messages", &messages.to_string());
        }
        let model_key = start.map(|s| s.model_key.clone()).unwrap_or_default();
        state.runs.insert(
            run.clone(),
            RunTrace {
                trace_id,
                root,
                members: HashMap::new(),
                chats: HashMap::new(),
                tools: Vec::new(),
                model_keys: HashMap::from([(None, model_key)]),
                next_call_keys: HashMap::new(),
                task_force: false,
            },
        );
    }

    /// Opens the span of a model call: a member's (`routing_key` `None`: the key is the
    /// member's, or a cloud fallback's for this one call) or the routing call's.
    fn start_chat(
        &self,
        t: &mut RunTrace,
        member: Option<u32>,
        ts: f64,
        model: &str,
        routing_key: Option<&str>,
    ) {
        let routing = routing_key.is_some();
        let key = match routing_key {
            Some(key) => key.to_owned(),
            None => t
                .next_call_keys
                .remove(&member)
                .unwrap_or_else(|| t.model_key(member)),
        };
        let parent = if routing {
            t.root.span_id
        } else {
            t.current(member)
        };
        let mut chat = Open::new(Some(parent), format!("chat {model}"), Kind::Client, ts);
        chat.str("gen_ai.operation.name", "chat");
        chat.str("gen_ai.request.model", model);
        if let Some(provider) = self.provider(&key) {
            chat.str("gen_ai.provider.name", provider);
        }
        chat.str("fabric.model_key", &key);
        if routing {
            chat.str("fabric.purpose", "routing");
        }
        if let Some(old) = t.chats.insert(member, chat) {
            self.sink.emit(old.end(t.trace_id, ts, None));
        }
    }

    /// Ends the span of the model call in flight with its answer.
    fn end_chat(&self, t: &mut RunTrace, member: Option<u32>, ts: f64, answer: Answer<'_>) {
        let Some(mut chat) = t.chats.remove(&member) else {
            return;
        };
        if let Some(usage) = answer.usage {
            usage_attrs(&mut chat, usage);
        }
        if let Some(reason) = answer.finish_reason {
            chat.attr(
                "gen_ai.response.finish_reasons",
                Attr::StrArray(vec![reason.to_owned()]),
            );
        }
        if self.capture_content {
            let message = serde_json::json!([{"role": "assistant", "parts": [{"type": "text", "content": answer.content}], "tool_calls": answer.tool_calls}]);
            chat.str("gen_ai.output.messages", &capped(&message));
        }
        let error = answer.error.map(str::to_owned);
        if error.is_some() {
            chat.str("error.type", "routing_answer_unused");
        }
        self.sink.emit(chat.end(t.trace_id, ts, error));
    }

    /// Takes one event of run `run`: the run's beginning and end, members, model calls,
    /// tool calls and MCP servers' starts, each kind named (no wildcard arm).
    pub fn observe(&self, run: &RunId, event: &RunEvent) {
        if let EventPayload::Unreadable { kind, error, .. } = &event.payload {
            // Every payload the fabric writes fits its struct, so this is a runlog from
            // elsewhere: the trace goes on without the event, and a run that ends so leaves
            // nothing behind.
            tracing::debug!(run_id = %run, %error, ?kind, "event left out of the trace");
            if kind.is_terminal() {
                self.forget(run);
            }
            return;
        }
        let mut state = self.lock();
        let payload = &event.payload;
        if self.begin_or_end(&mut state, run, event) {
            return;
        }
        let Some(t) = state.runs.get_mut(run) else {
            return;
        };
        let at = At {
            run,
            ts: event.ts,
            member: event.member,
        };
        match payload {
            EventPayload::Recruitment(r) => self.recruited(t, &at, r),
            EventPayload::MemberStart(start) => self.member_started(t, &at, start),
            EventPayload::MemberEnd(end) => self.member_ended(t, &at, end),
            EventPayload::CloudFallback(fallback) => {
                t.next_call_keys
                    .insert(at.member, fallback.cloud_model_key.clone());
            }
            EventPayload::LlmRequest(request) => {
                self.start_chat(t, at.member, at.ts, &request.model, None);
            }
            EventPayload::RoutingRequest(request) => {
                let key = Some(request.model_key.as_str());
                self.start_chat(t, at.member, at.ts, &request.model, key);
            }
            EventPayload::LlmResponse(response) => {
                let answer = Answer {
                    usage: response.usage,
                    finish_reason: response.finish_reason.as_deref(),
                    content: response.content.as_deref(),
                    tool_calls: &response.tool_calls,
                    error: None,
                };
                self.end_chat(t, at.member, at.ts, answer);
            }
            EventPayload::RoutingResponse(response) => {
                let answer = Answer {
                    usage: None,
                    finish_reason: None,
                    content: response.content.as_deref(),
                    tool_calls: &response.tool_calls,
                    error: response.error.as_deref(),
                };
                self.end_chat(t, at.member, at.ts, answer);
            }
            EventPayload::ToolCall(call) => self.tool_called(t, &at, call),
            EventPayload::ToolResult(result) => self.tool_result(t, &at, result),
            EventPayload::ToolError(error) => self.tool_error(t, &at, error),
            EventPayload::CriticReview(review) => review_on_finish(t, review),
            EventPayload::McpServer(notice) => self.mcp_started(t, &at, notice),
            // The run's branch, to find its changes from its trace.
            EventPayload::Workspace(opened) => {
                t.root.str("fabric.workspace.branch", &opened.branch)
            }
            // Taken above: a run's beginning, a resumption of a run already traced here,
            // its end.
            EventPayload::RunStart(_)
            | EventPayload::RunResumed(_)
            | EventPayload::RunComplete(_)
            | EventPayload::RunFailed(_)
            | EventPayload::RunAborted(_) => {}
            // A person's part is in the runlog; the waiting call's span covers the wait of
            // an answer given in this process.
            EventPayload::InputRequired(_)
            | EventPayload::InputAnswered(_)
            | EventPayload::UserMessage(_) => {}
            // A hook's run is in the runlog; the step or call it belongs to covers its time.
            EventPayload::HookRun(_) => {}
            // A server's messages and requests are in the runlog; its tool call's span
            // already covers the time they took.
            EventPayload::Checkpoint(_)
            | EventPayload::McpMessage(_)
            | EventPayload::McpRequest(_)
            | EventPayload::TaskForceParallel(_)
            | EventPayload::CorrectiveReprompt(_)
            | EventPayload::ToolCallRepaired(_)
            | EventPayload::ContextCompacted(_)
            | EventPayload::RepairRound(_)
            | EventPayload::SecurityEvent(_)
            | EventPayload::LoopDetected(_)
            | EventPayload::Unknown { .. }
            | EventPayload::Unreadable { .. } => {}
        }
    }

    /// A run's beginning (or its first event in this process after a resumption) and its
    /// end: whether `event` was one.
    fn begin_or_end(&self, state: &mut State, run: &RunId, event: &RunEvent) -> bool {
        match &event.payload {
            EventPayload::RunStart(start) => {
                self.start_run(state, run, event.ts, Some(start));
            }
            // A continued run's events go on in this process without a new `run_start`:
            // its spans from here on get a root of their own (the first process's trace
            // ended with it).
            EventPayload::RunResumed(resumed) if !state.runs.contains_key(run) => {
                self.start_run(state, run, event.ts, None);
                if let Some(t) = state.runs.get_mut(run) {
                    t.root.attr(
                        "fabric.resumption",
                        Attr::Int(i64::from(resumed.resumption)),
                    );
                }
            }
            EventPayload::RunComplete(end) | EventPayload::RunFailed(end) => {
                let failed = event.kind() == EventKind::RunFailed;
                let end = End {
                    specialist_ids: &end.specialist_ids,
                    status: end.status,
                    usage: Some(end.usage),
                    reason: end.reason.as_deref(),
                };
                self.end_run(state, run, event.ts, failed, &end);
            }
            EventPayload::RunAborted(aborted) => {
                let end = End {
                    specialist_ids: &[],
                    status: aborted.status,
                    usage: None,
                    reason: Some(&aborted.reason),
                };
                self.end_run(state, run, event.ts, true, &end);
            }
            _ => return false,
        }
        true
    }

    /// The recruitment names the root.
    fn recruited(&self, t: &mut RunTrace, at: &At<'_>, r: &runlog::Recruitment) {
        let agent = r.specialist_ids.join(",");
        t.root.name = format!("invoke_agent {agent}");
        t.root.str("gen_ai.agent.name", &agent);
        t.task_force = r.is_task_force;
        let mut route = Open::new(
            Some(t.root.span_id),
            "fabric.route".to_owned(),
            Kind::Internal,
            t.root.start,
        );
        route.str("fabric.routing_method", r.routing_method.as_str());
        route.attr(
            "fabric.specialist_ids",
            Attr::StrArray(r.specialist_ids.clone()),
        );
        self.sink.emit(route.end(t.trace_id, at.ts, None));
    }

    /// A task force's members get spans of their own.
    fn member_started(&self, t: &mut RunTrace, at: &At<'_>, start: &runlog::MemberStart) {
        t.model_keys.insert(at.member, start.model_key.clone());
        if t.task_force {
            let id = start.specialist_id.as_str();
            let mut member = Open::new(
                Some(t.root.span_id),
                format!("invoke_agent {id}"),
                Kind::Internal,
                at.ts,
            );
            member.str("gen_ai.operation.name", "invoke_agent");
            member.str("gen_ai.agent.name", id);
            member.str("gen_ai.conversation.id", at.run.as_str());
            if let Some(old) = t.members.insert(at.member.unwrap_or_default(), member) {
                self.sink.emit(old.end(t.trace_id, at.ts, None));
            }
        }
    }

    fn member_ended(&self, t: &mut RunTrace, at: &At<'_>, end: &runlog::MemberEnd) {
        if let Some(member) = t.members.remove(&at.member.unwrap_or_default()) {
            let error = (!end.status.is_success()).then(|| {
                format!(
                    "{}: {}",
                    end.status.as_str(),
                    end.reason.as_deref().unwrap_or_default()
                )
            });
            self.sink.emit(member.end(t.trace_id, at.ts, error));
        }
    }

    /// Tool calls: a span from call to result or error.
    fn tool_called(&self, t: &mut RunTrace, at: &At<'_>, call: &runlog::ToolCalled) {
        let tool = call.tool.as_str();
        let mut span = Open::new(
            Some(t.current(at.member)),
            format!("execute_tool {tool}"),
            Kind::Internal,
            at.ts,
        );
        span.str("gen_ai.operation.name", "execute_tool");
        span.str("gen_ai.tool.name", tool);
        span.str("gen_ai.tool.call.id", &call.call_id);
        span.str("gen_ai.tool.type", "function");
        if self.capture_content {
            span.str("gen_ai.tool.call.arguments", &capped(&call.args));
        }
        t.tools.push((call.call_id.clone(), span));
    }

    fn tool_result(&self, t: &mut RunTrace, at: &At<'_>, result: &runlog::ToolResult) {
        if let Some(mut span) = t.take_tool(&result.call_id) {
            if self.capture_content {
                span.str("gen_ai.tool.call.result", &capped(&result.result));
            }
            self.sink.emit(span.end(t.trace_id, at.ts, None));
        }
    }

    fn tool_error(&self, t: &mut RunTrace, at: &At<'_>, error: &runlog::ToolFailed) {
        if let Some(mut span) = t.take_tool(&error.call_id) {
            span.str("error.type", error.error_type.as_str());
            let message = Some(error.error_message.clone());
            self.sink.emit(span.end(t.trace_id, at.ts, message));
        }
    }

    /// A span for an MCP server's start, once it is ready or failed.
    fn mcp_started(&self, t: &RunTrace, at: &At<'_>, notice: &McpServer) {
        if !matches!(
            notice.status,
            McpStatus::Ready | McpStatus::Failed | McpStatus::Timeout
        ) {
            return;
        }
        let server = notice.server.as_str();
        #[allow(clippy::cast_precision_loss)] // milliseconds far below 2^52
        let elapsed = notice.elapsed_ms as f64 / 1000.0;
        let mut span = Open::new(
            Some(t.current(at.member)),
            format!("fabric.mcp.start {server}"),
            Kind::Internal,
            at.ts - elapsed,
        );
        span.str("fabric.mcp.server", server);
        span.str("fabric.mcp.status", notice.status.as_str());
        let error = (notice.status != McpStatus::Ready)
            .then(|| cap(notice.error.clone().unwrap_or_default()));
        self.sink.emit(span.end(t.trace_id, at.ts, error));
    }

    /// Ends run `run`'s trace: what is still open ends with it, then its root.
    fn end_run(&self, state: &mut State, run: &RunId, ts: f64, failed: bool, end: &End<'_>) {
        let Some(mut t) = state.runs.remove(run) else {
            return;
        };
        let trace_id = t.trace_id;
        for (_, tool) in t.tools.drain(..) {
            self.sink
                .emit(tool.end(trace_id, ts, Some("the run ended first".to_owned())));
        }
        for (_, chat) in t.chats.drain() {
            self.sink
                .emit(chat.end(trace_id, ts, Some("the run ended first".to_owned())));
        }
        for (_, member) in t.members.drain() {
            self.sink.emit(member.end(trace_id, ts, None));
        }
        if t.root.name == "invoke_agent" {
            // A resumed run saw no recruitment here: name it from its end.
            let ids = end.specialist_ids.join(",");
            t.root.name = format!("invoke_agent {ids}");
            t.root.str("gen_ai.agent.name", &ids);
        }
        let status = end.status.as_str();
        if let Some(usage) = end.usage {
            usage_attrs(&mut t.root, usage);
        }
        let error = failed.then(|| {
            t.root.str("error.type", status);
            format!("{status}: {}", end.reason.unwrap_or_default())
        });
        t.root.str("fabric.status", status);
        self.sink.emit(t.root.end(trace_id, ts, error));
    }

    /// The `traceparent` for the outgoing request of run `run`'s model or tool call in
    /// flight (the latest one when parallel members overlap), if the run is traced here.
    pub fn traceparent(&self, run: &RunId) -> Option<String> {
        self.lock().runs.get(run)?.call_traceparent()
    }

    /// Forgets run `run` without ending its spans (a suspended run; a run that failed
    /// before its first event).
    pub fn forget(&self, run: &RunId) {
        let mut state = self.lock();
        state.runs.remove(run);
        state.remote.remove(run);
    }

    /// Run `run` continues a remote trace (its `traceparent`); ignored when malformed.
    pub fn link_parent(&self, run: &RunId, traceparent: &str) {
        if let Some(parent) = parse_traceparent(traceparent) {
            self.lock().remote.insert(run.clone(), parent);
        } else {
            tracing::debug!(run_id = %run, traceparent, "malformed traceparent ignored");
        }
    }
}

impl fabric_core::trace::TraceSource for Tracer {
    fn traceparent(&self, run: &RunId) -> Option<String> {
        Tracer::traceparent(self, run)
    }
}

impl fabric_core::EventSink for Tracer {
    fn observe(&self, run: &RunId, event: &RunEvent) {
        Tracer::observe(self, run, event);
    }

    fn forget(&self, run: &RunId) {
        Tracer::forget(self, run);
    }

    fn link_parent(&self, run: &RunId, traceparent: &str) {
        Tracer::link_parent(self, run, traceparent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    #[derive(Default)]
    struct Collect(Mutex<Vec<Span>>);

    impl SpanSink for Arc<Collect> {
        fn emit(&self, span: Span) {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(span);
        }
    }

    fn ev(kind: EventKind, ts: f64, payload: Value) -> RunEvent {
        fabric_fakes::sample(kind, ts, payload)
    }

    fn id(n: u8) -> RunId {
        RunId::parse(&format!("20260101-000000-000-aaaaaaa{n}")).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn parallel_members_keep_their_own_calls() {
        let spans = Arc::new(Collect::default());
        let tracer = Tracer::new(Box::new(Arc::clone(&spans)), false, HashMap::new());
        let run = id(3);
        let m = |i: u32, extra: Value| {
            let mut p = json!({"pack_index": i});
            if let (Some(p), Some(extra)) = (p.as_object_mut(), extra.as_object()) {
                p.extend(extra.clone());
            }
            p
        };
        for e in [
            ev(EventKind::RunStart, 1.0, json!({"model_key": "k"})),
            ev(
                EventKind::Recruitment,
                1.0,
                json!({"specialist_ids": ["a", "b"], "is_task_force": true}),
            ),
            ev(
                EventKind::MemberStart,
                2.0,
                m(0, json!({"specialist_id": "a", "model_key": "k"})),
            ),
            ev(
                EventKind::MemberStart,
                2.0,
                m(1, json!({"specialist_id": "b", "model_key": "cloud"})),
            ),
            ev(EventKind::LlmRequest, 3.0, m(0, json!({"model": "x"}))),
            ev(EventKind::LlmRequest, 3.1, m(1, json!({"model": "y"}))),
        ] {
            tracer.observe(&run, &e);
        }
        // The latest call in flight is the one a model request would carry.
        let header = tracer.traceparent(&run).unwrap();
        for e in [
            ev(EventKind::LlmResponse, 4.0, m(0, json!({}))),
            ev(
                EventKind::ToolCall,
                4.0,
                m(0, json!({"tool": "shell", "call_id": "a1"})),
            ),
            ev(EventKind::LlmResponse, 5.0, m(1, json!({}))),
            ev(
                EventKind::MemberEnd,
                6.0,
                m(1, json!({"status": "completed"})),
            ),
            ev(
                EventKind::ToolResult,
                7.0,
                m(0, json!({"tool": "shell", "call_id": "a1"})),
            ),
            ev(
                EventKind::MemberEnd,
                8.0,
                m(0, json!({"status": "failed", "reason": "r"})),
            ),
            ev(
                EventKind::RunComplete,
                9.0,
                json!({"status": "partial", "specialist_ids": ["a", "b"]}),
            ),
        ] {
            tracer.observe(&run, &e);
        }
        let spans = spans.0.lock().unwrap_or_else(PoisonError::into_inner);
        let named = |n: &str| spans.iter().find(|s| s.name == n).unwrap();
        let (a, b) = (named("invoke_agent a"), named("invoke_agent b"));
        assert_eq!((a.start, a.end, b.start, b.end), (2.0, 8.0, 2.0, 6.0));
        assert_eq!(a.error.as_deref(), Some("failed: r"));
        assert_eq!(named("chat x").parent, Some(a.span_id));
        assert_eq!((named("chat x").start, named("chat x").end), (3.0, 4.0));
        assert_eq!(named("chat y").parent, Some(b.span_id));
        assert_eq!(named("execute_tool shell").parent, Some(a.span_id));
        assert!(
            header.ends_with(&format!(
                "{}-01",
                named("chat y")
                    .span_id
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            )),
            "{header}"
        );
    }

    #[test]
    fn a_remote_parent_a_failed_tool_and_a_resumed_run() {
        let spans = Arc::new(Collect::default());
        let tracer = Tracer::new(Box::new(Arc::clone(&spans)), false, HashMap::new());
        let run = id(1);
        tracer.link_parent(
            &run,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        );
        for e in [
            ev(
                EventKind::RunStart,
                1.0,
                json!({"model_key": "k", "depth": 0}),
            ),
            ev(
                EventKind::ToolCall,
                1.5,
                json!({"tool": "finish_task", "call_id": "f"}),
            ),
            ev(
                EventKind::CriticReview,
                1.6,
                json!({"critic": "reviewer", "approved": false, "round": 1, "findings": [{"severity": "high", "reason": "untested"}]}),
            ),
            ev(
                EventKind::ToolError,
                1.7,
                json!({"tool": "finish_task", "call_id": "f", "error_type": "rejected", "error_message": "fix it"}),
            ),
            ev(
                EventKind::ToolCall,
                2.0,
                json!({"tool": "shell", "call_id": "c"}),
            ),
            ev(
                EventKind::ToolError,
                3.0,
                json!({"tool": "shell", "call_id": "c", "error_type": "permission", "error_message": "no"}),
            ),
            ev(
                EventKind::RunFailed,
                4.0,
                json!({"status": "cancelled", "reason": "asked", "specialist_ids": ["a"]}),
            ),
        ] {
            tracer.observe(&run, &e);
        }
        // A second process continues another run: a root of its own.
        let resumed = id(2);
        tracer.observe(
            &resumed,
            &ev(EventKind::RunResumed, 5.0, json!({"resumption": 1})),
        );
        tracer.observe(
            &resumed,
            &ev(
                EventKind::RunComplete,
                6.0,
                json!({"status": "completed", "specialist_ids": ["b"]}),
            ),
        );
        let spans = spans.0.lock().unwrap_or_else(PoisonError::into_inner);
        let tool = spans
            .iter()
            .find(|s| s.name == "execute_tool shell")
            .unwrap();
        let finish = spans
            .iter()
            .find(|s| s.name == "execute_tool finish_task")
            .unwrap();
        for (key, value) in [
            ("fabric.critic", Attr::Str("reviewer".to_owned())),
            ("fabric.critic.approved", Attr::Bool(false)),
            ("fabric.critic.round", Attr::Int(1)),
            ("fabric.critic.findings", Attr::Int(1)),
            ("error.type", Attr::Str("rejected".to_owned())),
        ] {
            assert!(
                finish.attributes.contains(&(key.to_owned(), value)),
                "{key}"
            );
        }
        assert_eq!(tool.error.as_deref(), Some("no"));
        assert_eq!((tool.start, tool.end), (2.0, 3.0));
        let root = spans.iter().find(|s| s.name == "invoke_agent a").unwrap();
        assert_eq!(tool.parent, Some(root.span_id));
        assert_eq!(
            root.parent,
            Some([0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7])
        );
        assert_eq!(root.trace_id[0], 0x4b);
        assert_eq!(root.error.as_deref(), Some("cancelled: asked"));
        let again = spans.iter().find(|s| s.name == "invoke_agent b").unwrap();
        assert!(again.parent.is_none());
        assert!(
            again
                .attributes
                .contains(&("fabric.resumption".to_owned(), Attr::Int(1)))
        );
        // Nothing kept once the runs ended.
        assert!(tracer.lock().runs.is_empty());
    }
}
