//! Markdown specialists: YAML front matter holds the fields, the body is the system prompt.
//!
//! Pure parsing, no I/O: [`parse_markdown`] takes the text and the path (for messages).
//! It reads our own fields, Claude Code's agent format as-is (`name`, `description`, `tools`
//! as a comma-separated string or a list, `disallowedTools`, `model`) and goose's
//! recipe-like fields where they mean something here (`instructions`, `response.json_schema`).
//! Keys that only matter to those tools are ignored on purpose ([`IGNORED_KEYS`]); any other
//! key is an error naming the file, the line and the key.

use fabric_domain::builtin;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

use crate::error::ConfigError;
use crate::raw::RawSpecialist;

/// Foreign keys accepted and ignored, with why: they configure Claude Code or goose
/// features agent-fabric does not have (or has elsewhere). Those marked `true` change
/// behaviour there, so ignoring them is reported as a warning.
pub(crate) const IGNORED_KEYS: &[(&str, bool, &str)] = &[
    ("color", false, "Claude Code display colour"),
    ("version", false, "goose recipe version"),
    ("title", false, "goose recipe title"),
    ("author", false, "goose recipe author"),
    (
        "permissionMode",
        true,
        "Claude Code permission mode; agent-fabric uses may_write and the tool policy",
    ),
    ("hooks", true, "Claude Code hooks are not supported"),
    ("skills", true, "Claude Code skills are not supported"),
    (
        "extensions",
        true,
        "goose extensions are not read; declare MCP servers with `mcp_servers` (docs/MCP.md)",
    ),
    (
        "parameters",
        true,
        "goose recipe parameters are not supported",
    ),
    (
        "activities",
        true,
        "goose recipe activities are not supported",
    ),
    (
        "prompt",
        true,
        "goose's initial user prompt; agent-fabric takes the prompt from `fabric run`",
    ),
    (
        "settings",
        true,
        "goose recipe settings are not supported; use model_key",
    ),
    ("sub_recipes", true, "goose sub-recipes are not supported"),
    ("retry", true, "goose retry is not supported"),
];

/// The tools a Claude Code agent gets when it names none: all of ours. Tools needing the
/// network are still offered only to runs that allow it, and write tools only when
/// `may_write` holds.
pub(crate) const INHERITED_TOOLS: &[&str] = builtin::ALL;

/// Claude Code's tool names and ours, where an equivalent exists.
const CLAUDE_TOOLS: &[(&str, Option<&str>)] = &[
    ("Read", Some(builtin::READ_FILE)),
    ("Write", Some(builtin::WRITE_FILE)),
    ("Edit", Some(builtin::WRITE_FILE)),
    ("MultiEdit", Some(builtin::WRITE_FILE)),
    ("Bash", Some(builtin::SHELL)),
    ("Glob", Some(builtin::LIST_FILES)),
    ("LS", Some(builtin::LIST_FILES)),
    ("WebFetch", Some(builtin::FETCH_URL)),
    ("WebSearch", Some(builtin::WEB_SEARCH)),
    ("Grep", None),
    ("NotebookRead", None),
    ("NotebookEdit", None),
    ("Task", None),
    ("TodoWrite", None),
    ("BashOutput", None),
    ("KillShell", None),
    ("KillBash", None),
    ("SlashCommand", None),
    ("ExitPlanMode", None),
];

/// Claude Code model aliases: they name Anthropic models, not our model keys.
const CLAUDE_MODELS: &[&str] = &["inherit", "sonnet", "opus", "haiku"];

/// A specialist read from a markdown file, before it is merged into the settings.
#[derive(Debug)]
pub(crate) struct MarkdownSpecialist {
    /// Its id: `name` (or `id`) from the front matter, else the file name without `.md`.
    pub(crate) id: String,
    /// The fields, in the same shape as a `specialists:` entry of the config file.
    pub(crate) raw: RawSpecialist,
    /// What was ignored or left out, for `fabric specialists show` and `config validate`.
    pub(crate) warnings: Vec<String>,
}

/// A tool list as Claude Code writes it (`Read, Grep`) or as a YAML list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ToolList {
    Text(String),
    List(Vec<String>),
}

