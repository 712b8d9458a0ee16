//! The tool calls of a step: parsing arguments, the catalogue of callable tools, checking
//! a call against its contract and running it, and the messages the model gets back.

use fabric_domain::{FINISH_TOOL, ToolCall, schema};
use serde_json::{Map, Value, json};
use std::sync::Arc;

use crate::ports::{
    Tool, ToolContext, ToolDef, ToolDefinitions, ToolError, ToolOutput, ToolSource, Withheld,
};
use crate::recorder::truncate;

/// The outcome of dispatching one tool call.
pub(super) enum Dispatch {
    /// A tool returned a result, and perhaps images besides.
    Done(ToolOutput),
    /// `finish_task` was accepted with this payload.
    Finished(Value),
}

/// How deep a call's arguments may nest (see [`parse_arguments`]).
const MAX_DEPTH: usize = 32;

/// Why a call's argument text is not arguments. The words go to the model inside the tool
/// error `dispatch` writes, so they stay exactly as they were.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum ArgumentsError {
    /// Not JSON, in the parser's words.
    #[error("{0}")]
    NotJson(String),
    /// Nested deeper than [`MAX_DEPTH`].
    #[error(
        "they nest arrays and objects more than {MAX_DEPTH} levels deep; send flatter arguments"
    )]
    TooDeep,
}

/// Parses the raw argument text. An empty string means no arguments, as several servers send
/// it for tools without parameters. Arguments nested deeper than `MAX_DEPTH` levels are
/// refused: the runlog wraps them in more levels, and serde's limit of 128 would then make
/// the runlog unreadable.
pub(super) fn parse_arguments(raw: &str) -> Result<Value, ArgumentsError> {
    fn depth(v: &Value) -> usize {
        match v {
            Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
            Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }
    if raw.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let value: Value =
        serde_json::from_str(raw).map_err(|e| ArgumentsError::NotJson(e.to_string()))?;
    if depth(&value) > MAX_DEPTH {
        return Err(ArgumentsError::TooDeep);
    }
    Ok(value)
}

/// What the model may call at one step: built from the tool source, rebuilt when its
/// version changes.
pub(super) struct Catalogue<'a> {
    pub(super) version: u64,
    pub(super) tools: Vec<Arc<dyn Tool>>,
    pub(super) available: Vec<String>,
    pub(super) withheld: Vec<Withheld>,
    /// Typed once per tool set (`ToolDefinitions`, shared and encoded once per set by the
    /// adapter): sent with every request.
    pub(super) definitions: ToolDefinitions,
    pub(super) finish_schema: &'a Value,
}

impl<'a> Catalogue<'a> {
    pub(super) fn build(
        source: &dyn ToolSource,
        finish_definition: ToolDef,
        finish_schema: &'a Value,
    ) -> Self {
        // The version is read first: a change racing this read only causes one more rebuild.
        let version = source.version();
        let tools = source.tools();
        let mut definitions: Vec<ToolDef> = tools.iter().map(|t| t.spec().tool_def()).collect();
        definitions.push(finish_definition);
        let mut available: Vec<String> = tools.iter().map(|t| t.spec().name.clone()).collect();
        available.push(FINISH_TOOL.to_owned());
        Self {
            version,
            tools,
            available,
            withheld: source.withheld(),
            definitions: ToolDefinitions::new(definitions),
            finish_schema,
        }
    }

    /// The tool a call names: by its name, or by an old name (alias) it still answers to.
    pub(super) fn tool(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools
            .iter()
            .find(|t| t.spec().name == name)
            .or_else(|| self.tools.iter().find(|t| t.spec().answers_to(name)))
    }
}

