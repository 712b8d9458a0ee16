//! The HTTP server: binding, routing, the shared turn counter and recording, shutdown.
//!
//! The wires (`openai.rs`, `ollama.rs`, `anthropic.rs`, `responses.rs`) only shape replies; everything that must be the
//! same for both (which turn comes next, what was recorded, delays, errors) lives here.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use serde::Serialize;
use serde_json::{Value, json};
use thiserror::Error;
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::scenario::{EmbeddingsMode, OnExhausted, Scenario, ScenarioError, Turn, TurnBy};
use crate::{anthropic, embed, ollama, openai, responses};

/// One chat request the server received, as the client sent it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordedRequest {
    /// The request path, e.g. `/v1/chat/completions` or `/api/chat`.
    pub path: String,
    /// The JSON body. A body that is not JSON is recorded as a JSON string of its text.
    pub body: Value,
}

/// Why the server could not start.
#[derive(Debug, Error)]
pub enum ServerError {
    /// The scenario contradicts itself.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The address could not be bound.
    #[error("cannot bind the scripted LLM server: {0}")]
    Bind(#[source] std::io::Error),
}

/// A running scripted model server. Stops when dropped or on [`ScriptedServer::shutdown`].
#[derive(Debug)]
pub struct ScriptedServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl ScriptedServer {
    /// Starts the server on `127.0.0.1` on a free port, serving from a background task of the
    /// current tokio runtime.
    pub async fn start(scenario: Scenario) -> Result<Self, ServerError> {
        Self::start_on(scenario, ("127.0.0.1", 0)).await
    }

    /// Starts the server on the given address (port 0 picks a free one).
    pub async fn start_on(
        scenario: Scenario,
        addr: impl ToSocketAddrs,
    ) -> Result<Self, ServerError> {
        Self::start_with(scenario, addr, true).await
    }

    /// [`ScriptedServer::start_on`] for a server that runs for long and whose recordings
    /// nobody reads (`fabric mock-llm`, `fabric-scripted-llm`): it keeps no request bodies,
    /// so [`ScriptedServer::requests`] and [`ScriptedServer::embedding_requests`] stay empty.
    /// Kept, every body of every run stayed in memory (a 100-step run's bodies add up to
    /// about 20 MB as JSON trees), and copying each one cost more time per request than the
    /// answer did (issue #26).
    pub async fn serve_on(
        scenario: Scenario,
        addr: impl ToSocketAddrs,
    ) -> Result<Self, ServerError> {
        Self::start_with(scenario, addr, false).await
    }

