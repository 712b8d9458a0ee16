use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

use crate::DomainError;

/// The id of one run. Ids sort by the time the run started (see `fabric-store-fs`), and hold
/// only characters that are safe as a directory name. Shared text: a run's id is cloned into
/// every part that serves it (its registry entry, its live run, its task, the store's
/// writer, its tools' context), each clone a count rather than an allocation (issue #45).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(try_from = "String")]
pub struct RunId(Arc<str>);

impl Serialize for RunId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl RunId {
    /// Checks an id given by a user or read from disk.
    pub fn parse(text: &str) -> Result<Self, DomainError> {
        let ok = !text.is_empty()
            && text.len() <= 128
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if ok {
            Ok(Self(Arc::from(text)))
        } else {
            Err(DomainError::InvalidRunId(text.to_owned()))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for RunId {
    type Error = DomainError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<RunId> for String {
    fn from(id: RunId) -> Self {
        id.0.as_ref().to_owned()
    }
}

impl fmt::Display for RunId {
    // `pad`, not `write_str`: tables line up with `{:<29}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// How a run ended (or that it has not yet). A closed set: the CLI's exit code, the HTTP
/// status and the runlog's last event all follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Still going.
    Running,
    /// The model called `finish_task` with a valid payload.
    Completed,
    /// The model kept answering in plain text; the payload was built from its last text.
    CompletedWithoutFinish,
    /// A task force where some members produced results and others failed: the result holds
    /// the results that exist and names the members that failed.
    Partial,
    /// The step limit was reached before `finish_task`.
    MaxStepsExceeded,
    /// The budget shared by a run and the runs it delegated to (steps, tokens, time) was used
    /// up before `finish_task`.
    BudgetExceeded,
    /// The model server failed (unreachable, error status, undecodable answer) after retries.
    LlmError,
    /// The model cannot call tools.
    ModelUnsupported,
    /// The user or the server cancelled the run.
    Cancelled,
    /// Something inside the fabric failed (for example the runlog could not be written).
    Failed,
    /// The process running it stopped (killed, crashed) and the run could not be continued:
    /// its specialist or model key is gone, its workspace is gone, or the configuration no
    /// longer allows what it needs. The reason says which (docs/DURABILITY.md).
    Interrupted,
    /// The critic rejected the work as many times as `max_repair_rounds` allows (or could
    /// not review it); the staged changes were kept, not applied (docs/QUALITY.md).
    QualityGateFailed,
    /// The conversation could not be made to fit the model's context window, even with
    /// only the system prompt, the task and the last turn left (docs/LOCAL_MODELS.md).
    ContextWindowExceeded,
    /// The model kept repeating one call with the same result after it was told so and the
    /// repeat was refused (`loop_detected`; docs/LOCAL_MODELS.md).
    Stalled,
    /// Waiting for a person: a question (`ask_user`) or an approval (`input_required`).
    /// Not an end: the run holds no process, and an answer continues it (docs/INTERACTIVE.md).
    InputRequired,
    /// A question or approval went unanswered: its wait timed out, or the run was started
    /// with `--on-question fail` and no one could answer.
    Unanswered,
}

impl RunStatus {
    /// Every status, for documentation checks and listings.
    pub const ALL: [RunStatus; 16] = [
        Self::Running,
        Self::Completed,
        Self::CompletedWithoutFinish,
        Self::Partial,
        Self::MaxStepsExceeded,
        Self::BudgetExceeded,
        Self::LlmError,
        Self::ModelUnsupported,
        Self::Cancelled,
        Self::Failed,
        Self::Interrupted,
        Self::QualityGateFailed,
        Self::ContextWindowExceeded,
        Self::Stalled,
        Self::InputRequired,
        Self::Unanswered,
    ];

    /// The status as written in runlogs and APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Completed => "completed",
            Self::CompletedWithoutFinish => "completed_without_finish",
            Self::Partial => "partial",
            Self::MaxStepsExceeded => "max_steps_exceeded",
            Self::BudgetExceeded => "budget_exceeded",
            Self::LlmError => "llm_error",
            Self::ModelUnsupported => "model_unsupported",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
            Self::Interrupted => "interrupted",
            Self::QualityGateFailed => "quality_gate_failed",
            Self::ContextWindowExceeded => "context_window_exceeded",
            Self::Stalled => "stalled",
            Self::InputRequired => "input_required",
            Self::Unanswered => "unanswered",
        }
    }

    /// Whether the run produced a result the user asked for.
    pub fn is_success(self) -> bool {
        match self {
            Self::Completed | Self::CompletedWithoutFinish => true,
            Self::Running
            | Self::Partial
            | Self::MaxStepsExceeded
            | Self::BudgetExceeded
            | Self::LlmError
            | Self::ModelUnsupported
            | Self::Cancelled
            | Self::Failed
            | Self::Interrupted
            | Self::QualityGateFailed
            | Self::ContextWindowExceeded
            | Self::Stalled
            | Self::InputRequired
            | Self::Unanswered => false,
        }
    }

    /// Whether the run has ended: every status but `running` and `input_required` (a run
    /// waiting for a person goes on once answered).
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Running | Self::InputRequired)
    }

