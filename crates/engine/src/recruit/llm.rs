//! LLM routing: one call to the routing model, whose answer must name known specialists.
//!
//! The model is offered one tool, `route {specialist_ids, reason}`, and told to call it.
//! Small models often answer with the JSON in their text instead, sometimes inside a code
//! fence; that is accepted too. Anything else (no answer, an error, a timeout, ids that do
//! not exist, an empty list) is a failure the caller turns into keyword routing.

use fabric_domain::{Message, SpecialistSpec};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::ports::{ChatClient, ChatError, ChatRequest, NoopObserver};

/// The routing model and how long to wait for it.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmRouting {
    /// The model key from the config (`routing_model_key`), for messages and the runlog.
    pub model_key: String,
    /// The model name on the routing server.
    pub model: String,
    /// How long the routing call may take before keyword routing decides.
    pub timeout: Duration,
}

/// The routing call, for the runlog (`llm_request`/`llm_response` with `purpose: routing`).
#[derive(Debug, Clone, PartialEq)]
pub struct RoutingCall {
    /// The model key.
    pub model_key: String,
    /// The model name.
    pub model: String,
    /// The model's text, if any.
    pub content: Option<String>,
    /// The `route` call's arguments as sent, if any.
    pub tool_arguments: Option<String>,
    /// How long the call took.
    pub latency_ms: f64,
    /// The validated ids and reason, or why the answer was not usable.
    pub outcome: Result<(Vec<String>, String), RoutingFailure>,
}

/// Why the routing model's answer was not used (keyword routing decides instead).
#[derive(Debug, Clone, PartialEq, Error)]
pub enum RoutingFailure {
    /// No answer in time.
    #[error("the routing model did not answer within {seconds} s")]
    Timeout {
        /// The limit.
        seconds: u64,
    },
    /// The call failed.
    #[error(transparent)]
    Chat(ChatError),
    /// The answer holds no JSON object.
    #[error("the routing model's answer is not a JSON object{}", excerpt(answer))]
    NotAnObject {
        /// The start of the answer (empty when the model said nothing).
        answer: String,
    },
    /// The object has no `specialist_ids` list.
    #[error("the routing model's answer has no `specialist_ids` list")]
    NoIds,
    /// An id that is not a string.
    #[error("`specialist_ids` holds a non-string: {id}")]
    NotAString {
        /// The value, as JSON.
        id: String,
    },
    /// An id that names no specialist.
    #[error("the routing model named unknown specialist `{id}` (known: {known})")]
    UnknownSpecialist {
        /// The id.
        id: String,
        /// The ids there are, listed for the message.
        known: String,
    },
    /// The list is empty.
    #[error("the routing model chose no specialist")]
    NoneChosen,
}

/// The answer after a colon, when there is one.
fn excerpt(answer: &str) -> String {
    if answer.is_empty() {
        String::new()
    } else {
        format!(": {answer}")
    }
}

/// The name of the one tool the routing model is offered.
pub const ROUTE_TOOL: &str = "route";

