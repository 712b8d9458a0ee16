//! The JSON of Anthropic's Messages API. The conversation is translated once per request:
//! system messages become the top-level `system`, tool calls `tool_use` blocks, tool results
//! `tool_result` blocks in a user message, and consecutive messages of one role are merged
//! (the API wants user and assistant to alternate). Answers are read leniently.

use fabric_domain::{Message, Role, Usage};
use fabric_engine::ChatRequest;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// `max_tokens` is required by the API; this is sent when the model key sets none.
pub(crate) const DEFAULT_MAX_TOKENS: u32 = 4096;

#[derive(Debug, Serialize)]
pub(crate) struct Request<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    messages: Vec<OutMessage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<std::sync::Arc<crate::wire_tools::WireTools<Tools>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    stream: bool,
}

#[derive(Debug, Serialize)]
struct OutMessage {
    role: &'static str,
    content: Vec<Value>,
}

impl<'a> Request<'a> {
    pub(crate) fn new(request: &ChatRequest<'a>) -> Self {
        let mut system: Vec<&str> = Vec::new();
        let mut messages: Vec<OutMessage> = Vec::new();
        for message in request.messages {
            let (role, blocks) = match message.role {
                Role::System => {
                    system.extend(message.content.as_deref());
                    continue;
                }
                Role::User => ("user", vec![text_block(message)]),
                Role::Tool => ("user", vec![tool_result_block(message, request.vision)]),
                Role::Assistant => ("assistant", assistant_blocks(message)),
            };
            match messages.last_mut() {
                Some(last) if last.role == role => last.content.extend(blocks),
                _ => messages.push(OutMessage {
                    role,
                    content: blocks,
                }),
            }
        }
        // The API refuses empty text blocks and a conversation that does not start with the
        // user; an empty first turn is given a placeholder.
        for m in &mut messages {
            m.content
                .retain(|b| b.get("text").and_then(Value::as_str) != Some(""));
            if m.content.is_empty() {
                m.content.push(json!({"type": "text", "text": "(empty)"}));
            }
        }
        Self {
            model: request.model,
            max_tokens: request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            system: (!system.is_empty()).then(|| system.join("\n\n")),
            messages,
            tools: crate::wire_tools::encoded(request.tools),
            // Recent Claude models refuse `temperature` and `top_p` together; the
            // temperature is the one every model key sets.
            temperature: request.temperature,
            top_p: request
                .temperature
                .is_none()
                .then_some(request.top_p)
                .flatten(),
            stream: request.stream,
        }
    }
}

fn text_block(message: &Message) -> Value {
    json!({"type": "text", "text": message.content.as_deref().unwrap_or("")})
}

/// A tool result; with the images its tool returned (for a model that reads them) its
/// content is blocks, the text then each image.
fn tool_result_block(message: &Message, vision: bool) -> Value {
    let text = message.content.as_deref().unwrap_or("");
    let images = crate::images::of(message, vision);
    let content = match images.is_empty() {
        true => json!(text),
        // The API refuses an empty text block.
        false => (!text.is_empty())
            .then(|| json!({"type": "text", "text": text}))
            .into_iter()
            .chain(images.iter().map(|image| {
                json!({"type": "image", "source": {
                    "type": "base64", "media_type": image.mime_type, "data": &*image.data,
                }})
            }))
            .collect(),
    };
    json!({
        "type": "tool_result",
        "tool_use_id": message.tool_call_id.as_deref().unwrap_or(""),
        "content": content,
    })
}

fn assistant_blocks(message: &Message) -> Vec<Value> {
    let mut blocks = Vec::new();
    if let Some(text) = message.content.as_deref().filter(|t| !t.trim().is_empty()) {
        blocks.push(json!({"type": "text", "text": text}));
    }
    for call in &message.tool_calls {
        // `input` must be an object: arguments that were not one (the model's mistake, which
        // it was told about) are kept as text inside one.
        let input = match serde_json::from_str::<Value>(&call.arguments) {
            Ok(object @ Value::Object(_)) => object,
            _ => json!({"invalid_arguments": call.arguments}),
        };
        blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
    }
    blocks
}

/// The Messages API's tools: `{"name", "description", "input_schema"}`.
pub(crate) struct Tools;

impl crate::wire_tools::Form for Tools {
    fn encode(def: &fabric_engine::ToolDef) -> Value {
        json!({
            "name": def.name,
            "description": def.description,
            "input_schema": def.parameters,
        })
    }
}

/// A whole (non-streamed) answer, or an error object.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Response {
    #[serde(default)]
    pub(crate) content: Vec<Block>,
    #[serde(default)]
    pub(crate) stop_reason: Option<String>,
    #[serde(default)]
    pub(crate) usage: Option<WireUsage>,
    #[serde(default)]
    pub(crate) error: Option<Value>,
}