    async fn start_with(
        scenario: Scenario,
        addr: impl ToSocketAddrs,
        record: bool,
    ) -> Result<Self, ServerError> {
        scenario.validate()?;
        let listener = TcpListener::bind(addr).await.map_err(ServerError::Bind)?;
        let addr = listener.local_addr().map_err(ServerError::Bind)?;
        // Without TCP_NODELAY a small reply can wait for the peer's delayed ACK (~40 ms), which
        // would dominate every benchmark that uses this server.
        let listener = listener.tap_io(|tcp| {
            if let Err(err) = tcp.set_nodelay(true) {
                tracing::warn!("scripted LLM server: cannot set TCP_NODELAY: {err}");
            }
        });
        let shared = Arc::new(Shared {
            embeddings_down: AtomicBool::new(scenario.embeddings == EmbeddingsMode::Down),
            scenario,
            state: Mutex::new(State::default()),
            record,
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let app = router(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                // A dropped sender means the handle is gone: stop too.
                let _ = stopped.await;
            });
            if let Err(err) = serve.await {
                tracing::error!("scripted LLM server stopped with an error: {err}");
            }
        });
        tracing::debug!("scripted LLM server listening on http://{addr}");
        Ok(Self {
            addr,
            shared,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The OpenAI-style base URL, `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.root_url())
    }

    /// The server's root, `http://127.0.0.1:PORT` (Ollama-style base URL).
    pub fn root_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every chat request body received so far, on either endpoint, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// The W3C `traceparent` headers of the requests received so far, in arrival order.
    pub fn traceparents(&self) -> Vec<String> {
        self.shared.lock().traceparents.clone()
    }

    /// How many chat requests arrived so far (answered, failed or exhausted alike).
    pub fn chat_request_count(&self) -> usize {
        self.shared.lock().chat_requests
    }

    /// How many requests of any kind arrived for `path` (e.g. `/api/tags`) so far, unknown
    /// paths included.
    pub fn hits(&self, path: &str) -> usize {
        self.shared.lock().hits.get(path).copied().unwrap_or(0)
    }

    /// Every embedding request body received so far (`/api/embed`, `/v1/embeddings`), in
    /// arrival order, answered or refused alike. Kept apart from [`Self::requests`], whose
    /// count is the number of chat turns asked for.
    pub fn embedding_requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().embedding_requests.clone()
    }

    /// How many embedding requests arrived so far, on either endpoint.
    pub fn embedding_request_count(&self) -> usize {
        self.shared.lock().embedding_requests.len()
    }

    /// Makes the embedding endpoints answer HTTP 503 (`true`) or work again (`false`) from
    /// the next request on, whatever the scenario said; chat is not affected.
    pub fn set_embeddings_down(&self, down: bool) {
        self.shared.embeddings_down.store(down, Ordering::Relaxed);
    }

    /// How many scripted turns have been consumed (at most the number of turns).
    pub fn turns_used(&self) -> usize {
        self.shared.lock().next_turn
    }

    /// Stops accepting connections and waits (up to 5 s) for open ones to finish.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(Duration::from_secs(5), &mut task)
                .await
                .is_err()
        {
            // A client holding a stream open must not hang the caller's shutdown.
            task.abort();
        }
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        // Graceful: the task stops accepting and ends when open connections close. Drop cannot
        // wait for that; `shutdown()` can.
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// What both wires share: the script and the mutable progress through it.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) scenario: Scenario,
    state: Mutex<State>,
    /// Outside `state` so a test can flip it while requests are in flight.
    embeddings_down: AtomicBool,
    /// Whether request bodies are kept for [`ScriptedServer::requests`].
    record: bool,
}

#[derive(Debug, Default)]
struct State {
    next_turn: usize,
    /// Chat requests received, counted whether or not their bodies are kept.
    chat_requests: usize,
    requests: Vec<RecordedRequest>,
    embedding_requests: Vec<RecordedRequest>,
    /// Requests per path, every route and method included (a few distinct paths).
    hits: std::collections::BTreeMap<String, usize>,
    /// The `traceparent` headers received, in arrival order (trace context, issue #13).
    traceparents: Vec<String>,
    /// The Responses wire's answers by id, with the steps their conversation took through
    /// them, for requests chained by `previous_response_id`.
    responses: std::collections::HashMap<String, usize>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves plain data behind; keep serving it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Keeps an embedding request's body for [`ScriptedServer::embedding_requests`].
    pub(crate) fn record_embedding(&self, path: &str, body: Value) {
        if !self.record {
            return;
        }
        self.lock().embedding_requests.push(RecordedRequest {
            path: path.to_owned(),
            body,
        });
    }

    /// Whether the embedding endpoints answer 503.
    pub(crate) fn embeddings_down(&self) -> bool {
        self.embeddings_down.load(Ordering::Relaxed)
    }

    /// Keeps a Responses answer's id, for a later request chained to it.
    pub(crate) fn remember_response(&self, id: String, steps: usize) {
        self.lock().responses.insert(id, steps);
    }
}

/// The turn a chat request gets, with what is needed to shape the reply.
#[derive(Debug)]
pub(crate) struct Scripted {
    /// 1-based number of the turn in the script (used in default call ids).
    pub(crate) number: usize,
    pub(crate) turn: Turn,
    /// What the reply needs from the request: streaming flags, the model name and the
    /// usage estimate.
    pub(crate) request: RequestHead,
}

/// What the wires read from a chat request, read without building the request's JSON tree:
/// a conversation is sent whole at every step, and building it as a tree (then writing it
/// out again to estimate its tokens) was most of this server's time per request, which
/// benchmarks through the CLI count beside the fabric's (issue #26).
#[derive(Debug, Default)]
pub(crate) struct RequestHead {
    pub(crate) model: Option<String>,
    /// `stream`, when it is a boolean.
    pub(crate) stream: Option<bool>,
    /// `stream_options.include_usage` is `true`.
    pub(crate) include_usage: bool,
    /// The length of the `messages` JSON, for the prompt-usage estimate.
    messages_chars: usize,
    /// The steps the conversation took (see [`crate::scenario::steps_taken`]), not counting
    /// those before `previous_response_id`.
    pub(crate) steps: usize,
    /// The Responses wire's `previous_response_id`.
    pub(crate) previous_response_id: Option<String>,
}

/// The top level of a request, each field kept as its JSON text; others are skipped.
#[derive(serde::Deserialize)]
struct Head<'a> {
    #[serde(default, borrow)]
    model: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    stream: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    stream_options: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    messages: Option<&'a serde_json::value::RawValue>,
    /// The Responses wire's conversation: items instead of messages.
    #[serde(default, borrow)]
    input: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    instructions: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    previous_response_id: Option<&'a serde_json::value::RawValue>,
}

/// One message of a request, as far as counting steps needs it.
#[derive(serde::Deserialize)]
struct Said<'a> {
    #[serde(default, borrow)]
    role: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    content: Option<&'a serde_json::value::RawValue>,
    /// A Responses item's type (`function_call`, `function_call_output`, `reasoning`).
    #[serde(default, rename = "type", borrow)]
    kind: Option<&'a serde_json::value::RawValue>,
}

