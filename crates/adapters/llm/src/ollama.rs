//! [`OllamaClient`]: Ollama's native API. Chat goes through `/api/chat` rather than the
//! OpenAI-compatible `/v1` because only the native API takes `num_ctx`; without it Ollama's
//! small default context silently cuts the tool definitions and small models stop calling
//! tools. The client also lists models and reads their capabilities.

use async_trait::async_trait;
use fabric_domain::{ToolCall, Usage};
use fabric_engine::{ChatClient, ChatError, ChatObserver, ChatRequest, ChatResponse};
use reqwest::Method;

use crate::error::{ClientBuildError, NotFound, classify, conclude};
use crate::lines::LineSplitter;
use crate::ollama_wire::{ChatBody, ChatChunk, Show, ShowBody, Tags};
use crate::toolcalls::{arguments_text, call_id_or_generate};
use crate::transport::{HttpSettings, Transport, cut, decode_json};

/// A model installed on an Ollama server, as `/api/tags` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OllamaModel {
    /// The name to put in `model`, for example `qwen2.5:7b`.
    pub name: String,
    /// The size, for example `7.6B`, when reported.
    pub parameter_size: Option<String>,
    /// The model family, for example `qwen2`, when reported.
    pub family: Option<String>,
}

/// A [`ChatClient`] for Ollama's native chat API, plus model discovery.
#[derive(Debug, Clone)]
pub struct OllamaClient {
    transport: Transport,
    root: String,
    chat_url: String,
    num_ctx: Option<u32>,
    /// `json_schema`: calls are asked for through `format` (issue #24).
    constrained: bool,
}

impl OllamaClient {
    /// Builds the client and its connection pool. `settings.base_url` may be the server root
    /// (`http://localhost:11434`) or its OpenAI address (`http://localhost:11434/v1`); the
    /// `/v1` is dropped. `num_ctx` is the context window to ask for on every chat, in tokens
    /// (`None`: the model's default).
    pub fn new(settings: &HttpSettings, num_ctx: Option<u32>) -> Result<Self, ClientBuildError> {
        let transport = Transport::new(settings)?;
        let base = transport.base_url();
        let root = base.strip_suffix("/v1").unwrap_or(base).to_owned();
        let chat_url = format!("{root}/api/chat");
        Ok(Self {
            transport,
            root,
            chat_url,
            num_ctx,
            constrained: settings.constrained == crate::ConstrainedDecoding::JsonSchema,
        })
    }

    /// The server root the native API lives under.
    pub fn root(&self) -> &str {
        &self.root
    }

    pub(crate) fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The models installed on the server (`GET /api/tags`).
    pub async fn list_models(&self) -> Result<Vec<OllamaModel>, ChatError> {
        let url = format!("{}/api/tags", self.root);
        let bytes = self.transport.fetch(Method::GET, &url, None::<&()>).await?;
        let tags: Tags = decode_json(&url, &bytes)?;
        Ok(tags
            .models
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| {
                let name = m.name.or(m.model).filter(|n| !n.is_empty())?;
                let details = m.details.unwrap_or_default();
                Some(OllamaModel {
                    name,
                    parameter_size: details.parameter_size.filter(|s| !s.is_empty()),
                    family: details.family.filter(|s| !s.is_empty()),
                })
            })
            .collect())
    }

    /// What the model can do (`POST /api/show`), for example `["completion", "tools"]`.
    /// Empty when the server does not say (Ollama before capabilities were reported).
    pub async fn capabilities(&self, model: &str) -> Result<Vec<String>, ChatError> {
        Ok(self.show(model).await?.unwrap_or_default())
    }

    /// Whether the model can call tools: `None` when the server does not report
    /// capabilities, so the caller can only find out by trying.
    pub async fn supports_tools(&self, model: &str) -> Result<Option<bool>, ChatError> {
        Ok(self
            .show(model)
            .await?
            .map(|caps| caps.iter().any(|c| c == "tools")))
    }

    async fn show(&self, model: &str) -> Result<Option<Vec<String>>, ChatError> {
        Ok(self.show_model(model).await?.capabilities)
    }

    /// What `/api/show` says of a model: its capabilities (`None` when the server does not
    /// report them) and its trained context length, in one request.
    pub async fn describe(
        &self,
        model: &str,
    ) -> Result<(Option<Vec<String>>, Option<u64>), ChatError> {
        let show = self.show_model(model).await?;
        let length = show.context_length();
        Ok((show.capabilities, length))
    }

    async fn show_model(&self, model: &str) -> Result<Show, ChatError> {
        let url = format!("{}/api/show", self.root);
        let bytes = self
            .transport
            .fetch(Method::POST, &url, Some(&ShowBody { model }))
            .await
            .map_err(|e| classify(e, model, NotFound::MeansModel))?;
        decode_json(&url, &bytes)
    }

    async fn whole(&self, body: &ChatBody<'_>) -> Result<ChatResponse, ChatError> {
        let bytes = self
            .transport
            .fetch(Method::POST, &self.chat_url, Some(body))
            .await?;
        let chunk: ChatChunk = decode_json(&self.chat_url, &bytes)?;
        let mut state = StreamState::default();
        state.chunk(&self.chat_url, chunk, None)?;
        Ok(state.finish())
    }

    async fn streamed(
        &self,
        body: &ChatBody<'_>,
        observer: &dyn ChatObserver,
    ) -> Result<ChatResponse, ChatError> {
        let url = self.chat_url.as_str();
        let mut response = self.transport.open_stream(url, body).await?;
        let mut lines = LineSplitter::default();
        let mut state = StreamState::default();
        while !state.done {
            let Some(bytes) = self.transport.next_chunk(url, &mut response).await? else {
                if let Some(line) = lines.finish() {
                    state.line(url, &line, observer)?;
                }
                break;
            };
            for line in lines.push(&bytes) {
                state.line(url, &line, observer)?;
                if state.done {
                    break;
                }
            }
        }
        Ok(state.finish())
    }
}

