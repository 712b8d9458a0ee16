//! A model key (`models.<key>` in the config file) and the cloud fallback
//! (`cloud_fallback:`): one validated type each, from the config loader to the run's
//! preparation and the model server adapter (issue #41, ADR-098). The config loader
//! produces them; `fabric-core` and `fabric-llm` take them as they are.

use serde::{Serialize, Serializer};

use crate::{Backend, Usage};

/// One model the fabric can use, under a key such as `fast` or `quality`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelConfig {
    /// Server base URL, e.g. `http://localhost:11434/v1`.
    pub base_url: String,
    /// Model name on the server.
    pub model: String,
    /// Wire protocol.
    pub backend: Backend,
    /// Name of the environment variable holding the API key, if the server needs one.
    pub api_key_env: Option<String>,
    /// Sampling temperature.
    pub temperature: f32,
    /// Nucleus sampling.
    pub top_p: f32,
    /// Most tokens generated per call.
    pub max_tokens: u32,
    /// Seconds to wait for one answer.
    pub timeout_s: u64,
    /// Ollama context size; large enough that tool definitions are never cut.
    pub num_ctx: u32,
    /// Retries on connection errors, 429 and 5xx.
    pub max_retries: u32,
    /// What its tokens cost in US dollars per million, `(input, output)`, for the cost
    /// budget (`price_per_mtok`); `None`: not priced.
    pub price_per_mtok: Option<Price>,
    /// Most requests at once to this key's server, from every run of the process
    /// (`max_concurrent_requests`); `None`: by backend, see
    /// [`ModelConfig::concurrent_requests`].
    pub max_concurrent_requests: Option<u32>,
    /// The model's context window in tokens (`context_window`), for servers that do not
    /// report it; Ollama's is `num_ctx` (or the model's own length, when smaller).
    pub context_window: Option<u32>,
    /// Recover tool calls the server hands back as text (`tool_call_repair`); `None`: by
    /// backend (on for Ollama, off for the others), see [`ModelConfig::repairs_tool_calls`].
    pub tool_call_repair: Option<bool>,
    /// How tool calls are asked for (`constrained_decoding`); `None`: by backend, see
    /// [`ModelConfig::constrained`].
    pub constrained_decoding: Option<crate::ConstrainedDecoding>,
    /// How a Responses API key sends a conversation (`response_chaining`, only for
    /// `backend: openai-responses`).
    pub response_chaining: crate::ResponseChaining,
    /// The model reads images (`vision`): the images a tool returns (an MCP tool's image
    /// blocks) go to it in its backend's shape; off, they reach it as a placeholder text.
    pub vision: bool,
}

/// Requests a local Ollama serves at once by default (its own default, unless
/// `OLLAMA_NUM_PARALLEL` says otherwise).
pub const DEFAULT_OLLAMA_PARALLEL: u32 = 4;

/// Requests at once to an OpenAI-compatible or Anthropic server by default (issue #26): no
/// server serves a thousand at once (llama.cpp has a few slots, vLLM 256 sequences), and
/// every request waiting at the server holds a connection (about 43 KiB a run in flight);
/// waiting here costs nothing. Raise it for a server that serves more (vLLM, a cloud API
/// with a high rate limit).
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: u32 = 16;