pub(super) async fn dispatch(
    call: &ToolCall,
    args: Result<Value, ArgumentsError>,
    catalogue: &Catalogue<'_>,
    attempted_work: bool,
    ctx: &ToolContext,
) -> Result<Dispatch, ToolError> {
    let available = &catalogue.available;
    let schema_of = |name: &str| -> Option<&Value> {
        if name == FINISH_TOOL {
            Some(catalogue.finish_schema)
        } else {
            catalogue.tool(name).map(|t| &t.spec().input_schema)
        }
    };
    let Some(input_schema) = schema_of(&call.name) else {
        let why = catalogue
            .withheld
            .iter()
            .find(|(name, _)| *name == call.name)
            .map(|(_, why)| *why);
        return Err(ToolError::InvalidArguments(match why {
            Some(why) => format!(
                "tool `{}` is not available in this run: {why}; the available tools are: {}",
                call.name,
                available.join(", ")
            ),
            None => format!(
                "unknown tool `{}`; the available tools are: {}",
                call.name,
                available.join(", ")
            ),
        }));
    };
    let args = args.map_err(|parse_error| {
        ToolError::InvalidArguments(format!(
            "the arguments of `{}` are not valid JSON ({parse_error}): {}; send one JSON object, for example {}",
            call.name,
            truncate(&call.arguments, 200),
            skeleton(input_schema)
        ))
    })?;
    schema::validate(input_schema, &args).map_err(|violations| {
        ToolError::InvalidArguments(format!(
            "invalid arguments for `{}`: {violations}",
            call.name
        ))
    })?;

    if call.name == FINISH_TOOL {
        if !attempted_work {
            let others: Vec<&str> = available
                .iter()
                .map(String::as_str)
                .filter(|n| *n != FINISH_TOOL)
                .collect();
            return Err(ToolError::InvalidArguments(format!(
                "finish_task refused: no other tool has been used yet. Do the task with the tools ({}) first, check the result, then call finish_task",
                others.join(", ")
            )));
        }
        return Ok(Dispatch::Finished(args));
    }
    match catalogue.tool(&call.name) {
        Some(tool) => tool.call_for_model(args, ctx).await.map(Dispatch::Done),
        // schema_of found it above, so it is here; answer like an unknown tool regardless.
        None => Err(ToolError::InvalidArguments(format!(
            "unknown tool `{}`",
            call.name
        ))),
    }
}

/// A tool result as the model reads it: strings as they are, anything else as JSON.
pub(super) fn render_result(result: &Value) -> String {
    match result {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// An example object with the required fields of a schema, to show a model the shape.
pub(super) fn skeleton(schema: &Value) -> String {
    let mut out = Map::new();
    let properties = schema.get("properties").and_then(Value::as_object);
    let required = schema.get("required").and_then(Value::as_array);
    for key in required.into_iter().flatten().filter_map(Value::as_str) {
        let kind = properties
            .and_then(|p| p.get(key))
            .and_then(|p| p.get("type"))
            .and_then(|t| {
                t.as_str()
                    .or_else(|| t.as_array().and_then(|a| a.first()).and_then(Value::as_str))
            })
            .unwrap_or("string");
        let placeholder = match kind {
            "array" => json!([]),
            "object" => json!({}),
            "integer" | "number" => json!(0),
            "boolean" => json!(false),
            _ => json!("..."),
        };
        out.insert(key.to_owned(), placeholder);
    }
    Value::Object(out).to_string()
}

pub(super) fn corrective_message(available: &[String], finish_schema: &Value) -> String {
    format!(
        "You answered in plain text, but this task is done only through tool calls. Use the tools ({}) to do the work, then call finish_task with arguments like {}. If the work is already done, call finish_task now.",
        available.join(", "),
        skeleton(finish_schema)
    )
}

/// The payload of a run whose model never called `finish_task` (seed ADR-003 fallback): the
/// text goes into the first required string field of the finish schema.
pub(super) fn fallback_payload(finish_schema: &Value, text: &str) -> Value {
    let field = finish_schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find(|key| finish_schema["properties"][*key]["type"].as_str() == Some("string"))
        .unwrap_or("summary");
    let mut payload = Map::new();
    payload.insert(field.to_owned(), Value::String(text.to_owned()));
    // The note never replaces the model's text, should the text field itself be `notes`.
    payload.entry("notes").or_insert_with(|| {
        Value::String("The model ended without calling finish_task; this payload was built from its last reply.".to_owned())
    });
    Value::Object(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skeleton_shows_required_fields() {
        let s = json!({"type": "object", "properties": {"summary": {"type": "string"}, "artifacts": {"type": "array"}}, "required": ["summary"]});
        assert_eq!(skeleton(&s), r#"{"summary":"..."}"#);
    }

    #[test]
    fn fallback_uses_first_required_string_field() {
        let s = json!({"type": "object", "properties": {"executive_summary": {"type": "string"}}, "required": ["executive_summary"]});
        let p = fallback_payload(&s, "hello");
        assert_eq!(p["executive_summary"], "hello");
    }

    #[test]
    fn empty_arguments_are_an_empty_object() {
        assert_eq!(parse_arguments("  "), Ok(json!({})));
        assert!(parse_arguments("{bad").is_err());
    }

    #[test]
    fn deeply_nested_arguments_are_refused() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse_arguments(&format!(r#"{{"a":{}}}"#, nested(31))).is_ok());
        let refused = parse_arguments(&format!(r#"{{"a":{}}}"#, nested(32)));
        assert_eq!(refused, Err(ArgumentsError::TooDeep));
        assert_eq!(
            refused.map_err(|e| e.to_string()),
            Err(
                "they nest arrays and objects more than 32 levels deep; send flatter arguments"
                    .to_owned()
            )
        );
    }
}