/// Asks the routing model which specialists should work on `prompt`.
pub async fn route_with_llm(
    chat: &dyn ChatClient,
    settings: &LlmRouting,
    prompt: &str,
    specialists: &[Arc<SpecialistSpec>],
) -> RoutingCall {
    let ids: Vec<&str> = specialists.iter().map(|s| s.id.as_str()).collect();
    let messages = vec![
        Message::system(system_prompt(specialists)),
        Message::user(format!("Task:\n{prompt}")),
    ];
    let tools = crate::ports::ToolDefinitions::new(vec![route_tool(&ids)]);
    let request = ChatRequest {
        model: &settings.model,
        messages: &messages,
        tools: &tools,
        temperature: Some(0.0),
        top_p: None,
        max_tokens: Some(256),
        stream: false,
        vision: false,
    };
    let started = Instant::now();
    let answer = tokio::time::timeout(settings.timeout, chat.chat(request, &NoopObserver)).await;
    let latency_ms = (started.elapsed().as_secs_f64() * 1_000_000.0).round() / 1000.0;
    let mut call = RoutingCall {
        model_key: settings.model_key.clone(),
        model: settings.model.clone(),
        content: None,
        tool_arguments: None,
        latency_ms,
        // Not answered in time, until it is.
        outcome: Err(RoutingFailure::Timeout {
            seconds: settings.timeout.as_secs(),
        }),
    };
    let response = match answer {
        Err(_) => return call,
        Ok(Err(e)) => {
            call.outcome = Err(RoutingFailure::Chat(e));
            return call;
        }
        Ok(Ok(response)) => response,
    };
    call.content = response.content.clone();
    let route_call = response.tool_calls.iter().find(|c| c.name == ROUTE_TOOL);
    call.tool_arguments = route_call.map(|c| c.arguments.clone());
    let text = route_call
        .map(|c| c.arguments.as_str())
        .or(response.content.as_deref())
        .unwrap_or_default();
    call.outcome = parse_answer(text, &ids);
    call
}

/// Validates the model's answer: a JSON object (possibly inside a code fence or surrounded
/// by prose) with a non-empty `specialist_ids` list of known ids and a `reason`.
pub fn parse_answer(text: &str, known: &[&str]) -> Result<(Vec<String>, String), RoutingFailure> {
    let value = extract_object(text).ok_or_else(|| RoutingFailure::NotAnObject {
        answer: crate::recorder::truncate(text.trim(), 200),
    })?;
    let ids = value
        .get("specialist_ids")
        .and_then(Value::as_array)
        .ok_or(RoutingFailure::NoIds)?;
    let mut out: Vec<String> = Vec::new();
    for id in ids {
        let id = id
            .as_str()
            .ok_or_else(|| RoutingFailure::NotAString { id: id.to_string() })?;
        if !known.contains(&id) {
            return Err(RoutingFailure::UnknownSpecialist {
                id: id.to_owned(),
                known: known.join(", "),
            });
        }
        if !out.iter().any(|x| x == id) {
            out.push(id.to_owned());
        }
    }
    if out.is_empty() {
        return Err(RoutingFailure::NoneChosen);
    }
    let reason = value
        .get("reason")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .unwrap_or("no reason given")
        .to_owned();
    Ok((out, reason))
}

/// The first JSON object in a text: the whole text, or from the first `{` to the last `}`.
fn extract_object(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if let Ok(value @ Value::Object(_)) = serde_json::from_str(trimmed) {
        return Some(value);
    }
    let start = trimmed.find('{')?;
    let end = trimmed.rfind('}')?;
    (start < end)
        .then(|| serde_json::from_str(&trimmed[start..=end]).ok())
        .flatten()
        .filter(Value::is_object)
}

fn route_tool(ids: &[&str]) -> crate::ports::ToolDef {
    crate::ports::ToolDef {
        name: ROUTE_TOOL.to_owned(),
        description: "Choose the specialist(s) for the task, in the order they should work."
            .to_owned(),
        parameters: json!({
            "type": "object",
            "properties": {
                "specialist_ids": {"type": "array", "items": {"type": "string", "enum": ids}, "minItems": 1},
                "reason": {"type": "string", "description": "One sentence: why these specialists."}
            },
            "required": ["specialist_ids", "reason"],
            "additionalProperties": false
        }),
    }
}

fn system_prompt(specialists: &[Arc<SpecialistSpec>]) -> String {
    let mut text = String::from(
        "You route tasks to specialist agents. Choose the fewest specialists that together can do the task: usually one; several only when the task clearly needs several kinds of work, listed in the order they should work. Call the `route` tool with {\"specialist_ids\": [...], \"reason\": \"...\"}.\n\nSpecialists:\n",
    );
    for s in specialists {
        text.push_str(&format!(
            "- {}: {} (capabilities: {})\n",
            s.id,
            s.description,
            s.capabilities.join(", ")
        ));
    }
    text
}
