//! The run's model, lent to a tool's server: an MCP server's `sampling/createMessage` is
//! answered through this port by the member's own model key, inside the run's budget
//! (issue #29). The engine hands one to each member's tools in [`ToolContext`]; the MCP
//! adapter never sees a chat client.
//!
//! [`ToolContext`]: crate::ToolContext

use async_trait::async_trait;
use fabric_domain::{Message, Usage};
use thiserror::Error;

/// What a server asks the model.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleRequest {
    /// The conversation (user and assistant turns), with the server's system prompt first
    /// when it gave one.
    pub messages: Vec<Message>,
    /// Most tokens the answer may use (the server's `maxTokens`).
    pub max_tokens: u32,
    /// The server's temperature, if it asked for one.
    pub temperature: Option<f32>,
}

/// The model's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    /// Its text.
    pub text: String,
    /// The model key that answered.
    pub model_key: String,
    /// The model that answered.
    pub model: String,
    /// Why it stopped, in MCP's words (`endTurn`, `maxTokens`).
    pub stop_reason: &'static str,
    /// Tokens used (charged to the run's budget).
    pub usage: Usage,
}

/// Why a server's request got no completion.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum SampleError {
    /// The run's budget (steps, tokens, cost or time) does not allow another model call.
    #[error("{0}")]
    Budget(String),
    /// The run was cancelled.
    #[error("the run was cancelled")]
    Cancelled,
    /// The model call failed.
    #[error("{0}")]
    Model(String),
}

/// Answers a server's request for a completion with the run's model.
#[async_trait]
pub trait Sampler: Send + Sync {
    /// One completion for `request`, counted in the run's budget.
    async fn sample(&self, request: SampleRequest) -> Result<Sampled, SampleError>;
}

impl std::fmt::Debug for dyn Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sampler")
    }
}
