//! The payloads of a run that works with a person (issue #42): a question or an approval it
//! waits for, the answer it got, and a message a person said to it while it worked.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a run asks a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// A question of the model's (`ask_user`).
    Question,
    /// Whether a tool call may run (the specialist's approval policy).
    Approval,
}

/// How a person decided an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// This call may run.
    Approve,
    /// This call, and every later call the same rule would ask about, in this run.
    ApproveForRun,
    /// Not this call; the answer's text is the reason the model is given.
    Deny,
}

impl Decision {
    /// The decision as written in runlogs and APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::ApproveForRun => "approve_for_run",
            Self::Deny => "deny",
        }
    }

    /// The decision an answer starts with and the reason after it (`deny: not on main`);
    /// `None` when its first word decides nothing.
    pub fn leading(text: &str) -> Option<(Self, &str)> {
        let text = text.trim();
        let (word, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
        Self::parse(word.trim_end_matches([':', ',', '.'])).map(|d| (d, rest.trim()))
    }

    /// Reads a decision as a person or a client spells it.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "approve" | "yes" | "y" | "allow" | "allow_once" => Some(Self::Approve),
            "approve_for_run" | "always" | "a" | "allow_always" => Some(Self::ApproveForRun),
            "deny" | "no" | "n" | "reject" | "reject_once" => Some(Self::Deny),
            _ => None,
        }
    }
}

/// `input_required`: the run waits for a person's answer to this. Written before the run
/// lets go of its process; the call it belongs to has its `tool_call` already and gets its
/// result once answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputRequired {
    /// The model's call this belongs to (`ask_user`'s own call, or the call to approve).
    pub call_id: String,
    /// A question or an approval.
    pub input: InputKind,
    /// What is asked, as a person reads it.
    pub question: String,
    /// The answers offered (a question's choices); empty: any text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
    /// For an approval: the tool whose call waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// For an approval: the call's arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// When an unanswered wait ends the run `unanswered` (seconds since the Unix epoch);
    /// absent: it waits as long as it takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<f64>,
}

/// `input_answered`: a person answered the run's question or approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputAnswered {
    /// The call the answer belongs to.
    pub call_id: String,
    /// The answer's text (an approval's reason, if any).
    pub answer: String,
    /// An approval's decision; absent for a question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// Who answered: `terminal`, `http`, `a2a`, `mcp`, `flag` (`--on-question answer=`),
    /// `policy` (an earlier approve-for-run).
    pub by: String,
}

/// `user_message`: a person said this to the run while it worked (steering); the model gets
/// it as a user message at the step boundary where this line stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    /// What was said.
    pub text: String,
    /// By which channel: `cli`, `http`, `chat`, `viewer`.
    pub by: String,
}
