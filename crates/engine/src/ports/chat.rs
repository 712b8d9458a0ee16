use async_trait::async_trait;
use fabric_domain::{Message, ToolCall, Usage};
use std::any::Any;
use std::sync::{Arc, Mutex};
use thiserror::Error;

pub use fabric_domain::ToolDef;

/// The tool definitions offered to a model: typed [`ToolDef`]s (issue #41), each adapter
/// encoding its own wire form once per set ([`ToolDefinitions::encoded`]) rather than per
/// step. Equal sets are shared: runs of one specialist offer the same tools, so thousands of
/// runs in flight hold one copy, and one encoding of it per backend (issue #14).
#[derive(Debug, Clone)]
pub struct ToolDefinitions {
    set: Arc<DefinitionSet>,
}

/// One set of definitions, with the wire forms the adapters made of it.
struct DefinitionSet {
    defs: Vec<ToolDef>,
    /// The size of the set written as JSON, in bytes (to estimate a prompt's tokens).
    bytes: usize,
    /// The encodings made so far, one per adapter type.
    wire: Mutex<Vec<Arc<dyn Any + Send + Sync>>>,
}

impl std::fmt::Debug for DefinitionSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DefinitionSet")
            .field("defs", &self.defs)
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

/// What one definition adds to a set's JSON besides its three values: the object around
/// them and its keys (`{"function":{"description":,"name":,"parameters":},"type":"function"}`),
/// so the prompt estimate stays what it was when the set was kept as that JSON.
const DEFINITION_OVERHEAD: usize = 69;

/// The JSON text of each part of `def`, for the set's size and its interning hash.
fn texts(def: &ToolDef) -> [String; 3] {
    [
        json_text(&def.name),
        json_text(&def.description),
        json_text(&def.parameters),
    ]
}

/// Serialising a string or a `Value` cannot fail (a `Value`'s keys are strings); the empty
/// fallback keeps the code free of panics regardless.
fn json_text<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// The definition sets in use, by hash: a run's set is swapped for an equal one another
/// run holds. Entries die with their last holder and are swept as the table grows.
fn intern(defs: Vec<ToolDef>) -> Arc<DefinitionSet> {
    use std::collections::HashMap;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::{OnceLock, PoisonError, Weak};
    type Table = (
        std::collections::hash_map::RandomState,
        HashMap<u64, Vec<Weak<DefinitionSet>>>,
    );
    static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
    let table = TABLE.get_or_init(|| Mutex::new(Default::default()));
    // A poisoned table still holds valid weak pointers.
    let mut guard = table.lock().unwrap_or_else(PoisonError::into_inner);
    let (state, map) = &mut *guard;
    let mut hasher = state.build_hasher();
    let mut bytes = 2 + defs.len().saturating_sub(1);
    for part in defs.iter().flat_map(texts) {
        hasher.write(part.as_bytes());
        bytes += part.len();
    }
    bytes += defs.len() * DEFINITION_OVERHEAD;
    let key = hasher.finish();
    let bucket = map.entry(key).or_default();
    bucket.retain(|w| w.strong_count() > 0);
    if let Some(shared) = bucket
        .iter()
        .filter_map(Weak::upgrade)
        .find(|held| held.defs == defs)
    {
        return shared;
    }
    let fresh = Arc::new(DefinitionSet {
        defs,
        bytes,
        wire: Mutex::default(),
    });
    bucket.push(Arc::downgrade(&fresh));
    if map.len() > 4096 {
        map.retain(|_, bucket| bucket.iter().any(|w| w.strong_count() > 0));
    }
    fresh
}

impl ToolDefinitions {
    /// The set of `definitions`, shared with an equal set in use.
    pub fn new(definitions: Vec<ToolDef>) -> Self {
        Self {
            set: intern(definitions),
        }
    }

    /// No tools.
    pub fn none() -> Self {
        Self {
            set: Arc::new(DefinitionSet {
                defs: Vec::new(),
                bytes: 2,
                wire: Mutex::default(),
            }),
        }
    }

    /// The definitions.
    pub fn defs(&self) -> &[ToolDef] {
        &self.set.defs
    }

    /// How many definitions.
    pub fn len(&self) -> usize {
        self.set.defs.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.set.defs.is_empty()
    }

    /// The size of the set written as JSON, in bytes (to estimate a prompt's tokens).
    pub fn byte_len(&self) -> usize {
        self.set.bytes
    }

    /// The set in an adapter's wire form `T`, encoded by `encode` the first time this set is
    /// asked for a `T` and kept with the set after (per set, not per step): runs sharing the
    /// set share its encoding too.
    pub fn encoded<T: Any + Send + Sync>(&self, encode: impl FnOnce(&[ToolDef]) -> T) -> Arc<T> {
        let mut wire = self
            .set
            .wire
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(done) = wire.iter().find_map(|w| Arc::clone(w).downcast::<T>().ok()) {
            return done;
        }
        let fresh = Arc::new(encode(&self.set.defs));
        wire.push(Arc::clone(&fresh) as Arc<dyn Any + Send + Sync>);
        fresh
    }
}