#[async_trait]
impl ChatClient for OllamaClient {
    async fn chat(
        &self,
        request: ChatRequest<'_>,
        observer: &dyn ChatObserver,
    ) -> Result<ChatResponse, ChatError> {
        // Constrained decoding: the tools described in the prompt, the call shapes as
        // `format`, the answer turned back into a call (crate::constrained).
        let constrained = self
            .constrained
            .then(|| crate::constrained::Constrained::new(request.tools))
            .flatten();
        let rewritten;
        let none = fabric_engine::ToolDefinitions::none();
        let body = match &constrained {
            Some(c) => {
                rewritten = c.messages(request.messages);
                let plain = ChatRequest {
                    messages: &rewritten,
                    tools: &none,
                    ..request
                };
                let mut body = ChatBody::new(&plain, self.num_ctx);
                body.format = Some(c.schema.clone());
                body
            }
            None => ChatBody::new(&request, self.num_ctx),
        };
        tracing::debug!(
            url = %self.chat_url,
            model = request.model,
            messages = request.messages.len(),
            tools = request.tools.len(),
            stream = request.stream,
            num_ctx = ?self.num_ctx,
            "ollama chat request"
        );
        let result = match (&constrained, request.stream) {
            (None, true) => self.streamed(&body, observer).await,
            // Streamed JSON is a call, not prose to show.
            (Some(_), true) => self.streamed(&body, &fabric_engine::NoopObserver).await,
            (_, false) => self.whole(&body).await,
        };
        let result = match &constrained {
            Some(c) => result.map(|r| c.parse(r)),
            None => result,
        };
        conclude(result, request.model, NotFound::MeansModel, "ollama")
    }
}

/// What the answer has said so far.
#[derive(Debug, Default)]
struct StreamState {
    text: String,
    calls: Vec<ToolCall>,
    usage: Option<Usage>,
    finish_reason: Option<String>,
    done: bool,
}

impl StreamState {
    fn line(
        &mut self,
        url: &str,
        line: &str,
        observer: &dyn ChatObserver,
    ) -> Result<(), ChatError> {
        let line = line.trim();
        if line.is_empty() {
            return Ok(());
        }
        let chunk: ChatChunk = decode_json(url, line.as_bytes())?;
        self.chunk(url, chunk, Some(observer))
    }

    fn chunk(
        &mut self,
        url: &str,
        chunk: ChatChunk,
        observer: Option<&dyn ChatObserver>,
    ) -> Result<(), ChatError> {
        if let Some(error) = &chunk.error {
            let text = error
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| error.to_string());
            return Err(ChatError::Decode {
                url: url.to_owned(),
                detail: format!("the server reported an error: {}", cut(&text)),
            });
        }
        if let Some(usage) = chunk.usage() {
            self.usage = Some(usage);
        }
        if chunk.done_reason.is_some() {
            self.finish_reason = chunk.done_reason;
        }
        if chunk.done == Some(true) {
            self.done = true;
        }
        let Some(message) = chunk.message else {
            return Ok(());
        };
        if let Some(text) = message.content.filter(|t| !t.is_empty()) {
            if let Some(observer) = observer {
                observer.on_text_delta(&text);
            }
            self.text.push_str(&text);
        }
        // Ollama sends each tool call whole (never in fragments), possibly spread over
        // several lines, so they are simply collected.
        for call in message.tool_calls.unwrap_or_default() {
            let function = call.function.unwrap_or_default();
            self.calls.push(ToolCall {
                id: call_id_or_generate(call.id),
                name: function.name.unwrap_or_default(),
                arguments: arguments_text(function.arguments),
            });
        }
        Ok(())
    }

    fn finish(self) -> ChatResponse {
        ChatResponse {
            content: (!self.text.is_empty()).then_some(self.text),
            tool_calls: self.calls,
            usage: self.usage,
            finish_reason: self.finish_reason,
            queued_ms: None,
            prompt_cache: None,
            constrained: false,
        }
    }
}