impl RequestHead {
    /// Reads a request body; `Err` when it is not JSON. A JSON body of another shape reads
    /// as an empty head (served like any request, as a tree it was).
    fn read(raw: &[u8]) -> Result<Self, serde_json::Error> {
        let head = match serde_json::from_slice::<Head<'_>>(raw) {
            Ok(head) => head,
            Err(_) => {
                serde_json::from_slice::<serde::de::IgnoredAny>(raw)?;
                return Ok(Self::default());
            }
        };
        // Leniently, as reading a tree did: a field of another type counts as absent.
        fn text<T: serde::de::DeserializeOwned>(
            raw: Option<&serde_json::value::RawValue>,
        ) -> Option<T> {
            raw.and_then(|r| serde_json::from_str(r.get()).ok())
        }
        let include_usage = text::<Value>(head.stream_options)
            .and_then(|o| o.get("include_usage").and_then(Value::as_bool))
            == Some(true);
        let items = head.messages.or(head.input);
        let (messages_chars, steps) = items.map_or((0, 0), |raw| {
            let said: Vec<Said<'_>> = serde_json::from_str(raw.get()).unwrap_or_default();
            let mut pairs: Vec<(String, Option<String>)> = said
                .iter()
                .map(|m| {
                    let role: String = text(m.role).unwrap_or_else(|| {
                        // A Responses item: a call is the assistant's, its output the tool's.
                        match text::<String>(m.kind).as_deref() {
                            Some("function_call") => "assistant",
                            Some("function_call_output") => "tool",
                            _ => "",
                        }
                        .to_owned()
                    });
                    // Only a user's text that starts like a compaction note is decoded:
                    // the rest (the task, tool results) is only counted.
                    let note = m
                        .content
                        .and_then(|c| c.get().strip_prefix('"'))
                        .is_some_and(|c| c.starts_with(crate::scenario::NOTE_PREFIX));
                    let content = (role == "user" && note)
                        .then(|| text::<String>(m.content))
                        .flatten();
                    (role, content)
                })
                .collect();
            // One turn of the Responses wire is several items (its text, then each call).
            if head.input.is_some() {
                pairs.dedup_by(|b, a| a.0 == "assistant" && b.0 == "assistant");
            }
            (
                raw.get().len() + head.instructions.map_or(0, |i| i.get().len()),
                crate::scenario::steps_taken(pairs.iter().map(|(r, c)| (r.as_str(), c.as_deref()))),
            )
        });
        Ok(Self {
            model: text(head.model),
            stream: text(head.stream),
            include_usage,
            messages_chars,
            steps,
            previous_response_id: text(head.previous_response_id),
        })
    }
}

/// Which wire asked: error bodies are shaped the way each wire does it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wire {
    OpenAi,
    Ollama,
    Anthropic,
    Responses,
}

