//! Metrics of the runs one process executes, counted from their events as they pass (issue
//! #13), and written in the Prometheus text exposition format for `GET /metrics`.
//!
//! Every event of every run the [`crate::service::RunService`] executes goes through
//! [`Metrics::observe`]: a lock and a few map updates, no I/O, nothing kept per event. What
//! needs two events (a tool's latency: its `tool_call` and its result; a step: one model
//! request to the next) keeps the first one's time per run until the second arrives, and
//! forgets the run at its terminal event. Labels come from the events themselves (specialist
//! ids, model keys, tool names, error types), so their number is bounded by the config.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard, PoisonError};

use fabric_domain::runlog::{self, EventPayload, McpStatus};
use fabric_domain::{RunEvent, RunId, RunStatus};

/// Upper bounds (seconds) of the latency histograms: from a fast tool to a slow model.
const SECONDS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Upper bounds of the token histogram (the OpenTelemetry GenAI conventions' advice).
const TOKENS: &[f64] = &[
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
];

/// A histogram over fixed bounds.
#[derive(Debug, Clone)]
pub struct HistogramPoint {
    /// The upper bounds of the buckets (a last bucket, to infinity, is implied).
    pub bounds: &'static [f64],
    /// One count per bound, not cumulative (the observations above the previous bound and
    /// up to this one).
    pub counts: Vec<u64>,
    /// The sum of the observations.
    pub sum: f64,
    /// How many there were (the last, unbounded bucket is `count` minus the others).
    pub count: u64,
}

type Histogram = HistogramPoint;

impl HistogramPoint {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, value: f64) {
        if let Some(i) = self.bounds.iter().position(|b| value <= *b) {
            self.counts[i] += 1;
        }
        self.sum += value;
        self.count += 1;
    }
}

/// What one run in flight keeps until its second event arrives.
#[derive(Debug, Default)]
struct Pending {
    /// The model key of the member now working (from `run_start`, `pack_start`).
    model_key: String,
    /// The key of the next model call when it differs: the routing call's, a cloud
    /// fallback's. Used once.
    next_call_key: Option<String>,
    /// `ts` of the step's model request, until the next one or the end.
    step_started: Option<f64>,
    /// `ts` of each tool call by call id, until its result or error.
    tools: HashMap<String, (String, f64)>,
    /// MCP servers of this run that are up, so they are counted down when it ends.
    mcp_up: Vec<String>,
}

impl Pending {
    /// The key of the model call answered now: the one set for it alone, else the member's.
    fn take_call_key(&mut self) -> String {
        self.next_call_key
            .take()
            .unwrap_or_else(|| self.model_key.clone())
    }
}

