//! ACP sessions: each a conversation on the editor's `cwd`, each prompt a turn that is a run
//! continuing the previous turn's (ADR-112).

use fabric_core::service::{ContinueRequest, ProjectRequest, TaskRequest};
use fabric_domain::{ApprovalMode, McpServerSpec, RunId, RunStatus};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::agent::Defaults;
use crate::rpc::RpcError;

/// One session: the project it works on and its conversation so far.
pub(crate) struct Session {
    /// Its id, as the client names it.
    pub(crate) id: String,
    /// The editor's `cwd`: the project of the conversation's first run.
    pub(crate) cwd: PathBuf,
    /// The editor's MCP servers, handed to every turn's run.
    servers: Vec<McpServerSpec>,
    state: Mutex<Turns>,
}

#[derive(Default)]
struct Turns {
    /// The session's mode: the approval mode of its turns; `None`: the specialists' own.
    mode: Option<ApprovalMode>,
    /// The last turn that ran: the next continues its conversation.
    last: Option<RunId>,
    /// The turn under way, if one is; `Some(None)` while it is being prepared.
    running: Option<Option<RunId>>,
    /// The client cancelled the turn under way before its run had an id.
    cancelled: bool,
}

impl Session {
    pub(crate) fn new(id: String, cwd: PathBuf, servers: Vec<McpServerSpec>) -> Self {
        Self {
            id,
            cwd,
            servers,
            state: Mutex::new(Turns::default()),
        }
    }

    fn turns(&self) -> MutexGuard<'_, Turns> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Claims the session for a turn; refused while another runs.
    pub(crate) fn begin(&self, id: &str) -> Result<(), RpcError> {
        let mut turns = self.turns();
        if turns.running.is_some() {
            return Err(RpcError::invalid_request(format!(
                "session `{}` is running a prompt: wait for its answer, or send session/cancel",
                fabric_domain::visible_line(id)
            )));
        }
        turns.running = Some(None);
        turns.cancelled = false;
        Ok(())
    }

    /// The turn's run has its id; `false` when the client cancelled meanwhile.
    pub(crate) fn started(&self, run: &RunId) -> bool {
        let mut turns = self.turns();
        turns.running = Some(Some(run.clone()));
        !turns.cancelled
    }

    /// The turn ended; the next continues `run` when it ran.
    pub(crate) fn ended(&self, run: Option<RunId>) {
        let mut turns = self.turns();
        turns.running = None;
        if run.is_some() {
            turns.last = run;
        }
    }

    /// The run the client cancels, when it has one yet (else it is cancelled on start).
    pub(crate) fn cancel(&self) -> Option<RunId> {
        let mut turns = self.turns();
        match &turns.running {
            Some(Some(run)) => Some(run.clone()),
            Some(None) => {
                turns.cancelled = true;
                None
            }
            None => None,
        }
    }

    /// Sets the session's mode (`session/set_mode`) by its id; `false`: no such mode.
    pub(crate) fn set_mode(&self, id: &str) -> bool {
        match MODES.iter().find(|(mode, ..)| *mode == id) {
            Some((_, mode, _)) => {
                self.turns().mode = *mode;
                true
            }
            None => false,
        }
    }

    /// The session's modes and the current one (`modes` of `session/new`).
    pub(crate) fn modes(&self) -> Value {
        let current = self.turns().mode;
        let current = MODES
            .iter()
            .find(|(_, mode, _)| *mode == current)
            .map_or(MODES[0].0, |(id, ..)| *id);
        let available: Vec<Value> = MODES
            .iter()
            .map(|(id, _, what)| json!({"id": id, "name": id, "description": what}))
            .collect();
        json!({"currentModeId": current, "availableModes": available})
    }

    /// The next turn starts a new conversation (`/discard`).
    pub(crate) fn forget(&self) {
        self.turns().last = None;
    }

    /// The last turn's run.
    pub(crate) fn last(&self) -> Option<RunId> {
        self.turns().last.clone()
    }

    /// The run of the next turn: a new conversation on the session's project, or the
    /// last turn's continued on its branch.
    pub(crate) fn request(&self, prompt: String, defaults: &Defaults) -> TaskRequest {
        let continues = self.last().map(|run_id| ContinueRequest {
            run_id,
            fork: false,
        });
        TaskRequest {
            prompt,
            stream: true,
            // A later turn goes on with the specialist of the conversation.
            specialists: match continues {
                None => defaults.specialists.clone(),
                Some(_) => Vec::new(),
            },
            model_key: defaults.model_key.clone(),
            project: continues.is_none().then(|| ProjectRequest {
                path: self.cwd.clone(),
                base: None,
            }),
            continues,
            mcp_servers: self.servers.clone(),
            // The session's runs are found by it after a restart (`session/load`).
            context_id: Some(self.id.clone()),
            approval_mode: self.turns().mode,
            ..TaskRequest::default()
        }
    }
}

/// The sessions of one `fabric acp` process.
#[derive(Default)]
pub(crate) struct Sessions {
    by_id: Mutex<HashMap<String, Arc<Session>>>,
}

impl Sessions {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.by_id
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn add(&self, session: Session) {
        self.map().insert(session.id.clone(), Arc::new(session));
    }

