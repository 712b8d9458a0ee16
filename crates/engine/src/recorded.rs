//! One step of a member's loop as its runlog recorded it: a leaf, built by [`crate::history`]
//! when it reads a runlog back and replayed by the loop ([`crate::engine`]), so neither
//! imports the other for it.

use fabric_domain::Usage;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

use crate::ports::ChatResponse;

/// One step of a member's loop as recorded.
#[derive(Debug, Clone)]
pub struct RecordedStep {
    /// The step number.
    pub step: u32,
    /// The model's answer; `None` when the call was in flight when the process stopped.
    pub response: Option<ChatResponse>,
    /// Tokens of earlier answers to the same step that a cloud fallback replaced.
    pub replaced_usage: Usage,
    /// The calls whose `tool_call` was written (they were started).
    pub started: HashSet<String>,
    /// The settled calls, by call id.
    pub outcomes: HashMap<String, RecordedOutcome>,
    /// The tools a repair recovered from the answer's text (`tool_call_repaired`), if any.
    pub repaired_tools: Option<Vec<String>>,
    /// The model's summary a compaction before this step used (`context_compacted`).
    pub summary: Option<String>,
    /// What a person said to the run before this step's model call (`user_message`).
    pub said: Vec<String>,
}

/// How a recorded call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordedOutcome {
    /// `tool_result`: the text the model was given, or the `finish_task` payload.
    Result(Value),
    /// `tool_error`: exactly what the model was told.
    Error(String),
}

impl RecordedStep {
    /// A step whose answer is not recorded (yet).
    pub(crate) fn new(step: u32) -> Self {
        Self {
            step,
            response: None,
            replaced_usage: Usage::default(),
            started: HashSet::new(),
            outcomes: HashMap::new(),
            repaired_tools: None,
            summary: None,
            said: Vec::new(),
        }
    }
}