#[derive(Debug, Default)]
struct Counters {
    runs_started: u64,
    runs: BTreeMap<(String, String), u64>,
    tool_calls: BTreeMap<String, u64>,
    tool_errors: BTreeMap<(String, String), u64>,
    security_events: BTreeMap<String, u64>,
    tokens: BTreeMap<(String, &'static str), u64>,
    token_usage: BTreeMap<(String, &'static str), Histogram>,
    model_calls: BTreeMap<String, Histogram>,
    queued: BTreeMap<String, (u64, f64)>,
    steps: Option<Histogram>,
    tool_seconds: BTreeMap<String, Histogram>,
    mcp_up: BTreeMap<String, i64>,
    pending: HashMap<RunId, Pending>,
}

impl Counters {
    /// What is kept of run `run` while it goes on (its id cloned only for its first event;
    /// always `Some`).
    fn pending(&mut self, run: &RunId) -> Option<&mut Pending> {
        if !self.pending.contains_key(run) {
            self.pending.insert(run.clone(), Pending::default());
        }
        self.pending.get_mut(run)
    }

    /// The key of run `run`'s model call answered now.
    fn call_key(&mut self, run: &RunId) -> String {
        self.pending(run)
            .map(Pending::take_call_key)
            .unwrap_or_default()
    }

    /// Run `run`'s next model call is of `key` (the routing call's, a cloud fallback's).
    fn next_call_key(&mut self, run: &RunId, key: &str) {
        if let Some(pending) = self.pending(run) {
            pending.next_call_key = Some(key.to_owned());
        }
    }

    /// A step of run `run` asked its model at `ts` (the previous step, if any, ended).
    fn step_begun(&mut self, run: &RunId, ts: f64) {
        let previous = self.pending(run).and_then(|p| p.step_started.replace(ts));
        if let Some(started) = previous {
            self.steps
                .get_or_insert_with(|| Histogram::new(SECONDS))
                .observe(seconds_between(started, ts));
        }
    }

    /// A model call of run `run` answered.
    fn llm_response(&mut self, run: &RunId, response: &runlog::LlmResponse) {
        let key = self.call_key(run);
        self.model_call(&key, response.latency_ms);
        if let Some(ms) = response.queued_ms {
            let q = self.queued.entry(key.clone()).or_default();
            q.0 += 1;
            #[allow(clippy::cast_precision_loss)] // milliseconds far below 2^52
            let seconds = ms as f64 / 1000.0;
            q.1 += seconds;
        }
        if let Some(usage) = response.usage {
            self.count_tokens(&key, usage);
        }
    }

    /// Run `run` called a tool at `ts`.
    fn tool_call(&mut self, run: &RunId, call: &runlog::ToolCalled, ts: f64) {
        *self.tool_calls.entry(call.tool.clone()).or_default() += 1;
        if let Some(pending) = self.pending(run) {
            (pending.tools).insert(call.call_id.clone(), (call.tool.clone(), ts));
        }
    }

    /// Call `call_id` of run `run` ended at `ts`, with a result or an error.
    fn tool_settled(&mut self, run: &RunId, call_id: &str, ts: f64) {
        if let Some((tool, started)) = self.pending(run).and_then(|p| p.tools.remove(call_id)) {
            self.tool_ended(tool, started, ts);
        }
    }

    /// An MCP server of run `run` changed its state: counted up or down once.
    fn mcp_server(&mut self, run: &RunId, notice: &runlog::McpServer) {
        let server = &notice.server;
        let Some(pending) = self.pending(run) else {
            return;
        };
        let was_up = pending.mcp_up.contains(server);
        let change = match notice.status {
            McpStatus::Ready | McpStatus::ToolsChanged if !was_up => {
                pending.mcp_up.push(server.clone());
                1
            }
            McpStatus::Failed | McpStatus::Timeout | McpStatus::Stopped if was_up => {
                pending.mcp_up.retain(|s| s != server);
                -1
            }
            McpStatus::Starting
            | McpStatus::Ready
            | McpStatus::ToolsChanged
            | McpStatus::Failed
            | McpStatus::Timeout
            | McpStatus::Stopped
            | McpStatus::Other(_) => return,
        };
        *self.mcp_up.entry(server.clone()).or_default() += change;
    }

    /// A model call of `key` answered after `latency_ms`.
    fn model_call(&mut self, key: &str, latency_ms: f64) {
        self.model_calls
            .entry(key.to_owned())
            .or_insert_with(|| Histogram::new(SECONDS))
            .observe(latency_ms / 1000.0);
    }

    /// Tokens a call of `key` used.
    fn count_tokens(&mut self, key: &str, usage: fabric_domain::Usage) {
        for (n, kind) in [
            (usage.prompt_tokens, "input"),
            (usage.completion_tokens, "output"),
        ] {
            *self.tokens.entry((key.to_owned(), kind)).or_default() += n;
            #[allow(clippy::cast_precision_loss)] // token counts are far below 2^52
            self.token_usage
                .entry((key.to_owned(), kind))
                .or_insert_with(|| Histogram::new(TOKENS))
                .observe(n as f64);
        }
    }

    /// A tool call of `tool` begun at `started` ended at `ended`.
    fn tool_ended(&mut self, tool: String, started: f64, ended: f64) {
        self.tool_seconds
            .entry(tool)
            .or_insert_with(|| Histogram::new(SECONDS))
            .observe(seconds_between(started, ended));
    }

    /// Run `run` ended at `ts`: counted by status and specialists, and forgotten.
    fn run_ended(&mut self, run: &RunId, ts: f64, status: RunStatus, specialists: &[String]) {
        *self
            .runs
            .entry((status.as_str().to_owned(), specialists.join(",")))
            .or_default() += 1;
        if let Some(ended) = self.pending.remove(run) {
            if let Some(started) = ended.step_started {
                self.steps
                    .get_or_insert_with(|| Histogram::new(SECONDS))
                    .observe(seconds_between(started, ts));
            }
            for server in ended.mcp_up {
                *self.mcp_up.entry(server).or_default() -= 1;
            }
        }
    }
}

/// The metrics of one process's runs.
#[derive(Debug, Default)]
pub struct Metrics {
    counters: Mutex<Counters>,
}

/// What the caller knows at the moment it writes the metrics, beside the counts.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gauges {
    /// Runs registered and not ended (preparation included).
    pub runs_in_flight: usize,
}

fn seconds_between(from: f64, to: f64) -> f64 {
    (to - from).max(0.0)
}

impl Metrics {
    /// Empty metrics.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Counters> {
        // A panic while counting leaves counts that are still numbers: keep going.
        self.counters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one event of run `run`.
    fn count(&self, run: &RunId, event: &RunEvent) {
        use EventPayload as P;
        let ts = event.ts;
        if let P::Unreadable { kind, error, .. } = &event.payload {
            // Every payload the fabric writes fits its struct: this one is left out, and a
            // run that ends so is forgotten all the same.
            tracing::debug!(run_id = %run, %error, ?kind, "event left out of the metrics");
            if kind.is_terminal() {
                self.drop_run(run);
            }
            return;
        }
        let mut c = self.lock();
        match &event.payload {
            P::RunStart(start) => {
                c.runs_started += 1;
                if let Some(pending) = c.pending(run) {
                    pending.model_key.clone_from(&start.model_key);
                }
            }
            // A continued run starts again in this process (its run_start is not repeated).
            P::RunResumed(_) => c.runs_started += 1,
            P::MemberStart(start) => {
                if let Some(pending) = c.pending(run) {
                    pending.model_key.clone_from(&start.model_key);
                }
            }
            P::CloudFallback(fallback) => c.next_call_key(run, &fallback.cloud_model_key),
            P::RoutingRequest(request) => c.next_call_key(run, &request.model_key),
            P::LlmRequest(_) => c.step_begun(run, ts),
            P::LlmResponse(response) => c.llm_response(run, response),
            // A server's completion by the run's model is a model call of its key (issue #29).
            P::McpRequest(request) => {
                if let (Some(key), Some(usage)) = (&request.model_key, request.usage) {
                    c.count_tokens(key, usage);
                }
            }
            P::RoutingResponse(response) => {
                let key = c.call_key(run);
                c.model_call(&key, response.latency_ms);
            }
            P::ToolCall(call) => c.tool_call(run, call, ts),
            P::ToolResult(result) => c.tool_settled(run, &result.call_id, ts),
            P::ToolError(error) => {
                c.tool_settled(run, &error.call_id, ts);
                *c.tool_errors
                    .entry((error.tool.clone(), error.error_type.as_str().to_owned()))
                    .or_default() += 1;
            }
            P::SecurityEvent(security) => {
                *c.security_events
                    .entry(security.event_type.as_str().to_owned())
                    .or_default() += 1;
            }
            P::McpServer(notice) => c.mcp_server(run, notice),
            P::RunComplete(end) | P::RunFailed(end) => {
                c.run_ended(run, ts, end.status, &end.specialist_ids);
            }
            P::RunAborted(aborted) => c.run_ended(run, ts, aborted.status, &[]),
            P::Recruitment(_)
            | P::TaskForceParallel(_)
            | P::MemberEnd(_)
            | P::CorrectiveReprompt(_)
            | P::ToolCallRepaired(_)
            | P::ContextCompacted(_)
            | P::CriticReview(_)
            | P::RepairRound(_)
            | P::LoopDetected(_)
            | P::Workspace(_)
            | P::Checkpoint(_)
            | P::McpMessage(_)
            // A run that waits leaves the registry, which forgets it (`EventSink::forget`).
            | P::InputRequired(_)
            | P::InputAnswered(_)
            | P::UserMessage(_)
            | P::HookRun(_)
            | P::Unknown { .. }
            | P::Unreadable { .. } => {}
        }
    }

