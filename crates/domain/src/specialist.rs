use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{DomainError, ToolSpec};

/// The name of the terminal tool every specialist has (seed ADR-003).
pub const FINISH_TOOL: &str = "finish_task";

/// A specialist agent, as data: what it is for, how it is prompted, which tools it may use
/// and the shape of its final answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecialistSpec {
    /// Unique id, used by `--pack`.
    pub id: String,
    /// One line on what it does.
    pub description: String,
    /// Words in a prompt that suggest this specialist.
    #[serde(default)]
    pub keywords: Vec<String>,
    /// Capabilities it covers, for recruitment.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// The system prompt.
    pub system_prompt: String,
    /// Names of the tools it may use (besides `finish_task`, which every specialist has).
    pub tools: Vec<String>,
    /// JSON Schema of the `finish_task` arguments: its final answer.
    pub finish_schema: Value,
    /// The model key it runs on, unless the run names one.
    #[serde(default)]
    pub model_key: Option<String>,
    /// Whether it may write files; without this it gets no write tools at all.
    #[serde(default = "yes")]
    pub may_write: bool,
    /// Whether it needs the network to do its job.
    #[serde(default)]
    pub needs_network: bool,
}

fn yes() -> bool {
    true
}

impl SpecialistSpec {
    /// The `finish_task` contract generated from the finish schema.
    pub fn finish_tool(&self) -> Result<ToolSpec, DomainError> {
        ToolSpec::with_schema(
            FINISH_TOOL,
            "Call this exactly once, when the task is done, with your final answer. \
             Only call it after you have used the other tools to do and verify the work.",
            self.finish_schema.clone(),
        )
        .map_err(|e| DomainError::InvalidSpecialist {
            id: self.id.clone(),
            reason: format!("finish_schema: {e}"),
        })
    }
}
