//! The engine through its ports, with fakes for the model, the store and the tools.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use async_trait::async_trait;
use fabric_core::engine::{MAX_TOOL_RESULT_CHARS, ModelParams};
use fabric_core::execute::{Recruitment, RunOutcome, Task, execute_task};
use fabric_core::{
    ChatClient, ChatError, ChatObserver, ChatRequest, ChatResponse, CoreError, NewRun,
    NoopObserver, RunLog, RunStore, StoreError, Tool, ToolContext, ToolError,
};
use fabric_domain::{
    EventKind, RunEvent, RunId, RunStatus, SpecialistSpec, ToolAnnotations, ToolCall, ToolSpec,
};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

// ---- fakes -------------------------------------------------------------------------------

/// A model that answers from a script and remembers how many messages each request had.
struct ScriptedChat {
    answers: Mutex<VecDeque<Result<ChatResponse, ChatError>>>,
    seen: Mutex<Vec<Vec<fabric_domain::Message>>>,
}

impl ScriptedChat {
    fn new(answers: Vec<Result<ChatResponse, ChatError>>) -> Self {
        Self {
            answers: Mutex::new(answers.into()),
            seen: Mutex::new(Vec::new()),
        }
    }
    fn last_tool_messages(&self) -> Vec<String> {
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

fn call(name: &str, args: Value) -> Result<ChatResponse, ChatError> {
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
struct MemLog {
    events: Arc<Mutex<Vec<RunEvent>>>,
    fail_after: Option<usize>,
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

struct MemStore {
    events: Arc<Mutex<Vec<RunEvent>>>,
    fail_after: Option<usize>,
    workspace: PathBuf,
}

impl MemStore {
    fn new() -> Self {
        Self {
            events: Arc::default(),
            fail_after: None,
            workspace: std::env::temp_dir(),
        }
    }
    fn kinds(&self) -> Vec<EventKind> {
        self.events.lock().unwrap().iter().map(|e| e.kind).collect()
    }
    fn of(&self, kind: EventKind) -> Vec<RunEvent> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.kind == kind)
            .cloned()
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
struct FakeTool {
    spec: ToolSpec,
    behaviour: fn(&Value) -> Result<Value, ToolError>,
    delay: Duration,
    dropped_early: Arc<AtomicBool>,
}

fn tool(
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
struct DropFlag(Arc<AtomicBool>, bool);
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

fn specialist(may_write: bool) -> SpecialistSpec {
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
    }
}

fn task(tools: Vec<Arc<dyn Tool>>, may_write: bool, network_allowed: bool) -> Task {
    Task {
        prompt: "do it".into(),
        specialist: specialist(may_write).into(),
        recruitment: Recruitment {
            routing_method: "explicit".into(),
            required_capabilities: vec![],
            reason: "test".into(),
        },
        tools,
        model_key: "k".into(),
        model: ModelParams {
            name: "m".into(),
            temperature: None,
            top_p: None,
            max_tokens: None,
            stream: false,
        },
        max_steps: 10,
        network_allowed,
        sandbox: Default::default(),
    }
}

fn ok_tool(name: &str) -> Arc<dyn Tool> {
    Arc::new(tool(name, ToolAnnotations::default(), |_| {
        Ok(json!("fine"))
    }))
}

async fn run(store: &MemStore, chat: &ScriptedChat, task: Task) -> Result<RunOutcome, CoreError> {
    execute_task(store, chat, task, &NoopObserver, CancellationToken::new()).await
}

// ---- tests -------------------------------------------------------------------------------

#[tokio::test]
async fn a_run_records_every_step_and_ends_with_one_terminal_event() {
    let store = MemStore::new();
    let chat = ScriptedChat::new(vec![
        call("work", json!({})),
        call("finish_task", json!({"summary": "ok"})),
    ]);
    let outcome = run(&store, &chat, task(vec![ok_tool("work")], true, false))
        .await
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.payload, json!({"summary": "ok"}));
    use EventKind::*;
    assert_eq!(
        store.kinds(),
        vec![
            RunStart,
            Recruitment,
            PackStart,
            LlmRequest,
            LlmResponse,
            ToolCall,
            ToolResult,
            LlmRequest,
            LlmResponse,
            ToolCall,
            ToolResult,
            RunComplete
        ]
    );
    let seqs: Vec<u64> = store.events.lock().unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..12).collect::<Vec<_>>());
}

#[tokio::test]
async fn refusals_become_tool_errors_and_security_events() {
    let denied = tool("open", ToolAnnotations::default(), |args| {
        Err(ToolError::Denied {
            event_type: "path_escape".into(),
            attempted: args["path"].as_str().unwrap_or_default().into(),
            message: "path `../x` is outside the workspace".into(),
        })
    });
    let store = MemStore::new();
    let chat = ScriptedChat::new(vec![
        call("open", json!({"path": "../x"})),
        call("finish_task", json!({"summary": "ok"})),
    ]);
    let outcome = run(&store, &chat, task(vec![Arc::new(denied)], true, false))
        .await
        .unwrap();
    assert_eq!(
        outcome.status,
        RunStatus::Completed,
        "a refused call still counts as attempted work"
    );
    let security = store.of(EventKind::SecurityEvent);
    assert_eq!(security.len(), 1);
    assert_eq!(security[0].payload["attempted"], "../x");
    assert_eq!(
        store.of(EventKind::ToolError)[0].payload["error_type"],
        "permission"
    );
    assert_eq!(
        chat.last_tool_messages(),
        vec![r#"{"error":"path `../x` is outside the workspace"}"#]
    );
}

#[tokio::test]
async fn long_results_are_capped_for_the_model_and_the_runlog() {
    let big = tool("big", ToolAnnotations::default(), |_| {
        Ok(Value::String("x".repeat(100_000)))
    });
    let store = MemStore::new();
    let chat = ScriptedChat::new(vec![
        call("big", json!({})),
        call("finish_task", json!({"summary": "ok"})),
    ]);
    run(&store, &chat, task(vec![Arc::new(big)], true, false))
        .await
        .unwrap();
    let seen = chat.last_tool_messages();
    assert!(seen[0].len() < MAX_TOOL_RESULT_CHARS + 100);
    assert!(seen[0].ends_with(&format!(
        "[truncated: {} more characters]",
        100_000 - MAX_TOOL_RESULT_CHARS
    )));
    let logged = store.of(EventKind::ToolResult)[0].payload["result"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(logged, seen[0]);
}

#[tokio::test]
async fn model_failures_end_with_typed_statuses() {
    for (error, status) in [
        (
            ChatError::ToolsUnsupported { model: "m".into() },
            RunStatus::ModelUnsupported,
        ),
        (
            ChatError::Unreachable {
                url: "u".into(),
                detail: "refused".into(),
            },
            RunStatus::LlmError,
        ),
    ] {
        let store = MemStore::new();
        let chat = ScriptedChat::new(vec![Err(error.clone())]);
        let outcome = run(&store, &chat, task(vec![], true, false)).await.unwrap();
        assert_eq!(outcome.status, status);
        assert_eq!(outcome.reason.as_deref(), Some(error.to_string().as_str()));
        let failed = store.of(EventKind::RunFailed);
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].payload["status"], status.as_str());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_mid_tool_drops_the_tool_and_records_cancelled() {
    let mut slow = tool("slow", ToolAnnotations::default(), |_| Ok(json!("late")));
    slow.delay = Duration::from_secs(30);
    let dropped = Arc::clone(&slow.dropped_early);
    let store = MemStore::new();
    let chat = ScriptedChat::new(vec![call("slow", json!({}))]);
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    let started = std::time::Instant::now();
    let outcome = execute_task(
        &store,
        &chat,
        task(vec![Arc::new(slow)], true, false),
        &NoopObserver,
        cancel,
    )
    .await
    .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(outcome.status, RunStatus::Cancelled);
    assert!(
        dropped.load(Ordering::SeqCst),
        "the tool's future was dropped, so its children die with it"
    );
    assert_eq!(*store.kinds().last().unwrap(), EventKind::RunFailed);
}

#[tokio::test]
async fn read_only_specialists_and_offline_runs_get_fewer_tools() {
    let writer = tool(
        "writer",
        ToolAnnotations {
            destructive: true,
            ..Default::default()
        },
        |_| Ok(json!("w")),
    );
    let reader = tool(
        "reader",
        ToolAnnotations {
            read_only: true,
            ..Default::default()
        },
        |_| Ok(json!("r")),
    );
    let fetch = tool(
        "fetch",
        ToolAnnotations {
            read_only: true,
            needs_network: true,
            ..Default::default()
        },
        |_| Ok(json!("f")),
    );
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(writer), Arc::new(reader), Arc::new(fetch)];
    let store = MemStore::new();
    let chat = ScriptedChat::new(vec![
        call("writer", json!({})),
        call("reader", json!({})),
        call("finish_task", json!({"summary": "ok"})),
    ]);
    run(&store, &chat, task(tools, false, false)).await.unwrap();
    assert_eq!(
        store.of(EventKind::PackStart)[0].payload["tools"],
        json!(["reader"])
    );
    let error = &store.of(EventKind::ToolError)[0].payload;
    assert_eq!(
        error["error_message"],
        "tool `writer` is not available in this run: this specialist may not write, and the tool is not read-only; the available tools are: reader, finish_task"
    );
}

#[tokio::test]
async fn a_runlog_that_cannot_be_written_is_an_error_not_a_silent_run() {
    let mut store = MemStore::new();
    store.fail_after = Some(4);
    let chat = ScriptedChat::new(vec![
        call("work", json!({})),
        call("finish_task", json!({"summary": "ok"})),
    ]);
    let error = run(&store, &chat, task(vec![ok_tool("work")], true, false))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("disk full"), "{error}");
}

#[tokio::test]
async fn finish_schema_that_is_not_an_object_fails_the_run_clearly() {
    let store = MemStore::new();
    let chat = ScriptedChat::new(vec![]);
    let mut t = task(vec![], true, false);
    std::sync::Arc::make_mut(&mut t.specialist).finish_schema = json!({"type": "string"});
    let outcome = run(&store, &chat, t).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Failed);
    assert!(outcome.reason.unwrap().contains("finish_schema"));
}

#[tokio::test]
async fn a_specialist_without_tools_may_finish_at_once() {
    let store = MemStore::new();
    let chat = ScriptedChat::new(vec![call(
        "finish_task",
        json!({"summary": "thought it through"}),
    )]);
    let outcome = run(&store, &chat, task(vec![], true, false)).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
}