    /// Drops what is kept for run `run` (it left the registry; normally its terminal event
    /// already did this), counting its MCP servers down.
    fn drop_run(&self, run: &RunId) {
        let mut c = self.lock();
        if let Some(ended) = c.pending.remove(run) {
            for server in ended.mcp_up {
                *c.mcp_up.entry(server).or_default() -= 1;
            }
        }
    }

    /// Every metric now, in a form both writers read: [`Metrics::render`] (Prometheus) and
    /// the OTLP exporter of `fabric-telemetry`.
    pub fn snapshot(&self, gauges: Gauges) -> Vec<Family> {
        let c = self.lock();
        let mut out = Vec::new();
        run_families(&c, gauges, &mut out);
        tool_families(&c, &mut out);
        model_families(&c, &mut out);
        duration_families(&c, &mut out);
        out
    }

    /// The metrics in the Prometheus text exposition format (version 0.0.4). Label names
    /// are the attribute names with dots as underscores.
    pub fn render(&self, gauges: Gauges) -> String {
        let mut out = String::with_capacity(4096);
        for f in self.snapshot(gauges) {
            let kind = match f.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Histogram => "histogram",
            };
            let _ = writeln!(
                out,
                "# HELP {0} {1}\n# TYPE {0} {kind}",
                f.prom_name, f.help
            );
            for point in &f.points {
                let labels: Vec<(String, &str)> = point
                    .labels
                    .iter()
                    .map(|(k, v)| (k.replace('.', "_"), v.as_str()))
                    .collect();
                match &point.value {
                    PointValue::Int(n) => sample(&mut out, f.prom_name, &labels, n),
                    PointValue::Signed(n) => sample(&mut out, f.prom_name, &labels, n),
                    PointValue::Float(x) => sample(&mut out, f.prom_name, &labels, x),
                    PointValue::Histogram(h) => histogram(&mut out, f.prom_name, &labels, h),
                }
            }
        }
        out
    }
}

