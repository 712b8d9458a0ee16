//! The JSON of the Chat Completions API. Requests are borrowed views of the conversation;
//! responses are lenient: every field may be missing or `null`, unknown fields are ignored.

use fabric_domain::{Message, Role, ToolImage, Usage};
use fabric_engine::ChatRequest;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::images::{self, DataUrl};
use crate::toolcalls::CallDelta;

#[derive(Debug, Serialize)]
pub(crate) struct Request<'a> {
    model: &'a str,
    messages: Vec<OutMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<std::sync::Arc<crate::wire_tools::WireTools<crate::wire_tools::Functions>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    /// Constrained decoding: the JSON Schema every answer must match.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) response_format: Option<Value>,
}

#[derive(Debug, Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Debug, Clone, Serialize)]
struct OutMessage<'a> {
    role: Role,
    /// A string but in the user turn that carries a tool's images: an assistant message
    /// that only calls tools has `""`. The spec allows `null` there, but
    /// llama-cpp-python's server answers 500 to it (issue #24) and every server we know
    /// takes `""`.
    content: Content<'a>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<OutToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
enum Content<'a> {
    Text(&'a str),
    Parts(Vec<Part<'a>>),
}

/// A part of a user turn's content.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: String },
    ImageUrl { image_url: ImageUrl<'a> },
}

#[derive(Debug, Clone, Serialize)]
struct ImageUrl<'a> {
    url: DataUrl<'a>,
}

#[derive(Debug, Clone, Serialize)]
struct OutToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: OutFunction<'a>,
}

#[derive(Debug, Clone, Serialize)]
struct OutFunction<'a> {
    name: &'a str,
    /// The raw text, as the API wants a string here.
    arguments: &'a str,
}

impl<'a> Request<'a> {
    pub(crate) fn new(request: &ChatRequest<'a>) -> Self {
        let has_tools = !request.tools.is_empty();
        Self {
            model: request.model,
            messages: out_messages(request.messages, request.vision),
            tools: crate::wire_tools::encoded(request.tools),
            tool_choice: has_tools.then_some("auto"),
            temperature: request.temperature,
            top_p: request.top_p,
            max_tokens: request.max_tokens,
            stream: request.stream,
            stream_options: request.stream.then_some(StreamOptions {
                include_usage: true,
            }),
            response_format: None,
        }
    }
}

impl Request<'_> {
    /// The same request, answered whole.
    pub(crate) fn unstreamed(&self) -> Self {
        Self {
            model: self.model,
            messages: self.messages.clone(),
            tools: self.tools.clone(),
            tool_choice: self.tool_choice,
            temperature: self.temperature,
            top_p: self.top_p,
            max_tokens: self.max_tokens,
            stream: false,
            stream_options: None,
            response_format: self.response_format.clone(),
        }
    }
}

/// The conversation, and after each run of tool results whose tools returned images (for
/// a model that reads them) a user turn holding those images: a tool message's content
/// cannot hold an image on this wire.
fn out_messages(messages: &[Message], vision: bool) -> Vec<OutMessage<'_>> {
    let mut out = Vec::with_capacity(messages.len());
    for (at, message) in messages.iter().enumerate() {
        out.push(out_message(message));
        let handed = images::after_results(messages, at, vision);
        if !handed.is_empty() {
            out.push(images_turn(&handed));
        }
    }
    out
}

/// The user turn carrying the images of a run of tool results, each call's after a caption.
fn images_turn<'a>(handed: &[(&str, &'a [ToolImage])]) -> OutMessage<'a> {
    let mut parts = Vec::new();
    for (call_id, shown) in handed {
        parts.push(Part::Text {
            text: images::caption(call_id, shown.len()),
        });
        parts.extend(shown.iter().map(|image| Part::ImageUrl {
            image_url: ImageUrl {
                url: DataUrl(image),
            },
        }));
    }
    OutMessage {
        role: Role::User,
        content: Content::Parts(parts),
        tool_calls: Vec::new(),
        tool_call_id: None,
    }
}

fn out_message(message: &Message) -> OutMessage<'_> {
    OutMessage {
        role: message.role,
        content: Content::Text(message.content.as_deref().unwrap_or("")),
        tool_calls: message
            .tool_calls
            .iter()
            .map(|call| OutToolCall {
                id: &call.id,
                kind: "function",
                function: OutFunction {
                    name: &call.name,
                    arguments: &call.arguments,
                },
            })
            .collect(),
        tool_call_id: message.tool_call_id.as_deref(),
    }
}

