//! Errors that stop a command before a run exists, and their exit codes.

use fabric_config::ConfigError;
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

/// The model a request needs cannot be used now: its server cannot be started, none of its
/// models can call tools, a pull failed. The message is the whole cause chain. The CLI
/// treats it as any other failure; the HTTP API answers it 503 `model_unavailable`.
#[derive(Debug)]
pub(crate) struct ModelUnavailable(pub(crate) String);

impl fmt::Display for ModelUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ModelUnavailable {}

pub(crate) fn exit_code(error: &anyhow::Error) -> u8 {
    if error.downcast_ref::<ConfigError>().is_some() || error.downcast_ref::<UsageError>().is_some()
    {
        EXIT_USAGE
    } else {
        EXIT_FAILURE
    }
}

/// The error as the one JSON object `--json` promises: `{"error": {"code", "message"}}`.
pub(crate) fn json_error(error: &anyhow::Error) -> serde_json::Value {
    let code = if error.downcast_ref::<ConfigError>().is_some() {
        "config_error"
    } else if error.downcast_ref::<UsageError>().is_some() {
        "usage_error"
    } else {
        "failure"
    };
    serde_json::json!({"error": {"code": code, "message": format!("{error:#}")}})
}
