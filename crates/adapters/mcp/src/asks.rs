//! What an MCP server asks the fabric during a run (issue #29), decided without I/O:
//! a sampling request read into the core's [`SampleRequest`], a form (elicitation) answered
//! from its defaults or declined, each with the `mcp_request` event that records it.
//!
//! Both arrive as rmcp types and are read through their JSON: sampling's types are marked
//! deprecated in rmcp (SEP-2577 moves sampling elsewhere in a future revision), while the
//! wire format stays the 2025-11-25 one servers send today.

use fabric_core::SampleRequest;
use fabric_domain::runlog::{McpRequest, McpRequestOutcome};
use fabric_domain::{McpElicitation, Message};
use rmcp::model::ErrorData;
use serde_json::{Map, Value};

/// The method names, as recorded.
pub(crate) const SAMPLING: &str = "sampling/createMessage";
pub(crate) const ELICITATION: &str = "elicitation/create";
pub(crate) const ROOTS: &str = "roots/list";

/// Most tokens a server's completion may ask for when it names no `maxTokens`.
const DEFAULT_MAX_TOKENS: u32 = 1_024;

/// A `sampling/createMessage` request as the core's request: the server's system prompt
/// first, then its turns; content that is not text is described in words (the loop's
/// models take text).
pub(crate) fn sample_request(params: &Value) -> Result<SampleRequest, ErrorData> {
    let invalid = |why: String| ErrorData::invalid_params(why, None);
    let mut messages = Vec::new();
    if let Some(system) = params["systemPrompt"].as_str() {
        messages.push(Message::system(system));
    }
    let turns = params["messages"]
        .as_array()
        .ok_or_else(|| invalid("`messages` must be an array of sampling messages".into()))?;
    for (i, turn) in turns.iter().enumerate() {
        let blocks = match &turn["content"] {
            Value::Array(blocks) => blocks.iter().collect(),
            block => vec![block],
        };
        let text: Vec<String> = blocks.into_iter().map(block_text).collect();
        let text = text.join("\n");
        match turn["role"].as_str() {
            Some("user") => messages.push(Message::user(text)),
            Some("assistant") => messages.push(Message::assistant(Some(text), Vec::new())),
            other => {
                return Err(invalid(format!(
                    "`messages[{i}].role` must be `user` or `assistant`, got {}",
                    other.map_or_else(|| turn["role"].to_string(), |r| format!("`{r}`"))
                )));
            }
        }
    }
    if turns.is_empty() {
        return Err(invalid(
            "`messages` is empty: there is nothing to answer".into(),
        ));
    }
    let max_tokens = params["maxTokens"]
        .as_u64()
        .map_or(DEFAULT_MAX_TOKENS, |n| u32::try_from(n).unwrap_or(u32::MAX));
    #[allow(clippy::cast_possible_truncation)] // a temperature is a small number
    let temperature = params["temperature"].as_f64().map(|t| t as f32);
    Ok(SampleRequest {
        messages,
        max_tokens,
        temperature,
    })
}

/// One content block of a sampling message as text.
fn block_text(block: &Value) -> String {
    match block["type"].as_str() {
        Some("text") => block["text"].as_str().unwrap_or_default().to_owned(),
        Some(kind) => format!(
            "[{kind} content, {}]",
            block["mimeType"]
                .as_str()
                .unwrap_or("not shown to this model")
        ),
        None => block.to_string(),
    }
}

/// How a form was answered: the content to accept with, or why it was declined; and the
/// event that records it.
pub(crate) struct Elicited {
    pub(crate) accepted: Option<Map<String, Value>>,
    pub(crate) event: McpRequest,
}

