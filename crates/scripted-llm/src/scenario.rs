//! The scenario format: what the scripted server answers, turn by turn.
//!
//! A scenario is plain data (JSON or YAML) so that users can write one next to their specialist
//! without touching Rust. Unknown fields are rejected: a typo such as `tool_call:` would
//! otherwise silently script a turn with no calls, and the test would fail for a confusing reason.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

/// A whole script: the chat turns, in order, and the models the server claims to have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// The replies, in order. Each chat request (on either wire) consumes the next one.
    #[serde(default)]
    pub turns: Vec<Turn>,
    /// The models listed by `/api/tags`, `/v1/models` and known to `/api/show`.
    #[serde(default = "default_models")]
    pub models: Vec<ModelInfo>,
    /// A pause before every chat reply, in milliseconds, to imitate a slow model.
    #[serde(default)]
    pub latency_ms: u64,
    /// A pause between two streamed events, in milliseconds. With 0 the server still yields
    /// between events, so each event leaves in its own write.
    #[serde(default)]
    pub stream_delay_ms: u64,
    /// What to do when a chat request arrives after the last turn.
    #[serde(default)]
    pub on_exhausted: OnExhausted,
    /// How a request picks its turn: the next one in order, or by the conversation it
    /// carries.
    #[serde(default)]
    pub turn_by: TurnBy,
    /// The length of the vectors `/api/embed` and `/v1/embeddings` answer with (see
    /// [`hash_embedding`](crate::hash_embedding)), unless the request asks for `dimensions`.
    #[serde(default = "default_embedding_dims")]
    pub embedding_dims: usize,
    /// Whether the embedding endpoints answer (`up`) or fail with HTTP 503 (`down`), to test
    /// that a run survives an embedding server that is down. Chat is not affected.
    #[serde(default)]
    pub embeddings: EmbeddingsMode,
}

/// Whether the embedding endpoints work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmbeddingsMode {
    /// Answer every embedding request with deterministic hash embeddings.
    #[default]
    Up,
    /// Answer every embedding request with HTTP 503.
    Down,
}

/// The length of embeddings when the scenario does not say: that of `nomic-embed-text`,
/// Ollama's usual embedding model.
pub const DEFAULT_EMBEDDING_DIMS: usize = 768;
/// The longest embedding a scenario may ask for; real models stay well below it.
const MAX_EMBEDDING_DIMS: usize = 65_536;

/// The built-in hello scenario ([`Scenario::hello`]).
const HELLO_YAML: &str = include_str!("../scenarios/hello.yaml");

impl Default for Scenario {
    fn default() -> Self {
        Self {
            turns: Vec::new(),
            models: default_models(),
            latency_ms: 0,
            stream_delay_ms: 0,
            on_exhausted: OnExhausted::default(),
            turn_by: TurnBy::default(),
            embedding_dims: DEFAULT_EMBEDDING_DIMS,
            embeddings: EmbeddingsMode::default(),
        }
    }
}

/// How a chat request picks its turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnBy {
    /// The next turn in order: each request consumes one.
    #[default]
    Order,
    /// Turn N for a request whose conversation took N steps: the same conversation always
    /// gets the same answer, however often it is asked (a run resumed after its process was
    /// killed mid-call asks again). The steps are the assistant messages plus those the
    /// fabric's compaction left out, which its note counts ("[Context note: 12 earlier
    /// step(s) were left out …"), so a compacted conversation goes on where it was.
    Conversation,
}

/// How the fabric's compaction note starts (its `context::NOTE_PREFIX`).
pub(crate) const NOTE_PREFIX: &str = "[Context note:";

/// How many steps a conversation took: its assistant messages, and the steps a compaction
/// note says were left out (see [`TurnBy::Conversation`]), from each message's role and, for a
/// user's text, its content.
pub fn steps_taken<'a>(messages: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> usize {
    let mut answers = 0;
    let mut notes = Vec::new();
    for (role, content) in messages {
        match (role, content) {
            ("assistant", _) => answers += 1,
            ("user", Some(text)) if text.starts_with(NOTE_PREFIX) => notes.push(text),
            _ => {}
        }
    }
    let left_out: usize = notes
        .into_iter()
        .flat_map(str::lines)
        .filter_map(|line| {
            let rest = line.strip_prefix(NOTE_PREFIX)?.trim_start();
            let (n, tail) = rest.split_once(' ')?;
            tail.starts_with("earlier step(s)")
                .then(|| n.parse::<usize>().ok())?
        })
        .sum();
    answers + left_out
}

