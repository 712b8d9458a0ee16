//! [`ResponsesClient`]: OpenAI's Responses API (`POST {base}/responses`), whole or streamed
//! as semantic SSE events, the key as a bearer token.
//!
//! The engine sends the whole conversation at every step. By default the client sends it
//! whole too (`store: false`), with the reasoning items the model returned put back before
//! the turn they belong to, so nothing depends on what the server keeps. With
//! `response_chaining: previous_response_id` it sends only the items after the last turn it
//! received (`previous_response_id`), and the server keeps the rest, reasoning included; a
//! turn it does not know (another process, a compacted conversation, a server that forgot)
//! is sent whole.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use fabric_domain::{Message, ResponseChaining, Role, ToolCall};
use fabric_engine::{
    ChatClient, ChatError, ChatObserver, ChatRequest, ChatResponse, ToolDefinitions,
};
use reqwest::Method;
use serde_json::{Value, json};

use crate::ConstrainedDecoding;
use crate::constrained::Constrained;
use crate::discover::LlamaProps;
use crate::error::{ClientBuildError, NotFound, conclude};
use crate::responses_wire::{self as wire, Event, Item};
use crate::sse::SseParser;
use crate::toolcalls::{CallAssembler, CallDelta, arguments_text, call_id_or_generate};
use crate::transport::{HttpSettings, Transport, decode_json};

/// Where a Responses API client puts the tool-call schema of constrained decoding, as the
/// server takes it (issue #40).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaRoute {
    /// llama.cpp's server, whose `/v1/responses` ignores `text.format`: the schema goes as
    /// `response_format` too, which it enforces. `template_calls_tools`: what its `/props`
    /// says of the chat template (`None`: it does not say).
    LlamaCpp {
        /// Whether the chat template can call tools.
        template_calls_tools: Option<bool>,
    },
    /// Any other server: `text.format` alone, the Responses API's form, which OpenAI
    /// enforces; a server that ignores it answers in prose.
    TextFormat,
}

/// How many received turns the client remembers (their response ids and reasoning items).
const REMEMBERED_TURNS: usize = 4096;

/// A [`ChatClient`] for the Responses API.
#[derive(Debug)]
pub struct ResponsesClient {
    transport: Transport,
    url: String,
    chaining: ResponseChaining,
    /// The server refused `previous_response_id` as unsupported (llama.cpp does): the whole
    /// conversation goes from then on.
    chain_refused: AtomicBool,
    memory: Mutex<Memory>,
    /// How tool calls are asked for (`constrained_decoding`, issue #40).
    constrained: ConstrainedDecoding,
    /// What llama.cpp's `/props` says, asked once when constrained decoding needs it;
    /// `None` inside: the server has no `/props` (not llama.cpp).
    llama: tokio::sync::OnceCell<Option<LlamaProps>>,
}

/// What one received turn left behind, keyed by the assistant message the engine will send
/// back for it.
#[derive(Debug, Clone, Default)]
struct Remembered {
    response_id: Option<String>,
    reasoning: Vec<Value>,
}

#[derive(Debug, Default)]
struct Memory {
    turns: HashMap<u64, Remembered>,
    order: VecDeque<u64>,
}

impl Memory {
    fn keep(&mut self, key: u64, turn: Remembered) {
        if self.turns.insert(key, turn).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > REMEMBERED_TURNS {
            if let Some(old) = self.order.pop_front() {
                self.turns.remove(&old);
            }
        }
    }
}

/// The key of an assistant turn: its call ids when it called tools (the engine may repair a
/// call's arguments, never its id), else its text.
fn turn_key(content: Option<&str>, calls: &[ToolCall]) -> u64 {
    let mut hasher = DefaultHasher::new();
    if calls.is_empty() {
        content.unwrap_or_default().hash(&mut hasher);
    } else {
        for call in calls {
            call.id.hash(&mut hasher);
        }
    }
    hasher.finish()
}

