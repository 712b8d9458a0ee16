//! The outside services the fabric talks to, each a closed set defined once: the config
//! parses into these, and the adapters branch on them.

use crate::words::closed_set;

closed_set! {
    /// Which wire protocol a model server speaks.
    pub enum Backend {
        /// Ollama: its native chat API (so `num_ctx` can be set) plus model listing.
        #[default]
        Ollama = "ollama",
        /// Any OpenAI-compatible Chat Completions server (vLLM, llama.cpp, LM Studio, cloud).
        /// `generic` is the seed's name for it.
        OpenAi = "openai" | "generic" | "vllm",
        /// Anthropic's Messages API (`/v1/messages`), the key in `x-api-key`.
        Anthropic = "anthropic",
        /// OpenAI's Responses API (`/v1/responses`): OpenAI's own models, and servers that
        /// speak it (llama.cpp's `llama-server`, vLLM).
        OpenAiResponses = "openai-responses",
    }
}

closed_set! {
    /// How a Responses API model key sends a conversation (`models.<key>.response_chaining`).
    pub enum ResponseChaining {
        /// The whole conversation every time, with `store: false`: the server keeps nothing,
        /// and the reasoning items the model returned are sent back with their turn.
        #[default]
        FullInput = "full_input",
        /// Only what follows the last answer, with `previous_response_id`: the server keeps
        /// the rest (`store: true`); a turn it does not know is sent whole.
        PreviousResponseId = "previous_response_id",
    }
}

closed_set! {
    /// Why a step was asked of the cloud model instead of the local one: the words of
    /// `cloud_fallback.policy` and of a `cloud_fallback` event's `reason`.
    pub enum FallbackReason {
        /// The local model answered without a tool call.
        #[default]
        NoToolCalls = "no_tool_calls",
        /// The local model sent invalid arguments two steps in a row.
        MalformedArgs = "malformed_args",
        /// The critic rejected the work: the repair runs on the cloud model.
        CriticRejected = "critic_rejected",
    }
}

closed_set! {
    /// How a model key gets its tool calls (`models.<key>.constrained_decoding`; issue #24).
    pub enum ConstrainedDecoding {
        /// Native tool calling only.
        #[default]
        Off = "off",
        /// Every call is asked for as one JSON object that must match a tool's call shape (the
        /// server's grammar sampler enforces it); the tools are described in the system prompt.
        JsonSchema = "json_schema",
        /// Native tool calling until the server refuses `tools` (a chat template without tool
        /// calling); then JSON Schema, for the rest of the process.
        Auto = "auto",
    }
}

closed_set! {
    /// Which web search service `web_search` asks (`web_search.provider`).
    pub enum SearchProvider {
        /// A SearXNG instance's JSON API (`{base_url}/search?q=...&format=json`); no key.
        #[default]
        Searxng = "searxng",
        /// The Brave Search API (`{base_url}/res/v1/web/search`), with the key from the
        /// environment variable `api_key_env` in `X-Subscription-Token`.
        Brave = "brave",
    }
}

/// The server a base URL names, as one key: scheme, host and port, with the loopback names
/// (`localhost`, `127.0.0.1`, `[::1]`) as one and the path dropped, so `http://localhost:11434`
/// and `http://127.0.0.1:11434/v1` are the same Ollama. For limits per server.
pub fn endpoint_key(base_url: &str) -> String {
    let url = base_url.trim();
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port))
            if !host.ends_with(']') || authority.starts_with('[') && !port.contains(']') =>
        {
            (host, port.to_owned())
        }
        _ => (authority, String::new()),
    };
    let port = if port.is_empty() {
        if scheme.eq_ignore_ascii_case("https") {
            "443"
        } else {
            "80"
        }
        .to_owned()
    } else {
        port
    };
    let host = host.to_ascii_lowercase();
    let host = match host.as_str() {
        "localhost" | "127.0.0.1" | "[::1]" => "loopback",
        other => other,
    };
    format!("{}://{host}:{port}", scheme.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_14_one_server_is_one_endpoint() {
        assert_eq!(
            endpoint_key("http://localhost:11434"),
            "http://loopback:11434"
        );
        assert_eq!(
            endpoint_key("http://127.0.0.1:11434/v1/"),
            "http://loopback:11434"
        );
        assert_eq!(
            endpoint_key("http://[::1]:11434/v1"),
            "http://loopback:11434"
        );
        assert_eq!(
            endpoint_key("https://api.openai.com/v1"),
            "https://api.openai.com:443"
        );
        assert_ne!(
            endpoint_key("http://localhost:8000"),
            endpoint_key("http://localhost:11434")
        );
    }
}
