//! [`AnthropicClient`]: Anthropic's Messages API (`POST {base}/v1/messages`), whole or
//! streamed, with the key in `x-api-key` and the `anthropic-version` header.

use async_trait::async_trait;
use fabric_domain::ToolCall;
use fabric_engine::{ChatClient, ChatError, ChatObserver, ChatRequest, ChatResponse};
use reqwest::Method;
use serde::Deserialize;
use serde_json::Value;

use crate::anthropic_wire::{self as wire, Block, Delta, Event};
use crate::error::{ClientBuildError, NotFound, conclude};
use crate::sse::SseParser;
use crate::toolcalls::{CallAssembler, CallDelta, arguments_text, call_id_or_generate};
use crate::transport::{Auth, HttpSettings, Transport, decode_json};

/// A [`ChatClient`] for Anthropic's Messages API.
#[derive(Debug, Clone)]
pub struct AnthropicClient {
    transport: Transport,
    url: String,
}

impl AnthropicClient {
    /// Builds the client. `settings.base_url` is the API root, `https://api.anthropic.com`
    /// (a trailing `/v1` is accepted too); the key comes from `settings.api_key_env`.
    pub fn new(settings: &HttpSettings) -> Result<Self, ClientBuildError> {
        let transport = Transport::with_auth(settings, Auth::Anthropic)?;
        let url = format!("{}/messages", api_root(transport.base_url()));
        Ok(Self { transport, url })
    }

    /// The address messages go to.
    pub fn endpoint(&self) -> &str {
        &self.url
    }

    /// The model ids the API lists (`GET /v1/models`).
    pub async fn list_models(&self) -> Result<Vec<String>, ChatError> {
        #[derive(Deserialize)]
        struct Listing {
            #[serde(default)]
            data: Vec<Entry>,
        }
        #[derive(Deserialize)]
        struct Entry {
            id: String,
        }
        let url = format!("{}/models", api_root(self.transport.base_url()));
        let bytes = self.transport.fetch(Method::GET, &url, None::<&()>).await?;
        let listing: Listing = decode_json(&url, &bytes)?;
        Ok(listing.data.into_iter().map(|e| e.id).collect())
    }

    async fn whole(&self, body: &wire::Request<'_>) -> Result<ChatResponse, ChatError> {
        let bytes = self
            .transport
            .fetch(Method::POST, &self.url, Some(body))
            .await?;
        let answer: wire::Response = decode_json(&self.url, &bytes)?;
        if let Some(error) = answer.error {
            return Err(reported_error(&self.url, &error));
        }
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        for block in answer.content {
            match block {
                Block::Text { text: t } => text.push_str(&t),
                Block::ToolUse { id, name, input } => tool_calls.push(ToolCall {
                    id: call_id_or_generate(id),
                    name,
                    arguments: arguments_text(input),
                }),
                Block::Other => {}
            }
        }
        Ok(ChatResponse {
            content: (!text.is_empty()).then_some(text),
            tool_calls,
            usage: answer.usage.map(wire::WireUsage::usage),
            finish_reason: answer.stop_reason.as_deref().map(wire::finish_reason),
            queued_ms: None,
            prompt_cache: None,
            constrained: false,
        })
    }

    async fn streamed(
        &self,
        body: &wire::Request<'_>,
        observer: &dyn ChatObserver,
    ) -> Result<ChatResponse, ChatError> {
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
        Ok(state.finish())
    }
}

/// The root the paths hang from: `…/v1`, whether or not the configured base names it.
fn api_root(base: &str) -> String {
    if base.ends_with("/v1") {
        base.to_owned()
    } else {
        format!("{base}/v1")
    }
}

/// An error object (`{"type": "overloaded_error", "message": …}`) as the port's error:
/// overload and rate limits keep their HTTP meaning, so they are retried like the status.
fn reported_error(url: &str, error: &Value) -> ChatError {
    let status = match error.get("type").and_then(Value::as_str) {
        Some("overloaded_error") => Some(529),
        Some("rate_limit_error") => Some(429),
        Some("api_error") => Some(500),
        _ => None,
    };
    crate::error::reported_error(url, error, status)
}

#[async_trait]
impl ChatClient for AnthropicClient {
    async fn chat(
        &self,
        request: ChatRequest<'_>,
        observer: &dyn ChatObserver,
    ) -> Result<ChatResponse, ChatError> {
        let body = wire::Request::new(&request);
        tracing::debug!(
            url = %self.url,
            model = request.model,
            messages = request.messages.len(),
            tools = request.tools.len(),
            stream = request.stream,
            "anthropic messages request"
        );
        let result = if request.stream {
            self.streamed(&body, observer).await
        } else {
            self.whole(&body).await
        };
        conclude(
            result,
            request.model,
            NotFound::OnlyIfBodySaysModel,
            "anthropic",
        )
    }
}

