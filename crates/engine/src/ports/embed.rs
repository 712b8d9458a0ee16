//! The embedding port: turning texts into vectors, for semantic search over past runs.

use async_trait::async_trait;

use super::chat::ChatError;

/// A server that makes embeddings (Ollama's `/api/embed`, OpenAI's `/v1/embeddings`).
///
/// It reuses [`ChatError`] rather than an error of its own: embeddings come from the same
/// model servers, over the same transport, and fail the same ways (unreachable, timeout,
/// HTTP status, unknown model, an answer that does not parse), so one vocabulary serves
/// both and callers can keep one error path. Adapters wrap every failure in
/// [`ChatError::Embedding`], so the message names the model as well as the server;
/// malformed answers (vectors of different lengths, a missing vector, a value that is not a
/// number) are a [`ChatError::Decode`] inside it.
#[async_trait]
pub trait EmbeddingClient: Send + Sync {
    /// One vector per input, in the order of `inputs`, all of the same length. An empty
    /// `inputs` gives an empty answer without calling the server.
    async fn embed(&self, model: &str, inputs: &[String]) -> Result<Vec<Vec<f32>>, ChatError>;
}
