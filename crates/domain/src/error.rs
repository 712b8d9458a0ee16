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
}
