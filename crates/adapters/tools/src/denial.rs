//! Recognising a command the OS sandbox stopped.
//!
//! Inside the sandbox a refused action is not a tool error but a failing syscall (`EACCES`,
//! `EPERM`, `EROFS`) or a signal from a resource limit (`SIGXFSZ`, `SIGXCPU`), which the
//! program reports in its own words. A model reading "Permission denied" tends to retry with
//! `sudo` or another path; telling it that the sandbox refused, and what the sandbox allows,
//! ends that loop. The patterns are the messages of libc's `strerror`, Python and Rust,
//! checked only for commands that failed while a sandbox was enforcing.

use fabric_engine::ToolError;
use serde_json::Value;

/// The `event_type` of a command the OS sandbox stopped.
pub(crate) const SANDBOX_DENIED: &str = "sandbox_denied";

/// Output fragments that mean a syscall was refused, and what it was, in words.
const MARKERS: &[(&str, &str)] = &[
    (
        "Permission denied",
        "a file or network access outside what the sandbox allows",
    ),
    (
        "Operation not permitted",
        "a syscall the sandbox forbids (e.g. a socket when the network is off)",
    ),
    ("Read-only file system", "a write outside the workspace"),
    (
        "PermissionError",
        "a file or network access outside what the sandbox allows",
    ),
    (
        "Resource temporarily unavailable",
        "starting more processes than the sandbox's limit",
    ),
    (
        "Cannot allocate memory",
        "more memory than the sandbox's limit",
    ),
    ("MemoryError", "more memory than the sandbox's limit"),
    ("File too large", "a file larger than the sandbox's limit"),
    // Landlock answers a link or rename across its rules with EXDEV.
    (
        "Invalid cross-device link",
        "a link or move between the workspace and a path outside it",
    ),
];

/// Signals the kernel sends when a resource limit is hit.
const SIGXCPU: i64 = 24;
const SIGXFSZ: i64 = 25;

/// What the sandbox allows, for the model.
const ALLOWED: &str = "The OS sandbox lets commands read system files, write only inside the workspace and a private temporary directory ($TMPDIR), and use the network only when the run allows it.";

/// A refusal for a failed command whose output (or end signal) shows the sandbox stopped it.
/// `limits_hit` is what the sandbox itself counted (a cgroup's OOM kills or refused forks),
/// which wins over guessing from the output.
pub(crate) fn detect(
    cmd: &[String],
    result: &Value,
    limits_hit: Option<String>,
) -> Option<ToolError> {
    let stderr = result["stderr"].as_str().unwrap_or_default();
    let stdout = result["stdout"].as_str().unwrap_or_default();
    let why = match (limits_hit, result["signal"].as_i64()) {
        (Some(hit), _) => hit,
        (None, Some(SIGXFSZ)) => {
            "a file larger than the sandbox's size limit (killed by SIGXFSZ)".to_owned()
        }
        (None, Some(SIGXCPU)) => {
            "more CPU time than the sandbox's limit (killed by SIGXCPU)".to_owned()
        }
        _ => MARKERS
            .iter()
            .find(|(text, _)| stderr.contains(text) || stdout.contains(text))
            .map(|(_, why)| (*why).to_owned())?,
    };
    let exit = match result["exit_code"].as_i64() {
        Some(code) => format!("exit code {code}"),
        None => format!("signal {}", result["signal"]),
    };
    let command = cmd.join(" ");
    Some(ToolError::Denied {
        event_type: SANDBOX_DENIED.to_owned(),
        attempted: command.clone(),
        message: format!(
            "command `{command}` failed ({exit}); the OS sandbox most likely refused {why}. {ALLOWED}\nstdout:\n{}\nstderr:\n{}",
            tail(stdout),
            tail(stderr)
        ),
    })
}

/// The last 2 000 characters of a stream, where the error usually is.
fn tail(text: &str) -> String {
    let count = text.chars().count();
    if count <= 2_000 {
        return text.to_owned();
    }
    let tail: String = text.chars().skip(count - 2_000).collect();
    format!("…{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cmd() -> Vec<String> {
        vec!["touch".to_owned(), "/etc/x".to_owned()]
    }

    #[test]
    fn permission_denied_is_a_sandbox_refusal() {
        let result = json!({"exit_code": 1, "stdout": "", "stderr": "touch: cannot touch '/etc/x': Permission denied"});
        let Some(ToolError::Denied {
            event_type,
            attempted,
            message,
        }) = detect(&cmd(), &result, None)
        else {
            panic!("not detected");
        };
        assert_eq!(event_type, SANDBOX_DENIED);
        assert_eq!(attempted, "touch /etc/x");
        assert!(message.contains("exit code 1"), "{message}");
        assert!(message.contains("Permission denied"), "{message}");
    }

    #[test]
    fn limit_signals_are_refusals_and_plain_failures_are_not() {
        let result = json!({"exit_code": null, "signal": 25, "stdout": "", "stderr": ""});
        assert!(detect(&cmd(), &result, None).is_some());
        let result = json!({"exit_code": 1, "stdout": "", "stderr": "no such file"});
        assert!(detect(&cmd(), &result, None).is_none());
    }
}
