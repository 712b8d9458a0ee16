//! What the editor sees while a turn runs: the run's events and live output as ACP
//! `session/update` notifications (docs/ACP.md).

use async_trait::async_trait;
use fabric_core::live_output::OutputObserver;
use fabric_core::{ChatObserver, RunObserver};
use fabric_domain::runlog::{ToolCalled, ToolFailed, ToolResult, WorkspaceOpened};
use fabric_domain::{EventPayload, LiveToolOutput, OutputChunk, RunEvent};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::rpc::Peer;

/// The most lines of a call's live output shown in its `tool_call_update` (the last ones).
const LIVE_LINES: usize = 200;

/// A turn's updates to one session.
pub(crate) struct Updates {
    inner: Arc<Inner>,
}

struct Inner {
    peer: Arc<Peer>,
    session: String,
    /// Replaying a recorded turn (`session/load`): the model's text comes from its
    /// recorded answers, and no diff is shown (the files have moved on since).
    replay: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Where the run's tools work, and the user's directory it stands for.
    workspace: Option<Places>,
    /// The calls under way, by call id.
    calls: HashMap<String, Call>,
    /// A task force's members and how far each is (`plan`); empty for a lone specialist.
    plan: Vec<(String, &'static str)>,
}

struct Places {
    dir: PathBuf,
    user: PathBuf,
}

/// A call under way: the file it changes (its text before), its live output.
#[derive(Default)]
struct Call {
    file: Option<(String, Option<String>)>,
    output: Vec<String>,
}

impl Updates {
    pub(crate) fn new(peer: Arc<Peer>, session: String) -> Self {
        Self::with(peer, session, false)
    }

    /// Updates replaying a recorded turn (`session/load`).
    pub(crate) fn replaying(peer: Arc<Peer>, session: String) -> Self {
        Self::with(peer, session, true)
    }