/// Answers an `elicitation/create` request of `server` under its `policy`: with `defaults`,
/// a form whose required fields all have a default is accepted with every default it
/// gives; anything else is declined, with the reason.
pub(crate) fn elicit(server: &str, policy: McpElicitation, params: &Value) -> Elicited {
    let declined = |reason: String| {
        let mut event = McpRequest::new(server, ELICITATION, McpRequestOutcome::Declined);
        event.reason = Some(reason);
        Elicited {
            accepted: None,
            event,
        }
    };
    let asked = params["message"].as_str().unwrap_or_default();
    if policy == McpElicitation::Decline {
        return declined(format!(
            "a run has no one to ask (\"{asked}\"); set `elicitation: defaults` on MCP server `{server}` to accept forms with the defaults they give"
        ));
    }
    let Some(schema) = params.get("requestedSchema") else {
        return declined(format!(
            "the server asks for something other than a form (\"{asked}\"), which a run cannot give"
        ));
    };
    let properties = schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(missing) = required.iter().find(|name| {
        properties
            .get(**name)
            .is_none_or(|p| p.get("default").is_none())
    }) {
        return declined(format!(
            "the form requires `{missing}`, which has no default (\"{asked}\")"
        ));
    }
    let content: Map<String, Value> = properties
        .into_iter()
        .filter_map(|(name, property)| property.get("default").cloned().map(|d| (name, d)))
        .collect();
    let mut event = McpRequest::new(server, ELICITATION, McpRequestOutcome::Answered);
    event.fields = Some(content.keys().cloned().collect());
    Elicited {
        accepted: Some(content),
        event,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn issue_29_a_sampling_request_becomes_the_model_s_conversation() {
        let request = sample_request(&json!({
            "systemPrompt": "Be brief.",
            "messages": [
                {"role": "user", "content": {"type": "text", "text": "Summarise: a b c"}},
                {"role": "assistant", "content": [{"type": "image", "mimeType": "image/png", "data": "AA"}]}
            ],
            "maxTokens": 50, "temperature": 0.5
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(request.max_tokens, 50);
        assert_eq!(request.temperature, Some(0.5));
        let texts: Vec<_> = request
            .messages
            .iter()
            .map(|m| m.content.clone().unwrap_or_default())
            .collect();
        assert_eq!(
            texts,
            [
                "Be brief.",
                "Summarise: a b c",
                "[image content, image/png]"
            ]
        );
        let bad = sample_request(
            &json!({"messages": [{"role": "tool", "content": {"type": "text", "text": "x"}}]}),
        )
        .map_err(|e| e.message.to_string());
        assert_eq!(
            bad,
            Err("`messages[0].role` must be `user` or `assistant`, got `tool`".to_owned())
        );
        assert!(sample_request(&json!({"messages": []})).is_err());
    }

    fn form(required: Value) -> Value {
        json!({"mode": "form", "message": "Who are you?", "requestedSchema": {"type": "object",
            "properties": {"name": {"type": "string", "default": "John Doe"},
                           "age": {"type": "integer", "default": 30},
                           "nickname": {"type": "string"}},
            "required": required}})
    }

    #[test]
    fn issue_29_a_form_is_answered_with_its_defaults_only_when_allowed_and_complete() {
        let answered = elicit("s", McpElicitation::Defaults, &form(json!(["name"])));
        let content = answered.accepted.unwrap_or_else(|| panic!("declined"));
        assert_eq!(
            Value::Object(content),
            json!({"name": "John Doe", "age": 30})
        );
        assert_eq!(answered.event.outcome, McpRequestOutcome::Answered);
        assert_eq!(
            answered.event.fields,
            Some(vec!["age".into(), "name".into()])
        );

        let incomplete = elicit("s", McpElicitation::Defaults, &form(json!(["nickname"])));
        assert!(incomplete.accepted.is_none());
        assert_eq!(
            incomplete.event.reason.as_deref(),
            Some("the form requires `nickname`, which has no default (\"Who are you?\")")
        );

        let declined = elicit("s", McpElicitation::Decline, &form(json!([])));
        assert!(declined.accepted.is_none());
        assert_eq!(declined.event.outcome, McpRequestOutcome::Declined);
        assert!(
            declined
                .event
                .reason
                .unwrap_or_default()
                .contains("elicitation: defaults")
        );

        let url = elicit(
            "s",
            McpElicitation::Defaults,
            &json!({"mode": "url", "message": "Log in", "url": "https://x"}),
        );
        assert!(url.accepted.is_none());
    }
}