impl ModelConfig {
    /// Model `model` at `base_url` spoken to in `backend`'s protocol, with the built-in
    /// settings of a key the config file does not change (temperature 0.1, top-p 0.9, 1200
    /// tokens an answer, 300 s, a 16384-token Ollama context, 3 retries, no price).
    pub fn new(backend: Backend, base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            backend,
            api_key_env: None,
            temperature: 0.1,
            top_p: 0.9,
            max_tokens: 1200,
            timeout_s: 300,
            num_ctx: 16_384,
            max_retries: 3,
            price_per_mtok: None,
            max_concurrent_requests: None,
            context_window: None,
            tool_call_repair: None,
            constrained_decoding: None,
            response_chaining: crate::ResponseChaining::default(),
            vision: false,
        }
    }

    /// Most requests at once to this key's server: as configured; for an Ollama on this
    /// machine `OLLAMA_NUM_PARALLEL` (read from the fabric's own environment), else 4 for
    /// any Ollama; 16 for OpenAI-compatible and Anthropic servers
    /// ([`DEFAULT_MAX_CONCURRENT_REQUESTS`]). Always a limit since issue #26.
    pub fn concurrent_requests(&self) -> Option<u32> {
        if self.max_concurrent_requests.is_some() {
            return self.max_concurrent_requests;
        }
        let local = crate::endpoint_key(&self.base_url).contains("://loopback:");
        Some(match self.backend {
            Backend::Ollama if local => std::env::var("OLLAMA_NUM_PARALLEL")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .filter(|n| *n > 0)
                .unwrap_or(DEFAULT_OLLAMA_PARALLEL),
            Backend::Ollama => DEFAULT_OLLAMA_PARALLEL,
            Backend::OpenAi | Backend::Anthropic | Backend::OpenAiResponses => {
                DEFAULT_MAX_CONCURRENT_REQUESTS
            }
        })
    }

    /// Whether tool calls written as text are recovered for this key: as configured, else
    /// for Ollama (whose parser misses calls in a model's own format) and not for cloud
    /// and other OpenAI-compatible servers.
    pub fn repairs_tool_calls(&self) -> bool {
        self.tool_call_repair
            .unwrap_or(self.backend == Backend::Ollama)
    }

    /// The API key variable this key needs and the environment lacks: Anthropic's API
    /// takes no request without a key, and a key that names `api_key_env` says its server
    /// needs one, so a run is refused before its first call rather than failing on the
    /// server's 401 (issue #40: any backend). `None` when nothing is missing.
    pub fn missing_api_key(&self) -> Option<&str> {
        let var = match (self.backend, self.api_key_env.as_deref()) {
            (_, Some(var)) => var,
            (Backend::Anthropic, None) => "ANTHROPIC_API_KEY",
            (_, None) => return None,
        };
        std::env::var(var)
            .map_or(true, |v| v.trim().is_empty())
            .then_some(var)
    }

    /// What to do about [`ModelConfig::missing_api_key`], for this model, called `key`.
    pub fn missing_api_key_fix(&self, key: &str, var: &str) -> String {
        match self.backend {
            Backend::Anthropic => format!(
                "`{var}` is not set; export it with your Anthropic API key (or name another variable in `models.{key}.api_key_env`)"
            ),
            _ => format!(
                "`{var}` (`models.{key}.api_key_env`) is not set; export it with the API key of {}, or remove `api_key_env` if the server needs no key",
                self.base_url
            ),
        }
    }

    /// The context window: Ollama's is the `num_ctx` the fabric sends (or the model's
    /// trained length when smaller); other servers' is `context_window` when configured,
    /// else what the server `reported`.
    pub fn window(&self, reported: Option<u64>) -> Option<u32> {
        let reported = reported.and_then(|t| u32::try_from(t).ok());
        match self.backend {
            Backend::Ollama => Some(self.num_ctx.min(reported.unwrap_or(u32::MAX))),
            _ => self.context_window.or(reported),
        }
    }

    /// How tool calls are asked for: as configured, else `auto` for OpenAI-compatible
    /// servers (JSON Schema once the server refuses `tools`) and `off` for the others.
    pub fn constrained(&self) -> crate::ConstrainedDecoding {
        use crate::ConstrainedDecoding as C;
        self.constrained_decoding.unwrap_or(match self.backend {
            Backend::OpenAi => C::Auto,
            Backend::Ollama | Backend::Anthropic | Backend::OpenAiResponses => C::Off,
        })
    }
}

/// What a model key's tokens cost, in US dollars per million (`price_per_mtok`). Written
/// `[input, output]` by `fabric config show`, as the file's pair always was.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// Per million prompt tokens.
    pub input_per_mtok: f64,
    /// Per million completion tokens.
    pub output_per_mtok: f64,
}

impl Price {
    /// What `usage` cost.
    pub fn of(self, usage: Usage) -> f64 {
        (usage.prompt_tokens as f64 * self.input_per_mtok
            + usage.completion_tokens as f64 * self.output_per_mtok)
            / 1_000_000.0
    }
}

impl Serialize for Price {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (self.input_per_mtok, self.output_per_mtok).serialize(serializer)
    }
}

/// The cloud model a step falls back to when the local one fails by quality (seed 000
/// ADR-008, config `cloud_fallback:`; docs/QUALITY.md): its key, when steps go to it, and
/// how often.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FallbackPolicy {
    /// The model key asked instead.
    pub model_key: String,
    /// Fall back when the local model answers without a tool call.
    pub no_tool_calls: bool,
    /// Fall back when the local model sent invalid arguments two steps in a row (the
    /// corrective error message did not help).
    pub malformed_args: bool,
    /// Fall back (for the repair) when the critic rejected the work.
    pub critic_rejected: bool,
    /// Most fallbacks in one run's tree: its members, its critic's reviews and the runs
    /// it delegates to, together.
    pub max_per_run: u32,
}
