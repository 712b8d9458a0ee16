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

/// Planner metadata: how a tool fits into a workflow (seed 004's capability graph). Shown to
/// the model in the tool's description and by the `search_tools` meta-tool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannerHints {
    /// Tools usually called before this one (e.g. `list_files` before `read_file`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prerequisites: Vec<String>,
    /// Tools usually called after this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub next_tools: Vec<String>,
}

impl PlannerHints {
    fn is_empty(&self) -> bool {
        self.prerequisites.is_empty() && self.next_tools.is_empty()
    }
}

/// The one contract of a tool, from which every adapter's definition is generated.
///
/// A tool is defined once: its name, what it does, the JSON Schema of its input, examples of
/// valid input, its annotations, old names it still answers to, and planner hints. The OpenAI
/// function definition ([`ToolSpec::openai_definition`]) and the MCP tool definition
/// ([`ToolSpec::mcp_definition`]) are both generated from this one value.
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
    /// Old names that still reach this tool: a call by an alias runs this tool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    /// Where the tool fits in a workflow.
    #[serde(default, skip_serializing_if = "PlannerHints::is_empty")]
    pub planner: PlannerHints,
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
            aliases: Vec::new(),
            planner: PlannerHints::default(),
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
            aliases: Vec::new(),
            planner: PlannerHints::default(),
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

    /// Adds an old name that still reaches this tool.
    #[must_use]
    pub fn alias(mut self, old_name: &str) -> Self {
        self.aliases.push(old_name.to_owned());
        self
    }

    /// Sets the planner hints.
    #[must_use]
    pub fn plan(mut self, prerequisites: &[&str], next_tools: &[&str]) -> Self {
        self.planner = PlannerHints {
            prerequisites: prerequisites.iter().map(|s| (*s).to_owned()).collect(),
            next_tools: next_tools.iter().map(|s| (*s).to_owned()).collect(),
        };
        self
    }

    /// The description as every adapter shows it to a model: the contract's description,
    /// then examples (small local models follow a concrete example far better than a
    /// schema alone), planner hints and old names.
    pub fn model_description(&self) -> String {
        let mut description = self.description.clone();
        for example in &self.examples {
            description.push_str("\nExample arguments: ");
            description.push_str(&example.to_string());
        }
        if !self.planner.prerequisites.is_empty() {
            description.push_str("\nUsually after: ");
            description.push_str(&self.planner.prerequisites.join(", "));
        }
        if !self.planner.next_tools.is_empty() {
            description.push_str("\nUsually followed by: ");
            description.push_str(&self.planner.next_tools.join(", "));
        }
        if !self.aliases.is_empty() {
            description.push_str("\nFormerly called: ");
            description.push_str(&self.aliases.join(", "));
        }
        description
    }

    /// The OpenAI Chat Completions function definition generated from this contract.
    pub fn openai_definition(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.model_description(),
                "parameters": self.input_schema,
            }
        })
    }

    /// The MCP `tools/list` entry generated from this contract: the same name, description
    /// and schema as [`ToolSpec::openai_definition`], and the annotations as MCP's hints.
    pub fn mcp_definition(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.model_description(),
            "inputSchema": self.input_schema,
            "annotations": {
                "readOnlyHint": self.annotations.read_only,
                "destructiveHint": self.annotations.destructive,
                "openWorldHint": self.annotations.needs_network,
            },
        })
    }

    /// Whether `name` reaches this tool: its name or one of its aliases.
    pub fn answers_to(&self, name: &str) -> bool {
        self.name == name || self.aliases.iter().any(|a| a == name)
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
    fn mcp_and_openai_definitions_come_from_one_contract() {
        let spec = ToolSpec::for_input::<ReadInput>("read_file", "Read a file.")
            .example(json!({"path": "a.txt"}))
            .alias("cat")
            .plan(&["list_files"], &["write_file"]);
        let openai = spec.openai_definition();
        let mcp = spec.mcp_definition();
        assert_eq!(mcp["name"], openai["function"]["name"]);
        assert_eq!(mcp["description"], openai["function"]["description"]);
        assert_eq!(mcp["inputSchema"], openai["function"]["parameters"]);
        let d = mcp["description"].as_str().unwrap_or_default();
        assert!(
            d.contains("Usually after: list_files") && d.contains("Formerly called: cat"),
            "{d}"
        );
        assert!(spec.answers_to("cat") && spec.answers_to("read_file") && !spec.answers_to("x"));
    }

    #[test]
    fn hand_written_schema_must_be_an_object() {
        let err = ToolSpec::with_schema("x", "d", json!({"type": "string"}));
        assert!(matches!(err, Err(DomainError::InvalidToolSchema { .. })));
    }
}
