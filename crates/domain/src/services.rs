//! The outside services the fabric talks to, each a closed set defined once: the config
//! parses into these, and the adapters branch on them.

use serde::Serialize;

/// Which wire protocol a model server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Backend {
    /// Ollama: its native chat API (so `num_ctx` can be set) plus model listing.
    #[serde(rename = "ollama")]
    Ollama,
    /// Any OpenAI-compatible Chat Completions server (vLLM, llama.cpp, LM Studio, cloud).
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic's Messages API (`/v1/messages`), the key in `x-api-key`.
    #[serde(rename = "anthropic")]
    Anthropic,
}

/// Which web search service `web_search` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum SearchProvider {
    /// A SearXNG instance's JSON API (`{base_url}/search?q=...&format=json`); no key.
    #[serde(rename = "searxng")]
    Searxng,
    /// The Brave Search API (`{base_url}/res/v1/web/search`), with the key from the
    /// environment variable `api_key_env` in `X-Subscription-Token`.
    #[serde(rename = "brave")]
    Brave,
}
