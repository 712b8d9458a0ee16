use thiserror::Error;

/// What can go wrong when building domain values from outside input.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DomainError {
    /// A run id that is empty or holds characters that could escape the runs directory.
    #[error("invalid run id `{0}`: run ids hold only letters, digits, `-` and `_`")]
    InvalidRunId(String),
    /// A specialist whose definition is inconsistent.
    #[error("specialist `{id}`: {reason}")]
    InvalidSpecialist {
        /// The specialist's id.
        id: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// A JSON Schema that is not an object schema usable as a tool input.
    #[error("tool `{tool}`: {reason}")]
    InvalidToolSchema {
        /// The tool's name.
        tool: String,
        /// What is wrong.
        reason: String,
    },
    /// A runlog payload that does not fit the struct of its kind, or cannot be written as
    /// JSON.
    #[error("`{kind}` payload: {detail}")]
    InvalidPayload {
        /// The event kind, as written in the runlog.
        kind: &'static str,
        /// What does not fit.
        detail: String,
    },
    /// Text that is not a duration (`--older-than`, `older_than`).
    #[error("`{text}` is not a duration; write a number and a unit: 90s, 30m, 12h, 7d or 2w")]
    NotADuration {
        /// The text given, trimmed.
        text: String,
    },
    /// Text that is not a moment (`--since`, `since`).
    #[error(
        "`{text}` is not a date; write 2026-11-01, 2026-11-01T12:30:00Z, or a duration back from now such as 7d"
    )]
    NotAMoment {
        /// The text given, trimmed.
        text: String,
    },
    /// A tool pattern of the wrong shape.
    #[error(
        "tool pattern `{pattern}`{problem}; expected `mcp__<server>__<tool>` with `*` in the tool part, e.g. `mcp__github__*`"
    )]
    InvalidToolPattern {
        /// The pattern.
        pattern: String,
        /// What is wrong, as it reads after the pattern.
        problem: String,
    },
    /// A finish schema a model cannot fill or `finish_task` cannot check.
    #[error("{reason}")]
    InvalidFinishSchema {
        /// What is wrong, naming the field.
        reason: String,
    },
    /// A `hooks` setting that cannot be used (issue #43).
    #[error("`{key}`: {detail}")]
    InvalidHooks {
        /// Where, e.g. `hooks.PreToolUse[0].matcher`.
        key: String,
        /// What is wrong and what is allowed.
        detail: String,
    },
    /// Arguments that break a tool's input schema: every way, each one sentence.
    #[error("{}", violations.join("; "))]
    InvalidArguments {
        /// The violations, in the schema's order.
        violations: Vec<String>,
    },
}