impl ResponsesClient {
    /// Builds the client. `settings.base_url` is the API root with its version, e.g.
    /// `https://api.openai.com/v1` or `http://127.0.0.1:8080/v1`.
    pub fn new(settings: &HttpSettings) -> Result<Self, ClientBuildError> {
        let transport = Transport::new(settings)?;
        let url = format!("{}/responses", transport.base_url());
        Ok(Self {
            transport,
            url,
            chaining: settings.chaining,
            chain_refused: AtomicBool::new(false),
            memory: Mutex::new(Memory::default()),
            constrained: settings.constrained,
            llama: tokio::sync::OnceCell::new(),
        })
    }

    /// Where constrained decoding's schema goes on this server, asked once (`fabric doctor`
    /// says it, issue #40).
    pub async fn schema_route(&self) -> SchemaRoute {
        match self.llama_props().await {
            Some(props) => SchemaRoute::LlamaCpp {
                template_calls_tools: props.supports_tools,
            },
            None => SchemaRoute::TextFormat,
        }
    }

    /// llama.cpp's `/props`, asked once; `None` from another server.
    async fn llama_props(&self) -> Option<LlamaProps> {
        *self
            .llama
            .get_or_init(|| LlamaProps::of(&self.transport))
            .await
    }

    /// The constraint of a call with `tools`, and whether the server is llama.cpp's (which
    /// reads the schema as `response_format`): under `json_schema` always, under `auto`
    /// when `/props` says the chat template cannot call tools; `None`: native tool calls.
    async fn constraint(
        &self,
        tools: &ToolDefinitions,
    ) -> Option<(std::sync::Arc<Constrained>, bool)> {
        if self.constrained == ConstrainedDecoding::Off {
            return None;
        }
        let constrained = Constrained::new(tools)?;
        let llama = self.llama_props().await;
        let lacks_tools = llama.is_some_and(|p| p.supports_tools == Some(false));
        match self.constrained {
            ConstrainedDecoding::Auto if !lacks_tools => None,
            _ => Some((constrained, llama.is_some())),
        }
    }

    /// One call whose answer must be one tool call as JSON ([`Constrained`]): the schema as
    /// `text.format` (the Responses API's form), and as `response_format` too for llama.cpp,
    /// whose `/v1/responses` ignores `text.format`. The conversation is sent whole.
    async fn constrained_chat(
        &self,
        request: ChatRequest<'_>,
        (constrained, llama): (&Constrained, bool),
    ) -> Result<ChatResponse, ChatError> {
        let messages = constrained.messages(request.messages);
        let none = ToolDefinitions::none();
        let plain = ChatRequest {
            messages: &messages,
            tools: &none,
            ..request
        };
        let mut body = self.body(&plain, false);
        body.text = Some(json!({"format": {
            "type": "json_schema",
            "name": "tool_call",
            "schema": constrained.schema,
            "strict": true,
        }}));
        if llama {
            body.response_format = Some(json!({
                "type": "json_schema",
                "json_schema": {"name": "tool_call", "strict": true, "schema": constrained.schema},
            }));
        }
        tracing::debug!(url = %self.url, llama, "responses request constrained by JSON schema");
        let result = self
            .send(&body, &fabric_engine::NoopObserver)
            .await
            .map(|(response, _)| constrained.parse(response));
        conclude(
            result,
            request.model,
            NotFound::OnlyIfBodySaysModel,
            "responses",
        )
    }

