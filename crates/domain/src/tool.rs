use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::DomainError;

/// The names of the built-in tools, defined once: the tools adapter names its tools with
/// them and the config checks and lists specialists' tools with them.
pub mod builtin {
    /// Runs a command in the workspace.
    pub const SHELL: &str = "shell";
    /// Reads a file of the workspace.
    pub const READ_FILE: &str = "read_file";
    /// Creates or replaces a file of the workspace.
    pub const WRITE_FILE: &str = "write_file";
    /// Lists the workspace's files.
    pub const LIST_FILES: &str = "list_files";
    /// Searches the web.
    pub const WEB_SEARCH: &str = "web_search";
    /// Fetches a web page as text.
    pub const FETCH_URL: &str = "fetch_url";
    /// Every built-in tool, in the order the docs list them.
    pub const ALL: &[&str] = &[
        SHELL, READ_FILE, WRITE_FILE, LIST_FILES, WEB_SEARCH, FETCH_URL,
    ];
}

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

/// Planner metadata: how a tool fits into a workflow (seed 004's capability graph). The
/// prerequisites and next tools are shown to the model in the tool's description and by the
/// `search_tools` meta-tool; the workflows by the meta-tools and, when they fit the tool set,
/// in the system prompt (docs/TOOLS.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannerHints {
    /// Tools usually called before this one (e.g. `list_files` before `read_file`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prerequisites: Vec<String>,
    /// Tools usually called after this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub next_tools: Vec<String>,
    /// The canonical workflows this tool is a step of.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workflows: Vec<Workflow>,
}

impl PlannerHints {
    fn is_empty(&self) -> bool {
        self.prerequisites.is_empty() && self.next_tools.is_empty() && self.workflows.is_empty()
    }
}

/// A canonical workflow (seed 004): a short named sequence of tool calls and the one thing it
/// is for, e.g. `inspect-edit-verify`: `list_files/read_file → write_file → shell`.
///
/// A step names one tool or several that serve the same step (`list_files` or `read_file`
/// to inspect). A workflow is defined once, in a registry beside the contracts of its tools
/// (the built-in ones are in `fabric-tools`), and every contract it names carries a copy in
/// [`PlannerHints::workflows`], so whoever holds a tool's contract (the meta-tools, the
/// system prompt, the generated docs) sees its workflows without knowing the registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workflow {
    /// Short and unique, its steps' verbs joined by `-` (`search-fetch-cite`).
    pub name: String,
    /// What it is for, in one line.
    pub purpose: String,
    /// The steps in order, each one tool name or alternatives.
    pub steps: Vec<Vec<String>>,
}

impl Workflow {
    /// A workflow from its name, purpose and steps (each step one tool or alternatives).
    pub fn new(name: &str, purpose: &str, steps: &[&[&str]]) -> Self {
        Self {
            name: name.to_owned(),
            purpose: purpose.to_owned(),
            steps: steps
                .iter()
                .map(|step| step.iter().map(|t| (*t).to_owned()).collect())
                .collect(),
        }
    }

    /// Whether `tool` is one of its steps (or one of a step's alternatives).
    pub fn involves(&self, tool: &str) -> bool {
        self.steps.iter().flatten().any(|t| t == tool)
    }

    /// Whether every step can be taken: `has` accepts one of the step's tools. A step of
    /// `finish_task` can always be taken: every specialist has it.
    pub fn fits(&self, has: impl Fn(&str) -> bool) -> bool {
        self.steps
            .iter()
            .all(|step| step.iter().any(|t| t == crate::FINISH_TOOL || has(t)))
    }

    /// The steps as one line: `list_files/read_file → write_file → shell`.
    pub fn sequence(&self) -> String {
        self.steps
            .iter()
            .map(|step| step.join("/"))
            .collect::<Vec<_>>()
            .join(" → ")
    }

    /// The whole workflow as one line, as models see it:
    /// `inspect-edit-verify: list_files/read_file → write_file → shell (change files, ...)`.
    pub fn summary(&self) -> String {
        format!("{}: {} ({})", self.name, self.sequence(), self.purpose)
    }
}