/// One call to a chat model. Borrowed, so the engine never clones the conversation to make
/// a request.
#[derive(Debug, Clone, Copy)]
pub struct ChatRequest<'a> {
    /// The model name as the server knows it.
    pub model: &'a str,
    /// The conversation so far.
    pub messages: &'a [Message],
    /// The tools offered, typed; each adapter encodes them its own way, once per set.
    pub tools: &'a ToolDefinitions,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Nucleus sampling.
    pub top_p: Option<f32>,
    /// Upper bound of generated tokens.
    pub max_tokens: Option<u32>,
    /// Ask the server to stream, and report text deltas to the observer as they come.
    pub stream: bool,
    /// The model reads images (`vision`): a tool message's images go to it in the
    /// backend's shape. Otherwise they are left out and only its text is sent.
    pub vision: bool,
}

/// The model's answer to one call, after the adapter has smoothed over server differences.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatResponse {
    /// Text, if any.
    pub content: Option<String>,
    /// Tool calls, in the order the model made them.
    pub tool_calls: Vec<ToolCall>,
    /// Token usage, when the server reports it.
    pub usage: Option<Usage>,
    /// Why the model stopped (`stop`, `tool_calls`, `length`, ...), when reported.
    pub finish_reason: Option<String>,
    /// How long the request waited for a free slot of its endpoint
    /// (`max_concurrent_requests`), when it waited.
    pub queued_ms: Option<u64>,
    /// How the server's prompt cache served the call, when it says.
    pub prompt_cache: Option<fabric_domain::PromptCache>,
    /// The answer was asked for by JSON schema (constrained decoding), its call read from
    /// the JSON.
    pub constrained: bool,
}

/// Receives text as a streaming model produces it.
pub trait ChatObserver: Send + Sync {
    /// A piece of the model's text.
    fn on_text_delta(&self, delta: &str);
}

/// What can go wrong talking to a model server. Every message names the server or model and
/// the next step, because it is shown to the user as is.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ChatError {
    /// Nothing answered at the address.
    #[error(
        "no model server answers at {url} ({detail}); start it (for Ollama: `ollama serve`) or fix `base_url` in the config"
    )]
    Unreachable {
        /// The endpoint.
        url: String,
        /// The transport's own words.
        detail: String,
    },
    /// The server did not answer in time.
    #[error(
        "the model server at {url} did not answer within {seconds} s; raise `timeout_s` for this model or use a smaller model"
    )]
    Timeout {
        /// The endpoint.
        url: String,
        /// The timeout that ran out.
        seconds: u64,
    },
    /// The server answered with an error status.
    #[error("the model server at {url} answered HTTP {status}: {body}")]
    Status {
        /// The endpoint.
        url: String,
        /// HTTP status code.
        status: u16,
        /// The start of the response body.
        body: String,
    },
    /// The server does not know the model.
    #[error(
        "model `{model}` is not available at {url}; pull it (`ollama pull {model}`) or set `model` in the config to one that `ollama list` shows"
    )]
    ModelNotFound {
        /// The model name.
        model: String,
        /// The endpoint.
        url: String,
    },
    /// The model cannot call tools (seed ADR-007).
    #[error(
        "model `{model}` does not support tool calling, which agent-fabric requires; choose a tool-capable model (for example qwen2.5, llama3.1 or mistral-nemo) with `--model-key` or `models.<key>.model` in the config"
    )]
    ToolsUnsupported {
        /// The model name.
        model: String,
    },
    /// The server says the prompt does not fit its context window (llama.cpp's
    /// `exceed_context_size_error`, OpenAI's `context_length_exceeded`, vLLM's "maximum
    /// context length"): the fabric's estimate of the window was wrong or missing.
    #[error(
        "the model server at {url} says the conversation does not fit its context window ({detail}); set `context_window` for this model key to the server's window, so the fabric compacts the conversation to fit, or start the server with a larger context"
    )]
    ContextExceeded {
        /// The endpoint.
        url: String,
        /// The server's words.
        detail: String,
    },
    /// The server refused our credentials.
    #[error(
        "the model server at {url} refused the API key (HTTP {status}); set the environment variable named by `api_key_env`"
    )]
    Unauthorized {
        /// The endpoint.
        url: String,
        /// 401 or 403.
        status: u16,
    },
    /// The answer could not be understood.
    #[error("could not understand the answer of the model server at {url}: {detail}")]
    Decode {
        /// The endpoint.
        url: String,
        /// What was wrong.
        detail: String,
    },
    /// An embedding call failed; wraps the cause so the message names the embedding model,
    /// which the other errors (shaped for chat) do not.
    #[error("embedding with model `{model}` failed: {cause}")]
    Embedding {
        /// The embedding model's name.
        model: String,
        /// What went wrong; it names the server.
        cause: Box<ChatError>,
    },
    /// Retries ran out on a retryable error.
    #[error("gave up after {attempts} attempts: {last}")]
    RetriesExhausted {
        /// How many calls were made.
        attempts: u32,
        /// The last error.
        last: Box<ChatError>,
    },
}