    fn with(peer: Arc<Peer>, session: String, replay: bool) -> Self {
        Self {
            inner: Arc::new(Inner {
                peer,
                session,
                replay,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// Says `text` as the user's message (a replayed turn's prompt).
    pub(crate) fn user_message(&self, text: &str) {
        self.inner.update(json!({
            "sessionUpdate": "user_message_chunk",
            "content": {"type": "text", "text": text},
        }));
    }

    /// Says `text` as the agent's message.
    pub(crate) fn message(&self, text: &str) {
        self.inner.message(text);
    }
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn update(&self, update: Value) {
        self.peer.notify(
            "session/update",
            json!({"sessionId": self.session, "update": update}),
        );
    }

    fn message(&self, text: &str) {
        if !text.is_empty() {
            self.update(json!({
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": text},
            }));
        }
    }

    fn on_workspace(&self, opened: &WorkspaceOpened) {
        let user = opened
            .repo
            .clone()
            .or_else(|| opened.source.clone())
            .unwrap_or_else(|| opened.dir.clone());
        self.state().workspace = Some(Places {
            dir: opened.dir.clone(),
            user,
        });
    }

    fn on_call(&self, called: &ToolCalled) {
        if called.tool == fabric_domain::FINISH_TOOL {
            return;
        }
        let mut state = self.state();
        let path = file_of(called).filter(|_| kind(&called.tool) == "edit");
        let places = state.workspace.as_ref();
        let file = path.map(|p| {
            let before = places.and_then(|w| std::fs::read_to_string(w.dir.join(&p)).ok());
            (p, before)
        });
        let locations: Vec<Value> = match (file_of(called), places) {
            (Some(p), Some(w)) => vec![json!({"path": w.user.join(p)})],
            _ => Vec::new(),
        };
        state.calls.insert(
            called.call_id.clone(),
            Call {
                file,
                output: Vec::new(),
            },
        );
        drop(state);
        self.update(json!({
            "sessionUpdate": "tool_call",
            "toolCallId": called.call_id,
            "title": title(called),
            "kind": kind(&called.tool),
            "status": "in_progress",
            "locations": locations,
            "rawInput": called.args,
        }));
    }

    fn on_result(&self, result: &ToolResult) {
        let Some(call) = self.state().calls.remove(&result.call_id) else {
            return;
        };
        let diff = self.diff(call.file);
        let content = match diff {
            Some(diff) => vec![diff],
            None => vec![text_content(&result_text(&result.result))],
        };
        self.update(json!({
            "sessionUpdate": "tool_call_update",
            "toolCallId": result.call_id,
            "status": "completed",
            "content": content,
            "rawOutput": result.result,
        }));
    }

    fn on_error(&self, failed: &ToolFailed) {
        if self.state().calls.remove(&failed.call_id).is_none() {
            return;
        }
        self.update(json!({
            "sessionUpdate": "tool_call_update",
            "toolCallId": failed.call_id,
            "status": "failed",
            "content": [text_content(&failed.error_message)],
        }));
    }

    /// The `diff` of the file a call changed: its text before the call and now, both read
    /// from the run's workspace, under the path it has in the user's directory.
    fn diff(&self, file: Option<(String, Option<String>)>) -> Option<Value> {
        let (path, before) = file?;
        let state = self.state();
        let places = state.workspace.as_ref()?;
        let after = std::fs::read_to_string(places.dir.join(&path)).ok()?;
        Some(json!({
            "type": "diff",
            "path": places.user.join(&path),
            "oldText": before,
            "newText": after,
        }))
    }

    /// A task force's members as the plan's entries, each `pending`, `in_progress` or
    /// `completed` as its loop goes.
    fn on_member(&self, specialist: &str, status: &'static str) {
        let entries: Vec<Value> = {
            let mut state = self.state();
            let Some(entry) = state
                .plan
                .iter_mut()
                .find(|(id, s)| id == specialist && *s != "completed")
            else {
                return;
            };
            entry.1 = status;
            state
                .plan
                .iter()
                .map(|(id, status)| {
                    json!({"content": format!("{id}: its part of the task"), "priority": "medium", "status": status})
                })
                .collect()
        };
        self.update(json!({"sessionUpdate": "plan", "entries": entries}));
    }

    fn on_output(&self, output: &LiveToolOutput) {
        let line = match &output.chunk {
            OutputChunk::Line { line, .. } => line.clone(),
            OutputChunk::Dropped { dropped } => format!("… {dropped} line(s) left out"),
        };
        let text = {
            let mut state = self.state();
            let Some(call) = state.calls.get_mut(&output.call_id) else {
                return;
            };
            call.output.push(line);
            let skip = call.output.len().saturating_sub(LIVE_LINES);
            call.output[skip..].join("\n")
        };
        self.update(json!({
            "sessionUpdate": "tool_call_update",
            "toolCallId": output.call_id,
            "status": "in_progress",
            "content": [text_content(&text)],
        }));
    }
}

impl OutputObserver for Inner {
    fn on_tool_output(&self, output: &LiveToolOutput) {
        self.on_output(output);
    }
}

impl ChatObserver for Updates {
    fn on_text_delta(&self, delta: &str) {
        self.inner.message(delta);
    }
}

#[async_trait]
impl RunObserver for Updates {
    async fn on_event(&self, event: &RunEvent) {
        match &event.payload {
            EventPayload::Workspace(opened) if !self.inner.replay => {
                self.inner.on_workspace(opened);
            }
            EventPayload::LlmResponse(answer) if self.inner.replay => {
                let text = answer.full_content.as_ref().or(answer.content.as_ref());
                self.inner.message(text.map_or("", String::as_str));
            }
            EventPayload::Recruitment(recruited) if recruited.is_task_force => {
                self.inner.state().plan = recruited
                    .specialist_ids
                    .iter()
                    .map(|id| (id.clone(), "pending"))
                    .collect();
            }
            EventPayload::MemberStart(start) => {
                self.inner.on_member(&start.specialist_id, "in_progress");
            }
            EventPayload::MemberEnd(end) => self.inner.on_member(&end.specialist_id, "completed"),
            EventPayload::ToolCall(called) => self.inner.on_call(called),
            EventPayload::ToolResult(result) => self.inner.on_result(result),
            EventPayload::ToolError(failed) => self.inner.on_error(failed),
            _ => {}
        }
    }

    fn on_tool_output(&self, output: &LiveToolOutput) {
        self.inner.on_output(output);
    }

    fn output_observer(&self) -> Option<Arc<dyn OutputObserver>> {
        Some(self.inner.clone())
    }
}

/// ACP's kind of a fabric tool: the icon an editor shows.
pub(crate) fn kind(tool: &str) -> &'static str {
    match tool {
        "read_file" => "read",
        "write_file" => "edit",
        "shell" => "execute",
        "list_files" | "search_runs" | "web_search" | "search_tools" => "search",
        "fetch_url" => "fetch",
        "load_tool_schema" | fabric_domain::ASK_TOOL => "think",
        _ => "other",
    }
}

/// The line an editor shows for a call.
fn title(called: &ToolCalled) -> String {
    let detail = match called.tool.as_str() {
        "shell" => called
            .args
            .get("cmd")
            .and_then(Value::as_array)
            .map(|argv| {
                argv.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" ")
            }),
        _ => file_of(called),
    };
    match detail {
        Some(detail) => format!("{} {}", called.tool, fabric_domain::visible_line(&detail)),
        None => called.tool.clone(),
    }
}

/// The relative path a call names (`path`), when it stays inside its workspace.
fn file_of(called: &ToolCalled) -> Option<String> {
    let path = called.args.get("path")?.as_str()?;
    let inside = Path::new(path)
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    (inside && !path.is_empty()).then(|| path.to_owned())
}

fn text_content(text: &str) -> Value {
    json!({"type": "content", "content": {"type": "text", "text": text}})
}

fn result_text(result: &Value) -> String {
    match result {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}
