//! Tool sources through the ports: tools that arrive between steps, notices in the runlog,
//! a required source that fails, lazy loading, and calls by an old name (alias).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use async_trait::async_trait;
use fabric_core::engine::ModelParams;
use fabric_core::execute::{Member, Roster, RunOutcome, TaskForce};
use fabric_core::{NoopObserver, Tool, ToolContext, ToolError, ToolNotice, ToolSource};
use fabric_domain::{EventKind, RunStatus, SpecialistSpec, ToolLoading, ToolSpec};
use fabric_fakes::{Answer, MemStore, ScriptedChat, call, specialist_as};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// A model that answers from a script and remembers the tool names of every request,
/// calling `on_call(n)` before its `n`th answer, so a test can change the world between steps.
fn chat(answers: Vec<Answer>, on_call: impl Fn(usize) + Send + Sync + 'static) -> ScriptedChat {
    ScriptedChat::new(answers).before_each(on_call)
}

fn finish() -> Answer {
    call("finish_task", json!({"summary": "done"}))
}

struct Echo(ToolSpec);

#[async_trait]
impl Tool for Echo {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<Value, ToolError> {
        Ok(json!(format!("{} got {args}", self.0.name)))
    }
}

fn echo(name: &str) -> Arc<dyn Tool> {
    let spec = ToolSpec::with_schema(
        name,
        &format!("The {name} tool."),
        json!({"type": "object", "properties": {"x": {"type": "string"}}}),
    )
    .unwrap();
    Arc::new(Echo(spec))
}

/// A source whose tools a test adds while the run goes on.
#[derive(Default)]
struct Growing {
    tools: Mutex<Vec<Arc<dyn Tool>>>,
    version: AtomicU64,
    notices: Mutex<Vec<ToolNotice>>,
    fail_start: Option<String>,
}

impl Growing {
    fn add(&self, tool: Arc<dyn Tool>) {
        let name = tool.spec().name.clone();
        self.tools.lock().unwrap().push(tool);
        self.version.fetch_add(1, Ordering::SeqCst);
        self.notices.lock().unwrap().push(ToolNotice {
            kind: EventKind::McpServer,
            payload: json!({"server": "late", "status": "ready", "tools": [name]}),
        });
    }
}

#[async_trait]
impl ToolSource for Growing {
    async fn start(&self, _ctx: &ToolContext) -> Result<(), fabric_core::ports::SourceError> {
        match &self.fail_start {
            Some(e) => Err(fabric_core::ports::SourceError::Unavailable(vec![
                e.clone(),
            ])),
            None => Ok(()),
        }
    }
    fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tools.lock().unwrap().clone()
    }
    fn take_notices(&self) -> Vec<ToolNotice> {
        std::mem::take(&mut *self.notices.lock().unwrap())
    }
}

fn specialist(loading: ToolLoading) -> SpecialistSpec {
    let mut spec = specialist_as("worker", "Work.", &[]);
    spec.tooling.tool_loading = loading;
    spec
}

async fn run(
    chat: &ScriptedChat,
    store: &MemStore,
    spec: SpecialistSpec,
    tools: Vec<Arc<dyn Tool>>,
    source: Arc<dyn ToolSource>,
) -> RunOutcome {
    let mut member = Member::new(
        spec.into(),
        tools,
        chat.client(),
        "k",
        ModelParams::named("m"),
    );
    member.sources = vec![source];
    let recruitment = Roster::explicit(Vec::new(), "test");
    let force = TaskForce::single("do it", member, recruitment, 6);
    fabric_core::execute::execute_task_force(store, force, &NoopObserver, CancellationToken::new())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_tool_that_arrives_late_is_offered_from_the_next_step() {
    let source = Arc::new(Growing::default());
    let late = source.clone();
    // During the first model call the source gains a tool, as an MCP server would.
    let chat = chat(
        vec![
            call("early", json!({})),
            call("mcp__late__ping", json!({})),
            finish(),
        ],
        move |n| {
            if n == 1 {
                late.add(echo("mcp__late__ping"));
            }
        },
    );
    let store = MemStore::new();
    let outcome = run(
        &chat,
        &store,
        specialist(ToolLoading::Eager),
        vec![echo("early")],
        source,
    )
    .await;
    assert_eq!(outcome.status, RunStatus::Completed);
    let offered = chat.offered();
    assert_eq!(offered[0], ["early", "finish_task"]);
    assert_eq!(offered[1], ["early", "mcp__late__ping", "finish_task"]);
    let notices = store.of(EventKind::McpServer);
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].payload["status"], "ready");
    // Recorded when the loop next looks: right after the step's call (issue #29: a tool
    // source's notices are recorded during and after each call, not only before the next
    // model call).
    assert_eq!(
        notices[0].step,
        Some(0),
        "recorded when the loop next looks"
    );
    assert!(store.of(EventKind::ToolError).is_empty());
}