    pub(crate) fn get(&self, id: &str) -> Result<Arc<Session>, RpcError> {
        self.map()
            .get(id)
            .cloned()
            .ok_or_else(|| RpcError::unknown_session(id))
    }
}

/// ACP's `stopReason` for a run that ended with `status`, or `None` when the turn failed
/// (answered as an error).
pub(crate) fn stop_reason(status: RunStatus) -> Option<&'static str> {
    Some(match status {
        RunStatus::Completed
        | RunStatus::CompletedWithoutFinish
        | RunStatus::Partial
        | RunStatus::Stalled
        | RunStatus::InputRequired
        | RunStatus::Unanswered
        | RunStatus::Running => "end_turn",
        RunStatus::MaxStepsExceeded => "max_turn_requests",
        RunStatus::BudgetExceeded | RunStatus::ContextWindowExceeded => "max_tokens",
        RunStatus::QualityGateFailed => "refusal",
        RunStatus::Cancelled => "cancelled",
        RunStatus::LlmError
        | RunStatus::ModelUnsupported
        | RunStatus::Failed
        | RunStatus::Interrupted => return None,
    })
}

/// The text of a prompt's content blocks: text as it is, a resource link or an embedded
/// resource named by its URI (an embedded text resource's text follows it).
pub(crate) fn prompt_text(blocks: &[Value]) -> Result<String, RpcError> {
    let mut parts = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => parts.push(str_field(block, "text")?.to_owned()),
            Some("resource_link") => parts.push(format!("@{}", str_field(block, "uri")?)),
            Some("resource") => parts.push(resource_text(block.get("resource"))?),
            other => {
                return Err(RpcError::invalid_params(format!(
                    "a prompt block of type `{}` is not taken: `fabric acp` reads text, resource_link and resource blocks (its promptCapabilities say so)",
                    fabric_domain::visible_line(other.unwrap_or("(none)"))
                )));
            }
        }
    }
    let text = parts.join("\n");
    if text.trim().is_empty() {
        return Err(RpcError::invalid_params(
            "the prompt is empty: give at least one text block",
        ));
    }
    Ok(text)
}

fn resource_text(resource: Option<&Value>) -> Result<String, RpcError> {
    let resource =
        resource.ok_or_else(|| RpcError::invalid_params("a resource block needs `resource`"))?;
    let uri = str_field(resource, "uri")?;
    Ok(match resource.get("text").and_then(Value::as_str) {
        Some(text) => format!("@{uri}:\n{text}"),
        None => format!("@{uri}"),
    })
}

fn str_field<'a>(value: &'a Value, key: &str) -> Result<&'a str, RpcError> {
    value.get(key).and_then(Value::as_str).ok_or_else(|| {
        RpcError::invalid_params(format!("a prompt block needs `{key}` as a string"))
    })
}

/// The session's modes: which calls of its turns wait for the person's approval (the
/// specialist's `approval.mode`, docs/INTERACTIVE.md; its rules always hold).
pub(crate) const MODES: &[(&str, Option<ApprovalMode>, &str)] = &[
    (
        "configured",
        None,
        "as each specialist's `approval` says in the config (by default no call waits)",
    ),
    (
        "untrusted",
        Some(ApprovalMode::Untrusted),
        "every call that may write or execute waits for your approval",
    ),
    (
        "on_request",
        Some(ApprovalMode::OnRequest),
        "a command the allowlist refuses is asked about instead of refused",
    ),
    (
        "never",
        Some(ApprovalMode::Never),
        "no call waits, but those the specialist's rules ask about",
    ),
];

/// The session's commands (`available_commands_update`), each handled as a prompt.
pub(crate) const COMMANDS: &[(&str, &str)] = &[
    (
        "diff",
        "what the session changed in the project so far (the diff of the last turn's branch)",
    ),
    (
        "apply",
        "bring those changes into your working tree, uncommitted (`fabric apply`)",
    ),
    (
        "discard",
        "remove the session's worktree and branch (`fabric discard`); the next prompt starts a new conversation",
    ),
];

/// The `available_commands_update` of a session.
pub(crate) fn commands_update() -> Value {
    let commands: Vec<Value> = COMMANDS
        .iter()
        .map(|(name, what)| json!({"name": name, "description": what}))
        .collect();
    json!({"sessionUpdate": "available_commands_update", "availableCommands": commands})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_44_every_status_has_a_stop_reason_or_is_an_error() {
        for status in RunStatus::ALL {
            let reason = stop_reason(status);
            assert!(
                reason.is_none_or(|r| [
                    "end_turn",
                    "max_tokens",
                    "max_turn_requests",
                    "refusal",
                    "cancelled"
                ]
                .contains(&r)),
                "{status:?}"
            );
        }
        assert_eq!(stop_reason(RunStatus::Cancelled), Some("cancelled"));
    }

    #[test]
    fn issue_44_prompt_blocks_are_read_and_an_image_is_refused() {
        let text = prompt_text(&[
            json!({"type": "text", "text": "fix it"}),
            json!({"type": "resource_link", "uri": "file:///a.rs", "name": "a.rs"}),
        ]);
        assert_eq!(text, Ok("fix it\n@file:///a.rs".to_owned()));
        let image = prompt_text(&[json!({"type": "image", "data": "", "mimeType": "image/png"})]);
        assert!(image.is_err_and(|e| e.message.contains("image")));
    }
}