/// Records the request, takes the next turn, waits the scripted delays, and answers errors.
/// `Ok` means the caller must render a message turn.
pub(crate) async fn next_turn(
    shared: &Shared,
    wire: Wire,
    path: &str,
    raw: &Bytes,
) -> Result<Scripted, Response> {
    let parsed = RequestHead::read(raw);
    let recorded = shared
        .record
        .then(|| match serde_json::from_slice::<Value>(raw) {
            Ok(body) => body,
            Err(_) => Value::String(String::from_utf8_lossy(raw).into_owned()),
        });
    // Record and take the turn under one lock, so the recording order is the turn order.
    let taken = {
        let mut state = shared.lock();
        state.chat_requests += 1;
        if let Some(body) = recorded {
            state.requests.push(RecordedRequest {
                path: path.to_owned(),
                body,
            });
        }
        match parsed {
            // A malformed request is the client's bug: answer it without spending a turn.
            Err(err) => {
                return Err(error_json(
                    StatusCode::BAD_REQUEST,
                    json!({ "error": format!("invalid JSON body: {err}") }),
                ));
            }
            Ok(mut request) => {
                if let Some(id) = &request.previous_response_id {
                    // As the API answers a chain to an answer it does not keep.
                    let Some(before) = state.responses.get(id) else {
                        return Err(error_json(
                            StatusCode::BAD_REQUEST,
                            error_value(
                                wire,
                                StatusCode::BAD_REQUEST,
                                &format!("Previous response with id '{id}' not found."),
                            ),
                        ));
                    };
                    request.steps += before;
                }
                let turns = &shared.scenario.turns;
                let index = match shared.scenario.turn_by {
                    TurnBy::Order => state.next_turn,
                    TurnBy::Conversation => request.steps,
                };
                if let Some(turn) = turns.get(index) {
                    state.next_turn += 1;
                    Some((index + 1, turn.clone(), request))
                } else if let (OnExhausted::RepeatLast, Some(turn)) =
                    (shared.scenario.on_exhausted, turns.last())
                {
                    Some((turns.len(), turn.clone(), request))
                } else {
                    None
                }
            }
        }
    };

    let delay = shared.scenario.latency_ms
        + taken
            .as_ref()
            .and_then(|(_, turn, _)| turn.delay_ms)
            .unwrap_or(0);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }

    let Some((number, turn, request)) = taken else {
        let n = shared.scenario.turns.len();
        tracing::warn!("scripted LLM server: scenario exhausted after {n} turns");
        // 409, not a 5xx: asking again cannot help, so clients do not retry it.
        let message = match shared.scenario.turn_by {
            TurnBy::Order => format!(
                "scripted LLM server: scenario exhausted after {n} turns; with `turn_by: conversation` a scenario serves any number of runs (each conversation from its first turn)"
            ),
            TurnBy::Conversation => format!(
                "scripted LLM server: scenario exhausted after {n} turns: the conversation went on past its last turn"
            ),
        };
        return Err(error_turn(
            wire,
            StatusCode::CONFLICT.as_u16(),
            Some(&message),
        ));
    };
    if let Some(status) = turn.status {
        let mut reply = error_turn(wire, status, turn.body.as_deref());
        if let Some(seconds) = turn.retry_after_s {
            reply
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(seconds));
        }
        return Err(reply);
    }
    Ok(Scripted {
        number,
        turn,
        request,
    })
}

fn error_turn(wire: Wire, status: u16, body: Option<&str>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let message = body.unwrap_or("scripted error");
    let value = match serde_json::from_str::<Value>(message) {
        Ok(object @ Value::Object(_)) => object,
        _ => error_value(wire, status, message),
    };
    error_json(status, value)
}

/// An error body shaped the way each wire writes one.
pub(crate) fn error_value(wire: Wire, status: StatusCode, message: &str) -> Value {
    match wire {
        Wire::Ollama => json!({ "error": message }),
        // The shape Ollama's and vLLM's OpenAI-compatible endpoints use, and the Responses
        // API's for an HTTP error.
        Wire::OpenAi | Wire::Responses => json!({
            "error": {
                "message": message,
                "type": if status.is_server_error() { "api_error" } else { "invalid_request_error" },
                "param": null,
                "code": null,
            }
        }),
        Wire::Anthropic => anthropic::error_body(anthropic::error_kind(status.as_u16()), message),
    }
}

