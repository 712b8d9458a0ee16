//! Fakes for the engine's ports, shared by the engine's integration tests: a scripted
//! model, an in-memory store and runlog, tools whose behaviour a test chooses.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use async_trait::async_trait;
use fabric_core::engine::ModelParams;
use fabric_core::execute::{Member, Recruitment, RunOutcome, TaskForce, execute_task_force};
use fabric_core::{
    ChatClient, ChatError, ChatObserver, ChatRequest, ChatResponse, CoreError, NewRun,
    NoopObserver, RunLog, RunStore, StoreError, Tool, ToolContext, ToolError,
};
use fabric_domain::{
    EventKind, RunEvent, RunId, SpecialistSpec, ToolAnnotations, ToolCall, ToolSpec,
};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A model that answers from a script and remembers how many messages each request had;
/// a clone shares the script (a run owns its client, the test keeps looking at it).
#[derive(Clone)]
pub(crate) struct ScriptedChat(Arc<Script>);

/// What a [`ScriptedChat`] and its clones share.
pub(crate) struct Script {
    pub answers: Mutex<VecDeque<Result<ChatResponse, ChatError>>>,
    pub seen: Mutex<Vec<Vec<fabric_domain::Message>>>,
}

impl std::ops::Deref for ScriptedChat {
    type Target = Script;
    fn deref(&self) -> &Script {
        &self.0
    }
}

impl ScriptedChat {
    pub(crate) fn new(answers: Vec<Result<ChatResponse, ChatError>>) -> Self {
        Self(Arc::new(Script {
            answers: Mutex::new(answers.into()),
            seen: Mutex::new(Vec::new()),
        }))
    }

    /// A client sharing this script, for a run to own.
    pub(crate) fn client(&self) -> Arc<dyn ChatClient> {
        Arc::new(self.clone())
    }
    pub(crate) fn last_tool_messages(&self) -> Vec<String> {
        let seen = self.seen.lock().unwrap();
        seen.last()
            .unwrap()
            .iter()
            .filter(|m| m.role == fabric_domain::Role::Tool)
            .map(|m| m.content.clone().unwrap_or_default())
            .collect()
    }
}

#[async_trait]
impl ChatClient for ScriptedChat {
    async fn chat(
        &self,
        request: ChatRequest<'_>,
        _observer: &dyn ChatObserver,
    ) -> Result<ChatResponse, ChatError> {
        self.seen.lock().unwrap().push(request.messages.to_vec());
        self.answers.lock().unwrap().pop_front().unwrap_or_else(|| {
            Err(ChatError::Decode {
                url: "fake".into(),
                detail: "script exhausted".into(),
            })
        })
    }
}

pub(crate) fn call(name: &str, args: Value) -> Result<ChatResponse, ChatError> {
    Ok(ChatResponse {
        tool_calls: vec![ToolCall {
            id: format!("c-{name}"),
            name: name.into(),
            arguments: args.to_string(),
        }],
        ..ChatResponse::default()
    })
}

#[derive(Default)]
pub(crate) struct MemLog {
    pub events: Arc<Mutex<Vec<RunEvent>>>,
    pub fail_after: Option<usize>,
}

#[async_trait]
impl RunLog for MemLog {
    async fn append(&self, event: &RunEvent) -> Result<(), StoreError> {
        let mut events = self.events.lock().unwrap();
        if self.fail_after.is_some_and(|n| events.len() >= n) {
            return Err(StoreError::Io {
                action: "cannot write",
                path: "mem".into(),
                detail: "disk full".into(),
            });
        }
        events.push(event.clone());
        Ok(())
    }
}

/// An event as the runlog line holds it (`payload` as JSON, `pack_index` inside it).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Line {
    pub seq: u64,
    pub kind: EventKind,
    pub step: Option<u32>,
    pub payload: serde_json::Value,
}

impl Line {
    pub(crate) fn kind(&self) -> EventKind {
        self.kind
    }
    pub(crate) fn of(event: &RunEvent) -> Self {
        Self {
            seq: event.seq,
            kind: event.kind(),
            step: event.step,
            payload: event.payload_json().unwrap(),
        }
    }
}

