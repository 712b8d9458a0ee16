//! The JSON of Ollama's native API (`/api/chat`, `/api/tags`, `/api/show`). Responses are
//! lenient like the OpenAI ones: missing and `null` fields are fine, unknown ones ignored.

use std::collections::HashMap;

use fabric_domain::{Message, Role, Usage};
use fabric_engine::ChatRequest;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Serialize)]
pub(crate) struct ChatBody<'a> {
    model: &'a str,
    messages: Vec<OutMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<std::sync::Arc<crate::wire_tools::WireTools<crate::wire_tools::Functions>>>,
    /// Always sent: Ollama streams unless told otherwise.
    stream: bool,
    #[serde(skip_serializing_if = "Options::is_empty")]
    options: Options,
    /// Constrained decoding: the JSON Schema every answer must match.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) format: Option<serde_json::Value>,
}

#[derive(Debug, Default, Serialize)]
struct Options {
    /// The reason this client uses the native API: the default context of a few thousand
    /// tokens silently cuts long tool definitions.
    #[serde(skip_serializing_if = "Option::is_none")]
    num_ctx: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    num_predict: Option<u32>,
}

impl Options {
    fn is_empty(&self) -> bool {
        self.num_ctx.is_none()
            && self.temperature.is_none()
            && self.top_p.is_none()
            && self.num_predict.is_none()
    }
}

#[derive(Debug, Serialize)]
struct OutMessage<'a> {
    role: Role,
    content: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<OutToolCall<'a>>,
    /// Ollama matches a tool result to its call by the tool's name, not by an id.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_name: Option<&'a str>,
    /// The images a tool result carries, base64, for a model that reads images.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    images: Vec<&'a str>,
}

#[derive(Debug, Serialize)]
struct OutToolCall<'a> {
    function: OutFunction<'a>,
}

#[derive(Debug, Serialize)]
struct OutFunction<'a> {
    name: &'a str,
    arguments: Value,
}

impl<'a> ChatBody<'a> {
    pub(crate) fn new(request: &ChatRequest<'a>, num_ctx: Option<u32>) -> Self {
        // Walk the conversation in order so a result finds the nearest earlier call with its
        // id, even if an id were ever reused.
        let mut names: HashMap<&str, &str> = HashMap::new();
        let mut messages = Vec::with_capacity(request.messages.len());
        for message in request.messages {
            for call in &message.tool_calls {
                names.insert(&call.id, &call.name);
            }
            messages.push(out_message(message, &names, request.vision));
        }
        Self {
            model: request.model,
            messages,
            tools: crate::wire_tools::encoded(request.tools),
            stream: request.stream,
            options: Options {
                num_ctx,
                temperature: request.temperature,
                top_p: request.top_p,
                num_predict: request.max_tokens,
            },
            format: None,
        }
    }
}

fn out_message<'a>(
    message: &'a Message,
    names: &HashMap<&'a str, &'a str>,
    vision: bool,
) -> OutMessage<'a> {
    OutMessage {
        role: message.role,
        content: message.content.as_deref().unwrap_or(""),
        tool_calls: message
            .tool_calls
            .iter()
            .map(|call| OutToolCall {
                function: OutFunction {
                    name: &call.name,
                    arguments: arguments_object(&call.arguments),
                },
            })
            .collect(),
        tool_name: message
            .tool_call_id
            .as_deref()
            .and_then(|id| names.get(id).copied()),
        images: crate::images::of(message, vision)
            .iter()
            .map(|image| &*image.data)
            .collect(),
    }
}

/// Ollama wants the arguments of earlier calls as an object. Text that is not a JSON object
/// (a call the model got wrong, already answered with an error) becomes `{}`: sending the
/// broken text would make Ollama reject the whole request.
fn arguments_object(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Value::Object(map),
        _ => Value::Object(Map::new()),
    }
}

/// One answer line (the whole answer when not streaming).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ChatChunk {
    #[serde(default)]
    pub(crate) message: Option<AnswerMessage>,
    #[serde(default)]
    pub(crate) done: Option<bool>,
    #[serde(default)]
    pub(crate) done_reason: Option<String>,
    #[serde(default)]
    pub(crate) prompt_eval_count: Option<u64>,
    #[serde(default)]
    pub(crate) eval_count: Option<u64>,
    /// Ollama's errors are `{"error": "text"}`.
    #[serde(default)]
    pub(crate) error: Option<Value>,
}