/// What the server does once every turn has been answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnExhausted {
    /// Answer HTTP 500 with `{"error": "scripted LLM server: scenario exhausted after N turns"}`,
    /// so a test whose client asks more often than scripted notices.
    #[default]
    Error,
    /// Answer every further request with the last turn again (for benchmarks and soak tests).
    RepeatLast,
}

/// One scripted reply to one chat request.
///
/// Either a message (`content` and/or `tool_calls`) or, when `status` is set, an HTTP error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// The assistant's text. Absent means the empty string (or `null` with `content_null`).
    #[serde(default)]
    pub content: Option<String>,
    /// Send `"content": null` instead of a string, as OpenAI does next to tool calls.
    #[serde(default)]
    pub content_null: bool,
    /// The tool calls the model makes in this turn, in order.
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
    /// Makes this an error turn: the HTTP status to answer with (e.g. 500, 400, 404).
    #[serde(default)]
    pub status: Option<u16>,
    /// The error body. If it is a JSON object it is sent verbatim; otherwise it is wrapped the
    /// way the wire does it: `{"error": "..."}` on `/api/chat`, `{"error": {"message": ...}}`
    /// on `/v1/chat/completions`. Only allowed together with `status`.
    #[serde(default)]
    pub body: Option<String>,
    /// An extra pause before this reply, in milliseconds (on top of `latency_ms`).
    #[serde(default)]
    pub delay_ms: Option<u64>,
    /// With `status`: a `Retry-After` header, in seconds.
    #[serde(default)]
    pub retry_after_s: Option<u64>,
    /// Token counts to report. Absent: plausible counts are estimated from the sizes.
    #[serde(default)]
    pub usage: Option<UsageSpec>,
    /// Send no usage at all (no `usage` object, no Ollama `*_count` fields, no usage chunk).
    #[serde(default)]
    pub omit_usage: bool,
    /// Overrides the finish reason (`"length"` to test truncation). Default: `"tool_calls"`
    /// when the turn has calls, else `"stop"` (Ollama's `done_reason` is `"stop"` then too).
    #[serde(default)]
    pub finish_reason: Option<String>,
}

impl Turn {
    /// A turn that answers with text only.
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: Some(content.into()),
            ..Self::default()
        }
    }

    /// A turn that makes one tool call with the given arguments.
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Self {
            tool_calls: vec![ScriptedCall::new(name, arguments)],
            ..Self::default()
        }
    }

    /// A turn that answers with an HTTP error instead of a message.
    pub fn error(status: u16, body: impl Into<String>) -> Self {
        Self {
            status: Some(status),
            body: Some(body.into()),
            ..Self::default()
        }
    }

    /// True when this turn answers with an HTTP error.
    pub fn is_error(&self) -> bool {
        self.status.is_some()
    }
}

/// Token counts a turn reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageSpec {
    /// Tokens of the prompt (`prompt_tokens`, Ollama's `prompt_eval_count`). Absent: estimated.
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    /// Tokens generated (`completion_tokens`, Ollama's `eval_count`). Absent: estimated.
    #[serde(default)]
    pub completion_tokens: Option<u64>,
}

/// One tool call the scripted model makes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    /// The tool's name.
    pub name: String,
    /// The arguments. On the OpenAI wire they are serialised to a JSON string, as OpenAI does;
    /// on Ollama's native wire they are sent as an object.
    #[serde(default = "empty_object")]
    pub arguments: Value,
    /// Sent verbatim as the arguments string on both wires, to test malformed JSON. Wins over
    /// `arguments`.
    #[serde(default)]
    pub arguments_raw: Option<String>,
    /// Send the arguments as a JSON object on the OpenAI wire too, as some servers do.
    #[serde(default)]
    pub arguments_as_object: bool,
    /// The call id on the OpenAI wire. Default `call_<turn>_<n>`, with the 1-based turn number
    /// and the 0-based index of the call in its turn. On Ollama's native wire an id is sent only
    /// when set here.
    #[serde(default)]
    pub id: Option<String>,
    /// Send no id at all, as some OpenAI-compatible servers do.
    #[serde(default)]
    pub omit_id: bool,
}

