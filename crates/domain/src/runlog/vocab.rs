//! The closed sets of words the runlog uses (`error_type`, `event_type`, `routing_method`,
//! `task_force_mode`, the MCP `status`, `purpose`), each written as the same snake_case
//! string docs/RUNLOG.md lists.
//!
//! Every set also has `Other(String)`: a word this version does not know, written by a newer
//! fabric or handed in by an adapter (tools name their own `event_type`s). It is kept as it
//! came, so reading an old or new runlog never fails on a word, and writing one never loses it.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Declares one vocabulary: the enum, its strings both ways, and serde through the strings.
macro_rules! vocabulary {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A word this version does not know, kept as written.
            Other(String),
        }

        impl $name {
            /// The word as written in the runlog.
            pub fn as_str(&self) -> &str {
                match self {
                    $( Self::$variant => $text, )+
                    Self::Other(text) => text,
                }
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> Self {
                match text {
                    $( $text => Self::$variant, )+
                    other => Self::Other(other.to_owned()),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
                Ok(Self::from(text.as_ref()))
            }
        }
    };
}

vocabulary! {
    /// `tool_error.error_type`: why a call failed.
    pub enum ToolErrorType {
        /// Unknown tool, arguments that are not JSON or do not fit the schema, a refused
        /// `finish_task`.
        InvalidArgs = "invalid_args",
        /// Refused for safety (a `security_event` follows).
        Permission = "permission",
        /// The tool ran and failed, or timed out.
        Failed = "failed",
        /// The call was in flight when the run's process stopped; it was not run again, as
        /// the tool is not read-only, and its effect is unknown (docs/DURABILITY.md).
        Interrupted = "interrupted",
        /// `finish_task` was rejected by the specialist's critic; the message holds its
        /// findings, and the specialist repairs (docs/QUALITY.md).
        Rejected = "rejected",
    }
}

vocabulary! {
    /// `security_event.event_type`: what was refused, or that the sandbox is off.
    pub enum SecurityEventType {
        /// A path outside the workspace.
        PathEscape = "path_escape",
        /// A path the workspace protects.
        ProtectedPath = "protected_path",
        /// A program the specialist may not run.
        CommandNotAllowed = "command_not_allowed",
        /// The OS sandbox refused.
        SandboxDenied = "sandbox_denied",
        /// A network address that is not allowed.
        AddressDenied = "address_denied",
        /// A URL scheme that is not allowed.
        UrlSchemeDenied = "url_scheme_denied",
        /// The run does not allow the network.
        NetworkDenied = "network_denied",
        /// The run starts with the OS sandbox off.
        SandboxOff = "sandbox_off",
    }
}

vocabulary! {
    /// `recruitment.routing_method`: how the specialists were chosen.
    pub enum RoutingMethod {
        /// Named by the caller (`--pack`).
        Explicit = "explicit",
        /// By keywords in the prompt.
        Keyword = "keyword",
        /// By the routing model.
        Llm = "llm",
        /// By keywords, after the routing model's answer could not be used.
        KeywordFallback = "keyword_fallback",
    }
}

vocabulary! {
    /// `task_force_mode` as recorded: how the members of a run worked together, `single` for
    /// one specialist. The config's [`crate::TaskForceMode`] (sequential or parallel) is what
    /// a task force of several is asked to do; this is what a run was.
    pub enum TaskForceShape {
        /// One specialist.
        Single = "single",
        /// Members in turn, each given the previous one's result.
        Sequential = "sequential",
        /// Members at the same time.
        Parallel = "parallel",
    }
}

vocabulary! {
    /// `mcp_server.status`: the state an MCP server changed to.
    pub enum McpStatus {
        /// Its start began.
        Starting = "starting",
        /// It answered and its tools are offered.
        Ready = "ready",
        /// It could not start.
        Failed = "failed",
        /// It did not start in time.
        Timeout = "timeout",
        /// It stopped or closed its connection; its tools were removed.
        Stopped = "stopped",
        /// It announced a new tool list.
        ToolsChanged = "tools_changed",
    }
}

