use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::DomainError;

/// What a tool does to the world, so planners and policies can reason about it without
/// running it. The names follow MCP's tool annotations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolAnnotations {
    /// The tool only reads.
    pub read_only: bool,
    /// The tool may destroy or overwrite data.
    pub destructive: bool,
    /// The tool needs the network; it is offered only to runs that allow it.
    pub needs_network: bool,
}

/// The one contract of a tool, from which every adapter's definition is generated.
///
/// A tool is defined once: its name, what it does, the JSON Schema of its input, examples of
/// valid input, and its annotations. The OpenAI function definition comes from
/// [`ToolSpec::openai_definition`]; the MCP definition will come from the same value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Unique name, as the model calls it.
    pub name: String,
    /// What the tool does and when to use it.
    pub description: String,
    /// JSON Schema of the input object.
    pub input_schema: Value,
    /// Valid inputs, shown to the model and checked against the schema by tests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<Value>,
    /// What the tool does to the world.
    #[serde(default)]
    pub annotations: ToolAnnotations,
}

impl ToolSpec {
    /// A contract whose input schema is derived from the Rust type the handler deserialises,
    /// so the two cannot drift apart.
    pub fn for_input<T: JsonSchema>(name: &str, description: &str) -> Self {
        Self {
            name: name.to_owned(),
            description: description.to_owned(),
            input_schema: input_schema_for::<T>(),
            examples: Vec::new(),
            annotations: ToolAnnotations::default(),
        }
    }

    /// A contract with a hand-written schema (finish schemas from config, MCP tools).
    ///
    /// The schema must describe an object, because tool arguments are always objects.
    pub fn with_schema(name: &str, description: &str, schema: Value) -> Result<Self, DomainError> {
        let is_object = schema.get("type").and_then(Value::as_str) == Some("object");
        if !is_object {
            return Err(DomainError::InvalidToolSchema {
                tool: name.to_owned(),
                reason: "the input schema must have `\"type\": \"object\"`".to_owned(),
            });
        }
        Ok(Self {
            name: name.to_owned(),
            description: description.to_owned(),
            input_schema: schema,
            examples: Vec::new(),
            annotations: ToolAnnotations::default(),
        })
    }

    /// Adds an example input.
    #[must_use]
    pub fn example(mut self, example: Value) -> Self {
        self.examples.push(example);
        self
    }

    /// Sets the annotations.
    #[must_use]
    pub fn annotate(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = annotations;
        self
    }

    /// The OpenAI Chat Completions function definition generated from this contract.
    ///
    /// Examples are appended to the description: small local models follow a concrete
    /// example far better than a schema alone.
    pub fn openai_definition(&self) -> Value {
        let mut description = self.description.clone();
        for example in &self.examples {
            description.push_str("\nExample arguments: ");
            description.push_str(&example.to_string());
        }
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": description,
                "parameters": self.input_schema,
            }
        })
    }
}

/// The JSON Schema of a Rust type, inlined (no `$ref`), without the keys models do not need.
///
/// Inlining matters: several OpenAI-compatible servers and most small models mishandle
/// `$ref`, and our own validator then needs no reference resolution.
pub fn input_schema_for<T: JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft07()
        .with(|settings| settings.inline_subschemas = true)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(map) = &mut schema {
        map.remove("$schema");
        map.remove("title");
        // An object without declared extra properties gets them refused explicitly, so a
        // misspelled parameter is reported instead of silently ignored.
        map.entry("additionalProperties")
            .or_insert(Value::Bool(false));
    }
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(JsonSchema)]
    #[allow(dead_code)]
    struct ReadInput {
        /// Path inside the workspace.
        path: String,
        limit: Option<u32>,
    }

    #[test]
    fn derived_schema_is_inline_object_with_required_fields() {
        let spec = ToolSpec::for_input::<ReadInput>("read_file", "Read a file.");
        let schema = &spec.input_schema;
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["path"]));
        assert_eq!(schema["properties"]["path"]["type"], "string");
        assert_eq!(schema["additionalProperties"], false);
        assert!(schema.get("$schema").is_none());
    }

    #[test]
    fn openai_definition_carries_name_schema_and_examples() {
        let spec = ToolSpec::for_input::<ReadInput>("read_file", "Read a file.")
            .example(json!({"path": "a.txt"}));
        let def = spec.openai_definition();
        assert_eq!(def["type"], "function");
        assert_eq!(def["function"]["name"], "read_file");
        assert_eq!(def["function"]["parameters"], spec.input_schema);
        let description = def["function"]["description"].as_str().unwrap_or_default();
        assert!(description.contains(r#"{"path":"a.txt"}"#), "{description}");
    }

    #[test]
    fn hand_written_schema_must_be_an_object() {
        let err = ToolSpec::with_schema("x", "d", json!({"type": "string"}));
        assert!(matches!(err, Err(DomainError::InvalidToolSchema { .. })));
    }
}
