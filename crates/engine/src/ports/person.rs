//! The person a run works with (issue #42): whoever started it, by the channel they used (a
//! terminal, `fabric serve`, an A2A client, an MCP client). The loop asks them its model's
//! questions and the approvals its specialist's policy wants, and takes what they said to the
//! run while it worked (steering) at each step boundary.

use async_trait::async_trait;
use fabric_domain::runlog::{InputAnswered, InputRequired, UserMessage};
use serde::{Deserialize, Serialize};

/// What asking came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Answered now (a terminal, an MCP client's elicitation, a pending answer of a run
    /// continued after its wait, `--on-question answer=TEXT`).
    Answered(InputAnswered),
    /// The answer will come later: the run records the request and lets go of its process
    /// (status `input_required`); the answer continues it. `expires_at`: when an unanswered
    /// wait ends the run `unanswered` (seconds since the Unix epoch).
    Wait {
        /// When the wait ends unanswered, if ever.
        expires_at: Option<f64>,
    },
    /// No one can answer by this channel, for this reason (the channel's words: "it runs
    /// without a terminal"); the model is told so, exactly.
    Unavailable(String),
    /// No one can answer and the run must not go on without (`--on-question fail`): it ends
    /// `unanswered` for this reason.
    Fail(String),
}

/// Whoever started the run, as the loop reaches them.
#[async_trait]
pub trait Person: Send + Sync {
    /// Asks `request` (its `expires_at` is not set yet: the reply's wait sets it). The loop
    /// races this against the run's cancellation.
    async fn ask(&self, request: &InputRequired) -> Reply;

    /// What was said to the run since the last call, oldest first; each is taken once.
    async fn said(&self) -> Vec<UserMessage> {
        Vec::new()
    }
}

/// What a run finds in its inbox in the store (docs/INTERACTIVE.md): left by any process
/// that shares the store, taken by the process that runs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum InboxItem {
    /// What a person said to the run (steering): the model gets it at the next step.
    Message(UserMessage),
    /// A person's answer to the question or approval the run waits for.
    Answer(InputAnswered),
}