/// A whole (non-streamed) answer.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Response {
    #[serde(default)]
    pub(crate) choices: Option<Vec<Choice>>,
    #[serde(default)]
    pub(crate) usage: Option<WireUsage>,
    /// llama.cpp's server: what the prompt cache served.
    #[serde(default)]
    pub(crate) timings: Option<Timings>,
    /// Some proxies answer 200 with an error object.
    #[serde(default)]
    pub(crate) error: Option<Value>,
}

/// llama.cpp's `timings` (in its answers and the last chunk of a stream): `prompt_n` prompt
/// tokens evaluated, `cache_n` taken from the slot's cache.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Timings {
    #[serde(default)]
    prompt_n: Option<u64>,
    #[serde(default)]
    cache_n: Option<u64>,
}

/// How the prompt cache served a call: llama.cpp's `timings`, else the `cached_tokens` of
/// OpenAI's `prompt_tokens_details` (OpenAI, vLLM, newer llama.cpp) against the prompt.
pub(crate) fn prompt_cache(
    timings: Option<&Timings>,
    usage: Option<&WireUsage>,
) -> Option<fabric_domain::PromptCache> {
    if let Some(Timings {
        prompt_n: Some(evaluated),
        cache_n,
    }) = timings
    {
        return Some(fabric_domain::PromptCache {
            cached_tokens: cache_n.unwrap_or(0),
            evaluated_tokens: *evaluated,
        });
    }
    let usage = usage?;
    let cached = usage.prompt_tokens_details.as_ref()?.cached_tokens?;
    Some(fabric_domain::PromptCache {
        cached_tokens: cached,
        evaluated_tokens: usage.prompt_tokens.unwrap_or(0).saturating_sub(cached),
    })
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct Choice {
    #[serde(default)]
    pub(crate) message: Option<AnswerMessage>,
    #[serde(default)]
    pub(crate) finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct AnswerMessage {
    #[serde(default)]
    pub(crate) content: Option<String>,
    #[serde(default)]
    pub(crate) tool_calls: Option<Vec<WireToolCall>>,
}

/// A tool call or a tool call delta; the same shape serves both.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct WireToolCall {
    #[serde(default)]
    pub(crate) index: Option<u64>,
    #[serde(default)]
    pub(crate) id: Option<String>,
    #[serde(default)]
    pub(crate) function: Option<WireFunction>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct WireFunction {
    #[serde(default)]
    pub(crate) name: Option<String>,
    /// A string per the spec, an object from some servers.
    #[serde(default)]
    pub(crate) arguments: Option<Value>,
}

impl WireToolCall {
    pub(crate) fn into_delta(self) -> CallDelta {
        let function = self.function.unwrap_or_default();
        CallDelta {
            index: self.index,
            id: self.id,
            name: function.name,
            arguments: function.arguments,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl From<&WireUsage> for Usage {
    fn from(u: &WireUsage) -> Self {
        Usage::from_counts(
            u.prompt_tokens.unwrap_or(0),
            u.completion_tokens.unwrap_or(0),
            u.total_tokens,
        )
    }
}

/// One streamed chunk.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Chunk {
    #[serde(default)]
    pub(crate) choices: Option<Vec<ChunkChoice>>,
    #[serde(default)]
    pub(crate) usage: Option<WireUsage>,
    #[serde(default)]
    pub(crate) timings: Option<Timings>,
    #[serde(default)]
    pub(crate) error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ChunkChoice {
    #[serde(default)]
    pub(crate) delta: Option<Delta>,
    #[serde(default)]
    pub(crate) finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct Delta {
    #[serde(default)]
    pub(crate) content: Option<String>,
    #[serde(default)]
    pub(crate) tool_calls: Option<Vec<WireToolCall>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_domain::ToolCall;
    use serde_json::json;

    #[test]
    fn request_shape() {
        let messages = vec![
            Message::system("s"),
            Message::assistant(
                None,
                vec![ToolCall {
                    id: "c1".into(),
                    name: "read".into(),
                    arguments: "{\"p\":1}".into(),
                }],
            ),
            Message::tool_result("c1", "ok"),
        ];
        let tools = vec![
            json!({"type": "function", "function": {"description": "Reads.", "name": "read", "parameters": {"type": "object"}}}),
        ];
        let request = ChatRequest {
            model: "m",
            messages: &messages,
            tools: &fabric_engine::ToolDefinitions::new(
                tools
                    .iter()
                    .cloned()
                    .map(crate::wire_tools::test_def)
                    .collect(),
            ),
            temperature: Some(0.5),
            top_p: None,
            max_tokens: Some(10),
            stream: true,
            vision: false,
        };
        let body = serde_json::to_value(Request::new(&request)).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "m",
                "messages": [
                    {"role": "system", "content": "s"},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"p\":1}"}}
                    ]},
                    {"role": "tool", "content": "ok", "tool_call_id": "c1"}
                ],
                "tools": tools,
                "tool_choice": "auto",
                "temperature": 0.5,
                "max_tokens": 10,
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
    }

    #[test]
    fn issue_29_a_tool_s_images_follow_the_results_as_a_user_turn() {
        use crate::images::fixture::{PLACEHOLDER, conversation, request};
        let mut messages = conversation();
        // A second call of the same turn, whose tool returned no image.
        messages[1].tool_calls.push(ToolCall {
            id: "c2".into(),
            name: "snap".into(),
            arguments: "{}".into(),
        });
        messages.push(Message::tool_result("c2", "none"));
        let body =
            |vision| serde_json::to_value(Request::new(&request(&messages, vision))).unwrap();
        let sent = body(true);
        let sent = sent["messages"].as_array().unwrap();
        assert_eq!(sent.len(), 5);
        assert_eq!(sent[3]["tool_call_id"], "c2", "the results stay together");
        assert_eq!(
            sent[4],
            json!({"role": "user", "content": [
                {"type": "text", "text": "The image the tool call `c1` returned:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
            ]})
        );
        // Not for a model that does not read images: only the placeholder text.
        let plain = body(false);
        assert_eq!(plain["messages"].as_array().unwrap().len(), 4);
        assert_eq!(plain["messages"][2]["content"], PLACEHOLDER);
    }

    #[test]
    fn no_tools_no_tool_choice_no_stream_options() {
        let messages = vec![Message::user("hi")];
        let request = ChatRequest {
            model: "m",
            messages: &messages,
            tools: &fabric_engine::ToolDefinitions::none(),
            temperature: None,
            top_p: None,
            max_tokens: None,
            stream: false,
            vision: false,
        };
        let body = serde_json::to_value(Request::new(&request)).unwrap();
        assert_eq!(
            body,
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": false})
        );
    }

    #[test]
    fn issue_24_the_prompt_cache_is_read_from_timings_or_usage() {
        let r: Response = serde_json::from_value(json!({
            "choices": [], "usage": {"prompt_tokens": 120, "completion_tokens": 5},
            "timings": {"prompt_n": 8, "cache_n": 112, "prompt_ms": 40.5, "predicted_n": 5}
        }))
        .unwrap();
        let cache = prompt_cache(r.timings.as_ref(), r.usage.as_ref()).unwrap();
        assert_eq!((cache.cached_tokens, cache.evaluated_tokens), (112, 8));
        let r: Response = serde_json::from_value(json!({
            "usage": {"prompt_tokens": 120, "prompt_tokens_details": {"cached_tokens": 100}}
        }))
        .unwrap();
        let cache = prompt_cache(r.timings.as_ref(), r.usage.as_ref()).unwrap();
        assert_eq!((cache.cached_tokens, cache.evaluated_tokens), (100, 20));
        let r: Response = serde_json::from_value(json!({"usage": {"prompt_tokens": 120}})).unwrap();
        assert_eq!(prompt_cache(r.timings.as_ref(), r.usage.as_ref()), None);
    }

    #[test]
    fn nulls_everywhere_still_parse() {
        let r: Response = serde_json::from_value(json!({
            "choices": [{"message": {"content": null, "tool_calls": null}, "finish_reason": null}],
            "usage": null, "extra": 1
        }))
        .unwrap();
        assert_eq!(r.choices.unwrap().len(), 1);
        let c: Chunk =
            serde_json::from_value(json!({"choices": null, "usage": {"prompt_tokens": 3}}))
                .unwrap();
        assert_eq!(Usage::from(&c.usage.unwrap()).total_tokens, 3);
    }
}