    /// The address requests go to.
    pub fn endpoint(&self) -> &str {
        &self.url
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        // A panic while holding the lock leaves plain data behind.
        self.memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The request body: chained after the last turn the client knows when chaining is on,
    /// else the whole conversation with its reasoning items.
    fn body<'a>(&self, request: &ChatRequest<'a>, chain: bool) -> wire::Request<'a> {
        let memory = self.memory();
        let reasoning_for = |m: &Message| {
            memory
                .turns
                .get(&turn_key(m.content.as_deref(), &m.tool_calls))
                .map(|t| t.reasoning.clone())
                .unwrap_or_default()
        };
        let known = chain
            .then(|| {
                request
                    .messages
                    .iter()
                    .enumerate()
                    .rev()
                    .find_map(|(i, m)| {
                        let turn = memory
                            .turns
                            .get(&turn_key(m.content.as_deref(), &m.tool_calls))?;
                        (m.role == Role::Assistant && i + 1 < request.messages.len())
                            .then(|| Some((i, turn.response_id.clone()?)))
                            .flatten()
                    })
            })
            .flatten();
        match known {
            Some((at, id)) => {
                let mut body =
                    wire::Request::new(request, &request.messages[at + 1..], &|_| Vec::new());
                body.store = true;
                body.previous_response_id = Some(id);
                body
            }
            None => {
                let mut body = wire::Request::new(request, request.messages, &reasoning_for);
                body.store = chain;
                if !chain {
                    body.include = vec!["reasoning.encrypted_content"];
                }
                body
            }
        }
    }

    async fn send(
        &self,
        body: &wire::Request<'_>,
        observer: &dyn ChatObserver,
    ) -> Result<(ChatResponse, Remembered), ChatError> {
        if body.stream {
            self.streamed(body, observer).await
        } else {
            let bytes = self
                .transport
                .fetch(Method::POST, &self.url, Some(body))
                .await?;
            let answer: wire::Response = decode_json(&self.url, &bytes)?;
            whole_answer(&self.url, answer)
        }
    }

    async fn streamed(
        &self,
        body: &wire::Request<'_>,
        observer: &dyn ChatObserver,
    ) -> Result<(ChatResponse, Remembered), ChatError> {
        let url = self.url.as_str();
        let mut response = self.transport.open_stream(url, body).await?;
        let mut state = StreamState::default();
        let mut parser = SseParser::default();
        let mut done = false;
        while !done {
            match self.transport.next_chunk(url, &mut response).await? {
                Some(chunk) => done = state.events(url, parser.push(&chunk), observer)?,
                None => {
                    state.events(url, parser.finish(), observer)?;
                    break;
                }
            }
        }
        state.finish(url)
    }
}

/// Whether an error says the server does not know the `previous_response_id` sent: the
/// conversation is then sent whole.
fn lost_chain(error: &ChatError) -> bool {
    matches!(error, ChatError::Status { status: 400 | 404, body, .. }
        if body.contains("previous_response") || body.contains("Previous response"))
}

/// Reads a whole answer (or the response a stream ended with).
fn whole_answer(
    url: &str,
    answer: wire::Response,
) -> Result<(ChatResponse, Remembered), ChatError> {
    if answer.status.as_deref() == Some("failed")
        || answer.error.as_ref().is_some_and(|e| !e.is_null())
    {
        return Err(reported_error(
            url,
            answer.error.as_ref().unwrap_or(&Value::Null),
        ));
    }
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    let mut reasoning = Vec::new();
    for item in &answer.output {
        match item.clone() {
            Item::Message { content } => content.iter().for_each(|p| text.push_str(p.text())),
            Item::FunctionCall {
                call_id,
                name,
                arguments,
                ..
            } => tool_calls.push(ToolCall {
                id: call_id_or_generate(call_id),
                name,
                arguments: arguments_text(arguments),
            }),
            Item::Reasoning(fields) => reasoning.push(wire::reasoning_input(fields)),
            Item::Other => {}
        }
    }
    let finish_reason = answer.finish_reason(!tool_calls.is_empty());
    let response = ChatResponse {
        content: (!text.is_empty()).then_some(text),
        tool_calls,
        usage: answer.usage.as_ref().map(wire::WireUsage::usage),
        finish_reason: Some(finish_reason),
        queued_ms: None,
        prompt_cache: answer
            .usage
            .as_ref()
            .and_then(wire::WireUsage::prompt_cache),
        constrained: false,
    };
    Ok((
        response,
        Remembered {
            response_id: answer.id,
            reasoning,
        },
    ))
}