/// A JSON reply serialised up front, so it leaves in one write with a Content-Length.
pub(crate) fn json_reply(status: StatusCode, value: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

fn error_json(status: StatusCode, value: Value) -> Response {
    json_reply(status, &value)
}

/// A streaming reply: each event is its own body frame, and the stream pauses between events
/// (at least a yield) so hyper flushes each one in its own write instead of batching them.
pub(crate) fn streaming_reply(
    content_type: &'static str,
    events: Vec<String>,
    pause_ms: u64,
) -> Response {
    let stream = futures_util::stream::unfold(
        (events.into_iter(), true),
        move |(mut events, first)| async move {
            let event = events.next()?;
            if !first {
                if pause_ms > 0 {
                    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                } else {
                    tokio::task::yield_now().await;
                }
            }
            Some((Ok::<_, Infallible>(Bytes::from(event)), (events, false)))
        },
    );
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// Splits `text` into at least two pieces (when it has two characters or more), so that a
/// client that does not reassemble fragments fails. Long texts get more, bounded, pieces.
pub(crate) fn fragments(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() < 2 {
        return if text.is_empty() {
            Vec::new()
        } else {
            vec![text.to_owned()]
        };
    }
    let pieces = (chars.len() / 12).clamp(2, 12);
    let size = chars.len().div_ceil(pieces);
    chars
        .chunks(size)
        .map(|chunk| chunk.iter().collect())
        .collect()
}

/// The token counts of one reply: the turn's own numbers, else about four characters a token.
pub(crate) fn usage(scripted: &Scripted, output_chars: usize) -> (u64, u64) {
    let spec = scripted.turn.usage.unwrap_or_default();
    let prompt = spec
        .prompt_tokens
        .unwrap_or_else(|| (scripted.request.messages_chars as u64 / 4).max(1));
    let completion = spec
        .completion_tokens
        .unwrap_or_else(|| (output_chars as u64 / 4).max(1));
    (prompt, completion)
}

/// [`usage`] for a turn whose calls' arguments go as written, `None` when the turn omits it.
pub(crate) fn turn_usage(scripted: &Scripted) -> Option<(u64, u64)> {
    let turn = &scripted.turn;
    let output_chars = turn.content.as_deref().map_or(0, str::len)
        + turn
            .tool_calls
            .iter()
            .map(|c| c.arguments.to_string().len())
            .sum::<usize>();
    (!turn.omit_usage).then(|| usage(scripted, output_chars))
}

/// The model name to echo: the request's, else the first scripted model's.
pub(crate) fn model_name(shared: &Shared, request: &Value) -> String {
    named_model(shared, request.get("model").and_then(Value::as_str))
}

/// `model` when the request named one, else the first scripted model's name.
pub(crate) fn named_model(shared: &Shared, model: Option<&str>) -> String {
    model
        .map(str::to_owned)
        .or_else(|| shared.scenario.models.first().map(|m| m.name.clone()))
        .unwrap_or_else(|| "scripted".to_owned())
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The current time as RFC 3339 in UTC, as Ollama's `created_at` (no date crate needed).
pub(crate) fn rfc3339_now() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (Howard Hinnant's algorithm), valid for any date after 1970.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60,
        now.subsec_nanos()
    )
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(|| async { "Ollama is running" }))
        .route("/api/version", get(ollama::version))
        .route("/api/tags", get(ollama::tags))
        .route("/api/show", post(ollama::show))
        .route("/api/chat", post(ollama::chat))
        .route("/api/pull", post(ollama::pull))
        .route("/api/embed", post(embed::ollama))
        .route("/v1/models", get(openai::models))
        .route("/props", get(openai::props))
        .route("/v1/chat/completions", post(openai::chat))
        .route("/v1/embeddings", post(embed::openai))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/responses", post(responses::create))
        .fallback(|uri: axum::http::Uri| async move {
            error_json(
                StatusCode::NOT_FOUND,
                json!({ "error": format!("scripted LLM server: no route for {}", uri.path()) }),
            )
        })
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&shared),
            count_hit,
        ))
        .with_state(shared)
}

/// Counts each request by path before it is routed.
async fn count_hit(
    axum::extract::State(shared): axum::extract::State<Arc<Shared>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    {
        let mut state = shared.lock();
        *state
            .hits
            .entry(request.uri().path().to_owned())
            .or_default() += 1;
        if let Some(value) = request
            .headers()
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
        {
            state.traceparents.push(value.to_owned());
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_split_in_at_least_two() {
        assert_eq!(fragments(""), Vec::<String>::new());
        assert_eq!(fragments("a"), vec!["a"]);
        assert_eq!(fragments("ab"), vec!["a", "b"]);
        let long = "x".repeat(1000);
        let parts = fragments(&long);
        assert!(parts.len() >= 2 && parts.len() <= 12);
        assert_eq!(parts.concat(), long);
        assert_eq!(fragments("héllo wörld").concat(), "héllo wörld");
    }

    #[test]
    fn rfc3339_looks_right() {
        let t = rfc3339_now();
        assert_eq!(t.len(), 30, "{t}");
        assert!(t.starts_with("20") && t.ends_with('Z'), "{t}");
    }
}
