//! The payload of a lifecycle hook's run (issue #43, docs/HOOKS.md).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::HookOutcome;

/// `hook_run`: one hook ran for one event, and what its answer came to. A replay reads
/// these back instead of running the hooks again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookRun {
    /// The event, as Claude Code spells it (`PreToolUse`).
    pub event: String,
    /// Where the hook was configured: `config` (the fabric's config file) or `project` (a
    /// trusted project's `.claude/settings.json`).
    pub source: String,
    /// Its group's matcher, as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matcher: Option<String>,
    /// The command.
    pub command: String,
    /// The tool of the call it was about (PreToolUse, PostToolUse).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The call it was about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// How long it ran.
    pub duration_ms: u64,
    /// Its exit code; absent when it did not exit by itself (timeout, crash, not started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// What its answer came to.
    pub outcome: HookOutcome,
    /// The reason or context it gave the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The call's arguments it replaced them with (PreToolUse `updatedInput`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_input: Option<Value>,
    /// What went wrong (timeout, error, invalid output), never given to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Its `stopReason` with `continue: false` (outcome `stopped`): shown to the user, never
    /// given to the model (ADR-125).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Its `systemMessage`: a warning shown to the user, never given to the model (ADR-125).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_message: Option<String>,
}