impl ScriptedCall {
    /// A call of `name` with well-formed `arguments` and the default id.
    pub fn new(name: impl Into<String>, arguments: Value) -> Self {
        Self {
            name: name.into(),
            arguments,
            arguments_raw: None,
            arguments_as_object: false,
            id: None,
            omit_id: false,
        }
    }
}

/// A model the server claims to have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelInfo {
    /// The name clients ask for, e.g. `qwen2.5:7b`.
    pub name: String,
    /// The size as Ollama prints it, e.g. `7.6B`.
    #[serde(default = "default_parameter_size")]
    pub parameter_size: String,
    /// The model family, e.g. `qwen2`.
    #[serde(default = "default_family")]
    pub family: String,
    /// What `/api/show` reports, e.g. `["completion", "tools"]`.
    #[serde(default = "default_capabilities")]
    pub capabilities: Vec<String>,
    /// The trained context length `/api/show` reports (`<family>.context_length`), and the
    /// slot window `GET /props` reports (llama.cpp), if any.
    #[serde(default)]
    pub context_length: Option<u64>,
}

impl ModelInfo {
    /// A model with the given name and the default size, family and capabilities
    /// (`7.6B`, `qwen2`, completion and tools).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            parameter_size: default_parameter_size(),
            family: default_family(),
            capabilities: default_capabilities(),
            context_length: None,
        }
    }
}

/// Why a scenario could not be loaded.
#[derive(Debug, Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read scenario {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The text is not a valid JSON scenario.
    #[error("invalid JSON scenario: {0}")]
    Json(#[from] serde_json::Error),
    /// The text is not a valid YAML scenario.
    #[error("invalid YAML scenario: {0}")]
    Yaml(String),
    /// The scenario parsed but contradicts itself.
    #[error("invalid scenario: {0}")]
    Invalid(String),
}

impl Scenario {
    /// A scenario with these turns and the defaults for everything else.
    pub fn new(turns: Vec<Turn>) -> Self {
        Self {
            turns,
            ..Self::default()
        }
    }

    /// Loads a scenario file: JSON for `.json`, YAML for `.yaml`/`.yml`, else guessed from
    /// the text as [`Scenario::from_str_auto`] does.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ScenarioError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            path: path.display().to_string(),
            source,
        })?;
        match path.extension().and_then(|e| e.to_str()) {
            Some("json") => Self::from_json(&text),
            Some("yaml" | "yml") => Self::from_yaml(&text),
            _ => Self::from_str_auto(&text),
        }
    }

    /// The README's scenario: an engineering run that writes hello.txt, lists the workspace
    /// and finishes, answered by conversation, so it serves any number of runs.
    pub fn hello() -> Result<Self, ScenarioError> {
        Self::from_yaml(HELLO_YAML)
    }

    /// Parses a scenario from JSON (when the text starts with `{`) or else YAML.
    pub fn from_str_auto(text: &str) -> Result<Self, ScenarioError> {
        if text.trim_start().starts_with('{') {
            Self::from_json(text)
        } else {
            Self::from_yaml(text)
        }
    }

    /// Parses a JSON scenario.
    pub fn from_json(text: &str) -> Result<Self, ScenarioError> {
        let scenario: Self = serde_json::from_str(text)?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// Parses a YAML scenario.
    pub fn from_yaml(text: &str) -> Result<Self, ScenarioError> {
        let scenario: Self =
            serde_saphyr::from_str(text).map_err(|e| ScenarioError::Yaml(e.to_string()))?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// Checks what serde cannot: error turns are errors only, status codes are real ones,
    /// embeddings have a usable length.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if !(1..=MAX_EMBEDDING_DIMS).contains(&self.embedding_dims) {
            return Err(ScenarioError::Invalid(format!(
                "embedding_dims must be between 1 and {MAX_EMBEDDING_DIMS}, got {}",
                self.embedding_dims
            )));
        }
        for (i, turn) in self.turns.iter().enumerate() {
            let n = i + 1;
            match turn.status {
                Some(status) => {
                    if !(100..=999).contains(&status) {
                        return Err(ScenarioError::Invalid(format!(
                            "turn {n}: status {status} is not an HTTP status"
                        )));
                    }
                    if turn.content.is_some() || !turn.tool_calls.is_empty() {
                        return Err(ScenarioError::Invalid(format!(
                            "turn {n}: an error turn (status {status}) cannot also have content or tool_calls"
                        )));
                    }
                }
                None if turn.body.is_some() || turn.retry_after_s.is_some() => {
                    return Err(ScenarioError::Invalid(format!(
                        "turn {n}: `body` and `retry_after_s` belong to an error reply and need `status`"
                    )));
                }
                None => {}
            }
            for (j, call) in turn.tool_calls.iter().enumerate() {
                if call.omit_id && call.id.is_some() {
                    return Err(ScenarioError::Invalid(format!(
                        "turn {n}, call {j}: `id` and `omit_id` contradict each other"
                    )));
                }
            }
        }
        Ok(())
    }
}