vocabulary! {
    /// `mcp_message.type`: what an MCP server told the run (issue #29).
    pub enum McpMessageType {
        /// A log message (`notifications/message`).
        Log = "log",
        /// Progress of a tool call (`notifications/progress`).
        Progress = "progress",
    }
}

vocabulary! {
    /// `mcp_request.outcome`: how the fabric answered an MCP server's request (issue #29).
    pub enum McpRequestOutcome {
        /// Answered: the model's completion, the form's defaults, the roots.
        Answered = "answered",
        /// Declined (elicitation without an answer to give).
        Declined = "declined",
        /// Refused by the configuration (`sampling: false`) or the run's budget.
        Refused = "refused",
        /// The model call failed.
        Failed = "failed",
    }
}

vocabulary! {
    /// `purpose` of a model call outside a specialist's loop.
    pub enum CallPurpose {
        /// The call that chooses the specialists.
        Routing = "routing",
    }
}

vocabulary! {
    /// `run_start.origin`: who started a run (issue #26). `fabric logs list` shows the runs
    /// people started unless asked for all; stats count replays, tests and evaluations only
    /// when asked.
    #[derive(Default)]
    pub enum RunOrigin {
        /// A person or a client: the CLI, the HTTP API, the MCP server.
        #[default]
        User = "user",
        /// A run delegated through `agent__<id>`.
        Child = "child",
        /// A critic's review in the quality gate.
        Critic = "critic",
        /// `fabric replay`.
        Replay = "replay",
        /// `fabric test`.
        Test = "test",
        /// `fabric eval`.
        Eval = "eval",
    }
}

vocabulary! {
    /// `hook_run.outcome`: what one hook's answer came to (issue #43, docs/HOOKS.md).
    pub enum HookOutcome {
        /// It exited 0; any context it gave went to the model.
        Ok = "ok",
        /// Exit code 2 or `decision: block`: the action was blocked (a Stop kept going).
        Blocked = "blocked",
        /// PreToolUse `permissionDecision: deny`: the call did not run.
        Denied = "denied",
        /// PreToolUse `permissionDecision: ask`: the call waited for a person's approval.
        Asked = "asked",
        /// PreToolUse `permissionDecision: allow`: the approval policy did not ask.
        Allowed = "allowed",
        /// PreToolUse `updatedInput` without a decision: the call's arguments were replaced.
        Rewritten = "rewritten",
        /// It ran past its timeout and was killed; the action went ahead.
        Timeout = "timeout",
        /// It could not start, or exited with a code other than 0 and 2; the action went
        /// ahead (fail-open, ADR-110).
        Error = "error",
        /// It crashed, or its stdout was JSON that does not fit; the action went ahead.
        InvalidOutput = "invalid_output",
        /// `continue: false`: the run ended after this hook point (`cancelled`); its
        /// `stopReason` is for the user, never the model (ADR-125).
        Stopped = "stopped",
    }
}

impl RunOrigin {
    /// The origins `fabric stats` counts by default: what people and their runs' children
    /// and critics did, not replays, tests or evaluations.
    pub const COUNTED_IN_STATS: [RunOrigin; 3] = [Self::User, Self::Child, Self::Critic];
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn words_round_trip_and_unknown_words_are_kept() {
        let known = serde_json::to_value(SecurityEventType::UrlSchemeDenied)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(known, json!("url_scheme_denied"));
        let back: McpStatus =
            serde_json::from_value(json!("tools_changed")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, McpStatus::ToolsChanged);
        let newer: RoutingMethod =
            serde_json::from_value(json!("by_coin_toss")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(newer, RoutingMethod::Other("by_coin_toss".into()));
        assert_eq!(
            serde_json::to_value(&newer).unwrap_or_else(|e| panic!("{e}")),
            json!("by_coin_toss")
        );
        assert!(serde_json::from_value::<TaskForceShape>(json!(3)).is_err());
    }
}