/// An error object (`{"code": "rate_limit_exceeded", "message": …}`) as the port's error:
/// rate limits and server errors keep their HTTP meaning, so they are retried like the
/// status; anything else names what the server said.
fn reported_error(url: &str, error: &Value) -> ChatError {
    let code = error
        .get("code")
        .or_else(|| error.get("type"))
        .and_then(Value::as_str);
    let status = match code {
        Some("rate_limit_exceeded" | "rate_limit_error") => Some(429),
        Some("server_error" | "api_error") => Some(500),
        Some("server_is_overloaded" | "slow_down") => Some(503),
        _ => crate::error::numeric_status(error),
    };
    crate::error::reported_error(url, error, status)
}

#[async_trait]
impl ChatClient for ResponsesClient {
    async fn chat(
        &self,
        request: ChatRequest<'_>,
        observer: &dyn ChatObserver,
    ) -> Result<ChatResponse, ChatError> {
        if let Some((constrained, llama)) = self.constraint(request.tools).await {
            return self.constrained_chat(request, (&constrained, llama)).await;
        }
        let chain = self.chaining == ResponseChaining::PreviousResponseId
            && !self.chain_refused.load(Ordering::Relaxed);
        let mut body = self.body(&request, chain);
        tracing::debug!(
            url = %self.url,
            model = request.model,
            messages = request.messages.len(),
            items = body.input.len(),
            chained = body.previous_response_id.is_some(),
            tools = request.tools.len(),
            stream = request.stream,
            "responses request"
        );
        let mut result = self.send(&body, observer).await;
        if let (Some(_), Err(error)) = (&body.previous_response_id, &result)
            && lost_chain(error)
        {
            let unsupported =
                matches!(error, ChatError::Status { body, .. } if body.contains("support"));
            tracing::info!(url = %self.url, unsupported, "the server does not take this previous_response_id; sending the whole conversation");
            if unsupported {
                self.chain_refused.store(true, Ordering::Relaxed);
            }
            self.memory()
                .turns
                .values_mut()
                .for_each(|t| t.response_id = None);
            // Whole, and kept (`store: true`) unless chaining was refused: the next call can
            // chain to this answer again.
            body = self.body(&request, chain && !unsupported);
            result = self.send(&body, observer).await;
        }
        let result = result.map(|(response, turn)| {
            let key = turn_key(response.content.as_deref(), &response.tool_calls);
            self.memory().keep(key, turn);
            response
        });
        conclude(
            result,
            request.model,
            NotFound::OnlyIfBodySaysModel,
            "responses",
        )
    }
}

/// What a stream has said so far.
#[derive(Debug, Default)]
struct StreamState {
    text: String,
    saw_text: bool,
    calls: CallAssembler,
    /// The calls' slots in order of appearance, each known by its item id or, from servers
    /// that send no ids, its output index (llama.cpp sends ids and no indexes).
    slots: Vec<String>,
    /// Slots whose arguments arrived (in deltas or whole when the call began).
    argued: HashSet<u64>,
    reasoning: Vec<Value>,
    last: Option<wire::Response>,
}

impl StreamState {
    /// Takes the data of several events; returns whether the response is over.
    fn events(
        &mut self,
        url: &str,
        events: Vec<String>,
        observer: &dyn ChatObserver,
    ) -> Result<bool, ChatError> {
        crate::sse::decode_events(url, events, |event| self.event(url, event, observer))
    }

