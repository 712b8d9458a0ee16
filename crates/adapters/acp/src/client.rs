//! ACP agents as specialists (issue #44): `agent__<id>` for a specialist whose `acp:` names
//! a program that speaks ACP. A call starts it in the run's workspace, gives it a session
//! there and the task as its prompt, answers its permission requests by the delegating
//! specialist's approval mode, and returns its final message (docs/ACP.md).

use async_trait::async_trait;
use fabric_core::delegate::DelegateInput;
use fabric_core::live_output::LineSplitter;
use fabric_core::typed::TypedTool;
use fabric_core::{ToolContext, ToolError};
use fabric_domain::{AGENT_TOOL_PREFIX, AcpAgentSpec, ApprovalMode, ToolAnnotations, ToolSpec};
use serde_json::{Value, json};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout};
use tokio::sync::mpsc;

use crate::rpc::{Incoming, Peer, RpcError};

/// The tool `agent__<id>` of an ACP agent.
pub struct AcpAgentTool {
    id: String,
    description: String,
    spec: AcpAgentSpec,
    /// The delegating specialist lets calls run without a person (`approval.mode: never`):
    /// the agent's permission requests are allowed; otherwise rejected.
    allow: bool,
}

impl AcpAgentTool {
    /// The tool of specialist `id` (`description`), run by `spec`, for a specialist whose
    /// approval mode is `mode`.
    pub fn new(id: &str, description: &str, spec: AcpAgentSpec, mode: ApprovalMode) -> Self {
        Self {
            id: id.to_owned(),
            description: description.to_owned(),
            spec,
            allow: mode == ApprovalMode::Never,
        }
    }
}

/// What the agent said and did during the task.
#[derive(Default)]
struct Transcript {
    text: String,
    calls: Vec<String>,
    permissions: Vec<String>,
}

type Shared = Arc<Mutex<Transcript>>;

fn lock(t: &Shared) -> MutexGuard<'_, Transcript> {
    t.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[async_trait]
impl TypedTool for AcpAgentTool {
    type Input = DelegateInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_input::<DelegateInput>(
            &format!("{AGENT_TOOL_PREFIX}{}", self.id),
            &format!(
                "Hand a task to `{}` ({}), an agent of its own reached over the Agent Client Protocol, working in this run's workspace. It returns its final answer. Describe the task completely: it sees nothing of this conversation.",
                self.id, self.description
            ),
        )
        .example(json!({"task": "Add a test for parse() with empty input and run it"}))
        .annotate(ToolAnnotations {
            destructive: true,
            ..ToolAnnotations::default()
        })
    }

    async fn run(&self, input: DelegateInput, ctx: &ToolContext) -> Result<Value, ToolError> {
        if input.task.trim().is_empty() {
            return Err(ToolError::InvalidArguments(
                "`task` is empty; describe what the agent should do".to_owned(),
            ));
        }
        let mut child = self.start(ctx)?;
        let (peer, transcript) = self.connect(&mut child, ctx)?;
        let mut limit = Duration::from_secs(self.spec.timeout_s);
        if let Some(deadline) = ctx.lineage.budget.deadline() {
            limit = limit.min(deadline.saturating_duration_since(std::time::Instant::now()));
        }
        let work = session(&peer, ctx, &input.task);
        let ended = tokio::select! {
            ended = tokio::time::timeout(limit, work) => ended.unwrap_or_else(|_| Err(RpcError::internal(format!(
                "it did not finish within {} s (`specialists.{}.acp.timeout_s`)", limit.as_secs(), self.id
            )))),
            () = ctx.cancel.cancelled() => Err(RpcError::internal("the run was cancelled")),
        };
        let _ = child.start_kill();
        self.answer(ended, &transcript)
    }
}