/// The workflows of a tool set that fit it ([`Workflow::fits`]: every step has one of its
/// tools among `specs`, or is `finish_task`), each once, in the order the contracts list them.
pub fn fitting_workflows<'a>(specs: &[&'a ToolSpec]) -> Vec<&'a Workflow> {
    let has = |name: &str| specs.iter().any(|s| s.answers_to(name));
    let mut fitting: Vec<&Workflow> = Vec::new();
    for workflow in specs.iter().flat_map(|s| &s.planner.workflows) {
        if !fitting.iter().any(|w| w.name == workflow.name) && workflow.fits(has) {
            fitting.push(workflow);
        }
    }
    fitting
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
    /// The JSON Schema of the tool's structured answer, when it has a fixed shape; MCP
    /// publishes it as `outputSchema`, and clients check the answer against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
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
            output_schema: None,
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
            output_schema: None,
        })
    }

    /// Adds an example input.
    #[must_use]
    pub fn example(mut self, example: Value) -> Self {
        self.examples.push(example);
        self
    }

    /// Sets the JSON Schema of the tool's structured answer (MCP's `outputSchema`).
    #[must_use]
    pub fn output(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
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

    /// Sets the planner hints' prerequisites and next tools (its workflows stay).
    #[must_use]
    pub fn plan(mut self, prerequisites: &[&str], next_tools: &[&str]) -> Self {
        self.planner.prerequisites = prerequisites.iter().map(|s| (*s).to_owned()).collect();
        self.planner.next_tools = next_tools.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// Adds a workflow this tool is a step of.
    #[must_use]
    pub fn workflow(mut self, workflow: Workflow) -> Self {
        self.planner.workflows.push(workflow);
        self
    }

    /// The description as every adapter shows it to a model: the contract's description,
    /// then examples (small local models follow a concrete example far better than a
    /// schema alone), planner hints and old names.
    ///
    /// Workflows are left out: every tool definition goes with every request, and a
    /// workflow spans several tools, so it would be repeated in each of them. The system
    /// prompt and the meta-tools show each workflow once instead.
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

    /// The tool as a model is offered it: its name, [`ToolSpec::model_description`] and its
    /// input schema.
    pub fn tool_def(&self) -> ToolDef {
        let mut parameters = self.input_schema.clone();
        // Models need no meta-schema: an MCP server's `$schema` is kept in the contract (and
        // in `fabric mcp tools`) but left out of what models are sent, as it always was.
        if let Value::Object(map) = &mut parameters {
            map.remove("$schema");
        }
        ToolDef {
            name: self.name.clone(),
            description: self.model_description(),
            parameters,
        }
    }

    /// The MCP `tools/list` entry generated from this contract: the same name, description
    /// and schema as [`ToolSpec::tool_def`], and the annotations as MCP's hints.
    pub fn mcp_definition(&self) -> Value {
        let mut definition = json!({
            "name": self.name,
            "description": self.model_description(),
            "inputSchema": self.input_schema,
            "annotations": {
                "readOnlyHint": self.annotations.read_only,
                "destructiveHint": self.annotations.destructive,
                "openWorldHint": self.annotations.needs_network,
            },
        });
        if let Some(schema) = &self.output_schema {
            definition["outputSchema"] = schema.clone();
        }
        definition
    }

    /// Whether `name` reaches this tool: its name or one of its aliases.
    pub fn answers_to(&self, name: &str) -> bool {
        self.name == name || self.aliases.iter().any(|a| a == name)
    }
}

/// One tool as a model is offered it (issue #41): what the chat port carries, and every
/// model adapter encodes in its own wire form (OpenAI's `function`, Anthropic's
/// `input_schema`, the Responses API's flat function, a constrained-decoding prompt).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, as the model reads it.
    pub description: String,
    /// The JSON Schema of its arguments (the tool's own schema, not a wire shape).
    pub parameters: Value,
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
    fn issue_29_a_server_s_schema_keeps_its_dialect_but_models_are_not_sent_it() {
        let schema = json!({"$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object", "$defs": {"a": {"type": "string"}}});
        let spec =
            ToolSpec::with_schema("mcp__s__t", "T.", schema).unwrap_or_else(|e| panic!("{e}"));
        assert!(spec.input_schema.get("$schema").is_some());
        let sent = &spec.tool_def().parameters;
        assert!(sent.get("$schema").is_none(), "{sent}");
        assert_eq!(sent["$defs"]["a"]["type"], "string");
    }

    #[test]
    fn the_tool_def_carries_name_schema_and_examples() {
        let spec = ToolSpec::for_input::<ReadInput>("read_file", "Read a file.")
            .example(json!({"path": "a.txt"}));
        let def = spec.tool_def();
        assert_eq!(def.name, "read_file");
        assert_eq!(def.parameters, spec.input_schema);
        assert!(
            def.description.contains(r#"{"path":"a.txt"}"#),
            "{}",
            def.description
        );
    }

    #[test]
    fn mcp_and_model_definitions_come_from_one_contract() {
        let spec = ToolSpec::for_input::<ReadInput>("read_file", "Read a file.")
            .example(json!({"path": "a.txt"}))
            .alias("cat")
            .plan(&["list_files"], &["write_file"]);
        let def = spec.tool_def();
        let mcp = spec.mcp_definition();
        assert_eq!(mcp["name"], def.name);
        assert_eq!(mcp["description"], def.description);
        assert_eq!(mcp["inputSchema"], def.parameters);
        let d = mcp["description"].as_str().unwrap_or_default();
        assert!(
            d.contains("Usually after: list_files") && d.contains("Formerly called: cat"),
            "{d}"
        );
        assert!(spec.answers_to("cat") && spec.answers_to("read_file") && !spec.answers_to("x"));
    }

    fn edit() -> Workflow {
        Workflow::new(
            "inspect-edit-verify",
            "change files, then check the change",
            &[&["list_files", "read_file"], &["write_file"], &["shell"]],
        )
    }

    #[test]
    fn issue_26_a_workflow_reads_as_one_line() {
        let w = edit();
        assert_eq!(w.sequence(), "list_files/read_file → write_file → shell");
        assert_eq!(
            w.summary(),
            "inspect-edit-verify: list_files/read_file → write_file → shell (change files, then check the change)"
        );
        assert!(w.involves("read_file") && w.involves("shell") && !w.involves("fetch_url"));
    }

    #[test]
    fn issue_26_a_workflow_fits_a_tool_set_with_a_tool_for_every_step() {
        let spec = |name: &str| {
            ToolSpec::for_input::<ReadInput>(name, "d")
                .workflow(edit())
                .plan(&[], &["x"])
        };
        // `plan` after `workflow` keeps the workflow.
        assert_eq!(spec("shell").planner.workflows, vec![edit()]);
        let (read, write, shell) = (spec("read_file"), spec("write_file"), spec("shell"));
        let all = fitting_workflows(&[&read, &write, &shell]);
        assert_eq!(
            all,
            vec![&edit()],
            "once, although three contracts carry it"
        );
        assert!(
            fitting_workflows(&[&read, &write]).is_empty(),
            "no tool for the verify step"
        );
        let cite = Workflow::new(
            "search-fetch-cite",
            "p",
            &[&["read_file"], &["write_file", FINISH]],
        );
        assert!(
            cite.fits(|t| t == "read_file"),
            "finish_task is always there"
        );
        assert!(!cite.fits(|t| t == "write_file"));
    }

    const FINISH: &str = crate::FINISH_TOOL;

    #[test]
    fn issue_26_workflows_stay_out_of_the_description_sent_with_every_request() {
        let spec = ToolSpec::for_input::<ReadInput>("read_file", "Read a file.").workflow(edit());
        assert!(!spec.model_description().contains("inspect-edit-verify"));
        let json = serde_json::to_value(&spec).unwrap_or_default();
        assert_eq!(
            json["planner"]["workflows"][0]["name"],
            "inspect-edit-verify"
        );
        let back: ToolSpec = serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, spec);
    }

    #[test]
    fn hand_written_schema_must_be_an_object() {
        let err = ToolSpec::with_schema("x", "d", json!({"type": "string"}));
        assert!(matches!(err, Err(DomainError::InvalidToolSchema { .. })));
    }
}