    fn event(
        &mut self,
        url: &str,
        event: Event,
        observer: &dyn ChatObserver,
    ) -> Result<bool, ChatError> {
        match event {
            Event::Other => {}
            Event::TextDelta { delta } => {
                observer.on_text_delta(&delta);
                self.text.push_str(&delta);
                self.saw_text = true;
            }
            Event::ItemAdded { output_index, item } => {
                self.item(output_index, item, false, observer)
            }
            Event::ArgumentsDelta {
                output_index,
                item_id,
                delta,
            } => {
                let slot = self.slot(item_id.as_deref(), output_index);
                self.argued.insert(slot);
                self.calls.push(
                    0,
                    CallDelta {
                        index: Some(slot),
                        arguments: Some(Value::String(delta)),
                        ..CallDelta::default()
                    },
                );
            }
            Event::ItemDone { output_index, item } => self.item(output_index, item, true, observer),
            Event::Completed { response } => {
                self.last = Some(response);
                return Ok(true);
            }
            Event::Failed { response } => {
                let error = response.and_then(|r| r.error).unwrap_or(Value::Null);
                return Err(reported_error(url, &error));
            }
            Event::Error { error } => {
                // Some servers nest the object under `error`, the API puts it at the top.
                let error = match error.get("error") {
                    Some(inner @ Value::Object(_)) => inner.clone(),
                    _ => Value::Object(error),
                };
                return Err(reported_error(url, &error));
            }
        }
        Ok(false)
    }

    /// The slot of a call known by its item id or its output index.
    fn slot(&mut self, item_id: Option<&str>, output_index: Option<u64>) -> u64 {
        let key = match (item_id, output_index) {
            (Some(id), _) => format!("id:{id}"),
            (None, Some(index)) => format!("index:{index}"),
            (None, None) => "index:0".to_owned(),
        };
        let at = match self.slots.iter().position(|k| *k == key) {
            Some(at) => at,
            None => {
                self.slots.push(key);
                self.slots.len() - 1
            }
        };
        at as u64
    }

    /// An output item begun (`done: false`) or finished. A finished item fills in only what
    /// its deltas did not carry, so a server that sends no deltas is read too.
    fn item(
        &mut self,
        output_index: Option<u64>,
        item: Item,
        done: bool,
        observer: &dyn ChatObserver,
    ) {
        match item {
            Item::FunctionCall {
                id,
                call_id,
                name,
                arguments,
            } => {
                let index = self.slot(id.as_deref(), output_index);
                let whole =
                    arguments.filter(|a| !matches!(a, Value::Null) && a.as_str() != Some(""));
                let arguments = if self.argued.contains(&index) {
                    None
                } else {
                    whole
                };
                if arguments.is_some() {
                    self.argued.insert(index);
                }
                self.calls.push(
                    0,
                    CallDelta {
                        index: Some(index),
                        id: call_id,
                        name: Some(name),
                        arguments,
                    },
                );
            }
            Item::Message { content } if done && !self.saw_text => {
                for part in &content {
                    observer.on_text_delta(part.text());
                    self.text.push_str(part.text());
                }
            }
            Item::Reasoning(fields) if done => self.reasoning.push(wire::reasoning_input(fields)),
            Item::Message { .. } | Item::Reasoning(_) | Item::Other => {}
        }
    }

    fn finish(self, url: &str) -> Result<(ChatResponse, Remembered), ChatError> {
        let Some(last) = self.last else {
            return Err(ChatError::Decode {
                url: url.to_owned(),
                detail: "the stream ended before `response.completed`".to_owned(),
            });
        };
        let calls = self.calls.finish();
        // A stream that carried no items at all: the final response has them.
        if calls.is_empty() && self.text.is_empty() && !last.output.is_empty() {
            return whole_answer(url, last);
        }
        let finish_reason = last.finish_reason(!calls.is_empty());
        let usage = last.usage.as_ref();
        Ok((
            ChatResponse {
                content: (!self.text.is_empty()).then_some(self.text),
                tool_calls: calls,
                usage: usage.map(wire::WireUsage::usage),
                finish_reason: Some(finish_reason),
                queued_ms: None,
                prompt_cache: usage.and_then(wire::WireUsage::prompt_cache),
                constrained: false,
            },
            Remembered {
                response_id: last.id,
                reasoning: self.reasoning,
            },
        ))
    }
}

#[cfg(test)]
#[path = "responses_tests.rs"]
mod tests;
