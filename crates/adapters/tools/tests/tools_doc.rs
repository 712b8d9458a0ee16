//! docs/TOOLS.md is generated from the tool contracts (seed 004: "documentation snippets ...
//! are generated from contracts"; issue #26), so the reference cannot drift from what models
//! are shown. This test renders it and fails when the file differs; with
//! `FABRIC_UPDATE_GOLDEN=1` (the repository's convention for generated files) it rewrites it:
//! `FABRIC_UPDATE_GOLDEN=1 cargo test -p fabric-tools --test tools_doc`.
//!
//! It lives here because this crate reaches every contract a specialist can be given: the
//! built-in tools and workflows of its own, and through `fabric-core` the tools the fabric
//! adds (`search_runs`, `agent__<id>`, the lazy meta-tools) and `finish_task`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use async_trait::async_trait;
use fabric_core::delegate::{AgentTool, ChildRunner};
use fabric_core::execute::{MAX_PROMPT_WORKFLOWS, RunOutcome, WORKFLOW_WINDOW_SHARE};
use fabric_core::lazy::LazyTools;
use fabric_core::typed::Typed;
use fabric_core::{StaticTools, Tool, ToolContext};
use fabric_domain::{FINISH_TOOL, SpecialistSpec, ToolSpec, Workflow};
use fabric_tools::{NoOsSandbox, ProcessSandbox, ToolPolicy, builtin_workflows, engineering_tools};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::sync::Arc;

const DOC: &str = "../../../docs/TOOLS.md";
const REGENERATE: &str = "FABRIC_UPDATE_GOLDEN=1 cargo test -p fabric-tools --test tools_doc";

/// A child runner for the `agent__<id>` contract only: the doc never runs it.
struct NoChildren;

#[async_trait]
impl ChildRunner for NoChildren {
    async fn run_child(
        &self,
        _specialist: &str,
        _task: String,
        _parent: &ToolContext,
    ) -> Result<RunOutcome, fabric_core::service::ServiceError> {
        Err(
            fabric_core::service::Fault::Setup(fabric_core::ports::SetupError::Internal(
                "the docs generator runs no child".to_owned(),
            ))
            .into(),
        )
    }
}

/// Markdown table cells hold one line, and `|` ends a cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

fn code_list(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn steps(workflow: &Workflow) -> String {
    workflow
        .steps
        .iter()
        .map(|step| {
            step.iter()
                .map(|t| format!("`{t}`"))
                .collect::<Vec<_>>()
                .join(" or ")
        })
        .collect::<Vec<_>>()
        .join(" → ")
}

/// A JSON Schema type in words: `integer`, `array of string`, `string or null` is `string`
/// (an optional parameter's `null` says only that it may be left out).
fn type_of(schema: &Value) -> String {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
        return format!("one of {}", values.join(", "));
    }
    if let Some(options) = schema.get("anyOf").or_else(|| schema.get("oneOf")) {
        let options: Vec<String> = options
            .as_array()
            .into_iter()
            .flatten()
            .filter(|o| o.get("type").and_then(Value::as_str) != Some("null"))
            .map(type_of)
            .collect();
        return options.join(" or ");
    }
    let base = match schema.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "any".to_owned(),
    };
    match (base.as_str(), schema.get("items")) {
        ("array", Some(items)) => format!("array of {}", type_of(items)),
        _ => base,
    }
}

