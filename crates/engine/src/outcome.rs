//! How one specialist's loop ended: a leaf, written by the loop ([`crate::engine`]) and read
//! back from the runlog by [`crate::history`], so neither imports the other for it.

use fabric_domain::{RunStatus, Usage};
use serde_json::Value;

/// How one specialist's loop ended.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopOutcome {
    /// The typed status.
    pub status: RunStatus,
    /// The finish payload (or the fallback payload); `null` when the loop failed.
    pub payload: Value,
    /// Model calls made.
    pub steps: u32,
    /// Tokens used.
    pub usage: Usage,
    /// Why it failed, for statuses other than `completed`.
    pub reason: Option<String>,
}

impl LoopOutcome {
    /// An accepted `finish_task`.
    pub(crate) fn completed(payload: Value, steps: u32, usage: Usage) -> Self {
        Self {
            status: RunStatus::Completed,
            payload,
            steps,
            usage,
            reason: None,
        }
    }

    /// A loop that ended without an accepted payload, and why.
    pub(crate) fn failed(status: RunStatus, reason: String, steps: u32, usage: Usage) -> Self {
        Self {
            status,
            payload: Value::Null,
            steps,
            usage,
            reason: Some(reason),
        }
    }
}