pub(crate) struct MemStore {
    pub events: Arc<Mutex<Vec<RunEvent>>>,
    pub fail_after: Option<usize>,
    pub workspace: PathBuf,
}

impl MemStore {
    pub(crate) fn new() -> Self {
        Self {
            events: Arc::default(),
            fail_after: None,
            workspace: std::env::temp_dir(),
        }
    }
    pub(crate) fn kinds(&self) -> Vec<EventKind> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(RunEvent::kind)
            .collect()
    }
    /// The events of `kind` as their runlog lines: what a reader of the runlog sees.
    pub(crate) fn of(&self, kind: EventKind) -> Vec<Line> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.kind() == kind)
            .map(Line::of)
            .collect()
    }
}

#[async_trait]
impl RunStore for MemStore {
    async fn create_run(&self, _id: RunId) -> Result<NewRun, StoreError> {
        Ok(NewRun {
            id: RunId::parse("test-run").unwrap(),
            workspace: self.workspace.clone(),
            log: Box::new(MemLog {
                events: Arc::clone(&self.events),
                fail_after: self.fail_after,
            }),
            versioned: None,
        })
    }
    async fn list_runs(
        &self,
        _query: &fabric_core::RunQuery,
    ) -> Result<Vec<fabric_domain::RunSummary>, StoreError> {
        Ok(Vec::new())
    }
    async fn read_events(&self, _id: &RunId) -> Result<Vec<RunEvent>, StoreError> {
        Ok(self.events.lock().unwrap().clone())
    }
}

/// A tool whose behaviour a test chooses.
pub(crate) struct FakeTool {
    pub spec: ToolSpec,
    pub behaviour: fn(&Value) -> Result<Value, ToolError>,
    pub delay: Duration,
    pub dropped_early: Arc<AtomicBool>,
}

pub(crate) fn tool(
    name: &str,
    annotations: ToolAnnotations,
    behaviour: fn(&Value) -> Result<Value, ToolError>,
) -> FakeTool {
    let schema = json!({"type": "object", "properties": {"path": {"type": "string"}}, "additionalProperties": false});
    FakeTool {
        spec: ToolSpec::with_schema(name, "fake", schema)
            .unwrap()
            .annotate(annotations),
        behaviour,
        delay: Duration::ZERO,
        dropped_early: Arc::default(),
    }
}

/// Sets the flag unless disarmed: tells whether a tool future was dropped mid-way.
pub(crate) struct DropFlag(Arc<AtomicBool>, bool);
impl Drop for DropFlag {
    fn drop(&mut self) {
        if self.1 {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl Tool for FakeTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<Value, ToolError> {
        let mut flag = DropFlag(Arc::clone(&self.dropped_early), true);
        tokio::time::sleep(self.delay).await;
        flag.1 = false;
        (self.behaviour)(&args)
    }
}

pub(crate) fn specialist(may_write: bool) -> SpecialistSpec {
    SpecialistSpec {
        container_image: None,
        id: "eng".into(),
        description: "d".into(),
        keywords: vec![],
        capabilities: vec![],
        system_prompt: "You build.".into(),
        tools: vec![],
        finish_schema: json!({"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}),
        model_key: None,
        may_write,
        needs_network: false,
        limitations: vec![],
        tooling: Default::default(),
        loop_aids: Default::default(),
    }
}

/// A task force of one: the test specialist with `tools` on `chat`.
pub(crate) fn task(
    chat: Arc<dyn ChatClient>,
    tools: Vec<Arc<dyn Tool>>,
    may_write: bool,
    network_allowed: bool,
) -> TaskForce {
    let member = Member::new(
        specialist(may_write).into(),
        tools,
        chat,
        "k",
        ModelParams::named("m"),
    );
    let recruitment = Recruitment::explicit(Vec::new(), "test");
    let mut force = TaskForce::single("do it", member, recruitment, 10);
    force.network_allowed = network_allowed;
    force
}

pub(crate) fn ok_tool(name: &str) -> Arc<dyn Tool> {
    Arc::new(tool(name, ToolAnnotations::default(), |_| {
        Ok(json!("fine"))
    }))
}

pub(crate) async fn run(store: &MemStore, force: TaskForce) -> Result<RunOutcome, CoreError> {
    execute_task_force(store, force, &NoopObserver, CancellationToken::new()).await
}