/// What a metric family is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (a cumulative sum).
    Counter,
    /// A value now.
    Gauge,
    /// Observations in buckets, cumulative.
    Histogram,
}

/// One metric, with its points.
#[derive(Debug, Clone)]
pub struct Family {
    /// Its Prometheus name (`fabric_runs_total`).
    pub prom_name: &'static str,
    /// Its OpenTelemetry name (`fabric.runs`).
    pub otel_name: &'static str,
    /// Its UCUM unit (`s`, `{token}`).
    pub unit: &'static str,
    /// What it counts.
    pub help: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// One point per combination of labels.
    pub points: Vec<Point>,
}

impl Family {
    fn new(
        prom_name: &'static str,
        otel_name: &'static str,
        unit: &'static str,
        help: &'static str,
        kind: Kind,
    ) -> Self {
        Self {
            prom_name,
            otel_name,
            unit,
            help,
            kind,
            points: Vec::new(),
        }
    }

    fn push(&mut self, labels: Vec<(&'static str, String)>, value: PointValue) {
        self.points.push(Point { labels, value });
    }
}

/// One point of a family: its labels (attribute names, with dots) and value.
#[derive(Debug, Clone)]
pub struct Point {
    /// Attribute name and value pairs.
    pub labels: Vec<(&'static str, String)>,
    /// The value.
    pub value: PointValue,
}

/// A point's value.
#[derive(Debug, Clone)]
pub enum PointValue {
    /// A count.
    Int(u64),
    /// A gauge that may go below zero in a transient.
    Signed(i64),
    /// A float (seconds).
    Float(f64),
    /// A histogram.
    Histogram(HistogramPoint),
}

/// One sample line, with its labels escaped as the format requires.
fn sample(out: &mut String, name: &str, labels: &[(String, &str)], value: impl std::fmt::Display) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (label, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let escaped = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            let _ = write!(out, "{label}=\"{escaped}\"");
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

impl crate::ports::EventSink for Metrics {
    fn observe(&self, run: &RunId, event: &RunEvent) {
        self.count(run, event);
    }

    fn forget(&self, run: &RunId) {
        self.drop_run(run);
    }
}

/// A histogram's cumulative `_bucket` lines (with `le`), `_sum` and `_count`.
fn histogram(out: &mut String, name: &str, labels: &[(String, &str)], h: &HistogramPoint) {
    let bucket = format!("{name}_bucket");
    let mut cumulative = 0;
    for (bound, n) in h.bounds.iter().zip(&h.counts) {
        cumulative += n;
        let le = bound.to_string();
        let mut with_le = labels.to_vec();
        with_le.push(("le".to_owned(), &le));
        sample(out, &bucket, &with_le, cumulative);
    }
    let mut with_le = labels.to_vec();
    with_le.push(("le".to_owned(), "+Inf"));
    sample(out, &bucket, &with_le, h.count);
    sample(out, &format!("{name}_sum"), labels, h.sum);
    sample(out, &format!("{name}_count"), labels, h.count);
}

/// A counter family.
fn counter(
    prom: &'static str,
    otel: &'static str,
    unit: &'static str,
    help: &'static str,
) -> Family {
    Family::new(prom, otel, unit, help, Kind::Counter)
}

/// A point's labels.
fn labels(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
}

/// Runs started, ended and in flight.
fn run_families(c: &Counters, gauges: Gauges, out: &mut Vec<Family>) {
    let mut f = counter(
        "fabric_runs_started_total",
        "fabric.runs.started",
        "{run}",
        "Runs this process started or continued.",
    );
    f.push(Vec::new(), PointValue::Int(c.runs_started));
    out.push(f);
    let mut f = counter(
        "fabric_runs_total",
        "fabric.runs",
        "{run}",
        "Runs that ended, by status and specialist (a task force's ids joined by commas).",
    );
    for ((status, specialist), n) in &c.runs {
        f.push(
            labels(&[("status", status), ("specialist", specialist)]),
            PointValue::Int(*n),
        );
    }
    out.push(f);
    let mut f = Family::new(
        "fabric_runs_in_flight",
        "fabric.runs.in_flight",
        "{run}",
        "Runs registered and not ended, preparation included.",
        Kind::Gauge,
    );
    f.push(Vec::new(), PointValue::Int(gauges.runs_in_flight as u64));
    out.push(f);
}

/// Tool calls, their errors and security events.
fn tool_families(c: &Counters, out: &mut Vec<Family>) {
    let mut f = counter(
        "fabric_tool_calls_total",
        "fabric.tool.calls",
        "{call}",
        "Tool calls, by tool.",
    );
    for (tool, n) in &c.tool_calls {
        f.push(labels(&[("tool", tool)]), PointValue::Int(*n));
    }
    out.push(f);
    let mut f = counter(
        "fabric_tool_errors_total",
        "fabric.tool.errors",
        "{call}",
        "Failed tool calls, by tool and error type.",
    );
    for ((tool, kind), n) in &c.tool_errors {
        f.push(
            labels(&[("tool", tool), ("error_type", kind)]),
            PointValue::Int(*n),
        );
    }
    out.push(f);
    let mut f = counter(
        "fabric_security_events_total",
        "fabric.security_events",
        "{event}",
        "Refusals recorded as security_event, by event type.",
    );
    for (kind, n) in &c.security_events {
        f.push(labels(&[("event_type", kind)]), PointValue::Int(*n));
    }
    out.push(f);
}

/// Tokens, queued model requests, and MCP servers up.
fn model_families(c: &Counters, out: &mut Vec<Family>) {
    let mut f = counter(
        "fabric_tokens_total",
        "fabric.tokens",
        "{token}",
        "Tokens by model key and type (input, output).",
    );
    for ((key, kind), n) in &c.tokens {
        f.push(
            labels(&[("model_key", key), ("type", kind)]),
            PointValue::Int(*n),
        );
    }
    out.push(f);
    let mut f = counter(
        "fabric_model_requests_queued_total",
        "fabric.model.requests.queued",
        "{request}",
        "Model requests that waited for a free slot of their server (max_concurrent_requests).",
    );
    for (key, (n, _)) in &c.queued {
        f.push(labels(&[("model_key", key)]), PointValue::Int(*n));
    }
    out.push(f);
    let mut f = counter(
        "fabric_model_queue_wait_seconds_total",
        "fabric.model.queue.wait",
        "s",
        "Seconds model requests waited for a free slot.",
    );
    for (key, (_, secs)) in &c.queued {
        f.push(labels(&[("model_key", key)]), PointValue::Float(*secs));
    }
    out.push(f);
    let mut f = Family::new(
        "fabric_mcp_servers_up",
        "fabric.mcp.servers.up",
        "{server}",
        "MCP server processes up, by server name.",
        Kind::Gauge,
    );
    for (server, n) in &c.mcp_up {
        f.push(labels(&[("server", server)]), PointValue::Signed(*n));
    }
    out.push(f);
}

/// The histograms: steps, tool calls, model calls and tokens per call.
fn duration_families(c: &Counters, out: &mut Vec<Family>) {
    let mut f = Family::new(
        "fabric_step_duration_seconds",
        "fabric.step.duration",
        "s",
        "Loop steps: from one model request to the next, or to the run's end.",
        Kind::Histogram,
    );
    if let Some(h) = &c.steps {
        f.push(Vec::new(), PointValue::Histogram(h.clone()));
    }
    out.push(f);
    let mut f = Family::new(
        "fabric_tool_duration_seconds",
        "fabric.tool.duration",
        "s",
        "Tool calls, from the call to its result or error, by tool.",
        Kind::Histogram,
    );
    for (tool, h) in &c.tool_seconds {
        f.push(labels(&[("tool", tool)]), PointValue::Histogram(h.clone()));
    }
    out.push(f);
    let mut f = Family::new(
        "gen_ai_client_operation_duration_seconds",
        "gen_ai.client.operation.duration",
        "s",
        "GenAI client operation duration (chat calls), by model key.",
        Kind::Histogram,
    );
    for (key, h) in &c.model_calls {
        f.push(
            labels(&[("gen_ai.operation.name", "chat"), ("model_key", key)]),
            PointValue::Histogram(h.clone()),
        );
    }
    out.push(f);
    let mut f = Family::new(
        "gen_ai_client_token_usage",
        "gen_ai.client.token.usage",
        "{token}",
        "Tokens used per chat call, by model key and token type.",
        Kind::Histogram,
    );
    for ((key, kind), h) in &c.token_usage {
        f.push(
            labels(&[
                ("gen_ai.operation.name", "chat"),
                ("model_key", key),
                ("gen_ai.token.type", kind),
            ]),
            PointValue::Histogram(h.clone()),
        );
    }
    out.push(f);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::EventSink;
    use fabric_domain::EventKind;
    use serde_json::{Value, json};

    fn ev(kind: EventKind, ts: f64, payload: Value) -> RunEvent {
        crate::fakes::sample(kind, ts, payload)
    }

    fn id(n: u8) -> RunId {
        RunId::parse(&format!("20260101-000000-000-aaaaaaa{n}")).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_run_s_events_become_counts_histograms_and_gauges() {
        let m = Metrics::new();
        let r = id(1);
        let events = [
            ev(EventKind::RunStart, 10.0, json!({"model_key": "local"})),
            ev(
                EventKind::McpServer,
                10.0,
                json!({"server": "fs", "status": "ready"}),
            ),
            ev(EventKind::LlmRequest, 10.0, json!({})),
            ev(
                EventKind::LlmResponse,
                10.5,
                json!({"latency_ms": 500, "queued_ms": 100, "usage": {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107}}),
            ),
            ev(
                EventKind::ToolCall,
                10.5,
                json!({"tool": "shell", "call_id": "c1"}),
            ),
            ev(
                EventKind::ToolError,
                10.52,
                json!({"tool": "shell", "call_id": "c1", "error_type": "permission"}),
            ),
            ev(
                EventKind::SecurityEvent,
                10.52,
                json!({"event_type": "sandbox_denied"}),
            ),
            ev(
                EventKind::CloudFallback,
                10.6,
                json!({"cloud_model_key": "cloud"}),
            ),
            ev(EventKind::LlmRequest, 11.0, json!({})),
            ev(
                EventKind::LlmResponse,
                12.0,
                json!({"latency_ms": 1000, "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}),
            ),
            ev(
                EventKind::RunComplete,
                12.5,
                json!({"status": "completed", "specialist_ids": ["engineering", "reviewer"]}),
            ),
        ];
        for e in &events {
            m.observe(&r, e);
        }
        let text = m.render(Gauges { runs_in_flight: 2 });
        for line in [
            "fabric_runs_started_total 1",
            "fabric_runs_total{status=\"completed\",specialist=\"engineering,reviewer\"} 1",
            "fabric_runs_in_flight 2",
            "fabric_tool_calls_total{tool=\"shell\"} 1",
            "fabric_tool_errors_total{tool=\"shell\",error_type=\"permission\"} 1",
            "fabric_security_events_total{event_type=\"sandbox_denied\"} 1",
            "fabric_tokens_total{model_key=\"local\",type=\"input\"} 100",
            "fabric_tokens_total{model_key=\"cloud\",type=\"output\"} 3",
            "fabric_model_requests_queued_total{model_key=\"local\"} 1",
            "fabric_model_queue_wait_seconds_total{model_key=\"local\"} 0.1",
            // Up while the run went on, down with its end.
            "fabric_mcp_servers_up{server=\"fs\"} 0",
            // Two steps: 10.0 -> 11.0 and 11.0 -> the end at 12.5.
            "fabric_step_duration_seconds_count 2",
            "fabric_step_duration_seconds_sum 2.5",
            "fabric_tool_duration_seconds_bucket{tool=\"shell\",le=\"0.025\"} 1",
            "fabric_tool_duration_seconds_bucket{tool=\"shell\",le=\"0.01\"} 0",
            "gen_ai_client_operation_duration_seconds_bucket{gen_ai_operation_name=\"chat\",model_key=\"cloud\",le=\"1\"} 1",
            "gen_ai_client_token_usage_bucket{gen_ai_operation_name=\"chat\",model_key=\"local\",gen_ai_token_type=\"input\",le=\"256\"} 1",
            "gen_ai_client_token_usage_count{gen_ai_operation_name=\"chat\",model_key=\"local\",gen_ai_token_type=\"input\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing `{line}` in\n{text}"
            );
        }
        // Nothing of the run is kept once it ended.
        assert!(m.lock().pending.is_empty());
    }

    #[test]
    fn label_values_are_escaped() {
        let mut out = String::new();
        sample(&mut out, "m", &[("tool".to_owned(), "a\"b\\c\nd")], 1);
        assert_eq!(out, "m{tool=\"a\\\"b\\\\c\\nd\"} 1\n");
    }
}
