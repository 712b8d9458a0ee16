//! `fabric-scripted-llm`: a scripted fake of an LLM model server, for tests and `fabric mock-llm`.
//!
//! Tests of the `fabric` binary and of its LLM adapter need a real HTTP server that behaves
//! like Ollama, an OpenAI-compatible server, Anthropic's Messages API or OpenAI's Responses
//! API, but answers from a script instead of a model,
//! so that runs are fast and deterministic. Users reuse the same server, through the
//! `fabric-scripted-llm` binary, to test their own specialists against a scripted model.
//!
//! Where it sits: outside the hexagon. It fakes the outside world, so it depends on no fabric
//! crate (`fabric-test-support`'s `tests/layers.rs` checks it). It holds the server alone, no
//! test helpers, so the `fabric` binary ships it as `fabric mock-llm`; tests reach it through
//! `fabric-test-support`, which re-exports it (ADR-100).
//!
//! Layout:
//! - [`scenario`]: the script format ([`Scenario`], [`Turn`], [`ScriptedCall`], [`ModelInfo`]),
//!   loaded from JSON or YAML.
//! - `server`: binding, routing, the one turn counter the wires share, recording, shutdown.
//! - `openai`: `POST /v1/chat/completions` (JSON or SSE) and `GET /v1/models` (which
//!   Anthropic's model listing reads too).
//! - `anthropic`: `POST /v1/messages` (JSON or SSE, tool inputs split across
//!   `input_json_delta`s), refusing requests without `anthropic-version` or `x-api-key`.
//! - `responses`: `POST /v1/responses` (JSON or semantic SSE events, arguments split across
//!   `response.function_call_arguments.delta`s), answers kept by id for requests chained by
//!   `previous_response_id`.
//! - `ollama`: `POST /api/chat` (JSON or NDJSON), `/api/tags`, `/api/show`, `/api/version`,
//!   `POST /api/pull` (NDJSON progress).
//! - `embed`: `POST /api/embed` and `POST /v1/embeddings`, answered for any input with
//!   [`hash_embedding`]: deterministic vectors in which texts sharing words are close, so
//!   semantic search can be tested without a model. `embeddings: down` in the scenario, or
//!   [`ScriptedServer::set_embeddings_down`], makes them answer 503.
//!
//! ```no_run
//! use fabric_scripted_llm::{Scenario, ScriptedServer, Turn};
//! use serde_json::json;
//!
//! # async fn demo() -> anyhow::Result<()> {
//! let server = ScriptedServer::start(Scenario::new(vec![
//!     Turn::tool_call("read_file", json!({ "path": "notes.txt" })),
//!     Turn::text("The notes say hello."),
//! ]))
//! .await?;
//! // Point the client under test at server.base_url() (OpenAI) or server.root_url() (Ollama),
//! // run it, then check what it sent:
//! assert_eq!(server.chat_request_count(), 2);
//! let first = &server.requests()[0].body;
//! # let _ = first;
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! The same script as a YAML file (see `scenarios/` in this crate for more):
//!
//! ```yaml
//! models:
//!   - { name: "qwen2.5:7b", parameter_size: "7.6B", family: qwen2, capabilities: [completion, tools] }
//! turns:
//!   - tool_calls:
//!       - { name: read_file, arguments: { path: notes.txt } }
//!   - content: The notes say hello.
//! ```

mod anthropic;
mod embed;
mod ollama;
mod openai;
mod responses;
pub mod scenario;
mod server;

pub use embed::hash_embedding;
pub use scenario::{
    DEFAULT_EMBEDDING_DIMS, EmbeddingsMode, ModelInfo, OnExhausted, Scenario, ScenarioError,
    ScriptedCall, Turn, TurnBy, UsageSpec,
};
pub use server::{RecordedRequest, ScriptedServer, ServerError};