#[tokio::test]
async fn a_required_source_that_fails_to_start_fails_the_run() {
    let source = Arc::new(Growing {
        fail_start: Some("required MCP server `gh` is not available: boom".into()),
        ..Growing::default()
    });
    let chat = chat(vec![finish()], |_| {});
    let store = MemStore::new();
    let outcome = run(
        &chat,
        &store,
        specialist(ToolLoading::Eager),
        vec![],
        source,
    )
    .await;
    assert_eq!(outcome.status, RunStatus::Failed);
    assert!(outcome.reason.unwrap().contains("`gh` is not available"));
    assert!(chat.offered().is_empty(), "no model call");
}

#[tokio::test]
async fn lazy_loading_offers_meta_tools_then_each_loaded_tool() {
    let source = Arc::new(Growing::default());
    source.add(echo("mcp__gh__create_issue"));
    source.add(echo("mcp__gh__list_repos"));
    let chat = chat(
        vec![
            call("mcp__gh__create_issue", json!({})),
            call("search_tools", json!({"query": "issue"})),
            call("load_tool_schema", json!({"name": "mcp__gh__create_issue"})),
            call("mcp__gh__create_issue", json!({"x": "bug"})),
            finish(),
        ],
        |_| {},
    );
    let store = MemStore::new();
    let outcome = run(
        &chat,
        &store,
        specialist(ToolLoading::Lazy),
        vec![echo("read_file")],
        source,
    )
    .await;
    assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.reason);
    let offered = chat.offered();
    assert_eq!(
        offered[0],
        ["search_tools", "load_tool_schema", "finish_task"]
    );
    assert_eq!(
        offered[3],
        [
            "search_tools",
            "load_tool_schema",
            "mcp__gh__create_issue",
            "finish_task"
        ]
    );
    let errors = store.of(EventKind::ToolError);
    let first = errors[0].payload["error_message"].as_str().unwrap();
    assert!(
        first.contains("not loaded yet; call load_tool_schema"),
        "{first}"
    );
    let results = store.of(EventKind::ToolResult);
    let search = results[0].payload["result"].as_str().unwrap();
    assert!(
        search.contains("mcp__gh__create_issue") && !search.contains("list_repos"),
        "{search}"
    );
    let called = results[2].payload["result"].as_str().unwrap();
    assert!(called.contains("got {\"x\":\"bug\"}"), "{called}");
}

#[tokio::test]
async fn an_old_name_reaches_the_current_tool() {
    let spec = ToolSpec::with_schema("list_files", "Lists.", json!({"type": "object"}))
        .unwrap()
        .alias("ls");
    let tool: Arc<dyn Tool> = Arc::new(Echo(spec));
    let chat = chat(vec![call("ls", json!({})), finish()], |_| {});
    let store = MemStore::new();
    let outcome = run(
        &chat,
        &store,
        specialist(ToolLoading::Eager),
        vec![tool],
        Arc::new(Growing::default()),
    )
    .await;
    assert_eq!(outcome.status, RunStatus::Completed);
    let results = store.of(EventKind::ToolResult);
    assert_eq!(results[0].payload["result"], "list_files got {}");
}
