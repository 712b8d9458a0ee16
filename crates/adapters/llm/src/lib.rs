//! `fabric-llm`: the model server adapters of agent-fabric.
//!
//! This crate sits on the outside of the hexagon. It implements fabric-core's
//! [`ChatClient`] port for four kinds of server and hands the engine one normalised
//! [`ChatResponse`](fabric_engine::ChatResponse) whatever the server sent:
//!
//! - [`OpenAiClient`]: any OpenAI-compatible Chat Completions server (`/chat/completions`),
//!   whole or streamed as Server-Sent Events.
//! - [`OllamaClient`]: Ollama's native API (`/api/chat`, streamed as NDJSON), which unlike
//!   `/v1` lets us set `num_ctx`; it also lists models and reads their capabilities.
//! - [`AnthropicClient`]: Anthropic's Messages API (`/v1/messages`, streamed as SSE events
//!   with `content_block_delta`s), tools as `tool_use`/`tool_result` blocks.
//! - [`ResponsesClient`]: OpenAI's Responses API (`/v1/responses`, streamed as semantic SSE
//!   events), tools as `function_call`/`function_call_output` items, the whole conversation
//!   sent each time or chained by `previous_response_id`.
//!
//! All share one transport: a pooled HTTP client (our own small HTTP/1.1 client for a plain
//! `http://` server, whose waiting runs then hold nothing but a socket; reqwest for
//! `https://` and proxies; ADR-127), the API key read once from the
//! environment variable the config names, retries with capped exponential backoff on the
//! errors [`ChatError::is_retryable`](fabric_engine::ChatError::is_retryable) allows, and the
//! mapping of every failure onto [`ChatError`](fabric_engine::ChatError). Servers differ in
//! small ways (arguments as a string or an object, missing call ids, `null` content, missing
//! usage); the adapters accept them all, and keep tool arguments as the raw text the model
//! wrote so the engine can report invalid JSON exactly.
//!
//! Discovery and bootstrap ([`probe`], [`OpenAiClient::list_models`],
//! [`OllamaClient::list_models`], [`OllamaClient::pull`]) use the same transport; which model
//! to pick is decided in `fabric_engine::models`, not here.
//!
//! Both clients also implement fabric-core's [`EmbeddingClient`] port (Ollama's
//! `/api/embed`, OpenAI's `/embeddings`), for semantic search over past runs; answers are
//! checked (one vector per text, numbers only, one length) before anyone stores them.
//!
//! [`ModelServers`] is the model servers of a configuration as one adapter: core's
//! `ModelResolver` (start the local server, list, pull, with its caches as its own fields)
//! and `ChatFactory` (a client per model key, built by [`build_client`] from the key's
//! [`ModelConfig`](fabric_domain::ModelConfig) as it is); the binary only builds it from the
//! settings. [`embedding_client`] does the same for embeddings.
#![deny(missing_docs)]

mod anthropic;
mod anthropic_wire;
mod constrained;
mod discover;
mod embed;
mod error;
mod images;
mod limit;
mod lines;
mod ollama;
mod ollama_wire;
mod openai;
mod openai_wire;
mod plain;
mod responses;
mod responses_wire;
mod servers;
mod sse;
mod tls;
mod toolcalls;
mod transport;
mod wire_tools;

use std::sync::Arc;

use fabric_engine::{ChatClient, EmbeddingClient};

pub use anthropic::AnthropicClient;
pub use discover::{PullProgress, probe};
pub use error::ClientBuildError;
pub use fabric_domain::Backend;
pub use fabric_domain::ConstrainedDecoding;
pub use ollama::{OllamaClient, OllamaModel};
pub use openai::OpenAiClient;
pub use responses::{ResponsesClient, SchemaRoute};
pub use servers::{
    LoggedNotices, ModelServers, PullShow, ServerNotices, chat_client, embedding_client, is_local,
};
pub use transport::HttpSettings;

/// Builds the client for `backend`. `num_ctx` is the context window asked of Ollama on
/// every chat; OpenAI-compatible servers have no such setting and ignore it.
pub fn build_client(
    backend: Backend,
    settings: &HttpSettings,
    num_ctx: Option<u32>,
) -> Result<Arc<dyn ChatClient>, ClientBuildError> {
    let client: Arc<dyn ChatClient> = match backend {
        Backend::Ollama => Arc::new(OllamaClient::new(settings, num_ctx)?),
        Backend::OpenAi => Arc::new(OpenAiClient::new(settings)?),
        Backend::Anthropic => Arc::new(AnthropicClient::new(settings)?),
        Backend::OpenAiResponses => Arc::new(ResponsesClient::new(settings)?),
    };
    Ok(match settings.max_concurrent {
        Some(permits) => Arc::new(limit::Limited::new(client, &settings.base_url, permits)),
        None => client,
    })
}

/// Builds the embedding client for `backend`: the same client types as [`build_client`],
/// seen through the [`EmbeddingClient`] port. Ollama needs no `num_ctx` for embeddings.
pub fn build_embedder(
    backend: Backend,
    settings: &HttpSettings,
) -> Result<Arc<dyn EmbeddingClient>, ClientBuildError> {
    Ok(match backend {
        Backend::Ollama => Arc::new(OllamaClient::new(settings, None)?),
        // A server that speaks the Responses API embeds through `/embeddings` as well.
        Backend::OpenAi | Backend::OpenAiResponses => Arc::new(OpenAiClient::new(settings)?),
        Backend::Anthropic => {
            return Err(ClientBuildError::NoEmbeddings {
                backend: "anthropic",
            });
        }
    })
}