/// One content block of an answer.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Block {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        name: String,
        #[serde(default)]
        input: Option<Value>,
    },
    /// Thinking and other blocks the fabric does not use.
    #[serde(other)]
    Other,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub(crate) input_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) output_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    /// The prompt's tokens: cached ones are part of the prompt too.
    pub(crate) fn prompt(&self) -> u64 {
        self.input_tokens
            .unwrap_or(0)
            .saturating_add(self.cache_creation_input_tokens.unwrap_or(0))
            .saturating_add(self.cache_read_input_tokens.unwrap_or(0))
    }

    pub(crate) fn usage(self) -> Usage {
        Usage::from_counts(self.prompt(), self.output_tokens.unwrap_or(0), None)
    }
}

/// The stop reason in the words the rest of the fabric uses (OpenAI's).
pub(crate) fn finish_reason(stop_reason: &str) -> String {
    match stop_reason {
        "tool_use" => "tool_calls",
        "end_turn" | "stop_sequence" => "stop",
        "max_tokens" => "length",
        other => other,
    }
    .to_owned()
}

/// One event of a stream (its `data`; the `type` field says which).
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Event {
    MessageStart {
        #[serde(default)]
        message: Option<StartMessage>,
    },
    ContentBlockStart {
        #[serde(default)]
        index: u64,
        content_block: Block,
    },
    ContentBlockDelta {
        #[serde(default)]
        index: u64,
        delta: Delta,
    },
    MessageDelta {
        #[serde(default)]
        delta: Option<MessageDeltaBody>,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Error {
        #[serde(default)]
        error: Option<Value>,
    },
    /// `ping`, `content_block_stop` and anything newer.
    #[serde(other)]
    Other,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct StartMessage {
    #[serde(default)]
    pub(crate) usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Delta {
    #[serde(rename = "text_delta")]
    Text {
        #[serde(default)]
        text: String,
    },
    #[serde(rename = "input_json_delta")]
    InputJson {
        #[serde(default)]
        partial_json: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct MessageDeltaBody {
    #[serde(default)]
    pub(crate) stop_reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_domain::ToolCall;
    use fabric_engine::ToolDefinitions;

    #[test]
    fn issue_29_a_tool_s_images_are_blocks_of_its_result() {
        use crate::images::fixture::{PLACEHOLDER, conversation, request};
        let messages = conversation();
        let body = |vision| {
            serde_json::to_value(Request::new(&request(&messages, vision))).unwrap_or_default()
        };
        assert_eq!(
            body(true)["messages"][2]["content"][0],
            json!({"type": "tool_result", "tool_use_id": "c1", "content": [
                {"type": "text", "text": PLACEHOLDER},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
            ]})
        );
        assert_eq!(
            body(false)["messages"][2]["content"][0]["content"],
            PLACEHOLDER
        );
    }

    #[test]
    fn a_conversation_becomes_alternating_messages_with_blocks() {
        let messages = vec![
            Message::system("be brief"),
            Message::user("list the files"),
            Message::assistant(
                Some("Let me look.".to_owned()),
                vec![
                    ToolCall {
                        id: "t1".into(),
                        name: "list_files".into(),
                        arguments: "{}".into(),
                    },
                    ToolCall {
                        id: "t2".into(),
                        name: "read_file".into(),
                        arguments: "{bad".into(),
                    },
                ],
            ),
            Message::tool_result("t1", "a.txt"),
            Message::tool_result("t2", "error"),
            Message::user("now finish"),
        ];
        let tools = ToolDefinitions::new(vec![crate::wire_tools::test_def(
            json!({"type": "function", "function": {
            "name": "list_files", "description": "Lists.", "parameters": {"type": "object"}}}),
        )]);
        let request = ChatRequest {
            model: "claude-sonnet-4-5",
            messages: &messages,
            tools: &tools,
            temperature: Some(0.2),
            top_p: Some(0.9),
            max_tokens: None,
            stream: false,
            vision: false,
        };
        let body = serde_json::to_value(Request::new(&request)).unwrap_or_default();
        assert_eq!(body["system"], "be brief");
        assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
        assert_eq!(body["temperature"], json!(0.2_f32));
        assert!(body.get("top_p").is_none(), "{body}");
        assert_eq!(
            body["tools"],
            json!([{"name": "list_files", "description": "Lists.", "input_schema": {"type": "object"}}])
        );
        let m = body["messages"].as_array().cloned().unwrap_or_default();
        assert_eq!(m.len(), 3, "{body}");
        assert_eq!(m[1]["role"], "assistant");
        assert_eq!(m[1]["content"][1]["type"], "tool_use");
        assert_eq!(
            m[1]["content"][2]["input"],
            json!({"invalid_arguments": "{bad"})
        );
        // Both results and the next user text share one user message.
        assert_eq!(m[2]["role"], "user");
        assert_eq!(m[2]["content"][0]["tool_use_id"], "t1");
        assert_eq!(m[2]["content"][1]["tool_use_id"], "t2");
        assert_eq!(m[2]["content"][2]["text"], "now finish");
    }

    #[test]
    fn stop_reasons_read_as_finish_reasons() {
        assert_eq!(finish_reason("tool_use"), "tool_calls");
        assert_eq!(finish_reason("end_turn"), "stop");
        assert_eq!(finish_reason("max_tokens"), "length");
        assert_eq!(finish_reason("refusal"), "refusal");
    }
}
