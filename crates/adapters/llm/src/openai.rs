//! [`OpenAiClient`]: any server that speaks OpenAI's Chat Completions API (OpenAI, vLLM,
//! llama.cpp's server, LM Studio, Ollama's `/v1`, ...).

use async_trait::async_trait;
use fabric_domain::ToolCall;
use fabric_engine::{ChatClient, ChatError, ChatObserver, ChatRequest, ChatResponse};
use reqwest::Method;
use serde_json::Value;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::ConstrainedDecoding;
use crate::constrained::Constrained;
use crate::error::{ClientBuildError, NotFound, conclude};
use crate::openai_wire::{self as wire, Chunk};
use crate::sse::SseParser;
use crate::toolcalls::{CallAssembler, arguments_text, call_id_or_generate};
use crate::transport::{HttpSettings, Transport, cut, decode_json};

/// A [`ChatClient`] for OpenAI-compatible Chat Completions servers:
/// `POST {base_url}/chat/completions`, whole or streamed as Server-Sent Events.
#[derive(Debug, Clone)]
pub struct OpenAiClient {
    transport: Transport,
    url: String,
    constrained: ConstrainedDecoding,
    /// `auto` found that the server refuses `tools`, or that its template cannot call
    /// tools: every later call is constrained.
    refuses_tools: Arc<AtomicBool>,
    /// `auto` asked the server's `/props` what its template can do.
    probed: Arc<AtomicBool>,
    /// The server refused `response_format: json_schema` (llama-cpp-python takes only
    /// `json_object` with a `schema`): later constrained calls use that form.
    schema_in_json_object: Arc<AtomicBool>,
}

impl OpenAiClient {
    /// Builds the client and its connection pool. `settings.base_url` is the API root, for
    /// example `http://localhost:11434/v1` or `https://api.openai.com/v1`.
    pub fn new(settings: &HttpSettings) -> Result<Self, ClientBuildError> {
        let transport = Transport::new(settings)?;
        let url = format!("{}/chat/completions", transport.base_url());
        Ok(Self {
            transport,
            url,
            constrained: settings.constrained,
            refuses_tools: Arc::default(),
            probed: Arc::default(),
            schema_in_json_object: Arc::default(),
        })
    }

    /// The address chat requests go to.
    pub fn endpoint(&self) -> &str {
        &self.url
    }

    /// The API root, e.g. `http://localhost:11434/v1`.
    pub fn base_url(&self) -> &str {
        self.transport.base_url()
    }

    pub(crate) fn transport(&self) -> &Transport {
        &self.transport
    }

    async fn whole(&self, body: &wire::Request<'_>) -> Result<ChatResponse, ChatError> {
        let bytes = self
            .transport
            .fetch(Method::POST, &self.url, Some(body))
            .await?;
        whole_answer(&self.url, &bytes)
    }

    async fn streamed(
        &self,
        body: &wire::Request<'_>,
        observer: &dyn ChatObserver,
    ) -> Result<ChatResponse, ChatError> {
        let url = self.url.as_str();
        let mut response = self.transport.open_stream(url, body).await?;
        // Some servers ignore `stream: true` and answer with one whole JSON body. Tell by the
        // first byte that is not white space (Content-Type is not always right): `{` is
        // JSON, anything else (`data:`, `:`, `event:`) is SSE.
        let mut head = Vec::new();
        let whole = loop {
            let Some(chunk) = self.transport.next_chunk(url, &mut response).await? else {
                if head.trim_ascii_start().is_empty() {
                    return Err(empty_stream(url));
                }
                break head.trim_ascii_start().first() == Some(&b'{');
            };
            head.extend_from_slice(&chunk);
            if let Some(&first) = head.trim_ascii_start().first() {
                break first == b'{';
            }
        };
        if whole {
            while let Some(chunk) = self.transport.next_chunk(url, &mut response).await? {
                head.extend_from_slice(&chunk);
            }
            let answer = whole_answer(url, &head)?;
            if let Some(text) = &answer.content {
                observer.on_text_delta(text);
            }
            return Ok(answer);
        }
        let mut state = StreamState::default();
        let mut parser = SseParser::default();
        // Stop at `[DONE]` rather than waiting for the server to close the connection.
        let mut done = state.events(url, parser.push(&head), observer)?;
        while !done {
            match self.transport.next_chunk(url, &mut response).await? {
                Some(chunk) => done = state.events(url, parser.push(&chunk), observer)?,
                None => {
                    state.events(url, parser.finish(), observer)?;
                    break;
                }
            }
        }
        Ok(state.finish())
    }
}