/// Bounds a schema states, as `1–600`, `≥ 1`, `at least 1 item`.
fn bounds(schema: &Value) -> Option<String> {
    let num = |key: &str| schema.get(key).and_then(Value::as_f64);
    let mut parts = Vec::new();
    match (num("minimum"), num("maximum")) {
        (Some(min), Some(max)) => parts.push(format!("{min}–{max}")),
        (Some(min), None) => parts.push(format!("≥ {min}")),
        (None, Some(max)) => parts.push(format!("≤ {max}")),
        (None, None) => {}
    }
    if let Some(min) = num("minItems") {
        parts.push(format!(
            "at least {min} item{}",
            if min == 1.0 { "" } else { "s" }
        ));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

fn parameters(out: &mut String, schema: &Value) {
    let properties = schema.get("properties").and_then(Value::as_object);
    let Some(properties) = properties.filter(|p| !p.is_empty()) else {
        out.push_str("Parameters: none.\n\n");
        return;
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    out.push_str("| parameter | type | required | description |\n|---|---|---|---|\n");
    // Required ones first, each group in the schema's (alphabetical) order.
    let mut names: Vec<&String> = properties.keys().collect();
    names.sort_by_key(|n| !required.contains(&n.as_str()));
    for name in names {
        let p = &properties[name];
        let kind = match bounds(p) {
            Some(b) => format!("{} ({b})", type_of(p)),
            None => type_of(p),
        };
        let description = p.get("description").and_then(Value::as_str).unwrap_or("");
        let _ = writeln!(
            out,
            "| `{name}` | {} | {} | {} |",
            cell(&kind),
            if required.contains(&name.as_str()) {
                "yes"
            } else {
                "no"
            },
            cell(description)
        );
    }
    out.push('\n');
}

fn tool(out: &mut String, spec: &ToolSpec, schema_note: Option<&str>) {
    let _ = writeln!(out, "### `{}`\n", spec.name);
    let _ = writeln!(out, "{}\n", spec.description);
    // `finish_task`'s contract carries no annotations: it ends the run and does nothing to
    // the world, and "not read-only" would say otherwise.
    if spec.name != FINISH_TOOL {
        let a = spec.annotations;
        let mut traits = vec![if a.read_only {
            "read-only"
        } else {
            "may change things"
        }];
        if a.destructive {
            traits.push("may overwrite or destroy");
        }
        if a.needs_network {
            traits.push("needs the network (offered only to runs that allow it)");
        }
        let _ = writeln!(out, "- **Effects:** {}", traits.join("; "));
    }
    let p = &spec.planner;
    if !p.prerequisites.is_empty() {
        let _ = writeln!(out, "- **Usually after:** {}", code_list(&p.prerequisites));
    }
    if !p.next_tools.is_empty() {
        let _ = writeln!(
            out,
            "- **Usually followed by:** {}",
            code_list(&p.next_tools)
        );
    }
    if !p.workflows.is_empty() {
        let names: Vec<String> = p
            .workflows
            .iter()
            .map(|w| format!("[`{0}`](#{0})", w.name))
            .collect();
        let _ = writeln!(out, "- **Workflows:** {}", names.join(", "));
    }
    if !spec.aliases.is_empty() {
        let _ = writeln!(out, "- **Formerly called:** {}", code_list(&spec.aliases));
    }
    out.push('\n');
    match schema_note {
        Some(note) => {
            let _ = writeln!(out, "{note}\n");
        }
        None => parameters(out, &spec.input_schema),
    }
    if !spec.examples.is_empty() {
        out.push_str("Examples:\n\n");
        for example in &spec.examples {
            let _ = writeln!(out, "- `{example}`");
        }
        out.push('\n');
    }
}

fn render() -> String {
    let sandbox: Arc<dyn ProcessSandbox> = Arc::new(NoOsSandbox);
    let builtins = engineering_tools(&Arc::new(ToolPolicy::default()), &sandbox);
    let lazy = LazyTools::new(Arc::new(StaticTools::new(Vec::new(), Vec::new())));
    let agent: Arc<dyn Tool> = Arc::new(Typed::new(AgentTool::new(
        "<id>",
        "the specialist's description",
        Arc::new(NoChildren),
    )));
    let finisher: SpecialistSpec = serde_json::from_value(json!({
        "id": "any", "description": "d", "system_prompt": "p", "tools": [],
        "finish_schema": {"type": "object"},
    }))
    .unwrap();
    let mut finish = finisher.finish_tool().unwrap();
    // `finish_task` is in workflows, not in the registry's contracts: its contract is the
    // specialist's, so the doc lists the workflows that name it.
    for workflow in builtin_workflows() {
        if workflow.involves(FINISH_TOOL) {
            finish = finish.workflow(workflow);
        }
    }

    let mut out = String::new();
    let _ = write!(
        out,
        "# Tools

<!-- Generated from the tool contracts by crates/adapters/tools/tests/tools_doc.rs: do not
edit by hand. Regenerate with `{REGENERATE}`. -->

Every tool a specialist can be given, as its contract (`ToolSpec`, seed 004) describes it.
The same contract generates what models see (the OpenAI function definition and the MCP tool
definition, whose description adds the examples, \"Usually after\", \"Usually followed by\" and
old names) and this page, so they cannot disagree. Numbers and lists that come from the
configuration (sizes, the `shell` allowlist) are those of the default configuration
(CONFIG.md). MCP servers' tools (`mcp__<server>__<tool>`) bring their own contracts
(MCP.md); the tools the fabric serves to MCP clients (`run_task`, `get_run`, ...) are in
MCP.md and CLI.md.

## Workflows

A workflow is a short named sequence of tool calls that usually works, with what it is for;
a step names one tool or alternatives. Each is defined once (`fabric-tools`' `workflows`
registry) and carried by the contract of every tool it names. Models see them:

- through the meta-tools of lazy tool loading: each `search_tools` match names its
  workflows and the answer spells each of them out once; `load_tool_schema` lists the loaded
  tool's workflows;
- in the system prompt, one line each, when they fit: every step has one of its tools among
  the specialist's own tools that the run allows (loaded or not yet, under lazy loading;
  `finish_task` always counts), at most {MAX_PROMPT_WORKFLOWS} lines, and with a known context window at most
  1/{WORKFLOW_WINDOW_SHARE} of it (LOCAL_MODELS.md). A reviewer with `read_file` and `list_files` gets
  `list-read-report` only; `research` without `--network-allowed` loses `search-fetch-cite`.

| workflow | steps | for |
|---|---|---|
"
    );
    for w in builtin_workflows() {
        let _ = writeln!(
            out,
            "| <a id=\"{0}\"></a>`{0}` | {1} | {2} |",
            w.name,
            steps(&w),
            cell(&w.purpose)
        );
    }
    out.push_str(
        "\n## Built-in tools\n\nName them in a specialist's `tools` (SPECIALISTS.md, CONFIG.md).\n\n",
    );
    for t in &builtins {
        tool(&mut out, t.spec(), None);
        if t.spec().name == fabric_domain::builtin::SHELL {
            out.push_str(&live_output_note());
        }
    }
    out.push_str(
        "## Tools the fabric adds\n\nThese come with a feature rather than by name in `tools`.\n\n",
    );
    tool(
        &mut out,
        &finish,
        Some(
            "Every specialist has it; its parameters are the specialist's `finish_schema` \
             (SPECIALISTS.md lists the built-in specialists'). It is refused before any other \
             tool has been used, except in a critic's review, whose task holds the diff it \
             reviews (QUALITY.md).",
        ),
    );
    tool(&mut out, &fabric_core::search::search_runs_spec(), None);
    tool(&mut out, agent.spec(), None);
    out.push_str(
        "One `agent__<id>` tool for each specialist named in `delegates` (MCP.md, \"Sub-agents \
         as tools\"); its description names the specialist and says what it does.\n\n",
    );
    for t in lazy.meta_tools() {
        tool(&mut out, t.spec(), None);
    }
    out.push_str(
        "`search_tools` and `load_tool_schema` replace the other tools at the start of a run of \
         a specialist with `tool_loading: lazy` (MCP.md, \"Progressive tool loading\").\n",
    );
    out
}

/// What `shell` shows the people following a run while a command runs (issue #42).
fn live_output_note() -> String {
    use fabric_core::live_output::{BURST_LINES, LINES_PER_SECOND, MAX_LINE_BYTES};
    format!(
        "**While a command runs** each line of its stdout and stderr also reaches the people \
         following the run: `fabric run`'s output under the call, the `tool_output` frames of \
         `GET /runs/{{id}}/events` and the web viewer (HTTP.md). Per call, a line is cut at \
         {MAX_LINE_BYTES} bytes (saying how many more it had), and at most {BURST_LINES} lines \
         go out at once, then {LINES_PER_SECOND} a second; the lines left out are counted and \
         the count is shown. These lines are never recorded (RUNLOG.md) and the model never \
         sees them: the result above is the same with or without followers (ADR-106).\n\n"
    )
}

#[test]
fn issue_26_docs_tools_md_is_generated_from_the_contracts() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(DOC);
    let generated = render();
    if std::env::var_os("FABRIC_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == generated,
        "docs/TOOLS.md is stale: it no longer matches the tool contracts; run `{REGENERATE}` \
         and commit the result"
    );
}

#[test]
fn issue_26_the_doc_covers_every_built_in_tool_and_workflow() {
    let doc = render();
    for name in fabric_tools::BUILTIN_TOOLS {
        assert!(doc.contains(&format!("### `{name}`")), "{name}");
    }
    for w in builtin_workflows() {
        assert!(
            doc.contains(&format!("<a id=\"{}\"></a>", w.name)),
            "{}",
            w.name
        );
    }
    for name in [
        FINISH_TOOL,
        "search_runs",
        "search_tools",
        "load_tool_schema",
    ] {
        assert!(doc.contains(&format!("### `{name}`")), "{name}");
    }
    // Parameters come from the schemas: a required one, and bounds.
    assert!(doc.contains("| `cmd` | array of string (at least 1 item) | yes |"));
    assert!(
        doc.contains("| `timeout_s` | integer (1–600) | no |"),
        "{doc}"
    );
}