fn default_embedding_dims() -> usize {
    DEFAULT_EMBEDDING_DIMS
}

fn default_models() -> Vec<ModelInfo> {
    vec![ModelInfo::new("qwen2.5:7b")]
}

fn default_parameter_size() -> String {
    "7.6B".to_owned()
}

fn default_family() -> String {
    "qwen2".to_owned()
}

fn default_capabilities() -> Vec<String> {
    vec!["completion".to_owned(), "tools".to_owned()]
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_hello_scenario_parses_and_serves_by_conversation() {
        let s = Scenario::hello().unwrap();
        assert_eq!(s.turn_by, TurnBy::Conversation);
        assert_eq!(s.turns.len(), 3);
    }

    #[test]
    fn defaults_fill_a_minimal_scenario() {
        let s = Scenario::from_str_auto("turns:\n  - content: hi\n").unwrap();
        assert_eq!(s.turns, vec![Turn::text("hi")]);
        assert_eq!(s.models, default_models());
        assert_eq!(s.on_exhausted, OnExhausted::Error);
        assert_eq!(s.embedding_dims, DEFAULT_EMBEDDING_DIMS);
        assert_eq!(s.embeddings, EmbeddingsMode::Up);
    }

    #[test]
    fn embedding_settings_are_read_and_checked() {
        let s = Scenario::from_yaml("embedding_dims: 16\nembeddings: down\n").unwrap();
        assert_eq!(s.embedding_dims, 16);
        assert_eq!(s.embeddings, EmbeddingsMode::Down);
        let err = Scenario::from_yaml("embedding_dims: 0\n").unwrap_err();
        assert!(err.to_string().contains("embedding_dims"), "{err}");
        let err = Scenario::from_yaml("embeddings: sideways\n").unwrap_err();
        assert!(err.to_string().contains("sideways"), "{err}");
    }

    #[test]
    fn typos_are_rejected() {
        let err = Scenario::from_str_auto(r#"{"turns":[{"tool_call":[]}]}"#).unwrap_err();
        assert!(err.to_string().contains("tool_call"), "{err}");
    }

    #[test]
    fn body_without_status_is_rejected() {
        let err = Scenario::from_str_auto("turns:\n  - body: oops\n").unwrap_err();
        assert!(matches!(err, ScenarioError::Invalid(_)), "{err}");
    }

    #[test]
    fn yaml_arguments_become_json_objects() {
        let s = Scenario::from_yaml(
            "on_exhausted: repeat_last\nturns:\n  - tool_calls:\n      - name: read\n        arguments: {path: a.txt, n: 2}\n",
        )
        .unwrap();
        assert_eq!(s.on_exhausted, OnExhausted::RepeatLast);
        assert_eq!(
            s.turns[0].tool_calls[0].arguments,
            serde_json::json!({"path": "a.txt", "n": 2})
        );
    }
}
