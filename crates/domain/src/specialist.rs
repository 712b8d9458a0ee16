use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{DomainError, ToolSpec};

/// The JSON Schema types a finish schema may give its fields.
const SCHEMA_TYPES: &[&str] = &[
    "string", "number", "integer", "boolean", "array", "object", "null",
];

/// The name of the terminal tool every specialist has (seed ADR-003).
pub const FINISH_TOOL: &str = "finish_task";

/// The name of the tool that asks the person who started the run (issue #42); a specialist
/// has it when its `tools` name it.
pub const ASK_TOOL: &str = "ask_user";

/// A specialist agent, as data: what it is for, how it is prompted, which tools it may use
/// and the shape of its final answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecialistSpec {
    /// Unique id, used by `--pack`.
    pub id: String,
    /// One line on what it does.
    pub description: String,
    /// Words in a prompt that suggest this specialist.
    #[serde(default)]
    pub keywords: Vec<String>,
    /// Capabilities it covers, for recruitment.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// The system prompt.
    pub system_prompt: String,
    /// Names of the tools it may use (besides `finish_task`, which every specialist has).
    pub tools: Vec<String>,
    /// JSON Schema of the `finish_task` arguments: its final answer.
    pub finish_schema: Value,
    /// The model key it runs on, unless the run names one.
    #[serde(default)]
    pub model_key: Option<String>,
    /// Whether it may write files; without this it gets no write tools at all.
    #[serde(default = "yes")]
    pub may_write: bool,
    /// Whether it needs the network to do its job.
    #[serde(default)]
    pub needs_network: bool,
    /// What it cannot do yet, in words, so `fabric specialists show` is honest about it
    /// (e.g. a capability that waits for a later feature).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limitations: Vec<String>,
    /// A container image its `shell` tool runs in, through Podman, instead of on the host
    /// (docs/SECURITY.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_image: Option<String>,
    /// MCP servers, lazy tool loading and delegation (all off by default).
    #[serde(default)]
    pub tooling: crate::Tooling,
    /// What the loop does for a model that repeats itself or never finishes
    /// (docs/LOCAL_MODELS.md).
    #[serde(default)]
    pub loop_aids: LoopAids,
    /// Which of its calls wait for a person's approval (issue #42; `never` by default).
    #[serde(default, skip_serializing_if = "crate::approval::is_default")]
    pub approval: crate::ApprovalPolicy,
    /// Whether a project run gives it the repository's `AGENTS.md` instructions in its
    /// system prompt (issue #43; on by default).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub project_instructions: bool,
}

fn is_true(b: &bool) -> bool {
    *b
}

fn yes() -> bool {
    true
}

/// Calls in a row with the same arguments and the same result after which the model is told
/// it repeats itself.
pub const DEFAULT_REPEAT_LIMIT: u32 = 3;

/// The loop's help for small models, switchable per specialist (issue #24).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopAids {
    /// A call repeated with the same arguments and the same result this many times in a row
    /// gets a nudge naming the repetition; a further repeat is refused without running, and
    /// the run ends `stalled` when the model still repeats (`repeat_limit`; 0: off).
    #[serde(default = "default_repeat_limit")]
    pub repeat_limit: u32,
    /// Plain-text answers never end the run `completed_without_finish`: the model is asked
    /// to call `finish_task` until it does or `max_steps` runs out (`require_finish`).
    #[serde(default)]
    pub require_finish: bool,
}

fn default_repeat_limit() -> u32 {
    DEFAULT_REPEAT_LIMIT
}

impl Default for LoopAids {
    fn default() -> Self {
        Self {
            repeat_limit: DEFAULT_REPEAT_LIMIT,
            require_finish: false,
        }
    }
}

impl SpecialistSpec {
    /// The `finish_task` contract generated from the finish schema.
    pub fn finish_tool(&self) -> Result<ToolSpec, DomainError> {
        ToolSpec::with_schema(
            FINISH_TOOL,
            "Call this exactly once, when the task is done, with your final answer. \
             Only call it after you have used the other tools to do and verify the work.",
            self.finish_schema.clone(),
        )
        .map_err(|e| DomainError::InvalidSpecialist {
            id: self.id.clone(),
            reason: format!("finish_schema: {e}"),
        })
    }
}

/// Whether a tool name is a pattern (it holds `*`) rather than the name of one tool.
pub fn is_tool_pattern(name: &str) -> bool {
    name.contains('*')
}