    /// Whether the run produced a result payload: every success, and a partial task force.
    pub fn has_result(self) -> bool {
        self.is_success() || self == Self::Partial
    }

    /// The process exit code the CLI uses for this status (documented in docs/CLI.md).
    pub fn exit_code(self) -> u8 {
        match self {
            Self::Completed | Self::CompletedWithoutFinish => 0,
            Self::Failed | Self::Running => 1,
            Self::LlmError => 3,
            Self::ModelUnsupported => 4,
            Self::MaxStepsExceeded
            | Self::BudgetExceeded
            | Self::ContextWindowExceeded
            | Self::Stalled => 5,
            // Not 0: a script must notice that part of the work is missing.
            Self::Partial => 6,
            Self::Cancelled => 130,
            Self::Interrupted => 7,
            Self::QualityGateFailed => 8,
            // Waiting for a person: `fabric answer` continues it.
            Self::InputRequired => 9,
            Self::Unanswered => 10,
        }
    }
}

impl fmt::Display for RunStatus {
    // `pad`, not `write_str`: tables line up with `{:<24}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_every_status_once() {
        // A new variant breaks this match until it is listed in `ALL` too.
        let position = |s: RunStatus| match s {
            RunStatus::Running
            | RunStatus::Completed
            | RunStatus::CompletedWithoutFinish
            | RunStatus::Partial
            | RunStatus::MaxStepsExceeded
            | RunStatus::BudgetExceeded
            | RunStatus::LlmError
            | RunStatus::ModelUnsupported
            | RunStatus::Cancelled
            | RunStatus::Failed
            | RunStatus::Interrupted
            | RunStatus::QualityGateFailed
            | RunStatus::ContextWindowExceeded
            | RunStatus::Stalled
            | RunStatus::InputRequired
            | RunStatus::Unanswered => RunStatus::ALL.iter().position(|x| *x == s),
        };
        for s in RunStatus::ALL {
            assert!(position(s).is_some());
            let text = serde_json::to_string(&s).unwrap_or_default();
            assert_eq!(text, format!("\"{}\"", s.as_str()));
        }
        let mut seen: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), RunStatus::ALL.len());
    }

    #[test]
    fn run_ids_refuse_path_characters() {
        assert!(RunId::parse("20261122-101010-000-abcdef").is_ok());
        for bad in ["", "..", "a/b", "a\\b", "a b", "../x"] {
            assert!(RunId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn issue_14_ids_and_statuses_take_a_width() {
        let id = RunId::parse("20261122-101010-000-abcdef").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(format!("{id:<30}|"), "20261122-101010-000-abcdef    |");
        assert_eq!(format!("{:<12}|", RunStatus::Failed), "failed      |");
    }

    #[test]
    fn status_names_round_trip() {
        for status in [
            RunStatus::Running,
            RunStatus::Completed,
            RunStatus::CompletedWithoutFinish,
            RunStatus::Partial,
            RunStatus::MaxStepsExceeded,
            RunStatus::BudgetExceeded,
            RunStatus::LlmError,
            RunStatus::ModelUnsupported,
            RunStatus::Cancelled,
            RunStatus::Failed,
            RunStatus::Interrupted,
            RunStatus::QualityGateFailed,
            RunStatus::ContextWindowExceeded,
            RunStatus::Stalled,
        ] {
            let text = serde_json::to_string(&status).unwrap_or_default();
            assert_eq!(text, format!("\"{}\"", status.as_str()));
        }
    }
}
