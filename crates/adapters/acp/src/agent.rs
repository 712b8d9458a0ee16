//! The ACP methods: `initialize`, `session/new`, `session/prompt`, `session/cancel`
//! (docs/ACP.md).

use fabric_core::service::{RunService, ServiceError, Submission, WhenAsked};
use fabric_domain::RunId;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::AcpError;
use crate::history::{self, SESSION_PREFIX};
use crate::person::AtEditor;
use crate::rpc::{Peer, RpcError};
use crate::session::{MODES, Session, Sessions, commands_update, prompt_text, stop_reason};
use crate::updates::Updates;

/// The protocol version `fabric acp` speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// What every session's turns ask for unless the conversation decides (`fabric acp`'s
/// flags).
#[derive(Debug, Clone, Default)]
pub struct Defaults {
    /// The specialist(s) of a session's first turn; empty: routing chooses.
    pub specialists: Vec<String>,
    /// The model key of every turn.
    pub model_key: Option<String>,
}

/// The fabric as an ACP agent: its sessions, and the run service their turns go to.
pub struct AcpAgent {
    service: RunService,
    peer: Arc<Peer>,
    sessions: Sessions,
    defaults: Defaults,
    version: String,
    /// The client reads its buffers to the agent (`fs.readTextFile`): `/apply` checks
    /// them for unsaved changes.
    reads_buffers: AtomicBool,
}

impl AcpAgent {
    /// An agent submitting runs to `service`, writing to the client through `peer`;
    /// `version` is the fabric's, as `initialize` reports it.
    pub fn new(
        service: RunService,
        peer: Arc<Peer>,
        defaults: Defaults,
        version: impl Into<String>,
    ) -> Self {
        Self {
            service,
            peer,
            sessions: Sessions::default(),
            defaults,
            version: version.into(),
            reads_buffers: AtomicBool::new(false),
        }
    }