/// Checks a tool pattern: it must have the shape `mcp__<server>__<tool>`, where `<tool>`
/// holds at least one `*` (e.g. `mcp__github__*`, `mcp__github__get_*`). Patterns name MCP
/// tools, which are resolved when the MCP servers are connected, so only the shape is checked
/// here. The error says what is wrong and shows the expected shape.
pub fn check_tool_pattern(pattern: &str) -> Result<(), crate::DomainError> {
    let wrong = |problem: String| crate::DomainError::InvalidToolPattern {
        pattern: pattern.to_owned(),
        problem,
    };
    let Some(rest) = pattern.strip_prefix("mcp__") else {
        return Err(wrong(" does not start with `mcp__`".to_owned()));
    };
    let Some((server, tool)) = rest.split_once("__") else {
        return Err(wrong(" has no `__` after the server name".to_owned()));
    };
    let word = |s: &str, star: bool| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || (star && c == '*'))
    };
    if !word(server, false) {
        return Err(wrong(format!(
            ": the server name `{server}` must be non-empty letters, digits, `_` or `-` (no `*`)"
        )));
    }
    if !word(tool, true) || !tool.contains('*') {
        return Err(wrong(format!(
            ": the tool part `{tool}` must hold `*` and otherwise letters, digits, `_` or `-`"
        )));
    }
    Ok(())
}

/// Checks that a finish schema is one a model can fill and `finish_task` can check: an
/// object schema whose `properties` each name a JSON Schema type, and whose `required`
/// names only declared properties. Returns what is wrong, naming the field.
pub fn check_finish_schema(schema: &Value) -> Result<(), crate::DomainError> {
    let Some(map) = schema.as_object() else {
        return Err(bad(
            "must be a JSON Schema object such as {type: object, properties: {...}}".to_owned(),
        ));
    };
    if map.get("type").and_then(Value::as_str) != Some("object") {
        return Err(bad(
            "must have `type: object` (finish_task takes an object)".to_owned(),
        ));
    }
    let empty = serde_json::Map::new();
    let properties = match map.get("properties") {
        None => &empty,
        Some(Value::Object(p)) => p,
        Some(_) => {
            return Err(bad(
                "`properties` must be a map of field name to schema".to_owned()
            ));
        }
    };
    for (name, field) in properties {
        check_field(&format!("properties.{name}"), field)?;
    }
    match map.get("required") {
        None => {}
        Some(Value::Array(required)) => {
            for (i, r) in required.iter().enumerate() {
                let Some(r) = r.as_str() else {
                    return Err(bad(format!(
                        "`required[{i}]` must be a field name, got {r}"
                    )));
                };
                if !properties.contains_key(r) {
                    return Err(bad(format!(
                        "`required` names `{r}`, which is not in `properties`; declare it or remove it"
                    )));
                }
            }
        }
        Some(_) => return Err(bad("`required` must be a list of field names".to_owned())),
    }
    Ok(())
}

/// A finish schema's problem, naming the field, as the error it is.
fn bad(reason: String) -> crate::DomainError {
    crate::DomainError::InvalidFinishSchema { reason }
}

fn check_field(at: &str, field: &Value) -> Result<(), crate::DomainError> {
    let Some(map) = field.as_object() else {
        return Err(bad(format!(
            "`{at}` must be a schema such as {{type: string}}, got {field}"
        )));
    };
    let known = |t: &Value| t.as_str().is_some_and(|t| SCHEMA_TYPES.contains(&t));
    match map.get("type") {
        // Without `type` (e.g. `anyOf`), the field is accepted: the validator checks what it can.
        None => {}
        Some(Value::Array(types)) if types.iter().all(known) => {}
        Some(t) if known(t) => {}
        Some(t) => {
            return Err(bad(format!(
                "`{at}.type` is {t}; use one of {}",
                SCHEMA_TYPES.join(", ")
            )));
        }
    }
    if let Some(items) = map.get("items") {
        check_field(&format!("{at}.items"), items)?;
    }
    if let Some(Value::Object(props)) = map.get("properties") {
        for (name, sub) in props {
            check_field(&format!("{at}.properties.{name}"), sub)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn patterns_need_the_mcp_shape_and_a_star() {
        assert!(check_tool_pattern("mcp__github__*").is_ok());
        assert!(check_tool_pattern("mcp__git-hub__get_*").is_ok());
        for bad in [
            "github__*",
            "mcp__*",
            "mcp____*",
            "mcp__github__create",
            "mcp__gi*t__x*",
            "mcp__g__a b*",
        ] {
            assert!(check_tool_pattern(bad).is_err(), "{bad}");
        }
        assert!(is_tool_pattern("mcp__x__*") && !is_tool_pattern("read_file"));
    }

    #[test]
    fn finish_schemas_are_checked_field_by_field() {
        let good = json!({"type": "object", "properties": {
            "summary": {"type": "string"},
            "citations": {"type": "array", "items": {"type": "object", "properties": {"url": {"type": "string"}}}}
        }, "required": ["summary"]});
        assert!(check_finish_schema(&good).is_ok());
        let e = check_finish_schema(&json!({"type": "array"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("type: object"), "{e}");
        let e =
            check_finish_schema(&json!({"type": "object", "properties": {"a": {"type": "text"}}}))
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("`properties.a.type`") && e.contains("string"),
            "{e}"
        );
        let e = check_finish_schema(
            &json!({"type": "object", "properties": {}, "required": ["summary"]}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("`summary`"), "{e}");
        let e = check_finish_schema(&json!({"type": "object", "properties": {"l": {"type": "array", "items": {"type": "url"}}}})).unwrap_err().to_string();
        assert!(e.contains("properties.l.items.type"), "{e}");
    }
}