impl ChatChunk {
    /// Token counts, when the (last) chunk has them.
    pub(crate) fn usage(&self) -> Option<Usage> {
        if self.prompt_eval_count.is_none() && self.eval_count.is_none() {
            return None;
        }
        Some(Usage::from_counts(
            self.prompt_eval_count.unwrap_or(0),
            self.eval_count.unwrap_or(0),
            None,
        ))
    }
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct AnswerMessage {
    #[serde(default)]
    pub(crate) content: Option<String>,
    #[serde(default)]
    pub(crate) tool_calls: Option<Vec<InToolCall>>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct InToolCall {
    /// Recent Ollama versions send one; older ones do not.
    #[serde(default)]
    pub(crate) id: Option<String>,
    #[serde(default)]
    pub(crate) function: Option<InFunction>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct InFunction {
    #[serde(default)]
    pub(crate) name: Option<String>,
    #[serde(default)]
    pub(crate) arguments: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct Tags {
    #[serde(default)]
    pub(crate) models: Option<Vec<TagModel>>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct TagModel {
    #[serde(default)]
    pub(crate) name: Option<String>,
    #[serde(default)]
    pub(crate) model: Option<String>,
    #[serde(default)]
    pub(crate) details: Option<TagDetails>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct TagDetails {
    #[serde(default)]
    pub(crate) parameter_size: Option<String>,
    #[serde(default)]
    pub(crate) family: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ShowBody<'a> {
    pub(crate) model: &'a str,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct Show {
    #[serde(default)]
    pub(crate) capabilities: Option<Vec<String>>,
    /// Architecture facts, among them `<arch>.context_length`.
    #[serde(default)]
    pub(crate) model_info: Option<serde_json::Map<String, serde_json::Value>>,
}

impl Show {
    /// The trained context length (`<arch>.context_length` in `model_info`).
    pub(crate) fn context_length(&self) -> Option<u64> {
        let info = self.model_info.as_ref()?;
        // `<general.architecture>.context_length`; servers without the architecture key
        // have one `*.context_length`.
        match info.get("general.architecture").and_then(|a| a.as_str()) {
            Some(arch) => info.get(&format!("{arch}.context_length"))?.as_u64(),
            None => info.iter().find_map(|(key, value)| {
                key.ends_with(".context_length")
                    .then(|| value.as_u64())
                    .flatten()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_domain::ToolCall;
    use serde_json::json;

    #[test]
    fn chat_body_shape() {
        let messages = vec![
            Message::user("go"),
            Message::assistant(
                None,
                vec![
                    ToolCall {
                        id: "a".into(),
                        name: "read".into(),
                        arguments: r#"{"p":"x"}"#.into(),
                    },
                    ToolCall {
                        id: "b".into(),
                        name: "list".into(),
                        arguments: "{broken".into(),
                    },
                ],
            ),
            Message::tool_result("a", "1"),
            Message::tool_result("b", "2"),
            Message::tool_result("unknown", "3"),
        ];
        let request = ChatRequest {
            model: "q",
            messages: &messages,
            tools: &fabric_engine::ToolDefinitions::none(),
            temperature: Some(0.25),
            top_p: None,
            max_tokens: Some(64),
            stream: false,
            vision: false,
        };
        let body = serde_json::to_value(ChatBody::new(&request, Some(8192))).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "q",
                "messages": [
                    {"role": "user", "content": "go"},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"function": {"name": "read", "arguments": {"p": "x"}}},
                        {"function": {"name": "list", "arguments": {}}}
                    ]},
                    {"role": "tool", "content": "1", "tool_name": "read"},
                    {"role": "tool", "content": "2", "tool_name": "list"},
                    {"role": "tool", "content": "3"}
                ],
                "stream": false,
                "options": {"num_ctx": 8192, "temperature": 0.25, "num_predict": 64}
            })
        );
    }

    #[test]
    fn issue_29_a_tool_s_images_ride_on_its_result() {
        use crate::images::fixture::{PLACEHOLDER, conversation, request};
        let messages = conversation();
        let body = |vision| {
            serde_json::to_value(ChatBody::new(&request(&messages, vision), None)).unwrap()
        };
        assert_eq!(
            body(true)["messages"][2],
            json!({"role": "tool", "content": PLACEHOLDER, "tool_name": "snap", "images": ["AAAA"]})
        );
        assert!(body(false)["messages"][2].get("images").is_none());
    }

    #[test]
    fn usage_needs_a_count() {
        assert_eq!(ChatChunk::default().usage(), None);
        let c: ChatChunk =
            serde_json::from_value(json!({"done": true, "prompt_eval_count": 5, "eval_count": 2}))
                .unwrap();
        assert_eq!(c.usage().map(|u| u.total_tokens), Some(7));
    }
}