impl ToolList {
    fn names(self) -> Vec<String> {
        match self {
            Self::Text(text) => text
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            Self::List(list) => list.into_iter().map(|s| s.trim().to_owned()).collect(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GooseResponse {
    json_schema: Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FrontMatter {
    #[serde(alias = "id")]
    name: Option<String>,
    description: Option<String>,
    tools: Option<ToolList>,
    #[serde(rename = "disallowedTools")]
    disallowed_tools: Option<ToolList>,
    model: Option<String>,
    model_key: Option<String>,
    keywords: Option<Vec<String>>,
    capabilities: Option<Vec<String>>,
    finish_schema: Option<Value>,
    response: Option<GooseResponse>,
    instructions: Option<String>,
    may_write: Option<bool>,
    needs_network: Option<bool>,
    limitations: Option<Vec<String>>,
    container_image: Option<String>,
    mcp_servers: Option<Vec<crate::mcp::RawMcpServer>>,
    tool_loading: Option<fabric_domain::ToolLoading>,
    delegates: Option<Vec<String>>,
    critic: Option<String>,
    max_repair_rounds: Option<u64>,
    budget: Option<crate::raw::RawBudget>,
    repeat_limit: Option<u64>,
    require_finish: Option<bool>,
    project_instructions: Option<bool>,
}

struct Source<'a> {
    path: &'a Path,
    /// The file line of the first front-matter line.
    first_line: u64,
    front: &'a str,
}

impl Source<'_> {
    fn error(&self, line: Option<u64>, detail: impl Into<String>) -> ConfigError {
        ConfigError::SpecialistFile {
            path: self.path.to_path_buf(),
            line,
            detail: detail.into(),
        }
    }

    /// The file line where the top-level `key:` is written, for messages.
    fn line_of(&self, key: &str) -> Option<u64> {
        self.front.lines().enumerate().find_map(|(i, line)| {
            let rest = line.strip_prefix(key)?;
            rest.trim_start()
                .starts_with(':')
                .then_some(self.first_line + i as u64)
        })
    }
}

/// Parses one markdown specialist. `path` names the file in messages and gives the default id.
pub(crate) fn parse_markdown(text: &str, path: &Path) -> Result<MarkdownSpecialist, ConfigError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (front, body, first_line) = split_front_matter(text, path)?;
    let src = Source {
        path,
        first_line,
        front,
    };
    let value: Value = serde_saphyr::from_str(front).map_err(|e| {
        let line = e.location().map(|l| first_line + l.line().saturating_sub(1));
        src.error(
            line,
            format!(
                "the front matter is not valid YAML: {e}; fix the YAML between the `---` lines (quote values holding `:` or `#`)"
            ),
        )
    })?;
    let mut map = match value {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        _ => {
            return Err(src.error(
                Some(first_line),
                "the front matter must be `key: value` lines, e.g. `description: Reviews code`",
            ));
        }
    };
    let mut warnings = Vec::new();
    take_ignored(&mut map, &mut warnings);
    let front_matter: FrontMatter =
        serde_path_to_error::deserialize(Value::Object(map)).map_err(|e| {
            let key = e.path().to_string();
            let top = key.split(['.', '[']).next().unwrap_or_default().to_owned();
            let inner = e.into_inner().to_string();
            let detail = if inner.starts_with("unknown field") {
                format!(
                    "unknown front-matter key `{top}`: {inner}; remove it or see docs/SPECIALISTS.md for the keys agent-fabric reads and the foreign keys it ignores"
                )
            } else {
                format!("`{key}`: {inner}")
            };
            src.error(src.line_of(&top), detail)
        })?;
    build(front_matter, body, &src, warnings)
}

/// Removes the foreign keys ignored on purpose, noting those that change behaviour elsewhere.
fn take_ignored(map: &mut Map<String, Value>, warnings: &mut Vec<String>) {
    for (key, warn, why) in IGNORED_KEYS {
        if map.remove(*key).is_some() && *warn {
            warnings.push(format!("front-matter key `{key}` ignored: {why}"));
        }
    }
}

fn build(
    fm: FrontMatter,
    body: &str,
    src: &Source<'_>,
    mut warnings: Vec<String>,
) -> Result<MarkdownSpecialist, ConfigError> {
    let stem = src
        .path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let id = fm.name.unwrap_or_else(|| stem.to_owned());
    let description = fm.description.filter(|d| !d.trim().is_empty()).ok_or_else(|| {
        src.error(
            Some(src.first_line),
            "missing `description`: add a line such as `description: Reviews code and reports problems` to the front matter",
        )
    })?;
    let body = body.trim();
    let system_prompt = match (body.is_empty(), fm.instructions) {
        (false, None) => body.to_owned(),
        (true, Some(instructions)) => instructions,
        (false, Some(_)) => {
            return Err(src.error(
                src.line_of("instructions"),
                "both `instructions` and a body: the body is the system prompt; remove one",
            ));
        }
        (true, None) => {
            return Err(src.error(
                None,
                "no system prompt: write it below the closing `---` of the front matter",
            ));
        }
    };
    let finish_schema = match (fm.finish_schema, fm.response) {
        (Some(_), Some(_)) => {
            return Err(src.error(
                src.line_of("response"),
                "both `finish_schema` and goose's `response.json_schema`; keep one",
            ));
        }
        (schema, response) => schema.or(response.map(|r| r.json_schema)),
    };
    let mut tools = match fm.tools {
        Some(list) => map_tools(list.names(), &mut warnings),
        None => INHERITED_TOOLS.iter().map(|s| (*s).to_owned()).collect(),
    };
    if let Some(denied) = fm.disallowed_tools {
        let denied = map_tools(denied.names(), &mut Vec::new());
        tools.retain(|t| !denied.contains(t));
    }
    let model_key = match fm.model_key {
        Some(key) => Some(key),
        None => fm.model.and_then(|m| {
            if CLAUDE_MODELS.contains(&m.as_str()) {
                warnings.push(format!(
                    "`model: {m}` is a Claude Code model alias, not a model key; the run's default model is used"
                ));
                None
            } else {
                Some(m)
            }
        }),
    };
    Ok(MarkdownSpecialist {
        id,
        raw: RawSpecialist {
            description: Some(description),
            keywords: fm.keywords,
            capabilities: fm.capabilities,
            system_prompt: Some(system_prompt),
            tools: Some(tools),
            finish_schema,
            model_key,
            may_write: fm.may_write,
            needs_network: fm.needs_network,
            limitations: fm.limitations,
            container_image: fm.container_image,
            mcp_servers: fm.mcp_servers,
            tool_loading: fm.tool_loading,
            delegates: fm.delegates,
            critic: fm.critic,
            max_repair_rounds: fm.max_repair_rounds,
            budget: fm.budget,
            repeat_limit: fm.repeat_limit,
            require_finish: fm.require_finish,
            approval: None,
            project_instructions: fm.project_instructions,
            // An ACP agent is a config-file specialist (docs/ACP.md).
            acp: None,
        },
        warnings,
    })
}

/// Maps Claude Code tool names to ours, drops those without an equivalent (with a warning)
/// and keeps every other name as written, for the tool check to judge. No duplicates.
fn map_tools(names: Vec<String>, warnings: &mut Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in names {
        let mapped = match CLAUDE_TOOLS.iter().find(|(claude, _)| *claude == name) {
            Some((_, Some(ours))) => (*ours).to_owned(),
            Some((_, None)) => {
                warnings.push(format!(
                    "Claude Code tool `{name}` has no equivalent in agent-fabric and was left out"
                ));
                continue;
            }
            None => name,
        };
        if !out.contains(&mapped) {
            out.push(mapped);
        }
    }
    out
}

/// Splits `---\nfront\n---\nbody`, returning the front matter, the body and the file line
/// of the first front-matter line.
fn split_front_matter<'a>(
    text: &'a str,
    path: &Path,
) -> Result<(&'a str, &'a str, u64), ConfigError> {
    let err = |line, detail: &str| ConfigError::SpecialistFile {
        path: PathBuf::from(path),
        line: Some(line),
        detail: detail.to_owned(),
    };
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or_default();
    if first.trim_end() != "---" {
        return Err(err(
            1,
            "a specialist file starts with a `---` line, then YAML front matter (description, tools, ...), another `---` line, and the system prompt",
        ));
    }
    let start = first.len();
    let mut offset = start;
    for line in lines {
        let trimmed = line.trim_end();
        if trimmed == "---" || trimmed == "..." {
            return Ok((&text[start..offset], &text[offset + line.len()..], 2));
        }
        offset += line.len();
    }
    Err(err(
        1,
        "the front matter that starts here is never closed; add a line `---` after the last field",
    ))
}

#[cfg(test)]
mod tests;
