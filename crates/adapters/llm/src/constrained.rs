//! Constrained decoding (issue #24): for a model whose chat template has no tool calling (or
//! a server that refuses `tools`), the server is asked for one JSON object that must match
//! one tool's call shape, `{"name": …, "arguments": {…}}`, through the JSON Schema its
//! grammar sampler enforces (llama.cpp's `response_format: json_schema`, Ollama's `format`,
//! vLLM's guided decoding). The tools are described in the system prompt instead of
//! `tools`; earlier calls and their results are written as text a plain template can show.
//! The answer is turned back into a tool call, so the engine sees what it always sees.

use std::collections::HashMap;

use fabric_domain::{Message, Role, ToolCall};
use fabric_engine::{ChatResponse, ToolDef, ToolDefinitions};
use serde_json::{Value, json};
use std::sync::Arc;

use crate::toolcalls::generate_call_id;

/// One request's tools, as a schema and a prompt.
#[derive(Debug)]
pub(crate) struct Constrained {
    /// What every answer must match: `anyOf` the tools' call shapes.
    pub(crate) schema: Value,
    /// The tools, described for the system prompt.
    prompt: String,
    names: Vec<String>,
}

impl Constrained {
    /// The schema and prompt for `tools`, made once per definitions set; `None` without
    /// tools (nothing to constrain).
    pub(crate) fn new(tools: &ToolDefinitions) -> Option<Arc<Self>> {
        Some(tools.encoded(Self::of)).filter(|c| !c.names.is_empty())
    }

    fn of(defs: &[ToolDef]) -> Self {
        let mut shapes = Vec::new();
        let mut names = Vec::new();
        let mut lines = Vec::new();
        for ToolDef {
            name,
            description,
            parameters,
        } in defs
        {
            lines.push(format!(
                "- {name}: {description}
  arguments: {parameters}"
            ));
            shapes.push(json!({
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": parameters},
                "required": ["name", "arguments"],
                "additionalProperties": false,
            }));
            names.push(name.to_owned());
        }
        let prompt = format!(
            "You work by calling tools. Answer with exactly one JSON object and nothing else: {{\"name\": <tool name>, \"arguments\": {{...}}}}. Call one tool per answer; you will get its result, then call the next. When the work is done, call finish_task.\n\nThe tools:\n{}",
            lines.join("\n")
        );
        Self {
            schema: json!({"anyOf": shapes}),
            prompt,
            names,
        }
    }

    /// The conversation as a template without tool calling can show it: the tools in the
    /// system prompt, each earlier call as its JSON text, each result as a user message that
    /// names the tool.
    pub(crate) fn messages(&self, messages: &[Message]) -> Vec<Message> {
        let mut out = Vec::with_capacity(messages.len() + 1);
        let mut names: HashMap<&str, &str> = HashMap::new();
        if messages.first().is_none_or(|m| m.role != Role::System) {
            out.push(Message::system(self.prompt.clone()));
        }
        for (i, message) in messages.iter().enumerate() {
            let rewritten = match message.role {
                Role::System if i == 0 => Message::system(format!(
                    "{}\n\n{}",
                    message.content.as_deref().unwrap_or_default(),
                    self.prompt
                )),
                Role::Assistant if !message.tool_calls.is_empty() => {
                    let mut text: Vec<String> = message
                        .content
                        .iter()
                        .map(|c| c.trim().to_owned())
                        .collect();
                    for call in &message.tool_calls {
                        names.insert(call.id.as_str(), call.name.as_str());
                        let arguments: Value = serde_json::from_str(&call.arguments)
                            .unwrap_or_else(|_| Value::String(call.arguments.clone()));
                        text.push(json!({"name": call.name, "arguments": arguments}).to_string());
                    }
                    Message::assistant(Some(text.join("\n")), Vec::new())
                }
                Role::Tool => {
                    let tool = message
                        .tool_call_id
                        .as_deref()
                        .and_then(|id| names.get(id).copied())
                        .unwrap_or("the tool");
                    Message::user(format!(
                        "Result of {tool}:\n{}",
                        message.content.as_deref().unwrap_or_default()
                    ))
                }
                _ => message.clone(),
            };
            out.push(rewritten);
        }
        out
    }

