//! Errors that stop a command before a run exists, and their exit codes.

use fabric_config::ConfigError;
use fabric_core::service::{ErrorCode, ServiceError};
use fabric_domain::RunStatus;
use std::fmt;

/// Exit code for a wrong command line or configuration (as clap uses).
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit code for any other failure.
pub(crate) const EXIT_FAILURE: u8 = 1;

/// A request the user can fix by changing the command line: an unknown pack, model key or
/// run id.
#[derive(Debug)]
pub(crate) struct UsageError(pub(crate) String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Exit code when the model server cannot be used (as a run ending `llm_error`).
pub(crate) const EXIT_LLM_ERROR: u8 = 3;

/// The one place errors are sorted into codes: `(exit code, --json error code)`.
fn classify(error: &anyhow::Error) -> (u8, &'static str) {
    if error.downcast_ref::<ConfigError>().is_some() {
        return (EXIT_USAGE, "config_error");
    }
    if error.downcast_ref::<UsageError>().is_some() {
        return (EXIT_USAGE, "usage_error");
    }
    match error.downcast_ref::<ServiceError>() {
        Some(error) => by_code(error.code()),
        None => (EXIT_FAILURE, "failure"),
    }
}

/// The CLI's table of the service's codes (ADR-097).
fn by_code(code: ErrorCode) -> (u8, &'static str) {
    match code {
        ErrorCode::InvalidRequest
        | ErrorCode::UnknownSpecialist
        | ErrorCode::UnknownModelKey
        | ErrorCode::InvalidProject
        | ErrorCode::RunNotFound
        | ErrorCode::RunNotEnded
        | ErrorCode::CannotContinue => (EXIT_USAGE, "usage_error"),
        ErrorCode::ConfigError => (EXIT_USAGE, "config_error"),
        ErrorCode::ModelUnavailable => (EXIT_LLM_ERROR, "llm_error"),
        ErrorCode::DailyBudgetSpent => (RunStatus::BudgetExceeded.exit_code(), "budget_exceeded"),
        ErrorCode::Cancelled => (RunStatus::Cancelled.exit_code(), "cancelled"),
        ErrorCode::TooManyRuns | ErrorCode::ShuttingDown | ErrorCode::Internal => {
            (EXIT_FAILURE, "failure")
        }
    }
}

pub(crate) fn exit_code(error: &anyhow::Error) -> u8 {
    classify(error).0
}

/// The error as the one JSON object `--json` promises: `{"error": {"code", "message"}}`.
pub(crate) fn json_error(error: &anyhow::Error) -> serde_json::Value {
    let code = classify(error).1;
    serde_json::json!({"error": {"code": code, "message": format!("{error:#}")}})
}
