//! Spans of runs, built from their events as they pass (the engine knows nothing of
//! traces): one `invoke_agent` span per run and per task-force member, a `chat` span per
//! model call, an `execute_tool` span per tool call, following the OpenTelemetry GenAI
//! semantic conventions (v1.37); plus the fabric's own spans for routing and MCP server
//! start-up. A child run (a sub-agent, a critic) continues its parent's trace under the
//! parent's tool call that started it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use fabric_domain::{EventKind, RunEvent, RunId};
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
    fn current(&self, pack: Option<u32>) -> [u8; 8] {
        pack.and_then(|i| self.members.get(&i))
            .unwrap_or(&self.root)
            .span_id
    }

    /// The model key a member's calls use now.
    fn model_key(&self, pack: Option<u32>) -> String {
        self.model_keys
            .get(&pack)
            .or_else(|| self.model_keys.get(&None))
            .cloned()
            .unwrap_or_default()
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

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// A content attribute's text, capped (a tool result may be megabytes).
fn capped(v: &Value) -> String {
    const CAP: usize = 4096;
    let mut s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
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

    fn start_run(&self, state: &mut State, run: &RunId, event: &RunEvent) {
        let p = &event.payload;
        let parent_run = p["parent_run_id"]
            .as_str()
            .and_then(|id| RunId::parse(id).ok());
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
        let mut root = Open::new(parent, "invoke_agent".to_owned(), Kind::Internal, event.ts);
        root.str("gen_ai.operation.name", "invoke_agent");
        root.str("gen_ai.conversation.id", run.as_str());
        root.str("fabric.run_id", run.as_str());
        if let Some(depth) = p["depth"].as_i64() {
            root.attr("fabric.depth", Attr::Int(depth));
        }
        if let Some(parent) = &parent_run {
            root.str("fabric.parent_run_id", parent.as_str());
        }
        if self.capture_content {
            let messages = serde_json::json!([{"role": "user", "parts": [{"type": "text", "content": p["prompt"]}]}]);
            root.str("gen_ai.input.messages", &messages.to_string());
        }
        state.runs.insert(
            run.clone(),
            RunTrace {
                trace_id,
                root,
                members: HashMap::new(),
                chats: HashMap::new(),
                tools: Vec::new(),
                model_keys: HashMap::from([(None, text(&p["model_key"]).to_owned())]),
                next_call_keys: HashMap::new(),
                task_force: false,
            },
        );
    }

    /// Takes one event of run `run`.
    pub fn observe(&self, run: &RunId, event: &RunEvent) {
        let p = &event.payload;
        let mut state = self.lock();
        // A continued run's events go on in this process without a new `run_start`: its
        // spans from here on get a root of their own (the first process's trace ended
        // with it).
        let resumed = event.kind == EventKind::RunResumed && !state.runs.contains_key(run);
        if event.kind == EventKind::RunStart || resumed {
            self.start_run(&mut state, run, event);
            if resumed && let Some(t) = state.runs.get_mut(run) {
                t.root.attr(
                    "fabric.resumption",
                    Attr::Int(event.payload["resumption"].as_i64().unwrap_or(1)),
                );
            }
            return;
        }
        let Some(t) = state.runs.get_mut(run) else {
            return;
        };
        let trace_id = t.trace_id;
        let pack = event.pack_index();
        match event.kind {
            EventKind::Recruitment => {
                let ids: Vec<String> = p["specialist_ids"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default();
                let agent = ids.join(",");
                t.root.name = format!("invoke_agent {agent}");
                t.root.str("gen_ai.agent.name", &agent);
                t.task_force = p["is_task_force"].as_bool().unwrap_or(false);
                let mut route = Open::new(
                    Some(t.root.span_id),
                    "fabric.route".to_owned(),
                    Kind::Internal,
                    t.root.start,
                );
                route.str("fabric.routing_method", text(&p["routing_method"]));
                route.attr("fabric.specialist_ids", Attr::StrArray(ids));
                self.sink.emit(route.end(trace_id, event.ts, None));
            }
            EventKind::PackStart => {
                t.model_keys.insert(pack, text(&p["model_key"]).to_owned());
                if t.task_force {
                    let id = text(&p["specialist_id"]);
                    let mut member = Open::new(
                        Some(t.root.span_id),
                        format!("invoke_agent {id}"),
                        Kind::Internal,
                        event.ts,
                    );
                    member.str("gen_ai.operation.name", "invoke_agent");
                    member.str("gen_ai.agent.name", id);
                    member.str("gen_ai.conversation.id", run.as_str());
                    if let Some(old) = t.members.insert(pack.unwrap_or_default(), member) {
                        self.sink.emit(old.end(trace_id, event.ts, None));
                    }
                }
            }
            EventKind::PackEnd => {
                if let Some(member) = t.members.remove(&pack.unwrap_or_default()) {
                    let status = text(&p["status"]);
                    let error = (!matches!(status, "completed" | "completed_without_finish"))
                        .then(|| format!("{status}: {}", text(&p["reason"])));
                    self.sink.emit(member.end(trace_id, event.ts, error));
                }
            }
            EventKind::CloudFallback => {
                t.next_call_keys
                    .insert(pack, text(&p["cloud_model_key"]).to_owned());
            }
            EventKind::LlmRequest => {
                let model = text(&p["model"]);
                let routing = p["purpose"] == "routing";
                let key = if routing {
                    text(&p["model_key"]).to_owned()
                } else {
                    t.next_call_keys
                        .remove(&pack)
                        .unwrap_or_else(|| t.model_key(pack))
                };
                let parent = if routing {
                    t.root.span_id
                } else {
                    t.current(pack)
                };
                let mut chat = Open::new(
                    Some(parent),
                    format!("chat {model}"),
                    Kind::Client,
                    event.ts,
                );
                chat.str("gen_ai.operation.name", "chat");
                chat.str("gen_ai.request.model", model);
                if let Some(provider) = self.provider(&key) {
                    chat.str("gen_ai.provider.name", provider);
                }
                chat.str("fabric.model_key", &key);
                if routing {
                    chat.str("fabric.purpose", "routing");
                }
                if let Some(old) = t.chats.insert(pack, chat) {
                    self.sink.emit(old.end(trace_id, event.ts, None));
                }
            }
            EventKind::LlmResponse => {
                if let Some(mut chat) = t.chats.remove(&pack) {
                    for (field, attr) in [
                        ("prompt_tokens", "gen_ai.usage.input_tokens"),
                        ("completion_tokens", "gen_ai.usage.output_tokens"),
                    ] {
                        if let Some(n) = p["usage"][field].as_i64() {
                            chat.attr(attr, Attr::Int(n));
                        }
                    }
                    if let Some(reason) = p["finish_reason"].as_str() {
                        chat.attr(
                            "gen_ai.response.finish_reasons",
                            Attr::StrArray(vec![reason.to_owned()]),
                        );
                    }
                    if self.capture_content {
                        let message = serde_json::json!([{"role": "assistant", "parts": [{"type": "text", "content": p["content"]}], "tool_calls": p["tool_calls"]}]);
                        chat.str("gen_ai.output.messages", &capped(&message));
                    }
                    let error = p["error"].as_str().map(str::to_owned);
                    if error.is_some() {
                        chat.str("error.type", "routing_answer_unused");
                    }
                    self.sink.emit(chat.end(trace_id, event.ts, error));
                }
            }
            EventKind::ToolCall => {
                let tool = text(&p["tool"]);
                let mut span = Open::new(
                    Some(t.current(pack)),
                    format!("execute_tool {tool}"),
                    Kind::Internal,
                    event.ts,
                );
                span.str("gen_ai.operation.name", "execute_tool");
                span.str("gen_ai.tool.name", tool);
                span.str("gen_ai.tool.call.id", text(&p["call_id"]));
                span.str("gen_ai.tool.type", "function");
                if self.capture_content {
                    span.str("gen_ai.tool.call.arguments", &capped(&p["args"]));
                }
                t.tools.push((text(&p["call_id"]).to_owned(), span));
            }
            EventKind::ToolResult | EventKind::ToolError => {
                let call = text(&p["call_id"]);
                if let Some(i) = t.tools.iter().position(|(id, _)| id == call) {
                    let (_, mut span) = t.tools.remove(i);
                    let error = if event.kind == EventKind::ToolError {
                        span.str("error.type", text(&p["error_type"]));
                        Some(text(&p["error_message"]).to_owned())
                    } else {
                        if self.capture_content {
                            span.str("gen_ai.tool.call.result", &capped(&p["result"]));
                        }
                        None
                    };
                    self.sink.emit(span.end(trace_id, event.ts, error));
                }
            }
            EventKind::CriticReview => {
                // The review happens inside the `finish_task` call it judges: its verdict
                // goes on that span (the critic's own run is a child span under it).
                if let Some((_, span)) = t
                    .tools
                    .iter_mut()
                    .rev()
                    .find(|(_, tool)| tool.name == "execute_tool finish_task")
                {
                    span.str("fabric.critic", text(&p["critic"]));
                    span.attr(
                        "fabric.critic.approved",
                        Attr::Bool(p["approved"].as_bool().unwrap_or(false)),
                    );
                    span.attr(
                        "fabric.critic.round",
                        Attr::Int(p["round"].as_i64().unwrap_or(0)),
                    );
                    let findings = p["findings"].as_array().map_or(0, Vec::len);
                    span.attr(
                        "fabric.critic.findings",
                        Attr::Int(i64::try_from(findings).unwrap_or(i64::MAX)),
                    );
                }
            }
            EventKind::McpServer => {
                let status = text(&p["status"]);
                if matches!(status, "ready" | "failed" | "timeout") {
                    let server = text(&p["server"]);
                    let elapsed = p["elapsed_ms"].as_f64().unwrap_or(0.0) / 1000.0;
                    let mut span = Open::new(
                        Some(t.current(pack)),
                        format!("fabric.mcp.start {server}"),
                        Kind::Internal,
                        event.ts - elapsed,
                    );
                    span.str("fabric.mcp.server", server);
                    span.str("fabric.mcp.status", status);
                    let error = (status != "ready").then(|| capped(&p["error"]));
                    self.sink.emit(span.end(trace_id, event.ts, error));
                }
            }
            EventKind::RunComplete | EventKind::RunFailed => {
                if let Some(mut t) = state.runs.remove(run) {
                    let end = event.ts;
                    for (_, tool) in t.tools.drain(..) {
                        self.sink.emit(tool.end(
                            trace_id,
                            end,
                            Some("the run ended first".to_owned()),
                        ));
                    }
                    for (_, chat) in t.chats.drain() {
                        self.sink.emit(chat.end(
                            trace_id,
                            end,
                            Some("the run ended first".to_owned()),
                        ));
                    }
                    for (_, member) in t.members.drain() {
                        self.sink.emit(member.end(trace_id, end, None));
                    }
                    if t.root.name == "invoke_agent" {
                        // A resumed run saw no recruitment here: name it from its end.
                        let ids: Vec<&str> = p["specialist_ids"]
                            .as_array()
                            .map(|a| a.iter().filter_map(Value::as_str).collect())
                            .unwrap_or_default();
                        t.root.name = format!("invoke_agent {}", ids.join(","));
                        t.root.str("gen_ai.agent.name", &ids.join(","));
                    }
                    let status = text(&p["status"]).to_owned();
                    for (field, attr) in [
                        ("prompt_tokens", "gen_ai.usage.input_tokens"),
                        ("completion_tokens", "gen_ai.usage.output_tokens"),
                    ] {
                        if let Some(n) = p["usage"][field].as_i64() {
                            t.root.attr(attr, Attr::Int(n));
                        }
                    }
                    let error = (event.kind == EventKind::RunFailed).then(|| {
                        t.root.str("error.type", &status);
                        format!("{status}: {}", text(&p["reason"]))
                    });
                    t.root.str("fabric.status", &status);
                    self.sink.emit(t.root.end(trace_id, end, error));
                }
            }
            _ => {}
        }
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
        RunEvent {
            seq: 0,
            ts,
            kind,
            step: None,
            payload,
        }
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
                EventKind::PackStart,
                2.0,
                m(0, json!({"specialist_id": "a", "model_key": "k"})),
            ),
            ev(
                EventKind::PackStart,
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
                EventKind::PackEnd,
                6.0,
                m(1, json!({"status": "completed"})),
            ),
            ev(
                EventKind::ToolResult,
                7.0,
                m(0, json!({"tool": "shell", "call_id": "a1"})),
            ),
            ev(
                EventKind::PackEnd,
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
                json!({"critic": "reviewer", "approved": false, "round": 1, "findings": [{"severity": "high"}]}),
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
