//! The JSON of OpenAI's Responses API (`POST {base}/responses`). The conversation becomes a
//! list of input items: system messages the top-level `instructions`, user and assistant text
//! `message` items, tool calls `function_call` items and tool results `function_call_output`
//! items, each paired by `call_id`. Tools are flat function tools (`{"type": "function",
//! "name", "parameters"}`, not Chat Completions' nested `function`). Answers are read
//! leniently: unknown output items and events are skipped, arguments may come as text or
//! as an object.

use fabric_domain::{Message, PromptCache, Role, Usage};
use fabric_engine::ChatRequest;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// One request. `input` is every item of the conversation, or, when chained, only the items
/// after the turn `previous_response_id` names.
#[derive(Debug, Serialize)]
pub(crate) struct Request<'a> {
    pub(crate) model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) instructions: Option<String>,
    pub(crate) input: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tools: Option<std::sync::Arc<crate::wire_tools::WireTools<Tools>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_output_tokens: Option<u32>,
    pub(crate) stream: bool,
    /// `false` when the whole conversation is sent each time: the server need keep nothing.
    pub(crate) store: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) previous_response_id: Option<String>,
    /// Reasoning models' items come back encrypted, to be sent again with the next turn when
    /// the server keeps nothing.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) include: Vec<&'static str>,
    /// The answer's form: `{"format": {"type": "json_schema", …}}` under constrained
    /// decoding (crate::constrained), which OpenAI enforces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) text: Option<Value>,
    /// The same schema as llama.cpp's server reads it on `/v1/responses`: it ignores
    /// `text.format` but passes the body's other fields to its Chat Completions, whose
    /// grammar sampler enforces `response_format` (issue #40). Sent only to a server that
    /// answers llama.cpp's `/props`; OpenAI refuses an unknown parameter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) response_format: Option<Value>,
}

impl<'a> Request<'a> {
    /// The request for `tail` (the whole conversation, or the items after a chained turn).
    /// The instructions are always every system message of the whole conversation: the API
    /// does not carry them over from a previous response. `reasoning_for` gives the
    /// reasoning items an assistant message came with, sent back before it.
    pub(crate) fn new(
        request: &ChatRequest<'a>,
        tail: &[Message],
        reasoning_for: &dyn Fn(&Message) -> Vec<Value>,
    ) -> Self {
        let instructions: Vec<&str> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::System)
            .filter_map(|m| m.content.as_deref())
            .collect();
        let mut input = Vec::new();
        for (at, message) in tail.iter().enumerate() {
            match message.role {
                Role::System => {}
                Role::User => input.push(text_item("user", message)),
                Role::Tool => {
                    input.push(json!({
                        "type": "function_call_output",
                        "call_id": message.tool_call_id.as_deref().unwrap_or(""),
                        "output": message.content.as_deref().unwrap_or(""),
                    }));
                    let handed = crate::images::after_results(tail, at, request.vision);
                    if !handed.is_empty() {
                        input.push(images_item(&handed));
                    }
                }
                Role::Assistant => {
                    input.extend(reasoning_for(message));
                    if message.content.as_deref().is_some_and(|t| !t.is_empty()) {
                        input.push(text_item("assistant", message));
                    }
                    for call in &message.tool_calls {
                        input.push(json!({
                            "type": "function_call",
                            "call_id": call.id,
                            "name": call.name,
                            "arguments": call.arguments,
                        }));
                    }
                }
            }
        }
        Self {
            model: request.model,
            instructions: (!instructions.is_empty()).then(|| instructions.join("\n\n")),
            input,
            tools: crate::wire_tools::encoded(request.tools),
            temperature: request.temperature,
            top_p: request.top_p,
            max_output_tokens: request.max_tokens,
            stream: request.stream,
            store: false,
            previous_response_id: None,
            include: Vec::new(),
            text: None,
            response_format: None,
        }
    }
}

/// The user message carrying the images of a run of tool results, each call's after a
/// caption. A following message rather than `function_call_output`'s list form, which
/// OpenAI takes but servers that only take text output (llama.cpp) refuse (ADR-087).
fn images_item(handed: &[(&str, &[fabric_domain::ToolImage])]) -> Value {
    let mut content = Vec::new();
    for (call_id, shown) in handed {
        let caption = crate::images::caption(call_id, shown.len());
        content.push(json!({"type": "input_text", "text": caption}));
        content.extend(shown.iter().map(|image| {
            json!({"type": "input_image", "image_url": crate::images::DataUrl(image), "detail": "auto"})
        }));
    }
    json!({"type": "message", "role": "user", "content": content})
}

fn text_item(role: &str, message: &Message) -> Value {
    json!({"type": "message", "role": role, "content": message.content.as_deref().unwrap_or("")})
}