    /// Answers request `method`.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        match method {
            "initialize" => Ok(self.initialize(&params)),
            "authenticate" => Ok(json!({})),
            "session/new" => self.new_session(&params),
            "session/prompt" => self.prompt(&params).await,
            "session/load" => self.load_session(&params).await,
            "session/list" => history::list(&self.service, &params).await,
            "session/set_mode" => self.set_mode(&params),
            other => Err(RpcError::method_not_found(other)),
        }
    }

    /// Takes notification `method`; an unknown one is ignored, as JSON-RPC wants.
    pub fn notification(&self, method: &str, params: &Value) {
        match method {
            "session/cancel" => self.cancel(params),
            other => tracing::debug!(method = other, "an ACP notification the fabric ignores"),
        }
    }

    fn initialize(&self, params: &Value) -> Value {
        let reads = params["clientCapabilities"]["fs"]["readTextFile"] == true;
        self.reads_buffers.store(reads, Ordering::Relaxed);
        json!({
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": true,
                "sessionCapabilities": {"list": {}},
                "promptCapabilities": {"image": false, "audio": false, "embeddedContext": true},
                "mcpCapabilities": {"http": true, "sse": true},
            },
            "authMethods": [],
            "agentInfo": {"name": "fabric", "title": "agent-fabric", "version": self.version},
        })
    }

    fn new_session(&self, params: &Value) -> Result<Value, RpcError> {
        let cwd = cwd(params)?;
        let servers = crate::servers::servers(params)?;
        let id = format!("{SESSION_PREFIX}{}", uuid::Uuid::now_v7().simple());
        let session = Session::new(id.clone(), cwd, servers);
        let modes = session.modes();
        self.sessions.add(session);
        self.commands_after(&id);
        Ok(json!({"sessionId": id, "modes": modes}))
    }

    /// `session/set_mode`: the approval mode of the session's next turns.
    fn set_mode(&self, params: &Value) -> Result<Value, RpcError> {
        let (Some(id), Some(mode)) = (
            params.get("sessionId").and_then(Value::as_str),
            params.get("modeId").and_then(Value::as_str),
        ) else {
            return Err(RpcError::invalid_params(
                "session/set_mode needs `sessionId` and `modeId`",
            ));
        };
        let session = self.sessions.get(id)?;
        if !session.set_mode(mode) {
            return Err(RpcError::invalid_params(format!(
                "no mode `{}`: the modes are {}",
                fabric_domain::visible_line(mode),
                MODES
                    .iter()
                    .map(|(m, ..)| *m)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        self.peer.notify(
            "session/update",
            json!({"sessionId": id, "update": {"sessionUpdate": "current_mode_update", "currentModeId": mode}}),
        );
        Ok(json!({}))
    }

    /// `session/load`: the session's turns from the store replayed as updates, then the
    /// session goes on from its last turn.
    async fn load_session(&self, params: &Value) -> Result<Value, RpcError> {
        let id = params
            .get("sessionId")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::invalid_params("session/load needs `sessionId`"))?;
        let cwd = cwd(params)?;
        let servers = crate::servers::servers(params)?;
        let runs = history::turns(&self.service, id).await?;
        let updates = Updates::replaying(self.peer.clone(), id.to_owned());
        history::replay(&self.service, &runs, &updates).await;
        let session = Session::new(id.to_owned(), cwd, servers);
        session.ended(runs.last().map(|run| run.id.clone()));
        let modes = session.modes();
        self.sessions.add(session);
        self.commands_after(id);
        Ok(json!({"modes": modes}))
    }

    /// The session's commands, sent after the answer that names the session.
    fn commands_after(&self, id: &str) {
        let peer = self.peer.clone();
        let session = id.to_owned();
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            peer.notify(
                "session/update",
                json!({"sessionId": session, "update": commands_update()}),
            );
        });
    }

    fn cancel(&self, params: &Value) {
        let Some(id) = params.get("sessionId").and_then(Value::as_str) else {
            return;
        };
        if let Ok(session) = self.sessions.get(id)
            && let Some(run) = session.cancel()
        {
            self.service.cancel(&run);
        }
    }

    async fn prompt(&self, params: &Value) -> Result<Value, RpcError> {
        let id = params
            .get("sessionId")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::invalid_params("session/prompt needs `sessionId`"))?;
        let blocks = params
            .get("prompt")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                RpcError::invalid_params(
                    "session/prompt needs `prompt`, an array of content blocks",
                )
            })?;
        let session = self.sessions.get(id)?;
        let text = prompt_text(blocks)?;
        session.begin(id)?;
        let updates = Updates::new(self.peer.clone(), id.to_owned());
        match command(&text) {
            Some(command) => {
                let answer = self.command(&session, command, &updates).await;
                session.ended(None);
                answer
            }
            // The turn ends the session's turn itself, once its run has an id.
            None => self.turn(&session, text, updates).await,
        }
    }

    /// Runs one turn: a run continuing the session's conversation, its end the answer.
    async fn turn(
        &self,
        session: &Session,
        text: String,
        updates: Updates,
    ) -> Result<Value, RpcError> {
        let updates = Arc::new(updates);
        let submission = Submission::new(session.request(text, &self.defaults))
            .observed(updates.clone())
            .attended(WhenAsked::Ask(Arc::new(AtEditor::new(
                self.peer.clone(),
                session.id.clone(),
            ))));
        let mut handle = match self.service.submit(submission) {
            Ok(handle) => handle,
            Err(e) => {
                session.ended(None);
                return Err(service_error(e));
            }
        };
        let run = handle.id().clone();
        if !session.started(&run) {
            self.service.cancel(&run);
        }
        if let Err(e) = handle.prepared().await {
            session.ended(None);
            return Err(service_error(e));
        }
        let outcome = handle.outcome().await;
        session.ended(Some(run));
        let outcome = outcome.map_err(service_error)?;
        let reason = stop_reason(outcome.status);
        match (&outcome.reason, reason) {
            (_, Some("end_turn")) => updates.message(&summary(&outcome.payload)),
            (Some(why), _) => updates.message(why),
            (None, _) => {}
        }
        match reason {
            Some(reason) => Ok(json!({"stopReason": reason})),
            None => Err(RpcError::internal(format!(
                "run {} ended `{}`: {}",
                outcome.run_id,
                outcome.status.as_str(),
                outcome.reason.as_deref().unwrap_or("no reason recorded")
            ))),
        }
    }

    /// `/diff`, `/apply`, `/discard` of the session's last turn, answered as a message.
    async fn command(
        &self,
        session: &Session,
        command: Command,
        updates: &Updates,
    ) -> Result<Value, RpcError> {
        let text = match session.last() {
            None => "no turn has run yet in this session".to_owned(),
            Some(run) => self
                .project(session, command, &run)
                .await
                .unwrap_or_else(|e| format!("error: {e}")),
        };
        updates.message(&text);
        Ok(json!({"stopReason": "end_turn"}))
    }

    async fn project(
        &self,
        session: &Session,
        command: Command,
        run: &RunId,
    ) -> Result<String, AcpError> {
        if command == Command::Discard {
            let done = self.service.discard_workspace(run).await?;
            session.forget();
            return Ok(match done {
                true => format!(
                    "discarded the worktree and branch of run {run}; the next prompt starts a new conversation"
                ),
                false => format!(
                    "run {run} worked in a scratch workspace: nothing to discard; the next prompt starts a new conversation"
                ),
            });
        }
        let ws = self
            .service
            .ended_workspace(run)
            .await?
            .ok_or_else(|| AcpError::NoBranch(run.clone()))?;
        match command {
            Command::Apply => {
                let root = match self.reads_buffers.load(Ordering::Relaxed) {
                    true => history::project_dir(&self.service, run).await,
                    false => None,
                };
                crate::apply::apply(&self.peer, &session.id, ws.as_ref(), root.as_deref()).await
            }
            _ => {
                let diff = ws.diff().await?;
                Ok(match diff.is_empty() {
                    true => format!("run {run}'s branch changes nothing yet"),
                    false => format!("```diff\n{diff}```"),
                })
            }
        }
    }
}

/// A command typed as the prompt.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Command {
    Diff,
    Apply,
    Discard,
}

fn command(text: &str) -> Option<Command> {
    match text.trim() {
        "/diff" => Some(Command::Diff),
        "/apply" => Some(Command::Apply),
        "/discard" => Some(Command::Discard),
        _ => None,
    }
}

/// The `cwd` of `session/new`: an absolute path of an existing directory.
fn cwd(params: &Value) -> Result<PathBuf, RpcError> {
    let cwd = params
        .get("cwd")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("session/new needs `cwd`, an absolute path"))?;
    let path = PathBuf::from(cwd);
    if !path.is_absolute() || !path.is_dir() {
        return Err(RpcError::invalid_params(format!(
            "`cwd` `{}` must be the absolute path of an existing directory",
            fabric_domain::visible_line(cwd)
        )));
    }
    Ok(path)
}

/// What the turn's run says it did (`finish_task`'s summary).
fn summary(payload: &Value) -> String {
    match payload.get("summary").and_then(Value::as_str) {
        Some(summary) => summary.to_owned(),
        None => String::new(),
    }
}

/// A service error as the client reads it: the request's fault or the fabric's.
fn service_error(error: ServiceError) -> RpcError {
    use fabric_core::Remedy;
    let text = fabric_domain::visible_text(&error.to_string()).into_owned();
    match error.remedy() {
        Remedy::FixInput => RpcError::invalid_params(text),
        Remedy::Retry | Remedy::Report => RpcError::internal(text),
    }
}