/// What a stream has said so far.
#[derive(Debug, Default)]
struct StreamState {
    text: String,
    calls: CallAssembler,
    prompt_tokens: u64,
    output_tokens: u64,
    saw_usage: bool,
    stop_reason: Option<String>,
}

impl StreamState {
    /// Takes the data of several events; returns whether the message is over.
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
            Event::MessageStart { message } => {
                if let Some(usage) = message.and_then(|m| m.usage) {
                    self.prompt_tokens = usage.prompt();
                    self.output_tokens = usage.output_tokens.unwrap_or(0);
                    self.saw_usage = true;
                }
            }
            Event::ContentBlockStart {
                index,
                content_block,
            } => match content_block {
                Block::Text { text } if !text.is_empty() => {
                    observer.on_text_delta(&text);
                    self.text.push_str(&text);
                }
                Block::ToolUse { id, name, input } => self.calls.push(
                    0,
                    CallDelta {
                        index: Some(index),
                        id,
                        name: Some(name),
                        // The opening `input` is `{}`, filled by the deltas that follow; a
                        // non-empty one is the whole input.
                        arguments: input.filter(|i| i.as_object().is_some_and(|o| !o.is_empty())),
                    },
                ),
                _ => {}
            },
            Event::ContentBlockDelta { index, delta } => match delta {
                Delta::Text { text } => {
                    observer.on_text_delta(&text);
                    self.text.push_str(&text);
                }
                Delta::InputJson { partial_json } => self.calls.push(
                    0,
                    CallDelta {
                        index: Some(index),
                        arguments: Some(Value::String(partial_json)),
                        ..CallDelta::default()
                    },
                ),
                Delta::Other => {}
            },
            Event::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(reason);
                }
                // The final count of output tokens (cumulative), and input when sent here.
                if let Some(usage) = usage {
                    if let Some(output) = usage.output_tokens {
                        self.output_tokens = output;
                    }
                    if usage.prompt() > 0 {
                        self.prompt_tokens = usage.prompt();
                    }
                    self.saw_usage = true;
                }
            }
            Event::MessageStop => return Ok(true),
            Event::Error { error } => {
                return Err(reported_error(url, &error.unwrap_or(Value::Null)));
            }
            Event::Other => {}
        }
        Ok(false)
    }

    fn finish(self) -> ChatResponse {
        ChatResponse {
            content: (!self.text.is_empty()).then_some(self.text),
            tool_calls: self.calls.finish(),
            usage: self.saw_usage.then(|| {
                fabric_domain::Usage::from_counts(self.prompt_tokens, self.output_tokens, None)
            }),
            finish_reason: self.stop_reason.as_deref().map(wire::finish_reason),
            queued_ms: None,
            prompt_cache: None,
            constrained: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Quiet;
    impl ChatObserver for Quiet {
        fn on_text_delta(&self, _: &str) {}
    }

    #[test]
    fn a_stream_with_a_tool_call_split_across_deltas_is_reassembled() {
        let events = [
            r#"{"type":"message_start","message":{"usage":{"input_tokens":120,"output_tokens":1}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Writing "}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"it."}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"write_file","input":{}}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"a"}}"#,
            r#"{"type":"ping"}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":".txt\"}"}}"#,
            r#"{"type":"content_block_stop","index":1}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":42}}"#,
            r#"{"type":"message_stop"}"#,
        ];
        let mut state = StreamState::default();
        let done = state
            .events(
                "u",
                events.iter().map(|e| (*e).to_owned()).collect(),
                &Quiet,
            )
            .unwrap_or_default();
        assert!(done);
        let answer = state.finish();
        assert_eq!(answer.content.as_deref(), Some("Writing it."));
        assert_eq!(answer.tool_calls.len(), 1);
        assert_eq!(answer.tool_calls[0].id, "toolu_1");
        assert_eq!(answer.tool_calls[0].arguments, r#"{"path": "a.txt"}"#);
        assert_eq!(answer.finish_reason.as_deref(), Some("tool_calls"));
        let usage = answer.usage.unwrap_or_default();
        assert_eq!((usage.prompt_tokens, usage.completion_tokens), (120, 42));
    }

    #[test]
    fn an_overloaded_error_in_a_stream_is_a_529() {
        let mut state = StreamState::default();
        let e = state
            .events(
                "u",
                vec![r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.to_owned()],
                &Quiet,
            )
            .unwrap_err();
        assert!(matches!(e, ChatError::Status { status: 529, .. }), "{e:?}");
    }

    #[test]
    fn the_api_root_takes_v1_once() {
        assert_eq!(
            api_root("https://api.anthropic.com"),
            "https://api.anthropic.com/v1"
        );
        assert_eq!(api_root("http://127.0.0.1:9/v1"), "http://127.0.0.1:9/v1");
    }
}