impl AcpAgentTool {
    fn start(&self, ctx: &ToolContext) -> Result<Child, ToolError> {
        tokio::process::Command::new(&self.spec.command)
            .args(&self.spec.args)
            .envs(&self.spec.env)
            .current_dir(&ctx.workspace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                ToolError::Failed(format!(
                    "the ACP agent `{}` could not be started (`{}`): {e}; check `specialists.{}.acp.command`",
                    self.id, self.spec.command, self.id
                ))
            })
    }

    /// The agent as a peer: its stdin written through a queue, its stdout read on a task
    /// that routes answers, takes updates and answers its requests.
    fn connect(
        &self,
        child: &mut Child,
        ctx: &ToolContext,
    ) -> Result<(Arc<Peer>, Shared), ToolError> {
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(ToolError::Failed(format!(
                "the ACP agent `{}` has no stdin or stdout",
                self.id
            )));
        };
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let _ = crate::write_lines(rx, stdin).await;
        });
        let peer = Arc::new(Peer::new(tx));
        let transcript = Shared::default();
        // What the agent says and does is also live output of the call, for its followers.
        let live = ctx.live_lines(fabric_domain::OutputStream::Stdout);
        tokio::spawn(read(
            stdout,
            peer.clone(),
            transcript.clone(),
            self.allow,
            live,
        ));
        Ok((peer, transcript))
    }

    fn answer(
        &self,
        ended: Result<Value, RpcError>,
        transcript: &Shared,
    ) -> Result<Value, ToolError> {
        let t = lock(transcript);
        let stop = match ended {
            Ok(answer) => answer["stopReason"].as_str().unwrap_or("").to_owned(),
            Err(e) => {
                return Err(ToolError::Failed(format!(
                    "the ACP agent `{}` failed: {}; what it said: {}",
                    self.id,
                    e.message,
                    t.text.trim()
                )));
            }
        };
        let answer = json!({
            "agent": self.id,
            "stop_reason": stop,
            "text": t.text.trim(),
            "calls": t.calls,
            "permissions": t.permissions,
        });
        match stop.as_str() {
            "end_turn" => Ok(answer),
            _ => Err(ToolError::Failed(answer.to_string())),
        }
    }
}

/// `initialize`, `session/new` in the run's workspace, the task as the prompt; the answer.
async fn session(peer: &Peer, ctx: &ToolContext, task: &str) -> Result<Value, RpcError> {
    peer.request(
        "initialize",
        json!({
            "protocolVersion": crate::PROTOCOL_VERSION,
            "clientCapabilities": {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false},
            "clientInfo": {"name": "fabric", "version": env!("CARGO_PKG_VERSION")},
        }),
    )
    .await?;
    let created = peer
        .request(
            "session/new",
            json!({"cwd": ctx.workspace, "mcpServers": []}),
        )
        .await?;
    let session = created["sessionId"].clone();
    peer.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": task}]}),
    )
    .await
}

/// Reads the agent's lines until it closes stdout.
async fn read(
    stdout: ChildStdout,
    peer: Arc<Peer>,
    transcript: Shared,
    allow: bool,
    mut live: Option<LineSplitter>,
) {
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        match Incoming::parse(&line) {
            Incoming::Response { id, result } => {
                // The turn's answer: its last words are shown before the call returns, not
                // when the agent's process closes its output, after the call has ended.
                if let Some(live) = live.as_mut() {
                    live.end_line();
                }
                peer.answered(&id, result);
            }
            Incoming::Notification { method, params } if method == "session/update" => {
                let shown = take_update(&transcript, &params["update"]);
                if let (Some(live), Some(shown)) = (live.as_mut(), shown) {
                    live.push(shown.as_bytes());
                }
            }
            Incoming::Request { id, method, params } => {
                let answer = match method.as_str() {
                    "session/request_permission" => Ok(permit(&transcript, &params, allow)),
                    other => Err(RpcError::method_not_found(other)),
                };
                peer.respond(id, answer);
            }
            Incoming::Notification { .. } | Incoming::Invalid { .. } => {}
        }
    }
    if let Some(live) = live {
        live.finish();
    }
}

/// Takes one of the agent's updates into the transcript; what to show of it live.
fn take_update(transcript: &Shared, update: &Value) -> Option<String> {
    let mut t = lock(transcript);
    match update["sessionUpdate"].as_str() {
        Some("agent_message_chunk") => {
            let text = update["content"]["text"].as_str()?;
            t.text.push_str(text);
            Some(text.to_owned())
        }
        Some("tool_call") => {
            let title = update["title"].as_str().unwrap_or("a tool call");
            let title = fabric_domain::visible_line(title).into_owned();
            t.calls.push(title.clone());
            Some(format!("\n→ {title}\n"))
        }
        _ => None,
    }
}

/// Answers a permission request by the delegating specialist's approval mode.
fn permit(transcript: &Shared, params: &Value, allow: bool) -> Value {
    let wanted: &[&str] = match allow {
        true => &["allow_once", "allow_always"],
        false => &["reject_once", "reject_always"],
    };
    let options = params["options"].as_array().cloned().unwrap_or_default();
    let chosen = options
        .iter()
        .find(|o| wanted.contains(&o["kind"].as_str().unwrap_or("")));
    let title = params["toolCall"]["title"]
        .as_str()
        .unwrap_or("a tool call");
    let said = match (chosen, allow) {
        (Some(_), true) => "allowed (the delegating specialist's approval mode is `never`)",
        _ => {
            "rejected (the delegating specialist's approval mode wants a person, whom a delegated ACP agent cannot ask)"
        }
    };
    lock(transcript)
        .permissions
        .push(format!("{}: {said}", fabric_domain::visible_line(title)));
    match chosen {
        Some(option) => json!({"outcome": {"outcome": "selected", "optionId": option["optionId"]}}),
        None => json!({"outcome": {"outcome": "cancelled"}}),
    }
}