/// Reads a whole (non-streamed) answer.
fn whole_answer(url: &str, bytes: &[u8]) -> Result<ChatResponse, ChatError> {
    let answer: wire::Response = decode_json(url, bytes)?;
    if let Some(error) = answer.error {
        return Err(reported_error(url, &error));
    }
    let Some(choice) = answer.choices.unwrap_or_default().into_iter().next() else {
        return Err(ChatError::Decode {
            url: url.to_owned(),
            detail: format!(
                "the answer has no choices: {}",
                cut(&String::from_utf8_lossy(bytes))
            ),
        });
    };
    let message = choice.message.unwrap_or_default();
    let tool_calls = message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(|call| {
            let function = call.function.unwrap_or_default();
            ToolCall {
                id: call_id_or_generate(call.id),
                name: function.name.unwrap_or_default(),
                arguments: arguments_text(function.arguments),
            }
        })
        .collect();
    Ok(ChatResponse {
        content: message.content.filter(|c| !c.is_empty()),
        tool_calls,
        usage: answer.usage.as_ref().map(Into::into),
        finish_reason: choice.finish_reason,
        queued_ms: None,
        prompt_cache: wire::prompt_cache(answer.timings.as_ref(), answer.usage.as_ref()),
        constrained: false,
    })
}

/// Servers that put an error in a 200 answer usually give its HTTP code too; keeping it lets
/// `classify` and retries treat it like the status it stands for.
fn reported_error(url: &str, error: &Value) -> ChatError {
    crate::error::reported_error(url, error, crate::error::numeric_status(error))
}

#[async_trait]
impl ChatClient for OpenAiClient {
    async fn chat(
        &self,
        request: ChatRequest<'_>,
        observer: &dyn ChatObserver,
    ) -> Result<ChatResponse, ChatError> {
        tracing::debug!(
            url = %self.url,
            model = request.model,
            messages = request.messages.len(),
            tools = request.tools.len(),
            stream = request.stream,
            constrained = ?self.constrained,
            "chat completions request"
        );
        let constrain = match self.constrained {
            ConstrainedDecoding::Off => false,
            ConstrainedDecoding::JsonSchema => true,
            ConstrainedDecoding::Auto => {
                // Once per client: a llama.cpp server whose template cannot call tools
                // takes `tools` and answers in prose, so ask it first.
                if !request.tools.is_empty()
                    && !self.probed.swap(true, Ordering::Relaxed)
                    && Box::pin(self.template_lacks_tools()).await
                {
                    tracing::info!(url = %self.url, "the server's chat template cannot call tools (/props); asking for tool calls by JSON schema (constrained_decoding: auto)");
                    self.refuses_tools.store(true, Ordering::Relaxed);
                }
                self.refuses_tools.load(Ordering::Relaxed)
            }
        };
        // The constrained call and the probe are boxed: a run waits in this future for its
        // whole model call, and inline they would make every run's future as large as the
        // rarest path (issue #45).
        if let Some(c) = constrain.then(|| Constrained::new(request.tools)).flatten() {
            return Box::pin(self.constrained_chat(request, &c)).await;
        }
        let result = conclude(
            self.send(&wire::Request::new(&request), request.stream, observer)
                .await,
            request.model,
            NotFound::OnlyIfBodySaysModel,
            "openai",
        );
        if self.constrained == ConstrainedDecoding::Auto
            && let Err(error) = &result
            && refuses_tools(error)
            && let Some(c) = Constrained::new(request.tools)
        {
            tracing::warn!(
                url = %self.url,
                "the server refuses `tools` ({error}); asking for tool calls by JSON schema from now on (constrained_decoding: auto)"
            );
            self.refuses_tools.store(true, Ordering::Relaxed);
            return Box::pin(self.constrained_chat(request, &c)).await;
        }
        result
    }
}

impl OpenAiClient {
    async fn send(
        &self,
        body: &wire::Request<'_>,
        stream: bool,
        observer: &dyn ChatObserver,
    ) -> Result<ChatResponse, ChatError> {
        if !stream {
            return self.whole(body).await;
        }
        match self.streamed(body, observer).await {
            // llama-cpp-python answers a streamed request with tools by an empty 200
            // (issue #24): the same request, not streamed, gets the answer.
            Err(error) if error == empty_stream(&self.url) => {
                tracing::warn!(url = %self.url, "the server sent an empty stream; asking again without streaming");
                self.whole(&body.unstreamed()).await
            }
            other => other,
        }
    }

    /// One call whose answer must be one tool call as JSON ([`Constrained`]). Streamed text
    /// is not shown: it is a call, not prose.
    async fn constrained_chat(
        &self,
        request: ChatRequest<'_>,
        constrained: &Constrained,
    ) -> Result<ChatResponse, ChatError> {
        let messages = constrained.messages(request.messages);
        let none = fabric_engine::ToolDefinitions::none();
        let plain = ChatRequest {
            messages: &messages,
            tools: &none,
            ..request
        };
        let mut body = wire::Request::new(&plain);
        let mut result = Err(ChatError::Decode {
            url: self.url.clone(),
            detail: "no request was sent".into(),
        });
        // `json_schema` is the standard form (OpenAI, llama.cpp's server, vLLM);
        // llama-cpp-python knows only `json_object` with a `schema` beside it.
        for in_object in [false, true] {
            if !in_object && self.schema_in_json_object.load(Ordering::Relaxed) {
                continue;
            }
            body.response_format = Some(if in_object {
                serde_json::json!({"type": "json_object", "schema": constrained.schema})
            } else {
                serde_json::json!({
                    "type": "json_schema",
                    "json_schema": {"name": "tool_call", "strict": true, "schema": constrained.schema},
                })
            });
            result = self
                .send(&body, request.stream, &fabric_engine::NoopObserver)
                .await;
            match &result {
                Err(error) if !in_object && refuses_json_schema(error) => {
                    tracing::info!(url = %self.url, "the server refuses response_format json_schema; sending the schema in json_object");
                    self.schema_in_json_object.store(true, Ordering::Relaxed);
                }
                _ => break,
            }
        }
        conclude(
            result.map(|r| constrained.parse(r)),
            request.model,
            NotFound::OnlyIfBodySaysModel,
            "openai",
        )
    }
}