impl ChatError {
    /// Whether the same request may succeed if sent again after a pause: connection
    /// failures, 429 and 5xx (Ollama answers 500 while it loads a model). A read timeout is
    /// not retried: the server may still be generating the first answer, and sending the
    /// request again would only queue a second generation behind it.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Unreachable { .. } => true,
            Self::Status { status, .. } => *status == 429 || *status >= 500,
            Self::Embedding { cause, .. } => cause.is_retryable(),
            Self::Timeout { .. }
            | Self::ContextExceeded { .. }
            | Self::ModelNotFound { .. }
            | Self::ToolsUnsupported { .. }
            | Self::Unauthorized { .. }
            | Self::Decode { .. }
            | Self::RetriesExhausted { .. } => false,
        }
    }

    /// Whether the server said the conversation does not fit its window.
    pub fn is_context_exceeded(&self) -> bool {
        match self {
            Self::ContextExceeded { .. } => true,
            Self::RetriesExhausted { last, .. } => last.is_context_exceeded(),
            _ => false,
        }
    }

    /// Whether the error means the model can never do this run (rather than a failure).
    pub fn is_model_unsupported(&self) -> bool {
        match self {
            Self::ToolsUnsupported { .. } => true,
            Self::RetriesExhausted { last, .. } => last.is_model_unsupported(),
            Self::Embedding { cause, .. } => cause.is_model_unsupported(),
            _ => false,
        }
    }

    /// A short stable tag for logs and runlogs.
    pub fn kind_tag(&self) -> &'static str {
        match self {
            Self::Unreachable { .. } => "unreachable",
            Self::Timeout { .. } => "timeout",
            Self::Status { .. } => "http_status",
            Self::ModelNotFound { .. } => "model_not_found",
            Self::ToolsUnsupported { .. } => "tools_unsupported",
            Self::ContextExceeded { .. } => "context_exceeded",
            Self::Unauthorized { .. } => "unauthorized",
            Self::Decode { .. } => "decode",
            Self::RetriesExhausted { .. } => "retries_exhausted",
            // The cause's tag: logs group failures by what went wrong, not by the call.
            Self::Embedding { cause, .. } => cause.kind_tag(),
        }
    }
}

/// A chat model server. One required method; adapters handle transport, retries and the
/// differences between servers, and hand back a normalised [`ChatResponse`].
#[async_trait]
pub trait ChatClient: Send + Sync {
    /// Sends one request. With `request.stream`, text deltas go to `observer` as they arrive.
    async fn chat(
        &self,
        request: ChatRequest<'_>,
        observer: &dyn ChatObserver,
    ) -> Result<ChatResponse, ChatError>;

    /// Why this client should not be asked now, if so (its model key's daily budget is
    /// spent): a cloud fallback is then not taken.
    fn unavailable(&self) -> Option<String> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(name: &str) -> ToolDef {
        ToolDef {
            name: name.to_owned(),
            description: "d \"quoted\"".to_owned(),
            parameters: serde_json::json!({"type": "object", "properties": {"p": {"type": "string"}}}),
        }
    }

    #[test]
    fn issue_14_equal_definitions_are_one_copy() {
        let (a, b) = (
            ToolDefinitions::new(vec![def("issue14_shared")]),
            ToolDefinitions::new(vec![def("issue14_shared")]),
        );
        assert!(Arc::ptr_eq(&a.set, &b.set));
        let other = ToolDefinitions::new(vec![def("issue14_other")]);
        assert!(!Arc::ptr_eq(&a.set, &other.set));
        assert_eq!(a.defs(), [def("issue14_shared")]);
    }

    /// Issue #41: an adapter's wire form is made once per set and shared by its holders.
    #[test]
    fn issue_41_a_set_is_encoded_once_per_wire_form() {
        let a = ToolDefinitions::new(vec![def("issue41_encoded")]);
        let b = ToolDefinitions::new(vec![def("issue41_encoded")]);
        let calls = std::sync::atomic::AtomicU32::new(0);
        let encode = |defs: &[ToolDef]| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            defs.len()
        };
        let first = a.encoded(encode);
        assert!(Arc::ptr_eq(&first, &b.encoded(encode)));
        assert_eq!(*a.encoded(|_| String::from("other form")), "other form");
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    /// The prompt estimate reads the set's size as the OpenAI JSON it was kept as before
    /// issue #41.
    #[test]
    fn issue_41_the_size_is_the_json_the_estimate_always_read() {
        let defs = vec![def("a"), def("b_tool")];
        let openai: Vec<serde_json::Value> = defs
            .iter()
            .map(|d| {
                serde_json::json!({"type": "function", "function": {
                "name": d.name, "description": d.description, "parameters": d.parameters}})
            })
            .collect();
        let text = serde_json::to_string(&openai).unwrap();
        assert_eq!(ToolDefinitions::new(defs).byte_len(), text.len());
        assert_eq!(ToolDefinitions::none().byte_len(), "[]".len());
    }
}