/// The Responses API's flat function tools: `{"type": "function", "name", "description",
/// "parameters", "strict": false}`.
pub(crate) struct Tools;

impl crate::wire_tools::Form for Tools {
    fn encode(def: &fabric_engine::ToolDef) -> Value {
        json!({
            "type": "function",
            "name": def.name,
            "description": def.description,
            "parameters": def.parameters,
            // Strict mode would refuse our schemas' optional properties.
            "strict": false,
        })
    }
}

/// A response object: the whole answer, or the one a stream's last event carries.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Response {
    #[serde(default)]
    pub(crate) id: Option<String>,
    #[serde(default)]
    pub(crate) status: Option<String>,
    #[serde(default)]
    pub(crate) output: Vec<Item>,
    #[serde(default)]
    pub(crate) usage: Option<WireUsage>,
    #[serde(default)]
    pub(crate) error: Option<Value>,
    #[serde(default)]
    pub(crate) incomplete_details: Option<Incomplete>,
}

/// Why a response stopped early.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Incomplete {
    #[serde(default)]
    pub(crate) reason: Option<String>,
}

impl Response {
    /// The finish reason in Chat Completions' words, which the engine reads.
    pub(crate) fn finish_reason(&self, has_calls: bool) -> String {
        let early = self
            .incomplete_details
            .as_ref()
            .and_then(|d| d.reason.as_deref());
        match (self.status.as_deref(), early) {
            (Some("incomplete"), Some("max_output_tokens")) => "length",
            (Some("incomplete"), Some("content_filter")) => "content_filter",
            _ if has_calls => "tool_calls",
            _ => "stop",
        }
        .to_owned()
    }
}

/// One output item.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Item {
    Message {
        #[serde(default)]
        content: Vec<Part>,
    },
    FunctionCall {
        /// The item's own id (`fc_…`), which argument deltas name.
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        call_id: Option<String>,
        #[serde(default)]
        name: String,
        #[serde(default)]
        arguments: Option<Value>,
    },
    /// Kept whole, to be sent back as it came.
    Reasoning(Map<String, Value>),
    #[serde(other)]
    Other,
}

/// One part of a message item.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Part {
    OutputText {
        #[serde(default)]
        text: String,
    },
    Refusal {
        #[serde(default)]
        refusal: String,
    },
    #[serde(other)]
    Other,
}

impl Part {
    pub(crate) fn text(&self) -> &str {
        match self {
            Self::OutputText { text } => text,
            Self::Refusal { refusal } => refusal,
            Self::Other => "",
        }
    }
}

/// A reasoning item as it goes back into the input.
pub(crate) fn reasoning_input(mut fields: Map<String, Value>) -> Value {
    fields.insert("type".into(), json!("reasoning"));
    // Output-only fields the input refuses.
    fields.remove("status");
    Value::Object(fields)
}

/// `usage`, as the API counts it.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub(crate) input_tokens: u64,
    #[serde(default)]
    pub(crate) output_tokens: u64,
    #[serde(default)]
    pub(crate) total_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) input_tokens_details: Option<InputDetails>,
}

/// `usage.input_tokens_details`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct InputDetails {
    #[serde(default)]
    pub(crate) cached_tokens: Option<u64>,
}

impl WireUsage {
    pub(crate) fn usage(&self) -> Usage {
        Usage::from_counts(self.input_tokens, self.output_tokens, self.total_tokens)
    }

    pub(crate) fn prompt_cache(&self) -> Option<PromptCache> {
        let cached = self.input_tokens_details.as_ref()?.cached_tokens?;
        Some(PromptCache {
            cached_tokens: cached,
            evaluated_tokens: self.input_tokens.saturating_sub(cached),
        })
    }
}

/// One event of a streamed response.
#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
pub(crate) enum Event {
    #[serde(rename = "response.output_item.added")]
    ItemAdded {
        #[serde(default)]
        output_index: Option<u64>,
        item: Item,
    },
    #[serde(rename = "response.output_text.delta")]
    TextDelta {
        #[serde(default)]
        delta: String,
    },
    #[serde(rename = "response.function_call_arguments.delta")]
    ArgumentsDelta {
        #[serde(default)]
        output_index: Option<u64>,
        #[serde(default)]
        item_id: Option<String>,
        #[serde(default)]
        delta: String,
    },
    #[serde(rename = "response.output_item.done")]
    ItemDone {
        #[serde(default)]
        output_index: Option<u64>,
        item: Item,
    },
    #[serde(rename = "response.completed", alias = "response.incomplete")]
    Completed { response: Response },
    #[serde(rename = "response.failed")]
    Failed {
        #[serde(default)]
        response: Option<Response>,
    },
    #[serde(rename = "error")]
    Error {
        #[serde(flatten)]
        error: Map<String, Value>,
    },
    #[serde(other)]
    Other,
}