/// The error of a streamed answer with no event at all.
fn empty_stream(url: &str) -> ChatError {
    ChatError::Decode {
        url: url.to_owned(),
        detail: "the streamed answer was empty (no event, no `[DONE]`)".to_owned(),
    }
}

/// Whether an error is the server refusing `response_format: json_schema` (llama-cpp-python
/// answers 500 with a validation error naming the field).
fn refuses_json_schema(error: &ChatError) -> bool {
    match error {
        ChatError::Status { status, body, .. } if (400..600).contains(status) => {
            body.contains("response_format") && body.contains("json_object")
        }
        ChatError::RetriesExhausted { last, .. } => refuses_json_schema(last),
        _ => false,
    }
}

/// Whether an error is the server refusing `tools` itself (llama.cpp's server without
/// `--jinja`, templates without tool calling), not a failure of the call.
fn refuses_tools(error: &ChatError) -> bool {
    match error {
        ChatError::Status { status, body, .. } if (400..600).contains(status) => {
            let body = body.to_ascii_lowercase();
            body.contains("jinja") || (body.contains("tool") && body.contains("support"))
        }
        ChatError::ToolsUnsupported { .. } => true,
        ChatError::RetriesExhausted { last, .. } => refuses_tools(last),
        _ => false,
    }
}

/// What a stream has said so far.
#[derive(Debug, Default)]
struct StreamState {
    text: String,
    calls: CallAssembler,
    usage: Option<fabric_domain::Usage>,
    finish_reason: Option<String>,
    prompt_cache: Option<fabric_domain::PromptCache>,
}

impl StreamState {
    /// Takes the data of several events; returns whether the stream is over.
    fn events(
        &mut self,
        url: &str,
        events: Vec<String>,
        observer: &dyn ChatObserver,
    ) -> Result<bool, ChatError> {
        for data in events {
            if self.data(url, &data, observer)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Takes one event's data; returns whether the stream is over.
    fn data(
        &mut self,
        url: &str,
        data: &str,
        observer: &dyn ChatObserver,
    ) -> Result<bool, ChatError> {
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        match serde_json::from_str::<Chunk>(data) {
            Ok(chunk) => self.chunk(url, chunk, observer)?,
            Err(error) => {
                // A server that forgets the blank line between events makes one event of
                // several `data:` lines; each line is then a chunk of its own.
                let lines: Vec<&str> = data.lines().filter(|l| !l.trim().is_empty()).collect();
                let chunks: Option<Vec<Chunk>> = (lines.len() > 1)
                    .then(|| lines.iter().map(|l| serde_json::from_str(l).ok()).collect())
                    .flatten();
                let Some(chunks) = chunks else {
                    return Err(ChatError::Decode {
                        url: url.to_owned(),
                        detail: format!("bad stream chunk ({error}): {}", cut(data)),
                    });
                };
                for chunk in chunks {
                    self.chunk(url, chunk, observer)?;
                }
            }
        }
        Ok(false)
    }

    fn chunk(
        &mut self,
        url: &str,
        chunk: Chunk,
        observer: &dyn ChatObserver,
    ) -> Result<(), ChatError> {
        if let Some(error) = chunk.error {
            return Err(reported_error(url, &error));
        }
        if let Some(cache) = wire::prompt_cache(chunk.timings.as_ref(), chunk.usage.as_ref()) {
            self.prompt_cache = Some(cache);
        }
        if let Some(usage) = &chunk.usage {
            self.usage = Some(usage.into());
        }
        for choice in chunk.choices.unwrap_or_default() {
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta else { continue };
            if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                observer.on_text_delta(&text);
                self.text.push_str(&text);
            }
            for (position, call) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
                self.calls.push(position, call.into_delta());
            }
        }
        Ok(())
    }

    fn finish(self) -> ChatResponse {
        ChatResponse {
            content: (!self.text.is_empty()).then_some(self.text),
            tool_calls: self.calls.finish(),
            usage: self.usage,
            finish_reason: self.finish_reason,
            queued_ms: None,
            prompt_cache: self.prompt_cache,
            constrained: false,
        }
    }
}