    /// The answer with its JSON turned into a tool call; an answer that is not one call of
    /// a known tool stays text, for the engine's corrective message.
    pub(crate) fn parse(&self, mut response: ChatResponse) -> ChatResponse {
        response.constrained = true;
        if !response.tool_calls.is_empty() {
            return response;
        }
        let Some(text) = response.content.as_deref() else {
            return response;
        };
        let Ok(Value::Object(mut call)) = serde_json::from_str::<Value>(text.trim()) else {
            return response;
        };
        let name = match call.get("name").and_then(Value::as_str) {
            Some(name) if self.names.iter().any(|n| n == name) => name.to_owned(),
            _ => return response,
        };
        let arguments = match call.remove("arguments") {
            Some(Value::String(text)) => text,
            Some(value) => value.to_string(),
            None => "{}".to_owned(),
        };
        response.content = None;
        response.tool_calls = vec![ToolCall {
            id: generate_call_id(),
            name,
            arguments,
        }];
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> ToolDefinitions {
        ToolDefinitions::new(vec![
            crate::wire_tools::test_def(
                json!({"type": "function", "function": {"name": "write_file", "description": "Write a file.", "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]}}}),
            ),
            crate::wire_tools::test_def(
                json!({"type": "function", "function": {"name": "finish_task", "description": "Finish.", "parameters": {"type": "object", "properties": {"summary": {"type": "string"}}}}}),
            ),
        ])
    }

    #[test]
    fn issue_24_the_schema_is_any_of_the_call_shapes() {
        let c = Constrained::new(&tools()).unwrap();
        let shapes = c.schema["anyOf"].as_array().unwrap();
        assert_eq!(shapes.len(), 2);
        assert_eq!(shapes[0]["properties"]["name"]["const"], "write_file");
        assert_eq!(
            shapes[0]["properties"]["arguments"]["required"],
            json!(["path", "content"])
        );
        assert!(Constrained::new(&ToolDefinitions::none()).is_none());
    }

    #[test]
    fn issue_24_the_conversation_is_written_for_a_plain_template() {
        let c = Constrained::new(&tools()).unwrap();
        let call = ToolCall {
            id: "c1".into(),
            name: "write_file".into(),
            arguments: r#"{"path":"a","content":"b"}"#.into(),
        };
        let messages = vec![
            Message::system("You build."),
            Message::user("write a"),
            Message::assistant(None, vec![call]),
            Message::tool_result("c1", r#"{"bytes":1}"#),
        ];
        let out = c.messages(&messages);
        assert_eq!(out.len(), 4);
        let system = out[0].content.as_deref().unwrap();
        assert!(system.starts_with("You build.\n\nYou work by calling tools."));
        assert!(system.contains("- write_file: Write a file."));
        assert_eq!(
            out[2].content.as_deref(),
            Some(r#"{"arguments":{"content":"b","path":"a"},"name":"write_file"}"#)
        );
        assert!(out[2].tool_calls.is_empty());
        assert_eq!(out[3].role, Role::User);
        assert_eq!(
            out[3].content.as_deref(),
            Some("Result of write_file:\n{\"bytes\":1}")
        );
    }

    #[test]
    fn issue_24_an_answer_becomes_a_call_only_when_it_is_one() {
        let c = Constrained::new(&tools()).unwrap();
        let answer = |text: &str| ChatResponse {
            content: Some(text.into()),
            ..ChatResponse::default()
        };
        let r = c.parse(answer(
            r#" {"name": "write_file", "arguments": {"path": "hello.txt", "content": "Hi"}} "#,
        ));
        assert_eq!(r.content, None);
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].name, "write_file");
        assert_eq!(
            r.tool_calls[0].arguments,
            r#"{"content":"Hi","path":"hello.txt"}"#
        );
        for text in [
            "Sure, here it is.",
            r#"{"name": "rm", "arguments": {}}"#,
            r#"{"name": "write_file""#,
        ] {
            let r = c.parse(answer(text));
            assert!(r.tool_calls.is_empty(), "{text}");
            assert_eq!(r.content.as_deref(), Some(text));
        }
    }
}
