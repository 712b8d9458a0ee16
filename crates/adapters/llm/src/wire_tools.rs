//! The chat port's typed tool definitions in each server's wire form (issue #41): encoded
//! once per definitions set and kept with it (`ToolDefinitions::encoded`), so a step sends
//! the text made when the set was first offered, and the runs that share a set share it.

use std::marker::PhantomData;
use std::sync::Arc;

use fabric_engine::{ToolDef, ToolDefinitions};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// One server's way of writing a tool.
pub(crate) trait Form: Send + Sync + 'static {
    /// `def` as the server reads it.
    fn encode(def: &ToolDef) -> Value;
}

/// Chat Completions' (and Ollama's `/api/chat`'s) function tools:
/// `{"type": "function", "function": {"name", "description", "parameters"}}`.
pub(crate) struct Functions;

impl Form for Functions {
    fn encode(def: &ToolDef) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": def.name,
                "description": def.description,
                "parameters": def.parameters,
            }
        })
    }
}

/// A set's tools in form `F`, as the JSON array the request body embeds.
pub(crate) struct WireTools<F> {
    json: Box<RawValue>,
    form: PhantomData<F>,
}

impl<F> std::fmt::Debug for WireTools<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.json.get())
    }
}

impl<F> Serialize for WireTools<F> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(serializer)
    }
}

/// `tools` in form `F`, encoded the first time the set is sent in it; `None` without tools
/// (the request then has no `tools` key).
pub(crate) fn encoded<F: Form>(tools: &ToolDefinitions) -> Option<Arc<WireTools<F>>> {
    (!tools.is_empty()).then(|| tools.encoded(encode::<F>))
}

fn encode<F: Form>(defs: &[ToolDef]) -> WireTools<F> {
    let values: Vec<Value> = defs.iter().map(F::encode).collect();
    // Serialising a `Value` cannot fail (its keys are strings), and the text of a serialised
    // `Value` is valid JSON; the fallback keeps the code free of panics regardless.
    let json = serde_json::to_string(&values)
        .ok()
        .and_then(|text| RawValue::from_string(text).ok())
        .unwrap_or_default();
    WireTools {
        json,
        form: PhantomData,
    }
}

/// A test's OpenAI-shaped definition as the port's typed one.
#[cfg(test)]
pub(crate) fn test_def(v: Value) -> ToolDef {
    let f = &v["function"];
    ToolDef {
        name: f["name"].as_str().unwrap_or_default().to_owned(),
        description: f["description"].as_str().unwrap_or_default().to_owned(),
        parameters: f
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"})),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Issue #41: the typed definitions go on the wire as the OpenAI JSON the port carried
    /// before (`ToolSpec::openai_definition`, serialised), byte for byte.
    #[test]
    fn issue_41_function_tools_are_the_json_the_port_carried_before() {
        let schema = json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
            "properties": {"path": {"type": "string", "description": "a \"quoted\" path"}}});
        let specs = [
            fabric_domain::ToolSpec::with_schema("read_file", "Reads a file.", schema)
                .unwrap()
                .example(json!({"path": "a.txt"}))
                .plan(&[], &["write_file"]),
            fabric_domain::ToolSpec::with_schema("finish_task", "Done.", json!({"type": "object"}))
                .unwrap(),
        ];
        let defs = ToolDefinitions::new(specs.iter().map(|s| s.tool_def()).collect());
        let before = r##"[{"function":{"description":"Reads a file.\nExample arguments: {\"path\":\"a.txt\"}\nUsually followed by: write_file","name":"read_file","parameters":{"properties":{"path":{"description":"a \"quoted\" path","type":"string"}},"type":"object"}},"type":"function"},{"function":{"description":"Done.","name":"finish_task","parameters":{"type":"object"}},"type":"function"}]"##;
        let wire = encoded::<Functions>(&defs).unwrap();
        assert_eq!(serde_json::to_string(&*wire).unwrap(), before);
        assert_eq!(defs.byte_len(), before.len());
        assert!(Arc::ptr_eq(&wire, &encoded::<Functions>(&defs).unwrap()));
        assert!(encoded::<Functions>(&ToolDefinitions::none()).is_none());
    }
}
